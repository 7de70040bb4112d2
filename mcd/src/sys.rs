//! Every `unsafe` block and raw system call of the crate, behind safe types:
//! the packet socket, its mmap'd TPACKET_V2 rings, interface queries,
//! `ppoll`, `flock`, network namespaces and CPU affinity.
//!
//! Ring safety: the ring memory is shared with the kernel. A slot belongs to
//! user space exactly while its status word says so (`TP_STATUS_USER` on the
//! receive ring, `TP_STATUS_AVAILABLE` on the send ring); the status is read
//! with acquire and written with release ordering, and slices into a slot are
//! only handed out while user space owns it and only for the borrow of `Rings`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::filter::BpfInsn;
use crate::wire::MacAddr;

const TPACKET_V2: libc::c_int = 1;
/// Offset of the frame data in a send-ring slot: TPACKET2_HDRLEN - sizeof(sockaddr_ll).
const TX_DATA_OFFSET: usize = 32;
/// Offset of `sll_pkttype` in a receive-ring slot (the sockaddr_ll follows the aligned header).
const RX_PKTTYPE_OFFSET: usize = 32 + 10;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An `AF_PACKET` raw socket.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Creates the socket with protocol 0, so that it receives nothing until
    /// [`bind`](Self::bind) names the protocol and the interface.
    pub fn open() -> io::Result<PacketSocket> {
        // SAFETY: plain syscall; on success we own the returned descriptor.
        let fd = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: fd is a fresh, valid descriptor nobody else owns.
        Ok(PacketSocket { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    fn set_option<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: value points to a live T of the size passed.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                value as *const T as *const libc::c_void,
                size_of::<T>() as libc::socklen_t,
            )
        })
        .map(drop)
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
        self.set_option(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &bytes)
            .or_else(|_| self.set_option(libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes))
    }

    /// Attaches (or atomically replaces) the classic BPF filter.
    pub fn attach_filter(&self, program: &[BpfInsn]) -> io::Result<()> {
        let mut insns: Vec<libc::sock_filter> =
            program.iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
        let prog = libc::sock_fprog { len: insns.len() as libc::c_ushort, filter: insns.as_mut_ptr() };
        self.set_option(libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
    }

    /// Binds to interface `ifindex` and EtherType `protocol` (host order;
    /// `libc::ETH_P_ALL` for every frame, 0 for none).
    pub fn bind(&self, ifindex: u32, protocol: u16) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain data; zero is a valid bit pattern.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol.to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: addr is a valid sockaddr_ll of the size passed.
        check(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    fn membership(&self, option: libc::c_int, ifindex: u32, mac: MacAddr) -> io::Result<()> {
        let mut address = [0u8; 8];
        address[..6].copy_from_slice(&mac.0);
        let mreq = libc::packet_mreq {
            mr_ifindex: ifindex as i32,
            mr_type: libc::PACKET_MR_MULTICAST as u16,
            mr_alen: 6,
            mr_address: address,
        };
        self.set_option(libc::SOL_PACKET, option, &mreq)
    }

    /// Asks the NIC to accept frames to multicast address `mac`.
    pub fn add_membership(&self, ifindex: u32, mac: MacAddr) -> io::Result<()> {
        self.membership(libc::PACKET_ADD_MEMBERSHIP, ifindex, mac)
    }

    /// Withdraws [`add_membership`](Self::add_membership).
    pub fn drop_membership(&self, ifindex: u32, mac: MacAddr) -> io::Result<()> {
        self.membership(libc::PACKET_DROP_MEMBERSHIP, ifindex, mac)
    }

    /// `PACKET_STATISTICS`: (frames passed to the socket, frames dropped for
    /// want of ring space) since the last call; the kernel resets both on read.
    pub fn take_statistics(&self) -> io::Result<(u64, u64)> {
        // SAFETY: tpacket_stats is plain data.
        let mut stats: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: stats is writable for len bytes.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut stats as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        })?;
        Ok((stats.tp_packets as u64, stats.tp_drops as u64))
    }

    /// Tells the kernel to transmit every send-ring slot marked for sending,
    /// without waiting for completion.
    pub fn kick_send_ring(&self) -> io::Result<()> {
        // SAFETY: a null buffer of length 0 is what PACKET_TX_RING expects.
        check(unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) as libc::c_int })
            .map(drop)
    }

    /// Sends one whole frame (Ethernet header included) on the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: frame is readable for its length.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr() as *const libc::c_void, frame.len(), 0) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Receives one frame without waiting: its length (bytes copied into `buf`,
    /// the rest of a longer frame cut off) and its packet type (`PACKET_HOST`,
    /// `PACKET_MULTICAST`, `PACKET_OUTGOING`, ...); `None` when nothing waits.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, u8)>> {
        // SAFETY: an all-zero sockaddr_ll is valid; it is only written by the kernel.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: buf is writable for its length, from/len describe a live sockaddr_ll.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT,
                &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                &mut len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some((n as usize, from.sll_pkttype)))
    }

    /// Sets up and maps a receive and a send ring.
    pub fn map_rings(&self, rx: RingGeometry, tx: RingGeometry) -> io::Result<Rings> {
        self.set_option(libc::SOL_PACKET, libc::PACKET_RX_RING, &rx.request())?;
        self.set_option(libc::SOL_PACKET, libc::PACKET_TX_RING, &tx.request())?;
        let len = rx.bytes() + tx.bytes();
        // SAFETY: mapping the socket's rings as the kernel documents (RX then TX).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Rings { base: base as *mut u8, len, rx, tx })
    }

    /// The descriptor, for `ppoll`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The shape of one ring: slot size and count, in blocks of whole pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per slot (a power of two ≥ 2048 here).
    pub frame_size: usize,
    /// Number of slots.
    pub frames: usize,
    /// Bytes per block (whole pages; computed once, not per frame).
    block_size: usize,
    /// Slots per block.
    per_block: usize,
}

