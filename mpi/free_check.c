/* free_check: MPI_Request_free of a collective's request through the
 * interposer (issue 28, session 17), under MPI_THREAD_MULTIPLE. An
 * ordinary MPI program (no mcd header).
 *
 *   free_check [ROUNDS]
 *
 * MPI makes MPI_Request_free of a nonblocking collective's request
 * erroneous (MPI 4.0, section 6.12), and two threads using one request at
 * once too (section 11.6.2). Open MPI 4.1 and MPICH 4.0 refuse the free of
 * their own nonblocking collectives with an error on MPI_COMM_WORLD's
 * handler and leave the request as it was; the interposer does the same
 * for the collectives it serves. MPI_COMM_WORLD's handler is
 * MPI_ERRORS_RETURN here, and each refusal is checked: MPI_ERR_REQUEST,
 * the handle unchanged, the collective completing normally after.
 *
 * On a duplicate of MPI_COMM_WORLD (its state made at MPI_Comm_dup, so its
 * nonblocking collectives go through mcd):
 *  - alone: ROUNDS times an MPI_Ibarrier and an MPI_Iallreduce freed at
 *    once (refused), then completed by MPI_Waitall, the sum right; and an
 *    MPI_Ibarrier cancelled (MPI_Cancel: refused alike, MPI_ERR_REQUEST),
 *    then completed, its status not cancelled;
 *  - beside a waiting thread: every rank but one starts an MPI_Ibarrier,
 *    hands its handle to a second thread that waits on it with MPI_Wait,
 *    sees that thread inside MPI_Wait (/proc/self/task: asleep, or two
 *    clock ticks of CPU spent, after it said it calls it), frees the handle
 *    (refused), then lets the held-back rank start its own (a message on
 *    MPI_COMM_WORLD); the waiting thread's MPI_Wait completes it;
 *  - the same with a started persistent MPI_Allreduce_init where the MPI
 *    has one (a free refused while another thread waits on it; freed,
 *    inactive, once that thread has returned), ROUNDS / 4 + 1 times, the
 *    held-back rank changing;
 *  - after all that, an MPI_Iallreduce and a blocking MPI_Allreduce on the
 *    duplicate are right.
 *
 * Every rank prints "free_check: rank R: C checks, W wrong, F refused"
 * (F: the frees refused) and exits 1 if anything was wrong. */
#define _GNU_SOURCE
#include <mpi.h>
#ifdef OPEN_MPI
#include <mpi-ext.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_util.h"

static int rank, size;
static long checks, wrong, refused;

static void expect(int ok, const char *what, int round) {
    __atomic_fetch_add(&checks, 1, __ATOMIC_RELAXED);
    if (!ok && __atomic_fetch_add(&wrong, 1, __ATOMIC_RELAXED) < 20) fprintf(stderr, "free_check: rank %d: round %d: %s\n", rank, round, what);
}

/* Frees `*req` expecting the refusal: MPI_ERR_REQUEST, the handle kept. */
static void free_refused(MPI_Request *req, const char *what, int round) {
    MPI_Request before = *req;
    int rc = MPI_Request_free(req), class = -1;
    MPI_Error_class(rc, &class);
    char line[200];
    snprintf(line, sizeof line, "MPI_Request_free of %s: returned %d (class %d), not MPI_ERR_REQUEST", what, rc, class);
    expect(rc != MPI_SUCCESS && class == MPI_ERR_REQUEST, line, round);
    snprintf(line, sizeof line, "MPI_Request_free of %s changed the handle", what);
    expect(*req == before, line, round);
    if (rc != MPI_SUCCESS) refused++;
}

/* A thread waiting on one request with MPI_Wait. */
typedef struct {
    MPI_Request req;
    pid_t tid;   /* written by the thread before it waits */
    int rc;
} waiting;

static void *wait_on(void *arg) {
    waiting *w = arg;
    __atomic_store_n(&w->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    w->rc = MPI_Wait(&w->req, MPI_STATUS_IGNORE);
    return NULL;
}

/* Thread `tid`'s state letter and CPU time in clock ticks (user and
 * system), from /proc/self/task; 0 if it cannot be read. */
static char thread_state(pid_t tid, unsigned long *ticks) {
    char path[64], buf[512], state = 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')'); /* "pid (comm) S ppid ..." */
    unsigned long user = 0, sys = 0;
    if (!end || sscanf(end + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &state, &user, &sys) != 3) return 0;
    *ticks = user + sys;
    return state;
}

/* Starts thread `t` waiting on `w->req`; returns once that thread is
 * inside MPI_Wait (30 s at most): after it said it calls MPI_Wait, it
 * sleeps (in the interposer's wait for mcd) or spends two clock ticks of
 * CPU (the wait polls: its first step, which holds the request, takes
 * microseconds), and MPI_Wait is all it runs then. */
