/* SPDX-License-Identifier: MIT */
/*
 * pgrt_lm on the GPU against a double-precision CPU reference at tiny
 * dimensions: a Qwen2 (tied head, q/k/v biases) and a LLaMA (untied head,
 * attention biases) written by the test, a random adapter with B nonzero;
 * and the Qwen2 with an adapter whose rank_pattern and alpha_pattern give
 * its pairs other ranks and scales, so that each LoRA path takes some
 * (thin kernels, the f32 GEMMs past their ranks, on sm_90a in bf16 the
 * base GEMMs), with groups of q, k, v and of gate, up split by rank or
 * scale.
 *
 *   f32:  the step-1 loss within 1e-5 of the double forward, each LoRA
 *         gradient within 1e-4 (relative Frobenius) of central finite
 *         differences of the double loss;
 *   bf16: loss within 1e-2, each gradient's cosine with them >= 0.99;
 *   graph: three graphed steps give the eager steps' losses bit for bit.
 *
 * Skipped (77) without a driver or a device.
 */
#include "gpu_util.h"
#include "model_util.h"
#include "ptxgen/pgrt_lm.h"
#include "test.h"

enum { H = 32, I = 48, L = 2, NH = 4, NKV = 2, D = 8, V = 40, B = 2, S = 8, T = B * S, R = 4 };
#define EPS 1e-6
#define THETA 10000.0

typedef struct ref_model {
    bool llama;
    double *w[L][PGRT_LINEAR_COUNT], *bias[L][PGRT_LINEAR_COUNT];
    double *nin[L], *npost[L], *nfin, *emb, *head;
    double *a[L][PGRT_LINEAR_COUNT], *b[L][PGRT_LINEAR_COUNT]; /* LoRA, as the adapter */
    int r[L][PGRT_LINEAR_COUNT];        /* each pair's rank and scale (pgrt_lora) */
    double scale[L][PGRT_LINEAR_COUNT];
} ref_model;

#define RMAX 128 /* the largest rank a pair takes here */

static double *dnew(size_t n) { return calloc(n, sizeof(double)); }

static void rms(const double *x, const double *g, double *y)
{
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < H; i++)
            ss += x[t * H + i] * x[t * H + i];
        double r = 1.0 / sqrt(ss / H + EPS);
        for (int i = 0; i < H; i++)
            y[t * H + i] = g[i] * x[t * H + i] * r;
    }
}

static void dims(pgrt_linear m, int *in, int *out)
{
    static const int ins[] = {H, H, H, NH * D, H, H, I};
    static const int outs[] = {NH * D, NKV * D, NKV * D, H, I, I, H};
    *in = ins[m];
    *out = outs[m];
}

static void linear(const ref_model *m, int l, pgrt_linear k, const double *x, double *y)
{
    int in, out;
    dims(k, &in, &out);
    int r = m->r[l][k];
    for (int t = 0; t < T; t++) {
        double xa[RMAX];
        for (int j = 0; j < r; j++) {
            xa[j] = 0;
            for (int i = 0; i < in; i++)
                xa[j] += x[t * in + i] * m->a[l][k][j * in + i];
        }
        for (int o = 0; o < out; o++) {
            double v = m->bias[l][k] ? m->bias[l][k][o] : 0;
            for (int i = 0; i < in; i++)
                v += x[t * in + i] * m->w[l][k][o * in + i];
            for (int j = 0; j < r; j++)
                v += m->scale[l][k] * xa[j] * m->b[l][k][o * r + j];
            y[t * out + o] = v;
        }
    }
}

/* The batch the reference reads: targets NULL (the next id in the row),
 * pos and docs NULL (one document a row at positions 0 .. S-1). */
typedef struct ref_batch {
    const int32_t *ids, *targets, *pos, *docs;
} ref_batch;

static void rope(double *x, int heads, const ref_batch *bt)
{
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < D / 2; i++) {
                double at = bt->pos ? bt->pos[t] : t % S;
                double ang = at / pow(THETA, 2.0 * i / D), c = cos(ang), s = sin(ang);
                double *p = x + (t * heads + h) * D;
                double x1 = p[i], x2 = p[i + D / 2];
                p[i] = x1 * c - x2 * s;
                p[i + D / 2] = x2 * c + x1 * s;
            }
}

