/* SPDX-License-Identifier: MIT */
/*
 * Private to the mma.sync family (gemm_mma.c, gemm_mma_cost.c,
 * gemm_mma_out.c, gemm_mma_reduce.c): the tile configurations the tile
 * knob names, their cost model, the epilogue of gemm_mma_* that writes
 * outputs or split-K partials, and gemm_lp_simt's side of the family's
 * choice. What the family shares with the others is in gemm_abi.h.
 */
#ifndef PTXGEN_KERNELS_GEMM_MMA_H
#define PTXGEN_KERNELS_GEMM_MMA_H

#include "gemm_abi.h"

/* A tile configuration: see gemm_mma.c for the kernel it drives. */
typedef struct mma_cfg {
    unsigned bm, bn;     /* block tile along P and Q */
    unsigned wm, wn;     /* warps along P and Q */
    unsigned bk;         /* k-tile: 32 or 64 */
    unsigned stages;
    bool db;             /* fragments double-buffered across k-steps */
} mma_cfg;

#define MMA_MAX_KS 4u /* k-steps of 16 a k-tile */
#define MMA_MAX_CH 8u /* 16-byte chunks of one operand a thread copies a k-tile */
#define MMA_GROUP 8u  /* P-tiles a group of the block order */

/* The tile configurations (the tile knob), pgk.h's PGK_GEMM_TILE_*. */
static const mma_cfg mma_cfgs[PGK_GEMM_TILES] = {
    [PGK_GEMM_TILE_128x128_W4] = {128, 128, 2, 2, 32, 4},
    [PGK_GEMM_TILE_128x128_W8] = {128, 128, 2, 4, 32, 4},
    [PGK_GEMM_TILE_128x256_W8] = {128, 256, 2, 4, 32, 3},
    [PGK_GEMM_TILE_256x128_W8] = {256, 128, 4, 2, 32, 3},
    [PGK_GEMM_TILE_128x64_W4] = {128, 64, 2, 2, 32, 4},
    [PGK_GEMM_TILE_64x128_W4] = {64, 128, 2, 2, 32, 4},
    [PGK_GEMM_TILE_64x64_W4] = {64, 64, 2, 2, 32, 4},
    [PGK_GEMM_TILE_128x256_W8_K64] = {128, 256, 2, 4, 64, 3},
    [PGK_GEMM_TILE_256x128_W8_K64] = {256, 128, 4, 2, 64, 3},
    [PGK_GEMM_TILE_128x128_W4_K64] = {128, 128, 2, 2, 64, 3},
    [PGK_GEMM_TILE_128x128_W4_K64_DB] = {128, 128, 2, 2, 64, 3, true},
    [PGK_GEMM_TILE_64x128_W4_K64_DB] = {64, 128, 2, 2, 64, 3, true},
    [PGK_GEMM_TILE_128x64_W4_K64_DB] = {128, 64, 2, 2, 64, 3, true},
    [PGK_GEMM_TILE_128x128_W4_DB] = {128, 128, 2, 2, 32, 4, true},
};

static inline unsigned cfg_threads(const mma_cfg *c) { return c->wm * c->wn * 32u; }
static inline uint32_t cfg_stage_bytes(const mma_cfg *c) { return (c->bm + c->bn) * c->bk * 2u; }

/* The epilogue's view of the output. */
typedef struct mma_epi {
    pg_type ot;
    pg_reg c, ldc, P;      /* base (u64), row length (Q), rows */
    pg_reg bias, do_acc, do_bias; /* f32 bias base; preds from the flags */
    bool partial;          /* f32 partial sums: no bias, no accumulate */
    bool native;           /* cvt to bf16 exists */
} mma_epi;

/* Store the accumulators of an mma.sync block tile (see gemm_mma_out.c). */
void pgk_mma_epilogue(pg_kernel *k, const mma_epi *e, pg_reg rowbase, pg_reg colbase,
                      unsigned MT, unsigned NT, pg_reg (*acc)[MMA_MAX_NT][4]);

/* gemm_mma_cost.c: the tile and split of gemm_mma_<layout> for C[P,Q]
 * over R on sms SMs, outputs of out_bytes (4 or 2) bytes. */
void pgk_gemm_mma_best(pgk_gemm_layout layout, uint32_t P, uint32_t Q, uint32_t R,
                       pg_target target, unsigned sms, unsigned out_bytes, uint32_t *tile,
                       uint32_t *split);

/* gemm_mma_reduce.c: gemm_lp_simt's knobs for out->m, n, k (set, as the
 * rest of out, by the family's choice); its inverse. */
int pgk_gemm_lp_simt_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type,
                            pgk_gemm_choice *out);
bool pgk_gemm_lp_simt_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                               pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                               uint32_t *k);

#endif /* PTXGEN_KERNELS_GEMM_MMA_H */
