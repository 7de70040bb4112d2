//! The checkers, run on every run's records:
//!
//! - **safety**: no node completes a barrier (a split-phase barrier, a
//!   reduction, a `finish`) before every node entered it, on the shared
//!   virtual clock (a process running another instance's script in the
//!   barrier enters by its call that runs the same epoch: its finish's
//!   closing barrier may meet its peers' operation);
//! - **agreement**: every node's collective result is bitwise equal to the
//!   reference fold ([`super::workload::reference`]) (a process running
//!   another instance's script in the barrier: or to the barrier's other
//!   instance's at the same call, if that call is the same);
//! - **mismatch**: a deliberately mismatched call is an error on every
//!   node (at that call; a broadcast's, whose call returns with the data,
//!   at the next), and the instance goes on: each node's application
//!   reports it and calls its next operation, which must work (not in a
//!   barrier that also holds a process restarted in another instance,
//!   whose script differs for ever: there each application ends its
//!   script, and a node whose broadcast had returned before the mismatch
//!   showed waits in its next call for peers that never call again);
//! - **liveness**: every node gets through every instance (but for the
//!   call just named, and only it: PROTOCOL.md's liveness is for calls
//!   every node makes; see `Checker::waits_for_ended_scripts`); in an instance
//!   no node was silent in, every call completes within a bound after its
//!   last entry (per epoch it takes: a large collective runs in segments);
//! - **verdicts**: an error names only nodes that really were silent to the
//!   node concerned (crashed, paused, partitioned from it, or gone: its
//!   join failed, or elsewhere: in a barrier of node 0's earlier process,
//!   node 0 restarted and admitted it again; in a barrier that held processes of another instance,
//!   in the instance the named node's process there runs, or in the
//!   barrier's instances if it had none there) for
//!   at least half its failure timeout (a report, which
//!   nodes pass on: silent to some node), or a mismatch that
//!   was really there (also between a process restarted in one instance
//!   and the barrier its peers made for the next, which admitted it);
//!   node 0 refuses only a restarted process (or a node whose place such
//!   a process holds); a join that times out names only
//!   nodes silent to it or (named by node 0) to node 0, that had not
//!   made the barrier yet (the join timeout waits that long for every member),
//!   or whose requests node 0's joining process never heard (lost).

use std::fmt;

use super::faults::EpisodeKind;
use super::workload::{self, OpKind};
use super::world::{OpRecord, Outcome, Run, Stage, Verdict};
use crate::transport::NodeId;

/// A checker's finding.
#[derive(Clone, Debug, PartialEq)]
pub enum Violation {
    /// `left` completed a call before `not_entered` entered it.
    Safety {
        /// The instance.
        instance: usize,
        /// The operation (`None`: the finish).
        op: Option<usize>,
        /// The node that completed.
        left: NodeId,
        /// When, ns.
        at: u64,
        /// A node that had not entered.
        not_entered: NodeId,
        /// When that node entered, if ever.
        entered: Option<u64>,
    },
    /// A result differs from the reference.
    Agreement {
        /// The instance.
        instance: usize,
        /// The operation.
        op: usize,
        /// The node.
        node: NodeId,
        /// What differs.
        detail: String,
    },
    /// A mismatched call completed on a node without an error.
    MismatchUnreported {
        /// The instance.
        instance: usize,
        /// The mismatched operation.
        op: usize,
        /// The node that saw no error.
        node: NodeId,
    },
    /// A call took longer than the bound though every node was reachable.
    Slow {
        /// The instance.
        instance: usize,
        /// The operation (`None`: the finish).
        op: Option<usize>,
        /// The node.
        node: NodeId,
        /// How long after the last entry (or its own wait, if later) it completed, ns.
        took: u64,
    },
    /// A node never got through an instance.
    Stuck {
        /// The node.
        node: NodeId,
        /// The instance it was in.
        instance: usize,
        /// Where its application was.
        stage: Stage,
    },
    /// An error the faults do not justify.
    Verdict {
        /// The instance.
        instance: usize,
        /// What it failed (`op 3`, `finish`, `join`).
        call: String,
        /// The node.
        node: NodeId,
        /// The error's text.
        error: String,
        /// Why it is wrong.
        why: String,
    },
    /// The node broke the driving contract (an event with no call).
    Contract {
        /// What happened.
        text: String,
    },
}

impl Violation {
    /// Its checker's name.
    pub fn checker(&self) -> &'static str {
        match self {
            Violation::Safety { .. } => "safety",
            Violation::Agreement { .. } => "agreement",
            Violation::MismatchUnreported { .. } => "mismatch",
            Violation::Slow { .. } | Violation::Stuck { .. } => "liveness",
            Violation::Verdict { .. } => "verdict",
            Violation::Contract { .. } => "contract",
        }
    }
}

fn ms(t: u64) -> f64 {
    t as f64 / 1e6
}

