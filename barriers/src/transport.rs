//! What a barrier needs from a network: numbered nodes, rails, unicast,
//! multicast, a receive with a timeout, and a [`Waker`] that another thread
//! can sleep on until a message may have arrived (the progress agent's).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A node number, 0-based; node 0 is the master.
pub type NodeId = usize;

/// Why a transport failed. mcd's own errors keep their kind
/// ([`mcd::Error`]), so a caller (the C ABI among them) can tell a missing
/// capability from a failed system call; another transport reports its own
/// error in [`TransportError::Other`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// mcd's endpoint failed.
    #[error(transparent)]
    Mcd(#[from] mcd::Error),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The transport was asked what it cannot do: a node or rail it does
    /// not have, more data than a message carries, a group it cannot make.
    #[error("{0}")]
    Invalid(String),
    /// Another transport's own error.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl From<String> for TransportError {
    fn from(what: String) -> TransportError {
        TransportError::Invalid(what)
    }
}

/// The kind of a barrier message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// A step of the algorithm ("I have arrived", "you may leave", a round of an exchange).
    Data,
    /// A [`Data`](MsgKind::Data) message sent again to answer a NACK or a
    /// straggler. It counts like the original, but is never itself answered
    /// (two nodes that have both moved on must not answer each other forever).
    Answer,
    /// "I am in barrier `epoch` and miss your message `tag`": resend it if
    /// you sent it, else say where you are with a [`Status`](MsgKind::Status).
    /// Also the liveness probe: a live peer always answers a NACK.
    Nack,
    /// "I am alive, at barrier `epoch`": the answer to a NACK that has nothing
    /// to re-send, and the "finished" notice of [`crate::Barrier::finish`].
    /// `tag` holds [`status`] flags, `arg` the node this one found silent
    /// plus one (0: none). Never answered.
    Status,
    /// Instance agreement: "admit me", sent to node 0 by every other node
    /// when a barrier is created; `instance` holds the sender's incarnation
    /// (a random number of this process's barrier object), `arg` a hash of
    /// its algorithm, rails and first barrier, which must match node 0's.
    Join,
    /// Node 0's answer to a [`Join`](MsgKind::Join): `instance` is the agreed
    /// instance, `arg` the low 32 bits of the incarnation it admits and
    /// `epoch` the high 32 bits (the joining node takes only its own).
    Admit,
    /// Node 0's refusal of a [`Join`](MsgKind::Join) from an incarnation it
    /// does not know (a restarted process; `tag` 0), or with another
    /// configuration (`tag` 1): `arg` echoes it as in `Admit`.
    Refuse,
}

/// Flags in the `tag` of a [`MsgKind::Status`].
pub mod status {
    /// The sender is inside barrier `epoch` (entered, not complete).
    pub const IN_PROGRESS: u16 = 1;
    /// The sender gave up on barrier `epoch` because the node in `arg − 1` is silent.
    pub const FAILED: u16 = 2;
    /// The sender has finished: its last barrier is complete and it leaves.
    pub const FINISHED: u16 = 4;
    /// Barrier `epoch` is of another collective at some node than at the
    /// sender's (a collective mismatch): it can never complete.
    pub const MISMATCH: u16 = 8;
    /// The sender is still joining (not yet admitted). From node 0, with
    /// instance 0, to a node that asked to join: "not all nodes asked
    /// yet", `arg` the first node it still waits for plus one, the data (if
    /// it fits) all of them as little-endian `u32`s. From any other node,
    /// echoing a probe's instance and epoch: "alive, but not admitted yet"
    /// (its admission was lost, or node 0 is out of its reach).
    pub const JOINING: u16 = 16;
}

/// The tag of a [`MsgKind::Nack`] that asks only "where are you?" (the
/// farewell's query), not for a step's message.
pub(crate) const STATUS_TAG: u16 = u16::MAX;

