//! Shared memory between the processes of one host, futexes, and process
//! identities: what a host-local barrier is built from.
//!
//! - [`SharedMapping`]: a file (in `/dev/shm`) mapped shared, created
//!   exclusively (`O_EXCL`) or opened, seen through typed layouts of
//!   atomics ([`SharedLayout`], declared with [`crate::shared_layout!`]).
//! - [`futex_wait`] / [`futex_wake`]: sleep on a word of it until another
//!   process changes it and wakes the sleepers.
//! - [`ProcessIdentity`]: a pid with its start time, so that a dead
//!   process is never mistaken for a live one that was given its pid later.

use std::io;

pub use crate::sys::{futex_wait, futex_wake, SharedLayout, SharedMapping};

/// The directory of host-shared memory files.
pub const SHM_DIR: &str = "/dev/shm";

/// A process: its pid and its start time (clock ticks after boot, from
/// `/proc/PID/stat`), which together never name two processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// The start time in clock ticks after boot.
    pub start: u64,
}

/// The state letter and start time of `pid`, from `/proc/PID/stat`.
fn stat_of(pid: u32) -> io::Result<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so
    // fields are counted after the last ')'.
    let rest = text.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| io::Error::other("malformed /proc stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; field 22 (starttime) is fields[19].
    let state = fields.first().and_then(|s| s.chars().next()).ok_or_else(|| io::Error::other("no state in /proc stat"))?;
    let start = fields.get(19).and_then(|s| s.parse().ok()).ok_or_else(|| io::Error::other("no start time in /proc stat"))?;
    Ok((state, start))
}

impl ProcessIdentity {
    /// This process.
    pub fn current() -> io::Result<ProcessIdentity> {
        let pid = std::process::id();
        Ok(ProcessIdentity { pid, start: stat_of(pid)?.1 })
    }

    /// Whether this process still runs: its pid exists, started at the same
    /// time (not a later process given the pid), and is not a zombie (dead,
    /// not yet reaped by its parent).
    pub fn is_alive(&self) -> bool {
        match stat_of(self.pid) {
            Ok((state, start)) => start == self.start && !matches!(state, 'Z' | 'X' | 'x'),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        let me = ProcessIdentity::current().unwrap();
        assert!(me.is_alive());
        assert!(!ProcessIdentity { start: me.start + 1, ..me }.is_alive(), "another start time: another process");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let start = stat_of(child.id()).unwrap().1;
        let identity = ProcessIdentity { pid: child.id(), start };
        assert!(identity.is_alive());
        child.kill().unwrap();
        // Killed but not reaped: a zombie, which counts as dead.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while identity.is_alive() {
            assert!(std::time::Instant::now() < deadline, "killed child still alive");
            std::thread::yield_now();
        }
        child.wait().unwrap();
        assert!(!identity.is_alive());
    }
}
