//! The MCD wire format: an Ethernet II frame under MCD's EtherType, then a
//! 16-byte MCD header, then the payload, then (on authenticated frames) a
//! 16-byte trailer: the sender's frame counter and the tag.
//!
//! ```text
//!  0                   6                  12      14
//! +-------------------+-------------------+-------+
//! | destination MAC   | source MAC        | type  |   Ethernet II
//! +----+----+----+----+---------+---------+-------+
//! |ver |kind|dprt|sprt| src node| pay len |            MCD header (16 bytes,
//! +----+----+----+----+---------+---------+            all fields big-endian)
//! | job key           | sequence / epoch  |
//! +-------------------+-------------------+
//! | payload (pay len bytes) ...
//! +---------------------------------------+
//! | frame counter (8 bytes)               |            trailer (16 bytes), only
//! +---------------------------------------+            when the AUTH bit of `ver`
//! | tag (8 bytes)                         |            is set; big-endian
//! +---------------------------------------+
//! ```
//!
//! `ver` holds the version ([`VERSION`], 3) in its low 7 bits and the
//! [`AUTH_FLAG`] in its top bit. The tag is a keyed MAC (SipHash-2-4 under
//! a key derived from the job's secret, the rail and the destination MAC,
//! [`crate::auth`]) of every byte from the kind through the counter: the
//! MCD header after its version byte, payload and counter (the bytes
//! before have one acceptable value each, or are in the key). The counter
//! is the sender's session (32 random bits) above the frame's number in
//! that session (32 bits, from 1). Ethernet padding after the
//! trailer (or after the payload of an unauthenticated frame) is ignored.
//!
//! As in smoltcp, a wire format has two faces: [`Frame`] and [`Trailer`],
//! checked views over a byte buffer with field accessors, and [`FrameRepr`]
//! and [`TrailerRepr`], plain representations that are parsed from a view
//! and emitted into one. Parsing never panics: a short, truncated or
//! wrong-version frame is a [`WireError`].

use std::fmt;
use std::str::FromStr;

use bytemuck::{Pod, Zeroable};

/// The EtherType MCD uses unless configured otherwise (IEEE 802 local experimental).
pub const DEFAULT_ETHERTYPE: u16 = 0x88B5;
/// Length of the Ethernet II header (no VLAN tag).
pub const ETHERNET_HEADER_LEN: usize = 14;
/// Length of the MCD header that follows the Ethernet header.
pub const MCD_HEADER_LEN: usize = 16;
/// Ethernet header plus MCD header: the smallest valid MCD frame.
pub const FRAME_HEADER_LEN: usize = ETHERNET_HEADER_LEN + MCD_HEADER_LEN;
/// The MCD wire-format version this crate speaks (the low 7 bits of the
/// version byte). Version 1 had no authentication; version 2's counters
/// were the sender's clock and every rail had the secret as its key. Their
/// frames are dropped as [`WireError::BadVersion`].
pub const VERSION: u8 = 3;
/// The top bit of the version byte: a [`Trailer`] follows the payload.
pub const AUTH_FLAG: u8 = 0x80;
/// Length of the trailer of an authenticated frame: counter and tag.
pub const TRAILER_LEN: usize = 16;

/// Byte offsets of the fields inside a frame, counted from the start of the
/// Ethernet header. The kernel filter (the crate's `filter` module) reads the same offsets.
pub mod offset {
    /// Destination MAC address (6 bytes).
    pub const DST_MAC: usize = 0;
    /// Source MAC address (6 bytes).
    pub const SRC_MAC: usize = 6;
    /// EtherType (2 bytes).
    pub const ETHERTYPE: usize = 12;
    /// MCD header version, and the [`AUTH_FLAG`](super::AUTH_FLAG) (1 byte).
    pub const VERSION: usize = 14;
    /// Message kind (1 byte).
    pub const KIND: usize = 15;
    /// Destination port (1 byte).
    pub const DST_PORT: usize = 16;
    /// Source port (1 byte).
    pub const SRC_PORT: usize = 17;
    /// Source node number (2 bytes).
    pub const SRC_NODE: usize = 18;
    /// Payload length (2 bytes).
    pub const PAYLOAD_LEN: usize = 20;
    /// Job key (4 bytes).
    pub const JOB_KEY: usize = 22;
    /// Sequence / epoch (4 bytes).
    pub const SEQ: usize = 26;
    /// First payload byte.
    pub const PAYLOAD: usize = 30;
    /// The frame counter, counted from the end of the payload (8 bytes).
    pub const TRAILER_COUNTER: usize = 0;
    /// The tag, counted from the end of the payload (8 bytes).
    pub const TRAILER_TAG: usize = 8;
}

