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

use std::time::Instant;

use crate::collective::Collective;
use crate::engine::{BarrierConfig, BarrierError, BarrierStats};
use crate::transport::{Msg, NodeId};

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
    _todo: (),
}

impl Core {
    /// A node's core: checks `config` against `setup` and builds the plans.
    /// No traffic until [`join`](Self::join).
    pub fn new(setup: Setup, config: BarrierConfig, now: Instant) -> Result<Core, BarrierError> {
        let _ = (setup, config, now);
        todo!()
    }

    /// Starts the join with this process's `incarnation` (from the caller's
    /// random source: a restarted process must draw another, and a node's
    /// later incarnations must be larger, since node 0 keeps the largest it
    /// hears of a node: a delayed request of an earlier one is older).
    /// Node 0 collects every node's and admits them; every other node asks
    /// node 0 until admitted. Ends with [`Event::Joined`] or
    /// [`Event::JoinFailed`] (after [`BarrierConfig::join_timeout`]).
    pub fn join(&mut self, incarnation: u64, now: Instant) {
        let _ = (incarnation, now);
        todo!()
    }

    /// Joins without the join: every node is told `instance` (tests and
    /// simulators that skip the join; every node must be given the same).
    pub fn joined(&mut self, instance: u64) {
        let _ = instance;
        todo!()
    }

    /// A message arrived at `now` from node `from` on `rail`, with `data`.
    pub fn handle(&mut self, now: Instant, from: NodeId, rail: usize, msg: Msg, data: &[u8]) {
        let _ = (now, from, rail, msg, data);
        todo!()
    }

    /// Time has come to `now`: retries, verdicts, deadlines, the farewell's
    /// queries, the join's requests.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
        todo!()
    }

    /// The next message to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit<'_>> {
        todo!()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next, if
    /// anything waits for time (`None`: only a message or a call can change
    /// anything).
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        todo!()
    }

    /// Starts a call that may wait for peers; it ends with [`Event::Done`]
    /// (perhaps at once). One call at a time: starting another while one is
    /// pending is a usage error (its own `Done`).
    pub fn start(&mut self, now: Instant, call: Call<'_>) {
        let _ = (now, call);
        todo!()
    }

    /// Whether a call started with [`start`](Self::start) has not ended yet.
    pub fn busy(&self) -> bool {
        todo!()
    }

    /// Gives up the pending call without an event (its driver failed, say,
    /// on a transport error); the protocol's state stays as it is.
    pub fn cancel(&mut self) {
        todo!()
    }

    /// The application enters the next barrier without waiting (split phase).
    pub fn enter(&mut self, now: Instant) -> Result<(), BarrierError> {
        let _ = now;
        todo!()
    }

    /// One round of progress without blocking (feed every message first):
    /// true once no barrier of the application's is in progress.
    pub fn test(&mut self, now: Instant) -> Result<bool, BarrierError> {
        let _ = now;
        todo!()
    }

    /// After [`Call::Close`]: the farewell without blocking; true once done.
    pub fn try_finish(&mut self, now: Instant) -> Result<bool, BarrierError> {
        let _ = now;
        todo!()
    }

    /// After a collective epoch's [`Call::WaitResult`]: its result into
    /// `out` (native-endian); an error if peers called another collective.
    pub fn collective_result(&mut self, out: Option<&mut [u8]>) -> Result<(), BarrierError> {
        let _ = out;
        todo!()
    }

    /// This node leaves (its barrier is dropped): if it gave up on a
    /// barrier, it says why once more, so that peers waiting for it name
    /// the silent node. Poll the transmits after.
    pub fn leave(&mut self) {
        todo!()
    }

    /// This node's number.
    pub fn me(&self) -> NodeId {
        todo!()
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        todo!()
    }

    /// The configuration.
    pub fn config(&self) -> &BarrierConfig {
        todo!()
    }

    /// The agreed instance (0 before the join).
    pub fn instance(&self) -> u64 {
        todo!()
    }

    /// The application's current or next barrier number (a broadcast
    /// completing in the background counts as done).
    pub fn epoch(&self) -> u64 {
        todo!()
    }

    /// The protocol's barrier: the one in progress, or the next one when
    /// none is (every barrier below it is complete here). Unlike
    /// [`epoch`](Self::epoch), a broadcast completing in the background
    /// counts as in progress.
    pub fn protocol_epoch(&self) -> u64 {
        todo!()
    }

    /// Whether a barrier is in progress in the protocol (entered, not
    /// complete; a broadcast completing in the background is).
    pub fn in_progress(&self) -> bool {
        todo!()
    }

    /// Whether the application has a barrier entered and not completed.
    pub fn entered(&self) -> bool {
        todo!()
    }

    /// The counters.
    pub fn stats(&self) -> BarrierStats {
        todo!()
    }
}
