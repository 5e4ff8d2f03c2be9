/* SPDX-License-Identifier: MIT */
/*
 * pgrt_comm without a GPU or NCCL, against the fake driver (fakecuda.h)
 * and a fake NCCL (fakenccl.h) that records every call:
 *
 *  - loading: a missing library and one that is not NCCL give
 *    PGRT_ENOLIB naming what was tried; then $PGRT_LIBNCCL names the fake;
 *  - creation: the id passed by value, the config (size, magic, version
 *    2.14, non-blocking) and the polls of the asynchronous error; bad
 *    parameters; an init that fails at once, one that fails later, one
 *    that never completes (PGRT_ETIMEOUT within its bound, aborted);
 *  - collectives: every element type and op mapped, offsets turned into
 *    pointers, the data the fake computes, ranges, contexts, NULLs, count
 *    0, an NCCL error (the communicator fails), in-progress answers that
 *    settle or never do; groups and their nesting;
 *  - pgrt_comm_wait: a stream that goes idle, one that never does
 *    (PGRT_ETIMEOUT, aborted), an asynchronous error (PGRT_ECOMM, aborted);
 *  - pgrt_comm_all_reduce_host, capture, abort, and destroy (finalize then
 *    destroy when healthy, abort otherwise), nothing left alive.
 *
 * Usage: test_comm FAKE_LIBCUDA FAKE_LIBNCCL [--old]
 * (--old: the fake of NCCL 2.12, without ncclCommInitRankConfig,
 * ncclCommFinalize and ncclGetLastError.)
 */
#include "fake_util.h"
#include "fakecuda.h"
#include "fakenccl.h"
#include "ptxgen/pgrt_comm.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <time.h>

static fake_fixture fk;
static const char *fake_nccl;
static bool old; /* the NCCL 2.12 fake: blocking communicators only */
static fakenccl_reset_fn fn_reset;
static fakenccl_count_fn fn_count, fn_live, fn_queries, fn_depth;
static fakenccl_call_at_fn fn_at;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The index of the first call named `name` at or after `from`, or -1. */
static int find(const char *name, int from)
{
    for (int i = from < 0 ? 0 : from; i < fn_count(); i++)
        if (strcmp(fn_at(i)->name, name) == 0)
            return i;
    return -1;
}

static int count_of(const char *name)
{
    int n = 0;
    for (int i = find(name, 0); i >= 0; i = find(name, i + 1))
        n++;
    return n;
}

/* The latest call; an empty one (whose name matches nothing) when none. */
static const fakenccl_call *last(void)
{
    static const fakenccl_call none;
    const fakenccl_call *k = fn_count() ? fn_at(fn_count() - 1) : NULL;
    return k ? k : &none;
}

static void set_mode(const char *m)
{
    if (m)
        setenv("FAKENCCL", m, 1);
    else
        unsetenv("FAKENCCL");
}

static pgrt_comm *comm_new(pgrt_ctx *ctx, int rank, int world, double timeout_s)
{
    pgrt_comm_params p = {rank, world, {{0}}, timeout_s};
    if (pgrt_comm_id_new(ctx, &p.id)) {
        fprintf(stderr, "pgrt_comm_id_new: %s\n", pgrt_last_message());
        exit(1);
    }
    pgrt_comm *c = NULL;
    int rc = pgrt_comm_create(ctx, &p, &c);
    if (rc || !c) {
        fprintf(stderr, "pgrt_comm_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    return c;
}

static pgrt_buf *buf_new(pgrt_ctx *ctx, pg_type t, size_t n)
{
    pgrt_buf *b = NULL;
    if (pgrt_buf_alloc(ctx, t, n, &b)) {
        fprintf(stderr, "pgrt_buf_alloc: %s\n", pgrt_last_message());
        exit(1);
    }
    return b;
}

static pgrt_stream *stream_new(pgrt_ctx *ctx)
{
    pgrt_stream *s = NULL;
    if (pgrt_stream_create(ctx, &s)) {
        fprintf(stderr, "pgrt_stream_create: %s\n", pgrt_last_message());
        exit(1);
    }
    return s;
}

static const void *at(const pgrt_buf *b, size_t bytes)
{
    return (const void *)(uintptr_t)(pgrt_buf_ptr(b) + bytes);
}

/* ---------------------------------------------------------------- loading */

/* First: once a library loads it stays for the process. */
static void test_no_library(pgrt_ctx *ctx)
{
    pgrt_comm_id id;
    pgrt_comm *c = (pgrt_comm *)&id; /* must come back NULL */
    pgrt_comm_params p = {0, 1, {{0}}, 1};

    setenv("PGRT_LIBNCCL", "/nonexistent/libnccl.so.2", 1);
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &id), PGRT_ENOLIB);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_id_new: no NCCL library");
    REQUIRE_CONTAINS(pgrt_last_message(), "PGRT_LIBNCCL=/nonexistent/libnccl.so.2");
    REQUIRE_CONTAINS(pgrt_last_message(), "/nonexistent/libnccl.so.2: cannot open");
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), PGRT_ENOLIB);
    REQUIRE(c == NULL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_create: no NCCL library");

    /* A library that loads but is not NCCL: the fake driver. */
    setenv("PGRT_LIBNCCL", fk.path, 1);
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &id), PGRT_ENOLIB);
    REQUIRE_CONTAINS(pgrt_last_message(), fk.path);
    REQUIRE_CONTAINS(pgrt_last_message(), "has no ncclGetVersion: not a usable NCCL");

    /* (The default names, libnccl.so.2 then libnccl.so, are not tried
     * here: a machine with NCCL would load it for good.) */
    setenv("PGRT_LIBNCCL", fake_nccl, 1);
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &id), 0);
    REQUIRE_INT_EQ(fn_count(), 1); /* the fake saw nothing before it was the library */
    REQUIRE_STR_EQ(fn_at(0)->name, "ncclGetUniqueId");
    REQUIRE(memcmp(id.bytes, "FAKEID", 6) == 0);
}

