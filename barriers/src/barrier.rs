//! The public barrier: the engine behind a lock, and its progress agent.
//!
//! **The progress agent** is a thread that answers peers while the
//! application is outside the barrier: computing for minutes, inside other
//! MPI calls, or done with its last barrier while a peer's release was lost.
//! It costs nothing on the barrier's hot path (one atomic increment on the
//! way in and out of each call, and an uncontended lock). It waits until the
//! application has stayed out of the barrier for a whole grace period
//! ([`AGENT_GRACE`], growing to [`AGENT_GRACE_MAX`] while the application
//! keeps calling), then sleeps in the kernel on the transport's
//! [`Waker`] and wakes only when a message arrives, a retry of a
//! split-phase barrier is due, or the transport must make itself known
//! ([`Transport::keepalive_every`]: an mcd endpoint that has sent nothing
//! for its announcement period announces its MAC, so that a switch port
//! stolen while the application computes comes back); it hands over as
//! soon as the application calls in again. So a peer that is slow is always heard (it answers
//! probes), and only a peer that is silent, its process gone or stopped,
//! is taken for dead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::collective::{wire, Collective, Element, Op};
use crate::engine::Engine;
use crate::transport::{NodeId, Transport, Waker};
use crate::types::{BarrierConfig, BarrierError, BarrierStats};

/// The agent takes over once the application has made no barrier call for
/// this long (at first: see [`AGENT_GRACE_MAX`]).
pub const AGENT_GRACE: Duration = Duration::from_millis(1);
/// While the application keeps calling, the agent checks ever less often,
/// doubling its grace up to this: a wake-up that preempts a busy-polling
/// thread costs that barrier tens of microseconds.
pub const AGENT_GRACE_MAX: Duration = Duration::from_millis(16);

struct Shared<T: Transport> {
    engine: Mutex<Engine<T>>,
    /// Barrier calls, counted on the way in and on the way out: odd while
    /// the application is inside one.
    calls: AtomicU64,
    stop: AtomicBool,
    waker: Arc<dyn Waker>,
    /// Set when a nonblocking collective starts, to the call count its
    /// start left (even, so never 0 once set; 0: no start pending): the
    /// agent, woken, serves at once without waiting out its grace if the
    /// application has not called since (it computes until it tests or
    /// waits); if it has (a wait at once, the usual case), the application
    /// drives the collective itself and the agent stays out of its way.
    hurry_at: AtomicU64,
    /// Whether such a start wakes the agent at once: as the application
    /// used the last one. One waited at once, or tested at once until it
    /// completed (a benchmark's loop, or a program with nothing to
    /// overlap), needs no agent, whose
    /// wake-up then only takes a core from a peer: on 2 cores, 4 ranks'
    /// agents woken at every start made issue 28's 4-rank `MPI_Ibarrier`
    /// and `MPI_Iallreduce` 2-4× their blocking forms (never woken:
    /// 1.1-1.3×). One the application left to compute turns it back on.
    /// The application's own next call judges ([`Shared::app_call`]): the
    /// agent, woken, would race it (it judged before a debug build's wait
    /// began, and woke at every start).
    wake_at_start: AtomicBool,
    /// When the last start that asked for the agent was made, in ns since
    /// `origin` (0: none waiting to be judged by the next call).
    started_ns: AtomicU64,
    /// The clock's origin for `started_ns`.
    origin: Instant,
    /// How many starts woke the agent ([`BarrierStats::agent_hurried`]).
    hurried: AtomicU64,
}

/// A start's next call within this long waited or tested it at once: the
/// application drives that collective itself ([`Shared::wake_at_start`]).
const AT_ONCE: Duration = Duration::from_micros(200);

