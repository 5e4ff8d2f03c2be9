/* SPDX-License-Identifier: MIT */
/*
 * pgrt_comm (pgrt_comm.h): collectives over NCCL, found at run time:
 * dlopen of $PGRT_LIBNCCL alone when set, else libnccl.so.2, then
 * libnccl.so. Loaded once a process, under a lock, the first time a
 * communicator or an id needs it; a failed load is not remembered (the
 * next call tries again), a successful one stays: the library stays
 * mapped, as it keeps threads and CUDA state of its own.
 *
 * No NCCL header: the declarations below restate the documented C API
 * (nccl.h): ncclComm_t is an opaque pointer, ncclUniqueId 128 bytes passed
 * by value, ncclResult_t, ncclDataType_t and ncclRedOp_t are ints with
 * nccl.h's values, cudaStream_t is the driver's CUstream.
 *
 * Communicators are non-blocking (ncclCommInitRankConfig with blocking
 * 0): an NCCL call may answer ncclInProgress, and we then poll
 * ncclCommGetAsyncError, sleeping 10 us doubling to 1 ms between polls, until it settles or
 * the communicator's bound passes. That is what bounds creation: a rank
 * that never joins ends the others' pgrt_comm_create with PGRT_ETIMEOUT
 * instead of a hang. A library older than 2.14 has no
 * ncclCommInitRankConfig; its ncclCommInitRank blocks until every rank
 * has joined, unbounded.
 *
 * A communicator is in one of three states: healthy; failed (an NCCL call
 * or its asynchronous error reported an error: collectives, groups and
 * waits are refused with PGRT_ESTATE, destroy aborts it); aborted (NCCL's
 * communicator is gone: every call but destroy, rank, world and a second
 * abort is PGRT_ESTATE).
 *
 * Threads: a communicator belongs to one thread at a time, as a stream
 * does (NCCL's group calls are per thread too); pgrt_comm_abort included.
 * Different communicators may be used on different threads at once.
 */
#include "ptxgen/pgrt_comm.h"
#include "rt_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- NCCL ABI */

typedef struct nccl_comm_st *nccl_comm; /* ncclComm_t */

typedef struct nccl_unique_id {
    char internal[128];
} nccl_unique_id;
_Static_assert(sizeof(nccl_unique_id) == PGRT_COMM_ID_BYTES, "ncclUniqueId is 128 bytes");

/* ncclConfig_t as NCCL 2.14 declared it (ncclConfig_v21400), the oldest
 * layout with `blocking`. Newer libraries read `size` bytes of it and take
 * their defaults for every field a config of this version lacks. */
typedef struct nccl_config_v21400 {
    size_t size;
    unsigned magic;
    unsigned version;
    int blocking;
} nccl_config_v21400;
#define NCCL_API_MAGIC 0xcafebeefu
#define NCCL_CONFIG_VERSION 21400 /* NCCL_VERSION(2, 14, 0) */

enum {
    NCCL_SUCCESS = 0,
    NCCL_IN_PROGRESS = 7,
};
enum {
    NCCL_INT8 = 0,
    NCCL_UINT8 = 1,
    NCCL_INT32 = 2,
    NCCL_UINT32 = 3,
    NCCL_INT64 = 4,
    NCCL_UINT64 = 5,
    NCCL_FLOAT16 = 6,
    NCCL_FLOAT32 = 7,
    NCCL_FLOAT64 = 8,
    NCCL_BFLOAT16 = 9,
};
enum { NCCL_SUM = 0, NCCL_MAX = 2, NCCL_MIN = 3 };

/* X(required, field, symbol, return, parameters). ncclResult_t is an int
 * here; the enum has the same size and passing convention. Optional
 * entries may be NULL: ncclCommInitRankConfig and ncclCommFinalize came
 * with NCCL 2.14, ncclGetLastError with 2.13. */
