/* SPDX-License-Identifier: MIT */
/*
 * Private to runtime/: our own declarations of the CUDA driver API subset
 * the runtime uses (no cuda.h anywhere in the build), the entry-point table,
 * the object layouts and the error helpers.
 */
#ifndef PTXGEN_RT_INTERNAL_H
#define PTXGEN_RT_INTERNAL_H

#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_attention.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_comm.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "ptxgen/pgrt_train.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---------------------------------------------------------------- driver ABI */

/* The driver's types, declared as the driver ABI has them. CUresult is an
 * enum in cuda.h; an int has the same size and passing convention. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* the _v2 (64-bit) form */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef int CUjit_option;
typedef struct CUlinkState_st *CUlinkState;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_JIT_COMPILATION_DISABLED = 223,
    CUDA_ERROR_NOT_FOUND = 500,
};

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum {
    CU_JIT_WALL_TIME = 2,
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_JIT_LOG_VERBOSE = 12,
};

enum {
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1, /* static shared memory */
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/* cuLaunchKernelEx's configuration (CUDA 11.8), as cuda.h lays it out: an
 * attribute is its id padded to 8 bytes and a 64-byte value union. */
enum { CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4 };
typedef struct CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        char pad[64];
        struct {
            unsigned x, y, z;
        } clusterDim;
    } value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes in cuda.h");

/* The tensor map (CUDA 12.0): 128 opaque bytes, 64-byte aligned. The
 * enums carry the values of cuda.h's CUtensorMap* enums. */
typedef struct CUtensorMap {
    _Alignas(64) uint64_t opaque[16];
} CUtensorMap;
_Static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
enum {
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
    CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
    CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
    CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
    CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
};
enum {
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    CU_TENSOR_MAP_INTERLEAVE_16B = 1,
    CU_TENSOR_MAP_INTERLEAVE_32B = 2,
};
enum {
    CU_TENSOR_MAP_SWIZZLE_NONE = 0,
    CU_TENSOR_MAP_SWIZZLE_32B = 1,
    CU_TENSOR_MAP_SWIZZLE_64B = 2,
    CU_TENSOR_MAP_SWIZZLE_128B = 3,
};
enum {
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
    CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
    CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
};
enum {
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1,
};
enum { CU_JIT_INPUT_PTX = 1 };
enum { CU_STREAM_NON_BLOCKING = 1 };
enum { CU_EVENT_DEFAULT = 0 };
enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
enum { CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1 };
enum { CU_GET_PROC_ADDRESS_DEFAULT = 0 };
enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

/* Shared memory a launch may use without opting in. */
#define RT_DEFAULT_SHARED_LIMIT (48u * 1024u)

/* The linker, which hands out the cubin a JIT made (cubin_cache.c): optional,
 * the cache is off without it. */
#define RT_CU_LINK_ENTRIES(X)                                                                \
    X(LinkCreate, "cuLinkCreate", 6050, "cuLinkCreate_v2", 0,                                 \
      (unsigned nopts, CUjit_option *opts, void **vals, CUlinkState *state))                 \
    X(LinkAddData, "cuLinkAddData", 6050, "cuLinkAddData_v2", 0,                              \
      (CUlinkState state, int type, void *data, size_t size, const char *name, unsigned nopts, \
       CUjit_option *opts, void **vals))                                                     \
    X(LinkComplete, "cuLinkComplete", 5050, "cuLinkComplete", 0,                              \
      (CUlinkState state, void **cubin, size_t *size))                                       \
    X(LinkDestroy, "cuLinkDestroy", 5050, "cuLinkDestroy", 0, (CUlinkState state))

/*
 * The entry points: X(field, base name, CUDA version of the ABI we declare,
 * exported symbol for the dlsym fallback, required, return, parameters).
 * The version is what cuGetProcAddress is asked for: it picks the versioned
 * symbol whose signature is the one declared here (cuMemAlloc at 3020 is
 * cuMemAlloc_v2). Optional entries may be NULL; calls that need them say so.
 */
