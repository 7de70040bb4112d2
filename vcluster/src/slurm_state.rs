//! A cluster's Slurm as the machine holds it: its directory and its
//! daemons, found and stopped by the cluster's name alone. Taking a cluster
//! down ([`crate::Cluster::down`]) stops them without a [`crate::slurm::Slurm`],
//! so the cluster needs this module and not the one that runs Slurm (which
//! needs the cluster).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where each cluster's Slurm directory (`NAME/`) lives: configuration,
/// state, spool, pid files and logs. Not under /tmp, which is private to
/// each slurmd.
pub const SLURM_DIR: &str = "/run/mcd-slurm";

/// The Slurm directory of cluster `name`.
pub fn dir_of(name: &str) -> PathBuf {
    Path::new(SLURM_DIR).join(name)
}

/// Process ids of Slurm daemons and step daemons inside the namespaces of
/// cluster `name` (`ip netns pids`), and those in its pid files.
fn slurm_pids(name: &str) -> Vec<i32> {
    let dir = dir_of(name);
    let mut pids: Vec<i32> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".pid")))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect();
    for pid in crate::commands::pids_in_namespaces(name) {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.starts_with("slurm") {
            pids.push(pid);
        }
    }
    pids.sort();
    pids.dedup();
    pids.retain(|&p| p > 1 && mcd::host::process_exists(p));
    pids
}

/// Stops the Slurm daemons of cluster `name` (TERM, then KILL after 5 s)
/// and removes its Slurm directory. Fine if it never had one.
pub fn cleanup(name: &str) {
    crate::commands::end_processes(&slurm_pids(name), Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir_of(name));
}

/// What is left of cluster `name`'s Slurm: live daemons and its directory.
pub fn leftovers(name: &str) -> Vec<String> {
    let mut found: Vec<String> = slurm_pids(name).iter().map(|p| format!("slurm process {p}")).collect();
    if dir_of(name).exists() {
        found.push(dir_of(name).display().to_string());
    }
    found
}
