/* SPDX-License-Identifier: MIT */
/* The synthetic training model of train_model.h. */
#include "train_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEACHER_B_STD 0.2
#define TEACHER_GAMMA_STD 0.2

/* ---------------------------------------------------------------- configuration */

void tmodel_config_default(tmodel_config *c)
{
    memset(c, 0, sizeof *c);
    c->layers = 28;
    c->hidden = 128;
    c->seq = 64;
    c->batch = 4;
    c->rank = 16;
    c->max_seq = 64;
    c->steps = 20;
    c->seed = 1;
    c->lr = 1e-2f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.0f;
    c->max_norm = 1e-3f;
    c->rms_eps = 1e-5f;
}

const char *tmodel_config_check(const tmodel_config *c)
{
    if (!c->layers || !c->hidden || !c->seq || !c->batch || !c->rank || !c->steps)
        return "layers, hidden, seq, batch, rank and steps must be at least 1";
    if (c->max_seq < c->seq)
        return "max_seq is below seq";
    if (c->layers > 4096)
        return "at most 4096 layers";
    if (c->hidden > 8192 || c->rank > c->hidden)
        return "hidden at most 8192, rank at most hidden";
    uint64_t m = (uint64_t)c->batch * c->max_seq;
    if (m > (1u << 20) || m * c->hidden > (1u << 28))
        return "batch * seq * hidden is too large (at most 2^28 activations a layer)";
    if ((uint64_t)c->layers * m * c->hidden > (1ull << 31))
        return "layers * batch * seq * hidden is too large (at most 2^31 saved activations)";
    return NULL;
}

/* ---------------------------------------------------------------- host init */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * 0x1p-53; }

static double rng_normal(rng *r)
{
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void fill(rng *r, float *p, size_t n, double mean, double std)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(mean + std * rng_normal(r));
}

int tmodel_init_make(const tmodel_config *c, tmodel_init *o)
{
    memset(o, 0, sizeof *o);
    size_t L = c->layers, H = c->hidden, R = c->rank;
    o->m_max = (size_t)c->batch * c->max_seq;
    o->x0 = malloc(o->m_max * H * sizeof(float));
    o->w = malloc(L * H * H * sizeof(float));
    o->a = malloc(L * H * R * sizeof(float));
    o->b = calloc(L * R * H, sizeof(float));
    o->gamma = malloc(L * H * sizeof(float));
    o->teacher_b = malloc(L * R * H * sizeof(float));
    o->teacher_gamma = malloc(L * H * sizeof(float));
    o->w_out = malloc(H * H * sizeof(float));
    if (!o->x0 || !o->w || !o->a || !o->b || !o->gamma || !o->teacher_b || !o->teacher_gamma ||
        !o->w_out) {
        tmodel_init_free(o);
        return -1;
    }
    /* Each array from its own stream of the seed: changing one size leaves
     * the others' numbers alone. */
    rng r = {c->seed * 0x100000001B3ull + 1};
    rng rx = {rng_next(&r)}, rw = {rng_next(&r)}, ra = {rng_next(&r)}, rt = {rng_next(&r)},
        ro = {rng_next(&r)};
    double s_in = 1.0 / sqrt((double)H);
    fill(&rx, o->x0, o->m_max * H, 0.0, 1.0);
    fill(&rw, o->w, L * H * H, 0.0, s_in);
    fill(&ra, o->a, L * H * R, 0.0, s_in);
    for (size_t i = 0; i < L * H; i++)
        o->gamma[i] = 1.0f;
    fill(&rt, o->teacher_b, L * R * H, 0.0, TEACHER_B_STD);
    fill(&rt, o->teacher_gamma, L * H, 1.0, TEACHER_GAMMA_STD);
    fill(&ro, o->w_out, H * H, 0.0, s_in);
    return 0;
}

void tmodel_init_free(tmodel_init *o)
{
    free(o->x0);
    free(o->w);
    free(o->a);
    free(o->b);
    free(o->gamma);
    free(o->teacher_b);
    free(o->teacher_gamma);
    free(o->w_out);
    memset(o, 0, sizeof *o);
}

/* ---------------------------------------------------------------- kernels */

