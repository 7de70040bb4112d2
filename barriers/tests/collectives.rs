//! Allreduce, reduce and broadcast on the in-process transport (no root),
//! under 20% loss and 20% duplication with reordering, at 2, 3, 5, 8 and 16
//! nodes: every type × operation against a reference computed here (exactly
//! for integers; for floats, bitwise the same on every node and in a second
//! run with other faults), every root, segments up to 64 KiB, mixed with
//! barriers (checked with the shared-clock safety check), and a clear error
//! when nodes call different collectives.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use barriers::check::{check, Timeline};
use barriers::mem::{self, Faults};
use barriers::threads::run_per_node;
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Dtype, Element, Fanout, Op, Release};

const SIZES: [usize; 5] = [2, 3, 5, 8, 16];

fn lossy(seed: u64) -> Faults {
    Faults { loss: 0.2, duplicate: 0.2, max_delay: Duration::from_micros(100), seed }
}

fn config(algorithm: Algorithm) -> BarrierConfig {
    BarrierConfig::new(algorithm).timeouts(Duration::from_micros(500), Duration::from_secs(10))
}

/// The algorithms that reduce: the tree with multicast and with
/// point-to-point release, concurrent, one-phase, recursive doubling.
fn algorithms() -> Vec<Algorithm> {
    vec![
        Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast },
        Algorithm::Tree { k: Fanout::TWO, release: Release::Tree },
        Algorithm::Concurrent,
        Algorithm::OnePhase,
        Algorithm::ShuffleExchange,
    ]
}

/// A test element: its inputs, its bits, and the reference reduction.
trait Sample: Element + Debug + PartialEq + Send + 'static {
    /// Node `rank`'s element `i`.
    fn sample(rank: usize, i: usize) -> Self;
    fn bits(self) -> u64;
    /// The reduction of `xs` in rank order (wrapping for integers).
    fn reduce(op: Op, xs: &[Self]) -> Self;
}

macro_rules! int_sample {
    ($t:ty) => {
        impl Sample for $t {
            fn sample(rank: usize, i: usize) -> Self {
                // Mixed signs and bits; large enough that products wrap.
                let x = (rank as i64 * 7919 + i as i64 * 104_729 + 3) * if (rank + i) % 3 == 0 { -1 } else { 1 };
                x as $t
            }
            fn bits(self) -> u64 {
                self as u64
            }
            fn reduce(op: Op, xs: &[Self]) -> Self {
                xs.iter()
                    .copied()
                    .reduce(|a, b| match op {
                        Op::Sum => a.wrapping_add(b),
                        Op::Prod => a.wrapping_mul(b),
                        Op::Min => a.min(b),
                        Op::Max => a.max(b),
                        Op::Band => a & b,
                        Op::Bor => a | b,
                        Op::Bxor => a ^ b,
                    })
                    .unwrap()
            }
        }
    };
}
int_sample!(i32);
int_sample!(i64);
int_sample!(u32);
int_sample!(u64);

macro_rules! float_sample {
    ($t:ty) => {
        impl Sample for $t {
            fn sample(rank: usize, i: usize) -> Self {
                // Magnitudes far apart, so that the order of a sum changes its bits.
                let scale = [1e-3, 1.0, 1e7, 3.3e-2][(rank + i) % 4];
                ((rank as f64 + 1.0) * 0.1 * scale + i as f64 * 1e-7) as $t * if rank % 2 == 1 { -1.0 } else { 1.0 }
            }
            fn bits(self) -> u64 {
                self.to_bits() as u64
            }
            fn reduce(op: Op, xs: &[Self]) -> Self {
                xs.iter()
                    .copied()
                    .reduce(|a, b| match op {
                        Op::Sum => a + b,
                        Op::Prod => a * b,
                        Op::Min => a.min(b),
                        Op::Max => a.max(b),
                        _ => unreachable!(),
                    })
                    .unwrap()
            }
        }
    };
}
float_sample!(f32);
float_sample!(f64);

