/* SPDX-License-Identifier: MIT */
/*
 * The LoRA products of a Qwen2-1.5B training step (28 layers, T = 4 x 512
 * = 2048 tokens, r 16 on q, k, v, o, gate, up and down) as pgrt_lm
 * launches them: lora_proj, lora_grad and lora_up with the pairs of one
 * input stacked (q, k, v; gate, up), bf16 x and dy as in bf16 mode and
 * f32 as in f32 mode; the forward's y = xa B^T and o's and down's
 * dx = dxa A written, not added (pgrt_lm's base GEMM adds into them: that
 * read is the GEMM's, not counted here).
 *
 * Each sequence is timed eagerly (host clock around the launches and a
 * sync) and as one replayed CUDA graph (events), in microseconds a step;
 * the bf16 one also phase by phase (graphs of one phase of all 28 layers).
 * Data are random: timings only, test_lora checks the numbers.
 *
 * Usage: bench_lora [--seed N]; exit 77 without a GPU.
 */
#define REL_TOL 1e-5

#include "kernels/model_check.h"

#include <time.h>

#define LAYERS 28
#define T_ 2048u
#define R_ 16u

#define P(b) pgrt_arg_buf(b)
#define D(p) pgrt_arg_ptr(p)
#define U(x) pgrt_arg_u32((uint32_t)(x))
#define F(x) pgrt_arg_f32((float)(x))

/* in, out, the module's group and its place in it (lm.c's lora_d) */
static const struct {
    uint32_t in, out, part, parts;
} mods[7] = {
    {1536, 1536, 0, 3}, {1536, 256, 1, 3},  {1536, 256, 2, 3}, {1536, 1536, 0, 1},
    {1536, 8960, 0, 2}, {1536, 8960, 1, 2}, {8960, 1536, 0, 1},
};
/* backward_layer's order: down; gate, up; o; q, k, v */
static const int bwd_order[7] = {6, 4, 5, 3, 0, 1, 2};

static pgrt_stream *bs;
static uint32_t sms;
static pgrt_buf *x, *xb, *y, *dy, *dyb, *dx, *A, *B, *xa, *dxa, *g, *ws, *cnt;
static size_t launches;

static void go(const char *kernel, pgk_knobs kn, const pgrt_arg *a, size_t n)
{
    int rc = pgrt_launch(check_ctx, bs, kernel, &kn, a, n);
    if (rc)
        die_rt(kernel, rc);
    launches++;
}

/* ---------------------------------------------------------------- a layer */

enum { PH_FWD_PROJ = 1, PH_FWD_UP = 2, PH_DB = 4, PH_DXA = 8, PH_DA = 16, PH_DX = 32, PH_ALL = 63 };
static const char *const phase_names[6] = {"fwd xa = s x A^T (proj)", "fwd y = xa B^T (up)",
                                           "bwd dB = dy^T xa (grad)", "bwd dxa = s dy B (proj wt)",
                                           "bwd dA = dxa^T x (grad)", "bwd dx (+)= dxa A (up)"};

/* pgrt_lm's slices (lm.c lora_splits) */
static uint32_t lora_splits(uint32_t tiles, uint32_t len)
{
    uint32_t sp = (2u * sms + tiles - 1) / tiles, most = (len + 63) / 64;
    sp = sp > most ? most : sp;
    sp = sp > 64 ? 64 : sp;
    return sp ? sp : 1;
}

static void proj(bool bf, pgrt_devptr xp, pgrt_devptr w, pgrt_devptr out, uint32_t k,
                 uint32_t parts, uint32_t wt)
{
    const char *kname = bf ? "lora_proj_bf16" : "lora_proj_f32";
    uint32_t sp = lora_splits((T_ + 63) / 64, k);
    go(kname,
       knobs_of(kname, "rows", T_, "k", k, "cols", R_ * parts, "rank", R_, "wt", wt, "vec", 1,
                "split", sp, NULL),
       (pgrt_arg[]){D(xp), D(w), D(out), P(ws), P(cnt), U(T_), U(k), U(sp), F(2.0f)}, 9);
}

