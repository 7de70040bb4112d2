//! Ping-pong: one-way latency (RTT/2) and ping-pong bandwidth against message
//! size, for mcd and for UDP sockets between the same two nodes, in one run
//! (the paper's Figures 2 and 3, with UDP beside them).
//!
//! Method: the client sends a message of `size` bytes and waits for the echo
//! of the same size; RTT/2 of each round trip goes into an hdrhistogram (ns).
//! Each measurement is `warmup` untimed round trips then `iterations` timed
//! ones. Transports alternate within every round (mcd size s, UDP size s, ...)
//! and rounds repeat, so that both see the same machine noise. Bandwidth is
//! `size / mean one-way time`. The echo side switches transport when the
//! client tells it to, so it never polls two sockets at once.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use mcd::{Destination, Endpoint, NodeId, WaitPolicy};
use serde::Serialize;

// Message kinds of the ping-pong protocol on mcd.
use mcd::kind::pingpong as kind;
/// The UDP datagram that sends the echo back to mcd.
const UDP_TO_MCD: &[u8] = b"\0mcd-pingpong:to-mcd";
/// A round trip not answered within this is counted lost and retried.
const REPLY_TIMEOUT: Duration = Duration::from_millis(200);

/// Which transport a measurement used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// mcd over raw Ethernet.
    Mcd,
    /// UDP sockets over the same interface.
    Udp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Mcd => "mcd",
            Transport::Udp => "udp",
        })
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct PingPongConfig {
    /// Payload sizes in bytes.
    pub sizes: Vec<usize>,
    /// Timed round trips per size, transport and round.
    pub iterations: usize,
    /// Untimed round trips before each measurement.
    pub warmup: usize,
    /// Rounds over all sizes and transports.
    pub rounds: usize,
    /// How both sides wait (for UDP: busy/yield spin on a non-blocking socket,
    /// block/adaptive-oversubscribed use a blocking one).
    pub wait: WaitPolicy,
    /// Also measure UDP.
    pub udp: bool,
}

impl Default for PingPongConfig {
    fn default() -> Self {
        PingPongConfig {
            sizes: vec![8, 64, 256, 512, 1024, 1472],
            iterations: 20_000,
            warmup: 1_000,
            rounds: 3,
            wait: WaitPolicy::BusyPoll,
            udp: true,
        }
    }
}

/// One transport at one size, all rounds merged.
#[derive(Clone, Debug, Serialize)]
pub struct SizeResult {
    /// The transport.
    pub transport: Transport,
    /// Payload bytes.
    pub size: usize,
    /// Timed round trips.
    pub iterations: u64,
    /// Round trips that got no reply within the timeout (retried, not timed).
    pub lost: u64,
    /// One-way latency, microseconds: minimum.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Ping-pong bandwidth: size / mean one-way time, MB/s (10^6 bytes/s).
    pub bandwidth_mb_s: f64,
}

fn result_of(transport: Transport, size: usize, hist: &Histogram<u64>, lost: u64) -> SizeResult {
    let us = |ns: u64| ns as f64 / 1000.0;
    let mean_us = hist.mean() / 1000.0;
    SizeResult {
        transport,
        size,
        iterations: hist.len(),
        lost,
        min_us: us(hist.min()),
        p50_us: us(hist.value_at_quantile(0.5)),
        p90_us: us(hist.value_at_quantile(0.9)),
        p99_us: us(hist.value_at_quantile(0.99)),
        p999_us: us(hist.value_at_quantile(0.999)),
        max_us: us(hist.max()),
        mean_us,
        bandwidth_mb_s: if mean_us > 0.0 { size as f64 / mean_us } else { 0.0 },
    }
}

/// Whether UDP should spin on a non-blocking socket under `wait`.
fn udp_spins(wait: WaitPolicy) -> bool {
    !matches!(wait, WaitPolicy::Block)
}

/// The client side of mcd's ping-pong against node `peer`.
pub struct Client<'a> {
    endpoint: &'a mut Endpoint,
    peer: NodeId,
    udp: Option<(UdpSocket, SocketAddr)>,
    seq: u32,
    buf: Vec<u8>,
}

