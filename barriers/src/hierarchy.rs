//! The host-aware hierarchical barrier: the ranks of each host meet in
//! shared memory ([`HostBarrier`]), the hosts' leaders run an ordinary
//! [`Barrier`] among themselves on the network, and each leader releases its
//! host through shared memory. Only one process per host goes on the wire,
//! so a multicast release is copied into one receive ring per host, not into
//! every rank's, and the host's ranks do not spin against each other on
//! their rings.
//!
//! The leaders' barrier keeps all of [`Barrier`]'s behaviour: loss recovery,
//! failure for silent hosts only, and its progress agent, which answers the
//! other leaders' NACKs while the leader's application computes (or waits
//! for its host's slow ranks). A leader that fails (a remote host silent, a
//! local rank dead) tells its host's ranks why, and they fail with
//! [`BarrierError::LeaderGaveUp`]; node numbers in every error are the job's.
//!
//! **The release** reaches a host's other ranks one of two ways
//! ([`HostRelease`]): through shared memory, from their leader once it has
//! the leaders' release (the default), or directly: every local rank
//! listens to the leaders' multicast group ([`mcd::GroupId::HOST_LEADERS`])
//! on its own endpoint ([`SharedEndpoint::listen`]) and leaves on the
//! release multicast of the leaders' root, without waiting for its leader
//! to wake and pass it on. That is as safe: the root releases only once
//! every leader arrived, and a leader arrives only once its host has. A
//! local rank that loses the multicast recovers from its leader, who has
//! recovered it among the leaders (NACKing the root) and released the host
//! in shared memory as always: the local rank looks there whenever it
//! wakes ([`HostBarrier::wait_release_heard`]). The direct release needs
//! an algorithm whose release is one multicast of leader 0 (a tree with
//! multicast release, concurrent); with any other, the host is released
//! through shared memory.
//!
//! A split-phase barrier ([`enter`](HierarchicalBarrier::enter) /
//! [`test`](HierarchicalBarrier::test)) progresses when the leader calls in:
//! its host's gather is not carried on by an agent in the background.

use std::time::{Duration, Instant};

use mcd::wait::WaitPhases;

use crate::barrier::Barrier;
use crate::host_barrier::{segment_path, HostBarrier, HostConfig};
use crate::mcd_shared::{GroupListener, GroupTransport, SharedEndpoint};
use crate::plan::{self, HostRelease};
use crate::policy::HostSettings;
use crate::transport::{MsgKind, NodeId, Transport};
use crate::types::{BarrierConfig, BarrierError, BarrierStats, PeerState};

/// A local rank's ear on the leaders' release multicast.
struct ReleaseTap {
    shared: SharedEndpoint,
    /// Listening once the leader has published the leaders' group.
    listener: Option<(GroupListener, u64)>,
    /// The leaders' root (node number of the job).
    root: NodeId,
    /// The leaders' first barrier number.
    first_epoch: u64,
    /// Releases heard on the multicast.
    heard: std::cell::Cell<u64>,
}

impl ReleaseTap {
    /// Starts listening once the leader has published its group.
    fn listening(&mut self, host: &HostBarrier) -> Result<bool, BarrierError> {
        if self.listener.is_none() {
            if let Some((key, instance)) = host.tap() {
                let listener = self.shared.listen(key, mcd::GroupId::HOST_LEADERS).map_err(BarrierError::from)?;
                self.listener = Some((listener, instance));
            }
        }
        Ok(self.listener.is_some())
    }

