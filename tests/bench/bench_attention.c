/* SPDX-License-Identifier: MIT */
/*
 * Attention timings at a model's shape (default Qwen2-1.5B's: B 4, S 512,
 * Hq 12, Hkv 2, D 128): the SIMT kernels (attention_*_f32) against the
 * tensor-core ones (attention_mma_*), both on f32 buffers as pgrt_lm
 * gives them. Forward alone, and forward + backward (dq then dkv), each
 * the mean of `iters` back-to-back runs between two events after warm-up.
 *
 *   bench_attention [--b B] [--s S] [--hq HQ] [--hkv HKV] [--d D] [--iters N]
 *
 * Exits 77 without a device (the tensor-core rows need sm_80: below it
 * they are left out).
 */
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pgrt_ctx *ctx_;

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_attention: %s: %s: %s\n", what, pgrt_err_name(rc), pgrt_last_message());
    exit(1);
}

static pgrt_buf *dev_alloc(size_t n)
{
    pgrt_buf *b = NULL;
    int rc = pgrt_buf_alloc(ctx_, PG_F32, n, &b);
    if (rc)
        die("pgrt_buf_alloc", rc);
    return b;
}

typedef struct fam {
    const char *name, *fwd, *dq, *dkv;
} fam;

static pgrt_kernel *get(pgrt_ctx *ctx, const char *name, const pgk_knobs *kn)
{
    pgrt_kernel *k = NULL;
    int rc = pgrt_kernel_get(ctx, pgk_find(name), kn, &k);
    if (rc)
        die(name, rc);
    return k;
}

static pgk_knobs knobs(const char *name, uint32_t b, uint32_t s, uint32_t heads, uint32_t d)
{
    const pgk_desc *dsc = pgk_find(name);
    pgk_knobs kn;
    pgk_knobs_default(dsc, &kn);
    kn.v[0] = b, kn.v[1] = s, kn.v[2] = heads, kn.v[3] = d;
    return kn;
}

