//! Recovery: the retry timer, NACKs, answers and copies.
//!
//! A node that waits longer than the retry timeout sends a NACK for each
//! message it is missing. A NACK is always answered: with the message if
//! the asked node has sent it, else with a [`MsgKind::Status`] saying where
//! it is. A node whose own message was lost is NACKed by the peer that
//! waits for it, so nodes never re-send unasked. The first retry comes after
//! a timeout learned from the step's own past times ([`crate::rto`], one
//! per step of the plan: [`StepTimeouts`]); then the
//! interval doubles while nothing progresses. A message of barrier c+1 from
//! a peer proves that the peer has completed c, so a node still in c NACKs
//! at once what that peer (or node 0, for its release) owes it.
//!
//! **Evidence before timers.** Where a missing message proves itself when
//! it is sent (a tree's child that gathers first asks this node for the
//! release once it has sent its arrival), the timer waits longer for it
//! ([`Core::arrivals_prove_themselves`]); a "not yet" about a release
//! marks it late (and its time is learned where a lost release proves
//! itself); a NACK's later copies are dropped once what it asked for
//! came; and a NACK carries an echo by which its answerer tells that it
//! crossed the original ([`Core::answer`]; PROTOCOL.md, *Evidence*,
//! *Crossings*).
//!
//! **Copies, from the loss seen.** Each node estimates the loss rate of its
//! paths from what arrives ([`LossEstimate`]): every message carries its
//! copy's index and how many copies its sender sends, so a receiver knows
//! which frames of a message to expect (every copy, and for one first
//! heard as an answer its original too). They are held, not counted, until
//! they can no longer come (a copy or original that comes late, reordered
//! by the network, was not lost: see [`super::heard`]); those still
//! missing then are counted lost. From that rate, a message (data,
//! answer or NACK) goes as many times as make the expected cost of
//! recovering its receivers' losses (a retry timeout and a round trip each,
//! [`RECOVERY_WORTH`](super::copies::RECOVERY_WORTH) frames) no more than the cost of one more copy: on a
//! clean network (nothing ever lost) every message goes once. A message a
//! peer asked for before it was sent goes twice at least once any loss was
//! seen; a first NACK
//! asking node 0 for its multicast release goes once (many nodes ask at
//! once, and one multicast answer serves them all).
//!
//! **Answers by multicast.** Where the network multicasts, a NACK for a
//! message this node multicast (a release, a broadcast's data) is answered
//! by one multicast, and a status saying that it has not sent it yet too:
//! many nodes miss the same release, or wait for the same late root, and
//! one frame answers them all. Other NACKs for the same (epoch, tag)
//! within the shortest step's retry timeout are served by that frame, and
//! so is each peer's first NACK for it, however late this node takes it in
//! (many peers' NACKs queue here behind the answers; one that lost the
//! answer too asks again).
//!
//! Answers are rate-limited per peer: a NACK for an (epoch, tag) that this
//! node answered for the same peer less than a quarter of its learned retry
//! timeout (or a round trip, if longer) ago goes unanswered (counted in
//! [`crate::BarrierStats::answers_suppressed`]), so a burst of NACKs, from a
//! buggy or hostile member or replayed, gets a bounded number of answers.
//! A live peer's NACKs for one message come at its retry interval, which is
//! at least its own learned retry timeout (learned from the same network's
//! step times), so its retries are always answered.

use std::time::{Duration, Instant};

use super::answers::{echo_arg, Answered, Echo};
use super::copies::{copy_arg, copy_of, nack_id, nack_id_arg, nack_id_of, CopySpacing, LossEstimate};
use super::evidence::{gathers_first, EVIDENCE_WAITS};
use super::peers::PerPeer;
use super::times::{HeardTimes, SentTimes};
use super::window::parity;
use super::{Core, To};
use crate::plan;
use crate::rto::Rto;
use crate::transport::STATUS_TAG;
use crate::transport::{status, Msg, MsgKind, NodeId};
use crate::types::BarrierConfig;

