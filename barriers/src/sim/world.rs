//! The simulated world: N nodes' protocol states over a simulated network,
//! one thread, virtual time, one event queue ordered by (time, sequence),
//! so a seed replays exactly. The applications follow their scripts
//! instance by instance; faults are applied as drawn; everything that
//! happens is recorded for the checkers ([`super::check`]).

mod app;
mod clock;
mod network;
mod queue;
mod record;

use std::time::{Duration, Instant};

use super::faults::Faults;
use super::node::{NodeEvent, NodeFactory, SimNode};
use super::rng::Rng;
use super::trace::{DropCause, Ring, TraceEvent};
use super::workload::{self, OpKind, ScriptOp};
use super::SimConfig;
use crate::transport::{Msg, MsgKind, NodeId};

/// More events than this at one virtual time is a spin (a violation).
const SPIN_LIMIT: u64 = 200_000;
/// Pending events a run's queue has room for at first (it grows beyond).
const QUEUED: usize = 1024;
/// The most data buffers kept for reuse.
const POOL: usize = 256;

pub use clock::Clock;
pub use record::{JoinRecord, OpRecord, Outcome, Run, RunStats, Stage, Verdict};

struct Proc<N> {
    core: Option<N>,
    instance: usize,
    lives: u32,
    stage: Stage,
    errored: bool,
    /// When the node's core wants its timeout (virtual ns).
    timer: Option<u64>,
    /// The earliest timer event queued for it (later ones may be queued too).
    queued: Option<u64>,
    timer_gen: u64,
    /// The last deadline read from the core, and its virtual time (a
    /// deadline often stays as it was from one input to the next).
    deadline: Option<(Instant, u64)>,
    app_gen: u64,
    app_due: bool,
    paused: bool,
    down: bool,
    want_create: bool,
    backlog: Vec<(NodeId, usize, Msg, Vec<u8>)>,
    clock: Clock,
}

enum Ev {
    Deliver { to: NodeId, from: NodeId, rail: usize, msg: Msg, data: Vec<u8> },
    Timer { node: NodeId, gen: u64 },
    App { node: NodeId, gen: u64 },
    Create { node: NodeId, instance: usize },
    EpisodeStart(usize),
    EpisodeEnd(usize),
}

/// Runs one seed's world to its end.
pub struct World<F: NodeFactory> {
    factory: F,
    base: Instant,
    now: u64,
    queue: queue::Queue<Ev>,
    net: Rng,
    app: Rng,
    faults: Faults,
    /// Per directed link: in a burst, and until when (ns).
    bad: Vec<(bool, u64)>,
    partitions: Vec<usize>,
    procs: Vec<Proc<F::Node>>,
    events: Vec<NodeEvent>,
    /// Data buffers of delivered messages, for the next copies.
    pool: Vec<Vec<u8>>,
    /// Node 0's process's barrier (its agreed instance), once joined, and
    /// the nodes it heard in it ([`Run::heard_by_0`]).
    barrier0: Option<(u64, Vec<bool>)>,
    /// The buffer a node's next transmit's data is written into (empty).
    scratch: Vec<u8>,
    run: Run,
}

impl<F: NodeFactory> World<F> {
    /// The world of `config`, its nodes made by `factory`.
    pub fn new(config: SimConfig, factory: F) -> World<F> {
        let n = config.nodes;
        let mut rng = Rng::fork(config.seed, 1);
        let scripts: Vec<Vec<ScriptOp>> = (0..config.instances)
            .map(|_| {
                let mut s = workload::script(&mut rng, n, config.barrier.algorithm, &config.workload);
                if config.pair {
                    workload::pair_mismatches(&mut s);
                }
                // After a deliberate mismatch: one barrier, then finish.
                if let Some(k) = s.iter().position(|o| o.is_mismatch()) {
                    s.truncate(k + 1);
                    s.push(ScriptOp { kind: OpKind::Barrier, mismatched: vec![], other: OpKind::Barrier, think: vec![0; n] });
                }
                s
            })
            .collect();
        World::scripted(config, scripts, factory)
    }

