/* SPDX-License-Identifier: MIT */
/*
 * pgrt kernels: catalog kernels (pgk.h) built, JIT-loaded, cached and
 * launched; PTX checked against a device; launch arguments; tensor maps;
 * pre-warming a list of modules. The conventions of pgrt.h (errors,
 * ownership, thread safety) hold here.
 */
#ifndef PTXGEN_PGRT_KERNEL_H
#define PTXGEN_PGRT_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgk.h"
#include "pgrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- PTX checks */

/* What the runtime reads from a PTX module's header. */
typedef struct pgrt_ptx_info {
    unsigned isa;      /* .version as major*10+minor (7.8 gives 78) */
    char target[24];   /* the first word of .target ("sm_90") */
    unsigned addrsize; /* .address_size, 0 when absent */
} pgrt_ptx_info;

/* Read .version, .target and .address_size from PTX text (len bytes, or up to
 * the NUL when len is 0). PGRT_EPTX when .version or .target is missing or
 * malformed; a one-line message goes to err (if errlen > 0). Pure. */
PGRT_API int pgrt_ptx_parse(const char *ptx, size_t len, pgrt_ptx_info *out, char *err,
                            size_t errlen);
/* The checks that run before any load: the PTX target must be the device's
 * target (contract F-PTX-001, PGRT_ETARGET), or the arch-specific ("a")
 * target of the same compute capability (sm_90a PTX on an sm_90 device:
 * device stands for a device of exactly that capability; the runtime checks
 * the capability itself with pgrt_ptx_check_device), and the driver
 * (cuDriverGetVersion form, 12080) must load the PTX ISA (PGRT_EISA, the
 * message names the driver needed). Pure. */
PGRT_API int pgrt_ptx_check(const pgrt_ptx_info *info, pg_target device, int driver_version,
                            char *err, size_t errlen);
/* F-PTX-001 with the device's exact compute capability: as pgrt_ptx_check
 * against dev->target and dev->driver_version, and an arch-specific PTX
 * target ("sm_90a") is accepted only on a device of exactly its compute
 * capability (sm_90a on 9.0, sm_100a on 10.0, sm_120a on 12.0; never on 8.9,
 * 9.x or 10.3). PGRT_ETARGET names both targets and the capability. Pure. */
struct pgrt_device_info;
PGRT_API int pgrt_ptx_check_device(const pgrt_ptx_info *info, const struct pgrt_device_info *dev,
                                   char *err, size_t errlen);
/* The target for a compute capability: the plain (never the "a") target of
 * that capability, else the highest plain target of the same major below it
 * (PTX JIT-compiles forward). PGRT_ETARGET if none (e.g. 6.1). Pure. */
PGRT_API int pgrt_target_for_cc(int major, int minor, pg_target *out);

/* ---------------------------------------------------------------- launch arguments */


/* One kernel argument: a device pointer or a scalar of a pg_type. Build them
 * with the pgrt_arg_* helpers. */
typedef struct pgrt_tensor_map pgrt_tensor_map;

/* pgrt_arg.type of a tensor-map argument (outside pg_type's range). */
#define PGRT_ARG_TENSOR_MAP 0x100u

typedef struct pgrt_arg {
    uint32_t type;  /* pg_type; PG_U64 for pointers; PGRT_ARG_TENSOR_MAP */
    bool pointer;   /* a device pointer (matches pgk_param.pointer) */
    union {
        const pgrt_tensor_map *tmap; /* PGRT_ARG_TENSOR_MAP: copied at launch */
        uint64_t u64;
        int64_t s64;
        uint32_t u32;
        int32_t s32;
        uint16_t u16;
        int16_t s16;
        float f32;
        double f64;
    } v;
} pgrt_arg;

