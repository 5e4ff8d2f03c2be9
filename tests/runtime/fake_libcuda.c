/* SPDX-License-Identifier: MIT */
/*
 * The fake driver described in fakecuda.h. Built twice: with
 * cuGetProcAddress_v2 (a CUDA 12 driver) and without it (FAKECUDA_NO_GETPROC:
 * a driver from before 11.3, reached through dlsym of the _v2 names).
 */
#include "fakecuda.h"
#include "rt_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_API __attribute__((visibility("default")))
#define MAX_LOG 8192

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fakecuda_launch log_[MAX_LOG];
static int nlog;
static atomic_int loads, direct_loads, live_allocs, live_modules, tmaps;
#define MAX_ATTR_LOG 256
static fakecuda_attr_set attr_log[MAX_ATTR_LOG];
static int nattr;
static atomic_int loads, direct_loads, live_allocs, live_modules;
static atomic_int links, cubin_loads, bad_cubins, in_jit, max_in_jit, ex_loads;

static const char *mode(void)
{
    const char *m = getenv("FAKECUDA");
    return m ? m : "";
}
static bool stub(void) { return strcmp(mode(), "stub") == 0; }
static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

/* ---------------------------------------------------------------- recording API */

FAKE_API void fakecuda_reset(void);
FAKE_API int fakecuda_launch_count(void);
FAKE_API const fakecuda_launch *fakecuda_launch_at(int i);
FAKE_API int fakecuda_loads(void);
FAKE_API int fakecuda_ex_loads(void);
FAKE_API int fakecuda_direct_loads(void);
FAKE_API int fakecuda_live_allocs(void);
FAKE_API int fakecuda_live_modules(void);
FAKE_API int fakecuda_attr_count(void);
FAKE_API const fakecuda_attr_set *fakecuda_attr_at(int i);
FAKE_API int fakecuda_tmap_count(void);
FAKE_API int fakecuda_links(void);
FAKE_API int fakecuda_cubin_loads(void);
FAKE_API int fakecuda_bad_cubins(void);
FAKE_API int fakecuda_max_concurrent_jits(void);

void fakecuda_reset(void)
{
    pthread_mutex_lock(&lock);
    nlog = 0;
    nattr = 0;
    pthread_mutex_unlock(&lock);
    atomic_store(&tmaps, 0);
    atomic_store(&loads, 0);
    atomic_store(&direct_loads, 0);
    atomic_store(&links, 0);
    atomic_store(&ex_loads, 0);
    atomic_store(&cubin_loads, 0);
    atomic_store(&bad_cubins, 0);
    atomic_store(&max_in_jit, 0);
}
int fakecuda_launch_count(void) { return nlog; }
const fakecuda_launch *fakecuda_launch_at(int i) { return i >= 0 && i < nlog ? &log_[i] : NULL; }
int fakecuda_loads(void) { return atomic_load(&loads); }
int fakecuda_ex_loads(void) { return atomic_load(&ex_loads); }
int fakecuda_direct_loads(void) { return atomic_load(&direct_loads); }
int fakecuda_live_allocs(void) { return atomic_load(&live_allocs); }
int fakecuda_live_modules(void) { return atomic_load(&live_modules); }
int fakecuda_attr_count(void) { return nattr; }
const fakecuda_attr_set *fakecuda_attr_at(int i)
{
    return i >= 0 && i < nattr ? &attr_log[i] : NULL;
}
int fakecuda_tmap_count(void) { return atomic_load(&tmaps); }
int fakecuda_links(void) { return atomic_load(&links); }
int fakecuda_cubin_loads(void) { return atomic_load(&cubin_loads); }
int fakecuda_bad_cubins(void) { return atomic_load(&bad_cubins); }
int fakecuda_max_concurrent_jits(void) { return atomic_load(&max_in_jit); }

