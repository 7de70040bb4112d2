//! Evidence: what proves a message missing before any timer says so.
//!
//! A NACK for the release proves the asker's arrival went; a peer's message
//! of the next barrier proves that it sent everything of this one; in a tree
//! whose root releases by multicast, a lost arrival or release proves itself
//! by what comes next, so the timer waits longer for it (PROTOCOL.md,
//! *Evidence*). The timer itself, NACKs and answers are [`super::recovery`]'s.

use std::time::{Duration, Instant};

use super::Core;
use crate::plan;
use crate::transport::NodeId;

/// How many of its retry timeouts a gather waits for evidence that a
/// missing child's arrival went (the child's NACK of the release) before
/// its timer asks for it ([`Core::arrivals_prove_themselves`]).
pub(super) const EVIDENCE_WAITS: u32 = 2;

/// Whether `node` has children of its own in the k-nomial tree of `n`
/// nodes (so it sends its arrival only once its own gather is done: a
/// missing arrival of a leaf, sent as it enters, was lost; one of a node
/// that gathers first is more likely late).
pub(super) fn gathers_first(node: NodeId, k: usize, n: usize) -> bool {
    k > 1 && node.is_multiple_of(k) && node + 1 < n
}

impl Core {
    /// **What a NACK proves.** A node asks for the release only in the step
    /// in which it has sent its arrival (every plan with a release: a tree,
    /// concurrent). So a NACK for the current barrier's release from a
    /// peer whose arrival this node still misses proves that the arrival
    /// went and was lost (or is still on its way): it is NACKed at once,
    /// not at this node's retry. (That retry may never be learned: node 0's
    /// gather at 1,024 nodes, or under bursty loss at 64, is rarely
    /// completed without some recovery below it, which teaches nothing, so
    /// it kept the initial 250 µs; a lost arrival waited that long.) At
    /// most one such NACK per answer gap to one peer (the peer's NACK comes
    /// in copies), and it counts as this node's retry: the next comes a
    /// retry interval later (measured, 10 GbE, tree4, 8 nodes, bursty 5%/4:
    /// 2.01× lossless when the timer NACKed again soon after, 1.92× with).
    pub(super) fn arrival_proven(&mut self, from: NodeId, now: Instant, gap: Duration) {
        let just_asked = self.recovery.nacked_at.is_some_and(|(p, _, at)| p == from && now.saturating_duration_since(at) < gap);
        if !self.phase.running() || just_asked {
            return;
        }
        let sent = self.nack_missing(now, false, |w| w.from == from && w.tag == plan::tag::ARRIVE);
        self.stats.fast_nacks += sent;
        if sent > 0 {
            // (This was the retry: the next comes a retry interval later.)
            self.recovery.next_retry = self.recovery.next_retry.max(now + self.recovery.retry_interval);
        }
    }

    /// `from` is in barrier c+1, so it has completed c: it has sent this node
    /// everything it sends in c, and node 0 has sent its release. NACK at
    /// once whatever of that the current step still misses.
    pub(super) fn nack_proven(&mut self, from: NodeId, now: Instant) {
        // A broadcast's data and end, and a reduce's end, come from its
        // root, which sent them before any node completed the epoch.
        let proven = |w: &plan::Expect| {
            w.from == from
                || (w.from == 0 && w.tag == plan::tag::RELEASE)
                || matches!(w.tag, plan::tag::BCAST_DATA | plan::tag::BCAST_DONE | plan::tag::REDUCE_DONE)
        };
        let sent = self.nack_missing(now, false, proven);
        self.stats.fast_nacks += sent;
        self.recovery.fast_nacked |= sent > 0;
    }

    /// **Arrivals that prove themselves.** In a tree whose root releases by
    /// multicast, a child that has sent its arrival waits for the release,
    /// and asks for it at its own retry timeout; where it asks this node
    /// (node 0, or its parent from [`RELAY_FROM_NODES`](super::recovery::RELAY_FROM_NODES) nodes on, outside
    /// collectives, whose releases are node 0's to send), that NACK proves
    /// the arrival went, and this node NACKs a missing one at once
    /// ([`Core::arrival_proven`]). A missing arrival with no such NACK is
    /// late, not lost (its copies make a whole loss improbable): its sender
    /// is still gathering. So the gather's timer does not ask for it until
    /// the step has waited [`EVIDENCE_WAITS`] retry timeouts (a fallback for
    /// a child that stopped, or whose NACK was lost too). Asked at the
    /// timer, a late child answered with a status; at 1,024 nodes and 1%
    /// loss node 0's gather timed out in most barriers while its largest
    /// subtrees were merely late, and each NACK, in copies, cost its CPU a
    /// send gap (2.7 µs at 10 GbE) before it could release.
    /// **A release that proves itself.** From [`RELAY_FROM_NODES`](super::recovery::RELAY_FROM_NODES) nodes on
    /// (outside collectives), a node that lost node 0's release learns that
    /// it went from the next barrier: its children's arrivals of it (which
    /// NACK the release at once, [`Core::nack_proven`]), or, for a leaf, its
    /// parent's probe of its arrival there, answered by a status that it is
    /// still in the barrier before, on which the parent hands the release on
    /// at once ([`Core::release_proven_missing`]). Without such evidence a
    /// missing release is late, not lost (it goes in copies to every node):
    /// the timer asks for it only once the step has waited
    /// [`EVIDENCE_WAITS`] retry timeouts. (Every node's release timer fired
    /// together whenever the release was a little late: at 1,024 nodes and
    /// 1% loss about 1,100 NACKs crossed a release as it went, and each
    /// parent handed it on to each child in copies, for tens of µs of its
    /// CPU, while the next barrier's gather waited.)
    pub(super) fn release_proves_itself(&self) -> bool {
        let tree = matches!(self.config.algorithm, plan::Algorithm::Tree { release: plan::Release::Multicast, .. });
        tree && self.recovery.relay && self.coll.is_none() && self.me() != 0
    }

    /// The tree's fanout (0: not a tree).
    pub(super) fn tree_k(&self) -> usize {
        match self.config.algorithm {
            plan::Algorithm::Tree { k, .. } => k.get(),
            _ => 0,
        }
    }

    /// Whether what the current step misses proves itself if lost: the
    /// arrivals where they do ([`Core::arrivals_prove_themselves`]), or,
    /// in a tree whose root releases by multicast, node 0's release alone
    /// (its children's next arrivals, or its parent's probe of its own,
    /// show that it went).
    pub(super) fn lost_proves_itself(&self) -> bool {
        let tree = matches!(self.config.algorithm, plan::Algorithm::Tree { release: plan::Release::Multicast, .. });
        self.arrivals_prove_themselves() || (tree && !self.missing_any(|p| p != 0))
    }

    pub(super) fn arrivals_prove_themselves(&self) -> bool {
        let tree = matches!(self.config.algorithm, plan::Algorithm::Tree { release: plan::Release::Multicast, .. });
        tree && (self.me() == 0 || (self.recovery.relay && self.coll.is_none()))
    }
}
