//! `mcd-barrier`: the barrier microbenchmark.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use barriers::model::{self, LogP};
use barriers::{Algorithm, BarrierConfig, Collective, HostRelease};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use mcd::WaitPolicy;
use mcd_bench::barrierbench::{self, BarrierBench, BarrierMeasurement, Method, RanksBarrier};
use mcd_bench::cli;
use mcd_bench::logp;
use mcd_bench::plot::{self, Panel, Series};
use mcd_vcluster::{Cluster, ClusterSpec, Topology};
use serde::Serialize;

/// The barrier microbenchmark: times mcd's barrier algorithms on a virtual
/// cluster it builds (and takes down) itself, sweeping node counts ×
/// algorithms × topology × rails × wait policy. Beside each measurement it
/// shows the LogP model's prediction, and it marks the algorithm `auto` would
/// pick. Needs root.
///
/// Methods: `paper` (Iwasaki, Matsuoka et al.: per iteration timestamp,
/// barrier, timestamp, a 30 µs dummy loop; per-node min/mean/max averaged over
/// nodes) or `osu` (osu_barrier: warm-up, then back-to-back barriers; min/avg/max
/// of the per-node means). Percentiles (p50, p99) come from per-node
/// hdrhistograms, averaged over nodes.
///
/// With no arguments: 2 and 4 nodes, every algorithm and auto, a switch, one
/// rail, adaptive waiting, the paper's method; about half a minute.
///
/// Collectives: `--collective allreduce|reduce|bcast --bytes N` times that
/// call on N bytes of doubles instead of a barrier, by the same methods,
/// with the same outputs (the table, results.csv and results.json with the
/// collective and its bytes on every row, and plots named after it,
/// e.g. `allreduce-800B-adaptive.svg`); predictions count the data.
#[derive(Parser)]
#[command(name = "mcd-barrier", version)]
struct Cli {
    /// Node counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2,4", value_parser = cli::node_count)]
    nodes: Vec<usize>,
    /// Algorithms (comma-separated): shuffle, dissemination, tree<k>, tree<k>-p2p,
    /// concurrent, onephase, auto; or `all` (every one, and auto).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    algorithms: Vec<String>,
    /// Topologies: switch, hub (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "switch")]
    topology: Vec<Topology>,
    /// Rail counts (comma-separated): with 2, trees and concurrent spread over the NICs.
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = cli::at_least_one)]
    rails: Vec<usize>,
    /// Wait policies (comma-separated): busy, yield, block, adaptive.
    #[arg(long, value_delimiter = ',', default_value = "adaptive")]
    wait: Vec<WaitPolicy>,
    /// Timing convention: paper or osu.
    #[arg(long, default_value = "paper")]
    method: Method,
    /// Timed barriers per measurement (default: 1000 at 2 nodes, fewer beyond).
    #[arg(long, value_parser = cli::at_least_one)]
    iterations: Option<usize>,
    /// Untimed barriers first.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// LogP parameters for the predictions: a JSON file from `mcd-logp --json`
    /// (the busy-poll mcd entry is used). Measured on the spot when left out.
    #[arg(long)]
    logp: Option<PathBuf>,
    /// The cost of waking a process, µs, for predictions with more nodes
    /// than cores (`mcd-logp` prints it: RTT/2 blocking minus busy; 23 µs on
    /// the reference machine).
    #[arg(long, default_value_t = 23.0)]
    wake_us: f64,
    /// The engine's own time per barrier beyond its messages, µs
    /// (`mcd-bench validate --measure` measures it before every row, a 2-node
    /// shuffle barrier minus a ping-pong's hop: 1.4 µs, the median of its
    /// recorded run; 0.5 to 2.7 µs from one measurement to the next).
    #[arg(long, default_value_t = 1.4)]
    engine_us: f64,
    /// On the virtual cluster, what the bridge's copies of a frame beyond
    /// the first cost the sender, µs each (veth copies in the sender's
    /// context): DROPPED,DELIVERED, a hub's unicast to ports that drop it and
    /// a multicast's to its receivers (`mcd-logp --flood-ports 2,4,8,16`
    /// measures both).
    #[arg(long, default_value = COPY_DEFAULT, value_parser = copy_cost)]
    copy_us: (f64, f64),
    /// Where to write results.csv, results.json and the plots.
    #[arg(long, default_value = "mcd-barrier-results")]
    out: PathBuf,
    /// Run across real hosts instead of a virtual cluster: start one
    /// mcd-barrier per node (srun, mpirun, or by hand with MCD_RANK and
    /// MCD_SIZE); the nodes come from MCD_NODES / MCD_NODE_FILE or are
    /// discovered, the interfaces from MCD_IFACES or the default route, the
    /// job's secret from MCD_KEY_FILE (the same 0600 file of 16 random bytes
    /// for every node; MCD_AUTH=off runs unauthenticated). Node 0
    /// prints and writes the results. --nodes, --topology and --rails do not
    /// apply; without --logp the predictions use the reference parameters.
    #[arg(long)]
    across_hosts: bool,
    /// Ranks per host (comma-separated): with more than one, each node of
    /// the virtual cluster (a host) runs that many ranks, each a process of
    /// its own (this program again) with its own endpoint, and every
    /// algorithm is measured flat (every rank on the wire) and hierarchical
    /// (`hier:ALG+RELEASE`: the host's ranks meet in shared memory, the
    /// hosts' leaders run the algorithm, the host is released as
    /// --host-release says). `--nodes` counts hosts.
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = cli::at_least_one)]
    ranks_per_host: Vec<usize>,
    /// With --ranks-per-host: how the hierarchical barrier releases a host
    /// (comma-separated, each measured): shm (the leader, through shared
    /// memory), multicast (every rank takes the leaders' release multicast;
    /// algorithms whose release is not one multicast fall back to shm), or
    /// auto (the library's choice for the wait policy).
    #[arg(long, value_delimiter = ',', default_value = "auto", value_parser = host_release)]
    host_release: Vec<Option<HostRelease>>,
    /// What to time: barrier, allreduce (sum of doubles), reduce (sum of
    /// doubles to the last node), bcast (from node 0). Collectives skip
    /// dissemination (it does not reduce), and auto picks among the
    /// algorithms that reduce, for --bytes. Virtual cluster only, one rank
    /// per node.
    #[arg(long, default_value = "barrier")]
    collective: String,
    /// The collective's data, bytes: whole doubles, 8 to 1048576 (default
    /// 8); more than one frame's worth goes in one-frame segments. Not for
    /// barriers.
    #[arg(long)]
    bytes: Option<usize>,
    /// The virtual clusters' name (unique among clusters up at once).
    #[arg(long, default_value = "mb")]
    cluster_name: String,
}

