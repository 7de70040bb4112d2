//! The blocking driver: runs a [`crate::core::Core`] over a [`Transport`]
//! (the protocol itself, and its notes, live in [`crate::core`]), and the
//! types a barrier's user meets: its configuration, counters and errors.
//!
//! The driver's loop, for every call that waits: start the call in the
//! core; send what it has to send; stop at its outcome; else sleep in the
//! transport's `recv` until the core's next deadline, feed what came (and
//! everything else already there), and tell the core the time.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use crate::collective::Collective;
use crate::core::{Call, Core, Event, Setup, To};
use crate::plan::Algorithm;
use crate::transport::{MsgKind, NodeId, Transport, TransportError};

/// The learned retry timeout never exceeds this (nor an eighth of the
/// failure timeout).
pub const MAX_LEARNED_RETRY: Duration = Duration::from_millis(200);
/// A peer is declared silent only after this many unanswered probes (as
/// well as the failure timeout): under heavy loss a live peer's answers get
/// through some of the time, and eight probes alone are too few.
pub const MIN_PROBES: u32 = 20;
/// How a [`Barrier`](crate::Barrier) runs. [`BarrierConfig::new`] gives the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierConfig {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// How many of the transport's rails to use (1 = single network).
    pub rails: usize,
    /// The first retry timeout, before any step time has been learned; then
    /// the timeout follows the steps' times (RFC 6298: smoothed mean plus four
    /// deviations), never below `min_retry_timeout`, and doubles with each
    /// retry of one step.
    pub retry_timeout: Duration,
    /// The floor of the learned retry timeout.
    pub min_retry_timeout: Duration,
    /// A peer that answers nothing for this long, though probed, is dead:
    /// the barrier fails naming it. A live peer is waited for as long as it
    /// takes.
    pub failure_timeout: Duration,
    /// If set, a `wait` that has not completed after this long returns
    /// [`BarrierError::Deadline`] (the barrier stays entered). Default: none.
    pub deadline: Option<Duration>,
    /// How long creating a barrier waits for every node to join.
    pub join_timeout: Duration,
    /// Whether a background thread answers peers while the application is
    /// outside the barrier (computing, in other calls, after the last
    /// barrier). Without it, peers are answered only inside barrier calls.
    pub progress_agent: bool,
    /// The number of the first barrier (0; other values test wrap-around).
    /// Every node must use the same.
    pub first_epoch: u64,
}

impl BarrierConfig {
    /// Defaults: one rail, first retry after 250 µs (then learned, at least
    /// 20 µs), a peer silent for 10 s is
    /// dead, no deadline, 30 s to join, with a progress agent.
    pub fn new(algorithm: Algorithm) -> BarrierConfig {
        BarrierConfig {
            algorithm,
            rails: 1,
            retry_timeout: Duration::from_micros(250),
            min_retry_timeout: Duration::from_micros(20),
            failure_timeout: Duration::from_secs(10),
            deadline: None,
            join_timeout: Duration::from_secs(30),
            progress_agent: true,
            first_epoch: 0,
        }
    }

    /// The algorithm with the lowest predicted cost ([`crate::model::auto`]) for
    /// `nodes` nodes on `rails` rails under LogP parameters `params` (as
    /// measured by `mcd-logp`), multicast algorithms only if `multicast`.
    pub fn auto(nodes: usize, rails: usize, params: &crate::model::LogP, multicast: bool) -> BarrierConfig {
        BarrierConfig::new(crate::model::auto(nodes, rails, params, multicast).0).rails(rails)
    }

    /// As [`auto`](Self::auto) for nodes sharing a host, `local_processes`
    /// of them on `cores` cores ([`crate::model::auto_on_host`]).
    pub fn auto_on_host(
        nodes: usize,
        rails: usize,
        params: &crate::model::LogP,
        multicast: bool,
        local_processes: usize,
        cores: usize,
    ) -> BarrierConfig {
        BarrierConfig::new(crate::model::auto_on_host(nodes, rails, params, multicast, local_processes, cores).0).rails(rails)
    }

