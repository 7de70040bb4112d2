//! MPI_Request_free of the interposer's collective requests (issue 28,
//! session 17), under Open MPI and MPICH, on virtual clusters of 4 ranks
//! (root needed, as every virtual-cluster test): mpi/free_check.c.
//!
//! MPI makes freeing a nonblocking collective's request erroneous (MPI 4.0,
//! section 6.12), and two threads using one request at once too (section
//! 11.6.2). Both MPIs refuse the free for their own nonblocking
//! collectives and leave the request to complete normally (Open MPI 4.1:
//! MPI_ERR_REQUEST; MPICH 4.0: "The supplied request was invalid"; both
//! on MPI_COMM_WORLD's handler). The interposer refuses alike: the free of
//! a running MPI_Ibarrier or MPI_Iallreduce, alone or while another thread
//! waits on it, and the free of a persistent request another thread waits
//! on; each collective then completes normally, and nothing is left to
//! MPI_Finalize. MPI_Cancel of a running MPI_Ibarrier is refused alike (both
//! MPIs refuse it for their own), and it completes, not cancelled.

use std::time::Duration;

use mcd_integration_tests::{cluster, report_numbers};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::MpiRun;
use mcd_vcluster::ClusterSpec;

const RANKS: usize = 4;
const ROUNDS: u64 = 8;

fn freeing(mpi: Mpi, name: &str) {
    let preload = cbuild::build_interposer(mpi, false).unwrap_or_else(|e| panic!("building the interposer for {mpi}: {e:#}"));
    let program = cbuild::build_program(mpi, "free_check").unwrap();
    let c = cluster(ClusterSpec::new(name, RANKS));
    let vars = vec![("LD_PRELOAD".to_string(), preload.display().to_string()), ("MCD_MPI_REPORT".into(), "1".into())];
    let run = MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env: vars, output_per_rank: true, ..MpiRun::default() };
    let out = run.output(&c, program.to_str().unwrap(), &[ROUNDS.to_string()], Duration::from_secs(240)).unwrap();
    assert!(out.success(), "{mpi}: mpirun failed:\n{}\n{}", out.stdout, out.stderr);
    let persistent_rounds = ROUNDS / 4 + 1;
    for rank in 0..RANKS as u64 {
        // Refused: 2 per round alone; beside a waiter, every round but
        // those where this rank is held back (rank size-1-r%size for the
        // MPI_Ibarrier, r%size for the persistent one).
        let held_back = (0..ROUNDS).filter(|r| RANKS as u64 - 1 - r % RANKS as u64 == rank).count() as u64;
        let held_back_persistent = (0..persistent_rounds).filter(|r| r % RANKS as u64 == rank).count() as u64;
        let refused = 2 * ROUNDS + (ROUNDS - held_back) + (persistent_rounds - held_back_persistent);
        let verdict = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("free_check: rank {rank}: ")))
            .unwrap_or_else(|| panic!("{mpi}: no verdict from rank {rank}:\n{}\n{}", out.stdout, out.stderr));
        assert!(verdict.ends_with(&format!(" 0 wrong, {refused} refused")), "{mpi}: {verdict} (want {refused} refused)\n{}", out.stderr);
        assert!(!verdict.contains(": 0 checks"), "{mpi}: {verdict}");
        let said = format!("mcd-mpi: rank {rank}: MPI_Request_free of ");
        assert_eq!(out.stderr.matches(&said).count() as u64, refused, "{mpi}: rank {rank}: the interposer's refusals on stderr:\n{}", out.stderr);
        let cancels = format!("mcd-mpi: rank {rank}: MPI_Cancel of an MPI_Ibarrier refused");
        assert_eq!(out.stderr.matches(&cancels).count() as u64, ROUNDS, "{mpi}: rank {rank}: the refused cancels on stderr:\n{}", out.stderr);
    }
    for bad in [" failed: ", "could not start", "failed to start", "a start of a persistent", "never completed"] {
        assert!(!out.stderr.contains(bad), "{mpi}: {bad}:\n{}", out.stderr);
    }
    // Every collective through mcd, none to PMPI, none left to MPI_Finalize:
    // MPI_Ibarrier 3 per round (one freed, one cancelled, one beside a
    // waiter); MPI_Iallreduce 1 per round, the last one and the persistent
    // one's starts (counted as MPI_Iallreduce too).
    let expected = [3 * ROUNDS, 0, ROUNDS + 1 + persistent_rounds, 0, 0, 0, 0, 0, persistent_rounds, 0, 0];
    for (rank, r) in report_numbers::<11>(&out, RANKS, "nonblocking").iter().enumerate() {
        assert_eq!(
            r, &expected,
            "{mpi}: rank {rank}: Ibarrier, Iallreduce, Ireduce, Ibcast via mcd and PMPI; persistent starts via mcd, inits via PMPI; finalized"
        );
    }
}

#[test]
fn frees_of_running_collectives_are_refused_alone_and_beside_a_waiting_thread_under_open_mpi() {
    freeing(Mpi::OpenMpi, "frqo");
}

#[test]
fn frees_of_running_collectives_are_refused_alone_and_beside_a_waiting_thread_under_mpich() {
    freeing(Mpi::Mpich, "frqm");
}
