//! Nonblocking and persistent collectives through the interposer (issue 28),
//! under Open MPI and MPICH, on virtual clusters of 4 ranks (root needed, as
//! every virtual-cluster test): mpi/nb_check.c's modes. Each test checks
//! the program's own verdicts (every result right, every request
//! completed) and the interposer's report: the calls went through mcd, not
//! PMPI.

use std::sync::Mutex;
use std::time::Duration;

use mcd_integration_tests::{cluster, collective_reports};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::MpiRun;
use mcd_vcluster::{ClusterSpec, LossPoint, NodeOutcome};

/// The MPI runs share the root namespace's bridge address: one at a time.
static MPI: Mutex<()> = Mutex::new(());

const RANKS: usize = 4;

/// Runs mpi/nb_check.c under `mpi` with the interposer on `spec`, reports
/// on, with `args` and `env`; checks that mpirun succeeded and every rank's
/// verdict says nothing was wrong.
fn nb_check(mpi: Mpi, spec: ClusterSpec, args: &[&str], env: &[(&str, &str)]) -> NodeOutcome {
    let _one = MPI.lock().unwrap_or_else(|p| p.into_inner());
    let preload = cbuild::build_interposer(mpi, false).unwrap_or_else(|e| panic!("building the interposer for {mpi}: {e:#}"));
    let program = cbuild::build_program(mpi, "nb_check").unwrap();
    let c = cluster(spec);
    let mut vars = vec![("LD_PRELOAD".to_string(), preload.display().to_string()), ("MCD_MPI_REPORT".into(), "1".into())];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let run = MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env: vars, output_per_rank: true, ..MpiRun::default() };
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = run.output(&c, program.to_str().unwrap(), &args, Duration::from_secs(240)).unwrap();
    assert!(out.success(), "{mpi}: mpirun failed:\n{}\n{}", out.stdout, out.stderr);
    for rank in 0..RANKS {
        let verdict = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("nb_check: rank {rank}: ")))
            .unwrap_or_else(|| panic!("{mpi}: no verdict from rank {rank}:\n{}\n{}", out.stdout, out.stderr));
        assert!(verdict.ends_with(" 0 wrong") && !verdict.contains(": 0 checks"), "{mpi}: {verdict}\n{}", out.stderr);
    }
    for bad in [" failed: ", "could not start", "failed to start", "a start of a persistent"] {
        assert!(!out.stderr.contains(bad), "{mpi}: an mcd call failed ({bad}):\n{}", out.stderr);
    }
    out
}

/// Each rank's nonblocking report: (Ibarrier, Iallreduce, Ireduce, Ibcast)
/// × (via mcd, via PMPI), persistent starts via mcd, persistent inits via
/// PMPI, completed in MPI_Finalize.
fn nonblocking_reports(out: &NodeOutcome) -> Vec<[u64; 11]> {
    mcd_integration_tests::report_numbers(out, RANKS, "nonblocking")
}

