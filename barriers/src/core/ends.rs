//! Broadcast ends. A broadcast's epoch ends with its root's end message,
//! sent once every node entered (see [`crate::collective`]). **The end is
//! implied** when the root broadcasts again at once: a root that completes
//! a broadcast, every node's call agreeing, as its next call begins another
//! broadcast of its own, sends no end; its next data says so in its header
//! ([`ENDS_PREVIOUS`](crate::collective::wire::ENDS_PREVIOUS)), and a node
//! still waiting for the end takes that data (or its answer) for it. The
//! root still answers a NACK for the end (it is staged, only not sent).

use super::window::{bcast_variant, parity, BASE};
use super::Core;
use crate::collective::Collective;
use crate::plan;
use crate::transport::NodeId;

/// The root's side: whether the end of the broadcast completing now is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ends {
    /// Ends are sent (the default).
    Sent,
    /// This node, the root of the broadcast completing in the background,
    /// completes it to broadcast again at once: its end is not to be sent.
    Implying,
    /// The end was not sent: the next data (this call's) says so.
    Skipped,
}

impl Core {
    /// A call of `call` begins (and first completes what is in the background).
    pub(super) fn ends_begin(&mut self, call: Collective) {
        let again = matches!(call, Collective::Bcast { root } if root == self.me());
        self.ends = if again && self.nodes() > 2 && self.run.mismatch.is_none() { Ends::Implying } else { Ends::Sent };
    }

    /// Whether to skip sending the end now (it is implied), counting it.
    pub(super) fn skip_end(&mut self) -> bool {
        if self.ends != Ends::Implying || self.coll.as_ref().is_some_and(|c| c.has_error()) {
            return false;
        }
        self.stats.ends_implied += 1;
        self.ends = Ends::Skipped;
        true
    }

    /// The call's own epoch begins: whether its data must say it ends the
    /// broadcast before. Ends are sent again from now on.
    pub(super) fn ends_take(&mut self) -> bool {
        std::mem::replace(&mut self.ends, Ends::Sent) == Ends::Skipped
    }

    /// The next epoch's broadcast data from `from` says it ends this
    /// epoch ([`ENDS_PREVIOUS`](crate::collective::wire::ENDS_PREVIOUS)):
    /// if this epoch is `from`'s broadcast and this node waits for its end,
    /// that is the end (see [`crate::collective`]).
    pub(super) fn take_implied_end(&mut self, from: NodeId) {
        if self.run.cur == BASE || self.run.cur != bcast_variant(from) || from == self.me() {
            return;
        }
        let Some(i) = self.plans.expect.index(from, plan::tag::BCAST_DONE) else { return };
        let (variant, step) = self.plans.expect.step_of(i);
        let parity = parity(self.window.epoch);
        if variant == self.run.cur && self.window.got[parity].insert(i) {
            if let Some(coll) = &mut self.coll {
                coll.arrive_agreeing(parity, i);
            }
            self.run.remaining[step] -= 1;
            self.stats.ends_implied += 1;
        }
    }
}
