/* nb_check: nonblocking and persistent collectives through the interposer
 * (issue 28). An ordinary MPI program (no mcd header).
 *
 *   nb_check forms [ROUNDS]      every wait and test form
 *   nb_check overlap [ROUNDS] [COMPUTE_MS]
 *   nb_check threads [ROUNDS]    MPI_THREAD_MULTIPLE, two threads
 *   nb_check bad                 a communicator freed in flight, and
 *                                MPI_Finalize with collectives pending
 *   nb_check requests [ROUNDS]   MPI_Request_get_status, MPI_STATUSES_IGNORE,
 *                                user operations and derived types in the
 *                                nonblocking and persistent forms, requests
 *                                freed (refused) beside a waiting thread
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
 * requests (MPI_THREAD_MULTIPLE; issue 28's step 3), on duplicates of
 * MPI_COMM_WORLD:
 *  - MPI_Request_get_status answers "not yet" for an MPI_Ibarrier and a
 *    started persistent MPI_Allreduce_init while the other ranks have
 *    not entered them (they wait for rank 0's message sent after), then
 *    "complete" without freeing them (twice, status not cancelled), and
 *    MPI_Wait completes them;
 *  - ROUNDS rounds of an MPI_Ibarrier, an MPI_Iallreduce, an MPI_Ibcast
 *    and a ring's MPI_Irecv/MPI_Isend in one array, completed with
 *    MPI_STATUSES_IGNORE by MPI_Waitall, MPI_Testall, MPI_Waitsome and
 *    MPI_Testsome in turn, and by MPI_Waitany/MPI_Testany with
 *    MPI_STATUS_IGNORE;
 *  - a user-defined operation that does not commute (2x2 matrix product
 *    on contiguous(4, MPI_LONG)) in MPI_Iallreduce, MPI_Ireduce and a
 *    persistent MPI_Allreduce_init started 3 times (PMPI's: mcd serves
 *    predefined operations only), and predefined MPI_SUM on derived types
 *    (contiguous(2, MPI_INT) and a vector with gaps) in MPI_Iallreduce and
 *    a persistent MPI_Allreduce_init (mcd's), gaps untouched;
 *  - two threads at once: one starts MPI_Ibarrier and MPI_Iallreduce on
 *    its duplicate and frees them with MPI_Request_free at once
 *    (erroneous in MPI for a collective: refused, as both MPIs refuse it
 *    for their own; then waited), then makes, starts, waits for and frees a persistent
 *    MPI_Allreduce_init, ROUNDS times; the other meanwhile waits for
 *    MPI_Iallreduce after MPI_Iallreduce on its own duplicate; then an
 *    MPI_Iallreduce on the first thread's duplicate is right;
 *  - a persistent MPI_Allreduce_init started on a duplicate then freed
 *    (MPI_Comm_free) before MPI_Wait completes it, right; and one started
 *    and never completed before MPI_Finalize (erroneous: completed there).
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

/* ---- requests ---- */

/* MPI_STATUSES_IGNORE through a variable: GCC warns on MPICH's constant
 * ((MPI_Status *)1) passed where an array is written. */
static MPI_Status *volatile statuses_ignore;

/* A user operation that does not commute: 2x2 integer matrix product. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    long *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

/* Rank r's matrix in round k, and the product over ranks 0..size-1 in
 * rank order (MPI's order for a non-commutative operation). */
static void matrix_of(int r, int k, long m[4]) {
    m[0] = r + 1, m[1] = k + 1, m[2] = 1, m[3] = 0;
}

static void product_of(int k, long want[4]) {
    long p[4] = {1, 0, 0, 1};
    for (int r = 0; r < size; r++) {
        long a[4];
        matrix_of(r, k, a);
        long c[4] = {p[0] * a[0] + p[1] * a[2], p[0] * a[1] + p[1] * a[3], p[2] * a[0] + p[3] * a[2], p[2] * a[1] + p[3] * a[3]};
        memcpy(p, c, sizeof c);
    }
    memcpy(want, p, sizeof p);
}

/* get_status: "not yet" while the others have not entered, then
 * "complete" without freeing the request. */
