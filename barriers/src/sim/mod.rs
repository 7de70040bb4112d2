//! A deterministic simulator of the barrier protocol (DST, as FoundationDB
//! and TigerBeetle test theirs): N nodes' protocol states ([`SimNode`];
//! on the engine's core, [`CoreNode`]) on one thread, in virtual time,
//! over a simulated network that loses (independently and in bursts),
//! duplicates, reorders and delays messages, partitions nodes and heals,
//! pauses them past the failure timeout, crashes and restarts them, and
//! runs their clocks fast or slow. The applications run scripts of
//! barriers, split-phase barriers, allreduce, reduce and broadcast (random
//! roots, sizes, types), mismatched calls on purpose, and instances
//! created and finished back to back. Every run is checked
//! ([`check::check`]): safety, agreement with a reference fold, liveness,
//! and that every error names what really happened.
//!
//! **A seed is a run.** Everything — the node count, the algorithm, the
//! faults, the scripts, every message's fate — is drawn from the seed with
//! the simulator's own generator ([`rng::Rng`]), and events are ordered by
//! (virtual time, sequence number), so a seed replays exactly. A failing
//! seed prints the violations, each node's last events and the command
//! that runs it again ([`explain`]).
//!
//! ```no_run
//! use barriers::sim::{self, FaultMix, Options};
//! let options = Options { nodes: Some(4), faults: FaultMix::parse("dup,skew,burst").unwrap(), ..Options::default() };
//! for seed in 0..3 {
//!     let (run, violations) = sim::run_seed(seed, &options);
//!     assert!(violations.is_empty(), "{}", sim::explain(&run, &violations, &options));
//! }
//! ```

pub mod check;
mod core_node;
#[cfg(test)]
mod descheduled;
pub mod faults;
pub mod node;
mod pair_node;
pub mod rng;
#[cfg(test)]
mod seeds;
pub mod trace;
pub mod workload;
pub mod world;

use std::fmt::Write as _;
use std::time::Duration;

pub use check::Violation;
pub use core_node::CoreNode;
pub use faults::{Burst, Episode, EpisodeKind, FaultKind, FaultMix, Faults};
pub use node::{AppCall, NodeEvent, NodeFactory, NodeSpec, SimNode, Transmit};
pub use pair_node::PairNode;
pub use workload::{OpKind, WorkloadMix};
pub use world::{Clock, Run, RunStats, World};

use crate::plan::Algorithm;
use crate::BarrierConfig;
use rng::Rng;

/// What the seeds of a campaign share; each seed draws the rest.
#[derive(Clone, Debug)]
pub struct Options {
    /// The node count (`None`: 2 to `max_nodes`, per seed).
    pub nodes: Option<usize>,
    /// The most nodes a seed draws.
    pub max_nodes: usize,
    /// The algorithm (`None`: any, per seed).
    pub algorithm: Option<Algorithm>,
    /// The faults.
    pub faults: FaultMix,
    /// Instances per run: at least, at most.
    pub instances: (usize, usize),
    /// The workload's knobs (the mismatch chance is set by the faults).
    pub workload: WorkloadMix,
    /// Events kept per node for the trace (0: none, fastest).
    pub trace: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nodes: None,
            max_nodes: 12,
            algorithm: None,
            faults: FaultMix::mix(),
            instances: (1, 3),
            workload: WorkloadMix::default(),
            trace: 40,
        }
    }
}

impl Options {
    /// The command line that runs `seed` again under these options.
    pub fn rerun(&self, seed: u64) -> String {
        let mut s = format!("cargo run --release -p mcd-bench -- dst --seed {seed} --faults {}", self.faults);
        if let Some(n) = self.nodes {
            let _ = write!(s, " --nodes {n}");
        } else {
            let _ = write!(s, " --max-nodes {}", self.max_nodes);
        }
        if let Some(a) = self.algorithm {
            let _ = write!(s, " --algorithm {a}");
        }
        if self.instances != (1, 3) {
            let _ = write!(s, " --instances {}-{}", self.instances.0, self.instances.1);
        }
        if self.workload.max_ops != WorkloadMix::default().max_ops {
            let _ = write!(s, " --ops {}", self.workload.max_ops);
        }
        s
    }
}

