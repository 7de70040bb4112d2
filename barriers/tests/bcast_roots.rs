//! Issue 28: one failed collective must never disable later ones. A
//! broadcast whose root differs across nodes (an erroneous program: say
//! nodes 0 and 1 broadcast from 0, nodes 2 and 3 from 2) must fail on every
//! node with a clear error (at the broadcast, or at the node's next call
//! when the broadcast had already returned its data), and the collectives
//! after it must work and give the right results.
//!
//! Before the fix (2026-11-26) the two roots' plans waited for different
//! messages, so the mismatched epoch never completed: the roots and the
//! receivers of root 0 returned Ok and every later call failed with
//! "collective mismatch in barrier 0"; the receiver of root 2 failed every
//! later call with "barrier 0 is entered and not yet completed". Now a node
//! that sees another plan in its epoch goes over to the algorithm's own
//! plan, as a void barrier, and tells every node; the epoch completes
//! everywhere and the next one starts clean.

use std::time::Duration;

use barriers::mem::{self, Faults};
use barriers::threads::run_per_node_unfinished;
use barriers::{Algorithm, BarrierConfig, Collective, Fanout, Op, Release};

const N: usize = 4;

/// What each node saw: the bad broadcast's outcome, the next call's (a
/// barrier), the one after (a sum of ones) and a right broadcast from node 3.
type Seen = (Result<(), String>, Result<(), String>, Result<[u32; 1], String>, Result<[u32; 3], String>);

fn run(algorithm: Algorithm, roots: [usize; N], loss: f64, seed: u64) -> Vec<Seen> {
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_micros(500), Duration::from_secs(5));
    let faults = Faults { loss, duplicate: 0.0, max_delay: Duration::ZERO, seed };
    let reduces = Collective::Allreduce { op: Op::Sum, dtype: barriers::Dtype::U32 }.runs_on(algorithm);
    run_per_node_unfinished(mem::network(N, 1, faults), config, move |me, mut b| {
        let mut data = [me as u32 + 10; 4];
        let bad = b.bcast(&mut data, roots[me]).map_err(|e| e.to_string());
        // The next call (a barrier) reports the mismatch if the broadcast
        // had returned its data before the mismatch showed; it runs either way.
        let next = b.wait().map_err(|e| e.to_string());
        // A sum of ones (dissemination reduces nothing: node 1 broadcasts the sum).
        let mut y = if reduces || me == 1 { [if reduces { 1 } else { N as u32 }] } else { [0] };
        let later = if reduces { b.allreduce(&mut y, Op::Sum) } else { b.bcast(&mut y, 1) };
        let later = later.map_err(|e| e.to_string()).map(|()| y);
        let mut z = if me == 3 { [7u32, 8, 9] } else { [0; 3] };
        let bcast = b.bcast(&mut z, 3).map_err(|e| e.to_string()).map(|()| z);
        let _ = b.finish();
        (bad, next, later, bcast)
    })
}

fn check(what: &str, seen: &[Seen]) {
    for (node, (bad, next, later, bcast)) in seen.iter().enumerate() {
        let mismatch = |r: &Result<(), String>| r.as_ref().is_err_and(|e| e.contains("collective mismatch"));
        assert!(mismatch(bad) || mismatch(next), "{what}: node {node} never heard of the mismatch: {seen:?}");
        assert!(bad.is_ok() || next.is_ok(), "{what}: node {node}: reported twice: {seen:?}");
        assert_eq!(later, &Ok([N as u32]), "{what}: node {node}: the allreduce after the mismatch: {seen:?}");
        assert_eq!(bcast, &Ok([7, 8, 9]), "{what}: node {node}: the broadcast after the mismatch: {seen:?}");
    }
}

/// Every algorithm a broadcast runs on (the broadcast plans are the same;
/// the void barrier is the algorithm's own).
fn algorithms() -> Vec<Algorithm> {
    Algorithm::all().into_iter().filter(|a| Collective::Bcast { root: 0 }.runs_on(*a)).collect()
}

/// Root patterns: two roots in halves, every node its own root, one node
/// off, and a root that is not a root at its own node.
const PATTERNS: [[usize; N]; 4] = [[0, 0, 2, 2], [0, 1, 2, 3], [1, 1, 1, 0], [3, 3, 3, 2]];

#[test]
fn a_broadcast_from_differing_roots_fails_on_every_node_and_later_collectives_work() {
    for algorithm in algorithms() {
        for roots in PATTERNS {
            check(&format!("{algorithm}, roots {roots:?}"), &run(algorithm, roots, 0.0, 1));
        }
    }
}

#[test]
fn a_broadcast_from_differing_roots_under_loss_fails_on_every_node_and_later_collectives_work() {
    for (i, algorithm) in
        [Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, Algorithm::Concurrent, Algorithm::Dissemination].into_iter().enumerate()
    {
        for (j, roots) in PATTERNS.into_iter().enumerate() {
            let seed = 100 + 10 * i as u64 + j as u64;
            check(&format!("{algorithm}, roots {roots:?}, 20% loss, seed {seed}"), &run(algorithm, roots, 0.2, seed));
        }
    }
}
