//! The broadcast's tests that need time to pass (a root that calls late,
//! a node computing past the failure timeout, data held back), in virtual
//! time over [`Net`]: the protocol's behaviour. They ran over threads and
//! real sleeps in `tests/bcast_entry_attack.rs` and `tests/bcast_edges.rs`,
//! where a loaded machine could starve a progress agent past the failure
//! timeout. A node that computes has no call in progress but its core is
//! driven, as its progress agent drives it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{Fate, Net};
use crate::collective::Collective;
use crate::core::Call;
use crate::plan::{tag, Algorithm, Fanout, Release};
use crate::transport::{Msg, MsgKind, NodeId};
use crate::types::{BarrierConfig, BarrierError};

/// One step of a node's script.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A broadcast of round `k`'s `len` bytes from `root`.
    Bcast { root: NodeId, k: usize, len: usize },
    /// A barrier (completes one entered with [`Step::Enter`]).
    Barrier,
    /// Enters a barrier without waiting (split phase).
    Enter,
    /// Computing: no call for this long.
    Compute(Duration),
}

/// Round `k`'s data from `root`.
fn payload(root: NodeId, k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (root * 131 + k * 17 + i * 7 + 1) as u8).collect()
}

/// What a call came to: when it was made, when it returned, and how.
#[derive(Debug)]
struct Outcome {
    step: usize,
    called: Instant,
    returned: Instant,
    result: Result<(), BarrierError>,
}

/// Where a node is in its script.
#[derive(Clone, Copy, Debug)]
enum At {
    Idle,
    Entering(Instant),
    Waiting(Instant),
    Computing(Instant),
    /// Its script is over, or a call failed (a program stops there); its
    /// core is still driven.
    Stopped,
}

/// Runs each node's script over `net` until every node has stopped or
/// `limit` has passed; every call may last `deadline`. `tick` runs at each
/// step of 100 µs of virtual time. Returns each node's outcomes, in order,
/// and whether it got through its script. A node stops at its first error
/// (as a program does).
fn run_scripts(net: &mut Net, scripts: &[Vec<Step>], limit: Duration, deadline: Duration, tick: impl FnMut(&mut Net)) -> Vec<(Vec<Outcome>, bool)> {
    run_scripts_on(net, scripts, limit, deadline, false, tick)
}

