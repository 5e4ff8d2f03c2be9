/* SPDX-License-Identifier: MIT */
/*
 * pgrt_comm: collectives between processes, one GPU each, on one host or
 * many, over NCCL found at run time (dlopen of libnccl: $PGRT_LIBNCCL
 * alone when set, else libnccl.so.2, then libnccl.so). Nothing here is a
 * transport of our own: NCCL moves the bytes; we bring the processes
 * together (pgrt_dist_*: the unique id from rank 0 to the others, over TCP
 * or a shared file), order the collectives on the runtime's streams, and
 * bound every wait so that a rank that dies or stalls ends the others
 * with a message instead of a hang.
 *
 * A run, on every rank:
 *
 *   pgrt_dist d;                        torchrun's variables, or --dist-init
 *   pgrt_dist_from_env(&d, NULL);
 *   pgrt_comm_id id;
 *   if (d.rank == 0) pgrt_comm_id_new(ctx, &id);
 *   pgrt_dist_exchange(&d, &id, 300);   rank 0 publishes, the rest receive
 *   pgrt_comm_create(ctx, &(pgrt_comm_params){d.rank, d.world, id, 300}, &c);
 *   pgrt_dist_finish(&d);               rank 0 removes a file: init's file
 *   ... pgrt_comm_all_reduce(c, s, grads, 0, n, PGRT_COMM_SUM) ...
 *   pgrt_comm_wait(c, s, 0);            instead of pgrt_stream_sync
 *   pgrt_comm_destroy(&c);
 *
 * Collectives are ordered on a stream like kernels and may be captured in
 * a CUDA graph. Every rank must issue the same collectives in the same
 * order. Errors follow pgrt.h: 0 or a negative PGRT_E* code with a
 * one-line pgrt_last_message(): PGRT_ENOLIB when libnccl is not found (the
 * message names what was tried), PGRT_ECOMM when NCCL reports an error
 * (its name and NCCL's own last error text), PGRT_ETIMEOUT when a bound is
 * passed (the communicator is then aborted).
 *
 * NVLink multicast (NVLS) is left to the environment: the launcher sets
 * NCCL_NVLS_ENABLE=0 for the ranks it starts; this library never asks for
 * multicast objects itself.
 */
#ifndef PTXGEN_PGRT_COMM_H
#define PTXGEN_PGRT_COMM_H

#include "pgrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- bootstrap */

/* Where the ranks of one run meet. */
typedef enum pgrt_dist_method {
    PGRT_DIST_SINGLE = 0, /* world 1: nothing to exchange */
    PGRT_DIST_TCP,        /* rank 0 listens on addr:port, the others connect */
    PGRT_DIST_FILE,       /* rank 0 writes path (atomically), the others read it */
} pgrt_dist_method;

typedef struct pgrt_dist {
    int rank, world;  /* 0 <= rank < world */
    int local_rank;   /* the GPU on this host ($LOCAL_RANK; rank when unset) */
    pgrt_dist_method method;
    char addr[256];   /* TCP: a host name or address ($MASTER_ADDR) */
    int port;         /* TCP: 1 .. 65535 ($MASTER_PORT) */
    char path[4096];  /* FILE: the rendezvous file */
} pgrt_dist;

/* The run as torchrun describes it: RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT. init, when not NULL, names the meeting place
 * instead of MASTER_*: "tcp://HOST:PORT" or "file:PATH". WORLD_SIZE unset
 * (and RANK unset): a single process (PGRT_DIST_SINGLE). Anything set but
 * malformed (a rank not below the world, a port out of range, RANK without
 * WORLD_SIZE, a world above 1 with no meeting place) is PGRT_EINVAL naming
 * the variable and its value. Nothing is opened or bound here. */
PGRT_API int pgrt_dist_from_env(pgrt_dist *out, const char *init);

/* A communicator's unique id: made by rank 0 (pgrt_comm_id_new), handed
 * to every other rank (pgrt_dist_exchange), opaque. */
#define PGRT_COMM_ID_BYTES 128
typedef struct pgrt_comm_id {
    unsigned char bytes[PGRT_COMM_ID_BYTES];
} pgrt_comm_id;

/* Rank 0 publishes *id; every other rank receives it into *id; waits at
 * most timeout_s seconds (> 0). TCP: rank 0 binds addr:port (that address
 * only) and serves each other rank once; the others retry their
 * connection until it answers. FILE: rank 0 refuses a path that already
 * exists (left from an earlier run: the others might read the stale id)
 * and writes the id beside it then renames it into place; the others wait
 * for it. Both check that every rank agrees on the world size and that no
 * rank comes twice. Errors are one line naming the address or path, the
 * ranks that did not come, and the system's reason: PGRT_EINVAL (an
 * address that does not resolve, or that is not this host's for rank 0),
 * PGRT_ECOMM (a refused or broken exchange, a world mismatch),
 * PGRT_ETIMEOUT. A PGRT_DIST_SINGLE d returns 0 at once. */
PGRT_API int pgrt_dist_exchange(const pgrt_dist *d, pgrt_comm_id *id, double timeout_s);

