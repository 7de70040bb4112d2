//! Plan progress: entering an epoch, sending each step's messages, and
//! moving through every step whose waits are met, to the epoch's end.
//!
//! **Safety.** A node leaves barrier k only after its plan's waits for k are
//! met, or (its closing barrier only) once a peer's farewell shows it past k
//! ([`Core::closing_proven`]: that peer's exit followed every entry), and a
//! message of k is only ever sent by a node that has reached the
//! sending step of k. The plans guarantee that every exit causally follows
//! every entry. Re-sends and answers only repeat messages that were already
//! sent, so they cannot make anyone leave early.

use std::time::Instant;

use super::copies::{copy_arg, worth_scale};
use super::recovery::Laggard;
use super::window::{bcast_variant, parity, reduce_variant, BASE};
use super::{Core, To};
use crate::collective::{Collective, Contributions};
use crate::plan::{self, Dest, Out};
use crate::transport::{MsgKind, MISMATCHED, RECOVERED};
use crate::types::BarrierError;

/// The plans an epoch can run: the algorithm's ([`BASE`]), then a
/// release-first broadcast's from each root ([`bcast_variant`]; none where
/// the network carries no data), then a gather-first reduce's to each root
/// ([`reduce_variant`]; only where a reduce gathers,
/// [`plan::reduce_gathers`]); and what they wait for, indexed.
#[derive(Debug)]
pub(crate) struct Plans {
    pub(super) list: Vec<crate::plan::Plan>,
    pub(super) expect: crate::expect::Expectations,
}

/// Where the application is with the protocol's current epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// No epoch in progress, and the application knows every one complete.
    Idle,
    /// No epoch in progress; the last one, which the application entered,
    /// is complete, but no `wait` or `test` has said so yet.
    Unreported,
    /// An epoch the application entered is in progress.
    Entered,
    /// A broadcast's epoch is completing in the background: the application
    /// has its result (the progress agent, or its next call, completes it).
    Background,
    /// As [`Background`](Phase::Background), and the application entered a
    /// barrier meanwhile: it is entered as soon as the broadcast completes.
    BackgroundQueued,
}

impl Phase {
    /// Whether an epoch is in progress.
    pub(super) fn running(self) -> bool {
        matches!(self, Phase::Entered | Phase::Background | Phase::BackgroundQueued)
    }

    /// Whether the application has a barrier entered and not completed.
    pub(super) fn entered(self) -> bool {
        matches!(self, Phase::Entered | Phase::BackgroundQueued)
    }

    /// Whether a broadcast is completing in the background.
    pub(super) fn background(self) -> bool {
        matches!(self, Phase::Background | Phase::BackgroundQueued)
    }
}

/// The current epoch's progress through its plan.
#[derive(Debug)]
pub(super) struct Run {
    /// The plan of the current epoch (or of the last one, when idle).
    pub(super) cur: usize,
    /// The step it is at.
    pub(super) step: usize,
    /// Whether that step's messages went out.
    pub(super) step_sent: bool,
    /// How many waits of each step are still missing.
    pub(super) remaining: Vec<u32>,
    /// A peer's message of the current epoch belongs to another plan: it
    /// called another collective (the first such, for the error).
    pub(super) mismatch: Option<u64>,
}

impl Run {
    /// For plans of up to `steps` steps.
    pub(super) fn new(steps: usize) -> Run {
        Run { cur: BASE, step: 0, step_sent: false, remaining: vec![0; steps], mismatch: None }
    }
}

impl Core {
    /// The collective storage, made on first use.
    pub(super) fn contributions(&mut self) -> &mut Contributions {
        let (steps, expected) = (self.run.remaining.len(), self.plans.expect.len());
        self.coll.get_or_insert_with(|| Box::new(Contributions::new(steps, expected)))
    }

    /// Whether the current epoch has its result for the application: a
    /// broadcast past its data step, a reduce past its gather (the root)
    /// or its send (the others): the rest only completes the epoch.
    pub(super) fn has_result(&self) -> bool {
        self.run.cur != BASE && self.run.step >= plan::BCAST_RESULT_STEP
    }

    /// Whether this node's messages now carry [`RECOVERED`].
    pub(super) fn recovered(&self) -> bool {
        self.recovery.recovered_in.is_some_and(|e| e + 1 >= self.window.epoch) || self.recovery.upstream_in == Some(self.window.epoch)
    }