/* ---------------------------------------------------------------- creation */

static void test_create(pgrt_ctx *ctx)
{
    pgrt_comm_params p = {1, 4, {{0}}, 5};
    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &p.id), 0);
    pgrt_comm_id other;
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &other), 0);
    REQUIRE(memcmp(p.id.bytes, other.bytes, sizeof other.bytes) != 0);
    REQUIRE_INT_EQ(count_of("ncclGetUniqueId"), 2);

    int allocs = fk.live_allocs();
    fn_reset();
    pgrt_comm *c = NULL;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), 0);
    REQUIRE(c != NULL);
    REQUIRE_INT_EQ(fn_live(), 1);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs + 1); /* the host all-reduce's buffer */
    REQUIRE_INT_EQ(fn_count(), 1);
    const fakenccl_call *k = fn_at(0);
    REQUIRE(k && memcmp(k->id, p.id.bytes, sizeof k->id) == 0); /* by value, intact */
    REQUIRE_INT_EQ(k->rank, 1);
    REQUIRE_INT_EQ(k->nranks, 4);
    REQUIRE(k->comm != NULL);
    if (old) {
        REQUIRE_STR_EQ(k->name, "ncclCommInitRank");
        REQUIRE_INT_EQ(k->has_config, 0);
        REQUIRE_INT_EQ(fn_queries(), 0); /* a blocking init: nothing to poll */
    } else {
        REQUIRE_STR_EQ(k->name, "ncclCommInitRankConfig");
        REQUIRE_INT_EQ(k->has_config, 1);
        REQUIRE_INT_EQ(k->cfg_size, 24); /* 2.14's ncclConfig_t */
        REQUIRE_INT_EQ(k->cfg_magic, 0xcafebeefu);
        REQUIRE_INT_EQ(k->cfg_version, 21400);
        REQUIRE_INT_EQ(k->cfg_blocking, 0);
        REQUIRE_INT_EQ(k->result, 7); /* in progress ... */
        REQUIRE_INT_EQ(fn_queries(), 2); /* ... one poll says so, the next says done */
    }
    REQUIRE_INT_EQ(pgrt_comm_rank(c), 1);
    REQUIRE_INT_EQ(pgrt_comm_world(c), 4);
    REQUIRE_INT_EQ(pgrt_comm_nccl_version(c), old ? FAKENCCL_OLD_VERSION : FAKENCCL_VERSION);
    REQUIRE_INT_EQ(pgrt_comm_check(c), 0);
    void *nc = k->comm;

    fn_reset();
    pgrt_comm_destroy(&c);
    REQUIRE(c == NULL);
    REQUIRE_INT_EQ(fn_live(), 0);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs);
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 0);
    int fin = find("ncclCommFinalize", 0), des = find("ncclCommDestroy", 0);
    REQUIRE(des >= 0 && fn_at(des)->comm == nc);
    if (old) {
        REQUIRE_INT_EQ(fin, -1);
        REQUIRE_INT_EQ(fn_count(), 1);
    } else {
        REQUIRE(fin >= 0 && fin < des && fn_at(fin)->comm == nc);
        REQUIRE_INT_EQ(fn_queries(), 2); /* the finalize settled before the destroy */
        REQUIRE_INT_EQ(fn_count(), 2);
    }
    pgrt_comm_destroy(&c); /* NULL-safe */
    pgrt_comm_destroy(NULL);

    if (!old) {
        /* An init that takes a while: polled with pauses from 10 us
         * doubling to 1 ms (10 polls: 4.27 ms of pauses at least). */
        setenv("FAKENCCL_INIT_POLLS", "10", 1);
        fn_reset();
        double t0 = now_s();
        REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), 0);
        double dt = now_s() - t0;
        unsetenv("FAKENCCL_INIT_POLLS");
        REQUIRE_INT_EQ(fn_queries(), 11);
        REQUIRE(dt >= 0.004);
        pgrt_comm_destroy(&c);
    }

    /* A timeout of 0 means 600 s: nothing to see but that it is taken. */
    p.timeout_s = 0;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), 0);
    pgrt_comm_destroy(&c);
    REQUIRE_INT_EQ(fn_live(), 0);
}

