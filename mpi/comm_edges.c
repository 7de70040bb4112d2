/* comm_edges: communicators at the edges of what MPI programs do, for the
 * interposer's tests. An ordinary MPI program (no mcd header).
 *
 *   comm_edges threads ROUNDS     two threads per rank (MPI_THREAD_MULTIPLE),
 *                                 each duplicating its own parent communicator
 *                                 every 4 rounds and running a barrier on the
 *                                 duplicate every round, at random moments, so
 *                                 that ranks meet their communicators' first
 *                                 barriers in different orders; thread 0 also
 *                                 runs a world barrier every 3rd round. The
 *                                 last duplicates are left for MPI_Finalize.
 *   comm_edges free-order ROUNDS  four duplicates of the world, a barrier on
 *                                 each per round; every 3rd round all four are
 *                                 freed, even ranks first to last, odd ranks
 *                                 last to first, and made again; at the end
 *                                 rank 0 frees the first and only then tells
 *                                 rank 1 to free it; the other three are left
 *                                 for MPI_Finalize.
 *   comm_edges fd-limit ROUNDS    after MPI_Init (and an MPI_Alltoall that
 *                                 opens MPI's own connections), rank 1 lowers
 *                                 its open-file limit to what it has open, so
 *                                 it cannot set up anything new; then two
 *                                 duplicates of the world are made every round
 *                                 and each runs a barrier.
 *
 * Each rank records when it entered and left each barrier (CLOCK_MONOTONIC:
 * the virtual cluster's ranks share one machine's clock); rank 0 gathers the
 * records and checks that no rank left barrier k of a communicator before
 * every rank had entered it (every communicator here spans the world).
 * Rank 0 prints "comm_edges: OK MODE N ranks, B barriers checked" and exits
 * 0, or names the violation and exits 1. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <dirent.h>
#include <time.h>

#include "test_util.h"

/* One record: which communicator (slot), which of its barriers, enter, leave. */
typedef struct { double slot, k, enter, leave; } record;

static void barrier_recorded(MPI_Comm comm, int slot, int k, record *r) {
    r->slot = slot;
    r->k = k;
    r->enter = now_us();
    MPI_Barrier(comm);
    r->leave = now_us();
}

/* ---- threads ---- */
enum { THREADS = 2 };
static int rounds, rank, size;
static MPI_Comm parent[THREADS];
static record *recs[THREADS];
static int nrecs[THREADS];

static void *thread_main(void *arg) {
    int t = (int)(long)arg;
    unsigned seed = rank * 7919 + t * 104729 + 1;
    MPI_Comm comm = MPI_COMM_NULL;
    /* The parent's first barrier, in both threads at once. */
    barrier_recorded(parent[t], t, -1, &recs[t][nrecs[t]++]);
    for (int k = 0; k < rounds; k++) {
        if (k % 4 == 0) {
            if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
            MPI_Comm_dup(parent[t], &comm);
        }
        jitter(&seed, 300);
        barrier_recorded(comm, t, k, &recs[t][nrecs[t]++]);
        if (t == 0 && k % 3 == 0) barrier_recorded(MPI_COMM_WORLD, THREADS, k, &recs[t][nrecs[t]++]);
    }
    /* The last duplicate stays alive: MPI_Finalize frees it. */
    return NULL;
}

static int run_threads(record **out) {
    for (int t = 0; t < THREADS; t++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &parent[t]);
        recs[t] = malloc(sizeof(record) * (2 * rounds + 1));
    }
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, thread_main, (void *)(long)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    int n = 0;
    for (int t = 0; t < THREADS; t++) n += nrecs[t];
    *out = malloc(sizeof(record) * n);
    for (int t = 0, i = 0; t < THREADS; t++)
        for (int j = 0; j < nrecs[t]; j++) (*out)[i++] = recs[t][j];
    return n;
}

/* ---- free-order ---- */
enum { COMMS = 4 };

static int run_free_order(record **out) {
    MPI_Comm comm[COMMS];
    for (int c = 0; c < COMMS; c++) MPI_Comm_dup(MPI_COMM_WORLD, &comm[c]);
    *out = malloc(sizeof(record) * COMMS * rounds);
    unsigned seed = rank + 1;
    int n = 0;
    for (int k = 0; k < rounds; k++) {
        if (k > 0 && k % 3 == 0) {
            for (int i = 0; i < COMMS; i++) MPI_Comm_free(&comm[rank % 2 ? COMMS - 1 - i : i]);
            for (int c = 0; c < COMMS; c++) MPI_Comm_dup(MPI_COMM_WORLD, &comm[c]);
        }
        for (int c = 0; c < COMMS; c++) {
            jitter(&seed, 100);
            barrier_recorded(comm[c], c, k, &(*out)[n++]);
        }
    }
    /* A free returns before the other members free: rank 0 frees comm[0]
     * and only then lets rank 1 free it. A free that waited for the others
     * would never return. */
    int token = 1;
    if (rank == 0) {
        MPI_Comm_free(&comm[0]);
        MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Comm_free(&comm[0]);
    } else {
        MPI_Comm_free(&comm[0]);
    }
    return n;
}

