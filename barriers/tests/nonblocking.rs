//! Nonblocking collectives ([`Barrier::start`]) on the in-process transport
//! under 20% loss and duplication: several in flight at once, completed in
//! any order by test and wait, mixed with blocking calls, with results
//! checked against references; progress while the application makes no
//! call for longer than the failure timeout (the progress agent carries
//! them); and barriers completed by polling, checked with the shared clock.

use std::time::{Duration, Instant};

use barriers::check::{check, Timeline};
use barriers::mem::{self, Faults};
use barriers::threads::run_per_node;
use barriers::{Algorithm, BarrierConfig, Collective, Dtype, Fanout, Op, Release};

fn lossy(seed: u64) -> Faults {
    Faults { loss: 0.2, duplicate: 0.2, max_delay: Duration::from_micros(100), seed }
}

fn config(algorithm: Algorithm, failure: Duration) -> BarrierConfig {
    BarrierConfig::new(algorithm).timeouts(Duration::from_micros(500), failure)
}

fn u32s(xs: &[u32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn from_u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn several_in_flight_complete_in_any_order_with_the_right_results_under_loss() {
    for algorithm in [Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, Algorithm::OnePhase] {
        let n = 4;
        let results = run_per_node(mem::network(n, 1, lossy(11)), config(algorithm, Duration::from_secs(10)), move |b| {
            let me = b.node();
            for round in 0..5u32 {
                let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
                let max = Collective::Reduce { op: Op::Max, dtype: Dtype::U32, root: (round as usize) % n };
                let root = (round as usize + 1) % n;
                let bcast = Collective::Bcast { root };
                // 3000 u32: several segments.
                let big: Vec<u32> = (0..3000).map(|i| i * (me as u32 + 1) + round).collect();
                let mut r_barrier = b.start(Collective::Barrier, &[])?;
                let mut r_sum = b.start(sum, &u32s(&big))?;
                let mut r_max = b.start(max, &u32s(&[me as u32 * 10 + round]))?;
                let data: Vec<u8> = if me == root { (0..100).map(|i| (i as u8) ^ round as u8).collect() } else { vec![0; 100] };
                let mut r_bcast = b.start(bcast, &data)?;
                // Complete them backwards: the last by polling, the rest by wait.
                let mut got = vec![0u8; 100];
                while !r_bcast.test(Some(&mut got))? {
                    std::hint::spin_loop();
                }
                if me != root {
                    assert!(got.iter().enumerate().all(|(i, &x)| x == (i as u8) ^ round as u8), "bcast at {me}");
                }
                let mut m = vec![0u8; 4];
                r_max.wait(Some(&mut m))?;
                if me == (round as usize) % n {
                    assert_eq!(from_u32s(&m), vec![(n as u32 - 1) * 10 + round]);
                }
                // A blocking allreduce after one still unclaimed: runs after it.
                let mut one = [1u32];
                b.allreduce(&mut one, Op::Sum)?;
                assert_eq!(one, [n as u32]);
                let mut s = vec![0u8; big.len() * 4];
                r_sum.wait(Some(&mut s))?;
                let want: Vec<u32> = (0..3000u32).map(|i| (1..=n as u32).map(|k| i * k + round).sum()).collect();
                assert_eq!(from_u32s(&s), want, "allreduce at {me}");
                r_barrier.wait(None)?;
                assert!(r_barrier.test(None).is_err(), "a completed request says so");
            }
            Ok(())
        });
        for (node, r) in results.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("{algorithm}: node {node}: {e}"));
        }
    }
}

#[test]
fn the_agent_carries_them_while_the_application_computes_past_the_failure_timeout() {
    let failure = Duration::from_millis(400);
    let n = 4;
    let results = run_per_node(mem::network(n, 1, lossy(5)), config(Algorithm::OnePhase, failure), move |b| {
        let me = b.node();
        let mut timeline = Timeline::default();
        let mut done_at_once = 0;
        for round in 0..3 {
            // Staggered starts, then computing (no call at all) for longer
            // than the failure timeout: peers are answered, nobody is
            // declared dead, and the collectives complete meanwhile.
            std::thread::sleep(Duration::from_millis(30 * ((me + round) % n) as u64));
            let mut r = b.start(Collective::Barrier, &[])?;
            let mut s = b.start(Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 }, &u32s(&[me as u32]))?;
            let computing = Instant::now();
            let mut x = 0u64;
            while computing.elapsed() < failure * 2 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            done_at_once += usize::from(r.test(None)?);
            let mut out = vec![0u8; 4];
            done_at_once += usize::from(s.test(Some(&mut out))?);
            if out != vec![0u8; 4] {
                assert_eq!(from_u32s(&out), vec![(0..n as u32).sum::<u32>()]);
            }
            // Barriers completed by polling: the first true is when it completed.
            let entered = Instant::now();
            let mut p = b.start(Collective::Barrier, &[])?;
            while !p.test(None)? {}
            timeline.record(entered, Instant::now());
        }
        Ok((done_at_once, timeline))
    });
    let results: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
    for (node, (done, _)) in results.iter().enumerate() {
        assert_eq!(*done, 6, "node {node}: every collective was complete when the computing ended");
    }
    let timelines: Vec<Timeline> = results.into_iter().map(|(_, t)| t).collect();
    let (violations, checked) = check(&timelines);
    assert_eq!((violations, checked), (vec![], 3));
}

