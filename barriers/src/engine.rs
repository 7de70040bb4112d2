//! The barrier engine: runs any algorithm's plan over any transport, and
//! makes it correct on an unreliable network.
//!
//! **Epochs.** Barriers are numbered; every message carries its barrier's
//! number (the paper's "coloring"). A message of barrier k never counts
//! towards k+1, and a message of k+1 that arrives while this node is still in
//! k is kept for later, not lost.
//!
//! **Recovery.** A node that waits longer than the retry timeout sends a NACK
//! for each message it is missing, and re-sends its current step's
//! point-to-point messages (its arrival, say). A node that receives a NACK for a message it
//! has already sent (in this barrier or an earlier one) sends it again, to the
//! asker. A message of a finished barrier from a straggler makes the node
//! re-send the straggler what it sent it in that barrier (the release, for
//! instance). Messages hold only (epoch, tag), so any earlier message can be
//! re-sent without keeping it. The retry interval doubles, up to 4 times the
//! base, while nothing progresses: a longer back-off would make a loss that
//! follows a long wait for a slow (not lost) sender expensive.
//!
//! **Safety.** A node leaves barrier k only after its plan's waits for k are
//! met, and a message of k is only ever sent by a node that has reached the
//! sending step of k. The plans guarantee that every exit causally follows
//! every entry. Re-sends and NACK answers only repeat messages that were
//! already sent, so they cannot make anyone leave early.
//!
//! **Failure.** After a quarter of the failure timeout without progress, a
//! stalled node multicasts a heartbeat every twentieth of the failure
//! timeout, so that all stalled nodes hear one another. When the failure timeout passes, `wait` returns
//! [`BarrierError::Timeout`] naming the nodes not heard from recently: the
//! crashed nodes, or those not calling the barrier.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::plan::{self, Algorithm, Dest, Out, Plan};
use crate::transport::{Incoming, Msg, MsgKind, NodeId, Transport, TransportError};

/// The retry interval grows to at most this many times the retry timeout.
const MAX_BACKOFF: u32 = 4;
/// Heartbeats while stalled come every failure timeout / this.
const HEARTBEATS_PER_TIMEOUT: u32 = 20;

/// How a [`Barrier`] runs. [`BarrierConfig::new`] gives the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierConfig {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// How many of the transport's rails to use (1 = single network).
    pub rails: usize,
    /// First re-send after this long without progress (then doubling).
    pub retry_timeout: Duration,
    /// Give up after this long without progress, naming the missing nodes.
    pub failure_timeout: Duration,
}

impl BarrierConfig {
    /// Defaults: one rail, first retry after 1 ms, failure after 10 s.
    pub fn new(algorithm: Algorithm) -> BarrierConfig {
        BarrierConfig {
            algorithm,
            rails: 1,
            retry_timeout: Duration::from_millis(1),
            failure_timeout: Duration::from_secs(10),
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

    /// With these timeouts.
    pub fn timeouts(mut self, retry: Duration, failure: Duration) -> BarrierConfig {
        self.retry_timeout = retry;
        self.failure_timeout = failure;
        self
    }
}

/// Counters of a [`Barrier`] since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BarrierStats {
    /// Barriers completed.
    pub completed: u64,
    /// Messages sent by the plans (a multicast counts once).
    pub sent: u64,
    /// Point-to-point messages re-sent after a retry timeout.
    pub resends: u64,
    /// NACKs sent for missing messages.
    pub nacks_sent: u64,
    /// Messages re-sent to answer a NACK or a straggler.
    pub answers: u64,
    /// Messages received twice (or more).
    pub duplicates: u64,
    /// Messages of barriers this node had already finished.
    pub stale: u64,
    /// Messages of a barrier this node had not yet entered, kept for it.
    pub early: u64,
    /// Heartbeats multicast while stalled.
    pub heartbeats: u64,
}

/// Why a barrier failed.
#[derive(Debug, thiserror::Error)]
pub enum BarrierError {
    /// No progress within the failure timeout.
    #[error(
        "barrier {epoch} made no progress for {:.1} s; nodes not heard from: {missing:?} (crashed, or not calling the barrier)",
        waited.as_secs_f64()
    )]
    Timeout {
        /// The barrier's number.
        epoch: u32,
        /// The nodes not heard from recently.
        missing: Vec<NodeId>,
        /// How long nothing progressed.
        waited: Duration,
    },
    /// The transport failed.
    #[error("barrier transport: {0}")]
    Transport(#[source] TransportError),
    /// The barrier was set up or called wrongly.
    #[error("{0}")]
    Usage(String),
}

