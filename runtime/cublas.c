/* SPDX-License-Identifier: MIT */
/*
 * cuBLAS, found at run time: dlopen of libcublas ($PGRT_LIBCUBLAS alone
 * when set, else libcublas.so.13, .so.12, .so.11, libcublas.so), one
 * handle a context, made on first need and destroyed with the context.
 *
 * No cuBLAS header: the few declarations below restate the documented C
 * API (cublas_api.h): the handle is an opaque pointer, enums are ints,
 * cudaStream_t is the driver's CUstream (the two are the same handle).
 *
 * The handle runs in CUBLAS_PEDANTIC_MATH: plain fp32, no TF32 and no
 * reduced-precision reductions. TF32 is what the seed had to turn off
 * after NaNs in transposed backward GEMMs on gradients near 1e5, and the
 * PTX kernels it stands in for are exact fp32 too.
 *
 * The library stays loaded once opened: it carries its own (static) CUDA
 * runtime, and unloading that under a live driver is nothing to rely on.
 */
#include "rt_blas.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cublas_ctx *cublas_handle;

enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUBLAS_PEDANTIC_MATH = 2 };
enum { CUBLAS_POINTER_MODE_HOST = 0 };

/* X(field, symbol, parameters); every entry returns cublasStatus_t. */
#define RT_BLAS_ENTRIES(X)                                                                    \
    X(create, "cublasCreate_v2", (cublas_handle * h))                                        \
    X(destroy, "cublasDestroy_v2", (cublas_handle h))                                        \
    X(get_version, "cublasGetVersion_v2", (cublas_handle h, int *version))                   \
    X(set_math_mode, "cublasSetMathMode", (cublas_handle h, int mode))                       \
    X(set_pointer_mode, "cublasSetPointerMode_v2", (cublas_handle h, int mode))              \
    X(set_stream, "cublasSetStream_v2", (cublas_handle h, CUstream s))                       \
    X(sgemm, "cublasSgemm_v2",                                                               \
      (cublas_handle h, int transa, int transb, int m, int n, int k, const float *alpha,    \
       const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc))

struct rt_blas {
    pthread_mutex_t lock; /* everything below; one cuBLAS call sequence at a time */
    bool enabled;
    const char *switched_by; /* what set `enabled` last, for the reason text */
    bool tried;              /* a load was attempted (once a context) */
    bool ready;              /* loaded, handle made */
    void *lib;
    char library[256];
    char reason[512];
    int version;
    double load_ms;
    uint64_t cublas_gemms, ptx_gemms;
    cublas_handle h;
#define RT_X_(field, sym, params) int(*field) params;
    RT_BLAS_ENTRIES(RT_X_)
#undef RT_X_
};

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
    default: return "CUBLAS_STATUS_UNRECOGNIZED";
    }
}

/* The context's state, made on first use; the switch starts from
 * $PTXGEN_CUBLAS ("0" turns cuBLAS off). */
/* The context's cuBLAS state, made on first use; NULL (with the runtime's
 * message set) when out of memory. */
static rt_blas *state_of(pgrt_ctx *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    rt_blas *b = ctx->blas;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || pthread_mutex_init(&b->lock, NULL) != 0) {
            pthread_mutex_unlock(&ctx->lock);
            free(b);
            rt_fail(PGRT_ENOMEM, "cuBLAS state: out of memory");
            return NULL;
        }
        const char *env = getenv("PTXGEN_CUBLAS");
        b->enabled = !(env && strcmp(env, "0") == 0);
        b->switched_by = b->enabled ? NULL : "PTXGEN_CUBLAS=0";
        ctx->blas = b;
    }
    pthread_mutex_unlock(&ctx->lock);
    return b;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void set_reason(rt_blas *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->reason, sizeof b->reason, fmt, ap);
    va_end(ap);
}

static void append_reason(rt_blas *b, const char *text)
{
    size_t used = strlen(b->reason);
    if (used + 1 < sizeof b->reason)
        snprintf(b->reason + used, sizeof b->reason - used, "%s%s", used ? "; " : "", text);
}

/* Open the library and make the handle; on failure b->reason says why and
 * the context simply has no cuBLAS. Called with b->lock held. */
