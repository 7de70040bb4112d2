//! The LogP simulator that runs the real protocol: one
//! [`crate::core::Core`] per node (a core of its own: no CPU sharing),
//! driven in virtual time over the network of a [`Setup`], so predictions
//! include what loss and the protocol's own recovery (its real timers,
//! NACKs, answers and copies) cost.
//!
//! Costs, as the plan simulator ([`super::predict`]) charges them: a node's
//! CPU is one resource, taken for `o_s` per send and `o_r` per receive, in
//! turn; a NIC sends at most one frame per `g` (+ `G`·bytes); each frame
//! holds its sender's link for a frame time ([`super::Link::frame_us`]),
//! reaches the switch's output port towards each receiver `L` − one frame
//! after it left (a multicast is one frame on the sender's link, copied to
//! every port), waits for that port, and is delivered no faster than one
//! per `g_r` per NIC. On a [`Topology::Hub`] (and a flooding bridge) frames
//! take one shared medium per rail in turn (no collisions are modelled
//! here: the hub's CSMA/CD backoff is the plan simulator's). Host costs
//! beyond o_s and o_r ([`super::Host`]'s interrupts, wake-ups, shared
//! cores) are not charged; the engine's own time per message is 0 here and
//! in the plan simulator alike.
//!
//! A [`Flood`] (issue 27's denial of service) sends one node forged frames
//! whose tag fails: each reaches the node's switch port and NIC as any
//! frame does and then takes the node's CPU for the kernel's receive into
//! the ring and the tag check that drops it, in turn with the node's own
//! work, and never reaches its core. With a finite receive ring, a frame
//! that finds every slot taken is dropped by the kernel, a genuine one
//! too, and the core is told ([`Core::frames_lost`]) when it next takes a
//! frame out, as the endpoint tells it.
//!
//! Loss is applied per delivered message (per receiver of a multicast), at
//! the receiver's ingress, after the frame crossed the network: independent
//! with a given probability, or Gilbert–Elliott in time ([`Loss::Bursty`],
//! the private `model::bursts`): each receiving link (a node's port on a rail: its
//! switch output queue and cable) is in a good state (no loss) or a bad one
//! (every frame lost) for exponentially distributed intervals of virtual
//! time, the bad one lasting `mean_burst` frame times of the link on
//! average. Per receiving link, not per sending one or per pair: a switch's
//! output buffer that overflows, or a cable's interference, takes every
//! frame towards that node while it lasts, from any sender, and nothing
//! towards the others (a multicast is lost at some receivers only).
//!
//! The application loop: every node starts at 0 and runs `barriers`
//! barriers back to back ([`crate::core::Call::Wait`]) with `work_us` of
//! computation between them (the paper's loop: 30 µs). A barrier's time is
//! the largest over nodes of (leave − enter), as the plan simulator's
//! [`super::steady_state`] counts it.
//!
//! Why not the deterministic simulator's `sim::World` (feature
//! `test-support`): it is built for
//! checking (drawn workloads, episodes, clocks, joins, an n × n link state),
//! and delivers each message after an independent delay with no resource a
//! message waits for (a node's CPU, a NIC's gap, a switch port). Its
//! generator ([`crate::sim::rng::Rng`]) is reused here.

use std::time::{Duration, Instant};

use super::bursts::TimedBursts;
use super::link::Topology;
use super::sim::Queue;
use super::Setup;
use crate::core::{self, Call, Core, Event, To};
use crate::plan::Algorithm;
use crate::sim::rng::Rng;
use crate::transport::Msg;
use crate::{BarrierConfig, BarrierStats};

const PS_PER_US: f64 = 1e6;

fn ps(us: f64) -> u64 {
    (us.max(0.0) * PS_PER_US).round() as u64
}

/// How messages are lost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    /// Each delivered message is lost with this probability.
    Independent(f64),
    /// Gilbert–Elliott in time per receiving link (the private `model::bursts`): the
    /// bad state loses every frame and lasts `mean_burst` frame times on
    /// average; the link is bad `average` of the time, so `average` of all
    /// frames are lost in the long run.
    Bursty {
        /// The long-run fraction of frames lost (of the time in bursts).
        average: f64,
        /// A burst's mean length, in frame times of the link at the
        /// setup's frame size ([`super::Link::frame_us`]; without a link,
        /// the receive gap `g_r`, else 1 ns): "4" is a burst that would
        /// take 4 back-to-back frames.
        mean_burst: f64,
    },
}

impl Loss {
    /// No loss.
    pub const NONE: Loss = Loss::Independent(0.0);

    /// Parses a loss in percent, as the loss examples take it: `1` is 1%
    /// independent, `b5` bursty at 5% on average in bursts of 4 frame
    /// times (issue 29's), `b5:40` in bursts of 40.
    pub fn parse(s: &str) -> Result<Loss, String> {
        let pct = |x: &str| x.parse::<f64>().map(|p| p / 100.0).map_err(|_| format!("`{s}`: not a loss in percent"));
        match s.strip_prefix('b') {
            Some(b) => {
                let (rate, burst) = b.split_once(':').unwrap_or((b, "4"));
                let mean_burst = burst.parse().map_err(|_| format!("`{s}`: not a burst length in frame times"))?;
                Ok(Loss::Bursty { average: pct(rate)?, mean_burst })
            }
            None => Ok(Loss::Independent(pct(s)?)),
        }
    }

    /// The long-run fraction lost.
    pub fn average(&self) -> f64 {
        match *self {
            Loss::Independent(p) => p,
            Loss::Bursty { average, .. } => average,
        }
    }
}

/// Forged frames arriving at one node, whose tags fail (issue 27's flood;
/// see the module docs). A node's CPU takes `kernel_us` + `check_us` for
/// every forged frame its receive ring takes (the kernel's receive, then
/// the endpoint's read and the tag check that fails), in arrival order
/// with the node's own sends, receives and timers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flood {
    /// The node flooded.
    pub node: u32,
    /// Forged frames a second.
    pub per_second: f64,
    /// Arrivals a Poisson process (exponential gaps, drawn from the
    /// scenario's seed) rather than evenly spaced.
    pub poisson: bool,
    /// The node's CPU time per forged frame for the kernel's receive (up
    /// to the ring, its socket filter included), µs.
    pub kernel_us: f64,
    /// The node's CPU time per forged frame taken out of the ring: the
    /// slot's read and the tag check that fails, µs.
    pub check_us: f64,
    /// The node's receive ring, in frames (`None`: never full). A frame
    /// arriving while this many are in it, not yet read, is dropped,
    /// forged or genuine, and costs no CPU: the node is then busy for
    /// `slots` frames' time, and a real host's NIC drops what its kernel
    /// cannot take in its own ring, in hardware (the kernel's work for a
    /// frame it takes and then finds no slot for is not charged: an
    /// optimistic simplification, which matters only when the flood
    /// needs more than the node's whole CPU).
    pub ring_slots: Option<u32>,
    /// Whether a ring drop tells the core ([`Core::frames_lost`]) as the
    /// endpoint does (off: only its retry timer recovers a lost frame).
    pub ring_loss_retry: bool,
}

