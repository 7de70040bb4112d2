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
