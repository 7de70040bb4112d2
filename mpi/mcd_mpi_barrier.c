/* mcd_mpi_barrier.c — the MPI_Barrier interposer.
 *
 * Preloaded into an unmodified MPI program (LD_PRELOAD=libmcd_mpi_barrier.so),
 * it serves MPI_Barrier with mcd's barrier on MPI_COMM_WORLD and on every
 * intra-communicator whose ranks are all in MPI_COMM_WORLD (duplicates, and
 * those of MPI_Comm_split, _create, _split_type, ... however made). It starts
 * mcd in MPI_Init / MPI_Init_thread (rank and size from MPI; interfaces, job
 * key, algorithm... from the environment, see mcd_barrier.h) and stops it in
 * MPI_Finalize (a collective closing barrier; meanwhile mcd's own thread
 * answers peers while the program computes or calls other MPI functions).
 * When mcd cannot start on some rank (no CAP_NET_RAW, no interface...), every
 * rank falls back to PMPI_Barrier and the lowest failing rank prints one
 * warning.
 *
 * Communicators. At the first MPI_Barrier on a communicator (collective, as
 * MPI_Barrier is), its ranks are translated to MPI_COMM_WORLD's and the
 * members create an mcd group barrier over them (no discovery, the job's
 * endpoint is shared), cached on the communicator in an attribute. Only
 * collectives on the communicator itself decide anything, so threads may
 * create communicators concurrently (MPI_THREAD_MULTIPLE) and ranks may
 * meet their communicators in different orders:
 *   1. one PMPI_Allreduce agrees whether every member is in MPI_COMM_WORLD
 *      and takes the group's key from the communicator's rank 0 (its world
 *      rank and a counter of its own: unique in the job);
 *   2. each member prepares its group locally (mcd_group_prepare), and a
 *      PMPI_Allreduce agrees that all did, so none waits in the join for a
 *      member that ran out of descriptors or threads;
 *   3. the members join (mcd_group_join) and agree once more.
 * Whoever fails at 1-3 leaves the communicator to PMPI_Barrier on every
 * member. MPI_Comm_free deletes the attribute, whose callback frees the
 * group without waiting (mcd_group_free: its closing completes in the
 * background), so ranks may free communicators in any order. Groups still
 * alive in MPI_Finalize are freed there, and mcd_finalize completes them
 * all. Each communicator is its own mcd barrier instance: even two
 * communicators with the same ranks never count each other's frames.
 * Inter-communicators, and communicators with a rank outside MPI_COMM_WORLD
 * (spawned or connected jobs), stay with PMPI_Barrier.
 *
 * Collectives. MPI_Allreduce, MPI_Reduce and MPI_Bcast on MPI_COMM_WORLD go
 * through mcd (mcd_allreduce, mcd_reduce, mcd_bcast: a gather with the data
 * in the messages and a multicast result, reproducible to the bit) for the
 * types int, long, long long, unsigned, unsigned long, unsigned long long,
 * the fixed-width (u)int32/64_t, float and double, the operations MPI_SUM,
 * MPI_MIN, MPI_MAX, MPI_PROD, MPI_BAND, MPI_BOR and MPI_BXOR (bitwise ones on
 * integers), MPI_IN_PLACE included; MPI_Bcast for any predefined type. Up to
 * MCD_MPI_MAX_BYTES bytes (default 65536) per call. Everything else (other
 * communicators, types or operations, larger data) goes to PMPI. Every
 * condition is one MPI makes the same on every rank, so all ranks decide
 * alike.
 *
 * MPI_Ibarrier is not interposed: an MPI request completed by mcd would need
 * MPI to drive mcd's progress inside MPI_Wait/MPI_Test, which the PMPI
 * interface cannot arrange (generalized requests have no progress hook).
 *
 *   MCD_MPI_DISABLE=1   do not start mcd (everything goes to PMPI_Barrier)
 *   MCD_AUTH=off        unauthenticated mcd frames (anyone on the Ethernet
 *                       segment can forge or replay them). By default, rank 0
 *                       makes a fresh job secret (mcd_secret_generate) in
 *                       MPI_Init, PMPI_Bcast sends it to every rank over MPI's
 *                       own channel, and every rank passes it to mcd_init
 *                       (MCD_AUTH_KEY): every mcd frame is signed with it.
 *                       MCD_KEY_FILE is not read: the broadcast secret wins.
 *   MCD_MPI_REPORT=1    each rank prints its counters in MPI_Finalize:
 *                       "mcd-mpi: rank R: N MPI_Barrier via mcd (ALG), M via PMPI; ...;
 *                        communicators: C via mcd, F via PMPI (I inter, U unreachable);
 *                        authentication on|off: T bad tag, P replayed, X mismatched"
 *                       (frames dropped: forged or of another secret; replays;
 *                       signed where this job does not sign, or the reverse)
 *                       and rank 0 of a communicator left to PMPI says why;
 *                       then "mcd-mpi: rank R: collectives: A MPI_Allreduce via
 *                        mcd, a via PMPI; B MPI_Reduce via mcd, ...; C MPI_Bcast ..."
 *   MCD_MPI_MAX_BYTES=N the largest collective mcd serves (bytes; default 65536)
 *
 * Built by `tools::mpi::build_interposer` (mpicc -shared, with the static
 * libmcd_barrier.a inside, so the one file is all a job needs). */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcd_barrier.h"

