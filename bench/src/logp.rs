//! Measuring the LogP parameters of mcd (and of UDP, for comparison) between
//! two nodes, with the established methods:
//!
//! - **o_s**: the time a send call takes, for isolated sends (one every few
//!   round trips, so no queue builds up);
//! - **g**: from bursts of back-to-back sends, the steady-state time per message;
//! - **o_r**: the receiver asks for a message, waits until it has surely
//!   arrived (three round trips), then times the receive call;
//! - **L** = RTT/2 − o_s − o_r, with RTT from ping-pong.
//!
//! Each parameter is the median of a round of samples; rounds repeat until
//! every median moves by less than 3% from the previous round (at least 3,
//! at most 10). The spread is the 10th and 90th percentiles of the last round.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use barriers::model::LogP;
use mcd::{Destination, Endpoint, NodeId, WaitPolicy};
use serde::Serialize;

use crate::pingpong::Transport;

// Message kinds of the measurement protocol.
use mcd::kind::logp as kind;

/// A median with its spread, microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Stat {
    /// Median.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
}

fn stat(samples: &mut [f64]) -> Stat {
    use barriers::summary::{median, quantile};
    Stat { median: median(samples), p10: quantile(samples, 0.1), p90: quantile(samples, 0.9) }
}

/// The parameters of one transport under one wait policy.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// mcd or UDP.
    pub transport: Transport,
    /// The wait policy of both sides.
    pub wait: String,
    /// Send overhead.
    pub o_s: Stat,
    /// Receive overhead.
    pub o_r: Stat,
    /// Gap.
    pub g: Stat,
    /// Round trip / 2.
    pub rtt_half: Stat,
    /// Latency: rtt_half − o_s − o_r (medians).
    pub l: f64,
    /// Rounds it took to settle.
    pub rounds: usize,
}

impl Measurement {
    /// The medians as model parameters. L is clamped at 0: on veth it comes
    /// out negative, because there is no wire and the send call itself carries
    /// the frame into the receiver's ring before it returns. The sender's CPU
    /// is busy for the whole call, and in a barrier that is what the next step
    /// waits for, so o_s stays the measured call time.
    pub fn logp(&self) -> LogP {
        LogP { o_s: self.o_s.median, o_r: self.o_r.median, g: self.g.median, l: self.l.max(0.0) }
    }
}

/// How many samples per round.
#[derive(Clone, Copy, Debug)]
pub struct Effort {
    /// Samples of o_s, o_r and RTT per round.
    pub samples: usize,
    /// Sends per burst for g (bursts per round = samples / 50).
    pub burst: usize,
}

impl Default for Effort {
    fn default() -> Self {
        Effort { samples: 2000, burst: 200 }
    }
}

/// The client's end of a link: tagged 8-byte messages.
trait Link {
    fn send(&mut self, kind: u8, seq: u32) -> Result<()>;
    /// One receive call; `Ok(None)` if nothing is there.
    fn try_recv(&mut self) -> Result<Option<(u8, u32)>>;
    /// Waits (under the link's wait policy) for a message, up to `timeout`.
    fn recv(&mut self, timeout: Duration) -> Result<Option<(u8, u32)>>;
}

struct McdLink<'a> {
    ep: &'a mut Endpoint,
    peer: NodeId,
    buf: [u8; 64],
}

impl Link for McdLink<'_> {
    fn send(&mut self, kind: u8, seq: u32) -> Result<()> {
        Ok(self.ep.send(0, Destination::Node(self.peer), kind, seq, &[0u8; 8])?)
    }
    fn try_recv(&mut self) -> Result<Option<(u8, u32)>> {
        Ok(self.ep.try_recv(&mut self.buf)?.map(|m| (m.kind, m.seq)))
    }
    fn recv(&mut self, timeout: Duration) -> Result<Option<(u8, u32)>> {
        Ok(self.ep.recv(&mut self.buf, Some(timeout))?.map(|m| (m.kind, m.seq)))
    }
}

struct UdpLink<'a> {
    sock: &'a UdpSocket,
    peer: SocketAddr,
    blocking: bool,
}

/// The UDP measurement's message as it lies on the wire (a plain struct of
/// bytes, the sequence number big-endian, as mcd's headers), sent in 8
/// bytes (the rest zero).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RawProbe {
    kind: u8,
    seq: [u8; 4],
}

const PROBE_LEN: usize = std::mem::size_of::<RawProbe>();

fn encode(kind: u8, seq: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..PROBE_LEN].copy_from_slice(bytemuck::bytes_of(&RawProbe { kind, seq: seq.to_be_bytes() }));
    b
}

