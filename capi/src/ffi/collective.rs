//! The C functions of the collectives, on a job and on a group (each pair
//! one generic function), and the nonblocking ones' requests.

use std::ffi::{c_int, c_void};

use barriers::Collective;

use super::group::group_handle;
use super::guarded;
use super::job::handle;
use crate::collective::{bytes_of, nonblocking_call, reduction, root_in};
use crate::error::argument;
use crate::{mcd_call, mcd_dtype, mcd_op, CError, Communicator, Group, Job, Request};
// The C functions and types the docs name.
#[cfg(doc)]
use crate::*;

/// Runs `call` on `c` with the raw buffers `input` (NULL, or the same as
/// `output`: in place, from `output`) and `output` (NULL where no result
/// is wanted here), of `bytes` bytes each. Buffers that overlap otherwise
/// are read through a copy.
///
/// # Safety
/// `input` is NULL or readable for `bytes` bytes; `output` is NULL or
/// writable for `bytes` bytes.
unsafe fn run(mut c: impl Communicator, call: Collective, input: *const u8, output: *mut u8, bytes: usize) -> Result<(), CError> {
    if bytes == 0 {
        return c.collective(call, Some(&[]), None);
    }
    if input.is_null() && output.is_null() {
        return Err(argument(format!("{call}: both buffers are NULL")));
    }
    let (from, to) = (input as usize, output as usize);
    let overlap = !input.is_null() && !output.is_null() && from < to + bytes && to < from + bytes;
    let copy: Vec<u8>;
    let input = if input.is_null() || from == to {
        None
    } else if overlap {
        // SAFETY: readable for `bytes` bytes per the contract; copied
        // before `output` is borrowed.
        copy = unsafe { std::slice::from_raw_parts(input, bytes) }.to_vec();
        Some(&copy[..])
    } else {
        // SAFETY: readable for `bytes` bytes per the contract, and apart
        // from `output`.
        Some(unsafe { std::slice::from_raw_parts(input, bytes) })
    };
    // SAFETY: writable for `bytes` bytes per the contract, aliased by no
    // other slice (an overlapping input was copied).
    let output = (!output.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(output, bytes) });
    c.collective(call, input, output)
}

/// The allreduce of a job or a group (the C function `name`).
///
/// # Safety
/// As [`mcd_allreduce`] on the buffers.
unsafe fn allreduce(
    c: impl Communicator,
    name: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
) -> Result<(), CError> {
    let (dtype, op) = reduction(dtype, op)?;
    if recvbuf.is_null() && count > 0 {
        return Err(argument(format!("{name}: `recvbuf` is NULL")));
    }
    let bytes = bytes_of(count, dtype)?;
    // SAFETY: forwarded contract on the buffers.
    unsafe { run(c, Collective::Allreduce { op, dtype }, sendbuf.cast(), recvbuf.cast(), bytes) }
}

/// The reduce of a job or a group (the C function `name`).
///
/// # Safety
/// As [`mcd_reduce`] on the buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce(
    c: impl Communicator,
    name: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
) -> Result<(), CError> {
    let (dtype, op) = reduction(dtype, op)?;
    let root = root_in(c.size(), root)?;
    let bytes = bytes_of(count, dtype)?;
    let at_root = c.rank() == root;
    if count > 0 && ((at_root && recvbuf.is_null()) || (!at_root && sendbuf.is_null())) {
        return Err(argument(format!("{name}: {} is NULL", if at_root { "the root's `recvbuf`" } else { "`sendbuf`" })));
    }
    let output = if at_root { recvbuf.cast() } else { std::ptr::null_mut() };
    // SAFETY: forwarded contract on the buffers.
    unsafe { run(c, Collective::Reduce { op, dtype, root }, sendbuf.cast(), output, bytes) }
}

