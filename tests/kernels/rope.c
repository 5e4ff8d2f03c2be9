/* SPDX-License-Identifier: MIT */
/*
 * rope_forward/_backward in f32 and bf16 on a GPU against a double
 * reference: the angle as Hugging Face computes it in f32 (inv_freq =
 * 1 / f32(theta ^ (f32(2i)/f32(D))), angle = f32(pos) * inv_freq, pos =
 * t mod S), then cos, sin and the rotate-half rotation (forward) or its
 * transpose (backward) in double. Ragged shapes, GQA head counts, both
 * common thetas, and positions up to 4095 where a sloppy angle shows.
 *
 * The kernels work in place, so the buffers cannot be poisoned; instead
 * every element must move where the reference moves it, and the launch is
 * repeated on a fresh upload and must give the same bits. f32 results must
 * be within 1e-5 of the reference norm-wise, bf16 within 5e-3 (one bf16
 * rounding).
 *
 * Usage: test_rope [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

static void reference(const float *x, double *y, uint32_t ntok, uint32_t seq, uint32_t heads,
                      uint32_t dim, float theta, bool backward)
{
    uint32_t half = dim / 2;
    for (uint32_t t = 0; t < ntok; t++) {
        float pos = (float)(t % seq);
        for (uint32_t i = 0; i < half; i++) {
            float e = (float)(2 * i) / (float)dim;
            float pw = (float)pow((double)theta, (double)e);
            float inv = 1.0f / pw;
            float ang = pos * inv;
            double c = cos((double)ang), s = sin((double)ang);
            for (uint32_t h = 0; h < heads; h++) {
                size_t o = ((size_t)t * heads + h) * dim + i;
                double x1 = x[o], x2 = x[o + half];
                if (backward) {
                    y[o] = x1 * c + x2 * s;
                    y[o + half] = x2 * c - x1 * s;
                } else {
                    y[o] = x1 * c - x2 * s;
                    y[o + half] = x2 * c + x1 * s;
                }
            }
        }
    }
}

static void test_rope(bool bf16, bool backward, uint32_t batch, uint32_t seq, uint32_t hq,
                      uint32_t hkv, uint32_t dim, float theta)
{
    char name[32];
    snprintf(name, sizeof name, "rope_%s_%s", backward ? "backward" : "forward",
             bf16 ? "bf16" : "f32");
    cur_tol = bf16 ? 5e-3 : 1e-5;
    uint32_t ntok = batch * seq;
    row *r = add_row(name, "B=%u S=%u Hq=%u Hkv=%u D=%u th=%g", batch, seq, hq, hkv, dim,
                     (double)theta);
    size_t nq = (size_t)ntok * hq * dim, nk = (size_t)ntok * hkv * dim;
    float *q = fill_normal(nq, 1.0, 0.0), *k = fill_normal(nk, 1.0, 0.0);
    pgrt_buf *bq = act_upload(q, nq, bf16), *bk = act_upload(k, nk, bf16); /* rounds for bf16 */
    double *ref = ref_alloc(nq + nk);
    reference(q, ref, ntok, seq, hq, dim, theta, backward);
    reference(k, ref + nq, ntok, seq, hkv, dim, theta, backward);
    float *out[2] = {xmalloc((nq + nk) * 4), xmalloc((nq + nk) * 4)};
    pgk_knobs kn = knobs_of(name, "rows", ntok, "head_dim", dim, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bq),  pgrt_arg_buf(bk),   pgrt_arg_u32(ntok),
                       pgrt_arg_u32(seq), pgrt_arg_u32(hq),   pgrt_arg_u32(hkv),
                       pgrt_arg_u32(dim), pgrt_arg_f32(theta)};
    for (int run = 0; run < 2; run++) {
        if (run) {
            pgrt_buf_destroy(&bq);
            pgrt_buf_destroy(&bk);
            bq = act_upload(q, nq, bf16);
            bk = act_upload(k, nk, bf16);
            args[0] = pgrt_arg_buf(bq);
            args[1] = pgrt_arg_buf(bk);
        }
        if (!launch(name, &kn, args, 8))
            r->bad++;
        act_download(bq, out[run], nq, bf16);
        act_download(bk, out[run] + nq, nk, bf16);
    }
    compare(r, out[0], ref, nq + nk);
    same_bits(r, out[0], out[1], (nq + nk) * 4);
    finish(r);
    pgrt_buf_destroy(&bq);
    pgrt_buf_destroy(&bk);
    free(q), free(k), free(ref), free(out[0]), free(out[1]);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_rope");
    struct {
        uint32_t b, s, hq, hkv, d;
        float theta;
    } shapes[] = {
        {1, 1, 1, 1, 2, 10000.0f},     {3, 7, 3, 1, 8, 10000.0f},
        {2, 129, 12, 2, 128, 1e6f},    {1, 4096, 2, 1, 64, 10000.0f},
        {2, 33, 14, 2, 64, 1e6f},      {1, 4096, 4, 2, 128, 1e6f},
    };
    for (int bf = 0; bf < 2; bf++)
        for (int bwd = 0; bwd < 2; bwd++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                uint32_t s = shapes[i].s;
                if (small && s > 512)
                    s = 515;
                test_rope(bf, bwd, shapes[i].b, s, shapes[i].hq, shapes[i].hkv, shapes[i].d,
                          shapes[i].theta);
            }
    print_table("f32: rel_l2 <= 1e-5; bf16: rel_l2 <= 5e-3");
    TEST_DONE();
}