static void load(pgrt_ctx *ctx, rt_blas *b)
{
    double t0 = rt_now_ms();
    b->tried = true;
    b->reason[0] = '\0';
    const char *env = getenv("PGRT_LIBCUBLAS");
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                        "libcublas.so"};
    const char *one[1] = {env};
    const char *const *list = env && *env ? one : names;
    size_t count = env && *env ? 1 : sizeof names / sizeof names[0];
    void *lib = NULL;
    for (size_t i = 0; i < count && !lib; i++) {
        lib = dlopen(list[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            snprintf(b->library, sizeof b->library, "%s", list[i]);
        } else {
            const char *e = dlerror();
            append_reason(b, e ? e : list[i]);
        }
    }
    if (!lib) {
        char tail[sizeof b->reason];
        snprintf(tail, sizeof tail, "%s", b->reason);
        set_reason(b, "no cuBLAS library (%s)%s", tail,
                   env && *env ? "" : "; PGRT_LIBCUBLAS names one");
        b->load_ms = rt_now_ms() - t0;
        return;
    }
    /* ISO C has no conversion from void * to a function pointer: copy bits. */
#define RT_X_(field, sym, params)                                                            \
    {                                                                                        \
        void *p_ = dlsym(lib, sym);                                                          \
        if (!p_) {                                                                           \
            set_reason(b, "%s has no %s: not a usable cuBLAS", b->library, sym);             \
            dlclose(lib);                                                                    \
            b->library[0] = '\0';                                                            \
            b->load_ms = rt_now_ms() - t0;                                                   \
            return;                                                                          \
        }                                                                                    \
        memcpy(&b->field, &p_, sizeof b->field);                                             \
    }
    RT_BLAS_ENTRIES(RT_X_)
#undef RT_X_
    b->lib = lib;

    /* The handle belongs to the device whose context is current. */
    if (rt_ctx_bind(ctx) != 0) {
        set_reason(b, "%s: making the context current failed: %s", b->library,
                   pgrt_last_message());
        b->load_ms = rt_now_ms() - t0;
        return;
    }
    int s = b->create(&b->h);
    if (s != 0) {
        b->h = NULL;
        set_reason(b, "%s: cublasCreate_v2: %s", b->library, status_name(s));
        b->load_ms = rt_now_ms() - t0;
        return;
    }
    const char *call = "cublasSetMathMode(CUBLAS_PEDANTIC_MATH)";
    s = b->set_math_mode(b->h, CUBLAS_PEDANTIC_MATH);
    if (s == 0) {
        call = "cublasSetPointerMode_v2";
        s = b->set_pointer_mode(b->h, CUBLAS_POINTER_MODE_HOST);
    }
    if (s != 0) {
        set_reason(b, "%s: %s: %s", b->library, call, status_name(s));
        (void)b->destroy(b->h); /* the first failure is the one reported */
        b->h = NULL;
        b->load_ms = rt_now_ms() - t0;
        return;
    }
    if (b->get_version(b->h, &b->version) != 0)
        b->version = 0;
    b->ready = true;
    b->load_ms = rt_now_ms() - t0;
}

int rt_blas_ready(pgrt_ctx *ctx, CUstream check, bool *use)
{
    *use = false;
    rt_blas *b = state_of(ctx);
    if (!b)
        return PGRT_ENOMEM;
    int rc;
    pthread_mutex_lock(&b->lock);
    if (b->enabled && !b->tried) {
        /* Making a handle allocates device memory: never inside a capture,
         * where it would also differ from the eager run's GEMMs. */
        int status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (atomic_load(&ctx->capturing) == 0 && check && ctx->drv.StreamIsCapturing &&
            (rc = RT_CU(&ctx->drv, StreamIsCapturing, (check, &status)))) {
            pthread_mutex_unlock(&b->lock);
            return rc;
        }
        if (atomic_load(&ctx->capturing) > 0 || status != CU_STREAM_CAPTURE_STATUS_NONE) {
            pthread_mutex_unlock(&b->lock);
            return rt_fail(PGRT_ECAPTURE,
                           "cuBLAS is not loaded yet and a stream is capturing: loading it "
                           "during capture is refused; call pgrt_prewarm_model or "
                           "pgrt_cublas_info_get first (or turn cuBLAS off)");
        }
        load(ctx, b);
    }
    *use = b->enabled && b->ready;
    pthread_mutex_unlock(&b->lock);
    return 0;
}

