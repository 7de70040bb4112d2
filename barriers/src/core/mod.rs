//! The barrier protocol as a sans-IO state machine: one node's barriers,
//! collectives, recovery, verdicts, join and closing, with no clock, no
//! transport, no threads and no randomness of its own (in the style of
//! quinn-proto). The blocking [`crate::Barrier`] drives one over a
//! [`crate::Transport`]; a simulator drives many over a simulated network
//! in virtual time.
//!
//! **Driving a core.** Every input carries the time it happens at, a
//! [`std::time::Instant`] (a simulator uses a base instant plus virtual
//! offsets):
//!
//! - [`Core::handle`]: a message arrived (from, rail, [`Msg`], its data).
//! - [`Core::handle_timeout`]: time has come to `now`. Call it after
//!   feeding every message that is there (whatever has arrived counts before
//!   any timer), and whenever [`Core::poll_timeout`] has passed. Calling it
//!   early is harmless.
//! - Application calls: the immediate ones return their result
//!   ([`Core::enter`], [`Core::test`], [`Core::try_finish`],
//!   [`Core::collective_result`]); the blocking ones are started with
//!   [`Core::start`] and end with an [`Event::Done`]; [`Core::join`] starts
//!   the join, which ends with [`Event::Joined`] or [`Event::JoinFailed`].
//!
//! After any input, poll the outputs: [`Core::poll_transmit`] until `None`
//! (send each), [`Core::poll_event`] until `None`, and
//! [`Core::poll_timeout`] for when to call [`Core::handle_timeout`] next if
//! nothing arrives. Transmits borrow the core's reusable queue and data
//! arena: no allocation per message in steady state.
//!
//! A blocking call completes in the core; the driver only waits. The
//! blocking driver's loop: start the call; then repeatedly send what is to
//! send, stop at its [`Event::Done`], sleep in `recv` until
//! [`Core::poll_timeout`], feed what came, and call
//! [`Core::handle_timeout`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::collective::{Collective, Contributions};
use crate::engine::{BarrierConfig, BarrierError, BarrierStats};
use crate::expect::{Bits, Expectations};
use crate::plan::{self, Plan};
use crate::rto::Rto;
use crate::transport::{Msg, NodeId};

mod calls;
mod closing;
mod join;
mod liveness;
mod outbox;
mod progress;
mod receive;
mod recovery;
#[cfg(test)]
mod tests;
mod window;

use calls::Pending;
use closing::Farewell;
use join::Joining;
use liveness::Peer;
use outbox::Outbox;
pub use join::PROTOCOL;

/// What a core needs to know of its network: the facts a
/// [`crate::Transport`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// This node's number (0 admits the others at the join).
    pub me: NodeId,
    /// How many nodes.
    pub nodes: usize,
    /// How many rails the network has (the config may use fewer).
    pub rails: usize,
    /// Whether a [`To::All`] transmit is one message on the wire (else the
    /// driver sends one unicast per peer). The protocol is the same either
    /// way; a simulator charges it accordingly.
    pub multicast: bool,
    /// The most data one message carries beside its [`Msg`] (0: none;
    /// collectives then cannot run).
    pub max_data: usize,
}

/// Where a transmit goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// One node.
    Node(NodeId),
    /// Every other node (a multicast).
    All,
}

/// A message to send, borrowed from the core until the next poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit<'a> {
    /// The rail to send it on.
    pub rail: usize,
    /// Its destination.
    pub to: To,
    /// The message.
    pub msg: Msg,
    /// Its data (empty: none).
    pub data: &'a [u8],
}

/// An application call that may have to wait for peers: started with
/// [`Core::start`], it ends with one [`Event::Done`].
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// Completes the entered barrier, entering one first if none is (after
    /// completing a broadcast left completing in the background). Fails at
    /// `deadline`, if set, with [`BarrierError::Deadline`].
    Wait {
        /// When to give up (the barrier stays entered).
        deadline: Option<Instant>,
    },
    /// Enters the next epoch as `call` with `count` elements of this node's
    /// native-endian `input` (copied), completing a broadcast left
    /// completing in the background first.
    EnterCollective {
        /// The collective.
        call: Collective,
        /// Its element count.
        count: u32,
        /// This node's elements, native-endian.
        input: &'a [u8],
        /// When to give up.
        deadline: Option<Instant>,
    },
    /// Completes the entered collective epoch as far as this node's result
    /// (a broadcast: once the data is here; then it completes in the
    /// background), else as [`Call::Wait`]. Then read
    /// [`Core::collective_result`].
    WaitResult {
        /// When to give up.
        deadline: Option<Instant>,
    },
    /// Enters the closing barrier without waiting for it
    /// ([`crate::Barrier::close`]).
    Close,
    /// The closing protocol ([`crate::Barrier::finish`]): the closing
    /// barrier (entered if `Close` was not called), then answering until
    /// every peer is known to have completed it, or has gone silent.
    Finish,
}

