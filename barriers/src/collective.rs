//! Collectives on the barrier's plans: allreduce, reduce to a root and
//! broadcast from any root.
//!
//! The paper's barriers gather arrivals, then release. With data in the
//! gathered messages and the result in the release, the same plans give a
//! reduction and a broadcast, on the same engine: the same instances, epochs,
//! NACKs, answers and progress agent. A collective call is one barrier epoch
//! whose messages carry a *contribution* ([`wire`]): the tree gathers partial
//! results towards node 0, which multicasts the result; concurrent sends
//! every contribution to node 0; one-phase has every node multicast its own
//! and reduce all of them locally; shuffle exchange is recursive doubling.
//! (Dissemination counts contributions more than once when the node count
//! is not a power of two, so it does not reduce.)
//!
//! **Broadcast releases first**, whatever the algorithm: its epoch runs its
//! own plan ([`plan::build_bcast`], chosen per call by the root). The root
//! multicasts its data at once; every other node tells the root it entered
//! (as it enters, so that this send overlaps the wait for the data) and
//! waits only for the data, and its call returns as soon as it is there.
//! The epoch then completes in the background (the root multicasts the end
//! once every node entered): the progress agent carries it, and the node's
//! next call completes it first. So no node completes a broadcast before
//! every node has entered it, and the engine's window (no node more than
//! one epoch from another) holds across broadcasts from changing roots. A
//! lost data frame is NACKed by the node that waits for it and answered
//! from the root's stored copy (kept until every node has completed the
//! broadcast); a lost entry is NACKed by the root. **The end is implied**
//! when the root broadcasts again at once: a root that completes a
//! broadcast, every node's call agreeing, as its next call begins another
//! broadcast of its own, sends no end; the next data says so in its header
//! ([`wire::ENDS_PREVIOUS`]), and a node still waiting for the end takes
//! that data (or its answer) for it. One multicast less on every node's
//! path; the root still answers a NACK for the end. Only that flag counts:
//! another message of the next epoch proves every node entered this one,
//! but not that the calls agreed (a node may go on after reporting a
//! mismatch), and a node waiting for the end must learn of one.
//!
//! **Never counted twice.** A contribution is stored on its first arrival
//! only: the engine's per-barrier bitmap (the same that makes a duplicate
//! arrival never count twice toward a barrier) decides. A lost one is NACKed
//! and re-sent from what the sender stored when it first sent it.
//!
//! **Reproducible floating point.** Each node combines what a step gathered
//! at once, when the step is complete, in rank order (a left fold over the
//! contributions of the lower-ranked blocks first), never in arrival order.
//! The tree and concurrent results are computed once, at node 0, and
//! multicast; one-phase has every node fold the same contributions in the
//! same order; recursive doubling has both partners of each stage compute
//! `lower ⊕ higher`. So the result is bitwise identical on every rank and in
//! every run with the same algorithm and node count, whatever the arrival
//! order, loss or duplication. (MPI does not promise this.)
//!
//! **Sizes.** One contribution travels in one message: at most the
//! transport's [`max_data`](crate::Transport::max_data) minus the
//! [`wire::HEADER_LEN`] header. Longer data is cut into segments of whole
//! elements, each one collective epoch of its own (so a segment of `k`
//! elements costs about one barrier).

use std::fmt;

use crate::plan::{self, Step};
use crate::transport::NodeId;

/// The element types a reduction combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dtype {
    /// 32-bit signed integer.
    I32 = 1,
    /// 64-bit signed integer.
    I64 = 2,
    /// 32-bit unsigned integer.
    U32 = 3,
    /// 64-bit unsigned integer.
    U64 = 4,
    /// IEEE 754 single precision.
    F32 = 5,
    /// IEEE 754 double precision.
    F64 = 6,
}

impl Dtype {
    /// Every type.
    pub const ALL: [Dtype; 6] = [Dtype::I32, Dtype::I64, Dtype::U32, Dtype::U64, Dtype::F32, Dtype::F64];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    /// Whether it is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F64)
    }

    /// The type of a wire code.
    pub fn from_code(code: u8) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| *d as u8 == code)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::I32 => "i32",
            Dtype::I64 => "i64",
            Dtype::U32 => "u32",
            Dtype::U64 => "u64",
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        })
    }
}

