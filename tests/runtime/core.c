/* SPDX-License-Identifier: MIT */
/*
 * The runtime against the fake driver (fakecuda.h): buffers, streams,
 * events, the module cache (hits, misses, baked knobs, concurrent misses,
 * refusal during capture), launches and their checks, JIT error messages,
 * direct loading, graph capture and the clip pipeline's launch sequence.
 * Nothing runs on a GPU: launches are recorded and inspected.
 *
 * Usage: test_core FAKE_LIBCUDA
 */
#include "fake_util.h"
#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

static fake_fixture fk;

static pgrt_ctx *open_ctx(void) { return fake_open_ctx(fk.path); }

static void test_device(pgrt_ctx *ctx)
{
    pgrt_device_info info;
    REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
    REQUIRE_STR_EQ(info.name, "Fake GPU");
    REQUIRE_INT_EQ(info.cc_major, 9);
    REQUIRE_INT_EQ(info.cc_minor, 0);
    REQUIRE_INT_EQ(info.target, PG_SM_90);
    REQUIRE_INT_EQ(pgrt_ctx_target(ctx), PG_SM_90);
    REQUIRE_INT_EQ(info.driver_version, 12080);
    REQUIRE(!info.direct_load);
    REQUIRE_INT_EQ(info.sm_count, 4);
    size_t fr = 0, tot = 0;
    REQUIRE_INT_EQ(pgrt_ctx_mem_info(ctx, &fr, &tot), 0);
    REQUIRE(fr > 0 && tot >= fr);
    REQUIRE_INT_EQ(pgrt_ctx_sync(ctx), 0);
}

static void test_buffers(pgrt_ctx *ctx)
{
    int allocs0 = fk.live_allocs();
    pgrt_buf *b = NULL, *v = NULL, *c = NULL, *h = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 100, &b), 0);
    REQUIRE_INT_EQ(pgrt_buf_count(b), 100);
    REQUIRE_INT_EQ(pgrt_buf_bytes(b), 400);
    REQUIRE_INT_EQ(pgrt_buf_type(b), PG_F32);
    REQUIRE(pgrt_buf_ptr(b) != 0);
    float x[100], y[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)i;
    REQUIRE_INT_EQ(pgrt_buf_upload(b, 0, x, 100), 0);
    memset(y, 0, sizeof y);
    REQUIRE_INT_EQ(pgrt_buf_download(b, 0, y, 100), 0);
    REQUIRE(memcmp(x, y, sizeof x) == 0);

    /* Bounds are checked in elements. */
    REQUIRE_INT_EQ(pgrt_buf_upload(b, 95, x, 10), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "outside a buffer of 100");
    REQUIRE_INT_EQ(pgrt_buf_download(b, 101, y, 0), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_buf_upload(b, 100, x, 0), 0);

    /* A view shares the allocation and outlives its parent. */
    REQUIRE_INT_EQ(pgrt_buf_view(b, 10, 20, &v), 0);
    REQUIRE_INT_EQ(pgrt_buf_ptr(v), pgrt_buf_ptr(b) + 40);
    REQUIRE_INT_EQ(pgrt_buf_view(b, 90, 20, &c), PGRT_ERANGE);
    REQUIRE(c == NULL);
    REQUIRE_INT_EQ(pgrt_buf_view(b, 0, 0, &c), PGRT_ERANGE);
    pgrt_buf_destroy(&b);
    REQUIRE(b == NULL);
    REQUIRE_INT_EQ(pgrt_buf_download(v, 0, y, 20), 0);
    REQUIRE(y[0] == 10.0f && y[19] == 29.0f);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0 + 1);
    pgrt_buf_destroy(&v);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0);

    /* Copies, fills and type checks. */
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 8, &b), 0);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 8, &c), 0);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F16, 8, &h), 0);
    REQUIRE_INT_EQ(pgrt_buf_fill32(b, 0x7fc00001u), 0);
    REQUIRE_INT_EQ(pgrt_buf_copy(c, 0, b, 0, 8), 0);
    uint32_t bits[8];
    REQUIRE_INT_EQ(pgrt_buf_download(c, 0, bits, 8), 0);
    REQUIRE_INT_EQ(bits[0], 0x7fc00001u);
    REQUIRE_INT_EQ(bits[7], 0x7fc00001u);
    REQUIRE_INT_EQ(pgrt_buf_copy(c, 4, b, 0, 8), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_buf_copy(h, 0, b, 0, 8), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "f16 <- f32");
    REQUIRE_INT_EQ(pgrt_buf_fill32(h, 0), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_memset(c, 0), 0);
    REQUIRE_INT_EQ(pgrt_buf_download(c, 0, bits, 8), 0);
    REQUIRE_INT_EQ(bits[3], 0);

    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    REQUIRE_INT_EQ(pgrt_buf_upload_async(c, 2, x + 5, 3, s), 0);
    REQUIRE_INT_EQ(pgrt_buf_copy_async(b, 0, c, 0, 8, s), 0);
    REQUIRE_INT_EQ(pgrt_buf_fill32_async(c, 0, s), 0);
    REQUIRE_INT_EQ(pgrt_buf_memset_async(h, 0xff, s), 0);
    REQUIRE_INT_EQ(pgrt_buf_download_async(b, 0, y, 8, s), 0);
    REQUIRE_INT_EQ(pgrt_stream_sync(s), 0);
    REQUIRE(y[2] == 5.0f && y[4] == 7.0f && y[5] == 0.0f);
    pgrt_stream_destroy(&s);

    pgrt_buf *bad = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 0, &bad), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_PRED, 4, &bad), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, SIZE_MAX / 2, &bad), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, (size_t)1 << 31, &bad), PGRT_EDEVMEM);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: 8589934592 bytes");
    REQUIRE(bad == NULL);
    pgrt_buf_destroy(&b);
    pgrt_buf_destroy(&c);
    pgrt_buf_destroy(&h);
    REQUIRE_INT_EQ(fk.live_allocs(), allocs0);
}

