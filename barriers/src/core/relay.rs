//! Relays: the nearest holder of node 0's release answers for it.
//!
//! From [`RELAY_FROM_NODES`](super::recovery::RELAY_FROM_NODES) nodes on, a tree node's children ask it, not
//! node 0, for node 0's multicast release, and a child's status proving it
//! lacks only the release gets it handed on at once (PROTOCOL.md). The
//! timer, NACKs and answers are [`super::recovery`]'s.

use std::time::Instant;

use super::copies::{copy_arg, reply_id_arg};
use super::recovery::Laggard;
use super::window::parity;
use super::{Core, To};
use crate::plan;
use crate::transport::{Msg, MsgKind, NodeId, MISMATCHED};

/// A tree node asks node 0 itself for the release (in turn with its
/// parent) once its parent left this many of its probes in a row
/// unanswered (the parent may be dead, or hold a collective's result it
/// does not relay).
pub(super) const RELAY_UNANSWERED: u32 = 2;

impl Core {
    /// **What a status proves.** A child (in a tree whose root releases by
    /// multicast) that says it is still in barrier `epoch`, the one before
    /// this node's, lacks only node 0's release of it (it has sent every
    /// other message of it), which this node has: it is handed on at once,
    /// as an answer ([`Core::relay_release`]; node 0 answers with it),
    /// rather than left to the child's own retry (bursty loss takes the
    /// release's copies and node 0's multicast answer together; the child
    /// then asked node 0 only at its release step's retry, and its parent,
    /// waiting for its arrival, backed off: it was late). What it owes this
    /// node may then come any moment: the retry comes soon again. Rate
    /// limited as answers are.
    pub(super) fn release_proven_missing(&mut self, from: NodeId, epoch: u64, now: Instant) {
        let tree = matches!(self.config.algorithm, plan::Algorithm::Tree { release: plan::Release::Multicast, .. });
        let child = self.plans.expect.index(from, plan::tag::ARRIVE).is_some();
        if !tree || !child || epoch + 1 != self.window.epoch {
            return;
        }
        let gap = self.answer_gap();
        if !self.recovery.answered[from].admit(epoch, plan::tag::RELEASE, now, gap) {
            return;
        }
        if self.me() == 0 {
            self.answer(from, epoch, Some(plan::tag::RELEASE), now, Some(now), 0);
        } else {
            let _ = self.relay_release(from, epoch, now, 0);
        }
        if self.phase.running() && self.missing_any(|p| p == from) {
            self.recovery.laggard = Laggard::Unknown;
            self.recovery.retry_interval = self.recovery.rto.get(self.run.step);
            self.recovery.next_retry = now + self.recovery.retry_interval;
        }
    }

    /// Whether a NACK from `from` for `tag` asks this node for node 0's
    /// release on node 0's behalf: `from` is its child in a tree whose
    /// root releases by multicast.
    pub(super) fn relays_for(&self, from: NodeId, tag: u16) -> bool {
        tag == plan::tag::RELEASE
            && self.me() != 0
            && matches!(self.config.algorithm, plan::Algorithm::Tree { release: plan::Release::Multicast, .. })
            && self.plans.expect.index(from, plan::tag::ARRIVE).is_some()
    }

    /// **The nearest holder answers.** A tree node's child asks it (not
    /// node 0) for node 0's release: each node then answers its own few
    /// children, where node 0 alone would take in a NACK from every node
    /// whose release was lost or merely late (thousands at once, at 4,096
    /// nodes: a NACK implosion). Re-sends node 0's release of `epoch` to
    /// `to` if this node has it (it completed that barrier, or the release
    /// of the current one came), as an answer; otherwise says by a status
    /// that it has not got it either (it is asking its own parent). A
    /// release that carries a collective's result is not relayed (its data
    /// is node 0's to send): no answer, and the child, finding its parent
    /// unanswering, asks node 0. `id`: the number of the NACK that asked
    /// (0: none did), which the answer or status carries. Returns whether
    /// it re-sent the release.
    pub(super) fn relay_release(&mut self, to: NodeId, epoch: u64, now: Instant, id: u32) -> bool {
        let release = self.plans.expect.index(0, plan::tag::RELEASE);
        let has = epoch + 1 == self.window.epoch || release.is_some_and(|i| epoch == self.window.epoch && self.window.got[parity(epoch)].contains(i));
        if !has {
            self.reply_status(Some(to), id);
            return false;
        }
        if self.coll.is_some() {
            return false;
        }
        let void_here = if epoch + 1 == self.window.epoch { self.window.last_void } else { self.window.void[parity(epoch)] };
        let void = if void_here { MISMATCHED } else { 0 };
        let (copies, gap) = (self.recovery.loss.copies(1), self.copy_gap());
        for k in 0..copies {
            let msg = Msg { arg: void | copy_arg(k, copies) | reply_id_arg(id), ..self.msg(MsgKind::Answer, epoch, plan::tag::RELEASE) };
            self.out.push_copy(now, (k, gap), 0, To::Node(to), msg, &[]);
        }
        self.stats.answers += 1;
        self.stats.copies += u64::from(copies - 1);
        true
    }

    /// Whether to ask parent `p` for node 0's release (else node 0): yes
    /// while it answers; once it left [`RELAY_UNANSWERED`] probes in a row
    /// unanswered, node 0 and it in turn (node 0 is probed, so a dead
    /// parent costs a retry, and the parent too, so it is heard again).
    pub(super) fn relay_answers(&self, p: NodeId) -> bool {
        let (parent, root) = (self.live.peers[p].unanswered(), self.live.peers[0].unanswered());
        parent < RELAY_UNANSWERED || parent <= root + 1
    }
}
