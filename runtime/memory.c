/* SPDX-License-Identifier: MIT */
/*
 * Device buffers: allocation, views sharing one reference-counted
 * allocation, and uploads, downloads, copies and fills, each plain (the
 * device synchronised around it) and on a stream.
 */
#include "rt_internal.h"

#include <stdlib.h>

int pgrt_buf_alloc(pgrt_ctx *ctx, pg_type t, size_t count, pgrt_buf **out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    unsigned bits = (unsigned)t < PG_TYPE_COUNT ? pg_type_bits(t) : 0;
    if (bits < 8)
        return rt_fail(PGRT_EINVAL, "pgrt_buf_alloc: %s is not a storable element type",
                       bits ? pg_type_name(t) : "an invalid type");
    if (count == 0)
        return rt_fail(PGRT_EINVAL, "pgrt_buf_alloc: 0 elements");
    size_t elsize = bits / 8;
    if (count > SIZE_MAX / elsize)
        return rt_fail(PGRT_ERANGE, "pgrt_buf_alloc: %zu elements of %s overflow size_t", count,
                       pg_type_name(t));
    int rc = rt_ctx_bind(ctx);
    if (rc)
        return rc;
    pgrt_buf *b = calloc(1, sizeof *b);
    rt_alloc *a = calloc(1, sizeof *a);
    if (!b || !a) {
        free(b);
        free(a);
        return rt_fail(PGRT_ENOMEM, "pgrt_buf_alloc: out of memory");
    }
    CUresult r = ctx->drv.MemAlloc(&a->ptr, count * elsize);
    if (r != CUDA_SUCCESS) {
        free(b);
        free(a);
        return rt_cu_fail(&ctx->drv, r, "cuMemAlloc", "%zu bytes (%zu x %s)", count * elsize,
                          count, pg_type_name(t));
    }
    atomic_init(&a->refs, 1);
    b->ctx = ctx;
    b->alloc = a;
    b->ptr = a->ptr;
    b->count = count;
    b->type = t;
    b->elsize = elsize;
    *out = b;
    return 0;
}

int pgrt_buf_view(pgrt_buf *parent, size_t offset, size_t count, pgrt_buf **out)
{
    RT_NONNULL(__func__, parent, "parent");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    if (count == 0 || offset > parent->count || count > parent->count - offset)
        return rt_fail(PGRT_ERANGE, "pgrt_buf_view: [%zu, %zu+%zu) is not inside a buffer of %zu",
                       offset, offset, count, parent->count);
    pgrt_buf *b = calloc(1, sizeof *b);
    if (!b)
        return rt_fail(PGRT_ENOMEM, "pgrt_buf_view: out of memory");
    *b = *parent;
    b->ptr = parent->ptr + (CUdeviceptr)(offset * parent->elsize);
    b->count = count;
    atomic_fetch_add(&b->alloc->refs, 1);
    *out = b;
    return 0;
}

void pgrt_buf_destroy(pgrt_buf **pb)
{
    if (!pb || !*pb)
        return;
    pgrt_buf *b = *pb;
    *pb = NULL;
    rt_alloc *a = b->alloc;
    if (atomic_fetch_sub(&a->refs, 1) == 1) {
        /* Nothing to return to; a failure lands in this thread's message. */
        if (rt_ctx_bind(b->ctx) == 0)
            (void)RT_CU(&b->ctx->drv, MemFree, (a->ptr));
        free(a);
    }
    free(b);
}

pgrt_devptr pgrt_buf_ptr(const pgrt_buf *b) { return b ? b->ptr : 0; }
size_t pgrt_buf_count(const pgrt_buf *b) { return b ? b->count : 0; }
size_t pgrt_buf_bytes(const pgrt_buf *b) { return b ? b->count * b->elsize : 0; }
pg_type pgrt_buf_type(const pgrt_buf *b) { return b ? b->type : PG_TYPE_COUNT; }

pgrt_arg pgrt_arg_buf(const pgrt_buf *b) { return pgrt_arg_ptr(b ? b->ptr : 0); }