/// The reduction operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Sum (integers wrap around).
    Sum = 1,
    /// Minimum.
    Min = 2,
    /// Maximum.
    Max = 3,
    /// Product (integers wrap around).
    Prod = 4,
    /// Bitwise and (integers only).
    Band = 5,
    /// Bitwise or (integers only).
    Bor = 6,
    /// Bitwise exclusive or (integers only).
    Bxor = 7,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 7] = [Op::Sum, Op::Min, Op::Max, Op::Prod, Op::Band, Op::Bor, Op::Bxor];

    /// Whether it applies to `dtype` (bitwise operations need integers).
    pub const fn applies_to(self, dtype: Dtype) -> bool {
        !(dtype.is_float() && matches!(self, Op::Band | Op::Bor | Op::Bxor))
    }

    /// The operation of a wire code.
    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.into_iter().find(|o| *o as u8 == code)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Sum => "sum",
            Op::Min => "min",
            Op::Max => "max",
            Op::Prod => "prod",
            Op::Band => "band",
            Op::Bor => "bor",
            Op::Bxor => "bxor",
        })
    }
}

/// An element type a typed collective takes: `i32`, `i64`, `u32`, `u64`,
/// `f32`, `f64`.
pub trait Element: Copy + sealed::Sealed {
    /// Its [`Dtype`].
    const DTYPE: Dtype;
    /// Appends its native-endian bytes.
    fn put(self, out: &mut Vec<u8>);
    /// Reads it from native-endian bytes (exactly its size).
    fn get(bytes: &[u8]) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().expect("one element's bytes"))
            }
        }
    };
}
element!(i32, I32);
element!(i64, I64);
element!(u32, U32);
element!(u64, U64);
element!(f32, F32);
element!(f64, F64);

/// What one collective epoch does; every node of the epoch must call the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// A barrier: no data.
    Barrier,
    /// Reduce with `op`, the result on every node.
    Allreduce {
        /// The operation.
        op: Op,
        /// The element type.
        dtype: Dtype,
    },
    /// Reduce with `op`, the result on `root` only.
    Reduce {
        /// The operation.
        op: Op,
        /// The element type.
        dtype: Dtype,
        /// The node that receives the result.
        root: NodeId,
    },
    /// `root`'s data to every node.
    Bcast {
        /// The node whose data goes to all.
        root: NodeId,
    },
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Collective::Barrier => f.write_str("barrier"),
            Collective::Allreduce { op, dtype } => write!(f, "allreduce({op}, {dtype})"),
            Collective::Reduce { op, dtype, root } => write!(f, "reduce({op}, {dtype}, root {root})"),
            Collective::Bcast { root } => write!(f, "bcast(root {root})"),
        }
    }
}

impl Collective {
    /// The element size of its data (bytes for a broadcast, 0 for a barrier).
    pub fn element_size(&self) -> usize {
        match self {
            Collective::Barrier => 0,
            Collective::Allreduce { dtype, .. } | Collective::Reduce { dtype, .. } => dtype.size(),
            Collective::Bcast { .. } => 1,
        }
    }

    /// An error if it cannot run among `nodes` nodes (a bitwise operation on
    /// floats, a root that is not a node).
    pub fn check(&self, nodes: usize) -> Result<(), String> {
        match *self {
            Collective::Allreduce { op, dtype } | Collective::Reduce { op, dtype, .. } if !op.applies_to(dtype) => {
                Err(format!("{self}: {op} applies to integers only"))
            }
            Collective::Reduce { root, .. } | Collective::Bcast { root } if root >= nodes => {
                Err(format!("{self}: the root is not one of the {nodes} node(s)"))
            }
            _ => Ok(()),
        }
    }

    /// Whether it runs on a barrier of this algorithm: every algorithm
    /// but dissemination reduces (which counts contributions more than
    /// once), and a broadcast has its own plan ([`plan::build_bcast`]).
    pub fn runs_on(&self, algorithm: plan::Algorithm) -> bool {
        matches!(self, Collective::Barrier | Collective::Bcast { .. }) || algorithm != plan::Algorithm::Dissemination
    }
}

