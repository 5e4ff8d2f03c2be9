/* SPDX-License-Identifier: MIT */
/*
 * Throughput of pgrt_gemm_sm90 against cuBLAS (cublasGemmEx, bf16 in, f32
 * compute, default math) in the same process, on a compute capability 9.0
 * device: M = 2048 tokens for the Qwen2-1.5B projections (N, K) = (1536,
 * 1536) q/o, (256, 1536) k/v, (8960, 1536) gate/up, (1536, 8960) down, and
 * 4096^3, each as forward (bf16 out), dX (bf16 out) and dW (f32 out).
 * Prints TFLOP/s of both, their ratio, the block-tile width the runtime
 * chose, ours at each width, and the largest difference between the two
 * results (relative to the largest value) as a sanity check; then the
 * geometric mean of the ratios. Exit 77 without such a device.
 *
 * Usage: bench_gemm_sm90 [iterations]
 */
#include "cublas_dl.h"
#include "kernels/gemm_util.h"

static pgrt_buf *random_bf16(pgrt_ctx *ctx, size_t n, rng *r)
{
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(rng_unit(r));
    pgrt_buf *b;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_BF16, n, &b));
    GPU_CHECK(pgrt_buf_upload(b, 0, h, n));
    free(h);
    return b;
}

typedef struct job {
    pgrt_ctx *ctx;
    pgrt_gemm90 g;
    cublas_dl *cb;
    int ta, tb, cm, cn, ck, clda, cldb, ctype, cldc;
    uint64_t ca, cbp, cc;
} job;

static int ours(void *p)
{
    job *j = p;
    return pgrt_gemm_sm90(j->ctx, NULL, &j->g);
}

static int theirs(void *p)
{
    job *j = p;
    char err[256];
    int s = cublas_dl_gemm_ex(j->cb, j->ta, j->tb, j->cm, j->cn, j->ck, j->ca, CUBLAS_DL_R_16BF,
                              j->clda, j->cbp, CUBLAS_DL_R_16BF, j->cldb, 0.0f, j->cc, j->ctype,
                              j->cldc, err, sizeof err);
    if (s)
        fprintf(stderr, "%s\n", err);
    return s ? 1 : 0;
}

