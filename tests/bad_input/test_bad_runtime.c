/* SPDX-License-Identifier: MIT */
/*
 * Bad input to the runtime, against the fake driver (tests/runtime/
 * fakecuda.h): no driver or no device, unknown kernels, zero and overflowing
 * sizes, NULL for every pointer a public function takes, PTX for the wrong
 * target, too new for the driver or broken, a module load during capture,
 * and launches whose arguments do not match the kernel. Each case asserts
 * the code and the key words of pgrt_last_message(), and that nothing
 * reached the device: the fake's launch log and load count are unchanged
 * and the buffers hold what they held.
 *
 * Usage: test_bad_runtime FAKE_LIBCUDA
 */
#include "fake_util.h"
#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/ptxgen.h"
#include "ptxgen/pgrt_train.h"
#include "test.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

static fake_fixture fk;

/* The code, and the words the thread's message must hold. */
#define EXPECT(call, code, words)                                              \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != (code))                                                     \
            fprintf(stderr, "%s: %s: %s\n", #call, pgrt_err_name(rc_),         \
                    pgrt_last_message());                                      \
        REQUIRE_INT_EQ(rc_, code);                                             \
        REQUIRE_CONTAINS(pgrt_last_message(), words);                          \
    } while (0)

static pgrt_ctx *open_ctx(void) { return fake_open_ctx(fk.path); }

static pgk_knobs knobs_n(const char *kernel, uint32_t n)
{
    const pgk_desc *d = pgk_find(kernel);
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    int i = pgk_knob_index(d, "n");
    if (i >= 0)
        kn.v[i] = n;
    return kn;
}

/* A buffer of n floats 1, 2, 3, ...: what a launch that went through would
 * change. */
static pgrt_buf *marked_buffer(pgrt_ctx *ctx, size_t n)
{
    pgrt_buf *b = NULL;
    float *v = malloc(n * sizeof *v);
    if (!v || pgrt_buf_alloc(ctx, PG_F32, n, &b) != 0)
        exit(1);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i + 1);
    if (pgrt_buf_upload(b, 0, v, n) != 0)
        exit(1);
    free(v);
    return b;
}

static bool still_marked(const pgrt_buf *b)
{
    size_t n = pgrt_buf_count(b);
    float *v = malloc(n * sizeof *v);
    bool ok = v && pgrt_buf_download(b, 0, v, n) == 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = v[i] == (float)(i + 1);
    free(v);
    return ok;
}

/* ---------------------------------------------------------------- no driver, no device */

static void test_no_device(void)
{
    int n0 = fk.launch_count();
    pgrt_ctx *ctx = NULL;
    pgrt_ctx_params p = {fk.path, 0};

    setenv("PGRT_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    EXPECT(pgrt_ctx_create(&ctx, NULL), PGRT_ENODRIVER,
           "no CUDA driver: dlopen(\"/nonexistent/libcuda.so.1\") failed");
    REQUIRE(pgrt_err_unavailable(PGRT_ENODRIVER));
    unsetenv("PGRT_LIBCUDA");
    pgrt_ctx_params missing = {"/nonexistent/other.so", 0};
    EXPECT(pgrt_ctx_create(&ctx, &missing), PGRT_ENODRIVER, "dlopen(\"/nonexistent/other.so\")");

    setenv("FAKECUDA", "zero", 1);
    EXPECT(pgrt_ctx_create(&ctx, &p), PGRT_ENODEVICE,
           "no CUDA device: the driver reports 0 devices");
    setenv("FAKECUDA", "nodevice", 1);
    EXPECT(pgrt_ctx_create(&ctx, &p), PGRT_ENODEVICE,
           "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is present");
    setenv("FAKECUDA", "stub", 1);
    EXPECT(pgrt_ctx_create(&ctx, &p), PGRT_ENODRIVER, "CUDA_ERROR_STUB_LIBRARY");
    unsetenv("FAKECUDA");
    pgrt_ctx_params second = {fk.path, 1};
    EXPECT(pgrt_ctx_create(&ctx, &second), PGRT_ENODEVICE,
           "no CUDA device 1: the driver reports 1 device");
    pgrt_ctx_params negative = {fk.path, -1};
    EXPECT(pgrt_ctx_create(&ctx, &negative), PGRT_EINVAL, "device ordinal -1 is negative");
    setenv("FAKECUDA_CC", "61", 1);
    EXPECT(pgrt_ctx_create(&ctx, &p), PGRT_ETARGET,
           "compute capability 6.1, which no ptxgen target serves");
    unsetenv("FAKECUDA_CC");
    REQUIRE(ctx == NULL);

    /* What a program that ignored those errors would do next: the NULL
     * context is refused, nothing reaches the driver. */
    pgrt_arg a[3] = {pgrt_arg_ptr(0x1000), pgrt_arg_f32(0.5f), pgrt_arg_u32(1)};
    EXPECT(pgrt_launch(ctx, NULL, "gradient_clip", NULL, a, 3), PGRT_EINVAL,
           "pgrt_launch: ctx is NULL");
    pgrt_buf *b = NULL;
    EXPECT(pgrt_buf_alloc(ctx, PG_F32, 16, &b), PGRT_EINVAL, "pgrt_buf_alloc: ctx is NULL");
    REQUIRE(b == NULL);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
}

/* ---------------------------------------------------------------- unknown kernels */

static void test_unknown_kernel(pgrt_ctx *ctx, pgrt_stream *s)
{
    int n0 = fk.launch_count();
    pgrt_buf *g = marked_buffer(ctx, 64);
    pgrt_arg a[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(64)};
    pgk_knobs kn = knobs_n("gradient_clip", 64);
    EXPECT(pgrt_launch(ctx, s, "no_such_kernel", &kn, a, 3), PGRT_ENOTFOUND,
           "pgrt_launch: unknown kernel \"no_such_kernel\"");
    EXPECT(pgrt_launch(ctx, s, "", &kn, a, 3), PGRT_ENOTFOUND, "unknown kernel \"\"");
    EXPECT(pgrt_launch(ctx, s, "Gradient_clip", &kn, a, 3), PGRT_ENOTFOUND,
           "unknown kernel \"Gradient_clip\"");
    pgrt_warm list[] = {{"gradient_clip", NULL}, {"gradient_clip_v2", NULL}};
    EXPECT(pgrt_prewarm(ctx, list, 2), PGRT_ENOTFOUND,
           "pgrt_prewarm: unknown kernel \"gradient_clip_v2\"");
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE(still_marked(g));
    pgrt_buf_destroy(&g);
}

/* ---------------------------------------------------------------- sizes */

static void test_buffer_sizes(pgrt_ctx *ctx)
{
    int allocs0 = fk.live_allocs();
    pgrt_buf *b = (pgrt_buf *)1;
    EXPECT(pgrt_buf_alloc(ctx, PG_F32, 0, &b), PGRT_EINVAL, "pgrt_buf_alloc: 0 elements");
    REQUIRE(b == NULL);
    EXPECT(pgrt_buf_alloc(ctx, PG_F32, SIZE_MAX / 4 + 1, &b), PGRT_ERANGE,
           "elements of f32 overflow size_t");
    EXPECT(pgrt_buf_alloc(ctx, PG_F64, SIZE_MAX, &b), PGRT_ERANGE, "of f64 overflow size_t");
    EXPECT(pgrt_buf_alloc(ctx, PG_U16, SIZE_MAX / 2 + 1, &b), PGRT_ERANGE, "overflow size_t");
    EXPECT(pgrt_buf_alloc(ctx, PG_PRED, 4, &b), PGRT_EINVAL, "pred is not a storable element type");
    EXPECT(pgrt_buf_alloc(ctx, (pg_type)999, 4, &b), PGRT_EINVAL,
           "an invalid type is not a storable element type");
    EXPECT(pgrt_buf_alloc(ctx, PG_TYPE_COUNT, 4, &b), PGRT_EINVAL, "an invalid type");

    /* Element counts that fit u32 but whose byte counts do not: the byte
     * count is size_t arithmetic. The fake driver refuses more than 4 GiB;
     * a byte count wrapped to 32 bits would have asked for 4 bytes and got
     * them. */
    EXPECT(pgrt_buf_alloc(ctx, PG_F32, 0x40000001u, &b), PGRT_EDEVMEM,
           "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: 4294967300 bytes (1073741825 x f32)");
    EXPECT(pgrt_buf_alloc(ctx, PG_F64, UINT32_MAX, &b), PGRT_EDEVMEM,
           "34359738360 bytes (4294967295 x f64)");
    REQUIRE_INT_EQ(pgrt_last_cuda_error(), 2);
    REQUIRE(b == NULL);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0);

    /* Views and copies: counts, offsets and their sums checked in elements,
     * without overflow. */
    pgrt_buf *g = marked_buffer(ctx, 100), *v = (pgrt_buf *)1, *h = NULL;
    EXPECT(pgrt_buf_view(g, 0, 0, &v), PGRT_ERANGE, "[0, 0+0) is not inside a buffer of 100");
    REQUIRE(v == NULL);
    EXPECT(pgrt_buf_view(g, 90, 11, &v), PGRT_ERANGE, "[90, 90+11) is not inside");
    EXPECT(pgrt_buf_view(g, 1, SIZE_MAX, &v), PGRT_ERANGE, "is not inside a buffer of 100");
    EXPECT(pgrt_buf_view(g, SIZE_MAX, 1, &v), PGRT_ERANGE, "is not inside a buffer of 100");
    float src[4] = {-1, -1, -1, -1}, dst[4] = {0};
    EXPECT(pgrt_buf_upload(g, 98, src, 4), PGRT_ERANGE,
           "pgrt_buf_upload: elements [98, 98+4) are outside a buffer of 100");
    EXPECT(pgrt_buf_upload(g, SIZE_MAX, src, 1), PGRT_ERANGE, "outside a buffer of 100");
    EXPECT(pgrt_buf_upload(g, 1, src, SIZE_MAX), PGRT_ERANGE, "outside a buffer of 100");
    EXPECT(pgrt_buf_upload(g, (SIZE_MAX / 4) + 2, src, 1), PGRT_ERANGE, "outside");
    EXPECT(pgrt_buf_upload_async(g, 101, src, 0, NULL), PGRT_ERANGE, "outside");
    EXPECT(pgrt_buf_download(g, 100, dst, 1), PGRT_ERANGE, "pgrt_buf_download: elements [100");
    EXPECT(pgrt_buf_copy(g, 0, g, 99, 2), PGRT_ERANGE, "pgrt_buf_copy: elements [99, 99+2)");
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F16, 100, &h), 0);
    EXPECT(pgrt_buf_copy(h, 0, g, 0, 10), PGRT_EINVAL, "element types differ (f16 <- f32)");
    EXPECT(pgrt_buf_fill32(h, 0), PGRT_EINVAL, "pgrt_buf_fill32: f16 elements are not 32-bit");
    EXPECT(pgrt_buf_fill32_async(h, 0, NULL), PGRT_EINVAL, "f16 elements are not 32-bit");
    REQUIRE(still_marked(g));
    pgrt_buf_destroy(&h);
    pgrt_buf_destroy(&g);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0);

    /* The clip state counts elements in u32. */
    pgrt_clip *c = (pgrt_clip *)1;
    size_t huge[2] = {16, (size_t)UINT32_MAX + 1};
    EXPECT(pgrt_clip_create(ctx, huge, 2, &c), PGRT_ERANGE,
           "buffer 1 has 4294967296 elements; the clip kernels count in u32");
    REQUIRE(c == NULL);
    size_t zeros[2] = {0, 0};
    EXPECT(pgrt_clip_create(ctx, zeros, 2, &c), PGRT_EINVAL, "all 2 buffers are empty");
    EXPECT(pgrt_clip_create(ctx, zeros, 0, &c), PGRT_EINVAL, "pgrt_clip_create: no buffers");
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0);
}

