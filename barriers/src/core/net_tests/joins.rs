//! The join among nodes: delayed and replayed joins, restarted node 0s,
//! joins that time out, and frames of earlier runs (issue 26, reviews
//! rev27 and rev28).

use super::*;

/// Every node joined the same instance, and a barrier completes.
fn joined_and_running(net: &mut Net) {
    let instances: Vec<_> = net.joined.iter().map(|j| *j.as_ref().expect("joined").as_ref().expect("joined")).collect();
    assert!(instances.iter().all(|&i| i == instances[0]), "{instances:?}");
    let everyone: Vec<NodeId> = (0..net.cores.len()).collect();
    net.all(&everyone, |_| Call::Wait { deadline: None });
    assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
}

#[test]
fn a_delayed_join_of_an_earlier_barrier_is_not_taken_for_the_next() {
    // Issue 26: a copy of node 1's join of an earlier barrier, delayed,
    // reached node 0 before node 1's own and was admitted: node 1 was then
    // refused as if restarted, and node 0 named it silent.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let mut net = Net::new(3, config);
    for p in [0, 2] {
        net.create(p, 100 + p as u64);
    }
    let stale = Msg { kind: MsgKind::Join, instance: 7, epoch: 0, tag: 0, arg: fingerprint_of(&config, PROTOCOL) };
    net.wire.push((net.now + LATENCY, 1, 0, 0, stale, Vec::new()));
    net.run_until(net.now + Duration::from_millis(2));
    assert!(net.joined[0].is_some(), "node 0 admitted the stale request (the case under test)");
    net.create(1, 101);
    net.run_until(net.now + config.join_timeout + Duration::from_millis(10));
    joined_and_running(&mut net);
}

#[test]
fn a_node_admitted_by_node_0s_crashed_process_is_silent_to_the_restarted_ones_barrier() {
    // Soak seed 4631221 (n = 3; the checker's rule `Checker::elsewhere`
    // rests on this): node 0's first process admits node 1 (node 2's
    // admission is lost) and crashes; a request node 1 sent before its
    // admission reached it comes to node 0's restarted process, which then
    // admits node 1 with node 2. Node 1 runs the first barrier and answers
    // nothing of the second: PROTOCOL.md's join, "no barrier of that
    // instance completes without this node". Node 0's new barrier names it
    // silent after the failure timeout; node 2 is told so.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(100));
    config.join_timeout = Duration::from_secs(2);
    let mut net = Net::new(3, config);
    let cut = std::rc::Rc::new(std::cell::Cell::new(true));
    let blocked = cut.clone();
    // Node 2 is cut off from node 0 (after its first request) until healed.
    let mut asked = false;
    net.rule = Some(Box::new(move |from, to, msg| match (from, to) {
        (2, 0) if msg.kind == MsgKind::Join && !std::mem::replace(&mut asked, true) => Fate::Deliver,
        (0, 2) | (2, 0) if blocked.get() => Fate::Drop,
        _ => Fate::Deliver,
    }));
    for p in 0..3 {
        net.create(p, 100 + p as u64);
    }
    net.run_until(net.now + Duration::from_millis(5));
    let first = match net.joined[1] {
        Some(Ok(instance)) => instance,
        ref other => panic!("node 1 was not admitted by node 0's first process: {other:?}"),
    };
    assert!(net.joined[2].is_none(), "node 2's admission was lost (the case under test)");
    // Node 0 crashes and restarts; node 1's early request reaches the new process.
    net.create(0, 200);
    let early = Msg { kind: MsgKind::Join, instance: 101, epoch: 0, tag: 0, arg: fingerprint_of(&config, PROTOCOL) };
    net.wire.push((net.now + LATENCY, 1, 0, 0, early, Vec::new()));
    net.run_until(net.now + Duration::from_millis(5));
    cut.set(false);
    net.run_until(net.now + Duration::from_millis(100));
    let second = match net.joined[0] {
        Some(Ok(instance)) => instance,
        ref other => panic!("node 0's restarted process did not admit its peers: {other:?}"),
    };
    assert!(matches!(net.joined[2], Some(Ok(i)) if i == second), "node 2: {:?}", net.joined[2]);
    assert_ne!(first, second);
    assert!(matches!(net.joined[1], Some(Ok(i)) if i == first), "node 1 stays in the first barrier: {:?}", net.joined[1]);
    // The new barrier never completes without node 1, which answers nothing of it.
    net.all(&[0, 2], |_| Call::Wait { deadline: None });
    match &net.done[0] {
        Some(Err(BarrierError::PeerSilent { silent, .. })) => assert_eq!(silent, &vec![1]),
        other => panic!("node 0: {other:?}"),
    }
    match &net.done[2] {
        Some(Err(e)) => assert!(names(e, 1), "node 2 names another node: {e}"),
        other => panic!("node 2: {other:?}"),
    }
}

