//! The barrier among the ranks of one host, in shared memory: the first and
//! last step of the hierarchical barrier ([`crate::HierarchicalBarrier`]).
//!
//! **The segment** is a file in `/dev/shm` named by the job key, the host's
//! MAC and the leader's port ([`segment_path`]); the leader (local rank 0)
//! creates it exclusively (`O_EXCL`), every other local rank maps it, and the
//! leader unlinks the name as soon as all have: from then on no name is left
//! to clean up, and the memory goes with the last process, however it ends.
//! A name that a crashed job left behind is recognised by its creator (pid
//! and start time, so a reused pid does not fool it) being dead, and is
//! replaced, never joined.
//!
//! **Layout**, in 128-byte lines (two cache lines: no false sharing, even
//! with the adjacent-line prefetcher): the header; the release word (the
//! number of the last barrier the leader released, a futex) with its
//! sleeper count and failure flag; the gather word (bumped by every arrival,
//! a futex the leader sleeps on, woken by the last arrival only) with its
//! sleeper count; the leader's failure
//! text; the leaders' group's key and instance when the host's ranks take
//! the leaders' release multicast directly ([`HostBarrier::publish_tap`]);
//! then one line per local rank: the number of the last barrier it
//! entered, and its process identity.
//!
//! **A barrier:** every rank writes its own arrival word; the leader waits
//! until all have arrived (then, in the hierarchical barrier, meets the
//! other hosts' leaders) and writes the release word. Waiting follows the
//! endpoint's wait policy: spin, then yield, then sleep on the futex; a
//! wake-up system call is made only when somebody sleeps. While it waits, a
//! rank checks every [`LIVENESS_CHECK`] that the ranks it waits for still
//! run: a dead one is named in [`BarrierError::LocalRankDead`]. A leader that
//! gives up writes why, and its followers return it as
//! [`BarrierError::LeaderGaveUp`].

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::time::{Duration, Instant};

use mcd::shm::{futex_wait, futex_wake, ProcessIdentity, SharedMapping};
use mcd::wait::WaitPhases;
use mcd::MacAddr;

use crate::transport::NodeId;
use crate::types::{BarrierError, PeerState};

/// How often a waiting rank checks that the ranks it waits for still run.
pub const LIVENESS_CHECK: Duration = Duration::from_millis(20);

/// The shortest a rank that takes the leaders' release multicast directly
/// sleeps on its rings before it looks at the leader's release in shared
/// memory (the multicast may have been lost).
pub const TAP_LOOK: Duration = Duration::from_millis(1);

/// Bytes per line: two cache lines.
const LINE: usize = 128;
const MAGIC: u64 = u64::from_le_bytes(*b"mcdhost2");
// Header (line 0).
const H_MAGIC: usize = 0;
const H_CREATOR_PID: usize = 8;
const H_SIZE: usize = 12;
const H_CREATOR_START: usize = 16;
const H_JOB: usize = 24;
const H_READY: usize = 28;
const H_ATTACHED: usize = 32;
// The release line.
const RELEASE: usize = LINE;
const RELEASE_SLEEPERS: usize = LINE + 4;
const FAILED: usize = LINE + 8;
// The gather line.
const GATHER: usize = 2 * LINE;
const GATHER_SLEEPERS: usize = 2 * LINE + 4;
// The failure text: its length, then its bytes in 64-bit words.
const REASON_LEN: usize = 3 * LINE;
const REASON: usize = 3 * LINE + 8;
const REASON_BYTES: usize = 2 * LINE - 8;
// The leaders' group, for a direct release: its key and instance, and
// whether they are published.
const TAP_KEY: usize = 5 * LINE;
const TAP_INSTANCE: usize = 5 * LINE + 8;
const TAP_PUBLISHED: usize = 5 * LINE + 16;
// One line per local rank.
const SLOTS: usize = 6 * LINE;
const S_ARRIVED: usize = 0;
const S_STATE: usize = 4;
const S_PID: usize = 8;
const S_START: usize = 16;
const SLOT_FREE: u32 = 0;
const SLOT_ATTACHED: u32 = 1;
const SLOT_LEFT: u32 = 2;

