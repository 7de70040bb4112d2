/* review_colls: review rev30 of issue 28 (collectives everywhere through
 * the MPI interposer): edges a user of MPI meets, each checked against
 * MPI's documented semantics (the expected values are computed here from
 * the inputs, never taken from a run). An ordinary MPI program (no mcd
 * header); it runs with the interposer preloaded or without it (then it
 * checks the MPI's own behaviour, the reference).
 *
 *   review_colls MODE [MODE ...]
 *
 * Several modes run one after the other in one job (one MPI start-up for
 * them all; "threads" among them makes it MPI_THREAD_MULTIPLE).
 *
 * Modes (4 ranks or more unless said):
 *   errhandler  an MPI_Bcast and an MPI_Reduce with a root that is no rank
 *               (erroneous: MPI raises MPI_ERR_ROOT through the
 *               communicator's error handler) on a duplicate with an error
 *               handler of the program's own: the handler is called once
 *               per call, the class is MPI_ERR_ROOT (and the same for an
 *               MPI_Ibcast), and a right MPI_Allreduce after works.
 *   negroot     MPI_Reduce and MPI_Ireduce to root MPI_PROC_NULL, MPI_ROOT
 *               and -7 on an intra-communicator (erroneous: MPI_ERR_ROOT),
 *               MPI_ERRORS_RETURN set: an error, the receive buffer
 *               untouched; a right MPI_Allreduce after.
 *   ptag        a persistent MPI_Allreduce_init request A kept, 32766 other
 *               persistent requests made and freed one after the other,
 *               then one more, B; A and B started, B completed by MPI_Test
 *               polled for up to 10 s, then A: both complete, both right.
 *   typefree    a persistent MPI_Bcast_init of 3 x contiguous(2, MPI_INT),
 *               the type freed after the init (MPI: communication using a
 *               freed type completes normally), started 3 times; and an
 *               MPI_Ibcast whose type is freed right after the start.
 *               Every result right.
 *   nbmismatch  an MPI_Iallreduce whose count differs across ranks
 *               (erroneous) on a duplicate whose error handler counts
 *               and returns: MPI_Test gives the interposer's mismatch
 *               error on every rank within 30 s (never a hang or a
 *               result), in status.MPI_ERROR too, the handler called once;
 *               another beside a right MPI_Ibarrier, by MPI_Waitall:
 *               MPI_ERR_IN_STATUS, each status its own; two more with
 *               MPI_STATUSES_IGNORE (MPI_Waitall, MPI_Testall polled):
 *               MPI_ERR_IN_STATUS, the handler once; a persistent one
 *               (MPI_Wait: the error); then an MPI_Iallreduce and an
 *               MPI_Allreduce right, the handler not called. (Only with
 *               the interposer: MPI leaves a mismatch undefined.)
 *   many        1000 MPI_Iallreduce and 1000 MPI_Ibarrier in flight at
 *               once on MPI_COMM_WORLD, one MPI_Waitall; prints the time.
 *   inter       an inter-communicator (even and odd world ranks):
 *               MPI_Barrier, MPI_Allreduce (each group gets the other's
 *               reduction), MPI_Bcast and MPI_Reduce with MPI_ROOT /
 *               MPI_PROC_NULL, MPI_Allgather, MPI_Ibarrier, MPI_Iallreduce,
 *               MPI_Ibcast, and the merged intra-communicator.
 *   self        every collective on MPI_COMM_SELF (blocking, nonblocking,
 *               persistent), in place and not.
 *   types       derived types on MPI_COMM_WORLD, a duplicate and a
 *               communicator of MPI_Comm_create_group with the ranks
 *               reversed: vector, indexed, a struct with gaps, resized with
 *               a negative lower bound; MPI_Allreduce, MPI_Reduce and
 *               MPI_Bcast at every root, in place and not, count 0,
 *               MPI_Allgather in place with a resized type; gaps and bytes
 *               beyond the data untouched. (Predefined operations on
 *               derived types: Open MPI's own refuses them, MPI_ERR_OP;
 *               this checks mcd's results where the interposer serves them.)
 *   bottom      MPI_Bcast and MPI_Ibcast from MPI_BOTTOM of a struct of
 *               absolute addresses, every root, the world and a duplicate;
 *               an MPI_Allgather from MPI_BOTTOM into plain ints.
 *   nbmix       on one duplicate: MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier
 *               in flight with an MPI_Irecv/MPI_Isend ring, a blocking
 *               MPI_Allreduce on the same communicator between the starts
 *               and the completion, completed out of order by MPI_Waitany
 *               then MPI_Testsome; then an MPI_Reduce with MPI_MAXLOC and a
 *               user-defined operation that does not commute (PMPI's).
 *   threads     MPI_THREAD_MULTIPLE: one thread on MPI_COMM_WORLD and one
 *               on a duplicate, blocking and nonblocking collectives at once.
 *
 * Every rank prints "review: rank R: MODE: C checks, W wrong" per mode
 * (and a line per wrong check) and exits 1 if anything was wrong. */
#include <mpi.h>
#ifdef OPEN_MPI
#include <mpi-ext.h>
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static int rank, size;
static long checks, wrong;
static const char *mode;

static void expect(int ok, const char *fmt, ...) {
    __atomic_fetch_add(&checks, 1, __ATOMIC_RELAXED);
    if (ok) return;
    if (__atomic_fetch_add(&wrong, 1, __ATOMIC_RELAXED) >= 30) return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("review: rank %d: %s: wrong: %s\n", rank, mode, text);
    fflush(stdout);
}

