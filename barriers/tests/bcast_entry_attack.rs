//! Adversarial tests of the release-first broadcast whose non-roots tell the
//! root their entry *before* the data arrives (BCAST_ENTERED, step 0), so
//! that the root's end no longer means "every node has the data".
//!
//! A programmable in-process network (below) lets a test lose, delay or
//! duplicate chosen messages: every original of a broadcast's data to one
//! node, every entry, every end, data delivered after the end and after the
//! root moved on, answers delayed across epochs, a heavy tail of late
//! frames. Long random sequences of broadcasts from random roots (one and
//! several segments), allreduces, reduces, barriers (shared-clock safety
//! check) and split-phase barriers run on every algorithm at 2, 3, 5 and 8
//! nodes; every result is checked against a reference, and every node must
//! end at the same epoch. Calls that do not match must give an error on
//! every node (or, to a non-root that made the root's very call, the root's
//! data), never wrong data, never a hang; also under loss.
//!
//! A monitor inside the network checks, on one clock, that every answer
//! carries exactly what its original carried, and that no node sends a
//! message of epoch e+1 (having completed e) before every node entered
//! broadcast e. Checked against mutants of the engine (the root not
//! waiting for the entries, a non-root not waiting for the end, answers
//! from the other epoch's copy, one stored copy instead of two): each
//! fails here. The same file passes on the previous (acknowledge-after-
//! data) protocol.
//!
//! `MCD_ATTACK_SEEDS=N` runs N seeds per stress case instead of the
//! default, from `MCD_ATTACK_BASE` (default 0).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use barriers::check::{check, Timeline};
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Fanout, Incoming, Msg, MsgKind, NodeId, Op, Release, Transport, TransportError, Waker};

/// The broadcast's tags on the wire (plan::tag).
const DATA: u16 = 4;
const ENTERED: u16 = 5;
const DONE: u16 = 6;

// ---------------------------------------------------------------------------
// A programmable in-process network.
// ---------------------------------------------------------------------------

/// A message about to be sent.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    #[allow(dead_code)]
    from: NodeId,
    to: NodeId,
    msg: Msg,
}

/// What happens to one message.
enum Fate {
    /// The policy's random loss, delay and duplication.
    Default,
    Drop,
    /// Delivered once per delay.
    Deliver(Vec<Duration>),
}

type Rule = Arc<dyn Fn(&Pkt, &mut Rng) -> Fate + Send + Sync>;

#[derive(Clone)]
struct Policy {
    loss: f64,
    dup: f64,
    max_delay: Duration,
    /// This fraction of deliveries is delayed up to `tail_delay` instead.
    tail: f64,
    tail_delay: Duration,
    rule: Option<Rule>,
    seed: u64,
}

impl Policy {
    fn clean() -> Policy {
        Policy { loss: 0.0, dup: 0.0, max_delay: Duration::ZERO, tail: 0.0, tail_delay: Duration::ZERO, rule: None, seed: 1 }
    }
    fn lossy(loss: f64, dup: f64, seed: u64) -> Policy {
        Policy { loss, dup, max_delay: Duration::from_micros(300), tail: 0.02, tail_delay: Duration::from_millis(8), rule: None, seed }
    }
    fn with(mut self, rule: impl Fn(&Pkt, &mut Rng) -> Fate + Send + Sync + 'static) -> Policy {
        self.rule = Some(Arc::new(rule));
        self
    }
}

struct Rng(u64);

impl Rng {
    fn f(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Letter {
    due: Instant,
    order: u64,
    incoming: Incoming,
    data: Vec<u8>,
}
impl PartialEq for Letter {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.order) == (o.due, o.order)
    }
}
impl Eq for Letter {}
impl PartialOrd for Letter {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Letter {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.order).cmp(&(o.due, o.order))
    }
}

#[derive(Default)]
struct Queue {
    letters: BinaryHeap<Reverse<Letter>>,
    woken: bool,
}

