//! LogP cost prediction for every algorithm, and the choice of the best one.
//!
//! Parameters ([`LogP`], microseconds): `o_s` the sender's CPU time per
//! message, `o_r` the receiver's, `g` the least interval between two sends on
//! one NIC, `L` the wire latency (NIC to NIC). One message costs
//! `o_s + L + o_r` end to end.
//!
//! Two predictions:
//! - [`closed_form`]: the paper's formulas (section 5) where they apply, for
//!   reading and for checking the simulator;
//! - [`simulate`]: a discrete-event LogP simulation of the algorithm's real
//!   message pattern (the same per-node plans the engine runs), with the gap
//!   between one node's sends on one rail, multicast as one send that every
//!   other node receives, and receives serialised on each node's CPU. Exact
//!   under the model for any n; 65,536 nodes take well under a second per
//!   algorithm (one-phase, whose n² messages are too many, uses its exact
//!   closed form above 1,024 nodes).
//!
//! [`auto`] picks the algorithm (and k) with the lowest simulated cost.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use crate::plan::{self, Algorithm, Dest, Fanout, Release};

/// LogP parameters in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogP {
    /// Send overhead: CPU time of one send.
    pub o_s: f64,
    /// Receive overhead: CPU time of one receive.
    pub o_r: f64,
    /// Gap: least time between two sends on one NIC.
    pub g: f64,
    /// Latency: NIC to NIC.
    #[serde(rename = "L")]
    pub l: f64,
}

impl LogP {
    /// The paper's measured MCD parameters (section 5): o_s 3, L 17.5, o_r 9.5, g 9 µs.
    pub const PAPER: LogP = LogP { o_s: 3.0, o_r: 9.5, g: 9.0, l: 17.5 };

    /// mcd's parameters as measured on the reference machine (2 vCPUs, veth
    /// and a Linux bridge; `bench/results/logp.json`): o_s 2.7, o_r 0.1,
    /// g 2.7, L 0 µs. The default for `Auto` when nothing was measured.
    pub const REFERENCE: LogP = LogP { o_s: 2.7, o_r: 0.1, g: 2.7, l: 0.0 };

    /// Parses `o_s,o_r,g,L` in microseconds (the form of `MCD_LOGP`).
    pub fn parse_list(s: &str) -> Result<LogP, String> {
        let v: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("`{s}` is not four non-negative numbers o_s,o_r,g,L (µs)"))?;
        match v[..] {
            [o_s, o_r, g, l] => Ok(LogP { o_s, o_r, g, l }),
            _ => Err(format!("`{s}` has {} numbers; give o_s,o_r,g,L (µs)", v.len())),
        }
    }

    /// One message end to end: o_s + L + o_r.
    pub fn message(&self) -> f64 {
        self.o_s + self.l + self.o_r
    }
}

/// The paper's closed forms, where one applies (`None` otherwise): shuffle
/// exchange (o_s+L+o_r)·log2 n; dissemination the same with ceil; the k-ary
/// (k-nomial) tree with multicast release (o_s+L+(k−1)·o_r)·log_k n + (o_s+L+o_r)
/// (for k = 2 the paper's binary tree, (o_s+L+o_r)(log2 n + 1)); concurrent
/// o_s+L+(n−1)·o_r + (o_s+L+o_r); one-phase o_s+L+(n−1)·o_r. Logs are rounded
/// up for n not a power of the base; the gap is ignored.
pub fn closed_form(algorithm: Algorithm, n: usize, p: &LogP) -> Option<f64> {
    if n <= 1 {
        return Some(0.0);
    }
    let m = p.message();
    let nf = n as f64;
    match algorithm {
        Algorithm::ShuffleExchange if n.is_power_of_two() => Some(m * plan::ceil_log(n, 2) as f64),
        Algorithm::ShuffleExchange => None,
        Algorithm::Dissemination => Some(m * plan::ceil_log(n, 2) as f64),
        Algorithm::Tree { k, release: Release::Multicast } => {
            Some((p.o_s + p.l + (k.get() - 1) as f64 * p.o_r) * plan::ceil_log(n, k.get()) as f64 + m)
        }
        Algorithm::Tree { release: Release::Tree, .. } => None,
        Algorithm::Concurrent => Some(p.o_s + p.l + (nf - 1.0) * p.o_r + m),
        Algorithm::OnePhase => Some(p.o_s + p.l + (nf - 1.0) * p.o_r),
    }
}

