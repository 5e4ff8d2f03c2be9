/* SPDX-License-Identifier: MIT */
/*
 * GEMM backward throughput, with CUDA events: the median of many timed
 * batches after a warm-up, as TFLOP/s (2·M·N·K flops a GEMM).
 *
 * Shapes: the backward GEMMs of a 1.5B decoder at sequence length 512
 * (hidden 1536, intermediate 8960, a 256-wide k/v projection, LoRA rank
 * 16), as (M, N, K) of the forward C[M,N] = A[M,K]·B[K,N]: each gives
 * grad_A = dC·Bᵀ and grad_B = Aᵀ·dC; and 4096³.
 *
 * Columns: the PTX kernels in each variant; cuBLAS (dlopen'd, pedantic
 * fp32 math: no TF32) when it loads; the default variant's and the best
 * variant's throughput as a fraction of cuBLAS's; the relative Frobenius
 * difference between the default variant's result and cuBLAS's. Then the
 * f16 tensor-core kernel against cublasGemmEx (f16 in, f32 compute and
 * out), likewise.
 *
 * A figure, not a test: it fails only when something does not run.
 * --quick: fewer repetitions.
 */
#include "cublas_dl.h"
#include "gemm_util.h"

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct shape {
    const char *name;
    uint32_t m, n, k;
} shape;

