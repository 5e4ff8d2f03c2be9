/* SPDX-License-Identifier: MIT */
/*
 * The runtime on a real driver: broken PTX gives the JIT's log line in the
 * message, the header checks refuse before loading, buffers and events
 * work, loading during capture is refused, and several threads share the
 * cache (one load) and launch on their own streams.
 */
#include "gpu_util.h"
#include "test.h"

#include <pthread.h>

/* Insert `line` after the first "{" line of the kernel body; returns the
 * new text and the 1-based line number the insertion got. */
static char *insert_line(const char *ptx, const char *line, int *lineno)
{
    const char *brace = strstr(ptx, "\n{\n");
    if (!brace)
        return NULL;
    size_t head = (size_t)(brace - ptx) + 3, len = strlen(ptx), add = strlen(line);
    char *out = malloc(len + add + 2);
    memcpy(out, ptx, head);
    memcpy(out + head, line, add);
    out[head + add] = '\n';
    memcpy(out + head + add + 1, ptx + head, len - head + 1);
    int n = 1;
    for (size_t i = 0; i < head; i++)
        n += ptx[i] == '\n';
    *lineno = n;
    return out;
}

static void test_jit_errors(pgrt_ctx *ctx)
{
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    const pgk_desc *d = pgk_find("gradient_clip");
    char err[256], *ptx = NULL;
    GPU_CHECK(pgk_emit(d, info.target, NULL, &ptx, NULL, err, sizeof err) ? PGRT_EKERNEL : 0);

    pgrt_module *m = NULL;
    GPU_CHECK(pgrt_module_load(ctx, ptx, &m));
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_module_kernel(m, d, &k), 0);
    pgrt_module_destroy(&m);

    /* An instruction ptxas does not know. */
    int line = 0;
    char *broken = insert_line(ptx, "\tbogus.instruction.u32 %r1, %r1;", &line);
    REQUIRE(broken != NULL);
    if (broken) {
        int rc = pgrt_module_load(ctx, broken, &m);
        const char *msg = pgrt_last_message();
        fprintf(stderr, "broken PTX (line %d): %s: %s\n", line, pgrt_err_name(rc), msg);
        REQUIRE(m == NULL);
        /* The JIT goes through the driver's linker (cuLinkAddData) where it
         * has one, else cuModuleLoadDataEx (cuModuleLoadData on a "direct"
         * device): the message names whichever call refused the PTX. */
        bool linker = strstr(msg, "cuLinkAddData: ") != NULL;
        if (info.direct_load) {
            REQUIRE(rc != 0);
            REQUIRE(linker || strstr(msg, "cuModuleLoadData: ") != NULL);
        } else {
            REQUIRE_INT_EQ(rc, PGRT_EJIT);
            REQUIRE_CONTAINS(msg, linker ? "cuLinkAddData: CUDA_ERROR_INVALID_PTX: "
                                         : "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: ");
            char want[64];
            snprintf(want, sizeof want, "line %d", line);
            REQUIRE_CONTAINS(msg, want);
            REQUIRE_CONTAINS(msg, "error");
            REQUIRE_INT_EQ(pgrt_last_cuda_error(), 218);
        }
        free(broken);
    }

    /* F-PTX-001: another target is refused before the driver sees it. */
    pg_target other = info.target == PG_SM_80 ? PG_SM_86 : PG_SM_80;
    char *ptx_other = NULL;
    GPU_CHECK(pgk_emit(d, other, NULL, &ptx_other, NULL, err, sizeof err) ? PGRT_EKERNEL : 0);
    REQUIRE_INT_EQ(pgrt_module_load(ctx, ptx_other, &m), PGRT_ETARGET);
    REQUIRE_CONTAINS(pgrt_last_message(), "F-PTX-001");
    fprintf(stderr, "other target: %s\n", pgrt_last_message());
    pgk_free(ptx_other);

    /* An ISA no driver knows. */
    char *v = strstr(ptx, ".version ");
    if (v) {
        char *future = malloc(strlen(ptx) + 1);
        strcpy(future, ptx);
        memcpy(future + (v - ptx), ".version 9.9", 12);
        REQUIRE_INT_EQ(pgrt_module_load(ctx, future, &m), PGRT_EISA);
        fprintf(stderr, "future ISA: %s\n", pgrt_last_message());
        free(future);
    }
    pgk_free(ptx);
}