/// Every wait and test form, mixed arrays with MPI's own requests, five
/// collectives in flight per communicator on the world, a duplicate and two
/// splits; then persistent ones started many times. All through mcd.
fn every_form(mpi: Mpi, name: &str) {
    let rounds = 14; // twice each of the 7 completion forms per communicator
    let json_dir = std::env::temp_dir().join(format!("mcd-nb-json-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&json_dir).unwrap();
    let pattern = json_dir.join("rank-%r.json").display().to_string();
    let out = nb_check(
        mpi,
        ClusterSpec::new(name, RANKS).loss(10.0, LossPoint::Node),
        &["forms", &rounds.to_string()],
        &[("MCD_MPI_REPORT_JSON", &pattern)],
    );
    // MCD_MPI_REPORT_JSON: the same counts per rank, and per communicator.
    for rank in 0..RANKS {
        let path = json_dir.join(format!("rank-{rank}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{mpi}: {}: {e}\n{}", path.display(), out.stderr));
        let report: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{mpi}: rank {rank}: not JSON ({e}): {text}"));
        assert_eq!(report["rank"], rank, "{text}");
        let per = (rounds * 4) as u64;
        assert_eq!(report["calls"]["MPI_Ibarrier"]["mcd"], 2 * per, "{mpi}: {text}");
        assert_eq!(report["calls"]["MPI_Iallreduce"]["mcd"], 3 * per, "{mpi}: {text}");
        assert_eq!(report["persistent"]["starts_mcd"], 4 * per, "{mpi}: {text}");
        // Every counter of mcd_stats, drops included.
        let counters = ["barriers", "sent", "received", "resends", "answers", "answers_suppressed", "dropped", "bad_tag", "replayed"]
            .into_iter()
            .chain(["auth_mismatch", "foreign", "superseded", "sessions_forgotten", "overflow"]);
        for key in counters {
            assert!(report["mcd"][key].is_u64(), "{mpi}: mcd.{key}: {text}");
        }
        assert_eq!(report["mcd"]["bad_tag"], 0, "{mpi}: {text}");
        let comms = report["per_communicator"].as_array().unwrap_or_else(|| panic!("{text}"));
        assert_eq!(comms.len(), 4, "{mpi}: the world, a duplicate and two splits: {text}");
        for c in comms {
            assert_eq!(c["calls"]["MPI_Ibcast"]["mcd"], 2 * rounds as u64, "{mpi}: {c}");
            assert_eq!(c["calls"]["MPI_Ibcast"]["pmpi"], 0, "{mpi}: {c}");
        }
    }
    std::fs::remove_dir_all(&json_dir).unwrap();
    let starts = rounds * 4 * 4; // four persistent collectives per communicator
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        let comms = 4u64;
        let per = rounds as u64 * comms;
        // Persistent starts count as their nonblocking kind.
        let p = rounds as u64 * comms;
        assert_eq!(
            r,
            &[per + p, 0, 2 * per + p, 0, per + p, 0, per + p, 0, starts as u64, 0, 0],
            "{mpi}: rank {rank}: Ibarrier, Iallreduce, Ireduce, Ibcast via mcd and PMPI; persistent starts via mcd, inits via PMPI; finalized"
        );
    }
}

#[test]
fn every_wait_and_test_form_completes_nonblocking_and_persistent_collectives_under_open_mpi() {
    every_form(Mpi::OpenMpi, "nnbfo");
}

#[test]
fn every_wait_and_test_form_completes_nonblocking_and_persistent_collectives_under_mpich() {
    every_form(Mpi::Mpich, "nnbfm");
}

/// Computing for 2.5 s (2.5 failure timeouts) with no MPI call, under 20%
/// loss: the collectives started before are complete when it ends (mcd's
/// agent carried them), and polled barriers keep MPI_Barrier's promise on
/// the shared clock.
fn overlap_past_the_failure_timeout(mpi: Mpi, name: &str) {
    let spec = ClusterSpec::new(name, RANKS).loss(20.0, LossPoint::Node);
    let out = nb_check(mpi, spec, &["overlap", "3", "2500"], &[("MCD_BARRIER_TIMEOUT", "1")]);
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        assert_eq!((r[0], r[1], r[2], r[3]), (9, 0, 6, 0), "{mpi}: rank {rank}: Ibarrier and Iallreduce via mcd and PMPI");
    }
}

#[test]
fn nonblocking_collectives_progress_while_ranks_compute_past_the_failure_timeout_under_loss_under_open_mpi() {
    overlap_past_the_failure_timeout(Mpi::OpenMpi, "nnbco");
}

#[test]
fn nonblocking_collectives_progress_while_ranks_compute_past_the_failure_timeout_under_loss_under_mpich() {
    overlap_past_the_failure_timeout(Mpi::Mpich, "nnbcm");
}

