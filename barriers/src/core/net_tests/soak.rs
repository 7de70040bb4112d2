//! What the simulator's soak found (`sim::seeds`), each as the smallest
//! case among a few nodes' cores over [`Net`], in virtual time: the
//! protocol's behaviour, one regression a test.

use std::time::Duration;

use super::{names, Fate, Net};
use crate::collective::{Collective, Dtype, Op};
use crate::core::Call;
use crate::plan::Algorithm;
use crate::transport::STATUS_TAG;
use crate::transport::{Msg, MsgKind};
use crate::types::{BarrierConfig, BarrierError};
use std::cell::Cell;
use std::rc::Rc;

#[test]
fn calls_of_different_lengths_cut_into_as_many_full_segments_disagree_at_the_last() {
    // Soak seed 11173 (n = 8, one-phase, 64-byte messages: 13 u32 a
    // segment): nodes 3 and 7 called an allreduce of 286 elements, the
    // others 287. The first 22 segments agreed in every field; nodes 3 and
    // 7 returned Ok from their last, and met the others' 23rd segment as
    // a mismatch only in their next call. Here: one segment each, node
    // `short`'s call ends with it, the others' go on.
    let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
    let input = 1u32.to_ne_bytes();
    for algorithm in Algorithm::all().into_iter().filter(|a| sum.runs_on(*a)) {
        for short in [0, 2] {
            let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(500));
            let mut net = Net::new(3, config);
            for p in 0..3 {
                net.call(p, Call::EnterCollective { call: sum, count: 1, more: p != short, input: &input, deadline: None });
                assert!(matches!(net.done[p], Some(Ok(()))), "{:?}", net.done[p]);
                net.call(p, Call::WaitResult { deadline: None });
            }
            net.run_until(net.now + Duration::from_secs(2));
            for p in 0..3 {
                // (A call whose wait completed meets the mismatch as its result.)
                if let Some(Ok(())) = net.done[p] {
                    net.done[p] = Some(net.cores[p].collective_result(None));
                }
                match &net.done[p] {
                    Some(Err(BarrierError::CollectiveMismatch { .. })) => {}
                    other => panic!("{algorithm}, node {short}'s call ends first: node {p} returned {other:?}"),
                }
            }
        }
    }
}

#[test]
fn a_finish_is_its_nodes_entry_of_the_epoch_its_peers_run_as_a_barrier() {
    // Soak seed 4194497 (the safety checker's epoch mapping rests on
    // this): a restarted process running a shorter script in the barrier
    // its peers made for the next instance finishes where they call a
    // barrier. Its closing barrier is the epoch after its last call: the
    // peers' barrier waits for it, and completes once it finishes.
    let config = BarrierConfig::new(Algorithm::Tree { k: crate::plan::Fanout::FOUR, release: crate::plan::Release::Multicast })
        .timeouts(Duration::from_millis(1), Duration::from_millis(200));
    let mut net = Net::new(3, config);
    net.all(&[0, 1, 2], |_| Call::Wait { deadline: None });
    for p in [0, 1] {
        net.call(p, Call::Wait { deadline: None });
    }
    net.run_until(net.now + Duration::from_millis(50));
    assert!(net.done[0].is_none() && net.done[1].is_none(), "a barrier completed without node 2: {:?}", net.done);
    net.call(2, Call::Finish);
    net.run_until(net.now + Duration::from_millis(50));
    for p in [0, 1] {
        assert!(matches!(net.done[p], Some(Ok(()))), "node {p}'s barrier against node 2's finish: {:?}", net.done[p]);
    }
    assert!(matches!(net.done[2], Some(Ok(()))), "node 2's finish: {:?}", net.done[2]);
}

