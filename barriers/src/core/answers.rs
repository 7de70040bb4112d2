//! Answers to NACKs: what a NACK is answered with (the message again, by
//! multicast where it was multicast, unless the NACK crossed it), and the
//! per-peer rate limit with its log of recent answers. The rules are in
//! [`super::recovery`]'s notes ("Answers by multicast", the rate limit).

use std::time::{Duration, Instant};

use super::copies::{copy_arg, nack_id_of, reply_id_arg};
use super::window::parity;
use super::{Core, To};
use crate::plan::Dest;
use crate::transport::{Msg, MsgKind, NodeId, ECHO_SHIFT, MISMATCHED};

/// Whether a multicast message is answered by multicast where the network
/// has it (measured in the real-protocol simulator, 10 GbE, tree4: with
/// it, n = 8 at 20% loss 3.7× lossless, without 6.3×; n = 64 at 1% 1.4×,
/// without a storm of unicast answers at the root).
const MULTICAST_ANSWERS: bool = true;

/// A NACK of the same (epoch, tag) from the same peer within this fraction
/// of the learned retry timeout (or the shortest round trip seen, if
/// longer: the answer is on its way) of the last answer to it is not
/// answered. (The round trip: measured, 10 GbE, tree4, n = 64, 20% loss:
/// 41× lossless without it, 27× with it, in 281 barriers.)
const ANSWER_GAP_DIVISOR: u32 = 4;
/// How many recent answers are remembered per peer (a peer alternating
/// between this many (epoch, tag) pairs or fewer is still rate-limited).
const ANSWER_LOG: usize = 4;

/// The mantissa bits of an echo's float (of its 16: see [`ECHO_SHIFT`]),
/// under an implied leading 1: a size within a 1024th.
const ECHO_MANTISSA: u32 = 10;
/// How far apart two nodes' clock rates may be, as a fraction (1/1024:
/// about 1,000 ppm, a crystal's tolerance and an NTP slew's 500 ppm): an
/// echo is a time on the asker's clock, compared with one on this node's
/// over the time between two barriers, so a NACK is taken for a crossing
/// only if its echo falls short by more than that fraction of it. (Without
/// it, clocks 100 ppm apart and barriers 10 s apart made a NACK sent up to
/// 1 ms after the original should have come look like a crossing, and 500
/// ppm over 30 minutes had a live peer named silent: review rev34,
/// finding 2.) Where barriers come fast, as when crossings are many, it
/// is a thousandth of their interval, the echo's own resolution.
const CLOCK_RATES_APART: u32 = 1024;

/// The loss rate above which a NACK within a round trip of the message it
/// asks for is answered all the same: it may have crossed the original,
/// but the original is lost as often as the network loses a frame, and
/// unanswered it costs its asker a retry timeout where an answer costs one
/// send. (Once a reply named its NACK, round trips were timed truly, and
/// under heavy loss long: tree4 at 50% loss in the LogP simulator, 10 GbE,
/// took 235 µs a barrier at 512 nodes and 292 at 1,024, against 167 and
/// 212 before; answering them there: 163-180 and 209-225 µs, every row at
/// 0-20% and bursty the same within its seeds' spread; session 19.)
/// Crossings seen by an echo are still not answered.
const CROSSINGS_ANSWERED_ABOVE: f64 = 0.1;

/// How much a clock's rate may change between two intervals, as a
/// fraction (1/2000: 500 ppm, an NTP daemon's slew starting or stopping;
/// ntpd slews at up to 500 ppm): a [`Echo::Change`] compares two intervals
/// on the asker's clock, so a rate that changes between them errs by that
/// change times the interval, however small `E − I` is. A change is taken
/// for a crossing only if short by more than that fraction of the interval
/// too (review rev35, finding 2: 100 and 500 ppm from one barrier to the
/// next, 100 ms and 1 s apart, had a lost message's first NACK taken for a
/// crossing by 10 to 500 µs). Where barriers come 1 ms apart it is 0.5 µs,
/// where the change is still 4× finer than a whole echo's margin.
const RATE_CHANGE: u32 = 2000;

