//! Processes: this one's credentials, signals to others, and descriptors a
//! child must not inherit.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Whether this process runs with effective user id 0.
pub fn effective_uid_is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether process `pid` exists (signal 0: nothing is sent).
pub fn process_exists(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that `pid` can be signalled.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

/// Asks process `pid` to end (SIGTERM), or ends it (SIGKILL) if `force`.
pub fn signal_end(pid: i32, force: bool) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no such process id {pid}")));
    }
    let signal = if force { libc::SIGKILL } else { libc::SIGTERM };
    // SAFETY: `pid` is a single positive process id and `signal` a valid signal.
    syscall!(kill(pid, signal)).map(drop)
}

/// Makes `cmd`'s child close, when it execs, every descriptor beyond
/// standard input, output and error that the parent did not mark
/// close-on-exec (a lock file's, say), so a daemon it starts holds none.
pub fn close_inherited_descriptors_on_exec(cmd: &mut Command) {
    let hook = || {
        // SAFETY: sysconf and fcntl are async-signal-safe and take plain
        // integers; descriptors that are not open make fcntl fail harmlessly.
        let max = match unsafe { libc::sysconf(libc::_SC_OPEN_MAX) } {
            n if n > 0 => n.min(65_536) as libc::c_int,
            _ => 4096,
        };
        for fd in 3..max {
            // SAFETY: as above.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                // SAFETY: as above.
                unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and calls only
    // async-signal-safe functions (sysconf, fcntl); it allocates nothing.
    unsafe { cmd.pre_exec(hook) };
}

/// The time on `CLOCK_MONOTONIC`: one clock for every process (and network
/// namespace) of the machine, so processes can compare their times.
pub fn monotonic_clock() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a live timespec to fill; CLOCK_MONOTONIC always exists.
    syscall!(clock_gettime(libc::CLOCK_MONOTONIC, &mut ts)).expect("CLOCK_MONOTONIC");
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
