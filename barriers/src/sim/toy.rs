//! Toy nodes that test the simulator itself: a central barrier (every
//! node reports to node 0, which folds the contributions in rank order and
//! multicasts the release with the result) without any loss recovery, and
//! deliberately broken variants the checkers must catch.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::check::Violation;
use super::node::{AppCall, NodeEvent, NodeSpec, SimNode, Transmit};
use super::{explain, run_seed_with, FaultKind, FaultMix, Options};
use crate::collective::{combine, Collective};
use crate::plan::{Algorithm, Dest};
use crate::transport::{Msg, MsgKind, NodeId};
use crate::BarrierError;

/// How a toy is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// Node 0 releases once all but one node arrived.
    EarlyRelease,
    /// Node 1 flips a bit of every result it gets.
    WrongResult,
    /// Node 1 fails its third call naming node 2 silent.
    FalseVerdict,
    /// Nothing is sent again: a lost message is lost for good.
    NoRetry,
}

/// A toy's retry interval.
const RETRY: Duration = Duration::from_millis(1);

struct Toy {
    me: NodeId,
    n: usize,
    instance: u64,
    epoch: u32,
    entered: bool,
    split: bool,
    released: Option<Option<Vec<u8>>>,
    call: Collective,
    calls: u32,
    arrivals: BTreeMap<u32, Vec<Option<Vec<u8>>>>,
    calls_at: BTreeMap<u32, Collective>,
    out: VecDeque<(Transmit, Vec<u8>)>,
    events: VecDeque<NodeEvent>,
    bug: Bug,
    now: Instant,
    retry: Option<Instant>,
    mine: Vec<u8>,
    last_release: Option<(u32, Vec<u8>)>,
}

impl Toy {
    fn new(spec: &NodeSpec, bug: Bug) -> Toy {
        Toy {
            me: spec.node,
            n: spec.nodes,
            instance: spec.incarnation >> 40,
            epoch: 0,
            entered: false,
            split: false,
            released: None,
            call: Collective::Barrier,
            calls: 0,
            arrivals: BTreeMap::new(),
            calls_at: BTreeMap::new(),
            out: VecDeque::new(),
            events: VecDeque::from([NodeEvent::Joined { instance: spec.incarnation >> 40 }]),
            bug,
            now: Instant::now(),
            retry: None,
            mine: Vec::new(),
            last_release: None,
        }
    }

    fn msg(&self, tag: u16) -> Msg {
        Msg { kind: MsgKind::Data, instance: self.instance, epoch: self.epoch, tag, arg: 0 }
    }

    fn enter(&mut self, call: Collective, input: Vec<u8>) {
        self.calls += 1;
        if self.bug == Bug::FalseVerdict && self.me == 1 && self.calls == 3 {
            self.events.push_back(NodeEvent::Failed(BarrierError::PeerSilent { epoch: 2, silent: vec![2], for_: Duration::ZERO }));
            return;
        }
        self.entered = true;
        self.call = call;
        self.released = None;
        if self.me == 0 {
            self.arrive(0, self.epoch, call, input);
        } else {
            let msg = self.msg(0);
            self.mine.clone_from(&input);
            self.out.push_back((Transmit { rail: 0, dest: Dest::Node(0), msg }, input));
            if self.bug != Bug::NoRetry {
                self.retry = Some(self.now + RETRY);
            }
        }
    }

    fn arrive(&mut self, from: NodeId, epoch: u32, call: Collective, data: Vec<u8>) {
        let n = self.n;
        if epoch < self.epoch {
            // A straggler's copy: it missed the release.
            if let Some((e, r)) = self.last_release.clone().filter(|(e, _)| *e == epoch && self.bug != Bug::NoRetry) {
                let msg = Msg { epoch: e, ..self.msg(1) };
                self.out.push_back((Transmit { rail: 0, dest: Dest::Node(from), msg }, r));
            }
            return;
        }
        self.arrivals.entry(epoch).or_insert_with(|| vec![None; n])[from] = Some(data);
        if from == 0 {
            self.calls_at.insert(epoch, call);
        }
        let have = self.arrivals.get(&self.epoch).map_or(0, |a| a.iter().flatten().count());
        let need = if self.bug == Bug::EarlyRelease { n - 1 } else { n };
        if self.entered && self.released.is_none() && have >= need {
            let a = self.arrivals.remove(&self.epoch).expect("arrivals");
            let result = match self.call {
                Collective::Barrier => Vec::new(),
                Collective::Bcast { root } => a[root].clone().unwrap_or_default(),
                Collective::Allreduce { op, dtype } | Collective::Reduce { op, dtype, .. } => {
                    let mut acc = a[0].clone().expect("own");
                    for x in a[1..].iter().flatten() {
                        combine(op, dtype, &mut acc, x, false);
                    }
                    acc
                }
            };
            let msg = self.msg(1);
            self.out.push_back((Transmit { rail: 0, dest: Dest::All, msg }, result.clone()));
            self.last_release = Some((self.epoch, result.clone()));
            self.release(result);
        }
    }