static void test_launch_sizes(pgrt_ctx *ctx, pgrt_stream *s)
{
    int n0 = fk.launch_count();
    pgrt_buf *g = marked_buffer(ctx, 1000);
    pgrt_arg a[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(1000)};

    /* n = 0 as a knob, and as the argument of a launch sized for 1000. */
    pgk_knobs kn = knobs_n("gradient_clip", 0);
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, a, 3), PGRT_ERANGE,
           "gradient_clip: no launch for these knobs: gradient_clip: knob n=0 is out of range "
           "[1, 4294967295]");
    kn = knobs_n("gradient_clip", 1000);
    pgrt_arg zero[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(0)};
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, zero, 3), PGRT_EARGS,
           "gradient_clip argument 2 (n) = 0, but the launch is sized for knob n = 1000");
    kn = knobs_n("gradient_clip", 0);
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, zero, 3), PGRT_ERANGE, "knob n=0");

    /* GEMM dims past the advertised range (filled in by hand) are refused by
     * name; so is a variant out of range, before it indexes anything. */
    const pgk_desc *gemm = pgk_find("gemm_backward_a");
    pgk_knobs gk;
    pgk_knobs_default(gemm, &gk);
    gk.v[pgk_knob_index(gemm, "m")] = 1u << 24;
    gk.v[pgk_knob_index(gemm, "k")] = 1u << 24;
    pgrt_arg ga[6] = {pgrt_arg_buf(g),          pgrt_arg_buf(g),          pgrt_arg_buf(g),
                      pgrt_arg_u32(gk.v[0]), pgrt_arg_u32(gk.v[1]), pgrt_arg_u32(gk.v[2])};
    EXPECT(pgrt_launch(ctx, s, "gemm_backward_a", &gk, ga, 6), PGRT_ERANGE,
           "gemm_backward_a: knob m=16777216 is out of range [1, 1048560]");
    pgk_knobs_default(gemm, &gk);
    gk.v[pgk_knob_index(gemm, "variant")] = 99;
    pgrt_kernel *k = (pgrt_kernel *)1;
    pgrt_cache_stats st0, st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st0), 0);
    int loads0 = fk.loads();
    EXPECT(pgrt_kernel_get(ctx, gemm, &gk, &k), PGRT_ERANGE,
           "gemm_backward_a (sm_90): building the PTX failed: PG_ERANGE: gemm_backward_a: knob "
           "variant=99 is out of range [0, 3]");
    REQUIRE(k == NULL);
    EXPECT(pgrt_launch(ctx, s, "gemm_backward_a", &gk, ga, 6), PGRT_ERANGE, "variant=99");
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.failures - st0.failures, 2);
    REQUIRE_INT_EQ(st.modules, st0.modules);
    REQUIRE_INT_EQ(fk.loads(), loads0);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE(still_marked(g));

    /* A u32 count whose f32 byte count passes 2^32: the grid is computed in
     * 64 bits and covers it. The runtime cannot check a buffer's extent
     * against n (arguments are device pointers, with no size), so the
     * launch goes through; silu_backward is only recorded by the fake. */
    const uint32_t big = 0x40000001u;
    pgk_knobs sk = knobs_n("silu_backward", big);
    pgrt_arg sa[4] = {pgrt_arg_buf(g), pgrt_arg_buf(g), pgrt_arg_buf(g), pgrt_arg_u32(big)};
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "silu_backward", &sk, sa, 4), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    const fakecuda_launch *l = fk.launch_at(n0);
    if (l) {
        REQUIRE_STR_EQ(l->name, "silu_backward");
        REQUIRE((uint64_t)l->grid[0] * l->block[0] >= big);
        REQUIRE_INT_EQ(l->params[3], big);
    }
    pgrt_buf_destroy(&g);
}

/* ---------------------------------------------------------------- NULL pointers */

/* Objects the NULL cases pass where they pass something valid. */
static struct {
    pgrt_ctx *ctx;
    pgrt_stream *s;
    pgrt_buf *b;
    pgrt_event *e;
    pgrt_kernel *k;
    pgrt_module *m;
    pgrt_clip *clip;
    const pgk_desc *d;
    pgk_knobs kn;
    pgrt_arg args[3];
} fx;

typedef struct null_case {
    const char *call;
    int (*run)(char *msg, size_t len);
    int code;
    const char *words; /* NULL: the call has no message to check */
} null_case;

/* A case whose result is the code of one call, its message the thread's. */
#define NC(fn, expr)                                                           \
    static int fn(char *msg, size_t len)                                       \
    {                                                                          \
        int rc_ = (expr);                                                      \
        snprintf(msg, len, "%s", pgrt_last_message());                         \
        return rc_;                                                            \
    }
/* A case for calls without an error code: 0 when they behaved. */
#define NV(fn, cond)                                                           \
    static int fn(char *msg, size_t len)                                       \
    {                                                                          \
        (void)msg, (void)len;                                                  \
        return (cond) ? 0 : 12345;                                             \
    }

static pgrt_ctx *no_ctx;
static pgrt_stream *no_stream;
static pgrt_buf *no_buf;
static pgrt_event *no_event;
static pgrt_module *no_module;
static pgrt_graph *no_graph;
static pgrt_clip *no_clip;
static pgrt_train *no_train;
static float f1 = 1.0f, f2 = 2.0f;

NC(ctx_create_out, pgrt_ctx_create(NULL, NULL))
NV(ctx_destroy, (pgrt_ctx_destroy(NULL), pgrt_ctx_destroy(&no_ctx), no_ctx == NULL))
NC(ctx_info_ctx, pgrt_ctx_device_info(NULL, &(pgrt_device_info){0}))
NC(ctx_info_out, pgrt_ctx_device_info(fx.ctx, NULL))
NV(ctx_target, pgrt_ctx_target(NULL) == PG_TARGET_COUNT)
NC(ctx_mem_ctx, pgrt_ctx_mem_info(NULL, &(size_t){0}, &(size_t){0}))
NC(ctx_mem_free, pgrt_ctx_mem_info(fx.ctx, NULL, &(size_t){0}))
NC(ctx_mem_total, pgrt_ctx_mem_info(fx.ctx, &(size_t){0}, NULL))
NC(ctx_sync, pgrt_ctx_sync(NULL))
NC(stream_create_ctx, pgrt_stream_create(NULL, &(pgrt_stream *){NULL}))
NC(stream_create_out, pgrt_stream_create(fx.ctx, NULL))
NV(stream_destroy, (pgrt_stream_destroy(NULL), pgrt_stream_destroy(&no_stream), true))
NC(stream_sync, pgrt_stream_sync(NULL))
NC(stream_cap_s, pgrt_stream_is_capturing(NULL, &(bool){false}))
NC(stream_cap_out, pgrt_stream_is_capturing(fx.s, NULL))
NC(event_create_ctx, pgrt_event_create(NULL, &(pgrt_event *){NULL}))
NC(event_create_out, pgrt_event_create(fx.ctx, NULL))
NV(event_destroy, (pgrt_event_destroy(NULL), pgrt_event_destroy(&no_event), true))
NC(event_record, pgrt_event_record(NULL, fx.s))
NC(event_sync, pgrt_event_sync(NULL))
NC(event_ms_start, pgrt_event_elapsed_ms(NULL, fx.e, &f1))
NC(event_ms_end, pgrt_event_elapsed_ms(fx.e, NULL, &f1))
NC(event_ms_out, pgrt_event_elapsed_ms(fx.e, fx.e, NULL))
NC(buf_alloc_ctx, pgrt_buf_alloc(NULL, PG_F32, 4, &(pgrt_buf *){NULL}))
NC(buf_alloc_out, pgrt_buf_alloc(fx.ctx, PG_F32, 4, NULL))
NC(buf_view_parent, pgrt_buf_view(NULL, 0, 1, &(pgrt_buf *){NULL}))
NC(buf_view_out, pgrt_buf_view(fx.b, 0, 1, NULL))
NV(buf_destroy, (pgrt_buf_destroy(NULL), pgrt_buf_destroy(&no_buf), true))
NV(buf_accessors, pgrt_buf_ptr(NULL) == 0 && pgrt_buf_count(NULL) == 0 &&
                      pgrt_buf_bytes(NULL) == 0 && pgrt_buf_type(NULL) == PG_TYPE_COUNT &&
                      pgrt_arg_buf(NULL).pointer && pgrt_arg_buf(NULL).v.u64 == 0)
