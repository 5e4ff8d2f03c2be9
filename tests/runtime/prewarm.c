/* SPDX-License-Identifier: MIT */
/*
 * Model pre-warm and the GEMM backward dispatch without a GPU, against the
 * fake driver (fakecuda.h) and a fake cuBLAS (fakecublas.h):
 *
 *  - pgrt_prewarm_model: the modules of a 1.5B LoRA step, loaded once (the
 *    count, the keys, the driver's loads), a second call all hits, other
 *    modes, bad configs (zeros, inconsistent fields, sizes past u32, f16 on
 *    a target without it) refused with the field named and nothing loaded;
 *  - no cuBLAS ($PGRT_LIBCUBLAS=/nonexistent): a "not available" status,
 *    never an error, and the PTX kernels in the launch log, in the tile
 *    variant the dispatch picks;
 *  - the fake cuBLAS: the row-major to column-major mapping checked on
 *    numbers (the fake runs the GEMM on the host), the recorded call
 *    (transposes, sizes, leading dimensions, beta, stream, pedantic math),
 *    the switch (PTXGEN_CUBLAS=0, pgrt_ctx_set_cublas), failures, refusal
 *    during capture, and handles freed with their context;
 *  - the operand checks.
 *
 * Usage: test_prewarm FAKE_LIBCUDA FAKE_LIBCUBLAS
 */
#include "fakecublas.h"
#include "fake_util.h"
#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

static fake_fixture fk;
static const char *fake_blas;
static fakecublas_reset_fn fb_reset;
static fakecublas_count_fn fb_count, fb_live;
static fakecublas_gemm_at_fn fb_at;


static pgrt_ctx *open_ctx(void) { return fake_open_ctx(fk.path); }

static pgrt_buf *f32buf(pgrt_ctx *ctx, size_t n)
{
    pgrt_buf *b = NULL;
    if (pgrt_buf_alloc(ctx, PG_F32, n, &b)) {
        fprintf(stderr, "pgrt_buf_alloc: %s\n", pgrt_last_message());
        exit(1);
    }
    return b;
}

/* ---------------------------------------------------------------- pre-warm */

/* A model's shape and the step to plan for. */
typedef struct shape {
    pgrt_model_config m;
    pgrt_prewarm_step st;
} shape;

static const shape qwen_1p5b = {
    .m = {.hidden = 1536, .intermediate = 8960, .heads = 12, .kv_heads = 2, .head_dim = 128},
    .st = {.max_seq_len = 512, .lora_rank = 16},
};

static int warm(pgrt_ctx *ctx, const shape *sh, pgrt_prewarm_report *r)
{
    return pgrt_prewarm_model(ctx, sh ? &sh->m : NULL, sh ? &sh->st : NULL, r);
}

static char *key_of(char *buf, size_t len, const char *kernel, int variant)
{
    if (variant < 0)
        snprintf(buf, len, "%s@sm_90", kernel);
    else
        snprintf(buf, len, "%s@sm_90,variant=%d", kernel, variant);
    return buf;
}

static bool has_key(const pgrt_prewarm_report *r, const char *key)
{
    for (size_t i = 0; i < r->modules; i++)
        if (strcmp(r->list[i].key, key) == 0)
            return true;
    return false;
}

static int default_variant(const char *kernel)
{
    const pgk_desc *d = pgk_find(kernel);
    int vi = pgk_knob_index(d, "variant");
    return vi < 0 ? -1 : (int)d->knobs[vi].def;
}

