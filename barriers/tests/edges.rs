//! The edges of a real program's life, on the in-process transport (no
//! root): compute gaps and imbalance longer than the failure timeout under
//! loss (on every config in virtual time on the simulator, and on one over
//! threads), split phase with a long overlap, a peer that stops for good,
//! the epoch crossing 2^32, a second instance on the same transport, and
//! restarted nodes. Every run that completes is checked with the
//! shared-clock safety check. A live peer behind a deadline, and a verdict
//! that must not outlive the silent peer's return, are protocol behaviour
//! that needs time to pass: they run in virtual time in
//! `src/core/net_tests.rs`.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use barriers::check::{run_barriers_with, Timeline};
use barriers::mem::{self, Faults};
use barriers::threads::run_per_node_unfinished;
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Fanout, Release};

/// Every algorithm, and the multi-rail variants.
fn configs() -> Vec<BarrierConfig> {
    let mut configs: Vec<BarrierConfig> = Algorithm::all().into_iter().map(BarrierConfig::new).collect();
    configs.push(BarrierConfig::new(Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast }).rails(2));
    configs.push(BarrierConfig::new(Algorithm::Concurrent).rails(2));
    configs
}

/// Odd and even sizes, alternating over the algorithms.
fn size(i: usize) -> usize {
    if i.is_multiple_of(2) {
        4
    } else {
        5
    }
}

fn lossy(seed: u64) -> Faults {
    Faults { loss: 0.2, duplicate: 0.05, max_delay: Duration::from_micros(200), seed }
}

