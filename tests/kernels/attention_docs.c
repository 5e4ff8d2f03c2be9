/* SPDX-License-Identifier: MIT */
/*
 * Document-bounded causal attention (the _docs kernels: several documents
 * packed into one row, doc_start[b S + i] where i's document begins; query
 * i sees keys doc_start[i]..i) on a GPU, both families: the SIMT f32
 * kernels (attention_forward_docs_f32, attention_backward_dq_docs_f32,
 * attention_backward_dkv_docs_f32) and the tensor-core ones
 * (attention_mma_forward_docs, _backward_dq_docs, _backward_dkv_docs; rows
 * skipped below sm_80).
 *
 * Each case, as test_attention does: the forward's O and LSE against a
 * double reference, then dQ and delta and dK and dV against the exact
 * gradient on the kernels' own O and LSE, at the base kernels' tolerances
 * (SIMT: O, LSE, delta 1e-5, gradients 5e-5; tensor cores: O 1e-2, LSE
 * 5e-3, gradients 2e-2, delta 1e-5), outputs NaN-poisoned, every launch
 * twice for the same bits. Then:
 *   - rows of 1 to 5 documents: each document run alone through the base
 *     kernels (forward, dq, dkv as a row of its own, S = its length) and
 *     put back in place must give the _docs kernels' outputs: bit for bit
 *     for the SIMT kernels (they take the same values in the same order),
 *     within the base kernel's tolerance for the tensor-core ones (O's for
 *     delta, which is computed from O);
 *   - doc_start all zero (one document a row): the base kernels' bits on
 *     the same inputs, every output.
 * Layouts: random cuts (1 to 5 documents a row, ragged), and cuts on and
 * next to the 32- and 64-row tiles (documents of one token included).
 * Shapes: head_dim 64, 80, 96, 128; Hq/Hkv ratios 1, 2, 6; batches 1 and 2;
 * a peaky softmax.
 *
 * Usage: test_attention_docs [--small] [--seed N]; exit 77 without a GPU.
 */
#include "attention_check.h"

typedef struct fam {
    const char *fwd, *dq, *dkv;    /* the _docs kernels */
    const char *bfwd, *bdq, *bdkv; /* their base kernels */
    double tol_o, tol_lse, tol_grad;
    bool s1_floor; /* as att_case's */
    bool exact;    /* a document alone gives the same bits */
} fam;

static const fam fams[2] = {
    {"attention_forward_docs_f32", "attention_backward_dq_docs_f32",
     "attention_backward_dkv_docs_f32", "attention_forward_f32", "attention_backward_dq_f32",
     "attention_backward_dkv_f32", 1e-5, 1e-5, 5e-5, false, true},
    {"attention_mma_forward_docs", "attention_mma_backward_dq_docs",
     "attention_mma_backward_dkv_docs", "attention_mma_forward", "attention_mma_backward_dq",
     "attention_mma_backward_dkv", 1e-2, 5e-3, 2e-2, true, false},
};

enum layout { ZERO, RANDOM, TILED };

/* doc_start of every row by kind; returns the longest document. */
static uint32_t make_layout(int32_t *ds, const shp *x, enum layout kind)
{
    static const uint32_t tiled[2][5] = {{32, 64, 65, 192, 0}, {63, 129, 257, 0, 0}};
    uint32_t longest = 0;
    for (uint32_t b = 0; b < x->b; b++) {
        bool cut[16384 + 1];
        memset(cut, 0, (size_t)x->s + 1);
        if (kind == RANDOM) {
            /* the first row 5 documents (where it has room), the others 1 to 5 */
            uint32_t n = b == 0 ? 5 : 1 + (uint32_t)(next_u64() % 5);
            if (n > x->s)
                n = x->s;
            for (uint32_t c = 1; c < n;) {
                uint32_t at = 1 + (uint32_t)(next_u64() % (x->s - 1));
                if (!cut[at]) {
                    cut[at] = true;
                    c++;
                }
            }
        } else if (kind == TILED) {
            for (const uint32_t *t = tiled[b % 2]; *t; t++)
                if (*t < x->s)
                    cut[*t] = true;
        }
        int32_t start = 0;
        printf("  row %u: documents at", b);
        for (uint32_t i = 0; i < x->s; i++) {
            if (cut[i])
                start = (int32_t)i;
            if (i == 0 || cut[i])
                printf(" %u", i);
            ds[(size_t)b * x->s + i] = start;
            if (i + 1 - (uint32_t)start > longest)
                longest = i + 1 - (uint32_t)start;
        }
        printf("\n");
    }
    return longest;
}

