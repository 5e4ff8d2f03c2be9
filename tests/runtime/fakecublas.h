/* SPDX-License-Identifier: MIT */
/*
 * A fake libcublas for the runtime's unit tests, beside the fake driver
 * (fakecuda.h): it exports the entry points the runtime resolves, runs
 * cublasSgemm_v2 on the host (the fake driver's "device" pointers are host
 * pointers; sums in double, column-major, as cuBLAS defines it) and records
 * every GEMM. Steered by FAKECUBLAS, read at each call: "create"
 * (cublasCreate_v2 fails with CUBLAS_STATUS_NOT_INITIALIZED), "gemm"
 * (cublasSgemm_v2 fails with CUBLAS_STATUS_EXECUTION_FAILED).
 */
#ifndef PTXGEN_FAKECUBLAS_H
#define PTXGEN_FAKECUBLAS_H

#define FAKECUBLAS_VERSION 129001

typedef struct fakecublas_gemm {
    int transa, transb; /* 0 = N, 1 = T */
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    void *stream;   /* the stream the handle was bound to at the call */
    int math_mode;  /* the handle's math mode at the call */
    int pointer_mode;
} fakecublas_gemm;

typedef void (*fakecublas_reset_fn)(void);
typedef int (*fakecublas_count_fn)(void);
typedef const fakecublas_gemm *(*fakecublas_gemm_at_fn)(int i);

/* Exported by the fake:
 *   void fakecublas_reset(void);               forget the GEMMs
 *   int fakecublas_gemm_count(void);
 *   const fakecublas_gemm *fakecublas_gemm_at(int i);
 *   int fakecublas_live_handles(void);         creates minus destroys
 */

#endif /* PTXGEN_FAKECUBLAS_H */
