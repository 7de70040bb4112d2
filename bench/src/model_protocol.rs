//! `mcd-bench model --protocol`: predictions that include recovery, from
//! the LogP simulator that runs the real protocol core, a core per node
//! (`barriers::model::protocol`): mean and p99 barrier time against loss
//! at each size, on the 10 GbE preset and the paper's Fast Ethernet; and
//! issue 29's simulator goals measured. No root, no network.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use barriers::model::protocol::{self, Loss, Outcome, Scenario};
use barriers::model::{self, Host, Link, LogP, Setup, Topology};
use barriers::{Algorithm, Fanout, Release};

const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

/// The most ranks a flat barrier runs on the real protocol in the
/// hierarchy's comparison (beyond: the plan simulator; this machine's time).
const FLAT_REAL_MAX: usize = 512;
/// The most nodes the sweep runs on Fast Ethernet (beyond: 10 GbE only;
/// this machine's time: at 128 nodes and 20% loss one row ran over 6
/// minutes of wall time, every NACK costing o_r = 9.5 µs).
const FAST_ETHERNET_MAX: usize = 64;

/// The options.
pub struct Args {
    /// Node counts of the sweep.
    pub nodes: Vec<usize>,
    /// Loss rates of the sweep, percent.
    pub loss: Vec<f64>,
    /// Node counts of the goals.
    pub goal_nodes: Vec<usize>,
    /// Scales the barriers per run.
    pub scale: f64,
}

/// One run's row.
#[derive(serde::Serialize, Clone)]
struct Row {
    setup: String,
    algorithm: String,
    auto_pick: bool,
    nodes: usize,
    loss: String,
    loss_percent: f64,
    barriers: usize,
    mean_us: f64,
    median_us: f64,
    p99_us: f64,
    p999_us: f64,
    ratio_to_lossless: f64,
    /// Lossless rows: the plan simulator's mean for the same algorithm and size, µs.
    plan_sim_us: Option<f64>,
    recoveries: u64,
    nacks: u64,
    answers: u64,
    copies: u64,
    lost: u64,
    deliveries: u64,
    wall_ms_per_barrier: f64,
}

fn setups() -> Vec<(&'static str, Setup)> {
    vec![
        ("10 GbE", Setup::preset(&LogP::REFERENCE, Link::GBE_10)),
        ("Fast Ethernet (paper)", Setup::paper(Topology::Switch).with_host(Host::DEDICATED)),
    ]
}

/// Barriers per run at `n` nodes (at least 200, fewer as n grows).
fn barriers_for(n: usize, scale: f64, at_least: usize) -> u32 {
    let b = (400_000.0 / n as f64 * scale) as usize;
    b.clamp(at_least.min(2000), 2000) as u32
}

#[allow(clippy::too_many_arguments)] // one row of the sweep: each argument is a column of it
fn one(setup_name: &str, setup: Setup, a: Algorithm, auto: bool, n: usize, loss: Loss, barriers: u32, lossless_mean: f64) -> Result<(Row, Outcome)> {
    let mut s = Scenario::new(a, n, setup, barriers);
    s.loss = loss;
    s.seed = n as u64 * 1_000_003 + (loss.average() * 1e6) as u64;
    let t = Instant::now();
    let out = protocol::run(&s).map_err(anyhow::Error::msg)?;
    let wall = t.elapsed().as_secs_f64() * 1e3 / f64::from(barriers);
    let (loss_name, pct) = match loss {
        Loss::Independent(p) => (format!("{}%", p * 100.0), p * 100.0),
        Loss::Bursty { average, mean_burst } => (format!("bursty {}% (burst {mean_burst})", average * 100.0), average * 100.0),
    };
    let mean = out.mean();
    let row = Row {
        setup: setup_name.into(),
        algorithm: a.to_string(),
        auto_pick: auto,
        nodes: n,
        loss: loss_name,
        loss_percent: pct,
        barriers: out.times_us.len(),
        mean_us: mean,
        median_us: out.quantile(0.5),
        p99_us: out.quantile(0.99),
        p999_us: out.quantile(0.999),
        ratio_to_lossless: if lossless_mean > 0.0 { mean / lossless_mean } else { 1.0 },
        plan_sim_us: (loss.average() == 0.0).then(|| model::steady_state(a, n, 1, &setup, barriers, 0.0).last_exit),
        recoveries: out.recoveries(),
        nacks: out.stats.nacks_sent,
        answers: out.stats.answers,
        copies: out.stats.copies,
        lost: out.lost,
        deliveries: out.deliveries,
        wall_ms_per_barrier: wall,
    };
    eprintln!(
        "  {setup_name} {a} n={n} {}: mean {:.1} µs p99 {:.1} µs ({:.2}x) recoveries {} [{:.2} ms/barrier]",
        row.loss, row.mean_us, row.p99_us, row.ratio_to_lossless, row.recoveries, wall
    );
    Ok((row, out))
}

