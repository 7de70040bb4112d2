//! `mcd-bench comms`: the collectives as third-party suites run them (the
//! Intel MPI Benchmarks' groups, OSU's timing), on the benchmark's OWN
//! communicators: `mpi/coll_bench.c` in a job of 8 ranks (one per
//! virtual-cluster node) splits the world into communicators of 2, 4 and 8
//! ranks and duplicates each, and times MPI_Barrier, MPI_Allreduce,
//! MPI_Reduce, MPI_Bcast and their nonblocking forms (the call then
//! MPI_Wait) on the duplicate, with an untimed MPI_Barrier before each
//! call (OSU's way), at sizes up to one frame and one beyond, each checked
//! first against the PMPI call on the same inputs. Under Open MPI and
//! MPICH, each MPI's own collectives against mcd's through the interposer,
//! in rounds (every contender once per round); each row is the round with
//! the median median. The interposer's per-rank JSON report
//! (`MCD_MPI_REPORT_JSON`) says how many calls went through mcd; the
//! program says how many it made. Writes `results/comms.{md,json}`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::{self, MpiRun};
use mcd_vcluster::{Cluster, ClusterSpec};
use serde::{Deserialize, Serialize};

use crate::{machine, today};

/// The most data one frame carries (a collective's segment).
const ONE_FRAME: usize = barriers::model::SEGMENT_BYTES;
/// The sizes up to one frame (the last one a whole segment: 1424 bytes
/// with authentication, whose tag takes 8 bytes of the frame; this list
/// said 1432, two segments since wire version 4), and the one beyond.
fn frame_sizes() -> String {
    format!("8,64,512,{ONE_FRAME}")
}
const BEYOND: usize = 2048;
const KINDS: [&str; 8] = ["barrier", "allreduce", "reduce", "bcast", "ibarrier", "iallreduce", "ireduce", "ibcast"];
/// The interposer report's name of each kind's calls.
const MPI_NAMES: [&str; 8] =
    ["MPI_Barrier", "MPI_Allreduce", "MPI_Reduce", "MPI_Bcast", "MPI_Ibarrier", "MPI_Iallreduce", "MPI_Ireduce", "MPI_Ibcast"];
/// Calls checked against PMPI before each row's timed ones.
const CHECKS: usize = 10;
const MCD: &str = "mcd";
/// How coll_bench's last line starts.
const CALLS_LINE: &str = "{\"calls\"";
/// How long a run may take to end after its last line.
const FINALIZE_GRACE: Duration = Duration::from_secs(20);

/// One row of coll_bench's output.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Line {
    collective: String,
    bytes: usize,
    ranks: usize,
    job_ranks: usize,
    comm: String,
    iterations: usize,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
    max_us: f64,
    correct: bool,
    sync: bool,
    /// Each member's own p50, µs, in rank order (which rank a row's time
    /// is spent at).
    #[serde(default)]
    rank_p50_us: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
struct Row {
    mpi: &'static str,
    contender: &'static str,
    #[serde(flatten)]
    line: Line,
    /// Every round's median, µs, in order.
    rounds_p50_us: Vec<f64>,
}

/// Calls of each kind (by the report's names): the program's, and the
/// interposer's count of those through mcd and through PMPI.
#[derive(Clone, Debug, Default, Serialize)]
struct Calls {
    made: BTreeMap<String, u64>,
    mcd: BTreeMap<String, u64>,
    pmpi: BTreeMap<String, u64>,
}

impl Calls {
    fn add(&mut self, other: &Calls) {
        for (into, from) in [(&mut self.made, &other.made), (&mut self.mcd, &other.mcd), (&mut self.pmpi, &other.pmpi)] {
            for (k, v) in from {
                *into.entry(k.clone()).or_default() += v;
            }
        }
    }

    fn total(map: &BTreeMap<String, u64>) -> u64 {
        map.values().sum()
    }
}

