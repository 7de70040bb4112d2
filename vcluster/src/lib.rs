//! mcd's virtual cluster: N nodes on one machine, each a network namespace
//! with one veth interface per rail, plugged into a Linux bridge per rail
//! that acts as a switch or a repeater hub, with loss injected by nftables
//! ([`Cluster`], [`ClusterSpec`]); and a real Slurm on it ([`slurm`]).
//!
//! It knows mcd's node list and environment (what a process on a node
//! gets), and nothing of MPI or of the benchmarks: those run programs on a
//! cluster through [`Cluster::command`] and [`Collected`]
//! (`mcd_tools::mpi` launches MPI on it; `mcd_bench` measures on it).
//! Everything here needs root.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod cluster;
mod commands;
pub mod slurm;
mod slurm_state;

pub use cluster::*;
pub use commands::links_holding;

/// The name a test or a benchmark gives cluster `name`: `name` itself, or,
/// when `MCD_TEST_CLUSTER_PREFIX` is set, that prefix in place of the
/// name's first characters, keeping it at most 6 characters (names end in
/// what tells one run's clusters apart: `h14bd1`, `h14bd2`). Several
/// checkouts can then run the same tests and benchmarks at once without
/// sharing a cluster.
pub fn prefixed_name(name: &str) -> String {
    match std::env::var("MCD_TEST_CLUSTER_PREFIX") {
        Ok(prefix) => {
            let keep = 6usize.saturating_sub(prefix.len()).min(name.len());
            format!("{prefix}{}", &name[name.len() - keep..])
        }
        Err(_) => name.to_string(),
    }
}
