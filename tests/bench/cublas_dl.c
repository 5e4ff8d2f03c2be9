/* SPDX-License-Identifier: MIT */
/*
 * cuBLAS through dlopen. The declarations below are the documented C API
 * (cublas_api.h, library_types.h) restated: handles are opaque pointers,
 * enums are ints, cudaStream_t is a pointer.
 *
 * Row-major to cuBLAS's column-major: a row-major R×C matrix is the
 * column-major C×R matrix (its transpose) with the same leading dimension.
 * So, with everything read as its transpose:
 *   grad_A = dC·Bᵀ    ⇔  grad_Aᵀ (K×M) = B(as N×K)ᵀ · dCᵀ(N×M)
 *                         = gemm(T, N, K, M, N, B, lda N, dC, ldb N, ldc K)
 *   grad_B = Aᵀ·dC    ⇔  grad_Bᵀ (N×K) = dCᵀ(N×M) · A(as K×M)ᵀ
 *                         = gemm(N, T, N, K, M, dC, lda N, A, ldb K, ldc N)
 */
#include "cublas_dl.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *cublasHandle_t;
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2 };
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum { CUBLAS_COMPUTE_32F = 68 };
enum { CUBLAS_GEMM_DEFAULT = -1 };

typedef int (*create_fn)(cublasHandle_t *);
typedef int (*destroy_fn)(cublasHandle_t);
typedef int (*version_fn)(cublasHandle_t, int *);
typedef int (*math_fn)(cublasHandle_t, int);
typedef int (*sgemm_fn)(cublasHandle_t, int, int, int, int, int, const float *, const float *,
                        int, const float *, int, const float *, float *, int);
typedef int (*gemmex_fn)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int,
                         int, const void *, int, int, const void *, void *, int, int, int, int);

