/* SPDX-License-Identifier: MIT */
/*
 * What the attention tests (test_attention.c: the SIMT kernels,
 * test_attention_mma.c: the tensor-core ones) share: the tolerance
 * model_check.h compares with (cur_tol, set per case), the shape and its
 * [B, S, H, D] indexing, a double dot product, output buffers that are
 * poisoned, launched into twice and downloaded each time, the norm-wise
 * check, and the whole case: forward, dQ and delta, dK and dV.
 */
#ifndef PTXGEN_TESTS_ATTENTION_CHECK_H
#define PTXGEN_TESTS_ATTENTION_CHECK_H

static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

typedef struct shp {
    uint32_t b, s, hq, hkv, d;
    double qscale;
} shp;

static size_t qidx(const shp *x, uint32_t b, uint32_t s, uint32_t h)
{
    return (((size_t)b * x->s + s) * x->hq + h) * x->d;
}
static size_t kidx(const shp *x, uint32_t b, uint32_t s, uint32_t h)
{
    return (((size_t)b * x->s + s) * x->hkv + h) * x->d;
}

static double dot(const float *a, const float *b, uint32_t d)
{
    double s = 0;
    for (uint32_t e = 0; e < d; e++)
        s += (double)a[e] * b[e];
    return s;
}

/* Runs a kernel twice, poisoning `outs` first; downloads each into host
 * copies (act or f32) and returns whether both launches went. */
typedef struct outbuf {
    pgrt_buf *b;
    size_t n;
    bool bf16; /* act storage; false: f32 */
    float *host[2];
} outbuf;

static bool run_twice(const char *name, const pgk_knobs *kn, const pgrt_arg *args, size_t nargs,
                      outbuf *outs, int nouts)
{
    bool ok = true;
    for (int run = 0; run < 2; run++) {
        for (int o = 0; o < nouts; o++)
            act_poison(outs[o].b, outs[o].bf16);
        ok &= launch(name, kn, args, nargs);
        for (int o = 0; o < nouts; o++)
            act_download(outs[o].b, outs[o].host[run], outs[o].n, outs[o].bf16);
    }
    return ok;
}

static outbuf out_new(size_t n, bool bf16)
{
    outbuf o = {act_alloc(n, bf16), n, bf16, {xmalloc(n * 4), xmalloc(n * 4)}};
    return o;
}

static void out_free(outbuf *o)
{
    pgrt_buf_destroy(&o->b);
    free(o->host[0]), free(o->host[1]);
}

/* max |out - ref| / max |ref| of each row, for the summary: the
 * elementwise error on the scale of the output (max_rel divides by
 * elements near 0). */
static double abs_rel[sizeof table / sizeof table[0]];

/* A norm-wise check; with floor > 0 the error is taken relative to
 * max(|ref|, floor) (2-norms). */