/// Runs `f` for every config at once (each in its own thread), then joins.
fn for_every_config(f: impl Fn(usize, BarrierConfig) + Send + Sync + Copy + 'static) {
    let runs: Vec<JoinHandle<()>> = configs().into_iter().enumerate().map(|(i, c)| std::thread::spawn(move || f(i, c))).collect();
    let mut failures = Vec::new();
    for run in runs {
        if let Err(panic) = run.join() {
            failures.push(panic.downcast_ref::<String>().cloned().unwrap_or_else(|| "panic".into()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

include!("support/sim_run.rs");

fn sleep(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

#[test]
fn compute_gaps_and_imbalance_longer_than_the_failure_timeout_succeed_under_loss() {
    // In virtual time on the simulator: every node computes before every
    // call, 1.5 failure timeouts on average (exponential; one call in 16
    // twenty times longer), so nodes wait for peers that are alive but
    // slow, and their last messages may be lost meanwhile. Nobody may be
    // named silent; every checker passes.
    const FAILURE: Duration = Duration::from_millis(150);
    for (i, config) in configs().into_iter().enumerate() {
        let n = size(i);
        let config = config.timeouts(Duration::from_millis(1), FAILURE);
        let what = format!("{} rails={} n={n}", config.algorithm, config.rails);
        let run = simulate(config, n, 12, i as u64 + 1, (0.2, 0.05, Duration::from_micros(200)), FAILURE.as_nanos() as f64 * 1.5);
        let waited = run.ops[0].iter().flatten().filter_map(|r| Some(r.left? - r.entered?)).max().unwrap();
        assert!(waited > FAILURE.as_nanos() as u64, "{what}: some node waited longer than the failure timeout ({waited} ns)");
    }
}

#[test]
fn compute_gaps_longer_than_the_failure_timeout_over_threads() {
    // The same over threads, the blocking driver and its progress agent
    // (which answers while the application computes), on one config: every
    // node computes 1.5 failure timeouts between barriers (its last message
    // may be lost meanwhile), and one node per barrier another 1.5 before
    // entering.
    const FAILURE_MS: u64 = 150;
    let n = 4;
    let config = BarrierConfig::new(Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast })
        .rails(2)
        .timeouts(Duration::from_millis(1), Duration::from_millis(FAILURE_MS));
    let count = 4;
    let run = run_barriers_with(mem::network(n, 2, lossy(1)), config, count, move |me, k| {
        if k > 0 {
            sleep(FAILURE_MS * 3 / 2); // computing
        }
        if k % n == me {
            sleep(FAILURE_MS * 3 / 2); // computing longer
        }
    })
    .unwrap();
    run.verify(count).unwrap();
    let waited: Duration = run.timelines.iter().flat_map(|t| &t.barriers).map(|(i, o)| *o - *i).max().unwrap();
    assert!(waited > Duration::from_millis(FAILURE_MS), "some node waited longer than the failure timeout ({waited:?})");
}

#[test]
fn split_phase_with_an_overlap_longer_than_the_failure_timeout_completes() {
    for agent in [true, false] {
        for_every_config(move |i, config| {
            let n = size(i);
            let config = config.timeouts(Duration::from_millis(1), Duration::from_millis(100)).progress_agent(agent);
            let what = format!("{} n={n} agent={agent}", config.algorithm);
            let timelines = run_per_node_unfinished(mem::network(n, 2, Faults::none()), config, move |_, mut b| {
                let mut t = Timeline::default();
                for _ in 0..2 {
                    let entered = Instant::now();
                    b.enter()?;
                    sleep(300); // compute, 3 failure timeouts
                    b.wait()?;
                    t.record(entered, Instant::now());
                }
                b.finish()?;
                Ok::<_, BarrierError>(t)
            });
            let timelines: Vec<Timeline> =
                timelines.into_iter().enumerate().map(|(node, r)| r.unwrap_or_else(|e| panic!("{what}: node {node}: {e}"))).collect();
            let run = barriers::check::BarrierRun { timelines, stats: Vec::new() };
            run.verify(2).unwrap_or_else(|e| panic!("{what}: {e}"));
        });
    }
}

/// Whether `e` names `node` as the silent one.
fn names_silent(e: &BarrierError, node: usize) -> bool {
    match e {
        BarrierError::PeerSilent { silent, .. } => silent == &vec![node],
        BarrierError::PeerFailed { silent, .. } => *silent == node,
        _ => false,
    }
}

#[test]
fn a_peer_that_stops_for_good_is_named_by_every_other_node() {
    for_every_config(|i, config| {
        let n = size(i);
        let crashed = n - 2;
        let config = config.timeouts(Duration::from_millis(1), Duration::from_millis(300));
        let what = format!("{} rails={} n={n}", config.algorithm, config.rails);
        let outcomes = run_per_node_unfinished(mem::network(n, 2, lossy(i as u64 + 7)), config, move |me, mut b| {
            let rounds = if me == crashed { 5 } else { 10 };
            for _ in 0..rounds {
                if let Err(e) = b.wait() {
                    return Some((b.epoch(), e));
                }
            }
            None // the crashed node's process ends here: its barrier and agent are gone
        });
        for (node, outcome) in outcomes.into_iter().enumerate() {
            if node == crashed {
                assert!(outcome.is_none(), "{what}: the crashed node's own barriers succeed: {outcome:?}");
                continue;
            }
            // Barrier 5, which the crashed node never entered; or barrier 4, its
            // last, when its last message to this node was lost (it left
            // without finish(): its process is gone).
            match outcome {
                Some((4 | 5, e)) if names_silent(&e, crashed) => {}
                other => panic!("{what}: node {node} must fail barrier 5 naming node {crashed} silent, got {other:?}"),
            }
        }
    });
}

#[test]
fn the_epoch_crosses_two_to_the_32_under_loss() {
    for_every_config(|i, config| {
        let n = size(i);
        let first = u64::from(u32::MAX) - 3;
        let mut config = config.timeouts(Duration::from_millis(1), Duration::from_secs(5));
        config.first_epoch = first;
        let what = format!("{} rails={} n={n}", config.algorithm, config.rails);
        let count = 8;
        let run = run_barriers_with(mem::network(n, 2, lossy(i as u64 + 11)), config, count, |_, _| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
        run.verify(count).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(run.stats.iter().all(|s| s.completed == count as u64), "{what}: {:?}", run.stats);
    });
    // And the number itself goes on past 2^32.
    let first = u64::from(u32::MAX);
    let mut config = BarrierConfig::new(Algorithm::Dissemination);
    config.first_epoch = first;
    let epochs = run_per_node_unfinished(mem::network(2, 1, Faults::none()), config, |_, mut b| {
        for _ in 0..3 {
            b.wait().unwrap();
        }
        b.finish().unwrap();
        b.epoch()
    });
    assert_eq!(epochs, vec![first + 4, first + 4]);
}

#[test]
fn a_second_instance_on_the_same_transports_ignores_the_first() {
    // Heavy duplication and delays: frames of the first instance are still
    // arriving while the second one runs.
    let faults = Faults { loss: 0.1, duplicate: 0.5, max_delay: Duration::from_millis(2), seed: 5 };
    {
        for_every_config(move |i, config| {
            let n = size(i);
            let config = config.timeouts(Duration::from_micros(500), Duration::from_secs(5));
            let what = format!("{} n={n}", config.algorithm);
            let results = run_per_node_unfinished(mem::network(n, 2, Faults { seed: i as u64, ..faults }), config, move |_, mut first| {
                for _ in 0..30 {
                    first.wait().unwrap();
                }
                first.finish().unwrap();
                let old = first.instance();
                let transport = first.into_transport();
                let mut second = Barrier::new(transport, config).unwrap();
                assert_ne!(second.instance(), old, "a new instance");
                assert_eq!(second.epoch(), 0, "its barriers count from 0 again");
                let mut t = Timeline::default();
                for _ in 0..30 {
                    let entered = Instant::now();
                    second.wait().unwrap();
                    t.record(entered, Instant::now());
                }
                second.finish().unwrap();
                (t, second.stats())
            });
            let run = barriers::check::BarrierRun {
                timelines: results.iter().map(|(t, _)| t.clone()).collect(),
                stats: results.iter().map(|(_, s)| *s).collect(),
            };
            run.verify(30).unwrap_or_else(|e| panic!("{what}: {e}"));
        });
    }
}

#[test]
fn a_restarted_node_cannot_rejoin_and_the_others_name_it() {
    for restarted in [2, 0] {
        let n = 4;
        let mut config = BarrierConfig::new(Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast })
            .timeouts(Duration::from_millis(1), Duration::from_millis(400));
        config.join_timeout = Duration::from_millis(800);
        let outcomes = run_per_node_unfinished(mem::network(n, 1, Faults::none()), config, move |me, mut b| {
            for _ in 0..5 {
                b.wait().unwrap();
            }
            if me == restarted {
                // The process dies and a new one takes its place, on the same port.
                let transport = b.into_transport();
                return match Barrier::new(transport, config) {
                    Ok(mut again) => Err(format!("a restarted node {me} was admitted (barrier {})", again.wait().map_or(0, |_| 1))),
                    Err(e) => Ok(e),
                };
            }
            match b.wait() {
                Ok(()) => Err(format!("node {me} passed barrier 5 without node {restarted}")),
                Err(e) => Ok(e),
            }
        });
        for (node, outcome) in outcomes.into_iter().enumerate() {
            let e = outcome.unwrap_or_else(|e| panic!("{e}"));
            if node == restarted {
                let expected = if restarted == 0 { matches!(e, BarrierError::JoinTimeout { .. }) } else { matches!(e, BarrierError::Refused { .. }) };
                assert!(expected, "restarted node {node}: {e}");
            } else {
                assert!(names_silent(&e, restarted), "node {node} must name node {restarted}: {e}");
            }
        }
    }
}

// Found by review (adversarial tests), kept as regressions.

#[test]
fn calling_wait_again_after_an_error_completes_the_same_barrier() {
    // The progress agent may complete the barrier while the application
    // handles a deadline error; the next wait() must report that barrier,
    // not enter another.
    let n = 3;
    let slow = 2;
    let config = BarrierConfig::new(Algorithm::Dissemination)
        .timeouts(Duration::from_millis(1), Duration::from_secs(5))
        .deadline(Some(Duration::from_millis(100)));
    let timelines = run_per_node_unfinished(mem::network(n, 1, Faults::none()), config, move |me, mut b| {
        let mut t = Timeline::default();
        for k in 0..3 {
            if me == slow && k == 1 {
                sleep(150);
            }
            let entered = Instant::now();
            let before = b.epoch();
            loop {
                match b.wait() {
                    Ok(()) => break,
                    Err(BarrierError::Deadline { .. }) => sleep(100), // the application handles it meanwhile
                    Err(e) => panic!("node {me}: {e}"),
                }
            }
            assert_eq!(b.epoch(), before + 1, "node {me}: one wait() is one barrier");
            t.record(entered, Instant::now());
        }
        b.finish().unwrap();
        t
    });
    barriers::check::BarrierRun { timelines, stats: Vec::new() }.verify(3).unwrap();
}

#[test]
fn creating_a_barrier_and_finishing_it_at_once_survives_half_loss() {
    // Like mcd_init then mcd_finalize: the closing barrier is barrier 0, and a
    // node whose admission was lost must still be admitted.
    let n = 4;
    let faults = Faults { loss: 0.5, duplicate: 0.0, max_delay: Duration::ZERO, seed: 3 };
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_secs(2));
    config.join_timeout = Duration::from_secs(4);
    let results = run_per_node_unfinished(mem::network(n, 1, faults), config, |_, mut b| b.finish().map_err(|e| e.to_string()));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn a_descheduled_peer_causes_no_storm_of_nacks() {
    // Node 1 stops for 400 ms (a long deschedule, or SIGSTOP), with and
    // without its agent: node 0 waits, and its probes back off, tens of
    // them at most, not one per retry timeout.
    for agent in [true, false] {
        let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_secs(10)).progress_agent(agent);
        let stats = run_per_node_unfinished(mem::network(2, 1, Faults::none()), config, |me, mut b| {
            for _ in 0..50 {
                b.wait().unwrap();
            }
            let before = b.stats();
            if me == 1 {
                sleep(400);
            }
            b.wait().unwrap();
            let after = b.stats();
            b.finish().unwrap();
            (after.nacks_sent - before.nacks_sent, after.answers - before.answers)
        });
        let (nacks, _) = stats[0];
        assert!(nacks <= 30, "agent={agent}: {nacks} NACKs while the peer slept 400 ms");
        assert!(nacks >= 3, "agent={agent}: the peer was probed ({nacks} NACKs)");
    }
}

#[test]
fn nodes_with_different_algorithms_are_told_instead_of_hanging() {
    // Ranks that computed different Auto picks (say) would wait for each
    // other forever; creation says so at once.
    let net = mem::network(3, 1, Faults::none());
    let threads: Vec<_> = net
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            std::thread::spawn(move || {
                let algorithm = if me == 2 { Algorithm::OnePhase } else { Algorithm::Dissemination };
                let mut config = BarrierConfig::new(algorithm);
                config.join_timeout = Duration::from_secs(3);
                Barrier::new(t, config).map(|_| ())
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for node in [0, 2] {
        let e = results[node].as_ref().unwrap_err();
        assert!(matches!(e, BarrierError::ConfigMismatch { .. }), "node {node}: {e}");
    }
    assert!(results[1].is_err(), "node 1 is never admitted: {:?}", results[1]);
}

#[test]
fn nodes_may_close_their_barriers_in_any_order() {
    // Two barriers per node (two instances, as two communicators); after
    // some barriers on each, even nodes close and finish A then B, odd nodes
    // B then A. `close` enters the closing barrier without waiting and the
    // agent carries it on, so no node waits in one barrier's finish for a
    // node that waits in the other's (blocking finishes in these orders
    // would deadlock). The closing barrier keeps the promise too: no node
    // finishes before every node has closed.
    for_every_config(|i, config| {
        let n = size(i);
        let config = config.timeouts(Duration::from_micros(500), Duration::from_secs(5));
        let what = format!("{} rails={} n={n}", config.algorithm, config.rails);
        let nets = mem::network(n, 2, lossy(i as u64 + 40)).into_iter().zip(mem::network(n, 2, lossy(i as u64 + 80)));
        let threads: Vec<_> = nets
            .enumerate()
            .map(|(me, (ta, tb))| {
                std::thread::spawn(move || {
                    let mut a = Barrier::new(ta, config).unwrap_or_else(|e| panic!("node {me}: {e}"));
                    let mut b = Barrier::new(tb, config).unwrap_or_else(|e| panic!("node {me}: {e}"));
                    let (mut ta, mut tb) = (Timeline::default(), Timeline::default());
                    for _ in 0..10 {
                        for (x, t) in [(&mut a, &mut ta), (&mut b, &mut tb)] {
                            let entered = Instant::now();
                            x.wait().unwrap();
                            t.record(entered, Instant::now());
                        }
                    }
                    let mut order = [(a, ta), (b, tb)];
                    if me % 2 == 1 {
                        order.reverse();
                    }
                    let mut closed = Vec::new();
                    for (x, _) in &mut order {
                        closed.push(Instant::now());
                        x.close().unwrap();
                        // A node away computing: the agents carry the closings on.
                        sleep(2);
                    }
                    for ((x, t), entered) in order.iter_mut().zip(closed) {
                        x.finish().unwrap();
                        t.record(entered, Instant::now());
                    }
                    if me % 2 == 1 {
                        order.reverse();
                    }
                    let [(_, ta), (_, tb)] = order;
                    (ta, tb)
                })
            })
            .collect();
        let (ta, tb): (Vec<Timeline>, Vec<Timeline>) = threads.into_iter().map(|t| t.join().unwrap()).unzip();
        for (name, timelines) in [("A", ta), ("B", tb)] {
            let (violations, checked) = barriers::check::check(&timelines);
            assert!(violations.is_empty(), "{what}: barrier {name}: {violations:?}");
            assert_eq!(checked, 11, "{what}: barrier {name}: 10 barriers and the closing one");
        }
    });
}