    /// Sends copy `k` of `copies` of `out` of step `step` of barrier
    /// `epoch` (copy k `k` gaps after `now`), with what the step staged for
    /// it if collectives are in use.
    /// Sends copy `k` of `copies` of `out`; `marked`: whether it says so
    /// (else it goes as the one copy of its message, a duplicate of the
    /// others: copies sent because a peer asked early, not for loss seen).
    fn send_out(&mut self, now: Instant, out: Out, step: usize, epoch: u64, (k, copies): (u32, u32), marked: bool) {
        // (The gap only spaces copies after the first: the first goes now.)
        let gap = if k == 0 { std::time::Duration::ZERO } else { self.copy_gap() };
        let copy = if marked { copy_arg(k, copies) } else { copy_arg(0, 1) };
        let arg = if self.recovered() { RECOVERED } else { 0 } | if self.window.void[parity(epoch)] { MISMATCHED } else { 0 } | copy;
        let msg = crate::transport::Msg { arg, ..self.msg(MsgKind::Data, epoch, out.tag) };
        let data = self.coll.as_ref().map_or(&[][..], |c| c.sent(parity(epoch), step));
        let to = match out.dest {
            Dest::Node(to) => To::Node(to),
            Dest::All => To::All,
        };
        self.out.push_copy(now, (k, gap), out.rail, to, msg, data);
    }

    /// The plan variant of `call` at this node.
    pub(super) fn variant_of(&self, call: Collective) -> Result<usize, BarrierError> {
        if !call.runs_on(self.config.algorithm) {
            return Err(BarrierError::AlgorithmCannot { call, algorithm: self.config.algorithm });
        }
        match call {
            Collective::Bcast { .. } if self.plans.list.len() == 1 => Err(BarrierError::NoData { call }),
            Collective::Bcast { root } if root < self.nodes() => Ok(bcast_variant(root)),
            Collective::Bcast { root } => Err(BarrierError::Misuse(format!("{call}: no node {root} among {}", self.nodes()))),
            // A reduce runs its own plan where the core has it (data, and
            // few enough nodes), else the algorithm's.
            Collective::Reduce { root, .. } if root < self.nodes() && self.plans.list.len() > reduce_variant(root, self.nodes()) => {
                Ok(reduce_variant(root, self.nodes()))
            }
            _ => Ok(BASE),
        }
    }

    /// Enters the next barrier at `now` as a plain barrier.
    pub(super) fn enter_barrier(&mut self, now: Instant) -> Result<(), BarrierError> {
        let me = self.me();
        if let Some(coll) = &mut self.coll {
            coll.begin(Collective::Barrier, 0, false, &[], me);
        }
        self.enter_variant(now, BASE)
    }

    /// Enters the next barrier at `now` with plan `variant` (of the
    /// collective staged in the contributions, else a plain barrier).
    pub(super) fn enter_variant(&mut self, now: Instant, variant: usize) -> Result<(), BarrierError> {
        if self.closing.finished() {
            return Err(BarrierError::Misuse("the barrier is finished: no more barriers after finish()".into()));
        }
        if self.phase.running() {
            return Err(BarrierError::Misuse(format!(
                "enter() while barrier {} is in progress: complete it with wait() or test() first",
                self.window.epoch
            )));
        }
        self.phase = Phase::Entered;
        self.live.errors = 0;
        self.run.step = 0;
        self.run.step_sent = false;
        self.run.cur = variant;
        self.window.variant[parity(self.window.epoch)] = variant;
        self.run.mismatch = None;
        // What arrived early for this barrier counts now.
        if self.count_arrived(variant) {
            self.note_mismatch(self.window.epoch, now);
        }
        self.progressed(now);
        self.advance(now);
        Ok(())
    }

    /// Sets what each step of plan `variant` still waits for in the
    /// current epoch from what arrived of it; whether anything of another
    /// plan arrived.
    fn count_arrived(&mut self, variant: usize) -> bool {
        let steps = self.plans.list[variant].steps.len();
        for (s, r) in self.run.remaining.iter_mut().enumerate() {
            *r = if s < steps { self.plans.expect.of_step(variant, s).len() as u32 } else { 0 };
        }
        let got = &self.window.got[parity(self.window.epoch)];
        let mut foreign = false;
        for i in got.iter() {
            match self.plans.expect.step_of(i) {
                (v, s) if v == variant => self.run.remaining[s] -= 1,
                _ => foreign = true,
            }
        }
        foreign
    }

