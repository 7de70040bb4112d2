//! Many barriers on one mcd endpoint: a barrier per group of the job's nodes
//! (an MPI communicator), all sharing the process's one endpoint (one port,
//! one pair of rings), with no new discovery round per group.
//!
//! [`SharedEndpoint`] owns the endpoint; [`SharedEndpoint::group`] makes a
//! [`GroupTransport`] over a list of the job's nodes, numbered in the list's
//! order. Every frame carries, ahead of the barrier message, the group's
//! 64-bit *key*: a hash of the member list and of either a number the
//! members agreed on ([`SharedEndpoint::group_with_key`]: an MPI layer
//! agrees on one per communicator, so creation order does not matter) or
//! how many groups with exactly these members this process created before
//! ([`SharedEndpoint::group`]: creation is collective, so every member that
//! creates its groups in the same order counts the same). Two groups that
//! are alive together in a process never share a key, even with the same
//! members; a group freed and created again gets a new one. Whichever thread reads the
//! rings routes each frame to its group's queue and wakes that group's
//! sleepers; frames of keys no group here holds are dropped and counted,
//! except join requests, which are kept a little for a group about to be
//! created here. Within a group, the barrier's own instance (agreed by the
//! join) still separates one barrier from another.
//!
//! A group's multicast is one frame to the group's own multicast address
//! once every member has joined the group's barrier
//! ([`Transport::all_joined`]): a group of three or more nodes that is not
//! the whole job has one of the job's multicast groups 1 to 253, picked
//! from its key (the same on every member), which every member's endpoint
//! joins when it makes the group's transport, before it sends anything of
//! the group's. Nodes outside the group never join it, so its frames stop
//! at their kernel's filter and wake none of their threads (without it, an
//! idle rank's watcher woke for every multicast of every communicator it is
//! not in: issue 28's 4-rank communicators in a job of 8). Two live groups
//! may share an address (253 of them); a node in one and not the other then
//! takes the other's frames and drops them by their key, as every node did
//! before. Before the join completes, and for groups of two (one unicast
//! does), multicasts go to every node of the job.
//!
//! **Progress agents.** Each group's barrier has its own progress agent. One
//! of them at a time, the *watcher*, sleeps on the rings: that of the group
//! (of two or more nodes) used last, which is the one the application
//! thread reads the rings for while it is inside, so while it is, no agent
//! wakes for the frames it takes. The others sleep until a frame is routed
//! to their group (or a timer of theirs is due). So however many
//! communicators a program has, its idle agents do not wake for frames that
//! are not theirs.
//!
//! **Frames dropped unread.** The rings are one for all groups, so a frame
//! the kernel dropped for want of ring space may have been any group's:
//! every group is told ([`Transport::ring_drops`]). Whichever thread reads
//! the rings takes the endpoint's drop count after reading
//! ([`Endpoint::ring_drops`]: a system call only when a frame read says
//! that frames were dropped) into a counter every group's transport reads
//! without the hub's lock, and wakes the other groups' sleepers (once per
//! overflow told); each group counts from the drops when it was made, and
//! its barrier takes each drop once (it keeps the count it was last told).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcd::{Destination, Endpoint, GroupId, Readiness};

use crate::mcd_transport::wire;
use crate::transport::{Incoming, Msg, MsgKind, NodeId, Transport, TransportError, Waker};
use crate::types::mix;

/// Payload length of a group frame ([`wire::emit_grouped`]).
pub use wire::GROUP_PAYLOAD_LEN;
/// Frames kept per group before its owner reads them (the oldest go first).
const QUEUE_LIMIT: usize = 4096;
/// Mixed into agreed keys so that they stay apart from counted ones.
const AGREED_KEY_TAG: u64 = 0x6167_7265_6564_6B79;
/// Join requests kept for groups not created here yet, in all.
const PENDING_LIMIT: usize = 1024;

/// Counters of a shared endpoint's routing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Frames routed to a group of this process.
    pub routed: u64,
    /// Frames of a group this process does not hold (another group's
    /// multicast, or a freed group's late frame), dropped.
    pub foreign: u64,
    /// Frames that were not group barrier frames, dropped.
    pub ignored: u64,
    /// Frames dropped because a group's queue was full.
    pub overflow: u64,
    /// Join requests for groups not created here yet, dropped beyond the
    /// limit kept for them (the oldest first).
    pub pending_dropped: u64,
}

