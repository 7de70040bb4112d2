//! What the simulated applications call: per instance, a script of
//! operations (barriers, split-phase barriers, allreduce, reduce and
//! broadcast with random roots, sizes, types and operations), the same on
//! every node except where a mismatch is injected on purpose; each node's
//! input of each operation; and the reference result the checker compares
//! every node's result with.
//!
//! **The reference fold is independent of the engine.** It does not use
//! [`crate::collective`] or [`crate::plan`]: it describes the order in
//! which each algorithm combines (as documented in [`crate::collective`])
//! as an expression over ranks, built from ranges, and evaluates it with
//! its own arithmetic. Floats make the order observable: a result folded
//! in another order differs in its low bits.

use crate::collective::{Dtype, Op};
use crate::plan::Algorithm;
use crate::transport::NodeId;

use super::rng::Rng;

/// One operation of a script, as one node calls it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A barrier.
    Barrier,
    /// A split-phase barrier: enter, compute for `compute` ns, then wait.
    Split {
        /// The virtual time between enter and wait, ns.
        compute: u64,
    },
    /// An allreduce of `count` elements.
    Allreduce {
        /// The operation.
        op: Op,
        /// The element type.
        dtype: Dtype,
        /// The number of elements.
        count: usize,
    },
    /// A reduce to `root`.
    Reduce {
        /// The operation.
        op: Op,
        /// The element type.
        dtype: Dtype,
        /// The number of elements.
        count: usize,
        /// The node with the result.
        root: NodeId,
    },
    /// A broadcast of `len` bytes from `root`.
    Bcast {
        /// The node whose data goes to all.
        root: NodeId,
        /// Bytes.
        len: usize,
    },
}

impl OpKind {
    /// The collective it is, for the engine.
    pub fn collective(&self) -> crate::Collective {
        match *self {
            OpKind::Barrier | OpKind::Split { .. } => crate::Collective::Barrier,
            OpKind::Allreduce { op, dtype, .. } => crate::Collective::Allreduce { op, dtype },
            OpKind::Reduce { op, dtype, root, .. } => crate::Collective::Reduce { op, dtype, root },
            OpKind::Bcast { root, .. } => crate::Collective::Bcast { root },
        }
    }

    /// Whether a node that completes it among `nodes` nodes has waited for
    /// every node's entry (a broadcast's call returns with the data, before
    /// that; a reduce's on its own plan, [`crate::plan::build_reduce`],
    /// once the node's contribution is sent).
    pub fn is_synchronising(&self, nodes: usize) -> bool {
        match self {
            OpKind::Bcast { .. } => false,
            OpKind::Reduce { .. } => !crate::plan::reduce_gathers(nodes),
            _ => true,
        }
    }

    /// The length of its input and result buffer, bytes.
    pub fn bytes(&self) -> usize {
        match *self {
            OpKind::Barrier | OpKind::Split { .. } => 0,
            OpKind::Allreduce { dtype, count, .. } | OpKind::Reduce { dtype, count, .. } => dtype.size() * count,
            OpKind::Bcast { len, .. } => len,
        }
    }

    /// Which node's result the checker compares: all, one, or none.
    pub fn has_result_at(&self, node: NodeId) -> bool {
        match *self {
            OpKind::Barrier | OpKind::Split { .. } => false,
            OpKind::Allreduce { .. } | OpKind::Bcast { .. } => true,
            OpKind::Reduce { root, .. } => root == node,
        }
    }
}

/// One operation of a script: what each node calls, and what it does before.
#[derive(Clone, Debug)]
pub struct ScriptOp {
    /// What every node calls (but the `mismatched` ones).
    pub kind: OpKind,
    /// Nodes that call `other` instead (a deliberate mismatch: every node
    /// must then fail this operation or the next).
    pub mismatched: Vec<NodeId>,
    /// What the mismatched nodes call.
    pub other: OpKind,
    /// Per node: the virtual time it computes before calling, ns.
    pub think: Vec<u64>,
}

impl ScriptOp {
    /// What node `node` calls.
    pub fn kind_at(&self, node: NodeId) -> OpKind {
        if self.mismatched.contains(&node) {
            self.other
        } else {
            self.kind
        }
    }

    /// Whether the nodes disagree.
    pub fn is_mismatch(&self) -> bool {
        !self.mismatched.is_empty()
    }
}