#[derive(Default)]
struct Mailbox {
    q: Mutex<Queue>,
    ready: Condvar,
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Shared {
    boxes: Vec<Mailbox>,
    order: AtomicU64,
    dropped: AtomicU64,
    monitor: Mutex<Monitor>,
}

/// Watches every message as it is sent (before any fault), on one clock:
///
/// - an answer must carry exactly what the original carried (the stored
///   copy of the right epoch, never another's);
/// - a node that sends an original message of epoch e+1 has completed e:
///   if e was a broadcast, every node must have entered it by then (sent
///   its step-0 message: the data from the root, an entry from the others).
#[derive(Default)]
struct Monitor {
    originals: std::collections::HashMap<(NodeId, u32, u16), Vec<u8>>,
    /// Per broadcast epoch, which nodes have entered it.
    entered: std::collections::HashMap<u32, Vec<bool>>,
    violations: Vec<String>,
}

impl Monitor {
    fn sent(&mut self, n: usize, from: NodeId, to: NodeId, msg: &Msg, data: &[u8]) {
        match msg.kind {
            MsgKind::Data => {
                if matches!(msg.tag, DATA | ENTERED) {
                    self.entered.entry(msg.epoch).or_insert_with(|| vec![false; n])[from] = true;
                }
                if let Some(prev) = self.entered.get(&msg.epoch.wrapping_sub(1)) {
                    let missing: Vec<usize> = (0..n).filter(|&j| !prev[j]).collect();
                    if !missing.is_empty() && self.violations.len() < 20 {
                        self.violations.push(format!(
                            "node {from} sent tag {} of epoch {} (so completed broadcast epoch {}) before nodes {missing:?} entered that broadcast",
                            msg.tag,
                            msg.epoch,
                            msg.epoch.wrapping_sub(1)
                        ));
                    }
                }
                match self.originals.get(&(from, msg.epoch, msg.tag)) {
                    Some(orig) if orig[..] != *data && self.violations.len() < 20 => self.violations.push(format!(
                        "node {from} sent tag {} of epoch {} twice with different data: {:?} then {:?}",
                        msg.tag, msg.epoch, &orig[..orig.len().min(16)], &data[..data.len().min(16)]
                    )),
                    Some(_) => {}
                    None => {
                        self.originals.insert((from, msg.epoch, msg.tag), data.to_vec());
                    }
                }
            }
            MsgKind::Answer => match self.originals.get(&(from, msg.epoch, msg.tag)) {
                Some(orig) if orig[..] == *data => {}
                other if self.violations.len() < 20 => self.violations.push(format!(
                    "node {from} answered node {to} tag {} of epoch {} with {:?}, but sent {:?}",
                    msg.tag,
                    msg.epoch,
                    &data[..data.len().min(16)],
                    other.map(|o| o[..o.len().min(16)].to_vec())
                )),
                _ => {}
            },
            _ => {}
        }
    }
}

struct Net {
    me: NodeId,
    rails: usize,
    shared: Arc<Shared>,
    policy: Policy,
    rng: Rng,
    last: Vec<u8>,
}

fn network(n: usize, rails: usize, policy: Policy) -> Vec<Net> {
    let shared = Arc::new(Shared {
        boxes: (0..n).map(|_| Mailbox::default()).collect(),
        order: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        monitor: Mutex::default(),
    });
    (0..n)
        .map(|me| Net {
            me,
            rails,
            shared: shared.clone(),
            policy: policy.clone(),
            rng: Rng(policy.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (me as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1),
            last: Vec::new(),
        })
        .collect()
}

impl Net {
    fn delay(&mut self) -> Duration {
        if self.rng.f() < self.policy.tail {
            self.policy.tail_delay.mul_f64(self.rng.f())
        } else {
            self.policy.max_delay.mul_f64(self.rng.f())
        }
    }

    fn post(&self, to: NodeId, incoming: Incoming, data: &[u8], delay: Duration) {
        let order = self.shared.order.fetch_add(1, Ordering::Relaxed);
        let mb = &self.shared.boxes[to];
        mb.lock().letters.push(Reverse(Letter { due: Instant::now() + delay, order, incoming, data: data.to_vec() }));
        mb.ready.notify_all();
    }
}

impl Transport for Net {
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
        barriers::mem::MAX_DATA
    }
    fn data(&self) -> &[u8] {
        &self.last
    }
    fn send_data(&mut self, rail: usize, to: NodeId, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if to >= self.node_count() || rail >= self.rails || data.len() > barriers::mem::MAX_DATA {
            return Err(format!("bad send to {to} on rail {rail} ({} bytes)", data.len()).into());
        }
        let n = self.node_count();
        self.shared.monitor.lock().unwrap_or_else(|e| e.into_inner()).sent(n, self.me, to, &msg, data);
        let pkt = Pkt { from: self.me, to, msg };
        let incoming = Incoming { from: self.me, rail, msg };
        let fate = match &self.policy.rule {
            Some(rule) => {
                let rule = rule.clone();
                rule(&pkt, &mut self.rng)
            }
            None => Fate::Default,
        };
        match fate {
            Fate::Drop => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Fate::Deliver(delays) => {
                for d in delays {
                    self.post(to, incoming, data, d);
                }
            }
            Fate::Default => {
                if self.rng.f() < self.policy.loss {
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                let d = self.delay();
                self.post(to, incoming, data, d);
                if self.rng.f() < self.policy.dup {
                    let d = self.delay();
                    self.post(to, incoming, data, d);
                }
            }
        }
        Ok(())
    }
    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        let deadline = Instant::now() + timeout;
        let mb = &self.shared.boxes[self.me];
        let mut q = mb.lock();
        loop {
            let now = Instant::now();
            let next = q.letters.peek().map(|Reverse(l)| l.due);
            if next.is_some_and(|d| d <= now) {
                let Reverse(l) = q.letters.pop().unwrap();
                self.last = l.data;
                return Ok(Some(l.incoming));
            }
            if now >= deadline {
                return Ok(None);
            }
            let until = next.unwrap_or(deadline).min(deadline);
            q = mb.ready.wait_timeout(q, until - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
    fn waker(&self) -> Result<Arc<dyn Waker>, TransportError> {
        Ok(Arc::new(NetWaker { shared: self.shared.clone(), me: self.me }))
    }
}

struct NetWaker {
    shared: Arc<Shared>,
    me: NodeId,
}

impl Waker for NetWaker {
    fn wait(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mb = &self.shared.boxes[self.me];
        let mut q = mb.lock();
        loop {
            let now = Instant::now();
            if std::mem::take(&mut q.woken) {
                return Ok(());
            }
            let next = q.letters.peek().map(|Reverse(l)| l.due);
            if next.is_some_and(|d| d <= now) || deadline.is_some_and(|d| now >= d) {
                return Ok(());
            }
            let until = match (next, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            q = match until {
                Some(u) => mb.ready.wait_timeout(q, u - now).unwrap_or_else(|e| e.into_inner()).0,
                None => mb.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
    fn wake(&self) {
        let mb = &self.shared.boxes[self.me];
        mb.lock().woken = true;
        mb.ready.notify_all();
    }
}

// ---------------------------------------------------------------------------
// Running nodes with a watchdog.
// ---------------------------------------------------------------------------

/// Runs `body` on one thread per node; a node's panic or error, or no
/// outcome from every node within `limit`, fails with `what`.
fn run_nodes<R: Send + 'static>(
    what: &str,
    nets: Vec<Net>,
    config: BarrierConfig,
    limit: Duration,
    body: impl Fn(usize, &mut Barrier<Net>) -> Result<R, String> + Send + Sync + Copy + 'static,
) -> Vec<R> {
    let n = nets.len();
    let shared = nets[0].shared.clone();
    let (tx, rx) = mpsc::channel();
    for (me, net) in nets.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut b = Barrier::new(net, config).map_err(|e| format!("create: {e}"))?;
                let r = body(me, &mut b)?;
                b.finish().map_err(|e| format!("finish: {e}"))?;
                Ok::<R, String>(r)
            }))
            .unwrap_or_else(|p| Err(format!("panic: {}", p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())));
            let _ = tx.send((me, outcome));
        });
    }
    drop(tx);
    let start = Instant::now();
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let left = limit.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok((me, Ok(r))) => out[me] = Some(r),
            Ok((me, Err(e))) => panic!("{what}: node {me}: {e}"),
            Err(_) => {
                let missing: Vec<usize> = (0..n).filter(|&i| out[i].is_none()).collect();
                panic!("{what}: nodes {missing:?} hang (no outcome after {limit:?})");
            }
        }
    }
    let violations = shared.monitor.lock().unwrap_or_else(|e| e.into_inner()).violations.clone();
    assert!(violations.is_empty(), "{what}: on the wire:\n{}", violations.join("\n"));
    out.into_iter().map(Option::unwrap).collect()
}

