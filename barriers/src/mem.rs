//! An in-process transport: nodes are threads of one process, and the network
//! can lose, duplicate, delay and reorder messages, at random ([`Faults`])
//! or as a [`SendRule`] decides for chosen ones (and watches every message
//! on the wire). No root, no NIC: for tests, and for trying algorithms.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::transport::{Incoming, Msg, NodeId, Transport, TransportError, Waker};

/// What the in-process network does to messages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a delivered message is delivered twice.
    pub duplicate: f64,
    /// Each delivery is delayed by a random time up to this (so messages reorder).
    pub max_delay: Duration,
    /// Seed of the random choices (each node mixes in its number).
    pub seed: u64,
}

impl Faults {
    /// A perfect network.
    pub fn none() -> Faults {
        Faults { loss: 0.0, duplicate: 0.0, max_delay: Duration::ZERO, seed: 1 }
    }
}

/// A message as its sender posts it, before the network's faults: what a
/// [`SendRule`] sees.
#[derive(Debug)]
pub struct Posted<'a> {
    /// The sender.
    pub from: NodeId,
    /// The addressee.
    pub to: NodeId,
    /// The message.
    pub msg: Msg,
    /// Its data.
    pub data: &'a [u8],
}

/// What a [`SendRule`] makes of a message.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    /// The network's [`Faults`] decide, as without a rule.
    Faults,
    /// Lost (counted as lost).
    Drop,
    /// Delivered once per delay (none: lost, uncounted).
    Deliver(Vec<Duration>),
}

/// Decides the fate of every message sent, before any fault: for tests that
/// lose, delay or duplicate chosen messages, or watch every message on the
/// wire. Its second argument draws uniform numbers in [0, 1) from the
/// sender's random stream.
pub type SendRule = Arc<dyn Fn(&Posted<'_>, &mut dyn FnMut() -> f64) -> Fate + Send + Sync>;

/// The most data a message carries ([`Transport::max_data`]): as much as a
/// group's frame of a 1500-byte MTU over mcd ([`crate::GroupTransport`]).
pub const MAX_DATA: usize = 1462;

/// A message in a mailbox, ordered by delivery time, then by posting order.
struct Letter {
    due: Instant,
    order: u64,
    incoming: Incoming,
    data: Vec<u8>,
}

impl PartialEq for Letter {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.order) == (other.due, other.order)
    }
}
impl Eq for Letter {}
impl PartialOrd for Letter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Letter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.order).cmp(&(other.due, other.order))
    }
}

#[derive(Default)]
struct Queue {
    letters: BinaryHeap<Reverse<Letter>>,
    /// A [`Waker::wake`] not yet seen by a waiter.
    woken: bool,
}

