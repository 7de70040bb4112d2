//! A reply says which NACK drew it (PROTOCOL 12): a round trip is timed
//! from that NACK only (`Recovery::replied`).

use super::*;

const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

/// 3 nodes (tree4, node 0 releasing by multicast), fresh: leaves 1 and 2
/// call, node 2 `lag` after node 1, and node 0 only 5 ms later. Each leaf
/// asks node 0 for the release at its retry timeout (1 ms), node 2 `lag`
/// after node 1: node 0 says "not yet" by multicast to node 1's NACK, and
/// node 2's NACK, taken in within the answer's window, is served by it.
/// Returns each leaf's shortest reply seen once the barrier is done.
fn leaves_asking_a_late_root(lag: Duration) -> [Option<Duration>; 2] {
    let config = BarrierConfig::new(TREE4).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    let mut net = Net::new(3, config);
    net.call(1, Call::Wait { deadline: None });
    net.run_until(net.now + lag);
    net.call(2, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_millis(5));
    net.call(0, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_millis(5));
    assert!((0..3).all(|p| matches!(net.done[p], Some(Ok(())))), "{:?}", net.done);
    [net.cores[1].recovery.reply, net.cores[2].recovery.reply]
}

#[test]
fn a_multicast_reply_to_another_nodes_nack_is_no_round_trip() {
    // Node 2's NACK went `lag` after node 1's, and the multicast "not
    // yet" that node 1's drew comes to node 2 a round trip (40 us) after
    // node 1's NACK: timed from node 2's own NACK, 40 us − lag, down to 1
    // us, though no reply can come back sooner than the wire's round trip.
    // (That shortest reply is node 2's window for crossings by round trip
    // and its answer gap: a NACK that crossed its message by more than it
    // would be answered.) Node 1's reply is its own NACK's: 40 us. Node 2's
    // NACKs have other numbers than node 1's though both count from none
    // sent (`copies::nack_id`).
    let round_trip = 2 * LATENCY;
    for us in [1, 10, 20, 30, 39] {
        let [one, two] = leaves_asking_a_late_root(Duration::from_micros(us));
        assert_eq!(one, Some(round_trip), "node 2 {us} us behind: node 1's round trip to its own NACK");
        assert!(two.is_none_or(|r| r >= round_trip), "node 2 {us} us behind node 1 timed a reply drawn by node 1's NACK: {two:?}");
    }
}
