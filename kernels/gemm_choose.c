/* SPDX-License-Identifier: MIT */
/*
 * pgk_gemm_choose(): the kernel, tile and split of a GEMM shape, by a
 * cost model of the mma.sync kernels of gemm_mma.c (and measured bests on
 * sm_90), gemm_thin for shapes with a side of at most 64 where it wins
 * (thin_choice);
 * pgk_gemm_describe(), its inverse for a descriptor and knobs.
 */
#include "gemm_mma.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- the choice per shape */

/* A cost model of the mma.sync kernels, to rank the candidates (tile,
 * split) of one shape. A tile's SM rate is thr (relative) with occ blocks
 * resident; with b < occ blocks on an SM it gets b/occ of it. A block does
 * its k-tiles plus COST_FIXED_KTILES of prologue and epilogue; blocks run
 * in waves of sm_count·min(occ, blocks per SM), a partial wave costing a
 * whole one. A wave also moves its operand tiles (mostly L2 hits) and
 * writes its outputs (HBM): it takes the longer of the two. Split-K adds
 * the partials' traffic and a launch of gemm_mma_reduce.
 *
 * Where the numbers come from: occ is each tile's register and shared
 * memory limit on sm_90 (ptxas -v). thr and the COST_ constants were
 * fitted (a random search maximizing the geometric mean of picked / best
 * throughput) to `bench_gemm --sweep` on an H200: every tile and split of
 * the benchmark's 27 shapes and layouts, bf16 in and out. The model's
 * picks reach 0.97 of the best measured configuration on average, 0.87
 * at worst; near those shapes on sm_90, measured_best below gives the
 * measured best itself. Other GPUs use the same model, less the tiles
 * whose shared memory they lack. */
typedef struct tile_model {
    double thr;   /* SM throughput with occ blocks resident, relative */
    unsigned occ; /* blocks an SM holds at once */
} tile_model;

static const tile_model tile_models[PGK_GEMM_TILES] = {
    [PGK_GEMM_TILE_128x128_W4] = {0.688, 2},
    [PGK_GEMM_TILE_128x128_W8] = {0.465, 2},
    [PGK_GEMM_TILE_128x256_W8] = {0.373, 1},
    [PGK_GEMM_TILE_256x128_W8] = {0.553, 1},
    [PGK_GEMM_TILE_128x64_W4] = {0.362, 3},
    [PGK_GEMM_TILE_64x128_W4] = {0.699, 3},
    [PGK_GEMM_TILE_64x64_W4] = {1.160, 6},
    [PGK_GEMM_TILE_128x256_W8_K64] = {0.300, 1},
    [PGK_GEMM_TILE_256x128_W8_K64] = {0.635, 1},
    [PGK_GEMM_TILE_128x128_W4_K64] = {0.371, 2},
    [PGK_GEMM_TILE_128x128_W4_K64_DB] = {0.882, 2},
    [PGK_GEMM_TILE_64x128_W4_K64_DB] = {0.430, 3},
    [PGK_GEMM_TILE_128x64_W4_K64_DB] = {0.378, 3},
    [PGK_GEMM_TILE_128x128_W4_DB] = {0.627, 2},
};

/* Fitted with the rates above (the occupancies are the register and
 * shared-memory limits on sm_90, not fitted). */
#define COST_HBM_BYTE 2.537
#define COST_L2_BYTE 0.351
#define COST_LAUNCH 2.115e7
#define COST_FIXED_KTILES 0.0

/* The measured best (tile, split) of each shape and layout of bench_gemm
 * --sweep on an H200 (bf16 in and out), used on sm_90 devices for shapes
 * within a factor 1.5 of one of them in each of P, Q and R; the model
 * above covers the rest. */
