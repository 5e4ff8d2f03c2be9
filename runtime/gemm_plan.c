/* SPDX-License-Identifier: MIT */
/*
 * Prepared GEMMs (pgrt.h, pgrt_gemm_plan): one product of a linear layer
 * chosen, loaded and tensor-mapped at create, launched on device
 * addresses with nothing but the driver call.
 *
 * The GEMM families take three parameter lists (kernels/gemm_*.c), told
 * apart by the chosen descriptor's own parameter list, never its name:
 *
 *   plain  a, b, c, m, n, k                     the seed's f32 kernels
 *   flags  a, b, c, bias, ws, m, n, k, flags    mma.sync, warp-tiled f32,
 *          (+ gemm_mma_reduce over a split)     gemm_thin, gemm_lp_simt
 *   maps   map_a, map_b, c, bias, P, Q, R, ldc,  gemm_sm90 (wgmma + TMA)
 *          map_a2, map_b2, k2
 */
#include "rt_internal.h"

#include <stdlib.h>
#include <string.h>

/* Sizes: the chooser's 2^21, gemm_sm90's own 2^24 when asked for by kind. */
#define PLAN_MAX_DIM (1u << 21)
#define PLAN_MAX_DIM_WG (1u << 24)

static rt_gemm_abi abi_of(const pgk_desc *d)
{
    if (d->nparams > 0 && d->params[0].tensor_map)
        return RT_GEMM_ABI_MAPS;
    return d->nparams == 6 ? RT_GEMM_ABI_PLAIN : RT_GEMM_ABI_FLAGS;
}

/* A pitch of 0 is the row length. */
static uint32_t pitch(uint32_t ld, uint32_t cols) { return ld ? ld : cols; }

/* The stored row lengths of a, b and c for the layout (layer words). */
static void stored_cols(const pgrt_gemm_spec *g, uint32_t *a, uint32_t *b, uint32_t *c)
{
    *a = g->layout == PGK_GEMM_FORWARD ? g->k : g->n;
    *b = g->k;
    *c = g->layout == PGK_GEMM_FORWARD ? g->n : g->k;
}

