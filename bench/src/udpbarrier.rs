//! The baseline a programmer writes without mcd: a group of nodes talking
//! over plain UDP sockets ([`UdpGroup`]), and on it a dissemination barrier.
//! Round r of every barrier sends one datagram to node `me + 2^r` and waits
//! for the one from `me - 2^r` (mod n). [`crate::udpcollectives`] adds an
//! allreduce and a broadcast on the same group.
//!
//! Every call of the group (barrier or collective) is one epoch, the same on
//! every node, since every node makes the same calls in the same order (as
//! MPI requires). A datagram carries its epoch, its step within the call and
//! the call's kind, then data. Datagrams that arrive early (a later step or
//! call) wait in a table of slots allocated when the group is bound, indexed
//! by epoch and step: no allocation or hashing per datagram. No loss
//! recovery: a lost datagram shows up as a timeout.
//!
//! It waits the way mcd's adaptive policy does, so that the comparison is of
//! the transport and not of the waiting: spin on a non-blocking socket while
//! nodes ≤ cores, otherwise `sched_yield` between polls.

use std::io;
use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::barrierbench::{BarrierBench, BarrierMeasurement};
use mcd_vcluster::Cluster;

/// The UDP port the barrier uses in every namespace.
pub const UDP_BARRIER_PORT: u16 = 47002;
/// How long one step may wait before the call reports a lost datagram.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`UdpGroup::start`] waits for every node.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The kind bytes of [`UdpGroup::start`]'s datagrams (no call's: a call
/// that meets one late ignores it).
const HELLO: u8 = 0x48;
const GO: u8 = 0x47;
/// A datagram's header as it lies on the wire, before its data (a plain
/// struct of bytes, the epoch big-endian, as mcd's headers).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RawHeader {
    epoch: [u8; 4],
    step: u8,
    /// A [`CallKind`], or [`HELLO`] / [`GO`].
    kind: u8,
}

impl RawHeader {
    fn new(epoch: u32, step: usize, kind: u8) -> RawHeader {
        RawHeader { epoch: epoch.to_be_bytes(), step: step as u8, kind }
    }

    /// The header of `datagram`; `None` if it is shorter than one.
    fn of(datagram: &[u8]) -> Option<&RawHeader> {
        datagram.get(..HEADER_LEN).map(bytemuck::from_bytes)
    }
}

/// Bytes before the data: [`RawHeader`].
pub(crate) const HEADER_LEN: usize = std::mem::size_of::<RawHeader>();
/// Steps of one call at most: a barrier's ⌈log₂ n⌉ rounds, or an
/// allreduce's log₂ rounds plus its fold and unfold, for up to 64 nodes.
pub(crate) const MAX_STEPS: usize = 8;
/// The most nodes a group has (what the 8 steps of a call at most allow).
pub const MAX_NODES: usize = 64;
/// Broadcasts in flight at most: every this many, the broadcast of
/// [`crate::udpcollectives`] ends with a barrier.
pub const BCAST_WINDOW: usize = 16;
/// Calls whose datagrams can be in the slot table at once: how far a node
/// can run ahead of another (one call for a barrier or an allreduce, which
/// nobody leaves before all entered; up to [`BCAST_WINDOW`] broadcasts,
/// which the root leaves at once), with room to spare.
pub(crate) const EPOCH_WINDOW: usize = BCAST_WINDOW + 4;

/// What a datagram belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CallKind {
    Barrier = 1,
    Allreduce = 2,
    Bcast = 3,
}

impl CallKind {
    fn name(self) -> &'static str {
        match self {
            CallKind::Barrier => "barrier",
            CallKind::Allreduce => "allreduce",
            CallKind::Bcast => "bcast",
        }
    }

    fn from_byte(b: u8) -> Option<CallKind> {
        [CallKind::Barrier, CallKind::Allreduce, CallKind::Bcast].into_iter().find(|k| *k as u8 == b)
    }
}

/// A datagram received before its step was waited for.
struct Slot {
    /// Whose datagram the slot holds (the epoch), when full.
    epoch: u32,
    kind: CallKind,
    /// Data bytes held; `None`: empty.
    len: Option<usize>,
    data: Box<[u8]>,
}

/// One node's end of a group of nodes over UDP: a socket, the peers'
/// addresses, the call counter and the table of early datagrams.
pub struct UdpGroup {
    socket: UdpSocket,
    pub(crate) peers: Vec<SocketAddrV4>,
    me: usize,
    /// The current call's epoch.
    pub(crate) epoch: u32,
    /// [`EPOCH_WINDOW`] × [`MAX_STEPS`] slots: (epoch mod window, step).
    slots: Vec<Slot>,
    max_data: usize,
    send_buf: Box<[u8]>,
    recv_buf: Box<[u8]>,
    yield_between_polls: bool,
    /// Broadcasts made (every [`BCAST_WINDOW`]th ends with a barrier).
    pub(crate) bcasts: u64,
}

