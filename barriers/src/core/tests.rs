//! The core's unit tests: one node's core driven by hand in virtual time.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::join::{fingerprint_of, REFUSE_CONFIG};
use super::progress::Phase;
use super::window::BASE;
use super::*;
use crate::collective::Collective;
use crate::plan::{self, Algorithm};
use crate::transport::{status, Incoming, MsgKind};
use crate::types::{BarrierConfig, BarrierError, MIN_PROBES};

/// A node's core driven by hand, in virtual time: what arrives is
/// pushed by the test, what is sent is recorded (a multicast as one
/// message per node).
struct Node {
    core: Core,
    transport: Wire,
    now: Instant,
}

#[derive(Default)]
struct Wire {
    inbox: VecDeque<Incoming>,
    /// Data of the messages in `inbox` (in order; missing: none).
    inbox_data: VecDeque<Vec<u8>>,
    sent: Vec<(NodeId, Msg)>,
    /// Data of each message in `sent`.
    sent_data: Vec<Vec<u8>>,
}

impl std::ops::Deref for Node {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl std::ops::DerefMut for Node {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.core
    }
}

impl Node {
    /// Node `me` of `n`, joined to INSTANCE.
    fn new(me: NodeId, n: usize, config: BarrierConfig) -> Node {
        let now = Instant::now();
        let setup = Setup { me, nodes: n, rails: 1, multicast: false, max_data: 1000 };
        let mut core = Core::new(setup, config, now).unwrap();
        core.joined(INSTANCE);
        Node { core, transport: Wire::default(), now }
    }

    /// Records what the core sends.
    fn collect(&mut self) {
        let me = self.core.me();
        let n = self.core.nodes();
        while let Some(t) = self.core.poll_transmit() {
            let to: Vec<NodeId> = match t.to {
                To::Node(to) => vec![to],
                To::All => (0..n).filter(|&p| p != me).collect(),
            };
            for to in to {
                self.transport.sent.push((to, t.msg));
                self.transport.sent_data.push(t.data.to_vec());
            }
        }
    }

    /// Feeds the core everything pushed.
    fn feed(&mut self) {
        while let Some(m) = self.transport.inbox.pop_front() {
            let data = self.transport.inbox_data.pop_front().unwrap_or_default();
            self.core.handle(self.now, m.from, m.rail, m.msg, &data);
            self.collect();
        }
    }

    fn done(&mut self) -> Option<Result<(), BarrierError>> {
        while let Some(event) = self.core.poll_event() {
            if let Event::Done(result) = event {
                return Some(result);
            }
        }
        None
    }

    /// A blocking call, run until it ends on what was pushed; it must
    /// not need more.
    fn call(&mut self, call: Call<'_>) -> Result<(), BarrierError> {
        self.core.start(self.now, call);
        self.collect();
        loop {
            if let Some(result) = self.done() {
                return result;
            }
            let more = !self.transport.inbox.is_empty();
            self.feed();
            self.core.handle_timeout(self.now);
            self.collect();
            if let Some(result) = self.done() {
                return result;
            }
            assert!(more, "the call waits for what the test never sends");
        }
    }

    fn test(&mut self) -> Result<bool, BarrierError> {
        self.feed();
        let result = self.core.test(self.now);
        self.collect();
        result
    }

    fn wait(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.call(Call::Wait { deadline })
    }

    fn wait_result(&mut self, deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.call(Call::WaitResult { deadline })
    }

    fn enter_collective(&mut self, call: Collective, count: u32, input: &[u8], deadline: Option<Instant>) -> Result<(), BarrierError> {
        self.call(Call::EnterCollective { call, count, more: false, input, deadline })
    }

    fn enter_closing(&mut self) -> Result<(), BarrierError> {
        self.call(Call::Close)
    }

    fn enter_split(&mut self) -> Result<(), BarrierError> {
        let now = self.now;
        let result = self.core.enter(now);
        self.collect();
        result
    }

    /// Enters the next barrier as the algorithm's own.
    fn enter_base(&mut self) {
        let now = self.now;
        self.core.enter_variant(now, BASE).unwrap();
        self.collect();
    }

    fn app_epoch(&self) -> u64 {
        self.core.epoch()
    }
}

const INSTANCE: u64 = 0xABCD;

/// Node 1 of 2 in dissemination (one round: it waits for node 0's tag
/// ROUND), joined to INSTANCE, at barrier `epoch`.
fn node1(epoch: u64) -> Node {
    let mut config = BarrierConfig::new(Algorithm::Dissemination);
    config.first_epoch = epoch;
    Node::new(1, 2, config)
}

fn from0(kind: MsgKind, instance: u64, epoch: u64) -> Incoming {
    Incoming { from: 0, rail: 0, msg: Msg { kind, instance, epoch: epoch as u32, tag: plan::tag::ROUND, arg: 0 } }
}