/// A NACK's echo is its change from the interval before if that is this
/// many times shorter than the whole at least (see [`Echo::of`]): where
/// the barriers keep their pace. The change rests on one more time taken
/// in at the asker, which may be late (the asker off its CPU as the frame
/// came, unseen: no deadline of its own was overdue), and a change as
/// large as the whole is as coarse. (In the simulator's descheduled
/// nodes, `sim::descheduled`, any shorter change: 3 answers more in 4
/// seeds of tree4, each to a NACK whose change put it a millisecond after
/// the message it asked for, which it had crossed; an eighth: 1 fewer than
/// with whole echoes.)
const CHANGE_FINER: u64 = 8;
/// Set in an echo's 16 bits: the echo is a change ([`Echo::Change`] or
/// [`Echo::Paced`]).
const ECHO_CHANGE: u32 = 1 << 15;
/// Set in a change's 16 bits: it is negative (or 0).
const ECHO_NEGATIVE: u32 = 1 << 14;
/// Set in a change's 16 bits: it is an [`Echo::Paced`].
const ECHO_PACED: u32 = 1 << 13;
/// The mantissa bits of a change's float (under its 4-bit exponent and
/// [`ECHO_PACED`]): within a 512th of the change, about 16.8 ms at most.
const CHANGE_MANTISSA: u32 = ECHO_MANTISSA - 1;

/// What a NACK's echo says (see [`ECHO_SHIFT`]): how long before sending it
/// the asker took in the same message of the barrier before (`E`), whole
/// or as its change from an interval between its taking in the messages of
/// two barriers before (`E − I`), the change where it is much shorter (a
/// float keeps a share of what it carries, so the shorter is the finer:
/// [`CHANGE_FINER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Echo {
    /// `E`.
    Whole(Duration),
    /// `E − I`, in signed ns, `I` the interval between the barrier before
    /// that one's message and the barrier before's (the last: `e − 2` to
    /// `e − 1` for a NACK of `e`). A late intake of `e − 1`'s message
    /// counts twice in it (`E` short, `I` long: review rev35, finding 1);
    /// sent only where the pace changed so that [`Echo::Paced`] is no
    /// change.
    Change(i64),
    /// `E − I`, in signed ns, `I` the interval before the last (`e − 3` to
    /// `e − 2`), where the pace held over the three: a late intake of `e −
    /// 1`'s counts once, in `E`, as in a whole echo
    /// ([`super::times::HeardTimes::before_last`]).
    Paced(i64),
}

impl Echo {
    /// The echo of a NACK sent `took` after the barrier before's message
    /// came, that `last` after the one of the barrier before that, and
    /// that one `before_last` after the one before it, if known: the
    /// change from `before_last` where it is finer than the whole, else
    /// from `last`, else the whole.
    pub(super) fn of(took: Duration, last: Option<Duration>, before_last: Option<Duration>) -> Echo {
        let change = |i: Option<Duration>| {
            i.map(|i| ns(took).saturating_sub(ns(i)))
                .filter(|c| c.unsigned_abs() <= ns(took).unsigned_abs() / CHANGE_FINER && float_up(c.unsigned_abs(), 4, CHANGE_MANTISSA).is_some())
        };
        match (change(before_last), change(last)) {
            (Some(c), _) => Echo::Paced(c),
            (None, Some(c)) => Echo::Change(c),
            (None, None) => Echo::Whole(took),
        }
    }

    /// Whether a NACK with this echo was sent before this barrier's message
    /// could have reached its asker: the message went `d` after the barrier
    /// before's, which went `last` (if known) after the one before that,
    /// which went `before_last` after its own before (the same intervals as
    /// the asker's: with the same latency, `E − I < d − i` exactly when `E
    /// < d`). Each falls short by more than the clocks' rates allow
    /// ([`CLOCK_RATES_APART`]): the asker measured `E` (or `E − I`) on its
    /// clock, so it may be off by a 1024th of itself; a change, short where
    /// the pace is kept, needs a far smaller margin than the whole, but one
    /// for its clock's rate changing between `I` and `E` too
    /// ([`RATE_CHANGE`], of `i`). Every margin errs toward "not crossed": a
    /// NACK answered that need not have been, not a lost message left to
    /// its asker's next retry.
    fn crossed(self, last: Option<Duration>, before_last: Option<Duration>, d: Duration) -> bool {
        let change = |c: i64, i: Option<Duration>| {
            i.is_some_and(|i| {
                let rates = i128::from(c.unsigned_abs() / u64::from(CLOCK_RATES_APART)) + i128::from(ns(i / RATE_CHANGE));
                i128::from(c) + rates + i128::from(ns(i)) < i128::from(ns(d))
            })
        };
        match self {
            Echo::Whole(e) => e + d / CLOCK_RATES_APART < d,
            Echo::Change(c) => change(c, last),
            Echo::Paced(c) => change(c, before_last),
        }
    }
}

/// The float of `exponents` exponent bits over `mantissa` bits that is the
/// least at least `size` (`None`: none is), as its bits.
fn float_up(size: u64, exponents: u32, mantissa: u32) -> Option<u32> {
    let first = 1u64 << mantissa;
    if size < first {
        return Some(size as u32);
    }
    // (The least exponent whose significand, rounded up, fits.)
    let e = (1..1 << exponents).find(|&e| size.div_ceil(1 << (e - 1)) < 2 * first)?;
    Some(e << mantissa | (size.div_ceil(1 << (e - 1)) - first) as u32)
}

