//! The LogP measurement tool on a virtual cluster: it settles, and what it
//! reports is self-consistent. Needs root; fails (does not skip) without it.

use mcd::WaitPolicy;
use mcd_integration_tests::cluster;
use mcd_tools::logp::{measure_on_cluster, Effort, Stat};
use mcd_tools::vcluster::ClusterSpec;

fn ordered(s: &Stat, what: &str) {
    assert!(s.p10 > 0.0 && s.p10 <= s.median && s.median <= s.p90, "{what}: {s:?}");
}

#[test]
fn logp_parameters_of_mcd_and_udp_are_measured_and_consistent() {
    let c = cluster(ClusterSpec::new("logp", 2));
    let ms = measure_on_cluster(&c, &[WaitPolicy::BusyPoll, WaitPolicy::Block], Effort { samples: 300, burst: 50 }, true, |_| {})
        .expect("measurement");
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
