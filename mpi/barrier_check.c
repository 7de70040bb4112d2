/* barrier_check: an ordinary MPI program (no mcd header) that checks
 * MPI_Barrier's one promise and uses a few other MPI calls around it, so that
 * the interposer can be tested on an unmodified program.
 *
 *   barrier_check [COUNT] [GAP_MS]
 *
 * Every rank runs COUNT barriers on MPI_COMM_WORLD, recording when it entered
 * and left each (CLOCK_MONOTONIC: all ranks of the virtual cluster share one
 * machine's clock). Rank 0 gathers the times and checks that no rank left
 * barrier k before every rank had entered it. Around that: MPI_Bcast,
 * MPI_Allreduce, a ring of MPI_Sendrecv, and 10 barriers on a duplicate of
 * MPI_COMM_WORLD (its own mcd barrier under the interposer; mpi/comm_check.c
 * checks communicators).
 * With GAP_MS > 0, before every 25th barrier every rank "computes" (sleeps)
 * GAP_MS and one rank, in turn, GAP_MS more, then all run an MPI_Allreduce
 * and an MPI_Bcast: gaps and imbalance longer than MCD_BARRIER_TIMEOUT,
 * other collectives in between, as real programs do.
 * Rank 0 prints "barrier_check: OK ..." and exits 0, or names the violation
 * and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int count = argc > 1 ? atoi(argv[1]) : 200;
    long gap_ms = argc > 2 ? atol(argv[2]) : 0;
    int failed = 0;

    /* Bcast and Allreduce. */
    int token = rank == 0 ? 4242 : 0;
    MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
    long sum = 0, mine = rank;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (token != 4242 || sum != (long)size * (size - 1) / 2) {
        fprintf(stderr, "rank %d: bcast %d allreduce %ld\n", rank, token, sum);
        failed = 1;
    }
    /* A ring of Sendrecv. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size, got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (got != left) {
        fprintf(stderr, "rank %d: ring got %d, expected %d\n", rank, got, left);
        failed = 1;
    }

    /* The barriers, with small random delays so that arrivals spread. */
    double *times = malloc(sizeof(double) * 2 * count);
    srand(rank * 7919 + 1);
    for (int k = 0; k < count; k++) {
        if (gap_ms > 0 && k % 25 == 0) {
            struct timespec gap = {gap_ms / 1000, (gap_ms % 1000) * 1000000L};
            nanosleep(&gap, NULL);
            if ((k / 25) % size == rank) nanosleep(&gap, NULL);
            long one = 1, ranks = 0;
            MPI_Allreduce(&one, &ranks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            int round = rank == 0 ? k : -1;
            MPI_Bcast(&round, 1, MPI_INT, 0, MPI_COMM_WORLD);
            if (ranks != size || round != k) {
                fprintf(stderr, "rank %d: at barrier %d allreduce %ld bcast %d\n", rank, k, ranks, round);
                failed = 1;
            }
        }
        if (rand() % 4 == 0) {
            double until = now_us() + rand() % 50;
            while (now_us() < until) {
            }
        }
        times[2 * k] = now_us();
        MPI_Barrier(MPI_COMM_WORLD);
        times[2 * k + 1] = now_us();
    }
    /* Barriers on another communicator. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    for (int k = 0; k < 10; k++) MPI_Barrier(dup);
    MPI_Comm_free(&dup);

    double *all = rank == 0 ? malloc(sizeof(double) * 2 * count * size) : NULL;
    MPI_Gather(times, 2 * count, MPI_DOUBLE, all, 2 * count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int any_failed = 0;
    MPI_Reduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    int status = 0;
    if (rank == 0) {
        int violations = 0;
        for (int k = 0; k < count; k++) {
            double last_in = 0, first_out = 1e300;
            int who_out = -1, who_in = -1;
            for (int r = 0; r < size; r++) {
                double in = all[(size_t)r * 2 * count + 2 * k], out = all[(size_t)r * 2 * count + 2 * k + 1];
                if (in > last_in) { last_in = in; who_in = r; }
                if (out < first_out) { first_out = out; who_out = r; }
            }
            if (first_out < last_in) {
                if (violations++ < 5)
                    printf("barrier_check: VIOLATION barrier %d: rank %d left at %.3f before rank %d entered at %.3f\n",
                           k, who_out, first_out, who_in, last_in);
            }
        }
        if (violations || any_failed) {
            printf("barrier_check: FAILED (%d barrier violations, other calls %s)\n", violations, any_failed ? "wrong" : "right");
            status = 1;
        } else {
            printf("barrier_check: OK %d ranks, %d barriers, bcast/allreduce/sendrecv right\n", size, count);
        }
        fflush(stdout);
        free(all);
    }
    free(times);
    MPI_Finalize();
    return status;
}