/// Until a probe shows that the peer is late (a status: it has not sent
/// yet), the retry interval backs off to at most this many learned retry
/// timeouts: a lost message must not wait for a distant retry. A late peer's
/// probes back off fully (it sends what was asked for twice).
const IN_BARRIER_BACKOFF: u32 = 8;
/// A peer that has answered none of this many probes in a row (more on a
/// lossy network: see [`Recovery::quiet_probes`]) is probed at intervals
/// of a quarter of the step's wait so far (at least a retry timeout); one
/// that said it is late, at intervals of the whole wait so far (its message
/// proves itself if lost: see [`Core::retry`]).
const QUIET_PROBES: u32 = 6;

/// From this many nodes on, a tree node asks its parent for node 0's
/// release. Measured in the real-protocol simulator, 10 GbE, 20% loss:
/// at 64 nodes (tree4) asking node 0, whose one multicast answer serves
/// every node that lost the release, costs 50 µs a barrier, asking the
/// parent 67 µs; at 512 nodes 147 against 117 µs, and at 4,096 (tree8)
/// asking node 0 does not end 100 barriers in 300 s of simulation (a NACK
/// implosion at node 0), asking the parent gives 4.4 ms.
pub(super) const RELAY_FROM_NODES: usize = 512;

/// The learned retry timeouts, one per plan step ([`Rto`] each): a step
/// learns from its own times only. The steps of one plan wait for very
/// different things: a tree's inner node waits a few µs for its children's
/// arrivals, then for the release, which comes only once the whole tree
/// has gathered (a time that grows with the tree's depth). One timeout
/// learned from both converged on the short waits (the floor), so from
/// about 1,000 nodes every inner node NACKed the root's release before it
/// could have been sent, in a lossless run (142 NACKs at 1,024 nodes,
/// 1,463 at 4,096).
#[derive(Clone, Debug)]
pub(super) struct StepTimeouts {
    steps: Vec<Rto>,
    /// The least a timeout can learn ([`BarrierConfig::min_retry_timeout`]).
    floor: Duration,
}

impl StepTimeouts {
    fn new(config: &BarrierConfig, steps: usize) -> StepTimeouts {
        let rto = Rto::new(config.retry_timeout, config.min_retry_timeout, config.max_learned_retry());
        StepTimeouts { steps: vec![rto; steps.max(1)], floor: config.min_retry_timeout.min(config.retry_timeout) }
    }

    /// Step `step`'s timeout (past the last step: the last's).
    #[inline]
    pub(super) fn get(&self, step: usize) -> Duration {
        self.steps[step.min(self.steps.len() - 1)].get()
    }

    /// Step `step` took `took`.
    #[inline]
    pub(super) fn sample(&mut self, step: usize, took: Duration) {
        let last = self.steps.len() - 1;
        self.steps[step.min(last)].sample(took);
    }

    /// The shortest of the steps' learned timeouts (a peer retries no
    /// sooner), or the floor if none has learned yet (no peer's learned
    /// timeout is shorter). A step that never
    /// learned (node 0's release step waits for nothing; a gather that every
    /// barrier finishes through some recovery) keeps the initial timeout,
    /// which says nothing of how soon peers retry: counted in, it made node
    /// 0 take every NACK for its release within 250 µs of a multicast answer
    /// as served by it, so a node that had lost that answer too (bursty
    /// loss) stayed unanswered for 250 µs.
    pub(super) fn least(&self) -> Duration {
        self.steps.iter().filter(|r| r.learned()).map(Rto::get).min().unwrap_or(self.floor)
    }

    /// The longest of the steps' timeouts.
    pub(super) fn most(&self) -> Duration {
        self.steps.iter().map(Rto::get).max().unwrap_or_default()
    }
}

/// What the current step knows of the peers it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Laggard {
    /// Nothing yet: a missing message may have been lost.
    Unknown,
    /// A peer it waits for answered a probe with a status: it has not sent
    /// yet; it is late, not lost. The step's time teaches the retry timeout
    /// nothing (but a release's does: see PROTOCOL.md, *Evidence*), and
    /// its retries back off to the whole wait so far, each NACK once.
    Late,
}