/* The case's inputs, device and host. */
typedef struct inputs {
    shp x;
    float *q, *k, *v, *go;
    int32_t *ds;
    pgrt_buf *bq, *bk, *bv, *bgo, *bds;
} inputs;

typedef struct outs {
    outbuf o, l, dq, del, dk, dv;
} outs;

static outs outs_new(const shp *x)
{
    size_t nq = (size_t)x->b * x->s * x->hq * x->d, nk = (size_t)x->b * x->s * x->hkv * x->d;
    size_t nr = (size_t)x->b * x->s * x->hq;
    outs o = {out_new(nq, false), out_new(nr, false), out_new(nq, false),
              out_new(nr, false), out_new(nk, false), out_new(nk, false)};
    return o;
}

static void outs_free(outs *o)
{
    out_free(&o->o), out_free(&o->l), out_free(&o->dq);
    out_free(&o->del), out_free(&o->dk), out_free(&o->dv);
}

/* forward, dq, dkv on in (docs: the _docs kernels with doc_start, else the
 * base ones), each launch twice; the backward on the forward's own O and
 * LSE (second run's bits: the same as the first's when the kernel is
 * deterministic). ok[0..2]: each launch went. */
static void run_all(const fam *c, const inputs *in, bool docs, outs *r, bool ok[3])
{
    const shp *x = &in->x;
    size_t nq = (size_t)x->b * x->s * x->hq * x->d, nr = (size_t)x->b * x->s * x->hq;
    float scale = 1.0f / sqrtf((float)x->d);
    const char *fwd = docs ? c->fwd : c->bfwd, *dqn = docs ? c->dq : c->bdq;
    const char *dkvn = docs ? c->dkv : c->bdkv;
    size_t na = docs ? 12 : 11;
    pgk_knobs kq = knobs_of(fwd, "batch", x->b, "seq_len", x->s, "q_heads", x->hq, "head_dim",
                            x->d, NULL);
    pgrt_arg fa[] = {pgrt_arg_buf(in->bq),  pgrt_arg_buf(in->bk),  pgrt_arg_buf(in->bv),
                     pgrt_arg_buf(r->o.b),  pgrt_arg_buf(r->l.b),  pgrt_arg_u32(x->b),
                     pgrt_arg_u32(x->s),    pgrt_arg_u32(x->hq),   pgrt_arg_u32(x->hkv),
                     pgrt_arg_u32(x->d),    pgrt_arg_f32(scale),   pgrt_arg_buf(in->bds)};
    outbuf fo[2] = {r->o, r->l};
    ok[0] = run_twice(fwd, &kq, fa, na, fo, 2);

    pgrt_buf *bo = act_upload(r->o.host[0], nq, false), *bl = dev_upload(r->l.host[0], nr);
    na = docs ? 15 : 14;
    pgrt_arg qa[] = {pgrt_arg_buf(in->bq),  pgrt_arg_buf(in->bk),   pgrt_arg_buf(in->bv),
                     pgrt_arg_buf(bo),      pgrt_arg_buf(in->bgo),  pgrt_arg_buf(bl),
                     pgrt_arg_buf(r->dq.b), pgrt_arg_buf(r->del.b), pgrt_arg_u32(x->b),
                     pgrt_arg_u32(x->s),    pgrt_arg_u32(x->hq),    pgrt_arg_u32(x->hkv),
                     pgrt_arg_u32(x->d),    pgrt_arg_f32(scale),    pgrt_arg_buf(in->bds)};
    outbuf qo[2] = {r->dq, r->del};
    pgk_knobs kdq = knobs_of(dqn, "batch", x->b, "seq_len", x->s, "q_heads", x->hq, "head_dim",
                             x->d, NULL);
    ok[1] = run_twice(dqn, &kdq, qa, na, qo, 2);

    pgrt_arg ka[] = {pgrt_arg_buf(in->bq),  pgrt_arg_buf(in->bk),   pgrt_arg_buf(in->bv),
                     pgrt_arg_buf(in->bgo), pgrt_arg_buf(bl),       pgrt_arg_buf(r->del.b),
                     pgrt_arg_buf(r->dk.b), pgrt_arg_buf(r->dv.b),  pgrt_arg_u32(x->b),
                     pgrt_arg_u32(x->s),    pgrt_arg_u32(x->hq),    pgrt_arg_u32(x->hkv),
                     pgrt_arg_u32(x->d),    pgrt_arg_f32(scale),    pgrt_arg_buf(in->bds)};
    outbuf ko[2] = {r->dk, r->dv};
    pgk_knobs kkv = knobs_of(dkvn, "batch", x->b, "seq_len", x->s, "kv_heads", x->hkv,
                             "head_dim", x->d, NULL);
    ok[2] = run_twice(dkvn, &kkv, ka, na, ko, 2);
    pgrt_buf_destroy(&bo), pgrt_buf_destroy(&bl);
}

