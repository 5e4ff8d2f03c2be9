/* SPDX-License-Identifier: MIT */
/*
 * The fused clip pipeline on the seed's per-layer LoRA buffers and on the
 * 216 gradient buffers of a 350M-parameter model: norm and scale against a
 * double-precision reference, clipped gradients against fl(g * scale), the
 * norm bitwise stable over runs, a captured graph replaying the same bits,
 * non-finite gradients visible in the norm, and max_norm above the norm
 * leaving every gradient bit untouched. Then the multi-tensor path against
 * the per-buffer launches, eager and graphed, bit for bit (also on a set
 * whose buffers start at mixed alignments).
 *
 * PGRT_GPU_QUICK=1 (for compute-sanitizer) skips the 350M model.
 */
#include "gpu_util.h"
#include "test.h"

#define POISON 0x7fbadbadu

typedef struct grads {
    size_t nbuf, total;
    const size_t *sizes;
    float *host;      /* original values, all buffers back to back */
    pgrt_buf *all;    /* one allocation ... */
    pgrt_buf **bufs;  /* ... viewed as the model's buffers */
    double sumsq;     /* reference: sum of squares in double */
} grads;

static void grads_init(grads *g, pgrt_ctx *ctx, const size_t *sizes, size_t nbuf, rng *r)
{
    memset(g, 0, sizeof *g);
    g->nbuf = nbuf;
    g->sizes = sizes;
    for (size_t i = 0; i < nbuf; i++)
        g->total += sizes[i];
    g->host = malloc(g->total * sizeof *g->host);
    g->bufs = calloc(nbuf, sizeof *g->bufs);
    if (!g->host || !g->bufs) {
        fprintf(stderr, "out of host memory for %zu gradients\n", g->total);
        exit(1);
    }
    size_t off = 0;
    for (size_t i = 0; i < nbuf; i++) {
        /* Magnitudes vary by buffer, as they do by layer. */
        float scale = 1e-3f * (float)(1 + (i * 7) % 13);
        fill_grads(r, g->host + off, sizes[i], scale);
        off += sizes[i];
    }
    double s = 0;
    for (size_t i = 0; i < g->total; i++)
        s += (double)g->host[i] * (double)g->host[i];
    g->sumsq = s;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, g->total, &g->all));
    off = 0;
    for (size_t i = 0; i < nbuf; i++) {
        GPU_CHECK(pgrt_buf_view(g->all, off, sizes[i], &g->bufs[i]));
        off += sizes[i];
    }
    GPU_CHECK(pgrt_buf_upload(g->all, 0, g->host, g->total));
}

static void grads_reset(grads *g) { GPU_CHECK(pgrt_buf_upload(g->all, 0, g->host, g->total)); }

static void grads_free(grads *g)
{
    for (size_t i = 0; i < g->nbuf; i++)
        pgrt_buf_destroy(&g->bufs[i]);
    pgrt_buf_destroy(&g->all);
    free(g->bufs);
    free(g->host);
}

static void run(pgrt_clip *c, pgrt_stream *s, grads *g, float max_norm, float *scale, float *norm)
{
    GPU_CHECK(pgrt_clip_run(c, s, g->bufs, g->nbuf, max_norm));
    GPU_CHECK(pgrt_clip_result(c, s, scale, norm));
}

/* Every element must be fl(g * scale) for the scale the device computed
 * (or untouched when that scale is 1). Returns the number that are not. */
static size_t check_clipped(const grads *g, float scale, float *scratch)
{
    GPU_CHECK(pgrt_buf_download(g->all, 0, scratch, g->total));
    bool untouched = fabsf(scale - 1.0f) < 1e-7f;
    size_t wrong = 0;
    for (size_t i = 0; i < g->total; i++) {
        float want = untouched ? g->host[i] : g->host[i] * scale;
        if (f32_bits(scratch[i]) != f32_bits(want)) {
            if (!wrong)
                fprintf(stderr, "  first wrong element %zu: %.9g, want %.9g\n", i,
                        (double)scratch[i], (double)want);
            wrong++;
        }
    }
    return wrong;
}

