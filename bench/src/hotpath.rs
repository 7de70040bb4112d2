//! The hot path: what a 2-node barrier costs beyond the one message it must
//! wait for.
//!
//! Two nodes, one thread each, pinned to a core each, busy-polling. In one
//! run, alternating round by round so that all see the same machine noise:
//!
//! - **one-way**: a ping-pong over bare endpoints (`Endpoint::send` and a spin
//!   on `try_recv`); one-way = round trip / 2;
//! - **exchange**: the least a 2-node barrier can be, over bare endpoints:
//!   each node sends "k" and spins until the peer's "k" arrives (no epochs,
//!   no reliability);
//! - **barrier**: mcd's `Barrier` (shuffle), with and without its progress
//!   agent.
//!
//! Back to back, a 2-node barrier is a chain of single messages (each
//! arrival releases one node, which sends the next barrier's message at
//! once), so its time per barrier is one one-way latency plus the software
//! on the way; the exchange shows what bare endpoints need for that, and
//! the barrier's distance from it is mcd's engine.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use barriers::mem::Mirror;
use barriers::{Algorithm, Barrier, BarrierConfig, McdTransport};
use hdrhistogram::Histogram;
use mcd::{Destination, Endpoint, WaitPolicy};
use mcd_vcluster::{Cluster, ClusterSpec};
use serde::Serialize;

/// The message kind of the bare-endpoint loops.
const KIND: u8 = mcd::kind::hotpath::STEP;

/// What is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
enum Mode {
    OneWay,
    Exchange,
    Barrier,
    BarrierNoAgent,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::OneWay, Mode::Exchange, Mode::Barrier, Mode::BarrierNoAgent];

    fn label(self) -> &'static str {
        match self {
            Mode::OneWay => "one-way (ping-pong / 2)",
            Mode::Exchange => "exchange over bare endpoints",
            Mode::Barrier => "mcd Barrier (shuffle)",
            Mode::BarrierNoAgent => "mcd Barrier (shuffle), no progress agent",
        }
    }
}

/// One mode's figures, node 0's view, over all rounds.
#[derive(Clone, Debug, Serialize)]
struct Figures {
    mode: Mode,
    label: &'static str,
    samples: u64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    mean_us: f64,
}

/// Times `iterations` operations of `mode` on node `me` (0 or 1) over `ep`;
/// node 0's per-operation times (ns) go into `hist`.
/// `first_arrived`: the peer's message 0 came during the line-up.
fn run_mode(
    mode: Mode,
    me: usize,
    ep: &mut Endpoint,
    (iterations, warmup): (usize, usize),
    first_arrived: bool,
    hist: &mut Histogram<u64>,
) -> Result<()> {
    let peer = 1 - me;
    let mut buf = [0u8; 64];
    let mut await_seq = |ep: &mut Endpoint, seq: u32| -> Result<()> {
        loop {
            if let Some(m) = ep.try_recv(&mut buf)? {
                if m.kind == KIND && m.seq == seq {
                    return Ok(());
                }
                if m.kind == KIND && m.seq > seq && m.seq < LINEUP {
                    bail!("message {} while waiting for {seq}", m.seq);
                }
            }
            std::hint::spin_loop();
        }
    };
    let payload = [0u8; 14]; // a barrier message's payload size
    let total = warmup + iterations;
    match mode {
        Mode::OneWay => {
            for i in 0..total as u32 {
                let start = Instant::now();
                if me == 0 {
                    ep.send(0, Destination::Node(peer), KIND, i, &payload)?;
                    await_seq(ep, i)?;
                } else {
                    if !(i == 0 && first_arrived) {
                        await_seq(ep, i)?;
                    }
                    ep.send(0, Destination::Node(peer), KIND, i, &payload)?;
                }
                if me == 0 && i as usize >= warmup {
                    hist.saturating_record(start.elapsed().as_nanos() as u64 / 2);
                }
            }
        }
        Mode::Exchange => {
            for i in 0..total as u32 {
                let start = Instant::now();
                ep.send(0, Destination::Node(peer), KIND, i, &payload)?;
                await_seq(ep, i)?;
                if me == 0 && i as usize >= warmup {
                    hist.saturating_record(start.elapsed().as_nanos() as u64);
                }
            }
        }
        Mode::Barrier | Mode::BarrierNoAgent => unreachable!("timed by run_barrier"),
    }
    Ok(())
}

