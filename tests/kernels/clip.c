/* SPDX-License-Identifier: MIT */
/*
 * Each clip kernel against a double-precision CPU reference on fresh random
 * data, for sizes around the block and grid boundaries. Outputs are
 * poisoned first (a NaN pattern) so that an element the kernel failed to
 * write shows, and a guard element past the end must stay poisoned.
 */
#include "gpu_util.h"
#include "test.h"

#define POISON 0x7fbadbadu /* a quiet NaN no kernel computes */

static const uint32_t sizes[] = {1, 255, 256, 257, 1023, 1024, 1025, (1u << 20) + 3};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static pgk_knobs knobs_n(const char *kernel, const char *knob, uint32_t n)
{
    const pgk_desc *d = pgk_find(kernel);
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, knob)] = n;
    return kn;
}

/* The thread that owns element i: the kernel strides over float4 chunks
 * when the input is 16-byte aligned (the last n % 4 elements go one each
 * to the first threads) and over single elements otherwise. */
static uint64_t sq_owner(uint64_t i, uint32_t n, uint64_t stride, bool aligned)
{
    uint64_t n4 = n / 4;
    if (!aligned)
        return i % stride;
    return i < 4 * n4 ? (i / 4) % stride : i - 4 * n4;
}

static void test_squared_sum(pgrt_ctx *ctx, pgrt_stream *s, rng *r)
{
    for (size_t si = 0; si < 2 * NSIZES; si++) {
        uint32_t n = sizes[si / 2];
        /* odd rounds read through a view one element in: not 16-byte aligned */
        uint32_t shift = si % 2;
        uint32_t blocks = pgk_squared_sum_num_blocks(n);
        float *x = malloc(n * sizeof *x);
        float *out = malloc((blocks + 1) * sizeof *out);
        double *ref = calloc(blocks, sizeof *ref);
        fill_grads(r, x, n, (si / 2) % 2 ? 3.0f : 0.01f);
        /* Block b's grid-stride share: the elements its threads own. */
        uint64_t stride = 256u * (uint64_t)blocks;
        for (uint32_t i = 0; i < n; i++)
            ref[sq_owner(i, n, stride, shift == 0) / 256] += (double)x[i] * (double)x[i];

        pgrt_buf *base = NULL, *in = NULL, *o = NULL;
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, n + shift, &base));
        GPU_CHECK(pgrt_buf_view(base, shift, n, &in));
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, blocks + 1, &o));
        GPU_CHECK(pgrt_buf_upload(in, 0, x, n));
        GPU_CHECK(pgrt_buf_fill32(o, POISON));
        pgk_knobs kn = knobs_n("squared_sum_reduce", "n", n);
        pgrt_arg a[3] = {pgrt_arg_buf(in), pgrt_arg_buf(o), pgrt_arg_u32(n)};
        int rc = pgrt_launch(ctx, s, "squared_sum_reduce", &kn, a, 3);
        REQUIRE_INT_EQ(rc, 0);
        if (rc)
            fprintf(stderr, "%s\n", pgrt_last_message());
        GPU_CHECK(pgrt_stream_sync(s));
        GPU_CHECK(pgrt_buf_download(o, 0, out, blocks + 1));

        double worst = 0;
        int unwritten = 0;
        for (uint32_t b = 0; b < blocks; b++) {
            if (f32_bits(out[b]) == POISON) {
                unwritten++;
                continue;
            }
            double e = rel_err(out[b], ref[b]);
            if (e > worst)
                worst = e;
        }
        const char *how = shift ? "unaligned" : "aligned";
        if (unwritten)
            TEST_FAIL_("squared_sum_reduce n=%u %s: %d of %u partials not written", n, how,
                       unwritten, blocks);
        if (worst > 1e-5)
            TEST_FAIL_("squared_sum_reduce n=%u %s: worst relative error %.3g (> 1e-5)", n, how,
                       worst);
        REQUIRE(f32_bits(out[blocks]) == POISON);
        fprintf(stderr, "squared_sum_reduce n=%-8u %-9s blocks=%-3u worst rel err %.2e\n", n, how,
                blocks, worst);
        pgrt_buf_destroy(&in);
        pgrt_buf_destroy(&base);
        pgrt_buf_destroy(&o);
        free(x);
        free(out);
        free(ref);
    }
}

