//! Liveness and verdicts. **Failure is silence.** A barrier waits for live
//! peers as long as they take. A peer it waits for is dead only when it has
//! answered nothing (no message at all, though probed by NACKs) for the
//! failure timeout and at least [`MIN_PROBES`] probes; then
//! [`BarrierError::PeerSilent`] names it. A node that gives up says so in
//! its status answers, so the nodes waiting for *it* fail too, naming the
//! silent node ([`BarrierError::PeerFailed`]). An optional deadline bounds a
//! whole wait ([`BarrierError::Deadline`]), telling silent peers from live
//! ones that are behind. No error changes the barrier's state: a wait can
//! be made again, and completes if the peers come through.

use std::time::{Duration, Instant};

use super::copies::reply_id_arg;
use super::peers::PerPeer;
use super::{Core, To};
use crate::transport::{status, Msg, MsgKind, NodeId, REPLY_ID_SHIFT};
use crate::types::{BarrierError, PeerState, MIN_PROBES};

/// What this node knows of a peer.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Peer {
    /// When any message of this instance last came from it.
    last_heard: Option<Instant>,
    /// The latest barrier it was known to be at.
    pub(super) at: Option<u64>,
    /// Whether it said it was inside that barrier.
    in_barrier: bool,
    /// Since when it has been probed (NACKed) without answering anything.
    probed_since: Option<Instant>,
    /// Probes sent since it was last heard.
    unanswered: u32,
    /// (barrier, silent node, when heard) it reported giving up on.
    pub(super) gave_up: Option<(u64, NodeId, Instant)>,
}

impl Peer {
    /// It was probed at `now`.
    pub(super) fn probed(&mut self, now: Instant) {
        self.probed_since.get_or_insert(now);
        self.unanswered += 1;
    }

    /// It was heard at `now`.
    pub(super) fn heard(&mut self, now: Instant) {
        self.last_heard = Some(now);
        self.probed_since = None;
        self.unanswered = 0;
    }

    /// It asked node 0 (this node) to admit it again: it lives,
    /// and its probes went unanswered only because it is not in yet. (Not
    /// "heard": a delayed request of an earlier process looks the same.)
    pub(super) fn joining(&mut self) {
        self.probed_since = None;
        self.unanswered = 0;
    }

    /// Whether anything of this instance ever came from it.
    pub(super) fn ever_heard(&self) -> bool {
        self.last_heard.is_some()
    }

    /// Probes since it was last heard.
    pub(super) fn unanswered(&self) -> u32 {
        self.unanswered
    }

    /// Silent: probed at least [`MIN_PROBES`] times over `timeout` without a word.
    pub(super) fn silent(&self, now: Instant, timeout: Duration, since: Instant) -> Option<Duration> {
        let quiet = now.saturating_duration_since(self.probed_since?.max(since));
        (quiet >= timeout && self.unanswered >= MIN_PROBES).then_some(quiet)
    }

    /// It is at barrier `epoch` at least.
    pub(super) fn at_least(&mut self, epoch: u64, in_barrier: bool) {
        if self.at.is_none_or(|at| epoch > at) {
            self.at = Some(epoch);
            self.in_barrier = in_barrier;
        } else if self.at == Some(epoch) {
            self.in_barrier |= in_barrier;
        }
    }

    /// Its status `msg` of barrier `epoch`, at `now`: its own word on where
    /// it is. True if it reports giving up.
    pub(super) fn status(&mut self, epoch: u64, msg: Msg, now: Instant) -> bool {
        if self.at.is_none_or(|at| epoch >= at) {
            self.at = Some(epoch);
            self.in_barrier = msg.tag & status::IN_PROGRESS != 0;
            // (Bits 24..32 say which NACK drew it: `REPLY_ID_SHIFT`.)
            let named = msg.arg & ((1 << REPLY_ID_SHIFT) - 1);
            self.gave_up = (msg.tag & status::FAILED != 0 && named != 0).then(|| (epoch, named as usize - 1, now));
            return self.gave_up.is_some();
        }
        false
    }
}

