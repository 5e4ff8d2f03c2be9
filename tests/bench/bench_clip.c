/* SPDX-License-Identifier: MIT */
/*
 * Clip pipeline timings, with CUDA events, medians of many runs:
 *
 *  - device-to-device copy bandwidth (cuMemcpyDtoD of 1 GiB, bytes read
 *    plus bytes written), measured in the same run as the floor's unit;
 *  - the 350M-parameter model's clip step against the 3-pass memory floor
 *    (squared sums read the gradients, the scaling reads and writes them:
 *    12 bytes a parameter), eager and as a graph, and the step that finds
 *    nothing to clip (one read pass);
 *  - the seed's per-layer LoRA clip (13 launches) and a 28-layer loop of
 *    them, eager and graphed;
 *  - the same steps on the multi-tensor path (3 launches a step).
 *
 * A figure, not a test: it fails only when something does not run.
 * --quick: fewer repetitions.
 */
#include "gpu_util.h"

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static float minimum(const float *v, int n)
{
    float m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

typedef struct timer {
    pgrt_event *a, *b;
    pgrt_stream *s;
} timer;

static void t_start(timer *t) { GPU_CHECK(pgrt_event_record(t->a, t->s)); }
static float t_stop(timer *t)
{
    float ms = 0;
    GPU_CHECK(pgrt_event_record(t->b, t->s));
    GPU_CHECK(pgrt_event_sync(t->b));
    GPU_CHECK(pgrt_event_elapsed_ms(t->a, t->b, &ms));
    return ms;
}

/* A model's gradients: one allocation viewed as its buffers, plus a copy
 * of the original values on the device to restore from. */
typedef struct model {
    size_t nbuf, total;
    pgrt_buf *all, *backup, **bufs;
    pgrt_clip *clip;
} model;

static void model_init(model *m, pgrt_ctx *ctx, const size_t *sizes, size_t nbuf, rng *r)
{
    memset(m, 0, sizeof *m);
    m->nbuf = nbuf;
    for (size_t i = 0; i < nbuf; i++)
        m->total += sizes[i];
    m->bufs = calloc(nbuf, sizeof *m->bufs);
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, m->total, &m->all));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, m->total, &m->backup));
    size_t off = 0;
    for (size_t i = 0; i < nbuf; i++) {
        GPU_CHECK(pgrt_buf_view(m->all, off, sizes[i], &m->bufs[i]));
        off += sizes[i];
    }
    /* Fill in slices to keep the host copy small. */
    enum { CHUNK = 1 << 24 };
    float *h = malloc(CHUNK * sizeof *h);
    for (size_t o = 0; o < m->total; o += CHUNK) {
        size_t n = m->total - o < CHUNK ? m->total - o : CHUNK;
        fill_grads(r, h, n, 1e-3f);
        GPU_CHECK(pgrt_buf_upload(m->backup, o, h, n));
    }
    free(h);
    GPU_CHECK(pgrt_buf_copy(m->all, 0, m->backup, 0, m->total));
    GPU_CHECK(pgrt_clip_create(ctx, sizes, nbuf, &m->clip));
    GPU_CHECK(pgrt_clip_set_multi(m->clip, false));
}

static void model_free(model *m)
{
    pgrt_clip_destroy(&m->clip);
    for (size_t i = 0; i < m->nbuf; i++)
        pgrt_buf_destroy(&m->bufs[i]);
    free(m->bufs);
    pgrt_buf_destroy(&m->all);
    pgrt_buf_destroy(&m->backup);
}