static const pgk_gemm_measured measured_best[] = {
    /* Qwen2-1.5B at 2048 tokens: q/o, k/v, gate/up, down, LM head */
    {0, 5, 1, 2048, 1536, 1536},  {1, 5, 1, 2048, 1536, 1536},  {2, 11, 1, 1536, 1536, 2048},
    {0, 11, 2, 2048, 256, 1536},  {1, 6, 1, 2048, 1536, 256},   {2, 11, 2, 256, 1536, 2048},
    {0, 10, 1, 2048, 8960, 1536}, {1, 13, 2, 2048, 1536, 8960}, {2, 10, 1, 8960, 1536, 2048},
    {0, 10, 2, 2048, 1536, 8960}, {1, 10, 1, 2048, 8960, 1536}, {2, 10, 1, 1536, 8960, 2048},
    {0, 9, 1, 2048, 151936, 1536}, {1, 0, 4, 2048, 1536, 151936},
    {2, 10, 1, 151936, 1536, 2048},
    /* LoRA rank 16: (2048, 16, 1536) and (2048, 1536, 16) */
    {0, 6, 4, 2048, 16, 1536},    {1, 6, 1, 2048, 1536, 16},    {2, 6, 4, 16, 1536, 2048},
    {0, 6, 1, 2048, 1536, 16},    {1, 6, 4, 2048, 16, 1536},    {2, 6, 8, 1536, 16, 2048},
    /* 4096^3, 8192^3 */
    {0, 9, 1, 4096, 4096, 4096},  {1, 9, 1, 4096, 4096, 4096},  {2, 9, 1, 4096, 4096, 4096},
    {0, 9, 1, 8192, 8192, 8192},  {1, 9, 1, 8192, 8192, 8192},  {2, 9, 1, 8192, 8192, 8192},
};

/* |log2(a / b)| */
static double log_ratio(uint32_t a, uint32_t b) { return fabs(log2((double)a / b)); }

const pgk_gemm_measured *pgk_gemm_nearest(const pgk_gemm_measured *table, size_t n,
                                          unsigned layout, uint32_t P, uint32_t Q, uint32_t R)
{
    const pgk_gemm_measured *best = NULL;
    double bd = 0;
    for (size_t i = 0; i < n; i++) {
        const pgk_gemm_measured *e = &table[i];
        double dp = log_ratio(P, e->P), dq = log_ratio(Q, e->Q), dr = log_ratio(R, e->R);
        const double lim = 0.585; /* log2(1.5) */
        if (e->layout != layout || dp > lim || dq > lim || dr > lim)
            continue;
        if (!best || dp + dq + dr < bd) {
            best = e;
            bd = dp + dq + dr;
        }
    }
    return best;
}

static double mma_cost(const mma_cfg *c, const tile_model *tm, uint32_t P, uint32_t Q,
                       uint32_t R, uint32_t split, unsigned sms, unsigned out_bytes)
{
    double blocks = (double)pgk_ceil_div(P, c->bm) * pgk_ceil_div(Q, c->bn) * split;
    double bps = ceil(blocks / sms);
    if (bps > tm->occ)
        bps = tm->occ;
    double waves = ceil(blocks / (sms * bps));
    double ktiles = ceil((double)pgk_ceil_div(R, c->bk) / split) + COST_FIXED_KTILES;
    double flops = (double)c->bm * c->bn * c->bk * 2.0 * ktiles;
    double compute = flops * tm->occ / tm->thr; /* one block at its share of the SM */
    double in_bytes = (double)(c->bm + c->bn) * c->bk * 2.0 * ktiles;
    double out_b = (double)c->bm * c->bn * (split > 1 ? 4.0 : out_bytes);
    double mem = (in_bytes * COST_L2_BYTE + out_b * COST_HBM_BYTE) * sms * bps;
    double t = waves * (compute > mem ? compute : mem);
    if (split > 1)
        t += COST_LAUNCH + (double)P * Q * (4.0 * split + out_bytes) * COST_HBM_BYTE;
    return t;
}

static unsigned default_sms(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 ? 108 : sm == 86 ? 84 : sm == 87 ? 16 : sm == 89 ? 128 : sm == 90 ? 132
           : sm >= 120 ? 84 : 132;
}

/* Shared memory a block may opt in to on the target's devices: sm_80 and
 * sm_87 (A100, Orin) 163 KiB, sm_90 and sm_100 227 KiB, the others
 * (sm_86, sm_89, sm_120: GeForce-class) 99 KiB. */
static uint32_t smem_limit(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 || sm == 87 ? 163u * 1024 : sm == 90 || sm == 100 ? 227u * 1024 : 99u * 1024;
}

/* fp32 shapes with every side 64 or more run the warp-tiled family
 * (gemm_f32_tiled.c), which has every layout, accumulate, bias and
 * split-K; thinner ones the kernels of gemm_f32.c. */
static bool f32_tiled_shape(uint32_t m, uint32_t n, uint32_t k)
{
    return m >= 64 && n >= 64 && k >= 64;
}

static int out_knob(pg_type t) { return t == PG_F32 ? OUT_F32 : t == PG_F16 ? OUT_F16 : OUT_BF16; }

/* ---------------------------------------------------------------- thin shapes */

