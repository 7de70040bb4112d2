//! The release-first broadcast (issue 16) at its edges, on the in-process
//! transport (no root): calls that do not match (every node must get an
//! error, never wrong data and never a hang), the last broadcast before
//! finish, the epoch crossing 2^32, one and two nodes, and long mixed
//! sequences under heavy loss, duplication and reordering on every
//! algorithm. Barriers among them are checked with the shared-clock safety
//! check. A root much slower than the others and a non-root computing while
//! the root waits for its entry are protocol behaviour that needs time to
//! pass: they run in virtual time (`src/core/net_tests/bcast.rs`).

use std::time::{Duration, Instant};

use barriers::check::{check, Timeline};
use barriers::mem::{self, Faults, MemTransport};
use barriers::threads::run_per_node_unfinished;
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Fanout, Op, Release};

/// What a node calls in a mismatch case.
#[derive(Clone, Copy, Debug)]
enum Call {
    Bcast { root: usize, count: usize },
    Allreduce,
    Reduce { root: usize },
    Barrier,
}

fn run_call(b: &mut Barrier<MemTransport>, call: Call) -> Result<Vec<u32>, BarrierError> {
    match call {
        Call::Bcast { root, count } => {
            let mut data: Vec<u32> = if b.node() == root { (0..count as u32).map(|i| 100 + i).collect() } else { vec![0; count] };
            b.bcast(&mut data, root)?;
            Ok(data)
        }
        Call::Allreduce => {
            let mut data = [b.node() as u32 + 1];
            b.allreduce(&mut data, Op::Sum)?;
            Ok(data.to_vec())
        }
        Call::Reduce { root } => {
            let mut data = [b.node() as u32 + 1];
            b.reduce(&mut data, Op::Sum, root)?;
            Ok(data.to_vec())
        }
        Call::Barrier => b.wait().map(|()| Vec::new()),
    }
}

/// Nodes that call different collectives in the same epoch each get a
/// "collective mismatch" error (not a result, not a deadline: the calls
/// are all made, so nothing is missing but agreement). A deadline bounds
/// the run so that a hang shows as a deadline error. Only a non-root that
/// made the very call its root made may instead have the root's data (a
/// broadcast releases first: it cannot know yet that a third node differs).
fn assert_mismatch_is_an_error(algorithm: Algorithm, calls: &'static [Call]) {
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(10)).deadline(Some(Duration::from_secs(2)));
    // Each node stays (its progress agent answering) until every node has
    // its outcome, as a process would that reports the error and goes on.
    let all_done = std::sync::Arc::new(std::sync::Barrier::new(calls.len()));
    let threads: Vec<_> = mem::network(calls.len(), 1, Faults::none())
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            let all_done = all_done.clone();
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, config).unwrap_or_else(|e| panic!("node {me}: {e}"));
                let first = run_call(&mut b, calls[me]);
                // A root's broadcast returns before it can know: its next
                // call must fail instead (never a result of its own).
                let outcome = match first {
                    Ok(data) if matches!(calls[me], Call::Bcast { root, .. } if root == me) => run_call(&mut b, calls[me]).map(|_| data),
                    other => other,
                };
                all_done.wait();
                outcome
            })
        })
        .collect();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (me, outcome) in outcomes.iter().enumerate() {
        let as_root = |c: &Call| matches!((c, calls[me]), (Call::Bcast { root, count }, Call::Bcast { root: r, count: k }) if *root == r && *count == k && r != me);
        let roots_data =
            |d: &Vec<u32>| matches!(calls[me], Call::Bcast { count, .. } if *d == (0..count as u32).map(|i| 100 + i).collect::<Vec<_>>());
        match outcome {
            Err(BarrierError::CollectiveMismatch { .. }) => {}
            Ok(data)
                if calls.iter().enumerate().any(|(r, c)| matches!(calls[me], Call::Bcast { root, .. } if root == r) && as_root(c))
                    && roots_data(data) => {}
            other => panic!("{algorithm} {calls:?}: node {me} must get a collective mismatch error, got {other:?}"),
        }
    }
}