impl RingGeometry {
    /// Slots big enough for frames of `max_frame` bytes, `frames` of them
    /// (rounded up to fill whole blocks).
    pub fn for_frames(max_frame: usize, frames: usize) -> RingGeometry {
        let frame_size = (max_frame + 128).next_power_of_two().max(2048);
        let block_size = page_size().max(frame_size);
        let per_block = block_size / frame_size;
        let frames = frames.max(1).div_ceil(per_block) * per_block;
        RingGeometry { frame_size, frames, block_size, per_block }
    }

    fn block_size(&self) -> usize {
        self.block_size
    }

    fn per_block(&self) -> usize {
        self.per_block
    }

    fn request(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: self.block_size() as u32,
            tp_block_nr: (self.frames / self.per_block()) as u32,
            tp_frame_size: self.frame_size as u32,
            tp_frame_nr: self.frames as u32,
        }
    }

    fn bytes(&self) -> usize {
        self.frames / self.per_block() * self.block_size()
    }

    fn slot_offset(&self, slot: usize) -> usize {
        slot / self.per_block() * self.block_size() + slot % self.per_block() * self.frame_size
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// A received frame in the receive ring.
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// The captured bytes, from the Ethernet header on.
    pub data: &'a [u8],
    /// The frame's length on the wire (more than `data` if the slot was too small).
    pub wire_len: usize,
    /// The kernel's packet type (`crate::filter::pkttype`).
    pub packet_type: u32,
}

/// The mmap'd receive and send rings of one socket.
#[derive(Debug)]
pub struct Rings {
    base: *mut u8,
    len: usize,
    rx: RingGeometry,
    tx: RingGeometry,
}

// SAFETY: the mapping is owned by this value alone; moving it to another thread is sound.
unsafe impl Send for Rings {}

impl Rings {
    fn status(&self, slot_addr: *mut u8) -> &AtomicU32 {
        // SAFETY: every slot starts with the 4-byte-aligned tp_status word, inside the mapping.
        unsafe { AtomicU32::from_ptr(slot_addr as *mut u32) }
    }

    fn rx_slot(&self, slot: usize) -> *mut u8 {
        assert!(slot < self.rx.frames);
        // SAFETY: the offset lies inside the receive ring.
        unsafe { self.base.add(self.rx.slot_offset(slot)) }
    }

    fn tx_slot(&self, slot: usize) -> *mut u8 {
        assert!(slot < self.tx.frames);
        // SAFETY: the send ring follows the receive ring inside the mapping.
        unsafe { self.base.add(self.rx.bytes() + self.tx.slot_offset(slot)) }
    }

    /// Number of receive slots.
    pub fn rx_slots(&self) -> usize {
        self.rx.frames
    }

    /// Number of send slots.
    pub fn tx_slots(&self) -> usize {
        self.tx.frames
    }

    /// Largest frame a send slot holds.
    pub fn tx_capacity(&self) -> usize {
        self.tx.frame_size - TX_DATA_OFFSET
    }

