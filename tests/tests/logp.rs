//! The LogP measurement tool on a virtual cluster: it settles, and what it
//! reports is self-consistent. Needs root; fails (does not skip) without it.

use mcd::WaitPolicy;
use mcd_bench::logp::{measure_hops_on_cluster, measure_on_cluster, Effort, Stat};
use mcd_integration_tests::cluster;
use mcd_vcluster::ClusterSpec;

fn ordered(s: &Stat, what: &str) {
    assert!(s.p10 > 0.0 && s.p10 <= s.median && s.median <= s.p90, "{what}: {s:?}");
}

#[test]
fn logp_parameters_of_mcd_and_udp_are_measured_and_consistent() {
    let c = cluster(ClusterSpec::new("logp", 2));
    let ms =
        measure_on_cluster(&c, &[WaitPolicy::BusyPoll, WaitPolicy::Block], Effort { samples: 300, burst: 50 }, true, |_| {}).expect("measurement");
    assert_eq!(ms.len(), 4, "mcd and udp, two policies each");
    for m in &ms {
        let what = format!("{} {}", m.transport, m.wait);
        for (s, name) in [(&m.o_s, "o_s"), (&m.o_r, "o_r"), (&m.g, "g"), (&m.rtt_half, "rtt/2")] {
            ordered(s, &format!("{what} {name}"));
        }
        assert!((3..=10).contains(&m.rounds), "{what}: {} rounds", m.rounds);
        assert!((m.l - (m.rtt_half.median - m.o_s.median - m.o_r.median)).abs() < 1e-9);
        let p = m.logp();
        assert!(p.l >= 0.0 && p.o_s > 0.0 && p.o_r > 0.0 && p.g > 0.0, "{what}: {p:?}");
    }
}

/// The parameters `mcd-bench validate --measure` takes before each row:
/// LogP in a barrier's hops, on the endpoints the rows open (two rails,
/// `Adaptive`). Every message reached the echo's interface, the send call
/// of each ping is part of its round trip, and too few samples are refused.
#[test]
fn hop_parameters_are_measured_on_the_rows_endpoints() {
    const SAMPLES: usize = 200;
    let c = cluster(ClusterSpec::new("lph", 2).rails(2));
    let before = rx_packets(&c, 1);
    let m = measure_hops_on_cluster(&c, WaitPolicy::Adaptive, SAMPLES, std::time::Duration::from_micros(30)).expect("measurement");
    // At least: the timed and untimed pings, the requests, 10 bursts of 100, the quit.
    let sent = (SAMPLES + SAMPLES / 10 + SAMPLES / 2 + 10 * 100 + 1) as u64;
    let arrived = rx_packets(&c, 1) - before;
    assert!(arrived >= sent, "{arrived} frames reached the echo, {sent} were sent");
    assert_eq!((m.wait.as_str(), m.rounds), ("adaptive", 1));
    for (s, name) in [(&m.o_s, "o_s"), (&m.o_r, "o_r"), (&m.g, "g"), (&m.rtt_half, "rtt/2")] {
        ordered(s, name);
    }
    // Each ping's send call ends before its pong arrives: sample by sample,
    // so the medians too.
    assert!(m.o_s.median <= 2.0 * m.rtt_half.median, "{m:?}");
    assert!((m.l - (m.rtt_half.median - m.o_s.median - m.o_r.median)).abs() < 1e-9);
    let err = measure_hops_on_cluster(&c, WaitPolicy::Adaptive, 5, std::time::Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("10 samples"), "{err}");
}

/// The packets `node`'s rail-0 interface has received, from `ip -s -j link`.
fn rx_packets(c: &mcd_vcluster::Cluster, node: usize) -> u64 {
    let out = std::process::Command::new("ip").args(["-n", &c.namespace(node), "-s", "-j", "link", "show", "eth0"]).output().expect("ip -s link");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j prints JSON");
    v[0]["stats64"]["rx"]["packets"].as_u64().expect("rx packets")
}

/// What the model's flooding bridge stands on: a hub cluster's unicasts
/// reach every node's interface, whose socket filter drops them (no
/// endpoint sees a frame not addressed to it), while a learning bridge's
/// stop at their destination; and the send-cost measurement reports per
/// port count and bridge.
#[test]
fn a_virtual_hub_floods_unicasts_that_other_nodes_drop() {
    use mcd::Destination;
    use mcd_vcluster::Topology;
    const SENDS: u64 = 50;
    for (name, topology) in [("flh", Topology::Hub), ("fls", Topology::Switch)] {
        let c = cluster(ClusterSpec::new(name, 4).topology(topology));
        let mut eps = mcd_integration_tests::open_all(&c);
        let mut buf = [0u8; 256];
        // Node 1 makes itself known to a learning bridge.
        eps[1].send(0, Destination::Node(0), mcd::kind::logp::SINK, 0, &[]).unwrap();
        assert!(eps[0].recv(&mut buf, Some(std::time::Duration::from_secs(2))).unwrap().is_some());
        let before = rx_packets(&c, 2);
        for seq in 1..=SENDS {
            eps[0].send(0, Destination::Node(1), mcd::kind::logp::SINK, seq as u32, &[0u8; 8]).unwrap();
        }
        for _ in 0..SENDS {
            let m = eps[1].recv(&mut buf, Some(std::time::Duration::from_secs(2))).unwrap().expect("node 1 gets every unicast");
            assert_eq!(m.from, 0);
        }
        let reached = rx_packets(&c, 2) - before;
        match topology {
            Topology::Hub => assert!(reached >= SENDS, "{name}: a hub floods every unicast to node 2 ({reached} frames)"),
            Topology::Switch => assert!(reached < SENDS, "{name}: a learning bridge sends node 1's unicasts to node 1 only ({reached} at node 2)"),
        }
        assert!(eps[2].try_recv(&mut buf).unwrap().is_none(), "{name}: node 2's filter drops frames for node 1");
        drop(eps);
        let cost = mcd_bench::logp::send_cost_on_cluster(&c, 100).expect("send cost");
        assert_eq!((cost.ports, cost.topology), (4, topology));
        ordered(&cost.unicast, "unicast send");
        ordered(&cost.multicast, "multicast send");
    }
}
