//! Loss v2 on a lossless network: copies and recoveries come only from
//! loss, not from frames the network merely reordered.

use super::*;

/// Every frame takes the latency plus its own delay of 0..`spread`
/// (a fixed-seed xorshift): copies of one message often arrive out of order.
fn jitter(spread: Duration, seed: u64) -> Rule {
    let mut x = seed | 1;
    Box::new(move |_, _, _| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Fate::Delay(spread.mul_f64((x % 1024) as f64 / 1024.0))
    })
}

/// The counters summed over every node: (copies, NACKs, answers, frames counted lost).
fn totals(net: &Net) -> (u64, u64, u64, u64) {
    net.cores.iter().map(Core::stats).fold((0, 0, 0, 0), |t, s| (t.0 + s.copies, t.1 + s.nacks_sent, t.2 + s.answers, t.3 + s.lost_counted))
}

#[test]
fn a_lossless_network_that_reorders_frames_costs_no_copies_and_no_recoveries() {
    // Issue 29: a message first heard as its copy k was counted as k frames
    // lost, and copies reordered by the network are heard out of order: a
    // late node (whose messages a peer asked for go twice) set off copies,
    // whose reordering raised the estimate, which sent more copies, for
    // the rest of the instance. Nothing is lost here: after the late node's
    // barrier, no copy, NACK or answer may be sent, and no frame counted lost.
    for (algorithm, seed) in [
        (Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, 1),
        (Algorithm::Dissemination, 2),
        (Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, 3),
    ] {
        let mut config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(500));
        // (A retry timeout learned below the jitter's tail NACKs late
        // frames, answered as recoveries: that is the retry timer's matter,
        // not the copies'. A floor above the slowest step keeps it out.)
        config.min_retry_timeout = Duration::from_micros(500);
        let mut net = Net::new(8, config);
        net.rule = Some(jitter(LATENCY * 2, seed));
        let everyone: Vec<NodeId> = (0..8).collect();
        let barrier = |net: &mut Net, nodes: &[NodeId]| {
            net.all(nodes, |_| Call::Wait { deadline: None });
            assert!(nodes.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{algorithm}: {:?}", net.done);
        };
        for _ in 0..20 {
            barrier(&mut net, &everyone); // the retry timeouts learn the steps' times
        }
        // Node 5 enters 10 ms late: its peers ask for its messages, which it
        // then sends twice (insurance, not a loss).
        let others: Vec<NodeId> = everyone.iter().copied().filter(|&p| p != 5).collect();
        for &p in &others {
            net.call(p, Call::Wait { deadline: None });
        }
        net.run_until(net.now + Duration::from_millis(10));
        barrier(&mut net, &[5]);
        net.run_until(net.now + Duration::from_millis(1));
        assert!(others.iter().all(|&p| matches!(net.done[p], Some(Ok(())))), "{algorithm}: {:?}", net.done);
        let (copies, ..) = totals(&net);
        assert!(copies > 0, "{algorithm}: the late node sent no copy: the test no longer sets off the chain");
        for _ in 0..3 {
            barrier(&mut net, &everyone); // the late barrier's echoes die out
        }
        let before = totals(&net);
        for _ in 0..300 {
            barrier(&mut net, &everyone);
        }
        let after = totals(&net);
        let (copies, nacks, answers, lost) = (after.0 - before.0, after.1 - before.1, after.2 - before.2, after.3);
        assert_eq!(
            (copies, nacks, answers, lost),
            (0, 0, 0, 0),
            "{algorithm}: 300 lossless barriers sent (copies, NACKs, answers) and counted lost (in all): {:?}",
            (copies, nacks, answers, lost)
        );
    }
}
