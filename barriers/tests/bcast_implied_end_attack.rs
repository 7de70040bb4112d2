//! Adversarial tests of the implied broadcast end (a root that broadcasts
//! again at once sends no end; its next data, flagged, stands for it): a
//! mismatch must still reach every node right after a broadcast from the
//! same root, long streaks from one root under heavy loss of ends and data,
//! across 2^32, and a root that finishes right after. The cases that need
//! time to pass (a late root that goes on after its mismatch error, a
//! split-phase barrier after a mismatch found in the background) run in
//! virtual time in `src/core/net_tests/bcast.rs`. The programmable network,
//! monitor and workloads are `support/attack_net.rs`, shared with
//! `bcast_entry_attack.rs`.
#![allow(dead_code)]

include!("support/attack_net.rs");

// ---------------------------------------------------------------------------
// Stress: long streaks of broadcasts from one root (every end implied),
// with the data to one node lost, ends lost, agents completing epochs
// while the application computes, mixed with other calls.
// ---------------------------------------------------------------------------

/// The shared sequence: mostly broadcasts from a root that changes rarely.
fn streaks(me: usize, b: &mut Barrier<Net>, seed: u64, rounds: usize) -> Result<Timeline, String> {
    let n = b.nodes();
    let reduces = b.config().algorithm != Algorithm::Dissemination;
    let mut s = seed | 1;
    let mut root = 0;
    let mut timeline = Timeline::default();
    for k in 0..rounds {
        if next(&mut s).is_multiple_of(8) {
            root = (next(&mut s) % n as u64) as usize;
        }
        let what = next(&mut s) % 20;
        let len = match next(&mut s) % 8 {
            0 => 400, // three segments: three epochs from one root
            1 => 0,
            2 => 1,
            _ => 3,
        };
        let computes = (next(&mut s) % (n as u64 * 3)) as usize; // now and then one node computes
        let bcast = |b: &mut Barrier<Net>| -> Result<(), String> {
            let want = payload(root, k, len);
            let mut data = if me == root { want.clone() } else { vec![0xDEAD; len] };
            b.bcast(&mut data, root).map_err(|e| format!("round {k}: bcast from {root} ({len}): {e}"))?;
            if data != want {
                return Err(format!("round {k}: WRONG DATA from root {root} at node {me}"));
            }
            Ok(())
        };
        match what {
            0..=13 => bcast(b)?,
            14 => {
                let entered = Instant::now();
                b.wait().map_err(|e| format!("round {k}: barrier: {e}"))?;
                timeline.record(entered, Instant::now());
            }
            15 if reduces => {
                let mut x = [me as u64 + k as u64];
                b.allreduce(&mut x, Op::Sum).map_err(|e| format!("round {k}: allreduce: {e}"))?;
                let want = (0..n as u64).map(|j| j + k as u64).sum::<u64>();
                if x[0] != want {
                    return Err(format!("round {k}: WRONG allreduce at node {me}: {x:?} want {want}"));
                }
            }
            16 | 17 => {
                bcast(b)?;
                let entered = Instant::now();
                b.enter().map_err(|e| format!("round {k}: enter: {e}"))?;
                while !b.test().map_err(|e| format!("round {k}: test: {e}"))? {
                    std::thread::yield_now();
                }
                timeline.record(entered, Instant::now());
            }
            _ => {
                bcast(b)?;
                bcast(b)?;
            }
        }
        if computes == me {
            std::thread::sleep(Duration::from_millis(2)); // its agent completes the broadcast
        }
    }
    Ok(timeline)
}

