/* mcd_mpi_barrier.c — the MPI_Barrier interposer.
 *
 * Preloaded into an unmodified MPI program (LD_PRELOAD=libmcd_mpi_barrier.so),
 * it serves MPI_Barrier with mcd's barrier on MPI_COMM_WORLD and on every
 * intra-communicator whose ranks are all in MPI_COMM_WORLD (duplicates, and
 * those of MPI_Comm_split, _create, _split_type, ... however made). It starts
 * mcd in MPI_Init / MPI_Init_thread (rank and size from MPI; interfaces, job
 * key, algorithm... from the environment, see mcd_barrier.h; the job key also
 * from 64 random bits rank 0 draws and broadcasts, so that no two jobs share
 * one, whatever MCD_JOB and MCD_KEY_FILE say) and stops it in
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
 * Collectives. MPI_Allreduce, MPI_Reduce and MPI_Bcast go through mcd on
 * MPI_COMM_WORLD (mcd_allreduce, mcd_reduce, mcd_bcast: a gather with the
 * data in the messages and a multicast result, reproducible to the bit) and
 * on every communicator that has an mcd group (mcd_group_allreduce, ...: a
 * barrier instance of the group's own, joined with the group, as the job's
 * is in MPI_Init: a rank late to its first collective is waited for, and a
 * first nonblocking start waits for nobody (review rev31, finding 2); the
 * communicator's state is made where the communicator is created, or,
 * under MCD_MPI_LAZY_COMMS=1, by its first MPI_Barrier or collective bound
 * for mcd), every root, for the
 * types int, long, long long, unsigned, unsigned long, unsigned long long,
 * the fixed-width (u)int32/64_t, float and double, the operations MPI_SUM,
 * MPI_MIN, MPI_MAX, MPI_PROD, MPI_BAND, MPI_BOR and MPI_BXOR (bitwise ones on
 * integers), MPI_IN_PLACE included; MPI_Bcast for any type. Up to
 * MCD_MPI_MAX_BYTES bytes (default 65536) per call. Everything else (other
 * communicators, operations, larger data, reductions whose type signature
 * mixes basic types) goes to PMPI. Every condition is one MPI makes the
 * same on every rank (the type signature, not the datatype handle: see
 * "Type signatures" below), so all ranks decide alike.
 *
 * Nonblocking and persistent collectives (MPI_Ibarrier, MPI_Iallreduce,
 * MPI_Ireduce, MPI_Ibcast; MPI_Barrier_init, MPI_Allreduce_init,
 * MPI_Reduce_init, MPI_Bcast_init or Open MPI's MPIX_ forms) go through mcd
 * on the same communicators under the same rules once the communicator has
 * its mcd state: see "Nonblocking collectives" below for how they complete
 * (generalized requests, and the wait and test family interposed) and why
 * that is sound at every thread level.
 *
 *   MCD_MPI_DISABLE=1   do not start mcd (everything goes to PMPI_Barrier)
 *   MCD_AUTH=off        unauthenticated mcd frames (anyone on the Ethernet
 *                       segment can forge or replay them).
 *   MCD_KEY_FILE=PATH   every rank reads the job's secret from this file
 *                       (mcd_init's MCD_AUTH_ENV; 16 bytes, mode 0600): nothing
 *                       about the secret crosses MPI.
 *                       Without either, the ranks agree a fresh secret over
 *                       MPI in MPI_Init without ever sending it in clear (MPI's
 *                       TCP runs on the same segment): each makes an ephemeral
 *                       X25519 key pair, rank 0 gathers the public keys
 *                       (PMPI_Gather), makes the secret (mcd_secret_generate)
 *                       and scatters it wrapped for each rank (mcd_secret_wrap,
 *                       PMPI_Scatter); each unwraps its own (mcd_secret_unwrap)
 *                       and passes it to mcd_init (MCD_AUTH_KEY). A passive
 *                       listener learns nothing of it; an active attacker on
 *                       MPI's connections could stand in the middle of the
 *                       exchange (MCD_KEY_FILE avoids it). First of all, one
 *                       PMPI_Allreduce agrees the mode (off, key file,
 *                       exchange) and MCD_MPI_DISABLE: ranks that differ all
 *                       fall back to PMPI at once, the warning naming MCD_AUTH.
 *   MCD_MPI_REPORT=1    each rank prints its counters in MPI_Finalize:
 *                       "mcd-mpi: rank R: N MPI_Barrier via mcd (ALG), M via PMPI; ...;
 *                        communicators: C via mcd, F via PMPI (I inter, U unreachable);
 *                        authentication on|off: T bad tag, P replayed, X mismatched;
 *                        other runs: F foreign, J superseded, W sessions forgotten,
 *                        H stale hellos; dropped: D frames, O messages overflowed"
 *                       (frames dropped: forged or of another secret; replays;
 *                       signed where this job does not sign, or the reverse;
 *                       messages of another barrier instance, as an earlier
 *                       run's frames replayed under the same secret are, and
 *                       join answers or requests of another incarnation;
 *                       replay windows of earlier runs' sessions forgotten;
 *                       hellos the bootstrap took, then ignored or replaced:
 *                       an earlier run's, replayed;
 *                       every frame dropped, for any reason, the ring's
 *                       included; messages dropped for want of room)
 *                       and rank 0 of a communicator left to PMPI says why;
 *                       then "mcd-mpi: rank R: collectives: A MPI_Allreduce via
 *                        mcd, a via PMPI; B MPI_Reduce via mcd, ...; C MPI_Bcast ..."
 *                       and per communicator with collectives (when it is
 *                        freed, or in MPI_Finalize): "mcd-mpi: rank R:
 *                        collectives on MPI_COMM_WORLD: A MPI_Allreduce via mcd,
 *                        a via PMPI; ...; PMPI because: X beyond
 *                        MCD_MPI_MAX_BYTES, Y type or operation not served,
 *                        Z the communicator has no mcd group (why)"
 *                        (a communicator by its mcd key: its rank 0's world
 *                        rank + 1, then a count, in hex; the nonblocking
 *                        kinds appear there once the communicator had one);
 *                       then "mcd-mpi: rank R: nonblocking: A MPI_Ibarrier via
 *                        mcd, a via PMPI; ...; persistent: S starts via mcd,
 *                        I inits via PMPI; F completed in MPI_Finalize"
 *   MCD_MPI_REPORT_JSON=PATH  the same report as JSON, one file per rank,
 *                       written in MPI_Finalize: PATH with "%r" replaced by
 *                       the rank, or PATH.R.json (totals per kind, the mcd
 *                       counters, and an object per communicator)
 *   MCD_MPI_MAX_BYTES=N the largest collective mcd serves (bytes; default 65536)
 *   MCD_MPI_GATHER_BYTES=N the largest whole result of an MPI_Allgather
 *                       mcd serves (bytes; default 1024; see gather_via_mcd)
 *   MCD_MPI_LAZY_COMMS=1 (on any rank) a communicator's mcd state is made at
 *                       its first blocking collective, not in its
 *                       constructor (see "Communicator constructors")
 *
 * Built by `tools::mpi::build_interposer` (mpicc -shared, with the static
 * libmcd_barrier.a inside, so the one file is all a job needs). */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mcd_barrier.h"
#ifdef OPEN_MPI
#include <mpi-ext.h> /* MPIX_Barrier_init... (the pcollreq extension) */
#endif

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
/* Collectives served by mcd and passed to PMPI: allreduce, reduce, bcast,
 * and the nonblocking ones (a persistent one's starts count as its
 * nonblocking kind's). */
enum { ALLREDUCE, REDUCE, BCAST, IBARRIER, IALLREDUCE, IREDUCE, IBCAST, KINDS };
static const char *kind_names[KINDS] = {"MPI_Allreduce", "MPI_Reduce", "MPI_Bcast", "MPI_Ibarrier", "MPI_Iallreduce", "MPI_Ireduce", "MPI_Ibcast"};
#define NONBLOCKING(kind) ((kind) - ALLREDUCE + IALLREDUCE) /* of ALLREDUCE, REDUCE, BCAST */
static unsigned long long persistent_starts_mcd, persistent_inits_pmpi, finalize_pending;
static unsigned long long coll_mcd[KINDS], coll_pmpi[KINDS];
static long long max_bytes = 65536;

/* Collectives mcd does not implement: interposed only to count them, and
 * passed to PMPI (the report lists each with its reason). */
enum {
    O_GATHER, O_GATHERV, O_ALLGATHER, O_ALLGATHERV, O_SCATTER, O_SCATTERV, O_ALLTOALL, O_ALLTOALLV, O_REDUCE_SCATTER,
    O_REDUCE_SCATTER_BLOCK, O_SCAN, O_EXSCAN, O_IGATHER, O_IALLGATHER, O_ISCATTER, O_IALLTOALL, O_IREDUCE_SCATTER_BLOCK, O_ISCAN,
    O_IEXSCAN, OTHERS
};
static const char *other_names[OTHERS] = {
    "MPI_Gather", "MPI_Gatherv", "MPI_Allgather", "MPI_Allgatherv", "MPI_Scatter", "MPI_Scatterv", "MPI_Alltoall", "MPI_Alltoallv",
    "MPI_Reduce_scatter", "MPI_Reduce_scatter_block", "MPI_Scan", "MPI_Exscan", "MPI_Igather", "MPI_Iallgather", "MPI_Iscatter",
    "MPI_Ialltoall", "MPI_Ireduce_scatter_block", "MPI_Iscan", "MPI_Iexscan"};
#define NOT_IN_MCD "not served by mcd"
static unsigned long long other_pmpi[OTHERS];
/* MPI_Allgather of small blocks goes through mcd (a bitwise-or reduction:
 * see gather_via_mcd): those served, and the most bytes of the whole result
 * (every rank's block) they take, MCD_MPI_GATHER_BYTES. (MPI_Gather could
 * go the same way, and measured slower: see MPI_Gather.) */
static unsigned long long gathers_mcd[2];
static long long gather_bytes = 1024;

/* A communicator's barrier, cached in an attribute. */
/* Why a collective went to PMPI. */
enum { WHY_COMM, WHY_BYTES, WHY_TYPE, WHYS };
static const char *why_names[WHYS] = {"the communicator has no mcd group", "beyond MCD_MPI_MAX_BYTES", "type or operation not served"};

/* Latency of the blocking calls through mcd, as the program sees it (from
 * entering the MPI call to returning, packing included): a histogram per
 * kind, buckets a power of two split in 8 (at most 12.5% wide) from 64 ns
 * up to 2^40 ns, bumped atomically; p50 and p99 are read from it. */
enum { LAT_BARRIER, LAT_ALLREDUCE, LAT_REDUCE, LAT_BCAST, LATS };
static const char *lat_names[LATS] = {"MPI_Barrier", "MPI_Allreduce", "MPI_Reduce", "MPI_Bcast"};
#define LAT_SUB 8
#define LAT_MIN_LOG 6
#define LAT_BUCKETS ((40 - LAT_MIN_LOG) * LAT_SUB)
typedef struct {
    unsigned long long n[LAT_BUCKETS];
} lat_hist;

typedef struct comm_state {
    mcd_group *group; /* NULL: PMPI_Barrier */
    int size;
    unsigned long long key;  /* the communicator's mcd key (0: none) */
    const char *why;         /* why it has no mcd group */
    /* Its collectives, per kind: through mcd, and through PMPI per reason. */
    unsigned long long mcd[KINDS], pmpi[KINDS][WHYS];
    lat_hist lat[LATS];
    unsigned long long other[OTHERS]; /* collectives mcd does not implement */
    /* Nonblocking collectives in flight on it, and whether MPI freed the
     * communicator meanwhile (then the last one to complete frees the
     * state: MPI_Comm_free lets pending operations complete normally).
     * Both under states_lock. */
    int refs, freed;
    struct comm_state *prev, *next; /* the live ones, in creation order */
} comm_state;
static void report_comm(const comm_state *st, int world);
static int keyval = MPI_KEYVAL_INVALID;
/* Whether the communicator constructors make a new communicator's state
 * (agreed on every rank in MPI_Init; see make_state_now). */
static int eager_comms = 1;
static comm_state *first, *last;
static unsigned long long comms_mcd, comms_inter, comms_unreachable, comms_failed;

static int reporting(void) {
    const char *report = getenv("MCD_MPI_REPORT");
    return report && *report && strcmp(report, "0");
}