/// A routed frame: sender, rail, message, and its data (a buffer from the
/// hub's pool, empty for a plain barrier message).
/// A message routed to a group: sender, rail, message, data, and the
/// session its frame was signed under ([`mcd::Received::session`]).
type Routed = (NodeId, usize, Msg, Vec<u8>, u64);

struct Route {
    queue: VecDeque<Routed>,
    /// The application's sleep on the rings and on this group's routing.
    app: Arc<Readiness>,
    /// The group's agent's alarm (it sleeps on the rings as the watcher,
    /// else on a flag).
    agent: Option<Arc<AgentAlarm>>,
    /// Members (a group of one has no agent, so it never watches).
    members: usize,
}

/// A sleep on a flag (for agents that do not watch the rings).
#[derive(Default)]
struct Sleeper {
    woken: Mutex<bool>,
    cond: Condvar,
}

impl Sleeper {
    fn wait(&self, timeout: Option<Duration>) {
        let woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        let mut woken = match timeout {
            Some(t) => self.cond.wait_timeout_while(woken, t, |w| !*w).unwrap_or_else(|e| e.into_inner()).0,
            None => self.cond.wait_while(woken, |w| !*w).unwrap_or_else(|e| e.into_inner()),
        };
        *woken = false;
    }

    fn wake(&self) {
        *self.woken.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }
}

/// What wakes a group's progress agent wherever it sleeps: on the rings
/// (as the watcher) or on its flag. A frame routed to its group by another
/// thread rings both, since that thread may have emptied the rings the
/// agent sleeps on.
struct AgentAlarm {
    rings: Readiness,
    sleeper: Sleeper,
    /// The agent sleeps on its flag, not on the rings (set and read under
    /// the hub's lock): a group that becomes the watcher wakes its agent
    /// only then. An agent that is not asleep (serving, or in its grace
    /// period) checks whether it watches when it next sleeps, so waking it
    /// would cost a system call and a context switch per call for nothing.
    on_flag: std::sync::atomic::AtomicBool,
}

impl AgentAlarm {
    fn wake(&self) {
        // Failing to signal the rings leaves the watcher to its timeout.
        let _ = self.rings.wake();
        self.sleeper.wake();
    }
}

/// Keys are hashes already: a map keyed by them needs no hashing of its own.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

type KeyMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<KeyHasher>>;

struct Hub {
    endpoint: Endpoint,
    buf: Box<[u8]>,
    routes: KeyMap<Route>,
    /// Join requests for keys no group holds yet.
    pending: VecDeque<(u64, NodeId, usize, Msg)>,
    /// Data buffers to reuse (no allocation per frame once warm).
    spare: Vec<Vec<u8>>,
    /// Groups created per member list (by the list's hash).
    created: HashMap<u64, u64>,
    /// Every key made from an agreed number: never routed twice, so that
    /// reusing one is refused on every member alike, whenever the earlier
    /// group finished closing.
    agreed_keys: HashSet<u64, std::hash::BuildHasherDefault<KeyHasher>>,
    /// The group whose agent sleeps on the rings.
    watcher: Option<u64>,
    /// Transports and listeners here per multicast group (the endpoint is
    /// in the group while its count is above 0).
    in_group: [u32; 256],
    stats: RouteStats,
    /// The endpoint's ring drops as last taken ([`Endpoint::ring_drops`]),
    /// written under the lock, read by every group's transport without it.
    ring_drops: Arc<AtomicU64>,
}

impl Hub {
    /// Reads every frame there is and routes it, waking the sleepers of
    /// groups other than `reader`'s whose queue was empty.
    fn drain(&mut self, reader: u64) -> Result<(), TransportError> {
        while let Some(m) = self.endpoint.try_recv(&mut self.buf)? {
            let parsed = wire::parse_grouped_with_data(m.kind, m.seq, &self.buf[..m.len]);
            let Some((key, msg, data)) = parsed else {
                self.stats.ignored += 1;
                continue;
            };
            match self.routes.get_mut(&key) {
                Some(route) => {
                    self.stats.routed += 1;
                    if route.queue.len() >= QUEUE_LIMIT {
                        if let Some((_, _, _, old, _)) = route.queue.pop_front() {
                            self.spare.push(old);
                        }
                        self.stats.overflow += 1;
                    }
                    let idle = route.queue.is_empty();
                    let mut copy = if data.is_empty() { Vec::new() } else { self.spare.pop().unwrap_or_default() };
                    copy.clear();
                    copy.extend_from_slice(data);
                    route.queue.push_back((m.from, m.rail, msg, copy, m.session));
                    if idle && key != reader {
                        // Failing to signal leaves the sleeper to its timeout.
                        let _ = route.app.wake();
                        if let Some(agent) = &route.agent {
                            agent.wake();
                        }
                    }
                }
                None if msg.kind == MsgKind::Join => {
                    if self.pending.len() >= PENDING_LIMIT {
                        self.pending.pop_front();
                        self.stats.pending_dropped += 1;
                    }
                    self.pending.push_back((key, m.from, m.rail, msg));
                }
                None => self.stats.foreign += 1,
            }
        }
        self.note_ring_drops(reader)
    }