static void grad(bool bf, pgrt_devptr d, pgrt_devptr xap, pgrt_devptr out, uint32_t n,
                 uint32_t parts, uint32_t trans)
{
    const char *kname = bf ? "lora_grad_bf16" : "lora_grad_f32";
    uint32_t sp = lora_splits((n + 63) / 64, T_);
    go(kname,
       knobs_of(kname, "rows", T_, "n", n, "cols", R_ * parts, "rank", R_, "trans", trans,
                "vec", 1, "split", sp, NULL),
       (pgrt_arg[]){D(d), D(xap), D(out), P(ws), P(cnt), U(T_), U(n), U(sp), F(1.0f)}, 9);
}

static void up(pgrt_devptr xap, pgrt_devptr w, pgrt_devptr out, uint32_t n, uint32_t wt,
               uint32_t parts, uint32_t acc)
{
    go("lora_up_f32",
       knobs_of("lora_up_f32", "rows", T_, "n", n, "rank", R_ * parts, "wt", wt, "acc", acc,
                "part", parts > 1 ? R_ : 0, NULL),
       (pgrt_arg[]){D(xap), D(w), D(out), U(T_), U(n), F(1.0f)}, 6);
}

static void layer(bool bf, unsigned ph)
{
    pgrt_devptr px = pgrt_buf_ptr(bf ? xb : x), pdy = pgrt_buf_ptr(bf ? dyb : dy);
    uint64_t part = (uint64_t)T_ * R_ * 4u;
    for (int m = 0; m < 7; m++) {
        if ((ph & PH_FWD_PROJ) && mods[m].part == 0)
            proj(bf, px, pgrt_buf_ptr(A), pgrt_buf_ptr(xa), mods[m].in, mods[m].parts, 0);
        if (ph & PH_FWD_UP)
            up(pgrt_buf_ptr(xa) + mods[m].part * part, pgrt_buf_ptr(B), pgrt_buf_ptr(y),
               mods[m].out, 0, 1, 0);
    }
    for (int i = 0; i < 7; i++) {
        int m = bwd_order[i];
        pgrt_devptr xap = pgrt_buf_ptr(xa) + mods[m].part * part;
        pgrt_devptr dxap = pgrt_buf_ptr(dxa) + mods[m].part * part;
        if (ph & PH_DB)
            grad(bf, pdy, xap, pgrt_buf_ptr(g), mods[m].out, 1, 0);
        if (ph & PH_DXA)
            proj(bf, pdy, pgrt_buf_ptr(B), dxap, mods[m].out, 1, 1);
        if (mods[m].part + 1 < mods[m].parts)
            continue;
        /* dA reads the f32 x in both modes, as pgrt_lm does */
        if (ph & PH_DA)
            grad(false, pgrt_buf_ptr(x), pgrt_buf_ptr(dxa), pgrt_buf_ptr(g), mods[m].in,
                 mods[m].parts, 1);
        if (ph & PH_DX)
            up(pgrt_buf_ptr(dxa), pgrt_buf_ptr(A), pgrt_buf_ptr(dx), mods[m].in, 1,
               mods[m].parts, mods[m].parts > 1);
    }
}

/* ---------------------------------------------------------------- timing */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct seq {
    bool bf16; /* x and dy bf16, else f32 */
    unsigned phases;
} seq;

static void run_seq(seq q)
{
    for (int l = 0; l < LAYERS; l++)
        layer(q.bf16, q.phases);
}

