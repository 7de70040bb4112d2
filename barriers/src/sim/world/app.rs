//! The applications: each node follows its script instance by instance
//! (create, think, call, finish), and what its node tells it is recorded.

use super::super::node::{AppCall, NodeEvent, NodeFactory, NodeSpec, SimNode};
use super::super::trace::TraceEvent;
use super::super::workload::{self, OpKind};
use super::{Ev, JoinRecord, OpRecord, Outcome, Stage, Verdict, World};
use crate::transport::NodeId;

impl<F: NodeFactory> World<F> {
    pub(super) fn record(&mut self, node: NodeId) -> Option<&mut OpRecord> {
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
    /// (Out of line: rare beside the transmits `pump` handles.)
    #[inline(never)]
    pub(super) fn told(&mut self, node: NodeId, event: NodeEvent) {
        let now = self.now;
        match event {
            NodeEvent::Joined { instance: barrier } => {
                self.trace(node, TraceEvent::Told { what: 0, error: 0 });
                let (inst, life) = (self.procs[node].instance, self.procs[node].lives.wrapping_sub(1));
                if let Some(j) = self.run.joins.iter_mut().rev().find(|j| j.node == node && j.instance == inst && j.life == life) {
                    j.barrier = Some(barrier);
                }
                if node == 0 {
                    self.barrier0 = Some((barrier, vec![false; self.run.config.nodes]));
                }
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
                        if kind.is_synchronising(self.run.config.nodes) {
                            self.run.stats.barriers += 1;
                            if let Some((barrier, _)) = self.barrier0.as_ref().filter(|_| node == 0) {
                                if !self.run.completed_by_0.iter().any(|&(b, _)| b == *barrier) {
                                    self.run.completed_by_0.push((*barrier, now));
                                }
                            }
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
                // as every node does; any other error ends its script. So
                // does a mismatch in a barrier that holds a process running
                // another instance's script (see `crossed_barrier`): its
                // calls and its peers' differ for ever.
                if verdict_is_mismatch && !self.crossed_barrier(node) {
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

    /// Whether the barrier `node`'s process joined also holds a process of
    /// another of the application's instances: one restarted in instance
    /// `j` runs `j`'s script again, and may be admitted into the barrier
    /// its peers made for `j + 1` (the checker's `crossed`).
    fn crossed_barrier(&self, node: NodeId) -> bool {
        let p = &self.procs[node];
        let (inst, life) = (p.instance, p.lives.wrapping_sub(1));
        let joins = &self.run.joins;
        let Some(barrier) = joins.iter().rev().find(|j| j.node == node && j.instance == inst && j.life == life).and_then(|j| j.barrier) else {
            return false;
        };
        joins.iter().any(|j| j.barrier == Some(barrier) && j.instance != inst)
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
    pub(super) fn think(&mut self, node: NodeId, op: usize) {
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
    pub(super) fn act(&mut self, node: NodeId) {
        let now = self.local_now(node);
        let p = &self.procs[node];
        let inst = p.instance;
        let (call, next) = match p.stage {
            Stage::Think(k) if k == self.run.scripts[inst].len() => (AppCall::Finish, Stage::Finishing),
            Stage::Think(k) => {
                let kind = self.run.scripts[inst][k].kind_at(node);
                let call = match kind {
                    OpKind::Split { .. } => AppCall::Enter,
                    _ => {
                        let input = workload::input(self.run.config.seed, inst, k, node, kind);
                        let kept = &mut self.run.inputs[inst][k][node];
                        if kept.is_empty() {
                            kept.extend_from_slice(&input);
                        }
                        AppCall::Collective { call: kind.collective(), input }
                    }
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

    pub(super) fn create(&mut self, node: NodeId, instance: usize) {
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
        if node == 0 {
            self.barrier0 = None;
        }
        self.trace(node, TraceEvent::Created { instance, incarnation });
        let core = self.factory.make(&spec, now_local);
        self.procs[node].core = Some(core);
        let span = &mut self.run.spans[instance];
        span.0 = span.0.min(self.now);
        self.run.joins.push(JoinRecord { node, instance, life, record: OpRecord { entered: Some(self.now), ..OpRecord::NONE }, barrier: None });
        self.pump(node);
    }

    pub(super) fn drop_core(&mut self, node: NodeId) {
        if let Some(core) = self.procs[node].core.as_mut() {
            core.leave();
        }
        self.pump(node);
        let p = &mut self.procs[node];
        p.core = None;
        p.timer = None;
        p.queued = None;
        p.timer_gen += 1;
        if node == 0 {
            self.barrier0 = None;
        }
    }

    /// When every node is done with the instance most are in, the next begins.
    pub(super) fn check_sync(&mut self) {
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
}