#[test]
fn a_dropped_request_still_runs_and_later_ones_complete() {
    let results = run_per_node(mem::network(3, 1, lossy(2)), config(Algorithm::OnePhase, Duration::from_secs(10)), |b| {
        let dropped = b.start(Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 }, &u32s(&[1]))?;
        drop(dropped);
        let mut r = b.start(Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 }, &u32s(&[2]))?;
        let mut out = vec![0u8; 4];
        r.wait(Some(&mut out))?;
        assert_eq!(from_u32s(&out), vec![6]);
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

/// A nonblocking barrier or one-segment allreduce on a plan that sends only
/// in its first step is complete once every node's start has returned: each
/// start put this node's arrival on the wire in the caller's thread, and one
/// nonblocking test reads the peers' from the rings. No progress agent runs
/// (there is none here), so nothing but the starts moved it: this is what
/// lets an `MPI_Ibarrier` complete while every rank computes on a core of its
/// own and no core is left for an agent. The control: a tree, whose parent
/// releases its child in a later step, is not complete at the child then
/// (the parent started first, before the child's arrival came).
#[test]
fn a_one_round_start_sends_everything_and_completes_by_what_arrives() {
    use std::sync::{Arc, Barrier as Rendezvous};
    // (algorithm, nodes, which nodes send only at their start)
    let cases: [(Algorithm, usize, &[bool]); 4] = [
        (Algorithm::OnePhase, 4, &[true; 4]),
        (Algorithm::ShuffleExchange, 2, &[true; 2]),
        // The child sends its arrival and waits; the parent releases it later.
        (Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, 2, &[false, true]),
        (Algorithm::ShuffleExchange, 4, &[false; 4]),
    ];
    for (algorithm, n, eager) in cases {
        let one_round = eager.iter().all(|&e| e);
        let rendezvous = Arc::new(Rendezvous::new(n));
        let mut config = config(algorithm, Duration::from_secs(10));
        config.progress_agent = false;
        let results = run_per_node(mem::network(n, 1, Faults::none()), config, move |b| {
            let me = b.node();
            let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
            assert_eq!(b.eager_only(Collective::Barrier, 0), eager[me], "{algorithm} at {n}, node {me}: a barrier");
            assert_eq!(b.eager_only(sum, 4), eager[me], "{algorithm} at {n}, node {me}: one element");
            assert!(!b.eager_only(sum, 3000 * 4), "{algorithm}: several segments need more steps");
            // A broadcast runs its own plan, whatever the algorithm: a
            // non-root sends its entry at its start and then only waits; the
            // root sends its data and is done (its end, once every node
            // entered, completes the epoch in the background). A reduce
            // among 3 or more nodes too: a non-root sends its contribution,
            // the root waits for the others'; between two, the algorithm's
            // plan.
            let bcast = Collective::Bcast { root: 0 };
            assert!(b.eager_only(bcast, 4), "{algorithm} at {n}, node {me}: a broadcast");
            assert!(!b.eager_only(bcast, 3000), "{algorithm}: a broadcast of several segments");
            let reduce = Collective::Reduce { op: Op::Sum, dtype: Dtype::U32, root: 0 };
            assert_eq!(b.eager_only(reduce, 4), eager[me] || barriers::plan::reduce_gathers(n), "{algorithm} at {n}, node {me}: a reduce");
            assert!(!b.eager_only(reduce, 3000 * 4), "{algorithm}: a reduce of several segments");
            let mut at_once = Vec::new();
            for round in 0..3u32 {
                // The nodes start one after another, in order.
                let mut r = None;
                for k in 0..n {
                    if k == me {
                        r = Some(b.start(Collective::Barrier, &[])?);
                    }
                    rendezvous.wait();
                }
                let mut r = r.expect("started");
                // The last node tests first, before any other node's call.
                let mut done = false;
                if me == n - 1 {
                    done = r.test(None)?;
                    at_once.push(done);
                }
                rendezvous.wait();
                if !done {
                    r.wait(None)?;
                }
                let mut s = None;
                for k in 0..n {
                    if k == me {
                        s = Some(b.start(sum, &u32s(&[me as u32 + round]))?);
                    }
                    rendezvous.wait();
                }
                let mut s = s.expect("started");
                let mut out = vec![0u8; 4];
                let mut done = false;
                if me == n - 1 {
                    done = s.test(Some(&mut out))?;
                    at_once.push(done);
                }
                rendezvous.wait();
                if !done {
                    s.wait(Some(&mut out))?;
                }
                assert_eq!(from_u32s(&out), vec![(0..n as u32).map(|k| k + round).sum::<u32>()], "{algorithm} at {me}");
                // A broadcast from node 0: the last node, not the root,
                // has its data at its first test, whatever the algorithm.
                let data = u32s(&[7 + round]);
                let mut t = None;
                for k in 0..n {
                    if k == me {
                        t = Some(b.start(bcast, &data)?);
                    }
                    rendezvous.wait();
                }
                let mut t = t.expect("started");
                let mut got = vec![0u8; 4];
                let mut done = false;
                if me == n - 1 {
                    done = t.test(Some(&mut got))?;
                    assert!(done, "{algorithm} at {n}: the broadcast's data at the first test after the root's start");
                    assert_eq!(got, data, "{algorithm} at {n}: the root's data");
                }
                rendezvous.wait();
                if !done {
                    t.wait(Some(&mut got))?;
                }
            }
            Ok(at_once)
        });
        for (node, r) in results.into_iter().enumerate() {
            let at_once = r.unwrap_or_else(|e| panic!("{algorithm} at {n}: node {node}: {e}"));
            // (The shuffle exchange at 4 nodes completes at the last one
            // started: its partners' second stages were sent at their
            // starts. Only its count of eager nodes is asserted above.)
            if node == n - 1 && (one_round || n == 2) {
                assert_eq!(at_once, vec![one_round; 6], "{algorithm} at {n}: complete at the first test after the starts");
            }
        }
    }
}

/// A nonblocking broadcast's root (here of 4 nodes) and a nonblocking
/// reduce's nodes (8, on recursive doubling) have sent, when their start
/// returns, everything they send before their call is complete: no start
/// wakes the progress agent (each wake-up is a context switch on a shared
/// core, and cost issue 28's 4-rank `MPI_Ibcast` rows 3-6× against
/// Open MPI's). Their epochs' ends complete in the background, and every
/// result is right. The control: a shuffle-exchange allreduce at 4 nodes,
/// whose later stages only the agent sends while the application computes,
/// wakes it at every start.
#[test]
fn a_broadcasts_root_and_a_reduces_nodes_leave_the_agent_asleep() {
    for (n, algorithm) in
        [(4, Algorithm::ShuffleExchange), (8, Algorithm::ShuffleExchange), (4, Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast })]
    {
        let results = run_per_node(mem::network(n, 1, Faults::none()), config(algorithm, Duration::from_secs(10)), move |b| {
            let me = b.node();
            let mut quiet = 0;
            for round in 0..6u32 {
                let root = round as usize % n;
                let before = b.stats().agent_hurried;
                let data = if me == root { u32s(&[round, 7]) } else { u32s(&[0, 0]) };
                let mut r = b.start(Collective::Bcast { root }, &data)?;
                let mut got = vec![0u8; 8];
                r.wait(Some(&mut got))?;
                if me != root {
                    assert_eq!(from_u32s(&got), vec![round, 7]);
                }
                // (A start behind an epoch still completing in the
                // background, whose end has not come, wakes the agent: it
                // sends this node's part once the end comes. A barrier
                // between, as the benchmarks' untimed one, completes it.)
                b.wait()?;
                let mut s = b.start(Collective::Reduce { op: Op::Sum, dtype: Dtype::U32, root }, &u32s(&[me as u32 + round]))?;
                let mut out = vec![0u8; 4];
                s.wait(Some(&mut out))?;
                if me == root {
                    assert_eq!(from_u32s(&out), vec![(0..n as u32).map(|k| k + round).sum::<u32>()]);
                }
                quiet += b.stats().agent_hurried - before;
                b.wait()?;
            }
            // The control: the later stages of recursive doubling.
            let before = b.stats().agent_hurried;
            let mut a = b.start(Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 }, &u32s(&[1]))?;
            let mut out = vec![0u8; 4];
            a.wait(Some(&mut out))?;
            assert_eq!(from_u32s(&out), vec![n as u32]);
            Ok((quiet, b.stats().agent_hurried - before))
        });
        for (node, r) in results.into_iter().enumerate() {
            let (quiet, control) = r.unwrap_or_else(|e| panic!("{algorithm} at {n}: node {node}: {e}"));
            assert_eq!(quiet, 0, "{algorithm} at {n}: node {node}'s broadcast and reduce starts woke its agent");
            if algorithm == Algorithm::ShuffleExchange {
                assert_eq!(control, 1, "{algorithm} at {n}: node {node}: an allreduce's start wakes the agent for its later stages");
            }
        }
    }
}