/// What a core reports, polled with [`Core::poll_event`].
#[derive(Debug)]
pub enum Event {
    /// The join completed: this node runs instance `instance`.
    Joined {
        /// The agreed instance.
        instance: u64,
    },
    /// The join failed (timeout, refused, another configuration).
    JoinFailed(BarrierError),
    /// The call started with [`Core::start`] completed, or failed. After an
    /// error the barrier's state is unchanged: the call may be made again.
    Done(Result<(), BarrierError>),
}

/// One node's barrier protocol (see the module docs).
#[derive(Debug)]
pub struct Core {
    setup: Setup,
    config: BarrierConfig,
    /// The plans an epoch can run: the algorithm's ([`window::BASE`]), then a
    /// release-first broadcast's from each root ([`window::bcast_variant`]).
    plans: Vec<Plan>,
    /// The plan of the current epoch (or of the last one, when idle).
    cur: usize,
    /// The plan each epoch ran, by parity (for answers to the previous one).
    variant: [usize; 2],
    /// The current epoch is a broadcast whose result the application has:
    /// it completes in the background (by the progress agent, or the next
    /// call, which completes it first).
    detached: bool,
    /// The application entered a barrier (split phase) while a detached
    /// epoch was still completing: it is entered as soon as that completes.
    queued: bool,
    /// Set while this node, the root of the broadcast completing in the
    /// background, completes it to broadcast again at once: its end is not
    /// sent (the next data implies it).
    end_implied: bool,
    /// The end of the last epoch was not sent: the next data says so.
    end_skipped: bool,
    /// A peer's message of the current epoch belongs to another plan: it
    /// called another collective (the first such, for the error).
    mismatch: Option<String>,
    instance: u64,
    /// Node 0: the low 32 bits of each node's admitted incarnation.
    admitted: Vec<u32>,
    /// The barrier in progress, or the next one when idle; all below are done.
    epoch: u64,
    in_progress: bool,
    step: usize,
    step_sent: bool,
    /// What the plan waits for, indexed.
    expect: Expectations,
    /// What has arrived of barrier e, in `got[e % 2]` (the current and the next).
    got: [Bits; 2],
    /// While in progress: how many waits of each step are still missing.
    remaining: Vec<u32>,
    peers: Vec<Peer>,
    /// When the current step began waiting.
    step_since: Instant,
    next_retry: Instant,
    retry_interval: Duration,
    rto: Rto,
    /// Whether a NACK was sent at once in this step (one per step).
    fast_nacked: bool,
    /// The last barrier in which a loss was seen: multicasts go twice for
    /// [`progress::TWICE_FOR`] barriers after it.
    loss_seen_in: Option<u64>,
    /// The last expected message that an answer delivered first (barrier,
    /// index): if the original follows, nothing was lost.
    last_answered: Option<(u64, usize)>,
    /// Whether a peer asked for a message of this barrier before this node
    /// had sent it: it waits already, so point-to-point messages go twice
    /// (a loss now would cost it a long-backed-off retry).
    asked_early: bool,
    /// This node got here through a recovered loss (see
    /// [`crate::transport::RECOVERED`]) in barrier `recovered_in` or the one
    /// before: a late exit from barrier c makes a late entry into c+1, so
    /// the mark lasts one barrier more.
    recovered_in: Option<u64>,
    /// The silent node this node gave up on in the current barrier.
    gave_up: Option<NodeId>,
    finished: bool,
    /// In the closing protocol (its closing barrier, or after).
    closing: bool,
    /// After the closing barrier: answering until every peer is done.
    farewell: Option<Farewell>,
    /// A barrier was entered (by `enter`, or by a `wait` that then failed)
    /// whose completion `test()` or `wait()` has not yet reported to the
    /// application (it may be complete already, by the progress agent).
    owed: bool,
    /// A peer's "gave up" report arrived (when) since the last verdict.
    report_pending: Option<Instant>,
    /// A peer this step waits for answered a probe with a status: it is
    /// late, not lost. The step's time teaches the retry timeout nothing, and
    /// its retries back off fully.
    peer_late: bool,
    /// Errors `wait`/`test` returned for the current barrier: a report that
    /// a node is silent fails a repeated call only after it, too, has waited
    /// a failure timeout.
    errors: u32,
    /// When the application's current `wait` began: verdicts count only
    /// what happened since, so calling `wait` again after an error waits.
    call_started: Instant,
    stats: BarrierStats,
    /// The collectives' data (see [`crate::collective`]): made when this
    /// node first calls a collective or first hears data; until then
    /// barriers carry none and keep none.
    coll: Option<Box<Contributions>>,
    /// What to send.
    out: Outbox,
    /// What to report.
    events: VecDeque<Event>,
    /// The application's call in progress.
    pending: Option<Pending>,
    /// The join, until it is done.
    joining: Option<Box<Joining>>,
    /// A collective's input, kept while its call settles what came before (reused).
    input: Vec<u8>,
}

