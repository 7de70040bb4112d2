//! The types a barrier's user meets, below both the protocol core and its
//! drivers (the blocking [`Engine`](crate::engine), the simulator): the
//! configuration ([`BarrierConfig`]), the counters ([`BarrierStats`]), the
//! errors ([`BarrierError`], [`PeerState`]), and the constants and the hash
//! they share.

use std::time::Duration;

use crate::collective::Collective;
use crate::plan::Algorithm;
use crate::transport::{NodeId, TransportError};

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
    /// Of those, probes of late peers: NACKs the retry timer sent with no
    /// evidence that anything was lost (this node has seen no loss, or the
    /// peer said it has not sent yet). A late peer's probe asks where it
    /// is (liveness), not for a lost message: not counted in
    /// [`BarrierStats::recoveries`].
    pub probes: u64,
    /// Retries brought forward because frames for this node were dropped
    /// before it read them (its transport's receive ring overflowed:
    /// [`Transport::ring_drops`](crate::Transport::ring_drops)) while it
    /// missed a message ([`Core::frames_lost`](crate::core::Core::frames_lost)).
    pub ring_loss_retries: u64,
    /// Messages re-sent to answer a NACK or a straggler.
    pub answers: u64,
    /// NACKs not answered: the same peer asked for the same message (epoch
    /// and tag) less than a quarter of the learned retry timeout after its
    /// last answer (a burst of NACKs, from a buggy or hostile member or
    /// replayed, gets a bounded number of answers).
    pub answers_suppressed: u64,
    /// Frames the loss estimate counted lost (a message first heard as
    /// its copy k counts k, as an answer one more; less those forgiven when
    /// the original came after all): what raises the copies sent.
    pub lost_counted: u64,
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
    /// Node 0: admissions replaced by another incarnation of the same node
    /// before that node was heard in the instance (a delayed request of an
    /// earlier barrier of that process, or a Join recorded in an earlier
    /// run and replayed: see the README's **Security**). Another node:
    /// admissions and refusals for another incarnation than its own,
    /// ignored (delayed or replayed).
    pub superseded: u64,
    /// Nonblocking collectives whose start woke the progress agent at once
    /// ([`Barrier::start`](crate::Barrier::start)): those whose node has
    /// more to send than the start put on the wire, unless the application
    /// tested or waited at once after the last such start (counted by the
    /// [`Barrier`](crate::Barrier), 0 from a bare core).
    pub agent_hurried: u64,
    /// The retry timeout learned so far.
    pub retry_timeout: Duration,
}

impl BarrierStats {
    /// Recovery traffic, as the loss goals count it: NACKs sent (but the
    /// probes of late peers: [`BarrierStats::probes`]), answers, and
    /// unasked copies (what the simulator's `recoveries` counts too). On a
    /// clean network, 0, however late peers are.
    pub fn recoveries(&self) -> u64 {
        self.nacks_sent.saturating_sub(self.probes) + self.answers + self.copies
    }
}

/// What a join timeout says of frames that were dropped on the way in: the
/// missing nodes' frames that failed authentication or were of the other
/// authentication mode, and frames of another wire version ("" if none).
fn join_suspects(bad_tags: &[(NodeId, u64)], auth_mismatch: &[(NodeId, u64)], bad_version: u64) -> String {
    let mut s = String::new();
    for (node, count) in bad_tags {
        s += &format!(
            "; {count} frame(s) claiming to be node {node} failed authentication: node {node} runs with another job secret \
             (every node must read the same MCD_KEY_FILE), or they were forged"
        );
    }
    for (node, count) in auth_mismatch {
        s += &format!(
            "; {count} frame(s) claiming to be node {node} were of the other authentication mode (signed where this node \
             does not sign, or unsigned where it does): MCD_AUTH=off on node {node} or on this node only? \
             (authentication must be on everywhere or off everywhere)"
        );
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
    /// What is known is the silence: the text does not say "dead" (a node
    /// admitted by an earlier process of node 0 lives, in another instance).
    #[error(
        "barrier {epoch}: node(s) {silent:?} silent for {:.1} s though probed: crashed, stopped, cut off, or running another instance",
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
    #[error("barrier {epoch}: node {reporter} gave up because node {silent} is silent to it")]
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
        "creating the barrier: node(s) {missing:?} did not join within {:.1} s (are all {nodes} nodes creating it, with the same job secret and MCD_AUTH setting?){}",
        waited.as_secs_f64(),
        join_suspects(bad_tags, auth_mismatch, *bad_version)
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
        /// transport can tell ([`Transport::bad_tags_from`](crate::Transport::bad_tags_from)).
        bad_tags: Vec<(NodeId, u64)>,
        /// Of the missing nodes, those that frames of the other
        /// authentication mode claimed to come from (unsigned where this
        /// node signs, or signed where it does not: `MCD_AUTH=off` on one
        /// side only), with how many; as far as the transport can tell
        /// ([`Transport::auth_mismatch_from`](crate::Transport::auth_mismatch_from)).
        auth_mismatch: Vec<(NodeId, u64)>,
        /// Frames of another wire version that arrived (an mcd build of
        /// another protocol), from anyone; 0 if the transport cannot tell.
        bad_version: u64,
    },
    /// Creating the barrier: node 0 runs this barrier already with another
    /// process in this node's place (this process was restarted), and
    /// refused it until the join timeout. Also a barrier's call, once a
    /// peer is two or more barriers ahead of this process: node 0 admitted
    /// it in place of its earlier process, which had already taken part.
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
    /// root): it can never complete as called, and ends as a void barrier
    /// on every node. The collective's caller gets this instead of a
    /// result (a caller whose call had returned, a broadcast's root say,
    /// gets it from its next call, which still runs); later calls work.
    #[error("collective mismatch in barrier {epoch}: {detail}")]
    CollectiveMismatch {
        /// The barrier's number.
        epoch: u64,
        /// What disagreed, as far as this node can tell.
        detail: String,
    },
    /// The barrier cannot run collective `call` over its transport: the
    /// transport carries no data (a barrier-only one, or messages too
    /// small for one element). The caller may run the collective another
    /// way (an MPI library's own).
    #[error("{call}: this transport carries no data")]
    NoData {
        /// The collective.
        call: Collective,
    },
    /// The barrier's algorithm cannot run collective `call`: it would count
    /// contributions more than once (dissemination, for a reduction). The
    /// caller may run it another way, or choose another algorithm.
    #[error("{call} cannot run on {algorithm}: it would count contributions more than once")]
    AlgorithmCannot {
        /// The collective.
        call: Collective,
        /// The barrier's algorithm.
        algorithm: Algorithm,
    },
    /// Creating the barrier: a node runs another configuration (algorithm,
    /// rails, first barrier) or another mcd version than this one.
    #[error("creating the barrier: {detail}: every node must use the same algorithm, rails and first barrier, and the same mcd version")]
    ConfigMismatch {
        /// The other node (node 0, for any other node).
        node: NodeId,
        /// Who runs what.
        detail: String,
    },
    /// The barrier's configuration is invalid (nodes, rails, timeouts, an
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
}

fn describe(peers: &[(NodeId, PeerState)]) -> String {
    peers.iter().map(|(n, s)| format!("node {n} {s}")).collect::<Vec<_>>().join("; ")
}

impl From<TransportError> for BarrierError {
    fn from(e: TransportError) -> Self {
        BarrierError::Transport(e)
    }
}

/// splitmix64's finaliser.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
