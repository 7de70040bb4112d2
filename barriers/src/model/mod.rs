//! Cost prediction for every algorithm, and the choice of the best one.
//!
//! Parameters ([`LogP`], microseconds): `o_s` the sender's CPU time per
//! message, `o_r` the receiver's, `g` the least interval between two sends on
//! one NIC, `L` the wire latency (NIC to NIC). One message costs
//! `o_s + L + o_r` end to end.
//!
//! Predictions:
//! - [`closed_form`]: the paper's formulas (section 5) where they apply, for
//!   reading and for checking the simulator;
//! - [`predict`]: a discrete-event simulation of the algorithm's real message
//!   pattern (the same per-node plans the engine runs) on a [`Setup`]: the
//!   send gap and a receive gap per NIC (LogP's `g` bounds both), LogGP's
//!   `G` and the message size, frame serialisation on a [`Link`] (preamble
//!   and inter-frame gap included), a switch with one output queue per port
//!   or a repeater hub simulated as CSMA/CD with binary exponential backoff,
//!   or a software bridge that floods without collisions ([`Topology`]),
//!   the copies a software bridge makes in the sender's context
//!   ([`Setup::fanout_us`], [`Setup::flood_us`]), rails, and [`Host`]s
//!   (interrupt coalescing, send completion interrupts, wake-ups, processes
//!   sharing cores). Exact under
//!   the model for any n; 65,536 nodes take well under a second per
//!   algorithm (one-phase, whose n² messages are too many, uses a bound
//!   above 1,024 nodes). [`simulate`] is [`predict`] on plain LogP;
//! - [`steady_state`]: the paper's benchmark loop (barrier, 30 µs of work,
//!   100 times, each node's mean), which [`paper_figure`] runs on the
//!   paper's hardware ([`Setup::paper`]).
//!
//! [`auto`] / [`auto_with`] pick the algorithm (and k) with the lowest
//! simulated cost; [`hierarchy::auto_layout`] also picks between every rank
//! on the wire and the hierarchical barrier (hosts × ranks per host).
//! [`VirtualCluster`] models nodes that are processes of one machine (the
//! virtual cluster), with bounds where they outnumber its cores.

mod bursts;
pub mod hierarchy;
pub mod host;
pub mod link;
pub mod protocol;
mod sim;
pub mod virtual_cluster;

pub use hierarchy::{auto_layout, Layout, ShmCosts};
pub use host::Host;
pub use link::{Link, Topology};
pub use virtual_cluster::{Estimate, Verdict, VirtualCluster};

use crate::plan::{self, Algorithm, Fanout, Release};
use crate::types::BarrierConfig;

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
        let v = LogP::parse_numbers(s).map_err(|_| format!("`{s}` is not four non-negative numbers o_s,o_r,g,L (µs)"))?;
        match v[..] {
            [o_s, o_r, g, l] => Ok(LogP { o_s, o_r, g, l }),
            _ => Err(format!("`{s}` has {} numbers; give o_s,o_r,g,L (µs)", v.len())),
        }
    }

    /// Parses comma-separated non-negative numbers (µs), however many.
    pub fn parse_numbers(s: &str) -> Result<Vec<f64>, String> {
        s.split(',')
            .map(|x| x.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("`{s}` is not a list of non-negative numbers (µs)"))
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
    /// When the last node leaves (all entered at time 0), µs: the barrier's
    /// cost. In a [`steady_state`] run: the mean over barriers of the
    /// largest per-node cost.
    pub last_exit: f64,
    /// The mean over nodes of their exit times, µs.
    pub mean_exit: f64,
    /// The mean over nodes of (leave − enter) per barrier, µs: what the
    /// paper's benchmark reports. Equal to `mean_exit` for a single barrier.
    pub mean_cost: f64,
    /// Messages sent (a multicast counts once).
    pub messages: u64,
    /// Messages received, over all nodes (a multicast counts once per receiver).
    pub deliveries: u64,
}

/// Everything the simulator knows about a machine: LogP, the receive gap,
/// LogGP's G and the message size, the link and its topology, the hosts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setup {
    /// o_s, o_r, g (between one NIC's sends), L (NIC to NIC, one frame included).
    pub logp: LogP,
    /// Receive gap: least time between two frames one NIC delivers, µs.
    pub g_r: f64,
    /// LogGP's G: µs per byte added to the send gap.
    pub big_g: f64,
    /// Payload bytes per message.
    pub bytes: usize,
    /// The link, for frame serialisation and the hub's CSMA/CD timing; `None`: no wire limit.
    pub link: Option<Link>,
    /// Switch, repeater hub or flooding bridge (every rail the same).
    pub topology: Topology,
    /// Where a software bridge copies frames in the sender's context (veth),
    /// the sender's CPU time per receiver of a multicast beyond the first,
    /// µs: each copy is delivered into a receiver's ring. 0 where the
    /// network copies (hardware switches and hubs).
    pub fanout_us: f64,
    /// The same per port a unicast is flooded to beyond its destination on
    /// a [`Topology::FloodingBridge`], µs: each copy crosses to the port's
    /// namespace, whose socket filter drops it (`PACKET_OTHERHOST`).
    pub flood_us: f64,
    /// Interrupts and shared cores.
    pub host: Host,
}