static void test_buffers_events(pgrt_ctx *ctx, pgrt_stream *s)
{
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.5f;
    pgrt_buf *a = NULL, *b = NULL, *v = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, N, &a));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, N, &b));
    GPU_CHECK(pgrt_buf_upload_async(a, 0, x, N, s));
    GPU_CHECK(pgrt_buf_copy_async(b, 0, a, 0, N, s));
    GPU_CHECK(pgrt_buf_view(b, 100, 50, &v));
    GPU_CHECK(pgrt_buf_fill32_async(v, f32_bits(-1.0f), s));
    GPU_CHECK(pgrt_buf_download_async(b, 0, y, N, s));
    GPU_CHECK(pgrt_stream_sync(s));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += y[i] != (i >= 100 && i < 150 ? -1.0f : x[i]);
    REQUIRE_INT_EQ(bad, 0);
    GPU_CHECK(pgrt_buf_memset(a, 0));
    GPU_CHECK(pgrt_buf_download(a, N - 4, y, 4));
    REQUIRE(y[0] == 0.0f && y[3] == 0.0f);
    REQUIRE_INT_EQ(pgrt_buf_download(a, N - 3, y, 4), PGRT_ERANGE);

    pgrt_event *e0 = NULL, *e1 = NULL;
    GPU_CHECK(pgrt_event_create(ctx, &e0));
    GPU_CHECK(pgrt_event_create(ctx, &e1));
    GPU_CHECK(pgrt_event_record(e0, s));
    for (int i = 0; i < 10; i++)
        GPU_CHECK(pgrt_buf_copy_async(b, 0, a, 0, N, s));
    GPU_CHECK(pgrt_event_record(e1, s));
    GPU_CHECK(pgrt_event_sync(e1));
    float ms = -1;
    GPU_CHECK(pgrt_event_elapsed_ms(e0, e1, &ms));
    REQUIRE(ms > 0.0f);
    size_t fr = 0, tot = 0;
    GPU_CHECK(pgrt_ctx_mem_info(ctx, &fr, &tot));
    REQUIRE(fr > 0 && tot >= fr);
    fprintf(stderr, "buffers ok; 10 copies of 256 KiB took %.3f ms; %zu of %zu MiB free\n",
            (double)ms, fr >> 20, tot >> 20);
    pgrt_event_destroy(&e0);
    pgrt_event_destroy(&e1);
    pgrt_buf_destroy(&v);
    pgrt_buf_destroy(&a);
    pgrt_buf_destroy(&b);
    free(x);
    free(y);
}

typedef struct worker {
    pgrt_ctx *ctx;
    int id;
    pgrt_kernel *k;
    int rc, wrong;
    char msg[512];
} worker;

/* A thread that gets a kernel (racing the others for the first load), then
 * scales its own buffer on its own stream and checks the result. */
static void *work(void *arg)
{
    worker *w = arg;
    pgrt_stream *s = NULL;
    pgrt_buf *b = NULL;
    enum { N = 10000 };
    float *h = malloc(N * sizeof *h);
    const pgk_desc *d = pgk_find("gradient_clip");
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, "n")] = N;
    float sc = 0.5f + (float)w->id;
    if ((w->rc = pgrt_kernel_get(w->ctx, d, &kn, &w->k)) ||
        (w->rc = pgrt_stream_create(w->ctx, &s)) ||
        (w->rc = pgrt_buf_alloc(w->ctx, PG_F32, N, &b)))
        goto out;
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 97);
    pgrt_arg a[3] = {pgrt_arg_buf(b), pgrt_arg_f32(sc), pgrt_arg_u32(N)};
    if ((w->rc = pgrt_buf_upload_async(b, 0, h, N, s)) ||
        (w->rc = pgrt_kernel_launch(w->k, s, &kn, a, 3)) ||
        (w->rc = pgrt_buf_download_async(b, 0, h, N, s)) || (w->rc = pgrt_stream_sync(s)))
        goto out;
    for (int i = 0; i < N; i++)
        w->wrong += h[i] != (float)(i % 97) * sc;
out:
    if (w->rc)
        snprintf(w->msg, sizeof w->msg, "%s", pgrt_last_message());
    pgrt_buf_destroy(&b);
    pgrt_stream_destroy(&s);
    free(h);
    return NULL;
}