static void test_model(pgrt_ctx *ctx, pgrt_stream *s, const char *label, const size_t *sizes,
                       size_t nbuf, rng *r, int bitwise_runs)
{
    grads g;
    grads_init(&g, ctx, sizes, nbuf, r);
    float *scratch = malloc(g.total * sizeof *scratch);
    double norm_ref = sqrt(g.sumsq);
    fprintf(stderr, "%s: %zu buffers, %zu parameters, reference norm %.9g\n", label, nbuf,
            g.total, norm_ref);

    pgrt_clip *c = NULL;
    GPU_CHECK(pgrt_clip_create(ctx, sizes, nbuf, &c));
    GPU_CHECK(pgrt_clip_set_multi(c, false));
    fprintf(stderr, "%s: %u partial sums\n", label, pgrt_clip_partials(c));

    /* max_norm above the norm: scale 1, gradients bit for bit untouched;
     * the result buffer is poisoned first so its values are known fresh. */
    float scale = 0, norm = 0, big = (float)(norm_ref * 2.0);
    GPU_CHECK(pgrt_buf_fill32(pgrt_clip_result_buf(c), POISON));
    run(c, s, &g, big, &scale, &norm);
    REQUIRE(f32_bits(scale) != POISON && f32_bits(norm) != POISON);
    REQUIRE(scale == 1.0f);
    double en = rel_err(norm, norm_ref);
    if (en > 1e-5)
        TEST_FAIL_("%s: norm %.9g, reference %.9g, relative error %.2e", label, (double)norm,
                   norm_ref, en);
    fprintf(stderr, "%s: norm %.9g (rel err %.2e), scale %g with max_norm %g\n", label,
            (double)norm, en, (double)scale, (double)big);
    GPU_CHECK(pgrt_buf_download(g.all, 0, scratch, g.total));
    REQUIRE(memcmp(scratch, g.host, g.total * sizeof *scratch) == 0);

    /* The norm is bitwise the same run after run. */
    uint32_t bits = f32_bits(norm);
    int differing = 0;
    for (int i = 1; i < bitwise_runs; i++) {
        float n2 = 0, s2 = 0;
        run(c, s, &g, big, &s2, &n2);
        if (f32_bits(n2) != bits) {
            differing++;
            fprintf(stderr, "%s: run %d norm %.9g (0x%08x) != 0x%08x\n", label, i, (double)n2,
                    f32_bits(n2), bits);
        }
    }
    REQUIRE_INT_EQ(differing, 0);
    fprintf(stderr, "%s: norm bitwise identical over %d runs\n", label, bitwise_runs);

    /* Clipping: max_norm a quarter of the norm. */
    float small = (float)(norm_ref * 0.25);
    float cscale = 0, cnorm = 0;
    run(c, s, &g, small, &cscale, &cnorm);
    double want_scale = (double)small / norm_ref;
    double es = rel_err(cscale, want_scale);
    if (es > 1e-5 || f32_bits(cnorm) != bits)
        TEST_FAIL_("%s: clipping scale %.9g (want %.9g, rel %.2e), norm 0x%08x (want 0x%08x)",
                   label, (double)cscale, want_scale, es, f32_bits(cnorm), bits);
    size_t wrong = check_clipped(&g, cscale, scratch);
    if (wrong)
        TEST_FAIL_("%s: %zu of %zu clipped gradients differ from fl(g * scale)", label, wrong,
                   g.total);
    fprintf(stderr, "%s: clipped with scale %.9g (rel err %.2e)\n", label, (double)cscale, es);

    /* The same step captured into a graph: same bits as the eager run. */
    grads_reset(&g);
    pgrt_graph *graph = NULL;
    GPU_CHECK(pgrt_capture_begin(s));
    int rc = pgrt_clip_run(c, s, g.bufs, g.nbuf, small);
    if (rc) {
        TEST_FAIL_("%s: clip_run under capture: %s", label, pgrt_last_message());
        pgrt_capture_abort(s);
    } else {
        GPU_CHECK(pgrt_capture_end(s, &graph));
        GPU_CHECK(pgrt_buf_fill32(pgrt_clip_result_buf(c), POISON));
        GPU_CHECK(pgrt_graph_launch(graph, s));
        float gscale = 0, gnorm = 0;
        GPU_CHECK(pgrt_clip_result(c, s, &gscale, &gnorm));
        REQUIRE(f32_bits(gnorm) == bits);
        REQUIRE(f32_bits(gscale) == f32_bits(cscale));
        wrong = check_clipped(&g, gscale, scratch);
        if (wrong)
            TEST_FAIL_("%s: graph replay: %zu gradients differ from the eager run", label, wrong);
        /* Replayed again on the clipped gradients: the norm is now max_norm
         * (to rounding) and nothing crashes or drifts. */
        GPU_CHECK(pgrt_graph_launch(graph, s));
        GPU_CHECK(pgrt_clip_result(c, s, &gscale, &gnorm));
        double e2 = rel_err(gnorm, small);
        if (e2 > 1e-5)
            TEST_FAIL_("%s: second replay norm %.9g, want about %.9g", label, (double)gnorm,
                       (double)small);
        fprintf(stderr, "%s: graph replay identical to eager; second replay norm %.9g\n", label,
                (double)gnorm);
        pgrt_graph_destroy(&graph);
    }

    /* A NaN in one gradient, then an Inf: the norm shows it. */
    grads_reset(&g);
    size_t where = g.sizes[0] + g.sizes[1] / 2;
    float saved = g.host[where];
    float bad = NAN;
    GPU_CHECK(pgrt_buf_upload(g.all, where, &bad, 1));
    run(c, s, &g, small, &scale, &norm);
    REQUIRE(isnan(norm));
    fprintf(stderr, "%s: NaN gradient: norm %g, scale %g\n", label, (double)norm, (double)scale);
    bad = INFINITY;
    GPU_CHECK(pgrt_buf_upload(g.all, where, &bad, 1));
    run(c, s, &g, small, &scale, &norm);
    REQUIRE(isinf(norm) || isnan(norm));
    fprintf(stderr, "%s: Inf gradient: norm %g, scale %g\n", label, (double)norm, (double)scale);
    GPU_CHECK(pgrt_buf_upload(g.all, where, &saved, 1));

    pgrt_clip_destroy(&c);
    free(scratch);
    grads_free(&g);
}