/* ---- errhandler ---- */
static int handler_calls, handler_code;
static void count_errors(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

static int class_of(int code) {
    int cls = -1;
    MPI_Error_class(code, &cls);
    return cls;
}

static void errhandler(void) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(count_errors, &eh);
    MPI_Comm_set_errhandler(dup, eh);
    int v = rank;
    handler_calls = 0;
    int rc = MPI_Bcast(&v, 1, MPI_INT, size, dup); /* no such rank */
    expect(rc != MPI_SUCCESS, "MPI_Bcast from root %d of %d ranks returned MPI_SUCCESS", size, size);
    expect(handler_calls == 1, "MPI_Bcast with a bad root: the communicator's error handler was called %d times, not once", handler_calls);
    expect(class_of(rc) == MPI_ERR_ROOT, "MPI_Bcast with a bad root: error class %d, not MPI_ERR_ROOT (%d)", class_of(rc), MPI_ERR_ROOT);
    int sum = 0;
    handler_calls = 0;
    rc = MPI_Reduce(&v, &sum, 1, MPI_INT, MPI_SUM, -7, dup);
    expect(rc != MPI_SUCCESS, "MPI_Reduce to root -7 returned MPI_SUCCESS");
    expect(handler_calls == 1, "MPI_Reduce with a bad root: the error handler was called %d times, not once", handler_calls);
    expect(class_of(rc) == MPI_ERR_ROOT, "MPI_Reduce with a bad root: error class %d, not MPI_ERR_ROOT (%d)", class_of(rc), MPI_ERR_ROOT);
    MPI_Request r;
    handler_calls = 0;
    rc = MPI_Ibcast(&v, 1, MPI_INT, size, dup, &r);
    if (rc == MPI_SUCCESS) MPI_Wait(&r, MPI_STATUS_IGNORE);
    expect(handler_calls == 1, "MPI_Ibcast with a bad root: the error handler was called %d times, not once", handler_calls);
    expect(class_of(rc) == MPI_ERR_ROOT, "MPI_Ibcast with a bad root: error class %d, not MPI_ERR_ROOT (%d)", class_of(rc), MPI_ERR_ROOT);
    /* Later collectives work. */
    int one = 1, n = 0;
    rc = MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, dup);
    expect(rc == MPI_SUCCESS && n == size, "a right MPI_Allreduce after: rc %d, %d (want %d)", rc, n, size);
    MPI_Errhandler_free(&eh);
    MPI_Comm_free(&dup);
}

/* ---- negroot ---- */
static void negroot(void) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int roots[3] = {MPI_PROC_NULL, MPI_ROOT, -7};
    for (int k = 0; k < 3; k++) {
        int v = rank + 1, out = -1;
        int rc = MPI_Reduce(&v, &out, 1, MPI_INT, MPI_SUM, roots[k], dup);
        expect(rc != MPI_SUCCESS, "MPI_Reduce to root %d on an intra-communicator returned MPI_SUCCESS", roots[k]);
        expect(out == -1, "MPI_Reduce to root %d on an intra-communicator wrote the receive buffer: %d", roots[k], out);
        MPI_Request r;
        out = -1;
        rc = MPI_Ireduce(&v, &out, 1, MPI_INT, MPI_SUM, roots[k], dup, &r);
        if (rc == MPI_SUCCESS) MPI_Wait(&r, MPI_STATUS_IGNORE);
        expect(rc != MPI_SUCCESS, "MPI_Ireduce to root %d on an intra-communicator returned MPI_SUCCESS", roots[k]);
        expect(out == -1, "MPI_Ireduce to root %d on an intra-communicator wrote the receive buffer: %d", roots[k], out);
    }
    int one = 1, n = 0;
    int rc = MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, dup);
    expect(rc == MPI_SUCCESS && n == size, "a right MPI_Allreduce after: rc %d, %d (want %d)", rc, n, size);
    MPI_Comm_free(&dup);
}

#ifdef PERSISTENT
/* ---- ptag ---- */
static void ptag(void) {
    int a_in = rank + 1, a_out = -1, b_in = 10 * (rank + 1), b_out = -1;
    MPI_Request a, b;
    PERSISTENT(Allreduce)(&a_in, &a_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &a);
    for (int i = 0; i < 32766; i++) {
        MPI_Request r;
        int x = 0, y = 0;
        PERSISTENT(Allreduce)(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        MPI_Request_free(&r);
    }
    PERSISTENT(Allreduce)(&b_in, &b_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &b);
    MPI_Start(&a);
    MPI_Start(&b);
    int done = 0;
    double until = now_us() + 10e6;
    while (!done && now_us() < until) MPI_Test(&b, &done, MPI_STATUS_IGNORE);
    expect(done, "persistent request B (started after A) never completed by MPI_Test in 10 s");
    MPI_Wait(&a, MPI_STATUS_IGNORE);
    if (!done) MPI_Wait(&b, MPI_STATUS_IGNORE);
    int want_a = size * (size + 1) / 2;
    expect(a_out == want_a, "persistent A: %d, want %d", a_out, want_a);
    expect(b_out == 10 * want_a, "persistent B: %d, want %d", b_out, 10 * want_a);
    MPI_Request_free(&a);
    MPI_Request_free(&b);
}

/* ---- typefree ---- */
static void typefree(void) {
    /* Broadcasts (any type is legal there; Open MPI refuses predefined
     * operations on derived types). */
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    int buf[6];
    MPI_Request r;
    int root = size - 1;
    PERSISTENT(Bcast)(buf, 3, pair, root, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
    MPI_Type_free(&pair);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 6; i++) buf[i] = rank == root ? 1000 * k + i : -1;
        MPI_Start(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        for (int i = 0; i < 6; i++) expect(buf[i] == 1000 * k + i, "start %d of a persistent broadcast whose type was freed: [%d] = %d", k, i, buf[i]);
    }
    MPI_Request_free(&r);
    /* A nonblocking one whose type is freed at once. */
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    for (int i = 0; i < 6; i++) buf[i] = rank == 0 ? 70 + i : -1;
    MPI_Ibcast(buf, 3, pair, 0, MPI_COMM_WORLD, &r);
    MPI_Type_free(&pair);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    for (int i = 0; i < 6; i++) expect(buf[i] == 70 + i, "MPI_Ibcast, type freed: [%d] = %d", i, buf[i]);
}
#endif

/* ---- nbmismatch ---- */
/* Whether `code` is the interposer's collective mismatch (its own error
 * string: this program has no mcd header). */
static int is_mismatch(int code) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(code, text, &len);
    const char *want = "mcd: the ranks called different collectives";
    return code != MPI_SUCCESS && !strncmp(text, want, strlen(want));
}

