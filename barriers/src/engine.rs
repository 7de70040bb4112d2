//! The blocking driver: runs a [`crate::core::Core`] over a [`Transport`]
//! (the protocol itself, and its notes, live in [`crate::core`]). The types
//! a barrier's user meets (its configuration, counters and errors) are in
//! `crate::types`, below both the core and this driver.
//!
//! The driver's loop, for every call that waits: start the call in the
//! core; send what it has to send; stop at its outcome; else sleep in the
//! transport's `recv` until the core's next deadline, feed what came (and
//! everything else already there), and tell the core the time.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::collective::{wire, Collective};
use crate::core::{AppWord, Call, Core, Event, Setup, To};
use crate::queue::{Queue, Stage};
use crate::transport::{Incoming, MsgKind, NodeId, Transport, TransportError};
use crate::types::{BarrierConfig, BarrierError, BarrierStats};

/// A new incarnation ([`incarnation_at`] now): a later barrier of a process,
/// or a later process of a node, has a larger one as long as its clock did
/// not step back; the random bits are std's per-process random hash keys,
/// mixed with the time and the pid.
fn new_incarnation() -> u64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(since_epoch.as_nanos());
    h.write_u32(std::process::id());
    incarnation_at(since_epoch, h.finish())
}

/// The incarnation drawn `since_epoch` after 1970 with the random bits
/// `random`: the milliseconds in the top 44 bits (they wrap after 557 years,
/// so a later process of a node always outranks an earlier one, across runs
/// too, as long as the clocks agree), 20 random bits below them, never 0.
fn incarnation_at(since_epoch: std::time::Duration, random: u64) -> u64 {
    let millis = since_epoch.as_millis() as u64 & ((1 << 44) - 1);
    (millis << 20) | (random & 0xF_FFFF) | 1
}

/// How long a join sleeps in its transport's `recv` at most while it
/// serves a barrier beside it ([`Engine::join_paired`]), whose arrivals
/// it cannot wait for in the same call: a probe there is answered within
/// this (its asker retries a retry timeout later, and names no one silent
/// before a failure timeout of silence).
const BESIDE_POLL: Duration = Duration::from_millis(1);

/// One node's barrier: its protocol core driven over transport `T`.
pub(crate) struct Engine<T: Transport> {
    pub(crate) transport: T,
    core: Core,
    /// An error the progress agent met, for the application's next call.
    pub(crate) agent_error: Option<TransportError>,
    /// The nonblocking collectives started and not yet claimed.
    queue: Queue,
    /// The transport's ring drops when last asked ([`Transport::ring_drops`]).
    ring_drops: u64,
    /// One barrier of a pair made by a join with a barrier beside
    /// ([`crate::PreparedBarrier::join_with`]): what each tells the other.
    pair: Option<Box<Pair>>,
}

/// What node 0's barrier beside another saw of its instance, for the one
/// joined (review rev33-2): which nodes it heard, and whether it completed a
/// barrier. Node 0 of the joined barrier admits another incarnation of a
/// node in place of the admitted one only if that node took part in neither
/// instance ([`Core::took_part_beside`]); the cores cannot see each other.
#[derive(Debug)]
struct BesideWord {
    completed: AtomicBool,
    heard: Vec<AtomicBool>,
}

impl BesideWord {
    fn new(nodes: usize) -> BesideWord {
        BesideWord { completed: AtomicBool::new(false), heard: (0..nodes).map(|_| AtomicBool::new(false)).collect() }
    }

    fn took_part(&self, p: NodeId) -> bool {
        self.completed.load(Ordering::Acquire) || self.heard.get(p).is_some_and(|h| h.load(Ordering::Acquire))
    }
}

/// Node 0's side of a pair ([`BesideWord`]).
enum Side {
    /// The joined barrier: reads the word before each `Join`.
    Joined(Arc<BesideWord>),
    /// The barrier beside: writes it (`true` once it told a completion).
    Beside(Arc<BesideWord>, bool),
}

/// One barrier of a pair: on every node, what the application did on each
/// barrier ([`AppWord`], in bits: slot 0 the joined barrier's, 1 the one
/// beside), which the other's core takes before each message (finding j-3:
/// a failure told on either, not called since, is said on both); on node
/// 0, also the word of [`BesideWord`].
struct Pair {
    words: Arc<[AtomicU64; 2]>,
    /// This barrier's slot.
    mine: usize,
    /// This core's word, as last written.
    written: u64,
    /// The other's word, as last taken.
    taken: u64,
    side: Option<Side>,
}

