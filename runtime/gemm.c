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