/// A 48-bit Ethernet (MAC) address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group (multicast or broadcast) addresses: the low bit of the first octet.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// The locally administered multicast address of MCD group `group` in job
    /// `job_key`: `03:k0:k1:k2:k3:group`. The job key in the address keeps two
    /// jobs' multicast apart at the NIC's address filter already.
    pub fn mcd_group(job_key: u32, group: GroupId) -> MacAddr {
        let k = job_key.to_be_bytes();
        MacAddr([0x03, k[0], k[1], k[2], k[3], group.0])
    }

    /// The inverse of [`MacAddr::mcd_group`]: the group, if this is a group
    /// address of job `job_key`.
    pub fn as_mcd_group(&self, job_key: u32) -> Option<GroupId> {
        let k = job_key.to_be_bytes();
        (self.0[0] == 0x03 && self.0[1..5] == k).then_some(GroupId(self.0[5]))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The error of parsing a MAC address from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a MAC address (expected six hex octets like 02:00:00:00:00:01)")]
pub struct MacParseError(pub String);

impl FromStr for MacAddr {
    type Err = MacParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacParseError(s.to_string());
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in out.iter_mut() {
            let part = parts.next().ok_or_else(err)?;
            if part.is_empty() || part.len() > 2 {
                return Err(err());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

/// A multicast group of a job: 0 is every node of the job (the paper's
/// `MCD_DST_MULTICAST`), 1..=255 are named groups that nodes join and leave.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct GroupId(pub u8);

impl GroupId {
    /// Every node of the job; every endpoint is a member.
    pub const ALL: GroupId = GroupId(0);
    /// The hosts' leaders of a hierarchical barrier (reserved, as is
    /// [`crate::bootstrap::BOOTSTRAP_GROUP`]): their multicasts reach the
    /// other leaders' rings only, not those of every rank of each host.
    pub const HOST_LEADERS: GroupId = GroupId(254);
}

/// Why a byte buffer is not a valid MCD frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than the Ethernet and MCD headers.
    #[error("frame of {len} bytes is shorter than the {FRAME_HEADER_LEN}-byte headers")]
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// The EtherType is not the one expected.
    #[error("EtherType {found:#06x} is not MCD's {expected:#06x}")]
    WrongEtherType {
        /// EtherType in the frame.
        found: u16,
        /// EtherType expected.
        expected: u16,
    },
    /// A header version this crate does not speak.
    #[error("MCD header version {0} (this build speaks {VERSION})")]
    BadVersion(u8),
    /// The header claims more payload than the frame holds.
    #[error("header claims {claimed} payload bytes but the frame holds {available}")]
    BadLength {
        /// Payload length in the header.
        claimed: usize,
        /// Payload bytes present.
        available: usize,
    },
    /// The header says the frame is authenticated, but the trailer does not fit after the payload.
    #[error("authenticated frame with {available} bytes after its payload, short of the {TRAILER_LEN}-byte trailer")]
    NoTrailer {
        /// Bytes after the payload.
        available: usize,
    },
}

/// The MCD header as it lies on the wire (after the Ethernet header); every
/// multi-byte field is big-endian.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Debug)]
struct RawHeader {
    version: u8,
    kind: u8,
    dst_port: u8,
    src_port: u8,
    src_node: [u8; 2],
    payload_len: [u8; 2],
    job_key: [u8; 4],
    seq: [u8; 4],
}

const _: () = assert!(std::mem::size_of::<RawHeader>() == MCD_HEADER_LEN);

/// A read (and, over `&mut [u8]`, write) view of an MCD frame in a buffer.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it; accessors may then panic on a short
    /// buffer. Prefer [`Frame::new_checked`].
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after [`check_len`](Frame::check_len).
    pub fn new_checked(buffer: T) -> Result<Frame<T>, WireError> {
        let frame = Frame::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the headers fit and that the claimed payload is present, so
    /// that no accessor can panic.
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < FRAME_HEADER_LEN {
            return Err(WireError::Truncated { len });
        }
        let claimed = self.payload_len();
        let available = len - FRAME_HEADER_LEN;
        if claimed > available {
            return Err(WireError::BadLength { claimed, available });
        }
        if self.authenticated() && available - claimed < TRAILER_LEN {
            return Err(WireError::NoTrailer { available: available - claimed });
        }
        Ok(())
    }

    fn header(&self) -> &RawHeader {
        bytemuck::from_bytes(&self.buffer.as_ref()[ETHERNET_HEADER_LEN..FRAME_HEADER_LEN])
    }

    fn mac_at(&self, at: usize) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buffer.as_ref()[at..at + 6]);
        MacAddr(m)
    }

    /// Destination MAC address.
    pub fn dst_mac(&self) -> MacAddr {
        self.mac_at(offset::DST_MAC)
    }
    /// Source MAC address.
    pub fn src_mac(&self) -> MacAddr {
        self.mac_at(offset::SRC_MAC)
    }
    /// EtherType.
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[offset::ETHERTYPE], b[offset::ETHERTYPE + 1]])
    }
    /// MCD header version (without the [`AUTH_FLAG`]).
    pub fn version(&self) -> u8 {
        self.header().version & !AUTH_FLAG
    }
    /// Whether the [`AUTH_FLAG`] is set: a [`Trailer`] follows the payload.
    pub fn authenticated(&self) -> bool {
        self.header().version & AUTH_FLAG != 0
    }
    /// Application message kind.
    pub fn kind(&self) -> u8 {
        self.header().kind
    }
    /// Destination port (meaningless for group frames, sent as 0).
    pub fn dst_port(&self) -> u8 {
        self.header().dst_port
    }
    /// Source port.
    pub fn src_port(&self) -> u8 {
        self.header().src_port
    }
    /// Source node number.
    pub fn src_node(&self) -> u16 {
        u16::from_be_bytes(self.header().src_node)
    }
    /// Payload length as claimed by the header.
    pub fn payload_len(&self) -> usize {
        u16::from_be_bytes(self.header().payload_len) as usize
    }
    /// Job key.
    pub fn job_key(&self) -> u32 {
        u32::from_be_bytes(self.header().job_key)
    }
    /// Sequence / epoch field.
    pub fn seq(&self) -> u32 {
        u32::from_be_bytes(self.header().seq)
    }
    /// The payload (the claimed length; Ethernet padding after it is ignored).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[FRAME_HEADER_LEN..FRAME_HEADER_LEN + self.payload_len()]
    }
    /// The trailer, if the frame is [`authenticated`](Self::authenticated)
    /// (a checked frame holds all of it).
    pub fn trailer(&self) -> Option<Trailer<&[u8]>> {
        let at = FRAME_HEADER_LEN + self.payload_len();
        self.authenticated().then(|| Trailer::new_checked(&self.buffer.as_ref()[at..])).and_then(Result::ok)
    }
    /// The bytes the tag covers: from the kind through the trailer's
    /// counter. `None` unless the frame is authenticated.
    pub fn signed_bytes(&self) -> Option<&[u8]> {
        let end = FRAME_HEADER_LEN + self.payload_len() + offset::TRAILER_TAG;
        (self.authenticated() && self.buffer.as_ref().len() >= end + 8).then(|| &self.buffer.as_ref()[offset::KIND..end])
    }
}