static void test_create_bad(pgrt_ctx *ctx)
{
    pgrt_comm_params p = {1, 4, {{0}}, 5};
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &p.id), 0);
    pgrt_comm *c = NULL;
    int allocs = fk.live_allocs();
    fn_reset();

    REQUIRE_INT_EQ(pgrt_comm_id_new(NULL, &p.id), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "ctx is NULL");
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "id is NULL");
    REQUIRE_INT_EQ(pgrt_comm_create(NULL, &p, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "ctx is NULL");
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, NULL, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "params is NULL");
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "out is NULL");
    pgrt_comm_params q = p;
    q.world = 0;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &q, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "world is 0");
    q = p;
    q.rank = 4;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &q, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "rank 4 is not in 0 .. 3");
    q.rank = -1;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &q, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "rank -1");
    q = p;
    q.timeout_s = -1;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &q, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "timeout_s is -1");
    q.timeout_s = NAN;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &q, &c), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "timeout_s is nan");
    REQUIRE_INT_EQ(fn_count(), 0); /* nothing reached NCCL */
    REQUIRE(c == NULL);

    /* Not while a stream of the context captures. */
    pgrt_stream *s = stream_new(ctx);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), PGRT_ECAPTURE);
    REQUIRE_CONTAINS(pgrt_last_message(), "capturing");
    REQUIRE_INT_EQ(pgrt_capture_abort(s), 0);
    pgrt_stream_destroy(&s);
    REQUIRE_INT_EQ(fn_count(), 0);

    /* An init that fails at once. */
    set_mode("init-error");
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), PGRT_ECOMM);
    REQUIRE(c == NULL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_create: rank 1 of 4: ncclCommInitRank");
    REQUIRE_CONTAINS(pgrt_last_message(), "ncclSystemError: unhandled system error");
    if (!old)
        REQUIRE_CONTAINS(pgrt_last_message(), "NCCL's last error: fake: init-error injected");
    REQUIRE_INT_EQ(fn_live(), 0);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs);

    set_mode("uniqueid-error");
    pgrt_comm_id id;
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &id), PGRT_ECOMM);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_id_new: ncclGetUniqueId: ncclSystemError");
    set_mode(NULL);
    if (old)
        return;

    /* A non-blocking init that fails later: the communicator NCCL made
     * is aborted. */
    set_mode("init-async-error");
    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), PGRT_ECOMM);
    REQUIRE(c == NULL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "rank 1 of 4: ncclCommInitRankConfig: ncclSystemError");
    REQUIRE_CONTAINS(pgrt_last_message(), "fake: init-async-error injected");
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
    REQUIRE(find("ncclCommAbort", 0) >= 0 &&
            fn_at(find("ncclCommAbort", 0))->comm == fn_at(0)->comm);
    REQUIRE_INT_EQ(fn_live(), 0);

    /* The other ranks never come: the bound ends it, and the communicator
     * is aborted. */
    set_mode("init-hang");
    fn_reset();
    p.timeout_s = 0.2;
    double t0 = now_s();
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &p, &c), PGRT_ETIMEOUT);
    double dt = now_s() - t0;
    REQUIRE(dt >= 0.2 && dt < 3.0);
    REQUIRE(c == NULL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "pgrt_comm_create: rank 1 of 4: the other ranks did not join within 0.2 s");
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
    REQUIRE(fn_queries() > 10); /* polled, not slept through */
    REQUIRE_INT_EQ(fn_live(), 0);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs);
    set_mode(NULL);
}

/* ---------------------------------------------------------------- collectives */

