//! mcd's tools as a library, so that tests and benchmarks use exactly what the
//! command-line tools use:
//!
//! - [`vcluster`]: the virtual cluster every test and demo runs on (namespaces,
//!   veth, bridges as switch or hub, nftables loss injection).
//! - [`cbuild`]: building the C ABI, the MPI interposer and the MPI test
//!   programs, against Open MPI or MPICH.
//! - [`barrierbench`]: barrier timing with the paper's method (barrier,
//!   then a ~30 µs dummy loop; per-node min/mean/max averaged over nodes).
//! - [`cli`]: options shared by the two-node tools.
//! - [`logp`]: measuring o_s, o_r, g and L of mcd and of UDP.
//! - [`mpi`]: `mpirun` across the virtual cluster, one rank per namespace.
//! - [`plot`]: SVG line plots of time against nodes.
//! - [`slurm`]: a real Slurm (slurmctld, a slurmd per node) on a virtual cluster.
//! - [`twonode`]: a client on node 0 and an echo on node 1 (ping-pong, LogP).
//! - [`udpbarrier`]: a group of nodes over plain UDP sockets, and the UDP
//!   dissemination barrier mcd is compared against.
//! - [`udpcollectives`]: allreduce and broadcast on that group, the UDP
//!   baseline of the collectives benchmark.
//! - [`pingpong`]: one-way latency and bandwidth against message size, mcd
//!   versus UDP between the same two nodes.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod barrierbench;
pub mod cbuild;
pub mod cli;
pub mod logp;
pub mod mpi;
pub mod pingpong;
pub mod plot;
pub mod slurm;
pub mod twonode;
pub mod udpbarrier;
pub mod udpcollectives;
pub mod vcluster;
