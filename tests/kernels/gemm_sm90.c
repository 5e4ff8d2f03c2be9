/* SPDX-License-Identifier: MIT */
/*
 * pgrt_gemm_sm90 (gemm_sm90: wgmma + TMA, sm_90a) against a double-precision
 * reference on the rounded inputs: the forward, input-gradient and
 * weight-gradient layouts, bf16 and f16 in, f32, bf16 and f16 out, ragged
 * shapes (1, 15, 17, odd, not a multiple of any tile), every block-tile
 * width, overwrite and accumulate, with and without bias, row pitches
 * wider than the rows (their padding poisoned with NaN: TMA must not read
 * it, the epilogue must not write it), and two runs compared bit for bit.
 * Exit 77 without a driver or a compute capability 9.0 device.
 *
 * Usage: test_gemm_sm90 [--quick]
 */
#include "gemm_util.h"
#include "test.h"

static float to_f32(pg_type t, uint16_t h) { return t == PG_BF16 ? bf16_to_f32(h) : f16_to_f32(h); }
static uint16_t from_f32(pg_type t, float f) { return t == PG_BF16 ? f32_to_bf16(f) : f32_to_f16(f); }

typedef struct gcase {
    pgk_gemm_layout layout;
    uint32_t m, n, k;
    pg_type in, out;
    bool acc, bias;
    uint32_t bn;  /* 0: chosen */
    uint32_t pad; /* extra elements on every row pitch */
} gcase;

static const char *const layout_names[] = {"fwd", "dx", "dw"};

static uint32_t round8(uint32_t x) { return (x + 7u) & ~7u; }

/* One case: returns the number of bad elements. */
static int run_case(pgrt_ctx *ctx, const gcase *c, rng *r)
{
    uint32_t m = c->m, n = c->n, k = c->k;
    uint32_t a_rows = m, a_cols = c->layout == PGK_GEMM_FORWARD ? k : n;
    uint32_t b_rows = c->layout == PGK_GEMM_BACKWARD_W ? m : n, b_cols = k;
    uint32_t P = c->layout == PGK_GEMM_BACKWARD_W ? n : m, Q = c->layout == PGK_GEMM_FORWARD ? n : k;
    uint32_t lda = round8(a_cols) + c->pad, ldb = round8(b_cols) + c->pad, ldc = Q + c->pad;
    size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)P * ldc;
    size_t osz = c->out == PG_F32 ? 4 : 2;

    uint16_t *a = malloc(na * 2), *b = malloc(nb * 2);
    float *bias = malloc((size_t)Q * 4);
    void *c0 = malloc(nc * osz), *c1 = malloc(nc * osz), *c2 = malloc(nc * osz);
    /* the padding is NaN: a read of it would poison a result */
    for (size_t i = 0; i < na; i++)
        a[i] = (i % lda) < a_cols ? from_f32(c->in, rng_unit(r)) : 0x7fc1;
    for (size_t i = 0; i < nb; i++)
        b[i] = (i % ldb) < b_cols ? from_f32(c->in, rng_unit(r)) : 0x7fc1;
    for (uint32_t i = 0; i < Q; i++)
        bias[i] = rng_unit(r);
    for (size_t i = 0; i < nc; i++) {
        float v = (i % ldc) < Q ? rng_unit(r) : 12345.0f; /* padding: must stay */
        if (osz == 4)
            ((float *)c0)[i] = v;
        else
            ((uint16_t *)c0)[i] = from_f32(c->out, v);
    }

    pgrt_buf *ba, *bb, *bc, *bbias = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, c->in, na, &ba));
    GPU_CHECK(pgrt_buf_alloc(ctx, c->in, nb, &bb));
    GPU_CHECK(pgrt_buf_alloc(ctx, c->out, nc, &bc));
    GPU_CHECK(pgrt_buf_upload(ba, 0, a, na));
    GPU_CHECK(pgrt_buf_upload(bb, 0, b, nb));
    pgrt_buf *bias_all = NULL;
    if (c->bias) {
        /* at an odd element offset when the pitch is padded: a bias that is
         * only 4-byte aligned */
        size_t off = c->pad ? 1 : 0;
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, Q + off, &bias_all));
        GPU_CHECK(pgrt_buf_view(bias_all, off, Q, &bbias));
        GPU_CHECK(pgrt_buf_upload(bbias, 0, bias, Q));
    }
    pgrt_gemm90 g = {c->layout, ba, bb, bc, bbias, m, n, k, lda, ldb, ldc, c->acc, c->bn};
    int bad = 0;
    for (int run = 0; run < 2; run++) {
        GPU_CHECK(pgrt_buf_upload(bc, 0, c0, nc));
        int rc = pgrt_gemm_sm90(ctx, NULL, &g);
        if (rc) {
            fprintf(stderr, "%s m=%u n=%u k=%u: %s: %s\n", layout_names[c->layout], m, n, k,
                    pgrt_err_name(rc), pgrt_last_message());
            bad = 1;
            goto out;
        }
        GPU_CHECK(pgrt_ctx_sync(ctx));
        GPU_CHECK(pgrt_buf_download(bc, 0, run ? c2 : c1, nc));
    }
    if (memcmp(c1, c2, nc * osz)) {
        fprintf(stderr, "%s m=%u n=%u k=%u: two runs differ\n", layout_names[c->layout], m, n, k);
        bad++;
    }
    /* the reference: A(p,r), B(q,r) as the layout reads them */
    uint32_t R = c->layout == PGK_GEMM_FORWARD ? k : c->layout == PGK_GEMM_BACKWARD_X ? n : m;
    double worst = 0;
    for (uint32_t p = 0; p < P; p++) {
        for (uint32_t q = 0; q < ldc; q++) {
            size_t ci = (size_t)p * ldc + q;
            double got = osz == 4 ? ((float *)c1)[ci] : to_f32(c->out, ((uint16_t *)c1)[ci]);
            double old = osz == 4 ? ((float *)c0)[ci] : to_f32(c->out, ((uint16_t *)c0)[ci]);
            if (q >= Q) {
                if (got != old && bad++ < 8)
                    fprintf(stderr, "  padding (%u,%u) written: %g\n", p, q, got);
                continue;
            }
            double s = 0, sa = 0;
            for (uint32_t x = 0; x < R; x++) {
                size_t ai, bi;
                switch (c->layout) {
                case PGK_GEMM_FORWARD: ai = (size_t)p * lda + x; bi = (size_t)q * ldb + x; break;
                case PGK_GEMM_BACKWARD_X: ai = (size_t)p * lda + x; bi = (size_t)x * ldb + q; break;
                default: ai = (size_t)x * lda + p; bi = (size_t)x * ldb + q; break;
                }
                double t = (double)to_f32(c->in, a[ai]) * to_f32(c->in, b[bi]);
                s += t;
                sa += fabs(t);
            }
            if (c->bias) {
                s += bias[q];
                sa += fabs(bias[q]);
            }
            if (c->acc) {
                s += old;
                sa += fabs(old);
            }
            double tol = 1e-5 * sa + 1e-6 + (osz == 2 ? fabs(s) * (c->out == PG_BF16 ? 0x1p-8 : 0x1p-11) : 0);
            double e = fabs(got - s);
            if (e / (tol > 0 ? tol : 1) > worst)
                worst = e / tol;
            if (!(e <= tol) && bad++ < 8)
                fprintf(stderr, "  (%u,%u): got %.7g want %.7g (tol %.3g)\n", p, q, got, s, tol);
        }
    }
    fprintf(stderr, "%-3s %s->%s m=%-4u n=%-4u k=%-4u bn=%-3u%s%s pad=%u: %s (worst %.2f of tol)\n",
            layout_names[c->layout], pg_type_name(c->in), pg_type_name(c->out), m, n, k,
            c->bn ? c->bn : pgrt_gemm_sm90_bn(P, Q, 132), c->acc ? " acc" : "",
            c->bias ? " bias" : "", c->pad, bad ? "FAIL" : "ok", worst);
