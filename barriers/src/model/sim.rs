//! The discrete-event simulator behind [`super::predict`] and
//! [`super::steady_state`].
//!
//! Resources, each a "free from" time: a node's CPU, each NIC's send gap
//! and transmit link, each switch output port, each NIC's receive gap, and
//! each hub medium; on shared hosts, cores that give their processes turns.
//! Events (a frame reaching a switch port, reaching a host, a send
//! completing, a hub attempt, a turn ending) are handled in time order, in
//! picoseconds, so the result is exact under the model. Waits are matched through a per-node index built
//! once, so the loop allocates nothing per event.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::link::Topology;
use super::{Prediction, Setup};
use crate::plan::{self, Algorithm, Dest};

const PS: f64 = 1e6;

fn ps(us: f64) -> u64 {
    (us.max(0.0) * PS).round() as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    /// A frame reaches the switch's output port towards `to`.
    Port { to: u32, rail: u16, from: u32, tag: u16, iter: u32 },
    /// A frame is in `to`'s memory: its CPU takes it.
    Host { to: u32, rail: u16, from: u32, tag: u16, iter: u32 },
    /// A frame of `node`'s has left: the send-completion interrupt.
    TxDone { node: u32 },
    /// The hub on `rail` may start a transmission.
    Hub { rail: u16 },
    /// The turn on shared core `core` may be over.
    CoreFree { core: u32 },
}

#[derive(Clone, Copy)]
struct HubFrame {
    from: u32,
    to: Option<u32>, // None: multicast
    tag: u16,
    iter: u32,
    ready: u64,
    attempts: u32,
}

/// The event queue: 128-bit keys (time, sequence, slot) in a binary heap,
/// the events in a slab whose slots are reused, so the hot loop neither
/// allocates nor moves more than 16 bytes per heap step.
pub(super) struct Queue<E: Copy> {
    heap: BinaryHeap<Reverse<u128>>,
    slab: Vec<E>,
    free: Vec<u32>,
    seq: u32,
}

impl<E: Copy> Queue<E> {
    /// An empty queue.
    pub(super) fn new() -> Self {
        Queue { heap: BinaryHeap::new(), slab: Vec::new(), free: Vec::new(), seq: 0 }
    }

    /// Schedules `ev` at `at`; events at the same time pop in push order.
    pub(super) fn push(&mut self, at: u64, ev: E) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = ev;
                i
            }
            None => {
                self.slab.push(ev);
                (self.slab.len() - 1) as u32
            }
        };
        self.seq = self.seq.wrapping_add(1);
        self.heap.push(Reverse((u128::from(at) << 64) | (u128::from(self.seq) << 32) | u128::from(slot)));
    }

    /// The earliest event and its time.
    pub(super) fn pop(&mut self) -> Option<(u64, E)> {
        let Reverse(key) = self.heap.pop()?;
        let slot = (key & 0xFFFF_FFFF) as u32;
        self.free.push(slot);
        Some(((key >> 64) as u64, self.slab[slot as usize]))
    }
}

/// A message waiting for its process's turn: rail, sender, tag, iteration, arrival.
type Waiting = (u16, u32, u16, u32, u64);

/// A small deterministic generator (xorshift64*) for the hub's backoff.
struct Rng(u64);
impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) % bound.max(1)
    }
}

/// How the nodes run the barrier: once, all entering at 0, or the paper's
/// loop of `iterations` barriers with `dummy_us` of work between them,
/// measuring the last `iterations − warmup`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Runs {
    pub iterations: u32,
    pub warmup: u32,
    pub dummy_us: f64,
}

pub(crate) fn run(algorithm: Algorithm, n: usize, rails: usize, s: &Setup, runs: Runs, seed: u64) -> Prediction {
    let rails = rails.max(1);
    run_plans(&algorithm.to_string(), n, rails, &|v| plan::build(algorithm, n, v, rails).expect("a valid node and rail count"), s, runs, seed)
}

pub(crate) fn run_plans(what: &str, n: usize, rails: usize, plans: &dyn Fn(usize) -> plan::Plan, s: &Setup, runs: Runs, seed: u64) -> Prediction {
    PlanSim::new(n, rails, plans, s, runs, seed).run(what)
}