/// A checked view of an authenticated frame's trailer: the 16 bytes after
/// the payload (see the module's diagram).
#[derive(Debug, Clone)]
pub struct Trailer<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Trailer<T> {
    /// Wraps `buffer` if it holds the [`TRAILER_LEN`] bytes (more are ignored: padding).
    pub fn new_checked(buffer: T) -> Result<Trailer<T>, WireError> {
        let available = buffer.as_ref().len();
        if available < TRAILER_LEN {
            return Err(WireError::NoTrailer { available });
        }
        Ok(Trailer { buffer })
    }

    fn word(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.buffer.as_ref()[at..at + 8].try_into().expect("a checked trailer holds both words"))
    }

    /// The sender's frame counter.
    pub fn counter(&self) -> u64 {
        self.word(offset::TRAILER_COUNTER)
    }

    /// The tag.
    pub fn tag(&self) -> u64 {
        self.word(offset::TRAILER_TAG)
    }
}

/// A parsed trailer: the sender's frame counter and the tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrailerRepr {
    /// The sender's frame counter (replay protection).
    pub counter: u64,
    /// The keyed MAC of every byte before it.
    pub tag: u64,
}

impl TrailerRepr {
    /// Reads a trailer.
    pub fn parse<T: AsRef<[u8]>>(trailer: &Trailer<T>) -> TrailerRepr {
        TrailerRepr { counter: trailer.counter(), tag: trailer.tag() }
    }

