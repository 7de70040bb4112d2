/* ibarrier_overlap: how much of an MPI_Ibarrier hides behind computation,
 * by the OSU micro-benchmarks' definition (osu_ibarrier). An ordinary MPI
 * program (no mcd header): run it as is, or with the interposer preloaded.
 *
 *   ibarrier_overlap [ITERATIONS] [WARMUP]
 *
 * 1. pure: ITERATIONS times MPI_Ibarrier then MPI_Wait at once; t_pure is
 *    the mean time of one (after WARMUP untimed ones).
 * 2. overlapped: ITERATIONS times MPI_Ibarrier, then computing for t_pure
 *    (a busy loop, no MPI call), then MPI_Wait; t_overall is the mean time
 *    of the three, t_compute the mean time spent computing.
 * 3. overlap = max(0, 100 - 100 (t_overall - t_compute) / t_pure): 100%
 *    when the wait costs nothing after the computing (the barrier completed
 *    meanwhile), 0% when all of it is still to do. Each time is the mean
 *    over the ranks (as OSU reduces them), the overlap computed from those.
 *
 * Rank 0 prints one JSON line: {"ranks", "iterations", "pure_us",
 * "overall_us", "compute_us", "init_us", "wait_us", "overlap_pct"}. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

/* Computes for `us` microseconds without calling MPI. */
static double compute(double us) {
    double start = now_us(), until = start + us;
    volatile double x = 1.0;
    while (now_us() < until)
        for (int i = 0; i < 64; i++) x = x * 1.0000001 + 1e-9;
    return now_us() - start;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iterations = argc > 1 ? atoi(argv[1]) : 1000;
    int warmup = argc > 2 ? atoi(argv[2]) : 100;
    MPI_Request req;
    double t = 0;
    for (int i = 0; i < warmup + iterations; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t = now_us();
        }
        MPI_Ibarrier(MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    double pure = (now_us() - t) / iterations;
    /* Every rank computes for the same time: the ranks' mean (as OSU). */
    MPI_Allreduce(MPI_IN_PLACE, &pure, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    pure /= size;
    double sums[4] = {0}; /* overall, compute, init, wait */
    for (int i = 0; i < warmup + iterations; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            sums[0] = sums[1] = sums[2] = sums[3] = 0;
        }
        double start = now_us();
        MPI_Ibarrier(MPI_COMM_WORLD, &req);
        double started = now_us();
        double computed = compute(pure);
        double waiting = now_us();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        double end = now_us();
        sums[0] += end - start;
        sums[1] += computed;
        sums[2] += started - start;
        sums[3] += end - waiting;
    }
    double mean[4];
    for (int k = 0; k < 4; k++) mean[k] = sums[k] / iterations;
    double all[4] = {mean[0], mean[1], mean[2], mean[3]};
    MPI_Reduce(rank ? all : MPI_IN_PLACE, all, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double overlap = 100.0 - 100.0 * (all[0] / size - all[1] / size) / pure;
        if (overlap < 0) overlap = 0;
        printf("{\"ranks\": %d, \"iterations\": %d, \"pure_us\": %.3f, \"overall_us\": %.3f, \"compute_us\": %.3f, \"init_us\": %.3f, "
               "\"wait_us\": %.3f, \"overlap_pct\": %.2f}\n",
               size, iterations, pure, all[0] / size, all[1] / size, all[2] / size, all[3] / size, overlap);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