/// MPI_THREAD_MULTIPLE: two threads, each on its own communicator, with
/// nonblocking collectives completed by MPI_Waitall at once, then blocking
/// ones (an allreduce in place, a broadcast, a reduction).
fn two_threads(mpi: Mpi, name: &str) {
    let out = nb_check(mpi, ClusterSpec::new(name, RANKS), &["threads", "50"], &[]);
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        assert_eq!((r[0], r[1], r[2], r[3]), (100, 0, 100, 0), "{mpi}: rank {rank}");
    }
    // And the blocking ones, from both threads at once: every one through mcd.
    for (rank, r) in collective_reports(&out, RANKS).iter().enumerate() {
        assert_eq!(r, &[100, 0, 100, 0, 100, 0], "{mpi}: rank {rank}: Allreduce, Reduce, Bcast via mcd and PMPI");
    }
}

#[test]
fn two_threads_on_two_communicators_under_open_mpi() {
    two_threads(Mpi::OpenMpi, "nnbto");
}

#[test]
fn two_threads_on_two_communicators_under_mpich() {
    two_threads(Mpi::Mpich, "nnbtm");
}

/// A communicator freed with a collective in flight (it completes
/// normally), and MPI_Finalize with two never completed: completed there,
/// said on every rank, no hang.
fn bad_input(mpi: Mpi, name: &str) {
    let out = nb_check(mpi, ClusterSpec::new(name, RANKS), &["bad"], &[]);
    for rank in 0..RANKS {
        for kind in ["MPI_Ibarrier", "MPI_Iallreduce"] {
            let said = format!("mcd-mpi: rank {rank}: MPI_Finalize with a {kind} never completed by MPI_Wait or MPI_Test");
            assert!(out.stderr.contains(&said), "{mpi}: {said}:\n{}", out.stderr);
        }
    }
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        assert_eq!((r[0], r[2], r[10]), (1, 2, 2), "{mpi}: rank {rank}: Ibarrier, Iallreduce via mcd, completed in MPI_Finalize");
    }
}

#[test]
fn a_freed_communicator_and_a_finalize_with_collectives_pending_under_open_mpi() {
    bad_input(Mpi::OpenMpi, "nnbbo");
}

#[test]
fn a_freed_communicator_and_a_finalize_with_collectives_pending_under_mpich() {
    bad_input(Mpi::Mpich, "nnbbm");
}

/// Issue 28's step 3 (nb_check's `requests` mode, MPI_THREAD_MULTIPLE):
/// MPI_Request_get_status says "not yet" while other ranks have not
/// entered, then "complete" without freeing; MPI_STATUSES_IGNORE in every
/// form completing several; user operations (to PMPI) and derived types
/// (through mcd) in the nonblocking and persistent forms; MPI_Request_free
/// of running ones in one thread while another waits (refused, then
/// waited: never left to MPI_Finalize as "never completed"; see
/// request_freeing.rs); a persistent one on a communicator freed in flight; and
/// one never completed before MPI_Finalize.
fn requests(mpi: Mpi, name: &str) {
    let rounds = 12u64;
    let out = nb_check(mpi, ClusterSpec::new(name, RANKS), &["requests", &rounds.to_string()], &[]);
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        // Ibarrier: get_status 1, statuses R, freed R. Iallreduce through
        // mcd: get_status's persistent start 1, statuses R, the two
        // derived types 2, the vector's persistent starts 3, the freed R,
        // the persistent ones beside the waiter R, one after, the waiter's
        // 4R, the freed communicator's 1 and the one left pending 1; to
        // PMPI: the user operation's 2 (and its Ireduce's 2). Persistent
        // starts: 1 + 3 + R + 2; the user operation's init to PMPI.
        let expected = [2 * rounds + 1, 0, 7 * rounds + 9, 2, 0, 2, rounds, 0, rounds + 6, 1, 1];
        assert_eq!(
            r, &expected,
            "{mpi}: rank {rank}: Ibarrier, Iallreduce, Ireduce, Ibcast via mcd and PMPI; persistent starts via mcd, inits via PMPI; finalized"
        );
    }
    for rank in 0..RANKS {
        let said = format!("mcd-mpi: rank {rank}: MPI_Finalize with a MPI_Iallreduce never completed by MPI_Wait or MPI_Test");
        assert_eq!(out.stderr.matches(&said).count(), 1, "{mpi}: {said}: once (the persistent one left):\n{}", out.stderr);
        let freed = format!("mcd-mpi: rank {rank}: MPI_Finalize with a MPI_Ibarrier");
        assert!(!out.stderr.contains(&freed), "{mpi}: a freed MPI_Ibarrier was left to MPI_Finalize as never completed:\n{}", out.stderr);
    }
}

