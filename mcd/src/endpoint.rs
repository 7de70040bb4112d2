//! The endpoint: one process's port on one or more NICs (rails).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::auth::{Auth, Counter, FrameCounter, FrameKey, SenderWindows};
use crate::config::{lookup_interface, EndpointConfig, Interface, MAX_RAILS};
use crate::filter::{self, pkttype, FilterSpec};
use crate::node::{NodeId, NodeList, Port};
use crate::port::PortLock;
use crate::stats::{DropReason, Stats};
use crate::sys::{self, PacketSocket, RingGeometry, Rings, RxFrame, TxStatus};
use crate::wait::{WaitPhases, WaitPolicy};
use crate::wire::{Frame, FrameRepr, GroupId, MacAddr, WireError, ETHERNET_HEADER_LEN, MCD_HEADER_LEN, TRAILER_LEN};
use crate::{Error, Result};

/// While spinning, how many times [`Endpoint::recv`] polls the rings between
/// two clock reads (a poll of an empty ring costs a few nanoseconds).
const SPIN_POLLS_PER_CLOCK_READ: u32 = 16;
/// The id of the next endpoint opened in this process.
static NEXT_ENDPOINT_ID: AtomicU64 = AtomicU64::new(0);
/// How long a send waits for a free send-ring slot before giving up.
const SEND_RING_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// One node (its port is the one in the node list).
    Node(NodeId),
    /// Every member of a multicast group except the sender.
    Group(GroupId),
}

impl Destination {
    /// Every other node of the job: the paper's `MCD_DST_MULTICAST`.
    pub const ALL_NODES: Destination = Destination::Group(GroupId::ALL);
}

/// What [`Endpoint::try_recv`] delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// The rail it arrived on.
    pub rail: usize,
    /// The sending node.
    pub from: NodeId,
    /// The message kind the sender gave.
    pub kind: u8,
    /// The sequence / epoch the sender gave.
    pub seq: u32,
    /// Payload length (the bytes copied into the buffer).
    pub len: usize,
    /// The group it was multicast to, or `None` for a unicast message.
    pub group: Option<GroupId>,
    /// The session of the sender's counter it was signed under (0 without
    /// authentication): for [`Endpoint::confirm_live_session`].
    pub session: u64,
}

/// A posted send, to test or wait for completion on the endpoint that
/// posted it (another endpoint refuses it with [`Error::ForeignToken`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendToken {
    /// The posting endpoint's id.
    endpoint: u64,
    rail: usize,
    slot: usize,
    generation: u32,
}

struct Rail {
    interface: String,
    info: Interface,
    socket: PacketSocket,
    rings: Rings,
    rx_next: usize,
    /// A frame read since the drop count was last taken said that the
    /// ring had dropped frames since ([`RxFrame::losing`]).
    losing: bool,
    /// Frames that were waiting in the ring when the drop count was last
    /// taken: their marks tell of drops already counted.
    losing_counted: usize,
    tx_next: usize,
    /// Posts per send slot, so that a token of an earlier post of a reused slot reads as sent.
    tx_generation: Vec<u32>,
    /// Another node of the job shares this NIC: accept its `PACKET_OUTGOING` frames.
    has_siblings: bool,
    /// A send-only socket for [`Endpoint::send`]: on a socket with a send ring
    /// the kernel takes every send from the ring, so plain sends need their own.
    sender: PacketSocket,
    /// Where [`Endpoint::send`] builds its frame (allocated once).
    tx_scratch: Vec<u8>,
    _lock: PortLock,
}

impl Rail {
    /// The largest payload: the MTU less the MCD header and `trailer` bytes.
    fn max_payload(&self, trailer: usize) -> usize {
        (self.info.mtu - MCD_HEADER_LEN - trailer).min(self.rings.tx_capacity() - ETHERNET_HEADER_LEN - MCD_HEADER_LEN - trailer)
    }
}

/// A job's frame keys on one rail ([`FrameKey::for_destination`]): one per
/// node (its MAC on the rail) and one per group.
struct RailKeys {
    nodes: Vec<FrameKey>,
    groups: Vec<FrameKey>,
}

impl RailKeys {
    fn new(secret: &crate::JobSecret, rail: usize, nodes: &NodeList, job_key: u32) -> RailKeys {
        RailKeys {
            nodes: nodes.iter().map(|n| FrameKey::for_destination(secret, job_key, rail, n.macs[rail])).collect(),
            groups: (0..=u8::MAX).map(|g| FrameKey::for_destination(secret, job_key, rail, MacAddr::mcd_group(job_key, GroupId(g)))).collect(),
        }
    }

    fn to(&self, to: Destination) -> &FrameKey {
        match to {
            Destination::Node(n) => &self.nodes[n],
            Destination::Group(g) => &self.groups[g.0 as usize],
        }
    }
}

/// Authentication: the keys (per rail and destination; sending signs with
/// them too), and per sender node and rail its replay windows, and per
/// sender its count of frames with bad tags.
struct Verifier {
    /// Per rail, the key of every destination: a frame replayed on another
    /// rail than its own, or re-addressed to another node or group, fails
    /// its tag there, even where a node's rails share one MAC (VLAN
    /// interfaces of one NIC).
    keys: Vec<RailKeys>,
    /// Indexed by `node * rails + rail`: one set of windows per sender and
    /// rail, so that a frame waiting in one rail's ring while the sender
    /// sends many on another is not taken for a replay (one sender's
    /// counter runs over all its rails; per rail its frames arrive in
    /// order, but the rings are read in turn). Within a set, one window per
    /// session of the sender's counter: an earlier run's frame never
    /// touches the live session's window.
    windows: Vec<SenderWindows>,
    /// Frames whose tag failed, by the node number they claimed (the last
    /// entry: numbers beyond the node list).
    bad_tags: Vec<u64>,
}

impl Verifier {
    fn new(secret: &crate::JobSecret, nodes: &NodeList, rails: usize, job_key: u32) -> Verifier {
        let keys = (0..rails).map(|rail| RailKeys::new(secret, rail, nodes, job_key)).collect();
        Verifier { keys, windows: vec![SenderWindows::default(); nodes.len() * rails], bad_tags: vec![0; nodes.len() + 1] }
    }

    fn window(&mut self, from: NodeId, rail: usize) -> &mut SenderWindows {
        &mut self.windows[from * self.keys.len() + rail]
    }
}

/// What a received frame must satisfy to be delivered (the user-space half of demux).
struct Demux {
    me: NodeId,
    ethertype: u16,
    job_key: u32,
    port: Port,
    nodes: NodeList,
    /// Joined groups, sorted; group 0 always.
    groups: Vec<u8>,
    /// `None`: authentication off.
    verifier: Option<Verifier>,
    /// Frames signed where this endpoint does not sign, or unsigned where it
    /// does ([`DropReason::AuthMismatch`]), by the node number they claimed
    /// (the last entry: numbers beyond the node list): a node run with
    /// `MCD_AUTH=off` where the others sign, or the other way round.
    auth_mismatch: Vec<u64>,
}

/// A frame [`Demux::accept`] found deliverable: the message, and the
/// counter to record in its sender's replay window once it is delivered.
type Accepted = (Received, Option<FrameCounter>);