impl<T: Transport> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Engine<T>> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the engine as the application (the agent stands aside).
    /// The first call after a start that asked for the agent says how the
    /// application uses its starts ([`Shared::wake_at_start`]).
    fn app_call<R>(&self, f: impl FnOnce(&mut Engine<T>) -> R) -> R {
        self.judged_call(f, |_| true)
    }

    /// As [`app_call`](Self::app_call), for a call that may leave the
    /// start's use undecided: `settles` says, from its result, whether it
    /// did decide it (a test that found the collective complete or failed;
    /// every other call does). A call within [`AT_ONCE`] of the start (or of
    /// such an undecided call) that settles it says "used at once"; one
    /// that does not (MPI's idiom: start, test at once, compute, wait) hands
    /// the judgement on to the application's next call, timed from it, so
    /// the wait after the computation says "left to compute" (review rev32,
    /// finding 4: the test took the judgement, and the agent stayed asleep
    /// at every later start). Any call later than [`AT_ONCE`] says "left to
    /// compute".
    fn judged_call<R>(&self, f: impl FnOnce(&mut Engine<T>) -> R, settles: impl FnOnce(&R) -> bool) -> R {
        self.calls.fetch_add(1, Ordering::AcqRel);
        let mut at_once = false;
        if self.started_ns.load(Ordering::Relaxed) != 0 {
            let started = self.started_ns.swap(0, Ordering::AcqRel);
            if started != 0 {
                let since = self.ns_since_origin().saturating_sub(started);
                at_once = since <= AT_ONCE.as_nanos() as u64;
                if !at_once {
                    self.wake_at_start.store(true, Ordering::Release);
                }
            }
        }
        let result = f(&mut self.lock());
        let undecided = at_once && !settles(&result);
        if at_once && !undecided {
            self.wake_at_start.store(false, Ordering::Release);
        }
        let calls = self.calls.fetch_add(1, Ordering::AcqRel) + 1;
        if undecided {
            // The next call judges, timed from this one (a start made
            // meanwhile set its own time: it wins); and the agent, woken
            // by the start, serves unless the application calls again
            // ([`Shared::hurry_at`]): this call did not drive the
            // collective to its end.
            let _ = self.started_ns.compare_exchange(0, self.ns_since_origin(), Ordering::AcqRel, Ordering::Relaxed);
            self.hurry_at.store(calls, Ordering::Release);
        }
        result
    }

    /// Nanoseconds since `origin`, at least 1.
    fn ns_since_origin(&self) -> u64 {
        (self.origin.elapsed().as_nanos() as u64).max(1)
    }
}

/// A barrier over transport `T` among all of its nodes: [`wait`](Barrier::wait),
/// or split-phase [`enter`](Barrier::enter) then [`test`](Barrier::test) /
/// [`wait`](Barrier::wait); [`finish`](Barrier::finish) after the last one.
///
/// Creating one is collective: every node creates it, and the nodes agree on
/// a fresh instance, so nothing of an earlier barrier on the same transport
/// (or of a crashed process's) ever counts.
pub struct Barrier<T: Transport + Send + 'static> {
    shared: Arc<Shared<T>>,
    agent: Option<JoinHandle<()>>,
    me: NodeId,
    nodes: usize,
    config: BarrierConfig,
    /// The typed collectives' elements as bytes, in and out (reused).
    bytes_in: Vec<u8>,
    bytes_out: Vec<u8>,
    /// The most data one message carries (the transport's, read once).
    max_data: usize,
    /// Whether this node's plan sends only in its first step (one-phase;
    /// shuffle exchange and dissemination at 2 nodes): then a started
    /// barrier or one-segment reduction has sent all this node will send
    /// by the time [`start`](Self::start) returns, and completes here by
    /// what arrives, with no step of this node's left to drive.
    sends_at_entry_only: bool,
}

impl<T: Transport + Send + 'static> std::fmt::Debug for Barrier<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier").field("algorithm", &self.config.algorithm).field("node", &self.me).field("nodes", &self.nodes).finish()
    }
}

