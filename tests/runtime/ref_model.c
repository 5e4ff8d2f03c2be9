/* SPDX-License-Identifier: MIT */
#include "ref_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ref_model {
    tmodel_config c;
    size_t L, H, R, B, m_max, per_layer;
    double *x0, *w, *w_out;          /* frozen */
    double *params, *teacher, *m, *v; /* [L][H + H R + R H] */
    double *x, *n, *t, *h, *p;       /* saved activations, [L(+1)][m_max, *] */
    double *out, *target, *g, *dp, *dh, *dt, *dn, *grad;
    uint32_t target_seq;
    double pow1, pow2;
};

static double *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

ref_model *ref_model_create(const tmodel_config *c)
{
    tmodel_init init;
    if (tmodel_init_make(c, &init))
        return NULL;
    ref_model *r = calloc(1, sizeof *r);
    if (!r) {
        tmodel_init_free(&init);
        return NULL;
    }
    r->c = *c;
    r->L = c->layers, r->H = c->hidden, r->R = c->rank, r->B = c->batch;
    r->m_max = init.m_max;
    r->per_layer = r->H + 2 * r->H * r->R;
    size_t L = r->L, H = r->H, R = r->R, act = r->m_max * H;
    r->x0 = zalloc(act);
    r->w = zalloc(L * H * H);
    r->w_out = zalloc(H * H);
    r->params = zalloc(L * r->per_layer);
    r->teacher = zalloc(L * r->per_layer);
    r->m = zalloc(L * r->per_layer);
    r->v = zalloc(L * r->per_layer);
    r->x = zalloc((L + 1) * act);
    r->n = zalloc(L * act);
    r->t = zalloc(L * r->m_max * R);
    r->h = zalloc(L * act);
    r->p = zalloc(L * act);
    r->out = zalloc(act);
    r->target = zalloc(act);
    r->g = zalloc(act);
    r->dp = zalloc(act);
    r->dh = zalloc(act);
    r->dt = zalloc(r->m_max * R);
    r->dn = zalloc(act);
    r->grad = zalloc(r->per_layer);
    if (!r->x0 || !r->w || !r->w_out || !r->params || !r->teacher || !r->m || !r->v || !r->x ||
        !r->n || !r->t || !r->h || !r->p || !r->out || !r->target || !r->g || !r->dp || !r->dh ||
        !r->dt || !r->dn || !r->grad) {
        tmodel_init_free(&init);
        ref_model_destroy(r);
        return NULL;
    }
    for (size_t i = 0; i < act; i++)
        r->x0[i] = init.x0[i];
    for (size_t i = 0; i < L * H * H; i++)
        r->w[i] = init.w[i];
    for (size_t i = 0; i < H * H; i++)
        r->w_out[i] = init.w_out[i];
    for (size_t l = 0; l < L; l++) {
        double *s = r->params + l * r->per_layer, *te = r->teacher + l * r->per_layer;
        for (size_t i = 0; i < H; i++) {
            s[i] = init.gamma[l * H + i];
            te[i] = init.teacher_gamma[l * H + i];
        }
        for (size_t i = 0; i < H * R; i++)
            s[H + i] = te[H + i] = init.a[l * H * R + i];
        for (size_t i = 0; i < R * H; i++) {
            s[H + H * R + i] = init.b[l * R * H + i];
            te[H + H * R + i] = init.teacher_b[l * R * H + i];
        }
    }
    r->pow1 = r->pow2 = 1.0;
    tmodel_init_free(&init);
    return r;
}