out:
    pgrt_buf_destroy(&ba);
    pgrt_buf_destroy(&bb);
    pgrt_buf_destroy(&bc);
    pgrt_buf_destroy(&bbias);
    pgrt_buf_destroy(&bias_all);
    free(a);
    free(b);
    free(bias);
    free(c0);
    free(c1);
    free(c2);
    return bad;
}

int main(int argc, char **argv)
{
    bool quick = gpu_quick() || (argc > 1 && strcmp(argv[1], "--quick") == 0);
    pgrt_ctx *ctx = gpu_open();
    gpu_require_sm90a(&ctx, "test_gemm_sm90", "gemm_sm90");
    rng r = {test_seed("test_gemm_sm90")};
    static const uint32_t shapes[][3] = {
        {1, 1, 1},     {15, 17, 33},   {17, 15, 64},   {129, 257, 65}, {200, 130, 300},
        {128, 256, 128}, {1, 300, 17}, {300, 1, 9},    {513, 383, 1000},
    };
    static const uint32_t bns[] = {0, 64, 128, 192, 256};
    int fails = 0, cases = 0;
    for (int l = 0; l < 3; l++) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (quick && i % 3)
                continue;
            gcase c = {(pgk_gemm_layout)l, shapes[i][0], shapes[i][1], shapes[i][2],
                       PG_BF16, PG_F32, false, false, bns[i % 5], 0};
            fails += run_case(ctx, &c, &r) != 0;
            cases++;
            /* each shape again in another dtype and epilogue */
            c.in = i % 2 ? PG_F16 : PG_BF16;
            c.out = i % 3 == 0 ? PG_F32 : c.in;
            c.acc = i % 2 == 0;
            c.bias = i % 4 < 2;
            c.pad = i % 3 == 1 ? 8 : 0;
            c.bn = bns[(i + 2) % 5];
            fails += run_case(ctx, &c, &r) != 0;
            cases++;
        }
    }
    fprintf(stderr, "%d cases, %d failed\n", cases, fails);
    REQUIRE_INT_EQ(fails, 0);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