static void test_events(pgrt_ctx *ctx)
{
    pgrt_stream *s = NULL;
    pgrt_event *a = NULL, *b = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    REQUIRE_INT_EQ(pgrt_event_create(ctx, &a), 0);
    REQUIRE_INT_EQ(pgrt_event_create(ctx, &b), 0);
    float ms = -1;
    /* Not recorded yet: the driver's error comes back named. */
    REQUIRE_INT_EQ(pgrt_event_elapsed_ms(a, b, &ms), PGRT_ECUDA);
    REQUIRE_STR_EQ(pgrt_last_message(), "cuEventElapsedTime: CUDA_ERROR_INVALID_HANDLE");
    REQUIRE_INT_EQ(pgrt_event_record(a, s), 0);
    REQUIRE_INT_EQ(pgrt_event_record(b, s), 0);
    REQUIRE_INT_EQ(pgrt_event_sync(b), 0);
    REQUIRE_INT_EQ(pgrt_event_elapsed_ms(a, b, &ms), 0);
    REQUIRE(ms == 0.5f);
    bool cap = true;
    REQUIRE_INT_EQ(pgrt_stream_is_capturing(s, &cap), 0);
    REQUIRE(!cap);
    pgrt_event_destroy(&a);
    pgrt_event_destroy(&b);
    pgrt_stream_destroy(&s);
}

/* A kernel that bakes its knob into the PTX (as a comment: enough to make
 * the text differ), for the cache's keying. */
static int baked_build(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    char text[64];
    snprintf(text, sizeof text, "baked width %u", knobs[0]);
    pg_comment(k, text);
    pg_reg x = pg_param_load(k, p[0]);
    (void)x;
    pg_ret(k);
    return pg_kernel_error(k);
}
static int baked_launch(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    *out = (pgk_launch){{1, 1, 1}, {knobs[0], 1, 1}, 0};
    return 0;
}
static const pgk_param baked_params[] = {{"x", PG_U64, true}};
static const pgk_knob baked_knobs[] = {{"width", 32, 32, 1024, "threads", true}};
static const pgk_desc baked = {
    .name = "baked_test",
    .summary = "a kernel that bakes a knob",
    .params = baked_params,
    .nparams = 1,
    .knobs = baked_knobs,
    .nknobs = 1,
    .min_target = PG_SM_70,
    .build = baked_build,
    .launch = baked_launch,
};

static void test_cache(pgrt_ctx *ctx)
{
    const pgk_desc *sq = pgk_find("squared_sum_reduce");
    REQUIRE(sq != NULL);
    if (!sq)
        return;
    pgrt_cache_stats st0, st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st0), 0);
    int loads0 = fk.loads();

    pgrt_kernel *k1 = NULL, *k2 = NULL, *k3 = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, sq, NULL, &k1), 0);
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, sq, NULL, &k2), 0);
    /* Other sizes share the module: squared_sum_reduce bakes nothing. */
    pgk_knobs kn;
    pgk_knobs_default(sq, &kn);
    kn.v[0] = 12345;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, sq, &kn, &k3), 0);
    REQUIRE(k1 != NULL && k1 == k2 && k2 == k3);
    REQUIRE(pgrt_kernel_desc(k1) == sq);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.misses - st0.misses, 1);
    REQUIRE_INT_EQ(st.hits - st0.hits, 2);
    REQUIRE_INT_EQ(st.modules - st0.modules, 1);
    REQUIRE_INT_EQ(fk.loads() - loads0, 1);
    REQUIRE(st.jit_ms >= 0.0 && st.emit_ms > 0.0);

    /* A baked knob is part of the key. */
    pgk_knobs w64, w128;
    pgk_knobs_default(&baked, &w64);
    w64.v[0] = 64;
    pgk_knobs_default(&baked, &w128);
    w128.v[0] = 128;
    pgrt_kernel *b64 = NULL, *b128 = NULL, *again = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &baked, &w64, &b64), 0);
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &baked, &w128, &b128), 0);
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &baked, &w64, &again), 0);
    REQUIRE(b64 && b128 && b64 != b128 && again == b64);
    REQUIRE_INT_EQ(fk.loads() - loads0, 3);
    /* ... and a kernel built for one value refuses a launch with another. */
    pgrt_buf *buf = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 4, &buf), 0);
    pgrt_arg a = pgrt_arg_buf(buf);
    int n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_kernel_launch(b64, NULL, &w128, &a, 1), PGRT_EARGS);
    REQUIRE_CONTAINS(pgrt_last_message(), "built for width = 64");
    REQUIRE_INT_EQ(pgrt_kernel_launch(b64, NULL, &w64, &a, 1), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    REQUIRE_INT_EQ(fk.launch_at(n0)->block[0], 64);
    pgrt_buf_destroy(&buf);

    /* Pre-warm: the pipeline's kernels, then only hits. */
    pgrt_warm list[] = {{"squared_sum_reduce", NULL},
                        {"clip_scale_reduce", NULL},
                        {"gradient_clip_gpu_scale", NULL}};
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, list, 3), 0);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.misses - st0.misses, 5);
    uint64_t misses = st.misses;
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, list, 3), 0);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.misses, misses);
    pgrt_warm unknown[] = {{"no_such_kernel", NULL}};
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, unknown, 1), PGRT_ENOTFOUND);
    REQUIRE_CONTAINS(pgrt_last_message(), "no_such_kernel");
    pgrt_warm none[] = {{NULL, NULL}};
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, none, 1), PGRT_EINVAL);

    /* A descriptor whose target is above the device's. */
    pgk_desc high = baked;
    high.name = "high_test";
    high.min_target = PG_SM_100;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &high, NULL, &k1), PGRT_ETARGET);
    REQUIRE_CONTAINS(pgrt_last_message(), "high_test does not support sm_90");
    /* Descriptors the catalog would refuse are refused here too. */
    pgk_desc wrong = baked;
    wrong.name = "wrong_test";
    wrong.nknobs = PGK_MAX_KNOBS + 1;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &wrong, NULL, &k1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "wrong_test has 13 knobs; at most 12");
    wrong = baked;
    wrong.name = "wrong_test";
    wrong.build = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &wrong, NULL, &k1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "wrong_test has no build function");
}