enum {
    K_RMS_FWD, K_GEMM_FWD, K_GEMM_FWD_ACC, K_TRANSPOSE, K_SILU_FWD, K_SOFTMAX_FWD, K_RESIDUAL,
    K_MSE, K_GEMM_BA, K_GEMM_BA_ACC, K_GEMM_BB, K_SOFTMAX_BWD, K_SILU_BWD, K_RMS_BWD,
    K_GAMMA_REDUCE, K_COUNT
};

static const char *const kernel_names[K_COUNT] = {
    "rms_norm_forward", "gemm_forward", "gemm_forward_accumulate", "transpose", "silu_forward",
    "batched_softmax_forward", "residual_add", "mse_loss", "gemm_backward_a",
    "gemm_backward_a_accumulate", "gemm_backward_b", "batched_softmax_backward", "silu_backward",
    "batched_rms_norm_backward", "rms_norm_gamma_reduce",
};

/* The backward GEMMs bake a tiling variant: the 16x16 tiles (0) while the
 * output is too small to give the GPU enough 64x64 tiles (2). */
#define GEMM_VARIANTS 3
static uint32_t gemm_variant(uint32_t p, uint32_t q)
{
    uint64_t tiles = ((uint64_t)(p + 63) / 64) * ((q + 63) / 64);
    return tiles >= 128 ? 2 : 0;
}

/* ---------------------------------------------------------------- the model */

struct tmodel {
    pgrt_ctx *ctx;
    tmodel_config c;
    size_t m_max, per_layer; /* per_layer: H + 2 H R trainable floats */
    const pgk_desc *desc[K_COUNT];
    pgrt_kernel *kern[K_COUNT];
    pgrt_kernel *gemm_bwd[3][GEMM_VARIANTS]; /* [BA, BA_ACC, BB][variant]; NULL unless used */

    pgrt_buf *params, *teacher, *grads, *w, *w_out;
    pgrt_buf *x, *n, *t, *ht, *pt;  /* saved activations, per layer */
    pgrt_buf *h, *st, *p;           /* forward scratch */
    pgrt_buf *out, *target, *dout, *loss;
    pgrt_buf *g, *d1, *d2, *dh, *dt, *dn, *dxn, *partial; /* backward scratch */
    pgrt_buf **views;               /* param and grad views given to the pipeline */
    size_t nviews;
    pgrt_train *train;

    uint32_t target_seq; /* the seq the target was made for; 0: none */
    uint32_t *loss_seq;  /* per step slot: the seq it ran at (0: not run) */
    size_t loss_slot;    /* partials a step slot holds */
    bool sync_in_backward;
    pgrt_train_log_fn log;
    void *log_user;
};

static int alloc(tmodel *m, pgrt_buf **b, size_t n)
{
    return pgrt_buf_alloc(m->ctx, PG_F32, n, b);
}

static pgk_knobs knobs2(const pgk_desc *d, const char *a, uint32_t va, const char *b, uint32_t vb,
                        const char *c, uint32_t vc)
{
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    const char *names[3] = {a, b, c};
    uint32_t vals[3] = {va, vb, vc};
    for (int i = 0; i < 3; i++) {
        if (!names[i])
            continue;
        int j = pgk_knob_index(d, names[i]);
        if (j >= 0)
            kn.v[j] = vals[i];
    }
    return kn;
}

static int launch(tmodel *m, pgrt_stream *s, int k, const pgk_knobs *kn, const pgrt_arg *a,
                  size_t na)
{
    return pgrt_kernel_launch(m->kern[k], s, kn, a, na);
}

static pgrt_arg ptr_at(const pgrt_buf *b, size_t elem)
{
    return pgrt_arg_ptr(pgrt_buf_ptr(b) + (pgrt_devptr)(elem * sizeof(float)));
}

/* C[M,N] (+)= A[M,K] B[K,N]. */
static int gemm_fwd(tmodel *m, pgrt_stream *s, bool acc, pgrt_arg a, pgrt_arg b, pgrt_arg c,
                    uint32_t M, uint32_t N, uint32_t K)
{
    int k = acc ? K_GEMM_FWD_ACC : K_GEMM_FWD;
    pgk_knobs kn = knobs2(m->desc[k], "m", M, "n", N, "k", K);
    pgrt_arg args[6] = {a, b, c, pgrt_arg_u32(M), pgrt_arg_u32(N), pgrt_arg_u32(K)};
    return launch(m, s, k, &kn, args, 6);
}