/* For messages: which communicator. */
static const char *comm_name(MPI_Comm comm) {
    return comm == MPI_COMM_WORLD ? "MPI_COMM_WORLD" : "a communicator";
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

static void json_comm(const comm_state *st, int world);
static const char *json_path(void) {
    const char *path = getenv("MCD_MPI_REPORT_JSON");
    return path && *path ? path : NULL;
}

static void free_state(comm_state *st) {
    if (reporting() && job) report_comm(st, 0);
    if (json_path() && job) json_comm(st, 0);
    unlink_state(st);
    end_group(st);
    free(st);
}

/* MPI_Comm_free (or MPI's own teardown) deletes the attribute; with
 * nonblocking collectives in flight, the last of them frees the state. */
static int delete_state(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm, (void)key, (void)extra;
    comm_state *st = value;
    pthread_mutex_lock(&states_lock);
    int busy = st->refs > 0;
    if (busy) st->freed = 1;
    pthread_mutex_unlock(&states_lock);
    if (!busy) free_state(st);
    return MPI_SUCCESS;
}

/* A nonblocking collective on `st` starts (it keeps the state alive) or
 * ends. */
static void hold_state(comm_state *st) {
    pthread_mutex_lock(&states_lock);
    st->refs++;
    pthread_mutex_unlock(&states_lock);
}

static void release_state(comm_state *st) {
    pthread_mutex_lock(&states_lock);
    int gone = --st->refs == 0 && st->freed;
    pthread_mutex_unlock(&states_lock);
    if (gone) free_state(st);
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
    long long agreed_key = 0, *agreed_key_out = &agreed_key;
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
        agreed_key_out = &agreed_key;
        if (rank == 0) {
            int world_rank;
            PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
            agreed[1] = (long long)(((unsigned long long)world_rank + 1) << 32 | (COUNT(keys_made) + 1));
        }
        PMPI_Allreduce(MPI_IN_PLACE, agreed, 2, MPI_LONG_LONG, MPI_MIN, comm);
        *agreed_key_out = agreed[1];
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
    st->key = (unsigned long long)agreed_key;
    st->why = why;
    if (why && rank == 0 && reporting())
        fprintf(stderr, "mcd-mpi: rank %d: a communicator of %d ranks falls back to PMPI_Barrier: %s\n", mcd_rank(job), st->size, why);
    link_state(st);
    PMPI_Comm_set_attr(comm, keyval, st);
    return st;
}

/* How a rank authenticates its mcd frames, agreed in MPI_Init. */
enum { MODE_OFF, MODE_KEY_FILE, MODE_EXCHANGE, MODE_INVALID, MODES };
static const char *mode_names[MODES] = {"off", "on with MCD_KEY_FILE", "on without MCD_KEY_FILE",
                                        "invalid (MCD_AUTH neither on nor off, or off with MCD_KEY_FILE)"};
#define SEEN_DISABLED (1 << MODES)
#define SEEN_LAZY (1 << (MODES + 1)) /* MCD_MPI_LAZY_COMMS on some rank */

/* Clears key material (a volatile store the compiler keeps). */
static void wipe(void *p, size_t n) {
    volatile unsigned char *b = p;
    while (n--) *b++ = 0;
}

/* The job's secret, agreed over MPI without ever crossing it in clear
 * (MPI's TCP runs on the very segment mcd's frames do): every rank makes
 * an ephemeral X25519 key pair; rank 0 gathers the public keys, makes the
 * secret and scatters it wrapped for each rank (mcd_secret_wrap: under a
 * key only rank 0 and that rank can derive), with its public key; each
 * rank unwraps its copy. A passive listener learns nothing; an active one
 * who replaces the public keys in transit could (MCD_KEY_FILE avoids the
 * exchange). Collective on MPI_COMM_WORLD; MCD_OK or an error with `reason`
 * filled in. */
enum { KEY = MCD_EXCHANGE_KEY_LEN, WRAPPED = MCD_WRAPPED_SECRET_LEN, TO_RANK = KEY + WRAPPED + 1 };
static int exchange_secret(int rank, int size, unsigned char secret[MCD_SECRET_LEN], char *reason, size_t reason_len) {
    unsigned char private_key[KEY], mine[KEY + 1] = {0}, got[TO_RANK] = {0};
    int rc = mcd_secret_exchange_keypair(private_key, mine);
    mine[KEY] = rc == MCD_OK;
    if (rc != MCD_OK) snprintf(reason, reason_len, "no key pair for the secret exchange: %s", mcd_last_error());
    unsigned char *publics = NULL, *out = NULL;
    if (rank == 0) {
        publics = calloc((size_t)size, KEY + 1);
        out = calloc((size_t)size, TO_RANK);
        if (!publics || !out) {
            free(publics);
            free(out);
            publics = out = NULL;
        }
    }
    int have = rank != 0 || publics;
    PMPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!have) {
        if (rank == 0) snprintf(reason, reason_len, "out of memory for the secret exchange");
        else snprintf(reason, reason_len, "rank 0 could not exchange the job secret: see rank 0");
        wipe(private_key, sizeof private_key);
        return MCD_ERR_SYSTEM;
    }
    PMPI_Gather(mine, KEY + 1, MPI_BYTE, publics, KEY + 1, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int made = mine[KEY] && mcd_secret_generate(secret) == MCD_OK;
        if (mine[KEY] && !made) snprintf(reason, reason_len, "rank 0 could not make a job secret: %s", mcd_last_error());
        for (int r = 0; r < size; r++) {
            unsigned char *to = out + (size_t)r * TO_RANK;
            memcpy(to, mine, KEY);
            to[KEY + WRAPPED] = made && publics[(size_t)r * (KEY + 1) + KEY] &&
                                (r == 0 || mcd_secret_wrap(private_key, publics + (size_t)r * (KEY + 1), secret, to + KEY) == MCD_OK);
        }
    }
    PMPI_Scatter(out, TO_RANK, MPI_BYTE, got, TO_RANK, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        wipe(out, (size_t)size * TO_RANK);
        free(out);
        free(publics);
    }
    rc = MCD_OK;
    if (!got[KEY + WRAPPED]) {
        if (mine[KEY] && rank != 0) snprintf(reason, reason_len, "rank 0 could not wrap the job secret for this rank: see rank 0");
        rc = MCD_ERR_CONFIG;
    } else if (rank != 0 && mcd_secret_unwrap(private_key, got, got + KEY, secret) != MCD_OK) {
        snprintf(reason, reason_len, "the job secret from rank 0 did not unwrap: %s", mcd_last_error());
        rc = MCD_ERR_CONFIG;
    }
    wipe(private_key, sizeof private_key);
    wipe(got, sizeof got);
    if (rc != MCD_OK) wipe(secret, MCD_SECRET_LEN);
    return rc;
}

/* The MPI error code a collective mismatch reaches the program as: one of
 * an error class of its own (MPI_Add_error_class and MPI_Add_error_code,
 * made in start_mcd), so that a program can tell ranks that called
 * different collectives from a network failure with MPI_Error_class;
 * MPI_ERR_OTHER if MPI would not make one. */
static int mismatch_class = MPI_ERR_OTHER;

/* What a failed mcd call returns to the MPI program, by mcd's code. */
static int mpi_error_of(int rc) {
    switch (rc) {
    case MCD_ERR_MISMATCH: return mismatch_class;
    case MCD_ERR_ARGUMENT: return MPI_ERR_ARG;
    case MCD_ERR_INTERNAL: return MPI_ERR_INTERN;
    case MCD_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    default: return MPI_ERR_OTHER;
    }
}

/* An error of the interposer's own in a call on `comm`, raised as MPI
 * raises its errors (review rev30, finding 1): through the communicator's
 * error handler (MPI_ERRORS_ARE_FATAL aborts, MPI_ERRORS_RETURN returns,
 * a handler of the program's own is called once), then returned. */
