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
 * Collectives. MPI_Allreduce, MPI_Reduce and MPI_Bcast go through mcd on
 * MPI_COMM_WORLD (mcd_allreduce, mcd_reduce, mcd_bcast: a gather with the
 * data in the messages and a multicast result, reproducible to the bit) and
 * on every communicator that has an mcd group (mcd_group_allreduce, ...: a
 * barrier instance of the group's own, made at its first collective; the
 * communicator's state is made by its first MPI_Barrier or collective
 * bound for mcd, whichever comes first), every root, for the
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
 * MPI_Ibarrier is not interposed: an MPI request completed by mcd would need
 * MPI to drive mcd's progress inside MPI_Wait/MPI_Test, which the PMPI
 * interface cannot arrange (generalized requests have no progress hook).
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
 *                        authentication on|off: T bad tag, P replayed, X mismatched"
 *                       (frames dropped: forged or of another secret; replays;
 *                       signed where this job does not sign, or the reverse)
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
 *                        rank + 1, then a count, in hex)
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
/* Why a collective went to PMPI. */
enum { WHY_COMM, WHY_BYTES, WHY_TYPE, WHYS };
static const char *why_names[WHYS] = {"the communicator has no mcd group", "beyond MCD_MPI_MAX_BYTES", "type or operation not served"};

typedef struct comm_state {
    mcd_group *group; /* NULL: PMPI_Barrier */
    int size;
    unsigned long long key;  /* the communicator's mcd key (0: none) */
    const char *why;         /* why it has no mcd group */
    /* Its collectives, per kind: through mcd, and through PMPI per reason. */
    unsigned long long mcd[KINDS], pmpi[KINDS][WHYS];
    struct comm_state *prev, *next; /* the live ones, in creation order */
} comm_state;
static void report_comm(const comm_state *st, int world);
static int keyval = MPI_KEYVAL_INVALID;
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