/* which: 0 gemm_backward_a, 1 its accumulate form, 2 gemm_backward_b. */
static int gemm_bwd(tmodel *m, pgrt_stream *s, int which, pgrt_arg x, pgrt_arg y, pgrt_arg z,
                    uint32_t M, uint32_t N, uint32_t K)
{
    int k = which == 0 ? K_GEMM_BA : which == 1 ? K_GEMM_BA_ACC : K_GEMM_BB;
    uint32_t v = which == 2 ? gemm_variant(K, N) : gemm_variant(M, K);
    pgk_knobs kn = knobs2(m->desc[k], "m", M, "n", N, "k", K);
    int vi = pgk_knob_index(m->desc[k], "variant");
    if (vi >= 0)
        kn.v[vi] = v;
    pgrt_arg args[6] = {x, y, z, pgrt_arg_u32(M), pgrt_arg_u32(N), pgrt_arg_u32(K)};
    return pgrt_kernel_launch(m->gemm_bwd[which][v], s, &kn, args, 6);
}

static int transpose(tmodel *m, pgrt_stream *s, pgrt_arg in, pgrt_arg out, uint32_t rows,
                     uint32_t cols)
{
    pgk_knobs kn = knobs2(m->desc[K_TRANSPOSE], "rows", rows, "cols", cols, NULL, 0);
    pgrt_arg a[4] = {in, out, pgrt_arg_u32(rows), pgrt_arg_u32(cols)};
    return launch(m, s, K_TRANSPOSE, &kn, a, 4);
}

static int elementwise(tmodel *m, pgrt_stream *s, int k, const pgrt_arg *a, size_t na, uint32_t n)
{
    pgk_knobs kn = knobs2(m->desc[k], "n", n, NULL, 0, NULL, 0);
    return launch(m, s, k, &kn, a, na);
}

/* Offsets of a layer's trainables inside a [L][H + H R + R H] buffer. */
static size_t off_gamma(const tmodel *m, size_t l) { return l * m->per_layer; }
static size_t off_a(const tmodel *m, size_t l) { return l * m->per_layer + m->c.hidden; }
static size_t off_b(const tmodel *m, size_t l)
{
    return l * m->per_layer + m->c.hidden + (size_t)m->c.hidden * m->c.rank;
}

/* The forward of all layers and the output projection at seq, with the
 * trainables of `params` (the student's or the teacher's), into m->out. */
static int forward(tmodel *m, pgrt_stream *s, const pgrt_buf *params, uint32_t seq)
{
    const uint32_t H = m->c.hidden, R = m->c.rank, B = m->c.batch, M = B * seq;
    const size_t act = m->m_max * H, actr = m->m_max * R;
    int rc;
    for (size_t l = 0; l < m->c.layers; l++) {
        pgrt_arg x = ptr_at(m->x, l * act), xn = ptr_at(m->x, (l + 1) * act);
        pgrt_arg n = ptr_at(m->n, l * act), t = ptr_at(m->t, l * actr);
        pgrt_arg ht = ptr_at(m->ht, l * act), pt = ptr_at(m->pt, l * act);
        pgrt_arg h = pgrt_arg_buf(m->h), st = pgrt_arg_buf(m->st), p = pgrt_arg_buf(m->p);
        pgk_knobs kr = knobs2(m->desc[K_RMS_FWD], "rows", M, "cols", H, NULL, 0);
        pgrt_arg rms[6] = {x, ptr_at(params, off_gamma(m, l)), n, pgrt_arg_u32(M),
                           pgrt_arg_u32(H), pgrt_arg_f32(m->c.rms_eps)};
        pgk_knobs ks = knobs2(m->desc[K_SOFTMAX_FWD], "rows", H * B, "cols", seq, NULL,
                              0);
        pgrt_arg sm[4] = {st, pt, pgrt_arg_u32(H * B), pgrt_arg_u32(seq)};
        pgrt_arg silu[3] = {ht, st, pgrt_arg_u32(H * M)};
        pgrt_arg res[4] = {x, p, xn, pgrt_arg_u32(M * H)};
        if ((rc = launch(m, s, K_RMS_FWD, &kr, rms, 6)) ||
            (rc = gemm_fwd(m, s, false, n, ptr_at(m->w, l * H * H), h, M, H, H)) ||
            (rc = gemm_fwd(m, s, false, n, ptr_at(params, off_a(m, l)), t, M, R, H)) ||
            (rc = gemm_fwd(m, s, true, t, ptr_at(params, off_b(m, l)), h, M, H, R)) ||
            (rc = transpose(m, s, h, ht, M, H)) ||
            (rc = elementwise(m, s, K_SILU_FWD, silu, 3, H * M)) ||
            (rc = launch(m, s, K_SOFTMAX_FWD, &ks, sm, 4)) ||
            (rc = transpose(m, s, pt, p, H, M)) ||
            (rc = elementwise(m, s, K_RESIDUAL, res, 4, M * H)))
            return rc;
    }
    return gemm_fwd(m, s, false, ptr_at(m->x, m->c.layers * act), pgrt_arg_buf(m->w_out),
                    pgrt_arg_buf(m->out), M, H, H);
}

