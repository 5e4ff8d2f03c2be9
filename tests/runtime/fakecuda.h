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
 * Tests reach the recording through the fakecuda_* functions (dlsym).
 */
#ifndef PTXGEN_FAKECUDA_H
#define PTXGEN_FAKECUDA_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKECUDA_MAX_PARAMS 16
#define FAKECUDA_MAX_BIG 4
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

/* A test's handle on the fake at `path` (dlopen with `flags`): its
 * recording entry points, looked up once. Returns the library, or NULL
 * with a line on stderr when it cannot be opened or lacks them. The
 * runtime opens the same file again, so the test sees the calls it made. */
static inline void *fakecuda_open(const char *path, int flags, fakecuda_reset_fn *reset,
                                  fakecuda_count_fn *count, fakecuda_launch_at_fn *at)
{
    void *lib = dlopen(path, flags);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return NULL;
    }
    void *p = dlsym(lib, "fakecuda_reset");
    memcpy(reset, &p, sizeof p);
    p = dlsym(lib, "fakecuda_launch_count");
    memcpy(count, &p, sizeof p);
    p = dlsym(lib, "fakecuda_launch_at");
    memcpy(at, &p, sizeof p);
    if (!*reset || !*count || !*at) {
        fprintf(stderr, "the fake driver %s lacks its recording functions\n", path);
        return NULL;
    }
    return lib;
}

/* The switches a test of the fake starts without: FAKECUDA_* and the
 * graph switch of the training pipeline. */
static inline void fakecuda_clear_env(void)
{
    static const char *const vars[] = {"FAKECUDA", "FAKECUDA_VERSION", "FAKECUDA_HIDE",
                                       "FAKECUDA_CC", "PTXGEN_CUDA_GRAPH"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

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

#endif /* PTXGEN_FAKECUDA_H */