int main(int argc, char **argv)
{
    uint32_t B = 4, S = 512, HQ = 12, HKV = 2, D = 128, iters = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        uint32_t v = (uint32_t)strtoul(argv[i + 1], NULL, 0);
        if (!strcmp(argv[i], "--b"))
            B = v;
        else if (!strcmp(argv[i], "--s"))
            S = v;
        else if (!strcmp(argv[i], "--hq"))
            HQ = v;
        else if (!strcmp(argv[i], "--hkv"))
            HKV = v;
        else if (!strcmp(argv[i], "--d"))
            D = v;
        else if (!strcmp(argv[i], "--iters"))
            iters = v ? v : 1;
        else {
            fprintf(stderr, "bench_attention: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    pgrt_ctx *ctx = gpu_open();
    ctx_ = ctx;
    pgrt_device_info di;
    pgrt_ctx_device_info(ctx, &di);
    size_t nq = (size_t)B * S * HQ * D, nk = (size_t)B * S * HKV * D, nr = (size_t)B * S * HQ;
    pgrt_buf *q = dev_alloc(nq), *k = dev_alloc(nk), *v = dev_alloc(nk);
    pgrt_buf *o = dev_alloc(nq), *go = dev_alloc(nq), *dq = dev_alloc(nq);
    pgrt_buf *dk = dev_alloc(nk), *dv = dev_alloc(nk);
    pgrt_buf *lse = dev_alloc(nr), *delta = dev_alloc(nr);
    /* small values: any finite data times the same */
    pgrt_buf *bufs[] = {q, k, v, go};
    for (int i = 0; i < 4; i++)
        if (pgrt_buf_fill32(bufs[i], 0x3c000000u + (uint32_t)i * 0x1000u))
            die("pgrt_buf_fill32", PGRT_EDRIVER);
    float scale = 1.0f / sqrtf((float)D);
    pgrt_arg shape[] = {pgrt_arg_u32(B),   pgrt_arg_u32(S), pgrt_arg_u32(HQ),
                        pgrt_arg_u32(HKV), pgrt_arg_u32(D), pgrt_arg_f32(scale)};
    pgrt_arg fa[11] = {pgrt_arg_buf(q), pgrt_arg_buf(k), pgrt_arg_buf(v), pgrt_arg_buf(o),
                       pgrt_arg_buf(lse)};
    pgrt_arg qa[14] = {pgrt_arg_buf(q),  pgrt_arg_buf(k),   pgrt_arg_buf(v),
                       pgrt_arg_buf(o),  pgrt_arg_buf(go),  pgrt_arg_buf(lse),
                       pgrt_arg_buf(dq), pgrt_arg_buf(delta)};
    pgrt_arg ka[14] = {pgrt_arg_buf(q),     pgrt_arg_buf(k),  pgrt_arg_buf(v),
                       pgrt_arg_buf(go),    pgrt_arg_buf(lse), pgrt_arg_buf(delta),
                       pgrt_arg_buf(dk),    pgrt_arg_buf(dv)};
    memcpy(fa + 5, shape, sizeof shape);
    memcpy(qa + 8, shape, sizeof shape);
    memcpy(ka + 8, shape, sizeof shape);

    static const fam fams[] = {
        {"simt", "attention_forward_f32", "attention_backward_dq_f32",
         "attention_backward_dkv_f32"},
        {"mma", "attention_mma_forward", "attention_mma_backward_dq",
         "attention_mma_backward_dkv"},
    };
    pgrt_event *e0, *e1;
    int erc;
    if ((erc = pgrt_event_create(ctx, &e0)) || (erc = pgrt_event_create(ctx, &e1)))
        die("pgrt_event_create", erc);
    printf("attention B %u S %u Hq %u Hkv %u D %u, %s, mean of %u\n", B, S, HQ, HKV, D,
           pg_target_name(di.target), iters);
    /* causal: Q K^T and P V over half the S x S scores, 2 S^2 D flops a
     * head forward; the backward's five products, 2.5 times that */
    double flops = 2.0 * B * HQ * (double)S * S * D;
    printf("%-6s %10s %10s %10s %10s %9s %9s\n", "family", "fwd_ms", "dq_ms", "dkv_ms",
           "fwd+bwd_ms", "fwd_TF/s", "bwd_TF/s");
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        if (!pgk_supports(pgk_find(fams[f].fwd), di.target))
            continue;
        pgk_knobs kf = knobs(fams[f].fwd, B, S, HQ, D), kq = knobs(fams[f].dq, B, S, HQ, D);
        pgk_launch lf;
        char why[256] = "";
        if (pgk_launch_for(pgk_find(fams[f].fwd), &kf, &lf, why, sizeof why)) {
            printf("%-6s n/a: %s\n", fams[f].name, why); /* a shape past its knobs */
            continue;
        }
        pgk_knobs kk = knobs(fams[f].dkv, B, S, HKV, D);
        pgrt_kernel *hf = get(ctx, fams[f].fwd, &kf), *hq = get(ctx, fams[f].dq, &kq);
        pgrt_kernel *hk = get(ctx, fams[f].dkv, &kk);
        double ms[3];
        for (int part = 0; part < 3; part++) {
            for (uint32_t it = 0; it < iters + 3; it++) {
                if (it == 3 && (erc = pgrt_event_record(e0, NULL)))
                    die("pgrt_event_record", erc);
                int rc = part == 0   ? pgrt_kernel_launch(hf, NULL, &kf, fa, 11)
                         : part == 1 ? pgrt_kernel_launch(hq, NULL, &kq, qa, 14)
                                     : pgrt_kernel_launch(hk, NULL, &kk, ka, 14);
                if (rc)
                    die(fams[f].name, rc);
            }
            float t = 0;
            if ((erc = pgrt_event_record(e1, NULL)) || (erc = pgrt_event_sync(e1)) ||
                (erc = pgrt_event_elapsed_ms(e0, e1, &t)))
                die("events", erc);
            ms[part] = t / iters;
        }
        printf("%-6s %10.4f %10.4f %10.4f %10.4f %9.1f %9.1f\n", fams[f].name, ms[0], ms[1],
               ms[2], ms[0] + ms[1] + ms[2], flops / ms[0] * 1e-9,
               2.5 * flops / (ms[1] + ms[2]) * 1e-9);
    }
    pgrt_event_destroy(&e0), pgrt_event_destroy(&e1);
    pgrt_buf *all[] = {q, k, v, o, go, dq, dk, dv, lse, delta};
    for (int i = 0; i < 10; i++)
        pgrt_buf_destroy(&all[i]);
    pgrt_ctx_destroy(&ctx);
    return 0;
}
