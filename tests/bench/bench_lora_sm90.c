/* SPDX-License-Identifier: MIT */
/*
 * The LoRA products of a Qwen2-1.5B step as pgrt_lm runs them on sm_90a
 * (LoRA inside the base GEMMs, lm_linear.c), T = 4 x 512 = 2048 tokens,
 * r 16 on all seven modules: the forward's xa = x·(sA)ᵀ a group (q, k, v:
 * 48 wide; o: 16; gate, up: 32; down: 16), and the backward's dxa =
 * dy·(sB) (bf16, at the group's pitch), dB = dyᵀ·xa (f32) a pair and dA =
 * dxaᵀ·x (f32) a group. Each product is timed as the model's choice
 * (lm_linear.c's rule: gemm_sm90 where an operand is pitched or the group
 * is 32 to 64 columns wide over an input of at most 4096, else
 * PGRT_GEMM_CHOSEN) and on
 * gemm_sm90 at each split 1 to 16 (spec.split): the median of 5 batches
 * of 50 launches between events, in microseconds a launch. The last
 * columns say which was fastest and what the model's choice costs against
 * it, a step (28 layers). Data are random: timings only
 * (test_gemm_plan_gpu checks the numbers).
 *
 * Usage: bench_lora_sm90; exit 77 without a compute capability 9.0 device.
 */
#include "kernels/gemm_util.h"

#include <string.h>

#define T_ 2048u
#define LAYERS 28
#define REPS 50
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct prod {
    const char *name;
    pgk_gemm_layout layout;
    uint32_t n, k;         /* the layer's (m = T) */
    uint32_t ldb, ldc;     /* pitches: 0 dense */
    pg_type out;
    unsigned a, b;         /* operand slots (below) */
    int per_layer;         /* launches a layer */
} prod;

/* operand slots: x [T, 8960] bf16, weights [8960, 64] / [64, 8960] bf16,
 * xa / dxa [T, 64] bf16 */
enum { X, W, XA };

static const prod prods[] = {
    {"xa q,k,v", PGK_GEMM_FORWARD, 48, 1536, 0, 0, PG_BF16, X, W, 1},
    {"xa o", PGK_GEMM_FORWARD, 16, 1536, 0, 0, PG_BF16, X, W, 1},
    {"xa gate,up", PGK_GEMM_FORWARD, 32, 1536, 0, 0, PG_BF16, X, W, 1},
    {"xa down", PGK_GEMM_FORWARD, 16, 8960, 0, 0, PG_BF16, X, W, 1},
    {"dxa q,o,down", PGK_GEMM_BACKWARD_X, 1536, 16, 0, 48, PG_BF16, X, W, 3},
    {"dxa k,v", PGK_GEMM_BACKWARD_X, 256, 16, 0, 48, PG_BF16, X, W, 2},
    {"dxa gate,up", PGK_GEMM_BACKWARD_X, 8960, 16, 0, 32, PG_BF16, X, W, 2},
    {"dB q,o,down", PGK_GEMM_BACKWARD_W, 1536, 16, 48, 0, PG_F32, X, XA, 3},
    {"dB k,v", PGK_GEMM_BACKWARD_W, 256, 16, 48, 0, PG_F32, X, XA, 2},
    {"dB gate,up", PGK_GEMM_BACKWARD_W, 8960, 16, 32, 0, PG_F32, X, XA, 2},
    {"dA q,k,v", PGK_GEMM_BACKWARD_W, 48, 1536, 0, 0, PG_F32, XA, X, 1},
    {"dA o", PGK_GEMM_BACKWARD_W, 16, 1536, 0, 0, PG_F32, XA, X, 1},
    {"dA gate,up", PGK_GEMM_BACKWARD_W, 32, 1536, 0, 0, PG_F32, XA, X, 1},
    {"dA down", PGK_GEMM_BACKWARD_W, 16, 8960, 0, 0, PG_F32, XA, X, 1},
};

static pgrt_buf *random_bf16(pgrt_ctx *ctx, size_t n, rng *r)
{
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(rng_unit(r) - 0.5f);
    pgrt_buf *b;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_BF16, n, &b));
    GPU_CHECK(pgrt_buf_upload(b, 0, h, n));
    free(h);
    return b;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Microseconds a launch (median of 5 batches), or -1 where the plan is
 * refused. */
