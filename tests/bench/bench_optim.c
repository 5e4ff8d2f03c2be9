/* SPDX-License-Identifier: MIT */
/*
 * Optimizer step timings (pgrt_train with an empty backward), CUDA events,
 * medians of many steps:
 *
 *  - device-to-device copy bandwidth (1 GiB, read + write counted), the
 *    unit of the floors;
 *  - the 350M-parameter model (216 tensors): the folded step (norm pass 4
 *    bytes a parameter, update pass 28) against the folded floor of 32
 *    bytes a parameter at copy bandwidth, per-layer and global norm, eager
 *    and graphed, with and without a bf16 copy, a step with nothing to clip,
 *    and the per-tensor fallback;
 *  - a LoRA fine-tune's adapters (Qwen2-1.5B shapes, rank 16 on the seven
 *    projections of 28 layers: 18.46M parameters in 196 tensors), eager
 *    and graphed.
 *
 * Rows are printed as a table and, with --json FILE, written as JSON
 * lines. A figure, not a test: it fails only when something does not run.
 * --quick: fewer repetitions.
 */
#include "gpu_util.h"
#include "ptxgen/pgrt_train.h"

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

static int noop_backward(void *user, pgrt_stream *s, size_t layer, uint32_t seq)
{
    (void)user, (void)s, (void)layer, (void)seq;
    return 0;
}

typedef struct bench {
    pgrt_ctx *ctx;
    pgrt_stream *s;
    pgrt_event *a, *b;
    int reps;
    float *v;
    double bw;
    FILE *json;
} bench;

static void row(bench *B, const char *what, float med, double floor_ms)
{
    if (floor_ms > 0)
        printf("| %-52s | %9.3f | %9.3f | %6.1f%% |\n", what, (double)med, floor_ms,
               100.0 * floor_ms / (double)med);
    else
        printf("| %-52s | %9.3f | %9s | %7s |\n", what, (double)med, "", "");
    if (B->json)
        fprintf(B->json, "{\"case\": \"%s\", \"median_ms\": %.4f, \"floor_ms\": %.4f}\n", what,
                (double)med, floor_ms);
}

/* A model's tensors: parameters, gradients, optional bf16 copies, each a
 * separate allocation (16-byte aligned, as a framework's are). */
typedef struct model {
    size_t n, per, total;
    pgrt_buf **p, **g, **c;
    pgrt_train_tensor *tens;
} model;

static void model_init(bench *B, model *m, const size_t *sizes, size_t n, size_t per, rng *r)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->per = per;
    m->p = calloc(n, sizeof *m->p);
    m->g = calloc(n, sizeof *m->g);
    m->c = calloc(n, sizeof *m->c);
    m->tens = calloc(n, sizeof *m->tens);
    size_t most = 0;
    for (size_t i = 0; i < n; i++)
        most = sizes[i] > most ? sizes[i] : most;
    float *h = malloc(most * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        m->total += sizes[i];
        GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_F32, sizes[i], &m->p[i]));
        GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_F32, sizes[i], &m->g[i]));
        GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_BF16, sizes[i], &m->c[i]));
        fill_grads(r, h, sizes[i], 1.0f);
        GPU_CHECK(pgrt_buf_upload(m->p[i], 0, h, sizes[i]));
        fill_grads(r, h, sizes[i], 1e-3f);
        GPU_CHECK(pgrt_buf_upload(m->g[i], 0, h, sizes[i]));
        m->tens[i] = (pgrt_train_tensor){m->p[i], m->g[i], NULL};
    }
    free(h);
}

static void model_free(model *m)
{
    for (size_t i = 0; i < m->n; i++) {
        pgrt_buf_destroy(&m->p[i]);
        pgrt_buf_destroy(&m->g[i]);
        pgrt_buf_destroy(&m->c[i]);
    }
    free(m->p);
    free(m->g);
    free(m->c);
    free(m->tens);
}

/* Median ms of a step of a pipeline over m; graphed steps replay one
 * captured graph (the first, capturing step is not timed). */