static void test_prewarm(void)
{
    pgrt_ctx *ctx = open_ctx();
    pgrt_prewarm_report r;
    int loads0 = fk.loads();
    REQUIRE_INT_EQ(warm(ctx, &qwen_1p5b, &r), 0);
    if (test_failures_)
        fprintf(stderr, "%s\n", pgrt_last_message());

    /* What a LoRA step on fp32 base weights launches: ten row kernels and
     * the folded optimizer's three, the
     * attention's forward GEMM, and the backward GEMMs in two variants
     * (the seed's tiles for outputs with a rank-16 side). */
    int va = default_variant("gemm_backward_a"), vb = default_variant("gemm_backward_b");
    int vacc = default_variant("gemm_backward_a_accumulate");
    char k[96];
    const char *plain[] = {"adamw_hyper_advance",     "batched_rms_norm_backward",
                           "rms_norm_gamma_reduce",   "silu_backward",
                           "residual_add",            "batched_softmax_backward",
                           "gemm_forward",            "squared_sum_reduce",
                           "gradient_clip_gpu_scale", "adamw_step_dev",
                           "clip_scale_reduce",       "adamw_multi_norm",
                           "adamw_multi_finalize",    "adamw_multi_step"};
    size_t nplain = sizeof plain / sizeof plain[0];
    for (size_t i = 0; i < nplain; i++)
        REQUIRE(has_key(&r, key_of(k, sizeof k, plain[i], -1)));
    REQUIRE(has_key(&r, key_of(k, sizeof k, "gemm_backward_a", va)));
    REQUIRE(has_key(&r, key_of(k, sizeof k, "gemm_backward_a", 0)));
    REQUIRE(has_key(&r, key_of(k, sizeof k, "gemm_backward_b", vb)));
    REQUIRE(has_key(&r, key_of(k, sizeof k, "gemm_backward_b", 0)));
    REQUIRE(has_key(&r, key_of(k, sizeof k, "gemm_backward_a_accumulate", vacc)));
    size_t expect = nplain + 3 + (va != 0) + (vb != 0);
    REQUIRE_INT_EQ(r.modules, expect);
    REQUIRE_INT_EQ(r.loaded, expect);
    REQUIRE_INT_EQ(r.hits, 0);
    REQUIRE_INT_EQ(fk.loads() - loads0, (int)expect);
    REQUIRE(!r.cublas); /* $PGRT_LIBCUBLAS names nothing here */
    /* jit_ms sums the modules' JITs; each thread runs its own in turn
     * within the call, so the sum stays within threads x total_ms */
    REQUIRE(r.threads >= 1 && r.jit_ms >= 0 && r.total_ms * r.threads >= r.jit_ms);
    for (size_t i = 0; i < r.modules; i++) {
        REQUIRE(r.list[i].loaded);
        for (size_t j = 0; j < i; j++)
            REQUIRE(strcmp(r.list[i].key, r.list[j].key) != 0);
    }
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.modules, expect);

    /* A second call: all hits, nothing loaded. */
    REQUIRE_INT_EQ(warm(ctx, &qwen_1p5b, &r), 0);
    REQUIRE_INT_EQ(r.modules, expect);
    REQUIRE_INT_EQ(r.loaded, 0);
    REQUIRE_INT_EQ(r.hits, expect);
    REQUIRE(r.jit_ms == 0.0);
    REQUIRE_INT_EQ(fk.loads() - loads0, (int)expect);

    /* Shapes do not make modules: a 7B-like shape, batch 4, is all hits. */
    shape big = {.m = {.hidden = 3584, .intermediate = 18944, .heads = 28, .kv_heads = 4,
                       .head_dim = 128},
                 .st = {.max_seq_len = 2048, .lora_rank = 64, .max_batch = 4}};
    REQUIRE_INT_EQ(warm(ctx, &big, &r), 0);
    REQUIRE_INT_EQ(r.loaded, 0);
    REQUIRE_INT_EQ(r.modules, nplain + 3); /* rank 64: no output is small */
    REQUIRE(!has_key(&r, key_of(k, sizeof k, "gemm_backward_a", 0)) || va == 0);

    /* Full fp32 training, no LoRA: no small outputs, a subset. */
    shape full = qwen_1p5b;
    full.st.lora_rank = 0;
    full.st.full_fp32 = true;
    REQUIRE_INT_EQ(warm(ctx, &full, &r), 0);
    REQUIRE_INT_EQ(r.modules, nplain + 3);
    REQUIRE_INT_EQ(r.loaded, 0);
    REQUIRE(!has_key(&r, key_of(k, sizeof k, "gemm_backward_b", 0)));

    /* f16 frozen weights: the cast and the tensor-core GEMM join. */
    shape f16 = qwen_1p5b;
    f16.st.f16_weights = true;
    REQUIRE_INT_EQ(warm(ctx, &f16, &r), 0);
    REQUIRE_INT_EQ(r.loaded, 2);
    REQUIRE(has_key(&r, key_of(k, sizeof k, "cast_f32_to_f16", -1)));
    REQUIRE(has_key(&r, key_of(k, sizeof k, "gemm_f16_backward_a",
                                default_variant("gemm_f16_backward_a"))));

    /* NULL report is fine. */
    REQUIRE_INT_EQ(warm(ctx, &qwen_1p5b, NULL), 0);
    pgrt_ctx_destroy(&ctx);
}

