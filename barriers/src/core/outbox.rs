//! What a core has to send and to report, until its driver polls them: a
//! reusable queue of messages and one data arena, cleared whenever the queue
//! has been drained, so that sending allocates nothing in steady state; and
//! the join's events. Copies spaced in time ([`Outbox::push_at`]) wait in
//! a second small queue, with an arena of their own, until they are due.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Event, To, Transmit};
use crate::transport::{Msg, MsgKind};

#[derive(Clone, Copy, Debug)]
struct Entry {
    rail: usize,
    to: To,
    msg: Msg,
    start: usize,
    end: usize,
}

/// The transmit queue.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    queue: VecDeque<Entry>,
    data: Vec<u8>,
    /// Copies to send later, each with its time (few: a step's copies).
    later: Vec<(Instant, Entry)>,
    later_data: Vec<u8>,
    /// Events other than a call's outcome (which has its own slot).
    pub(super) events: VecDeque<Event>,
}

impl Outbox {
    /// Queues `msg` with a copy of `data` for `to` on `rail`.
    #[inline]
    pub(super) fn push(&mut self, rail: usize, to: To, msg: Msg, data: &[u8]) {
        if self.queue.is_empty() {
            self.data.clear();
        }
        let start = self.data.len();
        self.data.extend_from_slice(data);
        self.queue.push_back(Entry { rail, to, msg, start, end: self.data.len() });
    }

    /// Queues `msg` with a copy of `data` for `to` on `rail`, to go at
    /// `due` ([`release`](Self::release)).
    pub(super) fn push_at(&mut self, due: Instant, rail: usize, to: To, msg: Msg, data: &[u8]) {
        if self.later.is_empty() {
            self.later_data.clear();
        }
        let start = self.later_data.len();
        self.later_data.extend_from_slice(data);
        self.later.push((due, Entry { rail, to, msg, start, end: self.later_data.len() }));
    }

    /// Queues copy `k` of a message: the first (k = 0) at once, copy k
    /// `k` gaps after `now` (all at once if `gap` is zero).
    #[inline]
    pub(super) fn push_copy(&mut self, now: Instant, (k, gap): (u32, Duration), rail: usize, to: To, msg: Msg, data: &[u8]) {
        if k == 0 || gap.is_zero() {
            self.push(rail, to, msg, data);
        } else {
            self.push_at(now + gap * k, rail, to, msg, data);
        }
    }

    /// Drops the later copies of this node's NACKs of (`epoch`, `tag`) to
    /// `to` (any node: `None`) not yet due: what they ask for came (no data
    /// to move: a NACK has none).
    #[inline]
    pub(super) fn cancel_nacks(&mut self, epoch: u32, tag: u16, to: Option<To>) {
        if !self.later.is_empty() {
            self.later.retain(|(_, e)| !(e.msg.kind == MsgKind::Nack && e.msg.epoch == epoch && e.msg.tag == tag && to.is_none_or(|t| t == e.to)));
        }
    }

    /// When the next message queued for later is due, if any.
    #[inline]
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.later.iter().map(|&(due, _)| due).min()
    }

    /// Moves the messages queued for later that are due at `now` to the
    /// transmit queue (in the order they were queued).
    #[inline]
    pub(super) fn release(&mut self, now: Instant) {
        if self.later.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.later.len() {
            let (due, e) = self.later[i];
            if due <= now {
                self.later.remove(i);
                let data = &self.later_data[e.start..e.end];
                if self.queue.is_empty() {
                    self.data.clear();
                }
                let start = self.data.len();
                self.data.extend_from_slice(data);
                self.queue.push_back(Entry { start, end: self.data.len(), ..e });
            } else {
                i += 1;
            }
        }
        self.compact_later();
    }

    /// Drops from the arena of copies queued for later the data of those
    /// that went (review rev31, finding 1): cleared only when a copy was
    /// queued while none waited, it kept every copy's data for as long as
    /// some always waited (copies spaced wider than the node's sends
    /// apart: 3 MB after 1,000 allreduces of 800 bytes under 60 µs bursts,
    /// without end). Compacted in place (nothing allocated) once it holds
    /// more than twice what still waits; the entries are in the arena's
    /// order (queued at its end, removed in order).
    fn compact_later(&mut self) {
        let live: usize = self.later.iter().map(|(_, e)| e.end - e.start).sum();
        if self.later_data.len() <= 2 * live + 4096 {
            return;
        }
        let mut to = 0;
        for (_, e) in &mut self.later {
            let len = e.end - e.start;
            self.later_data.copy_within(e.start..e.end, to);
            (e.start, e.end) = (to, to + len);
            to += len;
        }
        self.later_data.truncate(to);
    }

    /// Bytes held in the arena of the copies queued for later (tests).
    #[cfg(test)]
    pub(super) fn later_bytes(&self) -> usize {
        self.later_data.len()
    }

    /// The oldest message not yet polled.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<Transmit<'_>> {
        let e = self.queue.pop_front()?;
        Some(Transmit { rail: e.rail, to: e.to, msg: e.msg, data: &self.data[e.start..e.end] })
    }
}