static void test_collectives(pgrt_ctx *ctx)
{
    pgrt_comm *c = comm_new(ctx, 1, 4, 5);
    pgrt_stream *s = stream_new(ctx), *s2 = stream_new(ctx);

    /* All-reduce in place: offsets become byte addresses, the fake's
     * world of identical ranks sums to four times the data. */
    pgrt_buf *b = buf_new(ctx, PG_F32, 16);
    float h[16], back[16];
    for (int i = 0; i < 16; i++)
        h[i] = (float)(i + 1);
    REQUIRE_INT_EQ(pgrt_buf_upload(b, 0, h, 16), 0);
    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 4, 8, PGRT_COMM_SUM), 0);
    REQUIRE_INT_EQ(fn_count(), 1);
    const fakenccl_call *k = last();
    REQUIRE_STR_EQ(k->name, "ncclAllReduce");
    REQUIRE(k->send == at(b, 16) && k->recv == at(b, 16));
    REQUIRE_INT_EQ(k->count, 8);
    REQUIRE_INT_EQ(k->datatype, 7);
    REQUIRE_INT_EQ(k->op, 0);
    REQUIRE(k->stream != NULL);
    REQUIRE_INT_EQ(k->group_depth, 0);
    void *stream1 = k->stream;
    REQUIRE_INT_EQ(pgrt_buf_download(b, 0, back, 16), 0);
    for (int i = 0; i < 16; i++)
        REQUIRE(back[i] == (i >= 4 && i < 12 ? 4.0f : 1.0f) * h[i]);

    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s2, b, 0, 1, PGRT_COMM_MAX), 0);
    REQUIRE_INT_EQ(last()->op, 2);
    REQUIRE(last()->stream != NULL && last()->stream != stream1);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 16, PGRT_COMM_MIN), 0);
    REQUIRE_INT_EQ(last()->op, 3);
    REQUIRE(last()->stream == stream1);

    /* Every element type NCCL has. */
    static const struct {
        pg_type t;
        int nccl;
    } types[] = {{PG_S8, 0},  {PG_U8, 1},  {PG_S32, 2}, {PG_U32, 3}, {PG_S64, 4},
                 {PG_U64, 5}, {PG_F16, 6}, {PG_F32, 7}, {PG_F64, 8}, {PG_BF16, 9}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        pgrt_buf *t = buf_new(ctx, types[i].t, 8);
        REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, t, 3, 5, PGRT_COMM_SUM), 0);
        REQUIRE_INT_EQ(last()->datatype, types[i].nccl);
        REQUIRE(last()->recv == at(t, 3 * pg_type_bits(types[i].t) / 8));
        pgrt_buf_destroy(&t);
    }

    /* Refusals, each naming its problem, none reaching NCCL. */
    fn_reset();
    pgrt_buf *u16 = buf_new(ctx, PG_U16, 8);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, u16, 0, 8, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "buf holds u16, which NCCL has no type for");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 8, (pgrt_comm_op)7), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "op 7 is not");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 10, 8, PGRT_COMM_SUM), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "pgrt_comm_all_reduce: buf: elements [10, 10+8) are outside a buffer of 16");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 17, 0, PGRT_COMM_SUM), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(NULL, s, b, 0, 8, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "communicator is NULL");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, NULL, b, 0, 8, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "stream is NULL");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, NULL, 0, 8, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "buf is NULL");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 16, 0, PGRT_COMM_SUM), 0); /* count 0 */

    /* A stream and a buffer of another context. */
    pgrt_ctx *ctx2 = fake_open_ctx(fk.path);
    pgrt_stream *other_s = stream_new(ctx2);
    pgrt_buf *other_b = buf_new(ctx2, PG_F32, 16);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, other_s, b, 0, 8, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "the stream belongs to another context");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, other_b, 0, 8, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "buf belongs to another context");
    REQUIRE_INT_EQ(pgrt_comm_wait(c, other_s, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "the stream belongs to another context");
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, other_b, 0, b, 0, 1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "send belongs to another context");
    pgrt_buf_destroy(&other_b);
    pgrt_stream_destroy(&other_s);
    pgrt_ctx_destroy(&ctx2);
    REQUIRE_INT_EQ(fn_count(), 0);

    /* Reduce-scatter: rank 1 of 4 gets the second slice of 3, reduced. */
    pgrt_buf *recv = buf_new(ctx, PG_F32, 8);
    REQUIRE_INT_EQ(pgrt_buf_upload(b, 0, h, 16), 0);
    float zero[8] = {0};
    REQUIRE_INT_EQ(pgrt_buf_upload(recv, 0, zero, 8), 0);
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 2, recv, 1, 3, PGRT_COMM_SUM), 0);
    k = last();
    REQUIRE_STR_EQ(k->name, "ncclReduceScatter");
    REQUIRE(k->send == at(b, 2 * 4) && k->recv == at(recv, 1 * 4));
    REQUIRE_INT_EQ(k->count, 3);
    REQUIRE_INT_EQ(k->datatype, 7);
    REQUIRE_INT_EQ(k->op, 0);
    REQUIRE(k->stream == stream1);
    REQUIRE_INT_EQ(pgrt_buf_download(recv, 0, back, 8), 0);
    REQUIRE(back[0] == 0 && back[4] == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE(back[1 + i] == 4 * h[2 + 3 + i]);
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 5, recv, 0, 3, PGRT_COMM_MAX), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "send: elements [5, 5+12)");
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 0, recv, 6, 3, PGRT_COMM_MAX), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "recv: elements [6, 6+3)");
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 0, recv, 0, SIZE_MAX / 2, PGRT_COMM_SUM),
                   PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "overflows");
    pgrt_buf *f64 = buf_new(ctx, PG_F64, 16);
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 0, f64, 0, 1, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "send holds f32 and recv f64");
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, NULL, 0, recv, 0, 1, PGRT_COMM_SUM),
                   PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "send is NULL");
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 0, NULL, 0, 1, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "recv is NULL");
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, b, 0, recv, 0, 0, PGRT_COMM_SUM), 0);
    REQUIRE_STR_EQ(last()->name, "ncclReduceScatter");
    REQUIRE_INT_EQ(last()->count, 3); /* count 0 did not reach NCCL */

    /* All-gather: every rank's 2 elements at recv + r * 2. */
    pgrt_buf *big = buf_new(ctx, PG_F32, 16);
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, b, 1, big, 3, 2), 0);
    k = last();
    REQUIRE_STR_EQ(k->name, "ncclAllGather");
    REQUIRE(k->send == at(b, 4) && k->recv == at(big, 3 * 4));
    REQUIRE_INT_EQ(k->count, 2);
    REQUIRE_INT_EQ(k->datatype, 7);
    REQUIRE(k->stream == stream1);
    REQUIRE_INT_EQ(pgrt_buf_download(big, 0, back, 16), 0);
    for (int r = 0; r < 4; r++)
        REQUIRE(back[3 + 2 * r] == h[1] && back[4 + 2 * r] == h[2]);
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, b, 1, big, 9, 2), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "recv: elements [9, 9+8)");
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, b, 15, big, 0, 2), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "send: elements [15, 15+2)");
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, u16, 0, u16, 0, 1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "send holds u16");

    if (!old) {
        /* A collective NCCL answers in progress: settled by polling. */
        set_mode("progress:3");
        fn_reset();
        REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 4, PGRT_COMM_SUM), 0);
        REQUIRE_INT_EQ(last()->result, 7);
        REQUIRE_INT_EQ(fn_queries(), 4);
        REQUIRE_INT_EQ(pgrt_comm_check(c), 0);
        set_mode(NULL);
    }

    /* NCCL refuses an all-reduce: PGRT_ECOMM, and the communicator is
     * failed: refused from then on, aborted by destroy. */
    set_mode("allreduce-error");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 4, PGRT_COMM_SUM), PGRT_ECOMM);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "pgrt_comm_all_reduce: rank 1 of 4: ncclAllReduce: ncclUnhandledCudaError");
    if (!old)
        REQUIRE_CONTAINS(pgrt_last_message(), "fake: allreduce-error injected");
    set_mode(NULL);
    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 4, PGRT_COMM_SUM), PGRT_ESTATE);
    REQUIRE_CONTAINS(pgrt_last_message(), "failed earlier (ncclAllReduce: ncclUnhandledCudaError");
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, b, 0, big, 0, 1), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_group_begin(c), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 1), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_check(c), PGRT_ECOMM);
    REQUIRE_CONTAINS(pgrt_last_message(), "the communicator failed: ncclAllReduce");
    REQUIRE_INT_EQ(fn_count(), 0);
    pgrt_comm_destroy(&c);
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
    REQUIRE_INT_EQ(count_of("ncclCommFinalize"), 0);
    REQUIRE_INT_EQ(count_of("ncclCommDestroy"), 0);
    REQUIRE_INT_EQ(fn_live(), 0);

    if (!old) {
        /* A collective that never settles: its bound ends it. */
        c = comm_new(ctx, 0, 2, 0.1);
        set_mode("progress-hang");
        fn_reset();
        double t0 = now_s();
        REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 4, PGRT_COMM_SUM), PGRT_ETIMEOUT);
        double dt = now_s() - t0;
        set_mode(NULL);
        REQUIRE(dt >= 0.1 && dt < 3.0);
        REQUIRE_CONTAINS(pgrt_last_message(), "rank 0 of 2: ncclAllReduce was still in progress "
                                              "after 0.1 s; the communicator is aborted");
        REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
        REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 4, PGRT_COMM_SUM), PGRT_ESTATE);
        pgrt_comm_destroy(&c);
        REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
        REQUIRE_INT_EQ(fn_live(), 0);
    }

    pgrt_buf_destroy(&f64);
    pgrt_buf_destroy(&big);
    pgrt_buf_destroy(&recv);
    pgrt_buf_destroy(&u16);
    pgrt_buf_destroy(&b);
    pgrt_stream_destroy(&s2);
    pgrt_stream_destroy(&s);
}

