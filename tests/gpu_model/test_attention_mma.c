/* SPDX-License-Identifier: MIT */
/*
 * The tensor-core attention kernels (attention_mma_forward, _backward_dq,
 * _backward_dkv: f32 in and out, bf16 operands) on a GPU against a double
 * reference on the f32 inputs: the forward's O and LSE, then dQ and delta,
 * then dK and dV, on the kernel's own forward outputs (the backward
 * reference is the exact gradient as a function of the O and LSE it is
 * given, as in test_attention).
 *
 * Shapes: sequence lengths 1, 17, 100, 512 (and 130, 300), head_dim 64 and
 * 128 (and 80, padded to 128; and 30, not a multiple of 4: the scalar
 * staging path), group sizes 1, 3 and 6 (Hq/Hkv 12/2, 4/4, 3/1), batches 1
 * and 2, a peaky softmax. Outputs NaN-poisoned before each launch, each
 * launch twice: the same bits. Tolerances are those of bf16 operands (8
 * significant bits) with f32 accumulation, norm-wise: O 1e-2, LSE 5e-3,
 * gradients 2e-2; delta (f32 from the f32 O and dO) 1e-5. At S = 1 (one key
 * a row) dQ and dK are exactly 0, and the kernels' values are what is left
 * of dP - delta: those two are held to the size of the terms that cancel.
 * A summary gives each output's worst norm-wise error and worst
 * max|err| / max|ref| over the shapes.
 *
 * Usage: test_attention_mma [--small] [--seed N]; exit 77 without a GPU or
 * on one below sm_80.
 */
#include "attention_check.h"

/* max |out - ref| / max |ref| of each row, for the summary: the
 * elementwise error on the scale of the output (max_rel divides by
 * elements near 0). */
static double abs_rel[256];

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

static void test_attention(shp x)
{
    const bool bf16 = false; /* f32 storage; the kernels round operands themselves */
    const char *fwd = "attention_mma_forward", *dqn = "attention_mma_backward_dq";
    const char *dkvn = "attention_mma_backward_dkv";
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
    check(fwd, &x, "O", 1e-2, ok, &oo, ro, 0);
    check(fwd, &x, "LSE", 5e-3, ok, &ol, rl, 0);

    /* backward reference on the kernel's O (as stored) and LSE */
    const float *o_in = oo.host[0], *l_in = ol.host[0];
    double *rdq = ref_alloc(nq), *rdk = ref_alloc(nk), *rdv = ref_alloc(nk), *rdel = ref_alloc(nr);
    /* the size of dQ's and dK's terms before dP - delta cancels */
    double *mdq = ref_alloc(nq), *mdk = ref_alloc(nk);
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
                double *dq = rdq + qi;
                memset(dq, 0, x.d * sizeof *dq);
                for (uint32_t j = 0; j <= s; j++) {
                    size_t kj = kidx(&x, b, j, h / g);
                    double p = exp((double)scale * dot(q + qi, k + kj, x.d) - l_in[ri]);
                    double dpj = dot(go + qi, v + kj, x.d);
                    double ds = p * (dpj - delta), dsm = p * (fabs(dpj) + fabs(delta));
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
     * gives is what is left of dP - delta (dP from bf16 operands, delta
     * from f32 ones): held to the size of the terms instead */
    double fq = x.s == 1 ? norm2(mdq, nq) : 0, fk = x.s == 1 ? norm2(mdk, nk) : 0;
    check(dqn, &x, "dQ", 2e-2, ok, &odq, rdq, fq);
    check(dqn, &x, "delta", 1e-5, ok, &odel, rdel, 0);

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
    check(dkvn, &x, "dK", 2e-2, ok, &odk, rdk, fk);
    check(dkvn, &x, "dV", 2e-2, ok, &odv, rdv, 0);

    pgrt_buf_destroy(&bq), pgrt_buf_destroy(&bk), pgrt_buf_destroy(&bv);
    pgrt_buf_destroy(&bgo), pgrt_buf_destroy(&bo), pgrt_buf_destroy(&bl);
    out_free(&oo), out_free(&ol), out_free(&odq), out_free(&odel), out_free(&odk), out_free(&odv);
    free(q), free(k), free(v), free(go), free(ro), free(rl), free(sc);
    free(rdq), free(rdk), free(rdv), free(rdel), free(mdq), free(mdk);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_attention_mma");
    pgrt_device_info di;
    if (pgrt_ctx_device_info(check_ctx, &di) || pg_target_sm(di.target) < 80) {
        printf("test_attention_mma: the device is below sm_80: skipped\n");
        return 77;
    }
    static const shp shapes[] = {
        {2, 1, 12, 2, 64, 1.0},    {2, 17, 12, 2, 128, 1.0}, {1, 100, 4, 4, 64, 1.0},
        {2, 100, 12, 2, 128, 1.0}, {1, 130, 3, 1, 80, 1.0},  {1, 65, 4, 4, 30, 1.0},
        {1, 64, 4, 4, 128, 4.0},   {1, 300, 12, 2, 64, 1.0}, {1, 512, 12, 2, 128, 1.0},
        {2, 512, 4, 4, 64, 1.0},
    };
    /* compute-sanitizer's: every path (D 64, 128, padded, scalar; GQA;
     * ragged tiles) on few blocks */
    static const shp small_shapes[] = {
        {1, 1, 12, 2, 64, 1.0}, {1, 17, 12, 2, 128, 1.0}, {1, 67, 3, 1, 80, 1.0},
        {1, 65, 2, 2, 30, 1.0}, {1, 100, 4, 2, 64, 1.0},
    };
    const shp *list = small ? small_shapes : shapes;
    size_t n = small ? sizeof small_shapes / sizeof small_shapes[0]
                     : sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < n; i++)
        test_attention(list[i]);
    print_table("O <= 1e-2, LSE <= 5e-3, dQ dK dV <= 2e-2 (bf16 operands), delta <= 1e-5; "
                "every output bitwise the same on a second launch; S = 1 dQ, dK (exactly 0) "
                "relative to their terms' size");
    const char *what[6] = {"O", "LSE", "dQ", "delta", "dK", "dV"};
    printf("\nworst over the shapes:  rel_l2  max|err|/max|ref|\n");
    for (int w = 0; w < 6; w++) {
        double rel = 0, a = 0;
        size_t len = strlen(what[w]);
        for (size_t i = 0; i < nrows; i++)
            if (!strncmp(table[i].shape, what[w], len) && table[i].shape[len] == ' ') {
                rel = fmax(rel, table[i].rel);
                a = fmax(a, abs_rel[i]);
            }
        printf("  %-6s %16.2e %12.2e\n", what[w], rel, a);
    }
    TEST_DONE();
}