    /// With `rails` rails.
    pub fn rails(mut self, rails: usize) -> BarrierConfig {
        self.rails = rails;
        self
    }

    /// With these timeouts: first retry, and silence before a peer is dead.
    /// The learned retry timeout's floor is lowered to `retry` if above it.
    pub fn timeouts(mut self, retry: Duration, failure: Duration) -> BarrierConfig {
        self.retry_timeout = retry;
        self.min_retry_timeout = self.min_retry_timeout.min(retry);
        self.failure_timeout = failure;
        self
    }

    /// With an overall deadline per `wait`.
    pub fn deadline(mut self, deadline: Option<Duration>) -> BarrierConfig {
        self.deadline = deadline;
        self
    }

    /// With or without the progress agent.
    pub fn progress_agent(mut self, on: bool) -> BarrierConfig {
        self.progress_agent = on;
        self
    }

    /// The longest retry interval of one step (probes of a live but late
    /// peer back off to this): short enough that a silent peer is probed
    /// [`MIN_PROBES`] times within the failure timeout.
    pub(crate) fn max_retry_interval(&self) -> Duration {
        (self.failure_timeout / (2 * MIN_PROBES)).max(self.retry_timeout)
    }

    /// The most the learned retry timeout can reach.
    pub(crate) fn max_learned_retry(&self) -> Duration {
        self.max_retry_interval().min(MAX_LEARNED_RETRY)
    }
}

/// Counters of a [`Barrier`](crate::Barrier) since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BarrierStats {
    /// Barriers completed.
    pub completed: u64,
    /// Messages sent by the plans (a multicast counts once).
    pub sent: u64,
    /// Messages sent a second time at once, unasked: multicasts for a while
    /// after a loss, and messages a peer asked for before they were sent.
    /// Insurance, not recovery.
    pub copies: u64,
    /// NACKs sent for missing messages (and status probes).
    pub nacks_sent: u64,
    /// Of those, NACKs sent at once because a peer's message proved the
    /// missing one was sent.
    pub fast_nacks: u64,
    /// Messages re-sent to answer a NACK or a straggler.
    pub answers: u64,
    /// NACKs not answered: the same peer asked for the same message (epoch
    /// and tag) less than a quarter of the learned retry timeout after its
    /// last answer (a burst of NACKs, from a buggy or hostile member or
    /// replayed, gets a bounded number of answers).
    pub answers_suppressed: u64,
    /// Status messages sent (answers to NACKs with nothing to re-send, and
    /// "finished" notices).
    pub statuses: u64,
    /// Messages received twice (or more).
    pub duplicates: u64,
    /// Messages of barriers outside this node's window (c−1..c+1), or of a
    /// finished barrier that need no answer.
    pub stale: u64,
    /// Messages of a barrier this node had not yet entered, kept for it.
    pub early: u64,
    /// Broadcast ends implied rather than sent: at a root that broadcasts
    /// again at once (the end is not sent; its next data is flagged as the
    /// end), and at a node that took its root's next data, so flagged, for
    /// the end (see [`crate::collective`]).
    pub ends_implied: u64,
    /// Messages of another barrier instance, dropped.
    pub foreign: u64,
    /// Join requests refused (from a process node 0 had not admitted).
    pub refused: u64,
    /// The retry timeout learned so far.
    pub retry_timeout: Duration,
}

/// What a join timeout says of frames that were dropped on the way in: the
/// missing nodes' frames that failed authentication, and frames of another
/// wire version ("" if none).
fn join_suspects(bad_tags: &[(NodeId, u64)], bad_version: u64) -> String {
    let mut s = String::new();
    for (node, count) in bad_tags {
        s += &format!("; {count} frame(s) claiming to be node {node} failed authentication (another job secret, or forged)");
    }
    if bad_version > 0 {
        s += &format!("; {bad_version} frame(s) of another mcd wire version arrived (run the same mcd everywhere)");
    }
    s
}

