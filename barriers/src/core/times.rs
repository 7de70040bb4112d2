//! When this node's messages went and the messages it waits for came: the
//! times a NACK's crossing and its echo are judged by ([`Timed`], see
//! [`super::answers`]), kept as one (barrier, time) a message a barrier.
//!
//! Each is stored whole where it happens, on the hot path (one sending and
//! one taking in a barrier a message), without reading the barrier
//! before's; the interval between the two, what a [`Timed`] carries, is
//! put together only when a NACK needs it. (A record that carried the
//! time before as well, looked up at every sending and taking in, made a
//! 2-node barrier cost 2,107 instructions in the engine alone, these
//! 2,086, and 2,023 before the echo's interval: bench/results/hotpath.md,
//! session 19.)

use std::time::{Duration, Instant};

use super::answers::Timed;

/// One message's time in one barrier: `(epoch, at)`.
type Dated = Option<(u64, Instant)>;

/// How many barriers' sendings a step keeps: a NACK is answered for the
/// current barrier `w` or the one before, and judged by when that
/// barrier's message went and the three before it (its interval before
/// the last, [`SentTimes::before_last`]): `w − 4` to `w`, in a power of two.
const SENT_KEPT: usize = 8;

/// When each step's messages went, in each of the last [`SENT_KEPT`]
/// barriers (by epoch modulo [`SENT_KEPT`]).
#[derive(Debug)]
pub(super) struct SentTimes {
    slots: [Vec<Dated>; SENT_KEPT],
}

impl SentTimes {
    /// Times of `steps` steps, none yet.
    pub(super) fn new(steps: usize) -> SentTimes {
        SentTimes { slots: std::array::from_fn(|_| vec![None; steps]) }
    }

    /// Step `step`'s messages of barrier `epoch` went at `now`.
    #[inline]
    pub(super) fn sent(&mut self, epoch: u64, step: usize, now: Instant) {
        self.slots[(epoch % SENT_KEPT as u64) as usize][step] = Some((epoch, now));
    }

    /// When step `step`'s messages of barrier `epoch` went, if kept.
    fn at(&self, epoch: u64, step: usize) -> Option<Instant> {
        self.slots[(epoch % SENT_KEPT as u64) as usize].get(step).copied().flatten().filter(|&(e, _)| e == epoch).map(|(_, at)| at)
    }

    /// When step `step`'s messages of barrier `epoch` went, and those of
    /// the barrier before, if known. (Barriers only go forward, so a
    /// step's message of `epoch − 1` kept went before `epoch`'s, as a
    /// record made at the sending would have found it.)
    ///
    /// None once the step's message of barrier `epoch + 2` went: crossings
    /// were judged by one record a step per barrier parity, which that
    /// one took over, and what the protocol decides stays as it was (a
    /// NACK of the barrier before, taken in once the current barrier's
    /// message went, has no interval before the barrier before's: its
    /// echo of a change is not judged).
    pub(super) fn timed(&self, epoch: u64, step: usize) -> Option<Timed> {
        let at = self.at(epoch, step).filter(|_| self.at(epoch + 2, step).is_none())?;
        Some(Timed::new(at, epoch.checked_sub(1).and_then(|b| self.at(b, step))))
    }

    /// The interval before the last, from step `step`'s message of barrier
    /// `epoch − 3` to that of `epoch − 2`, where `epoch`'s is known as
    /// [`SentTimes::timed`] knows it (what a record of barrier `epoch − 2`,
    /// kept aside as `epoch`'s took its barrier parity's place, told).
    pub(super) fn before_last(&self, epoch: u64, step: usize) -> Option<Duration> {
        self.at(epoch, step).filter(|_| self.at(epoch + 2, step).is_none())?;
        let two_before = epoch.checked_sub(2)?;
        let at = self.at(two_before, step)?;
        Timed::new(at, two_before.checked_sub(1).and_then(|b| self.at(b, step))).since()
    }
}

/// How many barriers' takings in a message keeps: a NACK of barrier `w`
/// carries when that of `w − 1` came and the two intervals before it
/// (`w − 3` to `w − 1`), in a power of two.
const HEARD_KEPT: usize = 4;

/// When each message of the algorithm's own plan (indexed as
/// [`crate::expect::Expectations`] does) was last taken in as an original
/// that this node can vouch for the time of, in its last few barriers (by
/// epoch modulo [`HEARD_KEPT`]).
///
/// Only the last takings in of a message count, in the order they came
/// (what a record of the last and the one before would keep): a taking in
/// of a barrier before one already taken in (taken in ahead) starts the
/// message's times again, and a barrier's record counts only as the last
/// if no later barrier's message has come (none has where this node NACKs
/// it: a message is taken in once a barrier, and only in its barrier or
/// the one before). A taking in not vouched for leaves no time.
#[derive(Debug)]
pub(super) struct HeardTimes {
    slots: Vec<[Heard; HEARD_KEPT]>,
}