#define NCCL_ENTRIES(X)                                                                       \
    X(1, get_version, "ncclGetVersion", int, (int *version))                                  \
    X(1, get_unique_id, "ncclGetUniqueId", int, (nccl_unique_id * id))                        \
    X(1, init_rank, "ncclCommInitRank", int,                                                  \
      (nccl_comm * comm, int nranks, nccl_unique_id id, int rank))                            \
    X(0, init_rank_config, "ncclCommInitRankConfig", int,                                     \
      (nccl_comm * comm, int nranks, nccl_unique_id id, int rank, nccl_config_v21400 *config)) \
    X(0, finalize, "ncclCommFinalize", int, (nccl_comm comm))                                  \
    X(1, destroy, "ncclCommDestroy", int, (nccl_comm comm))                                    \
    X(1, abort, "ncclCommAbort", int, (nccl_comm comm))                                        \
    X(1, get_async_error, "ncclCommGetAsyncError", int, (nccl_comm comm, int *async_error))   \
    X(1, get_error_string, "ncclGetErrorString", const char *, (int result))                  \
    X(0, get_last_error, "ncclGetLastError", const char *, (nccl_comm comm))                  \
    X(1, all_reduce, "ncclAllReduce", int,                                                    \
      (const void *send, void *recv, size_t count, int type, int op, nccl_comm comm,         \
       CUstream s))                                                                           \
    X(1, reduce_scatter, "ncclReduceScatter", int,                                            \
      (const void *send, void *recv, size_t recv_count, int type, int op, nccl_comm comm,    \
       CUstream s))                                                                           \
    X(1, all_gather, "ncclAllGather", int,                                                    \
      (const void *send, void *recv, size_t send_count, int type, nccl_comm comm, CUstream s)) \
    X(1, group_start, "ncclGroupStart", int, (void))                                          \
    X(1, group_end, "ncclGroupEnd", int, (void))

/* The process's NCCL: written once under `lock`, before `ready` is set,
 * and only read afterwards. */
static struct {
    pthread_mutex_t lock;
    bool ready;
    void *lib;
    char library[256];
    int version;
#define RT_X_(req, field, sym, ret, params) ret(*field) params;
    NCCL_ENTRIES(RT_X_)
#undef RT_X_
} nccl = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void append(char *buf, size_t len, const char *text)
{
    size_t used = strlen(buf);
    if (used + 1 < len)
        snprintf(buf + used, len - used, "%s%s", used ? "; " : "", text);
}

/* Open the library once; PGRT_ENOLIB with a message naming what was tried
 * (fn is the public call that needed it). */