/// What a peer was last known to be doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// Answered recently; at barrier `at`, inside it or not.
    Alive {
        /// The latest barrier it was known to be at.
        at: u64,
        /// Whether it was inside that barrier.
        in_barrier: bool,
        /// How long ago it was last heard.
        heard: Duration,
    },
    /// Never heard since this barrier began waiting for it, or not for
    /// longer than the failure timeout.
    Silent {
        /// How long.
        for_: Duration,
    },
}

impl std::fmt::Display for PeerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerState::Alive { at, in_barrier: true, heard } => {
                write!(f, "alive, inside barrier {at} (heard {:.0} ms ago)", heard.as_secs_f64() * 1e3)
            }
            PeerState::Alive { at, in_barrier: false, heard } => {
                write!(f, "alive, outside the barrier after {at} barrier(s) (heard {:.0} ms ago)", heard.as_secs_f64() * 1e3)
            }
            PeerState::Silent { for_ } => write!(f, "silent for {:.1} s", for_.as_secs_f64()),
        }
    }
}

/// Why a barrier failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BarrierError {
    /// Peers this node waits for answered nothing for the failure timeout.
    #[error(
        "barrier {epoch}: node(s) {silent:?} silent for {:.1} s though probed: dead (crashed, killed or stopped)",
        for_.as_secs_f64()
    )]
    PeerSilent {
        /// The barrier's number.
        epoch: u64,
        /// The silent nodes.
        silent: Vec<NodeId>,
        /// How long they were silent.
        for_: Duration,
    },
    /// A live peer this node waits for gave up on the barrier because some
    /// node was silent.
    #[error("barrier {epoch}: node {reporter} gave up because node {silent} is silent (dead)")]
    PeerFailed {
        /// The barrier's number.
        epoch: u64,
        /// The live peer that reported it.
        reporter: NodeId,
        /// The node it found silent.
        silent: NodeId,
    },
    /// The optional deadline passed with live peers still behind.
    #[error("barrier {epoch} not complete after {:.1} s (deadline); waiting for: {}", waited.as_secs_f64(), describe(waiting_for))]
    Deadline {
        /// The barrier's number.
        epoch: u64,
        /// How long this `wait` waited.
        waited: Duration,
        /// The peers whose messages are missing, and what each was last known doing.
        waiting_for: Vec<(NodeId, PeerState)>,
    },
    /// Creating the barrier: nodes did not join in time.
    #[error(
        "creating the barrier: node(s) {missing:?} did not join within {:.1} s (are all {nodes} nodes creating it?){}",
        waited.as_secs_f64(),
        join_suspects(bad_tags, *bad_version)
    )]
    JoinTimeout {
        /// The nodes not heard from (node 0, for any other node).
        missing: Vec<NodeId>,
        /// The number of nodes.
        nodes: usize,
        /// How long it waited.
        waited: Duration,
        /// Of the missing nodes, those that frames failing authentication
        /// claimed to come from, with how many such frames arrived (a node
        /// run with another job secret, or forgeries); as far as the
        /// transport can tell ([`Transport::bad_tags_from`]).
        bad_tags: Vec<(NodeId, u64)>,
        /// Frames of another wire version that arrived (an mcd build of
        /// another protocol), from anyone; 0 if the transport cannot tell.
        bad_version: u64,
    },
    /// Creating the barrier: node 0 runs this barrier already with another
    /// process in this node's place (this process was restarted), and
    /// refused it until the join timeout.
    #[error("creating the barrier: node 0 refused node {node}: the barrier is running already without this process (was it restarted?)")]
    Refused {
        /// This node.
        node: NodeId,
    },
    /// A rank on this host that the barrier waited for died (its process
    /// exited or was killed): the host-local step of a hierarchical barrier.
    #[error("barrier {epoch}: local rank {local_rank} on this host (node {node}, pid {pid}) died: exited or killed")]
    LocalRankDead {
        /// The barrier's number.
        epoch: u64,
        /// Its rank among the host's ranks.
        local_rank: usize,
        /// Its node number in the job.
        node: NodeId,
        /// Its process id.
        pid: u32,
    },
    /// This host's leader gave up on a barrier (a remote host or a local
    /// rank failed) and said why.
    #[error("barrier {epoch}: this host's leader (node {leader}) gave up: {reason}")]
    LeaderGaveUp {
        /// The barrier's number.
        epoch: u64,
        /// The leader's node number in the job.
        leader: NodeId,
        /// Its error.
        reason: String,
    },
    /// The transport failed.
    #[error("barrier transport: {0}")]
    Transport(#[source] TransportError),
    /// The nodes called different collectives in one barrier (another
    /// operation, element type or count, or a broadcast from another
    /// root): it can never complete. The collective's caller gets this
    /// instead of a result; a barrier queued behind it is abandoned.
    #[error("collective mismatch in barrier {epoch}: {detail}")]
    CollectiveMismatch {
        /// The barrier's number.
        epoch: u64,
        /// What disagreed, as far as this node can tell.
        detail: String,
    },
    /// The barrier's configuration is invalid, or not the other nodes'
    /// (nodes, rails, timeouts, an algorithm that cannot run the call, an
    /// environment variable's value, the host's ranks and their shared
    /// memory).
    #[error("{0}")]
    Config(String),
    /// A call at the wrong time or with wrong arguments (a call while
    /// another is in progress, after `finish`, buffers of the wrong size,
    /// a broadcast root that is not a node).
    #[error("{0}")]
    Misuse(String),
    /// The system refused something the barrier needs (a thread, shared
    /// memory, this process's identity).
    #[error("{0}")]
    System(String),
    /// A bug in mcd, or a thread of it that panicked.
    #[error("{0}")]
    Internal(String),
    /// For transition only (2026-11-26): what `Config`, `Misuse`,
    /// `System`, `Internal` and `CollectiveMismatch` now say apart. Code
    /// merged from before the split may still make it; it goes once none
    /// does. Reaches C as `MCD_ERR_ARGUMENT`, as it did.
    #[error("{0}")]
    Usage(String),
}