static void test_groups(pgrt_ctx *ctx)
{
    pgrt_comm *c = comm_new(ctx, 0, 2, 5);
    pgrt_stream *s = stream_new(ctx);
    pgrt_buf *a = buf_new(ctx, PG_F32, 8), *b = buf_new(ctx, PG_BF16, 8);

    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_group_begin(c), 0);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, a, 0, 8, PGRT_COMM_SUM), 0);
    REQUIRE_INT_EQ(pgrt_comm_group_begin(c), 0); /* nested */
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, b, 0, 8, PGRT_COMM_MAX), 0);
    REQUIRE_INT_EQ(pgrt_comm_group_end(c), 0);
    REQUIRE_INT_EQ(fn_depth(), 1);
    REQUIRE_INT_EQ(pgrt_comm_group_end(c), 0);
    REQUIRE_INT_EQ(fn_depth(), 0);
    static const char *const order[] = {"ncclGroupStart", "ncclAllReduce", "ncclGroupStart",
                                        "ncclAllReduce",  "ncclGroupEnd",  "ncclGroupEnd"};
    static const int depth[] = {0, 1, 1, 2, 2, 1};
    REQUIRE_INT_EQ(fn_count(), 6);
    for (int i = 0; i < 6 && i < fn_count(); i++) {
        REQUIRE_STR_EQ(fn_at(i)->name, order[i]);
        REQUIRE_INT_EQ(fn_at(i)->group_depth, depth[i]);
    }
    REQUIRE_INT_EQ(fn_at(3)->datatype, 9);

    REQUIRE_INT_EQ(pgrt_comm_group_end(c), PGRT_ESTATE);
    REQUIRE_CONTAINS(pgrt_last_message(), "no group is open");
    REQUIRE_INT_EQ(pgrt_comm_group_begin(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_comm_group_end(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(fn_count(), 6);

    if (!old) {
        /* ncclGroupEnd answers in progress: settled. */
        set_mode("progress:2");
        fn_reset();
        REQUIRE_INT_EQ(pgrt_comm_group_begin(c), 0);
        unsetenv("FAKENCCL"); /* the all-reduce itself completes */
        REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, a, 0, 8, PGRT_COMM_SUM), 0);
        set_mode("progress:2");
        REQUIRE_INT_EQ(pgrt_comm_group_end(c), 0);
        REQUIRE_INT_EQ(last()->result, 7);
        REQUIRE_INT_EQ(fn_queries(), 3);
        set_mode(NULL);
    }

    /* A group left open: destroy closes it and aborts (its collectives
     * were never launched as a whole), leaving NCCL's group state of the
     * thread balanced. */
    REQUIRE_INT_EQ(pgrt_comm_group_begin(c), 0);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, a, 0, 8, PGRT_COMM_SUM), 0);
    fn_reset();
    pgrt_comm_destroy(&c);
    REQUIRE_INT_EQ(fn_depth(), 0);
    REQUIRE(find("ncclGroupEnd", 0) == 0 && find("ncclCommAbort", 0) == 1);
    REQUIRE_INT_EQ(count_of("ncclCommFinalize"), 0);
    REQUIRE_INT_EQ(fn_live(), 0);

    pgrt_buf_destroy(&a);
    pgrt_buf_destroy(&b);
    pgrt_stream_destroy(&s);
}