static int check_spec(const pgrt_gemm_spec *g)
{
    static const char fn[] = "pgrt_gemm_plan_create";
    if ((unsigned)g->layout >= PGK_GEMM_LAYOUTS)
        return rt_fail(PGRT_EINVAL, "%s: layout %d is not a pgk_gemm_layout", fn,
                       (int)g->layout);
    if ((unsigned)g->kind > PGRT_GEMM_WGMMA)
        return rt_fail(PGRT_EINVAL, "%s: kind %d is not a pgrt_gemm_kind", fn, (int)g->kind);
    uint32_t max = g->kind == PGRT_GEMM_WGMMA ? PLAN_MAX_DIM_WG : PLAN_MAX_DIM;
    if (!g->m || !g->n || !g->k || g->m > max || g->n > max || g->k > max || g->k2 > max)
        return rt_fail(PGRT_ERANGE, "%s: m=%u n=%u k=%u k2=%u: m, n, k must be in [1, 2^%d], "
                       "k2 at most that", fn, g->m, g->n, g->k, g->k2,
                       max == PLAN_MAX_DIM ? 21 : 24);
    if (!g->a || !g->b)
        return rt_fail(PGRT_EINVAL, "%s: operand %s is 0", fn, !g->a ? "a" : "b");
    bool f32 = g->in_type == PG_F32, half = g->in_type == PG_BF16 || g->in_type == PG_F16;
    if (!f32 && !half)
        return rt_fail(PGRT_EINVAL, "%s: inputs of %s; f32, bf16 or f16", fn,
                       pg_type_name(g->in_type) ? pg_type_name(g->in_type) : "an unknown type");
    bool out16 = g->out_type == PG_BF16 || g->out_type == PG_F16;
    if (f32 ? g->out_type != PG_F32 : g->out_type != PG_F32 && !out16)
        return rt_fail(PGRT_EINVAL, "%s: no GEMM for layout %d with %s inputs and %s output (f16 "
                       "or bf16 in with f32, f16 or bf16 out; or f32 throughout)", fn,
                       (int)g->layout, pg_type_name(g->in_type),
                       pg_type_name(g->out_type) ? pg_type_name(g->out_type) : "unknown");
    if ((g->kind == PGRT_GEMM_WGMMA || g->k2) && out16 && g->out_type != g->in_type)
        return rt_fail(PGRT_EINVAL, "%s: gemm_sm90 writes f32 or its inputs' type, not %s from "
                       "%s", fn, pg_type_name(g->out_type), pg_type_name(g->in_type));
    if (g->kind == PGRT_GEMM_SEED && !f32)
        return rt_fail(PGRT_EINVAL, "%s: the seed's kernels are f32", fn);
    if (g->kind == PGRT_GEMM_WGMMA && f32)
        return rt_fail(PGRT_EINVAL, "%s: gemm_sm90 takes bf16 or f16 inputs", fn);
    uint32_t ca, cb, cc;
    stored_cols(g, &ca, &cb, &cc);
    if ((g->lda && g->lda < ca) || (g->ldb && g->ldb < cb) || (g->ldc && g->ldc < cc))
        return rt_fail(PGRT_ERANGE, "%s: a pitch (lda %u, ldb %u, ldc %u) is below its row "
                       "length (%u, %u, %u)", fn, g->lda, g->ldb, g->ldc, ca, cb, cc);
    if (g->k2) {
        if (half == false || g->layout == PGK_GEMM_BACKWARD_W)
            return rt_fail(PGRT_EINVAL, "%s: a LoRA extension (k2 = %u) needs 16-bit inputs and "
                           "the forward or dX layout", fn, g->k2);
        if (!g->a2 || !g->b2)
            return rt_fail(PGRT_EINVAL, "%s: k2 = %u with operand %s 0", fn, g->k2,
                           !g->a2 ? "a2" : "b2");
        uint32_t cb2 = g->layout == PGK_GEMM_FORWARD ? g->k2 : g->k;
        if ((g->lda2 && g->lda2 < g->k2) || (g->ldb2 && g->ldb2 < cb2))
            return rt_fail(PGRT_ERANGE, "%s: a2's or b2's pitch (%u, %u) is below its row "
                           "length (%u, %u)", fn, g->lda2, g->ldb2, g->k2, cb2);
    }
    if (g->bn && (g->bn % 64 || g->bn > 256))
        return rt_fail(PGRT_ERANGE, "%s: bn=%u is not 64, 128, 192 or 256", fn, g->bn);
    if (g->split > 16)
        return rt_fail(PGRT_ERANGE, "%s: split=%u: gemm_sm90 takes 1 to 16 slices (0: chosen)",
                       fn, g->split);
    return 0;
}

/* Whether gemm_sm90's TMA can read the operands: 16-byte aligned bases
 * and pitches of whole 16 bytes. */
static bool tma_ok(const pgrt_gemm_spec *g)
{
    uint32_t ca, cb, cc;
    stored_cols(g, &ca, &cb, &cc);
    uint64_t bits = g->a | g->b | pitch(g->lda, ca) | pitch(g->ldb, cb);
    if (g->k2) {
        uint32_t cb2 = g->layout == PGK_GEMM_FORWARD ? g->k2 : g->k;
        bits |= g->a2 | g->b2 | pitch(g->lda2, g->k2) | pitch(g->ldb2, cb2);
    }
    /* addresses to 16 bytes, pitches (elements of 2 bytes) to 8 */
    return ((g->a | g->b | g->a2 | g->b2) & 15u) == 0 && (bits & 7u) == 0;
}

/* Only gemm_sm90 takes pitches other than the row lengths. */
static int dense_only(const pgrt_gemm_spec *g, const pgk_gemm_choice *ch)
{
    uint32_t ca, cb, cc;
    stored_cols(g, &ca, &cb, &cc);
    if (pitch(g->lda, ca) != ca || pitch(g->ldb, cb) != cb || pitch(g->ldc, cc) != cc)
        return rt_fail(PGRT_EINVAL, "pgrt_gemm_plan_create: %s takes dense operands only; "
                       "pitches need gemm_sm90", ch->desc->name);
    return 0;
}

