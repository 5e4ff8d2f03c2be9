/* SPDX-License-Identifier: MIT */
/*
 * The one chooser above the GEMM families. pgk_gemm_choose() checks the
 * types and asks one family by the shape and the hardware: gemm_thin for
 * a side of at most 64 where it was measured to win (gemm_thin.c); for
 * f32 the warp-tiled kernels when no side is below 64 (gemm_f32_tiled.c),
 * else the seed's (gemm_f32.c); gemm_sm90 on sm_90a for a large 16-bit
 * shape (gemm_sm90.c); else the mma.sync family (gemm_mma_choose.c).
 * pgk_gemm_describe() is its inverse, each family reading its own
 * descriptors. No family calls this file.
 */
#include "gemm_abi.h"

/* fp32 shapes with every side 64 or more run the warp-tiled family
 * (gemm_f32_tiled.c), which has every layout, accumulate, bias and
 * split-K; thinner ones the kernels of gemm_f32.c. */
static bool f32_tiled_shape(uint32_t m, uint32_t n, uint32_t k)
{
    return m >= 64 && n >= 64 && k >= 64;
}

/* wgmma + TMA: on an H200 at M = 2048 it ran q/o 475 TFLOP/s forward
 * against mma.sync's 271, k/v 193 against 131, gate/up 567 against 359,
 * down 717 against 371 (docs/runtime.md); the thin shapes it would leave
 * idle stay with mma.sync. */
static bool sm90_shape(pg_type in_type, pg_type out_type, uint32_t m, uint32_t n, uint32_t k,
                       pg_target target)
{
    return target == PG_SM_90A && (out_type == PG_F32 || out_type == in_type) &&
           m >= PGK_GEMM_SM90_MIN_DIM && n >= PGK_GEMM_SM90_MIN_DIM &&
           k >= PGK_GEMM_SM90_MIN_DIM && n % 8 == 0 && k % 8 == 0;
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
    if (pgk_gemm_thin_choice(layout, in_type, out_type, m, n, k, target, out))
        return PG_OK;
    unsigned sms = sm_count ? sm_count : pgk_gemm_default_sms(target);
    if (f32)
        return f32_tiled_shape(m, n, k) ? pgk_gemm_f32_choose(layout, m, n, k, target, sms, out)
                                        : pgk_gemm_f32_seed_choice(layout, m, n, k, target, out);
    if (sm90_shape(in_type, out_type, m, n, k, target)) {
        uint32_t P, Q, R;
        pqr_host(layout, m, n, k, &P, &Q, &R);
        return pgk_gemm_sm90_choice(layout, in_type, out_type, P, Q, R, sms, out);
    }
    return pgk_gemm_mma_choice(layout, in_type, out_type, m, n, k, target, sms, out);
}

bool pgk_gemm_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                       pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                       uint32_t *k)
{
    if (!d || !kn)
        return false;
    if (d == &pgk_desc_gemm_sm90)
        return pgk_gemm_sm90_describe(kn, layout, in_type, out_type, m, n, k);
    if (pgk_gemm_mma_describe(d, kn, layout, in_type, out_type, m, n, k) ||
        pgk_gemm_thin_describe(d, kn, layout, in_type, out_type, m, n, k))
        return true;
    if (pgk_gemm_f32_describe(d, kn, layout, m, n, k) ||
        pgk_gemm_f32_seed_describe(d, kn, layout, m, n, k)) {
        *in_type = *out_type = PG_F32;
        return true;
    }
    return false;
}