/// The knobs of a workload.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadMix {
    /// Operations per instance, at least.
    pub min_ops: usize,
    /// Operations per instance, at most.
    pub max_ops: usize,
    /// Chance an operation is a collective (not a barrier).
    pub collectives: f64,
    /// Chance an instance has one deliberately mismatched operation.
    pub mismatch: f64,
    /// Mean think time before a call, ns (exponential; one call in 16
    /// thinks 20 times longer).
    pub think_ns: f64,
    /// The most elements of a reduction.
    pub max_count: usize,
}

impl Default for WorkloadMix {
    fn default() -> Self {
        WorkloadMix { min_ops: 4, max_ops: 40, collectives: 0.4, mismatch: 0.0, think_ns: 20_000.0, max_count: 300 }
    }
}

/// Draws one operation for `n` nodes on `algorithm`.
fn draw_kind(rng: &mut Rng, n: usize, algorithm: Algorithm, mix: &WorkloadMix) -> OpKind {
    let reduces = algorithm != Algorithm::Dissemination;
    if !rng.chance(mix.collectives) {
        return if rng.chance(0.25) { OpKind::Split { compute: rng.exp(mix.think_ns) as u64 } } else { OpKind::Barrier };
    }
    let count = if rng.chance(0.7) { rng.between(1, 4) } else { rng.between(1, mix.max_count) };
    let dtype = *rng.pick(&Dtype::ALL);
    let ops: Vec<Op> = Op::ALL.into_iter().filter(|o| o.applies_to(dtype)).collect();
    let op = *rng.pick(&ops);
    let root = rng.between(0, n - 1);
    match rng.range(0, 3) {
        0 if reduces => OpKind::Allreduce { op, dtype, count },
        1 if reduces => OpKind::Reduce { op, dtype, count, root },
        _ => OpKind::Bcast { root, len: count * 4 + rng.between(0, 3) },
    }
}

/// Something else than `kind` for a mismatch: another collective, another
/// root, another size.
fn draw_other(rng: &mut Rng, kind: OpKind, n: usize, algorithm: Algorithm, mix: &WorkloadMix) -> OpKind {
    let reduces = algorithm != Algorithm::Dissemination;
    for _ in 0..64 {
        let other = match rng.range(0, 4) {
            0 => OpKind::Barrier,
            1 if reduces => OpKind::Allreduce { op: Op::Sum, dtype: Dtype::U64, count: 2 },
            2 => match kind {
                OpKind::Bcast { root, len } => OpKind::Bcast { root: (root + 1 + rng.between(0, n - 2)) % n, len },
                OpKind::Allreduce { op, dtype, count } => OpKind::Allreduce { op, dtype, count: count + 1 },
                _ => OpKind::Bcast { root: rng.between(0, n - 1), len: 8 },
            },
            _ => draw_kind(rng, n, algorithm, mix),
        };
        // A split-phase barrier is a barrier: no mismatch.
        if other.collective() != kind.collective() || other.bytes() != kind.bytes() {
            return other;
        }
    }
    OpKind::Bcast { root: 0, len: 1 + kind.bytes() }
}

/// Draws a script of one instance.
pub fn script(rng: &mut Rng, n: usize, algorithm: Algorithm, mix: &WorkloadMix) -> Vec<ScriptOp> {
    let len = rng.between(mix.min_ops, mix.max_ops.max(mix.min_ops));
    let mismatch_at = rng.chance(mix.mismatch).then(|| rng.between(0, len - 1));
    (0..len)
        .map(|i| {
            let kind = draw_kind(rng, n, algorithm, mix);
            let think = (0..n)
                .map(|_| {
                    let t = rng.exp(mix.think_ns) as u64;
                    if rng.chance(1.0 / 16.0) {
                        t * 20
                    } else {
                        t
                    }
                })
                .collect();
            let (mismatched, other) = if mismatch_at == Some(i) {
                let other = draw_other(rng, kind, n, algorithm, mix);
                let k = rng.between(1, n - 1);
                let mut nodes: Vec<NodeId> = (0..n).collect();
                for j in 0..n {
                    let s = rng.between(j, n - 1);
                    nodes.swap(j, s);
                }
                nodes.truncate(k);
                nodes.sort_unstable();
                (nodes, other)
            } else {
                (Vec::new(), kind)
            };
            ScriptOp { kind, mismatched, other, think }
        })
        .collect()
}

