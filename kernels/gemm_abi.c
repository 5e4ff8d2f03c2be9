/* SPDX-License-Identifier: MIT */
/*
 * The bottom of the GEMM floor (gemm_abi.h): the params every family
 * takes, the checks and defaults every chooser starts from, the nearest
 * measured shape, and the border of the thin family. Calls no family.
 */
#include "gemm_abi.h"

#include <math.h>
#include <string.h>

const pgk_param pgk_gemm_params[PA_COUNT] = {
    [PA_A] = {"a", PG_U64, true},          [PA_B] = {"b", PG_U64, true},
    [PA_C] = {"c", PG_U64, true},          [PA_BIAS] = {"bias", PG_U64, true},
    [PA_WS] = {"workspace", PG_U64, true}, [PA_M] = {"m", PG_U32, false},
    [PA_N] = {"n", PG_U32, false},         [PA_K] = {"k", PG_U32, false},
    [PA_FLAGS] = {"flags", PG_U32, false},
};

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

unsigned pgk_gemm_default_sms(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 ? 108 : sm == 86 ? 84 : sm == 87 ? 16 : sm == 89 ? 128 : sm == 90 ? 132
           : sm >= 120 ? 84 : 132;
}

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
 *     16.0 / 11.0, lora_b dW 14.7 / 11.6 (cuBLAS 12.3-14.1): forms 3 and 4. */
bool pgk_gemm_thin_shape(pgk_gemm_layout layout, pg_type in_type, uint32_t m, uint32_t n,
                         uint32_t k, pg_target target)
{
    uint32_t P, Q, R;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    uint32_t t = P < Q ? P : Q;
    t = R < t ? R : t;
    uint64_t fma = (uint64_t)P * Q * R;
    return t <= THIN_MAX && pg_target_sm(target) >= 70 &&
           fma <= (in_type == PG_F32 ? THIN_MAX_FMA_32 : THIN_MAX_FMA_16);
}
