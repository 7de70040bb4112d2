//! The `AF_PACKET` raw socket.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::ring::{RingGeometry, Rings};

const TPACKET_V2: libc::c_int = 1;

/// Where a received frame starts in its receive-ring slot: byte 128, the
/// start of the slot's third cache line. The kernel puts it at
/// `TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14 + PACKET_RESERVE`, that is
/// 80 - 14 = 66 bytes without a reserve, where a frame of 44 to 62 bytes
/// (an unauthenticated barrier message) fits in the second line and the
/// same message authenticated (20 bytes of trailer more, the tag at its
/// end) spills into the third: verifying its tag read one more line, last
/// written by the core that ran the sender's `veth` transmit. From byte
/// 128 on, a frame of up to 64 bytes (every barrier message, signed) is in
/// one line. What that saves was later measured as within the noise: with
/// the A/B's endpoint order cancelled (`mcd-bench auth --lines`), a 2-rank
/// allreduce's unauthenticated frame of 68 bytes (two lines) cost +0.3%
/// against 60 (one); the placement stays, as it costs nothing.
pub const RX_FRAME_AT: usize = 128;
/// `PACKET_RESERVE`: the bytes the kernel leaves before the frame, on top
/// of the 66 it leaves anyway (see [`RX_FRAME_AT`]).
const RX_RESERVE: libc::c_uint = (RX_FRAME_AT - 66) as libc::c_uint;

/// The protocol that binds a packet socket to every EtherType (`ETH_P_ALL`).
pub const ALL_PROTOCOLS: u16 = libc::ETH_P_ALL as u16;

/// The packet type of a frame this host sent (`PACKET_OUTGOING`; only
/// `raw`'s receiver looks at it).
#[cfg(feature = "test-support")]
pub const OUTGOING: u8 = libc::PACKET_OUTGOING;

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BpfInsn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

const _: () = assert!(size_of::<BpfInsn>() == size_of::<libc::sock_filter>());

