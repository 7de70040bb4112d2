//! # mcd's barrier for C (and for MPI)
//!
//! `libmcd_barrier.so` / `libmcd_barrier.a` and the header
//! `include/mcd_barrier.h`. Two layers:
//!
//! - [`Job`]: the safe Rust side — an mcd endpoint opened through the
//!   bootstrap (rank, size, interfaces and job key from the environment or
//!   from [`Settings`]; the nodes from a node list or discovered), and a
//!   barrier over it with the algorithm asked for or the one `Auto` picks;
//!   [`Group`]: a barrier over some of the job's ranks on the same endpoint
//!   ([`barriers::SharedEndpoint`]), created without discovery.
//! - the `extern "C"` functions below: null checks, C strings, error codes,
//!   and a `catch_unwind` around every call, so that nothing unwinds into C.
//!   Every error is a negative return code ([`MCD_ERR_CONFIG`] ...); the
//!   text of the last error of the calling thread is [`mcd_last_error`].
//!
//! Environment read once by `mcd_init_env` (and by `mcd_init` for what its
//! parameters leave out), the barriers' part through
//! [`barriers::JobPolicy::from_env`]: `MCD_KEY_FILE` (the job's secret: a file of 16
//! random bytes, mode 0600, owned by the user; the same for every rank) or
//! `MCD_AUTH=off` (unauthenticated frames, which anyone on the segment can
//! forge; without either, `mcd_init` fails with [`MCD_ERR_CONFIG`] saying so),
//! `MCD_RANK`/`MCD_SIZE` (or Slurm's, Open MPI's or
//! PMI's), `MCD_IFACES`, `MCD_PORT`, `MCD_JOB` / `SLURM_JOB_ID`,
//! `MCD_NODES` / `MCD_NODE_FILE`, `MCD_ALGORITHM` (default `auto`),
//! `MCD_LOGP` (`o_s,o_r,g,L` in µs, for `auto`), `MCD_WAIT`,
//! `MCD_BOOTSTRAP_TIMEOUT`, `MCD_BARRIER_TIMEOUT` (seconds a peer may stay
//! silent, though probed, before it is taken for dead; default 10; a live
//! peer is waited for as long as it takes), `MCD_BARRIER_DEADLINE` (seconds
//! after which one barrier call gives up even on live peers; default none),
//! `MCD_JOIN_TIMEOUT` (seconds a group's or job's creation waits for every
//! member; default 30),
//! `MCD_HIERARCHY` (`auto`, the default: the hierarchical barrier when some
//! host runs more than one rank and the model
//! ([`barriers::model::auto_layout`]) predicts it faster, ranks on one host
//! being the nodes with one rail-0 MAC; `on`; `off`: always flat),
//! `MCD_HIERARCHY_RELEASE` and `MCD_HOST_WAIT` (how the hierarchical
//! barrier releases a host, and how the ranks other than its leader wait:
//! see [`barriers::HostRelease`] and [`barriers::HOST_WAIT_ENV`]),
//! `MCD_COLLECTIVE_ALGORITHM` (the collectives' algorithm: see
//! [`barriers::policy::CollectiveAlgorithm`]).
//!
//! The modules: the error codes, a job ([`Job`]) and its groups
//! ([`Group`]), their collectives, their counters ([`mcd_stats`]), and
//! `ffi`, the `extern "C"` functions: the only module where `unsafe` is
//! allowed. Each C function on a job has its twin on a group
//! (`mcd_barrier` and `mcd_group_barrier`, ...): both are one function
//! over [`Communicator`].
#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::ffi::CStr;

use barriers::{Collective, GroupTransport};

// In the header's order (cbindgen follows the modules).
mod error;

mod stats;

mod job;

mod group;

mod collective;

mod ffi;

mod exchange;
mod why;

pub use collective::*;
pub use error::*;
pub use ffi::*;
pub use group::Group;
pub use job::{Job, Settings, WorldBarrier};
pub use stats::mcd_stats;

/// A job or a group: ranks that meet in barriers and collectives. The C
/// functions on a job (`mcd_barrier`, `mcd_allreduce`, ...) and their twins
/// on a group (`mcd_group_barrier`, `mcd_group_allreduce`, ...) are one
/// function each over this.
pub trait Communicator {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Ranks in the job or the group.
    fn size(&self) -> usize;
    /// The barrier algorithm's name.
    fn algorithm(&self) -> &CStr;
    /// The counters (the frame counters are the shared endpoint's).
    fn stats(&mut self) -> Result<mcd_stats, CError>;
    /// One whole barrier (completes an entered one).
    fn wait(&mut self) -> Result<(), CError>;
    /// Enters the next barrier without waiting (split phase).
    fn enter(&mut self) -> Result<(), CError>;
    /// Progress on the entered barrier without blocking; true once it is
    /// complete (also when none was entered).
    fn test(&mut self) -> Result<bool, CError>;
    /// Runs `call` on the barrier of the collectives (joined with the job
    /// or the group): `input` (`None`: in place,
    /// from `output`) into `output` (`None` where no result is wanted here).
    fn collective(&mut self, call: Collective, input: Option<&[u8]>, output: Option<&mut [u8]>) -> Result<(), CError>;
    /// Starts `call` with `input` on the barrier of the collectives, without
    /// waiting.
    fn start(&mut self, call: Collective, input: &[u8]) -> Result<barriers::Request<GroupTransport>, CError>;
    /// Why the barrier and the collectives run the algorithms they do, in
    /// words (see [`mcd_why`]): it simulates every candidate, so it is for
    /// a report, not a hot path.
    fn why(&self) -> String;
}