/// The recovery state of the current step.
#[derive(Debug)]
pub(super) struct Recovery {
    /// When the current step began waiting.
    pub(super) step_since: Instant,
    /// When the last original, unmarked message of the current step came
    /// (a clean path's time, when a recovery delayed another).
    pub(super) clean_at: Option<Instant>,
    pub(super) next_retry: Instant,
    pub(super) retry_interval: Duration,
    /// The learned retry timeouts, one per step.
    pub(super) rto: StepTimeouts,
    /// Whether a NACK was sent at once in this step (one per step).
    pub(super) fast_nacked: bool,
    /// The loss rate of this node's paths, as seen.
    pub(super) loss: LossEstimate,
    /// The gap between a message's copies, from the bursts seen.
    pub(super) spacing: CopySpacing,
    /// The last multicast answer or status (epoch, tag, when, whether it
    /// was the answer itself): a NACK for the same (epoch, tag) within the
    /// answer gap is served by it, and so is a peer's first NACK for it
    /// after a multicast answer (it crossed the answer, or lost it too and
    /// asks again).
    pub(super) multicast_answer: Option<(u64, u16, Instant, bool)>,
    /// The last expected message that an answer delivered first (barrier,
    /// index): if the original follows, nothing was lost.
    pub(super) last_answered: Option<(u64, usize)>,
    /// Whether a peer asked for a message of this barrier before this node
    /// had sent it: it waits already, so point-to-point messages go twice
    /// where any loss was seen (a loss now would cost it a long-backed-off
    /// retry).
    pub(super) asked_early: bool,
    /// This node recovered a loss of its own (an answer came first) in
    /// barrier `recovered_in`: its messages carry
    /// [`crate::transport::RECOVERED`] in that barrier and the next (a late
    /// exit from barrier c makes a late entry into c+1).
    pub(super) recovered_in: Option<u64>,
    /// A message marked [`crate::transport::RECOVERED`] completed a wait
    /// of barrier `upstream_in`: this node's messages carry the mark in that
    /// barrier only (the mark does not circle back to its origin in the
    /// next barrier, and the next, for ever).
    pub(super) upstream_in: Option<u64>,
    /// Whether a peer this step waits for is known to be late.
    pub(super) laggard: Laggard,
    /// How many copies of its messages each step sent (the most), per
    /// barrier parity: an answer to a NACK for a message sent in copies
    /// shows that they were all lost ([`CopySpacing::answered_whole`]).
    pub(super) sent_copies: [Vec<u8>; 2],
    /// When each step's messages went out, in the last few barriers
    /// ([`SentTimes`]): a NACK that arrives
    /// within a round trip of it crossed it, and so does one whose echo
    /// shows it sent before this barrier's could have reached its asker
    /// ([`Core::answer`]).
    pub(super) sent_at: SentTimes,
    /// When each message of the algorithm's own plan (indexed as
    /// [`crate::expect::Expectations`] does; its indices come first) was
    /// last taken in as an original (copy 0 of a `Data`, not on a return
    /// from a stall), in its last few barriers ([`HeardTimes`]): a NACK
    /// for the next barrier's carries how long ago, or its change from an
    /// interval between the barriers before, as its echo
    /// ([`crate::transport::ECHO_SHIFT`]). A change echo is `E − I` with
    /// `I` the interval between taking in the messages of `e − 3` and
    /// `e − 2` ([`HeardTimes::before_last`]), not the last one, `e − 2` to
    /// `e − 1`: an intake of `e − 1`'s `x` late (the frame delayed on the
    /// wire, the asker off its CPU for less than shows as a stall) makes
    /// `E` short by `x` and that interval long by `x`, so a NACK up to `2x`
    /// after the lost message was due was taken for a crossing, where a
    /// whole echo misjudges one `x` after (review rev35, finding 1: 130 to
    /// 170 µs to recover a loss after a message 4 to 20 µs late, whole
    /// echoes 70 to 90 µs). Each late intake now counts once. The answerer
    /// compares it with its own sends' interval between the same two
    /// barriers ([`SentTimes::before_last`]), so a change of pace cancels
    /// as before.
    pub(super) heard_at: HeardTimes,
    /// The shortest time from a NACK to its reply (an answer or a status)
    /// seen: a round trip, with the peer's time to turn a NACK around (the
    /// least: a NACK that came sooner after the original surely crossed it).
    pub(super) reply: Option<Duration>,
    /// The peer of the latest NACK not yet replied to, its number and when
    /// it went (a reply to that NACK is timed from it).
    pub(super) nacked_at: Option<(NodeId, u32, Instant)>,
    /// When the last retry brought forward by dropped frames was due
    /// ([`Core::frames_lost`]): the next comes no sooner than a round trip later.
    pub(super) ring_loss_retry: Option<Instant>,
    /// Per peer (indexed by node), its last answers: the rate limit.
    pub(super) answered: PerPeer<Answered>,
    /// This node's parent in a tree whose root releases by multicast, if
    /// not the root itself: the nearest node that holds the release, which
    /// may hand it on (see [`Core::relay_release`]).
    pub(super) parent: Option<NodeId>,
    /// Whether this node asks its parent for node 0's release first (from
    /// [`RELAY_FROM_NODES`] nodes on).
    pub(super) relay: bool,
    /// When this node last took an input (a message, a timeout, a call).
    pub(super) active: Instant,
    /// The last stall: this node took an input with a deadline of its own
    /// overdue by more than the shortest retry timeout, so it was off its
    /// CPU (descheduled, stopped) from about `.0` (its input before) to
    /// `.1` (when it came back). What it takes in on its return may have
    /// come any time since `.0` ([`Core::answer`]).
    pub(super) stall: Option<(Instant, Instant)>,
}