impl Setup {
    /// Plain LogP: `g` bounds one NIC's receptions as it bounds its sends,
    /// a switch, no wire limit, a core per node.
    pub fn logp(p: &LogP) -> Setup {
        Setup {
            logp: *p,
            g_r: p.g,
            big_g: 0.0,
            bytes: 4,
            link: None,
            topology: Topology::Switch,
            fanout_us: 0.0,
            flood_us: 0.0,
            host: Host::DEDICATED,
        }
    }

    /// `p` on `link`: frames serialise on it and a NIC receives no faster than its link.
    pub fn on_link(p: &LogP, link: Link) -> Setup {
        Setup { link: Some(link), ..Setup::logp(p) }
    }

    /// A host with `p`'s overheads (o_s, o_r, g) on a `link` preset behind
    /// one switch: L is the link's typical latency, and the NIC receives at
    /// line rate (g_r one frame time).
    pub fn preset(p: &LogP, link: Link) -> Setup {
        let logp = LogP { l: link.latency_us, ..*p };
        let s = Setup::on_link(&logp, link);
        Setup { g_r: link.frame_us(s.bytes), ..s }
    }

    /// The paper's hardware: [`LogP::PAPER`] on Fast Ethernet, [`Host::PAPER`]
    /// (interrupt-driven receive with coalescing, 6 µs send-completion
    /// interrupt), 4-byte messages, behind a switch or a repeater hub.
    pub fn paper(topology: Topology) -> Setup {
        Setup { topology, host: Host::PAPER, ..Setup::on_link(&LogP::PAPER, Link::FAST_ETHERNET) }
    }

    /// The same with `topology`.
    pub fn with_topology(self, topology: Topology) -> Setup {
        Setup { topology, ..self }
    }

    /// The same with `host`.
    pub fn with_host(self, host: Host) -> Setup {
        Setup { host, ..self }
    }
}

/// One-phase is simulated message by message only up to this many nodes.
const ONEPHASE_SIMULATED_UP_TO: usize = 1024;

/// Seeds over which hub results (random backoff) are averaged.
pub const HUB_SEEDS: u64 = 8;

/// Simulates `algorithm` among `n` nodes over `rails` rails with LogP
/// parameters `p` ([`Setup::logp`]: the receive gap is `g`), every node
/// entering at time 0.
pub fn simulate(algorithm: Algorithm, n: usize, rails: usize, p: &LogP) -> Prediction {
    predict(algorithm, n, rails, &Setup::logp(p))
}

/// One barrier, every node entering at time 0, on `setup` (the mean over
/// [`HUB_SEEDS`] seeds on a hub).
pub fn predict(algorithm: Algorithm, n: usize, rails: usize, setup: &Setup) -> Prediction {
    repeat(algorithm, n, rails, setup, sim::Runs { iterations: 1, warmup: 0, dummy_us: 0.0 })
}

/// The paper's benchmark (its Fig. 4): every node loops `iterations` times
/// over { barrier; `dummy_us` of work }, and the result is each node's mean
/// barrier time averaged over nodes ([`Prediction::mean_cost`]), the first
/// few barriers left out as warm-up.
pub fn steady_state(algorithm: Algorithm, n: usize, rails: usize, setup: &Setup, iterations: u32, dummy_us: f64) -> Prediction {
    let iterations = iterations.max(2);
    repeat(algorithm, n, rails, setup, sim::Runs { iterations, warmup: (iterations / 10).max(1), dummy_us })
}

fn repeat(algorithm: Algorithm, n: usize, rails: usize, setup: &Setup, runs: sim::Runs) -> Prediction {
    if n <= 1 {
        return Prediction { last_exit: 0.0, mean_exit: 0.0, mean_cost: 0.0, messages: 0, deliveries: 0 };
    }
    if algorithm == Algorithm::OnePhase && n > ONEPHASE_SIMULATED_UP_TO {
        let t = onephase_bound(n, setup);
        return Prediction { last_exit: t, mean_exit: t, mean_cost: t, messages: n as u64, deliveries: (n * (n - 1)) as u64 };
    }
    if setup.topology != Topology::Hub {
        return sim::run(algorithm, n, rails, setup, runs, 1);
    }
    let all: Vec<Prediction> = (1..=HUB_SEEDS).map(|seed| sim::run(algorithm, n, rails, setup, runs, seed)).collect();
    mean_of(&all)
}