impl<'a> Client<'a> {
    /// A client on `endpoint` talking to `peer`, and over UDP to `udp` (a
    /// socket bound on this node and the echo's address), if given.
    pub fn new(endpoint: &'a mut Endpoint, peer: NodeId, udp: Option<(UdpSocket, SocketAddr)>) -> Client<'a> {
        Client { endpoint, peer, udp, seq: 0, buf: vec![0u8; 65536] }
    }

    /// Runs the whole measurement; `progress` is called after each
    /// (round, size, transport) with a description.
    pub fn run(&mut self, config: &PingPongConfig, mut progress: impl FnMut(&str)) -> Result<Vec<SizeResult>> {
        let max = self.endpoint.max_payload(0)?;
        if let Some(&too_big) = config.sizes.iter().find(|&&s| s > max) {
            bail!("size {too_big} exceeds mcd's largest payload on this link ({max} bytes)");
        }
        if let Some((sock, _)) = &self.udp {
            sock.set_nonblocking(udp_spins(config.wait))?;
            sock.set_read_timeout(Some(REPLY_TIMEOUT))?;
        }
        self.await_echo()?;
        let new_hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
        let mut hists: Vec<(Transport, usize, Histogram<u64>, u64)> = Vec::new();
        for &size in &config.sizes {
            hists.push((Transport::Mcd, size, new_hist(), 0));
            if self.udp.is_some() && config.udp {
                hists.push((Transport::Udp, size, new_hist(), 0));
            }
        }
        for round in 0..config.rounds {
            for (transport, size, hist, lost) in hists.iter_mut() {
                match transport {
                    Transport::Mcd => {
                        *lost += self.measure_mcd(*size, config.warmup, config.iterations, hist)?;
                    }
                    Transport::Udp => {
                        self.endpoint.send(0, Destination::Node(self.peer), kind::TO_UDP, 0, b"")?;
                        *lost += self.measure_udp(*size, config.warmup, config.iterations, hist)?;
                        let (sock, peer) = self.udp.as_ref().expect("udp configured");
                        sock.send_to(UDP_TO_MCD, peer)?;
                        self.await_echo()?;
                    }
                }
                progress(&format!("round {}/{} {transport} {size} B", round + 1, config.rounds));
            }
        }
        self.endpoint.send(0, Destination::Node(self.peer), kind::QUIT, 0, b"")?;
        Ok(hists.iter().map(|(t, s, h, l)| result_of(*t, *s, h, *l)).collect())
    }

    /// Pings until the echo answers (it may still be starting, or switching back from UDP).
    fn await_echo(&mut self) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.round_trip_mcd(8)?.is_some() {
                return Ok(());
            }
        }
        bail!("no echo from node {} within 10 s: is the echo side running?", self.peer)
    }

    fn round_trip_mcd(&mut self, size: usize) -> Result<Option<Duration>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let start = Instant::now();
        self.endpoint.send(0, Destination::Node(self.peer), kind::PING, seq, &self.buf[..size])?;
        loop {
            match self.endpoint.recv(&mut self.buf, Some(REPLY_TIMEOUT))? {
                Some(m) if m.kind == kind::PONG && m.seq == seq && m.from == self.peer => {
                    return Ok(Some(start.elapsed()));
                }
                Some(_) => continue, // a late reply to an earlier ping
                None => return Ok(None),
            }
        }
    }

    fn measure_mcd(&mut self, size: usize, warmup: usize, iterations: usize, hist: &mut Histogram<u64>) -> Result<u64> {
        let mut lost = 0;
        let mut done = 0;
        while done < warmup + iterations {
            match self.round_trip_mcd(size)? {
                Some(rtt) => {
                    if done >= warmup {
                        hist.saturating_record((rtt.as_nanos() / 2) as u64);
                    }
                    done += 1;
                }
                None => lost += 1,
            }
        }
        Ok(lost)
    }

    fn measure_udp(&mut self, size: usize, warmup: usize, iterations: usize, hist: &mut Histogram<u64>) -> Result<u64> {
        let (sock, peer) = self.udp.as_ref().expect("udp configured");
        let size = size.max(4);
        let mut out = vec![0u8; size];
        let mut buf = [0u8; 65536];
        let mut lost = 0;
        let mut done = 0;
        let mut seq = 0u32;
        // The echo may still be switching over: the first pings may go unanswered.
        while done < warmup + iterations {
            seq = seq.wrapping_add(1);
            out[..4].copy_from_slice(&seq.to_be_bytes());
            let start = Instant::now();
            sock.send_to(&out, peer)?;
            let answered = loop {
                match sock.recv(&mut buf) {
                    Ok(n) if n >= 4 && buf[..4] == seq.to_be_bytes() => break true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                        if start.elapsed() > REPLY_TIMEOUT {
                            break false;
                        }
                        std::hint::spin_loop();
                    }
                    Err(e) => return Err(e).context("UDP receive"),
                }
            };
            if answered {
                if done >= warmup {
                    hist.saturating_record((start.elapsed().as_nanos() / 2) as u64);
                }
                done += 1;
            } else {
                lost += 1;
            }
        }
        Ok(lost)
    }
}