/* Largest |x - y| over the largest |y|, of two downloaded results. */
static double compare(const pgrt_buf *x, const pgrt_buf *y)
{
    size_t n = pgrt_buf_count(x);
    bool f32 = pgrt_buf_type(x) == PG_F32;
    void *hx = malloc(n * (f32 ? 4 : 2)), *hy = malloc(n * (f32 ? 4 : 2));
    GPU_CHECK(pgrt_buf_download(x, 0, hx, n));
    GPU_CHECK(pgrt_buf_download(y, 0, hy, n));
    double d = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        double a = f32 ? ((float *)hx)[i] : bf16_to_f32(((uint16_t *)hx)[i]);
        double b = f32 ? ((float *)hy)[i] : bf16_to_f32(((uint16_t *)hy)[i]);
        if (!(fabs(a - b) <= d))
            d = fabs(a - b);
        if (fabs(b) > big)
            big = fabs(b);
    }
    free(hx);
    free(hy);
    return d / (big > 0 ? big : 1);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    if (iters < 1)
        iters = 20;
    pgrt_ctx *ctx = gpu_open();
    gpu_require_sm90a(&ctx, "bench_gemm_sm90", "gemm_sm90");
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    cublas_dl *cb = NULL;
    char err[512];
    if (cublas_dl_open(&cb, err, sizeof err)) {
        fprintf(stderr, "skip: no cuBLAS to compare with: %s\n", err);
        pgrt_ctx_destroy(&ctx);
        return GPU_SKIP;
    }
    printf("device: %s (%d SMs), cuBLAS %d (%s)\n", info.name, info.sm_count,
           cublas_dl_version(cb), cublas_dl_name(cb));
    static const uint32_t shapes[][3] = {
        {2048, 1536, 1536}, {2048, 256, 1536}, {2048, 8960, 1536}, {2048, 1536, 8960},
        {4096, 4096, 4096},
    };
    static const char *const lname[] = {"fwd", "dX ", "dW "};
    rng r = {12345};
    double logsum = 0;
    int count = 0;
    printf("%-4s %5s %5s %5s  %8s %8s %6s  %4s  %6s %6s %6s %6s  %s\n", "gemm", "M", "N", "K",
           "ours", "cuBLAS", "ratio", "bn", "bn=64", "128", "192", "256", "maxdiff");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        uint32_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        pgrt_buf *x = random_bf16(ctx, (size_t)M * K, &r);
        pgrt_buf *w = random_bf16(ctx, (size_t)N * K, &r);
        pgrt_buf *dy = random_bf16(ctx, (size_t)M * N, &r);
        for (int l = 0; l < 3; l++) {
            job j = {.ctx = ctx, .cb = cb};
            pg_type ot = l == 2 ? PG_F32 : PG_BF16;
            size_t oc = l == 0 ? (size_t)M * N : l == 1 ? (size_t)M * K : (size_t)N * K;
            pgrt_buf *o1, *o2;
            GPU_CHECK(pgrt_buf_alloc(ctx, ot, oc, &o1));
            GPU_CHECK(pgrt_buf_alloc(ctx, ot, oc, &o2));
            j.g = (pgrt_gemm90){(pgk_gemm_layout)l, l == 0 ? x : dy, l == 2 ? x : w, o1, NULL,
                                M, N, K, 0, 0, 0, false, 0};
            j.ctype = ot == PG_F32 ? CUBLAS_DL_R_32F : CUBLAS_DL_R_16BF;
            j.cc = pgrt_buf_ptr(o2);
            if (l == 0) { /* Y^T (N x M) = W (K x N)^T . X^T (K x M) */
                j.ta = 1, j.tb = 0, j.cm = (int)N, j.cn = (int)M, j.ck = (int)K;
                j.ca = pgrt_buf_ptr(w), j.clda = (int)K, j.cbp = pgrt_buf_ptr(x), j.cldb = (int)K;
                j.cldc = (int)N;
            } else if (l == 1) { /* dX^T (K x M) = W^T (K x N) . dY^T (N x M) */
                j.ta = 0, j.tb = 0, j.cm = (int)K, j.cn = (int)M, j.ck = (int)N;
                j.ca = pgrt_buf_ptr(w), j.clda = (int)K, j.cbp = pgrt_buf_ptr(dy), j.cldb = (int)N;
                j.cldc = (int)K;
            } else { /* dW^T (K x N) = X^T (K x M) . dY (M x N) */
                j.ta = 0, j.tb = 1, j.cm = (int)K, j.cn = (int)N, j.ck = (int)M;
                j.ca = pgrt_buf_ptr(x), j.clda = (int)K, j.cbp = pgrt_buf_ptr(dy), j.cldb = (int)N;
                j.cldc = (int)K;
            }
            double flop = 2.0 * M * N * K;
            double t_ours = gpu_time_ms(ctx, ours, &j, iters);
            double t_cb = gpu_time_ms(ctx, theirs, &j, iters);
            uint32_t P = l == 2 ? N : M, Q = l == 0 ? N : K;
            uint32_t chosen = pgrt_gemm_sm90_bn(P, Q, (uint32_t)info.sm_count);
            static const uint32_t bns[] = {64, 128, 192, 256};
            double tf_bn[4];
            for (int b = 0; b < 4; b++) {
                j.g.bn = bns[b];
                tf_bn[b] = flop / gpu_time_ms(ctx, ours, &j, iters) * 1e-9;
            }
            j.g.bn = 0;
            GPU_CHECK(ours(&j));
            GPU_CHECK(theirs(&j));
            GPU_CHECK(pgrt_ctx_sync(ctx));
            double diff = compare(o1, o2);
            double ratio = t_cb / t_ours;
            logsum += log(ratio);
            count++;
            printf("%-4s %5u %5u %5u  %8.1f %8.1f %6.3f  %4u  %6.1f %6.1f %6.1f %6.1f  %.2e\n",
                   lname[l], M, N, K, flop / t_ours * 1e-9, flop / t_cb * 1e-9, ratio, chosen,
                   tf_bn[0], tf_bn[1], tf_bn[2], tf_bn[3], diff);
            fflush(stdout);
            pgrt_buf_destroy(&o1);
            pgrt_buf_destroy(&o2);
        }
        pgrt_buf_destroy(&x);
        pgrt_buf_destroy(&w);
        pgrt_buf_destroy(&dy);
    }
    printf("geometric mean of ours / cuBLAS over %d GEMMs: %.3f\n", count, exp(logsum / count));
    cublas_dl_close(&cb);
    pgrt_ctx_destroy(&ctx);
    return 0;
}