typedef struct getter {
    pgrt_ctx *ctx;
    const pgk_desc *d;
    pgrt_kernel *k;
    int rc;
} getter;

static void *get_thread(void *arg)
{
    getter *g = arg;
    g->rc = pgrt_kernel_get(g->ctx, g->d, NULL, &g->k);
    return NULL;
}

/* Threads missing on the same key at once: one load, one miss, the rest
 * wait and hit. */
static void test_concurrent(pgrt_ctx *ctx)
{
    const pgk_desc *d = pgk_find("gradient_clip");
    REQUIRE(d != NULL);
    if (!d)
        return;
    pgrt_cache_stats st0, st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st0), 0);
    int loads0 = fk.loads();
    setenv("FAKECUDA_JIT_US", "50000", 1);
    enum { N = 8 };
    pthread_t th[N];
    getter g[N];
    for (int i = 0; i < N; i++) {
        g[i] = (getter){ctx, d, NULL, -1};
        REQUIRE_INT_EQ(pthread_create(&th[i], NULL, get_thread, &g[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    unsetenv("FAKECUDA_JIT_US");
    for (int i = 0; i < N; i++) {
        REQUIRE_INT_EQ(g[i].rc, 0);
        REQUIRE(g[i].k == g[0].k);
    }
    REQUIRE_INT_EQ(fk.loads() - loads0, 1);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.misses - st0.misses, 1);
    REQUIRE_INT_EQ(st.hits - st0.hits, N - 1);
    REQUIRE(st.jit_ms - st0.jit_ms >= 40.0);
}

static void test_launch(pgrt_ctx *ctx)
{
    pgrt_stream *s = NULL;
    pgrt_buf *g = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 1000, &g), 0);
    const pgk_desc *d = pgk_find("gradient_clip");
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, "n")] = 1000;

    int n0 = fk.launch_count();
    pgrt_arg a[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(1000)};
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, a, 3), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    const fakecuda_launch *l = fk.launch_at(n0);
    if (l) {
        REQUIRE_STR_EQ(l->name, "gradient_clip");
        REQUIRE_INT_EQ(l->grid[0], 1); /* one float4 a thread */
        REQUIRE_INT_EQ(l->grid[1], 1);
        REQUIRE_INT_EQ(l->block[0], 256);
        REQUIRE_INT_EQ(l->nparams, 3);
        REQUIRE_INT_EQ(l->params[0], pgrt_buf_ptr(g));
        float half = 0.5f;
        uint32_t hb;
        memcpy(&hb, &half, 4);
        REQUIRE_INT_EQ(l->sizes[1], 4);
        REQUIRE_INT_EQ(l->params[1], hb);
        REQUIRE_INT_EQ(l->params[2], 1000);
    }

    /* Refused before the driver sees them: nothing is recorded. */
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, a, 2), PGRT_EARGS);
    REQUIRE_CONTAINS(pgrt_last_message(), "gradient_clip takes 3 arguments");
    pgrt_arg wrong[3] = {pgrt_arg_buf(g), pgrt_arg_buf(g), pgrt_arg_u32(1000)};
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, wrong, 3), PGRT_EARGS);
    REQUIRE_CONTAINS(pgrt_last_message(), "argument 1 (scale): expected a f32 value");
    pgrt_arg bigger[3] = {pgrt_arg_buf(g), pgrt_arg_f32(0.5f), pgrt_arg_u32(2000)};
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, bigger, 3), PGRT_EARGS);
    REQUIRE_CONTAINS(pgrt_last_message(), "sized for knob n = 1000");
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "no_such_kernel", &kn, a, 3), PGRT_ENOTFOUND);
    kn.v[0] = 0;
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip", &kn, a, 3), PGRT_ERANGE);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);

    pgrt_buf_destroy(&g);
    pgrt_stream_destroy(&s);
}