/// [`run_scripts`], where `go_on`: a node goes on after an error (a
/// program that reports it and calls again).
fn run_scripts_on(
    net: &mut Net,
    scripts: &[Vec<Step>],
    limit: Duration,
    deadline: Duration,
    go_on: bool,
    mut tick: impl FnMut(&mut Net),
) -> Vec<(Vec<Outcome>, bool)> {
    let n = scripts.len();
    let mut at = vec![At::Idle; n];
    let mut next = vec![0usize; n];
    let mut out: Vec<Vec<Outcome>> = (0..n).map(|_| Vec::new()).collect();
    let end = net.now + limit;
    loop {
        for p in 0..n {
            loop {
                let now = net.now;
                match at[p] {
                    At::Stopped => break,
                    At::Idle => {
                        let Some(&step) = scripts[p].get(next[p]) else {
                            at[p] = At::Stopped;
                            break;
                        };
                        let deadline = Some(now + deadline);
                        match step {
                            Step::Bcast { root, k, len } => {
                                let input = if p == root { payload(root, k, len) } else { vec![0; len] };
                                let call = Collective::Bcast { root };
                                net.call(p, Call::EnterCollective { call, count: len as u32, more: false, input: &input, deadline });
                                at[p] = At::Entering(now);
                            }
                            Step::Barrier => {
                                net.call(p, Call::Wait { deadline });
                                at[p] = At::Waiting(now);
                            }
                            Step::Enter => {
                                let result = net.cores[p].enter(now);
                                net.flush(p);
                                let failed = result.is_err();
                                out[p].push(Outcome { step: next[p], called: now, returned: now, result });
                                next[p] += 1;
                                if failed && !go_on {
                                    at[p] = At::Stopped;
                                }
                            }
                            Step::Compute(d) => at[p] = At::Computing(now + d),
                        }
                    }
                    At::Computing(until) if now >= until => {
                        next[p] += 1;
                        at[p] = At::Idle;
                    }
                    At::Computing(_) => break,
                    At::Entering(called) | At::Waiting(called) => {
                        let Some(result) = net.done[p].take() else { break };
                        let step = next[p];
                        if let (At::Entering(_), Ok(())) = (at[p], &result) {
                            net.call(p, Call::WaitResult { deadline: Some(called + deadline) });
                            at[p] = At::Waiting(called);
                            continue;
                        }
                        let result = result.and_then(|()| match scripts[p][step] {
                            Step::Bcast { root, k, len } if p != root => {
                                let mut data = vec![0; len];
                                net.cores[p].collective_result(Some(&mut data))?;
                                assert_eq!(data, payload(root, k, len), "node {p}, step {step}: WRONG DATA");
                                Ok(())
                            }
                            Step::Bcast { .. } => net.cores[p].collective_result(None),
                            _ => Ok(()),
                        });
                        let failed = result.is_err();
                        out[p].push(Outcome { step, called, returned: now, result });
                        next[p] += 1;
                        at[p] = if failed && !go_on { At::Stopped } else { At::Idle };
                    }
                }
            }
        }
        if at.iter().all(|a| matches!(a, At::Stopped)) || net.now >= end {
            break;
        }
        tick(net);
        let step = net.now + Duration::from_micros(100);
        net.run_until(step);
    }
    out.into_iter().zip(next).enumerate().map(|(p, (o, next))| (o, next >= scripts[p].len())).collect()
}

/// A rule: independent loss `loss` and delays up to 300 µs (seeded), then
/// `then` (which may override).
fn lossy(loss: f64, seed: u64, mut then: impl FnMut(NodeId, NodeId, &Msg) -> Option<Fate> + 'static) -> super::Rule {
    let mut s = seed;
    let mut unit = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    Box::new(move |from, to, msg| {
        if let Some(fate) = then(from, to, msg) {
            return fate;
        }
        if unit() < loss {
            Fate::Drop
        } else {
            Fate::Delay(Duration::from_nanos((unit() * 300_000.0) as u64))
        }
    })
}

/// Every outcome is Ok and every script got through.
fn all_ok(what: &str, outs: &[(Vec<Outcome>, bool)]) {
    for (p, (o, through)) in outs.iter().enumerate() {
        for x in o {
            assert!(x.result.is_ok(), "{what}: node {p}, step {}: {:?}", x.step, x.result);
        }
        assert!(through, "{what}: node {p} did not get through its script: {o:?}");
    }
}

#[test]
fn entries_lost_while_non_roots_compute_past_the_failure_timeout() {
    // A non-root whose entry is lost (every original, and a fifth of all
    // messages) computes for 2.5 failure timeouts right after its
    // broadcast: only its core, driven meanwhile, answers the root's
    // NACK. Nobody may be taken for dead; every result stays right.
    let algorithms = [Algorithm::Concurrent, Algorithm::ShuffleExchange, Algorithm::Dissemination];
    for (i, n) in [2usize, 3, 4].into_iter().enumerate() {
        for seed in 0..3 {
            let config = BarrierConfig::new(algorithms[i]).timeouts(Duration::from_millis(1), Duration::from_millis(120));
            let mut net = Net::new(n, config);
            net.rule =
                Some(lossy(0.2, 55 + i as u64 * 10 + seed, |_, _, m| (m.kind == MsgKind::Data && m.tag == tag::BCAST_ENTERED).then_some(Fate::Drop)));
            let scripts: Vec<Vec<Step>> = (0..n)
                .map(|me| {
                    let mut s = Vec::new();
                    for k in 0..4 {
                        let root = k % n;
                        s.push(Step::Bcast { root, k, len: 24 });
                        if me == (root + 1) % n {
                            s.push(Step::Compute(Duration::from_millis(300)));
                        }
                    }
                    s
                })
                .collect();
            let outs = run_scripts(&mut net, &scripts, Duration::from_secs(30), Duration::from_secs(10), |_| {});
            all_ok(&format!("entries lost, computing n={n} {} seed {seed}", algorithms[i]), &outs);
        }
    }
}

