//! Copies, from the loss seen, spaced in time by the bursts seen.
//!
//! **How many.** Each node estimates the loss rate of its paths from what
//! arrives ([`LossEstimate`]): every message carries its copy's index and
//! how many copies its sender sends, so a receiver knows which frames of a
//! message to expect (see [`super::heard`]). From that rate, a message
//! (data, answer or NACK) goes as many times as make the expected cost of
//! recovering its receivers' losses no more than the cost of one more copy
//! ([`RECOVERY_WORTH`]): on a clean network (nothing ever lost) every
//! message goes once, and nothing is ever spaced. A node that has seen
//! little takes its peers' word too: a data message that came in copies
//! sets a floor under its estimate ([`LossEstimate::peer_copies`]).
//!
//! **How far apart** ([`CopySpacing`]). Copies sent back to back go at
//! the NIC's pace; a loss burst longer than that (a switch's buffer
//! overflowing for a while, interference) takes them all, and the message
//! costs a recovery as if it had gone once. So copy k goes k gaps after the
//! first, the gap learned from the evidence of this node's own copies: a
//! peer's first NACK that it answers, a retry timeout or more after a
//! message it sent in copies went, proves that the asker lost every copy.
//! Under independent loss at rate p, a message in c copies to r receivers
//! draws r·p^c such NACKs on average (summed as the copies go out); when
//! more than ten times as many come (three at least), copies were lost
//! together, within one burst: the gap doubles (from [`FIRST_GAP`]). (At
//! three times, it grew at a few nodes under 20% independent loss at 1,024
//! nodes: the estimate, which counts a message lost whole as one frame,
//! runs low there.) When the copies sent
//! since have drawn no more than independence predicts, [`CLEAN_VERDICTS`]
//! times in a row, it halves (to zero: back to back). A copy is never
//! spaced beyond a quarter of the shortest learned retry timeout (the
//! receiver's NACK would come first). (Evidence at the receiver, copies of
//! a message lost whole against in part, speaks of the *senders'* gap: in
//! a tree the leaves see only node 0's well spaced release and would
//! narrow their own gap, which their parents' evidence says is too short.)

use std::time::Duration;

use super::Core;
use crate::transport::{COPY_MASK, COPY_SHIFT, NACK_ID_SHIFT, REPLY_ID_SHIFT};

/// What recovering one receiver's loss costs against one more copy: a
/// recovery takes a retry timeout and a round trip (tens of µs, a dozen
/// message times at least) on the barrier's path, where every node waits
/// for it, while a copy takes its sender one message time, mostly off that
/// path (the first copy goes first). Copies are added while the expected
/// number of receivers that miss every copy, times this, exceeds one.
/// (Measured in the real-protocol simulator, 10 GbE, tree4, n = 8: 16 left
/// 1% loss at 1.20× lossless, 64 at 1.11×, 200 at 1.03× with p99.9 within
/// 3× of the lossless median; 20% and 50% loss gained too.)
pub(super) const RECOVERY_WORTH: f64 = 200.0;

/// The most copies of one message.
pub(super) const MAX_COPIES: u32 = 8;

/// The most times a leaving node sends its last word ([`LossEstimate::last_word`]).
const LAST_WORD_MAX: u32 = 64;

/// The loss estimate's memory, in frames (an exponential window). Long
/// enough that a node that takes in few frames a barrier still sees many
/// losses within it: a tree's leaf takes in only the release and its
/// copies, and with 256 frames it saw about 2.5 losses in the window at 1%
/// loss, so its estimate swung across the copies' threshold (0.5% for one
/// receiver) and it sent its arrival once about a quarter of the time.
/// Measured in the real-protocol simulator, 10 GbE, tree4, 64 nodes, 1%
/// loss: 256 frames 1.27× lossless (p99.9 4.5× the lossless median), 1,024
/// 1.18×, 4,096 1.16× (p99.9 2.7×); 8 nodes 1.05 → 1.03×, and 20% and
/// bursty loss no worse. (It also forgets a past loss more slowly: a clean
/// network's estimate is exactly 0 until its first loss, and decays after.)
const LOSS_WINDOW: f64 = 4096.0;

