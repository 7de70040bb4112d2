//! A seed budget of the deterministic simulator with its checkers (safety,
//! agreement, liveness, verdicts), in release, for protocol work:
//! `cargo run --release -p barriers --example dst_soak -- FAULTS FIRST COUNT`
//! (faults as `mcd-bench dst` takes them, e.g. `loss,burst,dup,mix`).
//! Prints each failing seed's kinds of violation and a summary.

use barriers::sim::{run_seed, FaultMix, Options};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let faults = args.get(1).map_or("loss,burst,dup,mix", String::as_str);
    let first: u64 = args.get(2).map_or(0, |s| s.parse().expect("a seed"));
    let count: u64 = args.get(3).map_or(200, |s| s.parse().expect("a count"));
    let o = Options { faults: FaultMix::parse(faults).expect("faults"), trace: 0, ..Options::default() };
    let (mut failing, mut barriers) = (Vec::new(), 0u64);
    for seed in first..first + count {
        let (run, v) = run_seed(seed, &o);
        barriers += run.stats.barriers / run.config.nodes as u64;
        if !v.is_empty() {
            println!("seed {seed}: {} violation(s): {:?}", v.len(), v.first());
            failing.push(seed);
        }
    }
    println!("faults {faults}: seeds {first}..{}: {} failing {failing:?}; {barriers} barriers", first + count, failing.len());
}
