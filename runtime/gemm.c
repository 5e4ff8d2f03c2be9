/* SPDX-License-Identifier: MIT */
/*
 * The GEMM backward dispatch: cuBLAS when the context has it and its
 * switch is on, the catalog's PTX kernels otherwise.
 *
 * Row-major onto column-major. cuBLAS reads matrices column-major; a
 * row-major R×C buffer with rows of C elements is, read that way, the C×R
 * matrix Xᵀ with leading dimension C. So the three buffers of each GEMM
 * are, to cuBLAS:
 *
 *   dC  (M×N, row-major)  =  dCᵀ  N×M, ld N
 *   B   (K×N, row-major)  =  Bᵀ   N×K, ld N
 *   A   (M×K, row-major)  =  Aᵀ   K×M, ld K
 *
 * and each product is computed transposed, which lands it in row-major:
 *
 *   grad_A = dC·Bᵀ  ⇔  grad_Aᵀ (K×M) = B·dCᵀ = op_T(Bᵀ)·op_N(dCᵀ)
 *           sgemm(T, N, m=K, n=M, k=N, B, ld N, dC, ld N, C=grad_A, ld K)
 *   grad_B = Aᵀ·dC  ⇔  grad_Bᵀ (N×K) = dCᵀ·A = op_N(dCᵀ)·op_T(Aᵀ)
 *           sgemm(N, T, m=N, n=K, k=M, dC, ld N, A, ld K, C=grad_B, ld N)
 *
 * Accumulation is beta = 1 (grad_A += ...), else beta = 0 (grad_A is
 * overwritten, never read: it may hold NaNs).
 */
#include "rt_blas.h"

#include <stdlib.h>

#include <string.h>

/* The seed APIs' sizes: each in [1, 2^21], as every prepared GEMM's. */
#define SEED_MAX_DIM (1u << 21)

typedef struct operand {
    const char *name;
    const pgrt_buf *buf;
    uint64_t need; /* elements the GEMM touches, from the start */
} operand;

/* Sizes, types, contexts and overlap of one GEMM's operands; ops[2] is
 * the output. */
static int check_operands(const char *fn, pgrt_ctx *ctx, pgrt_stream *s, pgk_gemm_layout layout,
                          const operand ops[3], const uint32_t dims[3])
{
    /* the seed kernel's own bounds on its m, n, k */
    static const char *const dim_names[3] = {"m", "n", "k"};
    pgk_gemm_choice ch;
    if (pgk_gemm_seed_choice(layout, false, 1, 1, 1, &ch))
        return rt_fail(PGRT_EKERNEL, "%s: the catalog has no seed kernel for it", fn);
    for (int i = 0; i < 3; i++) {
        int ki = pgk_knob_index(ch.desc, dim_names[i]);
        uint32_t max = ki >= 0 ? ch.desc->knobs[ki].max : SEED_MAX_DIM;
        max = max < SEED_MAX_DIM ? max : SEED_MAX_DIM;
        if (dims[i] == 0 || dims[i] > max)
            return rt_fail(PGRT_ERANGE, "%s: %s = %u is outside [1, %u]", fn, dim_names[i],
                           dims[i], max);
    }
    for (int i = 0; i < 3; i++) {
        const pgrt_buf *b = ops[i].buf;
        RT_NONNULL(fn, b, ops[i].name);
        if (b->ctx != ctx)
            return rt_fail(PGRT_EINVAL, "%s: %s belongs to another context", fn, ops[i].name);
        if (b->type != PG_F32)
            return rt_fail(PGRT_EINVAL, "%s: %s holds %s elements, not f32", fn, ops[i].name,
                           pg_type_name(b->type));
        if (b->count < ops[i].need)
            return rt_fail(PGRT_ERANGE, "%s: %s holds %zu elements; m=%u n=%u k=%u need %llu",
                           fn, ops[i].name, b->count, dims[0], dims[1], dims[2],
                           (unsigned long long)ops[i].need);
    }
    CUdeviceptr o0 = ops[2].buf->ptr, o1 = o0 + ops[2].need * sizeof(float);
    for (int i = 0; i < 2; i++) {
        CUdeviceptr i0 = ops[i].buf->ptr, i1 = i0 + ops[i].need * sizeof(float);
        if (i0 < o1 && o0 < i1)
            return rt_fail(PGRT_EINVAL, "%s: the output %s overlaps the input %s", fn,
                           ops[2].name, ops[i].name);
    }
    if (s && s->ctx != ctx)
        return rt_fail(PGRT_EINVAL, "%s: the stream belongs to another context", fn);
    return 0;
}

