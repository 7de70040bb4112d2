//! Runs barriers between threads of this process on the in-process transport
//! and prints the time per barrier:
//! `cargo run --release --example mem_barrier -- [ALGORITHM] [N] [COUNT] [LOSS]`
//! (`RETRY_US` sets the retry timeout, default 1000).

use std::time::{Duration, Instant};

use barriers::mem::{self, Faults};
use barriers::threads::run_per_node;
use barriers::{Algorithm, BarrierConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let algorithm: Algorithm = args.get(1).map_or(Ok(Algorithm::Dissemination), |a| a.parse()).expect("algorithm");
    let n: usize = args.get(2).map_or(8, |a| a.parse().expect("N"));
    let count: usize = args.get(3).map_or(100, |a| a.parse().expect("COUNT"));
    let loss: f64 = args.get(4).map_or(0.0, |a| a.parse().expect("LOSS"));
    let retry = std::env::var("RETRY_US").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_micros(retry), Duration::from_secs(10));
    let results = run_per_node(mem::network(n, 1, Faults { loss, ..Faults::none() }), config, move |b| {
        let start = Instant::now();
        for _ in 0..count {
            b.wait()?;
        }
        Ok((start.elapsed(), b.stats()))
    });
    let results: Vec<_> = results.into_iter().collect::<Result<_, _>>().expect("barriers");
    let elapsed = results.iter().map(|(e, _)| *e).max().unwrap_or_default();
    println!("{algorithm} n={n}: {count} barriers, {:.1} µs each", elapsed.as_secs_f64() * 1e6 / count as f64);
    println!("node 0: {:?}", results[0].1);
}