/// Whether a call of `kind` runs on the barrier joined of a pair (a
/// barrier, split-phase or not), not on the collectives' barrier beside it
/// ([`super::PairNode`]).
pub fn on_joined(kind: &OpKind) -> bool {
    matches!(kind, OpKind::Barrier | OpKind::Split { .. })
}

/// A script run by pairs ([`super::PairNode`]): a mismatch only between
/// calls on the same barrier of the pair. A barrier on some nodes against
/// a collective on others runs on two barriers that never meet (an
/// erroneous MPI program, which waits for ever, as MPI's own would): a
/// barrier's mismatch is dropped, and a collective's other call made
/// another collective.
pub fn pair_mismatches(script: &mut [ScriptOp]) {
    for op in script.iter_mut().filter(|o| o.is_mismatch() && on_joined(&o.kind) != on_joined(&o.other)) {
        if on_joined(&op.kind) {
            op.mismatched.clear();
            op.other = op.kind;
        } else {
            op.other = OpKind::Bcast { root: 0, len: 1 + op.kind.bytes() };
        }
    }
}

/// Node `node`'s input of an operation (native-endian elements; a
/// broadcast's non-root gets zeros), drawn from its own stream.
pub fn input(seed: u64, instance: usize, op: usize, node: NodeId, kind: OpKind) -> Vec<u8> {
    let mut rng = Rng::fork(seed, ((instance as u64) << 40) ^ ((op as u64) << 16) ^ node as u64);
    let mut out = Vec::with_capacity(kind.bytes());
    match kind {
        OpKind::Barrier | OpKind::Split { .. } => {}
        OpKind::Bcast { root, len } => {
            out.resize(len, 0);
            if root == node {
                out.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            }
        }
        OpKind::Allreduce { dtype, count, .. } | OpKind::Reduce { dtype, count, .. } => {
            out.resize(count * dtype.size(), 0);
            // Each element from the next draw (one loop per type, the
            // type's match out of the loop). Small values sometimes, so
            // that products and sums stay varied.
            let r = &mut rng;
            match dtype {
                Dtype::I32 => fill(&mut out, r, |_, r| (if r & 1 == 0 { (r >> 8) as i32 % 100 } else { (r >> 8) as i32 }).to_ne_bytes()),
                Dtype::U32 => fill(&mut out, r, |_, r| (if r & 1 == 0 { (r >> 8) as u32 % 100 } else { (r >> 8) as u32 }).to_ne_bytes()),
                Dtype::I64 => fill(&mut out, r, |_, r| (r as i64).to_ne_bytes()),
                Dtype::U64 => fill(&mut out, r, |_, r| (if r & 1 == 0 { r % 1000 } else { r }).to_ne_bytes()),
                Dtype::F32 => fill(&mut out, r, |rng, r| (float(rng, r) as f32).to_ne_bytes()),
                Dtype::F64 => fill(&mut out, r, |rng, r| float(rng, r).to_ne_bytes()),
            }
        }
    }
    out
}

/// Fills `out` element by element (`W` bytes each) with `element` of the
/// generator and its next draw.
fn fill<const W: usize>(out: &mut [u8], rng: &mut Rng, mut element: impl FnMut(&mut Rng, u64) -> [u8; W]) {
    for chunk in out.chunks_exact_mut(W) {
        let r = rng.next_u64();
        chunk.copy_from_slice(&element(rng, r));
    }
}

/// A float whose magnitude varies widely (so the order of a sum shows in
/// its low bits), and now and then a signed zero (so the order of a
/// min/max tie shows).
fn float(rng: &mut Rng, r: u64) -> f64 {
    match r % 16 {
        0 => 0.0,
        1 => -0.0,
        // 2^k exactly, as `2f64.powi(k)` gives it (k in -59..=19: normal numbers).
        _ => (rng.unit() - 0.5) * f64::from_bits(((1023 + (r >> 8) as i32 % 40 - 20) as u64) << 52),
    }
}

/// An expression over ranks: a leaf is a node's input, an inner node the
/// left fold of its children's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A node's contribution.
    Leaf(NodeId),
    /// `((c0 ⊕ c1) ⊕ c2) ⊕ …`.
    Fold(Vec<Shape>),
}