NC(upload_buf, pgrt_buf_upload(NULL, 0, &f1, 1))
NC(upload_src, pgrt_buf_upload(fx.b, 0, NULL, 1))
NC(upload_src_empty, pgrt_buf_upload(fx.b, 0, NULL, 0))
NC(download_buf, pgrt_buf_download(NULL, 0, &f1, 1))
NC(download_dst, pgrt_buf_download(fx.b, 0, NULL, 1))
NC(copy_dst, pgrt_buf_copy(NULL, 0, fx.b, 0, 1))
NC(copy_src, pgrt_buf_copy(fx.b, 0, NULL, 0, 1))
NC(upload_async_buf, pgrt_buf_upload_async(NULL, 0, &f1, 1, fx.s))
NC(upload_async_src, pgrt_buf_upload_async(fx.b, 0, NULL, 1, fx.s))
NC(download_async_buf, pgrt_buf_download_async(NULL, 0, &f1, 1, fx.s))
NC(download_async_dst, pgrt_buf_download_async(fx.b, 0, NULL, 1, fx.s))
NC(copy_async_dst, pgrt_buf_copy_async(NULL, 0, fx.b, 0, 1, fx.s))
NC(copy_async_src, pgrt_buf_copy_async(fx.b, 0, NULL, 0, 1, fx.s))
NC(memset_buf, pgrt_buf_memset(NULL, 0))
NC(memset_async_buf, pgrt_buf_memset_async(NULL, 0, fx.s))
NC(fill32_buf, pgrt_buf_fill32(NULL, 0))
NC(fill32_async_buf, pgrt_buf_fill32_async(NULL, 0, fx.s))
NC(kernel_get_ctx, pgrt_kernel_get(NULL, fx.d, NULL, &(pgrt_kernel *){NULL}))
NC(kernel_get_desc, pgrt_kernel_get(fx.ctx, NULL, NULL, &(pgrt_kernel *){NULL}))
NC(kernel_get_out, pgrt_kernel_get(fx.ctx, fx.d, NULL, NULL))
NV(kernel_desc, pgrt_kernel_desc(NULL) == NULL)
NC(kernel_launch_k, pgrt_kernel_launch(NULL, fx.s, &fx.kn, fx.args, 3))
NC(kernel_launch_args, pgrt_kernel_launch(fx.k, fx.s, &fx.kn, NULL, 3))
NC(launch_ctx, pgrt_launch(NULL, fx.s, "gradient_clip", &fx.kn, fx.args, 3))
NC(launch_name, pgrt_launch(fx.ctx, fx.s, NULL, &fx.kn, fx.args, 3))
NC(launch_args, pgrt_launch(fx.ctx, fx.s, "gradient_clip", &fx.kn, NULL, 3))
NC(prewarm_ctx, pgrt_prewarm(NULL, &(pgrt_warm){"gradient_clip", NULL}, 1))
NC(prewarm_list, pgrt_prewarm(fx.ctx, NULL, 1))
NC(prewarm_empty, pgrt_prewarm(fx.ctx, NULL, 0))
NC(prewarm_name, pgrt_prewarm(fx.ctx, &(pgrt_warm){NULL, NULL}, 1))
NC(stats_ctx, pgrt_cache_stats_get(NULL, &(pgrt_cache_stats){0}))
NC(stats_out, pgrt_cache_stats_get(fx.ctx, NULL))
NC(module_load_ctx, pgrt_module_load(NULL, ".version 7.8", &(pgrt_module *){NULL}))
NC(module_load_ptx, pgrt_module_load(fx.ctx, NULL, &(pgrt_module *){NULL}))
NC(module_load_out, pgrt_module_load(fx.ctx, ".version 7.8", NULL))
NV(module_destroy, (pgrt_module_destroy(NULL), pgrt_module_destroy(&no_module), true))
NC(module_kernel_m, pgrt_module_kernel(NULL, fx.d, &(pgrt_kernel *){NULL}))
NC(module_kernel_d, pgrt_module_kernel(fx.m, NULL, &(pgrt_kernel *){NULL}))
NC(module_kernel_out, pgrt_module_kernel(fx.m, fx.d, NULL))
NC(capture_begin, pgrt_capture_begin(NULL))
NC(capture_end_s, pgrt_capture_end(NULL, &(pgrt_graph *){NULL}))
NC(capture_end_out, pgrt_capture_end(fx.s, NULL))
NC(capture_abort, pgrt_capture_abort(NULL))
NC(graph_launch, pgrt_graph_launch(NULL, fx.s))
NV(graph_destroy, (pgrt_graph_destroy(NULL), pgrt_graph_destroy(&no_graph), true))
NC(clip_create_ctx, pgrt_clip_create(NULL, &(size_t){16}, 1, &(pgrt_clip *){NULL}))
NC(clip_create_sizes, pgrt_clip_create(fx.ctx, NULL, 1, &(pgrt_clip *){NULL}))
NC(clip_create_out, pgrt_clip_create(fx.ctx, &(size_t){16}, 1, NULL))
NV(clip_destroy, (pgrt_clip_destroy(NULL), pgrt_clip_destroy(&no_clip), true))
NC(clip_run_state, pgrt_clip_run(NULL, fx.s, &fx.b, 1, 1.0f))
NC(clip_run_grads, pgrt_clip_run(fx.clip, fx.s, NULL, 1, 1.0f))
NC(clip_run_grad0, pgrt_clip_run(fx.clip, fx.s, &no_buf, 1, 1.0f))
NC(clip_result_state, pgrt_clip_result(NULL, fx.s, &f1, &f2))
NC(clip_result_outs, pgrt_clip_result(fx.clip, fx.s, NULL, NULL))
NV(clip_accessors, pgrt_clip_result_buf(NULL) == NULL && pgrt_clip_partials(NULL) == 0)
NC(train_create_ctx, pgrt_train_create(NULL, &(pgrt_train_params){0}, &no_train))
NC(train_create_params, pgrt_train_create(fx.ctx, NULL, &no_train))
NC(train_create_out, pgrt_train_create(fx.ctx, &(pgrt_train_params){0}, NULL))
NV(train_destroy, (pgrt_train_destroy(NULL), pgrt_train_destroy(&no_train), true))
NC(train_backward, pgrt_train_backward(NULL, fx.s, 16))
NC(train_set_lr, pgrt_train_set_lr(NULL, fx.s, 1e-3f))
NV(train_accessors, (pgrt_train_invalidate(NULL), !pgrt_train_graphs_enabled(NULL) &&
                                                      pgrt_train_hyper_buf(NULL) == NULL))
NC(train_layer_norm, pgrt_train_layer_norm(NULL, fx.s, 0, &f1, &f2))
NC(train_stats, pgrt_train_stats_get(NULL, &(pgrt_train_stats){0}))
NV(names, strcmp(pgrt_strerror(-999), "unknown error") == 0 &&
              strcmp(pgrt_err_name(-999), "PGRT_UNKNOWN") == 0 &&
              strcmp(pgrt_cuda_error_name(-5), "CUDA_ERROR_UNRECOGNIZED") == 0)

/* The pure functions write their message to the caller's buffer. */
static int args_check_desc(char *msg, size_t len)
{
    return pgrt_args_check(NULL, NULL, fx.args, 3, msg, len);
}
static int args_check_args(char *msg, size_t len)
{
    return pgrt_args_check(fx.d, &fx.kn, NULL, 3, msg, len);
}
static int ptx_parse_ptx(char *msg, size_t len)
{
    pgrt_ptx_info info;
    return pgrt_ptx_parse(NULL, 0, &info, msg, len);
}
static int ptx_parse_out(char *msg, size_t len)
{
    return pgrt_ptx_parse(".version 7.8\n.target sm_90\n", 0, NULL, msg, len);
}
static int ptx_check_info(char *msg, size_t len)
{
    return pgrt_ptx_check(NULL, PG_SM_90, 12080, msg, len);
}
/* No err buffer: the reason is in the thread's message all the same. */
NC(ptx_check_errbuf, pgrt_ptx_check(NULL, PG_SM_90, 12080, NULL, 100))
NC(target_for_cc_out, pgrt_target_for_cc(9, 0, NULL))