/// A simulated barrier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// When the last node leaves (all entered at time 0), µs: the barrier's cost.
    pub last_exit: f64,
    /// The mean over nodes of their exit times, µs.
    pub mean_exit: f64,
    /// Messages sent (a multicast counts once).
    pub messages: u64,
    /// Messages received, over all nodes (a multicast counts once per receiver).
    pub deliveries: u64,
}

/// One-phase is simulated message by message only up to this many nodes.
const ONEPHASE_SIMULATED_UP_TO: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Arrival {
    at: u64, // time in picoseconds, so events order exactly
    order: u64,
    to: u32,
    from: u32,
    tag: u16,
}

/// Simulates `algorithm` among `n` nodes over `rails` rails with LogP
/// parameters `p`, every node entering at time 0.
pub fn simulate(algorithm: Algorithm, n: usize, rails: usize, p: &LogP) -> Prediction {
    let rails = rails.max(1);
    if n <= 1 {
        return Prediction { last_exit: 0.0, mean_exit: 0.0, messages: 0, deliveries: 0 };
    }
    if algorithm == Algorithm::OnePhase && n > ONEPHASE_SIMULATED_UP_TO {
        let t = closed_form(algorithm, n, p).expect("one-phase has a closed form");
        return Prediction { last_exit: t, mean_exit: t, messages: n as u64, deliveries: (n * (n - 1)) as u64 };
    }
    const PS: f64 = 1e6; // picoseconds per microsecond
    let ps = |us: f64| (us * PS).round() as u64;
    let (o_s, o_r, g, l) = (ps(p.o_s), ps(p.o_r), ps(p.g), ps(p.l));
    let plans: Vec<plan::Plan> = (0..n).map(|me| plan::build(algorithm, n, me, rails).expect("a valid node and rail count")).collect();

    struct Node {
        step: usize,
        cpu_free: u64,
        rail_free: Vec<u64>,
        arrived: HashSet<(u32, u16)>,
        waiting_for: HashSet<(u32, u16)>,
        exit: Option<u64>,
    }
    let mut nodes: Vec<Node> = (0..n)
        .map(|_| Node {
            step: 0,
            cpu_free: 0,
            rail_free: vec![0; rails],
            arrived: HashSet::new(),
            waiting_for: HashSet::new(),
            exit: None,
        })
        .collect();
    let mut events: BinaryHeap<Reverse<Arrival>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut messages = 0u64;
    let mut deliveries = 0u64;

    // Runs node v from its current step as far as it can go at its cpu_free time.
    let mut run = |v: usize, nodes: &mut Vec<Node>, events: &mut BinaryHeap<Reverse<Arrival>>| {
        loop {
            let node = &mut nodes[v];
            let Some(step) = plans[v].steps.get(node.step) else {
                node.exit.get_or_insert(node.cpu_free);
                return;
            };
            if node.waiting_for.is_empty() {
                // Starting the step: send, then look at what is still to come.
                for out in &step.sends {
                    let start = node.cpu_free.max(node.rail_free[out.rail]);
                    node.cpu_free = start + o_s;
                    node.rail_free[out.rail] = start + g;
                    messages += 1;
                    let arrive = start + o_s + l;
                    let targets: Box<dyn Iterator<Item = usize>> = match out.dest {
                        Dest::Node(t) => Box::new(std::iter::once(t)),
                        Dest::All => Box::new((0..n).filter(move |&t| t != v)),
                    };
                    for t in targets {
                        order += 1;
                        events.push(Reverse(Arrival { at: arrive, order, to: t as u32, from: v as u32, tag: out.tag }));
                    }
                }
                node.waiting_for =
                    step.waits.iter().map(|w| (w.from as u32, w.tag)).filter(|k| !node.arrived.contains(k)).collect();
            }
            if node.waiting_for.is_empty() {
                node.step += 1;
            } else {
                return;
            }
        }
    };

    for v in 0..n {
        run(v, &mut nodes, &mut events);
    }
    while let Some(Reverse(a)) = events.pop() {
        deliveries += 1;
        let v = a.to as usize;
        let node = &mut nodes[v];
        node.cpu_free = node.cpu_free.max(a.at) + o_r;
        let key = (a.from, a.tag);
        node.arrived.insert(key);
        if node.waiting_for.remove(&key) && node.waiting_for.is_empty() {
            node.step += 1;
            run(v, &mut nodes, &mut events);
        }
    }
    let exits: Vec<f64> = nodes.iter().map(|nd| nd.exit.expect("every node finishes") as f64 / PS).collect();
    Prediction {
        last_exit: exits.iter().cloned().fold(0.0, f64::max),
        mean_exit: exits.iter().sum::<f64>() / n as f64,
        messages,
        deliveries,
    }
}

