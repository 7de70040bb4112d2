//! Endpoint statistics: what was sent and received, and every frame dropped, by reason.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why a received frame was dropped in user space.
///
/// The checks run in this order: the frame's length, EtherType and version
/// (to find its trailer), its authentication state, its tag, then the job
/// key, addressing and source, and last the replay window. So a frame
/// counted under any reason after [`BadTag`](Self::BadTag) was signed with
/// the job's secret (when authentication is on): a forged frame is always
/// counted as `BadTag` (or one of the three reasons before it), never as
/// anything its unverified fields say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Shorter than the headers, cut short by the ring slot, or with a payload
    /// length beyond the frame.
    Truncated,
    /// A header version this build does not speak.
    BadVersion,
    /// Another EtherType (seen only with the kernel filter off).
    ForeignEtherType,
    /// Another job's key.
    WrongJob,
    /// Addressed to another node, port or group.
    NotForMe,
    /// The source node number does not match the sender's MAC and port in the node list.
    UnknownSource,
    /// Its authentication state is not this endpoint's: an unauthenticated
    /// frame (no trailer) at an endpoint with a secret, or an authenticated
    /// one at an endpoint with authentication off.
    AuthMismatch,
    /// Its tag does not verify under the job's secret: forged, corrupted, or
    /// from a process with another secret (another job, or a misconfigured
    /// one). [`crate::Endpoint::bad_tags_from`] counts these per claimed sender.
    BadTag,
    /// A valid frame seen before, or older than the sender's replay window
    /// ([`crate::auth::REPLAY_WINDOW`] frames below the newest seen).
    Replayed,
}

/// Counters of frames dropped in user space, one per [`DropReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// [`DropReason::Truncated`].
    pub truncated: u64,
    /// [`DropReason::BadVersion`].
    pub bad_version: u64,
    /// [`DropReason::ForeignEtherType`].
    pub foreign_ethertype: u64,
    /// [`DropReason::WrongJob`].
    pub wrong_job: u64,
    /// [`DropReason::NotForMe`].
    pub not_for_me: u64,
    /// [`DropReason::UnknownSource`].
    pub unknown_source: u64,
    /// [`DropReason::AuthMismatch`].
    pub auth_mismatch: u64,
    /// [`DropReason::BadTag`].
    pub bad_tag: u64,
    /// [`DropReason::Replayed`].
    pub replayed: u64,
}

impl DropCounts {
    /// The counter for `reason`.
    pub fn get_mut(&mut self, reason: DropReason) -> &mut u64 {
        match reason {
            DropReason::Truncated => &mut self.truncated,
            DropReason::BadVersion => &mut self.bad_version,
            DropReason::ForeignEtherType => &mut self.foreign_ethertype,
            DropReason::WrongJob => &mut self.wrong_job,
            DropReason::NotForMe => &mut self.not_for_me,
            DropReason::UnknownSource => &mut self.unknown_source,
            DropReason::AuthMismatch => &mut self.auth_mismatch,
            DropReason::BadTag => &mut self.bad_tag,
            DropReason::Replayed => &mut self.replayed,
        }
    }

    /// All user-space drops.
    pub fn total(&self) -> u64 {
        self.truncated
            + self.bad_version
            + self.foreign_ethertype
            + self.wrong_job
            + self.not_for_me
            + self.unknown_source
            + self.auth_mismatch
            + self.bad_tag
            + self.replayed
    }
}

/// An endpoint's counters since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames posted for sending.
    pub sent: u64,
    /// Sends the kernel refused for now (`ENOBUFS`: a full or dropping egress
    /// queue); the frame stays in the send ring and goes out with the next kick.
    pub send_refused: u64,
    /// Announcements sent while waiting ([`crate::Endpoint::announce`]; not
    /// counted in `sent`).
    pub announced: u64,
    /// Messages delivered to the application.
    pub received: u64,
    /// Frames the kernel dropped because the receive ring was full
    /// (`PACKET_STATISTICS`).
    pub ring_dropped: u64,
    /// Frames that reached user space and were dropped there, by reason.
    pub dropped: DropCounts,
    /// Replay windows of senders' earlier sessions given to newer sessions
    /// (at most [`crate::auth::EARLIER_SESSIONS`] are kept per sender and
    /// rail besides its most heard: review rev28, finding 4). Many means
    /// frames of many earlier runs were replayed here.
    pub sessions_forgotten: u64,
}

/// Hellos the bootstrap dropped ([`crate::bootstrap`]), shared by its
/// socket, the thread that lingers after it answering late ranks, and the
/// endpoint opened on its node list, whose [`Stats::dropped`] includes
/// them (review rev28, finding 1: forged hellos during a bootstrap that
/// succeeds were counted nowhere the job could read).
#[derive(Debug, Default)]
pub struct BootstrapDrops {
    /// Another wire version (an mcd build of another protocol).
    pub(crate) bad_version: AtomicU64,
    /// Signed where this rank does not sign, or the other way round.
    pub(crate) auth_mismatch: AtomicU64,
    /// Tags that do not verify: another secret, or forged.
    pub(crate) bad_tag: AtomicU64,
    /// Signed hellos seen before, or older than their sender's window: replays.
    pub(crate) replayed: AtomicU64,
}

impl BootstrapDrops {
    /// Adds these drops to `counts`, by reason.
    pub fn add_to(&self, counts: &mut DropCounts) {
        counts.bad_version += self.bad_version.load(Relaxed);
        counts.auth_mismatch += self.auth_mismatch.load(Relaxed);
        counts.bad_tag += self.bad_tag.load(Relaxed);
        counts.replayed += self.replayed.load(Relaxed);
    }
}
