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

    /// A checked view of a barrier message's payload: tag, arg, instance.
    #[derive(Debug, Clone, Copy)]
    pub struct Payload<T: AsRef<[u8]>> {
        buffer: T,
    }

    mod field {
        use std::ops::Range;
        pub const TAG: Range<usize> = 0..2;
        pub const ARG: Range<usize> = 2..6;
        pub const INSTANCE: Range<usize> = 6..14;
    }

    impl<T: AsRef<[u8]>> Payload<T> {
        /// A view of `buffer` if it is exactly [`PAYLOAD_LEN`] bytes.
        pub fn new_checked(buffer: T) -> Option<Payload<T>> {
            (buffer.as_ref().len() == PAYLOAD_LEN).then_some(Payload { buffer })
        }

        fn get<const N: usize>(&self, range: std::ops::Range<usize>) -> [u8; N] {
            self.buffer.as_ref()[range].try_into().expect("a checked view holds every field")
        }

        /// The tag (the plan's step, or a query's purpose).
        pub fn tag(&self) -> u16 {
            u16::from_be_bytes(self.get(field::TAG))
        }

        /// The argument (flags, an echoed incarnation, a node).
        pub fn arg(&self) -> u32 {
            u32::from_be_bytes(self.get(field::ARG))
        }

        /// The barrier instance.
        pub fn instance(&self) -> u64 {
            u64::from_be_bytes(self.get(field::INSTANCE))
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Payload<T> {
        fn set(&mut self, range: std::ops::Range<usize>, bytes: &[u8]) {
            self.buffer.as_mut()[range].copy_from_slice(bytes);
        }
    }

    /// Writes `msg`'s payload; the kind and epoch travel in mcd's header.
    pub fn emit(msg: &Msg) -> [u8; PAYLOAD_LEN] {
        let mut p = Payload { buffer: [0u8; PAYLOAD_LEN] };
        p.set(field::TAG, &msg.tag.to_be_bytes());
        p.set(field::ARG, &msg.arg.to_be_bytes());
        p.set(field::INSTANCE, &msg.instance.to_be_bytes());
        p.buffer
    }

    /// Reads a barrier message from its mcd kind byte, sequence field and
    /// payload; `None` if it is not one (wrong kind or length).
    pub fn parse(kind: u8, seq: u32, payload: &[u8]) -> Option<Msg> {
        let kind = kind_of(kind)?;
        let p = Payload::new_checked(payload)?;
        Some(Msg { kind, epoch: seq, tag: p.tag(), arg: p.arg(), instance: p.instance() })
    }

    /// Writes `msg`'s payload followed by `data` (a collective's
    /// contribution) into `out`, cleared first.
    pub fn emit_with_data(msg: &Msg, data: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&emit(msg));
        out.extend_from_slice(data);
    }

    /// Reads a barrier message and the data after it (see
    /// [`emit_with_data`]); `None` if it is not one (wrong kind, short).
    pub fn parse_with_data(kind: u8, seq: u32, payload: &[u8]) -> Option<(Msg, &[u8])> {
        let head = payload.get(..PAYLOAD_LEN)?;
        Some((parse(kind, seq, head)?, &payload[PAYLOAD_LEN..]))
    }

    /// Payload length of a group's message ([`crate::SharedEndpoint`]): the
    /// group key (8 bytes, big-endian), then the message's payload.
    pub const GROUP_PAYLOAD_LEN: usize = 8 + PAYLOAD_LEN;

    /// Writes a group message's payload: `key`, then [`emit`]'s.
    pub fn emit_grouped(key: u64, msg: &Msg) -> [u8; GROUP_PAYLOAD_LEN] {
        let mut p = [0u8; GROUP_PAYLOAD_LEN];
        p[..8].copy_from_slice(&key.to_be_bytes());
        p[8..].copy_from_slice(&emit(msg));
        p
    }

    /// Writes a group message's payload followed by `data` into `out`,
    /// cleared first.
    pub fn emit_grouped_with_data(key: u64, msg: &Msg, data: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&emit_grouped(key, msg));
        out.extend_from_slice(data);
    }

    /// Reads a group message with data: key, message and data; `None` if it
    /// is not one (wrong kind, short).
    pub fn parse_grouped_with_data(kind: u8, seq: u32, payload: &[u8]) -> Option<(u64, Msg, &[u8])> {
        let (key, rest) = payload.split_first_chunk::<8>()?;
        let (msg, data) = parse_with_data(kind, seq, rest)?;
        Some((u64::from_be_bytes(*key), msg, data))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_group_payload_carries_its_key_first() {
            let msg = Msg { kind: MsgKind::Data, instance: 7, epoch: 3, tag: 1, arg: 0 };
            let bytes = emit_grouped(0x1122_3344_5566_7788, &msg);
            assert_eq!(&bytes[..8], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
            assert_eq!(parse_grouped_with_data(kind_byte(MsgKind::Data), 3, &bytes), Some((0x1122_3344_5566_7788, msg, &[][..])));
            assert!(parse_grouped_with_data(kind_byte(MsgKind::Data), 3, &bytes[..GROUP_PAYLOAD_LEN - 1]).is_none());
            assert!(parse_grouped_with_data(kind_byte(MsgKind::Data), 3, &emit(&msg)).is_none(), "an ungrouped payload is too short");
        }

        #[test]
        fn data_follows_the_message_and_a_short_header_is_refused() {
            let msg = Msg { kind: MsgKind::Answer, instance: 9, epoch: 4, tag: 16, arg: 1 };
            let mut out = Vec::new();
            emit_with_data(&msg, &[7, 8, 9], &mut out);
            assert_eq!(parse_with_data(kind_byte(MsgKind::Answer), 4, &out), Some((msg, &[7u8, 8, 9][..])));
            assert_eq!(parse_with_data(kind_byte(MsgKind::Answer), 4, &out[..PAYLOAD_LEN]), Some((msg, &[][..])));
            assert!(parse_with_data(kind_byte(MsgKind::Answer), 4, &out[..PAYLOAD_LEN - 1]).is_none());
            emit_grouped_with_data(5, &msg, &[1], &mut out);
            assert_eq!(parse_grouped_with_data(kind_byte(MsgKind::Answer), 4, &out), Some((5, msg, &[1u8][..])));
        }

        #[test]
        fn a_payload_reads_back_what_was_written_and_other_lengths_are_refused() {
            let msg = Msg { kind: MsgKind::Nack, instance: 0x0102_0304_0506_0708, epoch: 9, tag: 0xABCD, arg: 0xDEAD_BEEF };
            let bytes = emit(&msg);
            assert_eq!(bytes, [0xAB, 0xCD, 0xDE, 0xAD, 0xBE, 0xEF, 1, 2, 3, 4, 5, 6, 7, 8]);
            assert_eq!(parse(kind_byte(MsgKind::Nack), 9, &bytes), Some(msg));
            assert!(parse(kind_byte(MsgKind::Nack), 9, &bytes[..13]).is_none());
            assert!(parse(kind_byte(MsgKind::Nack), 9, &[bytes.as_slice(), &[0]].concat()).is_none());
            assert!(parse(0x01, 9, &bytes).is_none(), "not a barrier kind");
        }
    }
}