static inline pgrt_arg pgrt_arg_ptr(pgrt_devptr p)
{
    pgrt_arg a;
    a.type = PG_U64;
    a.pointer = true;
    a.v.u64 = p;
    return a;
}
static inline pgrt_arg pgrt_arg_u32(uint32_t x)
{
    pgrt_arg a;
    a.type = PG_U32;
    a.pointer = false;
    a.v.u64 = 0;
    a.v.u32 = x;
    return a;
}
static inline pgrt_arg pgrt_arg_s32(int32_t x)
{
    pgrt_arg a;
    a.type = PG_S32;
    a.pointer = false;
    a.v.u64 = 0;
    a.v.s32 = x;
    return a;
}
static inline pgrt_arg pgrt_arg_u64(uint64_t x)
{
    pgrt_arg a;
    a.type = PG_U64;
    a.pointer = false;
    a.v.u64 = x;
    return a;
}
static inline pgrt_arg pgrt_arg_f32(float x)
{
    pgrt_arg a;
    a.type = PG_F32;
    a.pointer = false;
    a.v.u64 = 0;
    a.v.f32 = x;
    return a;
}
static inline pgrt_arg pgrt_arg_f64(double x)
{
    pgrt_arg a;
    a.type = PG_F64;
    a.pointer = false;
    a.v.f64 = x;
    return a;
}

/* A tensor map for a kernel parameter declared with pgk_param.tensor_map.
 * The launch copies its 128 bytes by value into the kernel's parameter
 * space, so m need only live for the launch call (a graph keeps the bytes
 * it captured). */
static inline pgrt_arg pgrt_arg_tensor_map(const pgrt_tensor_map *m)
{
    pgrt_arg a;
    a.type = PGRT_ARG_TENSOR_MAP;
    a.pointer = false;
    a.v.u64 = 0;
    a.v.tmap = m;
    return a;
}

/* Check a launch against the descriptor before anything reaches the driver:
 * the argument count, each argument's kind (device pointer or scalar) and
 * scalar type, no null device pointers, an encoded tensor map for each
 * tensor-map parameter (and none elsewhere), and, when kn is not NULL, that a
 * scalar argument named like a knob (n, m, k, ...) has the knob's value, so
 * the grid the knobs size covers the data the kernel is told about.
 * PGRT_EARGS (or PGRT_EINVAL for NULLs) with a one-line message. Pure. */
PGRT_API int pgrt_args_check(const pgk_desc *d, const pgk_knobs *kn, const pgrt_arg *args,
                             size_t nargs, char *err, size_t errlen);

/* The buffer as a kernel argument (a device pointer). */
PGRT_API pgrt_arg pgrt_arg_buf(const pgrt_buf *b);

/* ---------------------------------------------------------------- tensor maps */

/* A TMA descriptor (CUtensorMap, compute capability 9.0+) for a tiled view
 * of a device buffer, made by pgrt_tensor_map_encode*, passed to a kernel by
 * value with pgrt_arg_tensor_map. The first 128 bytes are the driver's
 * opaque map; the rest records what it was encoded from. */
#if defined(__cplusplus)
#define PGRT_ALIGN64 alignas(64)
#else
#define PGRT_ALIGN64 _Alignas(64)
#endif
struct pgrt_tensor_map {
    PGRT_ALIGN64 uint8_t opaque[128];
    pgrt_devptr base;
    uint64_t dims[5];    /* elements, innermost first */
    uint32_t box[5];     /* the tile a copy moves, innermost first */
    uint32_t rank;
    uint32_t dtype;      /* pg_type */
    uint32_t swizzle;    /* bytes of the swizzle span: 0, 32, 64 or 128 */
    uint32_t encoded;    /* PGRT_TENSOR_MAP_ENCODED once encoded */
};
#define PGRT_TENSOR_MAP_ENCODED 0x544d4150u

