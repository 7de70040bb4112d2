//! The simulated world: N nodes' protocol states over a simulated network,
//! one thread, virtual time, one event queue ordered by (time, sequence),
//! so a seed replays exactly. The applications follow their scripts
//! instance by instance; faults are applied as drawn; everything that
//! happens is recorded for the checkers ([`super::check`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::faults::{Episode, EpisodeKind, Faults};
use super::node::{AppCall, NodeEvent, NodeFactory, NodeSpec, SimNode, Transmit};
use super::rng::Rng;
use super::trace::{DropCause, Ring, TraceEvent};
use super::workload::{self, OpKind, ScriptOp};
use super::SimConfig;
use crate::plan::Dest;
use crate::transport::{Msg, NodeId};
use crate::BarrierError;

/// More events than this at one virtual time is a spin (a violation).
const SPIN_LIMIT: u64 = 200_000;

/// What an operation's call came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Not (yet) completed.
    Pending,
    /// Completed, with the result if the call has one here.
    Ok(Option<Vec<u8>>),
    /// Failed.
    Err(Verdict),
}

/// An error, as the checkers judge it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Peers named dead for their silence.
    Silent(Vec<NodeId>),
    /// A live peer (`reporter`) gave up because `silent` was silent.
    Failed {
        /// Who said so.
        reporter: NodeId,
        /// Whom it named.
        silent: NodeId,
    },
    /// Nodes called different collectives.
    Mismatch,
    /// Node 0 refused this node's join (a restarted process).
    Refused,
    /// Nodes did not join in time.
    JoinTimeout(Vec<NodeId>),
    /// Anything else (a deadline, a usage error, a transport error): the
    /// simulator never causes one.
    Other,
}

impl Verdict {
    /// Classifies an error.
    pub fn of(e: &BarrierError) -> Verdict {
        match e {
            BarrierError::PeerSilent { silent, .. } => Verdict::Silent(silent.clone()),
            BarrierError::PeerFailed { reporter, silent, .. } => Verdict::Failed { reporter: *reporter, silent: *silent },
            BarrierError::CollectiveMismatch { .. } => Verdict::Mismatch,
            BarrierError::Refused { .. } => Verdict::Refused,
            BarrierError::JoinTimeout { missing, .. } => Verdict::JoinTimeout(missing.clone()),
            _ => Verdict::Other,
        }
    }
}

/// One node's call of one operation.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRecord {
    /// When it called (virtual ns).
    pub entered: Option<u64>,
    /// When the call completed or failed.
    pub left: Option<u64>,
    /// What it came to.
    pub outcome: Outcome,
    /// The error's text (an index into [`Run::errors`]).
    pub error: Option<usize>,
}

impl OpRecord {
    const NONE: OpRecord = OpRecord { entered: None, left: None, outcome: Outcome::Pending, error: None };
}

/// One node's join of one instance (a restarted process joins again).
#[derive(Clone, Debug, PartialEq)]
pub struct JoinRecord {
    /// The node.
    pub node: NodeId,
    /// The instance.
    pub instance: usize,
    /// 0 for the node's first process in this instance, then 1, 2… after restarts.
    pub life: u32,
    /// The record.
    pub record: OpRecord,
}

/// Where a node's application is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// No barrier: waiting to create the next.
    Idle,
    /// Created, joining.
    Joining,
    /// Computing before operation `op` (`op` = the script's length: before `finish`).
    Think(usize),
    /// In operation `op`.
    InOp(usize),
    /// Entered split-phase barrier `op`, computing before `wait`.
    Entered(usize),
    /// In `finish`.
    Finishing,
    /// Failed: keeps its barrier (it answers peers) until every node is done with the instance.
    Lingering,
    /// Finished the instance; waits for the others.
    Done,
    /// Crashed in the instance.
    Crashed,
}

impl Stage {
    /// Whether the node is done with its instance.
    fn done(self) -> bool {
        matches!(self, Stage::Lingering | Stage::Done | Stage::Crashed)
    }
}

/// A node's clock: `local = offset + t · num / den`.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Rate numerator.
    pub num: u64,
    /// Rate denominator.
    pub den: u64,
    /// Offset, ns.
    pub offset: u64,
}

