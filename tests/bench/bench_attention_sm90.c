/* SPDX-License-Identifier: MIT */
/*
 * Causal attention forward throughput on a compute capability 9.0 device:
 * attention_sm90_forward (wgmma + TMA, through pgrt_attention_sm90_forward,
 * bf16 Q K V) beside attention_mma_forward (mma.sync, f32 Q K V holding
 * the same bf16 values) in the same process, at Hq 12, Hkv 2, D 128 and
 * S = 512, 2K, 8K, 32K (batch 32, 8, 2, 1: 16K or 32K tokens a launch).
 * TFLOP/s counts the causal half of the two GEMMs, 4 B Hq D S^2 / 2 flops,
 * as FlashAttention's benchmarks do; each time is the best of 3 runs of
 * `iters` launches between two events after 3 warm-up launches. The last
 * columns are the largest |O_sm90 - O_mma| over max|O_mma| and the same
 * for LSE (a sanity check: the two kernels agree to bf16's P rounding).
 * attention_mma_forward takes S up to 16384: at 32K its columns say n/a.
 *
 *   bench_attention_sm90 [iters] [--s S]... (default 10; --s replaces the list)
 *
 * Exit 77 without such a device.
 */
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HQ 12u
#define HKV 2u
#define D 128u

static pgrt_ctx *ctx;

static pgrt_buf *alloc(pg_type t, size_t n)
{
    pgrt_buf *b = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, t, n, &b));
    return b;
}

static uint16_t bf16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* n random values in [-1, 1) rounded to bf16, as bf16 and as f32. */
static void random_pair(size_t n, rng *r, pgrt_buf **b16, pgrt_buf **b32)
{
    uint16_t *h = malloc(n * 2);
    float *f = malloc(n * 4);
    if (!h || !f) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        h[i] = bf16_bits(rng_unit(r));
        uint32_t x = (uint32_t)h[i] << 16;
        memcpy(&f[i], &x, 4);
    }
    *b16 = alloc(PG_BF16, n);
    *b32 = alloc(PG_F32, n);
    GPU_CHECK(pgrt_buf_upload(*b16, 0, h, n));
    GPU_CHECK(pgrt_buf_upload(*b32, 0, f, n));
    free(h);
    free(f);
}

typedef struct job {
    pgrt_attention90 a;     /* sm_90a */
    pgrt_attention90_grad g; /* its backward */
    pgrt_kernel *mma;       /* attention_mma_forward, or NULL */
    pgk_knobs kn;
    pgrt_arg args[11];
    pgrt_kernel *mdq, *mdkv; /* attention_mma_backward_dq, _dkv */
    pgk_knobs kdq, kdkv;
    pgrt_arg adq[14], adkv[14];
} job;

static int run_sm90(void *p)
{
    job *j = p;
    return pgrt_attention_sm90_forward(ctx, NULL, &j->a);
}
static int run_mma(void *p)
{
    job *j = p;
    return pgrt_kernel_launch(j->mma, NULL, &j->kn, j->args, 11);
}

static int run_sm90_bwd(void *p)
{
    job *j = p;
    return pgrt_attention_sm90_backward(ctx, NULL, &j->g);
}
static int run_mma_bwd(void *p)
{
    job *j = p;
    int rc = pgrt_kernel_launch(j->mdq, NULL, &j->kdq, j->adq, 14);
    return rc ? rc : pgrt_kernel_launch(j->mdkv, NULL, &j->kdkv, j->adkv, 14);
}

/* max |x - y| / max |y| over n f32 of two buffers. */
static double max_diff(const pgrt_buf *x, const pgrt_buf *y, size_t n)
{
    float *hx = malloc(n * 4), *hy = malloc(n * 4);
    if (!hx || !hy) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    GPU_CHECK(pgrt_buf_download(x, 0, hx, n));
    GPU_CHECK(pgrt_buf_download(y, 0, hy, n));
    double d = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)hx[i] - hy[i]);
        if (!(e <= d))
            d = e; /* a NaN shows as NaN */
        big = fmax(big, fabs((double)hy[i]));
    }
    free(hx);
    free(hy);
    return d / (big > 0 ? big : 1);
}

