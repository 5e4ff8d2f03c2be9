/* SPDX-License-Identifier: MIT */
/*
 * A fake libcuda for the runtime's unit tests: it exports the driver entry
 * points the runtime resolves, keeps "device" memory on the host, records
 * kernel launches instead of running them, and is steered by environment
 * variables read at each call:
 *
 *   FAKECUDA          "nodevice" (cuInit: CUDA_ERROR_NO_DEVICE), "stub" (every
 *                     call: CUDA_ERROR_STUB_LIBRARY), "zero" (0 devices),
 *                     "weird" (cuCtxSynchronize returns a code unknown to
 *                     the runtime, which cuGetErrorName names)
 *   FAKECUDA_VERSION  cuDriverGetVersion's answer (default 12080)
 *   FAKECUDA_CC       compute capability as major*10+minor (default 90)
 *   FAKECUDA_HIDE     an entry point cuGetProcAddress does not know
 *   FAKECUDA_JIT_US   microseconds each module load takes
 *
 * A module whose PTX contains "BROKEN" fails to load with a JIT error log
 * (cuModuleLoadDataEx and cuLinkAddData alike). The linker's "cubin" is
 * FAKECUDA_CUBIN_MAGIC, the PTX and a length trailer; cuModuleLoadData
 * takes it back and refuses (and counts) one that was cut or altered.
 * The four clip kernels are emulated on the host (sums in double), so a
 * pipeline's data flow can be followed; other launches are only recorded.
 * Tests reach the recording through the fakecuda_* functions, bound once
 * by the fixture at the end of this header (fake_fixture_open).
 */
#ifndef PTXGEN_FAKECUDA_H
#define PTXGEN_FAKECUDA_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKECUDA_MAX_PARAMS 16
#define FAKECUDA_MAX_BIG 5
#define FAKECUDA_CUBIN_MAGIC "FAKECUBIN\n"

typedef struct fakecuda_launch {
    char name[64];
    unsigned grid[3], block[3], shared;
    void *stream;
    int nparams;
    int sizes[FAKECUDA_MAX_PARAMS];
    uint64_t params[FAKECUDA_MAX_PARAMS]; /* zero-extended */
    int replayed;                         /* 1 when it came from a graph launch */
    /* Parameters larger than 8 bytes (tensor maps): params[i] holds their
     * first 8 bytes, big[] all of them, for the first FAKECUDA_MAX_BIG. */
    int nbig;
    int big_index[FAKECUDA_MAX_BIG];
    unsigned char big[FAKECUDA_MAX_BIG][128];
    int ex;                /* 1 when launched through cuLaunchKernelEx */
    unsigned cluster[3];   /* its cluster-dimension attribute; 0 when none */
} fakecuda_launch;

/* One cuFuncSetAttribute call. */
typedef struct fakecuda_attr_set {
    char name[64]; /* the function */
    int attr, value;
} fakecuda_attr_set;
typedef const fakecuda_attr_set *(*fakecuda_attr_at_fn)(int i);

/* What the fake's cuTensorMapEncodeTiled writes into the 128 bytes (a real
 * map is opaque; this one lets tests see what the runtime passed):
 *   0 u64 address, 8 u32 data type, 12 u32 rank, 16 u64 dims[5],
 *   56 u64 strides[4], 88 u32 box[5], 108 u32 interleave, 112 u32 swizzle,
 *   116 u32 l2 promotion, 120 u32 oob fill, 124 u32 FAKECUDA_TMAP_MAGIC. */
#define FAKECUDA_TMAP_MAGIC 0x464d4150u

typedef void (*fakecuda_reset_fn)(void);
typedef int (*fakecuda_count_fn)(void);
typedef const fakecuda_launch *(*fakecuda_launch_at_fn)(int i);

/* Exported by the fake:
 *   void fakecuda_reset(void);            forget launches and counters
 *   int fakecuda_launch_count(void);
 *   const fakecuda_launch *fakecuda_launch_at(int i);
 *   int fakecuda_loads(void);             JITs that succeeded: cuModuleLoadDataEx or
 *                                         cuLinkComplete
 *   int fakecuda_ex_loads(void);          cuModuleLoadDataEx calls that succeeded
 *   int fakecuda_direct_loads(void);      cuModuleLoadData calls that succeeded
 *   int fakecuda_live_allocs(void);       cuMemAlloc minus cuMemFree
 *   int fakecuda_live_modules(void);      loads minus cuModuleUnload
 *   int fakecuda_attr_count(void);        cuFuncSetAttribute calls since reset
 *   const fakecuda_attr_set *fakecuda_attr_at(int i);
 *   int fakecuda_tmap_count(void);        cuTensorMapEncodeTiled calls that succeeded
 *
 * More steering, read at each call:
 *   FAKECUDA_SMEM_OPTIN   the opt-in shared memory maximum (default 232448)
 *   FAKECUDA_STATIC_SMEM  every function's static shared bytes (default 0)
 * A launch whose dynamic shared memory passes what the function allows
 * (48 KiB less the static bytes, or the cuFuncSetAttribute value) fails
 * with CUDA_ERROR_INVALID_VALUE, as the driver's does; so does a cluster
 * that does not divide the grid (CUDA_ERROR_INVALID_CLUSTER_SIZE) or one on
 * a device below 9.0 (CUDA_ERROR_NOT_SUPPORTED).
 *   int fakecuda_links(void);             cuLinkComplete calls that succeeded (JITs)
 *   int fakecuda_cubin_loads(void);       cuModuleLoadData calls that loaded a cubin
 *   int fakecuda_bad_cubins(void);        cubins refused as cut or altered
 *   int fakecuda_max_concurrent_jits(void); the most JITs in flight at once
 */

