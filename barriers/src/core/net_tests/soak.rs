//! What the simulator's soak found (`sim::seeds`), each as the smallest
//! case among a few nodes' cores over [`Net`], in virtual time: the
//! protocol's behaviour, one regression a test.

use std::time::Duration;

use super::Net;
use crate::collective::{Collective, Dtype, Op};
use crate::core::Call;
use crate::engine::{BarrierConfig, BarrierError};
use crate::plan::Algorithm;

#[test]
fn calls_of_different_lengths_cut_into_as_many_full_segments_disagree_at_the_last() {
    // Soak seed 11173 (n = 8, one-phase, 64-byte messages: 13 u32 a
    // segment): nodes 3 and 7 called an allreduce of 286 elements, the
    // others 287. The first 22 segments agreed in every field; nodes 3 and
    // 7 returned Ok from their last, and met the others' 23rd segment as
    // a mismatch only in their next call. Here: one segment each, node
    // `short`'s call ends with it, the others' go on.
    let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::U32 };
    let input = 1u32.to_ne_bytes();
    for algorithm in Algorithm::all().into_iter().filter(|a| sum.runs_on(*a)) {
        for short in [0, 2] {
            let config = BarrierConfig::new(algorithm).timeouts(Duration::from_millis(1), Duration::from_millis(500));
            let mut net = Net::new(3, config);
            for p in 0..3 {
                net.call(p, Call::EnterCollective { call: sum, count: 1, more: p != short, input: &input, deadline: None });
                assert!(matches!(net.done[p], Some(Ok(()))), "{:?}", net.done[p]);
                net.call(p, Call::WaitResult { deadline: None });
            }
            net.run_until(net.now + Duration::from_secs(2));
            for p in 0..3 {
                // (A call whose wait completed meets the mismatch as its result.)
                if let Some(Ok(())) = net.done[p] {
                    net.done[p] = Some(net.cores[p].collective_result(None));
                }
                match &net.done[p] {
                    Some(Err(BarrierError::CollectiveMismatch { .. })) => {}
                    other => panic!("{algorithm}, node {short}'s call ends first: node {p} returned {other:?}"),
                }
            }
        }
    }
}
