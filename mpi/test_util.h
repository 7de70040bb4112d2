/* test_util.h: small helpers shared by the C test programs in mpi/ (each
 * is one executable: the helpers are static inline; include mpi.h first
 * for the MPI ones). */
#ifndef MCD_TEST_UTIL_H
#define MCD_TEST_UTIL_H

#include <dirent.h>
#include <stdlib.h>
#include <time.h>

#ifdef MPI_VERSION
/* The persistent collectives' names where the MPI has them: MPI 4.0's, or
 * Open MPI 4.1's extension (include mpi-ext.h before this header). */
#if MPI_VERSION >= 4
#define PERSISTENT(name) MPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define PERSISTENT(name) MPIX_##name##_init
#endif
#endif

/* Microseconds on CLOCK_MONOTONIC: the virtual cluster's ranks share one
 * machine's clock, so times from different ranks compare. */
static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static inline void sleep_ms(long ms) {
    struct timespec gap = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&gap, NULL);
}

/* A random pause of up to `max_us`, spinning or sleeping. */
static inline void jitter(unsigned *seed, int max_us) {
    int us = rand_r(seed) % (max_us + 1);
    if (rand_r(seed) % 2) {
        double until = now_us() + us;
        while (now_us() < until) {
        }
    } else {
        struct timespec gap = {0, us * 1000L};
        nanosleep(&gap, NULL);
    }
}

/* Entries of a directory (/proc/self/fd, /proc/self/task), or -1. */
static inline int count_dir(const char *path) {
    int n = 0;
    DIR *d = opendir(path);
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 2; /* "." and ".." (the DIR's own descriptor is closed now) */
}

#ifdef MPI_VERSION
/* The world rank of `comm`'s rank 0: names a communicator among those of
 * the same kind. */
static inline int leader(MPI_Comm comm) {
    MPI_Group group, world;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int zero = 0, w = -1;
    MPI_Group_translate_ranks(group, 1, &zero, world, &w);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return w;
}
#endif

#endif
