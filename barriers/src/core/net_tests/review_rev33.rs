//! Review rev33 (session 17): session 16's protocol changes at their
//! edges in virtual time: the closing barrier proven complete by a peer's
//! message of the barrier after it, one answer a NACK (a NACK's later copy
//! however late), and a barrier joined beside another on a derived
//! instance (`notes/review-rev33.md`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::*;
use crate::core::derived_instance;

/// A tiny deterministic generator (xorshift), for the mini-soaks here.
struct Draw(u64);

impl Draw {
    fn new(seed: u64) -> Draw {
        Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A whole number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Every node finishes (the closing barrier, then the farewell) at a time
/// of its own, some nodes stalled (their cores not driven, their frames
/// waiting) for up to `stall_ms` once they are in the closing barrier,
/// under `loss`; a node whose finish returned leaves. Safety: no node's
/// closing barrier is complete before every node entered it (checked at
/// each node's entry, exactly). Every finish must succeed.
fn finish_with_stalls(algorithm: Algorithm, n: usize, loss: f64, seed: u64, stall_ms: u64) -> Result<(), String> {
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(10));
    let mut net = Net::new(n, config);
    let everyone: Vec<usize> = (0..n).collect();
    let mut draw = Draw::new(seed);
    for _ in 0..draw.below(3) {
        net.all(&everyone, |_| Call::Wait { deadline: None });
    }
    net.rule = Some(lossy(loss, seed ^ 0x5eed));
    let start = net.now;
    let enter_at: Vec<Duration> = (0..n).map(|_| Duration::from_micros(draw.below(30_000))).collect();
    // (stall start after its entry, length), for about half the nodes.
    let stalls: Vec<Option<(Duration, Duration)>> = (0..n)
        .map(|_| (draw.below(2) == 0).then(|| (Duration::from_micros(draw.below(3_000)), Duration::from_micros(draw.below(stall_ms * 1_000)))))
        .collect();
    let mut entered = vec![false; n];
    let mut stalled_until: Vec<Option<Instant>> = vec![None; n];
    let limit = start + Duration::from_secs(40);
    while net.now < limit {
        let t = net.now - start;
        for p in 0..n {
            if !entered[p] && t >= enter_at[p] {
                // Entry: no node may be past its closing barrier yet.
                if let Some(q) = (0..n).find(|&q| net.cores[q].closing.finished()) {
                    return Err(format!("node {q} completed its closing barrier before node {p} entered it (at {t:?})"));
                }
                entered[p] = true;
                net.call(p, Call::Finish);
            }
            if let (true, Some((after, long)), None) = (entered[p], stalls[p], stalled_until[p]) {
                if t >= enter_at[p] + after && !net.dead[p] {
                    net.paused[p] = true;
                    stalled_until[p] = Some(net.now + long);
                }
            }
            if net.paused[p] && stalled_until[p].is_some_and(|u| net.now >= u) {
                net.paused[p] = false;
            }
            if entered[p] && !net.dead[p] && !net.paused[p] {
                if let Some(result) = &net.done[p] {
                    if let Err(e) = result {
                        return Err(format!("node {p}'s finish failed at {t:?}: {e}"));
                    }
                    net.cores[p].leave();
                    net.flush(p);
                    net.dead[p] = true;
                }
            }
        }
        if net.dead.iter().all(|&d| d) {
            return Ok(());
        }
        let step = net.now + Duration::from_micros(100);
        net.run_until(step);
    }
    Err(format!("not every node finished: {:?}", net.done))
}

#[test]
fn finishes_with_stalls_past_the_farewells_silence_are_safe_and_complete() {
    // `Core::closing_proven` completes a closing barrier on a peer's
    // message of the barrier after it. Staggered entries (0-30 ms), about
    // half the nodes stalled 0-1.5 s (beyond the farewell's 1 s of
    // silence) once in their closing barrier, loss 0 and 20%, every
    // algorithm: no closing barrier completes before the last entry, and
    // every finish succeeds.
    let seeds: u64 = std::env::var("REV33_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let mut failures = Vec::new();
    for algorithm in Algorithm::all() {
        for n in [2, 3, 5, 8] {
            for loss in [0.0, 0.2] {
                for seed in 0..seeds {
                    if let Err(e) = finish_with_stalls(algorithm, n, loss, seed, 1_500) {
                        failures.push(format!("{algorithm}, {n} nodes, loss {loss}, seed {seed}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failed: {failures:#?}", failures.len());
}

#[test]
fn a_closing_node_takes_no_word_of_the_barrier_after_from_a_peer_not_past_it() {
    // The messages of barrier c+1 that a node sends without having
    // completed c (if any existed, `closing_proven` would complete a
    // closing barrier early): a not-yet-admitted node's JOINING status
    // echoes the asker's epoch; a MISMATCH status names the barrier before
    // the answerer's. Node 3 has not entered the closing barrier 0; nodes
    // 0-2 have. Frames that carry epoch 1 but are no such proof, forged
    // here as each of those kinds (and of another instance), come to node
    // 0 from node 1: node 0 must stay in its closing barrier.
    for algorithm in Algorithm::all() {
        let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(2));
        let mut net = Net::new(4, config);
        for p in 0..3 {
            net.call(p, Call::Close);
        }
        net.run_until(net.now + Duration::from_millis(5));
        let epoch = net.cores[0].protocol_epoch() as u32;
        let joining = Msg { kind: MsgKind::Status, instance: INSTANCE, epoch: epoch + 1, tag: crate::transport::status::JOINING, arg: 0 };
        let foreign = Msg { kind: MsgKind::Status, instance: INSTANCE ^ 1, epoch: epoch + 1, tag: 0, arg: 0 };
        let ahead = Msg { kind: MsgKind::Nack, instance: INSTANCE ^ 2, epoch: epoch + 1, tag: crate::transport::STATUS_TAG, arg: 0 };
        for msg in [joining, foreign, ahead] {
            net.wire.push((net.now + LATENCY, 1, 0, 0, msg, Vec::new()));
        }
        net.run_until(net.now + Duration::from_millis(5));
        for p in 0..3 {
            assert!(!net.cores[p].closing.finished(), "{algorithm}: node {p} completed its closing barrier before node 3 entered it");
        }
        net.call(3, Call::Close);
        for p in 0..4 {
            net.call(p, Call::Finish);
        }
        net.run_until(net.now + Duration::from_millis(200));
        for p in 0..4 {
            assert!(matches!(net.done[p], Some(Ok(()))), "{algorithm}: node {p}'s finish: {:?}", net.done[p]);
        }
    }
}

#[test]
fn a_retry_whose_first_copy_is_lost_is_answered() {
    // One answer a NACK (PROTOCOL.md): a NACK's copy k of m from a peer
    // whose last NACK taken in for that message was a copy j < k of the
    // same m is a later copy of that NACK, however late. But a retry's copy
    // 0 may be lost: then its copy 1 is taken for a later copy of the NACK
    // before, whose copy 1 was lost. n = 2 (dissemination): node 1 has seen
    // loss (its NACKs go in 2 copies); node 0's message to node 1 is lost;
    // NACK 1: copy 0 comes, copy 1 is lost; its answer is lost. NACK 2
    // (a retry timeout later): copy 0 lost, copy 1 comes. Node 0 must
    // answer it (its answer of NACK 1 was lost: nothing else will come).
    let (retries, _, _) = a_retrys_second_copy(None);
    assert!(retries >= 2, "node 1 did not retry (the case under test)");
    assert_eq!(retries, 2, "NACK 2 (its copy 1 came) was not answered: node 1 asked {retries} times");
}

/// The rev33-1 set-up ([`a_retry_whose_first_copy_is_lost_is_answered`]):
/// 2 nodes (dissemination), node 1's NACKs in 2 copies; node 0's message
/// to node 1 lost; NACK 1's copy 0 comes, its answer is lost; NACK 2's
/// copy 0 is lost, its copy 1 comes. `reply`: node 0's shortest round
/// trip seen, set before the barrier (None: as measured). Returns how many
/// NACKs node 1 sent and how long the barrier took at node 1.
pub(super) fn a_retrys_second_copy(reply: Option<Duration>) -> (u32, Duration, Duration) {
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_secs(2));
    let mut net = Net::new(2, config);
    for _ in 0..10 {
        net.all(&[0, 1], |_| Call::Wait { deadline: None });
    }
    net.cores[1].recovery.loss.lost(1);
    for _ in 0..19 {
        net.cores[1].recovery.loss.came();
    }
    assert_eq!(net.cores[1].recovery.loss.copies(1), 2, "node 1's NACKs go in 2 copies (the case under test)");
    if reply.is_some() {
        net.cores[0].recovery.reply = reply;
    }
    let epoch = net.cores[0].protocol_epoch() as u32;
    let nacks = Rc::new(RefCell::new(Vec::<(u32, u32, bool)>::new()));
    let answers = Rc::new(Cell::new(0u32));
    let (log, told) = (nacks.clone(), answers.clone());
    let mut number = 0;
    net.rule = Some(Box::new(move |from, _, msg| {
        if msg.epoch != epoch {
            return Fate::Deliver;
        }
        match (from, msg.kind) {
            (0, MsgKind::Data) => Fate::Drop,
            (0, MsgKind::Answer) => {
                told.set(told.get() + 1);
                if told.get() == 1 {
                    Fate::Drop
                } else {
                    Fate::Deliver
                }
            }
            (1, MsgKind::Nack) => {
                let (k, _) = crate::core::copies::copy_of(msg.arg);
                if k == 0 {
                    number += 1;
                }
                let deliver = match number {
                    1 => k == 0,
                    2 => k == 1,
                    _ => true,
                };
                log.borrow_mut().push((number, k, deliver));
                if deliver {
                    Fate::Deliver
                } else {
                    Fate::Drop
                }
            }
            _ => Fate::Deliver,
        }
    }));
    let rto = net.cores[1].recovery.rto.get(0);
    for p in [0, 1] {
        net.call(p, Call::Wait { deadline: None });
    }
    let took = super::review_rev34::settle_within(&mut net, &[0, 1], Duration::from_secs(3));
    assert!((0..2).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    let log = nacks.borrow();
    eprintln!(
        "reply {reply:?}: node 1's NACKs (number, copy, delivered): {log:?}; node 0's answers {}; took {took:?} (node 1's retry timeout {rto:?})",
        answers.get()
    );
    (log.iter().map(|&(n, _, _)| n).max().unwrap_or(0), took, rto)
}

/// Node `p`'s new process (its old core dropped) joins `net` with
/// `incarnation`, a barrier beside configured `beside` with it.
pub(super) fn create_beside(net: &mut Net, p: NodeId, incarnation: u64, beside: &BarrierConfig) {
    let n = net.cores.len();
    let setup = Setup { me: p, nodes: n, rails: net.config.rails, multicast: true, max_data: 1000 };
    net.cores[p] = Core::new(setup, net.config, net.now).unwrap();
    net.joined[p] = None;
    net.cores[p].join_beside(incarnation, net.now, beside);
    net.flush(p);
}

/// A pair as `PreparedBarrier::join_with` makes it: `n` nodes joined
/// (`primary`) beside a barrier on the derived instance (`beside`, no
/// join of its own).
pub(super) fn joined_pair(n: usize, config: BarrierConfig) -> (Net, Net, u64) {
    let mut primary = Net::new(n, config);
    for p in 0..n {
        create_beside(&mut primary, p, 100 + p as u64, &config);
    }
    primary.run_until(primary.now + Duration::from_millis(50));
    let instance = match primary.joined[0] {
        Some(Ok(i)) => i,
        ref other => panic!("the join: {other:?}"),
    };
    assert!(primary.joined.iter().all(|j| matches!(j, Some(Ok(i)) if *i == instance)), "{:?}", primary.joined);
    let mut beside = Net::new(n, config);
    for core in &mut beside.cores {
        core.joined(derived_instance(instance));
    }
    (primary, beside, instance)
}

/// What the driver of a pair does at node 0 (`Engine::feed`, the pair's
/// word) before the joined barrier's core takes a `Join` of node `p`: tells
/// it whether `p` took part in the instance beside (heard there, or a
/// barrier there completed).
pub(super) fn tell_took_part_beside(primary: &mut Net, beside: &Net, p: NodeId) {
    if beside.cores[0].completed_any() || beside.cores[0].heard_in_instance(p) {
        primary.cores[0].took_part_beside(p);
    }
}

#[test]
fn a_restarted_process_is_not_admitted_in_place_of_one_that_took_part_beside() {
    // The barriers of a communicator made with join_with: its own (the
    // primary: MPI_Barrier) often unused, its collectives' (beside, on the
    // derived instance) used. Node 3's process took part in 3 barriers of
    // the instance beside, then was restarted and joins the pair again
    // with a new incarnation. Admitted in place, its barrier beside starts
    // at barrier 0 again, which its peers completed with its predecessor:
    // it is left behind there (Refused at its first call), or, one barrier
    // behind, completes its peers' barrier again from their answers. Node
    // 0 must refuse it, as it does with a single barrier that completed
    // barriers (`Core::on_join`: admissions are tentative only until then).
    let mut config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_millis(500);
    let n = 4;
    let (mut primary, mut beside, instance) = joined_pair(n, config);
    let everyone: Vec<NodeId> = (0..n).collect();
    for _ in 0..3 {
        beside.all(&everyone, |_| Call::Wait { deadline: None });
        assert!(beside.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", beside.done);
    }
    // The same with a single barrier, for comparison: node 0 refuses.
    let mut single = Net::new(n, config);
    for p in 0..n {
        single.create(p, 100 + p as u64);
    }
    single.run_until(single.now + Duration::from_millis(50));
    for _ in 0..3 {
        single.all(&everyone, |_| Call::Wait { deadline: None });
    }
    single.create(3, 200);
    single.run_until(single.now + config.join_timeout + Duration::from_millis(10));
    assert!(matches!(single.joined[3], Some(Err(_))), "a single barrier's node 0 admitted the restarted process: {:?}", single.joined[3]);
    // Node 3 restarts, and joins the pair again.
    tell_took_part_beside(&mut primary, &beside, 3);
    create_beside(&mut primary, 3, 200, &config);
    primary.run_until(primary.now + config.join_timeout + Duration::from_millis(10));
    match &primary.joined[3] {
        Some(Ok(i)) => {
            assert_ne!(*i, instance, "node 3's restarted process was admitted into the pair whose instance beside it took part in (3 barriers)")
        }
        Some(Err(_)) => {}
        None => panic!("node 3's join did not end"),
    }
}

#[test]
fn a_barrier_beside_runs_an_instance_of_its_own_and_frames_of_either_never_count_in_the_other() {
    // The derived instance is neither the primary's nor 0, the same on
    // every node; frames of one, taken in by the other (a transport that
    // shares the wire), count as foreign.
    let config = BarrierConfig::new(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast })
        .timeouts(Duration::from_millis(1), Duration::from_millis(200));
    let n = 5;
    let (mut primary, mut beside, instance) = joined_pair(n, config);
    let derived = derived_instance(instance);
    assert!(derived != instance && derived != 0 && derived_instance(derived) != instance);
    let everyone: Vec<NodeId> = (0..n).collect();
    // Node 1's frames of the primary are fed to its peers' barriers beside,
    // and the other way round, while both run.
    let foreign_before: u64 = beside.cores.iter().chain(primary.cores.iter()).map(|c| c.stats().foreign).sum();
    for p in &everyone {
        primary.call(*p, Call::Wait { deadline: None });
    }
    for p in everyone.iter().filter(|&&p| p != 2) {
        beside.call(*p, Call::Wait { deadline: None });
    }
    let mut crossed = 0;
    for _ in 0..200 {
        let wire: Vec<_> = primary.wire.iter().filter(|w| w.1 == 1).cloned().collect();
        for w in wire {
            beside.wire.push(w);
            crossed += 1;
        }
        let wire: Vec<_> = beside.wire.iter().filter(|w| w.1 == 1).cloned().collect();
        for w in wire {
            primary.wire.push(w);
            crossed += 1;
        }
        let (a, b) = (primary.now + Duration::from_micros(10), beside.now + Duration::from_micros(10));
        primary.run_until(a);
        beside.run_until(b);
    }
    assert!(crossed > 0);
    assert!(primary.done.iter().all(|d| matches!(d, Some(Ok(())))), "the primary's barrier: {:?}", primary.done);
    // Node 2 has not called beside: nobody there completed.
    assert!(beside.done.iter().all(|d| d.is_none()), "a barrier beside completed without node 2: {:?}", beside.done);
    let foreign: u64 = beside.cores.iter().chain(primary.cores.iter()).map(|c| c.stats().foreign).sum();
    assert!(foreign > foreign_before, "no frame was taken for foreign");
    beside.call(2, Call::Wait { deadline: None });
    beside.run_until(beside.now + Duration::from_millis(20));
    assert!(beside.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", beside.done);
}

#[test]
fn a_restarted_process_admitted_beside_does_not_complete_its_peers_barrier_again() {
    // The consequence of the case above, one barrier behind (two or more:
    // it is left behind, `Refused`): 4 nodes, shuffle exchange; barrier 0
    // beside is an allreduce (sum of 1..4: 10 at every node). Node 3 is
    // restarted and admitted into the pair in place; its new process calls
    // the allreduce (1000) as its peers call their second (10, 20, 30).
    // Its barrier 0 completes from its peers' answers of barrier 0 with
    // 1000 + 1 + 2 + 3. It must not return a result of barrier 0 that no
    // peer had.
    let mut config = BarrierConfig::new(Algorithm::ShuffleExchange).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_millis(500);
    let n = 4;
    let (mut primary, mut beside, instance) = joined_pair(n, config);
    let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U64 };
    let run = |net: &mut Net, p: NodeId, v: u64| {
        let input = v.to_ne_bytes();
        net.call(p, Call::EnterCollective { call: sum, count: 1, more: false, input: &input, deadline: None });
        net.call(p, Call::WaitResult { deadline: None });
    };
    let result = |net: &mut Net, p: NodeId| {
        let mut out = [0u8; 8];
        net.cores[p].collective_result(Some(&mut out)).ok().map(|()| u64::from_ne_bytes(out))
    };
    for p in 0..n {
        run(&mut beside, p, p as u64 + 1);
    }
    beside.run_until(beside.now + Duration::from_millis(20));
    for p in 0..n {
        assert!(matches!(beside.done[p], Some(Ok(()))), "node {p}: {:?}", beside.done[p]);
        assert_eq!(result(&mut beside, p), Some(10), "node {p}'s allreduce of barrier 0");
    }
    tell_took_part_beside(&mut primary, &beside, 3);
    create_beside(&mut primary, 3, 200, &config);
    primary.run_until(primary.now + config.join_timeout + Duration::from_millis(10));
    let admitted = matches!(primary.joined[3], Some(Ok(i)) if i == instance);
    let setup = Setup { me: 3, nodes: n, rails: config.rails, multicast: true, max_data: 1000 };
    let mut core = Core::new(setup, config, beside.now).unwrap();
    core.joined(derived_instance(instance));
    beside.cores[3] = core;
    for p in 0..3 {
        run(&mut beside, p, 10 * (p as u64 + 1));
    }
    run(&mut beside, 3, 1000);
    beside.run_until(beside.now + Duration::from_millis(100));
    if let Some(Ok(())) = beside.done[3] {
        let got = result(&mut beside, 3);
        assert!(
            !admitted || got == Some(10),
            "node 3's restarted process (admitted in place: {admitted}) completed barrier 0 beside again, its allreduce {got:?} (its peers': 10)"
        );
    }
}

#[test]
fn a_closing_barrier_proven_complete_still_reports_the_mismatch_its_peers_met() {
    // A finish against a broadcast (node 2 finishes, nodes 0 and 1 call a
    // broadcast from node 0: a plan mismatch) ends as a void barrier at
    // every node, and every node's call of it reports the mismatch
    // (PROTOCOL.md, Plan mismatch). Nodes 0 and 1 learn it from node 2's
    // base message and go over; what they then send node 2 of barrier 0
    // (their base messages, marked MISMATCHED, and their MISMATCH
    // statuses) is lost (answers to node 2's NACKs are not). As soon as
    // their broadcasts end they call a barrier (1), whose messages reach
    // node 2 before its first retry: `closing_proven` completes node 2's
    // closing barrier. Its finish must still say that the barrier was
    // void, as its peers' broadcasts did.
    for algorithm in [Algorithm::Concurrent, Algorithm::OnePhase] {
        let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(200));
        let mut net = Net::new(3, config);
        net.rule = Some(Box::new(|from, to, msg: &Msg| {
            if to == 2 && from != 2 && msg.epoch == 0 && matches!(msg.kind, MsgKind::Data | MsgKind::Status) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        }));
        net.call(2, Call::Finish);
        let input = [7u8; 8];
        for p in [0, 1] {
            net.call(p, Call::EnterCollective { call: Collective::Bcast { root: 0 }, count: 8, more: false, input: &input, deadline: None });
            net.call(p, Call::WaitResult { deadline: None });
        }
        let mut peers: Vec<Option<String>> = vec![None, None];
        let limit = net.now + Duration::from_millis(300);
        while net.now < limit && net.done[2].is_none() {
            for p in [0, 1] {
                if peers[p].is_none() {
                    if let Some(done) = net.done[p].take() {
                        let result = done.and_then(|()| net.cores[p].collective_result(None));
                        peers[p] = Some(format!("{result:?}"));
                        net.call(p, Call::Wait { deadline: None });
                    }
                }
            }
            let step = net.now + Duration::from_micros(5);
            net.run_until(step);
        }
        // (A broadcast's result may come before the mismatch is known: the
        // call after it reports it as it ends, here only once the peers'
        // barrier 1, which node 2 never enters, fails.)
        let finish = net.done[2].take();
        net.run_until(net.now + config.failure_timeout * 3);
        let peers: Vec<String> = peers.into_iter().zip([0, 1]).map(|(r, p)| format!("{}, then {:?}", r.unwrap_or_default(), net.done[p])).collect();
        for p in [0, 1] {
            assert!(
                net.cores[p].protocol_epoch() >= 1 && net.cores[p].window.last_void,
                "{algorithm}: node {p} did not complete barrier 0 void: {peers:?}"
            );
        }
        net.done[2] = finish;
        eprintln!("{algorithm}: peers' broadcasts {peers:?}; node 2's finish {:?}", net.done[2]);
        assert!(
            matches!(net.done[2], Some(Err(BarrierError::CollectiveMismatch { .. }))),
            "{algorithm}: node 2's finish, in a barrier void at its peers ({peers:?}): {:?}",
            net.done[2]
        );
    }
}

/// Review rev33, *Left open* (session 18, helper j): node 1 closes
/// (`close()`, no `finish()`: its progress agent goes on alone), node 2
/// finishes, node 0 calls a broadcast from itself, then a barrier: a plan
/// mismatch, so the closing barrier ends void at every node (PROTOCOL.md,
/// *Plan mismatch*). Node 1's core is served as its agent serves it.
/// Every epoch-0 message to node 2 is lost, so node 2
/// can learn nothing of its closing barrier but from a peer's word of the
/// barrier after it. Runs 100 ms (half the failure timeout); returns
/// `(node 1's try_finish then, node 2's finish by then)`.
fn close_against_a_broadcast(algorithm: Algorithm) -> (Result<bool, BarrierError>, Option<Result<(), BarrierError>>) {
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    let mut net = Net::new(3, config);
    net.rule = Some(Box::new(|from, to, msg: &Msg| if to == 2 && from != 2 && msg.epoch == 0 { Fate::Drop } else { Fate::Deliver }));
    net.call(1, Call::Close);
    assert!(matches!(net.done[1].take(), Some(Ok(()))), "close returns at once");
    net.call(2, Call::Finish);
    let input = [7u8; 8];
    net.call(0, Call::EnterCollective { call: Collective::Bcast { root: 0 }, count: 8, more: false, input: &input, deadline: None });
    net.call(0, Call::WaitResult { deadline: None });
    let limit = net.now + Duration::from_millis(100);
    let mut node0 = 0;
    while net.now < limit {
        if node0 < 2 && net.done[0].take().is_some() {
            node0 += 1;
            net.call(0, Call::Wait { deadline: None });
        }
        let step = net.now + Duration::from_micros(5);
        net.run_until(step);
        // Node 1's progress agent serves at every arrival, not only at its
        // timers (`Engine::serve`: what came, then `handle_timeout`).
        let now = net.now;
        net.cores[1].handle_timeout(now);
        net.flush(1);
    }
    assert!(net.cores[1].protocol_epoch() >= 1 && net.cores[1].window.last_void, "{algorithm}: node 1's closing barrier did not complete void");
    let now = net.now;
    let closed = net.cores[1].try_finish(now);
    net.flush(1);
    (closed, net.done[2].take())
}

#[test]
fn after_close_a_void_closing_barrier_says_no_farewell() {
    // `Core::serve` began the farewell once the closing barrier of a
    // `close()` was complete, void or not. A farewell's words prove the
    // closing barrier complete *and not void* (rev33-3), so node 2, which
    // hears nothing else of it, took node 1's farewell for that proof: its
    // finish returned Ok though every node's closing barrier was void. And
    // node 1's own try_finish, its farewell begun, skipped the barrier's
    // report and returned Ok too: neither application was told.
    for algorithm in [Algorithm::Concurrent, Algorithm::OnePhase] {
        let (closed, finish) = close_against_a_broadcast(algorithm);
        eprintln!("{algorithm}: node 1's try_finish after close {closed:?}; node 2's finish {finish:?}");
        assert!(
            matches!(closed, Err(BarrierError::CollectiveMismatch { .. })),
            "{algorithm}: node 1's try_finish after close(), its closing barrier void: {closed:?}"
        );
        assert!(
            !matches!(finish, Some(Ok(()))),
            "{algorithm}: node 2's finish, its closing barrier void at every peer, returned Ok (node 1's farewell taken for proof that it was not void)"
        );
    }
}

/// Finding j-1 (session 18, the simulator's pairs): the barrier beside a
/// joining one (`join_with`) was not running until the join completed, so
/// a peer admitted first, probing it in its first collective, heard
/// nothing and named it silent. Waiting for the join ([`Core::await_join`])
/// it answers a probe that it is alive, only not admitted (a `JOINING`
/// status, as the joining barrier does), and once given its instance it
/// takes in what came meanwhile. Returns the `JOINING` statuses node 2 sent while it
/// waited, and whether every node then completed barrier 0.
fn beside_waiting_for_its_join(waits: bool) -> (usize, bool) {
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    let mut net = Net::new(3, config);
    let setup = Setup { me: 2, nodes: 3, rails: config.rails, multicast: true, max_data: 1000 };
    net.cores[2] = Core::new(setup, config, net.now).unwrap();
    if waits {
        net.cores[2].await_join(net.now);
    }
    let alive = Rc::new(Cell::new(0usize));
    let seen = alive.clone();
    net.rule = Some(Box::new(move |from, _, msg: &Msg| {
        if from == 2 && msg.kind == MsgKind::Status && msg.tag & crate::transport::status::JOINING != 0 {
            seen.set(seen.get() + 1);
        }
        Fate::Deliver
    }));
    for p in [0, 1] {
        net.call(p, Call::Wait { deadline: None });
    }
    net.run_until(net.now + Duration::from_millis(5));
    let answered = alive.get();
    // The join beside agreed: node 2 runs the instance, and calls.
    let now = net.now;
    if waits {
        net.cores[2].joined_beside(INSTANCE, now);
    } else {
        net.cores[2].joined(INSTANCE);
    }
    net.call(2, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_millis(50));
    (answered, net.done.iter().all(|d| matches!(d, Some(Ok(())))))
}

#[test]
fn a_barrier_beside_a_join_answers_probes_while_it_waits_and_takes_in_what_came() {
    let (answered, completed) = beside_waiting_for_its_join(true);
    assert!(answered > 0, "node 2, waiting for the join beside, answered no probe: its peers would name it silent");
    assert!(completed, "barrier 0 did not complete once node 2 had its instance");
    // Not waiting (as before the fix), it said nothing.
    let (answered, _) = beside_waiting_for_its_join(false);
    assert_eq!(answered, 0, "a barrier not waiting for a join answers nothing");
}