impl Recovery {
    /// Step `step`'s messages of barrier `epoch` went at `now`.
    #[inline]
    pub(super) fn step_sent(&mut self, epoch: u64, step: usize, now: Instant) {
        self.sent_at.sent(epoch, step, now);
    }

    /// How many probes in a row a live peer may leave unanswered by chance
    /// at the estimated loss rate (a probe or its answer lost each time,
    /// with odds below 1%): past that, it is quiet.
    fn quiet_probes(&self) -> u32 {
        let p = self.loss.rate();
        let missed = 1.0 - (1.0 - p) * (1.0 - p);
        if missed <= 0.0 {
            return QUIET_PROBES;
        }
        ((0.01f64.ln() / missed.ln()).ceil() as u32).clamp(QUIET_PROBES, 64)
    }

    /// A reply (answer or status) to NACK number `id` (0: to none) came
    /// from `from` at `now`: if it answers the NACK to it that waits for
    /// one, its time is a round trip. A reply drawn by another NACK is
    /// none: an earlier one's, taken in just after this NACK went (a node
    /// back from being descheduled NACKs as it takes in its backlog, and the
    /// reply already queued comes next), or a multicast one drawn by
    /// another node's NACK, measured a round trip of 0, and this node's
    /// crossings by round trip were gone for the rest of the instance
    /// (session 18: 37 of 99 answers in `sim::descheduled` were given by a
    /// node whose shortest reply was 0 ns).
    pub(super) fn replied(&mut self, from: NodeId, id: u32, now: Instant) {
        if let Some((_, _, at)) = self.nacked_at.take_if(|(p, nack, _)| *p == from && *nack == id && id != 0) {
            let took = now.saturating_duration_since(at);
            self.reply = Some(self.reply.map_or(took, |r| r.min(took)));
        }
    }

    /// `base_waits`: how many messages the algorithm's own plan waits for.
    pub(super) fn new(config: &BarrierConfig, me: NodeId, nodes: usize, steps: usize, base_waits: usize, now: Instant) -> Recovery {
        let parent = match config.algorithm {
            plan::Algorithm::Tree { k, release: plan::Release::Multicast } => {
                plan::tree_parent(me, k.get(), nodes).map(|(p, _)| p).filter(|&p| p != 0)
            }
            _ => None,
        };
        Recovery {
            step_since: now,
            clean_at: None,
            next_retry: now,
            retry_interval: config.retry_timeout,
            rto: StepTimeouts::new(config, steps),
            fast_nacked: false,
            loss: LossEstimate::default(),
            spacing: CopySpacing::default(),
            multicast_answer: None,
            last_answered: None,
            asked_early: false,
            recovered_in: None,
            upstream_in: None,
            sent_at: SentTimes::new(steps),
            sent_copies: [vec![0; steps], vec![0; steps]],
            heard_at: HeardTimes::new(base_waits),
            reply: None,
            nacked_at: None,
            ring_loss_retry: None,
            laggard: Laggard::Unknown,
            answered: PerPeer::new(nodes),
            parent,
            relay: nodes >= RELAY_FROM_NODES,
            active: now,
            stall: None,
        }
    }
}