static void record(const fakecuda_launch *l)
{
    pthread_mutex_lock(&lock);
    if (nlog < MAX_LOG)
        log_[nlog++] = *l;
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- objects */

struct CUmod_st {
    char *ptx;
};
struct CUfunc_st {
    char name[64];
    int nparams;
    int sizes[FAKECUDA_MAX_PARAMS];
    int max_dynamic_shared; /* cuFuncSetAttribute's; 0: the default */
};
#define MAX_FUNCS 64
typedef struct fmodule {
    struct CUmod_st m;
    struct CUfunc_st funcs[MAX_FUNCS];
    int nfuncs;
} fmodule;
struct CUstream_st {
    int capturing, invalidated;
    fakecuda_launch *cap;
    int ncap;
};
struct CUgraph_st {
    fakecuda_launch *l;
    int n;
};
struct CUgraphExec_st {
    fakecuda_launch *l;
    int n;
};
struct CUevent_st {
    int recorded;
};
struct CUctx_st {
    int dummy;
};
static struct CUctx_st the_ctx;
static _Thread_local CUcontext current;

#define STUB_CHECK()                                                           \
    do {                                                                       \
        if (stub())                                                            \
            return CUDA_ERROR_STUB_LIBRARY;                                    \
    } while (0)

/* ---------------------------------------------------------------- entry points */

/* The variant with cuGetProcAddress reaches its entry points only through
 * it, so that one it hides (FAKECUDA_HIDE) or dates after its version is
 * really missing; the variant without exports them as old drivers do. */
#ifdef FAKECUDA_NO_GETPROC
/* Exports as a driver has them: no header declares them here. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#define E(name) FAKE_API CUresult name
#else
#define E(name) static CUresult name
#endif

E(cuGetErrorName)(CUresult e, const char **s)
{
    if (e == 4242) {
        *s = "CUDA_ERROR_FAKE_NEW_CODE";
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}
E(cuInit)(unsigned flags)
{
    (void)flags;
    STUB_CHECK();
    if (strcmp(mode(), "nodevice") == 0)
        return CUDA_ERROR_NO_DEVICE;
    return CUDA_SUCCESS;
}
E(cuDriverGetVersion)(int *v)
{
    STUB_CHECK();
    *v = env_int("FAKECUDA_VERSION", 12080);
    return CUDA_SUCCESS;
}
E(cuDeviceGetCount)(int *n)
{
    STUB_CHECK();
    *n = strcmp(mode(), "zero") == 0 ? 0 : 1;
    return CUDA_SUCCESS;
}
E(cuDeviceGet)(CUdevice *d, int ordinal)
{
    STUB_CHECK();
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
E(cuDeviceGetName)(char *name, int len, CUdevice d)
{
    (void)d;
    snprintf(name, (size_t)len, "Fake GPU");
    return CUDA_SUCCESS;
}
E(cuDeviceGetAttribute)(int *v, int attr, CUdevice d)
{
    (void)d;
    int cc = env_int("FAKECUDA_CC", 90);
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *v = cc / 10;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *v = cc % 10;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *v = 4;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *v = env_int("FAKECUDA_SMEM_OPTIN", 232448);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}
E(cuDeviceTotalMem_v2)(size_t *b, CUdevice d)
{
    (void)d;
    *b = (size_t)2 << 30;
    return CUDA_SUCCESS;
}
E(cuDevicePrimaryCtxRetain)(CUcontext *c, CUdevice d)
{
    (void)d;
    *c = &the_ctx;
    return CUDA_SUCCESS;
}
E(cuDevicePrimaryCtxRelease_v2)(CUdevice d)
{
    (void)d;
    return CUDA_SUCCESS;
}
E(cuCtxSetCurrent)(CUcontext c)
{
    current = c;
    return CUDA_SUCCESS;
}
E(cuCtxGetCurrent)(CUcontext *c)
{
    *c = current;
    return CUDA_SUCCESS;
}
E(cuCtxSynchronize)(void)
{
    if (strcmp(mode(), "weird") == 0)
        return 4242; /* a code newer than the runtime's table */
    return current ? CUDA_SUCCESS : 201; /* INVALID_CONTEXT */
}
E(cuMemGetInfo_v2)(size_t *f, size_t *t)
{
    *f = (size_t)1 << 30;
    *t = (size_t)2 << 30;
    return CUDA_SUCCESS;
}

/* A JIT: FAKECUDA_JIT_US of sleep, and the most JITs seen in flight at
 * once (the pre-warm's pool must overlap them). */