/* The mean cross-entropy over the batch's targets (*count of them). */
static double ref_loss_batch(const ref_model *m, const ref_batch *bt, int *count)
{
    const int32_t *ids = bt->ids;
    double *x = dnew(T * H), *h = dnew(T * H), *q = dnew(T * NH * D), *k = dnew(T * NKV * D),
           *v = dnew(T * NKV * D), *att = dnew(T * NH * D), *o = dnew(T * H), *g = dnew(T * I),
           *u = dnew(T * I);
    for (int t = 0; t < T; t++)
        memcpy(x + t * H, m->emb + ids[t] * H, H * sizeof(double));
    for (int l = 0; l < L; l++) {
        rms(x, m->nin[l], h);
        linear(m, l, PGRT_LINEAR_Q, h, q);
        linear(m, l, PGRT_LINEAR_K, h, k);
        linear(m, l, PGRT_LINEAR_V, h, v);
        rope(q, NH, bt);
        rope(k, NKV, bt);
        for (int b = 0; b < B; b++)
            for (int hh = 0; hh < NH; hh++)
                for (int s = 0; s < S; s++) {
                    int kh = hh / (NH / NKV), j0 = bt->docs ? bt->docs[b * S + s] : 0;
                    const double *qr = q + ((b * S + s) * NH + hh) * D;
                    double sc[S], mx = -INFINITY, sum = 0;
                    for (int j = j0; j <= s; j++) {
                        const double *kr = k + ((b * S + j) * NKV + kh) * D;
                        sc[j] = 0;
                        for (int e = 0; e < D; e++)
                            sc[j] += qr[e] * kr[e];
                        sc[j] /= sqrt((double)D);
                        mx = fmax(mx, sc[j]);
                    }
                    for (int j = j0; j <= s; j++)
                        sum += (sc[j] = exp(sc[j] - mx));
                    double *orow = att + ((b * S + s) * NH + hh) * D;
                    for (int e = 0; e < D; e++) {
                        orow[e] = 0;
                        for (int j = j0; j <= s; j++)
                            orow[e] += sc[j] / sum * v[((b * S + j) * NKV + kh) * D + e];
                    }
                }
        linear(m, l, PGRT_LINEAR_O, att, o);
        for (int i = 0; i < T * H; i++)
            x[i] += o[i];
        rms(x, m->npost[l], h);
        linear(m, l, PGRT_LINEAR_GATE, h, g);
        linear(m, l, PGRT_LINEAR_UP, h, u);
        for (int i = 0; i < T * I; i++)
            g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        linear(m, l, PGRT_LINEAR_DOWN, g, o);
        for (int i = 0; i < T * H; i++)
            x[i] += o[i];
    }
    rms(x, m->nfin, h);
    const double *hw = m->head ? m->head : m->emb;
    double loss = 0;
    int n = 0;
    for (int t = 0; t < T; t++) {
        int y = bt->targets ? bt->targets[t] : t % S == S - 1 ? -100 : ids[t + 1];
        if (y < 0)
            continue;
        n++;
        double lg[V], mx = -INFINITY, sum = 0;
        for (int c = 0; c < V; c++) {
            lg[c] = 0;
            for (int i = 0; i < H; i++)
                lg[c] += h[t * H + i] * hw[c * H + i];
            mx = fmax(mx, lg[c]);
        }
        for (int c = 0; c < V; c++)
            sum += exp(lg[c] - mx);
        loss += mx + log(sum) - lg[y];
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(g), free(u);
    if (count)
        *count = n;
    return loss / n;
}

static double ref_loss(const ref_model *m, const int32_t *ids)
{
    ref_batch bt = {.ids = ids};
    return ref_loss_batch(m, &bt, NULL);
}

/* ---------------------------------------------------------------- the files */

/* A standard normal from two uniforms in (0, 1] (rng_unit is in [-1, 1)). */
static double gauss(rng *r)
{
    double a = 0.5 * (rng_unit(r) + 1.0) + 1e-12, b = 0.5 * (rng_unit(r) + 1.0);
    return sqrt(-2 * log(a)) * cos(6.283185307179586 * b);
}

/* Random f32 tensor named name, mirrored into *ref (double). */
typedef struct wlist {
    pgrt_st_out t[64];
    float *data[64];
    char *names[64];
    size_t n;
} wlist;

static double *add_w(wlist *w, rng *r, const char *name, int rows, int cols, double mean,
                     double std)
{
    size_t n = (size_t)rows * (cols ? cols : 1);
    float *f = malloc(n * sizeof *f);
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i] = (float)(mean + std * gauss(r));
    pgrt_st_out *o = &w->t[w->n];
    o->name = w->names[w->n] = strdup(name);
    o->dtype = PGRT_ST_F32;
    o->ndim = cols ? 2 : 1;
    o->shape[0] = rows;
    o->shape[1] = cols;
    o->data = f;
    w->data[w->n++] = f;
    return d;
}

