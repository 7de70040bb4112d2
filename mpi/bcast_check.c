/* bcast_check: an ordinary MPI program (no mcd header) that attacks the
 * interposer's release-first MPI_Bcast (issue 16): broadcasts from changing
 * roots back to back (the same root twice in a row too), MPI_IN_PLACE
 * allreduces and barriers between them, a broadcast over several frames
 * from the last rank, and, every fourth round, the rank after the root
 * "computing" (sleeping) GAP_MS right after the broadcast, while the root
 * waits for its entry (perhaps lost): the interposer's progress agent must
 * answer for it.
 *
 *   bcast_check [ROUNDS] [GAP_MS]
 *
 * Every rank checks every broadcast's data and prints
 * "bcast_check: rank R: N wrong" on its own (no collective of the checked
 * kind decides), then exits 0, or 1 if anything was wrong. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void compute_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Element i of round k's data from root r. */
static double value(int r, int k, int i) {
    return r * 1e6 + k * 1e3 + i + 0.25;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    long gap_ms = argc > 2 ? atol(argv[2]) : 0;
    long wrong = 0;

    for (int k = 0; k < rounds; k++) {
        /* The same root twice in a row every other round, else the next one. */
        int root = (k / 2 + (k % 2) * (k % 4 == 1)) % size;
        double data[5];
        for (int i = 0; i < 5; i++) data[i] = rank == root ? value(root, k, i) : -1.0;
        MPI_Bcast(data, 5, MPI_DOUBLE, root, MPI_COMM_WORLD);
        for (int i = 0; i < 5; i++) wrong += data[i] != value(root, k, i);
        if (gap_ms > 0 && k % 4 == 0 && rank == (root + 1) % size) compute_ms(gap_ms);
        if (k % 3 == 0) {
            long sum = rank + k;
            MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            wrong += sum != (long)size * (size - 1) / 2 + (long)size * k;
        }
        if (k % 5 == 0) MPI_Barrier(MPI_COMM_WORLD);
    }
    /* Over several frames, from the last rank. */
    int n = 1500;
    int *big = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) big[i] = rank == size - 1 ? i * 7 + 3 : -1;
    MPI_Bcast(big, n, MPI_INT, size - 1, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) wrong += big[i] != i * 7 + 3;
    free(big);

    printf("bcast_check: rank %d: %ld wrong\n", rank, wrong);
    fflush(stdout);
    MPI_Finalize();
    return wrong != 0;
}
