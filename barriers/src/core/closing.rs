//! Closing ([`crate::Barrier::finish`]): one closing barrier, then a
//! farewell: this node answers, and asks the peers not yet known to be past
//! the closing barrier where they are, until each is known to be past it,
//! has gone silent (having left), or says it gave up on the closing barrier
//! (its application was told a failure). No blind linger. A node still in
//! its closing barrier that hears a peer's farewell word of the barrier
//! after it completes it there ([`Core::closing_proven`]): that peer
//! completed it, so every node entered it (a node stalled past the
//! farewell's silence is not left behind for a message lost before its
//! peers left).

use std::time::{Duration, Instant};

use super::{Core, To};
use crate::transport::STATUS_TAG;
use crate::transport::{MsgKind, NodeId};

/// During the farewell, a peer that answers none of its queries for this
/// long (or the failure timeout, if shorter) has left, or died.
const FINISH_SILENCE: Duration = Duration::from_secs(1);
/// During the farewell, queries go out at least this often.
const FINISH_QUERY_LIMIT: Duration = Duration::from_millis(20);

/// Where this node is in the closing protocol.
#[derive(Clone, Copy, Debug)]
pub(super) enum Closing {
    /// Not closing.
    Open,
    /// The closing barrier is entered (by close or finish), not complete.
    Barrier,
    /// The closing barrier is complete: answering and asking until every
    /// peer is known to be past it (or to have given up on it).
    Farewell(Farewell),
    /// Every peer is past it, gave up on it, or is silent.
    Done,
}

impl Closing {
    /// Whether the closing protocol has begun.
    pub(super) fn closing(&self) -> bool {
        !matches!(self, Closing::Open)
    }

    /// Whether the closing barrier is complete (no barrier after it).
    pub(super) fn finished(&self) -> bool {
        matches!(self, Closing::Farewell(_) | Closing::Done)
    }
}

/// The state of a node's farewell: its closing barrier `last` is complete,
/// and it answers (and asks) until every peer is known to be past it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Farewell {
    last: u64,
    start: Instant,
    interval: Duration,
    pub(super) next_query: Instant,
}

impl Core {
    /// The closing barrier is complete: from now on, answer peers until each
    /// is known to have completed it too.
    pub(super) fn begin_farewell(&mut self, now: Instant) {
        if self.nodes() == 1 {
            self.closing = Closing::Done;
            return;
        }
        let interval = self.recovery.rto.most();
        self.closing = Closing::Farewell(Farewell { last: self.window.epoch, start: now, interval, next_query: now + interval });
        self.send_status(None);
    }

    /// One round of the farewell (after taking in what is there): asks the
    /// peers not yet known to be done, and says when to ask again (`None`:
    /// every peer is done, or silent, having left).
    pub(super) fn farewell_step(&mut self, now: Instant) -> Option<Instant> {
        let Closing::Farewell(mut f) = self.closing else { return None };
        let silence = FINISH_SILENCE.min(self.config.failure_timeout);
        // A peer whose latest word is that it gave up on the closing
        // barrier (its application was told a failure, and has not called
        // again) may keep its barrier for ever without calling: waiting for
        // it would hold this node's finish for as long (soak seed 12568).
        let pending = |e: &Self, p: NodeId| {
            let peer = &e.live.peers[p];
            p != e.me()
                && peer.at.is_none_or(|at| at < f.last)
                && peer.silent(now, silence, f.start).is_none()
                && peer.gave_up.is_none_or(|(epoch, _, _)| epoch + 1 < f.last)
        };
        if !(0..self.nodes()).any(|p| pending(self, p)) {
            // Say it twice more for peers whose earlier notices were lost.
            self.send_status(None);
            self.send_status(None);
            self.closing = Closing::Done;
            return None;
        }
        if now >= f.next_query {
            for p in 0..self.nodes() {
                if pending(self, p) {
                    let query = self.msg(MsgKind::Nack, f.last, STATUS_TAG);
                    self.out.push(0, To::Node(p), query, &[]);
                    // ("Where are you?": liveness, a probe.)
                    self.stats.nacks_sent += 1;
                    self.stats.probes += 1;
                    self.live.peers[p].probed(now);
                }
            }
            f.interval = (f.interval * 2).min(self.config.max_retry_interval()).min(FINISH_QUERY_LIMIT);
            f.next_query = now + f.interval;
            self.closing = Closing::Farewell(f);
        }
        Some(f.next_query)
    }
}
