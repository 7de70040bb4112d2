//! `mcd-bench`: head-to-head benchmarks of mcd against what users would pick
//! instead, each in one run on one virtual cluster, written to `bench/results/`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use mcd::WaitPolicy;
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
            let ratio = match r.transport {
                Transport::Mcd => results
                    .iter()
                    .find(|u| u.transport == Transport::Udp && u.size == r.size)
                    .map(|u| format!("**{:.2}**", r.p50_us / u.p50_us))
                    .unwrap_or_default(),
                Transport::Udp => String::new(),
            };
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
