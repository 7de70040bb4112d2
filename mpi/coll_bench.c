/* coll_bench: an ordinary MPI collectives benchmark in the style of
 * osu_allreduce, osu_bcast and the Intel MPI Benchmarks, written against
 * plain MPI (no mcd header), so that the same binary measures the MPI's own
 * collectives and, with the mcd interposer preloaded, mcd's.
 *
 *   coll_bench [--sizes 8,64,...] [--iterations N] [--warmup W] [--sync]
 *              [--pmpi-sync] [--collectives allreduce,bcast,...]
 *              [--comm-sizes 2,4,8] [--check K]
 *
 * Collectives (--collectives; default allreduce,bcast): barrier, allreduce
 * (MPI_SUM on doubles), reduce (MPI_SUM on doubles to rank 0), bcast (from
 * rank 0), and the nonblocking forms ibarrier, iallreduce, ireduce, ibcast,
 * each timed as the call then MPI_Wait at once. A barrier has no size: one
 * row (bytes 0).
 *
 * Communicators: MPI_COMM_WORLD by default. With --comm-sizes, as the Intel
 * MPI Benchmarks do, the program makes its own communicators instead: for
 * each P, MPI_Comm_split of the world into the first P ranks (the others get
 * MPI_COMM_NULL and wait), then MPI_Comm_dup of that, and the collectives
 * run on the duplicate (both constructors are exercised; the split lives
 * meanwhile). The ranks outside wait in a PMPI_Ibarrier on the world that
 * they test every 200 µs, sleeping between, so they leave the cores to the
 * ranks measured.
 *
 * For each communicator, collective and size: W warm-up calls, then N timed
 * calls (with --sync, an untimed MPI_Barrier on the communicator before
 * each, as osu_bcast does: then a call's time is how long until this rank
 * has the result, not how fast calls can follow one another; with
 * --pmpi-sync that barrier is PMPI_Barrier, the MPI's own, so that two
 * contenders' timed calls start from the same barrier's exits). With
 * --check K, first K calls with inputs that change each call (every root in
 * turn for reduce and bcast), each compared with the PMPI call on copies of
 * the same inputs, exactly (the values are whole numbers, so sums of doubles
 * are exact in any order); the last timed call's result is checked too.
 *
 * Rank 0 prints one JSON object per row: the median, 99th percentile, mean
 * and maximum of the calls, each averaged over the communicator's ranks,
 * each rank's own median ("rank_p50_us", in rank order), and whether every
 * rank's result was right; then one line
 * {"calls": {...}} with the number of calls the program made of each kind
 * that an interposer may serve (MPI_Barrier, MPI_Allreduce, ... summed over
 * the ranks; PMPI calls are not counted), so a report of the calls that went
 * through mcd (MCD_MPI_REPORT_JSON) can be compared with it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { BARRIER, ALLREDUCE, REDUCE, BCAST, IBARRIER, IALLREDUCE, IREDUCE, IBCAST, KINDS };
static const char *names[KINDS] = {"barrier", "allreduce", "reduce", "bcast", "ibarrier", "iallreduce", "ireduce", "ibcast"};
static const char *mpi_names[KINDS] = {"MPI_Barrier",  "MPI_Allreduce",  "MPI_Reduce",  "MPI_Bcast",
                                       "MPI_Ibarrier", "MPI_Iallreduce", "MPI_Ireduce", "MPI_Ibcast"};
/* Calls made of each kind (MPI_ names only). */
static unsigned long long made[KINDS];
static int sync_calls, pmpi_sync;

/* One call of `kind` on `comm` through the MPI_ names (an interposer's):
 * `in` the input, `out` the result (a broadcast: `out` is the buffer). */
static void call(int kind, const double *in, double *out, int count, int root, MPI_Comm comm) {
    MPI_Request r;
    made[kind]++;
    switch (kind) {
    case BARRIER: MPI_Barrier(comm); break;
    case ALLREDUCE: MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, comm); break;
    case REDUCE: MPI_Reduce(in, out, count, MPI_DOUBLE, MPI_SUM, root, comm); break;
    case BCAST: MPI_Bcast(out, count, MPI_DOUBLE, root, comm); break;
    case IBARRIER: MPI_Ibarrier(comm, &r); break;
    case IALLREDUCE: MPI_Iallreduce(in, out, count, MPI_DOUBLE, MPI_SUM, comm, &r); break;
    case IREDUCE: MPI_Ireduce(in, out, count, MPI_DOUBLE, MPI_SUM, root, comm, &r); break;
    case IBCAST: MPI_Ibcast(out, count, MPI_DOUBLE, root, comm, &r); break;
    }
    if (kind >= IBARRIER) MPI_Wait(&r, MPI_STATUS_IGNORE);
}

/* The same through PMPI (the reference). */
static void reference(int kind, const double *in, double *out, int count, int root, MPI_Comm comm) {
    switch (kind % IBARRIER) {
    case BARRIER: PMPI_Barrier(comm); break;
    case ALLREDUCE: PMPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, comm); break;
    case REDUCE: PMPI_Reduce(in, out, count, MPI_DOUBLE, MPI_SUM, root, comm); break;
    case BCAST: PMPI_Bcast(out, count, MPI_DOUBLE, root, comm); break;
    }
}