impl Flood {
    /// `per_second` forged frames at `node`, evenly spaced, each costing
    /// `kernel_us` + `check_us` of its CPU, with no ring limit.
    pub fn new(node: u32, per_second: f64, kernel_us: f64, check_us: f64) -> Flood {
        Flood { node, per_second, poisson: false, kernel_us, check_us, ring_slots: None, ring_loss_retry: true }
    }
}

/// What a [`Flood`] did, at its node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FloodCounts {
    /// Forged frames that reached the node's NIC.
    pub forged: u64,
    /// Of those, read from the ring and dropped for their tag.
    pub bad_tags: u64,
    /// Forged frames the full ring dropped.
    pub forged_ring_drops: u64,
    /// Genuine frames (the barrier's) the full ring dropped.
    pub genuine_ring_drops: u64,
}

/// One run of the protocol simulator.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The number of nodes.
    pub nodes: usize,
    /// The network and the hosts.
    pub setup: Setup,
    /// How messages are lost.
    pub loss: Loss,
    /// Forged frames at one node (`None`: none).
    pub flood: Option<Flood>,
    /// A node whose own time in each barrier [`Outcome::node_us`] records
    /// (`None`: none), e.g. the flooded one.
    pub watch: Option<u32>,
    /// Barriers each node runs.
    pub barriers: u32,
    /// The first barriers left out of the statistics.
    pub warmup: u32,
    /// Computation between two barriers, µs.
    pub work_us: f64,
    /// The seed (loss).
    pub seed: u64,
    /// The barrier configuration's timeouts (`None`: the defaults,
    /// [`BarrierConfig::new`]).
    pub timeouts: Option<(Duration, Duration)>,
    /// Each node is a host's leader (the hierarchical barrier): µs of the
    /// host's phase in shared memory before its core enters (the gather)
    /// and after its core leaves (the release); a barrier is timed from
    /// the host's ranks' entry to their release. (0, 0): flat.
    pub host_phases_us: (f64, f64),
    /// Record every frame sent, delivered and lost, every timer and every
    /// barrier's entry and exit ([`Outcome::trace`]): for finding where
    /// the time goes (memory grows with the run: keep it short).
    pub trace: bool,
}

impl Scenario {
    /// `barriers` barriers of `algorithm` among `nodes` on `setup`, lossless,
    /// back to back (no work between), 10% of them warm-up.
    pub fn new(algorithm: Algorithm, nodes: usize, setup: Setup, barriers: u32) -> Scenario {
        Scenario {
            algorithm,
            nodes,
            setup,
            loss: Loss::NONE,
            flood: None,
            watch: None,
            barriers,
            warmup: barriers / 10,
            work_us: 0.0,
            seed: 1,
            timeouts: None,
            host_phases_us: (0.0, 0.0),
            trace: false,
        }
    }

    /// The same with `loss`.
    pub fn loss(self, loss: Loss) -> Scenario {
        Scenario { loss, ..self }
    }

    /// The same with `flood`.
    pub fn flood(self, flood: Flood) -> Scenario {
        Scenario { flood: Some(flood), ..self }
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Each measured barrier's time (the largest leave − enter over nodes), µs, in order.
    pub times_us: Vec<f64>,
    /// The mean over nodes and measured barriers of leave − enter, µs.
    pub mean_cost_us: f64,
    /// The counters, summed over nodes.
    pub stats: BarrierStats,
    /// Messages that reached a host (a multicast once per receiver).
    pub deliveries: u64,
    /// Of those, lost.
    pub lost: u64,
    /// The watched node's own time in each measured barrier (leave −
    /// enter), µs, in order (empty without [`Scenario::watch`]).
    pub node_us: Vec<f64>,
    /// What the flood did (zeros without one).
    pub flood: FloodCounts,
    /// Events handled.
    pub events: u64,
    /// Virtual time at the end, µs.
    pub end_us: f64,
    /// Whether every node completed every barrier (else the run stopped at its horizon).
    pub completed: bool,
    /// The first error a node reported, if any (the run stopped there).
    pub failed: Option<String>,
    /// What happened, in time order per node (empty unless
    /// [`Scenario::trace`]).
    pub trace: Vec<Traced>,
}

/// One traced happening of a run ([`Scenario::trace`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traced {
    /// When, µs of virtual time (a send: when its sender's CPU finished
    /// it; a delivery: when its receiver's CPU took it in).
    pub t_us: f64,
    /// The node it happened at.
    pub node: u32,
    /// What.
    pub what: Happening,
}

/// What a [`Traced`] records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Happening {
    /// The node sent `msg` to `to` (`None`: every other node).
    Sent {
        /// The receiver.
        to: Option<u32>,
        /// The message.
        msg: Msg,
    },
    /// `msg` from `from` reached the node's core.
    Delivered {
        /// The sender.
        from: u32,
        /// The message.
        msg: Msg,
    },
    /// `msg` from `from` was lost at the node's ingress (on the network,
    /// or dropped by a flooded node's full receive ring).
    Lost {
        /// The sender.
        from: u32,
        /// The message.
        msg: Msg,
    },
    /// The node's timer fired.
    Timer,
    /// The node's application entered its barrier `k` (counted from 0).
    Entered(u32),
    /// The node left its barrier `k`.
    Left(u32),
}

impl Outcome {
    /// The mean barrier time, µs.
    pub fn mean(&self) -> f64 {
        self.times_us.iter().sum::<f64>() / self.times_us.len().max(1) as f64
    }

    /// The `q` quantile (0..=1) of the barrier times, µs
    /// ([`crate::summary::quantile`]; 0 for none).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.times_us.is_empty() {
            return 0.0;
        }
        crate::summary::quantile(&mut self.times_us.clone(), q)
    }

    /// Recoveries: NACKs sent (but probes of late peers), answers and
    /// copies, summed over nodes ([`BarrierStats::recoveries`]).
    pub fn recoveries(&self) -> u64 {
        self.stats.recoveries()
    }
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A frame reaches the switch's output port towards `to`.
    Port { to: u32, from: u32, rail: u16, msg: Msg },
    /// A frame is in `to`'s memory.
    Host { to: u32, from: u32, rail: u16, msg: Msg },
    /// The hub on `rail` may carry its next frame.
    Hub { rail: u16 },
    /// `node`'s core's timer, as scheduled at generation `gen`.
    Timer { node: u32, gen: u32 },
    /// `node`'s application starts its next barrier.
    App { node: u32 },
    /// The next forged frame reaches the flooded node's switch port.
    ForgedPort,
    /// A forged frame is in the flooded node's memory.
    ForgedHost,
}

struct HubFrame {
    from: u32,
    to: Option<u32>,
    rail: u16,
    msg: Msg,
    ready: u64,
}

struct Node {
    core: Core,
    cpu_free: u64,
    /// The timer event in the queue: its time and generation.
    timer: Option<u64>,
    timer_gen: u32,
    /// Barriers completed, and when the current one was entered.
    done: u32,
    entered: u64,
}

