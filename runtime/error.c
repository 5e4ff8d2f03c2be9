/* SPDX-License-Identifier: MIT */
/*
 * Errors: the pgrt codes' names and texts, the CUresult names, and the
 * per-thread last message that every failing call sets (rt_fail,
 * rt_cu_fail) and pgrt_last_message() reads. Also the two helpers every
 * file needs and nothing else owns: rt_log and rt_now_ms. Below every other
 * file of the runtime.
 */
#include "rt_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The message lives per thread so that concurrent failures on one context
 * do not overwrite each other, and so that failures before any context
 * exists (no driver) still have somewhere to go. */
#define RT_MSG_MAX 4096
static _Thread_local char tls_msg[RT_MSG_MAX];
static _Thread_local int tls_cuda;
/* Counts the messages set on this thread, so that code calling back into
 * the caller can tell whether the callback's failure came with one. */
static _Thread_local unsigned tls_serial;

unsigned rt_msg_serial(void) { return tls_serial; }

const char *pgrt_strerror(int err)
{
    switch (err) {
    case PGRT_OK:
        return "success";
#define PGRT_X_(name, val, msg)                                                \
    case PGRT_##name:                                                          \
        return msg;
        PGRT_ERRNO_MAP(PGRT_X_)
#undef PGRT_X_
    }
    return "unknown error";
}

const char *pgrt_err_name(int err)
{
    switch (err) {
    case PGRT_OK:
        return "PGRT_OK";
#define PGRT_X_(name, val, msg)                                                \
    case PGRT_##name:                                                          \
        return "PGRT_" #name;
        PGRT_ERRNO_MAP(PGRT_X_)
#undef PGRT_X_
    }
    return "PGRT_UNKNOWN";
}

bool pgrt_err_unavailable(int err)
{
    return err == PGRT_ENODRIVER || err == PGRT_ENODEVICE;
}

const char *pgrt_last_message(void) { return tls_msg; }

int pgrt_last_cuda_error(void) { return tls_cuda; }

void rt_msg_set(int cuda, const char *msg)
{
    tls_cuda = cuda;
    snprintf(tls_msg, sizeof tls_msg, "%s", msg ? msg : "");
}

void rt_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One write, so that lines from concurrent threads and processes do
     * not interleave. */
    fprintf(stderr, "ptxgen: %s\n", line);
}

/* The CUresult values of cuda.h (13.0), so that messages never depend on the
 * driver being able to name its own errors (cuGetErrorName is itself an
 * entry point that may be missing). */
