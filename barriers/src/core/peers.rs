//! A table of per-peer state, indexed by node, that holds only the peers a
//! node has dealt with: blocks of [`BLOCK`] entries, each made the first time
//! one of its entries is written. Reading an entry of a block never written
//! gives the blank state.
//!
//! Why: a node's state of a peer it never hears from (most of them, in a
//! tree at a thousand nodes) is the blank state, and a simulator that runs
//! every node's core in one process would otherwise hold n tables of n
//! entries (4,096 nodes: 16.7 million entries, about 3.7 GB). A block is
//! made at most once per core, never per message.

use std::ops::{Index, IndexMut};

use crate::transport::NodeId;

/// Entries per block.
const BLOCK: usize = 16;

/// Per-peer state of `len` peers (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct PerPeer<T> {
    blocks: Vec<Option<Box<[T; BLOCK]>>>,
    len: usize,
    blank: T,
}

impl<T: Copy + Default> PerPeer<T> {
    /// `len` peers, each in the blank state (`T::default()`); no block yet.
    pub(super) fn new(len: usize) -> PerPeer<T> {
        PerPeer { blocks: vec![None; len.div_ceil(BLOCK)], len, blank: T::default() }
    }

    /// The number of peers (nodes).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Peer `i`'s state, if `i` is a node.
    pub(super) fn get(&self, i: NodeId) -> Option<&T> {
        (i < self.len).then(|| &self[i])
    }

    /// `f` on every entry written so far (and the blank others of its
    /// block). (Nested loops, not a chain of iterator adapters: this runs at
    /// every completed barrier.)
    pub(super) fn for_each_mut(&mut self, mut f: impl FnMut(&mut T)) {
        let len = self.len;
        for (b, block) in self.blocks.iter_mut().enumerate() {
            if let Some(entries) = block {
                entries[..(len - b * BLOCK).min(BLOCK)].iter_mut().for_each(&mut f);
            }
        }
    }
}

impl<T: Copy + Default> Index<NodeId> for PerPeer<T> {
    type Output = T;

    #[inline]
    fn index(&self, i: NodeId) -> &T {
        assert!(i < self.len, "node {i} of {}", self.len);
        match &self.blocks[i / BLOCK] {
            Some(block) => &block[i % BLOCK],
            None => &self.blank,
        }
    }
}

impl<T: Copy + Default> IndexMut<NodeId> for PerPeer<T> {
    #[inline]
    fn index_mut(&mut self, i: NodeId) -> &mut T {
        assert!(i < self.len, "node {i} of {}", self.len);
        let b = i / BLOCK;
        if self.blocks[b].is_none() {
            self.make(b);
        }
        &mut self.blocks[b].as_mut().expect("a block just made")[i % BLOCK]
    }
}

impl<T: Copy + Default> PerPeer<T> {
    /// Makes block `b`, every entry blank (out of line: once per block and
    /// core; the blank state is copied only here, not at every write).
    #[cold]
    #[inline(never)]
    fn make(&mut self, b: usize) {
        self.blocks[b] = Some(Box::new([self.blank; BLOCK]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_blank_until_written_and_only_written_blocks_are_made() {
        let mut t: PerPeer<u32> = PerPeer::new(40);
        assert_eq!(t.len(), 40);
        assert_eq!(t[39], 0);
        assert_eq!(t.get(40), None);
        t[17] = 5;
        t[39] = 7;
        assert_eq!((t[17], t[16], t[39], t.get(39)), (5, 0, 7, Some(&7)));
        // Blocks 16..32 and 32..40 exist; 0..16 does not.
        assert_eq!(t.blocks.iter().filter(|b| b.is_some()).count(), 2);
        let mut count = 0;
        t.for_each_mut(|_| count += 1);
        assert_eq!(count, 16 + 8, "the last block stops at the last node");
        t.for_each_mut(|x| *x += 1);
        assert_eq!((t[17], t[16], t[39], t[0]), (6, 1, 8, 0));
    }

    #[test]
    #[should_panic(expected = "node 3 of 3")]
    fn a_node_beyond_the_table_is_a_bug() {
        let t: PerPeer<u8> = PerPeer::new(3);
        let _ = t[3];
    }
}