static void start_waiting(pthread_t *t, waiting *w, int round) {
    w->tid = 0;
    w->rc = -1;
    pthread_create(t, NULL, wait_on, w);
    pid_t tid;
    double until = now_us() + 30e6;
    while (!(tid = __atomic_load_n(&w->tid, __ATOMIC_ACQUIRE)) && now_us() < until) sched_yield();
    unsigned long first = 0, ticks = 0;
    int inside = 0;
    if (tid && thread_state(tid, &first))
        while (now_us() < until) {
            char state = thread_state(tid, &ticks);
            if ((inside = state == 'S' || ticks >= first + 2)) break;
            sched_yield();
        }
    expect(inside, "the waiting thread was never seen inside MPI_Wait in 30 s", round);
}

/* Every rank but `held_back` frees its request while a second thread
 * waits on it, then tells `held_back` (on MPI_COMM_WORLD) to start its
 * own: `start` starts the collective into `*req`. */
static void beside_a_waiter(int held_back, MPI_Request *req, void (*start)(MPI_Request *), const char *what, int round) {
    int token = round;
    if (rank == held_back) {
        for (int p = 0; p < size - 1; p++) MPI_Recv(&token, 1, MPI_INT, MPI_ANY_SOURCE, 41, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        start(req);
        MPI_Wait(req, MPI_STATUS_IGNORE);
        return;
    }
    start(req);
    waiting w = {.req = *req};
    pthread_t t;
    start_waiting(&t, &w, round);
    free_refused(req, what, round);
    MPI_Send(&token, 1, MPI_INT, held_back, 41, MPI_COMM_WORLD);
    pthread_join(t, NULL);
    expect(w.rc == MPI_SUCCESS, "the waiting thread's MPI_Wait failed", round);
    *req = w.req; /* MPI_REQUEST_NULL, or the persistent request, inactive */
}

static MPI_Comm twin;

static void start_ibarrier(MPI_Request *req) {
    MPI_Ibarrier(twin, req);
}

#ifdef PERSISTENT
static int p_in, p_out;
static MPI_Request persistent;

static void start_persistent(MPI_Request *req) {
    *req = persistent;
    MPI_Start(req);
}
#endif

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 8, provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "free_check: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_dup(MPI_COMM_WORLD, &twin);
    for (int r = 0; r < rounds; r++) {
        int one = 1, n = -1;
        MPI_Request reqs[2];
        MPI_Ibarrier(twin, &reqs[0]);
        free_refused(&reqs[0], "a running MPI_Ibarrier", r);
        MPI_Iallreduce(&one, &n, 1, MPI_INT, MPI_SUM, twin, &reqs[1]);
        free_refused(&reqs[1], "a running MPI_Iallreduce", r);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        expect(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL, "MPI_Waitall left a refused request", r);
        expect(n == size, "an MPI_Iallreduce whose free was refused", r);
        MPI_Request c;
        MPI_Status st;
        int class = -1, cancelled = -1;
        MPI_Ibarrier(twin, &c);
        int rc = MPI_Cancel(&c);
        MPI_Error_class(rc, &class);
        expect(rc != MPI_SUCCESS && class == MPI_ERR_REQUEST, "MPI_Cancel of a running MPI_Ibarrier was not refused", r);
        MPI_Wait(&c, &st);
        MPI_Test_cancelled(&st, &cancelled);
        expect(c == MPI_REQUEST_NULL && cancelled == 0, "an MPI_Ibarrier whose cancel was refused: not completed, or cancelled", r);
    }
    for (int r = 0; r < rounds; r++) {
        MPI_Request req;
        beside_a_waiter(size - 1 - r % size, &req, start_ibarrier, "an MPI_Ibarrier another thread waits on", r);
        expect(req == MPI_REQUEST_NULL, "the waiting thread's MPI_Wait left the MPI_Ibarrier", r);
    }
#ifdef PERSISTENT
    PERSISTENT(Allreduce)(&p_in, &p_out, 1, MPI_INT, MPI_SUM, twin, MPI_INFO_NULL, &persistent);
    for (int r = 0; r < rounds / 4 + 1; r++) {
        MPI_Request req;
        p_in = rank + r, p_out = -1;
        beside_a_waiter(r % size, &req, start_persistent, "a persistent MPI_Allreduce_init another thread waits on", r);
        expect(req == persistent, "the persistent request changed", r);
        expect(p_out == size * r + size * (size - 1) / 2, "a persistent MPI_Allreduce_init whose free was refused", r);
    }
    int rc = MPI_Request_free(&persistent);
    expect(rc == MPI_SUCCESS && persistent == MPI_REQUEST_NULL, "MPI_Request_free of an inactive persistent request", 0);
#endif
    long in = rank, sum = -1, total = -1;
    MPI_Request last;
    MPI_Iallreduce(&in, &sum, 1, MPI_LONG, MPI_SUM, twin, &last);
    MPI_Wait(&last, MPI_STATUS_IGNORE);
    MPI_Allreduce(&in, &total, 1, MPI_LONG, MPI_SUM, twin);
    expect(sum == (long)size * (size - 1) / 2 && total == sum, "collectives after the refused frees", 0);
    MPI_Comm_free(&twin);
    printf("free_check: rank %d: %ld checks, %ld wrong, %ld refused\n", rank, checks, wrong, refused);
    fflush(stdout);
    MPI_Finalize();
    return wrong != 0;
}