#[test]
fn a_contribution_is_re_sent_as_stored_and_a_duplicate_release_never_counts() {
    use crate::collective::{wire, Dtype, Op};
    // Node 1 of 2, concurrent: it sends its contribution to node 0 and
    // waits for node 0's release with the result.
    let mut e = Node::new(1, 2, BarrierConfig::new(Algorithm::Concurrent));
    let call = Collective::Allreduce { op: Op::Sum, dtype: Dtype::I64 };
    e.enter_collective(call, 1, &5i64.to_ne_bytes(), None).unwrap();
    let (to, arrive) = e.transport.sent[0];
    assert_eq!((to, arrive.kind, arrive.tag), (0, MsgKind::Data, plan::tag::ARRIVE));
    let contribution = e.transport.sent_data[0].clone();
    let view = wire::Contribution::new_checked(&contribution[..]).unwrap();
    assert_eq!((view.call(), view.count(), view.data()), (Some(call), 1, &5i64.to_le_bytes()[..]));
    // Node 0 lost it and asks: the answer carries the very same bytes.
    let nack = Msg { kind: MsgKind::Nack, instance: INSTANCE, epoch: 0, tag: plan::tag::ARRIVE, arg: 0 };
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
    e.transport.inbox.push_back(Incoming { from: 0, rail: 0, msg: nack });
    assert!(!e.test().unwrap());
    let answered = e.transport.sent.iter().position(|(_, m)| m.kind == MsgKind::Answer).expect("answered");
    assert_eq!(e.transport.sent_data[answered], contribution);
    // The release, then a duplicate of it carrying other bytes: the first counts.
    let release = |sum: i64| {
        let mut data = Vec::new();
        wire::emit_header(call, 1, true, &mut data);
        data.extend_from_slice(&sum.to_le_bytes());
        data
    };
    let msg = Msg { kind: MsgKind::Data, instance: INSTANCE, epoch: 0, tag: plan::tag::RELEASE, arg: 0 };
    e.transport.inbox.push_back(Incoming { from: 0, rail: 0, msg });
    e.transport.inbox_data.push_back(release(12));
    e.transport.inbox.push_back(Incoming { from: 0, rail: 0, msg: Msg { kind: MsgKind::Answer, ..msg } });
    e.transport.inbox_data.push_back(release(99));
    assert!(e.test().unwrap());
    e.test().unwrap(); // the duplicate arrives after completion: stale
    let mut out = [0u8; 8];
    e.collective_result(Some(&mut out)).unwrap();
    assert_eq!(i64::from_ne_bytes(out), 12);
    // A release of another call is an error, never a result.
    e.enter_collective(Collective::Allreduce { op: Op::Max, dtype: Dtype::I64 }, 1, &5i64.to_ne_bytes(), None).unwrap();
    e.transport.inbox.push_back(Incoming { from: 0, rail: 0, msg: Msg { epoch: 1, ..msg } });
    e.transport.inbox_data.push_back(release(12));
    let err = e.test().unwrap_err();
    assert!(matches!(&err, BarrierError::CollectiveMismatch { epoch: 1, detail } if detail.contains("allreduce(sum, i64)")), "{err}");
}

/// Node `me` of 3, concurrent, joined to INSTANCE.
fn node_of_3(me: NodeId) -> Node {
    Node::new(me, 3, BarrierConfig::new(Algorithm::Concurrent))
}

/// A broadcast message of `root` over 2 bytes, with or without them.
fn bcast_data(root: NodeId, bytes: Option<[u8; 2]>) -> Vec<u8> {
    let mut d = Vec::new();
    crate::collective::wire::emit_header(Collective::Bcast { root }, 2, bytes.is_some(), &mut d);
    d.extend_from_slice(&bytes.unwrap_or_default()[..if bytes.is_some() { 2 } else { 0 }]);
    d
}

fn push(e: &mut Node, from: NodeId, kind: MsgKind, epoch: u64, tag: u16, data: Vec<u8>) {
    e.transport.inbox.push_back(Incoming { from, rail: 0, msg: Msg { kind, instance: INSTANCE, epoch: epoch as u32, tag, arg: 0 } });
    e.transport.inbox_data.push_back(data);
}

fn sent_count(e: &Node, to: NodeId, kind: MsgKind, epoch: u64, tag: u16) -> usize {
    e.transport.sent.iter().filter(|(t, m)| *t == to && m.kind == kind && m.epoch == epoch as u32 && m.tag == tag).count()
}

#[test]
fn a_non_root_tells_its_entry_at_once_has_the_broadcast_at_the_data_and_answers_for_its_entry_before_and_after_the_end() {
    use plan::tag::{BCAST_DATA, BCAST_DONE, BCAST_ENTERED};
    let mut e = node_of_3(1);
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[0, 0], None).unwrap();
    // Its entry went to the root at once, before the data, as a header without data.
    assert_eq!(e.transport.sent.len(), 1);
    assert_eq!(sent_count(&e, 0, MsgKind::Data, 0, BCAST_ENTERED), 1);
    let entry = crate::collective::wire::Contribution::new_checked(&e.transport.sent_data[0][..]).unwrap();
    assert!(!entry.has_data() && entry.call() == Some(Collective::Bcast { root: 0 }));
    // The next epoch's broadcast from node 2 comes first (node 2 had the
    // data and the end already): kept, before this node knows that call.
    push(&mut e, 2, MsgKind::Data, 1, BCAST_DATA, bcast_data(2, Some([4, 5])));
    push(&mut e, 0, MsgKind::Data, 0, BCAST_DATA, bcast_data(0, Some([7, 9])));
    e.wait_result(None).unwrap();
    assert!(e.in_progress() && e.phase.background() && !e.entered(), "returned with the data, the epoch completing in the background");
    assert_eq!((e.protocol_epoch(), e.app_epoch(), e.stats.early), (0, 1, 1));
    let mut out = [0u8; 2];
    e.collective_result(Some(&mut out)).unwrap();
    assert_eq!(out, [7, 9]);
    // Sent once; (node 2's message of epoch 1 proved the data sent: a NACK went first).
    assert_eq!(sent_count(&e, 0, MsgKind::Data, 0, BCAST_ENTERED), 1);
    assert_eq!(sent_count(&e, 0, MsgKind::Nack, 0, BCAST_DATA), 1);
    // The root lost the entry and asks: answered at once.
    push(&mut e, 0, MsgKind::Nack, 0, BCAST_ENTERED, Vec::new());
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
    assert!(e.test().unwrap(), "no barrier of the application's is entered");
    assert_eq!(sent_count(&e, 0, MsgKind::Answer, 0, BCAST_ENTERED), 1);
    // The end completes the epoch; the next broadcast (from node 2, its
    // data kept early) tells node 2 its entry and has its result at once.
    push(&mut e, 0, MsgKind::Data, 0, BCAST_DONE, bcast_data(0, None));
    e.test().unwrap();
    assert_eq!((e.protocol_epoch(), e.in_progress(), e.phase.background()), (1, false, false));
    e.enter_collective(Collective::Bcast { root: 2 }, 2, &[0, 0], None).unwrap();
    e.wait_result(None).unwrap();
    e.collective_result(Some(&mut out)).unwrap();
    assert_eq!(out, [4, 5]);
    assert_eq!(sent_count(&e, 2, MsgKind::Data, 1, BCAST_ENTERED), 1);
    // A NACK of the previous epoch's entry (the root's retry, a retry
    // timeout later, crossed it) is answered from that epoch, though this
    // node moved on.
    e.now += e.recovery.rto.most();
    push(&mut e, 0, MsgKind::Nack, 0, BCAST_ENTERED, Vec::new());
    e.test().unwrap();
    assert_eq!(sent_count(&e, 0, MsgKind::Answer, 0, BCAST_ENTERED), 2);
    // A barrier entered now waits for the broadcast's end, then runs.
    e.enter_split().unwrap();
    assert!(e.entered() && (e.phase == Phase::BackgroundQueued) && e.protocol_epoch() == 1);
    push(&mut e, 2, MsgKind::Data, 1, BCAST_DONE, bcast_data(2, None));
    assert!(!e.test().unwrap(), "the queued barrier is entered, not complete");
    assert_eq!((e.protocol_epoch(), e.run.cur, sent_count(&e, 0, MsgKind::Data, 2, plan::tag::ARRIVE)), (2, BASE, 1));
    push(&mut e, 0, MsgKind::Data, 2, plan::tag::RELEASE, Vec::new());
    assert!(e.test().unwrap());
    assert_eq!(e.protocol_epoch(), 3);
}