fn op_name(op: Option<usize>) -> String {
    op.map_or("finish".into(), |k| format!("op {k}"))
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ", self.checker())?;
        match self {
            Violation::Safety { instance, op, left, at, not_entered, entered } => write!(
                f,
                "instance {instance} {}: node {left} completed at {:.3} ms, but node {not_entered} {}",
                op_name(*op),
                ms(*at),
                entered.map_or("never entered".into(), |t| format!("entered only at {:.3} ms", ms(t)))
            ),
            Violation::Agreement { instance, op, node, detail } => write!(f, "instance {instance} op {op}: node {node}'s result {detail}"),
            Violation::MismatchUnreported { instance, op, node } => {
                write!(f, "instance {instance} op {op} was mismatched on purpose, but node {node} saw no error (at it, or the call after)")
            }
            Violation::Slow { instance, op, node, took } => write!(
                f,
                "instance {instance} {}: node {node} completed {:.3} ms after the last node entered (and it waited), though no node was silent",
                op_name(*op),
                ms(*took)
            ),
            Violation::Stuck { node, instance, stage } => write!(f, "node {node} never got through instance {instance} (its application: {stage:?})"),
            Violation::Verdict { instance, call, error, why, .. } => write!(f, "instance {instance} {call}: {error} — {why}"),
            Violation::Contract { text } => f.write_str(text),
        }
    }
}

impl Violation {
    /// The instance and call it concerns (`None`: the finish), if one.
    pub fn call(&self) -> Option<(usize, Option<usize>)> {
        match self {
            Violation::Safety { instance, op, .. } | Violation::Slow { instance, op, .. } => Some((*instance, *op)),
            Violation::Agreement { instance, op, .. } | Violation::MismatchUnreported { instance, op, .. } => Some((*instance, Some(*op))),
            _ => None,
        }
    }

    /// The node it concerns most.
    pub fn node(&self) -> Option<NodeId> {
        match self {
            Violation::Safety { left, .. } => Some(*left),
            Violation::Agreement { node, .. }
            | Violation::MismatchUnreported { node, .. }
            | Violation::Slow { node, .. }
            | Violation::Stuck { node, .. }
            | Violation::Verdict { node, .. } => Some(*node),
            Violation::Contract { .. } => None,
        }
    }
}

/// Whether `x` was silent to `y` (crashed, paused, or partitioned from it)
/// for at least `need` ns up to time `t`.
fn silent_to(run: &Run, x: NodeId, y: NodeId, t: u64, need: u64) -> bool {
    run.episodes.iter().any(|e| {
        if !e.separates(x, y) || e.start > t {
            return false;
        }
        // A crashed process is gone for good: its restart is another.
        let end = if matches!(e.kind, EpisodeKind::Crash { node } if node == x) { u64::MAX } else { e.end };
        end.min(t) - e.start >= need
    })
}

/// How many epochs a call of `kind` takes when a message carries at most
/// `max_data` bytes (as [`super::CoreNode`] and the blocking driver segment it).
fn epochs(kind: &OpKind, max_data: usize) -> u64 {
    let size = kind.collective().element_size();
    if size == 0 {
        return 1;
    }
    let per = (max_data.saturating_sub(crate::collective::wire::HEADER_LEN) / size * size).max(1);
    kind.bytes().div_ceil(per).max(1) as u64
}

/// Whether some node was silent to another during `span`.
fn silence_during(run: &Run, span: (u64, u64)) -> bool {
    run.episodes.iter().any(|e| e.start <= span.1 && e.end >= span.0)
}

struct Checker<'a> {
    run: &'a Run,
    out: Vec<Violation>,
    /// Per instance: a barrier its processes joined also held a process
    /// running another instance's script (see [`crossed`]).
    crossed: Vec<bool>,
}

/// Per instance of the run: whether a barrier its processes joined also
/// held a process of another instance. A process restarted in instance `j`
/// runs `j`'s script again; its peers, back to back, may have gone on to
/// `j + 1`, whose barrier admits it (nothing in a join says which of the
/// application's instances it is for). Its calls and theirs then really
/// differ: a collective mismatch there is right, and so is node 0's refusal
/// of the node's own next process, whose place it holds.
fn crossed(run: &Run) -> Vec<bool> {
    let mut out = vec![false; run.config.instances];
    for a in &run.joins {
        let Some(barrier) = a.barrier else { continue };
        if run.joins.iter().any(|b| b.instance != a.instance && b.barrier == Some(barrier)) {
            if let Some(c) = out.get_mut(a.instance) {
                *c = true;
            }
        }
    }
    out
}

