//! Review rev34 (session 18): session 17's protocol changes at their edges
//! in virtual time: the NACK's echo and the crossings it proves, the NACK's
//! number, the 'not yet' release lesson, the closing barrier's farewell
//! proof, `join_with`'s admission of restarted processes
//! (`notes/review-rev34.md`).

use super::*;

/// Runs until every node in `nodes` is done (`limit` at most); the time it took.
pub(super) fn settle_within(net: &mut Net, nodes: &[NodeId], limit: Duration) -> Duration {
    let start = net.now;
    while nodes.iter().any(|&p| net.done[p].is_none()) && net.now < start + limit {
        let step = net.now + Duration::from_micros(10);
        net.run_until(step);
    }
    net.now - start
}

/// Ten barriers of 2 nodes, in one of which each node's message is lost
/// once (so each measured a round trip: a crossing is then judged by it
/// too, not by the echo alone), and one more.
fn warm_up(net: &mut Net) {
    for b in 0..11 {
        let epoch = net.cores[0].protocol_epoch() as u32;
        net.rule = (b == 5)
            .then(|| -> Rule { Box::new(move |_, _, msg| if msg.kind == MsgKind::Data && msg.epoch == epoch { Fate::Drop } else { Fate::Deliver }) });
        net.all(&[0, 1], |_| Call::Wait { deadline: None });
        assert!((0..2).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    }
    net.rule = None;
    assert!(net.cores.iter().all(|c| c.recovery.reply.is_some()), "a round trip measured at both");
}

/// 2 nodes (dissemination) running `config`, warmed up ([`warm_up`]).
pub(super) fn warm_pair(config: BarrierConfig) -> Net {
    let mut net = Net::new(2, config);
    warm_up(&mut net);
    net
}

/// Nodes 0 and 1 enter the next barrier together, node 0's message of it
/// to node 1 lost: node 1's outcome, how long it took, and its retry
/// timeout before it.
pub(super) fn lose_node_0s_message_of_the_next_barrier(net: &mut Net, failure: Duration) -> (Option<Result<(), BarrierError>>, Duration, Duration) {
    let epoch = net.cores[0].protocol_epoch() as u32;
    net.rule =
        Some(Box::new(move |from, _, msg| if from == 0 && msg.kind == MsgKind::Data && msg.epoch == epoch { Fate::Drop } else { Fate::Deliver }));
    let rto = net.cores[1].recovery.rto.least();
    net.call(0, Call::Wait { deadline: None });
    net.call(1, Call::Wait { deadline: None });
    let took = settle_within(net, &[1], 3 * failure);
    (net.done[1].take(), took, rto)
}

/// rev34-1's scenario: 2 nodes (dissemination), warmed up; in barrier
/// `e − 1` node 1 is away for `away` (its core not driven: no progress
/// agent, the application computing) and takes in node 0's message when it
/// comes back; in barrier `e` both call at once, and node 0's message to
/// node 1 is lost. Returns node 1's outcome of `e`, the time it took, and
/// its retry timeout. (Away longer than the failure timeout, node 1 is
/// named silent by node 0 in `e − 1`, rightly, and node 0 calls again.)
fn lost_after_an_idle_absence(away: Duration, failure: Duration) -> (Option<Result<(), BarrierError>>, Duration, Duration) {
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), failure);
    lost_after_an_idle_absence_in(warm_pair(config), away, failure)
}