/// The float of `exponents` exponent bits over `mantissa` bits that is the
/// most at most `size` (the largest if none is larger), as its bits.
fn float_down(size: u64, exponents: u32, mantissa: u32) -> u32 {
    let first = 1u64 << mantissa;
    let most = (2 * first - 1) << ((1 << exponents) - 2);
    let size = size.min(most);
    if size < first {
        return size as u32;
    }
    let e = 64 - size.leading_zeros() - mantissa;
    e << mantissa | ((size >> (e - 1)) - first) as u32
}

/// The size of a float's bits (exponent above `mantissa` bits).
fn float_value(bits: u32, mantissa: u32) -> u64 {
    let (e, m) = (bits >> mantissa, u64::from(bits & ((1 << mantissa) - 1)));
    if e == 0 {
        m
    } else {
        ((1 << mantissa) + m) << (e - 1)
    }
}

/// When one of a node's messages of a barrier went (or came, at the
/// asker), and when the same message of the barrier before went (came) if
/// that was known: what a NACK's echo is measured against (see
/// [`echo_arg`]). Put together only when a NACK needs it, from the times
/// kept ([`super::times`]), and so is the interval between them
/// ([`Timed::since`]): at every sending and every original taken in, it
/// would cost a clock subtraction and more a frame.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timed {
    pub(super) at: Instant,
    /// When the same message of the barrier before went (came).
    before: Option<Instant>,
}

impl Timed {
    /// The message at `at`, after the same message of the barrier before
    /// at `before`, if known.
    pub(super) fn new(at: Instant, before: Option<Instant>) -> Timed {
        Timed { at, before }
    }

    /// The time since the same message of the barrier before, if known.
    #[inline]
    pub(super) fn since(&self) -> Option<Duration> {
        self.before.map(|b| self.at.saturating_duration_since(b))
    }
}

/// Signed nanoseconds of `d` (saturating).
#[inline]
fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A NACK's echo (see [`ECHO_SHIFT`]), in place in `arg`, rounded up (so
/// that an echo never makes a NACK look sent sooner than it was). 16 bits:
/// a [`Echo::Whole`] is bit 15 clear, a 5-bit exponent and a 10-bit
/// mantissa (its ns; at least 1, since 0 is none; about 2,200 s at most);
/// a [`Echo::Change`] is bit 15 set, a sign (bit 14: negative), a 4-bit
/// exponent and a 10-bit mantissa, of its size (0 as the negative 0; a
/// negative one larger than the largest, about 33.5 ms, as that, still
/// rounded up). A float of `e` over `m`: `m` if `e` is 0, else `(1024 +
/// m) << (e − 1)`, within a 1024th. `None` (or a whole echo too large to
/// be rounded up): 0, unknown.
pub(super) fn echo_arg(echo: Option<Echo>) -> u32 {
    let change = |c: i64, paced: u32| {
        if c > 0 {
            float_up(c.unsigned_abs(), 4, CHANGE_MANTISSA).map_or(0, |f| ECHO_CHANGE | paced | f)
        } else {
            ECHO_CHANGE | paced | ECHO_NEGATIVE | float_down(c.unsigned_abs(), 4, CHANGE_MANTISSA)
        }
    };
    let word = match echo {
        None => 0,
        Some(Echo::Whole(took)) => float_up(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1), 5, ECHO_MANTISSA).unwrap_or(0),
        Some(Echo::Change(c)) => change(c, 0),
        Some(Echo::Paced(c)) => change(c, ECHO_PACED),
    };
    (word & 0xFF) | (word >> 8) << ECHO_SHIFT
}

/// The echo a NACK's `arg` carries, if any (see [`echo_arg`]).
pub(super) fn echo_of(arg: u32) -> Option<Echo> {
    let word = (arg & 0xFF) | ((arg >> ECHO_SHIFT) & 0xFF) << 8;
    if word == 0 {
        None
    } else if word & ECHO_CHANGE == 0 {
        Some(Echo::Whole(Duration::from_nanos(float_value(word, ECHO_MANTISSA))))
    } else {
        let size = float_value(word & (ECHO_PACED - 1), CHANGE_MANTISSA) as i64;
        let c = if word & ECHO_NEGATIVE != 0 { -size } else { size };
        Some(if word & ECHO_PACED != 0 { Echo::Paced(c) } else { Echo::Change(c) })
    }
}

