//! `mcd-bench`: head-to-head benchmarks of mcd against what users would pick
//! instead, each in one run on one virtual cluster, written to `bench/results/`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use mcd::WaitPolicy;
use barriers::{Algorithm, BarrierConfig, Release};
use mcd_tools::barrierbench::{self, BarrierBench, BarrierMeasurement};
use mcd_tools::pingpong::{self, PingPongConfig, SizeResult, Transport};
use mcd_tools::vcluster::{Cluster, ClusterSpec};

/// Benchmarks of mcd against the alternatives, measured side by side in one
/// run (this machine is noisy), reporting medians and tails. Needs root.
#[derive(Parser)]
#[command(name = "mcd-bench", version)]
struct Cli {
    /// Where results are written.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    out: PathBuf,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// One-way latency, mcd versus UDP, between two virtual-cluster nodes on
    /// two cores, for busy-poll and blocking waits.
    Latency {
        /// Timed round trips per size, transport and round.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
        /// Rounds (transports alternate within each round).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Every barrier algorithm at 2, 4, 8 and 16 nodes, the paper's method.
    Barriers {
        /// Node counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16")]
        nodes: Vec<usize>,
        /// Scales the number of timed barriers (1.0: 2000 at 2 nodes down to 300 at 16).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-bench: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    std::fs::create_dir_all(&cli.out)?;
    match cli.bench {
        Bench::Latency { iterations, rounds } => latency(&cli.out, iterations, rounds),
        Bench::Barriers { nodes, scale } => barrier_sweep(&cli.out, &nodes, scale),
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{} × {cpu}, Linux {}", mcd::host::online_cpus(), kernel.trim())
}

fn today() -> String {
    std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn latency(out: &std::path::Path, iterations: usize, rounds: usize) -> Result<()> {
    let cluster = Cluster::up_guarded(ClusterSpec::new("bnlat", 2))?;
    let mut all: Vec<(String, Vec<SizeResult>)> = Vec::new();
    for (label, wait, sizes) in [
        ("busy-poll", WaitPolicy::BusyPoll, vec![8, 64, 256, 512, 1024, 1472]),
        ("block", WaitPolicy::Block, vec![8]),
    ] {
        let config = PingPongConfig { sizes, iterations, warmup: 2_000, rounds, wait, udp: true };
        eprintln!("latency, {label}: {} size(s) × {rounds} rounds × {iterations} round trips per transport", config.sizes.len());
        let results = pingpong::run_on_cluster(&cluster, &config, |what| eprintln!("  {what}"))?;
        all.push((label.to_string(), results));
    }
    let mut md = String::new();
    writeln!(md, "# One-way latency: mcd versus UDP\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- latency` (`./run bench`).\n", today(), machine())?;
    writeln!(
        md,
        "Method: two nodes of a virtual cluster (network namespaces, veth, a Linux bridge as switch); \
         client thread pinned to CPU 0, echo thread to CPU 1. Each round trip sends `size` bytes and \
         waits for the echo; one-way = RTT/2, recorded in an hdrhistogram. Per size and transport: \
         2,000 untimed round trips, then {iterations} timed ones, in each of {rounds} rounds; mcd and UDP \
         alternate within every round so both see the same machine noise. mcd uses `Endpoint::send` \
         and spins on its TPACKET_V2 receive ring (busy-poll) or sleeps in ppoll (block); UDP uses \
         `std::net::UdpSocket`, non-blocking recv in a loop (busy-poll) or blocking recv (block). \
         MB/s = size / mean one-way time.\n"
    )?;
    for (label, results) in &all {
        writeln!(md, "## {label}\n")?;
        writeln!(md, "| transport | bytes | p50 µs | p99 µs | p99.9 µs | mean µs | MB/s | mcd/UDP p50 |")?;
        writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for r in results {
            let ratio = pingpong::udp_ratio(results, r).map(|x| format!("**{x:.2}**")).unwrap_or_default();
            writeln!(
                md,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {ratio} |",
                r.transport, r.size, r.p50_us, r.p99_us, r.p999_us, r.mean_us, r.bandwidth_mb_s
            )?;
        }
        writeln!(md)?;
    }
    let busy = &all[0].1;
    let p50 = |t| busy.iter().find(|r| r.transport == t && r.size == 8).map(|r| r.p50_us).unwrap_or(f64::NAN);
    let ratio = p50(Transport::Mcd) / p50(Transport::Udp);
    writeln!(
        md,
        "Goal: 8-byte busy-poll one-way latency at most 0.55× UDP's. This run: {:.2} µs / {:.2} µs = **{ratio:.2}×** ({}).",
        p50(Transport::Mcd),
        p50(Transport::Udp),
        if ratio <= 0.55 { "met" } else { "not met" }
    )?;
    let md_path = out.join("latency.md");
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    let json: Vec<_> = all.iter().map(|(l, r)| serde_json::json!({ "wait": l, "results": r })).collect();
    std::fs::write(out.join("latency.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    eprintln!("wrote {} and latency.json", md_path.display());
    Ok(())
}

fn barrier_configs() -> Vec<BarrierConfig> {
    let mut configs: Vec<BarrierConfig> = Algorithm::all().into_iter().map(BarrierConfig::new).collect();
    configs.push(BarrierConfig::new(Algorithm::Tree { k: 3, release: Release::Multicast }).rails(2));
    configs.push(BarrierConfig::new(Algorithm::Concurrent).rails(2));
    configs
}

fn barrier_sweep(out: &std::path::Path, sizes: &[usize], scale: f64) -> Result<()> {
    let mut rows: Vec<BarrierMeasurement> = Vec::new();
    for &n in sizes {
        let cluster = Cluster::up_guarded(ClusterSpec::new("bnbar", n).rails(2))?;
        let iterations = ((match n {
            0..=2 => 2000.0,
            3..=4 => 1000.0,
            5..=8 => 500.0,
            _ => 300.0,
        }) * scale)
            .max(10.0) as usize;
        let bench = BarrierBench { warmup: 100, iterations, dummy: std::time::Duration::from_micros(30), wait: WaitPolicy::Adaptive };
        for config in barrier_configs() {
            let m = barrierbench::measure(&cluster, config, bench)?;
            eprintln!(
                "  n={n:<2} {:<14} rails={} mean {:>8.1} µs  p99 {:>8.1} µs",
                m.algorithm, m.rails, m.mean_us, m.p99_us
            );
            rows.push(m);
        }
    }
    let mut md = String::new();
    writeln!(md, "# Barriers on the virtual cluster\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- barriers` (`./run bench barriers`).\n", today(), machine())?;
    writeln!(
        md,
        "Method (the paper's, section 4): one thread per node, each in its node's network namespace with \
         its own mcd endpoint (2 rails, a learning bridge per rail, no injected loss); threads pinned to \
         a core each while nodes ≤ cores. Each node runs 100 untimed barriers, then repeats {{ timestamp; \
         barrier; timestamp; 30 µs dummy loop }}; it keeps its own min, mean, max and percentiles \
         (hdrhistogram), and the figures below are those averaged over the nodes. Wait policy \
         `Adaptive`: busy-poll while nodes ≤ cores (2 here), else spin briefly, yield, then sleep. \
         Retry timeout 1 ms. `recoveries` counts re-sent and answered messages (lost or late frames).\n"
    )?;
    for &n in sizes {
        writeln!(md, "## {n} nodes\n")?;
        writeln!(md, "| algorithm | rails | mean µs | p50 µs | p99 µs | min µs | max µs | recoveries |")?;
        writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        let best = rows.iter().filter(|r| r.nodes == n).map(|r| r.mean_us).fold(f64::INFINITY, f64::min);
        for r in rows.iter().filter(|r| r.nodes == n) {
            let mark = if r.mean_us == best { " **best**" } else { "" };
            writeln!(
                md,
                "| {}{mark} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                r.algorithm, r.rails, r.mean_us, r.p50_us, r.p99_us, r.min_us, r.max_us, r.recoveries
            )?;
        }
        writeln!(md)?;
    }
    writeln!(
        md,
        "This machine has 2 cores. From 4 nodes on, nodes share cores: every barrier waits for the \
         other nodes' 30 µs dummy loops to run (about n/2 × 30 µs: 60 µs at 4 nodes, 120 µs at 8, \
         240 µs at 16) and for scheduler hand-offs, so those numbers measure the machine as much as \
         the algorithm. Non-zero `recoveries` without injected loss are frames that came later than \
         the 1 ms retry timeout, while their receiver waited for a core."
    )?;
    std::fs::write(out.join("barriers.md"), &md)?;
    std::fs::write(out.join("barriers.json"), serde_json::to_string_pretty(&rows)?)?;
    print!("{md}");
    Ok(())
}
