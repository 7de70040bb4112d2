//! A seed budget of the deterministic simulator with its checkers (safety,
//! agreement, liveness, verdicts), in release, for protocol work:
//! `cargo run --release -p barriers --example dst_soak -- FAULTS FIRST COUNT [NODES]`
//! (faults as `mcd-bench dst` takes them, e.g. `loss,burst,dup,mix`; NODES
//! fixes the node count, as the soak's `DST_NODES=8` does; else 2 to 12 per
//! seed). Prints each failing seed's kinds of violation, progress every
//! 10,000 seeds, a summary, and the rate per CPU second of this process (the
//! rate on one core, whatever else runs); with `DST_TRACE=K` (events kept per
//! node), each failing seed's whole explanation.

use std::time::Instant;

use barriers::sim::{explain, run_seed, FaultMix, Options};

/// This process's CPU time (user + system), seconds, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some(close) = stat.rfind(')') else { return 0.0 };
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) as f64 / 100.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let faults = args.get(1).map_or("loss,burst,dup,mix", String::as_str);
    let first: u64 = args.get(2).map_or(0, |s| s.parse().expect("a seed"));
    let count: u64 = args.get(3).map_or(200, |s| s.parse().expect("a count"));
    let nodes: Option<usize> = args.get(4).map(|s| s.parse().expect("a node count"));
    // DST_SHOW=1: every seed's explanation (with DST_TRACE), failing or not.
    let show = std::env::var_os("DST_SHOW").is_some();
    let trace: usize = std::env::var("DST_TRACE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let o = Options { nodes, faults: FaultMix::parse(faults).expect("faults"), trace, ..Options::default() };
    let (cpu0, wall) = (cpu_seconds(), Instant::now());
    // DST_DIGEST=1: a digest of every seed's outcome (counters, errors,
    // every call's record, violations), to show that a change to the
    // simulator replays each seed exactly as before; and the same without
    // the event counter (the simulator's own bookkeeping: a change to how it
    // counts events leaves the protocol's outcome, this one, as it was).
    // DST_DIGEST=each: also each seed's digest without the event counter.
    let each = std::env::var("DST_DIGEST").is_ok_and(|v| v == "each");
    let mut digest = std::env::var_os("DST_DIGEST").map(|_| (0xcbf2_9ce4_8422_2325u64, 0xcbf2_9ce4_8422_2325u64));
    let fold = |d: &mut u64, text: String| {
        for b in text.bytes() {
            *d = (*d ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    };
    let (mut failing, mut barriers, mut events) = (Vec::new(), 0u64, 0u64);
    for seed in first..first + count {
        let (run, v) = run_seed(seed, &o);
        barriers += run.stats.barriers / run.config.nodes as u64;
        events += run.stats.events;
        if let Some((d, outcome)) = digest.as_mut() {
            fold(d, format!("{:?}{:?}{:?}{v:?}", run.stats, run.errors, run.ops));
            let stats = barriers::sim::RunStats { events: 0, ..run.stats };
            let text = format!("{stats:?}{:?}{:?}{:?}{:?}{v:?}", run.errors, run.ops, run.finishes, run.joins);
            if each {
                let mut one = 0xcbf2_9ce4_8422_2325u64;
                fold(&mut one, text.clone());
                println!("seed {seed}: {one:016x} {} barriers, {} errors", run.stats.barriers / run.config.nodes as u64, run.errors.len());
            }
            fold(outcome, text);
        }
        if !v.is_empty() || show {
            println!("seed {seed}: {} violation(s): {:?}", v.len(), v.first());
            if trace > 0 {
                println!("{}", explain(&run, &v, &o));
            }
            if !v.is_empty() {
                failing.push(seed);
            }
        }
        if (seed + 1 - first).is_multiple_of(10_000) {
            println!("progress: seeds {first}..{}: {} failing; {barriers} barriers", seed + 1, failing.len());
        }
    }
    let (cpu, wall) = (cpu_seconds() - cpu0, wall.elapsed().as_secs_f64());
    println!("faults {faults}: seeds {first}..{}: {} failing {failing:?}; {barriers} barriers, {events} events", first + count, failing.len());
    if let Some((d, outcome)) = digest {
        println!("digest {d:016x}; without the event counter {outcome:016x}");
    }
    println!(
        "CPU {cpu:.2} s, wall {wall:.2} s: {:.3} M barriers per CPU minute ({:.3} M per wall minute)",
        barriers as f64 / cpu.max(0.01) * 60.0 / 1e6,
        barriers as f64 / wall * 60.0 / 1e6
    );
}