/// The contribution a collective message carries.
///
/// ```text
///  0      1      2      3      4            8            12
/// +------+------+------+------+------------+------------+----------------
/// | call | op   | type | flags| count (BE) | root (BE)  | elements (LE)
/// +------+------+------+------+------------+------------+----------------
/// ```
///
/// `call` is 1 (allreduce), 2 (reduce) or 3 (broadcast); a barrier's
/// message carries no contribution at all. `flags` bit 0: the elements are
/// there (a broadcast's non-root nodes contribute none); bit 1: the partial
/// result is void, a node upstream called another collective; bit 2 (a
/// broadcast's data): the root completed the epoch before, a broadcast of
/// its own, with every node's call agreeing, and sent no end for it (this
/// message is the end); bit 3: more segments of the same call follow this
/// one (a call longer than a message runs in segments, one epoch each: a
/// node whose call ends with this segment must not take a peer's longer
/// call for its own). `count` is the
/// number of elements of the whole segment; elements are little-endian.
pub mod wire {
    use super::{Collective, Dtype, Op};

    /// The header's length.
    pub const HEADER_LEN: usize = 12;
    /// `flags`: the elements follow.
    pub const HAS_DATA: u8 = 1;
    /// `flags`: the sender, or a node before it, met a node that called
    /// another collective; the result is void.
    pub const MISMATCH: u8 = 2;
    /// `flags`: this broadcast's data is also the end of the root's
    /// broadcast before, which completed with every call agreeing.
    pub const ENDS_PREVIOUS: u8 = 4;
    /// `flags`: more segments of the same call follow this one.
    pub const MORE: u8 = 8;

    mod field {
        use std::ops::Range;
        pub const CALL: usize = 0;
        pub const OP: usize = 1;
        pub const DTYPE: usize = 2;
        pub const FLAGS: usize = 3;
        pub const COUNT: Range<usize> = 4..8;
        pub const ROOT: Range<usize> = 8..12;
    }

    /// A checked view of a contribution: a whole header, and exactly the
    /// elements its header announces (or none, without [`HAS_DATA`]).
    #[derive(Debug, Clone, Copy)]
    pub struct Contribution<T: AsRef<[u8]>> {
        buffer: T,
    }

    impl<T: AsRef<[u8]>> Contribution<T> {
        /// A view of `buffer` if its header is valid and its length agrees with it.
        pub fn new_checked(buffer: T) -> Option<Contribution<T>> {
            let b = buffer.as_ref();
            if b.len() < HEADER_LEN {
                return None;
            }
            let view = Contribution { buffer };
            let call = view.call()?;
            let want = if view.has_data() { view.count() as usize * call.element_size() } else { 0 };
            (view.buffer.as_ref().len() == HEADER_LEN + want).then_some(view)
        }

        /// The collective it belongs to.
        pub fn call(&self) -> Option<Collective> {
            let b = self.buffer.as_ref();
            let root = u32::from_be_bytes(b[field::ROOT].try_into().expect("a header holds the root")) as usize;
            let (op, dtype) = (Op::from_code(b[field::OP]), Dtype::from_code(b[field::DTYPE]));
            match b[field::CALL] {
                1 => Some(Collective::Allreduce { op: op?, dtype: dtype? }),
                2 => Some(Collective::Reduce { op: op?, dtype: dtype?, root }),
                3 => Some(Collective::Bcast { root }),
                _ => None,
            }
        }

        /// Elements in the segment.
        pub fn count(&self) -> u32 {
            u32::from_be_bytes(self.buffer.as_ref()[field::COUNT].try_into().expect("a header holds the count"))
        }

        /// Whether the elements are there.
        pub fn has_data(&self) -> bool {
            self.buffer.as_ref()[field::FLAGS] & HAS_DATA != 0
        }

        /// Whether a node upstream met a node calling another collective.
        pub fn mismatch(&self) -> bool {
            self.buffer.as_ref()[field::FLAGS] & MISMATCH != 0
        }

        /// Whether this broadcast's data also ends the root's broadcast before.
        pub fn ends_previous(&self) -> bool {
            self.buffer.as_ref()[field::FLAGS] & ENDS_PREVIOUS != 0
        }

        /// Whether more segments of the same call follow this one.
        pub fn more(&self) -> bool {
            self.buffer.as_ref()[field::FLAGS] & MORE != 0
        }

        /// The elements (little-endian).
        pub fn data(&self) -> &[u8] {
            &self.buffer.as_ref()[HEADER_LEN..]
        }
    }