static void test_modules(pgrt_ctx *ctx)
{
    char err[256];
    char *ptx = NULL;
    const pgk_desc *d = pgk_find("gradient_clip");
    REQUIRE_INT_EQ(pgk_emit(d, PG_SM_90, NULL, &ptx, NULL, err, sizeof err), 0);
    if (!ptx)
        return;
    pgrt_module *m = NULL;
    pgrt_kernel *k = NULL;
    int mods0 = fk.live_modules();
    REQUIRE_INT_EQ(pgrt_module_load(ctx, ptx, &m), 0);
    REQUIRE_INT_EQ(pgrt_module_kernel(m, d, &k), 0);
    REQUIRE(k != NULL);
    const pgk_desc *other = pgk_find("squared_sum_reduce");
    pgrt_kernel *k2 = NULL;
    REQUIRE_INT_EQ(pgrt_module_kernel(m, other, &k2), PGRT_ECUDA);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND: entry "
                                          "\"squared_sum_reduce\"");
    pgrt_module_destroy(&m);
    REQUIRE(m == NULL);
    REQUIRE_INT_EQ(fk.live_modules(), mods0);

    /* The JIT's error log, flattened to one line, is the message. */
    size_t len = strlen(ptx);
    char *broken = malloc(len + 32);
    memcpy(broken, ptx, len + 1);
    char *brace = strstr(broken, "{\n");
    REQUIRE(brace != NULL);
    if (brace)
        memcpy(brace, "{ BROKEN;", 9);
    REQUIRE_INT_EQ(pgrt_module_load(ctx, broken, &m), PGRT_EJIT);
    REQUIRE(m == NULL);
    REQUIRE_STR_EQ(pgrt_last_message(),
                   "cuLinkAddData: CUDA_ERROR_INVALID_PTX: ptxas application ptx input, "
                   "line 7; error   : Unknown symbol 'BROKEN'; ptxas fatal   : Ptx assembly "
                   "aborted due to errors");
    REQUIRE_INT_EQ(pgrt_last_cuda_error(), 218);

    /* A driver without the linker: cuModuleLoadDataEx, the same log. */
    setenv("FAKECUDA_HIDE", "cuLinkAddData", 1);
    pgrt_ctx *old = open_ctx();
    int ex0 = fk.ex_loads();
    REQUIRE_INT_EQ(pgrt_module_load(old, broken, &m), PGRT_EJIT);
    REQUIRE_STR_EQ(pgrt_last_message(),
                   "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: ptxas application ptx input, "
                   "line 7; error   : Unknown symbol 'BROKEN'; ptxas fatal   : Ptx assembly "
                   "aborted due to errors");
    REQUIRE_INT_EQ(pgrt_module_load(old, ptx, &m), 0);
    REQUIRE_INT_EQ(fk.ex_loads() - ex0, 1);
    pgrt_module_destroy(&m);
    pgrt_ctx_destroy(&old);
    unsetenv("FAKECUDA_HIDE");

    /* F-PTX-001 and the header run before the driver is asked. */
    int loads0 = fk.loads();
    char *other_target = malloc(len + 1);
    memcpy(other_target, ptx, len + 1);
    char *t = strstr(other_target, ".target sm_90");
    if (t)
        memcpy(t, ".target sm_80", 13);
    REQUIRE_INT_EQ(pgrt_module_load(ctx, other_target, &m), PGRT_ETARGET);
    REQUIRE_CONTAINS(pgrt_last_message(), "F-PTX-001 violated: PTX target sm_80 != device target "
                                          "sm_90");
    REQUIRE_INT_EQ(pgrt_module_load(ctx, ".entry k() { ret; }", &m), PGRT_EPTX);
    REQUIRE_INT_EQ(fk.loads(), loads0);
    free(other_target);
    free(broken);
    pgk_free(ptx);
}

/* The pipeline's launch sequence for the seed's per-layer LoRA buffers and
 * an empty one: N squared sums into disjoint slices of one partials buffer,
 * one reduction, N scalings reading the device scale. */
/* A deterministic pattern, large enough that max_norm 1 clips. */
static void clip_fill(pgrt_buf *const *g, const size_t *sizes, int nb, uint32_t seed)
{
    for (int i = 0; i < nb; i++) {
        if (!sizes[i])
            continue;
        float *h = malloc(sizes[i] * sizeof *h);
        REQUIRE(h != NULL);
        if (!h)
            return;
        for (size_t j = 0; j < sizes[i]; j++) {
            seed = seed * 1664525u + 1013904223u;
            h[j] = (float)(int32_t)(seed >> 8) / (float)(1 << 22);
        }
        REQUIRE_INT_EQ(pgrt_buf_upload(g[i], 0, h, sizes[i]), 0);
        free(h);
    }
}

/* The gradients of two sets and the results of two states, bit for bit. */
static void clip_same(pgrt_clip *c, pgrt_buf *const *a, pgrt_clip *ref, pgrt_buf *const *b,
                      const size_t *sizes, int nb, pgrt_stream *s)
{
    float r1[2], r2[2];
    REQUIRE_INT_EQ(pgrt_clip_result(c, s, &r1[0], &r1[1]), 0);
    REQUIRE_INT_EQ(pgrt_clip_result(ref, s, &r2[0], &r2[1]), 0);
    REQUIRE(memcmp(r1, r2, sizeof r1) == 0);
    REQUIRE(r1[0] < 1.0f);
    for (int i = 0; i < nb; i++) {
        if (!sizes[i])
            continue;
        float *x = malloc(sizes[i] * sizeof *x), *y = malloc(sizes[i] * sizeof *y);
        REQUIRE(x && y);
        if (x && y) {
            REQUIRE_INT_EQ(pgrt_buf_download(a[i], 0, x, sizes[i]), 0);
            REQUIRE_INT_EQ(pgrt_buf_download(b[i], 0, y, sizes[i]), 0);
            REQUIRE(memcmp(x, y, sizes[i] * sizeof *x) == 0);
        }
        free(x);
        free(y);
    }
}

/* A table entry of the _multi kernels, read from (fake) device memory. */
static void clip_entry_at(uint64_t table, uint32_t e, uint64_t *ptr, uint32_t *n, uint32_t *first)
{
    const unsigned char *t = (const unsigned char *)(uintptr_t)table + 16u * e;
    memcpy(ptr, t, 8);
    memcpy(n, t + 8, 4);
    memcpy(first, t + 12, 4);
}

/* The table's entries: the buffers of g in order, empty ones left out, the
 * first blocks prefix sums of the sum's (scale's) per-buffer grids. */
