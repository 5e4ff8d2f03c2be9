/* SPDX-License-Identifier: MIT */
/*
 * pgrt: the ptxgen CUDA runtime.
 *
 * Loads the CUDA driver at run time (dlopen of libcuda.so.1, entry points by
 * cuGetProcAddress), builds kernels from the catalog (pgk.h) into PTX, JITs
 * and caches the modules, and launches them with arguments checked against
 * the kernel descriptors. On top: typed device buffers, streams, events,
 * CUDA graph capture and the fused gradient-clip pipeline.
 *
 * Nothing here needs CUDA headers or libcuda at link time: a machine without
 * a driver or a GPU gets an error code and a message, never a crash.
 *
 * Errors: every function returning int returns 0 or a negative PGRT_E* code.
 * The message of the last failure on the calling thread is
 * pgrt_last_message(); for a failed driver call it names the call and the
 * CUresult ("cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: ptxas ... line 7;
 * error : ..."). Every function that returns an error code sets the
 * message, the pure checks included; successful calls leave it as it was.
 *
 * Ownership: every object is created by a pgrt_*_create/alloc function that
 * takes `T **out` and freed by the matching pgrt_*_destroy(&p), which also
 * sets p to NULL (NULL and *p == NULL are allowed). Everything created from
 * a context must be destroyed before the context.
 *
 * Thread safety: a pgrt_ctx may be used from several threads at once: the
 * module cache is locked, and every call makes the context current on the
 * calling thread. A stream (and a capture on it) belongs to one thread at a
 * time. Buffers, events, graphs and clip states may be used from any
 * thread, but not concurrently with their own destruction. The pure
 * functions (pgrt_strerror, pgrt_ptx_*, pgrt_args_check, pgrt_target_for_cc,
 * pgrt_cuda_error_name) are thread-safe.
 */
#ifndef PTXGEN_PGRT_H
#define PTXGEN_PGRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgk.h"
#include "ptxgen.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PGRT_BUILDING) && defined(__GNUC__)
#define PGRT_API __attribute__((visibility("default")))
#else
#define PGRT_API
#endif

/* ---------------------------------------------------------------- errors */

/* One table: code, value, message. Values are stable ABI. */
#define PGRT_ERRNO_MAP(X)                                                      \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of host memory")                                        \
    X(ENODRIVER, -3, "no CUDA driver")                                         \
    X(ENODEVICE, -4, "no CUDA device")                                         \
    X(EDRIVER, -5, "CUDA driver too old")                                      \
    X(ECUDA, -6, "CUDA driver call failed")                                    \
    X(EDEVMEM, -7, "out of device memory")                                     \
    X(ETARGET, -8, "PTX target does not match the device")                     \
    X(EISA, -9, "PTX ISA too new for the driver")                              \
    X(EPTX, -10, "malformed PTX header")                                       \
    X(EJIT, -11, "PTX JIT compilation failed")                                 \
    X(EKERNEL, -12, "kernel build failed")                                     \
    X(ENOTFOUND, -13, "unknown kernel")                                        \
    X(EARGS, -14, "launch does not match the kernel")                          \
    X(ECAPTURE, -15, "not allowed while a stream is capturing")                \
    X(ERANGE, -16, "out of range")                                             \
    X(ESTATE, -17, "call not valid in this state")                             \
    X(ENOLIB, -18, "a library the call needs was not found")                   \
    X(ECOMM, -19, "collective communication failed")                           \
    X(ETIMEOUT, -20, "timed out")

typedef enum pgrt_errno {
    PGRT_OK = 0,
#define PGRT_X_(name, val, msg) PGRT_##name = (val),
    PGRT_ERRNO_MAP(PGRT_X_)
#undef PGRT_X_
} pgrt_errno;

/* "no CUDA device"; never NULL. */
PGRT_API const char *pgrt_strerror(int err);
/* "PGRT_ENODEVICE"; never NULL. */
PGRT_API const char *pgrt_err_name(int err);
/* The message of the last failed call on this thread ("" before any). The
 * text stays valid until the next failing call on the same thread. */
PGRT_API const char *pgrt_last_message(void);
/* The CUresult of the last failed call on this thread when that failure came
 * from the driver, else 0. */
PGRT_API int pgrt_last_cuda_error(void);
/* "CUDA_ERROR_INVALID_PTX" for a CUresult value; "CUDA_ERROR_UNRECOGNIZED"
 * for a value the table does not know. Never NULL. */
PGRT_API const char *pgrt_cuda_error_name(int curesult);
/* Whether err means "this machine cannot run CUDA" (no driver, no device):
 * what a GPU test turns into a skip. */
PGRT_API bool pgrt_err_unavailable(int err);

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

typedef uint64_t pgrt_devptr;

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

/* ---------------------------------------------------------------- context */

typedef struct pgrt_ctx pgrt_ctx;

