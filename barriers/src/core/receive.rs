//! Taking in one message: its instance and window, what it says of its
//! sender, and what it counts for.

use std::time::Instant;

use super::copies::{copy_of, reply_id_of};
use super::recovery::Laggard;
use super::window::{ahead, behind, parity, place};
use super::Core;
use crate::collective::Contributions;
use crate::plan;
use crate::transport::{status, Msg, MsgKind, NodeId, MISMATCHED, RECOVERED, STATUS_TAG};

impl Core {
    /// Takes in a message (after the join) with its `data`.
    pub(super) fn receive(&mut self, from: NodeId, msg: Msg, data: &[u8], now: Instant) {
        if from >= self.nodes() || from == self.me() {
            return;
        }
        match msg.kind {
            MsgKind::Join => return self.on_join(from, msg),
            MsgKind::Admit | MsgKind::Refuse => {
                self.stats.stale += 1; // a duplicate of the join, long done
                return;
            }
            _ => {}
        }
        if msg.instance != self.member.instance || self.live.left_behind {
            self.stats.foreign += 1;
            return;
        }
        let Some(epoch) = place(self.window.epoch, msg.epoch) else {
            self.stats.stale += 1;
            if ahead(self.window.epoch, msg.epoch) {
                self.live.left_behind = true;
                self.live.report_pending = Some(now); // judged at once
            } else if msg.kind == MsgKind::Nack && behind(self.window.epoch, msg.epoch) {
                // Its asker is two or more barriers behind: nothing it asks
                // for is kept, and unanswered it would name this live node
                // silent. This node's status (two or more barriers ahead of
                // it) tells it that it is left behind, if it is (a
                // restarted process admitted in place of one that took part
                // further on; else a late copy, and the status says
                // nothing new). Finding j-4, pair seed 113429: node 5's new
                // process NACKed node 1 from barrier 0 while node 1 was at
                // barrier 2, and named it silent 100 ms later, failing 7
                // peers with it.
                self.send_status(Some(from));
            }
            return;
        };
        if msg.kind == MsgKind::Status && msg.tag & status::JOINING != 0 {
            return self.on_joining(from, epoch);
        }
        if self.live.gave_up == Some(from) {
            self.live.gave_up = None; // it is back: stop reporting it silent
        }
        // (Probes it left unanswered until now: see the round trip below.
        // One look-up of the peer for both: a second cost 18 instructions
        // a frame, hotpath.md, session 19.)
        let peer = &mut self.live.peers[from];
        let unanswered = peer.unanswered();
        peer.heard(now);
        // (A plan's data only: its copies follow the rule alone; answers
        // and NACKs go in copies for other reasons too.)
        if msg.kind == MsgKind::Data {
            self.recovery.loss.peer_copies(copy_of(msg.arg).1, self.setup.nodes - 1);
        }
        if matches!(msg.kind, MsgKind::Answer | MsgKind::Status) {
            // A reply after two or more NACKs unanswered may be a peer that
            // was away (not driven) answering on its return: no round trip
            // (review rev34, finding 4: node 0's first sample, 2.7 ms where
            // the network's is 40 us, was its crossing window and answer
            // gap, and its peer's next loss cost 2.7 ms).
            if unanswered <= 1 {
                self.recovery.replied(from, reply_id_of(msg.arg), now);
            } else {
                self.recovery.nacked_at.take_if(|(p, _, _)| *p == from);
            }
        }
        // A farewell's word (a `FINISHED` status, a "where are you?"
        // query) of the barrier after this node's closing barrier: its
        // sender completed the closing barrier, and without a mismatch
        // (see `closing_proven`).
        let farewell = match msg.kind {
            MsgKind::Status => msg.tag & status::FINISHED != 0,
            MsgKind::Nack => msg.tag == STATUS_TAG,
            _ => false,
        };
        let past_closing = farewell && epoch == self.window.epoch + 1 && self.closing.closing() && !self.closing.finished();
        match msg.kind {
            MsgKind::Status => self.on_status(from, msg, epoch, now),
            MsgKind::Nack => self.on_nack(from, msg, epoch, now),
            // A late copy of a finished barrier's message (nodes never
            // re-send unasked: a straggler NACKs).
            MsgKind::Data | MsgKind::Answer if epoch < self.window.epoch => {
                self.stats.stale += 1;
                // (A frame that the barrier's completion overtook is held
                // for lost until the next completes.)
                if let Some(i) = self.plans.expect.index(from, msg.tag) {
                    if self.window.copies.late(epoch, i, copy_of(msg.arg).0, msg.kind == MsgKind::Answer) {
                        self.recovery.loss.came();
                    }
                }
            }
            MsgKind::Data | MsgKind::Answer => {
                // Node 0's release, relayed by this node's parent (asked
                // for it, or told that this node still waits for it).
                let sender =
                    if msg.kind == MsgKind::Answer && msg.tag == plan::tag::RELEASE && self.recovery.parent == Some(from) { 0 } else { from };
                if !self.on_data(sender, msg, epoch, data, now) {
                    return;
                }
            }
            MsgKind::Join | MsgKind::Admit | MsgKind::Refuse => unreachable!("handled above"),
        }
        if past_closing && epoch == self.window.epoch + 1 {
            self.closing_proven(now);
        }
        let next_data = epoch == self.window.epoch + 1
            && self.phase.running()
            && msg.tag == plan::tag::BCAST_DATA
            && matches!(msg.kind, MsgKind::Data | MsgKind::Answer);
        if next_data && crate::collective::wire::Contribution::new_checked(data).is_some_and(|c| c.ends_previous()) {
            self.take_implied_end(from);
        }
        if epoch == self.window.epoch + 1 && self.phase.running() && !self.recovery.fast_nacked {
            self.nack_proven(from, now);
        }
    }