impl From<TransportError> for BarrierError {
    fn from(e: TransportError) -> Self {
        BarrierError::Transport(e)
    }
}

/// A barrier over transport `T`: [`wait`](Barrier::wait), or split-phase
/// [`enter`](Barrier::enter) then [`test`](Barrier::test) / [`wait`](Barrier::wait).
pub struct Barrier<T: Transport> {
    transport: T,
    config: BarrierConfig,
    plan: Plan,
    me: NodeId,
    /// The barrier in progress, or the next one when idle; all below are done.
    epoch: u32,
    in_progress: bool,
    step: usize,
    step_sent: bool,
    received: HashSet<(u32, u16, NodeId)>,
    last_heard: Vec<Option<Instant>>,
    last_progress: Instant,
    next_retry: Instant,
    retry_interval: Duration,
    next_heartbeat: Instant,
    stats: BarrierStats,
}

impl<T: Transport> std::fmt::Debug for Barrier<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier")
            .field("algorithm", &self.config.algorithm)
            .field("node", &self.me)
            .field("epoch", &self.epoch)
            .field("in_progress", &self.in_progress)
            .finish()
    }
}

impl<T: Transport> Barrier<T> {
    /// A barrier over `transport`.
    pub fn new(transport: T, config: BarrierConfig) -> Result<Barrier<T>, BarrierError> {
        let n = transport.node_count();
        let me = transport.node();
        if n == 0 || me >= n {
            return Err(BarrierError::Usage(format!("node {me} of {n}: not a valid node")));
        }
        if config.rails == 0 || config.rails > transport.rails() {
            return Err(BarrierError::Usage(format!(
                "the barrier wants {} rail(s) but the transport has {}",
                config.rails,
                transport.rails()
            )));
        }
        if let Algorithm::Tree { k, .. } = config.algorithm {
            if k < 2 {
                return Err(BarrierError::Usage(format!("a tree needs k ≥ 2, not {k}")));
            }
        }
        if config.retry_timeout.is_zero() || config.failure_timeout <= config.retry_timeout {
            return Err(BarrierError::Usage("need 0 < retry timeout < failure timeout".into()));
        }
        let plan = plan::build(config.algorithm, n, me, config.rails);
        let now = Instant::now();
        Ok(Barrier {
            transport,
            config,
            plan,
            me,
            epoch: 0,
            in_progress: false,
            step: 0,
            step_sent: false,
            received: HashSet::new(),
            last_heard: vec![None; n],
            last_progress: now,
            next_retry: now,
            retry_interval: config.retry_timeout,
            next_heartbeat: now,
            stats: BarrierStats::default(),
        })
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The configuration.
    pub fn config(&self) -> &BarrierConfig {
        &self.config
    }

    /// Barriers completed so far (the number of the next or current one).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Whether a barrier has been entered and not yet completed.
    pub fn in_progress(&self) -> bool {
        self.in_progress
    }

    /// Gives the transport back (for other traffic once the barriers are done).
    pub fn into_transport(self) -> T {
        self.transport
    }

    /// The counters.
    pub fn stats(&self) -> BarrierStats {
        self.stats
    }

    /// Enters the next barrier without waiting for it (MPI_Ibarrier's start,
    /// seed 003's `barrier_post`). Complete it with [`test`](Self::test) or
    /// [`wait`](Self::wait).
    pub fn enter(&mut self) -> Result<(), BarrierError> {
        if self.in_progress {
            return Err(BarrierError::Usage(format!(
                "enter() while barrier {} is in progress: complete it with wait() or test() first",
                self.epoch
            )));
        }
        self.in_progress = true;
        self.step = 0;
        self.step_sent = false;
        self.progressed(Instant::now());
        self.advance()
    }

    /// Makes progress without blocking; true once the entered barrier is
    /// complete (also when none was entered).
    pub fn test(&mut self) -> Result<bool, BarrierError> {
        if !self.in_progress {
            return Ok(true);
        }
        while let Some(incoming) = self.transport.recv(Duration::ZERO)? {
            self.handle(incoming)?;
        }
        self.advance()?;
        if self.in_progress {
            self.on_timers(Instant::now())?;
        }
        Ok(!self.in_progress)
    }

    /// Completes the entered barrier, entering one first if none is in
    /// progress. On [`BarrierError::Timeout`] the barrier stays entered, and
    /// calling `wait` again keeps waiting.
    pub fn wait(&mut self) -> Result<(), BarrierError> {
        if !self.in_progress {
            self.enter()?;
        }
        loop {
            if !self.in_progress {
                return Ok(());
            }
            let now = Instant::now();
            self.on_timers(now)?;
            let until = self.next_retry.min(self.last_progress + self.config.failure_timeout);
            if let Some(incoming) = self.transport.recv(until.saturating_duration_since(now))? {
                self.handle(incoming)?;
                self.advance()?;
            }
        }
    }

    /// Answers other nodes' requests for `duration` without entering a
    /// barrier: call it after the last barrier, so that a node whose release
    /// was lost can still get it.
    pub fn linger(&mut self, duration: Duration) -> Result<(), BarrierError> {
        let end = Instant::now() + duration;
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            if let Some(incoming) = self.transport.recv(end - now)? {
                self.handle(incoming)?;
                self.advance()?;
            }
        }
    }