/// The simulator's state (see the module docs).
struct Net {
    s: Scenario,
    base: Instant,
    q: Queue<Ev>,
    nodes: Vec<Node>,
    rails: usize,
    tx_gap_free: Vec<u64>,
    link_free: Vec<u64>,
    port_free: Vec<u64>,
    rx_free: Vec<u64>,
    hub_busy: Vec<u64>,
    hub: Vec<std::collections::VecDeque<HubFrame>>,
    rng: Rng,
    /// Bursty loss: each receiving link's state, per (node, rail).
    bursts: Vec<TimedBursts>,
    o_s: u64,
    o_r: u64,
    gap: u64,
    g_r: u64,
    ft: u64,
    l_fixed: u64,
    work: u64,
    /// The host phases (hierarchical), ps.
    gather: u64,
    release: u64,
    /// Per barrier, the largest leave − enter so far, ps; and the sum over nodes.
    cost_max: Vec<u64>,
    cost_sum: u64,
    deliveries: u64,
    lost: u64,
    /// The flood (see [`Flood`]): its gap between arrivals (mean, ps), its
    /// costs (ps), the generator of its arrivals, the frames in the
    /// flooded node's ring (when each will have been read), whether a drop
    /// is yet to be told to the core, and its counts.
    flood_gap: f64,
    flood_kernel: u64,
    flood_check: u64,
    flood_rng: Rng,
    ring: std::collections::VecDeque<u64>,
    losing: bool,
    flood_counts: FloodCounts,
    /// The watched node's times, µs.
    watched: Vec<f64>,
    /// Nodes that completed every barrier.
    finished: usize,
    /// The first error a node reported (the run stops).
    failed: Option<String>,
    trace: Vec<Traced>,
}

impl Net {
    fn note(&mut self, t: u64, node: usize, what: Happening) {
        if self.s.trace {
            self.trace.push(Traced { t_us: t as f64 / PS_PER_US, node: node as u32, what });
        }
    }

    fn instant(&self, t: u64) -> Instant {
        self.base + Duration::from_nanos(t / 1000)
    }

    fn ps_of(&self, i: Instant) -> u64 {
        (i.saturating_duration_since(self.base).as_nanos() as u64).saturating_mul(1000)
    }

    /// Sends everything node `v`'s core has to send, from its CPU's time
    /// on; collects its events; schedules its timer.
    fn pump(&mut self, v: usize) {
        loop {
            let node = &mut self.nodes[v];
            let Some(t) = node.core.poll_transmit() else { break };
            let (rail, to, msg) = (t.rail, t.to, t.msg);
            let nic = v * self.rails + rail;
            let start = node.cpu_free.max(self.tx_gap_free[nic]);
            let done = start + self.o_s;
            node.cpu_free = done;
            self.tx_gap_free[nic] = start + self.gap;
            let to = match to {
                To::Node(n) => Some(n as u32),
                To::All => None,
            };
            self.note(done, v, Happening::Sent { to, msg });
            if self.s.setup.topology != Topology::Switch {
                self.hub[rail].push_back(HubFrame { from: v as u32, to, rail: rail as u16, msg, ready: done });
                let at = done.max(self.hub_busy[rail]);
                self.q.push(at, Ev::Hub { rail: rail as u16 });
                continue;
            }
            let dep = done.max(self.link_free[nic]);
            self.link_free[nic] = dep + self.ft;
            let at = dep + self.l_fixed;
            match to {
                Some(n) => self.q.push(at, Ev::Port { to: n, from: v as u32, rail: rail as u16, msg }),
                None => {
                    for n in (0..self.s.nodes).filter(|&n| n != v) {
                        self.q.push(at, Ev::Port { to: n as u32, from: v as u32, rail: rail as u16, msg });
                    }
                }
            }
        }
        let now = self.nodes[v].cpu_free;
        while let Some(e) = self.nodes[v].core.poll_event() {
            match e {
                Event::Done(Ok(())) => {
                    let now = now + self.release;
                    let node = &mut self.nodes[v];
                    node.cpu_free = now;
                    let k = node.done;
                    node.done += 1;
                    self.note(now, v, Happening::Left(k));
                    let node = &mut self.nodes[v];
                    if k >= self.s.warmup {
                        let c = now - node.entered;
                        let i = (k - self.s.warmup) as usize;
                        self.cost_max[i] = self.cost_max[i].max(c);
                        self.cost_sum += c;
                        if self.s.watch == Some(v as u32) {
                            self.watched.push(c as f64 / PS_PER_US);
                        }
                    }
                    if node.done == self.s.barriers {
                        self.finished += 1;
                    } else {
                        self.q.push(now + self.work, Ev::App { node: v as u32 });
                    }
                }
                Event::Done(Err(e)) => {
                    let k = self.nodes[v].done;
                    self.failed.get_or_insert_with(|| format!("node {v}: barrier {k} failed: {e}"));
                }
                Event::Joined { .. } | Event::JoinFailed(_) => {}
            }
        }
        let due = self.nodes[v].core.poll_timeout().map(|i| self.ps_of(i));
        let node = &mut self.nodes[v];
        if let Some(due) = due {
            // A timer already queued for no later than `due` will find the
            // new deadline when it fires.
            if node.timer.is_none_or(|t| t > due) {
                node.timer = Some(due);
                node.timer_gen = node.timer_gen.wrapping_add(1);
                self.q.push(due, Ev::Timer { node: v as u32, gen: node.timer_gen });
            }
        }
    }

    /// Whether a message reaching `to` on `rail` at `t` is lost.
    fn lost(&mut self, t: u64, to: usize, rail: usize) -> bool {
        match self.s.loss {
            Loss::Independent(p) => self.rng.chance(p),
            Loss::Bursty { .. } => self.bursts[to * self.rails + rail].bad_at(t),
        }
    }

    fn deliver(&mut self, t: u64, to: usize, from: usize, rail: usize, msg: Msg) {
        self.deliveries += 1;
        if self.lost(t, to, rail) {
            self.lost += 1;
            self.note(t, to, Happening::Lost { from: from as u32, msg });
            return;
        }
        let flooded = self.s.flood.is_some_and(|f| f.node as usize == to);
        if flooded && !self.ring_takes(t) {
            self.flood_counts.genuine_ring_drops += 1;
            self.losing = true;
            self.note(t, to, Happening::Lost { from: from as u32, msg });
            return;
        }
        let read = t.max(self.nodes[to].cpu_free) + self.o_r;
        self.note(read, to, Happening::Delivered { from: from as u32, msg });
        let now = self.instant(read);
        let node = &mut self.nodes[to];
        node.cpu_free = read;
        node.core.handle(now, from, rail, msg, &[]);
        if flooded {
            self.ring.push_back(read);
            self.tell_drops(to, read);
        }
        self.pump(to);
    }

    /// Whether the flooded node's ring has a free slot at `t` (frames
    /// read by then have left it); a frame it has none for is dropped.
    fn ring_takes(&mut self, t: u64) -> bool {
        while self.ring.front().is_some_and(|&r| r <= t) {
            self.ring.pop_front();
        }
        self.s.flood.and_then(|f| f.ring_slots).is_none_or(|slots| self.ring.len() < slots as usize)
    }