    /// Takes the endpoint's ring-drop count (no system call unless a frame
    /// read said that frames were dropped) and, if it grew, publishes it to
    /// every group and wakes the sleepers of the groups other than
    /// `reader`'s: the dropped frames may have been any group's, and a group
    /// whose barrier misses one asks again once it looks
    /// ([`Transport::ring_drops`]). Once per overflow told, not per frame.
    fn note_ring_drops(&mut self, reader: u64) -> Result<(), TransportError> {
        let drops = self.endpoint.ring_drops()?;
        if drops <= self.ring_drops.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.ring_drops.store(drops, Ordering::Release);
        for (_, route) in self.routes.iter().filter(|&(&k, r)| k != reader && r.members > 1) {
            // Failing to signal leaves the sleeper to its timeout.
            let _ = route.app.wake();
            if let Some(agent) = &route.agent {
                agent.wake();
            }
        }
        Ok(())
    }

    /// Puts the endpoint in multicast group `g` for one more holder.
    fn join_group(&mut self, g: GroupId) -> Result<(), TransportError> {
        if self.in_group[usize::from(g.0)] == 0 {
            self.endpoint.join(g)?;
        }
        self.in_group[usize::from(g.0)] += 1;
        Ok(())
    }

    /// One holder of multicast group `g` less; the last one leaves it.
    fn leave_group(&mut self, g: GroupId) {
        let count = &mut self.in_group[usize::from(g.0)];
        *count = count.saturating_sub(1);
        if *count == 0 && g != GroupId::ALL {
            // Failing to leave only lets a few frames more in, dropped as foreign.
            let _ = self.endpoint.leave(g);
        }
    }

    fn take(&mut self, key: u64) -> Option<Routed> {
        self.routes.get_mut(&key).and_then(|r| r.queue.pop_front())
    }
}

/// An mcd endpoint shared by the barriers of several groups of its nodes
/// (see the module docs). Cloning gives another handle on the same endpoint.
#[derive(Clone)]
pub struct SharedEndpoint {
    hub: Arc<Mutex<Hub>>,
    me: NodeId,
    nodes: usize,
    rails: usize,
}

impl std::fmt::Debug for SharedEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEndpoint").field("node", &self.me).field("nodes", &self.nodes).finish()
    }
}

fn lock(hub: &Mutex<Hub>) -> MutexGuard<'_, Hub> {
    hub.lock().unwrap_or_else(|e| e.into_inner())
}

/// The multicast group of the group with key `key`: one of 1 to 253 (0 is
/// every node, 254 the hosts' leaders, 255 the bootstrap's).
fn own_group(key: u64) -> GroupId {
    GroupId(1 + u8::try_from(key % 253).expect("below 253"))
}

/// The hash of a member list.
fn members_hash(members: &[NodeId]) -> u64 {
    members.iter().fold(mix(members.len() as u64 ^ 0x6772_6F75_7073), |h, &m| mix(h ^ m as u64))
}

impl SharedEndpoint {
    /// Takes `endpoint` for groups' barriers.
    pub fn new(endpoint: Endpoint) -> SharedEndpoint {
        let (me, nodes, rails) = (endpoint.node_id(), endpoint.node_count(), endpoint.rails());
        let hub = Hub {
            endpoint,
            buf: vec![0u8; 65536].into_boxed_slice(),
            routes: KeyMap::default(),
            pending: VecDeque::new(),
            spare: Vec::new(),
            created: HashMap::new(),
            agreed_keys: Default::default(),
            watcher: None,
            in_group: [0; 256],
            stats: RouteStats::default(),
            ring_drops: Arc::default(),
        };
        SharedEndpoint { hub: Arc::new(Mutex::new(hub)), me, nodes, rails }
    }