static int run_fd_limit(record **out) {
    /* MPI's own connections to every rank, before the limit. */
    int *all = calloc(size, sizeof(int)), *back = calloc(size, sizeof(int));
    MPI_Alltoall(all, 1, MPI_INT, back, 1, MPI_INT, MPI_COMM_WORLD);
    free(all);
    free(back);
    if (rank == 1) {
        int open = count_dir("/proc/self/fd");
        struct rlimit lim;
        getrlimit(RLIMIT_NOFILE, &lim);
        /* Descriptors are numbered from 0 up: with a limit of the highest in
         * use plus one, nothing new can open. */
        int highest = 0;
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            int fd = atoi(e->d_name);
            if (fd > highest && fd != dirfd(d)) highest = fd;
        }
        if (d) closedir(d);
        lim.rlim_cur = highest + 1;
        if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
            perror("setrlimit");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        fprintf(stderr, "comm_edges: rank 1: %d descriptors open, limit now %ld\n", open, (long)lim.rlim_cur);
    }
    *out = malloc(sizeof(record) * 2 * rounds);
    int n = 0;
    for (int k = 0; k < rounds; k++) {
        MPI_Comm a, b;
        MPI_Comm_dup(MPI_COMM_WORLD, &a);
        MPI_Comm_dup(MPI_COMM_WORLD, &b);
        barrier_recorded(a, 0, k, &(*out)[n++]);
        barrier_recorded(b, 1, k, &(*out)[n++]);
        MPI_Comm_free(&a);
        MPI_Comm_free(&b);
    }
    return n;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    rounds = argc > 2 ? atoi(argv[2]) : 20;
    int provided = MPI_THREAD_SINGLE;
    if (!strcmp(mode, "threads"))
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    record *rec = NULL;
    int n;
    if (!strcmp(mode, "threads")) {
        if (provided != MPI_THREAD_MULTIPLE) {
            if (rank == 0) printf("comm_edges: FAILED: this MPI gives thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
            MPI_Finalize();
            return 1;
        }
        n = run_threads(&rec);
    } else if (!strcmp(mode, "free-order")) {
        n = run_free_order(&rec);
    } else if (!strcmp(mode, "fd-limit")) {
        if (size < 2) {
            if (rank == 0) printf("comm_edges: FAILED: fd-limit needs 2 ranks or more\n");
            MPI_Finalize();
            return 1;
        }
        n = run_fd_limit(&rec);
    } else {
        fprintf(stderr, "usage: comm_edges threads|free-order|fd-limit ROUNDS\n");
        MPI_Finalize();
        return 2;
    }

    /* Every rank ran the same barriers: gather them all to rank 0. */
    record *all = rank == 0 ? malloc(sizeof(record) * n * size) : NULL;
    MPI_Gather(rec, 4 * n, MPI_DOUBLE, all, 4 * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int status = 0;
    if (rank == 0) {
        int violations = 0, checked = 0, mismatched = 0;
        for (int i = 0; i < n; i++) {
            record *mine = &all[i];
            double last_in = 0, first_out = 1e300;
            int who_in = -1, who_out = -1;
            for (int r = 0; r < size; r++) {
                /* Rank r's record of the same barrier (records are in the same
                 * order on every rank within a thread; find it by slot and k). */
                record *x = NULL;
                for (int j = 0; j < n && !x; j++) {
                    record *y = &all[(size_t)r * n + j];
                    if (y->slot == mine->slot && y->k == mine->k) x = y;
                }
                if (!x) {
                    mismatched++;
                    continue;
                }
                if (x->enter > last_in) { last_in = x->enter; who_in = r; }
                if (x->leave < first_out) { first_out = x->leave; who_out = r; }
            }
            checked++;
            if (first_out < last_in && violations++ < 5)
                printf("comm_edges: VIOLATION communicator %d barrier %d: rank %d left at %.3f before rank %d entered at %.3f\n",
                       (int)mine->slot, (int)mine->k, who_out, first_out, who_in, last_in);
        }
        if (violations || mismatched) {
            printf("comm_edges: FAILED %s (%d violations, %d records missing)\n", mode, violations, mismatched);
            status = 1;
        } else {
            printf("comm_edges: OK %s %d ranks, %d barriers checked\n", mode, size, checked);
        }
        fflush(stdout);
    }
    MPI_Finalize();
    return status;
}