/// The costs of one simulation in picoseconds, worked out once from the
/// [`Setup`].
struct Costs {
    o_r: u64,
    /// o_s of a multicast: a software bridge's copies to the n − 2 other
    /// receivers are the sender's.
    o_s_multicast: u64,
    /// o_s of a unicast: on a flooding bridge, the copies to the n − 2 ports
    /// that drop it are the sender's.
    o_s_unicast: u64,
    /// L less one frame's time on the wire.
    l_fixed: u64,
    /// One frame's time on the wire.
    ft: u64,
    /// A NIC's send gap.
    gap: u64,
    /// A NIC's receive gap.
    g_r: u64,
    rx_irq: u64,
    tx_irq: u64,
    /// A shared core's switch from one process to another.
    switch: u64,
    wake: u64,
    per_barrier: u64,
    /// The work between two barriers of the loop.
    dummy: u64,
    /// The hub's backoff slot, jam signal, collision window and inter-frame gap.
    slot: u64,
    jam: u64,
    window: u64,
    ifg: u64,
    /// Processes share cores.
    shared: bool,
    hub: bool,
}

impl Costs {
    fn new(s: &Setup, n: usize, runs: Runs) -> Costs {
        let p = &s.logp;
        let ft_us = s.link.map_or(0.0, |l| l.frame_us(s.bytes));
        let o_s = ps(p.o_s);
        let (slot, jam, window) = s.link.map_or((0, 0, 0), |l| (ps(l.slot_us()), ps(l.jam_us()), ps(l.collision_window_us)));
        // The sender's share of a software bridge's copies beyond the first
        // (which o_s holds): a multicast's to the n − 2 other receivers, a
        // flooded unicast's to the n − 2 ports that drop it.
        let further = n.saturating_sub(2) as f64;
        Costs {
            o_r: ps(p.o_r),
            o_s_multicast: o_s + ps(s.fanout_us * further),
            o_s_unicast: o_s + if s.topology == Topology::FloodingBridge { ps(s.flood_us * further) } else { 0 },
            l_fixed: ps((p.l - ft_us).max(0.0)),
            ft: ps(ft_us),
            gap: ps(p.g + s.big_g * s.bytes as f64),
            g_r: ps(s.g_r.max(0.0)),
            rx_irq: ps(s.host.rx_irq.min(p.o_r)),
            tx_irq: ps(s.host.tx_irq),
            switch: ps(s.host.switch),
            wake: ps(s.host.wake),
            per_barrier: ps(s.host.per_barrier),
            dummy: ps(runs.dummy_us),
            slot,
            jam,
            window,
            ifg: s.link.map_or(0, |l| ps(l.ifg_us())),
            shared: s.host.oversubscribed(),
            hub: s.topology == Topology::Hub,
        }
    }
}

/// Every node's plan, flattened: per node its steps' sends, its wait
/// counts, and an index from (sender, tag) to the step that waits for it.
struct Plans {
    /// Node v's steps are `steps_off[v]..steps_off[v + 1]` of `sends` and `full`.
    steps_off: Vec<usize>,
    sends: Vec<Vec<plan::Out>>,
    /// How many messages each step waits for.
    full: Vec<u32>,
    /// Node v's index is `expect[exp_off[v]..exp_off[v + 1]]`, sorted.
    exp_off: Vec<usize>,
    /// (sender, tag, step).
    expect: Vec<(u32, u16, u32)>,
}

impl Plans {
    fn flatten(n: usize, plans: &dyn Fn(usize) -> plan::Plan) -> Plans {
        let mut p = Plans { steps_off: vec![0; n + 1], sends: Vec::new(), full: Vec::new(), exp_off: vec![0; n + 1], expect: Vec::new() };
        for v in 0..n {
            let pl = plans(v);
            let mut idx: Vec<(u32, u16, u32)> = Vec::new();
            for (i, st) in pl.steps.into_iter().enumerate() {
                p.full.push(st.waits.len() as u32);
                idx.extend(st.waits.iter().map(|w| (w.from as u32, w.tag, i as u32)));
                p.sends.push(st.sends);
            }
            idx.sort_unstable();
            p.expect.extend(idx);
            p.steps_off[v + 1] = p.full.len();
            p.exp_off[v + 1] = p.expect.len();
        }
        p
    }