/// Whether `got` is the reference: exactly for integers, min and max;
/// within rounding for float sums and products (whose bits depend on the
/// order, which the plan fixes).
fn matches<E: Sample>(op: Op, got: E, want: E) -> bool {
    if !E::DTYPE.is_float() || matches!(op, Op::Min | Op::Max) {
        return got == want;
    }
    let (g, w) = (f64::from_bits(got.bits()), f64::from_bits(want.bits()));
    let (g, w) = if E::DTYPE == Dtype::F32 { (f32::from_bits(got.bits() as u32) as f64, f32::from_bits(want.bits() as u32) as f64) } else { (g, w) };
    (g - w).abs() <= 1e-5 * w.abs().max(1e-30)
}

const ELEMENTS: usize = 3;

/// Every operation on `E`, allreduced on this node; the results' bits.
fn allreduce_every_op<E: Sample>(b: &mut Barrier<mem::MemTransport>, n: usize) -> Result<Vec<u64>, BarrierError> {
    let me = b.node();
    let mut bits = Vec::new();
    for op in Op::ALL.into_iter().filter(|op| op.applies_to(E::DTYPE)) {
        let mut data: Vec<E> = (0..ELEMENTS).map(|i| E::sample(me, i)).collect();
        b.allreduce(&mut data, op)?;
        for (i, &got) in data.iter().enumerate() {
            let column: Vec<E> = (0..n).map(|r| E::sample(r, i)).collect();
            let want = E::reduce(op, &column);
            assert!(matches(op, got, want), "node {me} of {n}: allreduce {op} {} element {i}: {got:?}, want {want:?}", E::DTYPE);
            bits.push(got.bits());
        }
    }
    Ok(bits)
}

/// Every type × operation on `n` nodes running `algorithm` under `faults`:
/// each node's result bits, in node order.
fn every_type_and_op(algorithm: Algorithm, n: usize, faults: Faults) -> Vec<Vec<u64>> {
    let results = run_per_node(mem::network(n, 1, faults), config(algorithm), move |b| {
        let mut bits = allreduce_every_op::<i32>(b, n)?;
        bits.extend(allreduce_every_op::<i64>(b, n)?);
        bits.extend(allreduce_every_op::<u32>(b, n)?);
        bits.extend(allreduce_every_op::<u64>(b, n)?);
        bits.extend(allreduce_every_op::<f32>(b, n)?);
        bits.extend(allreduce_every_op::<f64>(b, n)?);
        Ok(bits)
    });
    results.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|e| panic!("{algorithm} n={n}: node {i}: {e}"))).collect()
}

#[test]
fn allreduce_of_every_type_and_op_is_the_reference_on_every_node_and_run_under_loss_and_duplication() {
    let runs: Vec<_> = algorithms()
        .into_iter()
        .flat_map(|a| SIZES.into_iter().map(move |n| (a, n)))
        .map(|(algorithm, n)| {
            std::thread::spawn(move || {
                let first = every_type_and_op(algorithm, n, lossy(n as u64));
                for (node, bits) in first.iter().enumerate() {
                    assert_eq!(bits, &first[0], "{algorithm} n={n}: node {node}'s results differ in their bits from node 0's");
                }
                let again = every_type_and_op(algorithm, n, lossy(1000 + n as u64));
                assert_eq!(again[0], first[0], "{algorithm} n={n}: a second run (other losses, other arrival order) differs in its bits");
            })
        })
        .collect();
    for run in runs {
        run.join().expect("a run failed");
    }
}

#[test]
fn a_float_sum_is_the_plans_fixed_order_not_the_arrival_order() {
    // 1e16 + 1 + 1 − 1e16 is 0 or 2 (or 4) depending on the grouping: the
    // result must still agree across nodes and runs, and equal what the
    // plan's order gives. Concurrent folds in rank order at node 0.
    let xs = [1e16f64, 1.0, 1.0, -1e16, 1.0];
    let want = xs.iter().copied().reduce(|a, b| a + b).unwrap();
    for seed in 0..4 {
        let results = run_per_node(mem::network(5, 1, lossy(seed)), config(Algorithm::Concurrent), move |b| {
            let mut data = [xs[b.node()]];
            b.allreduce(&mut data, Op::Sum)?;
            Ok(data[0])
        });
        for r in results {
            assert_eq!(r.unwrap().to_bits(), want.to_bits(), "run {seed}");
        }
    }
}