impl<T: Transport + Send + 'static> Barrier<T> {
    /// A barrier over `transport`. Blocks until every node has created its
    /// own (up to [`BarrierConfig::join_timeout`]). The same as
    /// [`PreparedBarrier::new`] then [`PreparedBarrier::join`].
    pub fn new(transport: T, config: BarrierConfig) -> Result<Barrier<T>, BarrierError> {
        PreparedBarrier::new(transport, config)?.join()
    }

    fn joined(mut engine: Engine<T>, waker: Arc<dyn Waker>, config: BarrierConfig) -> Result<Barrier<T>, BarrierError> {
        engine.join(None)?;
        engine.transport.all_joined();
        Barrier::started(engine, waker, config)
    }

    /// The barrier of a joined `engine` (its transport told so): its
    /// progress agent started.
    fn started(engine: Engine<T>, waker: Arc<dyn Waker>, config: BarrierConfig) -> Result<Barrier<T>, BarrierError> {
        let (me, nodes, max_data) = (engine.me(), engine.nodes(), engine.max_data());
        let sends_at_entry_only = crate::plan::build(config.algorithm, nodes, me, config.rails)
            .is_ok_and(|plan| plan.steps.iter().skip(1).all(|step| step.sends.is_empty()));
        let shared = Arc::new(Shared {
            engine: Mutex::new(engine),
            calls: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            waker,
            hurry_at: AtomicU64::new(0),
            wake_at_start: AtomicBool::new(true),
            started_ns: AtomicU64::new(0),
            origin: Instant::now(),
            hurried: AtomicU64::new(0),
        });
        let agent = if config.progress_agent && nodes > 1 {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("mcd-agent-{me}"))
                .spawn(move || run_agent(&shared))
                .map_err(|e| BarrierError::System(format!("cannot start the progress agent thread: {e}")))?;
            Some(thread)
        } else {
            None
        };
        Ok(Barrier { shared, agent, me, nodes, config, bytes_in: Vec::new(), bytes_out: Vec::new(), max_data, sends_at_entry_only })
    }

    /// Runs `f` on the engine as the application (the agent stands aside).
    fn call<R>(&mut self, f: impl FnOnce(&mut Engine<T>) -> R) -> R {
        self.shared.app_call(f)
    }

    /// This node's number.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The configuration.
    pub fn config(&self) -> &BarrierConfig {
        &self.config
    }

    /// The instance number the nodes agreed on.
    pub fn instance(&self) -> u64 {
        self.shared.lock().instance()
    }

    /// The number of the current barrier, or of the next one when none is in
    /// progress (the barriers completed, plus [`BarrierConfig::first_epoch`]).
    pub fn epoch(&self) -> u64 {
        self.shared.lock().app_epoch()
    }

    /// Whether a barrier has been entered and not yet completed (a
    /// broadcast that completes in the background does not count).
    pub fn in_progress(&self) -> bool {
        self.shared.lock().entered()
    }

    /// The counters.
    pub fn stats(&self) -> BarrierStats {
        let hurried = self.shared.hurried.load(Ordering::Relaxed);
        BarrierStats { agent_hurried: hurried, ..self.shared.lock().stats() }
    }

    /// Runs `f` on the transport (for its statistics, say).
    pub fn with_transport<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        self.call(|e| f(&mut e.transport))
    }

    /// Enters the next barrier without waiting for it (MPI_Ibarrier's start,
    /// seed 003's `barrier_post`). Complete it with [`test`](Self::test) or
    /// [`wait`](Self::wait); meanwhile the progress agent carries it on.
    pub fn enter(&mut self) -> Result<(), BarrierError> {
        self.call(|e| e.enter_split())
    }

    /// Makes progress without blocking; true once the entered barrier is
    /// complete (also when none was entered).
    pub fn test(&mut self) -> Result<bool, BarrierError> {
        self.call(|e| e.test())
    }

    /// Completes the entered barrier, entering one first if none is in
    /// progress. Waits for live peers as long as they take; fails when a
    /// peer it waits for is silent for the failure timeout, or at the
    /// deadline if one is set. After an error the barrier is still entered,
    /// and calling `wait` again keeps waiting.
    pub fn wait(&mut self) -> Result<(), BarrierError> {
        let deadline = self.config.deadline.map(|d| Instant::now() + d);
        self.call(|e| e.wait(deadline))
    }

    /// Allreduce (see [`crate::collective`]): `data` holds this node's
    /// elements, and on return the elements reduced with `op` over every
    /// node, in the plan's fixed order (bitwise the same on every node).
    /// Every node calls it with the same operation and length.
    pub fn allreduce<E: Element>(&mut self, data: &mut [E], op: Op) -> Result<(), BarrierError> {
        self.typed(data, Collective::Allreduce { op, dtype: E::DTYPE }, true)
    }

    /// Reduce to `root`: as [`allreduce`](Self::allreduce), but only
    /// `root`'s `data` receives the result; the others' stays as it was.
    pub fn reduce<E: Element>(&mut self, data: &mut [E], op: Op, root: NodeId) -> Result<(), BarrierError> {
        self.typed(data, Collective::Reduce { op, dtype: E::DTYPE, root }, self.me == root)
    }

    /// Broadcast: `root`'s `data` into every node's `data` (of the same
    /// length). Returns once this node has the data (the root: once it has
    /// sent it); the epoch completes in the background, and the next call
    /// completes it first (see [`crate::collective`]).
    pub fn bcast<E: Element>(&mut self, data: &mut [E], root: NodeId) -> Result<(), BarrierError> {
        self.typed(data, Collective::Bcast { root }, self.me != root)
    }

    /// Runs a typed collective in place (the result into `data` if `result_here`).
    fn typed<E: Element>(&mut self, data: &mut [E], call: Collective, result_here: bool) -> Result<(), BarrierError> {
        self.bytes_in.clear();
        data.iter().for_each(|x| x.put(&mut self.bytes_in));
        let input = std::mem::take(&mut self.bytes_in);
        let mut out = std::mem::take(&mut self.bytes_out);
        out.clear();
        out.resize(input.len(), 0);
        let result = self.collective(call, &input, result_here.then_some(&mut out[..]));
        if result.is_ok() && result_here {
            for (x, b) in data.iter_mut().zip(out.chunks_exact(E::DTYPE.size())) {
                *x = E::get(b);
            }
        }
        (self.bytes_in, self.bytes_out) = (input, out);
        result
    }

    /// A collective on bytes (the C ABI's): `input` is this node's
    /// native-endian elements (for a broadcast, the root's bytes; others'
    /// are ignored), `output`, of the same length, receives the result where
    /// the call has one for this node (`None`: not wanted). Data longer than
    /// one message goes in segments of whole elements, one epoch each.
    pub fn collective(&mut self, call: Collective, input: &[u8], mut output: Option<&mut [u8]>) -> Result<(), BarrierError> {
        call.check(self.nodes).map_err(BarrierError::Misuse)?;
        let size = call.element_size();
        if call == Collective::Barrier {
            return self.wait();
        }
        if !input.len().is_multiple_of(size) || output.as_ref().is_some_and(|o| o.len() != input.len()) {
            return Err(BarrierError::Misuse(format!(
                "{call}: {} input bytes and {} output bytes: need whole {size}-byte elements, as many out as in",
                input.len(),
                output.as_ref().map_or(0, |o| o.len())
            )));
        }
        let per_segment = self.max_data.saturating_sub(wire::HEADER_LEN) / size * size;
        if per_segment == 0 {
            return Err(BarrierError::NoData { call });
        }
        let deadline = self.config.deadline.map(|d| Instant::now() + d);
        let mut start = 0;
        loop {
            let end = (start + per_segment).min(input.len());
            let count = u32::try_from((end - start) / size).expect("a segment's count fits one message");
            let out = output.as_deref_mut().map(|o| &mut o[start..end]);
            let later = start > 0;
            self.call(|e| {
                if later {
                    e.next_segment();
                }
                e.enter_collective(call, count, end < input.len(), &input[start..end], deadline)?;
                e.wait_result(deadline)?;
                e.collective_result(out)
            })?;
            start = end;
            if start >= input.len() {
                return self.call(|e| e.deferred_mismatch());
            }
        }
    }

    /// Starts the nonblocking collective `call` (MPI_Ibarrier,
    /// MPI_Iallreduce...) with this node's native-endian `input` (copied at
    /// once; for a barrier, empty; for a broadcast, the root's data, and
    /// any bytes of the same length elsewhere) and returns at once, never
    /// waiting for a peer. Collectives started on one barrier run in the
    /// order they were started, one after the other, each as its blocking
    /// form would (segments and all); a blocking call on the barrier runs
    /// the ones started before it first. Whoever holds the barrier drives
    /// them: the calls of the application ([`Request::test`], ...), and
    /// meanwhile the progress agent, woken at once for it unless the
    /// application tested or waited at once after the last such start
    /// (then the agent serves after its grace period if the application
    /// stays out that long, and wakes at once again from then on). Complete it with
    /// [`Request::test`] or [`Request::wait`].
    ///
    /// The start itself takes the first step in the caller's thread: what
    /// came already is read, and this node's arrival (with its data) is on
    /// the wire when `start` returns. When that was all this node sends
    /// for the call before it is complete here ([`eager_only`](Self::eager_only):
    /// a one-round plan, a broadcast, or a reduce on its own plan, one
    /// segment, and the start put it on the wire: whatever was queued
    /// before it done), the agent is not woken: the
    /// call completes by what arrives, which the next test or wait reads
    /// from the rings, so it completes while the program computes even
    /// when no core is free for the agent (2 ranks computing on 2 cores).
    /// The agent still takes over after its grace period if the program
    /// stays out that long: retries after a loss, answers to peers' NACKs
    /// and probes, and the failure timeout are its as ever.
    pub fn start(&mut self, call: Collective, input: &[u8]) -> Result<Request<T>, BarrierError> {
        call.check(self.nodes).map_err(BarrierError::Misuse)?;
        let size = call.element_size();
        if (size == 0 && !input.is_empty()) || (size > 0 && !input.len().is_multiple_of(size)) {
            return Err(BarrierError::Misuse(format!("{call}: {} input bytes: need whole {size}-byte elements", input.len())));
        }
        let result_here = match call {
            Collective::Barrier => false,
            Collective::Allreduce { .. } => true,
            Collective::Reduce { root, .. } => root == self.me,
            Collective::Bcast { root } => root != self.me,
        };
        let eager_only = self.eager_only(call, input.len());
        // What this node sends goes at its entry, which may wait for the
        // epoch before, completing in the background (a broadcast's or
        // reduce's end, or a root's wait for the entries into it): then
        // the agent must send it as soon as that completes, since no
        // peer's message makes this node's next test come sooner. But a
        // broadcast's non-root: what it waits for (the root's data) brings
        // its root's end before, and its own entry is on nobody's path but
        // the root's background end.
        let entered = !matches!(call, Collective::Bcast { root } if root != self.me);
        let (id, hurry) = self.call(|e| {
            let id = e.start_op(call, input, result_here)?;
            // Everything this node sends for it has gone if its plan sends
            // at its start only and the start put it on the wire (what was
            // before it done: a broadcast's background end, say, which the
            // root's next data brings).
            Ok::<_, BarrierError>((id, !(eager_only && e.on_the_wire(id, entered))))
        })?;
        if hurry {
            self.shared.hurry_at.store(self.shared.calls.load(Ordering::Acquire), Ordering::Release);
            self.shared.started_ns.store(self.shared.ns_since_origin(), Ordering::Release);
            if let Some(agent) = self.agent.as_ref().filter(|_| self.shared.wake_at_start.load(Ordering::Acquire)) {
                self.shared.hurried.fetch_add(1, Ordering::Relaxed);
                agent.thread().unpark();
            }
        }
        Ok(Request { shared: self.shared.clone(), id, claimed: false })
    }

    /// Whether a nonblocking `call` of `bytes` bytes started alone sends
    /// at its start everything this node sends for it before the call is
    /// complete here: a barrier, or an allreduce of one segment, on a plan
    /// that sends only in its first step; a reduce of one segment on its
    /// own plan ([`crate::plan::build_reduce`]: a non-root sends its
    /// contribution and is done; the root waits for the others' and then
    /// has its result) or on such a plan; a broadcast of one segment (its
    /// own plan, [`crate::plan::build_bcast`], whatever the algorithm: the
    /// root sends its data and is done, a non-root sends its entry and
    /// then only waits for the data). What a broadcast's or reduce's
    /// root sends after the call is complete (the end, once every node
    /// entered) completes the epoch in the background, as after the
    /// blocking call: the next call on the barrier sends it, or the agent
    /// after its grace period.
    pub fn eager_only(&self, call: Collective, bytes: usize) -> bool {
        let one_segment = bytes <= self.max_data.saturating_sub(wire::HEADER_LEN) / call.element_size().max(1) * call.element_size().max(1);
        match call {
            Collective::Barrier => self.sends_at_entry_only,
            Collective::Allreduce { .. } => self.sends_at_entry_only && one_segment,
            Collective::Reduce { .. } => (self.sends_at_entry_only || crate::plan::reduce_gathers(self.nodes)) && one_segment,
            Collective::Bcast { .. } => one_segment,
        }
    }

    /// Ends this node's use of the barrier: one closing barrier (so every
    /// node has finished all earlier ones), then answering peers until each
    /// is known to have completed it too. No blind linger: it returns as soon
    /// as nobody can need this node any more. Later barrier calls fail.
    pub fn finish(&mut self) -> Result<(), BarrierError> {
        self.call(|e| e.finish())
    }

    /// Enters the closing barrier of [`finish`](Self::finish) and returns at
    /// once: the progress agent carries it on while this node does other
    /// things (closes other barriers, in any order), and `finish` completes
    /// it later. After `close`, call only `finish` and
    /// [`try_finish`](Self::try_finish).
    pub fn close(&mut self) -> Result<(), BarrierError> {
        self.call(|e| e.enter_closing())
    }

    /// After [`close`](Self::close): [`finish`](Self::finish) without
    /// blocking; true once it is done (every peer known to have completed
    /// the closing barrier, or silent, having left), and the barrier can be
    /// dropped. Meanwhile the progress agent answers and asks the peers.
    pub fn try_finish(&mut self) -> Result<bool, BarrierError> {
        self.call(|e| e.try_finish())
    }

    /// Stops the agent and gives the transport back.
    pub fn into_transport(mut self) -> T {
        self.stop_agent();
        let shared = self.shared.clone();
        drop(self);
        match Arc::try_unwrap(shared) {
            Ok(shared) => shared.engine.into_inner().unwrap_or_else(|e| e.into_inner()).transport,
            Err(_) => panic!("into_transport: a nonblocking collective's Request outlives its barrier"),
        }
    }

    fn stop_agent(&mut self) {
        if let Some(agent) = self.agent.take() {
            self.shared.stop.store(true, Ordering::Release);
            self.shared.waker.wake();
            agent.thread().unpark();
            let _ = agent.join();
        }
    }
}