    /// The step of node v's plan that waits for `tag` from `from`.
    fn step_awaiting(&self, v: usize, from: u32, tag: u16) -> usize {
        let idx = &self.expect[self.exp_off[v]..self.exp_off[v + 1]];
        let k = idx.partition_point(|e| (e.0, e.1) < (from, tag));
        idx.get(k).filter(|e| (e.0, e.1) == (from, tag)).expect("every message is awaited").2 as usize
    }
}

/// A node: its CPU and where it is in its plan and its loop of barriers.
#[derive(Clone)]
struct Node {
    /// Its CPU is busy until then.
    cpu_free: u64,
    step: usize,
    /// The current step's sends are made.
    started: bool,
    /// The barrier it is in (counting from 0).
    iter: u32,
    /// When it entered and left its current (last) barrier.
    enter: u64,
    exit: u64,
    /// Its measured barriers' costs, summed.
    cost_sum: u64,
    /// Shared hosts: in its core's run queue.
    queued: bool,
    /// Shared hosts: not yet run.
    fresh: bool,
}

/// A NIC (one per node and rail) and its port on the switch.
#[derive(Clone, Copy, Default)]
struct Nic {
    tx_gap_free: u64,
    link_free: u64,
    /// The switch's output port towards it.
    port_free: u64,
    rx_free: u64,
    /// The end of its last receive interrupt's handler.
    rx_handler_end: u64,
}

/// A core that processes share: it gives them turns.
#[derive(Clone)]
struct Core {
    /// The end of the current turn.
    free: u64,
    /// The process that ran last, and the one running now (`u32::MAX`: none).
    last: u32,
    current: u32,
    runq: VecDeque<u32>,
}

/// One simulation of every node's plan: the resources, the nodes and the
/// event queue.
struct PlanSim<'a> {
    n: usize,
    rails: usize,
    runs: Runs,
    c: Costs,
    host: &'a super::Host,
    plans: Plans,
    /// Per step, the messages still awaited, one count per parity of the barrier.
    pending: Vec<[u32; 2]>,
    nodes: Vec<Node>,
    /// Node v's NIC on rail r is `nics[v * rails + r]`.
    nics: Vec<Nic>,
    cores: Vec<Core>,
    /// Shared hosts: per node, the messages waiting for its turn.
    inbox: Vec<Vec<Waiting>>,
    /// Per measured barrier, the largest node cost.
    iter_max: Vec<u64>,
    hub_busy: Vec<u64>,
    hub_pending: Vec<Vec<HubFrame>>,
    rng: Rng,
    /// The hub's contenders, reused.
    contenders: Vec<usize>,
    events: Queue<Ev>,
    messages: u64,
    deliveries: u64,
}

