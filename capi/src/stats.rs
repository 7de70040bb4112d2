//! The counters C reads ([`mcd_stats`]): a barrier's and its endpoint's.

use barriers::{BarrierStats, SharedEndpoint};

use crate::CError;

/// Counters of a job's barrier and endpoint.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct mcd_stats {
    /// Barriers completed.
    pub barriers: u64,
    /// Messages the barriers sent (a multicast counts once).
    pub messages_sent: u64,
    /// Frames delivered by the endpoint.
    pub frames_received: u64,
    /// Messages sent twice at once (after a loss, or asked for early).
    pub resends: u64,
    /// Messages re-sent to answer a peer.
    pub answers: u64,
    /// Frames dropped: malformed, foreign, forged, replayed, or lost to a
    /// full receive ring (the three counters below included).
    pub frames_dropped: u64,
    /// Frames dropped because their tag did not verify under the job's
    /// secret: forged, or from a process with another secret.
    pub frames_bad_tag: u64,
    /// Authenticated frames dropped as replays (seen before, or too old).
    pub frames_replayed: u64,
    /// Frames dropped because they were signed where this job is not, or
    /// not signed where it is.
    pub frames_auth_mismatch: u64,
    /// NACKs not answered because the same peer had asked for the same
    /// message less than a quarter of the retry timeout after its last
    /// answer (the per-peer limit on answers: a burst of NACKs, replayed
    /// or from a buggy member, gets a bounded number of answers). The
    /// barrier's and its collectives' barrier's.
    pub answers_suppressed: u64,
    /// Messages of another barrier instance, dropped by the barrier (or by
    /// the barrier of its collectives), or of
    /// a communicator this process does not have, dropped by the shared
    /// endpoint: frames of an earlier run under the same secret, replayed
    /// (they verify, and are new to this run's endpoint, once), or late
    /// frames of an earlier barrier or a freed communicator of this job.
    pub messages_foreign: u64,
    /// Join answers for another incarnation than this node's, ignored (an
    /// earlier run's, replayed, or delayed); at node 0, join requests that
    /// replaced an admission not yet heard from (the same). The barrier's
    /// and its collectives' barrier's.
    pub joins_superseded: u64,
    /// Messages the shared endpoint dropped for want of room: a
    /// communicator's queue full (its application not calling), or join
    /// requests for communicators not created here yet beyond the number
    /// kept for them.
    pub messages_overflow: u64,
    /// Replay windows of senders' earlier sessions forgotten to make room
    /// (a few are kept per sender): many means frames of many earlier runs
    /// were replayed here.
    pub sessions_forgotten: u64,
    /// Hellos the bootstrap took and then ignored, or whose bootstrap of
    /// their rank another replaced: an earlier run's, replayed (or another
    /// job's with this job key, or of a rank that bootstrapped again); 0 in
    /// a job nobody disturbed.
    pub hellos_stale: u64,
}

/// The counters of a job's or group's barrier `b` with those of its
/// collectives' barrier `collectives` that tell of other runs and of
/// attacks (messages of another instance, superseded joins, suppressed
/// answers): a replayed frame of an earlier run's collectives lands there.
pub(crate) fn with_collectives(mut b: BarrierStats, collectives: Option<BarrierStats>) -> BarrierStats {
    if let Some(c) = collectives {
        b.foreign += c.foreign;
        b.superseded += c.superseded;
        b.answers_suppressed += c.answers_suppressed;
    }
    b
}

/// The counters `b` of a barrier, and those of the shared endpoint.
pub(crate) fn stats_of(b: BarrierStats, shared: &SharedEndpoint) -> Result<mcd_stats, CError> {
    let e = shared.with_endpoint(|e| e.stats())?;
    let route = shared.route_stats();
    Ok(mcd_stats {
        barriers: b.completed,
        messages_sent: b.sent,
        frames_received: e.received,
        resends: b.copies,
        answers: b.answers,
        frames_dropped: e.dropped.total() + e.ring_dropped,
        frames_bad_tag: e.dropped.bad_tag,
        frames_replayed: e.dropped.replayed,
        frames_auth_mismatch: e.dropped.auth_mismatch,
        answers_suppressed: b.answers_suppressed,
        messages_foreign: b.foreign + route.foreign,
        joins_superseded: b.superseded,
        messages_overflow: route.overflow + route.pending_dropped,
        sessions_forgotten: e.sessions_forgotten,
        hellos_stale: e.stale_hellos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collectives_barriers_counters_of_other_runs_and_attacks_are_added_and_no_others() {
        let barrier = BarrierStats { completed: 5, sent: 7, foreign: 1, superseded: 2, answers_suppressed: 3, ..BarrierStats::default() };
        let collectives = BarrierStats { completed: 100, sent: 200, foreign: 10, superseded: 20, answers_suppressed: 30, ..BarrierStats::default() };
        let both = with_collectives(barrier, Some(collectives));
        assert_eq!((both.foreign, both.superseded, both.answers_suppressed), (11, 22, 33));
        assert_eq!((both.completed, both.sent), (5, 7), "barriers and messages stay the barrier's own");
        assert_eq!(with_collectives(barrier, None), barrier);
    }
}