static void clip_check_table(uint64_t table, pgrt_buf *const *g, const size_t *sizes, int nb,
                             bool scale)
{
    uint32_t e = 0, first = 0;
    for (int i = 0; i < nb; i++) {
        if (!sizes[i])
            continue;
        uint64_t ptr;
        uint32_t n, fb;
        clip_entry_at(table, e++, &ptr, &n, &fb);
        REQUIRE_INT_EQ(ptr, pgrt_buf_ptr(g[i]));
        REQUIRE_INT_EQ(n, sizes[i]);
        REQUIRE_INT_EQ(fb, first);
        first += scale ? (uint32_t)((sizes[i] + 1023) / 1024)
                       : pgk_squared_sum_num_blocks((uint32_t)sizes[i]);
    }
}

/* The multi-tensor path: three launches over a device table, results bit
 * for bit those of the per-buffer launches; the table follows the buffers
 * outside capture, a capture with other buffers takes the per-buffer
 * launches, and a captured table outlives later changes. */
static void test_clip_multi(pgrt_ctx *ctx)
{
    enum { NB = 7, LIVE = NB - 1 };
    size_t sizes[NB] = {16 * 1536, 1536 * 16, 0, 256 * 16, 1536, 1531, 5};
    pgrt_clip *c = NULL, *ref = NULL;
    REQUIRE_INT_EQ(pgrt_clip_create(ctx, sizes, NB, &c), 0);
    REQUIRE_INT_EQ(pgrt_clip_create(ctx, sizes, NB, &ref), 0);
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    if (!c || !ref || !s) {
        pgrt_clip_destroy(&c);
        pgrt_clip_destroy(&ref);
        pgrt_stream_destroy(&s);
        return;
    }
    REQUIRE_INT_EQ(pgrt_clip_set_multi(c, true), 0);
    REQUIRE_INT_EQ(pgrt_clip_set_multi(ref, false), 0);
    REQUIRE(pgrt_clip_multi(c) && !pgrt_clip_multi(ref));
    REQUIRE_INT_EQ(pgrt_clip_set_multi(NULL, true), PGRT_EINVAL);
    REQUIRE(!pgrt_clip_multi(NULL));

    pgrt_buf *a[NB] = {0}, *b[NB] = {0}, *a2[NB] = {0}, *b2[NB] = {0};
    for (int i = 0; i < NB; i++) {
        if (!sizes[i])
            continue;
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &a[i]), 0);
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &b[i]), 0);
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &a2[i]), 0);
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &b2[i]), 0);
    }
    clip_fill(a, sizes, NB, 1);
    clip_fill(b, sizes, NB, 1);

    uint32_t total = 0, total_apply = 0;
    for (int i = 0; i < NB; i++)
        if (sizes[i]) {
            total += pgk_squared_sum_num_blocks((uint32_t)sizes[i]);
            total_apply += (uint32_t)((sizes[i] + 1023) / 1024);
        }
    int n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, a, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 3);
    uint64_t table = 0;
    if (fk.launch_count() - n0 == 3) {
        const fakecuda_launch *sq = fk.launch_at(n0), *red = fk.launch_at(n0 + 1), *ap = fk.launch_at(n0 + 2);
        REQUIRE_STR_EQ(sq->name, "squared_sum_reduce_multi");
        REQUIRE_INT_EQ(sq->grid[0], total);
        REQUIRE_INT_EQ(sq->block[0], 256);
        REQUIRE_INT_EQ(sq->params[1], LIVE);
        REQUIRE_INT_EQ(sq->params[2], red->params[0]);
        REQUIRE_STR_EQ(red->name, "clip_scale_reduce");
        REQUIRE_INT_EQ(red->params[1], total);
        REQUIRE_STR_EQ(ap->name, "gradient_clip_gpu_scale_multi");
        REQUIRE_INT_EQ(ap->grid[0], total_apply);
        REQUIRE_INT_EQ(ap->block[0], 256);
        REQUIRE_INT_EQ(ap->params[0], sq->params[0] + 16u * LIVE);
        REQUIRE_INT_EQ(ap->params[1], LIVE);
        REQUIRE_INT_EQ(ap->params[2], pgrt_buf_ptr(pgrt_clip_result_buf(c)));
        REQUIRE(sq->stream == red->stream && ap->stream == red->stream);
        table = sq->params[0];
        clip_check_table(table, a, sizes, NB, false);
        clip_check_table(table + 16u * LIVE, a, sizes, NB, true);
    }
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(ref, s, b, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 2 * LIVE + 1);
    clip_same(c, a, ref, b, sizes, NB, s);

    /* Other buffers outside capture: a table of their own. */
    clip_fill(a2, sizes, NB, 2);
    clip_fill(b2, sizes, NB, 2);
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, a2, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 3);
    uint64_t table2 = fk.launch_at(n0)->params[0];
    REQUIRE(table2 != table);
    clip_check_table(table2, a2, sizes, NB, false);
    clip_check_table(table2 + 16u * LIVE, a2, sizes, NB, true);
    clip_check_table(table, a, sizes, NB, false);
    REQUIRE_INT_EQ(pgrt_clip_run(ref, s, b2, NB, 1.0f), 0);
    clip_same(c, a2, ref, b2, sizes, NB, s);

    /* Captured with the table's buffers: the three launches. */
    pgrt_graph *g1 = NULL, *g2 = NULL, *r1 = NULL;
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, a2, NB, 1.0f), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g1), 0);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_clip_run(ref, s, b2, NB, 1.0f), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &r1), 0);

    /* The first buffers again: their table, not uploaded again. */
    clip_fill(a, sizes, NB, 3);
    clip_fill(b, sizes, NB, 3);
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, a, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 3);
    REQUIRE_INT_EQ(fk.launch_at(n0)->params[0], table);
    clip_check_table(table2, a2, sizes, NB, false);
    REQUIRE_INT_EQ(pgrt_clip_run(ref, s, b, NB, 1.0f), 0);
    clip_same(c, a, ref, b, sizes, NB, s);

    /* Captured with buffers no table holds: the per-buffer launches. */
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, b, NB, 1.0f), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g2), 0);
    clip_check_table(table, a, sizes, NB, false);
    clip_check_table(table2, a2, sizes, NB, false);
    /* (b through c, checked against b2 through ref) */
    clip_fill(b, sizes, NB, 4);
    clip_fill(b2, sizes, NB, 4);
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_graph_launch(g2, s), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 2 * LIVE + 1);
    REQUIRE(fk.launch_count() > n0 && fk.launch_at(n0)->replayed &&
            !strcmp(fk.launch_at(n0)->name, "squared_sum_reduce"));
    REQUIRE_INT_EQ(pgrt_graph_launch(r1, s), 0);
    clip_same(c, b, ref, b2, sizes, NB, s);

    /* The first graph: three launches on the table it captured. */
    clip_fill(a2, sizes, NB, 5);
    clip_fill(b2, sizes, NB, 5);
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_graph_launch(g1, s), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 3);
    if (fk.launch_count() - n0 == 3) {
        REQUIRE(fk.launch_at(n0)->replayed);
        REQUIRE_STR_EQ(fk.launch_at(n0)->name, "squared_sum_reduce_multi");
        REQUIRE_INT_EQ(fk.launch_at(n0)->params[0], table2);
    }
    REQUIRE_INT_EQ(pgrt_graph_launch(r1, s), 0);
    clip_same(c, a2, ref, b2, sizes, NB, s);

    /* The per-buffer path on request. */
    REQUIRE_INT_EQ(pgrt_clip_set_multi(c, false), 0);
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, a, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 2 * LIVE + 1);

    /* Prepared before the first capture: the capture records the multi
     * launches; preparing while capturing is refused. */
    {
        pgrt_clip *p = NULL;
        pgrt_graph *gp = NULL;
        REQUIRE_INT_EQ(pgrt_clip_create(ctx, sizes, NB, &p), 0);
        REQUIRE_INT_EQ(pgrt_clip_set_multi(p, true), 0);
        REQUIRE_INT_EQ(pgrt_clip_prepare(p, s, a, NB - 1), PGRT_EINVAL);
        REQUIRE_INT_EQ(pgrt_clip_prepare(NULL, s, a, NB), PGRT_EINVAL);
        n0 = fk.launch_count();
        REQUIRE_INT_EQ(pgrt_clip_prepare(p, s, a, NB), 0);
        REQUIRE_INT_EQ(fk.launch_count(), n0);
        REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
        REQUIRE_INT_EQ(pgrt_clip_prepare(p, s, a2, NB), PGRT_ECAPTURE);
        REQUIRE_INT_EQ(pgrt_clip_run(p, s, a, NB, 1.0f), 0);
        REQUIRE_INT_EQ(pgrt_capture_end(s, &gp), 0);
        n0 = fk.launch_count();
        REQUIRE_INT_EQ(pgrt_graph_launch(gp, s), 0);
        REQUIRE_INT_EQ(fk.launch_count() - n0, 3);
        if (fk.launch_count() - n0 == 3)
            clip_check_table(fk.launch_at(n0)->params[0], a, sizes, NB, false);
        pgrt_graph_destroy(&gp);
        pgrt_clip_destroy(&p);
    }

    /* Many sets of buffers (views of one allocation at shifted offsets):
     * a table each while there is room; once every table is captured, a new
     * set takes the per-buffer launches, a known one its table. */
    {
        enum { SETS = 65 };
        size_t span = 0;
        for (int i = 0; i < NB; i++)
            span += sizes[i];
        pgrt_buf *big = NULL, *v[SETS][NB];
        memset(v, 0, sizeof v);
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, span + SETS, &big), 0);
        REQUIRE_INT_EQ(pgrt_buf_memset(big, 0), 0);
        for (int k = 0; big && k < SETS; k++)
            for (size_t i = 0, off = (size_t)k; i < NB; off += sizes[i], i++)
                if (sizes[i])
                    REQUIRE_INT_EQ(pgrt_buf_view(big, off, sizes[i], &v[k][i]), 0);
        REQUIRE_INT_EQ(pgrt_clip_set_multi(c, true), 0);
        pgrt_clip *many = NULL;
        REQUIRE_INT_EQ(pgrt_clip_create(ctx, sizes, NB, &many), 0);
        REQUIRE_INT_EQ(pgrt_clip_set_multi(many, true), 0);
        int multi_runs = 0;
        for (int k = 0; many && k < SETS - 1; k++) {
            n0 = fk.launch_count();
            REQUIRE_INT_EQ(pgrt_clip_run(many, s, v[k], NB, 1.0f), 0);
            multi_runs += fk.launch_count() - n0 == 3;
            pgrt_graph *gk = NULL;
            REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
            REQUIRE_INT_EQ(pgrt_clip_run(many, s, v[k], NB, 1.0f), 0);
            REQUIRE_INT_EQ(pgrt_capture_end(s, &gk), 0);
            n0 = fk.launch_count();
            REQUIRE_INT_EQ(pgrt_graph_launch(gk, s), 0);
            multi_runs += fk.launch_count() - n0 == 3;
            pgrt_graph_destroy(&gk);
        }
        REQUIRE_INT_EQ(multi_runs, 2 * (SETS - 1));
        n0 = fk.launch_count();
        REQUIRE_INT_EQ(pgrt_clip_run(many, s, v[SETS - 1], NB, 1.0f), 0);
        REQUIRE_INT_EQ(fk.launch_count() - n0, 2 * LIVE + 1);
        n0 = fk.launch_count();
        REQUIRE_INT_EQ(pgrt_clip_run(many, s, v[3], NB, 1.0f), 0);
        REQUIRE_INT_EQ(fk.launch_count() - n0, 3);
        pgrt_clip_destroy(&many);
        for (int k = 0; k < SETS; k++)
            for (int i = 0; i < NB; i++)
                pgrt_buf_destroy(&v[k][i]);
        pgrt_buf_destroy(&big);
    }

    pgrt_graph_destroy(&g1);
    pgrt_graph_destroy(&g2);
    pgrt_graph_destroy(&r1);
    for (int i = 0; i < NB; i++) {
        pgrt_buf_destroy(&a[i]);
        pgrt_buf_destroy(&b[i]);
        pgrt_buf_destroy(&a2[i]);
        pgrt_buf_destroy(&b2[i]);
    }
    pgrt_clip_destroy(&c);
    pgrt_clip_destroy(&ref);
    pgrt_stream_destroy(&s);
}