impl Clock {
    fn local(&self, t: u64) -> u64 {
        self.offset + (u128::from(t) * u128::from(self.num) / u128::from(self.den)) as u64
    }

    /// The first virtual time at which the local clock reads `local` or more.
    fn virtual_at(&self, local: u64) -> u64 {
        let l = local.saturating_sub(self.offset);
        (u128::from(l) * u128::from(self.den)).div_ceil(u128::from(self.num)) as u64
    }

    /// The rate.
    pub fn rate(&self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

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

struct Item {
    t: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Item) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Item) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Item) -> std::cmp::Ordering {
        (self.t, self.seq).cmp(&(o.t, o.seq))
    }
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Operations completed, summed over nodes, divided by the node count
    /// (collective calls, barriers included; finishes excluded).
    pub ops: u64,
    /// Of those, synchronising ones (barriers, split-phase, reductions).
    pub barriers: u64,
    /// Messages sent (a multicast counts once per receiver).
    pub messages: u64,
    /// Messages that did not arrive.
    pub dropped: u64,
    /// Events handled.
    pub events: u64,
    /// Virtual time at the end, ns.
    pub end_ns: u64,
    /// Whether every node got through every instance.
    pub completed: bool,
}

/// Everything a run recorded, for the checkers and the trace.
#[derive(Debug)]
pub struct Run {
    /// The configuration.
    pub config: SimConfig,
    /// The scripts, per instance.
    pub scripts: Vec<Vec<ScriptOp>>,
    /// `ops[instance][op][node]`.
    pub ops: Vec<Vec<Vec<OpRecord>>>,
    /// `finishes[instance][node]`.
    pub finishes: Vec<Vec<OpRecord>>,
    /// Every join.
    pub joins: Vec<JoinRecord>,
    /// When each instance began (its first creation) and ended (the last node done), ns.
    pub spans: Vec<(u64, u64)>,
    /// The episodes.
    pub episodes: Vec<Episode>,
    /// Every error's text.
    pub errors: Vec<String>,
    /// Where every node's application was at the end.
    pub stages: Vec<(usize, Stage)>,
    /// The last events of every node.
    pub traces: Vec<Ring>,
    /// The nodes' clocks.
    pub clocks: Vec<Clock>,
    /// The counters.
    pub stats: RunStats,
}