static const null_case null_cases[] = {
    {"pgrt_ctx_create(out=NULL)", ctx_create_out, PGRT_EINVAL, "pgrt_ctx_create: out is NULL"},
    {"pgrt_ctx_destroy(NULL), (&NULL)", ctx_destroy, 0, NULL},
    {"pgrt_ctx_device_info(ctx=NULL)", ctx_info_ctx, PGRT_EINVAL, "device_info: ctx is NULL"},
    {"pgrt_ctx_device_info(out=NULL)", ctx_info_out, PGRT_EINVAL, "device_info: out is NULL"},
    {"pgrt_ctx_target(NULL)", ctx_target, 0, NULL},
    {"pgrt_ctx_mem_info(ctx=NULL)", ctx_mem_ctx, PGRT_EINVAL, "pgrt_ctx_mem_info: ctx is NULL"},
    {"pgrt_ctx_mem_info(free=NULL)", ctx_mem_free, PGRT_EINVAL, "mem_info: free_bytes is NULL"},
    {"pgrt_ctx_mem_info(total=NULL)", ctx_mem_total, PGRT_EINVAL, "mem_info: total_bytes is NULL"},
    {"pgrt_ctx_sync(NULL)", ctx_sync, PGRT_EINVAL, "pgrt_ctx_sync: ctx is NULL"},
    {"pgrt_stream_create(ctx=NULL)", stream_create_ctx, PGRT_EINVAL, "stream_create: ctx is NULL"},
    {"pgrt_stream_create(out=NULL)", stream_create_out, PGRT_EINVAL, "stream_create: out is NULL"},
    {"pgrt_stream_destroy(NULL), (&NULL)", stream_destroy, 0, NULL},
    {"pgrt_stream_sync(NULL)", stream_sync, PGRT_EINVAL, "pgrt_stream_sync: stream is NULL"},
    {"pgrt_stream_is_capturing(s=NULL)", stream_cap_s, PGRT_EINVAL, "stream is NULL"},
    {"pgrt_stream_is_capturing(out=NULL)", stream_cap_out, PGRT_EINVAL, "capturing is NULL"},
    {"pgrt_event_create(ctx=NULL)", event_create_ctx, PGRT_EINVAL, "event_create: ctx is NULL"},
    {"pgrt_event_create(out=NULL)", event_create_out, PGRT_EINVAL, "event_create: out is NULL"},
    {"pgrt_event_destroy(NULL), (&NULL)", event_destroy, 0, NULL},
    {"pgrt_event_record(NULL)", event_record, PGRT_EINVAL, "pgrt_event_record: event is NULL"},
    {"pgrt_event_sync(NULL)", event_sync, PGRT_EINVAL, "pgrt_event_sync: event is NULL"},
    {"pgrt_event_elapsed_ms(start=NULL)", event_ms_start, PGRT_EINVAL, "elapsed_ms: start is NULL"},
    {"pgrt_event_elapsed_ms(end=NULL)", event_ms_end, PGRT_EINVAL, "elapsed_ms: end is NULL"},
    {"pgrt_event_elapsed_ms(ms=NULL)", event_ms_out, PGRT_EINVAL, "elapsed_ms: ms is NULL"},
    {"pgrt_buf_alloc(ctx=NULL)", buf_alloc_ctx, PGRT_EINVAL, "pgrt_buf_alloc: ctx is NULL"},
    {"pgrt_buf_alloc(out=NULL)", buf_alloc_out, PGRT_EINVAL, "pgrt_buf_alloc: out is NULL"},
    {"pgrt_buf_view(parent=NULL)", buf_view_parent, PGRT_EINVAL, "pgrt_buf_view: parent is NULL"},
    {"pgrt_buf_view(out=NULL)", buf_view_out, PGRT_EINVAL, "pgrt_buf_view: out is NULL"},
    {"pgrt_buf_destroy(NULL), (&NULL)", buf_destroy, 0, NULL},
    {"pgrt_buf_ptr/count/bytes/type, pgrt_arg_buf(NULL)", buf_accessors, 0, NULL},
    {"pgrt_buf_upload(b=NULL)", upload_buf, PGRT_EINVAL, "pgrt_buf_upload: buffer is NULL"},
    {"pgrt_buf_upload(src=NULL)", upload_src, PGRT_EINVAL, "pgrt_buf_upload: src is NULL"},
    {"pgrt_buf_upload(src=NULL, count=0)", upload_src_empty, 0, NULL},
    {"pgrt_buf_download(b=NULL)", download_buf, PGRT_EINVAL, "pgrt_buf_download: buffer is NULL"},
    {"pgrt_buf_download(dst=NULL)", download_dst, PGRT_EINVAL, "pgrt_buf_download: dst is NULL"},
    {"pgrt_buf_copy(dst=NULL)", copy_dst, PGRT_EINVAL, "pgrt_buf_copy: dst is NULL"},
    {"pgrt_buf_copy(src=NULL)", copy_src, PGRT_EINVAL, "pgrt_buf_copy: src is NULL"},
    {"pgrt_buf_upload_async(b=NULL)", upload_async_buf, PGRT_EINVAL, "upload_async: buffer is"},
    {"pgrt_buf_upload_async(src=NULL)", upload_async_src, PGRT_EINVAL, "upload_async: src is"},
    {"pgrt_buf_download_async(b=NULL)", download_async_buf, PGRT_EINVAL, "_async: buffer is NULL"},
    {"pgrt_buf_download_async(dst=NULL)", download_async_dst, PGRT_EINVAL, "_async: dst is NULL"},
    {"pgrt_buf_copy_async(dst=NULL)", copy_async_dst, PGRT_EINVAL, "copy_async: dst is NULL"},
    {"pgrt_buf_copy_async(src=NULL)", copy_async_src, PGRT_EINVAL, "copy_async: src is NULL"},
    {"pgrt_buf_memset(NULL)", memset_buf, PGRT_EINVAL, "pgrt_buf_memset: buffer is NULL"},
    {"pgrt_buf_memset_async(NULL)", memset_async_buf, PGRT_EINVAL, "memset_async: buffer is"},
    {"pgrt_buf_fill32(NULL)", fill32_buf, PGRT_EINVAL, "pgrt_buf_fill32: buffer is NULL"},
    {"pgrt_buf_fill32_async(NULL)", fill32_async_buf, PGRT_EINVAL, "fill32_async: buffer is"},
    {"pgrt_kernel_get(ctx=NULL)", kernel_get_ctx, PGRT_EINVAL, "pgrt_kernel_get: ctx is NULL"},
    {"pgrt_kernel_get(d=NULL)", kernel_get_desc, PGRT_EINVAL, "kernel_get: descriptor is NULL"},
    {"pgrt_kernel_get(out=NULL)", kernel_get_out, PGRT_EINVAL, "pgrt_kernel_get: out is NULL"},
    {"pgrt_kernel_desc(NULL)", kernel_desc, 0, NULL},
    {"pgrt_kernel_launch(k=NULL)", kernel_launch_k, PGRT_EINVAL, "kernel_launch: kernel is NULL"},
    {"pgrt_kernel_launch(args=NULL, 3)", kernel_launch_args, PGRT_EINVAL, "args is NULL"},
    {"pgrt_launch(ctx=NULL)", launch_ctx, PGRT_EINVAL, "pgrt_launch: ctx is NULL"},
    {"pgrt_launch(kernel=NULL)", launch_name, PGRT_EINVAL, "pgrt_launch: kernel is NULL"},
    {"pgrt_launch(args=NULL, 3)", launch_args, PGRT_EINVAL, "pgrt_args_check: args is NULL"},
    {"pgrt_prewarm(ctx=NULL)", prewarm_ctx, PGRT_EINVAL, "pgrt_prewarm: ctx is NULL"},
    {"pgrt_prewarm(list=NULL, 1)", prewarm_list, PGRT_EINVAL, "pgrt_prewarm: list is NULL"},
    {"pgrt_prewarm(list=NULL, 0)", prewarm_empty, 0, NULL},
    {"pgrt_prewarm({NULL name})", prewarm_name, PGRT_EINVAL, "entry 0 has no kernel name"},
    {"pgrt_cache_stats_get(ctx=NULL)", stats_ctx, PGRT_EINVAL, "stats_get: ctx is NULL"},
    {"pgrt_cache_stats_get(out=NULL)", stats_out, PGRT_EINVAL, "stats_get: out is NULL"},
    {"pgrt_module_load(ctx=NULL)", module_load_ctx, PGRT_EINVAL, "module_load: ctx is NULL"},
    {"pgrt_module_load(ptx=NULL)", module_load_ptx, PGRT_EINVAL, "module_load: ptx is NULL"},
    {"pgrt_module_load(out=NULL)", module_load_out, PGRT_EINVAL, "module_load: out is NULL"},
    {"pgrt_module_destroy(NULL), (&NULL)", module_destroy, 0, NULL},
    {"pgrt_module_kernel(m=NULL)", module_kernel_m, PGRT_EINVAL, "module_kernel: module is NULL"},
    {"pgrt_module_kernel(d=NULL)", module_kernel_d, PGRT_EINVAL, "descriptor is NULL"},
    {"pgrt_module_kernel(out=NULL)", module_kernel_out, PGRT_EINVAL, "module_kernel: out is NULL"},
    {"pgrt_capture_begin(NULL)", capture_begin, PGRT_EINVAL,
     "stream is NULL (the legacy default stream cannot be captured)"},
    {"pgrt_capture_end(s=NULL)", capture_end_s, PGRT_EINVAL, "capture_end: stream is NULL"},
    {"pgrt_capture_end(out=NULL)", capture_end_out, PGRT_EINVAL, "capture_end: out is NULL"},
    {"pgrt_capture_abort(NULL)", capture_abort, PGRT_EINVAL, "capture_abort: stream is NULL"},
    {"pgrt_graph_launch(NULL)", graph_launch, PGRT_EINVAL, "pgrt_graph_launch: graph is NULL"},
    {"pgrt_graph_destroy(NULL), (&NULL)", graph_destroy, 0, NULL},
    {"pgrt_clip_create(ctx=NULL)", clip_create_ctx, PGRT_EINVAL, "clip_create: ctx is NULL"},
    {"pgrt_clip_create(sizes=NULL, 1)", clip_create_sizes, PGRT_EINVAL, "sizes is NULL"},
    {"pgrt_clip_create(out=NULL)", clip_create_out, PGRT_EINVAL, "clip_create: out is NULL"},
    {"pgrt_clip_destroy(NULL), (&NULL)", clip_destroy, 0, NULL},
    {"pgrt_clip_run(c=NULL)", clip_run_state, PGRT_EINVAL, "pgrt_clip_run: state is NULL"},
    {"pgrt_clip_run(grads=NULL)", clip_run_grads, PGRT_EINVAL, "pgrt_clip_run: grads is NULL"},
    {"pgrt_clip_run(grads[0]=NULL)", clip_run_grad0, PGRT_EINVAL, "grads[0] is NULL"},
    {"pgrt_clip_result(c=NULL)", clip_result_state, PGRT_EINVAL, "clip_result: state is NULL"},
    {"pgrt_clip_result(scale=NULL, norm=NULL)", clip_result_outs, 0, NULL},
    {"pgrt_clip_result_buf/partials(NULL)", clip_accessors, 0, NULL},
    {"pgrt_train_create(ctx=NULL)", train_create_ctx, PGRT_EINVAL, "train_create: ctx is NULL"},
    {"pgrt_train_create(params=NULL)", train_create_params, PGRT_EINVAL, "params is NULL"},
    {"pgrt_train_create(out=NULL)", train_create_out, PGRT_EINVAL, "train_create: out is NULL"},
    {"pgrt_train_destroy(NULL), (&NULL)", train_destroy, 0, NULL},
    {"pgrt_train_backward(NULL)", train_backward, PGRT_EINVAL, "backward: pipeline is NULL"},
    {"pgrt_train_set_lr(NULL)", train_set_lr, PGRT_EINVAL, "set_lr: pipeline is NULL"},
    {"pgrt_train_invalidate/graphs_enabled/hyper_buf(NULL)", train_accessors, 0, NULL},
    {"pgrt_train_layer_norm(NULL)", train_layer_norm, PGRT_EINVAL, "layer_norm: pipeline is"},
    {"pgrt_train_stats_get(NULL)", train_stats, PGRT_EINVAL, "stats_get: pipeline is NULL"},
    {"pgrt_strerror/err_name/cuda_error_name(unknown)", names, 0, NULL},
    {"pgrt_args_check(d=NULL)", args_check_desc, PGRT_EINVAL, "descriptor is NULL"},
    {"pgrt_args_check(args=NULL, 3)", args_check_args, PGRT_EINVAL, "args is NULL"},
    {"pgrt_ptx_parse(ptx=NULL)", ptx_parse_ptx, PGRT_EINVAL, "pgrt_ptx_parse: ptx is NULL"},
    {"pgrt_ptx_parse(out=NULL)", ptx_parse_out, PGRT_EINVAL, "pgrt_ptx_parse: out is NULL"},
    {"pgrt_ptx_check(info=NULL)", ptx_check_info, PGRT_EINVAL, "info is NULL"},
    {"pgrt_ptx_check(err=NULL, errlen=100)", ptx_check_errbuf, PGRT_EINVAL,
     "pgrt_ptx_check: info is NULL"},
    {"pgrt_target_for_cc(out=NULL)", target_for_cc_out, PGRT_EINVAL,
     "pgrt_target_for_cc: out is NULL"},
};