impl UdpGroup {
    /// Binds `peers[me]` (the address of this node, in the calling thread's
    /// network namespace), for calls of up to `max_data` bytes of data.
    /// `yield_between_polls`: `sched_yield` while waiting.
    pub fn bind(me: usize, peers: Vec<SocketAddrV4>, max_data: usize, yield_between_polls: bool) -> Result<UdpGroup> {
        check_group(me, peers.len(), max_data)?;
        let socket = UdpSocket::bind(peers[me]).with_context(|| format!("binding UDP {} for node {me}", peers[me]))?;
        UdpGroup::with_socket(me, socket, peers, max_data, yield_between_polls)
    }

    /// As [`Self::bind`], on a socket already bound to `peers[me]`.
    pub fn with_socket(me: usize, socket: UdpSocket, peers: Vec<SocketAddrV4>, max_data: usize, yield_between_polls: bool) -> Result<UdpGroup> {
        check_group(me, peers.len(), max_data)?;
        socket.set_nonblocking(true)?;
        let slots = (0..EPOCH_WINDOW * MAX_STEPS)
            .map(|_| Slot { epoch: 0, kind: CallKind::Barrier, len: None, data: vec![0; max_data].into_boxed_slice() })
            .collect();
        Ok(UdpGroup {
            socket,
            peers,
            me,
            epoch: 0,
            slots,
            max_data,
            send_buf: vec![0; HEADER_LEN + max_data].into_boxed_slice(),
            // One byte more than the largest datagram, to see a longer one.
            recv_buf: vec![0; HEADER_LEN + max_data + 1].into_boxed_slice(),
            yield_between_polls,
            bcasts: 0,
        })
    }

    /// This node's number.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// The nodes in the group.
    pub fn size(&self) -> usize {
        self.peers.len()
    }

    /// The most data bytes one call carries.
    pub fn max_data(&self) -> usize {
        self.max_data
    }

    /// Waits until every node of the group has bound its socket, for
    /// nodes that are processes started one by one (a datagram to a port
    /// not yet bound is lost): every node says hello to node 0 each
    /// millisecond until node 0, having heard from all, says go. Datagrams
    /// of the first call that arrive meanwhile are kept.
    pub fn start(&mut self) -> Result<()> {
        let n = self.peers.len();
        let deadline = Instant::now() + START_TIMEOUT;
        let mut heard = vec![false; n];
        heard[0] = true;
        let mut last_hello: Option<Instant> = None;
        // A hello: the header, then this node's number (u16, big-endian).
        let mut hello = [0u8; HEADER_LEN + 2];
        hello[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&RawHeader::new(0, 0, HELLO)));
        hello[HEADER_LEN..].copy_from_slice(&(self.me as u16).to_be_bytes());
        loop {
            if self.me == 0 && heard.iter().all(|h| *h) {
                let go = RawHeader::new(0, 0, GO);
                for peer in &self.peers[1..] {
                    self.socket.send_to(bytemuck::bytes_of(&go), peer).context("UDP send")?;
                }
                return Ok(());
            }
            if self.me != 0 && last_hello.is_none_or(|t| t.elapsed() >= Duration::from_millis(1)) {
                self.socket.send_to(&hello, self.peers[0]).context("UDP send")?;
                last_hello = Some(Instant::now());
            }
            let got = self.socket.recv(&mut self.recv_buf);
            let kind = got.as_ref().ok().and_then(|&got| RawHeader::of(&self.recv_buf[..got])).map(|h| h.kind);
            match got {
                Ok(_) if kind == Some(GO) && self.me != 0 => return Ok(()),
                Ok(got) if got == HEADER_LEN + 2 && kind == Some(HELLO) => {
                    let from = u16::from_be_bytes([self.recv_buf[HEADER_LEN], self.recv_buf[HEADER_LEN + 1]]) as usize;
                    if let Some(h) = heard.get_mut(from) {
                        *h = true;
                    }
                }
                Ok(got) => self.keep(got)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline && self.me == 0 {
                        let missing: Vec<usize> = (0..n).filter(|&i| !heard[i]).collect();
                        bail!("node 0: the UDP group did not start within {START_TIMEOUT:?}: nothing from nodes {missing:?}");
                    } else if Instant::now() > deadline {
                        bail!("node {}: the UDP group did not start within {START_TIMEOUT:?}: no go from node 0", self.me);
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(e).context("UDP receive"),
            }
        }
    }

