/* SPDX-License-Identifier: MIT */
/* The fake NCCL described in fakenccl.h. */
#include "fakenccl.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))
#define MAX_LOG 1024

enum {
    SUCCESS = 0,
    UNHANDLED_CUDA_ERROR = 1,
    SYSTEM_ERROR = 2,
    INVALID_ARGUMENT = 4,
    REMOTE_ERROR = 6,
    IN_PROGRESS = 7,
};

typedef struct {
    char internal[128];
} unique_id;

/* ncclConfig_t's head, as every version since 2.14 starts it. */
typedef struct {
    size_t size;
    unsigned magic;
    unsigned version;
    int blocking;
} config_head;

struct fake_comm {
    int rank, nranks, blocking;
    int pending;      /* asynchronous error queries still "in progress"; -1: forever */
    int after;        /* the asynchronous error once pending ends */
    int async_error;  /* set: every query answers it */
    int error_after;  /* async-error-after:N, from init; -1: none */
    int settled;      /* the init's completion was reported */
    int queries;      /* queries since then */
};
typedef struct fake_comm *comm_t;
typedef void *stream_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fakenccl_call log_[MAX_LOG];
static int nlog, live, async_queries, ids;
static _Thread_local int depth;
static _Thread_local comm_t group_comm; /* the last communicator a group's call named */
static char last_error[256];

/* Whether FAKENCCL lists `name` ("progress" matches "progress:3"; *n gets
 * the number after the colon, when n is not NULL). */
static int mode(const char *name, int *n)
{
    const char *v = getenv("FAKENCCL");
    size_t len = strlen(name);
    while (v && *v) {
        const char *end = strchr(v, ',');
        size_t tok = end ? (size_t)(end - v) : strlen(v);
        if (tok >= len && strncmp(v, name, len) == 0 && (tok == len || v[len] == ':')) {
            if (n)
                *n = tok > len ? atoi(v + len + 1) : 0;
            return 1;
        }
        v = end ? end + 1 : NULL;
    }
    return 0;
}

static int inject(const char *what, int result)
{
    snprintf(last_error, sizeof last_error, "fake: %s injected", what);
    return result;
}

static fakenccl_call *record(const char *name)
{
    static fakenccl_call spare;
    pthread_mutex_lock(&lock);
    fakenccl_call *c = nlog < MAX_LOG ? &log_[nlog++] : &spare;
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->group_depth = depth;
    pthread_mutex_unlock(&lock);
    return c;
}

static int done(fakenccl_call *c, int result)
{
    c->result = result;
    return result;
}

/* ---------------------------------------------------------------- inspection */

FAKE_API void fakenccl_reset(void);
FAKE_API int fakenccl_call_count(void);
FAKE_API const fakenccl_call *fakenccl_call_at(int i);
FAKE_API int fakenccl_live_comms(void);
FAKE_API int fakenccl_async_queries(void);
FAKE_API int fakenccl_group_depth(void);

void fakenccl_reset(void)
{
    pthread_mutex_lock(&lock);
    nlog = 0;
    async_queries = 0;
    pthread_mutex_unlock(&lock);
}
int fakenccl_call_count(void) { return nlog; }
const fakenccl_call *fakenccl_call_at(int i) { return i >= 0 && i < nlog ? &log_[i] : NULL; }
int fakenccl_live_comms(void) { return live; }
int fakenccl_async_queries(void) { return async_queries; }
int fakenccl_group_depth(void) { return depth; }

/* ---------------------------------------------------------------- entry points */

FAKE_API int ncclGetVersion(int *version);
FAKE_API int ncclGetUniqueId(unique_id *id);
FAKE_API int ncclCommInitRank(comm_t *comm, int nranks, unique_id id, int rank);
FAKE_API int ncclCommDestroy(comm_t comm);
FAKE_API int ncclCommAbort(comm_t comm);
FAKE_API int ncclCommGetAsyncError(comm_t comm, int *async_error);
FAKE_API const char *ncclGetErrorString(int result);
FAKE_API int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op,
                           comm_t comm, stream_t s);
FAKE_API int ncclReduceScatter(const void *send, void *recv, size_t recv_count, int type, int op,
                               comm_t comm, stream_t s);
FAKE_API int ncclAllGather(const void *send, void *recv, size_t send_count, int type,
                           comm_t comm, stream_t s);
FAKE_API int ncclGroupStart(void);
FAKE_API int ncclGroupEnd(void);

int ncclGetVersion(int *version)
{
#ifdef FAKENCCL_OLD
    *version = FAKENCCL_OLD_VERSION;
#else
    *version = FAKENCCL_VERSION;
#endif
    return SUCCESS;
}

int ncclGetUniqueId(unique_id *id)
{
    fakenccl_call *c = record("ncclGetUniqueId");
    if (mode("uniqueid-error", NULL))
        return done(c, inject("uniqueid-error", SYSTEM_ERROR));
    memset(id, 0, sizeof *id);
    int n = snprintf(id->internal, sizeof id->internal, "FAKEID%d", ++ids);
    for (size_t i = (size_t)n + 1; i < sizeof id->internal; i++)
        id->internal[i] = (char)(i * 7);
    return done(c, SUCCESS);
}