    /// Writes the trailer into the first [`TRAILER_LEN`] bytes of `buffer`.
    pub fn emit(&self, buffer: &mut [u8]) {
        buffer[offset::TRAILER_COUNTER..offset::TRAILER_COUNTER + 8].copy_from_slice(&self.counter.to_be_bytes());
        buffer[offset::TRAILER_TAG..offset::TRAILER_TAG + 8].copy_from_slice(&self.tag.to_be_bytes());
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    fn header_mut(&mut self) -> &mut RawHeader {
        bytemuck::from_bytes_mut(&mut self.buffer.as_mut()[ETHERNET_HEADER_LEN..FRAME_HEADER_LEN])
    }

    /// The payload area after the headers, up to the end of the buffer
    /// (less the trailer, if the header says the frame is authenticated).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let trailer = if self.authenticated() { TRAILER_LEN } else { 0 };
        let end = self.buffer.as_ref().len().saturating_sub(trailer).max(FRAME_HEADER_LEN);
        &mut self.buffer.as_mut()[FRAME_HEADER_LEN..end]
    }
}

/// A parsed MCD frame header (Ethernet and MCD fields), without the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Destination MAC: a node's NIC or a group address.
    pub dst_mac: MacAddr,
    /// Source MAC: the sending NIC.
    pub src_mac: MacAddr,
    /// EtherType.
    pub ethertype: u16,
    /// Application message kind.
    pub kind: u8,
    /// Destination port (0 for group frames).
    pub dst_port: u8,
    /// Source port.
    pub src_port: u8,
    /// Source node number.
    pub src_node: u16,
    /// Job key.
    pub job_key: u32,
    /// Sequence / epoch field.
    pub seq: u32,
    /// Payload length.
    pub payload_len: usize,
    /// A [`Trailer`] follows the payload (the [`AUTH_FLAG`]).
    pub authenticated: bool,
}