/// The order in which `algorithm` combines `n` nodes' contributions.
/// `None` for an algorithm that does not reduce.
pub fn shape(algorithm: Algorithm, n: usize) -> Option<Shape> {
    Some(match algorithm {
        Algorithm::Dissemination => return None,
        // Node 0 (or every node) folds everything it heard in rank order.
        Algorithm::Concurrent | Algorithm::OnePhase => Shape::Fold((0..n).map(Shape::Leaf).collect()),
        // A k-nomial subtree covers a range [v, v + span): it folds its k
        // sub-ranges, lowest first.
        Algorithm::Tree { k, .. } => {
            let k = k.get();
            let mut span = 1;
            while span < n {
                span *= k;
            }
            fn sub(v: usize, span: usize, k: usize, n: usize) -> Shape {
                if span == 1 {
                    return Shape::Leaf(v);
                }
                let part = span / k;
                Shape::Fold((0..k).map(|d| v + d * part).filter(|&s| s < n).map(|s| sub(s, part, k, n)).collect())
            }
            sub(0, span, k, n)
        }
        // Recursive doubling over the largest power of two p ≤ n; node
        // p + j's contribution first folded into node j's.
        Algorithm::ShuffleExchange => {
            let mut p = 1;
            while p * 2 <= n {
                p *= 2;
            }
            fn half(a: usize, len: usize, p: usize, n: usize) -> Shape {
                if len == 1 {
                    return if a + p < n { Shape::Fold(vec![Shape::Leaf(a), Shape::Leaf(a + p)]) } else { Shape::Leaf(a) };
                }
                Shape::Fold(vec![half(a, len / 2, p, n), half(a + len / 2, len / 2, p, n)])
            }
            half(0, p, p, n)
        }
    })
}

/// The simulator's own arithmetic on one element type.
trait Num: Copy {
    const SIZE: usize;
    fn read(b: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
    fn apply(op: Op, a: Self, b: Self) -> Self;
}

macro_rules! int_num {
    ($t:ty) => {
        impl Num for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("element"))
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes())
            }
            fn apply(op: Op, a: Self, b: Self) -> Self {
                match op {
                    Op::Sum => a.wrapping_add(b),
                    Op::Prod => a.wrapping_mul(b),
                    Op::Min => std::cmp::min(a, b),
                    Op::Max => std::cmp::max(a, b),
                    Op::Band => a & b,
                    Op::Bor => a | b,
                    Op::Bxor => a ^ b,
                }
            }
        }
    };
}
int_num!(i32);
int_num!(i64);
int_num!(u32);
int_num!(u64);

macro_rules! float_num {
    ($t:ty) => {
        impl Num for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("element"))
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes())
            }
            fn apply(op: Op, a: Self, b: Self) -> Self {
                // Min and max keep the left operand on a tie (the
                // documented rule, which decides -0.0 against 0.0).
                match op {
                    Op::Sum => a + b,
                    Op::Prod => a * b,
                    Op::Min => {
                        if b < a {
                            b
                        } else {
                            a
                        }
                    }
                    Op::Max => {
                        if b > a {
                            b
                        } else {
                            a
                        }
                    }
                    _ => panic!("a bitwise operation on floats"),
                }
            }
        }
    };
}
float_num!(f32);
float_num!(f64);

/// The fold of `shape` for every element at once: each element's value is
/// made by the same operations in the same order as a fold of that element
/// alone, so the result is bitwise the same (floats included); one pass per
/// node of the shape rather than one walk of the shape per element.
fn eval<T: Num>(shape: &Shape, op: Op, inputs: &[Vec<u8>], count: usize) -> Vec<T> {
    match shape {
        Shape::Leaf(r) => inputs[*r][..count * T::SIZE].chunks_exact(T::SIZE).map(T::read).collect(),
        Shape::Fold(parts) => {
            let mut it = parts.iter();
            let mut acc = eval::<T>(it.next().expect("a fold of something"), op, inputs, count);
            for p in it {
                let part = eval::<T>(p, op, inputs, count);
                for (a, b) in acc.iter_mut().zip(part) {
                    *a = T::apply(op, *a, b);
                }
            }
            acc
        }
    }
}

fn reduce_as<T: Num>(shape: &Shape, op: Op, inputs: &[Vec<u8>], count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * T::SIZE);
    for v in eval::<T>(shape, op, inputs, count) {
        v.write(&mut out);
    }
    out
}

