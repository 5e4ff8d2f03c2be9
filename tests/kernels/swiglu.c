/* SPDX-License-Identifier: MIT */
/*
 * swiglu_forward/_backward in f32 and bf16 on a GPU against a double
 * reference on the same (for bf16: bf16-rounded) inputs, gates with tails
 * out to +-110 where exp over- or underflows. Outputs NaN-poisoned before
 * each launch, every launch twice (same bits), the forward once more in
 * place (output over gate; same bits). f32 within 1e-5 norm-wise, bf16
 * within 5e-3 (one bf16 rounding of the result). And the bf16 model's fused
 * swiglu_forward_f32_bf16 and swiglu_backward_f32_bf16: each f32 output
 * within 1e-5, its bf16 copy within 5e-3, and both bit for bit what
 * swiglu_*_f32 then cast_f32_to_bf16 give.
 *
 * Usage: test_swiglu [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

static float *gates(uint32_t n)
{
    float *g = fill_normal(n, 3.0, 0.0);
    for (uint32_t i = 0; i < n; i += 97)
        g[i] = (float)((i & 1 ? -1 : 1) * (10.0 + 100.0 * uniform()));
    return g;
}

static void test_fwd(bool bf16, uint32_t n)
{
    const char *name = bf16 ? "swiglu_forward_bf16" : "swiglu_forward_f32";
    cur_tol = bf16 ? 5e-3 : 1e-5;
    row *r = add_row(name, "n=%u (+ in place)", n);
    float *g = gates(n), *u = fill_normal(n, 1.0, 0.0);
    pgrt_buf *bg = act_upload(g, n, bf16), *bu = act_upload(u, n, bf16), *bo = act_alloc(n, bf16);
    double *ref = ref_alloc(n);
    for (uint32_t i = 0; i < n; i++)
        ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    float *out[3] = {xmalloc(n * 4), xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bg), pgrt_arg_buf(bu), pgrt_arg_buf(bo), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        act_poison(bo, bf16);
        if (!launch(name, &kn, args, 4))
            r->bad++;
        act_download(bo, out[run], n, bf16);
    }
    pgrt_arg inplace[] = {pgrt_arg_buf(bg), pgrt_arg_buf(bu), pgrt_arg_buf(bg), pgrt_arg_u32(n)};
    if (!launch(name, &kn, inplace, 4))
        r->bad++;
    act_download(bg, out[2], n, bf16);
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    same_bits(r, out[0], out[2], n * 4);
    finish(r);
    pgrt_buf_destroy(&bg);
    pgrt_buf_destroy(&bu);
    pgrt_buf_destroy(&bo);
    free(g), free(u), free(ref), free(out[0]), free(out[1]), free(out[2]);
}

static void test_bwd(bool bf16, uint32_t n)
{
    const char *name = bf16 ? "swiglu_backward_bf16" : "swiglu_backward_f32";
    cur_tol = bf16 ? 5e-3 : 1e-5;
    row *r = add_row(name, "n=%u", n);
    float *g = gates(n), *u = fill_normal(n, 1.0, 0.0), *d = fill_normal(n, 1.0, 0.0);
    pgrt_buf *bg = act_upload(g, n, bf16), *bu = act_upload(u, n, bf16);
    pgrt_buf *bd = act_upload(d, n, bf16);
    pgrt_buf *bdg = act_alloc(n, bf16), *bdu = act_alloc(n, bf16);
    double *ref = ref_alloc(2 * (size_t)n);
    for (uint32_t i = 0; i < n; i++) {
        double gv = g[i], s = 1.0 / (1.0 + exp(-gv));
        ref[i] = (double)d[i] * u[i] * s * (1.0 + gv * (1.0 - s));
        ref[n + i] = (double)d[i] * gv * s;
    }
    float *out[2] = {xmalloc(2 * (size_t)n * 4), xmalloc(2 * (size_t)n * 4)};
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bg),  pgrt_arg_buf(bu),  pgrt_arg_buf(bd),
                       pgrt_arg_buf(bdg), pgrt_arg_buf(bdu), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        act_poison(bdg, bf16);
        act_poison(bdu, bf16);
        if (!launch(name, &kn, args, 6))
            r->bad++;
        act_download(bdg, out[run], n, bf16);
        act_download(bdu, out[run] + n, n, bf16);
    }
    compare(r, out[0], ref, n);
    compare(r, out[0] + n, ref + n, n);
    same_bits(r, out[0], out[1], 2 * (size_t)n * 4);
    finish(r);
    pgrt_buf_destroy(&bg);
    pgrt_buf_destroy(&bu);
    pgrt_buf_destroy(&bd);
    pgrt_buf_destroy(&bdg);
    pgrt_buf_destroy(&bdu);
    free(g), free(u), free(d), free(ref), free(out[0]), free(out[1]);
}

/* ---------------------------------------------------------------- fused: f32 in, f32 and bf16 out */


