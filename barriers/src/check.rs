//! The safety checker: each node records, on one monotonic clock, when it
//! entered and left each barrier; barrier k is safe when its latest entry
//! precedes its earliest exit. [`run_barriers_with`] runs a workload on one
//! thread per node and records exactly that.

use std::time::{Duration, Instant};

use crate::{threads, BarrierConfig, BarrierStats, NodeId, Transport};

/// One node's entry and exit times, barrier by barrier.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// (entered, left) per barrier, in order.
    pub barriers: Vec<(Instant, Instant)>,
}

impl Timeline {
    /// Records one barrier.
    pub fn record(&mut self, entered: Instant, left: Instant) {
        self.barriers.push((entered, left));
    }
}

/// A barrier some node left before another entered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The barrier's number.
    pub barrier: usize,
    /// The node that left early.
    pub left: usize,
    /// The node that had not entered yet.
    pub not_entered: usize,
}

/// Checks every barrier the nodes all completed: returns the violations (none
/// when safe), and the number of barriers checked.
pub fn check(timelines: &[Timeline]) -> (Vec<Violation>, usize) {
    let count = timelines.iter().map(|t| t.barriers.len()).min().unwrap_or(0);
    let mut violations = Vec::new();
    for k in 0..count {
        let (last_in, last_in_node) = timelines.iter().enumerate().map(|(n, t)| (t.barriers[k].0, n)).max().expect("nodes");
        let (first_out, first_out_node) = timelines.iter().enumerate().map(|(n, t)| (t.barriers[k].1, n)).min().expect("nodes");
        if first_out < last_in {
            violations.push(Violation { barrier: k, left: first_out_node, not_entered: last_in_node });
        }
    }
    (violations, count)
}

/// What one run of barriers across nodes produced.
#[derive(Debug)]
pub struct BarrierRun {
    /// Each node's entry and exit times.
    pub timelines: Vec<Timeline>,
    /// Each node's barrier counters.
    pub stats: Vec<BarrierStats>,
}

impl BarrierRun {
    /// Checks that all `count` barriers completed on every node and that
    /// none let a node leave before every node had entered it.
    pub fn verify(&self, count: usize) -> Result<(), String> {
        let (violations, checked) = check(&self.timelines);
        if checked != count {
            return Err(format!("{checked} of {count} barriers completed on every node"));
        }
        match violations.first() {
            Some(v) => Err(format!("{} safety violation(s), first {v:?}", violations.len())),
            None => Ok(()),
        }
    }
}

/// Runs `count` barriers on every transport, one thread per node, calling
/// `before(node, k)` before node `node` enters barrier k (to compute, sleep
/// or stall), then [`crate::Barrier::finish`]. Returns the first failing
/// node's error.
pub fn run_barriers_with<T, F>(transports: Vec<T>, config: BarrierConfig, count: usize, before: F) -> Result<BarrierRun, String>
where
    T: Transport + Send + 'static,
    F: Fn(NodeId, usize) + Send + Sync + 'static,
{
    let results = threads::run_per_node(transports, config, move |b| {
        let me = b.node();
        let mut timeline = Timeline::default();
        for k in 0..count {
            before(me, k);
            let entered = Instant::now();
            b.wait()?;
            timeline.record(entered, Instant::now());
        }
        Ok((timeline, b.stats()))
    });
    let mut run = BarrierRun { timelines: Vec::new(), stats: Vec::new() };
    for (node, result) in results.into_iter().enumerate() {
        let (timeline, stats) = result.map_err(|e| format!("node {node}: {e}"))?;
        run.timelines.push(timeline);
        run.stats.push(stats);
    }
    Ok(run)
}

/// [`run_barriers_with`], each node spinning for a small random time before
/// one barrier in eight (so arrivals spread).
pub fn run_barriers<T>(transports: Vec<T>, config: BarrierConfig, count: usize) -> Result<BarrierRun, String>
where
    T: Transport + Send + 'static,
{
    run_barriers_with(transports, config, count, |me, k| {
        let r = crate::types::mix((((me as u64) << 32) ^ k as u64).wrapping_add(0x9E37_79B9_7F4A_7C15));
        if r.is_multiple_of(8) {
            let until = Instant::now() + Duration::from_micros(r % 200);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_exit_before_an_entry_is_a_violation() {
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let a = Timeline { barriers: vec![(ms(0), ms(5)), (ms(10), ms(12))] };
        let b = Timeline { barriers: vec![(ms(1), ms(6)), (ms(13), ms(14))] };
        let (violations, checked) = check(&[a, b]);
        assert_eq!(checked, 2);
        assert_eq!(violations, vec![Violation { barrier: 1, left: 0, not_entered: 1 }]);
    }
}
