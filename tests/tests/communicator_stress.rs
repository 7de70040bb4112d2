//! Communicators under stress (found by an adversarial review of issue 13):
//! the interposer under MPI_THREAD_MULTIPLE, churn, odd communicator shapes,
//! early exits, loss during closing, uneven ranks per host; the C ABI's groups
//! used directly (misuse, a rank killed while the others close, churn). Each
//! program checks MPI_Barrier's promise on the shared clock.
//!
//! Scenarios of mpi/comm_stress.c that need the same environment run one
//! after the other in one job ([`PLAIN`], [`TIMED`]): an MPI start-up and a
//! cluster for the group, not one per scenario; each test asserts its own
//! scenario's verdict (rank 0's check over every rank's records) from its
//! group's job, and that the whole job succeeded.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcd_integration_tests::{cluster, interposer_reports, run_discovering};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::MpiRun;
use mcd_vcluster::{ClusterSpec, LossPoint, NodeOutcome};

/// One cluster at a time (MPI runs share the bridge address; the machine has 2 cores).
static ONE: Mutex<()> = Mutex::new(());

fn one() -> std::sync::MutexGuard<'static, ()> {
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs mpi/comm_stress.c with `args` under mpirun on `spec`, the interposer
/// preloaded and reporting; does not judge the outcome.
fn comm_stress(spec: ClusterSpec, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> (NodeOutcome, Duration) {
    let preload = cbuild::build_interposer(Mpi::OpenMpi, false).unwrap();
    let program = cbuild::build_program(Mpi::OpenMpi, "comm_stress").unwrap();
    let c = cluster(spec);
    let mut vars = vec![("LD_PRELOAD".to_string(), preload.display().to_string()), ("MCD_MPI_REPORT".into(), "1".into())];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let run = MpiRun { mpi: Mpi::OpenMpi, yield_when_idle: true, env: vars, ..MpiRun::default() };
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let start = Instant::now();
    let out = run.output(&c, program.to_str().unwrap(), &args, timeout).unwrap();
    (out, start.elapsed())
}

/// The scenarios run together with no environment of their own (the
/// interposer's defaults), on 4 ranks without loss.
const PLAIN: &[&[&str]] = &[&["churn", "50"], &["shapes", "20"]];
/// The scenarios run together with a 1 s failure timeout, on 4 ranks
/// without loss (early-exit last: its last rank finalizes in it).
const TIMED: &[&[&str]] = &[&["slow-sub", "2", "3000", "dup"], &["slow-sub", "2", "3000", "world"], &["early-exit", "10", "300"]];

/// The job of `group` ([`PLAIN`] or [`TIMED`]), its scenarios one after the
/// other: run by the first test that asks (holding [`one`]), kept for the
/// others.
fn group_run(group: &'static [&'static [&'static str]]) -> Arc<(NodeOutcome, Duration)> {
    type Runs = Vec<(&'static str, Arc<(NodeOutcome, Duration)>)>;
    static RUNS: Mutex<Runs> = Mutex::new(Vec::new());
    let mut runs = RUNS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, out)) = runs.iter().find(|r| r.0 == group[0][0]) {
        return out.clone();
    }
    let (name, env): (&str, &[(&str, &str)]) =
        if group == PLAIN { ("cspl", &[]) } else { ("cstm", &[("MCD_BARRIER_TIMEOUT", "1"), ("MCD_WAIT", "auto")]) };
    let mut args: Vec<&str> = Vec::new();
    for (i, scenario) in group.iter().enumerate() {
        if i > 0 {
            args.push("+");
        }
        args.extend_from_slice(scenario);
    }
    let out = Arc::new(comm_stress(ClusterSpec::new(name, 4), &args, env, Duration::from_secs(120 * group.len() as u64)));
    eprintln!("{name} ({}) took {:?}\n{}", args.join(" "), out.1, show(&out.0));
    runs.push((group[0][0], out.clone()));
    out
}

/// `label`'s scenario passed its check in `out` (rank 0's verdict over every
/// rank's records), the whole job succeeded, and no interposer error.
fn scenario_ok(out: &NodeOutcome, label: &str, ranks: usize) {
    let verdict = format!("comm_stress: OK {label} {ranks} ranks");
    assert!(out.stdout.contains(&verdict), "scenario {label}: no \"{verdict}\" line:\n{}", show(out));
    assert!(out.success(), "scenario {label}: the job failed:\n{}", show(out));
    no_mcd_errors(out);
}

fn show(out: &NodeOutcome) -> String {
    format!("code {:?} timed out {}\n--- stdout\n{}\n--- stderr\n{}", out.code, out.timed_out, out.stdout, out.stderr)
}

/// No interposer error of any kind.
fn no_mcd_errors(out: &NodeOutcome) {
    for bad in ["MPI_Barrier on", "finalizing mcd", "freeing a communicator", "creating a communicator", "MPI_Barrier returned"] {
        assert!(!out.stderr.contains(bad), "{bad}:\n{}", show(out));
    }
}

/// (tasks before, tasks after, fds before, fds after) of each rank's
/// "tasks A -> B, fds C -> D" line.
fn growth(stdout: &str, prefix: &str) -> Vec<(i64, i64, i64, i64)> {
    stdout
        .lines()
        .filter(|l| l.starts_with(prefix) && l.contains("tasks "))
        .map(|l| {
            let nums: Vec<i64> =
                l.split(|c: char| !c.is_ascii_digit() && c != '-').filter(|s| !s.is_empty() && *s != "-").filter_map(|s| s.parse().ok()).collect();
            // "rank R: tasks A -> B, fds C -> D after N rounds"
            (nums[1], nums[2], nums[3], nums[4])
        })
        .collect()
}

#[test]
fn mpi_churn_hundreds_of_communicators_leak_nothing() {
    let _one = one();
    // 50 rounds make 151 communicators: a thread or descriptor kept by one
    // communicator in 38 shows above the slack of 4. (150 rounds took 45 s
    // of the suite's time at load 12, a third of this binary's.)
    // Run first in the PLAIN job (shapes after it).
    let rounds = 50;
    assert_eq!(PLAIN[0], ["churn", "50"]);
    let run = group_run(PLAIN);
    let out = &run.0;
    scenario_ok(out, "churn", 4);
    // The job's report counts shapes' calls too: its 4 barriers on its
    // inter-communicators (PMPI's, one per instance) and its communicators
    // (4 instances of 8 at ranks 1-3, of 6 at rank 0, which is in neither
    // the MPI_UNDEFINED split nor the create_group; and the 4 inter ones,
    // PMPI's). Churn's 3 a round and its last dup all went through mcd.
    for (rank, line) in interposer_reports(out, 4).into_iter().enumerate() {
        let shapes = if rank == 0 { 4 * 6 } else { 4 * 8 };
        assert!(line.contains("), 4 via PMPI;"), "{line}");
        let communicators = format!("communicators: {} via mcd, 4 via PMPI (4 inter, 0 unreachable, 0 failed)", 3 * rounds + 1 + shapes);
        assert!(line.contains(&communicators), "rank {rank}: not {communicators}: {line}");
    }
    let g = growth(&out.stdout, "comm_stress: rank");
    assert_eq!(g.len(), 4, "{}", out.stdout);
    for (t0, t1, f0, f1) in g {
        assert!(t1 - t0 <= 4 && f1 - f0 <= 4, "threads {t0} -> {t1}, fds {f0} -> {f1}:\n{}", out.stdout);
    }
}

#[test]
fn mpi_churn_under_20_percent_loss_frees_without_waiting() {
    let _one = one();
    let spec = ClusterSpec::new("cscl", 4).loss(20.0, LossPoint::Node);
    // 40 rounds: 121 communicators made and freed, with their closing
    // barriers' frames lost at 20% (100 rounds took 47 s at load 12).
    let (out, took) = comm_stress(spec, &["churn", "40"], &[("MCD_BARRIER_TIMEOUT", "1")], Duration::from_secs(300));
    eprintln!("churn under loss took {took:?}\n{}", out.stdout);
    assert!(out.success() && out.stdout.contains("comm_stress: OK churn 4 ranks"), "{}", show(&out));
    no_mcd_errors(&out);
    // That MPI_Comm_free does not wait for the other members is tested by
    // events in embedding.rs (ranks_may_free_their_communicators_in_any_order);
    // the longest frees are printed above for the record.
}

#[test]
fn mpi_threads_create_and_free_communicators_at_once() {
    let _one = one();
    let rounds = 24;
    let (out, took) = comm_stress(ClusterSpec::new("csmt", 4), &["mt", &rounds.to_string()], &[], Duration::from_secs(300));
    eprintln!("mt took {took:?}");
    assert!(out.success() && out.stdout.contains("comm_stress: OK mt 4 ranks"), "{}", show(&out));
    no_mcd_errors(&out);
    for line in interposer_reports(&out, 4) {
        assert!(line.contains(", 0 via PMPI"), "{line}");
    }
}

#[test]
fn mpi_odd_shapes_undefined_singletons_twins_create_group_merge_idup() {
    let _one = one();
    // Run second in the PLAIN job (churn before it).
    let run = group_run(PLAIN);
    let out = &run.0;
    scenario_ok(out, "shapes", 4);
    // Only the inter-communicators (one per instance, 4 instances) go to
    // PMPI (churn's all go to mcd).
    for line in interposer_reports(out, 4) {
        assert!(line.contains("via PMPI (4 inter, 0 unreachable, 0 failed)"), "{line}");
    }
}

#[test]
fn mpi_a_rank_that_frees_and_finalizes_at_once_while_others_run_barriers() {
    let _one = one();
    // 10 barriers 300 ms apart on the others' communicator: 3 s, three
    // failure timeouts, while the last rank waits in mcd_finalize.
    // Run last in the TIMED job (MCD_BARRIER_TIMEOUT=1).
    assert_eq!(TIMED[2], ["early-exit", "10", "300"]);
    scenario_ok(&group_run(TIMED).0, "early-exit", 3);
}

// ---- the C ABI directly ----

fn cabi_program() -> (PathBuf, PathBuf) {
    static BUILT: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let lib = cbuild::build_capi(false).unwrap();
            let source = PathBuf::from(format!("{}/../mpi/group_stress.c", env!("CARGO_MANIFEST_DIR")));
            let out = mcd_integration_tests::compile_with_capi(&lib, &source, &lib.join("group-stress"));
            (lib, out)
        })
        .clone()
}