static void test_clip(pgrt_ctx *ctx)
{
    enum { NB = 7 };
    size_t sizes[NB] = {16 * 1536, 1536 * 16, 16 * 1536, 256 * 16, 1536, 1536, 0};
    pgrt_clip *c = NULL;
    REQUIRE_INT_EQ(pgrt_clip_create(ctx, sizes, NB, &c), 0);
    if (!c) {
        fprintf(stderr, "%s\n", pgrt_last_message());
        return;
    }
    REQUIRE_INT_EQ(pgrt_clip_set_multi(c, false), 0);
    REQUIRE(!pgrt_clip_multi(c));
    uint32_t total = 0;
    for (int i = 0; i < NB; i++)
        total += sizes[i] ? pgk_squared_sum_num_blocks((uint32_t)sizes[i]) : 0;
    REQUIRE_INT_EQ(pgrt_clip_partials(c), total);
    REQUIRE_INT_EQ(total, 24 + 24 + 24 + 4 + 2 + 2);
    float scale = 0, norm = -1;
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    REQUIRE_INT_EQ(pgrt_clip_result(c, s, &scale, &norm), 0);
    REQUIRE(scale == 1.0f && norm == 0.0f);

    pgrt_buf *g[NB], *one = NULL;
    for (int i = 0; i < NB - 1; i++) {
        g[i] = NULL;
        REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &g[i]), 0);
    }
    /* The empty gradient has no buffer; a non-empty one there is refused. */
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 1, &one), 0);
    g[NB - 1] = one;
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB, 1.0f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "grads[6] is 1 x f32; the state expects 0 x f32");
    g[NB - 1] = NULL;
    pgrt_buf_destroy(&one);

    int n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 2 * (NB - 1) + 1);
    const fakecuda_launch *red = fk.launch_at(n0 + NB - 1);
    REQUIRE(red != NULL);
    if (red && fk.launch_count() - n0 == 2 * (NB - 1) + 1) {
        REQUIRE_STR_EQ(red->name, "clip_scale_reduce");
        REQUIRE_INT_EQ(red->grid[0], 1);
        REQUIRE_INT_EQ(red->params[1], total);
        float unit = 1.0f;
        uint32_t ob;
        memcpy(&ob, &unit, 4);
        REQUIRE_INT_EQ(red->params[2], ob);
        REQUIRE_INT_EQ(red->params[3], pgrt_buf_ptr(pgrt_clip_result_buf(c)));
        uint64_t partials = red->params[0];
        uint32_t off = 0;
        for (int i = 0; i < NB - 1; i++) {
            const fakecuda_launch *sq = fk.launch_at(n0 + i);
            const fakecuda_launch *ap = fk.launch_at(n0 + NB + i);
            uint32_t n = (uint32_t)sizes[i];
            REQUIRE_STR_EQ(sq->name, "squared_sum_reduce");
            REQUIRE_INT_EQ(sq->params[0], pgrt_buf_ptr(g[i]));
            REQUIRE_INT_EQ(sq->params[1], partials + 4u * off);
            REQUIRE_INT_EQ(sq->params[2], n);
            REQUIRE_INT_EQ(sq->grid[0], pgk_squared_sum_num_blocks(n));
            REQUIRE_INT_EQ(sq->block[0], 256);
            REQUIRE(sq->stream == red->stream);
            REQUIRE_STR_EQ(ap->name, "gradient_clip_gpu_scale");
            REQUIRE_INT_EQ(ap->params[0], pgrt_buf_ptr(g[i]));
            REQUIRE_INT_EQ(ap->params[1], red->params[3]);
            REQUIRE_INT_EQ(ap->params[2], n);
            REQUIRE_INT_EQ(ap->grid[0], (n + 1023) / 1024); /* one float4 a thread */
            REQUIRE(ap->stream == red->stream);
            off += pgk_squared_sum_num_blocks(n);
        }
        REQUIRE_INT_EQ(off, total);
    }

    /* Bad steps are refused before any launch. */
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB - 1, 1.0f), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB, 0.0f), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB, NAN), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB, INFINITY), PGRT_EINVAL);
    pgrt_buf *swapped[NB];
    memcpy(swapped, g, sizeof swapped);
    swapped[0] = g[3];
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, swapped, NB, 1.0f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "grads[0] is 4096 x f32; the state expects 24576 x f32");
    REQUIRE_INT_EQ(fk.launch_count(), n0);

    /* Captured: nothing runs until the graph is launched, then all of it. */
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    bool cap = false;
    REQUIRE_INT_EQ(pgrt_stream_is_capturing(s, &cap), 0);
    REQUIRE(cap);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), PGRT_ESTATE);
    REQUIRE_INT_EQ(pgrt_clip_run(c, s, g, NB, 1.0f), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    pgrt_graph *graph = NULL;
    REQUIRE_INT_EQ(pgrt_capture_end(s, &graph), 0);
    pgrt_graph *none_graph = graph;
    REQUIRE_INT_EQ(pgrt_capture_end(s, &none_graph), PGRT_ESTATE);
    REQUIRE(none_graph == NULL);
    REQUIRE_INT_EQ(pgrt_graph_launch(graph, s), 0);
    REQUIRE_INT_EQ(pgrt_graph_launch(graph, s), 0);
    REQUIRE_INT_EQ(fk.launch_count() - n0, 2 * (2 * (NB - 1) + 1));
    const fakecuda_launch *last = fk.launch_at(fk.launch_count() - 1);
    REQUIRE(last && last->replayed && !strcmp(last->name, "gradient_clip_gpu_scale"));
    pgrt_graph_destroy(&graph);
    REQUIRE(graph == NULL);

    for (int i = 0; i < NB; i++)
        pgrt_buf_destroy(&g[i]);
    pgrt_clip_destroy(&c);
    REQUIRE(c == NULL);
    pgrt_stream_destroy(&s);

    size_t none[2] = {0, 0};
    REQUIRE_INT_EQ(pgrt_clip_create(ctx, none, 2, &c), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_clip_create(ctx, none, 0, &c), PGRT_EINVAL);
    size_t huge[1] = {(size_t)UINT32_MAX + 1};
    REQUIRE_INT_EQ(pgrt_clip_create(ctx, huge, 1, &c), PGRT_ERANGE);
    REQUIRE(c == NULL);
}

