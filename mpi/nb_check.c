/* nb_check: nonblocking and persistent collectives through the interposer
 * (issue 28). An ordinary MPI program (no mcd header).
 *
 *   nb_check forms [ROUNDS]      every wait and test form
 *   nb_check overlap [ROUNDS] [COMPUTE_MS]
 *   nb_check threads [ROUNDS]    MPI_THREAD_MULTIPLE, two threads
 *   nb_check bad                 a communicator freed in flight, and
 *                                MPI_Finalize with collectives pending
 *
 * forms: on MPI_COMM_WORLD, a duplicate, a split by parity and a split into
 * halves with the ranks reversed (no blocking collective first: each
 * communicator's first nonblocking one goes through mcd), each round starts on each communicator an MPI_Ibarrier, an
 * MPI_Iallreduce, an MPI_Ibcast from a root that changes, an MPI_Ireduce to
 * another root and an MPI_Iallreduce in place, beside an MPI_Irecv and an
 * MPI_Isend of a ring (MPI's own requests), all in flight at once in one
 * array, completed by one of MPI_Waitall, MPI_Testall, MPI_Waitany,
 * MPI_Waitsome, MPI_Testany, MPI_Testsome, or MPI_Wait, MPI_Test and
 * MPI_Request_get_status one by one (the form changes with the round and
 * the communicator); then persistent ones where the MPI has them
 * (MPI_Barrier_init, MPI_Allreduce_init, MPI_Bcast_init, MPI_Reduce_init,
 * or Open MPI's MPIX_ forms), started ROUNDS times with MPI_Startall (the
 * send buffer changed between starts) and completed with MPI_Waitall, then
 * freed. Every result is checked.
 *
 * overlap: ROUNDS times, after a staggered start (each rank sleeps a
 * different 0-60 ms), an MPI_Ibarrier and an MPI_Iallreduce on
 * MPI_COMM_WORLD and on a duplicate, then computing COMPUTE_MS (default
 * 2500) without any MPI call; then one MPI_Testall must find all four
 * complete (they progressed while the rank computed), and the sum right.
 * Then an MPI_Ibarrier completed by polling MPI_Test: the times each rank
 * entered and saw it complete (CLOCK_MONOTONIC: the virtual cluster's ranks
 * share one clock) are gathered by rank 0, which checks that no rank saw
 * barrier k complete before every rank had entered it.
 *
 * threads: MPI_Init_thread(MPI_THREAD_MULTIPLE); two threads, each on its
 * own duplicate of MPI_COMM_WORLD, ROUNDS times an MPI_Iallreduce and an
 * MPI_Ibarrier completed with MPI_Waitall, then a blocking MPI_Allreduce
 * (in place), MPI_Bcast and MPI_Reduce, each checked.
 *
 * bad: an MPI_Iallreduce on a duplicate freed (MPI_Comm_free) before the
 * MPI_Wait that completes it (MPI lets it complete normally), checked; then
 * an MPI_Ibarrier and an MPI_Iallreduce never completed before MPI_Finalize
 * (erroneous: the interposer completes them there, saying so).
 *
 * Every rank prints "nb_check: rank R: MODE: C checks, W wrong" and exits 1
 * if anything was wrong. */
#include <mpi.h>
#ifdef OPEN_MPI
#include <mpi-ext.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if MPI_VERSION >= 4
#define PERSISTENT(name) MPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define PERSISTENT(name) MPIX_##name##_init
#endif

static int rank, size;
static long checks, wrong;

static void expect(int ok, const char *what, int round, const char *comm) {
    __atomic_fetch_add(&checks, 1, __ATOMIC_RELAXED);
    if (!ok) {
        if (__atomic_fetch_add(&wrong, 1, __ATOMIC_RELAXED) < 20) fprintf(stderr, "nb_check: rank %d: round %d on %s: %s\n", rank, round, comm, what);
    }
}

enum { NCOMMS = 4 };
static const char *comm_names[NCOMMS] = {"world", "dup", "parity-split", "reversed-halves-split"};