    /// `from` answered a probe of barrier `epoch` saying it is not admitted
    /// yet: it lives, though it cannot take part until node 0 admits it (its
    /// admission was lost, or node 0 is out of its reach). Its unanswered
    /// probes count afresh, as when it asks node 0 again; it is not "heard"
    /// (a report that it is silent, from a node it cannot reach, still counts).
    fn on_joining(&mut self, from: NodeId, epoch: u64) {
        self.live.peers[from].joining();
        if self.phase.running() && epoch == self.window.epoch && self.missing_any(|p| p == from) {
            self.recovery.laggard = Laggard::Late;
        }
    }

    fn on_status(&mut self, from: NodeId, msg: Msg, epoch: u64, now: Instant) {
        // A status answers a probe: a peer this step waits for has not sent
        // yet, so nothing was lost; it is late.
        if self.phase.running() && epoch <= self.window.epoch && self.missing_any(|p| p == from) {
            self.recovery.laggard = Laggard::Late;
        }
        // The parent asked for node 0's release (from 512 nodes on) says it
        // is still in this barrier: it has not got the release either (it
        // completes the barrier on it), so the release is late, not lost:
        // back off as from node 0's own "not yet". (Without it, each child
        // asked again at its release step's short backoff, and each ask cost
        // the parent, often itself late, a status.)
        let parent_waits = self.recovery.relay && self.recovery.parent == Some(from) && epoch == self.window.epoch;
        if parent_waits && self.phase.running() && self.coll.is_none() && self.missing_any(|p| p == 0) {
            self.recovery.laggard = Laggard::Late;
        }
        if msg.tag & status::IN_PROGRESS != 0 {
            self.release_proven_missing(from, epoch, now);
        }
        if self.live.peers[from].status(epoch, msg, now) {
            self.live.reports = true;
            self.live.report_pending = Some(now);
        }
        if msg.tag & status::MISMATCH != 0 && self.phase.running() && epoch == self.window.epoch {
            // A node that cannot complete this barrier, where the mismatch
            // does not show (it may be the only one that saw it).
            self.note_mismatch(epoch, now);
        }
    }

