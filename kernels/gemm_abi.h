/* SPDX-License-Identifier: MIT */
/*
 * The GEMM ABI: what the families of the three layouts of a linear layer
 * (pgk_gemm_layout) share. The SIMT f32 family (gemm_f32_tiled.c), the
 * mma.sync 16-bit family (gemm_mma*.c) and the thin family (gemm_thin*.c)
 * take the same params and flags, size knobs bounded by MM_MAX_DIM, the
 * same in and out knobs and (P, Q, R) reading of the layout; split-K
 * partials go through gemm_mma_reduce. Here too: the 16-bit output path
 * (gemm_mma_out.c), each family's side of pgk_gemm_choose() and
 * pgk_gemm_describe(), and the bottom helpers (gemm_abi.c) that every
 * chooser starts from and that call no family. gemm_choose.c, the one
 * chooser, sits above the families and no family calls it. (gemm_sm90.c
 * takes TMA maps instead of these params: its side is in kernels.h; the
 * seed's f32 kernels of gemm_f32.c keep their DESIGN §3 params.)
 */
#ifndef PTXGEN_KERNELS_GEMM_ABI_H
#define PTXGEN_KERNELS_GEMM_ABI_H

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

/* The out knob of a type (f32, f16, bf16). */
static inline uint32_t out_knob(pg_type t)
{
    return t == PG_F32 ? OUT_F32 : t == PG_F16 ? OUT_F16 : OUT_BF16;
}

/* The params of every kernel of the families (gemm_abi.c), whether or
 * not it reads the workspace. */
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

/* ---- gemm_mma_out.c: the 16-bit output path (mma.sync, reduce, thin) ---- */

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

/* ---- gemm_abi.c: the bottom of the choosers; calls no family ---- */

/* The checks every chooser starts with: out zeroed; PG_EINVAL for a null
 * out, an unknown layout or target, PG_ERANGE for a size outside [1,
 * MM_MAX_DIM]; else PG_OK. */
int pgk_gemm_choice_init(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                         pg_target target, pgk_gemm_choice *out);

/* SMs a GPU of the target has when the caller does not say. */
unsigned pgk_gemm_default_sms(pg_target t);

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

/* Whether the shape belongs to gemm_thin: a side of at most 64 (sm_70
 * and up) with few enough multiply-adds that it was measured to win. The
 * border between the thin family and the others, which both sides read. */
bool pgk_gemm_thin_shape(pgk_gemm_layout layout, pg_type in_type, uint32_t m, uint32_t n,
                         uint32_t k, pg_target target);

/* ---- each family's side of pgk_gemm_choose() and pgk_gemm_describe() ---- */

/* gemm_thin.c: the gemm_thin choice where pgk_gemm_thin_shape() holds
 * (out filled, true), else false and out untouched. */
bool pgk_gemm_thin_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                          uint32_t n, uint32_t k, pg_target target, pgk_gemm_choice *out);
bool pgk_gemm_thin_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                            pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                            uint32_t *k);

/* gemm_mma_choose.c: the mma.sync family for f16/bf16 in and f32, f16 or
 * bf16 out: gemm_lp_simt below sm_80, else gemm_mma_<layout> with the
 * tile and split of its cost model (on sm_90 near a measured shape, the
 * measured best) on sms SMs (0: the target's default). */
int pgk_gemm_mma_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                        uint32_t n, uint32_t k, pg_target target, unsigned sms,
                        pgk_gemm_choice *out);
bool pgk_gemm_mma_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                           pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                           uint32_t *k);

/* gemm_f32_tiled.c: pgk_gemm_f32_choose() (pgk.h) and its inverse. */
bool pgk_gemm_f32_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                           uint32_t *m, uint32_t *n, uint32_t *k);

/* gemm_f32.c: the seed's f32 kernels (gemm_backward_a, gemm_forward,
 * gemm_backward_b) for the layout, their variant picked; out->m, n, k
 * are their own (M, K, N). */
int pgk_gemm_f32_seed_choice(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                             pg_target target, pgk_gemm_choice *out);
bool pgk_gemm_f32_seed_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                                uint32_t *m, uint32_t *n, uint32_t *k);

/* gemm_sm90.c's side (pgk_gemm_sm90_choice, pgk_gemm_sm90_describe) is
 * declared in kernels.h. */

#endif /* PTXGEN_KERNELS_GEMM_ABI_H */