/// Runs the sweep and the goals; writes results/model_protocol.{md,json} and plots.
pub fn run(out: &Path, args: &Args) -> Result<()> {
    let started = Instant::now();
    let mut rows: Vec<Row> = Vec::new();
    // 1. The sweep.
    for (name, setup) in setups() {
        for &n in &args.nodes {
            if name.starts_with("Fast") && n > FAST_ETHERNET_MAX {
                continue;
            }
            let auto = model::auto_with(n, 1, &setup, true).0;
            let mut algos = vec![auto];
            // (From 512 nodes on, Auto's pick and tree4 only: this machine's time.)
            let others: &[Algorithm] = if n >= 512 { &[TREE4] } else { &[TREE4, Algorithm::Dissemination, Algorithm::ShuffleExchange] };
            for &a in others {
                if !algos.contains(&a) {
                    algos.push(a);
                }
            }
            for a in algos {
                let barriers = barriers_for(n, args.scale, 100);
                let mut lossless = 0.0;
                for &pct in &args.loss {
                    let (row, _) = one(name, setup, a, a == auto, n, Loss::Independent(pct / 100.0), barriers, lossless)?;
                    if pct == 0.0 {
                        lossless = row.mean_us;
                    }
                    rows.push(row);
                }
            }
        }
    }
    // 2. Issue 29's goals: 10 GbE, Auto's pick and tree4.
    let (gname, gsetup) = setups()[0];
    let mut goals: Vec<Row> = Vec::new();
    let mut unfinished: Vec<String> = Vec::new();
    for &n in &args.goal_nodes {
        let auto = model::auto_with(n, 1, &gsetup, true).0;
        let mut algos = vec![auto];
        if auto != TREE4 {
            algos.push(TREE4);
        }
        for a in algos {
            let barriers = barriers_for(n, args.scale * 4.0, 200);
            let (clean, _) = one(gname, gsetup, a, a == auto, n, Loss::NONE, barriers, 0.0)?;
            let base = clean.mean_us;
            goals.push(clean);
            for loss in [Loss::Independent(0.01), Loss::Independent(0.2), Loss::Independent(0.5), Loss::Bursty { average: 0.05, mean_burst: 4.0 }] {
                let b = if loss.average() >= 0.5 { barriers.min(if n >= 512 { 100 } else { 300 }) } else { barriers };
                match one(gname, gsetup, a, a == auto, n, loss, b, base) {
                    Ok((row, _)) => goals.push(row),
                    // (At 50% loss a run may not end within the simulator's horizon.)
                    Err(e) if loss.average() >= 0.5 => {
                        eprintln!("  {e}");
                        unfinished.push(format!("n={n} {a} at {}% loss: {e}", loss.average() * 100.0));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    // 3. The hierarchical barrier: leaders on the real core, host phases in shared memory.
    let shm = model::ShmCosts::REFERENCE;
    let mut hier: Vec<serde_json::Value> = Vec::new();
    let mut hier_md = String::new();
    for pct in [0.0] {
        for hosts in [4usize, 16] {
            let mut first3 = None;
            for per_host in [1usize, 2, 4, 8, 16, 32, 64] {
                let ranks = hosts * per_host;
                let loss = Loss::Independent(pct / 100.0);
                let flat_a = model::auto_with(ranks, 1, &gsetup, true).0;
                let barriers = barriers_for(ranks, args.scale, 50);
                let mut fs = Scenario::new(flat_a, ranks, gsetup, barriers).loss(loss);
                fs.seed = ranks as u64 * 31 + pct as u64;
                // Beyond FLAT_REAL_MAX ranks the flat side is the plan
                // simulator's (lossless, they agree: a test).
                let (flat_mean, flat_p99, flat_by) = if ranks <= FLAT_REAL_MAX {
                    let flat = protocol::run(&fs).map_err(anyhow::Error::msg)?;
                    (flat.mean(), flat.quantile(0.99), "real protocol")
                } else {
                    let p = model::steady_state(flat_a, ranks, 1, &gsetup, barriers, 0.0).last_exit;
                    (p, p, "plan simulator")
                };
                let outer = model::auto_with(hosts, 1, &gsetup, true).0;
                let mut hs = Scenario::new(outer, hosts, gsetup, barriers).loss(loss);
                hs.seed = fs.seed + 7;
                hs.host_phases_us = model::hierarchy::host_phases_us(per_host, &shm);
                let h = protocol::run(&hs).map_err(anyhow::Error::msg)?;
                let speedup = flat_mean / h.mean();
                if speedup >= 3.0 && first3.is_none() {
                    first3 = Some(per_host);
                }
                eprintln!("  hierarchy {pct}% {hosts}x{per_host}: flat {flat_a} {flat_mean:.1} µs ({flat_by}), hierarchical {outer} {:.1} µs: {speedup:.2}x", h.mean());
                writeln!(hier_md, "| {pct}% | {hosts} × {per_host} | {flat_a} ({flat_by}) | {flat_mean:.1} | {flat_p99:.1} | {outer} | {:.1} | {:.1} | {speedup:.2}× |", h.mean(), h.quantile(0.99))?;
                hier.push(serde_json::json!({ "loss_percent": pct, "hosts": hosts, "per_host": per_host, "flat_algorithm": flat_a.to_string(),
                    "flat_by": flat_by, "flat_mean_us": flat_mean, "flat_p99_us": flat_p99, "outer": outer.to_string(),
                    "hierarchical_mean_us": h.mean(), "hierarchical_p99_us": h.quantile(0.99), "speedup": speedup }));
            }
            writeln!(
                hier_md,
                "| | {hosts} hosts: first ≥ 3× at {} ranks per host | | | | | | | |",
                first3.map_or("none up to 64".to_string(), |r| r.to_string())
            )?;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();

    // 3. Plots: per setup, Auto's pick's mean (solid) and p99 (dashed) against nodes, a line per loss rate.
    let mut panels = Vec::new();
    for (name, _) in setups() {
        let mut series = Vec::new();
        for &pct in &args.loss {
            let pick: Vec<&Row> = rows.iter().filter(|r| r.setup == name && r.auto_pick && r.loss_percent == pct).collect();
            let key = format!("loss {pct}%");
            series.push(mcd_bench::plot::Series {
                label: format!("{pct}% loss, mean"),
                points: pick.iter().map(|r| (r.nodes as f64, r.mean_us)).collect(),
                dashed: false,
                key: key.clone(),
            });
            series.push(mcd_bench::plot::Series {
                label: format!("{pct}% loss, p99"),
                points: pick.iter().map(|r| (r.nodes as f64, r.p99_us)).collect(),
                dashed: true,
                key,
            });
        }
        panels.push(mcd_bench::plot::Panel { title: format!("{name}, Auto's pick"), series });
    }
    mcd_bench::plot::nodes_vs_time(&out.join("model-protocol"), "The real protocol under loss (LogP simulator, a core per node)", &panels)?;

    // 4. The report.
    let mut md = String::new();
    writeln!(md, "# The model running the real protocol: barrier time under loss\n")?;
    let list = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
    let losses = args.loss.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
    writeln!(
        md,
        "Computed {} on {} by `nice -n 10 cargo run --release -p mcd-bench -- model --protocol --sizes {} --loss {losses} --goal-nodes {} --scale {}` in {elapsed:.0} s. \
         Seeds: a run at n nodes and loss p (a fraction) uses seed n·1,000,003 + ⌊p·10⁶⌋ (the hierarchy's: ranks·31, +7 for the leaders), so every row replays.\n",
        crate::today(),
        crate::machine(),
        list(&args.nodes),
        list(&args.goal_nodes),
        args.scale
    )?;
    writeln!(md, "**Every figure here is from the simulator** (`barriers::model::protocol`): one `barriers::core::Core` per node, each on a CPU of its own, over a simulated network, in virtual time; nothing was measured on this machine.\n")?;
    writeln!(
        md,
        "How: every node runs its barriers back to back (no work between) through the real protocol core (`Call::Wait`), \
         with its real timers (first retry 250 µs, then learned per step of the plan, at least 20 µs; failure timeout 10 s: the defaults). \
         Costs as the plan simulator charges them: o_s and o_r on the node's CPU in turn, g per NIC, the frame's time on \
         the sender's link and on the switch's output port, L, and a receive gap g_r per NIC; the engine's own time per \
         message is charged 0 (the plan simulator charges none either). Loss is applied per delivered message (each \
         receiver of a multicast draws its own), at the receiver's ingress: independent, or Gilbert–Elliott in time per \
         receiving link (a bad state that loses every frame, lasting 4 frame times of the link on average, the link bad 5% \
         of the time: 5% of frames lost on average). A barrier's time is the \
         largest over nodes of (leave − enter); mean, median, p99 and p99.9 are over the measured barriers (the first 10% \
         are warm-up); the ratio is the mean against the same algorithm's lossless mean. Recoveries = NACKs + answers + \
         copies, summed over nodes. *Wall* is this machine's time per simulated barrier (one thread).\n"
    )?;
    writeln!(
        md,
        "Setups: **10 GbE** = `Setup::preset(LogP::REFERENCE, Link::GBE_10)` (o_s 2.7, o_r 0.1, g 2.7 µs, L 2 µs, a switch); \
         **Fast Ethernet (paper)** = `Setup::paper(Switch)` with the paper's LogP (o_s 3, o_r 9.5, g 9, L 17.5 µs) on 100 Mb/s, \
         but without the paper's host costs (interrupt coalescing, the 6 µs send-completion interrupt), which this simulator \
         does not charge yet, so its lossless figures are below the paper's.\n"
    )?;
    writeln!(md, "## Goals of issue 29 (10 GbE, the real protocol)\n")?;
    writeln!(md, "| n | algorithm | loss | barriers | mean µs | median µs | p99 µs | p99.9 µs | mean / lossless | goal | met | recoveries |")?;
    writeln!(md, "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|")?;
    let mut unmet = Vec::new();
    for r in &goals {
        let lossless_median =
            goals.iter().find(|c| c.nodes == r.nodes && c.algorithm == r.algorithm && c.loss_percent == 0.0).map_or(0.0, |c| c.median_us);
        let (goal, met) = match r.loss.as_str() {
            "0%" => ("0 recoveries".to_string(), r.recoveries == 0),
            "1%" => (
                format!("mean ≤ 1.1×, p99.9 ≤ 3× lossless median ({:.1})", 3.0 * lossless_median),
                r.ratio_to_lossless <= 1.1 && r.p999_us <= 3.0 * lossless_median,
            ),
            "20%" => ("≤ 3×".to_string(), r.ratio_to_lossless <= 3.0),
            "50%" => ("≤ 10×".to_string(), r.ratio_to_lossless <= 10.0),
            _ => ("≤ 2×".to_string(), r.ratio_to_lossless <= 2.0),
        };
        if !met {
            unmet.push(format!("n={} {} {}: mean {:.2}× (p99.9 {:.1} µs)", r.nodes, r.algorithm, r.loss, r.ratio_to_lossless, r.p999_us));
        }
        writeln!(
            md,
            "| {} | {}{} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}× | {goal} | {} | {} |",
            r.nodes,
            r.algorithm,
            if r.auto_pick { " (Auto)" } else { "" },
            r.loss,
            r.barriers,
            r.mean_us,
            r.median_us,
            r.p99_us,
            r.p999_us,
            r.ratio_to_lossless,
            if met { "yes" } else { "**no**" },
            r.recoveries
        )?;
    }
    for u in &unfinished {
        writeln!(md, "\n**Did not finish** (counts as unmet): {u}.")?;
    }
    writeln!(md, "\n{} of {} goal rows unmet.\n", unmet.len(), goals.len())?;
    writeln!(md, "## Mean and p99 against loss, per size\n")?;
    for (name, _) in setups() {
        writeln!(md, "### {name}\n")?;
        if name.starts_with("Fast") {
            writeln!(md, "(Up to {FAST_ETHERNET_MAX} nodes: this machine's time.)\n")?;
        }
        writeln!(md, "| n | algorithm | loss | mean µs | p99 µs | mean / lossless | plan simulator µs (lossless) | recoveries | lost / delivered | wall ms per barrier |")?;
        writeln!(md, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        for r in rows.iter().filter(|r| r.setup == name) {
            writeln!(
                md,
                "| {} | {}{} | {} | {:.1} | {:.1} | {:.2}× | {} | {} | {}/{} | {:.3} |",
                r.nodes,
                r.algorithm,
                if r.auto_pick { " (Auto)" } else { "" },
                r.loss,
                r.mean_us,
                r.p99_us,
                r.ratio_to_lossless,
                r.plan_sim_us.map_or(String::new(), |p| format!("{p:.1} ({:+.1}%)", (r.mean_us / p - 1.0) * 100.0)),
                r.recoveries,
                r.lost,
                r.deliveries,
                r.wall_ms_per_barrier
            )?;
        }
        writeln!(md)?;
    }
    writeln!(md, "## The hierarchical barrier, leaders on the real core (10 GbE)\n")?;
    writeln!(md, "Each host's leader runs the real protocol core among the hosts (Auto's pick for the host count); the host's phases are in shared memory, a core per rank, polling, as `model::hierarchy` counts them (`host_phases_us`: gather = one transfer + the leader's scan of the other ranks, release = one transfer; `ShmCosts::REFERENCE`); they suffer no loss. Flat = every rank on the wire through the real core (Auto's pick for the rank count), a core and a NIC per rank. Speedup = flat mean / hierarchical mean.\n")?;
    writeln!(md, "| loss | hosts × ranks | flat algorithm | flat mean µs | flat p99 µs | leaders' algorithm | hierarchical mean µs | hierarchical p99 µs | speedup |")?;
    writeln!(md, "|---|---|---|---:|---:|---|---:|---:|---:|")?;
    md.push_str(&hier_md);
    writeln!(md)?;
    writeln!(md, "Plot: [model-protocol.svg](model-protocol.svg) / [model-protocol.png](model-protocol.png): Auto's pick, mean (solid) and p99 (dashed) against nodes, one colour per loss rate, per setup.")?;
    std::fs::write(out.join("model_protocol.md"), &md)?;
    let json = serde_json::json!({ "sweep": rows, "goals": goals, "hierarchy": hier, "unfinished": unfinished, "unmet": unmet, "seconds": elapsed });
    std::fs::write(out.join("model_protocol.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    Ok(())
}
