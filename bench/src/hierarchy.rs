//! Many ranks per host: the hierarchical barrier against the flat one and
//! against Open MPI with shared memory between a host's ranks (`--mca btl
//! self,vader,tcp`), at hosts × ranks per host on the virtual cluster
//! (several processes per namespace). Writes results/hierarchy.{md,json}.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use barriers::BarrierConfig;
use mcd::WaitPolicy;
use mcd_tools::barrierbench::{self, BarrierBench, BarrierMeasurement, Method};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::{self, MpiRun};
use mcd_tools::vcluster::{Cluster, ClusterSpec};
use serde::Serialize;

/// Who is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Contender {
    /// The unmodified MPI program's own MPI_Barrier (Open MPI, vader + TCP, yielding).
    OpenMpi,
    /// The same program with the interposer, every rank on the wire.
    InterposerFlat,
    /// The same program with the interposer, hierarchical.
    InterposerHierarchical,
    /// mcd's flat barrier, ranks as threads of one process.
    ThreadsFlat,
    /// mcd's hierarchical barrier, ranks as threads of one process.
    ThreadsHierarchical,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::OpenMpi => "Open MPI (self,vader,tcp; yield)",
            Contender::InterposerFlat => "mcd flat (interposer)",
            Contender::InterposerHierarchical => "mcd hierarchical (interposer)",
            Contender::ThreadsFlat => "mcd flat (threads)",
            Contender::ThreadsHierarchical => "mcd hierarchical (threads)",
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