/// The broadcast of a job or a group (the C function `name`).
///
/// # Safety
/// As [`mcd_bcast`] on the buffer.
unsafe fn bcast(c: impl Communicator, name: &str, buf: *mut c_void, bytes: usize, root: c_int) -> Result<(), CError> {
    let root = root_in(c.size(), root)?;
    if buf.is_null() && bytes > 0 {
        return Err(argument(format!("{name}: `buf` is NULL")));
    }
    let at_root = c.rank() == root;
    let (input, output) = if at_root { (buf as *const u8, std::ptr::null_mut()) } else { (std::ptr::null(), buf.cast()) };
    // SAFETY: forwarded contract on the buffer.
    unsafe { run(c, Collective::Bcast { root }, input, output, bytes) }
}

/// Starts `call` on a job or a group (the C function `name`) with `input`,
/// and writes its request to `out`.
///
/// # Safety
/// As [`mcd_istart`] on `input` and `out`.
#[allow(clippy::too_many_arguments)]
unsafe fn istart(
    mut c: impl Communicator,
    name: &str,
    call: mcd_call,
    input: *const c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    out: *mut *mut Request,
) -> Result<(), CError> {
    if out.is_null() {
        return Err(argument(format!("{name}: `request` is NULL")));
    }
    let rank = c.rank();
    let (collective, bytes, result_bytes) = nonblocking_call(call, count, dtype, op, root, rank, c.size())?;
    // A broadcast's input matters at its root only.
    let needs_input = bytes > 0 && !matches!(collective, Collective::Bcast { root } if root != rank);
    if needs_input && input.is_null() {
        return Err(argument(format!("{collective}: the input is NULL")));
    }
    let zeros;
    let data: &[u8] = if needs_input {
        // SAFETY: readable for `bytes` bytes per the contract.
        unsafe { std::slice::from_raw_parts(input.cast::<u8>(), bytes) }
    } else {
        zeros = vec![0u8; bytes];
        &zeros
    };
    let request = c.start(collective, data)?;
    // SAFETY: non-null, writable per the contract.
    unsafe { *out = Box::into_raw(Box::new(Request { request, result_bytes })) };
    Ok(())
}

/// Allreduce across the job: `recvbuf` receives `count` elements of
/// `dtype` reduced with `op` over every rank's `sendbuf`, bitwise the same
/// on every rank and in every run (the algorithm fixes the combining order,
/// whatever the arrival order; MPI does not promise this). `sendbuf` NULL
/// (or equal to `recvbuf`): in place, the input is `recvbuf`. Every rank
/// calls it with the same count, type and operation. Any length: data
/// longer than one frame goes in segments of one frame each.
///
/// # Safety
/// `job` as [`mcd_barrier`]; `sendbuf` is NULL or readable and `recvbuf`
/// writable for `count` elements.
#[no_mangle]
pub unsafe extern "C" fn mcd_allreduce(
    job: *mut Job,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { allreduce(handle(job)?, "mcd_allreduce", sendbuf, recvbuf, count, dtype, op) })
}

/// Reduce to `root`: as [`mcd_allreduce`], but only `root`'s `recvbuf`
/// receives the result (other ranks' may be NULL, and is not written). At
/// the root, `sendbuf` NULL (or equal to `recvbuf`) is in place.
///
/// # Safety
/// As [`mcd_allreduce`]; at ranks other than `root`, `sendbuf` is readable
/// for `count` elements and `recvbuf` is ignored.
#[no_mangle]
pub unsafe extern "C" fn mcd_reduce(
    job: *mut Job,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { reduce(handle(job)?, "mcd_reduce", sendbuf, recvbuf, count, dtype, op, root) })
}

/// Broadcast: `root`'s `bytes` bytes at `buf` into every rank's `buf`.
/// Every rank calls it with the same length and root.
///
/// # Safety
/// `job` as [`mcd_barrier`]; `buf` is readable (at the root) or writable
/// (elsewhere) for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_bcast(job: *mut Job, buf: *mut c_void, bytes: usize, root: c_int) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { bcast(handle(job)?, "mcd_bcast", buf, bytes, root) })
}

