/* barrier.c — a C program using mcd's barrier across a cluster.
 *
 *   barrier [COUNT] [CYCLES]
 *
 * Rank, size, interfaces and job come from the environment (see
 * mcd_barrier.h). Every rank runs COUNT split-phase and COUNT blocking
 * barriers between mcd_init_env and mcd_finalize, CYCLES times (default 1:
 * successive jobs in one process must never mix), and checks, through a shared clock, that no rank left barrier k
 * before every rank had entered it: each rank writes its entry and exit
 * times (CLOCK_MONOTONIC, the same on every namespace of one machine) to
 * MCD_EXAMPLE_TIMES/rank<R>, when that variable names a directory. With
 * MCD_EXAMPLE_GAP_MS=G every rank "computes" (sleeps) G ms after each
 * barrier, and rank k mod S another G ms before barrier k: gaps and
 * imbalance longer than MCD_BARRIER_TIMEOUT, which a live job must survive.
 * Prints "rank R of S: COUNT barriers (ALGORITHM), sent X, received Y; other
 * runs: F foreign, J superseded, W sessions forgotten, H stale hellos; dropped: D frames (T bad
 * tag, P replayed, M mismatched), O messages overflowed; resends C, answers A
 * (Q suppressed)": every counter of mcd_stats (an earlier run's frames,
 * replayed under the same secret, are dropped as another instance's). */
#include <mcd_barrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "barrier: %s: %s (%s)\n", what, mcd_strerror(rc), mcd_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 100;
    int cycles = argc > 2 ? atoi(argv[2]) : 1;
    const char *gap_env = getenv("MCD_EXAMPLE_GAP_MS");
    long gap = gap_env ? atol(gap_env) : 0;
    FILE *times = NULL;
    int k_total = 0, rc;
    for (int cycle = 0; cycle < cycles; cycle++) {
        mcd_job *job = NULL;
        if ((rc = mcd_init_env(&job)) != MCD_OK) return fail("mcd_init_env", rc);
        int rank = mcd_rank(job), size = mcd_size(job);
        const char *dir = getenv("MCD_EXAMPLE_TIMES");
        if (dir && !times) {
            char path[4096];
            snprintf(path, sizeof path, "%s/rank%d", dir, rank);
            times = fopen(path, "w");
            if (!times) { perror(path); return 1; }
        }
        for (int k = 0; k < 2 * count; k++, k_total++) {
            if (gap > 0 && k % size == rank) sleep_ms(gap); /* the slow rank of this barrier */
            double entered = now_us();
            if (k % 2 == 0) {
                /* split phase: enter, then poll */
                if ((rc = mcd_barrier_enter(job)) != MCD_OK) return fail("mcd_barrier_enter", rc);
                int done = 0;
                while (!done)
                    if ((rc = mcd_barrier_test(job, &done)) != MCD_OK) return fail("mcd_barrier_test", rc);
            } else if ((rc = mcd_barrier(job)) != MCD_OK) {
                return fail("mcd_barrier", rc);
            }
            double left = now_us();
            if (times) fprintf(times, "%d %.3f %.3f\n", k_total, entered, left);
            if (gap > 0) sleep_ms(gap); /* everyone computes */
        }
        mcd_stats stats;
        if ((rc = mcd_get_stats(job, &stats)) != MCD_OK) return fail("mcd_get_stats", rc);
        printf("rank %d of %d: %llu barriers (%s), sent %llu, received %llu; other runs: %llu foreign, %llu superseded, %llu sessions forgotten, %llu stale hellos; "
               "dropped: %llu frames (%llu bad tag, %llu replayed, %llu mismatched), %llu messages overflowed; resends %llu, answers %llu (%llu suppressed)\n",
               rank, size, (unsigned long long)stats.barriers, mcd_algorithm(job), (unsigned long long)stats.messages_sent,
               (unsigned long long)stats.frames_received, (unsigned long long)stats.messages_foreign, (unsigned long long)stats.joins_superseded,
               (unsigned long long)stats.sessions_forgotten, (unsigned long long)stats.hellos_stale, (unsigned long long)stats.frames_dropped, (unsigned long long)stats.frames_bad_tag,
               (unsigned long long)stats.frames_replayed, (unsigned long long)stats.frames_auth_mismatch,
               (unsigned long long)stats.messages_overflow, (unsigned long long)stats.resends, (unsigned long long)stats.answers,
               (unsigned long long)stats.answers_suppressed);
        fflush(stdout);
        /* Collective: returns once no peer can need this rank any more. */
        if ((rc = mcd_finalize(job)) != MCD_OK) return fail("mcd_finalize", rc);
    }
    if (times) fclose(times);
    return 0;
}