static void get_status(MPI_Comm comm) {
    MPI_Request reqs[2];
    int n = 0, flag = -1, token = 0;
    int x = rank + 1, sum = -1;
    MPI_Status st;
    if (rank != 0) MPI_Recv(&token, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Ibarrier(comm, &reqs[n++]);
#ifdef PERSISTENT
    PERSISTENT(Allreduce)(&x, &sum, 1, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &reqs[n]);
    MPI_Start(&reqs[n++]);
#endif
    if (rank == 0) {
        for (int i = 0; i < n; i++) {
            MPI_Request_get_status(reqs[i], &flag, &st);
            expect(flag == 0, "MPI_Request_get_status: complete before the other ranks entered", i, "dup");
        }
        for (int p = 1; p < size; p++) MPI_Send(&token, 1, MPI_INT, p, 77, MPI_COMM_WORLD);
    }
    for (int i = 0; i < n; i++) {
        double until = now_us() + 30e6;
        do MPI_Request_get_status(reqs[i], &flag, &st);
        while (!flag && now_us() < until);
        expect(flag == 1, "MPI_Request_get_status: never complete in 30 s", i, "dup");
        expect(reqs[i] != MPI_REQUEST_NULL, "MPI_Request_get_status freed the request", i, "dup");
        int cancelled = -1;
        MPI_Test_cancelled(&st, &cancelled);
        expect(cancelled == 0, "a completed collective's status says cancelled", i, "dup");
        flag = -1;
        MPI_Request_get_status(reqs[i], &flag, MPI_STATUS_IGNORE);
        expect(flag == 1, "MPI_Request_get_status: complete, then not", i, "dup");
        MPI_Wait(&reqs[i], &st);
    }
    expect(reqs[0] == MPI_REQUEST_NULL, "MPI_Wait left the nonblocking request", 0, "dup");
#ifdef PERSISTENT
    expect(reqs[1] != MPI_REQUEST_NULL, "MPI_Wait freed the persistent request", 0, "dup");
    expect(sum == size * (size + 1) / 2, "the persistent MPI_Allreduce after MPI_Request_get_status", 0, "dup");
    MPI_Request_free(&reqs[1]);
#endif
}

/* MPI_STATUSES_IGNORE (and MPI_STATUS_IGNORE) in every form. */
static void statuses_ignored(MPI_Comm comm, int rounds) {
    for (int r = 0; r < rounds; r++) {
        int sum_in = rank + r, sum = -1, data[3], ring_in = -1, ring_out = 100 * r + rank;
        int root = r % size;
        for (int i = 0; i < 3; i++) data[i] = rank == root ? 10 * r + i : -1;
        MPI_Request reqs[5];
        MPI_Ibarrier(comm, &reqs[0]);
        MPI_Iallreduce(&sum_in, &sum, 1, MPI_INT, MPI_SUM, comm, &reqs[1]);
        MPI_Irecv(&ring_in, 1, MPI_INT, (rank + size - 1) % size, r, comm, &reqs[2]);
        MPI_Ibcast(data, 3, MPI_INT, root, comm, &reqs[3]);
        MPI_Isend(&ring_out, 1, MPI_INT, (rank + 1) % size, r, comm, &reqs[4]);
        int left = 5, flag = 0, outcount, index, indices[5];
        switch (r % 6) {
        case 0:
            MPI_Waitall(5, reqs, statuses_ignore);
            break;
        case 1:
            do MPI_Testall(5, reqs, &flag, statuses_ignore);
            while (!flag);
            break;
        case 2:
            while (left > 0) {
                MPI_Waitsome(5, reqs, &outcount, indices, statuses_ignore);
                if (outcount == MPI_UNDEFINED) break;
                left -= outcount;
            }
            break;
        case 3:
            while (left > 0) {
                MPI_Testsome(5, reqs, &outcount, indices, statuses_ignore);
                if (outcount == MPI_UNDEFINED) break;
                left -= outcount;
            }
            break;
        case 4:
            while (left > 0) {
                MPI_Waitany(5, reqs, &index, MPI_STATUS_IGNORE);
                if (index == MPI_UNDEFINED) break;
                left--;
            }
            break;
        default:
            while (left > 0) {
                MPI_Testany(5, reqs, &index, &flag, MPI_STATUS_IGNORE);
                if (flag && index == MPI_UNDEFINED) break;
                if (flag) left--;
            }
            break;
        }
        for (int i = 0; i < 5; i++) expect(reqs[i] == MPI_REQUEST_NULL, "a request left active (statuses ignored)", r, "dup");
        expect(sum == size * r + size * (size - 1) / 2, "MPI_Iallreduce (statuses ignored)", r, "dup");
        expect(data[0] == 10 * r && data[1] == 10 * r + 1 && data[2] == 10 * r + 2, "MPI_Ibcast (statuses ignored)", r, "dup");
        expect(ring_in == 100 * r + (rank + size - 1) % size, "the ring (statuses ignored)", r, "dup");
    }
}

/* User operations (PMPI's) and derived types with predefined ones (mcd's)
 * in the nonblocking and persistent forms. */
static void ops_and_types(MPI_Comm comm) {
    MPI_Op op;
    MPI_Op_create(matmul, 0, &op);
    MPI_Datatype mat, pair, gappy;
    MPI_Type_contiguous(4, MPI_LONG, &mat);
    MPI_Type_commit(&mat);
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Type_vector(2, 1, 2, MPI_INT, &gappy); /* ints 0 and 2 of 3 */
    MPI_Type_commit(&gappy);
    long m[4], out[4], want[4];
    for (int k = 0; k < 2; k++) {
        MPI_Request req;
        matrix_of(rank, k, m);
        product_of(k, want);
        memset(out, 0, sizeof out);
        MPI_Iallreduce(m, out, 1, mat, op, comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        expect(!memcmp(out, want, sizeof want), "MPI_Iallreduce with a user operation that does not commute", k, "dup");
        int root = (k + 1) % size;
        memset(out, 0, sizeof out);
        MPI_Ireduce(m, out, 1, mat, op, root, comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (rank == root) expect(!memcmp(out, want, sizeof want), "MPI_Ireduce with a user operation", k, "dup");
        else expect(out[0] == 0 && out[3] == 0, "MPI_Ireduce with a user operation wrote at a non-root", k, "dup");
    }
    int pairs[4] = {rank, 2 * rank, -rank, 7}, pair_sum[4] = {0};
    int holes[4] = {rank, -50, rank * 3, -60}, hole_sum[4] = {-1, -2, -3, -4};
    MPI_Request reqs[2];
    MPI_Iallreduce(pairs, pair_sum, 2, pair, MPI_SUM, comm, &reqs[0]);
    MPI_Iallreduce(holes, hole_sum, 1, gappy, MPI_SUM, comm, &reqs[1]);
    MPI_Waitall(2, reqs, statuses_ignore);
    int s = size * (size - 1) / 2;
    expect(pair_sum[0] == s && pair_sum[1] == 2 * s && pair_sum[2] == -s && pair_sum[3] == 7 * size, "MPI_Iallreduce of contiguous(2, MPI_INT)", 0,
           "dup");
    expect(hole_sum[0] == s && hole_sum[2] == 3 * s && hole_sum[1] == -2 && hole_sum[3] == -4, "MPI_Iallreduce of a vector with gaps", 0, "dup");
#ifdef PERSISTENT
    MPI_Request p[2];
    PERSISTENT(Allreduce)(m, out, 1, mat, op, comm, MPI_INFO_NULL, &p[0]);
    PERSISTENT(Allreduce)(holes, hole_sum, 1, gappy, MPI_SUM, comm, MPI_INFO_NULL, &p[1]);
    for (int k = 0; k < 3; k++) {
        matrix_of(rank, k, m);
        product_of(k, want);
        memset(out, 0, sizeof out);
        holes[0] = rank + k, holes[2] = k;
        hole_sum[0] = hole_sum[1] = hole_sum[2] = hole_sum[3] = -9;
        MPI_Startall(2, p);
        MPI_Waitall(2, p, statuses_ignore);
        expect(!memcmp(out, want, sizeof want), "a persistent MPI_Allreduce_init with a user operation", k, "dup");
        expect(hole_sum[0] == s + size * k && hole_sum[2] == size * k && hole_sum[1] == -9 && hole_sum[3] == -9,
               "a persistent MPI_Allreduce_init of a vector with gaps", k, "dup");
    }
    MPI_Request_free(&p[0]);
    MPI_Request_free(&p[1]);
#endif
    MPI_Type_free(&gappy);
    MPI_Type_free(&pair);
    MPI_Type_free(&mat);
    MPI_Op_free(&op);
}

typedef struct {
    MPI_Comm comm;
    int rounds;
} freer;

/* MPI_Request_free of a running nonblocking collective: refused (erroneous
 * in MPI; both MPIs refuse it for their own), MPI_ERR_REQUEST on
 * MPI_COMM_WORLD (MPI_ERRORS_RETURN here), the handle kept; then waited. */
static void free_refused(MPI_Request *req, int r) {
    MPI_Request before = *req;
    int rc = MPI_Request_free(req), class = -1;
    MPI_Error_class(rc, &class);
    expect(class == MPI_ERR_REQUEST && *req == before, "MPI_Request_free of a running collective was not refused", r, "thread 0's dup");
    MPI_Wait(req, MPI_STATUS_IGNORE);
}

/* Frees requests at once (refused, then waited), and persistent ones
 * after their wait, while the other thread waits (waiter). */
static void *free_at_once(void *arg) {
    freer *f = arg;
    for (int r = 0; r < f->rounds; r++) {
        int one = 1, n = -1;
        MPI_Request req;
        MPI_Ibarrier(f->comm, &req);
        free_refused(&req, r);
        MPI_Iallreduce(&one, &n, 1, MPI_INT, MPI_SUM, f->comm, &req);
        free_refused(&req, r);
        expect(n == size, "an MPI_Iallreduce whose free was refused", r, "thread 0's dup");
#ifdef PERSISTENT
        int x = r + rank, sum = -1;
        MPI_Request p;
        PERSISTENT(Allreduce)(&x, &sum, 1, MPI_INT, MPI_SUM, f->comm, MPI_INFO_NULL, &p);
        MPI_Start(&p);
        MPI_Wait(&p, MPI_STATUS_IGNORE);
        MPI_Request_free(&p);
        expect(sum == size * r + size * (size - 1) / 2, "a persistent MPI_Allreduce_init beside a waiting thread", r, "thread 0's dup");
#endif
    }
    int two = 2, m = -1;
    MPI_Request last;
    MPI_Iallreduce(&two, &m, 1, MPI_INT, MPI_SUM, f->comm, &last);
    MPI_Wait(&last, MPI_STATUS_IGNORE);
    expect(m == 2 * size, "an MPI_Iallreduce after freed ones", 0, "thread 0's dup");
    return NULL;
}

static void *waiter(void *arg) {
    freer *f = arg;
    for (int r = 0; r < 4 * f->rounds; r++) {
        long in = rank + r, out = -1;
        MPI_Request req;
        MPI_Iallreduce(&in, &out, 1, MPI_LONG, MPI_SUM, f->comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        expect(out == (long)size * r + size * (size - 1) / 2, "an MPI_Iallreduce waited for beside a freeing thread", r, "thread 1's dup");
    }
    return NULL;
}

static void requests(int rounds) {
    MPI_Comm dup, dups[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    /* A blocking collective first: get_status's ranks enter their first
     * nonblocking one at different times, and (review rev31, finding 2,
     * open) a communicator's first collective joins mcd's collectives
     * barrier, waiting for every rank. */
    int all = 1;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_SUM, dup);
    expect(all == size, "the first MPI_Allreduce", 0, "dup");
    get_status(dup);
    statuses_ignored(dup, rounds);
    ops_and_types(dup);
    freer f[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &dups[i]);
        f[i] = (freer){dups[i], rounds};
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* (free_refused) */
    pthread_create(&t[0], NULL, free_at_once, &f[0]);
    pthread_create(&t[1], NULL, waiter, &f[1]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    for (int i = 0; i < 2; i++) MPI_Comm_free(&dups[i]);
#ifdef PERSISTENT
    /* A persistent one on a communicator freed in flight. */
    MPI_Comm gone;
    MPI_Comm_dup(MPI_COMM_WORLD, &gone);
    int x = rank, sum = -1;
    MPI_Request p;
    PERSISTENT(Allreduce)(&x, &sum, 1, MPI_INT, MPI_SUM, gone, MPI_INFO_NULL, &p);
    MPI_Start(&p);
    MPI_Comm_free(&gone);
    MPI_Wait(&p, MPI_STATUS_IGNORE);
    expect(sum == size * (size - 1) / 2, "a persistent MPI_Allreduce_init on a communicator freed in flight", 0, "gone");
    MPI_Request_free(&p);
    /* And one never completed: MPI_Finalize completes it. */
    static int y = 1, total = 0;
    static MPI_Request pending;
    PERSISTENT(Allreduce)(&y, &total, 1, MPI_INT, MPI_SUM, dup, MPI_INFO_NULL, &pending);
    MPI_Start(&pending);
#endif
    /* (dup stays: the pending one's communicator.) */
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "forms";
    int rounds = argc > 2 ? atoi(argv[2]) : 10;
    statuses_ignore = MPI_STATUSES_IGNORE;
    if (!strcmp(mode, "threads") || !strcmp(mode, "requests")) {
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
    else if (!strcmp(mode, "requests")) requests(rounds);
    else {
        fprintf(stderr, "usage: nb_check forms|overlap|threads|bad|requests [ROUNDS] [COMPUTE_MS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("nb_check: rank %d: %s: %ld checks, %ld wrong\n", rank, mode, checks, wrong);
    fflush(stdout);
    MPI_Finalize();
    return wrong != 0;
}
