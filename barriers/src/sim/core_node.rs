//! [`SimNode`] on the engine's sans-IO core ([`crate::core::Core`]): the
//! adapter does what the blocking driver ([`crate::Barrier`]) does around
//! the core — a collective in segments of whole elements, each one
//! `EnterCollective`, `WaitResult` and `collective_result` — and nothing
//! else, so the simulator runs the protocol the applications run.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::node::{AppCall, NodeEvent, NodeSpec, SimNode, Transmit};
use crate::collective::{wire, Collective};
use crate::core::{Call, Core, Event, Plans, Setup, To};
use crate::plan::Dest;
use crate::transport::{Msg, NodeId};
use crate::BarrierError;

/// The plans a core of `setup` and `config` runs, shared by every core of
/// this thread with the same (they never change: [`Core::plans`]). A
/// simulated node makes a core per instance and per restart, and building
/// its plans (one per broadcast and reduce root) cost as much as a barrier.
fn shared_plans(setup: Setup, config: &crate::BarrierConfig) -> Arc<Plans> {
    /// The most plan sets kept: every (node, node count, rails, algorithm)
    /// of a campaign at up to 12 nodes (about 1,100), so that they are
    /// built once per campaign, not once per seed. (With 64 kept, first in
    /// first out, the 112 sets of n = 8 alone evicted each other, and a
    /// quarter of the cores built their plans again.)
    const KEPT: usize = 2048;
    type Key = (usize, usize, usize, usize, bool, crate::plan::Algorithm);
    thread_local! {
        static CACHE: RefCell<HashMap<Key, Arc<Plans>>> = RefCell::new(HashMap::new());
    }
    let key: Key = (setup.me, setup.nodes, setup.rails, config.rails, setup.max_data > 0, config.algorithm);
    CACHE.with_borrow_mut(|cache| {
        if let Some(plans) = cache.get(&key) {
            return Arc::clone(plans);
        }
        let plans = Core::plans(setup, config).expect("a valid simulated configuration");
        if cache.len() == KEPT {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&plans));
        plans
    })
}

/// What the adapter waits for from the core.
#[derive(Debug)]
enum Pending {
    /// Nothing.
    Idle,
    /// A plain call (wait, finish): its `Done` completes it.
    Plain,
    /// A collective's segment starting at `start`: entering it (`entered`
    /// false), then waiting for its result.
    Segment { call: Collective, start: usize, end: usize, entered: bool },
}

/// A node on the engine's core.
#[derive(Debug)]
pub struct CoreNode {
    core: Core,
    now: Instant,
    pending: Pending,
    input: Vec<u8>,
    output: Vec<u8>,
    result_here: bool,
    events: VecDeque<NodeEvent>,
    max_data: usize,
}

impl CoreNode {
    /// A node of `spec` at `now`, joining at once.
    pub fn new(spec: &NodeSpec, now: Instant) -> CoreNode {
        let mut node = CoreNode::unjoined(spec, now);
        node.core.join(spec.incarnation, now);
        node
    }

    /// A node of `spec` at `now`, joining at once for itself and for a
    /// barrier configured as `beside` that runs beside it
    /// ([`Core::join_beside`]; see [`super::PairNode`]).
    pub(crate) fn joining_beside(spec: &NodeSpec, now: Instant, beside: &crate::BarrierConfig) -> CoreNode {
        let mut node = CoreNode::unjoined(spec, now);
        node.core.join_beside(spec.incarnation, now, beside);
        node
    }

    /// A node of `spec` at `now` that does not join: it runs the instance
    /// it is told ([`Core::joined`]), as a barrier made beside another.
    pub(crate) fn unjoined(spec: &NodeSpec, now: Instant) -> CoreNode {
        let setup = Setup { me: spec.node, nodes: spec.nodes, rails: spec.rails, multicast: true, max_data: spec.max_data };
        let plans = shared_plans(setup, &spec.config);
        let core = Core::with_plans(setup, spec.config, plans, now).expect("a valid simulated configuration");
        CoreNode {
            core,
            now,
            pending: Pending::Idle,
            input: Vec::new(),
            output: Vec::new(),
            result_here: false,
            events: VecDeque::new(),
            max_data: spec.max_data,
        }
    }

    /// The core (its counters, its epoch).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The core, for the driver of a pair ([`super::PairNode`]).
    pub(crate) fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn fail(&mut self, e: BarrierError) {
        self.pending = Pending::Idle;
        self.events.push_back(NodeEvent::Failed(e));
    }