static void make_comms(MPI_Comm comms[NCOMMS]) {
    comms[0] = MPI_COMM_WORLD;
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[1]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comms[2]);
    MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, -rank, &comms[3]);
    /* No blocking collective first: the interposer makes a communicator's
     * mcd state in its constructor, so its first nonblocking collective
     * goes through mcd (the reports say so). */
}

/* Completes `n` requests with completion form `form`. */
static void complete(int form, int n, MPI_Request *reqs) {
    int left = n, flag, index, outcount, indices[16];
    MPI_Status statuses[16]; /* (not MPI_STATUSES_IGNORE: GCC misreads MPICH's) */
    switch (form) {
    case 0:
        MPI_Waitall(n, reqs, statuses);
        break;
    case 1:
        do MPI_Testall(n, reqs, &flag, statuses);
        while (!flag);
        break;
    case 2:
        while (left > 0) {
            MPI_Waitany(n, reqs, &index, MPI_STATUS_IGNORE);
            if (index == MPI_UNDEFINED) break;
            left--;
        }
        break;
    case 3:
        while (left > 0) {
            MPI_Waitsome(n, reqs, &outcount, indices, statuses);
            if (outcount == MPI_UNDEFINED) break;
            left -= outcount;
        }
        break;
    case 4:
        while (left > 0) {
            MPI_Testany(n, reqs, &index, &flag, MPI_STATUS_IGNORE);
            if (flag && index == MPI_UNDEFINED) break;
            if (flag) left--;
        }
        break;
    case 5:
        while (left > 0) {
            MPI_Testsome(n, reqs, &outcount, indices, statuses);
            if (outcount == MPI_UNDEFINED) break;
            left -= outcount;
        }
        break;
    default:
        /* One by one, backwards: the last by MPI_Test, one by
         * MPI_Request_get_status then MPI_Wait, the rest by MPI_Wait. */
        do MPI_Test(&reqs[n - 1], &flag, MPI_STATUS_IGNORE);
        while (!flag);
        do MPI_Request_get_status(reqs[0], &flag, MPI_STATUS_IGNORE);
        while (!flag);
        for (int i = n - 2; i >= 0; i--) MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
        break;
    }
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL) expect(0, "a request left active", form, "completion");
}

static void forms(int rounds) {
    MPI_Comm comms[NCOMMS];
    make_comms(comms);
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < NCOMMS; c++) {
            MPI_Comm comm = comms[c];
            int cs, cr;
            MPI_Comm_size(comm, &cs);
            MPI_Comm_rank(comm, &cr);
            int bcast_root = r % cs, reduce_root = (r + 1) % cs;
            int sum_in[3] = {cr + r, 2 * cr, -r}, sum_out[3] = {0};
            int bcast[5];
            for (int i = 0; i < 5; i++) bcast[i] = cr == bcast_root ? 100 * r + i : -1;
            long max_in = (long)cr * 7 + r, max_out = -1;
            double in_place[2] = {cr * 0.5, 1.0};
            int ring_in = -1, ring_out = 1000 * r + cr;
            MPI_Request reqs[7];
            MPI_Ibarrier(comm, &reqs[0]);
            MPI_Iallreduce(sum_in, sum_out, 3, MPI_INT, MPI_SUM, comm, &reqs[1]);
            MPI_Irecv(&ring_in, 1, MPI_INT, (cr + cs - 1) % cs, r, comm, &reqs[2]);
            MPI_Ibcast(bcast, 5, MPI_INT, bcast_root, comm, &reqs[3]);
            MPI_Ireduce(&max_in, &max_out, 1, MPI_LONG, MPI_MAX, reduce_root, comm, &reqs[4]);
            MPI_Iallreduce(MPI_IN_PLACE, in_place, 2, MPI_DOUBLE, MPI_SUM, comm, &reqs[5]);
            MPI_Isend(&ring_out, 1, MPI_INT, (cr + 1) % cs, r, comm, &reqs[6]);
            complete((r + c) % 7, 7, reqs);
            int sums = cs * (cs - 1) / 2;
            expect(sum_out[0] == sums + cs * r && sum_out[1] == 2 * sums && sum_out[2] == -cs * r, "MPI_Iallreduce sum", r, comm_names[c]);
            int ok = 1;
            for (int i = 0; i < 5; i++) ok &= bcast[i] == 100 * r + i;
            expect(ok, "MPI_Ibcast data", r, comm_names[c]);
            if (cr == reduce_root) expect(max_out == (long)(cs - 1) * 7 + r, "MPI_Ireduce max", r, comm_names[c]);
            else expect(max_out == -1, "MPI_Ireduce wrote at a non-root", r, comm_names[c]);
            expect(in_place[0] == 0.5 * sums && in_place[1] == cs, "MPI_Iallreduce in place", r, comm_names[c]);
            expect(ring_in == 1000 * r + (cr + cs - 1) % cs, "the ring's MPI_Irecv", r, comm_names[c]);
        }