    /// Whether the release of the host's barrier `k` has been heard.
    fn heard(&self, k: u32) -> Result<bool, BarrierError> {
        let Some((listener, instance)) = &self.listener else { return Ok(false) };
        let wire = (self.first_epoch as u32).wrapping_add(k.wrapping_sub(1));
        while let Some((from, msg)) = listener.try_recv().map_err(BarrierError::from)? {
            let release = matches!(msg.kind, MsgKind::Data | MsgKind::Answer) && msg.tag == plan::tag::RELEASE;
            if release && from == self.root && msg.instance == *instance && (msg.epoch.wrapping_sub(wire) as i32) >= 0 {
                self.heard.set(self.heard.get() + 1);
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Where a barrier of this node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No barrier entered.
    Idle,
    /// Entered: the leader gathers its host (the others wait for release).
    Gathering,
    /// The leader has gathered its host and is in the leaders' barrier.
    Meeting,
}

/// A barrier over all of a job's nodes that meets each host's ranks in
/// shared memory first (see the module docs). `T` is the leaders'
/// transport: a [`GroupTransport`] over the leaders on the job's endpoint
/// ([`HierarchicalBarrier::on_endpoint`]), or any other.
pub struct HierarchicalBarrier<T: Transport + Send + 'static> {
    host: HostBarrier,
    /// The leaders' barrier: only on leaders, and only with several hosts.
    outer: Option<Barrier<T>>,
    /// The hosts' leaders (node numbers of the job), in host order.
    leaders: Vec<NodeId>,
    node: NodeId,
    nodes: usize,
    hosts: usize,
    config: BarrierConfig,
    phase: Phase,
    completed: u64,
    /// How the host is released.
    release: HostRelease,
    /// A local rank's ear on the leaders' release multicast (direct release).
    tap: Option<ReleaseTap>,
}

impl<T: Transport + Send + 'static> std::fmt::Debug for HierarchicalBarrier<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HierarchicalBarrier")
            .field("node", &self.node)
            .field("hosts", &self.hosts)
            .field("local_rank", &self.host.local_rank())
            .field("algorithm", &self.config.algorithm)
            .finish()
    }
}

impl HierarchicalBarrier<GroupTransport> {
    /// The hierarchical barrier over every node of `shared`'s job: hosts from
    /// the node list ([`mcd::NodeList::hosts`]: nodes with one rail-0 MAC),
    /// the host's segment named by job key, MAC and leader port in
    /// `/dev/shm`, and the leaders' barrier with `config` on a group of the
    /// endpoint whose multicasts go to [`mcd::GroupId::HOST_LEADERS`] (so
    /// they land in the leaders' rings, not in every rank's). Collective over all nodes; `config`'s algorithm is for as
    /// many nodes as there are hosts.
    ///
    /// The host's release is `host`'s, or without one [`HostRelease::auto`]'s
    /// choice (through shared memory whatever `host` says when the leaders'
    /// algorithm cannot multicast its release: [`HostRelease::can_multicast`]);
    /// the host's ranks other than its leader wait as `host` says, or as the
    /// endpoint does. [`HostSettings::from_env`] reads it from the
    /// environment.
    pub fn on_endpoint(shared: &SharedEndpoint, config: BarrierConfig, host: HostSettings) -> Result<Self, BarrierError> {
        let release = match host.release {
            Some(r) => r,
            None => {
                let (policy, local) = shared.with_endpoint(|e| (e.wait_policy(), e.local_processes()));
                HostRelease::auto(policy, local, mcd::host::online_cpus())
            }
        };
        Self::on_endpoint_releasing(shared, config, release, host.wait)
    }

    /// [`on_endpoint`](Self::on_endpoint) with the release chosen.
    fn on_endpoint_releasing(
        shared: &SharedEndpoint,
        config: BarrierConfig,
        release: HostRelease,
        host_wait: Option<mcd::WaitPolicy>,
    ) -> Result<Self, BarrierError> {
        let (nodes, job_key, policy, local_hint) = shared.with_endpoint(|e| (e.nodes().clone(), e.job_key(), e.wait_policy(), e.local_processes()));
        let me = shared.node();
        let hosts = nodes.hosts();
        let members = hosts.iter().find(|h| h.contains(&me)).cloned().expect("every node is on a host");
        let leader = nodes.get(members[0]).expect("the leader is a node");
        let mac = leader.macs.first().copied().unwrap_or_default();
        // The leader waits as the endpoint does; the others as MCD_HOST_WAIT
        // says, if it does.
        let policy = match host_wait {
            Some(local) if members[0] != me => local,
            _ => policy,
        };
        let host_config = HostConfig {
            path: segment_path(mcd::shm::SHM_DIR.as_ref(), job_key, mac, leader.port),
            job_key,
            me: members.iter().position(|&m| m == me).expect("a member of its host"),
            phases: host_phases(policy, members.len().max(local_hint), mcd::host::online_cpus()),
            members,
            attach_timeout: config.join_timeout,
        };
        let leaders: Vec<NodeId> = hosts.iter().map(|h| h[0]).collect();
        let on_wire = leaders.clone();
        let release = if HostRelease::can_multicast(config.algorithm) && leaders.len() > 1 { release } else { HostRelease::SharedMemory };
        let direct = release == HostRelease::Multicast;
        let mut barrier = HierarchicalBarrier::new(host_config, leaders, nodes.len(), config, || {
            let mut transport = shared.group_multicasting_to(&on_wire, mcd::GroupId::HOST_LEADERS)?;
            if direct {
                // The host's ranks listen: even one other leader gets the
                // release as a multicast.
                transport.multicast_always();
            }
            Ok(transport)
        })?;
        barrier.release = release;
        if direct {
            if let Some(outer) = &mut barrier.outer {
                let instance = outer.instance();
                let key = outer.with_transport(|t| t.key());
                barrier.host.publish_tap(key, instance);
            } else if !barrier.host.is_leader() {
                barrier.tap = Some(ReleaseTap {
                    shared: shared.clone(),
                    listener: None,
                    root: barrier.leaders[0],
                    first_epoch: config.first_epoch,
                    heard: Default::default(),
                });
            }
        }
        Ok(barrier)
    }
}