static void jit_delay(void)
{
    int now = atomic_fetch_add(&in_jit, 1) + 1;
    int max = atomic_load(&max_in_jit);
    while (now > max && !atomic_compare_exchange_weak(&max_in_jit, &max, now))
        ;
    int us = env_int("FAKECUDA_JIT_US", 0);
    if (us > 0) {
        struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_sub(&in_jit, 1);
}

/* jit: the image is PTX to compile (FAKECUDA_JIT_US applies), not a
 * cubin. */
static CUresult load(CUmodule *m, const void *image, bool jit)
{
    if (!current)
        return 201;
    if (jit)
        jit_delay();
    const char *ptx = image;
    fmodule *f = calloc(1, sizeof *f);
    size_t n = strlen(ptx) + 1;
    f->m.ptx = malloc(n);
    memcpy(f->m.ptx, ptx, n);
    *m = &f->m;
    atomic_fetch_add(&live_modules, 1);
    return CUDA_SUCCESS;
}

static CUresult load_cubin(CUmodule *m, const char *image);

E(cuModuleLoadData)(CUmodule *m, const void *image)
{
    if (strncmp(image, FAKECUDA_CUBIN_MAGIC, sizeof FAKECUDA_CUBIN_MAGIC - 1) == 0)
        return load_cubin(m, image);
    if (strstr(image, "BROKEN"))
        return CUDA_ERROR_INVALID_PTX;
    CUresult r = load(m, image, true);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&direct_loads, 1);
    return r;
}
E(cuModuleLoadDataEx)(CUmodule *m, const void *image, unsigned nopts, CUjit_option *opts,
                      void **vals)
{
    char *elog = NULL;
    size_t elen = 0;
    for (unsigned i = 0; i < nopts; i++) {
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            elog = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            elen = (size_t)(uintptr_t)vals[i];
    }
    if (strstr(image, "BROKEN")) {
        if (elog && elen)
            snprintf(elog, elen, "ptxas application ptx input, line 7; error   : Unknown symbol "
                                 "'BROKEN'\nptxas fatal   : Ptx assembly aborted due to errors\n");
        return CUDA_ERROR_INVALID_PTX;
    }
    CUresult r = load(m, image, true);
    if (r == CUDA_SUCCESS) {
        atomic_fetch_add(&loads, 1);
        atomic_fetch_add(&ex_loads, 1);
    }
    return r;
}

/* The linker: a "cubin" is FAKECUDA_CUBIN_MAGIC, the PTX and a trailer
 * line with the PTX's length, so that a cubin cut short or altered is
 * noticed when it is loaded (and counted: the runtime must never hand one
 * over). */
typedef struct CUlinkState_st {
    char *ptx;
    char *cubin;
    char *elog;
    size_t elen;
} link_state;

E(cuLinkCreate_v2)(unsigned nopts, CUjit_option *opts, void **vals, CUlinkState *out)
{
    if (!current)
        return 201; /* the context must be current on the calling thread */
    link_state *st = calloc(1, sizeof *st);
    for (unsigned i = 0; i < nopts; i++) {
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            st->elog = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            st->elen = (size_t)(uintptr_t)vals[i];
    }
    *out = st;
    return CUDA_SUCCESS;
}
E(cuLinkAddData_v2)(CUlinkState st, int type, void *data, size_t size, const char *name,
                    unsigned nopts, CUjit_option *opts, void **vals)
{
    (void)name, (void)nopts, (void)opts, (void)vals;
    if (!current)
        return 201;
    if (type != CU_JIT_INPUT_PTX || st->ptx || size == 0 || ((char *)data)[size - 1] != '\0')
        return CUDA_ERROR_INVALID_VALUE;
    if (strstr(data, "BROKEN")) {
        if (st->elog && st->elen)
            snprintf(st->elog, st->elen, "ptxas application ptx input, line 7; error   : Unknown "
                                         "symbol 'BROKEN'\nptxas fatal   : Ptx assembly aborted "
                                         "due to errors\n");
        return CUDA_ERROR_INVALID_PTX;
    }
    st->ptx = malloc(size);
    memcpy(st->ptx, data, size);
    return CUDA_SUCCESS;
}
E(cuLinkComplete)(CUlinkState st, void **cubin, size_t *size)
{
    if (!current)
        return 201;
    if (!st->ptx)
        return CUDA_ERROR_INVALID_VALUE;
    jit_delay();
    size_t n = strlen(st->ptx);
    size_t len = sizeof FAKECUDA_CUBIN_MAGIC - 1 + n + 32;
    st->cubin = malloc(len);
    int w = snprintf(st->cubin, len, "%s%s\n#len %zu\n", FAKECUDA_CUBIN_MAGIC, st->ptx, n);
    *cubin = st->cubin;
    *size = (size_t)w + 1;
    atomic_fetch_add(&links, 1);
    atomic_fetch_add(&loads, 1); /* a JIT, as cuModuleLoadDataEx's */
    return CUDA_SUCCESS;
}
E(cuLinkDestroy)(CUlinkState st)
{
    free(st->ptx);
    free(st->cubin);
    free(st);
    return CUDA_SUCCESS;
}

static CUresult load_cubin(CUmodule *m, const char *image)
{
    const char *ptx = image + sizeof FAKECUDA_CUBIN_MAGIC - 1;
    const char *tr = strstr(ptx, "\n#len ");
    size_t want;
    if (!tr || sscanf(tr, "\n#len %zu", &want) != 1 || want != (size_t)(tr - ptx)) {
        atomic_fetch_add(&bad_cubins, 1);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    CUresult r = load(m, ptx, false);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&cubin_loads, 1);
    return r;
}