/// The echo side: answers mcd pings from any node and, when switched to UDP,
/// UDP datagrams on `udp`, until the client says QUIT or `stop` turns true.
pub fn echo(endpoint: &mut Endpoint, udp: Option<&UdpSocket>, wait: WaitPolicy, stop: &AtomicBool) -> Result<()> {
    let mut buf = vec![0u8; 65536];
    if let Some(sock) = udp {
        sock.set_nonblocking(udp_spins(wait))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    }
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some(m) = endpoint.recv(&mut buf, Some(Duration::from_millis(100)))? else { continue };
        match m.kind {
            kind::PING => {
                endpoint.send(m.rail, Destination::Node(m.from), kind::PONG, m.seq, &buf[..m.len])?;
            }
            kind::TO_UDP => {
                let sock = udp.context("the client asked for UDP but this echo has no UDP socket")?;
                loop {
                    match sock.recv_from(&mut buf) {
                        Ok((n, _)) if &buf[..n] == UDP_TO_MCD => break,
                        Ok((n, from)) => {
                            sock.send_to(&buf[..n], from)?;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                            if stop.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                            std::hint::spin_loop()
                        }
                        Err(e) => return Err(e).context("UDP receive"),
                    }
                }
            }
            kind::QUIT => return Ok(()),
            _ => {}
        }
    }
}

/// For an mcd result, its median over UDP's median at the same size, if
/// `results` has that UDP result.
pub fn udp_ratio(results: &[SizeResult], r: &SizeResult) -> Option<f64> {
    if r.transport != Transport::Mcd {
        return None;
    }
    results.iter().find(|u| u.transport == Transport::Udp && u.size == r.size).map(|u| r.p50_us / u.p50_us)
}

/// Renders results as a table, with the mcd/UDP ratio of medians per size.
pub fn table(results: &[SizeResult]) -> String {
    let mut out = format!(
        "{:<5} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} {:>9}\n",
        "", "bytes", "min µs", "p50 µs", "p90 µs", "p99 µs", "p99.9", "max µs", "mean µs", "MB/s", "mcd/udp"
    );
    for r in results {
        let ratio = udp_ratio(results, r).map(|x| format!("{x:.2}")).unwrap_or_default();
        out.push_str(&format!(
            "{:<5} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>8.2} {:>10.1} {:>9}\n",
            r.transport.to_string(),
            r.size,
            r.min_us,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            r.mean_us,
            r.bandwidth_mb_s,
            ratio
        ));
    }
    out
}

/// Renders results as CSV with a header line.
pub fn csv(results: &[SizeResult]) -> String {
    let mut out = String::from("transport,size,iterations,lost,min_us,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,bandwidth_mb_s\n");
    for r in results {
        out.push_str(&format!(
            "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2}\n",
            r.transport, r.size, r.iterations, r.lost, r.min_us, r.p50_us, r.p90_us, r.p99_us, r.p999_us, r.max_us, r.mean_us, r.bandwidth_mb_s
        ));
    }
    out
}

/// The UDP port the echo listens on.
pub const UDP_PORT: u16 = 47_001;

/// Runs the ping-pong between nodes 0 (client, CPU 0) and 1 (echo, CPU 1) of
/// `cluster`, each a thread inside its node's namespace.
pub fn run_on_cluster(cluster: &mcd_vcluster::Cluster, config: &PingPongConfig, progress: impl FnMut(&str) + Send) -> Result<Vec<SizeResult>> {
    let wait = config.wait;
    crate::twonode::run_client_and_echo(
        cluster,
        UDP_PORT,
        |cfg| {
            cfg.wait = wait;
            cfg.local_processes = 2;
        },
        |ep, sock, echo_addr| Client::new(ep, 1, Some((sock, echo_addr))).run(config, progress),
        |ep, sock, stop| echo(ep, Some(sock), wait, stop),
    )
}