/* ---------------------------------------------------------------- waits */

/* Before anything else queries a stream: the fake driver counts its
 * cuStreamQuery calls from the start of the process, and
 * FAKECUDA_BUSY_QUERIES=5 makes the first five busy. */
static void test_wait(pgrt_ctx *ctx)
{
    pgrt_comm *c = comm_new(ctx, 0, 1, 5);
    pgrt_stream *s = stream_new(ctx);

    setenv("FAKECUDA_BUSY_QUERIES", "5", 1);
    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), 0);
    /* each busy answer is followed by a look at NCCL's asynchronous error */
    REQUIRE_INT_EQ(fn_queries(), 5);
    REQUIRE_INT_EQ(fn_count(), 0);
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0.5), 0);

    REQUIRE_INT_EQ(pgrt_comm_wait(NULL, s, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "communicator is NULL");
    REQUIRE_INT_EQ(pgrt_comm_wait(c, NULL, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "stream is NULL");
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, -1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "timeout_s is -1");
    REQUIRE_INT_EQ(pgrt_comm_check(NULL), PGRT_EINVAL);

    /* Not on a capturing stream: the query would break the capture. */
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), PGRT_ECAPTURE);
    REQUIRE_INT_EQ(pgrt_capture_abort(s), 0);

    /* A stream that never goes idle: the bound, then an abort. */
    setenv("FAKECUDA_BUSY_QUERIES", "-1", 1);
    fn_reset();
    double t0 = now_s();
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0.2), PGRT_ETIMEOUT);
    double dt = now_s() - t0;
    REQUIRE(dt >= 0.2 && dt < 3.0);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "pgrt_comm_wait: rank 0 of 1: the stream was still busy after 0.2 s");
    REQUIRE_CONTAINS(pgrt_last_message(), "the communicator is aborted");
    REQUIRE(fn_queries() >= 20); /* polled with a short backoff */
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
    REQUIRE_INT_EQ(fn_live(), 0);
    pgrt_comm_destroy(&c);
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1); /* not twice */

    /* The communicator's own bound when the wait names none. */
    c = comm_new(ctx, 2, 3, 0.1);
    t0 = now_s();
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), PGRT_ETIMEOUT);
    dt = now_s() - t0;
    REQUIRE(dt >= 0.1 && dt < 3.0);
    REQUIRE_CONTAINS(pgrt_last_message(), "rank 2 of 3: the stream was still busy after 0.1 s");
    pgrt_comm_destroy(&c);

    /* NCCL's asynchronous error during the wait (a peer gone): PGRT_ECOMM
     * long before the bound, and an abort. */
    set_mode("async-error-after:3");
    c = comm_new(ctx, 1, 2, 30);
    set_mode(NULL);
    fn_reset();
    t0 = now_s();
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), PGRT_ECOMM);
    dt = now_s() - t0;
    REQUIRE(dt < 3.0);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_wait: rank 1 of 2: ncclRemoteError: "
                                          "remote process exited or there was a network error");
    if (!old)
        REQUIRE_CONTAINS(pgrt_last_message(), "fake: async-error-after injected");
    REQUIRE_CONTAINS(pgrt_last_message(), "the communicator is aborted");
    REQUIRE_INT_EQ(fn_queries(), 4);
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), PGRT_ESTATE);
    REQUIRE_CONTAINS(pgrt_last_message(), "aborted (ncclRemoteError");
    pgrt_comm_destroy(&c);
    REQUIRE_INT_EQ(fn_live(), 0);

    /* pgrt_comm_check sees the same error without waiting. */
    set_mode("async-error-after:0");
    c = comm_new(ctx, 0, 2, 30);
    set_mode(NULL);
    REQUIRE_INT_EQ(pgrt_comm_check(c), PGRT_ECOMM);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_check: rank 0 of 2");
    REQUIRE_CONTAINS(pgrt_last_message(), "ncclRemoteError");
    fn_reset();
    pgrt_comm_destroy(&c); /* failed: aborted, not finalized */
    REQUIRE_INT_EQ(count_of("ncclCommAbort"), 1);
    REQUIRE_INT_EQ(count_of("ncclCommDestroy"), 0);

    unsetenv("FAKECUDA_BUSY_QUERIES");
    pgrt_stream_destroy(&s);
}

