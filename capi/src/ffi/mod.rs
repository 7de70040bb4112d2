//! The `extern "C"` functions: null checks, C strings, error codes, and a
//! `catch_unwind` around every call, so that nothing unwinds into C. The
//! only module where `unsafe` is allowed. A C function on a job and its
//! twin on a group are one generic function here, over [`Communicator`].
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr};

use crate::error::{argument, MCD_OK};
use crate::{mcd_stats, CError, Communicator};

// In the header's order (cbindgen follows the modules).
mod secret;

mod job;

mod collective;

mod group;

mod error;

#[cfg(test)]
mod tests;

pub use collective::*;
use error::guarded;
pub use error::*;
pub use group::*;
pub use job::*;
pub use secret::*;

/// `f`'s number as a C int, or a negative error code (as [`guarded`]).
fn guarded_count(f: impl FnOnce() -> Result<usize, CError>) -> c_int {
    let mut value = 0;
    let rc = guarded(|| {
        value = f()? as c_int;
        Ok(())
    });
    if rc == MCD_OK {
        value
    } else {
        rc
    }
}

/// A C string argument: `None` for NULL, an error if not UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn c_str(p: *const c_char, what: &str) -> Result<Option<String>, CError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(|s| Some(s.to_string())).map_err(|_| argument(format!("{what} is not UTF-8")))
}

/// Writes `value` to the out-pointer `out` (of the function `name`).
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn put<T>(out: *mut T, value: T, name: &str, what: &str) -> Result<(), CError> {
    if out.is_null() {
        return Err(argument(format!("{name}: `{what}` is NULL")));
    }
    // SAFETY: non-null and writable per the contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Takes back a handle from `Box::into_raw` and ends it with `end` (NULL
/// is fine: nothing to do).
///
/// # Safety
/// `handle` is NULL or a live handle of this type, never used again.
unsafe fn end<T>(handle: *mut T, end: impl FnOnce(T) -> Result<(), CError>) -> c_int {
    guarded(|| {
        if handle.is_null() {
            return Ok(());
        }
        // SAFETY: a handle from Box::into_raw, given back exactly once.
        end(*unsafe { Box::from_raw(handle) })
    })
}

/// The barrier test of a job or a group: `*done` becomes 1 once the
/// entered barrier is complete, else 0.
///
/// # Safety
/// `done` is NULL or writable.
unsafe fn test(mut c: impl Communicator, done: *mut c_int, name: &str) -> Result<(), CError> {
    if done.is_null() {
        return Err(argument(format!("{name}: `done` is NULL")));
    }
    let complete = c.test()?;
    // SAFETY: forwarded contract.
    unsafe { put(done, c_int::from(complete), name, "done") }
}

/// The counters of a job or a group into `*out`.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn get_stats(mut c: impl Communicator, out: *mut mcd_stats, name: &str) -> Result<(), CError> {
    if out.is_null() {
        return Err(argument(format!("{name}: `out` is NULL")));
    }
    let stats = c.stats()?;
    // SAFETY: forwarded contract.
    unsafe { put(out, stats, name, "out") }
}

/// The algorithm's name of a job or a group (NULL for none), valid while
/// it lives.
fn algorithm(c: Option<impl Communicator>) -> *const c_char {
    c.map_or(std::ptr::null(), |c| c.algorithm().as_ptr())
}

/// Why a job or a group runs its algorithms ([`Communicator::why`]),
/// written to `buf` as `snprintf` would: its full length in bytes (without
/// the NUL).
///
/// # Safety
/// `buf` is NULL (with `len` 0) or writable for `len` bytes.
unsafe fn why(c: impl Communicator, buf: *mut c_char, len: usize) -> Result<usize, CError> {
    let text = c.why();
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `buf` is writable for `len` > `n` bytes (the caller's
        // contract), and `text` readable for `n`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n) = 0;
        }
    }
    Ok(text.len().min(c_int::MAX as usize))
}
