/* SPDX-License-Identifier: MIT */
/*
 * The mma.sync family's cost model: the tile and split of gemm_mma_* for
 * a shape, a model's first (or, on sm_90 near a shape bench_gemm
 * measured, the measured best). Numbers only: gemm_mma.c makes the
 * choice of them.
 */
#include "gemm_mma.h"

#include <math.h>

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

/* Shared memory a block may opt in to on the target's devices: sm_80 and
 * sm_87 (A100, Orin) 163 KiB, sm_90 and sm_100 227 KiB, the others
 * (sm_86, sm_89, sm_120: GeForce-class) 99 KiB. */
static uint32_t smem_limit(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 || sm == 87 ? 163u * 1024 : sm == 90 || sm == 100 ? 227u * 1024 : 99u * 1024;
}

/* The splits tried, and whether a split of s is worth its partials: a
 * slice of 4 k-tiles at least, partials within 1 GiB. */
static const uint32_t splits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

static bool split_ok(uint32_t P, uint32_t Q, uint32_t R, uint32_t s)
{
    return s == 1 || ((uint64_t)pgk_ceil_div(R, 32) >= 4u * s &&
                      (uint64_t)P * Q * 4u * s <= (1ull << 30));
}

/* The (tile, split) of the least modelled cost for C[P,Q] over R. */
static void model_best(uint32_t P, uint32_t Q, uint32_t R, pg_target target, unsigned sms,
                       unsigned ob, uint32_t *tile, uint32_t *split)
{
    double best = 0;
    uint32_t bt = 0, bs = 1;
    for (unsigned t = 0; t < PGK_GEMM_TILES; t++) {
        const mma_cfg *c = &mma_cfgs[t];
        if (pgk_ceil_div(P, c->bm) * (uint64_t)pgk_ceil_div(Q, c->bn) > 0x7fffffffu ||
            c->stages * cfg_stage_bytes(c) > smem_limit(target))
            continue;
        for (unsigned i = 0; i < sizeof splits / sizeof splits[0]; i++) {
            uint32_t s = splits[i];
            if (!split_ok(P, Q, R, s))
                break;
            double cost = mma_cost(c, &tile_models[t], P, Q, R, s, sms, ob);
            if (best == 0 || cost < best * 0.999) {
                best = cost;
                bt = t;
                bs = s;
            }
        }
    }
    *tile = bt;
    *split = bs;
}

void pgk_gemm_mma_best(pgk_gemm_layout layout, uint32_t P, uint32_t Q, uint32_t R,
                       pg_target target, unsigned sms, unsigned out_bytes, uint32_t *tile,
                       uint32_t *split)
{
    model_best(P, Q, R, target, sms, out_bytes, tile, split);
    const pgk_gemm_measured *me =
        pg_target_sm(target) == 90
            ? pgk_gemm_nearest(measured_best, sizeof measured_best / sizeof measured_best[0],
                               layout, P, Q, R)
            : NULL;
    if (me && split_ok(P, Q, R, me->split)) {
        *tile = me->tile;
        *split = me->split;
    }
}
