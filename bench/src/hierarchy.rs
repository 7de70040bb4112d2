//! Many ranks per host: the hierarchical barrier against the flat one and
//! against Open MPI with shared memory between a host's ranks (`--mca btl
//! self,vader,tcp`), at hosts × ranks per host on the virtual cluster
//! (several processes per namespace); both releases of a host (its leader
//! through shared memory, every rank on the leaders' multicast); how the
//! ranks wait, at 4×4; and the model's speedups on hosts with a core per
//! rank. Writes results/hierarchy.{md,json}.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use barriers::model::{self, ShmCosts};
use barriers::{BarrierConfig, HostRelease};
use mcd::WaitPolicy;
use mcd_bench::barrierbench::{self, BarrierBench, BarrierMeasurement, Method, RanksBarrier};
use mcd_bench::mpibench;
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::{self, MpiRun};
use mcd_vcluster::{Cluster, ClusterSpec};
use serde::Serialize;

/// Who is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Contender {
    /// The unmodified MPI program's own MPI_Barrier (Open MPI, vader + TCP, yielding).
    OpenMpi,
    /// The same program with the interposer, every rank on the wire.
    InterposerFlat,
    /// The same program with the interposer, hierarchical, hosts released
    /// through shared memory.
    InterposerShm,
    /// The same, every rank taking the leaders' release multicast.
    InterposerMulticast,
    /// mcd-barrier's loop, a process per rank, flat.
    ProcessesFlat,
    /// mcd-barrier's loop, a process per rank, hierarchical, released through shared memory.
    ProcessesShm,
    /// The same, every rank taking the leaders' release multicast.
    ProcessesMulticast,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::OpenMpi => "Open MPI (self,vader,tcp; yield)",
            Contender::InterposerFlat => "mcd flat (interposer)",
            Contender::InterposerShm => "mcd hierarchical, shm release (interposer)",
            Contender::InterposerMulticast => "mcd hierarchical, multicast release (interposer)",
            Contender::ProcessesFlat => "mcd flat (mcd-barrier processes)",
            Contender::ProcessesShm => "mcd hierarchical, shm release (mcd-barrier processes)",
            Contender::ProcessesMulticast => "mcd hierarchical, multicast release (mcd-barrier processes)",
        }
    }
}

#[derive(Serialize)]
struct Row {
    method: Method,
    hosts: usize,
    ranks_per_host: usize,
    contender: Contender,
    measured: BarrierMeasurement,
}

/// One wait policy (and mix) of the study at 4×4.
#[derive(Serialize)]
struct WaitRow {
    method: Method,
    /// How the leaders wait (`MCD_WAIT`).
    leaders: String,
    /// How the other ranks wait (`MCD_HOST_WAIT`).
    local: String,
    release: String,
    measured: BarrierMeasurement,
}

/// The wait policies studied: (leaders, local ranks).
fn wait_mixes() -> Vec<(WaitPolicy, WaitPolicy)> {
    let yield_ = WaitPolicy::SpinThenYield { spin: Duration::from_micros(5) };
    vec![
        (WaitPolicy::Adaptive, WaitPolicy::Adaptive),
        (WaitPolicy::BusyPoll, WaitPolicy::BusyPoll),
        (yield_, yield_),
        (WaitPolicy::Block, WaitPolicy::Block),
        (WaitPolicy::BusyPoll, WaitPolicy::Block),
        (WaitPolicy::Adaptive, yield_),
        (yield_, WaitPolicy::Block),
    ]
}

