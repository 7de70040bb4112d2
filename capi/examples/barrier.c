/* barrier.c — a C program using mcd's barrier across a cluster.
 *
 *   barrier [COUNT]
 *
 * Rank, size, interfaces and job come from the environment (see
 * mcd_barrier.h). Every rank runs COUNT split-phase and COUNT blocking
 * barriers and checks, through a shared clock, that no rank left barrier k
 * before every rank had entered it: each rank writes its entry and exit
 * times (CLOCK_MONOTONIC, the same on every namespace of one machine) to
 * MCD_EXAMPLE_TIMES/rank<R>, when that variable names a directory. Prints
 * "rank R of S: COUNT barriers (ALGORITHM), sent X, received Y". */
#include <mcd_barrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "barrier: %s: %s (%s)\n", what, mcd_strerror(rc), mcd_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 100;
    mcd_job *job = NULL;
    int rc = mcd_init_env(&job);
    if (rc != MCD_OK) return fail("mcd_init_env", rc);
    int rank = mcd_rank(job), size = mcd_size(job);

    FILE *times = NULL;
    const char *dir = getenv("MCD_EXAMPLE_TIMES");
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank%d", dir, rank);
        times = fopen(path, "w");
        if (!times) { perror(path); return 1; }
    }
    for (int k = 0; k < 2 * count; k++) {
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
        if (times) fprintf(times, "%d %.3f %.3f\n", k, entered, left);
    }
    mcd_stats stats;
    if ((rc = mcd_get_stats(job, &stats)) != MCD_OK) return fail("mcd_get_stats", rc);
    printf("rank %d of %d: %llu barriers (%s), sent %llu, received %llu\n", rank, size,
           (unsigned long long)stats.barriers, mcd_algorithm(job),
           (unsigned long long)stats.messages_sent, (unsigned long long)stats.frames_received);
    if (times) fclose(times);
    mcd_linger(job, 300000); /* answer peers whose last release was lost */
    return mcd_finalize(job) == MCD_OK ? 0 : 1;
}
