/* SPDX-License-Identifier: MIT */
/*
 * pgrt_gemm_sm90: a linear layer's forward, input-gradient and
 * weight-gradient GEMMs on gemm_sm90 (kernels/gemm_sm90.c), which computes
 * C[P,Q] (+)= Σ_r A(p,r)·B(q,r) from two tensor maps:
 *
 *   layout  P  Q  R   A (stored)            B (stored)
 *   FWD     m  n  k   X[m,k]  r along rows  W[n,k]  r along rows
 *   DX      m  k  n   dY[m,n] r along rows  W[n,k]  q along rows
 *   DW      n  k  m   dY[m,n] p along rows  X[m,k]  q along rows
 *
 * The plan (gemm_plan.c) maps the operands and launches.
 */
#include "rt_internal.h"

#include <string.h>

uint32_t pgrt_gemm_sm90_bn(uint32_t rows, uint32_t cols, uint32_t sm_count)
{
    return pgk_gemm_sm90_bn(rows, cols, sm_count);
}

/* A buffer of 16-bit elements holding rows x cols at a pitch of ld. */
static int check_in(const char *fn, const char *name, const pgrt_ctx *ctx, const pgrt_buf *b,
                    pg_type want, uint64_t rows, uint64_t cols, uint32_t ld)
{
    RT_NONNULL(fn, b, name);
    if (b->ctx != ctx)
        return rt_fail(PGRT_EINVAL, "%s: %s belongs to another context", fn, name);
    if (b->type != want)
        return rt_fail(PGRT_EINVAL, "%s: %s holds %s elements, not %s", fn, name,
                       pg_type_name(b->type), pg_type_name(want));
    if (ld < cols)
        return rt_fail(PGRT_ERANGE, "%s: %s: the row pitch %u is below the row length %llu", fn,
                       name, ld, (unsigned long long)cols);
    uint64_t need = (rows - 1) * ld + cols;
    if (b->count < need)
        return rt_fail(PGRT_ERANGE, "%s: %s holds %zu elements; %llu rows of %llu at a pitch of "
                       "%u need %llu", fn, name, b->count, (unsigned long long)rows,
                       (unsigned long long)cols, ld, (unsigned long long)need);
    return 0;
}

static bool overlap(const pgrt_buf *x, const pgrt_buf *y)
{
    CUdeviceptr x1 = x->ptr + x->count * x->elsize, y1 = y->ptr + y->count * y->elsize;
    return x->ptr < y1 && y->ptr < x1;
}

int pgrt_gemm_sm90(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_gemm90 *g)
{
    static const char fn[] = "pgrt_gemm_sm90";
    RT_NONNULL(fn, ctx, "ctx");
    RT_NONNULL(fn, g, "the pgrt_gemm90");
    if (ctx->info.arch_target != PG_SM_90A)
        return rt_fail(PGRT_ETARGET, "%s: wgmma needs sm_90a, a compute capability 9.0 device; "
                       "this one is %d.%d", fn, ctx->info.cc_major, ctx->info.cc_minor);
    if ((unsigned)g->layout >= PGK_GEMM_LAYOUTS)
        return rt_fail(PGRT_EINVAL, "%s: layout %d is not FWD, DX or DW", fn, (int)g->layout);
    uint32_t m = g->m, n = g->n, k = g->k;
    if (!m || !n || !k || m > (1u << 24) || n > (1u << 24) || k > (1u << 24))
        return rt_fail(PGRT_ERANGE, "%s: m=%u n=%u k=%u: each must be in [1, 2^24]", fn, m, n, k);
    if (s && s->ctx != ctx)
        return rt_fail(PGRT_EINVAL, "%s: the stream belongs to another context", fn);
    RT_NONNULL(fn, g->a, "a");
    RT_NONNULL(fn, g->b, "b");
    RT_NONNULL(fn, g->c, "c");
    pg_type in = g->a->type;
    if (in != PG_BF16 && in != PG_F16)
        return rt_fail(PGRT_EINVAL, "%s: a holds %s elements, not bf16 or f16", fn,
                       pg_type_name(in));

    /* the stored shapes of a, b, c and the GEMM's P, Q, R */
    uint32_t a_rows = m, a_cols = g->layout == PGK_GEMM_FORWARD ? k : n;
    uint32_t b_rows = g->layout == PGK_GEMM_BACKWARD_W ? m : n, b_cols = k;
    uint32_t P = g->layout == PGK_GEMM_BACKWARD_W ? n : m;
    uint32_t Q = g->layout == PGK_GEMM_FORWARD ? n : k;
    uint32_t lda = g->lda ? g->lda : a_cols, ldb = g->ldb ? g->ldb : b_cols;
    uint32_t ldc = g->ldc ? g->ldc : Q;
    int rc;
    if ((rc = check_in(fn, "a", ctx, g->a, in, a_rows, a_cols, lda)) ||
        (rc = check_in(fn, "b", ctx, g->b, in, b_rows, b_cols, ldb)))
        return rc;
    pg_type out = g->c->type;
    if (out != PG_F32 && out != in)
        return rt_fail(PGRT_EINVAL, "%s: c holds %s elements; with %s inputs it is f32 or %s",
                       fn, pg_type_name(out), pg_type_name(in), pg_type_name(in));
    if ((rc = check_in(fn, "c", ctx, g->c, out, P, Q, ldc)))
        return rc;
    if (g->bias && (rc = check_in(fn, "bias", ctx, g->bias, PG_F32, 1, Q, Q)))
        return rc;
    if (overlap(g->c, g->a) || overlap(g->c, g->b) || (g->bias && overlap(g->c, g->bias)))
        return rt_fail(PGRT_EINVAL, "%s: the output c overlaps an input", fn);

    if (g->bn && (g->bn < 64 || g->bn > 256 || g->bn % 64))
        return rt_fail(PGRT_ERANGE, "%s: bn=%u is not 64, 128, 192 or 256", fn, g->bn);
    pgrt_gemm_spec spec = {.layout = g->layout, .kind = PGRT_GEMM_WGMMA, .in_type = in,
                           .out_type = out, .m = m, .n = n, .k = k, .a = g->a->ptr,
                           .b = g->b->ptr, .lda = lda, .ldb = ldb, .ldc = ldc,
                           .accumulate = g->accumulate, .bias = g->bias != NULL, .bn = g->bn,
                           .no_split = true};
    _Alignas(64) pgrt_gemm_plan plan;
    if ((rc = rt_gemm_plan_find(ctx, s, &spec, &plan)))
        return rc;
    return pgrt_gemm_plan_launch(&plan, s, g->c->ptr, g->bias ? g->bias->ptr : 0, 0);
}