static void test_nulls(pgrt_ctx *ctx, pgrt_stream *s)
{
    memset(&fx, 0, sizeof fx);
    fx.ctx = ctx;
    fx.s = s;
    fx.d = pgk_find("gradient_clip");
    fx.kn = knobs_n("gradient_clip", 16);
    fx.b = marked_buffer(ctx, 16);
    fx.args[0] = pgrt_arg_buf(fx.b);
    fx.args[1] = pgrt_arg_f32(0.5f);
    fx.args[2] = pgrt_arg_u32(16);
    char err[256];
    char *ptx = NULL;
    size_t sizes[1] = {16};
    if (pgrt_event_create(ctx, &fx.e) || pgrt_kernel_get(ctx, fx.d, NULL, &fx.k) ||
        pgk_emit(fx.d, PG_SM_90, NULL, &ptx, NULL, err, sizeof err) ||
        pgrt_module_load(ctx, ptx, &fx.m) || pgrt_clip_create(ctx, sizes, 1, &fx.clip)) {
        fprintf(stderr, "null-case fixtures: %s\n", pgrt_last_message());
        exit(1);
    }
    pgk_free(ptx);

    int n0 = fk.launch_count(), allocs0 = fk.live_allocs(), modules0 = fk.live_modules();
    for (size_t i = 0; i < COUNTOF(null_cases); i++) {
        const null_case *c = &null_cases[i];
        char msg[1024] = "";
        /* A message no case gives: every failing call must replace it. */
        pg_target t_;
        REQUIRE_INT_EQ(pgrt_target_for_cc(77, 7, &t_), PGRT_ETARGET);
        char stale[256];
        snprintf(stale, sizeof stale, "%s", pgrt_last_message());
        int rc = c->run(msg, sizeof msg);
        if (rc != 0 && strcmp(pgrt_last_message(), stale) == 0)
            fprintf(stderr, "%s: %s but the message is the previous one\n", c->call,
                    pgrt_err_name(rc));
        REQUIRE(rc == 0 || strcmp(pgrt_last_message(), stale) != 0);
        if (rc != c->code || (c->words && !strstr(msg, c->words)))
            fprintf(stderr, "%s: got %s (%d), message \"%s\"\n", c->call, pgrt_err_name(rc), rc,
                    msg);
        REQUIRE_INT_EQ(rc, c->code);
        if (c->words)
            REQUIRE_CONTAINS(msg, c->words);
    }
    /* Nothing launched, allocated or loaded; the buffer as it was. */
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0);
    REQUIRE_INT_EQ(fk.live_modules(), modules0);
    REQUIRE(still_marked(fx.b));

    pgrt_clip_destroy(&fx.clip);
    pgrt_module_destroy(&fx.m);
    pgrt_event_destroy(&fx.e);
    pgrt_buf_destroy(&fx.b);
}

/* ---------------------------------------------------------------- PTX checks */

static char *emit_for(const char *kernel, pg_target t)
{
    char err[256];
    char *ptx = NULL;
    if (pgk_emit(pgk_find(kernel), t, NULL, &ptx, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "emit %s: %s\n", kernel, err);
        exit(1);
    }
    return ptx;
}

static void test_ptx(pgrt_ctx *ctx)
{
    int loads0 = fk.loads(), modules0 = fk.live_modules();
    pgrt_module *m = (pgrt_module *)1;

    /* F-PTX-001: sm_80 PTX on an sm_90 device; another capability's "a"
     * target too (sm_90a on this 9.0 device loads: tests/runtime). */
    char *p80 = emit_for("gradient_clip", PG_SM_80);
    EXPECT(pgrt_module_load(ctx, p80, &m), PGRT_ETARGET,
           "F-PTX-001 violated: PTX target sm_80 != device target sm_90");
    REQUIRE(m == NULL);
    char *p100a = emit_for("gradient_clip", PG_SM_100A);
    EXPECT(pgrt_module_load(ctx, p100a, &m), PGRT_ETARGET,
           "F-PTX-001 violated: PTX target sm_100a loads only on a compute capability 10.0 "
           "device; this device is 9.0 (target sm_90)");
    /* A kernel whose lowest target is above the device's. */
    pgk_desc high = *pgk_find("gradient_clip");
    high.min_target = PG_SM_100;
    pgrt_kernel *k = (pgrt_kernel *)1;
    EXPECT(pgrt_kernel_get(ctx, &high, NULL, &k), PGRT_ETARGET,
           "gradient_clip does not support sm_90 (its lowest target is sm_100)");
    REQUIRE(k == NULL);

    /* Malformed headers and broken PTX. */
    EXPECT(pgrt_module_load(ctx, "", &m), PGRT_EPTX,
           "PTX has no .version directive before its first statement");
    EXPECT(pgrt_module_load(ctx, ".version 8.7\n.entry k() { ret; }\n", &m), PGRT_EPTX,
           "PTX has no .target directive");
    EXPECT(pgrt_module_load(ctx, ".version eight\n.target sm_90\n", &m), PGRT_EPTX,
           "PTX .version is not MAJOR.MINOR: \".version eight\"");
    EXPECT(pgrt_module_load(ctx, ".version 8.7\n.target !\n", &m), PGRT_EPTX,
           "PTX .target is malformed");
    EXPECT(pgrt_module_load(ctx, ".version 9.9\n.target sm_90\n", &m), PGRT_EISA,
           "PTX ISA 9.9 is not one ptxgen knows");
    EXPECT(pgrt_module_load(ctx, ".version 7.0\n.target sm_90\n", &m), PGRT_EISA,
           "PTX ISA 7.0 is below sm_90's minimum 7.8");
    char *p90 = emit_for("gradient_clip", PG_SM_90);
    char *broken = malloc(strlen(p90) + 16);
    strcpy(broken, p90);
    char *brace = strstr(broken, "{\n");
    REQUIRE(brace != NULL);
    if (brace)
        memcpy(brace, "{ BROKEN;", 9);
    EXPECT(pgrt_module_load(ctx, broken, &m), PGRT_EJIT,
           "cuLinkAddData: CUDA_ERROR_INVALID_PTX: ptxas application ptx input, line 7; "
           "error   : Unknown symbol 'BROKEN'");
    REQUIRE_INT_EQ(pgrt_last_cuda_error(), 218);
    REQUIRE(m == NULL);
    REQUIRE_INT_EQ(fk.loads(), loads0);
    REQUIRE_INT_EQ(fk.live_modules(), modules0);

    /* A module without the entry asked for. */
    REQUIRE_INT_EQ(pgrt_module_load(ctx, p90, &m), 0);
    EXPECT(pgrt_module_kernel(m, pgk_find("silu_backward"), &k), PGRT_ECUDA,
           "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND: entry \"silu_backward\"");
    pgrt_module_destroy(&m);
    free(broken);
    pgk_free(p80);
    pgk_free(p100a);
    pgk_free(p90);
}