    /// Writes the header of `call` with `count` elements into `out` (cleared
    /// first); the caller appends the elements if `has_data`.
    pub fn emit_header(call: Collective, count: u32, has_data: bool, out: &mut Vec<u8>) {
        let (code, op, dtype, root) = match call {
            Collective::Barrier => (0, 0, 0, 0),
            Collective::Allreduce { op, dtype } => (1, op as u8, dtype as u8, 0),
            Collective::Reduce { op, dtype, root } => (2, op as u8, dtype as u8, root as u32),
            Collective::Bcast { root } => (3, 0, 0, root as u32),
        };
        out.clear();
        out.extend_from_slice(&[code, op, dtype, if has_data { HAS_DATA } else { 0 }]);
        out.extend_from_slice(&count.to_be_bytes());
        out.extend_from_slice(&root.to_be_bytes());
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_contribution_reads_back_and_wrong_lengths_are_refused() {
            let call = Collective::Reduce { op: Op::Max, dtype: Dtype::U32, root: 258 };
            let mut bytes = Vec::new();
            emit_header(call, 2, true, &mut bytes);
            bytes.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
            assert_eq!(&bytes[..HEADER_LEN], &[2, 4 - 1, 3, 1, 0, 0, 0, 2, 0, 0, 1, 2]);
            let view = Contribution::new_checked(&bytes[..]).unwrap();
            assert_eq!((view.call(), view.count(), view.has_data(), view.data().len()), (Some(call), 2, true, 8));
            assert!(Contribution::new_checked(&bytes[..bytes.len() - 1]).is_none(), "one byte short");
            assert!(Contribution::new_checked(&bytes[..HEADER_LEN - 1]).is_none(), "no whole header");
            let mut bad = bytes.clone();
            bad[2] = 9;
            assert!(Contribution::new_checked(&bad[..]).is_none(), "no such type");
            emit_header(Collective::Bcast { root: 1 }, 100, false, &mut bytes);
            let view = Contribution::new_checked(&bytes[..]).unwrap();
            assert!(!view.has_data() && view.data().is_empty());
        }
    }
}