struct cublas_dl {
    void *lib;
    char name[256];
    cublasHandle_t h;
    int version;
    destroy_fn destroy;
    math_fn set_math;
    sgemm_fn sgemm;
    gemmex_fn gemm_ex;
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int say(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const char *status_name(int s)
{
    switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

int cublas_dl_open(cublas_dl **out, char *err, size_t errlen)
{
    if (!out)
        return say(err, errlen, "cublas_dl_open: NULL argument");
    *out = NULL;
    const char *env = getenv("PGRT_LIBCUBLAS");
    const char *names[] = {env && *env ? env : NULL, "libcublas.so.13", "libcublas.so.12",
                           "libcublas.so"};
    void *lib = NULL;
    const char *opened = NULL;
    char last[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        if (!names[i])
            continue;
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib)
            opened = names[i];
        else
            snprintf(last, sizeof last, "%s", dlerror());
    }
    if (!lib)
        return say(err, errlen, "no cuBLAS: %s (PGRT_LIBCUBLAS names the library)", last);
    cublas_dl *c = calloc(1, sizeof *c);
    if (!c) {
        dlclose(lib);
        return say(err, errlen, "cublas_dl_open: out of memory");
    }
    c->lib = lib;
    snprintf(c->name, sizeof c->name, "%s", opened);
    create_fn create;
    version_fn version;
    void *p;
    /* memcpy: ISO C has no cast from void * to a function pointer. */
#define LOAD(var, name)                                                        \
    do {                                                                       \
        p = dlsym(lib, name);                                                    \
        if (!p) {                                                              \
            say(err, errlen, "%s has no %s", opened, name);                    \
            cublas_dl_close(&c);                                               \
            return -1;                                                         \
        }                                                                      \
        memcpy(&var, &p, sizeof var);                                          \
    } while (0)
    LOAD(create, "cublasCreate_v2");
    LOAD(c->destroy, "cublasDestroy_v2");
    LOAD(version, "cublasGetVersion_v2");
    LOAD(c->set_math, "cublasSetMathMode");
    LOAD(c->sgemm, "cublasSgemm_v2");
    LOAD(c->gemm_ex, "cublasGemmEx");
#undef LOAD
    int s = create(&c->h);
    if (s) {
        c->h = NULL;
        say(err, errlen, "cublasCreate_v2: %s", status_name(s));
        cublas_dl_close(&c);
        return -1;
    }
    if (version(c->h, &c->version))
        c->version = 0;
    *out = c;
    return 0;
}

void cublas_dl_close(cublas_dl **c)
{
    if (!c || !*c)
        return;
    if ((*c)->h && (*c)->destroy)
        (*c)->destroy((*c)->h);
    if ((*c)->lib)
        dlclose((*c)->lib);
    free(*c);
    *c = NULL;
}

int cublas_dl_version(const cublas_dl *c) { return c ? c->version : 0; }
const char *cublas_dl_name(const cublas_dl *c) { return c ? c->name : ""; }

static int check(int s, const char *what, char *err, size_t errlen)
{
    if (s)
        say(err, errlen, "%s: %s", what, status_name(s));
    return s;
}

static float *fptr(uint64_t p)
{
    float *f;
    memcpy(&f, &p, sizeof f);
    return f;
}

int cublas_dl_backward_a(cublas_dl *c, uint64_t grad_c, uint64_t b, uint64_t grad_a, int m, int n,
                         int k, float beta, char *err, size_t errlen)
{
    const float one = 1.0f;
    int s = c->set_math(c->h, CUBLAS_PEDANTIC_MATH);
    if (check(s, "cublasSetMathMode", err, errlen))
        return s;
    s = c->sgemm(c->h, CUBLAS_OP_T, CUBLAS_OP_N, k, m, n, &one, fptr(b), n, fptr(grad_c), n, &beta,
                 fptr(grad_a), k);
    return check(s, "cublasSgemm_v2", err, errlen);
}

int cublas_dl_backward_b(cublas_dl *c, uint64_t a, uint64_t grad_c, uint64_t grad_b, int m, int n,
                         int k, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    int s = c->set_math(c->h, CUBLAS_PEDANTIC_MATH);
    if (check(s, "cublasSetMathMode", err, errlen))
        return s;
    s = c->sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_T, n, k, m, &one, fptr(grad_c), n, fptr(a), k, &zero,
                 fptr(grad_b), n);
    return check(s, "cublasSgemm_v2", err, errlen);
}

int cublas_dl_f16_backward_a(cublas_dl *c, uint64_t grad_c_f16, uint64_t w_f16, uint64_t grad_a,
                             int m, int n, int k, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    int s = c->set_math(c->h, CUBLAS_DEFAULT_MATH);
    if (check(s, "cublasSetMathMode", err, errlen))
        return s;
    s = c->gemm_ex(c->h, CUBLAS_OP_T, CUBLAS_OP_N, k, m, n, &one, fptr(w_f16), CUDA_R_16F, n,
                   fptr(grad_c_f16), CUDA_R_16F, n, &zero, fptr(grad_a), CUDA_R_32F, k,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return check(s, "cublasGemmEx", err, errlen);
}

static int cuda_type(int t) { return t == 1 ? CUDA_R_16F : t == 2 ? CUDA_R_16BF : CUDA_R_32F; }

/* The layer layouts, read as transposes (see the top):
 *   forward     Yᵀ (N×M) = W(as K×N)ᵀ · Xᵀ
 *               gemm(T, N, N, M, K, W ld K, X ld K, ldc N)
 *   backward_x  dXᵀ (K×M) = Wᵀ(K×N) · dYᵀ(N×M)
 *               gemm(N, N, K, M, N, W ld K, dY ld N, ldc K)
 *   backward_w  dWᵀ (K×N) = Xᵀ(K×M) · dY(as N×M)ᵀ
 *               gemm(N, T, K, N, M, X ld K, dY ld N, ldc K) */
int cublas_dl_layer(cublas_dl *c, int layout, int in_type, int out_type, uint64_t a, uint64_t b,
                    uint64_t out, int m, int n, int k, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    int ta, tb, cm, cn, ck, lda, ldb, ldc;
    uint64_t pa, pb;
    if (layout == 0) {
        ta = CUBLAS_OP_T, tb = CUBLAS_OP_N, cm = n, cn = m, ck = k;
        pa = b, lda = k, pb = a, ldb = k, ldc = n;
    } else if (layout == 1) {
        ta = CUBLAS_OP_N, tb = CUBLAS_OP_N, cm = k, cn = m, ck = n;
        pa = b, lda = k, pb = a, ldb = n, ldc = k;
    } else {
        ta = CUBLAS_OP_N, tb = CUBLAS_OP_T, cm = k, cn = n, ck = m;
        pa = b, lda = k, pb = a, ldb = n, ldc = k;
    }
    int s = c->set_math(c->h, in_type == 0 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH);
    if (check(s, "cublasSetMathMode", err, errlen))
        return s;
    if (in_type == 0) {
        s = c->sgemm(c->h, ta, tb, cm, cn, ck, &one, fptr(pa), lda, fptr(pb), ldb, &zero,
                     fptr(out), ldc);
        return check(s, "cublasSgemm_v2", err, errlen);
    }
    s = c->gemm_ex(c->h, ta, tb, cm, cn, ck, &one, fptr(pa), cuda_type(in_type), lda, fptr(pb),
                   cuda_type(in_type), ldb, &zero, fptr(out), cuda_type(out_type), ldc,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return check(s, "cublasGemmEx", err, errlen);
}

int cublas_dl_gemm_ex(cublas_dl *c, int trans_a, int trans_b, int m, int n, int k, uint64_t a,
                      int a_type, int lda, uint64_t b, int b_type, int ldb, float beta, uint64_t cc,
                      int c_type, int ldc, char *err, size_t errlen)
{
    const float one = 1.0f;
    int s = c->set_math(c->h, CUBLAS_DEFAULT_MATH);
    if (check(s, "cublasSetMathMode", err, errlen))
        return s;
    s = c->gemm_ex(c->h, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                   m, n, k, &one, fptr(a), a_type, lda, fptr(b), b_type, ldb, &beta, fptr(cc),
                   c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return check(s, "cublasGemmEx", err, errlen);
}
