//! Load: more processes than cores, no loss. mcd's barrier against the least
//! a barrier on raw Ethernet can do, both as one process per node.
//!
//! The baseline is `bench/c/raw_dissemination.c`: a dissemination barrier
//! over one plain AF_PACKET socket that spins on `recv(MSG_DONTWAIT)` and
//! calls `sched_yield` between empty polls (no ring, no reliability). mcd is
//! `mcd-barrier --across-hosts` (the same dissemination algorithm, one
//! process per node, started without `MCD_LOCAL_PROCS`, so its host
//! awareness has to find the load itself), with `yield` and `adaptive`
//! waiting. Both run by OSU's method (back to back) and by the paper's (a
//! 30 µs dummy loop after each barrier), alternating round by round.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use mcd_vcluster::{Cluster, ClusterSpec, Collected};
use serde::Serialize;

/// One contender's mean µs per barrier at one size and method, each round.
#[derive(Clone, Debug, Serialize)]
struct Row {
    nodes: usize,
    method: &'static str,
    contender: String,
    /// Mean µs per barrier (averaged over nodes), one per round.
    means_us: Vec<f64>,
    /// Data frames re-sent because a peer asked, all rounds (mcd only).
    recoveries: Option<u64>,
}

impl Row {
    fn median(&self) -> f64 {
        barriers::summary::median(&mut self.means_us.clone())
    }
}

const CONTENDERS: [&str; 3] = ["C raw dissemination (spin + sched_yield)", "mcd dissemination, wait yield", "mcd dissemination, wait adaptive"];

/// Compiles the C baseline next to this executable.
fn build_baseline() -> Result<PathBuf> {
    let source = mcd_tools::cbuild::source_dir()?.join("bench/c/raw_dissemination.c");
    let exe = std::env::current_exe()?;
    let out = exe.parent().context("the executable's directory")?.join("raw_dissemination");
    let status = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .context("running cc (apt-get install gcc, or `./run deps`)")?;
    ensure!(status.success(), "cc {} failed", source.display());
    Ok(out)
}