#[test]
fn a_broadcast_against_a_barrier_or_reduction_is_an_error_on_every_node_not_a_hang() {
    let concurrent = Algorithm::Concurrent;
    let cases: [(Algorithm, &'static [Call]); 8] = [
        // The root sends its data at once: the others see it.
        (concurrent, &[Call::Bcast { root: 0, count: 2 }, Call::Barrier]),
        (concurrent, &[Call::Bcast { root: 0, count: 2 }, Call::Allreduce]),
        (concurrent, &[Call::Bcast { root: 0, count: 2 }, Call::Bcast { root: 1, count: 2 }]),
        // A non-root waits for the root's data, which never comes: the root
        // runs a barrier or a reduction and waits for the non-root's arrival.
        (concurrent, &[Call::Allreduce, Call::Bcast { root: 0, count: 2 }]),
        (concurrent, &[Call::Barrier, Call::Bcast { root: 0, count: 2 }]),
        (concurrent, &[Call::Reduce { root: 0 }, Call::Bcast { root: 0, count: 2 }]),
        (Algorithm::Dissemination, &[Call::Barrier, Call::Bcast { root: 0, count: 2 }]),
        // Node 2 alone takes node 1 for the root: node 1 has node 0's data,
        // and node 0 waits for node 2's entry.
        (concurrent, &[Call::Bcast { root: 0, count: 2 }, Call::Bcast { root: 0, count: 2 }, Call::Bcast { root: 1, count: 2 }]),
    ];
    let runs: Vec<_> = cases.into_iter().map(|(a, calls)| std::thread::spawn(move || assert_mismatch_is_an_error(a, calls))).collect();
    let failures: Vec<String> =
        runs.into_iter().filter_map(|r| r.join().err()).map(|p| p.downcast_ref::<String>().cloned().unwrap_or_else(|| "panic".into())).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_broadcast_of_another_length_is_an_error_on_every_node() {
    assert_mismatch_is_an_error(Algorithm::Concurrent, &[Call::Bcast { root: 0, count: 3 }, Call::Bcast { root: 0, count: 2 }]);
    assert_mismatch_is_an_error(
        Algorithm::Concurrent,
        &[Call::Bcast { root: 1, count: 3 }, Call::Bcast { root: 1, count: 2 }, Call::Bcast { root: 1, count: 2 }],
    );
}

/// Every algorithm (dissemination too: a broadcast has its own plan), and
/// two rails.
fn configs() -> Vec<BarrierConfig> {
    let mut configs: Vec<BarrierConfig> = Algorithm::all().into_iter().map(BarrierConfig::new).collect();
    configs.push(BarrierConfig::new(Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast }).rails(2));
    configs.push(BarrierConfig::new(Algorithm::Concurrent).rails(2));
    configs
}

/// The payload of the broadcast of round `k` from `root`.
fn payload(root: usize, k: usize) -> Vec<u64> {
    (0..4).map(|i| ((root as u64) << 32) | ((k as u64) << 8) | i).collect()
}

/// A pseudo-random sequence shared by every node (the same seed).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `rounds` calls, chosen by a sequence every node shares: broadcasts
/// from changing roots (often the same root twice in a row), barriers (the
/// shared-clock check), allreduces and reduces to changing roots, and
/// split-phase barriers entered right after a broadcast. Every result is
/// checked on every node.
fn mixed_sequence(b: &mut Barrier<MemTransport>, seed: u64, rounds: usize) -> Result<Timeline, BarrierError> {
    let (me, n) = (b.node(), b.nodes());
    // Dissemination does not reduce: its reductions become barriers.
    let reduces = b.config().algorithm != Algorithm::Dissemination;
    let mut state = seed | 1;
    let mut timeline = Timeline::default();
    for k in 0..rounds {
        let what = next(&mut state);
        let root = (next(&mut state) % n as u64) as usize;
        match what % 8 {
            5 | 6 if !reduces => {
                let entered = Instant::now();
                b.wait()?;
                timeline.record(entered, Instant::now());
            }
            0..=3 => {
                let mut data = if me == root { payload(root, k) } else { vec![u64::MAX; 4] };
                b.bcast(&mut data, root)?;
                assert_eq!(data, payload(root, k), "round {k}: bcast from {root} at node {me}");
            }
            4 => {
                let entered = Instant::now();
                b.wait()?;
                timeline.record(entered, Instant::now());
            }
            5 => {
                let mut x = [me as u64 + 1 + k as u64];
                b.allreduce(&mut x, Op::Sum)?;
                assert_eq!(x[0], (n * (n + 1) / 2 + n * k) as u64, "round {k}: allreduce at node {me}");
            }
            6 => {
                let mut x = [me as i32 - k as i32];
                b.reduce(&mut x, Op::Max, root)?;
                let want = if me == root { n as i32 - 1 - k as i32 } else { me as i32 - k as i32 };
                assert_eq!(x[0], want, "round {k}: reduce to {root} at node {me}");
            }
            _ => {
                // A broadcast, then a split-phase barrier entered at once
                // (queued behind the broadcast's end), completed by test().
                let mut data = if me == root { payload(root, k) } else { vec![u64::MAX; 4] };
                b.bcast(&mut data, root)?;
                assert_eq!(data, payload(root, k), "round {k}: bcast from {root} at node {me}");
                let entered = Instant::now();
                b.enter()?;
                while !b.test()? {
                    std::thread::yield_now();
                }
                timeline.record(entered, Instant::now());
            }
        }
    }
    Ok(timeline)
}

/// Runs the mixed sequence on `n` nodes of `config` under `faults`; checks
/// barrier safety; returns the number of answers (recoveries).
fn run_mixed(config: BarrierConfig, n: usize, faults: Faults, rounds: usize) -> u64 {
    let what = format!("{} rails={} n={n} {faults:?}", config.algorithm, config.rails);
    let seed = faults.seed;
    let results = run_per_node_unfinished(mem::network(n, config.rails, faults), config, move |_, mut b| {
        let timeline = mixed_sequence(&mut b, seed, rounds)?;
        b.finish()?;
        Ok::<_, BarrierError>((timeline, b.stats()))
    });
    let results: Vec<_> = results.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|e| panic!("{what}: node {i}: {e}"))).collect();
    let timelines: Vec<Timeline> = results.iter().map(|(t, _)| t.clone()).collect();
    let (violations, checked) = check(&timelines);
    assert!(violations.is_empty(), "{what}: {violations:?}");
    assert_eq!(checked, timelines[0].barriers.len(), "{what}");
    results.iter().map(|(_, s)| s.answers).sum()
}