    /// This process's node number in the job.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// The job's nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// A transport for the group of `members` (the job's node numbers; the
    /// group numbers them in this order). Every member must create its group
    /// with the same list, and members must create the groups they share in
    /// the same order (as MPI orders collective calls); then a [`Barrier`]
    /// over it is collective over the members only.
    ///
    /// [`Barrier`]: crate::Barrier
    pub fn group(&self, members: &[NodeId]) -> Result<GroupTransport, TransportError> {
        self.group_keyed(members, None)
    }

    /// As [`group`](Self::group), but keyed by `agreed`, a number every
    /// member passes alike and that no other group of these members has
    /// used (a reused one is refused; an MPI layer takes one from the
    /// communicator's first rank and a count, say),
    /// instead of by creation order: members may create their groups in any
    /// order, from several threads at once.
    pub fn group_with_key(&self, members: &[NodeId], agreed: u64) -> Result<GroupTransport, TransportError> {
        self.group_keyed(members, Some(agreed))
    }

    fn group_keyed(&self, members: &[NodeId], agreed: Option<u64>) -> Result<GroupTransport, TransportError> {
        let mut index = vec![None; self.nodes];
        for (i, &m) in members.iter().enumerate() {
            let slot = index.get_mut(m).ok_or_else(|| format!("group member {m} is not a node of the job ({} nodes)", self.nodes))?;
            if slot.replace(i).is_some() {
                return Err(format!("group member {m} is listed twice").into());
            }
        }
        let Some(me) = index[self.me] else {
            return Err(format!("this node ({}) is not a member of the group {members:?}", self.me).into());
        };
        let mut hub = lock(&self.hub);
        let list = members_hash(members);
        let key = match agreed {
            Some(agreed) => mix(list ^ mix(agreed ^ AGREED_KEY_TAG)),
            None => {
                let count = hub.created.entry(list).or_insert(0);
                *count += 1;
                mix(list ^ mix(*count))
            }
        };
        if hub.routes.contains_key(&key) || (agreed.is_some() && !hub.agreed_keys.insert(key)) {
            return Err(match agreed {
                Some(agreed) => {
                    format!("the agreed group key {agreed:#x} was used here before by a group of the same members: agree on a key never used before")
                }
                None => format!("group key {key:#018x} is already in use here (a hash collision): create the group again"),
            }
            .into());
        }
        let readiness = Arc::new(hub.endpoint.readiness()?);
        // Its own multicast address: for three members or more (two send
        // one unicast instead), unless it is the whole job.
        let own = (members.len() > 2 && members.len() < self.nodes).then(|| own_group(key));
        if let Some(g) = own {
            hub.join_group(g)?;
        }
        let mut queue = VecDeque::new();
        let pending = std::mem::take(&mut hub.pending);
        for (k, from, rail, msg) in pending {
            if k == key {
                queue.push_back((from, rail, msg, Vec::new(), 0));
            } else {
                hub.pending.push_back((k, from, rail, msg));
            }
        }
        hub.routes.insert(key, Route { queue, app: readiness.clone(), agent: None, members: members.len() });
        if hub.watcher.is_none() && members.len() > 1 {
            hub.watcher = Some(key);
        }
        let ring_drops = hub.ring_drops.clone();
        let drops_before = ring_drops.load(Ordering::Acquire);
        Ok(GroupTransport {
            hub: self.hub.clone(),
            key,
            ring_drops,
            drops_before,
            drops_told: drops_before,
            members: members.to_vec(),
            index,
            me,
            rails: self.rails,
            readiness,
            everyone: members.len() == self.nodes,
            multicast_to: Destination::ALL_NODES,
            joined: own,
            joined_multicast: own.map(Destination::Group),
            multicast_always: false,
            dropped: 0,
            data: Vec::new(),
            frame: Vec::new(),
            last: (0, 0, 0),
            confirmed: vec![0; self.nodes * self.rails],
        })
    }

