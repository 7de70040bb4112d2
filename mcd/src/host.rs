//! Host utilities that tools and tests need around endpoints: entering a
//! network namespace (the virtual cluster's nodes), pinning a thread to a core,
//! counting cores, and the few process operations the virtual cluster's
//! daemons need (so that no crate above mcd writes `unsafe`).

pub use crate::sys::{close_inherited_descriptors_on_exec, effective_uid_is_root, monotonic_clock, process_exists, signal_end};

use std::io;
use std::path::Path;

pub use crate::sys::NetnsGuard;

/// Moves the calling thread into the named network namespace (as created by
/// `ip netns add NAME`) until the guard drops. Endpoints opened meanwhile
/// stay in that namespace.
pub fn enter_netns(name: &str) -> io::Result<NetnsGuard> {
    NetnsGuard::enter(&Path::new("/var/run/netns").join(name))
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    crate::sys::pin_current_thread(cpu)
}

/// Number of CPUs this process may run on: its cpuset (affinity) and cgroup
/// quota, not merely the CPUs online.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
