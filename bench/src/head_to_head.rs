//! The head-to-head: mcd's barriers against a UDP dissemination barrier and
//! Open MPI's MPI_Barrier over TCP, on the same virtual cluster, in one run.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use barriers::BarrierConfig;
use mcd::WaitPolicy;
use mcd_bench::barrierbench::{self, BarrierBench, BarrierMeasurement, Method};
use mcd_bench::mpibench::{self, Comm};
use mcd_bench::pingpong::{self, PingPongConfig, Transport};
use mcd_bench::plot::{self, Panel, Series};
use mcd_bench::udpbarrier;
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::{self, MpiRun};
use mcd_vcluster::{Cluster, ClusterSpec};
use serde::Serialize;

use crate::{barrier_configs, iterations_for, machine, today};

/// What a row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Contender {
    /// One of mcd's algorithms, fixed.
    Mcd,
    /// mcd with the algorithm `Auto` picks from the LogP parameters.
    McdAuto,
    /// The UDP dissemination barrier.
    Udp,
    /// Open MPI, `mpi_yield_when_idle 1`.
    OmpiYield,
    /// Open MPI's default (polling without yielding).
    OmpiSpin,
    /// The same MPI program with mcd's MPI_Barrier interposer preloaded.
    Interposer,
    /// MPICH over TCP (Hydra), its default progress.
    Mpich,
    /// The MPICH-built program with the MPICH-built interposer preloaded.
    InterposerMpich,
}

#[derive(Clone, Debug, Serialize)]
struct Row {
    contender: Contender,
    /// The MPI communicator (MPI rows; `world` for the others).
    comm: Comm,
    #[serde(flatten)]
    measured: BarrierMeasurement,
}

/// Open MPI's default mode takes milliseconds per barrier once ranks outnumber
/// cores; this many timed barriers keep it to seconds.
fn ompi_spin_iterations(n: usize, iterations: usize) -> usize {
    if n > mcd::host::online_cpus() {
        (iterations / 25).max(20)
    } else {
        iterations
    }
}

