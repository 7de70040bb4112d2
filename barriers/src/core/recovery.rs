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
//!
//! Answers are rate-limited per peer: a NACK for an (epoch, tag) that this
//! node answered for the same peer less than a quarter of its learned retry
//! timeout ago goes unanswered (counted in
//! [`crate::BarrierStats::answers_suppressed`]), so a burst of NACKs, from a
//! buggy or hostile member or replayed, gets a bounded number of answers.
//! A live peer's NACKs for one message come at its retry interval, which is
//! at least its own learned retry timeout (learned from the same network's
//! step times), so its retries are always answered.

use std::time::{Duration, Instant};

use super::receive::STATUS_TAG;
use crate::engine::BarrierConfig;
use crate::rto::Rto;
use super::window::parity;
use super::peers::PerPeer;
use super::{Core, To};
use crate::plan::{self, Dest};
use crate::transport::{Msg, MsgKind, NodeId, MISMATCHED};

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

/// A NACK of the same (epoch, tag) from the same peer within this fraction
/// of the learned retry timeout of the last answer to it is not answered.
const ANSWER_GAP_DIVISOR: u32 = 4;
/// How many recent answers are remembered per peer (a peer alternating
/// between this many (epoch, tag) pairs or fewer is still rate-limited).
const ANSWER_LOG: usize = 4;

/// The last answers given to one peer: (epoch, tag, when), newest at
/// `next - 1` (a ring), for the rate limit.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Answered {
    recent: [Option<(u64, u16, Instant)>; ANSWER_LOG],
    next: usize,
}

impl Answered {
    /// Whether a NACK of (`epoch`, `tag`) at `now` may be answered (no
    /// answer to it within `gap`); if so, it is recorded as answered.
    #[inline]
    fn admit(&mut self, epoch: u64, tag: u16, now: Instant, gap: Duration) -> bool {
        let recent = self.recent.iter().flatten().any(|&(e, t, at)| e == epoch && t == tag && now.saturating_duration_since(at) < gap);
        if !recent {
            self.recent[self.next] = Some((epoch, tag, now));
            self.next = (self.next + 1) % ANSWER_LOG;
        }
        !recent
    }
}

/// What the current step knows of the peers it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Laggard {
    /// Nothing yet: a missing message may have been lost.
    Unknown,
    /// A peer it waits for answered a probe with a status: it has not sent
    /// yet; it is late, not lost. The step's time teaches the retry timeout
    /// nothing, and its retries back off fully.
    Late,
}

/// The recovery state of the current step.
#[derive(Debug)]
pub(super) struct Recovery {
    /// When the current step began waiting.
    pub(super) step_since: Instant,
    pub(super) next_retry: Instant,
    pub(super) retry_interval: Duration,
    pub(super) rto: Rto,
    /// Whether a NACK was sent at once in this step (one per step).
    pub(super) fast_nacked: bool,
    /// The last barrier in which a loss was seen: multicasts go twice for
    /// [`TWICE_FOR`](super::progress::TWICE_FOR) barriers after it.
    pub(super) loss_seen_in: Option<u64>,
    /// The last expected message that an answer delivered first (barrier,
    /// index): if the original follows, nothing was lost.
    pub(super) last_answered: Option<(u64, usize)>,
    /// Whether a peer asked for a message of this barrier before this node
    /// had sent it: it waits already, so point-to-point messages go twice
    /// (a loss now would cost it a long-backed-off retry).
    pub(super) asked_early: bool,
    /// This node got here through a recovered loss (see
    /// [`crate::transport::RECOVERED`]) in barrier `recovered_in` or the one
    /// before: a late exit from barrier c makes a late entry into c+1, so
    /// the mark lasts one barrier more.
    pub(super) recovered_in: Option<u64>,
    /// Whether a peer this step waits for is known to be late.
    pub(super) laggard: Laggard,
    /// Per peer (indexed by node), its last answers: the rate limit.
    pub(super) answered: PerPeer<Answered>,
}

impl Recovery {
    pub(super) fn new(config: &BarrierConfig, nodes: usize, now: Instant) -> Recovery {
        Recovery {
            step_since: now,
            next_retry: now,
            retry_interval: config.retry_timeout,
            rto: Rto::new(config.retry_timeout, config.min_retry_timeout, config.max_learned_retry()),
            fast_nacked: false,
            loss_seen_in: None,
            last_answered: None,
            asked_early: false,
            recovered_in: None,
            laggard: Laggard::Unknown,
            answered: PerPeer::new(nodes),
        }
    }
}