/// The interposer's JSON reports of one run (a file per rank): calls of
/// each kind through mcd and PMPI, summed over the ranks.
fn read_reports(dir: &Path, ranks: usize) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
    let (mut mcd, mut pmpi) = (BTreeMap::new(), BTreeMap::new());
    for rank in 0..ranks {
        let path = dir.join(format!("report.{rank}.json"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let count = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
        *mcd.entry("MPI_Barrier".to_string()).or_default() += count(&v["barrier"]["mcd"]);
        *pmpi.entry("MPI_Barrier".to_string()).or_default() += count(&v["barrier"]["pmpi"]);
        for name in &MPI_NAMES[1..] {
            *mcd.entry(name.to_string()).or_default() += count(&v["calls"][name]["mcd"]);
            *pmpi.entry(name.to_string()).or_default() += count(&v["calls"][name]["pmpi"]);
        }
    }
    Ok((mcd, pmpi))
}

/// One coll_bench run: its rows and the calls it made (and, preloaded,
/// those the interposer served).
fn run_once(cluster: &Cluster, run: &MpiRun, sizes: &str, kinds: &str, iterations: usize, report: Option<&Path>) -> Result<(Vec<Line>, Calls)> {
    let program = cbuild::build_program(run.mpi, "coll_bench")?;
    let args: Vec<String> = [
        "--sizes",
        sizes,
        "--collectives",
        kinds,
        "--comm-sizes",
        "2,4,8",
        "--iterations",
        &iterations.to_string(),
        "--warmup",
        &(iterations / 10).max(5).to_string(),
        "--check",
        &CHECKS.to_string(),
        "--sync",
    ]
    .map(String::from)
    .to_vec();
    let mut run = run.clone();
    // The program's last line; MPICH's MPI_Finalize may hang after it
    // ([`MpiRun::ends_after`]): the interposer's reports are written before.
    run.ends_after = Some((CALLS_LINE.into(), FINALIZE_GRACE));
    if let Some(dir) = report {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        run.env.push(("MCD_MPI_REPORT_JSON".into(), dir.join("report.%r.json").display().to_string()));
    }
    let out = run.output(cluster, &program.display().to_string(), &args, Duration::from_secs(900))?;
    let finished = out.stdout.lines().any(|l| l.starts_with(CALLS_LINE));
    if !out.success() && finished {
        // Every row and the count printed: the launcher's end is noted.
        eprintln!("note: coll_bench under {} ended unsuccessfully ({}) after printing every row", run.mpi, out.status());
    } else if !out.success() {
        bail!("coll_bench under {} failed ({}):\n{}\n{}", run.mpi, out.status(), out.stdout, out.stderr);
    }
    let mut lines = Vec::new();
    let mut calls = Calls::default();
    for l in out.stdout.lines().filter(|l| l.starts_with('{')) {
        if l.contains("\"calls\"") {
            let v: serde_json::Value = serde_json::from_str(l)?;
            for name in MPI_NAMES {
                calls.made.insert(name.to_string(), v["calls"][name].as_u64().unwrap_or(0));
            }
        } else {
            lines.push(serde_json::from_str::<Line>(l).with_context(|| format!("parsing `{l}`"))?);
        }
    }
    if let Some(wrong) = lines.iter().find(|l| !l.correct) {
        bail!("{}: {} of {} bytes on {} ranks gave a wrong result (against PMPI)", run.mpi, wrong.collective, wrong.bytes, wrong.ranks);
    }
    if let Some(dir) = report {
        let ranks = lines.first().map_or(0, |l| l.job_ranks);
        (calls.mcd, calls.pmpi) = read_reports(dir, ranks)?;
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok((lines, calls))
}

/// Timed calls per row: MPICH's own collectives poll without yielding, so
/// 8 ranks on 2 cores take tens of milliseconds per call.
fn iterations(mpi: Mpi, interposed: bool, scale: f64) -> usize {
    let base = if mpi == Mpi::Mpich && !interposed { 30.0 } else { 300.0 };
    ((base * scale) as usize).max(10)
}

/// The machine's load averages (`/proc/loadavg`'s first three fields).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

pub fn run(out: &Path, ranks: usize, scale: f64, rounds: usize, mpis: &[Mpi], stem: &str) -> Result<()> {
    anyhow::ensure!(rounds >= 1, "--rounds must be at least 1");
    let started = Instant::now();
    let mut loads = vec![format!("start: {}", load_average())];
    let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name(stem), ranks))?;
    let report_dir = std::env::temp_dir().join(format!("mcd-comms-{stem}"));
    let mut lines: Vec<(&'static str, &'static str, Line)> = Vec::new();
    // Per MPI, the calls of up to one frame and beyond (mcd's runs).
    let mut frame_calls: BTreeMap<&'static str, Calls> = BTreeMap::new();
    let mut beyond_calls: BTreeMap<&'static str, Calls> = BTreeMap::new();
    let beyond_kinds = KINDS[1..].iter().filter(|k| !k.ends_with("barrier")).copied().collect::<Vec<_>>().join(",");
    for &mpi in mpis {
        mpi::check_launcher(mpi)?;
        let interposer = cbuild::build_interposer(mpi, true)?;
        let (own, mcd) = MpiRun::own_and_interposed(mpi, &interposer);
        for round in 1..=rounds {
            for (label, run, interposed) in [(mpi.label(), &own, false), (MCD, &mcd, true)] {
                let n = iterations(mpi, interposed, scale);
                let report = interposed.then_some(report_dir.as_path());
                let t = Instant::now();
                let (frame, calls) = run_once(&cluster, run, &frame_sizes(), &KINDS.join(","), n, report)?;
                if interposed {
                    frame_calls.entry(mpi.label()).or_default().add(&calls);
                }
                let (beyond, calls) = run_once(&cluster, run, &BEYOND.to_string(), &beyond_kinds, n, report)?;
                if interposed {
                    beyond_calls.entry(mpi.label()).or_default().add(&calls);
                }
                let load = load_average();
                eprintln!(
                    "{mpi}, round {round}/{rounds}, {label}: {} rows in {:.0} s (load {load})",
                    frame.len() + beyond.len(),
                    t.elapsed().as_secs_f64()
                );
                loads.push(format!("{mpi} round {round} {label}: {load}"));
                lines.extend(frame.into_iter().chain(beyond).map(|l| (mpi.label(), label, l)));
            }
        }
    }
    let rows = median_rounds(lines);
    let elapsed = started.elapsed();
    let md = render(ranks, &rows, &frame_calls, &beyond_calls, scale, rounds, elapsed, &loads);
    std::fs::write(out.join("comms.md"), &md)?;
    let json = serde_json::json!({
        "date": today(), "machine": machine(), "run_seconds": elapsed.as_secs(), "scale": scale, "rounds": rounds,
        "job_ranks": ranks, "checks_per_row": CHECKS, "one_frame_bytes": ONE_FRAME, "loads": loads,
        "calls_up_to_one_frame": frame_calls, "calls_beyond": beyond_calls, "rows": rows,
    });
    std::fs::write(out.join("comms.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    eprintln!("wrote {}/comms.{{md,json}}", out.display());
    Ok(())
}

/// One row per MPI, contender, collective, communicator size and bytes:
/// the round with the median median, every round's median beside it.
/// A row's identity: MPI, contender, collective, communicator ranks, bytes.
type RowKey = (&'static str, &'static str, String, usize, usize);

fn median_rounds(lines: Vec<(&'static str, &'static str, Line)>) -> Vec<Row> {
    let mut groups: Vec<(RowKey, Vec<Line>)> = Vec::new();
    for (mpi, contender, line) in lines {
        let key = (mpi, contender, line.collective.clone(), line.ranks, line.bytes);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(line),
            None => groups.push((key, vec![line])),
        }
    }
    groups
        .into_iter()
        .map(|((mpi, contender, ..), mut group)| {
            let rounds_p50_us = group.iter().map(|l| l.p50_us).collect();
            group.sort_by(|a, b| a.p50_us.total_cmp(&b.p50_us));
            let line = group.swap_remove((group.len() - 1) / 2);
            Row { mpi, contender, line, rounds_p50_us }
        })
        .collect()
}

fn find<'a>(rows: &'a [Row], mpi: &str, contender: &str, line: &Line) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.mpi == mpi && r.contender == contender && r.line.collective == line.collective && r.line.ranks == line.ranks && r.line.bytes == line.bytes
    })
}

