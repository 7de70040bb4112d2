/* groups.c — barriers over groups of a job's ranks with the C ABI.
 *
 *   groups [ROUNDS]
 *
 * After mcd_init_env, every rank creates, from the job and without another
 * discovery round: its parity half (even or odd ranks), all ranks in reverse
 * order, and a second group with exactly its half's ranks (each group is its
 * own barrier instance). Every round runs one barrier on the job and one on
 * each group, interleaved; every 5th round the halves are freed and created
 * again. Each rank writes "SLOT LEADER ROUND ENTER LEAVE" lines (LEADER: the
 * job rank of the group's rank 0; times on CLOCK_MONOTONIC, shared by every
 * namespace of one machine) to MCD_EXAMPLE_TIMES/rank<R> when that names a
 * directory. Then collectives on the groups (mcd_group_allreduce, _bcast
 * from every root, _reduce), each checked, and prints "rank R of S: N
 * group barriers on G groups; dropped: D frames (T bad tag, P replayed, M
 * mismatched), O messages overflowed; other runs: F foreign, J superseded, W
 * sessions forgotten" (the endpoint's drops, which every group shares, and
 * the job's barrier's; mcd_stats). */
#include <mcd_barrier.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "groups: %s: %s (%s)\n", what, mcd_strerror(rc), mcd_last_error());
    return 1;
}

