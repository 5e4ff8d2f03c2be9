/* SPDX-License-Identifier: MIT */
/*
 * silu_forward and silu_backward (kernels/silu.c) on a GPU against a
 * double-precision CPU reference.
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits, and fp32 results must be within 1e-5 of the reference norm-wise
 * (|out - ref| / |ref|, 2-norms). The data are fresh random numbers each
 * run; the seed is printed and can be given back.
 *
 * Usage: test_silu [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

/* ---------------------------------------------------------------- silu_forward */

static void test_forward(uint32_t n)
{
    float *x = fill_normal(n, 4.0, 0.0);
    static const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f,
                                    -100.0f, 20.0f, -20.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n; i++)
        x[i] = special[i];
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < n; i++)
        ref[i] = x[i] / (1.0 + exp(-(double)x[i]));
    pgrt_buf *dx = dev_upload(x, n), *dy = dev_alloc(PG_F32, n);
    pgk_knobs kn = knobs_of("silu_forward", "n", n, NULL);
    pgrt_arg a[3] = {pgrt_arg_buf(dx), pgrt_arg_buf(dy), pgrt_arg_u32(n)};
    row *r = add_row("silu_forward", "n %u", n);
    check_twice(r, "silu_forward", &kn, a, 3, dy, ref, n);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dy);
    free(x), free(ref);
}

/* ---------------------------------------------------------------- silu_backward */

static void test_backward(uint32_t n)
{
    row *r = add_row("silu_backward", "n=%u", n);
    float *x = fill_normal(n, 3.0, 0.0);
    /* the tails too: large |x| where exp over- or underflows */
    for (uint32_t i = 0; i < n; i += 97)
        x[i] = (float)((i & 1 ? -1 : 1) * (10.0 + 100.0 * uniform()));
    float *dy = fill_normal(n, 1.0, 0.0);
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < n; i++) {
        double xv = x[i], s = 1.0 / (1.0 + exp(-xv));
        ref[i] = (double)dy[i] * s * (1.0 + xv * (1.0 - s));
    }
    pgrt_buf *bx = dev_upload(x, n), *bdy = dev_upload(dy, n), *bdx = dev_alloc(PG_F32, n);
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("silu_backward", "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx), pgrt_arg_buf(bdy), pgrt_arg_buf(bdx), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        poison(bdx);
        if (!launch("silu_backward", &kn, args, 4))
            r->bad++;
        dev_download(bdx, out[run], n);
    }
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    finish(r);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bdy);
    pgrt_buf_destroy(&bdx);
    free(x), free(dy), free(ref), free(out[0]), free(out[1]);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_silu");
    test_forward(10);
    test_forward(1000);
    test_forward(small ? 4099 : (1u << 20) + 3);
    for (int i = 0; i < CHECK_NSIZES; i++)
        test_backward(check_sizes(small)[i]);
    print_table("rel_l2 must be <= 1e-5");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