pub fn run(out: &Path, report: &Path, sizes: &[usize], scale: f64, logp: Option<&Path>) -> Result<()> {
    mpi::check_launcher(Mpi::OpenMpi)?;
    mpi::check_launcher(Mpi::Mpich)?;
    let interposer = cbuild::build_interposer(Mpi::OpenMpi, true)?;
    let interposer_mpich = cbuild::build_interposer(Mpi::Mpich, true)?;
    let params = mcd_bench::logp::load_or_measure(logp)?;
    eprintln!(
        "LogP parameters for Auto ({}): o_s {:.2} µs, o_r {:.2} µs, g {:.2} µs, L {:.2} µs",
        logp.map(|p| p.display().to_string()).unwrap_or_else(|| "measured now".into()),
        params.o_s,
        params.o_r,
        params.g,
        params.l
    );

    // 4. One-way latency first: it needs the cores to itself.
    eprintln!("latency: mcd against UDP, 8 bytes, busy-poll, 3 rounds × 20,000 round trips");
    let latency = {
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnh2l"), 2))?;
        let config = PingPongConfig { sizes: vec![8], iterations: 20_000, warmup: 2_000, rounds: 3, wait: WaitPolicy::BusyPoll, udp: true };
        pingpong::run_on_cluster(&cluster, &config, |what| eprintln!("  {what}"))?
    };

    let mut rows: Vec<Row> = Vec::new();
    for &n in sizes {
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnh2h"), n).rails(2))?;
        let iterations = iterations_for(n, scale);
        let bench = BarrierBench { method: Method::Paper, warmup: 100, iterations, dummy: Duration::from_micros(30), wait: WaitPolicy::Adaptive };
        let mut record_on = |contender: Contender, comm: Comm, m: BarrierMeasurement| {
            let on = if comm == Comm::World { String::new() } else { format!(", {}", comm_name(comm)) };
            eprintln!("  n={n:<2} {:<28} mean {:>8.1} µs  p50 {:>8.1}  p99 {:>8.1}", format!("{}{on}", m.algorithm), m.mean_us, m.p50_us, m.p99_us);
            rows.push(Row { contender, comm, measured: m });
        };
        let mut record = |contender: Contender, m: BarrierMeasurement| record_on(contender, Comm::World, m);
        eprintln!("{n} nodes, {iterations} timed barriers per contender (paper's method)");
        // 1. mcd, every algorithm, then Auto's pick measured on its own.
        for config in barrier_configs() {
            record(Contender::Mcd, barrierbench::measure(&cluster, config, bench)?);
        }
        // All nodes share this machine's cores: Auto is told so.
        let auto = BarrierConfig::auto_on_host(n, 1, &params, true, n, mcd::host::online_cpus());
        let mut m = barrierbench::measure(&cluster, auto, bench)?;
        m.algorithm = format!("auto ({})", auto.algorithm);
        record(Contender::McdAuto, m);
        // 2. UDP dissemination.
        record(Contender::Udp, udpbarrier::measure(&cluster, bench)?);
        // 3. Open MPI over TCP, ranks in the nodes' namespaces.
        let yield_run = MpiRun { yield_when_idle: true, ..MpiRun::default() };
        record(Contender::OmpiYield, mpibench::measure_barrier(&cluster, &yield_run, bench, "Open MPI TCP (yield)")?);
        let spin_bench =
            BarrierBench { iterations: ompi_spin_iterations(n, iterations), warmup: if n > mcd::host::online_cpus() { 10 } else { 100 }, ..bench };
        record(Contender::OmpiSpin, mpibench::measure_barrier(&cluster, &MpiRun::default(), spin_bench, "Open MPI TCP (default)")?);
        // 5. The same MPI program, MPI_Barrier served by mcd through the interposer.
        let preloaded = MpiRun { env: vec![("LD_PRELOAD".into(), interposer.display().to_string())], ..MpiRun::default() };
        record(Contender::Interposer, mpibench::measure_barrier(&cluster, &preloaded, bench, "mcd interposer (MPI program)")?);
        // And both MPI rows again by OSU's method (back-to-back barriers).
        let osu = BarrierBench { method: Method::Osu, ..bench };
        record(Contender::OmpiYield, mpibench::measure_barrier(&cluster, &yield_run, osu, "Open MPI TCP (yield)")?);
        record(Contender::Interposer, mpibench::measure_barrier(&cluster, &preloaded, osu, "mcd interposer (MPI program)")?);
        // 6. The same program on a duplicate of the world, and on its two
        // halves (MPI_Comm_split) at once: every communicator gets mcd's barrier.
        for comm in [Comm::Dup, Comm::Split] {
            let label = "Open MPI TCP (yield)";
            record_on(Contender::OmpiYield, comm, mpibench::measure_barrier_on(&cluster, &yield_run, bench, comm, label)?);
            let label = "mcd interposer (MPI program)";
            record_on(Contender::Interposer, comm, mpibench::measure_barrier_on(&cluster, &preloaded, bench, comm, label)?);
        }
        // 7. MPICH: its own MPI_Barrier over TCP, and the interposer built for it.
        let tcp: Vec<(String, String)> = mpi::MPICH_OVER_TCP.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mpich = MpiRun { mpi: Mpi::Mpich, env: tcp.clone(), ..MpiRun::default() };
        let mpich_spin =
            BarrierBench { iterations: ompi_spin_iterations(n, iterations), warmup: if n > mcd::host::online_cpus() { 10 } else { 100 }, ..bench };
        record_on(Contender::Mpich, Comm::World, mpibench::measure_barrier(&cluster, &mpich, mpich_spin, "MPICH TCP")?);
        let mut preload = tcp;
        preload.push(("LD_PRELOAD".into(), interposer_mpich.display().to_string()));
        let mpich_preloaded = MpiRun { env: preload, ..mpich.clone() };
        let label = "mcd interposer (MPICH program)";
        record_on(Contender::InterposerMpich, Comm::World, mpibench::measure_barrier(&cluster, &mpich_preloaded, bench, label)?);
    }

    // The list of the other results is the report's own (edited by hand when
    // one of them is run again): kept as it is.
    let previous = std::fs::read_to_string(report).unwrap_or_default();
    let md = render(sizes, &rows, &latency, &params, &other_results(&previous))?;
    std::fs::write(report, &md).with_context(|| format!("writing {}", report.display()))?;
    let json = serde_json::json!({ "date": today(), "machine": machine(), "logp": params, "latency": latency, "barriers": rows });
    std::fs::write(out.join("head-to-head.json"), serde_json::to_string_pretty(&json)?)?;
    plot_results(&out.join("head-to-head"), sizes, &rows)?;
    print!("{md}");
    eprintln!("wrote {}, {}/head-to-head.{{json,svg,png}}", report.display(), out.display());
    Ok(())
}