/// The seeds of a stress case: `MCD_ATTACK_SEEDS` of them (default
/// `default`) from `MCD_ATTACK_BASE` (default 0).
fn seeds(default: u64) -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let base = var("MCD_ATTACK_BASE").unwrap_or(0);
    base..base + var("MCD_ATTACK_SEEDS").unwrap_or(default)
}

/// Runs `cases` (each a closure) on threads, at most `parallel` at a time,
/// and reports every failure.
fn run_cases(cases: Vec<Box<dyn FnOnce() + Send>>, parallel: usize) {
    let cases = Arc::new(Mutex::new(cases.into_iter().collect::<Vec<_>>()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let workers: Vec<_> = (0..parallel)
        .map(|_| {
            let (cases, failures) = (cases.clone(), failures.clone());
            std::thread::spawn(move || loop {
                let Some(case) = cases.lock().unwrap().pop() else { return };
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case)) {
                    let text = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                    failures.lock().unwrap().push(text);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

// ---------------------------------------------------------------------------
// The workload: a random sequence every node shares, every result checked.
// ---------------------------------------------------------------------------

fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn payload(root: usize, k: usize, len: usize) -> Vec<u64> {
    (0..len).map(|i| barriers_mix(((root as u64) << 40) ^ ((k as u64) << 16) ^ i as u64)).collect()
}

fn barriers_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone, Copy)]
struct Work {
    seed: u64,
    rounds: usize,
    /// Broadcasts of several segments now and then.
    long: bool,
    /// Now and then one node (chosen by the sequence) computes this long
    /// right after a broadcast, while its root waits for its entry's answer.
    gap: Duration,
}

/// The shared sequence, on node `me`. Returns the barriers' timeline.
fn workload(me: usize, b: &mut Barrier<Net>, w: Work) -> Result<Timeline, String> {
    let n = b.nodes();
    let reduces = b.config().algorithm != Algorithm::Dissemination;
    let mut s = w.seed | 1;
    let mut timeline = Timeline::default();
    let err = |k: usize, what: &str, e: BarrierError| format!("round {k} ({what}): {e}");
    for k in 0..w.rounds {
        let what = next(&mut s) % 16;
        let root = (next(&mut s) % n as u64) as usize;
        let sleeper = (next(&mut s) % (n as u64 * 6)) as usize; // mostly nobody
        let len = match next(&mut s) % 10 {
            0 if w.long => 400, // three segments
            1 => 0,
            2 => 1,
            _ => 3,
        };
        let bcast = |b: &mut Barrier<Net>, k: usize| -> Result<(), String> {
            let want = payload(root, k, len);
            let mut data = if me == root { want.clone() } else { vec![0xDEAD_BEEF; len] };
            b.bcast(&mut data, root).map_err(|e| err(k, &format!("bcast from {root}, {len} elements"), e))?;
            if data != want {
                return Err(format!("round {k}: WRONG DATA from bcast root {root} at node {me}: {:x?} want {:x?}", &data[..data.len().min(4)], &want[..want.len().min(4)]));
            }
            Ok(())
        };
        match what {
            0..=6 => bcast(b, k)?,
            7 | 8 => {
                let entered = Instant::now();
                b.wait().map_err(|e| err(k, "barrier", e))?;
                timeline.record(entered, Instant::now());
            }
            9 | 10 if reduces => {
                let mut x = [me as u64 * 0x1_0000_0001 + k as u64, (me as u64) << (k % 50)];
                b.allreduce(&mut x, Op::Sum).map_err(|e| err(k, "allreduce", e))?;
                let want0 = (0..n as u64).map(|j| j * 0x1_0000_0001 + k as u64).fold(0u64, u64::wrapping_add);
                let want1 = (0..n as u64).map(|j| j << (k % 50)).fold(0u64, u64::wrapping_add);
                if x != [want0, want1] {
                    return Err(format!("round {k}: WRONG allreduce at node {me}: {x:?} want {:?}", [want0, want1]));
                }
            }
            11 if reduces => {
                let mut x = [me as i32 * 3 - k as i32, -(me as i32)];
                b.reduce(&mut x, Op::Max, root).map_err(|e| err(k, &format!("reduce to {root}"), e))?;
                let want = if me == root { [(n as i32 - 1) * 3 - k as i32, 0] } else { [me as i32 * 3 - k as i32, -(me as i32)] };
                if x != want {
                    return Err(format!("round {k}: WRONG reduce to {root} at node {me}: {x:?} want {want:?}"));
                }
            }
            12 | 13 => {
                // A broadcast, then a split-phase barrier entered at once.
                bcast(b, k)?;
                let entered = Instant::now();
                b.enter().map_err(|e| err(k, "enter", e))?;
                while !b.test().map_err(|e| err(k, "test", e))? {
                    std::thread::yield_now();
                }
                timeline.record(entered, Instant::now());
            }
            _ => {
                // Two broadcasts back to back: the same root, then the next.
                bcast(b, k)?;
                let root2 = (root + 1) % n;
                let want = payload(root2, k + 100_000, 2);
                let mut data = if me == root2 { want.clone() } else { vec![7; 2] };
                b.bcast(&mut data, root2).map_err(|e| err(k, "second bcast", e))?;
                if data != want {
                    return Err(format!("round {k}: WRONG DATA from second bcast root {root2} at node {me}"));
                }
            }
        }
        if sleeper == me && !w.gap.is_zero() {
            std::thread::sleep(w.gap);
        }
    }
    Ok(timeline)
}

/// Runs the workload on `n` nodes; checks results, barrier safety and that
/// every node ends at the same epoch.
fn run_workload(what: String, n: usize, config: BarrierConfig, policy: Policy, w: Work, limit: Duration) {
    let nets = network(n, config.rails, policy);
    let outs = run_nodes(&what, nets, config, limit, move |me, b| {
        let t = workload(me, b, w)?;
        Ok((t, b.epoch(), b.stats()))
    });
    let epochs: Vec<u64> = outs.iter().map(|o| o.1).collect();
    assert!(epochs.iter().all(|&e| e == epochs[0]), "{what}: nodes end at different epochs {epochs:?}");
    let timelines: Vec<Timeline> = outs.iter().map(|o| o.0.clone()).collect();
    let (violations, checked) = check(&timelines);
    assert!(violations.is_empty(), "{what}: barrier safety violated: {violations:?}");
    assert_eq!(checked, timelines[0].barriers.len(), "{what}");
}

fn algorithms() -> Vec<BarrierConfig> {
    vec![
        BarrierConfig::new(Algorithm::Concurrent),
        BarrierConfig::new(Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }),
        BarrierConfig::new(Algorithm::ShuffleExchange),
        BarrierConfig::new(Algorithm::OnePhase),
        BarrierConfig::new(Algorithm::Dissemination),
        BarrierConfig::new(Algorithm::Tree { k: Fanout::THREE, release: Release::Tree }).rails(2),
    ]
}

fn cfg(c: BarrierConfig) -> BarrierConfig {
    c.timeouts(Duration::from_micros(400), Duration::from_secs(6)).deadline(Some(Duration::from_secs(12)))
}

// ---------------------------------------------------------------------------
// Stress: random mixed sequences under heavy loss, duplication, reordering
// and a tail of very late frames.
// ---------------------------------------------------------------------------

#[test]
fn random_mixed_sequences_under_heavy_loss_and_late_frames() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(8) {
        for (i, n) in [2usize, 3, 5, 8].into_iter().enumerate() {
            let configs = algorithms();
            let config = cfg(configs[(seed as usize + i) % configs.len()]);
            let loss = [0.3, 0.4, 0.5][(seed as usize + i) % 3];
            let mut policy = Policy::lossy(loss, 0.3, 7000 + seed * 31 + n as u64);
            if seed % 3 == 2 {
                // A nasty tail: one frame in ten arrives up to 30 ms late
                // (several epochs on), and duplicates are common.
                (policy.tail, policy.tail_delay, policy.dup) = (0.1, Duration::from_millis(30), 0.5);
            }
            let w = Work { seed: 0xA11CE + seed * 977 + n as u64, rounds: if n == 8 { 25 } else { 40 }, long: seed % 2 == 0, gap: Duration::ZERO };
            let what = format!("mixed seed={seed} n={n} {} rails={} loss={loss}", config.algorithm, config.rails);
            cases.push(Box::new(move || run_workload(what, n, config, policy, w, Duration::from_secs(60))));
        }
    }
    run_cases(cases, 4);
}

#[test]
fn epochs_crossing_two_to_the_32_with_roots_alternating_between_two_nodes() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(6) {
        let n = 2 + (seed as usize % 2);
        let mut config = cfg(algorithms()[seed as usize % 6]);
        config.first_epoch = u64::from(u32::MAX) - 7;
        let policy = Policy::lossy(0.4, 0.3, 900 + seed);
        let what = format!("wrap seed={seed} n={n} {}", config.algorithm);
        cases.push(Box::new(move || {
            let nets = network(n, config.rails, policy);
            let outs = run_nodes(&what, nets, config, Duration::from_secs(40), move |me, b| {
                for k in 0..30 {
                    // Roots alternate 0, 1, 0, 1, ..., the same root twice now and then.
                    let root = if k % 7 == 6 { (k / 2) % 2 } else { k % 2 };
                    let want = payload(root, k, 3);
                    let mut data = if me == root { want.clone() } else { vec![1; 3] };
                    b.bcast(&mut data, root).map_err(|e| format!("round {k}: {e}"))?;
                    if data != want {
                        return Err(format!("round {k}: WRONG DATA at node {me} from root {root}"));
                    }
                }
                Ok(b.epoch())
            });
            assert!(outs.iter().all(|&e| e == u64::from(u32::MAX) - 7 + 30), "{what}: {outs:?}");
        }));
    }
    run_cases(cases, 3);
}

// ---------------------------------------------------------------------------
// Targeted faults on the broadcast's own messages.
// ---------------------------------------------------------------------------

/// Every original of a broadcast's data to `victim` is lost, and half the
/// answers too: the victim has the end (n > 2) long before the data, and
/// the root moves on meanwhile.
fn data_lost_to(victim: NodeId) -> impl Fn(&Pkt, &mut Rng) -> Fate + Send + Sync {
    move |p, rng| match (p.msg.kind, p.msg.tag) {
        (MsgKind::Data, DATA) if p.to == victim => Fate::Drop,
        (MsgKind::Answer, DATA) if p.to == victim && rng.f() < 0.5 => Fate::Drop,
        _ => Fate::Default,
    }
}

/// Every original of a broadcast's data to `victim` arrives 10 to 40 ms
/// late: after the end, after the root moved on (often two epochs on).
fn data_late_to(victim: NodeId) -> impl Fn(&Pkt, &mut Rng) -> Fate + Send + Sync {
    move |p, rng| match (p.msg.kind, p.msg.tag) {
        (MsgKind::Data, DATA) if p.to == victim => Fate::Deliver(vec![Duration::from_millis(10 + (rng.f() * 30.0) as u64)]),
        _ => Fate::Default,
    }
}

/// Every original entry is lost (the root must NACK each).
fn entries_lost(p: &Pkt, _: &mut Rng) -> Fate {
    if p.msg.kind == MsgKind::Data && p.msg.tag == ENTERED {
        Fate::Drop
    } else {
        Fate::Default
    }
}

/// Every original end is lost.
fn ends_lost(p: &Pkt, _: &mut Rng) -> Fate {
    if p.msg.kind == MsgKind::Data && p.msg.tag == DONE {
        Fate::Drop
    } else {
        Fate::Default
    }
}

/// Every broadcast message goes only as an answer; answers of any kind are
/// delivered twice, once at once and once 5 to 25 ms late (across epochs),
/// and NACKs are often late too.
fn only_answers_and_late_copies(p: &Pkt, rng: &mut Rng) -> Fate {
    match p.msg.kind {
        MsgKind::Data if matches!(p.msg.tag, DATA | ENTERED | DONE) => Fate::Drop,
        MsgKind::Answer => Fate::Deliver(vec![Duration::from_micros(50), Duration::from_millis(5 + (rng.f() * 20.0) as u64)]),
        MsgKind::Nack if rng.f() < 0.3 => Fate::Deliver(vec![Duration::from_millis((rng.f() * 15.0) as u64)]),
        _ => Fate::Default,
    }
}

#[test]
fn targeted_losses_and_delays_of_the_broadcasts_own_messages() {
    type RuleFn = fn(usize) -> Rule;
    let rules: Vec<(&str, RuleFn)> = vec![
        ("data lost to the last node", |n| Arc::new(data_lost_to(n - 1))),
        ("data lost to node 1", |_| Arc::new(data_lost_to(1))),
        ("data late to the last node", |n| Arc::new(data_late_to(n - 1))),
        ("data late to node 0", |_| Arc::new(data_late_to(0))),
        ("entries lost", |_| Arc::new(entries_lost)),
        ("ends lost", |_| Arc::new(ends_lost)),
        ("only answers, late copies", |_| Arc::new(only_answers_and_late_copies)),
    ];
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for seed in seeds(2) {
        for (r, (name, rule)) in rules.iter().enumerate() {
            for n in [2usize, 3, 5] {
                let configs = algorithms();
                let config = cfg(configs[(r + n + seed as usize) % configs.len()]);
                let mut policy = Policy::lossy(0.15, 0.2, 300 + seed * 101 + r as u64 * 7 + n as u64);
                policy.rule = Some(rule(n));
                let w = Work { seed: 0xBEEF + seed * 31 + r as u64 * 1000 + n as u64, rounds: 25, long: r % 2 == 0, gap: Duration::ZERO };
                let what = format!("{name} seed={seed} n={n} {} rails={}", config.algorithm, config.rails);
                cases.push(Box::new(move || run_workload(what, n, config, policy, w, Duration::from_secs(60))));
            }
        }
    }
    run_cases(cases, 4);
}

/// A non-root whose entry is lost (every original) computes for longer than
/// the failure timeout right after its broadcast: only its progress agent
/// can answer the root's NACK. Nobody may be taken for dead; every result
/// stays right.
#[test]
fn entries_lost_while_non_roots_compute_past_the_failure_timeout() {
    let mut cases: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for (i, n) in [2usize, 3, 4].into_iter().enumerate() {
        let config = algorithms()[i * 2].timeouts(Duration::from_millis(1), Duration::from_millis(120)).deadline(Some(Duration::from_secs(10)));
        let policy = Policy::lossy(0.2, 0.1, 55 + i as u64).with(entries_lost);
        let what = format!("entries lost, computing n={n} {}", config.algorithm);
        cases.push(Box::new(move || {
            let nets = network(n, config.rails, policy);
            run_nodes(&what, nets, config, Duration::from_secs(30), move |me, b| {
                for k in 0..4 {
                    let root = k % n;
                    let want = payload(root, k, 3);
                    let mut data = if me == root { want.clone() } else { vec![0; 3] };
                    b.bcast(&mut data, root).map_err(|e| format!("round {k}: {e}"))?;
                    if data != want {
                        return Err(format!("round {k}: WRONG DATA"));
                    }
                    if me == (root + 1) % n {
                        std::thread::sleep(Duration::from_millis(300)); // 2.5 failure timeouts
                    }
                }
                Ok(())
            });
        }));
    }
    run_cases(cases, 3);
}

/// The root's data never reaches node 2 (not the original, not an answer)
/// until node 2 alone is released: the root may return from that broadcast
/// and from the next one (its entries are all there), but never from a
/// third call, which needs node 2 to have entered the second broadcast, so
/// to have had the first one's data: the root is at most one epoch ahead.
#[test]
fn the_root_never_gets_further_than_the_next_broadcast_ahead_of_a_node_without_the_data() {
    for n in [2usize, 3, 5] {
        let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let h = hold.clone();
        let policy = Policy::clean().with(move |p, _| match (p.msg.kind, p.msg.tag) {
            (MsgKind::Data | MsgKind::Answer, DATA) if p.to == n - 1 && h.load(Ordering::SeqCst) => Fate::Drop,
            _ => Fate::Default,
        });
        let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_micros(500), Duration::from_secs(10));
        let start = Instant::now();
        let releaser = {
            let hold = hold.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                hold.store(false, Ordering::SeqCst);
            })
        };
        let what = format!("held data n={n}");
        let outs = run_nodes(&what, network(n, 1, policy), config, Duration::from_secs(20), move |me, b| {
            let mut returned = Vec::new();
            for k in 0..3 {
                let want = payload(0, k, 2);
                let mut data = if me == 0 { want.clone() } else { vec![0; 2] };
                b.bcast(&mut data, 0).map_err(|e| format!("round {k}: {e}"))?;
                if data != want {
                    return Err(format!("round {k}: WRONG DATA"));
                }
                returned.push(start.elapsed());
            }
            Ok(returned)
        });
        releaser.join().unwrap();
        let (root, held) = (&outs[0], &outs[n - 1]);
        assert!(held[0] >= Duration::from_millis(300), "{what}: node {} had the data while it was held: {held:?}", n - 1);
        assert!(root[2] >= held[0], "{what}: the root returned from its third broadcast ({:?}) before node {} had the first ({:?})", root[2], n - 1, held[0]);
        if std::env::var("MCD_ATTACK_VERBOSE").is_ok() {
            eprintln!("{what}: root returned at {root:?}; node {} at {held:?}", n - 1);
        }
    }
}

