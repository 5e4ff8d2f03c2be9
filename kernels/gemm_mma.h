/* SPDX-License-Identifier: MIT */
/*
 * Private to the 16-bit GEMM family (gemm_mma.c, gemm_mma_out.c,
 * gemm_reduce_simt.c, gemm_thin.c, gemm_choose.c): its knobs and params, the mma.sync
 * tile configurations, and the output path of gemm_mma_out.c that its
 * three kernels share. See gemm_mma.c for the family and its layouts.
 */
#ifndef PTXGEN_GEMM_MMA_H
#define PTXGEN_GEMM_MMA_H

#include "gemm_tile.h"

/* m, n and k of the mma kernels: 1 .. 2^21, so that even 64×64 tiles of
 * the largest output number at most 2^30 (a 1-D grid, u32 tile indices). */
#define MM_MAX_DIM (1u << 21)
/* gemm_lp_simt: P (m or n) on grid y, 16 rows a block. */
#define LP_MAX_PQ (65535u * 16u)

/* The knobs of gemm_mma_* (gemm_lp_simt: LP_* below), in this order. */
enum { MM_M, MM_N, MM_K, MM_IN, MM_OUT, MM_TILE, MM_SPLIT };
/* The in knob: 0 f16, 1 bf16. The out knob: 0 f32, 1 f16, 2 bf16. */
enum { IN_F16, IN_BF16 };
enum { OUT_F32, OUT_F16, OUT_BF16 };
/* The flags parameter. */
#define FLAG_ACCUMULATE 1u
#define FLAG_BIAS 2u

/* Whether `bit` of the flags parameter is set (a pred). */
static inline pg_reg flag_set(pg_kernel *k, pg_reg flags, uint32_t bit)
{
    return pgv_setp(k, PG_CMP_NE, PG_U32, pgv_and(k, PG_B32, flags, pg_u32(bit)), pg_u32(0));
}

static inline pg_type in_type_of(uint32_t v) { return v == IN_BF16 ? PG_BF16 : PG_F16; }

/* (P, Q, R) of the layout from the registers m, n, k. */
static inline void pqr(unsigned layout, pg_reg m, pg_reg n, pg_reg kd, pg_reg *P, pg_reg *Q,
                       pg_reg *R)
{
    *P = layout == PGK_GEMM_BACKWARD_W ? n : m;
    *Q = layout == PGK_GEMM_FORWARD ? n : kd;
    *R = layout == PGK_GEMM_FORWARD ? kd : layout == PGK_GEMM_BACKWARD_X ? n : m;
}

static inline void pqr_host(unsigned layout, uint32_t m, uint32_t n, uint32_t k, uint32_t *P,
                     uint32_t *Q, uint32_t *R)
{
    *P = layout == PGK_GEMM_BACKWARD_W ? n : m;
    *Q = layout == PGK_GEMM_FORWARD ? n : k;
    *R = layout == PGK_GEMM_FORWARD ? k : layout == PGK_GEMM_BACKWARD_X ? n : m;
}

static inline unsigned out_size(pg_type ot) { return ot == PG_F32 ? 4 : 2; }

static inline pg_type out_type_of(uint32_t v)
{
    return v == OUT_F16 ? PG_F16 : v == OUT_BF16 ? PG_BF16 : PG_F32;
}

/* The params of gemm_mma_* and gemm_lp_simt. */
enum { PA_A, PA_B, PA_C, PA_BIAS, PA_WS, PA_M, PA_N, PA_K, PA_FLAGS, PA_COUNT };
extern const pgk_param pgk_gemm_params[PA_COUNT];

/* The largest split: partial sums of 64 slices at most. */
#define MMA_MAX_SPLIT 64u

/* gemm_mma_reduce: its knobs and params. */
enum { RD_N, RD_COLS, RD_SPLIT, RD_OUT };
enum { RP_WS, RP_C, RP_BIAS, RP_N, RP_COLS, RP_SPLIT, RP_FLAGS };

/* gemm_lp_simt: its knobs. */
enum { LP_M, LP_N, LP_K, LP_LAYOUT, LP_IN, LP_OUT };

/* gemm_thin (gemm_thin.c): its knobs, the in knob's f32 (after IN_F16,
 * IN_BF16) and its forms. */
enum { TH_M, TH_N, TH_K, TH_LAYOUT, TH_IN, TH_OUT, TH_FORM, TH_J };
enum { TH_IN_F32 = 2 };
enum { TH_FORM_OUTER, TH_FORM_Q, TH_FORM_P, TH_FORM_MMA_Q, TH_FORM_MMA_P };
/* gemm_thin's form and j for a shape: narrow on the thinner of P and Q
 * when it is at most 64 and below R, else outer (R thin). */
void pgk_gemm_thin_form(unsigned layout, uint32_t m, uint32_t n, uint32_t k, uint32_t *form,
                        uint32_t *j);

/* The epilogue's view of the output. */
typedef struct mma_epi {
    pg_type ot;
    pg_reg c, ldc, P;      /* base (u64), row length (Q), rows */
    pg_reg bias, do_acc, do_bias; /* f32 bias base; preds from the flags */
    bool partial;          /* f32 partial sums: no bias, no accumulate */
    bool native;           /* cvt to bf16 exists */
} mma_epi;

/* ---- gemm_mma_out.c ---- */

/* A 16-bit value (in a b16/u16 register) as f32. */
pg_reg pgk_h_to_f32(pg_kernel *k, pg_type t, pg_reg h);
/* f32 -> the 16-bit bits of type t (round to nearest even) in a u32. */
pg_reg pgk_f32_to_h(pg_kernel *k, pg_type t, pg_reg f, bool native);
/* One output element's final value: v, then old + v where ok and do_acc
 * (old read at addr in type ot). */
pg_reg pgk_gemm_finish_value(pg_kernel *k, pg_type ot, pg_reg v, pg_reg addr, pg_reg ok,
                             pg_reg do_acc);
/* Store an f32 value as type ot at addr under `ok`. */
void pgk_gemm_store_value(pg_kernel *k, pg_type ot, pg_reg addr, pg_reg ok, pg_reg v,
                          bool native);
/* Store the accumulators of an mma.sync block tile (see gemm_mma_out.c). */
void pgk_mma_epilogue(pg_kernel *k, const mma_epi *e, pg_reg rowbase, pg_reg colbase,
                      unsigned MT, unsigned NT, pg_reg (*acc)[MMA_MAX_NT][4]);

/* ---------------------------------------------------------------- mma.sync tiles */

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

/* The checks every chooser starts with: out zeroed; PG_EINVAL for a null
 * out, an unknown layout or target, PG_ERANGE for a size outside [1,
 * MM_MAX_DIM]; else PG_OK. */
int pgk_gemm_choice_init(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                         pg_target target, pgk_gemm_choice *out);

/* A row of a chooser's table: the best (tile, split) bench_gemm's sweep
 * measured for a layout at (P, Q, R). */
typedef struct pgk_gemm_measured {
    uint8_t layout, tile, split;
    uint32_t P, Q, R;
} pgk_gemm_measured;

/* The row of table[0, n) of the layout nearest (P, Q, R) within a factor
 * 1.5 in each (the smallest sum of |log2| ratios), or NULL. */
const pgk_gemm_measured *pgk_gemm_nearest(const pgk_gemm_measured *table, size_t n,
                                          unsigned layout, uint32_t P, uint32_t Q, uint32_t R);

#endif /* PTXGEN_GEMM_MMA_H */
