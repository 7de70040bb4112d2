//! The barrier transport over an mcd endpoint: each barrier message is one
//! raw Ethernet frame (kind 0xB0..=0xB3, the epoch in the sequence field, the
//! tag as a 2-byte payload), and group release is one multicast frame.

use std::time::{Duration, Instant};

use mcd::{Destination, Endpoint};

use crate::transport::{Incoming, Msg, MsgKind, NodeId, Transport, TransportError};

/// mcd message kinds of barrier traffic.
pub const KIND_DATA: u8 = 0xB0;
/// NACK.
pub const KIND_NACK: u8 = 0xB1;
/// Heartbeat.
pub const KIND_ALIVE: u8 = 0xB2;
/// A data message sent again as an answer.
pub const KIND_ANSWER: u8 = 0xB3;

/// A barrier transport on an mcd endpoint. Give the barrier an endpoint (a
/// port) of its own: other messages arriving on it are discarded.
pub struct McdTransport {
    endpoint: Endpoint,
    buf: Box<[u8]>,
    ignored: u64,
}

impl McdTransport {
    /// Wraps `endpoint`.
    pub fn new(endpoint: Endpoint) -> McdTransport {
        McdTransport { endpoint, buf: vec![0u8; 65536].into_boxed_slice(), ignored: 0 }
    }

    /// The endpoint (for its statistics, say).
    pub fn endpoint(&mut self) -> &mut Endpoint {
        &mut self.endpoint
    }

    /// Unwraps the endpoint.
    pub fn into_endpoint(self) -> Endpoint {
        self.endpoint
    }

    /// Messages received that were not barrier messages, and so discarded.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    fn encode(msg: Msg) -> (u8, [u8; 2]) {
        let kind = match msg.kind {
            MsgKind::Data => KIND_DATA,
            MsgKind::Nack => KIND_NACK,
            MsgKind::Alive => KIND_ALIVE,
            MsgKind::Answer => KIND_ANSWER,
        };
        (kind, msg.tag.to_be_bytes())
    }
}

impl Transport for McdTransport {
    fn node(&self) -> NodeId {
        self.endpoint.node_id()
    }

    fn node_count(&self) -> usize {
        self.endpoint.node_count()
    }

    fn rails(&self) -> usize {
        self.endpoint.rails()
    }

    fn send(&mut self, rail: usize, to: NodeId, msg: Msg) -> Result<(), TransportError> {
        let (kind, tag) = Self::encode(msg);
        Ok(self.endpoint.send(rail, Destination::Node(to), kind, msg.epoch, &tag)?)
    }

    fn has_multicast(&self) -> bool {
        true
    }

    fn multicast(&mut self, rail: usize, msg: Msg) -> Result<(), TransportError> {
        let (kind, tag) = Self::encode(msg);
        Ok(self.endpoint.send(rail, Destination::ALL_NODES, kind, msg.epoch, &tag)?)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let Some(m) = self.endpoint.recv(&mut self.buf, Some(remaining))? else { return Ok(None) };
            let kind = match m.kind {
                KIND_DATA => MsgKind::Data,
                KIND_NACK => MsgKind::Nack,
                KIND_ALIVE => MsgKind::Alive,
                KIND_ANSWER => MsgKind::Answer,
                _ => {
                    self.ignored += 1;
                    continue;
                }
            };
            if m.len != 2 {
                self.ignored += 1;
                continue;
            }
            let tag = u16::from_be_bytes([self.buf[0], self.buf[1]]);
            return Ok(Some(Incoming { from: m.from, rail: m.rail, msg: Msg { kind, epoch: m.seq, tag } }));
        }
    }
}
