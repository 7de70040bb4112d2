//! The algorithms, each compiled into a per-node *plan*: a list of steps, each
//! sending some messages and then waiting for some. One engine
//! ([`crate::Barrier`]) runs any plan, and adds epochs and loss recovery.
//!
//! The master is node 0, the lowest-numbered node, as in the paper.

use std::fmt;

use crate::transport::NodeId;

/// How a tree barrier tells the nodes to leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Release {
    /// The master multicasts "exit" once (the paper's choice).
    Multicast,
    /// "Exit" travels back down the tree, parent to children (no multicast needed).
    Tree,
}

/// A tree's fan-in per phase: at least 2 (a tree of fan-in 1 never reaches
/// anyone), by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fanout(usize);

impl Fanout {
    /// The binary tree's.
    pub const TWO: Fanout = Fanout(2);
    /// The ternary tree's.
    pub const THREE: Fanout = Fanout(3);
    /// The 4-ary tree's.
    pub const FOUR: Fanout = Fanout(4);

    /// `k`, if it is at least 2.
    pub const fn new(k: usize) -> Option<Fanout> {
        if k >= 2 {
            Some(Fanout(k))
        } else {
            None
        }
    }

    /// The number.
    pub const fn get(self) -> usize {
        self.0
    }
}

impl fmt::Display for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A barrier algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Shuffle exchange (pairwise exchange, recursive doubling): log2(n)
    /// stages of two-node barriers with partner `i XOR 2^s`. For n not a power
    /// of two, with p the largest power of two below n, node `p + j` first
    /// reports to node `j`, nodes `0..p` run the exchange, and node `j` then
    /// releases node `p + j` (two extra steps for those pairs).
    ShuffleExchange,
    /// Dissemination: ceil(log2 n) rounds; in round r node i sends to
    /// `i + 2^r` and waits for `i − 2^r` (mod n). Any n.
    Dissemination,
    /// Tree gather, then release. A parent gathers groups of `k` nodes per
    /// phase, receiving k−1 messages per phase over ceil(log_k n) phases (the
    /// paper's "k-ary tree", structurally k-nomial: binary, ternary, 4-ary, ...).
    /// With several rails a parent receives its children on different rails
    /// (the paper's tree with 2 networks).
    Tree {
        /// Fan-in per phase (at least 2, by construction).
        k: Fanout,
        /// How the master releases the nodes.
        release: Release,
    },
    /// Concurrent: every node sends "enter" to the master at once, the master
    /// multicasts "exit". With several rails, node i uses rail i mod rails
    /// (the paper's concurrent with 2 networks).
    Concurrent,
    /// One phase: every node multicasts its arrival and leaves once it has
    /// heard all others (one latency plus n−1 receive overheads).
    OnePhase,
}

impl Algorithm {
    /// Every algorithm the crate has, with the tree at k = 2, 3, 4 and both releases.
    pub fn all() -> Vec<Algorithm> {
        let mut all = vec![Algorithm::ShuffleExchange, Algorithm::Dissemination];
        for k in [Fanout::TWO, Fanout::THREE, Fanout::FOUR] {
            all.push(Algorithm::Tree { k, release: Release::Multicast });
        }
        all.push(Algorithm::Tree { k: Fanout::TWO, release: Release::Tree });
        all.push(Algorithm::Tree { k: Fanout::FOUR, release: Release::Tree });
        all.push(Algorithm::Concurrent);
        all.push(Algorithm::OnePhase);
        all
    }

    /// The tree of fan-in `k`, if `k` ≥ 2.
    pub fn tree(k: usize, release: Release) -> Option<Algorithm> {
        Fanout::new(k).map(|k| Algorithm::Tree { k, release })
    }