/// The release word's top bit flips when the leader gives up, so that a
/// rank about to sleep on it sees the change.
const FAILED_FLIP: u32 = 1 << 31;

fn segment_len(ranks: usize) -> usize {
    SLOTS + ranks * LINE
}

/// Whether barrier number `value` is `k` or later (serial arithmetic on 32 bits).
fn reached(value: u32, k: u32) -> bool {
    (value.wrapping_sub(k) as i32) >= 0
}

/// The segment of job `job_key`'s ranks on the host whose rail-0 MAC is
/// `mac` and whose leader holds `leader_port`, in `dir` (`/dev/shm`).
pub fn segment_path(dir: &Path, job_key: u32, mac: MacAddr, leader_port: u8) -> PathBuf {
    let mac: String = mac.0.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("mcd-host-{job_key:08x}-{mac}-{leader_port}"))
}

/// How the ranks of one host meet.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// The segment's file ([`segment_path`]).
    pub path: PathBuf,
    /// The job key (checked against the segment's).
    pub job_key: u32,
    /// The host's ranks, as node numbers of the job, leader first.
    pub members: Vec<NodeId>,
    /// This rank's place in `members`.
    pub me: usize,
    /// How long the leader waits for the others to attach, and they for the
    /// segment to appear.
    pub attach_timeout: Duration,
    /// How waits spin, yield and sleep.
    pub phases: WaitPhases,
}

/// A barrier among the ranks of one host (see the module docs).
#[derive(Debug)]
pub struct HostBarrier {
    map: SharedMapping,
    me: usize,
    members: Vec<NodeId>,
    /// The last barrier this rank entered (0: none).
    epoch: u32,
    phases: WaitPhases,
    /// Stale segments of dead jobs this rank replaced when it created its own.
    replaced_stale: usize,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> BarrierError {
    BarrierError::System(format!("{what} {}: {e}", path.display()))
}

impl HostBarrier {
    /// Creates (leader) or attaches to (the others) the host's segment.
    /// Collective over the host's ranks; returns once all are attached
    /// (leader) or this one is (others).
    pub fn join(config: HostConfig) -> Result<HostBarrier, BarrierError> {
        let HostConfig { path, job_key, members, me, attach_timeout, phases } = config;
        if me >= members.len() {
            return Err(BarrierError::Config(format!("local rank {me} of a host of {} ranks", members.len())));
        }
        let deadline = Instant::now() + attach_timeout;
        let identity = ProcessIdentity::current().map_err(|e| BarrierError::System(format!("reading this process's identity: {e}")))?;
        let len = segment_len(members.len());
        let (map, replaced_stale) = if me == 0 { create(&path, len, job_key, members.len(), identity)? } else { (attach(&path, len, deadline)?, 0) };
        let barrier = HostBarrier { map, me, members, epoch: 0, phases, replaced_stale };
        barrier.check_header(job_key, &path)?;
        barrier.claim_slot(identity, &path)?;
        if me == 0 {
            let waited = barrier.wait_attached(deadline);
            // Attached or not, nobody else may find this segment by its name.
            let _ = std::fs::remove_file(&path);
            waited?;
        }
        Ok(barrier)
    }

    fn check_header(&self, job_key: u32, path: &Path) -> Result<(), BarrierError> {
        let size = self.map.u32_at(H_SIZE).load(Acquire) as usize;
        let job = self.map.u32_at(H_JOB).load(Acquire);
        if size != self.members.len() || job != job_key {
            return Err(BarrierError::Config(format!(
                "{}: made for {size} local ranks of job {job:#010x}, not {} of job {job_key:#010x} (do the ranks agree on who shares this host?)",
                path.display(),
                self.members.len()
            )));
        }
        Ok(())
    }

    fn claim_slot(&self, identity: ProcessIdentity, path: &Path) -> Result<(), BarrierError> {
        let slot = self.slot(self.me);
        if let Err(state) = self.map.u32_at(slot + S_STATE).compare_exchange(SLOT_FREE, SLOT_ATTACHED, SeqCst, SeqCst) {
            let pid = self.map.u32_at(slot + S_PID).load(Acquire);
            return Err(BarrierError::Config(format!(
                "{}: local rank {} is taken already (state {state}, pid {pid}): two processes claim one rank",
                path.display(),
                self.me
            )));
        }
        self.map.u32_at(slot + S_PID).store(identity.pid, Release);
        self.map.u64_at(slot + S_START).store(identity.start, Release);
        self.map.u32_at(H_ATTACHED).fetch_add(1, SeqCst);
        Ok(())
    }

