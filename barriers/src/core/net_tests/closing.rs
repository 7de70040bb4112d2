//! Closing an instance under loss, its nodes leaving as they finish (the
//! interposer closes every communicator's instances in `MPI_Finalize`, and
//! a process exits once its own finish returned).

use std::time::Duration;

use super::{lossy, Fate, Net};
use crate::core::Call;
use crate::plan::Algorithm;
use crate::transport::{Msg, MsgKind};
use crate::types::BarrierConfig;

/// Every node closes (each at a time of its own), then finishes; a node
/// whose finish returned leaves at once (dead: it neither sends nor
/// answers). Every finish must succeed: a node may leave only once no peer
/// needs it any more.
fn close_and_leave(algorithm: Algorithm, n: usize, loss: f64, seed: u64, used: bool) -> Result<(), String> {
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(10));
    let mut net = Net::new(n, config);
    let everyone: Vec<usize> = (0..n).collect();
    if used {
        net.all(&everyone, |_| Call::Wait { deadline: None });
    }
    net.rule = Some(lossy(loss, seed));
    // Staggered: node p closes p ms after node 0, and finishes later still.
    let start = net.now;
    let mut closed = vec![false; n];
    let mut finishing = vec![false; n];
    let limit = start + Duration::from_secs(40);
    while net.now < limit {
        for p in 0..n {
            let t = net.now.saturating_duration_since(start);
            if !closed[p] && t >= Duration::from_millis(p as u64 * 3) {
                closed[p] = true;
                net.call(p, Call::Close);
                net.done[p] = None;
            }
            if closed[p] && !finishing[p] && t >= Duration::from_millis(20 + p as u64 * 7) {
                finishing[p] = true;
                net.call(p, Call::Finish);
            }
            if finishing[p] && !net.dead[p] {
                if let Some(result) = &net.done[p] {
                    if let Err(e) = result {
                        return Err(format!("node {p}'s finish failed at {:?}: {e}", net.now - start));
                    }
                    net.cores[p].leave();
                    net.flush(p);
                    net.dead[p] = true;
                }
            }
        }
        if net.dead.iter().all(|&d| d) {
            return Ok(());
        }
        let step = net.now + Duration::from_millis(1);
        net.run_until(step);
    }
    Err(format!("not every node finished: {:?}", net.done))
}

#[test]
fn under_loss_nodes_that_leave_as_their_finish_returns_fail_no_peer_unused_or_used() {
    let mut failures = Vec::new();
    let seeds: u64 = std::env::var("CLOSING_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(50);
    for algorithm in Algorithm::all() {
        for n in [2, 3, 4, 5] {
            for used in [false, true] {
                for seed in 0..seeds {
                    if let Err(e) = close_and_leave(algorithm, n, 0.2, seed, used) {
                        failures.push(format!("{algorithm}, {n} nodes, used {used}, seed {seed}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failed: {failures:#?}", failures.len());
}

#[test]
fn a_node_stalled_in_the_closing_barrier_completes_it_after_its_peers_left() {
    // CI (session 15, MPICH, 4 ranks, 20% loss): in MPI_Finalize, ranks 0
    // and 2 named rank 1 silent in the closing barrier 0 of an instance
    // never used, after ranks 1 and 3 had finished and left. Shuffle over
    // 4 nodes: node 1's stage-0 message to node 0 is lost; nodes 0 and 2
    // then stall (their cores not driven: descheduled, or their frames not
    // read) for longer than the farewell's 1 s of silence. Nodes 1 and 3
    // complete the closing barrier, query 0 and 2, find them silent, and
    // leave. Node 0 resumes still missing node 1's message, which nobody
    // can send any more: it waited the failure timeout and named node 1
    // (node 2, waiting for node 0, failed on its report). But node 1's
    // farewell queries and notices, waiting in node 0's queue, come from
    // barrier 1: node 1 completed the closing barrier 0, which it could
    // only once every node had entered it, so node 0's is complete too.
    let config = BarrierConfig::new(Algorithm::ShuffleExchange).timeouts(Duration::from_millis(1), Duration::from_secs(10));
    let mut net = Net::new(4, config);
    net.rule = Some(Box::new(
        |from, to, msg: &Msg| {
            if (from, to) == (1, 0) && msg.kind == MsgKind::Data && msg.epoch == 0 {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        },
    ));
    for p in 0..4 {
        net.call(p, Call::Close);
    }
    // Nodes 0 and 2 stall once their first messages are out.
    net.run_until(net.now + Duration::from_micros(100));
    net.paused[0] = true;
    net.paused[2] = true;
    let start = net.now;
    for p in [1, 3] {
        net.call(p, Call::Finish);
    }
    while net.now < start + Duration::from_secs(3) && [1, 3].iter().any(|&p| net.done[p].is_none()) {
        let step = net.now + Duration::from_millis(1);
        net.run_until(step);
    }
    for p in [1, 3] {
        assert!(matches!(net.done[p], Some(Ok(()))), "node {p}'s finish: {:?}", net.done[p]);
        net.dead[p] = true;
    }
    assert!(net.now - start >= Duration::from_secs(1), "nodes 1 and 3 left before 1 s: the stall is not what CI saw");
    net.rule = None;
    net.paused[0] = false;
    net.paused[2] = false;
    for p in [0, 2] {
        net.call(p, Call::Finish);
    }
    let resumed = net.now;
    while net.now < resumed + 3 * config.failure_timeout && [0, 2].iter().any(|&p| net.done[p].is_none()) {
        let step = net.now + Duration::from_millis(1);
        net.run_until(step);
    }
    for p in [0, 2] {
        assert!(matches!(net.done[p], Some(Ok(()))), "node {p}'s finish after its peers left: {:?}", net.done[p]);
    }
    assert!(net.now - resumed < Duration::from_secs(2), "the finishes took {:?}", net.now - resumed);
}