/// The algorithms [`auto`] chooses among: shuffle exchange, dissemination,
/// trees with k from 2 to 8 (multicast and tree release), concurrent, one-phase.
pub fn candidates(multicast: bool) -> Vec<Algorithm> {
    let mut all = vec![Algorithm::ShuffleExchange, Algorithm::Dissemination];
    for k in (2..=8).filter_map(Fanout::new) {
        if multicast {
            all.push(Algorithm::Tree { k, release: Release::Multicast });
        }
        all.push(Algorithm::Tree { k, release: Release::Tree });
    }
    if multicast {
        all.push(Algorithm::Concurrent);
        all.push(Algorithm::OnePhase);
    }
    all
}

/// The algorithm with the lowest simulated cost for `n` nodes on `rails`
/// rails under `p` (multicast ones only if the network multicasts), with its
/// prediction. Ties go to the earlier candidate.
pub fn auto(n: usize, rails: usize, p: &LogP, multicast: bool) -> (Algorithm, Prediction) {
    candidates(multicast)
        .into_iter()
        .map(|a| (a, simulate(a, n, rails, p)))
        .fold(None, |best: Option<(Algorithm, Prediction)>, (a, pr)| match best {
            Some((_, b)) if b.last_exit <= pr.last_exit => best,
            _ => Some((a, pr)),
        })
        .expect("there are candidates")
}