    /// Whether the algorithm multicasts (it still runs on a transport
    /// without multicast, one unicast per node).
    pub fn uses_multicast(&self) -> bool {
        matches!(self, Algorithm::Tree { release: Release::Multicast, .. } | Algorithm::Concurrent | Algorithm::OnePhase)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::ShuffleExchange => f.write_str("shuffle"),
            Algorithm::Dissemination => f.write_str("dissemination"),
            Algorithm::Tree { k, release: Release::Multicast } => write!(f, "tree{k}"),
            Algorithm::Tree { k, release: Release::Tree } => write!(f, "tree{k}-p2p"),
            Algorithm::Concurrent => f.write_str("concurrent"),
            Algorithm::OnePhase => f.write_str("onephase"),
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let tree = |rest: &str, release| {
            rest.parse::<usize>()
                .ok()
                .and_then(|k| Algorithm::tree(k, release))
                .ok_or_else(|| format!("`{s}`: a tree needs k ≥ 2, as in tree4 or tree3-p2p"))
        };
        match s {
            "shuffle" | "shuffle-exchange" => Ok(Algorithm::ShuffleExchange),
            "dissemination" => Ok(Algorithm::Dissemination),
            "concurrent" => Ok(Algorithm::Concurrent),
            "onephase" | "one-phase" => Ok(Algorithm::OnePhase),
            _ => match s.strip_prefix("tree") {
                Some(rest) => match rest.strip_suffix("-p2p") {
                    Some(k) => tree(k, Release::Tree),
                    None => tree(rest, Release::Multicast),
                },
                None => Err(format!("unknown algorithm `{s}` (shuffle, dissemination, tree<k>, tree<k>-p2p, concurrent, onephase)")),
            },
        }
    }
}

/// Where a planned message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One node.
    Node(NodeId),
    /// Every other node (multicast).
    All,
}

/// A message a step sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    /// Destination.
    pub dest: Dest,
    /// Rail.
    pub rail: usize,
    /// Tag.
    pub tag: u16,
}

/// A message a step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    /// The sender.
    pub from: NodeId,
    /// Tag.
    pub tag: u16,
}

/// One step: send `sends`, then wait for every message in `waits`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Sent when the step starts.
    pub sends: Vec<Out>,
    /// Awaited before the next step.
    pub waits: Vec<Expect>,
}

/// One node's part of an algorithm.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The steps in order.
    pub steps: Vec<Step>,
}

impl Plan {
    /// Whether some step sends node `to` a message of `tag` (to it, or to all).
    pub fn sends_to(&self, to: NodeId, tag: u16) -> bool {
        self.steps.iter().flat_map(|s| &s.sends).any(|o| o.tag == tag && (o.dest == Dest::All || o.dest == Dest::Node(to)))
    }
}

/// Tags: arrive, release, the extra pre/post steps of shuffle exchange, the
/// release-first broadcast's data, entry and done, rounds from ROUND.
pub(crate) mod tag {
    pub const ARRIVE: u16 = 0;
    pub const RELEASE: u16 = 1;
    pub const PRE: u16 = 2;
    pub const POST: u16 = 3;
    /// A broadcast's data, multicast by its root at once.
    pub const BCAST_DATA: u16 = 4;
    /// A node's entry into a broadcast, sent to the root as the node enters.
    pub const BCAST_ENTERED: u16 = 5;
    /// A broadcast's end, multicast by its root once every node entered.
    pub const BCAST_DONE: u16 = 6;
    /// A node's contribution to a gather-first reduce, sent to the root as
    /// the node enters.
    pub const REDUCE_GATHER: u16 = 7;
    /// A gather-first reduce's end, multicast by its root once every
    /// node's contribution came.
    pub const REDUCE_DONE: u16 = 8;
    pub const ROUND: u16 = 16;

    /// Whether a message of this tag carries a collective's data (the
    /// broadcast's entry and the ends carry only its header).
    pub const fn carries_data(tag: u16) -> bool {
        !matches!(tag, BCAST_ENTERED | BCAST_DONE | REDUCE_DONE)
    }
}

