/* SPDX-License-Identifier: MIT */
/* The fake cuBLAS described in fakecublas.h. */
#include "fakecublas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))
#define MAX_LOG 1024

struct handle {
    void *stream;
    int math_mode, pointer_mode;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fakecublas_gemm log_[MAX_LOG];
static int nlog;
static atomic_int live;

static int mode_is(const char *m)
{
    const char *v = getenv("FAKECUBLAS");
    return v && strcmp(v, m) == 0;
}

FAKE_API void fakecublas_reset(void);
FAKE_API int fakecublas_gemm_count(void);
FAKE_API const fakecublas_gemm *fakecublas_gemm_at(int i);
FAKE_API int fakecublas_live_handles(void);

void fakecublas_reset(void)
{
    pthread_mutex_lock(&lock);
    nlog = 0;
    pthread_mutex_unlock(&lock);
}
int fakecublas_gemm_count(void) { return nlog; }
const fakecublas_gemm *fakecublas_gemm_at(int i) { return i >= 0 && i < nlog ? &log_[i] : NULL; }
int fakecublas_live_handles(void) { return atomic_load(&live); }

FAKE_API int cublasCreate_v2(struct handle **h);
FAKE_API int cublasDestroy_v2(struct handle *h);
FAKE_API int cublasGetVersion_v2(struct handle *h, int *v);
FAKE_API int cublasSetMathMode(struct handle *h, int mode);
FAKE_API int cublasSetPointerMode_v2(struct handle *h, int mode);
FAKE_API int cublasSetStream_v2(struct handle *h, void *s);
FAKE_API int cublasSgemm_v2(struct handle *h, int ta, int tb, int m, int n, int k,
                            const float *alpha, const float *a, int lda, const float *b, int ldb,
                            const float *beta, float *c, int ldc);

int cublasCreate_v2(struct handle **h)
{
    if (mode_is("create"))
        return 1; /* CUBLAS_STATUS_NOT_INITIALIZED */
    *h = calloc(1, sizeof **h);
    if (!*h)
        return 3;
    atomic_fetch_add(&live, 1);
    return 0;
}

int cublasDestroy_v2(struct handle *h)
{
    free(h);
    atomic_fetch_sub(&live, 1);
    return 0;
}

int cublasGetVersion_v2(struct handle *h, int *v)
{
    (void)h;
    *v = FAKECUBLAS_VERSION;
    return 0;
}

int cublasSetMathMode(struct handle *h, int mode)
{
    h->math_mode = mode;
    return 0;
}

int cublasSetPointerMode_v2(struct handle *h, int mode)
{
    h->pointer_mode = mode;
    return 0;
}

int cublasSetStream_v2(struct handle *h, void *s)
{
    h->stream = s;
    return 0;
}

/* C (m×n) = alpha op(A)·op(B) + beta C, column-major; beta 0 never reads C. */
int cublasSgemm_v2(struct handle *h, int ta, int tb, int m, int n, int k, const float *alpha,
                   const float *a, int lda, const float *b, int ldb, const float *beta, float *c,
                   int ldc)
{
    if (mode_is("gemm"))
        return 13; /* CUBLAS_STATUS_EXECUTION_FAILED */
    if (m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m ||
        lda < 1 || ldb < 1 || ldc < 1)
        return 7; /* CUBLAS_STATUS_INVALID_VALUE, as cuBLAS checks */
    fakecublas_gemm g = {ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta,
                         h->stream, h->math_mode, h->pointer_mode};
    pthread_mutex_lock(&lock);
    if (nlog < MAX_LOG)
        log_[nlog++] = g;
    pthread_mutex_unlock(&lock);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double x = ta ? a[(size_t)i * lda + l] : a[(size_t)l * lda + i];
                double y = tb ? b[(size_t)l * ldb + j] : b[(size_t)j * ldb + l];
                s += x * y;
            }
            float *out = &c[(size_t)j * ldc + i];
            double prev = *beta != 0.0f ? (double)*beta * *out : 0.0;
            *out = (float)((double)*alpha * s + prev);
        }
    return 0;
}