#[test]
fn broadcast_from_every_root_and_reduce_to_every_root_under_loss() {
    let runs: Vec<_> = [Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, Algorithm::ShuffleExchange, Algorithm::OnePhase]
        .into_iter()
        .flat_map(|a| SIZES.into_iter().map(move |n| (a, n)))
        .map(|(algorithm, n)| {
            std::thread::spawn(move || {
                let results = run_per_node(mem::network(n, 1, lossy(7 + n as u64)), config(algorithm), move |b| {
                    let me = b.node();
                    for root in 0..n {
                        let mut data: Vec<u64> = if me == root { (0..5).map(|i| (root * 100 + i) as u64).collect() } else { vec![0; 5] };
                        b.bcast(&mut data, root)?;
                        assert_eq!(data, (0..5).map(|i| (root * 100 + i) as u64).collect::<Vec<_>>(), "{algorithm} n={n}: bcast from {root} at {me}");
                        let mut data = [me as i64 + 1, -(me as i64)];
                        b.reduce(&mut data, Op::Sum, root)?;
                        let total = (n * (n + 1) / 2) as i64;
                        let want = if me == root { [total, -(total - n as i64)] } else { [me as i64 + 1, -(me as i64)] };
                        assert_eq!(data, want, "{algorithm} n={n}: reduce to {root} at {me} (others keep their data)");
                    }
                    Ok(())
                });
                for (i, r) in results.into_iter().enumerate() {
                    r.unwrap_or_else(|e| panic!("{algorithm} n={n}: node {i}: {e}"));
                }
            })
        })
        .collect();
    for run in runs {
        run.join().expect("a run failed");
    }
}

#[test]
fn sixty_four_kib_go_in_segments_and_barriers_between_collectives_stay_safe() {
    const COUNT: usize = 8192; // 64 KiB of f64
    for algorithm in [Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, Algorithm::OnePhase] {
        let n = 5;
        let results = run_per_node(mem::network(n, 1, lossy(3)), config(algorithm), move |b| {
            let me = b.node();
            let mut timeline = Timeline::default();
            let mut data: Vec<f64> = (0..COUNT).map(|i| f64::sample(me, i)).collect();
            b.allreduce(&mut data, Op::Sum)?;
            for (i, &got) in data.iter().enumerate() {
                let column: Vec<f64> = (0..n).map(|r| f64::sample(r, i)).collect();
                assert!(matches(Op::Sum, got, f64::reduce(Op::Sum, &column)), "element {i}");
            }
            let mut bytes: Vec<u32> = if me == 2 { (0..COUNT as u32 * 2).collect() } else { vec![0; COUNT * 2] };
            b.bcast(&mut bytes, 2)?;
            assert!(bytes.iter().enumerate().all(|(i, &x)| x == i as u32), "bcast of 64 KiB at {me}");
            for _ in 0..3 {
                let entered = Instant::now();
                b.wait()?;
                timeline.record(entered, Instant::now());
                let mut x = [1u32];
                b.allreduce(&mut x, Op::Sum)?;
                assert_eq!(x, [n as u32]);
            }
            Ok((data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), timeline))
        });
        let results: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
        for (node, (bits, _)) in results.iter().enumerate() {
            assert!(bits == &results[0].0, "{algorithm}: node {node}'s 64 KiB differ from node 0's");
        }
        let timelines: Vec<Timeline> = results.into_iter().map(|(_, t)| t).collect();
        let (violations, checked) = check(&timelines);
        assert_eq!((violations, checked), (vec![], 3), "{algorithm}");
    }
}