static mcd_job *job;
/* Whether mcd's frames are authenticated (for the report). */
static int auth_on;
static int active;
/* Counters, bumped atomically (several threads may call MPI). */
#define COUNT(x) __atomic_fetch_add(&(x), 1, __ATOMIC_RELAXED)
static unsigned long long via_mcd, via_pmpi;
/* Keys this rank handed out as a communicator's rank 0. */
static unsigned long long keys_made;
/* Guards the list of live states (never held across a collective). */
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
/* Collectives served by mcd and passed to PMPI: allreduce, reduce, bcast. */
enum { ALLREDUCE, REDUCE, BCAST, KINDS };
static unsigned long long coll_mcd[KINDS], coll_pmpi[KINDS];
static long long max_bytes = 65536;

/* A communicator's barrier, cached in an attribute. */
typedef struct comm_state {
    mcd_group *group; /* NULL: PMPI_Barrier */
    int size;
    struct comm_state *prev, *next; /* the live ones, in creation order */
} comm_state;
static int keyval = MPI_KEYVAL_INVALID;
static comm_state *first, *last;
static unsigned long long comms_mcd, comms_inter, comms_unreachable, comms_failed;

static int reporting(void) {
    const char *report = getenv("MCD_MPI_REPORT");
    return report && *report && strcmp(report, "0");
}

static void link_state(comm_state *st) {
    pthread_mutex_lock(&states_lock);
    st->prev = last;
    if (last) last->next = st; else first = st;
    last = st;
    pthread_mutex_unlock(&states_lock);
}

static void unlink_state(comm_state *st) {
    pthread_mutex_lock(&states_lock);
    if (st->prev) st->prev->next = st->next; else if (first == st) first = st->next;
    if (st->next) st->next->prev = st->prev; else if (last == st) last = st->prev;
    st->prev = st->next = NULL;
    pthread_mutex_unlock(&states_lock);
}

/* Ends a communicator's group without waiting (its closing completes in the
 * background, and in mcd_finalize at the latest). */
static void end_group(comm_state *st) {
    if (st->group && mcd_group_free(st->group) != MCD_OK)
        fprintf(stderr, "mcd-mpi: rank %d: freeing a communicator's barrier: %s\n", mcd_rank(job), mcd_last_error());
    st->group = NULL;
}

/* MPI_Comm_free (or MPI's own teardown) deletes the attribute. */
static int delete_state(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm, (void)key, (void)extra;
    comm_state *st = value;
    unlink_state(st);
    end_group(st);
    free(st);
    return MPI_SUCCESS;
}

/* Whether every member of `comm` says `ok`. */
static int all_say(int ok, MPI_Comm comm) {
    PMPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    return ok;
}

/* The first MPI_Barrier on `comm` (collective): an mcd group over its ranks,
 * or PMPI_Barrier on all of them. */