/// The kind and sequence number of a message; `None` if it is too short.
fn decode(b: &[u8]) -> Option<(u8, u32)> {
    let p: &RawProbe = bytemuck::from_bytes(b.get(..PROBE_LEN)?);
    Some((p.kind, u32::from_be_bytes(p.seq)))
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

impl<'a> UdpLink<'a> {
    /// Sets the socket's mode once, outside any timed region.
    fn new(sock: &'a UdpSocket, peer: SocketAddr, blocking: bool) -> Result<UdpLink<'a>> {
        sock.set_nonblocking(!blocking)?;
        sock.set_read_timeout(Some(REPLY))?;
        Ok(UdpLink { sock, peer, blocking })
    }
}

impl Link for UdpLink<'_> {
    fn send(&mut self, kind: u8, seq: u32) -> Result<()> {
        self.sock.send_to(&encode(kind, seq), self.peer)?;
        Ok(())
    }
    /// One receive call, in the socket's mode (the message is there when timed).
    fn try_recv(&mut self) -> Result<Option<(u8, u32)>> {
        let mut b = [0u8; 64];
        match self.sock.recv(&mut b) {
            Ok(n) => Ok(decode(&b[..n])),
            Err(e) if would_block(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    fn recv(&mut self, timeout: Duration) -> Result<Option<(u8, u32)>> {
        let start = Instant::now();
        let mut b = [0u8; 64];
        loop {
            match self.sock.recv(&mut b) {
                Ok(n) => return Ok(decode(&b[..n])),
                Err(e) if would_block(&e) => {
                    if start.elapsed() >= timeout || self.blocking {
                        return Ok(None);
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

const REPLY: Duration = Duration::from_millis(200);

/// Waits for a message of `want` with sequence `seq`, skipping stale ones.
fn await_reply(link: &mut dyn Link, want: u8, seq: u32) -> Result<bool> {
    let start = Instant::now();
    while start.elapsed() < REPLY {
        match link.recv(REPLY)? {
            Some((k, s)) if k == want && s == seq => return Ok(true),
            Some(_) => continue,
            None => return Ok(false),
        }
    }
    Ok(false)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `samples` ping-pongs, `pause` of spinning after each: RTT/2 of each, µs,
/// and (with `time_sends`) the time of each ping's send call: a send right
/// after a receive, to a peer spinning for it, the pattern of a barrier's
/// dependent hops.
fn ping_pong(link: &mut dyn Link, samples: usize, seq: &mut u32, time_sends: bool, pause: Duration) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut rtt = Vec::with_capacity(samples);
    let mut sends = Vec::with_capacity(if time_sends { samples } else { 0 });
    while rtt.len() < samples {
        *seq += 1;
        let t0 = Instant::now();
        link.send(kind::PING, *seq)?;
        let sent = t0.elapsed();
        if await_reply(link, kind::PONG, *seq)? {
            rtt.push(us(t0.elapsed()) / 2.0);
            if time_sends {
                sends.push(us(sent));
            }
            spin_for(pause);
        }
    }
    Ok((rtt, sends))
}

/// How long after a request its answer has surely arrived: three round
/// trips, at least 20 µs.
fn settle_time(rtt_half: &[f64]) -> Duration {
    Duration::from_secs_f64(3.0 * 2.0 * stat(&mut rtt_half.to_vec()).median / 1e6).max(Duration::from_micros(20))
}

/// `samples` isolated send calls, `settle` apart, µs.
fn isolated_sends(link: &mut dyn Link, samples: usize, settle: Duration, seq: &mut u32) -> Result<Vec<f64>> {
    let mut o_s = Vec::with_capacity(samples);
    for _ in 0..samples {
        *seq += 1;
        let t0 = Instant::now();
        link.send(kind::SINK, *seq)?;
        o_s.push(us(t0.elapsed()));
        spin_for(settle);
    }
    Ok(o_s)
}

/// `samples` receive calls, each timed `settle` after asking for its
/// message (which has then surely arrived), µs.
fn receives(link: &mut dyn Link, samples: usize, settle: Duration, seq: &mut u32) -> Result<Vec<f64>> {
    let mut o_r = Vec::with_capacity(samples);
    while o_r.len() < samples {
        *seq += 1;
        link.send(kind::REQUEST, *seq)?;
        spin_for(settle); // the reply has surely arrived by now
        let t0 = Instant::now();
        let got = link.try_recv()?;
        let took = us(t0.elapsed());
        match got {
            Some((kind::DATA, s)) if s == *seq => o_r.push(took),
            _ => {
                // Late or lost: drain, and do not count the sample.
                while link.recv(Duration::from_millis(5))?.is_some() {}
            }
        }
    }
    Ok(o_r)
}

/// `bursts` bursts of `burst` back-to-back sends: µs per message of each.
fn gaps(link: &mut dyn Link, bursts: usize, burst: usize, seq: &mut u32) -> Result<Vec<f64>> {
    let mut g = Vec::with_capacity(bursts);
    for _ in 0..bursts {
        let t0 = Instant::now();
        for _ in 0..burst {
            *seq += 1;
            link.send(kind::SINK, *seq)?;
        }
        g.push(us(t0.elapsed()) / burst as f64);
        spin_for(Duration::from_micros(200)); // let the receiver drain
    }
    Ok(g)
}

/// One round of samples; returns (o_s, o_r, g, rtt/2) sample vectors in µs.
fn round(link: &mut dyn Link, effort: Effort, seq: &mut u32) -> Result<[Vec<f64>; 4]> {
    let (rtt, _) = ping_pong(link, effort.samples, seq, false, Duration::ZERO)?;
    let settle = settle_time(&rtt);
    let o_s = isolated_sends(link, effort.samples, settle, seq)?;
    let o_r = receives(link, effort.samples, settle, seq)?;
    let g = gaps(link, (effort.samples / 50).max(3), effort.burst, seq)?;
    Ok([o_s, o_r, g, rtt])
}

/// Measures rounds until the medians settle.
fn settle(link: &mut dyn Link, transport: Transport, wait: WaitPolicy, effort: Effort) -> Result<Measurement> {
    let mut seq = 0;
    let mut previous: Option<[f64; 4]> = None;
    for rounds in 1..=10 {
        let [mut o_s, mut o_r, mut g, mut rtt] = round(link, effort, &mut seq)?;
        let stats = [stat(&mut o_s), stat(&mut o_r), stat(&mut g), stat(&mut rtt)];
        let medians = stats.map(|s| s.median);
        let stable = previous.is_some_and(|p| p.iter().zip(&medians).all(|(a, b)| (a - b).abs() <= 0.03 * a.abs().max(0.05)));
        previous = Some(medians);
        if rounds >= 3 && stable || rounds == 10 {
            let [o_s, o_r, g, rtt_half] = stats;
            return Ok(Measurement {
                transport,
                wait: wait.to_string(),
                o_s,
                o_r,
                g,
                rtt_half,
                l: rtt_half.median - o_s.median - o_r.median,
                rounds,
            });
        }
    }
    unreachable!("returns by round 10")
}

fn policy_code(wait: WaitPolicy) -> u8 {
    match wait {
        WaitPolicy::BusyPoll | WaitPolicy::Adaptive => 0,
        WaitPolicy::SpinThenYield { .. } => 1,
        WaitPolicy::Block => 2,
    }
}

fn policy_of(code: u8) -> WaitPolicy {
    match code {
        1 => WaitPolicy::SpinThenYield { spin: Duration::from_micros(5) },
        2 => WaitPolicy::Block,
        _ => WaitPolicy::BusyPoll,
    }
}

/// The measuring side: for each policy, mcd then (if `udp` is given) UDP.
pub fn client(
    ep: &mut Endpoint,
    peer: NodeId,
    udp: Option<(&UdpSocket, SocketAddr)>,
    policies: &[WaitPolicy],
    effort: Effort,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    for &wait in policies {
        ep.set_wait_policy(wait, 2);
        // Tell the echo the policy, and wait until it answers under it.
        let start = Instant::now();
        loop {
            ep.send(0, Destination::Node(peer), kind::POLICY, policy_code(wait) as u32, &[])?;
            let mut link = McdLink { ep, peer, buf: [0; 64] };
            if await_reply(&mut link, kind::PONG, u32::MAX)? {
                break;
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!("no echo from node {peer}: is the echo side running?");
            }
        }
        progress(&format!("mcd, wait {wait}"));
        out.push(settle(&mut McdLink { ep, peer, buf: [0; 64] }, Transport::Mcd, wait, effort)?);
    }
    if let Some((sock, addr)) = udp {
        ep.send(0, Destination::Node(peer), kind::TO_UDP, 0, &[])?;
        for &wait in policies {
            let mut link = UdpLink::new(sock, addr, wait == WaitPolicy::Block)?;
            // The echo serves UDP in its own spin-or-block mode per policy message.
            link.send(kind::POLICY, policy_code(wait) as u32)?;
            if !await_reply(&mut link, kind::PONG, u32::MAX)? {
                bail!("no UDP echo from {addr}");
            }
            progress(&format!("udp, wait {wait}"));
            out.push(settle(&mut link, Transport::Udp, wait, effort)?);
        }
        UdpLink::new(sock, addr, false)?.send(kind::QUIT, 0)?;
    } else {
        ep.send(0, Destination::Node(peer), kind::QUIT, 0, &[])?;
    }
    Ok(out)
}

/// The echo side: answers pings and requests on mcd, then (when told) on UDP,
/// until told to quit.
pub fn echo(ep: &mut Endpoint, udp: Option<&UdpSocket>) -> Result<()> {
    let mut buf = [0u8; 2048];
    loop {
        let Some(m) = ep.recv(&mut buf, Some(Duration::from_secs(30)))? else {
            bail!("no message from the measuring side for 30 s");
        };
        let to = Destination::Node(m.from);
        match m.kind {
            kind::PING => ep.send(0, to, kind::PONG, m.seq, &[0u8; 8])?,
            kind::REQUEST => ep.send(0, to, kind::DATA, m.seq, &[0u8; 8])?,
            kind::POLICY => {
                ep.set_wait_policy(policy_of(m.seq as u8), 2);
                ep.send(0, to, kind::PONG, u32::MAX, &[0u8; 8])?;
            }
            kind::TO_UDP => {
                let sock = udp.context("asked for UDP but this echo has no UDP socket")?;
                return echo_udp(sock);
            }
            kind::QUIT => return Ok(()),
            _ => {}
        }
    }
}

fn echo_udp(sock: &UdpSocket) -> Result<()> {
    let mut b = [0u8; 64];
    let mut blocking = false;
    sock.set_nonblocking(true)?;
    let idle_since = Instant::now();
    loop {
        match sock.recv_from(&mut b) {
            Ok((n, from)) => match decode(&b[..n]) {
                Some((kind::PING, s)) => drop(sock.send_to(&encode(kind::PONG, s), from)?),
                Some((kind::REQUEST, s)) => drop(sock.send_to(&encode(kind::DATA, s), from)?),
                Some((kind::POLICY, code)) => {
                    blocking = policy_of(code as u8) == WaitPolicy::Block;
                    sock.set_nonblocking(!blocking)?;
                    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
                    sock.send_to(&encode(kind::PONG, u32::MAX), from)?;
                }
                Some((kind::QUIT, _)) => return Ok(()),
                _ => {}
            },
            Err(e) if would_block(&e) => {
                if blocking || idle_since.elapsed() > Duration::from_secs(600) {
                    bail!("no UDP message from the measuring side");
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Measures between nodes 0 (client, CPU 0) and 1 (echo, CPU 1) of `cluster`.
pub fn measure_on_cluster(
    cluster: &mcd_vcluster::Cluster,
    policies: &[WaitPolicy],
    effort: Effort,
    udp: bool,
    progress: impl FnMut(&str) + Send,
) -> Result<Vec<Measurement>> {
    crate::twonode::run_client_and_echo(
        cluster,
        crate::pingpong::UDP_PORT + 1,
        |_| {},
        |ep, sock, echo_addr| client(ep, 1, udp.then_some((&sock, echo_addr)), policies, effort, progress),
        |ep, sock, _stop| echo(ep, Some(sock)),
    )
}

/// LogP as a barrier's hops see it, on the endpoints a barrier measurement
/// opens ([`Cluster::endpoint_config`](mcd_vcluster::Cluster::endpoint_config)
/// with `wait`, node 0 on CPU 0 and node 1 on CPU 1, as the barrier pins
/// them while nodes ≤ cores). o_s is the send call of a ping: a send right
/// after a receive, to a peer spinning for it, which is what a barrier's
/// dependent hops do (where [`measure_on_cluster`] times isolated sends);
/// RTT/2, o_r and g as there. `samples` ping-pongs (after a tenth as many
/// untimed), each followed by `pause` of work (the paper's loop puts 30 µs
/// between barriers: the hops then come in the rhythm of the rows'); half
/// as many receives; 10 bursts of 100: one round of medians, a few tens of
/// milliseconds. The caller repeats it between the measurements it
/// parameterises, so that both see the same load.
pub fn measure_hops_on_cluster(cluster: &mcd_vcluster::Cluster, wait: WaitPolicy, samples: usize, pause: Duration) -> Result<Measurement> {
    anyhow::ensure!(samples >= 10, "a hop measurement needs 10 samples at least, not {samples}");
    crate::twonode::run_client_and_echo(
        cluster,
        crate::pingpong::UDP_PORT + 3,
        |config| config.wait = wait,
        |ep, _sock, _| {
            let mut link = McdLink { ep, peer: 1, buf: [0; 64] };
            let mut seq = 0u32;
            let start = Instant::now();
            loop {
                link.send(kind::PING, seq)?;
                if await_reply(&mut link, kind::PONG, seq)? {
                    break;
                }
                if start.elapsed() > Duration::from_secs(10) {
                    bail!("no echo from node 1 of cluster `{}`", cluster.spec().name);
                }
            }
            ping_pong(&mut link, samples / 10, &mut seq, false, pause)?;
            let (mut rtt, mut sends) = ping_pong(&mut link, samples, &mut seq, true, pause)?;
            let settle = settle_time(&rtt);
            let mut o_r = receives(&mut link, samples / 2, settle, &mut seq)?;
            let mut g = gaps(&mut link, 10, 100, &mut seq)?;
            link.send(kind::QUIT, 0)?;
            let (o_s, o_r, g, rtt_half) = (stat(&mut sends), stat(&mut o_r), stat(&mut g), stat(&mut rtt));
            Ok(Measurement {
                transport: Transport::Mcd,
                wait: wait.to_string(),
                o_s,
                o_r,
                g,
                rtt_half,
                l: rtt_half.median - o_s.median - o_r.median,
                rounds: 1,
            })
        },
        |ep, _sock, _stop| echo(ep, None),
    )
}

/// Renders measurements as a table.
pub fn table(ms: &[Measurement]) -> String {
    let mut out =
        format!("{:<5} {:<9} {:>16} {:>16} {:>16} {:>16} {:>8} {:>6}\n", "", "wait", "o_s µs", "o_r µs", "g µs", "RTT/2 µs", "L µs", "rounds");
    let cell = |s: &Stat| format!("{:.2} [{:.2},{:.2}]", s.median, s.p10, s.p90);
    for m in ms {
        out.push_str(&format!(
            "{:<5} {:<9} {:>16} {:>16} {:>16} {:>16} {:>8.2} {:>6}\n",
            m.transport.to_string(),
            m.wait,
            cell(&m.o_s),
            cell(&m.o_r),
            cell(&m.g),
            cell(&m.rtt_half),
            m.l,
            m.rounds
        ));
    }
    out
}

/// The mcd busy-poll LogP parameters for predictions: read from `path` (the
/// `--json` output of `mcd-logp`, or `bench/results/logp.json`) or, without a
/// path, measured on the spot on a two-node virtual cluster (a few seconds).
pub fn load_or_measure(path: Option<&std::path::Path>) -> Result<LogP> {
    if let Some(path) = path {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let all: Vec<serde_json::Value> =
            serde_json::from_str(&text).with_context(|| format!("{} is not `mcd-logp --json` output", path.display()))?;
        let busy = all
            .iter()
            .find(|m| m["transport"] == "mcd" && m["wait"] == "busy")
            .or_else(|| all.first())
            .with_context(|| format!("{} holds no measurement", path.display()))?;
        let num = |k: &str, sub: Option<&str>| -> Result<f64> {
            let v = match sub {
                Some(s) => &busy[k][s],
                None => &busy[k],
            };
            v.as_f64().with_context(|| format!("{}: no {k}", path.display()))
        };
        return Ok(LogP {
            o_s: num("o_s", Some("median"))?,
            o_r: num("o_r", Some("median"))?,
            g: num("g", Some("median"))?,
            l: num("l", None)?.max(0.0),
        });
    }
    eprintln!("measuring LogP parameters for the predictions (mcd-logp --json FILE and --logp FILE skip this)");
    let cluster = mcd_vcluster::Cluster::up_guarded(mcd_vcluster::ClusterSpec::new(&mcd_vcluster::prefixed_name("mbl"), 2))?;
    let ms = measure_on_cluster(&cluster, &[WaitPolicy::BusyPoll], Effort { samples: 500, burst: 100 }, false, |_| {})?;
    Ok(ms[0].logp())
}

/// The parameters beyond LogP that the model's [`barriers::model::Setup`]
/// takes: G, the receive gap, and the cost of a wake-up.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Extra {
    /// (payload bytes, µs per message in a burst of back-to-back sends), medians.
    pub g_by_size: Vec<(usize, f64)>,
    /// LogGP's G: the least-squares slope of g over payload size, µs per byte.
    pub big_g: Option<f64>,
    /// Senders bursting at once to one receiver.
    pub receive_gap_senders: usize,
    /// Receive gap: µs between messages at that receiver, over the whole burst.
    pub g_r: Option<f64>,
    /// Messages the receiver got of those sent (a NIC ring overflowing drops some).
    pub receive_gap_delivered: f64,
    /// Wake-up: RTT/2 with both sides blocking minus RTT/2 busy-polling, µs.
    pub wake: Option<f64>,
    /// The send call on bridges of several port counts, hub and switch.
    pub flood: Vec<SendCost>,
    /// What each further copy costs the sender ([`CopyCost::fit`]).
    pub copy_cost: Option<CopyCost>,
}

/// LogGP's G from (size, g) points: the least-squares slope.
pub fn slope(points: &[(usize, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 as f64 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The wake-up cost from a busy and a blocking measurement of mcd.
pub fn wake_up(ms: &[Measurement]) -> Option<f64> {
    let of = |w: &str| ms.iter().find(|m| m.transport == Transport::Mcd && m.wait == w).map(|m| m.rtt_half.median);
    Some((of("block")? - of("busy")?).max(0.0))
}

/// Sends bursts of `burst` back-to-back messages of each size to `peer`
/// (which ignores them), `bursts` times; the median µs per message per size.
pub fn size_sweep(ep: &mut Endpoint, peer: NodeId, sizes: &[usize], bursts: usize, burst: usize) -> Result<Vec<(usize, f64)>> {
    let payload = vec![0u8; sizes.iter().copied().max().unwrap_or(0)];
    let mut out = Vec::new();
    let mut seq = 0u32;
    for &size in sizes {
        let mut per = Vec::with_capacity(bursts);
        for _ in 0..bursts.max(3) {
            let t0 = Instant::now();
            for _ in 0..burst {
                seq = seq.wrapping_add(1);
                ep.send(0, Destination::Node(peer), kind::SINK, seq, &payload[..size])?;
            }
            per.push(t0.elapsed().as_secs_f64() * 1e6 / burst as f64);
            spin_for(Duration::from_micros(300)); // let the receiver drain
        }
        out.push((size, stat(&mut per).median));
    }
    ep.send(0, Destination::Node(peer), kind::QUIT, 0, &[])?;
    Ok(out)
}

/// g against payload size on nodes 0 → 1 of `cluster`: sizes up to the
/// link's largest payload.
pub fn size_sweep_on_cluster(cluster: &mcd_vcluster::Cluster, bursts: usize, burst: usize) -> Result<Vec<(usize, f64)>> {
    crate::twonode::run_client_and_echo(
        cluster,
        crate::pingpong::UDP_PORT + 2,
        |_| {},
        |ep, _sock, _| {
            let max = ep.max_payload(0)?;
            let sizes: Vec<usize> = [8usize, 128, 512, 1024, max].into_iter().filter(|&s| s <= max).collect();
            size_sweep(ep, 1, &sizes, bursts, burst)
        },
        |ep, _sock, _stop| echo(ep, None),
    )
}

/// The receive gap: every node but 0 of `cluster` sends `burst` messages
/// back to back to node 0 at once; node 0 times the arrivals. Returns
/// (senders, µs per message from the first arrival to the last, fraction
/// delivered).
pub fn receive_gap_on_cluster(cluster: &mcd_vcluster::Cluster, burst: usize) -> Result<(usize, f64, f64)> {
    use mcd::kind::burst::{DATA, GO, READY};
    let n = cluster.nodes();
    anyhow::ensure!(n >= 2, "a receive gap needs a sender and a receiver");
    let cpus = mcd::host::online_cpus();
    let open = |node: usize| -> Result<(mcd::host::NetnsGuard, Endpoint)> {
        let _ = mcd::host::pin_current_thread(node % cpus);
        let ns = cluster.enter(node)?;
        Ok((ns, Endpoint::open(cluster.endpoint_config())?))
    };
    std::thread::scope(|scope| {
        let senders: Vec<_> = (1..n)
            .map(|me| {
                scope.spawn(move || -> Result<()> {
                    let (_ns, mut ep) = open(me)?;
                    let mut buf = [0u8; 64];
                    let start = Instant::now();
                    loop {
                        ep.send(0, Destination::Node(0), READY, 0, &[])?;
                        if let Some(m) = ep.recv(&mut buf, Some(Duration::from_millis(2)))? {
                            if m.kind == GO {
                                break;
                            }
                        }
                        if start.elapsed() > Duration::from_secs(10) {
                            bail!("node {me}: no GO from the receiver");
                        }
                    }
                    for i in 0..burst {
                        ep.send(0, Destination::Node(0), DATA, i as u32, &[0u8; 8])?;
                    }
                    Ok(())
                })
            })
            .collect();
        let receiver = scope.spawn(move || -> Result<(usize, f64, f64)> {
            let (_ns, mut ep) = open(0)?;
            let mut buf = [0u8; 2048];
            let mut ready = vec![false; n];
            ready[0] = true;
            let start = Instant::now();
            while !ready.iter().all(|&r| r) {
                if let Some(m) = ep.recv(&mut buf, Some(Duration::from_millis(50)))? {
                    if m.kind == READY {
                        ready[m.from] = true;
                    }
                }
                if start.elapsed() > Duration::from_secs(10) {
                    bail!("not every sender got ready");
                }
            }
            let (mut first, mut last, mut count) = (None, Instant::now(), 0usize);
            for to in 1..n {
                ep.send(0, Destination::Node(to), GO, 0, &[])?;
            }
            let total = (n - 1) * burst;
            while count < total {
                match ep.recv(&mut buf, Some(Duration::from_millis(100)))? {
                    Some(m) if m.kind == DATA => {
                        last = Instant::now();
                        first.get_or_insert(last);
                        count += 1;
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            let first = first.context("no message of the burst arrived")?;
            let per = last.duration_since(first).as_secs_f64() * 1e6 / (count.max(2) - 1) as f64;
            Ok((n - 1, per, count as f64 / total as f64))
        });
        for s in senders {
            s.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
        }
        receiver.join().map_err(|_| anyhow::anyhow!("receiver panicked"))?
    })
}

/// The model's shared-memory costs ([`barriers::model::ShmCosts`]) between
/// two threads of this process on two cores, through the host barrier's own
/// segment in `/dev/shm`: `iterations` barriers of two ranks busy-polling
/// (each is two cache-line transfers) and blocking (two futex wake-ups
/// more); the scan from timing the leader's look at the arrivals.
pub fn measure_shm(iterations: usize) -> Result<barriers::model::ShmCosts> {
    let cores = mcd::host::online_cpus();
    let per_barrier = |policy: WaitPolicy| -> Result<f64> {
        let path = std::path::PathBuf::from(mcd::shm::SHM_DIR).join(format!("mcd-logp-shm-{}-{policy}", std::process::id()));
        let ranks: Vec<_> = (0..2)
            .map(|me| {
                let config = barriers::HostConfig {
                    path: path.clone(),
                    job_key: 0,
                    members: vec![0, 1],
                    me,
                    attach_timeout: Duration::from_secs(10),
                    phases: policy.phases(2, cores),
                };
                std::thread::spawn(move || -> Result<f64> {
                    if cores >= 2 {
                        let _ = mcd::host::pin_current_thread(me);
                    }
                    let mut b = barriers::HostBarrier::join(config)?;
                    for _ in 0..iterations / 10 + 10 {
                        b.wait(None)?;
                    }
                    let start = Instant::now();
                    for _ in 0..iterations {
                        b.wait(None)?;
                    }
                    Ok(start.elapsed().as_secs_f64() * 1e6 / iterations as f64)
                })
            })
            .collect();
        let mut times = Vec::new();
        for r in ranks {
            times.push(r.join().map_err(|_| anyhow::anyhow!("a shared-memory rank panicked"))??);
        }
        Ok(times[0])
    };
    let busy = per_barrier(WaitPolicy::BusyPoll)?;
    let block = per_barrier(WaitPolicy::Block)?;
    let transfer = busy / 2.0;
    // The leader's scan of the arrivals, on a barrier of 64 ranks none of
    // which has arrived: the whole scan, per rank.
    let path = std::path::PathBuf::from(mcd::shm::SHM_DIR).join(format!("mcd-logp-scan-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let scan = {
        let config = barriers::HostConfig {
            path,
            job_key: 0,
            members: vec![0],
            me: 0,
            attach_timeout: Duration::from_secs(1),
            phases: WaitPolicy::BusyPoll.phases(1, cores),
        };
        let mut b = barriers::HostBarrier::join(config)?;
        b.arrive();
        let start = Instant::now();
        let mut seen = 0;
        for _ in 0..iterations {
            seen += usize::from(std::hint::black_box(&b).all_arrived());
        }
        anyhow::ensure!(seen == iterations, "a lone rank has always gathered");
        start.elapsed().as_secs_f64() * 1e6 / iterations as f64
    };
    Ok(barriers::model::ShmCosts { transfer, wake: (block / 2.0 - transfer).max(0.0), scan })
}

/// What one send call costs node 0 of a virtual cluster whose bridge copies
/// the frame to many ports: on veth the bridge floods in the sender's
/// context (each copy crosses a veth pair and runs the receiving
/// namespace's socket filter before the send call returns), so a repeater
/// hub's unicast and any multicast cost the sender per port.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct SendCost {
    /// Nodes, one bridge port each.
    pub ports: usize,
    /// The bridge: a learning one (switch) or one flooding every frame (hub).
    pub topology: mcd_vcluster::Topology,
    /// An isolated unicast send call from node 0 to node 1, µs.
    pub unicast: Stat,
    /// An isolated multicast send call from node 0 to every other node, µs.
    pub multicast: Stat,
}

/// Measures [`SendCost`] on `cluster`: node 0 (CPU 0) times `samples`
/// isolated unicast and multicast send calls, alternating, while every other
/// node holds an endpoint (its filter attached, as in a barrier), pinned to
/// the last CPU and draining its ring every millisecond without blocking in
/// the kernel (so no send pays a wake-up).
pub fn send_cost_on_cluster(cluster: &mcd_vcluster::Cluster, samples: usize) -> Result<SendCost> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let n = cluster.nodes();
    anyhow::ensure!(n >= 2, "a send cost needs a sender and a receiver");
    let cpus = mcd::host::online_cpus();
    let open = |node: usize| -> Result<(mcd::host::NetnsGuard, Endpoint)> {
        let _ = mcd::host::pin_current_thread(if node == 0 { 0 } else { cpus - 1 });
        let ns = cluster.enter(node)?;
        Ok((ns, Endpoint::open(cluster.endpoint_config())?))
    };
    let ready = std::sync::Barrier::new(n);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let receivers: Vec<_> = (1..n)
            .map(|me| {
                let (ready, stop) = (&ready, &stop);
                scope.spawn(move || -> Result<()> {
                    let opened = open(me);
                    ready.wait();
                    let (_ns, mut ep) = opened?;
                    // Teach a learning bridge where this node is.
                    ep.send(0, Destination::Node(0), kind::SINK, 0, &[])?;
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        while ep.try_recv(&mut buf)?.is_some() {}
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                })
            })
            .collect();
        let sender = scope.spawn(|| -> Result<SendCost> {
            let opened = open(0);
            ready.wait();
            let result = (|| {
                let (_ns, mut ep) = opened?;
                let mut buf = [0u8; 2048];
                let settle = Instant::now();
                while settle.elapsed() < Duration::from_millis(20) {
                    ep.try_recv(&mut buf)?;
                }
                let (mut uni, mut multi) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
                for i in 0..samples {
                    let seq = i as u32;
                    let t0 = Instant::now();
                    ep.send(0, Destination::Node(1), kind::SINK, seq, &[0u8; 8])?;
                    uni.push(t0.elapsed().as_secs_f64() * 1e6);
                    spin_for(Duration::from_micros(30));
                    let t0 = Instant::now();
                    ep.send(0, Destination::ALL_NODES, kind::SINK, seq, &[0u8; 8])?;
                    multi.push(t0.elapsed().as_secs_f64() * 1e6);
                    spin_for(Duration::from_micros(30));
                    while ep.try_recv(&mut buf)?.is_some() {}
                }
                Ok(SendCost { ports: n, topology: cluster.spec().topology, unicast: stat(&mut uni), multicast: stat(&mut multi) })
            })();
            stop.store(true, Ordering::Relaxed);
            result
        });
        let result = sender.join().map_err(|_| anyhow::anyhow!("sender panicked"))?;
        for r in receivers {
            r.join().map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        }
        result
    })
}

/// [`SendCost`] on a hub and a switch cluster of each of `ports` nodes, one
/// after the other, the clusters named `{stem}f0`, `{stem}f1`, ...
pub fn send_costs(stem: &str, ports: &[usize], samples: usize) -> Result<Vec<SendCost>> {
    use mcd_vcluster::{Cluster, ClusterSpec, Topology};
    let mut out = Vec::new();
    for (i, &n) in ports.iter().enumerate() {
        for topology in [Topology::Hub, Topology::Switch] {
            let name = format!("{stem}f{}", 2 * i + usize::from(topology == Topology::Switch));
            eprintln!("  measuring the send call on a {n}-port {topology} (cluster `{name}`)");
            let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name(&name), n).topology(topology))?;
            out.push(send_cost_on_cluster(&cluster, samples)?);
        }
    }
    Ok(out)
}

/// What each further copy of a frame costs the sender, µs, from
/// [`SendCost`]s: the slopes of the send call's median over the ports
/// beyond the first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CopyCost {
    /// A copy the receiving kernel drops (a hub's unicast to a port not its
    /// destination: `PACKET_OTHERHOST`, refused by the socket filter).
    pub dropped: f64,
    /// A copy delivered into a receiver's ring (a multicast, on either bridge).
    pub delivered: f64,
}

impl CopyCost {
    /// The slopes over `costs` (hubs' unicasts for `dropped`, every
    /// multicast for `delivered`), each clamped at 0; `None` without two
    /// port counts.
    pub fn fit(costs: &[SendCost]) -> Option<CopyCost> {
        let beyond = |c: &SendCost| c.ports.saturating_sub(2);
        let hub: Vec<(usize, f64)> =
            costs.iter().filter(|c| c.topology == mcd_vcluster::Topology::Hub).map(|c| (beyond(c), c.unicast.median)).collect();
        let multicast: Vec<(usize, f64)> = costs.iter().map(|c| (beyond(c), c.multicast.median)).collect();
        Some(CopyCost { dropped: slope(&hub)?.max(0.0), delivered: slope(&multicast)?.max(0.0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_udp_probe_is_a_kind_and_a_big_endian_sequence_number() {
        let b = encode(kind::PING, 0x0102_0304);
        assert_eq!(b, [kind::PING, 1, 2, 3, 4, 0, 0, 0]);
        assert_eq!(decode(&b), Some((kind::PING, 0x0102_0304)));
        assert_eq!(decode(&b[..5]), Some((kind::PING, 0x0102_0304)));
        assert_eq!(decode(&b[..4]), None);
    }

    #[test]
    fn g_per_byte_is_the_slope_of_g_over_size() {
        // 1 µs + 0.008 µs per byte (125 MB/s): exact on a line.
        let pts: Vec<(usize, f64)> = [8usize, 128, 512, 1024, 1486].iter().map(|&s| (s, 1.0 + 0.008 * s as f64)).collect();
        assert!((slope(&pts).unwrap() - 0.008).abs() < 1e-12);
        assert_eq!(slope(&pts[..1]), None);
        assert_eq!(slope(&[(64, 1.0), (64, 2.0)]), None);
    }

    #[test]
    fn copy_costs_are_the_slopes_over_the_further_ports() {
        use mcd_vcluster::Topology;
        let at = |v: f64| Stat { median: v, p10: v, p90: v };
        // 4 µs alone; a dropped copy 0.8 µs, a delivered one 1.5 µs.
        let costs: Vec<SendCost> = [2usize, 4, 8, 16]
            .iter()
            .flat_map(|&n| {
                let k = (n - 2) as f64;
                [
                    SendCost { ports: n, topology: Topology::Hub, unicast: at(4.0 + 0.8 * k), multicast: at(4.0 + 1.5 * k) },
                    SendCost { ports: n, topology: Topology::Switch, unicast: at(4.0), multicast: at(4.0 + 1.5 * k) },
                ]
            })
            .collect();
        let c = CopyCost::fit(&costs).unwrap();
        assert!((c.dropped - 0.8).abs() < 1e-9 && (c.delivered - 1.5).abs() < 1e-9, "{c:?}");
        assert_eq!(CopyCost::fit(&costs[..2]), None, "one port count gives no slope");
    }
}