static void nbmismatch(void) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(count_errors, &eh);
    MPI_Comm_set_errhandler(dup, eh); /* returns, as MPI_ERRORS_RETURN does, counting */
    /* Erroneous: rank 0 reduces 2 elements, the others 3. */
    long in[3] = {rank, rank, rank}, out[3] = {-1, -1, -1};
    MPI_Request r;
    handler_calls = 0;
    int rc = MPI_Iallreduce(in, out, rank == 0 ? 2 : 3, MPI_LONG, MPI_SUM, dup, &r);
    MPI_Status status;
    status.MPI_ERROR = -1;
    if (rc == MPI_SUCCESS) {
        double until = now_us() + 30e6;
        int done = 0;
        while (!done && now_us() < until) rc = MPI_Test(&r, &done, &status);
        expect(done, "an MPI_Iallreduce whose count differs across ranks never completed in 30 s");
        if (!done) rc = MPI_Wait(&r, &status);
    }
    expect(rc != MPI_SUCCESS, "an MPI_Iallreduce whose count differs across ranks returned MPI_SUCCESS (out %ld %ld %ld)", out[0], out[1], out[2]);
    expect(is_mismatch(rc), "MPI_Test of the mismatched MPI_Iallreduce: code %d is not the interposer's mismatch", rc);
    expect(status.MPI_ERROR == rc, "MPI_Test of the mismatched MPI_Iallreduce: status.MPI_ERROR %d, returned %d", status.MPI_ERROR, rc);
    expect(handler_calls == 1 && handler_code == rc, "MPI_Test of the mismatched MPI_Iallreduce: the error handler called %d times (code %d)",
           handler_calls, handler_code);
    /* A multi-request form: a mismatched one beside a right MPI_Ibarrier,
     * completed by MPI_Waitall: MPI_ERR_IN_STATUS, each status its own. */
    MPI_Request two[2];
    MPI_Status statuses[2];
    statuses[0].MPI_ERROR = statuses[1].MPI_ERROR = -1;
    handler_calls = 0;
    rc = MPI_Iallreduce(in, out, rank == 0 ? 3 : 1, MPI_LONG, MPI_MAX, dup, &two[0]);
    int rc2 = MPI_Ibarrier(dup, &two[1]);
    if (rc == MPI_SUCCESS && rc2 == MPI_SUCCESS) rc = MPI_Waitall(2, two, statuses);
    expect(rc == MPI_ERR_IN_STATUS, "MPI_Waitall of a mismatched MPI_Iallreduce and an MPI_Ibarrier: %d, not MPI_ERR_IN_STATUS", rc);
    expect(is_mismatch(statuses[0].MPI_ERROR), "MPI_Waitall: the mismatched one's status.MPI_ERROR %d", statuses[0].MPI_ERROR);
    expect(statuses[1].MPI_ERROR == MPI_SUCCESS, "MPI_Waitall: the MPI_Ibarrier's status.MPI_ERROR %d", statuses[1].MPI_ERROR);
    expect(handler_calls == 1 && handler_code == MPI_ERR_IN_STATUS, "MPI_Waitall: the error handler called %d times (code %d)", handler_calls,
           handler_code);
    /* The same with MPI_STATUSES_IGNORE (through a variable: GCC warns on
     * MPICH's constant): MPI_ERR_IN_STATUS still, the handler once; and by
     * MPI_Testall polled. */
    MPI_Status *volatile ignore = MPI_STATUSES_IGNORE;
    for (int form = 0; form < 2; form++) {
        handler_calls = 0;
        rc = MPI_Iallreduce(in, out, rank == 0 ? 3 : 1, MPI_LONG, MPI_MAX, dup, &two[0]);
        rc2 = MPI_Ibarrier(dup, &two[1]);
        if (rc == MPI_SUCCESS && rc2 == MPI_SUCCESS) {
            if (form == 0) {
                rc = MPI_Waitall(2, two, ignore);
            } else {
                int flag = 0;
                double until = now_us() + 30e6;
                do rc = MPI_Testall(2, two, &flag, ignore);
                while (!flag && rc == MPI_SUCCESS && now_us() < until);
            }
        }
        expect(rc == MPI_ERR_IN_STATUS, "%s with MPI_STATUSES_IGNORE of a mismatched MPI_Iallreduce and an MPI_Ibarrier: %d, not MPI_ERR_IN_STATUS",
               form ? "MPI_Testall" : "MPI_Waitall", rc);
        expect(two[0] == MPI_REQUEST_NULL && two[1] == MPI_REQUEST_NULL, "%s with MPI_STATUSES_IGNORE left a request", form ? "MPI_Testall" : "MPI_Waitall");
        expect(handler_calls == 1 && handler_code == MPI_ERR_IN_STATUS, "%s with MPI_STATUSES_IGNORE: the error handler called %d times (code %d)",
               form ? "MPI_Testall" : "MPI_Waitall", handler_calls, handler_code);
    }
