//! The MCD wire format: an Ethernet II frame under MCD's EtherType, then a
//! 16-byte MCD header, then the payload.
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
//! ```
//!
//! As in smoltcp, a wire format has two faces: [`Frame`], a checked view over a
//! byte buffer with field accessors, and [`FrameRepr`], a plain representation
//! that is [`parse`](FrameRepr::parse)d from a view and
//! [`emit`](FrameRepr::emit)ted into one. Parsing never panics: a short,
//! truncated or wrong-version frame is a [`WireError`].

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
/// The MCD wire-format version this crate speaks.
pub const VERSION: u8 = 1;

/// Byte offsets of the fields inside a frame, counted from the start of the
/// Ethernet header. The kernel filter ([`crate::filter`]) reads the same offsets.
pub mod offset {
    /// Destination MAC address (6 bytes).
    pub const DST_MAC: usize = 0;
    /// Source MAC address (6 bytes).
    pub const SRC_MAC: usize = 6;
    /// EtherType (2 bytes).
    pub const ETHERTYPE: usize = 12;
    /// MCD header version (1 byte).
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
    /// MCD header version.
    pub fn version(&self) -> u8 {
        self.header().version
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
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    fn header_mut(&mut self) -> &mut RawHeader {
        bytemuck::from_bytes_mut(&mut self.buffer.as_mut()[ETHERNET_HEADER_LEN..FRAME_HEADER_LEN])
    }

    /// The payload area after the headers, up to the end of the buffer.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[FRAME_HEADER_LEN..]
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
        })
    }

    /// Total frame length with this payload length.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN + self.payload_len
    }

    /// Writes the headers into `frame`; the payload area is left for the caller
    /// ([`Frame::payload_mut`]). The buffer must hold [`frame_len`](Self::frame_len) bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        let b = frame.buffer.as_mut();
        b[offset::DST_MAC..offset::DST_MAC + 6].copy_from_slice(&self.dst_mac.0);
        b[offset::SRC_MAC..offset::SRC_MAC + 6].copy_from_slice(&self.src_mac.0);
        b[offset::ETHERTYPE..offset::ETHERTYPE + 2].copy_from_slice(&self.ethertype.to_be_bytes());
        *frame.header_mut() = RawHeader {
            version: VERSION,
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
