//! Closing ([`crate::Barrier::finish`]): one closing barrier, then a
//! farewell: this node answers, and asks the peers not yet known to be past
//! the closing barrier where they are, until each is known to be past it or
//! has gone silent (having left). No blind linger.

use std::time::{Duration, Instant};

use super::receive::STATUS_TAG;
use super::{Core, To};
use crate::transport::{MsgKind, NodeId};

/// During the farewell, a peer that answers none of its queries for this
/// long (or the failure timeout, if shorter) has left, or died.
const FINISH_SILENCE: Duration = Duration::from_secs(1);
/// During the farewell, queries go out at least this often.
const FINISH_QUERY_LIMIT: Duration = Duration::from_millis(20);

/// The state of a node's farewell: its closing barrier `last` is complete,
/// and it answers (and asks) until every peer is known to be past it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Farewell {
    last: u64,
    start: Instant,
    interval: Duration,
    pub(super) next_query: Instant,
    pub(super) done: bool,
}

impl Core {
    /// The closing barrier is complete: from now on, answer peers until each
    /// is known to have completed it too.
    pub(super) fn begin_farewell(&mut self, now: Instant) {
        self.finished = true;
        let interval = self.rto.get();
        self.farewell = Some(Farewell { last: self.epoch, start: now, interval, next_query: now + interval, done: self.nodes() == 1 });
        if self.nodes() > 1 {
            self.send_status(None);
        }
    }

    /// One round of the farewell (after taking in what is there): asks the
    /// peers not yet known to be done, and says when to ask again (`None`:
    /// every peer is done, or silent, having left).
    pub(super) fn farewell_step(&mut self, now: Instant) -> Option<Instant> {
        let mut f = self.farewell?;
        if f.done {
            return None;
        }
        let silence = FINISH_SILENCE.min(self.config.failure_timeout);
        let pending = |e: &Self, p: NodeId| {
            p != e.me() && e.peers[p].at.is_none_or(|at| at < f.last) && e.peers[p].silent(now, silence, f.start).is_none()
        };
        if !(0..self.nodes()).any(|p| pending(self, p)) {
            // Say it twice more for peers whose earlier notices were lost.
            self.send_status(None);
            self.send_status(None);
            f.done = true;
            self.farewell = Some(f);
            return None;
        }
        if now >= f.next_query {
            for p in 0..self.nodes() {
                if pending(self, p) {
                    let query = self.msg(MsgKind::Nack, f.last, STATUS_TAG);
                    self.out.push(0, To::Node(p), query, &[]);
                    self.stats.nacks_sent += 1;
                    self.peers[p].probed(now);
                }
            }
            f.interval = (f.interval * 2).min(self.config.max_retry_interval()).min(FINISH_QUERY_LIMIT);
            f.next_query = now + f.interval;
            self.farewell = Some(f);
        }
        Some(f.next_query)
    }
}