#[test]
fn a_broadcasts_root_sends_at_once_nacks_a_lost_entry_and_ends_after_all() {
    use plan::tag::{BCAST_DATA, BCAST_DONE, BCAST_ENTERED};
    let mut e = node_of_3(0);
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[3, 1], None).unwrap();
    e.wait_result(None).unwrap();
    assert!(e.phase.background(), "the root's call returns once its data is sent");
    // (The script transport multicasts as one send per node.)
    assert_eq!((sent_count(&e, 1, MsgKind::Data, 0, BCAST_DATA), sent_count(&e, 2, MsgKind::Data, 0, BCAST_DATA)), (1, 1));
    assert_eq!(e.transport.sent_data[0], bcast_data(0, Some([3, 1])));
    push(&mut e, 1, MsgKind::Data, 0, BCAST_ENTERED, bcast_data(0, None));
    e.test().unwrap();
    // Node 2's entry is lost: at the retry, the root asks node 2 for it.
    let now = e.now;
    e.recovery.next_retry = now;
    e.test().unwrap();
    assert_eq!(sent_count(&e, 2, MsgKind::Nack, 0, BCAST_ENTERED), 1);
    assert_eq!(sent_count(&e, 1, MsgKind::Nack, 0, BCAST_ENTERED), 0, "node 1's came");
    // Node 2 lost the data too and asks: answered with the stored data.
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
    push(&mut e, 2, MsgKind::Nack, 0, BCAST_DATA, Vec::new());
    e.test().unwrap();
    let answer = e.transport.sent.iter().position(|(t, m)| *t == 2 && m.kind == MsgKind::Answer && m.tag == BCAST_DATA).expect("answered");
    assert_eq!(e.transport.sent_data[answer], bcast_data(0, Some([3, 1])));
    assert_eq!(sent_count(&e, 1, MsgKind::Data, 0, BCAST_DONE), 0, "no end before every entry");
    // The next call completes the broadcast first: the entry
    // comes, the end goes, and only then the allreduce's arrival.
    push(&mut e, 2, MsgKind::Answer, 0, BCAST_ENTERED, bcast_data(0, None));
    e.enter_collective(Collective::Allreduce { op: crate::collective::Op::Sum, dtype: crate::collective::Dtype::U32 }, 1, &[1, 0, 0, 0], None)
        .unwrap();
    let done = e.transport.sent.iter().position(|(_, m)| m.tag == BCAST_DONE).expect("the end");
    assert!(e.transport.sent[done..].iter().all(|(_, m)| m.epoch == 0 || m.epoch == 1));
    assert_eq!((e.protocol_epoch(), e.run.cur), (1, BASE));
}

#[test]
fn a_node_of_another_wire_protocol_is_refused_at_the_join_by_name() {
    // Node 1 speaks the previous protocol (its fingerprint says so): node 0
    // refuses it and names it, instead of running a barrier whose
    // messages the two would read differently.
    let mut config = BarrierConfig::new(Algorithm::Concurrent);
    config.join_timeout = Duration::from_millis(50);
    let t0 = Instant::now();
    let setup = Setup { me: 0, nodes: 2, rails: 1, multicast: false, max_data: 1000 };
    let mut e = Core::new(setup, config, t0).unwrap();
    e.join(5, t0);
    let old = Msg { kind: MsgKind::Join, instance: 77, epoch: 0, tag: 0, arg: fingerprint_of(&config, PROTOCOL - 1) };
    e.handle(t0, 1, 0, old, &[]);
    let refused = e.poll_transmit().expect("a refusal");
    assert!(refused.to == To::Node(1) && refused.msg.kind == MsgKind::Refuse && refused.msg.tag == REFUSE_CONFIG);
    e.handle_timeout(t0 + Duration::from_millis(49));
    assert!(e.poll_event().is_none(), "not before the join timeout");
    e.handle_timeout(t0 + Duration::from_millis(50));
    let Some(Event::JoinFailed(err)) = e.poll_event() else { panic!("no join failure") };
    assert!(matches!(err, BarrierError::ConfigMismatch { node: 1, .. }), "{err}");
    // The text names the node and the fix.
    let text = err.to_string();
    assert!(text.contains("node 1 asked to join with another configuration") && text.contains("same mcd version"), "{text}");
    // (What tells them apart: the fingerprint.)
    assert_ne!(fingerprint_of(&config, PROTOCOL), fingerprint_of(&config, PROTOCOL - 1));
}

#[test]
fn a_non_root_takes_only_its_roots_next_data_flagged_as_the_end_for_the_end() {
    use plan::tag::{BCAST_DATA, BCAST_DONE};
    let flagged = |root: NodeId, flag: bool| {
        let mut d = bcast_data(root, Some([5, 6]));
        if flag {
            d[3] |= crate::collective::wire::ENDS_PREVIOUS;
        }
        d
    };
    let detached = || {
        let mut e = node_of_3(1);
        e.enter_collective(Collective::Bcast { root: 0 }, 2, &[0, 0], None).unwrap();
        push(&mut e, 0, MsgKind::Data, 0, BCAST_DATA, bcast_data(0, Some([7, 9])));
        e.wait_result(None).unwrap();
        assert!(e.phase.background());
        e
    };
    // Epoch 1's data from another node, or from the root without the
    // flag (after a mismatch the root may go on: the end must come):
    // kept for epoch 1, the end still awaited (and NACKed at once).
    for (from, flag) in [(2, true), (0, false)] {
        let mut e = detached();
        push(&mut e, from, MsgKind::Data, 1, BCAST_DATA, flagged(from, flag));
        e.test().unwrap();
        assert_eq!((e.protocol_epoch(), e.phase.background(), e.stats.ends_implied), (0, true, 0), "from {from}, flag {flag}");
        assert_eq!(sent_count(&e, 0, MsgKind::Nack, 0, BCAST_DONE), 1);
    }
    // The root's, flagged (as data or as an answer): the end.
    for kind in [MsgKind::Data, MsgKind::Answer] {
        let mut e = detached();
        push(&mut e, 0, kind, 1, BCAST_DATA, flagged(0, true));
        e.test().unwrap();
        assert_eq!((e.protocol_epoch(), e.phase.background(), e.stats.ends_implied), (1, false, 1), "{kind:?}");
        assert_eq!(sent_count(&e, 0, MsgKind::Nack, 0, BCAST_DONE), 0);
        e.enter_collective(Collective::Bcast { root: 0 }, 2, &[0, 0], None).unwrap();
        e.wait_result(None).unwrap();
        let mut out = [0u8; 2];
        e.collective_result(Some(&mut out)).unwrap();
        assert_eq!(out, [5, 6]);
    }
}