    /// The current step made progress at `now`: its timers start afresh.
    pub(super) fn progressed(&mut self, now: Instant) {
        self.live.gave_up = None; // progress: whatever was silent is not in the way
        self.recovery.laggard = Laggard::Unknown;
        self.recovery.step_since = now;
        self.recovery.clean_at = None;
        self.recovery.retry_interval = self.recovery.rto.get(self.run.step);
        self.recovery.next_retry = now + self.recovery.retry_interval;
        self.recovery.fast_nacked = false;
    }

    /// **A peer past the closing barrier proves it complete.** A farewell's
    /// word (a `FINISHED` status, a "where are you?" query) of the barrier
    /// after this node's closing barrier comes from a peer that completed
    /// the closing barrier, which it could only once every node had
    /// entered it: this node's is complete too, whatever of its plan's
    /// messages it still misses. (Only a farewell's: a finish whose
    /// closing barrier ends void (a peer called a collective there instead)
    /// reports the mismatch and says no farewell, so the closing barrier
    /// it proves was not void. Any message of the barrier after proves it
    /// complete, but not whether it was void: a peer that called a
    /// broadcast against this node's finish went on to its next call, and
    /// its messages of it, taken for the proof, made this node's finish
    /// return Ok where every peer's call failed: review rev33, finding 3.) It sends the steps it has not sent
    /// (a peer may still wait for them), and [`advance`](Self::advance)
    /// completes the barrier. (A node stalled in its closing barrier for
    /// longer than the farewell's silence, its frames unread, while a
    /// message to it was lost: its peers completed the barrier, took it for
    /// gone, and left; the message it missed could never come again, and it
    /// failed naming a peer that had left properly. CI, session 15: 4 MPICH
    /// ranks, 20% loss, an unused communicator's instance closed in
    /// `MPI_Finalize`. Their farewell queries and notices, waiting in its
    /// queue, are of the barrier after.) The closing barrier carries no
    /// data, so nothing is lost by not waiting for its messages.
    pub(super) fn closing_proven(&mut self, now: Instant) {
        if !matches!(self.closing, super::closing::Closing::Barrier) || self.phase != Phase::Entered {
            return;
        }
        let steps = self.plans.list[self.run.cur].steps.len();
        while self.run.step < steps {
            if !self.run.step_sent {
                let parity = parity(self.window.epoch);
                self.recovery.sent_copies[parity][self.run.step] = 0;
                self.send_step(now, parity);
                self.recovery.step_sent(self.window.epoch, self.run.step, now);
            }
            self.run.step += 1;
            self.run.step_sent = false;
        }
        self.progressed(now);
    }

    /// Sends the current step's messages and moves through every step whose
    /// waits are met.
    pub(super) fn advance(&mut self, now: Instant) {
        while self.phase.running() {
            if self.run.step == self.plans.list[self.run.cur].steps.len() {
                self.complete(now);
                return;
            }
            let parity = parity(self.window.epoch);
            if !self.run.step_sent {
                self.recovery.sent_copies[parity][self.run.step] = 0;
                self.send_step(now, parity);
                self.recovery.step_sent(self.window.epoch, self.run.step, now);
            }
            if self.run.remaining[self.run.step] == 0 {
                if let Some(coll) = &mut self.coll {
                    coll.absorb(
                        parity,
                        &self.plans.list[self.run.cur].steps[self.run.step],
                        self.plans.expect.of_step(self.run.cur, self.run.step),
                        self.setup.me,
                    );
                    // What this node sends from now on says so.
                    self.window.void[parity] |= coll.has_error();
                }
                self.run.step += 1;
                self.run.step_sent = false;
                self.progressed(now);
            } else {
                return;
            }
        }
    }

