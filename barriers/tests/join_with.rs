//! `PreparedBarrier::join_with`: two barriers over the same nodes for one
//! join (a communicator's barrier and its collectives' barrier, review
//! rev31 finding 2), over threads on the in-process transport.

use std::time::Duration;

use barriers::mem::{self, Faults};
use barriers::{Algorithm, BarrierConfig, BarrierError, Op, PreparedBarrier};

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