#define RT_CU_ENTRIES(X)                                                                     \
    X(GetErrorName, "cuGetErrorName", 6000, "cuGetErrorName", 0,                              \
      (CUresult error, const char **str))                                                    \
    X(Init, "cuInit", 2000, "cuInit", 1, (unsigned flags))                                    \
    X(DriverGetVersion, "cuDriverGetVersion", 2020, "cuDriverGetVersion", 1, (int *version))  \
    X(DeviceGetCount, "cuDeviceGetCount", 2000, "cuDeviceGetCount", 1, (int *count))          \
    X(DeviceGet, "cuDeviceGet", 2000, "cuDeviceGet", 1, (CUdevice * dev, int ordinal))        \
    X(DeviceGetName, "cuDeviceGetName", 2000, "cuDeviceGetName", 1,                           \
      (char *name, int len, CUdevice dev))                                                   \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", 1,            \
      (int *value, int attrib, CUdevice dev))                                                \
    X(DeviceTotalMem, "cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", 1,                     \
      (size_t * bytes, CUdevice dev))                                                        \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain",   \
      1, (CUcontext * ctx, CUdevice dev))                                                    \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000,                            \
      "cuDevicePrimaryCtxRelease_v2", 1, (CUdevice dev))                                     \
    X(CtxSetCurrent, "cuCtxSetCurrent", 4000, "cuCtxSetCurrent", 1, (CUcontext ctx))          \
    X(CtxGetCurrent, "cuCtxGetCurrent", 4000, "cuCtxGetCurrent", 1, (CUcontext * ctx))        \
    X(CtxSynchronize, "cuCtxSynchronize", 2000, "cuCtxSynchronize", 1, (void))                \
    X(MemGetInfo, "cuMemGetInfo", 3020, "cuMemGetInfo_v2", 1,                                 \
      (size_t * free_bytes, size_t * total_bytes))                                           \
    X(ModuleLoadData, "cuModuleLoadData", 2000, "cuModuleLoadData", 1,                        \
      (CUmodule * mod, const void *image))                                                   \
    X(ModuleLoadDataEx, "cuModuleLoadDataEx", 2010, "cuModuleLoadDataEx", 1,                  \
      (CUmodule * mod, const void *image, unsigned nopts, CUjit_option *opts, void **vals))  \
    RT_CU_LINK_ENTRIES(X)                                                                    \
    X(ModuleGetFunction, "cuModuleGetFunction", 2000, "cuModuleGetFunction", 1,               \
      (CUfunction * fn, CUmodule mod, const char *name))                                     \
    X(ModuleUnload, "cuModuleUnload", 2000, "cuModuleUnload", 1, (CUmodule mod))              \
    X(FuncSetAttribute, "cuFuncSetAttribute", 9000, "cuFuncSetAttribute", 0,                  \
      (CUfunction fn, int attrib, int value))                                                \
    X(FuncGetAttribute, "cuFuncGetAttribute", 2020, "cuFuncGetAttribute", 0,                  \
      (int *value, int attrib, CUfunction fn))                                               \
    X(MemAlloc, "cuMemAlloc", 3020, "cuMemAlloc_v2", 1, (CUdeviceptr * p, size_t bytes))      \
    X(MemFree, "cuMemFree", 3020, "cuMemFree_v2", 1, (CUdeviceptr p))                         \
    X(MemcpyHtoD, "cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", 1,                                 \
      (CUdeviceptr dst, const void *src, size_t bytes))                                      \
    X(MemcpyDtoH, "cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", 1,                                 \
      (void *dst, CUdeviceptr src, size_t bytes))                                            \
    X(MemcpyDtoD, "cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2", 1,                                 \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes))                                      \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", 1,                  \
      (CUdeviceptr dst, const void *src, size_t bytes, CUstream s))                          \
    X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", 1,                  \
      (void *dst, CUdeviceptr src, size_t bytes, CUstream s))                                \
    X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2", 1,                  \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))                          \
    X(MemsetD8, "cuMemsetD8", 3020, "cuMemsetD8_v2", 1,                                       \
      (CUdeviceptr dst, unsigned char value, size_t n))                                      \
    X(MemsetD32, "cuMemsetD32", 3020, "cuMemsetD32_v2", 1,                                    \
      (CUdeviceptr dst, unsigned value, size_t n))                                           \
    X(MemsetD8Async, "cuMemsetD8Async", 3020, "cuMemsetD8Async", 1,                           \
      (CUdeviceptr dst, unsigned char value, size_t n, CUstream s))                          \
    X(MemsetD32Async, "cuMemsetD32Async", 3020, "cuMemsetD32Async", 1,                        \
      (CUdeviceptr dst, unsigned value, size_t n, CUstream s))                               \
    X(StreamCreate, "cuStreamCreate", 2000, "cuStreamCreate", 1,                              \
      (CUstream * s, unsigned flags))                                                        \
    X(StreamDestroy, "cuStreamDestroy", 4000, "cuStreamDestroy_v2", 1, (CUstream s))          \
    X(StreamSynchronize, "cuStreamSynchronize", 2000, "cuStreamSynchronize", 1, (CUstream s)) \
    X(StreamQuery, "cuStreamQuery", 2000, "cuStreamQuery", 1, (CUstream s))                  \
    X(StreamWaitEvent, "cuStreamWaitEvent", 3020, "cuStreamWaitEvent", 1,                     \
      (CUstream s, CUevent e, unsigned flags))                                               \
    X(StreamIsCapturing, "cuStreamIsCapturing", 10000, "cuStreamIsCapturing", 0,              \
      (CUstream s, int *status))                                                             \
    X(StreamBeginCapture, "cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", 0,        \
      (CUstream s, int mode))                                                                \
    X(StreamEndCapture, "cuStreamEndCapture", 10000, "cuStreamEndCapture", 0,                 \
      (CUstream s, CUgraph * graph))                                                         \
    X(EventCreate, "cuEventCreate", 2000, "cuEventCreate", 1, (CUevent * e, unsigned flags))  \
    X(EventDestroy, "cuEventDestroy", 4000, "cuEventDestroy_v2", 1, (CUevent e))              \
    X(EventRecord, "cuEventRecord", 2000, "cuEventRecord", 1, (CUevent e, CUstream s))        \
    X(EventSynchronize, "cuEventSynchronize", 2000, "cuEventSynchronize", 1, (CUevent e))     \
    X(EventElapsedTime, "cuEventElapsedTime", 2000, "cuEventElapsedTime", 1,                  \
      (float *ms, CUevent start, CUevent end))                                               \
    X(LaunchKernel, "cuLaunchKernel", 4000, "cuLaunchKernel", 1,                              \
      (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,       \
       unsigned bz, unsigned shared, CUstream s, void **params, void **extra))               \
    X(LaunchKernelEx, "cuLaunchKernelEx", 11080, "cuLaunchKernelEx", 0,                       \
      (const CUlaunchConfig *config, CUfunction fn, void **params, void **extra))            \
    X(TensorMapEncodeTiled, "cuTensorMapEncodeTiled", 12000, "cuTensorMapEncodeTiled", 0,     \
      (CUtensorMap * map, int dtype, unsigned rank, void *addr, const uint64_t *dims,        \
       const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,        \
       int interleave, int swizzle, int l2_promotion, int oob_fill))                         \
    X(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040,                        \
      "cuGraphInstantiateWithFlags", 0,                                                      \
      (CUgraphExec * exec, CUgraph graph, unsigned long long flags))                         \
    X(GraphInstantiateV2, "cuGraphInstantiate", 11000, "cuGraphInstantiate_v2", 0,            \
      (CUgraphExec * exec, CUgraph graph, CUgraphNode * err_node, char *log, size_t loglen))  \
    X(GraphLaunch, "cuGraphLaunch", 10000, "cuGraphLaunch", 0, (CUgraphExec exec, CUstream s)) \
    X(GraphExecDestroy, "cuGraphExecDestroy", 10000, "cuGraphExecDestroy", 0,                 \
      (CUgraphExec exec))                                                                    \
    X(GraphDestroy, "cuGraphDestroy", 10000, "cuGraphDestroy", 0, (CUgraph graph))