static int raise_error(MPI_Comm comm, int code) {
    PMPI_Comm_call_errhandler(comm, code);
    return code;
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
    /* How each rank authenticates (MCD_AUTH, MCD_KEY_FILE), agreed before
     * anything else: ranks that differ would never hear each other, so all
     * fall back at once, saying why, rather than time out in the join. */
    const char *disable = getenv("MCD_MPI_DISABLE");
    /* As mcd reads them (mcd_auth_from_env), never parsed here a second
     * way (review rev29, finding 4: MCD_AUTH=Off was taken for "on"). */
    int source = mcd_auth_from_env();
    char invalid[400] = "";
    if (source < 0) snprintf(invalid, sizeof invalid, "%s", mcd_last_error());
    int mode = source < 0 ? MODE_INVALID : source == MCD_AUTH_OFF ? MODE_OFF : source == MCD_AUTH_KEY ? MODE_EXCHANGE : MODE_KEY_FILE;
    int seen = 1 << mode;
    if (disable && *disable && strcmp(disable, "0")) seen |= SEEN_DISABLED;
    const char *lazy = getenv("MCD_MPI_LAZY_COMMS");
    if (lazy && *lazy && strcmp(lazy, "0")) seen |= SEEN_LAZY;
    PMPI_Allreduce(MPI_IN_PLACE, &seen, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    /* Agreed: a rank making a communicator's state in the constructor
     * while another does not would wait in a collective the other never calls. */
    eager_comms = !(seen & SEEN_LAZY);
    /* A name of this job's own (review rev29, finding 2): rank 0 draws 64
     * random bits, and every rank adds them to the job's name (MCD_JOB or
     * SLURM_JOB_ID), which mcd hashes into the job key: two jobs started
     * with one key file and one MCD_JOB (or none) never hear each other's
     * hellos, where they could bootstrap cross-wired. */
    unsigned char drawn[MCD_SECRET_LEN] = {0};
    if (rank == 0 && mcd_secret_generate(drawn) != MCD_OK) memset(drawn, 0, sizeof drawn);
    PMPI_Bcast(drawn, 8, MPI_BYTE, 0, MPI_COMM_WORLD);
    const char *base = getenv("MCD_JOB");
    if (!base || !*base) base = getenv("SLURM_JOB_ID");
    char job_name[320];
    int at_name = snprintf(job_name, sizeof job_name, "%.256s%smpi-", base ? base : "", base && *base ? "/" : "");
    for (int i = 0; i < 8; i++) at_name += snprintf(job_name + at_name, sizeof job_name - (size_t)at_name, "%02x", drawn[i]);
    int modes = seen & ((1 << MODES) - 1);
    int ok = 0;
    char reason[512] = "disabled by MCD_MPI_DISABLE";
    unsigned char secret[MCD_SECRET_LEN] = {0};
    if (seen & SEEN_DISABLED) {
        if (!(disable && *disable && strcmp(disable, "0"))) snprintf(reason, sizeof reason, "MCD_MPI_DISABLE is set on some other ranks");
    } else if (modes & (modes - 1)) {
        char *at = reason;
        at += snprintf(at, sizeof reason, "MCD_AUTH differs between ranks (seen: ");
        for (int m = 0, first = 1; m < MODES; m++)
            if (modes & (1 << m)) {
                at += snprintf(at, sizeof reason - (size_t)(at - reason), "%s%s", first ? "" : ", ", mode_names[m]);
                first = 0;
            }
        snprintf(at, sizeof reason - (size_t)(at - reason), "): set MCD_AUTH and MCD_KEY_FILE alike on every rank");
    } else if (mode == MODE_INVALID) {
        snprintf(reason, sizeof reason, "%s", invalid);
    } else if (mode == MODE_EXCHANGE && exchange_secret(rank, size, secret, reason, sizeof reason) != MCD_OK) {
        /* reason says why */
    } else {
        mcd_params params;
        mcd_params_default(&params);
        params.rank = rank;
        params.size = size;
        params.job = job_name;
        params.local_procs = shape[0];
        if (shape[1] < 0) params.cpus = -shape[1];
        params.auth = mode == MODE_OFF ? MCD_AUTH_OFF : mode == MODE_KEY_FILE ? MCD_AUTH_ENV : MCD_AUTH_KEY;
        memcpy(params.secret, secret, MCD_SECRET_LEN);
        int rc = mcd_init(&params, &job);
        ok = rc == MCD_OK;
        if (!ok) snprintf(reason, sizeof reason, "%s", mcd_last_error());
        wipe(params.secret, MCD_SECRET_LEN);
    }
    wipe(secret, sizeof secret);
    /* What mcd runs, not what this file makes of MCD_AUTH (mcd reads it
     * trimmed and in any case: review rev29, finding 4). */
    auth_on = job && mcd_authenticated(job) == 1;
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
    int cls, code;
    if (active && PMPI_Add_error_class(&cls) == MPI_SUCCESS && PMPI_Add_error_code(cls, &code) == MPI_SUCCESS) {
        char text[] = "mcd: the ranks called different collectives (another operation, type, count or root)";
        PMPI_Add_error_string(cls, text);
        PMPI_Add_error_string(code, text);
        mismatch_class = code;
    }
    const char *limit = getenv("MCD_MPI_MAX_BYTES");
    if (limit && *limit) max_bytes = atoll(limit);
    const char *gather_limit = getenv("MCD_MPI_GATHER_BYTES");
    if (gather_limit && *gather_limit) gather_bytes = atoll(gather_limit);
}

/* The mcd type of a predefined MPI type, or -1. (Open MPI's handles are not
 * constants, hence no switch.) */
static int dtype_of(MPI_Datatype t) {
    if (t == MPI_INT32_T || (t == MPI_INT && sizeof(int) == 4)) return MCD_INT32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG || t == MPI_LONG_LONG_INT || (t == MPI_LONG && sizeof(long) == 8) ||
        (t == MPI_AINT && sizeof(MPI_Aint) == 8) || (t == MPI_OFFSET && sizeof(MPI_Offset) == 8) || (t == MPI_COUNT && sizeof(MPI_Count) == 8))
        return MCD_INT64;
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

/* Type signatures. MPI makes only the type *signature* (the sequence of
 * basic types) and so the byte count the same on every rank of a
 * collective, not the datatype handle: one rank may broadcast 2 x
 * contiguous(3, MPI_INT) while the others receive 6 x MPI_INT. So every
 * choice below is a function of the signature alone:
 *   - the bytes: count x MPI_Type_size;
 *   - the one mcd type all the signature's basic types map to (for
 *     reductions), found by walking the type's constructors
 *     (MPI_Type_get_envelope / _get_contents); a predefined pair type
 *     (MPI_DOUBLE_INT...) or a mix of types has none.
 * How the bytes are read and written is each rank's own business: a
 * predefined type without gaps (size = extent) is its bytes; any other
 * (the pair types with gaps, every derived type) is packed into its
 * signature's bytes with PMPI_Pack and unpacked with PMPI_Unpack, never
 * copied as if contiguous. */
enum { SIG_EMPTY = -2, SIG_MIXED = -1 };

/* The mcd type every basic type of `t`'s signature maps to, SIG_EMPTY for
 * an empty signature, or SIG_MIXED. */
static int signature_dtype(MPI_Datatype t, int depth) {
    int size = 0;
    PMPI_Type_size(t, &size);
    if (size == 0) return SIG_EMPTY;
    int ni = 0, na = 0, nt = 0, combiner = MPI_COMBINER_NAMED;
    PMPI_Type_get_envelope(t, &ni, &na, &nt, &combiner);
    if (combiner == MPI_COMBINER_NAMED) {
        int d = dtype_of(t);
        return d < 0 ? SIG_MIXED : d;
    }
    if (depth > 32 || nt < 1) return SIG_MIXED;
    int *ints = malloc(sizeof(int) * (ni + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (na + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * nt);
    PMPI_Type_get_contents(t, ni, na, nt, ints, addrs, types);
    int found = SIG_EMPTY;
    for (int i = 0; i < nt; i++) {
        int d = signature_dtype(types[i], depth + 1);
        /* A struct's block of length 0 adds nothing to the signature. */
        if (combiner == MPI_COMBINER_STRUCT && ints[1 + i] == 0) d = SIG_EMPTY;
        if (d == SIG_MIXED || (found >= 0 && d >= 0 && d != found)) found = SIG_MIXED;
        else if (found == SIG_EMPTY) found = d;
        int inner = 0, x, y, z;
        PMPI_Type_get_envelope(types[i], &x, &y, &z, &inner);
        if (inner != MPI_COMBINER_NAMED) PMPI_Type_free(&types[i]);
    }
    free(ints);
    free(addrs);
    free(types);
    return found;
}

/* Whether `t` is a predefined type (MPI_DATATYPE_NULL counts as one: it
 * is nothing to free). */
static int predefined(MPI_Datatype t) {
    int ni, na, nt, combiner = MPI_COMBINER_NAMED;
    if (t == MPI_DATATYPE_NULL) return 1;
    PMPI_Type_get_envelope(t, &ni, &na, &nt, &combiner);
    return combiner == MPI_COMBINER_NAMED;
}

/* Whether `t`'s memory is its signature's bytes: a predefined type without
 * gaps (the pair types whose extent exceeds their size are not). */
static int plain(MPI_Datatype t) {
    int size = 0;
    if (t == MPI_DATATYPE_NULL || !predefined(t)) return 0;
    MPI_Aint lb = 0, extent = 0;
    PMPI_Type_size(t, &size);
    PMPI_Type_get_extent(t, &lb, &extent);
    return lb == 0 && extent == size;
}

/* Whether PMPI_Pack writes a signature's bytes back to back (as both MPIs
 * do on one machine's ranks): checked once on a pair type with a gap, so
 * that a packed type meets another rank's plain one byte for byte. The
 * same library on every rank gives the same answer on every rank. */
static int packs_plainly(void) {
    static int known = -1;
    if (known < 0) {
        struct { short s; int i; } v = {0x0102, 0x03040506};
        char packed[64], want[sizeof(short) + sizeof(int)];
        int position = 0, size = 0;
        PMPI_Type_size(MPI_SHORT_INT, &size);
        memcpy(want, &v.s, sizeof v.s);
        memcpy(want + sizeof v.s, &v.i, sizeof v.i);
        int ok = PMPI_Pack(&v, 1, MPI_SHORT_INT, packed, sizeof packed, &position, MPI_COMM_WORLD) == MPI_SUCCESS;
        known = ok && position == (int)sizeof want && size == (int)sizeof want && !memcmp(packed, want, sizeof want);
    }
    return known;
}

/* The bytes of `count` elements of `t` (its signature's), or -1 if they
 * overflow. */
static long long bytes_of(int count, MPI_Datatype t) {
    int size = 0;
    if (count < 0 || PMPI_Type_size(t, &size) != MPI_SUCCESS || size < 0) return -1;
    return (long long)count * size;
}

/* Data at MPI_BOTTOM (review rev30, finding 6): its type's displacements
 * are absolute addresses, and MPICH's MPI_Pack and MPI_Unpack refuse the
 * buffer MPI_BOTTOM is there (NULL). The same bytes are one element of a
 * struct type holding the `count` x `t` at the displacement that leads
 * from an address of this file's own back to MPI_BOTTOM (address 0 in
 * both MPIs): `count` x `t` at `buf` as (`*at`, `*n`, `*as`), where `*as`
 * is a type made here (free it with PMPI_Type_free) when it is not `t`.
 * Any other buffer is itself. */
static char bottom_anchor;
static void rebase(const void *buf, int count, MPI_Datatype t, const void **at, int *n, MPI_Datatype *as) {
    *at = buf;
    *n = count;
    *as = t;
    if (buf != MPI_BOTTOM) return;
    MPI_Aint anchor = 0, displacement;
    PMPI_Get_address(&bottom_anchor, &anchor);
    displacement = -anchor;
    if (PMPI_Type_create_struct(1, &count, &displacement, &t, as) != MPI_SUCCESS || PMPI_Type_commit(as) != MPI_SUCCESS) {
        *as = t; /* PMPI_Pack says what is wrong */
        return;
    }
    *at = &bottom_anchor;
    *n = 1;
}

/* PMPI_Pack of `count` x `t` at `buf` (MPI_BOTTOM too: rebase). */
static int pack_from(const void *buf, int count, MPI_Datatype t, void *out, int out_bytes, int *position) {
    const void *at;
    int n;
    MPI_Datatype as;
    rebase(buf, count, t, &at, &n, &as);
    int rc = PMPI_Pack(at, n, as, out, out_bytes, position, MPI_COMM_WORLD);
    if (as != t) PMPI_Type_free(&as);
    return rc;
}

/* A collective's data as mcd sees it: `bytes` bytes, at `buf` itself or
 * packed into `packed` (malloc'd; NULL for a plain type). */
static int pack_in(const void *buf, int count, MPI_Datatype t, long long bytes, char **packed) {
    *packed = NULL;
    if (plain(t)) return 1;
    *packed = malloc(bytes ? bytes : 1);
    int position = 0;
    if (pack_from(buf, count, t, *packed, (int)bytes, &position) != MPI_SUCCESS || position != bytes) {
        fprintf(stderr, "mcd-mpi: packing %d elements of a datatype gave %d bytes, not %lld\n", count, position, bytes);
        return 0;
    }
    return 1;
}

static void unpack_out(const char *packed, long long bytes, void *buf, int count, MPI_Datatype t) {
    const void *at;
    int n, position = 0;
    MPI_Datatype as;
    rebase(buf, count, t, &at, &n, &as);
    PMPI_Unpack(packed, (int)bytes, &position, (void *)at, n, as, MPI_COMM_WORLD);
    if (as != t) PMPI_Type_free(&as);
}

/* A communicator's state (its mcd group, or none: PMPI), made at the first
 * MPI_Barrier or collective on it (collective, as they are); NULL if MPI
 * keeps no attribute on it. */
static comm_state *state_of(MPI_Comm comm) {
    comm_state *st = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &st, &found) != MPI_SUCCESS) return NULL;
    return found ? st : new_state(comm);
}

/* Where a collective on a communicator runs through mcd: the job's
 * collectives (MPI_COMM_WORLD) or the communicator's group; `rank` is this
 * process's rank there (the communicator's: groups list the members in
 * communicator order). */
typedef struct {
    mcd_group *group; /* NULL: the job */
    int rank, size;
} target;

/* Whether `comm` has an mcd target (the same answer on every member: the
 * world always, another communicator if its members agreed on a group). */
static int target_of(MPI_Comm comm, target *t) {
    if (!active || comm == MPI_COMM_NULL) return 0;
    if (comm == MPI_COMM_WORLD) {
        t->group = NULL;
        t->rank = mcd_rank(job);
        t->size = mcd_size(job);
        return 1;
    }
    comm_state *st = state_of(comm);
    if (!st || !st->group) return 0;
    t->group = st->group;
    t->rank = mcd_group_rank(st->group);
    t->size = st->size;
    return 1;
}

/* Whether `root` is a rank of `t` (an intra-communicator: mcd serves no
 * other). Any other root (MPI_PROC_NULL and MPI_ROOT included: they have a
 * meaning on inter-communicators only) is erroneous, and goes to PMPI,
 * which raises MPI_ERR_ROOT through the communicator's error handler as
 * MPI does. */
static int root_in(const target *t, int root) {
    return root >= 0 && root < t->size;
}

static int t_allreduce(const target *t, const void *in, void *out, size_t n, int dtype, int op) {
    return t->group ? mcd_group_allreduce(t->group, in, out, n, dtype, op) : mcd_allreduce(job, in, out, n, dtype, op);
}
static int t_reduce(const target *t, const void *in, void *out, size_t n, int dtype, int op, int root) {
    return t->group ? mcd_group_reduce(t->group, in, out, n, dtype, op, root) : mcd_reduce(job, in, out, n, dtype, op, root);
}
static int t_bcast(const target *t, void *buf, size_t bytes, int root) {
    return t->group ? mcd_group_bcast(t->group, buf, bytes, root) : mcd_bcast(job, buf, bytes, root);
}

/* The counters of the world's collectives (other communicators keep
 * theirs in their state). */
static comm_state world_state = {.why = NULL};

/* `comm`'s counters, if it has any yet (looked up, never made). */
static comm_state *counters_of(MPI_Comm comm) {
    if (comm == MPI_COMM_WORLD) return &world_state;
    comm_state *st = NULL;
    int found = 0;
    if (!active || comm == MPI_COMM_NULL || PMPI_Comm_get_attr(comm, keyval, &st, &found) != MPI_SUCCESS || !found) return NULL;
    return st;
}

static void served(MPI_Comm comm, int kind) {
    COUNT(coll_mcd[kind]);
    comm_state *st = counters_of(comm);
    if (st) COUNT(st->mcd[kind]);
}

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static int lat_bucket(unsigned long long ns) {
    if (ns < (1ull << LAT_MIN_LOG)) return 0;
    int log = 63 - __builtin_clzll(ns);
    int b = (log - LAT_MIN_LOG) * LAT_SUB + (int)((ns >> (log - 3)) & (LAT_SUB - 1));
    return b < LAT_BUCKETS ? b : LAT_BUCKETS - 1;
}

/* The middle of bucket `b`, ns. */
static double lat_value(int b) {
    int log = LAT_MIN_LOG + b / LAT_SUB;
    double low = (double)(1ull << log) * (1.0 + (double)(b % LAT_SUB) / LAT_SUB);
    return low + (double)(1ull << log) / LAT_SUB / 2;
}

/* A blocking call of kind `lat` on `comm` through mcd, begun at `t0` (now_ns), returns. */
static void timed(MPI_Comm comm, int lat, unsigned long long t0) {
    comm_state *st = counters_of(comm);
    if (st) __atomic_fetch_add(&st->lat[lat].n[lat_bucket(now_ns() - t0)], 1, __ATOMIC_RELAXED);
}

/* The calls in `h`, and its quantile `q` (µs; 0 if none). */
static unsigned long long lat_quantile(const lat_hist *h, double q, double *us) {
    unsigned long long total = 0, seen = 0;
    for (int b = 0; b < LAT_BUCKETS; b++) total += h->n[b];
    *us = 0;
    if (!total) return 0;
    unsigned long long want = (unsigned long long)(q * (double)total);
    if (want < 1) want = 1;
    for (int b = 0; b < LAT_BUCKETS; b++) {
        seen += h->n[b];
        if (seen >= want) {
            *us = lat_value(b) / 1000.0;
            break;
        }
    }
    return total;
}

/* A collective passed to PMPI: `reducible` (or the broadcast's test) said
 * yes (`ok`) but the communicator has no group, or it said no (beyond the
 * limit, or the type or operation). */
static void passed(MPI_Comm comm, int kind, int ok, long long bytes) {
    COUNT(coll_pmpi[kind]);
    comm_state *st = counters_of(comm);
    if (st) COUNT(st->pmpi[kind][ok ? WHY_COMM : bytes < 0 || bytes > max_bytes ? WHY_BYTES : WHY_TYPE]);
}

/* Why `st`'s barrier and collectives run the algorithms they do (mcd_why),
 * into `text`; 0 if it has no mcd barrier. */
static int why_of(const comm_state *st, int world, char *text, size_t len) {
    if (world) return mcd_why(job, text, len) >= 0;
    return st->group && mcd_group_why(st->group, text, len) >= 0;
}

/* Whether `st` had any call through mcd that was timed. */
static int timed_any(const comm_state *st) {
    for (int l = 0; l < LATS; l++)
        for (int b = 0; b < LAT_BUCKETS; b++)
            if (st->lat[l].n[b]) return 1;
    return 0;
}

/* MCD_MPI_REPORT: the latency line and (at the communicator's rank 0) the
 * algorithms line of a communicator: "latency through mcd on C: MPI_Barrier
 * p50 X us, p99 Y us (N calls); ..." and "algorithms on C: barrier ALG (why);
 * collectives ALG (why)". */
static void report_latency(const comm_state *st, int world, const char *name) {
    char line[2048];
    int n = 0;
    for (int l = 0; l < LATS; l++) {
        double p50, p99;
        unsigned long long calls = lat_quantile(&st->lat[l], 0.50, &p50);
        lat_quantile(&st->lat[l], 0.99, &p99);
        if (calls) n += snprintf(line + n, sizeof line - n, "%s %s p50 %.1f us, p99 %.1f us (%llu calls)", n ? ";" : "", lat_names[l], p50, p99, calls);
    }
    if (n) fprintf(stderr, "mcd-mpi: rank %d: latency through mcd on %s:%s\n", mcd_rank(job), name, line);
    char why[2048];
    int first = world ? mcd_rank(job) == 0 : st->group && mcd_group_rank(st->group) == 0;
    if (first && why_of(st, world, why, sizeof why)) fprintf(stderr, "mcd-mpi: rank %d: algorithms on %s: %s\n", mcd_rank(job), name, why);
}

/* MCD_MPI_REPORT: one line for a communicator's collectives. */
static void report_comm(const comm_state *st, int world) {
    const char *const *names = kind_names;
    char line[2048], name[64];
    int n = 0;
    unsigned long long calls = 0;
    for (int k = 0; k < KINDS; k++) {
        calls += st->mcd[k];
        for (int w = 0; w < WHYS; w++) calls += st->pmpi[k][w];
    }
    for (int o = 0; o < OTHERS; o++) calls += st->other[o];
    if (world) snprintf(name, sizeof name, "MPI_COMM_WORLD");
    else snprintf(name, sizeof name, "communicator %#llx (%d ranks)", st->key, st->size);
    if (calls || world || timed_any(st)) report_latency(st, world, name);
    if (!calls && !world) return; /* barriers only */
    if (world) n += snprintf(line + n, sizeof line - n, "MPI_COMM_WORLD:");
    else n += snprintf(line + n, sizeof line - n, "communicator %#llx (%d ranks):", st->key, st->size);
    unsigned long long why_total[WHYS] = {0}, nonblocking = 0;
    for (int k = IBARRIER; k < KINDS; k++) {
        nonblocking += st->mcd[k];
        for (int w = 0; w < WHYS; w++) nonblocking += st->pmpi[k][w];
    }
    for (int k = 0; k < (nonblocking ? KINDS : IBARRIER); k++) {
        unsigned long long p = 0;
        for (int w = 0; w < WHYS; w++) p += st->pmpi[k][w], why_total[w] += st->pmpi[k][w];
        n += snprintf(line + n, sizeof line - n, "%s %llu %s via mcd, %llu via PMPI", k ? ";" : "", st->mcd[k], names[k], p);
    }
    n += snprintf(line + n, sizeof line - n, "; PMPI because:");
    int any = 0;
    for (int w = 0; w < WHYS; w++)
        if (why_total[w]) {
            n += snprintf(line + n, sizeof line - n, "%s %llu %s", any ? "," : "", why_total[w], why_names[w]);
            if (w == WHY_COMM && st->why) n += snprintf(line + n, sizeof line - n, " (%s)", st->why);
            any = 1;
        }
    if (!any) n += snprintf(line + n, sizeof line - n, " nothing");
    any = 0;
    for (int o = 0; o < OTHERS; o++)
        if (st->other[o]) {
            n += snprintf(line + n, sizeof line - n, "%s %llu %s", any ? "," : "; to PMPI, " NOT_IN_MCD ":", st->other[o], other_names[o]);
            any = 1;
        }
    fprintf(stderr, "mcd-mpi: rank %d: collectives on %s\n", mcd_rank(job), line);
}

/* MCD_MPI_REPORT_JSON=PATH: the same report as JSON, one file per rank,
 * written in MPI_Finalize ("%r" in PATH becomes the rank; without it, the
 * rank is appended: PATH.R.json). The communicators freed earlier are kept
 * here as they go. */
static pthread_mutex_t json_lock = PTHREAD_MUTEX_INITIALIZER;
static char *json_buf;
static size_t json_len, json_cap;

static void json_add(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (json_len + (size_t)n + 1 > json_cap) {
        size_t cap = json_cap ? json_cap : 4096;
        while (json_len + (size_t)n + 1 > cap) cap *= 2;
        char *grown = realloc(json_buf, cap);
        if (!grown) return;
        json_buf = grown;
        json_cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(json_buf + json_len, json_cap - json_len, fmt, ap);
    va_end(ap);
    json_len += (size_t)n;
}

/* One communicator's object, appended to the list. */
static void json_comm(const comm_state *st, int world) {
    pthread_mutex_lock(&json_lock);
    json_add("%s{\"communicator\": ", json_len ? ", " : "");
    if (world) json_add("\"MPI_COMM_WORLD\", \"ranks\": %d, \"mcd\": true, \"why_not_mcd\": null", mcd_size(job));
    else {
        json_add("\"%#llx\", \"ranks\": %d, \"mcd\": %s, \"why_not_mcd\": ", st->key, st->size, st->group || !st->why ? "true" : "false");
        if (st->why) json_add("\"%s\"", st->why);
        else json_add("null");
    }
    json_add(", \"calls\": {");
    for (int k = 0; k < KINDS; k++) {
        json_add("%s\"%s\": {\"mcd\": %llu", k ? ", " : "", kind_names[k], st->mcd[k]);
        unsigned long long p = 0;
        for (int w = 0; w < WHYS; w++) p += st->pmpi[k][w];
        json_add(", \"pmpi\": %llu, \"pmpi_because\": {\"no mcd group\": %llu, \"beyond MCD_MPI_MAX_BYTES\": %llu, \"type or operation\": %llu}}", p,
                 st->pmpi[k][WHY_COMM], st->pmpi[k][WHY_BYTES], st->pmpi[k][WHY_TYPE]);
    }
    json_add("}, \"not_in_mcd\": {");
    for (int o = 0, any = 0; o < OTHERS; o++)
        if (st->other[o]) {
            json_add("%s\"%s\": %llu", any ? ", " : "", other_names[o], st->other[o]);
            any = 1;
        }
    json_add("}, \"latency_us\": {");
    for (int l = 0, any = 0; l < LATS; l++) {
        double p50, p99;
        unsigned long long calls = lat_quantile(&st->lat[l], 0.50, &p50);
        lat_quantile(&st->lat[l], 0.99, &p99);
        if (!calls) continue;
        json_add("%s\"%s\": {\"calls\": %llu, \"p50\": %.3f, \"p99\": %.3f}", any ? ", " : "", lat_names[l], calls, p50, p99);
        any = 1;
    }
    char why[2048];
    if (why_of(st, world, why, sizeof why)) {
        for (char *c = why; *c; c++)
            if (*c == '"' || *c == '\\') *c = '\'';
        json_add("}, \"algorithms\": \"%s\"}", why);
    } else {
        json_add("}, \"algorithms\": null}");
    }
    pthread_mutex_unlock(&json_lock);
}

/* Writes this rank's JSON report (MPI_Finalize, mcd still open). */
static void json_write(const char *pattern) {
    int rank = mcd_rank(job);
    char path[4096];
    const char *at = strstr(pattern, "%r");
    if (at) snprintf(path, sizeof path, "%.*s%d%s", (int)(at - pattern), pattern, rank, at + 2);
    else snprintf(path, sizeof path, "%s.%d.json", pattern, rank);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mcd-mpi: rank %d: MCD_MPI_REPORT_JSON: cannot write %s\n", rank, path);
        return;
    }
    mcd_stats s;
    mcd_get_stats(job, &s);
    fprintf(f, "{\"rank\": %d, \"size\": %d, \"algorithm\": \"%s\", \"authentication\": %s,\n", rank, mcd_size(job), mcd_algorithm(job), auth_on ? "true" : "false");
    fprintf(f, " \"barrier\": {\"mcd\": %llu, \"pmpi\": %llu},\n", via_mcd, via_pmpi);
    fprintf(f, " \"mcd\": {\"barriers\": %llu, \"sent\": %llu, \"received\": %llu, \"resends\": %llu, \"answers\": %llu, \"answers_suppressed\": %llu, "
               "\"dropped\": %llu, \"bad_tag\": %llu, \"replayed\": %llu, \"auth_mismatch\": %llu, \"foreign\": %llu, \"superseded\": %llu, "
               "\"sessions_forgotten\": %llu, \"stale_hellos\": %llu, \"overflow\": %llu},\n",
            (unsigned long long)s.barriers, (unsigned long long)s.messages_sent, (unsigned long long)s.frames_received,
            (unsigned long long)s.resends, (unsigned long long)s.answers, (unsigned long long)s.answers_suppressed,
            (unsigned long long)s.frames_dropped, (unsigned long long)s.frames_bad_tag, (unsigned long long)s.frames_replayed,
            (unsigned long long)s.frames_auth_mismatch, (unsigned long long)s.messages_foreign, (unsigned long long)s.joins_superseded,
            (unsigned long long)s.sessions_forgotten, (unsigned long long)s.hellos_stale, (unsigned long long)s.messages_overflow);
    fprintf(f, " \"communicators\": {\"mcd\": %llu, \"inter\": %llu, \"unreachable\": %llu, \"failed\": %llu},\n", comms_mcd, comms_inter,
            comms_unreachable, comms_failed);
    fprintf(f, " \"calls\": {");
    for (int k = 0; k < KINDS; k++) fprintf(f, "%s\"%s\": {\"mcd\": %llu, \"pmpi\": %llu}", k ? ", " : "", kind_names[k], coll_mcd[k], coll_pmpi[k]);
    fprintf(f, "},\n \"small_allgathers_mcd\": {\"MPI_Allgather\": %llu, \"gather_bytes\": %lld", gathers_mcd[0], gather_bytes);
    fprintf(f, "},\n \"not_in_mcd\": {\"why\": \"" NOT_IN_MCD "\"");
    for (int o = 0; o < OTHERS; o++)
        if (other_pmpi[o]) fprintf(f, ", \"%s\": %llu", other_names[o], other_pmpi[o]);
    fprintf(f, "},\n \"persistent\": {\"starts_mcd\": %llu, \"inits_pmpi\": %llu}, \"completed_in_finalize\": %llu,\n",
            persistent_starts_mcd, persistent_inits_pmpi, finalize_pending);
    pthread_mutex_lock(&json_lock);
    fprintf(f, " \"per_communicator\": [%s]}\n", json_buf ? json_buf : "");
    pthread_mutex_unlock(&json_lock);
    fclose(f);
}

/* Whether mcd takes a reduction of `count` elements of `t` with `op` on
 * `comm` (a function of the signature, the byte count and the operation,
 * which MPI makes the same on every rank); if so, its bytes, its mcd type
 * and operation. */
static int reducible(MPI_Comm comm, int count, MPI_Datatype t, MPI_Op op, long long *bytes, int *dtype, int *mop) {
    if (!active || comm == MPI_COMM_NULL) return 0;
    *bytes = bytes_of(count, t);
    if (*bytes < 0 || *bytes > max_bytes) return 0;
    *dtype = signature_dtype(t, 0);
    if (*bytes == 0) *dtype = MCD_INT64; /* no data: any type the operation applies to */
    if (*dtype < 0) return 0;
    *mop = op_of(op, *dtype);
    if (*mop < 0) return 0;
    return plain(t) || packs_plainly();
}
/* (The communicator is looked at last, by target_of: its state is made
 * only by calls that would go through mcd, on every member alike.) */

static const size_t mcd_sizes[] = {0, 4, 8, 4, 8, 4, 8}; /* by MCD_INT32 ... MCD_DOUBLE */

/* mcd's allreduce (`all`) or reduce to `root` (a rank: root_in) of
 * `count` elements of `t`: packed when `t` is not plain. */
static int reduce_via_mcd(const target *to, const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, long long bytes, int dtype, int mop, int all,
                          int root) {
    int result_here = all || root == to->rank;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t n = (size_t)bytes / mcd_sizes[dtype];
    if (plain(t)) {
        const void *in = in_place ? NULL : sendbuf;
        return all ? t_allreduce(to, in, recvbuf, n, dtype, mop) : t_reduce(to, in, recvbuf, n, dtype, mop, root);
    }
    char *packed;
    int rc = MCD_OK;
    if (!pack_in(in_place ? recvbuf : sendbuf, count, t, bytes, &packed)) rc = MCD_ERR_ARGUMENT;
    /* In place on the packed copy; the result unpacked where MPI wants it. */
    if (rc == MCD_OK) rc = all ? t_allreduce(to, NULL, packed, n, dtype, mop) : t_reduce(to, result_here ? NULL : packed, result_here ? packed : NULL, n, dtype, mop, root);
    if (rc == MCD_OK && result_here) unpack_out(packed, bytes, recvbuf, count, t);
    free(packed);
    return rc;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    int dtype, mop;
    long long bytes = -1;
    target to;
    unsigned long long t0 = now_ns();
    int ok = reducible(comm, count, datatype, op, &bytes, &dtype, &mop);
    if (ok && target_of(comm, &to)) {
        int rc = reduce_via_mcd(&to, sendbuf, recvbuf, count, datatype, bytes, dtype, mop, 1, 0);
        if (rc == MCD_OK) {
            served(comm, ALLREDUCE);
            timed(comm, LAT_ALLREDUCE, t0);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Allreduce on %s failed: %s\n", comm_name(comm), mcd_last_error());
        return raise_error(comm, mpi_error_of(rc));
    }
    passed(comm, ALLREDUCE, ok, bytes);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
    int dtype, mop;
    long long bytes = -1;
    target to;
    unsigned long long t0 = now_ns();
    int ok = reducible(comm, count, datatype, op, &bytes, &dtype, &mop);
    if (ok && target_of(comm, &to) && root_in(&to, root)) {
        int rc = reduce_via_mcd(&to, sendbuf, recvbuf, count, datatype, bytes, dtype, mop, 0, root);
        if (rc == MCD_OK) {
            served(comm, REDUCE);
            timed(comm, LAT_REDUCE, t0);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Reduce on %s failed: %s\n", comm_name(comm), mcd_last_error());
        return raise_error(comm, mpi_error_of(rc));
    }
    passed(comm, REDUCE, ok, bytes);
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

/* Broadcasts go through mcd whatever the type (a function of the byte
 * count alone): a plain type as its bytes, any other packed at the root
 * and unpacked elsewhere. */
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    long long bytes = -1;
    target to;
    unsigned long long t0 = now_ns();
    if (active && comm != MPI_COMM_NULL) bytes = bytes_of(count, datatype);
    int ok = bytes >= 0 && bytes <= max_bytes && (plain(datatype) || packs_plainly());
    if (ok && target_of(comm, &to) && root_in(&to, root)) {
        int rc;
        if (plain(datatype)) {
            rc = t_bcast(&to, buffer, (size_t)bytes, root);
        } else {
            char *packed = NULL;
            int at_root = to.rank == root;
            rc = !at_root || pack_in(buffer, count, datatype, bytes, &packed) ? MCD_OK : MCD_ERR_ARGUMENT;
            if (!at_root) packed = malloc(bytes ? bytes : 1);
            if (rc == MCD_OK) rc = t_bcast(&to, packed, (size_t)bytes, root);
            if (rc == MCD_OK && !at_root) unpack_out(packed, bytes, buffer, count, datatype);
            free(packed);
        }
        if (rc == MCD_OK) {
            served(comm, BCAST);
            timed(comm, LAT_BCAST, t0);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Bcast on %s failed: %s\n", comm_name(comm), mcd_last_error());
        return raise_error(comm, mpi_error_of(rc));
    }
    passed(comm, BCAST, ok, bytes);
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

/* Nonblocking collectives. MPI_Ibarrier, MPI_Iallreduce, MPI_Ireduce and
 * MPI_Ibcast go through mcd under the blocking forms' rules, on MPI_COMM_WORLD
 * and on every communicator that already has its mcd state (made by a
 * blocking collective or barrier bound for mcd: making it is collective and
 * blocking, and starting a nonblocking collective must not wait for other
 * ranks, so until then they go to PMPI; the same on every rank, since every
 * rank calls the same collectives on a communicator in the same order).
 *
 * Each one is an mcd request (mcd_istart / mcd_group_istart: queued on the
 * communicator's collectives barrier, run in issue order, one after the
 * other, carried by mcd's progress agent while the program computes) and,
 * for the application, a generalized request (PMPI_Grequest_start): a real
 * MPI handle that MPI_Wait, MPI_Test, MPI_Waitall ... accept, mixed with the
 * MPI's own requests. MPI cannot complete it by itself: the interposer
 * interposes the wait and test family, and there, in the application's own
 * thread, looks up its requests; one whose mcd request is done (a
 * nonblocking mcd_request_test) has its result written where MPI wants it
 * and is completed with PMPI_Grequest_complete; then the PMPI call runs on
 * the whole array. A wait whose mcd requests are not done yet alternates
 * mcd_request_test and a PMPI_Test of one of them (MPI's progress for its
 * own requests: a legal program may need them to progress while it waits
 * for ours) until the PMPI test form succeeds, then hands over to the PMPI
 * wait form once none of ours is pending.
 *
 * Why this is sound at every thread level in both MPIs: the only MPI calls
 * made for these requests (PMPI_Grequest_complete, PMPI_Test, the PMPI
 * wait/test forms) are made inside an MPI call of the application, by the
 * thread that made it, so they obey whatever the thread level allows
 * (SINGLE, FUNNELED, SERIALIZED as much as MULTIPLE); mcd's own threads
 * never call MPI. Under MPI_THREAD_MULTIPLE two threads may test requests
 * at once: each request is completed by the one thread that claims it (an
 * atomic state). Neither MPI offers more: a generalized request has no
 * progress callback in MPI (MPICH's MPIX_Grequest_start has a poll_fn,
 * Open MPI 4.1 nothing alike), and completing it from mcd's agent thread
 * would be an MPI call from a thread MPI does not know of, legal only
 * under MPI_THREAD_MULTIPLE.
 *
 * A communicator freed while some are in flight lives on until the last
 * completes (MPI_Comm_free lets pending operations complete normally).
 * MPI_Finalize with some never completed (erroneous in MPI) completes them
 * first, saying so on stderr. MPI_Cancel and MPI_Request_free of one are
 * erroneous in MPI: both are refused, as both MPIs refuse them for their
 * own (see "Freeing" above MPI_Request_free).
 *
 * Persistent collectives. MPI_Barrier_init, MPI_Allreduce_init,
 * MPI_Reduce_init and MPI_Bcast_init (MPI 4.0: MPICH 4) and their MPIX_
 * forms (Open MPI 4.1's pcollreq extension) go through mcd under the same
 * rules: each start (MPI_Start, MPI_Startall) is one mcd request with the
 * arguments given at init. The handle must stay valid across starts, which
 * a generalized request cannot (it completes once): it is a persistent
 * receive of 0 bytes from this rank on a private duplicate of
 * MPI_COMM_SELF (PMPI_Recv_init) with a tag no other live request has
 * (take_completion), started by MPI_Start beside the mcd
 * request and completed, once the mcd request is done, by a send to self
 * from the same waiting thread; so MPI's own wait and test forms complete
 * it, and it is inactive again after. A start that failed in mcd
 * completes alike, and the wait or test form returns its error (see
 * "Failures"), with the cause on stderr. MPI_Request_free frees it
 * (completing an active one first), unless another thread is in a wait
 * or test form with it (see "Freeing"). */

enum { OP_INACTIVE, OP_RUNNING, OP_SETTLING, OP_DONE };

/* A persistent request's completion: a receive of a tag on a private
 * duplicate of MPI_COMM_SELF. */
typedef struct {
    MPI_Comm comm;
    int tag;
} completion;

typedef struct nb_op {
    MPI_Request req;         /* the application's handle (MPI's request), found by find_op */
    int users;               /* persistent: wait and test forms holding it now (under ops_lock; see "Freeing") */
    mcd_request *mr;         /* mcd's, while running */
    comm_state *st;          /* its communicator's counters (held); NULL: none */
    int kind;                /* IBARRIER ... IBCAST */
    int state;               /* OP_*, atomic */
    int error;               /* the MPI code of its outcome */
    /* Where its result goes: `out` (the application's buffer, or `packed`). */
    void *out;
    int result_here;
    char *packed;            /* mcd's bytes of a type that is not plain (malloc'd) */
    void *user_buf;          /* unpacked into, with count and type */
    int count;
    MPI_Datatype type;       /* dup'd when not plain */
    long long bytes;
    /* Persistent: what every start runs (else unused). */
    int persistent;
    completion done;         /* its completion's receive: communicator and tag */
    MPI_Comm comm;
    const void *sendbuf;
    void *recvbuf;
    MPI_Datatype dtype_arg;  /* the request's own (a dup) when not predefined */
    MPI_Op op_arg;
    int root;
    struct nb_op *prev, *next;
} nb_op;

static pthread_mutex_t ops_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_op *ops_first;
static int live_ops; /* registered requests (atomic): 0, and the wait/test family is PMPI's alone */
static int live_persistent; /* registered persistent requests (atomic): 0, and no form holds any (see "Freeing") */
/* Persistent requests' completions (review rev30, finding 2: a tag was a
 * counter modulo 32767, so the 32768th request shared the first's): each
 * live request has a tag of its own; a freed request's tag is reused, and
 * when every tag up to MPI_TAG_UB is held by a live request, another
 * duplicate of MPI_COMM_SELF begins anew. Under ops_lock. */
static MPI_Comm self_comm = MPI_COMM_NULL;
static long long next_tag, tag_ub; /* (long long: MPI_TAG_UB may be INT_MAX) */
static completion *free_completions;
static size_t free_count, free_cap;

static completion take_completion(void) {
    if (free_count) return free_completions[--free_count];
    if (self_comm == MPI_COMM_NULL || next_tag > tag_ub) {
        PMPI_Comm_dup(MPI_COMM_SELF, &self_comm);
        /* Its own errors (none expected) are returned, never fatal. */
        PMPI_Comm_set_errhandler(self_comm, MPI_ERRORS_RETURN);
        int *ub = NULL, found = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
        tag_ub = found && ub && *ub >= 32767 ? *ub : 32767; /* MPI's least */
        next_tag = 0;
    }
    return (completion){self_comm, (int)next_tag++};
}

/* Gives a freed request's completion back (if there is no room to keep
 * it, it is never reused: still sound). */
static void give_back_completion(completion c) {
    if (free_count == free_cap) {
        size_t cap = free_cap ? 2 * free_cap : 64;
        completion *grown = realloc(free_completions, cap * sizeof *grown);
        if (!grown) return;
        free_completions = grown;
        free_cap = cap;
    }
    free_completions[free_count++] = c;
}

static void register_op(nb_op *op) {
    pthread_mutex_lock(&ops_lock);
    op->next = ops_first;
    if (ops_first) ops_first->prev = op;
    ops_first = op;
    pthread_mutex_unlock(&ops_lock);
    __atomic_fetch_add(&live_ops, 1, __ATOMIC_RELEASE);
}

/* Takes `op` out of the list (ops_lock held); live_ops is the caller's. */
static void unregister_locked(nb_op *op) {
    if (op->prev) op->prev->next = op->next; else if (ops_first == op) ops_first = op->next;
    if (op->next) op->next->prev = op->prev;
    op->prev = op->next = NULL;
}

static void unregister_op(nb_op *op) {
    pthread_mutex_lock(&ops_lock);
    unregister_locked(op);
    pthread_mutex_unlock(&ops_lock);
    __atomic_fetch_sub(&live_ops, 1, __ATOMIC_RELEASE);
}

/* The registered request `r`, if it is one of ours (ops_lock held). */
static nb_op *find_locked(MPI_Request r) {
    nb_op *op = ops_first;
    while (op && op->req != r) op = op->next;
    return op;
}

/* The registered request `r`, if it is one of ours. */
static nb_op *find_op(MPI_Request r) {
    if (r == MPI_REQUEST_NULL || !__atomic_load_n(&live_ops, __ATOMIC_ACQUIRE)) return NULL;
    pthread_mutex_lock(&ops_lock);
    nb_op *op = find_locked(r);
    pthread_mutex_unlock(&ops_lock);
    return op;
}

/* The persistent ops a wait or test form (or MPI_Start) holds while it
 * runs, so that MPI_Request_free in another thread refuses to free them
 * (see "Freeing"). */
typedef struct {
    nb_op *few[8];
    nb_op **ops;
    int n;
} held;

static void hold(held *h, int count, const MPI_Request reqs[]) {
    h->ops = h->few;
    h->n = 0;
    if (!reqs || count <= 0 || !__atomic_load_n(&live_persistent, __ATOMIC_ACQUIRE)) return; /* (no lock on a nonblocking one's path) */
    pthread_mutex_lock(&ops_lock);
    for (int i = 0; i < count; i++) {
        nb_op *op = reqs[i] == MPI_REQUEST_NULL ? NULL : find_locked(reqs[i]);
        if (!op || !op->persistent) continue;
        if (h->n == 8 && h->ops == h->few) {
            nb_op **more = malloc(sizeof *more * (size_t)count);
            if (!more) break; /* (unheld: only a racing free could misbehave) */
            memcpy(more, h->few, sizeof h->few);
            h->ops = more;
        }
        op->users++;
        h->ops[h->n++] = op;
    }
    pthread_mutex_unlock(&ops_lock);
}

static int let_go(held *h, int rc) {
    if (!h->n) return rc;
    pthread_mutex_lock(&ops_lock);
    for (int i = 0; i < h->n; i++) h->ops[i]->users--;
    pthread_mutex_unlock(&ops_lock);
    if (h->ops != h->few) free(h->ops);
    return rc;
}

/* The generalized request's callbacks. */
static int op_query(void *extra, MPI_Status *status) {
    (void)extra;
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    /* Success even for a failure: MPI would raise a generalized request's
     * error on MPI_COMM_WORLD's handler; the wait and test forms raise it
     * on the collective's communicator instead (see "Failures"). */
    status->MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
}

static void drop_buffers(nb_op *op) {
    free(op->packed);
    op->packed = NULL;
    if (op->type != MPI_DATATYPE_NULL) PMPI_Type_free(&op->type);
    op->type = MPI_DATATYPE_NULL;
}

/* A failed op's error is the program's now (or never will be): cleared,
 * and its communicator's state, held until then, released. (An op that
 * did not fail holds nothing once settled, and an inactive persistent
 * op's `st` is not held.) */
static void failure_taken(nb_op *op) {
    if (op->error == MPI_SUCCESS) return;
    comm_state *st = op->st;
    op->st = NULL;
    op->error = MPI_SUCCESS;
    if (st && st != &world_state) release_state(st);
}

/* MPI calls it inside its own wait, test or free, holding its own locks:
 * no MPI call here (MPICH under MPI_THREAD_MULTIPLE aborted in a
 * PMPI_Type_free made here, "Assertion failed in type_free.c"): the
 * settling thread freed op's type already (settle). */
static int op_free(void *extra) {
    nb_op *op = extra;
    failure_taken(op);
    unregister_op(op);
    free(op->packed);
    free(op);
    return MPI_SUCCESS;
}

static int op_cancel(void *extra, int complete) {
    (void)extra, (void)complete; /* cancelling a collective is erroneous: nothing happens */
    return MPI_SUCCESS;
}

/* How long a wait form sleeps in mcd for one of its collectives between
 * two turns of MPI's own progress, microseconds (it wakes at once when
 * the collective's frames come). Spinning instead (a test, then
 * sched_yield) took the cores from the ranks the collective waits for:
 * 4 and 8 ranks on 2 cores made MPI_Ibarrier and MPI_Iallreduce, then
 * MPI_Wait, 3-15 times their blocking forms. */
#define NAP_US 100

/* Takes `op`'s outcome if it has one (`block`: 0 does not wait, a
 * positive number waits for it that many microseconds at most, a negative
 * one until it comes): its result where MPI wants it, then its MPI
 * request completed. True once it is complete. Only the thread that
 * claims a running op settles it. */
static int settle(nb_op *op, int block) {
    int running = OP_RUNNING;
    if (!__atomic_compare_exchange_n(&op->state, &running, OP_SETTLING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return running != OP_SETTLING; /* done (or inactive); or another thread settles it now */
    int done = 1, rc;
    if (block < 0) rc = mcd_request_wait(op->mr, op->out);
    else if (block > 0) rc = mcd_request_wait_for(op->mr, op->out, (unsigned)block, &done);
    else rc = mcd_request_test(op->mr, op->out, &done);
    if (rc == MCD_OK && !done) {
        __atomic_store_n(&op->state, OP_RUNNING, __ATOMIC_RELEASE);
        return 0;
    }
    op->mr = NULL; /* freed by mcd */
    op->error = MPI_SUCCESS;
    if (rc != MCD_OK) {
        op->error = mpi_error_of(rc);
        fprintf(stderr, "mcd-mpi: rank %d: %s failed: %s\n", mcd_rank(job), kind_names[op->kind], mcd_last_error());
    } else if (op->packed && op->result_here) {
        unpack_out(op->packed, op->bytes, op->user_buf, op->count, op->type);
    }
    if (!op->persistent) drop_buffers(op); /* here, in the application's call: op_free may make no MPI call */
    if (op->persistent) {
        char byte = 0;
        PMPI_Send(&byte, 0, MPI_BYTE, 0, op->done.tag, op->done.comm);
    }
    /* A failure keeps its communicator's state until its error is taken
     * (failure_taken), so that failures_in can tell whether the program
     * freed the communicator meanwhile. */
    int failed = op->error != MPI_SUCCESS;
    comm_state *st = op->st;
    if (!failed) op->st = NULL;
    int persistent = op->persistent;
    MPI_Request handle = op->req;
    __atomic_store_n(&op->state, persistent ? OP_INACTIVE : OP_DONE, __ATOMIC_RELEASE);
    if (!persistent) PMPI_Grequest_complete(handle); /* MPI may free op now (op_free) */
    if (!failed && st && st != &world_state) release_state(st);
    return 1;
}

/* MPI's own progress while a wait waits for `op` (running): a test of its
 * request, which MPI cannot complete yet. */
static void mpi_progress(nb_op *op) {
    MPI_Request r = op->req;
    int flag = 0;
    PMPI_Test(&r, &flag, MPI_STATUS_IGNORE);
}

/* Settles what it can of `reqs`: the first of ours still running, or
 * NULL; `*failed` counts those complete whose mcd collective failed. */
static nb_op *settle_array(int count, MPI_Request reqs[], int *failed) {
    nb_op *pending = NULL;
    *failed = 0;
    if (!reqs || !__atomic_load_n(&live_ops, __ATOMIC_ACQUIRE)) return NULL;
    for (int i = 0; i < count; i++) {
        nb_op *op = find_op(reqs[i]);
        if (!op) continue;
        if (!settle(op, 0)) {
            if (!pending) pending = op;
        } else if (op->error != MPI_SUCCESS) {
            ++*failed;
        }
    }
    return pending;
}

/* Failures (review rev30, finding 5). A nonblocking or persistent
 * collective that failed in mcd completes in MPI's eyes with MPI_SUCCESS
 * (MPI raises a generalized request's error on MPI_COMM_WORLD's handler,
 * having no communicator: fatal by default, whatever the program set on
 * its communicator); its error stays in its op, and the wait or test form
 * that completes it returns it as MPI returns a request's error: the
 * forms completing one request (MPI_Wait, MPI_Test, MPI_Waitany,
 * MPI_Testany; MPI_Request_get_status, which leaves it to the completion
 * too) return the error itself, with status.MPI_ERROR; those completing
 * several return MPI_ERR_IN_STATUS, every completed status's MPI_ERROR
 * set; raised first through the collective's communicator's error handler
 * (MPI_COMM_WORLD's if the program freed the communicator meanwhile).
 * Taken from the ops before the PMPI form runs (it may free them). */
typedef struct {
    int index, code;
    MPI_Comm comm; /* raised on */
    nb_op *op;     /* a persistent one's (it outlives its completion), else NULL */
} failure;

typedef struct {
    failure *f;
    int n;
} failures;

static failures failures_in(int count, MPI_Request reqs[], int failed) {
    failures fs = {NULL, 0};
    if (!failed || !(fs.f = malloc(sizeof *fs.f * (size_t)failed))) return fs;
    for (int i = 0; i < count && fs.n < failed; i++) {
        nb_op *op = find_op(reqs[i]);
        if (!op || op->error == MPI_SUCCESS) continue;
        int state = __atomic_load_n(&op->state, __ATOMIC_ACQUIRE);
        if (state != OP_DONE && state != OP_INACTIVE) continue;
        pthread_mutex_lock(&states_lock);
        int freed = op->st && op->st != &world_state && op->st->freed;
        pthread_mutex_unlock(&states_lock);
        fs.f[fs.n++] = (failure){i, op->error, freed ? MPI_COMM_WORLD : op->comm, op->persistent ? op : NULL};
    }
    return fs;
}

/* The error of the request at `index`, which the PMPI form completed
 * (MPI_SUCCESS if it did not fail), and its communicator; `take`: the
 * program has it now. */
static int failure_at(failures *fs, int index, MPI_Comm *comm, int take) {
    for (int k = 0; k < fs->n; k++) {
        failure *f = &fs->f[k];
        if (f->index != index || f->code == MPI_SUCCESS) continue;
        int code = f->code;
        *comm = f->comm;
        if (take) {
            if (f->op) failure_taken(f->op); /* a nonblocking one's op is freed by MPI */
            f->code = MPI_SUCCESS;
        }
        return code;
    }
    return MPI_SUCCESS;
}

/* The end of a form completing one request: `done` whether it completed
 * (the one at `index`), PMPI's `rc`, `take` as for failure_at. */
static int one_done(failures *fs, int done, int index, MPI_Status *status, int rc, int take) {
    int code = MPI_SUCCESS;
    MPI_Comm comm = MPI_COMM_WORLD;
    if (fs->n && done && rc == MPI_SUCCESS) code = failure_at(fs, index, &comm, take);
    free(fs->f);
    if (code == MPI_SUCCESS) return rc;
    if (status != MPI_STATUS_IGNORE) status->MPI_ERROR = code;
    return raise_error(comm, code);
}

/* The end of a form completing several: `n` completed, the i-th the
 * request at indices[i] (NULL: at i) with statuses[i]; PMPI's `rc` (when
 * it is MPI_ERR_IN_STATUS, MPI raised it already: ours are added to the
 * statuses). */
static int some_done(failures *fs, int n, const int *indices, MPI_Status statuses[], int rc) {
    int any = 0;
    MPI_Comm first = MPI_COMM_WORLD;
    if (fs->n && (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) && n != MPI_UNDEFINED) {
        for (int i = 0; i < n; i++) {
            MPI_Status *s = statuses == MPI_STATUSES_IGNORE ? NULL : &statuses[i];
            if (rc == MPI_ERR_IN_STATUS && (!s || s->MPI_ERROR == MPI_ERR_PENDING)) continue; /* not completed (or not known) */
            MPI_Comm comm = MPI_COMM_WORLD;
            int code = failure_at(fs, indices ? indices[i] : i, &comm, 1);
            if (s && (rc == MPI_SUCCESS || code != MPI_SUCCESS)) s->MPI_ERROR = code;
            if (code != MPI_SUCCESS && !any) any = 1, first = comm;
        }
    }
    free(fs->f);
    if (!any || rc == MPI_ERR_IN_STATUS) return rc;
    return raise_error(first, MPI_ERR_IN_STATUS);
}

/* Starts `op` (filled in by the caller: kind, buffers...) on `to`:
 * `input` of `n` mcd elements of `dtype` (a broadcast: bytes). */
static int start_op(nb_op *op, const target *to, int call, const void *input, size_t n, int dtype, int mop, int root) {
    int rc = to->group ? mcd_group_istart(to->group, call, input, n, dtype, mop, root, &op->mr)
                       : mcd_istart(job, call, input, n, dtype, mop, root, &op->mr);
    if (rc != MCD_OK) {
        fprintf(stderr, "mcd-mpi: rank %d: %s could not start: %s\n", mcd_rank(job), kind_names[op->kind], mcd_last_error());
        return mpi_error_of(rc);
    }
    if (op->st && op->st != &world_state) hold_state(op->st);
    __atomic_store_n(&op->state, OP_RUNNING, __ATOMIC_RELEASE);
    return MPI_SUCCESS;
}

static nb_op *new_op(int kind, MPI_Comm comm) {
    nb_op *op = calloc(1, sizeof *op);
    op->kind = kind;
    op->type = MPI_DATATYPE_NULL;
    op->st = counters_of(comm);
    op->comm = comm;
    return op;
}

/* A nonblocking allreduce (`all`) or reduce to `root` (a rank: root_in) on
 * `to` of what MPI passed, started as `op`; MPI_SUCCESS or an error (op
 * not started). */
static int start_reduction(nb_op *op, const target *to, const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, long long bytes,
                           int dtype, int mop, int all, int root) {
    int in_place = sendbuf == MPI_IN_PLACE;
    op->result_here = all || root == to->rank;
    op->bytes = bytes;
    size_t n = (size_t)bytes / mcd_sizes[dtype];
    const void *input = in_place ? recvbuf : sendbuf;
    if (!plain(t)) {
        if (!pack_in(input, count, t, bytes, &op->packed)) return MPI_ERR_OTHER;
        input = op->packed;
        if (op->result_here) {
            PMPI_Type_dup(t, &op->type);
            op->user_buf = recvbuf;
            op->count = count;
            op->out = op->packed;
        }
    } else {
        op->out = op->result_here ? recvbuf : NULL;
    }
    return start_op(op, to, all ? MCD_CALL_ALLREDUCE : MCD_CALL_REDUCE, input, n, dtype, mop, all ? 0 : root);
}

static int start_broadcast(nb_op *op, const target *to, void *buffer, int count, MPI_Datatype t, long long bytes, int root) {
    int at_root = to->rank == root;
    op->result_here = !at_root;
    op->bytes = bytes;
    const void *input = at_root ? buffer : NULL;
    if (!plain(t)) {
        if (at_root) {
            if (!pack_in(buffer, count, t, bytes, &op->packed)) return MPI_ERR_OTHER;
            input = op->packed;
        } else {
            op->packed = malloc(bytes ? bytes : 1);
            PMPI_Type_dup(t, &op->type);
            op->user_buf = buffer;
            op->count = count;
            op->out = op->packed;
        }
    } else {
        op->out = at_root ? NULL : buffer;
    }
    return start_op(op, to, MCD_CALL_BCAST, input, (size_t)bytes, 0, 0, root);
}

/* A started op handed to the application as a generalized request. */
static int hand_over(nb_op *op, MPI_Request *request) {
    PMPI_Grequest_start(op_query, op_free, op_cancel, op, &op->req);
    *request = op->req;
    register_op(op);
    return MPI_SUCCESS;
}

/* A nonblocking collective that did not start (`code`), raised on its
 * communicator. */
static int failed_start(nb_op *op, MPI_Comm comm, int code) {
    fprintf(stderr, "mcd-mpi: %s on %s failed to start\n", kind_names[op->kind], comm_name(comm));
    drop_buffers(op);
    free(op);
    return raise_error(comm, code);
}

/* A communicator's mcd target for a nonblocking collective: only one whose
 * state exists already (made by its constructor, or by a blocking
 * collective: see above), or one of a single rank (MPI_COMM_SELF, say),
 * whose state waits for no other rank. */
static int nonblocking_target(MPI_Comm comm, target *t) {
    if (!active || comm == MPI_COMM_NULL) return 0;
    if (comm != MPI_COMM_WORLD && !counters_of(comm)) {
        int size = 0, inter = 0;
        PMPI_Comm_test_inter(comm, &inter);
        PMPI_Comm_size(comm, &size);
        if (inter || size != 1) return 0;
    }
    return target_of(comm, t);
}

/* The collectives mcd does not implement: counted (per rank and per
 * communicator, for the report), then PMPI's. */
static void not_in_mcd(MPI_Comm comm, int which) {
    COUNT(other_pmpi[which]);
    comm_state *st = active ? counters_of(comm) : NULL;
    if (st) COUNT(st->other[which]);
}
#define GATHER_ARGS const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt
/* Small gathers through mcd. An allgather of b bytes per rank over n
 * ranks is a bitwise-or allreduce of n x b zeroed bytes, each rank's block
 * at its offset (rank x b): exact, and the release is one multicast of the
 * whole result; a gather is the same reduce to the root. Every message
 * carries all n x b bytes, so only small ones go this way: n x b at most
 * MCD_MPI_GATHER_BYTES (default 1024, within one frame) and at most
 * MCD_MPI_MAX_BYTES. The choice is a function of the signature (b from each
 * rank's own count and type, equal by MPI's rules; the root's receive
 * count and type for a gather) and n, the same on every rank. Blocks of a
 * type that is not plain are packed and unpacked, as for the others.
 * `root` < 0: an allgather. Returns -1 if mcd does not take it, else the
 * MPI return code. */
static int gather_via_mcd(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm) {
    if (!active || comm == MPI_COMM_NULL) return -1;
    int inter = 0, size = 0, rank = 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) return -1;
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    int result_here = root < 0 || rank == root;
    /* This rank's block: its own send count and type, or (in place, or
     * the root, whose receive side MPI makes significant) the receive's. */
    int in_place = sb == MPI_IN_PLACE;
    long long b = result_here ? bytes_of(rc, rt) : bytes_of(sc, st);
    if (b <= 0 || b * size > gather_bytes || b * size > max_bytes) return -1;
    if (!packs_plainly() && !(plain(result_here ? rt : st) && (in_place || plain(st)))) return -1;
    target to;
    if (!target_of(comm, &to)) return -1;
    long long total = b * size, words = (total + 7) / 8;
    unsigned char *buf = calloc((size_t)words, 8);
    if (!buf) return -1;
    const void *mine = sb;
    int mine_count = sc;
    MPI_Datatype mine_type = st;
    if (in_place) {
        MPI_Aint lb = 0, extent = 0;
        PMPI_Type_get_extent(rt, &lb, &extent);
        mine = (const char *)rb + (MPI_Aint)rank * rc * extent;
        mine_count = rc;
        mine_type = rt;
    }
    int ok = 1, position = 0;
    if (plain(mine_type)) memcpy(buf + (size_t)rank * b, mine, (size_t)b);
    else ok = pack_from(mine, mine_count, mine_type, buf + (size_t)rank * b, (int)b, &position) == MPI_SUCCESS && position == b;
    int rc_mcd = ok ? MCD_OK : MCD_ERR_ARGUMENT;
    if (ok) {
        rc_mcd = root < 0 ? t_allreduce(&to, NULL, buf, (size_t)words, MCD_UINT64, MCD_BOR)
                          : t_reduce(&to, result_here ? NULL : buf, result_here ? buf : NULL, (size_t)words, MCD_UINT64, MCD_BOR, root);
    }
    if (rc_mcd == MCD_OK && result_here) {
        if (plain(rt)) memcpy(rb, buf, (size_t)total);
        else unpack_out((const char *)buf, total, rb, rc * size, rt);
    }
    free(buf);
    if (rc_mcd != MCD_OK) {
        fprintf(stderr, "mcd-mpi: %s on %s failed: %s\n", root < 0 ? "MPI_Allgather" : "MPI_Gather", comm_name(comm), mcd_last_error());
        return raise_error(comm, mpi_error_of(rc_mcd));
    }
    COUNT(gathers_mcd[root < 0 ? 0 : 1]);
    return MPI_SUCCESS;
}

/* MPI_Gather stays with PMPI: gather_via_mcd serves it correctly (a reduce
 * to the root), but the MPI's own lets a non-root return once its block is
 * sent, where mcd's reduce waits for its epoch, so back-to-back gathers ran
 * about 10x slower through mcd (8 bytes a rank, 4 ranks, Open MPI 4.1:
 * p50 7 us against 52-106 us, 2026-11-26, on a loaded machine). */
int MPI_Gather(GATHER_ARGS, int root, MPI_Comm comm) {
    not_in_mcd(comm, O_GATHER);
    return PMPI_Gather(sb, sc, st, rb, rc, rt, root, comm);
}
int MPI_Gatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rcs[], const int displs[], MPI_Datatype rt, int root, MPI_Comm comm) {
    not_in_mcd(comm, O_GATHERV);
    return PMPI_Gatherv(sb, sc, st, rb, rcs, displs, rt, root, comm);
}
int MPI_Allgather(GATHER_ARGS, MPI_Comm comm) {
    int rc_mcd = gather_via_mcd(sb, sc, st, rb, rc, rt, -1, comm);
    if (rc_mcd >= 0) return rc_mcd;
    not_in_mcd(comm, O_ALLGATHER);
    return PMPI_Allgather(sb, sc, st, rb, rc, rt, comm);
}
int MPI_Allgatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rcs[], const int displs[], MPI_Datatype rt, MPI_Comm comm) {
    not_in_mcd(comm, O_ALLGATHERV);
    return PMPI_Allgatherv(sb, sc, st, rb, rcs, displs, rt, comm);
}
int MPI_Scatter(GATHER_ARGS, int root, MPI_Comm comm) {
    not_in_mcd(comm, O_SCATTER);
    return PMPI_Scatter(sb, sc, st, rb, rc, rt, root, comm);
}
int MPI_Scatterv(const void *sb, const int scs[], const int displs[], MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm) {
    not_in_mcd(comm, O_SCATTERV);
    return PMPI_Scatterv(sb, scs, displs, st, rb, rc, rt, root, comm);
}
int MPI_Alltoall(GATHER_ARGS, MPI_Comm comm) {
    not_in_mcd(comm, O_ALLTOALL);
    return PMPI_Alltoall(sb, sc, st, rb, rc, rt, comm);
}
int MPI_Alltoallv(const void *sb, const int scs[], const int sd[], MPI_Datatype st, void *rb, const int rcs[], const int rd[], MPI_Datatype rt, MPI_Comm comm) {
    not_in_mcd(comm, O_ALLTOALLV);
    return PMPI_Alltoallv(sb, scs, sd, st, rb, rcs, rd, rt, comm);
}
int MPI_Reduce_scatter(const void *sb, void *rb, const int rcs[], MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    not_in_mcd(comm, O_REDUCE_SCATTER);
    return PMPI_Reduce_scatter(sb, rb, rcs, t, op, comm);
}
int MPI_Reduce_scatter_block(const void *sb, void *rb, int rc, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    not_in_mcd(comm, O_REDUCE_SCATTER_BLOCK);
    return PMPI_Reduce_scatter_block(sb, rb, rc, t, op, comm);
}
int MPI_Scan(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    not_in_mcd(comm, O_SCAN);
    return PMPI_Scan(sb, rb, count, t, op, comm);
}
int MPI_Exscan(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    not_in_mcd(comm, O_EXSCAN);
    return PMPI_Exscan(sb, rb, count, t, op, comm);
}
int MPI_Igather(GATHER_ARGS, int root, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_IGATHER);
    return PMPI_Igather(sb, sc, st, rb, rc, rt, root, comm, r);
}
int MPI_Iallgather(GATHER_ARGS, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_IALLGATHER);
    return PMPI_Iallgather(sb, sc, st, rb, rc, rt, comm, r);
}
int MPI_Iscatter(GATHER_ARGS, int root, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_ISCATTER);
    return PMPI_Iscatter(sb, sc, st, rb, rc, rt, root, comm, r);
}
int MPI_Ialltoall(GATHER_ARGS, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_IALLTOALL);
    return PMPI_Ialltoall(sb, sc, st, rb, rc, rt, comm, r);
}
int MPI_Ireduce_scatter_block(const void *sb, void *rb, int rc, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_IREDUCE_SCATTER_BLOCK);
    return PMPI_Ireduce_scatter_block(sb, rb, rc, t, op, comm, r);
}
int MPI_Iscan(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_ISCAN);
    return PMPI_Iscan(sb, rb, count, t, op, comm, r);
}
int MPI_Iexscan(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request *r) {
    not_in_mcd(comm, O_IEXSCAN);
    return PMPI_Iexscan(sb, rb, count, t, op, comm, r);
}
#undef GATHER_ARGS