static int choose(pgrt_ctx *ctx, const pgrt_gemm_spec *g, pgk_gemm_choice *ch)
{
    static const char fn[] = "pgrt_gemm_plan_create";
    unsigned sms = ctx->info.sm_count > 0 ? (unsigned)ctx->info.sm_count : 0;
    bool wg_device = ctx->info.arch_target == PG_SM_90A;
    int rc;
    if (g->kind == PGRT_GEMM_SEED) {
        rc = pgk_gemm_seed_choice(g->layout, g->accumulate, g->m, g->n, g->k, ch);
        if (rc)
            return rt_fail(rc == PG_ERANGE ? PGRT_ERANGE : PGRT_EINVAL,
                           "%s: the seed's f32 kernels have no %s for m=%u n=%u k=%u", fn,
                           g->accumulate ? "accumulating product of this layout" : "such shape",
                           g->m, g->n, g->k);
        /* their plain parameter list has no bias and no pitches */
        if (g->bias)
            return rt_fail(PGRT_EINVAL, "%s: the seed's f32 kernels take no bias", fn);
        return dense_only(g, ch);
    }
    /* asked for by kind, gemm_sm90 takes any operands and the maps'
     * encoding refuses misaligned ones by name */
    bool want_wg = wg_device && (g->kind == PGRT_GEMM_WGMMA || ((g->k2 || g->bn) && tma_ok(g)));
    if (want_wg) {
        uint32_t P = g->layout == PGK_GEMM_BACKWARD_W ? g->n : g->m;
        uint32_t Q = g->layout == PGK_GEMM_FORWARD ? g->n : g->k;
        uint32_t R = g->layout == PGK_GEMM_FORWARD      ? g->k
                     : g->layout == PGK_GEMM_BACKWARD_X ? g->n
                                                        : g->m;
        rc = pgk_gemm_sm90_choice(g->layout, g->in_type, g->out_type, P, Q, R, sms, ch);
    } else {
        pg_target t = wg_device && !tma_ok(g) ? ctx->info.target : ctx->info.arch_target;
        rc = pgk_gemm_choose(g->layout, g->in_type, g->out_type, g->m, g->n, g->k, t, sms, ch);
        if (rc == 0 && abi_of(ch->desc) == RT_GEMM_ABI_MAPS && !tma_ok(g))
            rc = pgk_gemm_choose(g->layout, g->in_type, g->out_type, g->m, g->n, g->k,
                                 ctx->info.target, sms, ch);
    }
    if (rc == PG_ERANGE)
        return rt_fail(PGRT_ERANGE, "%s: no GEMM for m=%u n=%u k=%u on this device", fn, g->m,
                       g->n, g->k);
    if (rc)
        return rt_fail(PGRT_EINVAL, "%s: no GEMM for layout %d with %s inputs and a %s output",
                       fn, (int)g->layout, pg_type_name(g->in_type),
                       pg_type_name(g->out_type));
    rt_gemm_abi abi = abi_of(ch->desc);
    if (g->in_type == PG_F32 && abi == RT_GEMM_ABI_PLAIN &&
        (g->bias || (g->accumulate && g->layout != PGK_GEMM_FORWARD))) {
        /* the small f32 tiles take no bias, and accumulate forward only:
         * the warp-tiled family takes both */
        if (pgk_gemm_f32_choose(g->layout, g->m, g->n, g->k, ctx->info.arch_target, sms, ch))
            return rt_fail(PGRT_EKERNEL, "%s: no f32 GEMM with a bias or accumulate for m=%u "
                           "n=%u k=%u", fn, g->m, g->n, g->k);
    } else if (g->in_type == PG_F32 && abi == RT_GEMM_ABI_PLAIN && g->accumulate) {
        if (pgk_gemm_seed_choice(g->layout, true, g->m, g->n, g->k, ch))
            return rt_fail(PGRT_EKERNEL, "%s: no accumulating f32 GEMM for m=%u n=%u k=%u", fn,
                           g->m, g->n, g->k);
    }
    abi = abi_of(ch->desc);
    if (g->k2 && abi != RT_GEMM_ABI_MAPS)
        return rt_fail(PGRT_EINVAL, "%s: a LoRA extension needs gemm_sm90 (an sm_90a device, "
                       "TMA-aligned operands); this product runs %s", fn, ch->desc->name);
    return abi == RT_GEMM_ABI_MAPS ? 0 : dense_only(g, ch);
}

/* gemm_sm90's knobs from the spec: the epilogue (accumulate, bias) is
 * baked into its module, bn where the spec sets it. */