/// In a [`MsgKind::Data`]'s `arg`: the sender got here only through a
/// recovered loss in this barrier (its own, or one upstream), so the time
/// this message took says nothing about the network: a receiver does not
/// learn its retry timeout from it.
pub const RECOVERED: u32 = 1;

/// In a [`MsgKind::Data`]'s or [`MsgKind::Answer`]'s `arg`: the sender
/// knows that nodes called different collectives in this barrier (it met
/// one, or was told so by such a message): the barrier completes, and is
/// an error at every node. (A barrier's messages carry no contribution
/// whose header could say so.)
pub const MISMATCHED: u32 = 2;

/// In a [`MsgKind::Data`]'s, [`MsgKind::Answer`]'s or [`MsgKind::Nack`]'s
/// `arg`, bits 8..12: which copy of the message this is (0: the first),
/// and bits 12..16: how many copies its sender sends (0 or 1: one). A
/// receiver learns the loss rate from them: a message first heard as its
/// copy k lost k frames before it (see `core::recovery`).
pub const COPY_SHIFT: u32 = 8;

/// The mask of a copy's index (after [`COPY_SHIFT`]), and of the count
/// (after [`COPY_SHIFT`] + 4).
pub const COPY_MASK: u32 = 0xF;

/// In a [`MsgKind::Nack`]'s `arg`, bits 16..24: which of its sender's NACKs
/// this is (1 to 255, a number the copies of one NACK share, and a retry
/// does not): a receiver tells a later copy of a NACK it took in from a
/// retry whose first copy was lost (review rev33, finding 1), and its
/// reply says which NACK drew it ([`REPLY_ID_SHIFT`]). 0 from a sender
/// that does not number them (the farewell's queries).
pub const NACK_ID_SHIFT: u32 = 16;

/// In a [`MsgKind::Answer`]'s or [`MsgKind::Status`]'s `arg`, bits 24..32:
/// the number ([`NACK_ID_SHIFT`]) of the NACK that drew it, 0 if none did
/// (a status told unasked, a release handed on because a status proved it
/// missing). Its asker measures a round trip from that NACK only, not from
/// its latest one (a reply to an earlier NACK, or a multicast one drawn by
/// another node's, taken in just after a NACK went, measured a round trip
/// of 0, and the crossings it judges were gone: PROTOCOL 12).
pub const REPLY_ID_SHIFT: u32 = 24;

/// In a [`MsgKind::Nack`]'s `arg`, bits 0..8 and 24..32 (the low and the
/// high byte of 16 bits; bits 16..24 are the NACK's own): the *echo*, how
/// long before sending it the asker took in the original of the same
/// message (same sender, same `tag`) of the barrier before (0: unknown),
/// whole (bit 15 clear) or, where the pace is kept, as its change from the
/// time between its taking in the originals of two barriers before (bit 15
/// set; bit 14: negative; bit 13: from the barriers three and two before,
/// else two and one before). Floats of nanoseconds, rounded up (so an echo
/// never makes a crossing look likelier): a 5-bit exponent `e` over a
/// 10-bit mantissa `m` (whole), the size `m` if `e` is 0, else `(1024 + m)
/// << (e − 1)` (within a 1024th), or a 4-bit one over a 9-bit mantissa
/// (change: `512 + m`, within a 512th). The asked
/// node, which knows when it sent those barriers' messages, tells from it
/// whether the NACK was sent before the message it asks for could have
/// come (it crossed it: not answered), with no round trip measured (see
/// `core::answers`). Protocol 12 (11's change was from the last interval
/// only, with a 10-bit mantissa; 10's echo was the whole time).
pub const ECHO_SHIFT: u32 = 24;

/// A barrier message: tiny, and the same on every transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Msg {
    /// What it is.
    pub kind: MsgKind,
    /// The barrier instance it belongs to, agreed by all nodes when the
    /// barrier was created: a message of another instance never counts.
    pub instance: u64,
    /// The barrier it belongs to (the paper's "color"), modulo 2^32: barriers
    /// are numbered 0, 1, 2, ... and receivers place the number within one of
    /// their own by serial-number arithmetic (RFC 1982).
    pub epoch: u32,
    /// Which message of the algorithm (a round number, arrive, release), or
    /// flags (see [`MsgKind`]).
    pub tag: u16,
    /// An argument of the kind (see [`MsgKind`]); for data, [`RECOVERED`].
    pub arg: u32,
}

