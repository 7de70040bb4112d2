/* cg_check: an ordinary MPI program (no mcd header) shaped like an
 * iterative solver, for the collectives interposer: conjugate gradients on a
 * distributed symmetric positive definite system, whose every iteration
 * takes two dot products (MPI_Allreduce of one double), a residual norm's
 * maximum (MPI_Allreduce, MPI_MAX, MPI_IN_PLACE), an integer count
 * (MPI_Allreduce of int64), and rank 0's "go on" decision (MPI_Bcast); and,
 * around it, parameters broadcast from the last rank, a vector broadcast, a
 * checksum reduced to rank 1 (MPI_Reduce, MPI_IN_PLACE at the root), bitwise
 * operations on unsigned ints and a float product.
 *
 *   cg_check [N_PER_RANK] [DIGITS[,DIGITS]...]
 *
 * Rank 0 prints what it computed, doubles with DIGITS significant digits
 * (default 10): the same with and without the interposer (whose sums
 * associate differently from MPI's, in the last bits), and, with DIGITS 17,
 * bitwise the same in every run with it. With several DIGITS, the whole
 * report once per DIGITS, each after the first following a line
 * "cg_check: again with DIGITS digits" (one run, several precisions). It
 * exits 0, or 1 if the solver did not converge. */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* y = A x for this rank's rows of the block-diagonal matrix whose blocks are
 * tridiagonal (4 on the diagonal, -1 beside it): SPD, well conditioned. */
static void matvec(int n, const double *x, double *y) {
    for (int i = 0; i < n; i++) {
        double v = 4.0 * x[i];
        if (i > 0) v -= x[i - 1];
        if (i + 1 < n) v -= x[i + 1];
        y[i] = v;
    }
}