static int set_wg_knobs(const pgrt_gemm_spec *g, pgk_gemm_choice *ch)
{
    int ei = pgk_knob_index(ch->desc, "epilogue"), bi = pgk_knob_index(ch->desc, "bn");
    if (ei < 0 || bi < 0)
        return rt_fail(PGRT_EKERNEL, "pgrt_gemm_plan_create: %s has no knob %s", ch->desc->name,
                       ei < 0 ? "epilogue" : "bn");
    ch->knobs.v[ei] = (g->accumulate ? 1u : 0u) | (g->bias ? 2u : 0u);
    if (g->bn)
        ch->knobs.v[bi] = g->bn;
    int si = pgk_knob_index(ch->desc, "split");
    if (g->split && si >= 0)
        ch->knobs.v[si] = g->split;
    return 0;
}

/* gemm_sm90's two maps for layout `layout` (P, Q, R as the kernel takes
 * them, from the layer's m, n, k; pgrt_gemm_sm90's table), inputs of type
 * in at a and b with row pitches lda, ldb elements, tile width bn. An
 * operand with r along its rows ("K-major") is mapped in boxes of 64
 * columns by 128 rows (A) or bn rows (B); one with p or q along its rows in
 * boxes of 64 by 64, which the kernel lays side by side. Every box is
 * 128-byte swizzled: its rows are exactly 128 bytes. */
static int wg_maps(pgrt_ctx *ctx, unsigned layout, pg_type in, pgrt_devptr a, pgrt_devptr b,
                   uint32_t m, uint32_t n, uint32_t k, uint32_t lda, uint32_t ldb, uint32_t bn,
                   pgrt_tensor_map *ma, pgrt_tensor_map *mb)
{
    /* K-major A in 128 x 64 boxes, K-major B in bn x 64, the others in
     * 64 x 64 */
    uint32_t a_rows = m, a_cols = layout == PGK_GEMM_FORWARD ? k : n;
    uint32_t b_rows = layout == PGK_GEMM_BACKWARD_W ? m : n, b_cols = k;
    bool a_mn = layout == PGK_GEMM_BACKWARD_W, b_mn = layout != PGK_GEMM_FORWARD;
    int rc = pgrt_tensor_map_encode_2d(ctx, ma, in, a, a_rows, a_cols, (uint64_t)lda * 2,
                                       a_mn ? 64 : 128, 64, 128);
    if (rc == 0)
        rc = pgrt_tensor_map_encode_2d(ctx, mb, in, b, b_rows, b_cols, (uint64_t)ldb * 2,
                                       b_mn ? 64 : bn, 64, 128);
    return rc;
}

static int encode_maps(pgrt_ctx *ctx, pgrt_gemm_plan *p)
{
    const pgrt_gemm_spec *g = &p->spec;
    int bi = pgk_knob_index(p->ch.desc, "bn");
    uint32_t bn = bi >= 0 ? p->ch.knobs.v[bi] : 64, ca, cb, cc;
    stored_cols(g, &ca, &cb, &cc);
    int rc = wg_maps(ctx, g->layout, g->in_type, g->a, g->b, g->m, g->n, g->k, pitch(g->lda, ca),
                     pitch(g->ldb, cb), bn, &p->maps[0], &p->maps[1]);
    if (rc)
        return rc;
    if (!g->k2) {
        /* never read (k2 = 0), but a launch passes encoded maps */
        p->maps[2] = p->maps[0];
        p->maps[3] = p->maps[1];
        return 0;
    }
    /* the extension as a product of its own: forward (m, n, k2), dX
     * (m, k2, k): a2 [m, k2] K-major, b2 [n, k2] or [k2, k] */
    bool fwd = g->layout == PGK_GEMM_FORWARD;
    uint32_t n2 = fwd ? g->n : g->k2, k2 = fwd ? g->k2 : g->k;
    return wg_maps(ctx, g->layout, g->in_type, g->a2, g->b2, g->m, n2, k2, pitch(g->lda2, g->k2),
                   pitch(g->ldb2, k2), bn, &p->maps[2], &p->maps[3]);
}

/* gemm_sm90's split: off when the spec says so, else its workspace for
 * the tile width that runs and its zeroed counters. */
