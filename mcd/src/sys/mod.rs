//! Every `unsafe` block and raw system call of the crate, behind safe types,
//! one module per concern:
//!
//! - [`socket`]: the `AF_PACKET` socket (options, filter, bind, membership,
//!   plain sends and receives);
//! - [`ring`]: its mmap'd TPACKET_V2 receive and send rings;
//! - [`event`]: descriptors to wait on — `dup`, `eventfd`, `ppoll`;
//! - [`iface`]: interface queries (index, MAC, MTU, names);
//! - [`lock`]: POSIX record locks;
//! - [`netns`]: network namespaces;
//! - [`affinity`]: CPU affinity;
//! - [`process`]: credentials, signals, descriptors a child inherits;
//! - [`shm`]: shared memory between a host's processes, and futexes.
//!
//! This module is the bottom of the crate: it imports no other module of it
//! (no wire or filter types), and no other module names `libc`. Every system
//! call that reports failure by a negative return goes through [`syscall!`].
#![warn(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

use std::io;

/// Calls `libc::$name(args...)` and turns a negative return (`int` or
/// `ssize_t`) into the thread's `errno` as an [`io::Error`]. The call is
/// unsafe: each use says above it, in a `SAFETY:` comment, why its arguments
/// are valid.
macro_rules! syscall {
    ($name:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: the caller's `SAFETY:` comment covers the arguments.
        let ret = unsafe { libc::$name($($arg),*) };
        $crate::sys::check(ret)
    }};
}

mod affinity;
mod event;
mod iface;
mod lock;
mod netns;
mod process;
mod ring;
mod shm;
mod socket;

pub use affinity::pin_current_thread;
pub use event::{dup, poll_readable, EventFd, POLL_MAX};
pub use iface::{interface_info, interface_names};
pub use lock::{record_lock_holder, try_flock_exclusive, try_lock_record, try_read_lock_record, RecordHolder};
pub use netns::{current_netns_id, NetnsGuard};
pub use process::{close_inherited_descriptors_on_exec, effective_uid, effective_uid_is_root, monotonic_clock, process_exists, signal_end};
pub use ring::{RingGeometry, Rings, RxFrame, TxStatus};
pub use shm::{futex_wait, futex_wake, SharedLayout, SharedMapping};
#[cfg(feature = "test-support")]
pub use socket::OUTGOING;
pub use socket::{BpfInsn, PacketSocket, ALL_PROTOCOLS};

/// `open` flag: fail on a symbolic link instead of following it.
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// A system call's return value whose negative values mean failure.
pub trait SysReturn: Copy {
    /// Whether the call failed.
    fn failed(self) -> bool;
}

impl SysReturn for libc::c_int {
    fn failed(self) -> bool {
        self < 0
    }
}

#[cfg(target_pointer_width = "64")]
impl SysReturn for libc::c_long {
    fn failed(self) -> bool {
        self < 0
    }
}

impl SysReturn for libc::ssize_t {
    fn failed(self) -> bool {
        self < 0
    }
}

/// `ret`, or the thread's `errno` if `ret` says the call failed.
pub fn check<T: SysReturn>(ret: T) -> io::Result<T> {
    if ret.failed() {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Whether a send failed because the egress path dropped the frame
/// (`ENOBUFS`: a full queue or a dropping filter) — lost, as on a wire.
pub fn dropped_on_egress(err: &io::Error) -> bool {
    err.raw_os_error() == Some(libc::ENOBUFS)
}

/// Whether a send-ring kick was refused for now (`ENOBUFS`, `EAGAIN`): the
/// kernel left the frames marked, and the next kick sends them.
pub fn refused_for_now(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::EAGAIN))
}
