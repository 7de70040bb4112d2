/* comm_check: an ordinary MPI program (no mcd header) that runs barriers on
 * many communicators, interleaved, and checks MPI_Barrier's one promise on
 * each, so that the interposer can be tested on communicators.
 *
 *   comm_check [ROUNDS] [GAP_MS]
 *
 * Communicators ("slots"): MPI_COMM_WORLD; a duplicate of it; MPI_Comm_split
 * by parity (odd and even colours); MPI_Comm_split into the last rank alone
 * (a singleton) and the others; MPI_Comm_create over the world's ranks in
 * reverse order; MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Every round runs
 * one barrier on each, in turn, with small random delays; every 5th round
 * the duplicate and the parity halves are freed and made again. Each rank
 * records when it entered and left each barrier (CLOCK_MONOTONIC: all ranks
 * of the virtual cluster share one machine's clock) and which communicator
 * it was in (by the world rank of its rank 0); rank 0 gathers them and
 * checks that no member left barrier k of a communicator before every member
 * had entered it. With GAP_MS > 0, after the parity barrier of every 5th
 * round every rank "computes" (sleeps) GAP_MS and one rank, in turn, GAP_MS
 * more, before the next barrier, on another communicator. Besides, an
 * inter-communicator between the parity halves runs 3 barriers (which the
 * interposer must leave to PMPI_Barrier).
 * Rank 0 prints "comm_check: OK ..." and exits 0, or names the violation
 * and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test_util.h"

enum { WORLD, DUP, PARITY, SINGLE, REVERSE, SHARED, SLOTS };
static const char *names[SLOTS] = {"world", "dup", "parity", "singleton-split", "reverse-create", "split-type"};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    long gap_ms = argc > 2 ? atol(argv[2]) : 0;

    MPI_Comm comm[SLOTS];
    comm[WORLD] = MPI_COMM_WORLD;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm[DUP]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comm[PARITY]);
    MPI_Comm_split(MPI_COMM_WORLD, rank == size - 1, rank, &comm[SINGLE]);
    MPI_Group world_group, reversed;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int *order = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++) order[i] = size - 1 - i;
    MPI_Group_incl(world_group, size, order, &reversed);
    MPI_Comm_create(MPI_COMM_WORLD, reversed, &comm[REVERSE]);
    MPI_Group_free(&reversed);
    MPI_Group_free(&world_group);
    free(order);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &comm[SHARED]);
    int failed = 0, reverse_rank = -1;
    MPI_Comm_rank(comm[REVERSE], &reverse_rank);
    if (reverse_rank != size - 1 - rank) {
        fprintf(stderr, "rank %d: rank %d in the reversed communicator\n", rank, reverse_rank);
        failed = 1;
    }

    /* Per rank: for each round and slot, (leader, enter, leave). */
    double *rec = malloc(sizeof(double) * 3 * SLOTS * rounds);
    srand(rank * 7919 + 1);
    for (int k = 0; k < rounds; k++) {
        if (k > 0 && k % 5 == 0) {
            /* Freed and made again: a new instance, the same members. */
            MPI_Comm_free(&comm[DUP]);
            MPI_Comm_free(&comm[PARITY]);
            MPI_Comm_dup(MPI_COMM_WORLD, &comm[DUP]);
            MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comm[PARITY]);
        }
        for (int s = 0; s < SLOTS; s++) {
            if (rand() % 4 == 0) {
                double until = now_us() + rand() % 50;
                while (now_us() < until) {
                }
            }
            double *r = &rec[3 * (k * SLOTS + s)];
            r[0] = leader(comm[s]);
            r[1] = now_us();
            MPI_Barrier(comm[s]);
            r[2] = now_us();
            if (gap_ms > 0 && s == PARITY && k % 5 == 0) {
                sleep_ms(gap_ms);
                if ((k / 5) % size == rank) sleep_ms(gap_ms);
            }
        }
    }

    /* An inter-communicator: left to PMPI_Barrier. */
    if (size >= 2) {
        MPI_Comm inter;
        MPI_Intercomm_create(comm[PARITY], 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 99, &inter);
        for (int i = 0; i < 3; i++) MPI_Barrier(inter);
        MPI_Comm_free(&inter);
    }

    double *all = rank == 0 ? malloc(sizeof(double) * 3 * SLOTS * rounds * size) : NULL;
    MPI_Gather(rec, 3 * SLOTS * rounds, MPI_DOUBLE, all, 3 * SLOTS * rounds, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int any_failed = 0;
    MPI_Reduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    int status = 0;
    if (rank == 0) {
        int violations = 0, checked = 0;
        for (int k = 0; k < rounds; k++)
            for (int s = 0; s < SLOTS; s++)
                for (int lead = 0; lead < size; lead++) {
                    double last_in = 0, first_out = 1e300;
                    int who_in = -1, who_out = -1, members = 0;
                    for (int r = 0; r < size; r++) {
                        double *x = &all[(size_t)r * 3 * SLOTS * rounds + 3 * (k * SLOTS + s)];
                        if ((int)x[0] != lead) continue;
                        members++;
                        if (x[1] > last_in) { last_in = x[1]; who_in = r; }
                        if (x[2] < first_out) { first_out = x[2]; who_out = r; }
                    }
                    if (!members) continue;
                    checked++;
                    if (first_out < last_in && violations++ < 5)
                        printf("comm_check: VIOLATION round %d on %s (led by rank %d, %d members): rank %d left at %.3f before rank %d entered at %.3f\n",
                               k, names[s], lead, members, who_out, first_out, who_in, last_in);
                }
        if (violations || any_failed) {
            printf("comm_check: FAILED (%d barrier violations, ranks %s)\n", violations, any_failed ? "wrong" : "right");
            status = 1;
        } else {
            printf("comm_check: OK %d ranks, %d rounds of %d communicators, %d barriers checked\n", size, rounds, SLOTS, checked);
        }
        fflush(stdout);
        free(all);
    }
    for (int s = 1; s < SLOTS; s++) MPI_Comm_free(&comm[s]);
    free(rec);
    MPI_Finalize();
    return status;
}
