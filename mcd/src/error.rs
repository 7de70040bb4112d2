//! The error type: each variant says what went wrong and what to do about it.

use crate::wire::{MacAddr, NodeId, Port};

/// What to tell a user who has no secret (also `mcd::auth::NO_SECRET_HELP`).
pub const NO_SECRET_HELP: &str = "mcd authenticates every frame with a per-job secret. \
Give every process of the job the same key file: set MCD_KEY_FILE to a file of 16 random bytes, \
mode 0600, owned by you (e.g. `(umask 077; head -c 16 /dev/urandom > $DIR/mcd.key)` in a directory \
only you can read); launchers that start every process provision one (`mcd-vcluster run`, \
the MPI interposer). Or set MCD_AUTH=off to send unauthenticated frames, which anyone on the \
Ethernet segment can forge or replay";

/// Everything that can go wrong in mcd. New variants may be added: match
/// with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Raw sockets need `CAP_NET_RAW`.
    #[error(
        "{what} needs the CAP_NET_RAW capability: run as root, or grant it to the binary with \
         `sudo setcap cap_net_raw+ep <binary>`"
    )]
    NoCapability {
        /// The operation that was refused.
        what: String,
    },
    /// The named network interface does not exist (in this network namespace).
    #[error("no network interface `{name}` here; interfaces present: {available}")]
    NoSuchInterface {
        /// The name asked for.
        name: String,
        /// The interfaces that do exist, comma-separated.
        available: String,
    },
    /// No interface was named and there is no default route to take one from.
    #[error("MCD_IFACES is not set and there is no default route to take the interface from; set MCD_IFACES (interfaces here: {available})")]
    NoDefaultRoute {
        /// The interfaces that do exist, comma-separated.
        available: String,
    },
    /// A payload does not fit in one frame.
    #[error("payload of {len} bytes exceeds the {max}-byte maximum on rail {rail} (MTU minus the 16-byte MCD header and, if authenticated, the 20-byte trailer); split it")]
    PayloadTooLarge {
        /// Payload length asked for.
        len: usize,
        /// Largest payload the rail carries.
        max: usize,
        /// The rail.
        rail: usize,
    },
    /// Another endpoint already holds the port on this device.
    #[error("port {port} on {interface} is held by {holder}; choose another port or stop that process (lock file {lock})")]
    PortHeld {
        /// The port.
        port: Port,
        /// The interface.
        interface: String,
        /// Who holds it ("process 1234 (name)", from the kernel's lock table).
        holder: String,
        /// The lock file.
        lock: String,
    },
    /// A destination node number beyond the node list.
    #[error("unknown node {node}: the node list has {count} nodes (0..={last})", last = count.saturating_sub(1))]
    UnknownNode {
        /// The node asked for.
        node: NodeId,
        /// Nodes in the list.
        count: usize,
    },
    /// A rail number beyond the endpoint's rails.
    #[error("unknown rail {rail}: this endpoint drives {count} rail(s)")]
    UnknownRail {
        /// The rail asked for.
        rail: usize,
        /// Rails the endpoint drives.
        count: usize,
    },
    /// A line of a node list could not be read.
    #[error("node list {origin}, line {line}: {reason}")]
    NodeListLine {
        /// The file or variable the list came from.
        origin: String,
        /// 1-based line number (0: the list as a whole).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// No node list was given.
    #[error("no node list: set MCD_NODES (inline) or MCD_NODE_FILE (a file of `MAC [MAC ...] [port]` lines)")]
    NoNodeList,
    /// This endpoint's own address is not in the node list.
    #[error("this endpoint ({mac} port {port} on {interface}) is not in the node list; add a line `{mac} {port}`")]
    NotInNodeList {
        /// The interface's MAC.
        mac: MacAddr,
        /// The port.
        port: Port,
        /// The rail-0 interface.
        interface: String,
    },
    /// An interface's MAC disagrees with the node list.
    #[error("interface {interface} (rail {rail}) has MAC {actual} but the node list gives node {node} {listed} there")]
    RailMismatch {
        /// The interface.
        interface: String,
        /// Its rail.
        rail: usize,
        /// This node.
        node: NodeId,
        /// The interface's real MAC.
        actual: MacAddr,
        /// What the node list says (or 00:00:00:00:00:00 when the line has no MAC for the rail).
        listed: MacAddr,
    },
    /// No job secret was given and authentication was not turned off.
    #[error("no job secret: {NO_SECRET_HELP}")]
    NoSecret,
    /// A key file was refused (its mode, owner, type or content).
    #[error("key file {}: {reason}", path.display())]
    KeyFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it, and the fix.
        reason: String,
    },
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The ranks did not all find each other (the text names the missing ranks).
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    /// A receive buffer is smaller than the waiting message; the message stays queued.
    #[error("receive buffer of {buf} bytes is too small for a {len}-byte payload (the message stays queued; use a buffer of max_payload() bytes)")]
    BufferTooSmall {
        /// Buffer length.
        buf: usize,
        /// Payload length.
        len: usize,
    },
    /// The send ring stayed full: the NIC does not take frames.
    #[error("send ring on rail {rail} stayed full for {waited_ms} ms: the interface is not transmitting (is it up?)")]
    SendRingFull {
        /// The rail.
        rail: usize,
        /// How long the send waited.
        waited_ms: u64,
    },
    /// A send token was given to an endpoint other than the one that posted it.
    #[error("this send token was posted on another endpoint; test it on the endpoint that returned it")]
    ForeignToken,
    /// The kernel rejected a posted frame (`TP_STATUS_WRONG_FORMAT`).
    #[error("the kernel rejected a frame on rail {rail} as malformed")]
    FrameRejected {
        /// The rail.
        rail: usize,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps an OS error, turning `EPERM`/`EACCES` on raw-socket operations into
    /// [`Error::NoCapability`].
    pub(crate) fn os(what: impl Into<String>, source: std::io::Error) -> Error {
        let what = what.into();
        // EPERM and EACCES.
        match source.kind() {
            std::io::ErrorKind::PermissionDenied => Error::NoCapability { what },
            _ => Error::Io { what, source },
        }
    }
}

/// mcd's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