static float time_steps(bench *B, model *m, pgrt_train_norm norm, float max_norm,
                        pgrt_train_graph graph, pgrt_train_optimizer opt, bool copies,
                        size_t *launches)
{
    for (size_t i = 0; i < m->n; i++)
        m->tens[i].copy = copies ? m->c[i] : NULL;
    pgrt_train_params p = {
        .layers = m->n / m->per,
        .tensors_per_layer = m->per,
        .tensors = m->tens,
        .max_norm = max_norm,
        .lr = 1e-5f, /* small: many steps keep the parameters near their start */
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.01f,
        .graph = graph,
        .layer_backward = noop_backward,
        .norm = norm,
        .optimizer = opt,
    };
    pgrt_train *t = NULL;
    GPU_CHECK(pgrt_train_create(B->ctx, &p, &t));
    for (int i = 0; i < 3; i++)
        GPU_CHECK(pgrt_train_backward(t, B->s, 1));
    for (int i = 0; i < B->reps; i++) {
        GPU_CHECK(pgrt_event_record(B->a, B->s));
        GPU_CHECK(pgrt_train_backward(t, B->s, 1));
        GPU_CHECK(pgrt_event_record(B->b, B->s));
        GPU_CHECK(pgrt_event_sync(B->b));
        GPU_CHECK(pgrt_event_elapsed_ms(B->a, B->b, &B->v[i]));
    }
    pgrt_train_stats st;
    GPU_CHECK(pgrt_train_stats_get(t, &st));
    if (launches)
        *launches = st.launches_per_step;
    if (pgrt_train_folded(t)) {
        uint32_t skipped = 0;
        GPU_CHECK(pgrt_train_skipped(t, B->s, &skipped, NULL));
        if (skipped)
            fprintf(stderr, "bench_optim: %u steps skipped\n", skipped);
    }
    pgrt_train_destroy(&t);
    return median(B->v, B->reps);
}

static float time_launch(bench *B, const char *name, const pgk_knobs *kn, const pgrt_arg *a,
                         size_t na)
{
    for (int i = 0; i < 2; i++)
        GPU_CHECK(pgrt_launch(B->ctx, B->s, name, kn, a, na));
    for (int i = 0; i < B->reps; i++) {
        GPU_CHECK(pgrt_event_record(B->a, B->s));
        GPU_CHECK(pgrt_launch(B->ctx, B->s, name, kn, a, na));
        GPU_CHECK(pgrt_event_record(B->b, B->s));
        GPU_CHECK(pgrt_event_sync(B->b));
        GPU_CHECK(pgrt_event_elapsed_ms(B->a, B->b, &B->v[i]));
    }
    return median(B->v, B->reps);
}

static pgk_knobs table_knobs(const char *name, uint32_t blocks, uint32_t nbufs)
{
    const pgk_desc *d = pgk_find(name);
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, "total_blocks")] = blocks;
    kn.v[pgk_knob_index(d, "nbufs")] = nbufs;
    return kn;
}

/* Each of the three kernels alone, on a table of m's tensors (global
 * norm): where the step's time goes. */
