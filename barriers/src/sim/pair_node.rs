//! [`SimNode`] on a pair of the engine's cores, as
//! [`crate::PreparedBarrier::join_with`] makes them: a communicator's (or a
//! C group's) barrier, joined, and its collectives' barrier beside it, which
//! runs the instance derived from the joined one's
//! ([`crate::core::derived_instance`]) without a join of its own. The
//! application's barriers (plain and split-phase) run on the joined core,
//! its collectives on the one beside, as the MPI interposer calls them; a
//! finish closes both at once (the one beside is dropped unclosed if this
//! process never called a collective: `Collectives::closing` in the C
//! ABI), as the C ABI's group `close` and the job's `finish` do.
//!
//! The two barriers have transports of their own: here the one beside
//! sends on rails `rails..2·rails` of the one simulated network (the same
//! links, losses and partitions), and what comes on those goes to it.
//! Until the join completes, the one beside waits for it
//! ([`Core::await_join`]: it keeps what comes and answers probes that it
//! is alive), served beside the join as the driver's `join_with` serves it.
//!
//! Node 0 does what the blocking driver's pair does ([`crate::engine`],
//! `BesideWord`, review rev33-2): after each input to the core beside it
//! notes the nodes that core has heard in its instance and whether it
//! completed a barrier, and before it hands the joined core a `Join` of a
//! node that took part beside, it says so ([`Core::took_part_beside`]), so
//! that a restarted process is refused in place of one that took part in
//! either barrier.

use std::collections::VecDeque;
use std::time::Instant;

use super::core_node::CoreNode;
use super::node::{AppCall, NodeEvent, NodeSpec, SimNode, Transmit};
use crate::collective::Collective;
use crate::transport::{Msg, MsgKind, NodeId};
use crate::BarrierError;

/// Which core an event comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Joined,
    Beside,
}

/// Node 0's record of what its barrier beside saw (the driver's
/// `BesideWord`): the nodes heard in its instance, and whether it completed
/// a barrier.
#[derive(Debug)]
struct BesideWord {
    completed: bool,
    heard: Vec<bool>,
}

impl BesideWord {
    fn took_part(&self, p: NodeId) -> bool {
        self.completed || self.heard.get(p).is_some_and(|&h| h)
    }
}

/// A node running a pair of barriers (see the module docs).
#[derive(Debug)]
pub struct PairNode {
    joined: CoreNode,
    beside: CoreNode,
    rails: usize,
    /// Node 0: what the barrier beside tells the joined one.
    word: Option<BesideWord>,
    /// The barrier beside runs (the join completed): until then it waits for it.
    running: bool,
    /// The time of the last input.
    now: Instant,
    /// This process called a collective (so its finish closes the barrier beside too).
    used: bool,
    /// The barrier beside was dropped unclosed (finish, never used).
    dropped: bool,
    /// A finish in progress: the closes not yet done, and the first error.
    finishing: Option<(u8, Option<BarrierError>)>,
    events: VecDeque<NodeEvent>,
}

impl PairNode {
    /// A node of `spec` at `now`: its joined barrier joins at once, for both.
    pub fn new(spec: &NodeSpec, now: Instant) -> PairNode {
        let beside_config = spec.config;
        let mut beside = CoreNode::unjoined(spec, now);
        beside.core_mut().await_join(now);
        PairNode {
            joined: CoreNode::joining_beside(spec, now, &beside_config),
            beside,
            rails: spec.rails,
            word: (spec.node == 0).then(|| BesideWord { completed: false, heard: vec![false; spec.nodes] }),
            running: false,
            now,
            used: false,
            dropped: false,
            finishing: None,
            events: VecDeque::new(),
        }
    }

    /// The joined barrier's node.
    pub fn joined(&self) -> &CoreNode {
        &self.joined
    }

    /// The barrier beside's node.
    pub fn beside(&self) -> &CoreNode {
        &self.beside
    }

    /// The barrier beside runs its instance (not dropped).
    fn beside_live(&self) -> bool {
        self.running && !self.dropped
    }

    /// After an input to the core beside: node 0 notes what it saw.
    fn note_beside(&mut self, from: Option<NodeId>) {
        let Some(word) = self.word.as_mut() else { return };
        let core = self.beside.core();
        if !word.completed && core.completed_any() {
            word.completed = true;
        }
        if let Some(p) = from {
            if word.heard.get(p).is_some_and(|&h| !h) && core.heard_in_instance(p) {
                word.heard[p] = true;
            }
        }
    }

    /// Carries each core's word on what the application did there to the
    /// other ([`crate::core::AppWord`]), as the driver's pair does before
    /// each input: a failure told on either barrier and not called since is
    /// said on both, and a call of either clears both (finding j-3).
    fn words(&mut self) {
        if !self.beside_live() {
            return;
        }
        let now = self.now;
        let joined = self.joined.core().app_word();
        self.beside.core_mut().beside_word(now, joined);
        let beside = self.beside.core().app_word();
        self.joined.core_mut().beside_word(now, beside);
    }

