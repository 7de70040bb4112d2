//! The faults a simulated run suffers: per-message faults on every link
//! (independent and bursty loss, duplication, reordering, delays drawn
//! from a distribution with a tail) and episodes (partitions that heal,
//! pauses, crashes followed by restarts, clocks that run fast or slow).

use std::fmt;

use super::rng::Rng;
use crate::transport::NodeId;

/// Which faults a run may suffer; a seed draws the details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Independent loss, 0.1% to 30%.
    Loss,
    /// Bursty loss (Gilbert–Elliott: a link in its bad state loses most messages).
    Burst,
    /// Duplicated messages.
    Duplicate,
    /// Reordering: some messages take far longer than the rest.
    Reorder,
    /// Partitions of the nodes in two, healing before or after the failure timeout.
    Partition,
    /// A node stops (SIGSTOP, a long page fault) shorter or longer than the failure timeout.
    Pause,
    /// A node crashes, and its process restarts (a new incarnation).
    Crash,
    /// Some nodes' clocks run fast or slow.
    Skew,
    /// Deliberately mismatched calls (every node must fail that call).
    Mismatch,
    /// Instances created right after the last one's `finish` on each node,
    /// without waiting for the others.
    BackToBack,
    /// Not a fault: every node runs a pair of barriers joined as
    /// [`crate::PreparedBarrier::join_with`] joins them (a communicator's
    /// barrier and its collectives' beside it: [`super::PairNode`]). Never
    /// drawn by `mix` (not in [`FaultKind::ALL`], so the mix's seeds run as
    /// before), and kept in every seed of a list with it, subset or not.
    Pair,
}

impl FaultKind {
    /// Every fault kind (what `mix` draws from; [`FaultKind::Pair`], a way
    /// of running rather than a fault, is apart).
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Loss,
        FaultKind::Burst,
        FaultKind::Duplicate,
        FaultKind::Reorder,
        FaultKind::Partition,
        FaultKind::Pause,
        FaultKind::Crash,
        FaultKind::Skew,
        FaultKind::Mismatch,
        FaultKind::BackToBack,
    ];

    /// Whether a node may be silent (crashed, paused, partitioned away):
    /// then errors naming it are right.
    pub fn silences(self) -> bool {
        matches!(self, FaultKind::Partition | FaultKind::Pause | FaultKind::Crash)
    }

    fn name(self) -> &'static str {
        match self {
            FaultKind::Loss => "loss",
            FaultKind::Burst => "burst",
            FaultKind::Duplicate => "dup",
            FaultKind::Reorder => "reorder",
            FaultKind::Partition => "partition",
            FaultKind::Pause => "pause",
            FaultKind::Crash => "crash",
            FaultKind::Skew => "skew",
            FaultKind::Mismatch => "mismatch",
            FaultKind::BackToBack => "b2b",
            FaultKind::Pair => "pair",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<FaultKind, String> {
        let known = || FaultKind::ALL.into_iter().chain([FaultKind::Pair]);
        known()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown fault `{s}` (one of: {})", known().map(|k| k.name()).collect::<Vec<_>>().join(", ")))
    }
}

/// The faults a run may suffer: a set of [`FaultKind`]s, each seed drawing
/// a subset (`mix`) or all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultMix {
    /// The kinds.
    pub kinds: Vec<FaultKind>,
    /// Each seed draws a random subset of `kinds` (else: all of them).
    pub subset: bool,
}

impl FaultMix {
    /// No faults at all.
    pub fn none() -> FaultMix {
        FaultMix { kinds: Vec::new(), subset: false }
    }

    /// Exactly these.
    pub fn only(kinds: &[FaultKind]) -> FaultMix {
        FaultMix { kinds: kinds.to_vec(), subset: false }
    }

    /// A random subset of every kind per seed.
    pub fn mix() -> FaultMix {
        FaultMix { kinds: FaultKind::ALL.to_vec(), subset: true }
    }

