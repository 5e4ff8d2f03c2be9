/* SPDX-License-Identifier: MIT */
/*
 * The tensor-core attention kernels (attention_mma_forward, _backward_dq,
 * _backward_dkv: f32 in and out, bf16 operands) on a GPU against a double
 * reference on the f32 inputs: the forward's O and LSE, then dQ and delta,
 * then dK and dV, on the kernel's own forward outputs (the backward
 * reference is the exact gradient as a function of the O and LSE it is
 * given, as in test_attention).
 *
 * Long rows (S 8192, 70001 and 131072, small heads) run whole and are
 * checked at 12 query rows and 12 key rows of every head (long_case).
 *
 * Shapes: sequence lengths 1, 17, 100, 512 (and 130, 300), head_dim 64 and
 * 128 (and 80, padded to 128; and 30, not a multiple of 4: the scalar
 * staging path), group sizes 1, 3 and 6 (Hq/Hkv 12/2, 4/4, 3/1), batches 1
 * and 2, a peaky softmax. Outputs NaN-poisoned before each launch, each
 * launch twice: the same bits. Tolerances are those of bf16 operands (8
 * significant bits) with f32 accumulation, norm-wise: O 1e-2, LSE 5e-3,
 * gradients 2e-2; delta (f32 from the f32 O and dO) 1e-5. At S = 1 (one key
 * a row) dQ and dK are exactly 0 and delta is dO.O, and the kernels' values
 * are rounding: held to a bound of it (attention_check.h, s1_ds_bound and
 * s1_delta_bound), not to their size.
 * A summary gives each output's worst norm-wise error and worst
 * max|err| / max|ref| over the shapes.
 *
 * Usage: test_attention_mma [--small] [--seed N]; exit 77 without a GPU or
 * on one below sm_80.
 */
#include "attention_check.h"


/* The sampled rows of a long case: from row 64 to the last, evenly
 * spread (odd steps: tile edges and insides). Not the first rows: there
 * a query sees few keys and dQ is mostly rounding (row 0's is exactly 0,
 * its kernel value the S = 1 rounding attention_case bounds), which would
 * swamp a norm taken over rows whose dQ shrinks as 1 / sqrt(keys). */
enum { NSAMP = 12, SAMP0 = 64 };
static void samples(uint32_t S, uint32_t *at)
{
    for (int i = 0; i < NSAMP; i++)
        at[i] = SAMP0 + (uint32_t)((uint64_t)(S - 1 - SAMP0) * (uint64_t)i / (NSAMP - 1));
}

/* A case's sampled values into a check: got (both runs) and ref at the
 * listed element offsets of each row, d a row. */
static void check_rows(const char *kernel, const shp *x, const char *what, double tol, bool ok,
                       const outbuf *o, const size_t *offs, size_t nrow, uint32_t d,
                       const double *ref)
{
    outbuf g = {NULL, nrow * d, false, {xmalloc(nrow * d * 4), xmalloc(nrow * d * 4)}};
    for (int run = 0; run < 2; run++)
        for (size_t r = 0; r < nrow; r++)
            memcpy(g.host[run] + r * d, o->host[run] + offs[r], d * 4);
    check(kernel, x, what, tol, ok, &g, ref, 0);
    free(g.host[0]), free(g.host[1]);
}

/* Long rows (B = 1), past 2^16 tokens and up to the model's 131072: the
 * kernels run whole, the double reference at NSAMP query rows (O, LSE,
 * dQ, delta) and NSAMP key rows (dK, dV) of every head, each an exact
 * sum over its row's keys or its key's queries. */