#[test]
fn request_status_statuses_ignored_user_ops_and_requests_freed_beside_a_waiting_thread_under_open_mpi() {
    requests(Mpi::OpenMpi, "nnbro");
}

#[test]
fn request_status_statuses_ignored_user_ops_and_requests_freed_beside_a_waiting_thread_under_mpich() {
    requests(Mpi::Mpich, "nnbrm");
}

/// mpi/coll_diff.c's nonblocking mode (issue 28's differential test): a
/// seeded random sequence of MPI_Iallreduce, MPI_Ireduce and MPI_Ibcast on
/// the world, a duplicate, two splits, MPI_COMM_SELF, and communicators of
/// MPI_Comm_create, _idup, _split_type, MPI_Intercomm_merge,
/// MPI_Cart_create, MPI_Graph_create, MPI_Dist_graph_create_adjacent and
/// MPI_Comm_create_group (each constructor makes the mcd state, so every
/// call on them but the idup'd one's goes through mcd), every predefined
/// type (pair types included) and derived ones, types of one signature
/// mixed across ranks, every operation, counts up to twice
/// MCD_MPI_MAX_BYTES, every root, in place and not, each started after an
/// MPI_Ibarrier and completed with it by a wait or test form drawn per
/// call, under 20% loss; each result compared with PMPI's blocking call on
/// copies of the inputs (send buffers unchanged, bytes beyond untouched,
/// allreduce bits the same on every rank).
fn differential_nonblocking(mpi: Mpi, name: &str) {
    let _one = MPI.lock().unwrap_or_else(|p| p.into_inner());
    let calls = 300;
    let preload = cbuild::build_interposer(mpi, false).unwrap();
    let program = cbuild::build_program(mpi, "coll_diff").unwrap();
    let c = cluster(ClusterSpec::new(name, RANKS).loss(20.0, LossPoint::Node));
    let vars = vec![
        ("LD_PRELOAD".to_string(), preload.display().to_string()),
        ("MCD_MPI_REPORT".into(), "1".into()),
        ("MCD_MPI_MAX_BYTES".into(), "1024".into()),
    ];
    let run = MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env: vars, output_per_rank: true, ..MpiRun::default() };
    let args: Vec<String> = ["2029", &calls.to_string(), "nonblocking", "2048"].iter().map(|a| a.to_string()).collect();
    let out = run.output(&c, program.to_str().unwrap(), &args, Duration::from_secs(240)).unwrap();
    assert!(out.success(), "{mpi}: mpirun failed:\n{}\n{}", out.stdout, out.stderr);
    for rank in 0..RANKS {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("coll_diff: rank {rank}: ")))
            .unwrap_or_else(|| panic!("{mpi}: no verdict from rank {rank}:\n{}\n{}", out.stdout, out.stderr));
        assert!(line.ends_with(", 0 wrong"), "{mpi}: {line}\n{}", out.stderr);
    }
    assert!(!out.stderr.contains(" failed: "), "{mpi}: {}", out.stderr);
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        // One MPI_Ibarrier per call, every one through mcd but those on the
        // communicator made by MPI_Comm_idup (itself nonblocking: its mcd
        // state is made at its first blocking collective, and this mode
        // makes none; README, "Nonblocking collectives"); each kind both
        // through mcd and (beyond the limit, or a type or operation mcd
        // does not serve) through PMPI.
        let prefix = format!("coll_diff: calls per communicator at rank {rank}: ");
        let line = out.stdout.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("{mpi}: rank {rank}:\n{}", out.stdout));
        let words: Vec<&str> = line.split(' ').collect();
        let idup: u64 = words.iter().position(|&w| w == "idup").and_then(|i| words.get(i + 1)?.parse().ok()).unwrap_or_else(|| panic!("{line}"));
        assert!(idup > 0, "{mpi}: rank {rank}: no call on the idup'd communicator: {line}");
        assert_eq!((r[0], r[1]), (calls - idup, idup), "{mpi}: rank {rank}: {r:?}");
        assert!(r[2..8].iter().all(|&c| c > 0), "{mpi}: rank {rank}: {r:?}");
        assert_eq!(r[2..8].iter().sum::<u64>(), calls, "{mpi}: rank {rank}: {r:?}");
    }
}

