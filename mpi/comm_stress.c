/* comm_stress: adversarial communicator patterns for the MPI_Barrier
 * interposer (issue 13). An ordinary MPI program (no mcd header).
 *
 *   comm_stress churn ROUNDS       dup + parity split + singleton split every
 *                               round, two barriers on each, freed in a
 *                               rank-dependent order; counts /proc/self/task
 *                               and /proc/self/fd after round WARM and at the
 *                               end, and times every MPI_Comm_free.
 *   comm_stress mt ROUNDS          MPI_THREAD_MULTIPLE, 4 threads each creating
 *                               and freeing its own communicators (dup, split
 *                               reversed, idup, split with MPI_UNDEFINED) at
 *                               once, thread 0 running world barriers too.
 *   comm_stress shapes ROUNDS      MPI_UNDEFINED split, singletons, two live
 *                               splits with identical members interleaved,
 *                               MPI_Comm_create_group, MPI_Intercomm_merge,
 *                               MPI_Comm_idup; all freed (rank-dependent
 *                               order) and made again every 5 rounds.
 *   comm_stress slow-sub ROUNDS GAP_MS [world]
 *                               rank 0 waits GAP_MS in a barrier on a
 *                               communicator of {0, last} (the last rank
 *                               computes) while the others wait for it in a
 *                               barrier on a dup of the world (or the world).
 *   comm_stress early-exit ROUNDS GAP_MS
 *                               the last rank frees a communicator of all and
 *                               calls MPI_Finalize at once, while the others
 *                               run ROUNDS barriers with GAP_MS gaps on a
 *                               communicator without it, then free theirs.
 *
 * Several scenarios, separated by "+", run one after the other in one job
 * (early-exit last: a rank finalizes in it), e.g.
 * "comm_stress churn 50 + shapes 20"; MPI_THREAD_MULTIPLE if one is mt.
 *
 * Records (communicator id, barrier number, members, enter, leave) on
 * CLOCK_MONOTONIC (shared by the virtual cluster's ranks); rank 0 gathers
 * them and checks that every barrier was seen by all its members and that
 * no member left it before every member had entered it. Prints
 * "comm_stress: OK MODE N ranks, B barriers checked" or "comm_stress: FAILED MODE ..."
 * per scenario (MODE "slow-sub dup" or "slow-sub world" for slow-sub). */
#include <dirent.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

typedef struct { double id, k, members, enter, leave; } record;
enum { FIELDS = 5 };

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static record *recs;
static int nrecs, caprecs;

static int rank, size, rounds;

/* A barrier on `comm`, recorded as barrier k of communicator `id`. */
static void barrier(MPI_Comm comm, double id, int k) {
    int members;
    MPI_Comm_size(comm, &members);
    record r = {id, k, members, now_us(), 0};
    int rc = MPI_Barrier(comm);
    r.leave = now_us();
    if (rc != MPI_SUCCESS) fprintf(stderr, "comm_stress: rank %d: MPI_Barrier returned %d\n", rank, rc);
    pthread_mutex_lock(&rec_lock);
    if (nrecs == caprecs) {
        caprecs = caprecs ? 2 * caprecs : 1024;
        recs = realloc(recs, sizeof(record) * caprecs);
    }
    recs[nrecs++] = r;
    pthread_mutex_unlock(&rec_lock);
}

/* A communicator's id: what, which instance, and its leader (so that the
 * halves of a split differ). Unique across ranks for one communicator. */
static double cid(int what, int instance, MPI_Comm comm) {
    return ((double)what * 1e6 + instance) * 1e3 + leader(comm);
}

static int cmp_rec(const void *a, const void *b) {
    const record *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return 0;
}