/// Runs group_stress with `args` on every node of `spec`; returns the outcomes
/// and the directory of barrier records.
fn group_stress(spec: ClusterSpec, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> (Vec<NodeOutcome>, PathBuf) {
    let (_, program) = cabi_program();
    let c = cluster(spec);
    let n = c.nodes();
    let times = std::env::temp_dir().join(format!("group-stress-{}-{}", c.spec().name, std::process::id()));
    let _ = std::fs::remove_dir_all(&times);
    std::fs::create_dir_all(&times).unwrap();
    let mut argv = vec![program.to_str().unwrap()];
    argv.extend_from_slice(args);
    let mut vars: Vec<(String, String)> = vec![("ADV_TIMES".into(), times.display().to_string()), ("MCD_WAIT".into(), "block".into())];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let nodes: Vec<usize> = (0..n).collect();
    (run_discovering(&c, &nodes, &argv, |_| vars.clone(), timeout), times)
}

/// One member's record of a group barrier: (members, enter, leave).
type Record = (usize, f64, f64);

/// The shared-clock check over every rank's records in `dir`: every
/// barrier seen by all its members, none left before all entered.
fn check_records(dir: &Path, ranks: usize) -> usize {
    let mut by: std::collections::BTreeMap<(i64, i64), Vec<Record>> = Default::default();
    for r in 0..ranks {
        let Ok(text) = std::fs::read_to_string(dir.join(format!("rank{r}"))) else { continue };
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let members: usize = f[2].parse().unwrap();
            by.entry((f[0].parse().unwrap(), f[1].parse().unwrap())).or_default().push((members, f[3].parse().unwrap(), f[4].parse().unwrap()));
        }
    }
    for ((id, k), recs) in &by {
        assert_eq!(recs.len(), recs[0].0, "group {id} barrier {k}: {} records for {} members", recs.len(), recs[0].0);
        let last_in = recs.iter().map(|r| r.1).fold(0.0, f64::max);
        let first_out = recs.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
        assert!(first_out >= last_in, "group {id} barrier {k}: a member left at {first_out} before the last entered at {last_in}");
    }
    by.len()
}

