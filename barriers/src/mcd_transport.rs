//! The barrier transport over an mcd endpoint: each barrier message is one
//! raw Ethernet frame (mcd kinds from [`mcd::kind::BARRIER_FIRST`], the epoch's low 32
//! bits in the sequence field, the rest in a 14-byte payload, [`wire`]), and
//! group release is one multicast frame.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcd::{Destination, Endpoint, Readiness};

use crate::transport::{Incoming, Msg, NodeId, Transport, TransportError, Waker};

/// The barrier message as mcd carries it.
pub mod wire {
    use mcd::kind::{BARRIER_COUNT, BARRIER_FIRST};

    use crate::transport::{Msg, MsgKind};

    /// Payload length: tag (2 bytes), arg (4), instance (8), big-endian.
    pub const PAYLOAD_LEN: usize = 14;

    /// The barrier kinds in the order of their kind bytes, from [`BARRIER_FIRST`].
    const KINDS: [MsgKind; BARRIER_COUNT as usize] =
        [MsgKind::Data, MsgKind::Nack, MsgKind::Status, MsgKind::Answer, MsgKind::Join, MsgKind::Admit, MsgKind::Refuse];

    /// The mcd kind byte of `kind`.
    pub fn kind_byte(kind: MsgKind) -> u8 {
        BARRIER_FIRST + KINDS.iter().position(|&k| k == kind).expect("every kind is listed") as u8
    }

    /// The message kind of an mcd kind byte, if it is barrier traffic.
    pub fn kind_of(byte: u8) -> Option<MsgKind> {
        KINDS.get(usize::from(byte.wrapping_sub(BARRIER_FIRST))).copied()
    }

    /// Writes `msg`'s payload; the kind and epoch travel in mcd's header.
    pub fn emit(msg: &Msg) -> [u8; PAYLOAD_LEN] {
        let mut p = [0u8; PAYLOAD_LEN];
        p[0..2].copy_from_slice(&msg.tag.to_be_bytes());
        p[2..6].copy_from_slice(&msg.arg.to_be_bytes());
        p[6..14].copy_from_slice(&msg.instance.to_be_bytes());
        p
    }

    /// Reads a barrier message from its mcd kind byte, sequence field and
    /// payload; `None` if it is not one (wrong kind or length).
    pub fn parse(kind: u8, seq: u32, payload: &[u8]) -> Option<Msg> {
        let kind = kind_of(kind)?;
        let p: &[u8; PAYLOAD_LEN] = payload.try_into().ok()?;
        Some(Msg {
            kind,
            epoch: seq,
            tag: u16::from_be_bytes([p[0], p[1]]),
            arg: u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            instance: u64::from_be_bytes(p[6..14].try_into().expect("8 bytes")),
        })
    }
}

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

    fn send_to(&mut self, rail: usize, to: Destination, msg: Msg) -> Result<(), TransportError> {
        let payload = wire::emit(&msg);
        Ok(self.endpoint.send(rail, to, wire::kind_byte(msg.kind), msg.epoch, &payload)?)
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
        self.send_to(rail, Destination::Node(to), msg)
    }

    fn has_multicast(&self) -> bool {
        true
    }

    fn multicast(&mut self, rail: usize, msg: Msg) -> Result<(), TransportError> {
        self.send_to(rail, Destination::ALL_NODES, msg)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        let deadline = if timeout.is_zero() { None } else { Some(Instant::now() + timeout) };
        loop {
            let m = match deadline {
                None => self.endpoint.try_recv(&mut self.buf)?,
                Some(d) => self.endpoint.recv(&mut self.buf, Some(d.saturating_duration_since(Instant::now())))?,
            };
            let Some(m) = m else { return Ok(None) };
            match wire::parse(m.kind, m.seq, &self.buf[..m.len]) {
                Some(msg) => return Ok(Some(Incoming { from: m.from, rail: m.rail, msg })),
                None => self.ignored += 1,
            }
        }
    }

    fn all_joined(&mut self) {
        // Every endpoint of the job is open now: count the host's processes again.
        self.endpoint.refresh_host_load();
    }

    fn waker(&self) -> Result<Arc<dyn Waker>, TransportError> {
        Ok(Arc::new(EndpointWaker(self.endpoint.readiness()?)))
    }
}

/// The progress agent's sleep on an endpoint's rings.
struct EndpointWaker(Readiness);

impl Waker for EndpointWaker {
    fn wait(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        Ok(self.0.wait(timeout)?)
    }

    fn wake(&self) {
        // Failing to signal an eventfd leaves the waiter to its timeout.
        let _ = self.0.wake();
    }
}

#[cfg(test)]
mod tests {
    use mcd::kind::{BARRIER_COUNT, BARRIER_FIRST};

    use super::wire;
    use crate::transport::{Msg, MsgKind};

    #[test]
    fn every_kind_round_trips_and_other_bytes_are_not_barrier_traffic() {
        for kind in [MsgKind::Data, MsgKind::Nack, MsgKind::Status, MsgKind::Answer, MsgKind::Join, MsgKind::Admit, MsgKind::Refuse] {
            let msg = Msg { kind, instance: 0x0123_4567_89AB_CDEF, epoch: u32::MAX, tag: 0xBEEF, arg: 0xDEAD_BEEF };
            let payload = wire::emit(&msg);
            assert_eq!(wire::parse(wire::kind_byte(kind), msg.epoch, &payload), Some(msg));
        }
        assert_eq!(wire::kind_of(BARRIER_FIRST - 1), None);
        assert_eq!(wire::kind_of(BARRIER_FIRST + BARRIER_COUNT), None);
        let payload = wire::emit(&Msg { kind: MsgKind::Data, instance: 1, epoch: 0, tag: 0, arg: 0 });
        assert_eq!(wire::parse(BARRIER_FIRST, 0, &payload[..13]), None, "short payload");
        assert_eq!(wire::parse(BARRIER_FIRST, 0, &[payload.as_slice(), &[0]].concat()), None, "long payload");
    }
}
