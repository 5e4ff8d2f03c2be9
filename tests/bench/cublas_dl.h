/* SPDX-License-Identifier: MIT */
/*
 * cuBLAS at run time, for comparisons: dlopen of libcublas, no CUDA headers
 * (the few prototypes and enum values it needs are declared in
 * cublas_dl.c). Self-contained, so it can move into the runtime.
 *
 * The GEMMs are the backward ones of DESIGN §3 on row-major f32 buffers
 * (device pointers as integers), run on the legacy default stream of the
 * calling thread's current CUDA context:
 *
 *   backward_a   grad_A[M,K] = dC[M,N] · B[K,N]ᵀ (+ beta·grad_A)
 *   backward_b   grad_B[K,N] = A[M,K]ᵀ · dC[M,N]
 *   f16_backward_a   as backward_a with f16 dC and W, f32 grad_A
 *
 * The fp32 ones run with CUBLAS_PEDANTIC_MATH (no TF32, no reduced
 * precision anywhere); the f16 one with the default math mode and f32
 * compute (tensor cores, f32 accumulate).
 *
 * Not thread-safe: one handle, used from one thread.
 */
#ifndef PTXGEN_CUBLAS_DL_H
#define PTXGEN_CUBLAS_DL_H

#include <stddef.h>
#include <stdint.h>

typedef struct cublas_dl cublas_dl;

/* Open the library ($PGRT_LIBCUBLAS, else libcublas.so.13, .so.12, .so)
 * and create a handle in the current context. 0 on success; -1 with a
 * one-line reason in err when it is not there or does not start. */
int cublas_dl_open(cublas_dl **out, char *err, size_t errlen);
void cublas_dl_close(cublas_dl **c);
/* The library's version (cublasGetVersion: 130000 for 13.0.0) and the name
 * it was opened by. */
int cublas_dl_version(const cublas_dl *c);
const char *cublas_dl_name(const cublas_dl *c);

/* 0, or the cublasStatus_t of the failing call (its name in err). */
int cublas_dl_backward_a(cublas_dl *c, uint64_t grad_c, uint64_t b, uint64_t grad_a, int m, int n,
                         int k, float beta, char *err, size_t errlen);
int cublas_dl_backward_b(cublas_dl *c, uint64_t a, uint64_t grad_c, uint64_t grad_b, int m, int n,
                         int k, char *err, size_t errlen);
int cublas_dl_f16_backward_a(cublas_dl *c, uint64_t grad_c_f16, uint64_t w_f16, uint64_t grad_a,
                             int m, int n, int k, char *err, size_t errlen);
/* cublasGemmEx in cuBLAS's own column-major terms, f32 compute, default
 * math (tensor cores): C(m x n) = op(A)·op(B) + beta·C. Types are cudaDataType
 * values: CUBLAS_DL_R_32F, _16F, _16BF. trans_* 0 (N) or 1 (T). */
enum { CUBLAS_DL_R_32F = 0, CUBLAS_DL_R_16F = 2, CUBLAS_DL_R_16BF = 14 };
int cublas_dl_gemm_ex(cublas_dl *c, int trans_a, int trans_b, int m, int n, int k, uint64_t a,
                      int a_type, int lda, uint64_t b, int b_type, int ldb, float beta, uint64_t cc,
                      int c_type, int ldc, char *err, size_t errlen);

/* One GEMM of a linear layer on row-major buffers (pgk_gemm_layout order):
 * 0 forward Y[M,N] = X[M,K]·W[N,K]ᵀ (a = X, b = W), 1 backward_x dX[M,K] =
 * dY[M,N]·W[N,K] (a = dY, b = W), 2 backward_w dW[N,K] = dY[M,N]ᵀ·X[M,K]
 * (a = dY, b = X). Types: 0 f32 (inputs and output all f32: cublasSgemm_v2,
 * pedantic), 1 f16, 2 bf16 (cublasGemmEx, f32 compute, default math). */
int cublas_dl_layer(cublas_dl *c, int layout, int in_type, int out_type, uint64_t a, uint64_t b,
                    uint64_t out, int m, int n, int k, char *err, size_t errlen);

#endif /* PTXGEN_CUBLAS_DL_H */