/// The paper's ternary tree as its numbers show it was built: every parent
/// gathers its two children (node i's children are 2i+1 and 2i+2, on rails
/// 0 and 1 of `rails`), then the master multicasts the release. A tree of
/// two children per parent has log2(n+1) − 1 gather levels, each costing
/// o_s + L + 2·o_r, so 31 nodes is its full size (the paper measured 31),
/// 15 nodes three levels and 31 four; mcd's `tree3` is the k-nomial tree
/// of [`crate::plan`] instead, log3 n phases of two receives each.
pub fn two_child_tree_plans(n: usize, rails: usize) -> Vec<plan::Plan> {
    use plan::{Expect, Out, Step};
    let rails = rails.max(1);
    (0..n)
        .map(|me| {
            let children: Vec<usize> = [2 * me + 1, 2 * me + 2].into_iter().filter(|&c| c < n).collect();
            let mut steps = Vec::new();
            if !children.is_empty() {
                steps.push(Step { sends: vec![], waits: children.iter().map(|&c| Expect { from: c, tag: plan::tag::ARRIVE }).collect() });
            }
            if me == 0 {
                steps.push(Step { sends: vec![Out { dest: plan::Dest::All, rail: 0, tag: plan::tag::RELEASE }], waits: vec![] });
            } else {
                let (parent, index) = ((me - 1) / 2, (me - 1) % 2);
                steps.push(Step {
                    sends: vec![Out { dest: plan::Dest::Node(parent), rail: index % rails, tag: plan::tag::ARRIVE }],
                    waits: vec![Expect { from: 0, tag: plan::tag::RELEASE }],
                });
            }
            plan::Plan { steps }
        })
        .collect()
}

/// [`steady_state`] (or, with `iterations` 1, [`predict`]) of any per-node
/// plans, such as [`two_child_tree_plans`].
pub fn simulate_plans(plans: &[plan::Plan], rails: usize, setup: &Setup, iterations: u32, dummy_us: f64) -> Prediction {
    let n = plans.len();
    let runs = if iterations <= 1 {
        sim::Runs { iterations: 1, warmup: 0, dummy_us: 0.0 }
    } else {
        sim::Runs { iterations, warmup: (iterations / 10).max(1), dummy_us }
    };
    if n <= 1 {
        return Prediction { last_exit: 0.0, mean_exit: 0.0, mean_cost: 0.0, messages: 0, deliveries: 0 };
    }
    let seeds = if setup.topology == Topology::Hub { HUB_SEEDS } else { 1 };
    let all: Vec<Prediction> = (1..=seeds).map(|seed| sim::run_plans("plans", n, rails.max(1), &|v| plans[v].clone(), setup, runs, seed)).collect();
    mean_of(&all)
}

/// The paper's benchmark loop: 100 barriers, each followed by about 30 µs of work.
pub const PAPER_LOOP: (u32, f64) = (100, 30.0);

/// One of the paper's figures as its benchmark measured it: `algorithm`
/// (`None`: its ternary tree, [`two_child_tree_plans`]) among `n` nodes on
/// `rails` networks of `topology`, on [`Setup::paper`], in the loop of
/// [`PAPER_LOOP`]; compare [`Prediction::mean_cost`] with the figure.
pub fn paper_figure(algorithm: Option<Algorithm>, n: usize, rails: usize, topology: Topology) -> Prediction {
    let setup = Setup::paper(topology);
    let (iterations, dummy) = PAPER_LOOP;
    match algorithm {
        Some(a) => steady_state(a, n, rails, &setup, iterations, dummy),
        None => simulate_plans(&two_child_tree_plans(n, rails), rails, &setup, iterations, dummy),
    }
}

fn mean_of(all: &[Prediction]) -> Prediction {
    let mean = |f: fn(&Prediction) -> f64| all.iter().map(f).sum::<f64>() / all.len() as f64;
    Prediction {
        last_exit: mean(|p| p.last_exit),
        mean_exit: mean(|p| p.mean_exit),
        mean_cost: mean(|p| p.mean_cost),
        messages: all[0].messages,
        deliveries: all[0].deliveries,
    }
}

/// One-phase beyond [`ONEPHASE_SIMULATED_UP_TO`] nodes on a switch: every
/// node's n−1 arrivals come in at the pace of the slowest of its port, its
/// NIC and its CPU: o_s + L + (n−2)·max(frame, g_r, o_r) + o_r.
fn onephase_bound(n: usize, s: &Setup) -> f64 {
    let p = &s.logp;
    let frame = s.link.map_or(0.0, |l| l.frame_us(s.bytes));
    p.o_s + p.l + (n as f64 - 2.0) * frame.max(s.g_r).max(p.o_r) + p.o_r
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
    auto_with(n, rails, &Setup::logp(p), multicast)
}

/// [`auto`] on any [`Setup`].
pub fn auto_with(n: usize, rails: usize, setup: &Setup, multicast: bool) -> (Algorithm, Prediction) {
    candidates(multicast)
        .into_iter()
        .map(|a| (a, predict(a, n, rails, setup)))
        .fold(None, |best: Option<(Algorithm, Prediction)>, (a, pr)| match best {
            Some((_, b)) if b.last_exit <= pr.last_exit => best,
            _ => Some((a, pr)),
        })
        .expect("there are candidates")
}