/* Communicator constructors. Each makes the new communicator's state (its
 * mcd group, or its reason for PMPI) before it returns, so that the
 * communicator's first collective goes through mcd even when it is
 * nonblocking. The constructors are collective over the new communicator's
 * members, and every member is inside the same constructor call, so the
 * state's own collectives on the new communicator (new_state) wait for
 * nobody who is elsewhere: the same decision on every member, in the same
 * order (MPI orders a communicator's constructors alike on every rank).
 * Making it at a communicator's first nonblocking collective instead would
 * be unsound: starting one must not wait for other ranks (a rank may start
 * an MPI_Ibarrier and then send what another rank receives before it starts
 * its own: both would wait for ever). MPI_Comm_idup is itself nonblocking:
 * its communicator gets its state at its first blocking collective, as
 * before. MCD_MPI_LAZY_COMMS=1 (on any rank: agreed in MPI_Init) leaves
 * every communicator's state to its first blocking collective, for
 * programs that make many communicators and use few. */
static int made(int rc, MPI_Comm *newcomm) {
    if (rc == MPI_SUCCESS && active && eager_comms && newcomm && *newcomm != MPI_COMM_NULL) {
        state_of(*newcomm);
    }
    return rc;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) { return made(PMPI_Comm_dup(comm, newcomm), newcomm); }