/// Calls of up to one frame through mcd, as a sentence and whether ≥ 99%.
fn share(calls: &Calls) -> (String, bool) {
    let (mcd, pmpi, made) = (Calls::total(&calls.mcd), Calls::total(&calls.pmpi), Calls::total(&calls.made));
    let pct = if mcd + pmpi == 0 { 0.0 } else { 100.0 * mcd as f64 / (mcd + pmpi) as f64 };
    let per_kind: Vec<String> =
        MPI_NAMES.iter().map(|k| format!("{k} {}/{}", calls.mcd.get(*k).copied().unwrap_or(0), calls.made.get(*k).copied().unwrap_or(0))).collect();
    (
        format!(
            "{mcd} of {} calls through mcd ({pct:.2}%), {pmpi} through PMPI; the program made {made} (per kind, through mcd / made: {})",
            mcd + pmpi,
            per_kind.join(", ")
        ),
        pct >= 99.0,
    )
}

#[allow(clippy::too_many_arguments)]
fn render(
    ranks: usize,
    rows: &[Row],
    frame_calls: &BTreeMap<&'static str, Calls>,
    beyond_calls: &BTreeMap<&'static str, Calls>,
    scale: f64,
    rounds: usize,
    elapsed: Duration,
    loads: &[String],
) -> String {
    let mut md = format!(
        "# Collectives on the benchmark's own communicators (issue 28)\n\nMeasured {} on {}, by `mcd-bench comms` in one run ({:.0} s, \
         --scale {scale}): `mpi/coll_bench.c` in a job of {ranks} ranks (one per virtual-cluster node, all on this machine's cores), \
         which makes its own communicators as the Intel MPI Benchmarks do (`MPI_Comm_split` of the world into its first P ranks, then \
         `MPI_Comm_dup`; the collectives run on the duplicate; the other ranks wait, asleep) for P = 2, 4 and 8, and times each call \
         with an untimed `MPI_Barrier` on the communicator before it (OSU's way): `MPI_Barrier`, `MPI_Allreduce` and `MPI_Reduce` \
         (sum of doubles, root 0), `MPI_Bcast` (root 0), and `MPI_Ibarrier`, `MPI_Iallreduce`, `MPI_Ireduce`, `MPI_Ibcast`, each \
         timed as the call then `MPI_Wait` at once; sizes up to one frame ({ONE_FRAME} bytes) and one beyond ({BEYOND} bytes, two \
         segments). Before each row's timed calls, {CHECKS} calls with inputs that change each call (every root in turn) are \
         compared with the PMPI call on copies of the same inputs (exactly: whole numbers) and the send buffers checked unchanged; \
         the last timed call's result is checked too. Each MPI's own collectives (Open MPI with `mpi_yield_when_idle 1`, MPICH \
         over TCP) against mcd's through the interposer (`LD_PRELOAD`), {rounds} round(s), each row the round with the median \
         median; p50 and p99 are each rank's, averaged over the communicator's ranks.\n\n\
         **{ranks} ranks on 2 cores are CPU-bound**: every rank, its MPI's progress and mcd's progress agent share the two cores \
         (and the machine was shared with other sessions: load averages below), so the times are the scheduler's as much as the \
         collectives', upper bounds for both contenders alike; the 2- and 4-rank rows run while the other ranks sleep.\n\n",
        today(),
        machine(),
        elapsed.as_secs_f64()
    );
    md.push_str("## Calls through mcd (the interposer's `MCD_MPI_REPORT_JSON`, summed over the ranks and rounds)\n\n");
    let mut all_through = true;
    for (mpi, calls) in frame_calls {
        let (text, ok) = share(calls);
        all_through &= ok;
        md.push_str(&format!("- {mpi}, up to one frame: {text}\n"));
    }
    for (mpi, calls) in beyond_calls {
        md.push_str(&format!("- {mpi}, {BEYOND} bytes (beyond one frame, not in the goal): {}\n", share(calls).0));
    }
    md.push_str(
        "\nThe barrier count includes the untimed barriers before each call (they are MPI_Barrier calls of the program's, on its own \
         communicators); the PMPI calls the program makes itself (the references, its reports) are not counted by anyone.\n\n",
    );
    let mut slower = Vec::new();
    for mpi in [Mpi::OpenMpi.label(), Mpi::Mpich.label()].into_iter().filter(|m| rows.iter().any(|r| r.mpi == *m)) {
        md.push_str(&format!(
            "## {mpi}\n\n| collective | ranks | bytes | {mpi} p50 µs | p99 | mcd p50 µs | p99 | {mpi} / mcd (p50) | every round's p50, {mpi} / mcd |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---|\n"
        ));
        for own in rows.iter().filter(|r| r.mpi == mpi && r.contender == mpi) {
            let Some(m) = find(rows, mpi, MCD, &own.line) else { continue };
            let ratio = own.line.p50_us / m.line.p50_us;
            if own.line.bytes <= ONE_FRAME && ratio <= 1.0 {
                slower.push(format!("{mpi} {} {} ranks {} B ({ratio:.2}×)", own.line.collective, own.line.ranks, own.line.bytes));
            }
            let r = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ");
            md.push_str(&format!(
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {}{ratio:.2}×{} | {} / {} |\n",
                own.line.collective,
                own.line.ranks,
                own.line.bytes,
                own.line.p50_us,
                own.line.p99_us,
                m.line.p50_us,
                m.line.p99_us,
                if ratio > 1.0 { "**" } else { "" },
                if ratio > 1.0 { "**" } else { "" },
                r(&own.rounds_p50_us),
                r(&m.rounds_p50_us),
            ));
        }
        md.push('\n');
    }
    md.push_str("## Goals (issue 28)\n\n");
    md.push_str(&format!("- At least 99% of calls of up to one frame through mcd: {}\n", if all_through { "**met**" } else { "**not met**" }));
    md.push_str("- Results correct (every row's checks against PMPI and its last result): **met** (the run stops at a wrong result)\n");
    if slower.is_empty() {
        md.push_str("- mcd faster than the MPI's own in every row up to one frame (p50): **met**\n");
    } else {
        md.push_str(&format!(
            "- mcd faster than the MPI's own in every row up to one frame (p50): **not met**, {} row(s) where it is not: {}\n",
            slower.len(),
            slower.join("; ")
        ));
    }
    md.push_str(&format!("\nLoad averages (1, 5, 15 min): {}.\n", loads.join("; ")));
    md
}