/// The loss rate of this node's paths, learned from what arrives: frames
/// lost and frames that came, each decayed over [`LOSS_WINDOW`] frames
/// (every frame counts, from the first: a first loss after many clean
/// frames is a low rate, not one half). Frames are counted lost once
/// proven missing ([`super::heard`]). Nothing is configured: a
/// network that never lost a frame has a rate of exactly 0.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LossEstimate {
    lost: f64,
    came: f64,
    /// The least loss rate that the copies of the peers' messages imply
    /// (see [`LossEstimate::peer_copies`]), decayed as frames come.
    hint: f64,
    /// That rate per copy count (0: not worked out yet), for
    /// `implied_for` receivers: worked out once, not at every frame taken
    /// in (its `powf` was 2% of the simulator's instructions across the
    /// fault mix).
    implied: [f64; COPY_MASK as usize + 1],
    implied_for: usize,
}

impl LossEstimate {
    /// A frame arrived (of those expected): the window moves on.
    #[inline]
    pub(super) fn came(&mut self) {
        let keep = 1.0 - 1.0 / LOSS_WINDOW;
        self.lost *= keep;
        self.hint *= keep;
        self.came = self.came * keep + 1.0;
    }

    /// `lost` frames were lost (proven: see [`super::heard`]).
    #[inline]
    pub(super) fn lost(&mut self, lost: u32) {
        self.lost += f64::from(lost);
    }

    /// **The peers' evidence.** A peer's message came in `count` copies
    /// (more than one): its sender has seen loss on the same network, at a
    /// rate of at least the one at which [`LossEstimate::copies`] adds the
    /// last of them for `receivers` receivers (the most a message of this
    /// job has; a lower bound). A node that takes in few frames (a tree's
    /// leaf: the release and its copies, about three a barrier) sees its
    /// own first loss late (at 1% loss, after some 30 barriers on average)
    /// and until then sent its arrival once: at 1,024 nodes and 1% loss,
    /// in the first hundred barriers, about two arrivals a barrier were
    /// lost whole, each a retry timeout on the barrier's path. It takes
    /// the peers' word until its own estimate is higher. (A clean network
    /// sends no copies, so the hint stays 0 there.)
    #[inline]
    pub(super) fn peer_copies(&mut self, count: u32, receivers: usize) {
        if count > 1 {
            // (Halved: at the rate itself, this node's own copies for the
            // same receivers come out at the sender's count by rounding, and
            // a node's passing high estimate, taken up by every node that
            // hears it and handed back, sustained itself: 1,024 nodes sent
            // arrivals in 5 copies at 1% loss.)
            let receivers = receivers.max(1);
            if self.implied_for != receivers {
                self.implied = [0.0; COPY_MASK as usize + 1];
                self.implied_for = receivers;
            }
            let implied = &mut self.implied[(count & COPY_MASK) as usize];
            if *implied == 0.0 {
                *implied = (RECOVERY_WORTH * receivers as f64).powf(-1.0 / f64::from(count - 1)) / 2.0;
            }
            self.hint = self.hint.max(*implied);
        }
    }

    /// The estimated fraction of frames lost.
    #[inline]
    pub(super) fn rate(&self) -> f64 {
        let own = if self.lost == 0.0 { 0.0 } else { self.lost / (self.lost + self.came) };
        own.max(self.hint)
    }

    /// How many times to send a word that must reach each of `receivers`
    /// peers though no answer can be waited for (a node's last word as it
    /// leaves): the fewest with odds below 10⁻⁶ that some peer misses them
    /// all, at the loss seen or 50%, whichever is higher (the worst loss the
    /// protocol is built for; the estimate may have seen nothing of it:
    /// a node that gives up has heard little). At 50% loss: 21 to 3
    /// nodes, 32 to 4,096. At most [`LAST_WORD_MAX`].
    pub(super) fn last_word(&self, receivers: usize) -> u32 {
        let q = self.rate().clamp(0.5, 0.99);
        let c = ((receivers.max(1) as f64 * 1e6).ln() / (1.0 / q).ln()).ceil() as u32;
        c.clamp(1, LAST_WORD_MAX)
    }

    /// How many copies of a message for `receivers` nodes to send: the
    /// fewest whose expected cost of recovering the receivers that miss
    /// them all is below one more copy's.
    #[inline]
    pub(super) fn copies(&self, receivers: usize) -> u32 {
        let p = self.rate();
        if p == 0.0 {
            return 1;
        }
        let mut c = 1;
        let mut miss = p;
        while c < MAX_COPIES && receivers as f64 * miss * RECOVERY_WORTH > 1.0 {
            c += 1;
            miss *= p;
        }
        c
    }
}

