//! Review rev32 (session 16): loss v2's evidence-based waiting, the NACK
//! copies dropped once answered, "not yet" releases and the retry brought
//! forward by frames dropped unread, at their edges in virtual time
//! (`notes/review-rev32.md`).

use std::cell::Cell;
use std::rc::Rc;

use super::*;
use crate::plan::tag;

const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

/// `n` nodes of a 4-ary tree with a multicast release, `warm` barriers done
/// (the retry timeouts learned).
fn warm_tree(n: usize, failure: Duration, warm: usize) -> Net {
    let config = BarrierConfig::new(TREE4).timeouts(Duration::from_millis(1), failure);
    let mut net = Net::new(n, config);
    let everyone: Vec<NodeId> = (0..n).collect();
    for _ in 0..warm {
        net.all(&everyone, |_| Call::Wait { deadline: None });
        assert!(everyone.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    }
    net
}

/// Runs until every node in `nodes` is done (5 s at most); the time it took.
fn settle(net: &mut Net, nodes: &[NodeId]) -> Duration {
    let start = net.now;
    let limit = start + Duration::from_secs(5);
    while nodes.iter().any(|&p| net.done[p].is_none()) && net.now < limit {
        let step = net.now + Duration::from_micros(10);
        net.run_until(step);
    }
    net.now - start
}

#[test]
fn a_gathering_child_whose_arrival_and_every_nack_of_the_release_are_lost_is_asked_for_it() {
    // n = 16, tree4: node 4 gathers first (5, 6, 7 are its children), and
    // its arrival at node 0 is the evidence rule's case. Lose its arrival
    // (every copy) and every NACK of the release it sends node 0 (the
    // evidence): node 0's timer must still ask for it, EVIDENCE_WAITS
    // retry timeouts in.
    let n = 16;
    let mut net = warm_tree(n, Duration::from_millis(500), 30);
    let epoch = net.cores[0].protocol_epoch() as u32;
    let rto = net.cores[0].recovery.rto.get(0);
    let dropped = Rc::new(Cell::new((0u32, 0u32)));
    let d = dropped.clone();
    net.rule = Some(Box::new(move |from, to, msg| {
        if from == 4 && to == 0 && msg.epoch == epoch && msg.kind == MsgKind::Data && msg.tag == tag::ARRIVE {
            d.set((d.get().0 + 1, d.get().1));
            return Fate::Drop;
        }
        if from == 4 && to == 0 && msg.epoch == epoch && msg.kind == MsgKind::Nack {
            d.set((d.get().0, d.get().1 + 1));
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    let everyone: Vec<NodeId> = (0..n).collect();
    for &p in &everyone {
        net.call(p, Call::Wait { deadline: None });
    }
    let took = settle(&mut net, &everyone);
    assert!(everyone.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    assert!(dropped.get().0 >= 1, "the arrival was not lost: {:?}", dropped.get());
    // (Node 0 asks at EVIDENCE_WAITS retry timeouts; the answer and the
    // release take a few latencies more.)
    assert!(took <= rto * 4 + LATENCY * 10, "took {took:?} (node 0's retry timeout {rto:?}, dropped {:?})", dropped.get());
}

#[test]
fn a_gathering_child_that_dies_after_its_lost_arrival_is_named_and_no_live_node_is() {
    let n = 16;
    let failure = Duration::from_millis(200);
    let mut net = warm_tree(n, failure, 30);
    let epoch = net.cores[0].protocol_epoch() as u32;
    let sent = Rc::new(Cell::new(false));
    let s = sent.clone();
    net.rule = Some(Box::new(move |from, to, msg| {
        if from == 4 && to == 0 && msg.epoch == epoch && msg.kind == MsgKind::Data && msg.tag == tag::ARRIVE {
            s.set(true);
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    let everyone: Vec<NodeId> = (0..n).collect();
    for &p in &everyone {
        net.call(p, Call::Wait { deadline: None });
    }
    // Node 4's arrival went (and was lost): it dies at once.
    while !sent.get() {
        let step = net.now + Duration::from_micros(1);
        net.run_until(step);
    }
    net.dead[4] = true;
    let live: Vec<NodeId> = everyone.iter().copied().filter(|&p| p != 4).collect();
    let took = settle(&mut net, &live);
    for &p in &live {
        match net.done[p].as_ref() {
            Some(Err(e)) => assert!(names(e, 4) && !(0..n).any(|q| q != 4 && names(e, q)), "node {p}: {e}"),
            other => panic!("node {p}: {other:?} after {took:?}"),
        }
    }
    assert!(took <= failure * 2, "the verdicts took {took:?} (failure timeout {failure:?})");
}

#[test]
fn a_peer_that_said_not_yet_and_then_died_is_named_within_about_a_failure_timeout() {
    // n = 8, tree4: node 5 (a leaf under node 4) does not call; its core
    // answers node 4's probes "not yet" (node 4 marks the step late and
    // probes at the whole wait so far, once each). Then it dies. Node 4
    // must name it within about a failure timeout of its last word, and no
    // node may name a live one.
    let n = 8;
    let failure = Duration::from_millis(200);
    let mut net = warm_tree(n, failure, 30);
    let others: Vec<NodeId> = (0..n).filter(|&p| p != 5).collect();
    for &p in &others {
        net.call(p, Call::Wait { deadline: None });
    }
    let statuses = Rc::new(Cell::new(0u32));
    let s = statuses.clone();
    net.rule = Some(Box::new(move |from, _, msg| {
        if from == 5 && msg.kind == MsgKind::Status {
            s.set(s.get() + 1);
        }
        Fate::Deliver
    }));
    net.run_until(net.now + Duration::from_millis(20));
    assert!(statuses.get() > 0, "node 5 said nothing");
    let died = net.now;
    net.dead[5] = true;
    settle(&mut net, &others);
    let took = net.now - died;
    for &p in &others {
        match net.done[p].as_ref() {
            Some(Err(e)) => assert!(names(e, 5) && !(0..n).any(|q| q != 5 && names(e, q)), "node {p}: {e}"),
            other => panic!("node {p}: {other:?} after {took:?}"),
        }
    }
    assert!(took <= failure + failure / 2, "named {took:?} after it died (failure timeout {failure:?})");
}

#[test]
fn a_release_held_up_by_a_slow_rank_does_not_slow_the_recovery_of_a_lost_release() {
    // "Not yet" about the release marks it late and its time is learned
    // (PROTOCOL.md, Evidence). An application with one slow rank teaches
    // every waiting node the slow rank's delay. Then a balanced barrier in
    // which leaf 6 (under node 4) loses the whole release: its recovery
    // must still take about a retry timeout of a balanced barrier, not the
    // slow rank's delay.
    let n = 8;
    let mut net = warm_tree(n, Duration::from_millis(2000), 30);
    let before = net.cores[6].recovery.rto.most();
    let slow = Duration::from_millis(5);
    let others: Vec<NodeId> = (0..n).filter(|&p| p != 3).collect();
    for _ in 0..40 {
        for &p in &others {
            net.call(p, Call::Wait { deadline: None });
        }
        net.run_until(net.now + slow);
        net.call(3, Call::Wait { deadline: None });
        let everyone: Vec<NodeId> = (0..n).collect();
        settle(&mut net, &everyone);
        assert!(everyone.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    }
    let after = net.cores[6].recovery.rto.most();
    // A balanced barrier first (so the next one starts together).
    let everyone: Vec<NodeId> = (0..n).collect();
    net.all(&everyone, |_| Call::Wait { deadline: None });
    let epoch = net.cores[0].protocol_epoch() as u32;
    net.rule = Some(Box::new(move |from, to, msg| {
        if from == 0 && to == 6 && msg.epoch == epoch && msg.tag == tag::RELEASE && msg.kind == MsgKind::Data {
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    for &p in &everyone {
        net.call(p, Call::Wait { deadline: None });
    }
    let took = settle(&mut net, &[6]);
    assert!(matches!(net.done[6], Some(Ok(()))), "{:?}", net.done[6]);
    eprintln!("leaf 6's release step retry timeout: {before:?} balanced, {after:?} after 40 barriers with a {slow:?} slow rank; the lost release took {took:?}");
    assert!(took < slow / 2, "leaf 6's release retry timeout {before:?} -> {after:?}; the lost release took {took:?}");
}

#[test]
fn ring_loss_retries_count_only_retries_brought_forward() {
    // n = 2 (dissemination): node 0 stops, node 1 waits and backs off.
    // Frames dropped unread, told three times at once (a flood): one retry
    // is brought forward (the next no sooner than a round trip later), and
    // `ring_loss_retries` ("retries brought forward") must say so.
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_secs(2));
    let mut net = Net::new(2, config);
    for _ in 0..10 {
        net.all(&[0, 1], |_| Call::Wait { deadline: None });
    }
    let nacks = Rc::new(Cell::new(0u32));
    let c = nacks.clone();
    net.rule = Some(Box::new(move |from, _, msg| {
        if from == 1 && msg.kind == MsgKind::Nack {
            c.set(c.get() + 1);
        }
        Fate::Deliver
    }));
    net.paused[0] = true;
    net.call(1, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_millis(30));
    let (before, retries_before) = (nacks.get(), net.cores[1].stats().ring_loss_retries);
    let now = net.now;
    for _ in 0..3 {
        net.cores[1].frames_lost(now);
    }
    net.cores[1].handle_timeout(now);
    net.flush(1);
    // Run on to just before the second could come.
    let floor = net.cores[1].config.min_retry_timeout;
    net.run_until(now + floor / 2);
    let brought = nacks.get() - before;
    let counted = net.cores[1].stats().ring_loss_retries - retries_before;
    assert_eq!(brought, 1, "NACKs sent at once");
    assert_eq!(counted, u64::from(brought), "ring_loss_retries counted {counted} for {brought} retry brought forward");
}

#[test]
fn a_late_leafs_lost_arrival_costs_its_parent_a_fraction_of_the_lateness() {
    // n = 8, tree4: leaf 5 (under node 4, not node 0) enters 10 ms late;
    // node 4 probed it meanwhile and was told "not yet" (late). When 5
    // enters, its arrival (every copy) is lost. Node 4 has no evidence of
    // the loss (5 asks node 0 for the release, not node 4, below 512
    // nodes), so it finds out at its next probe: at a quarter of the wait
    // so far, not the whole (finding 2: 5.45 ms after 5 entered, 930 µs
    // fixed).
    let n = 8;
    let late = Duration::from_millis(10);
    let mut net = warm_tree(n, Duration::from_secs(2), 30);
    let epoch = net.cores[0].protocol_epoch() as u32;
    let dropped = Rc::new(Cell::new(0u32));
    let d = dropped.clone();
    net.rule = Some(Box::new(move |from, to, msg| {
        if from == 5 && to == 4 && msg.epoch == epoch && msg.kind == MsgKind::Data && msg.tag == tag::ARRIVE {
            d.set(d.get() + 1);
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    let others: Vec<NodeId> = (0..n).filter(|&p| p != 5).collect();
    for &p in &others {
        net.call(p, Call::Wait { deadline: None });
    }
    net.run_until(net.now + late);
    net.call(5, Call::Wait { deadline: None });
    let took = settle(&mut net, &(0..n).collect::<Vec<_>>());
    assert!((0..n).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    assert!(dropped.get() >= 1, "nothing lost");
    eprintln!("leaf 5 entered {late:?} late, its arrival lost ({} copies): the barrier took {took:?} more", dropped.get());
    assert!(took <= late / 2, "a lost arrival of a leaf {late:?} late cost {took:?} after it entered");
}

#[test]
fn at_512_nodes_a_subtree_that_lost_the_release_gets_it_within_a_few_retry_timeouts() {
    // n = 512, tree4 (children ask their parent for node 0's release, and
    // the release timer waits EVIDENCE_WAITS retry timeouts for evidence):
    // node 20 (under 16; its children 21, 22, 23) and its children lose
    // every copy of the release. 21 asks 20, which has not got it either
    // and says it is still in the barrier (21 marks the release late and
    // probes at the whole wait); 20 asks 16 once its evidence wait is over.
    // The last barrier of a phase: no next barrier brings evidence.
    let n = 512;
    let mut net = warm_tree(n, Duration::from_secs(2), 5);
    let rto = net.cores[21].recovery.rto.most();
    let epoch = net.cores[0].protocol_epoch() as u32;
    net.rule = Some(Box::new(move |from, to, msg| {
        if from == 0 && (20..24).contains(&to) && msg.epoch == epoch && msg.kind == MsgKind::Data && msg.tag == tag::RELEASE {
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    let everyone: Vec<NodeId> = (0..n).collect();
    for &p in &everyone {
        net.call(p, Call::Wait { deadline: None });
    }
    let took = settle(&mut net, &everyone);
    assert!(everyone.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{:?}", &net.done[16..24]);
    let slowest = settle(&mut net, &[20, 21, 22, 23]);
    eprintln!("512 nodes, subtree 20..23 lost the release: all done in {took:?} ({slowest:?}); leaf 21's retry timeout {rto:?}");
    assert!(took <= rto * 8, "took {took:?} (retry timeout {rto:?})");
}

/// Review rev32-5's scenario: n = 16, tree4, lossless; node p (4, 5, 1,
/// 0) stops before its call for 0.5 to 8 retry timeouts. Returns a line for
/// each pause after which something was answered (sent again).
fn descheduled_around_the_evidence_wait() -> Vec<String> {
    let n = 16;
    let mut net = warm_tree(n, Duration::from_secs(2), 30);
    let rto = net.cores[0].recovery.rto.get(0);
    let everyone: Vec<NodeId> = (0..n).collect();
    let answers = |net: &Net| net.cores.iter().map(|c| c.stats().answers).sum::<u64>();
    let nacks = |net: &Net| net.cores.iter().map(|c| c.stats().nacks_sent).sum::<u64>();
    let mut report = Vec::new();
    for p in [4, 5, 1, 0] {
        for tenths in [5u32, 10, 15, 19, 20, 21, 25, 30, 40, 80] {
            let d = rto * tenths / 10;
            let (a0, n0) = (answers(&net), nacks(&net));
            for &q in everyone.iter().filter(|&&q| q != p) {
                net.call(q, Call::Wait { deadline: None });
            }
            net.paused[p] = true;
            net.run_until(net.now + d);
            net.paused[p] = false;
            net.call(p, Call::Wait { deadline: None });
            settle(&mut net, &everyone);
            assert!(everyone.iter().all(|&q| matches!(net.done[q], Some(Ok(())))), "node {p} paused {d:?}: {:?}", net.done);
            // Two barriers more, together: the echoes die out.
            for _ in 0..2 {
                net.all(&everyone, |_| Call::Wait { deadline: None });
            }
            let (a, k) = (answers(&net) - a0, nacks(&net) - n0);
            if a > 0 {
                report.push(format!("node {p} paused {d:?} ({tenths}/10 of {rto:?}): {a} answers, {k} NACKs"));
            }
        }
    }
    report
}

#[test]
fn echoes_keep_the_crossings_of_a_descheduled_node_from_being_answered() {
    // rev32-5 with the 16-bit echoes of protocol 10 (each the whole time
    // since the barrier before's message, about 1 ms here, so 0.5-1 us
    // coarse): the 2 pauses whose NACKs crossed the release by 9 and 180
    // ns were answered; without echoes 11 of the 40 were (node 0 never
    // measures a round trip on a clean network, so nothing else tells it
    // that a NACK crossed). A bound that holds without the finer echo of
    // protocol 11 (the test below asks for none).
    let report = descheduled_around_the_evidence_wait();
    assert!(report.len() <= 2, "{} pauses answered (2 with 16-bit whole echoes, 11 without):\n{}", report.len(), report.join("\n"));
}

#[test]
fn a_node_descheduled_around_the_evidence_wait_on_a_lossless_network_costs_no_recovery_beyond_a_rate_changes_margin() {
    // Issue 29's goal (the lead's note of session 15): on a clean network a
    // node descheduled for a few retry timeouts must not set off
    // recoveries (messages sent again). n = 16, tree4, lossless: before
    // its call, node p stops for d (around EVIDENCE_WAITS retry timeouts),
    // then calls. p: node 4 (gathers first), 5 (a leaf under it), 1 (a
    // leaf of node 0), 0 (the root). (rev32-5: 11 of 40 pauses answered
    // before echoes; 2 with echoes of the whole time since the barrier
    // before's message, 0.5-1 us coarse, whose NACKs crossed by 9 and 180
    // ns; none with echoes of its difference from the interval before,
    // protocol 11: the crossing by 9 ns had an echo of exactly 0.) Protocol
    // 12 allows for the asker's clock rate changing by 500 ppm between the
    // two intervals a change compares (review rev35, finding 2), 0.5 us at
    // this 1 ms pace: the two NACKs that crossed node 0's release by 9 and
    // 268 ns (node 1 paused 20 us, node 0 160 us) are within it and
    // answered (a margin errs toward an answer, not toward a lost message
    // left to its asker's retry). Every other crossing clears it.
    let report = descheduled_around_the_evidence_wait();
    assert!(report.len() <= 2, "recoveries on a lossless network:\n{}", report.join("\n"));
}