static void expect_bad(pgrt_ctx *ctx, const shape *c, int code, const char *needle)
{
    int loads0 = fk.loads();
    pgrt_prewarm_report r;
    REQUIRE_INT_EQ(warm(ctx, c, &r), code);
    REQUIRE_CONTAINS(pgrt_last_message(), needle);
    REQUIRE_INT_EQ(r.modules, 0);
    REQUIRE_INT_EQ(fk.loads(), loads0);
}

static void test_prewarm_bad(void)
{
    pgrt_ctx *ctx = open_ctx();
    shape c;
    expect_bad(ctx, NULL, PGRT_EINVAL, "model is NULL");
    REQUIRE_INT_EQ(pgrt_prewarm_model(ctx, &qwen_1p5b.m, NULL, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "step is NULL");
    REQUIRE_INT_EQ(warm(NULL, &qwen_1p5b, NULL), PGRT_EINVAL);

#define ZERO(half, field)                                                      \
    do {                                                                       \
        c = qwen_1p5b;                                                         \
        c.half.field = 0;                                                      \
        expect_bad(ctx, &c, PGRT_EINVAL, #field " is 0");                      \
    } while (0)
    ZERO(m, hidden);
    ZERO(m, intermediate);
    ZERO(m, heads);
    ZERO(m, kv_heads);
    ZERO(m, head_dim);
    ZERO(st, max_seq_len);
#undef ZERO
    c = qwen_1p5b;
    c.m.hidden = -1536;
    expect_bad(ctx, &c, PGRT_EINVAL, "model->hidden is -1536");
    c = qwen_1p5b;
    c.st.lora_rank = 0;
    expect_bad(ctx, &c, PGRT_EINVAL, "nothing trains");
    c = qwen_1p5b;
    c.m.kv_heads = 5;
    expect_bad(ctx, &c, PGRT_EINVAL, "model->heads (12) is not a multiple of model->kv_heads (5)");

    /* Sizes past what the kernels take: the message names the product. */
    c = qwen_1p5b;
    c.st.max_seq_len = 1u << 20;
    expect_bad(ctx, &c, PGRT_ERANGE, "max_seq_len * intermediate = 9395240960");
    c = qwen_1p5b;
    c.st.max_batch = 1024;
    expect_bad(ctx, &c, PGRT_ERANGE, "max_batch * max_seq_len * intermediate");
    c = qwen_1p5b;
    c.st.max_seq_len = 1u << 16;
    c.m.intermediate = (1u << 16) - 1; /* silu's n fits, barely */
    c.m.hidden = 1 << 17;
    c.m.heads = 1 << 10;
    c.m.kv_heads = 1;
    c.m.head_dim = 128;
    expect_bad(ctx, &c, PGRT_ERANGE, "max_seq_len * hidden");
    c = qwen_1p5b;
    c.st.max_seq_len = 1u << 25; /* GEMM rows past 2^24 */
    c.m.intermediate = 64;
    c.m.hidden = 64;
    c.m.heads = c.m.kv_heads = 1;
    c.m.head_dim = 64;
    expect_bad(ctx, &c, PGRT_ERANGE, "max_seq_len");
    pgrt_ctx_destroy(&ctx);

    /* f16 weights need sm_80. */
    setenv("FAKECUDA_CC", "75", 1);
    ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_ctx_target(ctx), PG_SM_75);
    c = qwen_1p5b;
    c.st.f16_weights = true;
    expect_bad(ctx, &c, PGRT_ETARGET, "gemm_f16_backward_a, which needs sm_80; the device is sm_75");
    pgrt_ctx_destroy(&ctx);
    unsetenv("FAKECUDA_CC");
}

/* ---------------------------------------------------------------- dispatch without cuBLAS */

static void expect_launch(const char *kernel, uint32_t m, uint32_t n, uint32_t k, uint32_t variant)
{
    const fakecuda_launch *l = fk.launch_at(fk.launch_count() - 1);
    REQUIRE(l != NULL);
    if (!l)
        return;
    REQUIRE_STR_EQ(l->name, kernel);
    const pgk_desc *d = pgk_find(kernel);
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, "m")] = m;
    kn.v[pgk_knob_index(d, "n")] = n;
    kn.v[pgk_knob_index(d, "k")] = k;
    kn.v[pgk_knob_index(d, "variant")] = variant;
    pgk_launch want;
    REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &want, NULL, 0), 0);
    for (int i = 0; i < 3; i++) {
        REQUIRE_INT_EQ(l->grid[i], want.grid[i]);
        REQUIRE_INT_EQ(l->block[i], want.block[i]);
    }
    REQUIRE_INT_EQ(l->nparams, 6);
    REQUIRE_INT_EQ(l->params[3], m);
    REQUIRE_INT_EQ(l->params[4], n);
    REQUIRE_INT_EQ(l->params[5], k);
}