impl Core {
    /// An input at `now`: if a deadline of this node's is overdue, and it
    /// took no input for more than the shortest retry timeout since that
    /// deadline (or since its last input, if later), it was off its CPU
    /// since its last input (see [`Recovery::stall`]). (Timed from the
    /// deadline alone, each input of the backlog it takes in on its return
    /// found the deadline still overdue, and the stall became the gap before
    /// it, 0 ns in the simulator: the NACKs in that backlog were taken for
    /// ones that came after its return, and answered, though they came
    /// before the message they ask for went.)
    pub(super) fn note_input(&mut self, now: Instant) {
        // (`now > d` first: a deadline still ahead, the usual case, is not
        // overdue, and comparing instants is far cheaper than subtracting.)
        let active = self.recovery.active;
        let overdue = self.poll_timeout().is_some_and(|d| now > d && now.saturating_duration_since(d.max(active)) > self.recovery.rto.least());
        if overdue {
            self.recovery.stall = Some((self.recovery.active, now));
        }
        self.recovery.active = now;
    }

    pub(super) fn on_nack(&mut self, from: NodeId, msg: Msg, epoch: u64, now: Instant) {
        self.live.peers[from].at_least(epoch, true);
        let gap = self.answer_gap();
        if msg.tag == plan::tag::RELEASE && epoch == self.window.epoch {
            self.arrival_proven(from, now, gap);
        }
        let tag = (msg.tag != STATUS_TAG).then_some(msg.tag);
        // A multicast answer serves the NACKs that crossed it (sent within a
        // round trip of it).
        // (Every peer's retries for one message come a retry timeout apart
        // at least, and none of them retries sooner than the shortest step's
        // timeout here: one multicast answer per such timeout serves them all.)
        let window = self.recovery.rto.least().max(gap);
        // A later copy of a NACK whose earlier copy was taken in (its
        // sender sends them back to back; its next retry comes a retry
        // timeout later at least, and no peer's is shorter than the least
        // here) asks nothing new: one answer serves both. (Taken in more
        // than the answer gap apart when this node's CPU is busy sending,
        // each copy drew an answer of its own: 64 nodes, bursty loss, node
        // 0 sent four frames for one straggler's two-copy NACK while it
        // gathered.)
        // **One answer a NACK.** A later copy of the last NACK taken in from
        // that peer for this message (same count, greater index) is the
        // same NACK, however late it is taken in: not answered again. (64
        // nodes, 50% loss, seed 64500194: node 0, its CPU behind with answers
        // in 8 copies of 2.7 µs each, took in one peer's 8-copy NACK's copies
        // 1, 3, 5, 7 each more than the window below after the one before,
        // answered each with 8 copies, and held barrier 40 for 4.9 ms.)
        let later = self.recovery.answered[from].later_copy(epoch, msg.tag, copy_of(msg.arg), nack_id_of(msg.arg));
        if later || copy_of(msg.arg).0 > 0 && self.recovery.answered[from].admitted_within(epoch, msg.tag, now, window) {
            self.stats.answers_suppressed += 1;
            return;
        }
        let asked = self.recovery.answered[from].last_admitted(epoch, msg.tag);
        let again = asked.is_some();
        // (A peer's first NACK after the multicast answer is served by it
        // however late it is taken in here: NACKs from many peers queue at
        // this node, so the time they are taken in says little of when they
        // were sent. Its second is answered.)
        let served = tag.is_some_and(|t| {
            self.recovery
                .multicast_answer
                .is_some_and(|(e, g, at, answer)| e == epoch && g == t && (now.saturating_duration_since(at) < window || answer && !again))
        });
        if served {
            // (Its next NACK for it is a second one.)
            self.recovery.answered[from].admit(epoch, msg.tag, now, gap);
        }
        if served || !self.recovery.answered[from].admit(epoch, msg.tag, now, gap) {
            // Answered a moment ago (and what that answer set off, too), or
            // a multicast answer that reaches it is on its way.
            self.stats.answers_suppressed += 1;
            return;
        }
        // (Its reply says which NACK drew it: its asker times a round trip
        // from that one only, `Recovery::replied`.)
        let id = nack_id_of(msg.arg);
        if self.relays_for(from, msg.tag) {
            if self.relay_release(from, epoch, now, id) {
                self.recovery.answered[from].drew(epoch, msg.tag);
            }
            return;
        }
        let (answered, crossed) = self.answer(from, epoch, tag, now, asked, msg.arg);
        if answered > 0 || crossed > 0 {
            // (Its later copies ask nothing new: see `Answered::later_copy`.)
            self.recovery.answered[from].drew(epoch, msg.tag);
        }
        if crossed > 0 {
            // It crossed the original, which it will see.
            if answered == 0 {
                self.recovery.answered[from].crossed(epoch, msg.tag);
            }
        } else if answered == 0 && tag.is_some() && epoch + 1 == self.window.epoch && self.window.last_void {
            // The barrier before, void here (a mismatch), and the peer asks
            // for a message the void barrier's plan never sends it: it runs
            // another plan there, and nothing it waits for will come. It is
            // a process admitted in place of one that took part (its
            // peers completed the barrier with that one's messages), which
            // met the mismatch: say so for that barrier, and it goes over
            // to the void barrier, whose messages its peers still answer
            // (soak seed 5108111: it waited for a broadcast's data for ever).
            let msg = Msg { tag: status::MISMATCH, ..self.msg(MsgKind::Status, epoch, 0) };
            self.stats.statuses += 1;
            self.out.push(0, To::Node(from), msg, &[]);
        } else if answered == 0 {
            if let Some(tag) = tag.filter(|_| self.phase.running() && epoch == self.window.epoch) {
                // The peer waits in this epoch for a message that this
                // node's plan never sends it, but another plan does: it
                // called another collective (else both wait forever).
                if !self.plans.list[self.run.cur].sends_to(from, tag) && self.plans.list.iter().any(|p| p.sends_to(from, tag)) {
                    self.note_mismatch(epoch, now);
                }
            }
            self.recovery.asked_early |= epoch == self.window.epoch && tag.is_some();
            match tag.filter(|&t| self.setup.multicast && self.multicasts(epoch, t)) {
                // Every node waits for that multicast: tell them all at once
                // that it has not gone yet.
                Some(t) => {
                    self.recovery.multicast_answer = Some((epoch, t, now, false));
                    self.reply_status(None, id);
                }
                None => self.reply_status(Some(from), id),
            }
        } else if self.phase.running() && epoch == self.window.epoch && self.missing_any(|p| p == from) {
            // A peer this node waits for lacked our message and has it now:
            // it moves on at once, so what it owes us may come any moment.
            // If that is lost, retry soon, not after a long backoff.
            self.recovery.laggard = Laggard::Unknown;
            self.recovery.retry_interval = self.recovery.rto.get(self.run.step);
            self.recovery.next_retry = now + self.recovery.retry_interval;
        }
    }

