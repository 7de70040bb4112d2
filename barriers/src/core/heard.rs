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
    slots: [Slot; 3],
}

/// One barrier's words, and what they hold in all: the hot path (one copy
/// a message, nothing held) then neither clears nor counts them word by
/// word, which cost a walk over every expected message per barrier.
#[derive(Debug)]
struct Slot {
    /// Its barrier (`u64::MAX`: none yet).
    at: u64,
    bits: Vec<u16>,
    /// The frames held, in all: the [`HELD`] bits set in `bits`.
    held: u32,
    /// Whether some word may be other than 0.
    dirty: bool,
}

impl Slot {
    /// Empties the record (its words only if one was written).
    fn clear(&mut self) {
        if self.dirty {
            self.bits.fill(0);
            self.dirty = false;
        }
        self.held = 0;
    }
}

impl CopiesHeard {
    /// For `expected` messages per barrier.
    pub(super) fn new(expected: usize) -> CopiesHeard {
        let slot = || Slot { at: u64::MAX, bits: vec![0u16; expected], held: 0, dirty: false };
        CopiesHeard { slots: [slot(), slot(), slot()] }
    }

    /// Barrier `epoch`'s record (cleared if the slot held another barrier's).
    fn slot(&mut self, epoch: u64) -> &mut Slot {
        let slot = &mut self.slots[(epoch % 3) as usize];
        if slot.at != epoch {
            slot.at = epoch;
            slot.clear();
        }
        slot
    }

    /// Message `i` of barrier `epoch` was first heard as its copy `k` of
    /// `count`, of an answer if `answer`: its other copies are held, and
    /// its original if `original` (an answer's original may never have
    /// been sent: a broadcast's end implied by the next data).
    #[inline]
    pub(super) fn first(&mut self, epoch: u64, i: usize, (k, count): (u32, u32), answer: bool, original: bool) {
        let slot = self.slot(epoch);
        if let Some(b) = slot.bits.get_mut(i) {
            let copies = (((1u32 << count.min(8)) - 1) & !(1u32 << k.min(8))) as u16 & 0xFF;
            let word = copies | if answer { ANSWERED } else { 0 } | if answer && original { ORIGINAL } else { 0 };
            if *b | word != 0 {
                slot.held = slot.held - (*b & HELD).count_ones() + (word & HELD).count_ones();
                slot.dirty = true;
                *b = word;
            }
        }
    }

    /// Copy `k` of message `i` of barrier `epoch` (of an answer if
    /// `answer`) came after another frame of it: whether it was held (it
    /// is cleared: a duplicated frame clears nothing more).
    #[inline]
    pub(super) fn late(&mut self, epoch: u64, i: usize, k: u32, answer: bool) -> bool {
        let slot = self.slot(epoch);
        let Some(b) = slot.bits.get_mut(i) else { return false };
        let bit = match (answer, *b & ANSWERED != 0) {
            // The original of a message first heard as an answer.
            (false, true) => ORIGINAL,
            (a, first_answered) if a == first_answered && k < 8 => 1 << k,
            _ => 0,
        };
        let held = *b & bit != 0;
        *b &= !bit;
        slot.held -= u32::from(held);
        held
    }

    /// Barrier `epoch`'s frames can no longer come: how many are still
    /// held (they were lost). Its record is then empty.
    pub(super) fn settle(&mut self, epoch: u64) -> u32 {
        let slot = &mut self.slots[(epoch % 3) as usize];
        if slot.at != epoch {
            return 0;
        }
        let lost = slot.held;
        slot.clear();
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

    /// The frames held, counted as they are set and cleared, are what a
    /// word-by-word count finds, and late frames are found held alike: a
    /// reference that keeps only the words (counted and cleared at each
    /// settle) against this, over a long random mix of barriers, copies,
    /// answers, late frames and settles.
    #[test]
    fn the_running_count_is_the_word_by_word_count() {
        struct Words([(u64, Vec<u16>); 3]);
        impl Words {
            fn slot(&mut self, epoch: u64) -> &mut [u16] {
                let (at, bits) = &mut self.0[(epoch % 3) as usize];
                if *at != epoch {
                    *at = epoch;
                    bits.fill(0);
                }
                bits
            }
        }
        let expected = 5;
        let mut words = Words([(u64::MAX, vec![0; expected]), (u64::MAX, vec![0; expected]), (u64::MAX, vec![0; expected])]);
        let mut h = CopiesHeard::new(expected);
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut held_seen, mut settled) = (0, 0);
        for _ in 0..200_000 {
            let epoch = 10 + next(8);
            let i = next(expected as u64 + 1) as usize; // one index past the words too
            match next(3) {
                0 => {
                    let count = 1 + next(9) as u32;
                    let (k, answer, original) = (next(u64::from(count) + 1) as u32, next(2) == 0, next(2) == 0);
                    h.first(epoch, i, (k, count), answer, original);
                    if let Some(b) = words.slot(epoch).get_mut(i) {
                        let copies = (((1u32 << count.min(8)) - 1) & !(1u32 << k.min(8))) as u16 & 0xFF;
                        *b = copies | if answer { ANSWERED } else { 0 } | if answer && original { ORIGINAL } else { 0 };
                    }
                }
                1 => {
                    let (k, answer) = (next(10) as u32, next(2) == 0);
                    let want = words.slot(epoch).get_mut(i).is_some_and(|b| {
                        let bit = match (answer, *b & ANSWERED != 0) {
                            (false, true) => ORIGINAL,
                            (a, first_answered) if a == first_answered && k < 8 => 1 << k,
                            _ => 0,
                        };
                        let held = *b & bit != 0;
                        *b &= !bit;
                        held
                    });
                    assert_eq!(h.late(epoch, i, k, answer), want);
                    held_seen += u32::from(want);
                }
                _ => {
                    let (at, bits) = &mut words.0[(epoch % 3) as usize];
                    let want = if *at == epoch { bits.iter_mut().map(|b| (std::mem::take(b) & HELD).count_ones()).sum() } else { 0 };
                    assert_eq!(h.settle(epoch), want, "barrier {epoch}");
                    settled += want;
                }
            }
        }
        assert!(held_seen > 300 && settled > 1_000, "the mix exercised both: {held_seen} late, {settled} settled");
    }
}