/// One (epoch, tag) a peer asked for: when its NACK was last admitted
/// (answered, or served by a multicast answer), if ever, and the copy
/// (index, count) and number (its sender's, `NACK_ID_SHIFT`) of the last
/// of its NACKs taken in.
#[derive(Clone, Copy, Debug)]
struct Asked {
    epoch: u64,
    tag: u16,
    at: Option<Instant>,
    copy: (u32, u32),
    id: u32,
    /// Whether the NACK numbered `id` drew what it asked for (see
    /// [`Answered::later_copy`]).
    drew: bool,
    /// Whether the NACK last admitted was taken for a crossing (nothing
    /// sent): it opens no answer gap.
    crossed: bool,
}

/// The last answers given to one peer, newest at `next - 1` (a ring), for
/// the rate limit, and the copy of its last NACK of each (epoch, tag)
/// taken in.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Answered {
    recent: [Option<Asked>; ANSWER_LOG],
    next: usize,
}

impl Answered {
    fn find(&self, epoch: u64, tag: u16) -> Option<usize> {
        self.recent.iter().position(|r| r.is_some_and(|a| a.epoch == epoch && a.tag == tag))
    }

    /// The entry of (`epoch`, `tag`), made if there is none (one entry a
    /// pair: a pair asked often must not push the others out: soak seed
    /// 5569580: a peer's NACKs of one message, every 0.1 ms, pushed out its
    /// NACK of a broadcast's end, which then looked like a first NACK after
    /// the multicast answer each time and was never answered, for 400 ms).
    fn entry(&mut self, epoch: u64, tag: u16) -> &mut Asked {
        let i = match self.find(epoch, tag) {
            Some(i) => i,
            None => {
                let i = self.next;
                self.recent[i] = Some(Asked { epoch, tag, at: None, copy: (0, 0), id: 0, drew: false, crossed: false });
                self.next = (self.next + 1) % ANSWER_LOG;
                i
            }
        };
        self.recent[i].as_mut().expect("just made")
    }

    /// When a NACK of (`epoch`, `tag`) was last admitted, if one was.
    #[inline]
    pub(super) fn last_admitted(&self, epoch: u64, tag: u16) -> Option<Instant> {
        self.recent.iter().flatten().find(|a| a.epoch == epoch && a.tag == tag).and_then(|a| a.at)
    }

    /// Whether a NACK of (`epoch`, `tag`) was admitted within `within` of `now`.
    #[inline]
    pub(super) fn admitted_within(&self, epoch: u64, tag: u16, now: Instant, within: Duration) -> bool {
        self.recent.iter().flatten().any(|a| a.epoch == epoch && a.tag == tag && a.at.is_some_and(|at| now.saturating_duration_since(at) < within))
    }

    /// A NACK of (`epoch`, `tag`) in its copy `copy` (index, count),
    /// numbered `id` by its sender, was taken in: whether it is a later
    /// copy of the last one taken in (the same number and count, a greater
    /// index: its sender sends a NACK's copies in order), which asks
    /// nothing new however late it is taken in (PROTOCOL.md, *Evidence*:
    /// one answer a NACK). (Without the number, a retry whose copy 0 was
    /// lost, its copy 1 taken in after the last NACK's copy 0, was taken
    /// for a later copy of that NACK and not answered, though that NACK's
    /// answer was lost: review rev33, finding 1.)
    ///
    /// Only once that NACK drew what it asked for ([`Answered::drew`]: the
    /// message re-sent, or judged a crossing of it). A NACK taken in before
    /// its message went drew a "not yet"; its later copy, taken in once
    /// the message went, asks afresh, and unanswered it cost the asker its
    /// next retry, paced by the whole wait so far: onephase at 64 nodes and
    /// 50% loss (LogP simulator, 10 GbE) took 2,186 µs a barrier, 372 µs
    /// with such copies answered (session 19, the lead; test
    /// `a_later_copy_of_a_nack_answered_not_yet_is_answered_once_the_message_went`).
    #[inline]
    pub(super) fn later_copy(&mut self, epoch: u64, tag: u16, copy: (u32, u32), id: u32) -> bool {
        let a = self.entry(epoch, tag);
        let later = a.id == id && a.copy.1 == copy.1 && copy.0 > a.copy.0;
        if a.id != id {
            a.drew = false;
        }
        (a.copy, a.id) = (copy, id);
        later && a.drew
    }

    /// The last NACK of (`epoch`, `tag`) taken in drew what it asked for:
    /// the message re-sent, or judged a crossing of it (the asker will
    /// see the original).
    pub(super) fn drew(&mut self, epoch: u64, tag: u16) {
        self.entry(epoch, tag).drew = true;
    }