#[test]
fn the_root_never_gets_further_than_the_next_broadcast_ahead_of_a_node_without_the_data() {
    // The root's data never reaches the last node (not the original, not
    // an answer) until 300 ms: the root may return from that broadcast and
    // from the next one (its entries are all there), but never from a
    // third, which needs the last node to have entered the second
    // broadcast, so to have had the first one's data.
    for n in [2usize, 3, 5] {
        let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_micros(500), Duration::from_secs(10));
        let mut net = Net::new(n, config);
        let hold = Rc::new(Cell::new(true));
        let h = hold.clone();
        net.rule = Some(Box::new(move |_, to, m| match (m.kind, m.tag) {
            (MsgKind::Data | MsgKind::Answer, tag::BCAST_DATA) if to == n - 1 && h.get() => Fate::Drop,
            _ => Fate::Deliver,
        }));
        let start = net.now;
        let release = start + Duration::from_millis(300);
        let scripts: Vec<Vec<Step>> = (0..n).map(|_| (0..3).map(|k| Step::Bcast { root: 0, k, len: 16 }).collect()).collect();
        let outs = run_scripts(&mut net, &scripts, Duration::from_secs(20), Duration::from_secs(20), |net| {
            if net.now >= release {
                hold.set(false);
            }
        });
        let what = format!("held data n={n}");
        all_ok(&what, &outs);
        let (root, held) = (&outs[0].0, &outs[n - 1].0);
        assert!(held[0].returned >= release, "{what}: node {} had the data while it was held: {held:?}", n - 1);
        assert!(root[1].returned < release, "{what}: the root's second broadcast waited for the held node (the case under test): {root:?}");
        assert!(
            root[2].returned >= held[0].returned,
            "{what}: the root returned from its third broadcast ({:?}) before node {} had the first ({:?})",
            root[2].returned - start,
            n - 1,
            held[0].returned - start
        );
    }
}

/// Every node got the mismatch error exactly once, and every call
/// returned (none at its deadline, none naming a node silent).
fn one_mismatch_each_and_no_call_waits(what: &str, outs: &[(Vec<Outcome>, bool)]) {
    for (me, (o, through)) in outs.iter().enumerate() {
        assert!(*through, "{what}: node {me} did not get through its script: {o:?}; all: {outs:?}");
        let mismatches = o.iter().filter(|x| mismatch_error(&x.result)).count();
        assert_eq!(mismatches, 1, "{what}: node {me}: {o:?}; all: {outs:?}");
        assert!(o.iter().all(|x| x.result.is_ok() || mismatch_error(&x.result)), "{what}: node {me}: {o:?}; all: {outs:?}");
    }
}