fn best_mcd(rows: &[Row], n: usize) -> Option<&Row> {
    rows.iter().filter(|r| r.measured.nodes == n && r.contender == Contender::Mcd).min_by(|a, b| a.measured.mean_us.total_cmp(&b.measured.mean_us))
}

fn find(rows: &[Row], n: usize, c: Contender) -> Option<&Row> {
    find_by(rows, n, c, Method::Paper)
}

fn find_by(rows: &[Row], n: usize, c: Contender, method: Method) -> Option<&Row> {
    find_on(rows, n, c, method, Comm::World)
}

fn find_on(rows: &[Row], n: usize, c: Contender, method: Method, comm: Comm) -> Option<&Row> {
    rows.iter().find(|r| r.measured.nodes == n && r.contender == c && r.measured.method == method && r.comm == comm)
}

fn comm_name(comm: Comm) -> &'static str {
    match comm {
        Comm::World => "MPI_COMM_WORLD",
        Comm::Dup => "a duplicate of MPI_COMM_WORLD",
        Comm::Split => "split halves, both at once",
    }
}

/// The report (RESULTS.md): the sections below, in order.
fn render(sizes: &[usize], rows: &[Row], latency: &[pingpong::SizeResult], p: &barriers::model::LogP, other_results: &str) -> Result<String> {
    let cores = mcd::host::online_cpus();
    let mut md = String::new();
    writeln!(md, "# Head-to-head: mcd against UDP and Open MPI\n")?;
    writeln!(md, "Measured {} on {}, by `./run bench` (`mcd-bench head-to-head`), in one run.\n", today(), machine())?;
    summary(&mut md, sizes, rows, cores)?;
    mpi_program(&mut md, sizes, rows)?;
    mpich(&mut md, sizes, rows)?;
    communicators(&mut md, sizes, rows)?;
    latency_section(&mut md, latency)?;
    every_contender(&mut md, sizes, rows)?;
    write!(md, "{other_results}")?;
    how_measured(&mut md, p, cores)?;
    Ok(md)
}