#[test]
fn a_new_barrier_of_a_quick_node_waits_for_node_0_to_drop_its_old_one() {
    // Issue 26: node 1 dropped its barrier without finish() and made a new
    // one on the same transport at once; node 0's old barrier, still
    // running, refused node 1's join as restarted, and the join failed.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let mut net = Net::new(2, config);
    net.create(0, 100);
    net.create(1, 101);
    net.run_until(net.now + Duration::from_millis(10));
    joined_and_running(&mut net);
    net.create(1, 201);
    net.run_until(net.now + Duration::from_millis(30));
    assert!(net.joined[1].is_none(), "node 1's join ended while node 0 still ran its old barrier: {:?}", net.joined[1]);
    net.create(0, 200);
    net.run_until(net.now + Duration::from_millis(100));
    joined_and_running(&mut net);
}

#[test]
fn a_live_peer_behind_a_deadline_is_reported_alive_and_waited_for_on_retry() {
    // (tests/edges.rs has the same over threads and real time.) Node 2
    // computes for 7 failure timeouts before barrier 1, alive throughout;
    // the others' waits end at each 150 ms deadline naming it alive, and
    // the barrier completes when it comes.
    use crate::types::PeerState;
    let config = BarrierConfig::new(Algorithm::Dissemination)
        .timeouts(Duration::from_millis(1), Duration::from_millis(100))
        .deadline(Some(Duration::from_millis(150)));
    let mut net = Net::new(3, config);
    net.all(&[0, 1, 2], |_| Call::Wait { deadline: None });
    let start = net.now;
    let wait = |net: &mut Net, p: NodeId| {
        let deadline = Some(net.now + Duration::from_millis(150));
        net.call(p, Call::Wait { deadline });
    };
    net.done[2] = None; // (node 2 computes)
    wait(&mut net, 0);
    wait(&mut net, 1);
    let mut deadlines = [0, 0];
    while net.now < start + Duration::from_secs(2) && !(net.done[0].is_some() && net.done[1].is_some() && net.done[2].is_some()) {
        if net.now >= start + Duration::from_millis(700) && net.done[2].is_none() && !net.cores[2].busy() {
            net.call(2, Call::Wait { deadline: None });
        }
        let step = net.now + Duration::from_millis(1);
        net.run_until(step);
        for p in [0, 1] {
            if let Some(Err(e)) = &net.done[p] {
                let BarrierError::Deadline { epoch: 1, waiting_for, .. } = e else { panic!("node {p}: {e}") };
                assert!(waiting_for.iter().all(|(_, s)| matches!(s, PeerState::Alive { .. })), "node {p}: {e}");
                deadlines[p] += 1;
                wait(&mut net, p);
            }
        }
    }
    let states: Vec<_> = net.cores.iter().map(|c| (c.protocol_epoch(), c.in_progress(), c.busy(), c.stats())).collect();
    assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?} {:?} {:?} at {:?}", net.done, deadlines, states, net.now - start);
    assert!(deadlines.iter().all(|&d| d >= 2), "a 150 ms deadline over 700 ms: {deadlines:?}");
}