/// One message's taking in, in one barrier: `(epoch, at)`, `at` none if
/// not vouched for.
type Heard = Option<(u64, Option<Instant>)>;

impl HeardTimes {
    /// Times of `messages` messages, none yet.
    pub(super) fn new(messages: usize) -> HeardTimes {
        HeardTimes { slots: vec![[None; HEARD_KEPT]; messages] }
    }

    /// Message `i` of barrier `epoch` was taken in at `now`, as an original
    /// whose time this node vouches for if `clean`.
    #[inline]
    pub(super) fn heard(&mut self, i: usize, epoch: u64, now: Instant, clean: bool) {
        if let Some(slots) = self.slots.get_mut(i) {
            if slots.iter().any(|d| d.is_some_and(|(e, _)| e > epoch)) {
                *slots = [None; HEARD_KEPT];
            }
            slots[(epoch % HEARD_KEPT as u64) as usize] = Some((epoch, clean.then_some(now)));
        }
    }

    /// When message `i` of barrier `epoch` came, if kept and no later
    /// barrier's has.
    fn at(&self, i: usize, epoch: u64) -> Option<Instant> {
        let slots = self.slots.get(i)?;
        let at = slots[(epoch % HEARD_KEPT as u64) as usize].filter(|&(e, _)| e == epoch)?.1?;
        slots.iter().all(|d| d.is_none_or(|(e, _)| e <= epoch)).then_some(at)
    }

    /// When message `i` of barrier `epoch` was taken in (vouched for), and
    /// the same message of the barrier before if that was too, if it is the
    /// last of message `i` taken in: asked while the next barrier's message
    /// `i` has not come (see [`HeardTimes`]).
    pub(super) fn timed(&self, i: usize, epoch: u64) -> Option<Timed> {
        let at = self.at(i, epoch)?;
        Some(Timed::new(at, epoch.checked_sub(1).and_then(|b| self.slot(i, b))))
    }

    /// The interval before the last: from message `i` of barrier
    /// `epoch − 2` to that of `epoch − 1`, where `epoch`'s is the last
    /// taken in ([`HeardTimes::timed`]) and those came before it in turn.
    pub(super) fn before_last(&self, i: usize, epoch: u64) -> Option<Duration> {
        self.at(i, epoch)?;
        let one_before = epoch.checked_sub(1)?;
        let at = self.slot(i, one_before)?;
        Timed::new(at, one_before.checked_sub(1).and_then(|b| self.slot(i, b))).since()
    }

    /// Message `i`'s time in barrier `epoch`, if kept.
    fn slot(&self, i: usize, epoch: u64) -> Option<Instant> {
        self.slots.get(i)?[(epoch % HEARD_KEPT as u64) as usize].filter(|&(e, _)| e == epoch)?.1
    }
}

#[cfg(test)]
mod tests {
    use super::super::window::parity;
    use super::*;

    /// The record these times replace: made at each sending (one a step per
    /// barrier parity) and each taking in (one a message), with the time
    /// before looked up then.
    #[derive(Clone, Copy)]
    struct Record {
        epoch: u64,
        at: Instant,
        before: Option<Instant>,
    }

    impl Record {
        fn after(last: Option<Record>, epoch: u64, at: Instant) -> Record {
            Record { epoch, at, before: last.filter(|b| b.epoch + 1 == epoch).map(|b| b.at) }
        }
    }

    /// (at, since) of each, to compare.
    fn seen(t: Option<Timed>) -> Option<(Instant, Option<Duration>)> {
        t.map(|t| (t.at, t.since()))
    }

    fn record_seen(r: Option<Record>) -> Option<(Instant, Option<Duration>)> {
        r.map(|r| (r.at, r.before.map(|b| r.at.saturating_duration_since(b))))
    }