/* PTX too new for the driver: sm_100 PTX (ISA 8.6) on a 12.4 driver. */
static void test_old_driver(void)
{
    setenv("FAKECUDA_CC", "100", 1);
    setenv("FAKECUDA_VERSION", "12040", 1);
    pgrt_ctx *ctx = open_ctx();
    unsetenv("FAKECUDA_CC");
    unsetenv("FAKECUDA_VERSION");
    REQUIRE_INT_EQ(pgrt_ctx_target(ctx), PG_SM_100);
    unsigned isa = pg_target_min_isa(PG_SM_100), need = pg_isa_min_driver(isa);
    REQUIRE(need > 12040);
    char words[160];
    snprintf(words, sizeof words,
             "gradient_clip (sm_100): PTX ISA %u.%u needs a CUDA %u.%u driver or newer; this "
             "driver is CUDA 12.4 (cuDriverGetVersion 12040)",
             isa / 10, isa % 10, need / 1000, need % 1000 / 10);
    int n0 = fk.launch_count(), loads0 = fk.loads();
    pgrt_kernel *k = (pgrt_kernel *)1;
    EXPECT(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), PGRT_EISA, words);
    REQUIRE(k == NULL);
    pgrt_buf *g = marked_buffer(ctx, 32);
    pgk_knobs kn = knobs_n("gradient_clip", 32);
    pgrt_arg a[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(32)};
    EXPECT(pgrt_launch(ctx, NULL, "gradient_clip", &kn, a, 3), PGRT_EISA, words);
    pgrt_warm w = {"gradient_clip", NULL};
    EXPECT(pgrt_prewarm(ctx, &w, 1), PGRT_EISA, "needs a CUDA");
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.failures, 3);
    REQUIRE_INT_EQ(st.modules, 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE_INT_EQ(fk.loads(), loads0);
    REQUIRE(still_marked(g));
    pgrt_buf_destroy(&g);
    pgrt_ctx_destroy(&ctx);
}

/* ---------------------------------------------------------------- capture */

static void test_capture(pgrt_ctx *ctx)
{
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    pgrt_buf *g = marked_buffer(ctx, 256);
    pgk_knobs kn = knobs_n("gradient_clip", 256);
    pgrt_arg a[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(256)};
    pgk_knobs sk;
    pgk_knobs_default(pgk_find("rms_norm_forward"), &sk);
    pgrt_warm cached = {"gradient_clip", NULL};
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, &cached, 1), 0);
    pgrt_cache_stats st0, st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st0), 0);
    int n0 = fk.launch_count(), loads0 = fk.loads();

    EXPECT(pgrt_capture_begin(s), 0, "");
    EXPECT(pgrt_capture_begin(s), PGRT_ESTATE, "pgrt_capture_begin: the stream is already "
                                               "capturing");
    /* A kernel not in the cache: refused, whichever way it is asked for. */
    const pgk_desc *rms = pgk_find("rms_norm_forward");
    pgrt_kernel *k = (pgrt_kernel *)1;
    EXPECT(pgrt_kernel_get(ctx, rms, NULL, &k), PGRT_ECAPTURE,
           "rms_norm_forward (sm_90) is not loaded and a stream is capturing: loading a module "
           "during capture is refused; pre-warm it (pgrt_prewarm) before pgrt_capture_begin");
    REQUIRE(k == NULL);
    pgrt_arg ra[6] = {pgrt_arg_buf(g),        pgrt_arg_buf(g),        pgrt_arg_buf(g),
                      pgrt_arg_u32(sk.v[0]), pgrt_arg_u32(sk.v[1]), pgrt_arg_f32(1e-5f)};
    EXPECT(pgrt_launch(ctx, s, "rms_norm_forward", &sk, ra, 6), PGRT_ECAPTURE,
           "rms_norm_forward (sm_90) is not loaded and a stream is capturing");
    pgrt_warm w = {"rms_norm_forward", NULL};
    EXPECT(pgrt_prewarm(ctx, &w, 1), PGRT_ECAPTURE, "is not loaded and a stream is capturing");
    char *ptx = emit_for("rms_norm_forward", PG_SM_90);
    pgrt_module *m = (pgrt_module *)1;
    EXPECT(pgrt_module_load(ctx, ptx, &m), PGRT_ECAPTURE,
           "pgrt_module_load: a stream is capturing: loading a module during capture is refused");
    REQUIRE(m == NULL);
    pgk_free(ptx);

    /* A cached kernel is captured, not run. */
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, a, 3), 0, "");
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE(still_marked(g));
    pgrt_graph *graph = NULL;
    REQUIRE_INT_EQ(pgrt_capture_end(s, &graph), 0);
    REQUIRE(graph != NULL);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.misses, st0.misses); /* refused before it counted as a miss */
    REQUIRE_INT_EQ(st.hits - st0.hits, 1);
    REQUIRE_INT_EQ(fk.loads(), loads0);
    REQUIRE_INT_EQ(pgrt_graph_launch(graph, s), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    const fakecuda_launch *l = fk.launch_at(n0);
    REQUIRE(l && l->replayed && strcmp(l->name, "gradient_clip") == 0);
    pgrt_graph_destroy(&graph);
    EXPECT(pgrt_capture_end(s, &graph), PGRT_ESTATE,
           "pgrt_capture_end: the stream is not capturing (pgrt_capture_begin first)");
    REQUIRE(graph == NULL);

    /* A synchronous call on the capturing stream invalidates the capture. */
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, a, 3), 0);
    EXPECT(pgrt_stream_sync(s), PGRT_ECUDA,
           "cuStreamSynchronize: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
    EXPECT(pgrt_capture_end(s, &graph), PGRT_ECUDA,
           "cuStreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (the captured work is "
           "discarded");
    REQUIRE(graph == NULL);
    REQUIRE_INT_EQ(fk.launch_count(), n0);

    /* After the capture the kernel loads as usual. */
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, rms, NULL, &k), 0);
    REQUIRE_INT_EQ(fk.loads(), loads0 + 1);
    pgrt_buf_destroy(&g);
    pgrt_stream_destroy(&s);
}

/* ---------------------------------------------------------------- argument mismatches */

static void test_arguments(pgrt_ctx *ctx, pgrt_stream *s)
{
    pgrt_buf *g = marked_buffer(ctx, 1000);
    pgk_knobs kn = knobs_n("gradient_clip", 1000);
    const pgk_desc *d = pgk_find("gradient_clip");
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, d, NULL, &k), 0);
    const pgrt_arg buf = pgrt_arg_buf(g), scale = pgrt_arg_f32(0.5f), n = pgrt_arg_u32(1000);
    pgrt_arg odd = pgrt_arg_u32(1000);
    odd.type = 99;
    pgrt_arg many[17];
    for (int i = 0; i < 17; i++)
        many[i] = n;

    struct {
        pgrt_arg a[3];
        size_t n;
        int code;
        const char *words;
    } cases[] = {
        {{buf, scale, n}, 2, PGRT_EARGS, "gradient_clip takes 3 arguments (grads, scale, n), got 2"},
        {{buf, scale, n}, 0, PGRT_EARGS, "gradient_clip takes 3 arguments (grads, scale, n), got 0"},
        {{buf, buf, n}, 3, PGRT_EARGS,
         "gradient_clip argument 1 (scale): expected a f32 value, got a device pointer"},
        {{scale, scale, n}, 3, PGRT_EARGS,
         "gradient_clip argument 0 (grads): expected a device pointer, got f32"},
        {{pgrt_arg_u64(pgrt_buf_ptr(g)), scale, n}, 3, PGRT_EARGS,
         "argument 0 (grads): expected a device pointer, got u64"},
        {{buf, pgrt_arg_f64(0.5), n}, 3, PGRT_EARGS, "argument 1 (scale): expected f32, got f64"},
        {{buf, pgrt_arg_u32(1), n}, 3, PGRT_EARGS, "argument 1 (scale): expected f32, got u32"},
        {{buf, scale, pgrt_arg_s32(1000)}, 3, PGRT_EARGS, "argument 2 (n): expected u32, got s32"},
        {{buf, scale, pgrt_arg_u64(1000)}, 3, PGRT_EARGS, "argument 2 (n): expected u32, got u64"},
        {{buf, scale, odd}, 3, PGRT_EARGS, "argument 2 (n): expected u32, got type #99"},
        {{pgrt_arg_ptr(0), scale, n}, 3, PGRT_EARGS, "argument 0 (grads): null device pointer"},
        {{pgrt_arg_buf(NULL), scale, n}, 3, PGRT_EARGS, "argument 0 (grads): null device pointer"},
        {{buf, scale, pgrt_arg_u32(2000)}, 3, PGRT_EARGS,
         "gradient_clip argument 2 (n) = 2000, but the launch is sized for knob n = 1000"},
        {{buf, scale, pgrt_arg_u32(999)}, 3, PGRT_EARGS,
         "argument 2 (n) = 999, but the launch is sized for knob n = 1000"},
    };

    int n0 = fk.launch_count();
    for (size_t i = 0; i < COUNTOF(cases); i++) {
        EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, cases[i].a, cases[i].n), cases[i].code,
               cases[i].words);
        EXPECT(pgrt_kernel_launch(k, s, &kn, cases[i].a, cases[i].n), cases[i].code,
               cases[i].words);
        char err[256] = "";
        REQUIRE_INT_EQ(pgrt_args_check(d, &kn, cases[i].a, cases[i].n, err, sizeof err),
                       cases[i].code);
        REQUIRE_CONTAINS(err, cases[i].words);
    }
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, many, 4), PGRT_EARGS, "got 4");
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", &kn, many, 17), PGRT_EARGS, "got 17");
    /* No knobs: the defaults (n = 2^20), which the argument must match. */
    pgrt_arg ok[3] = {buf, scale, n};
    EXPECT(pgrt_launch(ctx, s, "gradient_clip", NULL, ok, 3), PGRT_EARGS,
           "argument 2 (n) = 1000, but the launch is sized for knob n = 1048576");

    /* A baked knob launched with another value than the kernel was built for. */
    const pgk_desc *gemm = pgk_find("gemm_backward_a");
    pgk_knobs g1, g2;
    pgk_knobs_default(gemm, &g1);
    g1.v[pgk_knob_index(gemm, "variant")] = 1;
    g2 = g1;
    g2.v[pgk_knob_index(gemm, "variant")] = 2;
    pgrt_kernel *gk = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, gemm, &g1, &gk), 0);
    pgrt_arg ga[6] = {buf, buf, buf, pgrt_arg_u32(g1.v[0]), pgrt_arg_u32(g1.v[1]),
                      pgrt_arg_u32(g1.v[2])};
    EXPECT(pgrt_kernel_launch(gk, s, &g2, ga, 6), PGRT_EARGS,
           "gemm_backward_a was built for variant = 1 (a baked knob) but is launched with "
           "variant = 2; get the kernel for these knobs");

    /* A stream of another context. */
    pgrt_ctx *other = open_ctx();
    pgrt_stream *os = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(other, &os), 0);
    EXPECT(pgrt_launch(ctx, os, "gradient_clip", &kn, ok, 3), PGRT_EINVAL,
           "gradient_clip: stream belongs to another context");
    EXPECT(pgrt_buf_upload_async(g, 0, &(float){1}, 1, os), PGRT_EINVAL,
           "the stream belongs to another context");

    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE(still_marked(g));

    /* The same launch with matching arguments goes through and scales. */
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, ok, 3), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    float v[2];
    REQUIRE_INT_EQ(pgrt_buf_download(g, 0, v, 2), 0);
    REQUIRE(v[0] == 0.5f && v[1] == 1.0f);

    pgrt_stream_destroy(&os);
    pgrt_ctx_destroy(&other);
    pgrt_buf_destroy(&g);
}

