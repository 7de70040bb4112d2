//! The C functions on a group: create it (or prepare, then join), its
//! barrier, its queries, its end. Each is its job twin's generic function
//! (see the module `ffi`), on a group.

use std::ffi::{c_char, c_int};

use super::job::handle;
use super::{algorithm, end, get_stats, guarded, guarded_count, put, test, why};
use crate::error::{argument, MCD_OK};
use crate::{mcd_stats, CError, Communicator, Group, Job};
// The C functions and types the docs name.
#[cfg(doc)]
use crate::*;

/// A group handle argument.
///
/// # Safety
/// `group` is NULL or a handle from `mcd_group_create` not yet freed.
pub(super) unsafe fn group_handle<'a>(group: *mut Group) -> Result<&'a mut Group, CError> {
    // SAFETY: per the caller's guarantee, a live, exclusively used handle.
    unsafe { group.as_mut() }.ok_or_else(|| argument("the group handle is NULL"))
}

/// The rank list argument of the group constructors.
///
/// # Safety
/// `ranks` is NULL or points to `n` ints.
unsafe fn rank_list(ranks: *const c_int, n: c_int, what: &str) -> Result<Vec<usize>, CError> {
    if ranks.is_null() || n <= 0 {
        return Err(argument(format!("{what}: `ranks` is NULL or `n` is not positive")));
    }
    // SAFETY: ranks points to n ints per the contract.
    let list = unsafe { std::slice::from_raw_parts(ranks, n as usize) };
    list.iter().map(|&r| usize::try_from(r).map_err(|_| argument(format!("{what}: rank {r} is negative")))).collect()
}

/// Creates a barrier over the job's ranks `ranks[0..n]` (this rank among
/// them; group rank i is job rank `ranks[i]`) and stores its handle in
/// `*out` (NULL on failure). It shares the job's endpoint: no discovery.
/// Collective over the group's ranks only, with the same list on every one;
/// ranks in several groups create them in the same order (else use
/// [`mcd_group_prepare`] with an agreed key). Each group is its own barrier
/// instance: frames of one never count in another, even for groups with the
/// same ranks. The same as [`mcd_group_prepare`] with key 0, then
/// [`mcd_group_join`].
///
/// # Safety
/// `job` is NULL or a live handle; `ranks` is NULL or points to `n` ints;
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_create(job: *mut Job, ranks: *const c_int, n: c_int, out: *mut *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    let rc = unsafe { mcd_group_prepare(job, ranks, n, 0, out) };
    if rc != MCD_OK {
        return rc;
    }
    // SAFETY: `*out` is the handle just made (out is writable, hence readable).
    let group = unsafe { *out };
    // SAFETY: a live handle, used by this thread only.
    let rc = unsafe { mcd_group_join(group) };
    if rc != MCD_OK {
        // SAFETY: as above; the handle is freed and `*out` cleared.
        unsafe {
            drop(Box::from_raw(group));
            *out = std::ptr::null_mut();
        }
    }
    rc
}

/// The local half of [`mcd_group_create`]: sets up a group over the job's
/// ranks `ranks[0..n]` without any communication and stores its handle in
/// `*out` (NULL on failure); [`mcd_group_join`] then meets the members. In
/// between, the caller can agree with the members (an MPI allreduce, say)
/// that every one of them prepared, so that no member waits in the join
/// for one that failed here (out of file descriptors or threads).
///
/// `key`: a number every member passes alike and no other group of these
/// ranks has used (the communicator's first rank makes one from its rank
/// and a count, and broadcasts it, say); then members may create their groups in any order,
/// from several threads at once. 0: keyed by creation order, as
/// [`mcd_group_create`].
///
/// # Safety
/// As [`mcd_group_create`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_prepare(job: *mut Job, ranks: *const c_int, n: c_int, key: u64, out: *mut *mut Group) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        unsafe { put(out, std::ptr::null_mut(), "mcd_group_prepare", "out") }?;
        // SAFETY: forwarded contract.
        let list = unsafe { rank_list(ranks, n, "mcd_group_prepare") }?;
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        let group = Box::new(job.prepare(&list, (key != 0).then_some(key))?);
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(group) };
        Ok(())
    })
}

/// Meets the members of a group from [`mcd_group_prepare`] (collective over
/// them; waits up to `MCD_JOIN_TIMEOUT` seconds, default 30). After it the
/// group serves barriers. On failure, free the handle.
///
/// # Safety
/// `group` is NULL or a live handle, not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_join(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { group_handle(group) }?.join())
}

/// One barrier across the group.
///
/// # Safety
/// `group` is NULL or a live handle, not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_barrier(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { group_handle(group) }?.wait())
}

/// Enters the group's next barrier without waiting (split phase).
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_enter(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { group_handle(group) }?.enter())
}

/// As [`mcd_barrier_test`], for a group.
///
/// # Safety
/// As [`mcd_group_barrier`]; `done` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_test(group: *mut Group, done: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { test(group_handle(group)?, done, "mcd_group_test") })
}

/// Completes the group's entered barrier (enters one first if none is).
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_wait(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { mcd_group_barrier(group) }
}

/// This process's rank in the group, or a negative error code.
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_rank(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| Ok(unsafe { group_handle(group) }?.rank()))
}

/// The group's size, or a negative error code.
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_size(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| Ok(unsafe { group_handle(group) }?.size()))
}

/// The group barrier's algorithm, valid until the group is freed; NULL for
/// a NULL handle.
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_algorithm(group: *mut Group) -> *const c_char {
    // SAFETY: forwarded contract.
    algorithm(unsafe { group.as_mut() })
}

/// [`mcd_why`] for a group.
///
/// # Safety
/// As [`mcd_group_barrier`]; `buf` is NULL (with `len` 0) or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_why(group: *mut Group, buf: *mut c_char, len: usize) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| unsafe { why(group_handle(group)?, buf, len) })
}

/// Copies the group's counters into `*out` (the frame counters are the
/// shared endpoint's).
///
/// # Safety
/// As [`mcd_group_barrier`]; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_get_stats(group: *mut Group, out: *mut mcd_stats) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { get_stats(group_handle(group)?, out, "mcd_group_get_stats") })
}

/// Ends the group's barrier and frees the handle (NULL is fine), without
/// waiting: enters the group's closing barrier and hands it to the job,
/// whose calls finish it once every member has closed too (its progress
/// agent answers them meanwhile), and [`mcd_finalize`] at the latest.
/// Collective over the group, like MPI_Comm_free, but no member waits here
/// for another: members may free their groups in any order. The handle is
/// freed even on error.
///
/// # Safety
/// `group` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_free(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { end(group, Group::close) }
}

/// Frees the group handle (NULL is fine) without the closing barrier.
///
/// # Safety
/// `group` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_discard(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { end(group, |_| Ok(())) }
}