static const shape shapes[] = {
    {"q/o   (S,H,H)", 512, 1536, 1536},  {"k/v   (S,kv,H)", 512, 256, 1536},
    {"down  (S,H,I)", 512, 1536, 8960},  {"gate/up (S,I,H)", 512, 8960, 1536},
    {"lora_a (S,r,H)", 512, 16, 1536},   {"lora_b (S,H,r)", 512, 1536, 16},
    {"square 4096^3", 4096, 4096, 4096},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

typedef enum op { OP_A, OP_B, OP_F16 } op;

typedef struct bench {
    pgrt_ctx *ctx;
    pgrt_event *e0, *e1;
    cublas_dl *cb;
    pgrt_buf *dc, *b, *a, *dc16, *b16, *out, *ref;
    int reps;
} bench;

/* One GEMM: variant >= 0 is a PTX kernel, -1 cuBLAS. */
static int run_one(bench *B, op o, int variant, const shape *s, pgrt_buf *out)
{
    char err[256];
    if (variant < 0) {
        int rc;
        if (o == OP_A)
            rc = cublas_dl_backward_a(B->cb, pgrt_buf_ptr(B->dc), pgrt_buf_ptr(B->b),
                                      pgrt_buf_ptr(out), (int)s->m, (int)s->n, (int)s->k, 0.0f,
                                      err, sizeof err);
        else if (o == OP_B)
            rc = cublas_dl_backward_b(B->cb, pgrt_buf_ptr(B->a), pgrt_buf_ptr(B->dc),
                                      pgrt_buf_ptr(out), (int)s->m, (int)s->n, (int)s->k, err,
                                      sizeof err);
        else
            rc = cublas_dl_f16_backward_a(B->cb, pgrt_buf_ptr(B->dc16), pgrt_buf_ptr(B->b16),
                                          pgrt_buf_ptr(out), (int)s->m, (int)s->n, (int)s->k,
                                          err, sizeof err);
        if (rc)
            fprintf(stderr, "%s\n", err);
        return rc;
    }
    const char *name = o == OP_A ? "gemm_backward_a" : o == OP_B ? "gemm_backward_b"
                                                                  : "gemm_f16_backward_a";
    const pgrt_buf *b0 = o == OP_A ? B->dc : o == OP_B ? B->a : B->dc16;
    const pgrt_buf *b1 = o == OP_A ? B->b : o == OP_B ? B->dc : B->b16;
    int rc = gemm_launch(B->ctx, NULL, name, variant, s->m, s->n, s->k, b0, b1, out);
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", name, pgrt_err_name(rc), pgrt_last_message());
    return rc;
}

/* Median milliseconds of one GEMM; < 0 when it does not run. */
static double time_one(bench *B, op o, int variant, const shape *s)
{
    for (int i = 0; i < 3; i++)
        if (run_one(B, o, variant, s, B->out))
            return -1;
    /* batches of at least ~1 ms so that launch gaps do not count */
    GPU_CHECK(pgrt_event_record(B->e0, NULL));
    if (run_one(B, o, variant, s, B->out))
        return -1;
    GPU_CHECK(pgrt_event_record(B->e1, NULL));
    GPU_CHECK(pgrt_event_sync(B->e1));
    float one = 0;
    GPU_CHECK(pgrt_event_elapsed_ms(B->e0, B->e1, &one));
    int batch = one > 0 ? (int)(1.0f / one) + 1 : 50;
    batch = batch < 1 ? 1 : batch > 200 ? 200 : batch;
    float t[64];
    int reps = B->reps < 64 ? B->reps : 64;
    for (int r = 0; r < reps; r++) {
        GPU_CHECK(pgrt_event_record(B->e0, NULL));
        for (int i = 0; i < batch; i++)
            if (run_one(B, o, variant, s, B->out))
                return -1;
        GPU_CHECK(pgrt_event_record(B->e1, NULL));
        GPU_CHECK(pgrt_event_sync(B->e1));
        GPU_CHECK(pgrt_event_elapsed_ms(B->e0, B->e1, &t[r]));
        t[r] /= (float)batch;
    }
    return median(t, reps);
}

/* Relative Frobenius difference between a PTX result and cuBLAS's. */
static double diff_vs_cublas(bench *B, op o, int variant, const shape *s)
{
    size_t count = o == OP_B ? (size_t)s->k * s->n : (size_t)s->m * s->k;
    if (run_one(B, o, variant, s, B->out) || run_one(B, o, -1, s, B->ref))
        return -1;
    GPU_CHECK(pgrt_ctx_sync(B->ctx));
    float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return -1;
    }
    GPU_CHECK(pgrt_buf_download(B->out, 0, x, count));
    GPU_CHECK(pgrt_buf_download(B->ref, 0, y, count));
    double num = 0, den = 0;
    for (size_t i = 0; i < count; i++) {
        double d = (double)x[i] - (double)y[i];
        num += d * d;
        den += (double)y[i] * y[i];
    }
    free(x);
    free(y);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double tflops(const shape *s, double ms)
{
    return ms > 0 ? 2.0 * s->m * s->n * (double)s->k / (ms * 1e-3) / 1e12 : 0;
}

static void cell(double ms, const shape *s)
{
    if (ms > 0)
        printf(" %8.2f", tflops(s, ms));
    else
        printf(" %8s", "-");
}

int main(int argc, char **argv)
{
    bool quick = gpu_quick();
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;
    bench B = {0};
    B.ctx = gpu_open();
    B.reps = quick ? 5 : 21;
    pgrt_device_info info;
    pgrt_ctx_device_info(B.ctx, &info);
    GPU_CHECK(pgrt_event_create(B.ctx, &B.e0));
    GPU_CHECK(pgrt_event_create(B.ctx, &B.e1));
    bool f16 = pg_target_sm(info.target) >= 80;

    char err[256];
    if (cublas_dl_open(&B.cb, err, sizeof err)) {
        fprintf(stderr, "note: %s: no cuBLAS columns\n", err);
        B.cb = NULL;
    }

    size_t mk = 0, kn = 0, out = 0;
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        size_t smk = (size_t)s->m * (s->n > s->k ? s->n : s->k), skn = (size_t)s->k * s->n;
        mk = smk > mk ? smk : mk;
        kn = skn > kn ? skn : kn;
        size_t o = (size_t)s->m * s->k > skn ? (size_t)s->m * s->k : skn;
        out = o > out ? o : out;
    }
    size_t big = mk > kn ? mk : kn;
    float *h = malloc(big * sizeof *h);
    uint16_t *h16 = malloc(big * sizeof *h16);
    if (!h || !h16) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    rng r = {12345};
    for (size_t i = 0; i < big; i++) {
        h[i] = rng_unit(&r) * 0.05f;
        h16[i] = f32_to_f16(h[i]);
    }
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, mk, &B.dc));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, mk, &B.a));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, kn, &B.b));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_U16, mk, &B.dc16));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_U16, kn, &B.b16));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, out, &B.out));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, out, &B.ref));
    GPU_CHECK(pgrt_buf_upload(B.dc, 0, h, mk));
    GPU_CHECK(pgrt_buf_upload(B.a, 0, h + 1, mk - 1));
    GPU_CHECK(pgrt_buf_upload(B.b, 0, h, kn));
    GPU_CHECK(pgrt_buf_upload(B.dc16, 0, h16, mk));
    GPU_CHECK(pgrt_buf_upload(B.b16, 0, h16, kn));

    printf("GEMM backward on %s (%s, %d SMs), TFLOP/s, median of %d timed batches\n", info.name,
           pg_target_name(info.target), info.sm_count, B.reps);
    if (B.cb)
        printf("cuBLAS: %s (version %d), fp32 with CUBLAS_PEDANTIC_MATH\n", cublas_dl_name(B.cb),
               cublas_dl_version(B.cb));
    const pgk_desc *da = pgk_find("gemm_backward_a");
    int nv = (int)da->knobs[pgk_knob_index(da, "variant")].max + 1;
    nv = nv > 8 ? 8 : nv;
    int vdef = (int)da->knobs[pgk_knob_index(da, "variant")].def;
    printf("\n%-18s %-4s", "shape (M,N,K)", "grad");
    for (int v = 0; v < nv; v++)
        printf("   ptx v%d", v);
    printf(" %8s %8s %8s %10s\n", "cuBLAS", "v1/cuB", "best/cuB", "|v1-cuB|");
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        for (op o = OP_A; o <= OP_B; o++) {
            double t[8], best = -1;
            int bv = 0;
            for (int v = 0; v < nv; v++) {
                t[v] = time_one(&B, o, v, s);
                if (t[v] > 0 && (best < 0 || t[v] < best)) {
                    best = t[v];
                    bv = v;
                }
            }
            double tc = B.cb ? time_one(&B, o, -1, s) : -1;
            printf("%-18s %-4s", s->name, o == OP_A ? "A" : "B");
            for (int v = 0; v < nv; v++)
                cell(t[v], s);
            cell(tc, s);
            if (tc > 0 && t[vdef] > 0)
                printf(" %8.2f %6.2f v%d %10.1e", tc / t[vdef], tc / best, bv,
                       diff_vs_cublas(&B, o, vdef, s));
            printf("\n");
            fflush(stdout);
        }
    }
    if (f16) {
        const pgk_desc *dh = pgk_find("gemm_f16_backward_a");
        int hv = (int)dh->knobs[pgk_knob_index(dh, "variant")].max + 1;
        hv = hv > 8 ? 8 : hv;
        int hdef = (int)dh->knobs[pgk_knob_index(dh, "variant")].def;
        printf("\n%-18s %-6s", "shape (M,N,K)", "grad");
        for (int v = 0; v < hv; v++)
            printf("  f16 v%d", v);
        printf(" %8s %8s %8s %10s\n", "cuBLAS", "v0/cuB", "best/cuB", "|v0-cuB|");
        for (size_t i = 0; i < NSHAPES; i++) {
            const shape *s = &shapes[i];
            double t[8], best = -1;
            int bv = 0;
            for (int v = 0; v < hv; v++) {
                t[v] = time_one(&B, OP_F16, v, s);
                if (t[v] > 0 && (best < 0 || t[v] < best)) {
                    best = t[v];
                    bv = v;
                }
            }
            double tc = B.cb ? time_one(&B, OP_F16, -1, s) : -1;
            printf("%-18s %-6s", s->name, "A f16");
            for (int v = 0; v < hv; v++)
                cell(t[v], s);
            cell(tc, s);
            if (tc > 0 && t[hdef] > 0)
                printf(" %8.2f %6.2f v%d %10.1e", tc / t[hdef], tc / best, bv,
                       diff_vs_cublas(&B, OP_F16, hdef, s));
            printf("\n");
            fflush(stdout);
        }
    }

    free(h);
    free(h16);
    pgrt_buf_destroy(&B.dc);
    pgrt_buf_destroy(&B.a);
    pgrt_buf_destroy(&B.b);
    pgrt_buf_destroy(&B.dc16);
    pgrt_buf_destroy(&B.b16);
    pgrt_buf_destroy(&B.out);
    pgrt_buf_destroy(&B.ref);
    pgrt_event_destroy(&B.e0);
    pgrt_event_destroy(&B.e1);
    cublas_dl_close(&B.cb);
    pgrt_ctx_destroy(&B.ctx);
    return 0;
}
