//! Collectives for C: the element types, reductions and calls as C names
//! them, the barrier that runs a job's or a group's collectives, and the
//! nonblocking ones' requests.

use std::ffi::c_int;

use barriers::{Barrier, Collective, Dtype, GroupTransport, Op};

use crate::error::argument;
use crate::CError;
// The C functions and types the docs name.
#[cfg(doc)]
use crate::*;

/// A job's or a group's collectives: their own barrier, joined with the job
/// or the group (review rev31, finding 2: joined at the first collective
/// call, it made a nonblocking start wait for every rank, and a rank late
/// to its first collective fail the others), and a reused staging buffer.
#[derive(Default)]
pub(crate) struct Collectives {
    /// Their barrier: made and joined with the job or the group (`None`
    /// before the group's join, and once closing took it).
    pub(crate) barrier: Option<Barrier<GroupTransport>>,
    /// Whether a collective was called on it (see [`Collectives::closing`]).
    used: bool,
    /// A collective's input, copied (so that it may be its output too).
    staged: Vec<u8>,
}

impl Collectives {
    /// The barrier, for a call. Never made here: a join waits for every
    /// member, and a call must not (see the type's doc), so one that comes
    /// when there is none (after the job's finish or the group's close
    /// began) is an error.
    pub(crate) fn barrier(&mut self) -> Result<&mut Barrier<GroupTransport>, CError> {
        let barrier =
            self.barrier.as_mut().ok_or_else(|| argument("the collectives' barrier is closed (the job is finishing or the group closing)"))?;
        self.used = true;
        Ok(barrier)
    }

    /// The barrier to close with the job or the group: `None` if this rank
    /// never called a collective on it (it is dropped, no closing barrier).
    /// Every rank calls the same collectives on a communicator, so in a
    /// program MPI allows, no rank called one here either: none needs
    /// anything of this instance from another, and its closing barrier and
    /// farewell (frames, a thread in `MPI_Finalize`, the agent's wake-ups)
    /// would only cost each communicator's churn. (A rank that did call one
    /// waits for a call that never comes, and names this rank silent after
    /// the failure timeout, as for any collective a member never calls.)
    pub(crate) fn closing(&mut self) -> Option<Barrier<GroupTransport>> {
        let barrier = self.barrier.take();
        barrier.filter(|_| std::mem::take(&mut self.used))
    }

    /// Runs `call` on the barrier: `input` (`None`: in place, from
    /// `output`) into `output` (`None` where no result is wanted here),
    /// staged through a reused buffer.
    pub(crate) fn run(&mut self, call: Collective, input: Option<&[u8]>, output: Option<&mut [u8]>) -> Result<(), CError> {
        let mut staged = std::mem::take(&mut self.staged);
        staged.clear();
        match (input, &output) {
            (Some(input), _) => staged.extend_from_slice(input),
            (None, Some(output)) => staged.extend_from_slice(output),
            (None, None) => return Err(argument(format!("{call}: no input and no output"))),
        }
        let result = self.barrier().and_then(|b| Ok(b.collective(call, &staged, output)?));
        self.staged = staged;
        result
    }
}

/// An element type of [`mcd_allreduce`] and [`mcd_reduce`]: one of the
/// `MCD_INT32` ... `MCD_DOUBLE` constants (another value is an argument error).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct mcd_dtype(pub c_int);

/// `int32_t`.
pub const MCD_INT32: mcd_dtype = mcd_dtype(1);
/// `int64_t`.
pub const MCD_INT64: mcd_dtype = mcd_dtype(2);
/// `uint32_t`.
pub const MCD_UINT32: mcd_dtype = mcd_dtype(3);
/// `uint64_t`.
pub const MCD_UINT64: mcd_dtype = mcd_dtype(4);
/// `float`.
pub const MCD_FLOAT: mcd_dtype = mcd_dtype(5);
/// `double`.
pub const MCD_DOUBLE: mcd_dtype = mcd_dtype(6);

/// A reduction of [`mcd_allreduce`] and [`mcd_reduce`]: one of the
/// `MCD_SUM` ... `MCD_BXOR` constants (the bitwise ones on integers only).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct mcd_op(pub c_int);