/* Gathers every rank's records on rank 0 of `comm` and checks them. */
static int check(MPI_Comm comm, const char *mode) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    int mine = nrecs * FIELDS;
    int *counts = me == 0 ? malloc(sizeof(int) * n) : NULL, *displs = me == 0 ? malloc(sizeof(int) * n) : NULL;
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, comm);
    int total = 0;
    if (me == 0)
        for (int r = 0; r < n; r++) displs[r] = total, total += counts[r];
    record *all = me == 0 ? malloc(sizeof(double) * (total + 1)) : NULL;
    MPI_Gatherv(recs, mine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, comm);
    int status = 0;
    if (me == 0) {
        int m = total / FIELDS, checked = 0, violations = 0, incomplete = 0;
        qsort(all, m, sizeof(record), cmp_rec);
        for (int i = 0; i < m;) {
            int j = i;
            double last_in = 0, first_out = 1e300;
            while (j < m && all[j].id == all[i].id && all[j].k == all[i].k) {
                if (all[j].enter > last_in) last_in = all[j].enter;
                if (all[j].leave < first_out) first_out = all[j].leave;
                j++;
            }
            checked++;
            if (j - i != (int)all[i].members && incomplete++ < 5)
                printf("comm_stress: INCOMPLETE communicator %.0f barrier %.0f: %d records for %.0f members\n", all[i].id, all[i].k, j - i,
                       all[i].members);
            if (first_out < last_in && violations++ < 5)
                printf("comm_stress: VIOLATION communicator %.0f barrier %.0f: a member left at %.3f before the last entered at %.3f\n",
                       all[i].id, all[i].k, first_out, last_in);
            i = j;
        }
        if (violations || incomplete) {
            printf("comm_stress: FAILED %s (%d violations, %d incomplete)\n", mode, violations, incomplete);
            status = 1;
        } else {
            printf("comm_stress: OK %s %d ranks, %d barriers checked\n", mode, n, checked);
        }
        fflush(stdout);
    }
    free(all);
    free(counts);
    free(displs);
    return status;
}

/* ---- churn ---- */
enum { WARM = 10 };

static void run_churn(void) {
    unsigned seed = rank + 1;
    int tasks0 = 0, fds0 = 0;
    double max_free = 0, sum_free = 0;
    int frees = 0;
    for (int k = 0; k < rounds; k++) {
        if (k == WARM) {
            tasks0 = count_dir("/proc/self/task");
            fds0 = count_dir("/proc/self/fd");
        }
        MPI_Comm d, p, s;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &p);
        MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &s);
        for (int i = 0; i < 2; i++) {
            jitter(&seed, 100);
            barrier(d, cid(1, k, d), i);
            barrier(p, cid(2, k, p), i);
            barrier(s, cid(3, k, s), i);
        }
        MPI_Comm *order[3] = {&d, &p, &s};
        for (int i = 0; i < 3; i++) {
            MPI_Comm *c = order[(rank % 2) ? 2 - i : i];
            double t = now_us();
            MPI_Comm_free(c);
            t = now_us() - t;
            if (t > max_free) max_free = t;
            sum_free += t;
            frees++;
        }
    }
    /* Every member has freed everything: one more communicator made and
     * freed lets the job reap what has closed meanwhile. */
    MPI_Barrier(MPI_COMM_WORLD);
    sleep_ms(200);
    MPI_Comm d;
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    barrier(d, cid(4, 0, d), 0);
    MPI_Comm_free(&d);
    int tasks1 = count_dir("/proc/self/task"), fds1 = count_dir("/proc/self/fd");
    printf("comm_stress: rank %d: tasks %d -> %d, fds %d -> %d after %d rounds; MPI_Comm_free max %.1f ms, mean %.3f ms\n", rank, tasks0,
           tasks1, fds0, fds1, rounds, max_free / 1e3, sum_free / frees / 1e3);
    fflush(stdout);
}

/* ---- mt ---- */
enum { THREADS = 4 };
static MPI_Comm parent[THREADS];

static void *mt_thread(void *arg) {
    int t = (int)(long)arg;
    unsigned seed = rank * 7919 + t * 104729 + 1;
    for (int k = 0; k < rounds; k++) {
        MPI_Comm c = MPI_COMM_NULL;
        int kind = (k + t) % 4;
        if (kind == 0) {
            MPI_Comm_dup(parent[t], &c);
        } else if (kind == 1) {
            MPI_Comm_split(parent[t], rank % 2, -rank, &c);
        } else if (kind == 2) {
            MPI_Request req;
            MPI_Comm_idup(parent[t], &c, &req);
            jitter(&seed, 200);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Comm_split(parent[t], rank == t % size ? MPI_UNDEFINED : 0, 0, &c);
        }
        if (c != MPI_COMM_NULL) {
            double id = cid(10 + t, k, c);
            for (int i = 0; i < 3; i++) {
                jitter(&seed, 200);
                barrier(c, id, i);
            }
            MPI_Comm_free(&c);
        }
        if (t == 0 && k % 3 == 0) barrier(MPI_COMM_WORLD, 0, k);
    }
    return NULL;
}