#ifdef PERSISTENT
    /* A persistent one: its start fails in mcd, its wait says so; started
     * again right, it is right. */
    long p_in[3] = {rank + 1, rank + 1, rank + 1}, p_out[3] = {-1, -1, -1};
    int p_count = rank == 0 ? 1 : 2;
    PERSISTENT(Allreduce)(p_in, p_out, p_count, MPI_LONG, MPI_SUM, dup, MPI_INFO_NULL, &r);
    handler_calls = 0;
    status.MPI_ERROR = -1;
    rc = MPI_Start(&r);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&r, &status);
    expect(is_mismatch(rc), "a mismatched persistent MPI_Allreduce: MPI_Wait returned %d", rc);
    expect(status.MPI_ERROR == rc, "a mismatched persistent MPI_Allreduce: status.MPI_ERROR %d, returned %d", status.MPI_ERROR, rc);
    expect(handler_calls == 1, "a mismatched persistent MPI_Allreduce: the error handler called %d times", handler_calls);
    MPI_Request_free(&r);
#endif
    /* Later collectives, nonblocking and blocking, work. */
    long x = rank + 1, s1 = -1, s2 = -1;
    handler_calls = 0;
    rc = MPI_Iallreduce(&x, &s1, 1, MPI_LONG, MPI_SUM, dup, &r);
    rc2 = rc == MPI_SUCCESS ? MPI_Wait(&r, MPI_STATUS_IGNORE) : rc;
    expect(rc2 == MPI_SUCCESS && s1 == (long)size * (size + 1) / 2, "an MPI_Iallreduce after the mismatch: rc %d, %ld", rc2, s1);
    rc = MPI_Allreduce(&x, &s2, 1, MPI_LONG, MPI_MAX, dup);
    expect(rc == MPI_SUCCESS && s2 == size, "an MPI_Allreduce after the mismatch: rc %d, %ld", rc, s2);
    expect(handler_calls == 0, "right collectives after the mismatch called the error handler %d times", handler_calls);
    MPI_Errhandler_free(&eh);
    MPI_Comm_free(&dup);
}

/* ---- many ---- */
static void many(void) {
    enum { M = 1000 };
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * M);
    long *in = malloc(sizeof(long) * M), *out = malloc(sizeof(long) * M);
    double t0 = now_us();
    for (int i = 0; i < M; i++) {
        in[i] = (long)i * size + rank;
        out[i] = -1;
        MPI_Iallreduce(&in[i], &out[i], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &reqs[2 * i]);
        MPI_Ibarrier(MPI_COMM_WORLD, &reqs[2 * i + 1]);
    }
    MPI_Status *statuses = malloc(sizeof(MPI_Status) * 2 * M);
    MPI_Waitall(2 * M, reqs, statuses);
    double took = (now_us() - t0) / 1e6;
    long bad = 0;
    for (int i = 0; i < M; i++) bad += out[i] != (long)i * size * size + (long)size * (size - 1) / 2;
    expect(bad == 0, "%ld of %d MPI_Iallreduce in flight at once wrong", bad, M);
    printf("review: rank %d: many: %d nonblocking collectives in flight completed in %.2f s\n", rank, 2 * M, took);
    free(statuses);
    free(reqs);
    free(in);
    free(out);
}

/* ---- inter ---- */
static void inter(void) {
    int color = rank % 2;
    MPI_Comm local, ic, merged;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local);
    int lrank, lsize, rsize;
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    /* Leaders: world rank 0 (even group) and 1 (odd group). */
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - color, 77, &ic);
    MPI_Comm_remote_size(ic, &rsize);
    expect(MPI_Barrier(ic) == MPI_SUCCESS, "MPI_Barrier on an inter-communicator");
    /* Allreduce: each group gets the reduction over the other group. */
    long mine = rank + 1, got = -1, other = 0;
    for (int w = 1 - color; w < size; w += 2) other += w + 1;
    MPI_Allreduce(&mine, &got, 1, MPI_LONG, MPI_SUM, ic);
    expect(got == other, "MPI_Allreduce on an inter-communicator: %ld, want the other group's sum %ld", got, other);
    /* Bcast from the even group's rank 0 to the odd group. */
    int data[3] = {-1, -1, -1};
    int root;
    if (color == 0) root = lrank == 0 ? MPI_ROOT : MPI_PROC_NULL;
    else root = 0;
    if (color == 0 && lrank == 0) data[0] = 5, data[1] = 6, data[2] = 7;
    MPI_Bcast(data, 3, MPI_INT, root, ic);
    if (color == 1) expect(data[0] == 5 && data[1] == 6 && data[2] == 7, "MPI_Bcast over an inter-communicator: %d %d %d", data[0], data[1], data[2]);
    else if (lrank != 0) expect(data[0] == -1, "MPI_Bcast with MPI_PROC_NULL wrote the buffer: %d", data[0]);
    /* Reduce from the odd group to the even group's rank 0. */
    long red = -1;
    if (color == 0) root = lrank == 0 ? MPI_ROOT : MPI_PROC_NULL;
    else root = 0;
    MPI_Reduce(&mine, &red, 1, MPI_LONG, MPI_SUM, root, ic);
    if (color == 0 && lrank == 0) expect(red == other, "MPI_Reduce over an inter-communicator: %ld, want %ld", red, other);
    if (color == 0 && lrank != 0) expect(red == -1, "MPI_Reduce with MPI_PROC_NULL wrote the buffer: %ld", red);
    /* Allgather: each gets the other group's blocks. */
    int *all = malloc(sizeof(int) * rsize);
    int me = rank;
    MPI_Allgather(&me, 1, MPI_INT, all, 1, MPI_INT, ic);
    for (int i = 0; i < rsize; i++) expect(all[i] == 2 * i + (1 - color), "MPI_Allgather over an inter-communicator: [%d] = %d", i, all[i]);
    free(all);
    /* Nonblocking. */
    MPI_Request reqs[3];
    long nb = -1;
    int bdata[2] = {-1, -1};
    if (color == 1 && lrank == 0) bdata[0] = 11, bdata[1] = 12;
    int broot = color == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Ibarrier(ic, &reqs[0]);
    MPI_Iallreduce(&mine, &nb, 1, MPI_LONG, MPI_SUM, ic, &reqs[1]);
    MPI_Ibcast(bdata, 2, MPI_INT, broot, ic, &reqs[2]);
    MPI_Status st3[3];
    MPI_Waitall(3, reqs, st3);
    expect(nb == other, "MPI_Iallreduce on an inter-communicator: %ld, want %ld", nb, other);
    if (color == 0) expect(bdata[0] == 11 && bdata[1] == 12, "MPI_Ibcast over an inter-communicator: %d %d", bdata[0], bdata[1]);
    /* The merged intra-communicator: odd group first. */
    MPI_Intercomm_merge(ic, color == 0, &merged);
    long total = -1;
    MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, merged);
    expect(total == (long)size * (size + 1) / 2, "MPI_Allreduce on the merged communicator: %ld", total);
    int mrank;
    MPI_Comm_rank(merged, &mrank);
    int from0 = mrank == 0 ? 42 : -1;
    MPI_Bcast(&from0, 1, MPI_INT, 0, merged);
    expect(from0 == 42, "MPI_Bcast on the merged communicator: %d", from0);
    MPI_Comm_free(&merged);
    MPI_Comm_free(&ic);
    MPI_Comm_free(&local);
}

