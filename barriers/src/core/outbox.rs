//! What a core has to send and to report, until its driver polls them: a
//! reusable queue of messages and one data arena, cleared whenever the queue
//! has been drained, so that sending allocates nothing in steady state; and
//! the join's events.

use std::collections::VecDeque;

use super::{Event, To, Transmit};
use crate::transport::Msg;

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

    /// The oldest message not yet polled.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<Transmit<'_>> {
        let e = self.queue.pop_front()?;
        Some(Transmit { rail: e.rail, to: e.to, msg: e.msg, data: &self.data[e.start..e.end] })
    }
}