/* Encode a tiled tensor map (cuTensorMapEncodeTiled) of a rank-dimensional
 * tensor of dtype elements at device address base: dims[rank] elements a
 * dimension and strides[rank - 1] bytes between consecutive indices of
 * dimensions 1.. (innermost first, as the driver has them: a row-major
 * matrix of R rows and C columns is dims {C, R}, strides {row pitch}); the
 * box[rank] tile is what one TMA copy moves. swizzle is the span in bytes
 * (0: none, 32, 64, 128). Interleave none, element strides 1, L2 promotion
 * 256 B, out-of-bounds elements read as zero.
 *
 * Checked before the driver sees them, each failure naming the argument:
 * ctx and out not NULL, out 64-byte aligned (as its type is: a heap map
 * comes from aligned_alloc); a device of compute capability 9.0 or newer
 * (PGRT_ETARGET) and a driver with cuTensorMapEncodeTiled (CUDA 12.0,
 * PGRT_EDRIVER); dtype one of the integer and float types (not pred);
 * rank 2..5; base not 0 and 16-byte aligned; each dim 1..2^32; each stride
 * a multiple of 16, below 2^40 and at least the extent of the dimension
 * inside it (strides[0] >= dims[0] * element size, strides[i] >=
 * strides[i-1] * dims[i]); each box dim 1..256; the box's inner row
 * (box[0] * element size) a multiple of 16 bytes and, with a swizzle, at
 * most the swizzle span. PGRT_EINVAL or PGRT_ERANGE with a one-line
 * message; a driver refusal is PGRT_ECUDA with the arguments. */
PGRT_API int pgrt_tensor_map_encode(pgrt_ctx *ctx, pgrt_tensor_map *out, pg_type dtype,
                                    uint32_t rank, pgrt_devptr base, const uint64_t *dims,
                                    const uint64_t *strides, const uint32_t *box,
                                    uint32_t swizzle);
/* A row-major matrix of rows x cols elements, row_pitch bytes apart, in
 * box_rows x box_cols tiles. */
PGRT_API int pgrt_tensor_map_encode_2d(pgrt_ctx *ctx, pgrt_tensor_map *out, pg_type dtype,
                                       pgrt_devptr base, uint64_t rows, uint64_t cols,
                                       uint64_t row_pitch, uint32_t box_rows, uint32_t box_cols,
                                       uint32_t swizzle);
/* A batch of matrices: dims {cols, rows, batch}, strides {row pitch, matrix
 * pitch} in bytes, box {cols, rows, batch}. */
PGRT_API int pgrt_tensor_map_encode_3d(pgrt_ctx *ctx, pgrt_tensor_map *out, pg_type dtype,
                                       pgrt_devptr base, const uint64_t dims[3],
                                       const uint64_t strides[2], const uint32_t box[3],
                                       uint32_t swizzle);

/* ---------------------------------------------------------------- kernels and the module cache */

/* A loaded kernel function. Handles from the cache live as long as the
 * context; handles from pgrt_module_kernel as long as their module. */
typedef struct pgrt_kernel pgrt_kernel;

/* The cached kernel for (descriptor, knobs the descriptor bakes, device
 * target), built and JIT-loaded on first use. kn NULL means the defaults.
 * Concurrent callers asking for the same key wait for one load. A miss is
 * refused with PGRT_ECAPTURE while any stream of this context is capturing
 * through pgrt_capture_begin (loading a module mid-capture is what a
 * pre-warm exists to avoid). Build errors give PGRT_EKERNEL (PGRT_ERANGE for
 * a knob value outside its range); the PTX checks and the JIT, the codes of
 * pgrt_module_load. */
PGRT_API int pgrt_kernel_get(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn,
                             pgrt_kernel **out);
PGRT_API const pgk_desc *pgrt_kernel_desc(const pgrt_kernel *k);
/* Launch on stream s (NULL: legacy default stream). The grid, block,
 * shared bytes and cluster come from pgk_launch_for(desc, kn) (kn NULL: the
 * defaults); the arguments are checked with pgrt_args_check(desc, kn, ...);
 * a kernel that bakes knobs must be launched with the knob values it was
 * built for.
 *
 * Dynamic shared memory beyond the default 48 KiB (less the kernel's static
 * shared memory) is allowed on the function with cuFuncSetAttribute the
 * first time a launch needs it, once a size (raised when a later launch
 * needs more); past the device's opt-in maximum (shared_optin_bytes) the
 * launch fails with PGRT_ERANGE naming the kernel, the bytes and the limit,
 * and nothing runs. A non-zero cluster launches through cuLaunchKernelEx
 * with a cluster-dimension attribute (compute capability 9.0+, CUDA 11.8
 * driver; each cluster dim must divide the grid's and a cluster hold at
 * most 8 blocks, the portable size), else cuLaunchKernel; both capture into
 * graphs. */
