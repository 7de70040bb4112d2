/* barrier_bench: an ordinary MPI barrier benchmark, written against plain MPI
 * (no mcd header), so that the same binary measures Open MPI's own
 * MPI_Barrier and, with the mcd interposer preloaded, mcd's.
 *
 *   barrier_bench [--method paper|osu] [--iterations N] [--warmup W] [--dummy-us D]
 *                 [--comm world|dup|split]
 *
 * comm:  the communicator the barriers run on: MPI_COMM_WORLD (the default),
 *        a duplicate of it, or its two halves by parity (MPI_Comm_split), each
 *        half running its barriers at the same time as the other.
 *
 * paper: per iteration { t0; MPI_Barrier; t1; ~D µs dummy loop }; each rank
 *        keeps min, mean, max, median, 99th and 99.9th percentiles of t1 - t0; rank 0
 *        prints those averaged over the ranks (Iwasaki, Matsuoka et al., §4).
 * osu:   warm-up, then N back-to-back barriers; each rank's mean is its loop
 *        time / N; min, mean and max over the ranks (osu_barrier), percentiles
 *        of the individual barriers averaged over the ranks.
 * Rank 0 prints one JSON object on stdout (statistics over all ranks, of
 * either half with --comm split). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void spin_us(double us) {
    double until = now_us() + us;
    while (now_us() < until) {
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--method paper|osu] [--iterations N] [--warmup W] [--dummy-us D] [--comm world|dup|split]\n", argv0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int paper = 1, iterations = 1000, warmup = 100;
    double dummy_us = 30.0;
    const char *comm_name = "world";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--method") && v) { paper = strcmp(v, "osu") != 0; i++; }
        else if (!strcmp(argv[i], "--iterations") && v) { iterations = atoi(v); i++; }
        else if (!strcmp(argv[i], "--warmup") && v) { warmup = atoi(v); i++; }
        else if (!strcmp(argv[i], "--dummy-us") && v) { dummy_us = atof(v); i++; }
        else if (!strcmp(argv[i], "--comm") && v && (!strcmp(v, "world") || !strcmp(v, "dup") || !strcmp(v, "split"))) { comm_name = v; i++; }
        else {
            if (rank == 0) usage(argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (iterations < 1) iterations = 1;
    MPI_Comm comm = MPI_COMM_WORLD;
    if (!strcmp(comm_name, "dup")) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    else if (!strcmp(comm_name, "split")) MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comm);

    double *t = malloc(sizeof(double) * iterations);
    if (!t) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < warmup; i++) MPI_Barrier(comm);
    double start = now_us();
    for (int i = 0; i < iterations; i++) {
        double t0 = now_us();
        MPI_Barrier(comm);
        t[i] = now_us() - t0;
        if (paper) spin_us(dummy_us);
    }
    double loop_mean = (now_us() - start) / iterations;

    double sum = 0;
    for (int i = 0; i < iterations; i++) sum += t[i];
    qsort(t, iterations, sizeof(double), cmp_double);
    int p99 = (int)(0.99 * iterations), p999 = (int)(0.999 * iterations);
    if (p99 >= iterations) p99 = iterations - 1;
    if (p999 >= iterations) p999 = iterations - 1;
    /* per rank: min, mean, max, p50, p99 of single barriers; loop mean; p99.9 */
    double mine[7] = {t[0], sum / iterations, t[iterations - 1], t[iterations / 2], t[p99], loop_mean, t[p999]};
    double sums[7], lo, hi;
    MPI_Reduce(mine, sums, 7, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&loop_mean, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&loop_mean, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double min, mean, max;
        if (paper) { min = sums[0] / size; mean = sums[1] / size; max = sums[2] / size; }
        else { min = lo; mean = sums[5] / size; max = hi; }
        printf("{\"ranks\":%d,\"comm\":\"%s\",\"method\":\"%s\",\"iterations\":%d,\"min_us\":%.3f,\"mean_us\":%.3f,"
               "\"max_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f}\n",
               size, comm_name, paper ? "paper" : "osu", iterations, min, mean, max, sums[3] / size, sums[4] / size, sums[6] / size);
        fflush(stdout);
    }
    free(t);
    if (comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