impl<'a> PlanSim<'a> {
    fn new(n: usize, rails: usize, plans: &dyn Fn(usize) -> plan::Plan, s: &'a Setup, runs: Runs, seed: u64) -> PlanSim<'a> {
        let c = Costs::new(s, n, runs);
        let plans = Plans::flatten(n, plans);
        let pending = plans.full.iter().map(|&c| [c, c]).collect();
        // The last node need not be on the highest core (3 processes on 2 cores: 0, 1, 0).
        let ncores = if c.shared { (0..n).map(|v| s.host.core_of(v) + 1).max().unwrap_or(0) } else { 0 };
        let node = Node { cpu_free: 0, step: 0, started: false, iter: 0, enter: 0, exit: 0, cost_sum: 0, queued: false, fresh: true };
        PlanSim {
            n,
            rails,
            runs,
            host: &s.host,
            plans,
            pending,
            nodes: vec![node; n],
            nics: vec![Nic::default(); n * rails],
            cores: vec![Core { free: 0, last: u32::MAX, current: u32::MAX, runq: VecDeque::new() }; ncores],
            inbox: vec![Vec::new(); if c.shared { n } else { 0 }],
            iter_max: vec![0; runs.iterations as usize],
            hub_busy: vec![0; rails],
            hub_pending: vec![Vec::new(); rails],
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            contenders: Vec::new(),
            events: Queue::new(),
            messages: 0,
            deliveries: 0,
            c,
        }
    }

    /// Runs every node's loop of barriers to its end.
    fn run(mut self, what: &str) -> Prediction {
        if self.c.shared {
            for v in 0..self.n {
                self.nodes[v].queued = true;
                self.cores[self.host.core_of(v)].runq.push_back(v as u32);
            }
            for c in 0..self.cores.len() {
                self.start_turn(c, 0);
            }
        } else {
            for v in 0..self.n {
                self.run_node(v);
            }
        }
        while let Some((t, ev)) = self.events.pop() {
            match ev {
                Ev::Port { to, rail, from, tag, iter } => self.at_port(t, to, rail, from, tag, iter),
                Ev::Host { to, rail, from, tag, iter } => self.at_host(t, to, rail, from, tag, iter),
                Ev::CoreFree { core } => {
                    let c = core as usize;
                    if t != self.cores[c].free || self.cores[c].current == u32::MAX {
                        continue;
                    }
                    self.cores[c].current = u32::MAX;
                    self.start_turn(c, t);
                }
                Ev::TxDone { node } => {
                    self.acquire(node as usize, t, self.c.tx_irq);
                }
                Ev::Hub { rail } => self.at_hub(t, rail),
            }
        }
        self.prediction(what)
    }

    /// What the run measured.
    fn prediction(&self, what: &str) -> Prediction {
        let (n, runs) = (self.n, self.runs);
        assert!(self.nodes.iter().all(|v| v.iter == runs.iterations), "{what} n={n}: a node never finished");
        let measured = (runs.iterations - runs.warmup).max(1) as f64;
        // Per iteration, the largest node cost, summed.
        let cost_max_sum: u64 = self.iter_max.iter().sum();
        let last_exit = if runs.iterations == 1 {
            self.nodes.iter().map(|v| v.exit).max().expect("n ≥ 1") as f64 / PS
        } else {
            cost_max_sum as f64 / PS / measured
        };
        let mean_cost = self.nodes.iter().map(|v| v.cost_sum).sum::<u64>() as f64 / PS / measured / n as f64;
        Prediction {
            last_exit,
            mean_exit: if runs.iterations == 1 { self.nodes.iter().map(|v| v.exit).sum::<u64>() as f64 / PS / n as f64 } else { mean_cost },
            mean_cost,
            messages: self.messages / runs.iterations as u64,
            deliveries: self.deliveries / runs.iterations as u64,
        }
    }

    /// Takes `dur` of node v's CPU from `at` on; returns the end. (On shared
    /// hosts a node runs only in its turn on its core, see [`Self::start_turn`].)
    fn acquire(&mut self, v: usize, at: u64, dur: u64) -> u64 {
        let cpu = &mut self.nodes[v].cpu_free;
        let start = at.max(*cpu);
        *cpu = start + dur;
        start + dur
    }

    /// Runs node v from where it is as far as it can go.
    fn run_node(&mut self, v: usize) {
        loop {
            let base = self.plans.steps_off[v];
            let nsteps = self.plans.steps_off[v + 1] - base;
            if self.nodes[v].step == nsteps {
                if self.end_barrier(v, base..base + nsteps) {
                    break;
                }
                continue;
            }
            let si = base + self.nodes[v].step;
            if !self.nodes[v].started {
                self.nodes[v].started = true;
                for k in 0..self.plans.sends[si].len() {
                    let out = self.plans.sends[si][k];
                    self.send(v, out);
                }
            }
            if self.pending[si][(self.nodes[v].iter & 1) as usize] > 0 {
                break;
            }
            self.nodes[v].step += 1;
            self.nodes[v].started = false;
        }
    }

    /// Node v has made every step of its barrier (`steps` of the plans):
    /// it leaves, and enters the next after its work. True when that was
    /// its last.
    fn end_barrier(&mut self, v: usize, steps: std::ops::Range<usize>) -> bool {
        let cpu_free = self.nodes[v].cpu_free;
        let done = if self.c.per_barrier > 0 { self.acquire(v, cpu_free, self.c.per_barrier) } else { cpu_free };
        let node = &mut self.nodes[v];
        node.exit = done;
        let it = node.iter;
        if it >= self.runs.warmup {
            let c = done - node.enter;
            node.cost_sum += c;
            self.iter_max[it as usize] = self.iter_max[it as usize].max(c);
        }
        let par = (it & 1) as usize;
        for i in steps {
            self.pending[i][par] = self.plans.full[i];
        }
        node.iter = it + 1;
        if node.iter == self.runs.iterations {
            return true;
        }
        let enter = if self.c.dummy > 0 { self.acquire(v, done, self.c.dummy) } else { done };
        let node = &mut self.nodes[v];
        node.enter = enter;
        node.step = 0;
        node.started = false;
        false
    }

    /// Node v sends `out`: its CPU and its NIC, then the wire.
    fn send(&mut self, v: usize, out: plan::Out) {
        let r = out.rail;
        let nic = v * self.rails + r;
        let start = self.nodes[v].cpu_free.max(self.nics[nic].tx_gap_free);
        let cost = if matches!(out.dest, Dest::All) { self.c.o_s_multicast } else { self.c.o_s_unicast };
        let done = self.acquire(v, start, cost);
        let ft = self.c.ft;
        let nic = &mut self.nics[nic];
        nic.tx_gap_free = start + self.c.gap;
        let dep = done.max(nic.link_free);
        nic.link_free = dep + ft;
        self.messages += 1;
        let it = self.nodes[v].iter;
        if self.c.hub {
            let to = match out.dest {
                Dest::Node(t) => Some(t as u32),
                Dest::All => None,
            };
            self.hub_pending[r].push(HubFrame { from: v as u32, to, tag: out.tag, iter: it, ready: dep, attempts: 0 });
            self.events.push(dep.max(self.hub_busy[r]), Ev::Hub { rail: r as u16 });
        } else {
            if self.c.tx_irq > 0 {
                self.events.push(dep + ft, Ev::TxDone { node: v as u32 });
            }
            let at = dep + self.c.l_fixed;
            let ev = |t: usize| Ev::Port { to: t as u32, rail: r as u16, from: v as u32, tag: out.tag, iter: it };
            match out.dest {
                Dest::Node(t) => self.events.push(at, ev(t)),
                Dest::All => {
                    for t in (0..self.n).filter(|&t| t != v) {
                        self.events.push(at, ev(t));
                    }
                }
            }
        }
    }

    /// A frame reaches the switch's output port towards `to`.
    fn at_port(&mut self, t: u64, to: u32, rail: u16, from: u32, tag: u16, iter: u32) {
        let nic = &mut self.nics[to as usize * self.rails + rail as usize];
        let out = t.max(nic.port_free);
        nic.port_free = out + self.c.ft;
        let at = (out + self.c.ft).max(nic.rx_free);
        nic.rx_free = at + self.c.g_r;
        self.events.push(at, Ev::Host { to, rail, from, tag, iter });
    }

    /// A frame is in `to`'s memory: its CPU takes it, at once or in its next turn.
    fn at_host(&mut self, t: u64, to: u32, rail: u16, from: u32, tag: u16, it: u32) {
        self.deliveries += 1;
        let v = to as usize;
        if !self.c.shared {
            self.take(v, t, rail, from, tag, it);
            return;
        }
        let c = self.host.core_of(v);
        if self.cores[c].current == to {
            // Its turn goes on: it takes this one too.
            self.take(v, t, rail, from, tag, it);
            self.end_turn_at(c, v);
        } else {
            self.inbox[v].push((rail, from, tag, it, t));
            if !self.nodes[v].queued {
                self.nodes[v].queued = true;
                self.cores[c].runq.push_back(to);
            }
            if self.cores[c].current == u32::MAX {
                self.start_turn(c, t);
            }
        }
    }

    /// A delivery taken by node v's CPU at `t` (or later, when it is free).
    fn take(&mut self, v: usize, t: u64, rail: u16, from: u32, tag: u16, it: u32) {
        let i = v * self.rails + rail as usize;
        let c = &self.c;
        let mut cost = if c.rx_irq > 0 && t < self.nics[i].rx_handler_end { c.o_r - c.rx_irq } else { c.o_r };
        let node = &self.nodes[v];
        if c.wake > 0 && t >= node.cpu_free && node.started && node.iter < self.runs.iterations {
            cost += c.wake; // the node was blocked waiting: the kernel wakes it
        }
        self.nics[i].rx_handler_end = self.acquire(v, t, cost);
        let st = self.plans.step_awaiting(v, from, tag);
        let si = self.plans.steps_off[v] + st;
        let par = (it & 1) as usize;
        self.pending[si][par] -= 1;
        let node = &self.nodes[v];
        if self.pending[si][par] == 0 && it == node.iter && st == node.step && node.started {
            self.run_node(v);
        }
    }

    /// Shared hosts: core c gives the next runnable process a turn, in which
    /// it takes every message waiting for it and runs until it waits again.
    fn start_turn(&mut self, c: usize, t: u64) {
        let Some(v) = self.cores[c].runq.pop_front() else { return };
        let v = v as usize;
        self.nodes[v].queued = false;
        let mut start = t.max(self.nodes[v].cpu_free);
        let core = &mut self.cores[c];
        if core.last != v as u32 {
            start += self.c.switch;
            core.last = v as u32;
        }
        core.current = v as u32;
        self.nodes[v].cpu_free = start;
        if self.nodes[v].fresh {
            self.nodes[v].fresh = false;
            self.run_node(v);
        }
        let mut msgs = std::mem::take(&mut self.inbox[v]);
        for &(rail, from, tag, it, _) in &msgs {
            self.take(v, start, rail, from, tag, it);
        }
        msgs.clear();
        self.inbox[v] = msgs;
        self.end_turn_at(c, v);
    }

    /// Core c's turn (node v's) lasts as long as v's CPU is busy.
    fn end_turn_at(&mut self, c: usize, v: usize) {
        let end = self.nodes[v].cpu_free;
        self.cores[c].free = end;
        self.events.push(end, Ev::CoreFree { core: c as u32 });
    }

    /// The hub on `rail` may start a transmission: one contender sends, or
    /// several collide and back off.
    fn at_hub(&mut self, t: u64, rail: u16) {
        let r = rail as usize;
        let q = &mut self.hub_pending[r];
        if t < self.hub_busy[r] || q.is_empty() {
            return;
        }
        let first = q.iter().map(|f| f.ready).min().expect("not empty");
        if first > t {
            return;
        }
        let (slot, window) = (self.c.slot, self.c.window);
        // Contenders: the head frame of every NIC ready within the window.
        let contenders = &mut self.contenders;
        contenders.clear();
        if slot == 0 {
            // No link to time collisions: a medium the frames take in turn.
            contenders.extend(q.iter().position(|f| f.ready == first));
        } else {
            for (j, f) in q.iter().enumerate() {
                if f.ready <= t + window && !contenders.iter().any(|&c| q[c].from == f.from) {
                    contenders.push(j);
                }
            }
        }
        if contenders.len() == 1 {
            let f = q.swap_remove(contenders[0]);
            let end = t + self.c.ft;
            self.hub_busy[r] = end;
            if self.c.tx_irq > 0 {
                self.events.push(end, Ev::TxDone { node: f.from });
            }
            let at = end + self.c.l_fixed;
            match f.to {
                Some(to) => self.deliver_from_hub(at, to as usize, rail, &f),
                None => (0..self.n).filter(|&to| to != f.from as usize).for_each(|to| self.deliver_from_hub(at, to, rail, &f)),
            }
        } else {
            let last = contenders.iter().map(|&c| q[c].ready).max().expect("contenders").max(t);
            // Heard back after a round trip, jammed, then the gap.
            self.hub_busy[r] = last + 2 * window + self.c.jam + self.c.ifg;
            for &c in contenders.iter() {
                let f = &mut q[c];
                f.attempts += 1;
                let k = self.rng.below(1u64 << f.attempts.min(10));
                f.ready = self.hub_busy[r] + k * slot;
            }
        }
        if let Some(next) = self.hub_pending[r].iter().map(|f| f.ready).min() {
            self.events.push(next.max(self.hub_busy[r]), Ev::Hub { rail });
        }
    }

    /// The hub's frame `f` reaches node `to`'s NIC from `at` on.
    fn deliver_from_hub(&mut self, at: u64, to: usize, rail: u16, f: &HubFrame) {
        let nic = &mut self.nics[to * self.rails + rail as usize];
        let at = at.max(nic.rx_free);
        nic.rx_free = at + self.c.g_r;
        self.events.push(at, Ev::Host { to: to as u32, rail, from: f.from, tag: f.tag, iter: f.iter });
    }
}
