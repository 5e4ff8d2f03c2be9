/* SPDX-License-Identifier: MIT */
/* Private to kernels/: the descriptors the catalog lists. */
#ifndef PTXGEN_KERNELS_H
#define PTXGEN_KERNELS_H

#include "pgk.h"

extern const pgk_desc pgk_desc_squared_sum_reduce;
extern const pgk_desc pgk_desc_clip_scale_reduce;
extern const pgk_desc pgk_desc_gradient_clip_gpu_scale;
extern const pgk_desc pgk_desc_gradient_clip;
extern const pgk_desc pgk_desc_silu_backward;
extern const pgk_desc pgk_desc_batched_softmax_backward;
extern const pgk_desc pgk_desc_batched_rms_norm_backward;
extern const pgk_desc pgk_desc_rms_norm_gamma_reduce;
extern const pgk_desc pgk_desc_cast_f32_to_f16;
extern const pgk_desc pgk_desc_residual_add;
extern const pgk_desc pgk_desc_adamw_step;
extern const pgk_desc pgk_desc_adamw_step_dev;
extern const pgk_desc pgk_desc_gemm_backward_a;
extern const pgk_desc pgk_desc_gemm_backward_a_accumulate;
extern const pgk_desc pgk_desc_gemm_backward_b;
extern const pgk_desc pgk_desc_gemm_f16_backward_a;
extern const pgk_desc pgk_desc_rms_norm_forward;
extern const pgk_desc pgk_desc_gemm_forward;
extern const pgk_desc pgk_desc_gemm_forward_accumulate;
extern const pgk_desc pgk_desc_silu_forward;
extern const pgk_desc pgk_desc_batched_softmax_forward;
extern const pgk_desc pgk_desc_transpose;
extern const pgk_desc pgk_desc_mse_loss;
extern const pgk_desc pgk_desc_adamw_hyper_advance;
extern const pgk_desc pgk_desc_squared_sum_reduce_multi;
extern const pgk_desc pgk_desc_gradient_clip_gpu_scale_multi;
extern const pgk_desc pgk_desc_gemm_sm90;

/* Shared launch helper: `threads` a block, ceil(n/threads) blocks. */
int pgk_launch_1d(uint32_t n, uint32_t threads, pgk_launch *out);

/* ---- common.c: pieces every kernel file uses ---- */

/* Threads a block of the 1-D and row kernels. */
#define PGK_THREADS 256u
/* The knob `n` (elements), 1 .. 2^32 - 1. */
extern const pgk_knob pgk_knob_n[1];
/* "1-D": PGK_THREADS a block, ceil(n/PGK_THREADS) blocks. */
int pgk_launch_elementwise(const uint32_t *knobs, pgk_launch *out);
/* One block of PGK_THREADS a row: knobs[0] rows (the grid), knobs[1] the
 * row length; both 1 .. 2^31 - 1. */
int pgk_launch_rows(const uint32_t *knobs, pgk_launch *out);
/* One warp a row (pgk_warp_row), PGK_THREADS / 32 rows a block: knobs[0]
 * rows, knobs[1] the row length; both 1 .. 2^31 - 1. */
int pgk_launch_warp_rows(const uint32_t *knobs, pgk_launch *out);
/* base + i * size (i a u32, widened). */
pg_reg pgk_elem_addr(pg_kernel *k, pg_reg base, pg_val i, uint32_t size);
/* &base[row * width] for f32 rows, computed in 64 bits. */
pg_reg pgk_row_addr(pg_kernel *k, pg_reg base, pg_val row, pg_val width);
/* exp(a) for a <= 0, to ex2.approx's ~2 ulp (the rounding of a*log2(e)
 * is carried by an fma); a below -1000 (and -inf) gives 0, NaN stays NaN. */
pg_reg pgk_exp_nonpos(pg_kernel *k, pg_reg a);
/* A new f32 register loaded from global memory at addr. */
pg_reg pgk_ld_f32(pg_kernel *k, pg_reg addr);
/* One warp a row: returns the row (ctaid.x * warps-a-block + warp) and the
 * lane in *lane, and jumps to `out` when row >= rows (a whole warp). */
pg_reg pgk_warp_row(pg_kernel *k, pg_val rows, pg_label out, pg_reg *lane);

#endif /* PTXGEN_KERNELS_H */