/// As [`lost_after_an_idle_absence`], on `net` as it is.
fn lost_after_an_idle_absence_in(mut net: Net, away: Duration, failure: Duration) -> (Option<Result<(), BarrierError>>, Duration, Duration) {
    // Barrier e − 1: node 0 calls; node 1 is away, and calls on its return.
    net.paused[1] = true;
    net.call(0, Call::Wait { deadline: None });
    net.run_until(net.now + away);
    net.paused[1] = false;
    net.run_until(net.now);
    net.call(1, Call::Wait { deadline: None });
    if let Some(Err(e)) = &net.done[0] {
        // (Away longer than the failure timeout: node 0 named it, and
        // calls again; the barrier completes in the background meanwhile.)
        assert!(names(e, 1), "{e}");
        net.call(0, Call::Wait { deadline: None });
    }
    settle_within(&mut net, &[0, 1], failure);
    assert!((0..2).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    // Barrier e: together; node 0's message to node 1 lost.
    lose_node_0s_message_of_the_next_barrier(&mut net, failure)
}

#[test]
fn a_message_taken_in_late_by_an_idle_node_makes_no_echo_that_hides_a_loss() {
    // The echo (PROTOCOL.md, Crossings) says how long before its NACK the
    // asker took in the same message of the barrier before; the answerer
    // compares it with the time between its two sendings. That holds if
    // "took in" is "came". A node whose core is not driven while its
    // application computes between calls (no progress agent; with one, up
    // to its 16 ms grace) takes a message in when it next calls, however
    // long after it came, and with no deadline of its own overdue nothing
    // marks that as a stall.
    let (done, took, rto) = lost_after_an_idle_absence(Duration::from_millis(50), Duration::from_secs(2));
    let (far, far_took, _) = lost_after_an_idle_absence(Duration::from_millis(300), Duration::from_millis(200));
    eprintln!("away 50 ms: node 1's barrier after: {done:?} in {took:?} (retry timeout {rto:?}); away 300 ms (failure timeout 200 ms): {far:?} in {far_took:?}");
    assert!(matches!(done, Some(Ok(()))), "{done:?}");
    assert!(took < rto * 10, "one lost message took {took:?} to recover (retry timeout {rto:?})");
    assert!(matches!(far, Some(Ok(()))), "node 1, its peer live and answering: {far:?} after {far_took:?}");
}

/// rev34-2's scenario: 2 nodes (dissemination), warmed up, node 1's clock
/// `ppm` millionths off node 0's; barrier `e − 1` together, then `gap` of
/// the applications' own work, then barrier `e` together, in which node
/// 0's message to node 1 is lost. Returns node 1's outcome of `e`, the time
/// it took, and its retry timeout.
fn lost_after_a_long_gap(ppm: i64, gap: Duration, failure: Duration) -> (Option<Result<(), BarrierError>>, Duration, Duration) {
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), failure);
    let mut net = Net::new(2, config);
    net.ppm[1] = ppm;
    warm_up(&mut net);
    net.run_until(net.now + gap);
    lose_node_0s_message_of_the_next_barrier(&mut net, failure)
}

#[test]
fn an_echo_over_a_long_gap_between_barriers_tolerates_clocks_of_different_rates() {
    // The echo's test, echo < t − t', compares an interval the asker
    // measured (from the original of barrier e − 1 to its NACK of e) with
    // one the answerer measured (between its two sendings), each on its own
    // clock. What decides is their difference, about a round trip; their
    // clocks' rates' difference times the gap between the barriers is an
    // error on it. (The echo's rounding up, 0 to 1/1024 of it, hides the
    // error in some gaps: several are tried.)
    let mut slow = Vec::new();
    let mut named = Vec::new();
    for k in 0..16u64 {
        let gap = Duration::from_secs(10) + Duration::from_micros(k * 523);
        let (done, took, rto) = lost_after_a_long_gap(-100, gap, Duration::from_secs(2));
        assert!(matches!(done, Some(Ok(()))), "100 ppm, {gap:?}: {done:?}");
        if took >= rto * 40 {
            slow.push(format!("100 ppm, gap {gap:?}: a lost message took {took:?} (retry timeout {rto:?})"));
        }
        let gap = Duration::from_secs(1800) + Duration::from_micros(k * 67_129);
        let (done, took, _) = lost_after_a_long_gap(-500, gap, Duration::from_millis(200));
        if !matches!(done, Some(Ok(()))) {
            named.push(format!("500 ppm, gap {gap:?}: {done:?} after {took:?}"));
        }
    }
    eprintln!("{slow:#?}\n{named:#?}");
    assert!(slow.is_empty() && named.is_empty(), "{} of 16 slow, {} of 16 named a live peer: {slow:#?} {named:#?}", slow.len(), named.len());
}