/* ---- self ---- */
static void self(void) {
    double in[3] = {1.5, -2, 3}, out[3] = {0};
    MPI_Allreduce(in, out, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
    expect(out[0] == 1.5 && out[1] == -2 && out[2] == 3, "MPI_Allreduce on MPI_COMM_SELF");
    MPI_Allreduce(MPI_IN_PLACE, out, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_SELF);
    expect(out[0] == 1.5 && out[1] == -2 && out[2] == 3, "MPI_Allreduce in place on MPI_COMM_SELF");
    int v = 9;
    MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_SELF);
    expect(v == 9, "MPI_Bcast on MPI_COMM_SELF: %d", v);
    long r = -1, x = rank;
    MPI_Reduce(&x, &r, 1, MPI_LONG, MPI_PROD, 0, MPI_COMM_SELF);
    expect(r == rank, "MPI_Reduce on MPI_COMM_SELF: %ld", r);
    MPI_Request reqs[3];
    long nb = -1;
    int b = 3;
    MPI_Ibarrier(MPI_COMM_SELF, &reqs[0]);
    MPI_Iallreduce(&x, &nb, 1, MPI_LONG, MPI_SUM, MPI_COMM_SELF, &reqs[1]);
    MPI_Ibcast(&b, 1, MPI_INT, 0, MPI_COMM_SELF, &reqs[2]);
    MPI_Status st3[3];
    MPI_Waitall(3, reqs, st3);
    expect(nb == rank && b == 3, "nonblocking on MPI_COMM_SELF: %ld %d", nb, b);
#ifdef PERSISTENT
    MPI_Request p;
    long pin = 0, pout = -1;
    PERSISTENT(Allreduce)(&pin, &pout, 1, MPI_LONG, MPI_SUM, MPI_COMM_SELF, MPI_INFO_NULL, &p);
    for (int k = 0; k < 5; k++) {
        pin = k * 7 + rank;
        MPI_Start(&p);
        MPI_Wait(&p, MPI_STATUS_IGNORE);
        expect(pout == pin, "persistent allreduce on MPI_COMM_SELF: %ld, want %ld", pout, pin);
    }
    MPI_Request_free(&p);
#endif
    int g = rank, gall = -1;
    MPI_Allgather(&g, 1, MPI_INT, &gall, 1, MPI_INT, MPI_COMM_SELF);
    expect(gall == rank, "MPI_Allgather on MPI_COMM_SELF: %d", gall);
}

/* ---- types ---- */
#define N 4 /* elements per call */
#define SENTINEL (-77777)

/* A struct with gaps: {int a; double pad; int b;} carrying a and b. */
typedef struct {
    int a;
    double pad;
    int b;
} gappy;

static MPI_Datatype gappy_type(void) {
    int lens[2] = {1, 1};
    MPI_Aint disps[2] = {offsetof(gappy, a), offsetof(gappy, b)};
    MPI_Datatype types[2] = {MPI_INT, MPI_INT}, t, r;
    MPI_Type_create_struct(2, lens, disps, types, &t);
    MPI_Type_create_resized(t, 0, sizeof(gappy), &r);
    MPI_Type_free(&t);
    MPI_Type_commit(&r);
    return r;
}

/* One element: two ints of a stride-3 vector. */
static MPI_Datatype vector_type(void) {
    MPI_Datatype v, r;
    MPI_Type_vector(2, 1, 3, MPI_INT, &v);
    MPI_Type_create_resized(v, 0, 6 * sizeof(int), &r);
    MPI_Type_free(&v);
    MPI_Type_commit(&r);
    return r;
}

/* One element: ints at displacements {2, 0} (reversed, indexed). */
static MPI_Datatype indexed_type(void) {
    int lens[2] = {1, 1}, disps[2] = {2, 0};
    MPI_Datatype t, r;
    MPI_Type_indexed(2, lens, disps, MPI_INT, &t);
    MPI_Type_create_resized(t, 0, 4 * sizeof(int), &r);
    MPI_Type_free(&t);
    MPI_Type_commit(&r);
    return r;
}

/* One element: two ints at byte offsets -8 and -4 from the element's
 * address, extent 12 (lower bound -8). */
static MPI_Datatype negative_lb_type(void) {
    MPI_Datatype c, r;
    MPI_Type_contiguous(2, MPI_INT, &c);
    MPI_Datatype shifted;
    int len = 1;
    MPI_Aint disp = -8;
    MPI_Type_create_hindexed(1, &len, &disp, c, &shifted);
    MPI_Type_create_resized(shifted, -8, 12, &r);
    MPI_Type_free(&c);
    MPI_Type_free(&shifted);
    MPI_Type_commit(&r);
    return r;
}

/* A layout: where element i's two ints are in a buffer of `ints` ints
 * (the type's displacement of element i, in ints, from `base`). */