typedef struct rt_driver {
    void *lib; /* dlopen handle */
    int version;
#define RT_X_(field, name, ver, sym, req, params) CUresult (*field) params;
    RT_CU_ENTRIES(RT_X_)
#undef RT_X_
} rt_driver;

/* Open the driver library and resolve the entry points. On error d->lib is
 * closed again and the message is set. */
int rt_driver_open(rt_driver *d, const char *path);
void rt_driver_close(rt_driver *d);

/* ---------------------------------------------------------------- errors */

#if defined(__GNUC__)
#define RT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RT_PRINTF(f, a)
#endif

/* Record a failure on this thread and return code. */
int rt_fail(int code, const char *fmt, ...) RT_PRINTF(2, 3);
/* Record a failed driver call: "<call>: <CUresult name>[: detail]"; returns
 * the pgrt code for r (rt_cu_code). d may be NULL. */
int rt_cu_fail(const rt_driver *d, CUresult r, const char *call, const char *fmt, ...)
    RT_PRINTF(4, 5);
/* The pgrt code a CUresult stands for. */
int rt_cu_code(CUresult r);
/* Append to the current message (for context such as the kernel name). */
void rt_msg_append(const char *fmt, ...) RT_PRINTF(1, 2);
/* Changes whenever the thread's message is set (not when appended to). */
unsigned rt_msg_serial(void);
/* snprintf into a caller's error buffer (errlen 0: nothing). */
void rt_errf(char *err, size_t errlen, const char *fmt, ...) RT_PRINTF(3, 4);

