//! Recovery: the retry timer, NACKs, answers and copies.
//!
//! A node that waits longer than the retry timeout sends a NACK for each
//! message it is missing. A NACK is always answered: with the message if
//! the asked node has sent it, else with a [`MsgKind::Status`] saying where
//! it is. A node whose own message was lost is NACKed by the peer that
//! waits for it, so nodes never re-send unasked. The first retry comes after
//! a timeout learned from the steps' times ([`crate::rto`]); then the
//! interval doubles while nothing progresses. A message of barrier c+1 from
//! a peer proves that the peer has completed c, so a node still in c NACKs
//! at once what that peer (or node 0, for its release) owes it. For a while
//! after a loss, multicasts are sent twice; a message a peer asked for
//! before it was sent goes twice too.

use std::time::{Duration, Instant};

use super::receive::STATUS_TAG;
use super::window::parity;
use super::{Core, To};
use crate::plan::{self, Dest};
use crate::transport::{Msg, MsgKind, NodeId};

/// Until a probe shows that the peer is late (a status: it has not sent
/// yet), the retry interval backs off to at most this many learned retry
/// timeouts: a lost message must not wait for a distant retry. A late peer's
/// probes back off fully (it sends what was asked for twice).
const IN_BARRIER_BACKOFF: u32 = 8;
/// A peer that has answered none of this many probes in a row, or that said
/// it is late, is probed at intervals of a quarter of the step's wait so far
/// (at least [`QUIET_RETRY_FLOOR`]).
const QUIET_PROBES: u32 = 6;
/// The least interval between probes of a quiet or late peer.
const QUIET_RETRY_FLOOR: Duration = Duration::from_millis(2);

impl Core {
    pub(super) fn on_nack(&mut self, from: NodeId, msg: Msg, epoch: u64, now: Instant) {
        self.peers[from].at_least(epoch, true);
        let tag = (msg.tag != STATUS_TAG).then_some(msg.tag);
        if self.answer(from, epoch, tag) == 0 {
            if let Some(tag) = tag.filter(|_| self.in_progress && epoch == self.epoch) {
                // The peer waits in this epoch for a message that this
                // node's plan never sends it, but another plan does: it
                // called another collective (else both wait forever).
                if !self.plans[self.cur].sends_to(from, tag) && self.plans.iter().any(|p| p.sends_to(from, tag)) {
                    self.note_mismatch(epoch);
                }
            }
            self.asked_early |= epoch == self.epoch && tag.is_some();
            self.send_status(Some(from));
        } else if self.in_progress && epoch == self.epoch && self.missing_from().contains(&from) {
            // A peer this node waits for lacked our message and has it now:
            // it moves on at once, so what it owes us may come any moment.
            // If that is lost, retry soon, not after a long backoff.
            self.peer_late = false;
            self.retry_interval = self.rto.get();
            self.next_retry = now + self.retry_interval;
        }
    }

    /// `from` is in barrier c+1, so it has completed c: it has sent this node
    /// everything it sends in c, and node 0 has sent its release. NACK at
    /// once whatever of that the current step still misses.
    pub(super) fn nack_proven(&mut self, from: NodeId, now: Instant) {
        // A broadcast's data and end come from its root, which sent both
        // before any node completed the broadcast.
        let proven = |w: &plan::Expect| {
            w.from == from || (w.from == 0 && w.tag == plan::tag::RELEASE) || matches!(w.tag, plan::tag::BCAST_DATA | plan::tag::BCAST_DONE)
        };
        let sent = self.nack_missing(now, proven);
        self.stats.fast_nacks += sent;
        self.fast_nacked |= sent > 0;
    }

    /// NACKs every message of the current step that is still missing and
    /// that `which` selects; returns how many.
    fn nack_missing(&mut self, now: Instant, which: impl Fn(&plan::Expect) -> bool) -> u64 {
        let step = self.step;
        let Some(waits) = self.plans[self.cur].steps.get(step).map(|s| s.waits.len()) else { return 0 };
        let current = parity(self.epoch);
        let mut sent = 0;
        for j in 0..waits {
            let w = self.plans[self.cur].steps[step].waits[j];
            if which(&w) && !self.got[current].contains(self.expect.of_step(self.cur, step).start + j) {
                let nack = self.msg(MsgKind::Nack, self.epoch, w.tag);
                self.out.push(0, To::Node(w.from), nack, &[]);
                self.stats.nacks_sent += 1;
                self.peers[w.from].probed(now);
                sent += 1;
            }
        }
        sent
    }

    /// Re-sends to `to` the messages of barrier `epoch` addressed to it (one
    /// tag, or all) that this node has already sent; returns how many.
    fn answer(&mut self, to: NodeId, epoch: u64, tag: Option<u16>) -> usize {
        let v = self.variant[parity(epoch)];
        let sent_steps = if epoch + 1 == self.epoch {
            self.plans[v].steps.len()
        } else if epoch == self.epoch && self.in_progress {
            self.step + usize::from(self.step_sent)
        } else {
            0
        };
        let mut answered = 0;
        for s in 0..sent_steps {
            for i in 0..self.plans[v].steps[s].sends.len() {
                let out = self.plans[v].steps[s].sends[i];
                let for_them = matches!(out.dest, Dest::All) || out.dest == Dest::Node(to);
                if for_them && tag.is_none_or(|t| t == out.tag) {
                    let msg = self.msg(MsgKind::Answer, epoch, out.tag);
                    let data = self.coll.as_ref().map_or(&[][..], |c| c.sent(parity(epoch), s));
                    self.out.push(out.rail, To::Node(to), msg, data);
                    self.stats.answers += 1;
                    answered += 1;
                }
            }
        }
        answered
    }

    /// The current step's missing messages' senders (in plan order, no repeats).
    pub(super) fn missing_from(&self) -> Vec<NodeId> {
        let mut from: Vec<NodeId> = Vec::new();
        if let Some(step) = self.plans[self.cur].steps.get(self.step) {
            let got = &self.got[parity(self.epoch)];
            for (i, w) in self.expect.of_step(self.cur, self.step).zip(&step.waits) {
                if !got.contains(i) && !from.contains(&w.from) {
                    from.push(w.from);
                }
            }
        }
        from
    }

    /// The retry timer at `now`: if due, NACK what is missing and back off.
    /// True if it was due.
    pub(super) fn retry(&mut self, now: Instant) -> bool {
        let retry_due = now >= self.next_retry;
        if retry_due && self.step < self.plans[self.cur].steps.len() {
            // Ask for exactly what is missing; a peer that has sent it sends
            // it again, one that has not says where it is. (A message of
            // ours that was lost is NACKed by the peer that waits for it.)
            self.nack_missing(now, |_| true);
            // A peer that is late (it said so), or that does not answer at
            // all (stopped, descheduled, dead), is not a lost message: back
            // off far. Otherwise its message may come any moment, and its
            // loss must not wait for a distant retry.
            let quiet = self.missing_from().iter().any(|&p| self.peers[p].unanswered() >= QUIET_PROBES);
            let cap = if self.peer_late || quiet {
                // Back off in proportion to how long this step has waited:
                // few probes over a long stall, and a loss soon after a short
                // one still recovered soon.
                (now.saturating_duration_since(self.step_since) / 4).max(QUIET_RETRY_FLOOR).min(self.config.max_retry_interval())
            } else {
                (self.rto.get() * IN_BARRIER_BACKOFF).min(self.config.max_retry_interval())
            };
            self.retry_interval = (self.retry_interval * 2).min(cap);
            self.next_retry = now + self.retry_interval;
        }
        retry_due
    }
}