typedef struct pgrt_ctx_params {
    /* The driver library. NULL: $PGRT_LIBCUDA when set, else "libcuda.so.1". */
    const char *libcuda;
    /* Device ordinal. */
    int device;
    /* Build for this target instead of the device's own ("sm_80" on a 9.0
     * device): PTX JIT-compiles forward, so an older family's kernels run
     * on a newer card, which is how every code path is tested on one GPU.
     * NULL: $PTXGEN_TARGET when set and not empty, else the device's target
     * (the default, contract F-PTX-001). Accepted: a plain target no newer
     * than the device's compute capability, or the device's own "a"
     * target; anything else fails pgrt_ctx_create with PGRT_ETARGET naming
     * the value and where it came from. An override is logged once on
     * stderr, and F-PTX-001 then holds against the chosen target. */
    const char *target;
} pgrt_ctx_params;

typedef struct pgrt_device_info {
    char name[256];
    int cc_major, cc_minor;
    pg_target target;   /* what kernels are built for (sm_90 on 9.0) */
    int driver_version; /* cuDriverGetVersion: 12080 for 12.8 */
    int sm_count;
    size_t total_bytes;
    /* Modules load with plain cuModuleLoadData (compute capability >= 12),
     * which gives no JIT log on failure. */
    bool direct_load;
    /* The arch-specific target this device also loads: sm_90a on exactly
     * 9.0, sm_100a on 10.0, sm_120a on 12.0; else the same as target. */
    pg_target arch_target;
    /* Shared memory a block may use after opting in
     * (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN; 48 KiB when
     * the driver does not say): the most a launch's dynamic shared memory
     * and the kernel's static shared memory may add up to. */
    int shared_optin_bytes;
    /* The device's own target and arch-specific target; target and
     * arch_target above differ from them only under a target override
     * (pgrt_ctx_params.target, $PTXGEN_TARGET), which sets both to the
     * chosen target. */
    pg_target native_target, native_arch_target;
    bool target_override;
} pgrt_device_info;

/* Load the driver, initialise it, retain the device's primary context and
 * make it current on this thread. params may be NULL (defaults: device 0).
 * On success *out owns the context. Errors: PGRT_ENODRIVER (no libcuda, or
 * the toolkit's stub), PGRT_ENODEVICE, PGRT_EDRIVER (an entry point the
 * runtime needs is missing: the message names it and the CUDA version it
 * needs), PGRT_ETARGET (no target for the device), PGRT_ECUDA. */
PGRT_API int pgrt_ctx_create(pgrt_ctx **out, const pgrt_ctx_params *params);
/* Unload cached modules and release the primary context. Not thread-safe:
 * no other call on the context may be running or follow. */
PGRT_API void pgrt_ctx_destroy(pgrt_ctx **ctx);
/* The device, as found at creation (no driver call). */
PGRT_API int pgrt_ctx_device_info(const pgrt_ctx *ctx, pgrt_device_info *out);
/* The threads pgrt_prewarm and pgrt_prewarm_model JIT-compile on. n > 0
 * sets it (at most 64); n == 0 goes back to the default: $PTXGEN_JIT_THREADS
 * when set, else the number of online CPUs, at most 16. Returns the count
 * now in force (PGRT_EINVAL for a NULL ctx or n < 0). Not thread-safe
 * against a pre-warm running on the context. */