static void run_clip_scale(pgrt_ctx *ctx, pgrt_stream *s, const float *p, uint32_t n,
                           float max_norm, float out[3])
{
    pgrt_buf *pb = NULL, *o = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, n, &pb));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, 3, &o));
    GPU_CHECK(pgrt_buf_upload(pb, 0, p, n));
    GPU_CHECK(pgrt_buf_fill32(o, POISON));
    pgk_knobs kn = knobs_n("clip_scale_reduce", "n", n);
    pgrt_arg a[4] = {pgrt_arg_buf(pb), pgrt_arg_u32(n), pgrt_arg_f32(max_norm), pgrt_arg_buf(o)};
    int rc = pgrt_launch(ctx, s, "clip_scale_reduce", &kn, a, 4);
    REQUIRE_INT_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "%s\n", pgrt_last_message());
    GPU_CHECK(pgrt_stream_sync(s));
    GPU_CHECK(pgrt_buf_download(o, 0, out, 3));
    pgrt_buf_destroy(&pb);
    pgrt_buf_destroy(&o);
}

static void test_clip_scale(pgrt_ctx *ctx, pgrt_stream *s, rng *r)
{
    for (size_t si = 0; si < NSIZES; si++) {
        uint32_t n = sizes[si];
        float *p = malloc(n * sizeof *p);
        double sum = 0;
        for (uint32_t i = 0; i < n; i++) {
            float v = rng_unit(r);
            p[i] = v * v * 4.0f; /* partial sums are sums of squares */
            sum += p[i];
        }
        double norm = sqrt(sum);
        /* Clipping (max_norm below the norm) and not clipping. */
        const float maxes[2] = {(float)(norm * 0.25), (float)(norm * 4.0)};
        for (int m = 0; m < 2; m++) {
            float out[3];
            run_clip_scale(ctx, s, p, n, maxes[m], out);
            double want_scale = fmin(1.0, (double)maxes[m] / norm);
            REQUIRE(f32_bits(out[0]) != POISON && f32_bits(out[1]) != POISON);
            REQUIRE(f32_bits(out[2]) == POISON);
            double en = rel_err(out[1], norm), es = rel_err(out[0], want_scale);
            if (en > 1e-5 || es > 1e-5)
                TEST_FAIL_("clip_scale_reduce n=%u max_norm=%g: norm %.9g (want %.9g, rel %.2e), "
                           "scale %.9g (want %.9g, rel %.2e)",
                           n, (double)maxes[m], (double)out[1], norm, en, (double)out[0],
                           want_scale, es);
            if (m == 1)
                REQUIRE(out[0] == 1.0f);
            fprintf(stderr, "clip_scale_reduce  n=%-8u max_norm=%-10.4g norm rel err %.2e scale "
                    "rel err %.2e\n", n, (double)maxes[m], en, es);
        }
        free(p);
    }

    /* All zeros: norm 0, scale 1. */
    float zeros[300] = {0}, out[3];
    run_clip_scale(ctx, s, zeros, 300, 1.0f, out);
    REQUIRE(out[0] == 1.0f);
    REQUIRE(out[1] == 0.0f);
    /* Non-finite partials stay visible in the norm. */
    zeros[7] = INFINITY;
    run_clip_scale(ctx, s, zeros, 300, 1.0f, out);
    REQUIRE(isinf(out[1]));
    fprintf(stderr, "clip_scale_reduce  inf partial: scale %g norm %g\n", (double)out[0],
            (double)out[1]);
    zeros[9] = NAN;
    run_clip_scale(ctx, s, zeros, 300, 1.0f, out);
    REQUIRE(isnan(out[1]));
    fprintf(stderr, "clip_scale_reduce  nan partial: scale %g norm %g\n", (double)out[0],
            (double)out[1]);
}

/* gradient_clip_gpu_scale (device scale) and gradient_clip (host scale):
 * every element becomes fl(g * scale), the guard past n is untouched, and
 * a scale of 1 writes nothing. */