    /// One barrier.
    pub fn wait(&mut self) -> Result<()> {
        self.barrier()
    }

    /// One dissemination barrier: ⌈log₂ n⌉ rounds.
    pub fn barrier(&mut self) -> Result<()> {
        let n = self.peers.len();
        self.epoch = self.epoch.wrapping_add(1);
        let mut distance = 1;
        let mut round = 0;
        while distance < n {
            self.send((self.me + distance) % n, round, CallKind::Barrier, |_| {}, 0)?;
            let slot = self.receive(round, CallKind::Barrier, 0)?;
            self.release(slot);
            distance *= 2;
            round += 1;
        }
        Ok(())
    }

    /// Sends this epoch's datagram of `step` to node `to`, its `len` data
    /// bytes written by `fill`.
    pub(crate) fn send(&mut self, to: usize, step: usize, kind: CallKind, fill: impl FnOnce(&mut [u8]), len: usize) -> Result<()> {
        debug_assert!(step < MAX_STEPS && len <= self.max_data);
        self.send_buf[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&RawHeader::new(self.epoch, step, kind as u8)));
        fill(&mut self.send_buf[HEADER_LEN..HEADER_LEN + len]);
        self.socket.send_to(&self.send_buf[..HEADER_LEN + len], self.peers[to]).context("UDP send")?;
        Ok(())
    }

    fn slot_index(epoch: u32, step: usize) -> usize {
        (epoch as usize % EPOCH_WINDOW) * MAX_STEPS + step
    }

    /// Waits for this epoch's datagram of `step`, which must be of `kind`
    /// with `len` data bytes; returns its slot ([`Self::data`] reads it,
    /// [`Self::release`] frees it).
    pub(crate) fn receive(&mut self, step: usize, kind: CallKind, len: usize) -> Result<usize> {
        let index = Self::slot_index(self.epoch, step);
        let start = Instant::now();
        loop {
            let slot = &self.slots[index];
            if slot.len.is_some() && slot.epoch == self.epoch {
                if slot.kind != kind || slot.len != Some(len) {
                    bail!(
                        "node {}: call {} step {step} is a {} of {len} bytes here, but a peer sent a {} of {} bytes (the nodes' calls differ)",
                        self.me,
                        self.epoch,
                        kind.name(),
                        slot.kind.name(),
                        slot.len.unwrap_or(0)
                    );
                }
                return Ok(index);
            }
            match self.socket.recv(&mut self.recv_buf) {
                Ok(got) => self.keep(got)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if start.elapsed() > ROUND_TIMEOUT {
                        return Err(anyhow!("node {}: no UDP datagram for {} {} step {step}", self.me, kind.name(), self.epoch));
                    }
                    if self.yield_between_polls {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Err(e) => return Err(e).context("UDP receive"),
            }
        }
    }

    /// Files the `got`-byte datagram in the receive buffer into its slot.
    fn keep(&mut self, got: usize) -> Result<()> {
        let Some(head) = RawHeader::of(&self.recv_buf[..got]) else {
            return Ok(()); // not ours
        };
        let epoch = u32::from_be_bytes(head.epoch);
        let (step, kind) = (head.step as usize, CallKind::from_byte(head.kind));
        let Some(kind) = kind.filter(|_| step < MAX_STEPS) else {
            return Ok(()); // not ours
        };
        // Only this call or the next few can still be waited for.
        let ahead = epoch.wrapping_sub(self.epoch) as usize;
        if ahead >= EPOCH_WINDOW - 1 {
            bail!("node {}: a datagram of call {epoch} while at call {}: outside the window of {EPOCH_WINDOW} calls", self.me, self.epoch);
        }
        let len = got - HEADER_LEN;
        if len > self.max_data {
            bail!("node {}: a datagram of {len} data bytes, more than the group's {}", self.me, self.max_data);
        }
        let slot = &mut self.slots[Self::slot_index(epoch, step)];
        if slot.len.is_some() {
            bail!("node {}: two datagrams for call {epoch} step {step} (or one {} calls old never taken)", self.me, EPOCH_WINDOW);
        }
        slot.data[..len].copy_from_slice(&self.recv_buf[HEADER_LEN..got]);
        slot.epoch = epoch;
        slot.kind = kind;
        slot.len = Some(len);
        Ok(())
    }

    /// The data of a slot [`Self::receive`] returned.
    pub(crate) fn data(&self, slot: usize) -> &[u8] {
        &self.slots[slot].data[..self.slots[slot].len.unwrap_or(0)]
    }

    /// Frees a slot [`Self::receive`] returned.
    pub(crate) fn release(&mut self, slot: usize) {
        self.slots[slot].len = None;
    }
}