    fn progressed(&mut self, now: Instant) {
        self.last_progress = now;
        self.retry_interval = self.config.retry_timeout;
        self.next_retry = now + self.retry_interval;
    }

    fn msg(&self, kind: MsgKind, epoch: u32, tag: u16) -> Msg {
        Msg { kind, epoch, tag }
    }

    fn send_out(&mut self, out: Out, epoch: u32) -> Result<(), TransportError> {
        let msg = self.msg(MsgKind::Data, epoch, out.tag);
        match out.dest {
            Dest::Node(to) => self.transport.send(out.rail, to, msg),
            Dest::All => self.transport.multicast(out.rail, msg),
        }
    }

    /// Sends the current step's messages and moves through every step whose
    /// waits are met.
    fn advance(&mut self) -> Result<(), BarrierError> {
        while self.in_progress {
            if self.step == self.plan.steps.len() {
                self.in_progress = false;
                self.epoch = self.epoch.wrapping_add(1);
                self.stats.completed += 1;
                let epoch = self.epoch;
                self.received.retain(|&(e, _, _)| e >= epoch);
                return Ok(());
            }
            if !self.step_sent {
                for i in 0..self.plan.steps[self.step].sends.len() {
                    let out = self.plan.steps[self.step].sends[i];
                    self.send_out(out, self.epoch)?;
                    self.stats.sent += 1;
                }
                self.step_sent = true;
            }
            let step = &self.plan.steps[self.step];
            if step.waits.iter().all(|w| self.received.contains(&(self.epoch, w.tag, w.from))) {
                self.step += 1;
                self.step_sent = false;
                self.progressed(Instant::now());
            } else {
                return Ok(());
            }
        }
        Ok(())
    }

    fn handle(&mut self, incoming: Incoming) -> Result<(), BarrierError> {
        let Incoming { from, msg, .. } = incoming;
        if from >= self.last_heard.len() || from == self.me {
            return Ok(());
        }
        let now = Instant::now();
        self.last_heard[from] = Some(now);
        match msg.kind {
            MsgKind::Alive => {}
            MsgKind::Nack => self.answer(from, msg.epoch, Some(msg.tag))?,
            MsgKind::Data if msg.epoch < self.epoch => {
                // A straggler re-sent a message of a barrier we finished: it
                // is stuck there, so give it again what we sent it.
                self.stats.stale += 1;
                self.answer(from, msg.epoch, None)?;
            }
            MsgKind::Answer if msg.epoch < self.epoch => self.stats.stale += 1,
            MsgKind::Data | MsgKind::Answer if msg.epoch > self.epoch.wrapping_add(1) => {} // cannot happen in one job
            MsgKind::Data | MsgKind::Answer => {
                if !self.received.insert((msg.epoch, msg.tag, from)) {
                    self.stats.duplicates += 1;
                } else if msg.epoch > self.epoch || !self.in_progress {
                    self.stats.early += 1;
                } else {
                    self.last_progress = now;
                }
            }
        }
        Ok(())
    }