#[test]
fn a_root_that_broadcasts_again_sends_no_end_its_next_data_implies_it_and_answers_for_it() {
    use plan::tag::{BCAST_DATA, BCAST_DONE, BCAST_ENTERED};
    let entered = |e: &mut Node, epoch: u64| {
        for from in [1, 2] {
            push(e, from, MsgKind::Data, epoch, BCAST_ENTERED, bcast_data(0, None));
        }
    };
    let mut e = node_of_3(0);
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[3, 1], None).unwrap();
    e.wait_result(None).unwrap();
    entered(&mut e, 0);
    // Broadcasting again: epoch 0 completes without its end; epoch 1's data goes.
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[4, 1], None).unwrap();
    e.wait_result(None).unwrap();
    assert_eq!((sent_count(&e, 1, MsgKind::Data, 0, BCAST_DONE), sent_count(&e, 1, MsgKind::Data, 1, BCAST_DATA)), (0, 1));
    assert_eq!((e.protocol_epoch(), e.stats.ends_implied), (1, 1));
    let header = |e: &Node, epoch: u32| {
        let i = e.transport.sent.iter().position(|(_, m)| m.tag == BCAST_DATA && m.epoch == epoch).unwrap();
        crate::collective::wire::Contribution::new_checked(e.transport.sent_data[i].clone()).unwrap()
    };
    assert!(!header(&e, 0).ends_previous() && header(&e, 1).ends_previous(), "epoch 1's data says it ends epoch 0");
    // Node 2 lost epoch 1's data, so knows nothing of the end, and asks for
    // it: answered with the end as staged.
    push(&mut e, 2, MsgKind::Nack, 0, BCAST_DONE, Vec::new());
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
    e.test().unwrap();
    let answer =
        e.transport.sent.iter().position(|(t, m)| *t == 2 && m.kind == MsgKind::Answer && m.tag == BCAST_DONE && m.epoch == 0).expect("answered");
    assert_eq!(e.transport.sent_data[answer], bcast_data(0, None));
    // An allreduce next: the end of epoch 1 goes out as usual first.
    entered(&mut e, 1);
    e.enter_collective(Collective::Allreduce { op: crate::collective::Op::Sum, dtype: crate::collective::Dtype::U32 }, 1, &[1, 0, 0, 0], None)
        .unwrap();
    assert_eq!((sent_count(&e, 1, MsgKind::Data, 1, BCAST_DONE), sent_count(&e, 2, MsgKind::Data, 1, BCAST_DONE)), (1, 1));
    assert_eq!((e.protocol_epoch(), e.stats.ends_implied), (2, 1));
}

/// A release from node 0 (the concurrent algorithm's root) of a barrier
/// of `epoch` that a mismatch made void.
fn void_release(e: &mut Node, epoch: u64) {
    release(e, epoch, crate::transport::MISMATCHED);
}

/// A release from node 0 of a plain barrier of `epoch`, with `arg`.
fn release(e: &mut Node, epoch: u64, arg: u32) {
    let msg = Msg { kind: MsgKind::Data, instance: INSTANCE, epoch: epoch as u32, tag: plan::tag::RELEASE, arg };
    e.transport.inbox.push_back(Incoming { from: 0, rail: 0, msg });
    e.transport.inbox_data.push_back(Vec::new());
}

#[test]
fn a_mismatch_found_after_the_result_is_reported_by_the_next_call_which_still_runs_its_epoch() {
    use plan::tag::{ARRIVE, BCAST_DATA, BCAST_DONE};
    // The root's end says a peer called the broadcast with 3 elements:
    // this node had its result and returned; the epoch is void. Its next
    // call reports the mismatch, and still runs its own epoch, as every
    // peer does (issue 28: one failed collective never disables later
    // ones; a call that returned at once would leave the node an epoch
    // behind its peers).
    let end_of_3 = || {
        let mut d = Vec::new();
        crate::collective::wire::emit_header(Collective::Bcast { root: 0 }, 3, false, &mut d);
        d
    };
    let ours = Collective::Bcast { root: 0 };
    // A barrier entered while the broadcast completes in the background:
    // entered once it completes; its wait reports the mismatch.
    let mut e = node_of_3(1);
    e.enter_collective(ours, 2, &[0, 0], None).unwrap();
    push(&mut e, 0, MsgKind::Data, 0, BCAST_DATA, bcast_data(0, Some([7, 9])));
    e.wait_result(None).unwrap();
    e.enter_split().unwrap();
    push(&mut e, 0, MsgKind::Data, 0, BCAST_DONE, end_of_3());
    release(&mut e, 1, 0);
    let err = e.wait(None).unwrap_err();
    assert!(matches!(err, BarrierError::CollectiveMismatch { epoch: 0, .. }), "{err}");
    assert_eq!((e.protocol_epoch(), e.in_progress()), (2, false));
    assert_eq!(sent_count(&e, 0, MsgKind::Data, 1, ARRIVE), 1, "epoch 1 was not entered: {:?}", e.transport.sent);
    // Then the next call is clean.
    release(&mut e, 2, 0);
    e.wait(None).unwrap();
    // The next collective, or a plain wait, or close: each runs, and the
    // mismatch is reported once.
    for next in 0..3 {
        let mut e = node_of_3(1);
        e.enter_collective(ours, 2, &[0, 0], None).unwrap();
        push(&mut e, 0, MsgKind::Data, 0, BCAST_DATA, bcast_data(0, Some([7, 9])));
        e.wait_result(None).unwrap();
        push(&mut e, 0, MsgKind::Data, 0, BCAST_DONE, end_of_3());
        let err = match next {
            0 => {
                e.enter_collective(ours, 2, &[0, 0], None).unwrap();
                push(&mut e, 0, MsgKind::Data, 1, BCAST_DATA, bcast_data(0, Some([1, 2])));
                e.wait_result(None).unwrap();
                let mut out = [0u8; 2];
                e.collective_result(Some(&mut out)).unwrap();
                assert_eq!(out, [1, 2], "the call's own result");
                let err = e.deferred_mismatch().unwrap_err();
                e.deferred_mismatch().expect("reported twice");
                err
            }
            1 => {
                release(&mut e, 1, 0);
                e.wait(None).unwrap_err()
            }
            _ => {
                e.enter_closing().unwrap();
                assert_eq!(sent_count(&e, 0, MsgKind::Data, 1, ARRIVE), 1, "close entered no closing barrier");
                release(&mut e, 1, 0);
                e.wait(None).unwrap_err()
            }
        };
        assert!(matches!(err, BarrierError::CollectiveMismatch { epoch: 0, .. }), "call {next}: {err}");
        assert!(e.transport.sent.iter().any(|(_, m)| m.epoch == 1), "call {next} did not enter epoch 1");
    }
}