    /// Parses `none`, `mix`, or a comma-separated list of kinds (a list
    /// ending in `,mix` draws a subset of it per seed).
    pub fn parse(s: &str) -> Result<FaultMix, String> {
        match s {
            "none" | "" => return Ok(FaultMix::none()),
            "mix" | "all" => return Ok(FaultMix::mix()),
            _ => {}
        }
        let mut mix = FaultMix::none();
        for part in s.split(',') {
            if part == "mix" {
                mix.subset = true;
            } else {
                mix.kinds.push(part.parse()?);
            }
        }
        Ok(mix)
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kinds.is_empty() {
            return f.write_str("none");
        }
        if *self == FaultMix::mix() {
            return f.write_str("mix");
        }
        let names: Vec<String> = self.kinds.iter().map(|k| k.to_string()).collect();
        write!(f, "{}{}", names.join(","), if self.subset { ",mix" } else { "" })
    }
}

/// Gilbert–Elliott loss on each directed link, in time: a good state
/// losing [`Faults::loss`] and a bad state losing `loss`, each lasting an
/// exponentially distributed time (a burst is a time, not a number of
/// messages: a quiet link's burst does not stretch over seconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Burst {
    /// The mean time in the good state, ns.
    pub good_ns: u64,
    /// The mean time in the bad state (a burst), ns.
    pub bad_ns: u64,
    /// Loss in the bad state.
    pub loss: f64,
}

/// The message faults of a run, drawn from its seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// Independent loss (the good state's, with bursts).
    pub loss: f64,
    /// Bursty loss.
    pub burst: Option<Burst>,
    /// Chance a message arrives twice.
    pub duplicate: f64,
    /// Chance a message is held back by [`reorder_ns`](Self::reorder_ns) (up to).
    pub reorder: f64,
    /// The most a reordered message is held back, ns.
    pub reorder_ns: u64,
    /// Chance a message is a straggler, held back 1 to 20 ms (longer than
    /// a short instance: it may arrive in the next one).
    pub straggle: f64,
    /// The least one-way delay, ns.
    pub latency_ns: u64,
    /// The mean of the exponential jitter above it, ns.
    pub jitter_ns: u64,
}

impl Faults {
    /// A perfect network with a fixed small delay.
    pub fn none() -> Faults {
        Faults { loss: 0.0, burst: None, duplicate: 0.0, reorder: 0.0, reorder_ns: 0, straggle: 0.0, latency_ns: 5_000, jitter_ns: 1_000 }
    }
}

/// A fault that lasts: what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpisodeKind {
    /// `side` cannot reach the rest, nor the rest `side`.
    Partition {
        /// One side.
        side: Vec<NodeId>,
    },
    /// `node` stops (no message handled, no timer) and resumes.
    Pause {
        /// The node.
        node: NodeId,
    },
    /// `node` crashes (its state is lost) and restarts at the end.
    Crash {
        /// The node.
        node: NodeId,
    },
}

/// A fault from `start` to `end` (virtual ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode {
    /// What.
    pub kind: EpisodeKind,
    /// When it begins.
    pub start: u64,
    /// When it heals (the pause ends, the process restarts).
    pub end: u64,
}

impl Episode {
    /// Whether, during it, `a` and `b` could not hear each other.
    pub fn separates(&self, a: NodeId, b: NodeId) -> bool {
        match &self.kind {
            EpisodeKind::Partition { side } => side.contains(&a) != side.contains(&b),
            EpisodeKind::Pause { node } | EpisodeKind::Crash { node } => *node == a || *node == b,
        }
    }
}

impl fmt::Display for Episode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |t: u64| t as f64 / 1e6;
        match &self.kind {
            EpisodeKind::Partition { side } => write!(f, "partition {side:?} | rest"),
            EpisodeKind::Pause { node } => write!(f, "pause node {node}"),
            EpisodeKind::Crash { node } => write!(f, "crash node {node} (restart at the end)"),
        }?;
        write!(f, " from {:.3} ms to {:.3} ms", ms(self.start), ms(self.end))
    }
}