void ref_model_destroy(ref_model *r)
{
    if (!r)
        return;
    double *all[] = {r->x0, r->w, r->w_out, r->params, r->teacher, r->m, r->v, r->x,
                     r->n, r->t, r->h, r->p, r->out, r->target, r->g, r->dp, r->dh,
                     r->dt, r->dn, r->grad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free(r);
}

const double *ref_model_params(const ref_model *r) { return r->params; }

/* C[M,N] = A[M,K] B[K,N] (+ C when acc). */
static void mm(const double *a, const double *b, double *c, size_t M, size_t N, size_t K, bool acc)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = acc ? c[i * N + j] : 0.0;
            for (size_t k = 0; k < K; k++)
                s += a[i * K + k] * b[k * N + j];
            c[i * N + j] = s;
        }
}

/* C[M,K] (+)= D[M,N] B[K,N]^T. */
static void mm_nt(const double *d, const double *b, double *c, size_t M, size_t N, size_t K,
                  bool acc)
{
    for (size_t i = 0; i < M; i++)
        for (size_t k = 0; k < K; k++) {
            double s = acc ? c[i * K + k] : 0.0;
            for (size_t j = 0; j < N; j++)
                s += d[i * N + j] * b[k * N + j];
            c[i * K + k] = s;
        }
}