static void test_host(pgrt_ctx *ctx)
{
    pgrt_comm *c = comm_new(ctx, 3, 4, 5);
    pgrt_stream *s = stream_new(ctx);
    double v[3] = {1.5, -2, 3};

    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, v, 3, PGRT_COMM_SUM), 0);
    REQUIRE(v[0] == 6 && v[1] == -8 && v[2] == 12); /* the fake's four equal ranks */
    REQUIRE_INT_EQ(fn_count(), 1);
    REQUIRE_STR_EQ(last()->name, "ncclAllReduce");
    REQUIRE_INT_EQ(last()->datatype, 8);
    REQUIRE_INT_EQ(last()->count, 3);
    REQUIRE_INT_EQ(last()->op, 0);
    REQUIRE(last()->send == last()->recv);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, v, 1, PGRT_COMM_MIN), 0);
    REQUIRE_INT_EQ(last()->op, 3);
    REQUIRE(v[0] == 6 && v[1] == -8);
    double many[64];
    for (int i = 0; i < 64; i++)
        many[i] = i;
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, many, 64, PGRT_COMM_SUM), 0);
    REQUIRE(many[63] == 4 * 63);

    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, many, 65, PGRT_COMM_SUM), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "n is 65: 1 .. 64");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, many, 0, PGRT_COMM_SUM), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, NULL, 1, PGRT_COMM_SUM), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "vals is NULL");
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, v, 1, (pgrt_comm_op)-1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "op -1 is not");
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, v, 1, PGRT_COMM_SUM), PGRT_ECAPTURE);
    REQUIRE_CONTAINS(pgrt_last_message(), "the stream is capturing");
    REQUIRE_INT_EQ(pgrt_capture_abort(s), 0);
    REQUIRE_INT_EQ(fn_count(), 0);

    /* A stream that never finishes: the bound, and the caller's values
     * are left as they were. */
    pgrt_comm_destroy(&c);
    c = comm_new(ctx, 3, 4, 0.1);
    setenv("FAKECUDA_BUSY_QUERIES", "-1", 1);
    v[0] = 7;
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, v, 1, PGRT_COMM_SUM), PGRT_ETIMEOUT);
    unsetenv("FAKECUDA_BUSY_QUERIES");
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_all_reduce_host: rank 3 of 4");
    REQUIRE(v[0] == 7);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, v, 1, PGRT_COMM_SUM), PGRT_ESTATE);
    pgrt_comm_destroy(&c);
    pgrt_stream_destroy(&s);
}

/* ---------------------------------------------------------------- capture, abort */

static void test_capture(pgrt_ctx *ctx)
{
    pgrt_comm *c = comm_new(ctx, 0, 2, 5);
    pgrt_stream *s = stream_new(ctx);
    pgrt_buf *a = buf_new(ctx, PG_F32, 8), *g = buf_new(ctx, PG_F32, 16);

    fn_reset();
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, a, 0, 8, PGRT_COMM_SUM), 0);
    REQUIRE_INT_EQ(pgrt_comm_group_begin(c), 0);
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, g, 0, a, 0, 8, PGRT_COMM_SUM), 0);
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, a, 0, g, 0, 8), 0);
    REQUIRE_INT_EQ(pgrt_comm_group_end(c), 0);
    /* Nothing synchronised the stream: the fake driver would have
     * invalidated the capture, and its end would fail. */
    pgrt_graph *graph = NULL;
    REQUIRE_INT_EQ(pgrt_capture_end(s, &graph), 0);
    REQUIRE(graph != NULL);
    REQUIRE_INT_EQ(count_of("ncclAllReduce") + count_of("ncclReduceScatter") +
                       count_of("ncclAllGather"),
                   3);
    for (int i = 0; i < fn_count(); i++)
        if (fn_at(i)->name[4] == 'A' || fn_at(i)->name[4] == 'R')
            REQUIRE(fn_at(i)->stream != NULL);
    pgrt_graph_destroy(&graph);

    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), 0);
    pgrt_comm_destroy(&c);
    pgrt_buf_destroy(&a);
    pgrt_buf_destroy(&g);
    pgrt_stream_destroy(&s);
}