impl Pair {
    /// Before the core takes a message: the word of the barrier beside,
    /// if it changed (its application called there, or was told a failure).
    #[inline]
    fn take_word(&mut self, core: &mut Core, now: Instant) {
        let word = self.words[1 - self.mine].load(Ordering::Acquire);
        if word != self.taken {
            self.taken = word;
            core.beside_word(now, AppWord::from_bits(word));
        }
    }

    /// After the core ran: its word for the barrier beside, if it changed.
    #[inline]
    fn write_word(&mut self, core: &Core) {
        let word = core.app_word().to_bits();
        if word != self.written {
            self.written = word;
            self.words[self.mine].store(word, Ordering::Release);
        }
    }
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
        Ok(Engine { transport, core, agent_error: None, queue: Queue::default(), ring_drops: 0, pair: None })
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
        if let Some(pair) = self.pair.as_deref_mut() {
            pair.write_word(&self.core);
            if let Some(Side::Beside(word, told @ false)) = &mut pair.side {
                if self.core.completed_any() {
                    word.completed.store(true, Ordering::Release);
                    *told = true;
                }
            }
        }
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

    /// Feeds the core every message already there, then tells it if the
    /// transport dropped frames since it last asked (they may have been
    /// for this node: [`Core::frames_lost`]).
    fn drain(&mut self, now: Instant) -> Result<(), TransportError> {
        while let Some(m) = self.transport.recv(Duration::ZERO)? {
            self.feed(now, m);
        }
        let drops = self.transport.ring_drops()?;
        if drops > self.ring_drops {
            self.ring_drops = drops;
            self.core.frames_lost(now);
        }
        Ok(())
    }

    /// Hands the core a message, and tells the transport when it is of this
    /// run (the barrier's instance), so that its sender's session is kept
    /// ([`Transport::confirm_live`]).
    #[inline]
    fn feed(&mut self, now: Instant, m: Incoming) {
        if let Some(pair) = self.pair.as_deref_mut() {
            pair.take_word(&mut self.core, now);
            if let Some(Side::Joined(word)) = &pair.side {
                if m.msg.kind == MsgKind::Join && word.took_part(m.from) {
                    self.core.took_part_beside(m.from);
                }
            }
        }
        self.core.handle(now, m.from, m.rail, m.msg, self.transport.data());
        if let Some(Pair { side: Some(Side::Beside(word, _)), .. }) = self.pair.as_deref() {
            if word.heard.get(m.from).is_some_and(|h| !h.load(Ordering::Relaxed)) && self.core.heard_in_instance(m.from) {
                word.heard[m.from].store(true, Ordering::Release);
            }
        }
        let instance = self.core.instance();
        if instance != 0 && m.msg.instance == instance && !matches!(m.msg.kind, MsgKind::Join | MsgKind::Admit | MsgKind::Refuse) {
            self.transport.confirm_live(m.from, m.rail);
        }
    }

    /// Runs the core from `now` until an event that `take` accepts,
    /// sleeping in `recv` until the core's next deadline.
    fn run<R>(&mut self, now: Instant, take: impl FnMut(Event) -> Option<R>) -> Result<R, BarrierError> {
        self.run_beside(now, None, take)
    }

    /// As [`run`](Self::run), serving `beside` too if given (a barrier
    /// waiting for this one's join: [`Engine::join_paired`]): what came
    /// for it, its timers; this loop then sleeps in this transport's
    /// `recv` for [`BESIDE_POLL`] at most.
    fn run_beside<R>(&mut self, now: Instant, beside: Option<&mut Engine<T>>, mut take: impl FnMut(Event) -> Option<R>) -> Result<R, BarrierError> {
        let result = self.run_inner(now, beside, &mut take);
        if result.is_err() {
            self.core.cancel();
        }
        result?
    }