static void test_no_cublas(void)
{
    setenv("PGRT_LIBCUBLAS", "/nonexistent/libcublas.so.13", 1);
    pgrt_ctx *ctx = open_ctx();
    pgrt_cublas_info info;
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE(info.enabled);
    REQUIRE(!info.available);
    REQUIRE(!info.in_use);
    REQUIRE_INT_EQ(info.version, 0);
    REQUIRE_STR_EQ(info.library, "");
    REQUIRE_CONTAINS(info.reason, "no cuBLAS library");
    REQUIRE_CONTAINS(info.reason, "/nonexistent/libcublas.so.13");

    int va = default_variant("gemm_backward_a"), vb = default_variant("gemm_backward_b");
    int vacc = default_variant("gemm_backward_a_accumulate");
    pgrt_buf *x = f32buf(ctx, 512 * 1536), *y = f32buf(ctx, 1536 * 1536),
             *z = f32buf(ctx, 512 * 1536);
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    pgrt_gemm_path path = PGRT_GEMM_CUBLAS;
    fk.reset();

    /* grad_A 17×16: small, the seed's tiles. */
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, z, 17, 15, 16, false, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_PTX);
    expect_launch("gemm_backward_a", 17, 15, 16, 0);
    /* grad_A 512×1536: the default tiles. */
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, z, 512, 256, 1536, false, &path), 0);
    expect_launch("gemm_backward_a", 512, 256, 1536, (uint32_t)va);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, NULL, x, y, z, 512, 16, 1536, true, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_PTX);
    expect_launch("gemm_backward_a_accumulate", 512, 16, 1536, (uint32_t)vacc);
    REQUIRE(fk.launch_at(fk.launch_count() - 1)->stream == NULL);
    /* grad_B 16×1536 (a LoRA B) and 1536×256. */
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, x, y, z, 512, 1536, 16, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_PTX);
    expect_launch("gemm_backward_b", 512, 1536, 16, 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, x, y, z, 512, 256, 1536, NULL), 0);
    expect_launch("gemm_backward_b", 512, 256, 1536, (uint32_t)vb);
    REQUIRE_INT_EQ(fk.launch_count(), 5);
    REQUIRE(fk.launch_at(0)->stream != NULL);
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE_INT_EQ(info.ptx_gemms, 5);

    /* The most output rows the GEMMs take launch, on grid y's 65535 blocks
     * of the seed's 16 rows; one more is refused naming the size and the
     * limit. (Up to 2^24 rows used to pass this check and then fail at the
     * launch: "the GPU cannot run (value out of range)".) */
    const uint32_t max_rows = 65535u * 16u;
    pgrt_buf *tall = f32buf(ctx, (size_t)max_rows + 1), *out = f32buf(ctx, (size_t)max_rows + 1);
    pgrt_buf *one = f32buf(ctx, 64);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, tall, one, out, max_rows, 1, 1, false, &path), 0);
    expect_launch("gemm_backward_a", max_rows, 1, 1, 0);
    REQUIRE_INT_EQ(fk.launch_at(fk.launch_count() - 1)->grid[1], 65535);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, tall, one, out, max_rows + 1, 1, 1, false, NULL),
                   PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "m = 1048561 is outside [1, 1048560]");
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, tall, one, out, 1, 1, max_rows, NULL), 0);
    expect_launch("gemm_backward_b", 1, 1, max_rows, 0);
    REQUIRE_INT_EQ(fk.launch_at(fk.launch_count() - 1)->grid[1], 65535);
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, tall, one, out, 1, 1, max_rows + 1, NULL),
                   PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "k = 1048561 is outside [1, 1048560]");
    pgrt_buf_destroy(&tall);
    pgrt_buf_destroy(&out);
    pgrt_buf_destroy(&one);
    REQUIRE_INT_EQ(info.cublas_gemms, 0);

    /* Operands. */
    pgrt_buf *h = NULL, *v = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F16, 64, &h), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, NULL, y, z, 4, 4, 4, false, &path), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "grad_c is NULL");
    REQUIRE_INT_EQ(path, 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, h, y, z, 4, 4, 4, false, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "grad_c holds f16 elements, not f32");
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, z, 0, 4, 4, false, NULL), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "m = 0 is outside [1, 1048560]");
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, x, y, z, 4, 1u << 25, 4, NULL), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "n = 33554432");
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, x, y, z, 1024, 1536, 1536, NULL), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "a holds 786432 elements; m=1024 n=1536 k=1536 need");
    REQUIRE_INT_EQ(pgrt_buf_view(y, 100, 1000, &v), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, v, 10, 20, 10, false, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "the output grad_a overlaps the input b");
    pgrt_buf_destroy(&v);
    /* Right after the 100 elements b takes: no overlap. */
    REQUIRE_INT_EQ(pgrt_buf_view(y, 100, 100, &v), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, v, 10, 10, 10, false, NULL), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(NULL, s, x, y, z, 4, 4, 4, false, NULL), PGRT_EINVAL);
    pgrt_buf_destroy(&v);
    pgrt_buf_destroy(&h);

    pgrt_stream_destroy(&s);
    pgrt_buf_destroy(&x);
    pgrt_buf_destroy(&y);
    pgrt_buf_destroy(&z);
    pgrt_ctx_destroy(&ctx);
    unsetenv("PGRT_LIBCUBLAS");
}