#[test]
fn long_streaks_from_one_root_under_loss_with_ends_and_data_lost() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(3) {
        for (i, n) in [3usize, 4, 6].into_iter().enumerate() {
            let config = cfg(algorithms()[(seed as usize + i) % 6]);
            let victim = n - 1 - (seed as usize % 2);
            let mode = (seed as usize + i) % 3;
            let policy = Policy::lossy([0.2, 0.35, 0.5][mode], 0.3, 5000 + seed * 13 + n as u64).with(move |p, rng| match (p.msg.kind, p.msg.tag) {
                // Ends: mostly lost (mode 0), all lost (1), late (2).
                (MsgKind::Data, DONE) if mode == 1 || (mode == 0 && rng.f() < 0.8) => Fate::Drop,
                (MsgKind::Data, DONE) if mode == 2 => Fate::Deliver(vec![Duration::from_millis((rng.f() * 6.0) as u64)]),
                // The victim loses most originals of the data (so the next
                // epoch's data, which would imply the end, too).
                (MsgKind::Data, DATA) if p.to == victim && rng.f() < 0.7 => Fate::Drop,
                _ => Fate::Default,
            });
            let what = format!("streaks seed={seed} n={n} {} mode={mode}", config.algorithm);
            cases.push(Box::new(move || {
                let nets = network(n, config.rails, policy);
                let outs = run_nodes(&what, nets, config, Duration::from_secs(60), move |me, b| {
                    let t = streaks(me, b, 0x5EED + seed * 7919 + n as u64, 40)?;
                    Ok((t, b.epoch(), b.stats().ends_implied))
                });
                let epochs: Vec<u64> = outs.iter().map(|o| o.1).collect();
                assert!(epochs.iter().all(|&e| e == epochs[0]), "{what}: nodes end at different epochs {epochs:?}");
                let timelines: Vec<Timeline> = outs.iter().map(|o| o.0.clone()).collect();
                let (violations, checked) = check(&timelines);
                assert!(violations.is_empty(), "{what}: barrier safety violated: {violations:?}");
                assert_eq!(checked, timelines[0].barriers.len(), "{what}");
                if std::env::var("MCD_ATTACK_VERBOSE").is_ok() {
                    eprintln!("{what}: ends implied {:?}", outs.iter().map(|o| o.2).collect::<Vec<_>>());
                }
            }));
        }
    }
    run_cases(cases, 4);
}

// ---------------------------------------------------------------------------
// Mismatches right after a broadcast whose end is implied.
// ---------------------------------------------------------------------------

#[test]
fn every_mismatch_right_after_a_broadcast_from_the_same_root_is_an_error_everywhere() {
    let m3 = [Call::Bcast(0, 2), Call::Bcast(1, 2), Call::Bcast(0, 3), Call::Allreduce, Call::Reduce(2), Call::Barrier];
    let mut cases: Vec<(Vec<Call>, bool)> = Vec::new();
    for a in m3 {
        for b in m3 {
            for c in m3 {
                if !(a == b && b == c) && [a, b, c].iter().any(|c| matches!(c, Call::Bcast(..))) {
                    cases.push((vec![a, b, c], false));
                }
            }
        }
    }
    let lossy: Vec<(Vec<Call>, bool)> = cases.iter().step_by(4).map(|(c, _)| (c.clone(), true)).collect();
    cases.extend(lossy);
    // Every case again with every end late to one node (it learns a
    // mismatch from the end, or from nothing).
    let ends_late: Vec<(Vec<Call>, bool)> = cases.iter().filter(|(_, l)| !l).map(|(c, _)| (c.clone(), false)).collect();
    let plain = cases.len();
    cases.extend(ends_late);
    let cases: Vec<Box<dyn FnOnce() + Send>> = cases
        .into_iter()
        .enumerate()
        .map(|(i, (calls, lossy))| -> Box<dyn FnOnce() + Send> {
            Box::new(move || {
                let algorithm = [Algorithm::Concurrent, Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, Algorithm::OnePhase][i % 3];
                let victim = 1 + i % 2;
                let policy = if lossy {
                    Policy::lossy(0.3, 0.2, 40 + i as u64)
                } else if i >= plain {
                    Policy::clean().with(move |p, _| match (p.msg.kind, p.msg.tag) {
                        (MsgKind::Data | MsgKind::Answer, DONE) if p.to == victim => Fate::Deliver(vec![Duration::from_millis(30)]),
                        _ => Fate::Default,
                    })
                } else {
                    Policy::clean()
                };
                // Late: the first broadcast's root (0) half the time, else another node.
                let late = [Some(0), Some(i % 3), None, Some(0)][i % 4];
                if let Err(e) = mismatch_case(Some(0), calls, policy, algorithm, late) {
                    panic!("{}{e}", if lossy { "(lossy) " } else { "" });
                }
            })
        })
        .collect();
    run_cases(cases, 8);
}