static void test_fwd_f32_bf16(uint32_t n)
{
    float *g = gates(n), *u = fill_normal(n, 1.0, 0.0);
    pgrt_buf *bg = dev_upload(g, n), *bu = dev_upload(u, n);
    pgrt_buf *h = act_alloc(n, false), *hb = act_alloc(n, true);
    pgrt_buf *h2 = act_alloc(n, false), *hb2 = act_alloc(n, true);
    double *ref = ref_alloc(n);
    for (uint32_t i = 0; i < n; i++)
        ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    pgk_knobs k0 = knobs_of("swiglu_forward_f32", "n", n, NULL);
    pgrt_arg a0[] = {pgrt_arg_buf(bg), pgrt_arg_buf(bu), pgrt_arg_buf(h2), pgrt_arg_u32(n)};
    launch("swiglu_forward_f32", &k0, a0, 4);
    cast_into(h2, hb2, n);

    const char *name = "swiglu_forward_f32_bf16";
    row *r = add_row(name, "n=%u", n), *rb = add_row(name, "n=%u: bf16", n);
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bg), pgrt_arg_buf(bu), pgrt_arg_buf(h), pgrt_arg_buf(hb),
                       pgrt_arg_u32(n)};
    fused_pair(name, &kn, args, 5, h, hb, NULL, h2, hb2, ref, n, r, rb);
    finish_pair(r, rb, &cur_tol);
    pgrt_buf *bufs[] = {bg, bu, h, hb, h2, hb2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(g), free(u), free(ref);
}

static void test_bwd_f32_bf16(uint32_t n)
{
    float *g = gates(n), *u = fill_normal(n, 1.0, 0.0), *d = fill_normal(n, 1.0, 0.0);
    pgrt_buf *bg = dev_upload(g, n), *bu = dev_upload(u, n), *bd = dev_upload(d, n);
    pgrt_buf *o[4], *o2[4]; /* dgate, dup, their copies */
    for (int i = 0; i < 4; i++) {
        o[i] = act_alloc(n, i >= 2);
        o2[i] = act_alloc(n, i >= 2);
    }
    double *ref = ref_alloc(2 * (size_t)n);
    for (uint32_t i = 0; i < n; i++) {
        double gv = g[i], s = 1.0 / (1.0 + exp(-gv));
        ref[i] = (double)d[i] * u[i] * s * (1.0 + gv * (1.0 - s));
        ref[n + i] = (double)d[i] * gv * s;
    }
    pgk_knobs k0 = knobs_of("swiglu_backward_f32", "n", n, NULL);
    pgrt_arg a0[] = {pgrt_arg_buf(bg),    pgrt_arg_buf(bu),    pgrt_arg_buf(bd),
                     pgrt_arg_buf(o2[0]), pgrt_arg_buf(o2[1]), pgrt_arg_u32(n)};
    launch("swiglu_backward_f32", &k0, a0, 6);
    cast_into(o2[0], o2[2], n);
    cast_into(o2[1], o2[3], n);

    const char *name = "swiglu_backward_f32_bf16";
    row *r = add_row(name, "n=%u", n), *rb = add_row(name, "n=%u: bf16", n);
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bg),   pgrt_arg_buf(bu),   pgrt_arg_buf(bd),
                       pgrt_arg_buf(o[0]), pgrt_arg_buf(o[1]), pgrt_arg_buf(o[2]),
                       pgrt_arg_buf(o[3]), pgrt_arg_u32(n)};
    float *out[2][4] = {{NULL}};
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 4; i++)
            act_poison(o[i], i >= 2);
        if (!launch(name, &kn, args, 8))
            r->bad++;
        for (int i = 0; i < 4; i++)
            out[run][i] = get(o[i], n, i >= 2);
    }
    for (int j = 0; j < 2; j++) {
        float *f = get(o2[j], n, false), *fb = get(o2[j + 2], n, true);
        row_checks(r, out[0][j], f, out[0][j + 2], fb, ref + (size_t)j * n, n, false);
        row_checks(rb, out[0][j], f, out[0][j + 2], fb, ref + (size_t)j * n, n, true);
        same_bits(r, out[0][j], out[1][j], (size_t)n * 4);
        same_bits(rb, out[0][j + 2], out[1][j + 2], (size_t)n * 4);
        free(f), free(fb);
    }
    finish_pair(r, rb, &cur_tol);
    pgrt_buf_destroy(&bg);
    pgrt_buf_destroy(&bu);
    pgrt_buf_destroy(&bd);
    for (int i = 0; i < 4; i++) {
        pgrt_buf_destroy(&o[i]);
        pgrt_buf_destroy(&o2[i]);
        free(out[0][i]), free(out[1][i]);
    }
    free(g), free(u), free(d), free(ref);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_swiglu");
    static const uint32_t sizes[] = {1, 255, 256, 257, 1025, 65539, (1u << 20) + 3};
    for (int bf = 0; bf < 2; bf++)
        for (int i = 0; i < 7; i++) {
            uint32_t n = small && sizes[i] > 65539 ? 65539 : sizes[i];
            test_fwd(bf, n);
            test_bwd(bf, n);
        }
    static const uint32_t fsizes[] = {1, 255, 257, 65539, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof fsizes / sizeof fsizes[0]; i++) {
        uint32_t n = small && fsizes[i] > 65539 ? 65539 : fsizes[i];
        test_fwd_f32_bf16(n);
        test_bwd_f32_bf16(n);
    }
    print_table("f32: rel_l2 <= 1e-5; bf16: rel_l2 <= 5e-3 (each output of the backward alone); "
                "for the fused kernels (_f32_bf16) bad also counts elements whose bits differ "
                "from the unfused kernels'");
    TEST_DONE();
}
