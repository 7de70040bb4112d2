//! The simulated network: a message's fate (partitions, independent and
//! burst loss, duplication, delay and reordering), and the fault
//! episodes (partitions, pauses, crashes and restarts) as they begin and end.

use super::super::faults::EpisodeKind;
use super::super::node::{NodeFactory, Transmit};
use super::super::trace::{DropCause, TraceEvent};
use super::{Ev, Stage, World};
use crate::plan::Dest;
use crate::transport::{Msg, NodeId};

impl<F: NodeFactory> World<F> {
    pub(super) fn send(&mut self, from: NodeId, t: Transmit, data: Vec<u8>) {
        self.trace(from, TraceEvent::Sent { dest: t.dest, rail: t.rail, msg: t.msg, len: data.len() });
        match t.dest {
            Dest::Node(to) => self.send_one(from, to, t.rail, t.msg, data),
            Dest::All => {
                let last = if from == self.run.config.nodes - 1 { from - 1 } else { self.run.config.nodes - 1 };
                for to in (0..last).filter(|&to| to != from) {
                    let copy = self.copy_of(&data);
                    self.send_one(from, to, t.rail, t.msg, copy);
                }
                self.send_one(from, last, t.rail, t.msg, data);
            }
        }
    }

    pub(super) fn send_one(&mut self, from: NodeId, to: NodeId, rail: usize, msg: Msg, data: Vec<u8>) {
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
            self.trace(to, TraceEvent::Dropped { from, msg, cause });
            self.recycle(data);
            return;
        }
        if self.net.chance(f.duplicate) {
            let delay = self.delay();
            let copy = self.copy_of(&data);
            self.push(self.now + delay, Ev::Deliver { to, from, rail, msg, data: copy });
        }
        let delay = self.delay();
        self.push(self.now + delay, Ev::Deliver { to, from, rail, msg, data });
    }

    /// One message's delay: the latency, exponential jitter, and now and
    /// then a long hold-up (reordering).
    pub(super) fn delay(&mut self) -> u64 {
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

    pub(super) fn episode(&mut self, i: usize, start: bool) {
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
                    if node == 0 {
                        self.barrier0 = None;
                    }
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
