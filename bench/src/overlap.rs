//! `mcd-bench overlap`: how much of an `MPI_Ibarrier` hides behind
//! computation (the OSU micro-benchmarks' `osu_ibarrier` definition),
//! the MPI's own against mcd's through the interposer, under Open MPI and
//! MPICH, in one run: `mpi/ibarrier_overlap.c`, unmodified, once as is and
//! once with the interposer preloaded, at each rank count, in rounds
//! (every contender once per round, one after another); each row is the
//! round with the median overlap. Writes `results/overlap.{md,json}`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::{self, MpiRun};
use mcd_vcluster::{Cluster, ClusterSpec};
use serde::{Deserialize, Serialize};

use crate::{machine, today};

/// One run's figures (rank 0's JSON line).
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Line {
    ranks: usize,
    iterations: usize,
    /// The computing per iteration, in t_pure (1: OSU's).
    #[serde(default = "one")]
    compute_factor: f64,
    /// Overlapped iterations timed (fewer than `iterations` when they would
    /// compute more than 10 s).
    #[serde(default)]
    overlapped_iterations: usize,
    pure_us: f64,
    overall_us: f64,
    compute_us: f64,
    init_us: f64,
    wait_us: f64,
    overlap_pct: f64,
    /// Each rank's median (and 99th percentile) of one pure iteration, of
    /// the start and of the wait after computing, averaged over the ranks.
    pure_p50_us: f64,
    init_p50_us: f64,
    wait_p50_us: f64,
    pure_p99_us: f64,
    init_p99_us: f64,
    wait_p99_us: f64,
    /// 100 − 100 (init_p50 + wait_p50) / pure_p50, at least 0.
    overlap_p50_pct: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Clone, Debug, Serialize)]
struct Row {
    mpi: &'static str,
    contender: &'static str,
    line: Line,
    /// Every round's overlap, in order.
    rounds: Vec<f64>,
    /// mcd's algorithms on the world and why (the report's), for mcd's rows.
    algorithms: Option<String>,
}

/// The contenders at `n` ranks: the MPI's own, mcd as it comes (`auto`),
/// and beyond 2 ranks mcd with the one-phase algorithm for its collectives
/// (`MCD_COLLECTIVE_ALGORITHM=onephase`): every rank's arrival goes out in
/// its own MPI_Ibarrier call, so the barrier completes by what arrives with
/// no step left for the progress agent (at 2 ranks `auto` picks the shuffle
/// exchange, one exchange: the same).
fn contenders(n: usize) -> Vec<(&'static str, Option<&'static str>)> {
    let mut all = vec![("mcd (interposer)", None)];
    if n > 2 {
        all.push(("mcd, onephase", Some("onephase")));
    }
    all
}

/// Timed iterations at `n` ranks: fewer where the MPI's own barrier takes
/// milliseconds (MPICH polls without yielding on shared cores).
fn iterations(mpi: Mpi, interposed: bool, n: usize, scale: f64) -> usize {
    let base = if n <= 2 { 2000.0 } else { 500.0 };
    let base = if mpi == Mpi::Mpich && !interposed && n > 2 { 40.0 } else { base };
    ((base * scale) as usize).max(10)
}

/// mcd's collectives algorithm on the world and why (rank 0's
/// `MCD_MPI_REPORT` line), if the run printed it.
fn algorithms_line(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| l.split_once("algorithms on MPI_COMM_WORLD: ").map(|(_, why)| why.trim().to_string()))
}

fn run_one(cluster: &Cluster, run: &MpiRun, iterations: usize, factor: f64) -> Result<(Line, Option<String>)> {
    let program = cbuild::build_program(run.mpi, "ibarrier_overlap")?;
    let args = vec![iterations.to_string(), (iterations / 10).max(5).to_string(), factor.to_string()];
    let out = run.output(cluster, &program.display().to_string(), &args, mpi::MPIRUN_TIMEOUT)?;
    let json = out.stdout.lines().find(|l| l.starts_with('{'));
    let Some(json) = json else {
        bail!("ibarrier_overlap under {} gave no result:\n{}\n{}", run.mpi, out.stdout, out.stderr);
    };
    if !out.success() {
        // Rank 0 printed its result; the launcher's exit afterwards is noted.
        eprintln!("note: {} exited unsuccessfully after printing its result: {}", run.mpi, out.stderr.lines().last().unwrap_or(""));
    }
    if run.env.iter().any(|(k, _)| k == "LD_PRELOAD") && !out.stderr.contains("MPI_Ibarrier via mcd, 0 via PMPI") {
        bail!("the interposer did not serve every MPI_Ibarrier:\n{}", out.stderr);
    }
    Ok((serde_json::from_str(json)?, algorithms_line(&out.stderr)))
}