// ---------------------------------------------------------------------------
// Epochs across 2^32, and a root that finishes right after implied ends.
// ---------------------------------------------------------------------------

#[test]
fn same_root_streaks_across_two_to_the_32_with_ends_lost() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(4) {
        let n = 3 + (seed as usize % 3);
        let mut config = cfg(algorithms()[seed as usize % 6]);
        config.first_epoch = [u64::from(u32::MAX) - 5, 2 * u64::from(u32::MAX) - 4][seed as usize % 2];
        let first = config.first_epoch;
        let policy = Policy::lossy(0.3, 0.3, 77 + seed).with(ends_lost_mostly);
        let what = format!("wrap streak seed={seed} n={n} {} from {first}", config.algorithm);
        cases.push(Box::new(move || {
            let nets = network(n, config.rails, policy);
            let outs = run_nodes(&what, nets, config, Duration::from_secs(40), move |me, b| {
                for k in 0..16 {
                    let root = if k < 12 { 1 } else { 2 };
                    let want = payload(root, k, 3);
                    let mut data = if me == root { want.clone() } else { vec![1; 3] };
                    b.bcast(&mut data, root).map_err(|e| format!("round {k}: {e}"))?;
                    if data != want {
                        return Err(format!("round {k}: WRONG DATA at node {me} from root {root}"));
                    }
                }
                Ok((b.epoch(), b.stats().ends_implied))
            });
            assert!(outs.iter().all(|o| o.0 == first + 16), "{what}: {outs:?}");
            assert!(outs[1].1 > 0, "{what}: no end implied at the root: {outs:?}");
        }));
    }
    run_cases(cases, 3);
}

fn ends_lost_mostly(p: &Pkt, rng: &mut Rng) -> Fate {
    if p.msg.kind == MsgKind::Data && p.msg.tag == DONE && rng.f() < 0.9 {
        Fate::Drop
    } else {
        Fate::Default
    }
}

/// The root broadcasts three times (two ends implied) and finishes at once;
/// node 2 gets none of the second and third data for 100 ms (originals and
/// answers), and every original end is lost: it can learn the first end
/// only from the root's answer. Nobody may hang or get wrong data.
#[test]
fn a_root_that_finishes_right_after_implied_ends_leaves_nobody_without_them() {
    for algorithm in [Algorithm::Concurrent, Algorithm::OnePhase, Algorithm::Tree { k: Fanout::TWO, release: Release::Tree }] {
        for n in [3usize, 4] {
            let start = Instant::now();
            let policy = Policy::clean().with(move |p, _| match (p.msg.kind, p.msg.tag) {
                (MsgKind::Data, DONE) => Fate::Drop,
                (MsgKind::Data | MsgKind::Answer, DATA) if p.to == 2 && p.msg.epoch >= 1 && start.elapsed() < Duration::from_millis(100) => {
                    Fate::Drop
                }
                _ => Fate::Default,
            });
            let config =
                BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(5)).deadline(Some(Duration::from_secs(4)));
            let what = format!("finish after implied ends n={n} {algorithm}");
            run_nodes(&what, network(n, 1, policy), config, Duration::from_secs(20), move |me, b| {
                for k in 0..3 {
                    let want = payload(0, k, 2);
                    let mut data = if me == 0 { want.clone() } else { vec![0; 2] };
                    b.bcast(&mut data, 0).map_err(|e| format!("round {k}: {e}"))?;
                    if data != want {
                        return Err(format!("round {k}: WRONG DATA"));
                    }
                }
                Ok(())
            });
        }
    }
}
