//! The kernel-side demultiplexer: a classic BPF program attached to each
//! endpoint socket (`SO_ATTACH_FILTER`) so that the kernel hands the process
//! only frames it must see, and never wakes it for someone else's.
//!
//! A frame passes when all of these hold:
//! - its EtherType is the job's and its header carries the job key;
//! - it was addressed to this host (`PACKET_HOST`) *and* to this endpoint's port; or
//! - it was multicast (`PACKET_MULTICAST`) to a group address of this job that
//!   this endpoint has joined; or
//! - (only when another node of the job shares this NIC) it was sent by that
//!   sibling process on this host (`PACKET_OUTGOING`, with another source
//!   port than this endpoint's) to this port or a joined group;
//! - and, where the socket serves one message kind only (the bootstrap's
//!   hellos), it is of that kind: the barrier frames to this port never
//!   reach such a socket.
//!
//! Everything else, including `PACKET_OTHERHOST` frames that a flooding bridge
//! or hub delivers, is dropped in the kernel. The endpoint checks the same
//! rules again in user space (so the filter can be turned off for diagnosis,
//! and a frame is never trusted only because the kernel let it in).

use crate::wire::{offset, MacAddr};

pub use crate::sys::BpfInsn;

/// Packet types the kernel reports (`sll_pkttype`, `SKF_AD_PKTTYPE`).
pub mod pkttype {
    /// To this host's address.
    pub const HOST: u32 = 0;
    /// To the broadcast address.
    #[cfg(test)]
    pub const BROADCAST: u32 = 1;
    /// To a multicast address.
    pub const MULTICAST: u32 = 2;
    /// To another host (seen because a bridge or hub flooded it).
    pub const OTHERHOST: u32 = 3;
    /// Sent by this host.
    pub const OUTGOING: u32 = 4;
}

// Opcodes (linux/filter.h).
const BPF_LD: u16 = 0x00;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_W: u16 = 0x00;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_ABS: u16 = 0x20;
const BPF_JEQ: u16 = 0x10;
const BPF_JSET: u16 = 0x40;
const BPF_K: u16 = 0x00;
const SKF_AD_PKTTYPE_ABS: u32 = (-0x1000i32 + 4) as u32;

/// How many joined groups the kernel filter checks one by one; with more, it
/// passes every group of the job and user space sorts them out.
pub const MAX_FILTERED_GROUPS: usize = 64;

/// Snap length returned for an accepted frame (whole frame up to 64 KiB).
const ACCEPT_LEN: u32 = 0xffff;

/// What the filter must let through.
#[derive(Clone, Debug)]
pub struct FilterSpec<'a> {
    /// The job's EtherType.
    pub ethertype: u16,
    /// The job key every frame carries.
    pub job_key: u32,
    /// This endpoint's MAC on this rail.
    pub mac: MacAddr,
    /// This endpoint's port.
    pub port: u8,
    /// Joined groups (group 0, every node, included by the caller).
    pub groups: &'a [u8],
    /// Accept `PACKET_OUTGOING` frames from sibling endpoints on this NIC.
    pub accept_outgoing: bool,
    /// Accept only frames of this message kind (`None`: any kind).
    pub kind: Option<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Next,
    Accept,
    Drop,
    Unicast,
    Group,
    Outgoing,
}

struct Asm {
    code: Vec<(u16, Label, Label, u32)>,
    marks: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, Label::Next, Label::Next, k));
    }
    fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) {
        self.code.push((code, jt, jf, k));
    }
    fn mark(&mut self, label: Label) {
        self.marks.push((label, self.code.len()));
    }
    fn resolve(self) -> Vec<BpfInsn> {
        let at = |label: Label, from: usize| -> u8 {
            if label == Label::Next {
                return 0;
            }
            let to = self.marks.iter().find(|(l, _)| *l == label).expect("label marked").1;
            u8::try_from(to - from - 1).expect("BPF jump within 255 instructions")
        };
        self.code.iter().enumerate().map(|(i, &(code, jt, jf, k))| BpfInsn { code, jt: at(jt, i), jf: at(jf, i), k }).collect()
    }
}