/// The step of a release-first broadcast plan ([`build_bcast`]) or a
/// gather-first reduce plan ([`build_reduce`]) from which the node has its
/// result (a reduce's non-root: has sent its contribution): what follows
/// only completes the epoch.
pub const BCAST_RESULT_STEP: usize = 1;

/// The most nodes among which a reduce runs its own plan
/// ([`build_reduce`], from 3 nodes: [`reduce_gathers`]); beyond, it runs
/// the algorithm's plan, as an allreduce does. The root takes in one contribution from every other
/// node: o_s + L + (n−1)·o_r by the paper's formulas, which under
/// [`crate::model::LogP::REFERENCE`] is the cheapest k-nomial gather of up
/// to 32 nodes, and from about 48 a tree's is cheaper (a test of the
/// model says so); each other node's own call is one send.
pub const REDUCE_GATHER_MAX: usize = 32;

/// Whether a reduce among `n` nodes runs its own plan ([`build_reduce`]):
/// from 3 nodes. Between two, every algorithm's plan is one exchange (or
/// one message and its release), which costs each node one latency, as
/// the gather-first plan costs its root; and with the gather-first plan the
/// 2-rank `MPI_Reduce` rows of issue 28's comms went from 10-14 to 27-28 µs
/// (Open MPI) and to ~100 µs (MPICH), where the allreduce's stayed (not
/// explained; a guess: the non-root's epoch left completing in the
/// background, whose retry timer and end wake its agent).
pub const fn reduce_gathers(n: usize) -> bool {
    n >= 3 && n <= REDUCE_GATHER_MAX
}

/// The arguments every rooted plan checks: `me` and `root` among `n`
/// nodes, and a rail at least.
fn check_rooted(n: usize, me: NodeId, root: NodeId, rails: usize) -> Result<(), String> {
    if me >= n || root >= n {
        return Err(format!("node {me}, root {root}: not both among {n} node(s)"));
    }
    if rails == 0 {
        return Err("a plan needs at least one rail".into());
    }
    Ok(())
}

/// Builds node `me`'s plan of a *gather-first* reduce to `root` among `n`
/// nodes over `rails` rails: every other node sends its contribution to
/// the root as it enters (step 0) and then only waits for the root's end
/// (step 1); the root gathers every contribution (step 0), folds them in
/// rank order (the fold of [`Algorithm::Concurrent`]: the same result
/// whatever the root), and multicasts the end (step 1). A non-root's call
/// returns once its contribution is sent (step [`BCAST_RESULT_STEP`]),
/// the root's once it has the result; the end keeps the nodes within one
/// epoch of each other (no node completes the epoch before every node has
/// entered it) and completes in the background, as a broadcast's does. So
/// a reduce costs its root one gather and every other node one send,
/// where the algorithm's own plan (recursive doubling, say) makes every
/// node wait for every stage, as an allreduce does.
pub fn build_reduce(n: usize, me: NodeId, root: NodeId, rails: usize) -> Result<Plan, String> {
    check_rooted(n, me, root, rails)?;
    if n == 1 {
        return Ok(Plan::default());
    }
    let steps = if me == root {
        vec![
            Step { sends: vec![], waits: (0..n).filter(|&j| j != root).map(|j| Expect { from: j, tag: tag::REDUCE_GATHER }).collect() },
            Step { sends: vec![Out { dest: Dest::All, rail: 0, tag: tag::REDUCE_DONE }], waits: vec![] },
        ]
    } else {
        vec![
            Step { sends: vec![Out { dest: Dest::Node(root), rail: me % rails, tag: tag::REDUCE_GATHER }], waits: vec![] },
            Step { sends: vec![], waits: vec![Expect { from: root, tag: tag::REDUCE_DONE }] },
        ]
    };
    Ok(Plan { steps })
}

