//! Port ownership: each of a device's 256 ports is held by exactly one
//! endpoint on the host.
//!
//! Between processes, a port is held through an exclusive POSIX record lock on
//! a lock file named after the network namespace, the interface and the port,
//! in the endpoint's [`port_dir`](crate::EndpointConfig::port_dir)
//! (`MCD_PORT_DIR` from the environment, default [`DEFAULT_PORT_DIR`]). The kernel releases it when
//! the holder exits, even on a crash, so a port is never left held by a dead
//! process; and unlike `flock`, a child that another thread forks does not
//! share it. Within a process, a registry of held lock files keeps two
//! endpoints off one port (record locks do not conflict within a process).
//! The error names the holder's pid.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::node::Port;
use crate::{sys, Error, Result};

/// Environment variable naming the lock directory (read by
/// [`EndpointConfig::from_env`](crate::EndpointConfig::from_env) and the bootstrap).
pub const ENV_PORT_DIR: &str = "MCD_PORT_DIR";
/// The lock directory when none is configured.
pub const DEFAULT_PORT_DIR: &str = "/tmp/mcd-ports";
/// The lock files this process holds.
static HELD: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// How many endpoints hold ports on this host now, in every process and
/// network namespace (an endpoint with several rails counts once), in the
/// lock directory `dir`: the mcd processes that share this host's cores,
/// seen without any hint.
pub fn endpoints_on_host(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let ours = HELD.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut endpoints = BTreeSet::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".lock")) else { continue };
        // "<netns>-<interface>-<port>": one endpoint per (netns, port).
        let (Some((netns, _)), Some((_, port))) = (name.split_once('-'), name.rsplit_once('-')) else { continue };
        // Never open a file this process locks: closing any descriptor of it
        // would release our lock (POSIX record locks are per process).
        let held = ours.contains(&path) || File::open(&path).ok().is_some_and(|f| matches!(sys::record_lock_holder(&f), Ok(Some(_))));
        if held {
            endpoints.insert((netns.to_string(), port.to_string()));
        }
    }
    endpoints.len()
}

/// A held port; dropping it releases the port.
#[derive(Debug)]
pub struct PortLock {
    _file: File,
    path: PathBuf,
}

impl PortLock {
    /// Takes `port` on `interface` (of the calling thread's network namespace)
    /// through a lock file in `dir`, or fails with [`Error::PortHeld`] naming
    /// the holder.
    pub fn acquire(dir: &Path, interface: &str, port: Port) -> Result<PortLock> {
        let io = |what: &str, source| Error::Io { what: format!("{what} for port {port} on {interface}"), source };
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(|e| io("creating the port lock directory", e))?;
            // Every user's endpoints lock here; the sticky bit keeps files apart.
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
        }
        let netns = sys::current_netns_id().map_err(|e| io("reading the network namespace", e))?;
        let path = dir.join(format!("{netns}-{interface}-{port}.lock"));
        let held = |holder: String| Error::PortHeld { port, interface: interface.to_string(), holder, lock: path.display().to_string() };
        let mut registry = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if registry.contains(&path) {
            return Err(held(format!("process {} (this process, through another endpoint)", std::process::id())));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(&path)
            .map_err(|e| io(&format!("opening lock file {}", path.display()), e))?;
        if let Some(pid) = sys::try_lock_record(&file).map_err(|e| io("locking", e))? {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            return Err(held(match (pid, name.trim()) {
                (0, _) => "another process".to_string(),
                (pid, "") => format!("process {pid}"),
                (pid, name) => format!("process {pid} ({name})"),
            }));
        }
        registry.insert(path.clone());
        drop(registry);
        Ok(PortLock { _file: file, path })
    }
}

impl Drop for PortLock {
    fn drop(&mut self) {
        // The record lock goes when the file closes, right after this.
        HELD.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_port_is_refused_with_its_holder_until_released() {
        let dir = std::env::temp_dir().join(format!("mcd-port-test-{}", std::process::id()));
        let first = PortLock::acquire(&dir, "lo", 200).unwrap();
        let err = PortLock::acquire(&dir, "lo", 200).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::PortHeld { port: 200, .. }), "{msg}");
        assert!(msg.contains(&format!("process {}", std::process::id())), "{msg}");
        let other = PortLock::acquire(&dir, "lo", 201).unwrap();
        assert!(other.path.to_string_lossy().ends_with("-lo-201.lock"), "{}", other.path.display());
        drop(first);
        let again = PortLock::acquire(&dir, "lo", 200).unwrap();
        assert_eq!(endpoints_on_host(&dir), 2, "ports 200 and 201 of this namespace");
        drop(again);
        drop(other);
        assert_eq!(endpoints_on_host(&dir), 0);
        let _ = std::fs::remove_dir_all(dir);
    }
}