impl<T: Transport + Send + 'static> Drop for Barrier<T> {
    fn drop(&mut self) {
        self.stop_agent();
        self.shared.lock().farewell();
    }
}

/// A nonblocking collective started with [`Barrier::start`]. Dropping it
/// before it completes leaves the collective to run (the peers count on
/// it); its result is dropped. It keeps the barrier's engine alive.
pub struct Request<T: Transport + Send + 'static> {
    shared: Arc<Shared<T>>,
    id: u64,
    /// Whether its outcome has been taken.
    claimed: bool,
}

impl<T: Transport + Send + 'static> std::fmt::Debug for Request<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).field("claimed", &self.claimed).finish()
    }
}

impl<T: Transport + Send + 'static> Request<T> {
    /// Runs `f` on the engine as the application (the agent stands aside).
    fn call<R>(&self, f: impl FnOnce(&mut Engine<T>) -> R) -> R {
        self.shared.app_call(f)
    }

    /// Progress without blocking; true once the collective is complete,
    /// its result (where the call has one for this node) copied into `out`
    /// if given (as long as the input). Its error if it failed. After it
    /// said true or failed, later calls are usage errors.
    pub fn test(&mut self, out: Option<&mut [u8]>) -> Result<bool, BarrierError> {
        if self.claimed {
            return Err(BarrierError::Misuse("this nonblocking collective has completed already".into()));
        }
        match self.shared.judged_call(|e| e.poll_op(self.id, out), |r| !matches!(r, Ok(None)))? {
            None => Ok(false),
            Some(outcome) => {
                self.claimed = true;
                outcome.map(|()| true)
            }
        }
    }

    /// Completes the collective (as [`test`](Self::test) until it does,
    /// sleeping in the transport between): waits for live peers as long as
    /// they take, fails as a blocking call would.
    pub fn wait(&mut self, out: Option<&mut [u8]>) -> Result<(), BarrierError> {
        if self.claimed {
            return Err(BarrierError::Misuse("this nonblocking collective has completed already".into()));
        }
        let outcome = self.call(|e| e.wait_op(self.id, out, None)).and_then(|o| o.expect("a wait without a deadline has an outcome"));
        if !matches!(outcome, Err(BarrierError::Transport(_))) {
            self.claimed = true;
        }
        outcome
    }

    /// As [`wait`](Self::wait), for at most about `timeout`: true once the
    /// collective is complete (its result into `out`), false if it is not
    /// after `timeout` (call again). Sleeps in the transport meanwhile, so
    /// a caller that must also drive something else (an MPI's own
    /// progress, between two of these) leaves the cores to the peers
    /// instead of spinning.
    pub fn wait_for(&mut self, out: Option<&mut [u8]>, timeout: Duration) -> Result<bool, BarrierError> {
        if self.claimed {
            return Err(BarrierError::Misuse("this nonblocking collective has completed already".into()));
        }
        let until = Instant::now() + timeout;
        let outcome = self.call(|e| e.wait_op(self.id, out, Some(until)));
        match outcome {
            Ok(None) => Ok(false),
            Err(BarrierError::Transport(e)) => Err(BarrierError::Transport(e)),
            Ok(Some(outcome)) => {
                self.claimed = true;
                outcome.map(|()| true)
            }
            Err(e) => {
                self.claimed = true;
                Err(e)
            }
        }
    }
}

