//! Join and admit: when a barrier is created, every node sends node 0 its
//! *incarnation*; node 0 admits them all and answers each with the instance
//! number derived from all of them ([`MsgKind::Admit`]). Every message
//! carries the instance, so a message of another instance never counts. A
//! restarted process has a new incarnation, so node 0 refuses it
//! ([`BarrierError::Refused`]).

use std::time::{Duration, Instant};

use super::{Core, Event, To};
use crate::transport::STATUS_TAG;
use crate::transport::{status, Msg, MsgKind, NodeId};
use crate::types::{mix, BarrierConfig, BarrierError};

/// The engine's wire protocol, part of every join's fingerprint, so that
/// nodes of versions whose messages mean different things refuse each
/// other at the join instead of misreading each other. 2 (2026-11-25): a
/// broadcast's non-roots send their entry as they enter (tag 5 was an
/// acknowledgement after the data), and a root's data may end its
/// broadcast before ([`crate::collective::wire::ENDS_PREVIOUS`]). 3
/// (2026-11-25): data and answers carry [`crate::transport::MISMATCHED`],
/// and a status of a node that failed on a peer's report names the silent
/// node too. 4 (2026-11-25): a status says `FAILED` (naming the silent node)
/// until the application calls again, not only while the barrier is
/// stuck; it may name its sender (its peers gave up on it), and a node
/// named by a peer's report fails too. 5 (2026-11-26): a status may say
/// [`status::JOINING`]: node 0 answers a join request with the nodes it
/// still waits for (a join that times out names them, not node 0), and a
/// node not yet admitted answers a peer's probe (it is alive: its peers
/// name node 0's silence, not its).
/// 6 (2026-11-26, issue 29): data, answers and
/// NACKs carry their copy's index and count (`COPY_SHIFT`); a multicast
/// message is answered by multicast, and a status saying it has not gone
/// yet too; a NACK that crossed the original is not answered.
/// 7 (2026-11-26): a collective's contribution says whether more segments
/// of its call follow (`collective::wire::MORE`): calls of different
/// lengths that cut into as many full segments disagree at the last one.
/// 8 (2026-11-26, rev28 finding 2): node 0's answers to a join carry the
/// whole 64-bit incarnation (`Admit` and `Refuse` its high 32 bits in
/// `epoch`, its `JOINING` word all of it first in its data), and a joining
/// node takes only those of its own, not one of an earlier run whose
/// incarnation agrees in the low 32 bits.
/// 9 (2026-11-26, issue 28): a barrier whose nodes run different plans (a
/// broadcast from another root) ends as a void barrier on every node, and
/// every node runs the next call's epoch: a node of 8 stopped entering
/// epochs after a mismatch, so with a node of 9 its peers would wait for
/// an epoch it never enters.
/// 10 (2026-11-26, issue 28): a reduce among 3 to
/// [`crate::plan::REDUCE_GATHER_MAX`] nodes runs its own plan
/// ([`crate::plan::build_reduce`]: every node's contribution straight to
/// the root, tag 7, and the root's end, tag 8), not the algorithm's.
/// 11 (2026-11-27, issue 29): a NACK's echo is the time since the barrier
/// before's message less the interval before that, signed
/// ([`crate::transport::ECHO_SHIFT`]): a node of 10 would read it as the
/// whole time, unsigned, and take NACKs that did not cross for crossings.
pub const PROTOCOL: u32 = 11;
/// How many messages a joining node keeps that arrive before its admission.
const JOIN_STASH: usize = 4096;
/// The longest pause between a joining node's requests to node 0.
const JOIN_RESEND_LIMIT: Duration = Duration::from_millis(20);
/// A joining node takes node 0 for silent once node 0 answered none of this
/// many requests in a row, over the failure timeout at least: at 20% loss
/// each way, a live node 0 leaves as many unanswered with odds of 4·10⁻⁵.
const JOIN_QUIET: u32 = 10;
/// A joining node asks node 0 this many times at least over the last
/// failure timeout before its join times out (as a liveness probe does):
/// the word it then names is fresh, also at heavy loss.
const JOIN_LAST_REQUESTS: u32 = 20;
/// In a Refuse's `tag`: the joining node's configuration differs from node 0's.
pub(super) const REFUSE_CONFIG: u16 = 1;