#[test]
fn a_peer_running_another_broadcast_in_this_epoch_is_a_clear_error_and_the_epoch_ends_as_a_void_barrier() {
    use plan::tag::{ARRIVE, BCAST_DATA};
    let mut e = node_of_3(1);
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[0, 0], None).unwrap();
    // Node 2 thinks it is the root of this epoch: the plans differ, so
    // neither can complete; this node goes over to the algorithm's own
    // plan, its arrival marked void, and tells every node.
    push(&mut e, 2, MsgKind::Data, 0, BCAST_DATA, bcast_data(2, Some([1, 1])));
    assert!(!e.test().unwrap());
    let arrive = e.transport.sent.iter().find(|(to, m)| *to == 0 && m.tag == ARRIVE && m.epoch == 0).expect("no void arrival");
    assert!(arrive.1.arg & crate::transport::MISMATCHED != 0, "{arrive:?}");
    let told = |e: &Node, to| e.transport.sent.iter().any(|(t, m)| *t == to && m.kind == MsgKind::Status && m.tag & status::MISMATCH != 0);
    assert!(told(&e, 0) && told(&e, 2));
    // Node 0's release ends it: the call's error, and the next epoch is clean.
    void_release(&mut e, 0);
    e.wait_result(None).unwrap();
    let err = e.collective_result(Some(&mut [0u8; 2])).unwrap_err();
    assert!(matches!(err, BarrierError::CollectiveMismatch { epoch: 0, .. }), "{err}");
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[0, 0], None).unwrap();
    push(&mut e, 0, MsgKind::Data, 1, BCAST_DATA, bcast_data(0, Some([4, 5])));
    e.wait_result(None).unwrap();
    let mut out = [0u8; 2];
    e.collective_result(Some(&mut out)).unwrap();
    assert_eq!(out, [4, 5]);
}

#[test]
fn a_nack_for_what_only_another_collective_sends_is_a_clear_error() {
    use plan::tag::ARRIVE;
    // Node 0 runs a barrier; node 1 calls a broadcast from node 0 and
    // asks for its data, which node 0's barrier never sends: without
    // this, each waits for the other for ever.
    let mut e = node_of_3(0);
    e.enter_split().unwrap();
    push(&mut e, 1, MsgKind::Nack, 0, plan::tag::BCAST_DATA, Vec::new());
    assert!(!e.test().unwrap());
    // Every node hears of it (one may see nothing wrong in its own messages).
    let told = |e: &Node, to| e.transport.sent.iter().any(|(t, m)| *t == to && m.kind == MsgKind::Status && m.tag & status::MISMATCH != 0);
    assert!(told(&e, 1) && told(&e, 2));
    // The barrier completes (void) once both arrivals are in: the error.
    push(&mut e, 1, MsgKind::Data, 0, ARRIVE, Vec::new());
    push(&mut e, 2, MsgKind::Data, 0, ARRIVE, Vec::new());
    let err = e.wait(None).unwrap_err();
    assert!(matches!(err, BarrierError::CollectiveMismatch { epoch: 0, .. }), "{err}");
    let release = e.transport.sent.iter().find(|(_, m)| m.tag == plan::tag::RELEASE).expect("released");
    assert!(release.1.arg & crate::transport::MISMATCHED != 0, "the release says it is void: {release:?}");
    let mut other = node_of_3(2);
    other.enter_split().unwrap();
    other.transport.inbox.push_back(Incoming {
        from: 0,
        rail: 0,
        msg: Msg { kind: MsgKind::Status, instance: INSTANCE, epoch: 0, tag: status::IN_PROGRESS | status::MISMATCH, arg: 0 },
    });
    other.transport.inbox_data.push_back(Vec::new());
    assert!(!other.test().unwrap());
    void_release(&mut other, 0);
    let err = other.test().unwrap_err();
    assert!(matches!(err, BarrierError::CollectiveMismatch { epoch: 0, .. }), "{err}");
    // A NACK for what this node's own plan sends later is no mismatch
    // (the root's end, before every node entered).
    let mut e = node_of_3(0);
    e.enter_collective(Collective::Bcast { root: 0 }, 2, &[0, 0], None).unwrap();
    push(&mut e, 1, MsgKind::Nack, 0, plan::tag::BCAST_DONE, Vec::new());
    assert!(!e.test().unwrap());
    assert!(e.run.mismatch.is_none());
}

#[test]
fn messages_of_another_instance_never_count() {
    let mut e = node1(0);
    e.enter_base();
    e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE ^ 1, 0));
    e.transport.inbox.push_back(from0(MsgKind::Answer, 7, 0));
    assert!(!e.test().unwrap(), "a foreign arrival completed the barrier");
    assert_eq!(e.stats.foreign, 2);
    e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, 0));
    assert!(e.test().unwrap());
    assert_eq!(e.protocol_epoch(), 1);
}