/* The gradients after a step and [scale, norm], for comparing paths. */
typedef struct outcome {
    float *g;
    uint32_t scale, norm;
} outcome;

static void take(const grads *g, pgrt_clip *c, pgrt_stream *s, outcome *o)
{
    float sc = 0, nm = 0;
    GPU_CHECK(pgrt_clip_result(c, s, &sc, &nm));
    o->scale = f32_bits(sc);
    o->norm = f32_bits(nm);
    GPU_CHECK(pgrt_buf_download(g->all, 0, o->g, g->total));
}

static void same(const char *label, const char *what, const grads *g, const outcome *a,
                 const outcome *b)
{
    size_t wrong = 0;
    for (size_t i = 0; i < g->total; i++)
        wrong += f32_bits(a->g[i]) != f32_bits(b->g[i]);
    if (a->scale != b->scale || a->norm != b->norm || wrong)
        TEST_FAIL_("%s: %s: scale 0x%08x vs 0x%08x, norm 0x%08x vs 0x%08x, %zu gradients differ",
                   label, what, a->scale, b->scale, a->norm, b->norm, wrong);
}

static pgrt_graph *capture(pgrt_clip *c, pgrt_stream *s, grads *g, float max_norm)
{
    pgrt_graph *graph = NULL;
    GPU_CHECK(pgrt_capture_begin(s));
    int rc = pgrt_clip_run(c, s, g->bufs, g->nbuf, max_norm);
    if (rc) {
        TEST_FAIL_("clip_run under capture: %s", pgrt_last_message());
        pgrt_capture_abort(s);
        return NULL;
    }
    GPU_CHECK(pgrt_capture_end(s, &graph));
    return graph;
}

/* Multi-tensor against per-buffer: the same gradients through each, eager
 * and replayed from graphs, clipping and not; every bit the same. */