#[test]
fn a_count_mismatch_seen_first_by_a_late_root_leaves_no_node_waiting() {
    // A broadcast whose count differs at node 2, from a root (node 1) that
    // calls 50 ms late: every entry is there before the root's data goes
    // out, so the root completes the epoch inside its own call and reports
    // the mismatch at once; node 2 reports it too. Node 0 made the root's
    // exact call and has the root's data (its end, which carries the
    // mismatch, is 30 ms late). Every node goes on after its error (issue
    // 28: one failed collective never disables later ones) to a right
    // broadcast: each gets the mismatch once, and no call waits for a node
    // that will never come (a 2 s deadline would say so).
    let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_secs(10));
    let mut net = Net::new(3, config);
    net.rule = Some(Box::new(|_, to, m| match (m.kind, m.tag) {
        (MsgKind::Data, tag::BCAST_DONE) if to == 0 => Fate::Delay(Duration::from_millis(30)),
        _ => Fate::Deliver,
    }));
    let lens = [16usize, 16, 24];
    let scripts: Vec<Vec<Step>> = (0..3)
        .map(|me| {
            let mut s = if me == 1 { vec![Step::Compute(Duration::from_millis(50))] } else { Vec::new() };
            s.extend([Step::Bcast { root: 1, k: 0, len: lens[me] }, Step::Bcast { root: 1, k: 1, len: 16 }]);
            s
        })
        .collect();
    let outs = run_scripts_on(&mut net, &scripts, Duration::from_secs(5), Duration::from_secs(2), true, |_| {});
    one_mismatch_each_and_no_call_waits("count mismatch, late root", &outs);
}

#[test]
fn a_slow_root_and_a_non_root_computing_past_the_failure_timeout_are_waited_for_not_declared_dead() {
    // Roots alternate 0, 1; the root of the first two rounds calls 2
    // failure timeouts late (the others wait for its data), and the last
    // node computes 2 failure timeouts after each broadcast while the root
    // waits for its entry (perhaps lost): its core answers. A barrier
    // follows each broadcast; none completes before every node entered it.
    const FAILURE: Duration = Duration::from_millis(150);
    let algorithms = [Algorithm::Concurrent, Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, Algorithm::Dissemination];
    for (i, algorithm) in algorithms.into_iter().enumerate() {
        let n = 2 + i; // 2 nodes too: their broadcast has no end message
        for seed in 0..3 {
            let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), FAILURE);
            let mut net = Net::new(n, config);
            net.rule = Some(lossy(0.3, 77 + i as u64 * 10 + seed, |_, _, _| None));
            let scripts: Vec<Vec<Step>> = (0..n)
                .map(|me| {
                    let mut s = Vec::new();
                    for k in 0..4 {
                        let root = k % 2;
                        if me == root && k < 2 {
                            s.push(Step::Compute(FAILURE * 2));
                        }
                        s.push(Step::Bcast { root, k, len: 16 });
                        if me == n - 1 {
                            s.push(Step::Compute(FAILURE * 2));
                        }
                        s.push(Step::Barrier);
                    }
                    s
                })
                .collect();
            let outs = run_scripts(&mut net, &scripts, Duration::from_secs(30), Duration::from_secs(30), |_| {});
            let what = format!("{algorithm} n={n} seed {seed}");
            all_ok(&what, &outs);
            // Safety of each barrier (the r-th barrier call of every node).
            let barriers: Vec<Vec<&Outcome>> =
                (0..n).map(|p| outs[p].0.iter().filter(|x| matches!(scripts[p][x.step], Step::Barrier)).collect()).collect();
            for r in 0..4 {
                let last_in = (0..n).map(|p| barriers[p][r].called).max().unwrap();
                for (p, b) in barriers.iter().enumerate() {
                    assert!(b[r].returned >= last_in, "{what}: node {p} left barrier {r} before every node entered it");
                }
            }
        }
    }
}

/// A mismatch of a broadcast's count (node 2 calls with another) against
/// the implied end: each node's outcomes, and whether each ends in the
/// mismatch error.
fn mismatch_error(r: &Result<(), BarrierError>) -> bool {
    matches!(r, Err(BarrierError::CollectiveMismatch { .. }))
}