/// `Request::wait_for` (the interposer's `MPI_Wait` sleeps in it between
/// two turns of MPI's own progress): false once its time is up while a
/// peer has not started, without claiming the request; true once the
/// collective completed, with its result.
#[test]
fn a_bounded_wait_says_not_yet_then_completes() {
    use std::sync::{Arc, Barrier as Rendezvous};
    let rendezvous = Arc::new(Rendezvous::new(2));
    let results = run_per_node(mem::network(2, 1, Faults::none()), config(Algorithm::OnePhase, Duration::from_secs(10)), move |b| {
        let me = b.node();
        let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
        let mut out = vec![0u8; 4];
        if me == 0 {
            let mut r = b.start(sum, &u32s(&[5]))?;
            let asked = Instant::now();
            assert!(!r.wait_for(Some(&mut out), Duration::from_millis(20))?, "node 1 has not started");
            assert!(asked.elapsed() >= Duration::from_millis(20), "it waited its time");
            rendezvous.wait();
            let mut turns = 0;
            while !r.wait_for(Some(&mut out), Duration::from_millis(20))? {
                turns += 1;
                assert!(turns < 500, "never completed");
            }
            assert!(r.wait_for(None, Duration::ZERO).is_err(), "a completed request says so");
        } else {
            rendezvous.wait();
            let mut r = b.start(sum, &u32s(&[7]))?;
            r.wait(Some(&mut out))?;
        }
        assert_eq!(from_u32s(&out), vec![12]);
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

/// A start the application waits for at once needs no progress agent
/// (the wait drives it), and waking the agent then only takes a core from
/// a peer (issue 28's 4-rank `MPI_Ibarrier` and `MPI_Iallreduce` rows,
/// 2-4× their blocking forms on 2 cores): after such a start, the next
/// ones leave the agent asleep. One the application leaves to compute
/// must still complete without a call (the peers' waits need this node's
/// later stages, which only its agent can send), and the starts after it
/// wake the agent at once again. Shuffle exchange at 4 nodes: the later
/// stages are the agent's while the application computes.
#[test]
fn starts_waited_at_once_stop_waking_the_agent_and_one_left_to_compute_turns_it_back_on() {
    use std::sync::{Arc, Barrier as Rendezvous};
    let n = 4;
    let rounds = 20;
    let (node0_started, peers_done) = (Arc::new(Rendezvous::new(n)), Arc::new(Rendezvous::new(n)));
    let results = run_per_node(mem::network(n, 1, Faults::none()), config(Algorithm::ShuffleExchange, Duration::from_secs(10)), move |b| {
        let me = b.node();
        let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
        let mut out = vec![0u8; 4];
        let before = b.stats().agent_hurried;
        for round in 0..rounds {
            let mut r = b.start(sum, &u32s(&[me as u32 + round]))?;
            r.wait(Some(&mut out))?;
            assert_eq!(from_u32s(&out), vec![(0..n as u32).map(|k| k + round).sum::<u32>()]);
        }
        let waited_at_once = b.stats().agent_hurried - before;
        // Node 0 starts before the others (so its start cannot send its
        // later stages) and makes no call until every peer has completed
        // (they cannot without those stages): its agent must serve.
        if me == 0 {
            let mut r = b.start(sum, &u32s(&[1]))?;
            node0_started.wait();
            peers_done.wait();
            r.wait(Some(&mut out))?;
        } else {
            node0_started.wait();
            let mut r = b.start(sum, &u32s(&[1]))?;
            r.wait(Some(&mut out))?;
            peers_done.wait();
        }
        assert_eq!(from_u32s(&out), vec![n as u32]);
        let before = b.stats().agent_hurried;
        let mut r = b.start(sum, &u32s(&[2]))?;
        r.wait(Some(&mut out))?;
        assert_eq!(from_u32s(&out), vec![2 * n as u32]);
        Ok((waited_at_once, b.stats().agent_hurried - before))
    });
    for (node, r) in results.into_iter().enumerate() {
        let (waited_at_once, after_computing) = r.unwrap_or_else(|e| panic!("node {node}: {e}"));
        assert!(waited_at_once <= rounds as u64 / 2, "node {node}: {waited_at_once} of {rounds} starts waited at once woke the agent");
        if node == 0 {
            assert_eq!(after_computing, 1, "node 0: the start after one left to compute wakes the agent at once");
        }
    }
}