PGRT_API int pgrt_kernel_launch(pgrt_kernel *k, pgrt_stream *s, const pgk_knobs *kn,
                                const pgrt_arg *args, size_t nargs);
/* pgrt_kernel_get by catalog name (PGRT_ENOTFOUND) then pgrt_kernel_launch.
 * A cache miss is also refused when s is capturing (cuStreamIsCapturing). */
PGRT_API int pgrt_launch(pgrt_ctx *ctx, pgrt_stream *s, const char *kernel, const pgk_knobs *kn,
                         const pgrt_arg *args, size_t nargs);

/* One kernel to pre-warm: a catalog name and its knobs (NULL: defaults;
 * only the knobs the kernel bakes matter). */
typedef struct pgrt_warm {
    const char *kernel;
    const pgk_knobs *knobs;
} pgrt_warm;
/* Load every listed kernel into the cache now, before weights fill the GPU
 * and before any capture. The modules are built and JIT-compiled
 * concurrently on the context's pre-warm threads (pgrt_ctx_set_jit_threads),
 * each with its own JIT log. An entry that fails (an unknown name, a build
 * or JIT error) does not stop the others: the call returns the first
 * failure in list order, its message followed by how many more failed.
 * Thread-safe, also against other callers of the cache. */
PGRT_API int pgrt_prewarm(pgrt_ctx *ctx, const pgrt_warm *list, size_t n);
/* pgrt_prewarm that also stores each entry's outcome (0 or an error code)
 * in rc[i]; rc (n entries, the caller's) may be NULL. */
PGRT_API int pgrt_prewarm_each(pgrt_ctx *ctx, const pgrt_warm *list, size_t n, int *rc);

typedef struct pgrt_cache_stats {
    uint64_t hits, misses; /* pgrt_kernel_get outcomes */
    uint64_t failures;     /* misses whose build or load failed */
    size_t modules;        /* modules held */
    double emit_ms;        /* building PTX, all misses together */
    double jit_ms;         /* the driver's JIT (cuModuleLoadDataEx or cuLink*), all misses */
    /* The on-disk cubin cache (docs/runtime.md); all 0 while it is off. */
    uint64_t disk_hits;    /* misses served by a cubin from disk, without a JIT */
    uint64_t disk_misses;  /* misses that found no usable entry and JIT-compiled */
    uint64_t disk_rejected; /* entries found truncated, corrupt or not ours alone (recompiled) */
    uint64_t disk_writes;  /* entries written */
    double load_ms;        /* reading cubins and cuModuleLoadData of them */
    uint64_t cubin_bytes;  /* bytes of the cubins loaded */
} pgrt_cache_stats;
PGRT_API int pgrt_cache_stats_get(pgrt_ctx *ctx, pgrt_cache_stats *out);

/* An uncached module from PTX text (copied by the driver; the text need
 * only live for the call). The header checks run first (PGRT_EPTX,
 * PGRT_ETARGET, PGRT_EISA); then cuModuleLoadDataEx with JIT logs, whose
 * error log is in the message on failure (PGRT_EJIT), or cuModuleLoadData
 * on compute capability >= 12. */
typedef struct pgrt_module pgrt_module;
PGRT_API int pgrt_module_load(pgrt_ctx *ctx, const char *ptx, pgrt_module **out);
PGRT_API void pgrt_module_destroy(pgrt_module **m);
/* The entry d->name of the module as a kernel launched against d. The
 * handle is owned by the module. */
PGRT_API int pgrt_module_kernel(pgrt_module *m, const pgk_desc *d, pgrt_kernel **out);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_KERNEL_H */