// ---------------------------------------------------------------------------
// Calls that do not match.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Call {
    Bcast(usize, usize), // root, count
    Allreduce,
    Reduce(usize),
    Barrier,
}

fn call(b: &mut Barrier<Net>, c: Call) -> Result<Vec<u32>, BarrierError> {
    match c {
        Call::Bcast(root, count) => {
            let mut d: Vec<u32> = if b.node() == root { (0..count as u32).map(|i| 100 + i).collect() } else { vec![0; count] };
            b.bcast(&mut d, root)?;
            Ok(d)
        }
        Call::Allreduce => {
            let mut d = [b.node() as u32 + 1];
            b.allreduce(&mut d, Op::Sum)?;
            Ok(d.to_vec())
        }
        Call::Reduce(root) => {
            let mut d = [b.node() as u32 + 1];
            b.reduce(&mut d, Op::Sum, root)?;
            Ok(d.to_vec())
        }
        Call::Barrier => b.wait().map(|()| Vec::new()),
    }
}

/// Each node makes its call, then the same call again (a broadcast returns
/// before it can know that another node differs). Every node must end with
/// a mismatch error; the only result allowed is the root's very data, to a
/// node that made its root's exact call, from its first call.
fn mismatch_case(calls: Vec<Call>, policy: Policy, algorithm: Algorithm, late: Option<usize>) -> Result<(), String> {
    let n = calls.len();
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(10)).deadline(Some(Duration::from_secs(4)));
    let all_done = Arc::new(std::sync::Barrier::new(n));
    let calls = Arc::new(calls);
    let threads: Vec<_> = network(n, 1, policy)
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            let (all_done, calls) = (all_done.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, config).map_err(|e| e.to_string())?;
                if late == Some(me) {
                    // This node calls late: the others are deep in their calls.
                    std::thread::sleep(Duration::from_millis(30));
                }
                let first = call(&mut b, calls[me]);
                let second = if first.is_ok() { Some(call(&mut b, calls[me])) } else { None };
                all_done.wait();
                Ok::<_, String>((first, second))
            })
        })
        .collect();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut problems = Vec::new();
    for (me, o) in outcomes.into_iter().enumerate() {
        let (first, second) = o?;
        let is_mismatch = |r: &Result<Vec<u32>, BarrierError>| matches!(r, Err(BarrierError::Usage(e)) if e.contains("mismatch"));
        let legit_first = |r: &Result<Vec<u32>, BarrierError>| match (r, calls[me]) {
            (Ok(d), Call::Bcast(root, count)) => {
                // This node's call is its root's exact call, and it has the root's data.
                calls[root] == Call::Bcast(root, count) && *d == (0..count as u32).map(|i| 100 + i).collect::<Vec<_>>()
            }
            _ => false,
        };
        if is_mismatch(&first) {
            continue;
        }
        if !legit_first(&first) {
            problems.push(format!("node {me}: first call {:?} gave {first:?}", calls[me]));
            continue;
        }
        match &second {
            Some(r) if is_mismatch(r) => {}
            other => problems.push(format!("node {me}: first call {:?} gave {first:?}, then the same again gave {other:?} (want a mismatch error)", calls[me])),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{algorithm} calls {:?} (late: {late:?}): {}", calls, problems.join("; ")))
    }
}

