/* SPDX-License-Identifier: MIT */
/*
 * pgrt_prewarm_model on a device: the modules a backward step of a model
 * needs, each with its JIT time, then a second call (all hits). The
 * default shape is a 1.5B model (Qwen2-1.5B: hidden 1536, 12 heads, K/V
 * 256 wide, MLP 8960) with rank-16 LoRA at sequence length 512.
 *
 *   prewarm_model [--hidden N] [--q-dim N] [--kv-hidden N] [--seq N] [--rank N]
 *                 [--intermediate N] [--heads N] [--batch N] [--full] [--f16]
 *
 * Exit 77 without a driver or a device (PGRT_LIBCUDA may name another
 * driver library); 1 when the pre-warm fails or the second call loads
 * anything.
 */
#include "pgrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_report(const char *title, const pgrt_prewarm_report *r)
{
    printf("%s: %zu modules, %zu loaded, %zu cached; JIT %.1f ms, PTX emit %.1f ms, "
           "cuBLAS %s (%.1f ms), whole call %.1f ms\n",
           title, r->modules, r->loaded, r->hits, r->jit_ms, r->emit_ms,
           r->cublas ? "in use" : "not in use", r->cublas_ms, r->total_ms);
}

static int parse(int argc, char **argv, pgrt_model_config *c)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--full") == 0) {
            c->full_fp32 = true;
            continue;
        }
        if (strcmp(a, "--f16") == 0) {
            c->f16_weights = true;
            continue;
        }
        static const char *const names[] = {"--hidden", "--q-dim", "--kv-hidden", "--seq",
                                            "--rank", "--intermediate", "--heads", "--batch"};
        uint32_t *fields[] = {&c->hidden,    &c->q_dim,        &c->kv_hidden, &c->max_seq_len,
                              &c->lora_rank, &c->intermediate, &c->num_heads, &c->max_batch};
        size_t j = 0;
        while (j < sizeof names / sizeof names[0] && strcmp(a, names[j]) != 0)
            j++;
        if (j == sizeof names / sizeof names[0] || i + 1 == argc) {
            fprintf(stderr, "usage: %s [--hidden N] [--q-dim N] [--kv-hidden N] [--seq N] "
                    "[--rank N] [--intermediate N] [--heads N] [--batch N] [--full] [--f16]\n",
                    argv[0]);
            return 2;
        }
        *fields[j] = (uint32_t)strtoul(argv[++i], NULL, 0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    pgrt_model_config cfg = {.hidden = 1536,
                             .q_dim = 1536,
                             .kv_hidden = 256,
                             .max_seq_len = 512,
                             .lora_rank = 16,
                             .intermediate = 8960,
                             .num_heads = 12};
    int rc = parse(argc, argv, &cfg);
    if (rc)
        return rc;
    pgrt_ctx *ctx = NULL;
    rc = pgrt_ctx_create(&ctx, NULL);
    if (pgrt_err_unavailable(rc)) {
        fprintf(stderr, "skip: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return 77;
    }
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return 1;
    }
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    printf("device: %s (%s)\n", info.name, pg_target_name(info.target));
    printf("config: hidden %u, q_dim %u, kv_hidden %u, max_seq_len %u, lora_rank %u, "
           "intermediate %u, num_heads %u, max_batch %u%s%s\n",
           cfg.hidden, cfg.q_dim, cfg.kv_hidden, cfg.max_seq_len, cfg.lora_rank,
           cfg.intermediate, cfg.num_heads, cfg.max_batch ? cfg.max_batch : 1,
           cfg.full_fp32 ? ", full fp32" : "", cfg.f16_weights ? ", f16 weights" : "");

    pgrt_prewarm_report *r = malloc(sizeof *r);
    if (!r)
        return 1;
    rc = pgrt_prewarm_model(ctx, &cfg, r);
    if (rc) {
        fprintf(stderr, "pgrt_prewarm_model: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        free(r);
        pgrt_ctx_destroy(&ctx);
        return 1;
    }
    printf("%-48s %-7s %9s %9s\n", "module", "loaded", "JIT ms", "emit ms");
    for (size_t i = 0; i < r->modules; i++)
        printf("%-48s %-7s %9.2f %9.2f\n", r->list[i].key, r->list[i].loaded ? "yes" : "cached",
               r->list[i].jit_ms, r->list[i].emit_ms);
    print_report("first call", r);

    rc = pgrt_prewarm_model(ctx, &cfg, r);
    if (rc) {
        fprintf(stderr, "pgrt_prewarm_model (again): %s: %s\n", pgrt_err_name(rc),
                pgrt_last_message());
    } else {
        print_report("second call", r);
        if (r->loaded) {
            fprintf(stderr, "FAIL: the second call loaded %zu modules\n", r->loaded);
            rc = 1;
        }
    }
    pgrt_cublas_info bi;
    if (pgrt_cublas_info_get(ctx, &bi) == 0)
        printf("cuBLAS: %s\n", bi.in_use ? bi.library : bi.reason);
    free(r);
    pgrt_ctx_destroy(&ctx);
    return rc ? 1 : 0;
}