/* ---------------------------------------------------------------- the fake cuBLAS */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / 8388608.0 - 1.0);
}

static void fill(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rnd();
}

/* Largest |got - want| relative to the largest |want|. */
static double max_rel(const float *got, const double *want, size_t n)
{
    double e = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        w = fmax(w, fabs(want[i]));
    }
    return w > 0 ? e / w : e;
}

/* Row-major references. */
static void ref_a(const float *dc, const float *b, const float *pre, double *ga, int m, int n,
                  int k)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < k; j++) {
            double s = pre ? pre[i * k + j] : 0.0;
            for (int r = 0; r < n; r++)
                s += (double)dc[i * n + r] * b[j * n + r];
            ga[i * k + j] = s;
        }
}

static void ref_b(const float *a, const float *dc, double *gb, int m, int n, int k)
{
    for (int i = 0; i < k; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int r = 0; r < m; r++)
                s += (double)a[r * k + i] * dc[r * n + j];
            gb[i * n + j] = s;
        }
}

static void expect_gemm(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, float beta)
{
    const fakecublas_gemm *g = fb_at(fb_count() - 1);
    REQUIRE(g != NULL);
    if (!g)
        return;
    REQUIRE_INT_EQ(g->transa, ta);
    REQUIRE_INT_EQ(g->transb, tb);
    REQUIRE_INT_EQ(g->m, m);
    REQUIRE_INT_EQ(g->n, n);
    REQUIRE_INT_EQ(g->k, k);
    REQUIRE_INT_EQ(g->lda, lda);
    REQUIRE_INT_EQ(g->ldb, ldb);
    REQUIRE_INT_EQ(g->ldc, ldc);
    REQUIRE(g->alpha == 1.0f);
    REQUIRE(g->beta == beta);
    REQUIRE_INT_EQ(g->math_mode, 2);    /* CUBLAS_PEDANTIC_MATH */
    REQUIRE_INT_EQ(g->pointer_mode, 0); /* host scalars */
}