#[test]
fn a_verdict_does_not_outlive_the_silent_peers_return() {
    // (tests/edges.rs has the same over threads and real time.) Node 3 has
    // no progress agent and stays away for four failure timeouts before
    // barrier 1: the others fail naming it, call again, and complete once
    // it is back; no error after that.
    let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(100));
    let mut net = Net::new(4, config);
    let everyone: Vec<NodeId> = (0..4).collect();
    net.all(&everyone, |_| Call::Wait { deadline: None });
    net.paused[3] = true;
    let start = net.now;
    for p in 0..3 {
        net.call(p, Call::Wait { deadline: None });
    }
    let mut errors = [0; 3];
    while net.now < start + Duration::from_secs(2) && !everyone.iter().all(|&p| matches!(net.done[p], Some(Ok(())))) {
        if net.paused[3] && net.now >= start + Duration::from_millis(400) {
            net.paused[3] = false;
            net.call(3, Call::Wait { deadline: None });
        }
        let step = net.now + Duration::from_millis(1);
        net.run_until(step);
        for (p, count) in errors.iter_mut().enumerate() {
            if let Some(Err(e)) = &net.done[p] {
                assert!(names(e, 3), "node {p}: {e}");
                *count += 1;
                net.call(p, Call::Wait { deadline: None });
            }
        }
    }
    assert!(everyone.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    assert!(errors.iter().all(|&e| (1..20).contains(&e)), "calling again waits, it does not fail at once: {errors:?}");
    net.all(&everyone, |_| Call::Wait { deadline: None });
    assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "an error after node 3 came back: {:?}", net.done);
}

#[test]
fn rev27_a_replayed_join_with_a_larger_incarnation_does_not_refuse_the_live_node() {
    // Review of issue 27 (rev27), finding 2, the Join half. A Join of node
    // 1 recorded in an earlier run whose incarnation is numerically larger
    // than the live one's (drawn on a host whose clock was ahead; before
    // finding 1's fix, also any Join recorded before the 12.7-day wrap) is
    // replayed to node 0 before the live node 1 asks. Node 0 kept the
    // largest ("the newest wins"): the live node 1 was sent an Admit that
    // echoed the old incarnation (ignored), then refused on every request.
    // Now the request heard last stands for its node until the node is
    // heard in the instance, whatever the incarnations' sizes.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let mut net = Net::new(3, config);
    for p in [0, 2] {
        net.create(p, 100 + p as u64);
    }
    // Recorded in an earlier run, just before the wrap: time bits all ones.
    let recorded = (0xFF_FFFF_FFFFu64 << 24) | 0x12_3457;
    let replayed = Msg { kind: MsgKind::Join, instance: recorded, epoch: 0, tag: 0, arg: fingerprint_of(&config, PROTOCOL) };
    net.wire.push((net.now + LATENCY, 1, 0, 0, replayed, Vec::new()));
    net.run_until(net.now + Duration::from_millis(2));
    assert!(net.joined[0].is_some(), "node 0 admitted the replayed request (the case under test)");
    net.create(1, 101);
    net.run_until(net.now + config.join_timeout + Duration::from_millis(10));
    joined_and_running(&mut net);
}

#[test]
fn rev27_a_replayed_join_arriving_after_the_live_one_with_a_smaller_incarnation_is_harmless() {
    // Review of issue 27 (rev27), what held: node 1's live Join first, then
    // a replay of an earlier run's (smaller incarnation) before node 2
    // joins: node 0 keeps the live one and every node runs.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let mut net = Net::new(3, config);
    net.create(0, 100);
    net.create(1, 101);
    net.run_until(net.now + Duration::from_millis(2));
    let replayed = Msg { kind: MsgKind::Join, instance: 7, epoch: 0, tag: 0, arg: fingerprint_of(&config, PROTOCOL) };
    net.wire.push((net.now + LATENCY, 1, 0, 0, replayed, Vec::new()));
    net.run_until(net.now + Duration::from_millis(2));
    assert!(net.joined[0].is_none() && net.joined[1].is_none(), "node 2 has not asked yet");
    net.create(2, 102);
    net.run_until(net.now + config.join_timeout + Duration::from_millis(10));
    joined_and_running(&mut net);
}