/// The bridge's copies as measured on the reference machine (`mcd-logp
/// --flood-ports 2,4,8,16`, `mcd-bench validate --measure`), µs: dropped
/// (0.6 to 1.1 over four runs, more under load), delivered (1.0 to 1.7).
const COPY_DEFAULT: &str = "0.8,1.6";

/// Two non-negative numbers, DROPPED,DELIVERED.
fn copy_cost(s: &str) -> Result<(f64, f64), String> {
    match LogP::parse_numbers(s)?[..] {
        [dropped, delivered] => Ok((dropped, delivered)),
        ref v => Err(format!("`{s}` has {} numbers; give DROPPED,DELIVERED (µs)", v.len())),
    }
}

impl Cli {
    /// The model of the machine the nodes run on: `p`, this machine's cores,
    /// `--wake-us` per change of process, `--engine-us` per barrier; on the
    /// virtual cluster (`per_host` None: every node here) `--flood-us` per
    /// bridge port, on real hosts (`per_host` Some) nothing.
    fn model_here(&self, p: LogP, per_host: Option<usize>) -> model::VirtualCluster {
        model::VirtualCluster {
            logp: p,
            cores: mcd::host::online_cpus(),
            wake: self.wake_us,
            engine: self.engine_us,
            fanout: if per_host.is_some() { 0.0 } else { self.copy_us.1 },
            flood: if per_host.is_some() { 0.0 } else { self.copy_us.0 },
            per_host,
        }
    }