/// Measures every contender at each (hosts, ranks per host) of `shapes`,
/// then the wait policies at 4×4 (if among the shapes).
pub fn run(out: &Path, shapes: &[(usize, usize)], iterations: usize) -> Result<()> {
    mpi::check_launcher(Mpi::OpenMpi)?;
    let interposer = cbuild::build_interposer(Mpi::OpenMpi, true)?;
    let params = mcd_bench::logp::load_or_measure(Some(&out.join("logp.json")))?;
    let cores = mcd::host::online_cpus();
    let mut rows = Vec::new();
    let mut waits = Vec::new();
    for &(hosts, per_host) in shapes {
        let ranks = hosts * per_host;
        eprintln!("{hosts} hosts × {per_host} ranks = {ranks} ranks, {iterations} timed barriers each");
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("h14bh"), hosts))?;
        let flat = BarrierConfig::auto_on_host(ranks, 1, &params, true, ranks, cores);
        let leaders = BarrierConfig::auto_on_host(hosts, 1, &params, true, ranks, cores);
        for method in [Method::Osu, Method::Paper] {
            let bench = BarrierBench { method, warmup: 50, iterations, dummy: Duration::from_micros(30), wait: WaitPolicy::Adaptive };
            let mut record = |contender: Contender, m: BarrierMeasurement| {
                eprintln!(
                    "  {method:?} {:<58} {:<24} mean {:>8.1} µs  p50 {:>8.1}  p99 {:>8.1}",
                    contender.label(),
                    m.algorithm,
                    m.mean_us,
                    m.p50_us,
                    m.p99_us
                );
                rows.push(Row { method, hosts, ranks_per_host: per_host, contender, measured: m });
            };
            // mcd-barrier's loop, a process per rank: Auto's pick for what is on the wire.
            record(Contender::ProcessesFlat, barrierbench::measure_ranks_per_host(&cluster, per_host, flat, bench, RanksBarrier::Flat)?);
            for (contender, release) in
                [(Contender::ProcessesShm, HostRelease::SharedMemory), (Contender::ProcessesMulticast, HostRelease::Multicast)]
            {
                let barrier = RanksBarrier::Hierarchical { release, local_wait: None };
                record(contender, barrierbench::measure_ranks_per_host(&cluster, per_host, leaders, bench, barrier)?);
            }
            // The same MPI program, processes under mpirun, per_host per namespace.
            let vader = vec![("btl".to_string(), "self,vader,tcp".to_string())];
            let ompi = MpiRun { ranks_per_node: per_host, yield_when_idle: true, mca: vader.clone(), ..MpiRun::default() };
            record(Contender::OpenMpi, mpibench::measure_barrier(&cluster, &ompi, bench, "MPI_Barrier")?);
            for (contender, hierarchy, release) in [
                (Contender::InterposerFlat, "off", "shm"),
                (Contender::InterposerShm, "on", "shm"),
                (Contender::InterposerMulticast, "on", "multicast"),
            ] {
                let env = vec![
                    ("LD_PRELOAD".to_string(), interposer.display().to_string()),
                    ("MCD_HIERARCHY".to_string(), hierarchy.to_string()),
                    (HostRelease::ENV.to_string(), release.to_string()),
                ];
                let run = MpiRun { env, ..ompi.clone() };
                let name = if hierarchy == "off" { "MCD_HIERARCHY=off".to_string() } else { format!("MCD_HIERARCHY=on, release {release}") };
                record(contender, mpibench::measure_barrier(&cluster, &run, bench, &name)?);
            }
        }
        if (hosts, per_host) == (4, 4) {
            // Fewer barriers: spinning 16 processes on 2 cores is slow.
            let study = (iterations / 3).max(50);
            eprintln!("wait policies at 4×4, {study} timed barriers each");
            for method in [Method::Osu, Method::Paper] {
                for (leaders_wait, local_wait) in wait_mixes() {
                    for release in [HostRelease::SharedMemory, HostRelease::Multicast] {
                        let bench = BarrierBench { method, warmup: 20, iterations: study, dummy: Duration::from_micros(30), wait: leaders_wait };
                        let barrier = RanksBarrier::Hierarchical { release, local_wait: Some(local_wait) };
                        let m = barrierbench::measure_ranks_per_host(&cluster, per_host, leaders, bench, barrier)?;
                        eprintln!(
                            "  {method:?} leaders {leaders_wait:<9} local {local_wait:<9} {release:<9} mean {:>8.1} µs  p50 {:>8.1}  p99 {:>8.1}",
                            m.mean_us, m.p50_us, m.p99_us
                        );
                        waits.push(WaitRow {
                            method,
                            leaders: leaders_wait.to_string(),
                            local: local_wait.to_string(),
                            release: release.to_string(),
                            measured: m,
                        });
                    }
                }
            }
        }
    }
    let md = render(&rows, &waits, iterations, &params)?;
    std::fs::write(out.join("hierarchy.md"), &md)?;
    let json = serde_json::json!({ "rows": rows, "wait_policies": waits });
    std::fs::write(out.join("hierarchy.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    Ok(())
}

fn find(rows: &[Row], method: Method, (hosts, per_host): (usize, usize), c: Contender) -> Option<&BarrierMeasurement> {
    rows.iter().find(|r| r.method == method && r.hosts == hosts && r.ranks_per_host == per_host && r.contender == c).map(|r| &r.measured)
}

fn method_name(method: Method) -> &'static str {
    match method {
        Method::Osu => "OSU (back-to-back barriers)",
        Method::Paper => "paper (barrier, then a 30 µs dummy loop)",
    }
}

/// `a / b` with the 3× goal judged at 16 ranks.
fn ratio(a: Option<f64>, b: Option<f64>, ranks: usize) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            let verdict = if ranks != 16 {
                "no goal"
            } else if r >= 3.0 {
                "met"
            } else {
                "**not met**"
            };
            format!("{r:.2}× ({verdict})")
        }
        _ => "–".into(),
    }
}