static void test_fake_cublas(void)
{
    setenv("PGRT_LIBCUBLAS", fake_blas, 1);
    pgrt_ctx *ctx = open_ctx();
    pgrt_cublas_info info;
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE(info.enabled && info.available && info.in_use);
    REQUIRE_INT_EQ(info.version, FAKECUBLAS_VERSION);
    REQUIRE_STR_EQ(info.library, fake_blas);
    REQUIRE_STR_EQ(info.reason, "");
    REQUIRE_INT_EQ(fb_live(), 1);

    /* Shapes with m, n, k all different, so that a swapped dimension or a
     * wrong transpose cannot pass. */
    static const int shapes[][3] = {{5, 7, 3}, {1, 9, 4}, {6, 1, 2}, {3, 4, 1}, {17, 15, 16}};
    enum { MAXE = 17 * 16 };
    float dc[MAXE], b[MAXE], a[MAXE], pre[MAXE], out[MAXE];
    double want[MAXE];
    pgrt_buf *bdc = f32buf(ctx, MAXE), *bb = f32buf(ctx, MAXE), *ba = f32buf(ctx, MAXE),
             *bo = f32buf(ctx, MAXE);
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    fb_reset();
    fk.reset();
    int launches0 = fk.launch_count();
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int m = shapes[t][0], n = shapes[t][1], k = shapes[t][2];
        fill(dc, (size_t)(m * n));
        fill(b, (size_t)(k * n));
        fill(a, (size_t)(m * k));
        fill(pre, (size_t)(m * k));
        REQUIRE_INT_EQ(pgrt_buf_upload(bdc, 0, dc, (size_t)(m * n)), 0);
        REQUIRE_INT_EQ(pgrt_buf_upload(bb, 0, b, (size_t)(k * n)), 0);
        REQUIRE_INT_EQ(pgrt_buf_upload(ba, 0, a, (size_t)(m * k)), 0);

        /* grad_A = dC·Bᵀ: sgemm(T, N, K, M, N, B, N, dC, N, grad_A, K). Its
         * old contents (NaN) must not leak in: beta 0 never reads them. */
        REQUIRE_INT_EQ(pgrt_buf_fill32(bo, 0x7fc00000u), 0);
        pgrt_gemm_path path = PGRT_GEMM_PTX;
        REQUIRE_INT_EQ(
            pgrt_gemm_backward_a(ctx, s, bdc, bb, bo, (uint32_t)m, (uint32_t)n, (uint32_t)k,
                                 false, &path), 0);
        REQUIRE_INT_EQ(path, PGRT_GEMM_CUBLAS);
        expect_gemm(1, 0, k, m, n, n, n, k, 0.0f);
        REQUIRE(fb_at(fb_count() - 1)->stream != NULL);
        REQUIRE_INT_EQ(pgrt_buf_download(bo, 0, out, (size_t)(m * k)), 0);
        ref_a(dc, b, NULL, want, m, n, k);
        REQUIRE(max_rel(out, want, (size_t)(m * k)) < 1e-6);

        /* grad_A += dC·Bᵀ: beta 1, on the default stream. */
        REQUIRE_INT_EQ(pgrt_buf_upload(bo, 0, pre, (size_t)(m * k)), 0);
        REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, NULL, bdc, bb, bo, (uint32_t)m, (uint32_t)n,
                                            (uint32_t)k, true, &path), 0);
        REQUIRE_INT_EQ(path, PGRT_GEMM_CUBLAS);
        expect_gemm(1, 0, k, m, n, n, n, k, 1.0f);
        REQUIRE(fb_at(fb_count() - 1)->stream == NULL);
        REQUIRE_INT_EQ(pgrt_buf_download(bo, 0, out, (size_t)(m * k)), 0);
        ref_a(dc, b, pre, want, m, n, k);
        REQUIRE(max_rel(out, want, (size_t)(m * k)) < 1e-6);

        /* grad_B = Aᵀ·dC: sgemm(N, T, N, K, M, dC, N, A, K, grad_B, N). */
        REQUIRE_INT_EQ(pgrt_buf_fill32(bo, 0x7fc00000u), 0);
        REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, ba, bdc, bo, (uint32_t)m, (uint32_t)n,
                                            (uint32_t)k, &path), 0);
        REQUIRE_INT_EQ(path, PGRT_GEMM_CUBLAS);
        expect_gemm(0, 1, n, k, m, n, k, n, 0.0f);
        REQUIRE_INT_EQ(pgrt_buf_download(bo, 0, out, (size_t)(k * n)), 0);
        ref_b(a, dc, want, m, n, k);
        REQUIRE(max_rel(out, want, (size_t)(k * n)) < 1e-6);
    }
    int ngemm = 3 * (int)(sizeof shapes / sizeof shapes[0]);
    REQUIRE_INT_EQ(fb_count(), ngemm);
    REQUIRE_INT_EQ(fk.launch_count(), launches0); /* no PTX kernel ran */
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE_INT_EQ(info.cublas_gemms, ngemm);
    REQUIRE_INT_EQ(info.ptx_gemms, 0);

    /* The switch: off runs the PTX kernel, on again cuBLAS. */
    REQUIRE_INT_EQ(pgrt_ctx_set_cublas(ctx, false), 0);
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE(!info.enabled && info.available && !info.in_use);
    REQUIRE_CONTAINS(info.reason, "turned off by pgrt_ctx_set_cublas");
    pgrt_gemm_path path = PGRT_GEMM_CUBLAS;
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, ba, bdc, bo, 5, 7, 3, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_PTX);
    REQUIRE_INT_EQ(fb_count(), ngemm);
    expect_launch("gemm_backward_b", 5, 7, 3, 0);
    REQUIRE_INT_EQ(pgrt_ctx_set_cublas(ctx, true), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, s, ba, bdc, bo, 5, 7, 3, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_CUBLAS);

    /* A cuBLAS failure is an error with its status, not a silent fallback. */
    setenv("FAKECUBLAS", "gemm", 1);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, bdc, bb, bo, 5, 7, 3, false, &path), PGRT_ECUDA);
    REQUIRE_CONTAINS(pgrt_last_message(), "cublasSgemm_v2: CUBLAS_STATUS_EXECUTION_FAILED");
    REQUIRE_CONTAINS(pgrt_last_message(), "gemm_backward_a");
    REQUIRE_INT_EQ(path, 0);
    unsetenv("FAKECUBLAS");

    /* Pre-warm makes the handle and reports it. */
    pgrt_prewarm_report r;
    REQUIRE_INT_EQ(warm(ctx, &qwen_1p5b, &r), 0);
    REQUIRE(r.cublas);

    pgrt_stream_destroy(&s);
    pgrt_buf_destroy(&bdc);
    pgrt_buf_destroy(&bb);
    pgrt_buf_destroy(&ba);
    pgrt_buf_destroy(&bo);
    pgrt_ctx_destroy(&ctx);
    REQUIRE_INT_EQ(fb_live(), 0); /* the handle went with its context */

    /* PTXGEN_CUBLAS=0: off from the start, nothing loaded until turned on. */
    setenv("PTXGEN_CUBLAS", "0", 1);
    ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE(!info.enabled && !info.available);
    REQUIRE_CONTAINS(info.reason, "turned off by PTXGEN_CUBLAS=0 (not loaded)");
    REQUIRE_INT_EQ(fb_live(), 0);
    pgrt_buf *x = f32buf(ctx, 64), *y = f32buf(ctx, 64), *z = f32buf(ctx, 64);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, NULL, x, y, z, 4, 4, 4, false, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_PTX);
    REQUIRE_INT_EQ(pgrt_ctx_set_cublas(ctx, true), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, NULL, x, y, z, 4, 4, 4, false, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_CUBLAS);
    REQUIRE_INT_EQ(fb_live(), 1);
    pgrt_buf_destroy(&x);
    pgrt_buf_destroy(&y);
    pgrt_buf_destroy(&z);
    pgrt_ctx_destroy(&ctx);
    unsetenv("PTXGEN_CUBLAS");

    /* A handle that cannot be made: not available, PTX runs. */
    setenv("FAKECUBLAS", "create", 1);
    ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_cublas_info_get(ctx, &info), 0);
    REQUIRE(info.enabled && !info.available);
    REQUIRE_CONTAINS(info.reason, "cublasCreate_v2: CUBLAS_STATUS_NOT_INITIALIZED");
    x = f32buf(ctx, 64);
    y = f32buf(ctx, 64);
    z = f32buf(ctx, 64);
    REQUIRE_INT_EQ(pgrt_gemm_backward_b(ctx, NULL, x, y, z, 4, 4, 4, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_PTX);
    pgrt_buf_destroy(&x);
    pgrt_buf_destroy(&y);
    pgrt_buf_destroy(&z);
    pgrt_ctx_destroy(&ctx);
    unsetenv("FAKECUBLAS");

    /* No load in the middle of a capture: the eager step would have run
     * other GEMMs than the graph. */
    ctx = open_ctx();
    x = f32buf(ctx, 64);
    y = f32buf(ctx, 64);
    z = f32buf(ctx, 64);
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, z, 4, 4, 4, false, &path), PGRT_ECAPTURE);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuBLAS is not loaded yet and a stream is capturing");
    REQUIRE_INT_EQ(pgrt_capture_abort(s), 0);
    REQUIRE_INT_EQ(fb_live(), 0);
    REQUIRE_INT_EQ(pgrt_gemm_backward_a(ctx, s, x, y, z, 4, 4, 4, false, &path), 0);
    REQUIRE_INT_EQ(path, PGRT_GEMM_CUBLAS);
    pgrt_stream_destroy(&s);
    pgrt_buf_destroy(&x);
    pgrt_buf_destroy(&y);
    pgrt_buf_destroy(&z);
    pgrt_ctx_destroy(&ctx);
    REQUIRE_INT_EQ(fb_live(), 0);
    unsetenv("PGRT_LIBCUBLAS");
}

