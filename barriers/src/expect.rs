//! What a node's plan waits for, indexed once, and which of it has arrived:
//! a bitmap per barrier (the current one and the next), and a count of what
//! each step still misses. No hashing and no allocation per message.

use crate::plan::Plan;
use crate::transport::NodeId;

/// The messages a plan waits for, numbered in plan order (step by step).
#[derive(Clone, Debug)]
pub(crate) struct Expectations {
    /// `entries[start[p]..start[p + 1]]`: what node `p` sends this node, as
    /// (tag, index).
    start: Vec<u32>,
    entries: Vec<(u16, u32)>,
    /// The step each index belongs to.
    step_of: Vec<u32>,
    /// The first index of each step (and one past the last).
    step_start: Vec<u32>,
}

impl Expectations {
    /// Indexes `plan`'s waits among `n` nodes.
    pub(crate) fn new(plan: &Plan, n: usize) -> Expectations {
        let mut by_sender: Vec<Vec<(u16, u32)>> = vec![Vec::new(); n];
        let mut step_of = Vec::new();
        let mut step_start = vec![0];
        for (s, step) in plan.steps.iter().enumerate() {
            for w in &step.waits {
                by_sender[w.from].push((w.tag, step_of.len() as u32));
                step_of.push(s as u32);
            }
            step_start.push(step_of.len() as u32);
        }
        let mut start = Vec::with_capacity(n + 1);
        let mut entries = Vec::new();
        for list in by_sender {
            start.push(entries.len() as u32);
            entries.extend(list);
        }
        start.push(entries.len() as u32);
        Expectations { start, entries, step_of, step_start }
    }

    /// How many messages the plan waits for.
    pub(crate) fn len(&self) -> usize {
        self.step_of.len()
    }

    /// The index of the message `tag` from `from`, if the plan waits for it.
    pub(crate) fn index(&self, from: NodeId, tag: u16) -> Option<usize> {
        let (a, b) = (*self.start.get(from)? as usize, *self.start.get(from + 1)? as usize);
        self.entries[a..b].iter().find(|&&(t, _)| t == tag).map(|&(_, i)| i as usize)
    }

    /// The step of index `i`.
    pub(crate) fn step_of(&self, i: usize) -> usize {
        self.step_of[i] as usize
    }

    /// The indices of step `s`'s waits, in plan order.
    pub(crate) fn of_step(&self, s: usize) -> std::ops::Range<usize> {
        self.step_start[s] as usize..self.step_start[s + 1] as usize
    }
}

/// Which expected messages of one barrier have arrived.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bits(Vec<u64>);

impl Bits {
    pub(crate) fn new(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)])
    }

    /// Sets bit `i`; false if it was set already.
    pub(crate) fn insert(&mut self, i: usize) -> bool {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        let new = self.0[word] & bit == 0;
        self.0[word] |= bit;
        new
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }

    pub(crate) fn clear(&mut self) {
        self.0.iter_mut().for_each(|w| *w = 0);
    }

    /// The set bits, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut word = word;
            std::iter::from_fn(move || {
                if word == 0 {
                    return None;
                }
                let bit = word.trailing_zeros() as usize;
                word &= word - 1;
                Some(w * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{build, Algorithm};

    #[test]
    fn every_wait_of_every_plan_has_one_index_and_the_right_step() {
        for algorithm in Algorithm::all() {
            for n in [1, 2, 3, 5, 8, 13, 32] {
                for me in 0..n {
                    let plan = build(algorithm, n, me, 2).unwrap();
                    let x = Expectations::new(&plan, n);
                    let mut seen = Bits::new(x.len());
                    for (s, step) in plan.steps.iter().enumerate() {
                        for (j, w) in step.waits.iter().enumerate() {
                            let i = x.index(w.from, w.tag).expect("indexed");
                            assert_eq!(i, x.of_step(s).start + j, "{algorithm} n={n} node {me}");
                            assert_eq!(x.step_of(i), s);
                            assert!(seen.insert(i), "{algorithm} n={n}: one index per wait");
                        }
                    }
                    assert_eq!(seen.iter().count(), x.len());
                    // Nothing else is expected: not from itself, not an unknown tag, not a node out of range.
                    assert_eq!(x.index(me, 0), None);
                    assert_eq!(x.index(n, 0), None);
                    assert!((0..n).all(|p| x.index(p, u16::MAX).is_none()));
                }
            }
        }
    }

    #[test]
    fn bits_insert_once_clear_and_list_in_order() {
        let mut b = Bits::new(130);
        assert!(b.insert(129) && b.insert(0) && b.insert(64));
        assert!(!b.insert(64), "a second insert is a duplicate");
        assert!(b.contains(129) && !b.contains(1));
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 64, 129]);
        b.clear();
        assert_eq!(b.iter().count(), 0);
    }
}