/* This rank's input of call `k`: whole numbers, different per rank and call. */
static void fill(double *in, int count, int rank, int k) {
    for (int i = 0; i < count; i++) in[i] = (double)((rank + 1) * (i % 97) + k % 1000);
}

/* Whether the result in `got` is right against `want` for this rank. */
static int same(int kind, const double *got, const double *want, int count, int rank, int root) {
    int base = kind % IBARRIER;
    if (base == BARRIER || (base == REDUCE && rank != root)) return 1;
    return memcmp(got, want, sizeof(double) * count) == 0;
}

/* K calls checked against PMPI on copies of the same inputs; 1 if right. */
static int check(int kind, int count, int k_calls, MPI_Comm comm) {
    int rank, size, ok = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    size_t bytes = sizeof(double) * (count ? count : 1);
    double *in = malloc(bytes), *in_copy = malloc(bytes), *got = malloc(bytes), *want = malloc(bytes);
    for (int k = 0; k < k_calls; k++) {
        int root = k % size;
        fill(in, count, rank, k);
        memcpy(in_copy, in, bytes);
        /* The broadcast's buffer: the root's data, elsewhere something else. */
        for (int i = 0; i < count; i++) got[i] = want[i] = rank == root ? in[i] : -1.0 - i;
        call(kind, in, got, count, root, comm);
        ok &= memcmp(in, in_copy, bytes) == 0; /* the send buffer is unchanged */
        reference(kind, in, want, count, root, comm);
        ok &= same(kind, got, want, count, rank, root);
    }
    free(in), free(in_copy), free(got), free(want);
    return ok;
}

/* Waits for every rank of the world without keeping a core busy. */
static void quiet_world_barrier(void) {
    MPI_Request r;
    int done = 0;
    PMPI_Ibarrier(MPI_COMM_WORLD, &r);
    for (;;) {
        PMPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (done) return;
        struct timespec gap = {0, 200000};
        nanosleep(&gap, NULL);
    }
}

/* Prints the statistics of `t[0..n]` over the members of `comm` (NULL
 * elsewhere), as JSON, at world rank 0 (a member). */
