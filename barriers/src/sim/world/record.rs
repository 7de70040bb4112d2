//! What a run records, for the checkers and the trace: each call's and
//! join's outcome, where each node's application ended, the counters.

use super::super::faults::Episode;
use super::super::trace::Ring;
use super::super::workload::ScriptOp;
use super::super::SimConfig;
use super::Clock;
use crate::transport::NodeId;
use crate::BarrierError;

/// What an operation's call came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Not (yet) completed.
    Pending,
    /// Completed, with the result if the call has one here.
    Ok(Option<Vec<u8>>),
    /// Failed.
    Err(Verdict),
}

/// An error, as the checkers judge it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Peers named dead for their silence.
    Silent(Vec<NodeId>),
    /// A live peer (`reporter`) gave up because `silent` was silent.
    Failed {
        /// Who said so.
        reporter: NodeId,
        /// Whom it named.
        silent: NodeId,
    },
    /// Nodes called different collectives.
    Mismatch,
    /// Node 0 refused this node's join (a restarted process).
    Refused,
    /// Nodes did not join in time.
    JoinTimeout(Vec<NodeId>),
    /// Anything else (a deadline, a usage error, a transport error): the
    /// simulator never causes one.
    Other,
}

impl Verdict {
    /// Classifies an error.
    pub fn of(e: &BarrierError) -> Verdict {
        match e {
            BarrierError::PeerSilent { silent, .. } => Verdict::Silent(silent.clone()),
            BarrierError::PeerFailed { reporter, silent, .. } => Verdict::Failed { reporter: *reporter, silent: *silent },
            BarrierError::CollectiveMismatch { .. } => Verdict::Mismatch,
            BarrierError::Refused { .. } => Verdict::Refused,
            BarrierError::JoinTimeout { missing, .. } => Verdict::JoinTimeout(missing.clone()),
            _ => Verdict::Other,
        }
    }
}

/// One node's call of one operation.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRecord {
    /// When it called (virtual ns).
    pub entered: Option<u64>,
    /// When the call completed or failed.
    pub left: Option<u64>,
    /// What it came to.
    pub outcome: Outcome,
    /// The error's text (an index into [`Run::errors`]).
    pub error: Option<usize>,
}

impl OpRecord {
    pub(super) const NONE: OpRecord = OpRecord { entered: None, left: None, outcome: Outcome::Pending, error: None };
}

/// One node's join of one instance (a restarted process joins again).
#[derive(Clone, Debug, PartialEq)]
pub struct JoinRecord {
    /// The node.
    pub node: NodeId,
    /// The instance.
    pub instance: usize,
    /// 0 for the node's first process in this instance, then 1, 2… after restarts.
    pub life: u32,
    /// The record.
    pub record: OpRecord,
    /// The agreed instance of the barrier it joined (`None`: not joined).
    /// The world's instances are the applications'; a restarted process
    /// runs its instance's script again, and may be admitted into the
    /// barrier its peers made for their next one.
    pub barrier: Option<u64>,
}

/// Where a node's application is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// No barrier: waiting to create the next.
    Idle,
    /// Created, joining.
    Joining,
    /// Computing before operation `op` (`op` = the script's length: before `finish`).
    Think(usize),
    /// In operation `op`.
    InOp(usize),
    /// Entered split-phase barrier `op`, computing before `wait`.
    Entered(usize),
    /// In `finish`.
    Finishing,
    /// Failed: keeps its barrier (it answers peers) until every node is done with the instance.
    Lingering,
    /// Finished the instance; waits for the others.
    Done,
    /// Crashed in the instance.
    Crashed,
}

impl Stage {
    /// Whether the node is done with its instance.
    pub(super) fn done(self) -> bool {
        matches!(self, Stage::Lingering | Stage::Done | Stage::Crashed)
    }
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Operations completed, summed over nodes, divided by the node count
    /// (collective calls, barriers included; finishes excluded).
    pub ops: u64,
    /// Of those, synchronising ones (barriers, split-phase, reductions).
    pub barriers: u64,
    /// Messages sent (a multicast counts once per receiver).
    pub messages: u64,
    /// Messages that did not arrive.
    pub dropped: u64,
    /// Events handled.
    pub events: u64,
    /// Virtual time at the end, ns.
    pub end_ns: u64,
    /// Whether every node got through every instance.
    pub completed: bool,
}

/// Everything a run recorded, for the checkers and the trace.
#[derive(Debug)]
pub struct Run {
    /// The configuration.
    pub config: SimConfig,
    /// The scripts, per instance.
    pub scripts: Vec<Vec<ScriptOp>>,
    /// `ops[instance][op][node]`.
    pub ops: Vec<Vec<Vec<OpRecord>>>,
    /// `finishes[instance][node]`.
    pub finishes: Vec<Vec<OpRecord>>,
    /// `inputs[instance][op][node]`: the input the node's application
    /// called the operation with (empty: it never called it, or the
    /// operation takes none), kept for the checker's reference fold so that
    /// it need not draw them again (they are [`super::super::workload::input`]'s).
    pub inputs: Vec<Vec<Vec<Vec<u8>>>>,
    /// Every join.
    pub joins: Vec<JoinRecord>,
    /// When node 0's joining process of each instance first heard a
    /// node's join request: (instance, node, ns). (With loss, a live node
    /// may go unheard: a join that times out names it, rightly.)
    pub joins_heard: Vec<(usize, NodeId, u64)>,
    /// When node 0's process in a barrier (by its agreed instance) first
    /// took in a message of a node's in that barrier's instance, or in the
    /// instance of the barrier beside it (a pair's), other than a join's
    /// or a `JOINING` status: (barrier, node, ns). Node 0 must refuse a
    /// process of that node in place of the one it admitted from then on.
    pub heard_by_0: Vec<(u64, NodeId, u64)>,
    /// When node 0's process in a barrier first completed a synchronising
    /// call (of either barrier of a pair): (barrier, ns).
    pub completed_by_0: Vec<(u64, u64)>,
    /// Node 0's refusals of a process in place of the one it admitted:
    /// (barrier, node, ns, whether node 0 had completed a barrier of the
    /// instance then, by its own count).
    pub refused_by_0: Vec<(u64, NodeId, u64, bool)>,
    /// When each instance began (its first creation) and ended (the last node done), ns.
    pub spans: Vec<(u64, u64)>,
    /// The episodes.
    pub episodes: Vec<Episode>,
    /// Every error's text.
    pub errors: Vec<String>,
    /// Where every node's application was at the end.
    pub stages: Vec<(usize, Stage)>,
    /// The last events of every node.
    pub traces: Vec<Ring>,
    /// The nodes' clocks.
    pub clocks: Vec<Clock>,
    /// The counters.
    pub stats: RunStats,
}