    fn wait_attached(&self, deadline: Instant) -> Result<(), BarrierError> {
        let start = Instant::now();
        loop {
            if self.map.u32_at(H_ATTACHED).load(Acquire) as usize == self.members.len() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let missing = (0..self.members.len())
                    .filter(|&i| self.map.u32_at(self.slot(i) + S_STATE).load(Acquire) == SLOT_FREE)
                    .map(|i| self.members[i])
                    .collect();
                return Err(BarrierError::JoinTimeout {
                    missing,
                    nodes: self.members.len(),
                    waited: start.elapsed(),
                    bad_tags: Vec::new(),
                    auth_mismatch: Vec::new(),
                    bad_version: 0,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn slot(&self, rank: usize) -> usize {
        SLOTS + rank * LINE
    }

    /// This rank's place among the host's ranks (0: the leader).
    pub fn local_rank(&self) -> usize {
        self.me
    }

    /// The host's ranks, as node numbers of the job, leader first.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// Whether this rank leads the host.
    pub fn is_leader(&self) -> bool {
        self.me == 0
    }

    /// Stale segments of crashed jobs replaced while creating this one.
    pub fn replaced_stale(&self) -> usize {
        self.replaced_stale
    }

    /// The barriers this rank has entered.
    pub fn entered(&self) -> u64 {
        u64::from(self.epoch)
    }

    /// The process of local rank `rank`, as it attached.
    fn identity(&self, rank: usize) -> ProcessIdentity {
        let slot = self.slot(rank);
        ProcessIdentity { pid: self.map.u32_at(slot + S_PID).load(Acquire), start: self.map.u64_at(slot + S_START).load(Acquire) }
    }

    /// Enters the next barrier: writes this rank's arrival (and wakes the
    /// leader if it sleeps). Returns the barrier's number.
    pub fn arrive(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        let k = self.epoch;
        self.map.u32_at(self.slot(self.me) + S_ARRIVED).store(k, SeqCst);
        if self.me != 0 {
            // Each of the others bumps the gather word once per barrier, so
            // it reads k × (ranks − 1) after the last arrival of barrier k:
            // only that one wakes the leader (one wake-up, not one each).
            let gather = self.map.u32_at(GATHER);
            let arrivals = gather.fetch_add(1, SeqCst).wrapping_add(1);
            let last = arrivals == k.wrapping_mul(self.members.len() as u32 - 1);
            if last && self.map.u32_at(GATHER_SLEEPERS).load(SeqCst) != 0 {
                // A failed wake leaves the leader to its liveness check.
                let _ = futex_wake(gather, 1);
            }
        }
        k
    }

    /// Leader: whether every rank has entered the current barrier.
    pub fn all_arrived(&self) -> bool {
        self.first_missing().is_none()
    }

    fn first_missing(&self) -> Option<usize> {
        (1..self.members.len()).find(|&i| !reached(self.map.u32_at(self.slot(i) + S_ARRIVED).load(SeqCst), self.epoch))
    }

    /// Leader: waits until every rank has entered the current barrier,
    /// failing if one of those it waits for dies (or at `deadline`).
    pub fn gather(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        let epoch = u64::from(self.epoch);
        let check = |b: &HostBarrier| -> Result<(), BarrierError> {
            for i in 1..b.members.len() {
                let slot = b.slot(i);
                if reached(b.map.u32_at(slot + S_ARRIVED).load(SeqCst), b.epoch) {
                    continue;
                }
                let identity = b.identity(i);
                if b.map.u32_at(slot + S_STATE).load(Acquire) == SLOT_LEFT || !identity.is_alive() {
                    return Err(BarrierError::LocalRankDead { epoch, local_rank: i, node: b.members[i], pid: identity.pid });
                }
            }
            Ok(())
        };
        let done = self.wait_on(GATHER, GATHER_SLEEPERS, deadline, &mut |b| Ok(b.all_arrived()), check, None)?;
        if done {
            Ok(())
        } else {
            Err(self.deadline_error(deadline, (1..self.members.len()).collect()))
        }
    }

    /// Leader: releases the current barrier (every rank has entered it).
    pub fn release(&mut self) {
        let word = self.map.u32_at(RELEASE);
        word.store(self.epoch, SeqCst);
        if self.map.u32_at(RELEASE_SLEEPERS).load(SeqCst) != 0 {
            // A failed wake leaves the sleepers to their liveness check.
            let _ = futex_wake(word, u32::MAX);
        }
    }

    /// Leader: gives up, telling every rank of the host why.
    pub fn fail(&mut self, reason: &str) {
        let bytes = reason.as_bytes();
        let len = bytes.len().min(REASON_BYTES);
        for (i, chunk) in bytes[..len].chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.map.u64_at(REASON + 8 * i).store(u64::from_le_bytes(word), Relaxed);
        }
        self.map.u32_at(REASON_LEN).store(len as u32, Release);
        self.map.u32_at(FAILED).store(1, SeqCst);
        let word = self.map.u32_at(RELEASE);
        word.fetch_xor(FAILED_FLIP, SeqCst);
        let _ = futex_wake(word, u32::MAX);
    }

    fn failure(&self) -> Option<BarrierError> {
        if self.map.u32_at(FAILED).load(SeqCst) == 0 {
            return None;
        }
        let len = (self.map.u32_at(REASON_LEN).load(Acquire) as usize).min(REASON_BYTES);
        let mut bytes: Vec<u8> = (0..len.div_ceil(8)).flat_map(|i| self.map.u64_at(REASON + 8 * i).load(Relaxed).to_le_bytes()).collect();
        bytes.truncate(len);
        let reason = String::from_utf8_lossy(&bytes).into_owned();
        Some(BarrierError::LeaderGaveUp { epoch: u64::from(self.epoch), leader: self.members[0], reason })
    }

    /// Not the leader: whether the current barrier is released (an error if
    /// the leader gave up).
    pub fn released(&self) -> Result<bool, BarrierError> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        Ok(reached(self.map.u32_at(RELEASE).load(SeqCst), self.epoch))
    }

    /// Leader: tells the host's ranks the key and instance of the leaders'
    /// group, whose release multicast they may take directly
    /// ([`crate::HostRelease::Multicast`]).
    pub fn publish_tap(&mut self, key: u64, instance: u64) {
        self.map.u64_at(TAP_KEY).store(key, Relaxed);
        self.map.u64_at(TAP_INSTANCE).store(instance, Relaxed);
        self.map.u32_at(TAP_PUBLISHED).store(1, Release);
    }

    /// The leaders' group's key and instance, once the leader published them.
    pub fn tap(&self) -> Option<(u64, u64)> {
        (self.map.u32_at(TAP_PUBLISHED).load(Acquire) == 1)
            .then(|| (self.map.u64_at(TAP_KEY).load(Relaxed), self.map.u64_at(TAP_INSTANCE).load(Relaxed)))
    }

    /// Not the leader: waits for the release of the current barrier,
    /// failing if the leader gives up or dies (or at `deadline`).
    pub fn wait_release(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.wait_release_or(deadline, &mut || Ok(false), None)
    }

    /// Not the leader: as [`wait_release`](Self::wait_release), but also
    /// complete when `heard` says the release arrived another way (the
    /// leaders' multicast), sleeping with `sleep` (on the rings that bring
    /// it) rather than on the futex. The leader's release in shared memory
    /// still counts: it is how a rank that lost the multicast recovers,
    /// looking at it whenever it wakes, and it wakes at the latest after
    /// as long again as it has waited ([`TAP_LOOK`] at least), so a lost
    /// release costs at most about what the barrier had taken already.
    pub fn wait_release_heard(
        &mut self,
        deadline: Option<Instant>,
        heard: &mut dyn FnMut() -> Result<bool, BarrierError>,
        sleep: &mut dyn FnMut(Duration) -> Result<(), BarrierError>,
    ) -> Result<(), BarrierError> {
        self.wait_release_or(deadline, heard, Some(sleep))
    }

    fn wait_release_or(
        &mut self,
        deadline: Option<Instant>,
        heard: &mut dyn FnMut() -> Result<bool, BarrierError>,
        sleep: Option<&mut dyn FnMut(Duration) -> Result<(), BarrierError>>,
    ) -> Result<(), BarrierError> {
        let epoch = u64::from(self.epoch);
        let check = |b: &HostBarrier| -> Result<(), BarrierError> {
            let leader = b.identity(0);
            if b.map.u32_at(b.slot(0) + S_STATE).load(Acquire) == SLOT_LEFT || !leader.is_alive() {
                // It may have released and ended since the last look.
                if !b.released()? {
                    return Err(BarrierError::LocalRankDead { epoch, local_rank: 0, node: b.members[0], pid: leader.pid });
                }
            }
            Ok(())
        };
        // The multicast first: it is the faster way, and counted.
        let mut done = |b: &HostBarrier| -> Result<bool, BarrierError> { Ok(heard()? || b.released()?) };
        if self.wait_on(RELEASE, RELEASE_SLEEPERS, deadline, &mut done, check, sleep)? {
            Ok(())
        } else {
            Err(self.deadline_error(deadline, vec![0]))
        }
    }

    /// One whole barrier among the host's ranks (no other hosts).
    pub fn wait(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.arrive();
        if self.me == 0 {
            if let Err(e) = self.gather(deadline) {
                self.fail(&e.to_string());
                return Err(e);
            }
            self.release();
            Ok(())
        } else {
            self.wait_release(deadline)
        }
    }

    fn deadline_error(&self, deadline: Option<Instant>, ranks: Vec<usize>) -> BarrierError {
        let waiting_for = ranks
            .into_iter()
            .filter(|&i| i == 0 || !reached(self.map.u32_at(self.slot(i) + S_ARRIVED).load(SeqCst), self.epoch))
            .map(|i| {
                let at = u64::from(self.map.u32_at(self.slot(i) + S_ARRIVED).load(SeqCst));
                (self.members[i], PeerState::Alive { at, in_barrier: i == 0, heard: Duration::ZERO })
            })
            .collect();
        let waited = deadline.map_or(Duration::ZERO, |d| d.elapsed());
        BarrierError::Deadline { epoch: u64::from(self.epoch), waited, waiting_for }
    }

    /// Waits until `done`: spins, yields, then sleeps on the futex word at
    /// `word` (announcing itself in the count at `sleepers`), or with
    /// `sleep` if given (for as long as it has waited, [`TAP_LOOK`] at
    /// least), running `alive` every [`LIVENESS_CHECK`]. False at the
    /// deadline.
    fn wait_on(
        &self,
        word: usize,
        sleepers: usize,
        deadline: Option<Instant>,
        done: &mut dyn FnMut(&HostBarrier) -> Result<bool, BarrierError>,
        alive: impl Fn(&HostBarrier) -> Result<(), BarrierError>,
        mut sleep: Option<&mut dyn FnMut(Duration) -> Result<(), BarrierError>>,
    ) -> Result<bool, BarrierError> {
        let start = Instant::now();
        let mut next_check = start + LIVENESS_CHECK;
        let futex = self.map.u32_at(word);
        let sleeping = self.map.u32_at(sleepers);
        loop {
            if done(self)? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= next_check {
                alive(self)?;
                next_check = now + LIVENESS_CHECK;
            }
            if deadline.is_some_and(|d| now >= d) {
                return Ok(false);
            }
            let waited = now - start;
            if waited < self.phases.spin {
                std::hint::spin_loop();
            } else if waited < self.phases.spin.saturating_add(self.phases.yield_for) {
                std::thread::yield_now();
            } else if let Some(sleep) = sleep.as_mut() {
                let mut nap = waited.max(TAP_LOOK).min(next_check.saturating_duration_since(now));
                if let Some(d) = deadline {
                    nap = nap.min(d.saturating_duration_since(now));
                }
                sleep(nap.max(Duration::from_micros(1)))?;
            } else {
                sleeping.fetch_add(1, SeqCst);
                let seen = futex.load(SeqCst);
                let result = match done(self) {
                    Ok(false) => {
                        let mut sleep = next_check.saturating_duration_since(now);
                        if let Some(d) = deadline {
                            sleep = sleep.min(d.saturating_duration_since(now));
                        }
                        futex_wait(futex, seen, Some(sleep.max(Duration::from_micros(1))))
                            .map_err(|e| BarrierError::System(format!("waiting on the host's shared memory: {e}")))
                    }
                    Ok(true) => Ok(()),
                    Err(e) => Err(e),
                };
                sleeping.fetch_sub(1, SeqCst);
                result?;
            }
        }
    }
}

impl Drop for HostBarrier {
    fn drop(&mut self) {
        self.map.u32_at(self.slot(self.me) + S_STATE).store(SLOT_LEFT, SeqCst);
        // Whoever waits for this rank sees it gone at its next look.
        let _ = futex_wake(self.map.u32_at(GATHER), u32::MAX);
    }
}

/// Leader: creates the segment, replacing a stale one of a dead creator.
fn create(path: &Path, len: usize, job_key: u32, size: usize, me: ProcessIdentity) -> Result<(SharedMapping, usize), BarrierError> {
    let mut replaced = 0;
    loop {
        match SharedMapping::create_new(path, len) {
            Ok(map) => {
                map.u32_at(H_SIZE).store(size as u32, Relaxed);
                map.u32_at(H_JOB).store(job_key, Relaxed);
                map.u32_at(H_CREATOR_PID).store(me.pid, Relaxed);
                map.u64_at(H_CREATOR_START).store(me.start, Relaxed);
                map.u64_at(H_MAGIC).store(MAGIC, Relaxed);
                map.u32_at(H_READY).store(1, Release);
                return Ok((map, replaced));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && replaced < 3 => {
                if let Some(holder) = live_creator(path) {
                    return Err(BarrierError::Config(format!(
                        "{} is in use by the live process {} (another job with the same job key and leader port on this host?)",
                        path.display(),
                        holder.pid
                    )));
                }
                // Its creator is dead: a crashed job's. Never join it.
                match std::fs::remove_file(path) {
                    Ok(()) => replaced += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error("removing the stale segment", path, e)),
                }
            }
            Err(e) => return Err(io_error("creating the host's shared memory", path, e)),
        }
    }
}

/// The creator of the segment at `path`, if it still runs.
fn live_creator(path: &Path) -> Option<ProcessIdentity> {
    // A file too short to hold a header was left half made: stale.
    let map = SharedMapping::open_existing(path, LINE).ok()?;
    let creator = ProcessIdentity { pid: map.u32_at(H_CREATOR_PID).load(Acquire), start: map.u64_at(H_CREATOR_START).load(Acquire) };
    (creator.pid != 0 && creator.is_alive()).then_some(creator)
}

/// Not the leader: maps the segment once the leader has made it (a stale
/// one of a dead creator is left for the leader to replace).
fn attach(path: &Path, len: usize, deadline: Instant) -> Result<SharedMapping, BarrierError> {
    loop {
        let last = match SharedMapping::open_existing(path, len) {
            Ok(map) => {
                let ready = map.u32_at(H_READY).load(Acquire) == 1 && map.u64_at(H_MAGIC).load(Acquire) == MAGIC;
                let creator = ProcessIdentity { pid: map.u32_at(H_CREATOR_PID).load(Acquire), start: map.u64_at(H_CREATOR_START).load(Acquire) };
                if ready && creator.is_alive() {
                    return Ok(map);
                }
                if ready {
                    format!("a stale segment of the dead process {}", creator.pid)
                } else {
                    "not ready".into()
                }
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(BarrierError::Config(format!(
                "the host's shared memory {} did not appear in time ({last}): is local rank 0 running?",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{check, Timeline};

    fn config(name: &str, ranks: usize, me: usize) -> HostConfig {
        HostConfig {
            path: std::env::temp_dir().join(format!("mcd-host-test-{name}-{}", std::process::id())),
            job_key: 0x1234,
            members: (0..ranks).map(|i| 10 + i).collect(),
            me,
            attach_timeout: Duration::from_secs(10),
            phases: mcd::WaitPolicy::Block.phases(ranks, 2),
        }
    }

    /// `ranks` threads run `barriers` barriers under `policy`; every
    /// barrier's enter and leave times go to the safety check.
    fn run(name: &str, ranks: usize, barriers: usize, policy: mcd::WaitPolicy) {
        let threads: Vec<_> = (0..ranks)
            .map(|me| {
                let mut config = config(name, ranks, me);
                config.phases = policy.phases(ranks, mcd::host::online_cpus());
                std::thread::spawn(move || {
                    let mut b = HostBarrier::join(config).unwrap();
                    let mut timeline = Timeline::default();
                    for _ in 0..barriers {
                        let entered = Instant::now();
                        b.wait(None).unwrap();
                        timeline.record(entered, Instant::now());
                    }
                    timeline
                })
            })
            .collect();
        let timelines: Vec<Timeline> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let (violations, checked) = check(&timelines);
        assert_eq!(checked, barriers);
        assert!(violations.is_empty(), "{violations:?}");
        assert!(!config(name, ranks, 0).path.exists(), "the name is unlinked once all attached");
    }

    #[test]
    fn ranks_in_threads_never_leave_before_all_entered_with_every_wait_policy() {
        run("block", 5, 300, mcd::WaitPolicy::Block);
        run("yield", 4, 300, mcd::WaitPolicy::SpinThenYield { spin: Duration::from_micros(5) });
        run("adaptive", 3, 300, mcd::WaitPolicy::Adaptive);
        run("one", 1, 10, mcd::WaitPolicy::Block);
    }

    /// The direct release: ranks 1 and 2 wait on a "multicast" (a flag
    /// per barrier, standing in for the frame): rank 1 always hears it,
    /// rank 2 never does (every frame lost) and must still leave on the
    /// leader's release in shared memory, on time, and never early.
    #[test]
    fn a_heard_release_completes_the_wait_and_a_lost_one_is_recovered_from_the_leader() {
        use std::sync::atomic::AtomicU32;
        use std::sync::Arc;
        let name = "tap";
        let heard_up_to = Arc::new(AtomicU32::new(0));
        let barriers = 40u32;
        let threads: Vec<_> = (0..3)
            .map(|me| {
                let heard_up_to = heard_up_to.clone();
                std::thread::spawn(move || {
                    let mut b = HostBarrier::join(config(name, 3, me)).unwrap();
                    if me == 0 {
                        b.publish_tap(0xfeed, 0xbeef);
                    }
                    let mut timeline = Timeline::default();
                    let mut slowest = Duration::ZERO;
                    for _ in 0..barriers {
                        let entered = Instant::now();
                        let k = b.arrive();
                        if me == 0 {
                            b.gather(None).unwrap();
                            // "Multicast": the others may go; then the shm release.
                            heard_up_to.store(k, SeqCst);
                            std::thread::sleep(Duration::from_micros(200));
                            b.release();
                        } else {
                            while b.tap().is_none() {
                                std::thread::yield_now();
                            }
                            assert_eq!(b.tap(), Some((0xfeed, 0xbeef)));
                            let hears = me == 1;
                            let released = Instant::now();
                            b.wait_release_heard(None, &mut || Ok(hears && reached(heard_up_to.load(SeqCst), k)), &mut |nap| {
                                std::thread::sleep(nap.min(Duration::from_micros(50)));
                                Ok(())
                            })
                            .unwrap();
                            slowest = slowest.max(released.elapsed());
                        }
                        timeline.record(entered, Instant::now());
                    }
                    (timeline, slowest)
                })
            })
            .collect();
        let (timelines, slowest): (Vec<Timeline>, Vec<Duration>) = threads.into_iter().map(|t| t.join().unwrap()).unzip();
        let (violations, checked) = check(&timelines);
        assert_eq!(checked, barriers as usize);
        assert!(violations.is_empty(), "{violations:?}");
        // The rank that lost every multicast waited for the leader's release
        // in shared memory, which its naps (50 µs here) see at once.
        assert!(slowest[2] < Duration::from_secs(1), "the lost releases took {:?}", slowest[2]);
    }

    #[test]
    fn serial_numbers_wrap() {
        assert!(reached(0, u32::MAX));
        assert!(reached(5, 5) && !reached(4, 5));
    }

    #[test]
    fn a_dead_local_rank_is_named_and_the_leader_tells_the_others() {
        // Rank 2 is a child process that never arrives: the slot is claimed
        // in its name, then it is killed.
        let name = "dead";
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let leader = std::thread::spawn(move || {
            let mut b = HostBarrier::join(config(name, 3, 0)).unwrap();
            b.wait(None).unwrap_err()
        });
        let follower = std::thread::spawn(move || {
            let mut b = HostBarrier::join(config(name, 3, 1)).unwrap();
            b.wait(None).unwrap_err()
        });
        let path = config(name, 3, 0).path;
        let map = attach(&path, segment_len(3), Instant::now() + Duration::from_secs(10)).unwrap();
        let slot = SLOTS + 2 * LINE;
        let start = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        let start: u64 = start.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().parse().unwrap();
        map.u32_at(slot + S_STATE).store(SLOT_ATTACHED, SeqCst);
        map.u32_at(slot + S_PID).store(child.id(), SeqCst);
        map.u64_at(slot + S_START).store(start, SeqCst);
        map.u32_at(H_ATTACHED).fetch_add(1, SeqCst);
        let pid = child.id();
        child.kill().unwrap();
        child.wait().unwrap();
        let e = leader.join().unwrap();
        assert!(matches!(e, BarrierError::LocalRankDead { local_rank: 2, node: 12, pid: p, .. } if p == pid), "{e}");
        let e = follower.join().unwrap();
        match e {
            BarrierError::LeaderGaveUp { leader: 10, reason, .. } => assert!(reason.contains("local rank 2"), "{reason}"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_stale_segment_of_a_dead_creator_is_replaced_never_joined() {
        let name = "stale";
        let path = config(name, 2, 0).path;
        // A crashed job's segment: ready, its creator a reaped child.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        {
            let _ = std::fs::remove_file(&path);
            let stale = SharedMapping::create_new(&path, segment_len(2)).unwrap();
            stale.u32_at(H_SIZE).store(2, SeqCst);
            stale.u32_at(H_JOB).store(0x1234, SeqCst);
            stale.u32_at(H_CREATOR_PID).store(pid, SeqCst);
            stale.u64_at(H_MAGIC).store(MAGIC, SeqCst);
            stale.u32_at(H_READY).store(1, SeqCst);
            stale.u32_at(H_ATTACHED).store(2, SeqCst);
        }
        // The follower starts first and must not take the stale one.
        let follower = std::thread::spawn(move || {
            let mut b = HostBarrier::join(config(name, 2, 1)).unwrap();
            b.wait(None).unwrap();
            b.entered()
        });
        std::thread::sleep(Duration::from_millis(20));
        let mut leader = HostBarrier::join(config(name, 2, 0)).unwrap();
        assert_eq!(leader.replaced_stale(), 1);
        leader.wait(None).unwrap();
        assert_eq!(follower.join().unwrap(), 1);
        assert!(!path.exists());
    }

    #[test]
    fn a_live_creators_segment_is_refused_and_mismatched_sizes_are_an_error() {
        let name = "live";
        let a = config(name, 2, 0);
        let _ = std::fs::remove_file(&a.path);
        let (held, _) = create(&a.path, segment_len(2), a.job_key, 2, ProcessIdentity::current().unwrap()).unwrap();
        let e = HostBarrier::join(config(name, 2, 0)).unwrap_err().to_string();
        assert!(e.contains("in use by the live process"), "{e}");
        let mut wrong = config(name, 3, 2);
        wrong.attach_timeout = Duration::from_millis(100);
        let e = HostBarrier::join(wrong).unwrap_err().to_string();
        assert!(e.contains("did not appear in time") || e.contains("made for 2 local ranks"), "{e}");
        drop(held);
        std::fs::remove_file(&a.path).unwrap();
    }
}
