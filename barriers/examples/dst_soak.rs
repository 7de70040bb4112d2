//! A seed budget of the deterministic simulator with its checkers (safety,
//! agreement, liveness, verdicts), in release, for protocol work:
//! `cargo run --release -p barriers --example dst_soak -- FAULTS FIRST COUNT [NODES]`
//! (faults as `mcd-bench dst` takes them, e.g. `loss,burst,dup,mix`; NODES
//! fixes the node count, as the soak's `DST_NODES=8` does). Prints each
//! failing seed's kinds of violation, progress every 10,000 seeds, and a
//! summary; with `DST_TRACE=K`
//! (events kept per node), each failing seed's whole explanation.

use barriers::sim::{explain, run_seed, FaultMix, Options};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let faults = args.get(1).map_or("loss,burst,dup,mix", String::as_str);
    let first: u64 = args.get(2).map_or(0, |s| s.parse().expect("a seed"));
    let count: u64 = args.get(3).map_or(200, |s| s.parse().expect("a count"));
    let nodes: Option<usize> = args.get(4).map(|s| s.parse().expect("a node count"));
    let trace: usize = std::env::var("DST_TRACE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let o = Options { nodes, faults: FaultMix::parse(faults).expect("faults"), trace, ..Options::default() };
    let (mut failing, mut barriers) = (Vec::new(), 0u64);
    for seed in first..first + count {
        let (run, v) = run_seed(seed, &o);
        barriers += run.stats.barriers / run.config.nodes as u64;
        if !v.is_empty() {
            println!("seed {seed}: {} violation(s): {:?}", v.len(), v.first());
            if trace > 0 {
                println!("{}", explain(&run, &v, &o));
            }
            failing.push(seed);
        }
        if (seed + 1 - first).is_multiple_of(10_000) {
            println!("progress: seeds {first}..{}: {} failing; {barriers} barriers", seed + 1, failing.len());
        }
    }
    println!("faults {faults}: seeds {first}..{}: {} failing {failing:?}; {barriers} barriers", first + count, failing.len());
}