#[test]
fn nonblocking_collectives_match_pmpi_in_the_differential_test_under_loss_under_open_mpi() {
    differential_nonblocking(Mpi::OpenMpi, "nnbdo");
}

#[test]
fn nonblocking_collectives_match_pmpi_in_the_differential_test_under_loss_under_mpich() {
    differential_nonblocking(Mpi::Mpich, "nnbdm");
}

/// A third-party MPI client, mpi4py with its own Python, unmodified (under
/// Open MPI Debian's, under MPICH one built for MPICH by `./run deps`:
/// [`mcd_integration_tests::mpi4py_env`]): comm.Ibarrier, comm.Iallreduce,
/// comm.Ibcast, comm.Ireduce on the world, a duplicate and comm.Split
/// halves, with MPI's own Irecv/Isend in one MPI.Request.Waitall, the
/// blocking comm.Allreduce (also in place), comm.Bcast and comm.Reduce,
/// and progress while computing; all through mcd.
fn mpi4py_nonblocking(mpi: Mpi, name: &str) {
    let mut vars = mcd_integration_tests::mpi4py_env(mpi);
    let _one = MPI.lock().unwrap_or_else(|p| p.into_inner());
    let preload = cbuild::build_interposer(mpi, false).unwrap_or_else(|e| panic!("building the interposer for {mpi}: {e:#}"));
    let c = cluster(ClusterSpec::new(name, RANKS));
    vars.extend([("LD_PRELOAD".to_string(), preload.display().to_string()), ("MCD_MPI_REPORT".into(), "1".into())]);
    let run = MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env: vars, output_per_rank: true, ..MpiRun::default() };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../mpi/nb_check.py");
    let out = run.output(&c, mcd_integration_tests::PYTHON, &[script.to_string(), "10".into()], Duration::from_secs(180)).unwrap();
    assert!(out.success(), "{mpi}: mpirun failed:\n{}\n{}", out.stdout, out.stderr);
    for rank in 0..RANKS {
        assert!(
            out.stdout.contains(&format!("nb_check.py: rank {rank}: 242 checks, 0 wrong")),
            "{mpi}: rank {rank}:\n{}\n{}",
            out.stdout,
            out.stderr
        );
    }
    for (rank, r) in nonblocking_reports(&out).iter().enumerate() {
        // 10 rounds on 3 communicators, and one more Ibarrier and Iallreduce.
        assert_eq!(&r[..8], &[31, 0, 31, 0, 30, 0, 30, 0], "{mpi}: rank {rank}: Ibarrier, Iallreduce, Ireduce, Ibcast via mcd and PMPI");
    }
    // The blocking forms: two comm.Allreduce (one in place), one comm.Bcast
    // and one comm.Reduce per round and communicator.
    for (rank, r) in collective_reports(&out, RANKS).iter().enumerate() {
        assert_eq!(r, &[60, 0, 30, 0, 30, 0], "{mpi}: rank {rank}: Allreduce, Reduce, Bcast via mcd and PMPI");
    }
}

#[test]
fn mpi4py_nonblocking_collectives_go_through_mcd_under_open_mpi() {
    mpi4py_nonblocking(Mpi::OpenMpi, "nnbpy");
}

#[test]
fn mpi4py_nonblocking_collectives_go_through_mcd_under_mpich() {
    mpi4py_nonblocking(Mpi::Mpich, "nnbpym");
}