int main(int argc, char **argv)
{
    int iters = 10;
    uint32_t seqs[8] = {512, 2048, 8192, 32768}, batches[8] = {0};
    size_t nseq = 4, given = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--s") && i + 1 < argc) {
            char *end;
            if (given < 8) {
                seqs[given] = (uint32_t)strtoul(argv[++i], &end, 0);
                batches[given++] = *end == 'x' ? (uint32_t)strtoul(end + 1, NULL, 0) : 0;
            }
            nseq = given;
        } else if (atoi(argv[i]) > 0) {
            iters = atoi(argv[i]);
        } else {
            fprintf(stderr, "usage: bench_attention_sm90 [iters] [--s S[xB]]... (B: 16384 / S "
                            "tokens unless given, 1 from 32768)\n");
            return 2;
        }
    }
    ctx = gpu_open();
    gpu_require_sm90a(&ctx, "bench_attention_sm90", "attention_sm90_forward");
    pgrt_device_info di;
    pgrt_ctx_device_info(ctx, &di);
    const pgk_desc *md = pgk_find("attention_mma_forward");
    int si = pgk_knob_index(md, "seq_len");
    rng r = {12345};
    printf("causal attention, Hq %u, Hkv %u, D %u, bf16 operands, f32 O; %s, %d SMs; "
           "best of 3 x %d launches\n", HQ, HKV, D, di.name, di.sm_count, iters);
    printf("forward (4 B Hq D S^2 / 2 flops):\n");
    printf("%6s %3s | %10s %9s | %10s %9s | %7s | %10s %10s\n", "S", "B", "sm90_ms", "TFLOP/s",
           "mma_ms", "TFLOP/s", "speedup", "dO/max|O|", "dLSE");
    double bwd_rows[8][4];
    for (size_t c = 0; c < nseq; c++) {
        uint32_t S = seqs[c];
        uint32_t B = batches[c] ? batches[c] : S >= 32768 ? 1 : 16384 / S ? 16384 / S : 1;
        size_t nq = (size_t)B * S * HQ * D, nk = (size_t)B * S * HKV * D, nr = (size_t)B * S * HQ;
        pgrt_buf *q16, *q32, *k16, *k32, *v16, *v32;
        random_pair(nq, &r, &q16, &q32);
        random_pair(nk, &r, &k16, &k32);
        random_pair(nk, &r, &v16, &v32);
        pgrt_buf *o = alloc(PG_F32, nq), *ob = alloc(PG_BF16, nq), *l = alloc(PG_F32, nr);
        pgrt_buf *mo = alloc(PG_F32, nq), *ml = alloc(PG_F32, nr);
        float scale = 1.0f / sqrtf((float)D);
        job j = {{pgrt_buf_ptr(q16), pgrt_buf_ptr(k16), pgrt_buf_ptr(v16), pgrt_buf_ptr(o),
                  pgrt_buf_ptr(ob), pgrt_buf_ptr(l), B, S, HQ, HKV, D, scale},
                 .mma = NULL};
        double flops = 4.0 * B * HQ * D * (double)S * S / 2;
        double t90 = gpu_time_ms(ctx, run_sm90, &j, iters);
        bool mma_ok = md && si >= 0 && S <= md->knobs[si].max;
        double tmma = 0, dmax = NAN, lmax = NAN;
        if (mma_ok) {
            pgk_knobs_default(md, &j.kn);
            j.kn.v[0] = B, j.kn.v[1] = S, j.kn.v[2] = HQ, j.kn.v[3] = D;
            GPU_CHECK(pgrt_kernel_get(ctx, md, &j.kn, &j.mma));
            pgrt_arg a[11] = {pgrt_arg_buf(q32), pgrt_arg_buf(k32), pgrt_arg_buf(v32),
                              pgrt_arg_buf(mo),  pgrt_arg_buf(ml),  pgrt_arg_u32(B),
                              pgrt_arg_u32(S),   pgrt_arg_u32(HQ),  pgrt_arg_u32(HKV),
                              pgrt_arg_u32(D),   pgrt_arg_f32(scale)};
            memcpy(j.args, a, sizeof a);
            tmma = gpu_time_ms(ctx, run_mma, &j, iters);
            dmax = max_diff(o, mo, nq);
            lmax = max_diff(l, ml, nr);
        }
        char mms[16] = "n/a", mtf[16] = "n/a", sp[16] = "n/a";
        if (mma_ok) {
            snprintf(mms, sizeof mms, "%.4f", tmma);
            snprintf(mtf, sizeof mtf, "%.1f", flops / tmma / 1e9);
            snprintf(sp, sizeof sp, "%.2fx", tmma / t90);
        }
        printf("%6u %3u | %10.4f %9.1f | %10s %9s | %7s | %10.2e %10.2e\n", S, B, t90,
               flops / t90 / 1e9, mms, mtf, sp, dmax, lmax);
        /* the backward: 2.5 forwards' flops */
        pgrt_buf *go16, *go32;
        random_pair(nq, &r, &go16, &go32);
        uint64_t stb = pgrt_attention_sm90_stats_bytes(B, S, HQ);
        pgrt_buf *gob = alloc(PG_BF16, nq), *st = alloc(PG_U32, stb / 4);
        pgrt_buf *dq = alloc(PG_F32, nq), *dk = alloc(PG_F32, nk), *dv = alloc(PG_F32, nk);
        pgrt_buf *del = alloc(PG_F32, nr), *kh = alloc(PG_F32, nq), *vh = alloc(PG_F32, nq);
        j.g = (pgrt_attention90_grad){pgrt_buf_ptr(q16), pgrt_buf_ptr(k16),  pgrt_buf_ptr(v16),
                                      pgrt_buf_ptr(o),   pgrt_buf_ptr(go32), pgrt_buf_ptr(l),
                                      pgrt_buf_ptr(gob), pgrt_buf_ptr(st),   pgrt_buf_ptr(dq),
                                      pgrt_buf_ptr(dk),  pgrt_buf_ptr(dv),   pgrt_buf_ptr(kh),
                                      pgrt_buf_ptr(vh),  B, S, HQ, HKV, D,   scale};
        double b90 = gpu_time_ms(ctx, run_sm90_bwd, &j, iters), bmma = 0;
        if (mma_ok) {
            const pgk_desc *dd = pgk_find("attention_mma_backward_dq");
            const pgk_desc *dkd = pgk_find("attention_mma_backward_dkv");
            pgk_knobs_default(dd, &j.kdq);
            j.kdq.v[0] = B, j.kdq.v[1] = S, j.kdq.v[2] = HQ, j.kdq.v[3] = D;
            pgk_knobs_default(dkd, &j.kdkv);
            j.kdkv.v[0] = B, j.kdkv.v[1] = S, j.kdkv.v[2] = HKV, j.kdkv.v[3] = D;
            GPU_CHECK(pgrt_kernel_get(ctx, dd, &j.kdq, &j.mdq));
            GPU_CHECK(pgrt_kernel_get(ctx, dkd, &j.kdkv, &j.mdkv));
            pgrt_arg a1[14] = {pgrt_arg_buf(q32),  pgrt_arg_buf(k32), pgrt_arg_buf(v32),
                               pgrt_arg_buf(mo),   pgrt_arg_buf(go32), pgrt_arg_buf(ml),
                               pgrt_arg_buf(dq),   pgrt_arg_buf(del), pgrt_arg_u32(B),
                               pgrt_arg_u32(S),    pgrt_arg_u32(HQ),  pgrt_arg_u32(HKV),
                               pgrt_arg_u32(D),    pgrt_arg_f32(scale)};
            pgrt_arg a2[14] = {pgrt_arg_buf(q32),  pgrt_arg_buf(k32), pgrt_arg_buf(v32),
                               pgrt_arg_buf(go32), pgrt_arg_buf(ml),  pgrt_arg_buf(del),
                               pgrt_arg_buf(dk),   pgrt_arg_buf(dv),  pgrt_arg_u32(B),
                               pgrt_arg_u32(S),    pgrt_arg_u32(HQ),  pgrt_arg_u32(HKV),
                               pgrt_arg_u32(D),    pgrt_arg_f32(scale)};
            memcpy(j.adq, a1, sizeof a1);
            memcpy(j.adkv, a2, sizeof a2);
            bmma = gpu_time_ms(ctx, run_mma_bwd, &j, iters);
        }
        bwd_rows[c][0] = S, bwd_rows[c][1] = B, bwd_rows[c][2] = b90, bwd_rows[c][3] = bmma;
        pgrt_buf *bw[] = {go16, go32, gob, st, dq, dk, dv, del, kh, vh};
        for (size_t i = 0; i < sizeof bw / sizeof bw[0]; i++)
            pgrt_buf_destroy(&bw[i]);
        pgrt_buf *all[] = {q16, q32, k16, k32, v16, v32, o, ob, l, mo, ml};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            pgrt_buf_destroy(&all[i]);
    }
    printf("backward (2.5 forwards' flops; sm90: prep, dq, dkv, group; mma: dq, dkv):\n");
    printf("%6s %3s | %10s %9s | %10s %9s | %7s\n", "S", "B", "sm90_ms", "TFLOP/s", "mma_ms",
           "TFLOP/s", "speedup");
    for (size_t c = 0; c < nseq; c++) {
        double S = bwd_rows[c][0], B = bwd_rows[c][1], t = bwd_rows[c][2], m = bwd_rows[c][3];
        double fl = 2.5 * 4.0 * B * HQ * D * S * S / 2;
        if (m > 0)
            printf("%6.0f %3.0f | %10.4f %9.1f | %10.4f %9.1f | %6.2fx\n", S, B, t, fl / t / 1e9,
                   m, fl / m / 1e9, m / t);
        else
            printf("%6.0f %3.0f | %10.4f %9.1f | %10s %9s | %7s\n", S, B, t, fl / t / 1e9, "n/a",
                   "n/a", "n/a");
    }
    pgrt_ctx_destroy(&ctx);
    return 0;
}
