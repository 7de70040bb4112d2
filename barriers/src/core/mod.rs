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
//! The protocol itself (every message, state and transition, and the
//! invariants) is described in [`protocol`] (`barriers/PROTOCOL.md`).
//!
//! A blocking call completes in the core; the driver only waits. The
//! blocking driver's loop: start the call; then repeatedly send what is to
//! send, stop at its [`Event::Done`], sleep in `recv` until
//! [`Core::poll_timeout`], feed what came, and call
//! [`Core::handle_timeout`].

use std::sync::Arc;
use std::time::Instant;

use crate::collective::{Collective, Contributions};
use crate::expect::Expectations;
use crate::plan;
use crate::transport::{Msg, NodeId};
use crate::types::{BarrierConfig, BarrierError, BarrierStats};

#[doc = include_str!("../../PROTOCOL.md")]
pub mod protocol {}

mod answers;
mod calls;
mod closing;
mod copies;
mod ends;
mod evidence;
mod heard;
mod join;
mod liveness;
#[cfg(test)]
mod net_tests;
mod outbox;
mod peers;
mod progress;
mod receive;
mod recovery;
mod relay;
#[cfg(test)]
mod tests;
mod times;
mod window;

use calls::Calls;
use closing::Closing;
use ends::Ends;
pub(crate) use join::derived_instance;
use join::Membership;
pub use join::PROTOCOL;
pub use liveness::AppWord;
use liveness::Liveness;
use outbox::Outbox;
pub(crate) use progress::Plans;
use progress::{Phase, Run};
use recovery::Recovery;
use window::{Window, BASE};

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
    /// collectives then cannot run, and the core builds no broadcast plans).
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
        /// Its element count (of this segment: a call longer than one
        /// message runs in segments, one epoch each).
        count: u32,
        /// Whether more segments of the same call follow this one (so that
        /// a node whose call ends here meets a peer's longer call as a
        /// mismatch, in this epoch).
        more: bool,
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

/// One node's barrier protocol (see the module docs). Its state, one
/// concern per part, each with its own module.
#[derive(Debug)]
pub struct Core {
    setup: Setup,
    config: BarrierConfig,
    /// The plans an epoch can run, and what they wait for, indexed.
    plans: Arc<Plans>,
    /// The instance, and the join until it is done.
    member: Membership,
    /// The epoch, its neighbours' arrivals, the plan each ran.
    window: Window,
    /// Where the application is with the current epoch.
    phase: Phase,
    /// The current epoch's progress through its plan.
    run: Run,
    /// Whether a broadcast's end is implied by the next data.
    ends: Ends,
    /// Retries, NACKs and copies.
    recovery: Recovery,
    /// What this node knows of its peers, and its verdicts.
    live: Liveness,
    /// The closing protocol.
    closing: Closing,
    /// The collectives' data (see [`crate::collective`]): made when this
    /// node first calls a collective or first hears data; until then
    /// barriers carry none and keep none.
    coll: Option<Box<Contributions>>,
    /// The application's blocking call in progress.
    calls: Calls,
    /// What to send, and what to report.
    out: Outbox,
    stats: BarrierStats,
}

impl Core {
    /// A node's core: checks `config` against `setup` and builds the plans.
    /// No traffic until [`join`](Self::join).
    pub fn new(setup: Setup, config: BarrierConfig, now: Instant) -> Result<Core, BarrierError> {
        let plans = Core::plans(setup, &config)?;
        Core::with_plans(setup, config, plans, now)
    }

    /// The plans a core of `setup` and `config` runs (checked: see
    /// [`Core::new`]). They depend on the node, the node count, the
    /// algorithm, the rails and whether the network carries data, and never
    /// change: cores of the same may share them ([`Core::with_plans`]; the
    /// simulator makes thousands of cores a second, and building them was
    /// a tenth of its time across the fault mix).
    pub(crate) fn plans(setup: Setup, config: &BarrierConfig) -> Result<Arc<Plans>, BarrierError> {
        let (n, me) = (setup.nodes, setup.me);
        if n == 0 || me >= n {
            return Err(BarrierError::Config(format!("node {me} of {n}: not a valid node")));
        }
        if config.rails == 0 || config.rails > setup.rails {
            return Err(BarrierError::Config(format!("the barrier wants {} rail(s) but the transport has {}", config.rails, setup.rails)));
        }
        if n > u32::MAX as usize / 2 {
            return Err(BarrierError::Config(format!("{n} nodes: too many")));
        }
        let mut plans = vec![plan::build(config.algorithm, n, me, config.rails).map_err(BarrierError::Config)?];
        // A broadcast's plans (one per root) only where one can run: a
        // network that carries no data runs barriers alone, and a core at
        // 4,096 nodes then holds one plan, not 4,097.
        if setup.max_data > 0 {
            for root in 0..n {
                plans.push(plan::build_bcast(n, me, root, config.rails).map_err(BarrierError::Config)?);
            }
            // And a reduce's, where it runs its own plan.
            if plan::reduce_gathers(n) {
                for root in 0..n {
                    plans.push(plan::build_reduce(n, me, root, config.rails).map_err(BarrierError::Config)?);
                }
            }
        }
        let expect = Expectations::new(&plans, n).map_err(BarrierError::Config)?;
        Ok(Arc::new(Plans { list: plans, expect }))
    }