/// As [`mcd_allreduce`], across the group's ranks: on a barrier instance
/// of the group's own (joined with the group, in `mcd_group_join`),
/// bitwise the same on every member and in every run.
///
/// # Safety
/// `group` is NULL or a live handle, not used by another thread meanwhile;
/// the buffers as for [`mcd_allreduce`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_allreduce(
    group: *mut Group,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { allreduce(group_handle(group)?, "mcd_group_allreduce", sendbuf, recvbuf, count, dtype, op) })
}

/// As [`mcd_reduce`], across the group's ranks, to the group's rank `root`.
///
/// # Safety
/// As [`mcd_group_allreduce`]; the buffers as for [`mcd_reduce`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_reduce(
    group: *mut Group,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { reduce(group_handle(group)?, "mcd_group_reduce", sendbuf, recvbuf, count, dtype, op, root) })
}

/// As [`mcd_bcast`], across the group's ranks, from the group's rank `root`.
///
/// # Safety
/// As [`mcd_group_allreduce`]; `buf` as for [`mcd_bcast`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_bcast(group: *mut Group, buf: *mut c_void, bytes: usize, root: c_int) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { bcast(group_handle(group)?, "mcd_group_bcast", buf, bytes, root) })
}

/// Starts a nonblocking collective across the job (on the barrier of the
/// job's collectives, as [`mcd_allreduce`] and the others) and returns at
/// once, never waiting for another rank: `call` with `count` elements of
/// `dtype` reduced with `op` (a broadcast: `count` bytes; a barrier: no
/// data), `root` for a reduce or a broadcast. `input` (this rank's
/// elements; a broadcast's root's bytes; NULL for a barrier or a
/// broadcast's other ranks) is copied at once. `*request` receives the
/// request: complete it with [`mcd_request_test`] or [`mcd_request_wait`],
/// which write the result where the call has one (every rank for an
/// allreduce, the root for a reduce, every rank but the root for a
/// broadcast). Collectives started on the job run one after the other in
/// the order they were started (every rank starts them in the same order,
/// as it calls blocking ones), a blocking collective after the ones
/// started before it; the library's background thread carries them while
/// the program computes.
///
/// # Safety
/// `job` as [`mcd_barrier`]; `input` as above; `request` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_istart(
    job: *mut Job,
    call: mcd_call,
    input: *const c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    request: *mut *mut Request,
) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { istart(handle(job)?, "mcd_istart", call, input, count, dtype, op, root, request) })
}

/// As [`mcd_istart`], across the group's ranks (on the barrier of the
/// group's collectives, as [`mcd_group_allreduce`]). The group must not be
/// freed before its requests are complete (a free runs them to their end
/// first).
///
/// # Safety
/// `group` as [`mcd_group_allreduce`]; the rest as [`mcd_istart`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_istart(
    group: *mut Group,
    call: mcd_call,
    input: *const c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    request: *mut *mut Request,
) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { istart(group_handle(group)?, "mcd_group_istart", call, input, count, dtype, op, root, request) })
}

/// A request argument.
///
/// # Safety
/// `request` is NULL or a live request.
unsafe fn request_handle<'a>(request: *mut Request) -> Result<&'a mut Request, CError> {
    // SAFETY: per the caller's guarantee, a live request used by one thread.
    unsafe { request.as_mut() }.ok_or_else(|| argument("the request is NULL"))
}

/// The result buffer of `request`: `out` for its result bytes, if it has a
/// result here and `out` is given.
///
/// # Safety
/// `out` is NULL or writable for the request's result bytes.
unsafe fn result_buffer<'a>(request: &Request, out: *mut c_void) -> Option<&'a mut [u8]> {
    if request.result_bytes == 0 || out.is_null() {
        return None;
    }
    // SAFETY: writable for the result bytes per the contract.
    Some(unsafe { std::slice::from_raw_parts_mut(out.cast::<u8>(), request.result_bytes) })
}