impl Demux {
    /// Checks a frame and says whether to deliver it. Authentication comes
    /// first: after the length, EtherType and version (which locate the
    /// trailer), an unverified frame is dropped before any of its other
    /// fields is looked at. The replay window is only checked here, not
    /// changed: [`record`](Self::record) does that when the frame is delivered.
    fn accept(&mut self, frame: &RxFrame<'_>, rail: usize, my_mac: MacAddr) -> Result<Accepted, DropReason> {
        if frame.wire_len > frame.data.len() {
            return Err(DropReason::Truncated);
        }
        // Parsing checks the lengths, after the EtherType and version
        // (which say how to read them).
        let view = Frame::new_unchecked(frame.data);
        let repr = FrameRepr::parse(&view, self.ethertype).map_err(|e| match e {
            WireError::WrongEtherType { .. } => DropReason::ForeignEtherType,
            WireError::BadVersion(_) => DropReason::BadVersion,
            WireError::Truncated { .. } | WireError::BadLength { .. } | WireError::NoTrailer { .. } => DropReason::Truncated,
        })?;
        if repr.authenticated != self.verifier.is_some() {
            // Counted by the node it claims, for a join timeout's message; nothing else is looked at.
            let claimed = (repr.src_node as usize).min(self.auth_mismatch.len() - 1);
            self.auth_mismatch[claimed] += 1;
            return Err(DropReason::AuthMismatch);
        }
        let counter = match &mut self.verifier {
            None => None,
            Some(v) => {
                // The key is the destination's (and the rail's): this
                // node's address, or one of the job's groups; a frame to
                // any other is not for this endpoint (the kernel filter
                // drops it too), whatever it holds.
                let keys = &v.keys[rail];
                let key = if repr.dst_mac == my_mac {
                    &keys.nodes[self.me]
                } else if let Some(g) = repr.dst_mac.as_mcd_group(self.job_key) {
                    &keys.groups[g.0 as usize]
                } else {
                    return Err(DropReason::NotForMe);
                };
                match key.verify(&view) {
                    Some(counter) => Some(counter),
                    None => {
                        let claimed = (repr.src_node as usize).min(v.bad_tags.len() - 1);
                        v.bad_tags[claimed] += 1;
                        return Err(DropReason::BadTag);
                    }
                }
            }
        };
        if repr.job_key != self.job_key {
            return Err(DropReason::WrongJob);
        }
        let group = if repr.dst_mac.is_multicast() {
            match repr.dst_mac.as_mcd_group(self.job_key) {
                Some(g) if self.groups.binary_search(&g.0).is_ok() => Some(g),
                _ => return Err(DropReason::NotForMe),
            }
        } else {
            let to_this_host = frame.packet_type == pkttype::HOST || frame.packet_type == pkttype::OUTGOING;
            if !to_this_host || repr.dst_mac != my_mac || repr.dst_port != self.port {
                return Err(DropReason::NotForMe);
            }
            None
        };
        let from = repr.src_node as NodeId;
        if from == self.me {
            return Err(DropReason::NotForMe); // our own frame, seen leaving this host
        }
        match self.nodes.get(from) {
            Some(n) if n.macs.get(rail) == Some(&repr.src_mac) && n.port == repr.src_port => {}
            _ => return Err(DropReason::UnknownSource),
        }
        if let (Some(v), Some(c)) = (&mut self.verifier, counter) {
            if !v.window(from, rail).check(c) {
                return Err(DropReason::Replayed);
            }
        }
        let session = counter.map_or(0, |c| c.session);
        Ok((Received { rail, from, kind: repr.kind, seq: repr.seq, len: repr.payload_len, group, session }, counter))
    }

    /// Records a delivered frame's counter in its sender's replay window of its rail.
    fn record(&mut self, msg: &Received, counter: Option<FrameCounter>) {
        if let (Some(v), Some(c)) = (&mut self.verifier, counter) {
            v.window(msg.from, msg.rail).record(c);
        }
    }

    fn filter_program(&self, mac: MacAddr, accept_outgoing: bool) -> Vec<filter::BpfInsn> {
        filter::build(&FilterSpec {
            ethertype: self.ethertype,
            job_key: self.job_key,
            mac,
            port: self.port,
            groups: &self.groups,
            accept_outgoing,
            kind: None,
        })
    }
}

/// One process's endpoint: a port on one NIC per rail, with mmap'd receive and
/// send rings. Receiving costs no system call while frames are waiting;
/// sending is one system call (the kick) per post.
pub struct Endpoint {
    /// Tells this endpoint's send tokens from others'.
    id: u64,
    rails: Vec<Rail>,
    fds: Vec<RawFd>,
    demux: Demux,
    me: NodeId,
    wait: WaitPolicy,
    phases: WaitPhases,
    /// The job's processes on this host as the configuration says (a hint).
    local_hint: usize,
    /// Where the host's endpoints lock their ports (counted for the load).
    port_dir: std::path::PathBuf,
    kernel_filter: bool,
    /// The rail `try_recv` looks at first (round robin, so no rail starves).
    rx_rail: usize,
    stats: Stats,
    /// The frames' counter (see [`crate::auth`]).
    counter: Counter,
    /// How long a waiting receive stays silent before announcing.
    announce_every: Option<Duration>,
    /// When the last announcement check ran, and the sends counted then.
    announced: Announced,
    /// The hellos the bootstrap dropped, included in [`stats`](Self::stats).
    bootstrap_drops: Option<std::sync::Arc<crate::stats::BootstrapDrops>>,
}

/// The last announcement check of a waiting endpoint.
#[derive(Clone, Copy, Debug)]
struct Announced {
    at: Instant,
    /// [`Stats::sent`] then: if it has not moved since, the endpoint was silent.
    sent: u64,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("node", &self.me)
            .field("port", &self.demux.port)
            .field("interfaces", &self.rails.iter().map(|r| r.interface.as_str()).collect::<Vec<_>>())
            .field("wait", &self.wait)
            .finish()
    }
}

impl Endpoint {
    /// Opens the endpoint: takes the port on every rail, sets up filter and
    /// rings, and joins the all-nodes group. Interfaces are looked up in the
    /// calling thread's network namespace.
    pub fn open(config: EndpointConfig) -> Result<Endpoint> {
        let EndpointConfig { interfaces, port, nodes, ethertype, job_key, wait, local_processes, auth, announce_every, bootstrap_drops, .. } =
            config.clone();
        let secret = match &auth {
            Auth::Unset => return Err(Error::NoSecret),
            Auth::Key(secret) => Some(secret),
            Auth::Off => None,
        };
        if interfaces.is_empty() || interfaces.len() > MAX_RAILS {
            return Err(Error::Config(format!("an endpoint drives 1 to {MAX_RAILS} rails, not {}", interfaces.len())));
        }
        if nodes.rails() < interfaces.len() {
            return Err(Error::Config(format!(
                "{} interfaces given but the node list has only {} MAC(s) on some line",
                interfaces.len(),
                nodes.rails()
            )));
        }
        let infos = interfaces.iter().map(|name| lookup_interface(name)).collect::<Result<Vec<_>>>()?;
        let me = nodes.find(infos[0].mac, port).ok_or_else(|| Error::NotInNodeList { mac: infos[0].mac, port, interface: interfaces[0].clone() })?;
        let verifier = secret.map(|secret| Verifier::new(secret, &nodes, infos.len(), job_key));
        let auth_mismatch = vec![0; nodes.len() + 1];
        let demux = Demux { me, ethertype, job_key, port, nodes, groups: vec![GroupId::ALL.0], verifier, auth_mismatch };
        let mut rails = Vec::with_capacity(interfaces.len());
        for (r, (interface, info)) in interfaces.into_iter().zip(infos).enumerate() {
            let listed = demux.nodes.get(me).expect("found above").macs[r];
            if listed != info.mac {
                return Err(Error::RailMismatch { interface, rail: r, node: me, actual: info.mac, listed });
            }
            if info.mtu <= MCD_HEADER_LEN + TRAILER_LEN {
                return Err(Error::Config(format!("{interface} has an MTU of {} bytes", info.mtu)));
            }
            let has_siblings = demux.nodes.iter().enumerate().any(|(i, n)| i != me && n.macs[r] == info.mac);
            rails.push(open_rail(&config, &demux, interface, info, has_siblings)?);
        }
        let fds = rails.iter().map(|r| r.socket.raw_fd()).collect();
        let mut endpoint = Endpoint {
            id: NEXT_ENDPOINT_ID.fetch_add(1, Ordering::Relaxed),
            rails,
            fds,
            demux,
            me,
            wait,
            phases: wait.phases(local_processes, crate::host::online_cpus()),
            local_hint: local_processes,
            port_dir: config.port_dir.clone(),
            kernel_filter: config.kernel_filter,
            rx_rail: 0,
            stats: Stats::default(),
            counter: Counter::new()?,
            announce_every,
            announced: Announced { at: Instant::now(), sent: 0 },
            bootstrap_drops,
        };
        endpoint.refresh_host_load();
        Ok(endpoint)
    }

    /// How many communicating processes share this host's cores: the most of
    /// the configured hint, the nodes of the node list on this NIC (ranks
    /// sharing a MAC), and the endpoints holding ports on the host. Call it
    /// again once the whole job is up (a barrier does, once every node has
    /// joined): processes that started later count then.
    pub fn local_processes(&self) -> usize {
        let mac = self.demux.nodes.get(self.me).map(|n| n.macs[0]);
        let on_this_nic = self.demux.nodes.iter().filter(|n| Some(n.macs[0]) == mac).count();
        self.local_hint.max(on_this_nic).max(crate::port::endpoints_on_host(&self.port_dir)).max(1)
    }

    /// Re-reads [`local_processes`](Self::local_processes) and adapts the
    /// wait policy's phases to it; returns the count.
    pub fn refresh_host_load(&mut self) -> usize {
        let local = self.local_processes();
        self.phases = self.wait.phases(local, crate::host::online_cpus());
        local
    }

    /// This endpoint's node number.
    pub fn node_id(&self) -> NodeId {
        self.me
    }

    /// Number of nodes in the job.
    pub fn node_count(&self) -> usize {
        self.demux.nodes.len()
    }

    /// The job's node list.
    pub fn nodes(&self) -> &NodeList {
        &self.demux.nodes
    }

    /// Number of rails this endpoint drives.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }

    /// The job key every frame carries.
    pub fn job_key(&self) -> u32 {
        self.demux.job_key
    }

    /// The port this endpoint holds.
    pub fn port(&self) -> Port {
        self.demux.port
    }

    /// The interface of rail `rail`.
    pub fn interface(&self, rail: usize) -> Option<&str> {
        self.rails.get(rail).map(|r| r.interface.as_str())
    }