static void test_threads(pgrt_ctx *ctx)
{
    pgrt_cache_stats st0, st;
    GPU_CHECK(pgrt_cache_stats_get(ctx, &st0));
    enum { T = 8 };
    pthread_t th[T];
    worker w[T];
    for (int i = 0; i < T; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].ctx = ctx;
        w[i].id = i;
        REQUIRE_INT_EQ(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++) {
        if (w[i].rc)
            TEST_FAIL_("thread %d: %s: %s", i, pgrt_err_name(w[i].rc), w[i].msg);
        REQUIRE_INT_EQ(w[i].wrong, 0);
        REQUIRE(w[i].k == w[0].k);
    }
    GPU_CHECK(pgrt_cache_stats_get(ctx, &st));
    REQUIRE_INT_EQ(st.misses - st0.misses, 1);
    REQUIRE_INT_EQ(st.hits - st0.hits, T - 1);
    fprintf(stderr, "threads: %d threads, 1 load (%.2f ms JIT), %llu hits\n", T,
            st.jit_ms - st0.jit_ms, (unsigned long long)(st.hits - st0.hits));
}

static void test_capture(pgrt_ctx *ctx, pgrt_stream *s)
{
    /* Not loaded yet: refused while the stream captures. */
    pgrt_buf *b = NULL, *sc = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, 1000, &b));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, 1, &sc));
    const pgk_desc *d = pgk_find("gradient_clip_gpu_scale");
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, "n")] = 1000;
    pgrt_arg a[3] = {pgrt_arg_buf(b), pgrt_arg_buf(sc), pgrt_arg_u32(1000)};
    GPU_CHECK(pgrt_capture_begin(s));
    REQUIRE_INT_EQ(pgrt_launch(ctx, s, "gradient_clip_gpu_scale", &kn, a, 3), PGRT_ECAPTURE);
    fprintf(stderr, "capture: %s\n", pgrt_last_message());
    GPU_CHECK(pgrt_capture_abort(s));

    /* Pre-warmed, the same launch captures and replays. */
    pgrt_warm list[] = {{"gradient_clip_gpu_scale", &kn}, {"squared_sum_reduce", NULL},
                        {"clip_scale_reduce", NULL}, {"gradient_clip", NULL}};
    GPU_CHECK(pgrt_prewarm(ctx, list, 4));
    float half = 0.5f;
    float *h = malloc(1000 * sizeof *h);
    for (int i = 0; i < 1000; i++)
        h[i] = 2.0f;
    GPU_CHECK(pgrt_buf_upload(b, 0, h, 1000));
    GPU_CHECK(pgrt_buf_upload(sc, 0, &half, 1));
    pgrt_graph *g = NULL;
    GPU_CHECK(pgrt_capture_begin(s));
    GPU_CHECK(pgrt_launch(ctx, s, "gradient_clip_gpu_scale", &kn, a, 3));
    GPU_CHECK(pgrt_capture_end(s, &g));
    GPU_CHECK(pgrt_graph_launch(g, s));
    GPU_CHECK(pgrt_graph_launch(g, s));
    GPU_CHECK(pgrt_stream_sync(s));
    GPU_CHECK(pgrt_buf_download(b, 0, h, 1000));
    REQUIRE(h[0] == 0.5f && h[999] == 0.5f);

    /* A synchronous call inside a capture invalidates it; the error says so
     * and the stream leaves capture mode. */
    GPU_CHECK(pgrt_capture_begin(s));
    GPU_CHECK(pgrt_launch(ctx, s, "gradient_clip_gpu_scale", &kn, a, 3));
    int rc = pgrt_stream_sync(s);
    fprintf(stderr, "sync during capture: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    REQUIRE(rc != 0);
    pgrt_graph *g2 = NULL;
    rc = pgrt_capture_end(s, &g2);
    fprintf(stderr, "end of invalidated capture: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    REQUIRE(rc != 0 && g2 == NULL);
    bool cap = true;
    GPU_CHECK(pgrt_stream_is_capturing(s, &cap));
    REQUIRE(!cap);

    pgrt_graph_destroy(&g);
    pgrt_buf_destroy(&b);
    pgrt_buf_destroy(&sc);
    free(h);
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    test_threads(ctx);
    test_jit_errors(ctx);
    test_buffers_events(ctx, s);
    test_capture(ctx, s);
    pgrt_cache_stats st;
    GPU_CHECK(pgrt_cache_stats_get(ctx, &st));
    fprintf(stderr, "cache: %llu hits, %llu misses, %zu modules, emit %.2f ms, JIT %.2f ms\n",
            (unsigned long long)st.hits, (unsigned long long)st.misses, st.modules, st.emit_ms,
            st.jit_ms);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