static int wg_split(pgrt_ctx *ctx, pgrt_gemm_plan *p)
{
    int si = pgk_knob_index(p->ch.desc, "split"), bi = pgk_knob_index(p->ch.desc, "bn");
    if (si < 0 || bi < 0)
        return rt_fail(PGRT_EKERNEL, "pgrt_gemm_plan_create: %s has no knob split or bn",
                       p->ch.desc->name);
    if (p->spec.no_split || p->ch.knobs.v[si] <= 1) {
        p->ch.knobs.v[si] = 1;
        p->ch.split = 1;
        p->ch.workspace_bytes = 0;
        return 0;
    }
    uint32_t P = p->ch.m, Q = p->ch.n, bn = p->ch.knobs.v[bi];
    p->ch.split = p->ch.knobs.v[si];
    p->ch.workspace_bytes = pgk_gemm_sm90_workspace(P, Q, bn, p->ch.split);
    size_t tiles = (size_t)((P + 127u) / 128u) * ((Q + bn - 1) / bn);
    int rc = pgrt_buf_alloc(ctx, PG_U32, tiles, &p->counters);
    if (!rc && (rc = pgrt_buf_memset(p->counters, 0)))
        pgrt_buf_destroy(&p->counters);
    return rc;
}

int rt_gemm_plan_init(pgrt_ctx *ctx, const pgrt_gemm_spec *spec, CUstream check,
                      pgrt_gemm_plan *p)
{
    memset(p, 0, sizeof *p);
    int rc = check_spec(spec);
    if (rc)
        return rc;
    p->ctx = ctx;
    p->spec = *spec;
    if ((rc = choose(ctx, spec, &p->ch)))
        return rc;
    p->abi = abi_of(p->ch.desc);
    if (p->abi == RT_GEMM_ABI_MAPS && ((rc = set_wg_knobs(spec, &p->ch)) ||
                                       (rc = encode_maps(ctx, p)) || (rc = wg_split(ctx, p))))
        return rc;
    uint32_t ca, cb, cc;
    stored_cols(spec, &ca, &cb, &cc);
    p->out_cols = cc;
    p->out_rows = spec->layout == PGK_GEMM_BACKWARD_W ? spec->n : spec->m;
    if ((rc = rt_kernel_get(ctx, p->ch.desc, &p->ch.knobs, check, &p->kern)))
        return rc;
    char err[512] = "";
    if ((rc = pgk_launch_for(p->ch.desc, &p->ch.knobs, &p->cfg, err, sizeof err)))
        return rt_fail(PGRT_EARGS, "pgrt_gemm_plan_create: %s: no launch for these knobs: %s",
                       p->ch.desc->name, err[0] ? err : pg_strerror(rc));
    if (p->ch.split > 1 && p->abi != RT_GEMM_ABI_MAPS) {
        /* the same tile unsplit, for a launch without a workspace */
        int si = pgk_knob_index(p->ch.desc, "split");
        if (si < 0 || !p->ch.reduce)
            return rt_fail(PGRT_EKERNEL, "pgrt_gemm_plan_create: %s splits without a split "
                           "knob or a reduce", p->ch.desc->name);
        p->unsplit = p->ch.knobs;
        p->unsplit.v[si] = 1;
        if ((rc = pgk_launch_for(p->ch.desc, &p->unsplit, &p->cfg_unsplit, err, sizeof err)) ||
            (rc = pgk_launch_for(p->ch.reduce, &p->ch.reduce_knobs, &p->cfg_red, err,
                                 sizeof err)))
            return rt_fail(PGRT_EARGS, "pgrt_gemm_plan_create: no launch for the split: %s",
                           err[0] ? err : pg_strerror(rc));
        if ((rc = rt_kernel_get(ctx, p->ch.reduce, &p->ch.reduce_knobs, check, &p->red)))
            return rc;
    }
    return 0;
}

