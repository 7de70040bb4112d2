//! What a node's plans wait for, indexed once, and which of it has arrived:
//! a bitmap per barrier (the current one and the next), and a count of what
//! each step still misses. No hashing and no allocation per message.
//!
//! A node has several plans (*variants*: the algorithm's, and a broadcast's
//! from each root), and an epoch runs one of them, chosen by the call. Their
//! waits share one index space, each (sender, tag) once, so a message of the
//! next epoch is kept before this node knows which call that epoch is.

use crate::plan::Plan;
use crate::transport::NodeId;

/// The messages the plans wait for, numbered in plan order (variant by
/// variant, step by step).
#[derive(Clone, Debug)]
pub(crate) struct Expectations {
    /// `entries[start[p]..start[p + 1]]`: what node `p` sends this node, as
    /// (tag, index).
    start: Vec<u32>,
    entries: Vec<(u16, u32)>,
    /// The (variant, step) each index belongs to.
    step_of: Vec<(u32, u32)>,
    /// The first index of each step (and one past the last), steps of all
    /// variants in a row.
    step_start: Vec<u32>,
    /// The first step of each variant in `step_start` (and one past the last).
    variant_start: Vec<u32>,
}

impl Expectations {
    /// Indexes the waits of `plans` (the variants) among `n` nodes; an error
    /// if two variants wait for the same (sender, tag).
    pub(crate) fn new(plans: &[Plan], n: usize) -> Result<Expectations, String> {
        let mut by_sender: Vec<Vec<(u16, u32)>> = vec![Vec::new(); n];
        let mut step_of = Vec::new();
        let mut step_start = vec![0];
        let mut variant_start = vec![0];
        for (v, plan) in plans.iter().enumerate() {
            for (s, step) in plan.steps.iter().enumerate() {
                for w in &step.waits {
                    if by_sender[w.from].iter().any(|&(t, _)| t == w.tag) {
                        return Err(format!("two waits for tag {} from node {}", w.tag, w.from));
                    }
                    by_sender[w.from].push((w.tag, step_of.len() as u32));
                    step_of.push((v as u32, s as u32));
                }
                step_start.push(step_of.len() as u32);
            }
            variant_start.push(step_start.len() as u32 - 1);
        }
        let mut start = Vec::with_capacity(n + 1);
        let mut entries = Vec::new();
        for list in by_sender {
            start.push(entries.len() as u32);
            entries.extend(list);
        }
        start.push(entries.len() as u32);
        Ok(Expectations { start, entries, step_of, step_start, variant_start })
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

    /// The (variant, step) of index `i`.
    pub(crate) fn step_of(&self, i: usize) -> (usize, usize) {
        let (v, s) = self.step_of[i];
        (v as usize, s as usize)
    }

    /// The indices of variant `v`'s step `s`'s waits, in plan order.
    pub(crate) fn of_step(&self, v: usize, s: usize) -> std::ops::Range<usize> {
        let g = (self.variant_start[v] + s as u32) as usize;
        self.step_start[g] as usize..self.step_start[g + 1] as usize
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
    use crate::plan::{build, build_bcast, Algorithm, Plan};

    #[test]
    fn every_wait_of_every_plan_has_one_index_and_the_right_step() {
        for algorithm in Algorithm::all() {
            for n in [1, 2, 3, 5, 8, 13, 32] {
                for me in 0..n {
                    // The algorithm's plan, a broadcast's from every root,
                    let mut plans = vec![build(algorithm, n, me, 2).unwrap()];
                    plans.extend((0..n).map(|root| build_bcast(n, me, root, 2).unwrap()));
                    // And a gather-first reduce's to every root, as the core has them.
                    if crate::plan::reduce_gathers(n) {
                        plans.extend((0..n).map(|root| crate::plan::build_reduce(n, me, root, 2).unwrap()));
                    }
                    let x = Expectations::new(&plans, n).unwrap();
                    let mut seen = Bits::new(x.len());
                    for (v, plan) in plans.iter().enumerate() {
                        for (s, step) in plan.steps.iter().enumerate() {
                            for (j, w) in step.waits.iter().enumerate() {
                                let i = x.index(w.from, w.tag).expect("indexed");
                                assert_eq!(i, x.of_step(v, s).start + j, "{algorithm} n={n} node {me}");
                                assert_eq!(x.step_of(i), (v, s));
                                assert!(seen.insert(i), "{algorithm} n={n}: one index per wait");
                            }
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
        let twice = build(Algorithm::Concurrent, 3, 0, 1).unwrap();
        assert!(Expectations::new(&[twice.clone(), twice], 3).unwrap_err().contains("two waits"));
        assert!(Expectations::new(&[Plan::default()], 3).unwrap().len() == 0);
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