    /// The world of `config` whose applications run `scripts` (one per
    /// instance; `config.instances` is taken from it), not scripts drawn
    /// from the seed: a situation constructed by hand. Everything else is
    /// drawn from the seed as in [`World::new`].
    pub fn scripted(mut config: SimConfig, scripts: Vec<Vec<ScriptOp>>, factory: F) -> World<F> {
        let n = config.nodes;
        config.instances = scripts.len();
        let ops = scripts.iter().map(|s| vec![vec![OpRecord::NONE; n]; s.len()]).collect();
        let finishes = vec![vec![OpRecord::NONE; n]; config.instances];
        let inputs = scripts.iter().map(|s| vec![vec![Vec::new(); n]; s.len()]).collect();
        let procs = config
            .clocks
            .iter()
            .map(|&clock| Proc {
                core: None,
                instance: 0,
                lives: 0,
                stage: Stage::Idle,
                errored: false,
                timer: None,
                queued: None,
                timer_gen: 0,
                deadline: None,
                app_gen: 0,
                app_due: false,
                paused: false,
                down: false,
                want_create: false,
                backlog: Vec::new(),
                clock,
            })
            .collect();
        let run = Run {
            scripts,
            ops,
            finishes,
            inputs,
            joins: Vec::new(),
            joins_heard: Vec::new(),
            heard_by_0: Vec::new(),
            completed_by_0: Vec::new(),
            refused_by_0: Vec::new(),
            spans: vec![(u64::MAX, 0); config.instances],
            episodes: config.episodes.clone(),
            errors: Vec::new(),
            stages: Vec::new(),
            traces: (0..n).map(|_| Ring::new(config.trace)).collect(),
            clocks: config.clocks.clone(),
            stats: RunStats::default(),
            config,
        };
        World {
            factory,
            base: Instant::now(),
            now: 0,
            queue: queue::Queue::with_capacity(QUEUED),
            net: Rng::fork(run.config.seed, 2),
            app: Rng::fork(run.config.seed, 3),
            faults: run.config.faults,
            bad: vec![(true, 0); n * n],
            partitions: Vec::new(),
            procs,
            events: Vec::new(),
            pool: Vec::new(),
            barrier0: None,
            scratch: Vec::new(),
            run,
        }
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.queue.push(t, ev);
    }

    /// Keeps `ev` in the node's trace, if traces are kept (`Options::trace`).
    #[inline]
    fn trace(&mut self, node: NodeId, ev: TraceEvent) {
        if self.run.config.trace > 0 {
            self.run.traces[node].push(self.now, ev);
        }
    }

    fn local_now(&self, node: NodeId) -> Instant {
        self.base + Duration::from_nanos(self.procs[node].clock.local(self.now))
    }

