//! Every barrier algorithm on the in-process transport (threads; no root
//! needed), with the safety checker: on a perfect network for every n, and
//! under 20% loss with duplication and reordering.

use std::time::Duration;

use barriers::mem::{self, Faults};
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Release};
use mcd_integration_tests::{assert_safe, run_barriers};

const SIZES: [usize; 8] = [1, 2, 3, 5, 8, 13, 16, 32];

fn configs() -> Vec<BarrierConfig> {
    let mut configs: Vec<BarrierConfig> = Algorithm::all().into_iter().map(BarrierConfig::new).collect();
    // Multi-NIC variants: tree (the paper's ternary tree with 2 networks) and concurrent.
    configs.push(BarrierConfig::new(Algorithm::Tree { k: 3, release: Release::Multicast }).rails(2));
    configs.push(BarrierConfig::new(Algorithm::Concurrent).rails(2));
    configs.push(BarrierConfig::new(Algorithm::Dissemination).rails(2));
    configs
}

#[test]
fn every_algorithm_is_safe_at_every_size() {
    for config in configs() {
        for n in SIZES {
            let count = 60;
            let run = run_barriers(mem::network(n, 2, Faults::none()), config, count).unwrap();
            assert_safe(&run, count, &format!("{} rails={} n={n}", config.algorithm, config.rails));
            assert!(run.stats.iter().all(|s| s.completed == count as u64));
        }
    }
}

#[test]
fn every_algorithm_survives_loss_duplication_and_reordering() {
    let faults = Faults { loss: 0.20, duplicate: 0.10, max_delay: Duration::from_micros(300), seed: 7 };
    let mut barriers_run = 0;
    for config in configs() {
        let config = config.timeouts(Duration::from_micros(300), Duration::from_secs(20));
        for n in [2, 5, 13, 32] {
            let count = if n == 32 { 60 } else { 150 };
            let net = mem::network(n, 2, Faults { seed: n as u64, ..faults });
            let probe_lost = net[0].lost();
            let run = run_barriers(net, config, count).unwrap_or_else(|e| panic!("{} n={n}: {e}", config.algorithm));
            assert_safe(&run, count, &format!("lossy {} rails={} n={n}", config.algorithm, config.rails));
            let resends: u64 = run.stats.iter().map(|s| s.resends + s.answers).sum();
            assert!(n == 1 || resends > 0, "{} n={n}: 20% loss but nothing was re-sent", config.algorithm);
            let _ = probe_lost;
            barriers_run += count;
        }
    }
    assert!(barriers_run > 5000, "thousands of barriers under loss ({barriers_run})");
}

#[test]
fn late_and_duplicate_messages_never_count_towards_the_next_barrier() {
    // Heavy duplication and long delays: many messages of barrier k arrive
    // during k+1, and many of k+1 arrive while a node is still in k.
    let faults = Faults { loss: 0.0, duplicate: 0.5, max_delay: Duration::from_millis(2), seed: 3 };
    for algorithm in Algorithm::all() {
        let run = run_barriers(mem::network(8, 1, faults), BarrierConfig::new(algorithm), 100).unwrap();
        assert_safe(&run, 100, &format!("delayed {algorithm}"));
        let early: u64 = run.stats.iter().map(|s| s.early).sum();
        let dups: u64 = run.stats.iter().map(|s| s.duplicates + s.stale).sum();
        assert!(dups > 0, "{algorithm}: duplicates were injected");
        let _ = early;
    }
}

#[test]
fn a_crashed_node_is_named_in_the_others_timeout_error() {
    for algorithm in [Algorithm::Dissemination, Algorithm::Tree { k: 2, release: Release::Multicast }, Algorithm::Concurrent] {
        let n = 5;
        let crashed = 3;
        let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(600));
        let threads: Vec<_> = mem::network(n, 1, Faults::none())
            .into_iter()
            .map(|t| {
                std::thread::spawn(move || {
                    let me = barriers::Transport::node(&t);
                    let mut b = Barrier::new(t, config).unwrap();
                    let rounds = if me == crashed { 10 } else { 20 };
                    for _ in 0..rounds {
                        if let Err(e) = b.wait() {
                            return Some((b.epoch(), e));
                        }
                    }
                    None // node 3 "crashes" here: it stops taking part
                })
            })
            .collect();
        for (node, t) in threads.into_iter().enumerate() {
            let outcome = t.join().unwrap();
            if node == crashed {
                assert!(outcome.is_none());
                continue;
            }
            match outcome {
                Some((10, BarrierError::Timeout { epoch: 10, missing, .. })) => {
                    assert_eq!(missing, vec![crashed], "{algorithm}: node {node} must name node {crashed}")
                }
                other => panic!("{algorithm}: node {node} expected a timeout at barrier 10, got {other:?}"),
            }
        }
    }
}

#[test]
fn split_phase_enter_then_test_completes_only_when_all_entered() {
    let n = 4;
    let mut nets = mem::network(n, 1, Faults::none());
    let late = nets.pop().unwrap();
    let late_node = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let mut b = Barrier::new(late, BarrierConfig::new(Algorithm::Dissemination)).unwrap();
        b.wait().unwrap();
        b.linger(Duration::from_millis(50)).unwrap();
    });
    let early: Vec<_> = nets
        .into_iter()
        .map(|t| {
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, BarrierConfig::new(Algorithm::Dissemination)).unwrap();
                b.enter().unwrap();
                assert!(b.in_progress());
                assert!(matches!(b.enter(), Err(BarrierError::Usage(_))), "entering twice is refused");
                let start = std::time::Instant::now();
                let mut polls = 0u64;
                while !b.test().unwrap() {
                    polls += 1; // "compute" while the barrier is in flight
                    std::thread::sleep(Duration::from_micros(200));
                }
                assert!(start.elapsed() >= Duration::from_millis(80), "completed before the late node entered");
                assert!(polls > 10);
                assert_eq!(b.epoch(), 1);
                b.linger(Duration::from_millis(50)).unwrap();
            })
        })
        .collect();
    for t in early {
        t.join().unwrap();
    }
    late_node.join().unwrap();
}

#[test]
fn bad_configurations_are_refused() {
    let t = mem::network(2, 1, Faults::none()).pop().unwrap();
    let err = Barrier::new(t, BarrierConfig::new(Algorithm::Concurrent).rails(2)).unwrap_err().to_string();
    assert!(err.contains("2 rail(s)") && err.contains("has 1"), "{err}");
    let t = mem::network(2, 1, Faults::none()).pop().unwrap();
    let err = Barrier::new(t, BarrierConfig::new(Algorithm::Tree { k: 1, release: Release::Tree })).unwrap_err().to_string();
    assert!(err.contains("k ≥ 2"), "{err}");
}
