/* SPDX-License-Identifier: MIT */
/*
 * attention_sm90_forward (FlashAttention-3 on wgmma + TMA) on an sm_90a
 * device, through pgrt_attention_sm90_forward, against a double-precision
 * reference, and beside attention_mma_forward on the same inputs.
 *
 * Inputs: random normal Q, K, V rounded to bf16 (the host keeps the
 * rounded values: the reference, the sm_90a kernel and, as f32 copies,
 * attention_mma_forward all see the same numbers). Causal, batch 2, GQA
 * ratios 1, 2 and 6 (Hq/Hkv 2/2, 4/2, 6/1), head_dim 64 and 128, S in
 * {1, 17, 128, 200, 1024, 4096}; then head_dim 80 and 32 (zero-padded
 * tiles), a peaky softmax (Q scaled by 4), batch 3 at S 300, GQA 7 at
 * head_dim 96 and a row of 8192 at two heads. The backward after each
 * case of up to 16384 (batch, row, head) rows.
 *
 * Each case: O (f32) and LSE against the reference, norm-wise; every
 * output NaN-poisoned before each launch, the launch run twice and the
 * outputs compared bit for bit; the bf16 copy of O equal, bit for bit,
 * to O rounded to nearest even; a launch without the copy giving the same
 * O; a guard of NaN words past the end of O, the copy and LSE never
 * written. Then attention_mma_forward on the same (f32, bf16-exact)
 * inputs: its own error against the reference, and the largest difference
 * between the two kernels' O and LSE.
 *
 * Tolerances. With the inputs exact in bf16, what is left is the kernel's
 * own rounding: P rounded to bf16 before P V (a relative error of at most
 * 2^-9 a weight, about 1.1e-3 RMS, which O inherits: rel_l2 about 1e-3),
 * f32 sums, and ex2.approx (2 ulp). O is held to 4e-3 norm-wise, LSE
 * (f32 from f32 scores, no bf16 step) to 2e-5. test_attention_mma holds
 * the mma.sync kernel to 1e-2 and 5e-3 because its reference keeps the
 * unrounded f32 inputs, whose rounding to bf16 it then sees; here the
 * mma.sync rows keep its 1e-2 and 5e-3 as a sanity bound on the same
 * inputs.
 *
 * Usage: test_attention_sm90 [--small] [--seed N]; exit 77 without a
 * compute capability 9.0 device.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "gpu_check.h"

#include <pthread.h>

#define TOL_O 4e-3
#define TOL_LSE 2e-5
#define TOL_MMA_O 1e-2
#define TOL_MMA_LSE 5e-3
#define TOL_GRAD 1e-2
#define GUARD 256 /* 32-bit words past each output */

typedef struct shp {
    uint32_t b, s, hq, hkv, d;
    double qscale;
} shp;

static uint16_t bf16_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float f32_of_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Normal data rounded to bf16: the f32 values (exact bf16) and the bits. */
static float *bf16_data(size_t n, double scale, uint16_t **bits)
{
    float *x = fill_normal(n, scale, 0.0);
    *bits = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        (*bits)[i] = bf16_of(x[i]);
        x[i] = f32_of_bf16((*bits)[i]);
    }
    return x;
}

/* ---------------------------------------------------------------- reference */

typedef struct refjob {
    const shp *x;
    const float *q, *k, *v;
    float scale;
    double *o, *lse;
    size_t next, rows; /* rows (b, s, h) handed out in chunks */
    pthread_mutex_t mu;
} refjob;