fn render(rows: &[Row], waits: &[WaitRow], iterations: usize, params: &model::LogP) -> Result<String> {
    let mut md = String::new();
    writeln!(md, "# Many ranks per host: hierarchical against flat mcd and Open MPI\n")?;
    writeln!(
        md,
        "`mcd-bench hierarchy`, one run on the reference VM (2 cores): each node of the virtual cluster (a network \
         namespace, one NIC) is a host running several ranks, each a process. Every rank shares this machine's 2 \
         cores, so 16 and 32 ranks are 8 and 16 processes per core. Two methods: OSU's (back-to-back barriers; mean = \
         the ranks' loop time per barrier, averaged) and the paper's (barrier, then a 30 µs dummy loop; with 8 ranks \
         per core the dummy loops alone take 16 × 30 µs / 2 cores = 240 µs of every barrier at 16 ranks, whatever the \
         barrier). {iterations} timed barriers after 50 untimed, adaptive waiting; µs per barrier; p50/p99/p99.9 per \
         rank, averaged over the ranks.\n"
    )?;
    writeln!(
        md,
        "- **Open MPI**: `mpi/barrier_bench.c` under `mpirun`, `--mca btl self,vader,tcp` (shared memory between a \
         host's ranks, TCP between namespaces), `mpi_yield_when_idle 1` (its best mode with more ranks than cores).\n\
         - **mcd (interposer)**: the same program and launch with `LD_PRELOAD=libmcd_mpi_barrier_openmpi.so`; \
         `MCD_HIERARCHY=off` (every rank on the wire) or `on` (each host's ranks meet in shared memory, one leader \
         per host on the wire), the hosts released through shared memory by their leader \
         (`MCD_HIERARCHY_RELEASE=shm`) or by the leaders' multicast, which every rank takes from its own ring \
         (`multicast`). Auto picks the algorithm.\n\
         - **mcd (mcd-barrier processes)**: `mcd-barrier --ranks-per-host`'s loop, each rank a process of its own \
         (started in its host's namespace, as a launcher would), with its own endpoint; Auto's pick for the ranks \
         (flat) or for the hosts' leaders (hierarchical).\n"
    )?;
    let mut shapes: Vec<(usize, usize)> = rows.iter().map(|r| (r.hosts, r.ranks_per_host)).collect();
    shapes.dedup();
    for &(hosts, per_host) in &shapes {
        writeln!(md, "## {} ranks: {hosts} hosts × {per_host} ranks\n", hosts * per_host)?;
        writeln!(md, "| method | contender | algorithm | mean | p50 | p99 | p99.9 | max |")?;
        writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|")?;
        for r in rows.iter().filter(|r| (r.hosts, r.ranks_per_host) == (hosts, per_host)) {
            let m = &r.measured;
            writeln!(
                md,
                "| {:?} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.method,
                r.contender.label(),
                m.algorithm,
                m.mean_us,
                m.p50_us,
                m.p99_us,
                m.p999_us,
                m.max_us
            )?;
        }
        writeln!(md)?;
    }
    writeln!(md, "## Goals (16 ranks: hierarchical at least 3× faster than flat mcd and than Open MPI)\n")?;
    writeln!(md, "Ratios of means; the hierarchical barrier with each release.\n")?;
    writeln!(md, "| method | shape | release | flat / hier. (interposer) | Open MPI / hier. (interposer) | flat / hier. (processes) | Open MPI / hier. (processes) |")?;
    writeln!(md, "|---|---|---|---:|---:|---:|---:|")?;
    for method in [Method::Osu, Method::Paper] {
        for &(hosts, per_host) in &shapes {
            let get = |c| find(rows, method, (hosts, per_host), c).map(|m| m.mean_us);
            let ranks = hosts * per_host;
            for (release, interposer, processes) in [
                ("shm", Contender::InterposerShm, Contender::ProcessesShm),
                ("multicast", Contender::InterposerMulticast, Contender::ProcessesMulticast),
            ] {
                writeln!(
                    md,
                    "| {} | {hosts}×{per_host} | {release} | {} | {} | {} | {} |",
                    method_name(method),
                    ratio(get(Contender::InterposerFlat), get(interposer), ranks),
                    ratio(get(Contender::OpenMpi), get(interposer), ranks),
                    ratio(get(Contender::ProcessesFlat), get(processes), ranks),
                    ratio(get(Contender::OpenMpi), get(processes), ranks),
                )?;
            }
        }
    }
    writeln!(md)?;
    if !waits.is_empty() {
        writeln!(md, "## How the ranks wait: 4 hosts × 4 ranks, hierarchical\n")?;
        writeln!(
            md,
            "`mcd-barrier` processes, the leaders waiting as `MCD_WAIT` says (on the network, and for their host's \
             arrivals), the other ranks as `MCD_HOST_WAIT` says (in shared memory, or on their own ring for the \
             multicast release); `yield` spins 5 µs, then `sched_yield`s; `adaptive` with 16 processes on 2 cores \
             spins briefly, yields 50 µs, then sleeps (futex, `ppoll`). Fewer barriers than above ({} timed after \
             20).\n",
            waits[0].measured.iterations
        )?;
        writeln!(md, "| method | leaders wait | local ranks wait | release | mean | p50 | p99 | p99.9 |")?;
        writeln!(md, "|---|---|---|---|---:|---:|---:|---:|")?;
        for w in waits {
            let m = &w.measured;
            writeln!(
                md,
                "| {:?} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                w.method, w.leaders, w.local, w.release, m.mean_us, m.p50_us, m.p99_us, m.p999_us
            )?;
        }
        writeln!(md)?;
    }
    render_model(&mut md, params)?;
    Ok(md)
}