static int init(const char *name, comm_t *comm, int nranks, unique_id id, int rank,
                const config_head *cfg)
{
    fakenccl_call *c = record(name);
    c->rank = rank;
    c->nranks = nranks;
    memcpy(c->id, id.internal, sizeof c->id);
    int blocking = 1;
    if (cfg) {
        /* What NCCL reads: the size first, then no more than it says. */
        config_head h = {0, 0, 0, 1};
        size_t size;
        memcpy(&size, cfg, sizeof size);
        memcpy(&h, cfg, size < sizeof h ? size : sizeof h);
        c->has_config = 1;
        c->cfg_size = size;
        c->cfg_magic = h.magic;
        c->cfg_version = h.version;
        c->cfg_blocking = h.blocking;
        if (h.magic != 0xcafebeefu || size < sizeof h)
            return done(c, inject("a config not made by NCCL_CONFIG_INITIALIZER",
                                  INVALID_ARGUMENT));
        if (h.version >= 21400)
            blocking = h.blocking;
    }
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return done(c, INVALID_ARGUMENT);
    *comm = NULL;
    if (mode("init-error", NULL))
        return done(c, inject("init-error", SYSTEM_ERROR));
    struct fake_comm *f = calloc(1, sizeof *f);
    if (!f)
        return done(c, SYSTEM_ERROR);
    f->rank = rank;
    f->nranks = nranks;
    f->blocking = blocking;
    f->error_after = -1;
    int n = 0;
    if (mode("async-error-after", &n))
        f->error_after = n;
    live++;
    *comm = f;
    c->comm = f;
    if (blocking) {
        f->settled = 1;
        return done(c, SUCCESS);
    }
    int polls = 1;
    const char *p = getenv("FAKENCCL_INIT_POLLS");
    if (p && *p)
        polls = atoi(p);
    f->pending = mode("init-hang", NULL) ? -1 : polls;
    if (mode("init-async-error", NULL)) {
        f->after = SYSTEM_ERROR;
        snprintf(last_error, sizeof last_error, "fake: init-async-error injected");
    }
    return done(c, IN_PROGRESS);
}

int ncclCommInitRank(comm_t *comm, int nranks, unique_id id, int rank)
{
    return init("ncclCommInitRank", comm, nranks, id, rank, NULL);
}

#ifndef FAKENCCL_OLD
FAKE_API int ncclCommInitRankConfig(comm_t *comm, int nranks, unique_id id, int rank,
                                    config_head *config);
FAKE_API int ncclCommFinalize(comm_t comm);
FAKE_API const char *ncclGetLastError(comm_t comm);

int ncclCommInitRankConfig(comm_t *comm, int nranks, unique_id id, int rank, config_head *config)
{
    return init("ncclCommInitRankConfig", comm, nranks, id, rank, config);
}

int ncclCommFinalize(comm_t comm)
{
    fakenccl_call *c = record("ncclCommFinalize");
    c->comm = comm;
    if (!comm)
        return done(c, INVALID_ARGUMENT);
    if (comm->blocking)
        return done(c, SUCCESS);
    comm->pending = mode("finalize-hang", NULL) ? -1 : 1;
    return done(c, IN_PROGRESS);
}

const char *ncclGetLastError(comm_t comm)
{
    (void)comm;
    return last_error;
}
#endif

int ncclCommDestroy(comm_t comm)
{
    fakenccl_call *c = record("ncclCommDestroy");
    c->comm = comm;
    if (!comm)
        return done(c, INVALID_ARGUMENT);
    if (group_comm == comm)
        group_comm = NULL;
    free(comm);
    live--;
    return done(c, SUCCESS);
}

int ncclCommAbort(comm_t comm)
{
    fakenccl_call *c = record("ncclCommAbort");
    c->comm = comm;
    if (!comm)
        return done(c, SUCCESS);
    if (group_comm == comm)
        group_comm = NULL;
    free(comm);
    live--;
    return done(c, SUCCESS);
}

/* Not in the log (a wait polls it many times): counted. */
int ncclCommGetAsyncError(comm_t comm, int *async_error)
{
    pthread_mutex_lock(&lock);
    async_queries++;
    pthread_mutex_unlock(&lock);
    if (!comm || !async_error)
        return INVALID_ARGUMENT;
    if (comm->pending != 0) {
        if (comm->pending > 0 && --comm->pending == 0 && comm->after)
            comm->async_error = comm->after;
        *async_error = comm->async_error ? comm->async_error : IN_PROGRESS;
        return SUCCESS;
    }
    if (!comm->settled) { /* the query that sees a non-blocking init done */
        comm->settled = 1;
        *async_error = comm->async_error;
        return SUCCESS;
    }
    if (comm->error_after >= 0 && ++comm->queries > comm->error_after && !comm->async_error)
        comm->async_error = inject("async-error-after", REMOTE_ERROR);
    *async_error = comm->async_error;
    return SUCCESS;
}

