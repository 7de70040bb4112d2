//! Adversarial tests of the release-first broadcast whose non-roots tell the
//! root their entry *before* the data arrives (BCAST_ENTERED, step 0), so
//! that the root's end no longer means "every node has the data".
//!
//! A programmable in-process network (below) lets a test lose, delay or
//! duplicate chosen messages: every original of a broadcast's data to one
//! node, every entry, every end, data delivered after the end and after the
//! root moved on, answers delayed across epochs, a heavy tail of late
//! frames. Long random sequences of broadcasts from random roots (one and
//! several segments), allreduces, reduces, barriers (shared-clock safety
//! check) and split-phase barriers run on every algorithm at 2, 3, 5 and 8
//! nodes; every result is checked against a reference, and every node must
//! end at the same epoch. Calls that do not match must give an error on
//! every node (or, to a non-root that made the root's very call, the root's
//! data), never wrong data, never a hang; also under loss.
//!
//! A monitor inside the network checks, on one clock, that every answer
//! carries exactly what its original carried, and that no node sends a
//! message of epoch e+1 (having completed e) before every node entered
//! broadcast e. Checked against mutants of the engine (the root not
//! waiting for the entries, a non-root not waiting for the end, answers
//! from the other epoch's copy, one stored copy instead of two): each
//! fails here. The same file passes on the previous (acknowledge-after-
//! data) protocol. The network, monitor and workloads are
//! `support/attack_net.rs`.
//!
//! The cases that need time to pass (entries lost while non-roots compute
//! past the failure timeout, data held back from a node for 300 ms, a late
//! root's count mismatch) run in virtual time in
//! `src/core/net_tests/bcast.rs`.
//!
//! `MCD_ATTACK_SEEDS=N` runs N seeds per stress case instead of the
//! default, from `MCD_ATTACK_BASE` (default 0).

include!("support/attack_net.rs");

// ---------------------------------------------------------------------------
// Stress: random mixed sequences under heavy loss, duplication, reordering
// and a tail of very late frames.
// ---------------------------------------------------------------------------

#[test]
fn random_mixed_sequences_under_heavy_loss_and_late_frames() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(8) {
        for (i, n) in [2usize, 3, 5, 8].into_iter().enumerate() {
            let configs = algorithms();
            let config = cfg(configs[(seed as usize + i) % configs.len()]);
            let loss = [0.3, 0.4, 0.5][(seed as usize + i) % 3];
            let mut policy = Policy::lossy(loss, 0.3, 7000 + seed * 31 + n as u64);
            if seed % 3 == 2 {
                // A nasty tail: one frame in ten arrives up to 30 ms late
                // (several epochs on), and duplicates are common.
                (policy.tail, policy.tail_delay, policy.dup) = (0.1, Duration::from_millis(30), 0.5);
            }
            let w = Work { seed: 0xA11CE + seed * 977 + n as u64, rounds: if n == 8 { 25 } else { 40 }, long: seed % 2 == 0, gap: Duration::ZERO };
            let what = format!("mixed seed={seed} n={n} {} rails={} loss={loss}", config.algorithm, config.rails);
            cases.push(Box::new(move || run_workload(what, n, config, policy, w, Duration::from_secs(60))));
        }
    }
    run_cases(cases, 4);
}

#[test]
fn epochs_crossing_two_to_the_32_with_roots_alternating_between_two_nodes() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(6) {
        let n = 2 + (seed as usize % 2);
        let mut config = cfg(algorithms()[seed as usize % 6]);
        config.first_epoch = u64::from(u32::MAX) - 7;
        let policy = Policy::lossy(0.4, 0.3, 900 + seed);
        let what = format!("wrap seed={seed} n={n} {}", config.algorithm);
        cases.push(Box::new(move || {
            let nets = network(n, config.rails, policy);
            let outs = run_nodes(&what, nets, config, Duration::from_secs(40), move |me, b| {
                for k in 0..30 {
                    // Roots alternate 0, 1, 0, 1, ..., the same root twice now and then.
                    let root = if k % 7 == 6 { (k / 2) % 2 } else { k % 2 };
                    let want = payload(root, k, 3);
                    let mut data = if me == root { want.clone() } else { vec![1; 3] };
                    b.bcast(&mut data, root).map_err(|e| format!("round {k}: {e}"))?;
                    if data != want {
                        return Err(format!("round {k}: WRONG DATA at node {me} from root {root}"));
                    }
                }
                Ok(b.epoch())
            });
            assert!(outs.iter().all(|&e| e == u64::from(u32::MAX) - 7 + 30), "{what}: {outs:?}");
        }));
    }
    run_cases(cases, 3);
}

// ---------------------------------------------------------------------------
// Targeted faults on the broadcast's own messages.
// ---------------------------------------------------------------------------

/// Every original of a broadcast's data to `victim` is lost, and half the
/// answers too: the victim has the end (n > 2) long before the data, and
/// the root moves on meanwhile.
fn data_lost_to(victim: NodeId) -> impl Fn(&Pkt, &mut Rng) -> Fate + Send + Sync {
    move |p, rng| match (p.msg.kind, p.msg.tag) {
        (MsgKind::Data, DATA) if p.to == victim => Fate::Drop,
        (MsgKind::Answer, DATA) if p.to == victim && rng.f() < 0.5 => Fate::Drop,
        _ => Fate::Default,
    }
}

/// Every original of a broadcast's data to `victim` arrives 10 to 40 ms
/// late: after the end, after the root moved on (often two epochs on).
fn data_late_to(victim: NodeId) -> impl Fn(&Pkt, &mut Rng) -> Fate + Send + Sync {
    move |p, rng| match (p.msg.kind, p.msg.tag) {
        (MsgKind::Data, DATA) if p.to == victim => Fate::Deliver(vec![Duration::from_millis(10 + (rng.f() * 30.0) as u64)]),
        _ => Fate::Default,
    }
}

