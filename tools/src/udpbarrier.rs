//! The baseline a programmer writes without mcd: a dissemination barrier over
//! plain UDP sockets. Round r of every barrier sends one datagram to node
//! `me + 2^r` and waits for the one from `me - 2^r` (mod n). Messages that
//! arrive early (a later round or barrier) are kept. No loss recovery: a lost
//! datagram shows up as a timeout.
//!
//! It waits the way mcd's adaptive policy does, so that the comparison is of
//! the transport and not of the waiting: spin on a non-blocking socket while
//! nodes ≤ cores, otherwise `sched_yield` between polls.

use std::collections::HashSet;
use std::io;
use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use crate::barrierbench::{BarrierBench, BarrierMeasurement};
use crate::vcluster::Cluster;

/// The UDP port the barrier uses in every namespace.
pub const UDP_BARRIER_PORT: u16 = 47002;
/// How long one round may wait before the barrier reports a lost datagram.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// One node's UDP dissemination barrier.
pub struct UdpDissemination {
    socket: UdpSocket,
    peers: Vec<SocketAddrV4>,
    me: usize,
    epoch: u32,
    /// (epoch, round) pairs received and not yet waited for.
    early: HashSet<(u32, u8)>,
    yield_between_polls: bool,
}

impl UdpDissemination {
    /// Binds `peers[me]` (the address of this node, in the calling thread's
    /// network namespace). `yield_between_polls`: `sched_yield` while waiting.
    pub fn bind(me: usize, peers: Vec<SocketAddrV4>, yield_between_polls: bool) -> io::Result<UdpDissemination> {
        let socket = UdpSocket::bind(peers[me])?;
        socket.set_nonblocking(true)?;
        Ok(UdpDissemination { socket, peers, me, epoch: 0, early: HashSet::new(), yield_between_polls })
    }

    /// One barrier.
    pub fn wait(&mut self) -> Result<()> {
        let n = self.peers.len();
        self.epoch = self.epoch.wrapping_add(1);
        let mut distance = 1;
        let mut round = 0u8;
        while distance < n {
            let mut msg = [0u8; 5];
            msg[..4].copy_from_slice(&self.epoch.to_le_bytes());
            msg[4] = round;
            self.socket.send_to(&msg, self.peers[(self.me + distance) % n]).context("UDP send")?;
            self.await_message(round)?;
            distance *= 2;
            round += 1;
        }
        Ok(())
    }

    fn await_message(&mut self, round: u8) -> Result<()> {
        let key = (self.epoch, round);
        let start = Instant::now();
        let mut buf = [0u8; 16];
        while !self.early.remove(&key) {
            match self.socket.recv(&mut buf) {
                Ok(5) => {
                    let epoch = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
                    self.early.insert((epoch, buf[4]));
                }
                Ok(_) => {} // not ours
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if start.elapsed() > ROUND_TIMEOUT {
                        return Err(anyhow!("node {}: no UDP message for barrier {} round {round}", self.me, self.epoch));
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
        Ok(())
    }
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
            UdpDissemination::bind(node, peers.clone(), n > cores).with_context(|| format!("binding UDP on node {node}"))
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
    let nodes = threads
        .into_iter()
        .map(|t| t.join().map_err(|_| anyhow!("a UDP barrier thread panicked"))?)
        .collect::<Result<Vec<_>>>()?;
    Ok(bench.summarize("udp-dissemination", 1, &nodes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn loopback_nodes_pass_barriers_in_step() {
        // Three nodes on 127.0.0.1 with distinct ports: every barrier completes.
        let base = 47100 + (std::process::id() % 500) as u16 * 3;
        let peers: Vec<SocketAddrV4> = (0..3).map(|i| SocketAddrV4::new(Ipv4Addr::LOCALHOST, base + i)).collect();
        let handles: Vec<_> = (0..3)
            .map(|me| {
                let mut b = UdpDissemination::bind(me, peers.clone(), true).expect("bind");
                std::thread::spawn(move || (0..200).try_for_each(|_| b.wait()))
            })
            .collect();
        for h in handles {
            h.join().expect("thread").expect("barriers");
        }
    }
}
