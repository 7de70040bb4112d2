//! What the simulator drives: one node's protocol state for one barrier
//! instance, behind [`SimNode`], a sans-IO interface (time is passed in,
//! messages and deadlines are polled out). [`crate::sim::CoreNode`]
//! implements it on the engine's core; tests implement it on toy nodes.

use std::time::Instant;

use crate::plan::{Algorithm, Dest};
use crate::transport::{Msg, NodeId};
use crate::{BarrierConfig, BarrierError};

/// A message a node sends (its data, if any, comes in the buffer the
/// simulator passed to [`SimNode::poll_transmit`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transmit {
    /// The rail.
    pub rail: usize,
    /// One node, or every other node.
    pub dest: Dest,
    /// The message.
    pub msg: Msg,
}

/// What the application asks of a node.
#[derive(Clone, Debug, PartialEq)]
pub enum AppCall {
    /// A collective (a barrier too) with this node's input:
    /// native-endian elements, empty for a barrier, a buffer of the
    /// data's length at a broadcast's non-roots.
    Collective {
        /// What.
        call: crate::Collective,
        /// This node's input.
        input: Vec<u8>,
    },
    /// The split-phase barrier's enter: no event unless it fails;
    /// [`AppCall::Wait`] completes it.
    Enter,
    /// Wait for the entered split-phase barrier: one
    /// [`NodeEvent::Completed`] (or [`NodeEvent::Failed`]).
    Wait,
    /// The closing barrier: completes once no peer needs this node.
    Finish,
}

impl AppCall {
    /// What it is, in a word (for traces).
    pub fn name(&self) -> &'static str {
        match self {
            AppCall::Collective { call: crate::Collective::Barrier, .. } => "barrier",
            AppCall::Collective { call: crate::Collective::Allreduce { .. }, .. } => "allreduce",
            AppCall::Collective { call: crate::Collective::Reduce { .. }, .. } => "reduce",
            AppCall::Collective { call: crate::Collective::Bcast { .. }, .. } => "bcast",
            AppCall::Enter => "enter",
            AppCall::Wait => "wait",
            AppCall::Finish => "finish",
        }
    }
}

/// What a node tells its application.
#[derive(Debug)]
pub enum NodeEvent {
    /// Every node joined: the instance runs.
    Joined {
        /// The agreed instance (which processes share a barrier: a
        /// restarted process may join the one its peers made for their
        /// next instance).
        instance: u64,
    },
    /// The current call completed (for a split-phase [`AppCall::Enter`]:
    /// the barrier completed), with the collective's result if it has one
    /// here.
    Completed {
        /// The result (native-endian), for a collective with one.
        result: Option<Vec<u8>>,
    },
    /// The current call (or the join) failed.
    Failed(BarrierError),
}

/// How a node is made.
#[derive(Clone, Copy, Debug)]
pub struct NodeSpec {
    /// Its number.
    pub node: NodeId,
    /// The number of nodes.
    pub nodes: usize,
    /// Its rails.
    pub rails: usize,
    /// Its random incarnation (new for every instance, and on restart).
    pub incarnation: u64,
    /// The barrier's configuration (the same on every node).
    pub config: BarrierConfig,
    /// The most data one message carries.
    pub max_data: usize,
}

impl NodeSpec {
    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.config.algorithm
    }
}

/// One node's protocol state for one instance, driven by the simulator.
pub trait SimNode {
    /// `msg` (with `data`) arrived from `from` on `rail` at `now`.
    fn handle_message(&mut self, now: Instant, from: NodeId, rail: usize, msg: &Msg, data: &[u8]);
    /// The deadline [`poll_timeout`](Self::poll_timeout) gave has passed: it is `now`.
    fn handle_timeout(&mut self, now: Instant);
    /// The application calls `call` at `now`.
    fn call(&mut self, now: Instant, call: AppCall);
    /// The next message to send, if any; its data (a collective's
    /// contribution; none for most) is appended to `data`, which the
    /// simulator passes empty (a buffer it reuses: no allocation per message).
    fn poll_transmit(&mut self, data: &mut Vec<u8>) -> Option<Transmit>;
    /// When [`handle_timeout`](Self::handle_timeout) is due next, if ever.
    fn poll_timeout(&self) -> Option<Instant>;
    /// The next event for the application, if any.
    fn poll_event(&mut self) -> Option<NodeEvent>;
    /// The application drops the node (after its finish, or after an
    /// error): a last word to peers, if it has one, is polled after.
    fn leave(&mut self) {}
    /// Whether the node completed a barrier of its instance (of either
    /// barrier of a pair): node 0 then refuses a restarted process in
    /// place of any node (the checkers judge its refusals by it).
    fn completed_any(&self) -> bool {
        false
    }
}

/// Makes a node: the simulator calls it at every instance's start, and
/// on every restart.
pub trait NodeFactory {
    /// The node it makes.
    type Node: SimNode;
    /// A node for `spec`, created at `now`.
    fn make(&mut self, spec: &NodeSpec, now: Instant) -> Self::Node;
}

impl<N: SimNode, F: FnMut(&NodeSpec, Instant) -> N> NodeFactory for F {
    type Node = N;
    fn make(&mut self, spec: &NodeSpec, now: Instant) -> N {
        self(spec, now)
    }
}