    /// The largest payload one message carries on rail `rail`: the MTU minus
    /// the MCD header and, when authenticated, the trailer.
    pub fn max_payload(&self, rail: usize) -> Result<usize> {
        Ok(self.rail(rail)?.max_payload(self.trailer_len()))
    }

    /// Bytes of trailer each frame carries: [`TRAILER_LEN`] when authenticated, else 0.
    fn trailer_len(&self) -> usize {
        if self.demux.verifier.is_some() {
            TRAILER_LEN
        } else {
            0
        }
    }

    /// Whether this endpoint signs its frames and accepts only signed ones.
    pub fn authenticated(&self) -> bool {
        self.demux.verifier.is_some()
    }

    /// Changes [`EndpointConfig::announce_every`].
    pub fn set_announce_every(&mut self, every: Option<Duration>) {
        self.announce_every = every;
    }

    /// Frames whose tag did not verify, by the node number they claimed
    /// to come from (the sender may be anyone: a forger, or a node with
    /// another secret); 0 with authentication off. A node number beyond
    /// the node list reads the count of all such frames.
    pub fn bad_tags_from(&self, node: NodeId) -> u64 {
        self.demux.verifier.as_ref().map_or(0, |v| v.bad_tags[node.min(v.bad_tags.len() - 1)])
    }

    /// Frames dropped because they were signed where this endpoint does not
    /// sign, or unsigned where it does ([`DropReason::AuthMismatch`]), by
    /// the node number they claimed to come from (a node run with
    /// `MCD_AUTH=off` where this one signs, or the other way round). A node
    /// number beyond the node list reads the count of all such frames.
    pub fn auth_mismatch_from(&self, node: NodeId) -> u64 {
        let counts = &self.demux.auth_mismatch;
        counts[node.min(counts.len() - 1)]
    }

