/* SPDX-License-Identifier: MIT */
/* Streams, events and graph capture. */
#include "rt_internal.h"

#include <stdlib.h>

int pgrt_stream_create(pgrt_ctx *ctx, pgrt_stream **out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    int rc = rt_ctx_bind(ctx);
    if (rc)
        return rc;
    pgrt_stream *s = calloc(1, sizeof *s);
    if (!s)
        return rt_fail(PGRT_ENOMEM, "pgrt_stream_create: out of memory");
    if ((rc = RT_CU(&ctx->drv, StreamCreate, (&s->cu, CU_STREAM_NON_BLOCKING)))) {
        free(s);
        return rc;
    }
    s->ctx = ctx;
    *out = s;
    return 0;
}

void pgrt_stream_destroy(pgrt_stream **ps)
{
    if (!ps || !*ps)
        return;
    pgrt_stream *s = *ps;
    *ps = NULL;
    if (s->capturing)
        (void)pgrt_capture_abort(s);
    /* Nothing to return to; a failure lands in this thread's message. */
    if (rt_ctx_bind(s->ctx) == 0)
        (void)RT_CU(&s->ctx->drv, StreamDestroy, (s->cu));
    free(s);
}

int pgrt_stream_sync(pgrt_stream *s)
{
    RT_NONNULL(__func__, s, "stream");
    int rc = rt_ctx_bind(s->ctx);
    if (rc)
        return rc;
    return RT_CU(&s->ctx->drv, StreamSynchronize, (s->cu));
}

int pgrt_stream_query(pgrt_stream *s, bool *idle)
{
    RT_NONNULL(__func__, s, "stream");
    RT_NONNULL(__func__, idle, "idle");
    int rc = rt_ctx_bind(s->ctx);
    if (rc)
        return rc;
    CUresult r = s->ctx->drv.StreamQuery(s->cu);
    *idle = r == CUDA_SUCCESS;
    if (r == CUDA_SUCCESS || r == 600 /* CUDA_ERROR_NOT_READY */)
        return 0;
    return rt_cu_check(&s->ctx->drv, r, "cuStreamQuery");
}

int pgrt_stream_wait_event(pgrt_stream *s, pgrt_event *e)
{
    RT_NONNULL(__func__, s, "stream");
    RT_NONNULL(__func__, e, "event");
    if (s->ctx != e->ctx)
        return rt_fail(PGRT_EINVAL, "pgrt_stream_wait_event: event of another context");
    int rc = rt_ctx_bind(s->ctx);
    if (rc)
        return rc;
    return RT_CU(&s->ctx->drv, StreamWaitEvent, (s->cu, e->cu, 0));
}

static int need(const pgrt_ctx *ctx, bool have, const char *call, const char *version)
{
    if (have)
        return 0;
    return rt_fail(PGRT_EDRIVER, "CUDA driver too old: %s (from CUDA %s) is not provided by "
                   "driver version %d.%d", call, version, ctx->info.driver_version / 1000,
                   (ctx->info.driver_version % 1000) / 10);
}

int pgrt_stream_is_capturing(pgrt_stream *s, bool *capturing)
{
    RT_NONNULL(__func__, s, "stream");
    RT_NONNULL(__func__, capturing, "capturing");
    rt_driver *d = &s->ctx->drv;
    int rc;
    if ((rc = need(s->ctx, d->StreamIsCapturing, "cuStreamIsCapturing", "10.0")) ||
        (rc = rt_ctx_bind(s->ctx)))
        return rc;
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    if ((rc = RT_CU(d, StreamIsCapturing, (s->cu, &status))))
        return rc;
    *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    return 0;
}

/* ---------------------------------------------------------------- events */

int pgrt_event_create(pgrt_ctx *ctx, pgrt_event **out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    int rc = rt_ctx_bind(ctx);
    if (rc)
        return rc;
    pgrt_event *e = calloc(1, sizeof *e);
    if (!e)
        return rt_fail(PGRT_ENOMEM, "pgrt_event_create: out of memory");
    if ((rc = RT_CU(&ctx->drv, EventCreate, (&e->cu, CU_EVENT_DEFAULT)))) {
        free(e);
        return rc;
    }
    e->ctx = ctx;
    *out = e;
    return 0;
}

void pgrt_event_destroy(pgrt_event **pe)
{
    if (!pe || !*pe)
        return;
    pgrt_event *e = *pe;
    *pe = NULL;
    /* Nothing to return to; a failure lands in this thread's message. */
    if (rt_ctx_bind(e->ctx) == 0)
        (void)RT_CU(&e->ctx->drv, EventDestroy, (e->cu));
    free(e);
}

int pgrt_event_record(pgrt_event *e, pgrt_stream *s)
{
    RT_NONNULL(__func__, e, "event");
    if (s && s->ctx != e->ctx)
        return rt_fail(PGRT_EINVAL, "pgrt_event_record: stream of another context");
    int rc = rt_ctx_bind(e->ctx);
    if (rc)
        return rc;
    return RT_CU(&e->ctx->drv, EventRecord, (e->cu, rt_stream_cu(s)));
}

int pgrt_event_sync(pgrt_event *e)
{
    RT_NONNULL(__func__, e, "event");
    int rc = rt_ctx_bind(e->ctx);
    if (rc)
        return rc;
    return RT_CU(&e->ctx->drv, EventSynchronize, (e->cu));
}