/* The thin side's bound: LoRA ranks are 8 to 64. */
#define THIN_MAX 64u
/* Multiply-adds up to which gemm_thin's f32 FMA is the pick (a LoRA rank-16
 * product of Qwen2-1.5B at 2048 tokens is 5·10^7): above them the tensor
 * cores (or the f32 kernels' tiles) win even on a thin shape. */
#define THIN_MAX_FMA_16 (1ull << 28)
#define THIN_MAX_FMA_32 (1ull << 30)

/* gemm_thin for a shape with a side of at most THIN_MAX (sm_70 and up),
 * where it was measured to win: one launch, no workspace. bench_gemm
 * --lora on an H200 (ours/cuBLAS, the LoRA rank-16 products of Qwen2-1.5B
 * at 2048 tokens, cuBLAS ~6.9 us):
 *
 *   f32 inputs, every form: 1.83 1.33 1.40 1.27 0.49 1.24 (lora_a fwd,
 *     dX, dW; lora_b fwd, dX, dW), against 0.29-0.45 (1.22 for lora_b
 *     fwd) for the f32 kernels;
 *   16-bit inputs, the outer form (R thin: lora_a dX, lora_b fwd): 1.05
 *     and 1.03, against 0.82 and 0.74 for mma.sync with split-K;
 *   16-bit inputs, the narrow forms on f32 FMA: 0.38-0.66, below
 *     mma.sync's split-K (0.82-0.93); on mma.sync (forms 3 and 4, the
 *     r-major operands loaded a pair a register), in TFLOP/s against
 *     split-K's: lora_a fwd 12.8 / 12.5, lora_a dW 14.4 / 8.3, lora_b dX
 *     16.0 / 11.0, lora_b dW 14.7 / 11.6 (cuBLAS 12.3-14.1): forms 3 and 4.
 *
 * False where it is not the choice. */
static bool thin_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                        uint32_t n, uint32_t k, pg_target target, pgk_gemm_choice *out)
{
    uint32_t P, Q, R;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    uint32_t t = P < Q ? P : Q;
    t = R < t ? R : t;
    uint64_t fma = (uint64_t)P * Q * R;
    if (t > THIN_MAX || pg_target_sm(target) < 70 ||
        fma > (in_type == PG_F32 ? THIN_MAX_FMA_32 : THIN_MAX_FMA_16))
        return false;
    uint32_t form, j;
    pgk_gemm_thin_form(layout, m, n, k, &form, &j);
    if (in_type != PG_F32 && form != TH_FORM_OUTER && pg_target_sm(target) >= 80)
        form = form == TH_FORM_Q ? TH_FORM_MMA_Q : TH_FORM_MMA_P; /* on the tensor cores */
    out->desc = &pgk_desc_gemm_thin;
    out->tile = 0;
    out->split = 1;
    out->m = m;
    out->n = n;
    out->k = k;
    pgk_knobs_default(out->desc, &out->knobs);
    out->knobs.v[TH_M] = m;
    out->knobs.v[TH_N] = n;
    out->knobs.v[TH_K] = k;
    out->knobs.v[TH_LAYOUT] = layout;
    out->knobs.v[TH_IN] = in_type == PG_F32 ? TH_IN_F32 : in_type == PG_BF16 ? IN_BF16 : IN_F16;
    out->knobs.v[TH_OUT] = (uint32_t)out_knob(out_type);
    out->knobs.v[TH_FORM] = form;
    out->knobs.v[TH_J] = j;
    return true;
}

int pgk_gemm_choice_init(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                         pg_target target, pgk_gemm_choice *out)
{
    if (!out)
        return PG_EINVAL;
    memset(out, 0, sizeof *out);
    if ((unsigned)layout >= PGK_GEMM_LAYOUTS || !pg_target_name(target))
        return PG_EINVAL;
    if (!m || !n || !k || m > MM_MAX_DIM || n > MM_MAX_DIM || k > MM_MAX_DIM)
        return PG_ERANGE;
    return PG_OK;
}

