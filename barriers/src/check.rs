//! The safety checker: each node records, on one monotonic clock, when it
//! entered and left each barrier; barrier k is safe when its latest entry
//! precedes its earliest exit.

use std::time::Instant;

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
        let (last_in, last_in_node) =
            timelines.iter().enumerate().map(|(n, t)| (t.barriers[k].0, n)).max().expect("nodes");
        let (first_out, first_out_node) =
            timelines.iter().enumerate().map(|(n, t)| (t.barriers[k].1, n)).min().expect("nodes");
        if first_out < last_in {
            violations.push(Violation { barrier: k, left: first_out_node, not_entered: last_in_node });
        }
    }
    (violations, count)
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