/// What a pair's application (two barriers over the same nodes, made by
/// [`crate::PreparedBarrier::join_with`]) did on one barrier, for the
/// other (finding j-3 of the simulator's pairs): how many calls it made
/// there, and the silent node named by the error it was last told there
/// and has not called since. The application is one: told a failure on
/// either barrier, it may never call again, so the barrier beside says
/// `FAILED` too (a peer waiting there for this node's next call fails,
/// naming the silent node, as on the barrier it was told on); and a call
/// of either barrier shows it goes on, so neither says it any longer. The
/// driver of the pair carries each core's [`Core::app_word`] to the other
/// ([`Core::beside_word`]); [`to_bits`](AppWord::to_bits) packs it in one
/// word, for a driver whose barriers run on two threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppWord {
    /// The application's calls of the barrier (wrapping).
    pub calls: u32,
    /// The silent node named by the error it was last told there, if it
    /// has not called that barrier since.
    pub told: Option<NodeId>,
}

impl AppWord {
    /// The word in 64 bits: the calls above, the node told + 1 (0: none) below.
    pub fn to_bits(self) -> u64 {
        (u64::from(self.calls) << 32) | self.told.map_or(0, |n| n as u64 + 1)
    }

    /// The word of [`to_bits`](AppWord::to_bits).
    pub fn from_bits(bits: u64) -> AppWord {
        let told = (bits as u32).checked_sub(1).map(|n| n as NodeId);
        AppWord { calls: (bits >> 32) as u32, told }
    }
}

/// What this node knows of its peers, and its verdicts.
#[derive(Debug)]
pub(super) struct Liveness {
    pub(super) peers: PerPeer<Peer>,
    /// The silent node this node gave up on in the current barrier.
    pub(super) gave_up: Option<NodeId>,
    /// The silent node named by the error this node's application was last
    /// told, until it calls again: its statuses keep saying so (a peer
    /// waiting for it waits for a call that may never come), even once the
    /// barrier completed here in the background or the silent node is back.
    pub(super) told: Option<NodeId>,
    /// The silent node named by the error the application was last told by
    /// the barrier beside this one (a pair: [`AppWord`]), until it calls
    /// either barrier again: this one's statuses say so too, unless the
    /// application has a call here in progress (a nonblocking collective
    /// the driver runs, say, or a barrier it entered).
    pub(super) told_beside: Option<NodeId>,
    /// The application's calls of this barrier (wrapping), for the one
    /// beside it ([`AppWord`]).
    pub(super) calls: u32,
    /// The last word taken from the barrier beside ([`Core::beside_word`]).
    pub(super) beside: AppWord,
    /// A peer's "gave up" report arrived (when) since the last verdict.
    pub(super) report_pending: Option<Instant>,
    /// A peer's message of this instance came from two or more barriers
    /// ahead: the instance runs on without this process (see
    /// [`Core::left_behind`]).
    pub(super) left_behind: bool,
    /// Errors waits and tests returned for the current barrier: a report
    /// that a node is silent fails a repeated call only after it, too, has
    /// waited a failure timeout.
    pub(super) errors: u32,
    /// When the application's current call began: verdicts count only what
    /// happened since, so calling `wait` again after an error waits.
    pub(super) call_started: Instant,
    /// Whether some peer's [`Peer::gave_up`] may be set (a report of giving
    /// up came since [`completed`](Liveness::completed) last found none):
    /// without one, a completion has no report to clear and does not visit
    /// every peer (an O(n) walk per barrier otherwise).
    pub(super) reports: bool,
}

impl Liveness {
    pub(super) fn new(nodes: usize, now: Instant) -> Liveness {
        Liveness {
            peers: PerPeer::new(nodes),
            gave_up: None,
            told: None,
            told_beside: None,
            calls: 0,
            beside: AppWord::default(),
            report_pending: None,
            left_behind: false,
            errors: 0,
            call_started: now,
            reports: false,
        }
    }

