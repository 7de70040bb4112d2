//! Descriptors to wait on: duplicates of a socket's descriptor, an `eventfd`
//! to wake a waiter, and `ppoll` over a few of them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A second descriptor of the same open socket or file (close-on-exec).
pub fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC reads no memory.
    let new = syscall!(fcntl(fd, libc::F_DUPFD_CLOEXEC, 0))?;
    // SAFETY: `new` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// An `eventfd`: a counter another thread can make readable, to wake a poll.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A non-blocking, close-on-exec eventfd at 0.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers.
        let fd = syscall!(eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Makes it readable.
    pub fn signal(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer.
        match syscall!(write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len())) {
            // EAGAIN: the counter is saturated, so it is readable already.
            Err(err) if err.kind() != io::ErrorKind::WouldBlock => Err(err),
            _ => Ok(()),
        }
    }

    /// Resets it to 0; true if it had been signalled.
    pub fn clear(&self) -> bool {
        let mut value = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer.
        matches!(syscall!(read(self.fd.as_raw_fd(), value.as_mut_ptr().cast(), value.len())), Ok(8))
    }

    /// The descriptor, for [`poll_readable`].
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The most descriptors [`poll_readable`] watches at once.
pub const POLL_MAX: usize = 16;

/// Waits until one of `fds` (at most [`POLL_MAX`]) is readable or `timeout`
/// passes (`None`: forever). Returns whether any was readable. EINTR counts
/// as "not yet".
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<bool> {
    let mut pollfds: [libc::pollfd; POLL_MAX] = [libc::pollfd { fd: -1, events: 0, revents: 0 }; POLL_MAX];
    let n = fds.len().min(pollfds.len());
    for (p, &fd) in pollfds.iter_mut().zip(fds) {
        *p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    }
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pollfds holds n valid entries; ts_ptr is null or points to a live timespec.
    match syscall!(ppoll(pollfds.as_mut_ptr(), n as libc::nfds_t, ts_ptr, std::ptr::null())) {
        Ok(ready) => Ok(ready > 0),
        Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_wakes_a_poll_until_cleared() {
        let event = EventFd::new().unwrap();
        assert!(!poll_readable(&[event.raw_fd()], Some(Duration::ZERO)).unwrap());
        event.signal().unwrap();
        let copy = dup(event.raw_fd()).unwrap();
        assert!(poll_readable(&[copy.as_raw_fd()], Some(Duration::ZERO)).unwrap());
        assert!(event.clear());
        assert!(!event.clear());
        assert!(!poll_readable(&[event.raw_fd()], Some(Duration::ZERO)).unwrap());
    }
}
