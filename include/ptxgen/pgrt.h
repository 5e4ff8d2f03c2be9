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

#include "pg_base.h"

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

/* A device address, as the driver gives it. */
typedef uint64_t pgrt_devptr;

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

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_H */