    /// Barrier `done` completed: completing it proves every node entered
    /// it, so no node was dead for it, whatever was reported.
    pub(super) fn completed(&mut self, done: u64) {
        self.gave_up = None;
        if !self.reports {
            return;
        }
        let mut left = false;
        self.peers.for_each_mut(|peer| {
            if peer.gave_up.is_some_and(|(e, _, _)| e <= done) {
                peer.gave_up = None;
            }
            left |= peer.gave_up.is_some();
        });
        self.reports = left;
    }
}

impl Core {
    fn status_msg(&self) -> Msg {
        let mut flags = 0;
        if self.phase.running() {
            flags |= status::IN_PROGRESS;
        }
        // (The failure told beside only while the application has no call
        // here: one it waits for, or a barrier it entered, is its word
        // that it goes on here.)
        let beside = self.live.told_beside.filter(|_| self.calls.pending.is_none() && !self.phase.entered());
        let failed = self.live.gave_up.or(self.live.told).or(beside);
        if failed.is_some() {
            flags |= status::FAILED;
        }
        if self.closing.finished() {
            flags |= status::FINISHED;
        }
        if self.run.mismatch.is_some() && self.phase.running() {
            flags |= status::MISMATCH;
        }
        Msg { arg: failed.map_or(0, |n| n as u32 + 1), ..self.msg(MsgKind::Status, self.window.epoch, flags) }
    }

    /// Sends where this node is to `to` (`None`: every node).
    pub(super) fn send_status(&mut self, to: Option<NodeId>) {
        self.reply_status(to, 0);
    }

    /// Sends where this node is to `to` (`None`: every node), in reply to
    /// NACK number `id` (0: none; see [`crate::transport::REPLY_ID_SHIFT`]).
    pub(super) fn reply_status(&mut self, to: Option<NodeId>, id: u32) {
        let msg = self.status_msg();
        let msg = Msg { arg: msg.arg | reply_id_arg(id), ..msg };
        self.stats.statuses += 1;
        self.out.push(0, to.map_or(To::All, To::Node), msg, &[]);
    }

    /// Retries, then the verdict on silent peers and the deadline.
    pub(super) fn on_timers(&mut self, now: Instant, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.left_behind()?;
        let retry_due = self.retry(now);
        let report = self.live.report_pending.take().is_some();
        // A verdict can change only at a retry (probes are counted then), on
        // a peer's report, or at the deadline: the hot path skips it.
        if retry_due || report || deadline.is_some_and(|d| now >= d) {
            self.judge(now, deadline)?;
        }
        Ok(())
    }

    /// No two processes the instance counts are more than one barrier apart:
    /// a peer two ahead counts another process in this node's place. This
    /// one was restarted and admitted again (node 0 had heard nothing of the
    /// earlier one, which took part through its peers), and can never catch
    /// up: its peers answer only the barrier before theirs (soak seed
    /// 35106). It fails every call, and from then on neither answers nor
    /// sends (`receive` drops all): its peers, waiting for the process they
    /// count, find it silent (seed 1021186: its answers kept them waiting).
    pub(super) fn left_behind(&self) -> Result<(), BarrierError> {
        if self.live.left_behind {
            return Err(BarrierError::Refused { node: self.me() });
        }
        Ok(())
    }