    /// The frame in receive slot `slot`, if the kernel has handed it to user space.
    pub fn rx_frame(&self, slot: usize) -> Option<RxFrame<'_>> {
        let addr = self.rx_slot(slot);
        if self.status(addr).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: user space owns the slot (status acquired above); the header
        // and the snaplen bytes at tp_mac were written by the kernel inside the slot.
        unsafe {
            let hdr = std::ptr::read(addr as *const libc::tpacket2_hdr);
            let mac = (hdr.tp_mac as usize).min(self.rx.frame_size);
            let snap = (hdr.tp_snaplen as usize).min(self.rx.frame_size - mac);
            Some(RxFrame {
                data: std::slice::from_raw_parts(addr.add(mac), snap),
                wire_len: hdr.tp_len as usize,
                packet_type: *addr.add(RX_PKTTYPE_OFFSET) as u32,
            })
        }
    }

    /// Hands receive slot `slot` back to the kernel.
    pub fn rx_release(&mut self, slot: usize) {
        let addr = self.rx_slot(slot);
        self.status(addr).store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }

    /// The status word of send slot `slot` (`TP_STATUS_AVAILABLE`, `_SEND_REQUEST`,
    /// `_SENDING` or `_WRONG_FORMAT`).
    pub fn tx_status(&self, slot: usize) -> u32 {
        self.status(self.tx_slot(slot)).load(Ordering::Acquire)
    }

    /// The data area of send slot `slot`, if user space owns it (status available).
    pub fn tx_buffer(&mut self, slot: usize) -> Option<&mut [u8]> {
        let addr = self.tx_slot(slot);
        if self.status(addr).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            return None;
        }
        // SAFETY: the slot is available, so the kernel does not touch it until
        // tx_submit; &mut self prevents a second live borrow.
        Some(unsafe { std::slice::from_raw_parts_mut(addr.add(TX_DATA_OFFSET), self.tx_capacity()) })
    }

    /// Marks send slot `slot` for sending with a frame of `len` bytes.
    pub fn tx_submit(&mut self, slot: usize, len: usize) {
        let addr = self.tx_slot(slot);
        // SAFETY: the slot is owned by user space (the caller just filled it).
        unsafe { (*(addr as *mut libc::tpacket2_hdr)).tp_len = len as u32 };
        self.status(addr).store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
    }

}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: base/len is our mapping; nothing borrows it past &mut self.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A second descriptor of the same open socket or file (close-on-exec).
pub fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC reads no memory; a failure is reported by -1.
    let new = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: `new` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// An `eventfd`: a counter another thread can make readable, to wake a poll.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A non-blocking, close-on-exec eventfd at 0.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; a failure is reported by -1.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Makes it readable.
    pub fn signal(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            // EAGAIN: the counter is saturated, so it is readable already.
            return if err.kind() == io::ErrorKind::WouldBlock { Ok(()) } else { Err(err) };
        }
        Ok(())
    }

    /// Resets it to 0; true if it had been signalled.
    pub fn clear(&self) -> bool {
        let mut value = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), value.as_mut_ptr().cast(), value.len()) };
        n == 8
    }

    /// The descriptor, for [`poll_readable`].
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The most descriptors [`poll_readable`] watches at once.
pub const POLL_MAX: usize = 16;

/// Waits until one of `fds` (at most [`POLL_MAX`]) is readable or `timeout`
/// passes (`None`: forever). Returns whether any was readable. EINTR counts
/// as "not yet".
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<bool> {
    let mut pollfds: [libc::pollfd; POLL_MAX] = [libc::pollfd { fd: -1, events: 0, revents: 0 }; POLL_MAX];
    let n = fds.len().min(pollfds.len());
    for (p, &fd) in pollfds.iter_mut().zip(fds) {
        *p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    }
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pollfds holds n valid entries; ts_ptr is null or points to a live timespec.
    let ret = unsafe { libc::ppoll(pollfds.as_mut_ptr(), n as libc::nfds_t, ts_ptr, std::ptr::null()) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::EINTR) { Ok(false) } else { Err(err) };
    }
    Ok(ret > 0)
}

/// Facts about one network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Kernel interface index.
    pub index: u32,
    /// Hardware address.
    pub mac: [u8; 6],
    /// MTU in bytes.
    pub mtu: usize,
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data.
    let mut req: libc::ifreq = unsafe { zeroed() };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"));
    }
    for (d, &s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// Looks up an interface of the calling thread's network namespace.
/// `Ok(None)` when there is no such interface.
pub fn interface_info(name: &str) -> io::Result<Option<InterfaceInfo>> {
    let Ok(cname) = CString::new(name) else { return Ok(None) };
    // SAFETY: cname is a valid C string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Ok(None);
    }
    // SAFETY: plain syscall; the descriptor is owned below.
    let fd = check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh descriptor.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = ifreq_for(name)?;
    // SAFETY: req is a valid ifreq for these requests.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
    let mut mac = [0u8; 6];
    // SAFETY: SIOCGIFHWADDR filled ifru_hwaddr.
    let sa_data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    for (m, &b) in mac.iter_mut().zip(sa_data.iter()) {
        *m = b as u8;
    }
    let mut req = ifreq_for(name)?;
    // SAFETY: as above.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) })?;
    // SAFETY: SIOCGIFMTU filled ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu } as usize;
    Ok(Some(InterfaceInfo { index, mac, mtu }))
}