/* ---------------------------------------------------------------- the fixture */

/* The fake as a test holds it: its path (for pgrt_ctx_params), the
 * library, and every recording function listed above, looked up once.
 * The runtime opens the same file again, so the test sees the calls the
 * runtime made. */
typedef struct fake_fixture {
    const char *path;
    void *lib;
    void (*reset)(void);
    int (*launch_count)(void);
    const fakecuda_launch *(*launch_at)(int i);
    int (*loads)(void);
    int (*ex_loads)(void);
    int (*direct_loads)(void);
    int (*live_allocs)(void);
    int (*live_modules)(void);
    int (*attr_count)(void);
    const fakecuda_attr_set *(*attr_at)(int i);
    int (*tmap_count)(void);
    int (*links)(void);
    int (*cubin_loads)(void);
    int (*bad_cubins)(void);
    int (*max_concurrent_jits)(void);
} fake_fixture;

/* The switches a test of the fake starts without: the fake's steering
 * variables, the target override, the training pipeline's graph switch and
 * the driver path. */
static inline void fake_env_clear(void)
{
    static const char *const vars[] = {
        "FAKECUDA",         "FAKECUDA_VERSION",    "FAKECUDA_HIDE",     "FAKECUDA_CC",
        "FAKECUDA_JIT_US",  "FAKECUDA_SMEM_OPTIN", "FAKECUDA_STATIC_SMEM",
        "PTXGEN_TARGET",    "PTXGEN_CUDA_GRAPH",   "PGRT_LIBCUDA",
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

/* argv[1] names the fake (else "usage: PROGRAM ARGS" and exit 2), opened
 * with `flags` (RTLD_GLOBAL where a kernel handle must outlive a context)
 * and bound. A failure here is the test's set-up, not a check: it prints
 * and exits 1. The environment is left as it is (a test's child process
 * keeps the switches its parent set). */
static inline void fake_fixture_bind(fake_fixture *fx, int argc, char **argv, int flags,
                                     const char *args)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s %s\n", argv[0], args);
        exit(2);
    }
    memset(fx, 0, sizeof *fx);
    fx->path = argv[1];
    fx->lib = dlopen(fx->path, flags);
    if (!fx->lib) {
        fprintf(stderr, "dlopen %s: %s\n", fx->path, dlerror());
        exit(1);
    }
    /* function pointers from dlsym through memcpy, as ISO C allows */
    const struct {
        const char *name;
        void *slot;
    } syms[] = {
        {"fakecuda_reset", &fx->reset},
        {"fakecuda_launch_count", &fx->launch_count},
        {"fakecuda_launch_at", &fx->launch_at},
        {"fakecuda_loads", &fx->loads},
        {"fakecuda_ex_loads", &fx->ex_loads},
        {"fakecuda_direct_loads", &fx->direct_loads},
        {"fakecuda_live_allocs", &fx->live_allocs},
        {"fakecuda_live_modules", &fx->live_modules},
        {"fakecuda_attr_count", &fx->attr_count},
        {"fakecuda_attr_at", &fx->attr_at},
        {"fakecuda_tmap_count", &fx->tmap_count},
        {"fakecuda_links", &fx->links},
        {"fakecuda_cubin_loads", &fx->cubin_loads},
        {"fakecuda_bad_cubins", &fx->bad_cubins},
        {"fakecuda_max_concurrent_jits", &fx->max_concurrent_jits},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(fx->lib, syms[i].name);
        if (!p) {
            fprintf(stderr, "the fake driver %s lacks %s\n", fx->path, syms[i].name);
            exit(1);
        }
        memcpy(syms[i].slot, &p, sizeof p);
    }
}

/* The start of main of every test against the fake: the switches
 * cleared, then the fake bound. */
static inline void fake_fixture_open(fake_fixture *fx, int argc, char **argv, int flags,
                                     const char *args)
{
    fake_env_clear();
    fake_fixture_bind(fx, argc, argv, flags, args);
}

static inline void fake_fixture_close(fake_fixture *fx)
{
    if (fx->lib)
        dlclose(fx->lib);
    fx->lib = NULL;
}

#endif /* PTXGEN_FAKECUDA_H */