    /// As [`group`](Self::group), with the group's multicasts sent to the
    /// named multicast group `multicast` (which this endpoint joins, and
    /// leaves when the transport drops) instead of to every node of the
    /// job: for a group whose other nodes should not see its frames at all,
    /// such as the hosts' leaders ([`GroupId::HOST_LEADERS`]).
    pub fn group_multicasting_to(&self, members: &[NodeId], multicast: GroupId) -> Result<GroupTransport, TransportError> {
        if multicast == GroupId::ALL {
            return self.group(members);
        }
        let mut transport = self.group(members)?;
        let mut hub = lock(&self.hub);
        if let Some(own) = transport.joined.take() {
            hub.leave_group(own);
        }
        hub.join_group(multicast)?;
        transport.joined = Some(multicast);
        transport.joined_multicast = None;
        transport.multicast_to = Destination::Group(multicast);
        transport.everyone = false;
        drop(hub);
        Ok(transport)
    }

    /// Listens, without being a member, to the multicasts of the group
    /// with key `key` that go to the named multicast group `multicast`
    /// (which this endpoint joins, and leaves when the listener drops): a
    /// host's local ranks hear their leaders' release this way
    /// ([`crate::HostRelease::Multicast`]). The group's unicasts are not
    /// addressed here and never arrive.
    pub fn listen(&self, key: u64, multicast: GroupId) -> Result<GroupListener, TransportError> {
        let mut hub = lock(&self.hub);
        if hub.routes.contains_key(&key) {
            return Err(format!("group key {key:#018x} is already routed here: a member does not listen to its own group").into());
        }
        hub.join_group(multicast)?;
        let readiness = Arc::new(hub.endpoint.readiness()?);
        // No members here: it never watches the rings for an agent.
        hub.routes.insert(key, Route { queue: VecDeque::new(), app: readiness.clone(), agent: None, members: 0 });
        Ok(GroupListener { hub: self.hub.clone(), key, multicast, readiness })
    }

    /// Runs `f` on the endpoint (for its statistics, say).
    pub fn with_endpoint<R>(&self, f: impl FnOnce(&mut Endpoint) -> R) -> R {
        f(&mut lock(&self.hub).endpoint)
    }

    /// The routing counters.
    pub fn route_stats(&self) -> RouteStats {
        lock(&self.hub).stats
    }
}

/// The multicasts of a group this process is not a member of
/// ([`SharedEndpoint::listen`]). Dropping it stops routing them here.
pub struct GroupListener {
    hub: Arc<Mutex<Hub>>,
    key: u64,
    multicast: GroupId,
    readiness: Arc<Readiness>,
}

impl std::fmt::Debug for GroupListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupListener").field("key", &format_args!("{:#018x}", self.key)).field("multicast", &self.multicast).finish()
    }
}

impl GroupListener {
    /// The next message heard (its sender a node of the job), reading the
    /// rings if none is queued; `None` when there is none.
    pub fn try_recv(&self) -> Result<Option<(NodeId, Msg)>, TransportError> {
        let mut hub = lock(&self.hub);
        let got = match hub.take(self.key) {
            Some(x) => Some(x),
            None => {
                hub.drain(self.key)?;
                hub.take(self.key)
            }
        };
        Ok(got.map(|(from, _, msg, data, _)| {
            if data.capacity() > 0 {
                hub.spare.push(data);
            }
            (from, msg)
        }))
    }

    /// Sleeps until a frame may have arrived (on the rings, or routed here
    /// by another thread), or for `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<(), TransportError> {
        Ok(self.readiness.wait(Some(timeout))?)
    }
}

impl Drop for GroupListener {
    fn drop(&mut self) {
        let mut hub = lock(&self.hub);
        hub.routes.remove(&self.key);
        hub.leave_group(self.multicast);
    }
}