#[test]
fn nodes_calling_different_collectives_get_a_clear_error() {
    let results = run_per_node(mem::network(3, 1, Faults::none()), config(Algorithm::Concurrent), |b| {
        let op = if b.node() == 1 { Op::Max } else { Op::Sum };
        let mut data = [1i32, 2];
        Ok(b.allreduce(&mut data, op).err())
    });
    let errors: Vec<BarrierError> = results.into_iter().filter_map(|r| r.unwrap()).collect();
    assert_eq!(errors.len(), 3, "every node learns of the mismatch: {errors:?}");
    assert!(errors.iter().all(|e| matches!(e, BarrierError::CollectiveMismatch { epoch: 0, .. })), "{errors:?}");
    // Bad arguments are refused before any traffic.
    let results = run_per_node(mem::network(2, 1, Faults::none()), config(Algorithm::Dissemination), |b| {
        let mut x = [1.0f32];
        let float_xor = b.allreduce(&mut x, Op::Bxor).unwrap_err();
        let dissemination = b.allreduce(&mut [1u32], Op::Sum).unwrap_err();
        let root = b.bcast(&mut [1u64], 2).unwrap_err();
        Ok((float_xor, dissemination, root))
    });
    let (float_xor, dissemination, root) = results.into_iter().next().unwrap().unwrap();
    assert!(matches!(&float_xor, BarrierError::Misuse(e) if e.contains("integers only")), "{float_xor}");
    assert!(matches!(&dissemination, BarrierError::AlgorithmCannot { algorithm: Algorithm::Dissemination, .. }), "{dissemination}");
    assert!(matches!(&root, BarrierError::Misuse(e) if e.contains("not one of the 2")), "{root}");
}

/// A reduce among up to `plan::REDUCE_GATHER_MAX` nodes runs its own plan,
/// whatever the algorithm: every other node sends its contribution to the
/// root and its call returns (one message; the epoch's end comes from the
/// root in the background), the root gathers them and folds them in rank
/// order. On the algorithm's plan (recursive doubling at 8 nodes: three
/// stages, each node waiting for a partner at each) a reduce cost what an
/// allreduce does: here the non-roots return before the root has even
/// entered, which the algorithm's plan cannot do (their calls would fail
/// at the deadline).
#[test]
fn a_reduce_costs_every_other_node_one_send_and_returns_before_the_root_enters() {
    use std::sync::{Arc, Barrier as Rendezvous};
    let n = 8;
    // 1e16 + 1 + 1 − 1e16 ...: the grouping decides the sum, so the
    // root's result shows the rank-order fold.
    let xs = [1e16f64, 1.0, 1.0, -1e16, 1.0, 1.0, 3.0, -1.0];
    let want = xs.iter().copied().reduce(|a, b| a + b).unwrap();
    for algorithm in [Algorithm::ShuffleExchange, Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, Algorithm::OnePhase] {
        for root in [0, 3] {
            let rendezvous = Arc::new(Rendezvous::new(n));
            let config = config(algorithm).deadline(Some(Duration::from_secs(5)));
            let results = run_per_node(mem::network(n, 1, Faults::none()), config, move |b| {
                let me = b.node();
                let sent = b.stats().sent;
                let mut data = [xs[me]];
                if me != root {
                    let returned = b.reduce(&mut data, Op::Sum, root);
                    rendezvous.wait();
                    returned?;
                    assert_eq!(data, [xs[me]], "{algorithm}: a non-root keeps its data");
                } else {
                    rendezvous.wait();
                    b.reduce(&mut data, Op::Sum, root)?;
                    assert_eq!(data[0].to_bits(), want.to_bits(), "{algorithm}: the root's result is the rank-order fold");
                }
                let messages = b.stats().sent - sent;
                // The next call completes the epoch (the root's end) first.
                b.wait()?;
                Ok(messages)
            });
            for (node, r) in results.into_iter().enumerate() {
                let messages = r.unwrap_or_else(|e| panic!("{algorithm} root {root}: node {node}: {e}"));
                assert_eq!(messages, 1, "{algorithm} root {root}: node {node} sends one message (its contribution, or the root's end)");
            }
        }
    }
}