/// One seed's world, drawn.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// The node count.
    pub nodes: usize,
    /// The barrier's configuration (algorithm, rails, timeouts).
    pub barrier: BarrierConfig,
    /// The most data a message carries.
    pub max_data: usize,
    /// How many instances the nodes create one after the other.
    pub instances: usize,
    /// Each node creates its next instance as soon as its `finish` returns
    /// (else: once every node is done with the last).
    pub back_to_back: bool,
    /// The workload.
    pub workload: WorkloadMix,
    /// The fault kinds drawn.
    pub kinds: Vec<FaultKind>,
    /// Every node runs a pair of barriers joined by one join
    /// ([`FaultKind::Pair`], [`PairNode`]): the scripts' barriers on the
    /// one joined, their collectives on the one beside.
    pub pair: bool,
    /// The message faults.
    pub faults: Faults,
    /// The episodes.
    pub episodes: Vec<Episode>,
    /// Each node's clock.
    pub clocks: Vec<Clock>,
    /// The run stops at this virtual time, ns.
    pub horizon_ns: u64,
    /// A call in an instance without silence completes within this of its
    /// last entry, per epoch it takes (a collective in segments takes one each), ns.
    pub liveness_ns: u64,
    /// Events kept per node for the trace.
    pub trace: usize,
}

impl SimConfig {
    /// Draws seed `seed`'s world under `options`.
    pub fn draw(seed: u64, options: &Options) -> SimConfig {
        let mut rng = Rng::fork(seed, 0);
        let nodes = options.nodes.unwrap_or_else(|| rng.between(2, options.max_nodes.max(2)));
        let algorithm = options.algorithm.unwrap_or_else(|| *rng.pick(&Algorithm::all()));
        let kinds: Vec<FaultKind> = if options.faults.subset {
            // (A pair is kept without a draw: the other lists draw as before.)
            options.faults.kinds.iter().copied().filter(|&k| k == FaultKind::Pair || rng.chance(0.4)).collect()
        } else {
            options.faults.kinds.clone()
        };
        let rails = rng.between(1, 2);
        let failure = Duration::from_millis(*rng.pick(&[50u64, 100, 200]));
        let mut barrier = BarrierConfig::new(algorithm).rails(rails).timeouts(Duration::from_micros(250), failure);
        barrier.join_timeout = failure * 4;
        let instances = rng.between(options.instances.0.max(1), options.instances.1.max(options.instances.0).max(1));
        let mut workload = options.workload;
        workload.mismatch = if kinds.contains(&FaultKind::Mismatch) { 0.7 } else { 0.0 };
        let faults = faults::draw_faults(&mut rng, &kinds);
        let span = instances as u64 * 3_000_000;
        let failure_ns = failure.as_nanos() as u64;
        let episodes = faults::draw_episodes(&mut rng, &kinds, nodes, span, failure_ns);
        let skew = kinds.contains(&FaultKind::Skew);
        let clocks = (0..nodes)
            .map(|_| {
                let (num, den) = if skew && rng.chance(0.4) { *rng.pick(&[(1, 2), (4, 5), (5, 4), (2, 1)]) } else { (1, 1) };
                Clock { num, den, offset: rng.range(0, 1_000_000_000) }
            })
            .collect();
        SimConfig {
            seed,
            nodes,
            barrier,
            max_data: *rng.pick(&[64usize, 256, 1472]),
            instances,
            back_to_back: kinds.contains(&FaultKind::BackToBack),
            pair: kinds.contains(&FaultKind::Pair),
            workload,
            kinds,
            faults,
            episodes,
            clocks,
            horizon_ns: 60_000_000_000,
            liveness_ns: failure_ns,
            trace: options.trace,
        }
    }

    /// One line: what this seed runs.
    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self.kinds.iter().map(|k| k.to_string()).collect();
        format!(
            "seed {}: {} nodes{}, {} on {} rail(s), failure timeout {} ms, max data {} B, {} instance(s){}, faults [{}]",
            self.seed,
            self.nodes,
            if self.pair { " (each a pair of barriers)" } else { "" },
            self.barrier.algorithm,
            self.barrier.rails,
            self.barrier.failure_timeout.as_millis(),
            self.max_data,
            self.instances,
            if self.back_to_back { " back to back" } else { "" },
            kinds.join(",")
        )
    }
}

/// Runs seed `seed` under `options` on the engine's core (a pair of cores
/// a node if the seed runs pairs: [`SimConfig::pair`]), and checks it.
pub fn run_seed(seed: u64, options: &Options) -> (Run, Vec<Violation>) {
    let config = SimConfig::draw(seed, options);
    let run = if config.pair { World::new(config, PairNode::new).run() } else { World::new(config, CoreNode::new).run() };
    let violations = check::check(&run);
    (run, violations)
}