static void test_abort(pgrt_ctx *ctx)
{
    pgrt_comm *c = comm_new(ctx, 1, 2, 5);
    pgrt_stream *s = stream_new(ctx);
    pgrt_buf *a = buf_new(ctx, PG_F32, 8);
    double v = 1;

    REQUIRE_INT_EQ(pgrt_comm_abort(NULL), PGRT_EINVAL);
    fn_reset();
    REQUIRE_INT_EQ(pgrt_comm_abort(c), 0);
    REQUIRE_INT_EQ(fn_count(), 1);
    REQUIRE_STR_EQ(fn_at(0)->name, "ncclCommAbort");
    REQUIRE_INT_EQ(fn_live(), 0);
    REQUIRE_INT_EQ(pgrt_comm_abort(c), 0); /* once is enough */
    REQUIRE_INT_EQ(fn_count(), 1);

    REQUIRE_INT_EQ(pgrt_comm_all_reduce(c, s, a, 0, 8, PGRT_COMM_SUM), PGRT_ESTATE);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "pgrt_comm_all_reduce: rank 1 of 2: the communicator was aborted "
                     "(pgrt_comm_abort)");
    REQUIRE_INT_EQ(pgrt_comm_reduce_scatter(c, s, a, 0, a, 0, 1, PGRT_COMM_SUM), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_all_gather(c, s, a, 0, a, 0, 1), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_group_begin(c), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_group_end(c), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_check(c), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_wait(c, s, 0), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_all_reduce_host(c, s, &v, 1, PGRT_COMM_SUM), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_nccl_version(c), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_comm_rank(c), 1);
    REQUIRE_INT_EQ(pgrt_comm_world(c), 2);
    REQUIRE_INT_EQ(pgrt_comm_rank(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_comm_world(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_comm_nccl_version(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(fn_count(), 1);
    pgrt_comm_destroy(&c);
    REQUIRE_INT_EQ(fn_count(), 1); /* nothing more for NCCL */
    REQUIRE(c == NULL);

    if (!old) {
        /* A finalize that never completes: destroy gives up after the
         * bound and aborts. */
        c = comm_new(ctx, 0, 2, 0.1);
        set_mode("finalize-hang");
        fn_reset();
        pgrt_comm_destroy(&c);
        set_mode(NULL);
        REQUIRE(find("ncclCommFinalize", 0) == 0 && find("ncclCommAbort", 0) == 1);
        REQUIRE_INT_EQ(count_of("ncclCommDestroy"), 0);
        REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_comm_destroy: rank 0 of 2: ncclCommFinalize "
                                              "was still in progress after 0.1 s");
        REQUIRE_INT_EQ(fn_live(), 0);
    }
    pgrt_buf_destroy(&a);
    pgrt_stream_destroy(&s);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA FAKE_LIBNCCL [--old]");
    if (argc < 3) {
        fprintf(stderr, "usage: %s FAKE_LIBCUDA FAKE_LIBNCCL [--old]\n", argv[0]);
        return 2;
    }
    fake_nccl = argv[2];
    old = argc > 3 && strcmp(argv[3], "--old") == 0;
    unsetenv("FAKECUDA_BUSY_QUERIES");
    unsetenv("FAKENCCL");
    unsetenv("FAKENCCL_INIT_POLLS");
    void *nccl = dlopen(fake_nccl, RTLD_NOW | RTLD_LOCAL);
    if (!nccl) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    FAKE_BIND(nccl, fn_reset, "fakenccl_reset");
    FAKE_BIND(nccl, fn_count, "fakenccl_call_count");
    FAKE_BIND(nccl, fn_at, "fakenccl_call_at");
    FAKE_BIND(nccl, fn_live, "fakenccl_live_comms");
    FAKE_BIND(nccl, fn_queries, "fakenccl_async_queries");
    FAKE_BIND(nccl, fn_depth, "fakenccl_group_depth");

    pgrt_ctx *ctx = fake_open_ctx(fk.path);
    fn_reset();
    test_no_library(ctx);
    test_create(ctx);
    test_create_bad(ctx);
    test_wait(ctx); /* the first to query a stream: see there */
    test_collectives(ctx);
    test_groups(ctx);
    test_host(ctx);
    test_capture(ctx);
    test_abort(ctx);
    REQUIRE_INT_EQ(fn_live(), 0);
    REQUIRE_INT_EQ(fn_depth(), 0);
    pgrt_ctx_destroy(&ctx);
    REQUIRE_INT_EQ(fk.live_allocs(), 0);
    dlclose(nccl);
    fake_fixture_close(&fk);
    TEST_DONE();
}