/// Runs one seed's world to its end.
pub struct World<F: NodeFactory> {
    factory: F,
    base: Instant,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Item>>,
    net: Rng,
    app: Rng,
    faults: Faults,
    /// Per directed link: in a burst, and until when (ns).
    bad: Vec<(bool, u64)>,
    partitions: Vec<usize>,
    procs: Vec<Proc<F::Node>>,
    out: Vec<Transmit>,
    events: Vec<NodeEvent>,
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
                // After a deliberate mismatch: one barrier, then finish.
                if let Some(k) = s.iter().position(|o| o.is_mismatch()) {
                    s.truncate(k + 1);
                    s.push(ScriptOp { kind: OpKind::Barrier, mismatched: vec![], other: OpKind::Barrier, think: vec![0; n] });
                }
                s
            })
            .collect();
        let ops = scripts.iter().map(|s| vec![vec![OpRecord::NONE; n]; s.len()]).collect();
        let finishes = vec![vec![OpRecord::NONE; n]; config.instances];
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
            joins: Vec::new(),
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
            seq: 0,
            queue: BinaryHeap::new(),
            net: Rng::fork(run.config.seed, 2),
            app: Rng::fork(run.config.seed, 3),
            faults: run.config.faults,
            bad: vec![(true, 0); n * n],
            partitions: Vec::new(),
            procs,
            out: Vec::new(),
            events: Vec::new(),
            run,
        }
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Item { t, seq: self.seq, ev }));
    }

    fn trace(&mut self, node: NodeId, ev: TraceEvent) {
        self.run.traces[node].push(self.now, ev);
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
        while let Some(Reverse(item)) = self.queue.pop() {
            if item.t > horizon {
                break;
            }
            if item.t == self.now {
                same += 1;
                if same > SPIN_LIMIT {
                    // Time stands still: a node whose deadline never
                    // advances, or nodes answering each other at once for ever.
                    let who = match item.ev {
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
            self.now = item.t;
            self.run.stats.events += 1;
            match item.ev {
                Ev::Deliver { to, from, rail, msg, data } => self.deliver(to, from, rail, msg, data),
                Ev::Timer { node, gen } => {
                    let p = &mut self.procs[node];
                    if gen != p.timer_gen {
                        continue;
                    }
                    if p.queued == Some(item.t) {
                        p.queued = None;
                    }
                    match p.timer {
                        Some(d) if d <= self.now && !p.paused && !p.down && p.core.is_some() => self.fire(node),
                        // Paused or down: the resume fires it.
                        Some(d) if d <= self.now => {}
                        // The deadline moved later since: wait for it.
                        Some(d) if p.queued.is_none_or(|q| d < q) => {
                            p.queued = Some(d);
                            self.push(d, Ev::Timer { node, gen });
                        }
                        _ => {}
                    }
                }
                Ev::App { node, gen } => {
                    if gen == self.procs[node].app_gen && !self.procs[node].down {
                        if self.procs[node].paused {
                            self.procs[node].app_due = true;
                        } else {
                            self.act(node);
                        }
                    }
                }
                Ev::Create { node, instance } => self.create(node, instance),
                Ev::EpisodeStart(i) => self.episode(i, true),
                Ev::EpisodeEnd(i) => self.episode(i, false),
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
            return;
        }
        if p.paused {
            p.backlog.push((from, rail, msg, data));
            return;
        }
        if p.core.is_none() {
            self.run.stats.dropped += 1;
            self.trace(to, TraceEvent::Dropped { from, msg, cause: DropCause::NoBarrier });
            return;
        }
        self.trace(to, TraceEvent::Received { from, msg, len: data.len() });
        let now = self.local_now(to);
        if let Some(core) = self.procs[to].core.as_mut() {
            core.handle_message(now, from, rail, &msg, &data);
        }
        self.pump(to);
    }

    /// After any input to `node`: its transmits, its events, its timer.
    fn pump(&mut self, node: NodeId) {
        loop {
            let mut out = std::mem::take(&mut self.out);
            let mut events = std::mem::take(&mut self.events);
            if let Some(core) = self.procs[node].core.as_mut() {
                while let Some(t) = core.poll_transmit() {
                    out.push(t);
                }
                while let Some(e) = core.poll_event() {
                    events.push(e);
                }
            }
            if out.is_empty() && events.is_empty() {
                self.out = out;
                self.events = events;
                break;
            }
            for t in out.drain(..) {
                self.send(node, t);
            }
            self.out = out;
            for e in events.drain(..) {
                self.told(node, e);
            }
            self.events = events;
        }
        let p = &mut self.procs[node];
        let due = p.core.as_ref().and_then(|c| c.poll_timeout()).map(|d| {
            let local = d.saturating_duration_since(self.base).as_nanos() as u64;
            p.clock.virtual_at(local).max(self.now)
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

    fn send(&mut self, from: NodeId, t: Transmit) {
        self.trace(from, TraceEvent::Sent { dest: t.dest, rail: t.rail, msg: t.msg, len: t.data.len() });
        match t.dest {
            Dest::Node(to) => self.send_one(from, to, t.rail, t.msg, t.data),
            Dest::All => {
                for to in (0..self.run.config.nodes).filter(|&to| to != from) {
                    self.send_one(from, to, t.rail, t.msg, t.data.clone());
                }
            }
        }
    }

    fn send_one(&mut self, from: NodeId, to: NodeId, rail: usize, msg: Msg, data: Vec<u8>) {
        self.run.stats.messages += 1;
        let cut = self.partitions.iter().any(|&i| self.run.episodes[i].separates(from, to));
        let f = self.faults;
        let link = from * self.run.config.nodes + to;
        let mut loss = f.loss;
        if let Some(b) = f.burst {
            let (mut bad, mut until) = self.bad[link];
            while until <= self.now {
                bad = !bad;
                let mean = if bad { b.bad_ns } else { b.good_ns };
                until += 1 + self.net.exp(mean as f64) as u64;
            }
            self.bad[link] = (bad, until);
            if bad {
                loss = b.loss;
            }
        }
        if cut || self.net.chance(loss) {
            self.run.stats.dropped += 1;
            let cause = if cut { DropCause::Partitioned } else { DropCause::Lost };
            self.run.traces[to].push(self.now, TraceEvent::Dropped { from, msg, cause });
            return;
        }
        if self.net.chance(f.duplicate) {
            let delay = self.delay();
            self.push(self.now + delay, Ev::Deliver { to, from, rail, msg, data: data.clone() });
        }
        let delay = self.delay();
        self.push(self.now + delay, Ev::Deliver { to, from, rail, msg, data });
    }

    /// One message's delay: the latency, exponential jitter, and now and
    /// then a long hold-up (reordering).
    fn delay(&mut self) -> u64 {
        let f = &self.faults;
        let mut delay = f.latency_ns + self.net.exp(f.jitter_ns as f64) as u64;
        if self.net.chance(f.reorder) {
            delay += self.net.range(0, f.reorder_ns);
            if self.net.chance(f.straggle / f.reorder) {
                delay += self.net.range(1_000_000, 20_000_000);
            }
        }
        delay
    }

    fn record(&mut self, node: NodeId) -> Option<&mut OpRecord> {
        let p = &self.procs[node];
        let inst = p.instance;
        match p.stage {
            Stage::InOp(k) | Stage::Entered(k) => self.run.ops.get_mut(inst)?.get_mut(k).map(|r| &mut r[node]),
            Stage::Finishing => self.run.finishes.get_mut(inst).map(|r| &mut r[node]),
            Stage::Joining => {
                let life = p.lives - 1;
                self.run.joins.iter_mut().rev().find(|j| j.node == node && j.instance == inst && j.life == life).map(|j| &mut j.record)
            }
            _ => None,
        }
    }

    /// The node's application is told `event`.
    fn told(&mut self, node: NodeId, event: NodeEvent) {
        let now = self.now;
        match event {
            NodeEvent::Joined => {
                self.trace(node, TraceEvent::Told { what: 0, error: 0 });
                if let Some(r) = self.record(node) {
                    r.left = Some(now);
                    r.outcome = Outcome::Ok(None);
                }
                let p = &mut self.procs[node];
                if p.stage != Stage::Joining {
                    self.unexpected(node, "joined while not joining");
                    return;
                }
                // (A restarted process admitted runs the script too: node 0
                // admits the latest incarnation of a node before the
                // instance forms, so its first life was never in it.)
                self.think(node, 0);
            }
            NodeEvent::Completed { result } => {
                self.trace(node, TraceEvent::Told { what: 1, error: 0 });
                let stage = self.procs[node].stage;
                match stage {
                    Stage::InOp(k) => {
                        let r = self.record(node).expect("an operation's record");
                        r.left = Some(now);
                        r.outcome = Outcome::Ok(result);
                        let inst = self.procs[node].instance;
                        let kind = self.run.scripts[inst][k].kind_at(node);
                        self.run.stats.ops += 1;
                        if kind.is_synchronising() {
                            self.run.stats.barriers += 1;
                        }
                        self.think(node, k + 1);
                    }
                    Stage::Finishing => {
                        let r = self.record(node).expect("a finish's record");
                        r.left = Some(now);
                        r.outcome = Outcome::Ok(None);
                        self.drop_core(node);
                        let p = &mut self.procs[node];
                        let inst = p.instance;
                        if self.run.config.back_to_back && !p.errored {
                            p.stage = Stage::Idle;
                            p.instance += 1;
                            p.lives = 0;
                            self.run.spans[inst].1 = self.run.spans[inst].1.max(now);
                            if p.instance < self.run.config.instances {
                                let t = now + self.app.range(0, 5_000);
                                self.push(t, Ev::Create { node, instance: inst + 1 });
                            }
                        } else {
                            p.stage = Stage::Done;
                        }
                        self.check_sync();
                    }
                    _ => self.unexpected(node, "completed with no call pending"),
                }
            }
            NodeEvent::Failed(e) => {
                let text = format!("node {node}: {e}");
                let verdict = Verdict::of(&e);
                let verdict_is_mismatch = verdict == Verdict::Mismatch;
                self.run.errors.push(text);
                let index = self.run.errors.len() - 1;
                self.trace(node, TraceEvent::Told { what: 2, error: index });
                match self.record(node) {
                    Some(r) => {
                        r.left = Some(now);
                        r.outcome = Outcome::Err(verdict);
                        r.error = Some(index);
                    }
                    None => {
                        self.unexpected(node, "failed with no call pending");
                        return;
                    }
                }
                // A mismatch leaves the instance working (issue 28): the
                // application reports it and goes on to its next operation,
                // as every node does; any other error ends its script.
                if verdict_is_mismatch {
                    if let Stage::InOp(k) = self.procs[node].stage {
                        self.think(node, k + 1);
                        return;
                    }
                }
                let p = &mut self.procs[node];
                p.errored = true;
                p.stage = Stage::Lingering;
                p.app_gen += 1;
                self.check_sync();
            }
        }
    }

    /// An event the node's contract does not allow: recorded as an error of a
    /// call that never happened (the checkers report it).
    fn unexpected(&mut self, node: NodeId, what: &str) {
        let stage = self.procs[node].stage;
        self.run.errors.push(format!("node {node}: UNEXPECTED: {what} (stage {stage:?})"));
        let p = &mut self.procs[node];
        p.errored = true;
        p.stage = Stage::Lingering;
        p.app_gen += 1;
        self.check_sync();
    }

    /// The node computes before operation `op` of its script.
    fn think(&mut self, node: NodeId, op: usize) {
        let inst = self.procs[node].instance;
        let script = &self.run.scripts[inst];
        let t = if op < script.len() { script[op].think[node] } else { self.app.range(0, 10_000) };
        let p = &mut self.procs[node];
        p.stage = Stage::Think(op);
        p.app_gen += 1;
        let gen = p.app_gen;
        self.push(self.now + t, Ev::App { node, gen });
    }

    /// The node's application acts: calls its next operation, or waits.
    fn act(&mut self, node: NodeId) {
        let now = self.local_now(node);
        let p = &self.procs[node];
        let inst = p.instance;
        let (call, next) = match p.stage {
            Stage::Think(k) if k == self.run.scripts[inst].len() => (AppCall::Finish, Stage::Finishing),
            Stage::Think(k) => {
                let kind = self.run.scripts[inst][k].kind_at(node);
                let call = match kind {
                    OpKind::Split { .. } => AppCall::Enter,
                    _ => AppCall::Collective { call: kind.collective(), input: workload::input(self.run.config.seed, inst, k, node, kind) },
                };
                (call, if matches!(kind, OpKind::Split { .. }) { Stage::Entered(k) } else { Stage::InOp(k) })
            }
            Stage::Entered(k) => (AppCall::Wait, Stage::InOp(k)),
            _ => return,
        };
        let op = match next {
            Stage::InOp(k) | Stage::Entered(k) => k,
            _ => usize::MAX,
        };
        let was_entered = matches!(p.stage, Stage::Entered(_));
        self.trace(node, TraceEvent::Call { instance: inst, op, what: call.name() });
        self.procs[node].stage = next;
        if !was_entered {
            let t = self.now;
            if let Some(r) = self.record(node) {
                // (A restarted process enters again: the first entry counts.)
                r.entered.get_or_insert(t);
            }
        }
        if let Stage::Entered(k) = next {
            // Compute, then wait.
            let OpKind::Split { compute } = self.run.scripts[inst][k].kind_at(node) else { unreachable!() };
            let p = &mut self.procs[node];
            p.app_gen += 1;
            let gen = p.app_gen;
            self.push(self.now + compute, Ev::App { node, gen });
        }
        if let Some(core) = self.procs[node].core.as_mut() {
            core.call(now, call);
        }
        self.pump(node);
    }

    fn create(&mut self, node: NodeId, instance: usize) {
        let p = &mut self.procs[node];
        if p.instance != instance || instance >= self.run.config.instances {
            return;
        }
        if p.down {
            p.want_create = true;
            return;
        }
        p.want_create = false;
        let life = p.lives;
        p.lives += 1;
        p.stage = Stage::Joining;
        p.errored = false;
        p.app_gen += 1;
        // Incarnations grow: a restarted process's is larger.
        let incarnation = ((instance as u64 + 1) << 40) | (u64::from(life) << 32) | (self.app.next_u64() & 0xFFFF_FFFF) | 1;
        let spec = NodeSpec {
            node,
            nodes: self.run.config.nodes,
            rails: self.run.config.barrier.rails,
            incarnation,
            config: self.run.config.barrier,
            max_data: self.run.config.max_data,
        };
        let now_local = self.local_now(node);
        self.trace(node, TraceEvent::Created { instance, incarnation });
        let core = self.factory.make(&spec, now_local);
        self.procs[node].core = Some(core);
        let span = &mut self.run.spans[instance];
        span.0 = span.0.min(self.now);
        self.run.joins.push(JoinRecord { node, instance, life, record: OpRecord { entered: Some(self.now), ..OpRecord::NONE } });
        self.pump(node);
    }

    fn drop_core(&mut self, node: NodeId) {
        if let Some(core) = self.procs[node].core.as_mut() {
            core.leave();
        }
        self.pump(node);
        let p = &mut self.procs[node];
        p.core = None;
        p.timer = None;
        p.queued = None;
        p.timer_gen += 1;
    }

    /// When every node is done with the instance most are in, the next begins.
    fn check_sync(&mut self) {
        let Some(j) = self.procs.iter().map(|p| p.instance).min() else { return };
        if j >= self.run.config.instances {
            return;
        }
        if !self.procs.iter().all(|p| p.instance > j || p.down || p.stage.done()) {
            return;
        }
        self.run.spans[j].1 = self.run.spans[j].1.max(self.now);
        for node in 0..self.procs.len() {
            if self.procs[node].instance != j {
                continue;
            }
            if self.procs[node].core.is_some() {
                self.drop_core(node);
            }
            let p = &mut self.procs[node];
            p.instance = j + 1;
            p.lives = 0;
            p.stage = Stage::Idle;
            p.app_gen += 1;
            if j + 1 < self.run.config.instances {
                let t = self.now + self.app.range(0, 100_000);
                self.push(t, Ev::Create { node, instance: j + 1 });
            }
        }
    }

    fn episode(&mut self, i: usize, start: bool) {
        let kind = self.run.episodes[i].kind.clone();
        match kind {
            EpisodeKind::Partition { side } => {
                for &node in &side {
                    let what = if start { "partitioned" } else { "partition healed" };
                    self.trace(node, TraceEvent::Fault { what });
                }
                if start {
                    self.partitions.push(i);
                } else {
                    self.partitions.retain(|&x| x != i);
                }
            }
            EpisodeKind::Pause { node } => {
                if self.procs[node].down {
                    return;
                }
                self.trace(node, TraceEvent::Fault { what: if start { "paused" } else { "resumed" } });
                if start {
                    self.procs[node].paused = true;
                    return;
                }
                let p = &mut self.procs[node];
                if !p.paused {
                    return;
                }
                p.paused = false;
                for (from, rail, msg, data) in std::mem::take(&mut p.backlog) {
                    self.deliver(node, from, rail, msg, data);
                }
                if self.procs[node].timer.is_some_and(|t| t <= self.now) && self.procs[node].core.is_some() {
                    self.fire(node);
                }
                if std::mem::take(&mut self.procs[node].app_due) {
                    self.act(node);
                }
            }
            EpisodeKind::Crash { node } => {
                if start {
                    self.trace(node, TraceEvent::Fault { what: "crashed" });
                    let p = &mut self.procs[node];
                    p.core = None;
                    p.down = true;
                    p.paused = false;
                    p.backlog.clear();
                    p.timer = None;
                    p.queued = None;
                    p.timer_gen += 1;
                    p.app_gen += 1;
                    if !matches!(p.stage, Stage::Idle | Stage::Done) {
                        p.stage = Stage::Crashed;
                    }
                    self.check_sync();
                } else {
                    self.trace(node, TraceEvent::Fault { what: "restarted" });
                    let p = &mut self.procs[node];
                    p.down = false;
                    let inst = p.instance;
                    if p.stage == Stage::Crashed || p.want_create {
                        self.create(node, inst);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_maps_deadlines_back_never_early() {
        let c = Clock { num: 3, den: 2, offset: 7 };
        for t in [0u64, 1, 2, 3, 999, 1_000_001] {
            let local = c.local(t);
            let back = c.virtual_at(local);
            assert!(back <= t && c.local(back) >= local, "t={t}");
        }
        for deadline in [7u64, 8, 100, 12345] {
            let t = c.virtual_at(deadline);
            assert!(c.local(t) >= deadline && (t == 0 || c.local(t - 1) < deadline));
        }
    }
}