/// Progress on `request` without blocking: `*done` becomes 1 once it is
/// complete (its result, where it has one here, written to `out`: as many
/// bytes as its input), and the request is freed; else 0. On an error
/// (the collective failed: a peer is dead, the ranks called different
/// collectives...) the request is freed too.
///
/// # Safety
/// `request` is NULL or a live request (not used by another thread
/// meanwhile); `out` is NULL or writable for the result; `done` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_request_test(request: *mut Request, out: *mut c_void, done: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { progress(request, out, done, "mcd_request_test", |r, buffer| r.test(buffer)) }
}

/// One step of progress on `request` by `step` (a test, or a wait for a
/// while): `*done` becomes 1 once it is complete, and the request is
/// freed then or on an error; `name` names the C function in errors.
///
/// # Safety
/// As [`mcd_request_test`].
unsafe fn progress(
    request: *mut Request,
    out: *mut c_void,
    done: *mut c_int,
    name: &str,
    step: impl FnOnce(&mut barriers::Request<barriers::GroupTransport>, Option<&mut [u8]>) -> Result<bool, barriers::BarrierError>,
) -> c_int {
    guarded(|| {
        if done.is_null() {
            return Err(argument(format!("{name}: `done` is NULL")));
        }
        // SAFETY: forwarded contract.
        let r = unsafe { request_handle(request) }?;
        // SAFETY: forwarded contract on `out`.
        let buffer = unsafe { result_buffer(r, out) };
        let outcome = step(&mut r.request, buffer);
        let complete = matches!(outcome, Ok(true));
        if outcome.is_err() || complete {
            // SAFETY: from Box::into_raw in mcd_istart; not used again.
            drop(unsafe { Box::from_raw(request) });
        }
        // SAFETY: non-null and writable per the contract.
        unsafe { *done = c_int::from(complete) };
        outcome.map(|_| ()).map_err(CError::from)
    })
}

/// Completes `request` (waits for live peers as long as they take; fails
/// as the blocking collective would) and frees it; its result, where it
/// has one here, into `out`.
///
/// # Safety
/// As [`mcd_request_test`].
#[no_mangle]
pub unsafe extern "C" fn mcd_request_wait(request: *mut Request, out: *mut c_void) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { request_handle(request) }?;
        // SAFETY: forwarded contract on `out`.
        let buffer = unsafe { result_buffer(r, out) };
        let outcome = r.request.wait(buffer);
        // SAFETY: from Box::into_raw in mcd_istart; not used again.
        drop(unsafe { Box::from_raw(request) });
        Ok(outcome?)
    })
}

/// As [`mcd_request_wait`], for at most about `timeout_us` microseconds
/// (sleeping in the transport meanwhile): `*done` becomes 1 once the
/// request is complete (its result into `out`) and it is freed, else 0
/// (call again). On an error the request is freed too. For a caller that
/// must drive something else between two such waits (an MPI's own
/// progress) without spinning on the cores the peers need.
///
/// # Safety
/// As [`mcd_request_test`].
#[no_mangle]
pub unsafe extern "C" fn mcd_request_wait_for(request: *mut Request, out: *mut c_void, timeout_us: u32, done: *mut c_int) -> c_int {
    let timeout = std::time::Duration::from_micros(u64::from(timeout_us));
    // SAFETY: forwarded contract.
    unsafe { progress(request, out, done, "mcd_request_wait_for", |r, buffer| r.wait_for(buffer, timeout)) }
}

/// Frees `request` without its result: the collective still runs (the
/// other ranks count on it), its result is dropped.
///
/// # Safety
/// `request` is NULL or a live request, not used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_request_free(request: *mut Request) -> c_int {
    guarded(|| {
        if request.is_null() {
            return Err(argument("the request is NULL"));
        }
        // SAFETY: from Box::into_raw in mcd_istart; not used again.
        drop(unsafe { Box::from_raw(request) });
        Ok(())
    })
}
