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
use std::collections::BinaryHeap;

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

#[allow(clippy::too_many_lines)]
pub(crate) fn run_plans(what: &str, n: usize, rails: usize, plans: &dyn Fn(usize) -> plan::Plan, s: &Setup, runs: Runs, seed: u64) -> Prediction {
    let p = &s.logp;
    let ft_us = s.link.map_or(0.0, |l| l.frame_us(s.bytes));
    let (o_s, o_r, l_fixed, ft) = (ps(p.o_s), ps(p.o_r), ps((p.l - ft_us).max(0.0)), ps(ft_us));
    let gap = ps(p.g + s.big_g * s.bytes as f64);
    let g_r = ps(s.g_r.max(0.0));
    let rx_irq = ps(s.host.rx_irq.min(p.o_r));
    let tx_irq = ps(s.host.tx_irq);
    let switch = ps(s.host.switch);
    let wake = ps(s.host.wake);
    let per_barrier = ps(s.host.per_barrier);
    let dummy = ps(runs.dummy_us);
    let shared = s.host.oversubscribed();
    let (slot, jam, window) = s.link.map_or((0, 0, 0), |l| (ps(l.slot_us()), ps(l.jam_us()), ps(l.collision_window_us)));
    let hub = s.topology == Topology::Hub;
    // The sender's share of a software bridge's copies beyond the first
    // (which o_s holds): a multicast's to the n − 2 other receivers, a
    // flooded unicast's to the n − 2 ports that drop it.
    let further = n.saturating_sub(2) as f64;
    let o_s_multicast = o_s + ps(s.fanout_us * further);
    let o_s_unicast = o_s + if s.topology == Topology::FloodingBridge { ps(s.flood_us * further) } else { 0 };
    let ifg = s.link.map_or(0, |l| ps(l.ifg_us()));

    // Plans, flattened: per node its steps' sends, its wait counts, and an
    // index from (sender, tag) to the step that waits for it.
    let mut steps_off = vec![0usize; n + 1];
    let mut sends: Vec<Vec<plan::Out>> = Vec::new();
    let mut full: Vec<u32> = Vec::new();
    let mut exp_off = vec![0usize; n + 1];
    let mut expect: Vec<(u32, u16, u32)> = Vec::new();
    for v in 0..n {
        let pl = plans(v);
        let mut idx: Vec<(u32, u16, u32)> = Vec::new();
        for (i, st) in pl.steps.into_iter().enumerate() {
            full.push(st.waits.len() as u32);
            idx.extend(st.waits.iter().map(|w| (w.from as u32, w.tag, i as u32)));
            sends.push(st.sends);
        }
        idx.sort_unstable();
        expect.extend(idx);
        steps_off[v + 1] = full.len();
        exp_off[v + 1] = expect.len();
    }
    let mut pending: Vec<[u32; 2]> = full.iter().map(|&c| [c, c]).collect();

    let nr = n * rails;
    let mut cpu_free = vec![0u64; n];
    let mut tx_gap_free = vec![0u64; nr];
    let mut link_free = vec![0u64; nr];
    let mut port_free = vec![0u64; nr];
    let mut rx_free = vec![0u64; nr];
    let mut rx_handler_end = vec![0u64; nr];
    // The last node need not be on the highest core (3 processes on 2 cores: 0, 1, 0).
    let ncores = if shared { (0..n).map(|v| s.host.core_of(v) + 1).max().unwrap_or(0) } else { 0 };
    let mut core_free = vec![0u64; ncores]; // the end of the current turn
    let mut core_last = vec![u32::MAX; ncores];
    let mut core_current = vec![u32::MAX; ncores];
    let mut runq: Vec<std::collections::VecDeque<u32>> = vec![std::collections::VecDeque::new(); ncores];
    let mut queued = vec![false; n];
    let mut fresh = vec![true; n];
    let mut inbox: Vec<Vec<Waiting>> = vec![Vec::new(); if shared { n } else { 0 }];
    let mut step = vec![0usize; n];
    let mut started = vec![false; n];
    let mut iter = vec![0u32; n];
    let mut enter = vec![0u64; n];
    let mut exit = vec![0u64; n];
    let mut cost_sum = vec![0u64; n];
    let mut cost_max_sum = 0u64; // per iteration, the largest node cost, summed
    let mut iter_max = vec![0u64; runs.iterations as usize];
    let mut hub_busy = vec![0u64; rails];
    let mut hub_pending: Vec<Vec<HubFrame>> = vec![Vec::new(); rails];
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut contenders: Vec<usize> = Vec::new(); // the hub's, reused
    let mut events = Queue::new();
    let (mut messages, mut deliveries) = (0u64, 0u64);

    // Takes `dur` of node v's CPU from `at` on; returns the end. (On shared
    // hosts a node runs only in its turn on its core, see `start_turn`.)
    let acquire = |v: usize, at: u64, dur: u64, cpu_free: &mut [u64]| -> u64 {
        let start = at.max(cpu_free[v]);
        cpu_free[v] = start + dur;
        start + dur
    };

    macro_rules! push {
        ($at:expr, $ev:expr) => {{
            events.push($at, $ev);
        }};
    }

    // Runs node v from where it is as far as it can go.
    macro_rules! run_node {
        ($v:expr) => {{
            let v: usize = $v;
            loop {
                let base = steps_off[v];
                let nsteps = steps_off[v + 1] - base;
                if step[v] == nsteps {
                    let done = if per_barrier > 0 { acquire(v, cpu_free[v], per_barrier, &mut cpu_free) } else { cpu_free[v] };
                    exit[v] = done;
                    let it = iter[v];
                    if it >= runs.warmup {
                        let c = done - enter[v];
                        cost_sum[v] += c;
                        iter_max[it as usize] = iter_max[it as usize].max(c);
                    }
                    let par = (it & 1) as usize;
                    for i in base..base + nsteps {
                        pending[i][par] = full[i];
                    }
                    iter[v] = it + 1;
                    if iter[v] == runs.iterations {
                        break;
                    }
                    enter[v] = if dummy > 0 { acquire(v, done, dummy, &mut cpu_free) } else { done };
                    step[v] = 0;
                    started[v] = false;
                    continue;
                }
                let si = base + step[v];
                if !started[v] {
                    started[v] = true;
                    for out in &sends[si] {
                        let r = out.rail;
                        let nic = v * rails + r;
                        let start = cpu_free[v].max(tx_gap_free[nic]);
                        let cost = if matches!(out.dest, Dest::All) { o_s_multicast } else { o_s_unicast };
                        let done = acquire(v, start, cost, &mut cpu_free);
                        tx_gap_free[nic] = start + gap;
                        let dep = done.max(link_free[nic]);
                        link_free[nic] = dep + ft;
                        messages += 1;
                        let it = iter[v];
                        if hub {
                            let to = match out.dest {
                                Dest::Node(t) => Some(t as u32),
                                Dest::All => None,
                            };
                            hub_pending[r].push(HubFrame { from: v as u32, to, tag: out.tag, iter: it, ready: dep, attempts: 0 });
                            push!(dep.max(hub_busy[r]), Ev::Hub { rail: r as u16 });
                        } else {
                            if tx_irq > 0 {
                                push!(dep + ft, Ev::TxDone { node: v as u32 });
                            }
                            let ev = |t: usize| Ev::Port { to: t as u32, rail: r as u16, from: v as u32, tag: out.tag, iter: it };
                            match out.dest {
                                Dest::Node(t) => push!(dep + l_fixed, ev(t)),
                                Dest::All => {
                                    for t in (0..n).filter(|&t| t != v) {
                                        push!(dep + l_fixed, ev(t));
                                    }
                                }
                            }
                        }
                    }
                }
                if pending[si][(iter[v] & 1) as usize] > 0 {
                    break;
                }
                step[v] += 1;
                started[v] = false;
            }
        }};
    }

    // A delivery taken by node v's CPU at `at` (or later, when it is free).
    macro_rules! take {
        ($v:expr, $at:expr, $rail:expr, $from:expr, $tag:expr, $it:expr) => {{
            let (v, t, rail, from, tag, it): (usize, u64, u16, u32, u16, u32) = ($v, $at, $rail, $from, $tag, $it);
            let i = v * rails + rail as usize;
            let mut cost = if rx_irq > 0 && t < rx_handler_end[i] { o_r - rx_irq } else { o_r };
            if wake > 0 && t >= cpu_free[v] && started[v] && iter[v] < runs.iterations {
                cost += wake; // the node was blocked waiting: the kernel wakes it
            }
            rx_handler_end[i] = acquire(v, t, cost, &mut cpu_free);
            let idx = &expect[exp_off[v]..exp_off[v + 1]];
            let k = idx.partition_point(|e| (e.0, e.1) < (from, tag));
            let st = idx.get(k).filter(|e| (e.0, e.1) == (from, tag)).expect("every message is awaited").2 as usize;
            let si = steps_off[v] + st;
            let par = (it & 1) as usize;
            pending[si][par] -= 1;
            if pending[si][par] == 0 && it == iter[v] && st == step[v] && started[v] {
                run_node!(v);
            }
        }};
    }

    // Shared hosts: core c gives the next runnable process a turn, in which
    // it takes every message waiting for it and runs until it waits again.
    macro_rules! start_turn {
        ($c:expr, $t:expr) => {{
            let (c, t): (usize, u64) = ($c, $t);
            if let Some(v) = runq[c].pop_front() {
                let v = v as usize;
                queued[v] = false;
                let mut start = t.max(cpu_free[v]);
                if core_last[c] != v as u32 {
                    start += switch;
                    core_last[c] = v as u32;
                }
                core_current[c] = v as u32;
                cpu_free[v] = start;
                if fresh[v] {
                    fresh[v] = false;
                    run_node!(v);
                }
                let mut msgs = std::mem::take(&mut inbox[v]);
                for &(rail, from, tag, it, _) in &msgs {
                    take!(v, start, rail, from, tag, it);
                }
                msgs.clear();
                inbox[v] = msgs;
                core_free[c] = cpu_free[v];
                push!(cpu_free[v], Ev::CoreFree { core: c as u32 });
            }
        }};
    }

    if shared {
        for v in 0..n {
            queued[v] = true;
            runq[s.host.core_of(v)].push_back(v as u32);
        }
        for c in 0..ncores {
            start_turn!(c, 0);
        }
    } else {
        for v in 0..n {
            run_node!(v);
        }
    }
    while let Some((t, ev)) = events.pop() {
        match ev {
            Ev::Port { to, rail, from, tag, iter: it } => {
                let i = to as usize * rails + rail as usize;
                let out = t.max(port_free[i]);
                port_free[i] = out + ft;
                let nic = (out + ft).max(rx_free[i]);
                rx_free[i] = nic + g_r;
                push!(nic, Ev::Host { to, rail, from, tag, iter: it });
            }
            Ev::Host { to, rail, from, tag, iter: it } => {
                deliveries += 1;
                let v = to as usize;
                if shared {
                    let c = s.host.core_of(v);
                    if core_current[c] == to {
                        // Its turn goes on: it takes this one too.
                        take!(v, t, rail, from, tag, it);
                        core_free[c] = cpu_free[v];
                        push!(cpu_free[v], Ev::CoreFree { core: c as u32 });
                    } else {
                        inbox[v].push((rail, from, tag, it, t));
                        if !queued[v] {
                            queued[v] = true;
                            runq[c].push_back(to);
                        }
                        if core_current[c] == u32::MAX {
                            start_turn!(c, t);
                        }
                    }
                } else {
                    take!(v, t, rail, from, tag, it);
                }
            }
            Ev::CoreFree { core } => {
                let c = core as usize;
                if t != core_free[c] || core_current[c] == u32::MAX {
                    continue;
                }
                core_current[c] = u32::MAX;
                start_turn!(c, t);
            }
            Ev::TxDone { node } => {
                acquire(node as usize, t, tx_irq, &mut cpu_free);
            }
            Ev::Hub { rail } => {
                let r = rail as usize;
                let q = &mut hub_pending[r];
                if t < hub_busy[r] || q.is_empty() {
                    continue;
                }
                let first = q.iter().map(|f| f.ready).min().expect("not empty");
                if first > t {
                    continue;
                }
                // Contenders: the head frame of every NIC ready within the window.
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
                    let end = t + ft;
                    hub_busy[r] = end;
                    if tx_irq > 0 {
                        push!(end, Ev::TxDone { node: f.from });
                    }
                    let mut deliver = |to: usize, events: &mut Queue<Ev>| {
                        let i = to * rails + r;
                        let nic = (end + l_fixed).max(rx_free[i]);
                        rx_free[i] = nic + g_r;
                        events.push(nic, Ev::Host { to: to as u32, rail, from: f.from, tag: f.tag, iter: f.iter });
                    };
                    match f.to {
                        Some(to) => deliver(to as usize, &mut events),
                        None => (0..n).filter(|&to| to != f.from as usize).for_each(|to| deliver(to, &mut events)),
                    }
                } else {
                    let last = contenders.iter().map(|&c| q[c].ready).max().expect("contenders").max(t);
                    // Heard back after a round trip, jammed, then the gap.
                    hub_busy[r] = last + 2 * window + jam + ifg;
                    for &c in &contenders {
                        let f = &mut q[c];
                        f.attempts += 1;
                        let k = rng.below(1u64 << f.attempts.min(10));
                        f.ready = hub_busy[r] + k * slot;
                    }
                }
                let q = &hub_pending[r];
                if let Some(next) = q.iter().map(|f| f.ready).min() {
                    push!(next.max(hub_busy[r]), Ev::Hub { rail });
                }
            }
        }
    }
    assert!(iter.iter().all(|&i| i == runs.iterations), "{what} n={n}: a node never finished");
    let measured = (runs.iterations - runs.warmup).max(1) as f64;
    for m in &iter_max {
        cost_max_sum += m;
    }
    let last_exit = if runs.iterations == 1 { *exit.iter().max().expect("n ≥ 1") as f64 / PS } else { cost_max_sum as f64 / PS / measured };
    let mean_cost = cost_sum.iter().sum::<u64>() as f64 / PS / measured / n as f64;
    Prediction {
        last_exit,
        mean_exit: if runs.iterations == 1 { exit.iter().sum::<u64>() as f64 / PS / n as f64 } else { mean_cost },
        mean_cost,
        messages: messages / runs.iterations as u64,
        deliveries: deliveries / runs.iterations as u64,
    }
}