    /// A small xorshift: the same operations every run.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn sendings_kept_tell_what_a_record_a_barrier_parity_told() {
        let t0 = Instant::now();
        let steps = 3;
        let (mut judged, mut judged_before) = (0, 0);
        for seed in 1..=300u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut kept = SentTimes::new(steps);
            let mut records: [Vec<Option<Record>>; 2] = [vec![None; steps], vec![None; steps]];
            // (Each record as the next of its parity took its place.)
            let mut replaced: [Vec<Option<Record>>; 2] = [vec![None; steps], vec![None; steps]];
            let mut window = next(&mut rng) % 3;
            for op in 0..400u64 {
                let now = t0 + Duration::from_nanos(op * 1_000 + next(&mut rng) % 900);
                match next(&mut rng) % 5 {
                    // The next barrier (a step may go unsent in one: another
                    // plan ran, or the node joined late).
                    0 => window += 1,
                    _ => {
                        // (Once a barrier a step: `Core::advance`'s `step_sent`.)
                        let step = (next(&mut rng) % steps as u64) as usize;
                        if records[parity(window)][step].is_some_and(|r| r.epoch == window) {
                            continue;
                        }
                        let before = records[parity(window + 1)][step];
                        replaced[parity(window)][step] = records[parity(window)][step];
                        records[parity(window)][step] = Some(Record::after(before, window, now));
                        kept.sent(window, step, now);
                    }
                }
                // What `Core::answer` asks: the current barrier, the one
                // before, and the one before that (its interval).
                for epoch in window.saturating_sub(2)..=window {
                    for (step, record) in records[parity(epoch)].iter().enumerate() {
                        let record = record.filter(|r| r.epoch == epoch);
                        assert_eq!(
                            seen(kept.timed(epoch, step)),
                            record_seen(record),
                            "seed {seed}, op {op}, epoch {epoch} of {window}, step {step}"
                        );
                        judged += usize::from(record.is_some_and(|r| r.before.is_some()));
                        // (Asked only where `epoch`'s went: `Core::answer` judges
                        // an echo's change by it only then.)
                        if record.is_none() {
                            continue;
                        }
                        let two_before = replaced[parity(epoch)][step].filter(|r| epoch.checked_sub(2) == Some(r.epoch));
                        let interval = two_before.and_then(|r| record_seen(Some(r))).and_then(|(_, since)| since);
                        assert_eq!(
                            kept.before_last(epoch, step),
                            interval,
                            "seed {seed}, op {op}, epoch {epoch} of {window}, step {step}: before last"
                        );
                        judged_before += usize::from(interval.is_some());
                    }
                }
            }
        }
        assert!(judged > 10_000, "{judged} intervals compared");
        assert!(judged_before > 5_000, "{judged_before} intervals before the last compared");
    }

    #[test]
    fn takings_in_kept_tell_what_a_record_a_message_told() {
        let t0 = Instant::now();
        let messages = 3;
        let (mut judged, mut judged_before) = (0, 0);
        for seed in 1..=300u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut kept = HeardTimes::new(messages);
            let mut records: Vec<Option<Record>> = vec![None; messages];
            // (Each message's record before its last.)
            let mut replaced: Vec<Option<Record>> = vec![None; messages];
            let mut window = 1 + next(&mut rng) % 3;
            // Which messages of the current barrier and the next came.
            let mut came = [[false; 3]; 2];
            for op in 0..400u64 {
                let now = t0 + Duration::from_nanos(op * 1_000 + next(&mut rng) % 900);
                match next(&mut rng) % 6 {
                    0 => {
                        came[parity(window)] = [false; 3];
                        window += 1;
                    }
                    r => {
                        // A message of this barrier or, ahead, the next's;
                        // taken in once a barrier, vouched for or not.
                        let epoch = window + u64::from(r == 1);
                        let i = (next(&mut rng) % messages as u64) as usize;
                        if !std::mem::replace(&mut came[parity(epoch)][i], true) {
                            let clean = !next(&mut rng).is_multiple_of(4);
                            replaced[i] = records[i];
                            records[i] = clean.then(|| Record::after(records[i], epoch, now));
                            kept.heard(i, epoch, now, clean);
                        }
                    }
                }
                // What a NACK of this barrier's missing message `i` carries.
                for i in (0..messages).filter(|&i| !came[parity(window)][i]) {
                    let record = records[i].filter(|r| r.epoch + 1 == window);
                    assert_eq!(seen(kept.timed(i, window - 1)), record_seen(record), "seed {seed}, op {op}, barrier {window}, message {i}");
                    judged += usize::from(record.is_some_and(|r| r.before.is_some()));
                    if record.is_some() {
                        let before = replaced[i].filter(|r| r.epoch + 2 == window);
                        let interval = before.and_then(|r| record_seen(Some(r))).and_then(|(_, since)| since);
                        assert_eq!(kept.before_last(i, window - 1), interval, "seed {seed}, op {op}, barrier {window}, message {i}: before last");
                        judged_before += usize::from(interval.is_some());
                    }
                }
            }
        }
        assert!(judged > 10_000, "{judged} intervals compared");
        assert!(judged_before > 5_000, "{judged_before} intervals before the last compared");
    }
}