PGRT_API int pgrt_ctx_set_jit_threads(pgrt_ctx *ctx, int n);
PGRT_API pg_target pgrt_ctx_target(const pgrt_ctx *ctx);
/* Free and total device memory now (cuMemGetInfo). */
PGRT_API int pgrt_ctx_mem_info(pgrt_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
/* Wait for all work on the device (cuCtxSynchronize). */
PGRT_API int pgrt_ctx_sync(pgrt_ctx *ctx);

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

/* ---------------------------------------------------------------- streams and events */

typedef struct pgrt_stream pgrt_stream;
typedef struct pgrt_event pgrt_event;

/* A non-blocking stream (no implicit sync with the legacy default stream,
 * which would break graph capture). Functions taking a stream accept NULL
 * for the legacy default stream, except capture. */
PGRT_API int pgrt_stream_create(pgrt_ctx *ctx, pgrt_stream **out);
PGRT_API void pgrt_stream_destroy(pgrt_stream **s);
PGRT_API int pgrt_stream_sync(pgrt_stream *s);
/* Whether the stream is capturing (cuStreamIsCapturing; also captures begun
 * outside this API). */
PGRT_API int pgrt_stream_is_capturing(pgrt_stream *s, bool *capturing);
/* Whether everything ordered on s so far has finished (cuStreamQuery),
 * without waiting: *idle true or false and 0, or an error the stream's
 * work ran into. */
PGRT_API int pgrt_stream_query(pgrt_stream *s, bool *idle);
/* Work ordered on s after this call waits for e's last record
 * (cuStreamWaitEvent); inside a capture this is how a second stream
 * forks from and joins the captured one. */
PGRT_API int pgrt_stream_wait_event(pgrt_stream *s, pgrt_event *e);

/* A timing event. */
PGRT_API int pgrt_event_create(pgrt_ctx *ctx, pgrt_event **out);
PGRT_API void pgrt_event_destroy(pgrt_event **e);
PGRT_API int pgrt_event_record(pgrt_event *e, pgrt_stream *s);
PGRT_API int pgrt_event_sync(pgrt_event *e);
/* Milliseconds from start to end; both recorded and complete. */
PGRT_API int pgrt_event_elapsed_ms(const pgrt_event *start, const pgrt_event *end, float *ms);

/* ---------------------------------------------------------------- buffers */

/* A typed device buffer: element type, count, device pointer. Either owns
 * its allocation or is a view into another buffer's. */
typedef struct pgrt_buf pgrt_buf;

/* count elements of type t (not PG_PRED), uninitialised. */
PGRT_API int pgrt_buf_alloc(pgrt_ctx *ctx, pg_type t, size_t count, pgrt_buf **out);
/* A view of elements [offset, offset+count) of parent, same type. The
 * allocation lives until the parent and all its views are destroyed, in any
 * order. */
PGRT_API int pgrt_buf_view(pgrt_buf *parent, size_t offset, size_t count, pgrt_buf **out);
PGRT_API void pgrt_buf_destroy(pgrt_buf **b);
/* Accessors; 0 / PG_TYPE_COUNT for NULL. */
PGRT_API pgrt_devptr pgrt_buf_ptr(const pgrt_buf *b);
PGRT_API size_t pgrt_buf_count(const pgrt_buf *b);
PGRT_API size_t pgrt_buf_bytes(const pgrt_buf *b);
PGRT_API pg_type pgrt_buf_type(const pgrt_buf *b);
/* The buffer as a kernel argument (a device pointer). */
PGRT_API pgrt_arg pgrt_arg_buf(const pgrt_buf *b);

/* Copies count elements; offsets are in elements and bounds are checked
 * (PGRT_ERANGE). Copies between buffers need equal element types.
 *
 * The plain forms are synchronous with the whole device: they wait for all
 * work queued on the context (every stream), copy, and return with the copy
 * complete. Safe anywhere outside a capture, and a stall: training loops use
 * the _async forms, which are ordered on stream s only (the host memory must
 * stay valid until the stream reaches them). A plain form on a thread that
 * is capturing invalidates the capture. */
PGRT_API int pgrt_buf_upload(pgrt_buf *b, size_t offset, const void *src, size_t count);
PGRT_API int pgrt_buf_download(const pgrt_buf *b, size_t offset, void *dst, size_t count);
PGRT_API int pgrt_buf_copy(pgrt_buf *dst, size_t dst_offset, const pgrt_buf *src,
                           size_t src_offset, size_t count);
PGRT_API int pgrt_buf_upload_async(pgrt_buf *b, size_t offset, const void *src, size_t count,
                                   pgrt_stream *s);
PGRT_API int pgrt_buf_download_async(const pgrt_buf *b, size_t offset, void *dst, size_t count,
                                     pgrt_stream *s);
PGRT_API int pgrt_buf_copy_async(pgrt_buf *dst, size_t dst_offset, const pgrt_buf *src,
                                 size_t src_offset, size_t count, pgrt_stream *s);
/* Every byte of the buffer set to `byte` (plain form: synchronous with the
 * device, as the copies). */
PGRT_API int pgrt_buf_memset(pgrt_buf *b, uint8_t byte);
PGRT_API int pgrt_buf_memset_async(pgrt_buf *b, uint8_t byte, pgrt_stream *s);
/* Every element of a 32-bit buffer set to the bit pattern `bits` (a NaN
 * poison, say). PGRT_EINVAL for other element sizes. */
PGRT_API int pgrt_buf_fill32(pgrt_buf *b, uint32_t bits);
PGRT_API int pgrt_buf_fill32_async(pgrt_buf *b, uint32_t bits, pgrt_stream *s);

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

/* ---------------------------------------------------------------- graphs */

typedef struct pgrt_graph pgrt_graph;

/* Start capturing stream s (cuStreamBeginCapture, thread-local mode): the
 * work this thread then puts on s is recorded, not run. Kernels must be in
 * the cache already (see pgrt_prewarm). */
PGRT_API int pgrt_capture_begin(pgrt_stream *s);
/* End the capture and instantiate it. On success *out owns an executable
 * graph. On failure the capture is over all the same. */
PGRT_API int pgrt_capture_end(pgrt_stream *s, pgrt_graph **out);
/* End a capture and drop what it recorded: the way out of an error path. */
PGRT_API int pgrt_capture_abort(pgrt_stream *s);
/* Replay the graph on s. Buffers it uses must still exist. */
PGRT_API int pgrt_graph_launch(pgrt_graph *g, pgrt_stream *s);
PGRT_API void pgrt_graph_destroy(pgrt_graph **g);

/* ---------------------------------------------------------------- fused gradient clipping */

/* State for clipping one set of f32 gradient buffers by their global L2
 * norm, sized once: a partials buffer of sum(pgk_squared_sum_num_blocks(n_i))
 * floats (buffers of 0 elements take none) and a 2-float result on the
 * device, [0] = scale, [1] = norm. The kernels of both paths (the three
 * per-buffer ones and the two _multi ones, see pgrt_clip_set_multi) are
 * loaded here, so a run can be captured. */
typedef struct pgrt_clip pgrt_clip;

PGRT_API int pgrt_clip_create(pgrt_ctx *ctx, const size_t *sizes, size_t nbufs, pgrt_clip **out);
PGRT_API void pgrt_clip_destroy(pgrt_clip **c);
/* One step on stream s: a squared_sum_reduce per buffer into its slice of
 * the partials, one clip_scale_reduce, a gradient_clip_gpu_scale per
 * buffer (or, by default, one launch of each _multi kernel for all buffers:
 * see pgrt_clip_set_multi). No host synchronisation; captures into a graph (max_norm is then
 * part of the graph). grads[i] must be f32 with sizes[i] elements (NULL
 * where sizes[i] is 0). max_norm
 * must be finite and > 0. The same state serves any buffers of these sizes
 * (one layer after another), but runs sharing a state must be ordered on
 * one stream. */
PGRT_API int pgrt_clip_run(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads, size_t nbufs,
                           float max_norm);
/* Copy [scale, norm] of the last run to the host: waits for stream s. Either
 * pointer may be NULL. */
PGRT_API int pgrt_clip_result(pgrt_clip *c, pgrt_stream *s, float *scale, float *norm);
/* The device buffer of [scale, norm], owned by the state: kernels that
 * follow in the same stream (an optimizer) may read the scale from it. */
PGRT_API pgrt_buf *pgrt_clip_result_buf(pgrt_clip *c);
/* Number of partial sums (the partials buffer's length). */
PGRT_API uint32_t pgrt_clip_partials(const pgrt_clip *c);
/* Choose the launches of pgrt_clip_run. multi (the default): one
 * squared_sum_reduce_multi, clip_scale_reduce, one
 * gradient_clip_gpu_scale_multi, walking a device table of the buffers that
 * the state owns; the results (partials, norm, scale, gradients) are
 * bitwise those of the per-buffer launches. The table is uploaded on s
 * (ordered, asynchronous) when a run's buffers differ from the last; a
 * capturing stream cannot upload, so a capture whose buffers differ from
 * the table's records the per-buffer launches instead. A captured table is
 * never rewritten (a later change of buffers gets a new one, freed with the
 * state), so graphs stay valid. Not thread-safe with runs of the state. */
PGRT_API int pgrt_clip_set_multi(pgrt_clip *c, bool multi);
/* Whether runs take the multi path (wanted and possible: the grids of all
 * blocks fit one launch). */
PGRT_API bool pgrt_clip_multi(const pgrt_clip *c);
/* Upload (on s, ordered) the multi path's table for these buffers without
 * running, so that a capture of a run with them records the multi launches
 * even when no eager run came first. Outside capture only (PGRT_ECAPTURE
 * while s captures); does nothing on the per-buffer path or when every
 * table is taken by graphs. Not thread-safe with runs of the state. */
PGRT_API int pgrt_clip_prepare(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads,
                               size_t nbufs);

/* ---------------------------------------------------------------- GEMM backward dispatch, cuBLAS */

/*
 * The backward GEMMs of a layer whose forward pass is C = A·B (A[M,K],
 * B[K,N], C[M,N], all row-major f32):
 *
 *   pgrt_gemm_backward_a   grad_A[M,K] = dC[M,N]·B[K,N]ᵀ   (accumulate: +=)
 *   pgrt_gemm_backward_b   grad_B[K,N] = A[M,K]ᵀ·dC[M,N]
 *
 * run by cuBLAS when the context has it and its switch is on, and by the
 * catalog's PTX kernels (gemm_backward_a, _a_accumulate, _b) otherwise.
 *
 * cuBLAS is optional and found at run time: dlopen of $PGRT_LIBCUBLAS
 * alone when that is set, else libcublas.so.13, .so.12, .so.11 and
 * libcublas.so. One handle a context, made on first need (the first GEMM,
 * pgrt_cublas_info_get or pgrt_prewarm_model) and destroyed with the
 * context, in CUBLAS_PEDANTIC_MATH: plain fp32, no TF32 (TF32 gave NaNs on
 * transposed backward GEMMs with gradients near 1e5). Each call binds the
 * handle to its stream (cublasSetStream_v2) under a lock, so the GEMM is
 * ordered on the stream given. A missing or unusable library is never an
 * error: the PTX kernels run, and pgrt_cublas_info_get() says why. A load
 * is tried once a context and refused (PGRT_ECAPTURE) while a stream of the
 * context is capturing: pre-warm first.
 *
 * The switch: on, unless $PTXGEN_CUBLAS is "0" when the context first
 * needs it; pgrt_ctx_set_cublas() sets it either way at any time (later
 * GEMMs follow it). Thread-safe.
 */
typedef enum pgrt_gemm_path {
    PGRT_GEMM_PTX = 1,    /* a catalog kernel */
    PGRT_GEMM_CUBLAS = 2, /* cublasSgemm_v2, pedantic fp32 */
} pgrt_gemm_path;

/* grad_A = dC·Bᵀ, or grad_A += dC·Bᵀ with accumulate, on stream s (NULL:
 * the legacy default stream). grad_c holds at least m*n, b k*n and grad_a
 * m*k f32 elements (views are fine); grad_a must not overlap the inputs;
 * m, n, k in [1, 2^24]. Asynchronous. *path (may be NULL) says which path
 * ran. Errors: PGRT_EINVAL, PGRT_ERANGE for the operands; a PTX launch's
 * codes; PGRT_ECUDA with the cuBLAS status name when cuBLAS fails;
 * PGRT_ECAPTURE for a load (module or cuBLAS) during capture. */
PGRT_API int pgrt_gemm_backward_a(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *grad_c,
                                  const pgrt_buf *b, pgrt_buf *grad_a, uint32_t m, uint32_t n,
                                  uint32_t k, bool accumulate, pgrt_gemm_path *path);
/* grad_B = Aᵀ·dC: a holds m*k, grad_c m*n, grad_b k*n elements; otherwise
 * as pgrt_gemm_backward_a. */
PGRT_API int pgrt_gemm_backward_b(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *a,
                                  const pgrt_buf *grad_c, pgrt_buf *grad_b, uint32_t m,
                                  uint32_t n, uint32_t k, pgrt_gemm_path *path);

/* ---------------------------------------------------------------- GEMM, every layout and type */

/*
 * One GEMM of a linear layer, through pgk_gemm_choose() for this device:
 *
 *   PGK_GEMM_FORWARD     c = Y[M,N]  (+)= a = X[M,K]  · b = W[N,K]ᵀ  (+ bias[N])
 *   PGK_GEMM_BACKWARD_X  c = dX[M,K] (+)= a = dY[M,N] · b = W[N,K]   (+ bias[K])
 *   PGK_GEMM_BACKWARD_W  c = dW[N,K] (+)= a = dY[M,N]ᵀ · b = X[M,K]  (+ bias[K])
 *
 * Types come from the buffers: a and b both f16 or both bf16 with c f32,
 * f16 or bf16 (f32 accumulate; sm_80+ tensor cores: gemm_sm90's wgmma +
 * TMA for the large shapes on a compute capability 9.0 device, mma.sync
 * otherwise; a slow fallback on older devices); or a, b and c all f32
 * (SIMT, no TF32: the warp-tiled family for sides of 64 and up and for
 * any shape with a bias or a backward accumulate, the small-tile kernels
 * for thin shapes). A side of at most 64 (a LoRA rank) may run gemm_thin
 * instead: one launch, no workspace (see pgk_gemm_choose). bias (may be NULL) is f32, one value a column
 * of c. accumulate adds the product to c (read in its own type), else c is
 * overwritten and never read. workspace (may be NULL) is any buffer of at
 * least pgrt_gemm_workspace_bytes() bytes: without it, a shape the chooser
 * would split along the reduction runs unsplit instead. Either way the
 * result is the same bits every run (split-K partials are summed in a
 * fixed order). Asynchronous on s (NULL: legacy default stream). c must
 * not overlap a, b or bias, nor may the workspace (one that overlaps c is
 * not used). A graph may capture a shape (and, on gemm_sm90 and for
 * f32, its accumulate and bias) run once before. *used (may be NULL) gets the
 * choice that ran. Errors:
 * PGRT_EINVAL for the operands (types, contexts, overlap), PGRT_ERANGE for
 * sizes outside [1, 2^21] or buffers too small, a launch's codes.
 */
PGRT_API int pgrt_gemm(pgrt_ctx *ctx, pgrt_stream *s, pgk_gemm_layout layout, const pgrt_buf *a,
                       const pgrt_buf *b, pgrt_buf *c, const pgrt_buf *bias, uint32_t m,
                       uint32_t n, uint32_t k, bool accumulate, pgrt_buf *workspace,
                       pgk_gemm_choice *used);
/* The workspace pgrt_gemm wants for this GEMM on ctx's device (0: none). */
PGRT_API uint64_t pgrt_gemm_workspace_bytes(pgrt_ctx *ctx, pgk_gemm_layout layout,
                                            pg_type in_type, pg_type out_type, uint32_t m,
                                            uint32_t n, uint32_t k);

/* ---------------------------------------------------------------- prepared GEMMs */

/*
 * A prepared GEMM: one product of a linear layer, chosen, loaded and (on
 * gemm_sm90) tensor-mapped once, then launched on device addresses with
 * nothing but the driver call: no choice, no catalog or cache lookup, no
 * allocation, so a launch is as cheap as a kernel launch and safe inside a
 * graph capture. pgrt_gemm, pgrt_gemm_sm90, the seed's pgrt_gemm_backward_*
 * and the model (pgrt_lm) all run their GEMMs through it.
 *
 * The layouts and operands, in the layer's words (y = x·Wᵀ, m rows):
 *
 *   PGK_GEMM_FORWARD     c[m,n] (+)= a[m,k]·b[n,k]ᵀ   a = x,  b = W   (+ bias[n])
 *   PGK_GEMM_BACKWARD_X  c[m,k] (+)= a[m,n]·b[n,k]    a = dy, b = W
 *   PGK_GEMM_BACKWARD_W  c[n,k] (+)= a[m,n]ᵀ·b[m,k]   a = dy, b = x
 *
 * The LoRA term rides in the product (16-bit inputs on gemm_sm90): with k2
 * > 0, c also gets a2·b2 over k2 more, a2 and b2 stored the way the layout
 * stores a and b: forward a2 = s·x·Aᵀ [m, k2], b2 = B [n, k2]; dX a2 =
 * s·dy·B [m, k2], b2 = A [k2, k]. Not for dW.
 */
typedef enum pgrt_gemm_kind {
    PGRT_GEMM_CHOSEN = 0, /* pgk_gemm_choose's pick for the device */
    PGRT_GEMM_SEED = 1,   /* f32: the seed's kernels (pgk_gemm_seed_choice), the exact path */
    PGRT_GEMM_WGMMA = 2,  /* 16-bit: gemm_sm90 whatever the shape (a LoRA rank side too) */
} pgrt_gemm_kind;

typedef struct pgrt_gemm_spec {
    pgk_gemm_layout layout;
    pgrt_gemm_kind kind;
    pg_type in_type, out_type; /* a and b (and a2, b2); c */
    uint32_t m, n, k;          /* the layer's, as above; each in [1, 2^21] */
    pgrt_devptr a, b;          /* the operands the plan is bound to */
    uint32_t lda, ldb, ldc;    /* row pitches in elements; 0: dense (only gemm_sm90 takes others) */
    bool accumulate;           /* c += (read in its own type) */
    bool bias;                 /* + an f32 bias, one value a column of c, given at launch */
    pgrt_devptr a2, b2;        /* the LoRA extension, k2 > 0 */
    uint32_t k2, lda2, ldb2;
    uint32_t bn;   /* gemm_sm90's tile width; 0: chosen */
    bool no_split; /* never split the reduction: no workspace at launch */
} pgrt_gemm_spec;

typedef struct pgrt_gemm_plan pgrt_gemm_plan;

/* Prepare spec on ctx's device: choose, load (refused, PGRT_ECAPTURE,
 * while a stream of ctx captures and the kernel is not loaded yet) and
 * encode. On gemm_sm90, a, b, a2 and b2 must be 16-byte aligned with
 * pitches that are multiples of 8; a choice of gemm_sm90 whose operands
 * are not falls back to the mma.sync family. *out is the caller's, freed
 * by pgrt_gemm_plan_destroy. Errors: PGRT_EINVAL (NULLs, types, layout, an
 * extension the choice cannot take), PGRT_ERANGE (sizes, pitches), the
 * loads' and encodes' codes. Thread-safe. */
PGRT_API int pgrt_gemm_plan_create(pgrt_ctx *ctx, const pgrt_gemm_spec *spec,
                                   pgrt_gemm_plan **out);
/* Run the plan on s into c, with bias (spec.bias) and a workspace of
 * pgrt_gemm_plan_workspace() bytes. Without one (0), a product split on
 * the mma.sync family runs unsplit (the same bits); one split on gemm_sm90
 * is refused (PGRT_EINVAL: make it with no_split). Asynchronous. A split
 * gemm_sm90 plan counts its slices on counters of its own: its launches
 * must be ordered (one stream), as they share the workspace anyway. */
PGRT_API int pgrt_gemm_plan_launch(const pgrt_gemm_plan *p, pgrt_stream *s, pgrt_devptr c,
                                   pgrt_devptr bias, pgrt_devptr workspace);
/* The workspace a launch wants for its split-K (0: none). */
PGRT_API uint64_t pgrt_gemm_plan_workspace(const pgrt_gemm_plan *p);
/* The kernel, knobs and split the plan runs. */
PGRT_API const pgk_gemm_choice *pgrt_gemm_plan_choice(const pgrt_gemm_plan *p);
PGRT_API void pgrt_gemm_plan_destroy(pgrt_gemm_plan **p);

/* Turn the cuBLAS path on or off for the GEMMs of ctx that follow. Turning
 * it on loads nothing yet and is no error when cuBLAS is missing: see
 * pgrt_cublas_info_get. */
PGRT_API int pgrt_ctx_set_cublas(pgrt_ctx *ctx, bool enabled);

typedef struct pgrt_cublas_info {
    bool enabled;       /* the switch */
    bool available;     /* the library is loaded and the handle made */
    bool in_use;        /* enabled && available: GEMMs go to cuBLAS */
    int version;        /* cublasGetVersion: 130000 for 13.0.0; 0 when not loaded */
    char library[256];  /* the name it was opened by; "" when not loaded */
    char reason[512];   /* why it is not in use ("" when it is) */
    double load_ms;     /* dlopen and handle creation */
    uint64_t cublas_gemms, ptx_gemms; /* GEMMs dispatched so far, by path */
} pgrt_cublas_info;

/* The cuBLAS state of ctx, loading the library first when the switch is on
 * and no load was tried yet (PGRT_ECAPTURE during a capture). 0 whether or
 * not cuBLAS is there. */
PGRT_API int pgrt_cublas_info_get(pgrt_ctx *ctx, pgrt_cublas_info *out);

/* ---------------------------------------------------------------- pre-warm for a model */

/*
 * The shape of a transformer to train (contract C-PREWARM-001). Rows of
 * every GEMM are tokens a step: max_batch * max_seq_len.
 */
typedef struct pgrt_model_config {
    uint32_t hidden;       /* H, the residual stream */
    uint32_t q_dim;        /* num_heads * head size: Q's width, O's input */
    uint32_t kv_hidden;    /* K's and V's width (a multiple of the head size) */
    uint32_t max_seq_len;  /* the longest sequence a step */
    uint32_t lora_rank;    /* r of the LoRA adapters on every projection; 0: none */
    uint32_t intermediate; /* the MLP's width */
    uint32_t num_heads;    /* attention heads (divides q_dim) */
    uint32_t max_batch;    /* sequences a step; 0 means 1 */
    bool full_fp32;        /* the base weights train too (f32), not only LoRA */
    bool f16_weights;      /* frozen weights kept in f16: input gradients through
                              them by gemm_f16_backward_a (sm_80 and up) */
} pgrt_model_config;

#define PGRT_PREWARM_MAX 128
#define PGRT_PREWARM_KEY_MAX 96

typedef struct pgrt_prewarm_module {
    /* The cache key: "kernel@target", then each baked knob:
     * "gemm_backward_a@sm_90,variant=1". */
    char key[PGRT_PREWARM_KEY_MAX];
    bool loaded;    /* built and JIT-loaded by this call (false: already cached) */
    double jit_ms;  /* its JIT time in this call (0 when it was cached) */
    double emit_ms; /* building its PTX in this call */
    bool from_disk; /* loaded from the on-disk cubin cache, without a JIT */
    double load_ms; /* reading and loading its cubin */
    size_t cubin_bytes;
    int rc;         /* 0, or why it failed (the call returns the first) */
    size_t ptx_bytes; /* its PTX (the pool loads the longest first) */
    double start_ms, end_ms; /* its load, from the start of the pool's work */
} pgrt_prewarm_module;

typedef struct pgrt_prewarm_report {
    size_t modules;   /* entries of list: the distinct modules a step needs */
    size_t loaded;    /* of them, loaded by this call */
    size_t hits;      /* of them, in the cache already */
    double jit_ms;    /* JIT time of this call's loads */
    double emit_ms;   /* PTX building of this call's loads */
    double total_ms;  /* the whole call, cuBLAS included */
    bool cublas;      /* the GEMMs will go to cuBLAS */
    double cublas_ms; /* loading cuBLAS in this call (0 once loaded) */
    size_t failed;    /* modules that failed to build or load */
    size_t disk_hits; /* of the loaded, served by the on-disk cubin cache */
    double load_ms;   /* cubin reading and loading of this call's loads */
    size_t cubin_bytes; /* of this call's loads */
    int threads;      /* the threads the modules were loaded on */
    pgrt_prewarm_module list[PGRT_PREWARM_MAX];
} pgrt_prewarm_report;

/* Load every module a backward step of this model launches (the backward
 * kernels of norms, attention, MLP and projections, the GEMMs in the tile
 * variant the dispatch picks for each shape, the fused clip and AdamW) and
 * the cuBLAS handle when the switch is on, before the caller allocates
 * weights and before any capture. Kernels take their sizes as parameters,
 * so the list hardly depends on the shape: one module a kernel, plus one a
 * GEMM tile variant. The PTX GEMMs are loaded even when cuBLAS will run
 * the GEMMs, so that turning cuBLAS off never JIT-compiles mid-training.
 * A second call finds everything cached.
 *
 * The config is checked first, with the knob values a step would launch:
 * PGRT_EINVAL for a zero or inconsistent field, PGRT_ERANGE for sizes a
 * kernel cannot take (max_seq_len * intermediate past u32, say), and
 * PGRT_ETARGET for f16_weights below sm_80; the message names the fields.
 * The modules load concurrently, as in pgrt_prewarm, and a failing one
 * does not stop the others; the call returns the first failure in plan
 * order. out (may be NULL) is filled as far as the call got. The jit_ms,
 * emit_ms and load_ms of the report are sums over modules (thread time);
 * total_ms is the wall clock. */
PGRT_API int pgrt_prewarm_model(pgrt_ctx *ctx, const pgrt_model_config *cfg,
                                pgrt_prewarm_report *out);
/* pgrt_prewarm_each (rc may be NULL) that also fills out (may be NULL) as
 * pgrt_prewarm_model does, one entry a list entry in list order; at most
 * PGRT_PREWARM_MAX entries (PGRT_EINVAL past that, before any load). */
PGRT_API int pgrt_prewarm_list(pgrt_ctx *ctx, const pgrt_warm *list, size_t n, int *rc,
                               pgrt_prewarm_report *out);

/* ---------------------------------------------------------------- bf16/f16 GEMM on sm_90a */

/*
 * The three GEMMs of a linear layer's training step, bf16 or f16 in, f32
 * accumulate, on the catalog's gemm_sm90 (wgmma + TMA, persistent,
 * warp-specialized). All matrices row-major; m, n, k are the layer's:
 *
 *   PGK_GEMM_FORWARD     c = Y[m,n]  = a·bᵀ,  a = X[m,k],  b = W[n,k]
 *   PGK_GEMM_BACKWARD_X  c = dX[m,k] = a·b,   a = dY[m,n], b = W[n,k]
 *   PGK_GEMM_BACKWARD_W  c = dW[n,k] = aᵀ·b,  a = dY[m,n], b = X[m,k]
 *
 * a and b hold bf16 (or both f16); c f32, or the inputs' type. bias (may
 * be NULL) is f32 with one value a column of c, added to every row.
 * accumulate: c += the product (+ bias) instead of c =. lda, ldb, ldc are
 * the elements between rows of each buffer (0: the row length); lda and
 * ldb must be multiples of 8 (TMA reads rows at 16-byte pitches), the
 * bases 16-byte aligned. bn picks the block tile's columns (64, 128, 192,
 * 256; 0: the one that best fills the device's SMs). Any m, n, k from 1 to
 * 2^24: ragged edges read zeros and are not written.
 *
 * The device must load sm_90a (compute capability 9.0): PGRT_ETARGET
 * elsewhere. Asynchronous on s; captures into a graph once the kernel is
 * loaded (the tensor maps are encoded on the host at each call and passed
 * by value; a prepared GEMM, pgrt_gemm_plan, encodes them once). Results are bitwise reproducible run to run. Errors:
 * PGRT_EINVAL (NULLs, types, contexts, an output overlapping an input),
 * PGRT_ERANGE (sizes, pitches), the encode's and the launch's codes.
 */
typedef struct pgrt_gemm90 {
    pgk_gemm_layout layout;
    const pgrt_buf *a, *b;
    pgrt_buf *c;
    const pgrt_buf *bias; /* NULL: none */
    uint32_t m, n, k;
    uint32_t lda, ldb, ldc; /* 0: dense */
    bool accumulate;
    uint32_t bn; /* 0: chosen */
} pgrt_gemm90;

PGRT_API int pgrt_gemm_sm90(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_gemm90 *g);
/* The bn pgrt_gemm_sm90 picks for an output of rows x cols on sm_count
 * SMs: the least ceil(tiles / sm_count) times the time of a 128 x bn tile
 * (measured on an H200: bn, except 90 for bn = 64); ties go to the wider.
 * Pure. */
PGRT_API uint32_t pgrt_gemm_sm90_bn(uint32_t rows, uint32_t cols, uint32_t sm_count);

/* ---------------------------------------------------------------- attention on sm_90a */

/*
 * Causal grouped-query attention, forward, on the catalog's
 * attention_sm90_forward (FlashAttention-3 on wgmma + TMA, sm_90a): O and
 * the row logsumexp LSE, as attention_mma_forward defines them, from bf16
 * Q, K and V. All device addresses (pgrt_buf_ptr of a buffer, or a place
 * in an arena):
 *
 *   q       bf16 [batch, seq_len, q_heads, head_dim], 16-byte aligned
 *   k, v    bf16 [batch, seq_len, kv_heads, head_dim], 16-byte aligned
 *   o       f32  [batch, seq_len, q_heads, head_dim]: what
 *           attention_mma_forward writes and the backward kernels read
 *   o_bf16  bf16 in o's layout, or 0: the same O rounded to bf16 (nearest
 *           even), the o projection's operand, written by the same launch
 *   lse     f32  [batch, seq_len, q_heads]
 *
 * Query head h reads key/value head h / (q_heads / kv_heads); row s sees
 * keys 0..s; scale multiplies the scores (1/sqrt(head_dim) for the usual
 * attention). Any seq_len from 1 to 2^22, batch 1..65535, q_heads
 * 1..65535 a multiple of kv_heads, head_dim a multiple of 8 up to 128
 * (64 and 128 are the tile widths; TMA reads 16-byte rows). The three
 * tensor maps are encoded on the host at each call and passed by value,
 * so a stream capture records the launch once the kernel is loaded (a
 * pre-warm of attention_sm90_forward with its head_dim knob, which picks
 * the module); the outputs are the same bits on every run.
 *
 * Errors: PGRT_ETARGET on a device that is not compute capability 9.0
 * (use attention_mma_forward there), PGRT_EINVAL (NULLs, a 0 or unaligned
 * address, heads), PGRT_ERANGE (sizes, head_dim), the encodes' and the
 * launch's codes. Asynchronous on s. Thread-safe as launches are.
 */
typedef struct pgrt_attention90 {
    pgrt_devptr q, k, v;
    pgrt_devptr o, o_bf16, lse;
    uint32_t batch, seq_len, q_heads, kv_heads, head_dim;
    float scale;
} pgrt_attention90;

PGRT_API int pgrt_attention_sm90_forward(pgrt_ctx *ctx, pgrt_stream *s,
                                         const pgrt_attention90 *a);
/* Whether pgrt_attention_sm90_forward takes these heads on ctx's device:
 * 0, or its error for them (PGRT_ETARGET, PGRT_EINVAL, PGRT_ERANGE) with
 * the message, so that a caller can fall back to attention_mma_forward
 * before it allocates anything. Thread-safe. */
PGRT_API int pgrt_attention_sm90_check(pgrt_ctx *ctx, uint32_t q_heads, uint32_t kv_heads,
                                       uint32_t head_dim);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_H */