/// Hosts × ranks per host in the model's table: the measured shapes, then
/// the ranks per host of real nodes.
const MODEL_SHAPES: [(usize, usize); 8] = [(4, 4), (8, 2), (4, 8), (4, 16), (8, 16), (4, 32), (16, 32), (16, 64)];

/// The model's prediction where the machine cannot show it: hosts with a
/// core per rank, on 1 and 10 GbE behind a switch.
fn render_model(md: &mut String, params: &model::LogP) -> Result<()> {
    writeln!(md, "## The model: hosts with a core per rank (not measured here)\n")?;
    writeln!(
        md,
        "What `barriers::model` predicts for a real cluster, each host with as many cores as ranks (so ranks poll, \
         never sleep), this machine's o_s, o_r and g (`logp.json`) on a link preset's latency and line rate behind \
         one switch; the shared-memory costs are `mcd-logp --shm`'s (transfer {:.2} µs, scan {:.3} µs); the direct \
         release pays {:.1} µs per extra ring the host's kernel copies the multicast into (an estimate, see \
         `model::RING_COPY_US`). Flat: Auto's pick for every rank on the wire (each rank its own node in the \
         simulation; ranks sharing a NIC are not modelled). Hierarchical: Auto's pick among the leaders. Open MPI is \
         not modelled.\n",
        ShmCosts::REFERENCE.transfer,
        ShmCosts::REFERENCE.scan,
        model::hierarchy::RING_COPY_US
    )?;
    writeln!(md, "| link | shape | flat (µs) | hier., shm release (µs) | hier., multicast release (µs) | flat / hier. (best) |")?;
    writeln!(md, "|---|---|---:|---:|---:|---:|")?;
    let mut first_3x: Vec<String> = Vec::new();
    for link in [model::Link::GBE_1, model::Link::GBE_10] {
        let setup = model::Setup::preset(params, link);
        let mut reached = None;
        for (hosts, per_host) in MODEL_SHAPES {
            let shm = ShmCosts::REFERENCE;
            let ranks = hosts * per_host;
            let (flat_alg, _) = model::auto_on_host(ranks, 1, params, true, per_host, per_host);
            let flat = model::predict(flat_alg, ranks, 1, &setup).last_exit;
            let (outer, _) = model::auto_on_host(hosts, 1, params, true, 1, per_host);
            let cost = |release| model::hierarchy::hierarchical_cost_released(outer, (hosts, per_host, per_host), 1, &setup, &shm, release, false);
            let (via_shm, via_multicast) = (cost(HostRelease::SharedMemory), cost(HostRelease::Multicast));
            let speedup = flat / via_shm.min(via_multicast);
            if speedup >= 3.0 && reached.is_none() {
                reached = Some(format!("{hosts}×{per_host}"));
            }
            writeln!(
                md,
                "| {} | {hosts}×{per_host} | {flat:.1} ({flat_alg}) | {via_shm:.1} ({outer}) | {via_multicast:.1} | {speedup:.2}× |",
                link.name
            )?;
        }
        first_3x.push(format!("{}: {}", link.name, reached.as_deref().unwrap_or("at none of these shapes")));
    }
    writeln!(
        md,
        "\nThe first of these shapes (in the table's order) where the model predicts the hierarchical barrier 3× faster \
         than the flat one: {}. Real nodes run 16 to 128 ranks each. The flat barrier's rounds grow with log2 of all the \
         ranks, the leaders' with log2 of the hosts only, and the shared-memory steps add under a µs: the speedup is \
         about log2(hosts × ranks per host) / log2(hosts), so 3× takes about hosts² ranks per host (4 hosts: 16 to \
         32 ranks each; 16 hosts: 256). Ranks sharing a host's NIC are not modelled in the flat barrier, which would \
         make it slower than predicted.\n",
        first_3x.join("; ")
    )?;
    Ok(())
}
