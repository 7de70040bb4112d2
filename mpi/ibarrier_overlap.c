/* ibarrier_overlap: how much of an MPI_Ibarrier hides behind computation,
 * by the OSU micro-benchmarks' definition (osu_ibarrier). An ordinary MPI
 * program (no mcd header): run it as is, or with the interposer preloaded.
 *
 *   ibarrier_overlap [ITERATIONS] [WARMUP] [FACTOR]
 *
 * 1. pure: ITERATIONS times MPI_Ibarrier then MPI_Wait at once; t_pure is
 *    the mean time of one (after WARMUP untimed ones).
 * 2. overlapped: ITERATIONS times MPI_Ibarrier, then computing for t_pure
 *    (a busy loop, no MPI call), then MPI_Wait; t_overall is the mean time
 *    of the three, t_compute the mean time spent computing. FACTOR (default
 *    1, OSU's) computes FACTOR x t_pure instead; then fewer iterations when
 *    they would compute more than 10 s in all (at least 50; the same on
 *    every rank, from the ranks' mean t_pure).
 * 3. overlap = max(0, 100 - 100 (t_overall - t_compute) / t_pure): 100%
 *    when the wait costs nothing after the computing (the barrier completed
 *    meanwhile), 0% when all of it is still to do. Each time is the mean
 *    over the ranks (as OSU reduces them), the overlap computed from those.
 * 4. The same at the median, beside OSU's means (which a few iterations in
 *    which the scheduler ran something else for milliseconds outweigh on a
 *    shared machine): each rank's median of one pure iteration, of the
 *    start (MPI_Ibarrier) and of the wait after computing, and their 99th
 *    percentiles, averaged over the ranks; overlap_p50 = max(0, 100 - 100
 *    (init_p50 + wait_p50) / pure_p50).
 *
 * Rank 0 prints one JSON line: {"ranks", "iterations", "compute_factor",
 * "overlapped_iterations", "pure_us",
 * "overall_us", "compute_us", "init_us", "wait_us", "overlap_pct",
 * "pure_p50_us", "init_p50_us", "wait_p50_us", "pure_p99_us",
 * "init_p99_us", "wait_p99_us", "overlap_p50_pct"}. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median and 99th percentile of `v[0..n]` (sorted in place). */
static void median_p99(double *v, int n, double *p50, double *p99) {
    qsort(v, n, sizeof *v, cmp_double);
    int at = (int)(0.99 * n);
    *p50 = v[n / 2];
    *p99 = v[at < n ? at : n - 1];
}

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
    double factor = argc > 3 ? atof(argv[3]) : 1.0;
    if (iterations < 1) iterations = 1;
    if (!(factor > 0)) factor = 1.0;
    MPI_Request req;
    double t = 0, *each = malloc(sizeof(double) * iterations), *inits = malloc(sizeof(double) * iterations),
           *waits = malloc(sizeof(double) * iterations);
    for (int i = 0; i < warmup + iterations; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t = now_us();
        }
        double t0 = now_us();
        MPI_Ibarrier(MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (i >= warmup) each[i - warmup] = now_us() - t0;
    }
    double pure = (now_us() - t) / iterations;
    /* Every rank computes for the same time: the ranks' mean (as OSU). */
    MPI_Allreduce(MPI_IN_PLACE, &pure, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    pure /= size;
    double work = factor * pure;
    int overlapped = iterations;
    if (factor > 1 && overlapped * work > 10e6) overlapped = (int)(10e6 / work) > 50 ? (int)(10e6 / work) : 50;
    if (overlapped > iterations) overlapped = iterations;
    int warm = warmup < overlapped ? warmup : overlapped;
    double sums[4] = {0}; /* overall, compute, init, wait */
    for (int i = 0; i < warm + overlapped; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            sums[0] = sums[1] = sums[2] = sums[3] = 0;
        }
        double start = now_us();
        MPI_Ibarrier(MPI_COMM_WORLD, &req);
        double started = now_us();
        double computed = compute(work);
        double waiting = now_us();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        double end = now_us();
        sums[0] += end - start;
        sums[1] += computed;
        sums[2] += started - start;
        sums[3] += end - waiting;
        if (i >= warm) inits[i - warm] = started - start, waits[i - warm] = end - waiting;
    }
    double mean[4];
    for (int k = 0; k < 4; k++) mean[k] = sums[k] / overlapped;
    /* mean overall, compute, init, wait; then the p50 and p99 of pure, init, wait */
    double all[10] = {mean[0], mean[1], mean[2], mean[3]};
    median_p99(each, iterations, &all[4], &all[7]);
    median_p99(inits, overlapped, &all[5], &all[8]);
    median_p99(waits, overlapped, &all[6], &all[9]);
    MPI_Reduce(rank ? all : MPI_IN_PLACE, all, 10, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int k = 0; k < 10; k++) all[k] /= size;
        double overlap = 100.0 - 100.0 * (all[0] - all[1]) / pure;
        if (overlap < 0) overlap = 0;
        double overlap_p50 = 100.0 - 100.0 * (all[5] + all[6]) / all[4];
        if (overlap_p50 < 0) overlap_p50 = 0;
        printf("{\"ranks\": %d, \"iterations\": %d, \"compute_factor\": %g, \"overlapped_iterations\": %d, \"pure_us\": %.3f, \"overall_us\": %.3f, \"compute_us\": %.3f, \"init_us\": %.3f, "
               "\"wait_us\": %.3f, \"overlap_pct\": %.2f, \"pure_p50_us\": %.3f, \"init_p50_us\": %.3f, \"wait_p50_us\": %.3f, "
               "\"pure_p99_us\": %.3f, \"init_p99_us\": %.3f, \"wait_p99_us\": %.3f, \"overlap_p50_pct\": %.2f}\n",
               size, iterations, factor, overlapped, pure, all[0], all[1], all[2], all[3], overlap, all[4], all[5], all[6], all[7], all[8], all[9], overlap_p50);
        fflush(stdout);
    }
    free(each), free(inits), free(waits);
    MPI_Finalize();
    return 0;
}