impl HostRelease {
    /// The release for a host of `local` processes on `cores` cores
    /// waiting under `policy`: the direct release ([`HostRelease::Multicast`])
    /// only where the ranks sleep and have cores of their own (`block`,
    /// processes ≤ cores), else through shared memory.
    ///
    /// Why (`bench/results/hierarchy.md`): asleep with a core each, the
    /// multicast wakes every rank at once, where the leader must wake first
    /// and then wake its host (the model: a futex wake-up, 25 µs, saved).
    /// Polling, the leader's store reaches the others in one cache-line
    /// transfer (0.36 µs), less than the kernel's copies of the frame into
    /// every rank's ring. With more processes than cores the measurements
    /// split within their noise, and a process with other groups (the C ABI's
    /// collectives) has a progress agent asleep on its rings that every
    /// release frame wakes too: one more wake-up per rank and barrier, which
    /// put the multicast release behind in the interposer's runs.
    pub fn auto(policy: mcd::WaitPolicy, local: usize, cores: usize) -> HostRelease {
        if policy == mcd::WaitPolicy::Block && local <= cores {
            HostRelease::Multicast
        } else {
            HostRelease::SharedMemory
        }
    }
}

/// Adaptive waiting, oversubscribed, yields this long in shared memory
/// before it sleeps on the futex: a futex wake-up costs a few µs, and every
/// yielding rank takes the cores from the ones the barrier waits for.
pub const HOST_ADAPTIVE_YIELD: Duration = Duration::from_micros(50);

/// How a host's ranks wait in shared memory under `policy`, `local` of the
/// host's processes on `cores` cores: the policy's phases, except that
/// adaptive waiting with more processes than cores sleeps on the futex after
/// [`HOST_ADAPTIVE_YIELD`] rather than yielding for the network's long
/// phase.
pub fn host_phases(policy: mcd::WaitPolicy, local: usize, cores: usize) -> WaitPhases {
    let phases = policy.phases(local, cores);
    if policy == mcd::WaitPolicy::Adaptive && local > cores {
        WaitPhases { yield_for: phases.yield_for.min(HOST_ADAPTIVE_YIELD), ..phases }
    } else {
        phases
    }
}