impl<T: Transport + Send + 'static> Drop for Request<T> {
    fn drop(&mut self) {
        if !self.claimed {
            self.shared.lock().abandon_op(self.id);
        }
    }
}

/// A barrier with its local resources in place (transport, waker, engine)
/// that has not met its peers yet: [`join`](Self::join) does that. Lets a
/// caller find out that every node could prepare (with its own collective,
/// an MPI allreduce say) before any node waits for the others in the join.
pub struct PreparedBarrier<T: Transport + Send + 'static> {
    engine: Engine<T>,
    waker: Arc<dyn Waker>,
    config: BarrierConfig,
}

impl<T: Transport + Send + 'static> std::fmt::Debug for PreparedBarrier<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedBarrier").field("algorithm", &self.config.algorithm).field("node", &self.engine.me()).finish()
    }
}

impl<T: Transport + Send + 'static> PreparedBarrier<T> {
    /// Sets up a barrier over `transport` without any communication.
    pub fn new(transport: T, config: BarrierConfig) -> Result<PreparedBarrier<T>, BarrierError> {
        let waker = transport.waker()?;
        let engine = Engine::new(transport, config)?;
        Ok(PreparedBarrier { engine, waker, config })
    }

    /// Meets the other nodes (collective; up to
    /// [`BarrierConfig::join_timeout`]) and starts the progress agent.
    pub fn join(self) -> Result<Barrier<T>, BarrierError> {
        Barrier::joined(self.engine, self.waker, self.config)
    }

    /// Joins as [`join`](Self::join), and with it `beside`: a second
    /// barrier over the same nodes (in the same order) on a transport of
    /// its own, made without a join of its own. It runs an instance derived
    /// from the one this join agrees, the same on every node that joined
    /// (node 0 admitted them all into it, and a restarted process joins
    /// anew), and the join checks every node's configuration of it too (a
    /// node whose differs is refused here). One join's frames and time for
    /// two barriers: a communicator's barrier and the barrier of its
    /// collectives (review rev31, finding 2: both are made when the
    /// communicator is).
    pub fn join_with(self, beside: PreparedBarrier<T>) -> Result<(Barrier<T>, Barrier<T>), BarrierError> {
        let (me, nodes) = (self.engine.me(), self.engine.nodes());
        if (beside.engine.me(), beside.engine.nodes()) != (me, nodes) {
            return Err(BarrierError::Misuse(format!(
                "join_with: the barrier beside is node {} of {}, this one node {me} of {nodes}: they must span the same nodes",
                beside.engine.me(),
                beside.engine.nodes()
            )));
        }
        let mut engine = self.engine;
        let mut other = beside.engine;
        engine.join_paired(&mut other)?;
        engine.transport.all_joined();
        other.joined_as(crate::core::derived_instance(engine.instance()));
        other.transport.joined_beside();
        engine.pair_with(&mut other);
        let first = Barrier::started(engine, self.waker, self.config)?;
        let second = Barrier::started(other, beside.waker, beside.config)?;
        Ok((first, second))
    }
}