    /// Starts the segment of the current collective that begins at `start`.
    fn segment(&mut self, call: Collective, start: usize) {
        let size = call.element_size();
        let per = self.max_data.saturating_sub(wire::HEADER_LEN) / size * size;
        if per == 0 {
            return self.fail(BarrierError::NoData { call });
        }
        let end = (start + per).min(self.input.len());
        let count = u32::try_from((end - start) / size).expect("a segment's count");
        self.pending = Pending::Segment { call, start, end, entered: false };
        let input = &self.input[start..end];
        if start > 0 {
            self.core.next_segment();
        }
        let more = end < self.input.len();
        self.core.start(self.now, Call::EnterCollective { call, count, more, input, deadline: None });
    }

    /// The core said its call is done.
    fn done(&mut self, result: Result<(), BarrierError>) {
        if let Err(e) = result {
            return self.fail(e);
        }
        match std::mem::replace(&mut self.pending, Pending::Idle) {
            Pending::Idle => self.events.push_back(NodeEvent::Failed(BarrierError::Internal("UNEXPECTED: a Done with no call".into()))),
            Pending::Plain => self.events.push_back(NodeEvent::Completed { result: None }),
            Pending::Segment { call, start, end, entered: false } => {
                self.pending = Pending::Segment { call, start, end, entered: true };
                self.core.start(self.now, Call::WaitResult { deadline: None });
            }
            Pending::Segment { call, start, end, entered: true } => {
                let out = self.result_here.then_some(&mut self.output[start..end]);
                if let Err(e) = self.core.collective_result(out) {
                    return self.fail(e);
                }
                if end < self.input.len() {
                    return self.segment(call, end);
                }
                if let Err(e) = self.core.deferred_mismatch() {
                    return self.fail(e);
                }
                let result = self.result_here.then(|| std::mem::take(&mut self.output));
                self.events.push_back(NodeEvent::Completed { result });
            }
        }
    }

    /// Takes in the core's events (mostly there are none: checked inline,
    /// the rest out of line, so that every poll does not pay its frame).
    #[inline]
    fn collect(&mut self) {
        if self.core.has_event() {
            self.collect_events();
        }
    }

    #[inline(never)]
    fn collect_events(&mut self) {
        while let Some(e) = self.core.poll_event() {
            match e {
                Event::Joined { instance } => self.events.push_back(NodeEvent::Joined { instance }),
                Event::JoinFailed(e) => self.events.push_back(NodeEvent::Failed(e)),
                Event::Done(r) => self.done(r),
            }
        }
    }
}

impl SimNode for CoreNode {
    fn handle_message(&mut self, now: Instant, from: NodeId, rail: usize, msg: &Msg, data: &[u8]) {
        self.now = now;
        self.core.handle(now, from, rail, *msg, data);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.core.handle_timeout(now);
    }

    fn call(&mut self, now: Instant, call: AppCall) {
        self.now = now;
        match call {
            AppCall::Collective { call: Collective::Barrier, .. } | AppCall::Wait => {
                self.pending = Pending::Plain;
                self.core.start(now, Call::Wait { deadline: None });
            }
            AppCall::Enter => {
                if let Err(e) = self.core.enter(now) {
                    self.events.push_back(NodeEvent::Failed(e));
                }
            }
            AppCall::Finish => {
                self.pending = Pending::Plain;
                self.core.start(now, Call::Finish);
            }
            AppCall::Collective { call, input } => {
                let me = self.core.me();
                self.result_here = match call {
                    Collective::Reduce { root, .. } => root == me,
                    _ => true,
                };
                self.output.clear();
                self.output.resize(input.len(), 0);
                self.input = input;
                if self.input.is_empty() {
                    return self.fail(BarrierError::Misuse(format!("{call} of nothing")));
                }
                self.segment(call, 0);
            }
        }
    }

    fn poll_transmit(&mut self, data: &mut Vec<u8>) -> Option<Transmit> {
        self.collect();
        let t = self.core.poll_transmit()?;
        let dest = match t.to {
            To::Node(n) => Dest::Node(n),
            To::All => Dest::All,
        };
        data.extend_from_slice(t.data);
        Some(Transmit { rail: t.rail, dest, msg: t.msg })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<NodeEvent> {
        self.collect();
        self.events.pop_front()
    }

    fn leave(&mut self) {
        self.core.leave();
    }

    fn completed_any(&self) -> bool {
        self.core.completed_any()
    }
}
