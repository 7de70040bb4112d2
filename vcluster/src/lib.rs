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
/// when `MCD_TEST_CLUSTER_PREFIX` is set, that prefix followed by as much
/// of the name's end as keeps it at most 6 characters (names end in what
/// tells one run's clusters apart: `h14bd1`, `h14bd2`). Several
/// checkouts can then run the same tests and benchmarks at once without
/// sharing a cluster.
pub fn prefixed_name(name: &str) -> String {
    with_prefix(name, std::env::var("MCD_TEST_CLUSTER_PREFIX").ok().as_deref())
}

/// `prefix` and as much of `name`'s end as makes at most 6 characters.
fn with_prefix(name: &str, prefix: Option<&str>) -> String {
    match prefix {
        Some(prefix) => {
            let keep = 6usize.saturating_sub(prefix.len()).min(name.len());
            format!("{prefix}{}", &name[name.len() - keep..])
        }
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::with_prefix;

    #[test]
    fn a_prefix_takes_the_place_of_a_names_first_characters() {
        assert_eq!(with_prefix("bnhot", None), "bnhot");
        assert_eq!(with_prefix("bnhot", Some("a")), "abnhot");
        assert_eq!(with_prefix("h14bd1", Some("a")), "a14bd1");
        assert_eq!(with_prefix("mbl", Some("a")), "ambl", "short names keep every character");
        assert_eq!(with_prefix("bnloss", Some("zz")), "zzloss");
        assert_ne!(with_prefix("bnh2l", Some("a")), with_prefix("bnh2h", Some("a")), "the end tells clusters apart");
    }
}
