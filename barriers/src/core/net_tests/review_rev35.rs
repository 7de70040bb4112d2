//! Review rev35 (session 18): the relative echo (PROTOCOL 11, a NACK's
//! echo as its change `E − I` from the interval before) at its edges, in
//! virtual time (`notes/review-rev35.md`).

use super::*;

/// Runs until every node in `nodes` is done (`limit` at most); the time it took.
fn settle_within(net: &mut Net, nodes: &[NodeId], limit: Duration) -> Duration {
    let start = net.now;
    while nodes.iter().any(|&p| net.done[p].is_none()) && net.now < start + limit {
        let step = net.now + Duration::from_micros(10);
        net.run_until(step);
    }
    net.now - start
}

/// 2 nodes (dissemination), ten barriers 1 ms apart, in one of which each
/// node's message is lost once (a round trip measured at both).
fn warm_pair(config: BarrierConfig) -> Net {
    let mut net = Net::new(2, config);
    for b in 0..11 {
        let epoch = net.cores[0].protocol_epoch() as u32;
        net.rule = (b == 5)
            .then(|| -> Rule { Box::new(move |_, _, msg| if msg.kind == MsgKind::Data && msg.epoch == epoch { Fate::Drop } else { Fate::Deliver }) });
        net.all(&[0, 1], |_| Call::Wait { deadline: None });
        assert!((0..2).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    }
    net.rule = None;
    net
}

/// Barrier `e − 1` (1 ms after the one before, as every barrier here) with
/// node 0's message to node 1 `late` on the wire (or node 1 takes it in so
/// late), then barrier `e` with it lost: node 1's outcome of `e`, how long
/// it took, its retry timeout, and how many NACKs node 0 took for crossings.
fn lost_after_one_late_message(late: Duration) -> (Option<Result<(), BarrierError>>, Duration, Duration, u64) {
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    let mut net = warm_pair(config);
    let epoch = net.cores[0].protocol_epoch() as u32;
    net.rule = Some(Box::new(
        move |from, _, msg| {
            if from == 0 && msg.kind == MsgKind::Data && msg.epoch == epoch {
                Fate::Delay(late)
            } else {
                Fate::Deliver
            }
        },
    ));
    net.all(&[0, 1], |_| Call::Wait { deadline: None });
    assert!((0..2).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    let epoch = net.cores[0].protocol_epoch() as u32;
    net.rule =
        Some(Box::new(move |from, _, msg| if from == 0 && msg.kind == MsgKind::Data && msg.epoch == epoch { Fate::Drop } else { Fate::Deliver }));
    let rto = net.cores[1].recovery.rto.least();
    let suppressed = net.cores[0].stats.answers_suppressed;
    net.call(0, Call::Wait { deadline: None });
    net.call(1, Call::Wait { deadline: None });
    let took = settle_within(&mut net, &[1], Duration::from_millis(600));
    (net.done[1].take(), took, rto, net.cores[0].stats.answers_suppressed - suppressed)
}

#[test]
#[ignore = "rev35-1: a message of the barrier before taken in 4 to 20 us late (latency 20 us, retry timeout 27 to 41 us) makes the next barrier's lost message's first NACK a crossing by its change echo, its late intake counted twice (E short, I long): 130 to 170 us to recover, where whole echoes take 70 to 90 us"]
fn a_message_of_the_barrier_before_taken_in_late_counts_once_against_a_nack() {
    // The whole echo E misjudges a NACK sent within l' − l after the lost
    // message was due (l' the latency, or the late intake, of the barrier
    // before's message; l this one's): E is short by it. The change E − I
    // is short by twice it, I (from the barrier before that) long by it
    // too: E − I < (t − t') − (t' − t'') holds for a NACK sent up to
    // 2(l' − l) − (l'' − l) after the message was due. Here node 1's first
    // NACK goes its retry timeout after it entered, as node 0 sent: about
    // 3 us after the lost message was due, past a late intake of x, not of
    // 2x. (24 to 44 us late: whole echoes misjudge it too, as they did
    // before protocol 11; not asked here.)
    let mut slow = Vec::new();
    for us in (4..=20).step_by(4) {
        let (done, took, rto, crossed) = lost_after_one_late_message(Duration::from_micros(us));
        assert!(matches!(done, Some(Ok(()))), "{us} us late: {done:?}");
        eprintln!("barrier before's message {us} us late: a loss took {took:?} (retry timeout {rto:?}), {crossed} NACKs not answered");
        if took > Duration::from_micros(100) {
            slow.push(format!("{us} us late: the next barrier's loss took {took:?} (retry timeout {rto:?}), {crossed} NACKs not answered"));
        }
    }
    assert!(slow.is_empty(), "{} of 5: {slow:#?}", slow.len());
}