/* After pgrt_comm_create succeeded on this rank (so every rank has read
 * the id): rank 0 of a FILE run removes the file. Nothing otherwise. */
PGRT_API int pgrt_dist_finish(const pgrt_dist *d);

/* ---------------------------------------------------------------- communicator */

typedef struct pgrt_comm pgrt_comm;

typedef enum pgrt_comm_op {
    PGRT_COMM_SUM = 0,
    PGRT_COMM_MAX,
    PGRT_COMM_MIN,
} pgrt_comm_op;

typedef struct pgrt_comm_params {
    int rank, world;  /* 0 <= rank < world */
    pgrt_comm_id id;  /* the same on every rank */
    /* The bound, in seconds, on creating the communicator (every rank must
     * join within it) and the default bound of pgrt_comm_wait; 0: 600. */
    double timeout_s;
} pgrt_comm_params;

/* A fresh unique id (ncclGetUniqueId), on rank 0. Loads libnccl. */
PGRT_API int pgrt_comm_id_new(pgrt_ctx *ctx, pgrt_comm_id *id);

/* Join the communicator on ctx's device (ncclCommInitRankConfig,
 * non-blocking, polled against timeout_s; ncclCommInitRank where the
 * library predates it). Collective: every rank calls it. */
PGRT_API int pgrt_comm_create(pgrt_ctx *ctx, const pgrt_comm_params *p, pgrt_comm **out);

/* Leave: ncclCommFinalize + ncclCommDestroy when healthy, ncclCommAbort
 * after an error, a timeout or pgrt_comm_abort. NULL-safe. */
PGRT_API void pgrt_comm_destroy(pgrt_comm **c);

/* Abort every collective of c in flight (ncclCommAbort) so that waits on
 * its streams end; c is unusable afterwards (calls give PGRT_ESTATE) but
 * must still be destroyed. */
PGRT_API int pgrt_comm_abort(pgrt_comm *c);

PGRT_API int pgrt_comm_rank(const pgrt_comm *c);
PGRT_API int pgrt_comm_world(const pgrt_comm *c);

/* The NCCL version in use, as NCCL spells it (e.g. 22703 for 2.27.3). */
PGRT_API int pgrt_comm_nccl_version(const pgrt_comm *c);

/* Collectives on stream s (may be capturing). Element type: the buffer's
 * (f32, f16, bf16, f64, s32, u32, s64, u64, s8, u8); the buffers of one
 * call share it. Ranges are checked against the buffers (PGRT_ERANGE).
 *
 * all_reduce: buf[offset .. offset + count) in place, every rank's summed
 *   (or max, min); every rank ends with the same bits.
 * reduce_scatter: send[send_off .. + world * count) reduced; rank r gets
 *   the r-th slice of count elements at recv[recv_off ..).
 * all_gather: every rank's send[send_off .. + count) into recv[recv_off
 *   + r * count ..) for r = 0 .. world-1. */
PGRT_API int pgrt_comm_all_reduce(pgrt_comm *c, pgrt_stream *s, pgrt_buf *buf, size_t offset,
                                  size_t count, pgrt_comm_op op);
PGRT_API int pgrt_comm_reduce_scatter(pgrt_comm *c, pgrt_stream *s, const pgrt_buf *send,
                                      size_t send_off, pgrt_buf *recv, size_t recv_off,
                                      size_t count, pgrt_comm_op op);
PGRT_API int pgrt_comm_all_gather(pgrt_comm *c, pgrt_stream *s, const pgrt_buf *send,
                                  size_t send_off, pgrt_buf *recv, size_t recv_off, size_t count);

/* Fuse the collectives between begin and end into one launch
 * (ncclGroupStart / ncclGroupEnd). Nesting is counted. */
PGRT_API int pgrt_comm_group_begin(pgrt_comm *c);
PGRT_API int pgrt_comm_group_end(pgrt_comm *c);

/* NCCL's asynchronous error for c (ncclCommGetAsyncError): 0, or
 * PGRT_ECOMM naming it (a peer that went away, a network error). */
PGRT_API int pgrt_comm_check(pgrt_comm *c);

/* Wait for stream s (whose work includes c's collectives) the way a rank
 * must: poll cuStreamQuery and c's asynchronous error, sleeping a little
 * between polls, for at most timeout_s seconds (0: the communicator's
 * bound). An error, or the bound passed, aborts c (so the other ranks'
 * own waits end too) and returns PGRT_ECOMM or PGRT_ETIMEOUT naming the
 * rank, the world and the seconds waited. */
PGRT_API int pgrt_comm_wait(pgrt_comm *c, pgrt_stream *s, double timeout_s);

/* n (1 .. 64) doubles of the host reduced over every rank through a small
 * device buffer of c's own: ordered on s, then waited for with
 * pgrt_comm_wait. For losses, counts and decisions every rank must share.
 * Not while s is capturing. */
PGRT_API int pgrt_comm_all_reduce_host(pgrt_comm *c, pgrt_stream *s, double *vals, size_t n,
                                       pgrt_comm_op op);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_COMM_H */
