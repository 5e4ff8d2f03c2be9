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

#include <string.h>

typedef struct operand {
    const char *name;
    const pgrt_buf *buf;
    uint64_t need; /* elements the GEMM touches, from the start */
} operand;

/* Sizes, types, contexts and overlap of one GEMM's operands; ops[2] is
 * the output. */
static int check_operands(const char *fn, pgrt_ctx *ctx, pgrt_stream *s, const pgk_desc *d,
                          const operand ops[3], const uint32_t dims[3])
{
    static const char *const dim_names[3] = {"m", "n", "k"};
    for (int i = 0; i < 3; i++) {
        int ki = pgk_knob_index(d, dim_names[i]);
        uint32_t max = ki >= 0 ? d->knobs[ki].max : UINT32_MAX;
        if (dims[i] == 0 || dims[i] > max)
            return rt_fail(PGRT_ERANGE, "%s: %s = %u is outside [1, %u]", fn, dim_names[i],
                           dims[i], max);
    }
    for (int i = 0; i < 3; i++) {
        const pgrt_buf *b = ops[i].buf;
        if (!b)
            return rt_fail(PGRT_EINVAL, "%s: %s is NULL", fn, ops[i].name);
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

/* The PTX path: the kernel for the dispatch's variant, launched on s. */
static int launch_ptx(pgrt_ctx *ctx, pgrt_stream *s, const pgk_desc *d, const uint32_t dims[3],
                      const pgrt_buf *b0, const pgrt_buf *b1, pgrt_buf *out)
{
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    static const char *const dim_names[3] = {"m", "n", "k"};
    for (int i = 0; i < 3; i++) {
        int ki = pgk_knob_index(d, dim_names[i]);
        if (ki < 0)
            return rt_fail(PGRT_EKERNEL, "%s has no knob %s", d->name, dim_names[i]);
        kn.v[ki] = dims[i];
    }
    pgk_pick(d, &kn); /* the tile variant for this shape */
    pgrt_kernel *k;
    int rc = rt_kernel_get(ctx, d, &kn, rt_stream_cu(s), &k);
    if (rc)
        return rc;
    pgrt_arg args[6] = {pgrt_arg_buf(b0),       pgrt_arg_buf(b1),       pgrt_arg_buf(out),
                        pgrt_arg_u32(dims[0]), pgrt_arg_u32(dims[1]), pgrt_arg_u32(dims[2])};
    if ((rc = pgrt_kernel_launch(k, s, &kn, args, 6)))
        return rc;
    rt_blas_count_ptx(ctx);
    return 0;
}

static const pgk_desc *need_desc(const char *name, const char *fn)
{
    const pgk_desc *d = pgk_find(name);
    if (!d)
        rt_fail(PGRT_ENOTFOUND, "%s: the catalog has no %s", fn, name);
    return d;
}

int pgrt_gemm_backward_a(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *grad_c, const pgrt_buf *b,
                         pgrt_buf *grad_a, uint32_t m, uint32_t n, uint32_t k, bool accumulate,
                         pgrt_gemm_path *path)
{
    static const char fn[] = "pgrt_gemm_backward_a";
    if (path)
        *path = (pgrt_gemm_path)0;
    if (!ctx)
        return rt_fail(PGRT_EINVAL, "%s: ctx is NULL", fn);
    const pgk_desc *d =
        need_desc(accumulate ? "gemm_backward_a_accumulate" : "gemm_backward_a", fn);
    if (!d)
        return PGRT_ENOTFOUND;
    const uint32_t dims[3] = {m, n, k};
    const operand ops[3] = {{"grad_c", grad_c, (uint64_t)m * n},
                            {"b", b, (uint64_t)k * n},
                            {"grad_a", grad_a, (uint64_t)m * k}};
    int rc = check_operands(fn, ctx, s, d, ops, dims);
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
        rc = launch_ptx(ctx, s, d, dims, grad_c, b, grad_a);
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
    if (!ctx)
        return rt_fail(PGRT_EINVAL, "%s: ctx is NULL", fn);
    const pgk_desc *d = need_desc("gemm_backward_b", fn);
    if (!d)
        return PGRT_ENOTFOUND;
    const uint32_t dims[3] = {m, n, k};
    const operand ops[3] = {{"a", a, (uint64_t)m * k},
                            {"grad_c", grad_c, (uint64_t)m * n},
                            {"grad_b", grad_b, (uint64_t)k * n}};
    int rc = check_operands(fn, ctx, s, d, ops, dims);
    if (rc)
        return rc;
    bool use = false;
    if ((rc = rt_blas_ready(ctx, rt_stream_cu(s), &use)))
        return rc;
    if (use) {
        rc = rt_blas_sgemm(ctx, s, false, true, (int)n, (int)k, (int)m, grad_c->ptr, (int)n,
                           a->ptr, (int)k, 0.0f, grad_b->ptr, (int)n, "gemm_backward_b");
    } else {
        rc = launch_ptx(ctx, s, d, dims, a, grad_c, grad_b);
    }
    if (rc == 0 && path)
        *path = use ? PGRT_GEMM_CUBLAS : PGRT_GEMM_PTX;
    return rc;
}

/* ---------------------------------------------------------------- pgrt_gemm */

/* The choice for the device's arch target (sm_90a on a compute
 * capability 9.0 device: gemm_sm90 where it is faster), or for target. */
static int device_choice(pgrt_ctx *ctx, pg_target target, pgk_gemm_layout layout, pg_type it,
                         pg_type ot, uint32_t m, uint32_t n, uint32_t k, pgk_gemm_choice *ch)
{
    int rc = pgk_gemm_choose(layout, it, ot, m, n, k, target,
                             ctx->info.sm_count > 0 ? (unsigned)ctx->info.sm_count : 0, ch);
    if (rc == PG_ERANGE)
        return rt_fail(PGRT_ERANGE, "pgrt_gemm: m=%u n=%u k=%u: each must be in [1, 2^21]", m, n,
                       k);
    if (rc)
        return rt_fail(PGRT_EINVAL, "pgrt_gemm: no GEMM for layout %d with %s inputs and %s "
                       "output (f16 or bf16 in with f32, f16 or bf16 out; or f32 throughout)",
                       (int)layout, pg_type_name(it) ? pg_type_name(it) : "?",
                       pg_type_name(ot) ? pg_type_name(ot) : "?");
    return 0;
}

uint64_t pgrt_gemm_workspace_bytes(pgrt_ctx *ctx, pgk_gemm_layout layout, pg_type in_type,
                                   pg_type out_type, uint32_t m, uint32_t n, uint32_t k)
{
    pgk_gemm_choice ch;
    if (!ctx ||
        device_choice(ctx, ctx->info.arch_target, layout, in_type, out_type, m, n, k, &ch))
        return 0;
    return ch.workspace_bytes;
}

static bool overlaps(const pgrt_buf *x, uint64_t xbytes, const pgrt_buf *y, uint64_t ybytes)
{
    return x && y && x->ptr < y->ptr + ybytes && y->ptr < x->ptr + xbytes;
}

static bool is_wg(const pgk_gemm_choice *ch) { return strcmp(ch->desc->name, "gemm_sm90") == 0; }

/* The f32 kernels of gemm_f32.c (params a, b, out, m, n, k; no bias, and
 * accumulate forward only, as its own kernel), not the warp-tiled family,
 * which takes the 16-bit family's params, flags and split. */
static bool is_f32_plain(const pgk_gemm_choice *ch)
{
    return ch->desc->nparams == 6;
}

/* Whether plan p is the one for these arguments: a gemm_sm90 plan bakes
 * the epilogue (accumulate, bias) into its kernel, and an f32 plan's
 * kernel depends on it (gemm_f32.c's has no bias), the others take it as
 * an argument. */
static bool plan_is(const rt_gemm_plan *p, pg_target target, pgk_gemm_layout layout, pg_type it,
                    pg_type ot, uint32_t m, uint32_t n, uint32_t k, bool f32_accumulate,
                    unsigned epi)
{
    return p->used && p->target == target && p->layout == layout && p->it == it &&
           p->ot == ot && p->m == m && p->n == n && p->k == k &&
           p->f32_accumulate == f32_accumulate &&
           ((!p->wg && it != PG_F32) || p->epi == epi);
}

/* The plan for a shape on target: from the context's plans, else chosen,
 * its kernels loaded (or refused during a capture, as any load) and kept,
 * replacing the oldest; *slot gets its index. A gemm_sm90 plan has one
 * kernel for the epilogue epi (a shape run with and without accumulate or
 * bias is two plans), so each must run once before a capture. */
static int gemm_plan(pgrt_ctx *ctx, pgrt_stream *s, pg_target target, pgk_gemm_layout layout,
                     pg_type it, pg_type ot, uint32_t m, uint32_t n, uint32_t k,
                     bool f32_accumulate, unsigned epi, rt_gemm_plan *out, unsigned *slot)
{
    pthread_mutex_lock(&ctx->lock);
    for (unsigned i = 0; i < RT_GEMM_PLANS; i++) {
        const rt_gemm_plan *p = &ctx->gemm_plans[i];
        if (plan_is(p, target, layout, it, ot, m, n, k, f32_accumulate, epi)) {
            *out = *p;
            *slot = i;
            pthread_mutex_unlock(&ctx->lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    rt_gemm_plan p = {.used = true, .f32_accumulate = f32_accumulate, .layout = (uint8_t)layout,
                      .target = target, .it = it, .ot = ot, .m = m, .n = n, .k = k};
    int rc = device_choice(ctx, target, layout, it, ot, m, n, k, &p.ch);
    if (rc)
        return rc;
    if (it == PG_F32) {
        p.epi = (uint8_t)epi;
        if (is_f32_plain(&p.ch) && ((epi & 2u) || ((epi & 1u) && layout != PGK_GEMM_FORWARD)) &&
            pgk_gemm_f32_choose(layout, m, n, k, target,
                                ctx->info.sm_count > 0 ? (unsigned)ctx->info.sm_count : 0,
                                &p.ch) != PG_OK)
            return rt_fail(PGRT_EKERNEL, "pgrt_gemm: no f32 GEMM with a bias or accumulate "
                           "for m=%u n=%u k=%u", m, n, k);
    }
    if (f32_accumulate && is_f32_plain(&p.ch) &&
        !(p.ch.desc = need_desc("gemm_backward_a_accumulate", "pgrt_gemm")))
        return PGRT_ENOTFOUND;
    if ((p.wg = is_wg(&p.ch))) {
        int ki = pgk_knob_index(p.ch.desc, "epilogue");
        if (ki < 0)
            return rt_fail(PGRT_EKERNEL, "pgrt_gemm: gemm_sm90 has no knob epilogue");
        p.epi = (uint8_t)epi;
        p.ch.knobs.v[ki] = epi;
    }
    if ((rc = rt_kernel_get(ctx, p.ch.desc, &p.ch.knobs, rt_stream_cu(s), &p.kern)))
        return rc;
    if (p.ch.reduce &&
        (rc = rt_kernel_get(ctx, p.ch.reduce, &p.ch.reduce_knobs, rt_stream_cu(s), &p.red)))
        return rc;
    pthread_mutex_lock(&ctx->lock);
    *slot = ctx->gemm_plan_next;
    ctx->gemm_plans[*slot] = p;
    ctx->gemm_plan_next = (ctx->gemm_plan_next + 1) % RT_GEMM_PLANS;
    pthread_mutex_unlock(&ctx->lock);
    *out = p;
    return 0;
}

/* A gemm_sm90 plan's launch: the maps from the plan when they map a and b
 * (encoding them is host work, but per call it would be the launch's
 * largest cost), else encoded and kept in the plan. No allocation, no
 * load: capture-safe once the plan exists. */
static int launch_wg(pgrt_ctx *ctx, pgrt_stream *s, const rt_gemm_plan *plan, unsigned slot,
                     const pgrt_buf *a, const pgrt_buf *b, pgrt_buf *c, const pgrt_buf *bias)
{
    const pgk_gemm_choice *ch = &plan->ch;
    pgrt_tensor_map maps[2];
    int rc;
    if (plan->map_a == a->ptr && plan->map_b == b->ptr && a->ptr && b->ptr) {
        memcpy(&maps[0], plan->maps[0], sizeof maps[0]);
        memcpy(&maps[1], plan->maps[1], sizeof maps[1]);
    } else {
        int bi = pgk_knob_index(ch->desc, "bn");
        if (bi < 0)
            return rt_fail(PGRT_EKERNEL, "pgrt_gemm: gemm_sm90 has no knob bn");
        uint32_t lda = plan->layout == PGK_GEMM_FORWARD ? plan->k : plan->n;
        if ((rc = rt_gemm90_maps(ctx, plan->layout, plan->it, a->ptr, b->ptr, plan->m, plan->n,
                                 plan->k, lda, plan->k, ch->knobs.v[bi], &maps[0], &maps[1])))
            return rc;
        pthread_mutex_lock(&ctx->lock);
        rt_gemm_plan *p = &ctx->gemm_plans[slot];
        if (plan_is(p, plan->target, (pgk_gemm_layout)plan->layout, plan->it, plan->ot, plan->m,
                    plan->n, plan->k, plan->f32_accumulate, plan->epi)) {
            memcpy(p->maps[0], &maps[0], sizeof maps[0]);
            memcpy(p->maps[1], &maps[1], sizeof maps[1]);
            p->map_a = a->ptr;
            p->map_b = b->ptr;
        }
        pthread_mutex_unlock(&ctx->lock);
    }
    /* the kernel's (m, n, k) are (P, Q, R); C's rows are Q long */
    pgrt_arg args[8] = {pgrt_arg_tensor_map(&maps[0]),
                        pgrt_arg_tensor_map(&maps[1]),
                        pgrt_arg_buf(c),
                        pgrt_arg_u64(bias ? bias->ptr : 0),
                        pgrt_arg_u32(ch->m),
                        pgrt_arg_u32(ch->n),
                        pgrt_arg_u32(ch->k),
                        pgrt_arg_u32(ch->n)};
    return pgrt_kernel_launch(plan->kern, s, &ch->knobs, args, 8);
}

int pgrt_gemm(pgrt_ctx *ctx, pgrt_stream *s, pgk_gemm_layout layout, const pgrt_buf *a,
              const pgrt_buf *b, pgrt_buf *c, const pgrt_buf *bias, uint32_t m, uint32_t n,
              uint32_t k, bool accumulate, pgrt_buf *workspace, pgk_gemm_choice *used)
{
    static const char fn[] = "pgrt_gemm";
    if (used)
        memset(used, 0, sizeof *used);
    if (!ctx)
        return rt_fail(PGRT_EINVAL, "%s: ctx is NULL", fn);
    if ((unsigned)layout >= PGK_GEMM_LAYOUTS)
        return rt_fail(PGRT_EINVAL, "%s: layout %d is not a pgk_gemm_layout", fn, (int)layout);
    const pgrt_buf *ops[3] = {a, b, c};
    static const char *const names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        if (!ops[i])
            return rt_fail(PGRT_EINVAL, "%s: %s is NULL", fn, names[i]);
        if (ops[i]->ctx != ctx)
            return rt_fail(PGRT_EINVAL, "%s: %s belongs to another context", fn, names[i]);
    }
    if (s && s->ctx != ctx)
        return rt_fail(PGRT_EINVAL, "%s: the stream belongs to another context", fn);
    if (a->type != b->type)
        return rt_fail(PGRT_EINVAL, "%s: a holds %s and b %s elements; the inputs share a type",
                       fn, pg_type_name(a->type), pg_type_name(b->type));
    bool f32 = a->type == PG_F32;
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
    uint64_t rows = need[2] / cols;
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
    rt_gemm_plan plan;
    unsigned slot, epi = (accumulate ? 1u : 0u) | (bias ? 2u : 0u);
    int rc = gemm_plan(ctx, s, ctx->info.arch_target, layout, a->type, c->type, m, n, k,
                       f32 && accumulate, epi, &plan, &slot);
    if (rc == 0 && plan.wg && ((a->ptr | b->ptr) & 15u))
        /* a view off TMA's 16-byte alignment: the mma.sync family */
        rc = gemm_plan(ctx, s, ctx->info.target, layout, a->type, c->type, m, n, k, false, 0,
                       &plan, &slot);
    if (rc)
        return rc;
    if (plan.wg) {
        if ((rc = launch_wg(ctx, s, &plan, slot, a, b, c, bias)) == 0 && used)
            *used = plan.ch;
        return rc;
    }
    pgk_gemm_choice ch = plan.ch;
    if (ch.split > 1 && workspace &&
        (overlaps(workspace, ch.workspace_bytes, a, need[0] * a->elsize) ||
         overlaps(workspace, ch.workspace_bytes, b, need[1] * b->elsize) ||
         overlaps(workspace, ch.workspace_bytes, bias, cols * 4)))
        return rt_fail(PGRT_EINVAL, "%s: the workspace overlaps an input", fn);
    if (ch.split > 1 && (!workspace || workspace->ctx != ctx ||
                         pgrt_buf_bytes(workspace) < ch.workspace_bytes ||
                         overlaps(c, cbytes, workspace, ch.workspace_bytes))) {
        /* no room for the partials: the same tile, unsplit */
        ch.split = 1;
        ch.knobs.v[pgk_knob_index(ch.desc, "split")] = 1;
        ch.reduce = NULL;
        ch.workspace_bytes = 0;
    }
    pgrt_kernel *kern = plan.kern;
    if (f32 && is_f32_plain(&ch)) {
        /* gemm_f32.c's operand order: forward (dC, B) = (X, W);
         * backward_x (A, B) = (dY, W); backward_w (A, dC) = (dY, X) */
        pgrt_arg args[6] = {pgrt_arg_buf(a),     pgrt_arg_buf(b),     pgrt_arg_buf(c),
                            pgrt_arg_u32(ch.m), pgrt_arg_u32(ch.n), pgrt_arg_u32(ch.k)};
        rc = pgrt_kernel_launch(kern, s, &ch.knobs, args, 6);
    } else {
        uint32_t flags = (accumulate ? 1u : 0u) | (bias ? 2u : 0u);
        const pgrt_buf *ws = ch.split > 1 ? workspace : c;
        pgrt_arg args[9] = {pgrt_arg_buf(a),    pgrt_arg_buf(b),    pgrt_arg_buf(c),
                            pgrt_arg_buf(bias ? bias : c), pgrt_arg_buf(ws),
                            pgrt_arg_u32(m),    pgrt_arg_u32(n),    pgrt_arg_u32(k),
                            pgrt_arg_u32(flags)};
        rc = pgrt_kernel_launch(kern, s, &ch.knobs, args, 9);
        if (rc == 0 && ch.split > 1) {
            pgrt_kernel *red = plan.red;
            pgrt_arg rargs[7] = {pgrt_arg_buf(workspace),
                                 pgrt_arg_buf(c),
                                 pgrt_arg_buf(bias ? bias : c),
                                 pgrt_arg_u32((uint32_t)(rows * cols)),
                                 pgrt_arg_u32((uint32_t)cols),
                                 pgrt_arg_u32(ch.split),
                                 pgrt_arg_u32(flags)};
            rc = pgrt_kernel_launch(red, s, &ch.reduce_knobs, rargs, 7);
        }
    }
    if (rc == 0 && used)
        *used = ch;
    return rc;
}