#define RT_CURESULT_MAP(X)                                                     \
    X(1, INVALID_VALUE)                                                        \
    X(2, OUT_OF_MEMORY)                                                        \
    X(3, NOT_INITIALIZED)                                                      \
    X(4, DEINITIALIZED)                                                        \
    X(5, PROFILER_DISABLED)                                                    \
    X(6, PROFILER_NOT_INITIALIZED)                                             \
    X(7, PROFILER_ALREADY_STARTED)                                             \
    X(8, PROFILER_ALREADY_STOPPED)                                             \
    X(34, STUB_LIBRARY)                                                        \
    X(36, CALL_REQUIRES_NEWER_DRIVER)                                          \
    X(46, DEVICE_UNAVAILABLE)                                                  \
    X(100, NO_DEVICE)                                                          \
    X(101, INVALID_DEVICE)                                                     \
    X(102, DEVICE_NOT_LICENSED)                                                \
    X(200, INVALID_IMAGE)                                                      \
    X(201, INVALID_CONTEXT)                                                    \
    X(202, CONTEXT_ALREADY_CURRENT)                                            \
    X(205, MAP_FAILED)                                                         \
    X(206, UNMAP_FAILED)                                                       \
    X(207, ARRAY_IS_MAPPED)                                                    \
    X(208, ALREADY_MAPPED)                                                     \
    X(209, NO_BINARY_FOR_GPU)                                                  \
    X(210, ALREADY_ACQUIRED)                                                   \
    X(211, NOT_MAPPED)                                                         \
    X(212, NOT_MAPPED_AS_ARRAY)                                                \
    X(213, NOT_MAPPED_AS_POINTER)                                              \
    X(214, ECC_UNCORRECTABLE)                                                  \
    X(215, UNSUPPORTED_LIMIT)                                                  \
    X(216, CONTEXT_ALREADY_IN_USE)                                             \
    X(217, PEER_ACCESS_UNSUPPORTED)                                            \
    X(218, INVALID_PTX)                                                        \
    X(219, INVALID_GRAPHICS_CONTEXT)                                           \
    X(220, NVLINK_UNCORRECTABLE)                                               \
    X(221, JIT_COMPILER_NOT_FOUND)                                             \
    X(222, UNSUPPORTED_PTX_VERSION)                                            \
    X(223, JIT_COMPILATION_DISABLED)                                           \
    X(224, UNSUPPORTED_EXEC_AFFINITY)                                          \
    X(225, UNSUPPORTED_DEVSIDE_SYNC)                                           \
    X(226, CONTAINED)                                                          \
    X(300, INVALID_SOURCE)                                                     \
    X(301, FILE_NOT_FOUND)                                                     \
    X(302, SHARED_OBJECT_SYMBOL_NOT_FOUND)                                     \
    X(303, SHARED_OBJECT_INIT_FAILED)                                          \
    X(304, OPERATING_SYSTEM)                                                   \
    X(400, INVALID_HANDLE)                                                     \
    X(401, ILLEGAL_STATE)                                                      \
    X(402, LOSSY_QUERY)                                                        \
    X(500, NOT_FOUND)                                                          \
    X(600, NOT_READY)                                                          \
    X(700, ILLEGAL_ADDRESS)                                                    \
    X(701, LAUNCH_OUT_OF_RESOURCES)                                            \
    X(702, LAUNCH_TIMEOUT)                                                     \
    X(703, LAUNCH_INCOMPATIBLE_TEXTURING)                                      \
    X(704, PEER_ACCESS_ALREADY_ENABLED)                                        \
    X(705, PEER_ACCESS_NOT_ENABLED)                                            \
    X(708, PRIMARY_CONTEXT_ACTIVE)                                             \
    X(709, CONTEXT_IS_DESTROYED)                                               \
    X(710, ASSERT)                                                             \
    X(711, TOO_MANY_PEERS)                                                     \
    X(712, HOST_MEMORY_ALREADY_REGISTERED)                                     \
    X(713, HOST_MEMORY_NOT_REGISTERED)                                         \
    X(714, HARDWARE_STACK_ERROR)                                               \
    X(715, ILLEGAL_INSTRUCTION)                                                \
    X(716, MISALIGNED_ADDRESS)                                                 \
    X(717, INVALID_ADDRESS_SPACE)                                              \
    X(718, INVALID_PC)                                                         \
    X(719, LAUNCH_FAILED)                                                      \
    X(720, COOPERATIVE_LAUNCH_TOO_LARGE)                                       \
    X(721, TENSOR_MEMORY_LEAK)                                                 \
    X(800, NOT_PERMITTED)                                                      \
    X(801, NOT_SUPPORTED)                                                      \
    X(802, SYSTEM_NOT_READY)                                                   \
    X(803, SYSTEM_DRIVER_MISMATCH)                                             \
    X(804, COMPAT_NOT_SUPPORTED_ON_DEVICE)                                     \
    X(805, MPS_CONNECTION_FAILED)                                              \
    X(806, MPS_RPC_FAILURE)                                                    \
    X(807, MPS_SERVER_NOT_READY)                                               \
    X(808, MPS_MAX_CLIENTS_REACHED)                                            \
    X(809, MPS_MAX_CONNECTIONS_REACHED)                                        \
    X(810, MPS_CLIENT_TERMINATED)                                              \
    X(811, CDP_NOT_SUPPORTED)                                                  \
    X(812, CDP_VERSION_MISMATCH)                                               \
    X(900, STREAM_CAPTURE_UNSUPPORTED)                                         \
    X(901, STREAM_CAPTURE_INVALIDATED)                                         \
    X(902, STREAM_CAPTURE_MERGE)                                               \
    X(903, STREAM_CAPTURE_UNMATCHED)                                           \
    X(904, STREAM_CAPTURE_UNJOINED)                                            \
    X(905, STREAM_CAPTURE_ISOLATION)                                           \
    X(906, STREAM_CAPTURE_IMPLICIT)                                            \
    X(907, CAPTURED_EVENT)                                                     \
    X(908, STREAM_CAPTURE_WRONG_THREAD)                                        \
    X(909, TIMEOUT)                                                            \
    X(910, GRAPH_EXEC_UPDATE_FAILURE)                                          \
    X(911, EXTERNAL_DEVICE)                                                    \
    X(912, INVALID_CLUSTER_SIZE)                                               \
    X(913, FUNCTION_NOT_LOADED)                                                \
    X(914, INVALID_RESOURCE_TYPE)                                              \
    X(915, INVALID_RESOURCE_CONFIGURATION)                                     \
    X(916, KEY_ROTATION)                                                       \
    X(999, UNKNOWN)