/* ---------------------------------------------------------------- messages */

/* How many times needle occurs in hay. */
static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Leave an unrelated message on the thread, to be sure that the next
 * failure replaces it. */
static void stale_message(pgrt_ctx *ctx)
{
    pgrt_buf *b = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 0, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "0 elements");
}

typedef struct cb_state {
    pgrt_ctx *ctx;
    int mode; /* 0: succeed, 1: fail with no message, 2: a runtime call fails, 3: return 1 */
    int calls;
} cb_state;

static void no_log(void *user, const char *line) { (void)user, (void)line; }

static int failing_layer(void *user, pgrt_stream *s, size_t layer, uint32_t seq)
{
    (void)seq;
    cb_state *st = user;
    st->calls++;
    if (layer != 1 || st->mode == 0)
        return 0;
    if (st->mode == 1)
        return PGRT_EARGS;
    if (st->mode == 2)
        return pgrt_launch(st->ctx, s, "no_such_kernel", NULL, NULL, 0);
    return 1;
}

/* A training callback's failure is the message, once, whether or not the
 * step was first tried as a graph capture (and then run again eagerly). */
static void test_train_messages(pgrt_ctx *ctx, pgrt_stream *s)
{
    pgrt_buf *param[2] = {NULL, NULL}, *grad = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 64, &grad), 0);
    for (int l = 0; l < 2; l++)
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 64, &param[l]), 0);
    pgrt_train_tensor tensors[2] = {{param[0], grad}, {param[1], grad}};
    cb_state st = {ctx, 0, 0};
    const pgrt_train_params good = {
        .layers = 2,
        .tensors_per_layer = 1,
        .tensors = tensors,
        .max_norm = 1.0f,
        .lr = 1e-3f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.01f,
        .graph = PGRT_TRAIN_GRAPH_OFF,
        .layer_backward = failing_layer,
        .user = &st,
        .log = no_log,
    };

    for (int g = 0; g < 2; g++) {
        pgrt_train_params p = good;
        p.graph = g ? PGRT_TRAIN_GRAPH_ON : PGRT_TRAIN_GRAPH_OFF;
        pgrt_train *t = NULL;
        REQUIRE_INT_EQ(pgrt_train_create(ctx, &p, &t), 0);
        if (!t)
            continue;
        const char *graph = g ? "graphs on" : "graphs off";

        st.mode = 1;
        stale_message(ctx);
        int rc = pgrt_train_backward(t, s, 16 + (uint32_t)g);
        REQUIRE_INT_EQ(rc, PGRT_EARGS);
        const char *m = pgrt_last_message();
        if (!strstr(m, "layer_backward callback failed with -14 (PGRT_EARGS) and left no message"))
            fprintf(stderr, "%s: %s\n", graph, m);
        REQUIRE_CONTAINS(m, "pgrt_train_backward: the layer_backward callback failed with -14 "
                            "(PGRT_EARGS) and left no message (backward of layer 1)");
        REQUIRE(strstr(m, "0 elements") == NULL);
        REQUIRE_INT_EQ(occurrences(m, "(backward of layer 1)"), 1);

        st.mode = 2;
        stale_message(ctx);
        rc = pgrt_train_backward(t, s, 32 + (uint32_t)g);
        REQUIRE_INT_EQ(rc, PGRT_ENOTFOUND);
        m = pgrt_last_message();
        REQUIRE_CONTAINS(m, "unknown kernel \"no_such_kernel\"");
        REQUIRE_INT_EQ(occurrences(m, "(backward of layer 1)"), 1);
        REQUIRE(strstr(m, "0 elements") == NULL);

        st.mode = 3;
        rc = pgrt_train_backward(t, s, 48 + (uint32_t)g);
        REQUIRE_INT_EQ(rc, PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "the layer_backward callback returned 1, not 0 or a "
                                              "negative PGRT_E* code (backward of layer 1)");
        st.mode = 0;
        REQUIRE_INT_EQ(pgrt_train_backward(t, s, 64), 0);
        REQUIRE_INT_EQ(pgrt_stream_sync(s), 0);
        pgrt_train_destroy(&t);
    }

    /* Hyper-parameters out of range are refused, naming the field and the
     * value. */
    const float inf = INFINITY, nan = NAN;
    const struct {
        int field;
        float v;
        const char *words;
    } bad[] = {
        {0, -1e-3f, "lr -0.001 must be finite and >= 0"},
        {0, nan, "lr nan must be finite"},
        {0, inf, "lr inf must be finite"},
        {0, -inf, "lr -inf must be"},
        {1, -0.1f, "beta1 -0.1 must be in [0, 1)"},
        {1, 1.0f, "beta1 1 must be in [0, 1)"},
        {2, 1.5f, "beta2 1.5 must be in [0, 1)"},
        {2, nan, "beta2 nan must be in [0, 1)"},
        {3, 0.0f, "eps 0 must be finite and > 0"},
        {3, -1e-8f, "eps -1e-08 must be"},
        {3, inf, "eps inf must be"},
        {4, -0.01f, "weight_decay -0.01 must be finite and >= 0"},
        {4, nan, "weight_decay nan must be"},
        {5, -1.0f, "max_norm -1 must be finite and >= 0"},
        {5, nan, "max_norm nan must be"},
    };
    for (size_t i = 0; i < COUNTOF(bad); i++) {
        pgrt_train_params p = good;
        float *f[] = {&p.lr, &p.beta1, &p.beta2, &p.eps, &p.weight_decay, &p.max_norm};
        *f[bad[i].field] = bad[i].v;
        pgrt_train *t = (pgrt_train *)&p;
        EXPECT(pgrt_train_create(ctx, &p, &t), PGRT_EINVAL, bad[i].words);
        REQUIRE(t == NULL);
    }
    /* The limits themselves are legal: lr 0, beta 0, weight decay 0. */
    pgrt_train_params edge = good;
    edge.lr = 0.0f;
    edge.beta1 = 0.0f;
    edge.weight_decay = 0.0f;
    edge.max_norm = 0.0f;
    pgrt_train *t = NULL;
    REQUIRE_INT_EQ(pgrt_train_create(ctx, &edge, &t), 0);
    EXPECT(pgrt_train_set_lr(t, s, -1.0f), PGRT_EINVAL, "pgrt_train_set_lr: lr -1 must be");
    EXPECT(pgrt_train_set_lr(t, s, nan), PGRT_EINVAL, "pgrt_train_set_lr: lr nan must be");
    REQUIRE_INT_EQ(pgrt_train_set_lr(t, s, 0.0f), 0);
    REQUIRE_INT_EQ(pgrt_stream_sync(s), 0);
    pgrt_train_destroy(&t);

    pgrt_buf_destroy(&grad);
    for (int l = 0; l < 2; l++)
        pgrt_buf_destroy(&param[l]);
}

/* The pure functions set the thread's message when they fail, like every
 * other public function, even with no err buffer to fill. */
