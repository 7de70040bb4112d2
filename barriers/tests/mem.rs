//! Every barrier algorithm on the in-process transport (threads; no root
//! needed), with the safety checker: on a perfect network for every n, and
//! under 20% loss with duplication and reordering (at 2 to 32 nodes in
//! virtual time on the simulator; at 5 over threads).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use barriers::check::{run_barriers, BarrierRun};
use barriers::mem::{self, Faults};
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Fanout, Release};

fn assert_safe(run: &BarrierRun, count: usize, what: &str) {
    if let Err(e) = run.verify(count) {
        panic!("{what}: {e}");
    }
}

include!("support/sim_run.rs");

const SIZES: [usize; 8] = [1, 2, 3, 5, 8, 13, 16, 32];

fn configs() -> Vec<BarrierConfig> {
    let mut configs: Vec<BarrierConfig> = Algorithm::all().into_iter().map(BarrierConfig::new).collect();
    // Multi-NIC variants: tree (the paper's ternary tree with 2 networks) and concurrent.
    configs.push(BarrierConfig::new(Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast }).rails(2));
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
    // In virtual time on the simulator (the protocol's behaviour); the
    // same over threads and the blocking driver, smaller, is below.
    let mut barriers_run = 0;
    for config in configs() {
        let config = config.timeouts(Duration::from_micros(300), Duration::from_millis(200));
        for n in [2, 5, 13, 32] {
            let count = if n == 32 { 60 } else { 150 };
            let what = format!("lossy {} rails={} n={n}", config.algorithm, config.rails);
            let run = simulate(config, n, count, n as u64, (0.2, 0.1, Duration::from_micros(300)), 20_000.0);
            assert!(run.stats.dropped > 0, "{what}: 20% loss, and nothing was lost");
            assert_eq!(run.stats.barriers, (n * count) as u64, "{what}: every node completed every barrier");
            barriers_run += count;
        }
    }
    assert!(barriers_run > 5000, "thousands of barriers under loss ({barriers_run})");
}

#[test]
fn every_algorithm_survives_loss_duplication_and_reordering_over_threads() {
    // The blocking driver and its progress agent over real threads: retry
    // timers, duplicates and late copies through the in-process transport.
    let faults = Faults { loss: 0.20, duplicate: 0.10, max_delay: Duration::from_micros(300), seed: 7 };
    for config in configs() {
        let config = config.timeouts(Duration::from_micros(300), Duration::from_secs(20));
        let (n, count) = (5, 60);
        let net = mem::network(n, 2, Faults { seed: n as u64, ..faults });
        let counters = net[0].counters();
        let run = run_barriers(net, config, count).unwrap_or_else(|e| panic!("{} n={n}: {e}", config.algorithm));
        assert_safe(&run, count, &format!("lossy {} rails={} n={n}", config.algorithm, config.rails));
        let resends: u64 = run.stats.iter().map(|s| s.answers).sum();
        assert!(resends > 0, "{} n={n}: 20% loss but nothing was re-sent", config.algorithm);
        assert!(counters.lost() > 0 && counters.duplicated() > 0, "{} n={n}: faults were injected", config.algorithm);
    }
}

#[test]
fn late_and_duplicate_messages_never_count_towards_the_next_barrier() {
    // Heavy duplication and long delays: many messages of barrier k arrive
    // during k+1, and many of k+1 arrive while a node is still in k.
    let faults = Faults { loss: 0.0, duplicate: 0.5, max_delay: Duration::from_millis(2), seed: 3 };
    let mut early_total = 0;
    for algorithm in Algorithm::all() {
        let run = run_barriers(mem::network(8, 1, faults), BarrierConfig::new(algorithm), 100).unwrap();
        assert_safe(&run, 100, &format!("delayed {algorithm}"));
        early_total += run.stats.iter().map(|s| s.early).sum::<u64>();
        let dups: u64 = run.stats.iter().map(|s| s.duplicates + s.stale).sum();
        assert!(dups > 0, "{algorithm}: duplicates were injected");
    }
    assert!(early_total > 0, "with 2 ms delays some messages of k+1 arrive during k");
}

