/* SPDX-License-Identifier: MIT */
/*
 * The forward kernels of kernels/forward.c on a GPU against a
 * double-precision CPU reference: rms_norm_forward, gemm_forward,
 * gemm_forward_accumulate, silu_forward, batched_softmax_forward, transpose,
 * mse_loss and adamw_hyper_advance.
 *
 * Outputs are poisoned with NaN before each launch (an element the kernel
 * skips shows), every launch runs twice and must give the same bits, and
 * fp32 results must be within 1e-5 of the reference norm-wise (|out - ref| /
 * |ref|, 2-norms). transpose must move bits exactly; adamw_hyper_advance
 * must match an f32 mirror on the host bit for bit. The data are fresh
 * random numbers each run; the seed is printed and can be given back.
 *
 * Usage: test_forward [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

static bool small;

/* ---------------------------------------------------------------- rms_norm_forward */

static void check_rms(uint32_t rows, uint32_t hidden)
{
    const float eps = 1e-5f;
    size_t n = (size_t)rows * hidden;
    float *x = fill_normal(n, 2.0, 0.5), *g = fill_normal(hidden, 0.5, 1.0);
    float *out = xmalloc(n * sizeof *out), *out2 = xmalloc(n * sizeof *out2);
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
    pgk_knobs kn = knobs_of("rms_norm_forward", "num_rows", rows, "hidden_dim", hidden, NULL);
    pgrt_arg a[6] = {pgrt_arg_buf(dx), pgrt_arg_buf(dg), pgrt_arg_buf(dy), pgrt_arg_u32(rows),
                     pgrt_arg_u32(hidden), pgrt_arg_f32(eps)};
    row *r = add_row("rms_norm_forward", "%u x %u", rows, hidden);
    for (int rep = 0; rep < 2; rep++) {
        poison(dy);
        if (!launch("rms_norm_forward", &kn, a, 6))
            break;
        dev_download(dy, rep ? out2 : out, n);
    }
    compare(r, out, ref, n);
    same_bits(r, out, out2, n * sizeof *out);
    finish(r);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dg);
    pgrt_buf_destroy(&dy);
    free(x), free(g), free(out), free(out2), free(ref);
}

/* ---------------------------------------------------------------- gemm_forward */

static void check_gemm(uint32_t M, uint32_t N, uint32_t K, bool acc)
{
    const char *name = acc ? "gemm_forward_accumulate" : "gemm_forward";
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *a = fill_normal(na, 1.0, 0.0), *b = fill_normal(nb, 1.0, 0.0);
    float *c0 = fill_normal(nc, 1.0, 0.0);
    float *out = xmalloc(nc * sizeof *out), *out2 = xmalloc(nc * sizeof *out2);
    double *ref = xmalloc(nc * sizeof *ref);
    for (uint32_t i = 0; i < M; i++)
        for (uint32_t j = 0; j < N; j++) {
            double s = acc ? c0[(size_t)i * N + j] : 0.0;
            for (uint32_t k = 0; k < K; k++)
                s += (double)a[(size_t)i * K + k] * b[(size_t)k * N + j];
            ref[(size_t)i * N + j] = s;
        }
    pgrt_buf *da = dev_upload(a, na), *db = dev_upload(b, nb), *dc = dev_alloc(PG_F32, nc);
    pgk_knobs kn = knobs_of(name, "m", M, "n", N, "k", K, NULL);
    pgrt_arg args[6] = {pgrt_arg_buf(da), pgrt_arg_buf(db), pgrt_arg_buf(dc), pgrt_arg_u32(M),
                        pgrt_arg_u32(N), pgrt_arg_u32(K)};
    row *r = add_row(name, "%ux%ux%u", M, N, K);
    for (int rep = 0; rep < 2; rep++) {
        int rc = acc ? pgrt_buf_upload(dc, 0, c0, nc) : pgrt_buf_fill32(dc, POISON);
        if (rc)
            die_rt("preparing C", rc);
        if (!launch(name, &kn, args, 6))
            break;
        dev_download(dc, rep ? out2 : out, nc);
    }
    compare(r, out, ref, nc);
    same_bits(r, out, out2, nc * sizeof *out);
    finish(r);
    pgrt_buf_destroy(&da);
    pgrt_buf_destroy(&db);
    pgrt_buf_destroy(&dc);
    free(a), free(b), free(c0), free(out), free(out2), free(ref);
}

