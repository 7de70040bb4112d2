//! What a barrier needs from a network: numbered nodes, rails, unicast,
//! multicast, and a receive with a timeout.

use std::time::Duration;

/// A node number, 0-based; node 0 is the master.
pub type NodeId = usize;

/// A transport's error, boxed so that any transport can report its own.
pub type TransportError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The kind of a barrier message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// A step of the algorithm ("I have arrived", "you may leave", a round of an exchange).
    Data,
    /// A [`Data`](MsgKind::Data) message sent again to answer a NACK or a
    /// straggler. It counts like the original, but is never itself answered
    /// (two nodes that have both moved on must not answer each other forever).
    Answer,
    /// "I am waiting for your message with this tag": resend it if you sent it.
    Nack,
    /// "I am alive and stalled in this epoch": heartbeats while a barrier
    /// makes no progress, so that a timeout can name the nodes that are gone.
    Alive,
}

/// A barrier message: tiny, and the same on every transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Msg {
    /// What it is.
    pub kind: MsgKind,
    /// The barrier it belongs to (the paper's "color"): barriers are numbered
    /// 0, 1, 2, ... and a message never counts towards another barrier.
    pub epoch: u32,
    /// Which message of the algorithm (a round number, arrive, release).
    pub tag: u16,
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
}