int pgk_gemm_choose(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                    uint32_t n, uint32_t k, pg_target target, unsigned sm_count,
                    pgk_gemm_choice *out)
{
    int rc = pgk_gemm_choice_init(layout, m, n, k, target, out);
    if (rc)
        return rc;
    bool f32 = in_type == PG_F32;
    if (f32 ? out_type != PG_F32
            : (in_type != PG_F16 && in_type != PG_BF16) ||
                  (out_type != PG_F32 && out_type != PG_F16 && out_type != PG_BF16))
        return PG_EINVAL;
    /* a LoRA rank as a side: gemm_thin where it was measured to win,
     * before the f32 tiles (a rank of 64 is a side of 64 to them too) */
    if (thin_choice(layout, in_type, out_type, m, n, k, target, out))
        return PG_OK;
    if (f32 && f32_tiled_shape(m, n, k))
        return pgk_gemm_f32_choose(layout, m, n, k, target,
                                   sm_count ? sm_count : default_sms(target), out);
    out->split = 1;
    out->m = m;
    out->n = n;
    out->k = k;
    if (f32) {
        /* the f32 kernels' own (m, n, k): forward is grad_A = dC·Bᵀ with
         * B = W, backward_x is C = A·B with B = W, backward_w is
         * grad_B = Aᵀ·dC with A = dY: all three (M, K, N) */
        static const pgk_desc *const f32_desc[PGK_GEMM_LAYOUTS] = {
            &pgk_desc_gemm_backward_a, &pgk_desc_gemm_forward, &pgk_desc_gemm_backward_b};
        out->desc = f32_desc[layout];
        out->n = k;
        out->k = n;
    } else if (pg_target_sm(target) < 80) {
        out->desc = &pgk_desc_gemm_lp_simt;
    } else if (target == PG_SM_90A && (out_type == PG_F32 || out_type == in_type) &&
               m >= PGK_GEMM_SM90_MIN_DIM && n >= PGK_GEMM_SM90_MIN_DIM &&
               k >= PGK_GEMM_SM90_MIN_DIM && n % 8 == 0 && k % 8 == 0) {
        /* wgmma + TMA: on an H200 at M = 2048 it ran q/o 475 TFLOP/s
         * forward against mma.sync's 271, k/v 193 against 131, gate/up
         * 567 against 359, down 717 against 371 (docs/runtime.md); the
         * thin shapes it would leave idle stay below. */
        uint32_t P, Q, R;
        pqr_host(layout, m, n, k, &P, &Q, &R);
        return pgk_gemm_sm90_choice(layout, in_type, out_type, P, Q, R,
                                    sm_count ? sm_count : default_sms(target), out);
    } else {
        static const pgk_desc *const mma_desc[PGK_GEMM_LAYOUTS] = {
            &pgk_desc_gemm_mma_forward, &pgk_desc_gemm_mma_backward_x,
            &pgk_desc_gemm_mma_backward_w};
        out->desc = mma_desc[layout];
    }
    rc = pgk_knobs_default(out->desc, &out->knobs);
    if (rc)
        return rc;
    if (out->desc == &pgk_desc_gemm_lp_simt) {
        out->knobs.v[LP_M] = m;
        out->knobs.v[LP_N] = n;
        out->knobs.v[LP_K] = k;
        out->knobs.v[LP_LAYOUT] = layout;
        out->knobs.v[LP_IN] = in_type == PG_BF16 ? IN_BF16 : IN_F16;
        out->knobs.v[LP_OUT] = (uint32_t)out_knob(out_type);
        if (m > LP_MAX_PQ || n > LP_MAX_PQ)
            return PG_ERANGE; /* the fallback's rows of blocks */
        return PG_OK;
    }
    if (f32) {
        out->knobs.v[GEMM_M] = out->m;
        out->knobs.v[GEMM_N] = out->n;
        out->knobs.v[GEMM_K] = out->k;
        if (out->knobs.v[GEMM_M] > out->desc->knobs[GEMM_M].max ||
            out->knobs.v[GEMM_K] > out->desc->knobs[GEMM_K].max)
            return PG_ERANGE;
        pgk_pick(out->desc, &out->knobs);
        return PG_OK;
    }
    uint32_t P, Q, R;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    unsigned sms = sm_count ? sm_count : default_sms(target);
    unsigned ob = out_type == PG_F32 ? 4 : 2;
    double best = 0;
    uint32_t bt = 0, bs = 1;
    static const uint32_t splits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    for (unsigned t = 0; t < PGK_GEMM_TILES; t++) {
        const mma_cfg *c = &mma_cfgs[t];
        if (pgk_ceil_div(P, c->bm) * (uint64_t)pgk_ceil_div(Q, c->bn) > 0x7fffffffu ||
            c->stages * cfg_stage_bytes(c) > smem_limit(target))
            continue;
        for (unsigned i = 0; i < sizeof splits / sizeof splits[0]; i++) {
            uint32_t s = splits[i];
            /* a slice of 4 k-tiles at least; partials within 1 GiB */
            if (s > 1 && ((uint64_t)pgk_ceil_div(R, 32) < 4u * s ||
                          (uint64_t)P * Q * 4u * s > (1ull << 30)))
                break;
            double cost = mma_cost(c, &tile_models[t], P, Q, R, s, sms, ob);
            if (best == 0 || cost < best * 0.999) {
                best = cost;
                bt = t;
                bs = s;
            }
        }
    }
    const pgk_gemm_measured *me =
        pg_target_sm(target) == 90
            ? pgk_gemm_nearest(measured_best, sizeof measured_best / sizeof measured_best[0],
                               layout, P, Q, R)
            : NULL;
    if (me && (me->split == 1 || ((uint64_t)pgk_ceil_div(R, 32) >= 4u * me->split &&
                                  (uint64_t)P * Q * 4u * me->split <= (1ull << 30)))) {
        bt = me->tile;
        bs = me->split;
    }
    out->tile = bt;
    out->split = bs;
    out->knobs.v[MM_M] = m;
    out->knobs.v[MM_N] = n;
    out->knobs.v[MM_K] = k;
    out->knobs.v[MM_IN] = in_type == PG_BF16 ? IN_BF16 : IN_F16;
    out->knobs.v[MM_OUT] = (uint32_t)out_knob(out_type);
    out->knobs.v[MM_TILE] = bt;
    out->knobs.v[MM_SPLIT] = bs;
    if (bs > 1) {
        out->reduce = &pgk_desc_gemm_mma_reduce;
        pgk_knobs_default(out->reduce, &out->reduce_knobs);
        out->reduce_knobs.v[RD_N] = P * Q; /* at most 2^28: the workspace bound above */
        out->reduce_knobs.v[RD_COLS] = Q;
        out->reduce_knobs.v[RD_SPLIT] = bs;
        out->reduce_knobs.v[RD_OUT] = (uint32_t)out_knob(out_type);
        out->workspace_bytes = (uint64_t)P * Q * 4u * bs;
    }
    return PG_OK;
}