#[test]
fn a_finish_does_not_wait_for_a_peer_that_gave_up_on_the_closing_barrier() {
    // Soak seed 12568 (and 8 more of 20,000): a node crashed in the closing
    // barrier; some nodes completed it, the others gave up naming it, and
    // their applications kept their barriers without calling again. The
    // farewell of the nodes that completed it queried them for ever (alive,
    // never past it). Here: node 0's release never reaches node 2, which
    // gives up naming node 0 and stays (its core driven, as by its agent).
    // Nothing of node 1's reaches node 2 either: a word of node 1's from
    // the barrier after would tell node 2 that node 1 completed the
    // closing barrier, and so node 2's is complete too (`closing_proven`).
    let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(100));
    let mut net = Net::new(3, config);
    net.all(&[0, 1, 2], |_| Call::Wait { deadline: None });
    net.rule = Some(Box::new(|_, to, _| if to == 2 { Fate::Drop } else { Fate::Deliver }));
    for p in 0..3 {
        net.call(p, Call::Finish);
    }
    net.run_until(net.now + 5 * config.failure_timeout);
    match &net.done[2] {
        Some(Err(error)) => assert!(names(error, 0), "node 2 names another node: {error}"),
        other => panic!("node 2, cut off from node 0, did not fail: {other:?}"),
    }
    // Well before the farewell's 1 s of silence (node 2 is not silent).
    for p in [0, 1] {
        assert!(matches!(net.done[p], Some(Ok(()))), "node {p}'s finish: {:?}", net.done[p]);
    }
}

#[test]
fn a_join_names_a_peer_still_finishing_its_last_instance_not_node_0() {
    // Soak seeds 11234 and 18428: node 7 (here node 2), still finishing
    // the instance before, had not asked to join the next one; its
    // farewell's queries of that instance reached node 1, which is joining.
    // Node 1 took them for a node admitted into an instance by an earlier
    // process of node 0 (restarted) and named node 0, alive and waiting for
    // node 2. A node in the first barrier of an instance is one node 0
    // admitted without this node; one further on is in an instance of its own.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(50));
    config.join_timeout = Duration::from_millis(200);
    let mut net = Net::new(3, config);
    net.dead[2] = true;
    let start = net.now;
    // Node 1 asks first: its own join timeout comes before node 0's (whose
    // word that it gave up would name node 2 anyway).
    net.create(1, 101);
    net.run_until(start + Duration::from_millis(50));
    net.create(0, 100);
    while net.joined[1].is_none() && net.now < start + Duration::from_secs(1) {
        // Node 2's farewell query of its last instance's closing barrier 5.
        let query = Msg { kind: MsgKind::Nack, instance: 0x77, epoch: 6, tag: STATUS_TAG, arg: 0 };
        net.wire.push((net.now + Duration::from_micros(20), 2, 1, 0, query, Vec::new()));
        let step = net.now + Duration::from_millis(5);
        net.run_until(step);
    }
    match &net.joined[1] {
        Some(Err(BarrierError::JoinTimeout { missing, .. })) => assert_eq!(missing, &[2], "node 1"),
        other => panic!("node 1: {other:?}"),
    }
}

#[test]
fn a_restarted_process_admitted_after_its_earlier_one_took_part_is_refused() {
    // Soak seed 35106 (shuffle, n = 8): node 7 entered barrier 0 and
    // crashed; its peers completed barriers 0 and 1 with what it had sent.
    // Node 0, partitioned meanwhile, had heard nothing of it and completed
    // no barrier, so it admitted node 7's restarted process in its place.
    // That process entered barrier 0, two behind its peers, whose answers
    // cover only the barrier before theirs: it named a live peer silent.
    // A peer's message two barriers ahead now refuses it.
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(100));
    let mut net = Net::new(3, config);
    for _ in 0..2 {
        net.all(&[0, 1, 2], |_| Call::Wait { deadline: None });
        assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
    }
    // Node 2 restarts: a new process, admitted into the same instance.
    let fresh = Net::new(3, config).cores.swap_remove(2);
    net.cores[2] = fresh;
    net.all(&[0, 1, 2], |_| Call::Wait { deadline: None });
    match &net.done[2] {
        Some(Err(BarrierError::Refused { node: 2 })) => {}
        other => panic!("node 2, two barriers behind its peers: {other:?}"),
    }
    for p in [0, 1] {
        match &net.done[p] {
            Some(Err(e)) => assert!(names(e, 2), "node {p} names another node: {e}"),
            other => panic!("node {p}: {other:?}"),
        }
    }
    // From then on it neither answers nor sends (soak seed 1021186: once
    // caught up to one barrier behind, its answers kept its peers waiting
    // for the process they count), and every call fails at once.
    let sent = Rc::new(Cell::new(0));
    let counted = sent.clone();
    net.rule = Some(Box::new(move |from, _, _| {
        counted.set(counted.get() + usize::from(from == 2));
        Fate::Deliver
    }));
    net.call(2, Call::Wait { deadline: None });
    assert!(matches!(net.done[2], Some(Err(BarrierError::Refused { node: 2 }))), "{:?}", net.done[2]);
    net.call(0, Call::Wait { deadline: None });
    net.run_until(net.now + 3 * config.failure_timeout);
    assert_eq!(sent.get(), 0, "node 2 still sends after it found itself left behind");
    match &net.done[0] {
        Some(Err(e)) => assert!(names(e, 2), "node 0 names another node: {e}"),
        other => panic!("node 0, waiting again: {other:?}"),
    }
}

