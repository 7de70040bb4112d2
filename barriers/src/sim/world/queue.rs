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
    /// An empty queue with room for `events` pending (a run's queue grew
    /// from nothing by doubling, every seed).
    pub(super) fn with_capacity(events: usize) -> Queue<E> {
        Queue { heap: BinaryHeap::with_capacity(events), slab: Vec::with_capacity(events), free: Vec::with_capacity(events), seq: 0 }
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

    /// The earliest event, and its time, without taking it.
    pub(super) fn peek(&self) -> Option<(u64, &E)> {
        let Reverse(key) = self.heap.peek()?;
        let slot = (*key as u64 & ((1 << SLOT_BITS) - 1)) as usize;
        Some(((key >> 64) as u64, self.slab[slot].as_ref().expect("a queued event")))
    }

    /// Takes the earliest event and queues it again at `t`, after every
    /// event queued before: the same order as [`pop`](Self::pop) then
    /// [`push`](Self::push) of the same event (same slot, next sequence
    /// number), in one sift of the heap and with no move of the event.
    pub(super) fn requeue_first(&mut self, t: u64) {
        let Some(mut top) = self.heap.peek_mut() else { return };
        let slot = top.0 as u64 & ((1 << SLOT_BITS) - 1);
        self.seq += 1;
        top.0 = u128::from(t) << 64 | u128::from(self.seq << SLOT_BITS | slot);
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
        let mut q = Queue::with_capacity(0);
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

    #[test]
    fn an_event_queued_again_in_place_comes_where_a_pop_and_push_would_put_it() {
        // The same pushes into two queues; the earliest event queued again
        // at 7 in one, popped and pushed at 7 in the other.
        let (mut a, mut b) = (Queue::with_capacity(0), Queue::with_capacity(0));
        for (t, e) in [(2, 'a'), (7, 'b'), (9, 'c'), (3, 'd')] {
            a.push(t, e);
            b.push(t, e);
        }
        assert_eq!(a.peek(), Some((2, &'a')));
        a.requeue_first(7);
        let (_, e) = b.pop().unwrap();
        b.push(7, e);
        for (t, e) in [(7, 'e'), (5, 'f')] {
            a.push(t, e);
            b.push(t, e);
        }
        let drain = |q: &mut Queue<char>| std::iter::from_fn(|| q.pop()).collect::<Vec<_>>();
        let got = drain(&mut a);
        assert_eq!(got, drain(&mut b));
        assert_eq!(got, [(3, 'd'), (5, 'f'), (7, 'b'), (7, 'a'), (7, 'e'), (9, 'c')]);
    }

    #[test]
    fn many_events_come_in_the_order_of_a_sorted_list_whatever_the_pushes_pops_and_requeues() {
        // A reference: every pending event by (time, the count of pushes
        // and requeues when it was queued), the least first.
        let (mut q, mut model) = (Queue::with_capacity(0), std::collections::BTreeMap::new());
        let (mut x, mut count, mut id, mut now) = (0x9E37_79B9_7F4A_7C15u64, 0u64, 0u64, 0u64);
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let r = next();
            if r % 3 != 0 || model.is_empty() {
                // Times close together (many ties) and far apart.
                let t = now + if r & 8 == 0 { (r >> 8) % 4 } else { (r >> 8) % 10_000 };
                (count, id) = (count + 1, id + 1);
                q.push(t, id);
                model.insert((t, count), id);
            } else if r % 7 == 0 {
                // Queued again, later: after every event queued before then.
                let ((t, _), e) = model.pop_first().unwrap();
                assert_eq!(q.peek(), Some((t, &e)));
                let later = t + (r >> 8) % 50;
                q.requeue_first(later);
                count += 1;
                model.insert((later, count), e);
            } else {
                let ((t, _), e) = model.pop_first().unwrap();
                assert_eq!(q.pop(), Some((t, e)));
                now = t;
            }
        }
        while let Some(((t, _), e)) = model.pop_first() {
            assert_eq!(q.pop(), Some((t, e)));
        }
        assert_eq!(q.pop(), None);
    }
}