/// Whether node `me` of `n`, with calls of `max_data` bytes, makes a group.
fn check_group(me: usize, n: usize, max_data: usize) -> Result<()> {
    if n == 0 || n > MAX_NODES {
        bail!("a UDP group has 1 to {MAX_NODES} nodes, not {n}");
    }
    if me >= n {
        bail!("node {me} is not in a group of {n}");
    }
    // One datagram, whatever IP fragments it into.
    const MAX_DATAGRAM: usize = 65_507;
    if max_data > MAX_DATAGRAM - HEADER_LEN {
        bail!("{max_data} bytes do not fit in one UDP datagram (at most {})", MAX_DATAGRAM - HEADER_LEN);
    }
    Ok(())
}

/// Measures the UDP dissemination barrier on every node of `cluster` (rail 0),
/// one thread per node in its namespace, pinned while nodes ≤ cores; the same
/// loop and statistics as [`crate::barrierbench::measure`].
pub fn measure(cluster: &Cluster, bench: BarrierBench) -> Result<BarrierMeasurement> {
    let n = cluster.nodes();
    let cores = mcd::host::online_cpus();
    let peers: Vec<SocketAddrV4> = (0..n).map(|i| SocketAddrV4::new(cluster.ip(i, 0), UDP_BARRIER_PORT)).collect();
    let barriers = (0..n)
        .map(|node| {
            let _ns = cluster.enter(node)?;
            UdpGroup::bind(node, peers.clone(), 0, n > cores).with_context(|| format!("binding UDP on node {node}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let threads: Vec<_> = barriers
        .into_iter()
        .map(|mut b| {
            std::thread::spawn(move || {
                if n <= cores {
                    let _ = mcd::host::pin_current_thread(b.me);
                }
                bench.time_node(|| b.wait())
            })
        })
        .collect();
    let nodes = threads.into_iter().map(|t| t.join().map_err(|_| anyhow!("a UDP barrier thread panicked"))?).collect::<Result<Vec<_>>>()?;
    Ok(bench.summarize("udp-dissemination", 1, &nodes))
}

/// A group of `n` nodes on 127.0.0.1, on ports the kernel picks, for tests
/// without namespaces.
#[cfg(test)]
pub(crate) fn loopback_group(n: usize, max_data: usize) -> Vec<UdpGroup> {
    let sockets: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind")).collect();
    let peers: Vec<SocketAddrV4> = sockets
        .iter()
        .map(|s| match s.local_addr().expect("address") {
            std::net::SocketAddr::V4(a) => a,
            other => panic!("{other} is not IPv4"),
        })
        .collect();
    sockets.into_iter().enumerate().map(|(me, s)| UdpGroup::with_socket(me, s, peers.clone(), max_data, true).expect("group")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_nodes_pass_barriers_in_step() {
        // Three nodes on 127.0.0.1 with distinct ports: every barrier completes,
        // and none lets a node out before every node entered it.
        let handles: Vec<_> = loopback_group(3, 0)
            .into_iter()
            .map(|mut b| {
                std::thread::spawn(move || {
                    let mut timeline = barriers::check::Timeline::default();
                    for _ in 0..200 {
                        let entered = Instant::now();
                        b.wait()?;
                        timeline.record(entered, Instant::now());
                    }
                    anyhow::Ok(timeline)
                })
            })
            .collect();
        let timelines: Vec<_> = handles.into_iter().map(|h| h.join().expect("thread").expect("barriers")).collect();
        let (violations, checked) = barriers::check::check(&timelines);
        assert_eq!(checked, 200);
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn bad_groups_are_refused_with_a_reason() {
        let peers = vec![SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0); 2];
        let socket = || UdpSocket::bind("127.0.0.1:0").expect("bind");
        let e = UdpGroup::with_socket(2, socket(), peers.clone(), 0, true).err().expect("node 2 of 2");
        assert!(e.to_string().contains("not in a group of 2"), "{e}");
        let e = UdpGroup::with_socket(0, socket(), peers.clone(), 70_000, true).err().expect("70,000 bytes");
        assert!(e.to_string().contains("do not fit in one UDP datagram"), "{e}");
        let e = UdpGroup::with_socket(0, socket(), Vec::new(), 0, true).err().expect("no nodes");
        assert!(e.to_string().contains("1 to 64 nodes"), "{e}");
        // Refused before anything is bound.
        let e = UdpGroup::bind(3, peers, 0, true).err().expect("node 3 of 2");
        assert!(e.to_string().contains("not in a group of 2"), "{e}");
    }
}