impl Checker<'_> {
    /// Half the failure timeout as node `y`'s clock runs.
    fn need(&self, y: NodeId) -> u64 {
        let f = self.run.config.barrier.failure_timeout.as_nanos() as u64;
        (f as f64 / (2.0 * self.run.clocks[y].rate())) as u64
    }

    /// Whether `x` had left instance `j` by time `t`, `need` ns before:
    /// its join failed (its process has no barrier of the instance; it
    /// answers nothing of it).
    fn gone(&self, x: NodeId, j: usize, t: u64, need: u64) -> bool {
        let last = self.run.joins.iter().rev().find(|r| r.node == x && r.instance == j && r.record.left.is_some_and(|l| l <= t));
        last.is_some_and(|r| matches!(r.record.outcome, Outcome::Err(_)) && r.record.left.is_some_and(|l| t - l >= need))
    }

    /// Whether `x` had not made instance `j`'s barrier for `need` ns of the
    /// instance by time `t` (still finishing the last instance): it answers
    /// nothing of it meanwhile. (Node 0 may have admitted a delayed join of
    /// its process of the instance before in its place: soak seeds 1030677,
    /// 1038260.)
    fn absent(&self, x: NodeId, j: usize, t: u64, need: u64) -> bool {
        let made = |r: &&super::world::JoinRecord| r.instance == j && r.record.entered.is_some();
        let Some(start) = self.run.joins.iter().filter(made).filter_map(|r| r.record.entered).min() else { return false };
        let mine = self.run.joins.iter().filter(made).filter(|r| r.node == x).filter_map(|r| r.record.entered).min().unwrap_or(u64::MAX);
        mine.min(t).saturating_sub(start) >= need
    }

    /// The instances in which a node `x` named at time `t` by the process
    /// of `node` running instance `j`'s script is judged: those of `x`'s
    /// processes in that process's barrier (the last one it joined by `t`;
    /// in a crossed barrier, see [`crossed`], they may run another
    /// instance's script than `node`'s), or, if `x` had none there (its
    /// join failed, or it had not made it), every instance whose processes
    /// were in it (`j` among them). A process that had joined no barrier
    /// by then: `j`.
    fn judged_in(&self, node: NodeId, j: usize, t: u64, x: NodeId) -> Vec<usize> {
        let joins = &self.run.joins;
        let mine = |a: &&super::world::JoinRecord| a.node == node && a.instance == j && a.barrier.is_some() && a.record.left.is_some_and(|l| l <= t);
        let Some(barrier) = joins.iter().rev().find(mine).and_then(|a| a.barrier) else { return vec![j] };
        let instances = |named: Option<NodeId>| {
            let mut out: Vec<usize> = Vec::new();
            for b in joins.iter().filter(|b| b.barrier == Some(barrier) && named.is_none_or(|x| b.node == x)) {
                if !out.contains(&b.instance) {
                    out.push(b.instance);
                }
            }
            out
        };
        let out = instances(Some(x));
        if out.is_empty() {
            return instances(None);
        }
        out
    }

    /// The barrier `node`'s last process in instance `j` joined, if it
    /// joined one.
    fn barrier_of(&self, node: NodeId, j: usize) -> Option<u64> {
        self.run.joins.iter().rev().find(|a| a.node == node && a.instance == j && a.barrier.is_some()).and_then(|a| a.barrier)
    }

    /// Whether `node`, at the run's end in instance `j`'s call at `stage`,
    /// waits for peers that ended their scripts, which PROTOCOL.md does not
    /// promise to complete (its liveness holds for calls every node
    /// makes). All of it must hold:
    /// - its barrier held a process running another instance's script
    ///   (crossed: the scripts differ for ever, so after a mismatch there
    ///   each process ends its script, the world's `crossed_barrier`);
    /// - its call before this one returned with no error and was a
    ///   broadcast (which returns with the data before its epoch is
    ///   complete): a mismatch in that epoch is reported at the end of
    ///   this call, "which still runs" (PROTOCOL.md, plan mismatch), and
    ///   needs every peer to enter it;
    /// - a peer in its barrier was told a mismatch at an operation before
    ///   this one (by index: both scripts run from the barrier's first
    ///   epoch) and so ended its script.
    ///
    /// A node stuck in the mismatched call itself, or with no peer that
    /// ended its script, is not excused.
    fn waits_for_ended_scripts(&self, node: NodeId, j: usize, stage: Stage) -> bool {
        let run = self.run;
        let k = match stage {
            Stage::InOp(k) | Stage::Entered(k) => k,
            Stage::Finishing => run.scripts[j].len(),
            _ => return false,
        };
        let Some(barrier) = self.barrier_of(node, j) else { return false };
        let crossed = run.joins.iter().any(|b| b.barrier == Some(barrier) && b.instance != j);
        let Some(before) = k.checked_sub(1) else { return false };
        let returned_early =
            !run.scripts[j][before].kind_at(node).is_synchronising(run.config.nodes) && matches!(run.ops[j][before][node].outcome, Outcome::Ok(_));
        let peer_ended = run.joins.iter().filter(|b| b.barrier == Some(barrier) && b.node != node).any(|b| {
            let ops = &run.ops[b.instance];
            ops.iter().take(k).any(|recs| matches!(recs[b.node].outcome, Outcome::Err(Verdict::Mismatch)))
        });
        crossed && returned_early && peer_ended
    }

    /// Whether `node`, at the run's end in instance `j`'s call at `stage`,
    /// runs pairs ([`super::PairNode`]) in a barrier that also holds a
    /// process running another instance's script (see `crossed`): its
    /// calls and its peers' may be on different barriers of the pair at the
    /// same index, and never meet (with one barrier, they are a mismatch).
    ///
    /// (Until finding j-3 it also excused a node waiting on one barrier of
    /// its pair for a peer whose application was told an error on the
    /// other and ended its script there: that peer's barrier beside
    /// answered with plain statuses, so the node waited for ever, and so
    /// did every node that waited for it in turn (pair seed 103405). Now a
    /// failure told on either barrier, the application not having called
    /// since, is said on both ([`crate::core::AppWord`]): the node fails,
    /// naming the silent node, as beside the barrier it was told on.)
    fn waits_beside_a_crossed_script(&self, node: NodeId, j: usize, stage: Stage) -> bool {
        let run = self.run;
        if !run.config.pair || !matches!(stage, Stage::InOp(_) | Stage::Entered(_) | Stage::Finishing) {
            return false;
        }
        let Some(barrier) = self.barrier_of(node, j) else { return false };
        run.joins.iter().any(|b| b.barrier == Some(barrier) && b.instance != j)
    }

    /// Whether `x` was silent to `y` for `need` ns by time `t` in instance
    /// `j`: crashed, paused, partitioned from it, gone, or not there yet.
    fn silent(&self, x: NodeId, y: NodeId, j: usize, t: u64) -> bool {
        let need = self.need(y);
        silent_to(self.run, x, y, t, need) || self.gone(x, j, t, need) || self.absent(x, j, t, need) || self.elsewhere(x, y, j, t, need)
    }

    /// Whether `x`'s processes of instance `j` were all in barriers of an
    /// earlier process of node 0, which crashed before `y`'s barrier (the
    /// one `y`'s process was in at `t`) began, `need` ns before `t`: node
    /// 0's restarted process made `y`'s barrier, admitting `x` on a request
    /// `x` sent before the earlier admission reached it (a paused node's
    /// queue, a reordered request), but `x` runs the earlier barrier and
    /// answers nothing of `y`'s: silent to it (PROTOCOL.md, the join: a
    /// node admitted by an earlier process of node 0, which was restarted,
    /// is in a barrier of that instance that never completes without it;
    /// soak seed 4631221).
    fn elsewhere(&self, x: NodeId, y: NodeId, j: usize, t: u64, need: u64) -> bool {
        let joins = &self.run.joins;
        let by_t = |a: &&super::world::JoinRecord| a.barrier.is_some() && a.record.left.is_some_and(|l| l <= t);
        let Some(mine) = joins.iter().rev().filter(by_t).find(|a| a.node == y) else { return false };
        let since = mine.record.left.unwrap_or(t);
        let node0_restarted = self.run.episodes.iter().any(|e| matches!(e.kind, EpisodeKind::Crash { node: 0 }) && e.end <= since);
        let node0s_earlier =
            |b: Option<u64>| b != mine.barrier && joins.iter().any(|o| o.node == 0 && o.barrier == b && o.record.left.is_some_and(|l| l <= since));
        let mut theirs = joins.iter().filter(by_t).filter(|a| a.node == x && a.instance == j).peekable();
        node0_restarted && t.saturating_sub(since) >= need && theirs.peek().is_some() && theirs.all(|a| node0s_earlier(a.barrier))
    }

    /// Whether `x` was silent to some other node by time `t` in instance
    /// `j`: a report passed on from node to node (each says it gave up,
    /// naming the silent node, once it took a report for true: its
    /// application may have been told another failure, or none yet) is
    /// right if the node that found `x` silent first was right.
    fn silent_to_some(&self, x: NodeId, j: usize, t: u64) -> bool {
        (0..self.run.config.nodes).any(|y| y != x && self.silent(x, y, j, t))
    }

    /// `call` names what failed (formatted only for a violation).
    fn verdict(&mut self, instance: usize, call: impl FnOnce() -> String, node: NodeId, r: &OpRecord, allowed_mismatch: bool, restarted: bool) {
        let Outcome::Err(v) = &r.outcome else { return };
        let t = r.left.unwrap_or(0);
        // A process in a barrier that also held processes of another
        // instance (see `crossed`) names nodes of that barrier, each judged
        // in the instance whose script its process there runs.
        let why = match v {
            Verdict::Silent(nodes) => {
                let wrong: Vec<NodeId> = nodes
                    .iter()
                    .copied()
                    .filter(|&x| !self.judged_in(node, instance, t, x).into_iter().any(|i| self.silent(x, node, i, t)))
                    .collect();
                (!wrong.is_empty()).then(|| format!("node(s) {wrong:?} were not silent to node {node}"))
            }
            // A node that reports itself: its peers gave up on it (it was
            // silent to one of them), and it says so to those waiting for it.
            // The reporter found it silent, or passes on a report (or was
            // named by one: its peers gave up on it).
            Verdict::Failed { reporter, silent } => {
                let right = self
                    .judged_in(node, instance, t, *silent)
                    .into_iter()
                    .any(|i| self.silent(*silent, *reporter, i, t) || self.silent_to_some(*silent, i, t));
                (!right).then(|| format!("node {silent} was silent to no node (reported by node {reporter})"))
            }
            Verdict::Mismatch => (!allowed_mismatch).then(|| "no call was mismatched".to_string()),
            Verdict::Refused => (!restarted).then(|| "the process was not restarted".to_string()),
            Verdict::JoinTimeout(missing) => {
                // Node 0 names the nodes it did not hear; another node names
                // node 0, or the nodes node 0 said it still waited for.
                // Silent as for any verdict: also gone, its own join failed
                // (node 0 that gave up answers no more requests; its word
                // that it did may be lost: soak seed 13186), or late, its
                // application had not made the barrier (not asked node 0)
                // by then, as the join timeout means ("waits for every
                // member"): still finishing the last instance, say, its
                // farewell waiting out a peer that left (soak seed 15303).
                // (Late here: not made by `t`, less the margin; a node that
                // asked node 0 well before is not late, however late it came.)
                let quiet = |x: NodeId, y: NodeId| {
                    let need = self.need(y);
                    let late =
                        !self.run.joins.iter().any(|r| r.node == x && r.instance == instance && r.record.entered.is_some_and(|e| e + need <= t));
                    silent_to(self.run, x, y, t, need) || self.gone(x, instance, t, need) || late
                };
                // Or node 0's joining process never heard its request (by
                // `t`, less the margin): lost, every one of them, at random
                // (PROTOCOL.md: "otherwise the nodes node 0 never heard";
                // soak seed 3102579: eight requests in a row lost at 30%).
                let unheard =
                    |x: NodeId| x != 0 && !self.run.joins_heard.iter().any(|&(i, y, at)| i == instance && y == x && at + self.need(node) <= t);
                let silent = |x: NodeId| quiet(x, node) || (node != 0 && x != 0 && quiet(x, 0)) || unheard(x);
                // Node 0 crashed and restarted: the nodes its earlier process
                // admitted run that instance, and never join the new one.
                let node0_restarted = self.run.episodes.iter().any(|e| matches!(e.kind, EpisodeKind::Crash { node: 0 }) && e.end <= t);
                let wrong: Vec<NodeId> = missing.iter().copied().filter(|&x| !(silent(x) || (x != 0 && node0_restarted))).collect();
                (!restarted && !wrong.is_empty()).then(|| format!("node(s) {wrong:?} were reachable and not restarted"))
            }
            Verdict::Other => Some("the simulator causes no such error".to_string()),
        };
        if let Some(why) = why {
            let error = r.error.and_then(|i| self.run.errors.get(i)).cloned().unwrap_or_default();
            self.out.push(Violation::Verdict { instance, call: call(), node, error, why });
        }
    }

    fn instance(&mut self, j: usize) {
        let run = self.run;
        let n = run.config.nodes;
        let script = &run.scripts[j];
        let ops = &run.ops[j];
        let mismatch_at = script.iter().position(|o| o.is_mismatch());
        // An instance that never ended lasts to the end of the run (a pair's
        // whose node waited beside a failure, before finding j-3's fix: a
        // node that crashed in it is excused its mismatch's report: seed
        // 11996 of the pairs' soak).
        let span = if run.spans[j].1 < run.spans[j].0 { (run.spans[j].0, u64::MAX) } else { run.spans[j] };
        let crashed_in = |b: NodeId| run.episodes.iter().any(|e| matches!(e.kind, EpisodeKind::Crash { node } if node == b) && e.start <= span.1);
        let clean = !silence_during(run, span) && mismatch_at.is_none();
        let bound = run.config.liveness_ns;
        // A restarted process that was admitted again, in place of one that
        // had taken part, finds its peers barriers ahead: refused.
        let restarted = |b: NodeId| run.joins.iter().any(|r| r.node == b && r.instance == j && r.life > 0);
        // Node `x`'s input of instance `i`'s op `k` as `kind`: the one its
        // application called with, if it called (drawn again otherwise).
        let input_of = |i: usize, k: usize, x: NodeId, kind: OpKind| {
            let kept = &run.inputs[i][k][x];
            if !kept.is_empty() && run.scripts[i][k].kind_at(x) == kind {
                kept.clone()
            } else {
                workload::input(run.config.seed, i, k, x, kind)
            }
        };
        for (k, recs) in ops.iter().enumerate() {
            let sop = &script[k];
            // Safety.
            if sop.kind.is_synchronising(n) && !sop.is_mismatch() {
                self.safety(j, Some(k), recs);
            }
            // Agreement.
            let mut reference: Option<Option<Vec<u8>>> = None;
            for (b, r) in recs.iter().enumerate() {
                let kind = sop.kind_at(b);
                if let Outcome::Ok(result) = &r.outcome {
                    if sop.is_mismatch() || !kind.has_result_at(b) {
                        continue;
                    }
                    let want = reference.get_or_insert_with(|| match kind {
                        // A broadcast's result is its root's input (the
                        // others' inputs are never read: not made).
                        OpKind::Bcast { root, .. } => Some(input_of(j, k, root, kind)),
                        _ => {
                            let inputs: Vec<Vec<u8>> = (0..n).map(|x| input_of(j, k, x, kind)).collect();
                            workload::reference(run.config.barrier.algorithm, kind, &inputs)
                        }
                    });
                    // A process restarted in this instance and admitted into
                    // a barrier made for another (crossed) runs that
                    // barrier's calls, by index from its first epoch: where
                    // they are the same call, its result is theirs (soak seed
                    // 6757656: both instances' op 0 a broadcast of 11 bytes
                    // from node 0; the restarted node 1 got instance 1's data).
                    let theirs = |other: usize| {
                        let Some(sop) = run.scripts[other].get(k).filter(|o| o.kind_at(b) == kind && !o.is_mismatch()) else { return false };
                        let other_ref = match sop.kind_at(b) {
                            OpKind::Bcast { root, .. } => Some(input_of(other, k, root, kind)),
                            _ => {
                                let inputs: Vec<Vec<u8>> = (0..n).map(|x| input_of(other, k, x, kind)).collect();
                                workload::reference(run.config.barrier.algorithm, kind, &inputs)
                            }
                        };
                        result == &other_ref
                    };
                    let crossed_into = |other: usize| {
                        other != j && self.barrier_of(b, j).is_some_and(|x| run.joins.iter().any(|a| a.instance == other && a.barrier == Some(x)))
                    };
                    if result != want && !(0..run.config.instances).any(|other| crossed_into(other) && theirs(other)) {
                        let detail = match (result, want) {
                            (Some(got), Some(w)) => {
                                let at = got.iter().zip(w.iter()).position(|(a, b)| a != b).unwrap_or(got.len().min(w.len()));
                                format!("differs from the reference ({kind:?}): {} bytes against {}, first at byte {at}", got.len(), w.len())
                            }
                            (None, _) => format!("is missing ({kind:?})"),
                            (Some(_), None) => "exists where none is due".into(),
                        };
                        self.out.push(Violation::Agreement { instance: j, op: k, node: b, detail });
                    }
                }
            }
            // Verdicts.
            let allowed = mismatch_at.is_some_and(|m| k == m || k == m + 1) || self.crossed[j];
            for (b, r) in recs.iter().enumerate() {
                self.verdict(j, || format!("op {k}"), b, r, allowed, restarted(b));
            }
            // Liveness within the bound, per epoch the call takes (a
            // collective larger than a message runs in segments, one epoch each).
            if clean {
                let compute = |b: NodeId| match sop.kind_at(b) {
                    OpKind::Split { compute } => compute,
                    _ => 0,
                };
                self.slow(j, Some(k), recs, bound * epochs(&sop.kind, run.config.max_data), compute);
            }
        }
        // Mismatches reported everywhere.
        // (Only when every node called it: one that failed before, for a
        // silent peer, leaves the others failing for that instead.)
        if let Some(m) = mismatch_at.filter(|&m| ops[m].iter().all(|r| r.entered.is_some())) {
            for b in (0..n).filter(|&b| !crashed_in(b)) {
                let err = |k: usize| ops.get(k).is_some_and(|r| matches!(r[b].outcome, Outcome::Err(_)));
                let own_sync = script[m].kind_at(b).is_synchronising(n);
                let mut reported = err(m) || (!own_sync && (err(m + 1) || matches!(run.finishes[j][b].outcome, Outcome::Err(_))));
                if run.config.pair && !own_sync && !reported {
                    // A pair's barrier beside reports it at its next call
                    // (or the finish's close of it): unreported only if
                    // that call returned without it.
                    let side = workload::on_joined(&script[m].kind_at(b));
                    let next = (m + 1..ops.len()).find(|&k| workload::on_joined(&script[k].kind_at(b)) == side);
                    let record = next.map_or(&run.finishes[j][b], |k| &ops[k][b]);
                    reported = !matches!(record.outcome, Outcome::Ok(_));
                }
                if !reported {
                    self.out.push(Violation::MismatchUnreported { instance: j, op: m, node: b });
                }
            }
        }
        // The finish.
        let fin = &run.finishes[j];
        if mismatch_at.is_none() {
            self.safety(j, None, fin);
        }
        for (b, r) in fin.iter().enumerate() {
            self.verdict(j, || "finish".into(), b, r, mismatch_at.is_some() || self.crossed[j], restarted(b));
        }
        // A finish waits for its peers' farewells: one lost for good costs
        // up to the failure timeout.
        if clean {
            self.slow(j, None, fin, bound + 2 * run.config.barrier.failure_timeout.as_nanos() as u64, |_| 0);
        }
    }

    /// When node `b` entered operation `op` of instance `j` (`None`: the
    /// finish) in the barrier instance `j` ran: its own record's entry, or,
    /// if a process of `b` restarted in another instance held its place
    /// there (see [`crossed`]), that process's entry of the call of its own
    /// script that runs the same epoch (both scripts run from the
    /// barrier's first epoch; a finish's closing barrier is the epoch after
    /// its script's last call, so a shorter script's finish meets a longer
    /// one's operation: soak seed 4194497).
    fn entered(&self, j: usize, op: Option<usize>, b: NodeId, own: &OpRecord) -> Option<u64> {
        let run = self.run;
        own.entered.or_else(|| {
            let ours = |k: u64| run.joins.iter().any(|o| o.instance == j && o.barrier == Some(k));
            let other = run.joins.iter().find(|o| o.node == b && o.instance != j && o.barrier.is_some_and(ours))?;
            let i = other.instance;
            let side = self.side_of(j, op, b);
            let theirs = self.call_at_epoch(i, b, self.epoch_of(j, op, b), side)?;
            match theirs {
                Some(k) => run.ops.get(i).and_then(|o| o.get(k)).map(|r| &r[b]),
                None => run.finishes.get(i).map(|r| &r[b]),
            }?
            .entered
        })
    }

    /// The epoch (from the barrier's first) at which node `b`'s call `op`
    /// of instance `j`'s script begins (`None`: the finish, whose closing
    /// barrier follows the last call), as the calls segment (see [`epochs`]).
    fn epoch_of(&self, j: usize, op: Option<usize>, b: NodeId) -> u64 {
        let script = &self.run.scripts[j];
        let upto = op.unwrap_or(script.len()).min(script.len());
        let side = self.side_of(j, op, b);
        script[..upto]
            .iter()
            .filter(|o| side.is_none_or(|s| workload::on_joined(&o.kind_at(b)) == s))
            .map(|o| epochs(&o.kind_at(b), self.run.config.max_data))
            .sum()
    }

    /// In a run of pairs ([`super::PairNode`]), which barrier node `b`'s
    /// call `op` of instance `j` runs on (`true`: the one joined; a finish
    /// is judged on it); each counts its own epochs. `None`: one barrier.
    fn side_of(&self, j: usize, op: Option<usize>, b: NodeId) -> Option<bool> {
        self.run.config.pair.then(|| op.and_then(|k| self.run.scripts[j].get(k)).is_none_or(|o| workload::on_joined(&o.kind_at(b))))
    }

    /// Node `b`'s call of instance `i`'s script that runs `epoch`: `Some(k)`
    /// for operation `k` (the one whose segments include it), `None` for
    /// the finish; nothing past the finish. (`side`: of a pair's barrier
    /// only, see [`Checker::side_of`].)
    fn call_at_epoch(&self, i: usize, b: NodeId, epoch: u64, side: Option<bool>) -> Option<Option<usize>> {
        let mut start = 0;
        for (k, o) in self.run.scripts[i].iter().enumerate() {
            if side.is_some_and(|s| workload::on_joined(&o.kind_at(b)) != s) {
                continue;
            }
            let end = start + epochs(&o.kind_at(b), self.run.config.max_data);
            if epoch < end {
                return Some(Some(k));
            }
            start = end;
        }
        (epoch == start).then_some(None)
    }

    /// Node 0's admissions in place (PROTOCOL.md, *Join*; review rev33-2
    /// for a pair): a process of a node admitted into a barrier that had
    /// already admitted another of the same node replaced it, which node 0
    /// may do only while that node took part in neither the barrier nor
    /// the one beside it (node 0 heard none of its messages there, and
    /// completed no barrier there); and node 0 refuses a process in place
    /// of an admitted one only once that node took part.
    fn admissions(&mut self) {
        let run = self.run;
        for r in &run.joins {
            let (Some(barrier), Some(created)) = (r.barrier, r.record.entered) else { continue };
            let replaced = run
                .joins
                .iter()
                .any(|q| !std::ptr::eq(q, r) && q.node == r.node && q.barrier == Some(barrier) && q.record.left.is_some_and(|l| l < created));
            if !replaced {
                continue;
            }
            let heard = run.heard_by_0.iter().find(|&&(b, x, t)| b == barrier && x == r.node && t < created);
            let completed = run.completed_by_0.iter().find(|&&(b, t)| b == barrier && t < created);
            let why = match (heard, completed) {
                (Some(&(_, _, t)), _) => format!("node 0 had heard node {} there at {:.3} ms", r.node, ms(t)),
                (None, Some(&(_, t))) => format!("node 0 had completed a barrier there at {:.3} ms", ms(t)),
                (None, None) => continue,
            };
            self.out.push(Violation::Verdict {
                instance: r.instance,
                call: "join".into(),
                node: r.node,
                error: format!("admitted (life {}, created at {:.3} ms) in place of a process of its own", r.life, ms(created)),
                why: format!("{why}: a restarted process must be refused in place of one that took part"),
            });
        }
        for &(barrier, x, t, completed) in &run.refused_by_0 {
            if completed || run.heard_by_0.iter().any(|&(b, y, at)| b == barrier && y == x && at <= t) {
                continue;
            }
            let instance = run.joins.iter().find(|j| j.node == 0 && j.barrier == Some(barrier)).map_or(0, |j| j.instance);
            self.out.push(Violation::Verdict {
                instance,
                call: "join".into(),
                node: x,
                error: format!("node 0 refused a process of node {x} at {:.3} ms", ms(t)),
                why: "node 0 had neither heard that node in its barrier (or the one beside) nor completed a barrier there: it must admit it in place"
                    .into(),
            });
        }
    }

    fn safety(&mut self, j: usize, op: Option<usize>, recs: &[OpRecord]) {
        for (a, r) in recs.iter().enumerate() {
            let (Outcome::Ok(_), Some(at)) = (&r.outcome, r.left) else { continue };
            for (b, other) in recs.iter().enumerate() {
                let entered = self.entered(j, op, b, other);
                if entered.is_none_or(|e| e > at) {
                    self.out.push(Violation::Safety { instance: j, op, left: a, at, not_entered: b, entered });
                    return;
                }
            }
        }
    }

    /// `compute(b)`: how long node `b` computes between entering and
    /// waiting (a split-phase barrier's): its bound counts from its wait.
    fn slow(&mut self, j: usize, op: Option<usize>, recs: &[OpRecord], bound: u64, compute: impl Fn(NodeId) -> u64) {
        let Some(last_in) = recs.iter().try_fold(0, |m, r| r.entered.map(|e| m.max(e))) else {
            return;
        };
        for (b, r) in recs.iter().enumerate() {
            if let (Outcome::Ok(_), Some(left), Some(entered)) = (&r.outcome, r.left, r.entered) {
                let from = last_in.max(entered + compute(b));
                if left.saturating_sub(from) > bound {
                    self.out.push(Violation::Slow { instance: j, op, node: b, took: left - from });
                }
            }
        }
    }
}