static void write_model(const char *dir, bool llama, ref_model *m, rng *r)
{
    char p[4096], name[128];
    REQUIRE(write_hf_config(dir, llama, H, I, L, NH, NKV, V) == 0);
    memset(m, 0, sizeof *m);
    m->llama = llama;
    wlist w = {.n = 0};
    m->emb = add_w(&w, r, "model.embed_tokens.weight", V, H, 0, 0.5);
    m->nfin = add_w(&w, r, "model.norm.weight", H, 0, 1, 0.1);
    if (llama)
        m->head = add_w(&w, r, "lm_head.weight", V, H, 0, 0.3);
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        m->nin[l] = add_w(&w, r, name, H, 0, 1, 0.1);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        m->npost[l] = add_w(&w, r, name, H, 0, 1, 0.1);
        for (int k = 0; k < PGRT_LINEAR_COUNT; k++) {
            int in, out;
            dims((pgrt_linear)k, &in, &out);
            const char *blk = k <= PGRT_LINEAR_O ? "self_attn" : "mlp";
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, blk,
                     pgrt_linear_name((pgrt_linear)k));
            m->w[l][k] = add_w(&w, r, name, out, in, 0, 0.6 / sqrt(in));
            if (k <= PGRT_LINEAR_V || (llama && k == PGRT_LINEAR_O)) {
                snprintf(name, sizeof name, "model.layers.%d.%s.%s.bias", l, blk,
                         pgrt_linear_name((pgrt_linear)k));
                m->bias[l][k] = add_w(&w, r, name, out, 0, 0, 0.1);
            }
        }
    }
    path_in(p, sizeof p, dir, "model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(p, w.t, w.n, NULL, NULL, 0), 0);
    for (size_t i = 0; i < w.n; i++) {
        free(w.names[i]);
        free(w.data[i]);
    }
}

static void free_ref(ref_model *m)
{
    for (int l = 0; l < L; l++) {
        for (int k = 0; k < PGRT_LINEAR_COUNT; k++) {
            free(m->w[l][k]);
            free(m->bias[l][k]);
            free(m->a[l][k]);
            free(m->b[l][k]);
        }
        free(m->nin[l]);
        free(m->npost[l]);
    }
    free(m->nfin);
    free(m->emb);
    free(m->head);
}

/* ---------------------------------------------------------------- the checks */

/* ---------------------------------------------------------------- the trainer's API */

/* lr of optimizer step t by pgrt_lm_schedule's formula, in double. */
static double sched_lr(double base, const pgrt_lm_schedule *sc, double t)
{
    if (t < sc->warmup_steps)
        return base * t / sc->warmup_steps;
    double span = fmax(1.0, (double)sc->total_steps - sc->warmup_steps);
    double p = fmin(1.0, fmax(0.0, (t - sc->warmup_steps) / span));
    double g = sc->kind == PGRT_LM_SCHED_LINEAR   ? 1 - p
               : sc->kind == PGRT_LM_SCHED_COSINE ? 0.5 * (1 + cos(3.141592653589793 * p))
                                                  : 1;
    return base * (sc->floor + (1 - sc->floor) * g);
}

/* The relative Frobenius distance of two adapters' arrays, each scaled. */
static double adapter_dist(const pgrt_adapter *x, double sx, const pgrt_adapter *y, double sy,
                           const pgrt_adapter *z, double sz)
{
    double dd = 0, nn = 0;
    for (size_t i = 0; i < x->count; i++)
        for (int which = 0; which < 2; which++) {
            const pgrt_lora *w = &x->w[i];
            size_t n = which ? (size_t)w->out * w->r : (size_t)w->r * w->in;
            const float *a = which ? w->b : w->a, *b = which ? y->w[i].b : y->w[i].a;
            const float *c = z ? (which ? z->w[i].b : z->w[i].a) : NULL;
            for (size_t j = 0; j < n; j++) {
                double want = sy * b[j] + (c ? sz * c[j] : 0), d = sx * a[j] - want;
                dd += d * d;
                nn += want * want;
            }
        }
    return sqrt(dd / fmax(nn, 1e-300));
}

static bool adapters_equal(const pgrt_adapter *x, const pgrt_adapter *y)
{
    for (size_t i = 0; i < x->count; i++) {
        const pgrt_lora *a = &x->w[i], *b = &y->w[i];
        if (a->r != b->r || memcmp(a->a, b->a, sizeof(float) * (size_t)a->r * a->in) ||
            memcmp(a->b, b->b, sizeof(float) * (size_t)a->r * a->out))
            return false;
    }
    return true;
}