/// The machine's load averages (`/proc/loadavg`'s first three fields).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

/// Runs the benchmark at each rank count of `nodes` and each computing
/// factor of `compute` (the computing per iteration in t_pure; OSU's is 1).
#[allow(clippy::too_many_arguments)]
pub fn run(out: &Path, nodes: &[usize], compute: &[f64], scale: f64, rounds: usize, mpis: &[Mpi], stem: &str) -> Result<()> {
    let started = Instant::now();
    let load_before = load_average();
    let mut rows = Vec::new();
    for &n in nodes {
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name(stem), n))?;
        for &mpi in mpis {
            mpi::check_launcher(mpi)?;
            let interposer = cbuild::build_interposer(mpi, true)?;
            let (own, interposed) = MpiRun::own_and_interposed(mpi, &interposer);
            let mut preload = interposed.env;
            preload.push(("MCD_MPI_REPORT".into(), "1".into()));
            let mut each = vec![(mpi.label(), own, false)];
            for (label, algorithm) in contenders(n) {
                let mut env = preload.clone();
                if let Some(a) = algorithm {
                    env.push(("MCD_COLLECTIVE_ALGORITHM".into(), a.into()));
                }
                each.push((label, MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env, ..MpiRun::default() }, true));
            }
            let runs: Vec<(&'static str, MpiRun, bool, f64)> =
                compute.iter().flat_map(|&f| each.iter().map(move |(l, r, i)| (*l, r.clone(), *i, f))).collect();
            let mut lines: Vec<Vec<(Line, Option<String>)>> = vec![Vec::new(); runs.len()];
            for round in 1..=rounds {
                for (k, (label, run, interposed, factor)) in runs.iter().enumerate() {
                    let (line, why) = run_one(&cluster, run, iterations(mpi, *interposed, n, scale), *factor)?;
                    eprintln!(
                        "{n} ranks, {mpi}, round {round}, compute {factor}x: {label:<18} pure {:>9.1} µs, overall {:>9.1}, compute {:>9.1}, init {:>7.1}, wait {:>8.1}: overlap {:>5.1}%; p50: pure {:.1}, init {:.1}, wait {:.1}: {:.0}% (load {})",
                        line.pure_us,
                        line.overall_us,
                        line.compute_us,
                        line.init_us,
                        line.wait_us,
                        line.overlap_pct,
                        line.pure_p50_us,
                        line.init_p50_us,
                        line.wait_p50_us,
                        line.overlap_p50_pct,
                        load_average()
                    );
                    lines[k].push((line, why));
                }
            }
            for (k, (label, _, _, _)) in runs.iter().enumerate() {
                let rounds: Vec<f64> = lines[k].iter().map(|(l, _)| l.overlap_pct).collect();
                let mut order: Vec<usize> = (0..lines[k].len()).collect();
                order.sort_by(|&a, &b| lines[k][a].0.overlap_pct.total_cmp(&lines[k][b].0.overlap_pct));
                let (median, why) = lines[k][order[order.len() / 2]].clone();
                rows.push(Row { mpi: mpi.label(), contender: label, line: median, rounds, algorithms: why });
            }
        }
    }
    let elapsed = started.elapsed();
    let mut md = render(nodes, &rows, rounds, elapsed);
    md.push_str(&format!("\nLoad averages (1, 5, 15 min) at the start: {load_before}; at the end: {}.\n", load_average()));
    std::fs::write(out.join("overlap.md"), &md)?;
    let json = serde_json::json!({ "date": today(), "machine": machine(), "run_seconds": elapsed.as_secs(), "scale": scale, "compute": compute, "rounds": rounds, "load_before": load_before, "load_after": load_average(), "rows": rows });
    std::fs::write(out.join("overlap.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    eprintln!("wrote {}/overlap.{{md,json}}", out.display());
    Ok(())
}

fn render(nodes: &[usize], rows: &[Row], rounds: usize, elapsed: Duration) -> String {
    let mut md = format!(
        "# Nonblocking overlap: MPI_Ibarrier, computation, MPI_Wait\n\nMeasured {} on {}, by `mcd-bench overlap` in one run ({:.0} s): \
         `mpi/ibarrier_overlap.c`, unmodified, under each MPI as is and with the interposer preloaded (`LD_PRELOAD`), one rank per \
         virtual-cluster node, {rounds} round(s), each row the round with the median overlap.\n\n\
         Overlap by the OSU micro-benchmarks' definition (`osu_ibarrier`): t_pure is the mean time of MPI_Ibarrier then MPI_Wait at once; \
         then each iteration starts an MPI_Ibarrier, computes for t_pure (OSU's; or the row's multiple of it, `--compute`) with no MPI call, and waits; \
         overlap = max(0, 100 − 100 (t_overall − t_compute) / t_pure), the times averaged over the ranks. \
         Beside OSU's means, the same at the median: each rank's median (p50) and 99th percentile (p99) of one pure iteration, \
         of the start (init) and of the wait after computing, averaged over the ranks; overlap at p50 = \
         max(0, 100 − 100 (init p50 + wait p50) / pure p50).\n\n\
         | ranks | MPI | contender | compute | t_pure µs | t_overall µs | t_compute µs | init µs | wait µs | overlap | every round | pure p50 / p99 µs | init p50 / p99 | wait p50 / p99 | overlap at p50 |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n",
        today(),
        machine(),
        elapsed.as_secs_f64()
    );
    for r in rows {
        let every: Vec<String> = r.rounds.iter().map(|o| format!("{o:.0}%")).collect();
        md.push_str(&format!(
            "| {} | {} | {} | {}× | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | **{:.0}%** | {} | {:.1} / {:.0} | {:.1} / {:.0} | {:.1} / {:.0} | {:.0}% |\n",
            r.line.ranks,
            r.mpi,
            r.contender,
            r.line.compute_factor,
            r.line.pure_us,
            r.line.overall_us,
            r.line.compute_us,
            r.line.init_us,
            r.line.wait_us,
            r.line.overlap_pct,
            every.join(", "),
            r.line.pure_p50_us,
            r.line.pure_p99_us,
            r.line.init_p50_us,
            r.line.init_p99_us,
            r.line.wait_p50_us,
            r.line.wait_p99_us,
            r.line.overlap_p50_pct
        ));
    }
    md.push_str("\nmcd's algorithms on the world (rank 0's `MCD_MPI_REPORT`, median round):\n\n");
    for r in rows.iter().filter(|r| r.contender.starts_with("mcd")) {
        let why = r.algorithms.as_deref().unwrap_or("(not reported)");
        md.push_str(&format!("- {} ranks, {}, {}, compute {}×: {why}\n", r.line.ranks, r.mpi, r.contender, r.line.compute_factor));
    }
    md.push_str("\n## Goal (issue 28: at least 90% for mcd)\n\n");
    for r in rows.iter().filter(|r| r.contender.starts_with("mcd")) {
        let met = if r.line.overlap_pct >= 90.0 { "met" } else { "**not met**" };
        md.push_str(&format!(
            "- {} ranks, {}, {}, compute {}×: {:.0}% ({met}; at the median {:.0}%)\n",
            r.line.ranks, r.mpi, r.contender, r.line.compute_factor, r.line.overlap_pct, r.line.overlap_p50_pct
        ));
    }
    md.push_str(&format!(
        "\nThis machine has 2 cores. mcd's start sends this rank's arrival in the calling thread; where that is all the rank \
         sends (mcd's pick at 2 ranks, the shuffle exchange: one exchange; and the one-phase rows), the barrier is complete once \
         every rank has started, MPI_Wait only reads it from the rings, and no progress agent is woken; otherwise (the shuffle \
         exchange beyond 2 ranks: a second stage) the agent or the wait carries the later steps. With {} ranks the computing \
         ranks share the cores with each other and with whatever else runs, so beyond 2 ranks the run is CPU-bound and the \
         overlap measures the scheduler as much as the barrier. Neither MPI runs a progress thread here (Open MPI with \
         `mpi_yield_when_idle 1`, MPICH as it comes, over TCP), so their barriers progress only in MPI_Wait.\n",
        nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" and ")
    ));
    md
}
