//! The trace of a run: the last K events of every node, kept in a ring
//! per node, printed when a checker fails.

use std::fmt;

use crate::plan::Dest;
use crate::transport::{Msg, MsgKind, NodeId};

/// Why a message did not arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropCause {
    /// Lost on the link (independent or burst loss).
    Lost,
    /// The nodes were partitioned.
    Partitioned,
    /// The receiver had crashed.
    Crashed,
    /// The receiver had no barrier (between instances).
    NoBarrier,
}

/// What happened at a node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TraceEvent {
    /// It sent `msg` (with `len` bytes of data).
    Sent {
        /// Where.
        dest: Dest,
        /// The rail.
        rail: usize,
        /// What.
        msg: Msg,
        /// Data bytes.
        len: usize,
    },
    /// `msg` from `from` arrived.
    Received {
        /// The sender.
        from: NodeId,
        /// What.
        msg: Msg,
        /// Data bytes.
        len: usize,
    },
    /// A message from `from` to this node did not arrive.
    Dropped {
        /// The sender.
        from: NodeId,
        /// What.
        msg: Msg,
        /// Why.
        cause: DropCause,
    },
    /// Its deadline passed.
    Timeout,
    /// Its application called operation `op` of instance `instance`.
    Call {
        /// The instance (its number in the run).
        instance: usize,
        /// The operation's index in the script (`usize::MAX`: finish).
        op: usize,
        /// What it called.
        what: &'static str,
    },
    /// It was created for `instance` with `incarnation`.
    Created {
        /// The instance.
        instance: usize,
        /// Its incarnation.
        incarnation: u64,
    },
    /// Its application was told: joined, completed, or failed
    /// (`error` indexes the run's error texts).
    Told {
        /// Joined (0), completed (1), failed (2).
        what: u8,
        /// The error's index, when failed.
        error: usize,
    },
    /// A fault began or ended.
    Fault {
        /// What.
        what: &'static str,
    },
}

/// One node's last events.
#[derive(Clone, Debug)]
pub struct Ring {
    entries: Vec<(u64, TraceEvent)>,
    next: usize,
    cap: usize,
}

impl Ring {
    /// Keeps the last `cap` events.
    pub fn new(cap: usize) -> Ring {
        Ring { entries: Vec::with_capacity(cap), next: 0, cap }
    }

    /// Records `event` at virtual time `t` (ns).
    pub fn push(&mut self, t: u64, event: TraceEvent) {
        if self.cap == 0 {
            return;
        }
        // A spin's timeouts at one instant: one entry.
        if event == TraceEvent::Timeout {
            let last = (self.next + self.cap - 1) % self.cap;
            if self.entries.get(last).is_some_and(|&(at, e)| at == t && e == TraceEvent::Timeout) {
                return;
            }
        }
        if self.entries.len() < self.cap {
            self.entries.push((t, event));
        } else {
            self.entries[self.next] = (t, event);
        }
        self.next = (self.next + 1) % self.cap;
    }

    /// The events, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &(u64, TraceEvent)> {
        let (a, b) = if self.entries.len() < self.cap {
            (&self.entries[..], &self.entries[..0])
        } else {
            (&self.entries[self.next..], &self.entries[..self.next])
        };
        a.iter().chain(b.iter())
    }
}

fn kind(k: MsgKind) -> &'static str {
    match k {
        MsgKind::Data => "data",
        MsgKind::Answer => "answer",
        MsgKind::Nack => "nack",
        MsgKind::Status => "status",
        MsgKind::Join => "join",
        MsgKind::Admit => "admit",
        MsgKind::Refuse => "refuse",
    }
}

/// A message, short: `data e5 t1 a0 i…ab12`.
pub struct Short<'a>(pub &'a Msg);

impl fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{} e{} t{} a{} i…{:04x}", kind(m.kind), m.epoch, m.tag, m.arg, m.instance & 0xFFFF)
    }
}

impl TraceEvent {
    /// Writes it for a reader; `errors` holds the run's error texts.
    pub fn describe(&self, errors: &[String]) -> String {
        match self {
            TraceEvent::Sent { dest: Dest::All, rail, msg, len } => format!("send all r{rail} {} +{len}B", Short(msg)),
            TraceEvent::Sent { dest: Dest::Node(to), rail, msg, len } => format!("send →{to} r{rail} {} +{len}B", Short(msg)),
            TraceEvent::Received { from, msg, len } => format!("recv ←{from} {} +{len}B", Short(msg)),
            TraceEvent::Dropped { from, msg, cause } => format!("DROP ←{from} {} ({cause:?})", Short(msg)),
            TraceEvent::Timeout => "timeout".into(),
            TraceEvent::Call { instance, op, what } if *op == usize::MAX => format!("CALL inst {instance} {what}"),
            TraceEvent::Call { instance, op, what } => format!("CALL inst {instance} op {op}: {what}"),
            TraceEvent::Created { instance, incarnation } => format!("CREATE inst {instance} incarnation {incarnation:#x}"),
            TraceEvent::Told { what: 0, .. } => "TOLD joined".into(),
            TraceEvent::Told { what: 1, .. } => "TOLD completed".into(),
            TraceEvent::Told { error, .. } => format!("TOLD failed: {}", errors.get(*error).map_or("?", |s| s.as_str())),
            TraceEvent::Fault { what } => format!("FAULT {what}"),
        }
    }
}