/* Loading while a capture is open is refused; cached kernels launch. */
static void test_capture_refusal(pgrt_ctx *ctx)
{
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    pgk_knobs w256;
    pgk_knobs_default(&baked, &w256);
    w256.v[0] = 256;
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &baked, &w256, &k), PGRT_ECAPTURE);
    REQUIRE_CONTAINS(pgrt_last_message(), "baked_test (sm_90) is not loaded and a stream is "
                                          "capturing");
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_prewarm");
    pgrt_module *m = NULL;
    REQUIRE_INT_EQ(pgrt_module_load(ctx, "whatever", &m), PGRT_ECAPTURE);
    /* Hits are fine. */
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), 0);
    REQUIRE_INT_EQ(pgrt_capture_abort(s), 0);
    REQUIRE_INT_EQ(pgrt_capture_abort(s), 0);
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &baked, &w256, &k), 0);

    /* A capture left open is closed by destroying its stream. */
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    pgrt_stream_destroy(&s);
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &baked, NULL, &k), 0);
}

/* Compute capability 12: the linker without JIT options; without the
 * linker, plain cuModuleLoadData and its error message. */
static void test_direct_load(void)
{
    setenv("FAKECUDA_CC", "120", 1);
    pgrt_ctx *ctx = open_ctx();
    pgrt_device_info info;
    REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
    REQUIRE(info.direct_load);
    REQUIRE_INT_EQ(info.target, PG_SM_120);
    int direct0 = fk.direct_loads(), loads0 = fk.loads(), ex0 = fk.ex_loads();
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), 0);
    REQUIRE_INT_EQ(fk.direct_loads(), direct0);
    REQUIRE_INT_EQ(fk.loads() - loads0, 1); /* one JIT, by the linker */
    REQUIRE_INT_EQ(fk.ex_loads(), ex0);
    pgrt_module *m = NULL;
    static const char broken[] = ".version 8.7\n.target sm_120\n.address_size 64\nBROKEN";
    REQUIRE_INT_EQ(pgrt_module_load(ctx, broken, &m), PGRT_EJIT);
    /* No log buffers were passed: none comes back. */
    REQUIRE_CONTAINS(pgrt_last_message(), "cuLinkAddData: CUDA_ERROR_INVALID_PTX: (the JIT left no "
                                          "log)");
    pgrt_ctx_destroy(&ctx);

    setenv("FAKECUDA_HIDE", "cuLinkCreate", 1);
    ctx = open_ctx();
    direct0 = fk.direct_loads();
    loads0 = fk.loads();
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), 0);
    REQUIRE_INT_EQ(fk.direct_loads() - direct0, 1);
    REQUIRE_INT_EQ(fk.loads(), loads0);
    REQUIRE_INT_EQ(pgrt_module_load(ctx, broken, &m), PGRT_EJIT);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuModuleLoadData: CUDA_ERROR_INVALID_PTX: direct load "
                                          "on compute capability 12.0");
    pgrt_ctx_destroy(&ctx);
    unsetenv("FAKECUDA_HIDE");

    /* A minor the table lacks runs the family's PTX. */
    setenv("FAKECUDA_CC", "88", 1);
    ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_ctx_target(ctx), PG_SM_87);
    pgrt_ctx_destroy(&ctx);
    setenv("FAKECUDA_CC", "61", 1);
    pgrt_ctx_params p = {fk.path, 0};
    REQUIRE_INT_EQ(pgrt_ctx_create(&ctx, &p), PGRT_ETARGET);
    REQUIRE_CONTAINS(pgrt_last_message(), "compute capability 6.1");
    unsetenv("FAKECUDA_CC");
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA");
    fk.reset();

    pgrt_ctx *ctx = open_ctx();
    test_device(ctx);
    test_buffers(ctx);
    test_events(ctx);
    test_cache(ctx);
    test_concurrent(ctx);
    test_launch(ctx);
    test_modules(ctx);
    test_clip(ctx);
    test_clip_multi(ctx);
    test_capture_refusal(ctx);
    pgrt_ctx_destroy(&ctx);
    REQUIRE(ctx == NULL);
    /* The context took its modules with it. */
    REQUIRE_INT_EQ(fk.live_modules(), 0);
    REQUIRE_INT_EQ(fk.live_allocs(), 0);
    test_direct_load();
    REQUIRE_INT_EQ(fk.live_modules(), 0);
    fake_fixture_close(&fk);
    TEST_DONE();
}