int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm) { return made(PMPI_Comm_dup_with_info(comm, info, newcomm), newcomm); }
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) { return made(PMPI_Comm_split(comm, color, key, newcomm), newcomm); }
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm) {
    return made(PMPI_Comm_split_type(comm, split_type, key, info, newcomm), newcomm);
}
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm) { return made(PMPI_Comm_create(comm, group, newcomm), newcomm); }
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm) {
    return made(PMPI_Comm_create_group(comm, group, tag, newcomm), newcomm);
}
int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder, MPI_Comm *newcomm) {
    return made(PMPI_Cart_create(comm, ndims, dims, periods, reorder, newcomm), newcomm);
}
int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm) { return made(PMPI_Cart_sub(comm, remain_dims, newcomm), newcomm); }
int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[], int reorder, MPI_Comm *newcomm) {
    return made(PMPI_Graph_create(comm, nnodes, index, edges, reorder, newcomm), newcomm);
}
int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm *newcomm) { return made(PMPI_Intercomm_merge(intercomm, high, newcomm), newcomm); }
int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[], const int sourceweights[], int outdegree,
                                   const int destinations[], const int destweights[], MPI_Info info, int reorder, MPI_Comm *newcomm) {
    return made(PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights, outdegree, destinations, destweights, info, reorder,
                                                newcomm),
                newcomm);
}
int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[], const int destinations[], const int weights[],
                          MPI_Info info, int reorder, MPI_Comm *newcomm) {
    return made(PMPI_Dist_graph_create(comm, n, sources, degrees, destinations, weights, info, reorder, newcomm), newcomm);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
    target to;
    if (nonblocking_target(comm, &to)) {
        nb_op *op = new_op(IBARRIER, comm);
        int rc = start_op(op, &to, MCD_CALL_BARRIER, NULL, 0, 0, 0, 0);
        if (rc != MPI_SUCCESS) return failed_start(op, comm, rc);
        served(comm, IBARRIER);
        return hand_over(op, request);
    }
    passed(comm, IBARRIER, 1, 0);
    return PMPI_Ibarrier(comm, request);
}

