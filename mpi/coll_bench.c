/* coll_bench: an ordinary MPI collectives benchmark in the style of
 * osu_allreduce and osu_bcast, written against plain MPI (no mcd header), so
 * that the same binary measures Open MPI's own collectives and, with the mcd
 * interposer preloaded, mcd's.
 *
 *   coll_bench [--sizes 8,64,...] [--iterations N] [--warmup W] [--sync]
 *
 * For each size (bytes of doubles), MPI_Allreduce (MPI_SUM on doubles) then
 * MPI_Bcast (from rank 0, rotating the root would measure the same tree),
 * each: W warm-up calls, then N back-to-back timed calls (with --sync, an
 * untimed MPI_Barrier before each, as osu_bcast does: then a call's time is
 * how long until this rank has the result, not how fast calls can follow one
 * another; an eager broadcast's root returns at once, its receivers wait for
 * the data). Every rank keeps
 * each call's time; rank 0 prints, per collective and size, one JSON object
 * with the median, 99th percentile, mean and maximum of the calls, each
 * averaged over the ranks, and whether every rank's result was right. */
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints the statistics of `t[0..n]` over all ranks, as JSON, at rank 0. */
static int sync_calls;

static void report(const char *what, int bytes, double *t, int n, int ok, int rank, int size) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, n, sizeof(double), cmp_double);
    int p99 = (int)(0.99 * n);
    if (p99 >= n) p99 = n - 1;
    double mine[4] = {t[n / 2], t[p99], sum / n, t[n - 1]}, sums[4];
    int all_ok = 0;
    PMPI_Reduce(mine, sums, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    PMPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("{\"collective\":\"%s\",\"bytes\":%d,\"ranks\":%d,\"iterations\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
               "\"mean_us\":%.3f,\"max_us\":%.3f,\"correct\":%s,\"sync\":%s}\n",
               what, bytes, size, n, sums[0] / size, sums[1] / size, sums[2] / size, sums[3] / size, all_ok ? "true" : "false", sync_calls ? "true" : "false");
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iterations = 1000, warmup = 100;
    char sizes[256] = "8,64,512,1024,1400,4096";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--iterations") && v) { iterations = atoi(v); i++; }
        else if (!strcmp(argv[i], "--warmup") && v) { warmup = atoi(v); i++; }
        else if (!strcmp(argv[i], "--sync")) sync_calls = 1;
        else if (!strcmp(argv[i], "--sizes") && v && strlen(v) < sizeof sizes) { strcpy(sizes, v); i++; }
        else {
            if (rank == 0) fprintf(stderr, "usage: %s [--sizes 8,64,...] [--iterations N] [--warmup W] [--sync]\n", argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (iterations < 1) iterations = 1;
    double *t = malloc(sizeof(double) * iterations);
    for (char *s = strtok(sizes, ","); s; s = strtok(NULL, ",")) {
        int bytes = atoi(s), count = bytes / 8;
        if (count < 1) count = 1;
        double *in = malloc(sizeof(double) * count), *out = malloc(sizeof(double) * count);
        for (int i = 0; i < count; i++) in[i] = rank + i;
        /* Allreduce: the sum of rank + i over the ranks, exact in doubles. */
        int ok = 1;
        for (int i = 0; i < warmup; i++) MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int k = 0; k < iterations; k++) {
            if (sync_calls) MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_us();
            MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            t[k] = now_us() - t0;
        }
        for (int i = 0; i < count; i++) ok &= out[i] == (double)size * (size - 1) / 2 + (double)i * size;
        report("allreduce", count * 8, t, iterations, ok, rank, size);
        /* Bcast from rank 0. */
        ok = 1;
        for (int i = 0; i < warmup; i++) MPI_Bcast(out, count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        for (int k = 0; k < iterations; k++) {
            if (rank == 0) out[0] = k;
            if (sync_calls) MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_us();
            MPI_Bcast(out, count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            t[k] = now_us() - t0;
            ok &= out[0] == k;
        }
        report("bcast", count * 8, t, iterations, ok, rank, size);
        free(in);
        free(out);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