#[test]
fn rev27_an_earlier_runs_frames_filling_a_joining_nodes_stash_cost_no_barrier() {
    // Review of issue 27 (rev27), what held: frames of an earlier run with
    // the same key verify and are new to a new endpoint, so they reach a
    // joining node's engine, which keeps up to JOIN_STASH messages that
    // come before its admission. An attacker fills node 1's stash with an
    // earlier run's data (4096 frames, each sent once) while its Admit is
    // lost; node 2's real entry for barrier 0 finds the stash full. The
    // barrier still completes everywhere, with the right instance.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let mut net = Net::new(3, config);
    let mut lost = false;
    net.rule = Some(Box::new(move |_, to, m: &Msg| {
        if to == 1 && m.kind == MsgKind::Admit && !lost {
            lost = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    for p in 0..3 {
        net.create(p, 100 + p as u64);
    }
    let at = net.now + LATENCY / 2;
    for i in 0..4096u32 {
        let old = Msg { kind: MsgKind::Data, instance: 0x01d0_u64 | 1, epoch: i % 4, tag: 0, arg: i };
        net.wire.push((at, 2, 1, 0, old, Vec::new()));
    }
    net.run_until(net.now + Duration::from_micros(100));
    assert!(net.joined[1].is_none(), "node 1's Admit was lost (the case under test)");
    assert!(net.joined[0].is_some() && net.joined[2].is_some());
    let start = net.now;
    net.call(0, Call::Wait { deadline: None });
    net.call(2, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_micros(100));
    assert!(net.joined[1].is_none(), "node 2's entry reached node 1 before its admission");
    net.call(1, Call::Wait { deadline: None });
    let limit = net.now + Duration::from_secs(5);
    while net.done.iter().any(Option::is_none) && net.now < limit {
        let step = net.now + Duration::from_millis(1);
        net.run_until(step);
    }
    assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?} after {:?}", net.done, net.now - start);
    assert!(net.now - start < Duration::from_millis(200), "within the failure timeout: {:?}", net.now - start);
    let instances: Vec<_> = net.joined.iter().map(|j| *j.as_ref().expect("joined").as_ref().expect("joined")).collect();
    assert!(instances.iter().all(|&i| i == instances[0]), "{instances:?}");
}

#[test]
fn a_join_that_times_out_names_the_node_node_0_waits_for_not_node_0() {
    // Seed mix 67: node 3, partitioned from node 0, never asked to join;
    // the nodes that reached node 0 failed their join naming node 0, which
    // was alive and only waited for node 3. Node 0 now answers a request
    // with whom it waits for.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(50));
    config.join_timeout = Duration::from_millis(200);
    let mut net = Net::new(4, config);
    net.dead[3] = true;
    let start = net.now;
    for p in 0..2 {
        net.create(p, 100 + p as u64);
    }
    // Node 2 asks 100 ms later: when node 0 gives up, it tells node 2,
    // whose own join timeout is still 100 ms away (else, a slow clock's
    // node would name node 0, silent since it gave up).
    net.run_until(start + Duration::from_millis(100));
    net.create(2, 102);
    net.run_until(start + config.join_timeout + Duration::from_millis(10));
    for p in 0..3 {
        let Some(Err(BarrierError::JoinTimeout { missing, .. })) = &net.joined[p] else { panic!("node {p}: {:?}", net.joined[p]) };
        assert_eq!(missing, &[3], "node {p}");
    }
}

#[test]
fn a_joining_node_out_of_node_0s_reach_is_not_named_silent_by_a_peer_that_reaches_it() {
    // Seed mix 96: node 1's admission is lost, and node 0 is out of its
    // reach; node 2 reaches both. Node 1 could not answer node 2's probes
    // (not admitted), so node 2 named it silent, though it was not silent
    // to node 2. Now it answers that it is joining: node 2 fails on node
    // 0's report instead (node 1 is silent to node 0).
    let mut config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(100));
    config.join_timeout = Duration::from_secs(2);
    let mut net = Net::new(3, config);
    // Node 1's first request reaches node 0; nothing else passes between them.
    let mut first = true;
    net.rule = Some(Box::new(move |from, to, msg| match (from, to) {
        (1, 0) if msg.kind == MsgKind::Join && std::mem::take(&mut first) => Fate::Deliver,
        (0, 1) | (1, 0) => Fate::Drop,
        _ => Fate::Deliver,
    }));
    for p in 0..3 {
        net.create(p, 100 + p as u64);
    }
    net.run_until(net.now + Duration::from_millis(5));
    assert!(net.joined[0].is_some() && net.joined[2].is_some() && net.joined[1].is_none());
    // Node 2 waits 50 ms longer than node 0: without an answer from node
    // 1, it would reach its own verdict first.
    net.call(2, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_millis(50));
    net.call(0, Call::Wait { deadline: None });
    net.run_until(net.now + 3 * config.failure_timeout);
    match &net.done[0] {
        Some(Err(BarrierError::PeerSilent { silent, .. })) => assert_eq!(silent, &vec![1]),
        other => panic!("node 0: {other:?}"),
    }
    match &net.done[2] {
        Some(Err(BarrierError::PeerFailed { reporter: 0, silent: 1, .. })) => {}
        other => panic!("node 2 (node 1 answers it): {other:?}"),
    }
}

/// Review of issue 27 (rev28): two incarnations of node 1, the live one
/// and one of an earlier run under the same secret, that agree in their
/// low 32 bits (the 12 low bits of their milliseconds and their 20 random
/// bits: one recorded frame in 2^31 does, whatever the clocks).
fn rev28_incarnations() -> (u64, u64) {
    let live = (1_790_000_000_000u64 << 20) | 0x5_4321;
    let recorded = live - (4096 << 20); // drawn 4.096 s earlier, in another run
    assert_eq!(live as u32, recorded as u32);
    assert_ne!(live, recorded);
    (live, recorded)
}

#[test]
fn rev28_an_admit_recorded_in_an_earlier_run_does_not_admit_the_live_node() {
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let (live, recorded) = rev28_incarnations();
    let mut net = Net::new(3, config);
    for p in [0, 2] {
        net.create(p, 100 + p as u64);
    }
    net.create(1, live);
    // Node 0's Admit of the earlier run, replayed to node 1 before node 0's live one comes.
    let old_instance = 0x0bad_1257_0000_0001;
    // (Since protocol 7 an Admit carries the incarnation's high 32 bits in `epoch`.)
    let old_admit = Msg { kind: MsgKind::Admit, instance: old_instance, epoch: (recorded >> 32) as u32, tag: 0, arg: recorded as u32 };
    net.wire.push((net.now + LATENCY / 2, 0, 1, 0, old_admit, Vec::new()));
    net.run_until(net.now + config.join_timeout + Duration::from_millis(10));
    assert!(!matches!(net.joined[1], Some(Ok(i)) if i == old_instance), "node 1 joined the earlier run's instance on a replayed Admit");
    joined_and_running(&mut net);
}

#[test]
fn rev28_a_failed_join_word_recorded_in_an_earlier_run_does_not_fail_the_live_join() {
    use crate::transport::status;
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let (live, recorded) = rev28_incarnations();
    let mut net = Net::new(3, config);
    net.create(1, live);
    // Node 0 of the earlier run gave up on node 2 and said so to node 1 (thrice).
    let word = Msg { kind: MsgKind::Status, instance: 0, epoch: recorded as u32, tag: status::JOINING | status::FAILED, arg: 3 };
    // (Since protocol 7 the word's data names the whole incarnation first.)
    let data = [&recorded.to_le_bytes()[..], &2u32.to_le_bytes()].concat();
    net.wire.push((net.now + LATENCY, 0, 1, 0, word, data));
    net.run_until(net.now + Duration::from_millis(2));
    assert!(net.joined[1].is_none(), "node 1's join failed on a word of an earlier run: {:?}", net.joined[1]);
    for p in [0, 2] {
        net.create(p, 100 + p as u64);
    }
    net.run_until(net.now + config.join_timeout + Duration::from_millis(10));
    joined_and_running(&mut net);
}

#[test]
fn rev28_a_joining_node_answers_replayed_nacks_of_an_earlier_run_at_a_bounded_rate() {
    use crate::transport::status;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.join_timeout = Duration::from_secs(1);
    let mut net = Net::new(3, config);
    // Node 1 asks to join; node 0 is not there yet.
    net.create(1, 101);
    let answers = Arc::new(AtomicU64::new(0));
    let counted = answers.clone();
    net.rule = Some(Box::new(move |from, to, m: &Msg| {
        if from == 1 && to == 2 && m.kind == MsgKind::Status && m.tag & status::JOINING != 0 {
            counted.fetch_add(1, Ordering::Relaxed);
        }
        Fate::Deliver
    }));
    // 1000 NACKs "from" node 2 of an earlier run's instance, within 1 ms.
    let start = net.now;
    for i in 0..1000u32 {
        let nack = Msg { kind: MsgKind::Nack, instance: 0x0bad_0000_0000_0001, epoch: i % 8, tag: 0, arg: 0 };
        net.wire.push((start + LATENCY + Duration::from_micros(u64::from(i)), 2, 1, 0, nack, Vec::new()));
    }
    net.run_until(start + Duration::from_millis(2));
    let answered = answers.load(Ordering::Relaxed);
    // The admitted nodes' limit: one answer per peer per quarter retry timeout.
    assert!(answered <= 10, "node 1 answered {answered} of 1000 NACKs of another instance within 1 ms");
}
