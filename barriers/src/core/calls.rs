//! The application's calls. The immediate ones ([`Core::enter`],
//! [`Core::test`], [`Core::try_finish`]) act at once; the blocking ones
//! ([`Call`]) become a [`Pending`] call: a short program of waits (for a
//! broadcast completing in the background to settle, for the epoch to
//! complete or have its result, for the farewell to end), each followed by
//! what the call does next. Every input drives it as far as it can go.

use std::time::Instant;

use super::closing::Closing;
use super::ends::Ends;
use super::liveness::AppWord;
use super::progress::Phase;
use super::{Call, Core, Event};
use crate::collective::Collective;
use crate::types::BarrierError;

/// An application call waiting for something.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    /// When it gives up (with [`BarrierError::Deadline`]).
    pub(super) deadline: Option<Instant>,
    /// What it waits for now.
    block: Block,
    /// What it does once that is met.
    then: Then,
    /// Whether its errors count as the barrier's (a wait's).
    counts_errors: bool,
    /// A wait that is part of the closing protocol: the farewell follows.
    finishing: bool,
}

/// What a pending call waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// Nothing: go on.
    Ready,
    /// A broadcast completing in the background to complete.
    Settle,
    /// The epoch in progress to complete.
    Complete,
    /// The epoch in progress to have this node's result.
    Result,
    /// The farewell to end.
    Farewell,
}

/// What a pending call does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// A wait, settled: enter a barrier if none is, then complete it.
    WaitSettled,
    /// A wait, complete.
    WaitDone,
    /// A collective's wait for its result: done.
    ResultDone,
    /// A collective's entry, settled: enter it.
    CollectiveSettled { call: Collective, count: u32, more: bool },
    /// Closing, settled: enter the closing barrier.
    CloseSettled { finish: bool },
    /// Finishing, the closing barrier entered.
    FinishClosed,
    /// The farewell is over.
    FinishDone,
}

/// The application's blocking call in progress, and its kept input.
#[derive(Debug, Default)]
pub(super) struct Calls {
    pub(super) pending: Option<Pending>,
    /// A collective's input, kept while its call settles what came before (reused).
    pub(super) input: Vec<u8>,
    /// The outcome of the last call, until polled (as an [`Event::Done`]).
    pub(super) done: Option<Result<(), BarrierError>>,
    /// A mismatch found in an epoch after its call had returned (a
    /// broadcast completing in the background): the next call runs its own
    /// epoch, as every peer's does, and reports it as it ends.
    pub(super) deferred: Option<BarrierError>,
    /// The next collective entry is a later segment of the same call
    /// ([`Core::next_segment`]).
    pub(super) next_segment: bool,
}

impl Core {
    pub(super) fn start_call(&mut self, now: Instant, call: Call<'_>) {
        if self.calls.pending.is_some() {
            self.out.events.push_back(Event::Done(Err(BarrierError::Misuse("a barrier call is already in progress".into()))));
            return;
        }
        self.calls_again(now);
        if let Err(e) = self.left_behind() {
            self.calls.done = Some(Err(e));
            return;
        }
        let mut p = Pending { deadline: None, block: Block::Ready, then: Then::WaitSettled, counts_errors: false, finishing: false };
        match call {
            Call::Wait { deadline } => {
                self.begin_wait(now);
                p = Pending { deadline, block: self.settle_block(), then: Then::WaitSettled, counts_errors: true, ..p };
            }
            Call::WaitResult { deadline } => {
                self.begin_wait(now);
                p = Pending { deadline, block: Block::Result, then: Then::ResultDone, counts_errors: true, ..p };
            }
            Call::EnterCollective { call, count, more, input, deadline } => {
                // The root of a broadcast completing in the background that
                // broadcasts again: its next data, multicast at once, tells
                // every node what the end would (every node entered), one
                // send earlier.
                self.ends_begin(call);
                self.calls.input.clear();
                self.calls.input.extend_from_slice(input);
                p = Pending { deadline, block: self.settle_block(), then: Then::CollectiveSettled { call, count, more }, ..p };
            }
            Call::Close | Call::Finish if self.closing.closing() => {
                p.then = Then::FinishClosed;
                if call_is_close(&call) {
                    self.calls.done = Some(Ok(()));
                    return;
                }
            }
            Call::Close | Call::Finish => {
                p = Pending { block: self.settle_block(), then: Then::CloseSettled { finish: !call_is_close(&call) }, ..p };
            }
        }
        self.calls.pending = Some(p);
        self.drive(now, false);
    }

