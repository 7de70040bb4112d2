/* group_stress: the C ABI's groups used directly, at their edges (issue 13).
 * Not an MPI program: it links libmcd_barrier and runs under mcd's own
 * discovery on the virtual cluster.
 *
 *   group_stress api           misuse and edge cases of mcd_group_*: a second
 *                          live group with the same members and agreed key,
 *                          join twice, a barrier on a prepared group, free
 *                          a prepared group, the same key again right after
 *                          mcd_group_free, bad rank lists, two groups of the
 *                          same members by creation order interleaved, free
 *                          with a split-phase barrier in progress. Each
 *                          check prints "group_stress: rank R: NAME rc=RC (TEXT)".
 *   group_stress kill G [mid|create]
 *                          G groups of every rank, 3 barriers each; then the
 *                          last rank leaves without finalizing (_exit), at
 *                          once or ("mid") after freeing half its groups;
 *                          the others free every group (with "create": then
 *                          create a group of the survivors only and run 5
 *                          barriers on it) and call mcd_finalize, and print
 *                          how long each took and what it said.
 *   group_stress churn N       N rounds: a group of all ranks and one of each
 *                          parity half, a barrier on each, freed; counts
 *                          /proc/self/task and /proc/self/fd after round 10
 *                          and at the end.
 *
 * Group barriers are recorded ("ID K MEMBERS ENTER LEAVE", CLOCK_MONOTONIC)
 * in ADV_TIMES/rank<R> when ADV_TIMES names a directory. */
#include <dirent.h>
#include <mcd_barrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

static FILE *times;
static int rank, size;

static void report(const char *name, int rc) {
    printf("group_stress: rank %d: %s rc=%d (%s)\n", rank, name, rc, rc == MCD_OK ? "" : mcd_last_error());
    fflush(stdout);
}

static int die(const char *what, int rc) {
    fprintf(stderr, "group_stress: rank %d: %s: %s (%s)\n", rank, what, mcd_strerror(rc), mcd_last_error());
    exit(1);
}

static void gbarrier(mcd_group *g, int id, int k) {
    double in = now_us();
    int rc = mcd_group_barrier(g);
    double out = now_us();
    if (rc != MCD_OK) die("mcd_group_barrier", rc);
    if (times) fprintf(times, "%d %d %d %.3f %.3f\n", id, k, mcd_group_size(g), in, out);
}

static void world(mcd_job *job) {
    int rc = mcd_barrier(job);
    if (rc != MCD_OK) die("mcd_barrier", rc);
}

static int *all_ranks(void) {
    int *r = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++) r[i] = i;
    return r;
}

static void run_api(mcd_job *job) {
    int *all = all_ranks(), rc;
    const uint64_t K = 0x1234;
    mcd_group *g1 = NULL, *g2 = NULL, *g3 = NULL;
    /* Two live groups, same members, same agreed key. */
    if ((rc = mcd_group_prepare(job, all, size, K, &g1)) != MCD_OK) die("prepare g1", rc);
    rc = mcd_group_prepare(job, all, size, K, &g2);
    report("same-key-twice", rc);
    if (rc == MCD_OK) mcd_group_discard(g2);
    /* A barrier on a prepared group, then join twice. */
    report("barrier-on-prepared", mcd_group_barrier(g1));
    report("join", mcd_group_join(g1));
    report("join-again", mcd_group_join(g1));
    for (int k = 0; k < 5; k++) gbarrier(g1, 1, k);
    /* Prepare without join, then free. */
    if ((rc = mcd_group_prepare(job, all, size, K + 1, &g3)) != MCD_OK) die("prepare g3", rc);
    report("free-prepared", mcd_group_free(g3));
    world(job);
    /* The same key right after mcd_group_free (the user freed it: not live). */
    report("free-g1", mcd_group_free(g1));
    mcd_group *again = NULL;
    rc = mcd_group_prepare(job, all, size, K, &again);
    report("same-key-after-free", rc);
    mcd_group_discard(again);
    world(job);
    /* Bad rank lists. */
    mcd_group *bad = NULL;
    int twice[2] = {0, 0};
    report("rank-listed-twice", mcd_group_prepare(job, twice, 2, 7, &bad));
    int other[1] = {(rank + 1) % size};
    report("not-a-member", mcd_group_prepare(job, other, 1, 7, &bad));
    int beyond[2] = {rank, size};
    report("rank-beyond-job", mcd_group_prepare(job, beyond, 2, 7, &bad));
    int negative[2] = {rank, -1};
    report("negative-rank", mcd_group_prepare(job, negative, 2, 7, &bad));
    report("empty-list", mcd_group_prepare(job, all, 0, 7, &bad));
    /* Two groups of the same members by creation order, interleaved. */
    mcd_group *a = NULL, *b = NULL;
    if ((rc = mcd_group_create(job, all, size, &a)) != MCD_OK) die("create a", rc);
    if ((rc = mcd_group_create(job, all, size, &b)) != MCD_OK) die("create b", rc);
    for (int k = 0; k < 20; k++) {
        gbarrier(a, 2, k);
        gbarrier(b, 3, k);
    }
    /* Free with a split-phase barrier in progress (entered, never tested). */
    report("enter-a", mcd_group_enter(a));
    report("free-while-entered", mcd_group_free(a));
    report("free-b", mcd_group_free(b));
    world(job);
    /* A singleton group. */
    mcd_group *one = NULL;
    int me[1] = {rank};
    report("singleton-create", mcd_group_create(job, me, 1, &one));
    for (int k = 0; k < 3; k++) gbarrier(one, 100 + rank, k);
    report("singleton-free", mcd_group_free(one));
    free(all);
}