static void run_mt(void) {
    for (int t = 0; t < THREADS; t++) MPI_Comm_dup(MPI_COMM_WORLD, &parent[t]);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, mt_thread, (void *)(long)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) MPI_Comm_free(&parent[t]);
}

/* ---- shapes ---- */
enum { UNDEF, SINGLE, TWIN_A, TWIN_B, TWIN_DUP, CGROUP, MERGED, IDUP, SHAPES };

static void make_shapes(MPI_Comm *c, int instance) {
    for (int i = 0; i < SHAPES; i++) c[i] = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 0, size - rank, &c[UNDEF]);
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &c[SINGLE]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, 0, &c[TWIN_A]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, 0, &c[TWIN_B]);
    MPI_Comm_dup(c[TWIN_A], &c[TWIN_DUP]);
    /* The world's ranks but 0, in reverse order, by create_group (only
     * the members call it). */
    if (rank != 0) {
        MPI_Group world, sub;
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        int *ranks = malloc(sizeof(int) * size), n = 0;
        for (int r = size - 1; r >= 1; r--) ranks[n++] = r;
        MPI_Group_incl(world, n, ranks, &sub);
        MPI_Comm_create_group(MPI_COMM_WORLD, sub, 77 + instance, &c[CGROUP]);
        MPI_Group_free(&sub);
        MPI_Group_free(&world);
        free(ranks);
    }
    /* An inter-communicator between the parity halves, merged (odd high). */
    MPI_Comm inter;
    MPI_Intercomm_create(c[TWIN_A], 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 99, &inter);
    MPI_Barrier(inter); /* PMPI's */
    MPI_Intercomm_merge(inter, rank % 2, &c[MERGED]);
    MPI_Comm_free(&inter);
    MPI_Request req;
    MPI_Comm_idup(MPI_COMM_WORLD, &c[IDUP], &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static void run_shapes(void) {
    unsigned seed = rank + 3;
    MPI_Comm c[SHAPES];
    int instance = 0;
    make_shapes(c, instance);
    for (int k = 0; k < rounds; k++) {
        if (k > 0 && k % 5 == 0) {
            /* Free in a rank-dependent order. */
            for (int i = 0; i < SHAPES; i++) {
                int j = rank % 2 ? SHAPES - 1 - i : (i + rank) % SHAPES;
                if (c[j] != MPI_COMM_NULL) MPI_Comm_free(&c[j]);
            }
            make_shapes(c, ++instance);
        }
        for (int i = 0; i < SHAPES; i++) {
            if (c[i] == MPI_COMM_NULL) continue;
            jitter(&seed, 100);
            barrier(c[i], cid(20 + i, instance, c[i]), k);
            /* The twins interleaved: A, B, A again. */
            if (i == TWIN_B) barrier(c[TWIN_A], cid(20 + TWIN_A, instance, c[TWIN_A]), 100000 + k);
        }
    }
    for (int i = 0; i < SHAPES; i++)
        if (c[i] != MPI_COMM_NULL) MPI_Comm_free(&c[i]);
}

/* ---- early-exit ---- */
static int run_early_exit(int gap_ms) {
    MPI_Comm all, rest;
    MPI_Comm_dup(MPI_COMM_WORLD, &all);
    MPI_Comm_split(MPI_COMM_WORLD, rank == size - 1 ? MPI_UNDEFINED : 0, 0, &rest);
    barrier(all, cid(30, 0, all), 0);
    if (rank == size - 1) {
        double t = now_us();
        MPI_Comm_free(&all);
        double freed = now_us() - t;
        t = now_us();
        MPI_Finalize();
        printf("comm_stress: rank %d: freed in %.1f ms, MPI_Finalize took %.1f ms\n", rank, freed / 1e3, (now_us() - t) / 1e3);
        fflush(stdout);
        return -1;
    }
    nrecs = 0; /* the check below runs over `rest`: only its barriers */
    for (int k = 0; k < rounds; k++) {
        barrier(rest, cid(31, 0, rest), k);
        sleep_ms(gap_ms);
    }
    MPI_Comm_free(&all);
    return check(rest, "early-exit");
}

/* ---- slow-sub ---- */
/* Rank 0 waits long in a barrier on X = {0, last} (the last rank computes
 * GAP_MS first) while the ranks between wait in a barrier on Y (a dup of
 * the world, or the world itself) for rank 0, which is alive: its agent
 * for Y must answer their probes. */
static void run_slow_sub(int gap_ms, int on_world) {
    MPI_Comm y = MPI_COMM_WORLD, x;
    if (!on_world) MPI_Comm_dup(MPI_COMM_WORLD, &y);
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 || rank == size - 1 ? 0 : MPI_UNDEFINED, 0, &x);
    double yid = on_world ? 40 : cid(41, 0, y);
    int k = 0;
    for (int r = 0; r < rounds; r++) {
        barrier(y, yid, k++);
        if (x != MPI_COMM_NULL) barrier(x, cid(42, 0, x), r);
        barrier(y, yid, k++);
        /* Everyone idle a moment: Y's agents go to sleep on the rings. */
        sleep_ms(50);
        if (rank == size - 1) sleep_ms(gap_ms);
        if (x != MPI_COMM_NULL) barrier(x, cid(42, 0, x), 100000 + r);
        barrier(y, yid, k++);
    }
    if (x != MPI_COMM_NULL) MPI_Comm_free(&x);
    if (!on_world) MPI_Comm_free(&y);
}

