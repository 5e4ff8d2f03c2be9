/* SPDX-License-Identifier: MIT */
/*
 * The kernels of kernels/rmsnorm.c on a GPU against a double-precision CPU
 * reference: rms_norm_forward, batched_rms_norm_backward (every element
 * within 1e-6 too), rms_norm_gamma_reduce, and the bf16 model's fused
 * rms_norm_forward_add_bf16 (also with knob f32_output 0: the same bf16
 * copy, the f32 output untouched) and rms_norm_backward_add_bf16 (each with and
 * without the residual): each f32 output within 1e-5 and its bf16 copy
 * within 5e-3 of the reference, and every output, f32 and bf16, bit for bit
 * what the unfused kernels (rms_norm_forward / batched_rms_norm_backward,
 * residual_add, cast_f32_to_bf16) give in turn.
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits; tolerances are norm-wise (|out - ref| / |ref|, 2-norms). The data
 * are fresh random numbers each run; the seed is printed and can be given
 * back.
 *
 * Usage: test_rmsnorm [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
/* f32 rows are held to 1e-5, the fused kernels' bf16 copies to 5e-3 */
static double cur_tol = 1e-5;
#define REL_TOL cur_tol

#include "model_check.h"

#define EPS 1e-6f

/* ---------------------------------------------------------------- rms_norm_forward */

static void test_forward(uint32_t rows, uint32_t hidden)
{
    cur_tol = 1e-5;
    const float eps = 1e-5f;
    size_t n = (size_t)rows * hidden;
    float *x = fill_normal(n, 2.0, 0.5), *g = fill_normal(hidden, 0.5, 1.0);
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < rows; i++) {
        double ss = 0;
        for (uint32_t h = 0; h < hidden; h++)
            ss += (double)x[(size_t)i * hidden + h] * x[(size_t)i * hidden + h];
        double r = sqrt(ss / hidden + eps);
        for (uint32_t h = 0; h < hidden; h++)
            ref[(size_t)i * hidden + h] = x[(size_t)i * hidden + h] / r * g[h];
    }
    pgrt_buf *dx = dev_upload(x, n), *dg = dev_upload(g, hidden), *dy = dev_alloc(PG_F32, n);
    pgk_knobs kn = knobs_of("rms_norm_forward", "rows", rows, "cols", hidden, NULL);
    pgrt_arg a[6] = {pgrt_arg_buf(dx), pgrt_arg_buf(dg), pgrt_arg_buf(dy), pgrt_arg_u32(rows),
                     pgrt_arg_u32(hidden), pgrt_arg_f32(eps)};
    row *r = add_row("rms_norm_forward", "%u x %u", rows, hidden);
    check_twice(r, "rms_norm_forward", &kn, a, 6, dy, ref, n);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dg);
    pgrt_buf_destroy(&dy);
    free(x), free(g), free(ref);
}

/* ---------------------------------------------------------------- rms norm backward + gamma reduce */

static void gamma_reduce_check(row *r, const pgrt_buf *bpart, const float *part, uint32_t rows,
                               uint32_t hidden, const double *ref_e2e, row *r_e2e)
{
    double *ref = xmalloc(hidden * sizeof *ref);
    for (uint32_t h = 0; h < hidden; h++)
        ref[h] = 0;
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t h = 0; h < hidden; h++)
            ref[h] += part[(size_t)i * hidden + h];
    pgrt_buf *bg = dev_alloc(PG_F32, hidden);
    float *out[2] = {xmalloc(hidden * 4), xmalloc(hidden * 4)};
    pgk_knobs kn = knobs_of("rms_norm_gamma_reduce", "rows", rows, "cols", hidden, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bpart), pgrt_arg_buf(bg), pgrt_arg_u32(rows),
                       pgrt_arg_u32(hidden)};
    for (int run = 0; run < 2; run++) {
        poison(bg);
        if (!launch("rms_norm_gamma_reduce", &kn, args, 4))
            r->bad++;
        dev_download(bg, out[run], hidden);
    }
    compare(r, out[0], ref, hidden);
    same_bits(r, out[0], out[1], (size_t)hidden * 4);
    if (r_e2e)
        compare(r_e2e, out[0], ref_e2e, hidden);
    pgrt_buf_destroy(&bg);
    free(ref), free(out[0]), free(out[1]);
}

