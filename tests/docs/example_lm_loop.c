/* SPDX-License-Identifier: MIT */
/*
 * docs/examples/lm_loop.c run whole on a GPU (the `example-lm-loop` test):
 * a small Qwen2-shaped checkpoint with random bf16 weights and a token
 * file are written here, the example program fine-tunes it for STEPS
 * steps, and what it printed and wrote is checked: a finite loss each
 * step, the validation lines, an adapter that pgrt_adapter_load reads back
 * with the model's shapes, and an optimizer state file.
 *
 *   example_lm_loop PATH_OF_LM_LOOP
 *
 * Exit 77 (skip) without a GPU.
 */
#include "model/model_util.h"
#include "ptxgen/pgrt_model.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { STEPS = 20, HIDDEN = 128, INTER = 256, LAYERS = 2, HEADS = 4, KV = 2, VOCAB = 512 };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* bf16 bits of a uniform value in [-a, a) */
static uint16_t rand_bf16(float a)
{
    float v = ((float)(next_u32() & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * a;
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

static void write_model(const char *dir)
{
    REQUIRE_INT_EQ(write_hf_config(dir, false, HIDDEN, INTER, LAYERS, HEADS, KV, VOCAB), 0);
    char p[4096];
    path_in(p, sizeof p, dir, "config.json");
    pgrt_model_config c;
    REQUIRE_INT_EQ(pgrt_model_config_load(p, &c), 0);
    pgrt_weight_spec *s = NULL;
    size_t n = 0;
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    pgrt_st_out *t = calloc(n, sizeof *t);
    uint16_t **data = calloc(n, sizeof *data);
    REQUIRE(t && data);
    for (size_t i = 0; i < n; i++) {
        size_t count = (size_t)s[i].shape[0] * (size_t)(s[i].ndim == 2 ? s[i].shape[1] : 1);
        data[i] = malloc(count * 2);
        REQUIRE(data[i] != NULL);
        bool norm = s[i].ndim == 1 && strstr(s[i].name, "norm") != NULL;
        for (size_t j = 0; j < count; j++)
            data[i][j] = norm ? 0x3f80 /* 1.0 */ : rand_bf16(0.05f);
        t[i] = (pgrt_st_out){.name = s[i].name, .dtype = PGRT_ST_BF16, .ndim = s[i].ndim,
                             .shape = {s[i].shape[0], s[i].shape[1]}, .data = data[i]};
    }
    path_in(p, sizeof p, dir, "model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(p, t, n, NULL, NULL, 0), 0);
    for (size_t i = 0; i < n; i++)
        free(data[i]);
    free(data);
    free(t);
    free(s);
}

/* Rows of a small repeating grammar, so that the loss has something to
 * learn: enough for every micro-batch and validation batch of STEPS steps. */
static void write_tokens(const char *path)
{
    size_t n = (size_t)(STEPS * 2 + STEPS / 10 + 2) * 4 * 512;
    int32_t *ids = malloc(n * sizeof *ids);
    REQUIRE(ids != NULL);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i % 7 == 0 ? next_u32() % VOCAB : (i * 31 + 5) % VOCAB);
    REQUIRE_INT_EQ(write_bytes(path, ids, n * sizeof *ids), 0);
    free(ids);
}

static void check_output(const char *log)
{
    FILE *f = fopen(log, "r");
    REQUIRE(f != NULL);
    if (!f)
        return;
    char line[512];
    int steps = 0, evals = 0;
    double first = 0, last = 0;
    while (fgets(line, sizeof line, f)) {
        int step;
        double loss;
        if (sscanf(line, "step %d: loss %lf", &step, &loss) == 2) {
            REQUIRE(isfinite(loss) && loss > 0);
            REQUIRE_INT_EQ(step, steps + 1);
            if (steps == 0)
                first = loss;
            last = loss;
            steps++;
        } else if (sscanf(line, "  validation loss %lf", &loss) == 1) {
            REQUIRE(isfinite(loss) && loss > 0);
            evals++;
        }
    }
    fclose(f);
    REQUIRE_INT_EQ(steps, STEPS);
    REQUIRE_INT_EQ(evals, STEPS / 10);
    printf("lm_loop: %d steps, loss %.4f -> %.4f, %d validation losses\n", steps, first, last,
           evals);
    REQUIRE(last < first); /* the grammar is learnable in 20 steps */
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: example_lm_loop PATH_OF_LM_LOOP\n");
        return 2;
    }
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (pgrt_err_unavailable(rc)) {
        printf("SKIP: no GPU: %s\n", pgrt_last_message());
        return 77;
    }
    REQUIRE_INT_EQ(rc, 0);
    pgrt_ctx_destroy(&ctx);

    char dir[4096], model[4096], tokens[4096], out[4096], log[4096], cmd[5 * 4096 + 256];
    scratch_dir(dir, sizeof dir);
    path_in(model, sizeof model, dir, "model");
    path_in(tokens, sizeof tokens, dir, "tokens.bin");
    path_in(out, sizeof out, dir, "out");
    path_in(log, sizeof log, dir, "log.txt");
    REQUIRE(mkdir(model, 0777) == 0);
    write_model(model);
    write_tokens(tokens);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' %d > '%s' 2>&1", argv[1], model, tokens, out,
             STEPS, log);
    rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "lm_loop exited with %d; its output:\n", rc);
        snprintf(cmd, sizeof cmd, "cat '%s' >&2", log);
        (void)system(cmd);
    }
    REQUIRE_INT_EQ(rc, 0);
    check_output(log);

    /* what it saved reads back against the model */
    char p[4096];
    path_in(p, sizeof p, model, "config.json");
    pgrt_model_config c;
    REQUIRE_INT_EQ(pgrt_model_config_load(p, &c), 0);
    pgrt_adapter *a = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_load(out, &c, &a), 0);
    if (a)
        REQUIRE_INT_EQ(a->cfg.r, 16);
    pgrt_adapter_destroy(&a);
    pgrt_st_file *st = NULL;
    path_in(p, sizeof p, out, "optimizer.safetensors");
    REQUIRE_INT_EQ(pgrt_st_open(p, &st), 0);
    REQUIRE(pgrt_st_count(st) > 0);
    pgrt_st_close(&st);
    remove_tree(dir);
    TEST_DONE();
}