enum { HALF, REVERSE, HALF_AGAIN, GROUPS };

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    mcd_job *job = NULL;
    int rc;
    if ((rc = mcd_init_env(&job)) != MCD_OK) return fail("mcd_init_env", rc);
    int rank = mcd_rank(job), size = mcd_size(job);
    FILE *times = NULL;
    const char *dir = getenv("MCD_EXAMPLE_TIMES");
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank%d", dir, rank);
        if (!(times = fopen(path, "w"))) { perror(path); return 1; }
    }
    int *half = malloc(sizeof(int) * size), *reverse = malloc(sizeof(int) * size), n_half = 0;
    for (int r = rank % 2; r < size; r += 2) half[n_half++] = r;
    for (int i = 0; i < size; i++) reverse[i] = size - 1 - i;
    int *lists[GROUPS] = {half, reverse, half}, sizes[GROUPS] = {n_half, size, n_half};
    mcd_group *group[GROUPS];
    for (int g = 0; g < GROUPS; g++)
        if ((rc = mcd_group_create(job, lists[g], sizes[g], &group[g])) != MCD_OK) return fail("mcd_group_create", rc);
    if (mcd_group_rank(group[REVERSE]) != size - 1 - rank || mcd_group_size(group[HALF]) != n_half) {
        fprintf(stderr, "groups: rank %d is %d of %d in the reversed group\n", rank, mcd_group_rank(group[REVERSE]), mcd_group_size(group[REVERSE]));
        return 1;
    }
    unsigned long long group_barriers = 0, created = GROUPS;
    for (int k = 0; k < rounds; k++) {
        if (k > 0 && k % 5 == 0) {
            /* Freed and created again: new instances with the same ranks. */
            if ((rc = mcd_group_free(group[HALF])) != MCD_OK) return fail("mcd_group_free", rc);
            if ((rc = mcd_group_free(group[HALF_AGAIN])) != MCD_OK) return fail("mcd_group_free", rc);
            if ((rc = mcd_group_create(job, half, n_half, &group[HALF])) != MCD_OK) return fail("mcd_group_create", rc);
            if ((rc = mcd_group_create(job, half, n_half, &group[HALF_AGAIN])) != MCD_OK) return fail("mcd_group_create", rc);
            created += 2;
        }
        for (int slot = 0; slot <= GROUPS; slot++) {
            double entered = now_us();
            if (slot == GROUPS) {
                if ((rc = mcd_barrier(job)) != MCD_OK) return fail("mcd_barrier", rc);
            } else if (k % 2) {
                if ((rc = mcd_group_barrier(group[slot])) != MCD_OK) return fail("mcd_group_barrier", rc);
            } else {
                if ((rc = mcd_group_enter(group[slot])) != MCD_OK) return fail("mcd_group_enter", rc);
                int done = 0;
                while (!done)
                    if ((rc = mcd_group_test(group[slot], &done)) != MCD_OK) return fail("mcd_group_test", rc);
            }
            double left = now_us();
            int leader = slot == GROUPS ? 0 : lists[slot][0];
            if (times) fprintf(times, "%d %d %d %.3f %.3f\n", slot, leader, k, entered, left);
        }
    }
    /* Collectives on the groups (each on an instance of the group's own,
     * made at its first collective), every root of the reversed group, and
     * the halves' two groups alternating; each result checked. */
    int wrong = 0;
    for (int k = 0; k < 2 * size; k++) {
        mcd_group *g = group[REVERSE];
        int me = mcd_group_rank(g), root = k % size;
        int64_t sum = me + k;
        if ((rc = mcd_group_allreduce(g, NULL, &sum, 1, MCD_INT64, MCD_SUM)) != MCD_OK) return fail("mcd_group_allreduce", rc);
        wrong += sum != (int64_t)size * (size - 1) / 2 + (int64_t)size * k;
        double data[3];
        for (int i = 0; i < 3; i++) data[i] = me == root ? root * 100.0 + k + i * 0.5 : -1;
        if ((rc = mcd_group_bcast(g, data, sizeof data, root)) != MCD_OK) return fail("mcd_group_bcast", rc);
        for (int i = 0; i < 3; i++) wrong += data[i] != root * 100.0 + k + i * 0.5;
        uint32_t mine = (uint32_t)(me * 7 + k), most = 0;
        if ((rc = mcd_group_reduce(g, &mine, &most, 1, MCD_UINT32, MCD_MAX, root)) != MCD_OK) return fail("mcd_group_reduce", rc);
        if (me == root) wrong += most != (uint32_t)((size - 1) * 7 + k);
        mcd_group *h = group[k % 2 ? HALF : HALF_AGAIN];
        int64_t one = 1;
        if ((rc = mcd_group_allreduce(h, NULL, &one, 1, MCD_INT64, MCD_SUM)) != MCD_OK) return fail("mcd_group_allreduce (half)", rc);
        wrong += one != n_half;
    }
    /* A root outside the group is a clear error, and breaks nothing. */
    double x = 0;
    if (mcd_group_bcast(group[REVERSE], &x, sizeof x, size) != MCD_ERR_ARGUMENT) wrong++;
    if (wrong) {
        fprintf(stderr, "groups: rank %d: %d group collectives wrong\n", rank, wrong);
        return 1;
    }
    for (int g = 0; g < GROUPS; g++) {
        mcd_stats s;
        if ((rc = mcd_group_get_stats(group[g], &s)) != MCD_OK) return fail("mcd_group_get_stats", rc);
        group_barriers += s.barriers;
        if ((rc = mcd_group_free(group[g])) != MCD_OK) return fail("mcd_group_free", rc);
    }
    mcd_stats s;
    if ((rc = mcd_get_stats(job, &s)) != MCD_OK) return fail("mcd_get_stats", rc);
    printf("rank %d of %d: %llu group barriers on %llu groups; dropped: %llu frames (%llu bad tag, %llu replayed, %llu mismatched), "
           "%llu messages overflowed; other runs: %llu foreign, %llu superseded, %llu sessions forgotten, %llu stale hellos\n",
           rank, size, group_barriers, created, (unsigned long long)s.frames_dropped, (unsigned long long)s.frames_bad_tag,
           (unsigned long long)s.frames_replayed, (unsigned long long)s.frames_auth_mismatch, (unsigned long long)s.messages_overflow,
           (unsigned long long)s.messages_foreign, (unsigned long long)s.joins_superseded, (unsigned long long)s.sessions_forgotten,
           (unsigned long long)s.hellos_stale);
    fflush(stdout);
    if (times) fclose(times);
    free(half);
    free(reverse);
    if ((rc = mcd_finalize(job)) != MCD_OK) return fail("mcd_finalize", rc);
    return 0;
}
