/* SPDX-License-Identifier: MIT */
/*
 * Private to runtime/: the per-context cuBLAS state (cublas.c) as the GEMM
 * dispatch (gemm.c) and the model pre-warm (prewarm.c) use it.
 */
#ifndef PTXGEN_RT_BLAS_H
#define PTXGEN_RT_BLAS_H

#include "rt_internal.h"

/* Whether the GEMMs of ctx go to cuBLAS now: the switch is on, and the
 * library is loaded with a handle, loading it first if that was never
 * tried. A load is refused (PGRT_ECAPTURE) while a stream of ctx captures,
 * or while `check` (may be NULL) does. A missing library is no error:
 * *use is false and the reason is kept for pgrt_cublas_info_get(). */
int rt_blas_ready(pgrt_ctx *ctx, CUstream check, bool *use);

/* Count a dispatch that ran the PTX kernels (for pgrt_cublas_info_get). */
void rt_blas_count_ptx(pgrt_ctx *ctx);

/* cublasSgemm_v2 (column-major, as cuBLAS sees it) on stream s with
 * alpha = 1 and the given beta, after rt_blas_ready() said yes. `what`
 * names the operation in messages. PGRT_ECUDA with the cuBLAS status name
 * on failure. */
int rt_blas_sgemm(pgrt_ctx *ctx, pgrt_stream *s, bool trans_a, bool trans_b, int m, int n, int k,
                  CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c,
                  int ldc, const char *what);

#endif /* PTXGEN_RT_BLAS_H */