static double time_plan(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_gemm_spec *sp,
                        pgrt_devptr c, pgrt_buf *ws, pgrt_event *e0, pgrt_event *e1,
                        char *what, size_t wn)
{
    pgrt_gemm_plan *p;
    if (pgrt_gemm_plan_create(ctx, sp, &p))
        return -1;
    const pgk_gemm_choice *ch = pgrt_gemm_plan_choice(p);
    uint64_t wsb = pgrt_gemm_plan_workspace(p);
    if (what)
        snprintf(what, wn, "%s s%u", strcmp(ch->desc->name, "gemm_sm90") ? ch->desc->name : "sm90",
                 ch->split);
    if (wsb > pgrt_buf_bytes(ws)) {
        pgrt_gemm_plan_destroy(&p);
        return -1;
    }
    pgrt_devptr w = wsb ? pgrt_buf_ptr(ws) : 0;
    for (int i = 0; i < 5; i++)
        GPU_CHECK(pgrt_gemm_plan_launch(p, s, c, 0, w));
    float t[5];
    for (int b = 0; b < 5; b++) {
        GPU_CHECK(pgrt_event_record(e0, s));
        for (int i = 0; i < REPS; i++)
            GPU_CHECK(pgrt_gemm_plan_launch(p, s, c, 0, w));
        GPU_CHECK(pgrt_event_record(e1, s));
        GPU_CHECK(pgrt_event_sync(e1));
        GPU_CHECK(pgrt_event_elapsed_ms(e0, e1, &t[b]));
    }
    pgrt_gemm_plan_destroy(&p);
    qsort(t, 5, sizeof t[0], cmp_f);
    return 1e3 * t[2] / REPS;
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    gpu_require_sm90a(&ctx, "bench_lora_sm90", "gemm_sm90");
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    rng r = {7};
    pgrt_buf *ops[3] = {random_bf16(ctx, (size_t)T_ * 8960, &r), random_bf16(ctx, 8960u * 64, &r),
                        random_bf16(ctx, (size_t)T_ * 64, &r)};
    pgrt_buf *out, *ws;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, (size_t)T_ * 8960, &out));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_U8, 64u << 20, &ws));
    pgrt_stream *s;
    pgrt_event *e0, *e1;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    GPU_CHECK(pgrt_event_create(ctx, &e0));
    GPU_CHECK(pgrt_event_create(ctx, &e1));
    static const uint32_t splits[] = {1, 2, 3, 4, 6, 8, 12, 16};
    printf("LoRA products of a Qwen2-1.5B step on %s (%d SMs), T = %u, r 16: us a launch\n",
           info.name, info.sm_count, T_);
    printf("%-13s %-15s %7s |", "product", "model's choice", "us");
    for (size_t j = 0; j < COUNT(splits); j++)
        printf(" s%-5u", splits[j]);
    printf("| best         saves a step\n");
    double total = 0, total_best = 0;
    for (size_t i = 0; i < COUNT(prods); i++) {
        const prod *pd = &prods[i];
        /* lm_linear.c's lora_wg: gemm_sm90 where pitched, and for 32 to
         * 64 rank columns over an input of at most 4096 */
        bool wide = pd->n >= 32 && pd->n <= 64 && pd->k <= 4096;
        pgrt_gemm_spec sp = {.layout = pd->layout,
                             .kind = pd->ldb || pd->ldc || wide ? PGRT_GEMM_WGMMA
                                                                : PGRT_GEMM_CHOSEN,
                             .in_type = PG_BF16, .out_type = pd->out, .m = T_, .n = pd->n,
                             .k = pd->k, .a = pgrt_buf_ptr(ops[pd->a]),
                             .b = pgrt_buf_ptr(ops[pd->b]), .ldb = pd->ldb, .ldc = pd->ldc};
        char what[48] = "", bw[24] = "";
        double t0 = time_plan(ctx, s, &sp, pgrt_buf_ptr(out), ws, e0, e1, what, sizeof what);
        printf("%-13s %-15s %7.1f |", pd->name, what, t0);
        double best = t0;
        snprintf(bw, sizeof bw, "choice");
        sp.kind = PGRT_GEMM_WGMMA;
        for (size_t j = 0; j < COUNT(splits); j++) {
            sp.split = splits[j];
            double t = time_plan(ctx, s, &sp, pgrt_buf_ptr(out), ws, e0, e1, NULL, 0);
            printf(" %6.1f", t);
            if (t > 0 && t < best) {
                best = t;
                snprintf(bw, sizeof bw, "sm90 s%u", splits[j]);
            }
        }
        double step = (t0 - best) * pd->per_layer * LAYERS / 1e3;
        printf("| %-12s %.2f ms\n", bw, step);
        total += t0 * pd->per_layer * LAYERS / 1e3;
        total_best += best * pd->per_layer * LAYERS / 1e3;
    }
    printf("a step: %.2f ms as chosen, %.2f ms at the best of each\n", total, total_best);
    for (int i = 0; i < 3; i++)
        pgrt_buf_destroy(&ops[i]);
    pgrt_buf_destroy(&out);
    pgrt_buf_destroy(&ws);
    pgrt_event_destroy(&e0);
    pgrt_event_destroy(&e1);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    return 0;
}
