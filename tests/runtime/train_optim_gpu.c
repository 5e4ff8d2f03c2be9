/* SPDX-License-Identifier: MIT */
/*
 * The folded optimizer of pgrt_train (clip + multi-tensor AdamW) on the
 * GPU against a double-precision CPU reference: 24 tensors of ragged
 * sizes (1, 3, 17, 1000003, ...), half of them views at unaligned offsets
 * of one arena (the scalar path), half separate allocations (float4),
 * bf16 and f16 copies; per-layer and global norms, clipping off; a NaN
 * planted in one gradient skips the step (parameters, moments, step
 * counter untouched, the skip counted) eager and graphed; every update
 * bitwise identical run to run and eager against graphed; the per-tensor
 * fallback against the same reference. The gradients are written by the "backward"
 * callback (a device copy from a source the test fills), so graphs replay
 * the whole step.
 */
#include "gpu_util.h"
#include "ptxgen/pgrt_train.h"
#include "test.h"

#define LAYERS 4
#define PER 6
#define NT (LAYERS * PER)
#define STEPS 3

static const size_t sizes[NT] = {
    1,    3,     17,   1000003, 4096, 4097,  /* layer 0 */
    5,    1024,  1025, 255,     65537, 8,    /* layer 1 */
    2,    31,    70000, 4095,   12289, 7,    /* layer 2 */
    100,  3000,  1,    16,      333333, 9,   /* layer 3 */
};

static const float LR = 1e-2f, B1 = 0.9f, B2 = 0.999f, EPS = 1e-8f, WD = 0.1f;

typedef struct host_state {
    float *p[NT], *m[NT], *v[NT];
    uint32_t t; /* steps taken */
} host_state;

/* What a run needs on the device: parameters (separate or arena views),
 * gradients, the gradient sources the backward copies from, copies. */
typedef struct dev {
    pgrt_ctx *ctx;
    pgrt_stream *s;
    pgrt_buf *arena_p, *arena_g;
    pgrt_buf *p[NT], *g[NT], *src[NT], *copy[NT];
    pg_type copy_type[NT];
    pgrt_train_tensor tens[NT];
} dev;

static int backward(void *user, pgrt_stream *s, size_t layer, uint32_t seq)
{
    (void)seq;
    dev *d = user;
    for (size_t j = 0; j < PER; j++) {
        size_t i = layer * PER + j;
        int rc = pgrt_buf_copy_async(d->g[i], 0, d->src[i], 0, sizes[i], s);
        if (rc)
            return rc;
    }
    return 0;
}

static size_t total_of(void)
{
    size_t t = 0;
    for (int i = 0; i < NT; i++)
        t += sizes[i];
    return t;
}

/* Odd tensors are views at unaligned offsets (one element past a
 * 16-byte boundary, then packed); even ones separate allocations. */
static void dev_open(dev *d, pgrt_ctx *ctx, pgrt_stream *s, bool copies)
{
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->s = s;
    size_t total = total_of() + 1;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, total, &d->arena_p));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, total, &d->arena_g));
    size_t off = 1;
    for (int i = 0; i < NT; i++) {
        if (i % 2) {
            GPU_CHECK(pgrt_buf_view(d->arena_p, off, sizes[i], &d->p[i]));
            GPU_CHECK(pgrt_buf_view(d->arena_g, off, sizes[i], &d->g[i]));
            off += sizes[i];
        } else {
            GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &d->p[i]));
            GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &d->g[i]));
        }
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &d->src[i]));
        d->copy_type[i] = i / PER < 2 ? PG_BF16 : PG_F16;
        if (copies && i / PER < 3)
            GPU_CHECK(pgrt_buf_alloc(ctx, d->copy_type[i], sizes[i], &d->copy[i]));
        d->tens[i] = (pgrt_train_tensor){d->p[i], d->g[i], d->copy[i]};
    }
}

