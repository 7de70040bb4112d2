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
//!
//! The directory holds only the ports held now, so that reading the host's
//! load ([`endpoints_on_host`], at every join) costs what the live
//! endpoints cost, however long the host has been used (it once held 3,166
//! files, from every port ever taken, and each read opened them all):
//! - a holder removes its lock file when it releases the port, while it
//!   still holds the lock;
//! - a file left by a crashed holder is removed by the next reading of the
//!   load: under the directory's `flock` (one pruner at a time) and a read
//!   lock on the file (no process holds it, nor can take it meanwhile);
//! - so a process that locks a file checks that the name still leads to
//!   that file (same device and inode), and opens the name again if not (it
//!   locked a file removed in between); one that finds a file read-locked
//!   (by a pruner, for a moment) tries again; only a write lock is a holder.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::node::Port;
use crate::sys::RecordHolder;
use crate::{sys, Error, Result};

/// Environment variable naming the lock directory (read by
/// [`EndpointConfig::from_env`](crate::EndpointConfig::from_env) and the bootstrap).
pub const ENV_PORT_DIR: &str = "MCD_PORT_DIR";
/// The lock directory when none is configured.
pub const DEFAULT_PORT_DIR: &str = "/tmp/mcd-ports";
/// The lock files this process holds. Taken for the whole of an acquire, a
/// release's removal and a scan of the directory: record locks do not
/// conflict within a process, so these must not interleave.
static HELD: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
/// How often an acquire opens the lock file again when it was removed or
/// read-locked by a pruner under it, before it gives up; each retry after
/// a pruner's read lock waits [`PRUNER_WAIT`] (a pruner holds a file for a
/// stat and an unlink: microseconds, unless it is descheduled).
const ACQUIRE_TRIES: usize = 2_000;
/// See [`ACQUIRE_TRIES`].
const PRUNER_WAIT: Duration = Duration::from_millis(1);

/// Whether `path` names the file `file` is open on (same device and inode):
/// false once the name was removed, or leads to a newer file.
fn names(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => named.dev() == open.dev() && named.ino() == open.ino(),
        _ => false,
    }
}

/// How many endpoints hold ports on this host now, in every process and
/// network namespace (an endpoint with several rails counts once), in the
/// lock directory `dir`: the mcd processes that share this host's cores,
/// seen without any hint. Removes the lock files no process holds (left by
/// holders that crashed), unless another process is removing them now.
pub fn endpoints_on_host(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    // One pruner at a time on the host (two could each find a file stale,
    // and the second remove the file a new holder made after the first).
    let pruner = File::open(dir).ok().filter(|d| matches!(sys::try_flock_exclusive(d), Ok(true)));
    let ours = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let mut endpoints = BTreeSet::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".lock")) else { continue };
        // "<netns>-<interface>-<port>": one endpoint per (netns, port).
        let (Some((netns, _)), Some((_, port))) = (name.split_once('-'), name.rsplit_once('-')) else { continue };
        // Never open a file this process locks: closing any descriptor of it
        // would release our lock (POSIX record locks are per process).
        let held = ours.contains(&path)
            || File::open(&path).ok().is_some_and(|f| {
                if pruner.is_none() {
                    return matches!(sys::record_lock_holder(&f), Ok(Some(RecordHolder::Writer(_))));
                }
                match sys::try_read_lock_record(&f) {
                    // No process holds it, and none can take it while we
                    // read-lock it: stale. Removed only if the name still
                    // leads to it (a holder may have removed it and another
                    // made a new one since we opened it).
                    Ok(true) => {
                        if names(&path, &f) {
                            let _ = std::fs::remove_file(&path);
                        }
                        false
                    }
                    Ok(false) => true,
                    Err(_) => false,
                }
            });
        if held {
            endpoints.insert((netns.to_string(), port.to_string()));
        }
    }
    endpoints.len()
}

/// A held port; dropping it releases the port and removes its lock file.
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
        for _ in 0..ACQUIRE_TRIES {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o666)
                .open(&path)
                .map_err(|e| io(&format!("opening lock file {}", path.display()), e))?;
            match sys::try_lock_record(&file).map_err(|e| io("locking", e))? {
                // Ours, unless its holder or a pruner removed it after we
                // opened it: then the port's lock file is another.
                Ok(()) if names(&path, &file) => {
                    registry.insert(path.clone());
                    drop(registry);
                    return Ok(PortLock { _file: file, path });
                }
                Ok(()) | Err(None) => continue,
                Err(Some(RecordHolder::Reader(_))) => std::thread::sleep(PRUNER_WAIT),
                Err(Some(RecordHolder::Writer(pid))) => {
                    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                    return Err(held(match (pid, name.trim()) {
                        (0, _) => "another process".to_string(),
                        (pid, "") => format!("process {pid}"),
                        (pid, name) => format!("process {pid} ({name})"),
                    }));
                }
            }
        }
        Err(held(format!("another process (the lock file kept changing under {ACQUIRE_TRIES} tries)")))
    }
}

