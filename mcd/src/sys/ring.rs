//! The mmap'd TPACKET_V2 receive and send rings of a packet socket.
//!
//! Ring safety: the ring memory is shared with the kernel. A slot belongs to
//! user space exactly while its status word says so (`TP_STATUS_USER` on the
//! receive ring, `TP_STATUS_AVAILABLE` on the send ring); the status is read
//! with acquire and written with release ordering, and slices into a slot are
//! only handed out while user space owns it and only for the borrow of
//! [`Rings`]. A send slot is written only through a [`TxSlot`], which exists
//! only for a slot found available.

use std::sync::atomic::{AtomicU32, Ordering};

/// Offset of the frame data in a send-ring slot: TPACKET2_HDRLEN - sizeof(sockaddr_ll).
const TX_DATA_OFFSET: usize = 32;
/// Offset of `sll_pkttype` in a receive-ring slot (the sockaddr_ll follows the aligned header).
const RX_PKTTYPE_OFFSET: usize = 32 + 10;

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

    /// The `PACKET_RX_RING` / `PACKET_TX_RING` request for this shape.
    pub(super) fn request(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: self.block_size as u32,
            tp_block_nr: (self.frames / self.per_block) as u32,
            tp_frame_size: self.frame_size as u32,
            tp_frame_nr: self.frames as u32,
        }
    }

    /// Bytes of the ring in the mapping.
    pub(super) fn bytes(&self) -> usize {
        self.frames / self.per_block * self.block_size
    }

    fn slot_offset(&self, slot: usize) -> usize {
        slot / self.per_block * self.block_size + slot % self.per_block * self.frame_size
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
    /// The kernel's packet type (`sll_pkttype`: host, multicast, outgoing...).
    pub packet_type: u32,
    /// The kernel marked the slot `TP_STATUS_LOSING`: when it wrote this
    /// frame, the socket had dropped frames for want of ring space since
    /// its drop count was last read (`PACKET_STATISTICS`).
    pub losing: bool,
}

/// Where a send slot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxStatus {
    /// Owned by user space: free, or its frame has left.
    Available,
    /// Marked for sending, not yet taken by the kernel (a kick sends it).
    SendRequest,
    /// The kernel rejected the frame as malformed (`TP_STATUS_WRONG_FORMAT`).
    WrongFormat,
    /// The kernel is sending it.
    Sending,
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
    /// Takes ownership of the mapping at `base`, `len` bytes: the receive
    /// ring `rx`, then the send ring `tx`.
    ///
    /// # Safety
    ///
    /// `base..base + len` must be a live mapping of a packet socket's rings
    /// set up with these geometries, owned by nothing else.
    pub(super) unsafe fn from_mapping(base: *mut u8, len: usize, rx: RingGeometry, tx: RingGeometry) -> Rings {
        Rings { base, len, rx, tx }
    }

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
        let status = self.status(addr).load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
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
                losing: status & libc::TP_STATUS_LOSING != 0,
            })
        }
    }

    /// How many receive slots from `slot` on (in ring order) the kernel has
    /// handed to user space: the frames waiting to be read, if `slot` is
    /// the next to read.
    pub fn rx_ready_from(&self, slot: usize) -> usize {
        (0..self.rx.frames)
            .take_while(|k| self.status(self.rx_slot((slot + k) % self.rx.frames)).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0)
            .count()
    }

    /// Hands receive slot `slot` back to the kernel.
    pub fn rx_release(&mut self, slot: usize) {
        let addr = self.rx_slot(slot);
        self.status(addr).store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }

    /// Where send slot `slot` stands.
    pub fn tx_status(&self, slot: usize) -> TxStatus {
        match self.status(self.tx_slot(slot)).load(Ordering::Acquire) {
            libc::TP_STATUS_AVAILABLE => TxStatus::Available,
            libc::TP_STATUS_SEND_REQUEST => TxStatus::SendRequest,
            libc::TP_STATUS_WRONG_FORMAT => TxStatus::WrongFormat,
            _ => TxStatus::Sending,
        }
    }

    /// Send slot `slot`, to fill and submit, if user space owns it (status available).
    pub fn tx_claim(&mut self, slot: usize) -> Option<TxSlot<'_>> {
        let addr = self.tx_slot(slot);
        if self.status(addr).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            return None;
        }
        Some(TxSlot { capacity: self.tx_capacity(), addr, rings: self })
    }
}

/// A send slot that user space owns, claimed by [`Rings::tx_claim`]: fill
/// its [`buffer`](Self::buffer), then [`submit`](Self::submit) it.
#[derive(Debug)]
pub struct TxSlot<'a> {
    rings: &'a mut Rings,
    addr: *mut u8,
    capacity: usize,
}

impl TxSlot<'_> {
    /// The slot's data area ([`Rings::tx_capacity`] bytes).
    pub fn buffer(&mut self) -> &mut [u8] {
        // SAFETY: the slot was available when claimed, so the kernel does not
        // touch it until submit; the claim borrows the rings mutably, so no
        // other slice into the slot is live.
        unsafe { std::slice::from_raw_parts_mut(self.addr.add(TX_DATA_OFFSET), self.capacity) }
    }

    /// Marks the slot for sending with a frame of `len` bytes (at most the
    /// capacity) and gives it to the kernel.
    pub fn submit(self, len: usize) {
        let len = len.min(self.capacity) as u32;
        // SAFETY: user space owns the slot (claimed while available, and not
        // yet handed over); the header lies at its start, inside the mapping.
        unsafe { (*(self.addr as *mut libc::tpacket2_hdr)).tp_len = len };
        self.rings.status(self.addr).store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: base/len is our mapping; nothing borrows it past &mut self.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_geometry_fills_whole_blocks_and_fits_the_mtu() {
        let g = RingGeometry::for_frames(1514, 100);
        assert_eq!(g.frame_size, 2048);
        assert_eq!(g.frames % g.per_block, 0);
        assert!(g.frames >= 100);
        assert_eq!(g.bytes(), g.frames * g.frame_size);
        let jumbo = RingGeometry::for_frames(9018, 10);
        assert_eq!(jumbo.frame_size, 16384);
        assert_eq!(jumbo.slot_offset(3), 3 * 16384);
        assert!(jumbo.frame_size - TX_DATA_OFFSET >= 9018);
    }
}