/* C[K,N] = A[M,K]^T D[M,N]. */
static void mm_tn(const double *a, const double *d, double *c, size_t M, size_t N, size_t K)
{
    for (size_t k = 0; k < K; k++)
        for (size_t j = 0; j < N; j++) {
            double s = 0.0;
            for (size_t i = 0; i < M; i++)
                s += a[i * K + k] * d[i * N + j];
            c[k * N + j] = s;
        }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* x_0 .. x_L, n, t, h (pre-activation, [M,H]) and p (softmax output,
 * [M,H]) with the trainables `pr`, then out. */
static void forward(ref_model *r, const double *pr, uint32_t seq)
{
    size_t H = r->H, R = r->R, B = r->B, S = seq, M = B * S, act = r->m_max * H;
    double eps = r->c.rms_eps;
    memcpy(r->x, r->x0, act * sizeof(double));
    double *col = malloc(S * sizeof(double));
    for (size_t l = 0; l < r->L; l++) {
        const double *gamma = pr + l * r->per_layer, *A = gamma + H, *Bm = A + H * R;
        double *x = r->x + l * act, *xn = r->x + (l + 1) * act;
        double *n = r->n + l * act, *t = r->t + l * r->m_max * R;
        double *h = r->h + l * act, *p = r->p + l * act;
        for (size_t i = 0; i < M; i++) {
            double ss = 0;
            for (size_t j = 0; j < H; j++)
                ss += x[i * H + j] * x[i * H + j];
            double rr = sqrt(ss / (double)H + eps);
            for (size_t j = 0; j < H; j++)
                n[i * H + j] = x[i * H + j] / rr * gamma[j];
        }
        mm(n, r->w + l * H * H, h, M, H, H, false);
        mm(n, A, t, M, R, H, false);
        mm(t, Bm, h, M, H, R, true);
        for (size_t b = 0; b < B; b++)
            for (size_t j = 0; j < H; j++) {
                double mx = -INFINITY, sum = 0;
                for (size_t s = 0; s < S; s++) {
                    double hv = h[(b * S + s) * H + j];
                    col[s] = hv * sigmoid(hv);
                    mx = fmax(mx, col[s]);
                }
                for (size_t s = 0; s < S; s++)
                    sum += (col[s] = exp(col[s] - mx));
                for (size_t s = 0; s < S; s++)
                    p[(b * S + s) * H + j] = col[s] / sum;
            }
        for (size_t i = 0; i < M * H; i++)
            xn[i] = x[i] + p[i];
    }
    free(col);
    mm(r->x + r->L * act, r->w_out, r->out, M, H, H, false);
}

double ref_model_step(ref_model *r, uint32_t seq)
{
    size_t H = r->H, R = r->R, B = r->B, S = seq, M = B * S, act = r->m_max * H;
    size_t pl = r->per_layer;
    if (r->target_seq != seq) {
        forward(r, r->teacher, seq);
        memcpy(r->target, r->out, M * H * sizeof(double));
        r->target_seq = seq;
    }
    forward(r, r->params, seq);
    double loss = 0, cnt = (double)(M * H);
    for (size_t i = 0; i < M * H; i++) {
        double d = r->out[i] - r->target[i];
        loss += d * d;
        r->dp[i] = 2.0 * d / cnt; /* dout, for the head */
    }
    loss /= cnt;

    r->pow1 *= r->c.beta1;
    r->pow2 *= r->c.beta2;
    double bc1 = 1.0 / (1.0 - r->pow1), bc2 = 1.0 / (1.0 - r->pow2);

    mm_nt(r->dp, r->w_out, r->g, M, H, H, false);
    for (size_t l = r->L; l-- > 0;) {
        double *gamma = r->params + l * pl, *A = gamma + H, *Bm = A + H * R;
        double *dgamma = r->grad, *dA = dgamma + H, *dB = dA + H * R;
        const double *x = r->x + l * act, *n = r->n + l * act, *t = r->t + l * r->m_max * R;
        const double *h = r->h + l * act, *p = r->p + l * act;
        /* softmax over the sequence, then SiLU */
        for (size_t b = 0; b < B; b++)
            for (size_t j = 0; j < H; j++) {
                double dot = 0;
                for (size_t s = 0; s < S; s++) {
                    size_t i = (b * S + s) * H + j;
                    dot += p[i] * r->g[i];
                }
                for (size_t s = 0; s < S; s++) {
                    size_t i = (b * S + s) * H + j;
                    double ds = p[i] * (r->g[i] - dot);
                    double sg = sigmoid(h[i]);
                    r->dh[i] = ds * sg * (1.0 + h[i] * (1.0 - sg));
                }
            }
        mm_tn(t, r->dh, dB, M, H, R);
        mm_nt(r->dh, Bm, r->dt, M, H, R, false);
        mm_tn(n, r->dt, dA, M, R, H);
        mm_nt(r->dh, r->w + l * H * H, r->dn, M, H, H, false);
        mm_nt(r->dt, A, r->dn, M, R, H, true);
        for (size_t j = 0; j < H; j++)
            dgamma[j] = 0;
        for (size_t i = 0; i < M; i++) {
            const double *xi = x + i * H, *dni = r->dn + i * H;
            double ss = 0, sxg = 0;
            for (size_t j = 0; j < H; j++) {
                ss += xi[j] * xi[j];
                sxg += xi[j] * gamma[j] * dni[j];
            }
            double rr = sqrt(ss / (double)H + r->c.rms_eps);
            double c = sxg / (double)H / (rr * rr * rr);
            for (size_t j = 0; j < H; j++) {
                r->g[i * H + j] += gamma[j] * dni[j] / rr - xi[j] * c;
                dgamma[j] += dni[j] * xi[j] / rr;
            }
        }
        if (r->c.max_norm > 0) {
            double ss = 0;
            for (size_t i = 0; i < pl; i++)
                ss += r->grad[i] * r->grad[i];
            double norm = sqrt(ss);
            double scale = norm > 0 ? fmin(1.0, r->c.max_norm / norm) : 1.0;
            if (!isfinite(norm))
                scale = 1.0;
            if (fabs(scale - 1.0) >= 1e-7)
                for (size_t i = 0; i < pl; i++)
                    r->grad[i] *= scale;
        }
        double *pm = r->m + l * pl, *pv = r->v + l * pl;
        for (size_t i = 0; i < pl; i++) {
            double gi = r->grad[i];
            pm[i] = r->c.beta1 * pm[i] + (1.0 - r->c.beta1) * gi;
            pv[i] = r->c.beta2 * pv[i] + (1.0 - r->c.beta2) * gi * gi;
            double upd = pm[i] * bc1 / (sqrt(pv[i] * bc2) + r->c.eps) + r->c.weight_decay * gamma[i];
            gamma[i] -= r->c.lr * upd;
        }
    }
    return loss;
}