impl FrameRepr {
    /// Parses and validates a frame's headers: length, EtherType and version.
    /// The job key and addressing are checked by the endpoint, which knows them.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>, ethertype: u16) -> Result<FrameRepr, WireError> {
        frame.check_len()?;
        if frame.ethertype() != ethertype {
            return Err(WireError::WrongEtherType { found: frame.ethertype(), expected: ethertype });
        }
        if frame.version() != VERSION {
            return Err(WireError::BadVersion(frame.version()));
        }
        Ok(FrameRepr {
            dst_mac: frame.dst_mac(),
            src_mac: frame.src_mac(),
            ethertype: frame.ethertype(),
            kind: frame.kind(),
            dst_port: frame.dst_port(),
            src_port: frame.src_port(),
            src_node: frame.src_node(),
            job_key: frame.job_key(),
            seq: frame.seq(),
            payload_len: frame.payload_len(),
            authenticated: frame.authenticated(),
        })
    }

    /// Total frame length with this payload length (and the trailer, if authenticated).
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN + self.payload_len + if self.authenticated { TRAILER_LEN } else { 0 }
    }

    /// Writes the headers into `frame`; the payload area (and the trailer,
    /// which [`crate::auth::FrameKey::sign`] writes) is left for the caller
    /// ([`Frame::payload_mut`]). The buffer must hold [`frame_len`](Self::frame_len) bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        let b = frame.buffer.as_mut();
        b[offset::DST_MAC..offset::DST_MAC + 6].copy_from_slice(&self.dst_mac.0);
        b[offset::SRC_MAC..offset::SRC_MAC + 6].copy_from_slice(&self.src_mac.0);
        b[offset::ETHERTYPE..offset::ETHERTYPE + 2].copy_from_slice(&self.ethertype.to_be_bytes());
        *frame.header_mut() = RawHeader {
            version: VERSION | if self.authenticated { AUTH_FLAG } else { 0 },
            kind: self.kind,
            dst_port: self.dst_port,
            src_port: self.src_port,
            src_node: self.src_node.to_be_bytes(),
            payload_len: (self.payload_len as u16).to_be_bytes(),
            job_key: self.job_key.to_be_bytes(),
            seq: self.seq.to_be_bytes(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> FrameRepr {
        FrameRepr {
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            ethertype: DEFAULT_ETHERTYPE,
            kind: 7,
            dst_port: 3,
            src_port: 4,
            src_node: 513,
            job_key: 0xdead_beef,
            seq: 0x0102_0304,
            payload_len: 5,
            authenticated: false,
        }
    }

    fn emitted(repr: &FrameRepr, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; repr.frame_len()];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut frame);
        frame.payload_mut()[..payload.len()].copy_from_slice(payload);
        buf
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let repr = sample();
        let buf = emitted(&repr, b"hello");
        let frame = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(FrameRepr::parse(&frame, DEFAULT_ETHERTYPE).unwrap(), repr);
        assert_eq!(frame.payload(), b"hello");
    }

    #[test]
    fn fields_sit_at_the_documented_offsets() {
        let buf = emitted(&sample(), b"hello");
        assert_eq!(&buf[offset::ETHERTYPE..offset::ETHERTYPE + 2], &[0x88, 0xb5]);
        assert_eq!(buf[offset::VERSION], VERSION);
        assert_eq!(buf[offset::KIND], 7);
        assert_eq!(buf[offset::DST_PORT], 3);
        assert_eq!(buf[offset::SRC_PORT], 4);
        assert_eq!(&buf[offset::SRC_NODE..offset::SRC_NODE + 2], &[2, 1]);
        assert_eq!(&buf[offset::PAYLOAD_LEN..offset::PAYLOAD_LEN + 2], &[0, 5]);
        assert_eq!(&buf[offset::JOB_KEY..offset::JOB_KEY + 4], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&buf[offset::SEQ..offset::SEQ + 4], &[1, 2, 3, 4]);
        assert_eq!(&buf[offset::PAYLOAD..], b"hello");
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let buf = emitted(&sample(), b"hello");
        for len in 0..buf.len() {
            let err = Frame::new_checked(&buf[..len]).unwrap_err();
            if len < FRAME_HEADER_LEN {
                assert_eq!(err, WireError::Truncated { len });
            } else {
                assert_eq!(err, WireError::BadLength { claimed: 5, available: len - FRAME_HEADER_LEN });
            }
        }
    }

    #[test]
    fn padding_after_the_payload_is_ignored() {
        let mut buf = emitted(&sample(), b"hello");
        buf.resize(60, 0xaa); // a real NIC pads short frames to 60 bytes
        let frame = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(frame.payload(), b"hello");
    }

    #[test]
    fn wrong_version_and_ethertype_are_rejected() {
        let mut buf = emitted(&sample(), b"hello");
        buf[offset::VERSION] = 9;
        let frame = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(FrameRepr::parse(&frame, DEFAULT_ETHERTYPE), Err(WireError::BadVersion(9)));
        buf[offset::VERSION] = VERSION;
        let frame = Frame::new_checked(&buf[..]).unwrap();
        assert!(matches!(FrameRepr::parse(&frame, 0x0800), Err(WireError::WrongEtherType { .. })));
    }

    #[test]
    fn the_trailer_follows_the_payload_when_the_auth_bit_is_set() {
        let repr = FrameRepr { authenticated: true, ..sample() };
        assert_eq!(repr.frame_len(), FRAME_HEADER_LEN + 5 + TRAILER_LEN);
        let mut buf = emitted(&repr, b"hello");
        assert_eq!(buf[offset::VERSION], VERSION | AUTH_FLAG);
        let end = offset::PAYLOAD + 5;
        TrailerRepr { counter: 0x0102_0304_0506_0708, tag: 0x1112_1314_1516_1718 }.emit(&mut buf[end..]);
        assert_eq!(&buf[end + offset::TRAILER_COUNTER..end + 8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&buf[end + offset::TRAILER_TAG..end + 16], &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        let frame = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(FrameRepr::parse(&frame, DEFAULT_ETHERTYPE).unwrap(), repr);
        assert_eq!(frame.version(), VERSION);
        assert_eq!(frame.payload(), b"hello");
        let trailer = TrailerRepr::parse(&frame.trailer().unwrap());
        assert_eq!(trailer, TrailerRepr { counter: 0x0102_0304_0506_0708, tag: 0x1112_1314_1516_1718 });
        assert_eq!(frame.signed_bytes().unwrap().len(), end + 8 - offset::KIND, "every byte from the kind up to the tag");
        for cut in 1..=TRAILER_LEN {
            let err = Frame::new_checked(&buf[..buf.len() - cut]).unwrap_err();
            assert_eq!(err, WireError::NoTrailer { available: TRAILER_LEN - cut });
        }
        // Unauthenticated frames have neither trailer nor signed bytes.
        let plain = emitted(&sample(), b"hello");
        let frame = Frame::new_checked(&plain[..]).unwrap();
        assert!(frame.trailer().is_none() && frame.signed_bytes().is_none());
    }

    #[test]
    fn mac_text_round_trips_and_rejects_garbage() {
        let mac: MacAddr = "02:0a:FF:00:10:01".parse().unwrap();
        assert_eq!(mac.to_string(), "02:0a:ff:00:10:01");
        assert_eq!("02-0a-ff-00-10-01".parse::<MacAddr>().unwrap(), mac);
        for bad in ["", "02:00:00:00:00", "02:00:00:00:00:00:00", "02:00:00:00:00:zz", "020:00:00:00:00:01"] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn group_addresses_carry_job_and_group() {
        let mac = MacAddr::mcd_group(0x0102_0304, GroupId(9));
        assert_eq!(mac.to_string(), "03:01:02:03:04:09");
        assert!(mac.is_multicast());
        assert_eq!(mac.as_mcd_group(0x0102_0304), Some(GroupId(9)));
        assert_eq!(mac.as_mcd_group(0x0102_0305), None);
    }

    proptest! {
        #[test]
        fn parser_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(frame) = Frame::new_checked(&bytes[..]) {
                if let Ok(repr) = FrameRepr::parse(&frame, DEFAULT_ETHERTYPE) {
                    prop_assert!(repr.frame_len() <= bytes.len());
                    prop_assert_eq!(frame.payload().len(), repr.payload_len);
                }
            }
        }

        #[test]
        fn parser_never_panics_on_mutated_frames(
            flips in proptest::collection::vec((0usize..40, any::<u8>()), 1..6),
            cut in 0usize..40,
        ) {
            let mut buf = emitted(&sample(), b"hello");
            for (at, v) in flips { if at < buf.len() { buf[at] = v; } }
            buf.truncate(buf.len().saturating_sub(cut));
            if let Ok(frame) = Frame::new_checked(&buf[..]) {
                let _ = FrameRepr::parse(&frame, DEFAULT_ETHERTYPE);
                let _ = frame.payload();
            }
        }
    }
}