#[test]
fn mixed_broadcasts_from_changing_roots_survive_heavy_loss_duplication_and_reordering_on_every_algorithm() {
    let runs: Vec<_> = configs()
        .into_iter()
        .enumerate()
        .map(|(i, config)| {
            std::thread::spawn(move || {
                let config = config.timeouts(Duration::from_micros(500), Duration::from_secs(10));
                let n = [2, 3, 4, 5, 7][i % 5];
                let loss = [0.2, 0.3, 0.4][i % 3];
                let faults = Faults { loss, duplicate: 0.3, max_delay: Duration::from_micros(300), seed: 1000 + i as u64 };
                run_mixed(config, n, faults, 60)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for run in runs {
        match run.join() {
            Ok(answers) => assert!(answers > 0, "heavy loss and nothing answered?"),
            Err(panic) => failures.push(panic.downcast_ref::<String>().cloned().unwrap_or_else(|| "panic".into())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_last_broadcast_before_finish_completes_everywhere_under_loss() {
    // Many short lives: each ends with a broadcast then finish (or close
    // then try_finish), so the broadcast's entry or end is often
    // lost right before the closing barrier.
    let runs: Vec<_> = (0..12u64)
        .map(|seed| {
            std::thread::spawn(move || {
                let n = 2 + (seed % 3) as usize;
                let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_micros(500), Duration::from_secs(10));
                let faults = Faults { loss: 0.4, duplicate: 0.2, max_delay: Duration::from_micros(200), seed: 500 + seed };
                let results = run_per_node_unfinished(mem::network(n, 1, faults), config, move |me, mut b| {
                    let root = (seed as usize + 1) % n;
                    let mut data = if me == root { payload(root, 7) } else { vec![0; 4] };
                    b.bcast(&mut data, root)?;
                    assert_eq!(data, payload(root, 7));
                    if seed % 2 == 0 {
                        b.finish()?;
                    } else {
                        b.close()?;
                        while !b.try_finish()? {
                            std::thread::yield_now();
                        }
                    }
                    Ok::<_, BarrierError>(b.epoch())
                });
                let epochs: Vec<u64> =
                    results.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|e| panic!("seed {seed}: node {i}: {e}"))).collect();
                // The broadcast and the closing barrier, on every node.
                assert!(epochs.iter().all(|&e| e == 2), "seed {seed}: {epochs:?}");
            })
        })
        .collect();
    for run in runs {
        run.join().expect("a run failed");
    }
}

#[test]
fn broadcasts_across_the_wire_numbers_wrap_from_changing_roots() {
    for (i, config) in configs().into_iter().enumerate() {
        let n = [2, 3, 4][i % 3];
        let mut config = config.timeouts(Duration::from_micros(500), Duration::from_secs(10));
        config.first_epoch = u64::from(u32::MAX) - 5;
        let faults = Faults { loss: 0.3, duplicate: 0.3, max_delay: Duration::from_micros(200), seed: 90 + i as u64 };
        let answers = run_mixed(config, n, faults, 24);
        assert!(answers > 0, "{}", config.algorithm);
    }
}

#[test]
fn one_node_broadcasts_to_itself_and_foreign_roots_and_empty_data_are_clear() {
    let results = run_per_node_unfinished(mem::network(1, 1, Faults::none()), BarrierConfig::new(Algorithm::Concurrent), |_, mut b| {
        let mut data = payload(0, 1);
        b.bcast(&mut data, 0).unwrap();
        assert_eq!(data, payload(0, 1));
        assert_eq!(b.epoch(), 1);
        let err = b.bcast(&mut data, 1).unwrap_err();
        assert!(matches!(&err, BarrierError::Misuse(m) if m.contains("not one of the 1")), "{err}");
        b.wait().unwrap();
        b.finish().unwrap();
        b.epoch()
    });
    assert_eq!(results, vec![3]);
    // Zero elements: every node calls with none, so nothing goes wrong.
    let results = run_per_node_unfinished(mem::network(2, 1, Faults::none()), BarrierConfig::new(Algorithm::Concurrent), |me, mut b| {
        let mut none: [u32; 0] = [];
        b.bcast(&mut none, 1)?;
        let mut data = if me == 1 { payload(1, 2) } else { vec![0; 4] };
        b.bcast(&mut data, 1)?;
        assert_eq!(data, payload(1, 2));
        b.finish()?;
        Ok::<_, BarrierError>(b.epoch())
    });
    let epochs: Vec<u64> = results.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(epochs, vec![3, 3], "two broadcasts and the closing barrier");
}

#[test]
fn a_split_phase_barrier_against_a_broadcast_fails_its_test_not_loops_for_ever() {
    // Node 0 enters a barrier and polls test(); node 1 calls a broadcast
    // from node 0 in that epoch. test() must fail with the mismatch, as
    // wait() does, rather than say "not yet" for ever.
    let config =
        BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_secs(10)).deadline(Some(Duration::from_secs(2)));
    let all_done = std::sync::Arc::new(std::sync::Barrier::new(2));
    let threads: Vec<_> = mem::network(2, 1, Faults::none())
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            let all_done = all_done.clone();
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, config).unwrap();
                let outcome = if me == 0 {
                    let start = Instant::now();
                    b.enter().and_then(|()| loop {
                        match b.test() {
                            Ok(false) if start.elapsed() < Duration::from_secs(2) => std::thread::yield_now(),
                            Ok(false) => break Err(BarrierError::Internal("test() still says not yet after 2 s".into())),
                            Ok(true) => break Ok(Vec::new()),
                            Err(e) => break Err(e),
                        }
                    })
                } else {
                    run_call(&mut b, Call::Bcast { root: 0, count: 2 })
                };
                all_done.wait();
                outcome
            })
        })
        .collect();
    for (me, t) in threads.into_iter().enumerate() {
        match t.join().unwrap() {
            Err(BarrierError::CollectiveMismatch { .. }) => {}
            other => panic!("node {me} must get a collective mismatch error, got {other:?}"),
        }
    }
}