/// A barrier transport for one group of a [`SharedEndpoint`]'s nodes.
/// Dropping it stops routing the group's frames here.
pub struct GroupTransport {
    hub: Arc<Mutex<Hub>>,
    key: u64,
    /// The shared endpoint's ring drops (`Hub::ring_drops`).
    ring_drops: Arc<AtomicU64>,
    /// Its count when this group was made: earlier drops were not its.
    drops_before: u64,
    /// Its count when [`Transport::ring_drops`] last told it.
    drops_told: u64,
    members: Vec<NodeId>,
    /// The group index of each node of the job.
    index: Vec<Option<usize>>,
    me: usize,
    rails: usize,
    readiness: Arc<Readiness>,
    everyone: bool,
    /// Where the group's multicasts go: every node of the job, or a named
    /// group only the members joined.
    multicast_to: Destination,
    /// The multicast group this endpoint is in for this transport (its
    /// own, or the named one), left when it drops.
    joined: Option<GroupId>,
    /// Where its multicasts go once every member has joined (its own
    /// group, which every member's endpoint is in by then).
    joined_multicast: Option<Destination>,
    /// Multicast even to one other member (others listen to the group).
    multicast_always: bool,
    dropped: u64,
    /// The data of the message last received.
    data: Vec<u8>,
    /// Where a frame with data is built (reused).
    frame: Vec<u8>,
    /// The job node, rail and session of the message last received.
    last: (NodeId, usize, u64),
    /// Per job node and rail, the session last confirmed live (so the hub
    /// is locked for it once per sender and session, not per message).
    confirmed: Vec<u64>,
}

impl std::fmt::Debug for GroupTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupTransport").field("key", &format_args!("{:#018x}", self.key)).field("members", &self.members).finish()
    }
}

impl GroupTransport {
    /// The group's key (the same on every member).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The members' node numbers in the job, in group order.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// Multicasts go to the group's multicast address even when there is
    /// one other member only (where one unicast would otherwise do):
    /// others listen to them ([`SharedEndpoint::listen`]).
    pub fn multicast_always(&mut self) {
        self.multicast_always = true;
    }

    /// Frames with this group's key from nodes outside it, dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Runs `f` on the shared endpoint (for its statistics, say).
    pub fn with_endpoint<R>(&self, f: impl FnOnce(&mut Endpoint) -> R) -> R {
        f(&mut lock(&self.hub).endpoint)
    }

    fn send_to(&mut self, rail: usize, to: Destination, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if data.is_empty() {
            let payload = wire::emit_grouped(self.key, &msg);
            return Ok(lock(&self.hub).endpoint.send(rail, to, wire::kind_byte(msg.kind), msg.epoch, &payload)?);
        }
        wire::emit_grouped_with_data(self.key, &msg, data, &mut self.frame);
        Ok(lock(&self.hub).endpoint.send(rail, to, wire::kind_byte(msg.kind), msg.epoch, &self.frame)?)
    }

    /// Makes this group the watcher: the group in use watches the rings
    /// once its caller is away. Its agent may be asleep on its flag (it was
    /// not the watcher when it went to sleep): wake it, or nobody would
    /// read the rings once the caller leaves, and peers would take this
    /// node for dead.
    fn watch(&self, hub: &mut Hub) {
        if self.members.len() > 1 && hub.watcher != Some(self.key) {
            hub.watcher = Some(self.key);
            if let Some(agent) = hub.routes.get(&self.key).and_then(|r| r.agent.clone()) {
                if agent.on_flag.load(std::sync::atomic::Ordering::Relaxed) {
                    agent.wake();
                }
            }
        }
    }

    /// The next frame of this group, reading the rings if none is queued;
    /// with `claim` (a caller about to wait: not a progress agent's
    /// non-blocking round, which would take the rings from the group in
    /// use and wake for its every frame), this group becomes the watcher.
    fn poll(&mut self, claim: bool) -> Result<(Option<Incoming>, mcd::wait::WaitPhases), TransportError> {
        let mut hub = lock(&self.hub);
        if claim {
            self.watch(&mut hub);
        }
        loop {
            let got = match hub.take(self.key) {
                Some(x) => Some(x),
                None => {
                    hub.drain(self.key)?;
                    hub.take(self.key)
                }
            };
            let Some((from, rail, msg, data, session)) = got else { return Ok((None, hub.endpoint.wait_phases())) };
            self.last = (from, rail, session);
            let old = std::mem::replace(&mut self.data, data);
            if old.capacity() > 0 {
                hub.spare.push(old);
            }
            match self.index.get(from).copied().flatten() {
                Some(from) => return Ok((Some(Incoming { from, rail, msg }), hub.endpoint.wait_phases())),
                None => self.dropped += 1,
            }
        }
    }
}

impl Drop for GroupTransport {
    fn drop(&mut self) {
        let mut hub = lock(&self.hub);
        hub.routes.remove(&self.key);
        if let Some(g) = self.joined {
            hub.leave_group(g);
        }
        if hub.watcher == Some(self.key) {
            // Another group's agent watches the rings from now on.
            hub.watcher = hub.routes.iter().find(|(_, r)| r.members > 1).map(|(&k, _)| k);
            if let Some(agent) = hub.watcher.and_then(|k| hub.routes[&k].agent.clone()) {
                agent.wake();
            }
        }
    }
}