static int ireduction(int kind, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op_, int root, MPI_Comm comm,
                      MPI_Request *request) {
    int dtype, mop;
    long long bytes = -1;
    target to;
    int ok = reducible(comm, count, datatype, op_, &bytes, &dtype, &mop);
    if (ok && nonblocking_target(comm, &to) && (kind == IALLREDUCE || root_in(&to, root))) {
        nb_op *op = new_op(kind, comm);
        int rc = start_reduction(op, &to, sendbuf, recvbuf, count, datatype, bytes, dtype, mop, kind == IALLREDUCE, root);
        if (rc != MPI_SUCCESS) return failed_start(op, comm, rc);
        served(comm, kind);
        return hand_over(op, request);
    }
    passed(comm, kind, ok, bytes);
    if (kind == IALLREDUCE) return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op_, comm, request);
    return PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op_, root, comm, request);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request) {
    return ireduction(IALLREDUCE, sendbuf, recvbuf, count, datatype, op, 0, comm, request);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, MPI_Request *request) {
    return ireduction(IREDUCE, sendbuf, recvbuf, count, datatype, op, root, comm, request);
}

/* Whether a broadcast of `count` x `t` on `comm` goes to mcd (as MPI_Bcast
 * decides); its bytes. */
static int broadcastable(MPI_Comm comm, int count, MPI_Datatype t, long long *bytes) {
    *bytes = -1;
    if (active && comm != MPI_COMM_NULL) *bytes = bytes_of(count, t);
    return *bytes >= 0 && *bytes <= max_bytes && (plain(t) || packs_plainly());
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request) {
    long long bytes;
    target to;
    int ok = broadcastable(comm, count, datatype, &bytes);
    if (ok && nonblocking_target(comm, &to) && root_in(&to, root)) {
        nb_op *op = new_op(IBCAST, comm);
        int rc = start_broadcast(op, &to, buffer, count, datatype, bytes, root);
        if (rc != MPI_SUCCESS) return failed_start(op, comm, rc);
        served(comm, IBCAST);
        return hand_over(op, request);
    }
    passed(comm, IBCAST, ok, bytes);
    return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
}