impl BarrierError {
    /// The error of a node whose peers' plans disagree with its own in
    /// barrier `epoch` (a peer said so, or its messages do).
    pub(crate) fn peer_mismatch(epoch: u64) -> BarrierError {
        BarrierError::CollectiveMismatch {
            epoch,
            detail: "a peer called another collective (a broadcast from another root, or a broadcast where this node called something else)".into(),
        }
    }
}

fn describe(peers: &[(NodeId, PeerState)]) -> String {
    peers.iter().map(|(n, s)| format!("node {n} {s}")).collect::<Vec<_>>().join("; ")
}

impl From<TransportError> for BarrierError {
    fn from(e: TransportError) -> Self {
        BarrierError::Transport(e)
    }
}

/// A new incarnation: the time in microseconds in the high 40 bits (so a
/// later barrier of a process has a larger one, for about 12 days), and 24
/// random bits (std's per-process random hash keys, mixed with the time
/// and the pid) below.
fn new_incarnation() -> u64 {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(micros);
    h.write_u32(std::process::id());
    ((micros as u64) << 24) | (h.finish() & 0xFF_FFFF) | 1
}

/// splitmix64's finaliser.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}


/// One node's barrier: its protocol core driven over transport `T`.
pub(crate) struct Engine<T: Transport> {
    pub(crate) transport: T,
    core: Core,
    /// An error the progress agent met, for the application's next call.
    pub(crate) agent_error: Option<TransportError>,
}

impl<T: Transport> Engine<T> {
    /// Checks `config` against `transport` and builds the plan (no traffic yet).
    pub(crate) fn new(transport: T, config: BarrierConfig) -> Result<Engine<T>, BarrierError> {
        let setup = Setup {
            me: transport.node(),
            nodes: transport.node_count(),
            rails: transport.rails(),
            multicast: transport.has_multicast(),
            max_data: transport.max_data(),
        };
        let core = Core::new(setup, config, Instant::now())?;
        Ok(Engine { transport, core, agent_error: None })
    }

    pub(crate) fn me(&self) -> NodeId {
        self.core.me()
    }

    pub(crate) fn nodes(&self) -> usize {
        self.core.nodes()
    }

    pub(crate) fn stats(&self) -> BarrierStats {
        self.core.stats()
    }