    /// A call's wait for a broadcast completing in the background, unless a
    /// barrier is queued behind it (then the caller's wait completes both).
    fn settle_block(&self) -> Block {
        if self.phase == Phase::Background {
            Block::Settle
        } else {
            Block::Ready
        }
    }

    /// The start of an application's wait at `now`.
    fn begin_wait(&mut self, now: Instant) {
        self.live.call_started = now;
        self.live.gave_up = None; // waiting again: no longer giving up, until judged again
    }

    /// Takes the pending call as far as it can go at `now`; with `timers`,
    /// its retries and verdicts are judged too.
    pub(super) fn drive(&mut self, now: Instant, timers: bool) {
        while let Some(mut p) = self.calls.pending {
            let met = match p.block {
                Block::Ready => true,
                Block::Settle => !self.phase.background(),
                Block::Complete => !self.phase.running(),
                Block::Result => !self.phase.running() || self.has_result(),
                Block::Farewell => self.farewell_step(now).is_none(),
            };
            if !met {
                if p.block != Block::Farewell && (timers || self.live.left_behind) {
                    self.blocked(now, p, timers);
                }
                return;
            }
            match self.resume(now, &mut p) {
                None => self.calls.pending = Some(p),
                // (The hot path: no error to move.)
                Some(Ok(())) => {
                    self.calls.pending = None;
                    self.ends = Ends::Sent;
                    self.calls.done = Some(Ok(()));
                    return;
                }
                Some(Err(e)) => {
                    self.calls.pending = None;
                    self.end_call(&p, Err(e));
                    return;
                }
            }
        }
    }

    /// A pending call whose wait is not met: being left behind ends it,
    /// and so may its timers. (A mismatch does not: the epoch completes as
    /// a void barrier, and the call reports the mismatch then; see
    /// [`Core::note_mismatch`].)
    #[cold]
    fn blocked(&mut self, now: Instant, p: Pending, timers: bool) {
        if let Err(error) = self.left_behind() {
            self.calls.pending = None;
            self.end_call(&p, Err(error));
            return;
        }
        if timers {
            if let Err(e) = self.on_timers(now, p.deadline) {
                self.calls.pending = None;
                self.end_call(&p, Err(e));
            }
        }
    }

    fn end_call(&mut self, p: &Pending, result: Result<(), BarrierError>) {
        self.ends = Ends::Sent;
        if p.counts_errors && result.is_err() {
            self.live.errors += 1;
        }
        if let Err(e) = &result {
            self.note_told(e);
        }
        self.calls.done = Some(result);
    }

    /// What the call does once its wait is met: the result, or `None` with
    /// its next wait set.
    fn resume(&mut self, now: Instant, p: &mut Pending) -> Option<Result<(), BarrierError>> {
        match p.then {
            Then::WaitSettled => {
                self.defer_mismatch();
                if self.phase == Phase::Idle {
                    if let Err(e) = self.enter_barrier(now) {
                        return Some(Err(e));
                    }
                }
                (p.block, p.then) = (Block::Complete, Then::WaitDone);
                None
            }
            Then::WaitDone => {
                self.phase = Phase::Idle; // (complete: the call reports it)
                let result = self.settled_mismatch();
                if result.is_ok() && p.finishing {
                    self.begin_farewell(now);
                    (p.block, p.then, p.counts_errors) = (Block::Farewell, Then::FinishDone, false);
                    return None;
                }
                Some(result)
            }
            Then::ResultDone => {
                self.phase = if self.phase.running() { Phase::Background } else { Phase::Idle };
                Some(Ok(()))
            }
            Then::CollectiveSettled { call, count, more } => Some(self.enter_collective_now(now, call, count, more)),
            Then::CloseSettled { finish } => {
                self.defer_mismatch();
                if self.phase.running() {
                    return Some(Err(BarrierError::Misuse(format!(
                        "finish() or close() while barrier {} is in progress: complete it first",
                        self.window.epoch
                    ))));
                }
                self.phase = Phase::Idle; // a barrier that completed; the closing one comes next
                self.closing = Closing::Barrier;
                self.live.call_started = now;
                if let Err(e) = self.enter_barrier(now) {
                    return Some(Err(e));
                }
                if !finish {
                    return Some(Ok(()));
                }
                p.then = Then::FinishClosed;
                None
            }
            Then::FinishClosed => {
                if !self.closing.finished() {
                    if self.phase != Phase::Idle {
                        // The closing barrier, not yet complete or not yet reported.
                        self.begin_wait(now);
                        *p = Pending { deadline: None, block: self.settle_block(), then: Then::WaitSettled, counts_errors: true, finishing: true };
                        return None;
                    }
                    self.begin_farewell(now);
                }
                (p.block, p.then) = (Block::Farewell, Then::FinishDone);
                None
            }
            Then::FinishDone => Some(Ok(())),
        }
    }