/// Sum (integers wrap around).
pub const MCD_SUM: mcd_op = mcd_op(1);
/// Minimum.
pub const MCD_MIN: mcd_op = mcd_op(2);
/// Maximum.
pub const MCD_MAX: mcd_op = mcd_op(3);
/// Product (integers wrap around).
pub const MCD_PROD: mcd_op = mcd_op(4);
/// Bitwise and.
pub const MCD_BAND: mcd_op = mcd_op(5);
/// Bitwise or.
pub const MCD_BOR: mcd_op = mcd_op(6);
/// Bitwise exclusive or.
pub const MCD_BXOR: mcd_op = mcd_op(7);

/// The reduction `op` on `dtype`, or an argument error.
pub(crate) fn reduction(dtype: mcd_dtype, op: mcd_op) -> Result<(Dtype, Op), CError> {
    let d = u8::try_from(dtype.0).ok().and_then(Dtype::from_code).ok_or_else(|| argument(format!("{} is not an mcd_dtype", dtype.0)))?;
    let o = u8::try_from(op.0).ok().and_then(Op::from_code).ok_or_else(|| argument(format!("{} is not an mcd_op", op.0)))?;
    if !o.applies_to(d) {
        return Err(argument(format!("{o} applies to integers only, not {d}")));
    }
    Ok((d, o))
}

/// The byte length of `count` elements of `dtype`.
pub(crate) fn bytes_of(count: usize, dtype: Dtype) -> Result<usize, CError> {
    count.checked_mul(dtype.size()).ok_or_else(|| argument(format!("{count} elements: too many")))
}

/// A root argument: a rank of a group of `size` ranks.
pub(crate) fn root_in(size: usize, root: c_int) -> Result<usize, CError> {
    usize::try_from(root).ok().filter(|&r| r < size).ok_or_else(|| argument(format!("root {root} is not a rank of the {size} rank(s)")))
}

/// A collective of [`mcd_istart`] and [`mcd_group_istart`]: one of the
/// `MCD_CALL_BARRIER` ... `MCD_CALL_BCAST` constants.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct mcd_call(pub c_int);

/// A barrier (no data).
pub const MCD_CALL_BARRIER: mcd_call = mcd_call(1);
/// An allreduce (as [`mcd_allreduce`]).
pub const MCD_CALL_ALLREDUCE: mcd_call = mcd_call(2);
/// A reduce to a root (as [`mcd_reduce`]).
pub const MCD_CALL_REDUCE: mcd_call = mcd_call(3);
/// A broadcast from a root (as [`mcd_bcast`]; the count is in bytes).
pub const MCD_CALL_BCAST: mcd_call = mcd_call(4);

/// A nonblocking collective in progress (`mcd_request` in C), from
/// [`mcd_istart`] or [`mcd_group_istart`]; completed (and freed) by
/// [`mcd_request_test`] or [`mcd_request_wait`], or given up with
/// [`mcd_request_free`].
pub struct Request {
    pub(crate) request: barriers::Request<GroupTransport>,
    /// The bytes of its result at this rank (0: none here).
    pub(crate) result_bytes: usize,
}

/// The collective `call` among `size` ranks (this one `rank`) of `count`
/// elements of `dtype` (a broadcast: bytes): its description, the bytes of
/// its input, and of its result here.
pub(crate) fn nonblocking_call(
    call: mcd_call,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    rank: usize,
    size: usize,
) -> Result<(Collective, usize, usize), CError> {
    match call {
        MCD_CALL_BARRIER => Ok((Collective::Barrier, 0, 0)),
        MCD_CALL_ALLREDUCE => {
            let (dtype, op) = reduction(dtype, op)?;
            let bytes = bytes_of(count, dtype)?;
            Ok((Collective::Allreduce { op, dtype }, bytes, bytes))
        }
        MCD_CALL_REDUCE => {
            let (dtype, op) = reduction(dtype, op)?;
            let root = root_in(size, root)?;
            let bytes = bytes_of(count, dtype)?;
            Ok((Collective::Reduce { op, dtype, root }, bytes, if rank == root { bytes } else { 0 }))
        }
        MCD_CALL_BCAST => {
            let root = root_in(size, root)?;
            Ok((Collective::Bcast { root }, count, if rank == root { 0 } else { count }))
        }
        other => Err(argument(format!("{} is not an mcd_call", other.0))),
    }
}
