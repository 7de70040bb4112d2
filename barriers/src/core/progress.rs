//! Plan progress: entering an epoch, sending each step's messages, and
//! moving through every step whose waits are met, to the epoch's end.
//!
//! **Safety.** A node leaves barrier k only after its plan's waits for k are
//! met, and a message of k is only ever sent by a node that has reached the
//! sending step of k. The plans guarantee that every exit causally follows
//! every entry. Re-sends and answers only repeat messages that were already
//! sent, so they cannot make anyone leave early.

use std::time::Instant;

use super::window::{bcast_variant, parity, BASE};
use super::{Core, To};
use crate::collective::{Collective, Contributions};
use crate::engine::{mismatch_text, BarrierError};
use crate::plan::{self, Dest, Out};
use crate::transport::{MsgKind, NodeId, RECOVERED};

/// After a loss, multicasts go twice for this many barriers.
pub(super) const TWICE_FOR: u64 = 64;

impl Core {
    /// The collective storage, made on first use.
    pub(super) fn contributions(&mut self) -> &mut Contributions {
        let (steps, expected) = (self.remaining.len(), self.expect.len());
        self.coll.get_or_insert_with(|| Box::new(Contributions::new(steps, expected)))
    }

    /// Whether the current epoch has its result for the application: a
    /// broadcast past its data step (the rest only completes the epoch).
    pub(super) fn has_result(&self) -> bool {
        self.cur != BASE && self.step >= plan::BCAST_RESULT_STEP
    }

    /// Whether this node's messages now carry [`RECOVERED`].
    pub(super) fn recovered(&self) -> bool {
        self.recovered_in.is_some_and(|e| e + 1 >= self.epoch)
    }

    /// Sends `out` of step `step` of barrier `epoch`, with what the step
    /// staged for it if collectives are in use.
    fn send_out(&mut self, out: Out, step: usize, epoch: u64) {
        let arg = if self.recovered() { RECOVERED } else { 0 };
        let msg = crate::transport::Msg { arg, ..self.msg(MsgKind::Data, epoch, out.tag) };
        let data = self.coll.as_ref().map_or(&[][..], |c| c.sent(parity(epoch), step));
        let to = match out.dest {
            Dest::Node(to) => To::Node(to),
            Dest::All => To::All,
        };
        self.out.push(out.rail, to, msg, data);
    }

    /// The plan variant of `call` at this node.
    pub(super) fn variant_of(&self, call: Collective) -> Result<usize, BarrierError> {
        if !call.runs_on(self.config.algorithm) {
            return Err(BarrierError::Usage(format!("{call} cannot run on {}: it would count contributions more than once", self.config.algorithm)));
        }
        match call {
            Collective::Bcast { root } if root < self.nodes() => Ok(bcast_variant(root)),
            Collective::Bcast { root } => Err(BarrierError::Usage(format!("{call}: no node {root} among {}", self.nodes()))),
            _ => Ok(BASE),
        }
    }

    /// Enters the next barrier at `now` as a plain barrier.
    pub(super) fn enter_barrier(&mut self, now: Instant) -> Result<(), BarrierError> {
        let me = self.me();
        if let Some(coll) = &mut self.coll {
            coll.begin(Collective::Barrier, 0, &[], me);
        }
        self.enter_variant(now, BASE)
    }

    /// Enters the next barrier at `now` with plan `variant` (of the
    /// collective staged in the contributions, else a plain barrier).
    pub(super) fn enter_variant(&mut self, now: Instant, variant: usize) -> Result<(), BarrierError> {
        if self.finished {
            return Err(BarrierError::Usage("the barrier is finished: no more barriers after finish()".into()));
        }
        if self.in_progress {
            return Err(BarrierError::Usage(format!(
                "enter() while barrier {} is in progress: complete it with wait() or test() first",
                self.epoch
            )));
        }
        self.in_progress = true;
        self.owed = true;
        self.errors = 0;
        self.step = 0;
        self.step_sent = false;
        self.cur = variant;
        self.variant[parity(self.epoch)] = variant;
        self.mismatch = None;
        // What arrived early for this barrier counts now.
        let steps = self.plans[variant].steps.len();
        for (s, r) in self.remaining.iter_mut().enumerate() {
            *r = if s < steps { self.expect.of_step(variant, s).len() as u32 } else { 0 };
        }
        let got = &self.got[parity(self.epoch)];
        let mut foreign = false;
        for i in got.iter() {
            match self.expect.step_of(i) {
                (v, s) if v == variant => self.remaining[s] -= 1,
                _ => foreign = true,
            }
        }
        if foreign {
            self.note_mismatch(self.epoch);
        }
        self.progressed(now);
        self.advance(now);
        Ok(())
    }