/// A received message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The sender.
    pub from: NodeId,
    /// The rail it arrived on.
    pub rail: usize,
    /// The message.
    pub msg: Msg,
}

/// Lets another thread sleep until a transport may have a message: the
/// progress agent sleeps on it while the application computes.
pub trait Waker: Send + Sync {
    /// Returns when a message may be waiting, when [`wake`](Self::wake) was
    /// called (since the last return), or after `timeout` (`None`: no limit).
    /// Spurious returns are allowed.
    fn wait(&self, timeout: Option<Duration>) -> Result<(), TransportError>;
    /// Makes the current or the next [`wait`](Self::wait) return.
    fn wake(&self);
}

/// A [`Waker`] for transports that cannot signal arrivals: it returns after
/// at most [`TickWaker::TICK`], so a sleeper polls. For transports that
/// have nothing better.
#[derive(Debug, Default)]
pub struct TickWaker {
    woken: Mutex<bool>,
    cond: Condvar,
}

impl TickWaker {
    /// The longest a wait sleeps.
    pub const TICK: Duration = Duration::from_millis(1);
}

impl Waker for TickWaker {
    fn wait(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        let limit = timeout.map_or(Self::TICK, |t| t.min(Self::TICK));
        let woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        let (mut woken, _) = self.cond.wait_timeout_while(woken, limit, |w| !*w).unwrap_or_else(|e| e.into_inner());
        *woken = false;
        Ok(())
    }

    fn wake(&self) {
        *self.woken.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }
}

