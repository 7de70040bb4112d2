//! `mcd-bench`: head-to-head benchmarks of mcd against what users would pick
//! instead, each in one run on one virtual cluster, written to `bench/results/`.
#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use barriers::{Algorithm, BarrierConfig, Fanout, Release};
use clap::{Parser, Subcommand};
use mcd::WaitPolicy;
use mcd_bench::barrierbench::{self, BarrierBench, BarrierMeasurement};
use mcd_bench::pingpong::{self, PingPongConfig, SizeResult, Transport};
use mcd_vcluster::{Cluster, ClusterSpec};

/// Benchmarks of mcd against the alternatives, measured side by side in one
/// run (this machine is noisy), reporting medians and tails. Needs root.
#[derive(Parser)]
#[command(name = "mcd-bench", version)]
struct Cli {
    /// Where results are written (default: bench/results in the mcd
    /// checkout, `MCD_SOURCE_DIR` or the one this was built from).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// One-way latency, mcd versus UDP, between two virtual-cluster nodes on
    /// two cores, for busy-poll and blocking waits.
    Latency {
        /// Timed round trips per size, transport and round.
        #[arg(long, default_value_t = 20_000, value_parser = mcd_bench::cli::at_least_one)]
        iterations: usize,
        /// Rounds (transports alternate within each round).
        #[arg(long, default_value_t = 5, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
    },
    /// The LogP model against measurement: measure o_s, o_r, g, L; predict every
    /// algorithm; measure it at 2, 4, 8, 16 nodes; answer the paper's
    /// hypothesis; plot predictions from 2 to 65,536 nodes.
    Model {
        /// Node counts measured.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Scales the number of timed barriers (with --protocol: simulated barriers per run).
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
        /// Instead: the LogP simulator running the real protocol core, a
        /// core per node (`barriers::model::protocol`), under loss: mean and
        /// p99 against loss per size on 10 GbE and the paper's Fast
        /// Ethernet, and issue 29's simulator goals. No root, no network.
        /// Writes results/model_protocol.{md,json} and model-protocol.{svg,png}.
        #[arg(long)]
        protocol: bool,
        /// With --protocol: node counts of the sweep.
        #[arg(long, value_delimiter = ',', default_value = "2,8,64,512,4096")]
        sizes: Vec<usize>,
        /// With --protocol: loss rates of the sweep, percent.
        #[arg(long, value_delimiter = ',', default_value = "0,0.1,1,5,20")]
        loss: Vec<f64>,
        /// With --protocol: node counts of issue 29's goals (10 GbE).
        #[arg(long, value_delimiter = ',', default_value = "8,64,512,1024")]
        goal_nodes: Vec<usize>,
    },
    /// The head-to-head: at each node count, on one virtual cluster, mcd's
    /// barriers (every algorithm and Auto), a UDP dissemination barrier, and
    /// Open MPI's MPI_Barrier over TCP (yield and default spinning modes), all
    /// by the paper's method; plus one-way latency, mcd against UDP. Writes
    /// bench/RESULTS.md, results/head-to-head.{json,svg,png}.
    HeadToHead {
        /// Node counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Scales the number of timed barriers (1.0: 2000 at 2 nodes down to 300 at 16).
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
        /// LogP parameters for Auto (`mcd-logp --json` output; default
        /// results/logp.json if present, else measured on the spot).
        #[arg(long)]
        logp: Option<PathBuf>,
        /// Where the report goes (default: bench/RESULTS.md in the mcd
        /// checkout).
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Loss on the virtual cluster (issue 29's goals: 8 nodes, tree4 and
    /// Auto's pick, 5% within 1.5×, 20% within 4×, 50% within 20× of the
    /// lossless time, 0 recoveries lossless): injected loss of mcd frames
    /// (nftables `numgen random`, each node's ingress), the paper's method;
    /// µs per barrier and recoveries against the lossless time of the same
    /// run. Writes the virtual-cluster part of results/loss.md (the
    /// simulator's sections after it are kept) and results/loss.json.
    Loss {
        /// Node counts.
        #[arg(long, value_delimiter = ',', default_value = "8", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Loss rates, percent (0 is needed for the ratios).
        #[arg(long, value_delimiter = ',', default_value = "0,1,5,20,50")]
        loss: Vec<f64>,
        /// Algorithms: names (tree4, tree3-p2p, shuffle, dissemination,
        /// concurrent, onephase), `auto` (what a job of that many nodes on
        /// this host runs by default: Auto's pick with the reference LogP
        /// parameters, all nodes sharing this host's cores), or `all`.
        #[arg(long, value_delimiter = ',', default_value = "tree4,auto")]
        algorithms: Vec<String>,
        /// Scales the number of timed barriers (1.0: 2000 at 2 nodes down to 300 at 16).
        #[arg(long, default_value_t = 0.5, value_parser = mcd_bench::cli::positive)]
        scale: f64,
    },
    /// The hot path: a 2-node barrier against one one-way message, and
    /// against an exchange over bare endpoints, busy-polling on two cores.
    /// Writes results/hotpath.{md,json}.
    Hotpath {
        /// Timed operations per row and round.
        #[arg(long, default_value_t = 20_000, value_parser = mcd_bench::cli::at_least_one)]
        iterations: usize,
        /// Rounds (the rows alternate within each round).
        #[arg(long, default_value_t = 5, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
    },
    /// What authentication costs: the tag (SipHash-2-4 against keyed BLAKE3)
    /// per frame in isolation, and the 2-node barrier and 2-rank 8-byte
    /// allreduce with authentication on and off, interleaved. Writes
    /// results/auth.{md,json}.
    Auth {
        /// Timed calls per operation, setting and round.
        #[arg(long, default_value_t = 20_000, value_parser = mcd_bench::cli::at_least_one)]
        iterations: usize,
        /// Rounds (the settings alternate within each round).
        #[arg(long, default_value_t = 6, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
        /// Only the tag in isolation, printed and not recorded (no virtual
        /// cluster, no root): a quick check of the 100 ns goal.
        #[arg(long)]
        tag_only: bool,
        /// Instead of the A/B, the 2-rank allreduce in each of these
        /// variants, interleaved (comma-separated `on` or `off`, each
        /// optionally followed by a number of doubles, e.g.
        /// `on,off,off2,off3`; the endpoints open in this order); printed,
        /// nothing written.
        #[arg(long, conflicts_with = "tag_only")]
        lines: Option<String>,
        /// Name of the virtual cluster (1 to 4 lowercase letters or digits).
        #[arg(long, default_value = "hau", value_parser = mcd_bench::cli::cluster_stem)]
        cluster: String,
    },
    /// Load: more processes than cores, no loss. mcd's dissemination barrier
    /// (processes, yield and adaptive waiting, no MCD_LOCAL_PROCS hint)
    /// against a minimal C raw-socket dissemination barrier (spin +
    /// sched_yield). Writes results/load.{md,json}.
    Load {
        /// Node counts.
        #[arg(long, value_delimiter = ',', default_value = "4,8,16", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Rounds (the contenders alternate within each round).
        #[arg(long, default_value_t = 3, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
        /// Timed barriers per contender and round.
        #[arg(long, default_value_t = 500, value_parser = mcd_bench::cli::at_least_one)]
        iterations: usize,
    },
    /// The cost model validated: every MCD barrier figure of the paper
    /// predicted from its parameters (switch and hub, 1 and 2 networks),
    /// Auto's picks with the receive gap, a scale plot to 65,536 nodes on
    /// 1, 10 and 100 GbE; with --measure (root), also every algorithm
    /// measured on the virtual cluster. Writes results/validation.{md,json}
    /// and validation-{paper,scale}.{svg,png}.
    Validate {
        /// Also measure on the virtual cluster (needs root).
        #[arg(long)]
        measure: bool,
        /// Node counts measured.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Scales the number of timed barriers.
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
        /// Rounds of the whole measurement; each row's figure is the median of
        /// its rounds' means (this machine is shared: a burst of load spoils
        /// a round, not a row).
        #[arg(long, default_value_t = 3, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
        /// Stem of the virtual clusters' names (1 to 4 lowercase letters or digits).
        #[arg(long, default_value = "bnv", value_parser = mcd_bench::cli::cluster_stem)]
        cluster: String,
    },
    /// Many ranks per host: the hierarchical barrier against the flat one
    /// and against Open MPI with shared memory (`btl self,vader,tcp`), at
    /// hosts × ranks per host (several processes per namespace). Writes
    /// results/hierarchy.{md,json}.
    Hierarchy {
        /// Shapes, HOSTSxRANKS (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "4x4,8x2,4x8", value_parser = shape)]
        shapes: Vec<(usize, usize)>,
        /// Timed barriers per contender.
        #[arg(long, default_value_t = 300, value_parser = mcd_bench::cli::at_least_one)]
        iterations: usize,
    },
    /// Collectives: MPI_Allreduce and MPI_Bcast (osu style) in one MPI
    /// program under mpirun, Open MPI's own over TCP (yield mode) against
    /// mcd's through the interposer, and the same loop over plain UDP
    /// (recursive doubling, binomial broadcast, a process per rank); each
    /// with a barrier before every call (the goals' method) and back to
    /// back, in 3 rounds. 5 to 8 minutes at --scale 1 on the reference machine. Writes
    /// results/collectives.{md,json} and collectives-{allreduce,bcast}.{svg,png}.
    Collectives {
        /// Rank counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Message sizes, bytes (whole doubles).
        #[arg(long, value_delimiter = ',', default_value = "8,64,512,1024,1424,4096")]
        sizes: Vec<usize>,
        /// Scales the number of timed calls (1.0: 2000 at 2 ranks down to 300 at 16).
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
        /// Rounds per rank count: in each, every contender runs once, one
        /// after another; a row reports the round with the median median.
        #[arg(long, default_value_t = 3, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
        /// Stem of the virtual clusters' names (1 to 4 lowercase letters or digits).
        #[arg(long, default_value = "bnc", value_parser = mcd_bench::cli::cluster_stem)]
        cluster: String,
    },
    /// Nonblocking overlap (issue 28): MPI_Ibarrier, computation, MPI_Wait,
    /// by OSU's osu_ibarrier definition, each MPI's own against mcd's
    /// through the interposer, Open MPI and MPICH. Writes
    /// results/overlap.{md,json}.
    Overlap {
        /// Rank counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// The computing per iteration, in multiples of t_pure (1: OSU's;
        /// e.g. 1,10,100: every contender at each).
        #[arg(long, value_delimiter = ',', default_value = "1", value_parser = mcd_bench::cli::positive)]
        compute: Vec<f64>,
        /// Scales the number of timed iterations (1.0: 2000 at 2 ranks, 500 beyond).
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
        /// Rounds: in each, every contender runs once; a row reports the
        /// round with the median overlap.
        #[arg(long, default_value_t = 3, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
        /// The MPIs (openmpi, mpich; comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich", value_parser = mpi_named)]
        mpis: Vec<mcd_tools::cbuild::Mpi>,
        /// Stem of the virtual clusters' names (1 to 4 lowercase letters or digits).
        #[arg(long, default_value = "bov", value_parser = mcd_bench::cli::cluster_stem)]
        cluster: String,
    },
    /// Collectives on the benchmark's own communicators (issue 28): a job
    /// of RANKS ranks splits the world into communicators of 2, 4 and 8
    /// ranks (then dup) and times Barrier, Allreduce, Reduce, Bcast and
    /// their nonblocking forms on them, up to one frame and one size
    /// beyond, each checked against PMPI; each MPI's own against mcd's
    /// through the interposer, whose JSON report counts the calls through
    /// mcd. Writes results/comms.{md,json}.
    Comms {
        /// Ranks of the job (the communicators: 2, 4 and 8 of them).
        #[arg(long, default_value_t = 8, value_parser = mcd_bench::cli::node_count)]
        ranks: usize,
        /// Scales the number of timed calls (1.0: 300 per row, 30 for MPICH's own).
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
        /// Rounds: in each, every contender runs once; a row reports the
        /// round with the median median.
        #[arg(long, default_value_t = 3, value_parser = mcd_bench::cli::at_least_one)]
        rounds: usize,
        /// The MPIs (openmpi, mpich; comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich", value_parser = mpi_named)]
        mpis: Vec<mcd_tools::cbuild::Mpi>,
        /// Stem of the virtual clusters' names (1 to 4 lowercase letters or digits).
        #[arg(long, default_value = "bcm", value_parser = mcd_bench::cli::cluster_stem)]
        cluster: String,
    },
    /// One rank of the collectives' UDP baseline, started by `collectives`
    /// in a node's namespace (MCD_RANK set): prints its figures as JSON.
    #[command(hide = true)]
    UdpRank {
        /// The nodes' addresses, in node order.
        #[arg(long, value_delimiter = ',', required = true)]
        peers: Vec<std::net::Ipv4Addr>,
        /// Message sizes, bytes.
        #[arg(long, value_delimiter = ',', required = true)]
        sizes: Vec<usize>,
        /// Timed calls.
        #[arg(long, value_parser = mcd_bench::cli::at_least_one)]
        iterations: usize,
        /// Untimed calls first.
        #[arg(long)]
        warmup: usize,
        /// A barrier before each timed call.
        #[arg(long)]
        sync: bool,
    },
    /// The deterministic simulator's soak (barriers::sim): runs seeds of
    /// the protocol's core in virtual time across the fault mix, checking
    /// safety, agreement, liveness and verdicts; prints progress, simulated
    /// barriers per second, and every failing seed with its trace and the
    /// command that runs it again. Exits non-zero on a violation. Needs no
    /// root and no network.
    Dst(dst::DstArgs),
    /// Every barrier algorithm at 2, 4, 8 and 16 nodes, the paper's method.
    Barriers {
        /// Node counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = mcd_bench::cli::node_count)]
        nodes: Vec<usize>,
        /// Scales the number of timed barriers (1.0: 2000 at 2 nodes down to 300 at 16).
        #[arg(long, default_value_t = 1.0, value_parser = mcd_bench::cli::positive)]
        scale: f64,
    },
}

/// A shape `HOSTSxRANKS`: hosts, ranks per host.
/// An MPI by its name (`openmpi`, `mpich`).
fn mpi_named(s: &str) -> Result<mcd_tools::cbuild::Mpi, String> {
    mcd_tools::cbuild::Mpi::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| format!("`{s}`: openmpi or mpich"))
}

fn shape(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("`{s}` is not HOSTSxRANKS (e.g. 4x4)");
    let (h, r) = s.split_once('x').ok_or_else(bad)?;
    let (h, r): (usize, usize) = (h.parse().map_err(|_| bad())?, r.parse().map_err(|_| bad())?);
    if h < 1 || r < 1 {
        return Err(format!("`{s}`: at least one host and one rank per host"));
    }
    Ok((h, r))
}

fn main() {
    // Started again as one rank of `hierarchy`'s processes.
    if let Some(code) = mcd_bench::barrierbench::rank_process_main() {
        std::process::exit(code);
    }
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-bench: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    if let Bench::UdpRank { peers, sizes, iterations, warmup, sync } = &cli.bench {
        let bench = mcd_bench::udpcollectives::CollectiveBench { warmup: *warmup, iterations: *iterations, sync: *sync };
        println!("{}", mcd_bench::udpcollectives::rank_process(peers, sizes, bench)?);
        return Ok(());
    }
    if let Bench::Dst(args) = &cli.bench {
        return dst::run(args);
    }
    let checkout = mcd_tools::cbuild::source_dir;
    let out = match cli.out {
        Some(out) => out,
        None => checkout()?.join("bench/results"),
    };
    std::fs::create_dir_all(&out)?;
    match cli.bench {
        Bench::Dst(_) => unreachable!("answered above"),
        Bench::UdpRank { .. } => unreachable!("answered above"),
        Bench::Latency { iterations, rounds } => latency(&out, iterations, rounds),
        Bench::Barriers { nodes, scale } => barrier_sweep(&out, &nodes, scale),
        Bench::Loss { nodes, loss, algorithms, scale } => loss_sweep(&out, &nodes, &loss, &algorithms, scale),
        Bench::Model { protocol: true, sizes, loss, goal_nodes, scale, .. } => {
            model_protocol::run(&out, &model_protocol::Args { nodes: sizes, loss, goal_nodes, scale })
        }
        Bench::Model { nodes, scale, .. } => model(&out, &nodes, scale),
        Bench::Validate { measure, nodes, scale, rounds, cluster } => validate::run(&out, measure.then_some((&nodes[..], scale, rounds)), &cluster),
        Bench::Hotpath { iterations, rounds } => hotpath::run(&out, iterations, rounds),
        Bench::Auth { tag_only: true, .. } => auth::tag_only(),
        Bench::Auth { lines: Some(spec), iterations, rounds, cluster, .. } => auth::lines(&spec, &cluster, iterations, rounds),
        Bench::Auth { iterations, rounds, cluster, .. } => auth::run(&out, &cluster, iterations, rounds),
        Bench::Collectives { nodes, sizes, scale, rounds, cluster } => collectives::run(&out, &nodes, &sizes, scale, rounds, &cluster),
        Bench::Overlap { nodes, compute, scale, rounds, mpis, cluster } => overlap::run(&out, &nodes, &compute, scale, rounds, &mpis, &cluster),
        Bench::Comms { ranks, scale, rounds, mpis, cluster } => comms::run(&out, ranks, scale, rounds, &mpis, &cluster),
        Bench::Load { nodes, rounds, iterations } => load::run(&out, &nodes, rounds, iterations),
        Bench::Hierarchy { shapes, iterations } => hierarchy::run(&out, &shapes, iterations),
        Bench::HeadToHead { nodes, scale, logp, report } => {
            let logp = logp.or_else(|| Some(out.join("logp.json")).filter(|p| p.exists()));
            let report = match report {
                Some(report) => report,
                None => checkout()?.join("bench/RESULTS.md"),
            };
            head_to_head::run(&out, &report, &nodes, scale, logp.as_deref())
        }
    }
}

mod auth;
mod collectives;
mod comms;
mod dst;
mod head_to_head;
mod hierarchy;
mod hotpath;
mod load;
mod model_protocol;
mod overlap;
mod validate;

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
    let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnlat"), 2))?;
    let mut all: Vec<(String, Vec<SizeResult>)> = Vec::new();
    for (label, wait, sizes) in [("busy-poll", WaitPolicy::BusyPoll, vec![8, 64, 256, 512, 1024, 1472]), ("block", WaitPolicy::Block, vec![8])] {
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
    configs.push(BarrierConfig::new(Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast }).rails(2));
    configs.push(BarrierConfig::new(Algorithm::Concurrent).rails(2));
    configs
}