impl Transport for GroupTransport {
    fn node(&self) -> NodeId {
        self.me
    }

    fn node_count(&self) -> usize {
        self.members.len()
    }

    fn rails(&self) -> usize {
        self.rails
    }

    fn send(&mut self, rail: usize, to: NodeId, msg: Msg) -> Result<(), TransportError> {
        self.send_data(rail, to, msg, &[])
    }

    fn max_data(&self) -> usize {
        let hub = lock(&self.hub);
        let least = (0..self.rails).filter_map(|r| hub.endpoint.max_payload(r).ok()).min().unwrap_or(0);
        least.saturating_sub(GROUP_PAYLOAD_LEN)
    }

    fn send_data(&mut self, rail: usize, to: NodeId, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        let node = *self.members.get(to).ok_or_else(|| format!("group node {to} of {}", self.members.len()))?;
        self.send_to(rail, Destination::Node(node), msg, data)
    }

    fn data(&self) -> &[u8] {
        &self.data
    }

    fn multicast_data(&mut self, rail: usize, msg: Msg, data: &[u8]) -> Result<(), TransportError> {
        if !self.everyone && !self.multicast_always && self.members.len() <= 2 {
            let me = self.me;
            for to in (0..self.members.len()).filter(|&n| n != me) {
                self.send_data(rail, to, msg, data)?;
            }
            return Ok(());
        }
        self.send_to(rail, self.multicast_to, msg, data)
    }

    fn has_multicast(&self) -> bool {
        true
    }

    fn multicast(&mut self, rail: usize, msg: Msg) -> Result<(), TransportError> {
        if !self.everyone && !self.multicast_always && self.members.len() <= 2 {
            // One unicast beats a frame that wakes every node of the job.
            let me = self.me;
            for to in (0..self.members.len()).filter(|&n| n != me) {
                self.send(rail, to, msg)?;
            }
            return Ok(());
        }
        self.send_to(rail, self.multicast_to, msg, &[])
    }

    fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, TransportError> {
        let start = Instant::now();
        let claim = !timeout.is_zero();
        loop {
            let (got, phases) = self.poll(claim)?;
            if got.is_some() || timeout.is_zero() {
                return Ok(got);
            }
            let now = Instant::now();
            let waited = now - start;
            // Back early while ring drops are untold: see `ring_drops`.
            if waited >= timeout || self.ring_drops.load(Ordering::Acquire) > self.drops_told {
                return Ok(None);
            }
            if waited < phases.spin {
                std::hint::spin_loop();
            } else if waited < phases.spin.saturating_add(phases.yield_for) {
                std::thread::yield_now();
            } else {
                // Frames for this group that another thread routes wake it
                // too. Wake at least every announcement interval: a node
                // silent while it waits re-teaches the switch its port.
                let announce_every = lock(&self.hub).endpoint.announce_every();
                let nap = announce_every.map_or(timeout - waited, |every| every.min(timeout - waited));
                self.readiness.wait(Some(nap))?;
                lock(&self.hub).endpoint.announce_if_silent(Instant::now())?;
            }
        }
    }

    /// Every member has made its transport, so its endpoint is in the
    /// group's own multicast group: multicasts go there from now on.
    fn all_joined(&mut self) {
        self.joined_beside();
        lock(&self.hub).endpoint.refresh_host_load();
    }

    /// The multicast switch only: re-reading the host's load scans the
    /// port lock directory (an open and a lock query per file: thousands
    /// on a long-used host, tens of ms), which the barrier beside's
    /// `all_joined` did a moment ago (a communicator's collectives' barrier,
    /// made with its own: twice per communicator made communicator churn
    /// 1.7-1.9× slower, 3,103 lock files in /tmp/mcd-ports).
    fn joined_beside(&mut self) {
        if let Some(to) = self.joined_multicast.take() {
            self.multicast_to = to;
        }
    }