/* The plain (synchronous) forms wait for the whole device before and after:
 * the runtime's streams are non-blocking, so the legacy stream the driver's
 * synchronous calls use is not ordered with them, a pageable upload returns
 * before its DMA lands, and memsets do not wait at all. Without this a
 * launch on a stream could read a buffer before an upload or fill that
 * "returned" had reached it. */
static int device_sync(pgrt_ctx *ctx) { return RT_CU(&ctx->drv, CtxSynchronize, ()); }

static int range(const char *fn, const pgrt_buf *b, size_t offset, size_t count)
{
    if (offset > b->count || count > b->count - offset)
        return rt_fail(PGRT_ERANGE, "%s: elements [%zu, %zu+%zu) are outside a buffer of %zu",
                       fn, offset, offset, count, b->count);
    return 0;
}

static int stream_ok(const char *fn, const pgrt_buf *b, const pgrt_stream *s)
{
    if (s && s->ctx != b->ctx)
        return rt_fail(PGRT_EINVAL, "%s: the stream belongs to another context", fn);
    return 0;
}

static int upload(const char *fn, pgrt_buf *b, size_t offset, const void *src, size_t count,
                  pgrt_stream *s, bool async)
{
    RT_NONNULL(fn, b, "buffer");
    if (count)
        RT_NONNULL(fn, src, "src");
    int rc;
    if ((rc = range(fn, b, offset, count)) || (rc = stream_ok(fn, b, s)))
        return rc;
    if (count == 0)
        return 0;
    if ((rc = rt_ctx_bind(b->ctx)))
        return rc;
    CUdeviceptr dst = b->ptr + (CUdeviceptr)(offset * b->elsize);
    size_t bytes = count * b->elsize;
    if (async)
        return RT_CU(&b->ctx->drv, MemcpyHtoDAsync, (dst, src, bytes, rt_stream_cu(s)));
    if ((rc = device_sync(b->ctx)) || (rc = RT_CU(&b->ctx->drv, MemcpyHtoD, (dst, src, bytes))))
        return rc;
    return device_sync(b->ctx);
}

static int download(const char *fn, const pgrt_buf *b, size_t offset, void *dst, size_t count,
                    pgrt_stream *s, bool async)
{
    RT_NONNULL(fn, b, "buffer");
    if (count)
        RT_NONNULL(fn, dst, "dst");
    int rc;
    if ((rc = range(fn, b, offset, count)) || (rc = stream_ok(fn, b, s)))
        return rc;
    if (count == 0)
        return 0;
    if ((rc = rt_ctx_bind(b->ctx)))
        return rc;
    CUdeviceptr src = b->ptr + (CUdeviceptr)(offset * b->elsize);
    size_t bytes = count * b->elsize;
    if (async)
        return RT_CU(&b->ctx->drv, MemcpyDtoHAsync, (dst, src, bytes, rt_stream_cu(s)));
    /* A copy to host memory returns complete; only what came before needs
     * waiting for. */
    if ((rc = device_sync(b->ctx)))
        return rc;
    return RT_CU(&b->ctx->drv, MemcpyDtoH, (dst, src, bytes));
}

static int copy(const char *fn, pgrt_buf *dst, size_t doff, const pgrt_buf *src, size_t soff,
                size_t count, pgrt_stream *s, bool async)
{
    RT_NONNULL(fn, dst, "dst");
    RT_NONNULL(fn, src, "src");
    if (dst->type != src->type)
        return rt_fail(PGRT_EINVAL, "%s: element types differ (%s <- %s)", fn,
                       pg_type_name(dst->type), pg_type_name(src->type));
    if (dst->ctx != src->ctx)
        return rt_fail(PGRT_EINVAL, "%s: buffers of different contexts", fn);
    int rc;
    if ((rc = range(fn, dst, doff, count)) || (rc = range(fn, src, soff, count)) ||
        (rc = stream_ok(fn, dst, s)))
        return rc;
    if (count == 0)
        return 0;
    if ((rc = rt_ctx_bind(dst->ctx)))
        return rc;
    CUdeviceptr d = dst->ptr + (CUdeviceptr)(doff * dst->elsize);
    CUdeviceptr sp = src->ptr + (CUdeviceptr)(soff * src->elsize);
    size_t bytes = count * dst->elsize;
    if (async)
        return RT_CU(&dst->ctx->drv, MemcpyDtoDAsync, (d, sp, bytes, rt_stream_cu(s)));
    if ((rc = device_sync(dst->ctx)) || (rc = RT_CU(&dst->ctx->drv, MemcpyDtoD, (d, sp, bytes))))
        return rc;
    return device_sync(dst->ctx);
}