/* pgrt_prewarm_list: one report entry a list entry, in list order; the
 * pool loads the longest PTX first (one thread: strictly in that order). */
static void test_prewarm_list(void)
{
    pgrt_ctx *ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_ctx_set_jit_threads(ctx, 1), 1);
    pgk_knobs v1;
    pgk_knobs_default(pgk_find("gemm_backward_a"), &v1);
    v1.v[pgk_knob_index(pgk_find("gemm_backward_a"), "variant")] = 1;
    const pgrt_warm list[] = {{"residual_add", NULL},  {"adamw_multi_step", NULL},
                              {"no_such_kernel", NULL}, {"gemm_backward_a", &v1},
                              {"gradient_clip", NULL}};
    const size_t n = sizeof list / sizeof list[0];
    static pgrt_prewarm_report r;
    int rcs[5];
    REQUIRE_INT_EQ(pgrt_prewarm_list(ctx, list, n, rcs, &r), PGRT_ENOTFOUND);
    REQUIRE_CONTAINS(pgrt_last_message(), "unknown kernel \"no_such_kernel\"");
    REQUIRE_INT_EQ(r.modules, n);
    REQUIRE_INT_EQ(r.loaded, n - 1);
    REQUIRE_INT_EQ(r.failed, 1);
    REQUIRE_INT_EQ(r.threads, 1);
    REQUIRE_INT_EQ(rcs[2], PGRT_ENOTFOUND);
    REQUIRE_STR_EQ(r.list[0].key, "residual_add@sm_90");
    REQUIRE_STR_EQ(r.list[3].key, "gemm_backward_a@sm_90,variant=1");
    for (size_t i = 0; i < n; i++) {
        if (i == 2)
            continue;
        REQUIRE(r.list[i].loaded && r.list[i].ptx_bytes > 500 && r.list[i].cubin_bytes > 0);
        REQUIRE(r.list[i].end_ms >= r.list[i].start_ms && r.list[i].start_ms >= 0);
        /* One thread: a longer PTX started earlier. */
        for (size_t j = 0; j < n; j++)
            if (j != 2 && r.list[j].ptx_bytes < r.list[i].ptx_bytes)
                REQUIRE(r.list[i].end_ms <= r.list[j].start_ms);
    }
    /* Loaded: a second call is all hits. */
    REQUIRE_INT_EQ(pgrt_prewarm_list(ctx, list, n, NULL, &r), PGRT_ENOTFOUND);
    REQUIRE_INT_EQ(r.hits, n - 1);
    REQUIRE_INT_EQ(r.loaded, 0);
    /* More entries than the report holds: refused before any load. */
    static pgrt_warm many[PGRT_PREWARM_MAX + 1];
    for (size_t i = 0; i < PGRT_PREWARM_MAX + 1; i++)
        many[i] = (pgrt_warm){"residual_add", NULL};
    REQUIRE_INT_EQ(pgrt_prewarm_list(ctx, many, PGRT_PREWARM_MAX + 1, NULL, &r), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "the report holds at most");
    REQUIRE_INT_EQ(pgrt_prewarm_list(ctx, many, PGRT_PREWARM_MAX + 1, NULL, NULL), 0);
    pgrt_ctx_destroy(&ctx);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA FAKE_LIBCUBLAS");
    if (argc < 3) {
        fprintf(stderr, "usage: %s FAKE_LIBCUDA FAKE_LIBCUBLAS\n", argv[0]);
        return 2;
    }
    fake_blas = argv[2];
    unsetenv("FAKECUBLAS");
    unsetenv("PTXGEN_CUBLAS");
    /* Whatever the machine has, the pre-warm tests run without cuBLAS. */
    setenv("PGRT_LIBCUBLAS", "/nonexistent/libcublas.so.13", 1);
    void *blas = dlopen(fake_blas, RTLD_NOW | RTLD_LOCAL);
    if (!blas) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    FAKE_BIND(blas, fb_reset, "fakecublas_reset");
    FAKE_BIND(blas, fb_count, "fakecublas_gemm_count");
    FAKE_BIND(blas, fb_at, "fakecublas_gemm_at");
    FAKE_BIND(blas, fb_live, "fakecublas_live_handles");

    test_prewarm();
    test_prewarm_bad();
    test_prewarm_list();
    test_no_cublas();
    test_fake_cublas();
    REQUIRE_INT_EQ(fk.live_modules(), 0);
    REQUIRE_INT_EQ(fk.live_allocs(), 0);
    TEST_DONE();
}
