//! What the protocol's recovery does per barrier in the deterministic
//! simulator: copies, frames counted lost, NACKs, answers, statuses,
//! summed over every node of every instance of a seed budget:
//! `cargo run --release -p barriers --example dst_stats -- FAULTS FIRST COUNT NODES [ALGORITHM]`
//! (faults as `mcd-bench dst` takes them, e.g. `none`, `loss`; the
//! algorithm as `Algorithm`'s `FromStr` reads it, else each seed draws one).
//! Then where the runs' events go, per barrier: messages handled by kind
//! (and how many of them changed nothing the driver sees: nothing sent,
//! nothing told, the same deadline), timeouts (by the core's state), calls,
//! and the world's own (drops at crashed nodes, creations, episodes).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use barriers::sim::{run_seed_with, AppCall, CoreNode, FaultMix, NodeEvent, NodeSpec, Options, SimNode, Transmit};
use barriers::transport::{Msg, NodeId};
use barriers::BarrierStats;

/// The inputs the nodes handled, by kind: where a run's events go.
#[derive(Clone, Copy, Debug, Default)]
struct Inputs {
    /// Messages handled, by kind (in `MsgKind`'s declaration order).
    messages: [u64; 7],
    /// Of those, the ones after which the node sent nothing, told nothing
    /// and kept its deadline.
    idle_messages: [u64; 7],
    /// Timeouts handled.
    timeouts: u64,
    /// Of those, the ones after which the node sent nothing and told nothing.
    idle_timeouts: u64,
    /// Of the idle ones, the ones whose next deadline is the one before.
    same_deadline: u64,
    /// Timeouts by the core's state: joining, a call waiting for a barrier
    /// in progress, a call waiting for something else (the farewell), a
    /// barrier in progress with no call (the application computes, or was
    /// told of a failure and has not called again), none of these.
    timeout_states: [u64; 5],
    /// Application calls.
    calls: u64,
    /// Messages sent as nodes leave (their last words).
    last_words: u64,
}

/// What the last input was, to judge whether it changed anything.
#[derive(Clone, Copy, Debug)]
enum Last {
    None,
    Message(usize, Option<Instant>),
    Timeout(Option<Instant>),
}

/// A core node that adds its counters to `total` when the simulator drops it.
struct Counted {
    node: CoreNode,
    total: Rc<RefCell<BarrierStats>>,
    inputs: Rc<RefCell<Inputs>>,
    last: Last,
    leaving: bool,
}

impl Counted {
    /// A new input: the last one's verdict (it did something, or not) is final.
    fn next_input(&mut self, last: Last) {
        let before = std::mem::replace(&mut self.last, last);
        let mut t = self.inputs.borrow_mut();
        match before {
            Last::None => {}
            Last::Message(k, d) => {
                if d == self.node.poll_timeout() {
                    t.idle_messages[k] += 1;
                }
            }
            Last::Timeout(d) => {
                t.idle_timeouts += 1;
                if d == self.node.poll_timeout() {
                    t.same_deadline += 1;
                }
            }
        }
    }

    /// The last input did something.
    fn acted(&mut self) {
        self.last = Last::None;
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.next_input(Last::None);
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
        let k = msg.kind as usize;
        self.next_input(Last::Message(k, self.node.poll_timeout()));
        self.inputs.borrow_mut().messages[k] += 1;
        self.node.handle_message(now, from, rail, msg, data);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.next_input(Last::Timeout(self.node.poll_timeout()));
        let c = self.node.core();
        let state = match (c.instance() == 0, c.busy(), c.in_progress()) {
            (true, _, _) => 0,
            (_, true, true) => 1,
            (_, true, false) => 2,
            (_, false, true) => 3,
            _ => 4,
        };
        let mut t = self.inputs.borrow_mut();
        t.timeouts += 1;
        t.timeout_states[state] += 1;
        drop(t);
        self.node.handle_timeout(now);
    }
    fn call(&mut self, now: Instant, call: AppCall) {
        self.next_input(Last::None);
        self.inputs.borrow_mut().calls += 1;
        self.node.call(now, call);
    }
    fn poll_transmit(&mut self, data: &mut Vec<u8>) -> Option<Transmit> {
        let t = self.node.poll_transmit(data);
        if t.is_some() {
            self.inputs.borrow_mut().last_words += u64::from(self.leaving);
            self.acted();
        }
        t
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.node.poll_timeout()
    }
    fn poll_event(&mut self) -> Option<NodeEvent> {
        let e = self.node.poll_event();
        if e.is_some() {
            self.acted();
        }
        e
    }
    fn leave(&mut self) {
        self.leaving = true;
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
    let inputs = Rc::new(RefCell::new(Inputs::default()));
    let mut events = 0u64;
    let (mut barriers, mut messages, mut dropped, mut failing, mut end_ns) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut call_ns, mut calls) = (0u64, 0u64);
    for seed in first..first + count {
        let (t, i) = (total.clone(), inputs.clone());
        let (run, v) = run_seed_with(seed, &o, move |spec: &NodeSpec, now| Counted {
            node: CoreNode::new(spec, now),
            total: t.clone(),
            inputs: i.clone(),
            last: Last::None,
            leaving: false,
        });
        barriers += run.stats.barriers;
        events += run.stats.events;
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
    // Where the events go, per barrier (one node's barrier: the soak's count).
    let i = *inputs.borrow();
    let per_barrier = |x: u64| x as f64 * nodes as f64 / barriers.max(1) as f64;
    let names = ["data", "answer", "nack", "status", "join", "admit", "refuse"];
    let handled = i.messages.iter().sum::<u64>() + i.timeouts + i.calls;
    let mut line = format!("events per barrier {:.1}: messages", per_barrier(events));
    for (k, name) in names.iter().enumerate() {
        line += &format!(" {name} {:.1} (idle {:.1})", per_barrier(i.messages[k]), per_barrier(i.idle_messages[k]));
    }
    line += &format!(
        "; timeouts {:.1} (idle {:.1}, deadline kept {:.1}); calls {:.1}; other (drops, creations, thinking, episodes) {:.1}",
        per_barrier(i.timeouts),
        per_barrier(i.idle_timeouts),
        per_barrier(i.same_deadline),
        per_barrier(i.calls),
        per_barrier(events.saturating_sub(handled))
    );
    println!("{line}");
    let s = i.timeout_states.map(per_barrier);
    println!(
        "timeouts per barrier by state: joining {:.1}, a call waiting for a barrier {:.1}, for something else {:.1}, a barrier and no call {:.1}, other {:.1}; last words sent {:.2}",
        s[0],
        s[1],
        s[2],
        s[3],
        s[4],
        per_barrier(i.last_words)
    );
}