#[test]
fn a_join_does_not_take_node_0_for_silent_for_a_few_lost_answers() {
    // Soak seed 34667 (20% loss): node 0's answers to node 3's last four
    // requests were lost, and node 3's join timed out naming node 0, alive
    // and waiting for another node, last heard more than a failure timeout
    // before. Node 0 is silent only once it answered none of ten requests
    // (and a join asks 20 times over its last failure timeout: a few lost
    // answers leave its word fresh). Here node 0's words are lost from 15
    // ms before node 1's join times out.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(50));
    config.join_timeout = Duration::from_millis(200);
    let mut net = Net::new(3, config);
    net.dead[2] = true;
    let (words, lose) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(false)));
    let (seen, losing) = (words.clone(), lose.clone());
    net.rule = Some(Box::new(move |from, _, msg| {
        if from == 0 && msg.kind == MsgKind::Status && losing.get() {
            seen.set(seen.get() + 1);
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    let start = net.now;
    net.create(1, 101);
    net.run_until(start + Duration::from_millis(50));
    net.create(0, 100);
    net.run_until(start + config.join_timeout - Duration::from_millis(15));
    lose.set(true);
    net.run_until(start + config.join_timeout + Duration::from_millis(5));
    assert!(words.get() >= 4, "node 0's last words were dropped (the case under test): {}", words.get());
    match &net.joined[1] {
        Some(Err(BarrierError::JoinTimeout { missing, .. })) => assert_eq!(missing, &[2], "node 1"),
        other => panic!("node 1: {other:?}"),
    }
}

#[test]
fn a_join_that_times_out_names_whom_node_0_waits_for_lately_not_an_old_word() {
    // Soak seed 1022414 (build 60aa53c, 30% loss in bursts): node 6's last
    // word from node 0 named nodes [1, 3, 5] and was 90 ms old when its
    // join timed out; nodes 3 and 5 had asked meanwhile, and node 0's
    // answers to node 6's requests since (20 ms apart: four) were lost.
    // Node 6 named nodes that node 0 had heard. Now a joining node asks 20
    // times over the last failure timeout before its join fails, as a
    // probe does: the word it names at the end is fresh.
    let mut config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_millis(50));
    config.join_timeout = Duration::from_millis(200);
    let mut net = Net::new(4, config);
    let lose = Rc::new(Cell::new(false));
    let losing = lose.clone();
    net.rule = Some(Box::new(move |from, to, msg| match (from, to, msg.kind) {
        (0, 1, MsgKind::Status) if losing.get() => Fate::Drop,
        _ => Fate::Deliver,
    }));
    // Node 3 never asks; node 0 makes the barrier 90 ms after node 1.
    net.dead[3] = true;
    net.dead[0] = true;
    let start = net.now;
    net.create(1, 101);
    net.run_until(start + Duration::from_millis(90));
    net.dead[0] = false;
    net.create(0, 100);
    // Node 0's first word to node 1 names nodes 2 and 3; its words are
    // then lost for 90 ms, while node 2 asks.
    net.run_until(start + Duration::from_millis(105));
    lose.set(true);
    net.run_until(start + Duration::from_millis(110));
    net.create(2, 102);
    net.run_until(start + Duration::from_millis(195));
    lose.set(false);
    net.run_until(start + config.join_timeout + Duration::from_millis(5));
    match &net.joined[1] {
        Some(Err(BarrierError::JoinTimeout { missing, .. })) => assert_eq!(missing, &[3], "node 1"),
        other => panic!("node 1: {other:?}"),
    }
}