/// The "NAME rc=RC (TEXT)" line of `name` in `out`.
fn check_line<'a>(out: &'a NodeOutcome, name: &str) -> &'a str {
    out.stdout.lines().find(|l| l.contains(&format!(": {name} rc="))).unwrap_or_else(|| panic!("node {}: no {name} line:\n{}", out.node, show(out)))
}

#[test]
fn group_stress_misuse_gets_clear_errors_and_never_breaks_the_job() {
    let _one = one();
    let (outs, times) = group_stress(ClusterSpec::new("csapi", 3), &["api"], &[("MCD_BARRIER_TIMEOUT", "2")], Duration::from_secs(120));
    for o in &outs {
        eprintln!("node {}:\n{}{}", o.node, o.stdout, o.stderr);
    }
    for o in &outs {
        assert!(o.success(), "node {}: {}", o.node, show(o));
        let refused = check_line(o, "same-key-twice");
        assert!(refused.contains("rc=-1") && refused.contains("used here before"), "{refused}");
        let prepared = check_line(o, "barrier-on-prepared");
        assert!(prepared.contains("rc=-1") && prepared.contains("not joined"), "{prepared}");
        for ok in ["join", "join-again", "free-prepared", "free-g1", "free-b", "singleton-create", "singleton-free"] {
            assert!(check_line(o, ok).contains("rc=0"), "{}", check_line(o, ok));
        }
        for bad in ["rank-listed-twice", "not-a-member", "rank-beyond-job", "negative-rank", "empty-list"] {
            assert!(check_line(o, bad).contains("rc=-1"), "{}", check_line(o, bad));
        }
        // An agreed key is never used twice, even after its group was freed:
        // refused on every rank alike, however far its closing has got.
        let again = check_line(o, "same-key-after-free");
        assert!(again.contains("rc=-1") && again.contains("used here before"), "{again}");
        assert!(o.stdout.contains("mcd_finalize rc=0"), "{}", show(o));
    }
    assert!(check_records(&times, 3) > 0);
    std::fs::remove_dir_all(&times).unwrap();
}

