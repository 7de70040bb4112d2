//! Nonblocking collectives queued on a barrier ([`crate::Barrier::start`]):
//! what each one is and how far it has got. The engine runs them one after
//! the other, in the order they were started (the core runs one call at a
//! time), each as the calls a blocking collective makes (enter the epoch,
//! wait for its result, read it; a barrier: one wait), segment by segment;
//! whoever holds the engine drives them (the application's calls, or the
//! progress agent while the application computes). See
//! [`Engine::pump`](crate::engine).

use std::collections::VecDeque;
use std::time::Instant;

use crate::collective::Collective;
use crate::types::BarrierError;

/// Where a queued collective is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Not started on the core (or between two segments).
    Idle,
    /// Entering the epoch of the segment that ends at `end` (a core call).
    Entering {
        /// The end of the segment (bytes).
        end: usize,
    },
    /// Waiting for the segment's result (a core call).
    Result {
        /// The end of the segment (bytes).
        end: usize,
    },
    /// A barrier: waiting for it (a core call).
    Barrier,
}

/// One nonblocking collective.
#[derive(Debug)]
pub(crate) struct Queued {
    /// Its number on this barrier (from 1).
    pub(crate) id: u64,
    /// The call.
    pub(crate) call: Collective,
    /// This node's input (copied when started).
    pub(crate) input: Vec<u8>,
    /// The result, where the call has one for this node (else empty).
    pub(crate) output: Vec<u8>,
    /// The start of the next segment (bytes).
    pub(crate) next: usize,
    /// Whether a segment has run (a call of no data still runs one epoch).
    pub(crate) ran: bool,
    /// Where it is.
    pub(crate) stage: Stage,
    /// When its calls give up (the barrier's deadline from its start).
    pub(crate) deadline: Option<Instant>,
    /// Its outcome, once it has one.
    pub(crate) outcome: Option<Result<(), BarrierError>>,
    /// Whether its handle is gone (dropped unclaimed): dropped once done.
    pub(crate) abandoned: bool,
}

/// A barrier's queue of nonblocking collectives, oldest first: done ones
/// stay until their handle claims them.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub(crate) ops: VecDeque<Queued>,
    last_id: u64,
}

impl Queue {
    /// Adds `call` with this node's `input`; its result wanted here or not.
    pub(crate) fn push(&mut self, call: Collective, input: &[u8], result_here: bool) -> u64 {
        self.last_id += 1;
        self.ops.push_back(Queued {
            id: self.last_id,
            call,
            input: input.to_vec(),
            output: if result_here { vec![0; input.len()] } else { Vec::new() },
            next: 0,
            ran: false,
            stage: Stage::Idle,
            deadline: None,
            outcome: None,
            abandoned: false,
        });
        self.last_id
    }

    /// The oldest collective without an outcome (the one the core runs).
    pub(crate) fn running(&mut self) -> Option<&mut Queued> {
        self.ops.iter_mut().find(|op| op.outcome.is_none())
    }

    /// Whether some collective has no outcome yet.
    pub(crate) fn busy(&self) -> bool {
        self.ops.iter().any(|op| op.outcome.is_none())
    }

    /// Takes collective `id` if it is done: its outcome, its result copied
    /// into `out` (when the call has one here and `out` is given). `None`:
    /// not done yet. An `id` not queued is a usage error.
    pub(crate) fn claim(&mut self, id: u64, out: Option<&mut [u8]>) -> Option<Result<(), BarrierError>> {
        let Some(at) = self.ops.iter().position(|op| op.id == id) else {
            return Some(Err(BarrierError::Misuse(format!("nonblocking collective {id} is not pending (completed already?)"))));
        };
        self.ops[at].outcome.as_ref()?;
        let op = self.ops.remove(at).expect("found above");
        let outcome = op.outcome.expect("checked above");
        if outcome.is_ok() {
            if let Some(out) = out {
                if !op.output.is_empty() {
                    if out.len() != op.output.len() {
                        return Some(Err(BarrierError::Misuse(format!(
                            "{}: the result is {} bytes, the buffer {}",
                            op.call,
                            op.output.len(),
                            out.len()
                        ))));
                    }
                    out.copy_from_slice(&op.output);
                }
            }
        }
        Some(outcome)
    }

    /// Marks `id` abandoned, and drops the abandoned ones that are done.
    pub(crate) fn abandon(&mut self, id: u64) {
        if let Some(op) = self.ops.iter_mut().find(|op| op.id == id) {
            op.abandoned = true;
        }
        self.ops.retain(|op| !(op.abandoned && op.outcome.is_some()));
    }
}