#[test]
fn only_the_barriers_next_to_this_one_are_heard() {
    let mut e = node1(10);
    e.enter_base();
    for far in [8, 10 + (1 << 31), 10 + (1 << 32)] {
        e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, far));
    }
    // A NACK for barrier 8: two behind, so never answered.
    e.transport.inbox.push_back(from0(MsgKind::Nack, INSTANCE, 8));
    assert!(e.test().unwrap());
    assert_eq!(e.stats.stale, 3, "barriers 8 and 10+2^31 are out of the window, and so is the NACK");
    assert_eq!(e.protocol_epoch(), 11, "barrier 10 + 2^32 carries barrier 10's wire number, and no node can be 2^32 apart");
    assert!(e.transport.sent.iter().all(|(_, m)| m.kind != MsgKind::Answer), "nothing answered for barrier 8");
    // The next barrier's message, kept early; the previous one's answered.
    e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, 12));
    e.transport.inbox.push_back(from0(MsgKind::Nack, INSTANCE, 10));
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
    assert!(e.test().unwrap());
    assert_eq!(e.stats.early, 1);
    assert!(e.transport.sent.iter().any(|(to, m)| *to == 0 && m.kind == MsgKind::Answer && m.epoch == 10));
    // Two ahead (13 at barrier 11): out of the window too, and no process
    // the instance counts is there while this one is at 11: this one is
    // left behind (another process holds its place), and refused.
    e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, 13));
    assert!(matches!(e.test(), Err(BarrierError::Refused { node: 1 })));
}

#[test]
fn the_wire_number_wraps_and_the_barrier_number_does_not() {
    let mut e = node1(u64::from(u32::MAX));
    for expected in [u64::from(u32::MAX), 1 << 32, (1 << 32) + 1] {
        e.enter_base();
        assert!(!e.test().unwrap());
        e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, expected));
        assert!(e.test().unwrap(), "barrier {expected}");
        assert_eq!(e.protocol_epoch(), expected + 1);
    }
    // A NACK from a peer still in barrier 2^32 (wire 0): two barriers back.
    e.transport.sent.clear();
    e.transport.inbox.push_back(from0(MsgKind::Nack, INSTANCE, 1 << 32));
    e.test().unwrap();
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
                                       // Two barriers back: nothing to answer with, but where this node is
                                       // (finding j-4: an asker left behind learns it so).
    assert_eq!(e.transport.sent.len(), 1, "two barriers back: one status");
    assert_eq!(e.transport.sent[0].1.kind, MsgKind::Status, "two barriers back: no answer, a status");
    e.transport.sent.clear();
    e.transport.inbox.push_back(from0(MsgKind::Nack, INSTANCE, (1 << 32) + 1));
    e.test().unwrap();
    assert_eq!(e.transport.sent.len(), 1);
    assert_eq!((e.transport.sent[0].1.kind, e.transport.sent[0].1.epoch), (MsgKind::Answer, 1));
}

#[test]
fn a_nack_with_nothing_to_resend_is_answered_with_where_this_node_is() {
    let mut e = node1(5);
    e.transport.inbox.push_back(from0(MsgKind::Nack, INSTANCE, 6));
    e.test().unwrap();
    let (to, status) = e.transport.sent[0];
    assert_eq!((to, status.kind, status.epoch, status.tag), (0, MsgKind::Status, 5, 0), "alive, at 5, outside");
}

#[test]
fn a_silent_peer_is_judged_only_after_it_was_probed_for_the_failure_timeout() {
    let mut e = node1(0);
    e.config.failure_timeout = Duration::from_millis(50);
    let start = e.now;
    e.live.call_started = start;
    e.enter_base();
    // Long before any probe: not silent, however long since the entry.
    assert!(e.judge(start + Duration::from_secs(60), None).is_ok());
    e.on_timers(start + Duration::from_millis(2), None).unwrap(); // the first NACK
    assert!(e.judge(start + Duration::from_millis(60), None).is_ok(), "one probe is not enough");
    for ms in 3..(2 + MIN_PROBES as u64) {
        e.recovery.next_retry = start;
        e.on_timers(start + Duration::from_millis(ms), None).unwrap();
    }
    assert!(e.judge(start + Duration::from_millis(30), None).is_ok(), "enough probes, not yet the timeout");
    match e.judge(start + Duration::from_millis(60), None) {
        Err(BarrierError::PeerSilent { silent, .. }) => assert_eq!(silent, vec![0]),
        other => panic!("{other:?}"),
    }
    // It told node 0 that it gave up; hearing from node 0 again clears the verdict.
    e.collect();
    assert!(e.transport.sent.iter().any(|(_, m)| m.kind == MsgKind::Status && m.tag & status::FAILED != 0 && m.arg == 1));
    e.transport.inbox.push_back(Incoming {
        from: 0,
        rail: 0,
        msg: Msg { kind: MsgKind::Status, instance: INSTANCE, epoch: 0, tag: status::IN_PROGRESS, arg: 0 },
    });
    assert!(!e.test().unwrap(), "still waiting, and no error");
}

#[test]
fn a_burst_of_nacks_gets_a_bounded_number_of_answers_and_a_retry_is_answered() {
    // Node 1 of 2 (dissemination) in barrier 0: it sent node 0 its ROUND.
    let mut e = node1(0);
    e.enter_base();
    let nack = |tag: u16| Incoming { from: 0, rail: 0, msg: Msg { kind: MsgKind::Nack, instance: INSTANCE, epoch: 0, tag, arg: 0 } };
    let answers = |e: &Node| e.transport.sent.iter().filter(|(_, m)| m.kind == MsgKind::Answer).count();
    let replies = |e: &Node| e.transport.sent.iter().filter(|(_, m)| matches!(m.kind, MsgKind::Answer | MsgKind::Status)).count();
    // 1,000 NACKs for the same message at once: one answer.
    e.now += Duration::from_micros(1); // (after its message went: see `Core::answer`)
    for _ in 0..1000 {
        e.transport.inbox.push_back(nack(plan::tag::ROUND));
    }
    assert!(!e.test().unwrap());
    assert_eq!((answers(&e), e.stats.answers_suppressed), (1, 999));
    // 1,000 more, alternating with another tag (a status answers that one),
    // one every µs: at most one answer each per quarter retry timeout.
    let gap = e.recovery.rto.least() / 4;
    let start = e.now;
    for i in 0..1000u32 {
        e.now = start + Duration::from_micros(u64::from(i));
        e.transport.inbox.push_back(nack(if i % 2 == 0 { plan::tag::ROUND } else { plan::tag::RELEASE }));
        e.test().unwrap();
    }
    let bound = 2 * (1 + Duration::from_micros(1000).as_nanos() / gap.as_nanos()) as usize;
    let (sent, suppressed) = (replies(&e) - 1, e.stats.answers_suppressed - 999);
    assert!(sent <= bound && sent as u64 + suppressed == 1000, "{sent} replies (bound {bound}), {suppressed} suppressed");
    // A live peer's retry, a retry timeout after the last answer, is answered.
    let before = answers(&e);
    e.now += e.recovery.rto.most();
    e.transport.inbox.push_back(nack(plan::tag::ROUND));
    e.test().unwrap();
    assert_eq!(answers(&e), before + 1);
}