    /// Fails the barrier if a peer it waits for is silent though probed, if
    /// any peer gave up on this barrier (naming a node not heard from since),
    /// or if the deadline passed. Changes nothing else: a later call can
    /// still complete. On giving up, tells every node, so that all of them
    /// fail naming the silent node rather than the one that gave up.
    pub(super) fn judge(&mut self, now: Instant, deadline: Option<Instant>) -> Result<(), BarrierError> {
        // (No report of giving up kept: no peer to visit. See `Liveness::reports`.)
        let reporters = if self.live.reports { self.live.peers.len() } else { 0 };
        for reporter in 0..reporters {
            if let Some((epoch, node, when)) = self.live.peers[reporter].gave_up {
                let heard_since = self.live.peers.get(node).and_then(|p| p.last_heard).is_some_and(|t| t > when);
                // A peer stuck in the barrier before this one (it gave up
                // there) can never reach this one either. The first call of
                // a barrier counts every report (one may come before the
                // application's call); a call made again after an error
                // counts only reports made since, and waits afresh.
                let first = self.live.errors == 0;
                let patient = first || now.saturating_duration_since(self.live.call_started) >= self.config.failure_timeout;
                let fresh = first || when >= self.live.call_started;
                // A report naming this node (it was silent, paused say, and
                // its peers gave up on it) may be one they made before it came
                // back and then called again: it counts once this call has
                // waited a failure timeout without the barrier completing.
                let patient = patient && (node != self.me() || now.saturating_duration_since(self.live.call_started) >= self.config.failure_timeout);
                if epoch + 1 >= self.window.epoch && !heard_since && fresh && patient {
                    // This node's answers say so too (and its farewell, if
                    // it leaves): a node that waits for it, and cannot hear
                    // the reporter, must fail naming the silent node too.
                    // (A report naming this node: their applications may
                    // never call again, so it must not wait for them.)
                    if node != self.me() {
                        self.live.gave_up = Some(node);
                    }
                    return Err(BarrierError::PeerFailed { epoch: self.window.epoch, reporter, silent: node });
                }
            }
        }
        // (Mostly nothing is silent and no deadline passed: the list of
        // peers waited for is made only when there is a verdict to give.)
        let (timeout, since) = (self.config.failure_timeout, self.live.call_started);
        let any_silent = self.missing_any(|p| self.live.peers[p].silent(now, timeout, since).is_some());
        if !any_silent && deadline.is_none_or(|d| now < d) {
            return Ok(());
        }
        let waiting_for = self.missing_from();
        let mut silent = Vec::new();
        let mut silent_for = Duration::ZERO;
        for &p in &waiting_for {
            if let Some(quiet) = self.live.peers[p].silent(now, self.config.failure_timeout, self.live.call_started) {
                silent.push(p);
                silent_for = silent_for.max(quiet);
            }
        }
        if let Some(&first) = silent.first() {
            self.give_up(first);
            return Err(BarrierError::PeerSilent { epoch: self.window.epoch, silent, for_: silent_for });
        }
        if let Some(deadline) = deadline {
            if now >= deadline {
                let waited = self.config.deadline.unwrap_or_default();
                let waiting_for = waiting_for.into_iter().map(|p| (p, self.peer_state(p, now))).collect();
                return Err(BarrierError::Deadline { epoch: self.window.epoch, waited, waiting_for });
            }
        }
        Ok(())
    }

    /// The application is told `result`: a verdict naming a silent node
    /// stays in this node's statuses until it calls again.
    pub(super) fn note_told(&mut self, error: &BarrierError) {
        match error {
            // (A report that this node was silent names this node: a peer
            // waiting for it fails naming it as both, "its peers gave up on
            // it", rather than waiting for a call that may never come.)
            BarrierError::PeerFailed { silent, .. } => self.live.told = Some(*silent),
            BarrierError::PeerSilent { silent, .. } => self.live.told = silent.first().copied(),
            // (Left behind: its application may never call again either,
            // and on a pair the barrier beside must say so too, or a peer
            // waiting there for its next call waits for ever: review rev37,
            // finding 2.)
            BarrierError::Refused { node } => self.live.told = Some(*node),
            _ => {}
        }
    }

    /// Records that this node gives up on the current barrier because of
    /// `silent`, and tells every node (twice, against loss) the first time.
    fn give_up(&mut self, silent: NodeId) {
        if self.live.gave_up.is_none() {
            self.live.gave_up = Some(silent);
            self.send_status(None);
            self.send_status(None);
        }
    }

    fn peer_state(&self, p: NodeId, now: Instant) -> PeerState {
        let peer = self.live.peers[p];
        if let Some(quiet) = peer.silent(now, self.config.failure_timeout, self.live.call_started) {
            return PeerState::Silent { for_: quiet };
        }
        match peer.last_heard {
            Some(t) => {
                PeerState::Alive { at: peer.at.unwrap_or(self.window.epoch), in_barrier: peer.in_barrier, heard: now.saturating_duration_since(t) }
            }
            None => PeerState::Silent { for_: now.saturating_duration_since(self.recovery.step_since) },
        }
    }
}