impl<T: Transport + Send + 'static> HierarchicalBarrier<T> {
    /// The barrier of one host's rank: `host` says how its host meets,
    /// `leaders` are the hosts' leaders (node numbers of the job) in host
    /// order, `nodes` all of the job's nodes, and `leaders_transport` makes
    /// the leaders' transport (called on leaders only, when there are
    /// several hosts). Collective over all nodes.
    pub fn new(
        host: HostConfig,
        leaders: Vec<NodeId>,
        nodes: usize,
        config: BarrierConfig,
        leaders_transport: impl FnOnce() -> Result<T, crate::TransportError>,
    ) -> Result<Self, BarrierError> {
        let node = host.members[host.me];
        let mut host = HostBarrier::join(host)?;
        let outer = if host.is_leader() && leaders.len() > 1 {
            match leaders_transport().map_err(BarrierError::from).and_then(|t| Barrier::new(t, config)) {
                Ok(barrier) => Some(barrier),
                Err(e) => {
                    let e = in_job(e, &leaders);
                    host.fail(&e.to_string());
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok(HierarchicalBarrier {
            host,
            outer,
            node,
            nodes,
            hosts: leaders.len(),
            leaders,
            config,
            phase: Phase::Idle,
            completed: 0,
            release: HostRelease::SharedMemory,
            tap: None,
        })
    }

    /// This node's number in the job.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The job's nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// The hosts' leaders, node numbers of the job, in host order.
    pub fn leaders(&self) -> &[NodeId] {
        &self.leaders
    }

    /// This node's host's ranks (node numbers of the job), leader first.
    pub fn host_members(&self) -> &[NodeId] {
        self.host.members()
    }

    /// Whether this node leads its host.
    pub fn is_leader(&self) -> bool {
        self.host.is_leader()
    }

    /// How the host is released.
    pub fn release(&self) -> HostRelease {
        self.release
    }

    /// Barriers this rank left on the leaders' release multicast (direct
    /// release, not the leader), rather than on its leader's release in
    /// shared memory.
    pub fn released_directly(&self) -> u64 {
        self.tap.as_ref().map_or(0, |t| t.heard.get())
    }

    /// The leaders' barrier's configuration.
    pub fn config(&self) -> &BarrierConfig {
        &self.config
    }

    /// Barriers completed.
    pub fn epoch(&self) -> u64 {
        self.completed
    }

    /// Whether a barrier has been entered and not yet completed.
    pub fn in_progress(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// The leaders' barrier's counters (on a leader), with `completed`
    /// counting this barrier's.
    pub fn stats(&self) -> BarrierStats {
        let mut stats = self.outer.as_ref().map(|b| b.stats()).unwrap_or_default();
        stats.completed = self.completed;
        stats
    }

    /// Runs `f` on the leaders' transport, on a leader of several hosts.
    pub fn with_leaders_transport<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.outer.as_mut().map(|b| b.with_transport(f))
    }

    /// Enters the next barrier without waiting (see the module docs).
    pub fn enter(&mut self) -> Result<(), BarrierError> {
        if self.phase == Phase::Idle {
            self.host.arrive();
            self.phase = Phase::Gathering;
        }
        Ok(())
    }

    /// Makes progress without blocking; true once the entered barrier is
    /// complete (also when none was entered).
    pub fn test(&mut self) -> Result<bool, BarrierError> {
        if self.phase == Phase::Idle {
            return Ok(true);
        }
        if !self.host.is_leader() {
            if !self.heard()? && !self.host.released()? {
                return Ok(false);
            }
            return Ok(self.done());
        }
        if self.phase == Phase::Gathering {
            if !self.host.all_arrived() {
                return Ok(false);
            }
            self.meet(false)?;
        }
        if let Some(outer) = &mut self.outer {
            let complete = outer.test();
            if !self.leader_result(complete)? {
                return Ok(false);
            }
        }
        self.host.release();
        Ok(self.done())
    }

    /// Completes the entered barrier, entering one first if none is. Fails
    /// when a rank it waits for dies (on this host: named; on another: the
    /// leaders' barrier names the silent host's leader), or at the deadline.
    pub fn wait(&mut self) -> Result<(), BarrierError> {
        self.enter()?;
        self.complete(false)
    }

    /// Ends this node's use of the barrier: one closing barrier, after which
    /// the leaders answer each other until none needs them (as
    /// [`Barrier::finish`]).
    pub fn finish(&mut self) -> Result<(), BarrierError> {
        if self.in_progress() {
            self.complete(false)?;
        }
        self.enter()?;
        self.complete(true)
    }

    fn complete(&mut self, finish: bool) -> Result<(), BarrierError> {
        let deadline = self.config.deadline.map(|d| Instant::now() + d);
        if !self.host.is_leader() {
            let listening = match &mut self.tap {
                Some(tap) => tap.listening(&self.host)?,
                None => false,
            };
            match (&self.tap, listening) {
                (Some(tap @ ReleaseTap { listener: Some((listener, _)), .. }), true) => {
                    let k = self.host.entered() as u32;
                    self.host
                        .wait_release_heard(deadline, &mut || tap.heard(k), &mut |timeout| listener.wait(timeout).map_err(BarrierError::from))?;
                }
                _ => self.host.wait_release(deadline)?,
            }
            self.done();
            return Ok(());
        }
        let mut finished = false;
        if self.phase == Phase::Gathering {
            let gathered = self.host.gather(deadline);
            self.leader_result(gathered)?;
            self.meet(finish)?;
            finished = finish;
        }
        if self.phase == Phase::Meeting && !finished {
            if let Some(outer) = &mut self.outer {
                let waited = outer.wait();
                self.leader_result(waited)?;
            }
        }
        self.host.release();
        self.done();
        Ok(())
    }

    /// Leader, host gathered: enters the leaders' barrier (or, to finish,
    /// runs their closing barrier).
    fn meet(&mut self, finish: bool) -> Result<(), BarrierError> {
        self.phase = Phase::Meeting;
        if let Some(outer) = &mut self.outer {
            let entered = if finish { outer.finish() } else { outer.enter() };
            self.leader_result(entered)?;
        }
        Ok(())
    }

    /// A leader's result: an error (but a deadline, after which waiting
    /// again goes on) is told to the host's ranks, in the job's numbers.
    fn leader_result<R>(&mut self, result: Result<R, BarrierError>) -> Result<R, BarrierError> {
        result.map_err(|e| {
            let e = in_job(e, &self.leaders);
            if !matches!(e, BarrierError::Deadline { .. }) {
                self.host.fail(&e.to_string());
            }
            e
        })
    }

    /// Not the leader: whether the leaders' release multicast of the
    /// current barrier has been heard (direct release).
    fn heard(&mut self) -> Result<bool, BarrierError> {
        match &mut self.tap {
            Some(tap) => Ok(tap.listening(&self.host)? && tap.heard(self.host.entered() as u32)?),
            None => Ok(false),
        }
    }

    fn done(&mut self) -> bool {
        self.phase = Phase::Idle;
        self.completed += 1;
        true
    }
}

/// `e` of the leaders' barrier with its node numbers (places among the
/// leaders) turned into the job's.
fn in_job(e: BarrierError, leaders: &[NodeId]) -> BarrierError {
    let job = |n: NodeId| leaders.get(n).copied().unwrap_or(n);
    match e {
        BarrierError::PeerSilent { epoch, silent, for_ } => BarrierError::PeerSilent { epoch, silent: silent.into_iter().map(job).collect(), for_ },
        BarrierError::PeerFailed { epoch, reporter, silent } => BarrierError::PeerFailed { epoch, reporter: job(reporter), silent: job(silent) },
        BarrierError::Deadline { epoch, waited, waiting_for } => {
            BarrierError::Deadline { epoch, waited, waiting_for: waiting_for.into_iter().map(|(n, s): (NodeId, PeerState)| (job(n), s)).collect() }
        }
        BarrierError::JoinTimeout { missing, nodes, waited, bad_tags, auth_mismatch, bad_version } => BarrierError::JoinTimeout {
            missing: missing.into_iter().map(job).collect(),
            nodes,
            waited,
            bad_tags: bad_tags.into_iter().map(|(n, c)| (job(n), c)).collect(),
            auth_mismatch: auth_mismatch.into_iter().map(|(n, c)| (job(n), c)).collect(),
            bad_version,
        },
        BarrierError::Refused { node } => BarrierError::Refused { node: job(node) },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::check::{check, Timeline};
    use crate::mem::{self, Faults};
    use crate::{Algorithm, Fanout, Release};

    /// `hosts` × `per_host` ranks in threads, the leaders on an in-process
    /// network with `faults`; each runs `barriers` barriers (every other
    /// one split-phase),
    /// then finishes; checks safety on the shared clock. Returns the
    /// leaders' recoveries (NACKs and copies sent).
    fn run(name: &str, hosts: usize, per_host: usize, barriers: usize, faults: Faults) -> u64 {
        let leaders_net = mem::network(hosts, 1, faults);
        let leaders: Vec<NodeId> = (0..hosts).map(|h| h * per_host).collect();
        let config = BarrierConfig::new(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast });
        let mut threads = Vec::new();
        for (h, leader_transport) in leaders_net.into_iter().enumerate() {
            let mut leader_transport = Some(leader_transport);
            for r in 0..per_host {
                let transport = if r == 0 { leader_transport.take() } else { None };
                let host = HostConfig {
                    path: std::env::temp_dir().join(format!("mcd-hier-test-{name}-{}-{h}", std::process::id())),
                    job_key: 7,
                    members: (0..per_host).map(|i| h * per_host + i).collect(),
                    me: r,
                    attach_timeout: Duration::from_secs(20),
                    phases: mcd::WaitPolicy::Block.phases(2, 2),
                };
                let leaders = leaders.clone();
                threads.push(std::thread::spawn(move || {
                    let mut b = HierarchicalBarrier::new(host, leaders, hosts * per_host, config, || Ok(transport.expect("leaders get a transport")))
                        .unwrap();
                    let mut timeline = Timeline::default();
                    for k in 0..barriers {
                        let entered = Instant::now();
                        if k % 2 == 0 {
                            b.wait().unwrap();
                        } else {
                            b.enter().unwrap();
                            while !b.test().unwrap() {
                                std::thread::yield_now();
                            }
                        }
                        timeline.record(entered, Instant::now());
                    }
                    b.finish().unwrap();
                    assert_eq!(b.epoch() as usize, barriers + 1);
                    (timeline, b.stats())
                }));
            }
        }
        let (timelines, stats): (Vec<Timeline>, Vec<BarrierStats>) = threads.into_iter().map(|t| t.join().unwrap()).unzip();
        let (violations, checked) = check(&timelines);
        assert_eq!(checked, barriers);
        assert!(violations.is_empty(), "{name}: {violations:?}");
        stats.iter().map(|s| s.nacks_sent + s.copies).sum()
    }

    #[test]
    fn hosts_times_ranks_never_leave_before_all_entered() {
        for (name, hosts, per_host) in [("3x3", 3, 3), ("2x4", 2, 4), ("4x1", 4, 1), ("1x4", 1, 4)] {
            run(name, hosts, per_host, 100, Faults::none());
        }
    }

    #[test]
    fn twenty_percent_loss_between_hosts_is_recovered() {
        let recoveries = run("loss", 3, 2, 60, Faults { loss: 0.2, ..Faults::none() });
        assert!(recoveries > 0, "20% loss and no recovery: the faults did not apply");
    }

    #[test]
    fn adaptive_oversubscribed_ranks_sleep_on_the_futex_soon() {
        let over = host_phases(mcd::WaitPolicy::Adaptive, 16, 2);
        assert!(over.yield_for <= HOST_ADAPTIVE_YIELD && over.spin < Duration::from_micros(10));
        assert_eq!(host_phases(mcd::WaitPolicy::Adaptive, 2, 2), mcd::WaitPolicy::Adaptive.phases(2, 2));
        assert_eq!(host_phases(mcd::WaitPolicy::BusyPoll, 16, 2), mcd::WaitPolicy::BusyPoll.phases(16, 2));
    }

    #[test]
    fn auto_releases_directly_only_ranks_asleep_on_cores_of_their_own() {
        assert_eq!(HostRelease::auto(mcd::WaitPolicy::Block, 4, 8), HostRelease::Multicast);
        assert_eq!(HostRelease::auto(mcd::WaitPolicy::Block, 16, 2), HostRelease::SharedMemory);
        assert_eq!(HostRelease::auto(mcd::WaitPolicy::Adaptive, 4, 8), HostRelease::SharedMemory);
        assert_eq!(HostRelease::auto(mcd::WaitPolicy::BusyPoll, 4, 8), HostRelease::SharedMemory);
    }

    #[test]
    fn releases_parse_and_bad_ones_are_named() {
        assert_eq!("shm".parse::<HostRelease>(), Ok(HostRelease::SharedMemory));
        assert_eq!("multicast".parse::<HostRelease>(), Ok(HostRelease::Multicast));
        assert_eq!(HostRelease::Multicast.to_string().parse::<HostRelease>(), Ok(HostRelease::Multicast));
        assert!("auto".parse::<HostRelease>().unwrap_err().contains("shm or multicast"));
        assert!("carrier".parse::<HostRelease>().unwrap_err().contains("MCD_HIERARCHY_RELEASE=carrier"));
        assert!(HostRelease::can_multicast(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }));
        assert!(HostRelease::can_multicast(Algorithm::Concurrent));
        for a in [Algorithm::Dissemination, Algorithm::OnePhase, Algorithm::Tree { k: Fanout::TWO, release: Release::Tree }] {
            assert!(!HostRelease::can_multicast(a), "{a}");
        }
    }

    #[test]
    fn errors_of_the_leaders_barrier_name_the_jobs_nodes() {
        let e = in_job(BarrierError::PeerSilent { epoch: 3, silent: vec![1, 2], for_: Duration::from_secs(1) }, &[0, 4, 8]);
        assert!(matches!(e, BarrierError::PeerSilent { silent, .. } if silent == vec![4, 8]));
        let e = in_job(BarrierError::PeerFailed { epoch: 3, reporter: 2, silent: 1 }, &[0, 4, 8]);
        assert!(matches!(e, BarrierError::PeerFailed { reporter: 8, silent: 4, .. }));
    }
}
