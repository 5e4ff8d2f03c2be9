/* SPDX-License-Identifier: MIT */
/*
 * pgrt_lm on the GPU against a double-precision CPU reference at tiny
 * dimensions: a Qwen2 (tied head, q/k/v biases) and a LLaMA (untied head,
 * attention biases) written by the test, a random adapter with B nonzero.
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
#include "pgrt_lm.h"
#include "test.h"

enum { H = 32, I = 48, L = 2, NH = 4, NKV = 2, D = 8, V = 40, B = 2, S = 8, T = B * S, R = 4 };
#define EPS 1e-6
#define THETA 10000.0

typedef struct ref_model {
    bool llama;
    double *w[L][PGRT_LINEAR_COUNT], *bias[L][PGRT_LINEAR_COUNT];
    double *nin[L], *npost[L], *nfin, *emb, *head;
    double *a[L][PGRT_LINEAR_COUNT], *b[L][PGRT_LINEAR_COUNT]; /* LoRA, as the adapter */
    double scale;
} ref_model;

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
    for (int t = 0; t < T; t++) {
        double xa[R];
        for (int j = 0; j < R; j++) {
            xa[j] = 0;
            for (int i = 0; i < in; i++)
                xa[j] += x[t * in + i] * m->a[l][k][j * in + i];
        }
        for (int o = 0; o < out; o++) {
            double v = m->bias[l][k] ? m->bias[l][k][o] : 0;
            for (int i = 0; i < in; i++)
                v += x[t * in + i] * m->w[l][k][o * in + i];
            for (int j = 0; j < R; j++)
                v += m->scale * xa[j] * m->b[l][k][o * R + j];
            y[t * out + o] = v;
        }
    }
}

static void rope(double *x, int heads)
{
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < D / 2; i++) {
                double ang = (t % S) / pow(THETA, 2.0 * i / D), c = cos(ang), s = sin(ang);
                double *p = x + (t * heads + h) * D;
                double x1 = p[i], x2 = p[i + D / 2];
                p[i] = x1 * c - x2 * s;
                p[i + D / 2] = x2 * c + x1 * s;
            }
}

static double ref_loss(const ref_model *m, const int32_t *ids)
{
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
        rope(q, NH);
        rope(k, NKV);
        for (int b = 0; b < B; b++)
            for (int hh = 0; hh < NH; hh++)
                for (int s = 0; s < S; s++) {
                    int kh = hh / (NH / NKV);
                    const double *qr = q + ((b * S + s) * NH + hh) * D;
                    double sc[S], mx = -INFINITY, sum = 0;
                    for (int j = 0; j <= s; j++) {
                        const double *kr = k + ((b * S + j) * NKV + kh) * D;
                        sc[j] = 0;
                        for (int e = 0; e < D; e++)
                            sc[j] += qr[e] * kr[e];
                        sc[j] /= sqrt((double)D);
                        mx = fmax(mx, sc[j]);
                    }
                    for (int j = 0; j <= s; j++)
                        sum += (sc[j] = exp(sc[j] - mx));
                    double *orow = att + ((b * S + s) * NH + hh) * D;
                    for (int e = 0; e < D; e++) {
                        orow[e] = 0;
                        for (int j = 0; j <= s; j++)
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
    for (int t = 0; t < T; t++) {
        if (t % S == S - 1)
            continue;
        double lg[V], mx = -INFINITY, sum = 0;
        for (int c = 0; c < V; c++) {
            lg[c] = 0;
            for (int i = 0; i < H; i++)
                lg[c] += h[t * H + i] * hw[c * H + i];
            mx = fmax(mx, lg[c]);
        }
        for (int c = 0; c < V; c++)
            sum += exp(lg[c] - mx);
        loss += mx + log(sum) - lg[ids[t + 1]];
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(g), free(u);
    return loss / (B * (S - 1));
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

static void run_case(pgrt_ctx *ctx, bool llama)
{
    char dir[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    rng r = {test_seed(llama ? "lm-llama" : "lm-qwen2")};
    ref_model m;
    write_model(dir, llama, &m, &r);
    pgrt_model_files *mf = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(dir, &mf), 0);
    const pgrt_hf_config *c = pgrt_model_hf_config(mf);
    pgrt_adapter_config ac = {.r = R, .alpha = 2.0 * R, .targets = (1u << PGRT_LINEAR_COUNT) - 1};
    pgrt_adapter *ad = NULL, *gr = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 7, &ad), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(c, &ac, 7, &gr), 0);
    m.scale = ac.alpha / ac.r;
    for (size_t i = 0; i < ad->count; i++) {
        pgrt_lora *w = &ad->w[i];
        size_t na = (size_t)R * w->in, nb = (size_t)w->out * R;
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
        nfd += (size_t)R * (ad->w[i].in + ad->w[i].out);
    double *fdall = dnew(nfd), *fdp = fdall;
    for (size_t i = 0; i < ad->count; i++)
        for (int which = 0; which < 2; which++) {
            pgrt_lora *w = &ad->w[i];
            double *par = which ? m.b[w->layer][w->module] : m.a[w->layer][w->module];
            size_t n = which ? (size_t)w->out * R : (size_t)R * w->in;
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
        fprintf(stderr, "%s %s: loss %.9g, double reference %.9g, relative error %.3g\n",
                llama ? "llama" : "qwen2", bf16 ? "bf16" : "f32", loss, want, e);
        REQUIRE(e <= (bf16 ? 1e-2 : 1e-5));
        double worst = 0, worst_cos = 1;
        fdp = fdall;
        for (size_t i = 0; i < gr->count; i++) {
            pgrt_lora *w = &gr->w[i];
            for (int which = 0; which < 2; which++) {
                const float *g = which ? w->b : w->a;
                size_t n = which ? (size_t)w->out * R : (size_t)R * w->in;
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
        pgrt_stream_destroy(&s);
        pgrt_lm_destroy(&lm);
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
    run_case(ctx, false);
    run_case(ctx, true);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