fn run_barrier(barrier: &mut Barrier<McdTransport>, iterations: usize, warmup: usize, hist: &mut Histogram<u64>) -> Result<()> {
    for i in 0..warmup + iterations {
        let start = Instant::now();
        barrier.wait()?;
        if barrier.node() == 0 && i >= warmup {
            hist.saturating_record(start.elapsed().as_nanos() as u64);
        }
    }
    Ok(())
}

/// Runs the comparison and writes `hotpath.{md,json}` to `out`.
pub fn run(out: &std::path::Path, iterations: usize, rounds: usize) -> Result<()> {
    anyhow::ensure!(iterations >= 1 && rounds >= 1, "--iterations and --rounds must be at least 1");
    anyhow::ensure!(mcd::host::online_cpus() >= 2, "needs two cores: each node busy-polls on its own");
    let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnhot"), 2))?;
    let warmup = 2_000;
    let new_hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let mut hists: Vec<Histogram<u64>> = Mode::ALL.iter().map(|_| new_hist()).collect();
    let failed = AtomicBool::new(false);
    for round in 0..rounds {
        eprintln!("  round {}/{rounds}", round + 1);
        let per_node: Vec<Result<Vec<Histogram<u64>>>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..2)
                .map(|me| {
                    let cluster = &cluster;
                    let failed = &failed;
                    scope.spawn(move || -> Result<Vec<Histogram<u64>>> {
                        let _ = mcd::host::pin_current_thread(me);
                        let _ns = cluster.enter(me)?;
                        let mut config = cluster.endpoint_config();
                        config.wait = WaitPolicy::BusyPoll;
                        let mut mine: Vec<Histogram<u64>> = Mode::ALL.iter().map(|_| new_hist()).collect();
                        let result = (|| -> Result<()> {
                            let mut ep = Endpoint::open(config.clone())?;
                            // Line both nodes up: an exchange that retries until the peer is there.
                            let first_arrived = lineup(&mut ep, me, failed)?;
                            run_mode(Mode::OneWay, me, &mut ep, (iterations, warmup), first_arrived, &mut mine[0])?;
                            run_mode(Mode::Exchange, me, &mut ep, (iterations, warmup), false, &mut mine[1])?;
                            drop(ep);
                            for (i, agent) in [(2, true), (3, false)] {
                                let ep = Endpoint::open(config.clone())?;
                                let bc = BarrierConfig::new(Algorithm::ShuffleExchange).progress_agent(agent);
                                let mut b = Barrier::new(McdTransport::new(ep), bc)?;
                                run_barrier(&mut b, iterations, warmup, &mut mine[i])?;
                                b.finish()?;
                            }
                            Ok(())
                        })();
                        if result.is_err() {
                            failed.store(true, Ordering::Relaxed);
                        }
                        result.map(|_| mine)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().map_err(|_| anyhow!("a node's thread panicked"))?).collect()
        });
        for (node, r) in per_node.into_iter().enumerate() {
            let mine = r.with_context(|| format!("node {node}, round {}", round + 1))?;
            if node == 0 {
                for (h, m) in hists.iter_mut().zip(&mine) {
                    h.add(m).expect("same bounds");
                }
            }
        }
    }
    let figures: Vec<Figures> = Mode::ALL
        .iter()
        .zip(&hists)
        .map(|(&mode, h)| Figures {
            mode,
            label: mode.label(),
            samples: h.len(),
            p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
            p90_us: h.value_at_quantile(0.9) as f64 / 1e3,
            p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
            mean_us: h.mean() / 1e3,
        })
        .collect();
    let mut md = String::new();
    writeln!(md, "# The hot path: a 2-node barrier against one message\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- hotpath` (`./run bench hotpath`).\n", crate::today(), crate::machine())?;
    writeln!(
        md,
        "Method: two nodes of a virtual cluster (veth and a Linux bridge), one thread per node pinned to \
         a core each, busy-polling the TPACKET_V2 receive ring. {rounds} rounds; in each, both nodes run \
         {warmup} untimed then {iterations} timed operations of every row in turn, so the rows see the same \
         machine. Times are node 0's, per operation, in an hdrhistogram. One-way is a ping-pong's round \
         trip / 2 over bare `Endpoint`s; the exchange is the least a 2-node barrier can be over bare \
         `Endpoint`s (send \"k\", spin until the peer's \"k\"); the barrier rows are mcd's `Barrier` \
         (shuffle: the same single message each way, plus epochs, instance checks, retry timers and the \
         progress agent's hand-over). Back to back, a 2-node barrier is a chain of single messages, so \
         its time per barrier is one one-way latency plus the software on the way.\n"
    )?;
    writeln!(md, "| what | p50 µs | p90 µs | p99 µs | mean µs | p50 − one-way p50 |")?;
    writeln!(md, "|---|---:|---:|---:|---:|---:|")?;
    let one_way = figures[0].p50_us;
    for f in &figures {
        writeln!(md, "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:+.2} |", f.label, f.p50_us, f.p90_us, f.p99_us, f.mean_us, f.p50_us - one_way)?;
    }
    let engine_ns = engine_alone(iterations.max(100_000), 5)?;
    writeln!(
        md,
        "\nThe engine alone (the same barrier over an in-memory transport that answers at once, no \
         network, no progress agent; median of 5 loops): **{engine_ns:.0} ns** per barrier."
    )?;
    let gap = figures[2].p50_us - one_way;
    let floor = figures[1].p50_us - one_way;
    writeln!(
        md,
        "\nGoal: a 2-node barrier within 0.5 µs of one one-way message (p50). This run: {gap:+.2} µs — {}.",
        if gap <= 0.5 { "met" } else { "**not met**" }
    )?;
    writeln!(
        md,
        "\nWhere the gap is: the bare exchange, which has no engine at all, is already {floor:+.2} µs from one \
         one-way message, and mcd's barrier is {:+.2} µs from the bare exchange. On veth, a send system call \
         carries the frame through the bridge into the peer's ring on the sender's own CPU and returns only \
         after it; back to back, each node's next receive waits for its own send to return, which a \
         ping-pong's one-way time does not include. A NIC that takes the frame by DMA ends the send sooner. \
         The engine's own work is the line above.",
        figures[2].p50_us - figures[1].p50_us
    )?;
    std::fs::write(out.join("hotpath.md"), &md)?;
    std::fs::write(out.join("hotpath.json"), serde_json::to_string_pretty(&figures)?)?;
    print!("{md}");
    Ok(())
}