static void report(int kind, int bytes, double *t, int n, int ok, MPI_Comm comm, int comm_size, const char *comm_kind) {
    double mine[4] = {0, 0, 0, 0}, sums[4];
    int all_ok = 0, wrank, wsize;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (comm != MPI_COMM_NULL) {
        double sum = 0;
        for (int i = 0; i < n; i++) sum += t[i];
        qsort(t, n, sizeof(double), cmp_double);
        int p99 = (int)(0.99 * n);
        if (p99 >= n) p99 = n - 1;
        mine[0] = t[n / 2], mine[1] = t[p99], mine[2] = sum / n, mine[3] = t[n - 1];
    } else {
        ok = 1;
    }
    PMPI_Reduce(mine, sums, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    PMPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    /* Each member's own p50 (the communicator's ranks are the world's
     * first comm_size): which rank a row's time is spent at. */
    double *each = wrank == 0 ? malloc(sizeof(double) * (size_t)wsize) : NULL;
    PMPI_Gather(&mine[0], 1, MPI_DOUBLE, each, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (wrank == 0) {
        printf("{\"collective\":\"%s\",\"bytes\":%d,\"ranks\":%d,\"job_ranks\":%d,\"comm\":\"%s\",\"iterations\":%d,\"p50_us\":%.3f,"
               "\"p99_us\":%.3f,\"mean_us\":%.3f,\"max_us\":%.3f,\"correct\":%s,\"sync\":%s,\"rank_p50_us\":[",
               names[kind], bytes, comm_size, wsize, comm_kind, n, sums[0] / comm_size, sums[1] / comm_size, sums[2] / comm_size,
               sums[3] / comm_size, all_ok ? "true" : "false", sync_calls ? "true" : "false");
        for (int r = 0; r < comm_size; r++) printf("%s%.1f", r ? "," : "", each[r]);
        printf("]}\n");
        fflush(stdout);
        free(each);
    }
}

/* One row: `kind` of `bytes` on `comm` (NULL: this rank waits). */
static void row(int kind, int bytes, MPI_Comm comm, int comm_size, const char *comm_kind, int iterations, int warmup, int checks, double *t) {
    int ok = 1;
    if (comm != MPI_COMM_NULL) {
        int rank, size;
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &size);
        int base = kind % IBARRIER, count = base == BARRIER ? 0 : bytes / 8;
        if (base != BARRIER && count < 1) count = 1;
        if (checks) ok &= check(kind, count, checks, comm);
        double *in = malloc(sizeof(double) * (count ? count : 1)), *out = malloc(sizeof(double) * (count ? count : 1));
        fill(in, count, rank, 7);
        for (int i = 0; i < count; i++) out[i] = in[i];
        for (int i = 0; i < warmup; i++) call(kind, in, out, count, 0, comm);
        for (int k = 0; k < iterations; k++) {
            if (base == BCAST && rank == 0) out[0] = k;
            if (sync_calls && pmpi_sync) PMPI_Barrier(comm);
            else if (sync_calls) call(BARRIER, NULL, NULL, 0, 0, comm);
            double t0 = now_us();
            call(kind, in, out, count, 0, comm);
            t[k] = now_us() - t0;
            if (base == BCAST) ok &= out[0] == k;
        }
        /* The last result: allreduce and reduce (at the root) against the
         * sum of every rank's input, whole numbers: exact. */
        if (base == ALLREDUCE || (base == REDUCE && rank == 0))
            for (int i = 0; i < count; i++) ok &= out[i] == (double)(size * (size + 1) / 2 * (i % 97) + size * 7);
        free(in);
        free(out);
    }
    report(kind, kind % IBARRIER == BARRIER ? 0 : bytes, t, iterations, ok, comm, comm_size, comm_kind);
    quiet_world_barrier();
}

/* Parses a comma-separated list of names into `on` (1 per kind named). */
static int parse_kinds(const char *list, int on[KINDS]) {
    char copy[256];
    if (strlen(list) >= sizeof copy) return 0;
    strcpy(copy, list);
    memset(on, 0, sizeof(int) * KINDS);
    for (char *s = strtok(copy, ","); s; s = strtok(NULL, ",")) {
        int found = 0;
        for (int k = 0; k < KINDS; k++)
            if (!strcmp(s, names[k])) on[k] = found = 1;
        if (!found) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iterations = 1000, warmup = 100, checks = 0, on[KINDS];
    char sizes[256] = "8,64,512,1024,1400,4096", comm_sizes[256] = "";
    parse_kinds("allreduce,bcast", on);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(argv[i], "--iterations") && v) iterations = atoi(v), i++;
        else if (!strcmp(argv[i], "--warmup") && v) warmup = atoi(v), i++;
        else if (!strcmp(argv[i], "--check") && v) checks = atoi(v), i++;
        else if (!strcmp(argv[i], "--sync")) sync_calls = 1;
        else if (!strcmp(argv[i], "--pmpi-sync")) sync_calls = pmpi_sync = 1;
        else if (!strcmp(argv[i], "--sizes") && v && strlen(v) < sizeof sizes) strcpy(sizes, v), i++;
        else if (!strcmp(argv[i], "--comm-sizes") && v && strlen(v) < sizeof comm_sizes) strcpy(comm_sizes, v), i++;
        else if (!strcmp(argv[i], "--collectives") && v && parse_kinds(v, on)) i++;
        else bad = 1;
        if (bad) {
            if (rank == 0)
                fprintf(stderr, "usage: %s [--sizes 8,64,...] [--iterations N] [--warmup W] [--sync] [--pmpi-sync] [--collectives allreduce,bcast,...] "
                                "[--comm-sizes 2,4,8] [--check K]\n", argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (iterations < 1) iterations = 1;
    double *t = malloc(sizeof(double) * iterations);
    int list[64], lists = 0;
    for (char *s = strtok(sizes, ","); s && lists < 64; s = strtok(NULL, ",")) list[lists++] = atoi(s);
    /* The communicators: the world, or the program's own of each size. */
    int cs[16], ncs = 0;
    for (char *s = strtok(comm_sizes, ","); s && ncs < 16; s = strtok(NULL, ",")) cs[ncs++] = atoi(s);
    for (int c = 0; c < (ncs ? ncs : 1); c++) {
        MPI_Comm split = MPI_COMM_NULL, comm = MPI_COMM_WORLD;
        int comm_size = size;
        const char *comm_kind = "world";
        if (ncs) {
            comm_size = cs[c] < size ? cs[c] : size;
            MPI_Comm_split(MPI_COMM_WORLD, rank < comm_size ? 0 : MPI_UNDEFINED, rank, &split);
            comm = MPI_COMM_NULL;
            if (split != MPI_COMM_NULL) MPI_Comm_dup(split, &comm);
            comm_kind = "split+dup";
        }
        for (int kind = 0; kind < KINDS; kind++) {
            if (!on[kind]) continue;
            if (kind % IBARRIER == BARRIER) row(kind, 0, comm, comm_size, comm_kind, iterations, warmup, checks, t);
            else
                for (int s = 0; s < lists; s++) row(kind, list[s], comm, comm_size, comm_kind, iterations, warmup, checks, t);
        }
        if (ncs && comm != MPI_COMM_NULL) {
            MPI_Comm_free(&comm);
            MPI_Comm_free(&split);
        }
    }
    unsigned long long all[KINDS];
    PMPI_Reduce(made, all, KINDS, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("{\"calls\": {");
        for (int k = 0; k < KINDS; k++) printf("%s\"%s\": %llu", k ? ", " : "", mpi_names[k], all[k]);
        printf("}}\n");
        fflush(stdout);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
