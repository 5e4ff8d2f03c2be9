/* SPDX-License-Identifier: MIT */
/*
 * The bf16 model's fused kernels on a GPU: rms_norm_forward_add_bf16,
 * rms_norm_backward_add_bf16 (each with and without the residual),
 * swiglu_forward_f32_bf16 and swiglu_backward_f32_bf16. Each f32 output
 * against a double reference (rel_l2 <= 1e-5), each bf16 copy against it
 * too (<= 5e-3); and every output, f32 and bf16, bit for bit what the
 * unfused kernels (rms_norm_forward / batched_rms_norm_backward,
 * residual_add, swiglu_*_f32, cast_f32_to_bf16) give in turn: "bad"
 * counts the elements that differ. Outputs are NaN-poisoned before each
 * launch; a second launch must give the same bits.
 *
 * Usage: test_fused [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

#define EPS 1e-6f

static size_t differ(const void *a, const void *b, size_t words)
{
    const uint32_t *x = a, *y = b;
    size_t n = 0;
    for (size_t i = 0; i < words; i++)
        n += x[i] != y[i];
    return n;
}

/* Download an f32 buffer, or a bf16 one widened, and its raw words. */
static float *get(const pgrt_buf *b, size_t n, bool bf16)
{
    float *x = xmalloc(n * 4);
    memset(x, 0, n * 4); /* written by the download; gcc -O3 cannot see it */
    act_download(b, x, n, bf16);
    return x;
}

/* The bf16 outputs of the fused kernels, widened, against the unfused
 * chain's (widened the same way): equal floats are equal bits. */
static void row_checks(row *r, const float *f32, const float *f32_ref_bits, const float *b16,
                       const float *b16_ref_bits, const double *ref, size_t n, bool copy_row)
{
    r->bad += differ(f32, f32_ref_bits, n) + differ(b16, b16_ref_bits, n);
    compare(r, copy_row ? b16 : f32, ref, n);
}

static void cast_into(pgrt_buf *src, pgrt_buf *dst, uint32_t n)
{
    pgk_knobs kc = knobs_of("cast_f32_to_bf16", "n", n, NULL);
    pgrt_arg ca[] = {pgrt_arg_buf(src), pgrt_arg_buf(dst), pgrt_arg_u32(n)};
    launch("cast_f32_to_bf16", &kc, ca, 3);
}

static void residual_into(pgrt_buf *a, pgrt_buf *b, pgrt_buf *out, size_t n)
{
    pgk_knobs kn = knobs_of("residual_add", "n", (uint32_t)n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(a), pgrt_arg_buf(b), pgrt_arg_buf(out),
                       pgrt_arg_u32((uint32_t)n)};
    launch("residual_add", &kn, args, 4);
}

/* A fused kernel with one f32 output y and its bf16 copy yb: launched
 * twice (y, yb and `also`, when not NULL, poisoned first), then each
 * output against the unfused chain's (y2, yb2: the same bits) and the
 * reference, rows r (f32) and rb (the copy), and the second run's bits
 * against the first's. */
static void fused_pair(const char *name, const pgk_knobs *kn, const pgrt_arg *args,
                       size_t nargs, pgrt_buf *y, pgrt_buf *yb, pgrt_buf *also,
                       const pgrt_buf *y2, const pgrt_buf *yb2, const double *ref, size_t n,
                       row *r, row *rb)
{
    float *out[2], *outb[2];
    for (int run = 0; run < 2; run++) {
        if (also)
            act_poison(also, false);
        act_poison(y, false);
        act_poison(yb, true);
        if (!launch(name, kn, args, nargs))
            r->bad++;
        out[run] = get(y, n, false);
        outb[run] = get(yb, n, true);
    }
    float *o2 = get(y2, n, false), *ob2 = get(yb2, n, true);
    row_checks(r, out[0], o2, outb[0], ob2, ref, n, false);
    row_checks(rb, out[0], o2, outb[0], ob2, ref, n, true);
    same_bits(r, out[0], out[1], n * 4);
    same_bits(rb, outb[0], outb[1], n * 4);
    free(o2), free(ob2);
    for (int i = 0; i < 2; i++)
        free(out[i]), free(outb[i]);
}