int pgrt_event_elapsed_ms(const pgrt_event *start, const pgrt_event *end, float *ms)
{
    RT_NONNULL(__func__, start, "start");
    RT_NONNULL(__func__, end, "end");
    RT_NONNULL(__func__, ms, "ms");
    if (start->ctx != end->ctx)
        return rt_fail(PGRT_EINVAL, "pgrt_event_elapsed_ms: events of different contexts");
    int rc = rt_ctx_bind(start->ctx);
    if (rc)
        return rc;
    return RT_CU(&start->ctx->drv, EventElapsedTime, (ms, start->cu, end->cu));
}

/* ---------------------------------------------------------------- graphs */

int pgrt_capture_begin(pgrt_stream *s)
{
    if (!s)
        return rt_fail(PGRT_EINVAL, "pgrt_capture_begin: stream is NULL (the legacy default "
                       "stream cannot be captured)");
    rt_driver *d = &s->ctx->drv;
    int rc;
    if ((rc = need(s->ctx, d->StreamBeginCapture, "cuStreamBeginCapture", "10.1")) ||
        (rc = need(s->ctx, d->StreamEndCapture, "cuStreamEndCapture", "10.0")) ||
        (rc = need(s->ctx, d->GraphLaunch && d->GraphDestroy && d->GraphExecDestroy,
                   "cuGraphLaunch", "10.0")) ||
        (rc = need(s->ctx, d->GraphInstantiateWithFlags || d->GraphInstantiateV2,
                   "cuGraphInstantiate", "11.0")))
        return rc;
    if (s->capturing)
        return rt_fail(PGRT_ESTATE, "pgrt_capture_begin: the stream is already capturing");
    if ((rc = rt_ctx_bind(s->ctx)))
        return rc;
    if ((rc = RT_CU(d, StreamBeginCapture, (s->cu, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))))
        return rc;
    s->capturing = true;
    atomic_fetch_add(&s->ctx->capturing, 1);
    return 0;
}

/* End the capture on s; the stream is out of capture mode whatever the
 * driver says. */
static int end_capture(pgrt_stream *s, CUgraph *graph)
{
    *graph = NULL;
    s->capturing = false;
    atomic_fetch_sub(&s->ctx->capturing, 1);
    int rc = rt_ctx_bind(s->ctx);
    if (rc)
        return rc;
    rc = RT_CU(&s->ctx->drv, StreamEndCapture, (s->cu, graph));
    if (rc) {
        rt_msg_append(" (the captured work is discarded; a call inside the capture that the "
                      "stream could not record, such as a synchronous copy, invalidates it)");
        if (*graph)
            (void)s->ctx->drv.GraphDestroy(*graph); /* the capture's error is the one reported */
        *graph = NULL;
    }
    return rc;
}

int pgrt_capture_end(pgrt_stream *s, pgrt_graph **out)
{
    RT_NONNULL(__func__, s, "stream");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    if (!s->capturing)
        return rt_fail(PGRT_ESTATE, "pgrt_capture_end: the stream is not capturing "
                       "(pgrt_capture_begin first)");
    CUgraph graph;
    int rc = end_capture(s, &graph);
    if (rc)
        return rc;
    rt_driver *d = &s->ctx->drv;
    pgrt_graph *g = calloc(1, sizeof *g);
    if (!g) {
        (void)d->GraphDestroy(graph); /* out of memory is the error reported */
        return rt_fail(PGRT_ENOMEM, "pgrt_capture_end: out of memory");
    }
    if (d->GraphInstantiateWithFlags) {
        rc = RT_CU(d, GraphInstantiateWithFlags, (&g->exec, graph, 0));
    } else {
        char log[512] = "";
        CUresult r = d->GraphInstantiateV2(&g->exec, graph, NULL, log, sizeof log - 1);
        rc = r == CUDA_SUCCESS ? 0 : rt_cu_fail(d, r, "cuGraphInstantiate", "%s", log);
    }
    /* The executable graph is independent of the template it came from. */
    int rc2 = RT_CU(d, GraphDestroy, (graph));
    if (rc || rc2) {
        if (!rc && g->exec)
            (void)d->GraphExecDestroy(g->exec); /* the destroy's error is the one reported */
        free(g);
        return rc ? rc : rc2;
    }
    g->ctx = s->ctx;
    *out = g;
    return 0;
}

int pgrt_capture_abort(pgrt_stream *s)
{
    RT_NONNULL(__func__, s, "stream");
    if (!s->capturing)
        return 0;
    CUgraph graph;
    int rc = end_capture(s, &graph);
    if (rc == 0 && graph)
        rc = RT_CU(&s->ctx->drv, GraphDestroy, (graph));
    return rc;
}

int pgrt_graph_launch(pgrt_graph *g, pgrt_stream *s)
{
    RT_NONNULL(__func__, g, "graph");
    if (s && s->ctx != g->ctx)
        return rt_fail(PGRT_EINVAL, "pgrt_graph_launch: stream of another context");
    int rc = rt_ctx_bind(g->ctx);
    if (rc)
        return rc;
    return RT_CU(&g->ctx->drv, GraphLaunch, (g->exec, rt_stream_cu(s)));
}

void pgrt_graph_destroy(pgrt_graph **pg)
{
    if (!pg || !*pg)
        return;
    pgrt_graph *g = *pg;
    *pg = NULL;
    /* Nothing to return to; a failure lands in this thread's message. */
    if (rt_ctx_bind(g->ctx) == 0)
        (void)RT_CU(&g->ctx->drv, GraphExecDestroy, (g->exec));
    free(g);
}