/// The length of the incarnation at the head of node 0's `JOINING` word's data.
const INCARNATION_LEN: usize = 8;

/// The data of node 0's `JOINING` word to the join of `incarnation`: the
/// whole incarnation (little-endian), then `rest`.
fn emit_incarnation(incarnation: u64, rest: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(INCARNATION_LEN + rest.len());
    data.extend_from_slice(&incarnation.to_le_bytes());
    data.extend_from_slice(rest);
    data
}

/// The incarnation a `JOINING` word is for, and the rest of its data
/// (`None`: too short to say).
fn parse_incarnation(data: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = data.split_first_chunk::<INCARNATION_LEN>()?;
    Some((u64::from_le_bytes(*head), rest))
}

/// The join fingerprint of `config` under wire protocol `protocol`.
pub(crate) fn fingerprint_of(config: &BarrierConfig, protocol: u32) -> u32 {
    let text = format!("{} {} {} {protocol}", config.algorithm, config.rails, config.first_epoch);
    text.bytes().fold(0x811C_9DC5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// Node 0's word to a node of `incarnation` that asked to join: whom it
/// still waits for (a [`status::JOINING`] status with `flags`; the first
/// in `arg`, all in the data if they fit in `max_data`; the incarnation's
/// low 32 bits in `epoch` and all of it first in the data, so that a word
/// of an earlier join is not taken for this one's).
fn whom_word(incarnations: &[Option<u64>], incarnation: u64, flags: u16, max_data: usize) -> (Msg, Vec<u8>) {
    let missing: Vec<NodeId> = (0..incarnations.len()).filter(|&p| incarnations[p].is_none()).collect();
    let mut nodes = Vec::with_capacity(4 * missing.len());
    if INCARNATION_LEN + 4 * missing.len() <= max_data {
        for &p in &missing {
            nodes.extend_from_slice(&(p as u32).to_le_bytes());
        }
    }
    let data = emit_incarnation(incarnation, &nodes);
    let first = missing.first().map_or(0, |&p| p as u32 + 1);
    (Msg { kind: MsgKind::Status, instance: 0, epoch: incarnation as u32, tag: status::JOINING | flags, arg: first }, data)
}

/// Mixed into a join's fingerprint when a barrier is made beside it.
const BESIDE_FINGERPRINT: u32 = 0x6265_7369;

/// The instance of a barrier made beside one whose join agreed on
/// `instance` (see [`crate::PreparedBarrier::join_with`]): the same on every
/// node that joined it, never that instance, never 0.
pub(crate) fn derived_instance(instance: u64) -> u64 {
    mix(instance ^ 0x6465_7269_7665_6421) | 1
}

/// The instance number of a set of incarnations (never 0).
fn instance_of(incarnations: &[u64]) -> u64 {
    incarnations.iter().fold(0x6D63_645F_6261_7272, |h, &x| mix(h ^ x)) | 1
}

/// The instance this node runs, and the join until it is done.
#[derive(Debug, Default)]
pub(super) struct Membership {
    /// The agreed instance (0 before the join).
    pub(super) instance: u64,
    /// Node 0: each node's admitted incarnation.
    pub(super) admitted: Vec<u64>,
    /// Node 0 of a barrier joined with one beside it: the nodes that took
    /// part in the instance beside ([`Core::took_part_beside`]; empty until
    /// one did).
    pub(super) took_part_beside: Vec<bool>,
    /// The join, until it is done.
    pub(super) joining: Option<Box<Joining>>,
}

/// A join in progress.
#[derive(Debug)]
pub(super) struct Joining {
    start: Instant,
    timeout: Duration,
    incarnation: u64,
    /// What every node must agree on, hashed into a Join's `arg` (made
    /// once: a join's every frame carries or checks it).
    fingerprint: u32,
    /// Whether a barrier is made beside this one (its configuration is in
    /// the fingerprint).
    beside: bool,
    /// This is the barrier beside ([`Core::await_join`]): it asks no one
    /// and never times out; it keeps what comes early and answers probes
    /// until its instance is given ([`Core::joined_beside`]).
    passive: bool,
    side: Side,
}

#[derive(Debug)]
enum Side {
    /// Node 0: the incarnations heard so far, and the nodes that asked with
    /// another configuration.
    Admitting { incarnations: Vec<Option<u64>>, mismatched: Vec<NodeId> },
    /// Another node: asking node 0, keeping what comes early, node 0's
    /// last word on whom it still waits for (when it came, and how many
    /// requests went unanswered since), and when each peer was last heard
    /// running an instance (at most one entry a peer).
    Asking {
        interval: Duration,
        next_request: Instant,
        early: Vec<(NodeId, Msg, Vec<u8>)>,
        refused: bool,
        waits: Option<(Vec<NodeId>, Instant, u32)>,
        running: Vec<(NodeId, Instant)>,
    },
}

impl Side {
    /// A node other than node 0 that has asked nothing yet: its first
    /// request goes at `now`, the next after `interval`.
    fn asking(interval: Duration, now: Instant) -> Side {
        Side::Asking { interval, next_request: now, early: Vec::new(), refused: false, waits: None, running: Vec::new() }
    }
}

impl Joining {
    /// When the join next needs time (never, for a barrier beside).
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let end = self.start + self.timeout;
        match &self.side {
            _ if self.passive => None,
            Side::Admitting { .. } => Some(end),
            Side::Asking { next_request, .. } => Some(end.min(*next_request)),
        }
    }
}

impl Core {
    pub(super) fn start_join(&mut self, incarnation: u64, now: Instant, beside: Option<&BarrierConfig>) {
        let n = self.nodes();
        let side = if self.me() == 0 {
            let mut incarnations = vec![None; n];
            incarnations[0] = Some(incarnation);
            Side::Admitting { incarnations, mismatched: Vec::new() }
        } else {
            Side::asking(self.config.retry_timeout, now)
        };
        // A barrier made beside this one, on the instance this join agrees
        // ([`derived_instance`]), is checked here too: a node whose
        // configuration of it differs is refused at this join.
        let fingerprint = match beside {
            Some(beside) => fingerprint_of(&self.config, PROTOCOL) ^ fingerprint_of(beside, PROTOCOL).rotate_left(13) ^ BESIDE_FINGERPRINT,
            None => fingerprint_of(&self.config, PROTOCOL),
        };
        self.member.joining = Some(Box::new(Joining {
            start: now,
            timeout: self.config.join_timeout,
            incarnation,
            fingerprint,
            beside: beside.is_some(),
            passive: false,
            side,
        }));
        self.join_progress(now);
    }

    /// The barrier beside one that joins ([`Core::join_beside`]), until
    /// that join gives it its instance ([`Core::joined_beside`]): it keeps
    /// the frames that come (peers admitted first may run their first
    /// collective already) and answers a peer's probe that it is alive,
    /// only not admitted yet, as the joining barrier does (else its peers,
    /// probing it beside, name it silent while node 0 is out of reach:
    /// finding j-1 of the simulator's pairs).
    pub(super) fn await_join_beside(&mut self, now: Instant) {
        let side = Side::asking(self.config.retry_timeout, now);
        self.member.joining = Some(Box::new(Joining {
            start: now,
            timeout: self.config.join_timeout,
            incarnation: 0,
            fingerprint: 0,
            beside: false,
            passive: true,
            side,
        }));
    }

    /// Whether this join (not a barrier beside one) was refused by node 0
    /// and asks on (see [`Core::join_refused`]).
    pub(super) fn join_refused_now(&self) -> bool {
        self.member.joining.as_ref().is_some_and(|j| !j.passive && matches!(j.side, Side::Asking { refused: true, .. }))
    }

    /// The barrier beside, waiting: its join was refused (`refused`) or
    /// not (see [`Core::beside_refused`]).
    pub(super) fn set_beside_refused(&mut self, refused: bool) {
        if let Some(Joining { passive: true, side: Side::Asking { refused: r, .. }, .. }) = self.member.joining.as_deref_mut() {
            *r = refused;
        }
    }

    /// The barrier beside is given its instance: it runs it, and takes in
    /// what came while it waited.
    pub(super) fn end_wait_beside(&mut self, instance: u64, now: Instant) {
        let early = match self.member.joining.take().map(|j| j.side) {
            Some(Side::Asking { early, .. }) => early,
            _ => Vec::new(),
        };
        self.member.instance = instance;
        for (from, msg, data) in early {
            self.receive(from, msg, &data, now);
        }
    }

    /// Completes the join if it can, asks node 0 if due, fails at the timeout.
    fn join_progress(&mut self, now: Instant) {
        let Some(mut j) = self.member.joining.take() else { return };
        if j.passive {
            self.member.joining = Some(j);
            return;
        }
        let n = self.nodes();
        let waited = now.saturating_duration_since(j.start);
        let (incarnation, fingerprint) = (j.incarnation, j.fingerprint);
        // The last failure timeout before the join fails.
        let last_window = j.start + j.timeout.saturating_sub(self.config.failure_timeout);
        match &mut j.side {
            Side::Admitting { incarnations, mismatched } => {
                if incarnations.iter().all(Option::is_some) {
                    let incarnations: Vec<u64> = incarnations.iter().flatten().copied().collect();
                    self.member.instance = instance_of(&incarnations);
                    self.member.admitted = incarnations.clone();
                    for to in 1..n {
                        self.send_admission(to, MsgKind::Admit, self.member.admitted[to]);
                    }
                    self.out.events.push_back(Event::Joined { instance: self.member.instance });
                    return;
                }
                if waited >= j.timeout {
                    // Every node that asked may wait still: tell it the
                    // join failed, and whom for (thrice, against loss).
                    for to in 1..n {
                        if let Some(incarnation) = incarnations[to].filter(|_| self.setup.max_data >= INCARNATION_LEN) {
                            let (msg, data) = whom_word(incarnations, incarnation, status::FAILED, self.setup.max_data);
                            for _ in 0..3 {
                                self.out.push(0, To::Node(to), msg, &data);
                            }
                        }
                    }
                    let missing: Vec<NodeId> = (0..n).filter(|&p| incarnations[p].is_none()).collect();
                    let error = match missing.iter().find(|p| mismatched.contains(p)) {
                        Some(&p) => BarrierError::ConfigMismatch {
                            node: p,
                            detail: format!(
                                "node {p} asked to join with another configuration than node 0's ({} on {} rail(s))",
                                self.config.algorithm, self.config.rails
                            ),
                        },
                        None => {
                            BarrierError::JoinTimeout { missing, nodes: n, waited, bad_tags: Vec::new(), auth_mismatch: Vec::new(), bad_version: 0 }
                        }
                    };
                    self.out.events.push_back(Event::JoinFailed(error));
                    return;
                }
            }
            Side::Asking { interval, next_request, refused, waits, running, .. } => {
                if waited >= j.timeout {
                    let error = if *refused {
                        BarrierError::Refused { node: self.me() }
                    } else {
                        // Node 0, heard lately, waits for others: they are
                        // the missing ones (node 0 is, if silent). But a
                        // node heard lately in the first barrier of an
                        // instance was admitted, by an earlier process of
                        // node 0 (it was restarted; no barrier completes
                        // without this node): that one is the missing node.
                        // (Not a node heard in the instance this node left
                        // before it made this barrier, which has stragglers
                        // that end, and may finish late: soak seeds 11234,
                        // 18428.)
                        // Node 0 is silent once it answered none of the last
                        // JOIN_QUIET requests over the failure timeout (a
                        // lost answer or two is not silence: soak seed 34667).
                        let lately = |t: &Instant| now.saturating_duration_since(*t) < self.config.failure_timeout;
                        let in_one = |p: &NodeId| running.iter().any(|(q, t)| q == p && lately(t));
                        let missing = match waits.take() {
                            Some((nodes, t, asked)) if (lately(&t) || asked < JOIN_QUIET) && !nodes.is_empty() && !nodes.iter().any(in_one) => nodes,
                            _ => vec![0],
                        };
                        BarrierError::JoinTimeout { missing, nodes: n, waited, bad_tags: Vec::new(), auth_mismatch: Vec::new(), bad_version: 0 }
                    };
                    self.out.events.push_back(Event::JoinFailed(error));
                    return;
                }
                if now >= *next_request {
                    let request = Msg { kind: MsgKind::Join, instance: incarnation, epoch: 0, tag: 0, arg: fingerprint };
                    self.out.push(0, To::Node(0), request, &[]);
                    if let Some((_, _, asked)) = waits {
                        *asked += 1;
                    }
                    *interval = (*interval * 2).min(JOIN_RESEND_LIMIT);
                    *next_request = now + *interval;
                }
                // Over the last failure timeout before the join fails, ask
                // JOIN_LAST_REQUESTS times at least, as a probe does: node 0's
                // word on whom it waits for is then fresh when the join
                // fails, also when loss took its answers for a while (at
                // 20 ms apart, four lost in a row left a word 90 ms old,
                // naming nodes that had asked since: soak seed 1022414).
                *next_request = (*next_request).min(now.max(last_window) + self.config.failure_timeout / JOIN_LAST_REQUESTS);
            }
        }
        self.member.joining = Some(j);
    }

    pub(super) fn join_timeout(&mut self, now: Instant) {
        self.join_progress(now);
    }

    /// A message while joining.
    pub(super) fn join_handle(&mut self, now: Instant, from: NodeId, msg: Msg, data: &[u8]) {
        let n = self.nodes();
        let first = self.config.first_epoch as u32;
        let Some(j) = self.member.joining.as_mut() else { return };
        let (incarnation, fingerprint, passive) = (j.incarnation, j.fingerprint, j.passive);
        match &mut j.side {
            Side::Admitting { incarnations, mismatched } => {
                if msg.kind != MsgKind::Join || from == 0 || from >= n {
                    return;
                }
                if msg.arg != fingerprint {
                    // Another algorithm, rail count or first barrier: the
                    // plans would never meet. Say so to both. (A stale
                    // request of an earlier barrier looks the same: keep
                    // collecting, and name it only if it never joins.)
                    let refuse =
                        Msg { kind: MsgKind::Refuse, instance: 0, epoch: (msg.instance >> 32) as u32, tag: REFUSE_CONFIG, arg: msg.instance as u32 };
                    mismatched.push(from);
                    self.out.push(0, To::Node(from), refuse, &[]);
                    return;
                }
                // The request heard last stands for its node. Incarnations
                // are never compared by size (they hold their hosts'
                // clocks, and a Join recorded in an earlier run on a host
                // whose clock was ahead would win for ever): a delayed
                // request of an earlier barrier, or a replayed one, may
                // stand for a moment, and the live process, which asks
                // until it is admitted, is heard again (see `on_join`).
                if incarnations[from].is_some_and(|known| known != msg.instance) {
                    self.stats.superseded += 1;
                }
                incarnations[from] = Some(msg.instance);
                self.join_progress(now);
                self.join_say_whom(from);
            }
            Side::Asking { early, refused, waits, running, .. } => {
                // Node 0's answers name the whole incarnation (rev28, finding
                // 2). (A barrier beside is given its instance: none is its.)
                let ours = !passive && from == 0 && msg.arg == incarnation as u32 && msg.epoch == (incarnation >> 32) as u32;
                let answered = parse_incarnation(data).filter(|&(i, _)| i == incarnation);
                let joining = msg.kind == MsgKind::Status && msg.tag & status::JOINING != 0;
                match msg.kind {
                    // Node 0 waits for others to ask: it names them (and, if
                    // it gave up, the join has failed).
                    MsgKind::Status
                        if joining && !passive && from == 0 && msg.instance == 0 && msg.epoch == incarnation as u32 && answered.is_some() =>
                    {
                        let data = answered.map_or(&[][..], |(_, rest)| rest);
                        let mut nodes: Vec<NodeId> = data.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as NodeId).collect();
                        if nodes.is_empty() || !data.len().is_multiple_of(4) {
                            nodes = vec![(msg.arg as NodeId).wrapping_sub(1)];
                        }
                        nodes.retain(|&p| p != 0 && p < n);
                        if msg.tag & status::FAILED != 0 && !nodes.is_empty() {
                            let waited = now.saturating_duration_since(j.start);
                            // As at this node's own timeout: a refusal heard
                            // is the error (node 0 no longer counts this node).
                            let refused = *refused;
                            self.member.joining = None;
                            let error = if refused {
                                BarrierError::Refused { node: self.me() }
                            } else {
                                BarrierError::JoinTimeout {
                                    missing: nodes,
                                    nodes: n,
                                    waited,
                                    bad_tags: Vec::new(),
                                    auth_mismatch: Vec::new(),
                                    bad_version: 0,
                                }
                            };
                            self.out.events.push_back(Event::JoinFailed(error));
                            return;
                        }
                        *waits = Some((nodes, now, 0));
                    }
                    // A peer's word that it is joining too says nothing here.
                    MsgKind::Status if joining => {}
                    MsgKind::Admit if ours => {
                        self.member.instance = msg.instance;
                        let Some(j) = self.member.joining.take() else { return };
                        let Side::Asking { early, .. } = j.side else { return };
                        // Peers admitted first may have started barrier 0:
                        // their messages that came before the admission count now.
                        for (from, msg, data) in early {
                            self.receive(from, msg, &data, now);
                        }
                        self.out.events.push_back(Event::Joined { instance: self.member.instance });
                    }
                    MsgKind::Data | MsgKind::Nack | MsgKind::Status | MsgKind::Answer => {
                        // A peer in the first barrier of an instance: one
                        // that node 0 admitted it into, without this node
                        // (not a peer still finishing its last instance).
                        if msg.instance != 0 && msg.epoch == first && from < n {
                            match running.iter_mut().find(|(q, _)| *q == from) {
                                Some((_, t)) => *t = now,
                                None => running.push((from, now)),
                            }
                        }
                        if early.len() < JOIN_STASH {
                            early.push((from, msg, data.to_vec()));
                        }
                        let probe = msg.kind == MsgKind::Nack && msg.tag != STATUS_TAG && msg.instance != 0 && !*refused;
                        if probe && self.may_answer_joining(from, msg.instance, msg.tag, now) {
                            // A peer probes this node: say it is alive, only
                            // not admitted yet (node 0 may be out of reach,
                            // and this node must not be named silent for it).
                            let alive = Msg { kind: MsgKind::Status, instance: msg.instance, epoch: msg.epoch, tag: status::JOINING, arg: 0 };
                            self.out.push(0, To::Node(from), alive, &[]);
                        }
                        // A peer is in: node 0 admits every node at once, so
                        // this node's admission was lost, and its peers
                        // probe it (it cannot answer them until admitted).
                        // Ask node 0 again now, not after a long backoff.
                        if !passive {
                            self.join_ask_soon(now);
                        }
                    }
                    MsgKind::Refuse if ours && msg.tag == REFUSE_CONFIG => {
                        let beside = if j.beside { ", or of the barrier made beside it" } else { "" };
                        self.member.joining = None;
                        self.out.events.push_back(Event::JoinFailed(BarrierError::ConfigMismatch {
                            node: 0,
                            detail: format!(
                                "node 0 runs another configuration than node {} ({} on {} rail(s) here{beside})",
                                self.me(),
                                self.config.algorithm,
                                self.config.rails
                            ),
                        }));
                    }
                    // Node 0 runs this barrier already with another process in
                    // this node's place, or runs an earlier barrier that it has
                    // not dropped yet (this node dropped its own without
                    // finishing it, and is quicker): ask on, and fail only if it
                    // refuses until the join timeout.
                    MsgKind::Refuse if ours => *refused = true,
                    // For another incarnation: delayed, or replayed from an earlier run.
                    MsgKind::Admit | MsgKind::Refuse => self.stats.superseded += 1,
                    _ => {}
                }
            }
        }
    }

    /// A joining node ≠ 0 whose peers are in: its next request goes within
    /// a retry timeout of the last one, and its requests' backoff restarts.
    fn join_ask_soon(&mut self, now: Instant) {
        let retry = self.config.retry_timeout;
        let Some(Side::Asking { interval, next_request, .. }) = self.member.joining.as_mut().map(|j| &mut j.side) else { return };
        if *interval > retry {
            let soon = (*next_request - *interval + retry).max(now);
            if soon < *next_request {
                *next_request = soon;
                *interval = retry;
            }
        }
        self.join_progress(now);
    }

    /// Node 0, joining: tells `to`, which asked, whom it still waits for
    /// (the first in `arg`, all of them in the data if they fit).
    fn join_say_whom(&mut self, to: NodeId) {
        let Some(Side::Admitting { incarnations, .. }) = self.member.joining.as_ref().map(|j| &j.side) else { return };
        // A transport that carries no data cannot name the incarnation: no word.
        let Some(incarnation) = incarnations[to].filter(|_| self.setup.max_data >= INCARNATION_LEN) else { return };
        let (msg, data) = whom_word(incarnations, incarnation, 0, self.setup.max_data);
        self.out.push(0, To::Node(to), msg, &data);
    }

    /// Node 0's `Admit` or `Refuse` of the join of `incarnation`.
    fn send_admission(&mut self, to: NodeId, kind: MsgKind, incarnation: u64) {
        let instance = if kind == MsgKind::Admit { self.member.instance } else { 0 };
        let msg = Msg { kind, instance, epoch: (incarnation >> 32) as u32, tag: 0, arg: incarnation as u32 };
        self.out.push(0, To::Node(to), msg, &[]);
    }

    /// Node 0: a join request after the instance was agreed. The same
    /// incarnation lost its admission: admit it again. Another one is a
    /// process that took a node's place: refuse it.
    pub(super) fn on_join(&mut self, from: NodeId, msg: Msg) {
        if self.me() != 0 || self.member.admitted.len() != self.nodes() {
            return;
        }
        let echo = msg.instance;
        let admitted = self.member.admitted[from];
        if admitted == echo {
            // It lives, though it cannot answer probes until admitted.
            self.live.peers[from].joining();
            self.send_admission(from, MsgKind::Admit, echo)
        } else if !self.live.peers[from].ever_heard() && self.stats.completed == 0 && !self.member.took_part_beside.get(from).is_some_and(|&b| b) {
            // Another incarnation of a node never heard from in this
            // instance, before this node completed any barrier (which needs
            // every node's entry), nor heard or a barrier completed in the
            // instance beside, if one runs (its driver tells this core:
            // review rev33-2): admissions are tentative until then. The
            // one admitted may be a delayed request of that process's
            // earlier barrier, or a Join recorded in an earlier run and
            // replayed here (its admission, echoing it, is ignored), and so
            // may this one; the live process asks until it is admitted, so
            // it is the one admitted last. No incarnation is compared by
            // size: they hold their hosts' clocks (rev27, finding 2).
            self.stats.superseded += 1;
            self.member.admitted[from] = msg.instance;
            self.send_admission(from, MsgKind::Admit, echo)
        } else if self.closing.closing() {
            // Once this node is closing, a peer may have finished and moved
            // on to a new instance, whose node 0 will answer it.
        } else {
            self.stats.refused += 1;
            self.send_admission(from, MsgKind::Refuse, echo)
        }
    }
}