    /// A nonblocking collective's start or test by the application (which
    /// reads the rings without sleeping on them, so its `poll`
    /// does not claim): this group watches from now on. Else the group
    /// that last slept on the rings (an `MPI_Barrier` before a loop of
    /// `MPI_Ibarrier` and tests, say) keeps the watch, and its idle agent,
    /// asleep on the rings, wakes for every frame of this group: a wake-up
    /// in every peer's send and a context switch on this node's cores.
    fn in_use(&mut self) {
        let mut hub = lock(&self.hub);
        self.watch(&mut hub);
    }

    fn waker(&self) -> Result<Arc<dyn Waker>, TransportError> {
        let mut hub = lock(&self.hub);
        let alarm = Arc::new(AgentAlarm { rings: hub.endpoint.readiness()?, sleeper: Sleeper::default(), on_flag: Default::default() });
        if let Some(route) = hub.routes.get_mut(&self.key) {
            route.agent = Some(alarm.clone());
        }
        Ok(Arc::new(GroupWaker { hub: self.hub.clone(), key: self.key, alarm }))
    }

    /// The shared endpoint's ring drops since this group was made: every
    /// group is told of every drop (see the module docs), without the
    /// hub's lock. [`recv`](Transport::recv) returns early until this has
    /// told of the drops seen.
    fn ring_drops(&mut self) -> Result<u64, TransportError> {
        self.drops_told = self.ring_drops.load(Ordering::Acquire);
        Ok(self.drops_told - self.drops_before)
    }

    fn bad_tags_from(&self, node: NodeId) -> u64 {
        self.members.get(node).map_or(0, |&j| lock(&self.hub).endpoint.bad_tags_from(j))
    }

    fn confirm_live(&mut self, from: NodeId, rail: usize) {
        let (node, r, session) = self.last;
        if session == 0 || r != rail || self.members.get(from) != Some(&node) {
            return;
        }
        let i = node * self.rails + rail;
        if self.confirmed.get(i) == Some(&session) {
            return;
        }
        lock(&self.hub).endpoint.confirm_live_session(node, rail, session);
        if let Some(c) = self.confirmed.get_mut(i) {
            *c = session;
        }
    }

    fn auth_mismatch_from(&self, node: NodeId) -> u64 {
        self.members.get(node).map_or(0, |&j| lock(&self.hub).endpoint.auth_mismatch_from(j))
    }

    fn bad_version(&mut self) -> u64 {
        lock(&self.hub).endpoint.stats().map_or(0, |s| s.dropped.bad_version)
    }

    /// One announcement per endpoint is enough: the watcher's agent (asleep
    /// on the rings) makes them, and the other groups' agents sleep until a
    /// frame or a timer of theirs, not every `announce_every` too (a program
    /// with many communicators had all their agents wake 10 times a
    /// second). A group that takes the watch wakes its agent
    /// (`GroupTransport::poll`, [`Drop`]), which asks again.
    fn keepalive_every(&self) -> Option<Duration> {
        let hub = lock(&self.hub);
        if hub.watcher.is_none_or(|w| w == self.key) {
            hub.endpoint.announce_every()
        } else {
            None
        }
    }

    fn keepalive(&mut self, now: Instant) -> Result<(), TransportError> {
        lock(&self.hub).endpoint.announce_if_silent(now)?;
        Ok(())
    }
}

/// A group's progress agent sleeps on the rings if it is the watcher, else
/// until a frame is routed to its group.
struct GroupWaker {
    hub: Arc<Mutex<Hub>>,
    key: u64,
    alarm: Arc<AgentAlarm>,
}

impl Waker for GroupWaker {
    fn wait(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        use std::sync::atomic::Ordering::Relaxed;
        let watching = {
            let hub = lock(&self.hub);
            let watching = hub.watcher == Some(self.key);
            // Under the lock: a group that takes the watch after this sees
            // the flag and wakes the sleeper (whose wake is never lost).
            self.alarm.on_flag.store(!watching, Relaxed);
            watching
        };
        if watching {
            self.alarm.rings.wait(timeout)?;
        } else {
            self.alarm.sleeper.wait(timeout);
            self.alarm.on_flag.store(false, Relaxed);
        }
        Ok(())
    }

    fn wake(&self) {
        self.alarm.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::members_hash;

    #[test]
    fn member_lists_hash_apart() {
        assert_ne!(members_hash(&[0, 1]), members_hash(&[1, 0]));
        assert_ne!(members_hash(&[0, 1]), members_hash(&[0, 1, 2]));
        assert_ne!(members_hash(&[]), members_hash(&[0]));
    }
}