#[test]
fn a_farewell_said_after_close_of_a_void_closing_barrier_proves_nothing() {
    // rev33-3's fix: only a farewell's word of the barrier after proves a
    // closing barrier complete, because a finish whose closing barrier
    // ended void says no farewell. But a node that called `close()` alone
    // (its application went away; `Core::serve`, the agent's round, runs
    // the farewell) says it whatever its closing barrier's end. 4 nodes:
    // node 2 closes, node 3 finishes, nodes 0 and 1 call a broadcast from
    // node 0 (a plan mismatch: barrier 0 is void everywhere); every epoch-0
    // data message and status to node 3 is lost (answers are not). Node 2's
    // agent serves as its closing barrier completes (void).
    for algorithm in [Algorithm::Concurrent, Algorithm::OnePhase] {
        let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(200));
        let mut net = Net::new(4, config);
        net.rule = Some(Box::new(|from, to, msg: &Msg| {
            if to == 3 && from != 3 && msg.epoch == 0 && matches!(msg.kind, MsgKind::Data | MsgKind::Status) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        }));
        net.call(3, Call::Finish);
        net.call(2, Call::Close);
        assert!(matches!(net.done[2], Some(Ok(()))), "close() returns at once: {:?}", net.done[2]);
        let input = [7u8; 8];
        for p in [0, 1] {
            net.call(p, Call::EnterCollective { call: Collective::Bcast { root: 0 }, count: 8, more: false, input: &input, deadline: None });
            net.call(p, Call::WaitResult { deadline: None });
        }
        let limit = net.now + Duration::from_millis(300);
        while net.now < limit && net.done[3].is_none() {
            // Node 2's progress agent, at every wake.
            let now = net.now;
            net.cores[2].handle_timeout(now);
            net.flush(2);
            let step = net.now + Duration::from_micros(5);
            net.run_until(step);
        }
        assert!(net.cores[2].protocol_epoch() >= 1 && net.cores[2].window.last_void, "{algorithm}: node 2's closing barrier did not end void");
        assert!(
            matches!(net.done[3], Some(Err(BarrierError::CollectiveMismatch { .. }))),
            "{algorithm}: node 3's finish, in a barrier void at every peer: {:?}",
            net.done[3]
        );
    }
}

#[test]
fn a_round_trip_is_not_measured_from_a_nack_an_absent_peer_answered_on_its_return() {
    // `Recovery::replied`: the time from this node's latest NACK to the
    // peer's reply is a round trip. A peer not driven (its application
    // away) replies when it comes back: node 0's first sample is then
    // the time since its last probe, and the shortest sample is both the
    // window in which a NACK is taken for a crossing and the floor of the
    // per-peer answer gap (`Core::reply_floor`).
    let mut results = Vec::new();
    for (away, failure) in [(Duration::from_millis(50), Duration::from_secs(2)), (Duration::from_millis(300), Duration::from_millis(200))] {
        let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), failure);
        let mut net = Net::new(2, config);
        for _ in 0..11 {
            net.all(&[0, 1], |_| Call::Wait { deadline: None });
        }
        let (done, took, rto) = lost_after_an_idle_absence_in(net, away, failure);
        results.push((away, done, took, rto));
    }
    eprintln!("{results:?}");
    for (away, done, took, rto) in &results {
        assert!(matches!(done, Some(Ok(()))), "away {away:?}: {done:?}");
        assert!(*took < *rto * 10, "away {away:?}: one lost message took {took:?} to recover (retry timeout {rto:?})");
    }
}

#[test]
fn a_nack_that_asks_again_is_answered_whatever_its_echo() {
    // The round trip's crossing window is zero for a NACK that asks again
    // after one admitted once the message went (the original did not
    // come); the echo's rule was not: an echo too short by more than the
    // failure timeout left every retry unanswered. An echo can be wrong
    // (a clock's rate, the dating of the original), so at most the first
    // NACK may be taken for a crossing by it.
    let (done, took, rto) = lost_after_a_long_gap(-500_000, Duration::from_millis(600), Duration::from_millis(200));
    eprintln!("node 1's clock at half speed, 600 ms gap: {done:?} in {took:?} (retry timeout {rto:?})");
    assert!(matches!(done, Some(Ok(()))), "node 1, its peer live and answering: {done:?} after {took:?}");
    assert!(took < rto * 40, "one lost message took {took:?} to recover (retry timeout {rto:?})");
}
