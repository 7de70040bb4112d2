//! A node whose application was told of a failure and has not called
//! again: it probes once a failure timeout (no call waits on its retries),
//! its barrier still completes in the background, and a call made again
//! brings its retries back at once.

use std::cell::Cell;
use std::rc::Rc;

use super::*;

#[test]
fn a_node_told_of_a_failure_probes_once_a_failure_timeout_until_it_calls_again() {
    let failure = Duration::from_millis(100);
    let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), failure);
    let mut net = Net::new(4, config);
    let everyone: Vec<NodeId> = (0..4).collect();
    net.all(&everyone, |_| Call::Wait { deadline: None });
    // NACKs to node 3, per sender; node 3's first data to node 0 is lost.
    let nacks = Rc::new(Cell::new([0u32; 4]));
    let lost = Rc::new(Cell::new(false));
    let (n, l) = (nacks.clone(), lost.clone());
    net.rule = Some(Box::new(move |from, to, msg| {
        if to == 3 && msg.kind == MsgKind::Nack {
            let mut c = n.get();
            c[from] += 1;
            n.set(c);
        }
        if from == 3 && to == 0 && msg.kind == MsgKind::Data && !l.get() {
            l.set(true);
            return Fate::Drop;
        }
        Fate::Deliver
    }));
    // Node 3 stops (no progress agent, its application away) before barrier 1.
    net.paused[3] = true;
    net.all(&[0, 1, 2], |_| Call::Wait { deadline: None });
    for p in 0..3 {
        let error = net.done[p].as_ref().expect("a verdict").as_ref().unwrap_err();
        assert!(names(error, 3), "node {p}: {error}");
    }
    // Told, and not calling again: a second of probes at most once a
    // failure timeout (at the retry pace, a fortieth of one, it was 400).
    // (Node 0 alone waits for node 3: it gathers and releases.)
    nacks.set([0; 4]);
    net.run_until(net.now + Duration::from_secs(1));
    let quiet = nacks.get();
    assert!((5..=12).contains(&quiet[0]), "NACKs to node 3 in 1 s, per node: {quiet:?}");
    // Node 0 calls again: its retries come back at once, and it fails again
    // once it has waited a failure timeout.
    nacks.set([0; 4]);
    net.call(0, Call::Wait { deadline: None });
    net.run_until(net.now + Duration::from_millis(50));
    let again = nacks.get();
    assert!(again[0] >= 10, "node 0, called again, probed node 3 {} times in 50 ms", again[0]);
    net.run_until(net.now + failure);
    let error = net.done[0].as_ref().expect("a verdict").as_ref().unwrap_err();
    assert!(names(error, 3), "node 0 again: {error}");
    // Node 3 comes back and calls; its data to node 0 is lost. Every
    // barrier completes in the background all the same.
    let before = net.cores[0].protocol_epoch();
    net.paused[3] = false;
    net.call(3, Call::Wait { deadline: None });
    net.run_until(net.now + failure + Duration::from_millis(20));
    assert!(lost.get(), "node 3's data to node 0 was lost");
    assert!(matches!(net.done[3], Some(Ok(()))), "node 3: {:?}", net.done[3]);
    for p in 0..3 {
        assert_eq!(net.cores[p].protocol_epoch(), before + 1, "node {p} completed barrier {before} in the background");
    }
}

/// Finding j-3 (pair seed 103405): a pair's application told a failure on
/// one barrier (here: node 0 silent, on the barrier joined) and gone from
/// its program says so on the barrier beside too ([`super::super::AppWord`]),
/// so a peer waiting there for its next call fails naming the silent node
/// (before, it answered with plain statuses, and the peer, and every node
/// waiting for that peer, waited for ever). Once the application calls
/// either barrier again, neither says it.
#[test]
fn a_failure_told_on_the_barrier_beside_is_said_here_until_the_application_calls_again() {
    use super::super::AppWord;
    let failure = Duration::from_millis(100);
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), failure);
    // This net is the barrier beside; node 1's application was told on the
    // one joined that node 0 is silent, and makes no call here. (Each node
    // waits for node 1 in the first round of the dissemination: it hears
    // node 1's statuses itself.)
    let mut net = Net::new(3, config);
    let start = net.now;
    net.cores[1].beside_word(start, AppWord { calls: 1, told: Some(0) });
    net.call(0, Call::Wait { deadline: None });
    net.call(2, Call::Wait { deadline: None });
    net.run_until(start + 3 * failure);
    for p in [0, 2] {
        match &net.done[p] {
            Some(Err(error @ BarrierError::PeerFailed { reporter, .. })) => {
                assert!(names(error, 0) && [1, 2].contains(reporter), "node {p}: {error}")
            }
            other => panic!("node {p} still waits for node 1, whose application was told a failure beside: {other:?}"),
        }
    }
    // Node 1's application calls the barrier joined again: it goes on, and
    // this barrier no longer says the failure. Nodes 0 and 2 call again and
    // wait (a report would fail them once they waited a failure timeout)
    // until node 1 makes its call here, and the barrier completes.
    let again = net.now;
    net.cores[1].beside_word(again, AppWord { calls: 2, told: None });
    net.call(0, Call::Wait { deadline: None });
    net.call(2, Call::Wait { deadline: None });
    net.run_until(again + 3 * failure);
    assert!(net.done[0].is_none() && net.done[2].is_none(), "nodes 0 and 2 did not wait: {:?}", net.done);
    net.call(1, Call::Wait { deadline: None });
    net.run_until(net.now + failure);
    assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
}

/// The failure told beside is not said while the application has a call
/// in progress here: it goes on here (a nonblocking collective its driver
/// runs, a barrier it waits for), so a peer waiting for it waits.
#[test]
fn a_failure_told_beside_is_not_said_while_a_call_here_is_in_progress() {
    use super::super::AppWord;
    let failure = Duration::from_millis(100);
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), failure);
    let mut net = Net::new(3, config);
    let start = net.now;
    // Node 0's messages to node 1 come late: node 1 waits in round 1, and
    // node 0 for node 1's round 2, probing it (node 1 answers statuses).
    let clock = net.clock.clone();
    net.rule = Some(Box::new(move |from, to, msg| {
        if from == 0 && to == 1 && matches!(msg.kind, MsgKind::Data | MsgKind::Answer) && clock.get() < start + 3 * failure {
            return Fate::Delay(3 * failure);
        }
        Fate::Deliver
    }));
    for p in 0..3 {
        net.call(p, Call::Wait { deadline: None });
    }
    // Node 1's application, its wait here in progress (on another thread,
    // or a nonblocking collective here), is told on the barrier beside
    // that node 0 is silent.
    net.cores[1].beside_word(start, AppWord { calls: 1, told: Some(0) });
    net.run_until(start + 5 * failure);
    assert!(net.done.iter().all(|d| matches!(d, Some(Ok(())))), "{:?}", net.done);
}
