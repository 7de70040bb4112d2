//! # mcd — userspace raw-Ethernet messaging
//!
//! mcd is the MCD library of Iwasaki, Matsuoka et al. ("fast user-level
//! barriers on Ethernet") rebuilt on today's Linux: messages travel in raw
//! Ethernet frames under their own EtherType, beside the host's TCP/IP
//! traffic, between *nodes* of a job that share an Ethernet segment.
//!
//! ## Layers, bottom up
//!
//! - `sys` (private): every `unsafe` block and system call, one module per
//!   concern — the `AF_PACKET` socket, its mmap'd TPACKET_V2 receive and send
//!   rings, `eventfd` and `ppoll`, interface queries, record locks,
//!   namespaces, CPU affinity — behind safe types. It imports nothing from
//!   the layers above, and no other module uses `libc` or `unsafe` (the
//!   compiler holds the rest of the crate to `#![deny(unsafe_code)]`).
//! - [`wire`]: the frame format, as a checked view ([`wire::Frame`]) and a
//!   parse/emit representation ([`wire::FrameRepr`]). Parsing never panics.
//! - [`auth`]: authenticated frames — the per-job secret ([`JobSecret`],
//!   from a key file or a launcher), the tag every frame carries and the
//!   replay window every receiver keeps per sender. On by default: an
//!   endpoint without a secret must say [`Auth::Off`].
//! - the kernel filter (private): the classic BPF program that
//!   demultiplexes in the kernel — only this job's frames for this
//!   endpoint's port or joined groups wake the process; its tests run it in
//!   a user-space interpreter.
//! - [`node`] and the port locks (private): who is who. A node is a (MAC,
//!   port) pair; node numbers come from a node list. Each device has 256
//!   ports, each held by one endpoint on the host (a lock file in
//!   [`config::DEFAULT_PORT_DIR`], or `MCD_PORT_DIR`).
//! - [`config`]: what an endpoint is opened with ([`EndpointConfig`]), read
//!   from the environment or given; interface lookup. Below both the
//!   endpoint and bootstrap, which import it and not each other.
//! - [`Endpoint`]: the API. [`Endpoint::post`] copies a message into the send
//!   ring and kicks the kernel without waiting; [`Endpoint::is_sent`] /
//!   [`Endpoint::wait_sent`] report the paper's "sent" flag; [`Endpoint::try_recv`]
//!   reads the receive ring with no system call; [`Endpoint::recv`] waits
//!   under an explicit [`WaitPolicy`]. Destinations are nodes or multicast
//!   groups ([`Destination::ALL_NODES`] is the paper's `MCD_DST_MULTICAST`).
//!   One endpoint drives several NICs (*rails*); a send names its rail.
//!
//! - [`kind`]: the registry of message kinds, where every protocol of the
//!   workspace (bootstrap, barriers, the tools) has its kind bytes allocated.
//!
//! - [`shm`]: shared memory and futexes between a host's processes, and
//!   process identities that survive pid reuse (for host-local barriers).
//!
//! - [`bootstrap`]: for launched jobs (Slurm, `mpirun`, PMI): rank, size,
//!   interfaces and job key from the environment, and discovery of the other
//!   ranks by multicast hellos when there is no node list
//!   ([`EndpointConfig::bootstrap`]).
//!
//! ## Like the paper, unreliable
//!
//! There is no flow control or retransmission: a frame lost on the wire, or
//! arriving to a full receive ring, is gone (ring drops are counted in
//! [`Stats::ring_dropped`]). Reliability belongs to the layer above — the
//! `barriers` crate recovers lost messages by timeout and resend.
//!
//! ## Example
//!
//! ```no_run
//! use mcd::{Destination, Endpoint, EndpointConfig, NodeList};
//! # fn main() -> mcd::Result<()> {
//! let nodes = NodeList::parse("02:00:00:00:00:01\n02:00:00:00:00:02\n", "inline")?;
//! let secret = mcd::JobSecret::load(std::path::Path::new("/run/user/1000/job.key"))?;
//! let config = EndpointConfig::new(["eth0"], 0, nodes).with_auth(mcd::Auth::Key(secret));
//! let mut ep = Endpoint::open(config)?;
//! let peer = 1 - ep.node_id();
//! ep.send(0, Destination::Node(peer), 1, 0, b"hello")?;
//! let mut buf = [0u8; 1500];
//! if let Some(msg) = ep.recv(&mut buf, Some(std::time::Duration::from_secs(1)))? {
//!     println!("node {} says {:?}", msg.from, &buf[..msg.len]);
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unsafe_op_in_unsafe_fn)]

pub mod auth;
pub mod bootstrap;
pub mod config;
mod endpoint;
mod error;
mod filter;
pub mod host;
pub mod kind;
pub mod node;
mod port;
pub mod raw;
pub mod shm;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
pub mod wait;
pub mod wire;

pub use auth::{Auth, JobSecret};
pub use config::{job_key_from_str, EndpointConfig, DEFAULT_JOB_KEY, MAX_RAILS};
pub use endpoint::{Destination, Endpoint, Readiness, Received, SendToken};
pub use error::{Error, Result};
pub use node::{NodeAddr, NodeId, NodeList, Port};
pub use raw::{RawFrame, RawReceiver, RawSender};
pub use stats::{DropCounts, DropReason, Stats};
pub use wait::WaitPolicy;
pub use wire::{GroupId, MacAddr};