    /// Sends the current step's messages (once).
    fn send_step(&mut self, now: Instant, parity: usize) {
        let sends = &self.plans.list[self.run.cur].steps[self.run.step].sends;
        if let Some(coll) = &mut self.coll {
            coll.stage(parity, self.run.step, sends.first().is_none_or(|o| plan::tag::carries_data(o.tag)));
        }
        for i in 0..self.plans.list[self.run.cur].steps[self.run.step].sends.len() {
            let out = self.plans.list[self.run.cur].steps[self.run.step].sends[i];
            if out.tag == plan::tag::BCAST_DONE && self.skip_end() {
                continue;
            }
            // As many copies as the loss seen makes worth it; twice at
            // least a message that a peer already asked for, once any loss
            // was seen (its estimate above 0). A point-to-point
            // message lost whole holds up the whole barrier, so its copies are
            // worth what a recovery costs every node: RECOVERY_WORTH was set
            // at 8 nodes, and counts as many times more as the barrier has
            // eights of nodes (`copies::worth_scale`).
            // (The second copy of a message asked for early, where the
            // loss seen makes one copy enough, goes unmarked: marked, it
            // told its receiver that this node had seen loss (a data
            // message's copies set a floor under the receiver's estimate),
            // and on a clean network every peer of a late node took its
            // retries for recoveries. On a network that never lost a frame
            // it goes once: in the simulator's descheduled nodes, 8 seeds,
            // 14 to 124 copies a seed → 0; under loss, where the estimate
            // is above 0 within a few barriers, as before: bench/results/
            // loss.md, session 18.)
            let for_loss = match out.dest {
                Dest::All => self.recovery.loss.copies(self.nodes() - 1),
                Dest::Node(_) => self.recovery.loss.copies(worth_scale(self.nodes())),
            };
            let asked = matches!(out.dest, Dest::Node(_)) && self.recovery.asked_early && self.recovery.loss.rate() > 0.0;
            let copies = if asked { for_loss.max(2) } else { for_loss };
            for k in 0..copies {
                self.send_out(now, out, self.run.step, self.window.epoch, (k, copies), for_loss > 1);
            }
            let receivers = if matches!(out.dest, Dest::All) { self.nodes() - 1 } else { 1 };
            self.recovery.spacing.sent(receivers, copies, self.recovery.loss.rate());
            let most = &mut self.recovery.sent_copies[parity][self.run.step];
            *most = (*most).max(copies.min(255) as u8);
            self.stats.sent += 1;
            self.stats.copies += u64::from(copies - 1);
        }
        self.run.step_sent = true;
    }

    /// The plan's last step is done: the barrier is complete here.
    fn complete(&mut self, now: Instant) {
        self.window.last_void = std::mem::take(&mut self.window.void[parity(self.window.epoch)]);
        if self.window.last_void {
            // A peer met a mismatch in this barrier: an error here too.
            self.contributions().note_reported();
        }
        self.recovery.asked_early = false;
        self.live.completed(self.window.epoch);
        // This barrier's bits become the one-after-next's.
        self.window.got[parity(self.window.epoch)].clear();
        // The frames of the barrier before can no longer come: those
        // still held for lost were.
        if let Some(before) = self.window.epoch.checked_sub(1) {
            let lost = self.window.copies.settle(before);
            self.recovery.loss.lost(lost);
            self.stats.lost_counted += u64::from(lost);
        }
        self.window.epoch += 1;
        self.stats.completed += 1;
        self.phase = match self.phase {
            Phase::Entered => Phase::Unreported,
            Phase::BackgroundQueued => {
                // The application entered a barrier meanwhile: it is
                // entered now; if this broadcast ended in a mismatch, the
                // barrier's wait or test reports it.
                self.phase = Phase::Idle;
                self.defer_mismatch();
                let _ = self.enter_barrier(now);
                return;
            }
            _ => Phase::Idle,
        };
    }

    /// Barrier `epoch` (the current one) runs another plan at some node
    /// (another collective, or a broadcast from another root): it can
    /// never complete as called. It completes as a void barrier instead:
    /// this node goes over to the algorithm's own plan ([`BASE`]) from its
    /// first step, its messages marked [`MISMATCHED`], and every call of
    /// the epoch ends in a mismatch error once it is complete. Every node
    /// goes over: the first time, this node tells every node (a node whose
    /// own messages all match would wait for ever); later statuses say it
    /// too, so a peer that asks learns it even if this is lost, and a base
    /// message is itself of another plan to a node that has not gone over.
    /// No node can complete the epoch under another plan: a broadcast's
    /// plan completes only once every node entered that very plan. So the
    /// epoch ends on every node, and the next one starts clean.
    pub(super) fn note_mismatch(&mut self, epoch: u64, now: Instant) {
        if self.run.mismatch.is_some() {
            return;
        }
        self.run.mismatch = Some(epoch);
        if !self.phase.running() {
            return;
        }
        let parity = parity(epoch);
        self.window.void[parity] = true;
        if self.run.cur != BASE {
            let me = self.me();
            let coll = self.contributions();
            coll.note_other_plan();
            coll.void_to_barrier(me);
            self.ends = super::ends::Ends::Sent;
            self.run.cur = BASE;
            self.window.variant[parity] = BASE;
            self.run.step = 0;
            self.run.step_sent = false;
            self.count_arrived(BASE);
            self.progressed(now);
        }
        self.send_status(None);
    }
}