    /// The flooded node `v` read a frame at `read`: if the ring dropped
    /// frames since it last read one, its core is told, as the endpoint
    /// tells it ([`Core::frames_lost`]).
    fn tell_drops(&mut self, v: usize, read: u64) {
        if std::mem::take(&mut self.losing) && self.s.flood.is_some_and(|f| f.ring_loss_retry) {
            let now = self.instant(read);
            self.nodes[v].core.frames_lost(now);
        }
    }

    /// A forged frame is in the flooded node's memory at `t`: the kernel's
    /// receive, and if the ring takes it the tag check that drops it.
    fn forged(&mut self, t: u64) {
        let v = self.s.flood.expect("a flood").node as usize;
        self.flood_counts.forged += 1;
        if !self.ring_takes(t) {
            self.flood_counts.forged_ring_drops += 1;
            self.losing = true;
            return;
        }
        self.flood_counts.bad_tags += 1;
        let read = t.max(self.nodes[v].cpu_free) + self.flood_kernel + self.flood_check;
        self.nodes[v].cpu_free = read;
        self.ring.push_back(read);
        if self.losing {
            self.tell_drops(v, read);
            self.pump(v);
        }
    }

    /// When a frame reaching the switch at `t` towards `to` on `rail` is in
    /// `to`'s memory: its output port's queue, then the NIC's receive gap.
    fn through_port(&mut self, t: u64, to: usize, rail: usize) -> u64 {
        let i = to * self.rails + rail;
        let out = t.max(self.port_free[i]);
        self.port_free[i] = out + self.ft;
        let nic = (out + self.ft).max(self.rx_free[i]);
        self.rx_free[i] = nic + self.g_r;
        nic
    }

    /// The gap to the flood's next frame, ps.
    fn flood_gap(&mut self) -> u64 {
        let poisson = self.s.flood.is_some_and(|f| f.poisson);
        let gap = if poisson { self.flood_rng.exp(self.flood_gap) } else { self.flood_gap };
        (gap.round() as u64).max(1)
    }

    fn run(mut self) -> Outcome {
        let n = self.s.nodes;
        for v in 0..n {
            let at = self.gather;
            self.nodes[v].cpu_free = at;
            let now = self.instant(at);
            self.note(0, v, Happening::Entered(0));
            self.nodes[v].core.start(now, Call::Wait { deadline: None });
            self.pump(v);
        }
        if self.s.flood.is_some() {
            let first = self.flood_gap();
            self.q.push(first, Ev::ForgedPort);
        }
        // Far beyond any recovery: a run that has not ended by then is stuck.
        let horizon = ps(600e6);
        let mut events = 0u64;
        let mut end = 0;
        let mut same = 0u64;
        while let Some((t, ev)) = self.q.pop() {
            if t > horizon || self.finished == n || self.failed.is_some() {
                break;
            }
            same = if t == end { same + 1 } else { 0 };
            if same > 50_000_000 {
                self.failed = Some(format!("time stands still at {:.3} µs (a spin)", t as f64 / PS_PER_US));
                break;
            }
            events += 1;
            end = t;
            match ev {
                Ev::Port { to, from, rail, msg } => {
                    let nic = self.through_port(t, to as usize, rail as usize);
                    self.q.push(nic, Ev::Host { to, from, rail, msg });
                }
                Ev::ForgedPort => {
                    let v = self.s.flood.expect("a flood").node as usize;
                    let nic = if self.s.setup.topology == Topology::Switch {
                        self.through_port(t, v, 0)
                    } else {
                        // (On a hub the attacker's frames would take the
                        // medium too; only the NIC's gap is charged.)
                        let nic = t.max(self.rx_free[v * self.rails]);
                        self.rx_free[v * self.rails] = nic + self.g_r;
                        nic
                    };
                    self.q.push(nic, Ev::ForgedHost);
                    let next = t + self.flood_gap();
                    self.q.push(next, Ev::ForgedPort);
                }
                Ev::ForgedHost => self.forged(t),
                Ev::Host { to, from, rail, msg } => self.deliver(t, to as usize, from as usize, rail as usize, msg),
                Ev::Hub { rail } => {
                    let r = rail as usize;
                    if t < self.hub_busy[r] {
                        continue;
                    }
                    let Some(first) = self.hub[r].front() else { continue };
                    if first.ready > t {
                        self.q.push(first.ready, Ev::Hub { rail });
                        continue;
                    }
                    let f = self.hub[r].pop_front().expect("a frame");
                    let end = t + self.ft;
                    self.hub_busy[r] = end;
                    // A unicast reaches its receiver, a multicast every other node.
                    let (first, last) = f.to.map_or((0, n), |to| (to as usize, to as usize + 1));
                    for to in (first..last).filter(|&x| f.to.is_some() || x != f.from as usize) {
                        let i = to * self.rails + r;
                        let nic = (end + self.l_fixed).max(self.rx_free[i]);
                        self.rx_free[i] = nic + self.g_r;
                        self.q.push(nic, Ev::Host { to: to as u32, from: f.from, rail: f.rail, msg: f.msg });
                    }
                    if let Some(next) = self.hub[r].front() {
                        self.q.push(next.ready.max(end), Ev::Hub { rail });
                    }
                }
                Ev::Timer { node, gen } => {
                    let v = node as usize;
                    if self.nodes[v].timer_gen != gen {
                        continue;
                    }
                    self.nodes[v].timer = None;
                    let at = t.max(self.nodes[v].cpu_free);
                    self.nodes[v].cpu_free = at;
                    let now = self.instant(at);
                    self.note(at, v, Happening::Timer);
                    self.nodes[v].core.handle_timeout(now);
                    self.pump(v);
                }
                Ev::App { node } => {
                    let v = node as usize;
                    let entered = t.max(self.nodes[v].cpu_free);
                    let at = entered + self.gather;
                    let now = self.instant(at);
                    let k = self.nodes[v].done;
                    self.note(entered, v, Happening::Entered(k));
                    let nd = &mut self.nodes[v];
                    nd.cpu_free = at;
                    nd.entered = entered;
                    nd.core.start(now, Call::Wait { deadline: None });
                    self.pump(v);
                }
            }
        }
        let measured = (self.s.barriers - self.s.warmup) as usize;
        let mut stats = BarrierStats::default();
        for node in &self.nodes {
            let s = node.core.stats();
            stats.completed += s.completed;
            stats.sent += s.sent;
            stats.copies += s.copies;
            stats.lost_counted += s.lost_counted;
            stats.nacks_sent += s.nacks_sent;
            stats.fast_nacks += s.fast_nacks;
            stats.probes += s.probes;
            stats.answers += s.answers;
            stats.statuses += s.statuses;
            stats.duplicates += s.duplicates;
            stats.stale += s.stale;
            stats.early += s.early;
            stats.ring_loss_retries += s.ring_loss_retries;
        }
        Outcome {
            times_us: self.cost_max.iter().map(|&c| c as f64 / PS_PER_US).collect(),
            mean_cost_us: self.cost_sum as f64 / PS_PER_US / (measured * n).max(1) as f64,
            stats,
            deliveries: self.deliveries,
            lost: self.lost,
            node_us: self.watched,
            flood: self.flood_counts,
            events,
            end_us: end as f64 / PS_PER_US,
            completed: self.finished == n,
            failed: self.failed,
            trace: self.trace,
        }
    }
}