/* The one check of a pointer argument (dav1d's validate_input_or_ret): a
 * NULL p returns PGRT_EINVAL with "<fn>: <name> is NULL". fn is the public
 * function the caller called (__func__, or a helper's fn), name the
 * argument as that function's documentation calls it. Optional pointers
 * are checked under their condition: if (n) RT_NONNULL(fn, list, "list"). */
#define RT_NONNULL(fn, p, name)                                                \
    do {                                                                       \
        if (!(p))                                                              \
            return rt_fail(PGRT_EINVAL, "%s: %s is NULL", (fn), (name));       \
    } while (0)

/* Check a driver call: the call's name is the field name prefixed with "cu". */
#define RT_CU(drv, field, args)                                                \
    rt_cu_check((drv), (drv)->field args, "cu" #field)
int rt_cu_check(const rt_driver *d, CUresult r, const char *call);

double rt_now_ms(void);

/* ---------------------------------------------------------------- objects */

struct pgrt_kernel {
    pgrt_ctx *ctx;
    const pgk_desc *desc;
    CUfunction fn;
    /* Knobs that were baked into the module: bit i set means knob i is
     * fixed at baked.v[i]. */
    uint32_t baked_mask;
    pgk_knobs baked;
    /* Dynamic shared memory a launch may use without another
     * cuFuncSetAttribute: 0 until the first launch with dynamic shared
     * memory looks (launch.c); raised under ctx->lock. */
    atomic_uint smem_allowed;
    int smem_static; /* the function's static shared bytes, once looked up */
};

typedef struct cache_entry cache_entry;
struct cache_entry {
    cache_entry *next;
    char *key;
    bool ready;   /* false while one thread is loading it */
    CUmodule mod;
    pgrt_kernel kern;
};

/* The three parameter lists of the GEMM families (gemm_plan.c). */
typedef enum rt_gemm_abi { RT_GEMM_ABI_PLAIN, RT_GEMM_ABI_FLAGS, RT_GEMM_ABI_MAPS } rt_gemm_abi;

/* A prepared GEMM (pgrt.h): the choice, its loaded kernels and launch
 * shapes, and on gemm_sm90 the maps of a, b, a2, b2 (64-byte aligned:
 * allocate with aligned_alloc). */
struct pgrt_gemm_plan {
    pgrt_tensor_map maps[4];
    pgrt_ctx *ctx;
    pgrt_gemm_spec spec;
    pgk_gemm_choice ch;
    rt_gemm_abi abi;
    pgrt_kernel *kern, *red; /* red: the split's reduce, NULL unless ch.split > 1 */
    pgk_launch cfg, cfg_unsplit, cfg_red;
    pgk_knobs unsplit; /* ch.knobs with split 1: a launch without a workspace */
    uint32_t out_rows, out_cols;
    pgrt_buf *counters; /* a split gemm_sm90's: a u32 a tile, zero between launches */
    struct pgrt_gemm_plan *retired; /* the context's list of replaced plans */
};

/* Fill *p for spec (gemm_plan.c); check: a stream whose capture refuses a
 * load (may be NULL). */
int rt_gemm_plan_init(pgrt_ctx *ctx, const pgrt_gemm_spec *spec, CUstream check,
                      pgrt_gemm_plan *p);
/* Free what a plan owns (its counters), not the plan. */
void rt_gemm_plan_release(pgrt_gemm_plan *p);
/* The context's plan for spec, copied into *out (64-byte aligned): one of
 * the RT_GEMM_PLANS recent ones, else prepared (refusing a load while s
 * captures) and kept in place of the oldest (gemm.c). */
int rt_gemm_plan_find(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_gemm_spec *spec,
                      pgrt_gemm_plan *out);
#define RT_GEMM_PLANS 32

struct pgrt_ctx {
    rt_driver drv;
    int ordinal;
    CUdevice dev;
    CUcontext cu;
    pgrt_device_info info;

    pthread_mutex_t lock; /* the cache and its counters */
    pthread_cond_t loaded;
    cache_entry *cache;
    pgrt_cache_stats stats;

    /* Captures begun through pgrt_capture_begin and not yet ended. */
    atomic_int capturing;

    /* Start-up (cubin_cache.c, prewarm.c): the on-disk cubin cache (NULL:
     * off) and the pre-warm's thread count. */
    struct rt_cubin_cache *disk;
    int jit_threads;

    /* cuBLAS (cublas.c): made on first need under `lock`, then its own. */
    struct rt_blas *blas;

    /* pgrt_gemm's recent plans, under `lock`: the chooser and the module
     * cache lookups cost more than a thin GEMM's launch. */
    pgrt_gemm_plan *gemm_plans[RT_GEMM_PLANS]; /* owned */
    /* replaced plans: a copy may still run (and its counters with it)
     * until the context goes */
    pgrt_gemm_plan *gemm_retired;
    unsigned gemm_plan_next;
};

struct pgrt_stream {
    pgrt_ctx *ctx;
    CUstream cu;
    bool capturing;
};

struct pgrt_event {
    pgrt_ctx *ctx;
    CUevent cu;
};

struct pgrt_graph {
    pgrt_ctx *ctx;
    CUgraphExec exec;
};

typedef struct rt_alloc {
    atomic_int refs; /* the owning buffer and each view */
    CUdeviceptr ptr;
} rt_alloc;

struct pgrt_buf {
    pgrt_ctx *ctx;
    rt_alloc *alloc;
    CUdeviceptr ptr;
    size_t count;
    pg_type type;
    size_t elsize;
};

typedef struct module_kernel module_kernel;
struct pgrt_module {
    pgrt_ctx *ctx;
    CUmodule mod;
    module_kernel *kernels;
};

/* Make the context current on this thread (a no-op when it is; driver.c). */
int rt_ctx_bind(pgrt_ctx *ctx);
/* The stream handle (NULL stream: the legacy default stream). */
static inline CUstream rt_stream_cu(const pgrt_stream *s) { return s ? s->cu : NULL; }

/* Launch with an already computed configuration; arguments are checked
 * against the descriptor (with knob cross-checks when kn is not NULL). */
int rt_kernel_launch_cfg(pgrt_kernel *k, pgrt_stream *s, const pgk_launch *cfg,
                         const pgk_knobs *kn, const pgrt_arg *args, size_t nargs);
/* A kernel resolved once for one set of knobs: loaded (pgrt_kernel_get),
 * its baked knobs and launch shape checked, and for each size parameter
 * the knob it must equal (-1: none). rt_launch_run then launches with the
 * checks of pgrt_kernel_launch and no name looked up or formatted; a
 * failing check takes the checked path, whose message names the problem.
 * For a caller that launches one kernel and knob set many times (a
 * training step); the kernel lives as long as the context. */
typedef struct rt_launch {
    pgrt_kernel *k;
    pgk_knobs kn;
    pgk_launch cfg;
    int8_t knob_of[PGK_MAX_PARAMS];
} rt_launch;
int rt_launch_resolve(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, rt_launch *out);
int rt_launch_run(const rt_launch *l, pgrt_stream *s, const pgrt_arg *args, size_t nargs);
/* pgrt_kernel_get, refusing a miss while `check` (if not NULL) captures. */
/* The target a catalog kernel is built for on this device: its own "a"
 * target for a kernel that needs one (wgmma: sm_90a on 9.0), else the
 * device's plain target. */
pg_target rt_build_target(const pgrt_ctx *ctx, const pgk_desc *d);
int rt_kernel_get(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, CUstream check,
                  pgrt_kernel **out);
/* Unload every cached module (context teardown). */
void rt_cache_clear(pgrt_ctx *ctx);

/* ---------------------------------------------------------------- start-up */

/* A cubin the JIT made, not yet written to the disk cache (rt_cubin_write). */
typedef struct rt_cubin_pending rt_cubin_pending;

/* What one rt_kernel_load did, for the pre-warm report; ptx and defer are
 * the caller's inputs (zero for none). */
typedef struct rt_load_info {
    const char *ptx;    /* in: the kernel's PTX, built by the caller (borrowed) */
    bool defer;         /* in: leave the disk-cache write to the caller (pending) */
    bool whole;         /* in: compile as a whole program (pgk_desc.whole_program) */
    rt_cubin_pending *pending; /* out, with defer: the write to do, or NULL */
    bool loaded;        /* this call built and loaded the module (a cache miss) */
    bool from_disk;     /* ... from the on-disk cubin cache, without a JIT */
    double emit_ms;     /* building the PTX */
    double jit_ms;      /* the driver's JIT */
    double load_ms;     /* reading and loading a cubin */
    size_t cubin_bytes; /* the cubin's size, when one was loaded */
} rt_load_info;

/* rt_kernel_get that also says what it did (info may be NULL). */
int rt_kernel_load(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, CUstream check,
                   pgrt_kernel **out, rt_load_info *info);

/* ---------------------------------------------------------------- the JIT (jit.c) */

/* Check the PTX header and load it: JIT-compiled by the driver's linker
 * (cuLinkCreate/AddData/Complete, with logs) and the cubin loaded, or, on a
 * driver without the linker, cuModuleLoadDataEx with logs (cuModuleLoadData
 * on direct-load devices). `what` names the kernel in messages (may be
 * NULL). */
int rt_module_load_ptx(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out);
/* rt_module_load_ptx that also fills info's jit_ms, load_ms and
 * cubin_bytes (info may be NULL). */
int rt_module_load_ptx_timed(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out,
                             rt_load_info *info);
/* Whether the driver has the four cuLink* entry points. */
bool rt_have_linker(const pgrt_ctx *ctx);
/* JIT-compile PTX with the driver's linker into a cubin (malloc'd, the
 * caller's); a failure's message carries the JIT log on one line. */
int rt_jit_link(pgrt_ctx *ctx, const char *ptx, const char *what, void **cubin, size_t *len);
/* cuModuleLoadData of a cubin, with a message naming the kernel. */
int rt_module_load_cubin(pgrt_ctx *ctx, const void *cubin, const char *what, CUmodule *out);

/* The PTX header checks of rt_module_load_ptx, alone. */
int rt_ptx_precheck(pgrt_ctx *ctx, const char *ptx, const char *what);

/* ---------------------------------------------------------------- the disk cache */

/* The on-disk cubin cache (cubin_cache.c). rt_cubin_cache_open reads the
 * environment ($PTXGEN_CACHE, $PTXGEN_CACHE_DIR, $XDG_CACHE_HOME, $HOME,
 * $PTXGEN_CACHE_MAX_MB) and sets ctx->disk, NULL when the cache is off or
 * the driver has no linker; it never fails. */
typedef struct rt_cubin_cache rt_cubin_cache;
void rt_cubin_cache_open(pgrt_ctx *ctx);
void rt_cubin_cache_close(pgrt_ctx *ctx);
/* Load checked PTX through the cache: the cubin from disk when a valid
 * entry is there, else JIT it with the linker, load the cubin and store
 * it (with info->defer, hand the store back in info->pending instead).
 * Thread-safe; ctx->disk must be set. */
int rt_cubin_load(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out,
                  rt_load_info *info);
/* Store a deferred cubin (info->pending of a load with defer) and free it;
 * NULL does nothing. Nothing fails: a write that cannot be done turns the
 * cache's writing off, as in rt_cubin_load. */
void rt_cubin_write(pgrt_ctx *ctx, rt_cubin_pending *p);
/* Counters of the disk cache, copied into pgrt_cache_stats. */
void rt_cubin_cache_stats(pgrt_ctx *ctx, pgrt_cache_stats *out);

/* Restore a message and CUDA code captured on another thread (pre-warm
 * workers). */
void rt_msg_set(int cuda, const char *msg);
/* One line on stderr, "ptxgen: ...": for conditions with no caller to
 * return to (the disk cache turning itself off). */
void rt_log(const char *fmt, ...) RT_PRINTF(1, 2);
/* Destroy the context's cuBLAS handle and state, if any (teardown, with
 * the context current). */
typedef struct rt_blas rt_blas;
void rt_blas_destroy(pgrt_ctx *ctx);

#endif /* PTXGEN_RT_INTERNAL_H */