/// The `arg` bits of copy `k` of `count`.
#[inline]
pub(super) fn copy_arg(k: u32, count: u32) -> u32 {
    (k.min(COPY_MASK) | count.min(COPY_MASK) << 4) << COPY_SHIFT
}

/// The index of the copy that `arg` carries, and how many copies its
/// sender sent (at least one).
#[inline]
pub(super) fn copy_of(arg: u32) -> (u32, u32) {
    ((arg >> COPY_SHIFT) & COPY_MASK, ((arg >> (COPY_SHIFT + 4)) & COPY_MASK).max(1))
}

/// How far apart two nodes' NACK numbers start, of 255 (prime to it):
/// see [`nack_id`].
const NACK_ID_STRIDE: u64 = 97;

/// The number of node `me`'s NACK sent after `nacks` others (all its
/// copies alike), 1 to 255 ([`NACK_ID_SHIFT`]; 0 numbers none). Each node
/// counts from its own start, [`NACK_ID_STRIDE`] × `me` on: a multicast
/// reply says the number of the NACK that drew it ([`REPLY_ID_SHIFT`]),
/// and nodes that NACK in step (every leaf asking a late node 0 for its
/// release at its retry) would otherwise number their NACKs alike, each
/// taking the reply to another's for its own. Nodes fewer than 255 apart
/// never do in step; out of step, by chance (1 in 255), and the round trip
/// so measured is shorter than the asker's, not longer (its crossing
/// window narrower: a NACK answered that need not have been).
#[inline]
pub(super) fn nack_id(nacks: u64, me: usize) -> u32 {
    (nacks.wrapping_add(NACK_ID_STRIDE.wrapping_mul(me as u64)) % 255) as u32 + 1
}

/// The `arg` bits of NACK number `id` ([`nack_id`]).
#[inline]
pub(super) fn nack_id_arg(id: u32) -> u32 {
    (id & 0xFF) << NACK_ID_SHIFT
}

/// The number of the NACK whose copy `arg` carries ([`nack_id_arg`]).
#[inline]
pub(super) fn nack_id_of(arg: u32) -> u32 {
    (arg >> NACK_ID_SHIFT) & 0xFF
}

/// The `arg` bits of a reply (an answer or a status) to NACK number `id`
/// (0: to none; [`REPLY_ID_SHIFT`]).
#[inline]
pub(super) fn reply_id_arg(id: u32) -> u32 {
    (id & 0xFF) << REPLY_ID_SHIFT
}

/// The number of the NACK that drew the reply whose `arg` this is (0: none).
#[inline]
pub(super) fn reply_id_of(arg: u32) -> u32 {
    arg >> REPLY_ID_SHIFT
}

/// How many times [`RECOVERY_WORTH`] a plan's point-to-point message of a
/// barrier of `nodes` nodes counts (passed as its receivers to
/// [`LossEstimate::copies`]): one per eight nodes. The worth was measured at
/// 8 nodes, where a message lost whole holds up 8 nodes for a recovery; at
/// 1,024 it holds up 1,024, and about a thousand such messages go each
/// barrier. With the worth of 8 nodes, a node whose estimate was under the
/// threshold (0.5%) sent once, and at 1% loss about four messages a barrier
/// were lost whole at 1,024 nodes, each a retry timeout (20 µs at least) on
/// the barrier's path. (Measured, 10 GbE, tree4, seed 0, mean × lossless:
/// 1,024 nodes 1% 2.21 → 1.89×, 20% 3.21 → 2.72×, bursty 5%/4 2.55 → 1.76×;
/// 64 nodes 20% 2.03 → 1.95×, bursty 1.45 → 1.34×, 1% unchanged.)
pub(super) fn worth_scale(nodes: usize) -> usize {
    (nodes / 8).max(1)
}