#[derive(Default)]
struct Mailbox {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Shared {
    boxes: Vec<Mailbox>,
    posted: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
}

/// One node's end of an in-process network.
pub struct MemTransport {
    me: NodeId,
    rails: usize,
    shared: Arc<Shared>,
    faults: Faults,
    rule: Option<SendRule>,
    rng: u64,
    /// The data of the message last received.
    last: Vec<u8>,
}

/// Builds an in-process network of `n` nodes with `rails` rails; element i is node i's end.
pub fn network(n: usize, rails: usize, faults: Faults) -> Vec<MemTransport> {
    build(n, rails, faults, None)
}

/// As [`network`], with `rule` deciding each message's fate first.
pub fn network_with_rule(n: usize, rails: usize, faults: Faults, rule: SendRule) -> Vec<MemTransport> {
    build(n, rails, faults, Some(rule))
}

fn build(n: usize, rails: usize, faults: Faults, rule: Option<SendRule>) -> Vec<MemTransport> {
    let shared = Arc::new(Shared {
        boxes: (0..n).map(|_| Mailbox::default()).collect(),
        posted: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        duplicated: AtomicU64::new(0),
    });
    (0..n)
        .map(|me| MemTransport {
            me,
            rails,
            shared: shared.clone(),
            faults,
            rule: rule.clone(),
            rng: faults.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (me as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1,
            last: Vec::new(),
        })
        .collect()
}

/// A handle on a network's fault counters that outlives its transports.
#[derive(Clone)]
pub struct FaultCounters(Arc<Shared>);

impl FaultCounters {
    /// Messages the network has lost so far (all nodes).
    pub fn lost(&self) -> u64 {
        self.0.lost.load(Ordering::Relaxed)
    }

    /// Messages the network has duplicated so far (all nodes).
    pub fn duplicated(&self) -> u64 {
        self.0.duplicated.load(Ordering::Relaxed)
    }
}

impl MemTransport {
    /// The network's fault counters, readable after the transports are gone.
    pub fn counters(&self) -> FaultCounters {
        FaultCounters(self.shared.clone())
    }

    /// Messages the network has lost so far (all nodes).
    pub fn lost(&self) -> u64 {
        self.shared.lost.load(Ordering::Relaxed)
    }

    /// Messages the network has duplicated so far (all nodes).
    pub fn duplicated(&self) -> u64 {
        self.shared.duplicated.load(Ordering::Relaxed)
    }

    /// A uniform random number in [0, 1) (xorshift64*).
    fn random(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn deliver(&mut self, to: NodeId, incoming: Incoming, data: &[u8]) {
        let delay = self.faults.max_delay.mul_f64(self.random());
        self.post(to, incoming, data, delay);
    }

    /// Puts a letter into `to`'s mailbox, due after `delay`.
    fn post(&self, to: NodeId, incoming: Incoming, data: &[u8], delay: Duration) {
        let mailbox = &self.shared.boxes[to];
        let order = self.shared.posted.fetch_add(1, Ordering::Relaxed);
        let data = data.to_vec();
        mailbox.lock().letters.push(Reverse(Letter { due: Instant::now() + delay, order, incoming, data }));
        // The node's thread and its progress agent may both wait.
        mailbox.ready.notify_all();
    }
}

impl Transport for MemTransport {
    fn node(&self) -> NodeId {
        self.me
    }

    fn node_count(&self) -> usize {
        self.shared.boxes.len()
    }

    fn rails(&self) -> usize {
        self.rails
    }

    fn send(&mut self, rail: usize, to: NodeId, msg: Msg) -> Result<(), TransportError> {
        self.send_data(rail, to, msg, &[])
    }

    fn max_data(&self) -> usize {
        MAX_DATA
    }

    fn data(&self) -> &[u8] {
        &self.last
    }

    fn send_data(&mut self, rail: usize, to: NodeId, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if to >= self.node_count() || rail >= self.rails {
            return Err(format!("no node {to} on rail {rail}").into());
        }
        if data.len() > MAX_DATA {
            return Err(format!("{} bytes of data: more than a message carries ({MAX_DATA})", data.len()).into());
        }
        let incoming = Incoming { from: self.me, rail, msg };
        if let Some(rule) = self.rule.clone() {
            match rule(&Posted { from: self.me, to, msg, data }, &mut || self.random()) {
                Fate::Faults => {}
                Fate::Drop => {
                    self.shared.lost.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Fate::Deliver(delays) => {
                    for delay in delays {
                        self.post(to, incoming, data, delay);
                    }
                    return Ok(());
                }
            }
        }
        if self.random() < self.faults.loss {
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.deliver(to, incoming, data);
        if self.random() < self.faults.duplicate {
            self.shared.duplicated.fetch_add(1, Ordering::Relaxed);
            self.deliver(to, incoming, data);
        }
        Ok(())
    }

    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        let deadline = Instant::now() + timeout;
        let mailbox = &self.shared.boxes[self.me];
        let mut queue = mailbox.lock();
        loop {
            let now = Instant::now();
            let next_due = queue.letters.peek().map(|Reverse(l)| l.due);
            if next_due.is_some_and(|due| due <= now) {
                let Some(Reverse(letter)) = queue.letters.pop() else { unreachable!("a letter is due") };
                self.last = letter.data;
                return Ok(Some(letter.incoming));
            }
            if now >= deadline {
                return Ok(None);
            }
            let next_due = next_due.unwrap_or(deadline).min(deadline);
            queue = mailbox.ready.wait_timeout(queue, next_due - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn waker(&self) -> Result<Arc<dyn Waker>, TransportError> {
        Ok(Arc::new(MemWaker { shared: self.shared.clone(), me: self.me }))
    }
}

/// Sleeps on a node's mailbox until a letter is due or it is woken.
struct MemWaker {
    shared: Arc<Shared>,
    me: NodeId,
}

impl Waker for MemWaker {
    fn wait(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mailbox = &self.shared.boxes[self.me];
        let mut queue = mailbox.lock();
        loop {
            let now = Instant::now();
            if std::mem::take(&mut queue.woken) {
                return Ok(());
            }
            let next_due = queue.letters.peek().map(|Reverse(l)| l.due);
            if next_due.is_some_and(|due| due <= now) || deadline.is_some_and(|d| now >= d) {
                return Ok(());
            }
            let until = match (next_due, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            queue = match until {
                Some(until) => mailbox.ready.wait_timeout(queue, until - now).unwrap_or_else(|e| e.into_inner()).0,
                None => mailbox.ready.wait(queue).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }

    fn wake(&self) {
        let mailbox = &self.shared.boxes[self.me];
        mailbox.lock().woken = true;
        mailbox.ready.notify_all();
    }
}

/// Node 0 of two, played in memory for a barrier on node 1, answering at
/// once: whatever node 1 sends (its join, a step's message), node 0's
/// matching message is there for node 1's next receive. A barrier over it
/// costs only the engine, no network: the hot path's "engine alone"
/// (`mcd-bench hotpath`, and `barriers`' example `engine_alone` for a
/// profiler). Its messages carry no data: barriers only.
#[derive(Debug, Default)]
pub struct Mirror {
    queue: Option<Msg>,
    max_data: usize,
}

impl Mirror {
    /// The instance node 0 admits node 1 into.
    pub const INSTANCE: u64 = 0x6d69_7272_6f72;

    /// A mirror whose transport says a message carries `max_data` bytes
    /// of data (an mcd endpoint's, say, so that the core builds the
    /// broadcast plans it builds over one; 0: none).
    pub fn new(max_data: usize) -> Mirror {
        Mirror { queue: None, max_data }
    }
}

impl Transport for Mirror {
    fn node(&self) -> NodeId {
        1
    }

    fn node_count(&self) -> usize {
        2
    }

    fn rails(&self) -> usize {
        1
    }

    fn max_data(&self) -> usize {
        self.max_data
    }

    fn send(&mut self, _rail: usize, _to: NodeId, msg: Msg) -> Result<(), TransportError> {
        use crate::transport::MsgKind;
        self.queue = match msg.kind {
            MsgKind::Join => {
                Some(Msg { kind: MsgKind::Admit, instance: Mirror::INSTANCE, epoch: (msg.instance >> 32) as u32, tag: 0, arg: msg.instance as u32 })
            }
            MsgKind::Data => Some(Msg { arg: 0, ..msg }),
            _ => None,
        };
        Ok(())
    }

    fn send_data(&mut self, rail: usize, to: NodeId, msg: Msg, _data: &[u8]) -> Result<(), TransportError> {
        self.send(rail, to, msg)
    }

    fn recv(&mut self, _timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        Ok(self.queue.take().map(|msg| Incoming { from: 0, rail: 0, msg }))
    }
}