static void row(const char *what, float med, float min, double floor_ms)
{
    if (floor_ms > 0)
        printf("| %-44s | %10.3f | %10.3f | %10.3f | %5.1f%% |\n", what, (double)med, (double)min,
               floor_ms, 100.0 * floor_ms / (double)med);
    else
        printf("| %-44s | %10.3f | %10.3f | %10s | %6s |\n", what, (double)med, (double)min, "",
               "");
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int reps = quick ? 7 : 31;
    pgrt_ctx *ctx = gpu_open();
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    rng r = {12345};
    timer t = {0};
    GPU_CHECK(pgrt_stream_create(ctx, &t.s));
    GPU_CHECK(pgrt_event_create(ctx, &t.a));
    GPU_CHECK(pgrt_event_create(ctx, &t.b));
    float *v = malloc(1000 * sizeof *v);

    /* Copy bandwidth: 1 GiB device to device. */
    size_t cn = (size_t)1 << 28;
    pgrt_buf *src = NULL, *dst = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, cn, &src));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, cn, &dst));
    GPU_CHECK(pgrt_buf_memset(src, 1));
    for (int i = 0; i < 3; i++)
        GPU_CHECK(pgrt_buf_copy_async(dst, 0, src, 0, cn, t.s));
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        GPU_CHECK(pgrt_buf_copy_async(dst, 0, src, 0, cn, t.s));
        v[i] = t_stop(&t);
    }
    float copy_ms = median(v, reps);
    double bw = 2.0 * (double)(cn * 4) / ((double)copy_ms * 1e-3); /* bytes/s, read + write */
    pgrt_buf_destroy(&src);
    pgrt_buf_destroy(&dst);

    printf("\nclip pipeline on %s (compute capability %d.%d, driver %d.%d)\n", info.name,
           info.cc_major, info.cc_minor, info.driver_version / 1000,
           (info.driver_version % 1000) / 10);
    printf("device-to-device copy bandwidth: %.1f GB/s (1 GiB copy, median %.3f ms, read + write "
           "counted)\n\n", bw / 1e9, (double)copy_ms);
    printf("| %-44s | %10s | %10s | %10s | %6s |\n", "case", "median ms", "min ms", "floor ms",
           "floor");
    printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------------",
           "------------", "------------", "------------", "--------");

    /* 350M parameters, 216 buffers. */
    size_t sizes[M350_NBUF];
    m350_sizes(sizes);
    model m;
    model_init(&m, ctx, sizes, M350_NBUF, &r);
    float scale = 0, norm = 0;
    GPU_CHECK(pgrt_clip_run(m.clip, t.s, m.bufs, m.nbuf, 1e30f));
    GPU_CHECK(pgrt_clip_result(m.clip, t.s, &scale, &norm));
    float clip_to = norm * 0.5f;
    double floor3 = 12.0 * (double)m.total / bw * 1e3, floor1 = 4.0 * (double)m.total / bw * 1e3;

    /* Clipping: restore the gradients (untimed) before each step. */
    for (int i = 0; i < reps; i++) {
        GPU_CHECK(pgrt_buf_copy_async(m.all, 0, m.backup, 0, m.total, t.s));
        t_start(&t);
        GPU_CHECK(pgrt_clip_run(m.clip, t.s, m.bufs, m.nbuf, clip_to));
        v[i] = t_stop(&t);
    }
    char label[96];
    snprintf(label, sizeof label, "350M clip, eager (%zu launches)", 2 * m.nbuf + 1);
    row(label, median(v, reps), minimum(v, reps), floor3);

    pgrt_graph *g = NULL;
    GPU_CHECK(pgrt_capture_begin(t.s));
    GPU_CHECK(pgrt_clip_run(m.clip, t.s, m.bufs, m.nbuf, clip_to));
    GPU_CHECK(pgrt_capture_end(t.s, &g));
    for (int i = 0; i < reps; i++) {
        GPU_CHECK(pgrt_buf_copy_async(m.all, 0, m.backup, 0, m.total, t.s));
        t_start(&t);
        GPU_CHECK(pgrt_graph_launch(g, t.s));
        v[i] = t_stop(&t);
    }
    row("350M clip, graphed", median(v, reps), minimum(v, reps), floor3);
    pgrt_graph_destroy(&g);

    for (int i = 0; i < reps; i++) {
        t_start(&t);
        GPU_CHECK(pgrt_clip_run(m.clip, t.s, m.bufs, m.nbuf, 1e30f));
        v[i] = t_stop(&t);
    }
    row("350M, nothing to clip (1 read pass)", median(v, reps), minimum(v, reps), floor1);

    /* The same on the multi-tensor path; the first run uploads its table. */
    pgrt_clip *mc = NULL;
    GPU_CHECK(pgrt_clip_create(ctx, sizes, M350_NBUF, &mc));
    GPU_CHECK(pgrt_clip_set_multi(mc, true));
    GPU_CHECK(pgrt_clip_run(mc, t.s, m.bufs, m.nbuf, 1e30f));
    for (int i = 0; i < reps; i++) {
        GPU_CHECK(pgrt_buf_copy_async(m.all, 0, m.backup, 0, m.total, t.s));
        t_start(&t);
        GPU_CHECK(pgrt_clip_run(mc, t.s, m.bufs, m.nbuf, clip_to));
        v[i] = t_stop(&t);
    }
    row("350M clip, multi-tensor eager (3 launches)", median(v, reps), minimum(v, reps), floor3);
    GPU_CHECK(pgrt_capture_begin(t.s));
    GPU_CHECK(pgrt_clip_run(mc, t.s, m.bufs, m.nbuf, clip_to));
    GPU_CHECK(pgrt_capture_end(t.s, &g));
    for (int i = 0; i < reps; i++) {
        GPU_CHECK(pgrt_buf_copy_async(m.all, 0, m.backup, 0, m.total, t.s));
        t_start(&t);
        GPU_CHECK(pgrt_graph_launch(g, t.s));
        v[i] = t_stop(&t);
    }
    row("350M clip, multi-tensor graphed", median(v, reps), minimum(v, reps), floor3);
    pgrt_graph_destroy(&g);
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        GPU_CHECK(pgrt_clip_run(mc, t.s, m.bufs, m.nbuf, 1e30f));
        v[i] = t_stop(&t);
    }
    row("350M, nothing to clip, multi-tensor", median(v, reps), minimum(v, reps), floor1);
    pgrt_clip_destroy(&mc);

    /* The passes alone, for the kernels' share of the floor: the squared
     * sums (one read), the scaling (a read and a write; gradient_clip
     * always writes), and the squared sum over all 350M as one buffer (no
     * per-buffer launches or tails). */
    pgrt_buf *partials = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, pgrt_clip_partials(m.clip), &partials));
    const pgk_desc *dsq = pgk_find("squared_sum_reduce"), *dgc = pgk_find("gradient_clip");
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < reps; i++) {
            t_start(&t);
            size_t off = 0;
            for (size_t b = 0; b < m.nbuf; b++) {
                uint32_t n = (uint32_t)sizes[b];
                pgk_knobs kn;
                pgk_knobs_default(pass ? dgc : dsq, &kn);
                kn.v[0] = n;
                pgrt_arg a[3] = {pgrt_arg_buf(m.bufs[b]),
                                 pass ? pgrt_arg_f32(1.0f)
                                      : pgrt_arg_ptr(pgrt_buf_ptr(partials) + 4 * off),
                                 pgrt_arg_u32(n)};
                GPU_CHECK(pgrt_launch(ctx, t.s, pass ? "gradient_clip" : "squared_sum_reduce",
                                      &kn, a, 3));
                off += pgk_squared_sum_num_blocks(n);
            }
            v[i] = t_stop(&t);
        }
        row(pass ? "350M pass 3 alone (216 gradient_clip)" : "350M pass 1 alone (216 squared_sum)",
            median(v, reps), minimum(v, reps), pass ? 2 * floor1 : floor1);
    }
    {
        uint32_t n = (uint32_t)m.total;
        pgk_knobs kn;
        pgk_knobs_default(dsq, &kn);
        kn.v[0] = n;
        pgrt_arg a[3] = {pgrt_arg_buf(m.all), pgrt_arg_buf(partials), pgrt_arg_u32(n)};
        for (int i = 0; i < reps; i++) {
            t_start(&t);
            GPU_CHECK(pgrt_launch(ctx, t.s, "squared_sum_reduce", &kn, a, 3));
            v[i] = t_stop(&t);
        }
        row("squared_sum_reduce, one 350M buffer", median(v, reps), minimum(v, reps), floor1);
    }
    pgrt_buf_destroy(&partials);
    model_free(&m);

    /* The seed's per-layer LoRA clip, and 28 layers of it. */
    enum { LAYERS = 28 };
    model layers[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        model_init(&layers[l], ctx, lora_sizes, LORA_NBUF, &r);
    pgrt_clip *shared = layers[0].clip;
    int batch = quick ? 20 : 100;
    /* max_norm above the norm: every step does the same work. */
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < batch; j++)
            GPU_CHECK(pgrt_clip_run(shared, t.s, layers[0].bufs, LORA_NBUF, 1e30f));
        v[i] = t_stop(&t) / (float)batch;
    }
    float lora_eager = median(v, reps);
    row("LoRA layer, eager (13 launches)", lora_eager, minimum(v, reps), 0);

    GPU_CHECK(pgrt_capture_begin(t.s));
    GPU_CHECK(pgrt_clip_run(shared, t.s, layers[0].bufs, LORA_NBUF, 1e30f));
    GPU_CHECK(pgrt_capture_end(t.s, &g));
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < batch; j++)
            GPU_CHECK(pgrt_graph_launch(g, t.s));
        v[i] = t_stop(&t) / (float)batch;
    }
    float lora_graph = median(v, reps);
    row("LoRA layer, graphed", lora_graph, minimum(v, reps), 0);
    pgrt_graph_destroy(&g);

    int steps = quick ? 3 : 10;
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < steps; j++)
            for (int l = 0; l < LAYERS; l++)
                GPU_CHECK(pgrt_clip_run(shared, t.s, layers[l].bufs, LORA_NBUF, 1e30f));
        v[i] = t_stop(&t) / (float)steps;
    }
    float loop_eager = median(v, reps);
    row("28 LoRA layers, eager (364 launches)", loop_eager, minimum(v, reps), 0);
    GPU_CHECK(pgrt_capture_begin(t.s));
    for (int l = 0; l < LAYERS; l++)
        GPU_CHECK(pgrt_clip_run(shared, t.s, layers[l].bufs, LORA_NBUF, 1e30f));
    GPU_CHECK(pgrt_capture_end(t.s, &g));
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < steps; j++)
            GPU_CHECK(pgrt_graph_launch(g, t.s));
        v[i] = t_stop(&t) / (float)steps;
    }
    float loop_graph = median(v, reps);
    row("28 LoRA layers, graphed", loop_graph, minimum(v, reps), 0);
    pgrt_graph_destroy(&g);

    /* The LoRA steps on the multi-tensor path: one state, a table a layer
     * (each uploaded by the first run that meets its buffers). */
    pgrt_clip *ml = NULL;
    GPU_CHECK(pgrt_clip_create(ctx, lora_sizes, LORA_NBUF, &ml));
    GPU_CHECK(pgrt_clip_set_multi(ml, true));
    for (int l = 0; l < LAYERS; l++)
        GPU_CHECK(pgrt_clip_run(ml, t.s, layers[l].bufs, LORA_NBUF, 1e30f));
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < batch; j++)
            GPU_CHECK(pgrt_clip_run(ml, t.s, layers[0].bufs, LORA_NBUF, 1e30f));
        v[i] = t_stop(&t) / (float)batch;
    }
    float mlora_eager = median(v, reps);
    row("LoRA layer, multi-tensor eager (3 launches)", mlora_eager, minimum(v, reps), 0);
    GPU_CHECK(pgrt_capture_begin(t.s));
    GPU_CHECK(pgrt_clip_run(ml, t.s, layers[0].bufs, LORA_NBUF, 1e30f));
    GPU_CHECK(pgrt_capture_end(t.s, &g));
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < batch; j++)
            GPU_CHECK(pgrt_graph_launch(g, t.s));
        v[i] = t_stop(&t) / (float)batch;
    }
    row("LoRA layer, multi-tensor graphed", median(v, reps), minimum(v, reps), 0);
    pgrt_graph_destroy(&g);
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < steps; j++)
            for (int l = 0; l < LAYERS; l++)
                GPU_CHECK(pgrt_clip_run(ml, t.s, layers[l].bufs, LORA_NBUF, 1e30f));
        v[i] = t_stop(&t) / (float)steps;
    }
    row("28 LoRA layers, multi eager (84 launches)", median(v, reps), minimum(v, reps), 0);
    GPU_CHECK(pgrt_capture_begin(t.s));
    for (int l = 0; l < LAYERS; l++)
        GPU_CHECK(pgrt_clip_run(ml, t.s, layers[l].bufs, LORA_NBUF, 1e30f));
    GPU_CHECK(pgrt_capture_end(t.s, &g));
    for (int i = 0; i < reps; i++) {
        t_start(&t);
        for (int j = 0; j < steps; j++)
            GPU_CHECK(pgrt_graph_launch(g, t.s));
        v[i] = t_stop(&t) / (float)steps;
    }
    row("28 LoRA layers, multi graphed", median(v, reps), minimum(v, reps), 0);
    pgrt_graph_destroy(&g);
    pgrt_clip_destroy(&ml);
    for (int l = 0; l < LAYERS; l++)
        model_free(&layers[l]);

    printf("\nfloor = bytes the step must move / copy bandwidth; LoRA graphed speed-up %.2fx "
           "(layer), %.2fx (28 layers)\n",
           (double)(lora_eager / lora_graph), (double)(loop_eager / loop_graph));
    pgrt_cache_stats st;
    GPU_CHECK(pgrt_cache_stats_get(ctx, &st));
    printf("module cache: %llu misses, %llu hits, JIT %.2f ms, PTX build %.2f ms\n",
           (unsigned long long)st.misses, (unsigned long long)st.hits, st.jit_ms, st.emit_ms);
    free(v);
    pgrt_event_destroy(&t.a);
    pgrt_event_destroy(&t.b);
    pgrt_stream_destroy(&t.s);
    pgrt_ctx_destroy(&ctx);
    return 0;
}