    /// Enters the next epoch as `call` with `count` elements of the kept
    /// input (`more`: segments of the call follow).
    fn enter_collective_now(&mut self, now: Instant, call: Collective, count: u32, more: bool) -> Result<(), BarrierError> {
        if std::mem::take(&mut self.calls.next_segment) {
            // A later segment of a call whose earlier one ended in a
            // mismatch found in the background: every node's call ends at
            // that segment (the others had their error there), so this
            // one ends here too, without entering.
            if let Some(detail) = self.coll.as_mut().and_then(|c| c.take_error()) {
                self.phase = Phase::Idle;
                return Err(BarrierError::CollectiveMismatch { epoch: self.window.epoch.wrapping_sub(1), detail });
            }
        }
        self.defer_mismatch();
        if self.phase != Phase::Idle {
            return Err(BarrierError::Misuse(format!(
                "{call} while barrier {} is entered and not yet completed: complete it with wait() first",
                self.window.epoch
            )));
        }
        let variant = self.variant_of(call)?;
        self.live.call_started = now;
        let me = self.me();
        let ends_previous = self.ends_take();
        let input = std::mem::take(&mut self.calls.input);
        let coll = self.contributions();
        coll.begin(call, count, more, &input, me);
        if ends_previous {
            coll.mark_ends_previous();
        }
        self.calls.input = input;
        self.enter_variant(now, variant)
    }

    /// A call begins (no epoch of the application's in progress): a
    /// disagreement that the last epoch found after its call had returned
    /// (a broadcast completing in the background, whose end said so) is
    /// kept for this call to report as it ends. This call's epoch still
    /// runs: every peer enters it (each ended the last one, as a void
    /// barrier if need be), so the collectives after a mismatch work.
    pub(super) fn defer_mismatch(&mut self) {
        if self.phase != Phase::Idle {
            return;
        }
        if let Some(detail) = self.coll.as_mut().and_then(|c| c.take_error()) {
            let epoch = self.window.epoch.wrapping_sub(1);
            self.calls.deferred.get_or_insert(BarrierError::CollectiveMismatch { epoch, detail });
        }
    }

    /// A call ends, no epoch in progress: the disagreement its own epoch
    /// found (a peer called another collective), else one of an earlier
    /// epoch kept for it ([`Core::defer_mismatch`]), as its error.
    pub(super) fn settled_mismatch(&mut self) -> Result<(), BarrierError> {
        if self.phase.running() {
            return Ok(());
        }
        let own = self.coll.as_mut().and_then(|c| c.take_error());
        let deferred = self.calls.deferred.take();
        match own {
            Some(detail) => {
                self.phase = Phase::Idle; // the error reports the epoch
                Err(BarrierError::CollectiveMismatch { epoch: self.window.epoch.wrapping_sub(1), detail })
            }
            None => deferred.map_or(Ok(()), Err),
        }
    }

    /// The progress agent's round (no call pending): retries and verdicts
    /// of a barrier in progress (a failure is state the application's next
    /// call meets again), or the farewell once closing.
    pub(super) fn serve(&mut self, now: Instant) {
        if self.phase.running() {
            let due = now >= self.recovery.next_retry;
            let _ = self.on_timers(now, None);
            // Told of a failure and not called again: no call waits on
            // this node's retries, nor on a verdict of its (a call made
            // again judges afresh), and what it owes its peers it sends
            // when asked. It probes once a failure timeout, not every
            // fortieth of one: its barrier still completes in the
            // background if the silent node comes back. (In the
            // simulator's fault mix at n = 8, such probes and their
            // answers were a fifth of every event.)
            if due && self.live.told.is_some() {
                self.recovery.next_retry = self.recovery.next_retry.max(now + self.config.failure_timeout);
            }
        } else if self.closing.closing() {
            // The closing barrier complete (the application closed and went
            // away): the farewell goes on here, unless the barrier ended
            // void. A farewell's word proves to a peer still in its closing
            // barrier that the barrier completed without a mismatch
            // (`Core::closing_proven`), as a finish says none after a void
            // one: said here regardless, a peer that lost every word of the
            // mismatch returned Ok from its finish where every other call of
            // the barrier failed (review rev34, finding 3). This node then
            // only answers, as any node does; its application's `finish`
            // reports the mismatch.
            if !self.closing.finished() && !self.window.last_void && !self.coll.as_ref().is_some_and(|c| c.has_error()) {
                self.begin_farewell(now);
            }
            self.farewell_step(now);
        }
    }