fn iterations_for(n: usize, scale: f64) -> usize {
    ((match n {
        0..=2 => 2000.0,
        3..=4 => 1000.0,
        5..=8 => 500.0,
        _ => 300.0,
    }) * scale)
        .max(10.0) as usize
}

/// The paper's method at `n` nodes, `Adaptive` waiting.
fn paper_bench(n: usize, scale: f64) -> BarrierBench {
    BarrierBench {
        method: barrierbench::Method::Paper,
        warmup: 100,
        iterations: iterations_for(n, scale),
        dummy: std::time::Duration::from_micros(30),
        wait: WaitPolicy::Adaptive,
    }
}

fn barrier_sweep(out: &std::path::Path, sizes: &[usize], scale: f64) -> Result<()> {
    let mut rows: Vec<BarrierMeasurement> = Vec::new();
    for &n in sizes {
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnbar"), n).rails(2))?;
        let bench = paper_bench(n, scale);
        for config in barrier_configs() {
            let m = barrierbench::measure(&cluster, config, bench)?;
            eprintln!("  n={n:<2} {:<14} rails={} mean {:>8.1} µs  p99 {:>8.1} µs", m.algorithm, m.rails, m.mean_us, m.p99_us);
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
         The retry timeout is learned (first 250 µs, floor 20 µs). `recoveries` counts data frames sent again because a peer asked (answers to NACKs).\n"
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
         the learned retry timeout, while their sender or receiver waited for a core."
    )?;
    std::fs::write(out.join("barriers.md"), &md)?;
    std::fs::write(out.join("barriers.json"), serde_json::to_string_pretty(&rows)?)?;
    print!("{md}");
    Ok(())
}

/// The heading where `results/loss.md`'s simulator sections begin: a loss
/// sweep on the virtual cluster rewrites what comes before it only.
const LOSS_SIMULATOR_SECTIONS: &str = "\n## Simulator";

/// The part of `results/loss.md` a loss sweep keeps: from the simulator's
/// first section on ("" without one).
fn simulator_sections(loss_md: &str) -> &str {
    loss_md.find(LOSS_SIMULATOR_SECTIONS).map_or("", |at| &loss_md[at..])
}

/// The configurations `--algorithms` names at `n` nodes, each with its row's name.
fn loss_configs(names: &[String], n: usize) -> Result<Vec<(String, BarrierConfig)>> {
    let mut configs = Vec::new();
    for name in names {
        match name.as_str() {
            "all" => configs.extend(Algorithm::all().into_iter().map(|a| (a.to_string(), BarrierConfig::new(a)))),
            "auto" => {
                // As a job's default policy picks (JobPolicy: the reference
                // parameters), every node sharing this host's cores.
                let config = BarrierConfig::auto_on_host(n, 1, &barriers::model::LogP::REFERENCE, true, n, mcd::host::online_cpus());
                configs.push((format!("auto ({})", config.algorithm), config));
            }
            other => {
                let algorithm: Algorithm = other.parse().map_err(|e: String| anyhow::anyhow!("--algorithms: {e}, or auto, or all"))?;
                configs.push((algorithm.to_string(), BarrierConfig::new(algorithm)));
            }
        }
    }
    anyhow::ensure!(!configs.is_empty(), "--algorithms: name at least one");
    Ok(configs)
}

fn loss_sweep(out: &std::path::Path, sizes: &[usize], losses: &[f64], algorithms: &[String], scale: f64) -> Result<()> {
    anyhow::ensure!(!sizes.is_empty() && sizes.iter().all(|&n| n >= 2), "--nodes: node counts of at least 2");
    anyhow::ensure!(losses.iter().all(|l| (0.0..100.0).contains(l)), "--loss: percentages from 0 to below 100");
    anyhow::ensure!(scale > 0.0, "--scale must be above 0");
    for &n in sizes {
        loss_configs(algorithms, n)?; // bad names fail before any cluster is made
    }
    let md_path = out.join("loss.md");
    // The simulator's sections (written by hand from `examples/loss_sweep`) stay.
    let kept = match std::fs::read_to_string(&md_path) {
        Ok(old) => simulator_sections(&old).to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", md_path.display())),
    };
    let mut rows: Vec<(f64, BarrierMeasurement)> = Vec::new();
    for &n in sizes {
        let configs = loss_configs(algorithms, n)?;
        for &loss in losses {
            let mut spec = ClusterSpec::new(&mcd_vcluster::prefixed_name("bnloss"), n);
            if loss > 0.0 {
                spec = spec.loss(loss, mcd_vcluster::LossPoint::Node);
            }
            let cluster = Cluster::up_guarded(spec)?;
            let bench = paper_bench(n, scale);
            for (name, config) in &configs {
                let mut m = barrierbench::measure(&cluster, *config, bench)?;
                m.algorithm = name.clone();
                eprintln!(
                    "  n={n:<2} loss {loss:>4}% {:<14} mean {:>9.1} µs  p50 {:>8.1} µs  p99 {:>9.1} µs  recoveries {} ({})",
                    m.algorithm, m.mean_us, m.p50_us, m.p99_us, m.recoveries, m.kinds
                );
                rows.push((loss, m));
            }
        }
    }
    let mut md = String::new();
    writeln!(md, "# Loss and load\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- loss` (`./run bench loss`).\n", today(), machine())?;
    writeln!(
        md,
        "Method: the paper's (as in [barriers.md](barriers.md)): one thread per node in its own \
         namespace and endpoint, one rail, a learning bridge, `Adaptive` waiting, 100 untimed barriers, \
         then {{ timestamp; barrier; timestamp; 30 µs dummy loop }}, figures averaged over the nodes. \
         Loss: nftables drops that share of mcd frames at every node's ingress (`numgen random`), so a \
         multicast can reach some nodes and not others; independent losses only (nftables keeps no \
         state from one frame to the next, so bursts are the simulator's, below). Default timeouts: the \
         retry timeout is learned from clean step times, a peer is dead after 10 s of silence. `×` is \
         the mean against the same row's lossless mean in this run. `recoveries`: NACKs sent (but \
         probes of late peers: NACKs sent with no evidence of loss, which ask where a peer is), answers \
         and unasked copies, all nodes, warm-up included (what the simulator counts); by kind in \
         brackets, with the probes and the statuses that answered them. `auto (X)`: the algorithm a job of that many nodes on this host runs by default.\n"
    )?;
    let names: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for (_, m) in &rows {
            if !v.contains(&m.algorithm) {
                v.push(m.algorithm.clone());
            }
        }
        v
    };
    let at = |n: usize, name: &str, loss: f64| rows.iter().find(|(l, m)| *l == loss && m.nodes == n && m.algorithm == name).map(|(_, m)| m);
    for &n in sizes {
        writeln!(md, "## {n} nodes\n")?;
        write!(md, "| algorithm |")?;
        for loss in losses {
            write!(md, " {loss}%: mean µs (×) | p50 µs | p99 µs | recoveries |")?;
        }
        writeln!(md)?;
        writeln!(md, "|---|{}", "---:|---:|---:|---:|".repeat(losses.len()))?;
        for name in &names {
            let base = at(n, name, 0.0).map_or(f64::NAN, |m| m.mean_us);
            write!(md, "| {name} |")?;
            for &loss in losses {
                match at(n, name, loss) {
                    Some(m) => write!(
                        md,
                        " {:.1} ({:.2}×) | {:.1} | {:.1} | {} ({}) |",
                        m.mean_us,
                        m.mean_us / base,
                        m.p50_us,
                        m.p99_us,
                        m.recoveries,
                        m.kinds
                    )?,
                    None => write!(md, " – | – | – | – |")?,
                }
            }
            writeln!(md)?;
        }
        writeln!(md)?;
    }
    // Issue 29's goals, for tree4 and Auto's pick, stated plainly.
    writeln!(md, "## Goals (issue 29: tree4 and Auto's pick)\n")?;
    let verdict = |ok: bool| if ok { "met" } else { "**not met**" };
    for &n in sizes {
        for name in names.iter().filter(|name| *name == "tree4" || name.starts_with("auto")) {
            let Some(base) = at(n, name, 0.0) else { continue };
            let mut parts = vec![format!("0 recoveries lossless: {} ({})", base.recoveries, verdict(base.recoveries == 0))];
            for (loss, goal) in [(5.0, 1.5), (20.0, 4.0), (50.0, 20.0)] {
                if let Some(m) = at(n, name, loss) {
                    let ratio = m.mean_us / base.mean_us;
                    parts.push(format!("{loss}% {ratio:.2}× (goal ≤ {goal}×: {})", verdict(ratio <= goal)));
                }
            }
            writeln!(md, "- {n} nodes, {name}: {}.", parts.join("; "))?;
        }
    }
    writeln!(
        md,
        "\nThis machine has 2 cores: from 4 nodes on, the nodes share them, so every barrier also waits \
         for the other nodes' dummy loops and for the scheduler, and a late frame there is as often a \
         descheduled receiver as a lost one. The simulator's sections below measure the protocol with a \
         core per node."
    )?;
    std::fs::write(&md_path, format!("{md}{kept}")).with_context(|| format!("writing {}", md_path.display()))?;
    let json: Vec<_> = rows.iter().map(|(loss, m)| serde_json::json!({ "loss_percent": loss, "measurement": m })).collect();
    std::fs::write(out.join("loss.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    Ok(())
}

fn model(out: &std::path::Path, sizes: &[usize], scale: f64) -> Result<()> {
    use barriers::model::{self, LogP};
    use mcd_bench::logp;

    // 1. The parameters, on the same kind of link.
    let params_cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnlogp"), 2))?;
    let measured = logp::measure_on_cluster(&params_cluster, &[WaitPolicy::BusyPoll, WaitPolicy::Block], logp::Effort::default(), true, |what| {
        eprintln!("  LogP: {what}")
    })?;
    drop(params_cluster);
    let busy = measured.iter().find(|m| m.transport == Transport::Mcd && m.wait == "busy").context("busy measurement")?;
    let p = busy.logp();
    eprintln!("  model parameters (busy): {p:?}");

    // 2. Predicted against measured, per algorithm and size.
    let mut rows = Vec::new();
    for &n in sizes {
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnmod"), n).rails(2))?;
        let bench = paper_bench(n, scale);
        for config in barrier_configs() {
            let predicted = model::simulate(config.algorithm, n, config.rails, &p);
            let m = barrierbench::measure(&cluster, config, bench)?;
            eprintln!("  n={n:<2} {:<14} rails={} predicted {:>7.1} µs measured {:>7.1} µs", m.algorithm, m.rails, predicted.last_exit, m.mean_us);
            rows.push((n, config, predicted, m));
        }
    }

    // 3. The paper's hypothesis at scale, and the plot.
    let plot_sizes: Vec<usize> = (1..=16).map(|e| 1usize << e).collect();
    let mut plotted = Algorithm::all();
    plotted.push(Algorithm::tree(8, Release::Multicast).expect("8 ≥ 2"));
    let mut curves = Vec::new();
    for (label, params) in [("measured", p), ("paper", LogP::PAPER)] {
        for &a in &plotted {
            let points: Vec<(usize, f64)> = plot_sizes.iter().map(|&n| (n, model::simulate(a, n, 1, &params).last_exit)).collect();
            curves.push((label, a, points));
        }
    }
    plot_model(&out.join("model"), &curves, "measured", &format!("mcd on this machine: {}", fmt_logp(&p)))?;
    plot_model(&out.join("model-paper"), &curves, "paper", &format!("the paper's MCD: {}", fmt_logp(&LogP::PAPER)))?;

    // 4. The report.
    let mut md = String::new();
    writeln!(md, "# The LogP model against measurement\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- model`.\n", today(), machine())?;
    writeln!(md, "## Parameters (`mcd-logp`)\n")?;
    writeln!(md, "Methods: o_s = time of an isolated send call; g = steady-state time per message in bursts of 200 back-to-back sends; o_r = time of a receive call whose message has surely arrived (three round trips after asking for it); L = RTT/2 − o_s − o_r. Medians [p10, p90] of the last round; rounds repeat until every median moves less than 3%.\n")?;
    writeln!(md, "```\n{}```\n", logp::table(&measured))?;
    writeln!(
        md,
        "On veth there is no wire: the send system call itself carries the frame through the bridge into the \
         receiver's ring, so o_s is as long as the whole one-way trip and L comes out negative; the receive \
         overhead o_r is a read of the mmap'd ring, about 0.1 µs (UDP's `recv` is five times that). The model \
         clamps L at 0 and keeps o_s as measured, since the sender's CPU is busy for the whole send call \
         and a barrier's next step waits for it: **{}**.\n",
        fmt_logp(&p)
    )?;
    writeln!(md, "## Predicted against measured\n")?;
    writeln!(md, "Prediction: the discrete-event simulation of each algorithm's message pattern (time until the last node leaves, all entering together). Measured: the paper's method (`bench/results/barriers.md` explains it), mean per-node barrier time. Error = (predicted − measured) / measured.\n")?;
    for &n in sizes {
        let auto = model::auto(n, 1, &p, true).0;
        writeln!(md, "### {n} nodes{}\n", if n > mcd::host::online_cpus() { " (more nodes than cores)" } else { "" })?;
        writeln!(md, "| algorithm | rails | predicted µs | measured mean µs | error |")?;
        writeln!(md, "|---|---:|---:|---:|---:|")?;
        for (_, config, pr, m) in rows.iter().filter(|r| r.0 == n) {
            let err = (pr.last_exit - m.mean_us) / m.mean_us * 100.0;
            let mark = if config.algorithm == auto && config.rails == 1 { " (Auto's pick)" } else { "" };
            writeln!(md, "| {}{mark} | {} | {:.1} | {:.1} | {:+.0}% |", config.algorithm, config.rails, pr.last_exit, m.mean_us, err)?;
        }
        writeln!(md)?;
    }
    let within: Vec<f64> =
        rows.iter().filter(|r| r.0 <= mcd::host::online_cpus()).map(|(_, _, pr, m)| ((pr.last_exit - m.mean_us) / m.mean_us * 100.0).abs()).collect();
    let worst = within.iter().cloned().fold(0.0, f64::max);
    writeln!(
        md,
        "Where processes ≤ cores (2 nodes here) the worst error is **{worst:.0}%**, and {ok} of {total} \
         predictions are within the 20% goal. The model counts only the LogP costs of messages; the barrier \
         engine's own work per barrier (entering and leaving, epoch bookkeeping, the set of received messages, \
         timer checks) adds a roughly constant microsecond that no LogP parameter holds, so predictions come \
         out low, most of all, relatively, for the algorithms whose whole cost is one message at 2 nodes \
         (shuffle, dissemination, one-phase). Run-to-run noise on this VM is of the same order (compare \
         `barriers.md`). With more processes than cores the model misses by far: it assumes a CPU per node, \
         while here nodes wait for a core (and for the others' 30 µs dummy loops; see `barriers.md`), which \
         no LogP parameter describes.\n",
        ok = within.iter().filter(|e| **e <= 20.0).count(),
        total = within.len(),
    )?;
    writeln!(md, "## The paper's hypothesis: with a low o_r, does a 4-ary tree beat shuffle exchange?\n")?;
    writeln!(md, "The paper (section 5): at 16 nodes the 4-ary tree beats shuffle exchange when 3·o_r < o_s + L. With MCD's 2000 parameters (o_r 9.5, o_s + L 20.5) it does not hold; here o_r is {:.2} µs against o_s + L = {:.2} µs, so it holds by a wide margin. Simulated, measured parameters:\n", p.o_r, p.o_s + p.l)?;
    writeln!(md, "| nodes | shuffle µs | tree4 µs | best algorithm (Auto) | its µs |")?;
    writeln!(md, "|---:|---:|---:|---|---:|")?;
    for n in [16usize, 64, 256, 1024, 4096, 16384, 65536] {
        let sh = model::simulate(Algorithm::ShuffleExchange, n, 1, &p).last_exit;
        let t4 = model::simulate(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, n, 1, &p).last_exit;
        let (best, bp) = model::auto(n, 1, &p, true);
        writeln!(md, "| {n} | {sh:.1} | {t4:.1} | {best} | {:.1} |", bp.last_exit)?;
    }
    writeln!(md)?;
    let measured_at = |n: usize, a: Algorithm| rows.iter().find(|r| r.0 == n && r.1.algorithm == a && r.1.rails == 1).map(|r| r.3.mean_us);
    for &n in sizes {
        if let (Some(sh), Some(t4)) =
            (measured_at(n, Algorithm::ShuffleExchange), measured_at(n, Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }))
        {
            writeln!(
                md,
                "- measured at {n} nodes: shuffle {sh:.1} µs, tree4 {t4:.1} µs{}",
                if n > mcd::host::online_cpus() { " (oversubscribed: not a test of the hypothesis)" } else { "" }
            )?;
        }
    }
    writeln!(md, "\nPlots of the simulated cost from 2 to 65,536 nodes: [model.svg](model.svg) / [model.png](model.png) (parameters measured here) and [model-paper.svg](model-paper.svg) / [model-paper.png](model-paper.png) (the paper's).")?;
    std::fs::write(out.join("model.md"), &md)?;
    let json = serde_json::json!({
        "parameters": measured,
        "model_parameters": p,
        "rows": rows.iter().map(|(n, c, pr, m)| serde_json::json!({
            "nodes": n, "algorithm": c.algorithm.to_string(), "rails": c.rails,
            "predicted_us": pr.last_exit, "measured_mean_us": m.mean_us })).collect::<Vec<_>>(),
    });
    std::fs::write(out.join("model.json"), serde_json::to_string_pretty(&json)?)?;
    std::fs::write(out.join("logp.json"), serde_json::to_string_pretty(&measured)?)?;
    print!("{md}");
    Ok(())
}

fn fmt_logp(p: &barriers::model::LogP) -> String {
    format!("o_s {:.2} µs, o_r {:.2} µs, g {:.2} µs, L {:.2} µs", p.o_s, p.o_r, p.g, p.l)
}

type Curve = (&'static str, Algorithm, Vec<(usize, f64)>);

fn plot_model(path: &std::path::Path, curves: &[Curve], which: &str, title: &str) -> Result<()> {
    let series: Vec<mcd_bench::plot::Series> = curves
        .iter()
        .filter(|c| c.0 == which)
        .map(|(_, a, points)| mcd_bench::plot::Series {
            label: a.to_string(),
            points: points.iter().map(|&(n, t)| (n as f64, t.max(0.5))).collect(),
            dashed: false,
            key: a.to_string(),
        })
        .collect();
    mcd_bench::plot::nodes_vs_time(path, "Predicted barrier time (LogP simulation)", &[mcd_bench::plot::Panel { title: title.to_string(), series }])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_sweep_keeps_the_simulator_sections_and_only_them() {
        let md = "# Loss and load\n\n## 8 nodes\n| old |\n\n## Simulator: the real protocol\nkept\n### Session 13\nkept too\n";
        assert_eq!(simulator_sections(md), "\n## Simulator: the real protocol\nkept\n### Session 13\nkept too\n");
        assert_eq!(simulator_sections("# Loss and load\n## 8 nodes\n"), "");
    }

    #[test]
    fn loss_configs_name_auto_by_its_pick_and_refuse_unknown_names() {
        let configs = loss_configs(&["tree4".into(), "auto".into()], 8).unwrap();
        assert_eq!(configs[0].0, "tree4");
        assert_eq!(configs[1].0, format!("auto ({})", configs[1].1.algorithm));
        assert_eq!(loss_configs(&["all".into()], 8).unwrap().len(), Algorithm::all().len());
        let e = loss_configs(&["tree1".into()], 8).unwrap_err().to_string();
        assert!(e.contains("--algorithms") && e.contains("tree1"), "{e}");
        assert!(loss_configs(&[], 8).is_err());
    }
}
