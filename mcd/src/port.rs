//! Port ownership: each of a device's 256 ports is held by exactly one
//! endpoint on the host.
//!
//! A port is held through an exclusive `flock` on a lock file named after the
//! network namespace, the interface and the port, in `MCD_PORT_DIR` (default
//! `/tmp/mcd-ports`). The kernel releases the lock when the holder exits, even
//! on a crash, so a port is never left held by a dead process. The file records
//! the holder so that the error names it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use crate::node::Port;
use crate::{sys, Error, Result};

/// Environment variable naming the lock directory.
pub const ENV_PORT_DIR: &str = "MCD_PORT_DIR";
/// How long a held port is retried before [`Error::PortHeld`].
const HOLD_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// A held port; dropping it releases the port.
#[derive(Debug)]
pub struct PortLock {
    _file: File,
    port: Port,
}

impl PortLock {
    /// Takes `port` on `interface` (of the calling thread's network namespace),
    /// or fails with [`Error::PortHeld`] naming the holder.
    pub fn acquire(interface: &str, port: Port) -> Result<PortLock> {
        let io = |what: &str, source| Error::Io { what: format!("{what} for port {port} on {interface}"), source };
        let dir = std::env::var_os(ENV_PORT_DIR).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp/mcd-ports"));
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir).map_err(|e| io("creating the port lock directory", e))?;
            // Every user's endpoints lock here; the sticky bit keeps files apart.
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
        }
        let netns = sys::current_netns_id().map_err(|e| io("reading the network namespace", e))?;
        let path = dir.join(format!("{netns}-{interface}-{port}.lock"));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(&path)
            .map_err(|e| io(&format!("opening lock file {}", path.display()), e))?;
        // A lock just released can linger for a moment in a child that another
        // thread is forking (the child shares the open file until it execs),
        // so a held port is retried for a short grace period before giving up.
        let deadline = std::time::Instant::now() + HOLD_GRACE;
        let mut locked = sys::try_lock_exclusive(&file).map_err(|e| io("locking", e))?;
        while !locked && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
            locked = sys::try_lock_exclusive(&file).map_err(|e| io("locking", e))?;
        }
        if !locked {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another endpoint".to_string(),
                h => h.to_string(),
            };
            return Err(Error::PortHeld { port, interface: interface.to_string(), holder });
        }
        let me = format!("process {} ({})", std::process::id(), program_name());
        let _ = file.set_len(0).and_then(|_| file.rewind()).and_then(|_| file.write_all(me.as_bytes()));
        Ok(PortLock { _file: file, port })
    }

    /// The port held.
    pub fn port(&self) -> Port {
        self.port
    }
}

fn program_name() -> String {
    std::env::args().next().map(|a| a.rsplit('/').next().unwrap_or(&a).to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_port_is_refused_with_its_holder_until_released() {
        let dir = std::env::temp_dir().join(format!("mcd-port-test-{}", std::process::id()));
        std::env::set_var(ENV_PORT_DIR, &dir);
        let first = PortLock::acquire("lo", 200).unwrap();
        let err = PortLock::acquire("lo", 200).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::PortHeld { port: 200, .. }), "{msg}");
        assert!(msg.contains(&format!("process {}", std::process::id())), "{msg}");
        let other = PortLock::acquire("lo", 201).unwrap();
        assert_eq!(other.port(), 201);
        drop(first);
        PortLock::acquire("lo", 200).unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
