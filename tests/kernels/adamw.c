/* SPDX-License-Identifier: MIT */
/*
 * The optimizer kernels of kernels/adamw.c on a GPU against a double-
 * precision CPU reference: adamw_step, adamw_step_dev and
 * adamw_hyper_advance.
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits, and fp32 results must be within 1e-5 of the reference norm-wise
 * (|out - ref| / |ref|, 2-norms). adamw_hyper_advance must match an f32
 * mirror on the host bit for bit. The data are fresh random numbers each
 * run; the seed is printed and can be given back.
 *
 * Usage: test_adamw [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

/* ---------------------------------------------------------------- adamw */

static void test_step(uint32_t n, int steps)
{
    row *r = add_row("adamw_step", "n=%u, %d steps", n, steps);
    row *rd = add_row("adamw_step_dev", "n=%u, %d steps", n, steps);
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float *p0 = fill_normal(n, 1.0, 0.0);
    float *zero = xmalloc(n * 4);
    for (uint32_t i = 0; i < n; i++)
        zero[i] = 0.0f;
    double *p = xmalloc(n * sizeof *p), *m = xmalloc(n * sizeof *m), *v = xmalloc(n * sizeof *v);
    for (uint32_t i = 0; i < n; i++)
        p[i] = p0[i], m[i] = 0, v[i] = 0;
    /* two copies of the state: one per kernel */
    pgrt_buf *bp[2], *bm[2], *bv[2];
    for (int c = 0; c < 2; c++) {
        bp[c] = dev_upload(p0, n);
        bm[c] = dev_upload(zero, n);
        bv[c] = dev_upload(zero, n);
    }
    pgrt_buf *bg = dev_alloc(PG_F32, n), *bh = dev_alloc(PG_F32, 7);
    pgk_knobs kn = knobs_of("adamw_step", "n", n, NULL);
    pgk_knobs knd = knobs_of("adamw_step_dev", "n", n, NULL);
    for (int t = 1; t <= steps; t++) {
        float *g = fill_normal(n, 0.1, 0.0);
        int rc = pgrt_buf_upload(bg, 0, g, n);
        if (rc)
            die_rt("pgrt_buf_upload", rc);
        float bc1 = (float)(1.0 / (1.0 - pow(b1, t))), bc2 = (float)(1.0 / (1.0 - pow(b2, t)));
        float hyper[7] = {lr, b1, b2, eps, wd, bc1, bc2};
        if ((rc = pgrt_buf_upload(bh, 0, hyper, 7)))
            die_rt("pgrt_buf_upload", rc);
        pgrt_arg args[] = {pgrt_arg_buf(bp[0]), pgrt_arg_buf(bg),   pgrt_arg_buf(bm[0]),
                           pgrt_arg_buf(bv[0]), pgrt_arg_f32(lr),   pgrt_arg_f32(b1),
                           pgrt_arg_f32(b2),    pgrt_arg_f32(eps),  pgrt_arg_f32(wd),
                           pgrt_arg_f32(bc1),   pgrt_arg_f32(bc2),  pgrt_arg_u32(n)};
        if (!launch("adamw_step", &kn, args, 12))
            r->bad++;
        pgrt_arg dargs[] = {pgrt_arg_buf(bp[1]), pgrt_arg_buf(bg), pgrt_arg_buf(bm[1]),
                            pgrt_arg_buf(bv[1]), pgrt_arg_buf(bh), pgrt_arg_u32(n)};
        if (!launch("adamw_step_dev", &knd, dargs, 6))
            rd->bad++;
        for (uint32_t i = 0; i < n; i++) {
            double gi = g[i];
            m[i] = (double)b1 * m[i] + (1.0 - (double)b1) * gi;
            v[i] = (double)b2 * v[i] + (1.0 - (double)b2) * gi * gi;
            p[i] -= (double)lr * (m[i] * bc1 / (sqrt(v[i] * bc2) + (double)eps) + (double)wd * p[i]);
        }
        free(g);
    }
    float *out[2][3];
    for (int c = 0; c < 2; c++) {
        for (int j = 0; j < 3; j++)
            out[c][j] = xmalloc(n * 4);
        dev_download(bp[c], out[c][0], n);
        dev_download(bm[c], out[c][1], n);
        dev_download(bv[c], out[c][2], n);
    }
    const double *refs[3] = {p, m, v};
    for (int j = 0; j < 3; j++) {
        compare(r, out[0][j], refs[j], n);
        compare(rd, out[1][j], refs[j], n);
        /* the same body: the same bits from either kernel */
        same_bits(rd, out[0][j], out[1][j], n * 4);
    }
    finish(r);
    finish(rd);
    for (int c = 0; c < 2; c++) {
        pgrt_buf_destroy(&bp[c]);
        pgrt_buf_destroy(&bm[c]);
        pgrt_buf_destroy(&bv[c]);
        for (int j = 0; j < 3; j++)
            free(out[c][j]);
    }
    pgrt_buf_destroy(&bg);
    pgrt_buf_destroy(&bh);
    free(p0), free(zero), free(p), free(m), free(v);
}

/* ---------------------------------------------------------------- adamw_hyper_advance */

static void test_hyper_advance(void)
{
    volatile float b1 = 0.9f, b2 = 0.999f;
    float h[10] = {1e-3f, b1, b2, 1e-8f, 0.01f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f};
    pgrt_buf *dh = dev_upload(h, 10);
    pgrt_arg a = pgrt_arg_buf(dh);
    row *r = add_row("adamw_hyper_advance", "5 steps");
    volatile float p1 = 1.0f, p2 = 1.0f;
    for (int step = 1; step <= 5; step++) {
        if (!launch("adamw_hyper_advance", NULL, &a, 1))
            break;
        float got[10];
        dev_download(dh, got, 10);
        p1 = p1 * b1;
        p2 = p2 * b2;
        volatile float q1 = 1.0f - p1, q2 = 1.0f - p2;
        float want[10] = {h[0], h[1], h[2], h[3], h[4], 1.0f / q1, 1.0f / q2, p1, p2,
                          (float)step};
        if (memcmp(got, want, sizeof got) != 0) {
            r->bad++;
            TEST_FAIL_("adamw_hyper_advance step %d: bc1 %.9g (want %.9g), bc2 %.9g (want "
                       "%.9g), t %g", step, (double)got[5], (double)want[5], (double)got[6],
                       (double)want[6], (double)got[9]);
        }
    }
    finish(r);
    pgrt_buf_destroy(&dh);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_adamw");
    for (int i = 0; i < CHECK_NSIZES; i++)
        test_step(check_sizes(small)[i], 5);
    test_hyper_advance();
    print_table("rel_l2 must be <= 1e-5; adamw_hyper_advance must be bit-exact");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