static void long_case(const att_case *c, shp x)
{
    uint32_t g = x.hq / x.hkv, at[NSAMP];
    samples(x.s, at);
    size_t nq = (size_t)x.s * x.hq * x.d, nk = (size_t)x.s * x.hkv * x.d, nr = (size_t)x.s * x.hq;
    float scale = 1.0f / sqrtf((float)x.d);
    float *q = fill_normal(nq, x.qscale, 0.0), *k = fill_normal(nk, 1.0, 0.0);
    float *v = fill_normal(nk, 1.0, 0.0), *go = fill_normal(nq, 1.0, 0.0);
    pgrt_buf *bq = act_upload(q, nq, false), *bk = act_upload(k, nk, false);
    pgrt_buf *bv = act_upload(v, nk, false), *bgo = act_upload(go, nq, false);
    outbuf oo = out_new(nq, false), ol = out_new(nr, false);
    pgk_knobs kq = knobs_of(c->fwd, "batch", 1, "seq_len", x.s, "q_heads", x.hq, "head_dim", x.d,
                            NULL);
    pgrt_arg fa[] = {pgrt_arg_buf(bq),   pgrt_arg_buf(bk),   pgrt_arg_buf(bv),
                     pgrt_arg_buf(oo.b), pgrt_arg_buf(ol.b), pgrt_arg_u32(1),
                     pgrt_arg_u32(x.s),  pgrt_arg_u32(x.hq), pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),  pgrt_arg_f32(scale)};
    outbuf fo[2] = {oo, ol};
    bool ok = run_twice(c->fwd, &kq, fa, 11, fo, 2);
    pgrt_buf *bo = act_upload(oo.host[0], nq, false), *bl = dev_upload(ol.host[0], nr);
    outbuf odq = out_new(nq, false), odel = out_new(nr, false);
    pgrt_arg qa[] = {pgrt_arg_buf(bq),    pgrt_arg_buf(bk),     pgrt_arg_buf(bv),
                     pgrt_arg_buf(bo),    pgrt_arg_buf(bgo),    pgrt_arg_buf(bl),
                     pgrt_arg_buf(odq.b), pgrt_arg_buf(odel.b), pgrt_arg_u32(1),
                     pgrt_arg_u32(x.s),   pgrt_arg_u32(x.hq),   pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),   pgrt_arg_f32(scale)};
    outbuf qo[2] = {odq, odel};
    pgk_knobs kdq = knobs_of(c->dq, "batch", 1, "seq_len", x.s, "q_heads", x.hq, "head_dim", x.d,
                             NULL);
    bool okq = run_twice(c->dq, &kdq, qa, 14, qo, 2);
    outbuf odk = out_new(nk, false), odv = out_new(nk, false);
    pgrt_arg ka[] = {pgrt_arg_buf(bq),    pgrt_arg_buf(bk),    pgrt_arg_buf(bv),
                     pgrt_arg_buf(bgo),   pgrt_arg_buf(bl),    pgrt_arg_buf(odel.b),
                     pgrt_arg_buf(odk.b), pgrt_arg_buf(odv.b), pgrt_arg_u32(1),
                     pgrt_arg_u32(x.s),   pgrt_arg_u32(x.hq),  pgrt_arg_u32(x.hkv),
                     pgrt_arg_u32(x.d),   pgrt_arg_f32(scale)};
    outbuf ko[2] = {odk, odv};
    pgk_knobs kkv = knobs_of(c->dkv, "batch", 1, "seq_len", x.s, "kv_heads", x.hkv, "head_dim",
                             x.d, NULL);
    bool okk = run_twice(c->dkv, &kkv, ka, 14, ko, 2);

    /* the reference: the forward's O and LSE, then (on the kernel's own O
     * and LSE, as attention_case) dQ and delta at the sampled query rows */
    const float *o_in = oo.host[0], *l_in = ol.host[0];
    size_t nrow = (size_t)NSAMP * x.hq, qoff[NSAMP * 128], loff[NSAMP * 128];
    double *ro = ref_alloc(nrow * x.d), *rl = ref_alloc(nrow), *rdq = ref_alloc(nrow * x.d);
    double *rdel = ref_alloc(nrow);
    for (int i = 0; i < NSAMP; i++)
        for (uint32_t h = 0; h < x.hq; h++) {
            size_t r = (size_t)i * x.hq + h, qi = qidx(&x, 0, at[i], h);
            qoff[r] = qi;
            loff[r] = (size_t)at[i] * x.hq + h;
            double m = -INFINITY, sum = 0, *o = ro + r * x.d, *dq = rdq + r * x.d;
            for (uint32_t j = 0; j <= at[i]; j++)
                m = fmax(m, (double)scale * dot(q + qi, k + kidx(&x, 0, j, h / g), x.d));
            memset(o, 0, x.d * sizeof *o);
            memset(dq, 0, x.d * sizeof *dq);
            double delta = dot(go + qi, o_in + qi, x.d);
            for (uint32_t j = 0; j <= at[i]; j++) {
                size_t kj = kidx(&x, 0, j, h / g);
                double sc = (double)scale * dot(q + qi, k + kj, x.d);
                double p = exp(sc - m), pk = exp(sc - l_in[loff[r]]);
                double ds = pk * (dot(go + qi, v + kj, x.d) - delta);
                sum += p;
                for (uint32_t e = 0; e < x.d; e++) {
                    o[e] += p * v[kj + e];
                    dq[e] += scale * ds * k[kj + e];
                }
            }
            for (uint32_t e = 0; e < x.d; e++)
                o[e] /= sum;
            rl[r] = m + log(sum);
            rdel[r] = delta;
        }
    check_rows(c->fwd, &x, "O rows", c->tol_o, ok, &oo, qoff, nrow, x.d, ro);
    check_rows(c->fwd, &x, "LSE rows", c->tol_lse, ok, &ol, loff, nrow, 1, rl);
    check_rows(c->dq, &x, "dQ rows", c->tol_grad, okq, &odq, qoff, nrow, x.d, rdq);
    check_rows(c->dq, &x, "delta rows", 1e-5, okq, &odel, loff, nrow, 1, rdel);

    /* dK and dV at the sampled key rows: every later query of the group */
    size_t nkrow = (size_t)NSAMP * x.hkv, koff[NSAMP * 128];
    double *rdk = ref_alloc(nkrow * x.d), *rdv = ref_alloc(nkrow * x.d);
    for (int i = 0; i < NSAMP; i++)
        for (uint32_t hk = 0; hk < x.hkv; hk++) {
            size_t r = (size_t)i * x.hkv + hk, kj = kidx(&x, 0, at[i], hk);
            koff[r] = kj;
            double *dk = rdk + r * x.d, *dv = rdv + r * x.d;
            memset(dk, 0, x.d * sizeof *dk);
            memset(dv, 0, x.d * sizeof *dv);
            for (uint32_t h = hk * g; h < (hk + 1) * g; h++)
                for (uint32_t s = at[i]; s < x.s; s++) {
                    size_t qi = qidx(&x, 0, s, h), ri = (size_t)s * x.hq + h;
                    double pk = exp((double)scale * dot(q + qi, k + kj, x.d) - l_in[ri]);
                    double ds = pk * (dot(go + qi, v + kj, x.d) - dot(go + qi, o_in + qi, x.d));
                    for (uint32_t e = 0; e < x.d; e++) {
                        dk[e] += scale * ds * q[qi + e];
                        dv[e] += pk * go[qi + e];
                    }
                }
        }
    check_rows(c->dkv, &x, "dK rows", c->tol_grad, okk, &odk, koff, nkrow, x.d, rdk);
    check_rows(c->dkv, &x, "dV rows", c->tol_grad, okk, &odv, koff, nkrow, x.d, rdv);

    pgrt_buf_destroy(&bq), pgrt_buf_destroy(&bk), pgrt_buf_destroy(&bv);
    pgrt_buf_destroy(&bgo), pgrt_buf_destroy(&bo), pgrt_buf_destroy(&bl);
    out_free(&oo), out_free(&ol), out_free(&odq), out_free(&odel), out_free(&odk), out_free(&odv);
    free(q), free(k), free(v), free(go), free(ro), free(rl), free(rdq), free(rdel);
    free(rdk), free(rdv);
}

static const att_case mma = {"attention_mma_forward", "attention_mma_backward_dq",
                             "attention_mma_backward_dkv", false, 1e-2, 5e-3, 2e-2, true};

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
        attention_case(&mma, list[i]);
    /* long rows at sampled rows: 8K at small heads, past 2^16 ragged, and
     * the model's longest */
    static const shp longs[] = {
        {1, 8192, 2, 1, 64, 1.0}, {1, 70001, 2, 1, 64, 1.0}, {1, 131072, 4, 2, 128, 1.0},
    };
    for (size_t i = 0; !small && i < sizeof longs / sizeof longs[0]; i++)
        long_case(&mma, longs[i]);
    print_table("O <= 1e-2, LSE <= 5e-3, dQ dK dV <= 2e-2 (bf16 operands), delta <= 1e-5; "
                "every output bitwise the same on a second launch; S = 1 dQ, dK (exactly 0) "
                "and delta within a bound of their rounding");
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