#[test]
fn a_late_root_that_goes_on_after_its_mismatch_error_hides_the_mismatch_from_no_node() {
    // (Over threads in tests/bcast_implied_end_attack.rs before.) Node 2
    // calls bcast(root 1) with another count; the root, node 1, calls 50
    // ms late, so it completes the epoch and reports the mismatch inside
    // its own call; every node calls twice, whatever the outcome, so the
    // root's second call is a broadcast of its own at once. Node 0 made
    // the root's exact call and has its data; the mismatch reaches it only
    // in the end, 30 ms late: with the implied end, the root's next data
    // counted as an end that agrees and node 0 never heard of it. Every
    // node must get the mismatch error.
    for algorithm in [Algorithm::Concurrent, Algorithm::OnePhase] {
        let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(10));
        let mut net = Net::new(3, config);
        net.rule = Some(Box::new(|_, to, m| match (m.kind, m.tag) {
            (MsgKind::Data, tag::BCAST_DONE) if to == 0 => Fate::Delay(Duration::from_millis(30)),
            _ => Fate::Deliver,
        }));
        let lens = [8usize, 8, 12];
        let scripts: Vec<Vec<Step>> = (0..3)
            .map(|me| {
                let mut s = if me == 1 { vec![Step::Compute(Duration::from_millis(50))] } else { Vec::new() };
                s.extend((0..2).map(|k| Step::Bcast { root: 1, k, len: lens[me] }));
                s
            })
            .collect();
        let outs = run_scripts_on(&mut net, &scripts, Duration::from_secs(5), Duration::from_secs(1), true, |_| {});
        for (me, (o, _)) in outs.iter().enumerate() {
            assert!(o.iter().any(|x| mismatch_error(&x.result)), "{algorithm}: node {me} never got a mismatch error: {o:?}; all: {outs:?}");
        }
    }
}

#[test]
fn a_root_entering_a_split_phase_barrier_after_a_background_mismatch_and_a_node_waiting_for_the_end_get_the_mismatch() {
    // (Over threads in tests/bcast_implied_end_attack.rs before.) Nodes 0
    // and 1 (the root) call bcast(root 1) with 8 bytes, node 2 with 12;
    // nobody calls late. Each node then computes 20 ms (the epoch
    // completes in the background: the root finds the mismatch and sends
    // the end, which says so) and enters a barrier: the root split phase
    // (enter, then wait), node 0 with wait. Every end (and answer for it)
    // to node 0 is 100 ms late; node 2's entry is 5 ms late (the root's
    // call returns at its data). Node 0 learns the mismatch only from the
    // end (with the implied end, the root's barrier arrival counted as an
    // end that agrees). The root's barrier after its background mismatch
    // reports it, and every node goes on after its error: the barrier
    // runs on every node (none waits to its deadline).
    let config = BarrierConfig::new(Algorithm::OnePhase).timeouts(Duration::from_millis(1), Duration::from_secs(10));
    let mut net = Net::new(3, config);
    net.rule = Some(Box::new(|from, to, m| match (m.kind, m.tag) {
        (MsgKind::Data | MsgKind::Answer, tag::BCAST_DONE) if to == 0 => Fate::Delay(Duration::from_millis(100)),
        (MsgKind::Data, tag::BCAST_ENTERED) if from == 2 => Fate::Delay(Duration::from_millis(5)),
        _ => Fate::Deliver,
    }));
    let lens = [8usize, 8, 12];
    let scripts: Vec<Vec<Step>> = (0..3)
        .map(|me| {
            let mut s = vec![Step::Bcast { root: 1, k: 0, len: lens[me] }, Step::Compute(Duration::from_millis(20))];
            if me == 1 {
                s.push(Step::Enter);
            }
            s.push(Step::Barrier);
            s
        })
        .collect();
    let outs = run_scripts_on(&mut net, &scripts, Duration::from_secs(5), Duration::from_millis(600), true, |_| {});
    one_mismatch_each_and_no_call_waits("background mismatch, split-phase barrier after", &outs);
    for me in [0, 1] {
        let last = outs[me].0.last().map(|x| &x.result);
        assert!(last.is_some_and(mismatch_error), "node {me} hears of it at its barrier, not {last:?}; all: {outs:?}");
    }
}