impl Drop for PortLock {
    fn drop(&mut self) {
        // Removed while still locked (the record lock goes when the file
        // closes, right after this), so that whoever opened it meanwhile
        // finds its name gone and opens the name again. A file this user
        // may not remove (another's, in the sticky directory) stays, for a
        // pruner that may.
        let mut registry = HELD.lock().unwrap_or_else(|e| e.into_inner());
        let _ = std::fs::remove_file(&self.path);
        registry.remove(&self.path);
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

    fn lock_files(dir: &Path) -> BTreeSet<String> {
        let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
        names.filter(|n| n.ends_with(".lock")).collect()
    }

    #[test]
    fn released_ports_leave_no_lock_file_and_reading_the_load_removes_those_of_dead_holders() {
        let dir = std::env::temp_dir().join(format!("mcd-port-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // What crashed holders leave: files no process locks, of namespaces
        // long gone (a host's /tmp/mcd-ports held 3,166).
        for i in 0..300 {
            File::create(dir.join(format!("{}-eth{}-{}.lock", 1_000 + i / 256, i % 7, i % 256))).unwrap();
        }
        let first = PortLock::acquire(&dir, "lo", 200).unwrap();
        let second = PortLock::acquire(&dir, "lo", 201).unwrap();
        drop(second);
        let netns = sys::current_netns_id().unwrap();
        assert!(!lock_files(&dir).contains(&format!("{netns}-lo-201.lock")), "a released port's lock file stays");
        assert_eq!(endpoints_on_host(&dir), 1, "port 200 only");
        assert_eq!(lock_files(&dir), BTreeSet::from([format!("{netns}-lo-200.lock")]), "the dead holders' files stay");
        drop(first);
        assert!(lock_files(&dir).is_empty(), "{:?}", lock_files(&dir));
        assert_eq!(endpoints_on_host(&dir), 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Set in the child processes of the test below: the lock directory.
    const CHILD_DIR: &str = "MCD_PORT_TEST_CHILD_DIR";

    #[test]
    fn processes_taking_releasing_and_pruning_at_once_never_hold_a_port_twice() {
        if let Some(dir) = std::env::var_os(CHILD_DIR) {
            return take_release_and_prune(Path::new(&dir));
        }
        let dir = std::env::temp_dir().join(format!("mcd-port-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let name = "port::tests::processes_taking_releasing_and_pruning_at_once_never_hold_a_port_twice";
        let children: Vec<_> = (0..4)
            .map(|_| {
                let mut command = std::process::Command::new(&exe);
                command.args(["--exact", name, "--nocapture", "--test-threads=1"]).env(CHILD_DIR, &dir);
                command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
            })
            .collect();
        let mut taken = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "a child failed: {text}");
            let count = text.lines().find_map(|l| l.split("took ").nth(1)).unwrap_or_else(|| panic!("no count: {text}"));
            taken += count.trim().parse::<usize>().unwrap();
        }
        assert!(taken > 0, "no child ever took a port");
        assert_eq!(endpoints_on_host(&dir), 0);
        assert!(lock_files(&dir).is_empty(), "{:?}", lock_files(&dir));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A child of the test above: takes and releases ports 200 and 201 in a
    /// loop, making stale lock files and reading the load (pruning) between,
    /// and fails if it ever holds a port another process holds too (each
    /// holder makes `held-<port>` exclusively while it holds the port).
    fn take_release_and_prune(dir: &Path) {
        let mut taken = 0;
        for i in 0..150u32 {
            let port = 200 + (i % 2) as Port;
            File::create(dir.join(format!("{}-lo-{}.lock", 7 + i % 3, 210 + i % 5))).unwrap();
            match PortLock::acquire(dir, "lo", port) {
                Ok(lock) => {
                    let marker = dir.join(format!("held-{port}"));
                    if let Err(e) = OpenOptions::new().write(true).create_new(true).open(&marker) {
                        panic!("process {} took port {port}, which another process holds ({e})", std::process::id());
                    }
                    for _ in 0..i % 4 {
                        std::thread::yield_now();
                    }
                    std::fs::remove_file(&marker).unwrap();
                    drop(lock);
                    taken += 1;
                }
                Err(Error::PortHeld { .. }) => {}
                Err(e) => panic!("{e}"),
            }
            if i % 3 == 0 {
                endpoints_on_host(dir);
            }
        }
        println!("took {taken}");
    }
}