static void run_kill(mcd_job *job, int groups, int mid, int create_after) {
    int *all = all_ranks(), rc;
    mcd_group **g = malloc(sizeof(mcd_group *) * groups);
    for (int i = 0; i < groups; i++)
        if ((rc = mcd_group_create(job, all, size, &g[i])) != MCD_OK) die("mcd_group_create", rc);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < groups; i++) gbarrier(g[i], i, k);
    world(job);
    if (rank == size - 1) {
        if (mid)
            for (int i = 0; i < groups / 2; i++) mcd_group_free(g[i]);
        if (times) fclose(times);
        printf("group_stress: rank %d: leaving without mcd_finalize\n", rank);
        fflush(stdout);
        _exit(0);
    }
    double t = now_us(), worst = 0;
    for (int i = 0; i < groups; i++) {
        double f = now_us();
        rc = mcd_group_free(g[i]);
        f = now_us() - f;
        if (f > worst) worst = f;
        if (rc != MCD_OK) report("free", rc);
    }
    double frees = now_us() - t;
    if (create_after) {
        /* A new group of the survivors only: nothing of the dead rank's. */
        int *rest = all_ranks();
        mcd_group *s = NULL;
        double c = now_us();
        rc = mcd_group_create(job, rest, size - 1, &s);
        printf("group_stress: rank %d: survivors-create rc=%d in %.1f ms (%s)\n", rank, rc, (now_us() - c) / 1e3, rc == MCD_OK ? "" : mcd_last_error());
        if (rc == MCD_OK) {
            for (int k = 0; k < 5; k++) gbarrier(s, 500, k);
            c = now_us();
            rc = mcd_group_free(s);
            printf("group_stress: rank %d: survivors-free rc=%d in %.1f ms (%s)\n", rank, rc, (now_us() - c) / 1e3, rc == MCD_OK ? "" : mcd_last_error());
        }
        fflush(stdout);
        free(rest);
    }
    t = now_us();
    rc = mcd_finalize(job);
    double fin = now_us() - t;
    printf("group_stress: rank %d: %d frees took %.1f ms (longest %.1f ms); mcd_finalize rc=%d in %.1f ms: %s\n", rank, groups, frees / 1e3,
           worst / 1e3, rc, fin / 1e3, rc == MCD_OK ? "" : mcd_last_error());
    fflush(stdout);
    free(all);
    free(g);
}

static void run_churn(mcd_job *job, int rounds) {
    int *all = all_ranks(), rc;
    int *half = malloc(sizeof(int) * size), nh = 0;
    for (int r = rank % 2; r < size; r += 2) half[nh++] = r;
    int tasks0 = 0, fds0 = 0;
    double worst = 0;
    for (int k = 0; k < rounds; k++) {
        if (k == 10) {
            tasks0 = count_dir("/proc/self/task");
            fds0 = count_dir("/proc/self/fd");
        }
        mcd_group *a, *h;
        if ((rc = mcd_group_create(job, all, size, &a)) != MCD_OK) die("create all", rc);
        if ((rc = mcd_group_create(job, half, nh, &h)) != MCD_OK) die("create half", rc);
        gbarrier(a, 1000 + k, 0);
        gbarrier(h, 2000 + 10 * k + rank % 2, 0);
        double t = now_us();
        if ((rc = mcd_group_free(rank % 2 ? a : h)) != MCD_OK) report("free", rc);
        if ((rc = mcd_group_free(rank % 2 ? h : a)) != MCD_OK) report("free", rc);
        t = now_us() - t;
        if (t > worst) worst = t;
    }
    world(job);
    mcd_group *a;
    if ((rc = mcd_group_create(job, all, size, &a)) != MCD_OK) die("create last", rc);
    gbarrier(a, 9999, 0);
    mcd_group_free(a);
    printf("group_stress: rank %d: tasks %d -> %d, fds %d -> %d after %d rounds; longest pair of frees %.1f ms\n", rank, tasks0,
           count_dir("/proc/self/task"), fds0, count_dir("/proc/self/fd"), rounds, worst / 1e3);
    fflush(stdout);
    free(all);
    free(half);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    mcd_job *job = NULL;
    int rc;
    if ((rc = mcd_init_env(&job)) != MCD_OK) die("mcd_init_env", rc);
    rank = mcd_rank(job);
    size = mcd_size(job);
    const char *dir = getenv("ADV_TIMES");
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank%d", dir, rank);
        if (!(times = fopen(path, "w"))) {
            perror(path);
            return 1;
        }
    }
    if (!strcmp(mode, "api")) {
        run_api(job);
    } else if (!strcmp(mode, "kill")) {
        run_kill(job, argc > 2 ? atoi(argv[2]) : 4, argc > 3 && !strcmp(argv[3], "mid"), argc > 3 && !strcmp(argv[3], "create"));
        if (times) fclose(times);
        return 0;
    } else if (!strcmp(mode, "churn")) {
        run_churn(job, argc > 2 ? atoi(argv[2]) : 100);
    } else {
        fprintf(stderr, "usage: group_stress api | kill G [mid] | churn N\n");
        return 2;
    }
    if (times) fclose(times);
    double t = now_us();
    rc = mcd_finalize(job);
    printf("group_stress: rank %d: mcd_finalize rc=%d in %.1f ms%s%s\n", rank, rc, (now_us() - t) / 1e3, rc == MCD_OK ? "" : ": ",
           rc == MCD_OK ? "" : mcd_last_error());
    return rc == MCD_OK ? 0 : 1;
}
