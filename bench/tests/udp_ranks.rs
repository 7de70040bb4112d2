//! The collectives benchmark's UDP baseline as it runs there: one
//! `mcd-bench udp-rank` process per node of a virtual cluster (three: not a
//! power of two), started at once, each binding in its namespace and
//! waiting for the others; every call's result right on every rank, with
//! and without a barrier between calls, at one datagram and beyond. Needs
//! root; fails (does not skip) without it.

use mcd_bench::udpcollectives::{self, CollectiveBench};
use mcd_vcluster::{Cluster, ClusterSpec};

#[test]
fn udp_ranks_as_processes_give_right_results_in_coll_bench_lines() {
    let cluster = Cluster::up_guarded(ClusterSpec::new("udpr", 3)).expect("this test needs a virtual cluster (root, iproute2)");
    let program = [env!("CARGO_BIN_EXE_mcd-bench").to_string(), "udp-rank".to_string()];
    let sizes = [8, 4096];
    for sync in [true, false] {
        let bench = CollectiveBench { warmup: 10, iterations: 100, sync };
        let lines = udpcollectives::measure_processes(&cluster, &program, &sizes, bench).expect("UDP ranks");
        let what: Vec<(&str, usize, usize, bool, bool)> =
            lines.iter().map(|l| (l.collective.as_str(), l.bytes, l.ranks, l.sync, l.correct)).collect();
        assert_eq!(
            what,
            [("allreduce", 8, 3, sync, true), ("bcast", 8, 3, sync, true), ("allreduce", 4096, 3, sync, true), ("bcast", 4096, 3, sync, true)]
        );
        assert!(lines.iter().all(|l| 0.0 < l.p50_us && l.p50_us <= l.p99_us && l.p99_us <= l.max_us), "{lines:?}");
    }
    // Without its rank, a process says what it is for.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcd-bench"))
        .args(["udp-rank", "--peers", "10.0.0.1,10.0.0.2", "--sizes", "8", "--iterations", "1", "--warmup", "0"])
        .env_remove("MCD_RANK")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("MCD_RANK is not set"), "{}", String::from_utf8_lossy(&out.stderr));
}