typedef struct {
    const char *name;
    MPI_Datatype t;
    int ints; /* buffer size */
    int base; /* where the buffer pointer points (ints from the start) */
    int at[N][2];
} layout;

static void layouts(layout *l) {
    memset(l, 0, sizeof(layout) * 4);
    l[0].name = "vector";
    l[0].t = vector_type();
    l[0].ints = 6 * N;
    for (int i = 0; i < N; i++) l[0].at[i][0] = 6 * i, l[0].at[i][1] = 6 * i + 3;
    l[1].name = "indexed";
    l[1].t = indexed_type();
    l[1].ints = 4 * N;
    for (int i = 0; i < N; i++) l[1].at[i][0] = 4 * i + 2, l[1].at[i][1] = 4 * i;
    l[2].name = "struct with gaps";
    l[2].t = gappy_type();
    l[2].ints = (int)(sizeof(gappy) / sizeof(int)) * N;
    for (int i = 0; i < N; i++)
        l[2].at[i][0] = (int)((i * sizeof(gappy) + offsetof(gappy, a)) / sizeof(int)),
        l[2].at[i][1] = (int)((i * sizeof(gappy) + offsetof(gappy, b)) / sizeof(int));
    l[3].name = "resized, lower bound -8";
    l[3].t = negative_lb_type();
    l[3].ints = 3 * N + 2;
    l[3].base = 2;
    for (int i = 0; i < N; i++) l[3].at[i][0] = 3 * i, l[3].at[i][1] = 3 * i + 1;
}

/* Fills `buf` with the sentinel and the layout's elements with value(i, j). */
static void fill(const layout *l, int *buf, int seed) {
    for (int k = 0; k < l->ints; k++) buf[k] = SENTINEL;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) buf[l->at[i][j]] = seed + 10 * i + j;
}

/* Whether `buf` holds want(i, j) in the layout and the sentinel elsewhere. */
static int holds(const layout *l, const int *buf, int count, long mult, long add, int *bad) {
    char is_data[256] = {0};
    for (int i = 0; i < count; i++)
        for (int j = 0; j < 2; j++) is_data[l->at[i][j]] = 1;
    for (int k = 0; k < l->ints; k++) {
        long want = SENTINEL;
        if (is_data[k])
            for (int i = 0; i < count; i++)
                for (int j = 0; j < 2; j++)
                    if (l->at[i][j] == k) want = mult * (10 * i + j) + add;
        if (buf[k] != want) {
            *bad = k;
            return 0;
        }
    }
    return 1;
}

static void types_on(MPI_Comm comm, const char *cname) {
    int crank, csize;
    MPI_Comm_rank(comm, &crank);
    MPI_Comm_size(comm, &csize);
    layout ls[4];
    layouts(ls);
    long ranks_sum = (long)csize * (csize - 1) / 2;
    for (int li = 0; li < 4; li++) {
        layout *l = &ls[li];
        int send[64], recv[64], bad = -1;
        for (int count = 0; count <= N; count += N) {
            /* Allreduce, not in place: send untouched, recv per layout. */
            fill(l, send, crank);
            fill(l, recv, 0);
            for (int k = 0; k < l->ints; k++) recv[k] = SENTINEL;
            MPI_Allreduce(send + l->base, recv + l->base, count, l->t, MPI_SUM, comm);
            expect(holds(l, recv, count, csize, ranks_sum, &bad), "%s: MPI_Allreduce of %d x %s: int %d = %d", cname, count, l->name, bad,
                   bad >= 0 ? recv[bad] : 0);
            expect(holds(l, send, N, 1, crank, &bad), "%s: MPI_Allreduce changed its send buffer (%s) at int %d", cname, l->name, bad);
            /* In place. */
            fill(l, recv, crank);
            MPI_Allreduce(MPI_IN_PLACE, recv + l->base, count, l->t, MPI_SUM, comm);
            if (count == 0) expect(holds(l, recv, N, 1, crank, &bad), "%s: MPI_Allreduce in place of 0 x %s changed int %d", cname, l->name, bad);
            else expect(holds(l, recv, count, csize, ranks_sum, &bad), "%s: MPI_Allreduce in place of %s: int %d = %d", cname, l->name, bad, bad >= 0 ? recv[bad] : 0);
            /* Reduce and Bcast at every root, in place at the root. */
            for (int root = 0; root < csize; root++) {
                fill(l, send, crank);
                for (int k = 0; k < l->ints; k++) recv[k] = SENTINEL;
                int in_place = (root + li) % 2;
                if (crank == root && in_place) fill(l, recv, crank);
                MPI_Reduce(crank == root && in_place ? MPI_IN_PLACE : send + l->base, recv + l->base, count, l->t, MPI_MAX, root, comm);
                if (crank == root && count)
                    expect(holds(l, recv, count, 1, csize - 1, &bad), "%s: MPI_Reduce (MAX, %s) to root %d%s: int %d = %d", cname, l->name, root,
                           in_place ? " in place" : "", bad, bad >= 0 ? recv[bad] : 0);
                if (crank != root) {
                    int untouched = 1;
                    for (int k = 0; k < l->ints; k++) untouched &= recv[k] == SENTINEL;
                    expect(untouched, "%s: MPI_Reduce to root %d wrote a non-root's receive buffer (%s)", cname, root, l->name);
                }
                if (crank == root) fill(l, recv, 1000 + root);
                else for (int k = 0; k < l->ints; k++) recv[k] = SENTINEL;
                MPI_Bcast(recv + l->base, count, l->t, root, comm);
                if (count) expect(holds(l, recv, count, 1, 1000 + root, &bad), "%s: MPI_Bcast of %s from root %d: int %d = %d", cname, l->name, root, bad,
                                  bad >= 0 ? recv[bad] : 0);
            }
        }
    }
    /* Allgather in place with the negative lower bound type. */
    layout *l = &ls[3];
    int big[3 * 8 * N + 8];
    int per = 3 * N; /* ints per rank's block of N elements */
    for (int k = 0; k < per * csize + 2; k++) big[k] = SENTINEL;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) big[crank * per + l->at[i][j]] = 100 * crank + 10 * i + j;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big + l->base, N, l->t, comm);
    int ok = 1, where = -1;
    for (int p = 0; p < csize && ok; p++)
        for (int k = 0; k < per && ok; k++) {
            int want = SENTINEL;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < 2; j++)
                    if (l->at[i][j] == k) want = 100 * p + 10 * i + j;
            if (big[p * per + k] != want) ok = 0, where = p * per + k;
        }
    expect(ok, "%s: MPI_Allgather in place of a type with a negative lower bound: int %d = %d", cname, where, where >= 0 ? big[where] : 0);
    for (int li = 0; li < 4; li++) MPI_Type_free(&ls[li].t);
}