static void dev_close(dev *d)
{
    for (int i = 0; i < NT; i++) {
        pgrt_buf_destroy(&d->p[i]);
        pgrt_buf_destroy(&d->g[i]);
        pgrt_buf_destroy(&d->src[i]);
        pgrt_buf_destroy(&d->copy[i]);
    }
    pgrt_buf_destroy(&d->arena_p);
    pgrt_buf_destroy(&d->arena_g);
}

static pgrt_train *make(dev *d, pgrt_train_norm norm, float max_norm, pgrt_train_graph g,
                        pgrt_train_optimizer opt)
{
    pgrt_train_params p = {
        .layers = LAYERS,
        .tensors_per_layer = PER,
        .tensors = d->tens,
        .max_norm = max_norm,
        .lr = LR,
        .beta1 = B1,
        .beta2 = B2,
        .eps = EPS,
        .weight_decay = WD,
        .graph = g,
        .layer_backward = backward,
        .user = d,
        .norm = norm,
        .optimizer = opt,
    };
    pgrt_train *t = NULL;
    GPU_CHECK(pgrt_train_create(d->ctx, &p, &t));
    return t;
}

/* The host's initial parameters and per-step gradients, from one seed. */
typedef struct data {
    float *p0[NT];
    float *g[STEPS][NT];
} data;

static void data_make(data *x, uint64_t seed)
{
    rng r = {seed};
    for (int i = 0; i < NT; i++) {
        x->p0[i] = malloc(sizes[i] * sizeof(float));
        fill_grads(&r, x->p0[i], sizes[i], 1.0f);
        /* Layers' gradients of different sizes: some clip, some do not. */
        float scale = (i / PER) % 2 ? 1e-4f : 0.05f;
        for (int s = 0; s < STEPS; s++) {
            x->g[s][i] = malloc(sizes[i] * sizeof(float));
            fill_grads(&r, x->g[s][i], sizes[i], scale);
        }
    }
}

static void data_free(data *x)
{
    for (int i = 0; i < NT; i++) {
        free(x->p0[i]);
        for (int s = 0; s < STEPS; s++)
            free(x->g[s][i]);
    }
}

static void upload_params(dev *d, const data *x)
{
    for (int i = 0; i < NT; i++)
        GPU_CHECK(pgrt_buf_upload(d->p[i], 0, x->p0[i], sizes[i]));
}

static void upload_grads(dev *d, float *const *g)
{
    GPU_CHECK(pgrt_stream_sync(d->s));
    for (int i = 0; i < NT; i++)
        GPU_CHECK(pgrt_buf_upload(d->src[i], 0, g[i], sizes[i]));
}

/* ---- the reference: double precision */

typedef struct ref {
    double *p[NT], *m[NT], *v[NT];
    double b1t, b2t;
    uint32_t t;
} ref;

static void ref_init(ref *r, const data *x)
{
    for (int i = 0; i < NT; i++) {
        r->p[i] = malloc(sizes[i] * sizeof(double));
        r->m[i] = calloc(sizes[i], sizeof(double));
        r->v[i] = calloc(sizes[i], sizeof(double));
        for (size_t e = 0; e < sizes[i]; e++)
            r->p[i][e] = x->p0[i][e];
    }
    r->b1t = r->b2t = 1.0;
    r->t = 0;
}

static void ref_free(ref *r)
{
    for (int i = 0; i < NT; i++) {
        free(r->p[i]);
        free(r->m[i]);
        free(r->v[i]);
    }
}