static void ref_row(const refjob *j, size_t r, double *sc)
{
    const shp *x = j->x;
    uint32_t h = (uint32_t)(r % x->hq), s = (uint32_t)(r / x->hq % x->s);
    uint32_t b = (uint32_t)(r / x->hq / x->s), g = x->hq / x->hkv;
    const float *qi = j->q + r * x->d;
    double m = -INFINITY, sum = 0;
    for (uint32_t t = 0; t <= s; t++) {
        const float *kt = j->k + (((size_t)b * x->s + t) * x->hkv + h / g) * x->d;
        double dot = 0;
        for (uint32_t e = 0; e < x->d; e++)
            dot += (double)qi[e] * kt[e];
        sc[t] = (double)j->scale * dot;
        m = fmax(m, sc[t]);
    }
    double *o = j->o + r * x->d;
    memset(o, 0, x->d * sizeof *o);
    for (uint32_t t = 0; t <= s; t++) {
        double p = exp(sc[t] - m);
        sum += p;
        const float *vt = j->v + (((size_t)b * x->s + t) * x->hkv + h / g) * x->d;
        for (uint32_t e = 0; e < x->d; e++)
            o[e] += p * vt[e];
    }
    for (uint32_t e = 0; e < x->d; e++)
        o[e] /= sum;
    j->lse[r] = m + log(sum);
}

static void *ref_worker(void *arg)
{
    refjob *j = arg;
    double *sc = xmalloc(j->x->s * sizeof *sc);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t r0 = j->next;
        j->next += 64;
        pthread_mutex_unlock(&j->mu);
        if (r0 >= j->rows)
            break;
        size_t r1 = r0 + 64 < j->rows ? r0 + 64 : j->rows;
        for (size_t r = r0; r < r1; r++)
            ref_row(j, r, sc);
    }
    free(sc);
    return NULL;
}

