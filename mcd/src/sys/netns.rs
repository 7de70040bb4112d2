//! Network namespaces.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The inode of the calling thread's network namespace: two threads are in the
/// same namespace exactly when these are equal.
pub fn current_netns_id() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// While alive, the calling thread is in another network namespace; dropping
/// it (or [`leave`](Self::leave)) returns the thread to the namespace it came
/// from. Sockets opened meanwhile stay in the namespace they were opened in.
#[derive(Debug)]
pub struct NetnsGuard {
    previous: File,
    /// Already back (by `leave`).
    left: bool,
    // The guard must be dropped on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl NetnsGuard {
    /// Moves the calling thread into the namespace at `path` (e.g.
    /// `/var/run/netns/NAME`). Needs CAP_SYS_ADMIN.
    pub fn enter(path: &Path) -> io::Result<NetnsGuard> {
        let previous = File::open("/proc/thread-self/ns/net")?;
        let target = File::open(path)?;
        // SAFETY: takes no pointers; target is a live descriptor.
        syscall!(setns(target.as_raw_fd(), libc::CLONE_NEWNET))?;
        Ok(NetnsGuard { previous, left: false, _not_send: std::marker::PhantomData })
    }

    /// Returns the thread to the namespace it came from, reporting a failure
    /// (which leaves the thread where it is). Dropping the guard does the same
    /// but cannot report.
    pub fn leave(mut self) -> io::Result<()> {
        self.left = true;
        self.go_back()
    }

    fn go_back(&self) -> io::Result<()> {
        // SAFETY: takes no pointers; previous is a live descriptor.
        syscall!(setns(self.previous.as_raw_fd(), libc::CLONE_NEWNET)).map(drop)
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if !self.left {
            // Cannot fail with a namespace descriptor we opened ourselves,
            // short of losing CAP_SYS_ADMIN meanwhile; `leave` reports it.
            let _ = self.go_back();
        }
    }
}