int pgrt_gemm_plan_create(pgrt_ctx *ctx, const pgrt_gemm_spec *spec, pgrt_gemm_plan **out)
{
    if (out)
        *out = NULL;
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, spec, "spec");
    RT_NONNULL(__func__, out, "out");
    /* 64-byte aligned, as the tensor maps in it must be */
    pgrt_gemm_plan *p = aligned_alloc(64, (sizeof *p + 63) & ~(size_t)63);
    if (!p)
        return rt_fail(PGRT_ENOMEM, "pgrt_gemm_plan_create: out of host memory");
    int rc = rt_gemm_plan_init(ctx, spec, NULL, p);
    if (rc) {
        rt_gemm_plan_release(p);
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int pgrt_gemm_plan_launch(const pgrt_gemm_plan *p, pgrt_stream *s, pgrt_devptr c,
                          pgrt_devptr bias, pgrt_devptr ws)
{
    RT_NONNULL(__func__, p, "the plan");
    if (!c)
        return rt_fail(PGRT_EINVAL, "pgrt_gemm_plan_launch: %s: c is 0", p->ch.desc->name);
    if (p->spec.bias != (bias != 0))
        return rt_fail(PGRT_EINVAL, "pgrt_gemm_plan_launch: %s: the plan was made %s a bias",
                       p->ch.desc->name, p->spec.bias ? "with" : "without");
    const pgrt_gemm_spec *g = &p->spec;
    const pgk_gemm_choice *ch = &p->ch;
    switch (p->abi) {
    case RT_GEMM_ABI_MAPS: {
        if (ch->split > 1 && !ws)
            return rt_fail(PGRT_EINVAL, "pgrt_gemm_plan_launch: gemm_sm90 split %u ways needs its "
                           "workspace of %llu bytes", ch->split,
                           (unsigned long long)ch->workspace_bytes);
        pgrt_arg a[13] = {
            pgrt_arg_tensor_map(&p->maps[0]), pgrt_arg_tensor_map(&p->maps[1]),
            pgrt_arg_ptr(c), pgrt_arg_u64(bias), pgrt_arg_u32(ch->m), pgrt_arg_u32(ch->n),
            pgrt_arg_u32(ch->k), pgrt_arg_u32(pitch(g->ldc, p->out_cols)),
            pgrt_arg_tensor_map(&p->maps[2]), pgrt_arg_tensor_map(&p->maps[3]),
            pgrt_arg_u32(g->k2), pgrt_arg_u64(ch->split > 1 ? ws : 0),
            pgrt_arg_u64(p->counters ? pgrt_buf_ptr(p->counters) : 0),
        };
        return rt_kernel_launch_cfg(p->kern, s, &p->cfg, NULL, a, 13);
    }
    case RT_GEMM_ABI_PLAIN: {
        pgrt_arg a[6] = {pgrt_arg_ptr(g->a),  pgrt_arg_ptr(g->b),  pgrt_arg_ptr(c),
                         pgrt_arg_u32(ch->m), pgrt_arg_u32(ch->n), pgrt_arg_u32(ch->k)};
        return rt_kernel_launch_cfg(p->kern, s, &p->cfg, NULL, a, 6);
    }
    default: {
        bool split = ch->split > 1 && ws;
        uint32_t flags = (g->accumulate ? 1u : 0u) | (g->bias ? 2u : 0u);
        pgrt_devptr bp = bias ? bias : c;
        pgrt_arg a[9] = {pgrt_arg_ptr(g->a),    pgrt_arg_ptr(g->b),    pgrt_arg_ptr(c),
                         pgrt_arg_ptr(bp),      pgrt_arg_ptr(split ? ws : c),
                         pgrt_arg_u32(g->m),    pgrt_arg_u32(g->n),    pgrt_arg_u32(g->k),
                         pgrt_arg_u32(flags)};
        int rc = rt_kernel_launch_cfg(p->kern, s, split || ch->split <= 1 ? &p->cfg
                                                                          : &p->cfg_unsplit,
                                      NULL, a, 9);
        if (rc || !split)
            return rc;
        uint64_t total = (uint64_t)p->out_rows * p->out_cols;
        pgrt_arg r[7] = {pgrt_arg_ptr(ws),          pgrt_arg_ptr(c),
                         pgrt_arg_ptr(bp),          pgrt_arg_u32((uint32_t)total),
                         pgrt_arg_u32(p->out_cols), pgrt_arg_u32(ch->split),
                         pgrt_arg_u32(flags)};
        return rt_kernel_launch_cfg(p->red, s, &p->cfg_red, NULL, r, 7);
    }
    }
}

uint64_t pgrt_gemm_plan_workspace(const pgrt_gemm_plan *p)
{
    return p && p->ch.split > 1 ? p->ch.workspace_bytes : 0;
}

const pgk_gemm_choice *pgrt_gemm_plan_choice(const pgrt_gemm_plan *p) { return p ? &p->ch : NULL; }

void rt_gemm_plan_release(pgrt_gemm_plan *p)
{
    pgrt_buf_destroy(&p->counters); /* the kernels belong to the context's cache */
}

void pgrt_gemm_plan_destroy(pgrt_gemm_plan **p)
{
    if (!p || !*p)
        return;
    rt_gemm_plan_release(*p);
    free(*p);
    *p = NULL;
}