#[test]
fn every_mismatch_among_broadcasts_reductions_and_barriers_is_an_error_everywhere() {
    let menu = |n: usize| {
        let mut m: Vec<Call> = (0..n).map(|r| Call::Bcast(r, 2)).collect();
        m.push(Call::Bcast(0, 3));
        m.push(Call::Allreduce);
        m.push(Call::Reduce(n - 1));
        m.push(Call::Barrier);
        m
    };
    let mut cases: Vec<(Vec<Call>, bool)> = Vec::new();
    // Two nodes: every pair that differs, with a broadcast in it (a barrier
    // against a reduction is no broadcast's business: the barrier returns).
    let m2 = menu(2);
    for a in &m2 {
        for b in &m2 {
            if a != b && (matches!(a, Call::Bcast(..)) || matches!(b, Call::Bcast(..))) {
                cases.push((vec![*a, *b], false));
            }
        }
    }
    // Three nodes: every combination of a small menu that holds a
    // broadcast and is not the same call everywhere.
    let m3 = [Call::Bcast(0, 2), Call::Bcast(1, 2), Call::Bcast(2, 2), Call::Bcast(1, 3), Call::Allreduce, Call::Reduce(2), Call::Barrier];
    for a in m3 {
        for b in m3 {
            for c in m3 {
                let calls = vec![a, b, c];
                let bcast = calls.iter().any(|c| matches!(c, Call::Bcast(..)));
                // The same call everywhere is no mismatch; broadcasts from one
                // root that differ only in count are covered once per root.
                if bcast && !(a == b && b == c) {
                    cases.push((calls, false));
                }
            }
        }
    }
    // Some under loss.
    let lossy: Vec<(Vec<Call>, bool)> = cases.iter().step_by(5).map(|(c, _)| (c.clone(), true)).collect();
    cases.extend(lossy);
    let failures = Arc::new(Mutex::new(Vec::new()));
    let work = Arc::new(Mutex::new(cases.into_iter().enumerate().collect::<Vec<_>>()));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (failures, work) = (failures.clone(), work.clone());
            std::thread::spawn(move || loop {
                let Some((i, (calls, lossy))) = work.lock().unwrap().pop() else { return };
                let algorithm = [Algorithm::Concurrent, Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast }, Algorithm::OnePhase][i % 3];
                let policy = if lossy { Policy::lossy(0.3, 0.2, 40 + i as u64) } else { Policy::clean() };
                let late = (i % 4 != 0).then_some(i % calls.len());
                if let Err(e) = mismatch_case(calls, policy, algorithm, late) {
                    failures.lock().unwrap().push(format!("{}{e}", if lossy { "(lossy) " } else { "" }));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{} case(s):\n{}", failures.len(), failures.join("\n"));
}

/// A broadcast whose count differs at one node (node 2), from a root that
/// calls late: every entry is there before the root's data goes out, so
/// the root completes the epoch inside its own call and reports the
/// mismatch at once; node 2 reports it too. Node 0 made the root's exact
/// call and has the root's data (its end, which carries the mismatch, is
/// late). Every node stops at its error, as a program does; node 0 calls
/// once more, and must get the mismatch (it learns it from the end before
/// it enters the next epoch), not wait for a root that will never come.
#[test]
fn a_count_mismatch_seen_first_by_a_late_root_leaves_no_node_waiting() {
    let policy = Policy::clean().with(|p, _| match (p.msg.kind, p.msg.tag) {
        (MsgKind::Data, DONE) if p.to == 0 => Fate::Deliver(vec![Duration::from_millis(30)]),
        _ => Fate::Default,
    });
    let config = BarrierConfig::new(Algorithm::Concurrent).timeouts(Duration::from_millis(1), Duration::from_secs(10)).deadline(Some(Duration::from_secs(2)));
    let counts = [2usize, 2, 3];
    let all_done = Arc::new(std::sync::Barrier::new(3));
    let threads: Vec<_> = network(3, 1, policy)
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            let all_done = all_done.clone();
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, config).unwrap();
                if me == 1 {
                    std::thread::sleep(Duration::from_millis(50)); // the root calls late
                }
                let mut outcomes = vec![call(&mut b, Call::Bcast(1, counts[me]))];
                if outcomes[0].is_ok() {
                    outcomes.push(call(&mut b, Call::Bcast(1, counts[me])));
                }
                all_done.wait();
                outcomes
            })
        })
        .collect();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let text = format!("{outcomes:?}");
    for (me, o) in outcomes.iter().enumerate() {
        let last = o.last().unwrap();
        assert!(
            matches!(last, Err(BarrierError::Usage(e)) if e.contains("mismatch")),
            "node {me} ends with {last:?}, not a mismatch error; all: {text}"
        );
    }
}
