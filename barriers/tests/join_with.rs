//! `PreparedBarrier::join_with`: two barriers over the same nodes for one
//! join (a communicator's barrier and its collectives' barrier, review
//! rev31 finding 2), over threads on the in-process transport.

use std::time::Duration;

use barriers::mem::{self, Faults};
use barriers::{Algorithm, BarrierConfig, BarrierError, Op, PreparedBarrier};

include!("support/pair_net.rs");

/// Each of `n` nodes prepares a barrier on network `a` with `first` and
/// one on network `b` with `second(node)`, and joins them together.
fn join_pairs(
    n: usize,
    first: BarrierConfig,
    second: impl Fn(usize) -> BarrierConfig,
    work: impl Fn(usize, &mut barriers::Barrier<mem::MemTransport>, &mut barriers::Barrier<mem::MemTransport>) + Send + Sync + Copy + 'static,
) -> Vec<Result<(), BarrierError>> {
    let (a, b) = (mem::network(n, 1, Faults::none()), mem::network(n, 1, Faults::none()));
    let threads: Vec<_> = a
        .into_iter()
        .zip(b)
        .enumerate()
        .map(|(p, (ta, tb))| {
            let (ca, cb) = (first, second(p));
            std::thread::spawn(move || {
                let pa = PreparedBarrier::new(ta, ca)?;
                let pb = PreparedBarrier::new(tb, cb)?;
                let (mut x, mut y) = pa.join_with(pb)?;
                assert_ne!(x.instance(), y.instance(), "node {p}: the barrier beside runs the first's instance");
                work(p, &mut x, &mut y);
                x.finish()?;
                y.finish()?;
                Ok(())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("a node panicked")).collect()
}

#[test]
fn two_barriers_joined_once_run_barriers_and_collectives_side_by_side() {
    let n = 5;
    let first = BarrierConfig::new(Algorithm::Dissemination);
    let second = BarrierConfig::new(Algorithm::ShuffleExchange);
    let results = join_pairs(
        n,
        first,
        |_| second,
        |p, x, y| {
            for round in 0..20u64 {
                x.wait().unwrap();
                let mut data = [p as u64 + round];
                y.allreduce(&mut data, Op::Sum).unwrap();
                assert_eq!(data[0], (0..5).sum::<u64>() + 5 * round, "node {p}, round {round}");
            }
        },
    );
    for (p, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("node {p}: {e}"));
    }
}

#[test]
fn a_node_whose_barrier_beside_is_configured_otherwise_is_refused_at_the_join() {
    let n = 3;
    let mut first = BarrierConfig::new(Algorithm::Dissemination);
    first.join_timeout = Duration::from_secs(2);
    let results = join_pairs(
        n,
        first,
        |p| BarrierConfig::new(if p == 2 { Algorithm::Dissemination } else { Algorithm::ShuffleExchange }),
        |_, _, _| panic!("joined although node 2's barrier beside runs another algorithm"),
    );
    match &results[2] {
        Err(BarrierError::ConfigMismatch { node: 0, .. }) => {}
        other => panic!("node 2: {other:?}"),
    }
    for (p, r) in results.iter().enumerate().take(2) {
        assert!(r.is_err(), "node {p} joined without node 2");
    }
}

#[test]
fn a_process_restarted_into_a_pair_whose_barrier_beside_ran_is_refused() {
    // Review rev33-2, through the driver: the communicator's own barrier
    // (the joined one) is never used, its collectives' barrier (beside)
    // runs 3 allreduces. Node 3's process is then restarted and joins the
    // pair again: node 0 must refuse it (its predecessor took part beside),
    // not admit it in place, where it would run barrier 0 beside again.
    let n = 4;
    let (config, beside, a, b) = pair_of_networks(n, Duration::from_millis(600));
    let threads: Vec<_> = a
        .into_iter()
        .zip(b)
        .enumerate()
        .map(|(p, (ta, tb))| {
            std::thread::spawn(move || -> Result<Option<BarrierError>, String> {
                let (x, y) = join_and_allreduce(p, ta, tb, config, beside)?;
                if p == 3 {
                    let (ta, tb) = (x.into_transport(), y.into_transport());
                    return match join_pair(ta, tb, config, beside) {
                        Ok(_) => Err("node 3's restarted process was admitted into the pair".into()),
                        Err(e) => Ok(Some(e)),
                    };
                }
                // Node 0's agent answers the restarted process's join meanwhile.
                std::thread::sleep(config.join_timeout + Duration::from_millis(400));
                drop((x, y));
                Ok(None)
            })
        })
        .collect();
    for (p, t) in threads.into_iter().enumerate() {
        let outcome = t.join().expect("a node panicked").unwrap_or_else(|e| panic!("{e}"));
        if p == 3 {
            assert!(matches!(outcome, Some(BarrierError::Refused { .. })), "node 3's restarted process: {outcome:?}");
        }
    }
}

#[test]
fn a_failure_told_on_the_joined_barrier_ends_a_peers_wait_beside() {
    // Finding j-3, through the driver: node 1's application is told on the
    // joined barrier that node 0 is silent (cut off from it there), and
    // makes no call after. Nodes 0 and 2 then run an allreduce beside,
    // which waits for node 1's call. Node 1's barrier beside says the
    // failure too (the driver hands it the joined one's word), so both
    // fail naming node 0, rather than wait for a call that never comes
    // (here: until the deadline, `Deadline`).
    let n = 3;
    let mut config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(200));
    config.deadline = Some(Duration::from_secs(4));
    let beside = BarrierConfig { algorithm: Algorithm::ShuffleExchange, ..config };
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rule: mem::SendRule = {
        let cut = cut.clone();
        std::sync::Arc::new(move |m, _| {
            if cut.load(std::sync::atomic::Ordering::SeqCst) && (m.from == 0 || m.to == 0) {
                mem::Fate::Drop
            } else {
                mem::Fate::Faults
            }
        })
    };
    let (a, b) = (mem::network_with_rule(n, 1, Faults::none(), rule), mem::network(n, 1, Faults::none()));
    let gate = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = a
        .into_iter()
        .zip(b)
        .enumerate()
        .map(|(p, (ta, tb))| {
            let (gate, cut) = (gate.clone(), cut.clone());
            std::thread::spawn(move || -> Result<Option<BarrierError>, String> {
                let (mut x, mut y) = PreparedBarrier::new(ta, config)
                    .and_then(|a| a.join_with(PreparedBarrier::new(tb, beside)?))
                    .map_err(|e| format!("node {p}'s join: {e}"))?;
                gate.wait();
                if p == 0 {
                    cut.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                gate.wait();
                if p == 1 {
                    match x.wait() {
                        Err(BarrierError::PeerSilent { silent, .. }) if silent.contains(&0) => {}
                        other => return Err(format!("node 1's barrier, node 0 cut off: {other:?}")),
                    }
                }
                gate.wait();
                if p == 0 {
                    cut.store(false, std::sync::atomic::Ordering::SeqCst);
                }
                gate.wait();
                let outcome = if p == 1 {
                    None // told a failure: no call after (its agent answers)
                } else {
                    let mut data = [p as u64];
                    y.allreduce(&mut data, Op::Sum).err()
                };
                gate.wait();
                drop((x, y));
                Ok(outcome)
            })
        })
        .collect();
    for (p, t) in threads.into_iter().enumerate() {
        let outcome = t.join().expect("a node panicked").unwrap_or_else(|e| panic!("{e}"));
        if p != 1 {
            match outcome {
                Some(BarrierError::PeerFailed { silent: 0, .. }) => {}
                other => panic!("node {p}'s allreduce beside: {other:?}"),
            }
        }
    }
}