    /// NACKs every message of the current step that is still missing and
    /// that `which` selects; returns how many.
    pub(super) fn nack_missing(&mut self, now: Instant, probe: bool, which: impl Fn(&plan::Expect) -> bool) -> u64 {
        let step = self.run.step;
        let Some(waits) = self.plans.list[self.run.cur].steps.get(step).map(|s| s.waits.len()) else { return 0 };
        let current = parity(self.window.epoch);
        let (copies, gap) = (self.recovery.loss.copies(1), self.copy_gap());
        let multicast_release =
            self.setup.multicast && matches!(self.config.algorithm, plan::Algorithm::Tree { release: plan::Release::Multicast, .. });
        let mut sent = 0;
        for j in 0..waits {
            let w = self.plans.list[self.run.cur].steps[step].waits[j];
            if which(&w) && !self.window.got[current].contains(self.plans.expect.of_step(self.run.cur, step).start + j) {
                // Node 0's release is asked of the nearest holder (this
                // node's parent) while it answers.
                let ask = match self.recovery.parent.filter(|_| self.recovery.relay) {
                    Some(p) if w.from == 0 && w.tag == plan::tag::RELEASE && self.coll.is_none() && self.relay_answers(p) => p,
                    _ => w.from,
                };
                // A first NACK asking node 0 for its multicast release goes
                // once: a release that is late (a loss delayed the gather),
                // or lost by many, makes many nodes ask at once (at their
                // retry, or as soon as a peer shows it was sent), and node
                // 0's one multicast answer or status serves them all; their
                // copies doubled what node 0 takes in just as it must
                // gather and release. A node still missing it at its next
                // retry (it alone lost it, or this NACK was lost) asks in
                // copies. (Measured, 10 GbE, tree4, mean × lossless, 64
                // nodes: 20% loss 2.51 → 2.19×, 50% 6.42 → 5.92×; 8 nodes
                // 50% 3.62 → 3.23×. Once at every retry: 50% 8.4× at 64
                // nodes, p99.9 4.9 ms: a node that alone lost the release
                // waited through doubling retries.)
                let first = self.recovery.retry_interval <= self.recovery.rto.get(step);
                // (A probe of a peer that said it has not sent is for
                // liveness: once, where one frame gets there and back with
                // odds of 90% at least. Measured, 10 GbE, tree4, 1,024
                // nodes: at 1% loss 1.43 → 1.29× lossless; once at every
                // loss, 50% loss went 9.0 → 10.7×: a lost probe doubles the
                // wait.)
                let p = self.recovery.loss.rate();
                let late = self.recovery.laggard == Laggard::Late && (1.0 - p) * (1.0 - p) >= 0.9;
                let once = late || first && ask == 0 && multicast_release && w.tag == plan::tag::RELEASE;
                let copies = if once { 1 } else { copies };
                // (The echo: how long ago the same message of the barrier
                // before came, if asked of its sender and heard clean; its
                // change from the interval between the two barriers before
                // that: see `HeardTimes::before_last`.)
                let i = self.plans.expect.of_step(self.run.cur, step).start + j;
                let echo = (self.window.epoch.checked_sub(1)).filter(|_| ask == w.from).and_then(|before| {
                    let h = self.recovery.heard_at.timed(i, before)?;
                    let before_last = self.recovery.heard_at.before_last(i, before);
                    Some(Echo::of(now.saturating_duration_since(h.at), h.since(), before_last))
                });
                // (Its copies numbered alike, a retry's otherwise: one
                // answer a NACK, `Answered::later_copy`.)
                let id = nack_id(self.stats.nacks_sent, self.me());
                for k in 0..copies {
                    let nack =
                        Msg { arg: copy_arg(k, copies) | nack_id_arg(id) | echo_arg(echo), ..self.msg(MsgKind::Nack, self.window.epoch, w.tag) };
                    self.out.push_copy(now, (k, gap), 0, To::Node(ask), nack, &[]);
                }
                self.stats.nacks_sent += 1;
                self.stats.probes += u64::from(probe);
                self.stats.copies += u64::from(copies - 1);
                self.recovery.nacked_at = Some((ask, id, now));
                self.live.peers[ask].probed(now);
                sent += 1;
            }
        }
        sent
    }