/* ---------------------------------------------------------------- backward callbacks */

/* g = dout W_out^T: the gradient reaching the last block's output. */
static int head_backward(void *user, pgrt_stream *s, uint32_t seq)
{
    tmodel *m = user;
    const uint32_t H = m->c.hidden, M = m->c.batch * seq;
    return gemm_bwd(m, s, 0, pgrt_arg_buf(m->dout), pgrt_arg_buf(m->w_out), pgrt_arg_buf(m->g), M,
                    H, H);
}

/* From g = dL/dx_{l+1} to the layer's gradients, leaving g = dL/dx_l. */
static int layer_backward(void *user, pgrt_stream *s, size_t l, uint32_t seq)
{
    tmodel *m = user;
    const uint32_t H = m->c.hidden, R = m->c.rank, B = m->c.batch, M = B * seq;
    const size_t act = m->m_max * H, actr = m->m_max * R;
    const size_t pl = m->per_layer;
    int rc;
    if (l == 0 && m->sync_in_backward && (rc = pgrt_stream_sync(s)))
        return rc;
    pgrt_arg g = pgrt_arg_buf(m->g), d1 = pgrt_arg_buf(m->d1), d2 = pgrt_arg_buf(m->d2);
    pgrt_arg dh = pgrt_arg_buf(m->dh), dt = pgrt_arg_buf(m->dt), dn = pgrt_arg_buf(m->dn);
    pgrt_arg dxn = pgrt_arg_buf(m->dxn), part = pgrt_arg_buf(m->partial);
    pgrt_arg x = ptr_at(m->x, l * act), n = ptr_at(m->n, l * act), t = ptr_at(m->t, l * actr);
    pgrt_arg ht = ptr_at(m->ht, l * act), pt = ptr_at(m->pt, l * act);
    pgrt_arg gamma = ptr_at(m->params, off_gamma(m, l));
    pgrt_arg a = ptr_at(m->params, off_a(m, l)), b = ptr_at(m->params, off_b(m, l));
    pgrt_arg dgamma = ptr_at(m->grads, 0), da = ptr_at(m->grads, H),
             db = ptr_at(m->grads, (size_t)H + (size_t)H * R);
    (void)pl;

    pgk_knobs ksm = knobs2(m->desc[K_SOFTMAX_BWD], "rows", H * B, "cols", seq, NULL, 0);
    pgrt_arg sm[5] = {pt, d1, d2, pgrt_arg_u32(H * B), pgrt_arg_u32(seq)};
    pgrt_arg silu[4] = {ht, d2, d1, pgrt_arg_u32(H * M)};
    pgk_knobs krms = knobs2(m->desc[K_RMS_BWD], "rows", M, "cols", H, NULL, 0);
    pgrt_arg rms[8] = {x, gamma, dn, dxn, part, pgrt_arg_u32(M), pgrt_arg_u32(H),
                       pgrt_arg_f32(m->c.rms_eps)};
    pgk_knobs kgr = knobs2(m->desc[K_GAMMA_REDUCE], "rows", M, "cols", H, NULL, 0);
    pgrt_arg gr[4] = {part, dgamma, pgrt_arg_u32(M), pgrt_arg_u32(H)};
    pgrt_arg res[4] = {g, dxn, g, pgrt_arg_u32(M * H)};

    if ((rc = transpose(m, s, g, d1, M, H)) ||                 /* dp^T */
        (rc = launch(m, s, K_SOFTMAX_BWD, &ksm, sm, 5)) ||     /* ds^T */
        (rc = elementwise(m, s, K_SILU_BWD, silu, 4, H * M)) || /* dh^T */
        (rc = transpose(m, s, d1, dh, H, M)) ||                /* dh */
        (rc = gemm_bwd(m, s, 2, t, dh, db, M, H, R)) ||        /* dB = t^T dh */
        (rc = gemm_bwd(m, s, 0, dh, b, dt, M, H, R)) ||        /* dt = dh B^T */
        (rc = gemm_bwd(m, s, 2, n, dt, da, M, R, H)) ||        /* dA = n^T dt */
        (rc = gemm_bwd(m, s, 0, dh, ptr_at(m->w, l * H * H), dn, M, H, H)) || /* dn = dh W^T */
        (rc = gemm_bwd(m, s, 1, dt, a, dn, M, R, H)) ||        /* dn += dt A^T */
        (rc = launch(m, s, K_RMS_BWD, &krms, rms, 8)) ||
        (rc = launch(m, s, K_GAMMA_REDUCE, &kgr, gr, 4)) ||
        (rc = elementwise(m, s, K_RESIDUAL, res, 4, M * H)))   /* g = dL/dx_l */
        return rc;
    return 0;
}