static void types(void) {
    types_on(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    MPI_Comm dup, rev;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    types_on(dup, "a duplicate");
    MPI_Group world, reversed;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int *order = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++) order[i] = size - 1 - i;
    MPI_Group_incl(world, size, order, &reversed);
    MPI_Comm_create_group(MPI_COMM_WORLD, reversed, 5, &rev);
    types_on(rev, "MPI_Comm_create_group, ranks reversed");
    free(order);
    MPI_Group_free(&reversed);
    MPI_Group_free(&world);
    MPI_Comm_free(&rev);
    MPI_Comm_free(&dup);
}

/* ---- bottom ---- */
/* MPI_BOTTOM with absolute addresses (a struct of two separate ints):
 * broadcasts from every root on the world and a duplicate. */
static void bottom(void) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm comms[2] = {MPI_COMM_WORLD, dup};
    static int x_abs, y_abs;
    MPI_Aint ax, ay;
    MPI_Get_address(&x_abs, &ax);
    MPI_Get_address(&y_abs, &ay);
    int lens[2] = {1, 1};
    MPI_Aint disps[2] = {ax, ay};
    MPI_Datatype ints[2] = {MPI_INT, MPI_INT}, abs_t;
    MPI_Type_create_struct(2, lens, disps, ints, &abs_t);
    MPI_Type_commit(&abs_t);
    for (int c = 0; c < 2; c++)
        for (int root = 0; root < size; root++) {
            x_abs = rank == root ? 31 + root : -1;
            y_abs = rank == root ? 41 + root : -1;
            MPI_Bcast(MPI_BOTTOM, 1, abs_t, root, comms[c]);
            expect(x_abs == 31 + root && y_abs == 41 + root, "MPI_Bcast from MPI_BOTTOM (root %d, communicator %d): %d %d", root, c, x_abs, y_abs);
        }
    MPI_Request r;
    x_abs = rank == 1 ? 5 : -1;
    y_abs = rank == 1 ? 6 : -1;
    MPI_Ibcast(MPI_BOTTOM, 1, abs_t, 1, dup, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    expect(x_abs == 5 && y_abs == 6, "MPI_Ibcast from MPI_BOTTOM: %d %d", x_abs, y_abs);
    /* An allgather from MPI_BOTTOM into plain ints. */
    x_abs = 10 * rank, y_abs = 10 * rank + 1;
    int *all = malloc(sizeof(int) * 2 * size);
    MPI_Allgather(MPI_BOTTOM, 1, abs_t, all, 2, MPI_INT, dup);
    for (int i = 0; i < 2 * size; i++) expect(all[i] == 10 * (i / 2) + i % 2, "MPI_Allgather from MPI_BOTTOM: [%d] = %d", i, all[i]);
    free(all);
    MPI_Type_free(&abs_t);
    MPI_Comm_free(&dup);
}