/// The progress agent (see the module docs).
fn run_agent<T: Transport>(shared: &Shared<T>) {
    let stopped = || shared.stop.load(Ordering::Acquire);
    let mut seen = shared.calls.load(Ordering::Acquire);
    'quiet: loop {
        // Wait until the application has stayed out for a whole grace period.
        let mut grace = AGENT_GRACE;
        loop {
            if stopped() {
                return;
            }
            std::thread::park_timeout(grace);
            let calls = shared.calls.load(Ordering::Acquire);
            // A nonblocking collective just started and the application
            // has not called since: it went on with its own work, so serve
            // now. If it has called since (a wait or test at once), it
            // drives the collective itself: serving too would only take
            // the engine from it and a core from the peers.
            let started_at = shared.hurry_at.swap(0, Ordering::AcqRel);
            if calls.is_multiple_of(2) && (calls == seen || calls == started_at) {
                seen = calls;
                break;
            }
            seen = calls;
            grace = (grace * 2).min(AGENT_GRACE_MAX);
        }
        // Serve: answer, then sleep until a message arrives or a timer is due.
        loop {
            if stopped() {
                return;
            }
            let next = {
                let mut engine = match shared.engine.try_lock() {
                    Ok(engine) => engine,
                    Err(TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(TryLockError::WouldBlock) => continue 'quiet,
                };
                if shared.calls.load(Ordering::Acquire) != seen {
                    continue 'quiet;
                }
                engine.serve()
            };
            let timeout = next.map(|t| t.saturating_duration_since(Instant::now()));
            if let Err(e) = shared.waker.wait(timeout) {
                shared.lock().agent_error = Some(e);
                // Without a waker the agent cannot sleep on arrivals: poll.
                std::thread::park_timeout(AGENT_GRACE);
            }
            if shared.calls.load(Ordering::Acquire) != seen {
                seen = shared.calls.load(Ordering::Acquire);
                continue 'quiet;
            }
        }
    }
}