static int nccl_load(const char *fn)
{
    pthread_mutex_lock(&nccl.lock);
    if (nccl.ready) {
        pthread_mutex_unlock(&nccl.lock);
        return 0;
    }
    const char *env = getenv("PGRT_LIBNCCL");
    static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
    const char *one[1] = {env};
    bool from_env = env && *env;
    const char *const *list = from_env ? one : names;
    size_t count = from_env ? 1 : sizeof names / sizeof names[0];
    char tried[768] = "";
    void *lib = NULL;
    size_t i;
    for (i = 0; i < count && !lib; i++) {
        lib = dlopen(list[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            append(tried, sizeof tried, e ? e : list[i]);
        }
    }
    if (!lib) {
        pthread_mutex_unlock(&nccl.lock);
        if (from_env)
            return rt_fail(PGRT_ENOLIB, "%s: no NCCL library: PGRT_LIBNCCL=%s does not load (%s)",
                           fn, env, tried);
        return rt_fail(PGRT_ENOLIB, "%s: no NCCL library (%s); PGRT_LIBNCCL names one", fn,
                       tried);
    }
    const char *path = list[i - 1];
    /* ISO C has no conversion from void * to a function pointer: copy bits. */
#define RT_X_(req, field, sym, ret, params)                                                  \
    {                                                                                        \
        void *p_ = dlsym(lib, sym);                                                          \
        if (!p_ && (req)) {                                                                  \
            dlclose(lib);                                                                    \
            pthread_mutex_unlock(&nccl.lock);                                                \
            return rt_fail(PGRT_ENOLIB, "%s: %s has no %s: not a usable NCCL", fn, path,     \
                           sym);                                                             \
        }                                                                                    \
        memcpy(&nccl.field, &p_, sizeof nccl.field);                                         \
    }
    NCCL_ENTRIES(RT_X_)
#undef RT_X_
    nccl.lib = lib;
    snprintf(nccl.library, sizeof nccl.library, "%s", path);
    if (nccl.get_version(&nccl.version) != NCCL_SUCCESS)
        nccl.version = 0;
    nccl.ready = true;
    pthread_mutex_unlock(&nccl.lock);
    return 0;
}

/* ---------------------------------------------------------------- the communicator */

typedef enum comm_state { COMM_OK, COMM_FAILED, COMM_ABORTED } comm_state;

#define HOST_MAX 64

struct pgrt_comm {
    pgrt_ctx *ctx;
    nccl_comm nc; /* NULL once aborted */
    int rank, world;
    double timeout_s;
    int version;
    comm_state state;
    int groups;        /* pgrt_comm_group_begin levels open */
    char why[384];     /* what failed or aborted it */
    pgrt_buf *scratch; /* pgrt_comm_all_reduce_host's device side: HOST_MAX f64 */
    double host[HOST_MAX]; /* ... and its host side */
};

static const char *result_name(int r)
{
    switch (r) {
    case 0: return "ncclSuccess";
    case 1: return "ncclUnhandledCudaError";
    case 2: return "ncclSystemError";
    case 3: return "ncclInternalError";
    case 4: return "ncclInvalidArgument";
    case 5: return "ncclInvalidUsage";
    case 6: return "ncclRemoteError";
    case 7: return "ncclInProgress";
    case 8: return "ncclTimeout";
    default: return "ncclResult_unrecognized";
    }
}

/* "<name>: <NCCL's string>[; NCCL's last error: <text>]" on one line. */
static void describe(nccl_comm nc, int r, char *buf, size_t len)
{
    const char *s = nccl.get_error_string ? nccl.get_error_string(r) : NULL;
    snprintf(buf, len, "%s: %s", result_name(r), s ? s : "(no text)");
    const char *last = nccl.get_last_error ? nccl.get_last_error(nc) : NULL;
    if (last && *last) {
        size_t used = strlen(buf);
        if (used + 1 < len)
            snprintf(buf + used, len - used, "; NCCL's last error: %s", last);
    }
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

#define SETTLE_TIMEOUT (-1)

/* A call on a non-blocking communicator that answered ncclInProgress (or,
 * with `always`, answered at all) is done when ncclCommGetAsyncError no
 * longer says in progress: poll it every millisecond for at most bound_s.
 * Returns the final ncclResult_t, or SETTLE_TIMEOUT. */
static int settle(nccl_comm nc, int r, bool always, double bound_s)
{
    if (r != NCCL_IN_PROGRESS && !(always && r == NCCL_SUCCESS))
        return r;
    double t0 = rt_now_ms();
    long pause_us = 10; /* a short wait answers soon, a long one costs little */
    for (;;) {
        int st = NCCL_IN_PROGRESS;
        int q = nccl.get_async_error(nc, &st);
        if (q != NCCL_SUCCESS)
            return q;
        if (st != NCCL_IN_PROGRESS)
            return st;
        if (rt_now_ms() - t0 >= bound_s * 1e3)
            return SETTLE_TIMEOUT;
        sleep_us(pause_us);
        pause_us = pause_us * 2 < 1000 ? pause_us * 2 : 1000;
    }
}

/* Close the groups left open (NCCL's group state is the thread's: one left
 * open would swallow the thread's later NCCL calls), then ncclCommAbort.
 * The result of NCCL's abort, or 0. */
static int abort_now(pgrt_comm *c)
{
    int r = NCCL_SUCCESS;
    (void)rt_ctx_bind(c->ctx); /* NCCL frees device memory of the current device */
    for (; c->groups > 0; c->groups--)
        (void)nccl.group_end(); /* whatever it says, the communicator goes next */
    if (c->nc) {
        r = nccl.abort(c->nc);
        c->nc = NULL;
    }
    c->state = COMM_ABORTED;
    /* The communicator is freed whatever the abort answers; in progress
     * means NCCL reclaims it in the background. */
    return r == NCCL_IN_PROGRESS ? NCCL_SUCCESS : r;
}

/* Record an NCCL error of `call` in fn: the communicator is failed from
 * now on. PGRT_ECOMM. */
static int fail_nccl(pgrt_comm *c, const char *fn, const char *call, int r)
{
    char d[320];
    describe(c->nc, r, d, sizeof d);
    if (c->state == COMM_OK) {
        c->state = COMM_FAILED;
        snprintf(c->why, sizeof c->why, "%s: %s", call, d);
    }
    return rt_fail(PGRT_ECOMM, "%s: rank %d of %d: %s: %s", fn, c->rank, c->world, call, d);
}

/* The bound passed on `call`: abort, PGRT_ETIMEOUT. */
static int time_out(pgrt_comm *c, const char *fn, const char *call, double bound_s)
{
    snprintf(c->why, sizeof c->why, "%s still in progress after %g s", call, bound_s);
    (void)abort_now(c); /* the timeout is what is reported */
    return rt_fail(PGRT_ETIMEOUT, "%s: rank %d of %d: %s was still in progress after %g s; "
                   "the communicator is aborted", fn, c->rank, c->world, call, bound_s);
}

/* What a call returned, settled: 0, PGRT_ECOMM or PGRT_ETIMEOUT. */
static int finish(pgrt_comm *c, const char *fn, const char *call, int r)
{
    r = settle(c->nc, r, false, c->timeout_s);
    if (r == SETTLE_TIMEOUT)
        return time_out(c, fn, call, c->timeout_s);
    if (r != NCCL_SUCCESS)
        return fail_nccl(c, fn, call, r);
    return 0;
}

static int usable(const pgrt_comm *c, const char *fn)
{
    if (c->state == COMM_ABORTED)
        return rt_fail(PGRT_ESTATE, "%s: rank %d of %d: the communicator was aborted (%s); "
                       "only pgrt_comm_destroy is left", fn, c->rank, c->world, c->why);
    if (c->state == COMM_FAILED)
        return rt_fail(PGRT_ESTATE, "%s: rank %d of %d: the communicator failed earlier (%s); "
                       "abort or destroy it", fn, c->rank, c->world, c->why);
    return 0;
}

static int stream_of(const pgrt_comm *c, const pgrt_stream *s, const char *fn)
{
    if (s->ctx != c->ctx)
        return rt_fail(PGRT_EINVAL, "%s: the stream belongs to another context than the "
                       "communicator's", fn);
    return 0;
}

/* The NCCL type of a buffer's elements. */
static int type_of(const pgrt_comm *c, const pgrt_buf *b, const char *fn, const char *arg,
                   int *out)
{
    if (b->ctx != c->ctx)
        return rt_fail(PGRT_EINVAL, "%s: %s belongs to another context than the communicator's",
                       fn, arg);
    switch (b->type) {
    case PG_S8: *out = NCCL_INT8; return 0;
    case PG_U8: *out = NCCL_UINT8; return 0;
    case PG_S32: *out = NCCL_INT32; return 0;
    case PG_U32: *out = NCCL_UINT32; return 0;
    case PG_S64: *out = NCCL_INT64; return 0;
    case PG_U64: *out = NCCL_UINT64; return 0;
    case PG_F16: *out = NCCL_FLOAT16; return 0;
    case PG_F32: *out = NCCL_FLOAT32; return 0;
    case PG_F64: *out = NCCL_FLOAT64; return 0;
    case PG_BF16: *out = NCCL_BFLOAT16; return 0;
    default: break;
    }
    const char *name = pg_type_name(b->type);
    return rt_fail(PGRT_EINVAL, "%s: %s holds %s, which NCCL has no type for (f32, f16, bf16, "
                   "f64, s32, u32, s64, u64, s8, u8)", fn, arg, name ? name : "an invalid type");
}

static int op_of(pgrt_comm_op op, const char *fn, int *out)
{
    switch (op) {
    case PGRT_COMM_SUM: *out = NCCL_SUM; return 0;
    case PGRT_COMM_MAX: *out = NCCL_MAX; return 0;
    case PGRT_COMM_MIN: *out = NCCL_MIN; return 0;
    }
    return rt_fail(PGRT_EINVAL, "%s: op %d is not PGRT_COMM_SUM, PGRT_COMM_MAX or PGRT_COMM_MIN",
                   fn, (int)op);
}

static int range(const pgrt_buf *b, size_t offset, size_t count, const char *fn, const char *arg)
{
    if (offset > b->count || count > b->count - offset)
        return rt_fail(PGRT_ERANGE, "%s: %s: elements [%zu, %zu+%zu) are outside a buffer of %zu",
                       fn, arg, offset, offset, count, b->count);
    return 0;
}

/* world * count elements, refusing an overflow. */
static int times_world(const pgrt_comm *c, size_t count, const char *fn, size_t *out)
{
    if (count > SIZE_MAX / (size_t)c->world)
        return rt_fail(PGRT_ERANGE, "%s: %zu elements a rank times %d ranks overflows size_t", fn,
                       count, c->world);
    *out = count * (size_t)c->world;
    return 0;
}

static void *addr(const pgrt_buf *b, size_t offset)
{
    return (void *)(uintptr_t)(b->ptr + (CUdeviceptr)(offset * b->elsize));
}

/* ---------------------------------------------------------------- public */

int pgrt_comm_id_new(pgrt_ctx *ctx, pgrt_comm_id *id)
{
    static const char fn[] = "pgrt_comm_id_new";
    RT_NONNULL(fn, ctx, "ctx");
    RT_NONNULL(fn, id, "id");
    int rc;
    if ((rc = nccl_load(fn)))
        return rc;
    /* NCCL's first call sets up its CUDA state on the current device. */
    if ((rc = rt_ctx_bind(ctx)))
        return rc;
    nccl_unique_id u;
    int r = nccl.get_unique_id(&u);
    if (r != NCCL_SUCCESS) {
        char d[320];
        describe(NULL, r, d, sizeof d);
        return rt_fail(PGRT_ECOMM, "%s: ncclGetUniqueId: %s", fn, d);
    }
    memcpy(id->bytes, u.internal, sizeof id->bytes);
    return 0;
}

int pgrt_comm_create(pgrt_ctx *ctx, const pgrt_comm_params *p, pgrt_comm **out)
{
    static const char fn[] = "pgrt_comm_create";
    RT_NONNULL(fn, ctx, "ctx");
    RT_NONNULL(fn, p, "params");
    RT_NONNULL(fn, out, "out");
    *out = NULL;
    if (p->world < 1)
        return rt_fail(PGRT_EINVAL, "%s: world is %d: at least 1", fn, p->world);
    if (p->rank < 0 || p->rank >= p->world)
        return rt_fail(PGRT_EINVAL, "%s: rank %d is not in 0 .. %d (world %d)", fn, p->rank,
                       p->world - 1, p->world);
    if (!(p->timeout_s >= 0.0 && p->timeout_s <= 1e9))
        return rt_fail(PGRT_EINVAL, "%s: timeout_s is %g: seconds up to 1e9, or 0 for 600", fn,
                       p->timeout_s);
    /* Device allocations (ours and NCCL's) would break a capture on this
     * thread, as a module load would. */
    if (atomic_load(&ctx->capturing) > 0)
        return rt_fail(PGRT_ECAPTURE, "%s: a stream of the context is capturing: create the "
                       "communicator before any capture", fn);
    int rc;
    if ((rc = nccl_load(fn)))
        return rc;
    double bound = p->timeout_s > 0 ? p->timeout_s : 600.0;
    pgrt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return rt_fail(PGRT_ENOMEM, "%s: out of memory", fn);
    c->ctx = ctx;
    c->rank = p->rank;
    c->world = p->world;
    c->timeout_s = bound;
    c->version = nccl.version;
    if ((rc = pgrt_buf_alloc(ctx, PG_F64, HOST_MAX, &c->scratch)) || (rc = rt_ctx_bind(ctx))) {
        pgrt_buf_destroy(&c->scratch);
        free(c);
        return rc;
    }

    nccl_unique_id id;
    memcpy(id.internal, p->id.bytes, sizeof id.internal);
    const char *call;
    int r;
    if (nccl.init_rank_config) {
        call = "ncclCommInitRankConfig";
        nccl_config_v21400 cfg = {sizeof cfg, NCCL_API_MAGIC, NCCL_CONFIG_VERSION, 0};
        r = nccl.init_rank_config(&c->nc, c->world, id, c->rank, &cfg);
        /* A non-blocking init goes on in NCCL's threads: it is done when
         * the asynchronous error says so. */
        if (c->nc && (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS))
            r = settle(c->nc, r, true, c->timeout_s);
    } else {
        call = "ncclCommInitRank"; /* NCCL < 2.14: blocks until every rank joined */
        r = nccl.init_rank(&c->nc, c->world, id, c->rank);
    }
    if (r != NCCL_SUCCESS) {
        char d[320] = "";
        if (r != SETTLE_TIMEOUT)
            describe(c->nc, r, d, sizeof d);
        if (c->nc)
            (void)nccl.abort(c->nc); /* what init said is the error reported */
        pgrt_buf_destroy(&c->scratch);
        free(c);
        if (r == SETTLE_TIMEOUT)
            return rt_fail(PGRT_ETIMEOUT, "%s: rank %d of %d: the other ranks did not join "
                           "within %g s (%s still in progress; aborted)", fn, p->rank, p->world,
                           bound, call);
        return rt_fail(PGRT_ECOMM, "%s: rank %d of %d: %s: %s", fn, p->rank, p->world, call, d);
    }
    if (!c->nc) {
        pgrt_buf_destroy(&c->scratch);
        free(c);
        return rt_fail(PGRT_ECOMM, "%s: rank %d of %d: %s succeeded but gave no communicator",
                       fn, p->rank, p->world, call);
    }
    *out = c;
    return 0;
}

void pgrt_comm_destroy(pgrt_comm **pc)
{
    if (!pc || !*pc)
        return;
    pgrt_comm *c = *pc;
    *pc = NULL;
    /* Nothing to return to: a failure lands in this thread's message. A
     * group left open, or a failed finalize, ends in an abort instead. */
    if (c->state == COMM_OK && c->groups == 0 && rt_ctx_bind(c->ctx) == 0) {
        int r = NCCL_SUCCESS;
        if (nccl.finalize)
            r = settle(c->nc, nccl.finalize(c->nc), true, c->timeout_s);
        if (r == SETTLE_TIMEOUT) {
            (void)time_out(c, "pgrt_comm_destroy", "ncclCommFinalize", c->timeout_s);
        } else if (r != NCCL_SUCCESS) {
            (void)fail_nccl(c, "pgrt_comm_destroy", "ncclCommFinalize", r);
        } else {
            r = nccl.destroy(c->nc);
            c->nc = NULL; /* freed or not, it is NCCL's now: never aborted after this */
            if (r != NCCL_SUCCESS && r != NCCL_IN_PROGRESS) {
                char d[320];
                describe(NULL, r, d, sizeof d);
                (void)rt_fail(PGRT_ECOMM, "pgrt_comm_destroy: rank %d of %d: ncclCommDestroy: %s",
                              c->rank, c->world, d);
            }
        }
    }
    if (c->nc || c->groups)
        (void)abort_now(c);
    pgrt_buf_destroy(&c->scratch);
    free(c);
}

int pgrt_comm_abort(pgrt_comm *c)
{
    RT_NONNULL(__func__, c, "communicator");
    if (c->state == COMM_ABORTED)
        return 0;
    if (c->state == COMM_OK)
        snprintf(c->why, sizeof c->why, "pgrt_comm_abort");
    int r = abort_now(c);
    if (r != NCCL_SUCCESS) {
        char d[320];
        describe(NULL, r, d, sizeof d);
        return rt_fail(PGRT_ECOMM, "pgrt_comm_abort: rank %d of %d: ncclCommAbort: %s", c->rank,
                       c->world, d);
    }
    return 0;
}

int pgrt_comm_rank(const pgrt_comm *c)
{
    RT_NONNULL(__func__, c, "communicator");
    return c->rank;
}

int pgrt_comm_world(const pgrt_comm *c)
{
    RT_NONNULL(__func__, c, "communicator");
    return c->world;
}

int pgrt_comm_nccl_version(const pgrt_comm *c)
{
    static const char fn[] = "pgrt_comm_nccl_version";
    RT_NONNULL(fn, c, "communicator");
    if (c->state == COMM_ABORTED)
        return usable(c, fn);
    return c->version;
}

static int all_reduce(pgrt_comm *c, pgrt_stream *s, pgrt_buf *buf, size_t offset, size_t count,
                      pgrt_comm_op op, const char *fn)
{
    int rc, type = 0, nop = 0;
    if ((rc = usable(c, fn)) || (rc = stream_of(c, s, fn)) ||
        (rc = type_of(c, buf, fn, "buf", &type)) || (rc = op_of(op, fn, &nop)) ||
        (rc = range(buf, offset, count, fn, "buf")))
        return rc;
    if (count == 0)
        return 0;
    if ((rc = rt_ctx_bind(c->ctx)))
        return rc;
    void *p = addr(buf, offset);
    return finish(c, fn, "ncclAllReduce",
                  nccl.all_reduce(p, p, count, type, nop, c->nc, rt_stream_cu(s)));
}

int pgrt_comm_all_reduce(pgrt_comm *c, pgrt_stream *s, pgrt_buf *buf, size_t offset,
                         size_t count, pgrt_comm_op op)
{
    static const char fn[] = "pgrt_comm_all_reduce";
    RT_NONNULL(fn, c, "communicator");
    RT_NONNULL(fn, s, "stream");
    RT_NONNULL(fn, buf, "buf");
    return all_reduce(c, s, buf, offset, count, op, fn);
}

/* The checks two-buffer collectives share: both of c's context, one type. */
static int pair(pgrt_comm *c, pgrt_stream *s, const pgrt_buf *send, const pgrt_buf *recv,
                const char *fn, int *type)
{
    int rc, t2;
    if ((rc = usable(c, fn)) || (rc = stream_of(c, s, fn)) ||
        (rc = type_of(c, send, fn, "send", type)) || (rc = type_of(c, recv, fn, "recv", &t2)))
        return rc;
    if (send->type != recv->type)
        return rt_fail(PGRT_EINVAL, "%s: send holds %s and recv %s: one type a call", fn,
                       pg_type_name(send->type), pg_type_name(recv->type));
    return 0;
}

int pgrt_comm_reduce_scatter(pgrt_comm *c, pgrt_stream *s, const pgrt_buf *send,
                             size_t send_off, pgrt_buf *recv, size_t recv_off, size_t count,
                             pgrt_comm_op op)
{
    static const char fn[] = "pgrt_comm_reduce_scatter";
    RT_NONNULL(fn, c, "communicator");
    RT_NONNULL(fn, s, "stream");
    RT_NONNULL(fn, send, "send");
    RT_NONNULL(fn, recv, "recv");
    int rc, type = 0, nop = 0;
    size_t total = 0;
    if ((rc = pair(c, s, send, recv, fn, &type)) || (rc = op_of(op, fn, &nop)) ||
        (rc = times_world(c, count, fn, &total)) ||
        (rc = range(send, send_off, total, fn, "send")) ||
        (rc = range(recv, recv_off, count, fn, "recv")))
        return rc;
    if (count == 0)
        return 0;
    if ((rc = rt_ctx_bind(c->ctx)))
        return rc;
    return finish(c, fn, "ncclReduceScatter",
                  nccl.reduce_scatter(addr(send, send_off), addr(recv, recv_off), count, type,
                                      nop, c->nc, rt_stream_cu(s)));
}

int pgrt_comm_all_gather(pgrt_comm *c, pgrt_stream *s, const pgrt_buf *send, size_t send_off,
                         pgrt_buf *recv, size_t recv_off, size_t count)
{
    static const char fn[] = "pgrt_comm_all_gather";
    RT_NONNULL(fn, c, "communicator");
    RT_NONNULL(fn, s, "stream");
    RT_NONNULL(fn, send, "send");
    RT_NONNULL(fn, recv, "recv");
    int rc, type = 0;
    size_t total = 0;
    if ((rc = pair(c, s, send, recv, fn, &type)) || (rc = times_world(c, count, fn, &total)) ||
        (rc = range(send, send_off, count, fn, "send")) ||
        (rc = range(recv, recv_off, total, fn, "recv")))
        return rc;
    if (count == 0)
        return 0;
    if ((rc = rt_ctx_bind(c->ctx)))
        return rc;
    return finish(c, fn, "ncclAllGather",
                  nccl.all_gather(addr(send, send_off), addr(recv, recv_off), count, type, c->nc,
                                  rt_stream_cu(s)));
}

int pgrt_comm_group_begin(pgrt_comm *c)
{
    static const char fn[] = "pgrt_comm_group_begin";
    RT_NONNULL(fn, c, "communicator");
    int rc;
    if ((rc = usable(c, fn)))
        return rc;
    int r = nccl.group_start();
    if (r != NCCL_SUCCESS)
        return fail_nccl(c, fn, "ncclGroupStart", r);
    c->groups++;
    return 0;
}

int pgrt_comm_group_end(pgrt_comm *c)
{
    static const char fn[] = "pgrt_comm_group_end";
    RT_NONNULL(fn, c, "communicator");
    int rc;
    if ((rc = usable(c, fn)))
        return rc;
    if (c->groups == 0)
        return rt_fail(PGRT_ESTATE, "%s: rank %d of %d: no group is open "
                       "(pgrt_comm_group_begin first)", fn, c->rank, c->world);
    if ((rc = rt_ctx_bind(c->ctx)))
        return rc;
    c->groups--;
    /* The collectives of the group are launched here: with a non-blocking
     * communicator NCCL may answer in progress. */
    return finish(c, fn, "ncclGroupEnd", nccl.group_end());
}

int pgrt_comm_check(pgrt_comm *c)
{
    static const char fn[] = "pgrt_comm_check";
    RT_NONNULL(fn, c, "communicator");
    if (c->state == COMM_ABORTED)
        return usable(c, fn);
    if (c->state == COMM_FAILED)
        return rt_fail(PGRT_ECOMM, "%s: rank %d of %d: the communicator failed: %s", fn, c->rank,
                       c->world, c->why);
    int st = NCCL_SUCCESS;
    int q = c->nc ? nccl.get_async_error(c->nc, &st) : NCCL_SUCCESS;
    if (q != NCCL_SUCCESS)
        return fail_nccl(c, fn, "ncclCommGetAsyncError", q);
    if (st != NCCL_SUCCESS && st != NCCL_IN_PROGRESS)
        return fail_nccl(c, fn, "the asynchronous error", st);
    return 0;
}

static int bound_of(const pgrt_comm *c, double timeout_s, const char *fn, double *out)
{
    if (!(timeout_s >= 0.0 && timeout_s <= 1e9))
        return rt_fail(PGRT_EINVAL, "%s: timeout_s is %g: seconds up to 1e9, or 0 for the "
                       "communicator's bound", fn, timeout_s);
    *out = timeout_s > 0 ? timeout_s : c->timeout_s;
    return 0;
}

static int wait_stream(pgrt_comm *c, pgrt_stream *s, double bound_s, const char *fn)
{
    double t0 = rt_now_ms();
    long pause_us = 20;
    for (;;) {
        bool idle = false;
        int rc = pgrt_stream_query(s, &idle);
        double waited = (rt_now_ms() - t0) * 1e-3;
        if (rc) {
            /* The stream's own work failed: the collectives behind it will
             * never run on this rank, so the others must not wait for it. */
            if (c->state != COMM_ABORTED)
                snprintf(c->why, sizeof c->why, "the stream failed: %s", pgrt_last_message());
            (void)abort_now(c);
            rt_msg_append(" (%s: rank %d of %d, after %.3g s; the communicator is aborted)", fn,
                          c->rank, c->world, waited);
            return rc;
        }
        if (idle)
            return 0;
        int st = NCCL_SUCCESS;
        int q = nccl.get_async_error(c->nc, &st);
        if (q != NCCL_SUCCESS || (st != NCCL_SUCCESS && st != NCCL_IN_PROGRESS)) {
            char d[320];
            describe(c->nc, q != NCCL_SUCCESS ? q : st, d, sizeof d);
            snprintf(c->why, sizeof c->why, "%s", d);
            (void)abort_now(c); /* NCCL's error is the one reported */
            return rt_fail(PGRT_ECOMM, "%s: rank %d of %d: %s after %.3g s; the communicator is "
                           "aborted", fn, c->rank, c->world, d, waited);
        }
        if (waited >= bound_s) {
            snprintf(c->why, sizeof c->why, "a wait passed its bound of %g s", bound_s);
            (void)abort_now(c); /* the timeout is what is reported */
            return rt_fail(PGRT_ETIMEOUT, "%s: rank %d of %d: the stream was still busy after "
                           "%g s (a rank that stopped or fell behind, or work that does not "
                           "end); the communicator is aborted", fn, c->rank, c->world, bound_s);
        }
        sleep_us(pause_us);
        /* at most 100 us late: a training step waits here every step */
        pause_us = pause_us * 2 < 100 ? pause_us * 2 : 100;
    }
}

/* Whether s is capturing: our own flag, or the driver's answer for a
 * capture begun outside the runtime. */
static int capturing(pgrt_stream *s, bool *yes)
{
    *yes = s->capturing;
    if (*yes || !s->ctx->drv.StreamIsCapturing)
        return 0;
    return pgrt_stream_is_capturing(s, yes);
}

int pgrt_comm_wait(pgrt_comm *c, pgrt_stream *s, double timeout_s)
{
    static const char fn[] = "pgrt_comm_wait";
    RT_NONNULL(fn, c, "communicator");
    RT_NONNULL(fn, s, "stream");
    int rc;
    double bound = 0;
    if ((rc = usable(c, fn)) || (rc = stream_of(c, s, fn)) ||
        (rc = bound_of(c, timeout_s, fn, &bound)))
        return rc;
    /* Querying a capturing stream would invalidate its capture. */
    bool cap;
    if ((rc = capturing(s, &cap)))
        return rc;
    if (cap)
        return rt_fail(PGRT_ECAPTURE, "%s: the stream is capturing: wait after the graph's "
                       "launch instead", fn);
    return wait_stream(c, s, bound, fn);
}

int pgrt_comm_all_reduce_host(pgrt_comm *c, pgrt_stream *s, double *vals, size_t n,
                              pgrt_comm_op op)
{
    static const char fn[] = "pgrt_comm_all_reduce_host";
    RT_NONNULL(fn, c, "communicator");
    RT_NONNULL(fn, s, "stream");
    RT_NONNULL(fn, vals, "vals");
    if (n < 1 || n > HOST_MAX)
        return rt_fail(PGRT_ERANGE, "%s: n is %zu: 1 .. %d values", fn, n, HOST_MAX);
    int rc, nop = 0;
    bool cap;
    if ((rc = usable(c, fn)) || (rc = stream_of(c, s, fn)) || (rc = op_of(op, fn, &nop)) ||
        (rc = capturing(s, &cap)))
        return rc;
    if (cap)
        return rt_fail(PGRT_ECAPTURE, "%s: the stream is capturing: the values are the host's "
                       "now, and the call waits for them", fn);
    /* The host side is ours, not vals: a copy still queued when a wait
     * gives up lands in the communicator, never in the caller's memory.
     * Copies between pageable memory and the device may wait for the
     * stream's earlier work, with no bound: so the stream is waited for
     * (bounded) before each copy. */
    memcpy(c->host, vals, n * sizeof *vals);
    if ((rc = wait_stream(c, s, c->timeout_s, fn)) ||
        (rc = pgrt_buf_upload_async(c->scratch, 0, c->host, n, s)) ||
        (rc = all_reduce(c, s, c->scratch, 0, n, op, fn)) ||
        (rc = wait_stream(c, s, c->timeout_s, fn)) ||
        (rc = pgrt_buf_download_async(c->scratch, 0, c->host, n, s)) ||
        (rc = wait_stream(c, s, c->timeout_s, fn)))
        return rc;
    memcpy(vals, c->host, n * sizeof *vals);
    return 0;
}