/// Runs seed `seed` under `options` with nodes made by `factory`, and checks it.
pub fn run_seed_with<F: NodeFactory>(seed: u64, options: &Options, factory: F) -> (Run, Vec<Violation>) {
    let config = SimConfig::draw(seed, options);
    let run = World::new(config, factory).run();
    let violations = check::check(&run);
    (run, violations)
}

/// A failing run, for a reader: what the seed ran, its faults, the
/// violations, the last events of the nodes concerned (then the others),
/// and how to run it again.
pub fn explain(run: &Run, violations: &[Violation], options: &Options) -> String {
    let c = &run.config;
    let mut s = String::new();
    let _ = writeln!(s, "=== DST {} ===", c.summary());
    let _ = writeln!(
        s,
        "network: loss {:.3}, burst {:?}, duplicate {:.2}, reorder {:.2} (up to {} µs; stragglers {}), latency {} µs + exp({} µs)",
        c.faults.loss,
        c.faults.burst,
        c.faults.duplicate,
        c.faults.reorder,
        c.faults.reorder_ns / 1000,
        c.faults.straggle,
        c.faults.latency_ns / 1000,
        c.faults.jitter_ns / 1000
    );
    for e in &run.episodes {
        let _ = writeln!(s, "episode: {e}");
    }
    for (node, clock) in run.clocks.iter().enumerate().filter(|(_, k)| k.num != k.den) {
        let _ = writeln!(s, "clock: node {node} runs at {}/{}", clock.num, clock.den);
    }
    for (j, script) in run.scripts.iter().enumerate() {
        let ops: Vec<String> = script
            .iter()
            .map(|o| {
                let mut t = check::kind_name(&o.kind);
                if o.is_mismatch() {
                    let _ = write!(t, " (MISMATCH: {:?} call {})", o.mismatched, check::kind_name(&o.other));
                }
                t
            })
            .collect();
        let _ = writeln!(s, "instance {j} script: {}", ops.join("; "));
    }
    let _ = writeln!(s, "{} violation(s):", violations.len());
    for v in violations {
        let _ = writeln!(s, "  {v}");
    }
    let mut listed = Vec::new();
    for v in violations {
        let Some((j, op)) = v.call() else { continue };
        if listed.contains(&(j, op)) {
            continue;
        }
        listed.push((j, op));
        let recs = match op {
            Some(k) => &run.ops[j][k],
            None => &run.finishes[j],
        };
        let _ = writeln!(s, "instance {j} {}, node by node:", op.map_or("finish".to_string(), |k| format!("op {k}")));
        for (node, r) in recs.iter().enumerate() {
            let t = |x: Option<u64>| x.map_or("-".to_string(), |t| format!("{:.3} ms", t as f64 / 1e6));
            let what = op.map_or("finish".to_string(), |k| check::kind_name(&run.scripts[j][k].kind_at(node)));
            let outcome = match &r.outcome {
                world::Outcome::Ok(_) => "ok".to_string(),
                world::Outcome::Pending => "pending".to_string(),
                world::Outcome::Err(v) => format!("{v:?}"),
            };
            let _ = writeln!(s, "  node {node}: {what}: entered {}, left {}, {outcome}", t(r.entered), t(r.left));
        }
    }
    if !run.errors.is_empty() {
        let _ = writeln!(s, "errors ({}):", run.errors.len());
        for e in run.errors.iter().take(20) {
            let _ = writeln!(s, "  {e}");
        }
    }
    let mut order: Vec<usize> = violations.iter().filter_map(|v| v.node()).collect();
    order.extend(0..c.nodes);
    let mut shown = vec![false; c.nodes];
    for node in order {
        if std::mem::replace(&mut shown[node], true) {
            continue;
        }
        let (inst, stage) = run.stages.get(node).copied().unwrap_or((0, world::Stage::Idle));
        let _ = writeln!(s, "--- node {node} (ends in instance {inst}, {stage:?}); last events:");
        for (t, ev) in run.traces[node].events() {
            let _ = writeln!(s, "  {:>12.6} ms  {}", *t as f64 / 1e6, ev.describe(&run.errors));
        }
    }
    let _ = writeln!(s, "run it again: {}", options.rerun(c.seed));
    s
}

#[cfg(test)]
mod toy;