/// Draws the message faults of `kinds`.
pub fn draw_faults(rng: &mut Rng, kinds: &[FaultKind]) -> Faults {
    let mut f = Faults::none();
    f.latency_ns = rng.range(1_000, 50_000);
    f.jitter_ns = rng.range(0, f.latency_ns);
    if kinds.contains(&FaultKind::Loss) {
        f.loss = *rng.pick(&[0.001, 0.01, 0.05, 0.1, 0.2, 0.3]);
    }
    if kinds.contains(&FaultKind::Burst) {
        let bad_ns = *rng.pick(&[20_000, 200_000, 2_000_000]);
        f.burst = Some(Burst { good_ns: bad_ns * rng.range(5, 50), bad_ns, loss: 0.5 + rng.unit() * 0.5 });
    }
    if kinds.contains(&FaultKind::Duplicate) {
        f.duplicate = *rng.pick(&[0.01, 0.1, 0.3]);
    }
    if kinds.contains(&FaultKind::Reorder) {
        f.reorder = *rng.pick(&[0.01, 0.1, 0.3]);
        f.reorder_ns = rng.range(f.latency_ns, 50 * f.latency_ns);
        f.straggle = *rng.pick(&[0.0, 0.001, 0.01]);
    }
    f
}

/// Draws the episodes of `kinds` among `n` nodes within `span` virtual ns
/// from the start, with failure timeout `failure_ns`: some shorter than
/// it (nobody may fail), some longer.
pub fn draw_episodes(rng: &mut Rng, kinds: &[FaultKind], n: usize, span: u64, failure_ns: u64) -> Vec<Episode> {
    let mut out = Vec::new();
    let length = |rng: &mut Rng| -> u64 {
        if rng.chance(0.5) {
            rng.range(failure_ns / 20, failure_ns / 2)
        } else {
            rng.range(failure_ns * 3 / 2, failure_ns * 3)
        }
    };
    for &kind in kinds {
        let count = match kind {
            FaultKind::Partition | FaultKind::Pause => rng.between(1, 2),
            FaultKind::Crash => 1,
            _ => 0,
        };
        for _ in 0..count {
            let start = rng.range(0, span);
            let end = start + length(rng);
            let node = rng.between(0, n - 1);
            let kind = match kind {
                FaultKind::Partition => {
                    let size = rng.between(1, n / 2);
                    let mut side: Vec<NodeId> = (0..n).collect();
                    for j in 0..n {
                        let s = rng.between(j, n - 1);
                        side.swap(j, s);
                    }
                    side.truncate(size);
                    side.sort_unstable();
                    EpisodeKind::Partition { side }
                }
                FaultKind::Pause => EpisodeKind::Pause { node },
                _ => EpisodeKind::Crash { node },
            };
            out.push(Episode { kind, start, end });
        }
    }
    out.sort_by_key(|e| e.start);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_lists_parse_and_print() {
        assert_eq!(FaultMix::parse("mix").unwrap(), FaultMix::mix());
        let m = FaultMix::parse("loss,crash,mix").unwrap();
        assert_eq!(m, FaultMix { kinds: vec![FaultKind::Loss, FaultKind::Crash], subset: true });
        assert_eq!(m.to_string(), "loss,crash,mix");
        assert!(FaultMix::parse("loss,flood").unwrap_err().contains("unknown fault `flood`"));
        assert_eq!(FaultMix::parse("none").unwrap(), FaultMix::none());
        assert_eq!(FaultMix::parse("pair,crash,mix").unwrap().to_string(), "pair,crash,mix");
        assert!(!FaultMix::mix().kinds.contains(&FaultKind::Pair), "the mix's seeds run as before");
    }

    #[test]
    fn a_partition_separates_its_sides_only() {
        let e = Episode { kind: EpisodeKind::Partition { side: vec![1, 3] }, start: 0, end: 1 };
        assert!(e.separates(1, 0) && e.separates(2, 3));
        assert!(!e.separates(1, 3) && !e.separates(0, 2));
    }
}
