//! Copies spaced in time (issue 29, `core::copies`): none on a clean
//! network; where loss bursts take the copies of a message together, the
//! gap between copies grows, copies then go at least that gap apart, and a
//! burst shorter than the gap takes at most one copy of a message.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::*;
use crate::core::copies::copy_of;

/// Each receiver's link loses every frame sent while it is in a burst:
/// one `burst` long in every `period`, at a pseudo-random offset within
/// the period's first half (so bursts are at least half a period apart).
fn bursts(clock: Rc<std::cell::Cell<Instant>>, start: Instant, period: Duration, burst: Duration) -> impl Fn(NodeId) -> bool {
    move |to| {
        let t = clock.get().saturating_duration_since(start).as_nanos() as u64;
        let slot = t / period.as_nanos() as u64;
        let mut x = (slot << 8 | to as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
        let offset = x % (period.as_nanos() as u64 / 2);
        (offset..offset + burst.as_nanos() as u64).contains(&(t % period.as_nanos() as u64))
    }
}

#[test]
fn a_clean_network_sends_no_copy_and_spaces_nothing() {
    let config = BarrierConfig::new(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast });
    let mut net = Net::new(8, config);
    let everyone: Vec<NodeId> = (0..8).collect();
    for _ in 0..300 {
        net.all(&everyone, |_| Call::Wait { deadline: None });
        assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))));
    }
    for (p, c) in net.cores.iter().enumerate() {
        let s = c.stats();
        assert_eq!((s.copies, s.nacks_sent, s.answers, s.lost_counted), (0, 0, 0, 0), "node {p}: {s:?}");
        assert_eq!(c.copy_gap(), Duration::ZERO, "node {p}");
        assert_eq!(c.out.next_due(), None, "node {p}: a copy waits to be sent");
    }
}