void rt_blas_count_ptx(pgrt_ctx *ctx)
{
    rt_blas *b = state_of(ctx);
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    b->ptx_gemms++;
    pthread_mutex_unlock(&b->lock);
}

int rt_blas_sgemm(pgrt_ctx *ctx, pgrt_stream *s, bool trans_a, bool trans_b, int m, int n, int k,
                  CUdeviceptr a, int lda, CUdeviceptr b_, int ldb, float beta, CUdeviceptr c,
                  int ldc, const char *what)
{
    rt_blas *b = state_of(ctx);
    if (!b)
        return PGRT_ENOMEM;
    int rc;
    pthread_mutex_lock(&b->lock);
    if (!b->ready) {
        pthread_mutex_unlock(&b->lock);
        return rt_fail(PGRT_ESTATE, "%s: cuBLAS is not loaded", what);
    }
    if ((rc = rt_ctx_bind(ctx))) {
        pthread_mutex_unlock(&b->lock);
        return rc;
    }
    /* The handle is shared by every stream of the context: bind it to this
     * call's stream each time, under the lock, so that the GEMM is ordered
     * on the stream the caller named. */
    const char *call = "cublasSetStream_v2";
    int st = b->set_stream(b->h, rt_stream_cu(s));
    if (st == 0) {
        call = "cublasSgemm_v2";
        const float one = 1.0f;
        const float *pa, *pb;
        float *pc;
        memcpy(&pa, &a, sizeof pa);
        memcpy(&pb, &b_, sizeof pb);
        memcpy(&pc, &c, sizeof pc);
        st = b->sgemm(b->h, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                      m, n, k, &one, pa, lda, pb, ldb, &beta, pc, ldc);
    }
    if (st == 0)
        b->cublas_gemms++;
    pthread_mutex_unlock(&b->lock);
    if (st != 0)
        return rt_fail(PGRT_ECUDA, "%s: %s (%s; cuBLAS m=%d n=%d k=%d, %s)", call, status_name(st),
                       what, m, n, k, b->library);
    return 0;
}

void rt_blas_destroy(pgrt_ctx *ctx)
{
    rt_blas *b = ctx->blas;
    if (!b)
        return;
    ctx->blas = NULL;
    /* Teardown has nobody to report to. */
    if (b->h)
        (void)b->destroy(b->h);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* ---------------------------------------------------------------- public */

int pgrt_ctx_set_cublas(pgrt_ctx *ctx, bool enabled)
{
    RT_NONNULL(__func__, ctx, "ctx");
    rt_blas *b = state_of(ctx);
    if (!b)
        return PGRT_ENOMEM;
    pthread_mutex_lock(&b->lock);
    b->enabled = enabled;
    b->switched_by = enabled ? NULL : "pgrt_ctx_set_cublas(ctx, false)";
    pthread_mutex_unlock(&b->lock);
    return 0;
}

int pgrt_cublas_info_get(pgrt_ctx *ctx, pgrt_cublas_info *out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    memset(out, 0, sizeof *out);
    bool use;
    int rc = rt_blas_ready(ctx, NULL, &use);
    if (rc)
        return rc;
    rt_blas *b = ctx->blas; /* made by rt_blas_ready, lives as long as ctx */
    pthread_mutex_lock(&b->lock);
    out->enabled = b->enabled;
    out->available = b->ready;
    out->in_use = b->enabled && b->ready;
    out->version = b->version;
    out->load_ms = b->load_ms;
    out->cublas_gemms = b->cublas_gemms;
    out->ptx_gemms = b->ptx_gemms;
    snprintf(out->library, sizeof out->library, "%s", b->ready ? b->library : "");
    if (!b->enabled)
        snprintf(out->reason, sizeof out->reason, "turned off by %s%s",
                 b->switched_by ? b->switched_by : "the context's switch",
                 b->tried ? "" : " (not loaded)");
    else if (!b->ready)
        snprintf(out->reason, sizeof out->reason, "%s", b->reason);
    pthread_mutex_unlock(&b->lock);
    return 0;
}