/// Sequence numbers from here up belong to the line-up.
const LINEUP: u32 = u32::MAX - 1;

/// Both nodes send "hello" until each has heard the other and knows the
/// other heard it (sequence numbers above any the timed loops use). Node 1
/// may meet node 0's first ping here, once node 0 is done: true then.
fn lineup(ep: &mut Endpoint, me: usize, failed: &AtomicBool) -> Result<bool> {
    const HELLO: u32 = LINEUP;
    const HEARD: u32 = LINEUP + 1;
    let peer = 1 - me;
    let mut buf = [0u8; 64];
    let (mut heard, mut acked) = (false, false);
    let start = Instant::now();
    let mut last = None::<Instant>;
    while !(heard && acked) {
        anyhow::ensure!(!failed.load(Ordering::Relaxed), "the other node failed");
        anyhow::ensure!(start.elapsed().as_secs() < 10, "the other node did not answer for 10 s");
        if last.is_none_or(|t| t.elapsed().as_micros() > 500) {
            ep.send(0, Destination::Node(peer), KIND, if heard { HEARD } else { HELLO }, &[])?;
            last = Some(Instant::now());
        }
        while let Some(m) = ep.try_recv(&mut buf)? {
            if m.kind == KIND && m.seq >= HELLO {
                heard = true;
                acked |= m.seq == HEARD;
            } else if m.kind == KIND && m.seq == 0 && me == 1 {
                return Ok(true); // node 0 is through and has pinged
            }
        }
    }
    // Say it a few more times: the peer may still wait for our HEARD.
    for _ in 0..3 {
        ep.send(0, Destination::Node(peer), KIND, HEARD, &[])?;
    }
    Ok(false)
}

/// Nanoseconds per barrier of the engine alone (a [`Mirror`] transport,
/// no data, no progress agent), the median of `rounds` loops of `iterations`.
fn engine_alone(iterations: usize, rounds: usize) -> Result<f64> {
    let config = BarrierConfig::new(Algorithm::ShuffleExchange).progress_agent(false);
    let mut barrier = Barrier::new(Mirror::new(0), config)?;
    let mut per_round = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..iterations {
            barrier.wait()?;
        }
        per_round.push(start.elapsed().as_nanos() as f64 / iterations as f64);
    }
    Ok(barriers::summary::median(&mut per_round))
}