/// A network that barrier algorithms run over. Delivery may be unreliable:
/// messages may be lost, duplicated, delayed or reordered; the barrier copes.
pub trait Transport {
    /// This node's number.
    fn node(&self) -> NodeId;
    /// Number of nodes.
    fn node_count(&self) -> usize;
    /// Number of rails (independent networks; at least 1).
    fn rails(&self) -> usize;
    /// Sends `msg` to node `to` on rail `rail`.
    fn send(&mut self, rail: usize, to: NodeId, msg: Msg) -> Result<(), TransportError>;
    /// Whether [`multicast`](Self::multicast) is one message on the wire (true)
    /// or a loop of unicasts (false).
    fn has_multicast(&self) -> bool {
        false
    }
    /// Sends `msg` to every other node on rail `rail`. The default sends
    /// one unicast to each.
    fn multicast(&mut self, rail: usize, msg: Msg) -> Result<(), TransportError> {
        let me = self.node();
        for to in (0..self.node_count()).filter(|&n| n != me) {
            self.send(rail, to, msg)?;
        }
        Ok(())
    }
    /// Waits up to `timeout` for a message (`Duration::ZERO`: only take one
    /// that is already there).
    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError>;
    /// The most data one message carries beside the [`Msg`]
    /// ([`send_data`](Self::send_data)); 0 (the default): none.
    fn max_data(&self) -> usize {
        0
    }
    /// Sends `msg` with `data` (at most [`max_data`](Self::max_data) bytes)
    /// to node `to` on rail `rail`. The default carries no data: it sends
    /// `msg` alone if `data` is empty, and fails otherwise.
    fn send_data(&mut self, rail: usize, to: NodeId, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if !data.is_empty() {
            return Err(format!("this transport carries no data ({} bytes to node {to})", data.len()).into());
        }
        self.send(rail, to, msg)
    }
    /// Sends `msg` with `data` to every other node on rail `rail`, as
    /// [`multicast`](Self::multicast). The default sends one
    /// [`send_data`](Self::send_data) to each.
    fn multicast_data(&mut self, rail: usize, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if data.is_empty() {
            return self.multicast(rail, msg);
        }
        let me = self.node();
        for to in (0..self.node_count()).filter(|&n| n != me) {
            self.send_data(rail, to, msg, data)?;
        }
        Ok(())
    }
    /// The data of the message the last [`recv`](Self::recv) returned
    /// (empty: none). The default: always empty.
    fn data(&self) -> &[u8] {
        &[]
    }
    /// Called once every node has joined the barrier (every process of the
    /// job is up): a transport may re-read how loaded its host is.
    fn all_joined(&mut self) {}
    /// As [`all_joined`](Self::all_joined), for a barrier made beside
    /// another one by that one's join ([`crate::PreparedBarrier::join_with`]),
    /// just after its `all_joined`: the host's load was re-read a moment
    /// ago. The default: as `all_joined`.
    fn joined_beside(&mut self) {
        self.all_joined();
    }
    /// The application drives this barrier's nonblocking collectives now
    /// (a start, or a test in a wait loop that never sleeps in
    /// [`recv`](Self::recv)): a transport shared by several barriers lets
    /// this one watch the arrivals from now on, so that another barrier's
    /// idle progress agent stops waking for frames the application reads
    /// itself. The default: nothing.
    fn in_use(&mut self) {}
    /// A [`Waker`] for this transport's arrivals, usable from another thread
    /// while this transport is used elsewhere. The default polls
    /// ([`TickWaker`]); transports that can sleep in the kernel should say so.
    fn waker(&self) -> Result<Arc<dyn Waker>, TransportError> {
        Ok(Arc::new(TickWaker::default()))
    }
    /// Frames that failed authentication below the transport, claiming to
    /// come from node `node` (a node run with another job secret, or a
    /// forger): what a join timeout names. The default: 0 (it cannot tell).
    fn bad_tags_from(&self, node: NodeId) -> u64 {
        let _ = node;
        0
    }
    /// Frames dropped below the transport because they were unsigned where
    /// this node signs, or signed where it does not, claiming to come from
    /// node `node` (a node run with `MCD_AUTH=off` where the others
    /// authenticate, or the other way round): what a join timeout names.
    /// The default: 0 (it cannot tell).
    fn auth_mismatch_from(&self, node: NodeId) -> u64 {
        let _ = node;
        0
    }
    /// Frames of another wire version dropped below the transport, from
    /// anyone. The default: 0 (it cannot tell).
    fn bad_version(&mut self) -> u64 {
        0
    }
    /// Frames addressed to this node that were dropped before it could
    /// read them (a receive ring that overflowed while the node was off
    /// its core, or under a flood), in all, as far as the transport knows;
    /// cheap enough to ask after every receive. When it grows, the engine
    /// asks again at once for what it misses ([`crate::core::Core::frames_lost`]).
    /// The default: 0 (it cannot tell).
    fn ring_drops(&mut self) -> Result<u64, TransportError> {
        Ok(0)
    }
    /// How often a node that sends nothing must still make itself known to
    /// the network ([`keepalive`](Self::keepalive)): a sleeping progress
    /// agent wakes at least this often. The default: never.
    fn keepalive_every(&self) -> Option<Duration> {
        None
    }
    /// The engine took the message it received last from `from` on `rail`
    /// as this run's (of its barrier instance): a transport that keeps
    /// replay windows per session of its senders keeps that session's for
    /// good (review rev29, finding 1). The default: nothing.
    fn confirm_live(&mut self, from: NodeId, rail: usize) {
        let _ = (from, rail);
    }
    /// Called by a sleeping progress agent when it wakes: a transport on a
    /// learning switch announces its address if it has sent nothing for
    /// [`keepalive_every`](Self::keepalive_every), so that a switch port
    /// stolen while the application computes comes back. The default:
    /// nothing.
    fn keepalive(&mut self, now: Instant) -> Result<(), TransportError> {
        let _ = now;
        Ok(())
    }
}