/// Starts `argv_of(node)` on every node of `cluster` without
/// `MCD_LOCAL_PROCS`, and returns each node's standard output.
fn run_nodes(cluster: &Cluster, what: &str, argv_of: impl Fn(usize) -> Vec<String>) -> Result<Vec<String>> {
    let mut children = Vec::new();
    for node in 0..cluster.nodes() {
        let argv = argv_of(node);
        let mut cmd = cluster.command(node, &argv[0]);
        cmd.args(&argv[1..]).env_remove("MCD_LOCAL_PROCS");
        children.push(Collected::spawn(cmd).with_context(|| format!("starting {what} on node {node}"))?);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let outcomes: Vec<_> = children.into_iter().enumerate().map(|(node, c)| c.finish(node, deadline)).collect();
    for o in &outcomes {
        if !o.success() {
            bail!("{what} on node {}: {}\n{}", o.node, o.status(), o.stderr.trim());
        }
    }
    Ok(outcomes.into_iter().map(|o| o.stdout).collect())
}

fn baseline(cluster: &Cluster, program: &Path, method: &str, iterations: usize) -> Result<f64> {
    let n = cluster.nodes();
    let macs: Vec<String> = (0..n).map(|i| cluster.mac(i, 0).to_string()).collect();
    let outputs = run_nodes(cluster, "the C baseline", |node| {
        let mut argv = vec![
            program.display().to_string(),
            Cluster::interface(0),
            node.to_string(),
            n.to_string(),
            method.to_string(),
            iterations.to_string(),
            "100".to_string(),
        ];
        argv.extend(macs.iter().cloned());
        argv
    })?;
    let means = outputs
        .iter()
        .map(|o| {
            o.lines()
                .find_map(|l| l.strip_prefix("mean_us "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .with_context(|| format!("no `mean_us` in the baseline's output: {o:?}"))
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(means.iter().sum::<f64>() / means.len() as f64)
}

/// mcd's rows for `wait` (µs per barrier, recoveries), run as processes.
fn mcd(cluster: &Cluster, program: &Path, method: &str, wait: &str, iterations: usize, dir: &Path) -> Result<(f64, u64)> {
    let out = dir.join(format!("{method}-{wait}"));
    let _ = std::fs::remove_dir_all(&out);
    run_nodes(cluster, "mcd-barrier", |_| {
        [
            program.display().to_string(),
            "--across-hosts".into(),
            "--algorithms".into(),
            "dissemination".into(),
            "--wait".into(),
            wait.into(),
            "--method".into(),
            method.into(),
            "--iterations".into(),
            iterations.to_string(),
            "--out".into(),
            out.display().to_string(),
        ]
        .to_vec()
    })?;
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json"))?)?;
    let row = json["rows"].as_array().and_then(|r| r.first()).context("no row in mcd-barrier's results.json")?;
    let mean = row["mean_us"].as_f64().context("mean_us")?;
    let recoveries = row["recoveries"].as_u64().context("recoveries")?;
    Ok((mean, recoveries))
}

/// Runs the comparison and writes `load.{md,json}` to `out`.
pub fn run(out: &Path, sizes: &[usize], rounds: usize, iterations: usize) -> Result<()> {
    ensure!(!sizes.is_empty() && sizes.iter().all(|&n| n >= 2), "--nodes: node counts of at least 2");
    ensure!(rounds >= 1 && iterations >= 1, "--rounds and --iterations must be at least 1");
    let baseline_program = build_baseline()?;
    let mcd_barrier = std::env::current_exe()?.parent().context("the executable's directory")?.join("mcd-barrier");
    ensure!(mcd_barrier.exists(), "{} is missing: build it first (cargo build --release -p mcd-tools; `./run bench` does)", mcd_barrier.display());
    let scratch = std::env::temp_dir().join("mcd-bench-load");
    let mut rows: Vec<Row> = Vec::new();
    for &n in sizes {
        let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("bnload"), n))?;
        for method in ["osu", "paper"] {
            let mut these: Vec<Row> =
                CONTENDERS.iter().map(|c| Row { nodes: n, method, contender: c.to_string(), means_us: Vec::new(), recoveries: None }).collect();
            for round in 0..rounds {
                let c = baseline(&cluster, &baseline_program, method, iterations)?;
                these[0].means_us.push(c);
                for (row, wait) in these[1..].iter_mut().zip(["yield", "adaptive"]) {
                    let (mean, recoveries) = mcd(&cluster, &mcd_barrier, method, wait, iterations, &scratch)?;
                    row.means_us.push(mean);
                    *row.recoveries.get_or_insert(0) += recoveries;
                }
                eprintln!(
                    "  n={n:<2} {method:<5} round {}/{rounds}: C {c:.1} µs, mcd yield {:.1} µs, adaptive {:.1} µs",
                    round + 1,
                    these[1].means_us[round],
                    these[2].means_us[round]
                );
            }
            rows.extend(these);
        }
    }
    let mut md = String::new();
    writeln!(md, "# Load: more processes than cores, no loss\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- load` (`./run bench load`).\n", crate::today(), crate::machine())?;
    writeln!(
        md,
        "Method: one process per node in its own namespace on a virtual cluster (veth, a learning \
         bridge, one rail, no injected loss). The baseline is [`bench/c/raw_dissemination.c`](../c/raw_dissemination.c): \
         a dissemination barrier over one plain AF_PACKET socket that spins on `recv(MSG_DONTWAIT)` and calls \
         `sched_yield` between empty polls, with no ring, no reliability and no epochs beyond a counter: the least \
         a barrier on raw Ethernet can do. mcd is `mcd-barrier --across-hosts --algorithms dissemination` (the \
         same algorithm) started without `MCD_LOCAL_PROCS`, so its adaptive waiting must find the host's load by \
         itself. Per size and method, {rounds} rounds; in each, the three run one after another on the same \
         cluster, {iterations} timed barriers after 100 untimed. OSU: back to back, mean = loop time / \
         iterations; paper: a 30 µs dummy loop after each barrier, mean of the barrier times. Figures are the \
         nodes' means averaged, the median over rounds (the rounds' range beside it). `recoveries`: data frames \
         sent again because a peer asked, all rounds, all nodes.\n"
    )?;
    writeln!(md, "| nodes | method | contender | mean µs (median of rounds) | range | / C baseline | recoveries |")?;
    writeln!(md, "|---:|---|---|---:|---|---:|---:|")?;
    for r in &rows {
        let base = rows.iter().find(|b| b.nodes == r.nodes && b.method == r.method && b.contender == CONTENDERS[0]).map(Row::median);
        let lo = r.means_us.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.means_us.iter().copied().fold(0.0, f64::max);
        writeln!(
            md,
            "| {} | {} | {} | {:.1} | {lo:.1}–{hi:.1} | {} | {} |",
            r.nodes,
            r.method,
            r.contender,
            r.median(),
            base.map(|b| format!("{:.2}×", r.median() / b)).unwrap_or_default(),
            r.recoveries.map(|x| x.to_string()).unwrap_or_else(|| "–".into())
        )?;
    }
    // The goals, stated plainly.
    writeln!(md, "\n## Goals\n")?;
    for &n in sizes {
        for method in ["osu", "paper"] {
            let find = |c: &str| rows.iter().find(|r| r.nodes == n && r.method == method && r.contender == c);
            let (Some(c), Some(best)) = (
                find(CONTENDERS[0]),
                [find(CONTENDERS[1]), find(CONTENDERS[2])].into_iter().flatten().min_by(|a, b| a.median().total_cmp(&b.median())),
            ) else {
                continue;
            };
            let ratio = best.median() / c.median();
            writeln!(
                md,
                "- {n} nodes, {method}: mcd's better policy at {ratio:.2}× the C baseline (goal at most 1.3×: {}).",
                if ratio <= 1.3 { "met" } else { "**not met**" }
            )?;
        }
    }
    let storms: u64 = rows.iter().filter_map(|r| r.recoveries).sum();
    writeln!(md, "- No retry storm: {storms} recoveries in all mcd runs together (no loss was injected; a recovery here is a frame that came later than the learned retry timeout because its sender or receiver waited for a core).")?;
    writeln!(
        md,
        "\nThis machine has 2 cores, so every row here measures the scheduler as much as the network: a \
         barrier step waits until the partner process gets a core. Ratios between contenders measured in \
         the same run are what this table can show."
    )?;
    std::fs::write(out.join("load.md"), &md)?;
    std::fs::write(out.join("load.json"), serde_json::to_string_pretty(&rows)?)?;
    print!("{md}");
    Ok(())
}