    /// The application calls again: its statuses stop saying it was told
    /// of a failure (here or on the barrier beside), and the retries it
    /// held back go now.
    fn calls_again(&mut self, now: Instant) {
        self.retry_soon(now);
        self.live.told = None;
        self.live.told_beside = None;
        self.live.calls = self.live.calls.wrapping_add(1);
    }

    /// The application's word on the barrier beside this one (a pair,
    /// [`AppWord`]): a call made there since the last word is a call made
    /// again (this barrier's statuses stop saying the failure its
    /// application was told here), and the failure it was told there and
    /// has not called since, this barrier's statuses say too (finding j-3:
    /// a peer waiting here for its next call, which may never come, fails
    /// naming the silent node, rather than waiting for ever, and with it
    /// every node that waits for that peer).
    pub(super) fn take_beside_word(&mut self, now: Instant, word: AppWord) {
        let last = std::mem::replace(&mut self.live.beside, word);
        if word == last {
            return;
        }
        if word.calls != last.calls {
            self.retry_soon(now);
            self.live.told = None;
        }
        self.live.told_beside = word.told;
    }

    /// After a failure the application was told of, the retries waited a
    /// failure timeout (see [`Core::serve`]); a call brings the next one
    /// back within the retry interval.
    fn retry_soon(&mut self, now: Instant) {
        if self.live.told.is_some() {
            self.recovery.next_retry = self.recovery.next_retry.min(now + self.recovery.retry_interval);
        }
    }

    /// The application enters the next barrier (split phase).
    pub(super) fn enter_split(&mut self, now: Instant) -> Result<(), BarrierError> {
        if self.phase == Phase::Unreported {
            return Err(BarrierError::Misuse(format!(
                "enter() twice: barrier {} is complete, but wait() or test() has not said so yet",
                self.window.epoch - 1
            )));
        }
        // A mismatch the agent found completing a broadcast in the background.
        self.defer_mismatch();
        self.left_behind()?;
        self.live.call_started = now;
        self.calls_again(now);
        if self.phase == Phase::Background {
            // A broadcast completes in the background: the barrier follows
            // as soon as it is complete.
            self.phase = Phase::BackgroundQueued;
            return Ok(());
        }
        self.enter_barrier(now)
    }

    pub(super) fn test_once(&mut self, now: Instant) -> Result<bool, BarrierError> {
        self.left_behind()?;
        self.retry_soon(now);
        self.advance(now);
        if self.phase.running() {
            self.on_timers(now, None)?;
            // A broadcast completing in the background is not the application's.
            return Ok(!self.entered());
        }
        self.settled_mismatch()?;
        self.phase = Phase::Idle;
        Ok(true)
    }

    pub(super) fn try_finish_once(&mut self, now: Instant) -> Result<bool, BarrierError> {
        if !self.closing.closing() {
            return Err(BarrierError::Misuse("try_finish() before close(): nothing is closing".into()));
        }
        if !self.closing.finished() {
            if !self.test(now)? {
                return Ok(false);
            }
            self.begin_farewell(now);
        }
        Ok(self.farewell_step(now).is_none())
    }

    /// After a collective epoch: its result into `out` (native-endian);
    /// an error if peers called another collective.
    pub(super) fn result_into(&mut self, out: Option<&mut [u8]>) -> Result<(), BarrierError> {
        let epoch = if self.phase.running() { self.window.epoch } else { self.window.epoch - 1 };
        let coll = self.contributions();
        if let Some(e) = coll.take_error() {
            return Err(BarrierError::CollectiveMismatch { epoch, detail: e });
        }
        if let Some(out) = out {
            if !coll.result(out) {
                return Err(BarrierError::Misuse(format!("barrier {epoch}: the collective has no result of {} bytes", out.len())));
            }
        }
        Ok(())
    }
}

fn call_is_close(call: &Call<'_>) -> bool {
    matches!(call, Call::Close)
}
