// The programmable in-process network, the on-the-wire monitor and the
// workloads shared by the broadcast attack tests (bcast_entry_attack.rs,
// bcast_implied_end_attack.rs), included by both: test files are crates of
// their own.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use barriers::check::{check, Timeline};
use barriers::{Algorithm, Barrier, BarrierConfig, BarrierError, Fanout, Msg, MsgKind, NodeId, Op, Release};

/// The broadcast's tags on the wire (plan::tag).
const DATA: u16 = 4;
const ENTERED: u16 = 5;
const DONE: u16 = 6;

// ---------------------------------------------------------------------------
// A programmable in-process network: barriers::mem's, with a send rule
// made of a Policy and a Monitor.
// ---------------------------------------------------------------------------

/// A node's end of the network.
type Net = barriers::mem::MemTransport;

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

/// The sender's random stream.
struct Rng<'a>(&'a mut dyn FnMut() -> f64);

impl Rng<'_> {
    fn f(&mut self) -> f64 {
        (self.0)()
    }
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
    #[allow(dead_code)] // (bcast_entry_attack.rs has no rule of its own)
    fn with(mut self, rule: impl Fn(&Pkt, &mut Rng) -> Fate + Send + Sync + 'static) -> Policy {
        self.rule = Some(Arc::new(rule));
        self
    }

    /// A delivery's delay: mostly up to `max_delay`, a `tail` of them up to `tail_delay`.
    fn delay(&self, rng: &mut Rng) -> Duration {
        if rng.f() < self.tail {
            self.tail_delay.mul_f64(rng.f())
        } else {
            self.max_delay.mul_f64(rng.f())
        }
    }

    /// The fate of `pkt`: the rule's, else random loss, delay and duplication.
    fn fate(&self, pkt: &Pkt, rng: &mut Rng) -> barriers::mem::Fate {
        match self.rule.as_ref().map_or(Fate::Default, |rule| rule(pkt, rng)) {
            Fate::Drop => barriers::mem::Fate::Drop,
            Fate::Deliver(delays) => barriers::mem::Fate::Deliver(delays),
            Fate::Default if rng.f() < self.loss => barriers::mem::Fate::Drop,
            Fate::Default => {
                let mut delays = vec![self.delay(rng)];
                if rng.f() < self.dup {
                    delays.push(self.delay(rng));
                }
                barriers::mem::Fate::Deliver(delays)
            }
        }
    }
}

/// A network's ends and its monitor.
struct Network {
    nets: Vec<Net>,
    monitor: Arc<Mutex<Monitor>>,
}

fn network(n: usize, rails: usize, policy: Policy) -> Network {
    let monitor = Arc::new(Mutex::new(Monitor::default()));
    let watch = monitor.clone();
    let faults = barriers::mem::Faults { seed: policy.seed, ..barriers::mem::Faults::none() };
    let rule: barriers::mem::SendRule = Arc::new(move |p: &barriers::mem::Posted<'_>, random: &mut dyn FnMut() -> f64| {
        watch.lock().unwrap_or_else(|e| e.into_inner()).sent(n, p.from, p.to, &p.msg, p.data);
        policy.fate(&Pkt { from: p.from, to: p.to, msg: p.msg }, &mut Rng(random))
    });
    Network { nets: barriers::mem::network_with_rule(n, rails, faults, rule), monitor }
}

/// Watches every message as it is sent (before any fault), on one clock:
///
/// - an answer must carry exactly what the original carried (the stored
///   copy of the right epoch, never another's; a broadcast's end that was
///   implied, never sent, must be answered the same way every time);
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
            // A root that broadcasts again at once never sends its end (the
            // next data implies it) but answers for it: the first answer
            // stands for the original, and every later one must match it.
            MsgKind::Answer if msg.tag == DONE && !self.originals.contains_key(&(from, msg.epoch, msg.tag)) => {
                self.originals.insert((from, msg.epoch, msg.tag), data.to_vec());
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

// ---------------------------------------------------------------------------
// Running nodes with a watchdog.
// ---------------------------------------------------------------------------

/// Runs `body` on one thread per node; a node's panic or error, or no
/// outcome from every node within `limit`, fails with `what`.
fn run_nodes<R: Send + 'static>(
    what: &str,
    network: Network,
    config: BarrierConfig,
    limit: Duration,
    body: impl Fn(usize, &mut Barrier<Net>) -> Result<R, String> + Send + Sync + Copy + 'static,
) -> Vec<R> {
    let Network { nets, monitor } = network;
    let n = nets.len();
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
    let violations = monitor.lock().unwrap_or_else(|e| e.into_inner()).violations.clone();
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
// Calls that do not match.
// ---------------------------------------------------------------------------

/// One node's call in a mismatch case.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Call {
    Bcast(usize, usize), // root, count
    Allreduce,
    Reduce(usize),
    Barrier,
}

