//! The event queue: events ordered by (virtual time, sequence number), so
//! a seed replays exactly. The heap holds 16-byte keys; the events wait in
//! a slab whose slots are reused, so an event costs no allocation once the
//! run has warmed up, and the heap moves keys, not events.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The bits of a key's low word that hold the event's slot (the sequence
/// number takes the rest: 2^40 events a run).
const SLOT_BITS: u32 = 24;

/// Events of type `E` by (time, sequence).
#[derive(Debug)]
pub(super) struct Queue<E> {
    /// (time << 64 | sequence << SLOT_BITS | slot), least first.
    heap: BinaryHeap<Reverse<u128>>,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
    seq: u64,
}

impl<E> Queue<E> {
    pub(super) fn new() -> Queue<E> {
        Queue { heap: BinaryHeap::new(), slab: Vec::new(), free: Vec::new(), seq: 0 }
    }

    /// Queues `ev` at time `t`, after every event queued before at `t`.
    pub(super) fn push(&mut self, t: u64, ev: E) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(ev);
                s
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        assert!(slot < 1 << SLOT_BITS, "more than 2^24 events pending");
        self.seq += 1;
        let low = self.seq << SLOT_BITS | u64::from(slot);
        self.heap.push(Reverse(u128::from(t) << 64 | u128::from(low)));
    }

    /// The earliest event, and its time.
    pub(super) fn pop(&mut self) -> Option<(u64, E)> {
        let Reverse(key) = self.heap.pop()?;
        let slot = (key as u64 & ((1 << SLOT_BITS) - 1)) as u32;
        self.free.push(slot);
        let ev = self.slab[slot as usize].take().expect("a queued event");
        Some(((key >> 64) as u64, ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_by_time_then_in_the_order_queued_and_slots_are_reused() {
        let mut q = Queue::new();
        for (t, e) in [(5, 'a'), (3, 'b'), (5, 'c'), (0, 'd'), (3, 'e')] {
            q.push(t, e);
        }
        let mut got = Vec::new();
        while let Some(x) = q.pop() {
            got.push(x);
            if x.1 == 'b' {
                q.push(3, 'f'); // after every event queued before at 3
            }
        }
        assert_eq!(got, [(0, 'd'), (3, 'b'), (3, 'e'), (3, 'f'), (5, 'a'), (5, 'c')]);
        assert!(q.slab.len() <= 5, "slots reused: {}", q.slab.len());
    }
}