/// A barrier transport on an mcd endpoint. Give the barrier an endpoint (a
/// port) of its own: other messages arriving on it are discarded.
pub struct McdTransport {
    endpoint: Endpoint,
    buf: Box<[u8]>,
    ignored: u64,
    /// Where the last received message's data lies in `buf`.
    data: std::ops::Range<usize>,
    /// Where a message with data is built (reused).
    frame: Vec<u8>,
}

impl McdTransport {
    /// Wraps `endpoint`.
    pub fn new(endpoint: Endpoint) -> McdTransport {
        McdTransport { endpoint, buf: vec![0u8; 65536].into_boxed_slice(), ignored: 0, data: 0..0, frame: Vec::new() }
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

    fn send_to(&mut self, rail: usize, to: Destination, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if data.is_empty() {
            let payload = wire::emit(&msg);
            return Ok(self.endpoint.send(rail, to, wire::kind_byte(msg.kind), msg.epoch, &payload)?);
        }
        wire::emit_with_data(&msg, data, &mut self.frame);
        Ok(self.endpoint.send(rail, to, wire::kind_byte(msg.kind), msg.epoch, &self.frame)?)
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
        self.send_to(rail, Destination::Node(to), msg, &[])
    }

    fn has_multicast(&self) -> bool {
        true
    }

    fn multicast(&mut self, rail: usize, msg: Msg) -> Result<(), TransportError> {
        self.send_to(rail, Destination::ALL_NODES, msg, &[])
    }

    fn max_data(&self) -> usize {
        let least = (0..self.endpoint.rails()).filter_map(|r| self.endpoint.max_payload(r).ok()).min().unwrap_or(0);
        least.saturating_sub(wire::PAYLOAD_LEN)
    }

    fn send_data(&mut self, rail: usize, to: NodeId, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        self.send_to(rail, Destination::Node(to), msg, data)
    }

    fn multicast_data(&mut self, rail: usize, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        self.send_to(rail, Destination::ALL_NODES, msg, data)
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.data.clone()]
    }

    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        let deadline = if timeout.is_zero() { None } else { Some(Instant::now() + timeout) };
        loop {
            let m = match deadline {
                None => self.endpoint.try_recv(&mut self.buf)?,
                // Back early when the ring tells of drops: see `ring_drops`.
                Some(d) => self.endpoint.recv_noting_drops(&mut self.buf, Some(d.saturating_duration_since(Instant::now())))?,
            };
            let Some(m) = m else { return Ok(None) };
            match wire::parse_with_data(m.kind, m.seq, &self.buf[..m.len]) {
                Some((msg, _)) => {
                    self.data = wire::PAYLOAD_LEN..m.len;
                    return Ok(Some(Incoming { from: m.from, rail: m.rail, msg }));
                }
                None => self.ignored += 1,
            }
        }
    }

    fn ring_drops(&mut self) -> Result<u64, TransportError> {
        Ok(self.endpoint.ring_drops()?)
    }

    fn all_joined(&mut self) {
        // Every endpoint of the job is open now: count the host's processes again.
        self.endpoint.refresh_host_load();
    }

    fn waker(&self) -> Result<Arc<dyn Waker>, TransportError> {
        Ok(Arc::new(EndpointWaker(self.endpoint.readiness()?)))
    }

    fn bad_tags_from(&self, node: NodeId) -> u64 {
        self.endpoint.bad_tags_from(node)
    }

    fn confirm_live(&mut self, from: NodeId, rail: usize) {
        self.endpoint.confirm_live(from, rail);
    }

    fn auth_mismatch_from(&self, node: NodeId) -> u64 {
        self.endpoint.auth_mismatch_from(node)
    }

    fn bad_version(&mut self) -> u64 {
        self.endpoint.stats().map_or(0, |s| s.dropped.bad_version)
    }

    fn keepalive_every(&self) -> Option<Duration> {
        self.endpoint.announce_every()
    }

    fn keepalive(&mut self, now: Instant) -> Result<(), TransportError> {
        self.endpoint.announce_if_silent(now)?;
        Ok(())
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