/// Builds the filter program for `spec`.
pub fn build(spec: &FilterSpec<'_>) -> Vec<BpfInsn> {
    use Label::*;
    let mut a = Asm { code: Vec::new(), marks: Vec::new() };
    let ld = |size: u16| BPF_LD | size | BPF_ABS;
    let jeq = BPF_JMP | BPF_JEQ | BPF_K;
    let mac = spec.mac.0;

    a.op(ld(BPF_H), offset::ETHERTYPE as u32);
    a.jump(jeq, spec.ethertype as u32, Next, Drop);
    a.op(ld(BPF_W), offset::JOB_KEY as u32);
    a.jump(jeq, spec.job_key, Next, Drop);
    if let Some(kind) = spec.kind {
        a.op(ld(BPF_B), offset::KIND as u32);
        a.jump(jeq, kind as u32, Next, Drop);
    }
    a.op(ld(BPF_W), SKF_AD_PKTTYPE_ABS);
    a.jump(jeq, pkttype::HOST, Unicast, Next);
    if spec.accept_outgoing {
        a.jump(jeq, pkttype::MULTICAST, Group, Next);
        a.jump(jeq, pkttype::OUTGOING, Outgoing, Drop);
        a.mark(Outgoing);
        a.op(ld(BPF_B), offset::SRC_PORT as u32);
        a.jump(jeq, spec.port as u32, Drop, Next); // this endpoint's own frame
        a.op(ld(BPF_B), offset::DST_MAC as u32);
        a.jump(BPF_JMP | BPF_JSET | BPF_K, 1, Group, Next);
        a.op(ld(BPF_W), offset::DST_MAC as u32 + 2);
        a.jump(jeq, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]), Next, Drop);
        a.op(ld(BPF_H), offset::DST_MAC as u32);
        a.jump(jeq, u16::from_be_bytes([mac[0], mac[1]]) as u32, Unicast, Drop);
    } else {
        a.jump(jeq, pkttype::MULTICAST, Group, Drop);
    }
    a.mark(Unicast);
    a.op(ld(BPF_B), offset::DST_PORT as u32);
    a.jump(jeq, spec.port as u32, Accept, Drop);
    a.mark(Group);
    a.op(ld(BPF_B), offset::DST_MAC as u32);
    a.jump(jeq, 0x03, Next, Drop);
    a.op(ld(BPF_W), offset::DST_MAC as u32 + 1);
    a.jump(jeq, spec.job_key, Next, Drop);
    if spec.groups.len() <= MAX_FILTERED_GROUPS {
        a.op(ld(BPF_B), offset::DST_MAC as u32 + 5);
        for &g in spec.groups {
            a.jump(jeq, g as u32, Accept, Next);
        }
        a.mark(Drop);
        a.op(BPF_RET | BPF_K, 0);
        a.mark(Accept);
        a.op(BPF_RET | BPF_K, ACCEPT_LEN);
    } else {
        a.mark(Accept);
        a.op(BPF_RET | BPF_K, ACCEPT_LEN);
        a.mark(Drop);
        a.op(BPF_RET | BPF_K, 0);
    }
    a.resolve()
}