    /// Whether `pred` holds for the sender of one of the current step's
    /// missing messages (no allocation: it runs on receive paths).
    pub(super) fn missing_any(&self, mut pred: impl FnMut(NodeId) -> bool) -> bool {
        let Some(step) = self.plans.list[self.run.cur].steps.get(self.run.step) else { return false };
        let got = &self.window.got[parity(self.window.epoch)];
        self.plans.expect.of_step(self.run.cur, self.run.step).zip(&step.waits).any(|(i, w)| !got.contains(i) && pred(w.from))
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

    /// Frames for this node were dropped before it read them (its
    /// transport's receive ring overflowed while it was off its core, or
    /// under a flood: [`crate::Transport::ring_drops`]). What the current
    /// step misses may be among them, and so may the replies to its NACKs
    /// and probes: the retry comes now, not at a timer that backed off
    /// while this node heard nothing (peers that seemed quiet, or a retry
    /// timeout learned from steps a descheduled node made long), and its
    /// back-off starts again from the step's retry timeout. Drops can be
    /// had at will (a flood): at most one such retry per round trip (the
    /// shortest reply seen, at least the retry floor). Not while the
    /// retries wait for a call after a failure the application was told of.
    pub(super) fn ring_loss_retry(&mut self, now: Instant) {
        let steps = self.plans.list[self.run.cur].steps.len();
        if !self.phase.running() || self.run.step >= steps || self.live.told.is_some() || !self.missing_any(|_| true) {
            return;
        }
        let floor = self.reply_floor(self.config.min_retry_timeout);
        let at = self.recovery.ring_loss_retry.map_or(now, |last| (last + floor).max(now));
        // (Counted only if it brings the retry forward: drops told again
        // within a round trip, or with a retry due sooner anyway, do not:
        // review rev32, finding 3.)
        if at < self.recovery.next_retry {
            self.stats.ring_loss_retries += 1;
        }
        self.recovery.next_retry = self.recovery.next_retry.min(at);
        self.recovery.ring_loss_retry = Some(self.recovery.next_retry);
        self.recovery.laggard = Laggard::Unknown;
        self.recovery.retry_interval = self.recovery.rto.get(self.run.step);
    }

    /// The retry timer at `now`: if due, NACK what is missing and back off.
    /// True if it was due.
    pub(super) fn retry(&mut self, now: Instant) -> bool {
        let retry_due = now >= self.recovery.next_retry;
        if retry_due && self.run.step < self.plans.list[self.run.cur].steps.len() {
            // A child's arrival that proves itself (see
            // `Core::arrivals_prove_themselves`) is not asked for until the
            // step has waited EVIDENCE_WAITS retry timeouts.
            let rto = self.recovery.rto.get(self.run.step);
            let evidence_until = self.recovery.step_since + rto * EVIDENCE_WAITS;
            let gather = now < evidence_until && self.arrivals_prove_themselves();
            let release = now < evidence_until && self.release_proves_itself();
            // Ask for exactly what is missing; a peer that has sent it sends
            // it again, one that has not says where it is. (A message of
            // ours that was lost is NACKed by the peer that waits for it.)
            let (k, n) = (self.tree_k(), self.nodes());
            // **Probes.** With no evidence of loss (this node has seen none:
            // its estimate is exactly 0; or a peer it waits for said it has
            // not sent), a missing message is late, not lost: the NACK asks
            // the peer where it is (liveness), and is counted as a probe,
            // not a recovery (PROTOCOL.md, *Evidence*).
            let probe = self.recovery.loss.rate() == 0.0 || self.recovery.laggard == Laggard::Late;
            let sent = self.nack_missing(now, probe, |w| {
                let child = gather && w.tag == plan::tag::ARRIVE && gathers_first(w.from, k, n);
                let released = release && w.from == 0 && w.tag == plan::tag::RELEASE;
                !(child || released)
            });
            if (gather || release) && sent == 0 {
                // Nothing asked: no backoff, the next look when the
                // evidence is overdue.
                self.recovery.next_retry = evidence_until;
                return retry_due;
            }
            // A peer that is late (it said so), or that does not answer at
            // all (stopped, descheduled, dead), is not a lost message: back
            // off in proportion to how long this step has waited (few
            // probes over a long stall, and a loss soon after a short one
            // still recovered soon). Otherwise its message may come any
            // moment: back off a little (the peer may be busy: many nodes
            // NACKing one that is behind must not bury it: measured, not
            // backing off on a lossy network fed storms at 64 nodes).
            let quiet_at = self.recovery.quiet_probes();
            let quiet = self.missing_any(|p| self.live.peers[p].unanswered() >= quiet_at);
            let rto = self.recovery.rto.get(self.run.step);
            let waited = now.saturating_duration_since(self.recovery.step_since);
            let cap = if quiet {
                // (First: a late peer that then fell silent is probed often
                // enough to be judged in a failure timeout.)
                (waited / 4).max(rto)
            } else if self.recovery.laggard == Laggard::Late {
                // It said it has not sent: what it sends goes in copies
                // (twice at least: it was asked), and proves itself if lost
                // (a tree's child asks for the release; a peer in the next
                // barrier shows it completed this one). Probes are then for
                // liveness: each doubles the wait so far. (A quarter of it,
                // at 1,024 nodes and 1% loss, with a release held up a few
                // hundred µs, had every node ask its parent six or seven
                // times, and each parent, often late itself, answer each.)
                // Where nothing proves a lost message (a non-root parent
                // below 512 nodes: its leaf asks node 0 for the release;
                // the other algorithms), a quarter of the wait, as for a
                // quiet peer (review rev32, finding 2: a 10 ms late leaf's
                // lost arrival cost its parent 5.45 ms, 930 µs so).
                if self.lost_proves_itself() {
                    waited.max(rto)
                } else {
                    (waited / 4).max(rto)
                }
            } else {
                rto * IN_BARRIER_BACKOFF
            }
            .min(self.config.max_retry_interval());
            self.recovery.retry_interval = (self.recovery.retry_interval * 2).min(cap);
            self.recovery.next_retry = now + self.recovery.retry_interval;
        }
        retry_due
    }
}