    pub(crate) fn instance(&self) -> u64 {
        self.core.instance()
    }

    /// The most data one collective message carries.
    pub(crate) fn max_data(&self) -> usize {
        self.core.setup().max_data
    }

    /// Whether the application has a barrier entered and not completed.
    pub(crate) fn entered(&self) -> bool {
        self.core.entered()
    }

    /// The application's current or next barrier number.
    pub(crate) fn app_epoch(&self) -> u64 {
        self.core.epoch()
    }

    /// Sends everything the core has to send.
    fn flush(&mut self) -> Result<(), TransportError> {
        while let Some(t) = self.core.poll_transmit() {
            // Data and answers go as data (even empty); the rest as plain
            // messages (a transport may route the two differently).
            let data = matches!(t.msg.kind, MsgKind::Data | MsgKind::Answer);
            match (t.to, data) {
                (To::Node(to), true) => self.transport.send_data(t.rail, to, t.msg, t.data)?,
                (To::Node(to), false) => self.transport.send(t.rail, to, t.msg)?,
                (To::All, true) => self.transport.multicast_data(t.rail, t.msg, t.data)?,
                (To::All, false) => self.transport.multicast(t.rail, t.msg)?,
            }
        }
        Ok(())
    }

    /// Feeds the core every message already there.
    fn drain(&mut self, now: Instant) -> Result<(), TransportError> {
        while let Some(m) = self.transport.recv(Duration::ZERO)? {
            self.core.handle(now, m.from, m.rail, m.msg, self.transport.data());
        }
        Ok(())
    }

    /// Runs the core from `now` until an event that `take` accepts,
    /// sleeping in `recv` until the core's next deadline.
    fn run<R>(&mut self, now: Instant, mut take: impl FnMut(Event) -> Option<R>) -> Result<R, BarrierError> {
        let result = self.run_inner(now, &mut take);
        if result.is_err() {
            self.core.cancel();
        }
        result?
    }

    fn run_inner<R>(&mut self, mut now: Instant, take: &mut impl FnMut(Event) -> Option<R>) -> Result<Result<R, BarrierError>, TransportError> {
        loop {
            self.flush()?;
            if let Some(r) = self.take_event(take) {
                return Ok(Ok(r));
            }
            // Read before judging: whatever has arrived counts before any
            // timer (this thread may have been descheduled for long).
            self.drain(now)?;
            self.flush()?;
            if let Some(r) = self.take_event(take) {
                return Ok(Ok(r));
            }
            self.core.handle_timeout(now);
            self.flush()?;
            if let Some(r) = self.take_event(take) {
                return Ok(Ok(r));
            }
            let wait = self.core.poll_timeout().map_or(Duration::from_secs(3600), |t| t.saturating_duration_since(now));
            let incoming = self.transport.recv(wait)?;
            now = Instant::now();
            if let Some(m) = incoming {
                self.core.handle(now, m.from, m.rail, m.msg, self.transport.data());
            }
        }
    }

    fn take_event<R>(&mut self, take: &mut impl FnMut(Event) -> Option<R>) -> Option<R> {
        while let Some(event) = self.core.poll_event() {
            if let Some(r) = take(event) {
                return Some(r);
            }
        }
        None
    }

    /// Runs a blocking call to its end.
    fn call(&mut self, call: Call<'_>) -> Result<(), BarrierError> {
        let now = Instant::now();
        self.core.start(now, call);
        self.run(now, |e| match e {
            Event::Done(result) => Some(result),
            _ => None,
        })?
    }

    /// An error the agent met, for this call.
    fn agent_error(&mut self) -> Result<(), BarrierError> {
        match self.agent_error.take() {
            Some(e) => Err(BarrierError::Transport(e)),
            None => Ok(()),
        }
    }

    /// Agrees on the instance with the other nodes (see [`crate::core`]).
    pub(crate) fn join(&mut self) -> Result<(), BarrierError> {
        let now = Instant::now();
        self.core.join(new_incarnation(), now);
        let result = self.run(now, |e| match e {
            Event::Joined { .. } => Some(Ok(())),
            Event::JoinFailed(e) => Some(Err(e)),
            Event::Done(_) => None,
        })?;
        result.map_err(|e| self.explain_join(e))
    }

