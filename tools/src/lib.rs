//! mcd's tools for C and MPI users, as a library so that the tests and
//! benchmarks use exactly what the command-line tools use:
//!
//! - [`cbuild`]: the build driver: the C ABI, the `MPI_Barrier` interposer
//!   and the MPI test programs, against Open MPI or MPICH, into cargo's
//!   target directory (`./run interposer openmpi|mpich` is its command).
//! - [`mpi`]: `mpirun` across a virtual cluster, one rank per namespace.
//!
//! The virtual cluster is its own crate, `mcd_vcluster`; the benchmarks
//! (barrier timing, LogP, ping-pong, the UDP baselines, plots) are in
//! `mcd_bench`'s library.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod cbuild;
pub mod mpi;