/// The most data one collective message carries on a 1500-byte MTU over a
/// shared endpoint's group (the C ABI's), with authenticated frames (the
/// default): 1442 bytes (1500 less the 16-byte MCD header, the 20-byte
/// trailer and the group's 22 bytes) less the contribution's 12-byte
/// header, in whole 8-byte elements. (1448 with authentication off.)
/// Longer data goes in segments of this size, one epoch each
/// ([`crate::collective`]).
pub const SEGMENT_BYTES: usize = 1424;

/// The segments `bytes` of collective data take, and the size of the last
/// (the others carry [`SEGMENT_BYTES`]); at least one, for 0 bytes.
pub fn segments(bytes: usize) -> (usize, usize) {
    let count = bytes.div_ceil(SEGMENT_BYTES).max(1);
    (count, bytes - (count - 1) * SEGMENT_BYTES)
}

/// The predicted cost of a collective of `bytes` bytes of data with
/// `algorithm`: one epoch per segment ([`segments`]), each message of a
/// segment carrying its data and the contribution's header at `setup`'s
/// `G` per byte; the segments' times add up (they run one after another).
pub fn collective_cost(algorithm: Algorithm, n: usize, rails: usize, setup: &Setup, bytes: usize) -> Prediction {
    let (count, last) = segments(bytes);
    let one = |b: usize| predict(algorithm, n, rails, &Setup { bytes: b + crate::collective::wire::HEADER_LEN, ..*setup });
    let tail = one(last);
    if count == 1 {
        return tail;
    }
    let full = one(SEGMENT_BYTES);
    let k = (count - 1) as f64;
    Prediction {
        last_exit: full.last_exit * k + tail.last_exit,
        mean_exit: full.mean_exit * k + tail.mean_exit,
        mean_cost: full.mean_cost * k + tail.mean_cost,
        messages: full.messages * (count as u64 - 1) + tail.messages,
        deliveries: full.deliveries * (count as u64 - 1) + tail.deliveries,
    }
}

/// [`auto`] for a collective of `bytes` bytes of data, among the
/// algorithms that reduce (every candidate but dissemination, which would
/// count contributions more than once), by [`collective_cost`]: the size
/// decides through `setup`'s `G` per byte and the number of segments.
pub fn auto_collective(n: usize, rails: usize, setup: &Setup, multicast: bool, bytes: usize) -> (Algorithm, Prediction) {
    let reduce = crate::Collective::Allreduce { op: crate::Op::Sum, dtype: crate::Dtype::F64 };
    candidates(multicast)
        .into_iter()
        .filter(|&a| reduce.runs_on(a))
        .map(|a| (a, collective_cost(a, n, rails, setup, bytes)))
        .fold(None, |best: Option<(Algorithm, Prediction)>, (a, pr)| match best {
            Some((_, b)) if b.last_exit <= pr.last_exit => best,
            _ => Some((a, pr)),
        })
        .expect("there are candidates")
}