    /// How to time one measurement at `n` nodes with `wait`.
    fn bench(&self, n: usize, wait: WaitPolicy) -> BarrierBench {
        BarrierBench {
            method: self.method,
            warmup: self.warmup,
            iterations: self.iterations.unwrap_or_else(|| iterations_for(n)),
            dummy: Duration::from_micros(30),
            wait,
        }
    }
}

#[derive(Serialize)]
struct Row {
    /// What was timed: barrier, allreduce, reduce, bcast (with its bytes).
    collective: String,
    /// The collective's data, bytes (0 for a barrier).
    bytes: usize,
    /// switch, hub, or hosts (across real hosts).
    topology: String,
    wait: String,
    #[serde(flatten)]
    measured: BarrierMeasurement,
    predicted_us: f64,
    /// Where processes outnumber cores: what the measurement should fall
    /// between (µs), since the point prediction cannot be trusted there.
    bounds_us: Option<(f64, f64)>,
    auto_pick: bool,
    /// Ranks on each host (1: one per node of the cluster).
    ranks_per_host: usize,
}

impl Row {
    /// A barrier (one rank per node) measured on `topology` with `wait`,
    /// against the model's estimate `est`; `auto_pick` when the model picks
    /// its algorithm.
    fn barrier(topology: String, wait: WaitPolicy, measured: BarrierMeasurement, est: &model::Estimate, auto_pick: bool) -> Row {
        Row {
            collective: "barrier".into(),
            bytes: 0,
            topology,
            wait: wait.to_string(),
            predicted_us: est.predicted.mean_cost,
            bounds_us: est.bounds,
            auto_pick,
            measured,
            ranks_per_host: 1,
        }
    }
}

/// `--host-release`: `auto` (`None`), `shm` or `multicast`.
fn host_release(s: &str) -> Result<Option<HostRelease>, String> {
    match s {
        "auto" => Ok(None),
        other => other.parse().map(Some).map_err(|_| format!("`{other}`: shm, multicast or auto")),
    }
}

fn main() {
    // Started again as one rank of --ranks-per-host.
    if let Some(code) = barrierbench::rank_process_main() {
        std::process::exit(code);
    }
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-barrier: {e:#}");
        std::process::exit(1);
    }
}

fn algorithms(names: &[String]) -> Result<(Vec<Algorithm>, bool)> {
    let mut list = Vec::new();
    let mut auto = false;
    for name in names {
        match name.as_str() {
            "all" => {
                list.extend(Algorithm::all());
                auto = true;
            }
            "auto" => auto = true,
            other => list.push(other.parse::<Algorithm>().map_err(anyhow::Error::msg)?),
        }
    }
    list.dedup();
    Ok((list, auto))
}

fn iterations_for(n: usize) -> usize {
    match n {
        0..=2 => 1000,
        3..=4 => 500,
        5..=8 => 300,
        _ => 200,
    }
}

/// The most data `--bytes` takes.
const MAX_BYTES: usize = 1 << 20;

/// The collective's data, bytes, from `--bytes` (checked against `--collective`).
fn data_len(cli: &Cli) -> Result<usize> {
    match (cli.collective.as_str(), cli.bytes) {
        ("barrier", Some(_)) => anyhow::bail!("--bytes is the data of --collective allreduce, reduce or bcast, not of a barrier"),
        ("barrier", None) => Ok(0),
        (_, None) => Ok(8),
        (_, Some(b)) if (8..=MAX_BYTES).contains(&b) && b % 8 == 0 => Ok(b),
        (c, Some(b)) => anyhow::bail!("--bytes {b}: {c} runs on doubles: a multiple of 8 from 8 to {MAX_BYTES}"),
    }
}

/// What the rows, table and plots call the timed call: `barrier`, or e.g. `allreduce 800 B`.
fn call_name(cli: &Cli, bytes: usize) -> String {
    if cli.collective == "barrier" {
        "barrier".into()
    } else {
        format!("{} {bytes} B", cli.collective)
    }
}

