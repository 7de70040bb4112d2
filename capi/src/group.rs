//! A group ([`Group`]): a barrier over some of the job's ranks on the
//! job's endpoint, prepared, then joined, then closed.

use std::ffi::{CStr, CString};

use barriers::policy::HostShape;
use barriers::{Barrier, Collective, GroupTransport, JobPolicy, PreparedBarrier, SharedEndpoint, Transport};

use crate::collective::Collectives;
use crate::error::argument;
use crate::job::Closing;
use crate::stats::{mcd_stats, stats_of, with_collectives};
use crate::{CError, Communicator, Job};

/// on the job's endpoint (`mcd_group` in C): prepared (its local resources
/// in place), then joined (met its members).
pub struct Group {
    state: GroupState,
    shared: SharedEndpoint,
    closing: Closing,
    algorithm: CString,
    rank: usize,
    size: usize,
    /// The group's collectives: their barrier joined with the group's
    /// ([`Group::join`]).
    collectives: Collectives,
    /// Their barrier, prepared with the group's and joined with it
    /// ([`Group::join`]), until then.
    collectives_prepared: Option<Box<PreparedBarrier<GroupTransport>>>,
    /// The job's settings (for `mcd_why`).
    policy: JobPolicy,
    rails: usize,
    host: HostShape,
}

#[allow(clippy::large_enum_variant)] // one per group, never moved on a hot path
enum GroupState {
    Prepared(Box<PreparedBarrier<GroupTransport>>),
    Joined(Barrier<GroupTransport>),
    /// Between the two, or after a failed join.
    Gone,
}

impl Group {
    /// This process's rank in the group.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the group.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Meets the group's other members (collective over them) and starts
    /// its progress agent, and with the same join the barrier of its
    /// collectives (on an instance derived from the group's); a no-op once
    /// joined.
    ///
    /// The collectives' barrier is joined here, where every member is,
    /// and not at the group's first collective call (review rev31,
    /// finding 2): a join waits for every member, up to `MCD_JOIN_TIMEOUT`,
    /// so a first nonblocking collective blocked until every member had
    /// started its own (MPI: a start is local; a legal program whose peer
    /// first waited for this rank's progress aborted), and a member more
    /// than the timeout late to its first collective (a broadcast of what
    /// its root read) failed the others' calls. Joined, its agent answers
    /// for this member however late it calls, as the group's does.
    pub fn join(&mut self) -> Result<(), CError> {
        match std::mem::replace(&mut self.state, GroupState::Gone) {
            GroupState::Prepared(prepared) => {
                // One join for both: the collectives' barrier runs an
                // instance derived from the one the group's join agrees
                // (`PreparedBarrier::join_with`), so creating a
                // communicator costs one join's frames and time.
                match self.collectives_prepared.take() {
                    Some(collectives) => {
                        let (group, collectives) = prepared.join_with(*collectives)?;
                        self.state = GroupState::Joined(group);
                        self.collectives.barrier = Some(collectives);
                    }
                    None => self.state = GroupState::Joined(prepared.join()?),
                }
                Ok(())
            }
            joined @ GroupState::Joined(_) => {
                self.state = joined;
                Ok(())
            }
            GroupState::Gone => Err(argument("the group's join failed before: free it")),
        }
    }

    /// The barrier, once joined.
    pub fn barrier(&mut self) -> Result<&mut Barrier<GroupTransport>, CError> {
        match &mut self.state {
            GroupState::Joined(barrier) => Ok(barrier),
            GroupState::Prepared(_) => Err(argument("the group is prepared but not joined: call mcd_group_join first")),
            GroupState::Gone => Err(argument("the group's join failed: free it")),
        }
    }

    /// The counters (the endpoint's are the job's).
    pub fn stats(&mut self) -> Result<mcd_stats, CError> {
        let shared = self.shared.clone();
        let barrier = self.barrier()?.stats();
        let collectives = self.collectives.barrier.as_ref().map(|c| c.stats());
        stats_of(with_collectives(barrier, collectives), &shared)
    }

    /// Ends this node's use of the group without waiting: enters its closing
    /// barrier and hands it to the job, which finishes it once it is complete
    /// (its agent answers the members meanwhile), at the latest in
    /// [`Job::finish`]. Collective over the group, but no member waits here
    /// for another, so members may close their groups in any order. A group
    /// never joined is just dropped.
    pub fn close(mut self) -> Result<(), CError> {
        let closing = self.closing.clone();
        // The collectives' barrier closes beside the group's (dropped
        // unclosed if this rank never called a collective on it: see
        // `Collectives::closing`); a barrier that cannot close (one still
        // in progress) is dropped, and the other still closes.
        let mut barriers: Vec<Barrier<GroupTransport>> = self.collectives.closing().into_iter().collect();
        if let GroupState::Joined(barrier) = self.state {
            barriers.push(barrier);
        }
        let mut result = Ok(());
        for mut barrier in barriers {
            match barrier.close() {
                Ok(()) => closing.add(barrier),
                Err(e) => result = result.and(Err(e.into())),
            }
        }
        closing.reap();
        result
    }