/// Runs a classic BPF program the way the kernel does, for the instructions
/// [`build`] emits: returns the snap length (0 = drop). For tests and for
/// checking a filter without a kernel.
#[cfg(test)]
pub fn interpret(program: &[BpfInsn], frame: &[u8], packet_type: u32) -> u32 {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    while let Some(insn) = program.get(pc) {
        pc += 1;
        match insn.code {
            c if c & 0x07 == BPF_LD => {
                let size = match c & 0x18 {
                    BPF_W => 4,
                    BPF_H => 2,
                    _ => 1,
                };
                if insn.k == SKF_AD_PKTTYPE_ABS {
                    acc = packet_type;
                    continue;
                }
                let at = insn.k as usize;
                let Some(bytes) = frame.get(at..at + size) else { return 0 };
                acc = bytes.iter().fold(0u32, |v, &b| v << 8 | b as u32);
            }
            c if c == BPF_JMP | BPF_JEQ | BPF_K || c == BPF_JMP | BPF_JSET | BPF_K => {
                let taken = if c & 0xf0 == BPF_JEQ { acc == insn.k } else { acc & insn.k != 0 };
                pc += if taken { insn.jt } else { insn.jf } as usize;
            }
            c if c == BPF_RET | BPF_K => return insn.k,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::{Frame, FrameRepr, GroupId, DEFAULT_ETHERTYPE};

    const KEY: u32 = 0x1234_5678;
    /// A unicast frame written out byte by byte (not by [`FrameRepr::emit`]):
    /// from node 1 (02:00:00:00:00:09, port 1) to 02:00:00:00:00:01 port 3,
    /// kind 5, job key 0x12345678, sequence 9, payload de ad be ef.
    #[rustfmt::skip]
    pub(crate) const UNICAST_FRAME: [u8; 34] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01,     // destination MAC
        0x02, 0x00, 0x00, 0x00, 0x00, 0x09,     // source MAC
        0x88, 0xb5,                             // EtherType
        0x03, 0x05, 0x03, 0x01,                 // version, kind, dst port, src port
        0x00, 0x01, 0x00, 0x04,                 // source node, payload length
        0x12, 0x34, 0x56, 0x78,                 // job key
        0x00, 0x00, 0x00, 0x09,                 // sequence
        0xde, 0xad, 0xbe, 0xef,                 // payload
    ];

    /// [`UNICAST_FRAME`] with `bytes` written at `at`.
    pub(crate) fn patched(at: usize, bytes: &[u8]) -> Vec<u8> {
        let mut f = UNICAST_FRAME.to_vec();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    }

    #[test]
    fn crafted_bytes_pass_or_fail_the_filter() {
        let groups = [0, 7];
        let closed = build(&spec(&groups, false));
        let open = build(&spec(&groups, true));
        let group = |g: u8| patched(offset::DST_MAC, &[0x03, 0x12, 0x34, 0x56, 0x78, g]);
        let cases = [
            ("unicast to this port", &closed, UNICAST_FRAME.to_vec(), pkttype::HOST, true),
            ("another EtherType", &closed, patched(offset::ETHERTYPE, &[0x08, 0x00]), pkttype::HOST, false),
            ("another job key", &closed, patched(offset::JOB_KEY + 3, &[0x79]), pkttype::HOST, false),
            ("another port", &closed, patched(offset::DST_PORT, &[4]), pkttype::HOST, false),
            ("flooded to another host", &open, UNICAST_FRAME.to_vec(), pkttype::OTHERHOST, false),
            ("cut before the job key ends", &closed, UNICAST_FRAME[..offset::JOB_KEY + 3].to_vec(), pkttype::HOST, false),
            ("joined group", &closed, group(7), pkttype::MULTICAST, true),
            ("group not joined", &closed, group(8), pkttype::MULTICAST, false),
            ("sibling's frame, outgoing refused", &closed, UNICAST_FRAME.to_vec(), pkttype::OUTGOING, false),
            ("sibling's frame to this MAC and port", &open, UNICAST_FRAME.to_vec(), pkttype::OUTGOING, true),
            ("sibling's frame to another MAC", &open, patched(offset::DST_MAC + 5, &[0x02]), pkttype::OUTGOING, false),
            // PACKET_HOST already means "to this host's MAC": the filter checks the port only.
            ("host frame, MAC left to the kernel", &closed, patched(offset::DST_MAC + 5, &[0x02]), pkttype::HOST, true),
        ];
        for (what, program, frame, packet_type, pass) in cases {
            assert_eq!(interpret(program, &frame, packet_type) != 0, pass, "{what}");
        }
    }
    fn me() -> MacAddr {
        "02:00:00:00:00:01".parse().unwrap()
    }

    fn frame(dst: MacAddr, dst_port: u8, key: u32, ethertype: u16) -> Vec<u8> {
        let repr = FrameRepr {
            dst_mac: dst,
            src_mac: "02:00:00:00:00:09".parse().unwrap(),
            ethertype,
            kind: 0,
            dst_port,
            src_port: 1,
            src_node: 1,
            job_key: key,
            seq: 0,
            payload_len: 4,
            authenticated: false,
        };
        let mut buf = vec![0u8; repr.frame_len()];
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        buf
    }

    fn spec(groups: &[u8], accept_outgoing: bool) -> FilterSpec<'_> {
        FilterSpec { ethertype: DEFAULT_ETHERTYPE, job_key: KEY, mac: me(), port: 3, groups, accept_outgoing, kind: None }
    }

    #[test]
    fn a_socket_of_one_kind_drops_every_other_kind() {
        let groups = [0u8];
        let hellos = build(&FilterSpec { kind: Some(9), ..spec(&groups, true) });
        let mut unicast = frame(me(), 3, KEY, DEFAULT_ETHERTYPE);
        assert_eq!(interpret(&hellos, &unicast, pkttype::HOST), 0, "kind 0 to this port");
        unicast[offset::KIND] = 9;
        assert_ne!(interpret(&hellos, &unicast, pkttype::HOST), 0, "kind 9 to this port");
        assert_ne!(interpret(&build(&spec(&groups, true)), &frame(me(), 3, KEY, DEFAULT_ETHERTYPE), pkttype::HOST), 0, "any kind");
    }

    #[test]
    fn unicast_passes_only_for_this_port() {
        let p = build(&spec(&[0], false));
        assert_ne!(interpret(&p, &frame(me(), 3, KEY, DEFAULT_ETHERTYPE), pkttype::HOST), 0);
        assert_eq!(interpret(&p, &frame(me(), 4, KEY, DEFAULT_ETHERTYPE), pkttype::HOST), 0);
    }

    #[test]
    fn foreign_job_ethertype_and_otherhost_are_dropped() {
        let p = build(&spec(&[0], true));
        assert_eq!(interpret(&p, &frame(me(), 3, KEY + 1, DEFAULT_ETHERTYPE), pkttype::HOST), 0);
        assert_eq!(interpret(&p, &frame(me(), 3, KEY, 0x0800), pkttype::HOST), 0);
        assert_eq!(interpret(&p, &frame(me(), 3, KEY, DEFAULT_ETHERTYPE), pkttype::OTHERHOST), 0);
        assert_eq!(interpret(&p, &frame(MacAddr::BROADCAST, 3, KEY, DEFAULT_ETHERTYPE), pkttype::BROADCAST), 0);
    }

    #[test]
    fn short_frames_are_dropped() {
        let p = build(&spec(&[0], false));
        let f = frame(me(), 3, KEY, DEFAULT_ETHERTYPE);
        for len in 0..offset::JOB_KEY + 4 {
            assert_eq!(interpret(&p, &f[..len], pkttype::HOST), 0, "len {len}");
        }
    }

    #[test]
    fn groups_pass_only_when_joined_and_of_this_job() {
        let p = build(&spec(&[0, 7], false));
        let g = |key, g| frame(MacAddr::mcd_group(key, GroupId(g)), 0, KEY, DEFAULT_ETHERTYPE);
        assert_ne!(interpret(&p, &g(KEY, 0), pkttype::MULTICAST), 0);
        assert_ne!(interpret(&p, &g(KEY, 7), pkttype::MULTICAST), 0);
        assert_eq!(interpret(&p, &g(KEY, 8), pkttype::MULTICAST), 0);
        assert_eq!(interpret(&p, &g(KEY ^ 1, 0), pkttype::MULTICAST), 0);
    }

    #[test]
    fn many_groups_fall_back_to_all_groups_of_the_job() {
        let groups: Vec<u8> = (0..=MAX_FILTERED_GROUPS as u8 + 1).collect();
        let p = build(&spec(&groups, true));
        let g = frame(MacAddr::mcd_group(KEY, GroupId(250)), 0, KEY, DEFAULT_ETHERTYPE);
        assert_ne!(interpret(&p, &g, pkttype::MULTICAST), 0);
        assert_eq!(interpret(&p, &frame(me(), 4, KEY, DEFAULT_ETHERTYPE), pkttype::HOST), 0);
    }

    #[test]
    fn sibling_frames_pass_only_when_outgoing_is_accepted() {
        let to_me = frame(me(), 3, KEY, DEFAULT_ETHERTYPE);
        let to_other = frame("02:00:00:00:00:05".parse().unwrap(), 3, KEY, DEFAULT_ETHERTYPE);
        let group = frame(MacAddr::mcd_group(KEY, GroupId::ALL), 0, KEY, DEFAULT_ETHERTYPE);
        let closed = build(&spec(&[0], false));
        let open = build(&spec(&[0], true));
        assert_eq!(interpret(&closed, &to_me, pkttype::OUTGOING), 0);
        assert_ne!(interpret(&open, &to_me, pkttype::OUTGOING), 0);
        assert_eq!(interpret(&open, &to_other, pkttype::OUTGOING), 0);
        assert_ne!(interpret(&open, &group, pkttype::OUTGOING), 0);
        let mut own = group.clone();
        own[offset::SRC_PORT] = 3; // sent by this very endpoint (port 3)
        assert_eq!(interpret(&open, &own, pkttype::OUTGOING), 0);
    }
}