/// Runs the kill mode on a new cluster `name`: rank 3 leaves without
/// finalizing (at once, or halfway through freeing its `groups` groups);
/// returns the three survivors' (frees line, finalize ms, finalize line).
fn killed_while_closing(name: &str, groups: usize, mid: bool) -> Vec<(f64, f64, String)> {
    let g = groups.to_string();
    let mut args = vec!["kill", g.as_str()];
    if mid {
        args.push("mid");
    }
    let (outs, times) = group_stress(ClusterSpec::new(name, 4), &args, &[("MCD_BARRIER_TIMEOUT", "1")], Duration::from_secs(120));
    for o in &outs {
        eprintln!("node {}:\n{}{}", o.node, o.stdout, o.stderr);
    }
    check_records(&times, 4);
    std::fs::remove_dir_all(&times).unwrap();
    outs[..3]
        .iter()
        .map(|o| {
            assert!(!o.timed_out, "node {} hung:\n{}", o.node, show(o));
            let line = o.stdout.lines().find(|l| l.contains("mcd_finalize rc=")).unwrap_or_else(|| panic!("{}", show(o)));
            // "... N frees took F ms (longest L ms); mcd_finalize rc=RC in T ms: TEXT"
            let longest: f64 = line.split("longest ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            let ms: f64 = line.split(" in ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            assert!(!line.contains("rc=0"), "node {}: finalize succeeded with rank 3 gone: {line}", o.node);
            (longest, ms, line.to_string())
        })
        .collect()
}

#[test]
fn group_stress_a_rank_killed_before_the_others_close_six_groups_costs_one_failure_timeout() {
    let _one = one();
    for (_, ms, line) in killed_while_closing("cskil", 6, false) {
        assert!(line.contains('3'), "the error does not name rank 3: {line}");
        // The failure timeout is 1 s: a named error within a few of them,
        // not one per closing group.
        assert!(ms < 4000.0, "mcd_finalize took {ms} ms with 6 groups: {line}");
    }
}

#[test]
fn group_stress_a_rank_killed_halfway_through_closing_never_blames_a_live_rank() {
    let _one = one();
    // It was intermittent: three runs.
    for run in 0..3 {
        for (_, _, line) in killed_while_closing("cskmd", 6, true) {
            for live in ["[0]", "[1]", "[2]", "node 0 is silent", "node 1 is silent", "node 2 is silent"] {
                assert!(!line.contains(live), "run {run}: a live rank was declared dead: {line}");
            }
        }
    }
}

#[test]
fn group_stress_churn_reaps_closed_groups() {
    let _one = one();
    let (outs, times) = group_stress(ClusterSpec::new("cscch", 4), &["churn", "200"], &[], Duration::from_secs(300));
    for o in &outs {
        eprintln!("node {}:\n{}{}", o.node, o.stdout, o.stderr);
        assert!(o.success(), "node {}: {}", o.node, show(o));
    }
    check_records(&times, 4);
    std::fs::remove_dir_all(&times).unwrap();
    for o in &outs {
        let g = growth(&o.stdout, "group_stress: rank");
        assert_eq!(g.len(), 1, "{}", o.stdout);
        let (t0, t1, f0, f1) = g[0];
        assert!(t1 - t0 <= 4 && f1 - f0 <= 4, "node {}: threads {t0} -> {t1}, fds {f0} -> {f1}", o.node);
    }
}

#[test]
fn group_stress_survivors_can_create_a_group_of_their_own_after_a_rank_died() {
    // Rank 3 leaves; the others free their 3 groups with it and create a
    // group of ranks 0..2 only, which must work and run its barriers.
    let _one = one();
    let (outs, times) =
        group_stress(ClusterSpec::new("cskcr", 4), &["kill", "3", "create"], &[("MCD_BARRIER_TIMEOUT", "1")], Duration::from_secs(120));
    for o in &outs {
        eprintln!("node {}:\n{}{}", o.node, o.stdout, o.stderr);
    }
    check_records(&times, 4);
    std::fs::remove_dir_all(&times).unwrap();
    for o in &outs[..3] {
        assert!(!o.timed_out, "node {} hung:\n{}", o.node, show(o));
        let created = check_line(o, "survivors-create");
        assert!(created.contains("rc=0"), "node {}: {created}", o.node);
        let freed = check_line(o, "survivors-free");
        assert!(freed.contains("rc=0"), "node {}: {freed}", o.node);
    }
}

/// Rank 0 waits 3 s in a barrier on a communicator of {0, 3} while ranks 1
/// and 2 wait for it in a barrier on `y`: rank 0 is alive and must be
/// heard (its agent for `y` answers probes), so nobody may fail.
/// With MCD_WAIT=auto the dup and world cases run in the TIMED job (the
/// same environment), each checked by its own verdict; `block` alone.
fn slow_sub(name: &str, y: &str, wait: &str) {
    let _one = one();
    let label = format!("slow-sub {y}");
    if wait == "auto" {
        assert!(TIMED.iter().any(|s| s == &["slow-sub", "2", "3000", y]), "slow-sub {y} is not in the TIMED job");
        return scenario_ok(&group_run(TIMED).0, &label, 4);
    }
    let env = [("MCD_BARRIER_TIMEOUT", "1"), ("MCD_WAIT", wait)];
    let (out, took) = comm_stress(ClusterSpec::new(name, 4), &["slow-sub", "2", "3000", y], &env, Duration::from_secs(120));
    eprintln!("slow-sub {y} took {took:?}\n{}", show(&out));
    scenario_ok(&out, &label, 4);
}

#[test]
fn mpi_a_rank_waiting_long_on_one_communicator_is_heard_on_another() {
    slow_sub("advss", "dup", "auto");
}

#[test]
fn mpi_a_rank_waiting_long_on_a_communicator_is_heard_on_the_world() {
    slow_sub("advsw", "world", "auto");
}

#[test]
fn mpi_a_rank_blocking_long_on_one_communicator_is_heard_on_another() {
    // As above with MCD_WAIT=block: the application thread sleeps on the
    // rings too, and races the other communicator's agent for each frame.
    slow_sub("advsb", "dup", "block");
}

#[test]
fn mpi_ranks_on_hosts_with_different_process_counts_still_get_mcd() {
    // Uneven placement (3 ranks on one host, 1 on another) gives ranks
    // different OMPI_COMM_WORLD_LOCAL_SIZE, hence different `auto` picks
    // (local processes vs cores). Simulated: rank 0 sees 1 local process,
    // the others 8 (on 2 cores). Every rank must still agree on one
    // algorithm per barrier, for the world and for every communicator.
    let _one = one();
    let preload = cbuild::build_interposer(Mpi::OpenMpi, false).unwrap();
    let program = cbuild::build_program(Mpi::OpenMpi, "comm_stress").unwrap();
    let c = cluster(ClusterSpec::new("cshet", 4));
    let vars = vec![
        ("LD_PRELOAD".to_string(), preload.display().to_string()),
        ("MCD_MPI_REPORT".into(), "1".into()),
        ("MCD_JOIN_TIMEOUT".into(), "5".into()),
    ];
    let run = MpiRun { mpi: Mpi::OpenMpi, yield_when_idle: true, env: vars, ..MpiRun::default() };
    let script = r#"if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then MCD_LOCAL_PROCS=1; else MCD_LOCAL_PROCS=8; fi; export MCD_LOCAL_PROCS; exec "$0" "$@""#;
    let args: Vec<String> = ["-c", script, program.to_str().unwrap(), "churn", "12"].iter().map(|s| s.to_string()).collect();
    let start = Instant::now();
    let out = run.output(&c, "/bin/sh", &args, Duration::from_secs(180)).unwrap();
    eprintln!("took {:?}\n{}", start.elapsed(), show(&out));
    assert!(out.success() && out.stdout.contains("comm_stress: OK churn 4 ranks"), "{}", show(&out));
    assert!(!out.stderr.contains("falls back"), "{}", show(&out));
    for line in interposer_reports(&out, 4) {
        assert!(line.contains(", 0 via PMPI"), "{line}");
    }
}
