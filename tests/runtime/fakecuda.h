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

#include <stdint.h>

#define FAKECUDA_MAX_PARAMS 16
#define FAKECUDA_CUBIN_MAGIC "FAKECUBIN\n"

typedef struct fakecuda_launch {
    char name[64];
    unsigned grid[3], block[3], shared;
    void *stream;
    int nparams;
    int sizes[FAKECUDA_MAX_PARAMS];
    uint64_t params[FAKECUDA_MAX_PARAMS]; /* zero-extended */
    int replayed;                         /* 1 when it came from a graph launch */
} fakecuda_launch;

typedef void (*fakecuda_reset_fn)(void);
typedef int (*fakecuda_count_fn)(void);
typedef const fakecuda_launch *(*fakecuda_launch_at_fn)(int i);

/* Exported by the fake:
 *   void fakecuda_reset(void);            forget launches and counters
 *   int fakecuda_launch_count(void);
 *   const fakecuda_launch *fakecuda_launch_at(int i);
 *   int fakecuda_loads(void);             cuModuleLoadDataEx calls that succeeded
 *   int fakecuda_direct_loads(void);      cuModuleLoadData calls that succeeded
 *   int fakecuda_live_allocs(void);       cuMemAlloc minus cuMemFree
 *   int fakecuda_live_modules(void);      loads minus cuModuleUnload
 *   int fakecuda_links(void);             cuLinkComplete calls that succeeded (JITs)
 *   int fakecuda_cubin_loads(void);       cuModuleLoadData calls that loaded a cubin
 *   int fakecuda_bad_cubins(void);        cubins refused as cut or altered
 *   int fakecuda_max_concurrent_jits(void); the most JITs in flight at once
 */

#endif /* PTXGEN_FAKECUDA_H */
