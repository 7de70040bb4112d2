//! The engine alone, for a profiler: a 2-node shuffle barrier on node 1
//! over an in-memory mirror of node 0 that answers at once
//! ([`barriers::mem::Mirror`], as `mcd-bench hotpath`'s "engine alone"
//! row), no progress agent, no network:
//! `cargo run --release -p barriers --example engine_alone -- [COUNT] [ROUNDS]`
//! prints ns per barrier, one line per round of COUNT barriers (`MAX_DATA`
//! sets what the mirror says a message carries, default 0 as in the
//! bench: with data, the core also builds the broadcast plans). Under
//! callgrind, the difference between two counts over their difference in
//! COUNT is the instructions per barrier:
//! `valgrind --tool=callgrind target/release/examples/engine_alone 100000 1`.

use std::time::Instant;

use barriers::mem::Mirror;
use barriers::{Algorithm, Barrier, BarrierConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: usize = args.get(1).map_or(1_000_000, |a| a.parse().expect("COUNT"));
    let rounds: usize = args.get(2).map_or(5, |a| a.parse().expect("ROUNDS"));
    let max_data = std::env::var("MAX_DATA").ok().map_or(0, |v| v.parse().expect("MAX_DATA"));
    let config = BarrierConfig::new(Algorithm::ShuffleExchange).progress_agent(false);
    let mut barrier = Barrier::new(Mirror::new(max_data), config).expect("join");
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..count {
            barrier.wait().expect("barrier");
        }
        println!("{:.1} ns per barrier", start.elapsed().as_nanos() as f64 / count as f64);
    }
}