/* MPI_Comm_free (or MPI's own teardown) deletes the attribute. */
static int delete_state(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm, (void)key, (void)extra;
    comm_state *st = value;
    if (reporting() && job) report_comm(st, 0);
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
enum { MODE_OFF, MODE_KEY_FILE, MODE_EXCHANGE, MODES };
static const char *mode_names[MODES] = {"off", "on with MCD_KEY_FILE", "on without MCD_KEY_FILE"};
#define SEEN_DISABLED (1 << MODES)

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
    default: return MPI_ERR_OTHER;
    }
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
    const char *auth = getenv("MCD_AUTH");
    const char *key_file = getenv("MCD_KEY_FILE");
    const char *disable = getenv("MCD_MPI_DISABLE");
    int mode = MODE_EXCHANGE;
    if (auth && *auth && (!strcmp(auth, "off") || !strcmp(auth, "OFF"))) mode = MODE_OFF;
    else if ((key_file && *key_file) || (auth && *auth && strcmp(auth, "on") && strcmp(auth, "ON")))
        mode = MODE_KEY_FILE; /* mcd_init reads the file, or says what is wrong with MCD_AUTH */
    int seen = 1 << mode;
    if (disable && *disable && strcmp(disable, "0")) seen |= SEEN_DISABLED;
    PMPI_Allreduce(MPI_IN_PLACE, &seen, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
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
    } else if (mode == MODE_EXCHANGE && exchange_secret(rank, size, secret, reason, sizeof reason) != MCD_OK) {
        /* reason says why */
    } else {
        mcd_params params;
        mcd_params_default(&params);
        params.rank = rank;
        params.size = size;
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
    auth_on = mode != MODE_OFF;
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

/* Whether `t`'s memory is its signature's bytes: a predefined type without
 * gaps (the pair types whose extent exceeds their size are not). */
static int plain(MPI_Datatype t) {
    int ni, na, nt, combiner = -1, size = 0;
    PMPI_Type_get_envelope(t, &ni, &na, &nt, &combiner);
    if (combiner != MPI_COMBINER_NAMED) return 0;
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

/* A collective's data as mcd sees it: `bytes` bytes, at `buf` itself or
 * packed into `packed` (malloc'd; NULL for a plain type). */
static int pack_in(const void *buf, int count, MPI_Datatype t, long long bytes, char **packed) {
    *packed = NULL;
    if (plain(t)) return 1;
    *packed = malloc(bytes ? bytes : 1);
    int position = 0;
    if (PMPI_Pack(buf, count, t, *packed, (int)bytes, &position, MPI_COMM_WORLD) != MPI_SUCCESS || position != bytes) {
        fprintf(stderr, "mcd-mpi: packing %d elements of a datatype gave %d bytes, not %lld\n", count, position, bytes);
        return 0;
    }
    return 1;
}

static void unpack_out(const char *packed, long long bytes, void *buf, int count, MPI_Datatype t) {
    int position = 0;
    PMPI_Unpack(packed, (int)bytes, &position, buf, count, t, MPI_COMM_WORLD);
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
    int rank;
} target;

/* Whether `comm` has an mcd target (the same answer on every member: the
 * world always, another communicator if its members agreed on a group). */
static int target_of(MPI_Comm comm, target *t) {
    if (!active || comm == MPI_COMM_NULL) return 0;
    if (comm == MPI_COMM_WORLD) {
        t->group = NULL;
        t->rank = mcd_rank(job);
        return 1;
    }
    comm_state *st = state_of(comm);
    if (!st || !st->group) return 0;
    t->group = st->group;
    t->rank = mcd_group_rank(st->group);
    return 1;
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

/* A collective passed to PMPI: `reducible` (or the broadcast's test) said
 * yes (`ok`) but the communicator has no group, or it said no (beyond the
 * limit, or the type or operation). */
static void passed(MPI_Comm comm, int kind, int ok, long long bytes) {
    COUNT(coll_pmpi[kind]);
    comm_state *st = counters_of(comm);
    if (st) COUNT(st->pmpi[kind][ok ? WHY_COMM : bytes < 0 || bytes > max_bytes ? WHY_BYTES : WHY_TYPE]);
}

/* MCD_MPI_REPORT: one line for a communicator's collectives. */
static void report_comm(const comm_state *st, int world) {
    static const char *names[KINDS] = {"MPI_Allreduce", "MPI_Reduce", "MPI_Bcast"};
    char line[1024];
    int n = 0;
    unsigned long long calls = 0;
    for (int k = 0; k < KINDS; k++) {
        calls += st->mcd[k];
        for (int w = 0; w < WHYS; w++) calls += st->pmpi[k][w];
    }
    if (!calls && !world) return; /* barriers only */
    if (world) n += snprintf(line + n, sizeof line - n, "MPI_COMM_WORLD:");
    else n += snprintf(line + n, sizeof line - n, "communicator %#llx (%d ranks):", st->key, st->size);
    unsigned long long why_total[WHYS] = {0};
    for (int k = 0; k < KINDS; k++) {
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
    fprintf(stderr, "mcd-mpi: rank %d: collectives on %s\n", mcd_rank(job), line);
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

/* mcd's allreduce (root < 0) or reduce of `count` elements of `t`:
 * packed when `t` is not plain. */
static int reduce_via_mcd(const target *to, const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, long long bytes, int dtype, int mop, int root) {
    int result_here = root < 0 || root == to->rank;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t n = (size_t)bytes / mcd_sizes[dtype];
    if (plain(t)) {
        const void *in = in_place ? NULL : sendbuf;
        return root < 0 ? t_allreduce(to, in, recvbuf, n, dtype, mop) : t_reduce(to, in, recvbuf, n, dtype, mop, root);
    }
    char *packed;
    int rc = MCD_OK;
    if (!pack_in(in_place ? recvbuf : sendbuf, count, t, bytes, &packed)) rc = MCD_ERR_ARGUMENT;
    /* In place on the packed copy; the result unpacked where MPI wants it. */
    if (rc == MCD_OK) rc = root < 0 ? t_allreduce(to, NULL, packed, n, dtype, mop) : t_reduce(to, result_here ? NULL : packed, result_here ? packed : NULL, n, dtype, mop, root);
    if (rc == MCD_OK && result_here) unpack_out(packed, bytes, recvbuf, count, t);
    free(packed);
    return rc;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    int dtype, mop;
    long long bytes = -1;
    target to;
    int ok = reducible(comm, count, datatype, op, &bytes, &dtype, &mop);
    if (ok && target_of(comm, &to)) {
        int rc = reduce_via_mcd(&to, sendbuf, recvbuf, count, datatype, bytes, dtype, mop, -1);
        if (rc == MCD_OK) {
            served(comm, ALLREDUCE);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Allreduce on %s failed: %s\n", comm_name(comm), mcd_last_error());
        return mpi_error_of(rc);
    }
    passed(comm, ALLREDUCE, ok, bytes);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
    int dtype, mop;
    long long bytes = -1;
    target to;
    int ok = reducible(comm, count, datatype, op, &bytes, &dtype, &mop);
    if (ok && target_of(comm, &to)) {
        int rc = reduce_via_mcd(&to, sendbuf, recvbuf, count, datatype, bytes, dtype, mop, root);
        if (rc == MCD_OK) {
            served(comm, REDUCE);
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Reduce on %s failed: %s\n", comm_name(comm), mcd_last_error());
        return mpi_error_of(rc);
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
    if (active && comm != MPI_COMM_NULL) bytes = bytes_of(count, datatype);
    int ok = bytes >= 0 && bytes <= max_bytes && (plain(datatype) || packs_plainly());
    if (ok && target_of(comm, &to)) {
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
            return MPI_SUCCESS;
        }
        fprintf(stderr, "mcd-mpi: MPI_Bcast on %s failed: %s\n", comm_name(comm), mcd_last_error());
        return mpi_error_of(rc);
    }
    passed(comm, BCAST, ok, bytes);
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
        return mpi_error_of(rc);
    }
    if (active && comm != MPI_COMM_NULL) {
        comm_state *st = state_of(comm);
        if (st) {
            if (st->group) {
                int rc = mcd_group_barrier(st->group);
                if (rc == MCD_OK) {
                    COUNT(via_mcd);
                    return MPI_SUCCESS;
                }
                fprintf(stderr, "mcd-mpi: MPI_Barrier on a communicator failed: %s\n", mcd_last_error());
                return mpi_error_of(rc);
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
        if (reporting()) {
            report_comm(&world_state, 1);
            for (comm_state *st = first; st; st = st->next) report_comm(st, 0);
        }
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