/// Names of the interfaces of the calling thread's network namespace.
pub fn interface_names() -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: if_nameindex returns an array terminated by a zero entry, freed below.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return names;
        }
        let mut p = list;
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            names.push(std::ffi::CStr::from_ptr((*p).if_name).to_string_lossy().into_owned());
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    names
}

/// Tries to take an exclusive POSIX record lock (`fcntl F_SETLK`) on the whole
/// of `file` without blocking. Such a lock belongs to the process: a child
/// forked by another thread does not share it (an `flock` would stay held by
/// the child until it execs). `Ok(None)` when locked; `Ok(Some(pid))` when
/// another process holds it (pid 0 if the kernel cannot say).
pub fn try_lock_record(file: &File) -> io::Result<Option<i32>> {
    // SAFETY: flock is plain data; zero is valid.
    let mut lock: libc::flock = unsafe { zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: plain fcntl on a live descriptor with a valid flock.
    match check(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) }) {
        Ok(_) => Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EAGAIN)) => {
            Ok(Some(record_lock_holder(file).ok().flatten().unwrap_or(0)))
        }
        Err(e) => Err(e),
    }
}

/// The process holding a record lock on `file`, if another process holds one
/// (pid 0 if the kernel cannot say). Only asks: takes no lock.
pub fn record_lock_holder(file: &File) -> io::Result<Option<i32>> {
    // SAFETY: flock is plain data; zero is valid.
    let mut lock: libc::flock = unsafe { zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: plain fcntl on a live descriptor; F_GETLK fills in a conflicting lock.
    check(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock) })?;
    Ok((lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_pid))
}

/// The inode of the calling thread's network namespace: two threads are in the
/// same namespace exactly when these are equal.
pub fn current_netns_id() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// While alive, the calling thread is in another network namespace; dropping
/// it returns the thread to the namespace it came from. Sockets opened
/// meanwhile stay in the namespace they were opened in.
#[derive(Debug)]
pub struct NetnsGuard {
    previous: File,
    // The guard must be dropped on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl NetnsGuard {
    /// Moves the calling thread into the namespace at `path` (e.g.
    /// `/var/run/netns/NAME`). Needs CAP_SYS_ADMIN.
    pub fn enter(path: &Path) -> io::Result<NetnsGuard> {
        let previous = File::open("/proc/thread-self/ns/net")?;
        let target = File::open(path)?;
        // SAFETY: plain syscall on live descriptors.
        check(unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) })?;
        Ok(NetnsGuard { previous, _not_send: std::marker::PhantomData })
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        // SAFETY: plain syscall on a live descriptor. Failure would leave the
        // thread in the other namespace, which must not go unnoticed.
        let ret = unsafe { libc::setns(self.previous.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(ret, 0, "could not return to the original network namespace: {}", io::Error::last_os_error());
    }
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cpu number out of range"));
        }
        libc::CPU_SET(cpu, &mut set);
        check(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set))?;
    }
    Ok(())
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_geometry_fills_whole_blocks_and_fits_the_mtu() {
        let g = RingGeometry::for_frames(1514, 100);
        assert_eq!(g.frame_size, 2048);
        assert_eq!(g.frames % g.per_block(), 0);
        assert!(g.frames >= 100);
        assert_eq!(g.bytes(), g.frames * g.frame_size);
        let jumbo = RingGeometry::for_frames(9018, 10);
        assert_eq!(jumbo.frame_size, 16384);
        assert_eq!(jumbo.slot_offset(3), 3 * 16384);
        assert!(jumbo.frame_size - TX_DATA_OFFSET >= 9018);
    }

    #[test]
    fn loopback_interface_is_found_and_nonsense_is_not() {
        let lo = interface_info("lo").unwrap().expect("lo exists");
        assert!(lo.mtu >= 1500);
        assert_eq!(interface_info("no-such-if0").unwrap(), None);
        assert!(interface_names().iter().any(|n| n == "lo"));
    }
}