static comm_state *new_state(MPI_Comm comm) {
    comm_state *st = calloc(1, sizeof *st);
    int inter = 0, rank = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &st->size); /* of the local group, for an inter-communicator */
    const char *why = NULL;
    if (inter) {
        /* Every member sees the same: no agreement needed. */
        why = "an inter-communicator";
        COUNT(comms_inter);
    } else {
        MPI_Group group, world;
        PMPI_Comm_group(comm, &group);
        PMPI_Comm_group(MPI_COMM_WORLD, &world);
        int *ranks = malloc(sizeof(int) * st->size), *in_world = malloc(sizeof(int) * st->size);
        for (int i = 0; i < st->size; i++) ranks[i] = i;
        PMPI_Group_translate_ranks(group, st->size, ranks, world, in_world);
        PMPI_Group_free(&group);
        PMPI_Group_free(&world);
        int can = 1;
        for (int i = 0; i < st->size; i++) can &= in_world[i] != MPI_UNDEFINED;
        /* One allreduce: whether all members can (all must agree, or some
         * would wait in mcd for the others), and rank 0's key for the group:
         * its world rank and its own count, unique in the job, so members
         * need not create their communicators in the same order. */
        long long agreed[2] = {can, LLONG_MAX};
        if (rank == 0) {
            int world_rank;
            PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
            agreed[1] = (long long)(((unsigned long long)world_rank + 1) << 32 | (COUNT(keys_made) + 1));
        }
        PMPI_Allreduce(MPI_IN_PLACE, agreed, 2, MPI_LONG_LONG, MPI_MIN, comm);
        if (!agreed[0]) {
            why = "not all its ranks are in MPI_COMM_WORLD (mcd cannot reach them)";
            COUNT(comms_unreachable);
        } else {
            char reason[512] = "";
            /* Prepare locally, agree, then join: nobody joins (and waits)
             * for a member that could not prepare. */
            int ok = mcd_group_prepare(job, in_world, st->size, (uint64_t)agreed[1], &st->group) == MCD_OK;
            if (!ok) snprintf(reason, sizeof reason, "%s", mcd_last_error());
            ok = all_say(ok, comm);
            if (ok) {
                ok = mcd_group_join(st->group) == MCD_OK;
                if (!ok) snprintf(reason, sizeof reason, "%s", mcd_last_error());
                ok = all_say(ok, comm);
            }
            if (!ok) {
                if (*reason) fprintf(stderr, "mcd-mpi: rank %d: creating a communicator's barrier: %s\n", mcd_rank(job), reason);
                mcd_group_discard(st->group);
                st->group = NULL;
                why = "creating its mcd barrier failed";
                COUNT(comms_failed);
            } else {
                COUNT(comms_mcd);
            }
        }
        free(ranks);
        free(in_world);
    }
    if (why && rank == 0 && reporting())
        fprintf(stderr, "mcd-mpi: rank %d: a communicator of %d ranks falls back to PMPI_Barrier: %s\n", mcd_rank(job), st->size, why);
    link_state(st);
    PMPI_Comm_set_attr(comm, keyval, st);
    return st;
}

static void start_mcd(void) {
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    /* What Auto is told of the hosts, the same on every rank: the most
     * ranks on one host (as MPI sees hosts) and the fewest cores, so that
     * ranks on hosts with different counts pick the same algorithm. */
    MPI_Comm host;
    PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
    int shape[2] = {1, -(int)sysconf(_SC_NPROCESSORS_ONLN)};
    PMPI_Comm_size(host, &shape[0]);
    PMPI_Comm_free(&host);
    PMPI_Allreduce(MPI_IN_PLACE, shape, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    /* The job's secret: made by rank 0, sent to every rank over MPI (never
     * over the Ethernet segment in clear), unless MCD_AUTH says otherwise.
     * The broadcast is collective: every rank takes part, whatever its
     * environment says. Its last byte says whether rank 0 made one. */
    const char *auth = getenv("MCD_AUTH");
    int auth_mode = MCD_AUTH_KEY;
    if (auth && *auth) {
        if (!strcmp(auth, "off") || !strcmp(auth, "OFF")) auth_mode = MCD_AUTH_OFF;
        else if (strcmp(auth, "on") && strcmp(auth, "ON")) auth_mode = MCD_AUTH_ENV; /* mcd_init says what is wrong */
    }
    unsigned char secret[MCD_SECRET_LEN + 1] = {0};
    char secret_error[256] = "";
    if (rank == 0 && auth_mode == MCD_AUTH_KEY) {
        secret[MCD_SECRET_LEN] = mcd_secret_generate(secret) == MCD_OK;
        if (!secret[MCD_SECRET_LEN]) snprintf(secret_error, sizeof secret_error, "%s", mcd_last_error());
    }
    PMPI_Bcast(secret, MCD_SECRET_LEN + 1, MPI_BYTE, 0, MPI_COMM_WORLD);
    const char *disable = getenv("MCD_MPI_DISABLE");
    int ok = 0;
    char reason[512] = "disabled by MCD_MPI_DISABLE";
    if (auth_mode == MCD_AUTH_KEY && !secret[MCD_SECRET_LEN]) {
        snprintf(reason, sizeof reason, "rank 0 could not make a job secret: %s", *secret_error ? secret_error : "see rank 0");
    } else if (!(disable && *disable && strcmp(disable, "0"))) {
        mcd_params params;
        mcd_params_default(&params);
        params.rank = rank;
        params.size = size;
        params.local_procs = shape[0];
        if (shape[1] < 0) params.cpus = -shape[1];
        params.auth = auth_mode;
        memcpy(params.secret, secret, MCD_SECRET_LEN);
        int rc = mcd_init(&params, &job);
        ok = rc == MCD_OK;
        if (!ok) snprintf(reason, sizeof reason, "%s", mcd_last_error());
        memset(params.secret, 0, MCD_SECRET_LEN);
    }
    memset(secret, 0, sizeof secret);
    auth_on = auth_mode != MCD_AUTH_OFF;
    /* Every rank must agree: mcd on all, or PMPI on all. */
    int all_ok = 0, first_failure = ok ? size : rank;
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, &first_failure, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (rank == first_failure)
            fprintf(stderr, "mcd-mpi: warning: MPI_Barrier falls back to PMPI_Barrier: rank %d: %s\n", rank, reason);
        if (job) {
            mcd_discard(job); /* not every rank has mcd: no closing barrier */
            job = NULL;
        }
    }
    active = all_ok;
    if (active) PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
    const char *limit = getenv("MCD_MPI_MAX_BYTES");
    if (limit && *limit) max_bytes = atoll(limit);
}