/* One step; false when a non-finite norm skips it. */
static bool ref_step(ref *r, float *const *g, pgrt_train_norm norm, float max_norm)
{
    double coef[LAYERS];
    bool clip = norm != PGRT_TRAIN_NORM_OFF && max_norm > 0;
    double all = 0;
    bool finite = true;
    for (int l = 0; l < LAYERS; l++) {
        double s = 0;
        for (int j = 0; j < PER; j++)
            for (size_t e = 0; e < sizes[l * PER + j]; e++)
                s += (double)g[l * PER + j][e] * g[l * PER + j][e];
        all += s;
        double nrm = sqrt(s);
        finite &= isfinite(nrm);
        coef[l] = fmin(1.0, max_norm / nrm);
    }
    if (norm == PGRT_TRAIN_NORM_GLOBAL) {
        double c = fmin(1.0, max_norm / (sqrt(all) + 1e-6));
        for (int l = 0; l < LAYERS; l++)
            coef[l] = c;
    }
    if (clip && !finite)
        return false;
    r->t++;
    r->b1t *= B1;
    r->b2t *= B2;
    double bc1 = 1.0 - r->b1t, bc2 = 1.0 - r->b2t;
    for (int i = 0; i < NT; i++) {
        double c = clip ? coef[i / PER] : 1.0;
        for (size_t e = 0; e < sizes[i]; e++) {
            double gg = g[i][e] * c;
            double *m = &r->m[i][e], *v = &r->v[i][e], *p = &r->p[i][e];
            *m = B1 * *m + (1.0 - B1) * gg;
            *v = B2 * *v + (1.0 - B2) * gg * gg;
            *p = *p * (1.0 - (double)LR * WD) - LR * (*m / bc1) / (sqrt(*v / bc2) + EPS);
        }
    }
    return true;
}

/* ---- reading the device back */

typedef struct snap {
    float *p[NT], *m[NT], *v[NT];
    uint16_t *c[NT];
    float hyper[PGK_HYPER_COUNT];
} snap;

/* Parameters, copies and the hyper buffer. The moments are the
 * pipeline's own: they are checked by their effect on the next steps'
 * parameters (a skipped step that touched them would show there). */
static void snap_take(snap *sn, dev *d, pgrt_train *t)
{
    GPU_CHECK(pgrt_stream_sync(d->s));
    for (int i = 0; i < NT; i++) {
        sn->p[i] = malloc(sizes[i] * sizeof(float));
        GPU_CHECK(pgrt_buf_download(d->p[i], 0, sn->p[i], sizes[i]));
        sn->c[i] = NULL;
        if (d->copy[i]) {
            sn->c[i] = malloc(sizes[i] * 2);
            GPU_CHECK(pgrt_buf_download(d->copy[i], 0, sn->c[i], sizes[i]));
        }
    }
    GPU_CHECK(pgrt_buf_download(pgrt_train_hyper_buf(t), 0, sn->hyper, PGK_HYPER_COUNT));
}

static void snap_free(snap *sn)
{
    for (int i = 0; i < NT; i++) {
        free(sn->p[i]);
        free(sn->c[i]);
    }
}

static bool snap_same(const snap *a, const snap *b, const char *what)
{
    for (int i = 0; i < NT; i++) {
        if (memcmp(a->p[i], b->p[i], sizes[i] * sizeof(float))) {
            fprintf(stderr, "%s: tensor %d (%zu elements) differs\n", what, i, sizes[i]);
            return false;
        }
        if (a->c[i] && b->c[i] && memcmp(a->c[i], b->c[i], sizes[i] * 2)) {
            fprintf(stderr, "%s: the copy of tensor %d differs\n", what, i);
            return false;
        }
    }
    return memcmp(a->hyper, b->hyper, sizeof a->hyper) == 0;
}

static uint16_t bf16_rne(float f)
{
    uint32_t b = f32_bits(f);
    if (f != f)
        return (uint16_t)((b >> 16) | 0x40);
    return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* The parameters against the reference; the copies against the
 * parameters. */
static void check_against(const snap *sn, const ref *r, const dev *d, const char *what)
{
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < NT; i++)
        for (size_t e = 0; e < sizes[i]; e++) {
            double want = r->p[i][e], got = sn->p[i][e];
            double err = fabs(got - want) / (1e-6 * fabs(want) + 2e-4 * LR);
            worst = err > worst ? err : worst;
            if (!(err <= 1.0) && bad++ < 5)
                fprintf(stderr, "%s: tensor %d element %zu: %.9g, reference %.9g\n", what, i, e,
                        got, want);
            if (!d->copy[i] || r->t == 0) /* no update has written the copy yet */
                continue;
            if (d->copy_type[i] == PG_BF16) {
                if (sn->c[i][e] != bf16_rne(sn->p[i][e]) && bad++ < 5)
                    fprintf(stderr, "%s: bf16 copy of tensor %d element %zu: %04x for %.9g\n",
                            what, i, e, sn->c[i][e], (double)sn->p[i][e]);
            } else {
                double h = f16_value(sn->c[i][e]), x = sn->p[i][e];
                if (!(fabs(h - x) <= fabs(x) * (1.0 / 2048) + 3e-8) && bad++ < 5)
                    fprintf(stderr, "%s: f16 copy of tensor %d element %zu: %g for %.9g\n", what,
                            i, e, h, x);
            }
        }
    fprintf(stderr, "%s: worst error %.3f of the tolerance\n", what, worst);
    REQUIRE_INT_EQ(bad, 0);
    REQUIRE(sn->hyper[PGK_HYPER_STEP] == (float)r->t);
}