/* The PTX path: the seed's kernel for the layer product, prepared (or
 * found among the context's plans) and launched on s. */
static int launch_seed(pgrt_ctx *ctx, pgrt_stream *s, pgk_gemm_layout layout, bool accumulate,
                       const pgrt_buf *a, const pgrt_buf *b, pgrt_buf *out, uint32_t m,
                       uint32_t n, uint32_t k)
{
    pgrt_gemm_spec spec = {.layout = layout, .kind = PGRT_GEMM_SEED, .in_type = PG_F32,
                           .out_type = PG_F32, .m = m, .n = n, .k = k, .a = a->ptr,
                           .b = b->ptr, .accumulate = accumulate};
    _Alignas(64) pgrt_gemm_plan p;
    int rc = rt_gemm_plan_find(ctx, s, &spec, &p);
    if (rc || (rc = pgrt_gemm_plan_launch(&p, s, out->ptr, 0, 0)))
        return rc;
    rt_blas_count_ptx(ctx);
    return 0;
}

int pgrt_gemm_backward_a(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *grad_c, const pgrt_buf *b,
                         pgrt_buf *grad_a, uint32_t m, uint32_t n, uint32_t k, bool accumulate,
                         pgrt_gemm_path *path)
{
    static const char fn[] = "pgrt_gemm_backward_a";
    if (path)
        *path = (pgrt_gemm_path)0;
    RT_NONNULL(fn, ctx, "ctx");
    const uint32_t dims[3] = {m, n, k};
    const operand ops[3] = {{"grad_c", grad_c, (uint64_t)m * n},
                            {"b", b, (uint64_t)k * n},
                            {"grad_a", grad_a, (uint64_t)m * k}};
    int rc = check_operands(fn, ctx, s, PGK_GEMM_FORWARD, ops, dims);
    if (rc)
        return rc;
    bool use = false;
    if ((rc = rt_blas_ready(ctx, rt_stream_cu(s), &use)))
        return rc;
    if (use) {
        rc = rt_blas_sgemm(ctx, s, true, false, (int)k, (int)m, (int)n, b->ptr, (int)n,
                           grad_c->ptr, (int)n, accumulate ? 1.0f : 0.0f, grad_a->ptr, (int)k,
                           accumulate ? "gemm_backward_a, accumulate" : "gemm_backward_a");
    } else {
        /* the layer's forward: x = dC [m, n], W = B [k, n], y = grad_A [m, k] */
        rc = launch_seed(ctx, s, PGK_GEMM_FORWARD, accumulate, grad_c, b, grad_a, m, k, n);
    }
    if (rc == 0 && path)
        *path = use ? PGRT_GEMM_CUBLAS : PGRT_GEMM_PTX;
    return rc;
}

int pgrt_gemm_backward_b(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *a, const pgrt_buf *grad_c,
                         pgrt_buf *grad_b, uint32_t m, uint32_t n, uint32_t k, pgrt_gemm_path *path)
{
    static const char fn[] = "pgrt_gemm_backward_b";
    if (path)
        *path = (pgrt_gemm_path)0;
    RT_NONNULL(fn, ctx, "ctx");
    const uint32_t dims[3] = {m, n, k};
    const operand ops[3] = {{"a", a, (uint64_t)m * k},
                            {"grad_c", grad_c, (uint64_t)m * n},
                            {"grad_b", grad_b, (uint64_t)k * n}};
    int rc = check_operands(fn, ctx, s, PGK_GEMM_BACKWARD_W, ops, dims);
    if (rc)
        return rc;
    bool use = false;
    if ((rc = rt_blas_ready(ctx, rt_stream_cu(s), &use)))
        return rc;
    if (use) {
        rc = rt_blas_sgemm(ctx, s, false, true, (int)n, (int)k, (int)m, grad_c->ptr, (int)n,
                           a->ptr, (int)k, 0.0f, grad_b->ptr, (int)n, "gemm_backward_b");
    } else {
        /* the layer's dW: dy = A [m, k], x = dC [m, n], dW = grad_B [k, n] */
        rc = launch_seed(ctx, s, PGK_GEMM_BACKWARD_W, false, a, grad_c, grad_b, m, k, n);
    }
    if (rc == 0 && path)
        *path = use ? PGRT_GEMM_CUBLAS : PGRT_GEMM_PTX;
    return rc;
}