macro_rules! combine_as {
    ($t:ty, $op:expr, $acc:expr, $other:expr, $other_first:expr, int) => {
        combine_as!(@run $t, $acc, $other, $other_first, |a: $t, b: $t| match $op {
            Op::Sum => a.wrapping_add(b),
            Op::Prod => a.wrapping_mul(b),
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::Band => a & b,
            Op::Bor => a | b,
            Op::Bxor => a ^ b,
        })
    };
    ($t:ty, $op:expr, $acc:expr, $other:expr, $other_first:expr, float) => {
        combine_as!(@run $t, $acc, $other, $other_first, |a: $t, b: $t| match $op {
            Op::Sum => a + b,
            Op::Prod => a * b,
            // The left operand unless the right is strictly beyond it (NaN:
            // the left); fixed by the combining order, like the sums.
            Op::Min => if b < a { b } else { a },
            Op::Max => if b > a { b } else { a },
            Op::Band | Op::Bor | Op::Bxor => unreachable!("checked: bitwise operations take integers"),
        })
    };
    (@run $t:ty, $acc:expr, $other:expr, $other_first:expr, $f:expr) => {{
        const W: usize = std::mem::size_of::<$t>();
        let f = $f;
        for (a, b) in $acc.chunks_exact_mut(W).zip($other.chunks_exact(W)) {
            let x = <$t>::from_le_bytes((&*a).try_into().expect("whole element"));
            let y = <$t>::from_le_bytes(b.try_into().expect("whole element"));
            let r = if $other_first { f(y, x) } else { f(x, y) };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

/// `acc ← acc ⊕ other` (or `other ⊕ acc` if `other_first`), element-wise,
/// on little-endian elements of `dtype`.
pub fn combine(op: Op, dtype: Dtype, acc: &mut [u8], other: &[u8], other_first: bool) {
    match dtype {
        Dtype::I32 => combine_as!(i32, op, acc, other, other_first, int),
        Dtype::I64 => combine_as!(i64, op, acc, other, other_first, int),
        Dtype::U32 => combine_as!(u32, op, acc, other, other_first, int),
        Dtype::U64 => combine_as!(u64, op, acc, other, other_first, int),
        Dtype::F32 => combine_as!(f32, op, acc, other, other_first, float),
        Dtype::F64 => combine_as!(f64, op, acc, other, other_first, float),
    }
}

/// Copies native-endian elements of `size` bytes to little-endian (a copy
/// on little-endian hosts).
fn ne_to_le(size: usize, from: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(from);
    if cfg!(target_endian = "big") {
        let start = out.len() - from.len();
        for e in out[start..].chunks_exact_mut(size) {
            e.reverse();
        }
    }
}

/// Copies little-endian elements of `size` bytes to native-endian.
fn le_to_ne(size: usize, from: &[u8], out: &mut [u8]) {
    out.copy_from_slice(from);
    if cfg!(target_endian = "big") {
        for e in out.chunks_exact_mut(size) {
            e.reverse();
        }
    }
}

/// A node's contributions across epochs, kept by the engine: what it sent
/// at each step (for answers), what arrived for each expected message (first
/// arrival only), and its running partial result. Buffers are reused: after
/// the first epochs of a size, nothing is allocated per message.
#[derive(Debug)]
pub(crate) struct Contributions {
    /// The current call, its element count, and whether more segments of
    /// the call follow this epoch's.
    call: Collective,
    count: u32,
    more: bool,
    /// The running partial result (a whole contribution, header included;
    /// empty for a barrier).
    acc: Vec<u8>,
    scratch: Vec<u8>,
    /// `sent[e % 2][step]`: what each step sent in epoch e.
    sent: [Vec<Vec<u8>>; 2],
    /// `arrived[e % 2][index]`: what each expected message carried in epoch e.
    arrived: [Vec<Vec<u8>>; 2],
    /// The first disagreement seen (peers calling another collective).
    error: Option<String>,
    /// Whether the application was told of this epoch's disagreement
    /// (then one found again, as the epoch completes void, is not new).
    reported: bool,
}

impl Contributions {
    /// Storage for a plan of `steps` steps waiting for `expected` messages.
    pub(crate) fn new(steps: usize, expected: usize) -> Contributions {
        let per = |k: usize| vec![Vec::new(); k];
        Contributions {
            call: Collective::Barrier,
            count: 0,
            more: false,
            acc: Vec::new(),
            scratch: Vec::new(),
            sent: [per(steps), per(steps)],
            arrived: [per(expected), per(expected)],
            error: None,
            reported: false,
        }
    }

    /// Starts an epoch of `call` with this node's `input` (native-endian
    /// elements; ignored for a barrier, and for a broadcast's non-roots);
    /// `more`: more segments of this call follow this epoch's.
    pub(crate) fn begin(&mut self, call: Collective, count: u32, more: bool, input: &[u8], me: NodeId) {
        self.reported = false;
        self.call = call;
        self.count = count;
        self.more = more;
        self.acc.clear();
        let has_data = match call {
            Collective::Barrier => return,
            Collective::Bcast { root } => root == me,
            _ => true,
        };
        Self::emit(call, count, more, has_data, &mut self.acc);
        if has_data {
            ne_to_le(call.element_size(), input, &mut self.acc);
        }
    }

    /// What step `step` of an epoch of parity `parity` sends: the partial
    /// result so far (only its header, without `with_data`: a broadcast's
    /// entry and end), stored for answers.
    pub(crate) fn stage(&mut self, parity: usize, step: usize, with_data: bool) -> &[u8] {
        let slot = &mut self.sent[parity][step];
        slot.clear();
        if with_data || self.acc.len() < wire::HEADER_LEN {
            slot.extend_from_slice(&self.acc);
        } else {
            slot.extend_from_slice(&self.acc[..wire::HEADER_LEN]);
            slot[3] &= !wire::HAS_DATA;
        }
        slot
    }

    /// What step `step` sent in the epoch of parity `parity` (empty if none).
    pub(crate) fn sent(&self, parity: usize, step: usize) -> &[u8] {
        &self.sent[parity][step]
    }

    /// Keeps what the expected message `index` carried (its first arrival).
    pub(crate) fn arrive(&mut self, parity: usize, index: usize, data: &[u8]) {
        let slot = &mut self.arrived[parity][index];
        slot.clear();
        slot.extend_from_slice(data);
    }

    /// Marks this node's contribution (a broadcast root's data, staged
    /// next) as also ending its broadcast before ([`wire::ENDS_PREVIOUS`]).
    pub(crate) fn mark_ends_previous(&mut self) {
        if let Some(flags) = self.acc.get_mut(3) {
            *flags |= wire::ENDS_PREVIOUS;
        }
    }

    /// Records for expected message `index` of an epoch of parity `parity`
    /// a header of this node's own call (a broadcast's end implied by the
    /// next epoch: it agrees by construction).
    pub(crate) fn arrive_agreeing(&mut self, parity: usize, index: usize) {
        let slot = &mut self.arrived[parity][index];
        Self::emit(self.call, self.count, self.more, false, slot);
    }

    /// A header ([`wire::emit_header`]), marked [`wire::MORE`] if `more`.
    fn emit(call: Collective, count: u32, more: bool, has_data: bool, out: &mut Vec<u8>) {
        wire::emit_header(call, count, has_data, out);
        if more {
            out[3] |= wire::MORE;
        }
    }

    /// Takes in what step `step` gathered (`indices`, in plan order): a
    /// release replaces the partial result, an arrival or exchange is
    /// combined with it in rank order.
    pub(crate) fn absorb(&mut self, parity: usize, step: &Step, indices: std::ops::Range<usize>, me: NodeId) {
        if step.waits.is_empty() {
            return;
        }
        // Every message of the step must be of this very call.
        for (w, i) in step.waits.iter().zip(indices.clone()) {
            if let Err(e) = self.agrees(&self.arrived[parity][i], plan::tag::carries_data(w.tag)) {
                if !self.reported {
                    self.error.get_or_insert(format!("node {} {e}", w.from));
                }
                // What this node passes on is void: say so downstream.
                if let Some(flags) = self.acc.get_mut(3) {
                    *flags |= wire::MISMATCH;
                }
                return;
            }
        }
        // (An end carries no data: it only says the epoch is complete.)
        if self.call == Collective::Barrier || step.waits.iter().all(|w| !plan::tag::carries_data(w.tag)) {
            return;
        }
        let replaces = |tag| matches!(tag, plan::tag::RELEASE | plan::tag::POST | plan::tag::BCAST_DATA);
        if let Some(i) = step.waits.iter().zip(indices.clone()).find(|(w, _)| replaces(w.tag)).map(|(_, i)| i) {
            self.acc.clear();
            self.acc.extend_from_slice(&self.arrived[parity][i]);
            return;
        }
        // A left fold over the step's contributions and this node's partial
        // result, in rank order (the plans list each step's senders in
        // increasing order).
        let mut folded = std::mem::take(&mut self.scratch);
        folded.clear();
        let mut mine_in = false;
        for (w, i) in step.waits.iter().zip(indices) {
            if !mine_in && w.from > me {
                Self::fold(self.call, &mut folded, &self.acc);
                mine_in = true;
            }
            Self::fold(self.call, &mut folded, &self.arrived[parity][i]);
        }
        if !mine_in {
            Self::fold(self.call, &mut folded, &self.acc);
        }
        self.scratch = std::mem::replace(&mut self.acc, folded);
    }

    /// `folded ← folded ⊕ next` (whole contributions; an empty `folded` takes `next`).
    fn fold(call: Collective, folded: &mut Vec<u8>, next: &[u8]) {
        if folded.is_empty() {
            folded.extend_from_slice(next);
            return;
        }
        match call {
            Collective::Allreduce { op, dtype } | Collective::Reduce { op, dtype, .. } => {
                combine(op, dtype, &mut folded[wire::HEADER_LEN..], &next[wire::HEADER_LEN..], false)
            }
            Collective::Bcast { .. } => {
                // The root's data, wherever it is.
                if folded[3] & wire::HAS_DATA == 0 && next[3] & wire::HAS_DATA != 0 {
                    folded.clear();
                    folded.extend_from_slice(next);
                }
            }
            Collective::Barrier => {}
        }
    }

    /// Whether a peer's message belongs to this node's call (`data_due`:
    /// the message is one that carries a reduction's data, not an end).
    fn agrees(&self, data: &[u8], data_due: bool) -> Result<(), String> {
        if self.call == Collective::Barrier {
            return if data.is_empty() { Ok(()) } else { Err(format!("sent data in a collective where this node called {}", self.call)) };
        }
        let Some(view) = wire::Contribution::new_checked(data) else {
            return Err(if data.is_empty() {
                format!("called a barrier where this node called {} of {} element(s)", self.call, self.count)
            } else {
                "sent a malformed contribution".into()
            });
        };
        if view.mismatch() {
            return Err(format!("reports that nodes called different collectives ({} here)", self.call));
        }
        let must_have = data_due && matches!(self.call, Collective::Allreduce { .. } | Collective::Reduce { .. });
        if view.call() != Some(self.call) || view.count() != self.count || (must_have && !view.has_data()) {
            return Err(format!(
                "called {} of {} element(s) where this node called {} of {}",
                view.call().map_or("?".into(), |c| c.to_string()),
                view.count(),
                self.call,
                self.count
            ));
        }
        if view.more() != self.more {
            return Err(if view.more() {
                format!("called a longer {} (more segments follow) where this node's call ends with this segment", self.call)
            } else {
                format!("called a shorter {} (it ends with this segment) where this node's call goes on", self.call)
            });
        }
        Ok(())
    }

    /// A peer says nodes called different collectives in this epoch
    /// ([`crate::transport::MISMATCHED`]): the error, unless one is known.
    pub(crate) fn note_reported(&mut self) {
        if self.reported {
            return;
        }
        self.error.get_or_insert_with(|| format!("a peer reports that nodes called different collectives ({} here)", self.call));
    }

    /// A peer runs another plan in this epoch (another collective, or a
    /// broadcast from another root): the error, unless one is known.
    pub(crate) fn note_other_plan(&mut self) {
        if self.reported {
            return;
        }
        self.error.get_or_insert_with(|| format!("a peer called another collective, or a broadcast from another root ({} here)", self.call));
    }

    /// The first disagreement since the last call, if any.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        let error = self.error.take();
        self.reported |= error.is_some();
        error
    }

    /// The epoch goes over to a void barrier (peers run another plan):
    /// nothing of this node's call is sent any more; whether the
    /// application was told stays.
    pub(crate) fn void_to_barrier(&mut self, me: NodeId) {
        let reported = self.reported;
        self.begin(Collective::Barrier, 0, false, &[], me);
        self.reported = reported;
    }

    /// Whether a disagreement waits to be reported.
    pub(crate) fn has_error(&self) -> bool {
        self.error.is_some()
    }

    /// Copies the result into `out` (native-endian elements); false if the
    /// epoch had none (a broadcast whose root's data never came: a bug).
    pub(crate) fn result(&self, out: &mut [u8]) -> bool {
        let Some(view) = wire::Contribution::new_checked(&self.acc[..]) else { return false };
        if !view.has_data() || view.data().len() != out.len() {
            return false;
        }
        le_to_ne(self.call.element_size(), view.data(), out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le<E: Element>(xs: &[E]) -> Vec<u8> {
        let mut ne = Vec::new();
        xs.iter().for_each(|x| x.put(&mut ne));
        let mut out = Vec::new();
        ne_to_le(E::DTYPE.size(), &ne, &mut out);
        out
    }

    #[test]
    fn every_operation_combines_elementwise_and_ints_wrap() {
        let mut acc = le(&[i32::MAX, -4, 6]);
        combine(Op::Sum, Dtype::I32, &mut acc, &le(&[1i32, 3, -6]), false);
        assert_eq!(acc, le(&[i32::MIN, -1, 0]));
        let cases: [(Op, [u32; 2]); 7] = [
            (Op::Sum, [12, 7]),
            (Op::Min, [2, 3]),
            (Op::Max, [10, 4]),
            (Op::Prod, [20, 12]),
            (Op::Band, [2, 0]),
            (Op::Bor, [10, 7]),
            (Op::Bxor, [8, 7]),
        ];
        for (op, want) in cases {
            let mut acc = le(&[10u32, 3]);
            combine(op, Dtype::U32, &mut acc, &le(&[2u32, 4]), false);
            assert_eq!(acc, le(&want), "{op}");
        }
        // Floats: the left operand wins a tie, so the order decides -0.0 against 0.0.
        let mut acc = le(&[1.5f64, -0.0]);
        combine(Op::Max, Dtype::F64, &mut acc, &le(&[1.0f64, 0.0]), true);
        assert_eq!(acc, le(&[1.5f64, 0.0]));
        let mut acc = le(&[1.5f64, -0.0]);
        combine(Op::Max, Dtype::F64, &mut acc, &le(&[1.0f64, 0.0]), false);
        assert_eq!(acc, le(&[1.5f64, -0.0]));
    }

    /// Broadcasts from changing roots back to back (each root's data
    /// checked on every node), mixed with barriers (their shared-clock
    /// safety checked) and allreduces, under 20% loss, 20% duplication and
    /// reordering, at 2 to 16 nodes on algorithms of every shape.
    #[test]
    fn release_first_broadcasts_from_changing_roots_mixed_with_barriers_and_allreduces_under_loss() {
        use crate::check::{check, Timeline};
        use crate::mem::{self, Faults};
        use crate::plan::{Algorithm, Fanout, Release};
        use crate::threads::run_per_node;
        use crate::BarrierConfig;
        use std::time::{Duration, Instant};
        let algorithms = [
            Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast },
            Algorithm::ShuffleExchange,
            Algorithm::Concurrent,
            Algorithm::OnePhase,
            Algorithm::Tree { k: Fanout::FOUR, release: Release::Tree },
        ];
        const ROUNDS: usize = 6;
        let runs: Vec<_> = [2usize, 3, 4, 5, 8, 16]
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let algorithm = algorithms[i % algorithms.len()];
                std::thread::spawn(move || {
                    let faults = Faults { loss: 0.2, duplicate: 0.2, max_delay: Duration::from_micros(100), seed: 40 + n as u64 };
                    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_micros(500), Duration::from_secs(10));
                    let results = run_per_node(mem::network(n, 1, faults), config, move |b| {
                        let me = b.node();
                        let mut timeline = Timeline::default();
                        let payload = |root: usize, k: usize| -> Vec<u32> { (0..3).map(|i| (root * 1000 + k * 10 + i) as u32).collect() };
                        for k in 0..ROUNDS {
                            // Every root once, in an order that changes each round, back to back.
                            for j in 0..n {
                                let root = (j * 3 + k) % n;
                                let mut data = if me == root { payload(root, k) } else { vec![0; 3] };
                                b.bcast(&mut data, root)?;
                                assert_eq!(data, payload(root, k), "{algorithm} n={n}: round {k}, bcast from {root} at node {me}");
                            }
                            let entered = Instant::now();
                            b.wait()?;
                            timeline.record(entered, Instant::now());
                            let mut x = [me as u64 + 1];
                            b.allreduce(&mut x, Op::Sum)?;
                            assert_eq!(x[0], (n * (n + 1) / 2) as u64, "{algorithm} n={n}: allreduce at node {me}");
                            // A broadcast right after an allreduce, and a barrier right after it.
                            let root = (k + 1) % n;
                            let mut data = if me == root { payload(root, 99) } else { vec![0; 3] };
                            b.bcast(&mut data, root)?;
                            assert_eq!(data, payload(root, 99));
                            let entered = Instant::now();
                            b.wait()?;
                            timeline.record(entered, Instant::now());
                        }
                        Ok((timeline, b.stats()))
                    });
                    let results: Vec<_> =
                        results.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|e| panic!("{algorithm} n={n}: node {i}: {e}"))).collect();
                    let answers: u64 = results.iter().map(|(_, s)| s.answers).sum();
                    assert!(answers > 0, "{algorithm} n={n}: 20% loss and nothing answered?");
                    let timelines: Vec<Timeline> = results.into_iter().map(|(t, _)| t).collect();
                    let (violations, checked) = check(&timelines);
                    assert_eq!((violations, checked), (vec![], 2 * ROUNDS), "{algorithm} n={n}");
                })
            })
            .collect();
        for run in runs {
            run.join().expect("a run failed");
        }
    }

    #[test]
    fn bitwise_operations_on_floats_and_foreign_roots_are_refused() {
        assert!(Collective::Allreduce { op: Op::Bxor, dtype: Dtype::F32 }.check(4).unwrap_err().contains("integers only"));
        assert!(Collective::Bcast { root: 4 }.check(4).unwrap_err().contains("not one of the 4"));
        assert!(Collective::Reduce { op: Op::Sum, dtype: Dtype::F64, root: 3 }.check(4).is_ok());
        assert!(!Collective::Allreduce { op: Op::Sum, dtype: Dtype::I32 }.runs_on(plan::Algorithm::Dissemination));
        assert!(Collective::Bcast { root: 1 }.runs_on(plan::Algorithm::Dissemination), "a broadcast has its own plan");
    }
}