/* The mcd type of a predefined MPI type, or -1. (Open MPI's handles are not
 * constants, hence no switch.) */
static int dtype_of(MPI_Datatype t) {
    if (t == MPI_INT32_T || (t == MPI_INT && sizeof(int) == 4)) return MCD_INT32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG || t == MPI_LONG_LONG_INT || (t == MPI_LONG && sizeof(long) == 8)) return MCD_INT64;
    if (t == MPI_UINT32_T || (t == MPI_UNSIGNED && sizeof(unsigned) == 4)) return MCD_UINT32;
    if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG || (t == MPI_UNSIGNED_LONG && sizeof(unsigned long) == 8)) return MCD_UINT64;
    if (t == MPI_FLOAT) return MCD_FLOAT;
    if (t == MPI_DOUBLE) return MCD_DOUBLE;
    return -1;
}

/* The mcd operation of a predefined MPI operation on `dtype`, or -1. */
static int op_of(MPI_Op op, int dtype) {
    int integer = dtype != MCD_FLOAT && dtype != MCD_DOUBLE;
    if (op == MPI_SUM) return MCD_SUM;
    if (op == MPI_MIN) return MCD_MIN;
    if (op == MPI_MAX) return MCD_MAX;
    if (op == MPI_PROD) return MCD_PROD;
    if (op == MPI_BAND && integer) return MCD_BAND;
    if (op == MPI_BOR && integer) return MCD_BOR;
    if (op == MPI_BXOR && integer) return MCD_BXOR;
    return -1;
}

/* Whether mcd takes a reduction of `count` elements of `t` with `op` on
 * `comm`; if so, its mcd type and operation. */