static void test_pure_messages(pgrt_ctx *ctx)
{
    pgrt_ptx_info info;
    stale_message(ctx);
    EXPECT(pgrt_ptx_parse(".target sm_90\n", 0, &info, NULL, 0), PGRT_EPTX,
           "PTX has no .version directive");
    char err[256];
    stale_message(ctx);
    EXPECT(pgrt_ptx_parse(".version 7\n.target sm_90\n", 0, &info, err, sizeof err), PGRT_EPTX,
           "PTX .version is not MAJOR.MINOR");
    REQUIRE_STR_EQ(err, pgrt_last_message());
    /* A major so large that major * 10 wraps into a real ISA (8.2). */
    EXPECT(pgrt_ptx_parse(".version 429496737.8\n.target sm_90\n", 0, &info, NULL, 0), PGRT_EPTX,
           "PTX .version major 429496737 is out of range");

    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7.8\n.target sm_90\n", 0, &info, NULL, 0), 0);
    stale_message(ctx);
    EXPECT(pgrt_ptx_check(&info, PG_SM_80, 12080, NULL, 0), PGRT_ETARGET,
           "F-PTX-001 violated: PTX target sm_90 != device target sm_80");
    stale_message(ctx);
    EXPECT(pgrt_ptx_check(&info, PG_SM_90, 11000, NULL, 0), PGRT_EISA, "needs a CUDA");

    pgrt_device_info dev = {0};
    dev.target = PG_SM_90;
    dev.driver_version = 12080;
    dev.cc_major = 9;
    dev.cc_minor = 0;
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 8.0\n.target sm_90a\n", 0, &info, NULL, 0), 0);
    REQUIRE_INT_EQ(pgrt_ptx_check_device(&info, &dev, NULL, 0), 0);
    /* A capability of huge major: no overflow, and no match. */
    dev.cc_major = 0x7fffffff;
    stale_message(ctx);
    EXPECT(pgrt_ptx_check_device(&info, &dev, NULL, 0), PGRT_ETARGET,
           "loads only on a compute capability 9.0 device; this device is 2147483647.0");
    /* 8.10 is not 9.0 even though 8 * 10 + 10 == 90. */
    dev.cc_major = 8;
    dev.cc_minor = 10;
    EXPECT(pgrt_ptx_check_device(&info, &dev, NULL, 0), PGRT_ETARGET, "this device is 8.10");

    const pgk_desc *d = pgk_find("gradient_clip");
    pgrt_arg one = pgrt_arg_u32(1);
    stale_message(ctx);
    EXPECT(pgrt_args_check(d, NULL, &one, 1, NULL, 0), PGRT_EARGS,
           "gradient_clip takes 3 arguments");

    pg_target t = PG_TARGET_COUNT;
    stale_message(ctx);
    EXPECT(pgrt_target_for_cc(9, 0, NULL), PGRT_EINVAL, "pgrt_target_for_cc: out is NULL");
    EXPECT(pgrt_target_for_cc(6, 1, &t), PGRT_ETARGET,
           "no ptxgen target serves compute capability 6.1");
    EXPECT(pgrt_target_for_cc(-1, 0, &t), PGRT_EINVAL, "compute capability -1.0");
    EXPECT(pgrt_target_for_cc(9, 10, &t), PGRT_EINVAL, "compute capability 9.10");
    /* Huge majors: major * 10 used to overflow int (UBSan). */
    EXPECT(pgrt_target_for_cc(0x7fffffff, 9, &t), PGRT_ETARGET,
           "compute capability 2147483647.9");
    EXPECT(pgrt_target_for_cc(214748364, 8, &t), PGRT_ETARGET, "compute capability 214748364.8");
    EXPECT(pgrt_target_for_cc(100, 0, &t), PGRT_ETARGET, "compute capability 100.0");
    REQUIRE_INT_EQ(t, PG_TARGET_COUNT);
    REQUIRE_INT_EQ(pgrt_target_for_cc(12, 1, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_121);

    /* A driver library without cuInit is not "too old": the message names
     * the entry point and the library. */
    pgrt_ctx *other = NULL;
    pgrt_ctx_params p = {fk.path, 0};
    setenv("FAKECUDA_HIDE", "cuInit", 1);
    EXPECT(pgrt_ctx_create(&other, &p), PGRT_ENODRIVER,
           "lacks the entry point cuInit, which every driver since CUDA 2.0 provides");
    REQUIRE_CONTAINS(pgrt_last_message(), fk.path);
    REQUIRE(strstr(pgrt_last_message(), "too old") == NULL);
    unsetenv("FAKECUDA_HIDE");
    REQUIRE(other == NULL);
}

/* ---------------------------------------------------------------- pgrt_gemm */

/* Every refusal of pgrt_gemm names its problem and launches nothing; a
 * split shape launches the GEMM and the reduce with a workspace, the GEMM
 * alone without one. */
static void test_gemm_layers(pgrt_ctx *ctx)
{
    pgrt_buf *x = NULL, *w = NULL, *y = NULL, *wf16 = NULL, *bias16 = NULL, *f = NULL, *ws = NULL;
    pgrt_buf *view = NULL;
    if (pgrt_buf_alloc(ctx, PG_BF16, 2048 * 1536, &x) ||
        pgrt_buf_alloc(ctx, PG_BF16, 16 * 1536, &w) ||
        pgrt_buf_alloc(ctx, PG_BF16, 2048 * 16, &y) ||
        pgrt_buf_alloc(ctx, PG_F16, 16 * 1536, &wf16) ||
        pgrt_buf_alloc(ctx, PG_U16, 16, &bias16) || pgrt_buf_alloc(ctx, PG_F32, 4096, &f) ||
        pgrt_buf_view(x, 0, 2048 * 16, &view))
        exit(1);
    size_t n0 = fk.launch_count();
    EXPECT(pgrt_gemm(NULL, NULL, PGK_GEMM_FORWARD, x, w, y, NULL, 2048, 16, 1536, false, NULL,
                     NULL),
           PGRT_EINVAL, "pgrt_gemm: ctx is NULL");
    EXPECT(pgrt_gemm(ctx, NULL, (pgk_gemm_layout)7, x, w, y, NULL, 2048, 16, 1536, false, NULL,
                     NULL),
           PGRT_EINVAL, "layout 7 is not a pgk_gemm_layout");
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, wf16, y, NULL, 2048, 16, 1536, false, NULL,
                     NULL),
           PGRT_EINVAL, "a holds bf16 and b f16 elements; the inputs share a type");
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, w, y, NULL, 0, 16, 1536, false, NULL, NULL),
           PGRT_ERANGE, "m=0 n=16 k=1536: each must be in [1, 2^21]");
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, w, bias16, NULL, 2048, 16, 1536, false, NULL,
                     NULL),
           PGRT_ERANGE, "c holds 16 elements; m=2048 n=16 k=1536 need 32768");
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, w, y, bias16, 2048, 16, 1536, false, NULL,
                     NULL),
           PGRT_EINVAL, "bias must be an f32 buffer of this context with at least 16 elements");
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, w, view, NULL, 2048, 16, 1536, false, NULL,
                     NULL),
           PGRT_EINVAL, "the output c overlaps the input a");
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, f, f, y, NULL, 16, 16, 16, false, NULL, NULL),
           PGRT_EINVAL, "no GEMM for layout 0 with f32 inputs and bf16 output");
    pgrt_buf *fb = NULL, *fc = NULL;
    if (pgrt_buf_alloc(ctx, PG_F32, 4096, &fb) || pgrt_buf_alloc(ctx, PG_F32, 4096, &fc))
        exit(1);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    /* f32 with a bias, or a backward accumulate, on a small shape: gemm_thin
     * (the small-tile kernels have neither), one launch */
    pgk_gemm_choice fu;
    REQUIRE_INT_EQ(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, f, fb, fc, f, 16, 16, 16, false, NULL,
                             &fu), 0);
    REQUIRE_STR_EQ(fu.desc->name, "gemm_thin");
    REQUIRE_INT_EQ(pgrt_gemm(ctx, NULL, PGK_GEMM_BACKWARD_W, f, fb, fc, NULL, 16, 16, 16, true,
                             NULL, &fu), 0);
    REQUIRE_STR_EQ(fu.desc->name, "gemm_thin");
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 2);
    n0 = fk.launch_count();

    /* a LoRA shape with R thin (y[2048,16] times w[1536,16] into x): gemm_thin,
     * one launch, no workspace */
    REQUIRE_INT_EQ(pgrt_gemm_workspace_bytes(ctx, PGK_GEMM_FORWARD, PG_BF16, PG_BF16, 2048, 1536,
                                             16), 0);
    pgk_gemm_choice used;
    REQUIRE_INT_EQ(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, y, w, x, NULL, 2048, 1536, 16, false,
                             NULL, &used), 0);
    REQUIRE_STR_EQ(used.desc->name, "gemm_thin");
    REQUIRE(used.split == 1 && used.reduce == NULL);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    /* a long reduction (n off a multiple of 8: the mma.sync family; a and
     * b both read from x): split with a workspace (GEMM + reduce), whole
     * without */
    uint64_t need = pgrt_gemm_workspace_bytes(ctx, PGK_GEMM_FORWARD, PG_BF16, PG_BF16, 256, 100,
                                              8192);
    REQUIRE(need > 0);
    if (pgrt_buf_alloc(ctx, PG_U8, need, &ws))
        exit(1);
    REQUIRE_INT_EQ(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, x, y, NULL, 256, 100, 8192, false,
                             ws, &used), 0);
    REQUIRE(used.split > 1 && used.reduce != NULL);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 3);
    REQUIRE_INT_EQ(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, x, y, NULL, 256, 100, 8192, false,
                             NULL, &used), 0);
    REQUIRE(used.split == 1 && used.reduce == NULL);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 4);
    EXPECT(pgrt_gemm(ctx, NULL, PGK_GEMM_FORWARD, x, x, y, NULL, 256, 100, 8192, false, x, NULL),
           PGRT_EINVAL, "the workspace overlaps an input");
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 4);
    pgrt_buf *bufs[] = {view, x, w, y, wf16, bias16, f, fb, fc, ws};
    for (size_t i = 0; i < COUNTOF(bufs); i++)
        pgrt_buf_destroy(&bufs[i]);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA");

    test_no_device();
    pgrt_ctx *ctx = open_ctx();
    pgrt_stream *s = NULL;
    if (pgrt_stream_create(ctx, &s) != 0)
        return 1;
    test_unknown_kernel(ctx, s);
    test_buffer_sizes(ctx);
    test_launch_sizes(ctx, s);
    test_nulls(ctx, s);
    test_ptx(ctx);
    test_capture(ctx);
    test_arguments(ctx, s);
    test_train_messages(ctx, s);
    test_pure_messages(ctx);
    test_gemm_layers(ctx);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    test_old_driver();
    REQUIRE_INT_EQ(fk.live_allocs(), 0);
    REQUIRE_INT_EQ(fk.live_modules(), 0);
    fake_fixture_close(&fk);
    TEST_DONE();
}
