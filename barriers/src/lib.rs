//! # barriers — barrier algorithms over any transport
//!
//! The algorithms of Iwasaki, Matsuoka et al. and the usual MPI ones, on any
//! network that can send small messages between numbered nodes:
//!
//! - [`transport`]: the [`Transport`] trait a network implements (unicast per
//!   rail, multicast, receive with a timeout). Implemented for an mcd endpoint
//!   ([`McdTransport`]), for groups of an mcd job's nodes sharing one
//!   endpoint ([`SharedEndpoint`], [`GroupTransport`]: a barrier per MPI
//!   communicator) and for threads of one process with fault injection
//!   (`mem`, a test harness).
//! - [`plan`]: each [`Algorithm`] compiled into a per-node list of steps
//!   (send these, then wait for those): shuffle exchange, dissemination,
//!   k-nomial tree gather with multicast or tree release (the paper's binary,
//!   ternary and 4-ary trees), concurrent, one-phase multicast; trees and
//!   concurrent spread over several rails (the paper's multi-NIC variants).
//! - [`core`]: the barrier protocol as a sans-IO state machine (time, messages
//!   and calls in; transmits, events and a deadline out), and its document
//!   ([`core::protocol`]); [`Barrier`] drives it over a transport, a
//!   simulator drives many in virtual time.
//! - [`Barrier`]: the engine that runs a plan, with barrier instances agreed
//!   at creation, numbered barriers (epochs, serial arithmetic), loss
//!   recovery by timeout, NACK and re-send, failure only for silent peers,
//!   the split-phase [`Barrier::enter`] / [`Barrier::test`] /
//!   [`Barrier::wait`], [`Barrier::finish`], and a progress agent thread that
//!   answers peers while the application is elsewhere.
//! - [`HierarchicalBarrier`]: many ranks per host — each host's ranks meet
//!   in shared memory ([`HostBarrier`], a `/dev/shm` segment with futexes),
//!   the hosts' leaders run a [`Barrier`] among themselves, and each leader
//!   releases its host.
//! - [`collective`]: allreduce, reduce to a root and broadcast from any
//!   root on the same plans and engine ([`Barrier::allreduce`],
//!   [`Barrier::reduce`], [`Barrier::bcast`]): contributions in the gathered
//!   messages, the result in the release, never counted twice, combined in
//!   a fixed order (bitwise-reproducible floats).
//! - [`model`]: cost prediction (the paper's closed forms, and a
//!   discrete-event simulation of each algorithm's real message pattern with
//!   receive gaps, links, a switch or a CSMA/CD hub, rails and hosts), and
//!   [`model::auto`], which picks the algorithm with the lowest predicted cost.
//! - [`summary`]: the one quantile and median of sorted samples.
//!
//! With the feature `test-support` (for tests and benchmarks, not for
//! programs that use barriers), the test harnesses: `mem` (an in-memory
//! network of threads with fault injection), `check` (the safety checker the
//! tests use: no node leaves barrier k before every node has entered it) and
//! `threads` (one thread per node in one process, with every node answering
//! its peers until all are done).
//!
//! ```
//! use barriers::{mem, Algorithm, Barrier, BarrierConfig};
//! let nodes = mem::network(4, 1, mem::Faults::none());
//! let threads: Vec<_> = nodes
//!     .into_iter()
//!     .map(|t| std::thread::spawn(move || {
//!         let mut b = Barrier::new(t, BarrierConfig::new(Algorithm::Dissemination)).unwrap();
//!         for _ in 0..10 { b.wait().unwrap(); }
//!         b.finish().unwrap(); // one closing barrier; returns once no peer needs this node
//!         b.epoch()
//!     }))
//!     .collect();
//! for t in threads { assert_eq!(t.join().unwrap(), 11); }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod barrier;
#[cfg(any(test, feature = "test-support"))]
pub mod check;
pub mod collective;
pub mod core;
mod engine;
mod expect;
mod hierarchy;
mod host_barrier;
mod mcd_shared;
mod mcd_transport;
#[cfg(any(test, feature = "test-support"))]
pub mod mem;
pub mod model;
pub mod plan;
pub mod policy;
mod queue;
pub mod rto;
pub mod sim;
pub mod summary;
#[cfg(any(test, feature = "test-support"))]
pub mod threads;
pub mod transport;
mod types;

pub use barrier::{Barrier, PreparedBarrier, Request, AGENT_GRACE, AGENT_GRACE_MAX};
pub use collective::{Collective, Dtype, Element, Op};
pub use hierarchy::{host_phases, HierarchicalBarrier, HOST_ADAPTIVE_YIELD};
pub use host_barrier::{segment_path, HostBarrier, HostConfig, LIVENESS_CHECK, TAP_LOOK};
pub use mcd_shared::{GroupListener, GroupTransport, RouteStats, SharedEndpoint, GROUP_PAYLOAD_LEN};
pub use mcd_transport::{wire as mcd_wire, McdTransport};
pub use plan::{Algorithm, Fanout, HostRelease, Release};
pub use policy::{HostSettings, JobPolicy, HOST_WAIT_ENV};
pub use transport::{Incoming, Msg, MsgKind, NodeId, TickWaker, Transport, TransportError, Waker, MISMATCHED, RECOVERED};
pub use types::{BarrierConfig, BarrierError, BarrierStats, PeerState, MAX_LEARNED_RETRY};