    fn release(&mut self, mut result: Vec<u8>) {
        if self.bug == Bug::WrongResult && self.me == 1 && !result.is_empty() {
            result[0] ^= 1;
        }
        let here = match self.call {
            Collective::Barrier => false,
            Collective::Reduce { root, .. } => root == self.me,
            _ => true,
        };
        self.entered = false;
        self.retry = None;
        self.epoch += 1;
        let result = here.then_some(result);
        if self.split {
            self.released = Some(result);
        } else {
            self.events.push_back(NodeEvent::Completed { result });
        }
    }
}

impl SimNode for Toy {
    fn handle_message(&mut self, now: Instant, from: NodeId, _rail: usize, msg: &Msg, data: &[u8]) {
        self.now = now;
        if msg.instance != self.instance {
            return;
        }
        match msg.tag {
            0 if self.me == 0 => self.arrive(from, msg.epoch, self.call, data.to_vec()),
            1 if msg.epoch == self.epoch && self.entered => self.release(data.to_vec()),
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.retry.is_some_and(|r| r <= now) {
            let msg = self.msg(0);
            self.out.push_back((Transmit { rail: 0, dest: Dest::Node(0), msg }, self.mine.clone()));
            self.retry = Some(now + RETRY);
        }
    }

    fn call(&mut self, now: Instant, call: AppCall) {
        self.now = now;
        match call {
            AppCall::Collective { call, input } => {
                self.split = false;
                self.enter(call, input)
            }
            AppCall::Enter => {
                self.split = true;
                self.enter(Collective::Barrier, Vec::new())
            }
            AppCall::Wait => {
                self.split = false;
                if let Some(result) = self.released.take() {
                    self.events.push_back(NodeEvent::Completed { result });
                }
            }
            AppCall::Finish => {
                self.split = false;
                self.enter(Collective::Barrier, Vec::new())
            }
        }
    }

    fn poll_transmit(&mut self, data: &mut Vec<u8>) -> Option<Transmit> {
        let (t, d) = self.out.pop_front()?;
        data.extend_from_slice(&d);
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.retry
    }

    fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }
}

fn options(faults: &str) -> Options {
    Options { nodes: Some(5), algorithm: Some(Algorithm::Concurrent), faults: FaultMix::parse(faults).unwrap(), ..Options::default() }
}

fn run(seed: u64, o: &Options, bug: Bug) -> Vec<Violation> {
    run_seed_with(seed, o, move |spec: &NodeSpec, _| Toy::new(spec, bug)).1
}

#[test]
fn a_correct_toy_passes_every_checker_and_a_seed_replays_exactly() {
    let o = options("dup,reorder,skew,b2b");
    for seed in 0..20 {
        let (r, v) = run_seed_with(seed, &o, |spec: &NodeSpec, _| Toy::new(spec, Bug::None));
        assert!(v.is_empty(), "{}", explain(&r, &v, &o));
        assert!(r.stats.completed && r.stats.barriers > 0);
        // The same seed: the same run, event for event.
        let (again, _) = run_seed_with(seed, &o, |spec: &NodeSpec, _| Toy::new(spec, Bug::None));
        assert_eq!((r.stats, &r.ops), (again.stats, &again.ops));
    }
}

#[test]
fn the_safety_checker_catches_a_release_before_the_last_entry() {
    let o = options("none");
    let caught = (0..20).filter(|&s| run(s, &o, Bug::EarlyRelease).iter().any(|v| v.checker() == "safety")).count();
    assert!(caught >= 10, "caught in {caught} of 20 seeds");
}

#[test]
fn the_agreement_checker_catches_a_wrong_result() {
    let o = options("none");
    let v = run(1, &o, Bug::WrongResult);
    assert!(v.iter().any(|v| matches!(v, Violation::Agreement { node: 1, .. })), "{v:?}");
    assert!(!v.iter().any(|v| matches!(v, Violation::Agreement { node, .. } if *node != 1)), "{v:?}");
}

#[test]
fn the_verdict_checker_catches_a_live_node_named_silent() {
    let o = Options { instances: (1, 1), ..options("none") };
    let (r, v) = run_seed_with(3, &o, |spec: &NodeSpec, _| Toy::new(spec, Bug::FalseVerdict));
    assert!(v.iter().any(|v| matches!(v, Violation::Verdict { node: 1, .. })), "{v:?}");
    // The others wait for node 1 for ever: stuck.
    assert!(v.iter().any(|v| v.checker() == "liveness"), "{v:?}");
    let text = explain(&r, &v, &o);
    assert!(text.contains("TOLD failed") && text.contains("run it again: cargo run --release -p mcd-bench -- dst --seed 3"), "{text}");
}

#[test]
fn without_recovery_a_lost_message_is_a_stuck_node_and_a_mismatch_goes_unreported() {
    let o = options("loss");
    let stuck = (0..10).filter(|&s| run(s, &o, Bug::NoRetry).iter().any(|v| matches!(v, Violation::Stuck { .. }))).count();
    assert!(stuck >= 5, "{stuck} of 10");
    let o = Options { faults: FaultMix::only(&[FaultKind::Mismatch]), ..options("none") };
    let unreported = (0..10).filter(|&s| run(s, &o, Bug::None).iter().any(|v| v.checker() == "mismatch")).count();
    assert!(unreported >= 3, "{unreported} of 10");
}
