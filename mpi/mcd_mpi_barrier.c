/* mcd_mpi_barrier.c — the MPI_Barrier interposer.
 *
 * Preloaded into an unmodified MPI program (LD_PRELOAD=libmcd_mpi_barrier.so),
 * it serves MPI_Barrier on MPI_COMM_WORLD with mcd's barrier and passes every
 * other communicator to PMPI_Barrier. It starts mcd in MPI_Init /
 * MPI_Init_thread (rank and size from MPI; interfaces, job key, algorithm...
 * from the environment, see mcd_barrier.h) and stops it in MPI_Finalize (a
 * collective closing barrier; meanwhile mcd's own thread answers peers while
 * the program computes or calls other MPI functions). When
 * mcd cannot start on some rank (no CAP_NET_RAW, no interface...), every rank
 * falls back to PMPI_Barrier and the lowest failing rank prints one warning.
 *
 * MPI_Ibarrier is not interposed: an MPI request completed by mcd would need
 * MPI to drive mcd's progress inside MPI_Wait/MPI_Test, which the PMPI
 * interface cannot arrange (generalized requests have no progress hook).
 *
 *   MCD_MPI_DISABLE=1   do not start mcd (everything goes to PMPI_Barrier)
 *   MCD_MPI_REPORT=1    each rank prints its counters in MPI_Finalize:
 *                       "mcd-mpi: rank R: N MPI_Barrier via mcd (ALG), M via PMPI; ..."
 *
 * Built by `tools::mpi::build_interposer` (mpicc -shared, with the static
 * libmcd_barrier.a inside, so the one file is all a job needs). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcd_barrier.h"

static mcd_job *job;
static int active;
static unsigned long long via_mcd, via_pmpi;

static void start_mcd(void) {
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *disable = getenv("MCD_MPI_DISABLE");
    int ok = 0;
    char reason[512] = "disabled by MCD_MPI_DISABLE";
    if (!(disable && *disable && strcmp(disable, "0"))) {
        mcd_params params;
        mcd_params_default(&params);
        params.rank = rank;
        params.size = size;
        int rc = mcd_init(&params, &job);
        ok = rc == MCD_OK;
        if (!ok) snprintf(reason, sizeof reason, "%s", mcd_last_error());
    }
    /* Every rank must agree: mcd on all, or PMPI on all. */
    int all_ok = 0, first_failure = ok ? size : rank;
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, &first_failure, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (rank == first_failure)
            fprintf(stderr, "mcd-mpi: warning: MPI_Barrier falls back to PMPI_Barrier: rank %d: %s\n", rank, reason);
        if (job) {
            mcd_discard(job); /* not every rank has mcd: no closing barrier */
            job = NULL;
        }
    }
    active = all_ok;
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) start_mcd();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) start_mcd();
    return rc;
}

int MPI_Barrier(MPI_Comm comm) {
    if (active && comm == MPI_COMM_WORLD) {
        int rc = mcd_barrier(job);
        if (rc == MCD_OK) {
            via_mcd++;
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Barrier on MPI_COMM_WORLD failed: %s\n", mcd_last_error());
        return MPI_ERR_OTHER;
    }
    via_pmpi++;
    return PMPI_Barrier(comm);
}

int MPI_Finalize(void) {
    if (active) {
        int rank_of_job = mcd_rank(job);
        const char *report = getenv("MCD_MPI_REPORT");
        if (report && *report && strcmp(report, "0")) {
            mcd_stats s;
            mcd_get_stats(job, &s);
            fprintf(stderr, "mcd-mpi: rank %d: %llu MPI_Barrier via mcd (%s), %llu via PMPI; mcd barriers %llu, sent %llu, received %llu, resends %llu\n",
                    mcd_rank(job), via_mcd, mcd_algorithm(job), via_pmpi, (unsigned long long)s.barriers,
                    (unsigned long long)s.messages_sent, (unsigned long long)s.frames_received, (unsigned long long)s.resends);
        }
        /* Collective: a closing barrier, then answers until every rank is done,
         * so a rank whose last release was lost still completes. mcd's own
         * thread has answered peers all along, during compute and other calls. */
        if (mcd_finalize(job) != MCD_OK)
            fprintf(stderr, "mcd-mpi: rank %d: finalizing mcd: %s\n", rank_of_job, mcd_last_error());
        job = NULL;
        active = 0;
    } else {
        const char *report = getenv("MCD_MPI_REPORT");
        if (report && *report && strcmp(report, "0")) {
            int rank;
            PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
            fprintf(stderr, "mcd-mpi: rank %d: 0 MPI_Barrier via mcd (off), %llu via PMPI\n", rank, via_pmpi);
        }
    }
    return PMPI_Finalize();
}