static int reducible(MPI_Comm comm, int count, MPI_Datatype t, MPI_Op op, int *dtype, int *mop) {
    if (!active || comm != MPI_COMM_WORLD || count < 0) return 0;
    *dtype = dtype_of(t);
    if (*dtype < 0) return 0;
    *mop = op_of(op, *dtype);
    if (*mop < 0) return 0;
    int size = 0;
    PMPI_Type_size(t, &size);
    return (long long)count * size <= max_bytes;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    int dtype, mop;
    if (reducible(comm, count, datatype, op, &dtype, &mop)) {
        const void *in = sendbuf == MPI_IN_PLACE ? NULL : sendbuf;
        if (mcd_allreduce(job, in, recvbuf, (size_t)count, dtype, mop) == MCD_OK) {
            COUNT(coll_mcd[ALLREDUCE]);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Allreduce on MPI_COMM_WORLD failed: %s\n", mcd_last_error());
        return MPI_ERR_OTHER;
    }
    COUNT(coll_pmpi[ALLREDUCE]);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
    int dtype, mop;
    if (reducible(comm, count, datatype, op, &dtype, &mop)) {
        const void *in = sendbuf == MPI_IN_PLACE ? NULL : sendbuf;
        if (mcd_reduce(job, in, recvbuf, (size_t)count, dtype, mop, root) == MCD_OK) {
            COUNT(coll_mcd[REDUCE]);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Reduce on MPI_COMM_WORLD failed: %s\n", mcd_last_error());
        return MPI_ERR_OTHER;
    }
    COUNT(coll_pmpi[REDUCE]);
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    int size = 0, ints, addrs, types, combiner = -1;
    if (active && comm == MPI_COMM_WORLD && count >= 0) {
        /* A predefined type is contiguous: its bytes are the data. */
        PMPI_Type_get_envelope(datatype, &ints, &addrs, &types, &combiner);
        PMPI_Type_size(datatype, &size);
    }
    if (combiner == MPI_COMBINER_NAMED && (long long)count * size <= max_bytes) {
        if (mcd_bcast(job, buffer, (size_t)count * (size_t)size, root) == MCD_OK) {
            COUNT(coll_mcd[BCAST]);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Bcast on MPI_COMM_WORLD failed: %s\n", mcd_last_error());
        return MPI_ERR_OTHER;
    }
    COUNT(coll_pmpi[BCAST]);
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) start_mcd();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) start_mcd();
    return rc;
}

int MPI_Barrier(MPI_Comm comm) {
    if (active && comm == MPI_COMM_WORLD) {
        int rc = mcd_barrier(job);
        if (rc == MCD_OK) {
            COUNT(via_mcd);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Barrier on MPI_COMM_WORLD failed: %s\n", mcd_last_error());
        return MPI_ERR_OTHER;
    }
    if (active && comm != MPI_COMM_NULL) {
        comm_state *st = NULL;
        int found = 0;
        if (PMPI_Comm_get_attr(comm, keyval, &st, &found) == MPI_SUCCESS) {
            if (!found) st = new_state(comm);
            if (st->group) {
                int rc = mcd_group_barrier(st->group);
                if (rc == MCD_OK) {
                    COUNT(via_mcd);
                    return MPI_SUCCESS;
                }
                fprintf(stderr, "mcd-mpi: MPI_Barrier on a communicator failed: %s\n", mcd_last_error());
                return MPI_ERR_OTHER;
            }
        }
    }
    COUNT(via_pmpi);
    return PMPI_Barrier(comm);
}

int MPI_Finalize(void) {
    if (active) {
        int rank_of_job = mcd_rank(job);
        if (reporting()) {
            mcd_stats s;
            mcd_get_stats(job, &s);
            fprintf(stderr, "mcd-mpi: rank %d: %llu MPI_Barrier via mcd (%s), %llu via PMPI; mcd barriers %llu, sent %llu, received %llu, resends %llu; "
                    "communicators: %llu via mcd, %llu via PMPI (%llu inter, %llu unreachable, %llu failed); "
                    "authentication %s: %llu bad tag, %llu replayed, %llu mismatched\n",
                    mcd_rank(job), via_mcd, mcd_algorithm(job), via_pmpi, (unsigned long long)s.barriers,
                    (unsigned long long)s.messages_sent, (unsigned long long)s.frames_received, (unsigned long long)s.resends,
                    comms_mcd, comms_inter + comms_unreachable + comms_failed, comms_inter, comms_unreachable, comms_failed,
                    auth_on ? "on" : "off", (unsigned long long)s.frames_bad_tag, (unsigned long long)s.frames_replayed,
                    (unsigned long long)s.frames_auth_mismatch);
            fprintf(stderr, "mcd-mpi: rank %d: collectives: %llu MPI_Allreduce via mcd, %llu via PMPI; %llu MPI_Reduce via mcd, %llu via PMPI; "
                    "%llu MPI_Bcast via mcd, %llu via PMPI\n", mcd_rank(job), coll_mcd[ALLREDUCE], coll_pmpi[ALLREDUCE],
                    coll_mcd[REDUCE], coll_pmpi[REDUCE], coll_mcd[BCAST], coll_pmpi[BCAST]);
        }
        /* Communicators never freed: their groups end here (without waiting,
         * so in any order); the states stay for MPI's own teardown. */
        pthread_mutex_lock(&states_lock);
        for (comm_state *st = first; st; st = st->next) end_group(st);
        pthread_mutex_unlock(&states_lock);
        /* Collective: every freed group's closing completes, then the job's
         * closing barrier, then answers until every rank is done, so a rank
         * whose last release was lost still completes. mcd's own threads
         * have answered peers all along, during compute and other calls. */
        if (mcd_finalize(job) != MCD_OK)
            fprintf(stderr, "mcd-mpi: rank %d: finalizing mcd: %s\n", rank_of_job, mcd_last_error());
        job = NULL;
        active = 0;
    } else {
        if (reporting()) {
            int rank;
            PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
            fprintf(stderr, "mcd-mpi: rank %d: 0 MPI_Barrier via mcd (off), %llu via PMPI\n", rank, via_pmpi);
            fprintf(stderr, "mcd-mpi: rank %d: collectives: 0 MPI_Allreduce via mcd, %llu via PMPI; 0 MPI_Reduce via mcd, %llu via PMPI; "
                    "0 MPI_Bcast via mcd, %llu via PMPI\n", rank, coll_pmpi[ALLREDUCE], coll_pmpi[REDUCE], coll_pmpi[BCAST]);
        }
    }
    return PMPI_Finalize();
}