/// Runs `s`: every node's real protocol core over the simulated network.
pub fn run(s: &Scenario) -> Result<Outcome, String> {
    let n = s.nodes;
    if n < 2 {
        return Err(format!("{n} node(s): at least 2"));
    }
    if s.barriers <= s.warmup {
        return Err("no barrier measured".into());
    }
    if s.watch.is_some_and(|w| w as usize >= n) {
        return Err(format!("watch {:?}: not a node of the {n}", s.watch));
    }
    if let Some(f) = s.flood {
        if f.node as usize >= n || !(f.per_second > 0.0 && f.per_second.is_finite()) || f.kernel_us < 0.0 || f.check_us < 0.0 {
            return Err(format!("flood {f:?}: a node of the {n}, a positive rate and non-negative costs"));
        }
    }
    let rails = 1;
    let mut config = BarrierConfig::new(s.algorithm).rails(rails);
    config.progress_agent = false;
    if let Some((retry, failure)) = s.timeouts {
        config = config.timeouts(retry, failure);
    }
    let base = Instant::now();
    let nodes = (0..n)
        .map(|me| {
            let setup = core::Setup { me, nodes: n, rails, multicast: true, max_data: 0 };
            let mut c = Core::new(setup, config, base).map_err(|e| e.to_string())?;
            c.joined(1);
            Ok(Node { core: c, cpu_free: 0, timer: None, timer_gen: 0, done: 0, entered: 0 })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let p = &s.setup.logp;
    let ft_us = s.setup.link.map_or(0.0, |l| l.frame_us(s.setup.bytes));
    let bursts = match s.loss {
        Loss::Bursty { average, mean_burst } if average > 0.0 => {
            let frame = if ft_us > 0.0 {
                ft_us
            } else if s.setup.g_r > 0.0 {
                s.setup.g_r
            } else {
                1e-3
            };
            let mean = ps(mean_burst * frame) as f64;
            (0..n * rails).map(|link| TimedBursts::new(average, mean, Rng::fork(s.seed, 0xB_0257_0000 + link as u64))).collect()
        }
        _ => Vec::new(),
    };
    let net = Net {
        s: *s,
        base,
        q: Queue::new(),
        nodes,
        rails,
        tx_gap_free: vec![0; n * rails],
        link_free: vec![0; n * rails],
        port_free: vec![0; n * rails],
        rx_free: vec![0; n * rails],
        hub_busy: vec![0; rails],
        hub: (0..rails).map(|_| std::collections::VecDeque::new()).collect(),
        rng: Rng::fork(s.seed, 0x1055),
        bursts,
        o_s: ps(p.o_s),
        o_r: ps(p.o_r),
        gap: ps(p.g + s.setup.big_g * s.setup.bytes as f64),
        g_r: ps(s.setup.g_r),
        ft: ps(ft_us),
        l_fixed: ps((p.l - ft_us).max(0.0)),
        work: ps(s.work_us),
        gather: ps(s.host_phases_us.0),
        release: ps(s.host_phases_us.1),
        cost_max: vec![0; (s.barriers - s.warmup) as usize],
        cost_sum: 0,
        deliveries: 0,
        lost: 0,
        flood_gap: s.flood.map_or(0.0, |f| PS_PER_US * 1e6 / f.per_second),
        flood_kernel: s.flood.map_or(0, |f| ps(f.kernel_us)),
        flood_check: s.flood.map_or(0, |f| ps(f.check_us)),
        flood_rng: Rng::fork(s.seed, 0xF100D),
        ring: std::collections::VecDeque::new(),
        losing: false,
        flood_counts: FloodCounts::default(),
        watched: Vec::new(),
        finished: 0,
        failed: None,
        trace: Vec::new(),
    };
    let out = net.run();
    if let Some(e) = &out.failed {
        return Err(format!("{} n={n}: {e}", s.algorithm));
    }
    if !out.completed {
        return Err(format!("{} n={n}: not every node completed {} barriers by the horizon ({:.0} µs)", s.algorithm, s.barriers, out.end_us));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{steady_state, Link, LogP};
    use crate::plan::{Fanout, Release};

    const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

    fn ten_gbe() -> Setup {
        Setup::preset(&LogP::REFERENCE, Link::GBE_10)
    }

    #[test]
    fn lossless_the_protocol_agrees_with_the_plan_simulator() {
        for setup in [ten_gbe(), Setup::on_link(&LogP::PAPER, Link::FAST_ETHERNET)] {
            for a in [TREE4, Algorithm::Dissemination, Algorithm::ShuffleExchange] {
                for n in [2usize, 8, 64] {
                    let s = Scenario::new(a, n, setup, 20);
                    let out = run(&s).unwrap();
                    let plan = steady_state(a, n, 1, &setup, 20, 0.0).last_exit;
                    let got = out.mean();
                    eprintln!("{a} n={n}: protocol {got:.3} plan {plan:.3}");
                    assert!((got - plan).abs() / plan <= 0.05, "{a} n={n}: protocol {got:.3} µs, plans {plan:.3} µs");
                    assert_eq!(out.recoveries(), 0, "{a} n={n}: {:?}", out.stats);
                }
            }
        }
        // 512 nodes with Auto's pick there (larger: the findings).
        let (setup, n) = (ten_gbe(), 512);
        let a = crate::model::auto_with(n, 1, &setup, true).0;
        let out = run(&Scenario::new(a, n, setup, 20)).unwrap();
        let plan = steady_state(a, n, 1, &setup, 20, 0.0).last_exit;
        assert!((out.mean() - plan).abs() / plan <= 0.05, "{a} n={n}: protocol {:.3} µs, plans {plan:.3} µs", out.mean());
        assert_eq!(out.recoveries(), 0, "{a} n={n}: {:?}", out.stats);
    }
}

#[cfg(test)]
mod core_tests {
    use std::time::Instant;

    use crate::collective::Collective;
    use crate::core::{Call, Core, Event, Setup};
    use crate::{Algorithm, BarrierConfig, BarrierError};

    /// The simulator's cores carry no data (`max_data` 0): they build the
    /// algorithm's plan alone, no broadcast plan per root (which made a core
    /// at 4,096 nodes hold 4,097 plans), and a broadcast is refused.
    #[test]
    fn a_core_on_a_network_without_data_refuses_a_broadcast() {
        let now = Instant::now();
        let mut config = BarrierConfig::new(Algorithm::Dissemination);
        config.progress_agent = false;
        for (max_data, refused) in [(0, true), (1000, false)] {
            let mut c = Core::new(Setup { me: 1, nodes: 4, rails: 1, multicast: true, max_data }, config, now).unwrap();
            c.joined(1);
            c.start(now, Call::EnterCollective { call: Collective::Bcast { root: 0 }, count: 8, more: false, input: &[0; 8], deadline: None });
            let done = std::iter::from_fn(|| c.poll_event()).find_map(|e| match e {
                Event::Done(r) => Some(r),
                _ => None,
            });
            match done {
                Some(Err(BarrierError::NoData { .. })) => assert!(refused, "max_data {max_data}"),
                other => assert!(!refused && !matches!(other, Some(Err(_))), "max_data {max_data}: {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod loss_tests {
    use super::*;
    use crate::model::{Link, LogP};
    use crate::plan::{Fanout, Release};

    #[test]
    fn loss_costs_recoveries_and_time_and_the_run_replays() {
        let setup = Setup::preset(&LogP::REFERENCE, Link::GBE_10);
        let a = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };
        let clean = run(&Scenario::new(a, 8, setup, 200)).unwrap();
        for loss in [Loss::Independent(0.2), Loss::Bursty { average: 0.05, mean_burst: 4.0 }] {
            let lossy = run(&Scenario::new(a, 8, setup, 200).loss(loss)).unwrap();
            eprintln!(
                "{loss:?}: clean {:.2} lossy mean {:.2} p99 {:.2} lost {} rec {} {:?}",
                clean.mean(),
                lossy.mean(),
                lossy.quantile(0.99),
                lossy.lost,
                lossy.recoveries(),
                lossy.stats
            );
            assert!(lossy.lost > 0 && lossy.recoveries() > 0, "{loss:?}: {:?}", lossy.stats);
            assert!(lossy.mean() > clean.mean(), "{loss:?}");
            assert_eq!(lossy, run(&Scenario::new(a, 8, setup, 200).loss(loss)).unwrap(), "a seed replays");
        }
    }

    /// Bursty loss in time: on a seeded run the fraction of deliveries
    /// lost is the configured average (within 1.5 points, ~8,000
    /// deliveries), and a burst of 4 frame times (0.27 µs at 10 GbE) no
    /// longer takes a message's copies, which one sender sends a NIC gap
    /// (2.7 µs) apart: the same copies are lost whole much more often
    /// when bursts last 400 frame times (27 µs).
    #[test]
    fn bursts_are_times_at_the_configured_average() {
        let setup = Setup::preset(&LogP::REFERENCE, Link::GBE_10);
        let a = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };
        let mut nacks = Vec::new();
        for mean_burst in [4.0, 400.0] {
            let out = run(&Scenario::new(a, 8, setup, 400).loss(Loss::Bursty { average: 0.05, mean_burst })).unwrap();
            let rate = out.lost as f64 / out.deliveries as f64;
            eprintln!("burst {mean_burst}: {} of {} lost ({rate:.4}), {:?}", out.lost, out.deliveries, out.stats);
            assert!((rate - 0.05).abs() <= 0.015, "burst {mean_burst}: {rate:.4} of deliveries lost");
            nacks.push(out.stats.nacks_sent);
        }
        assert!(nacks[1] > 2 * nacks[0], "NACKs with bursts of 4 and 400 frame times: {nacks:?}");
    }
}

/// Regressions for the protocol's recovery (issue 29), each a fixed seed
/// that reproduces exactly (they were findings, ignored while they failed).
#[cfg(test)]
mod findings {
    use super::*;
    use crate::model::{steady_state, Link, LogP};
    use crate::plan::{Fanout, Release};

    const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

    fn ten_gbe() -> Setup {
        Setup::preset(&LogP::REFERENCE, Link::GBE_10)
    }

    /// tree4, 64 nodes, 10 GbE, 0.1% loss, seed 64001192 (the sweep's):
    /// after the first loss every barrier took ~620 µs against 19.8
    /// lossless (31×): nodes 1-63 each NACKed node 0's release about 3
    /// times a barrier, node 0 answered every NACK with a unicast copy (2.7
    /// µs of o_s each), which delayed its next release beyond every leaf's
    /// retry timeout, and so on. Fixed by multicast answers, the answer
    /// gap, and a learned timeout that learns under loss (loss v2).
    #[test]
    fn one_loss_does_not_slow_every_later_barrier() {
        let clean = run(&Scenario::new(TREE4, 64, ten_gbe(), 312)).unwrap();
        let mut s = Scenario::new(TREE4, 64, ten_gbe(), 312).loss(Loss::Independent(0.001));
        s.seed = 64_001_192;
        let lossy = run(&s).unwrap();
        assert!(lossy.mean() <= 2.0 * clean.mean(), "0.1% loss: mean {:.1} µs against {:.1} lossless; {:?}", lossy.mean(), clean.mean(), lossy.stats);
    }

    /// tree4, 64 nodes, 10 GbE, 1% loss (the sweep's seed): 1.27× lossless,
    /// p99.9 4.5× the lossless median, where a recovery-free barrier costs
    /// one copy's gap at most. A leaf takes in about 3 frames a barrier (the
    /// release and its copies), and over a 256-frame memory its loss
    /// estimate swung across the copies' threshold: it sent its arrival
    /// once about a quarter of the time, and a lost one cost a retry
    /// timeout. The estimate remembers 4,096 frames now (1.15×, p99.9 2.4×).
    #[test]
    fn at_one_percent_loss_a_leaf_keeps_sending_copies() {
        let clean = run(&Scenario::new(TREE4, 64, ten_gbe(), 600)).unwrap();
        let mut s = Scenario::new(TREE4, 64, ten_gbe(), 600).loss(Loss::Independent(0.01));
        s.seed = 64 * 1_000_003 + 10_000;
        let lossy = run(&s).unwrap();
        let (mean, tail) = (lossy.mean() / clean.mean(), lossy.quantile(0.999) / clean.quantile(0.5));
        assert!(mean <= 1.2 && tail <= 3.0, "1% loss: mean {mean:.2}x, p99.9 {tail:.2}x the lossless median; {:?}", lossy.stats);
    }

    /// tree4, 2 nodes, 0.1% loss, seed 2001006: 11 losses in 2,000
    /// barriers, yet node 0 sent its release twice in nearly every barrier
    /// (1,981 copies): a message marked RECOVERED set the receiver's
    /// marks, so its own messages of the next barrier carried the mark
    /// back, for ever. Fixed in loss v2 (the upstream mark lasts one
    /// barrier). (The bound: one loss raises the estimate to about one in
    /// the ~200 messages until it decays below the copies' threshold, so
    /// the node that saw it sends two copies for about 70 barriers here;
    /// the mark's loop sent 180 copies a loss. 64 a loss held only while
    /// the estimate forgot a real loss whenever a late original was
    /// forgiven, which zeroed it.)
    #[test]
    fn the_recovered_mark_dies_out_after_a_loss() {
        let mut s = Scenario::new(TREE4, 2, ten_gbe(), 2000).loss(Loss::Independent(0.001));
        s.seed = 2_001_006;
        let out = run(&s).unwrap();
        assert!(out.stats.copies <= 100 * out.lost.max(1), "{} lost, {} copies: {:?}", out.lost, out.stats.copies, out.stats);
    }

    /// Lossless, Auto's pick, 10 GbE: every inner node of the tree NACKed
    /// node 0's release in the first barrier (142 NACKs at 1,024 nodes,
    /// 538 at 2,048, 1,463 at 4,096), and at 1,024 nodes, before the
    /// answer gap and multicast answers, the NACKs held node 0's next
    /// release past every timeout (200 ms barriers). Cause: one learned
    /// retry timeout for every step of the plan. An inner node's first
    /// step (its children's arrivals, a few µs) taught it the floor (20
    /// µs), and its next step waits for the release, which comes only once
    /// the whole tree has gathered (25 µs at 1,024 nodes, growing with the
    /// depth). Each step now learns its own timeout.
    #[test]
    fn lossless_up_to_4096_nodes_runs_at_the_plan_simulators_time_without_recoveries() {
        let setup = ten_gbe();
        for n in [1024, 4096] {
            let a = crate::model::auto_with(n, 1, &setup, true).0;
            let out = run(&Scenario::new(a, n, setup, 10)).unwrap();
            let plan = steady_state(a, n, 1, &setup, 10, 0.0).last_exit;
            assert!(out.mean() <= 1.05 * plan && out.recoveries() == 0, "{a} n={n}: {:.1} µs against {plan:.1}; {:?}", out.mean(), out.stats);
        }
    }

    /// Lossless, 4,096 nodes, Fast Ethernet (the paper's LogP: o_r 9.5
    /// µs), Auto's pick (tree4): the first barrier's gather takes longer
    /// than the first retry timeout (250 µs, nothing learned yet), so every
    /// node NACKed node 0's release: 4,095 NACKs at 9.5 µs each held node
    /// 0 for 39 ms, every node retried meanwhile, and the first barriers
    /// took up to 880 ms. Each node now asks its tree parent, the nearest
    /// holder of the release (from 512 nodes on): each node takes in its own
    /// few children's NACKs.
    #[test]
    fn the_first_barrier_at_4096_nodes_on_fast_ethernet_is_no_nack_implosion() {
        let setup = Setup::on_link(&LogP::PAPER, Link::FAST_ETHERNET);
        let n = 4096;
        let a = crate::model::auto_with(n, 1, &setup, true).0;
        let mut s = Scenario::new(a, n, setup, 8);
        s.warmup = 0;
        let out = run(&s).unwrap();
        let plan = steady_state(a, n, 1, &setup, 8, 0.0).last_exit;
        let worst = out.times_us.iter().copied().fold(0.0, f64::max);
        assert!(worst <= 1.5 * plan, "{a} n={n}: the slowest barrier {worst:.1} µs against {plan:.1}; {:?}", out.stats);
    }

    /// tree4, 64 nodes, 10 GbE, 20% loss (the sweep's seed): 136× lossless
    /// (2.7 ms a barrier, some of 100 ms). A delayed gather made every leaf
    /// NACK the release at once; node 0 answered each NACK with a
    /// multicast of the release, in four copies (10.8 µs of its time
    /// each), as the NACKs were taken in more than a round trip after the
    /// last answer (they queued behind the answers): node 0 fell
    /// milliseconds behind, and every leaf's retries came again. A
    /// multicast answer now serves every peer's first NACK for it, and
    /// others within the shortest step timeout.
    #[test]
    fn twenty_percent_loss_at_64_nodes_costs_no_root_storm() {
        let clean = run(&Scenario::new(TREE4, 64, ten_gbe(), 300)).unwrap();
        let mut s = Scenario::new(TREE4, 64, ten_gbe(), 300).loss(Loss::Independent(0.2));
        s.seed = 64 * 1_000_003 + 200_000;
        let lossy = run(&s).unwrap();
        assert!(lossy.mean() <= 4.0 * clean.mean(), "20% loss: mean {:.1} µs against {:.1} lossless; {:?}", lossy.mean(), clean.mean(), lossy.stats);
    }
}

#[cfg(test)]
mod hierarchy_tests {
    use super::*;
    use crate::model::hierarchy::{hierarchical_cost, host_phases_us, ShmCosts};
    use crate::model::LogP;
    use crate::plan::{Fanout, Release};

    #[test]
    fn the_hierarchical_barrier_on_the_real_core_agrees_with_its_closed_cost() {
        let p = LogP::REFERENCE;
        let shm = ShmCosts::REFERENCE;
        let a = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };
        for (hosts, per_host) in [(4usize, 16usize), (16, 64)] {
            let mut s = Scenario::new(a, hosts, Setup::logp(&p), 20);
            s.host_phases_us = host_phases_us(per_host, &shm);
            let got = run(&s).unwrap().mean();
            let want = hierarchical_cost(a, hosts, per_host, per_host, 1, &p, &shm);
            assert!((got - want).abs() / want <= 0.05, "{hosts}x{per_host}: protocol {got:.3} µs, closed {want:.3} µs");
        }
    }
}

/// Issue 27's flood ([`Flood`]): forged frames at one node, whose cost is
/// that node's CPU and, when its ring overflows, genuine frames.
#[cfg(test)]
mod flood_tests {
    use super::*;
    use crate::check::{check, Timeline};
    use crate::model::{auto_with, Link, LogP};
    use crate::plan::{Fanout, Release};

    const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

    /// This machine's per-frame costs of a forged frame (`bench/results/flood.md`,
    /// session 16): the kernel's receive, as the whole path of one frame
    /// sent on veth into a TPACKET_V2 ring (2.8 µs: an upper bound, which
    /// includes the sender's side) or as the ring socket's own part of it
    /// (0.6 µs: a lower one); then the endpoint's read of a slot and the
    /// tag check that fails (0.15 µs).
    const KERNEL_US: f64 = 2.8;
    const RING_SOCKET_US: f64 = 0.6;
    const CHECK_US: f64 = 0.15;

    fn ten_gbe() -> Setup {
        Setup::preset(&LogP::REFERENCE, Link::GBE_10)
    }

    fn flooded(a: Algorithm, n: usize, barriers: u32, per_second: f64, seed: u64) -> Scenario {
        flooded_at(a, n, barriers, per_second, KERNEL_US, seed)
    }

    fn flooded_at(a: Algorithm, n: usize, barriers: u32, per_second: f64, kernel_us: f64, seed: u64) -> Scenario {
        let mut f = Flood::new(1, per_second, kernel_us, CHECK_US);
        f.poisson = true;
        f.ring_slots = Some(1024);
        let mut s = Scenario::new(a, n, ten_gbe(), barriers).flood(f);
        s.seed = seed;
        s.watch = Some(1);
        s.trace = true;
        s
    }

    /// The shared-clock check over the run's trace: no node left a barrier
    /// before every node entered it. Returns the barriers checked.
    fn safe(o: &Outcome, n: usize) -> usize {
        let base = Instant::now();
        let at = |t: f64| base + Duration::from_nanos((t * 1e3) as u64);
        let mut timelines = vec![Timeline::default(); n];
        let mut entered = vec![Vec::new(); n];
        for t in &o.trace {
            let v = t.node as usize;
            match t.what {
                Happening::Entered(k) => {
                    assert_eq!(k as usize, entered[v].len(), "node {v} entered barrier {k} out of order");
                    entered[v].push(at(t.t_us));
                }
                Happening::Left(k) => timelines[v].record(entered[v][k as usize], at(t.t_us)),
                _ => {}
            }
        }
        let (violations, checked) = check(&timelines);
        assert!(violations.is_empty(), "{violations:?}");
        checked
    }

    /// Every delivery is accounted for as taken in by a core, lost on the
    /// network or dropped by the flooded node's full ring: no forged frame
    /// is among them, and every forged frame is a bad tag or a ring drop.
    fn accounted(o: &Outcome) {
        let taken = o.trace.iter().filter(|t| matches!(t.what, Happening::Delivered { .. })).count() as u64;
        assert_eq!(taken + o.lost + o.flood.genuine_ring_drops, o.deliveries, "{:?}", o.flood);
        assert_eq!(o.flood.bad_tags + o.flood.forged_ring_drops, o.flood.forged, "{:?}", o.flood);
    }

    /// 100,000 and 300,000 forged frames a second at node 1, 2 and 8 nodes,
    /// tree4 and Auto's pick: every barrier completes on every node, none
    /// is left before every node entered it, every forged frame is counted
    /// as a bad tag (the ring has room for them: none dropped), the cores
    /// never see one, and the flood reached the rate asked.
    #[test]
    fn a_flood_breaks_nothing_and_every_forged_frame_is_counted_as_a_bad_tag() {
        for n in [2, 8] {
            for a in [TREE4, auto_with(n, 1, &ten_gbe(), true).0] {
                for rate in [100_000.0, 300_000.0] {
                    let o = run(&flooded(a, n, 600, rate, 7)).unwrap();
                    assert_eq!(safe(&o, n), 600, "{a} n={n} {rate}/s");
                    accounted(&o);
                    assert_eq!((o.flood.forged_ring_drops, o.flood.genuine_ring_drops), (0, 0), "{a} n={n} {rate}/s: {:?}", o.flood);
                    let expected = rate * o.end_us / 1e6;
                    assert!(
                        (o.flood.forged as f64 - expected).abs() <= 0.1 * expected,
                        "{a} n={n}: {} forged in {:.0} µs at {rate}/s",
                        o.flood.forged,
                        o.end_us
                    );
                    assert_eq!(o.node_us.len(), 540);
                }
            }
        }
    }

    /// The goal (issue 27) on a core per node: 100,000 forged frames a
    /// second slow the flooded node's barriers by at most 2× (against the
    /// same run unflooded), 2 and 8 nodes, tree4 and Auto's pick: the mean
    /// and the median at either cost of a forged frame, the p99 at the ring
    /// socket's cost for all and at the upper bound for tree4. (At the
    /// upper bound, 2.95 µs a frame, the p99 of Auto's picks, barriers of
    /// 4.8-5.4 µs, is 2.3-2.4×: two forged frames in one barrier double
    /// it; `flood.md`.)
    #[test]
    fn a_flood_of_100k_frames_a_second_slows_the_flooded_nodes_barriers_at_most_2x() {
        let stat = |o: &Outcome| {
            let mut v = o.node_us.clone();
            (o.node_us.iter().sum::<f64>() / v.len() as f64, crate::summary::quantile(&mut v, 0.5), crate::summary::quantile(&mut v, 0.99))
        };
        for n in [2, 8] {
            for a in [TREE4, auto_with(n, 1, &ten_gbe(), true).0] {
                let mut quiet = Scenario::new(a, n, ten_gbe(), 2000);
                quiet.watch = Some(1);
                let (qm, q50, q99) = stat(&run(&quiet).unwrap());
                for kernel_us in [RING_SOCKET_US, KERNEL_US] {
                    let mut s = flooded_at(a, n, 2000, 100_000.0, kernel_us, 3);
                    s.trace = false;
                    let f = run(&s).unwrap();
                    let (fm, f50, f99) = stat(&f);
                    let what = format!("{a} n={n}, {kernel_us} µs: mean {qm:.2} -> {fm:.2}, p50 {q50:.2} -> {f50:.2}, p99 {q99:.2} -> {f99:.2} µs");
                    assert!(fm <= 2.0 * qm && f50 <= 2.0 * q50, "{what}");
                    if kernel_us == RING_SOCKET_US || a == TREE4 {
                        assert!(f99 <= 2.0 * q99, "{what}");
                    }
                    assert!(f.flood.bad_tags > 0 && f.flood.forged == f.flood.bad_tags, "{:?}", f.flood);
                }
            }
        }
    }

    /// A flood that needs more than the node's whole CPU (1,000,000 frames
    /// a second at 2.95 µs each) fills its ring: the kernel drops genuine
    /// frames with forged ones, the core is told (its ring-drop retry), and
    /// every barrier still completes, safely, if slowly (ms).
    #[test]
    fn an_overwhelming_flood_drops_genuine_frames_and_the_barriers_still_complete_safely() {
        let o = run(&flooded(TREE4, 2, 200, 1_000_000.0, 11)).unwrap();
        assert_eq!(safe(&o, 2), 200);
        accounted(&o);
        assert!(o.flood.forged_ring_drops > 0 && o.flood.genuine_ring_drops > 0, "{:?}", o.flood);
        assert!(o.stats.ring_loss_retries > 0, "{:?}", o.stats);
    }

    /// Finding (session 16), beyond the goal's rate: 1,000,000 forged
    /// frames a second at 2.95 µs each (three times node 1's CPU), 8
    /// nodes, Auto's pick (one-phase), seed 1 (every seed of 1-5): node 1
    /// fails barrier 10 after 10 s, naming node 5 "silent though probed",
    /// while the others have gone on to barrier 11. Node 1's ring is full
    /// (3 ms of forged frames); each retry sends 35 NACKs (7 peers × 5
    /// messages, 95 µs of sends during which it reads nothing, so no slot
    /// frees), and the answers arrive in that window and are dropped
    /// (in the last second: 972 of 972 of node 5's frames dropped, 8
    /// genuine frames taken in). tree4 at 8 nodes and every 2-node run
    /// complete under the same flood (ms barriers).
    #[test]
    #[ignore = "finding (session 16): 8 nodes, one-phase, 1M forged frames/s at 2.95 µs (3x node 1's CPU), seed 1: node 1 fails barrier 10 (answers to its NACKs arrive while it sends them, its full ring drops them)"]
    fn an_overwhelming_flood_at_8_nodes_on_autos_pick_completes() {
        let a = auto_with(8, 1, &ten_gbe(), true).0;
        let mut s = flooded(a, 8, 40, 1_000_000.0, 1);
        s.trace = false;
        let o = run(&s).unwrap();
        assert!(o.flood.genuine_ring_drops > 0, "{:?}", o.flood);
    }

    /// A flood's run replays from its seed; another seed draws other
    /// arrivals.
    #[test]
    fn a_flooded_run_replays_from_its_seed() {
        let a = run(&flooded(TREE4, 8, 200, 300_000.0, 5)).unwrap();
        assert_eq!(a, run(&flooded(TREE4, 8, 200, 300_000.0, 5)).unwrap());
        assert_ne!(a.node_us, run(&flooded(TREE4, 8, 200, 300_000.0, 6)).unwrap().node_us);
    }
}