static void breakdown(bench *B, model *m, const char *tag)
{
    pgk_optim_entry *e = calloc(m->n, sizeof *e);
    pgrt_buf **mv = calloc(2 * m->n, sizeof *mv);
    uint32_t nb = 0, ub = 0;
    for (size_t i = 0; i < m->n; i++) {
        uint32_t n = (uint32_t)pgrt_buf_count(m->p[i]);
        GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_F32, n, &mv[2 * i]));
        GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_F32, n, &mv[2 * i + 1]));
        GPU_CHECK(pgrt_buf_memset(mv[2 * i], 0));
        GPU_CHECK(pgrt_buf_memset(mv[2 * i + 1], 0));
        e[i] = (pgk_optim_entry){.grad = {pgrt_buf_ptr(m->g[i]), n, nb},
                                 .param = pgrt_buf_ptr(m->p[i]),
                                 .m = pgrt_buf_ptr(mv[2 * i]),
                                 .v = pgrt_buf_ptr(mv[2 * i + 1]),
                                 .first_block = ub};
        nb += pgk_adamw_norm_blocks(n);
        ub += pgk_adamw_multi_blocks(n);
    }
    size_t words = m->n * sizeof *e / 4;
    pgrt_buf *table = NULL, *partials = NULL, *groups = NULL, *state = NULL, *hyper = NULL;
    GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_U32, words, &table));
    GPU_CHECK(pgrt_buf_upload(table, 0, e, words));
    GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_F32, nb, &partials));
    uint32_t g[2] = {0, nb};
    GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_U32, 2, &groups));
    GPU_CHECK(pgrt_buf_upload(groups, 0, g, 2));
    uint32_t st[4] = {0, 0, f32_bits(1.0f), 0};
    GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_U32, 4, &state));
    GPU_CHECK(pgrt_buf_upload(state, 0, st, 4));
    float h[PGK_HYPER_COUNT] = {1e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1, 1, 1, 0};
    GPU_CHECK(pgrt_buf_alloc(B->ctx, PG_F32, PGK_HYPER_COUNT, &hyper));
    GPU_CHECK(pgrt_buf_upload(hyper, 0, h, PGK_HYPER_COUNT));
    uint32_t nt = (uint32_t)m->n;
    char label[128];
    pgk_knobs kn = table_knobs("adamw_multi_norm", nb, nt);
    pgrt_arg an[3] = {pgrt_arg_buf(table), pgrt_arg_u32(nt), pgrt_arg_buf(partials)};
    snprintf(label, sizeof label, "%s: adamw_multi_norm alone (%u blocks)", tag, nb);
    row(B, label, time_launch(B, "adamw_multi_norm", &kn, an, 3),
        4.0 * (double)m->total / B->bw * 1e3);
    pgrt_arg af[7] = {pgrt_arg_buf(partials), pgrt_arg_buf(groups), pgrt_arg_u32(1),
                      pgrt_arg_f32(1.0f),     pgrt_arg_f32(1e-6f),  pgrt_arg_buf(state),
                      pgrt_arg_buf(hyper)};
    snprintf(label, sizeof label, "%s: adamw_multi_finalize alone (%u partials)", tag, nb);
    row(B, label, time_launch(B, "adamw_multi_finalize", NULL, af, 7), 0);
    kn = table_knobs("adamw_multi_step", ub, nt);
    pgrt_arg au[4] = {pgrt_arg_buf(table), pgrt_arg_u32(nt), pgrt_arg_buf(state),
                      pgrt_arg_buf(hyper)};
    snprintf(label, sizeof label, "%s: adamw_multi_step alone (%u blocks)", tag, ub);
    row(B, label, time_launch(B, "adamw_multi_step", &kn, au, 4),
        28.0 * (double)m->total / B->bw * 1e3);
    for (size_t i = 0; i < 2 * m->n; i++)
        pgrt_buf_destroy(&mv[i]);
    pgrt_buf *bufs[] = {table, partials, groups, state, hyper};
    for (size_t i = 0; i < 5; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(mv);
    free(e);
}

/* Qwen2-1.5B LoRA adapters, rank 16, A and B of a projection in one
 * tensor: q and o 16 x (1536 + 1536), k and v 16 x (1536 + 256), gate, up
 * and down 16 x (1536 + 8960). */
#define LORA_LAYERS 28
#define LORA_PER 7
static void lora_sizes_of(size_t *s)
{
    for (int l = 0; l < LORA_LAYERS; l++) {
        size_t *x = s + LORA_PER * l;
        x[0] = x[3] = 16 * (1536 + 1536);
        x[1] = x[2] = 16 * (1536 + 256);
        x[4] = x[5] = x[6] = 16 * (1536 + 8960);
    }
}