/* O and LSE in double, rows (b, s, h) spread over 16 threads. */
static void reference(const shp *x, const float *q, const float *k, const float *v, float scale,
                      double *o, double *lse)
{
    refjob j = {x, q, k, v, scale, o, lse, 0, (size_t)x->b * x->s * x->hq,
                PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[16];
    int n = 0;
    for (; n < 16; n++)
        if (pthread_create(&th[n], NULL, ref_worker, &j))
            break;
    if (n == 0)
        ref_worker(&j);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* The backward in double, on the forward kernel's own O and LSE (as
 * test_attention_mma's): delta_i = dO_i . O_i, P = exp(scale s - LSE_i),
 * dS = P (dO_i . v_j - delta_i); dQ_i = scale sum_j dS k_j, and, a key row
 * at a time, dK_j = scale sum_(h, i >= j) dS q_i, dV_j = sum P dO_i over
 * the key's group of query heads. Rows spread over 16 threads. */
typedef struct bwdjob {
    const shp *x;
    const float *q, *k, *v, *go, *o, *lse;
    float scale;
    double *delta, *dq, *dk, *dv;
    size_t next, qrows, krows;
    pthread_mutex_t mu;
} bwdjob;

static void bwd_qrow(const bwdjob *j, size_t r)
{
    const shp *x = j->x;
    uint32_t h = (uint32_t)(r % x->hq), s = (uint32_t)(r / x->hq % x->s);
    uint32_t b = (uint32_t)(r / x->hq / x->s), g = x->hq / x->hkv;
    const float *qi = j->q + r * x->d, *gi = j->go + r * x->d;
    double *dq = j->dq + r * x->d;
    memset(dq, 0, x->d * sizeof *dq);
    for (uint32_t t = 0; t <= s; t++) {
        size_t kt = (((size_t)b * x->s + t) * x->hkv + h / g) * x->d;
        double sc = 0, dp = 0;
        for (uint32_t e = 0; e < x->d; e++) {
            sc += (double)qi[e] * j->k[kt + e];
            dp += (double)gi[e] * j->v[kt + e];
        }
        double p = exp((double)j->scale * sc - j->lse[r]);
        double ds = p * (dp - j->delta[r]);
        for (uint32_t e = 0; e < x->d; e++)
            dq[e] += (double)j->scale * ds * j->k[kt + e];
    }
}

static void bwd_krow(const bwdjob *j, size_t r)
{
    const shp *x = j->x;
    uint32_t kh = (uint32_t)(r % x->hkv), t = (uint32_t)(r / x->hkv % x->s);
    uint32_t b = (uint32_t)(r / x->hkv / x->s), g = x->hq / x->hkv;
    const float *kt = j->k + r * x->d, *vt = j->v + r * x->d;
    double *dk = j->dk + r * x->d, *dv = j->dv + r * x->d;
    memset(dk, 0, x->d * sizeof *dk);
    memset(dv, 0, x->d * sizeof *dv);
    for (uint32_t h = kh * g; h < kh * g + g; h++)
        for (uint32_t s = t; s < x->s; s++) {
            size_t qr = ((size_t)b * x->s + s) * x->hq + h;
            const float *qi = j->q + qr * x->d, *gi = j->go + qr * x->d;
            double sc = 0, dp = 0;
            for (uint32_t e = 0; e < x->d; e++) {
                sc += (double)qi[e] * kt[e];
                dp += (double)gi[e] * vt[e];
            }
            double p = exp((double)j->scale * sc - j->lse[qr]);
            double ds = p * (dp - j->delta[qr]);
            for (uint32_t e = 0; e < x->d; e++) {
                dk[e] += (double)j->scale * ds * qi[e];
                dv[e] += p * gi[e];
            }
        }
}

static void *bwd_worker(void *arg)
{
    bwdjob *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t r0 = j->next;
        j->next += 16;
        pthread_mutex_unlock(&j->mu);
        if (r0 >= j->qrows + j->krows)
            break;
        size_t r1 = r0 + 16 < j->qrows + j->krows ? r0 + 16 : j->qrows + j->krows;
        for (size_t r = r0; r < r1; r++) {
            if (r < j->qrows)
                bwd_qrow(j, r);
            else
                bwd_krow(j, r - j->qrows);
        }
    }
    return NULL;
}

/* S = 1: every query's one key is its own, P = 1 and O = V, so dQ and dK
 * are exactly 0 and what a kernel gives is the rounding of dP - delta (an
 * f32 sum of bf16 products against delta's f32 sum of the same products),
 * times P and K (Q) rounded to bf16. As tests/kernels/attention_check.h
 * derives for the mma.sync family (s1_ds_bound): each element of dQ is
 * within scale |K_e| (4 + 1) u A of 0, A = sum_e |dO_e V_e|, u = 2^-9,
 * and of dK within scale |Q_e| (4 + 1) u A; the norm of those bounds over
 * the tolerance is the floor the error's norm is held to (a kernel that
 * gets the math wrong, dP - delta not cancelling, misses it by far). */
static void s1_floors(const shp *x, const float *q, const float *k, const float *v,
                      const float *go, float scale, double *floor_)
{
    uint32_t g = x->hq / x->hkv;
    double sq = 0, sk = 0;
    double *mk = calloc((size_t)x->b * x->hkv * x->d, sizeof *mk);
    if (!mk)
        return;
    for (uint32_t b = 0; b < x->b; b++)
        for (uint32_t h = 0; h < x->hq; h++) {
            size_t qi = ((size_t)b * x->hq + h) * x->d, ki = ((size_t)b * x->hkv + h / g) * x->d;
            double a = 0;
            for (uint32_t e = 0; e < x->d; e++)
                a += fabs((double)go[qi + e] * v[ki + e]);
            double bound = 0x1p-9 * 5 * a * scale;
            for (uint32_t e = 0; e < x->d; e++) {
                double dq = bound * fabs(k[ki + e]);
                sq += dq * dq;
                mk[ki + e] += bound * fabs(q[qi + e]);
            }
        }
    for (size_t i = 0; i < (size_t)x->b * x->hkv * x->d; i++)
        sk += mk[i] * mk[i];
    free(mk);
    floor_[0] = sqrt(sq) / TOL_GRAD;
    floor_[1] = sqrt(sk) / TOL_GRAD;
}

static void bwd_reference(bwdjob *j)
{
    const shp *x = j->x;
    for (size_t r = 0; r < j->qrows; r++) {
        double d = 0;
        for (uint32_t e = 0; e < x->d; e++)
            d += (double)j->go[r * x->d + e] * j->o[r * x->d + e];
        j->delta[r] = d;
    }
    pthread_t th[16];
    int n = 0;
    for (; n < 16; n++)
        if (pthread_create(&th[n], NULL, bwd_worker, j))
            break;
    if (n == 0)
        bwd_worker(j);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* ---------------------------------------------------------------- the table */

static void print_rows(void)
{
    printf("\n%-24s %-34s %10s %10s %5s %7s %s\n", "kernel", "shape", "rel_l2", "max_rel", "bad",
           "repeat", "");
    for (size_t i = 0; i < nrows; i++) {
        const row *t = &table[i];
        printf("%-24s %-34s %10.2e %10.2e %5zu %7s %s\n", t->kernel, t->shape, t->rel,
               t->max_rel, t->bad, t->repeat ? "same" : "DIFF", t->pass ? "ok" : "FAIL");
    }
    printf("rel_l2  = |out - ref| / |ref| (2-norms) against double on the bf16 inputs; sm90 O "
           "<= %.0e, LSE <= %.0e; mma O <= %.0e, LSE <= %.0e\n"
           "max_rel = max |out_i - ref_i| / max(|ref_i|, 1e-6 max|ref|)\n"
           "bad     = non-finite outputs, bf16 copy bits not O rounded, the copy written when "
           "not asked for, guard words written\n"
           "repeat  = the second launch (and a launch without the copy) gave the same bits\n",
           TOL_O, TOL_LSE, TOL_MMA_O, TOL_MMA_LSE);
}

/* ---------------------------------------------------------------- one case */

static double worst_diff_o, worst_diff_lse; /* sm_90a against mma.sync, over the cases */

static pgrt_buf *words(size_t n) { return dev_alloc(PG_U32, n); }

/* Whether the GUARD words past n words of host copy w are still poison. */
static size_t guard_hits(const uint32_t *w, size_t n)
{
    size_t hits = 0;
    for (size_t i = n; i < n + GUARD; i++)
        hits += w[i] != POISON;
    return hits;
}

static void attention_case(shp x)
{
    size_t nq = (size_t)x.b * x.s * x.hq * x.d, nk = (size_t)x.b * x.s * x.hkv * x.d;
    size_t nr = (size_t)x.b * x.s * x.hq, nqw = (nq + 1) / 2;
    float scale = 1.0f / sqrtf((float)x.d);
    uint16_t *hq16, *hk16, *hv16;
    float *q = bf16_data(nq, x.qscale, &hq16), *k = bf16_data(nk, 1.0, &hk16);
    float *v = bf16_data(nk, 1.0, &hv16);
    double *ro = xmalloc(nq * sizeof *ro), *rl = xmalloc(nr * sizeof *rl);
    reference(&x, q, k, v, scale, ro, rl);

    /* bf16 inputs, outputs with a poisoned guard past their ends */
    pgrt_buf *bq = dev_alloc(PG_BF16, nq), *bk = dev_alloc(PG_BF16, nk);
    pgrt_buf *bv = dev_alloc(PG_BF16, nk);
    int rc;
    if ((rc = pgrt_buf_upload(bq, 0, hq16, nq)) || (rc = pgrt_buf_upload(bk, 0, hk16, nk)) ||
        (rc = pgrt_buf_upload(bv, 0, hv16, nk)))
        die_rt("pgrt_buf_upload", rc);
    pgrt_buf *bo = words(nq + GUARD), *bob = words(nqw + GUARD), *bl = words(nr + GUARD);
    uint32_t *ho[2] = {xmalloc((nq + GUARD) * 4), xmalloc((nq + GUARD) * 4)};
    uint32_t *hob[2] = {xmalloc((nqw + GUARD) * 4), xmalloc((nqw + GUARD) * 4)};
    uint32_t *hl[2] = {xmalloc((nr + GUARD) * 4), xmalloc((nr + GUARD) * 4)};
    pgrt_attention90 a = {pgrt_buf_ptr(bq), pgrt_buf_ptr(bk), pgrt_buf_ptr(bv),
                          pgrt_buf_ptr(bo), pgrt_buf_ptr(bob), pgrt_buf_ptr(bl),
                          x.b, x.s, x.hq, x.hkv, x.d, scale};
    bool ok = true, repeat = true;
    for (int run = 0; run < 3; run++) {
        poison(bo), poison(bob), poison(bl);
        /* the third run without the bf16 copy: the same O, the copy untouched */
        a.o_bf16 = run == 2 ? 0 : pgrt_buf_ptr(bob);
        rc = pgrt_attention_sm90_forward(check_ctx, NULL, &a);
        if (!rc)
            rc = pgrt_ctx_sync(check_ctx);
        if (rc) {
            TEST_FAIL_("pgrt_attention_sm90_forward: %s: %s", pgrt_err_name(rc),
                       pgrt_last_message());
            ok = false;
        }
        int slot = run == 2 ? 1 : run;
        dev_download(bo, ho[slot], nq + GUARD);
        dev_download(bob, hob[slot], nqw + GUARD);
        dev_download(bl, hl[slot], nr + GUARD);
        if (run == 1) {
            /* the first two runs: the same bits */
            repeat = !memcmp(ho[0], ho[1], nq * 4) && !memcmp(hob[0], hob[1], nqw * 4) &&
                     !memcmp(hl[0], hl[1], nr * 4);
        }
    }
    char shape[48];
    snprintf(shape, sizeof shape, "B%u S%u H%u/%u D%u%s", x.b, x.s, x.hq, x.hkv, x.d,
             x.qscale > 1 ? " peaky" : "");

    /* O: against the reference; run 3 (no copy) the same bits as run 1;
     * the copy its rounding; nothing past the ends */
    cur_tol = TOL_O;
    row *r = add_row("attention_sm90_forward", "O %s", shape);
    if (!ok)
        r->bad++;
    compare(r, (const float *)(const void *)ho[0], ro, nq);
    same_bits(r, ho[0], ho[1], nq * 4);
    r->repeat &= repeat;
    const uint16_t *cp = (const uint16_t *)(const void *)hob[0];
    const float *of = (const float *)(const void *)ho[0];
    size_t copy_bad = 0;
    for (size_t i = 0; i < nq; i++)
        copy_bad += cp[i] != bf16_of(of[i]);
    const uint16_t *cp3 = (const uint16_t *)(const void *)hob[1];
    size_t untouched = 0;
    for (size_t i = 0; i < nq; i++)
        untouched += cp3[i] == (uint16_t)(POISON & 0xFFFFu) || cp3[i] == (uint16_t)(POISON >> 16);
    if (copy_bad || untouched != nq)
        printf("  %s: bf16 copy: %zu elements differ from O rounded; %zu of %zu left alone "
               "without it\n", shape, copy_bad, untouched, nq);
    size_t guards = guard_hits(ho[0], nq) + guard_hits(hob[0], nqw) + guard_hits(hl[0], nr);
    if (guards)
        printf("  %s: %zu guard words past the outputs written\n", shape, guards);
    r->bad += copy_bad + (nq - untouched) + guards;
    finish(r);

    cur_tol = TOL_LSE;
    r = add_row("attention_sm90_forward", "LSE %s", shape);
    if (!ok)
        r->bad++;
    compare(r, (const float *)(const void *)hl[0], rl, nr);
    same_bits(r, hl[0], hl[1], nr * 4);
    r->repeat &= repeat;
    finish(r);

    /* attention_mma_forward on the same numbers (f32, exact in bf16) */
    pgrt_buf *fq = dev_upload(q, nq), *fk = dev_upload(k, nk), *fv = dev_upload(v, nk);
    pgrt_buf *mo = dev_alloc(PG_F32, nq), *ml = dev_alloc(PG_F32, nr);
    float *hmo = xmalloc(nq * 4), *hml = xmalloc(nr * 4);
    pgk_knobs kn = knobs_of("attention_mma_forward", "batch", x.b, "seq_len", x.s, "q_heads",
                            x.hq, "head_dim", x.d, NULL);
    pgrt_arg ma[] = {pgrt_arg_buf(fq),     pgrt_arg_buf(fk),     pgrt_arg_buf(fv),
                     pgrt_arg_buf(mo),     pgrt_arg_buf(ml),     pgrt_arg_u32(x.b),
                     pgrt_arg_u32(x.s),    pgrt_arg_u32(x.hq),   pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),    pgrt_arg_f32(scale)};
    poison(mo), poison(ml);
    bool mok = launch("attention_mma_forward", &kn, ma, 11);
    dev_download(mo, hmo, nq);
    dev_download(ml, hml, nr);
    cur_tol = TOL_MMA_O;
    r = add_row("attention_mma_forward", "O %s", shape);
    if (!mok)
        r->bad++;
    compare(r, hmo, ro, nq);
    finish(r);
    cur_tol = TOL_MMA_LSE;
    r = add_row("attention_mma_forward", "LSE %s", shape);
    if (!mok)
        r->bad++;
    compare(r, hml, rl, nr);
    finish(r);
    double omax = 0, dmax = 0, lmax = 0;
    for (size_t i = 0; i < nq; i++) {
        omax = fmax(omax, fabs(ro[i]));
        dmax = fmax(dmax, fabs((double)of[i] - hmo[i]));
    }
    const float *lf = (const float *)(const void *)hl[0];
    for (size_t i = 0; i < nr; i++)
        lmax = fmax(lmax, fabs((double)lf[i] - hml[i]));
    double drel = omax > 0 ? dmax / omax : dmax;
    printf("  %-26s sm90 vs mma: max|dO| %.3e (%.2e of max|O|), max|dLSE| %.3e\n", shape, dmax,
           drel, lmax);
    worst_diff_o = fmax(worst_diff_o, drel);
    worst_diff_lse = fmax(worst_diff_lse, lmax);

    /* the backward (B S Hq up to 16384 rows: S to 1024 at every head count,
     * and the long row at two heads): dO exact in bf16,
     * dQ, dK, dV against the double reference on the forward's O and LSE,
     * two runs the same bits, nothing written past the outputs */
    if ((size_t)x.b * x.s * x.hq <= 16384) {
        uint16_t *hg16;
        float *go = bf16_data(nq, 1.0, &hg16);
        double *rdel = xmalloc(nr * sizeof *rdel), *rdq = xmalloc(nq * sizeof *rdq);
        double *rdk = xmalloc(nk * sizeof *rdk), *rdv = xmalloc(nk * sizeof *rdv);
        bwdjob bj = {&x, q, k, v, go, of, lf, scale, rdel, rdq, rdk, rdv, 0, nr,
                     (size_t)x.b * x.s * x.hkv, PTHREAD_MUTEX_INITIALIZER};
        bwd_reference(&bj);
        uint64_t stb = pgrt_attention_sm90_stats_bytes(x.b, x.s, x.hq);
        pgrt_buf *bgo = dev_upload(go, nq), *bgob = dev_alloc(PG_BF16, nq);
        pgrt_buf *bst = dev_alloc(PG_U32, stb / 4);
        pgrt_buf *bdq = words(nq + GUARD), *bdk = words(nk + GUARD), *bdv = words(nk + GUARD);
        pgrt_buf *bkh = dev_alloc(PG_F32, nq), *bvh = dev_alloc(PG_F32, nq);
        uint32_t *hd[3][2];
        size_t nn[3] = {nq, nk, nk};
        for (int o = 0; o < 3; o++)
            for (int t = 0; t < 2; t++)
                hd[o][t] = xmalloc((nn[o] + GUARD) * 4);
        pgrt_attention90_grad gr = {pgrt_buf_ptr(bq),  pgrt_buf_ptr(bk),   pgrt_buf_ptr(bv),
                                    pgrt_buf_ptr(bo),  pgrt_buf_ptr(bgo),  pgrt_buf_ptr(bl),
                                    pgrt_buf_ptr(bgob), pgrt_buf_ptr(bst), pgrt_buf_ptr(bdq),
                                    pgrt_buf_ptr(bdk), pgrt_buf_ptr(bdv),  pgrt_buf_ptr(bkh),
                                    pgrt_buf_ptr(bvh), x.b, x.s, x.hq, x.hkv, x.d, scale};
        bool bok = true;
        pgrt_buf *outs[3] = {bdq, bdk, bdv};
        for (int run = 0; run < 2; run++) {
            for (int o = 0; o < 3; o++)
                poison(outs[o]);
            rc = pgrt_attention_sm90_backward(check_ctx, NULL, &gr);
            if (!rc)
                rc = pgrt_ctx_sync(check_ctx);
            if (rc) {
                TEST_FAIL_("pgrt_attention_sm90_backward: %s: %s", pgrt_err_name(rc),
                           pgrt_last_message());
                bok = false;
            }
            for (int o = 0; o < 3; o++)
                dev_download(outs[o], hd[o][run], nn[o] + GUARD);
        }
        static const char *const gname[3] = {"dQ", "dK", "dV"};
        const double *gref[3] = {rdq, rdk, rdv};
        cur_tol = TOL_GRAD;
        double floor_[3] = {0, 0, 0};
        if (x.s == 1)
            s1_floors(&x, q, k, v, go, scale, floor_);
        for (int o = 0; o < 3; o++) {
            r = add_row("attention_sm90_backward", "%s %s", gname[o], shape);
            if (!bok)
                r->bad++;
            const float *got = (const float *)(const void *)hd[o][0];
            compare(r, got, gref[o], nn[o]);
            if (floor_[o] > 0) { /* S = 1: held to the bound of its rounding */
                double num = 0, den = 0;
                for (size_t i = 0; i < nn[o]; i++) {
                    double e = (double)got[i] - gref[o][i];
                    num += e * e;
                    den += gref[o][i] * gref[o][i];
                }
                if (isfinite(num))
                    r->rel = sqrt(num) / fmax(sqrt(den), floor_[o]);
            }
            same_bits(r, hd[o][0], hd[o][1], nn[o] * 4);
            size_t gh = guard_hits(hd[o][0], nn[o]);
            if (gh)
                printf("  %s: %s: %zu guard words written\n", shape, gname[o], gh);
            r->bad += gh;
            finish(r);
        }
        pgrt_buf *ball[] = {bgo, bgob, bst, bdq, bdk, bdv, bkh, bvh};
        for (size_t i = 0; i < sizeof ball / sizeof ball[0]; i++)
            pgrt_buf_destroy(&ball[i]);
        for (int o = 0; o < 3; o++)
            free(hd[o][0]), free(hd[o][1]);
        free(go), free(hg16), free(rdel), free(rdq), free(rdk), free(rdv);
    }

    pgrt_buf *all[] = {bq, bk, bv, bo, bob, bl, fq, fk, fv, mo, ml};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgrt_buf_destroy(&all[i]);
    free(q), free(k), free(v), free(hq16), free(hk16), free(hv16), free(ro), free(rl);
    for (int i = 0; i < 2; i++)
        free(ho[i]), free(hob[i]), free(hl[i]);
    free(hmo), free(hml);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_attention_sm90");
    pgrt_device_info di;
    if (pgrt_ctx_device_info(check_ctx, &di) || di.arch_target != PG_SM_90A) {
        printf("test_attention_sm90: attention_sm90_forward needs a compute capability 9.0 "
               "device (sm_90a): skipped\n");
        return 77;
    }
    static const uint32_t seqs[] = {1, 17, 128, 200, 1024, 4096};
    static const uint32_t seqs_small[] = {1, 17, 130};
    static const uint32_t heads[3][2] = {{2, 2}, {4, 2}, {6, 1}};
    static const uint32_t dims[] = {64, 128};
    const uint32_t *ss = small ? seqs_small : seqs;
    size_t ns = small ? 3 : 6;
    for (size_t d = 0; d < 2; d++)
        for (size_t h = 0; h < 3; h++)
            for (size_t i = 0; i < ns; i++)
                attention_case((shp){2, ss[i], heads[h][0], heads[h][1], dims[d], 1.0});
    static const shp extra[] = {
        {2, 300, 4, 2, 80, 1.0},  /* padded to the 128-wide tile */
        {2, 200, 6, 1, 32, 1.0},  /* padded to the 64-wide tile */
        {2, 512, 4, 2, 128, 4.0}, /* a peaky softmax */
        {3, 300, 6, 2, 64, 1.0},  /* three sequences */
        {1, 1000, 7, 1, 96, 1.0}, /* GQA 7, head_dim 96 */
        {1, 8192, 2, 1, 64, 1.0}, /* a long row at small heads (the backward too) */
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        if (!small || extra[i].s <= 300)
            attention_case(extra[i]);
    print_rows();
    printf("\nworst sm90 - mma difference over the shapes: O %.2e of max|O|, LSE %.2e\n",
           worst_diff_o, worst_diff_lse);
    TEST_DONE();
}