#[test]
fn split_phase_enter_then_test_completes_only_when_all_entered() {
    const POLLS: u64 = 10;
    let n = 4;
    let mut nets = mem::network(n, 1, Faults::none());
    let late = nets.pop().unwrap();
    // The early nodes count themselves here once they have polled POLLS times
    // without completing; only then does the late node enter.
    let polled = Arc::new(AtomicUsize::new(0));
    let late_node = {
        let polled = Arc::clone(&polled);
        std::thread::spawn(move || {
            let mut b = Barrier::new(late, BarrierConfig::new(Algorithm::Dissemination)).unwrap();
            while polled.load(Ordering::Acquire) < n - 1 {
                std::thread::yield_now();
            }
            let entered = std::time::Instant::now();
            b.wait().unwrap();
            b.finish().unwrap();
            entered
        })
    };
    let early: Vec<_> = nets
        .into_iter()
        .map(|t| {
            let polled = Arc::clone(&polled);
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, BarrierConfig::new(Algorithm::Dissemination)).unwrap();
                b.enter().unwrap();
                assert!(b.in_progress());
                assert!(matches!(b.enter(), Err(BarrierError::Misuse(_))), "entering twice is refused");
                let mut polls = 0u64;
                while !b.test().unwrap() {
                    polls += 1; // "compute" while the barrier is in flight
                    if polls == POLLS {
                        polled.fetch_add(1, Ordering::Release);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                let left = std::time::Instant::now();
                assert!(polls >= POLLS, "the barrier completed before the late node entered");
                assert_eq!(b.epoch(), 1);
                b.finish().unwrap();
                left
            })
        })
        .collect();
    let left: Vec<_> = early.into_iter().map(|t| t.join().unwrap()).collect();
    let entered = late_node.join().unwrap();
    assert!(left.iter().all(|&l| l >= entered), "a node completed before the late node entered");
}

#[test]
fn bad_configurations_are_refused() {
    let t = mem::network(2, 1, Faults::none()).pop().unwrap();
    let err = Barrier::new(t, BarrierConfig::new(Algorithm::Concurrent).rails(2)).unwrap_err();
    assert!(matches!(&err, BarrierError::Config(m) if m.contains("2 rail(s)") && m.contains("has 1")), "{err}");
    assert_eq!(Fanout::new(1), None, "a tree of fan-in 1 cannot be made");
    assert!("tree1".parse::<Algorithm>().unwrap_err().contains("k ≥ 2"));
    let t = mem::network(2, 1, Faults::none()).pop().unwrap();
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(5), Duration::from_millis(5));
    let err = Barrier::new(t, config).unwrap_err();
    assert!(matches!(&err, BarrierError::Config(m) if m.contains("retry timeout < failure timeout")), "{err}");
}

#[test]
fn a_send_rule_sees_every_message_first_and_decides_its_fate() {
    use barriers::{Msg, MsgKind, Transport};
    // Tag 1 to node 1: lost; tag 2: delivered twice, the copy 20 ms later;
    // anything else: the network's faults (none).
    let seen = Arc::new(AtomicUsize::new(0));
    let watch = seen.clone();
    let rule: mem::SendRule = Arc::new(move |p: &mem::Posted<'_>, random: &mut dyn FnMut() -> f64| {
        watch.fetch_add(1, Ordering::Relaxed);
        assert!((0.0..1.0).contains(&random()));
        match (p.to, p.msg.tag, p.data) {
            (1, 1, _) => mem::Fate::Drop,
            (_, 2, [9]) => mem::Fate::Deliver(vec![Duration::ZERO, Duration::from_millis(20)]),
            _ => mem::Fate::Faults,
        }
    });
    let mut nodes = mem::network_with_rule(2, 1, Faults::none(), rule);
    let msg = |tag| Msg { kind: MsgKind::Data, instance: 1, epoch: 0, tag, arg: 0 };
    nodes[0].send(0, 1, msg(1)).unwrap();
    nodes[0].send_data(0, 1, msg(2), &[9]).unwrap();
    nodes[0].send(0, 1, msg(3)).unwrap();
    let mut got = Vec::new();
    while let Some(m) = nodes[1].recv(Duration::from_millis(200)).unwrap() {
        got.push((m.msg.tag, nodes[1].data().to_vec()));
    }
    assert_eq!(got, vec![(2, vec![9]), (3, vec![]), (2, vec![9])]);
    assert_eq!((seen.load(Ordering::Relaxed), nodes[0].lost(), nodes[0].duplicated()), (3, 1, 0));
}