/* ---------------------------------------------------------------- create and destroy */

/* The pipeline hands its callbacks the model; its log lines go on to the
 * caller's logger with the caller's pointer. */
static void log_line(void *user, const char *line)
{
    tmodel *m = user;
    m->log(m->log_user, line);
}

static int load_kernels(tmodel *m)
{
    int rc;
    for (int k = 0; k < K_COUNT; k++) {
        m->desc[k] = pgk_find(kernel_names[k]);
        if (!m->desc[k])
            return PGRT_ENOTFOUND;
        if (k == K_GEMM_BA || k == K_GEMM_BA_ACC || k == K_GEMM_BB)
            continue;
        if ((rc = pgrt_kernel_get(m->ctx, m->desc[k], NULL, &m->kern[k])))
            return rc;
    }
    /* Every variant a step can pick, for every seq up to max_seq. */
    static const int which_k[3] = {K_GEMM_BA, K_GEMM_BA_ACC, K_GEMM_BB};
    const pgk_desc *d = m->desc[K_GEMM_BA];
    int vi = pgk_knob_index(d, "variant");
    for (int w = 0; w < 3; w++)
        for (uint32_t v = 0; v < GEMM_VARIANTS; v++) {
            bool used = false;
            for (uint32_t seq = 1; seq <= m->c.max_seq && !used; seq++) {
                uint32_t M = m->c.batch * seq, H = m->c.hidden, R = m->c.rank;
                used = gemm_variant(M, H) == v || gemm_variant(M, R) == v ||
                       gemm_variant(H, R) == v || gemm_variant(R, H) == v;
            }
            if (!used && v != 0)
                continue;
            pgk_knobs kn;
            pgk_knobs_default(m->desc[which_k[w]], &kn);
            if (vi >= 0)
                kn.v[vi] = v;
            else if (v != 0)
                continue;
            if ((rc = pgrt_kernel_get(m->ctx, m->desc[which_k[w]], &kn, &m->gemm_bwd[w][v])))
                return rc;
        }
    return 0;
}