/// The result every node (or the root) must have, from every node's input.
/// `None` for a barrier.
pub fn reference(algorithm: Algorithm, kind: OpKind, inputs: &[Vec<u8>]) -> Option<Vec<u8>> {
    let n = inputs.len();
    match kind {
        OpKind::Barrier | OpKind::Split { .. } => None,
        OpKind::Bcast { root, .. } => Some(inputs[root].clone()),
        OpKind::Allreduce { op, dtype, count } | OpKind::Reduce { op, dtype, count, .. } => {
            // A reduce on its own plan folds at its root as concurrent does.
            let own = matches!(kind, OpKind::Reduce { .. }) && crate::plan::reduce_gathers(n);
            let shape = shape(if own { Algorithm::Concurrent } else { algorithm }, n)?;
            Some(match dtype {
                Dtype::I32 => reduce_as::<i32>(&shape, op, inputs, count),
                Dtype::I64 => reduce_as::<i64>(&shape, op, inputs, count),
                Dtype::U32 => reduce_as::<u32>(&shape, op, inputs, count),
                Dtype::U64 => reduce_as::<u64>(&shape, op, inputs, count),
                Dtype::F32 => reduce_as::<f32>(&shape, op, inputs, count),
                Dtype::F64 => reduce_as::<f64>(&shape, op, inputs, count),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Fanout, Release};

    fn leaves(s: &Shape, out: &mut Vec<NodeId>) {
        match s {
            Shape::Leaf(r) => out.push(*r),
            Shape::Fold(p) => p.iter().for_each(|c| leaves(c, out)),
        }
    }

    #[test]
    fn a_float_input_scales_by_a_power_of_two_as_powi_does() {
        for r in [0u64, 1 << 8, 39 << 8, 40 << 8, u64::MAX, 0x8000_0000_0000_0000, 0xFFFF_FF00, 0x1234_5678_9ABC_DEF0] {
            for bits in (0..3).map(|d| r.wrapping_add(d)) {
                let (mut a, mut b) = (Rng::fork(9, bits), Rng::fork(9, bits));
                let k = (bits >> 8) as i32 % 40 - 20;
                let want = match bits % 16 {
                    0 => 0.0,
                    1 => -0.0,
                    _ => (b.unit() - 0.5) * 2f64.powi(k),
                };
                assert_eq!(float(&mut a, bits).to_bits(), want.to_bits(), "r={bits:#x}");
            }
        }
    }

    #[test]
    fn every_shape_covers_every_rank_once_in_order() {
        for algorithm in Algorithm::all() {
            for n in 1..=40 {
                let Some(s) = shape(algorithm, n) else { continue };
                let mut l = Vec::new();
                leaves(&s, &mut l);
                // Shuffle exchange folds node p + j in beside node j.
                if algorithm != Algorithm::ShuffleExchange {
                    assert_eq!(l, (0..n).collect::<Vec<_>>(), "{algorithm} n={n}");
                }
                l.sort_unstable();
                assert_eq!(l, (0..n).collect::<Vec<_>>(), "{algorithm} n={n}");
            }
        }
        // Binary tree over 8: ((0 1)(2 3))((4 5)(6 7)), as the binomial gather folds.
        let t = shape(Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, 3).unwrap();
        use Shape::{Fold, Leaf};
        assert_eq!(t, Fold(vec![Fold(vec![Leaf(0), Leaf(1)]), Fold(vec![Leaf(2)])]));
        let s = shape(Algorithm::ShuffleExchange, 3).unwrap();
        assert_eq!(s, Fold(vec![Fold(vec![Leaf(0), Leaf(2)]), Leaf(1)]));
    }

    #[test]
    fn the_reference_sees_the_order_of_a_float_sum() {
        let inputs: Vec<Vec<u8>> = [1e17f64, 1.0, -1e17, 1.0].iter().map(|x| x.to_ne_bytes().to_vec()).collect();
        let kind = OpKind::Allreduce { op: Op::Sum, dtype: Dtype::F64, count: 1 };
        let flat = reference(Algorithm::Concurrent, kind, &inputs).unwrap();
        let paired = reference(Algorithm::ShuffleExchange, kind, &inputs).unwrap();
        // ((1e17 + 1) - 1e17) + 1 = 1 (the first 1 is lost); (1e17 + 1) + (-1e17 + 1) = 0.
        assert_eq!(f64::from_ne_bytes(flat[..].try_into().unwrap()), 1.0);
        assert_eq!(f64::from_ne_bytes(paired[..].try_into().unwrap()), 0.0);
    }
}