int main(int argc, char **argv)
{
    bench B = {0};
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            B.json = fopen(argv[++i], "w");
    }
    B.reps = quick ? 7 : 41;
    B.ctx = gpu_open();
    pgrt_device_info info;
    pgrt_ctx_device_info(B.ctx, &info);
    GPU_CHECK(pgrt_stream_create(B.ctx, &B.s));
    GPU_CHECK(pgrt_event_create(B.ctx, &B.a));
    GPU_CHECK(pgrt_event_create(B.ctx, &B.b));
    B.v = malloc((size_t)B.reps * sizeof *B.v);

    size_t cn = (size_t)1 << 28;
    pgrt_buf *src = NULL, *dst = NULL;
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, cn, &src));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_F32, cn, &dst));
    GPU_CHECK(pgrt_buf_memset(src, 1));
    for (int i = 0; i < 3; i++)
        GPU_CHECK(pgrt_buf_copy_async(dst, 0, src, 0, cn, B.s));
    for (int i = 0; i < B.reps; i++) {
        GPU_CHECK(pgrt_event_record(B.a, B.s));
        GPU_CHECK(pgrt_buf_copy_async(dst, 0, src, 0, cn, B.s));
        GPU_CHECK(pgrt_event_record(B.b, B.s));
        GPU_CHECK(pgrt_event_sync(B.b));
        GPU_CHECK(pgrt_event_elapsed_ms(B.a, B.b, &B.v[i]));
    }
    float copy_ms = median(B.v, B.reps);
    B.bw = 2.0 * (double)(cn * 4) / ((double)copy_ms * 1e-3);
    pgrt_buf_destroy(&src);
    pgrt_buf_destroy(&dst);

    printf("\noptimizer step on %s (compute capability %d.%d, driver %d.%d)\n", info.name,
           info.cc_major, info.cc_minor, info.driver_version / 1000,
           (info.driver_version % 1000) / 10);
    printf("device-to-device copy bandwidth: %.1f GB/s (1 GiB copy, median %.3f ms, read + write "
           "counted)\n\n", B.bw / 1e9, (double)copy_ms);
    printf("| %-52s | %9s | %9s | %7s |\n", "case", "median ms", "floor ms", "floor");
    printf("|------------------------------------------------------|-----------|-----------|"
           "---------|\n");
    if (B.json)
        fprintf(B.json, "{\"device\": \"%s\", \"copy_gbps\": %.1f}\n", info.name, B.bw / 1e9);

    rng r = {12345};
    size_t sizes[M350_NBUF];
    m350_sizes(sizes);
    model m;
    model_init(&B, &m, sizes, M350_NBUF, 9, &r);
    double f32 = 32.0 * (double)m.total / B.bw * 1e3, f28 = 28.0 * (double)m.total / B.bw * 1e3;
    double f34 = 34.0 * (double)m.total / B.bw * 1e3;
    /* Gradients of scale 1e-3 over 16M-element layers: layer norms near 2,
     * the global norm near 10. */
    char label[128];
    size_t nl = 0;
    float ms = time_steps(&B, &m, PGRT_TRAIN_NORM_GLOBAL, 1.0f, PGRT_TRAIN_GRAPH_OFF,
                          PGRT_TRAIN_OPT_AUTO, false, &nl);
    snprintf(label, sizeof label, "350M global clip + AdamW, eager (%zu launches)", nl);
    row(&B, label, ms, f32);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_GLOBAL, 1.0f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    row(&B, "350M global clip + AdamW, graphed", ms, f32);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_LAYER, 1.0f, PGRT_TRAIN_GRAPH_OFF, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    row(&B, "350M per-layer clip + AdamW, eager", ms, f32);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_LAYER, 1.0f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    row(&B, "350M per-layer clip + AdamW, graphed", ms, f32);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_GLOBAL, 1e30f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    row(&B, "350M global, nothing to clip, graphed", ms, f32);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_GLOBAL, 1.0f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    true, NULL);
    row(&B, "350M global + bf16 copy, graphed (34 B/param)", ms, f34);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_OFF, 0.0f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    row(&B, "350M AdamW, no clip, graphed (28 B/param)", ms, f28);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_LAYER, 1.0f, PGRT_TRAIN_GRAPH_OFF,
                    PGRT_TRAIN_OPT_PER_TENSOR, false, &nl);
    snprintf(label, sizeof label, "350M per-tensor fallback, eager (%zu launches)", nl);
    row(&B, label, ms, f32);
    breakdown(&B, &m, "350M");
    model_free(&m);

    size_t ls[LORA_LAYERS * LORA_PER];
    lora_sizes_of(ls);
    model_init(&B, &m, ls, LORA_LAYERS * LORA_PER, LORA_PER, &r);
    double lf = 32.0 * (double)m.total / B.bw * 1e3;
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_GLOBAL, 1.0f, PGRT_TRAIN_GRAPH_OFF, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    snprintf(label, sizeof label, "LoRA %.2fM in %zu tensors, global, eager", m.total / 1e6, m.n);
    row(&B, label, ms, lf);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_GLOBAL, 1.0f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    snprintf(label, sizeof label, "LoRA %.2fM in %zu tensors, global, graphed", m.total / 1e6, m.n);
    row(&B, label, ms, lf);
    ms = time_steps(&B, &m, PGRT_TRAIN_NORM_LAYER, 1.0f, PGRT_TRAIN_GRAPH_ON, PGRT_TRAIN_OPT_AUTO,
                    false, NULL);
    row(&B, "LoRA, per-layer, graphed", ms, lf);
    breakdown(&B, &m, "LoRA");
    model_free(&m);

    printf("\nfloor = 32 bytes a parameter (norm pass 4, update 28; 34 with a bf16 copy, 28 "
           "without a norm) / copy bandwidth\n");
    if (B.json)
        fclose(B.json);
    free(B.v);
    pgrt_event_destroy(&B.a);
    pgrt_event_destroy(&B.b);
    pgrt_stream_destroy(&B.s);
    pgrt_ctx_destroy(&B.ctx);
    return 0;
}