static void test_backward(uint32_t rows, uint32_t hidden)
{
    cur_tol = 1e-5;
    row *r = add_row("batched_rms_norm_backward", "%u rows x %u", rows, hidden);
    /* f64 inside: every element, not only the norm, is close (the formula
     * cancels, at hidden 1 always) */
    r->elem_tol = 1e-6;
    size_t n = (size_t)rows * hidden;
    const float eps = 1e-5f;
    float *x = fill_normal(n, 1.0, 0.0), *dy = fill_normal(n, 1.0, 0.0);
    float *gamma = fill_normal(hidden, 0.1, 1.0);
    double *ref_dx = xmalloc(n * sizeof *ref_dx), *ref_p = xmalloc(n * sizeof *ref_p);
    double *ref_gg = xmalloc(hidden * sizeof *ref_gg);
    for (uint32_t h = 0; h < hidden; h++)
        ref_gg[h] = 0;
    for (uint32_t i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * hidden, *dyr = dy + (size_t)i * hidden;
        double ss = 0, sg = 0;
        for (uint32_t h = 0; h < hidden; h++) {
            ss += (double)xr[h] * xr[h];
            sg += (double)xr[h] * gamma[h] * dyr[h];
        }
        double rr = sqrt(ss / hidden + (double)eps), c = sg / hidden;
        for (uint32_t h = 0; h < hidden; h++) {
            size_t e = (size_t)i * hidden + h;
            ref_dx[e] = (double)gamma[h] * dyr[h] / rr - (double)xr[h] * c / (rr * rr * rr);
            ref_p[e] = (double)dyr[h] * xr[h] / rr;
            ref_gg[h] += ref_p[e];
        }
    }
    pgrt_buf *bx = dev_upload(x, n), *bgm = dev_upload(gamma, hidden), *bdy = dev_upload(dy, n);
    pgrt_buf *bdx = dev_alloc(PG_F32, n), *bp = dev_alloc(PG_F32, n);
    float *dx[2] = {xmalloc(n * 4), xmalloc(n * 4)}, *pp[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("batched_rms_norm_backward", "rows", rows, "cols", hidden,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx),  pgrt_arg_buf(bgm),   pgrt_arg_buf(bdy),
                       pgrt_arg_buf(bdx), pgrt_arg_buf(bp),    pgrt_arg_u32(rows),
                       pgrt_arg_u32(hidden), pgrt_arg_f32(eps)};
    for (int run = 0; run < 2; run++) {
        poison(bdx);
        poison(bp);
        if (!launch("batched_rms_norm_backward", &kn, args, 8))
            r->bad++;
        dev_download(bdx, dx[run], n);
        dev_download(bp, pp[run], n);
    }
    compare(r, dx[0], ref_dx, n);
    compare(r, pp[0], ref_p, n);
    same_bits(r, dx[0], dx[1], n * 4);
    same_bits(r, pp[0], pp[1], n * 4);
    finish(r);

    /* the reduction of these partials: against the double sum of the very
     * floats it was given, and end to end against the double gamma grad */
    row *rg = add_row("rms_norm_gamma_reduce", "%u rows x %u (partials)", rows, hidden);
    row *re = add_row("rms grad_gamma end to end", "%u rows x %u", rows, hidden);
    gamma_reduce_check(rg, bp, pp[0], rows, hidden, ref_gg, re);
    finish(rg);
    finish(re);

    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bgm);
    pgrt_buf_destroy(&bdy);
    pgrt_buf_destroy(&bdx);
    pgrt_buf_destroy(&bp);
    free(x), free(dy), free(gamma), free(ref_dx), free(ref_p), free(ref_gg);
    free(dx[0]), free(dx[1]), free(pp[0]), free(pp[1]);
}

static void test_gamma_reduce(uint32_t rows, uint32_t hidden)
{
    cur_tol = 1e-5;
    row *r = add_row("rms_norm_gamma_reduce", "%u rows x %u", rows, hidden);
    size_t n = (size_t)rows * hidden;
    float *part = fill_normal(n, 1.0, 0.25);
    pgrt_buf *bp = dev_upload(part, n);
    gamma_reduce_check(r, bp, part, rows, hidden, NULL, NULL);
    finish(r);
    pgrt_buf_destroy(&bp);
    free(part);
}

/* ---------------------------------------------------------------- fused with the residual, bf16 copy */

