//! The epoch window and serial arithmetic: barriers of an instance are
//! numbered from 0 with 64 bits; the wire carries the low 32, and a receiver
//! places them within one of its own number (RFC 1982). A node at barrier c
//! hears only of barriers c−1, c and c+1 (no node can be further away), so
//! wrap-around of the 32-bit field is harmless.

use super::heard::CopiesHeard;
use crate::expect::Bits;
use crate::transport::NodeId;

/// Which barrier this node is at, and what has arrived of it and the next.
#[derive(Debug)]
pub(super) struct Window {
    /// The barrier in progress, or the next one when idle; all below are done.
    pub(super) epoch: u64,
    /// What has arrived of barrier e, in `got[e % 2]` (the current and the next).
    pub(super) got: [Bits; 2],
    /// The plan each epoch ran, by parity (for answers to the previous one).
    pub(super) variant: [usize; 2],
    /// Whether nodes called different collectives in barrier e (found here,
    /// or told by a peer), in `void[e % 2]`: its messages say so.
    pub(super) void: [bool; 2],
    /// Whether the barrier before `epoch` completed void: answers of its
    /// messages say so too (its `void` slot serves the barrier after next).
    pub(super) last_void: bool,
    /// The frames of each message of c−1, c and c+1 held for lost until
    /// they can no longer come.
    pub(super) copies: CopiesHeard,
}

impl Window {
    /// At barrier `first`, with `expected` messages indexed.
    pub(super) fn new(first: u64, expected: usize) -> Window {
        Window {
            epoch: first,
            got: [Bits::new(expected), Bits::new(expected)],
            variant: [BASE; 2],
            void: [false; 2],
            last_void: false,
            copies: CopiesHeard::new(expected),
        }
    }
}

/// The plan variant of barriers, reductions and the algorithm's own epochs.
pub(super) const BASE: usize = 0;

/// The plan variant of a release-first broadcast from `root`.
pub(super) const fn bcast_variant(root: NodeId) -> usize {
    1 + root
}

/// The plan variant of a gather-first reduce to `root` among `n` nodes
/// (after the broadcasts').
pub(super) const fn reduce_variant(root: NodeId, n: usize) -> usize {
    1 + n + root
}

/// The full number of a barrier whose low 32 bits are `wire`, if it lies
/// within c−1..=c+1 of barrier `current` = c.
pub(super) fn place(current: u64, wire: u32) -> Option<u64> {
    let distance = wire.wrapping_sub(current as u32) as i32;
    if !(-1..=1).contains(&distance) {
        return None;
    }
    current.checked_add_signed(i64::from(distance))
}

/// Whether the barrier whose low 32 bits are `wire` lies two or more
/// barriers ahead of barrier `current` (within half the 32-bit space): a
/// process the instance counts is never there while this one is at `current`.
pub(super) fn ahead(current: u64, wire: u32) -> bool {
    wire.wrapping_sub(current as u32) as i32 >= 2
}

/// Whether the barrier whose low 32 bits are `wire` lies two or more
/// barriers behind `current` (its sender, if counted in this node's place,
/// is left behind: see [`ahead`]).
#[inline]
pub(super) fn behind(current: u64, wire: u32) -> bool {
    (current as u32).wrapping_sub(wire) as i32 >= 2
}

/// The parity slot of barrier `epoch` (the current and the next barrier's
/// state live side by side).
pub(super) const fn parity(epoch: u64) -> usize {
    (epoch % 2) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_neighbouring_barriers_are_placed_and_the_wire_number_wraps() {
        assert_eq!(place(10, 9), Some(9));
        assert_eq!(place(10, 11), Some(11));
        assert_eq!(place(10, 12), None);
        assert_eq!(place(10, 8), None);
        assert_eq!(place(u64::from(u32::MAX), 0), Some(1 << 32));
        assert_eq!(place(1 << 32, u32::MAX), Some(u64::from(u32::MAX)));
        assert_eq!(place(0, u32::MAX), None, "no barrier before 0");
        assert!(ahead(10, 12) && ahead(u64::from(u32::MAX), 1) && !ahead(10, 11) && !ahead(10, 8) && !ahead(10, 10));
    }
}