int tmodel_create(pgrt_ctx *ctx, const tmodel_config *c, pgrt_train_graph graph,
                  pgrt_train_log_fn log, void *log_user, tmodel **out)
{
    *out = NULL;
    if (tmodel_config_check(c))
        return PGRT_EINVAL;
    tmodel *m = calloc(1, sizeof *m);
    if (!m)
        return PGRT_ENOMEM;
    m->ctx = ctx;
    m->c = *c;
    const size_t L = c->layers, H = c->hidden, R = c->rank;
    m->m_max = (size_t)c->batch * c->max_seq;
    m->per_layer = H + 2 * H * R;
    m->loss_slot = pgk_squared_sum_num_blocks((uint32_t)(m->m_max * H));
    pgrt_train_tensor *tensors = NULL;
    tmodel_init init;
    int rc = tmodel_init_make(c, &init);
    if (rc) {
        free(m);
        return PGRT_ENOMEM;
    }
    m->loss_seq = calloc(c->steps, sizeof *m->loss_seq);
    m->views = calloc(3 * L + 3, sizeof *m->views);
    m->log = log;
    m->log_user = log_user;
    float *host = malloc(L * m->per_layer * sizeof(float));
    if (!m->loss_seq || !m->views || !host) {
        rc = PGRT_ENOMEM;
        goto done;
    }
    const size_t act = m->m_max * H;
    if ((rc = load_kernels(m)) || (rc = alloc(m, &m->params, L * m->per_layer)) ||
        (rc = alloc(m, &m->teacher, L * m->per_layer)) || (rc = alloc(m, &m->grads, m->per_layer)) ||
        (rc = alloc(m, &m->w, L * H * H)) || (rc = alloc(m, &m->w_out, H * H)) ||
        (rc = alloc(m, &m->x, (L + 1) * act)) || (rc = alloc(m, &m->n, L * act)) ||
        (rc = alloc(m, &m->t, L * m->m_max * R)) || (rc = alloc(m, &m->ht, L * act)) ||
        (rc = alloc(m, &m->pt, L * act)) || (rc = alloc(m, &m->h, act)) ||
        (rc = alloc(m, &m->st, act)) || (rc = alloc(m, &m->p, act)) ||
        (rc = alloc(m, &m->out, act)) || (rc = alloc(m, &m->target, act)) ||
        (rc = alloc(m, &m->dout, act)) || (rc = alloc(m, &m->loss, c->steps * m->loss_slot)) ||
        (rc = alloc(m, &m->g, act)) || (rc = alloc(m, &m->d1, act)) || (rc = alloc(m, &m->d2, act)) ||
        (rc = alloc(m, &m->dh, act)) || (rc = alloc(m, &m->dt, m->m_max * R)) ||
        (rc = alloc(m, &m->dn, act)) || (rc = alloc(m, &m->dxn, act)) ||
        (rc = alloc(m, &m->partial, act)))
        goto done;

    /* Trainables: [gamma | A | B] a layer, student and teacher. */
    for (int who = 0; who < 2; who++) {
        for (size_t l = 0; l < L; l++) {
            float *dst = host + l * m->per_layer;
            memcpy(dst, (who ? init.teacher_gamma : init.gamma) + l * H, H * sizeof(float));
            memcpy(dst + H, init.a + l * H * R, H * R * sizeof(float));
            memcpy(dst + H + H * R, (who ? init.teacher_b : init.b) + l * R * H,
                   R * H * sizeof(float));
        }
        if ((rc = pgrt_buf_upload(who ? m->teacher : m->params, 0, host, L * m->per_layer)))
            goto done;
    }
    if ((rc = pgrt_buf_upload(m->w, 0, init.w, L * H * H)) ||
        (rc = pgrt_buf_upload(m->w_out, 0, init.w_out, H * H)) ||
        (rc = pgrt_buf_upload(m->x, 0, init.x0, act)) || (rc = pgrt_buf_memset(m->loss, 0)))
        goto done;

    /* The pipeline's tensors: gamma, A, B of each layer, one shared set of
     * gradient buffers (each layer's is consumed before the next). */
    tensors = calloc(3 * L, sizeof *tensors);
    if (!tensors) {
        rc = PGRT_ENOMEM;
        goto done;
    }
    const size_t sizes[3] = {H, H * R, R * H}, offs[3] = {0, H, H + H * R};
    pgrt_buf *grad_views[3] = {NULL, NULL, NULL};
    for (size_t j = 0; j < 3 && !rc; j++) {
        rc = pgrt_buf_view(m->grads, offs[j], sizes[j], &m->views[m->nviews]);
        grad_views[j] = m->views[m->nviews++];
    }
    for (size_t l = 0; l < L && !rc; l++)
        for (size_t j = 0; j < 3 && !rc; j++) {
            rc = pgrt_buf_view(m->params, l * m->per_layer + offs[j], sizes[j],
                               &m->views[m->nviews]);
            tensors[3 * l + j].param = m->views[m->nviews++];
            tensors[3 * l + j].grad = grad_views[j];
        }
    if (!rc) {
        pgrt_train_params tp = {
            .layers = L,
            .tensors_per_layer = 3,
            .tensors = tensors,
            .max_norm = c->max_norm,
            .lr = c->lr,
            .beta1 = c->beta1,
            .beta2 = c->beta2,
            .eps = c->eps,
            .weight_decay = c->weight_decay,
            .graph = graph,
            .layer_backward = layer_backward,
            .head = head_backward,
            .user = m,
            .log = log ? log_line : NULL,
        };
        rc = pgrt_train_create(ctx, &tp, &m->train);
    }

done:
    free(tensors);
    free(host);
    tmodel_init_free(&init);
    if (rc) {
        tmodel_destroy(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void tmodel_destroy(tmodel **pm)
{
    if (!pm || !*pm)
        return;
    tmodel *m = *pm;
    *pm = NULL;
    pgrt_train_destroy(&m->train);
    for (size_t i = 0; i < m->nviews; i++)
        pgrt_buf_destroy(&m->views[i]);
    pgrt_buf **all[] = {&m->params, &m->teacher, &m->grads, &m->w, &m->w_out, &m->x, &m->n,
                        &m->t, &m->ht, &m->pt, &m->h, &m->st, &m->p, &m->out, &m->target,
                        &m->dout, &m->loss, &m->g, &m->d1, &m->d2, &m->dh, &m->dt, &m->dn,
                        &m->dxn, &m->partial};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgrt_buf_destroy(all[i]);
    free(m->views);
    free(m->loss_seq);
    free(m);
}

/* ---------------------------------------------------------------- steps */

int tmodel_step(tmodel *m, pgrt_stream *s, uint32_t seq, uint32_t step)
{
    if (!m || seq == 0 || seq > m->c.max_seq || step >= m->c.steps)
        return PGRT_EINVAL;
    const uint32_t H = m->c.hidden, M = m->c.batch * seq;
    int rc;
    if (m->target_seq != seq) {
        if ((rc = forward(m, s, m->teacher, seq)) ||
            (rc = pgrt_buf_copy_async(m->target, 0, m->out, 0, (size_t)M * H, s)))
            return rc;
        m->target_seq = seq;
    }
    if ((rc = forward(m, s, m->params, seq)))
        return rc;
    pgrt_arg mse[5] = {pgrt_arg_buf(m->out), pgrt_arg_buf(m->target), pgrt_arg_buf(m->dout),
                       ptr_at(m->loss, (size_t)step * m->loss_slot), pgrt_arg_u32(M * H)};
    if ((rc = elementwise(m, s, K_MSE, mse, 5, M * H)))
        return rc;
    m->loss_seq[step] = seq;
    return pgrt_train_backward(m->train, s, seq);
}

int tmodel_losses(tmodel *m, pgrt_stream *s, uint32_t n, double *loss)
{
    if (!m || n > m->c.steps)
        return PGRT_EINVAL;
    int rc = pgrt_stream_sync(s);
    if (rc)
        return rc;
    float *part = malloc((size_t)n * m->loss_slot * sizeof(float) + 1);
    if (!part)
        return PGRT_ENOMEM;
    if (n && (rc = pgrt_buf_download(m->loss, 0, part, (size_t)n * m->loss_slot))) {
        free(part);
        return rc;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t seq = m->loss_seq[i];
        if (!seq) {
            loss[i] = NAN;
            continue;
        }
        uint32_t cnt = (uint32_t)m->c.batch * seq * m->c.hidden;
        uint32_t nb = pgk_squared_sum_num_blocks(cnt);
        double sum = 0;
        for (uint32_t b = 0; b < nb; b++)
            sum += part[(size_t)i * m->loss_slot + b];
        loss[i] = sum / cnt;
    }
    free(part);
    return 0;
}

size_t tmodel_param_count(const tmodel *m) { return m ? m->c.layers * m->per_layer : 0; }

int tmodel_params(tmodel *m, pgrt_stream *s, float *dst, size_t count)
{
    if (!m || count != tmodel_param_count(m))
        return PGRT_EINVAL;
    int rc = pgrt_stream_sync(s);
    return rc ? rc : pgrt_buf_download(m->params, 0, dst, count);
}

pgrt_train *tmodel_pipeline(tmodel *m) { return m ? m->train : NULL; }

size_t tmodel_launches_per_step(const tmodel *m)
{
    if (!m)
        return 0;
    pgrt_train_stats st;
    if (pgrt_train_stats_get(m->train, &st))
        return 0;
    /* forward: 9 a layer, the output projection and the loss; backward: the
     * head's GEMM and 12 a layer. */
    return m->c.layers * 9 + 2 + 1 + m->c.layers * 12 + st.launches_per_step;
}

void tmodel_set_sync_in_backward(tmodel *m, bool on)
{
    if (m)
        m->sync_in_backward = on;
}