/// Makes `c` on `b` with data of its own (a broadcast's root: 100, 101, ...).
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

/// What is wrong with node `me`'s outcome in a mismatch case: its `first`
/// call, then (`second`) the same again. Every node must get a mismatch
/// error, at the first call or the second (the first returned before the
/// mismatch showed: the second reports it), and no call may wait for ever;
/// the only results allowed from the first call are the root's very data,
/// to a node that made its root's exact call, and a reduce's non-root's own
/// data unchanged (a reduce that gathers first returns at its send).
fn mismatch_verdict(me: usize, calls: &[Call], first: &Result<Vec<u32>, BarrierError>, second: Option<&Result<Vec<u32>, BarrierError>>) -> Option<String> {
    let is_mismatch = |r: &Result<Vec<u32>, BarrierError>| matches!(r, Err(BarrierError::CollectiveMismatch { .. }));
    let legit_first = match (first, calls[me]) {
        (Ok(d), Call::Bcast(root, count)) => calls[root] == Call::Bcast(root, count) && *d == (0..count as u32).map(|i| 100 + i).collect::<Vec<_>>(),
        (Ok(d), Call::Reduce(root)) => root != me && barriers::plan::reduce_gathers(calls.len()) && d[..] == [me as u32 + 1],
        _ => false,
    };
    if is_mismatch(first) {
        return None;
    }
    if !legit_first {
        return Some(format!("node {me}: call {:?} gave {first:?}", calls[me]));
    }
    match second {
        Some(r) if is_mismatch(r) => None,
        other => Some(format!("node {me}: call {:?} gave {first:?}, then the same again gave {other:?} (want a mismatch error)", calls[me])),
    }
}

/// A mismatch case: every node first broadcasts from `first_root` if set
/// (the same call everywhere: must succeed), then makes its call of
/// `calls`, then the same again, whatever the first returned (a broadcast
/// returns before it can know that another node differs; issue 28: a
/// program goes on after a failed collective, and the collectives after it
/// work, so every node makes the second call, as every node of a program
/// would). Node `late` makes its calls (after the
/// first broadcast) late, while the others are deep in theirs. Judged by
/// [`mismatch_verdict`].
fn mismatch_case(first_root: Option<usize>, calls: Vec<Call>, policy: Policy, algorithm: Algorithm, late: Option<usize>) -> Result<(), String> {
    let n = calls.len();
    let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_secs(10)).deadline(Some(Duration::from_secs(4)));
    let all_done = Arc::new(std::sync::Barrier::new(n));
    let calls = Arc::new(calls);
    let threads: Vec<_> = network(n, 1, policy)
        .nets
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            let (all_done, calls) = (all_done.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut b = Barrier::new(t, config).map_err(|e| e.to_string())?;
                let zero = first_root.map(|root| call(&mut b, Call::Bcast(root, 2)));
                if late == Some(me) {
                    std::thread::sleep(Duration::from_millis(if first_root.is_some() { 20 } else { 30 }));
                }
                let first = call(&mut b, calls[me]);
                let second = Some(call(&mut b, calls[me]));
                all_done.wait();
                Ok::<_, String>((zero, first, second))
            })
        })
        .collect();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut problems = Vec::new();
    for (me, o) in outcomes.into_iter().enumerate() {
        let (zero, first, second) = o?;
        if zero.as_ref().is_some_and(|z| !matches!(z, Ok(d) if d[..] == [100, 101])) {
            problems.push(format!("node {me}: the matching first broadcast gave {zero:?}"));
            continue;
        }
        problems.extend(mismatch_verdict(me, &calls, &first, second.as_ref()));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{algorithm} after a broadcast from {first_root:?}, calls {:?} (late: {late:?}): {}", calls, problems.join("; ")))
    }
}