#ifdef PERSISTENT
    for (int c = 0; c < NCOMMS; c++) {
        MPI_Comm comm = comms[c];
        int cs, cr;
        MPI_Comm_size(comm, &cs);
        MPI_Comm_rank(comm, &cr);
        int x = 0, sum = 0, data[4] = {0}, root = cs - 1;
        long y = 0, product = 0;
        MPI_Request reqs[4];
        MPI_Status statuses[4];
        PERSISTENT(Barrier)(comm, MPI_INFO_NULL, &reqs[0]);
        PERSISTENT(Allreduce)(&x, &sum, 1, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &reqs[1]);
        PERSISTENT(Bcast)(data, 4, MPI_INT, 0, comm, MPI_INFO_NULL, &reqs[2]);
        PERSISTENT(Reduce)(&y, &product, 1, MPI_LONG, MPI_SUM, root, comm, MPI_INFO_NULL, &reqs[3]);
        for (int r = 0; r < rounds; r++) {
            x = cr * r + 1;
            y = 3 * r + cr;
            product = -1;
            for (int i = 0; i < 4; i++) data[i] = cr == 0 ? r * 10 + i : -1;
            MPI_Startall(4, reqs);
            MPI_Waitall(4, reqs, statuses);
            expect(sum == r * cs * (cs - 1) / 2 + cs, "persistent allreduce", r, comm_names[c]);
            int ok = 1;
            for (int i = 0; i < 4; i++) ok &= data[i] == r * 10 + i;
            expect(ok, "persistent bcast", r, comm_names[c]);
            if (cr == root) expect(product == 3L * r * cs + cs * (cs - 1) / 2, "persistent reduce", r, comm_names[c]);
            expect(reqs[0] != MPI_REQUEST_NULL, "a persistent request stays", r, comm_names[c]);
        }
        for (int i = 0; i < 4; i++) MPI_Request_free(&reqs[i]);
    }
#endif
    for (int c = 1; c < NCOMMS; c++) MPI_Comm_free(&comms[c]);
}

static void overlap(int rounds, long compute_ms) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    double *times = malloc(sizeof(double) * 2 * rounds);
    for (int r = 0; r < rounds; r++) {
        sleep_ms(20 * ((r + rank) % 4));
        MPI_Request reqs[4];
        MPI_Status statuses[4];
        int one = 1, n = 0, two = 2, m = 0;
        MPI_Ibarrier(MPI_COMM_WORLD, &reqs[0]);
        MPI_Iallreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[1]);
        MPI_Ibarrier(dup, &reqs[2]);
        MPI_Iallreduce(&two, &m, 1, MPI_INT, MPI_SUM, dup, &reqs[3]);
        /* Computing, no MPI call at all, longer than the failure timeout. */
        double until = now_us() + compute_ms * 1000.0;
        volatile unsigned long x = 0;
        while (now_us() < until) x = x * 6364136223846793005UL + 1;
        int flag = 0;
        MPI_Testall(4, reqs, &flag, statuses);
        expect(flag, "not complete after computing: nothing carried them", r, "world and dup");
        if (!flag) MPI_Waitall(4, reqs, statuses);
        expect(n == size && m == 2 * size, "the sums", r, "world and dup");
        /* A barrier completed by polling: when this rank saw it complete. */
        MPI_Request b;
        times[2 * r] = now_us();
        MPI_Ibarrier(MPI_COMM_WORLD, &b);
        do MPI_Test(&b, &flag, MPI_STATUS_IGNORE);
        while (!flag);
        times[2 * r + 1] = now_us();
    }
    double *all = rank == 0 ? malloc(sizeof(double) * 2 * rounds * size) : NULL;
    MPI_Gather(times, 2 * rounds, MPI_DOUBLE, all, 2 * rounds, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 0; r < rounds; r++) {
            double last_in = 0, first_out = 1e300;
            for (int p = 0; p < size; p++) {
                if (all[(size_t)p * 2 * rounds + 2 * r] > last_in) last_in = all[(size_t)p * 2 * rounds + 2 * r];
                if (all[(size_t)p * 2 * rounds + 2 * r + 1] < first_out) first_out = all[(size_t)p * 2 * rounds + 2 * r + 1];
            }
            expect(first_out >= last_in, "a rank saw the barrier complete before the last rank entered it", r, "world (shared clock)");
        }
    free(all);
    free(times);
    MPI_Comm_free(&dup);
}