/* out (the _docs kernel's, both runs) against `want` (another kernel's
 * float outputs): norm-wise within tol, and with `exact` bit for bit
 * (each differing element counts as bad). floor as check()'s. */
static void check_vs(const char *name, const shp *x, const char *what, double tol, bool ok,
                     const outbuf *o, const float *want, bool exact, double floor)
{
    cur_tol = tol;
    row *r = add_row(name, "%s B%u S%u H%u/%u D%u", what, x->b, x->s, x->hq, x->hkv, x->d);
    if (!ok)
        r->bad++;
    double *ref = ref_alloc(o->n);
    double num = 0, den = 0;
    for (size_t i = 0; i < o->n; i++) {
        ref[i] = want[i];
        double e = (double)o->host[0][i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    compare(r, o->host[0], ref, o->n);
    if (floor > 0 && isfinite(num))
        r->rel = sqrt(num) / fmax(sqrt(den), floor);
    if (exact)
        for (size_t i = 0; i < o->n; i++)
            if (memcmp(&o->host[0][i], &want[i], 4) != 0)
                r->bad++;
    same_bits(r, o->host[0], o->host[1], o->n * 4);
    finish(r);
    free(ref);
}

/* Each document of `in` through the base kernels as a batch of one, its
 * outputs put in place in a (fresh outs of in's shape; host[0] only). */
static bool run_alone(const fam *c, const inputs *in, outs *a)
{
    const shp *x = &in->x;
    bool all = true;
    for (uint32_t b = 0; b < x->b; b++)
        for (uint32_t st = 0; st < x->s;) {
            uint32_t len = 1;
            while (st + len < x->s && in->ds[(size_t)b * x->s + st + len] == (int32_t)st)
                len++;
            inputs d = {.x = {1, len, x->hq, x->hkv, x->d, x->qscale}};
            size_t qo = qidx(x, b, st, 0), ko = kidx(x, b, st, 0);
            size_t ro = ((size_t)b * x->s + st) * x->hq;
            size_t nq = (size_t)len * x->hq * x->d, nk = (size_t)len * x->hkv * x->d;
            size_t nr = (size_t)len * x->hq;
            d.bq = act_upload(in->q + qo, nq, false);
            d.bk = act_upload(in->k + ko, nk, false);
            d.bv = act_upload(in->v + ko, nk, false);
            d.bgo = act_upload(in->go + qo, nq, false);
            d.bds = d.bq; /* a placeholder: the base kernels take no doc_start */
            outs r = outs_new(&d.x);
            bool ok[3];
            run_all(c, &d, false, &r, ok);
            all &= ok[0] && ok[1] && ok[2];
            memcpy(a->o.host[0] + qo, r.o.host[0], nq * 4);
            memcpy(a->l.host[0] + ro, r.l.host[0], nr * 4);
            memcpy(a->dq.host[0] + qo, r.dq.host[0], nq * 4);
            memcpy(a->del.host[0] + ro, r.del.host[0], nr * 4);
            memcpy(a->dk.host[0] + ko, r.dk.host[0], nk * 4);
            memcpy(a->dv.host[0] + ko, r.dv.host[0], nk * 4);
            outs_free(&r);
            pgrt_buf_destroy(&d.bq), pgrt_buf_destroy(&d.bk);
            pgrt_buf_destroy(&d.bv), pgrt_buf_destroy(&d.bgo);
            st += len;
        }
    return all;
}

static void docs_case(const fam *c, shp x, enum layout kind)
{
    uint32_t g = x.hq / x.hkv;
    size_t nq = (size_t)x.b * x.s * x.hq * x.d, nk = (size_t)x.b * x.s * x.hkv * x.d;
    size_t nr = (size_t)x.b * x.s * x.hq, nt = (size_t)x.b * x.s;
    /* the kernels' scale, as a double */
    const double scale = 1.0f / sqrtf((float)x.d);
    printf("%s B%u S%u H%u/%u D%u:\n", c->fwd, x.b, x.s, x.hq, x.hkv, x.d);
    inputs in = {.x = x};
    in.ds = xmalloc(nt * sizeof *in.ds);
    uint32_t longest = make_layout(in.ds, &x, kind);
    in.q = fill_normal(nq, x.qscale, 0.0), in.k = fill_normal(nk, 1.0, 0.0);
    in.v = fill_normal(nk, 1.0, 0.0), in.go = fill_normal(nq, 1.0, 0.0);
    in.bq = act_upload(in.q, nq, false), in.bk = act_upload(in.k, nk, false);
    in.bv = act_upload(in.v, nk, false), in.bgo = act_upload(in.go, nq, false);
    in.bds = s32_upload(in.ds, nt);
    const float *q = in.q, *k = in.k, *v = in.v, *go = in.go;

    outs r = outs_new(&x);
    bool ok[3];
    run_all(c, &in, true, &r, ok);

    /* forward reference: keys doc_start..s */
    double *ro = ref_alloc(nq), *rl = ref_alloc(nr), *sc = ref_alloc(x.s);
    for (uint32_t b = 0; b < x.b; b++)
        for (uint32_t s = 0; s < x.s; s++)
            for (uint32_t h = 0; h < x.hq; h++) {
                uint32_t j0 = (uint32_t)in.ds[(size_t)b * x.s + s];
                const float *qi = q + qidx(&x, b, s, h);
                double m = -INFINITY, sum = 0;
                for (uint32_t j = j0; j <= s; j++) {
                    sc[j] = scale * dot(qi, k + kidx(&x, b, j, h / g), x.d);
                    m = fmax(m, sc[j]);
                }
                double *o = ro + qidx(&x, b, s, h);
                memset(o, 0, x.d * sizeof *o);
                for (uint32_t j = j0; j <= s; j++) {
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
    check(c->fwd, &x, "O", c->tol_o, ok[0], &r.o, ro, 0);
    /* the tensor cores' LSE at S = 1 is one score from bf16-rounded q and
     * k: its error is absolute, up to about 2^-8 scale sum |q k| (0.02 at
     * D 64 on unit normals), not relative to the score, which can sit near
     * 0 (seed 1795763734: 0.25 off by 0.0055). There the norm is taken
     * against at least 4 an element (0.02 absolute at tol 5e-3). */
    double lse_floor = !c->exact && x.s == 1 ? 4 * sqrt((double)r.l.n) : 0;
    check(c->fwd, &x, "LSE", c->tol_lse, ok[0], &r.l, rl, lse_floor);

    /* backward reference on the kernel's O and LSE */
    const float *o_in = r.o.host[0], *l_in = r.l.host[0];
    double *rdq = ref_alloc(nq), *rdk = ref_alloc(nk), *rdv = ref_alloc(nk), *rdel = ref_alloc(nr);
    /* every document one token long: bounds of the rounding (s1_ds_bound) */
    double *mdq = ref_alloc(nq), *mdk = ref_alloc(nk), *mdel = ref_alloc(nr);
    memset(mdq, 0, nq * sizeof *mdq);
    memset(mdk, 0, nk * sizeof *mdk);
    memset(rdk, 0, nk * sizeof *rdk);
    memset(rdv, 0, nk * sizeof *rdv);
    for (uint32_t b = 0; b < x.b; b++)
        for (uint32_t h = 0; h < x.hq; h++)
            for (uint32_t s = 0; s < x.s; s++) {
                uint32_t j0 = (uint32_t)in.ds[(size_t)b * x.s + s];
                size_t qi = qidx(&x, b, s, h), ri = ((size_t)b * x.s + s) * x.hq + h;
                double delta = dot(go + qi, o_in + qi, x.d);
                rdel[ri] = delta;
                mdel[ri] = s1_delta_bound(go + qi, o_in + qi, x.d);
                double *dq = rdq + qi;
                memset(dq, 0, x.d * sizeof *dq);
                for (uint32_t j = j0; j <= s; j++) {
                    size_t kj = kidx(&x, b, j, h / g);
                    double p = exp(scale * dot(q + qi, k + kj, x.d) - l_in[ri]);
                    double dpj = dot(go + qi, v + kj, x.d);
                    double dsv = p * (dpj - delta), dsm = s1_ds_bound(p, go + qi, v + kj, x.d);
                    for (uint32_t e = 0; e < x.d; e++) {
                        dq[e] += scale * dsv * k[kj + e];
                        rdk[kj + e] += scale * dsv * q[qi + e];
                        rdv[kj + e] += p * go[qi + e];
                        mdq[qi + e] += scale * dsm * fabs(k[kj + e]);
                        mdk[kj + e] += scale * dsm * fabs(q[qi + e]);
                    }
                }
            }
    /* every document one token long: the softmax is exactly 1, dQ and dK
     * are exactly 0 and delta is dO.O, so the kernels give rounding
     * (attention_check.h derives the bounds): dQ and dK on the tensor
     * cores are held to s1_ds_bound (their terms' size, p (|dP| +
     * |delta|), was not a bound: it shrinks where dO.V happens to be near
     * 0, and --seed 21 failed at B1 S1 D64), delta in either family to
     * an f32 sum's error, not to its value's size; S > 1 as before */
    bool s1 = c->s1_floor && longest == 1;
    double fq = s1 ? norm2(mdq, nq) / c->tol_grad : 0;
    double fk = s1 ? norm2(mdk, nk) / c->tol_grad : 0;
    double fdel = longest == 1 ? norm2(mdel, nr) / 1e-5 : 0;
    check(c->dq, &x, "dQ", c->tol_grad, ok[1], &r.dq, rdq, fq);
    check(c->dq, &x, "delta", 1e-5, ok[1], &r.del, rdel, fdel);
    check(c->dkv, &x, "dK", c->tol_grad, ok[2], &r.dk, rdk, fk);
    check(c->dkv, &x, "dV", c->tol_grad, ok[2], &r.dv, rdv, 0);

    if (kind == ZERO) {
        /* one document a row: the base kernels' bits */
        outs bs = outs_new(&x);
        bool bok[3];
        run_all(c, &in, false, &bs, bok);
        const char *name[6] = {c->fwd, c->fwd, c->dq, c->dq, c->dkv, c->dkv};
        const char *what[6] = {"O=base", "LSE=base", "dQ=base", "delta=base", "dK=base",
                               "dV=base"};
        const outbuf *mine[6] = {&r.o, &r.l, &r.dq, &r.del, &r.dk, &r.dv};
        const outbuf *theirs[6] = {&bs.o, &bs.l, &bs.dq, &bs.del, &bs.dk, &bs.dv};
        for (int i = 0; i < 6; i++)
            check_vs(name[i], &x, what[i], c->tol_grad, ok[i / 2] && bok[i / 2], mine[i],
                     theirs[i]->host[0], true, 0);
        outs_free(&bs);
    } else {
        /* each document alone through the base kernels */
        outs a = outs_new(&x);
        bool aok = run_alone(c, &in, &a);
        check_vs(c->fwd, &x, "O=alone", c->tol_o, ok[0] && aok, &r.o, a.o.host[0], c->exact, 0);
        check_vs(c->fwd, &x, "LSE=alone", c->tol_lse, ok[0] && aok, &r.l, a.l.host[0], c->exact,
                 0);
        /* two kernels' outputs, each within the bound of the exact 0 */
        check_vs(c->dq, &x, "dQ=alone", c->tol_grad, ok[1] && aok, &r.dq, a.dq.host[0], c->exact,
                 2 * fq);
        /* delta = rowsum(dO O): it carries O's error */
        check_vs(c->dq, &x, "delta=alone", c->exact ? 1e-5 : c->tol_o, ok[1] && aok, &r.del,
                 a.del.host[0], c->exact, 0);
        check_vs(c->dkv, &x, "dK=alone", c->tol_grad, ok[2] && aok, &r.dk, a.dk.host[0],
                 c->exact, 2 * fk);
        check_vs(c->dkv, &x, "dV=alone", c->tol_grad, ok[2] && aok, &r.dv, a.dv.host[0],
                 c->exact, 0);
        outs_free(&a);
    }

    outs_free(&r);
    pgrt_buf_destroy(&in.bq), pgrt_buf_destroy(&in.bk), pgrt_buf_destroy(&in.bv);
    pgrt_buf_destroy(&in.bgo), pgrt_buf_destroy(&in.bds);
    free(in.q), free(in.k), free(in.v), free(in.go), free(in.ds);
    free(ro), free(rl), free(sc), free(rdq), free(rdk), free(rdv), free(rdel), free(mdq),
        free(mdk), free(mdel);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_attention_docs");
    static const struct {
        shp x;
        enum layout kind;
    } cases[] = {
        {{1, 1, 1, 1, 64, 1.0}, ZERO},      {{2, 130, 6, 1, 64, 1.0}, RANDOM},
        {{2, 200, 4, 2, 80, 1.0}, TILED},   {{1, 300, 12, 2, 128, 1.0}, RANDOM},
        {{2, 257, 4, 4, 96, 1.0}, TILED},   {{1, 700, 2, 1, 128, 1.0}, TILED},
        {{2, 97, 3, 3, 64, 4.0}, RANDOM},   {{2, 333, 6, 6, 128, 1.0}, ZERO},
        {{1, 96, 12, 2, 80, 1.0}, ZERO},    {{1, 150, 6, 1, 96, 1.0}, RANDOM},
    };
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            shp x = cases[i].x;
            if (small && x.s > 256)
                x.s = 131;
            docs_case(&fams[f], x, cases[i].kind);
        }
    print_table("SIMT: O, LSE, delta <= 1e-5, dQ dK dV <= 5e-5; tensor cores: O <= 1e-2, LSE <= "
                "5e-3, dQ dK dV <= 2e-2, delta <= 1e-5. =alone: each document run alone through "
                "the base kernels (SIMT: the same bits; tensor cores: their tolerance, delta O's); "
                "=base: doc_start all zero against the base kernels, the same bits");
    TEST_DONE();
}