static int type_size(const char *t)
{
    if (!strncmp(t, "u64", 3) || !strncmp(t, "s64", 3) || !strncmp(t, "b64", 3) ||
        !strncmp(t, "f64", 3))
        return 8;
    if (!strncmp(t, "u16", 3) || !strncmp(t, "s16", 3) || !strncmp(t, "b16", 3) ||
        !strncmp(t, "f16", 3))
        return 2;
    if (!strncmp(t, "u8", 2) || !strncmp(t, "s8", 2) || !strncmp(t, "b8", 2))
        return 1;
    return 4;
}

/* The size of the parameter declared at p (just past ".param "):
 * "u32 n", ".align 64 .b8 tmap[128]". */
static int param_size(const char *p)
{
    if (!strncmp(p, ".align", 6)) {
        p += 6;
        while (*p == ' ' || (*p >= '0' && *p <= '9'))
            p++;
    }
    if (*p == '.')
        p++;
    int size = type_size(p);
    const char *stop = strpbrk(p, ",)");
    const char *br = strchr(p, '[');
    if (br && (!stop || br < stop))
        size *= atoi(br + 1);
    return size;
}

E(cuModuleGetFunction)(CUfunction *fn, CUmodule m, const char *name)
{
    fmodule *f = (fmodule *)(void *)m;
    char pat[80];
    snprintf(pat, sizeof pat, ".entry %s(", name);
    const char *p = strstr(f->m.ptx, pat);
    if (!p || f->nfuncs == MAX_FUNCS)
        return CUDA_ERROR_NOT_FOUND;
    struct CUfunc_st *fu = &f->funcs[f->nfuncs++];
    snprintf(fu->name, sizeof fu->name, "%s", name);
    const char *end = strchr(p, ')');
    for (const char *q = strstr(p, ".param ."); q && q < end && fu->nparams < FAKECUDA_MAX_PARAMS;
         q = strstr(q + 1, ".param ."))
        fu->sizes[fu->nparams++] = param_size(q + 7);
    *fn = fu;
    return CUDA_SUCCESS;
}
E(cuModuleUnload)(CUmodule m)
{
    free(m->ptx);
    free(m);
    atomic_fetch_sub(&live_modules, 1);
    return CUDA_SUCCESS;
}
E(cuFuncSetAttribute)(CUfunction fn, int attr, int value)
{
    pthread_mutex_lock(&lock);
    if (nattr < MAX_ATTR_LOG) {
        fakecuda_attr_set *a = &attr_log[nattr++];
        snprintf(a->name, sizeof a->name, "%s", fn->name);
        a->attr = attr;
        a->value = value;
    }
    pthread_mutex_unlock(&lock);
    if (attr != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        return CUDA_SUCCESS;
    if (value < 0 ||
        value + env_int("FAKECUDA_STATIC_SMEM", 0) > env_int("FAKECUDA_SMEM_OPTIN", 232448))
        return CUDA_ERROR_INVALID_VALUE;
    fn->max_dynamic_shared = value;
    return CUDA_SUCCESS;
}
E(cuFuncGetAttribute)(int *value, int attr, CUfunction fn)
{
    switch (attr) {
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *value = env_int("FAKECUDA_STATIC_SMEM", 0);
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *value = fn->max_dynamic_shared ? fn->max_dynamic_shared
                                        : 48 * 1024 - env_int("FAKECUDA_STATIC_SMEM", 0);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

E(cuMemAlloc_v2)(CUdeviceptr *p, size_t bytes)
{
    if (bytes > ((size_t)1 << 32))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = calloc(1, bytes);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    atomic_fetch_add(&live_allocs, 1);
    return CUDA_SUCCESS;
}
E(cuMemFree_v2)(CUdeviceptr p)
{
    free((void *)(uintptr_t)p);
    atomic_fetch_sub(&live_allocs, 1);
    return CUDA_SUCCESS;
}
#define DEV(p) ((void *)(uintptr_t)(p))
E(cuMemcpyHtoD_v2)(CUdeviceptr d, const void *s, size_t n)
{
    memcpy(DEV(d), s, n);
    return CUDA_SUCCESS;
}
E(cuMemcpyDtoH_v2)(void *d, CUdeviceptr s, size_t n)
{
    memcpy(d, DEV(s), n);
    return CUDA_SUCCESS;
}
E(cuMemcpyDtoD_v2)(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    memmove(DEV(d), DEV(s), n);
    return CUDA_SUCCESS;
}
E(cuMemcpyHtoDAsync_v2)(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
    (void)st;
    memcpy(DEV(d), s, n);
    return CUDA_SUCCESS;
}
E(cuMemcpyDtoHAsync_v2)(void *d, CUdeviceptr s, size_t n, CUstream st)
{
    (void)st;
    memcpy(d, DEV(s), n);
    return CUDA_SUCCESS;
}
E(cuMemcpyDtoDAsync_v2)(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    (void)st;
    memmove(DEV(d), DEV(s), n);
    return CUDA_SUCCESS;
}
E(cuMemsetD8_v2)(CUdeviceptr d, unsigned char v, size_t n)
{
    memset(DEV(d), v, n);
    return CUDA_SUCCESS;
}
E(cuMemsetD32_v2)(CUdeviceptr d, unsigned v, size_t n)
{
    uint32_t *p = DEV(d);
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return CUDA_SUCCESS;
}
E(cuMemsetD8Async)(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    (void)s;
    return cuMemsetD8_v2(d, v, n);
}
E(cuMemsetD32Async)(CUdeviceptr d, unsigned v, size_t n, CUstream s)
{
    (void)s;
    return cuMemsetD32_v2(d, v, n);
}

E(cuStreamCreate)(CUstream *s, unsigned flags)
{
    (void)flags;
    *s = calloc(1, sizeof **s);
    return CUDA_SUCCESS;
}
E(cuStreamDestroy_v2)(CUstream s)
{
    free(s->cap);
    free(s);
    return CUDA_SUCCESS;
}
E(cuStreamSynchronize)(CUstream s)
{
    if (s && s->capturing) {
        s->invalidated = 1;
        return 900; /* STREAM_CAPTURE_UNSUPPORTED, and the capture is lost */
    }
    return CUDA_SUCCESS;
}
/* $FAKECUDA_BUSY_QUERIES: that many cuStreamQuery calls answer
 * CUDA_ERROR_NOT_READY (600) before the stream reads idle; -1: always busy. */
E(cuStreamQuery)(CUstream s)
{
    (void)s;
    static atomic_int queries;
    int busy = env_int("FAKECUDA_BUSY_QUERIES", 0);
    if (busy < 0 || atomic_fetch_add(&queries, 1) < busy)
        return 600;
    return CUDA_SUCCESS;
}
E(cuStreamWaitEvent)(CUstream s, CUevent e, unsigned flags)
{
    (void)s;
    (void)e;
    return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
E(cuStreamIsCapturing)(CUstream s, int *status)
{
    *status = s && s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
E(cuStreamBeginCapture_v2)(CUstream s, int mode_)
{
    if (!s || s->capturing || mode_ != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        return 401; /* ILLEGAL_STATE */
    s->capturing = 1;
    s->invalidated = 0;
    s->ncap = 0;
    return CUDA_SUCCESS;
}
E(cuStreamEndCapture)(CUstream s, CUgraph *g)
{
    if (!s || !s->capturing)
        return 401;
    s->capturing = 0;
    if (s->invalidated) {
        free(s->cap);
        s->cap = NULL;
        s->ncap = 0;
        *g = NULL;
        return 901; /* STREAM_CAPTURE_INVALIDATED */
    }
    CUgraph gr = calloc(1, sizeof *gr);
    gr->l = s->cap;
    gr->n = s->ncap;
    s->cap = NULL;
    s->ncap = 0;
    *g = gr;
    return CUDA_SUCCESS;
}

E(cuEventCreate)(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof **e);
    return CUDA_SUCCESS;
}
E(cuEventDestroy_v2)(CUevent e)
{
    free(e);
    return CUDA_SUCCESS;
}
E(cuEventRecord)(CUevent e, CUstream s)
{
    (void)s;
    e->recorded = 1;
    return CUDA_SUCCESS;
}
E(cuEventSynchronize)(CUevent e) { return e->recorded ? CUDA_SUCCESS : CUDA_SUCCESS; }
E(cuEventElapsedTime)(float *ms, CUevent a, CUevent b)
{
    if (!a->recorded || !b->recorded)
        return 400; /* INVALID_HANDLE */
    *ms = 0.5f;
    return CUDA_SUCCESS;
}

/* The clip kernels, run on the host so that a pipeline's data flow can be
 * followed without a GPU. Not the kernels' arithmetic order: sums are in
 * double, rounded once. */
static float f32_param(uint64_t bits)
{
    float f;
    uint32_t u = (uint32_t)bits;
    memcpy(&f, &u, 4);
    return f;
}

static void emulate(const fakecuda_launch *l);

/* The _multi kernels: per table entry {u64 ptr; u32 n; u32 first_block},
 * the per-buffer launch with that entry's blocks (up to the next entry's
 * first block, or the grid). The sum writes its slice of the partials. */
static void emulate_multi(const fakecuda_launch *l, const char *single)
{
    const unsigned char *table = DEV(l->params[0]);
    uint64_t nbufs = l->params[1];
    for (uint64_t e = 0; e < nbufs; e++) {
        uint64_t ptr;
        uint32_t n, first, end = l->grid[0];
        memcpy(&ptr, table + 16 * e, 8);
        memcpy(&n, table + 16 * e + 8, 4);
        memcpy(&first, table + 16 * e + 12, 4);
        if (e + 1 < nbufs)
            memcpy(&end, table + 16 * (e + 1) + 12, 4);
        fakecuda_launch one = *l;
        snprintf(one.name, sizeof one.name, "%s", single);
        one.grid[0] = end - first;
        one.params[0] = ptr;
        one.sizes[0] = 8;
        one.params[1] = l->params[2];
        one.sizes[1] = 8;
        if (!strcmp(single, "squared_sum_reduce"))
            one.params[1] += (uint64_t)first * sizeof(float);
        one.params[2] = n;
        one.sizes[2] = 4;
        emulate(&one);
    }
}

static void emulate(const fakecuda_launch *l)
{
    if (!strcmp(l->name, "squared_sum_reduce_multi")) {
        emulate_multi(l, "squared_sum_reduce");
    } else if (!strcmp(l->name, "gradient_clip_gpu_scale_multi")) {
        emulate_multi(l, "gradient_clip_gpu_scale");
    } else if (!strcmp(l->name, "squared_sum_reduce")) {
        const float *x = DEV(l->params[0]);
        float *out = DEV(l->params[1]);
        uint64_t n = l->params[2], threads = l->block[0], blocks = l->grid[0];
        for (uint64_t b = 0; b < blocks; b++) {
            double sum = 0;
            for (uint64_t i = b * threads; i < n; i += threads * blocks)
                for (uint64_t t = 0; t < threads && i + t < n; t++)
                    sum += (double)x[i + t] * (double)x[i + t];
            out[b] = (float)sum;
        }
    } else if (!strcmp(l->name, "clip_scale_reduce")) {
        const float *p = DEV(l->params[0]);
        float *out = DEV(l->params[3]);
        double sum = 0;
        for (uint64_t i = 0; i < l->params[1]; i++)
            sum += p[i];
        float norm = sqrtf((float)sum), max_norm = f32_param(l->params[2]);
        float scale = fminf(1.0f, max_norm / norm);
        out[0] = isfinite(norm) ? scale : 1.0f;
        out[1] = norm;
    } else if (!strcmp(l->name, "gradient_clip_gpu_scale") || !strcmp(l->name, "gradient_clip")) {
        float *g = DEV(l->params[0]);
        float sc = l->sizes[1] == 8 ? *(const float *)DEV(l->params[1]) : f32_param(l->params[1]);
        if (l->sizes[1] == 8 && fabsf(sc - 1.0f) < 1e-7f)
            return;
        for (uint64_t i = 0; i < l->params[2]; i++)
            g[i] *= sc;
    }
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, CUstream s, void **params, int ex, const unsigned cluster[3])
{
    if (!current)
        return 201;
    int allowed = f->max_dynamic_shared ? f->max_dynamic_shared
                                        : 48 * 1024 - env_int("FAKECUDA_STATIC_SMEM", 0);
    if ((int)shared > allowed)
        return CUDA_ERROR_INVALID_VALUE;
    fakecuda_launch l;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", f->name);
    for (int i = 0; i < 3; i++) {
        l.grid[i] = grid[i];
        l.block[i] = block[i];
        l.cluster[i] = cluster ? cluster[i] : 0;
    }
    l.shared = shared;
    l.stream = s;
    l.ex = ex;
    l.nparams = f->nparams;
    for (int i = 0; i < f->nparams; i++) {
        l.sizes[i] = f->sizes[i];
        if (f->sizes[i] <= 8) {
            memcpy(&l.params[i], params[i], (size_t)f->sizes[i]);
            continue;
        }
        memcpy(&l.params[i], params[i], 8);
        if (l.nbig < FAKECUDA_MAX_BIG && f->sizes[i] <= 128) {
            l.big_index[l.nbig] = i;
            memcpy(l.big[l.nbig++], params[i], (size_t)f->sizes[i]);
        }
    }
    if (s && s->capturing) {
        s->cap = realloc(s->cap, (size_t)(s->ncap + 1) * sizeof *s->cap);
        s->cap[s->ncap++] = l;
        return CUDA_SUCCESS;
    }
    emulate(&l);
    record(&l);
    return CUDA_SUCCESS;
}

E(cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared, CUstream s, void **params, void **extra)
{
    (void)extra;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, shared, s, params, 0, NULL);
}

E(cuLaunchKernelEx)(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    (void)extra;
    const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
    const unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    unsigned cluster[3] = {0, 0, 0};
    for (unsigned i = 0; i < c->numAttrs; i++) {
        if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            continue;
        cluster[0] = c->attrs[i].value.clusterDim.x;
        cluster[1] = c->attrs[i].value.clusterDim.y;
        cluster[2] = c->attrs[i].value.clusterDim.z;
        if (env_int("FAKECUDA_CC", 90) < 90)
            return 801; /* NOT_SUPPORTED */
        for (int d = 0; d < 3; d++)
            if (cluster[d] == 0 || grid[d] % cluster[d])
                return 912; /* INVALID_CLUSTER_SIZE */
    }
    return launch(f, grid, block, c->sharedMemBytes, c->hStream, params, 1, cluster);
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* The documented rules a real driver enforces, and the fake layout of
 * fakecuda.h in the map. */
E(cuTensorMapEncodeTiled)(CUtensorMap *map, int dtype, unsigned rank, void *addr,
                          const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                          const uint32_t *estrides, int interleave, int swizzle, int l2, int oob)
{
    static const int esize[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
    if (!current)
        return 201;
    if (((uintptr_t)map & 63) || dtype < 0 || dtype > 12 || rank < 1 || rank > 5 ||
        ((uintptr_t)addr & 15) || interleave < 0 || interleave > 2 || swizzle < 0 ||
        swizzle > 3 || l2 < 0 || l2 > 3 || oob < 0 || oob > 1)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; i++)
        if (dims[i] == 0 || dims[i] > (1ull << 32) || box[i] == 0 || box[i] > 256 ||
            estrides[i] == 0 || estrides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i + 1 < rank; i++)
        if (strides[i] % 16 || strides[i] >= (1ull << 40))
            return CUDA_ERROR_INVALID_VALUE;
    unsigned row = box[0] * (unsigned)esize[dtype];
    if (interleave == 0 && (row % 16 || (swizzle && row > (16u << swizzle))))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char *b = (unsigned char *)map;
    memset(b, 0, 128);
    put64(b, (uint64_t)(uintptr_t)addr);
    put32(b + 8, (uint32_t)dtype);
    put32(b + 12, rank);
    for (unsigned i = 0; i < rank; i++) {
        put64(b + 16 + 8 * i, dims[i]);
        put32(b + 88 + 4 * i, box[i]);
        if (i + 1 < rank)
            put64(b + 56 + 8 * i, strides[i]);
    }
    put32(b + 108, (uint32_t)interleave);
    put32(b + 112, (uint32_t)swizzle);
    put32(b + 116, (uint32_t)l2);
    put32(b + 120, (uint32_t)oob);
    put32(b + 124, FAKECUDA_TMAP_MAGIC);
    atomic_fetch_add(&tmaps, 1);
    return CUDA_SUCCESS;
}

E(cuGraphInstantiateWithFlags)(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    (void)flags;
    CUgraphExec x = calloc(1, sizeof *x);
    x->n = g->n;
    x->l = malloc((size_t)(g->n ? g->n : 1) * sizeof *x->l);
    if (g->n)
        memcpy(x->l, g->l, (size_t)g->n * sizeof *x->l);
    *e = x;
    return CUDA_SUCCESS;
}
E(cuGraphInstantiate_v2)(CUgraphExec *e, CUgraph g, CUgraphNode *node, char *log, size_t len)
{
    (void)node;
    (void)log;
    (void)len;
    return cuGraphInstantiateWithFlags(e, g, 0);
}
E(cuGraphLaunch)(CUgraphExec x, CUstream s)
{
    for (int i = 0; i < x->n; i++) {
        fakecuda_launch l = x->l[i];
        l.replayed = 1;
        l.stream = s;
        emulate(&l);
        record(&l);
    }
    return CUDA_SUCCESS;
}
E(cuGraphExecDestroy)(CUgraphExec x)
{
    free(x->l);
    free(x);
    return CUDA_SUCCESS;
}
E(cuGraphDestroy)(CUgraph g)
{
    free(g->l);
    free(g);
    return CUDA_SUCCESS;
}

#ifndef FAKECUDA_NO_GETPROC
/* ---------------------------------------------------------------- cuGetProcAddress */

typedef CUresult (*any_fn)(void);
#define F(sym) ((any_fn)(void (*)(void))(sym))

static const struct {
    const char *name;
    int since;
    any_fn fn;
} table[] = {
    {"cuGetErrorName", 6000, F(cuGetErrorName)},
    {"cuInit", 2000, F(cuInit)},
    {"cuDriverGetVersion", 2020, F(cuDriverGetVersion)},
    {"cuDeviceGetCount", 2000, F(cuDeviceGetCount)},
    {"cuDeviceGet", 2000, F(cuDeviceGet)},
    {"cuDeviceGetName", 2000, F(cuDeviceGetName)},
    {"cuDeviceGetAttribute", 2000, F(cuDeviceGetAttribute)},
    {"cuDeviceTotalMem", 3020, F(cuDeviceTotalMem_v2)},
    {"cuDevicePrimaryCtxRetain", 7000, F(cuDevicePrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease", 11000, F(cuDevicePrimaryCtxRelease_v2)},
    {"cuCtxSetCurrent", 4000, F(cuCtxSetCurrent)},
    {"cuCtxGetCurrent", 4000, F(cuCtxGetCurrent)},
    {"cuCtxSynchronize", 2000, F(cuCtxSynchronize)},
    {"cuMemGetInfo", 3020, F(cuMemGetInfo_v2)},
    {"cuModuleLoadData", 2000, F(cuModuleLoadData)},
    {"cuModuleLoadDataEx", 2010, F(cuModuleLoadDataEx)},
    {"cuLinkCreate", 6050, F(cuLinkCreate_v2)},
    {"cuLinkAddData", 6050, F(cuLinkAddData_v2)},
    {"cuLinkComplete", 5050, F(cuLinkComplete)},
    {"cuLinkDestroy", 5050, F(cuLinkDestroy)},
    {"cuModuleGetFunction", 2000, F(cuModuleGetFunction)},
    {"cuModuleUnload", 2000, F(cuModuleUnload)},
    {"cuFuncSetAttribute", 9000, F(cuFuncSetAttribute)},
    {"cuFuncGetAttribute", 2020, F(cuFuncGetAttribute)},
    {"cuMemAlloc", 3020, F(cuMemAlloc_v2)},
    {"cuMemFree", 3020, F(cuMemFree_v2)},
    {"cuMemcpyHtoD", 3020, F(cuMemcpyHtoD_v2)},
    {"cuMemcpyDtoH", 3020, F(cuMemcpyDtoH_v2)},
    {"cuMemcpyDtoD", 3020, F(cuMemcpyDtoD_v2)},
    {"cuMemcpyHtoDAsync", 3020, F(cuMemcpyHtoDAsync_v2)},
    {"cuMemcpyDtoHAsync", 3020, F(cuMemcpyDtoHAsync_v2)},
    {"cuMemcpyDtoDAsync", 3020, F(cuMemcpyDtoDAsync_v2)},
    {"cuMemsetD8", 3020, F(cuMemsetD8_v2)},
    {"cuMemsetD32", 3020, F(cuMemsetD32_v2)},
    {"cuMemsetD8Async", 3020, F(cuMemsetD8Async)},
    {"cuMemsetD32Async", 3020, F(cuMemsetD32Async)},
    {"cuStreamCreate", 2000, F(cuStreamCreate)},
    {"cuStreamDestroy", 4000, F(cuStreamDestroy_v2)},
    {"cuStreamSynchronize", 2000, F(cuStreamSynchronize)},
    {"cuStreamQuery", 2000, F(cuStreamQuery)},
    {"cuStreamWaitEvent", 3020, F(cuStreamWaitEvent)},
    {"cuStreamIsCapturing", 10000, F(cuStreamIsCapturing)},
    {"cuStreamBeginCapture", 10010, F(cuStreamBeginCapture_v2)},
    {"cuStreamEndCapture", 10000, F(cuStreamEndCapture)},
    {"cuEventCreate", 2000, F(cuEventCreate)},
    {"cuEventDestroy", 4000, F(cuEventDestroy_v2)},
    {"cuEventRecord", 2000, F(cuEventRecord)},
    {"cuEventSynchronize", 2000, F(cuEventSynchronize)},
    {"cuEventElapsedTime", 2000, F(cuEventElapsedTime)},
    {"cuLaunchKernel", 4000, F(cuLaunchKernel)},
    {"cuLaunchKernelEx", 11080, F(cuLaunchKernelEx)},
    {"cuTensorMapEncodeTiled", 12000, F(cuTensorMapEncodeTiled)},
    {"cuGraphInstantiateWithFlags", 11040, F(cuGraphInstantiateWithFlags)},
    {"cuGraphInstantiate", 11000, F(cuGraphInstantiate_v2)},
    {"cuGraphLaunch", 10000, F(cuGraphLaunch)},
    {"cuGraphExecDestroy", 10000, F(cuGraphExecDestroy)},
    {"cuGraphDestroy", 10000, F(cuGraphDestroy)},
};

FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                     unsigned long long flags, int *status);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status)
{
    (void)flags;
    *pfn = NULL;
    if (stub())
        return CUDA_ERROR_STUB_LIBRARY;
    int drv = env_int("FAKECUDA_VERSION", 12080);
    if (version > drv)
        return CUDA_ERROR_INVALID_VALUE;
    const char *hide = getenv("FAKECUDA_HIDE");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        if ((hide && strcmp(hide, symbol) == 0) || table[i].since > drv) {
            if (status)
                *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
            return CUDA_SUCCESS;
        }
        if (version < table[i].since) {
            if (status)
                *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_SUCCESS;
        }
        memcpy(pfn, &table[i].fn, sizeof *pfn);
        if (status)
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}
#endif