/// [`auto`] for nodes that share a host: `local_processes` of them on
/// `cores` cores. While they fit, as [`auto`]. When they do not, nodes wait
/// for a core rather than for the network, and each message delivered to a
/// node that is not running costs a context switch that no LogP parameter
/// holds; so the pick is the algorithm with the fewest deliveries, then the
/// lowest simulated time.
pub fn auto_on_host(n: usize, rails: usize, p: &LogP, multicast: bool, local_processes: usize, cores: usize) -> (Algorithm, Prediction) {
    if local_processes <= cores {
        return auto(n, rails, p, multicast);
    }
    candidates(multicast)
        .into_iter()
        .map(|a| (a, simulate(a, n, rails, p)))
        .fold(None, |best: Option<(Algorithm, Prediction)>, (a, pr)| match best {
            Some((_, b)) if (b.deliveries, b.last_exit) <= (pr.deliveries, pr.last_exit) => best,
            _ => Some((a, pr)),
        })
        .expect("there are candidates")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logp_lists_parse() {
        assert_eq!(LogP::parse_list("2.7, 0.1,2.7,0").unwrap(), LogP::REFERENCE);
        assert!(LogP::parse_list("1,2,3").unwrap_err().contains("3 numbers"));
        assert!(LogP::parse_list("1,2,x,4").is_err());
        assert!(LogP::parse_list("1,2,-3,4").is_err());
    }

    const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

    #[test]
    fn oversubscribed_hosts_pick_the_fewest_deliveries() {
        let p = LogP::REFERENCE;
        // One process per core: the fastest simulated algorithm, whatever it delivers.
        assert_eq!(auto_on_host(16, 1, &p, true, 2, 2).0, auto(16, 1, &p, true).0);
        // Sixteen on two cores: a gather plus one multicast release, 2(n-1) deliveries,
        // never one-phase's n(n-1).
        let (a, pr) = auto_on_host(16, 1, &p, true, 16, 2);
        assert_eq!(pr.deliveries, 30, "{a}");
        assert!(matches!(a, Algorithm::Tree { release: Release::Multicast, .. } | Algorithm::Concurrent), "{a}");
        assert_eq!(simulate(Algorithm::OnePhase, 16, 1, &p).deliveries, 240);
        assert_eq!(simulate(Algorithm::Dissemination, 16, 1, &p).deliveries, 64);
    }

    #[test]
    fn the_papers_analysis_at_16_nodes() {
        let p = LogP::PAPER;
        assert_eq!(p.message(), 30.0);
        assert_eq!(closed_form(Algorithm::ShuffleExchange, 16, &p), Some(120.0));
        // 3·(o_s+L+o_r) + 4·o_r = 90 + 38
        assert_eq!(closed_form(TREE4, 16, &p), Some(128.0));
        assert_eq!(closed_form(Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, 16, &p), Some(150.0));
    }

    #[test]
    fn the_4ary_tree_wins_exactly_when_three_receive_overheads_undercut_send_plus_latency() {
        for (o_r, wins) in [(9.5, false), (6.0, true), (6.8, true), (6.9, false)] {
            let p = LogP { o_r, ..LogP::PAPER }; // o_s + L = 20.5
            let tree = closed_form(TREE4, 16, &p).unwrap();
            let shuffle = closed_form(Algorithm::ShuffleExchange, 16, &p).unwrap();
            assert_eq!(tree < shuffle, 3.0 * o_r < p.o_s + p.l, "o_r = {o_r}");
            assert_eq!(tree < shuffle, wins, "o_r = {o_r}: tree {tree}, shuffle {shuffle}");
        }
    }

    #[test]
    fn the_simulator_agrees_with_the_closed_forms_when_the_gap_does_not_bind() {
        let p = LogP { g: 0.0, ..LogP::PAPER };
        for n in [2, 4, 8, 16, 64, 256] {
            for a in [Algorithm::ShuffleExchange, Algorithm::Dissemination, Algorithm::Concurrent, Algorithm::OnePhase] {
                let sim = simulate(a, n, 1, &p).last_exit;
                let closed = closed_form(a, n, &p).unwrap();
                assert!((sim - closed).abs() < 1e-6, "{a} n={n}: simulated {sim}, closed form {closed}");
            }
            for k in [2usize, 4] {
                let a = Algorithm::tree(k, Release::Multicast).unwrap();
                if n.is_power_of_two() && (n.trailing_zeros() as usize).is_multiple_of(k.trailing_zeros() as usize) {
                    let sim = simulate(a, n, 1, &p).last_exit;
                    // The simulated root pays o_s per sibling subtree it finished,
                    // not more: the closed form is an upper bound that it meets
                    // when every phase is full.
                    let closed = closed_form(a, n, &p).unwrap();
                    assert!((sim - closed).abs() < 1e-6, "{a} n={n}: simulated {sim}, closed form {closed}");
                }
            }
        }
        assert_eq!(simulate(TREE4, 16, 1, &p).last_exit, 128.0);
    }

    #[test]
    fn the_gap_and_rails_change_what_one_node_sends_in_a_row() {
        // The p2p tree root sends k−1 releases in a row: the gap binds.
        let a = Algorithm::Tree { k: Fanout::FOUR, release: Release::Tree };
        let no_gap = simulate(a, 16, 1, &LogP { g: 0.0, ..LogP::PAPER }).last_exit;
        let gap = simulate(a, 16, 1, &LogP { g: 20.0, ..LogP::PAPER }).last_exit;
        let two_rails = simulate(a, 16, 2, &LogP { g: 20.0, ..LogP::PAPER }).last_exit;
        assert!(gap > no_gap && two_rails < gap, "{no_gap} {gap} {two_rails}");
    }

    #[test]
    fn sixty_five_thousand_nodes_simulate_quickly() {
        let start = std::time::Instant::now();
        for a in [Algorithm::Dissemination, TREE4, Algorithm::Concurrent, Algorithm::OnePhase] {
            let pr = simulate(a, 65_536, 1, &LogP::PAPER);
            assert!(pr.last_exit > 0.0);
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "{:?}", start.elapsed());
    }

    #[test]
    fn auto_follows_the_parameters() {
        // With the paper's o_r, shuffle exchange beats the 4-ary tree at 16;
        // with a tiny o_r, a wide multicast tree or one-phase wins.
        let paper = auto(16, 1, &LogP::PAPER, true).0;
        assert!(!matches!(paper, Algorithm::Tree { k: Fanout::FOUR, .. }), "{paper}");
        let cheap_receive = auto(16, 1, &LogP { o_r: 0.5, ..LogP::PAPER }, true).0;
        assert!(matches!(cheap_receive, Algorithm::Tree { .. } | Algorithm::OnePhase | Algorithm::Concurrent), "{cheap_receive}");
        let no_multicast = auto(16, 1, &LogP::PAPER, false).0;
        assert!(!no_multicast.uses_multicast(), "{no_multicast}");
    }
}