typedef struct {
    MPI_Comm comm;
    int id, rounds;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int r = 0; r < w->rounds; r++) {
        long in = 1000L * w->id + r + rank, out = 0;
        MPI_Request reqs[2];
        MPI_Status statuses[2];
        MPI_Iallreduce(&in, &out, 1, MPI_LONG, MPI_SUM, w->comm, &reqs[0]);
        MPI_Ibarrier(w->comm, &reqs[1]);
        MPI_Waitall(2, reqs, statuses);
        const char *where = w->id ? "thread 1's dup" : "thread 0's dup";
        expect(out == size * (1000L * w->id + r) + (long)size * (size - 1) / 2, "a thread's MPI_Iallreduce", r, where);
        /* The blocking forms, beside the other thread's: an allreduce in
         * place, a broadcast and a reduction to roots that change. */
        long high = rank + r;
        MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_LONG, MPI_MAX, w->comm);
        expect(high == size - 1 + r, "a thread's MPI_Allreduce in place", r, where);
        int root = (r + w->id) % size, data[3] = {-1, -1, -1};
        if (rank == root) data[0] = r, data[1] = w->id, data[2] = root;
        MPI_Bcast(data, 3, MPI_INT, root, w->comm);
        expect(data[0] == r && data[1] == w->id && data[2] == root, "a thread's MPI_Bcast", r, where);
        long sum = -1, mine = rank + 1;
        MPI_Reduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, (root + 1) % size, w->comm);
        expect(rank != (root + 1) % size || sum == (long)size * (size + 1) / 2, "a thread's MPI_Reduce", r, where);
    }
    return NULL;
}

static void threads(int rounds) {
    worker w[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &w[i].comm);
        w[i].id = i;
        w[i].rounds = rounds;
    }
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, work, &w[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) MPI_Comm_free(&w[i].comm);
}

static void bad(void) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int one = 1, n = 0;
    MPI_Request req;
    MPI_Iallreduce(&one, &n, 1, MPI_INT, MPI_SUM, dup, &req);
    MPI_Comm_free(&dup);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    expect(n == size, "an MPI_Iallreduce on a communicator freed in flight", 0, "dup");
    /* Never completed: MPI_Finalize must not hang on them. */
    static int two = 2, m = 0;
    MPI_Request pending[2];
    MPI_Ibarrier(MPI_COMM_WORLD, &pending[0]);
    MPI_Iallreduce(&two, &m, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &pending[1]);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "forms";
    int rounds = argc > 2 ? atoi(argv[2]) : 10;
    if (!strcmp(mode, "threads")) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "nb_check: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!strcmp(mode, "forms")) forms(rounds);
    else if (!strcmp(mode, "overlap")) overlap(rounds, argc > 3 ? atol(argv[3]) : 2500);
    else if (!strcmp(mode, "threads")) threads(rounds);
    else if (!strcmp(mode, "bad")) bad();
    else {
        fprintf(stderr, "usage: nb_check forms|overlap|threads|bad [ROUNDS] [COMPUTE_MS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("nb_check: rank %d: %s: %ld checks, %ld wrong\n", rank, mode, checks, wrong);
    fflush(stdout);
    MPI_Finalize();
    return wrong != 0;
}
