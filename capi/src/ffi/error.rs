//! The errors at the boundary: every call's error or panic becomes a code,
//! and its text the calling thread's last error.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::*;
use crate::CError;

/// A fixed description of an error code.
#[no_mangle]
pub extern "C" fn mcd_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        MCD_OK => c"success",
        MCD_ERR_ARGUMENT => c"invalid argument",
        MCD_ERR_CONFIG => c"invalid configuration",
        MCD_ERR_PERMISSION => c"no permission for raw sockets (grant CAP_NET_RAW or run as root)",
        MCD_ERR_INTERFACE => c"no such network interface",
        MCD_ERR_BOOTSTRAP => c"the ranks did not all find each other",
        MCD_ERR_BARRIER => c"a barrier failed: a peer stopped answering",
        MCD_ERR_SYSTEM => c"a system call failed",
        MCD_ERR_INTERNAL => c"internal error in mcd",
        MCD_ERR_MISMATCH => c"the ranks called different collectives",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// The full text of the calling thread's last error (empty if none), valid
/// until the thread's next failing call.
#[no_mangle]
pub extern "C" fn mcd_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn remember(message: &str) {
    let text = CString::new(message.replace('\0', " ")).expect("NULs replaced");
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `f`, turning its error or a panic into a code and remembering the text.
pub(super) fn guarded(f: impl FnOnce() -> Result<(), CError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => MCD_OK,
        Ok(Err(e)) => {
            remember(&e.message);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            remember(&format!("internal error in mcd (please report): {what}"));
            MCD_ERR_INTERNAL
        }
    }
}
