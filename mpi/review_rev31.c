/* review_rev31.c: review rev31's edges of the interposer's wait and test
 * forms (session 14: MPI_Wait and MPI_Waitall sleep in mcd between turns
 * of MPI's own progress). Run by tests/tests/review_rev31.rs, 4 ranks.
 *
 *   progress  a rank waits for a nonblocking collective whose peer cannot
 *             enter it until this rank's MPI makes progress on a receive
 *             it posted (a large send, completed by the receiver's
 *             progress): legal MPI, which must not hang. By MPI_Wait on
 *             the collective alone, by MPI_Waitall with the receive after
 *             it, by an MPI_Test loop; an ibarrier, an ireduce to the
 *             waiting rank (gather-first), an ibcast from it. (After a
 *             blocking allreduce: mcd's collectives are set up.)
 *   firstnb   the same, the program's first collective on
 *             MPI_COMM_WORLD being the nonblocking one (a nonblocking
 *             start is local in MPI: it must not wait for other ranks).
 *   late      rank 0 calls its first collective (a broadcast
 *             from rank 0 on MPI_COMM_WORLD, as after rank 0 read its
 *             input) REVIEW_LATE_MS after the others (MPI: the others wait
 *             for it, however long).
 *   firstnbdup, latedup: as firstnb and late on a duplicate of
 *             MPI_COMM_WORLD (made before, as every mode's).
 *
 * Prints "review: rank R: MODE: N checks, W wrong". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static int rank, size;
static long checks, wrong;
static const char *mode;

static void expect(int ok, const char *what, int round) {
    checks++;
    if (!ok) {
        wrong++;
        printf("review: rank %d: %s: WRONG: %s (round %d)\n", rank, mode, what, round);
        fflush(stdout);
    }
}

/* 8 MiB: far beyond any eager limit (a rendezvous: the send completes only
 * once the receiver's MPI has progressed it). */
#define BIG (8 << 20)

static void progress(int warm, MPI_Comm comm) {
    if (warm) {
        long one = 1, all = 0;
        MPI_Allreduce(&one, &all, 1, MPI_LONG, MPI_SUM, comm);
        expect(all == size, "the warm-up allreduce", -1);
    }
    char *big = malloc(BIG);
    int pair = rank ^ 1, waiter = !(rank & 1); /* even ranks wait, odd ranks send */
    for (int round = 0; round < 9; round++) {
        int kind = round % 3, form = round / 3; /* ibarrier, ireduce, ibcast; wait, waitall, test loop */
        MPI_Request coll, recv = MPI_REQUEST_NULL;
        long x = rank + 1, sum = -1, data = waiter ? 1000 + round : -1;
        if (waiter) {
            memset(big, 0, BIG);
            MPI_Irecv(big, BIG, MPI_CHAR, pair, round, comm, &recv);
        } else {
            memset(big, round + 1, BIG);
            MPI_Send(big, BIG, MPI_CHAR, pair, round, comm); /* needs the waiter's progress */
        }
        /* Every rank's collective: rooted at rank 0 (a waiter). */
        if (kind == 0) MPI_Ibarrier(comm, &coll);
        else if (kind == 1) MPI_Ireduce(&x, &sum, 1, MPI_LONG, MPI_SUM, 0, comm, &coll);
        else {
            if (rank == 0) data = 4242 + round;
            MPI_Ibcast(&data, 1, MPI_LONG, 0, comm, &coll);
        }
        if (waiter) {
            if (form == 0) {
                MPI_Wait(&coll, MPI_STATUS_IGNORE); /* the peer sends, then starts it: our MPI must progress meanwhile */
                MPI_Wait(&recv, MPI_STATUS_IGNORE);
            } else if (form == 1) {
                MPI_Request both[2] = {coll, recv};
                MPI_Waitall(2, both, MPI_STATUSES_IGNORE);
            } else {
                int flag = 0;
                while (!flag) MPI_Test(&coll, &flag, MPI_STATUS_IGNORE);
                MPI_Wait(&recv, MPI_STATUS_IGNORE);
            }
            expect(big[0] == round + 1 && big[BIG - 1] == round + 1, "the large message arrived", round);
        } else {
            MPI_Wait(&coll, MPI_STATUS_IGNORE);
        }
        if (kind == 1 && rank == 0) expect(sum == (long)size * (size + 1) / 2, "the reduce's sum at its root", round);
        if (kind == 2) expect(data == 4242 + round, "the broadcast's data", round);
    }
    free(big);
}

static void late(MPI_Comm comm) {
    const char *ms = getenv("REVIEW_LATE_MS");
    if (rank == 0) sleep_ms(ms ? atol(ms) : 3000);
    long x = rank + 1, sum = 0;
    MPI_Bcast(&x, 1, MPI_LONG, 0, comm);
    expect(x == 1, "the broadcast with a late rank", 0);
    x = rank + 1;
    MPI_Allreduce(&x, &sum, 1, MPI_LONG, MPI_SUM, comm);
    expect(sum == (long)size * (size + 1) / 2, "the allreduce with a late rank", 0);
    /* And once set up, a barrier as late. */
    if (rank == 0) sleep_ms(ms ? atol(ms) : 3000);
    MPI_Barrier(comm);
    expect(1, "the barrier with a late rank", 1);
}

int main(int argc, char **argv) {
    mode = argc > 1 ? argv[1] : "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    setvbuf(stdout, NULL, _IOLBF, 1 << 14);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    if (!strcmp(mode, "progress")) progress(1, MPI_COMM_WORLD);
    else if (!strcmp(mode, "firstnb")) progress(0, MPI_COMM_WORLD);
    else if (!strcmp(mode, "firstnbdup")) progress(0, dup);
    else if (!strcmp(mode, "late")) late(MPI_COMM_WORLD);
    else if (!strcmp(mode, "latedup")) late(dup);
    else {
        fprintf(stderr, "review_rev31: unknown mode '%s'\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("review: rank %d: %s: %ld checks, %ld wrong\n", rank, mode, checks, wrong);
    fflush(stdout);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return wrong != 0;
}