/* Runs one scenario (MODE ROUNDS [ARGS]: argv[0..argc)) and checks it,
 * labelled `label`; returns its status, or -1 if this rank has finalized
 * (early-exit's last rank). */
static int run_one(int argc, char **argv, int provided, char *label, size_t label_size) {
    const char *mode = argv[0];
    rounds = argc > 1 ? atoi(argv[1]) : 20;
    snprintf(label, label_size, "%s", mode);
    nrecs = 0; /* each scenario checks its own barriers */
    if (!strcmp(mode, "churn")) {
        run_churn();
    } else if (!strcmp(mode, "mt")) {
        if (provided != MPI_THREAD_MULTIPLE) {
            if (rank == 0) printf("comm_stress: FAILED mt: thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
            return 1;
        }
        run_mt();
    } else if (!strcmp(mode, "shapes")) {
        if (size < 4) {
            if (rank == 0) printf("comm_stress: FAILED shapes: needs 4 ranks or more\n");
            return 1;
        }
        run_shapes();
    } else if (!strcmp(mode, "slow-sub")) {
        int on_world = argc > 3 && !strcmp(argv[3], "world");
        /* Named by its Y, so that two of them in one job tell apart. */
        snprintf(label, label_size, "slow-sub %s", on_world ? "world" : "dup");
        run_slow_sub(argc > 2 ? atoi(argv[2]) : 3000, on_world);
    } else if (!strcmp(mode, "early-exit")) {
        return run_early_exit(argc > 2 ? atoi(argv[2]) : 100);
    } else {
        if (rank == 0) fprintf(stderr, "comm_stress: unknown mode %s\n", mode);
        return 2;
    }
    return check(MPI_COMM_WORLD, label);
}

int main(int argc, char **argv) {
    /* Scenarios separated by "+", run one after the other in this job. */
    int starts[64], ends[64], n = 0, needs_mt = 0, bad = argc < 2;
    for (int i = 1; i < argc && n < 64;) {
        starts[n] = i;
        while (i < argc && strcmp(argv[i], "+")) i++;
        ends[n] = i++;
        if (ends[n] == starts[n]) bad = 1;
        else if (!strcmp(argv[starts[n]], "mt")) needs_mt = 1;
        else if (!strcmp(argv[starts[n]], "early-exit") && i < argc) bad = 1; /* a rank finalizes in it: last only */
        n++;
    }
    int provided = MPI_THREAD_SINGLE;
    if (needs_mt)
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (bad) {
        if (rank == 0)
            fprintf(stderr, "usage: comm_stress SCENARIO [+ SCENARIO]...; SCENARIO: churn|mt|shapes ROUNDS, slow-sub ROUNDS GAP_MS [world], "
                            "early-exit ROUNDS GAP_MS (last only)\n");
        MPI_Finalize();
        return 2;
    }
    int status = 0;
    for (int k = 0; k < n; k++) {
        char label[64];
        int st = run_one(ends[k] - starts[k], argv + starts[k], provided, label, sizeof label);
        if (st < 0) return status; /* this rank finalized in early-exit */
        if (st) status = st;
    }
    double t = now_us();
    MPI_Finalize();
    printf("comm_stress: rank %d: MPI_Finalize took %.1f ms\n", rank, (now_us() - t) / 1e3);
    return status;
}