impl Core {
    /// A node's core: checks `config` against `setup` and builds the plans.
    /// No traffic until [`join`](Self::join).
    pub fn new(setup: Setup, config: BarrierConfig, now: Instant) -> Result<Core, BarrierError> {
        let (n, me) = (setup.nodes, setup.me);
        if n == 0 || me >= n {
            return Err(BarrierError::Usage(format!("node {me} of {n}: not a valid node")));
        }
        if config.rails == 0 || config.rails > setup.rails {
            return Err(BarrierError::Usage(format!(
                "the barrier wants {} rail(s) but the transport has {}",
                config.rails, setup.rails
            )));
        }
        if config.retry_timeout.is_zero() || config.failure_timeout <= config.retry_timeout {
            return Err(BarrierError::Usage("need 0 < retry timeout < failure timeout".into()));
        }
        if config.first_epoch > u64::MAX / 2 {
            return Err(BarrierError::Usage(format!("first barrier number {} is too close to 2^64", config.first_epoch)));
        }
        if n > u32::MAX as usize / 2 {
            return Err(BarrierError::Usage(format!("{n} nodes: too many")));
        }
        let mut plans = vec![plan::build(config.algorithm, n, me, config.rails).map_err(BarrierError::Usage)?];
        for root in 0..n {
            plans.push(plan::build_bcast(n, me, root, config.rails).map_err(BarrierError::Usage)?);
        }
        let expect = Expectations::new(&plans, n).map_err(BarrierError::Usage)?;
        let steps = plans.iter().map(|p| p.steps.len()).max().unwrap_or(0);
        Ok(Core {
            setup,
            config,
            plans,
            cur: window::BASE,
            variant: [window::BASE; 2],
            detached: false,
            queued: false,
            end_implied: false,
            end_skipped: false,
            mismatch: None,
            instance: 0,
            admitted: Vec::new(),
            epoch: config.first_epoch,
            in_progress: false,
            step: 0,
            step_sent: false,
            got: [Bits::new(expect.len()), Bits::new(expect.len())],
            remaining: vec![0; steps],
            expect,
            peers: vec![Peer::default(); n],
            step_since: now,
            next_retry: now,
            retry_interval: config.retry_timeout,
            rto: Rto::new(config.retry_timeout, config.min_retry_timeout, config.max_learned_retry()),
            fast_nacked: false,
            loss_seen_in: None,
            asked_early: false,
            last_answered: None,
            recovered_in: None,
            gave_up: None,
            finished: false,
            closing: false,
            farewell: None,
            owed: false,
            report_pending: None,
            peer_late: false,
            errors: 0,
            call_started: now,
            stats: BarrierStats::default(),
            coll: None,
            out: Outbox::default(),
            events: VecDeque::new(),
            pending: None,
            joining: None,
            input: Vec::new(),
        })
    }

    /// Starts the join with this process's `incarnation` (from the caller's
    /// random source: a restarted process must draw another, and a node's
    /// later incarnations must be larger, since node 0 keeps the largest it
    /// hears of a node: a delayed request of an earlier one is older).
    /// Node 0 collects every node's and admits them; every other node asks
    /// node 0 until admitted. Ends with [`Event::Joined`] or
    /// [`Event::JoinFailed`] (after [`BarrierConfig::join_timeout`]).
    pub fn join(&mut self, incarnation: u64, now: Instant) {
        self.start_join(incarnation, now);
    }

    /// Joins without the join: this node runs `instance` (tests and
    /// simulators that skip the join; every node must be given the same,
    /// and node 0 then admits no one).
    pub fn joined(&mut self, instance: u64) {
        self.joining = None;
        self.instance = instance;
    }