    /// Runs to the end: every node through every instance, or the
    /// horizon, or nothing left to happen.
    pub fn run(mut self) -> Run {
        let n = self.run.config.nodes;
        for node in 0..n {
            let t = self.app.range(0, 20_000);
            self.push(t, Ev::Create { node, instance: 0 });
        }
        for i in 0..self.run.episodes.len() {
            let (s, e) = (self.run.episodes[i].start, self.run.episodes[i].end);
            self.push(s, Ev::EpisodeStart(i));
            self.push(e, Ev::EpisodeEnd(i));
        }
        let horizon = self.run.config.horizon_ns;
        let mut same = 0u64;
        while let Some((t, ev)) = self.queue.peek() {
            if t > horizon {
                break;
            }
            if t == self.now {
                same += 1;
                if same > SPIN_LIMIT {
                    // Time stands still: a node whose deadline never
                    // advances, or nodes answering each other at once for ever.
                    let who = match *ev {
                        Ev::Timer { node, .. } => format!("node {node}'s deadline does not advance"),
                        Ev::Deliver { to, from, .. } => format!("messages from node {from} to node {to} at no delay"),
                        _ => "events".into(),
                    };
                    self.run
                        .errors
                        .push(format!("UNEXPECTED: {SPIN_LIMIT} events at {:.6} ms without time advancing (a spin: {who})", self.now as f64 / 1e6));
                    break;
                }
            } else {
                same = 0;
            }
            self.now = t;
            // A node's timer entry comes up before its deadline (the
            // deadline moved later since it was queued): it goes back in
            // the queue at the deadline, in place. The simulator's own
            // bookkeeping: not an event of the run.
            if let Ev::Timer { node, gen } = *ev {
                if let Some(d) = self.early_timer(node, gen, t) {
                    self.queue.requeue_first(d);
                    continue;
                }
            }
            let Some((_, ev)) = self.queue.pop() else { break };
            match ev {
                Ev::Deliver { to, from, rail, msg, data } => {
                    self.run.stats.events += 1;
                    self.deliver(to, from, rail, msg, data);
                }
                Ev::Timer { node, gen } => {
                    let p = &mut self.procs[node];
                    if gen != p.timer_gen {
                        continue; // (an entry of a core dropped since)
                    }
                    if p.queued == Some(t) {
                        p.queued = None;
                    }
                    match p.timer {
                        Some(d) if d <= self.now => {
                            self.run.stats.events += 1;
                            // Paused or down: the resume fires it.
                            if !p.paused && !p.down && p.core.is_some() {
                                self.fire(node);
                            }
                        }
                        // An entry behind an earlier one that is still queued
                        // (the deadline moved earlier, then later again).
                        _ => continue,
                    }
                }
                Ev::App { node, gen } => {
                    self.run.stats.events += 1;
                    if gen == self.procs[node].app_gen && !self.procs[node].down {
                        if self.procs[node].paused {
                            self.procs[node].app_due = true;
                        } else {
                            self.act(node);
                        }
                    }
                }
                Ev::Create { node, instance } => {
                    self.run.stats.events += 1;
                    self.create(node, instance);
                }
                Ev::EpisodeStart(i) => {
                    self.run.stats.events += 1;
                    self.episode(i, true);
                }
                Ev::EpisodeEnd(i) => {
                    self.run.stats.events += 1;
                    self.episode(i, false);
                }
            }
            if self.all_done() {
                self.run.stats.completed = true;
                break;
            }
        }
        self.run.stats.end_ns = self.now;
        self.run.stages = self.procs.iter().map(|p| (p.instance, p.stage)).collect();
        self.run
    }

    /// If node `node`'s timer entry of generation `gen` at `t` comes before
    /// its deadline, and no earlier entry is queued for it, the deadline:
    /// the entry is queued again there (its node's `queued` says so).
    fn early_timer(&mut self, node: NodeId, gen: u64, t: u64) -> Option<u64> {
        let p = &mut self.procs[node];
        let d = p.timer?;
        if gen != p.timer_gen || d <= t {
            return None;
        }
        let queued = p.queued.filter(|&q| q != t);
        if queued.is_some_and(|q| d >= q) {
            return None;
        }
        p.queued = Some(d);
        Some(d)
    }

    fn all_done(&self) -> bool {
        let last = self.run.config.instances;
        self.procs.iter().all(|p| p.instance >= last)
    }

    fn fire(&mut self, node: NodeId) {
        self.trace(node, TraceEvent::Timeout);
        let now = self.local_now(node);
        self.procs[node].timer = None;
        if let Some(core) = self.procs[node].core.as_mut() {
            core.handle_timeout(now);
        }
        self.pump(node);
    }

    fn deliver(&mut self, to: NodeId, from: NodeId, rail: usize, msg: Msg, data: Vec<u8>) {
        let p = &mut self.procs[to];
        if p.down {
            self.run.stats.dropped += 1;
            self.trace(to, TraceEvent::Dropped { from, msg, cause: DropCause::Crashed });
            self.recycle(data);
            return;
        }
        if p.paused {
            p.backlog.push((from, rail, msg, data));
            return;
        }
        if p.core.is_none() {
            self.run.stats.dropped += 1;
            self.trace(to, TraceEvent::Dropped { from, msg, cause: DropCause::NoBarrier });
            self.recycle(data);
            return;
        }
        self.trace(to, TraceEvent::Received { from, msg, len: data.len() });
        if to == 0 {
            self.heard_by_0(from, &msg);
        }
        if to == 0 && msg.kind == MsgKind::Join && self.procs[0].stage == Stage::Joining {
            let j = self.procs[0].instance;
            if !self.run.joins_heard.iter().any(|&(i, x, _)| i == j && x == from) {
                self.run.joins_heard.push((j, from, self.now));
            }
        }
        let now = self.local_now(to);
        if let Some(core) = self.procs[to].core.as_mut() {
            core.handle_message(now, from, rail, &msg, &data);
        }
        self.recycle(data);
        self.pump(to);
    }