/* Packed rows and targets against the double reference; a packed row
 * against its documents alone; evaluation; gradient accumulation against
 * one big batch; the schedule; a resume from saved state, bit for bit. */
static void train_api(pgrt_ctx *ctx, const ref_model *m, pgrt_model_files *mf,
                      const pgrt_adapter *ad, bool bf16, const int32_t *ids, const char *dir)
{
    const pgrt_model_config *c = pgrt_model_files_config(mf);
    pgrt_lm_dtype dt = bf16 ? PGRT_LM_BF16 : PGRT_LM_F32;
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    pgrt_adapter *ga = NULL, *gb = NULL, *gp = NULL;
    pgrt_adapter_config ac = ad->cfg;
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 1, &ga), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 1, &gb), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 1, &gp), 0);

    /* row 0: documents of 3 and 5 tokens; row 1: one document whose first
     * three positions are a prompt (no targets) */
    int32_t tg[T], pos[T], docs[T];
    for (int t = 0; t < S; t++) {
        int d = t < 3 ? 0 : 3, end = t < 3 ? 3 : S;
        docs[t] = d;
        pos[t] = t - d;
        tg[t] = t + 1 < end ? ids[t + 1] : -100;
        docs[S + t] = 0;
        pos[S + t] = t;
        tg[S + t] = t >= 2 && t + 1 < S ? ids[S + t + 1] : -100;
    }
    ref_batch rb = {ids, tg, pos, docs};
    int nref;
    double want = ref_loss_batch(m, &rb, &nref);
    pgrt_lm_params p = {.model = mf, .adapter = ad, .batch = B, .seq = S, .dtype = dt,
                        .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .keep_grads = true,
                        .packed = true};
    pgrt_lm *lm = NULL;
    GPU_CHECK(pgrt_lm_create(ctx, &p, &lm));
    pgrt_lm_batch b = {.ids = ids, .targets = tg, .pos = pos, .doc_start = docs};
    pgrt_lm_result ev, tr;
    GPU_CHECK(pgrt_lm_eval(lm, s, &b, &ev));
    GPU_CHECK(pgrt_lm_train(lm, s, &b, &tr));
    double got = tr.loss_sum / (double)tr.targets, e = fabs(got - want) / fabs(want);
    fprintf(stderr, "  packed rows with prompt targets: loss %.9g, reference %.9g (%d targets), "
            "relative error %.3g; evaluation %s\n", got, want, nref, e,
            ev.loss_sum == tr.loss_sum ? "bitwise equal" : "DIFFERS");
    REQUIRE(tr.targets == (uint64_t)nref && ev.targets == tr.targets && tr.updated);
    REQUIRE(e <= (bf16 ? 1e-2 : 1e-5));
    REQUIRE(ev.loss_sum == tr.loss_sum);
    /* a malformed document start is refused before anything runs */
    docs[5] = 4;
    REQUIRE_INT_EQ(pgrt_lm_train(lm, s, &b, &tr), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "doc_start");
    docs[5] = 3;
    GPU_CHECK(pgrt_lm_grads_get(lm, gp));
    pgrt_lm_destroy(&lm);

    /* row 0's documents alone (lr 0: gradients only): the packed row's
     * loss is the sum of theirs, its gradient their target-weighted sum */
    if (!bf16) {
        int32_t tg1[S], ps1[S], dc1[S];
        for (int t = 0; t < S; t++) {
            tg1[t] = tg[t];
            ps1[t] = pos[t];
            dc1[t] = docs[t];
        }
        pgrt_lm_params p1 = p;
        p1.batch = 1;
        pgrt_lm_batch b1 = {.ids = ids, .targets = tg1, .pos = ps1, .doc_start = dc1};
        GPU_CHECK(pgrt_lm_create(ctx, &p1, &lm));
        GPU_CHECK(pgrt_lm_train(lm, s, &b1, &tr));
        GPU_CHECK(pgrt_lm_grads_get(lm, gp));
        pgrt_lm_destroy(&lm);
        double packed = tr.loss_sum, alone = 0;
        uint64_t np = tr.targets;
        const int len[2] = {3, 5}, at[2] = {0, 3};
        pgrt_adapter *gd[2] = {ga, gb};
        uint64_t nd[2];
        for (int d = 0; d < 2; d++) {
            pgrt_lm_params pd = {.model = mf, .adapter = ad, .batch = 1, .seq = len[d],
                                 .dtype = dt, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                 .keep_grads = true};
            pgrt_lm_batch bd = {.ids = ids + at[d]};
            GPU_CHECK(pgrt_lm_create(ctx, &pd, &lm));
            GPU_CHECK(pgrt_lm_train(lm, s, &bd, &tr));
            GPU_CHECK(pgrt_lm_grads_get(lm, gd[d]));
            pgrt_lm_destroy(&lm);
            alone += tr.loss_sum;
            nd[d] = tr.targets;
        }
        double el = fabs(packed - alone) / fabs(alone);
        double eg = adapter_dist(gp, (double)np, ga, (double)nd[0], gb, (double)nd[1]);
        fprintf(stderr, "  a packed row against its documents alone: loss %.3g, gradients %.3g "
                "relative\n", el, eg);
        REQUIRE(el <= 1e-5 && eg <= 1e-4);
    }

    /* gradient accumulation: two micro-batches of one row against one
     * batch of both rows, graphed (the micro-batch has its own graph) */
    pgrt_lm_schedule sc = {PGRT_LM_SCHED_COSINE, 2, 6, 0.1f};
    pgrt_lm_params pa = {.model = mf, .adapter = ad, .batch = 1, .seq = S, .dtype = dt,
                         .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = 0.01f, .max_norm = 0.5f, .graph = true,
                         .keep_grads = true, .grad_accum = 2, .schedule = sc};
    pgrt_lm_params pw = pa;
    pw.batch = 2;
    pw.grad_accum = 1;
    pgrt_lm *big = NULL;
    GPU_CHECK(pgrt_lm_create(ctx, &pa, &lm));
    GPU_CHECK(pgrt_lm_create(ctx, &pw, &big));
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        const int32_t *x = ids + k * T;
        pgrt_lm_result r0, r1, rb2;
        pgrt_lm_batch m0 = {.ids = x, .step_targets = 2 * (S - 1)};
        pgrt_lm_batch m1 = {.ids = x + S, .step_targets = 2 * (S - 1)};
        pgrt_lm_batch bw = {.ids = x};
        GPU_CHECK(pgrt_lm_train(lm, s, &m0, &r0));
        REQUIRE(!r0.updated && pgrt_lm_pending(lm) == 1);
        if (k == 0) {
            REQUIRE_INT_EQ(pgrt_lm_eval(lm, s, &bw, NULL), PGRT_ESTATE);
            REQUIRE_INT_EQ(pgrt_lm_state_save(lm, s, "unused"), PGRT_ESTATE);
        }
        GPU_CHECK(pgrt_lm_train(lm, s, &m1, &r1));
        GPU_CHECK(pgrt_lm_train(big, s, &bw, &rb2));
        REQUIRE(r1.updated && rb2.updated && pgrt_lm_pending(lm) == 0);
        double la = (r0.loss_sum + r1.loss_sum) / (double)(r0.targets + r1.targets);
        double lw = rb2.loss_sum / (double)rb2.targets;
        worst = fmax(worst, fabs(la - lw) / fabs(lw));
        double lr = sched_lr(1e-2, &sc, k);
        REQUIRE(fabs(r1.lr - lr) <= 1e-6 * 1e-2 && r1.lr == rb2.lr);
        if (k == 0) {
            GPU_CHECK(pgrt_lm_grads_get(lm, ga));
            GPU_CHECK(pgrt_lm_grads_get(big, gb));
            double eg = adapter_dist(ga, 1, gb, 1, NULL, 0);
            fprintf(stderr, "  accumulated gradients against one batch: %.3g relative\n", eg);
            REQUIRE(eg <= (bf16 ? 1e-2 : 1e-5));
        }
    }
    fprintf(stderr, "  accumulation over 3 steps: losses within %.3g of one batch's\n", worst);
    REQUIRE(worst <= (bf16 ? 1e-2 : 1e-5));
    pgrt_lm_destroy(&big);

    /* resume: the state and adapter after 3 steps, 3 more steps; a new
     * pgrt_lm from them takes the same 3 steps to the same bits */
    char st[4096];
    path_in(st, sizeof st, dir, "optimizer.safetensors");
    GPU_CHECK(pgrt_lm_state_save(lm, s, st));
    pgrt_adapter *saved = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 1, &saved), 0);
    GPU_CHECK(pgrt_lm_adapter_get(lm, saved));
    double first[6], again[6];
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            pgrt_lm_params pr = pa;
            pr.adapter = saved;
            pgrt_lm_destroy(&lm);
            GPU_CHECK(pgrt_lm_create(ctx, &pr, &lm));
            GPU_CHECK(pgrt_lm_state_load(lm, s, st));
        }
        uint64_t steps;
        GPU_CHECK(pgrt_lm_steps(lm, s, &steps));
        REQUIRE(steps == 3);
        for (int k = 0; k < 6; k++) {
            pgrt_lm_batch mb = {.ids = ids + (k % 3) * T + (k & 1) * S,
                                .step_targets = 2 * (S - 1)};
            pgrt_lm_result r;
            GPU_CHECK(pgrt_lm_train(lm, s, &mb, &r));
            (pass ? again : first)[k] = r.loss_sum;
        }
        GPU_CHECK(pgrt_lm_adapter_get(lm, pass ? gb : ga));
    }
    REQUIRE(memcmp(first, again, sizeof first) == 0);
    REQUIRE(adapters_equal(ga, gb));
    fprintf(stderr, "  resumed from saved state: 6 micro-batches and the adapter bit for bit\n");
    /* state of another dtype is refused, naming it */
    pgrt_lm_params po = pa;
    po.dtype = bf16 ? PGRT_LM_F32 : PGRT_LM_BF16;
    pgrt_lm *other = NULL;
    if (bf16 || pg_target_sm(pgrt_ctx_target(ctx)) >= 80) {
        GPU_CHECK(pgrt_lm_create(ctx, &po, &other));
        REQUIRE_INT_EQ(pgrt_lm_state_load(other, s, st), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "dtype");
        pgrt_lm_destroy(&other);
    }
    /* with rank_pattern: the state of these per-pair ranks only (the
     * adapter's default r alone, as the same number of parameters, is
     * not it) */
    if (ac.n_rank_pattern) {
        pgrt_adapter_config uc = ac;
        uc.n_rank_pattern = uc.n_alpha_pattern = 0;
        pgrt_adapter *ua = NULL;
        REQUIRE_INT_EQ(pgrt_adapter_init(c, &uc, 1, &ua), 0);
        pgrt_lm_params pu = pa;
        pu.adapter = ua;
        GPU_CHECK(pgrt_lm_create(ctx, &pu, &other));
        REQUIRE_INT_EQ(pgrt_lm_state_load(other, s, st), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "rank is ");
        /* and its adapter does not take this one's weights */
        REQUIRE_INT_EQ(pgrt_lm_adapter_get(other, saved), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "does not match the model's LoRA");
        pgrt_lm_destroy(&other);
        pgrt_adapter_destroy(&ua);
    }
    pgrt_lm_destroy(&lm);
    pgrt_adapter_destroy(&saved);
    pgrt_adapter_destroy(&ga);
    pgrt_adapter_destroy(&gb);
    pgrt_adapter_destroy(&gp);
    pgrt_stream_destroy(&s);
}