#[test]
fn messages_replayed_from_an_earlier_cycle_never_count() {
    // Ported from the old engine's review (issue 27): a new endpoint takes
    // each frame of an earlier mcd_init cycle with the same secret once
    // (empty replay windows), so the instance must refuse them. A failure
    // status, a mismatch status, a NACK, data and an answer of the earlier
    // instance change nothing, are not answered, and count as foreign.
    const EARLIER: u64 = 0x1111;
    let mut e = node1(0);
    e.enter_base();
    let sent_before = e.transport.sent.len();
    let earlier = |kind, tag, arg| Incoming { from: 0, rail: 0, msg: Msg { kind, instance: EARLIER, epoch: 0, tag, arg } };
    e.transport.inbox.push_back(earlier(MsgKind::Status, status::FAILED | status::IN_PROGRESS, 2));
    e.transport.inbox.push_back(earlier(MsgKind::Status, status::MISMATCH | status::IN_PROGRESS, 0));
    e.transport.inbox.push_back(earlier(MsgKind::Nack, plan::tag::ROUND, 0));
    e.transport.inbox.push_back(earlier(MsgKind::Data, plan::tag::ROUND, 0));
    e.transport.inbox.push_back(earlier(MsgKind::Answer, plan::tag::ROUND, 0));
    e.transport.inbox.push_back(earlier(MsgKind::Status, status::JOINING, 0));
    assert!(!e.test().unwrap(), "the earlier cycle's data completed the barrier");
    assert_eq!(e.stats.foreign, 6);
    assert!(e.run.mismatch.is_none() && e.live.peers[0].gave_up.is_none(), "an earlier cycle's status counted");
    assert!(e.transport.sent[sent_before..].iter().all(|(_, m)| m.kind != MsgKind::Answer && m.kind != MsgKind::Status), "nothing answered");
    e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, 0));
    assert!(e.test().unwrap(), "this cycle's data completes it");
    // While joining: the earlier cycle's Admit, Refuse and node 0's word
    // that its join failed echo another incarnation, so they neither admit,
    // refuse nor fail this one.
    let mut config = BarrierConfig::new(Algorithm::Dissemination);
    config.join_timeout = Duration::from_millis(50);
    let t0 = Instant::now();
    let setup = Setup { me: 1, nodes: 2, rails: 1, multicast: false, max_data: 1000 };
    let mut e = Core::new(setup, config, t0).unwrap();
    let (earlier_incarnation, this_incarnation) = (0x10_0000_1111u64, 0x20_0000_2222u64);
    e.join(this_incarnation, t0);
    for kind in [MsgKind::Refuse, MsgKind::Admit] {
        let msg = Msg { kind, instance: if kind == MsgKind::Admit { EARLIER } else { 0 }, epoch: 0, tag: 0, arg: earlier_incarnation as u32 };
        e.handle(t0, 0, 0, msg, &[]);
    }
    let gave_up = Msg { kind: MsgKind::Status, instance: 0, epoch: earlier_incarnation as u32, tag: status::JOINING | status::FAILED, arg: 2 };
    e.handle(t0, 0, 0, gave_up, &[]);
    assert!(e.poll_event().is_none(), "an earlier cycle's answer ended the join");
    e.handle_timeout(t0 + config.join_timeout);
    let Some(Event::JoinFailed(BarrierError::JoinTimeout { missing, .. })) = e.poll_event() else {
        panic!("neither refused nor admitted: a timeout")
    };
    assert_eq!(missing, vec![0]);
    assert_ne!(e.instance(), EARLIER);
}

#[test]
fn a_join_replayed_from_an_earlier_cycle_neither_takes_the_real_nodes_place_nor_a_later_instances() {
    // Ported from the old engine's review (issue 27, finding 1): a Join of
    // node 1 recorded in an earlier cycle (an older incarnation) reaches
    // node 0's new barrier just before node 1's own.
    let config = BarrierConfig::new(Algorithm::Concurrent);
    let t0 = Instant::now();
    let setup = Setup { me: 0, nodes: 2, rails: 1, multicast: false, max_data: 1000 };
    let mut e = Core::new(setup, config, t0).unwrap();
    e.join(5, t0);
    let (earlier_cycle, this_cycle) = (0x10_0000_1111u64, 0x20_0000_2222u64);
    let join = |incarnation| Msg { kind: MsgKind::Join, instance: incarnation, epoch: 0, tag: 0, arg: fingerprint_of(&config, PROTOCOL) };
    let mut sent = Vec::new();
    let drain = |e: &mut Core, sent: &mut Vec<Msg>| {
        while let Some(t) = e.poll_transmit() {
            sent.push(t.msg);
        }
    };
    e.handle(t0, 1, 0, join(earlier_cycle), &[]); // the replay
    e.handle(t0, 1, 0, join(this_cycle), &[]); // node 1's own, a moment later
    drain(&mut e, &mut sent);
    assert!(sent.iter().any(|m| m.kind == MsgKind::Admit && m.arg == this_cycle as u32), "node 1's own join is never admitted: {sent:?}");
    assert!(!sent.iter().any(|m| m.kind == MsgKind::Refuse), "node 1 refused: {sent:?}");
    let instance = e.instance();
    // The instance runs (node 1 is heard, a barrier completes); the replay
    // again is refused, and node 1's place stays its own.
    e.start(t0, Call::Wait { deadline: None });
    let arrival = Msg { kind: MsgKind::Data, instance, epoch: 0, tag: plan::tag::ARRIVE, arg: 0 };
    e.handle(t0, 1, 0, arrival, &[]);
    assert!(matches!(e.poll_event(), Some(Event::Joined { .. })));
    assert!(matches!(e.poll_event(), Some(Event::Done(Ok(())))), "barrier 0 completes");
    sent.clear();
    drain(&mut e, &mut sent);
    e.handle(t0, 1, 0, join(earlier_cycle), &[]);
    sent.clear();
    drain(&mut e, &mut sent);
    assert!(sent.iter().all(|m| m.kind != MsgKind::Admit), "the replay admitted into the running instance: {sent:?}");
    assert_eq!(e.member.admitted[1], this_cycle);
    e.handle(t0, 1, 0, join(this_cycle), &[]);
    sent.clear();
    drain(&mut e, &mut sent);
    assert!(sent.iter().any(|m| m.kind == MsgKind::Admit && m.arg == this_cycle as u32), "node 1's own, asking again, is admitted again");
}

