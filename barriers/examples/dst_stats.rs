//! What the protocol's recovery does per barrier in the deterministic
//! simulator: copies, frames counted lost, NACKs, answers, statuses,
//! summed over every node of every instance of a seed budget:
//! `cargo run --release -p barriers --example dst_stats -- FAULTS FIRST COUNT NODES [ALGORITHM]`
//! (faults as `mcd-bench dst` takes them, e.g. `none`, `loss`; the
//! algorithm as `Algorithm`'s `FromStr` reads it, else each seed draws one).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use barriers::sim::{run_seed_with, AppCall, CoreNode, FaultMix, NodeEvent, NodeSpec, Options, SimNode, Transmit};
use barriers::transport::{Msg, NodeId};
use barriers::BarrierStats;

/// A core node that adds its counters to `total` when the simulator drops it.
struct Counted {
    node: CoreNode,
    total: Rc<RefCell<BarrierStats>>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let s = self.node.core().stats();
        let mut t = self.total.borrow_mut();
        t.completed += s.completed;
        t.sent += s.sent;
        t.copies += s.copies;
        t.lost_counted += s.lost_counted;
        t.nacks_sent += s.nacks_sent;
        t.fast_nacks += s.fast_nacks;
        t.answers += s.answers;
        t.answers_suppressed += s.answers_suppressed;
        t.statuses += s.statuses;
        t.duplicates += s.duplicates;
        t.early += s.early;
    }
}

impl SimNode for Counted {
    fn handle_message(&mut self, now: Instant, from: NodeId, rail: usize, msg: &Msg, data: &[u8]) {
        self.node.handle_message(now, from, rail, msg, data);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.node.handle_timeout(now);
    }
    fn call(&mut self, now: Instant, call: AppCall) {
        self.node.call(now, call);
    }
    fn poll_transmit(&mut self, data: &mut Vec<u8>) -> Option<Transmit> {
        self.node.poll_transmit(data)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.node.poll_timeout()
    }
    fn poll_event(&mut self) -> Option<NodeEvent> {
        self.node.poll_event()
    }
    fn leave(&mut self) {
        self.node.leave();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let faults = args.get(1).map_or("none", String::as_str);
    let first: u64 = args.get(2).map_or(0, |s| s.parse().expect("a seed"));
    let count: u64 = args.get(3).map_or(20, |s| s.parse().expect("a count"));
    let nodes: usize = args.get(4).map_or(8, |s| s.parse().expect("a node count"));
    let algorithm = args.get(5).map(|s| s.parse().expect("an algorithm"));
    let o = Options { faults: FaultMix::parse(faults).expect("faults"), nodes: Some(nodes), algorithm, trace: 0, ..Options::default() };
    let total = Rc::new(RefCell::new(BarrierStats::default()));
    let (mut barriers, mut messages, mut dropped, mut failing, mut end_ns) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut call_ns, mut calls) = (0u64, 0u64);
    for seed in first..first + count {
        let t = total.clone();
        let (run, v) = run_seed_with(seed, &o, move |spec: &NodeSpec, now| Counted { node: CoreNode::new(spec, now), total: t.clone() });
        barriers += run.stats.barriers;
        messages += run.stats.messages;
        dropped += run.stats.dropped;
        end_ns += run.stats.end_ns;
        for r in run.ops.iter().flatten().flatten() {
            if let (Some(e), Some(l)) = (r.entered, r.left) {
                call_ns += l - e;
                calls += 1;
            }
        }
        failing += u64::from(!v.is_empty());
        if std::env::var_os("DST_STATS_SLOWEST").is_some() {
            // The slowest call of the seed (entered to left, any node), and its config.
            let slowest = run.ops.iter().flatten().flatten().filter_map(|r| Some(r.left? - r.entered?)).max().unwrap_or(0);
            let finish = run.finishes.iter().flatten().filter_map(|r| Some(r.left? - r.entered?)).max().unwrap_or(0);
            let join = run.joins.iter().filter_map(|j| Some(j.record.left? - j.record.entered?)).max().unwrap_or(0);
            println!(
                "{}: slowest call {} µs, finish {} µs, join {} µs, loss {}",
                run.config.summary(),
                slowest / 1000,
                finish / 1000,
                join / 1000,
                run.config.faults.loss
            );
        }
    }
    let t = *total.borrow();
    let per = |x: u64| x as f64 / barriers.max(1) as f64;
    println!(
        "faults {faults}, n = {nodes}, seeds {first}..{}: {barriers} barriers, {failing} failing, {:.2} µs a call (mean, entered to left, every node), {:.1} virtual µs a barrier (the runs' time, calls' gaps, joins and finishes included); per barrier (all nodes): \
         frames {:.2} dropped {:.3} copies {:.3} lost-counted {:.3} nacks {:.3} (fast {:.3}) answers {:.3} statuses {:.3} duplicates {:.3}",
        first + count,
        call_ns as f64 / calls.max(1) as f64 / 1000.0,
        per(end_ns) / 1000.0,
        per(messages),
        per(dropped),
        per(t.copies),
        per(t.lost_counted),
        per(t.nacks_sent),
        per(t.fast_nacks),
        per(t.answers),
        per(t.statuses),
        per(t.duplicates)
    );
}
