//! mcd's benchmarks as a library, so that the benchmark commands
//! (`mcd-bench`, `mcd-barrier`, `mcd-logp`, `mcd-pingpong`) and the tests
//! that check them measure the same way:
//!
//! - [`barrierbench`]: barrier timing with the paper's method (barrier,
//!   then a ~30 µs dummy loop; per-node min/mean/max averaged over nodes).
//! - [`mpibench`]: the same for Open MPI's and MPICH's `MPI_Barrier`.
//! - [`cli`]: options shared by the two-node tools.
//! - [`logp`]: measuring o_s, o_r, g and L of mcd and of UDP.
//! - [`plot`]: SVG line plots of time against nodes.
//! - [`twonode`]: a client on node 0 and an echo on node 1 (ping-pong, LogP).
//! - [`udpbarrier`]: a group of nodes over plain UDP sockets, and the UDP
//!   dissemination barrier mcd is compared against.
//! - [`udpcollectives`]: allreduce and broadcast on that group, the UDP
//!   baseline of the collectives benchmark.
//! - [`pingpong`]: one-way latency and bandwidth against message size, mcd
//!   versus UDP between the same two nodes.
//!
//! They run on `mcd_vcluster`'s virtual cluster, and MPI through
//! `mcd_tools`.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod barrierbench;
pub mod cli;
pub mod logp;
pub mod mpibench;
pub mod pingpong;
pub mod plot;
pub mod twonode;
pub mod udpbarrier;
pub mod udpcollectives;