    /// The group's collectives, once joined (their barrier, one of its
    /// own over the members as the job's, prepared with the group on an
    /// instance keyed by the group's key, so members may meet it in any
    /// order across their groups, and joined with it: [`Group::join`]).
    fn collectives(&mut self) -> Result<&mut Collectives, CError> {
        if !matches!(self.state, GroupState::Joined(_)) {
            return Err(argument("the group is not joined: call mcd_group_join first"));
        }
        Ok(&mut self.collectives)
    }
}

impl Communicator for &mut Group {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn algorithm(&self) -> &CStr {
        &self.algorithm
    }

    fn stats(&mut self) -> Result<mcd_stats, CError> {
        Group::stats(self)
    }

    fn wait(&mut self) -> Result<(), CError> {
        Ok(self.barrier()?.wait()?)
    }

    fn enter(&mut self) -> Result<(), CError> {
        Ok(self.barrier()?.enter()?)
    }

    fn test(&mut self) -> Result<bool, CError> {
        Ok(self.barrier()?.test()?)
    }

    fn collective(&mut self, call: Collective, input: Option<&[u8]>, output: Option<&mut [u8]>) -> Result<(), CError> {
        self.collectives()?.run(call, input, output)
    }

    fn start(&mut self, call: Collective, input: &[u8]) -> Result<barriers::Request<GroupTransport>, CError> {
        Ok(self.collectives()?.barrier()?.start(call, input)?)
    }

    fn why(&self) -> String {
        let (policy, size, rails, host) = (&self.policy, self.size, self.rails, self.host);
        format!("{}; {}", crate::why::barrier(policy, size, rails, host), crate::why::collectives(policy, size, rails, host))
    }
}

impl Job {
    /// A barrier over the job's ranks `ranks` (this one among them), numbered
    /// in that order, on the job's endpoint: no discovery. Collective over
    /// those ranks only; ranks that share several groups must create them in
    /// the same order. [`prepare`](Self::prepare) then [`Group::join`].
    pub fn group(&self, ranks: &[usize]) -> Result<Group, CError> {
        let mut group = self.prepare(ranks, None)?;
        group.join()?;
        Ok(group)
    }

    /// The local half of [`group`](Self::group): the group's resources
    /// (routing, wake-ups, the barrier's state), no communication, so a
    /// caller can learn that every member prepared before any waits in
    /// [`Group::join`]. `key`: a number the members agreed on for this group
    /// (unique among the live groups of these ranks), letting them create
    /// their groups in any order, from several threads; `None`: keyed by
    /// creation order, as `group`. Also finishes groups closed earlier whose
    /// closing barrier is complete.
    pub fn prepare(&self, ranks: &[usize], key: Option<u64>) -> Result<Group, CError> {
        if ranks.is_empty() {
            return Err(argument("a group needs at least one rank"));
        }
        self.closing.reap();
        let transport = match key {
            Some(key) => self.shared.group_with_key(ranks, key),
            None => self.shared.group(ranks),
        }
        .map_err(|e| argument(e.to_string()))?;
        let rank = transport.node();
        let group_key = transport.key();
        let barrier_config = self.policy.barrier_config(ranks.len(), self.rails, self.host);
        let algorithm = CString::new(barrier_config.algorithm.to_string()).expect("algorithm names have no NUL");
        let prepared = PreparedBarrier::new(transport, barrier_config)?;
        let collectives = prepare_collectives(&self.shared, ranks, group_key, &self.policy, self.rails, self.host)?;
        Ok(Group {
            state: GroupState::Prepared(Box::new(prepared)),
            shared: self.shared.clone(),
            closing: self.closing.clone(),
            algorithm,
            rank,
            size: ranks.len(),
            collectives: Collectives::default(),
            collectives_prepared: Some(Box::new(collectives)),
            policy: self.policy.clone(),
            rails: self.rails,
            host: self.host,
        })
    }
}

/// The barrier of the collectives of the group of `members` (job ranks)
/// keyed `key`, prepared (no communication).
fn prepare_collectives(
    shared: &SharedEndpoint,
    members: &[usize],
    key: u64,
    policy: &JobPolicy,
    rails: usize,
    host: HostShape,
) -> Result<PreparedBarrier<GroupTransport>, CError> {
    let transport = shared.group_with_key(members, key ^ COLLECTIVES_KEY)?;
    let config = policy.collective_config(members.len(), rails, host);
    Ok(PreparedBarrier::new(transport, config)?)
}

/// Mixed into a group's key for its collectives' instance.
const COLLECTIVES_KEY: u64 = 0x636f_6c6c_6563_7469;