/// Measures every contender at each (hosts, ranks per host) of `shapes`.
pub fn run(out: &Path, shapes: &[(usize, usize)], iterations: usize) -> Result<()> {
    mpi::check_launcher(Mpi::OpenMpi)?;
    let interposer = cbuild::build_interposer(Mpi::OpenMpi, true)?;
    let params = mcd_tools::logp::load_or_measure(Some(&out.join("logp.json")))?;
    let cores = mcd::host::online_cpus();
    let mut rows = Vec::new();
    for &(hosts, per_host) in shapes {
        let ranks = hosts * per_host;
        eprintln!("{hosts} hosts × {per_host} ranks = {ranks} ranks, {iterations} timed barriers each (paper's method)");
        let cluster = Cluster::up_guarded(ClusterSpec::new("h14bh", hosts))?;
        for method in [Method::Osu, Method::Paper] {
            let bench = BarrierBench {
                method,
                warmup: 50,
                iterations,
                dummy: Duration::from_micros(30),
                wait: WaitPolicy::Adaptive,
            };
            let mut record = |contender: Contender, m: BarrierMeasurement| {
                eprintln!(
                    "  {method:?} {:<34} {:<24} mean {:>8.1} µs  p50 {:>8.1}  p99 {:>8.1}",
                    contender.label(),
                    m.algorithm,
                    m.mean_us,
                    m.p50_us,
                    m.p99_us
                );
                rows.push(Row {
                    method,
                    hosts,
                    ranks_per_host: per_host,
                    contender,
                    measured: m,
                });
            };
            // mcd's own loop, ranks as threads: Auto's pick for what is on the wire.
            let flat = BarrierConfig::auto_on_host(ranks, 1, &params, true, ranks, cores);
            record(
                Contender::ThreadsFlat,
                barrierbench::measure_ranks_per_host(&cluster, per_host, flat, bench, false)?,
            );
            let leaders = BarrierConfig::auto_on_host(hosts, 1, &params, true, ranks, cores);
            record(
                Contender::ThreadsHierarchical,
                barrierbench::measure_ranks_per_host(&cluster, per_host, leaders, bench, true)?,
            );
            // The same MPI program, processes under mpirun, per_host per namespace.
            let vader = vec![("btl".to_string(), "self,vader,tcp".to_string())];
            let ompi = MpiRun {
                ranks_per_node: per_host,
                yield_when_idle: true,
                mca: vader.clone(),
                ..MpiRun::default()
            };
            record(
                Contender::OpenMpi,
                mpi::measure_barrier(&cluster, &ompi, bench, "MPI_Barrier")?,
            );
            for (contender, hierarchy) in [
                (Contender::InterposerFlat, "off"),
                (Contender::InterposerHierarchical, "on"),
            ] {
                let env = vec![
                    ("LD_PRELOAD".to_string(), interposer.display().to_string()),
                    ("MCD_HIERARCHY".to_string(), hierarchy.to_string()),
                ];
                let run = MpiRun {
                    env,
                    ..ompi.clone()
                };
                record(
                    contender,
                    mpi::measure_barrier(
                        &cluster,
                        &run,
                        bench,
                        &format!("MCD_HIERARCHY={hierarchy}"),
                    )?,
                );
            }
        }
    }
    let md = render(&rows, iterations)?;
    std::fs::write(out.join("hierarchy.md"), &md)?;
    std::fs::write(
        out.join("hierarchy.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    print!("{md}");
    Ok(())
}

fn find(
    rows: &[Row],
    method: Method,
    (hosts, per_host): (usize, usize),
    c: Contender,
) -> Option<&BarrierMeasurement> {
    rows.iter()
        .find(|r| {
            r.method == method
                && r.hosts == hosts
                && r.ranks_per_host == per_host
                && r.contender == c
        })
        .map(|r| &r.measured)
}

fn method_name(method: Method) -> &'static str {
    match method {
        Method::Osu => "OSU (back-to-back barriers)",
        Method::Paper => "paper (barrier, then a 30 µs dummy loop)",
    }
}

fn render(rows: &[Row], iterations: usize) -> Result<String> {
    let mut md = String::new();
    writeln!(
        md,
        "# Many ranks per host: hierarchical against flat mcd and Open MPI\n"
    )?;
    writeln!(
        md,
        "`mcd-bench hierarchy`, one run on the reference VM (2 cores): each node of the virtual cluster (a network \
         namespace, one NIC) is a host running several ranks. Every rank shares this machine's 2 cores, so 16 and 32 \
         ranks are 8 and 16 processes per core. Two methods: OSU's (back-to-back barriers; mean = the ranks' loop \
         time per barrier, averaged) and the paper's (barrier, then a 30 µs dummy loop; with 8 ranks per core the \
         dummy loops alone take 16 × 30 µs / 2 cores = 240 µs of every barrier at 16 ranks, whatever the barrier). \
         {iterations} timed barriers after 50 untimed, adaptive waiting; µs per barrier; p50/p99/p99.9 per rank, \
         averaged over the ranks.\n"
    )?;
    writeln!(
        md,
        "- **Open MPI**: `mpi/barrier_bench.c` under `mpirun`, `--mca btl self,vader,tcp` (shared memory between a \
         host's ranks, TCP between namespaces), `mpi_yield_when_idle 1` (its best mode with more ranks than cores).\n\
         - **mcd (interposer)**: the same program and launch with `LD_PRELOAD=libmcd_mpi_barrier_openmpi.so`; \
         `MCD_HIERARCHY=off` (every rank on the wire) or `on` (each host's ranks meet in shared memory, one leader \
         per host on the wire). Auto picks the algorithm.\n\
         - **mcd (threads)**: `mcd-barrier`'s loop with the ranks as threads of one process, each with its own \
         endpoint; Auto's pick for the ranks (flat) or for the hosts' leaders (hierarchical).\n"
    )?;
    let mut shapes: Vec<(usize, usize)> =
        rows.iter().map(|r| (r.hosts, r.ranks_per_host)).collect();
    shapes.dedup();
    for &(hosts, per_host) in &shapes {
        writeln!(
            md,
            "## {} ranks: {hosts} hosts × {per_host} ranks\n",
            hosts * per_host
        )?;
        writeln!(
            md,
            "| method | contender | algorithm | mean | p50 | p99 | p99.9 | max |"
        )?;
        writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|")?;
        for r in rows
            .iter()
            .filter(|r| (r.hosts, r.ranks_per_host) == (hosts, per_host))
        {
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
    writeln!(
        md,
        "## Goals (16 ranks: hierarchical at least 3× faster than flat mcd and than Open MPI)\n"
    )?;
    writeln!(
        md,
        "Ratios of means, processes under `mpirun` (interposer rows) and threads.\n"
    )?;
    writeln!(md, "| method | shape | flat / hierarchical (interposer) | Open MPI / hierarchical (interposer) | flat / hierarchical (threads) | Open MPI / hierarchical (threads) |")?;
    writeln!(md, "|---|---|---:|---:|---:|---:|")?;
    for (method, &(hosts, per_host)) in [Method::Osu, Method::Paper]
        .into_iter()
        .flat_map(|m| shapes.iter().map(move |s| (m, s)))
    {
        let get = |c| find(rows, method, (hosts, per_host), c).map(|m| m.mean_us);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => {
                let r = a / b;
                format!(
                    "{r:.2}× ({})",
                    if hosts * per_host != 16 {
                        "no goal"
                    } else if r >= 3.0 {
                        "met"
                    } else {
                        "**not met**"
                    }
                )
            }
            _ => "–".into(),
        };
        writeln!(
            md,
            "| {} | {hosts}×{per_host} | {} | {} | {} | {} |",
            method_name(method),
            ratio(
                get(Contender::InterposerFlat),
                get(Contender::InterposerHierarchical)
            ),
            ratio(
                get(Contender::OpenMpi),
                get(Contender::InterposerHierarchical)
            ),
            ratio(
                get(Contender::ThreadsFlat),
                get(Contender::ThreadsHierarchical)
            ),
            ratio(get(Contender::OpenMpi), get(Contender::ThreadsHierarchical)),
        )?;
    }
    Ok(md)
}