    /// Whether a NACK of (`epoch`, `tag`) at `now` may be answered (no
    /// answer to it within `gap`); if so, it is recorded as answered.
    #[inline]
    pub(super) fn admit(&mut self, epoch: u64, tag: u16, now: Instant, gap: Duration) -> bool {
        let a = self.entry(epoch, tag);
        let recent = !a.crossed && a.at.is_some_and(|at| now.saturating_duration_since(at) < gap);
        if !recent {
            (a.at, a.crossed) = (Some(now), false);
        }
        !recent
    }

    /// The NACK of (`epoch`, `tag`) just admitted was taken for a crossing,
    /// and nothing was sent: the peer's next NACK for it asks again (it is
    /// judged by neither its echo nor the round trip), and is not held to
    /// the answer gap, since no answer is on its way. (Held to it, a retry
    /// after a wrong crossing went unanswered for as long as the shortest
    /// round trip seen, once that was timed from the NACK that drew each
    /// reply only: 64 nodes at 20% loss, a leaf's lost arrival held a
    /// barrier 1 ms, `loss_trace 64 20 1406 64200193`.)
    pub(super) fn crossed(&mut self, epoch: u64, tag: u16) {
        if let Some(i) = self.find(epoch, tag) {
            if let Some(a) = self.recent[i].as_mut() {
                a.crossed = true;
            }
        }
    }
}

impl Core {
    /// The least time between two answers to one peer's NACKs of one
    /// message: never more than half the longest retry interval, so that a
    /// live peer probing at its slowest pace has every probe answered. (A
    /// reply taken in late, this node paused, is no round trip: soak seed
    /// 5540160, node 0 paused 99 ms measured one of 98.6 ms, answered its
    /// peer once a 98.6 ms, and two answers lost at 20% loss got it named
    /// silent.)
    pub(super) fn answer_gap(&self) -> Duration {
        self.reply_floor(self.recovery.rto.least() / ANSWER_GAP_DIVISOR)
    }

    /// `gap`, or the shortest reply seen if longer, up to half the longest
    /// retry interval (see [`Core::answer_gap`]).
    pub(super) fn reply_floor(&self, gap: Duration) -> Duration {
        gap.max(self.recovery.reply.unwrap_or_default()).min(self.config.max_retry_interval() / 2)
    }

    /// A node not yet admitted: whether it may answer `from`'s NACK of
    /// `instance` (any) and `tag` with a `JOINING` status, under the same
    /// per-peer limit as an admitted node's answers (keyed by the instance
    /// in place of the epoch: it has none yet), so that NACKs replayed from
    /// an earlier run get a bounded number of answers (rev28, finding 6).
    /// Suppressed ones are counted in `answers_suppressed`.
    pub(super) fn may_answer_joining(&mut self, from: NodeId, instance: u64, tag: u16, now: Instant) -> bool {
        // (It has learned no retry timeout yet: the configured one's quarter.)
        let gap = self.reply_floor(self.config.retry_timeout / ANSWER_GAP_DIVISOR);
        let may = self.recovery.answered.get(from).is_some() && self.recovery.answered[from].admit(instance, tag, now, gap);
        if !may {
            self.stats.answers_suppressed += 1;
        }
        may
    }

    /// Whether this node's plan of barrier `epoch` multicasts `tag`.
    pub(super) fn multicasts(&self, epoch: u64, tag: u16) -> bool {
        let v = self.window.variant[parity(epoch)];
        self.plans.list[v].steps.iter().any(|s| s.sends.iter().any(|o| o.tag == tag && matches!(o.dest, Dest::All)))
    }