/* us a step: eager (*eager, host clock) and graphed (returned, events). */
static double time_seq(seq q, double *eager, size_t *nl)
{
    run_seq(q); /* loads every module before the capture */
    GPU_CHECK(pgrt_stream_sync(bs));
    const int reps = 5;
    launches = 0;
    double t0 = now_ms();
    for (int i = 0; i < reps; i++)
        run_seq(q);
    GPU_CHECK(pgrt_stream_sync(bs));
    *eager = (now_ms() - t0) * 1e3 / reps;
    *nl = launches / reps;
    pgrt_graph *gr = NULL;
    GPU_CHECK(pgrt_capture_begin(bs));
    run_seq(q);
    GPU_CHECK(pgrt_capture_end(bs, &gr));
    GPU_CHECK(pgrt_graph_launch(gr, bs));
    GPU_CHECK(pgrt_stream_sync(bs));
    pgrt_event *e0 = NULL, *e1 = NULL;
    GPU_CHECK(pgrt_event_create(check_ctx, &e0));
    GPU_CHECK(pgrt_event_create(check_ctx, &e1));
    GPU_CHECK(pgrt_event_record(e0, bs));
    for (int i = 0; i < reps; i++)
        GPU_CHECK(pgrt_graph_launch(gr, bs));
    GPU_CHECK(pgrt_event_record(e1, bs));
    GPU_CHECK(pgrt_event_sync(e1));
    float ms = 0;
    GPU_CHECK(pgrt_event_elapsed_ms(e0, e1, &ms));
    pgrt_event_destroy(&e0);
    pgrt_event_destroy(&e1);
    pgrt_graph_destroy(&gr);
    return ms * 1e3 / reps;
}

int main(int argc, char **argv)
{
    check_start(argc, argv, "bench_lora");
    pgrt_device_info info;
    GPU_CHECK(pgrt_ctx_device_info(check_ctx, &info));
    sms = info.sm_count > 0 ? (uint32_t)info.sm_count : 108;
    GPU_CHECK(pgrt_stream_create(check_ctx, &bs));
    size_t big = (size_t)T_ * 8960, w = (size_t)64 * 8960;
    float *h = fill_normal(big, 1.0, 0.0);
    x = dev_upload(h, big), y = dev_upload(h, big);
    dy = dev_upload(h, big), dx = dev_upload(h, big);
    xb = act_upload(h, big, true), dyb = act_upload(h, big, true);
    A = dev_upload(h, w), B = dev_upload(h, w), g = dev_alloc(PG_F32, w);
    xa = dev_upload(h, (size_t)3 * T_ * R_), dxa = dev_upload(h, (size_t)3 * T_ * R_);
    ws = dev_alloc(PG_F32, (size_t)64 * 8960 * 64);
    cnt = dev_alloc(PG_U32, 1024);
    GPU_CHECK(pgrt_buf_memset(cnt, 0));

    printf("bench_lora: LoRA products of %d Qwen2-1.5B layers (T %u, r %u; q k v o gate up down), "
           "%s, %u SMs\n",
           LAYERS, T_, R_, info.name, sms);
    printf("%-44s %12s %12s %9s\n", "sequence", "eager us", "graph us", "launches");
    static const char *const names[2] = {"proj/grad/up, stacked, f32",
                                         "proj/grad/up, stacked, bf16 x dy"};
    double graph[2];
    for (int bf = 0; bf < 2; bf++) {
        double eager;
        size_t nl;
        graph[bf] = time_seq((seq){bf == 1, PH_ALL}, &eager, &nl);
        printf("%-44s %12.0f %12.0f %9zu\n", names[bf], eager, graph[bf], nl);
    }
    printf("speed-up (graph, f32 / bf16): %.2fx\n", graph[0] / graph[1]);
    printf("bf16 by phase (graph of one phase, all layers):\n");
    for (int i = 0; i < 6; i++) {
        double eager;
        size_t nl;
        double us = time_seq((seq){true, 1u << i}, &eager, &nl);
        printf("  %-42s %12.0f us %9zu launches\n", phase_names[i], us, nl);
    }
    pgrt_buf *bufs[] = {x, xb, y, dy, dyb, dx, A, B, xa, dxa, g, ws, cnt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    pgrt_stream_destroy(&bs);
    free(h);
    return 0;
}