static void test_forward_add_bf16(uint32_t rows, uint32_t hid, bool res)
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
    pgk_knobs kr = knobs_of("rms_norm_forward", "rows", rows, "cols", hid, NULL);
    pgrt_arg ra[] = {pgrt_arg_buf(xin), pgrt_arg_buf(bg), pgrt_arg_buf(y2), pgrt_arg_u32(rows),
                     pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    launch("rms_norm_forward", &kr, ra, 6);
    cast_into(y2, yb2, (uint32_t)n);

    const char *name = "rms_norm_forward_add_bf16";
    row *r = add_row(name, "%ux%u residual %d", rows, hid, res);
    row *rb = add_row(name, "%ux%u residual %d: bf16", rows, hid, res);
    pgk_knobs kn = knobs_of(name, "rows", rows, "cols", hid, "residual", (uint32_t)res,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(ba), pgrt_arg_buf(bb),  pgrt_arg_buf(sum),
                       pgrt_arg_buf(bg), pgrt_arg_buf(y),   pgrt_arg_buf(yb),
                       pgrt_arg_u32(rows), pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    fused_pair(name, &kn, args, 9, y, yb, sum, y2, yb2, ref, n, r, rb);
    /* knob f32_output 0: the same bf16 copy, the f32 output left alone */
    float *cb1 = get(yb, n, true);
    act_poison(y, false);
    act_poison(yb, true);
    float *y0 = get(y, n, false);
    pgk_knobs k0 = knobs_of(name, "rows", rows, "cols", hid, "residual", (uint32_t)res,
                            "f32_output", 0u, NULL);
    if (!launch(name, &k0, args, 9))
        rb->bad++;
    float *cb2 = get(yb, n, true), *y1 = get(y, n, false);
    same_bits(rb, cb1, cb2, n * 4);
    if (memcmp(y0, y1, n * 4))
        r->bad++;
    free(cb1), free(cb2), free(y0), free(y1);
    if (res) { /* the sum it stored: the residual_add's, and a + b in f32 */
        float *s1 = get(sum, n, false), *s2 = get(sum2, n, false);
        r->bad += differ(s1, s2, n) + differ(s1, xs, n);
        free(s1), free(s2);
    }
    finish_pair(r, rb, &cur_tol);
    pgrt_buf *bufs[] = {ba, bb, bg, sum, y, yb, sum2, y2, yb2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(a), free(b), free(gam), free(ref), free(xs);
}

static void test_backward_add_bf16(uint32_t rows, uint32_t hid, bool res)
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
    pgk_knobs kr = knobs_of("batched_rms_norm_backward", "rows", rows, "cols", hid, NULL);
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
    pgk_knobs kn = knobs_of(name, "rows", rows, "cols", hid, "residual", (uint32_t)res,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx),  pgrt_arg_buf(bg),   pgrt_arg_buf(bdy),
                       pgrt_arg_buf(brs), pgrt_arg_buf(dx),   pgrt_arg_buf(dxb),
                       pgrt_arg_u32(rows), pgrt_arg_u32(hid), pgrt_arg_f32(EPS)};
    fused_pair(name, &kn, args, 9, dx, dxb, NULL, dx2, dxb2, ref, n, r, rb);
    finish_pair(r, rb, &cur_tol);
    pgrt_buf *bufs[] = {bx, bdy, brs, bg, dx, dxb, dx2, dxb2, part};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(x), free(dy), free(rs), free(gam), free(ref);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_rmsnorm");
    test_forward(1, 1);
    test_forward(33, 100);
    test_forward(7, 2049);
    test_forward(small ? 64 : 512, small ? 128 : 1536);

    static const uint32_t hiddens[] = {1, 17, 255, 256, 1536, 4095, 8960};
    static const uint32_t hrows[] = {3, 13, 11, 11, 7, 5, 5};
    for (int i = 0; i < 7; i++)
        test_backward(small ? 2 : hrows[i], hiddens[i]);

    /* the reduction alone, over row counts that take every path of its loop */
    static const uint32_t grows[] = {1, 31, 97, 128, 129, 1000, 4099};
    static const uint32_t gcols[] = {1, 7, 9, 255, 1536, 257, 1536};
    for (int i = 0; i < 7; i++)
        test_gamma_reduce(small && grows[i] > 200 ? 200 : grows[i], gcols[i]);

    static const uint32_t shapes[][2] = {{1, 1}, {3, 1536}, {7, 1000}, {5, 4099}, {2048, 1536}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        uint32_t rows = small && shapes[i][0] > 64 ? 64 : shapes[i][0];
        for (int res = 0; res < 2; res++) {
            test_forward_add_bf16(rows, shapes[i][1], res);
            test_backward_add_bf16(rows, shapes[i][1], res);
        }
    }
    print_table("f32 outputs: rel_l2 <= 1e-5 (batched_rms_norm_backward: max_rel <= 1e-6 too); "
                "bf16 copies (': bf16'): rel_l2 <= 5e-3; for the fused kernels bad also counts "
                "elements whose bits differ from the unfused kernels'");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