/// Every original entry is lost (the root must NACK each).
fn entries_lost(p: &Pkt, _: &mut Rng) -> Fate {
    if p.msg.kind == MsgKind::Data && p.msg.tag == ENTERED {
        Fate::Drop
    } else {
        Fate::Default
    }
}

/// Every original end is lost.
fn ends_lost(p: &Pkt, _: &mut Rng) -> Fate {
    if p.msg.kind == MsgKind::Data && p.msg.tag == DONE {
        Fate::Drop
    } else {
        Fate::Default
    }
}

/// Every broadcast message goes only as an answer; answers of any kind are
/// delivered twice, once at once and once 5 to 25 ms late (across epochs),
/// and NACKs are often late too.
fn only_answers_and_late_copies(p: &Pkt, rng: &mut Rng) -> Fate {
    match p.msg.kind {
        MsgKind::Data if matches!(p.msg.tag, DATA | ENTERED | DONE) => Fate::Drop,
        MsgKind::Answer => Fate::Deliver(vec![Duration::from_micros(50), Duration::from_millis(5 + (rng.f() * 20.0) as u64)]),
        MsgKind::Nack if rng.f() < 0.3 => Fate::Deliver(vec![Duration::from_millis((rng.f() * 15.0) as u64)]),
        _ => Fate::Default,
    }
}

#[test]
fn targeted_losses_and_delays_of_the_broadcasts_own_messages() {
    type RuleFn = fn(usize) -> Rule;
    let rules: Vec<(&str, RuleFn)> = vec![
        ("data lost to the last node", |n| Arc::new(data_lost_to(n - 1))),
        ("data lost to node 1", |_| Arc::new(data_lost_to(1))),
        ("data late to the last node", |n| Arc::new(data_late_to(n - 1))),
        ("data late to node 0", |_| Arc::new(data_late_to(0))),
        ("entries lost", |_| Arc::new(entries_lost)),
        ("ends lost", |_| Arc::new(ends_lost)),
        ("only answers, late copies", |_| Arc::new(only_answers_and_late_copies)),
    ];
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(2) {
        for (r, (name, rule)) in rules.iter().enumerate() {
            for n in [2usize, 3, 5] {
                let configs = algorithms();
                let config = cfg(configs[(r + n + seed as usize) % configs.len()]);
                let mut policy = Policy::lossy(0.15, 0.2, 300 + seed * 101 + r as u64 * 7 + n as u64);
                policy.rule = Some(rule(n));
                let w = Work { seed: 0xBEEF + seed * 31 + r as u64 * 1000 + n as u64, rounds: 25, long: r % 2 == 0, gap: Duration::ZERO };
                let what = format!("{name} seed={seed} n={n} {} rails={}", config.algorithm, config.rails);
                cases.push(Box::new(move || run_workload(what, n, config, policy, w, Duration::from_secs(60))));
            }
        }
    }
    run_cases(cases, 4);
}

// ---------------------------------------------------------------------------
// Calls that do not match.
// ---------------------------------------------------------------------------

#[test]
fn every_mismatch_among_broadcasts_reductions_and_barriers_is_an_error_everywhere() {
    let menu = |n: usize| {
        let mut m: Vec<Call> = (0..n).map(|r| Call::Bcast(r, 2)).collect();
        m.push(Call::Bcast(0, 3));
        m.push(Call::Allreduce);
        m.push(Call::Reduce(n - 1));
        m.push(Call::Barrier);
        m
    };
    let mut cases: Vec<(Vec<Call>, bool)> = Vec::new();
    // Two nodes: every pair that differs, with a broadcast in it (a barrier
    // against a reduction is no broadcast's business: the barrier returns).
    let m2 = menu(2);
    for a in &m2 {
        for b in &m2 {
            if a != b && (matches!(a, Call::Bcast(..)) || matches!(b, Call::Bcast(..))) {
                cases.push((vec![*a, *b], false));
            }
        }
    }
    // Three nodes: every combination of a small menu that holds a
    // broadcast and is not the same call everywhere.
    let m3 = [Call::Bcast(0, 2), Call::Bcast(1, 2), Call::Bcast(2, 2), Call::Bcast(1, 3), Call::Allreduce, Call::Reduce(2), Call::Barrier];
    for a in m3 {
        for b in m3 {
            for c in m3 {
                let calls = vec![a, b, c];
                let bcast = calls.iter().any(|c| matches!(c, Call::Bcast(..)));
                // The same call everywhere is no mismatch; broadcasts from one
                // root that differ only in count are covered once per root.
                if bcast && !(a == b && b == c) {
                    cases.push((calls, false));
                }
            }
        }
    }
    // Some under loss.
    let lossy: Vec<(Vec<Call>, bool)> = cases.iter().step_by(5).map(|(c, _)| (c.clone(), true)).collect();
    cases.extend(lossy);
    let cases: Vec<Box<dyn FnOnce() + Send>> = cases
        .into_iter()
        .enumerate()
        .map(|(i, (calls, lossy))| -> Box<dyn FnOnce() + Send> {
            Box::new(move || {
                let algorithm = [Algorithm::Concurrent, Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, Algorithm::OnePhase][i % 3];
                let policy = if lossy { Policy::lossy(0.3, 0.2, 40 + i as u64) } else { Policy::clean() };
                let late = (i % 4 != 0).then_some(i % calls.len());
                if let Err(e) = mismatch_case(None, calls, policy, algorithm, late) {
                    panic!("{}{e}", if lossy { "(lossy) " } else { "" });
                }
            })
        })
        .collect();
    run_cases(cases, 8);
}