    /// A data message or an answer of this barrier or the next; false if
    /// it is nothing this node's plans wait for.
    fn on_data(&mut self, from: NodeId, msg: Msg, epoch: u64, data: &[u8], now: Instant) -> bool {
        if msg.kind == MsgKind::Data {
            self.live.peers[from].at_least(epoch, true);
        }
        if msg.arg & MISMATCHED != 0 {
            self.window.void[parity(epoch)] = true;
        }
        let Some(i) = self.plans.expect.index(from, msg.tag) else {
            self.stats.stale += 1; // nothing this node's plan waits for
            return false;
        };
        let fresh = self.window.got[parity(epoch)].insert(i);
        // (The frames sent before the first heard are held for lost, and
        // counted when its barrier's frames can no longer come.)
        let (copy, answer) = (copy_of(msg.arg), msg.kind == MsgKind::Answer);
        if fresh {
            // Later copies of this node's NACK for it ask for nothing now.
            // (Node 0's release may have been asked of this node's parent.)
            let to = (msg.tag != plan::tag::RELEASE || from != 0).then_some(super::To::Node(from));
            self.out.cancel_nacks(msg.epoch, msg.tag, to);
            // (A broadcast's end may have been implied, not sent: an
            // answer is then its only frame.)
            self.window.copies.first(epoch, i, copy, answer, msg.tag != plan::tag::BCAST_DONE);
            self.recovery.loss.came();
            // When the original came, for the echo of a NACK for the next
            // barrier's (not if this node cannot vouch for the time: an
            // answer, a later copy, taken in on its return from a stall,
            // or while no timer of its own ran, which is the only way a
            // stall shows: a node that is not running a barrier, or whose
            // application was told a failure, may not be driven at all, its
            // application away and its frames waiting until it calls, and
            // took in late, an echo looks short: its peer took NACKs for the
            // next barrier's lost message for crossings for as long, and a
            // node away longer than the failure timeout named its live
            // peer silent: review rev34, finding 1).
            let stalled = self.recovery.stall.is_some_and(|(_, back)| now.saturating_duration_since(back) < self.recovery.rto.least());
            let driven = self.phase.running() && self.live.told.is_none();
            let clean = !answer && copy.0 == 0 && !stalled && driven;
            self.recovery.heard_at.heard(i, epoch, now, clean);
        } else if self.window.copies.late(epoch, i, copy.0, answer) {
            self.recovery.loss.came();
        }
        if fresh {
            // The first arrival's data is the contribution; a duplicate's
            // never counts.
            if !data.is_empty() && self.coll.is_none() {
                let (steps, expected) = (self.run.remaining.len(), self.plans.expect.len());
                self.coll = Some(Box::new(Contributions::new(steps, expected)));
            }
            if let Some(coll) = &mut self.coll {
                coll.arrive(parity(epoch), i, data);
            }
        }
        if !fresh {
            self.stats.duplicates += 1;
            if msg.kind == MsgKind::Data && self.recovery.last_answered == Some((epoch, i)) {
                // The original came after all: it was late, not lost.
                self.recovery.last_answered = None;
                if self.recovery.recovered_in == Some(epoch) {
                    self.recovery.recovered_in = None;
                }
            }
        } else if epoch > self.window.epoch || !self.phase.running() {
            self.stats.early += 1;
        } else if self.plans.expect.step_of(i).0 != self.run.cur {
            // Of this epoch, but of another plan: the peer called another collective.
            self.note_mismatch(epoch, now);
        } else {
            let (_, step) = self.plans.expect.step_of(i);
            self.run.remaining[step] -= 1;
            let clean = msg.kind == MsgKind::Data && msg.arg & RECOVERED == 0;
            // A release that its sender (or this node's parent) said was
            // not sent yet came late by the whole job's progress, not by
            // one peer's: its time says when to expect the next one, where
            // a lost release proves itself (the timer is then a fallback).
            // Elsewhere the timer is what recovers a lost release, and an
            // application's lateness must not slow it (review rev32,
            // finding 1: one rank 5 ms late in every barrier taught 8
            // nodes a 5.4 ms release timeout, and a lost release then cost
            // 9.6 ms).
            let told = self.recovery.laggard == Laggard::Late && msg.tag == plan::tag::RELEASE && from == 0 && self.release_proves_itself();
            if step == self.run.step
                && self.run.remaining[step] == 0
                && clean
                && !self.recovered()
                && (self.recovery.laggard == Laggard::Unknown || told)
            {
                // An original message, delayed by no loss anywhere,
                // completed the step: its time is a lesson (also when it
                // came after a probe: then the retry was early, and the
                // timeout must grow, or every step probes again).
                self.recovery.rto.sample(step, now.saturating_duration_since(self.recovery.step_since));
            } else if step == self.run.step && self.run.remaining[step] == 0 && self.recovery.laggard == Laggard::Unknown {
                // A recovery somewhere delayed the step (a message marked
                // RECOVERED came, here or at its last): its time teaches
                // nothing, but the originals that came in it undelayed do:
                // the last of them is a clean path's time.
                let own_late = self.recovery.recovered_in.is_some_and(|e| e + 1 >= self.window.epoch);
                if let Some(at) = self.recovery.clean_at.filter(|_| !own_late) {
                    self.recovery.rto.sample(step, at.saturating_duration_since(self.recovery.step_since));
                }
            }
            if step == self.run.step && clean {
                self.recovery.clean_at = Some(now);
            }
            if !clean {
                // Recovered here or upstream: a loss happened (or the
                // original is late: then it arrives as a duplicate).
                if msg.kind == MsgKind::Answer {
                    self.recovery.recovered_in = Some(self.window.epoch);
                } else {
                    self.recovery.upstream_in = Some(self.window.epoch);
                }
                if msg.kind == MsgKind::Answer {
                    self.recovery.last_answered = Some((epoch, i));
                }
            }
        }
        true
    }
}