/// [`auto_collective`] for nodes that share a host, `local_processes` of
/// them on `cores` cores: while they fit, as [`auto_collective`]; when they
/// do not, as [`auto_on_host`] does for barriers, the fewest deliveries,
/// then the lowest simulated time of `bytes` ([`collective_cost`]: its
/// segments and `G`) (measured at 4 and 8 processes on 2 cores: the tree
/// and concurrent beat recursive doubling by a quarter).
pub fn auto_collective_on_host(
    n: usize,
    rails: usize,
    setup: &Setup,
    multicast: bool,
    bytes: usize,
    local_processes: usize,
    cores: usize,
) -> (Algorithm, Prediction) {
    if local_processes <= cores {
        return auto_collective(n, rails, setup, multicast, bytes);
    }
    let reduce = crate::Collective::Allreduce { op: crate::Op::Sum, dtype: crate::Dtype::F64 };
    candidates(multicast)
        .into_iter()
        .filter(|&a| reduce.runs_on(a))
        .map(|a| (a, collective_cost(a, n, rails, &Setup { host: Host::DEDICATED, ..*setup }, bytes)))
        .fold(None, |best: Option<(Algorithm, Prediction)>, (a, pr)| match best {
            Some((_, b)) if (b.deliveries, b.last_exit) <= (pr.deliveries, pr.last_exit) => best,
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

/// The configurations the model picks (here, not beside [`BarrierConfig`]'s
/// other constructors in `types`, which the model's simulators use: that
/// would be an import cycle).
impl BarrierConfig {
    /// The algorithm with the lowest predicted cost ([`auto`]) for
    /// `nodes` nodes on `rails` rails under LogP parameters `params` (as
    /// measured by `mcd-logp`), multicast algorithms only if `multicast`.
    pub fn auto(nodes: usize, rails: usize, params: &LogP, multicast: bool) -> BarrierConfig {
        BarrierConfig::new(auto(nodes, rails, params, multicast).0).rails(rails)
    }

    /// As [`auto`](Self::auto) for nodes sharing a host, `local_processes`
    /// of them on `cores` cores ([`auto_on_host`]).
    pub fn auto_on_host(nodes: usize, rails: usize, params: &LogP, multicast: bool, local_processes: usize, cores: usize) -> BarrierConfig {
        BarrierConfig::new(auto_on_host(nodes, rails, params, multicast, local_processes, cores).0).rails(rails)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_odd_number_of_processes_on_fewer_cores_is_simulated() {
        // 3 processes on 2 cores: node 1 runs on core 1, node 2 on core 0.
        let host = Host { per_barrier: 3.3, ..Host::shared(3, 2, 23.0) };
        let setup = Setup::logp(&LogP::REFERENCE).with_host(host);
        for a in [Algorithm::OnePhase, Algorithm::ShuffleExchange, Algorithm::Dissemination] {
            assert!(steady_state(a, 3, 1, &setup, 10, 30.0).mean_cost > 0.0, "{a}");
        }
    }

    #[test]
    fn auto_for_a_collective_never_picks_dissemination_and_prices_the_bytes() {
        let p = LogP::REFERENCE;
        for n in [2, 3, 5, 8, 16, 64] {
            for bytes in [8, SEGMENT_BYTES] {
                let setup = Setup { big_g: 0.01, ..Setup::logp(&p) };
                let (a, pr) = auto_collective(n, 1, &setup, true, bytes);
                assert_ne!(a, Algorithm::Dissemination, "n={n} bytes={bytes}");
                // Never worse than any algorithm that reduces, at that size.
                let sized = Setup { bytes: bytes + crate::collective::wire::HEADER_LEN, ..setup };
                for other in candidates(true).into_iter().filter(|&o| o != Algorithm::Dissemination) {
                    assert!(pr.last_exit <= predict(other, n, 1, &sized).last_exit, "n={n} bytes={bytes}: {a} against {other}");
                }
            }
        }
        // More processes than cores: the fewest deliveries (not recursive doubling).
        let (a, _) = auto_collective_on_host(8, 1, &Setup::logp(&p), true, 8, 8, 2);
        assert!(matches!(a, Algorithm::Tree { .. } | Algorithm::Concurrent), "{a}");
        assert_eq!(auto_collective_on_host(8, 1, &Setup::logp(&p), true, 8, 2, 2).0, auto_collective(8, 1, &Setup::logp(&p), true, 8).0);
        // G per byte makes a frame of data cost more than 8 bytes do.
        let setup = Setup { big_g: 0.01, ..Setup::logp(&p) };
        assert!(auto_collective(8, 1, &setup, true, SEGMENT_BYTES).1.last_exit > auto_collective(8, 1, &setup, true, 8).1.last_exit);
    }

    #[test]
    fn a_collectives_size_decides_through_g_and_segments() {
        assert_eq!(segments(0), (1, 0));
        assert_eq!(segments(SEGMENT_BYTES), (1, SEGMENT_BYTES));
        assert_eq!(segments(4096), (3, 4096 - 2 * SEGMENT_BYTES));
        assert_eq!(segments(65536).0, 47);
        let p = LogP::REFERENCE;
        // Segments add up: 4 KiB costs two full frames and the rest.
        let setup = Setup { big_g: 0.005, ..Setup::logp(&p) };
        let a = Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast };
        let sized = |b: usize| predict(a, 8, 1, &Setup { bytes: b + crate::collective::wire::HEADER_LEN, ..setup }).last_exit;
        let cost = collective_cost(a, 8, 1, &setup, 4096);
        assert!((cost.last_exit - (2.0 * sized(SEGMENT_BYTES) + sized(4096 - 2 * SEGMENT_BYTES))).abs() < 1e-9);
        assert_eq!(cost.messages, 3 * predict(a, 8, 1, &setup).messages);
        // With a costly G, one-phase (every node receives every contribution)
        // loses to an algorithm that combines on the way as the data grows:
        // the pick changes with the size, and it is the cheapest at each.
        let setup = Setup { big_g: 0.05, g_r: 5.0, ..Setup::logp(&p) };
        let small = auto_collective(16, 1, &setup, true, 8);
        let large = auto_collective(16, 1, &setup, true, 65536);
        assert_ne!(large.0, Algorithm::OnePhase, "64 KiB to 16 nodes: not n(n-1) deliveries of every segment");
        for other in candidates(true).into_iter().filter(|&o| o != Algorithm::Dissemination) {
            assert!(large.1.last_exit <= collective_cost(other, 16, 1, &setup, 65536).last_exit, "{} against {other}", large.0);
            assert!(small.1.last_exit <= collective_cost(other, 16, 1, &setup, 8).last_exit, "{} against {other}", small.0);
        }
        // Oversubscribed: still the fewest deliveries first, then the size's time.
        let (a, pr) = auto_collective_on_host(8, 1, &setup, true, 65536, 8, 2);
        assert!(matches!(a, Algorithm::Tree { .. } | Algorithm::Concurrent), "{a}");
        assert_eq!(pr.deliveries, 47 * 14, "a gather and one multicast release per segment");
    }

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

    /// At 65,536 nodes (4^8: a full 4-ary tree), the largest size the
    /// model's plots claim, the simulator runs every node's plan and meets
    /// the closed forms where no gap binds, as it does at 2 to 256 nodes:
    /// nothing in it (plans, node numbers, counts, the event queue) breaks
    /// with size. Its speed there is a benchmark, not a test:
    /// `cargo run --release -p barriers --example model_scale`
    /// (bench/results/model_scale.md).
    #[test]
    fn sixty_five_thousand_nodes_simulate_as_the_closed_forms_say() {
        let p = LogP { g: 0.0, ..LogP::PAPER };
        let n = 65_536u64;
        // (algorithm, messages, deliveries): dissemination sends to one
        // peer per round (16 rounds); the tree multicasts from each node
        // once; concurrent's arrivals go to node 0, its release to all;
        // one-phase's every node multicasts to every other.
        let expect = [
            (Algorithm::Dissemination, n * 16, n * 16),
            (TREE4, n, 2 * (n - 1)),
            (Algorithm::Concurrent, n, 2 * (n - 1)),
            (Algorithm::OnePhase, n, n * (n - 1)),
        ];
        for (a, messages, deliveries) in expect {
            let pr = simulate(a, n as usize, 1, &p);
            let closed = closed_form(a, n as usize, &p).unwrap();
            assert!((pr.last_exit - closed).abs() < 1e-6, "{a}: simulated {}, closed form {closed}", pr.last_exit);
            assert_eq!((pr.messages, pr.deliveries), (messages, deliveries), "{a}");
        }
    }

    /// [`plan::REDUCE_GATHER_MAX`]: up to that many nodes, a gather of
    /// every contribution straight to the root (o_s + L + (n−1)·o_r) is the
    /// cheapest k-nomial gather ((o_s + L + (k−1)·o_r)·⌈log_k n⌉) under the
    /// reference machine's parameters; beyond, a tree's is cheaper.
    #[test]
    fn a_flat_gather_is_the_cheapest_up_to_the_reduces_own_plan_limit() {
        let p = LogP::REFERENCE;
        let gather = |k: usize, n: usize| (p.o_s + p.l + (k - 1) as f64 * p.o_r) * plan::ceil_log(n, k) as f64;
        let best_tree = |n: usize| (2..n).map(|k| gather(k, n)).fold(f64::INFINITY, f64::min);
        for n in 3..=plan::REDUCE_GATHER_MAX {
            assert!(gather(n, n) <= best_tree(n), "n={n}: flat {} against a tree's {}", gather(n, n), best_tree(n));
        }
        let beyond = 2 * plan::REDUCE_GATHER_MAX;
        assert!(gather(beyond, beyond) > best_tree(beyond), "at {beyond} nodes a tree gathers faster");
    }

    #[test]
    fn auto_follows_the_parameters() {
        // With the paper's o_r, shuffle exchange beats the 4-ary tree at 16;
        // with a tiny o_r, a wide multicast tree or one-phase wins.
        let paper = auto(16, 1, &LogP::PAPER, true).0;
        assert!(!matches!(paper, Algorithm::Tree { k: Fanout::FOUR, .. }), "{paper}");
        let cheap_receive = auto(16, 1, &LogP { o_r: 0.5, g: 0.5, ..LogP::PAPER }, true).0;
        assert!(matches!(cheap_receive, Algorithm::Tree { .. } | Algorithm::OnePhase | Algorithm::Concurrent), "{cheap_receive}");
        let no_multicast = auto(16, 1, &LogP::PAPER, false).0;
        assert!(!no_multicast.uses_multicast(), "{no_multicast}");
    }

    const T2: Algorithm = Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast };
    const T3: Algorithm = Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast };

    #[test]
    fn one_phase_on_gigabit_takes_at_least_63_frame_times_at_64_nodes() {
        // o_r = 0.1 µs would say 9 µs; a 1 GbE port delivers one 84-byte frame per 0.672 µs.
        let s = Setup::on_link(&LogP::REFERENCE, Link::GBE_1);
        let frames = 63.0 * Link::GBE_1.frame_us(s.bytes);
        let t = predict(Algorithm::OnePhase, 64, 1, &s).last_exit;
        assert!(t >= frames, "{t} < {frames}");
        // With g bounding receptions too (plain LogP), 63 receptions take 63 gaps.
        let logp = simulate(Algorithm::OnePhase, 64, 1, &LogP::REFERENCE).last_exit;
        assert!(logp >= 62.0 * LogP::REFERENCE.g, "{logp}");
        // Without a receive gap or a wire, the old answer.
        let none = predict(Algorithm::OnePhase, 64, 1, &Setup { g_r: 0.0, ..Setup::logp(&LogP::REFERENCE) }).last_exit;
        assert!((none - (2.7 + 63.0 * 0.1)).abs() < 1e-6, "{none}");
        // And Auto no longer picks one-phase there.
        for n in [16, 32, 64] {
            assert_ne!(auto(n, 1, &LogP::REFERENCE, true).0, Algorithm::OnePhase, "n={n}");
            assert_ne!(auto_with(n, 1, &s, true).0, Algorithm::OnePhase, "n={n}");
        }
    }

    #[test]
    fn a_hub_is_slower_than_a_switch_under_contention_and_alike_without() {
        let (sw, hub) = (Setup::paper(Topology::Switch), Setup::paper(Topology::Hub));
        for a in [Algorithm::ShuffleExchange, Algorithm::Concurrent, T2] {
            let (s, h) = (predict(a, 32, 1, &sw).last_exit, predict(a, 32, 1, &hub).last_exit);
            assert!(h > 1.5 * s, "{a}: hub {h} switch {s}");
        }
        // Two nodes, one frame at a time each way... except shuffle's two
        // simultaneous sends, which collide once; a tree's single message does not.
        let (s, h) = (predict(T2, 2, 1, &sw).last_exit, predict(T2, 2, 1, &hub).last_exit);
        assert!((s - h).abs() < 1e-6, "{s} {h}");
        // Without a link there is nothing to time collisions by: the frames take turns.
        let bare = Setup { topology: Topology::Hub, ..Setup::logp(&LogP::PAPER) };
        let turns = predict(Algorithm::Concurrent, 8, 1, &bare).last_exit;
        assert!(turns >= predict(Algorithm::Concurrent, 8, 1, &Setup::logp(&LogP::PAPER)).last_exit, "{turns}");
        // The hub's backoff is seeded: the same setup gives the same answer.
        assert_eq!(predict(Algorithm::ShuffleExchange, 16, 1, &hub), predict(Algorithm::ShuffleExchange, 16, 1, &hub));
    }

    #[test]
    fn message_size_costs_serialisation_and_g() {
        let base = Setup::on_link(&LogP { o_s: 1.0, o_r: 0.1, g: 0.1, l: 2.0 }, Link::GBE_1);
        let t = |bytes, big_g| predict(Algorithm::Concurrent, 32, 1, &Setup { bytes, big_g, ..base }).last_exit;
        // 31 frames into the master's port: the gather grows with the frame.
        let (small, large) = (t(4, 0.0), t(1400, 0.0));
        let grow = 30.0 * (Link::GBE_1.frame_us(1400) - Link::GBE_1.frame_us(4));
        assert!(large - small >= grow * 0.99, "{small} {large} {grow}");
        // G lengthens one node's sends in a row (the p2p release).
        let p2p = Algorithm::tree(8, Release::Tree).unwrap();
        let g = |big_g| predict(p2p, 64, 1, &Setup { bytes: 1000, big_g, ..base }).last_exit;
        assert!(g(0.01) > g(0.0) + 5.0, "{} {}", g(0.01), g(0.0));
    }

    #[test]
    fn the_papers_switch_and_hub_figures_within_15_percent() {
        // (algorithm or the two-child tree, nodes, rails, topology, the paper's µs)
        let figures: [(Option<Algorithm>, usize, usize, Topology, f64); 12] = [
            (Some(Algorithm::ShuffleExchange), 32, 1, Topology::Switch, 174.0),
            (Some(T2), 32, 1, Topology::Switch, 204.0),
            (None, 31, 1, Topology::Switch, 200.0),
            (Some(Algorithm::Concurrent), 32, 1, Topology::Switch, 309.0),
            (None, 15, 1, Topology::Switch, 159.0),
            (None, 15, 2, Topology::Switch, 169.0),
            (Some(Algorithm::Concurrent), 16, 1, Topology::Switch, 179.0),
            (Some(Algorithm::Concurrent), 16, 2, Topology::Switch, 147.0),
            (Some(Algorithm::ShuffleExchange), 32, 1, Topology::Hub, 3743.0),
            (Some(T2), 32, 1, Topology::Hub, 728.0),
            (None, 31, 1, Topology::Hub, 675.0),
            (Some(Algorithm::Concurrent), 32, 1, Topology::Hub, 1059.0),
        ];
        for (a, n, rails, top, paper) in figures {
            let got = paper_figure(a, n, rails, top).mean_cost;
            assert!((got - paper).abs() / paper <= 0.15, "{a:?} n={n} rails={rails} {top}: predicted {got:.1}, paper {paper}");
        }
        // The paper's own pairs keep their order: two networks slow the
        // ternary tree (an interrupt per NIC) and speed concurrent (coalescing).
        let t15 = |r| paper_figure(None, 15, r, Topology::Switch).mean_cost;
        let c16 = |r| paper_figure(Some(Algorithm::Concurrent), 16, r, Topology::Switch).mean_cost;
        assert!(t15(2) > t15(1) && c16(2) < c16(1), "{} {} {} {}", t15(1), t15(2), c16(1), c16(2));
    }

    #[test]
    fn the_ternary_disagreement() {
        let p = LogP::PAPER;
        // The closed form counts ceil(log3 31) = 4 full phases: 4·39.5 + 30.
        assert_eq!(closed_form(T3, 31, &p), Some(188.0));
        // mcd's 3-nomial tree at 31 nodes: the 4th phase brings only the
        // subtree 27..30, done after two: three phases are the critical path.
        assert_eq!(crate::plan::tree_children(0, 3, 31), vec![1, 2, 3, 6, 9, 18, 27]);
        assert_eq!(simulate(T3, 31, 1, &LogP { g: 0.0, ..p }).last_exit, 3.0 * 39.5 + 30.0);
        // A tree where every parent has two children has four levels at 31 nodes.
        let two = simulate_plans(&two_child_tree_plans(31, 1), 1, &Setup { g_r: 0.0, ..Setup::logp(&LogP { g: 0.0, ..p }) }, 1, 0.0);
        assert_eq!(two.last_exit, 4.0 * 39.5 + 30.0);
        // Growing from 15 to 31 nodes costs the paper 41 µs, one level of that tree (39.5),
        // while the 3-nomial tree grows by about half as much.
        let grow = |f: &dyn Fn(usize) -> f64| f(31) - f(15);
        let two_child = grow(&|n| simulate_plans(&two_child_tree_plans(n, 1), 1, &Setup::paper(Topology::Switch), 1, 0.0).last_exit);
        let knomial = grow(&|n| predict(T3, n, 1, &Setup::paper(Topology::Switch)).last_exit);
        assert!((two_child - 41.0).abs() < 5.0 && knomial < 25.0, "{two_child} {knomial}");
    }

    #[test]
    fn shared_cores_serialise_the_nodes_and_charge_switches() {
        let p = LogP::REFERENCE;
        let own = predict(Algorithm::Dissemination, 4, 1, &Setup::logp(&p)).last_exit;
        let shared = predict(Algorithm::Dissemination, 4, 1, &Setup::logp(&p).with_host(Host::shared(4, 2, 5.0))).last_exit;
        let fits = predict(Algorithm::Dissemination, 4, 1, &Setup::logp(&p).with_host(Host::shared(4, 4, 5.0))).last_exit;
        assert_eq!(own, fits);
        // Each round, two of the four nodes wait for a core and a switch.
        assert!(shared >= own + 2.0 * 5.0, "{own} {shared}");
        assert_eq!(Host::shared(4, 2, 0.0).core_of(3), 1);
        assert_eq!(Host { processes: 8, cores: 2, ..Host::DEDICATED }.core_of(9), 3);
    }

    #[test]
    fn steady_state_equals_one_barrier_when_nothing_carries_over() {
        let s = Setup::logp(&LogP::PAPER);
        for a in [Algorithm::ShuffleExchange, T3, Algorithm::Concurrent] {
            let one = predict(a, 16, 1, &s);
            let many = steady_state(a, 16, 1, &s, 20, 30.0);
            assert!((one.last_exit - many.last_exit).abs() < 1e-6, "{a}: {} {}", one.last_exit, many.last_exit);
            assert_eq!(one.deliveries, many.deliveries);
        }
    }

    #[test]
    fn host_costs_add_where_they_should() {
        let p = LogP { g: 0.0, ..LogP::PAPER };
        let base = Setup { g_r: 0.0, ..Setup::logp(&p) };
        // A wake-up per hop: shuffle exchange's five hops at 32 nodes.
        let woken = base.with_host(Host { wake: 4.5, ..Host::DEDICATED });
        assert_eq!(predict(Algorithm::ShuffleExchange, 32, 1, &woken).last_exit, 5.0 * (30.0 + 4.5));
        // The engine's own time per barrier: once per node, at the end.
        let engine = base.with_host(Host { per_barrier: 3.0, ..Host::DEDICATED });
        let (plain, more) = (predict(T2, 8, 1, &base), predict(T2, 8, 1, &engine));
        assert!((more.mean_exit - plain.mean_exit - 3.0).abs() < 1e-9, "{plain:?} {more:?}");
        // Coalescing: the second of two arrivals on one NIC skips the interrupt;
        // on two NICs each pays its own (the paper's section 5.2).
        let irq = base.with_host(Host { rx_irq: 3.0, ..Host::DEDICATED });
        let one_nic = predict(Algorithm::Concurrent, 3, 1, &irq).last_exit;
        let two_nics = predict(Algorithm::Concurrent, 3, 2, &irq).last_exit;
        assert_eq!(one_nic, 20.5 + 9.5 + 6.5 + 30.0);
        assert_eq!(two_nics, 20.5 + 9.5 + 9.5 + 30.0);
    }
}