bool pgk_gemm_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                       pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                       uint32_t *k)
{
    if (!d || !kn)
        return false;
    const uint32_t *v = kn->v;
    if (d == &pgk_desc_gemm_mma_forward || d == &pgk_desc_gemm_mma_backward_x ||
        d == &pgk_desc_gemm_mma_backward_w || d == &pgk_desc_gemm_lp_simt) {
        bool simt = d == &pgk_desc_gemm_lp_simt;
        *layout = simt ? (pgk_gemm_layout)(v[LP_LAYOUT] < PGK_GEMM_LAYOUTS ? v[LP_LAYOUT] : 0)
                  : d == &pgk_desc_gemm_mma_forward  ? PGK_GEMM_FORWARD
                  : d == &pgk_desc_gemm_mma_backward_x ? PGK_GEMM_BACKWARD_X
                                                       : PGK_GEMM_BACKWARD_W;
        *in_type = in_type_of(v[simt ? LP_IN : MM_IN]);
        *out_type = out_type_of(v[simt ? LP_OUT : MM_OUT]);
        *m = v[MM_M];
        *n = v[MM_N];
        *k = v[MM_K];
        return true;
    }
    if (d == &pgk_desc_gemm_sm90)
        return pgk_gemm_sm90_describe(kn, layout, in_type, out_type, m, n, k);
    if (d == &pgk_desc_gemm_thin) {
        *layout = (pgk_gemm_layout)(v[TH_LAYOUT] < PGK_GEMM_LAYOUTS ? v[TH_LAYOUT] : 0);
        *in_type = v[TH_IN] == TH_IN_F32 ? PG_F32 : in_type_of(v[TH_IN]);
        *out_type = out_type_of(v[TH_OUT]);
        *m = v[TH_M];
        *n = v[TH_N];
        *k = v[TH_K];
        return true;
    }
    if (pgk_gemm_f32_describe(d, kn, layout, m, n, k)) {
        *in_type = *out_type = PG_F32;
        return true;
    }
    static const pgk_desc *const f32_desc[PGK_GEMM_LAYOUTS] = {
        &pgk_desc_gemm_backward_a, &pgk_desc_gemm_forward, &pgk_desc_gemm_backward_b};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        if (d == f32_desc[l]) {
            *layout = (pgk_gemm_layout)l;
            *in_type = *out_type = PG_F32;
            *m = v[GEMM_M];
            *n = v[GEMM_K];
            *k = v[GEMM_N];
            return true;
        }
    return false;
}