/* ---- nbmix ---- */
/* A user operation that does not commute: 2x2 integer matrix product. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    long *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

static void nbmix(void) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    for (int round = 0; round < 6; round++) {
        MPI_Request reqs[5];
        long in = rank + round, sum = -1;
        int bc[4] = {-1, -1, -1, -1}, root = round % size;
        if (rank == root) for (int i = 0; i < 4; i++) bc[i] = 100 * round + i;
        int ring_out = 1000 * round + rank, ring_in = -1;
        MPI_Irecv(&ring_in, 1, MPI_INT, (rank + size - 1) % size, round, dup, &reqs[0]);
        MPI_Iallreduce(&in, &sum, 1, MPI_LONG, MPI_SUM, dup, &reqs[1]);
        MPI_Ibcast(bc, 4, MPI_INT, root, dup, &reqs[2]);
        MPI_Ibarrier(dup, &reqs[3]);
        /* A blocking collective on the same communicator, the others in flight. */
        long bmax = rank * round, bl = -1;
        MPI_Allreduce(&bmax, &bl, 1, MPI_LONG, MPI_MAX, dup);
        expect(bl == (long)(size - 1) * round, "round %d: a blocking MPI_Allreduce with nonblocking ones in flight: %ld", round, bl);
        MPI_Isend(&ring_out, 1, MPI_INT, (rank + 1) % size, round, dup, &reqs[4]);
        /* Out of order: Waitany until the broadcast is in, then Testsome. */
        int left = 5, index, got_bcast = 0;
        while (!got_bcast) {
            MPI_Waitany(5, reqs, &index, MPI_STATUS_IGNORE);
            expect(index != MPI_UNDEFINED, "round %d: MPI_Waitany found nothing active", round);
            if (index == MPI_UNDEFINED) break;
            left--;
            if (index == 2) got_bcast = 1;
        }
        double until = now_us() + 20e6;
        while (left > 0 && now_us() < until) {
            int outcount = 0, indices[5];
            MPI_Status st5[5];
            MPI_Testsome(5, reqs, &outcount, indices, st5);
            if (outcount == MPI_UNDEFINED) break;
            left -= outcount;
        }
        expect(left == 0, "round %d: %d requests never completed by MPI_Testsome in 20 s", round, left);
        long want = (long)size * round + (long)size * (size - 1) / 2;
        expect(sum == want, "round %d: MPI_Iallreduce %ld, want %ld", round, sum, want);
        for (int i = 0; i < 4; i++) expect(bc[i] == 100 * round + i, "round %d: MPI_Ibcast [%d] = %d", round, i, bc[i]);
        expect(ring_in == 1000 * round + (rank + size - 1) % size, "round %d: the ring's message %d", round, ring_in);
    }
    /* MAXLOC and a user-defined operation that does not commute. */
    struct {
        double v;
        int i;
    } loc = {(double)((rank * 5) % size), rank}, best = {-1, -1};
    MPI_Allreduce(&loc, &best, 1, MPI_DOUBLE_INT, MPI_MAXLOC, dup);
    int arg = -1;
    double max = -1;
    for (int r = 0; r < size; r++)
        if ((double)((r * 5) % size) > max) max = (r * 5) % size, arg = r;
    expect(best.v == max && best.i == arg, "MPI_MAXLOC: %g at %d, want %g at %d", best.v, best.i, max, arg);
    MPI_Op op;
    MPI_Op_create(matmul, 0, &op);
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_LONG, &mat);
    MPI_Type_commit(&mat);
    long m[4] = {1, rank + 1, 0, 1}, prod[4] = {0}; /* upper triangular: the product's corner is a sum */
    long m2[4] = {rank + 1, 1, 1, 0}, prod2[4] = {0};
    MPI_Allreduce(m2, prod2, 1, mat, op, dup);
    long want2[4] = {1, 0, 0, 1};
    for (int r = 0; r < size; r++) {
        long a[4] = {r + 1, 1, 1, 0}, c[4] = {want2[0] * a[0] + want2[1] * a[2], want2[0] * a[1] + want2[1] * a[3], want2[2] * a[0] + want2[3] * a[2],
                                               want2[2] * a[1] + want2[3] * a[3]};
        memcpy(want2, c, sizeof c);
    }
    expect(!memcmp(prod2, want2, sizeof want2), "a non-commutative MPI_Allreduce: %ld %ld %ld %ld, want %ld %ld %ld %ld", prod2[0], prod2[1], prod2[2],
           prod2[3], want2[0], want2[1], want2[2], want2[3]);
    MPI_Reduce(m, prod, 1, mat, op, size - 1, dup);
    if (rank == size - 1) expect(prod[1] == (long)size * (size + 1) / 2, "a user-defined MPI_Reduce: %ld", prod[1]);
    MPI_Op_free(&op);
    MPI_Type_free(&mat);
    MPI_Comm_free(&dup);
}

/* ---- threads ---- */
typedef struct {
    MPI_Comm comm;
    int id;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int r = 0; r < 60; r++) {
        long in = 1000L * w->id + r + rank, out = -1, b = -1;
        MPI_Allreduce(&in, &out, 1, MPI_LONG, MPI_SUM, w->comm);
        expect(out == size * (1000L * w->id + r) + (long)size * (size - 1) / 2, "thread %d round %d: MPI_Allreduce %ld", w->id, r, out);
        MPI_Request req[2];
        MPI_Iallreduce(&in, &b, 1, MPI_LONG, MPI_MAX, w->comm, &req[0]);
        MPI_Ibarrier(w->comm, &req[1]);
        MPI_Status st2[2];
        MPI_Waitall(2, req, st2);
        expect(b == 1000L * w->id + r + size - 1, "thread %d round %d: MPI_Iallreduce %ld", w->id, r, b);
        int data = rank == r % size ? r * 3 + w->id : -1;
        MPI_Bcast(&data, 1, MPI_INT, r % size, w->comm);
        expect(data == r * 3 + w->id, "thread %d round %d: MPI_Bcast %d", w->id, r, data);
        MPI_Barrier(w->comm);
    }
    return NULL;
}

static void threads(void) {
    worker w[2] = {{MPI_COMM_WORLD, 0}, {MPI_COMM_NULL, 1}};
    MPI_Comm_dup(MPI_COMM_WORLD, &w[1].comm);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, work, &w[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    MPI_Comm_free(&w[1].comm);
}

/* Runs `name`; false if there is no such mode (in this MPI). */
static int run_mode(const char *name) {
    if (!strcmp(name, "errhandler")) errhandler();
    else if (!strcmp(name, "negroot")) negroot();
#ifdef PERSISTENT
    else if (!strcmp(name, "ptag")) ptag();
    else if (!strcmp(name, "typefree")) typefree();
#endif
    else if (!strcmp(name, "inter")) inter();
    else if (!strcmp(name, "nbmismatch")) nbmismatch();
    else if (!strcmp(name, "many")) many();
    else if (!strcmp(name, "self")) self();
    else if (!strcmp(name, "types")) types();
    else if (!strcmp(name, "bottom")) bottom();
    else if (!strcmp(name, "nbmix")) nbmix();
    else if (!strcmp(name, "threads")) threads();
    else return 0;
    return 1;
}

int main(int argc, char **argv) {
    int threaded = 0;
    for (int i = 1; i < argc; i++) threaded |= !strcmp(argv[i], "threads");
    if (threaded) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "review_colls: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    setvbuf(stdout, NULL, _IOLBF, 1 << 14);
    long any_wrong = 0;
    for (int i = 1; i < argc || i == 1; i++) {
        mode = i < argc ? argv[i] : "";
        checks = wrong = 0;
        if (!run_mode(mode)) {
            fprintf(stderr, "review_colls: unknown mode '%s' (or no persistent collectives in this MPI)\n", mode);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        printf("review: rank %d: %s: %ld checks, %ld wrong\n", rank, mode, checks, wrong);
        fflush(stdout);
        any_wrong += wrong;
    }
    MPI_Finalize();
    return any_wrong != 0;
}