static void test_scale_kernels(pgrt_ctx *ctx, pgrt_stream *s, rng *r)
{
    for (int gpu_scale = 1; gpu_scale >= 0; gpu_scale--) {
        const char *name = gpu_scale ? "gradient_clip_gpu_scale" : "gradient_clip";
        for (size_t si = 0; si < NSIZES; si++) {
            uint32_t n = sizes[si];
            /* g[0] and g[n + 1] are guards; the data is g[1..n]. Shift 1
             * reads through a view at g + 1 (not 16-byte aligned: the
             * scalar path), shift 0 at g + 0 (the float4 path). */
            float *g = malloc((n + 2) * sizeof *g), *out = malloc((n + 2) * sizeof *out);
            fill_grads(r, g + 1, n, 2.0f);
            memcpy(&g[0], &(uint32_t){POISON}, 4);
            memcpy(&g[n + 1], &(uint32_t){POISON}, 4);
            const float scales[3] = {0.3712f, 1.0f, 1.0f - 5e-8f};
            for (int round = 0; round < (gpu_scale ? 6 : 4); round++) {
                int k = round / 2;
                uint32_t shift = round % 2;
                float sc = scales[k];
                const float *src = g + 1 - shift; /* data at src[shift..] */
                pgrt_buf *gb = NULL, *sb = NULL, *view = NULL;
                GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, n + 1 + shift, &gb));
                GPU_CHECK(pgrt_buf_view(gb, shift, n, &view));
                GPU_CHECK(pgrt_buf_upload(gb, 0, src, n + 1 + shift));
                GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, 1, &sb));
                GPU_CHECK(pgrt_buf_upload(sb, 0, &sc, 1));
                pgk_knobs kn = knobs_n(name, "n", n);
                pgrt_arg a[3] = {pgrt_arg_buf(view),
                                 gpu_scale ? pgrt_arg_buf(sb) : pgrt_arg_f32(sc),
                                 pgrt_arg_u32(n)};
                int rc = pgrt_launch(ctx, s, name, &kn, a, 3);
                REQUIRE_INT_EQ(rc, 0);
                if (rc)
                    fprintf(stderr, "%s\n", pgrt_last_message());
                GPU_CHECK(pgrt_stream_sync(s));
                GPU_CHECK(pgrt_buf_download(gb, 0, out, n + 1 + shift));
                const float *o = out + shift;
                const float *in = g + 1;
                uint32_t wrong = 0, first = 0;
                double worst = 0;
                for (uint32_t i = 0; i < n; i++) {
                    /* |scale - 1| < 1e-7 means no write at all. */
                    float want = gpu_scale && fabsf(sc - 1.0f) < 1e-7f ? in[i] : in[i] * sc;
                    if (f32_bits(o[i]) != f32_bits(want) && !wrong++)
                        first = i;
                    double e = rel_err(o[i], (double)in[i] * (double)sc);
                    if (e > worst)
                        worst = e;
                }
                if (wrong)
                    TEST_FAIL_("%s n=%u shift=%u scale=%.9g: %u elements differ from "
                               "fl(g*scale), first at %u: %.9g (g %.9g)", name, n, shift,
                               (double)sc, wrong, first, (double)o[first], (double)in[first]);
                if (worst > 1e-6 && !(gpu_scale && k == 2))
                    TEST_FAIL_("%s n=%u: worst relative error to the double product %.2e", name,
                               n, worst);
                REQUIRE(f32_bits(o[n]) == POISON);
                if (shift)
                    REQUIRE(f32_bits(out[0]) == POISON);
                pgrt_buf_destroy(&view);
                pgrt_buf_destroy(&gb);
                pgrt_buf_destroy(&sb);
            }
            fprintf(stderr, "%-23s n=%-8u ok\n", name, n);
            free(g);
            free(out);
        }
    }
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    rng r = {test_seed("clip kernels")};
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    test_squared_sum(ctx, s, &r);
    test_clip_scale(ctx, s, &r);
    test_scale_kernels(ctx, s, &r);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