/* The wait and test family: ours settled first, then MPI's call, then
 * the failures of ours it completed (see "Failures"). */
static int form_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    int failed;
    settle_array(1, request, &failed);
    failures fs = failures_in(1, request, failed);
    int rc = PMPI_Test(request, flag, status);
    return one_done(&fs, *flag, 0, status, rc, 1);
}

static int form_Wait(MPI_Request *request, MPI_Status *status) {
    int failed;
    nb_op *pending;
    while ((pending = settle_array(1, request, &failed))) {
        mpi_progress(pending);
        if (!settle(pending, NAP_US)) sched_yield(); /* (another thread settles it) */
    }
    failures fs = failures_in(1, request, failed);
    return one_done(&fs, 1, 0, status, PMPI_Wait(request, status), 1);
}

static int form_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]) {
    int failed;
    settle_array(count, requests, &failed);
    failures fs = failures_in(count, requests, failed);
    int rc = PMPI_Testall(count, requests, flag, statuses);
    return some_done(&fs, *flag ? count : 0, NULL, statuses, rc);
}

static int form_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    int failed;
    nb_op *pending;
    while ((pending = settle_array(count, requests, &failed))) {
        mpi_progress(pending);
        if (!settle(pending, NAP_US)) sched_yield(); /* every one must complete: sleep on this one */
    }
    failures fs = failures_in(count, requests, failed);
    return some_done(&fs, count, NULL, statuses, PMPI_Waitall(count, requests, statuses));
}

static int form_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status) {
    int failed;
    settle_array(count, requests, &failed);
    failures fs = failures_in(count, requests, failed);
    int rc = PMPI_Testany(count, requests, index, flag, status);
    return one_done(&fs, *flag, *index, status, rc, 1);
}

static int form_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
    for (;;) {
        int failed, flag = 1, rc;
        nb_op *pending = settle_array(count, requests, &failed);
        failures fs = failures_in(count, requests, failed);
        if (pending) rc = PMPI_Testany(count, requests, index, &flag, status);
        else rc = PMPI_Waitany(count, requests, index, status);
        if (rc != MPI_SUCCESS || flag) return one_done(&fs, 1, *index, status, rc, 1);
        free(fs.f);
        sched_yield();
    }
}

static int form_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    int failed;
    settle_array(incount, requests, &failed);
    failures fs = failures_in(incount, requests, failed);
    int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    return some_done(&fs, *outcount, indices, statuses, rc);
}

static int form_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    for (;;) {
        int failed, rc;
        nb_op *pending = settle_array(incount, requests, &failed);
        failures fs = failures_in(incount, requests, failed);
        if (pending) rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
        else rc = PMPI_Waitsome(incount, requests, outcount, indices, statuses);
        if (rc != MPI_SUCCESS || !pending || *outcount != 0) return some_done(&fs, *outcount, indices, statuses, rc);
        free(fs.f);
        sched_yield();
    }
}

static int form_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    int failed;
    settle_array(1, &request, &failed);
    failures fs = failures_in(1, &request, failed);
    int rc = PMPI_Request_get_status(request, flag, status);
    return one_done(&fs, *flag, 0, status, rc, 0); /* the completion takes it */
}

/* The forms MPI sees: each holds the persistent ops of its array while it
 * runs (see "Freeing"). */

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    held h;
    hold(&h, 1, request);
    return let_go(&h, form_Test(request, flag, status));
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    held h;
    hold(&h, 1, request);
    return let_go(&h, form_Wait(request, status));
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]) {
    held h;
    hold(&h, count, requests);
    return let_go(&h, form_Testall(count, requests, flag, statuses));
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    held h;
    hold(&h, count, requests);
    return let_go(&h, form_Waitall(count, requests, statuses));
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status) {
    held h;
    hold(&h, count, requests);
    return let_go(&h, form_Testany(count, requests, index, flag, status));
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
    held h;
    hold(&h, count, requests);
    return let_go(&h, form_Waitany(count, requests, index, status));
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    held h;
    hold(&h, incount, requests);
    return let_go(&h, form_Testsome(incount, requests, outcount, indices, statuses));
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    held h;
    hold(&h, incount, requests);
    return let_go(&h, form_Waitsome(incount, requests, outcount, indices, statuses));
}

int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    held h;
    hold(&h, 1, &request);
    return let_go(&h, form_Request_get_status(request, flag, status));
}

/* Persistent collectives: the init keeps the arguments (mcd's choice made
 * once, by the blocking forms' rules), every start runs them. */
static int persistent_init(int kind, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op_, int root, MPI_Comm comm,
                           MPI_Request *request) {
    target to;
    long long bytes = 0;
    int dtype = 0, mop = 0, ok = 1;
    if (kind == IALLREDUCE || kind == IREDUCE) ok = reducible(comm, count, datatype, op_, &bytes, &dtype, &mop);
    else if (kind == IBCAST) ok = broadcastable(comm, count, datatype, &bytes);
    if (!ok || !nonblocking_target(comm, &to) || ((kind == IREDUCE || kind == IBCAST) && !root_in(&to, root))) {
        COUNT(persistent_inits_pmpi);
        return -1;
    }
    nb_op *op = new_op(kind, comm);
    op->persistent = 1;
    op->state = OP_INACTIVE;
    op->comm = comm;
    op->sendbuf = sendbuf;
    op->recvbuf = recvbuf;
    op->count = count;
    /* A reference of its own (review rev30, finding 3): the program may
     * free its type after the init (MPI: communication using it completes
     * normally), and every start uses it. */
    op->dtype_arg = datatype;
    if (!predefined(datatype)) PMPI_Type_dup(datatype, &op->dtype_arg);
    op->op_arg = op_;
    op->root = root;
    op->bytes = bytes;
    pthread_mutex_lock(&ops_lock);
    op->done = take_completion();
    pthread_mutex_unlock(&ops_lock);
    PMPI_Recv_init(NULL, 0, MPI_BYTE, 0, op->done.tag, op->done.comm, &op->req);
    *request = op->req;
    __atomic_fetch_add(&live_persistent, 1, __ATOMIC_RELEASE); /* before it can be found: a form that finds it holds it */
    register_op(op);
    return MPI_SUCCESS;
}

