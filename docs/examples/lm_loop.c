/* SPDX-License-Identifier: MIT */
/*
 * Your own fine-tuning loop over pgrt_lm: LoRA r16 on every linear module
 * of a Hugging Face Qwen2/LLaMA checkpoint, two micro-batches a step, a
 * warmup + cosine schedule computed on the device, a validation loss every
 * 10 steps, and the adapter and optimizer state saved at the end (load
 * both to resume bit for bit: pgrt_adapter_load, pgrt_lm_state_load).
 *
 *   lm_loop MODEL_DIR TOKENS.bin OUT_DIR [STEPS]
 *
 * TOKENS.bin: little-endian int32 ids; rows of SEQ consecutive ids.
 */
#include <ptxgen/pgrt_lm.h>

#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 4, SEQ = 512, ACCUM = 2 };

#define CHECK(call)                                                            \
    do {                                                                       \
        if ((call) != 0) {                                                     \
            fprintf(stderr, "lm_loop: %s\n", pgrt_last_message());             \
            return 1;                                                          \
        }                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: lm_loop MODEL_DIR TOKENS.bin OUT_DIR [STEPS]\n");
        return 2;
    }
    int steps = argc > 4 ? atoi(argv[4]) : 100;
    pgrt_ctx *ctx = NULL;
    pgrt_model_files *model = NULL;
    pgrt_adapter *adapter = NULL;
    pgrt_tokens *tokens = NULL;
    pgrt_lm *lm = NULL;
    pgrt_stream *s = NULL;
    CHECK(pgrt_ctx_create(&ctx, NULL));
    CHECK(pgrt_model_open(argv[1], &model));
    const pgrt_model_config *cfg = pgrt_model_files_config(model);
    pgrt_adapter_config ac = {.r = 16, .alpha = 32, .targets = (1u << PGRT_LINEAR_COUNT) - 1};
    CHECK(pgrt_adapter_init(cfg, &ac, 42, &adapter));
    CHECK(pgrt_tokens_open(argv[2], cfg->vocab, &tokens));
    pgrt_lm_params p = {
        .model = model, .adapter = adapter, .batch = BATCH, .seq = SEQ,
        .dtype = PGRT_LM_BF16, .lr = 2e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
        .weight_decay = 0.01f, .max_norm = 1.0f, .graph = true, .grad_accum = ACCUM,
        .schedule = {PGRT_LM_SCHED_COSINE, (uint32_t)steps / 10, (uint32_t)steps, 0.1f},
    };
    CHECK(pgrt_lm_create(ctx, &p, &lm));
    CHECK(pgrt_stream_create(ctx, &s));
    static int32_t ids[ACCUM][BATCH * SEQ];
    uint64_t micro = 0;
    for (int step = 0; step < steps; step++) {
        /* the step's micro-batches first: the loss is the mean over all of
         * their targets (the next id in each row: SEQ - 1 a row) */
        for (int k = 0; k < ACCUM; k++)
            pgrt_tokens_batch(tokens, micro++, BATCH * SEQ, ids[k]);
        pgrt_lm_result r;
        double sum = 0;
        for (int k = 0; k < ACCUM; k++) {
            pgrt_lm_batch b = {.ids = ids[k], .step_targets = ACCUM * BATCH * (SEQ - 1)};
            CHECK(pgrt_lm_train(lm, s, &b, &r));
            sum += r.loss_sum;
        }
        printf("step %d: loss %.4f, lr %.3g, grad norm %.3f%s\n", step + 1,
               sum / (ACCUM * BATCH * (SEQ - 1)), r.lr, r.grad_norm,
               r.skipped ? " (skipped: not finite)" : "");
        if ((step + 1) % 10 == 0) {
            /* held-out rows: here simply the next ones, as an illustration */
            pgrt_tokens_batch(tokens, micro, BATCH * SEQ, ids[0]);
            pgrt_lm_batch b = {.ids = ids[0]};
            CHECK(pgrt_lm_eval(lm, s, &b, &r));
            printf("  validation loss %.4f\n", r.loss_sum / (double)r.targets);
        }
    }
    char path[4096];
    CHECK(pgrt_lm_adapter_get(lm, adapter));
    CHECK(pgrt_adapter_save(adapter, argv[3]));
    snprintf(path, sizeof path, "%s/optimizer.safetensors", argv[3]);
    CHECK(pgrt_lm_state_save(lm, s, path));
    printf("adapter and optimizer state in %s\n", argv[3]);
    pgrt_stream_destroy(&s);
    pgrt_lm_destroy(&lm);
    pgrt_tokens_close(&tokens);
    pgrt_adapter_destroy(&adapter);
    pgrt_model_close(&model);
    pgrt_ctx_destroy(&ctx);
    return 0;
}