/* Activation recompute gives the bits of the kept activations: three
 * graphed optimizer steps with every layer recomputed against none, the
 * losses, gradient norms and adapters compared bit for bit. */
static void recompute_bits(pgrt_ctx *ctx, const pgrt_lm_params *p0, pgrt_stream *s,
                           const int32_t *ids, bool llama, bool pattern)
{
    const pgrt_model_config *c = pgrt_model_files_config(p0->model);
    pgrt_adapter *got[2] = {NULL, NULL};
    double loss[2][3];
    float norm[2][3];
    uint64_t arena[2];
    for (int k = 0; k < 2; k++) {
        pgrt_lm_params p = *p0;
        p.lr = 1e-2f;
        p.max_norm = 0.5f;
        p.graph = true;
        p.recompute = k ? PGRT_LM_RECOMPUTE_LAYERS : PGRT_LM_RECOMPUTE_NONE;
        pgrt_lm *lm = NULL;
        GPU_CHECK(pgrt_lm_create(ctx, &p, &lm));
        for (int i = 0; i < 3; i++)
            GPU_CHECK(pgrt_lm_step(lm, s, ids + i * T, &loss[k][i], &norm[k][i]));
        REQUIRE_INT_EQ(pgrt_adapter_init(c, &p.adapter->cfg, 1, &got[k]), 0);
        GPU_CHECK(pgrt_lm_adapter_get(lm, got[k]));
        pgrt_lm_stats st;
        GPU_CHECK(pgrt_lm_stats_get(lm, &st));
        REQUIRE_INT_EQ(st.recompute_layers, k ? L : 0);
        arena[k] = st.arena_bytes;
        pgrt_lm_destroy(&lm);
    }
    bool same = adapters_equal(got[0], got[1]);
    for (int i = 0; i < 3; i++)
        same &= loss[0][i] == loss[1][i] && norm[0][i] == norm[1][i];
    fprintf(stderr, "  recompute, every layer: 3 graphed steps %s to the kept activations' "
            "(losses, grad norms, adapter); arena %llu against %llu bytes\n",
            same ? "identical" : "NOT identical", (unsigned long long)arena[1],
            (unsigned long long)arena[0]);
    if (!same)
        fprintf(stderr, "  %s%s: losses %.9g %.9g, %.9g %.9g\n", llama ? "llama" : "qwen2",
                pattern ? " patterns" : "", loss[0][0], loss[1][0], loss[0][2], loss[1][2]);
    REQUIRE(same);
    REQUIRE(arena[1] < arena[0]);
    pgrt_adapter_destroy(&got[0]);
    pgrt_adapter_destroy(&got[1]);
}

