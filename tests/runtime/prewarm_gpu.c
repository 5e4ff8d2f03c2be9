/* SPDX-License-Identifier: MIT */
/*
 * pgrt_prewarm_model on a device: the modules a backward step of a model
 * needs, each with its JIT time, then a second call (all hits). The
 * default shape is a 1.5B model (Qwen2-1.5B: hidden 1536, 12 heads, K/V
 * 256 wide, MLP 8960) with rank-16 LoRA at sequence length 512.
 *
 *   test_prewarm_gpu [--hidden N] [--q-dim N] [--kv-hidden N] [--seq N] [--rank N]
 *                 [--intermediate N] [--heads N] [--batch N] [--full] [--f16]
 *
 * Exit 77 without a driver or a device (PGRT_LIBCUDA may name another
 * driver library); 1 when the pre-warm fails or the second call loads
 * anything.
 */
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_prewarm.h"

#include <stdint.h>
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

static int parse(int argc, char **argv, pgrt_model_config *m, pgrt_prewarm_step *st)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--full") == 0) {
            st->full_fp32 = true;
            continue;
        }
        if (strcmp(a, "--f16") == 0) {
            st->f16_weights = true;
            continue;
        }
        static const char *const names[] = {"--hidden", "--heads",  "--kv-heads", "--head-dim",
                                            "--intermediate", "--seq", "--rank", "--batch"};
        size_t j = 0;
        while (j < sizeof names / sizeof names[0] && strcmp(a, names[j]) != 0)
            j++;
        if (j == sizeof names / sizeof names[0] || i + 1 == argc) {
            fprintf(stderr, "usage: %s [--hidden N] [--heads N] [--kv-heads N] [--head-dim N] "
                    "[--intermediate N] [--seq N] [--rank N] [--batch N] [--full] [--f16]\n",
                    argv[0]);
            return 2;
        }
        unsigned long v = strtoul(argv[++i], NULL, 0);
        int *model_fields[] = {&m->hidden, &m->heads, &m->kv_heads, &m->head_dim,
                               &m->intermediate};
        uint32_t *step_fields[] = {&st->max_seq_len, &st->lora_rank, &st->max_batch};
        if (j < 5)
            *model_fields[j] = v > INT32_MAX ? -1 : (int)v;
        else
            *step_fields[j - 5] = (uint32_t)v;
    }
    return 0;
}

int main(int argc, char **argv)
{
    pgrt_model_config model = {.hidden = 1536, .intermediate = 8960, .heads = 12, .kv_heads = 2,
                               .head_dim = 128};
    pgrt_prewarm_step step = {.max_seq_len = 512, .lora_rank = 16};
    int rc = parse(argc, argv, &model, &step);
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
    printf("model: hidden %d, heads %d, kv_heads %d, head_dim %d, intermediate %d; step: "
           "max_seq_len %u, lora_rank %u, max_batch %u%s%s\n",
           model.hidden, model.heads, model.kv_heads, model.head_dim, model.intermediate,
           step.max_seq_len, step.lora_rank, step.max_batch ? step.max_batch : 1,
           step.full_fp32 ? ", full fp32" : "", step.f16_weights ? ", f16 weights" : "");

    pgrt_prewarm_report *r = malloc(sizeof *r);
    if (!r)
        return 1;
    rc = pgrt_prewarm_model(ctx, &model, &step, r);
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

    rc = pgrt_prewarm_model(ctx, &model, &step, r);
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