    /// Re-sends to `to` the messages of barrier `epoch` addressed to it (one
    /// tag, or all) that this node has already sent (a multicast one by
    /// multicast, where the network has it); returns how many.
    ///
    /// **Crossings.** A NACK that arrives less than a round trip (the
    /// shortest reply seen, [`super::recovery::Recovery::reply`], once measured) after the message it asks
    /// for went out was sent before that message could have reached the
    /// asker: it crossed the original, which the asker will see. It is not
    /// answered (counted in `answers_suppressed`); if the original was lost
    /// after all, the asker's next retry, a retry timeout later, is. Nor is
    /// one taken in as this node comes back from a stall (off its CPU:
    /// [`super::recovery::Recovery::stall`]) for a message it sent less
    /// than a round trip before it stopped: it cannot tell when the NACK
    /// came, so it may have crossed the original too.
    ///
    /// **Echoes.** A NACK's echo (in `nack`, see [`ECHO_SHIFT`]) says how long
    /// before sending it the asker took in this node's same message of the
    /// barrier before (`E`). If that message went at `t'` and this one at
    /// `t`, and both took the same time `l` to reach the asker, the NACK
    /// went at `t' + l + E`, and this message reaches the asker at `t + l`:
    /// the NACK crossed it if `E < t − t'`, whatever `l` is and however late
    /// this node takes the NACK in (less a 1024th of `t − t'` for the two
    /// clocks' rates: [`CLOCK_RATES_APART`]). No round trip need be measured (on a
    /// clean network none ever is: node 0 of a tree never NACKs, so it
    /// answered by multicast the release that every node's timer asked for
    /// as it went, whenever one node was descheduled around its call:
    /// review rev32, finding 5). Where the barriers keep their pace, the
    /// echo is `E − I` instead ([`Echo::Change`]), `I` the time between the
    /// asker's taking in the message of the barrier before that (`t''`) and
    /// of the barrier before: with the same latency, `I = t' − t''`, and
    /// the NACK crossed if `E − I < (t − t') − (t' − t'')`; or, where the
    /// pace held one barrier longer, `I` from the barrier before that
    /// ([`Echo::Paced`]: `E − I < (t − t') − (t'' − t''')`), in which a late
    /// intake of the barrier before's message counts once, not twice
    /// (review rev35, finding 1). (16 bits keep a
    /// 1024th to a 2048th of what they carry, and `E` is the whole time
    /// between barriers: with `E` whole, of about 1 ms, NACKs that crossed
    /// by 9 and 180 ns were answered, 2 of that finding's 40 pauses; their
    /// `E − I` was 0 and 120 µs.) An asker sends no echo where it cannot
    /// vouch for its time (the message came as an answer, as a later copy,
    /// or as it came back from a stall), and no change where it cannot
    /// vouch for both.
    ///
    /// `asked`: when this peer's last NACK for the message before this one
    /// was admitted, if one was. A NACK that asks again after one that came
    /// once the message went is no crossing (the original did not come), by
    /// the round trip or by its echo (an echo may be wrong: review rev34,
    /// finding 5); one that asks again after a "not yet" may be. `nack`:
    /// the NACK's `arg` (0: drawn by none), its echo (`echo` above) and its
    /// number, which the answer carries (see
    /// [`crate::transport::REPLY_ID_SHIFT`]).
    /// Returns (answered, crossed).
    pub(super) fn answer(&mut self, to: NodeId, epoch: u64, tag: Option<u16>, now: Instant, asked: Option<Instant>, nack: u32) -> (usize, usize) {
        let (echo, id) = (echo_of(nack), nack_id_of(nack));
        let v = self.window.variant[parity(epoch)];
        let sent_steps = if epoch + 1 == self.window.epoch {
            self.plans.list[v].steps.len()
        } else if epoch == self.window.epoch && self.phase.running() {
            self.run.step + usize::from(self.run.step_sent)
        } else {
            0
        };
        let (mut answered, mut crossed) = (0, 0);
        for s in 0..sent_steps {
            let sent_at = |e: u64| self.recovery.sent_at.timed(e, s);
            let timed = sent_at(epoch);
            let sent = timed.map(|t| t.at);
            // (The intervals between the messages of the barriers before:
            // a change's echo is E − I, I the last, `e − 2` to `e − 1`, or
            // the one before it, `SentTimes::before_last`.)
            let last = epoch.checked_sub(1).and_then(sent_at).and_then(|t| t.since());
            let before_last = self.recovery.sent_at.before_last(epoch, s);
            // (Until a round trip was measured, no NACK is taken for a
            // crossing; nor one that asks again after the message went.)
            let again = asked.is_some_and(|a| sent.is_none_or(|t| a > t));
            // (Nor by its echo: an echo may be wrong, its asker's clock
            // running at another rate or its original dated late, and a
            // NACK taken for a crossing is also an unanswered probe. Had
            // the retries been judged by it too, a wrong echo left every
            // one unanswered until the live peer was named silent: review
            // rev34, finding 5, DST seed 73011023 with clocks at 1/2 and 2×.
            // So a wrong echo costs one retry at most.)
            let echoed = !again
                && match (echo, timed.and_then(|t| t.since())) {
                    (Some(echo), Some(d)) => echo.crossed(last, before_last, d),
                    _ => false,
                };
            let lossy = self.recovery.loss.rate() > CROSSINGS_ANSWERED_ABOVE;
            let window = if again || lossy { Duration::ZERO } else { self.recovery.reply.unwrap_or(Duration::ZERO) };
            let stalled = self
                .recovery
                .stall
                .is_some_and(|(from, back)| now.saturating_duration_since(back) < window && sent.is_some_and(|t| t + window > from));
            // (A NACK taken in at the instant its message went came before
            // the message could leave: a driver takes in all that has come
            // under one reading of the clock, and sends what that set off
            // after (`Engine::drain`, the simulator's backlog on a return),
            // so a NACK in a descheduled node's backlog, for the message
            // that the backlog's other messages or its call set off, is
            // one. With no round trip measured (node 0 of a tree, on a
            // clean network), nothing else showed it: 31 of 74 answers in
            // `sim::descheduled`. Sound whatever the round trip: none is 0.)
            let queued = !again && sent.is_some_and(|t| now <= t);
            let fresh = echoed || stalled || queued || sent.is_some_and(|t| now.saturating_duration_since(t) < window);
            for i in 0..self.plans.list[v].steps[s].sends.len() {
                let out = self.plans.list[v].steps[s].sends[i];
                let for_them = matches!(out.dest, Dest::All) || out.dest == Dest::Node(to);
                if for_them && tag.is_none_or(|t| t == out.tag) && fresh {
                    crossed += 1;
                    self.stats.answers_suppressed += 1;
                } else if for_them && tag.is_none_or(|t| t == out.tag) {
                    let void_here = if epoch + 1 == self.window.epoch { self.window.last_void } else { self.window.void[parity(epoch)] };
                    let void = if void_here { MISMATCHED } else { 0 };
                    let dest = if matches!(out.dest, Dest::All) && self.setup.multicast && MULTICAST_ANSWERS {
                        self.recovery.multicast_answer = Some((epoch, out.tag, now, true));
                        To::All
                    } else {
                        To::Node(to)
                    };
                    // (As many copies as one receiver's loss makes worth it:
                    // the others have the original, mostly.)
                    let (copies, gap) = (self.recovery.loss.copies(1), self.copy_gap());
                    for k in 0..copies {
                        let msg = Msg { arg: void | copy_arg(k, copies) | reply_id_arg(id), ..self.msg(MsgKind::Answer, epoch, out.tag) };
                        let data = self.coll.as_ref().map_or(&[][..], |c| c.sent(parity(epoch), s));
                        self.out.push_copy(now, (k, gap), out.rail, dest, msg, data);
                    }
                    self.stats.answers += 1;
                    self.stats.copies += u64::from(copies - 1);
                    answered += 1;
                    // A first NACK for a message sent in copies that comes a
                    // retry timeout after it went shows that the asker lost
                    // every copy. (A repeated one shows that a NACK or its
                    // answer was lost.) (Counting every answered NACK, at 1% independent
                    // loss the gap grew, which made more NACKs cross the
                    // later copies, which grew it more: 64 nodes 1.14 →
                    // 1.32× lossless.)
                    let long_ago = sent.is_some_and(|t| now.saturating_duration_since(t) >= self.recovery.rto.least());
                    if long_ago && !again && self.recovery.sent_copies[parity(epoch)].get(s).is_some_and(|&c| c > 1) {
                        self.recovery.spacing.answered_whole();
                    }
                }
            }
        }
        (answered, crossed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echo_is_rounded_up_within_a_1024th_and_zero_means_none() {
        assert_eq!(echo_of(echo_arg(None)), None);
        assert_eq!(echo_of(0x00FF_FF00), None, "bits 8..24 are the copies' and the NACK's number");
        assert_eq!(echo_of(echo_arg(Some(Echo::Change(0)))), Some(Echo::Change(0)), "0 is an echo, not none");
        assert_eq!(echo_of(echo_arg(Some(Echo::Whole(Duration::ZERO)))), Some(Echo::Whole(Duration::from_nanos(1))), "0 ns whole is 1 ns");
        let change_most = 1023i64 << 14;
        for size in [1i64, 7, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 40_019, 524_287, 524_289, 1_000_009, 10_000_009, change_most] {
            let d = Duration::from_nanos(size as u64);
            match echo_of(echo_arg(Some(Echo::Whole(d)))) {
                Some(Echo::Whole(back)) => assert!(back >= d && back <= d + d / 1024, "{d:?} came back as {back:?}"),
                other => panic!("{d:?} came back as {other:?}"),
            }
            for c in [size, -size] {
                for (echo, kind) in [(Echo::Change(c), "change"), (Echo::Paced(c), "paced")] {
                    match echo_of(echo_arg(Some(echo))) {
                        Some(Echo::Change(back)) if kind == "change" => assert!(back >= c && back <= c + size / 512, "{c} ns came back as {back} ns"),
                        Some(Echo::Paced(back)) if kind == "paced" => assert!(back >= c && back <= c + size / 512, "{c} ns came back as {back} ns"),
                        other => panic!("{echo:?} came back as {other:?}"),
                    }
                    assert_eq!(echo_arg(Some(echo)) & 0x00FF_FF00, 0, "only bits 0..8 and 24..32");
                }
            }
        }
        // Exact below 512 ns; a change over about 16.8 ms: none if positive
        // (it cannot be rounded up), the most if negative (rounded up).
        assert_eq!(echo_of(echo_arg(Some(Echo::Change(-511)))), Some(Echo::Change(-511)));
        assert_eq!(echo_of(echo_arg(Some(Echo::Paced(-511)))), Some(Echo::Paced(-511)));
        assert_eq!(echo_of(echo_arg(Some(Echo::Change(change_most + 1)))), None);
        assert_eq!(echo_of(echo_arg(Some(Echo::Change(-change_most - 1_000_000)))), Some(Echo::Change(-change_most)));
        let most = echo_of(echo_arg(Some(Echo::Whole(Duration::from_secs(2000))))).expect("a whole echo up to about 2,200 s");
        assert!(matches!(most, Echo::Whole(d) if d >= Duration::from_secs(2000)), "{most:?}");
        // Every word decodes to a value that encodes to itself.
        for word in 1u32..1 << 16 {
            let arg = (word & 0xFF) | (word >> 8) << ECHO_SHIFT;
            let echo = echo_of(arg).expect("an echo");
            assert_eq!(echo_of(echo_arg(Some(echo))), Some(echo), "word {word:#x}");
        }
    }

    #[test]
    fn an_echo_is_the_change_from_the_interval_before_where_that_is_finer() {
        let ms = Duration::from_millis(1);
        let us = Duration::from_micros(1);
        assert_eq!(Echo::of(ms + 3 * us, Some(ms), None), Echo::Change(3_000));
        assert_eq!(Echo::of(ms + 3 * us, Some(ms + 5 * us), Some(ms)), Echo::Paced(3_000), "the interval before the last where it is finer");
        assert_eq!(Echo::of(ms + 3 * us, Some(ms), Some(10 * us)), Echo::Change(3_000), "the pace changed: the last");
        assert_eq!(Echo::of(ms, Some(ms + 20 * us), None), Echo::Change(-20_000));
        assert_eq!(Echo::of(ms, None, None), Echo::Whole(ms), "no interval before");
        assert_eq!(Echo::of(ms, Some(10 * ms), Some(10 * ms)), Echo::Whole(ms), "the whole is shorter");
        assert_eq!(Echo::of(ms, Some(ms - 200 * us), None), Echo::Whole(ms), "a change over an eighth of the whole");
        assert_eq!(Echo::of(400 * ms, Some(360 * ms), None), Echo::Whole(400 * ms), "a change beyond 16.8 ms");
        // Crossed: the NACK went before the message could come (the same
        // latency for the messages). The message went 10 us + 9 ns after
        // the one before, which went 10 us after its own before (a 1 ms
        // pace: its rate change margin alone is 500 ns).
        let (i, d) = (Some(10 * us), 10 * us + Duration::from_nanos(9));
        assert!(Echo::of(10 * us, i, None).crossed(i, None, d), "sent 9 ns before the message came");
        assert!(Echo::of(10 * us, Some(ms), i).crossed(Some(ms), i, d), "the same, by the interval before the last");
        assert!(!Echo::of(10 * us + Duration::from_nanos(9), i, None).crossed(i, None, d), "sent as it came");
        assert!(!Echo::Change(0).crossed(None, i, d), "no interval known here: no judgment");
        assert!(!Echo::Paced(0).crossed(i, None, d), "no interval known here: no judgment");
        // The clocks' rates: a whole echo must fall short by a 1024th of the
        // interval, a change by a 1024th of itself and a 2000th of the
        // interval it is measured from (its rate may change between them).
        let (i, d) = (Some(ms), ms + Duration::from_nanos(9));
        assert!(!Echo::Whole(ms).crossed(None, None, d), "short by 9 ns of 1 ms: within the clocks' rates");
        assert!(!Echo::of(ms, i, None).crossed(i, None, d), "short by 9 ns of 1 ms: within a rate change");
        assert!(Echo::Whole(ms - 2 * us).crossed(None, None, d));
        let (i, d) = (Some(ms), ms + 100 * us + Duration::from_nanos(700));
        assert!(Echo::of(ms + 100 * us, i, None).crossed(i, None, d), "short by 700 ns, more than 100 us / 1024 + 1 ms / 2000");
        assert!(!Echo::of(ms + 100 * us + Duration::from_nanos(300), i, None).crossed(i, None, d), "short by 400 ns, not more");
    }
}
