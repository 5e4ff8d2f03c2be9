/* SPDX-License-Identifier: MIT */
/*
 * Causal GQA attention on a GPU against a double reference, f32 and bf16:
 * attention_forward (O and the row logsumexp), then attention_backward_dq
 * (dQ and delta) and attention_backward_dkv (dK, dV), on the kernels' own
 * forward outputs as Hugging Face's backward would use them. The backward
 * reference is the exact gradient as a function of those inputs: P =
 * exp(scale q.k - LSE) from the LSE it is given, delta = dO . O from the O
 * it is given, dS = P (dO.v - delta).
 *
 * Shapes: ragged sequence lengths up to 4096, head_dim 64 and 128 (and a
 * ragged 80 and a tiny 1), group sizes 1, 2, 3 and 6, batches of 1 and 2,
 * peaky softmaxes too. Outputs NaN-poisoned before each launch, each launch
 * twice (same bits). f32: forward and LSE within 1e-5 norm-wise, gradients
 * within 5e-5; bf16 (one rounding of each stored result): 5e-3 and 1e-2.
 *
 * Usage: test_attention [--small] [--seed N]; exit 77 without a GPU.
 */
#include "attention_check.h"

static void check(const char *name, const shp *x, const char *what, double tol, bool ok,
                  const outbuf *o, const double *ref)
{
    cur_tol = tol;
    row *r = add_row(name, "%s B%u S%u H%u/%u D%u%s", what, x->b, x->s, x->hq, x->hkv, x->d,
                     x->qscale > 1 ? " peaky" : "");
    if (!ok)
        r->bad++;
    compare(r, o->host[0], ref, o->n);
    same_bits(r, o->host[0], o->host[1], o->n * 4);
    finish(r);
}

static void test_attention(bool bf16, shp x)
{
    const char *sfx = bf16 ? "bf16" : "f32";
    char fwd[40], dqn[40], dkvn[40];
    snprintf(fwd, sizeof fwd, "attention_forward_%s", sfx);
    snprintf(dqn, sizeof dqn, "attention_backward_dq_%s", sfx);
    snprintf(dkvn, sizeof dkvn, "attention_backward_dkv_%s", sfx);
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
    check(fwd, &x, "O", bf16 ? 5e-3 : 1e-5, ok, &oo, ro);
    check(fwd, &x, "LSE", 1e-5, ok, &ol, rl);

    /* backward reference on the kernel's O (as stored) and LSE */
    const float *o_in = oo.host[0], *l_in = ol.host[0];
    double *rdq = ref_alloc(nq), *rdk = ref_alloc(nk), *rdv = ref_alloc(nk), *rdel = ref_alloc(nr);
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
                    double ds = p * (dot(go + qi, v + kj, x.d) - delta);
                    for (uint32_t e = 0; e < x.d; e++) {
                        dq[e] += scale * ds * k[kj + e];
                        rdk[kj + e] += scale * ds * q[qi + e];
                        rdv[kj + e] += p * go[qi + e];
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
    check(dqn, &x, "dQ", bf16 ? 1e-2 : 5e-5, ok, &odq, rdq);
    check(dqn, &x, "delta", 1e-5, ok, &odel, rdel);

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
    check(dkvn, &x, "dK", bf16 ? 1e-2 : 5e-5, ok, &odk, rdk);
    check(dkvn, &x, "dV", bf16 ? 1e-2 : 5e-5, ok, &odv, rdv);

    pgrt_buf_destroy(&bq), pgrt_buf_destroy(&bk), pgrt_buf_destroy(&bv);
    pgrt_buf_destroy(&bgo), pgrt_buf_destroy(&bo), pgrt_buf_destroy(&bl);
    out_free(&oo), out_free(&ol), out_free(&odq), out_free(&odel), out_free(&odk), out_free(&odv);
    free(q), free(k), free(v), free(go), free(ro), free(rl), free(sc);
    free(rdq), free(rdk), free(rdv), free(rdel);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_attention");
    static const shp shapes[] = {
        {1, 1, 1, 1, 1, 1.0},    {2, 7, 4, 2, 64, 1.0},    {1, 33, 3, 1, 128, 1.0},
        {2, 130, 6, 2, 64, 1.0}, {1, 45, 4, 4, 80, 1.0},   {1, 257, 12, 2, 128, 1.0},
        {2, 65, 2, 1, 64, 4.0},  {1, 1024, 2, 1, 128, 1.0}, {1, 4096, 2, 1, 64, 1.0},
    };
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            shp x = shapes[i];
            if (small && x.s > 256)
                x.s = 131;
            test_attention(bf, x);
        }
    print_table("f32: O, LSE, delta <= 1e-5, dQ dK dV <= 5e-5; bf16: O <= 5e-3, gradients <= "
                "1e-2, LSE and delta (f32) <= 1e-5");
    TEST_DONE();
}