static void check(const char *name, const shp *x, const char *what, double tol, bool ok,
                  const outbuf *o, const double *ref, double floor)
{
    cur_tol = tol;
    row *r = add_row(name, "%s B%u S%u H%u/%u D%u%s", what, x->b, x->s, x->hq, x->hkv, x->d,
                     x->qscale > 1 ? " peaky" : "");
    if (!ok)
        r->bad++;
    compare(r, o->host[0], ref, o->n);
    double num = 0, den = 0, refmax = 0, errmax = 0;
    for (size_t i = 0; i < o->n; i++) {
        double e = (double)o->host[0][i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
        refmax = fmax(refmax, fabs(ref[i]));
        errmax = fmax(errmax, fabs(e));
    }
    if (floor > 0 && isfinite(num))
        r->rel = sqrt(num) / fmax(sqrt(den), floor);
    abs_rel[nrows - 1] = refmax > 0 ? errmax / refmax : errmax;
    same_bits(r, o->host[0], o->host[1], o->n * 4);
    finish(r);
}

/* 2-norm of x[0..n). */
static double norm2(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return sqrt(s);
}

/* S = 1 (every query's one key its own): the softmax is exactly 1, O = V,
 * so dP - delta = dO.(V - O) and dQ and dK are exactly 0, and delta =
 * dO.O. What a kernel gives there is rounding only: it is held to a bound
 * of that rounding, not to the size of the output, which is noise about 0
 * (a relative check failed on rounding alone: seed 21, B1 S1 D64). With u =
 * 2^-9 (bf16's unit roundoff), a pair of query row and key, and A =
 * sum_e |dO_e V_e| (f32 inputs):
 *   - a tensor-core kernel's dP sums bf16(dO) bf16(V) products in f32, its
 *     delta is dO.O in f32 from the f32 O, which is V rounded to bf16 once
 *     (P = 1): dP - delta = sum (bf16(dO_e) - dO_e) bf16(V_e) + sum dO_e
 *     (bf16(V_e) - O_e) + the f32 sums' errors, at most u (1 + u) A + 2u A
 *     + 2 D 2^-24 (1 + u)^2 A < 3.05 u A for D <= 128. Its P is 1 but for
 *     the f32 rounding of the exponent (< 2^-8 here), dS and K (Q for dK)
 *     are rounded to bf16: 3.05 (1 + 2^-8)(1 + u)^2 < 4;
 *   - the reference's dS = p dO.(V - O), p = exp(the double score - the
 *     kernel's LSE) (near 1: the LSE came from bf16 q and k), with
 *     |V_e - O_e| <= u |V_e|: at most p u A.
 * So each element of dQ is within scale |K_e| (4 + p) u A of the
 * reference's, summed over the row's keys (one), and of dK within scale
 * |Q_e| (4 + p) u A, summed over its queries: s1_ds_bound gives (4 + p) u A.
 * delta is an f32 sum of D products in any order: within
 * gamma_D sum_e |dO_e O_e|, gamma_D = D 2^-24 / (1 - D 2^-24)
 * (s1_delta_bound), for the SIMT kernels too. A bound b on each element
 * becomes the floor |b| / tol: the check then passes when the error's norm
 * is within |b| (or within tol of the reference's), and a kernel that
 * gets the math wrong (dP - delta not cancelling: about A / sqrt(D) per
 * row) still fails it. */
static double s1_ds_bound(double p, const float *go, const float *v, uint32_t d)
{
    double a = 0;
    for (uint32_t e = 0; e < d; e++)
        a += fabs((double)go[e] * v[e]);
    return 0x1p-9 * (4 + p) * a;
}

static double s1_delta_bound(const float *go, const float *o, uint32_t d)
{
    double a = 0, g = d * 0x1p-24;
    for (uint32_t e = 0; e < d; e++)
        a += fabs((double)go[e] * o[e]);
    return g / (1 - g) * a;
}

/* One family's three kernels, their storage and the norm-wise tolerances:
 * forward O and LSE, the gradients dQ, dK, dV (delta is f32: 1e-5).
 * s1_floor: at S = 1 hold dQ and dK to the bound of their rounding
 * (s1_ds_bound; delta is held to s1_delta_bound at S = 1 in every
 * family). */
typedef struct att_case {
    const char *fwd, *dq, *dkv;
    bool bf16;
    double tol_o, tol_lse, tol_grad;
    bool s1_floor;
} att_case;

/* The forward, then dQ and delta, then dK and dV, each against a double
 * reference (the backward's on the kernels' own O and LSE). */
static inline void attention_case(const att_case *c, shp x)
{
    const bool bf16 = c->bf16;
    const char *fwd = c->fwd, *dqn = c->dq, *dkvn = c->dkv;
    uint32_t g = x.hq / x.hkv;
    size_t nq = (size_t)x.b * x.s * x.hq * x.d, nk = (size_t)x.b * x.s * x.hkv * x.d;
    size_t nr = (size_t)x.b * x.s * x.hq;
    float scale = 1.0f / sqrtf((float)x.d);
    float *q = fill_normal(nq, x.qscale, 0.0), *k = fill_normal(nk, 1.0, 0.0);
    float *v = fill_normal(nk, 1.0, 0.0), *go = fill_normal(nq, 1.0, 0.0);
    pgrt_buf *bq = act_upload(q, nq, bf16), *bk = act_upload(k, nk, bf16);
    pgrt_buf *bv = act_upload(v, nk, bf16), *bgo = act_upload(go, nq, bf16);

    /* forward reference */
    double *ro = ref_alloc(nq), *rl = ref_alloc(nr), *sc = ref_alloc(x.s);
    for (uint32_t b = 0; b < x.b; b++)
        for (uint32_t s = 0; s < x.s; s++)
            for (uint32_t h = 0; h < x.hq; h++) {
                const float *qi = q + qidx(&x, b, s, h);
                double m = -INFINITY, sum = 0;
                for (uint32_t j = 0; j <= s; j++) {
                    sc[j] = (double)scale * dot(qi, k + kidx(&x, b, j, h / g), x.d);
                    m = fmax(m, sc[j]);
                }
                double *o = ro + qidx(&x, b, s, h);
                memset(o, 0, x.d * sizeof *o);
                for (uint32_t j = 0; j <= s; j++) {
                    double p = exp(sc[j] - m);
                    sum += p;
                    const float *vj = v + kidx(&x, b, j, h / g);
                    for (uint32_t e = 0; e < x.d; e++)
                        o[e] += p * vj[e];
                }
                for (uint32_t e = 0; e < x.d; e++)
                    o[e] /= sum;
                rl[((size_t)b * x.s + s) * x.hq + h] = m + log(sum);
            }
    outbuf oo = out_new(nq, bf16), ol = out_new(nr, false);
    pgk_knobs kq = knobs_of(fwd, "batch", x.b, "seq_len", x.s, "q_heads", x.hq, "head_dim", x.d,
                            NULL);
    pgrt_arg fa[] = {pgrt_arg_buf(bq),    pgrt_arg_buf(bk),     pgrt_arg_buf(bv),
                     pgrt_arg_buf(oo.b),  pgrt_arg_buf(ol.b),   pgrt_arg_u32(x.b),
                     pgrt_arg_u32(x.s),   pgrt_arg_u32(x.hq),   pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),   pgrt_arg_f32(scale)};
    outbuf fo[2] = {oo, ol};
    bool ok = run_twice(fwd, &kq, fa, 11, fo, 2);
    check(fwd, &x, "O", c->tol_o, ok, &oo, ro, 0);
    check(fwd, &x, "LSE", c->tol_lse, ok, &ol, rl, 0);

    /* backward reference on the kernel's O (as stored) and LSE */
    const float *o_in = oo.host[0], *l_in = ol.host[0];
    double *rdq = ref_alloc(nq), *rdk = ref_alloc(nk), *rdv = ref_alloc(nk), *rdel = ref_alloc(nr);
    /* S = 1: bounds of dQ's, dK's and delta's rounding (s1_ds_bound) */
    double *mdq = ref_alloc(nq), *mdk = ref_alloc(nk), *mdel = ref_alloc(nr);
    memset(mdq, 0, nq * sizeof *mdq);
    memset(mdk, 0, nk * sizeof *mdk);
    memset(rdk, 0, nk * sizeof *rdk);
    memset(rdv, 0, nk * sizeof *rdv);
    for (uint32_t b = 0; b < x.b; b++)
        for (uint32_t h = 0; h < x.hq; h++)
            for (uint32_t s = 0; s < x.s; s++) {
                size_t qi = qidx(&x, b, s, h), ri = ((size_t)b * x.s + s) * x.hq + h;
                double delta = dot(go + qi, o_in + qi, x.d);
                rdel[ri] = delta;
                mdel[ri] = s1_delta_bound(go + qi, o_in + qi, x.d);
                double *dq = rdq + qi;
                memset(dq, 0, x.d * sizeof *dq);
                for (uint32_t j = 0; j <= s; j++) {
                    size_t kj = kidx(&x, b, j, h / g);
                    double p = exp((double)scale * dot(q + qi, k + kj, x.d) - l_in[ri]);
                    double dpj = dot(go + qi, v + kj, x.d);
                    double ds = p * (dpj - delta), dsm = s1_ds_bound(p, go + qi, v + kj, x.d);
                    for (uint32_t e = 0; e < x.d; e++) {
                        dq[e] += scale * ds * k[kj + e];
                        rdk[kj + e] += scale * ds * q[qi + e];
                        rdv[kj + e] += p * go[qi + e];
                        mdq[qi + e] += scale * dsm * fabs(k[kj + e]);
                        mdk[kj + e] += scale * dsm * fabs(q[qi + e]);
                    }
                }
            }
    pgrt_buf *bo = act_upload(oo.host[0], nq, bf16), *bl = dev_upload(ol.host[0], nr);
    outbuf odq = out_new(nq, bf16), odel = out_new(nr, false);
    pgrt_arg qa[] = {pgrt_arg_buf(bq),    pgrt_arg_buf(bk),    pgrt_arg_buf(bv),
                     pgrt_arg_buf(bo),    pgrt_arg_buf(bgo),   pgrt_arg_buf(bl),
                     pgrt_arg_buf(odq.b), pgrt_arg_buf(odel.b), pgrt_arg_u32(x.b),
                     pgrt_arg_u32(x.s),   pgrt_arg_u32(x.hq),  pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),   pgrt_arg_f32(scale)};
    outbuf qo[2] = {odq, odel};
    pgk_knobs kdq = knobs_of(dqn, "batch", x.b, "seq_len", x.s, "q_heads", x.hq, "head_dim", x.d,
                             NULL);
    ok = run_twice(dqn, &kdq, qa, 14, qo, 2);
    /* S = 1: one key a row, so dQ and dK are exactly 0 and what the kernel
     * gives is rounding (with s1_floor: dP from bf16 operands, delta from
     * f32 ones): held to its bound (s1_ds_bound), delta to an f32 sum's */
    bool s1 = c->s1_floor && x.s == 1;
    double fq = s1 ? norm2(mdq, nq) / c->tol_grad : 0, fk = s1 ? norm2(mdk, nk) / c->tol_grad : 0;
    double fdel = x.s == 1 ? norm2(mdel, nr) / 1e-5 : 0;
    check(dqn, &x, "dQ", c->tol_grad, ok, &odq, rdq, fq);
    check(dqn, &x, "delta", 1e-5, ok, &odel, rdel, fdel);

    outbuf odk = out_new(nk, bf16), odv = out_new(nk, bf16);
    pgrt_arg ka[] = {pgrt_arg_buf(bq),    pgrt_arg_buf(bk),    pgrt_arg_buf(bv),
                     pgrt_arg_buf(bgo),   pgrt_arg_buf(bl),    pgrt_arg_buf(odel.b),
                     pgrt_arg_buf(odk.b), pgrt_arg_buf(odv.b), pgrt_arg_u32(x.b),
                     pgrt_arg_u32(x.s),   pgrt_arg_u32(x.hq),  pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),   pgrt_arg_f32(scale)};
    outbuf ko[2] = {odk, odv};
    pgk_knobs kkv = knobs_of(dkvn, "batch", x.b, "seq_len", x.s, "kv_heads", x.hkv, "head_dim",
                             x.d, NULL);
    /* delta as the dq kernel left it on the second run: the same bits */
    ok = run_twice(dkvn, &kkv, ka, 14, ko, 2);
    check(dkvn, &x, "dK", c->tol_grad, ok, &odk, rdk, fk);
    check(dkvn, &x, "dV", c->tol_grad, ok, &odv, rdv, 0);

    pgrt_buf_destroy(&bq), pgrt_buf_destroy(&bk), pgrt_buf_destroy(&bv);
    pgrt_buf_destroy(&bgo), pgrt_buf_destroy(&bo), pgrt_buf_destroy(&bl);
    out_free(&oo), out_free(&ol), out_free(&odq), out_free(&odel), out_free(&odk), out_free(&odv);
    free(q), free(k), free(v), free(go), free(ro), free(rl), free(sc);
    free(rdq), free(rdk), free(rdv), free(rdel), free(mdq), free(mdk), free(mdel);
}

#endif