/* ---------------------------------------------------------------- silu_forward */

static void check_silu(uint32_t n)
{
    float *x = fill_normal(n, 4.0, 0.0);
    static const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f,
                                    -100.0f, 20.0f, -20.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n; i++)
        x[i] = special[i];
    float *out = xmalloc(n * sizeof *out), *out2 = xmalloc(n * sizeof *out2);
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < n; i++)
        ref[i] = x[i] / (1.0 + exp(-(double)x[i]));
    pgrt_buf *dx = dev_upload(x, n), *dy = dev_alloc(PG_F32, n);
    pgk_knobs kn = knobs_of("silu_forward", "n", n, NULL);
    pgrt_arg a[3] = {pgrt_arg_buf(dx), pgrt_arg_buf(dy), pgrt_arg_u32(n)};
    row *r = add_row("silu_forward", "n %u", n);
    for (int rep = 0; rep < 2; rep++) {
        poison(dy);
        if (!launch("silu_forward", &kn, a, 3))
            break;
        dev_download(dy, rep ? out2 : out, n);
    }
    compare(r, out, ref, n);
    same_bits(r, out, out2, n * sizeof *out);
    finish(r);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dy);
    free(x), free(out), free(out2), free(ref);
}

/* ---------------------------------------------------------------- batched_softmax_forward */

static void check_softmax(uint32_t rows, uint32_t width, double scale)
{
    size_t n = (size_t)rows * width;
    float *x = fill_normal(n, scale, 0.0);
    /* One row far from zero both ways: nothing may overflow. */
    for (uint32_t j = 0; j < width; j++)
        x[j] = (j & 1) ? 80.0f + (float)j : -80.0f - (float)j;
    float *out = xmalloc(n * sizeof *out), *out2 = xmalloc(n * sizeof *out2);
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
    pgk_knobs kn = knobs_of("batched_softmax_forward", "total_rows", rows, "row_size", width,
                            NULL);
    pgrt_arg a[4] = {pgrt_arg_buf(dx), pgrt_arg_buf(dy), pgrt_arg_u32(rows), pgrt_arg_u32(width)};
    row *r = add_row("batched_softmax_forward", "%u x %u", rows, width);
    for (int rep = 0; rep < 2; rep++) {
        poison(dy);
        if (!launch("batched_softmax_forward", &kn, a, 4))
            break;
        dev_download(dy, rep ? out2 : out, n);
    }
    compare(r, out, ref, n);
    same_bits(r, out, out2, n * sizeof *out);
    finish(r);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dy);
    free(x), free(out), free(out2), free(ref);
}

/* ---------------------------------------------------------------- transpose */

static void check_transpose(uint32_t rows, uint32_t cols)
{
    size_t n = (size_t)rows * cols;
    float *x = fill_normal(n, 1.0, 0.0);
    float *out = xmalloc(n * sizeof *out), *want = xmalloc(n * sizeof *want);
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t j = 0; j < cols; j++)
            want[(size_t)j * rows + i] = x[(size_t)i * cols + j];
    pgrt_buf *dx = dev_upload(x, n), *dy = dev_alloc(PG_F32, n);
    pgk_knobs kn = knobs_of("transpose", "rows", rows, "cols", cols, NULL);
    pgrt_arg a[4] = {pgrt_arg_buf(dx), pgrt_arg_buf(dy), pgrt_arg_u32(rows), pgrt_arg_u32(cols)};
    row *r = add_row("transpose", "%u x %u", rows, cols);
    poison(dy);
    if (launch("transpose", &kn, a, 4)) {
        dev_download(dy, out, n);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&out[i], &want[i], sizeof *out) != 0)
                r->bad++;
    }
    finish(r);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dy);
    free(x), free(out), free(want);
}

/* ---------------------------------------------------------------- mse_loss */

