//! Which frames of each expected message the loss estimate holds for lost,
//! counted only once they have had their chance to come.
//!
//! Every message carries its copy's index and how many copies its sender
//! sent. When one is first heard, its other copies are expected, and for
//! one first heard as an answer its original too. Those frames may be
//! lost, or only late: every frame has its own delay, so copy j may come
//! after copy k > j, and an original after the answer to a NACK that
//! crossed it. So nothing is counted when a message is first heard: its
//! other frames are held, each cleared (and counted come) when it comes,
//! and those still missing are counted lost when the barrier after the
//! message's completes (its frames can no longer be placed: see
//! [`super::window::place`]). Counting copy k heard first as k frames
//! lost at once, as copies arriving in order would allow, kept a lossless
//! network with jitter above zero for ever: one reordered pair of copies
//! raised the estimate, the copies it raised were reordered in turn, and
//! every multicast went out as two to eight copies. (Counting only the
//! copies before the first heard, and forgiving late ones, undercounted
//! real loss by half when copies are reordered: the copies after the
//! first heard went unseen.)
//!
//! Per message a word: bit j while copy j is held, [`ORIGINAL`] while the
//! original of a message first heard as an answer is, and [`ANSWERED`] if
//! so (the copy bits are then the answer's). One slot per barrier of the
//! window (c−1, c, c+1, by epoch modulo 3), cleared lazily when a slot is
//! first used for another barrier. No allocation per frame.

/// The original of a message first heard as an answer is held.
const ORIGINAL: u16 = 1 << 8;
/// The message was first heard as an answer.
const ANSWERED: u16 = 1 << 9;
/// The bits of held frames.
const HELD: u16 = ORIGINAL | 0xFF;

/// The frames held for lost, per expected message, per barrier of the window.
#[derive(Debug)]
pub(super) struct CopiesHeard {
    slots: [(u64, Vec<u16>); 3],
}

impl CopiesHeard {
    /// For `expected` messages per barrier.
    pub(super) fn new(expected: usize) -> CopiesHeard {
        let slot = || (u64::MAX, vec![0u16; expected]);
        CopiesHeard { slots: [slot(), slot(), slot()] }
    }

    /// Barrier `epoch`'s record (cleared if the slot held another barrier's).
    fn slot(&mut self, epoch: u64) -> &mut [u16] {
        let (at, bits) = &mut self.slots[(epoch % 3) as usize];
        if *at != epoch {
            *at = epoch;
            bits.fill(0);
        }
        bits
    }

    /// Message `i` of barrier `epoch` was first heard as its copy `k` of
    /// `count`, of an answer if `answer`: its other copies are held, and
    /// its original if `original` (an answer's original may never have
    /// been sent: a broadcast's end implied by the next data).
    #[inline]
    pub(super) fn first(&mut self, epoch: u64, i: usize, (k, count): (u32, u32), answer: bool, original: bool) {
        if let Some(b) = self.slot(epoch).get_mut(i) {
            let copies = (((1u32 << count.min(8)) - 1) & !(1u32 << k.min(8))) as u16 & 0xFF;
            *b = copies | if answer { ANSWERED } else { 0 } | if answer && original { ORIGINAL } else { 0 };
        }
    }

    /// Copy `k` of message `i` of barrier `epoch` (of an answer if
    /// `answer`) came after another frame of it: whether it was held (it
    /// is cleared: a duplicated frame clears nothing more).
    #[inline]
    pub(super) fn late(&mut self, epoch: u64, i: usize, k: u32, answer: bool) -> bool {
        let Some(b) = self.slot(epoch).get_mut(i) else { return false };
        let bit = match (answer, *b & ANSWERED != 0) {
            // The original of a message first heard as an answer.
            (false, true) => ORIGINAL,
            (a, first_answered) if a == first_answered && k < 8 => 1 << k,
            _ => 0,
        };
        let held = *b & bit != 0;
        *b &= !bit;
        held
    }

    /// Barrier `epoch`'s frames can no longer come: how many are still
    /// held (they were lost). Its record is then empty.
    pub(super) fn settle(&mut self, epoch: u64) -> u32 {
        let (at, bits) = &mut self.slots[(epoch % 3) as usize];
        if *at != epoch {
            return 0;
        }
        // (Most words are empty: the record spans every plan's messages.
        // Only the others are counted, and the whole record cleared at once.)
        let lost = bits.iter().filter(|&&b| b & HELD != 0).map(|&b| (b & HELD).count_ones()).sum();
        bits.fill(0);
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_frames_are_cleared_once_and_the_rest_count_when_settled() {
        let mut h = CopiesHeard::new(4);
        h.first(7, 2, (3, 4), false, false); // copies 0, 1, 2 held
        assert!(h.late(7, 2, 1, false));
        assert!(!h.late(7, 2, 1, false), "a duplicate");
        assert!(!h.late(7, 2, 3, false), "the copy first heard was never held");
        assert!(!h.late(7, 1, 0, false), "another message");
        h.first(7, 3, (1, 2), true, true); // an answer's copy 1: its copy 0 and the original held
        assert!(h.late(7, 3, 0, false), "the original came");
        assert_eq!(h.settle(8), 0, "nothing of barrier 8");
        assert_eq!(h.settle(7), 2 + 1, "copies 0 and 2 of message 2, the answer's copy 0 of message 3");
        assert_eq!(h.settle(7), 0, "settled once");
        // The slot of barrier 10 is barrier 7's: reused, cleared.
        h.first(7, 0, (2, 3), false, false);
        h.first(10, 1, (1, 2), false, false);
        h.first(10, 2, (0, 1), true, false); // an answer whose original may not exist
        assert_eq!(h.settle(10), 1);
    }
}