    fn beside_handle(&mut self, now: Instant, from: NodeId, rail: usize, msg: &Msg, data: &[u8]) {
        if !self.running {
            // While node 0 refuses the join, the barrier beside answers no
            // probe either, as the driver's `join_paired` tells it (review
            // rev36, finding 2).
            let refused = self.joined.core().join_refused();
            self.beside.core_mut().beside_refused(refused);
        }
        self.beside.handle_message(now, from, rail, msg, data);
        self.note_beside(Some(from));
    }

    /// An event of either core, for the application.
    fn event(&mut self, side: Side, e: NodeEvent) {
        if let NodeEvent::Joined { instance } = e {
            if side == Side::Joined && !self.running {
                self.running = true;
                let now = self.now;
                self.beside.core_mut().joined_beside(crate::core::derived_instance(instance), now);
                self.note_beside(None);
            }
            self.events.push_back(NodeEvent::Joined { instance });
            return;
        }
        if side == Side::Joined && !self.running {
            // The join failed: `join_with` fails, and the barrier beside,
            // which waited for it, is dropped with it (it answers nothing).
            self.dropped = true;
        }
        if let Some((left, error)) = self.finishing.as_mut() {
            if let NodeEvent::Failed(e) = e {
                error.get_or_insert(e);
            }
            *left -= 1;
            if *left == 0 {
                let (_, error) = self.finishing.take().expect("a finish");
                self.events.push_back(match error {
                    Some(e) => NodeEvent::Failed(e),
                    None => NodeEvent::Completed { result: None },
                });
            }
            return;
        }
        self.events.push_back(e);
    }

    /// The application's call, on the barrier it runs on.
    fn call_one(&mut self, now: Instant, call: AppCall) {
        match call {
            AppCall::Collective { call: Collective::Barrier, .. } | AppCall::Enter | AppCall::Wait => {
                self.joined.call(now, call);
            }
            AppCall::Collective { .. } => {
                self.used = true;
                self.beside.call(now, call);
                self.note_beside(None);
            }
            AppCall::Finish if self.used && self.beside_live() => {
                self.finishing = Some((2, None));
                self.joined.call(now, AppCall::Finish);
                self.beside.call(now, AppCall::Finish);
                self.note_beside(None);
            }
            AppCall::Finish => {
                if self.beside_live() {
                    // Never used here: dropped unclosed (so by every node
                    // of a legal program), as the C ABI's close does.
                    self.beside.leave();
                    self.dropped = true;
                }
                self.joined.call(now, AppCall::Finish);
            }
        }
    }

    fn collect(&mut self) {
        while let Some(e) = self.joined.poll_event() {
            self.event(Side::Joined, e);
        }
        while let Some(e) = self.beside.poll_event() {
            self.event(Side::Beside, e);
        }
    }
}

impl SimNode for PairNode {
    fn handle_message(&mut self, now: Instant, from: NodeId, rail: usize, msg: &Msg, data: &[u8]) {
        self.now = now;
        self.words();
        if rail < self.rails {
            if let Some(word) = &self.word {
                if msg.kind == MsgKind::Join && word.took_part(from) {
                    self.joined.core_mut().took_part_beside(from);
                }
            }
            return self.joined.handle_message(now, from, rail, msg, data);
        }
        if !self.dropped {
            self.beside_handle(now, from, rail - self.rails, msg, data);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.words();
        self.joined.handle_timeout(now);
        if self.beside_live() {
            self.beside.handle_timeout(now);
            self.note_beside(None);
        }
    }

    fn call(&mut self, now: Instant, call: AppCall) {
        self.now = now;
        self.words();
        self.call_one(now, call);
        self.words();
    }

    fn poll_transmit(&mut self, data: &mut Vec<u8>) -> Option<Transmit> {
        self.collect();
        if let Some(t) = self.joined.poll_transmit(data) {
            return Some(t);
        }
        // (A barrier beside dropped says its last word, if any, then nothing.)
        let t = self.beside.poll_transmit(data)?;
        Some(Transmit { rail: t.rail + self.rails, ..t })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let joined = self.joined.poll_timeout();
        if !self.beside_live() {
            return joined;
        }
        match (joined, self.beside.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_event(&mut self) -> Option<NodeEvent> {
        self.collect();
        self.events.pop_front()
    }

    fn completed_any(&self) -> bool {
        self.joined.completed_any() || self.beside.completed_any()
    }

    fn leave(&mut self) {
        self.joined.leave();
        if !self.dropped {
            self.beside.leave();
        }
    }
}
