//! Review rev32 (session 16): the progress agent's wake-up at nonblocking
//! starts (`Shared::app_call`, `AT_ONCE`) as a program uses it
//! (`notes/review-rev32.md`). The in-process transport, real threads.

use std::sync::{Arc, Barrier as Rendezvous};
use std::time::{Duration, Instant};

use barriers::mem::{self, Faults};
use barriers::threads::run_per_node;
use barriers::{Algorithm, BarrierConfig, Collective, Dtype, Op};

fn u32s(xs: &[u32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// MPI's progress idiom: start a nonblocking collective, test it once at
/// once (to push it along), compute, then wait. The test comes within
/// 200 µs of the start, so the start is judged "waited at once" and the
/// next start leaves the agent asleep; the test takes the judgement, so the
/// wait after the computation never turns the wake-up back on. From the
/// second round on, node 0's collective makes no progress while it
/// computes until the agent's grace runs out (1 ms at first, up to 16 ms):
/// its peers need node 0's later stages (shuffle exchange, 4 nodes).
/// (Measured at load 15: the peers' mean wait per round 134-885 µs, woken
/// 242-392 µs: the grace is short enough that the cost did not show.)
#[test]
fn a_start_tested_once_at_once_then_left_to_compute_still_wakes_the_agent() {
    let n = 4;
    let rounds = 20u32;
    let (node0_started, peers_done) = (Arc::new(Rendezvous::new(n)), Arc::new(Rendezvous::new(n)));
    let config = BarrierConfig::new(Algorithm::ShuffleExchange).timeouts(Duration::from_micros(500), Duration::from_secs(10));
    let results = run_per_node(mem::network(n, 1, Faults::none()), config, move |b| {
        let me = b.node();
        let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
        let mut out = vec![0u8; 4];
        let before = b.stats().agent_hurried;
        let mut peers_waited = Duration::ZERO;
        for round in 0..rounds {
            if me == 0 {
                let mut r = b.start(sum, &u32s(&[round]))?;
                let _ = r.test(Some(&mut out))?; // MPI_Test at once: not yet
                node0_started.wait();
                peers_done.wait(); // "computing" until the peers are done
                r.wait(Some(&mut out))?;
            } else {
                node0_started.wait();
                let t = Instant::now();
                let mut r = b.start(sum, &u32s(&[round]))?;
                r.wait(Some(&mut out))?;
                peers_waited += t.elapsed();
                peers_done.wait();
            }
        }
        Ok((b.stats().agent_hurried - before, peers_waited / rounds))
    });
    let results: Vec<(u64, Duration)> = results.into_iter().map(|r| r.unwrap()).collect();
    let (hurried, _) = results[0];
    eprintln!("node 0's starts that woke its agent: {hurried} of {rounds}; the peers' mean wait per round: {:?}", results[1].1);
    assert!(
        hurried >= u64::from(rounds) / 2,
        "node 0's agent woken at {hurried} of {rounds} starts left to compute (peers waited {:?} a round)",
        results[1].1
    );
}