    /// Re-sends to `to` the messages of barrier `epoch` addressed to it (one
    /// tag, or all) that this node has already sent.
    fn answer(&mut self, to: NodeId, epoch: u32, tag: Option<u16>) -> Result<(), TransportError> {
        let sent_steps = if epoch < self.epoch {
            self.plan.steps.len()
        } else if epoch == self.epoch && self.in_progress {
            self.step + usize::from(self.step_sent)
        } else {
            0
        };
        for s in 0..sent_steps {
            for i in 0..self.plan.steps[s].sends.len() {
                let out = self.plan.steps[s].sends[i];
                let for_them = matches!(out.dest, Dest::All) || out.dest == Dest::Node(to);
                if for_them && tag.is_none_or(|t| t == out.tag) {
                    let msg = self.msg(MsgKind::Answer, epoch, out.tag);
                    self.transport.send(out.rail, to, msg)?;
                    self.stats.answers += 1;
                }
            }
        }
        Ok(())
    }

    /// Retries and the failure timeout.
    fn on_timers(&mut self, now: Instant) -> Result<(), BarrierError> {
        let stalled = now.saturating_duration_since(self.last_progress);
        if stalled >= self.config.failure_timeout {
            return Err(self.timeout_error(now, stalled));
        }
        if now < self.next_retry {
            return Ok(());
        }
        // Ask for exactly what is missing; a peer that has sent it sends it again.
        if let Some(step) = self.plan.steps.get(self.step) {
            let missing: Vec<_> =
                step.waits.iter().filter(|w| !self.received.contains(&(self.epoch, w.tag, w.from))).copied().collect();
            for w in missing {
                let nack = self.msg(MsgKind::Nack, self.epoch, w.tag);
                self.transport.send(0, w.from, nack)?;
                self.stats.nacks_sent += 1;
            }
            // Re-send this step's own point-to-point messages (a waiting node
            // re-sends its arrival; a peer that has finished the barrier answers
            // it with what it sent). Multicasts are recovered by the NACKs of
            // those that miss them, not re-sent to everyone.
            if self.step_sent {
                for i in 0..self.plan.steps[self.step].sends.len() {
                    let out = self.plan.steps[self.step].sends[i];
                    if matches!(out.dest, Dest::Node(_)) {
                        self.send_out(out, self.epoch)?;
                        self.stats.resends += 1;
                    }
                }
            }
        }
        if stalled >= self.config.failure_timeout / 4 && now >= self.next_heartbeat {
            let alive = self.msg(MsgKind::Alive, self.epoch, 0);
            self.transport.multicast(0, alive)?;
            self.stats.heartbeats += 1;
            self.next_heartbeat = now + self.config.failure_timeout / HEARTBEATS_PER_TIMEOUT;
        }
        self.retry_interval = (self.retry_interval * 2).min(self.config.retry_timeout * MAX_BACKOFF);
        self.next_retry = now + self.retry_interval;
        Ok(())
    }

    fn timeout_error(&self, now: Instant, waited: Duration) -> BarrierError {
        let window = self.config.failure_timeout / 2;
        let mut missing: Vec<NodeId> = (0..self.last_heard.len())
            .filter(|&n| n != self.me)
            .filter(|&n| self.last_heard[n].is_none_or(|t| now.saturating_duration_since(t) > window))
            .collect();
        if missing.is_empty() {
            // Everyone is alive but what this node waits for never came.
            if let Some(step) = self.plan.steps.get(self.step) {
                missing = step
                    .waits
                    .iter()
                    .filter(|w| !self.received.contains(&(self.epoch, w.tag, w.from)))
                    .map(|w| w.from)
                    .collect();
            }
        }
        BarrierError::Timeout { epoch: self.epoch, missing, waited }
    }
}