/// An `AF_PACKET` raw socket.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Creates the socket with protocol 0, so that it receives nothing until
    /// [`bind`](Self::bind) names the protocol and the interface.
    pub fn open() -> io::Result<PacketSocket> {
        // SAFETY: takes no pointers; on success we own the returned descriptor.
        let fd = syscall!(socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0))?;
        // SAFETY: fd is a fresh, valid descriptor nobody else owns.
        Ok(PacketSocket { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    fn set_option<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: value points to a live T of the size passed.
        syscall!(setsockopt(self.fd.as_raw_fd(), level, name, value as *const T as *const libc::c_void, size_of::<T>() as libc::socklen_t,)).map(drop)
    }

    /// Selects TPACKET_V2 ring frames.
    pub fn set_tpacket_v2(&self) -> io::Result<()> {
        self.set_option(libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V2)
    }

    /// Makes the kernel skip a malformed send-ring slot (`PACKET_LOSS`) instead
    /// of stopping the ring at it.
    pub fn set_skip_malformed_sends(&self) -> io::Result<()> {
        let on: libc::c_int = 1;
        self.set_option(libc::SOL_PACKET, libc::PACKET_LOSS, &on)
    }

    /// Raises the receive buffer to `bytes`, past `rmem_max` when allowed
    /// (`SO_RCVBUFFORCE` needs CAP_NET_ADMIN), else as far as `SO_RCVBUF` goes.
    pub fn raise_receive_buffer(&self, bytes: usize) -> io::Result<()> {
        let bytes = bytes.min(i32::MAX as usize) as libc::c_int;
        self.set_option(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &bytes).or_else(|_| self.set_option(libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes))
    }

    /// Attaches (or atomically replaces) the classic BPF filter.
    pub fn attach_filter(&self, program: &[BpfInsn]) -> io::Result<()> {
        let len = libc::c_ushort::try_from(program.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
        // The kernel only reads the program (it copies it); BpfInsn is laid out as sock_filter.
        let prog = libc::sock_fprog { len, filter: program.as_ptr() as *mut libc::sock_filter };
        self.set_option(libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
    }

    /// Binds to interface `ifindex` and EtherType `protocol` (host order;
    /// [`ALL_PROTOCOLS`] for every frame, 0 for none).
    pub fn bind(&self, ifindex: u32, protocol: u16) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain data; zero is a valid bit pattern.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol.to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: addr is a live sockaddr_ll of the size passed.
        syscall!(bind(
            self.fd.as_raw_fd(),
            &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        ))
        .map(drop)
    }

    fn membership(&self, option: libc::c_int, ifindex: u32, mac: [u8; 6]) -> io::Result<()> {
        let mut address = [0u8; 8];
        address[..6].copy_from_slice(&mac);
        let mreq = libc::packet_mreq { mr_ifindex: ifindex as i32, mr_type: libc::PACKET_MR_MULTICAST as u16, mr_alen: 6, mr_address: address };
        self.set_option(libc::SOL_PACKET, option, &mreq)
    }

    /// Asks the NIC to accept frames to multicast address `mac`.
    pub fn add_membership(&self, ifindex: u32, mac: [u8; 6]) -> io::Result<()> {
        self.membership(libc::PACKET_ADD_MEMBERSHIP, ifindex, mac)
    }

    /// Withdraws [`add_membership`](Self::add_membership).
    pub fn drop_membership(&self, ifindex: u32, mac: [u8; 6]) -> io::Result<()> {
        self.membership(libc::PACKET_DROP_MEMBERSHIP, ifindex, mac)
    }

    /// `PACKET_STATISTICS`: (frames passed to the socket, frames dropped for
    /// want of ring space) since the last call; the kernel resets both on read.
    pub fn take_statistics(&self) -> io::Result<(u64, u64)> {
        // SAFETY: tpacket_stats is plain data; zero is a valid bit pattern.
        let mut stats: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: stats is writable for len bytes.
        syscall!(getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut stats as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut len,
        ))?;
        Ok((stats.tp_packets as u64, stats.tp_drops as u64))
    }

    /// Tells the kernel to transmit every send-ring slot marked for sending,
    /// without waiting for completion.
    pub fn kick_send_ring(&self) -> io::Result<()> {
        // SAFETY: a null buffer of length 0 is what PACKET_TX_RING expects.
        syscall!(send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT)).map(drop)
    }

    /// Sends one whole frame (Ethernet header included) on the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: frame is readable for its length.
        syscall!(send(self.fd.as_raw_fd(), frame.as_ptr() as *const libc::c_void, frame.len(), 0)).map(|n| n as usize)
    }

    /// Receives one frame without waiting: its length (bytes copied into `buf`,
    /// the rest of a longer frame cut off) and its packet type (`PACKET_HOST`,
    /// `PACKET_MULTICAST`, `PACKET_OUTGOING`, ...); `None` when nothing waits.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, u8)>> {
        // SAFETY: sockaddr_ll is plain data; zero is a valid bit pattern.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: buf is writable for its length, from/len describe a live sockaddr_ll.
        match syscall!(recvfrom(
            self.fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
            &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
            &mut len,
        )) {
            Ok(n) => Ok(Some((n as usize, from.sll_pkttype))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets up and maps a receive and a send ring. Each received frame
    /// starts [`RX_FRAME_AT`] bytes into its slot, on a cache line's
    /// boundary (`PACKET_RESERVE`).
    pub fn map_rings(&self, rx: RingGeometry, tx: RingGeometry) -> io::Result<Rings> {
        self.set_option(libc::SOL_PACKET, libc::PACKET_RESERVE, &RX_RESERVE)?;
        self.set_option(libc::SOL_PACKET, libc::PACKET_RX_RING, &rx.request())?;
        self.set_option(libc::SOL_PACKET, libc::PACKET_TX_RING, &tx.request())?;
        let len = rx.bytes() + tx.bytes();
        // SAFETY: maps the socket's rings as the kernel documents (RX then TX);
        // no existing memory is touched.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, self.fd.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh mapping of these rings, of len bytes, that nothing else owns.
        Ok(unsafe { Rings::from_mapping(base as *mut u8, len, rx, tx) })
    }

    /// The descriptor, for `ppoll`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