static void test_multi(pgrt_ctx *ctx, pgrt_stream *s, const char *label, const size_t *sizes,
                       size_t nbuf, rng *r)
{
    grads g;
    grads_init(&g, ctx, sizes, nbuf, r);
    pgrt_clip *multi = NULL, *single = NULL;
    GPU_CHECK(pgrt_clip_create(ctx, sizes, nbuf, &multi));
    GPU_CHECK(pgrt_clip_create(ctx, sizes, nbuf, &single));
    GPU_CHECK(pgrt_clip_set_multi(multi, true));
    GPU_CHECK(pgrt_clip_set_multi(single, false));
    REQUIRE(pgrt_clip_multi(multi));
    outcome o[4];
    for (int i = 0; i < 4; i++) {
        o[i].g = malloc(g.total * sizeof *o[i].g);
        if (!o[i].g) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
    }
    float small = (float)(sqrt(g.sumsq) * 0.25), big = (float)(sqrt(g.sumsq) * 4.0);
    const float limits[2] = {small, big};
    for (int k = 0; k < 2; k++) {
        float mn = limits[k];
        const char *what = k ? "nothing to clip" : "clipping";
        grads_reset(&g);
        GPU_CHECK(pgrt_clip_run(single, s, g.bufs, g.nbuf, mn));
        take(&g, single, s, &o[0]);
        grads_reset(&g);
        GPU_CHECK(pgrt_clip_run(multi, s, g.bufs, g.nbuf, mn));
        take(&g, multi, s, &o[1]);
        same(label, what, &g, &o[0], &o[1]);
        if (k == 0 && o[0].scale == f32_bits(1.0f))
            TEST_FAIL_("%s: max_norm %g did not clip", label, (double)mn);

        /* Graphs: the multi state's table for these buffers exists (the
         * eager run made it), so the capture records the multi launches. */
        pgrt_graph *gm = capture(multi, s, &g, mn), *gs = capture(single, s, &g, mn);
        if (gm && gs) {
            grads_reset(&g);
            GPU_CHECK(pgrt_buf_fill32(pgrt_clip_result_buf(multi), POISON));
            GPU_CHECK(pgrt_graph_launch(gm, s));
            take(&g, multi, s, &o[2]);
            grads_reset(&g);
            GPU_CHECK(pgrt_graph_launch(gs, s));
            take(&g, single, s, &o[3]);
            same(label, k ? "graphed, nothing to clip" : "graphed, clipping", &g, &o[2], &o[3]);
            same(label, k ? "graphed vs eager, nothing to clip" : "graphed vs eager, clipping",
                 &g, &o[0], &o[2]);
        }
        pgrt_graph_destroy(&gm);
        pgrt_graph_destroy(&gs);
        fprintf(stderr, "%s: multi-tensor = per-buffer bitwise, eager and graphed, %s (norm "
                "0x%08x, scale 0x%08x)\n", label, what, o[0].norm, o[0].scale);
    }
    for (int i = 0; i < 4; i++)
        free(o[i].g);
    pgrt_clip_destroy(&multi);
    pgrt_clip_destroy(&single);
    grads_free(&g);
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    rng r = {test_seed("clip pipeline")};
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    test_model(ctx, s, "lora-layer", lora_sizes, LORA_NBUF, &r, 10);
    test_multi(ctx, s, "lora-layer", lora_sizes, LORA_NBUF, &r);
    /* Buffers back to back with odd sizes: most start unaligned, so the
     * entries of one table take both the float4 and the scalar paths. */
    static const size_t mixed[7] = {1531, 4096, 5, 1536 * 16 + 3, 1, 300001, 4 * 1024 * 1024};
    test_multi(ctx, s, "mixed-alignment", mixed, 7, &r);
    if (!gpu_quick()) {
        size_t sizes[M350_NBUF];
        m350_sizes(sizes);
        test_model(ctx, s, "350M", sizes, M350_NBUF, &r, 10);
        test_multi(ctx, s, "350M", sizes, M350_NBUF, &r);
    } else {
        fprintf(stderr, "quick mode: 350M model skipped\n");
    }
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