/* A start of persistent `op` (inactive): its mcd request and its receive. */
static int persistent_start(nb_op *op) {
    target to;
    int rc = MPI_ERR_OTHER;
    failure_taken(op); /* a failure the program never completed: gone now */
    drop_buffers(op);
    op->st = counters_of(op->comm);
    if (nonblocking_target(op->comm, &to)) {
        if (op->kind == IBARRIER) {
            rc = start_op(op, &to, MCD_CALL_BARRIER, NULL, 0, 0, 0, 0);
        } else if (op->kind == IBCAST) {
            rc = start_broadcast(op, &to, op->recvbuf, op->count, op->dtype_arg, op->bytes, op->root);
        } else {
            int dtype, mop;
            long long bytes;
            reducible(op->comm, op->count, op->dtype_arg, op->op_arg, &bytes, &dtype, &mop);
            rc = start_reduction(op, &to, op->sendbuf, op->recvbuf, op->count, op->dtype_arg, bytes, dtype, mop, op->kind == IALLREDUCE, op->root);
        }
    }
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "mcd-mpi: rank %d: a start of a persistent %s failed\n", mcd_rank(job), kind_names[op->kind]);
        return raise_error(op->comm, rc);
    }
    COUNT(persistent_starts_mcd);
    served(op->comm, op->kind);
    MPI_Request r = op->req;
    return PMPI_Start(&r);
}

int MPI_Start(MPI_Request *request) {
    held h;
    hold(&h, 1, request);
    if (h.n) return let_go(&h, persistent_start(h.ops[0]));
    return PMPI_Start(request);
}

int MPI_Startall(int count, MPI_Request requests[]) {
    for (int i = 0; i < count; i++) {
        int rc = MPI_Start(&requests[i]);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}

/* Freeing (issue 28, session 17). MPI makes MPI_Request_free of a
 * request of a nonblocking collective erroneous (MPI 4.0, section 6.12,
 * beside MPI_Cancel), and a request used by two threads at once erroneous
 * too (section 11.6.2: two threads may not wait on one request). Both MPIs
 * refuse the free for their own nonblocking collectives, running or not,
 * and leave the request as it was, so that a thread waiting on it
 * completes it normally: Open MPI 4.1 with MPI_ERR_REQUEST, MPICH 4.0 with
 * "The supplied request was invalid (kind=10)", each raised on
 * MPI_COMM_WORLD's error handler (measured: notes/issue28-audit.md). The
 * interposer does the same for its own: MPI_ERR_REQUEST on MPI_COMM_WORLD,
 * the cause on stderr, the request untouched. A persistent one is freed
 * (an active one completed first, as README says) unless another thread
 * holds it in a wait or test form or MPI_Start: then the free is refused
 * alike (Open MPI refuses to free an active persistent collective of its
 * own; MPICH frees it, and the thread waiting on it waited for ever, then
 * MPI_Finalize aborted). Each form holds the persistent ops of its
 * array (`users`, under ops_lock, from when it finds them until it
 * returns); the free checks `users` and unregisters the op under the same
 * lock, so no form finds it after. */
static int refused_free(nb_op *op, const char *why) {
    fprintf(stderr, "mcd-mpi: rank %d: MPI_Request_free of %s %s refused (%s): the request is left as it was\n", mcd_rank(job),
            op->persistent ? "a persistent" : "an", kind_names[op->kind], why);
    return raise_error(MPI_COMM_WORLD, MPI_ERR_REQUEST);
}

/* MPI_Cancel of a collective's request: erroneous (MPI 4.0, section
 * 6.12); Open MPI 4.1 returns MPI_ERR_REQUEST and MPICH 4.0 "Attempt to
 * cancel an unknown type of request" for their own, on MPI_COMM_WORLD's
 * handler, and the collective completes normally, not cancelled. The
 * interposer refuses alike (the generalized request's cancel callback,
 * op_cancel, is then never reached by the program). */
int MPI_Cancel(MPI_Request *request) {
    nb_op *op = request ? find_op(*request) : NULL;
    if (!op) return PMPI_Cancel(request);
    fprintf(stderr, "mcd-mpi: rank %d: MPI_Cancel of %s %s refused (erroneous in MPI for a collective; Open MPI and MPICH refuse it too): "
            "it completes normally\n", mcd_rank(job), op->persistent ? "a persistent" : "an", kind_names[op->kind]);
    return raise_error(MPI_COMM_WORLD, MPI_ERR_REQUEST);
}

int MPI_Request_free(MPI_Request *request) {
    nb_op *op = request ? find_op(*request) : NULL;
    if (op && !op->persistent)
        return refused_free(op, "erroneous in MPI for a nonblocking collective; Open MPI and MPICH refuse it too: complete it with MPI_Wait or MPI_Test");
    if (op) {
        pthread_mutex_lock(&ops_lock);
        int users = op->users;
        if (!users) unregister_locked(op);
        pthread_mutex_unlock(&ops_lock);
        if (users) return refused_free(op, "another thread is waiting on it or testing it, erroneous in MPI");
        __atomic_sub_fetch(&live_ops, 1, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&live_persistent, 1, __ATOMIC_RELEASE);
        while (!settle(op, 0)) mpi_progress(op); /* an active one completes first */
        MPI_Status status;
        int flag = 0;
        PMPI_Test(&op->req, &flag, &status); /* takes the completion, if any */
        failure_taken(op);
        drop_buffers(op);
        if (!predefined(op->dtype_arg)) PMPI_Type_free(&op->dtype_arg);
        completion done = op->done;
        free(op);
        int rc = PMPI_Request_free(request);
        /* Its receive gone, its tag may serve another request. */
        pthread_mutex_lock(&ops_lock);
        give_back_completion(done);
        pthread_mutex_unlock(&ops_lock);
        return rc;
    }
    return PMPI_Request_free(request);
}

#if MPI_VERSION >= 4
#define PERSISTENT(name) MPI_##name##_init
#define PMPI_PERSISTENT(name) PMPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define PERSISTENT(name) MPIX_##name##_init
#define PMPI_PERSISTENT(name) PMPIX_##name##_init
#endif

#ifdef PERSISTENT
int PERSISTENT(Barrier)(MPI_Comm comm, MPI_Info info, MPI_Request *request) {
    if (persistent_init(IBARRIER, NULL, NULL, 0, MPI_DATATYPE_NULL, MPI_OP_NULL, 0, comm, request) == MPI_SUCCESS) return MPI_SUCCESS;
    return PMPI_PERSISTENT(Barrier)(comm, info, request);
}

int PERSISTENT(Allreduce)(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,
                          MPI_Request *request) {
    if (persistent_init(IALLREDUCE, sendbuf, recvbuf, count, datatype, op, 0, comm, request) == MPI_SUCCESS) return MPI_SUCCESS;
    return PMPI_PERSISTENT(Allreduce)(sendbuf, recvbuf, count, datatype, op, comm, info, request);
}

int PERSISTENT(Reduce)(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, MPI_Info info,
                       MPI_Request *request) {
    if (persistent_init(IREDUCE, sendbuf, recvbuf, count, datatype, op, root, comm, request) == MPI_SUCCESS) return MPI_SUCCESS;
    return PMPI_PERSISTENT(Reduce)(sendbuf, recvbuf, count, datatype, op, root, comm, info, request);
}

int PERSISTENT(Bcast)(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request) {
    if (persistent_init(IBCAST, NULL, buffer, count, datatype, MPI_OP_NULL, root, comm, request) == MPI_SUCCESS) return MPI_SUCCESS;
    return PMPI_PERSISTENT(Bcast)(buffer, count, datatype, root, comm, info, request);
}
#endif

/* MPI_Finalize: nonblocking collectives never completed (erroneous in
 * MPI) are completed here, and said so. */
static void settle_all_pending(void) {
    for (;;) {
        nb_op *found = NULL;
        pthread_mutex_lock(&ops_lock);
        for (nb_op *op = ops_first; op && !found; op = op->next)
            if (__atomic_load_n(&op->state, __ATOMIC_ACQUIRE) == OP_RUNNING) found = op;
        pthread_mutex_unlock(&ops_lock);
        if (!found) return;
        COUNT(finalize_pending);
        fprintf(stderr, "mcd-mpi: rank %d: MPI_Finalize with a %s never completed by MPI_Wait or MPI_Test (erroneous in MPI): completing it\n",
                mcd_rank(job), kind_names[found->kind]);
        settle(found, -1);
    }
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
    unsigned long long t0 = now_ns();
    if (active && comm == MPI_COMM_WORLD) {
        int rc = mcd_barrier(job);
        if (rc == MCD_OK) {
            COUNT(via_mcd);
            timed(comm, LAT_BARRIER, t0);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Barrier on MPI_COMM_WORLD failed: %s\n", mcd_last_error());
        return raise_error(comm, mpi_error_of(rc));
    }
    if (active && comm != MPI_COMM_NULL) {
        comm_state *st = state_of(comm);
        if (st) {
            if (st->group) {
                int rc = mcd_group_barrier(st->group);
                if (rc == MCD_OK) {
                    COUNT(via_mcd);
                    timed(comm, LAT_BARRIER, t0);
                    return MPI_SUCCESS;
                }
                fprintf(stderr, "mcd-mpi: MPI_Barrier on a communicator failed: %s\n", mcd_last_error());
                return raise_error(comm, mpi_error_of(rc));
            }
        }
    }
    COUNT(via_pmpi);
    return PMPI_Barrier(comm);
}

int MPI_Finalize(void) {
    if (active) {
        settle_all_pending();
        int rank_of_job = mcd_rank(job);
        if (reporting()) {
            mcd_stats s;
            mcd_get_stats(job, &s);
            fprintf(stderr, "mcd-mpi: rank %d: %llu MPI_Barrier via mcd (%s), %llu via PMPI; mcd barriers %llu, sent %llu, received %llu, resends %llu, answers %llu (%llu suppressed); "
                    "communicators: %llu via mcd, %llu via PMPI (%llu inter, %llu unreachable, %llu failed); "
                    "authentication %s: %llu bad tag, %llu replayed, %llu mismatched; other runs: %llu foreign, %llu superseded, %llu sessions forgotten, "
                    "%llu stale hellos; dropped: %llu frames, %llu messages overflowed\n",
                    mcd_rank(job), via_mcd, mcd_algorithm(job), via_pmpi, (unsigned long long)s.barriers,
                    (unsigned long long)s.messages_sent, (unsigned long long)s.frames_received, (unsigned long long)s.resends,
                    (unsigned long long)s.answers, (unsigned long long)s.answers_suppressed,
                    comms_mcd, comms_inter + comms_unreachable + comms_failed, comms_inter, comms_unreachable, comms_failed,
                    auth_on ? "on" : "off", (unsigned long long)s.frames_bad_tag, (unsigned long long)s.frames_replayed,
                    (unsigned long long)s.frames_auth_mismatch, (unsigned long long)s.messages_foreign,
                    (unsigned long long)s.joins_superseded, (unsigned long long)s.sessions_forgotten, (unsigned long long)s.hellos_stale,
                    (unsigned long long)s.frames_dropped, (unsigned long long)s.messages_overflow);
            fprintf(stderr, "mcd-mpi: rank %d: collectives: %llu MPI_Allreduce via mcd, %llu via PMPI; %llu MPI_Reduce via mcd, %llu via PMPI; "
                    "%llu MPI_Bcast via mcd, %llu via PMPI\n", mcd_rank(job), coll_mcd[ALLREDUCE], coll_pmpi[ALLREDUCE],
                    coll_mcd[REDUCE], coll_pmpi[REDUCE], coll_mcd[BCAST], coll_pmpi[BCAST]);
            fprintf(stderr, "mcd-mpi: rank %d: nonblocking: %llu MPI_Ibarrier via mcd, %llu via PMPI; %llu MPI_Iallreduce via mcd, %llu via PMPI; "
                    "%llu MPI_Ireduce via mcd, %llu via PMPI; %llu MPI_Ibcast via mcd, %llu via PMPI; persistent: %llu starts via mcd, %llu inits via PMPI; "
                    "%llu completed in MPI_Finalize\n", mcd_rank(job), coll_mcd[IBARRIER], coll_pmpi[IBARRIER], coll_mcd[IALLREDUCE],
                    coll_pmpi[IALLREDUCE], coll_mcd[IREDUCE], coll_pmpi[IREDUCE], coll_mcd[IBCAST], coll_pmpi[IBCAST], persistent_starts_mcd,
                    persistent_inits_pmpi, finalize_pending);
            char line[2048];
            int n = 0;
            for (int o = 0; o < OTHERS; o++)
                if (other_pmpi[o]) n += snprintf(line + n, sizeof line - n, "%s %llu %s", n ? "," : "", other_pmpi[o], other_names[o]);
            if (n) fprintf(stderr, "mcd-mpi: rank %d: to PMPI, " NOT_IN_MCD ":%s\n", mcd_rank(job), line);
            fprintf(stderr, "mcd-mpi: rank %d: small allgathers through mcd (a bitwise-or reduction, up to MCD_MPI_GATHER_BYTES %lld): %llu MPI_Allgather\n",
                    mcd_rank(job), gather_bytes, gathers_mcd[0]);
        }
        /* Communicators never freed: their groups end here (without waiting,
         * so in any order); the states stay for MPI's own teardown. */
        pthread_mutex_lock(&states_lock);
        if (reporting()) {
            report_comm(&world_state, 1);
            for (comm_state *st = first; st; st = st->next) report_comm(st, 0);
        }
        if (json_path()) {
            json_comm(&world_state, 1);
            for (comm_state *st = first; st; st = st->next) json_comm(st, 0);
        }
        for (comm_state *st = first; st; st = st->next) end_group(st);
        pthread_mutex_unlock(&states_lock);
        if (json_path()) json_write(json_path());
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
