//! `mcd-bench dst`: the deterministic simulator's soak. Seeds run without a
//! trace (fastest); a failing seed runs again with one (a seed replays
//! exactly) and is printed with the command that reruns it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use barriers::sim::{self, FaultMix, Options};
use barriers::Algorithm;

/// The soak's arguments.
#[derive(clap::Args, Debug)]
pub struct DstArgs {
    /// Seeds to run, from `--first`.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Run only this seed, and print its trace whatever the outcome.
    #[arg(long)]
    seed: Option<u64>,
    /// The node count (default: 2 to --max-nodes, drawn per seed).
    #[arg(long)]
    nodes: Option<usize>,
    /// The most nodes a seed draws.
    #[arg(long, default_value_t = 12)]
    max_nodes: usize,
    /// The algorithm (default: drawn per seed).
    #[arg(long)]
    algorithm: Option<Algorithm>,
    /// Faults: `mix` (a random subset per seed), `none`, or a list of
    /// loss, burst, dup, reorder, partition, pause, crash, skew, mismatch,
    /// b2b (ending in `,mix`: a subset of the list per seed).
    #[arg(long, default_value = "mix")]
    faults: String,
    /// Instances per seed, `A-B`.
    #[arg(long, default_value = "1-3")]
    instances: String,
    /// The most operations per instance.
    #[arg(long)]
    ops: Option<usize>,
    /// Threads (each runs its share of the seeds; 1 measures one core).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Stop at the first failing seed.
    #[arg(long)]
    fail_fast: bool,
    /// Events per node in a failing seed's trace.
    #[arg(long, default_value_t = 60)]
    trace: usize,
}

struct Done {
    seed: u64,
    barriers: u64,
    calls: u64,
    messages: u64,
    failed: Option<usize>,
}

fn options(a: &DstArgs) -> Result<Options> {
    let (lo, hi) = match a.instances.split_once('-') {
        Some((lo, hi)) => (lo.parse()?, hi.parse()?),
        None => {
            let n: usize = a.instances.parse()?;
            (n, n)
        }
    };
    let mut o = Options {
        nodes: a.nodes,
        max_nodes: a.max_nodes,
        algorithm: a.algorithm,
        faults: FaultMix::parse(&a.faults).map_err(anyhow::Error::msg)?,
        instances: (lo, hi),
        trace: 0,
        ..Options::default()
    };
    if let Some(ops) = a.ops {
        o.workload.max_ops = ops;
        o.workload.min_ops = o.workload.min_ops.min(ops);
    }
    if a.nodes.is_some_and(|n| n < 2) {
        bail!("--nodes: at least 2");
    }
    Ok(o)
}

/// Runs the soak.
pub fn run(a: &DstArgs) -> Result<()> {
    let o = options(a)?;
    if let Some(seed) = a.seed {
        let traced = Options { trace: a.trace, ..o.clone() };
        let (run, violations) = sim::run_seed(seed, &traced);
        println!("{}", sim::explain(&run, &violations, &traced));
        println!("{:?}", run.stats);
        if !violations.is_empty() {
            bail!("seed {seed}: {} violation(s)", violations.len());
        }
        return Ok(());
    }
    println!("dst: seeds {}..{} faults {} ({} thread(s))", a.first, a.first + a.seeds, o.faults, a.jobs);
    let (tx, rx) = mpsc::channel::<Done>();
    let start = Instant::now();
    let jobs = a.jobs.max(1) as u64;
    let mut handles = Vec::new();
    for j in 0..jobs {
        let (tx, o) = (tx.clone(), o.clone());
        let (first, count) = (a.first, a.seeds);
        handles.push(std::thread::spawn(move || {
            let mut seed = first + j;
            while seed < first + count {
                let (run, v) = sim::run_seed(seed, &o);
                let n = run.config.nodes as u64;
                let done = Done {
                    seed,
                    barriers: run.stats.barriers / n,
                    calls: run.stats.ops / n,
                    messages: run.stats.messages,
                    failed: (!v.is_empty()).then_some(v.len()),
                };
                if tx.send(done).is_err() {
                    return;
                }
                seed += jobs;
            }
        }));
    }
    drop(tx);
    let (mut seeds, mut barriers, mut calls, mut messages) = (0u64, 0u64, 0u64, 0u64);
    let mut failing = Vec::new();
    let mut last = Instant::now();
    for d in rx {
        seeds += 1;
        barriers += d.barriers;
        calls += d.calls;
        messages += d.messages;
        if let Some(k) = d.failed {
            println!("FAIL seed {}: {k} violation(s); rerun: {}", d.seed, o.rerun(d.seed));
            failing.push(d.seed);
            if a.fail_fast {
                break;
            }
        }
        if last.elapsed() >= Duration::from_secs(2) {
            last = Instant::now();
            let s = start.elapsed().as_secs_f64();
            println!(
                "{seeds}/{} seeds, {barriers} barriers ({calls} calls, {messages} messages), {:.0} barriers/s, {} failing",
                a.seeds,
                barriers as f64 / s,
                failing.len()
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "done: {seeds} seeds, {barriers} simulated barriers and reductions ({calls} collective calls, {messages} messages) in {secs:.1} s: {:.0} barriers/s ({:.0}/min), {} failing seed(s)",
        barriers as f64 / secs,
        barriers as f64 / secs * 60.0,
        failing.len()
    );
    if let Some(&seed) = failing.first() {
        let traced = Options { trace: a.trace, ..o.clone() };
        let (run, violations) = sim::run_seed(seed, &traced);
        println!("{}", sim::explain(&run, &violations, &traced));
        bail!("{} failing seed(s): {failing:?}", failing.len());
    }
    Ok(())
}