static void run_case(pgrt_ctx *ctx, bool llama, bool pattern)
{
    char dir[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    rng r = {test_seed(pattern ? "lm-pattern" : llama ? "lm-llama" : "lm-qwen2")};
    ref_model m;
    write_model(dir, llama, &m, &r);
    pgrt_model_files *mf = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(dir, &mf), 0);
    const pgrt_model_config *c = pgrt_model_files_config(mf);
    pgrt_adapter_config ac = {.r = R, .alpha = 2.0 * R, .targets = (1u << PGRT_LINEAR_COUNT) - 1};
    if (pattern) {
        /* r 8, scale 2, but: k_proj r 4 (the thin kernels, beside fused
         * pairs on sm_90a), layer 1's q_proj r 66 (past the thin kernels and
         * not a multiple of 8: the f32 GEMMs in bf16 too), down_proj r 72
         * (f32: the GEMMs; sm_90a bf16: fused), v_proj scale 4 and layer
         * 1's up_proj scale 0.5 (q | k | v and gate | up split) */
        ac.r = 8;
        ac.alpha = 16;
        REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, false, "model.layers.1.self_attn.q_proj", 66),
                       0);
        REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, false, "k_proj", 4), 0);
        REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, false, "down_proj", 72), 0);
        REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, true, "v_proj", 32), 0);
        REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, true, "layers.1.mlp.up_proj", 4), 0);
    }
    pgrt_adapter *ad = NULL, *gr = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 7, &ad), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 7, &gr), 0);
    for (size_t i = 0; i < ad->count; i++) {
        pgrt_lora *w = &ad->w[i];
        REQUIRE(w->r <= RMAX);
        m.r[w->layer][w->module] = w->r;
        m.scale[w->layer][w->module] = w->scale;
        size_t na = (size_t)w->r * w->in, nb = (size_t)w->out * w->r;
        double *a = dnew(na), *b = dnew(nb);
        for (size_t j = 0; j < nb; j++)
            w->b[j] = (float)(0.1 * rng_unit(&r));
        for (size_t j = 0; j < na; j++)
            a[j] = w->a[j];
        for (size_t j = 0; j < nb; j++)
            b[j] = w->b[j];
        m.a[w->layer][w->module] = a;
        m.b[w->layer][w->module] = b;
    }
    int32_t ids[T * 3];
    for (int i = 0; i < T * 3; i++)
        ids[i] = (int32_t)(rng_next(&r) % V);
    double want = ref_loss(&m, ids);
    /* central differences of the double loss, every LoRA entry, in the
     * adapter's order (A then B of each module) */
    size_t nfd = 0;
    for (size_t i = 0; i < ad->count; i++)
        nfd += (size_t)ad->w[i].r * (ad->w[i].in + ad->w[i].out);
    double *fdall = dnew(nfd), *fdp = fdall;
    for (size_t i = 0; i < ad->count; i++)
        for (int which = 0; which < 2; which++) {
            pgrt_lora *w = &ad->w[i];
            double *par = which ? m.b[w->layer][w->module] : m.a[w->layer][w->module];
            size_t n = which ? (size_t)w->out * w->r : (size_t)w->r * w->in;
            for (size_t j = 0; j < n; j++) {
                double keep = par[j], hstep = 1e-5;
                par[j] = keep + hstep;
                double up = ref_loss(&m, ids);
                par[j] = keep - hstep;
                double dn = ref_loss(&m, ids);
                par[j] = keep;
                *fdp++ = (up - dn) / (2 * hstep);
            }
        }

    for (int dt = 0; dt < 2; dt++) {
        bool bf16 = dt == 1;
        if (bf16 && pg_target_sm(pgrt_ctx_target(ctx)) < 80) {
            /* the refusal is the check: one line naming the target */
            pgrt_lm_params p = {.model = mf, .adapter = ad, .batch = B, .seq = S,
                                .dtype = PGRT_LM_BF16};
            pgrt_lm *lm = NULL;
            REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), PGRT_ETARGET);
            REQUIRE_CONTAINS(pgrt_last_message(), "bf16 needs target sm_80 or newer");
            fprintf(stderr, "bf16: skipped, target %s\n", pg_target_name(pgrt_ctx_target(ctx)));
            continue;
        }
        pgrt_lm_params p = {.model = mf, .adapter = ad, .batch = B, .seq = S,
                            .dtype = bf16 ? PGRT_LM_BF16 : PGRT_LM_F32, .lr = 0,
                            .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .max_norm = 0,
                            .keep_grads = true};
        pgrt_lm *lm = NULL;
        pgrt_stream *s = NULL;
        GPU_CHECK(pgrt_lm_create(ctx, &p, &lm));
        GPU_CHECK(pgrt_stream_create(ctx, &s));
        double loss = 0;
        float norm = 0;
        GPU_CHECK(pgrt_lm_step(lm, s, ids, &loss, &norm));
        GPU_CHECK(pgrt_lm_grads_get(lm, gr));
        double e = fabs(loss - want) / fabs(want);
        fprintf(stderr, "%s%s %s: loss %.9g, double reference %.9g, relative error %.3g\n",
                llama ? "llama" : "qwen2", pattern ? " (rank and alpha patterns)" : "",
                bf16 ? "bf16" : "f32", loss, want, e);
        REQUIRE(e <= (bf16 ? 1e-2 : 1e-5));
        double worst = 0, worst_cos = 1;
        fdp = fdall;
        for (size_t i = 0; i < gr->count; i++) {
            pgrt_lora *w = &gr->w[i];
            for (int which = 0; which < 2; which++) {
                const float *g = which ? w->b : w->a;
                size_t n = which ? (size_t)w->out * w->r : (size_t)w->r * w->in;
                double dd = 0, nn = 0, gg = 0, dot = 0;
                for (size_t j = 0; j < n; j++) {
                    double fd = *fdp++;
                    dd += (g[j] - fd) * (g[j] - fd);
                    nn += fd * fd;
                    gg += (double)g[j] * g[j];
                    dot += g[j] * fd;
                }
                double rel = sqrt(dd / fmax(nn, 1e-300)), cs = dot / sqrt(fmax(nn * gg, 1e-300));
                worst = fmax(worst, rel);
                worst_cos = fmin(worst_cos, cs);
                if (bf16 ? cs < 0.99 : rel > 1e-4)
                    fprintf(stderr, "  layer %d %s lora_%c: relative error %.3g, cosine %.6f\n",
                            w->layer, pgrt_linear_name(w->module), which ? 'B' : 'A', rel, cs);
                REQUIRE(bf16 ? cs >= 0.99 : rel <= 1e-4);
            }
        }
        fprintf(stderr, "  gradients against finite differences: worst relative error %.3g, "
                        "worst cosine %.6f (grad_norm %.6g)\n",
                worst, worst_cos, (double)norm);
        /* three more steps eagerly, then the same from the start as a graph */
        if (!bf16) {
            double eager[3], graph[3];
            pgrt_lm *g = NULL;
            pgrt_lm_params pg = p;
            pg.lr = 1e-2f;
            pg.max_norm = 0.5f;
            pg.graph = true;
            pgrt_lm_params pe = pg;
            pe.graph = false;
            pgrt_lm_destroy(&lm);
            GPU_CHECK(pgrt_lm_create(ctx, &pe, &lm));
            GPU_CHECK(pgrt_lm_create(ctx, &pg, &g));
            for (int k = 0; k < 3; k++) {
                GPU_CHECK(pgrt_lm_step(lm, s, ids + k * T, &eager[k], NULL));
                GPU_CHECK(pgrt_lm_step(g, s, ids + k * T, &graph[k], NULL));
                REQUIRE(eager[k] == graph[k]);
            }
            REQUIRE(eager[2] != eager[0]);
            pgrt_lm_stats st;
            GPU_CHECK(pgrt_lm_stats_get(g, &st));
            REQUIRE(st.graph_steps == 3 && st.captures == 1 && st.capture_failures == 0);
            pgrt_lm_destroy(&g);
        }
        recompute_bits(ctx, &p, s, ids, llama, pattern);
        pgrt_stream_destroy(&s);
        pgrt_lm_destroy(&lm);
        train_api(ctx, &m, mf, ad, bf16, ids, dir);
    }
    free(fdall);
    pgrt_adapter_destroy(&ad);
    pgrt_adapter_destroy(&gr);
    pgrt_model_close(&mf);
    free_ref(&m);
    remove_tree(dir);
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    run_case(ctx, false, false);
    run_case(ctx, true, false);
    run_case(ctx, false, true);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