/* f32 outputs within 1e-5, the bf16 copies within 5e-3. */
static void finish_pair(row *r, row *rb)
{
    cur_tol = 1e-5;
    finish(r);
    cur_tol = 5e-3;
    finish(rb);
}

static void test_rms_fwd(uint32_t rows, uint32_t hid, bool res)
{
    size_t n = (size_t)rows * hid;
    float *a = fill_normal(n, 1.0, 0.0), *b = fill_normal(n, 0.5, 0.1);
    float *gam = fill_normal(hid, 0.2, 1.0);
    pgrt_buf *ba = dev_upload(a, n), *bb = dev_upload(b, n), *bg = dev_upload(gam, hid);
    pgrt_buf *sum = act_alloc(n, false), *y = act_alloc(n, false), *yb = act_alloc(n, true);
    pgrt_buf *sum2 = act_alloc(n, false), *y2 = act_alloc(n, false), *yb2 = act_alloc(n, true);
    /* the reference: x = a (+ b) rounded to f32, then the norm in double */
    double *ref = ref_alloc(n);
    float *xs = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        xs[i] = res ? a[i] + b[i] : a[i];
    for (uint32_t t = 0; t < rows; t++) {
        double ss = 0;
        for (uint32_t h = 0; h < hid; h++)
            ss += (double)xs[(size_t)t * hid + h] * xs[(size_t)t * hid + h];
        double rinv = 1.0 / sqrt(ss / hid + EPS);
        for (uint32_t h = 0; h < hid; h++)
            ref[(size_t)t * hid + h] = xs[(size_t)t * hid + h] * rinv * gam[h];
    }
    /* the unfused chain */
    pgrt_buf *xin = res ? sum2 : ba;
    if (res)
        residual_into(ba, bb, sum2, n);
    pgk_knobs kr = knobs_of("rms_norm_forward", "num_rows", rows, "hidden_dim", hid, NULL);
    pgrt_arg ra[] = {pgrt_arg_buf(xin), pgrt_arg_buf(bg), pgrt_arg_buf(y2), pgrt_arg_u32(rows),
                     pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    launch("rms_norm_forward", &kr, ra, 6);
    cast_into(y2, yb2, (uint32_t)n);

    const char *name = "rms_norm_forward_add_bf16";
    row *r = add_row(name, "%ux%u residual %d", rows, hid, res);
    row *rb = add_row(name, "%ux%u residual %d: bf16", rows, hid, res);
    pgk_knobs kn = knobs_of(name, "num_rows", rows, "hidden_dim", hid, "residual", (uint32_t)res,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(ba), pgrt_arg_buf(bb),  pgrt_arg_buf(sum),
                       pgrt_arg_buf(bg), pgrt_arg_buf(y),   pgrt_arg_buf(yb),
                       pgrt_arg_u32(rows), pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    fused_pair(name, &kn, args, 9, y, yb, sum, y2, yb2, ref, n, r, rb);
    if (res) { /* the sum it stored: the residual_add's, and a + b in f32 */
        float *s1 = get(sum, n, false), *s2 = get(sum2, n, false);
        r->bad += differ(s1, s2, n) + differ(s1, xs, n);
        free(s1), free(s2);
    }
    finish_pair(r, rb);
    pgrt_buf *bufs[] = {ba, bb, bg, sum, y, yb, sum2, y2, yb2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(a), free(b), free(gam), free(ref), free(xs);
}

static void test_rms_bwd(uint32_t rows, uint32_t hid, bool res)
{
    size_t n = (size_t)rows * hid;
    float *x = fill_normal(n, 1.0, 0.0), *dy = fill_normal(n, 1.0, 0.0);
    float *rs = fill_normal(n, 0.5, 0.0), *gam = fill_normal(hid, 0.2, 1.0);
    pgrt_buf *bx = dev_upload(x, n), *bdy = dev_upload(dy, n), *brs = dev_upload(rs, n);
    pgrt_buf *bg = dev_upload(gam, hid);
    pgrt_buf *dx = act_alloc(n, false), *dxb = act_alloc(n, true);
    pgrt_buf *dx2 = act_alloc(n, false), *dxb2 = act_alloc(n, true), *part = act_alloc(n, false);
    double *ref = ref_alloc(n);
    for (uint32_t t = 0; t < rows; t++) {
        const float *xr = x + (size_t)t * hid, *dr = dy + (size_t)t * hid;
        double ss = 0, sg = 0;
        for (uint32_t h = 0; h < hid; h++) {
            ss += (double)xr[h] * xr[h];
            sg += (double)xr[h] * gam[h] * dr[h];
        }
        double rr = sqrt(ss / hid + EPS), u = sg / hid / (rr * rr);
        for (uint32_t h = 0; h < hid; h++) {
            double v = ((double)gam[h] * dr[h] - xr[h] * u) / rr;
            ref[(size_t)t * hid + h] = v + (res ? rs[(size_t)t * hid + h] : 0.0);
        }
    }
    pgk_knobs kr = knobs_of("batched_rms_norm_backward", "num_rows", rows, "hidden_dim", hid, NULL);
    pgrt_arg ra[] = {pgrt_arg_buf(bx),  pgrt_arg_buf(bg),  pgrt_arg_buf(bdy),
                     pgrt_arg_buf(dx2), pgrt_arg_buf(part), pgrt_arg_u32(rows),
                     pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    launch("batched_rms_norm_backward", &kr, ra, 8);
    if (res)
        residual_into(brs, dx2, dx2, n);
    cast_into(dx2, dxb2, (uint32_t)n);

    const char *name = "rms_norm_backward_add_bf16";
    row *r = add_row(name, "%ux%u residual %d", rows, hid, res);
    row *rb = add_row(name, "%ux%u residual %d: bf16", rows, hid, res);
    pgk_knobs kn = knobs_of(name, "num_rows", rows, "hidden_dim", hid, "residual", (uint32_t)res,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx),  pgrt_arg_buf(bg),   pgrt_arg_buf(bdy),
                       pgrt_arg_buf(brs), pgrt_arg_buf(dx),   pgrt_arg_buf(dxb),
                       pgrt_arg_u32(rows), pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    fused_pair(name, &kn, args, 9, dx, dxb, NULL, dx2, dxb2, ref, n, r, rb);
    finish_pair(r, rb);
    pgrt_buf *bufs[] = {bx, bdy, brs, bg, dx, dxb, dx2, dxb2, part};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(x), free(dy), free(rs), free(gam), free(ref);
}

static float *gates(uint32_t n)
{
    float *g = fill_normal(n, 3.0, 0.0);
    for (uint32_t i = 0; i < n; i += 97)
        g[i] = (float)((i & 1 ? -1 : 1) * (10.0 + 100.0 * uniform()));
    return g;
}


static void test_swiglu_fwd(uint32_t n)
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
    finish_pair(r, rb);
    pgrt_buf *bufs[] = {bg, bu, h, hb, h2, hb2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(g), free(u), free(ref);
}

static void test_swiglu_bwd(uint32_t n)
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
    finish_pair(r, rb);
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
    bool small = check_start(argc, argv, "test_fused");
    static const uint32_t shapes[][2] = {{1, 1}, {3, 1536}, {7, 1000}, {5, 4099}, {2048, 1536}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        uint32_t rows = small && shapes[i][0] > 64 ? 64 : shapes[i][0];
        for (int res = 0; res < 2; res++) {
            test_rms_fwd(rows, shapes[i][1], res);
            test_rms_bwd(rows, shapes[i][1], res);
        }
    }
    static const uint32_t sizes[] = {1, 255, 257, 65539, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint32_t n = small && sizes[i] > 65539 ? 65539 : sizes[i];
        test_swiglu_fwd(n);
        test_swiglu_bwd(n);
    }
    print_table("f32 outputs: rel_l2 <= 1e-5; bf16 copies (': bf16'): rel_l2 <= 5e-3; bad also "
                "counts elements whose bits differ from the unfused kernels'");
    TEST_DONE();
}