/// Builds node `me`'s plan of a *release-first* broadcast from `root` among
/// `n` nodes over `rails` rails: the root multicasts its data at once (step
/// 0), gathers every other node's entry (step 1) and multicasts the end
/// (step 2); every other node tells the root it entered and waits for the
/// data (step 0), then waits for the end (step 1). From step
/// [`BCAST_RESULT_STEP`] on a node has its result: the rest keeps the
/// nodes within one epoch of each other (no node completes the broadcast
/// before every node has entered it), and may run in the background.
///
/// A node sends its entry before it has the data, not after, so that the
/// send overlaps the wait for the data instead of following it on the
/// call's path. The entry does not say the data arrived, and need not: a
/// node that misses it NACKs the root, which keeps it until every node has
/// completed the broadcast (the root leaves the next epoch only once every
/// node has entered that one, so has completed this one).
///
/// Between two nodes there is no end: the non-root completes at the data
/// (the root has entered), the root at the entry.
pub fn build_bcast(n: usize, me: NodeId, root: NodeId, rails: usize) -> Result<Plan, String> {
    check_rooted(n, me, root, rails)?;
    if n == 1 {
        return Ok(Plan::default());
    }
    let mut steps = if me == root {
        vec![
            Step { sends: vec![Out { dest: Dest::All, rail: 0, tag: tag::BCAST_DATA }], waits: vec![] },
            Step { sends: vec![], waits: (0..n).filter(|&j| j != root).map(|j| Expect { from: j, tag: tag::BCAST_ENTERED }).collect() },
            Step { sends: vec![Out { dest: Dest::All, rail: 0, tag: tag::BCAST_DONE }], waits: vec![] },
        ]
    } else {
        vec![
            Step {
                sends: vec![Out { dest: Dest::Node(root), rail: me % rails, tag: tag::BCAST_ENTERED }],
                waits: vec![Expect { from: root, tag: tag::BCAST_DATA }],
            },
            Step { sends: vec![], waits: vec![Expect { from: root, tag: tag::BCAST_DONE }] },
        ]
    };
    if n == 2 {
        // No end between two nodes (see above).
        steps.pop();
    }
    Ok(Plan { steps })
}

/// ceil(log_base n): the number of phases that reach n nodes.
pub(crate) fn ceil_log(n: usize, base: usize) -> usize {
    let (mut levels, mut reach) = (0, 1usize);
    while reach < n {
        reach = reach.saturating_mul(base);
        levels += 1;
    }
    levels
}

/// The parent of `node` in the k-nomial tree rooted at 0, with the child's
/// position among the parent's children (phase-major).
pub fn tree_parent(node: NodeId, k: usize, n: usize) -> Option<(NodeId, usize)> {
    if node == 0 {
        return None;
    }
    let mut stride = 1;
    while (node / stride).is_multiple_of(k) {
        stride *= k;
    }
    let digit = (node / stride) % k;
    let parent = node - digit * stride;
    let index = tree_children(parent, k, n).iter().position(|&c| c == node).expect("child of its parent");
    Some((parent, index))
}

/// The children of `node` in the k-nomial tree rooted at 0, phase by phase
/// (the first phase's children first).
pub fn tree_children(node: NodeId, k: usize, n: usize) -> Vec<NodeId> {
    let mut children = Vec::new();
    let mut stride = 1usize;
    while stride < n {
        if !node.is_multiple_of(stride * k) {
            break;
        }
        for digit in 1..k {
            let child = node + digit * stride;
            if child < n {
                children.push(child);
            }
        }
        stride = stride.saturating_mul(k);
    }
    children
}