/* ---------------------------------------------------------------- pgrt_gemm */

uint64_t pgrt_gemm_workspace_bytes(pgrt_ctx *ctx, pgk_gemm_layout layout, pg_type in_type,
                                   pg_type out_type, uint32_t m, uint32_t n, uint32_t k)
{
    pgk_gemm_choice ch;
    if (!ctx || pgk_gemm_choose(layout, in_type, out_type, m, n, k, ctx->info.arch_target,
                                ctx->info.sm_count > 0 ? (unsigned)ctx->info.sm_count : 0,
                                &ch))
        return 0;
    return ch.split > 1 ? ch.workspace_bytes : 0;
}

static bool overlaps(const pgrt_buf *x, uint64_t xbytes, const pgrt_buf *y, uint64_t ybytes)
{
    return x && y && x->ptr < y->ptr + ybytes && y->ptr < x->ptr + xbytes;
}

static bool spec_is(const pgrt_gemm_spec *x, const pgrt_gemm_spec *y)
{
    return x->layout == y->layout && x->kind == y->kind && x->in_type == y->in_type &&
           x->out_type == y->out_type && x->m == y->m && x->n == y->n && x->k == y->k &&
           x->a == y->a && x->b == y->b && x->lda == y->lda && x->ldb == y->ldb &&
           x->ldc == y->ldc && x->accumulate == y->accumulate && x->bias == y->bias &&
           x->a2 == y->a2 && x->b2 == y->b2 && x->k2 == y->k2 && x->lda2 == y->lda2 &&
           x->ldb2 == y->ldb2 && x->bn == y->bn && x->split == y->split &&
           x->no_split == y->no_split;
}