/* Steps of one configuration against the reference; a NaN planted in
 * step `nan_step` (-1: none). Returns the final snapshot. */
static void run_config(pgrt_ctx *ctx, pgrt_stream *s, const data *x, pgrt_train_norm norm,
                       float max_norm, pgrt_train_graph g, int nan_step, const char *what,
                       snap *out)
{
    dev d;
    dev_open(&d, ctx, s, true);
    upload_params(&d, x);
    pgrt_train *t = make(&d, norm, max_norm, g, PGRT_TRAIN_OPT_AUTO);
    REQUIRE(pgrt_train_folded(t));
    ref r;
    ref_init(&r, x);
    uint32_t skips = 0;
    for (int step = 0; step < STEPS; step++) {
        float *gs[NT];
        memcpy(gs, x->g[step], sizeof gs);
        float *planted = NULL;
        if (step == nan_step) {
            planted = malloc(sizes[17] * sizeof(float));
            memcpy(planted, gs[17], sizes[17] * sizeof(float));
            planted[sizes[17] / 2] = NAN;
            gs[17] = planted;
        }
        upload_grads(&d, gs);
        snap before;
        snap_take(&before, &d, t);
        GPU_CHECK(pgrt_train_backward(t, s, 64));
        bool took = ref_step(&r, gs, norm, max_norm);
        uint32_t skipped = 99;
        bool last = true;
        GPU_CHECK(pgrt_train_skipped(t, s, &skipped, &last));
        skips += !took;
        REQUIRE_INT_EQ(skipped, skips);
        REQUIRE_INT_EQ(last, !took);
        snap after;
        snap_take(&after, &d, t);
        char label[160];
        snprintf(label, sizeof label, "%s, step %d", what, step + 1);
        if (!took)
            REQUIRE(snap_same(&before, &after, label)); /* nothing written, t unchanged */
        check_against(&after, &r, &d, label);
        /* The gradients are never written. */
        for (int i = 0; i < NT; i += 5) {
            float *gb = malloc(sizes[i] * sizeof(float));
            GPU_CHECK(pgrt_buf_download(d.g[i], 0, gb, sizes[i]));
            REQUIRE(memcmp(gb, gs[i], sizes[i] * sizeof(float)) == 0);
            free(gb);
        }
        if (step == STEPS - 1)
            *out = after;
        else
            snap_free(&after);
        snap_free(&before);
        free(planted);
    }
    if (norm != PGRT_TRAIN_NORM_OFF) {
        float scale = 0, nrm = 0;
        GPU_CHECK(pgrt_train_layer_norm(t, s, 1, &scale, &nrm));
        REQUIRE(scale > 0 && scale <= 1 && nrm > 0);
    }
    ref_free(&r);
    pgrt_train_destroy(&t);
    dev_close(&d);
}

/* The per-tensor fallback from the same data (per-layer norm) against the
 * reference. */
