//! The plan simulator's speed at scale (`barriers::model`): one barrier of
//! each of four algorithms at 65,536 nodes, timed, with what it predicts:
//! `cargo run --release -p barriers --example model_scale [NODES]`.
//! (That it predicts right at this size is a test:
//! `model::tests::sixty_five_thousand_nodes_simulate_as_the_closed_forms_say`.)

use std::time::Instant;

use barriers::model::{simulate, LogP};
use barriers::{Algorithm, Fanout, Release};

fn main() {
    let n: usize = std::env::args().nth(1).map_or(65_536, |s| s.parse().expect("a node count"));
    let tree4 = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };
    let total = Instant::now();
    for a in [Algorithm::Dissemination, tree4, Algorithm::Concurrent, Algorithm::OnePhase] {
        let start = Instant::now();
        let p = simulate(a, n, 1, &LogP::PAPER);
        println!(
            "{a:>14} n={n}: {:.3} s; last exit {:.1} µs, {} messages, {} deliveries",
            start.elapsed().as_secs_f64(),
            p.last_exit,
            p.messages,
            p.deliveries
        );
    }
    println!("total {:.3} s", total.elapsed().as_secs_f64());
}