static double dot(int n, const double *a, const double *b) {
    double local = 0.0, global = 0.0;
    for (int i = 0; i < n; i++) local += a[i] * b[i];
    MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return global;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *digits_list = argc > 2 ? argv[2] : "10";

    /* Parameters from the last rank. */
    int params[2] = {argc > 1 ? atoi(argv[1]) : 50, 200}; /* rows per rank, iteration limit */
    double tolerance = 1e-10;
    if (rank != size - 1) params[0] = params[1] = -1, tolerance = 0.0;
    MPI_Bcast(params, 2, MPI_INT, size - 1, MPI_COMM_WORLD);
    MPI_Bcast(&tolerance, 1, MPI_DOUBLE, size - 1, MPI_COMM_WORLD);
    int n = params[0], limit = params[1];

    /* The right-hand side: rank 0's pattern, broadcast, scaled per rank. */
    double *pattern = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) pattern[i] = rank == 0 ? 1.0 + (i % 7) * 0.25 + i * 1e-3 : 0.0;
    MPI_Bcast(pattern, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double *b = malloc(sizeof(double) * n), *x = calloc(n, sizeof(double));
    double *r = malloc(sizeof(double) * n), *p = malloc(sizeof(double) * n), *ap = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) b[i] = pattern[i] * (1.0 + rank * 0.1);
    for (int i = 0; i < n; i++) r[i] = p[i] = b[i];

    double rr = dot(n, r, r), norm_b = rr;
    int iterations = 0;
    int64_t work = 0;
    /* Rank 0's report is printed at the end (once per DIGITS): the
     * residuals of every fifth iteration are kept for it. */
    double *said_rr = malloc(sizeof(double) * (limit / 5 + 1)), *said_max = malloc(sizeof(double) * (limit / 5 + 1));
    int said = 0;
    for (;;) {
        matvec(n, p, ap);
        double alpha = rr / dot(n, p, ap);
        double local_max = 0.0;
        for (int i = 0; i < n; i++) {
            x[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
            double a = r[i] < 0 ? -r[i] : r[i];
            if (a > local_max) local_max = a;
        }
        MPI_Allreduce(MPI_IN_PLACE, &local_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double rr_new = dot(n, r, r);
        int64_t rows = n;
        MPI_Allreduce(MPI_IN_PLACE, &rows, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        work += rows;
        iterations++;
        /* Rank 0 decides for all (with MPI's reductions, ranks may differ in
         * the last bits; with mcd's they never do). */
        int go_on = rank == 0 ? (rr_new > tolerance * tolerance * norm_b && iterations < limit) : -1;
        MPI_Bcast(&go_on, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank == 0 && iterations % 5 == 0) said_rr[said] = rr_new, said_max[said++] = local_max;
        double beta = rr_new / rr;
        rr = rr_new;
        for (int i = 0; i < n; i++) p[i] = r[i] + beta * p[i];
        if (!go_on) break;
    }

    /* The solution's checksum, reduced to rank 1 (in place there). */
    double sums[2] = {0.0, 0.0};
    for (int i = 0; i < n; i++) sums[0] += x[i], sums[1] += x[i] * x[i];
    int root = size > 1 ? 1 : 0;
    if (rank == root) MPI_Reduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
    else MPI_Reduce(sums, NULL, 2, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
    MPI_Bcast(sums, 2, MPI_DOUBLE, root, MPI_COMM_WORLD);

    /* Integers: exact under any order. */
    unsigned bits[3] = {1u << (rank % 31), ~(1u << (rank % 31)), 0x9E3779B9u * (unsigned)(rank + 1)}, ors[3], ands[3], xors[3];
    MPI_Allreduce(bits, ors, 3, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD);
    MPI_Allreduce(bits, ands, 3, MPI_UNSIGNED, MPI_BAND, MPI_COMM_WORLD);
    MPI_Allreduce(bits, xors, 3, MPI_UNSIGNED, MPI_BXOR, MPI_COMM_WORLD);
    long long extremes[2] = {-(long long)rank * 1000003LL, (long long)rank * rank}, lo[2], hi[2];
    MPI_Allreduce(extremes, lo, 2, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(extremes, hi, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    float factor = 1.0f + 0.5f * (float)(rank % 2), product = 0.0f;
    MPI_Allreduce(&factor, &product, 1, MPI_FLOAT, MPI_PROD, MPI_COMM_WORLD);
    /* A user type: served by mcd too (packed), and still right. */
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    int two[2] = {rank, 2 * rank};
    MPI_Bcast(two, 1, pair, 0, MPI_COMM_WORLD);
    MPI_Type_free(&pair);

    int converged = rr <= tolerance * tolerance * norm_b;
    for (const char *d = digits_list; rank == 0 && *d;) {
        int digits = atoi(d);
        if (d != digits_list) printf("cg_check: again with %d digits\n", digits);
        printf("cg_check: %d ranks, %d rows each\n", size, n);
        for (int i = 0; i < said; i++) printf("iteration %d: residual^2 %.*e, max %.*e\n", 5 * (i + 1), digits - 1, said_rr[i], digits - 1, said_max[i]);
        printf("converged %s after %d iterations, %" PRId64 " rows of work\n", converged ? "yes" : "no", iterations, work);
        printf("checksum %.*e, %.*e\n", digits - 1, sums[0], digits - 1, sums[1]);
        printf("or %08x %08x %08x, and %08x %08x %08x, xor %08x %08x %08x\n", ors[0], ors[1], ors[2], ands[0], ands[1], ands[2], xors[0], xors[1], xors[2]);
        printf("min %lld %lld, max %lld %lld, product %.*e, pair %d %d\n", lo[0], lo[1], hi[0], hi[1], digits - 1, (double)product, two[0], two[1]);
        while (*d && *d != ',') d++;
        if (*d == ',') d++;
    }
    free(said_rr), free(said_max);
    free(pattern), free(b), free(x), free(r), free(p), free(ap);
    MPI_Finalize();
    return converged ? 0 : 1;
}