/// The summary table (mcd's best against the others) and the goals.
fn summary(md: &mut String, sizes: &[usize], rows: &[Row], cores: usize) -> Result<()> {
    writeln!(md, "## Summary (mean µs per barrier; ratios are the other's time / mcd's best)\n")?;
    writeln!(md, "| nodes | mcd best | Auto | Auto's algorithm, its own row | UDP dissemination | Open MPI yield | Open MPI default | Open MPI best / mcd | UDP / mcd | Auto / best |")?;
    writeln!(md, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")?;
    let mut goals = Vec::new();
    for &n in sizes {
        let (Some(best), Some(auto), Some(udp), Some(oy), Some(os)) = (
            best_mcd(rows, n),
            find(rows, n, Contender::McdAuto),
            find(rows, n, Contender::Udp),
            find(rows, n, Contender::OmpiYield),
            find(rows, n, Contender::OmpiSpin),
        ) else {
            continue;
        };
        let b = best.measured.mean_us;
        // The fixed row of the algorithm Auto picked: the same thing measured twice.
        let auto_name = auto.measured.algorithm.trim_start_matches("auto (").trim_end_matches(')');
        let same_as_auto = rows
            .iter()
            .find(|r| r.contender == Contender::Mcd && r.measured.nodes == n && r.measured.rails == 1 && r.measured.algorithm == auto_name)
            .map(|r| r.measured.mean_us);
        // Open MPI's best mode at this size (yield wins once ranks outnumber cores).
        let r_mpi = oy.measured.mean_us.min(os.measured.mean_us) / b;
        let r_udp = udp.measured.mean_us / b;
        let r_auto = auto.measured.mean_us / b;
        writeln!(
            md,
            "| {n}{} | {:.1} ({}) | {:.1} {} | {} | {:.1} | {:.1} | {:.1} | **{r_mpi:.1}×** | **{r_udp:.1}×** | {r_auto:.2} |",
            if n > cores { "\\*" } else { "" },
            b,
            best.measured.algorithm,
            auto.measured.mean_us,
            auto.measured.algorithm.trim_start_matches("auto "),
            same_as_auto.map(|m| format!("{m:.1}")).unwrap_or_else(|| "–".into()),
            udp.measured.mean_us,
            oy.measured.mean_us,
            os.measured.mean_us,
        )?;
        let want = if n <= 2 { 3.0 } else { 4.0 };
        goals.push(format!(
            "- {n} nodes: mcd {r_mpi:.2}× faster than Open MPI (goal {want}×: {}); {r_udp:.2}× faster than UDP dissemination ({}); Auto at {:+.0}% of the best (goal within 10%: {}).",
            met(r_mpi >= want),
            met(r_udp > 1.0),
            (r_auto - 1.0) * 100.0,
            met(r_auto <= 1.10)
        ));
    }
    writeln!(md, "\n\\* more nodes than this machine's {cores} cores: every barrier also waits for cores (see below).\n")?;
    writeln!(md, "\"Auto's algorithm, its own row\" is the same algorithm measured earlier in the same run: where it differs much from Auto's column, the difference is run-to-run noise, which beyond {cores} nodes is of the order of the differences between algorithms.\n")?;
    writeln!(md, "### Goals (reported, not asserted)\n")?;
    for g in &goals {
        writeln!(md, "{g}")?;
    }
    writeln!(md)?;
    Ok(())
}

/// The same MPI program under Open MPI, with and without the interposer.
fn mpi_program(md: &mut String, sizes: &[usize], rows: &[Row]) -> Result<()> {
    writeln!(md, "## The same MPI program: Open MPI's MPI_Barrier against mcd's through the interposer\n")?;
    writeln!(md, "`mpi/barrier_bench.c`, unmodified, under `mpirun` with one rank per namespace; once as is (Open MPI over TCP, `mpi_yield_when_idle 1`), once with `LD_PRELOAD=libmcd_mpi_barrier_openmpi.so`. Ranks are processes here, as in MPI jobs (the mcd rows above are threads of one process). Mean µs per barrier.\n")?;
    writeln!(md, "| nodes | Open MPI, paper | interposer, paper | ratio | Open MPI, OSU | interposer, OSU | ratio |")?;
    writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|")?;
    for &n in sizes {
        let get = |c, m| find_by(rows, n, c, m).map(|r| r.measured.mean_us).unwrap_or(f64::NAN);
        let (op, ip) = (get(Contender::OmpiYield, Method::Paper), get(Contender::Interposer, Method::Paper));
        let (oo, io) = (get(Contender::OmpiYield, Method::Osu), get(Contender::Interposer, Method::Osu));
        writeln!(md, "| {n} | {op:.1} | {ip:.1} | **{:.1}×** | {oo:.1} | {io:.1} | **{:.1}×** |", op / ip, oo / io)?;
    }
    writeln!(
        md,
        "\nOSU's method: {} warm-up barriers, then the timed ones back to back; mean = loop time / iterations, averaged over ranks.\n",
        100
    )?;
    Ok(())
}

/// The same MPI program under MPICH, with and without the interposer.
fn mpich(md: &mut String, sizes: &[usize], rows: &[Row]) -> Result<()> {
    writeln!(md, "## MPICH: its MPI_Barrier against mcd's through the interposer built for it\n")?;
    writeln!(md, "The same `mpi/barrier_bench.c` built with `mpicc.mpich` and launched by Hydra (`mpiexec.hydra`, rsh launcher into the namespaces), over UCX's TCP transport on the cluster's links (`UCX_TLS=tcp,self`: UCX would otherwise use shared memory between the namespaces); once as is, once with `LD_PRELOAD=libmcd_mpi_barrier_mpich.so`. MPICH polls without yielding, so beyond 2 nodes it runs fewer timed barriers (as Open MPI's default mode does). Paper's method, mean µs per barrier.\n")?;
    writeln!(md, "| nodes | MPICH | interposer (MPICH) | ratio | Open MPI best | interposer (Open MPI) |")?;
    writeln!(md, "|---:|---:|---:|---:|---:|---:|")?;
    for &n in sizes {
        let get = |c| find_by(rows, n, c, Method::Paper).map(|r| r.measured.mean_us).unwrap_or(f64::NAN);
        let (m, i) = (get(Contender::Mpich), get(Contender::InterposerMpich));
        let ompi = get(Contender::OmpiYield).min(get(Contender::OmpiSpin));
        writeln!(md, "| {n} | {m:.1} | {i:.1} | **{:.1}×** | {ompi:.1} | {:.1} |", m / i, get(Contender::Interposer))?;
    }
    writeln!(md)?;
    Ok(())
}

/// The same MPI program on other communicators.
fn communicators(md: &mut String, sizes: &[usize], rows: &[Row]) -> Result<()> {
    writeln!(md, "## The same MPI program on other communicators\n")?;
    writeln!(md, "`barrier_bench --comm dup` runs its barriers on `MPI_Comm_dup(MPI_COMM_WORLD)`, `--comm split` on `MPI_Comm_split(MPI_COMM_WORLD, rank % 2, ...)`: two halves running their barriers at the same time, statistics over all ranks. The interposer gives each communicator its own mcd barrier (a group on the shared endpoint). Paper's method, mean µs per barrier.\n")?;
    writeln!(md, "| nodes | communicator | Open MPI | interposer | ratio |")?;
    writeln!(md, "|---:|---|---:|---:|---:|")?;
    for &n in sizes {
        for comm in [Comm::World, Comm::Dup, Comm::Split] {
            let get = |c| find_on(rows, n, c, Method::Paper, comm).map(|r| r.measured.mean_us).unwrap_or(f64::NAN);
            let (o, i) = (get(Contender::OmpiYield), get(Contender::Interposer));
            writeln!(md, "| {n} | {} | {o:.1} | {i:.1} | **{:.1}×** |", comm_name(comm), o / i)?;
        }
    }
    writeln!(md)?;
    Ok(())
}

/// The one-way latency, mcd against UDP.
fn latency_section(md: &mut String, latency: &[pingpong::SizeResult]) -> Result<()> {
    let p50 = |t| latency.iter().find(|r| r.transport == t).map(|r| (r.p50_us, r.p99_us)).unwrap_or((f64::NAN, f64::NAN));
    let (m50, m99) = p50(Transport::Mcd);
    let (u50, u99) = p50(Transport::Udp);
    writeln!(md, "## One-way latency, 8 bytes, busy-poll\n")?;
    writeln!(md, "| transport | p50 µs | p99 µs |\n|---|---:|---:|")?;
    writeln!(md, "| mcd | {m50:.2} | {m99:.2} |\n| UDP | {u50:.2} | {u99:.2} |")?;
    writeln!(md, "\nmcd / UDP at the median: **{:.2}×**. Two nodes, client and echo threads pinned to a core each; one-way = RTT/2; 3 rounds of 20,000 timed round trips, mcd and UDP alternating within each round (`bench/results/latency.md` has every size).\n", m50 / u50)?;
    Ok(())
}

/// Every contender's row, per node count.
fn every_contender(md: &mut String, sizes: &[usize], rows: &[Row]) -> Result<()> {
    writeln!(md, "## Every contender\n")?;
    for &n in sizes {
        writeln!(md, "### {n} nodes\n")?;
        writeln!(md, "| contender | iterations | mean µs | p50 µs | p99 µs | p99.9 µs | min µs | max µs | / mcd best |")?;
        writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        let b = best_mcd(rows, n).map(|r| r.measured.mean_us).unwrap_or(f64::NAN);
        for r in rows.iter().filter(|r| r.measured.nodes == n) {
            let m = &r.measured;
            let name = match r.contender {
                Contender::Mcd => format!("mcd {}{}", m.algorithm, if m.rails > 1 { format!(", {} rails", m.rails) } else { String::new() }),
                Contender::McdAuto => format!("mcd {}", m.algorithm),
                _ if m.method == Method::Osu => format!("{}, OSU method", m.algorithm),
                _ if r.comm != Comm::World => format!("{}, {}", m.algorithm, comm_name(r.comm)),
                _ => m.algorithm.clone(),
            };
            writeln!(
                md,
                "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
                m.iterations,
                m.mean_us,
                m.p50_us,
                m.p99_us,
                m.p999_us,
                m.min_us,
                m.max_us,
                m.mean_us / b
            )?;
        }
        writeln!(md)?;
    }
    writeln!(md, "Plot: [results/head-to-head.svg](results/head-to-head.svg) ([PNG](results/head-to-head.png)); all numbers in [results/head-to-head.json](results/head-to-head.json).\n")?;
    Ok(())
}

/// How it was measured.
fn how_measured(md: &mut String, p: &barriers::model::LogP, cores: usize) -> Result<()> {
    writeln!(md, "## How it was measured\n")?;
    writeln!(
        md,
        "- **The cluster.** For each node count, one virtual cluster (`mcd_vcluster`): a network namespace per node, veth links into a Linux bridge acting as a learning switch, two rails, IPv6 off, no injected loss. Every contender at that node count runs on that same cluster, one after the other.\n\
         - **The method** (the paper's, section 4), identical for all contenders: 100 untimed barriers, then N timed iterations of {{ timestamp; barrier; timestamp; 30 µs dummy loop }}; each node keeps min, mean, max, median, 99th and 99.9th percentiles of its own barrier times (hdrhistogram; sorted times in the C program), and the table shows those averaged over the nodes. N is 2000 at 2 nodes, 1000 at 4, 500 at 8, 300 at 16.\n\
         - **mcd**: one thread per node in one process, each in its node's namespace with its own endpoint; `Adaptive` waiting (busy-poll while nodes ≤ cores, else a short spin, then `sched_yield`, then sleep); threads pinned to a core each while nodes ≤ cores. Every algorithm of `barrier_configs` (two of them on two rails), then the algorithm `BarrierConfig::auto_on_host` picks for one rail from the LogP parameters ({}) and the host's cores (all n nodes share them: beyond 2 nodes it picks the fewest message deliveries, since each costs a context switch), measured again as its own row.\n\
         - **UDP dissemination** (`mcd_bench::udpbarrier`): what a programmer writes without mcd — ⌈log₂ n⌉ rounds, one datagram to `me + 2^r`, wait for the one from `me − 2^r`, over `std::net::UdpSocket` on rail 0's IP addresses; threads, pinning and waiting as mcd's (spin while nodes ≤ cores, else `sched_yield` between polls).\n\
         - **Open MPI** 4.1 from Debian, `MPI_Barrier` in `mpi/barrier_bench.c` (the same loop and statistics, in C), one rank per namespace started by `mpirun` through the cluster's rsh agent (`mcd_tools::mpi`), `--bind-to none --mca btl tcp,self`, MPI's TCP and out-of-band traffic on rail 0's addresses, so it crosses the same veth links and bridge. Twice: `mpi_yield_when_idle 1` (its best mode when ranks outnumber cores) and its default (polling without yielding; with more ranks than cores only {} timed barriers after 10 warm-ups, since each takes milliseconds). The ratios use the better of the two modes at each node count.\n\
         - **Oversubscription.** This machine has {cores} cores. From 4 nodes on, nodes take turns on the cores: every barrier also waits for the other nodes' 30 µs dummy loops and for scheduler hand-offs (about n/2 × 30 µs). That cost is the same for every contender, and it hides the algorithms' differences; the 2-node rows are the clean comparison.",
        fmt_params(p),
        ompi_spin_iterations(16, iterations_for(16, 1.0)),
    )?;
    Ok(())
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

fn fmt_params(p: &barriers::model::LogP) -> String {
    format!("o_s {:.2}, o_r {:.2}, g {:.2}, L {:.2} µs", p.o_s, p.o_r, p.g, p.l)
}

fn plot_results(stem: &Path, sizes: &[usize], rows: &[Row]) -> Result<()> {
    let line = |label: &str, key: &str, pick: &dyn Fn(usize) -> Option<f64>| Series {
        label: label.to_string(),
        points: sizes.iter().filter_map(|&n| pick(n).map(|t| (n as f64, t.max(0.1)))).collect(),
        dashed: false,
        key: key.to_string(),
    };
    let mean = |c: Contender| move |n: usize| find(rows, n, c).map(|r| r.measured.mean_us);
    let contenders = Panel {
        title: "mcd against the alternatives".into(),
        series: vec![
            line("mcd best", "mcd-best", &|n| best_mcd(rows, n).map(|r| r.measured.mean_us)),
            line("mcd Auto", "auto", &mean(Contender::McdAuto)),
            line("UDP dissemination", "udp", &mean(Contender::Udp)),
            line("Open MPI TCP (yield)", "openmpi-yield", &mean(Contender::OmpiYield)),
            line("Open MPI TCP (default)", "openmpi-default", &mean(Contender::OmpiSpin)),
            line("mcd interposer (MPI program)", "interposer", &mean(Contender::Interposer)),
            line("MPICH TCP", "mpich", &mean(Contender::Mpich)),
            line("mcd interposer (MPICH program)", "interposer-mpich", &mean(Contender::InterposerMpich)),
        ],
    };
    let mut names: Vec<(String, usize)> = Vec::new();
    for r in rows.iter().filter(|r| r.contender == Contender::Mcd) {
        let key = (r.measured.algorithm.clone(), r.measured.rails);
        if !names.contains(&key) {
            names.push(key);
        }
    }
    let algorithms = Panel {
        title: "mcd, every algorithm".into(),
        series: names
            .iter()
            .map(|(name, rails)| {
                let label = if *rails > 1 { format!("{name}, {rails} rails") } else { name.clone() };
                line(&label, &label, &|n| {
                    rows.iter()
                        .find(|r| {
                            r.contender == Contender::Mcd && r.measured.nodes == n && &r.measured.algorithm == name && r.measured.rails == *rails
                        })
                        .map(|r| r.measured.mean_us)
                })
            })
            .collect(),
    };
    plot::nodes_vs_time(stem, "Barrier time on the virtual cluster (paper's method, mean per node)", &[contenders, algorithms])?;
    Ok(())
}

/// The "Other recorded results" section of a report (its heading up to the
/// next `## ` heading), or an empty one if the report has none.
fn other_results(report: &str) -> String {
    const HEADING: &str = "## Other recorded results\n";
    let Some(start) = report.find(HEADING) else {
        return format!("{HEADING}\nNone recorded yet.\n");
    };
    let rest = &report[start + HEADING.len()..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i + 1);
    format!("{HEADING}{}", &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_results_are_kept_from_the_report_up_to_the_next_heading() {
        let report = "# Results\n\n## Summary\nrows\n\n## Other recorded results\n\n- [a](a.md): one\n  - detail\n\n## How it was measured\n\nthus\n";
        assert_eq!(other_results(report), "## Other recorded results\n\n- [a](a.md): one\n  - detail\n\n");
        let recorded = include_str!("../RESULTS.md");
        let kept = other_results(recorded);
        assert!(kept.contains("[results/model_protocol.md]") && !kept.contains("## How it was measured"), "{kept}");
        assert_eq!(other_results("# Results\n"), "## Other recorded results\n\nNone recorded yet.\n");
    }
}
