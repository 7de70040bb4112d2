//! The UDP baseline of the collectives benchmark across a virtual cluster:
//! over the namespaces' veth links and bridge, its allreduce and broadcast
//! give the reference result on every node (the benchmark's own loop checks
//! every call, with and without a barrier between calls, at one datagram and
//! at IP-fragmented sizes), and no node leaves an allreduce before every
//! node has entered it. Five nodes: not a power of two (the fold), more
//! than this machine's cores (yielding). Needs root; fails (does not skip)
//! without it.

use std::net::SocketAddrV4;
use std::time::Instant;

use barriers::check::{check, Timeline};
use mcd_bench::udpbarrier::UdpGroup;
use mcd_bench::udpcollectives::{self, CollectiveBench};
use mcd_integration_tests::cluster;
use mcd_vcluster::ClusterSpec;

#[test]
fn udp_allreduce_and_bcast_are_right_on_every_node_of_a_virtual_cluster() {
    let c = cluster(ClusterSpec::new("udpc", 5));
    let sizes = [8, 1448, 4096];
    for sync in [true, false] {
        let bench = CollectiveBench { warmup: 10, iterations: 100, sync };
        let lines = udpcollectives::measure(&c, &sizes, bench).expect("UDP collectives");
        assert_eq!(lines.len(), 2 * sizes.len(), "{lines:?}");
        for (l, (bytes, collective)) in lines.iter().zip(sizes.iter().flat_map(|&b| [(b, "allreduce"), (b, "bcast")])) {
            assert_eq!((l.collective.as_str(), l.bytes, l.ranks, l.iterations, l.sync), (collective, bytes, 5, 100, sync), "{l:?}");
            assert!(l.correct, "a wrong result: {l:?}");
            assert!(0.0 < l.p50_us && l.p50_us <= l.p99_us && l.p99_us <= l.max_us && l.mean_us <= l.max_us, "{l:?}");
        }
    }

    // On the shared clock: every allreduce's last entry precedes its first exit.
    let n = c.nodes();
    let peers: Vec<SocketAddrV4> = (0..n).map(|i| SocketAddrV4::new(c.ip(i, 0), udpcollectives::UDP_COLLECTIVES_PORT)).collect();
    let groups: Vec<UdpGroup> = (0..n)
        .map(|node| {
            let _ns = c.enter(node).expect("enter namespace");
            UdpGroup::bind(node, peers.clone(), 64, true).expect("bind")
        })
        .collect();
    let threads: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            std::thread::spawn(move || {
                let mut timeline = Timeline::default();
                for k in 0..200 {
                    let mut x = [g.rank() as f64, k as f64];
                    let entered = Instant::now();
                    g.allreduce_sum_f64(&mut x).map_err(|e| format!("node {}: {e:#}", g.rank()))?;
                    timeline.record(entered, Instant::now());
                    if x != [10.0, 5.0 * k as f64] {
                        return Err(format!("node {}: {x:?} in allreduce {k}", g.rank()));
                    }
                }
                Ok(timeline)
            })
        })
        .collect();
    let timelines: Vec<Timeline> = threads.into_iter().map(|t| t.join().expect("thread").expect("allreduces")).collect();
    let (violations, checked) = check(&timelines);
    assert_eq!(checked, 200);
    assert!(violations.is_empty(), "{violations:?}");
}
