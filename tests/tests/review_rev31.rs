//! Review rev31 (session 15) of session 14's interposer change: `MPI_Wait`
//! and `MPI_Waitall` sleep in mcd (`mcd_request_wait_for`, up to 100 µs)
//! between turns of MPI's own progress. Runs modes of mpi/review_rev31.c on
//! a virtual cluster of 4 ranks (root needed, as every virtual-cluster
//! test) with the interposer preloaded, under Open MPI and MPICH, and
//! asserts what MPI documents (the program checks every value itself).

use std::time::Duration;

use mcd_integration_tests::cluster;
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::MpiRun;
use mcd_vcluster::ClusterSpec;

const RANKS: usize = 4;

/// Runs `review_rev31 MODE` under `mpi` with the interposer on cluster
/// `name`, and asserts every rank's checks right and mpirun's success.
fn holds(mpi: Mpi, name: &str, mode: &str, env: &[(&str, &str)]) {
    let program = cbuild::build_program(mpi, "review_rev31").unwrap();
    let preload = cbuild::build_interposer(mpi, false).unwrap_or_else(|e| panic!("building the interposer for {mpi}: {e:#}"));
    let mut vars = vec![("LD_PRELOAD".to_string(), preload.display().to_string()), ("MCD_MPI_REPORT".into(), "1".into())];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let c = cluster(ClusterSpec::new(name, RANKS));
    let run = MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env: vars, output_per_rank: true, ..MpiRun::default() };
    let out = run.output(&c, program.to_str().unwrap(), &[mode.to_string()], Duration::from_secs(120)).unwrap();
    for rank in 0..RANKS {
        let prefix = format!("review: rank {rank}: {mode}: ");
        let verdict = out.stdout.lines().find(|l| l.starts_with(&prefix) && l.ends_with(" wrong")).unwrap_or_else(|| {
            panic!("{mpi}: no verdict from rank {rank} (exit {:?}, timed out {}):\n{}\n{}", out.code, out.timed_out, out.stdout, out.stderr)
        });
        assert!(verdict.ends_with(" 0 wrong") && !verdict.contains(": 0 checks"), "{mpi}: {verdict}\n{}\n{}", out.stdout, out.stderr);
    }
    assert!(out.success(), "{mpi}: mpirun failed:\n{}\n{}", out.stdout, out.stderr);
    // The collectives went through mcd (not PMPI): the report's counts.
    assert!(out.stderr.contains("via mcd"), "{mpi}: no interposer report:\n{}", out.stderr);
}

/// A rank waits (`MPI_Wait`, `MPI_Waitall`, an `MPI_Test` loop) for a
/// nonblocking collective whose peer enters it only once this rank's MPI
/// has progressed a large receive it posted: the interposer's wait must
/// turn MPI's progress meanwhile (legal MPI; a hang otherwise).
#[test]
fn a_wait_for_a_collective_progresses_a_receive_its_peer_waits_on_under_open_mpi() {
    holds(Mpi::OpenMpi, "r31po", "progress", &[]);
}

/// As above, under MPICH.
#[test]
fn a_wait_for_a_collective_progresses_a_receive_its_peer_waits_on_under_mpich() {
    holds(Mpi::Mpich, "r31pm", "progress", &[]);
}

// ---- Finding 2: the job's collectives barrier is made (joined) at the
// first collective call on MPI_COMM_WORLD, waiting up to MCD_JOIN_TIMEOUT
// for every rank's first call ----

/// Finding 2a: the program's first collective on MPI_COMM_WORLD is a
/// nonblocking one: its start waits in the join of mcd's collectives
/// barrier for every rank's first call (MPI: a nonblocking start is
/// local). A rank whose peer first waits for this rank's MPI progress (a
/// large send) deadlocks until the join times out, and the job aborts.
#[test]
fn a_first_nonblocking_collective_on_the_world_starts_without_waiting_for_other_ranks_under_open_mpi() {
    holds(Mpi::OpenMpi, "r31fo", "firstnb", &[("MCD_JOIN_TIMEOUT", "5")]);
}

/// Finding 2b: rank 0 calls its first collective on MPI_COMM_WORLD (a
/// broadcast of what it read, say) more than MCD_JOIN_TIMEOUT after the
/// others called theirs: their calls fail, and the job aborts (a barrier's
/// own waits wait for live peers as long as they take).
#[test]
fn a_rank_late_to_its_first_collective_is_waited_for_under_open_mpi() {
    holds(Mpi::OpenMpi, "r31lo", "late", &[("MCD_JOIN_TIMEOUT", "1"), ("REVIEW_LATE_MS", "3000")]);
}

/// Finding 2a on a duplicate of MPI_COMM_WORLD (its mcd group made by
/// MPI_Comm_dup, its collectives' barrier at its first collective).
#[test]
fn a_first_nonblocking_collective_on_a_duplicate_starts_without_waiting_for_other_ranks_under_open_mpi() {
    holds(Mpi::OpenMpi, "r31do", "firstnbdup", &[("MCD_JOIN_TIMEOUT", "5")]);
}

/// Finding 2b on a duplicate of MPI_COMM_WORLD.
#[test]
fn a_rank_late_to_its_first_collective_on_a_duplicate_is_waited_for_under_open_mpi() {
    holds(Mpi::OpenMpi, "r31eo", "latedup", &[("MCD_JOIN_TIMEOUT", "1"), ("REVIEW_LATE_MS", "3000")]);
}

/// Finding 2b under MPICH.
#[test]
fn a_rank_late_to_its_first_collective_is_waited_for_under_mpich() {
    holds(Mpi::Mpich, "r31lm", "late", &[("MCD_JOIN_TIMEOUT", "1"), ("REVIEW_LATE_MS", "3000")]);
}