    /// A node's core running `plans`, which [`Core::plans`] made for the
    /// same `setup` and `config`' algorithm and rails (checks `config`
    /// against `setup`, as [`Core::new`] does).
    pub(crate) fn with_plans(setup: Setup, config: BarrierConfig, plans: Arc<Plans>, now: Instant) -> Result<Core, BarrierError> {
        let (n, me) = (setup.nodes, setup.me);
        if n == 0 || me >= n {
            return Err(BarrierError::Config(format!("node {me} of {n}: not a valid node")));
        }
        if config.rails == 0 || config.rails > setup.rails {
            return Err(BarrierError::Config(format!("the barrier wants {} rail(s) but the transport has {}", config.rails, setup.rails)));
        }
        if config.retry_timeout.is_zero() || config.failure_timeout <= config.retry_timeout {
            return Err(BarrierError::Config("need 0 < retry timeout < failure timeout".into()));
        }
        if config.first_epoch > u64::MAX / 2 {
            return Err(BarrierError::Config(format!("first barrier number {} is too close to 2^64", config.first_epoch)));
        }
        if n > u32::MAX as usize / 2 {
            return Err(BarrierError::Config(format!("{n} nodes: too many")));
        }
        let steps = plans.list.iter().map(|p| p.steps.len()).max().unwrap_or(0);
        // (The algorithm's own plan's waits are indexed first.)
        let base_waits = plans.list[BASE].steps.len().checked_sub(1).map_or(0, |last| plans.expect.of_step(BASE, last).end);
        Ok(Core {
            setup,
            config,
            window: Window::new(config.first_epoch, plans.expect.len()),
            run: Run::new(steps),
            plans,
            member: Membership::default(),
            phase: Phase::Idle,
            ends: Ends::Sent,
            recovery: Recovery::new(&config, setup.me, n, steps, base_waits, now),
            live: Liveness::new(n, now),
            closing: Closing::Open,
            coll: None,
            calls: Calls::default(),
            out: Outbox::default(),
            stats: BarrierStats::default(),
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
        self.start_join(incarnation, now, None);
    }

    /// As [`join`](Self::join), for a barrier with another beside it over
    /// the same nodes, configured as `beside`, that runs the instance this
    /// join agrees, derived from it ([`Core::joined`]), without a join of
    /// its own: every node's configuration of both is checked here.
    pub fn join_beside(&mut self, incarnation: u64, now: Instant, beside: &BarrierConfig) {
        self.start_join(incarnation, now, Some(beside));
    }

    /// Joins without the join: this node runs `instance` (tests and
    /// simulators that skip the join; every node must be given the same,
    /// and node 0 then admits no one).
    pub fn joined(&mut self, instance: u64) {
        self.member.joining = None;
        self.member.instance = instance;
    }

    /// A barrier to run beside one that joins now ([`join_beside`](Self::join_beside)
    /// on another core, over the same nodes): until that join gives it its
    /// instance ([`joined_beside`](Self::joined_beside)), it keeps what
    /// comes and answers a peer's probe that it is alive, only not
    /// admitted yet (its peers, admitted first, may run their first
    /// collective: they must not name it silent). It asks nothing and
    /// never times out: the join beside does.
    pub fn await_join(&mut self, now: Instant) {
        self.await_join_beside(now);
    }

    /// The barrier beside, waiting ([`await_join`](Self::await_join)):
    /// the join beside agreed, and this barrier runs `instance` (derived
    /// from that join's); what came meanwhile is taken in now.
    pub fn joined_beside(&mut self, instance: u64, now: Instant) {
        self.note_input(now);
        self.end_wait_beside(instance, now);
        self.advance(now);
        self.drive(now, false);
    }

    /// The application's word on this barrier, for the one beside it (a
    /// pair: see [`AppWord`]): its calls here, and the failure it was told
    /// here and has not called since.
    pub fn app_word(&self) -> AppWord {
        AppWord { calls: self.live.calls, told: self.live.told }
    }

    /// The [`app_word`](Self::app_word) of the barrier beside this one (a
    /// pair), whenever it changes (a word already taken changes nothing):
    /// a call made there clears the failure told here from this barrier's
    /// statuses, and a failure told there and not called since, they say
    /// too (finding j-3; see [`AppWord`]).
    pub fn beside_word(&mut self, now: Instant, word: AppWord) {
        self.take_beside_word(now, word);
    }

    /// Whether this join was refused by node 0 (another process runs in
    /// this node's place, or node 0 runs an earlier barrier still): it asks
    /// on until the join timeout, and answers no probe meanwhile (a peer
    /// waiting for the process in its place names that one silent). The
    /// driver of a pair tells the barrier beside
    /// ([`beside_refused`](Self::beside_refused)).
    pub fn join_refused(&self) -> bool {
        self.join_refused_now()
    }

    /// The barrier beside, waiting ([`await_join`](Self::await_join)):
    /// whether the join beside it is refused now
    /// ([`join_refused`](Self::join_refused)). While it is, this barrier
    /// answers no probe either: its `JOINING` word would keep the peers
    /// waiting there for the process in its place until this join times
    /// out (review rev36, finding 2: 5.25 s where a failure timeout, 200
    /// ms, names the dead process).
    pub fn beside_refused(&mut self, refused: bool) {
        self.set_beside_refused(refused);
    }

    /// Whether node `p`'s messages of this instance ever came here (a
    /// barrier beside another, for the driver of the pair:
    /// [`took_part_beside`](Self::took_part_beside)).
    pub fn heard_in_instance(&self, p: NodeId) -> bool {
        self.live.peers.get(p).is_some_and(|peer| peer.ever_heard())
    }

    /// Whether this node completed a barrier of this instance (each needs
    /// every node's entry).
    pub fn completed_any(&self) -> bool {
        self.stats.completed > 0
    }

    /// Node 0 of a barrier joined with one beside it
    /// ([`join_beside`](Self::join_beside)): node `p` took part in the
    /// instance beside (node 0's barrier there heard it, or completed a
    /// barrier), so its admission is no longer tentative: another
    /// incarnation of it is refused, as when it took part in this instance
    /// (review rev33-2). The driver, which holds both barriers, tells this
    /// core before it hands it a `Join` of `p`; this core cannot see the
    /// other instance.
    pub fn took_part_beside(&mut self, p: NodeId) {
        let n = self.nodes();
        if p >= n {
            return;
        }
        if self.member.took_part_beside.len() != n {
            self.member.took_part_beside = vec![false; n];
        }
        self.member.took_part_beside[p] = true;
    }

    /// A message arrived at `now` from node `from` on `rail`, with `data`.
    #[inline]
    pub fn handle(&mut self, now: Instant, from: NodeId, rail: usize, msg: Msg, data: &[u8]) {
        let _ = rail;
        self.note_input(now);
        self.out.release(now);
        if self.member.joining.is_some() {
            self.join_handle(now, from, msg, data);
            return;
        }
        self.receive(from, msg, data, now);
        self.advance(now);
        self.drive(now, false);
    }

    /// Time has come to `now`: retries, verdicts, deadlines, the farewell's
    /// queries, the join's requests.
    #[inline]
    pub fn handle_timeout(&mut self, now: Instant) {
        self.note_input(now);
        // (Copies spaced in time that are due: see `copies`.)
        self.out.release(now);
        if self.member.joining.is_some() {
            self.join_timeout(now);
            return;
        }
        self.advance(now);
        if self.calls.pending.is_some() {
            self.drive(now, true);
        } else {
            self.serve(now);
        }
    }

    /// Frames addressed to this node were dropped at `now` or before,
    /// unread (its transport's receive ring overflowed:
    /// [`Transport::ring_drops`](crate::Transport::ring_drops)): a message
    /// it waits for may be among them, and it asks again at once rather
    /// than at its backed-off retry timer (at most once per round trip).
    /// Takes effect at the next [`handle_timeout`](Self::handle_timeout).
    pub fn frames_lost(&mut self, now: Instant) {
        self.ring_loss_retry(now);
    }

    /// The next message to send, if any.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Transmit<'_>> {
        self.out.pop()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next, if
    /// anything waits for time (`None`: only a message or a call can change
    /// anything).
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some(j) = &self.member.joining {
            return j.next_timeout();
        }
        let mut next = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if self.phase.running() && !self.live.left_behind {
            // (A peer's report is judged at once. A process left behind
            // retries nothing: see `Core::left_behind`.)
            at(self.live.report_pending.map_or(self.recovery.next_retry, |r| r.min(self.recovery.next_retry)));
        } else if let Closing::Farewell(f) = &self.closing {
            at(f.next_query);
        }
        if let Some(d) = self.calls.pending.as_ref().and_then(|p| p.deadline) {
            at(d);
        }
        if let Some(d) = self.out.next_due() {
            at(d);
        }
        next
    }

    /// The next event, if any.
    #[inline]
    pub fn poll_event(&mut self) -> Option<Event> {
        match self.out.events.pop_front() {
            Some(event) => Some(event),
            None => self.calls.done.take().map(Event::Done),
        }
    }

    /// Whether [`poll_event`](Self::poll_event) has an event (a cheap test
    /// for a driver that polls after every input).
    #[inline]
    pub fn has_event(&self) -> bool {
        !self.out.events.is_empty() || self.calls.done.is_some()
    }

    /// Starts a call that may wait for peers; it ends with [`Event::Done`]
    /// (perhaps at once). One call at a time: starting another while one is
    /// pending is a usage error (its own `Done`).
    #[inline]
    pub fn start(&mut self, now: Instant, call: Call<'_>) {
        self.start_call(now, call);
    }

    /// Whether a call started with [`start`](Self::start) has not ended yet.
    #[inline]
    pub fn busy(&self) -> bool {
        self.calls.pending.is_some()
    }

    /// Gives up the pending call without an event (its driver failed, say,
    /// on a transport error); the protocol's state stays as it is.
    pub fn cancel(&mut self) {
        if self.calls.pending.take().is_some() {
            self.ends = Ends::Sent;
            self.live.errors += 1;
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
        self.live.errors += u32::from(result.is_err());
        if let Err(e) = &result {
            self.note_told(e);
        }
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

    /// Before the [`Call::EnterCollective`] of a collective's next segment
    /// (not its first): a mismatch found in the background in the segment
    /// before ends the call there, without entering, as it ends every
    /// other node's.
    pub fn next_segment(&mut self) {
        self.calls.next_segment = true;
    }

    /// At the end of a collective call whose every segment ran: a mismatch
    /// of an earlier epoch found after its call had returned, kept for this
    /// call to report (its own result is right and delivered). A barrier's
    /// wait reports it itself.
    pub fn deferred_mismatch(&mut self) -> Result<(), BarrierError> {
        self.calls.deferred.take().map_or(Ok(()), Err)
    }

    /// This node leaves (its barrier is dropped): if it gave up on a
    /// barrier, it says why once more, so that peers waiting for it name
    /// the silent node, not this one, which goes silent now. Its last word:
    /// sent as many times as reach every peer with odds of 1 − 10⁻⁶ at 50%
    /// loss (or at the loss seen, if higher: see
    /// `LossEstimate::last_word` in `copies`), since nothing it sends later
    /// can make up for a lost one. Poll the transmits after.
    pub fn leave(&mut self) {
        if self.live.gave_up.is_some() {
            for _ in 0..self.recovery.loss.last_word(self.nodes() - 1) {
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
        self.live.peers.len()
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
        self.member.instance
    }

    /// The application's current or next barrier number (a broadcast
    /// completing in the background counts as done).
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.window.epoch + u64::from(self.phase.background())
    }

    /// The protocol's barrier: the one in progress, or the next one when
    /// none is (every barrier below it is complete here). Unlike
    /// [`epoch`](Self::epoch), a broadcast completing in the background
    /// counts as in progress.
    pub fn protocol_epoch(&self) -> u64 {
        self.window.epoch
    }

    /// Whether a barrier is in progress in the protocol (entered, not
    /// complete; a broadcast completing in the background is).
    pub fn in_progress(&self) -> bool {
        self.phase.running()
    }

    /// Whether the application has a barrier entered and not completed (a
    /// broadcast completing in the background is not one).
    #[inline]
    pub fn entered(&self) -> bool {
        self.phase.entered()
    }

    /// The counters.
    pub fn stats(&self) -> BarrierStats {
        BarrierStats { retry_timeout: self.recovery.rto.most(), ..self.stats }
    }

    fn msg(&self, kind: crate::transport::MsgKind, epoch: u64, tag: u16) -> Msg {
        Msg { kind, instance: self.member.instance, epoch: epoch as u32, tag, arg: 0 }
    }
}