    /// A join timeout, with what the transport dropped of the missing
    /// nodes' frames (failed authentication, another wire version): the
    /// core cannot see those, the transport can.
    fn explain_join(&mut self, error: BarrierError) -> BarrierError {
        match error {
            BarrierError::JoinTimeout { missing, nodes, waited, .. } => {
                let bad_tags = missing.iter().map(|&j| (j, self.transport.bad_tags_from(j))).filter(|&(_, c)| c > 0).collect();
                BarrierError::JoinTimeout { missing, nodes, waited, bad_tags, bad_version: self.transport.bad_version() }
            }
            other => other,
        }
    }

    /// Enters the next barrier as an epoch of `call` with `count` elements
    /// of this node's `input` (native-endian; see [`crate::collective`]).
    /// A broadcast still completing in the background is completed first
    /// (up to `deadline`).
    pub(crate) fn enter_collective(&mut self, call: Collective, count: u32, input: &[u8], deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.call(Call::EnterCollective { call, count, input, deadline })
    }

    /// Completes the entered collective epoch as far as this node's result.
    pub(crate) fn wait_result(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.agent_error()?;
        self.call(Call::WaitResult { deadline })
    }

    /// After a collective epoch: its result into `out`.
    pub(crate) fn collective_result(&mut self, out: Option<&mut [u8]>) -> Result<(), BarrierError> {
        self.core.collective_result(out)
    }

    /// The application enters the next barrier (split phase).
    pub(crate) fn enter_split(&mut self) -> Result<(), BarrierError> {
        let result = self.core.enter(Instant::now());
        self.flush()?;
        result
    }

    /// One round of progress without blocking: true once no barrier is in progress.
    pub(crate) fn test(&mut self) -> Result<bool, BarrierError> {
        self.agent_error()?;
        let now = Instant::now();
        self.drain(now)?;
        let result = self.core.test(now);
        self.flush()?;
        result
    }

    /// Completes the barrier in progress (entering one if none is); gives
    /// up at `deadline` if set.
    pub(crate) fn wait(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.agent_error()?;
        self.call(Call::Wait { deadline })
    }

    /// The progress agent's round: feeds what came, judges the timers,
    /// lets the transport make itself known if it has been silent
    /// ([`Transport::keepalive`]), keeps a transport failure for the
    /// application. Returns when to serve again: the next timer, or the
    /// next keepalive, whichever is first (if any).
    pub(crate) fn serve(&mut self) -> Option<Instant> {
        let now = Instant::now();
        let result = self.drain(now).and_then(|_| {
            self.core.handle_timeout(now);
            self.flush()?;
            self.transport.keepalive(now)
        });
        if let Err(e) = result {
            self.agent_error = Some(e);
        }
        let keepalive = self.transport.keepalive_every().map(|every| now + every);
        match (self.core.poll_timeout(), keepalive) {
            (Some(timer), Some(keepalive)) => Some(timer.min(keepalive)),
            (timer, keepalive) => timer.or(keepalive),
        }
    }

    /// The closing protocol of [`crate::Barrier::finish`].
    pub(crate) fn finish(&mut self) -> Result<(), BarrierError> {
        self.call(Call::Finish)
    }

    /// [`finish`](Self::finish) without blocking, after
    /// [`enter_closing`](Self::enter_closing): true once it is done.
    pub(crate) fn try_finish(&mut self) -> Result<bool, BarrierError> {
        let now = Instant::now();
        self.drain(now)?;
        let result = self.core.try_finish(now);
        self.flush()?;
        result
    }

    /// Enters the closing barrier of [`finish`](Self::finish) without waiting.
    pub(crate) fn enter_closing(&mut self) -> Result<(), BarrierError> {
        self.call(Call::Close)
    }

    /// A node leaving after it gave up says why once more.
    pub(crate) fn farewell(&mut self) {
        self.core.leave();
        let _ = self.flush();
    }
}