/// The first gap between copies once bursts are seen to take them together
/// (then doubled while they still are): a little more than a 10 GbE host's
/// send gap, which spaces copies sent back to back already.
pub(super) const FIRST_GAP: Duration = Duration::from_micros(2);
/// The gap grows no further than this (and is used up to a quarter of the
/// shortest learned retry timeout).
const MAX_GAP: Duration = Duration::from_millis(1);
/// Messages lost whole, at least, for the gap to grow.
const WHOLE_EVIDENCE: u32 = 3;
/// Messages expected lost whole under independence before a verdict that
/// the gap is wide enough.
const CLEAN_EVIDENCE: f64 = 2.0;
/// Verdicts in a row that the gap is wide enough before it halves.
pub(super) const CLEAN_VERDICTS: u32 = 4;

/// The gap between a message's copies, learned from the NACKs that its
/// copies draw (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CopySpacing {
    gap: Duration,
    /// Since the last verdict: the messages expected lost whole (every
    /// copy at some receiver) were losses independent, and those answered.
    risked: f64,
    whole: u32,
    /// Verdicts in a row that the gap is wide enough.
    clean: u32,
}

impl CopySpacing {
    /// The gap between two copies (zero: back to back), at most `cap`.
    #[inline]
    pub(super) fn gap(&self, cap: Duration) -> Duration {
        self.gap.min(cap)
    }

    /// A message went in `copies` copies to `receivers` nodes, with the
    /// loss estimate at `rate`.
    #[inline]
    pub(super) fn sent(&mut self, receivers: usize, copies: u32, rate: f64) {
        if copies > 1 {
            self.risked += receivers as f64 * rate.powi(copies as i32);
            if self.risked >= CLEAN_EVIDENCE {
                self.verdict();
            }
        }
    }

    /// A NACK for a message sent in copies was answered: it lost them all.
    pub(super) fn answered_whole(&mut self) {
        self.whole += 1;
        if self.whole >= WHOLE_EVIDENCE {
            self.verdict();
        }
    }

    fn verdict(&mut self) {
        if self.whole >= WHOLE_EVIDENCE && f64::from(self.whole) > 10.0 * self.risked + 1.0 {
            self.gap = (self.gap * 2).clamp(FIRST_GAP, MAX_GAP);
            self.clean = 0;
        } else if self.risked >= CLEAN_EVIDENCE && f64::from(self.whole) <= self.risked {
            self.clean += 1;
            if self.clean >= CLEAN_VERDICTS {
                self.gap = if self.gap > FIRST_GAP { self.gap / 2 } else { Duration::ZERO };
                self.clean = 0;
            }
        } else if self.risked < CLEAN_EVIDENCE {
            // (Not yet enough copies sent to judge a few NACKs.)
            return;
        } else {
            self.clean = 0;
        }
        (self.risked, self.whole) = (0.0, 0);
    }
}

impl Core {
    /// The gap between this node's copies of one message now.
    #[inline]
    pub(super) fn copy_gap(&self) -> Duration {
        self.recovery.spacing.gap(self.recovery.rto.least() / 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_lost_together_widen_the_gap_and_enough_clean_ones_narrow_it() {
        let cap = Duration::from_secs(1);
        let mut s = CopySpacing::default();
        // Independent loss at 5%: messages in two copies to one receiver
        // are lost whole once in 400; at 50% in 4 copies, once in 16.
        for i in 0..4000 {
            s.sent(1, 2, 0.05);
            s.sent(1, 4, 0.5);
            if i % 400 == 0 {
                s.answered_whole();
            }
            if i % 16 == 0 {
                s.answered_whole();
            }
        }
        assert_eq!(s.gap(cap), Duration::ZERO, "independent loss: {s:?}");
        // Copies lost together: a message in two copies lost whole once in
        // 20 at 5% (20 times the odds of independent losses).
        for i in 0..400 {
            s.sent(1, 2, 0.05);
            if i % 20 == 0 {
                s.answered_whole();
            }
        }
        assert!(s.gap(cap) >= 2 * FIRST_GAP, "{s:?}");
        assert_eq!(s.gap(FIRST_GAP), FIRST_GAP, "capped");
        // The gap now outlasts the bursts: losses independent again, and
        // after enough clean verdicts it halves, then goes back to zero.
        for _ in 0..12 * CLEAN_VERDICTS {
            for _ in 0..800 {
                s.sent(1, 2, 0.05);
            }
            s.answered_whole();
        }
        assert_eq!(s.gap(cap), Duration::ZERO, "{s:?}");
    }
}