    /// A message arrived at `now` from node `from` on `rail`, with `data`.
    pub fn handle(&mut self, now: Instant, from: NodeId, rail: usize, msg: Msg, data: &[u8]) {
        let _ = rail;
        if self.joining.is_some() {
            self.join_handle(now, from, msg, data);
            return;
        }
        self.receive(from, msg, data, now);
        self.advance(now);
        self.drive(now, false);
    }

    /// Time has come to `now`: retries, verdicts, deadlines, the farewell's
    /// queries, the join's requests.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.joining.is_some() {
            self.join_timeout(now);
            return;
        }
        self.advance(now);
        if self.pending.is_some() {
            self.drive(now, true);
        } else {
            self.serve(now);
        }
    }

    /// The next message to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit<'_>> {
        self.out.pop()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next, if
    /// anything waits for time (`None`: only a message or a call can change
    /// anything).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some(j) = &self.joining {
            return Some(j.next_timeout());
        }
        let mut next = self.report_pending;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if self.in_progress {
            at(self.next_retry);
        } else if let Some(f) = self.farewell.filter(|f| !f.done) {
            at(f.next_query);
        }
        if let Some(d) = self.pending.as_ref().and_then(|p| p.deadline) {
            at(d);
        }
        next
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Starts a call that may wait for peers; it ends with [`Event::Done`]
    /// (perhaps at once). One call at a time: starting another while one is
    /// pending is a usage error (its own `Done`).
    pub fn start(&mut self, now: Instant, call: Call<'_>) {
        self.start_call(now, call);
    }

    /// Whether a call started with [`start`](Self::start) has not ended yet.
    pub fn busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Gives up the pending call without an event (its driver failed, say,
    /// on a transport error); the protocol's state stays as it is.
    pub fn cancel(&mut self) {
        if self.pending.take().is_some() {
            self.end_implied = false;
            self.errors += 1;
        }
    }

    /// The application enters the next barrier without waiting (split phase).
    pub fn enter(&mut self, now: Instant) -> Result<(), BarrierError> {
        self.enter_split(now)
    }

    /// One round of progress without blocking (feed every message first):
    /// true once no barrier of the application's is in progress.
    pub fn test(&mut self, now: Instant) -> Result<bool, BarrierError> {
        let result = self.test_once(now);
        self.errors += u32::from(result.is_err());
        result
    }

    /// After [`Call::Close`]: the farewell without blocking; true once done.
    pub fn try_finish(&mut self, now: Instant) -> Result<bool, BarrierError> {
        self.try_finish_once(now)
    }

    /// After a collective epoch's [`Call::WaitResult`]: its result into
    /// `out` (native-endian); an error if peers called another collective.
    pub fn collective_result(&mut self, out: Option<&mut [u8]>) -> Result<(), BarrierError> {
        self.result_into(out)
    }

    /// This node leaves (its barrier is dropped): if it gave up on a
    /// barrier, it says why once more (three times, against loss), so that
    /// peers waiting for it name the silent node. Poll the transmits after.
    pub fn leave(&mut self) {
        if self.gave_up.is_some() {
            for _ in 0..3 {
                self.send_status(None);
            }
        }
    }

    /// This node's number.
    pub fn me(&self) -> NodeId {
        self.setup.me
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.peers.len()
    }

    /// The network facts it was made with.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The configuration.
    pub fn config(&self) -> &BarrierConfig {
        &self.config
    }

    /// The agreed instance (0 before the join).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The application's current or next barrier number (a broadcast
    /// completing in the background counts as done).
    pub fn epoch(&self) -> u64 {
        self.epoch + u64::from(self.detached)
    }

    /// The protocol's barrier: the one in progress, or the next one when
    /// none is (every barrier below it is complete here). Unlike
    /// [`epoch`](Self::epoch), a broadcast completing in the background
    /// counts as in progress.
    pub fn protocol_epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether a barrier is in progress in the protocol (entered, not
    /// complete; a broadcast completing in the background is).
    pub fn in_progress(&self) -> bool {
        self.in_progress
    }

    /// Whether the application has a barrier entered and not completed (a
    /// broadcast completing in the background is not one).
    pub fn entered(&self) -> bool {
        self.in_progress && (!self.detached || self.queued)
    }

    /// The counters.
    pub fn stats(&self) -> BarrierStats {
        BarrierStats { retry_timeout: self.rto.get(), ..self.stats }
    }

    fn msg(&self, kind: crate::transport::MsgKind, epoch: u64, tag: u16) -> Msg {
        Msg { kind, instance: self.instance, epoch: epoch as u32, tag, arg: 0 }
    }
}
