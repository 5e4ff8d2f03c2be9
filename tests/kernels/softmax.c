/* SPDX-License-Identifier: MIT */
/*
 * batched_softmax_forward and batched_softmax_backward (kernels/softmax.c)
 * on a GPU against a double-precision CPU reference.
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits, and fp32 results must be within 1e-5 of the reference norm-wise
 * (|out - ref| / |ref|, 2-norms). The data are fresh random numbers each
 * run; the seed is printed and can be given back.
 *
 * Usage: test_softmax [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

/* ---------------------------------------------------------------- batched_softmax_forward */

static void test_forward(uint32_t rows, uint32_t width, double scale)
{
    size_t n = (size_t)rows * width;
    float *x = fill_normal(n, scale, 0.0);
    /* One row far from zero both ways: nothing may overflow. */
    for (uint32_t j = 0; j < width; j++)
        x[j] = (j & 1) ? 80.0f + (float)j : -80.0f - (float)j;
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * width;
        double mx = -INFINITY, s = 0;
        for (uint32_t j = 0; j < width; j++)
            mx = fmax(mx, xr[j]);
        for (uint32_t j = 0; j < width; j++)
            s += exp(xr[j] - mx);
        for (uint32_t j = 0; j < width; j++)
            ref[(size_t)i * width + j] = exp(xr[j] - mx) / s;
    }
    pgrt_buf *dx = dev_upload(x, n), *dy = dev_alloc(PG_F32, n);
    pgk_knobs kn = knobs_of("batched_softmax_forward", "rows", rows, "cols", width,
                            NULL);
    pgrt_arg a[4] = {pgrt_arg_buf(dx), pgrt_arg_buf(dy), pgrt_arg_u32(rows), pgrt_arg_u32(width)};
    row *r = add_row("batched_softmax_forward", "%u x %u", rows, width);
    check_twice(r, "batched_softmax_forward", &kn, a, 4, dy, ref, n);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dy);
    free(x), free(ref);
}

/* ---------------------------------------------------------------- batched_softmax_backward */

static void test_backward(uint32_t rows, uint32_t width)
{
    row *r = add_row("batched_softmax_backward", "%u rows x %u", rows, width);
    size_t n = (size_t)rows * width;
    float *y = xmalloc(n * 4);
    float *dy = fill_normal(n, 1.0, 0.0);
    double *logit = xmalloc(width * sizeof *logit), *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < rows; i++) {
        double mx = -INFINITY, sum = 0;
        for (uint32_t j = 0; j < width; j++) {
            logit[j] = 2.0 * normal();
            mx = fmax(mx, logit[j]);
        }
        for (uint32_t j = 0; j < width; j++)
            sum += exp(logit[j] - mx);
        for (uint32_t j = 0; j < width; j++)
            y[(size_t)i * width + j] = (float)(exp(logit[j] - mx) / sum);
        double dot = 0;
        for (uint32_t j = 0; j < width; j++)
            dot += (double)y[(size_t)i * width + j] * dy[(size_t)i * width + j];
        for (uint32_t j = 0; j < width; j++) {
            size_t e = (size_t)i * width + j;
            ref[e] = (double)y[e] * ((double)dy[e] - dot);
        }
    }
    pgrt_buf *by = dev_upload(y, n), *bdy = dev_upload(dy, n), *bdx = dev_alloc(PG_F32, n);
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("batched_softmax_backward", "rows", rows, "cols", width,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(by), pgrt_arg_buf(bdy), pgrt_arg_buf(bdx),
                       pgrt_arg_u32(rows), pgrt_arg_u32(width)};
    for (int run = 0; run < 2; run++) {
        poison(bdx);
        if (!launch("batched_softmax_backward", &kn, args, 5))
            r->bad++;
        dev_download(bdx, out[run], n);
    }
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    finish(r);
    pgrt_buf_destroy(&by);
    pgrt_buf_destroy(&bdy);
    pgrt_buf_destroy(&bdx);
    free(y), free(dy), free(logit), free(ref), free(out[0]), free(out[1]);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_softmax");
    test_forward(1, 1, 1.0);
    test_forward(37, 31, 3.0);
    test_forward(512, 64, 5.0);
    test_forward(10, 1000, 5.0);
    test_forward(3, 4097, 2.0);

    static const uint32_t widths[] = {1, 31, 32, 33, 512, 4096};
    static const uint32_t wrows[] = {37, 37, 37, 37, 19, 9};
    for (int i = 0; i < 6; i++)
        test_backward(small ? 3 : wrows[i], widths[i]);
    print_table("rel_l2 must be <= 1e-5");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
