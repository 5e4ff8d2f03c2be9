/* SPDX-License-Identifier: MIT */
/*
 * A fake libnccl for the runtime's unit tests, beside the fake driver
 * (fakecuda.h): it exports the NCCL entry points the runtime resolves,
 * with their real signatures, records every call that matters in a log,
 * and plays a communicator of any size whose other ranks always join:
 * the collectives run on the host (the fake driver's "device" pointers are
 * host pointers) as if every rank held the same data, so a sum of f32 or
 * f64 is the value times the world, max and min and the integer types a
 * copy; a reduce-scatter hands rank r the r-th slice; an all-gather
 * repeats the rank's data world times.
 *
 * A non-blocking communicator (ncclCommInitRankConfig with blocking 0)
 * answers ncclInProgress at init and its asynchronous error says in
 * progress for one query (FAKENCCL_INIT_POLLS queries), then success.
 *
 * Steered by FAKENCCL, read at each call: a comma-separated list of
 *   init-error            init returns ncclSystemError, no communicator
 *   init-async-error      a non-blocking init fails later: the
 *                         asynchronous error turns ncclSystemError
 *   init-hang             a non-blocking init never completes
 *   async-error-after:N   after N queries of a communicator's
 *                         asynchronous error (read at init; counted once
 *                         the init is seen complete) it turns
 *                         ncclRemoteError
 *   allreduce-error       ncclAllReduce returns ncclUnhandledCudaError
 *   progress:N            a collective or ncclGroupEnd on a non-blocking
 *                         communicator answers ncclInProgress and its
 *                         asynchronous error says so N queries long
 *   progress-hang         ... forever
 *   finalize-hang         ncclCommFinalize never completes
 *   uniqueid-error        ncclGetUniqueId returns ncclSystemError
 * An injected error also sets ncclGetLastError's text:
 * "fake: <mode> injected".
 *
 * Built twice: fakenccl (NCCL 2.27.3) and fakenccl-old (-DFAKENCCL_OLD,
 * NCCL 2.12.12: no ncclCommInitRankConfig, ncclCommFinalize or
 * ncclGetLastError, every communicator blocking).
 */
#ifndef PTXGEN_FAKENCCL_H
#define PTXGEN_FAKENCCL_H

#include <stddef.h>

#define FAKENCCL_VERSION 22703
#define FAKENCCL_OLD_VERSION 21212

/* One call. Fields that do not apply to it are 0 / NULL. */
typedef struct fakenccl_call {
    char name[32];         /* "ncclAllReduce" */
    int result;            /* what the call returned */
    void *comm;            /* the communicator it named (made, for init) */
    const void *send;
    void *recv;
    size_t count;          /* the count argument as NCCL takes it */
    int datatype, op;
    void *stream;
    int rank, nranks;      /* init */
    unsigned char id[16];  /* init: the unique id's first bytes */
    int has_config;        /* init: ncclCommInitRankConfig */
    size_t cfg_size;
    unsigned cfg_magic, cfg_version;
    int cfg_blocking;
    int group_depth;       /* ncclGroupStart levels open at the call */
} fakenccl_call;

typedef void (*fakenccl_reset_fn)(void);
typedef int (*fakenccl_count_fn)(void);
typedef const fakenccl_call *(*fakenccl_call_at_fn)(int i);

/* Exported by the fake:
 *   void fakenccl_reset(void);                 forget the calls and counters
 *   int fakenccl_call_count(void);
 *   const fakenccl_call *fakenccl_call_at(int i);
 *   int fakenccl_live_comms(void);             inits that gave a communicator, minus
 *                                              destroys and aborts
 *   int fakenccl_async_queries(void);          ncclCommGetAsyncError calls since reset
 *   int fakenccl_group_depth(void);            ncclGroupStart levels open now
 */

#endif /* PTXGEN_FAKENCCL_H */