    /// The current step made progress at `now`: its timers start afresh.
    pub(super) fn progressed(&mut self, now: Instant) {
        self.gave_up = None; // progress: whatever was silent is not in the way
        self.peer_late = false;
        self.step_since = now;
        self.retry_interval = self.rto.get();
        self.next_retry = now + self.retry_interval;
        self.fast_nacked = false;
    }

    /// Sends the current step's messages and moves through every step whose
    /// waits are met.
    pub(super) fn advance(&mut self, now: Instant) {
        while self.in_progress {
            if self.step == self.plans[self.cur].steps.len() {
                self.complete(now);
                return;
            }
            let parity = parity(self.epoch);
            if !self.step_sent {
                self.send_step(parity);
            }
            if self.remaining[self.step] == 0 {
                if let Some(coll) = &mut self.coll {
                    coll.absorb(parity, &self.plans[self.cur].steps[self.step], self.expect.of_step(self.cur, self.step), self.setup.me);
                }
                self.step += 1;
                self.step_sent = false;
                self.progressed(now);
            } else {
                return;
            }
        }
    }

    /// Sends the current step's messages (once).
    fn send_step(&mut self, parity: usize) {
        let sends = &self.plans[self.cur].steps[self.step].sends;
        if let Some(coll) = &mut self.coll {
            coll.stage(parity, self.step, sends.first().is_none_or(|o| plan::tag::carries_data(o.tag)));
        }
        for i in 0..self.plans[self.cur].steps[self.step].sends.len() {
            let out = self.plans[self.cur].steps[self.step].sends[i];
            if out.tag == plan::tag::BCAST_DONE && self.end_implied && !self.coll.as_ref().is_some_and(|c| c.has_error()) {
                // Staged for answers (a node that misses the next data
                // NACKs the end), not sent.
                self.stats.ends_implied += 1;
                self.end_skipped = true;
                continue;
            }
            self.send_out(out, self.step, self.epoch);
            self.stats.sent += 1;
            let twice = match out.dest {
                Dest::All => self.loss_seen_in.is_some_and(|e| e + TWICE_FOR > self.epoch),
                Dest::Node(_) => self.asked_early,
            };
            if twice {
                self.send_out(out, self.step, self.epoch);
                self.stats.copies += 1;
            }
        }
        self.step_sent = true;
    }

    /// The plan's last step is done: the barrier is complete here.
    fn complete(&mut self, now: Instant) {
        self.in_progress = false;
        self.gave_up = None;
        self.asked_early = false;
        // Completing the barrier proves every node entered it: no node was
        // dead for it, whatever was reported.
        let done = self.epoch;
        for peer in &mut self.peers {
            if peer.gave_up.is_some_and(|(e, _, _)| e <= done) {
                peer.gave_up = None;
            }
        }
        // This barrier's bits become the one-after-next's.
        self.got[parity(self.epoch)].clear();
        self.epoch += 1;
        self.stats.completed += 1;
        self.detached = false;
        if std::mem::take(&mut self.queued) {
            if self.coll.as_ref().is_some_and(|c| c.has_error()) {
                // Its wait or test reports the mismatch instead.
                return;
            }
            // The application entered a barrier meanwhile.
            let _ = self.enter_barrier(now);
        }
    }

    /// The next epoch's broadcast data from `from` says it ends this
    /// epoch ([`ENDS_PREVIOUS`](crate::collective::wire::ENDS_PREVIOUS)):
    /// if this epoch is `from`'s broadcast and this node waits for its end,
    /// that is the end (see [`crate::collective`]).
    pub(super) fn take_implied_end(&mut self, from: NodeId) {
        if self.cur == BASE || self.cur != bcast_variant(from) || from == self.me() {
            return;
        }
        let Some(i) = self.expect.index(from, plan::tag::BCAST_DONE) else { return };
        let (variant, step) = self.expect.step_of(i);
        let parity = parity(self.epoch);
        if variant == self.cur && self.got[parity].insert(i) {
            if let Some(coll) = &mut self.coll {
                coll.arrive_agreeing(parity, i);
            }
            self.remaining[step] -= 1;
            self.stats.ends_implied += 1;
        }
    }

    /// Barrier `epoch` (the current one) is of another collective at some
    /// node: it can never complete. The first time, tell every node (a
    /// node whose own messages all match would wait for ever); later
    /// statuses say it too, so a peer that asks learns it even if this is lost.
    pub(super) fn note_mismatch(&mut self, epoch: u64) {
        if self.mismatch.is_none() {
            self.mismatch = Some(mismatch_text(epoch));
            if self.in_progress {
                self.send_status(None);
            }
        }
    }
}