    /// Node 0 takes in `msg` from `from`: the first of its barrier's
    /// instance (or the instance beside) from that node is recorded.
    fn heard_by_0(&mut self, from: NodeId, msg: &Msg) {
        let Some((barrier, heard)) = self.barrier0.as_mut() else { return };
        let kind_counts = match msg.kind {
            MsgKind::Join | MsgKind::Admit | MsgKind::Refuse => false,
            MsgKind::Status => msg.tag & crate::transport::status::JOINING == 0,
            _ => true,
        };
        if kind_counts
            && heard.get(from).is_some_and(|&h| !h)
            && (msg.instance == *barrier || msg.instance == crate::core::derived_instance(*barrier))
        {
            heard[from] = true;
            self.run.heard_by_0.push((*barrier, from, self.now));
        }
    }

    /// Node 0 sends `t`: a refusal of a process in place of an admitted one is recorded.
    fn refusal_by_0(&mut self, t: &super::node::Transmit) {
        let (MsgKind::Refuse, crate::plan::Dest::Node(to), Some((barrier, _))) = (t.msg.kind, t.dest, self.barrier0.as_ref()) else { return };
        if t.msg.tag == 0 {
            let completed = self.procs[0].core.as_ref().is_some_and(|c| c.completed_any());
            self.run.refused_by_0.push((*barrier, to, self.now, completed));
        }
    }

    /// A copy of a message's data, in a buffer of the pool.
    fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        if data.is_empty() {
            return Vec::new();
        }
        let mut copy = self.pool.pop().unwrap_or_default();
        copy.extend_from_slice(data);
        copy
    }

    /// A delivered or dropped message's data buffer goes back to the pool.
    fn recycle(&mut self, mut data: Vec<u8>) {
        if data.capacity() > 0 && self.pool.len() < POOL {
            data.clear();
            self.pool.push(data);
        }
    }

    /// After any input to `node`: its transmits, its events, its timer.
    /// Each transmit is sent as it is polled (sending queues its
    /// deliveries and never touches a core); then the events polled, each
    /// told in turn; again until the node has neither.
    fn pump(&mut self, node: NodeId) {
        loop {
            // Each transmit's data is written into `scratch`, which goes
            // with it if it holds any (a pool buffer takes its place);
            // a message without data goes with none.
            while let Some(core) = self.procs[node].core.as_mut() {
                let Some(t) = core.poll_transmit(&mut self.scratch) else { break };
                let data = if self.scratch.is_empty() {
                    Vec::new()
                } else {
                    let next = self.pool.pop().unwrap_or_default();
                    std::mem::replace(&mut self.scratch, next)
                };
                if node == 0 && t.msg.kind == MsgKind::Refuse {
                    self.refusal_by_0(&t);
                }
                self.send(node, t, data);
            }
            // (Mostly there is no event: the list is taken only for one.)
            let Some(first) = self.procs[node].core.as_mut().and_then(|core| core.poll_event()) else { break };
            let mut events = std::mem::take(&mut self.events);
            events.push(first);
            if let Some(core) = self.procs[node].core.as_mut() {
                while let Some(e) = core.poll_event() {
                    events.push(e);
                }
            }
            for e in events.drain(..) {
                self.told(node, e);
            }
            self.events = events;
        }
        let p = &mut self.procs[node];
        let due = p.core.as_ref().and_then(|c| c.poll_timeout()).map(|d| {
            let at = match p.deadline {
                Some((i, at)) if i == d => at,
                _ => {
                    let at = p.clock.virtual_at(d.saturating_duration_since(self.base).as_nanos() as u64);
                    p.deadline = Some((d, at));
                    at
                }
            };
            at.max(self.now)
        });
        p.timer = due;
        if let Some(d) = due {
            if p.queued.is_none_or(|q| d < q) {
                p.queued = Some(d);
                let gen = p.timer_gen;
                self.push(d, Ev::Timer { node, gen });
            }
        }
    }
}
