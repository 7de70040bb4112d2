//! The barrier microbenchmark end to end: option and file parsing, and a short
//! real sweep on the virtual cluster whose CSV and JSON must be complete and
//! ordered, with no cluster left afterwards. The sweep needs root (it fails,
//! saying so, without it).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_mcd-barrier");

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcd-barrier-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The CSV has a header and `rows` rows of positive, ordered figures.
fn check_csv(dir: &std::path::Path, rows: usize, iterations: usize) {
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + rows, "header + {rows} rows:\n{csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in &lines[1..] {
        let f: Vec<&str> = line.split(',').collect();
        let num = |name: &str| f[col(name)].parse::<f64>().unwrap();
        let (min, mean, max) = (num("min_us"), num("mean_us"), num("max_us"));
        assert!(min > 0.0 && min <= mean && mean <= max, "{line}");
        assert!(num("p50_us") > 0.0 && num("predicted_us") > 0.0, "{line}");
        assert_eq!(num("iterations"), iterations as f64);
    }
}

#[test]
fn bad_options_and_files_are_clear_errors() {
    let dir = scratch("bad");
    let out = Command::new(BIN).args(["--algorithms", "ring"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown algorithm `ring`"));
    let out = Command::new(BIN).args(["--method", "fast"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("paper or osu"));
    let missing = dir.join("missing.json");
    let out = Command::new(BIN).arg("--logp").arg(&missing).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
    std::fs::write(dir.join("junk.json"), "not json").unwrap();
    let out = Command::new(BIN).arg("--logp").arg(dir.join("junk.json")).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not `mcd-logp --json` output"));
    // Meaningless values are refused before any measurement (no cluster, no output).
    for (option, value, says) in [("--iterations", "0", "at least 1"), ("--nodes", "1", "2 to 64"), ("--rails", "0", "at least 1")] {
        let out = Command::new(BIN).args([option, value]).arg("--out").arg(dir.join("never")).output().unwrap();
        assert!(!out.status.success(), "{option} {value} accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{option} {value}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!dir.join("never").exists(), "{option} {value} wrote results");
    }
    // A collective's data is whole doubles; a barrier has none.
    for (args, says) in [
        (&["--collective", "allreduce", "--bytes", "12"][..], "--bytes 12: allreduce runs on doubles: a multiple of 8 from 8 to 1048576"),
        (&["--collective", "bcast", "--bytes", "0"][..], "--bytes 0: bcast runs on doubles"),
        (&["--collective", "reduce", "--bytes", "2097152"][..], "a multiple of 8 from 8 to 1048576"),
        (&["--bytes", "64"][..], "--bytes is the data of --collective allreduce, reduce or bcast, not of a barrier"),
    ] {
        let out = Command::new(BIN).args(args).arg("--out").arg(dir.join("never")).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!dir.join("never").exists(), "{args:?} wrote results");
    }
    // --help explains the collectives.
    let help = String::from_utf8_lossy(&Command::new(BIN).arg("--help").output().unwrap().stdout).to_string();
    assert!(help.contains("--collective allreduce|reduce|bcast --bytes N") && help.contains("whole doubles"), "{help}");
}

/// Runs a short sweep (30 timed barriers, or collectives, 5 warm-up) with
/// the reference LogP parameters and `args` into `dir`; its results.json.
fn sweep(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let logp = dir.join("logp.json");
    std::fs::write(&logp, r#"[{"transport":"mcd","wait":"busy","o_s":{"median":2.7},"o_r":{"median":0.1},"g":{"median":2.7},"l":0.0}]"#).unwrap();
    let out =
        Command::new(BIN).args(["--iterations", "30", "--warmup", "5"]).args(args).arg("--logp").arg(&logp).arg("--out").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

#[test]
fn a_collectives_sweep_times_allreduce_on_the_algorithms_that_reduce() {
    let dir = scratch("collectives");
    let out = Command::new(BIN).args(["--collective", "gather"]).arg("--out").arg(dir.join("never")).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("barrier, allreduce, reduce or bcast"), "{}", String::from_utf8_lossy(&out.stderr));
    let json = sweep(
        &dir,
        &[
            "--nodes",
            "3",
            "--algorithms",
            "dissemination,tree2,onephase,auto",
            "--collective",
            "allreduce",
            "--bytes",
            "800",
            "--cluster-name",
            "h16mb",
        ],
    );
    // Dissemination does not reduce: tree2, onephase and auto's pick remain.
    check_csv(&dir, 3, 30);
    let rows = json["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["collective"] == "allreduce 800 B" && r["bytes"] == 800 && r["algorithm"] != "dissemination"), "{rows:?}");
    // The same outputs as a barrier sweep's, named for the collective.
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert!(csv.lines().next().unwrap().starts_with("collective,bytes,"), "{csv}");
    assert!(csv.lines().skip(1).all(|l| l.starts_with("allreduce,800,")), "{csv}");
    assert!(rows.iter().all(|r| r["p50_us"].as_f64().unwrap() > 0.0 && r["p999_us"].as_f64().unwrap() >= r["p99_us"].as_f64().unwrap()), "{rows:?}");
    assert!(dir.join("allreduce-800B-adaptive.svg").exists() && dir.join("allreduce-800B-adaptive.png").exists());
    let leftovers = mcd_vcluster::Cluster::leftovers("h16mb").unwrap();
    assert!(leftovers.is_empty(), "the sweep's cluster is gone: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_short_sweep_writes_complete_ordered_results_and_leaves_no_cluster() {
    let dir = scratch("sweep");
    let json = sweep(&dir, &["--nodes", "2,4", "--algorithms", "dissemination,auto"]);
    check_csv(&dir, 4, 30);
    assert_eq!(json["rows"].as_array().unwrap().len(), 4);
    assert!(std::fs::read_to_string(dir.join("results.csv")).unwrap().lines().skip(1).all(|l| l.starts_with("barrier,0,")));
    assert!(json["logp"]["o_s"].as_f64().unwrap() > 0.0);
    assert!(dir.join("barrier-adaptive.svg").exists() && dir.join("barrier-adaptive.png").exists());
    let leftovers = mcd_vcluster::Cluster::leftovers("mb").unwrap();
    assert!(leftovers.is_empty(), "the sweep's cluster is gone: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn across_hosts_every_node_runs_and_node_zero_reports() {
    use mcd_vcluster::{Cluster, ClusterSpec};
    let dir = scratch("hosts");
    let cluster = Cluster::up_guarded(ClusterSpec::new("mbh", 3)).expect("this test needs a virtual cluster (root, iproute2)");
    // One process per node, as srun or mpirun would start them.
    let argv: Vec<String> = [BIN, "--across-hosts", "--algorithms", "dissemination,tree2", "--iterations", "40", "--warmup", "5", "--out"]
        .iter()
        .map(|s| s.to_string())
        .chain([dir.display().to_string()])
        .collect();
    let outcomes = cluster.run(&argv, std::time::Duration::from_secs(120)).unwrap();
    for o in &outcomes {
        assert!(o.success(), "node {}: {}{}", o.node, o.stdout, o.stderr);
    }
    assert!(outcomes[0].stdout.contains("3 nodes, hosts, 1 rail(s), wait adaptive"), "{}", outcomes[0].stdout);
    check_csv(&dir, 2, 40);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_per_host_runs_every_rank_as_a_process_flat_and_with_both_releases() {
    let dir = scratch("perhost");
    let out = Command::new(BIN).args(["--ranks-per-host", "2", "--host-release", "carrier"]).arg("--out").arg(dir.join("never")).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("shm, multicast or auto"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join("never").exists());
    // Each rank is this program again, told what to run in the environment.
    let out = Command::new(BIN).env(mcd_bench::barrierbench::RANK_PROCESS_ENV, "{").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank process: MCD_BENCH_RANK_PROCESS: "), "{}", String::from_utf8_lossy(&out.stderr));
    // 2 hosts × 3 ranks: 6 processes, flat and hierarchical with each release.
    let json = sweep(
        &dir,
        &[
            "--nodes",
            "2",
            "--ranks-per-host",
            "3",
            "--algorithms",
            "tree2",
            "--host-release",
            "shm,multicast",
            "--wait",
            "block",
            "--cluster-name",
            "h14bm",
        ],
    );
    check_csv(&dir, 3, 30);
    let rows = json["rows"].as_array().unwrap();
    let algorithms: Vec<&str> = rows.iter().map(|r| r["algorithm"].as_str().unwrap()).collect();
    assert_eq!(algorithms, ["tree2", "hier:tree2+shm", "hier:tree2+multicast"], "{rows:?}");
    for r in rows {
        assert_eq!((r["nodes"].as_u64(), r["ranks_per_host"].as_u64()), (Some(6), Some(3)), "{r}");
    }
    let leftovers = mcd_vcluster::Cluster::leftovers("h14bm").unwrap();
    assert!(leftovers.is_empty(), "the sweep's cluster is gone: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