/// Runs every checker on `run`: the violations, none if the run is right.
pub fn check(run: &Run) -> Vec<Violation> {
    let mut c = Checker { run, out: Vec::new(), crossed: crossed(run) };
    for text in run.errors.iter().filter(|e| e.contains("UNEXPECTED")) {
        c.out.push(Violation::Contract { text: text.clone() });
    }
    for j in 0..run.config.instances {
        c.instance(j);
    }
    c.admissions();
    for join in &run.joins {
        // A restarted process, or one whose place a process of the same
        // node running another instance's script took (see `crossed`).
        let shares = |k: u64| run.joins.iter().any(|o| o.instance == join.instance && o.barrier == Some(k));
        let displaced = run.joins.iter().any(|o| o.node == join.node && o.instance != join.instance && o.barrier.is_some_and(shares));
        c.verdict(join.instance, || "join".into(), join.node, &join.record, false, join.life > 0 || displaced);
    }
    // Liveness: every node got through every instance, except where a
    // call waits for peers that ended their scripts on a mismatch in a
    // crossed barrier (see `Checker::waits_for_ended_scripts`): if every
    // node still in a call (or joining, or idle) is such a node, the nodes
    // done with their instance wait only for them (the next instance
    // begins once every node is done with the last), and none is stuck by
    // the protocol. Otherwise every node not through counts.
    let waiting = |s: Stage| !matches!(s, Stage::Lingering | Stage::Done | Stage::Crashed);
    let not_through: Vec<(NodeId, usize, Stage)> =
        run.stages.iter().enumerate().filter(|(_, &(i, _))| i < run.config.instances).map(|(node, &(i, s))| (node, i, s)).collect();
    let excused = not_through.iter().any(|&(_, _, s)| waiting(s))
        && not_through
            .iter()
            .filter(|&&(_, _, s)| waiting(s))
            .all(|&(node, i, s)| c.waits_for_ended_scripts(node, i, s) || c.waits_beside_a_crossed_script(node, i, s));
    if !excused {
        for (node, instance, stage) in not_through {
            c.out.push(Violation::Stuck { node, instance, stage });
        }
    }
    // A bound on the output: the first few of each checker.
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    c.out.retain(|v| {
        let k = seen.entry(v.checker()).or_default();
        *k += 1;
        *k <= 8
    });
    c.out
}

/// A kind of operation, in a word, for summaries.
pub fn kind_name(k: &OpKind) -> String {
    match k {
        OpKind::Barrier => "barrier".into(),
        OpKind::Split { .. } => "split barrier".into(),
        OpKind::Allreduce { op, dtype, count } => format!("allreduce({op},{dtype})×{count}"),
        OpKind::Reduce { op, dtype, count, root } => format!("reduce({op},{dtype})×{count}→{root}"),
        OpKind::Bcast { root, len } => format!("bcast {len}B from {root}"),
    }
}
