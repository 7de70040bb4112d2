/* mcd_barrier.h — mcd's barrier for C and MPI programs.
 *
 * Link with -lmcd_barrier (target/release/libmcd_barrier.so or .a; the static
 * library also needs -lpthread -ldl -lm). Built by `cargo build --release -p
 * mcd-capi`. This header is kept by hand beside capi/src/lib.rs; the test
 * suite checks that it declares exactly the functions the library exports.
 *
 * Every function returns MCD_OK (0) or a negative MCD_ERR_* code and never
 * aborts; mcd_last_error() gives the full text of the calling thread's last
 * error. A job or group handle must not be used by two threads at once
 * (different handles may be).
 *
 * Environment (what mcd_params leaves at -1/NULL): MCD_RANK/MCD_SIZE, or
 * SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE;
 * MCD_IFACES (default: the default route's interface); MCD_PORT (default:
 * the local rank, else 0); MCD_JOB or SLURM_JOB_ID (job key); MCD_NODES or
 * MCD_NODE_FILE (else the ranks discover each other); MCD_ALGORITHM (default
 * auto); MCD_LOGP ("o_s,o_r,g,L" µs for auto); MCD_WAIT (busy, yield, block,
 * adaptive); MCD_BOOTSTRAP_TIMEOUT (seconds); MCD_BARRIER_TIMEOUT (seconds a
 * peer may stay silent before it is taken for dead, default 10: a live peer,
 * however slow, is waited for); MCD_BARRIER_DEADLINE (seconds after which one
 * barrier call gives up even on live peers; default none).
 *
 * While the program computes or sits in other calls, a background thread of
 * the library answers its peers, so only a process that is gone or stopped
 * ever looks dead.
 * Raw sockets need CAP_NET_RAW (or root).
 */
#ifndef MCD_BARRIER_H
#define MCD_BARRIER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCD_OK 0
#define MCD_ERR_ARGUMENT (-1)   /* NULL pointer, non-UTF-8 string, call out of order */
#define MCD_ERR_CONFIG (-2)     /* parameters or environment incomplete or inconsistent */
#define MCD_ERR_PERMISSION (-3) /* no CAP_NET_RAW: setcap cap_net_raw+ep PROGRAM, or run as root */
#define MCD_ERR_INTERFACE (-4)  /* no such interface, or no default route to find one */
#define MCD_ERR_BOOTSTRAP (-5)  /* the ranks did not all find each other in time */
#define MCD_ERR_BARRIER (-6)    /* a barrier failed: a peer is silent (dead), or the deadline passed */
#define MCD_ERR_SYSTEM (-7)     /* another system call failed */
#define MCD_ERR_INTERNAL (-8)   /* a bug in mcd */

/* An open job: an endpoint and its barrier. */
typedef struct mcd_job mcd_job;
/* A barrier over a group of the job's ranks, on the job's endpoint. */
typedef struct mcd_group mcd_group;

/* Explicit parameters; mcd_params_default() sets all to "from the environment". */
typedef struct mcd_params {
    int rank;               /* -1: from the environment (with size) */
    int size;               /* -1: from the environment */
    const char *interfaces; /* "eth0,eth1": one per rail; NULL: MCD_IFACES / default route */
    const char *node_file;  /* NULL: MCD_NODES / MCD_NODE_FILE, else discovery */
    const char *job;        /* NULL: MCD_JOB / SLURM_JOB_ID */
    const char *algorithm;  /* NULL: MCD_ALGORITHM, default "auto" */
    int port;               /* 0..255; -1: from the environment */
} mcd_params;

/* Counters of a job. */
typedef struct mcd_stats {
    uint64_t barriers;        /* barriers completed */
    uint64_t messages_sent;   /* messages the barriers sent (a multicast counts once) */
    uint64_t frames_received; /* frames delivered by the endpoint */
    uint64_t resends;         /* messages sent twice at once (after a loss, or asked for early) */
    uint64_t answers;         /* messages re-sent to answer a peer */
    uint64_t frames_dropped;  /* malformed, foreign, or lost to a full receive ring */
} mcd_stats;

void mcd_params_default(mcd_params *params);
/* Open a job; *out is the handle (NULL on failure). */
int mcd_init_env(mcd_job **out);
int mcd_init(const mcd_params *params, mcd_job **out);
/* One barrier: returns once every rank has entered it. */
int mcd_barrier(mcd_job *job);
/* Split phase: enter, then test (non-blocking, *done = 1 when complete) or wait. */
int mcd_barrier_enter(mcd_job *job);
int mcd_barrier_test(mcd_job *job, int *done);
int mcd_barrier_wait(mcd_job *job);
/* Rank and size (or a negative error code). */
int mcd_rank(mcd_job *job);
int mcd_size(mcd_job *job);
/* The algorithm's name, e.g. "tree4"; valid until mcd_finalize. */
const char *mcd_algorithm(mcd_job *job);
int mcd_get_stats(mcd_job *job, mcd_stats *out);
/* End the job and free the handle (NULL is fine). Collective: a closing
 * barrier, then answers until every peer is done; the handle is freed even
 * on error. */
int mcd_finalize(mcd_job *job);
/* Free the handle without the closing barrier (a rank that leaves alone). */
int mcd_discard(mcd_job *job);
/* Groups: a barrier over the job's ranks ranks[0..n] (this rank among them;
 * group rank i is job rank ranks[i]), created from the job without another
 * discovery round. Collective over the group's ranks only, each passing the
 * same list; ranks in several groups create them in the same order. Each
 * group is its own barrier instance (frames of one never count in another,
 * even for groups with the same ranks) and shares the job's endpoint; free
 * groups before mcd_finalize. */
int mcd_group_create(mcd_job *job, const int *ranks, int n, mcd_group **out);
int mcd_group_barrier(mcd_group *group);
int mcd_group_enter(mcd_group *group);
int mcd_group_test(mcd_group *group, int *done);
int mcd_group_wait(mcd_group *group);
int mcd_group_rank(mcd_group *group);
int mcd_group_size(mcd_group *group);
const char *mcd_group_algorithm(mcd_group *group);
/* Barrier counters of the group; frame counters of the shared endpoint. */
int mcd_group_get_stats(mcd_group *group, mcd_stats *out);
/* Collective over the group: a closing barrier, then answers until every
 * member is done; the handle is freed even on error. */
int mcd_group_free(mcd_group *group);
/* Free the handle without the closing barrier. */
int mcd_group_discard(mcd_group *group);
/* A fixed text for a code, and the calling thread's last error in full. */
const char *mcd_strerror(int code);
const char *mcd_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MCD_BARRIER_H */