/// Builds node `me`'s plan of `algorithm` among `n` nodes over `rails` rails;
/// an error when `me` is not one of the `n` nodes or there is no rail.
pub fn build(algorithm: Algorithm, n: usize, me: NodeId, rails: usize) -> Result<Plan, String> {
    if me >= n {
        return Err(format!("node {me} is not one of {n} node(s)"));
    }
    if rails == 0 {
        return Err("a plan needs at least one rail".into());
    }
    let mut steps = Vec::new();
    let out = |dest, rail: usize, tag| Out { dest, rail: rail % rails, tag };
    match algorithm {
        Algorithm::Dissemination => {
            for r in 0..ceil_log(n, 2) {
                let d = 1usize << r;
                let tag = tag::ROUND + r as u16;
                steps.push(Step { sends: vec![out(Dest::Node((me + d) % n), r, tag)], waits: vec![Expect { from: (me + n - d % n) % n, tag }] });
            }
        }
        Algorithm::ShuffleExchange => {
            let p = if n == 0 { 0 } else { 1usize << (usize::BITS - 1 - n.leading_zeros()) };
            let extra = n - p;
            if me >= p {
                steps.push(Step { sends: vec![out(Dest::Node(me - p), 0, tag::PRE)], waits: vec![] });
                steps.push(Step { sends: vec![], waits: vec![Expect { from: me - p, tag: tag::POST }] });
            } else {
                if me < extra {
                    steps.push(Step { sends: vec![], waits: vec![Expect { from: me + p, tag: tag::PRE }] });
                }
                for r in 0..ceil_log(p, 2) {
                    let partner = me ^ (1 << r);
                    let tag = tag::ROUND + r as u16;
                    steps.push(Step { sends: vec![out(Dest::Node(partner), r, tag)], waits: vec![Expect { from: partner, tag }] });
                }
                if me < extra {
                    steps.push(Step { sends: vec![out(Dest::Node(me + p), 0, tag::POST)], waits: vec![] });
                }
            }
        }
        Algorithm::Tree { k, release } => {
            let k = k.get();
            let children = tree_children(me, k, n);
            let parent = tree_parent(me, k, n);
            let gather = children.iter().map(|&c| Expect { from: c, tag: tag::ARRIVE }).collect();
            steps.push(Step { sends: vec![], waits: gather });
            match (parent, release) {
                (None, Release::Multicast) => {
                    steps.push(Step { sends: vec![out(Dest::All, 0, tag::RELEASE)], waits: vec![] });
                }
                (None, Release::Tree) => {
                    let sends = children.iter().enumerate().map(|(i, &c)| out(Dest::Node(c), i, tag::RELEASE)).collect();
                    steps.push(Step { sends, waits: vec![] });
                }
                (Some((parent, index)), Release::Multicast) => {
                    steps.push(Step { sends: vec![out(Dest::Node(parent), index, tag::ARRIVE)], waits: vec![Expect { from: 0, tag: tag::RELEASE }] })
                }
                (Some((parent, index)), Release::Tree) => {
                    steps.push(Step {
                        sends: vec![out(Dest::Node(parent), index, tag::ARRIVE)],
                        waits: vec![Expect { from: parent, tag: tag::RELEASE }],
                    });
                    let sends = children.iter().enumerate().map(|(i, &c)| out(Dest::Node(c), i, tag::RELEASE)).collect();
                    steps.push(Step { sends, waits: vec![] });
                }
            }
        }
        Algorithm::Concurrent => {
            if me == 0 {
                let waits = (1..n).map(|c| Expect { from: c, tag: tag::ARRIVE }).collect();
                steps.push(Step { sends: vec![], waits });
                if n > 1 {
                    steps.push(Step { sends: vec![out(Dest::All, 0, tag::RELEASE)], waits: vec![] });
                }
            } else {
                steps.push(Step { sends: vec![out(Dest::Node(0), me, tag::ARRIVE)], waits: vec![Expect { from: 0, tag: tag::RELEASE }] });
            }
        }
        Algorithm::OnePhase => {
            if n > 1 {
                let waits = (0..n).filter(|&c| c != me).map(|c| Expect { from: c, tag: tag::ARRIVE }).collect();
                steps.push(Step { sends: vec![out(Dest::All, me, tag::ARRIVE)], waits });
            }
        }
    }
    steps.retain(|s| !s.sends.is_empty() || !s.waits.is_empty());
    Ok(Plan { steps })
}