int pgrt_buf_upload(pgrt_buf *b, size_t offset, const void *src, size_t count)
{
    return upload("pgrt_buf_upload", b, offset, src, count, NULL, false);
}

int pgrt_buf_download(const pgrt_buf *b, size_t offset, void *dst, size_t count)
{
    return download("pgrt_buf_download", b, offset, dst, count, NULL, false);
}

int pgrt_buf_copy(pgrt_buf *dst, size_t dst_offset, const pgrt_buf *src, size_t src_offset,
                  size_t count)
{
    return copy("pgrt_buf_copy", dst, dst_offset, src, src_offset, count, NULL, false);
}

int pgrt_buf_upload_async(pgrt_buf *b, size_t offset, const void *src, size_t count,
                          pgrt_stream *s)
{
    return upload("pgrt_buf_upload_async", b, offset, src, count, s, true);
}

int pgrt_buf_download_async(const pgrt_buf *b, size_t offset, void *dst, size_t count,
                            pgrt_stream *s)
{
    return download("pgrt_buf_download_async", b, offset, dst, count, s, true);
}

int pgrt_buf_copy_async(pgrt_buf *dst, size_t dst_offset, const pgrt_buf *src, size_t src_offset,
                        size_t count, pgrt_stream *s)
{
    return copy("pgrt_buf_copy_async", dst, dst_offset, src, src_offset, count, s, true);
}

static int memset8(const char *fn, pgrt_buf *b, uint8_t byte, pgrt_stream *s, bool async)
{
    RT_NONNULL(fn, b, "buffer");
    int rc;
    if ((rc = stream_ok(fn, b, s)) || (rc = rt_ctx_bind(b->ctx)))
        return rc;
    size_t bytes = b->count * b->elsize;
    if (async)
        return RT_CU(&b->ctx->drv, MemsetD8Async, (b->ptr, byte, bytes, rt_stream_cu(s)));
    if ((rc = device_sync(b->ctx)) || (rc = RT_CU(&b->ctx->drv, MemsetD8, (b->ptr, byte, bytes))))
        return rc;
    return device_sync(b->ctx);
}

static int fill32(const char *fn, pgrt_buf *b, uint32_t bits, pgrt_stream *s, bool async)
{
    RT_NONNULL(fn, b, "buffer");
    if (b->elsize != 4)
        return rt_fail(PGRT_EINVAL, "%s: %s elements are not 32-bit", fn, pg_type_name(b->type));
    int rc;
    if ((rc = stream_ok(fn, b, s)) || (rc = rt_ctx_bind(b->ctx)))
        return rc;
    if (async)
        return RT_CU(&b->ctx->drv, MemsetD32Async, (b->ptr, bits, b->count, rt_stream_cu(s)));
    if ((rc = device_sync(b->ctx)) ||
        (rc = RT_CU(&b->ctx->drv, MemsetD32, (b->ptr, bits, b->count))))
        return rc;
    return device_sync(b->ctx);
}

int pgrt_buf_memset(pgrt_buf *b, uint8_t byte)
{
    return memset8("pgrt_buf_memset", b, byte, NULL, false);
}

int pgrt_buf_memset_async(pgrt_buf *b, uint8_t byte, pgrt_stream *s)
{
    return memset8("pgrt_buf_memset_async", b, byte, s, true);
}

int pgrt_buf_fill32(pgrt_buf *b, uint32_t bits)
{
    return fill32("pgrt_buf_fill32", b, bits, NULL, false);
}

int pgrt_buf_fill32_async(pgrt_buf *b, uint32_t bits, pgrt_stream *s)
{
    return fill32("pgrt_buf_fill32_async", b, bits, s, true);
}
