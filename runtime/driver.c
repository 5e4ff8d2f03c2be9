/* SPDX-License-Identifier: MIT */
/*
 * The driver loader: dlopen of libcuda, entry points through
 * cuGetProcAddress at the CUDA version whose ABI we declare, dlsym of the
 * exported (_v2) names where the driver predates cuGetProcAddress; and
 * rt_ctx_bind, which every file that calls the driver on a context uses.
 */
#include "rt_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* cuGetProcAddress_v2 (CUDA 12.0+) reports why a symbol is missing; the
 * original (11.3) does not. */
typedef CUresult (*getproc_v2_fn)(const char *symbol, void **pfn, int version,
                                  unsigned long long flags, int *status);
typedef CUresult (*getproc_v1_fn)(const char *symbol, void **pfn, int version,
                                  unsigned long long flags);

typedef struct resolver {
    void *lib;
    getproc_v2_fn v2;
    getproc_v1_fn v1;
    CUresult failed; /* the last error cuGetProcAddress itself returned */
} resolver;

/* ISO C has no conversion between object and function pointers; dlsym
 * hands out the former for the latter, so copy the bits. */
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function pointers must fit void *");
#define RT_FN_FROM_PTR(fn, p) memcpy(&(fn), &(p), sizeof(fn))

static void *resolve(resolver *r, const char *name, int version, const char *sym,
                     int *status)
{
    void *p = NULL;
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (r->v2) {
        int st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult e = r->v2(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        if (e == CUDA_SUCCESS && p) {
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return p;
        }
        if (e != CUDA_SUCCESS)
            r->failed = e;
        if (st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
            *status = st;
        p = NULL;
    } else if (r->v1) {
        CUresult e = r->v1(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT);
        if (e == CUDA_SUCCESS && p) {
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return p;
        }
        if (e != CUDA_SUCCESS)
            r->failed = e;
        p = NULL;
    }
    /* A driver without cuGetProcAddress (before 11.3), or one that would
     * not give the symbol at our version: the exported name, whose ABI is
     * the one declared. */
    p = dlsym(r->lib, sym);
    if (p)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return p;
}

static void version_text(int v, char *buf, size_t len)
{
    rt_errf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* A required entry point the library does not give. Only an entry point
 * newer than the driver's version makes the driver too old; one that every
 * driver of that version has (cuInit is from CUDA 2.0) means the library is
 * not a whole CUDA driver (a shim, a stub, a broken install), and updating
 * the driver is the wrong advice. */
static int missing_entry(const char *name, int since, int version, const char *have,
                         const char *path)
{
    char need[16];
    version_text(since, need, sizeof need);
    if (since > version)
        return rt_fail(PGRT_EDRIVER,
                       "CUDA driver too old: %s (from CUDA %s) is not provided by driver "
                       "version %s in \"%s\"; update the NVIDIA driver",
                       name, need, have, path);
    return rt_fail(PGRT_ENODRIVER,
                   "no usable CUDA driver: \"%s\" lacks the entry point %s, which every "
                   "driver since CUDA %s provides (this one says it is version %s); it is not "
                   "a complete libcuda (PGRT_LIBCUDA names another library)",
                   path, name, need, have);
}

int rt_driver_open(rt_driver *d, const char *path)
{
    memset(d, 0, sizeof *d);
    if (!path || !*path) {
        const char *env = getenv("PGRT_LIBCUDA");
        path = env && *env ? env : "libcuda.so.1";
    }

    dlerror();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return rt_fail(PGRT_ENODRIVER,
                       "no CUDA driver: dlopen(\"%s\") failed: %s (is the NVIDIA driver installed? "
                       "PGRT_LIBCUDA names another library)",
                       path, why ? why : "unknown reason");
    }

    resolver r = {.lib = lib};
    void *p = dlsym(lib, "cuGetProcAddress_v2");
    if (p)
        RT_FN_FROM_PTR(r.v2, p);
    else if ((p = dlsym(lib, "cuGetProcAddress")) != NULL)
        RT_FN_FROM_PTR(r.v1, p);

    /* The version first: messages about missing entry points name it. */
    int st;
    p = resolve(&r, "cuDriverGetVersion", 2020, "cuDriverGetVersion", &st);
    if (!p) {
        int code = PGRT_ENODRIVER;
        /* cuGetProcAddress itself failing (the stub answers everything
         * with CUDA_ERROR_STUB_LIBRARY) says more than "not found". */
        if (r.failed != CUDA_SUCCESS)
            rt_cu_fail(NULL, r.failed, "cuGetProcAddress", "no usable CUDA driver in \"%s\"%s", path,
                       r.failed == CUDA_ERROR_STUB_LIBRARY
                           ? " (the toolkit's stub library, not the driver's)"
                           : "");
        else
            rt_fail(code, "no CUDA driver: \"%s\" has no cuDriverGetVersion", path);
        dlclose(lib);
        return code;
    }
    RT_FN_FROM_PTR(d->DriverGetVersion, p);
    CUresult cr = d->DriverGetVersion(&d->version);
    if (cr != CUDA_SUCCESS) {
        int code = rt_cu_fail(NULL, cr, "cuDriverGetVersion", "no usable CUDA driver in \"%s\"%s",
                              path,
                              cr == CUDA_ERROR_STUB_LIBRARY
                                  ? " (the toolkit's stub library, not the driver's)"
                                  : "");
        dlclose(lib);
        return code == PGRT_ECUDA ? PGRT_ENODRIVER : code;
    }

    char have[16];
    version_text(d->version, have, sizeof have);
#define RT_X_(field, name, ver, sym, req, params)                                                \
    p = resolve(&r, name, ver, sym, &st);                                                        \
    if (p) {                                                                                     \
        RT_FN_FROM_PTR(d->field, p);                                                             \
    } else if (req) {                                                                            \
        int code_ = missing_entry(name, ver, d->version, have, path);                            \
        dlclose(lib);                                                                            \
        memset(d, 0, sizeof *d);                                                                 \
        return code_;                                                                            \
    }
    RT_CU_ENTRIES(RT_X_)
#undef RT_X_
    d->lib = lib;
    return 0;
}

void rt_driver_close(rt_driver *d)
{
    /* libcuda keeps threads and atexit handlers once initialised; unloading
     * it under them crashes at exit. A driver that was only probed (open
     * failed) is closed on the spot in rt_driver_open; one that was used
     * stays mapped, its handle count dropping with the process. */
    memset(d, 0, sizeof *d);
}

/* Here rather than in context.c: context.c tears down the caches and
 * plans, which bind too, so binding must sit below all of them. */
int rt_ctx_bind(pgrt_ctx *ctx)
{
    CUcontext cur = NULL;
    int err = RT_CU(&ctx->drv, CtxGetCurrent, (&cur));
    if (err)
        return err;
    if (cur == ctx->cu)
        return 0;
    return RT_CU(&ctx->drv, CtxSetCurrent, (ctx->cu));
}