/// How a host's leader's ranks learn that a hierarchical barrier is
/// released (see [`crate::HierarchicalBarrier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostRelease {
    /// The leader, once released among the leaders, releases its host
    /// through shared memory.
    SharedMemory,
    /// Every rank takes the leaders' release multicast from its own ring
    /// (the leader's release in shared memory recovers a lost one).
    Multicast,
}

impl HostRelease {
    /// The environment variable that chooses the release: `shm`,
    /// `multicast` or `auto`.
    pub const ENV: &'static str = "MCD_HIERARCHY_RELEASE";

    /// Whether `algorithm` among the leaders can release the hosts
    /// directly: its release is one multicast of leader 0.
    pub fn can_multicast(algorithm: Algorithm) -> bool {
        matches!(algorithm, Algorithm::Tree { release: Release::Multicast, .. } | Algorithm::Concurrent)
    }
}

impl std::fmt::Display for HostRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HostRelease::SharedMemory => "shm",
            HostRelease::Multicast => "multicast",
        })
    }
}

impl std::str::FromStr for HostRelease {
    type Err = String;
    fn from_str(s: &str) -> Result<HostRelease, String> {
        match s.parse::<AutoOr>()?.0 {
            Some(r) => Ok(r),
            None => Err("auto is not a release: shm or multicast".into()),
        }
    }
}

/// A release named in text, or `auto` (`None`).
pub(crate) struct AutoOr(pub(crate) Option<HostRelease>);