impl Core {
    pub(super) fn on_nack(&mut self, from: NodeId, msg: Msg, epoch: u64, now: Instant) {
        self.live.peers[from].at_least(epoch, true);
        let gap = self.recovery.rto.get() / ANSWER_GAP_DIVISOR;
        if !self.recovery.answered[from].admit(epoch, msg.tag, now, gap) {
            // Answered a moment ago (and what that answer set off, too).
            self.stats.answers_suppressed += 1;
            return;
        }
        let tag = (msg.tag != STATUS_TAG).then_some(msg.tag);
        if self.answer(from, epoch, tag) == 0 {
            if let Some(tag) = tag.filter(|_| self.phase.running() && epoch == self.window.epoch) {
                // The peer waits in this epoch for a message that this
                // node's plan never sends it, but another plan does: it
                // called another collective (else both wait forever).
                if !self.plans.list[self.run.cur].sends_to(from, tag) && self.plans.list.iter().any(|p| p.sends_to(from, tag)) {
                    self.note_mismatch(epoch);
                }
            }
            self.recovery.asked_early |= epoch == self.window.epoch && tag.is_some();
            self.send_status(Some(from));
        } else if self.phase.running() && epoch == self.window.epoch && self.missing_from().contains(&from) {
            // A peer this node waits for lacked our message and has it now:
            // it moves on at once, so what it owes us may come any moment.
            // If that is lost, retry soon, not after a long backoff.
            self.recovery.laggard = Laggard::Unknown;
            self.recovery.retry_interval = self.recovery.rto.get();
            self.recovery.next_retry = now + self.recovery.retry_interval;
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
        self.recovery.fast_nacked |= sent > 0;
    }

    /// NACKs every message of the current step that is still missing and
    /// that `which` selects; returns how many.
    fn nack_missing(&mut self, now: Instant, which: impl Fn(&plan::Expect) -> bool) -> u64 {
        let step = self.run.step;
        let Some(waits) = self.plans.list[self.run.cur].steps.get(step).map(|s| s.waits.len()) else { return 0 };
        let current = parity(self.window.epoch);
        let mut sent = 0;
        for j in 0..waits {
            let w = self.plans.list[self.run.cur].steps[step].waits[j];
            if which(&w) && !self.window.got[current].contains(self.plans.expect.of_step(self.run.cur, step).start + j) {
                let nack = self.msg(MsgKind::Nack, self.window.epoch, w.tag);
                self.out.push(0, To::Node(w.from), nack, &[]);
                self.stats.nacks_sent += 1;
                self.live.peers[w.from].probed(now);
                sent += 1;
            }
        }
        sent
    }

    /// Re-sends to `to` the messages of barrier `epoch` addressed to it (one
    /// tag, or all) that this node has already sent; returns how many.
    fn answer(&mut self, to: NodeId, epoch: u64, tag: Option<u16>) -> usize {
        let v = self.window.variant[parity(epoch)];
        let sent_steps = if epoch + 1 == self.window.epoch {
            self.plans.list[v].steps.len()
        } else if epoch == self.window.epoch && self.phase.running() {
            self.run.step + usize::from(self.run.step_sent)
        } else {
            0
        };
        let mut answered = 0;
        for s in 0..sent_steps {
            for i in 0..self.plans.list[v].steps[s].sends.len() {
                let out = self.plans.list[v].steps[s].sends[i];
                let for_them = matches!(out.dest, Dest::All) || out.dest == Dest::Node(to);
                if for_them && tag.is_none_or(|t| t == out.tag) {
                    let void_here = if epoch + 1 == self.window.epoch { self.window.last_void } else { self.window.void[parity(epoch)] };
                    let void = if void_here { MISMATCHED } else { 0 };
                    let msg = Msg { arg: void, ..self.msg(MsgKind::Answer, epoch, out.tag) };
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
        if let Some(step) = self.plans.list[self.run.cur].steps.get(self.run.step) {
            let got = &self.window.got[parity(self.window.epoch)];
            for (i, w) in self.plans.expect.of_step(self.run.cur, self.run.step).zip(&step.waits) {
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
        let retry_due = now >= self.recovery.next_retry;
        if retry_due && self.run.step < self.plans.list[self.run.cur].steps.len() {
            // Ask for exactly what is missing; a peer that has sent it sends
            // it again, one that has not says where it is. (A message of
            // ours that was lost is NACKed by the peer that waits for it.)
            self.nack_missing(now, |_| true);
            // A peer that is late (it said so), or that does not answer at
            // all (stopped, descheduled, dead), is not a lost message: back
            // off far. Otherwise its message may come any moment, and its
            // loss must not wait for a distant retry.
            let quiet = self.missing_from().iter().any(|&p| self.live.peers[p].unanswered() >= QUIET_PROBES);
            let cap = if self.recovery.laggard == Laggard::Late || quiet {
                // Back off in proportion to how long this step has waited:
                // few probes over a long stall, and a loss soon after a short
                // one still recovered soon.
                (now.saturating_duration_since(self.recovery.step_since) / 4).max(QUIET_RETRY_FLOOR).min(self.config.max_retry_interval())
            } else {
                (self.recovery.rto.get() * IN_BARRIER_BACKOFF).min(self.config.max_retry_interval())
            };
            self.recovery.retry_interval = (self.recovery.retry_interval * 2).min(cap);
            self.recovery.next_retry = now + self.recovery.retry_interval;
        }
        retry_due
    }
}