/// Node `me` of 6 in a tree4 released by multicast (node 0's children are
/// 1 to 4; node 5 is node 4's child).
fn tree_node_of_6(me: NodeId) -> Node {
    let tree = Algorithm::Tree { k: plan::Fanout::FOUR, release: plan::Release::Multicast };
    assert_eq!(plan::tree_parent(5, 4, 6).map(|(p, _)| p), Some(4));
    Node::new(me, 6, BarrierConfig::new(tree))
}

#[test]
fn a_nack_for_the_release_proves_the_askers_arrival_went_and_it_is_nacked_at_once() {
    let mut e = tree_node_of_6(0);
    e.enter_split().unwrap();
    for child in 1..4 {
        push(&mut e, child, MsgKind::Data, 0, plan::tag::ARRIVE, Vec::new());
    }
    assert!(!e.test().unwrap(), "node 4's arrival is missing");
    assert_eq!(sent_count(&e, 4, MsgKind::Nack, 0, plan::tag::ARRIVE), 0, "no retry is due yet");
    // Node 4 asks for the release: it has sent its arrival, which was lost.
    push(&mut e, 4, MsgKind::Nack, 0, plan::tag::RELEASE, Vec::new());
    assert!(!e.test().unwrap());
    assert_eq!(sent_count(&e, 4, MsgKind::Nack, 0, plan::tag::ARRIVE), 1, "{:?}", e.transport.sent);
    assert_eq!(e.now, e.recovery.step_since, "at once, not at a retry");
    // Its arrival comes as the answer: the release goes.
    push(&mut e, 4, MsgKind::Answer, 0, plan::tag::ARRIVE, Vec::new());
    assert!(e.test().unwrap());
    assert!(sent_count(&e, 5, MsgKind::Data, 0, plan::tag::RELEASE) >= 1);
}

#[test]
fn a_child_that_says_it_is_still_in_the_barrier_before_gets_the_release_from_its_parent() {
    // Node 4 completes barrier 0 and enters 1.
    let mut p = tree_node_of_6(4);
    p.enter_split().unwrap();
    push(&mut p, 5, MsgKind::Data, 0, plan::tag::ARRIVE, Vec::new());
    release(&mut p, 0, 0);
    assert!(p.test().unwrap());
    p.enter_split().unwrap();
    let before = p.transport.sent.len();
    // Its child 5 answers a probe for its arrival of 1: it is still in 0.
    p.transport.inbox.push_back(Incoming {
        from: 5,
        rail: 0,
        msg: Msg { kind: MsgKind::Status, instance: INSTANCE, epoch: 0, tag: status::IN_PROGRESS, arg: 0 },
    });
    assert!(!p.test().unwrap());
    let handed: Vec<_> = p.transport.sent[before..].iter().filter(|(to, m)| *to == 5 && m.kind == MsgKind::Answer).copied().collect();
    assert!(!handed.is_empty() && handed.iter().all(|(_, m)| m.epoch == 0 && m.tag == plan::tag::RELEASE), "{handed:?}");
    // The child takes its parent's answer as node 0's release and completes 0.
    let mut c = tree_node_of_6(5);
    c.enter_split().unwrap();
    assert!(!c.test().unwrap());
    c.transport.inbox.push_back(Incoming { from: 4, rail: 0, msg: handed[0].1 });
    assert!(c.test().unwrap(), "the relayed release completes barrier 0");
}

#[test]
fn frames_dropped_unread_bring_a_backed_off_retry_forward_once_per_round_trip() {
    // Node 1 of 2 (dissemination) in barrier 5, waiting for node 0's
    // ROUND, its retries backed off far (node 0 seemed quiet).
    let mut e = node1(5);
    e.enter_base();
    let start = e.now;
    e.recovery.retry_interval = Duration::from_millis(40);
    e.recovery.next_retry = start + Duration::from_millis(40);
    let nacks = |e: &Node| e.transport.sent.iter().filter(|(to, m)| *to == 0 && m.kind == MsgKind::Nack).count();
    let at = |us: u64| start + Duration::from_micros(us);
    e.handle_timeout(at(100));
    e.collect();
    assert_eq!(nacks(&e), 0, "the timer is 40 ms away");
    // Its ring dropped frames: node 0's ROUND may be among them.
    e.frames_lost(at(100));
    e.handle_timeout(at(100));
    e.collect();
    assert_eq!(nacks(&e), 1, "asked again at once");
    assert!(e.recovery.next_retry <= at(100) + 2 * e.recovery.rto.get(e.run.step), "the back-off starts again");
    // More drops at once (a flood): no second NACK within the retry floor.
    let floor = e.config.min_retry_timeout;
    e.frames_lost(at(101));
    e.handle_timeout(at(101));
    e.collect();
    assert_eq!(nacks(&e), 1, "at most one such retry per round trip");
    e.handle_timeout(at(100) + floor);
    e.collect();
    assert_eq!(nacks(&e), 2, "the next one a retry floor later");
    assert_eq!(e.stats().ring_loss_retries, 2);
    // Node 0's ROUND comes: with nothing missing, drops bring nothing forward.
    e.transport.inbox.push_back(from0(MsgKind::Data, INSTANCE, 5));
    assert!(e.test().unwrap(), "barrier 5 complete");
    e.frames_lost(at(500));
    assert_eq!(e.stats().ring_loss_retries, 2, "nothing was missing");
}