    /// The wait policy receives use.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait
    }

    /// How receives wait now: the policy resolved for this host's load.
    pub fn wait_phases(&self) -> WaitPhases {
        self.phases
    }

    /// Changes the wait policy, with a new hint of the processes on this host.
    pub fn set_wait_policy(&mut self, wait: WaitPolicy, local_processes: usize) {
        self.wait = wait;
        self.local_hint = local_processes;
        self.refresh_host_load();
    }

    fn rail(&self, rail: usize) -> Result<&Rail> {
        self.rails.get(rail).ok_or(Error::UnknownRail { rail, count: self.rails.len() })
    }

    /// Joins multicast group `group` on every rail.
    pub fn join(&mut self, group: GroupId) -> Result<()> {
        if let Err(at) = self.demux.groups.binary_search(&group.0) {
            self.demux.groups.insert(at, group.0);
            self.apply_groups(Some((group, true)))?;
        }
        Ok(())
    }

    /// Leaves multicast group `group` on every rail (the all-nodes group cannot be left).
    pub fn leave(&mut self, group: GroupId) -> Result<()> {
        if group == GroupId::ALL {
            return Err(Error::Config("every endpoint stays in the all-nodes group 0".into()));
        }
        if let Ok(at) = self.demux.groups.binary_search(&group.0) {
            self.demux.groups.remove(at);
            self.apply_groups(Some((group, false)))?;
        }
        Ok(())
    }

    /// The groups this endpoint is in, in order (always including group 0).
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.demux.groups.iter().map(|&g| GroupId(g))
    }

    fn apply_groups(&mut self, change: Option<(GroupId, bool)>) -> Result<()> {
        for rail in &self.rails {
            if let Some((group, join)) = change {
                let mac = MacAddr::mcd_group(self.demux.job_key, group);
                let res = if join { rail.socket.add_membership(rail.info.index, mac.0) } else { rail.socket.drop_membership(rail.info.index, mac.0) };
                res.map_err(|e| Error::os(format!("changing membership of group {} on {}", group.0, rail.interface), e))?;
            }
            if self.kernel_filter {
                let program = self.demux.filter_program(rail.info.mac, rail.has_siblings);
                rail.socket.attach_filter(&program).map_err(|e| Error::os(format!("updating the filter on {}", rail.interface), e))?;
            }
        }
        Ok(())
    }

    /// Posts a message for sending and returns at once: the payload is copied
    /// into the send ring (so `payload` is free again on return) and the kernel
    /// is kicked. Test or wait for the frame to leave with the token.
    ///
    /// Errors: [`Error::PayloadTooLarge`] (never truncated), [`Error::UnknownNode`],
    /// [`Error::UnknownRail`], [`Error::SendRingFull`].
    pub fn post(&mut self, rail: usize, to: Destination, kind: u8, seq: u32, payload: &[u8]) -> Result<SendToken> {
        let repr = self.frame_for(rail, to, kind, seq, payload)?;
        let r = &mut self.rails[rail];
        let slot = r.tx_next;
        wait_for_send_slot(r, rail, slot)?;
        let mut tx = r.rings.tx_claim(slot).ok_or(Error::SendRingFull { rail, waited_ms: 0 })?;
        let len = repr.frame_len();
        let buffer = &mut tx.buffer()[..len];
        let mut frame = Frame::new_unchecked(&mut *buffer);
        repr.emit(&mut frame);
        frame.payload_mut().copy_from_slice(payload);
        if let Some(v) = &self.demux.verifier {
            v.keys[rail].to(to).sign(buffer, self.counter.take());
        }
        tx.submit(len);
        r.tx_generation[slot] = r.tx_generation[slot].wrapping_add(1);
        r.tx_next = (slot + 1) % r.rings.tx_slots();
        let token = SendToken { endpoint: self.id, rail, slot, generation: r.tx_generation[slot] };
        self.stats.sent += 1;
        self.kick(rail)?;
        Ok(token)
    }

    /// Sends a message with one system call that returns once the kernel has
    /// taken the frame (so it has left when this returns). The lowest-latency
    /// send; [`post`](Self::post) is the asynchronous one.
    ///
    /// Errors as for [`post`](Self::post).
    pub fn send(&mut self, rail: usize, to: Destination, kind: u8, seq: u32, payload: &[u8]) -> Result<()> {
        let repr = self.frame_for(rail, to, kind, seq, payload)?;
        let r = &mut self.rails[rail];
        let len = repr.frame_len();
        let mut frame = Frame::new_unchecked(&mut r.tx_scratch[..len]);
        repr.emit(&mut frame);
        frame.payload_mut().copy_from_slice(payload);
        if let Some(v) = &self.demux.verifier {
            v.keys[rail].to(to).sign(&mut r.tx_scratch[..len], self.counter.take());
        }
        match r.sender.send(&r.tx_scratch[..len]) {
            Ok(_) => {}
            // Dropped on the egress path (a full queue or a dropping filter): lost, as on a wire.
            Err(e) if sys::dropped_on_egress(&e) => self.stats.send_refused += 1,
            Err(e) => return Err(Error::os(format!("sending on {}", r.interface), e)),
        }
        self.stats.sent += 1;
        Ok(())
    }

    /// Checks a send and builds its frame header.
    fn frame_for(&self, rail: usize, to: Destination, kind: u8, seq: u32, payload: &[u8]) -> Result<FrameRepr> {
        self.bootstrap_conflict()?;
        let r = self.rail(rail)?;
        let max = r.max_payload(self.trailer_len());
        if payload.len() > max {
            return Err(Error::PayloadTooLarge { len: payload.len(), max, rail });
        }
        let (dst_mac, dst_port) = match to {
            Destination::Node(n) => {
                let node = self.demux.nodes.get(n).ok_or(Error::UnknownNode { node: n, count: self.demux.nodes.len() })?;
                (node.macs[rail], node.port)
            }
            Destination::Group(g) => (MacAddr::mcd_group(self.demux.job_key, g), 0),
        };
        Ok(FrameRepr {
            dst_mac,
            src_mac: r.info.mac,
            ethertype: self.demux.ethertype,
            kind,
            dst_port,
            src_port: self.demux.port,
            src_node: self.me as u16,
            job_key: self.demux.job_key,
            seq,
            payload_len: payload.len(),
            authenticated: self.demux.verifier.is_some(),
        })
    }

    fn kick(&mut self, rail: usize) -> Result<()> {
        let r = &self.rails[rail];
        match r.socket.kick_send_ring() {
            Ok(()) => Ok(()),
            // The egress path refused the frame for now: the kernel left it
            // marked in the ring, and the next kick sends it again.
            Err(e) if sys::refused_for_now(&e) => {
                self.stats.send_refused += 1;
                Ok(())
            }
            Err(e) => Err(Error::os(format!("sending on {}", r.interface), e)),
        }
    }

    /// Whether the frame of `token` has left (the paper's "sent" flag).
    /// A token of another endpoint is [`Error::ForeignToken`].
    pub fn is_sent(&self, token: SendToken) -> Result<bool> {
        if token.endpoint != self.id {
            return Err(Error::ForeignToken);
        }
        let r = self.rail(token.rail)?;
        if r.tx_generation[token.slot] != token.generation {
            return Ok(true); // the slot has been reused since, so this frame left
        }
        match r.rings.tx_status(token.slot) {
            TxStatus::Available => Ok(true),
            TxStatus::WrongFormat => Err(Error::FrameRejected { rail: token.rail }),
            TxStatus::SendRequest | TxStatus::Sending => Ok(false),
        }
    }

    /// Waits until the frame of `token` has left, kicking the kernel again if
    /// an earlier kick was refused.
    pub fn wait_sent(&mut self, token: SendToken) -> Result<()> {
        let start = Instant::now();
        while !self.is_sent(token)? {
            if start.elapsed() > SEND_RING_TIMEOUT {
                return Err(Error::SendRingFull { rail: token.rail, waited_ms: SEND_RING_TIMEOUT.as_millis() as u64 });
            }
            if self.rails[token.rail].rings.tx_status(token.slot) == TxStatus::SendRequest {
                self.kick(token.rail)?;
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Delivers the next waiting message, if any, copying its payload into
    /// `buf`; frames that fail any check are counted in [`Stats::dropped`] and
    /// skipped. Never makes a system call.
    ///
    /// If `buf` is shorter than the payload, returns [`Error::BufferTooSmall`]
    /// and leaves the message queued.
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<Option<Received>> {
        let Endpoint { rails, demux, stats, rx_rail, .. } = self;
        let count = rails.len();
        for i in 0..count {
            let r = (*rx_rail + i) % count;
            let rail = &mut rails[r];
            loop {
                let slot = rail.rx_next;
                let Some(frame) = rail.rings.rx_frame(slot) else { break };
                let losing = frame.losing;
                let verdict = demux.accept(&frame, r, rail.info.mac);
                if let Ok((msg, counter)) = &verdict {
                    if buf.len() < msg.len {
                        return Err(Error::BufferTooSmall { buf: buf.len(), len: msg.len });
                    }
                    buf[..msg.len].copy_from_slice(&frame.data[crate::wire::offset::PAYLOAD..][..msg.len]);
                    demux.record(msg, *counter);
                }
                rail.rings.rx_release(slot);
                rail.rx_next = (slot + 1) % rail.rings.rx_slots();
                if rail.losing_counted > 0 {
                    rail.losing_counted -= 1;
                } else {
                    rail.losing |= losing;
                }
                match verdict {
                    Ok((msg, _)) => {
                        stats.received += 1;
                        *rx_rail = (r + 1) % count;
                        return Ok(Some(msg));
                    }
                    Err(reason) => *stats.dropped.get_mut(reason) += 1,
                }
            }
        }
        Ok(None)
    }

    /// Waits for the next message under the endpoint's wait policy, for at most
    /// `timeout` (`None`: no limit). `Ok(None)` when the time ran out.
    pub fn recv(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> Result<Option<Received>> {
        self.recv_until(buf, timeout, false)
    }

    /// As [`recv`](Self::recv), but returns `Ok(None)` early too once a
    /// frame read says that a receive ring dropped frames for want of space
    /// since [`ring_drops`](Self::ring_drops) last counted them: messages
    /// for this node may have been lost, and a caller that recovers losses
    /// (a barrier engine) need not wait for its timers to ask again. Call
    /// [`ring_drops`](Self::ring_drops) then: until it counts them, this
    /// returns at once.
    pub fn recv_noting_drops(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> Result<Option<Received>> {
        self.recv_until(buf, timeout, true)
    }

    /// Whether a frame read since the drop counts were last taken said
    /// that a ring dropped frames (no system call).
    pub fn ring_dropped_since(&self) -> bool {
        self.rails.iter().any(|r| r.losing)
    }

    /// Frames the kernel dropped for want of receive-ring space on this
    /// endpoint's rails, in all ([`Stats::ring_dropped`]), as far as known:
    /// the kernel's counts (`PACKET_STATISTICS`, one system call per rail)
    /// are taken only for rails where a frame read since said that frames
    /// were dropped ([`ring_dropped_since`](Self::ring_dropped_since)), so
    /// a caller may ask after every receive: without a drop it costs no
    /// system call. (Frames the kernel dropped after the last frame read
    /// are counted once a later frame tells of them, or by
    /// [`stats`](Self::stats).)
    pub fn ring_drops(&mut self) -> Result<u64> {
        self.take_ring_drops(false)?;
        Ok(self.stats.ring_dropped)
    }

    /// Adds the kernel's ring-drop counts to [`Stats::ring_dropped`]: every
    /// rail's if `all`, else only those a frame said had dropped some. The
    /// kernel resets its count on reading; the frames waiting in the ring
    /// then were written before, and their marks are not taken for new drops.
    fn take_ring_drops(&mut self, all: bool) -> Result<()> {
        let Endpoint { rails, stats, .. } = self;
        for rail in rails.iter_mut().filter(|r| all || r.losing) {
            // Counted before the read: a frame written between the two is
            // taken for a new drop (one read more), never the other way.
            rail.losing_counted = rail.rings.rx_ready_from(rail.rx_next);
            let (_, drops) = rail
                .socket
                .take_statistics()
                .map_err(|e| Error::Io { what: format!("reading PACKET_STATISTICS on {}", rail.interface), source: e })?;
            stats.ring_dropped += drops;
            rail.losing = false;
        }
        Ok(())
    }

    fn recv_until(&mut self, buf: &mut [u8], timeout: Option<Duration>, noting_drops: bool) -> Result<Option<Received>> {
        self.bootstrap_conflict()?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let yield_until = self.phases.spin.saturating_add(self.phases.yield_for);
        loop {
            if let Some(msg) = self.try_recv(buf)? {
                return Ok(Some(msg));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) || (noting_drops && self.ring_dropped_since()) {
                return Ok(None);
            }
            self.announce_if_silent(now)?;
            let waited = now - start;
            if waited < self.phases.spin {
                // Poll the ring several times per clock read: an arrival is
                // seen within a few nanoseconds, not a clock read's worth.
                for _ in 0..SPIN_POLLS_PER_CLOCK_READ {
                    std::hint::spin_loop();
                    if let Some(msg) = self.try_recv(buf)? {
                        return Ok(Some(msg));
                    }
                }
            } else if waited < yield_until {
                std::thread::yield_now();
            } else {
                let remaining = deadline.map(|d| d.saturating_duration_since(now));
                // Wake up to announce, if silent that long.
                let remaining = match (remaining, self.announce_every) {
                    (Some(r), Some(every)) => Some(r.min(every)),
                    (None, every) => every,
                    (r, None) => r,
                };
                sys::poll_readable(&self.fds, remaining).map_err(|e| Error::Io { what: "waiting for frames".into(), source: e })?;
            }
        }
    }

    /// Names the session of the frame last delivered from `node` on `rail`
    /// live: the caller (a barrier engine) took its message as this run's
    /// (of its barrier instance). Frames of that session are then never
    /// taken twice, however many earlier runs' sessions are replayed here
    /// (review rev29, finding 1; [`SenderWindows::pin_last`]). One
    /// comparison when it already is; nothing without authentication.
    pub fn confirm_live(&mut self, node: NodeId, rail: usize) {
        if let Some(v) = &mut self.demux.verifier {
            if node < self.demux.nodes.len() && rail < v.keys.len() {
                v.window(node, rail).pin_last();
            }
        }
    }

    /// As [`confirm_live`](Self::confirm_live), for a message delivered
    /// earlier ([`Received::session`]): for a caller that queues messages
    /// before their barrier takes them (a shared endpoint's routes).
    pub fn confirm_live_session(&mut self, node: NodeId, rail: usize, session: u64) {
        if let Some(v) = &mut self.demux.verifier {
            if node < self.demux.nodes.len() && rail < v.keys.len() {
                v.window(node, rail).pin(session);
            }
        }
    }

    /// [`Error::Bootstrap`] if the bootstrap found, after it ended, a second
    /// live process claiming this node's rank (another job with this job
    /// key and secret: review rev29, finding 2); one atomic load.
    fn bootstrap_conflict(&self) -> Result<()> {
        match self.bootstrap_drops.as_ref().and_then(|d| d.conflict()) {
            Some(text) => Err(Error::Bootstrap(format!("after this rank's bootstrap ended: {text}"))),
            None => Ok(()),
        }
    }

    /// Announces this endpoint's MAC ([`announce`](Self::announce)) if it
    /// has sent nothing since the last check, at least
    /// [`EndpointConfig::announce_every`] ago; returns whether it did.
    /// [`recv`](Self::recv) calls this while it waits (one clock comparison
    /// when nothing is due); code that waits for this endpoint's frames
    /// elsewhere (on a [`Readiness`]) should call it when it wakes, and wake
    /// at least every [`announce_every`](Self::announce_every).
    pub fn announce_if_silent(&mut self, now: Instant) -> Result<bool> {
        let Some(every) = self.announce_every else { return Ok(false) };
        if now.saturating_duration_since(self.announced.at) < every {
            return Ok(false);
        }
        let silent = self.stats.sent == self.announced.sent;
        if silent {
            self.announce()?;
        }
        self.announced = Announced { at: now, sent: self.stats.sent };
        Ok(silent)
    }

    /// How long a waiting endpoint stays silent before announcing (`None`: never).
    pub fn announce_every(&self) -> Option<Duration> {
        self.announce_every
    }

    /// Sends, on every rail, a frame from this endpoint to itself (kind
    /// [`crate::kind::ANNOUNCE`], no payload, signed like every frame). A
    /// learning switch takes the source MAC's port from it, so a port stolen
    /// by someone sending with this node's MAC comes back; and the switch
    /// forwards it nowhere (its destination is the port it came from). No
    /// endpoint delivers it: the kernel filters drop it (it is addressed to
    /// this endpoint's own port, from that port). A waiting receive sends
    /// one when it has sent nothing for [`EndpointConfig::announce_every`].
    pub fn announce(&mut self) -> Result<()> {
        for rail in 0..self.rails.len() {
            let mut repr = self.frame_for(rail, Destination::Node(self.me), crate::kind::ANNOUNCE, 0, &[])?;
            repr.dst_port = self.demux.port;
            let r = &mut self.rails[rail];
            let len = repr.frame_len();
            repr.emit(&mut Frame::new_unchecked(&mut r.tx_scratch[..len]));
            if let Some(v) = &self.demux.verifier {
                v.keys[rail].to(Destination::Node(self.me)).sign(&mut r.tx_scratch[..len], self.counter.take());
            }
            match r.sender.send(&r.tx_scratch[..len]) {
                Ok(_) => {}
                Err(e) if sys::dropped_on_egress(&e) => self.stats.send_refused += 1,
                Err(e) => return Err(Error::os(format!("announcing on {}", r.interface), e)),
            }
            self.stats.announced += 1;
        }
        Ok(())
    }

    /// A handle on which another thread can sleep until frames arrive for
    /// this endpoint, while this thread goes on using it (a progress agent
    /// does). It holds its own descriptors of the endpoint's sockets.
    pub fn readiness(&self) -> Result<Readiness> {
        let io = |e| Error::Io { what: "making a readiness handle".into(), source: e };
        let fds = self.fds.iter().map(|&fd| sys::dup(fd)).collect::<std::io::Result<Vec<_>>>().map_err(io)?;
        let wake = sys::EventFd::new().map_err(io)?;
        Ok(Readiness { fds, wake })
    }

    /// The counters, with the kernel's ring-drop count brought up to date.
    pub fn stats(&mut self) -> Result<Stats> {
        self.take_ring_drops(true)?;
        if let Some(v) = &self.demux.verifier {
            self.stats.sessions_forgotten = v.windows.iter().map(SenderWindows::forgotten).sum();
        }
        let mut stats = self.stats;
        if let Some(drops) = &self.bootstrap_drops {
            drops.add_to(&mut stats.dropped);
            stats.stale_hellos = drops.stale_hellos.load(std::sync::atomic::Ordering::Relaxed);
        }
        Ok(stats)
    }
}

/// Lets another thread sleep until an [`Endpoint`]'s rings may hold frames
/// ([`Endpoint::readiness`]).
#[derive(Debug)]
pub struct Readiness {
    fds: Vec<OwnedFd>,
    wake: sys::EventFd,
}

impl Readiness {
    /// Returns when a frame may be waiting on any rail, when
    /// [`wake`](Self::wake) was called since the last return, or after
    /// `timeout` (`None`: no limit). Sleeps in the kernel; spurious returns
    /// are possible (another thread may have taken the frame).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        let mut fds = [0; sys::POLL_MAX];
        let count = self.fds.len() + 1;
        for (slot, fd) in fds.iter_mut().zip(self.fds.iter().map(|f| f.as_raw_fd()).chain([self.wake.raw_fd()])) {
            *slot = fd;
        }
        sys::poll_readable(&fds[..count], timeout).map_err(|e| Error::Io { what: "waiting for frames".into(), source: e })?;
        self.wake.clear();
        Ok(())
    }

    /// Makes the current or the next [`wait`](Self::wait) return.
    pub fn wake(&self) -> Result<()> {
        self.wake.signal().map_err(|e| Error::Io { what: "waking a readiness handle".into(), source: e })
    }
}

fn wait_for_send_slot(r: &mut Rail, rail: usize, slot: usize) -> Result<()> {
    let mut start = None;
    loop {
        match r.rings.tx_status(slot) {
            TxStatus::Available => return Ok(()),
            TxStatus::WrongFormat => return Err(Error::FrameRejected { rail }),
            TxStatus::SendRequest => {
                // Refused earlier and still marked: push it out again.
                let _ = r.socket.kick_send_ring();
            }
            TxStatus::Sending => {}
        }
        let since = *start.get_or_insert_with(Instant::now);
        if since.elapsed() > SEND_RING_TIMEOUT {
            return Err(Error::SendRingFull { rail, waited_ms: SEND_RING_TIMEOUT.as_millis() as u64 });
        }
        std::thread::yield_now();
    }
}

fn open_rail(config: &EndpointConfig, demux: &Demux, interface: String, info: Interface, has_siblings: bool) -> Result<Rail> {
    // The socket first: without CAP_NET_RAW, that is the error to report.
    let socket = PacketSocket::open().map_err(|e| Error::os("opening an AF_PACKET socket", e))?;
    let lock = PortLock::acquire(&config.port_dir, &interface, config.port)?;
    let on = |what: &str| format!("{what} on {interface}");
    socket.set_tpacket_v2().map_err(|e| Error::os(on("selecting TPACKET_V2"), e))?;
    socket.set_skip_malformed_sends().map_err(|e| Error::os(on("setting PACKET_LOSS"), e))?;
    socket.raise_receive_buffer(config.receive_buffer).map_err(|e| Error::os(on("raising the receive buffer"), e))?;
    if config.kernel_filter {
        socket.attach_filter(&demux.filter_program(info.mac, has_siblings)).map_err(|e| Error::os(on("attaching the BPF filter"), e))?;
    }
    let max_frame = info.mtu + ETHERNET_HEADER_LEN + 4;
    let rings = socket
        .map_rings(RingGeometry::for_frames(max_frame, config.rx_slots), RingGeometry::for_frames(max_frame, config.tx_slots))
        .map_err(|e| Error::os(on("mapping the packet rings"), e))?;
    socket
        .add_membership(info.index, MacAddr::mcd_group(config.job_key, GroupId::ALL).0)
        .map_err(|e| Error::os(on("joining the all-nodes group"), e))?;
    // Siblings on this NIC are heard only as this host's outgoing frames, which
    // reach ETH_P_ALL sockets alone; otherwise bind to the job's EtherType.
    let protocol = if has_siblings { sys::ALL_PROTOCOLS } else { config.ethertype };
    socket.bind(info.index, protocol).map_err(|e| Error::os(on("binding the packet socket"), e))?;
    let sender = PacketSocket::open().map_err(|e| Error::os("opening an AF_PACKET socket", e))?;
    sender.bind(info.index, 0).map_err(|e| Error::os(on("binding the send socket"), e))?;
    let tx_slots = rings.tx_slots();
    Ok(Rail {
        interface,
        info,
        socket,
        rings,
        rx_next: 0,
        losing: false,
        losing_counted: 0,
        tx_next: 0,
        tx_generation: vec![0; tx_slots],
        has_siblings,
        sender,
        tx_scratch: vec![0u8; max_frame],
        _lock: lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::tests::{patched, UNICAST_FRAME};
    use crate::node::NodeAddr;
    use crate::wire::{offset, DEFAULT_ETHERTYPE};

    const ME: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

    /// Node 0 (this endpoint: 02:..:01 port 3, in groups 0 and 7) and node 1
    /// (02:..:09 port 1), as `UNICAST_FRAME` expects.
    fn demux() -> Demux {
        let nodes = NodeList::new(vec![NodeAddr { macs: vec![ME], port: 3 }, NodeAddr { macs: vec![MacAddr([2, 0, 0, 0, 0, 9])], port: 1 }]).unwrap();
        Demux {
            me: 0,
            ethertype: DEFAULT_ETHERTYPE,
            job_key: 0x1234_5678,
            port: 3,
            nodes,
            groups: vec![0, 7],
            verifier: None,
            auth_mismatch: vec![0; 3],
        }
    }

    #[test]
    fn crafted_frames_are_delivered_or_dropped_for_their_reason() {
        use DropReason::*;
        let mut d = demux();
        let group = |g: u8| patched(offset::DST_MAC, &[0x03, 0x12, 0x34, 0x56, 0x78, g]);
        let unicast = UNICAST_FRAME.to_vec();
        // (what, bytes, packet type, verdict: the group delivered to, or why dropped)
        let cases = [
            ("unicast to this port", unicast.clone(), pkttype::HOST, Ok(None)),
            ("a sibling's frame on this NIC", unicast.clone(), pkttype::OUTGOING, Ok(None)),
            ("joined group", group(7), pkttype::MULTICAST, Ok(Some(7))),
            ("group not joined", group(8), pkttype::MULTICAST, Err(NotForMe)),
            ("another job's group address", patched(offset::DST_MAC, &[0x03, 0x99, 0x34, 0x56, 0x78, 7]), pkttype::MULTICAST, Err(NotForMe)),
            ("flooded to another host", unicast.clone(), pkttype::OTHERHOST, Err(NotForMe)),
            ("another port", patched(offset::DST_PORT, &[4]), pkttype::HOST, Err(NotForMe)),
            ("another MAC", patched(offset::DST_MAC + 5, &[2]), pkttype::HOST, Err(NotForMe)),
            ("claims to be this node", patched(offset::SRC_NODE, &[0, 0]), pkttype::HOST, Err(NotForMe)),
            ("node beyond the list", patched(offset::SRC_NODE, &[0, 7]), pkttype::HOST, Err(UnknownSource)),
            ("node 1 from another MAC", patched(offset::SRC_MAC + 5, &[8]), pkttype::HOST, Err(UnknownSource)),
            ("node 1 from another port", patched(offset::SRC_PORT, &[2]), pkttype::HOST, Err(UnknownSource)),
            ("another job key", patched(offset::JOB_KEY, &[0x13]), pkttype::HOST, Err(WrongJob)),
            ("another EtherType", patched(offset::ETHERTYPE, &[0x08, 0x00]), pkttype::HOST, Err(ForeignEtherType)),
            ("the old version 1", patched(offset::VERSION, &[1]), pkttype::HOST, Err(BadVersion)),
            ("version 2 (clock counters, one key on every rail)", patched(offset::VERSION, &[2]), pkttype::HOST, Err(BadVersion)),
            ("version 3 (32-bit sessions, the job key hashed)", patched(offset::VERSION, &[3]), pkttype::HOST, Err(BadVersion)),
            ("payload length past the frame", patched(offset::PAYLOAD_LEN, &[0, 5]), pkttype::HOST, Err(Truncated)),
        ];
        for (what, data, packet_type, verdict) in cases {
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type, losing: false };
            let got = d.accept(&frame, 0, ME).map(|(msg, _)| msg);
            let expected = verdict.map(|g| Received { rail: 0, from: 1, kind: 5, seq: 9, len: 4, group: g.map(GroupId), session: 0 });
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn frames_cut_short_or_on_an_unlisted_rail_are_dropped() {
        let mut d = demux();
        let whole = RxFrame { data: &UNICAST_FRAME, wire_len: UNICAST_FRAME.len(), packet_type: pkttype::HOST, losing: false };
        assert!(d.accept(&whole, 0, ME).is_ok());
        let cut_by_slot = RxFrame { wire_len: UNICAST_FRAME.len() + 1, ..whole };
        assert_eq!(d.accept(&cut_by_slot, 0, ME), Err(DropReason::Truncated));
        for len in 0..UNICAST_FRAME.len() {
            let short = RxFrame { data: &UNICAST_FRAME[..len], wire_len: len, packet_type: pkttype::HOST, losing: false };
            assert_eq!(d.accept(&short, 0, ME), Err(DropReason::Truncated), "{len} bytes");
        }
        // Node 1 has no MAC on rail 1.
        assert_eq!(d.accept(&whole, 1, ME), Err(DropReason::UnknownSource));
    }

    /// The session of the test frames' sender.
    const SESSION: u64 = 0x5e55_1011_0000_0001;

    /// Frame `number` of [`SESSION`].
    fn n(number: u32) -> FrameCounter {
        FrameCounter { session: SESSION, number }
    }

    /// `bytes` (an unauthenticated frame) signed with `secret`, as frame `number` of [`SESSION`].
    fn signed(bytes: &[u8], secret: u8, number: u32) -> Vec<u8> {
        signed_on(bytes, secret, 0, n(number))
    }

    /// `bytes` signed with the key of secret `[secret; 16]` on rail `rail`
    /// for its job key and destination MAC.
    fn signed_on(bytes: &[u8], secret: u8, rail: usize, counter: FrameCounter) -> Vec<u8> {
        let mut f = bytes.to_vec();
        f[offset::VERSION] |= crate::wire::AUTH_FLAG;
        f.resize(f.len() + TRAILER_LEN, 0);
        let dst = MacAddr(f[offset::DST_MAC..offset::DST_MAC + 6].try_into().unwrap());
        let job_key = Frame::new_unchecked(&f[..]).job_key();
        FrameKey::for_destination(&crate::JobSecret::from_bytes([secret; 16]), job_key, rail, dst).sign(&mut f, counter);
        f
    }

    fn authenticated_demux() -> Demux {
        authenticated_demux_on(1)
    }

    /// An authenticating demux of 2 nodes on `rails` rails.
    fn authenticated_demux_on(rails: usize) -> Demux {
        let mut d = demux();
        let secret = crate::JobSecret::from_bytes([1; 16]);
        if rails > 1 {
            d.nodes = NodeList::new(
                (0..2)
                    .map(|n| NodeAddr {
                        macs: d.nodes.get(n).unwrap().macs.iter().cycle().take(rails).copied().collect(),
                        port: d.nodes.get(n).unwrap().port,
                    })
                    .collect(),
            )
            .unwrap();
        }
        d.verifier = Some(Verifier::new(&secret, &d.nodes, rails, d.job_key));
        d
    }

    /// `d` with node list `nodes`, and its keys for them.
    fn with_nodes(mut d: Demux, nodes: NodeList) -> Demux {
        let rails = nodes.rails();
        d.nodes = nodes;
        d.verifier = Some(Verifier::new(&crate::JobSecret::from_bytes([1; 16]), &d.nodes, rails, d.job_key));
        d
    }

    #[test]
    fn authentication_comes_before_every_other_check() {
        use DropReason::*;
        let mut d = authenticated_demux();
        let verdict = |d: &mut Demux, data: &[u8]| {
            let frame = RxFrame { data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            d.accept(&frame, 0, ME).map(|(msg, counter)| (msg.from, counter))
        };
        let good = signed(&UNICAST_FRAME, 1, 1000);
        assert_eq!(verdict(&mut d, &good), Ok((1, Some(n(1000)))));
        assert_eq!(verdict(&mut d, &UNICAST_FRAME), Err(AuthMismatch), "no trailer");
        assert_eq!(verdict(&mut d, &signed(&UNICAST_FRAME, 2, 1000)), Err(BadTag), "another secret");
        // Fields that would be dropped for other reasons are not even looked
        // at when the tag fails: a forgery counts as a forgery. The job key
        // is in the key: a frame signed for another job under the same
        // secret fails its tag here.
        let other_job = signed(&patched(offset::JOB_KEY, &[0x13]), 1, 1001);
        assert_eq!(verdict(&mut d, &other_job), Err(BadTag), "signed for another job");
        let mut forged_node = good.clone();
        forged_node[offset::SRC_NODE + 1] = 9;
        assert_eq!(verdict(&mut d, &forged_node), Err(BadTag));
        assert_eq!(d.verifier.as_ref().unwrap().bad_tags, vec![0, 2, 1], "per claimed source; beyond the list last");
        // Signed frames are then checked as before. The job key is not
        // hashed (it is in the key): like the source MAC, it has one
        // acceptable value, and a signed frame with it rewritten is another job's.
        let mut rewritten_job = good.clone();
        rewritten_job[offset::JOB_KEY] ^= 1;
        assert_eq!(verdict(&mut d, &rewritten_job), Err(WrongJob));
        assert_eq!(verdict(&mut d, &signed(&patched(offset::SRC_PORT, &[2]), 1, 1002)), Err(UnknownSource));
        // At an endpoint with authentication off, a signed frame is a mismatch.
        assert_eq!(
            demux().accept(&RxFrame { data: &good, wire_len: good.len(), packet_type: pkttype::HOST, losing: false }, 0, ME).map(|_| ()),
            Err(AuthMismatch)
        );
    }

    #[test]
    fn every_single_flipped_bit_is_dropped() {
        // The tag hashes the frame from its kind on; the destination MAC
        // picks the key, and the source MAC, EtherType and version have one
        // acceptable value each: no bit of a signed frame can change and the
        // frame still be delivered.
        let good = signed(&UNICAST_FRAME, 1, 4242);
        let verdict = |data: &[u8]| {
            let frame = RxFrame { data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            authenticated_demux().accept(&frame, 0, ME).map(|_| ())
        };
        assert_eq!(verdict(&good), Ok(()));
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                assert!(verdict(&bad).is_err(), "bit {bit} of byte {byte} flipped is delivered");
            }
        }
    }

    #[test]
    fn a_delivered_frame_is_never_delivered_again() {
        let mut d = authenticated_demux();
        let deliver = |d: &mut Demux, number: u32| {
            let data = signed(&UNICAST_FRAME, 1, number);
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            let verdict = d.accept(&frame, 0, ME);
            if let Ok((msg, counter)) = verdict {
                d.record(&msg, counter);
            }
            verdict.map(|_| ())
        };
        assert_eq!(deliver(&mut d, 5000), Ok(()));
        // Checked but not delivered (a buffer too small): still new.
        let data = signed(&UNICAST_FRAME, 1, 5001);
        let frame = RxFrame { data: &data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
        assert!(d.accept(&frame, 0, ME).is_ok());
        assert!(d.accept(&frame, 0, ME).is_ok(), "accept alone records nothing");
        assert_eq!(deliver(&mut d, 5001), Ok(()));
        assert_eq!(deliver(&mut d, 5001), Err(DropReason::Replayed));
        assert_eq!(deliver(&mut d, 5000), Err(DropReason::Replayed));
        assert_eq!(deliver(&mut d, 4999), Ok(()), "older, within the window, never seen");
        assert_eq!(deliver(&mut d, 5001 + crate::auth::REPLAY_WINDOW as u32 + 10), Ok(()));
        assert_eq!(deliver(&mut d, 4998), Err(DropReason::Replayed), "too old now");
    }

    #[test]
    fn a_padded_or_extended_signed_frame_is_delivered_once_as_signed() {
        // Review of issue 27: a 54-byte signed frame is padded to 60 bytes by
        // the sender's NIC; an attacker may append bytes after the trailer.
        // The tag covers the claimed payload only, so padding verifies, the
        // appended bytes are never delivered, and an extended copy of a
        // delivered frame is a replay.
        let mut d = authenticated_demux();
        let deliver = |d: &mut Demux, data: &[u8]| {
            let frame = RxFrame { data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            let verdict = d.accept(&frame, 0, ME);
            if let Ok((msg, counter)) = verdict {
                d.record(&msg, counter);
            }
            verdict.map(|(msg, _)| msg.len)
        };
        let signed_frame = signed(&UNICAST_FRAME, 1, 7000);
        assert_eq!(signed_frame.len(), 54);
        let mut padded = signed_frame.clone();
        padded.resize(60, 0);
        assert_eq!(deliver(&mut d, &padded), Ok(4), "padded to the Ethernet minimum: delivered, 4 payload bytes");
        let mut extended = signed_frame.clone();
        extended.extend_from_slice(&[0xee; 100]);
        assert_eq!(deliver(&mut d, &extended), Err(DropReason::Replayed), "the same frame with bytes appended");
        let mut fresh = signed(&UNICAST_FRAME, 1, 7001);
        fresh.extend_from_slice(&[0xee; 100]);
        assert_eq!(deliver(&mut d, &fresh), Ok(4), "appended bytes are not payload");
        // Claiming the appended bytes as payload breaks the tag.
        let mut longer = signed(&UNICAST_FRAME, 1, 7002);
        longer.extend_from_slice(&[0xee; 100]);
        longer[offset::PAYLOAD_LEN + 1] = 20;
        assert_eq!(deliver(&mut d, &longer), Err(DropReason::BadTag));
    }

    #[test]
    fn a_frame_of_one_rail_replayed_on_another_is_dropped_and_changes_nothing() {
        // Review of issue 27: one counter per endpoint over all its rails,
        // one window per sender and rail. A frame of node 1's rail 0 sent
        // again on rail 1 (the attacker on rail 1's segment): a unicast one
        // is addressed to rail 0's MAC, not for this rail; a multicast one
        // was signed with rail 0's key of its group, so its tag fails here.
        // Neither is recorded, so the original, read after it on rail 0, is
        // delivered.
        let nodes = NodeList::new(vec![
            NodeAddr { macs: vec![ME, MacAddr([2, 0, 0, 0, 1, 1])], port: 3 },
            NodeAddr { macs: vec![MacAddr([2, 0, 0, 0, 0, 9]), MacAddr([2, 0, 0, 0, 1, 9])], port: 1 },
        ])
        .unwrap();
        let mut d = with_nodes(authenticated_demux_on(2), nodes);
        let data = signed(&UNICAST_FRAME, 1, 9000);
        let frame = RxFrame { data: &data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
        let rail1_mac = MacAddr([2, 0, 0, 0, 1, 1]);
        assert_eq!(d.accept(&frame, 1, rail1_mac).map(|_| ()), Err(DropReason::NotForMe), "to rail 0's MAC, not this rail's");
        let mut multicast = UNICAST_FRAME.to_vec();
        multicast[..6].copy_from_slice(&[0x03, 0x12, 0x34, 0x56, 0x78, 0]);
        let group = signed(&multicast, 1, 9001);
        let group_frame = RxFrame { data: &group, wire_len: group.len(), packet_type: pkttype::MULTICAST, losing: false };
        assert_eq!(d.accept(&group_frame, 1, rail1_mac).map(|_| ()), Err(DropReason::BadTag), "rail 0's multicast on rail 1");
        let v = d.verifier.as_mut().unwrap();
        assert_eq!((v.window(1, 0).highest(0), v.window(1, 1).highest(0)), (0, 0), "nothing recorded");
        assert_eq!(v.bad_tags, vec![0, 1, 0], "counted, by the node it claims");
        let (msg, counter) = d.accept(&group_frame, 0, ME).expect("the original on rail 0");
        d.record(&msg, counter);
        assert_eq!((msg.rail, counter), (0, Some(n(9001))));
        assert_eq!(d.accept(&group_frame, 0, ME).map(|_| ()), Err(DropReason::Replayed));
    }

    #[test]
    fn a_frame_read_late_from_one_rail_is_not_a_replay() {
        // Finding 3 of the review of issue 27 (one window per sender over
        // all rails dropped A as a replay): one window per sender and rail.
        // Node 1 has a MAC on each of two rails. It sent frame A to this node
        // on rail 0 (counter c), then 600 frames elsewhere (other nodes,
        // probes, announcements: one counter for every frame and rail), then
        // frame B here on rail 1 (counter c + 601). This node, computing,
        // reads its rings later; round robin, rail 1 first. A is legitimate
        // and never delivered before.
        let nodes = NodeList::new(vec![
            NodeAddr { macs: vec![ME, MacAddr([2, 0, 0, 0, 1, 1])], port: 3 },
            NodeAddr { macs: vec![MacAddr([2, 0, 0, 0, 0, 9]), MacAddr([2, 0, 0, 0, 1, 9])], port: 1 },
        ])
        .unwrap();
        let mut d = with_nodes(authenticated_demux_on(2), nodes);
        let mut deliver = |rail: usize, number: u32| {
            let mut bytes = UNICAST_FRAME.to_vec();
            if rail == 1 {
                bytes[offset::DST_MAC + 4] = 1;
                bytes[offset::SRC_MAC + 4] = 1;
            }
            let data = signed_on(&bytes, 1, rail, n(number));
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            let my_mac = d.nodes.get(0).unwrap().macs[rail];
            let verdict = d.accept(&frame, rail, my_mac);
            if let Ok((msg, counter)) = verdict {
                d.record(&msg, counter);
            }
            verdict.map(|(msg, _)| msg.rail)
        };
        let c = 1_000_000;
        assert_eq!(deliver(1, c + 601), Ok(1), "B, read first");
        assert_eq!(deliver(0, c), Ok(0), "A, read second, never delivered before");
        // Each rail's window still takes each frame once.
        assert_eq!(deliver(0, c), Err(DropReason::Replayed), "A again");
        assert_eq!(deliver(1, c + 601), Err(DropReason::Replayed), "B again");
        assert_eq!(deliver(1, c + 600), Ok(1), "within rail 1's window, never seen");
        assert_eq!(deliver(0, c + 700 + crate::auth::REPLAY_WINDOW as u32), Ok(0));
        assert_eq!(deliver(0, c + 1), Err(DropReason::Replayed), "now too old on rail 0");
    }

    #[test]
    fn frames_of_the_other_authentication_mode_are_counted_by_the_node_they_claim() {
        // Finding 4 of the review of issue 27: a join timeout names a node
        // run with MCD_AUTH=off where the others sign (or the other way round).
        let mut on = authenticated_demux();
        let unsigned = RxFrame { data: &UNICAST_FRAME, wire_len: UNICAST_FRAME.len(), packet_type: pkttype::HOST, losing: false };
        assert_eq!(on.accept(&unsigned, 0, ME).map(|_| ()), Err(DropReason::AuthMismatch));
        let beyond = patched(offset::SRC_NODE, &[0, 7]);
        assert_eq!(
            on.accept(&RxFrame { data: &beyond, wire_len: beyond.len(), packet_type: pkttype::HOST, losing: false }, 0, ME).map(|_| ()),
            Err(DropReason::AuthMismatch)
        );
        assert_eq!(on.auth_mismatch, vec![0, 1, 1]);
        let mut off = demux();
        let good = signed(&UNICAST_FRAME, 1, 1000);
        assert_eq!(
            off.accept(&RxFrame { data: &good, wire_len: good.len(), packet_type: pkttype::HOST, losing: false }, 0, ME).map(|_| ()),
            Err(DropReason::AuthMismatch)
        );
        assert_eq!(off.auth_mismatch, vec![0, 1, 0]);
    }

    #[test]
    fn the_kernel_filter_drops_nothing_user_space_would_deliver() {
        let mut d = demux();
        let program = d.filter_program(ME, true);
        for (data, packet_type) in [
            (UNICAST_FRAME.to_vec(), pkttype::HOST),
            (UNICAST_FRAME.to_vec(), pkttype::OUTGOING),
            (patched(offset::DST_MAC, &[0x03, 0x12, 0x34, 0x56, 0x78, 7]), pkttype::MULTICAST),
            (patched(offset::DST_MAC, &[0x03, 0x12, 0x34, 0x56, 0x78, 0]), pkttype::MULTICAST),
        ] {
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type, losing: false };
            assert!(d.accept(&frame, 0, ME).is_ok());
            assert_ne!(filter::interpret(&program, &data, packet_type), 0, "{data:02x?} type {packet_type}");
        }
    }

    #[test]
    fn rev27_a_frame_replayed_on_another_rail_is_dropped_even_when_the_rails_share_a_mac() {
        // Review of issue 27 (rev27). The README: "a frame replayed on
        // another rail than its own carries its own rail's MACs, which the
        // tag covers, and is dropped there as an unknown source". Not when
        // a node's rails have one MAC (eth0.10 and eth0.20, say: NodeList
        // takes `MAC MAC port`). Node 1's multicast frame, read on rail 0,
        // is sent again by an attacker on rail 1's segment.
        let shared = MacAddr([2, 0, 0, 0, 0, 9]);
        let nodes = NodeList::new(vec![NodeAddr { macs: vec![ME, ME], port: 3 }, NodeAddr { macs: vec![shared, shared], port: 1 }]).unwrap();
        let mut d = with_nodes(authenticated_demux_on(2), nodes);
        let mut multicast = UNICAST_FRAME.to_vec();
        multicast[..6].copy_from_slice(&[0x03, 0x12, 0x34, 0x56, 0x78, 0]);
        let group = signed(&multicast, 1, 9001);
        let frame = RxFrame { data: &group, wire_len: group.len(), packet_type: pkttype::MULTICAST, losing: false };
        let (msg, counter) = d.accept(&frame, 0, ME).expect("the original on rail 0");
        d.record(&msg, counter);
        // Finding 4 (rev27): it used to be delivered a second time here.
        // Each rail has its own key: rail 0's frame fails its tag on rail 1.
        assert_eq!(d.accept(&frame, 1, ME).map(|_| ()), Err(DropReason::BadTag), "the same frame again, on rail 1");
        assert_eq!(d.verifier.as_ref().unwrap().bad_tags[1], 1, "counted");
        // Node 1's own frames of rail 1 are delivered there.
        let rail1 = signed_on(&multicast, 1, 1, n(9002));
        let frame = RxFrame { data: &rail1, wire_len: rail1.len(), packet_type: pkttype::MULTICAST, losing: false };
        assert_eq!(d.accept(&frame, 1, ME).map(|(msg, c)| (msg.rail, c)), Ok((1, Some(n(9002)))));
    }

    #[test]
    fn rev27_a_frame_of_an_earlier_run_from_a_clock_ahead_does_not_silence_the_live_sender() {
        // Review of issue 27 (rev27), finding 2. A frame recorded in an
        // earlier run with the same key verifies and is new to a new
        // endpoint, once: it is delivered (the engine drops it as another
        // instance's). Its counter was larger than any of the live sender's
        // (counters were the sender's clock, and node 1 of the earlier run
        // ran on a host whose clock was ahead): it lifted the one window of
        // node 1 above the live counters, and every live frame was dropped
        // as a replay. Counters are now a session (random per endpoint) and
        // a number in it, and sessions are never compared: here the earlier
        // session is numerically far above the live one.
        let recorded = FrameCounter { session: 0xFFFF_0000_FFFF_0000, number: 5_000_000 };
        let live = |number| FrameCounter { session: 0x0000_1234_0000_1234, number };
        let mut d = authenticated_demux();
        let deliver = |d: &mut Demux, counter: FrameCounter| {
            let data = signed_on(&UNICAST_FRAME, 1, 0, counter);
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            let verdict = d.accept(&frame, 0, ME);
            if let Ok((msg, counter)) = &verdict {
                d.record(msg, *counter);
            }
            verdict.map(|_| ())
        };
        assert_eq!(deliver(&mut d, recorded), Ok(()), "the replayed frame (the engine drops it above)");
        for i in 1..=10 {
            assert_eq!(deliver(&mut d, live(i)), Ok(()), "node 1's live frame {i}");
        }
        assert_eq!(deliver(&mut d, recorded), Err(DropReason::Replayed), "the earlier run's frame, once only");
        assert_eq!(deliver(&mut d, live(3)), Err(DropReason::Replayed), "the live ones too");
        assert_eq!(deliver(&mut d, live(11)), Ok(()));
    }

    #[test]
    fn rev27_a_nodes_own_signed_frame_sent_back_to_it_is_dropped_and_recorded_nowhere() {
        // Review of issue 27 (rev27), what held: reflections. Node 0's own
        // multicast (valid tag, its own MAC, port and number) sent back to
        // it by an attacker is not for it, and leaves every window as it was.
        let mut own = UNICAST_FRAME.to_vec();
        own[offset::DST_MAC..offset::DST_MAC + 6].copy_from_slice(&[0x03, 0x12, 0x34, 0x56, 0x78, 0]);
        own[offset::SRC_MAC..offset::SRC_MAC + 6].copy_from_slice(&ME.0);
        own[offset::SRC_PORT] = 3;
        own[offset::SRC_NODE..offset::SRC_NODE + 2].copy_from_slice(&0u16.to_be_bytes());
        let mut d = authenticated_demux();
        for packet_type in [pkttype::MULTICAST, pkttype::OUTGOING, pkttype::HOST] {
            let data = signed(&own, 1, 7000);
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type, losing: false };
            assert_eq!(d.accept(&frame, 0, ME).map(|_| ()), Err(DropReason::NotForMe));
        }
        let v = d.verifier.as_mut().unwrap();
        assert_eq!((v.window(0, 0).highest(0), v.window(1, 0).highest(0)), (0, 0));
    }

    #[test]
    fn rev29_a_frame_delivered_in_this_run_is_never_delivered_again_whatever_earlier_runs_come_between() {
        // Review of issue 27 (rev29). Node 1's live endpoint (session L)
        // sent this node 100 frames, then died. An attacker holds frames of
        // earlier runs of node 1 under the same key file (a key file serves
        // many runs): one run M that sent this node more frames than L did,
        // and four short runs S1..S4. It replays M's frames (each new once):
        // M has taken more frames than L, so M takes the slot of the most
        // heard session, and L becomes one of the 4 "earlier" slots kept in
        // least-recently-used order. One frame of each of S1..S4 then
        // forgets L's window, and L's frames, delivered before in this
        // run, are new once more: the engine counts any message of its
        // instance within one barrier of its own as the sender being alive
        // (`Peer::heard`), so replaying node 1's last frames of this run
        // every 100 ms (after S1..S4 each time: five sessions cycling
        // through four slots all miss) keeps a dead node 1 alive for ever.
        // The README says such frames reach the engine "as it gets the
        // duplicate copies and answers it sends by design (an earlier
        // barrier's is stale)": a dead node's last barrier's are not.
        let (live, long_run) = (0x1111_0000u64, 0x2222_0000u64);
        let mut d = authenticated_demux();
        let deliver = |d: &mut Demux, (session, number): (u64, u64)| {
            let data = signed_on(&UNICAST_FRAME, 1, 0, FrameCounter { session, number: number as u32 });
            let frame = RxFrame { data: &data, wire_len: data.len(), packet_type: pkttype::HOST, losing: false };
            let verdict = d.accept(&frame, 0, ME);
            if let Ok((msg, counter)) = verdict {
                d.record(&msg, counter);
            }
            verdict.map(|_| ())
        };
        for i in 1..=100 {
            assert_eq!(deliver(&mut d, (live, i)), Ok(()), "node 1's live frame {i}");
            // The engine takes its message as this run's (`Endpoint::confirm_live`).
            d.verifier.as_mut().unwrap().window(1, 0).pin_last();
        }
        // The earlier runs' frames: each new to this endpoint once (the
        // engine drops them as another instance's).
        for i in 1..=101 {
            assert_eq!(deliver(&mut d, (long_run, i)), Ok(()), "the long earlier run's frame {i}");
        }
        let mut again = 0;
        for round in 1..=10u64 {
            for s in 1..=4u64 {
                assert_eq!(deliver(&mut d, (0x3333_0000 + s, round)), Ok(()), "short earlier run {s}'s frame {round}");
            }
            if deliver(&mut d, (live, 100)).is_ok() {
                again += 1;
            }
        }
        assert_eq!(again, 0, "node 1's last live frame, delivered before in this run, was delivered {again} more times of 10 replays");
    }
}