#[test]
fn bursts_that_take_copies_together_space_them_and_then_take_at_most_one() {
    // Tree4, 8 nodes. Every frame takes the same latency here, so copies
    // sent back to back reach their receiver at one instant: a burst of 3 µs
    // every 100 µs at each receiver takes a message's copies together, and
    // each such loss costs a NACK. The gap must grow past the burst.
    let config = BarrierConfig::new(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast })
        .timeouts(Duration::from_millis(1), Duration::from_millis(500));
    let mut net = Net::new(8, config);
    let everyone: Vec<NodeId> = (0..8).collect();
    let burst = Duration::from_micros(3);
    let in_burst = bursts(net.clock.clone(), net.now, Duration::from_micros(100), burst);
    // Per message in copies (from, to, kind, epoch, tag): each copy's
    // (index, when sent, dropped).
    type Copies = HashMap<(NodeId, NodeId, MsgKind, u32, u16), Vec<(u32, Instant, bool)>>;
    let sent: Rc<RefCell<Copies>> = Rc::default();
    let (log, clock) = (sent.clone(), net.clock.clone());
    net.rule = Some(Box::new(move |from, to, msg| {
        let dropped = in_burst(to);
        let (k, count) = copy_of(msg.arg);
        if count > 1 {
            log.borrow_mut().entry((from, to, msg.kind, msg.epoch, msg.tag)).or_default().push((k, clock.get(), dropped));
        }
        if dropped {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    let lost_together = |sent: &Copies, from: &dyn Fn(NodeId) -> bool| {
        sent.iter().filter(|(m, copies)| from(m.0) && copies.iter().filter(|c| c.2).count() > 1).count()
    };
    for _ in 0..200 {
        net.all(&everyone, |_| Call::Wait { deadline: None });
        assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
    }
    let early = lost_together(&sent.borrow(), &|_| true);
    assert!(early > 0, "no burst took two copies of a message: the test no longer sets off the gap");
    for _ in 0..800 {
        net.all(&everyone, |_| Call::Wait { deadline: None });
        assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
    }
    // A node whose copies the bursts took whole (its NACKs answered a
    // retry timeout after the message went) spaces them past the bursts.
    // (Node 0's release is taken whole too, but the leaves' NACKs for it
    // come sooner than node 0's shortest retry timeout after it went, so
    // they are not counted: see `Core::answer`.)
    let gaps: Vec<Duration> = net.cores.iter().map(Core::copy_gap).collect();
    assert!(gaps.iter().any(|&g| g > burst), "no node's gap outlasts the 3 µs bursts: {gaps:?}");
    // Then: copies of a node whose gap outlasts the bursts go at least
    // such a gap apart (4 µs: the gap doubles from 2 µs; its cap, a quarter
    // of the shortest learned retry timeout, moves a little as that
    // learns), and no burst takes two of them.
    let least_gap = 2 * crate::core::copies::FIRST_GAP;
    sent.borrow_mut().clear();
    let before: Vec<_> = net.cores.iter().map(Core::stats).collect();
    for _ in 0..300 {
        net.all(&everyone, |_| Call::Wait { deadline: None });
        assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
    }
    let spaced = |p: NodeId| gaps[p] > burst;
    let sent = sent.borrow();
    let checked = sent.keys().filter(|m| spaced(m.0)).count();
    assert!(checked > 100, "few messages of spaced nodes went in copies: {checked} ({gaps:?})");
    for (m, copies) in sent.iter().filter(|(m, _)| spaced(m.0)) {
        let first = copies.iter().find(|c| c.0 == 0).map(|c| c.1);
        for &(k, at, _) in copies {
            if let Some(first) = first {
                assert!(at.saturating_duration_since(first) >= least_gap * k, "{m:?}: copy {k} went {:?} after the first", at - first);
            }
        }
    }
    assert_eq!(lost_together(&sent, &spaced), 0, "a burst shorter than the gap took two copies of a message");
    let nacks: u64 = net.cores.iter().zip(&before).map(|(c, b)| c.stats().nacks_sent - b.nacks_sent).sum();
    eprintln!("gaps {gaps:?}; {checked} messages of spaced nodes in copies ({early} lost two copies in the first 200 barriers), {nacks} NACKs in the last 300");
}

/// Review rev31, finding 1: what copies spaced in time keep of their
/// data (`Outbox::later_data`) was cleared only when a copy was queued
/// while none waited. A node whose spaced copies never all went out
/// between two of its sends (every collective's copies still waiting when
/// the next one's were queued: loss bursts of 60 µs, gaps of 16-32 µs,
/// allreduces back to back) kept every copy's data since: here 0.9 MB
/// after 500 allreduces of 800 bytes, 3 MB after 1,000, and on for as
/// long as the queue never drains.
#[test]
fn spaced_copies_of_collectives_keep_a_bounded_arena() {
    let mut config = BarrierConfig::new(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast })
        .timeouts(Duration::from_millis(1), Duration::from_millis(500));
    // (Learned retry timeouts of 300 µs at least: copies may be spaced up
    // to 75 µs apart, longer than a lossless collective here.)
    config.min_retry_timeout = Duration::from_micros(300);
    let mut net = Net::new(8, config);
    let in_burst = bursts(net.clock.clone(), net.now, Duration::from_micros(300), Duration::from_micros(60));
    net.rule = Some(Box::new(move |_, to, _| if in_burst(to) { Fate::Drop } else { Fate::Deliver }));
    let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U64 };
    let input: &'static [u8] = Box::leak((0..100u64).flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>().into_boxed_slice());
    let (mut peak, mut spaced) = (0, Duration::ZERO);
    for _ in 0..500 {
        // Each collective follows the last at once (as an application's
        // loop of allreduces does), not a millisecond later as `Net::all`.
        for p in 0..8 {
            net.call(p, Call::EnterCollective { call: sum, count: 100, more: false, input, deadline: None });
            net.call(p, Call::WaitResult { deadline: None });
        }
        while net.done.iter().any(Option::is_none) {
            net.run_until(net.now + Duration::from_micros(1));
        }
        assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
        peak = peak.max(net.cores.iter().map(|c| c.out.later_bytes()).max().unwrap());
        spaced = spaced.max(net.cores.iter().map(|c| c.copy_gap()).max().unwrap());
    }
    assert!(spaced > Duration::from_micros(8), "the copies were not spaced ({spaced:?}): the test no longer sets off the case");
    // What waits at once: a few messages' copies, 8 KiB or so.
    assert!(peak <= 64 * 1024, "the arena of spaced copies grew to {peak} bytes (gap up to {spaced:?})");
}