impl std::str::FromStr for AutoOr {
    type Err = String;
    fn from_str(s: &str) -> Result<AutoOr, String> {
        match s.trim() {
            "shm" | "shared-memory" => Ok(AutoOr(Some(HostRelease::SharedMemory))),
            "multicast" | "direct" => Ok(AutoOr(Some(HostRelease::Multicast))),
            "auto" | "" => Ok(AutoOr(None)),
            other => Err(format!("{}={other}: shm, multicast or auto", HostRelease::ENV)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, VecDeque};

    /// Runs every node's plan over a perfect network, messages delivered in an
    /// arbitrary (here: FIFO) order, tracking for each node the set of nodes
    /// whose arrival causally precedes its current state. Returns, per node,
    /// that set at completion, or panics on deadlock.
    fn causal_run(algorithm: Algorithm, n: usize, rails: usize) -> Vec<BTreeSet<NodeId>> {
        let plans: Vec<Plan> = (0..n).map(|me| build(algorithm, n, me, rails).unwrap()).collect();
        causal_run_plans(&algorithm.to_string(), plans, n, rails)
    }

    fn causal_run_plans(algorithm: &str, plans: Vec<Plan>, n: usize, rails: usize) -> Vec<BTreeSet<NodeId>> {
        let mut step = vec![0usize; n];
        let mut sent = vec![false; n];
        let mut knows: Vec<BTreeSet<NodeId>> = (0..n).map(|i| BTreeSet::from([i])).collect();
        let mut inbox: Vec<Vec<(NodeId, u16)>> = vec![Vec::new(); n];
        let mut wire: VecDeque<(NodeId, NodeId, u16, BTreeSet<NodeId>)> = VecDeque::new();
        loop {
            let mut progressed = false;
            for me in 0..n {
                while step[me] < plans[me].steps.len() {
                    let s = &plans[me].steps[step[me]];
                    if !sent[me] {
                        for o in &s.sends {
                            assert!(o.rail < rails);
                            let targets: Vec<NodeId> = match o.dest {
                                Dest::Node(t) => vec![t],
                                Dest::All => (0..n).filter(|&t| t != me).collect(),
                            };
                            for t in targets {
                                assert!(t < n && t != me, "{algorithm} n={n}: node {me} sends to {t}");
                                wire.push_back((me, t, o.tag, knows[me].clone()));
                            }
                        }
                        sent[me] = true;
                        progressed = true;
                    }
                    if s.waits.iter().all(|w| inbox[me].contains(&(w.from, w.tag))) {
                        step[me] += 1;
                        sent[me] = false;
                        progressed = true;
                    } else {
                        break;
                    }
                }
            }
            if let Some((from, to, tag, k)) = wire.pop_front() {
                assert!(!inbox[to].contains(&(from, tag)), "{algorithm} n={n}: duplicate message {from}->{to} tag {tag}");
                inbox[to].push((from, tag));
                knows[to].extend(k);
                progressed = true;
            }
            if (0..n).all(|i| step[i] == plans[i].steps.len()) && wire.is_empty() {
                break;
            }
            assert!(progressed, "{algorithm} n={n} rails={rails}: deadlock at steps {step:?}");
        }
        for me in 0..n {
            let expected: usize = plans[me].steps.iter().map(|s| s.waits.len()).sum();
            assert_eq!(inbox[me].len(), expected, "{algorithm} n={n}: node {me} got messages it never waits for");
        }
        knows
    }

    #[test]
    fn every_algorithm_completes_and_every_exit_follows_every_entry() {
        for algorithm in Algorithm::all().into_iter().chain([Algorithm::tree(5, Release::Multicast).unwrap()]) {
            for n in 1..=40 {
                for rails in [1, 2, 3] {
                    let knows = causal_run(algorithm, n, rails);
                    for (me, k) in knows.iter().enumerate() {
                        assert_eq!(
                            k.len(),
                            n,
                            "{algorithm} n={n} rails={rails}: node {me} may leave before {:?} entered",
                            (0..n).filter(|i| !k.contains(i)).collect::<Vec<_>>()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_release_first_broadcast_completes_after_every_entry_and_has_its_data_after_one_step() {
        for n in 1..=20 {
            for root in 0..n {
                for rails in [1, 2] {
                    let plans: Vec<Plan> = (0..n).map(|me| build_bcast(n, me, root, rails).unwrap()).collect();
                    for (me, plan) in plans.iter().enumerate() {
                        if n == 1 {
                            assert!(plan.steps.is_empty());
                            continue;
                        }
                        // The data is the first thing: the root sends it in step 0, a
                        // non-root waits for nothing else before its result step.
                        let before: Vec<&Step> = plan.steps[..BCAST_RESULT_STEP].iter().collect();
                        if me == root {
                            assert!(before.iter().all(|s| s.waits.is_empty()), "the root waits for nothing before sending");
                            assert_eq!(before[0].sends[0], Out { dest: Dest::All, rail: 0, tag: tag::BCAST_DATA });
                        } else {
                            assert_eq!(before[0].waits, vec![Expect { from: root, tag: tag::BCAST_DATA }]);
                        }
                    }
                    let knows = causal_run_plans("bcast", plans, n, rails);
                    for (me, k) in knows.iter().enumerate() {
                        assert_eq!(
                            k.len(),
                            n,
                            "bcast n={n} root={root}: node {me} completes before {:?} entered",
                            (0..n).filter(|i| !k.contains(i)).collect::<Vec<_>>()
                        );
                    }
                }
            }
        }
        assert!(build_bcast(4, 1, 4, 1).unwrap_err().contains("not both among 4"));
        assert!(build_bcast(4, 1, 0, 0).is_err());
    }

    #[test]
    fn a_gather_first_reduce_costs_a_non_root_one_send_and_completes_after_every_entry() {
        for n in 1..=REDUCE_GATHER_MAX + 1 {
            for root in [0, n / 2, n - 1] {
                for rails in [1, 2] {
                    let plans: Vec<Plan> = (0..n).map(|me| build_reduce(n, me, root, rails).unwrap()).collect();
                    for (me, plan) in plans.iter().enumerate().filter(|_| n > 1) {
                        let before = &plan.steps[..BCAST_RESULT_STEP];
                        if me == root {
                            // The root has its result once every contribution came.
                            assert_eq!(before[0].waits.len(), n - 1);
                            assert!(before[0].waits.iter().all(|w| w.tag == tag::REDUCE_GATHER));
                        } else {
                            // A non-root's call is one send, to the root.
                            assert_eq!(before[0].waits, vec![]);
                            assert_eq!(before[0].sends, vec![Out { dest: Dest::Node(root), rail: me % rails, tag: tag::REDUCE_GATHER }]);
                        }
                    }
                    let knows = causal_run_plans("reduce", plans, n, rails);
                    for (me, k) in knows.iter().enumerate() {
                        assert_eq!(k.len(), n, "reduce n={n} root={root}: node {me} completes before every node entered");
                    }
                }
            }
        }
        assert!(reduce_gathers(3) && reduce_gathers(REDUCE_GATHER_MAX));
        assert!(!reduce_gathers(2) && !reduce_gathers(REDUCE_GATHER_MAX + 1));
        assert!(build_reduce(4, 1, 4, 1).unwrap_err().contains("not both among 4"));
        assert!(build_reduce(4, 1, 0, 0).is_err());
    }

    #[test]
    fn knomial_tree_shape_matches_the_paper() {
        // 4-ary over 16 nodes: node 0 gathers 1,2,3 then 4,8,12; node 4 gathers 5,6,7.
        assert_eq!(tree_children(0, 4, 16), vec![1, 2, 3, 4, 8, 12]);
        assert_eq!(tree_children(4, 4, 16), vec![5, 6, 7]);
        assert_eq!(tree_parent(7, 4, 16), Some((4, 2)));
        assert_eq!(tree_parent(12, 4, 16), Some((0, 5)));
        // Binary over 8: a binomial tree.
        assert_eq!(tree_children(0, 2, 8), vec![1, 2, 4]);
        assert_eq!(tree_children(4, 2, 8), vec![5, 6]);
        assert_eq!(tree_children(3, 2, 5), Vec::<usize>::new());
    }

    #[test]
    fn multi_rail_tree_spreads_a_parents_children_over_rails() {
        // Ternary tree with 2 networks: node 0's children 1 and 2 arrive on rails 0 and 1.
        let rail_of = |child| build(Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast }, 9, child, 2).unwrap().steps[0].sends[0].rail;
        assert_eq!((rail_of(1), rail_of(2)), (0, 1));
        let conc = |node| build(Algorithm::Concurrent, 8, node, 2).unwrap().steps[0].sends[0].rail;
        assert_eq!((conc(1), conc(2), conc(3)), (1, 0, 1));
    }

    #[test]
    fn shuffle_exchange_on_a_power_of_two_is_pure_pairwise_exchange() {
        let plan = build(Algorithm::ShuffleExchange, 8, 5, 1).unwrap();
        let partners: Vec<Dest> = plan.steps.iter().map(|s| s.sends[0].dest).collect();
        assert_eq!(partners, vec![Dest::Node(4), Dest::Node(7), Dest::Node(1)]);
        // n = 6: nodes 4 and 5 report to 0 and 1 and wait for their release.
        assert_eq!(build(Algorithm::ShuffleExchange, 6, 5, 1).unwrap().steps.len(), 2);
        assert_eq!(build(Algorithm::ShuffleExchange, 6, 1, 1).unwrap().steps.len(), 4);
    }

    #[test]
    fn algorithms_parse_from_their_names() {
        for a in Algorithm::all() {
            assert_eq!(a.to_string().parse::<Algorithm>().unwrap(), a);
        }
        assert!("tree1".parse::<Algorithm>().is_err());
        assert!("tree0".parse::<Algorithm>().is_err());
        assert_eq!(Fanout::new(1), None);
        assert_eq!(Algorithm::tree(1, Release::Tree), None);
        assert!(build(Algorithm::Dissemination, 4, 4, 1).unwrap_err().contains("not one of 4"));
        assert!(build(Algorithm::Dissemination, 4, 0, 0).is_err());
        assert!("ring".parse::<Algorithm>().unwrap_err().contains("unknown algorithm"));
    }
}