int rt_gemm_plan_find(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_gemm_spec *spec,
                      pgrt_gemm_plan *out)
{
    pthread_mutex_lock(&ctx->lock);
    for (unsigned i = 0; i < RT_GEMM_PLANS; i++) {
        const pgrt_gemm_plan *p = ctx->gemm_plans[i];
        if (p && spec_is(&p->spec, spec)) {
            memcpy(out, p, sizeof *out);
            pthread_mutex_unlock(&ctx->lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    pgrt_gemm_plan *keep = aligned_alloc(64, (sizeof *keep + 63) & ~(size_t)63);
    if (!keep)
        return rt_fail(PGRT_ENOMEM, "pgrt_gemm: out of host memory");
    int rc = rt_gemm_plan_init(ctx, spec, rt_stream_cu(s), keep);
    if (rc) {
        rt_gemm_plan_release(keep);
        free(keep);
        return rc;
    }
    memcpy(out, keep, sizeof *out);
    pthread_mutex_lock(&ctx->lock);
    unsigned slot = ctx->gemm_plan_next;
    ctx->gemm_plan_next = (slot + 1) % RT_GEMM_PLANS;
    pgrt_gemm_plan *old = ctx->gemm_plans[slot];
    ctx->gemm_plans[slot] = keep;
    if (old) {
        old->retired = ctx->gemm_retired;
        ctx->gemm_retired = old;
    }
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

int pgrt_gemm(pgrt_ctx *ctx, pgrt_stream *s, pgk_gemm_layout layout, const pgrt_buf *a,
              const pgrt_buf *b, pgrt_buf *c, const pgrt_buf *bias, uint32_t m, uint32_t n,
              uint32_t k, bool accumulate, pgrt_buf *workspace, pgk_gemm_choice *used)
{
    static const char fn[] = "pgrt_gemm";
    if (used)
        memset(used, 0, sizeof *used);
    RT_NONNULL(fn, ctx, "ctx");
    if ((unsigned)layout >= PGK_GEMM_LAYOUTS)
        return rt_fail(PGRT_EINVAL, "%s: layout %d is not a pgk_gemm_layout", fn, (int)layout);
    const pgrt_buf *ops[3] = {a, b, c};
    static const char *const names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        RT_NONNULL(fn, ops[i], names[i]);
        if (ops[i]->ctx != ctx)
            return rt_fail(PGRT_EINVAL, "%s: %s belongs to another context", fn, names[i]);
    }
    if (s && s->ctx != ctx)
        return rt_fail(PGRT_EINVAL, "%s: the stream belongs to another context", fn);
    if (a->type != b->type)
        return rt_fail(PGRT_EINVAL, "%s: a holds %s and b %s elements; the inputs share a type",
                       fn, pg_type_name(a->type), pg_type_name(b->type));
    if (!m || !n || !k || m > (1u << 21) || n > (1u << 21) || k > (1u << 21))
        return rt_fail(PGRT_ERANGE, "%s: m=%u n=%u k=%u: each must be in [1, 2^21]", fn, m, n,
                       k);
    /* element counts: a, b, c by layout; the bias one a column of c */
    uint64_t M = m, N = n, K = k;
    uint64_t need[3] = {layout == PGK_GEMM_FORWARD ? M * K : M * N,
                        layout == PGK_GEMM_BACKWARD_W ? M * K : N * K,
                        layout == PGK_GEMM_FORWARD ? M * N : layout == PGK_GEMM_BACKWARD_X
                                                                 ? M * K
                                                                 : N * K};
    uint64_t cols = layout == PGK_GEMM_FORWARD ? N : K;
    for (int i = 0; i < 3; i++)
        if (ops[i]->count < need[i])
            return rt_fail(PGRT_ERANGE, "%s: %s holds %zu elements; m=%u n=%u k=%u need %llu",
                           fn, names[i], ops[i]->count, m, n, k,
                           (unsigned long long)need[i]);
    if (bias && (bias->ctx != ctx || bias->type != PG_F32 || bias->count < cols))
        return rt_fail(bias->ctx != ctx ? PGRT_EINVAL : bias->type != PG_F32 ? PGRT_EINVAL
                                                                            : PGRT_ERANGE,
                       "%s: bias must be an f32 buffer of this context with at least %llu "
                       "elements", fn, (unsigned long long)cols);
    uint64_t cbytes = need[2] * c->elsize;
    for (int i = 0; i < 2; i++)
        if (overlaps(c, cbytes, ops[i], need[i] * ops[i]->elsize))
            return rt_fail(PGRT_EINVAL, "%s: the output c overlaps the input %s", fn, names[i]);
    if (overlaps(c, cbytes, bias, cols * 4))
        return rt_fail(PGRT_EINVAL, "%s: the output c overlaps the bias", fn);
    /* gemm_sm90 splits only into a workspace that is there and fits */
    uint64_t want = pgrt_gemm_workspace_bytes(ctx, layout, a->type, c->type, m, n, k);
    bool room = workspace && workspace->ctx == ctx && pgrt_buf_bytes(workspace) >= want;
    pgrt_gemm_spec spec = {.layout = layout, .kind = PGRT_GEMM_CHOSEN, .in_type = a->type,
                           .out_type = c->type, .m = m, .n = n, .k = k, .a = a->ptr,
                           .b = b->ptr, .accumulate = accumulate, .bias = bias != NULL,
                           .no_split = !room};
    _Alignas(64) pgrt_gemm_plan p;
    int rc = rt_gemm_plan_find(ctx, s, &spec, &p);
    if (rc)
        return rc;
    uint64_t wsb = pgrt_gemm_plan_workspace(&p);
    pgrt_devptr ws = 0;
    if (wsb && workspace) {
        if (overlaps(workspace, wsb, a, need[0] * a->elsize) ||
            overlaps(workspace, wsb, b, need[1] * b->elsize) ||
            overlaps(workspace, wsb, bias, cols * 4))
            return rt_fail(PGRT_EINVAL, "%s: the workspace overlaps an input", fn);
        /* one too small, of another context or over c: the same tile, unsplit */
        if (workspace->ctx == ctx && pgrt_buf_bytes(workspace) >= wsb &&
            !overlaps(c, cbytes, workspace, wsb))
            ws = workspace->ptr;
    }
    if ((rc = pgrt_gemm_plan_launch(&p, s, c->ptr, bias ? bias->ptr : 0, ws)))
        return rc;
    if (used) {
        *used = p.ch;
        if (wsb && !ws) {
            used->knobs = p.unsplit;
            used->split = 1;
            used->reduce = NULL;
            used->workspace_bytes = 0;
        }
    }
    return 0;
}