    fn run_inner<R>(
        &mut self,
        mut now: Instant,
        mut beside: Option<&mut Engine<T>>,
        take: &mut impl FnMut(Event) -> Option<R>,
    ) -> Result<Result<R, BarrierError>, TransportError> {
        loop {
            self.flush()?;
            if let Some(r) = self.take_event(take) {
                return Ok(Ok(r));
            }
            // Read before judging: whatever has arrived counts before any
            // timer (this thread may have been descheduled for long).
            self.drain(now)?;
            self.flush()?;
            if let Some(b) = beside.as_deref_mut() {
                // (Refused, this join asks on and answers no probe: nor
                // does the barrier beside. Review rev36, finding 2.)
                b.core.beside_refused(self.core.join_refused());
                b.drain(now)?;
                b.core.handle_timeout(now);
                b.flush()?;
            }
            if let Some(r) = self.take_event(take) {
                return Ok(Ok(r));
            }
            self.core.handle_timeout(now);
            self.flush()?;
            if let Some(r) = self.take_event(take) {
                return Ok(Ok(r));
            }
            let mut wait = self.core.poll_timeout().map_or(Duration::from_secs(3600), |t| t.saturating_duration_since(now));
            if beside.is_some() {
                wait = wait.min(BESIDE_POLL);
            }
            let incoming = self.transport.recv(wait)?;
            now = Instant::now();
            if let Some(m) = incoming {
                self.feed(now, m);
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

    /// Runs a blocking call to its end (after the nonblocking collectives
    /// started before it: they come first, in MPI's order too).
    fn call(&mut self, call: Call<'_>) -> Result<(), BarrierError> {
        self.settle_queue()?;
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
    /// `beside`: the configuration of a barrier made beside this one on
    /// the instance this join agrees, derived ([`Engine::joined_as`]).
    pub(crate) fn join(&mut self, beside: Option<&BarrierConfig>) -> Result<(), BarrierError> {
        let now = Instant::now();
        match beside {
            Some(beside) => self.core.join_beside(new_incarnation(), now, beside),
            None => self.core.join(new_incarnation(), now),
        }
        let result = self.run(now, |e| match e {
            Event::Joined { .. } => Some(Ok(())),
            Event::JoinFailed(e) => Some(Err(e)),
            Event::Done(_) => None,
        })?;
        result.map_err(|e| self.explain_join(e))
    }

    /// Joins as [`join`](Self::join) with `beside` made beside this one
    /// (over the same nodes), serving it meanwhile: until the join agrees,
    /// `beside` keeps what comes and answers its peers' probes that it is
    /// alive ([`Core::await_join`]; else peers admitted first, running
    /// their first collective there, name it silent while node 0 is out of
    /// reach: finding j-1). Then [`joined_as`](Self::joined_as) gives it
    /// its instance.
    pub(crate) fn join_paired(&mut self, beside: &mut Engine<T>) -> Result<(), BarrierError> {
        let now = Instant::now();
        beside.core.await_join(now);
        let config = *beside.core.config();
        self.core.join_beside(new_incarnation(), now, &config);
        let result = self.run_beside(now, Some(beside), |e| match e {
            Event::Joined { .. } => Some(Ok(())),
            Event::JoinFailed(e) => Some(Err(e)),
            Event::Done(_) => None,
        })?;
        result.map_err(|e| self.explain_join(e))
    }

    /// Runs `instance` without a join: the instance derived from that of a
    /// barrier over the same nodes that was joined beside this one (which
    /// it waited for: [`join_paired`](Self::join_paired)); what came for it
    /// meanwhile is taken in now.
    pub(crate) fn joined_as(&mut self, instance: u64) {
        let now = Instant::now();
        self.core.joined_beside(instance, now);
        let _ = self.flush();
    }

    /// A pair made by a join with a barrier beside: `self` the joined
    /// barrier, `beside` the barrier beside it. Each tells the other what
    /// the application did on it ([`AppWord`], finding j-3); on node 0,
    /// `beside` also tells `self` the nodes that took part in its instance
    /// (review rev33-2).
    pub(crate) fn pair_with(&mut self, beside: &mut Engine<T>) {
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let (mut joined, mut other) =
            (Pair { words: words.clone(), mine: 0, written: 0, taken: 0, side: None }, Pair { words, mine: 1, written: 0, taken: 0, side: None });
        if self.core.me() == 0 {
            let word = Arc::new(BesideWord::new(self.core.nodes()));
            joined.side = Some(Side::Joined(word.clone()));
            other.side = Some(Side::Beside(word, false));
        }
        self.pair = Some(Box::new(joined));
        beside.pair = Some(Box::new(other));
    }

    /// A join timeout, with what the transport dropped of the missing
    /// nodes' frames (failed authentication, another wire version): the
    /// core cannot see those, the transport can.
    fn explain_join(&mut self, error: BarrierError) -> BarrierError {
        match error {
            BarrierError::JoinTimeout { missing, nodes, waited, .. } => {
                let counts = |count: &dyn Fn(NodeId) -> u64| missing.iter().map(|&j| (j, count(j))).filter(|&(_, c)| c > 0).collect();
                let bad_tags = counts(&|j| self.transport.bad_tags_from(j));
                let auth_mismatch = counts(&|j| self.transport.auth_mismatch_from(j));
                let bad_version = self.transport.bad_version();
                BarrierError::JoinTimeout { missing, nodes, waited, bad_tags, auth_mismatch, bad_version }
            }
            other => other,
        }
    }

    /// Enters the next barrier as an epoch of `call` with `count` elements
    /// of this node's `input` (native-endian; see [`crate::collective`]).
    /// A broadcast still completing in the background is completed first
    /// (up to `deadline`). `more`: segments of the call follow this one.
    pub(crate) fn enter_collective(
        &mut self,
        call: Collective,
        count: u32,
        more: bool,
        input: &[u8],
        deadline: Option<Instant>,
    ) -> Result<(), BarrierError> {
        self.call(Call::EnterCollective { call, count, more, input, deadline })
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

    /// See [`Core::next_segment`].
    pub(crate) fn next_segment(&mut self) {
        self.core.next_segment();
    }

    /// See [`Core::deferred_mismatch`].
    pub(crate) fn deferred_mismatch(&mut self) -> Result<(), BarrierError> {
        self.core.deferred_mismatch()
    }

    /// The application enters the next barrier (split phase).
    pub(crate) fn enter_split(&mut self) -> Result<(), BarrierError> {
        self.settle_queue()?;
        let result = self.core.enter(Instant::now());
        self.flush()?;
        result
    }

    /// One round of progress without blocking: true once no barrier is in progress.
    pub(crate) fn test(&mut self) -> Result<bool, BarrierError> {
        self.agent_error()?;
        self.settle_queue()?;
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
            self.pump(now);
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

    /// Whether collective `id` (just started) is on the wire: every one
    /// queued before it is done and its first segment's epoch is entered
    /// (so what this node sends at that step has gone), or it is done
    /// itself. A broadcast completing in the background before it (its end
    /// comes with the root's next data) does not hold it back once it came;
    /// unless `entered`, its entry under way counts too (what came will
    /// take it in).
    pub(crate) fn on_the_wire(&mut self, id: u64, entered: bool) -> bool {
        self.queue.running().is_none_or(|op| op.id == id && op.stage != Stage::Idle && !(entered && matches!(op.stage, Stage::Entering { .. })))
    }

    /// Queues the nonblocking collective `call` with this node's `input`
    /// (copied; the result wanted here or not) and starts it on the wire if
    /// no earlier one is still running. Its number, for
    /// [`poll_op`](Self::poll_op).
    pub(crate) fn start_op(&mut self, call: Collective, input: &[u8], result_here: bool) -> Result<u64, BarrierError> {
        let id = self.queue.push(call, input, result_here);
        self.transport.in_use();
        let now = Instant::now();
        // What came already counts (the peers' arrivals, when this node is
        // the last: then it completes here, with no one left to wake).
        self.drain(now)?;
        self.pump(now);
        self.flush()?;
        Ok(id)
    }

    /// Takes the queued collectives as far as they go at `now` without
    /// blocking: the oldest one without an outcome runs on the core, one
    /// core call at a time (enter the segment's epoch, wait for its result,
    /// read it; a barrier: one wait); when it ends, the next one starts.
    /// Whoever holds the engine calls it: the application's calls, and the
    /// progress agent's rounds. Send what it queued afterwards.
    fn pump(&mut self, now: Instant) {
        let Engine { core, queue, .. } = self;
        while let Some(op) = queue.running() {
            if op.stage == Stage::Idle {
                if op.deadline.is_none() {
                    op.deadline = core.config().deadline.map(|d| now + d);
                }
                if op.call == Collective::Barrier {
                    core.start(now, Call::Wait { deadline: op.deadline });
                    op.stage = Stage::Barrier;
                } else {
                    let size = op.call.element_size();
                    let per_segment = core.setup().max_data.saturating_sub(wire::HEADER_LEN) / size * size;
                    if per_segment == 0 {
                        op.outcome = Some(Err(BarrierError::NoData { call: op.call }));
                        continue;
                    }
                    let end = (op.next + per_segment).min(op.input.len());
                    let count = u32::try_from((end - op.next) / size).expect("a segment's count fits one message");
                    if op.next > 0 {
                        core.next_segment();
                    }
                    let more = end < op.input.len();
                    core.start(now, Call::EnterCollective { call: op.call, count, more, input: &op.input[op.next..end], deadline: op.deadline });
                    op.stage = Stage::Entering { end };
                }
            }
            // The core runs this collective's call: its outcome, if any yet.
            let mut done = None;
            while let Some(event) = core.poll_event() {
                if let Event::Done(result) = event {
                    done = Some(result);
                }
            }
            let Some(result) = done else { return };
            match (result, op.stage) {
                (Err(e), _) => {
                    op.stage = Stage::Idle;
                    op.outcome = Some(Err(e));
                }
                (Ok(()), Stage::Entering { end }) => {
                    core.start(now, Call::WaitResult { deadline: op.deadline });
                    op.stage = Stage::Result { end };
                }
                (Ok(()), Stage::Result { end }) => {
                    let out = (!op.output.is_empty()).then(|| &mut op.output[op.next..end]);
                    op.stage = Stage::Idle;
                    match core.collective_result(out) {
                        Err(e) => op.outcome = Some(Err(e)),
                        Ok(()) => {
                            op.next = end;
                            op.ran = true;
                            if op.next >= op.input.len() {
                                op.outcome = Some(core.deferred_mismatch());
                            }
                        }
                    }
                }
                (Ok(()), Stage::Barrier | Stage::Idle) => op.outcome = Some(Ok(())),
            }
        }
    }

    /// Collective `id` (from [`start_op`](Self::start_op)) without
    /// blocking: progress first (what came, the timers, the queue), then
    /// its outcome if it has one (its result into `out`), and it is
    /// forgotten. `Ok(None)`: not yet.
    pub(crate) fn poll_op(&mut self, id: u64, out: Option<&mut [u8]>) -> Result<Option<Result<(), BarrierError>>, BarrierError> {
        if !self.queue.busy() {
            return Ok(self.queue.claim(id, out));
        }
        self.agent_error()?;
        self.transport.in_use();
        let now = Instant::now();
        self.drain(now)?;
        self.core.handle_timeout(now);
        self.pump(now);
        self.flush()?;
        Ok(self.queue.claim(id, out))
    }

    /// Collective `id`: as [`poll_op`](Self::poll_op) until it has an
    /// outcome, or until `until` at most if given (`Ok(None)`: no outcome
    /// yet), sleeping in the transport's `recv` until something comes or
    /// a timer is due.
    pub(crate) fn wait_op(
        &mut self,
        id: u64,
        mut out: Option<&mut [u8]>,
        until: Option<Instant>,
    ) -> Result<Option<Result<(), BarrierError>>, BarrierError> {
        loop {
            if let Some(outcome) = self.poll_op(id, out.as_deref_mut())? {
                return Ok(Some(outcome));
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return Ok(None);
            }
            self.sleep_once_until(until)?;
        }
    }

    /// Sleeps in the transport's `recv` until a message comes (fed to the
    /// core) or the core's next timer.
    fn sleep_once(&mut self) -> Result<(), BarrierError> {
        self.sleep_once_until(None)
    }

    /// As [`sleep_once`](Self::sleep_once), and until `until` at most.
    fn sleep_once_until(&mut self, until: Option<Instant>) -> Result<(), BarrierError> {
        let now = Instant::now();
        let timer = self.core.poll_timeout().map_or(now + Duration::from_millis(100), |t| t);
        let wait = until.map_or(timer, |u| u.min(timer)).saturating_duration_since(now);
        if let Some(m) = self.transport.recv(wait)? {
            self.feed(Instant::now(), m);
        }
        Ok(())
    }

    /// Runs every queued collective to its outcome (kept for its handle),
    /// before a blocking call.
    fn settle_queue(&mut self) -> Result<(), BarrierError> {
        while self.queue.busy() {
            let now = Instant::now();
            self.drain(now)?;
            self.core.handle_timeout(now);
            self.pump(now);
            self.flush()?;
            if self.queue.busy() {
                self.sleep_once()?;
            }
        }
        Ok(())
    }

    /// Forgets collective `id` once it is done (its handle is gone).
    pub(crate) fn abandon_op(&mut self, id: u64) {
        self.queue.abandon(id);
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

#[cfg(test)]
mod rev27_tests {
    use super::incarnation_at;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// Finding 1 (rev27): the incarnation kept 40 bits of microseconds and
    /// wrapped every 12.7 days, so a Join recorded before the last wrap
    /// outranked every live one. Now a later draw outranks every earlier one,
    /// whatever the random bits, back to any recording a year old.
    #[test]
    fn rev27_an_incarnation_drawn_now_is_larger_than_any_drawn_earlier() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let live = incarnation_at(now, 0);
        for ago_ms in [1u64, 1_000, 86_400_000, 1_099_511_628, 1_099_511_627_776 / 1_000 + 1, 365 * 86_400_000] {
            let earlier = incarnation_at(now - Duration::from_millis(ago_ms), u64::MAX);
            assert!(live > earlier, "an incarnation drawn {ago_ms} ms ago ({earlier:#x}) outranks one drawn now ({live:#x})");
        }
        assert_ne!(incarnation_at(Duration::ZERO, 0), 0, "an incarnation is never 0");
    }
}