const char *ncclGetErrorString(int result)
{
    switch (result) {
    case 0: return "no error";
    case 1: return "unhandled cuda error";
    case 2: return "unhandled system error";
    case 3: return "internal error";
    case 4: return "invalid argument";
    case 5: return "invalid usage";
    case 6: return "remote process exited or there was a network error";
    case 7: return "operation in progress";
    default: return "unknown result code";
    }
}

static size_t type_size(int type)
{
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return type >= 0 && type < 10 ? sizes[type] : 0;
}

/* count elements of send into recv as the reduction over a world of
 * ranks that all hold send: a float sum scales, the rest copy. */
static void reduce(const void *send, void *recv, size_t count, int type, int op, int nranks)
{
    if (op == 0 && type == 7) {
        const float *s = send;
        float *r = recv;
        for (size_t i = 0; i < count; i++)
            r[i] = s[i] * (float)nranks;
    } else if (op == 0 && type == 8) {
        const double *s = send;
        double *r = recv;
        for (size_t i = 0; i < count; i++)
            r[i] = s[i] * nranks;
    } else {
        memmove(recv, send, count * type_size(type));
    }
}

/* A collective's checks and its in-progress answer. */
static int issue(comm_t comm, const void *send, void *recv, size_t count, int type, int op)
{
    if (!comm || !type_size(type) || op < 0 || op > 4 || (count && (!send || !recv)))
        return INVALID_ARGUMENT;
    group_comm = comm;
    int n = 0;
    if (!comm->blocking && mode("progress-hang", NULL)) {
        comm->pending = -1;
        return IN_PROGRESS;
    }
    if (!comm->blocking && mode("progress", &n) && n > 0) {
        comm->pending = n;
        return IN_PROGRESS;
    }
    return SUCCESS;
}

int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, comm_t comm,
                  stream_t s)
{
    fakenccl_call *c = record("ncclAllReduce");
    *c = (fakenccl_call){.comm = comm, .send = send, .recv = recv, .count = count,
                         .datatype = type, .op = op, .stream = s, .group_depth = depth};
    snprintf(c->name, sizeof c->name, "ncclAllReduce");
    if (mode("allreduce-error", NULL))
        return done(c, inject("allreduce-error", UNHANDLED_CUDA_ERROR));
    int r = issue(comm, send, recv, count, type, op);
    if (r == SUCCESS || r == IN_PROGRESS)
        reduce(send, recv, count, type, op, comm->nranks);
    return done(c, r);
}

int ncclReduceScatter(const void *send, void *recv, size_t recv_count, int type, int op,
                      comm_t comm, stream_t s)
{
    fakenccl_call *c = record("ncclReduceScatter");
    *c = (fakenccl_call){.comm = comm, .send = send, .recv = recv, .count = recv_count,
                         .datatype = type, .op = op, .stream = s, .group_depth = depth};
    snprintf(c->name, sizeof c->name, "ncclReduceScatter");
    int r = issue(comm, send, recv, recv_count, type, op);
    if (r == SUCCESS || r == IN_PROGRESS) {
        const char *slice = (const char *)send + (size_t)comm->rank * recv_count * type_size(type);
        reduce(slice, recv, recv_count, type, op, comm->nranks);
    }
    return done(c, r);
}

int ncclAllGather(const void *send, void *recv, size_t send_count, int type, comm_t comm,
                  stream_t s)
{
    fakenccl_call *c = record("ncclAllGather");
    *c = (fakenccl_call){.comm = comm, .send = send, .recv = recv, .count = send_count,
                         .datatype = type, .op = -1, .stream = s, .group_depth = depth};
    snprintf(c->name, sizeof c->name, "ncclAllGather");
    int r = issue(comm, send, recv, send_count, type, 0);
    if (r == SUCCESS || r == IN_PROGRESS) {
        size_t bytes = send_count * type_size(type);
        for (int i = 0; i < comm->nranks; i++)
            memmove((char *)recv + (size_t)i * bytes, send, bytes);
    }
    return done(c, r);
}

int ncclGroupStart(void)
{
    fakenccl_call *c = record("ncclGroupStart");
    depth++;
    return done(c, SUCCESS);
}

int ncclGroupEnd(void)
{
    fakenccl_call *c = record("ncclGroupEnd");
    if (depth == 0)
        return done(c, inject("ncclGroupEnd without ncclGroupStart", 5));
    depth--;
    comm_t comm = group_comm;
    c->comm = comm;
    int n = 0;
    if (depth == 0 && comm && !comm->blocking && mode("progress", &n) && n > 0) {
        comm->pending = n;
        return done(c, IN_PROGRESS);
    }
    return done(c, SUCCESS);
}