static void run_fallback(pgrt_ctx *ctx, pgrt_stream *s, const data *x, float max_norm)
{
    dev d;
    dev_open(&d, ctx, s, false);
    upload_params(&d, x);
    pgrt_train *t = make(&d, PGRT_TRAIN_NORM_LAYER, max_norm, PGRT_TRAIN_GRAPH_OFF,
                         PGRT_TRAIN_OPT_PER_TENSOR);
    REQUIRE(!pgrt_train_folded(t));
    ref r;
    ref_init(&r, x);
    for (int step = 0; step < STEPS; step++) {
        upload_grads(&d, x->g[step]);
        GPU_CHECK(pgrt_train_backward(t, s, 64));
        ref_step(&r, x->g[step], PGRT_TRAIN_NORM_LAYER, max_norm);
    }
    snap out;
    snap_take(&out, &d, t);
    check_against(&out, &r, &d, "per-tensor fallback, eager, step 3");
    snap_free(&out);
    ref_free(&r);
    pgrt_train_destroy(&t);
    dev_close(&d);
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    data x;
    data_make(&x, test_seed("test_train_optim_gpu"));
    /* max_norm 1: the 0.05-scale layers (norms ~30 for the big ones) clip,
     * the 1e-4-scale ones do not. */
    const float max_norm = 1.0f;

    snap le, other;
    run_config(ctx, s, &x, PGRT_TRAIN_NORM_LAYER, max_norm, PGRT_TRAIN_GRAPH_OFF, -1,
               "per-layer norm, eager", &le);
    if (gpu_quick()) {
        /* Under the sanitizers: one graphed run with the skip path. */
        run_config(ctx, s, &x, PGRT_TRAIN_NORM_GLOBAL, max_norm, PGRT_TRAIN_GRAPH_ON, 1,
                   "global norm, NaN in step 2, graphed", &other);
        snap_free(&other);
    } else {
        snap lg, le2, ge, gg;
        run_config(ctx, s, &x, PGRT_TRAIN_NORM_LAYER, max_norm, PGRT_TRAIN_GRAPH_ON, -1,
                   "per-layer norm, graphed", &lg);
        run_config(ctx, s, &x, PGRT_TRAIN_NORM_LAYER, max_norm, PGRT_TRAIN_GRAPH_OFF, -1,
                   "per-layer norm, eager again", &le2);
        REQUIRE(snap_same(&le, &le2, "per-layer eager, run to run"));
        REQUIRE(snap_same(&le, &lg, "per-layer eager against graphed"));
        run_config(ctx, s, &x, PGRT_TRAIN_NORM_GLOBAL, max_norm, PGRT_TRAIN_GRAPH_OFF, -1,
                   "global norm, eager", &ge);
        run_config(ctx, s, &x, PGRT_TRAIN_NORM_GLOBAL, max_norm, PGRT_TRAIN_GRAPH_ON, -1,
                   "global norm, graphed", &gg);
        REQUIRE(snap_same(&ge, &gg, "global eager against graphed"));
        snap *done[] = {&lg, &le2, &ge, &gg};
        for (size_t i = 0; i < 4; i++)
            snap_free(done[i]);
        static const struct {
            pgrt_train_norm norm;
            pgrt_train_graph graph;
            int nan_step;
            const char *what;
        } more[] = {
            {PGRT_TRAIN_NORM_OFF, PGRT_TRAIN_GRAPH_ON, -1, "clipping off, graphed"},
            {PGRT_TRAIN_NORM_GLOBAL, PGRT_TRAIN_GRAPH_OFF, 1, "global norm, NaN in step 2, eager"},
            {PGRT_TRAIN_NORM_GLOBAL, PGRT_TRAIN_GRAPH_ON, 1, "global norm, NaN in step 2, graphed"},
            {PGRT_TRAIN_NORM_LAYER, PGRT_TRAIN_GRAPH_ON, 0, "per-layer norm, NaN in step 1, graphed"},
            {PGRT_TRAIN_NORM_LAYER, PGRT_TRAIN_GRAPH_OFF, 2, "per-layer norm, NaN in step 3, eager"},
        };
        for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
            run_config(ctx, s, &x, more[i].norm, max_norm, more[i].graph, more[i].nan_step,
                       more[i].what, &other);
            snap_free(&other);
        }
    }
    run_fallback(ctx, s, &x, max_norm);
    snap_free(&le);
    data_free(&x);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
