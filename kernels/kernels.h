/* SPDX-License-Identifier: MIT */
/* Private to kernels/: the descriptors the catalog lists. */
#ifndef PTXGEN_KERNELS_H
#define PTXGEN_KERNELS_H

#include "pgk.h"

extern const pgk_desc pgk_desc_squared_sum_reduce;
extern const pgk_desc pgk_desc_clip_scale_reduce;
extern const pgk_desc pgk_desc_gradient_clip_gpu_scale;
extern const pgk_desc pgk_desc_gradient_clip;

/* Shared launch helper: `threads` a block, ceil(n/threads) blocks. */
int pgk_launch_1d(uint32_t n, uint32_t threads, pgk_launch *out);

#endif /* PTXGEN_KERNELS_H */