const char *pgrt_cuda_error_name(int r)
{
    switch (r) {
    case 0:
        return "CUDA_SUCCESS";
#define RT_X_(val, name)                                                       \
    case val:                                                                  \
        return "CUDA_ERROR_" #name;
        RT_CURESULT_MAP(RT_X_)
#undef RT_X_
    }
    return "CUDA_ERROR_UNRECOGNIZED";
}

/* A name for r: ours, else the driver's, else the number. */
static const char *cu_name(const rt_driver *d, CUresult r, char *buf, size_t len)
{
    if (r == CUDA_SUCCESS)
        return "CUDA_SUCCESS";
    const char *s = pgrt_cuda_error_name(r);
    if (strcmp(s, "CUDA_ERROR_UNRECOGNIZED") != 0)
        return s;
    const char *drv_name = NULL;
    if (d && d->GetErrorName && d->GetErrorName(r, &drv_name) == CUDA_SUCCESS && drv_name)
        return drv_name;
    snprintf(buf, len, "CUresult %d", r);
    return buf;
}

int rt_cu_code(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return PGRT_OK;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return PGRT_EDEVMEM;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
        return PGRT_ENODEVICE;
    case CUDA_ERROR_STUB_LIBRARY:
        return PGRT_ENODRIVER;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
        return PGRT_EJIT;
    default:
        return PGRT_ECUDA;
    }
}

int rt_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    tls_cuda = 0;
    tls_serial++;
    return code;
}

/* "<call>: <name>" into the message; returns its length. */
static size_t cu_head(const rt_driver *d, CUresult r, const char *call)
{
    char num[32];
    int n = snprintf(tls_msg, sizeof tls_msg, "%s: %s", call, cu_name(d, r, num, sizeof num));
    tls_cuda = r;
    tls_serial++;
    if (n < 0)
        return 0;
    return (size_t)n < sizeof tls_msg ? (size_t)n : sizeof tls_msg - 1;
}

int rt_cu_fail(const rt_driver *d, CUresult r, const char *call, const char *fmt, ...)
{
    size_t n = cu_head(d, r, call);
    if (n + 3 < sizeof tls_msg) {
        tls_msg[n++] = ':';
        tls_msg[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(tls_msg + n, sizeof tls_msg - n, fmt, ap);
        va_end(ap);
    }
    return rt_cu_code(r);
}

int rt_cu_check(const rt_driver *d, CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS)
        return 0;
    cu_head(d, r, call);
    return rt_cu_code(r);
}

void rt_msg_append(const char *fmt, ...)
{
    size_t n = strlen(tls_msg);
    if (n + 1 >= sizeof tls_msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg + n, sizeof tls_msg - n, fmt, ap);
    va_end(ap);
}

void rt_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

double rt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