/// The `--collective` at `n` nodes.
fn collective(name: &str, n: usize) -> Result<Collective> {
    let (op, dtype) = (barriers::Op::Sum, barriers::Dtype::F64);
    Ok(match name {
        "barrier" => Collective::Barrier,
        "allreduce" => Collective::Allreduce { op, dtype },
        "reduce" => Collective::Reduce { op, dtype, root: n - 1 },
        "bcast" => Collective::Bcast { root: 0 },
        other => anyhow::bail!("--collective {other}: barrier, allreduce, reduce or bcast"),
    })
}

fn run(cli: Cli) -> Result<()> {
    let (mut algs, with_auto) = algorithms(&cli.algorithms)?;
    let call = collective(&cli.collective, 2)?;
    let bytes = data_len(&cli)?;
    anyhow::ensure!(call == Collective::Barrier || !cli.across_hosts, "--collective runs on the virtual cluster only");
    algs.retain(|&a| call.runs_on(a));
    anyhow::ensure!(!algs.is_empty() || with_auto, "no algorithm to measure");
    if cli.across_hosts {
        return run_across_hosts(&cli, &algs, with_auto);
    }
    let p = logp::load_or_measure(cli.logp.as_deref())?;
    eprintln!("LogP parameters: o_s {:.2} µs, o_r {:.2} µs, g {:.2} µs, L {:.2} µs", p.o_s, p.o_r, p.g, p.l);
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;

    let per_cluster = algs.len() + usize::from(with_auto);
    let per_shape: usize = cli.ranks_per_host.iter().map(|&r| if r > 1 { 1 + cli.host_release.len() } else { 1 }).sum();
    let total = cli.topology.len() * cli.rails.len() * cli.nodes.len() * cli.wait.len() * per_cluster * per_shape;
    let bar = ProgressBar::new(total as u64);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} {msg}").expect("template"));
    let mut rows: Vec<Row> = Vec::new();
    for &topology in &cli.topology {
        for &rails in &cli.rails {
            for &n in &cli.nodes {
                bar.set_message(format!("bringing up {n} nodes, {rails} rail(s), {topology}"));
                let cluster = Cluster::up_guarded(ClusterSpec::new(&cli.cluster_name, n).rails(rails).topology(topology))?;
                // Every node of the virtual cluster shares this machine's cores.
                let call = collective(&cli.collective, n)?;
                let (auto_alg, _) = if call == Collective::Barrier {
                    model::auto_on_host(n, rails, &p, true, n, mcd::host::online_cpus())
                } else {
                    model::auto_collective_on_host(n, rails, &model::Setup::logp(&p), true, bytes, n, mcd::host::online_cpus())
                };
                for &wait in &cli.wait {
                    if call != Collective::Barrier && cli.ranks_per_host.iter().any(|&r| r > 1) {
                        anyhow::bail!("--ranks-per-host above 1 times barriers only, not --collective {}", cli.collective);
                    }
                    for &per_host in cli.ranks_per_host.iter().filter(|&&r| r > 1) {
                        rows.extend(measure_shared_hosts(&cli, &cluster, per_host, (&algs, with_auto), wait, &p, &bar)?);
                    }
                    if !cli.ranks_per_host.contains(&1) {
                        continue;
                    }
                    let bench = cli.bench(n, wait);
                    let mut todo: Vec<(Algorithm, bool)> = algs.iter().map(|&a| (a, false)).collect();
                    if with_auto {
                        todo.push((auto_alg, true));
                    }
                    for (algorithm, is_auto_row) in todo {
                        bar.set_message(format!("{n} nodes, {topology}, {rails} rail(s), {wait}: {algorithm}"));
                        let config = BarrierConfig::new(algorithm).rails(rails);
                        let mut measured = barrierbench::measure_collective(&cluster, config, bench, call, bytes)?;
                        if is_auto_row {
                            measured.algorithm = format!("auto={algorithm}");
                        }
                        let here = cli.model_here(p, None);
                        let est = here.estimate_with_data(algorithm, n, rails, model_topology(topology), dummy_us(&bench), data_bytes(call, bytes));
                        rows.push(Row {
                            collective: call_name(&cli, bytes),
                            bytes,
                            ..Row::barrier(topology.to_string(), wait, measured, &est, algorithm == auto_alg)
                        });
                        bar.inc(1);
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    report(&cli, &p, &rows)
}

/// What a message of `call` carries beyond the barrier's own payload.
fn data_bytes(call: Collective, bytes: usize) -> usize {
    if call == Collective::Barrier {
        0
    } else {
        bytes + barriers::collective::wire::HEADER_LEN
    }
}

/// Every algorithm (and auto's picks) flat and hierarchical with `per_host`
/// ranks on each node of `cluster`.
fn measure_shared_hosts(
    cli: &Cli,
    cluster: &Cluster,
    per_host: usize,
    (algs, with_auto): (&[Algorithm], bool),
    wait: WaitPolicy,
    p: &LogP,
    bar: &ProgressBar,
) -> Result<Vec<Row>> {
    let (hosts, rails, cores) = (cluster.nodes(), cluster.rails(), mcd::host::online_cpus());
    let ranks = hosts * per_host;
    let bench = cli.bench(ranks, wait);
    let mut rows = Vec::new();
    let mut layouts = vec![None];
    for release in &cli.host_release {
        layouts.push(Some(release.unwrap_or_else(|| HostRelease::auto(wait, ranks, cores))));
    }
    for release in layouts {
        let hierarchical = release.is_some();
        // On the wire: every rank (flat) or each host's leader.
        let wire = if hierarchical { hosts } else { ranks };
        let (auto_alg, _) = model::auto_on_host(wire, rails, p, true, ranks, cores);
        let mut todo: Vec<(Algorithm, bool)> = algs.iter().map(|&a| (a, false)).collect();
        if with_auto {
            todo.push((auto_alg, true));
        }
        for (algorithm, is_auto_row) in todo {
            let layout = if hierarchical { "hierarchical" } else { "flat" };
            bar.set_message(format!("{hosts} hosts × {per_host} ranks, {layout}, {wait}: {algorithm}"));
            let config = BarrierConfig::new(algorithm).rails(rails);
            let barrier = match release {
                None => RanksBarrier::Flat,
                Some(r) if HostRelease::can_multicast(algorithm) => RanksBarrier::Hierarchical { release: r, local_wait: None },
                Some(_) => RanksBarrier::Hierarchical { release: HostRelease::SharedMemory, local_wait: None },
            };
            let mut measured = barrierbench::measure_ranks_per_host(cluster, per_host, config, bench, barrier)?;
            let est = cli.model_here(*p, None).estimate(algorithm, wire, rails, model_topology(cluster.spec().topology), dummy_us(&bench));
            if is_auto_row {
                measured.algorithm = format!("auto={}", measured.algorithm);
            }
            // Predicted: the leaders' (or every rank's) algorithm with the
            // ranks taking turns on the cores; the shared-memory steps are
            // not modelled.
            let topology = cluster.spec().topology.to_string();
            rows.push(Row { ranks_per_host: per_host, ..Row::barrier(topology, wait, measured, &est, algorithm == auto_alg) });
            bar.inc(1);
        }
    }
    Ok(rows)
}

/// The model's topology for the virtual cluster's: its hub is a bridge
/// that floods every frame in the sender's context, without collisions.
fn model_topology(topology: Topology) -> model::Topology {
    match topology {
        Topology::Switch => model::Topology::Switch,
        Topology::Hub => model::Topology::FloodingBridge,
    }
}

/// The work between two barriers in the model's loop, µs.
fn dummy_us(bench: &BarrierBench) -> f64 {
    match bench.method {
        Method::Paper => bench.dummy.as_secs_f64() * 1e6,
        Method::Osu => 0.0,
    }
}

/// The benchmark across real hosts: this process is one node of the job.
fn run_across_hosts(cli: &Cli, algs: &[Algorithm], with_auto: bool) -> Result<()> {
    let p = match &cli.logp {
        Some(path) => logp::load_or_measure(Some(path))?,
        None => LogP::REFERENCE,
    };
    let mut config = mcd::EndpointConfig::bootstrap().context("joining the job (see `mcd-barrier --help`)")?;
    let n = config.nodes.len();
    let rails = config.interfaces.len();
    let mut rows = Vec::new();
    let (auto_alg, _) = model::auto_on_host(n, rails, &p, true, config.local_processes, mcd::host::online_cpus());
    let mut todo: Vec<(Algorithm, bool)> = algs.iter().map(|&a| (a, false)).collect();
    if with_auto {
        todo.push((auto_alg, true));
    }
    let mut round = 0;
    for &wait in &cli.wait {
        config.wait = wait;
        let mut endpoint = mcd::Endpoint::open(config.clone())?;
        let me = endpoint.node_id();
        if me == 0 {
            eprintln!("{n} nodes, {rails} rail(s), wait {wait}: {} measurement(s)", todo.len());
        }
        for &(algorithm, is_auto_row) in &todo {
            let bench = cli.bench(n, wait);
            round += 1;
            let (ep, measured) = barrierbench::measure_across_hosts(endpoint, BarrierConfig::new(algorithm).rails(rails), bench, round)?;
            endpoint = ep;
            if let Some(mut measured) = measured {
                eprintln!("  {algorithm}: mean {:.1} µs", measured.mean_us);
                if is_auto_row {
                    measured.algorithm = format!("auto={algorithm}");
                }
                let est = cli.model_here(p, Some(config.local_processes)).estimate(algorithm, n, rails, model::Topology::Switch, dummy_us(&bench));
                rows.push(Row::barrier("hosts".into(), wait, measured, &est, algorithm == auto_alg));
            }
        }
    }
    if rows.is_empty() {
        return Ok(()); // not node 0: node 0 reports
    }
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;
    report(cli, &p, &rows)
}

fn report(cli: &Cli, p: &LogP, rows: &[Row]) -> Result<()> {
    let mut table = String::new();
    // Every row times the same call.
    let what = rows.first().map_or_else(|| "barrier".to_string(), |r| r.collective.clone());
    let unit = if what == "barrier" { "barrier" } else { "call" };
    let method = match cli.method {
        Method::Paper => format!("paper's method: {unit} then a 30 µs dummy loop; per-node statistics averaged over nodes"),
        Method::Osu => format!("OSU convention: back-to-back {unit}s; min/mean/max of the per-node means"),
    };
    writeln!(table, "mcd {what} microbenchmark ({method}); µs per {unit}; * = auto's pick")?;
    let mut groups: Vec<(String, usize, String, usize, usize)> = Vec::new();
    for r in rows {
        let key = (r.topology.clone(), r.measured.rails, r.wait.clone(), r.measured.nodes, r.ranks_per_host);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (topology, rails, wait, n, per_host) in &groups {
        if *per_host > 1 {
            writeln!(
                table,
                "\n{n} ranks = {} hosts × {per_host} ranks, {topology}, {rails} rail(s), wait {wait} (hier: = hierarchical)",
                n / per_host
            )?;
        } else {
            writeln!(table, "\n{n} nodes, {topology}, {rails} rail(s), wait {wait}")?;
        }
        let cores = mcd::host::online_cpus();
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| (&r.topology, r.measured.rails, &r.wait, r.measured.nodes, r.ranks_per_host) == (topology, *rails, wait, *n, *per_host))
            .collect();
        let shared = mine.iter().any(|r| r.bounds_us.is_some());
        if shared && wait == "busy" {
            writeln!(
                table,
                "  (more processes than the {cores} cores of a machine, busy-polling: a process holds its core until \
                 the scheduler's tick takes it away, milliseconds, which the model does not hold; the prediction \
                 and bounds assume waiters that give the core up, as adaptive, yield and block do.)"
            )?;
        } else if shared {
            writeln!(
                table,
                "  (more processes than the {cores} cores of a machine: the prediction has them take turns on the \
                 cores, each change of process a {:.0} µs wake-up, and is good to ±35% at best; the measurement \
                 should fall within the bounds: below, free changes of process; above, a wake-up at both ends of \
                 every message. Lost frames are not modelled.)",
                cli.wake_us
            )?;
        }
        writeln!(
            table,
            "  {:<20} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}{}",
            "algorithm",
            "min",
            "mean",
            "max",
            "p50",
            "p99",
            "p99.9",
            "predicted",
            if shared { format!(" {:>15}", "bounds") } else { String::new() }
        )?;
        for r in mine {
            let m = &r.measured;
            let name = format!("{}{}", m.algorithm, if r.auto_pick && !m.algorithm.starts_with("auto") { " *" } else { "" });
            let bounds = r.bounds_us.map_or(String::new(), |(lo, hi)| format!(" {:>15}", format!("{lo:.0} – {hi:.0}")));
            writeln!(
                table,
                "  {:<20} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11.1}{bounds}",
                name, m.min_us, m.mean_us, m.max_us, m.p50_us, m.p99_us, m.p999_us, r.predicted_us
            )?;
        }
    }
    print!("{table}");
    let mut csv = String::from("collective,bytes,topology,rails,wait,method,nodes,ranks_per_host,algorithm,iterations,min_us,mean_us,max_us,p50_us,p99_us,p999_us,predicted_us,auto_pick,recoveries,bound_low_us,bound_high_us\n");
    for r in rows {
        let m = &r.measured;
        writeln!(
            csv,
            "{},{},{},{},{},{:?},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{}",
            r.collective.split(' ').next().unwrap_or("barrier"),
            r.bytes,
            r.topology,
            m.rails,
            r.wait,
            m.method,
            m.nodes,
            r.ranks_per_host,
            m.algorithm,
            m.iterations,
            m.min_us,
            m.mean_us,
            m.max_us,
            m.p50_us,
            m.p99_us,
            m.p999_us,
            r.predicted_us,
            r.auto_pick,
            m.recoveries,
            r.bounds_us.map_or(String::new(), |b| format!("{:.3}", b.0)),
            r.bounds_us.map_or(String::new(), |b| format!("{:.3}", b.1))
        )?;
    }
    std::fs::write(cli.out.join("results.csv"), csv)?;
    let json = serde_json::json!({ "logp": p, "method": cli.method, "rows": rows });
    std::fs::write(cli.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    // One figure per wait policy: a panel per topology and rail count side by
    // side, a line per algorithm, measured solid and predicted dashed.
    let mut plots = Vec::new();
    let mut waits: Vec<&String> = groups.iter().map(|g| &g.2).collect();
    waits.sort();
    waits.dedup();
    for wait in waits {
        let mut panels = Vec::new();
        let mut shapes: Vec<(String, usize)> = groups.iter().filter(|g| &g.2 == wait).map(|g| (g.0.clone(), g.1)).collect();
        shapes.sort_by_key(|(t, r)| (*r, t == "hub"));
        shapes.dedup();
        for (topology, rails) in shapes {
            let mine: Vec<&Row> = rows.iter().filter(|r| (&r.topology, r.measured.rails, &r.wait) == (&topology, rails, wait)).collect();
            // Auto's rows are one line whatever it picked at each size.
            let line_of = |r: &Row| if r.measured.algorithm.starts_with("auto") { "auto".to_string() } else { r.measured.algorithm.clone() };
            let mut names: Vec<String> = mine.iter().map(|r| line_of(r)).collect();
            names.sort();
            names.dedup();
            let mut series = Vec::new();
            for name in &names {
                let key = name.clone();
                let pts = |f: &dyn Fn(&Row) -> f64| {
                    mine.iter().filter(|r| &line_of(r) == name).map(|r| (r.measured.nodes as f64, f(r).max(0.1))).collect::<Vec<_>>()
                };
                series.push(Series { label: format!("{name} measured"), points: pts(&|r| r.measured.mean_us), dashed: false, key: key.clone() });
                series.push(Series { label: format!("{name} predicted"), points: pts(&|r| r.predicted_us), dashed: true, key });
            }
            panels.push(Panel { title: format!("{topology}, {rails} rail(s)"), series });
        }
        let stem = cli.out.join(format!("{}-{wait}", what.replace(" B", "B").replace(' ', "-")));
        let title = format!("mcd {what}, wait {wait}: measured (solid), LogP-predicted (dashed)");
        plots.extend(plot::log2_x_vs_time(&stem, &title, plot::Axes { x: "nodes", y: &format!("µs per {unit}") }, &panels)?);
    }
    eprintln!("wrote {}/results.csv, results.json and {} plot(s)", cli.out.display(), plots.len());
    Ok(())
}
