//! Runs barriers between threads of this process on the in-process transport
//! and prints the time per barrier: `cargo run --example mem_barrier -- ALGO N COUNT [LOSS]`.

use std::time::{Duration, Instant};

use barriers::mem::{self, Faults};
use barriers::{Algorithm, Barrier, BarrierConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let algorithm: Algorithm = args.get(1).map_or(Ok(Algorithm::Dissemination), |a| a.parse()).expect("algorithm");
    let n: usize = args.get(2).map_or(8, |a| a.parse().expect("N"));
    let count: usize = args.get(3).map_or(100, |a| a.parse().expect("COUNT"));
    let loss: f64 = args.get(4).map_or(0.0, |a| a.parse().expect("LOSS"));
    let faults = Faults { loss, ..Faults::none() };
    let start = Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = mem::network(n, 1, faults)
        .into_iter()
        .map(|t| {
            let done = done.clone();
            std::thread::spawn(move || {
                let retry = std::env::var("RETRY_US").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
                let config = BarrierConfig::new(algorithm).timeouts(Duration::from_micros(retry), Duration::from_secs(10));
                let mut b = Barrier::new(t, config).expect("barrier");
                for _ in 0..count {
                    b.wait().expect("barrier");
                }
                let elapsed = start.elapsed();
                // Keep answering stragglers (a lost release, say) until every node is done.
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                while done.load(std::sync::atomic::Ordering::SeqCst) < n {
                    b.linger(Duration::from_millis(1)).expect("linger");
                }
                (elapsed, b.stats())
            })
        })
        .collect();
    let stats: Vec<_> = threads.into_iter().map(|t| t.join().expect("thread")).collect();
    let elapsed = stats.iter().map(|(e, _)| *e).max().unwrap_or_default();
    println!("{algorithm} n={n}: {count} barriers, {:.1} µs each", elapsed.as_secs_f64() * 1e6 / count as f64);
    println!("node 0: {:?}", stats[0].1);
}
