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

/* Shared launch helper: `threads` a block, ceil(n/threads) blocks. */
int pgk_launch_1d(uint32_t n, uint32_t threads, pgk_launch *out);

#endif /* PTXGEN_KERNELS_H */