static void check_mse(uint32_t n)
{
    float *p = fill_normal(n, 1.0, 0.0), *t = fill_normal(n, 1.0, 0.3);
    uint32_t nb = pgk_squared_sum_num_blocks(n);
    float *grad = xmalloc(n * sizeof *grad), *grad2 = xmalloc(n * sizeof *grad2);
    float *part = xmalloc(nb * sizeof *part), *part2 = xmalloc(nb * sizeof *part2);
    double *ref = xmalloc(n * sizeof *ref), loss_ref = 0;
    for (uint32_t i = 0; i < n; i++) {
        double d = (double)p[i] - t[i];
        loss_ref += d * d;
        ref[i] = 2.0 * d / n;
    }
    loss_ref /= n;
    pgrt_buf *dp = dev_upload(p, n), *dt = dev_upload(t, n), *dg = dev_alloc(PG_F32, n),
             *dpart = dev_alloc(PG_F32, nb);
    pgk_knobs kn = knobs_of("mse_loss", "n", n, NULL);
    pgk_launch cfg;
    REQUIRE_INT_EQ(pgk_launch_for(pgk_find("mse_loss"), &kn, &cfg, NULL, 0), 0);
    REQUIRE_INT_EQ(cfg.grid[0], nb);
    pgrt_arg a[5] = {pgrt_arg_buf(dp), pgrt_arg_buf(dt), pgrt_arg_buf(dg), pgrt_arg_buf(dpart),
                     pgrt_arg_u32(n)};
    row *r = add_row("mse_loss", "n %u (grad)", n);
    row *rl = add_row("mse_loss", "n %u (loss)", n);
    for (int rep = 0; rep < 2; rep++) {
        poison(dg);
        poison(dpart);
        if (!launch("mse_loss", &kn, a, 5))
            break;
        dev_download(dg, rep ? grad2 : grad, n);
        dev_download(dpart, rep ? part2 : part, nb);
    }
    compare(r, grad, ref, n);
    same_bits(r, grad, grad2, n * sizeof *grad);
    finish(r);
    double loss = 0;
    for (uint32_t b = 0; b < nb; b++) {
        if (!isfinite(part[b]))
            rl->bad++;
        loss += part[b];
    }
    float lf = (float)(loss / n);
    compare(rl, &lf, &loss_ref, 1);
    same_bits(rl, part, part2, nb * sizeof *part);
    finish(rl);
    pgrt_buf_destroy(&dp);
    pgrt_buf_destroy(&dt);
    pgrt_buf_destroy(&dg);
    pgrt_buf_destroy(&dpart);
    free(p), free(t), free(grad), free(grad2), free(part), free(part2), free(ref);
}

/* ---------------------------------------------------------------- adamw_hyper_advance */

static void check_hyper_advance(void)
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
    small = check_start(argc, argv, "test_forward");

    check_rms(1, 1);
    check_rms(33, 100);
    check_rms(7, 2049);
    check_rms(small ? 64 : 512, small ? 128 : 1536);
    check_gemm(1, 1, 1, false);
    check_gemm(17, 33, 5, false);
    check_gemm(64, 300, 47, false);
    check_gemm(130, 16, 128, true);
    check_gemm(small ? 64 : 256, 128, 128, false);
    check_gemm(small ? 64 : 256, 128, 16, true);
    check_silu(10);
    check_silu(1000);
    check_silu(small ? 4099 : (1u << 20) + 3);
    check_softmax(1, 1, 1.0);
    check_softmax(37, 31, 3.0);
    check_softmax(512, 64, 5.0);
    check_softmax(10, 1000, 5.0);
    check_softmax(3, 4097, 2.0);
    check_transpose(1, 1);
    check_transpose(33, 65);
    check_transpose(128, 256);
    check_transpose(small ? 100 : 1000, 3);
    check_mse(1);
    check_mse(1000);
    check_mse(small ? 5000 : (1u << 20) + 3);
    check_hyper_advance();

    printf("\n%-26s %-18s %10s %10s %5s %6s %s\n", "kernel", "shape", "rel err", "max abs",
           "bad", "repeat", "result");
    for (size_t i = 0; i < nrows; i++) {
        const row *r = &table[i];
        printf("%-26s %-18s %10.2e %10.2e %5zu %6s %s\n", r->kernel, r->shape, r->rel, r->max_abs,
               r->bad, r->repeat ? "same" : "DIFF", r->pass ? "PASS" : "FAIL");
    }
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
