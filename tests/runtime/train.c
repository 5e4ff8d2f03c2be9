/* SPDX-License-Identifier: MIT */
/*
 * The backward pipeline (pgrt_train.h) against the fake driver: the launch
 * sequence of an eager step, capture on the first graphed step and replay
 * after, a new capture when the sequence length changes, the fallback to
 * eager (with its logged reason) when a capture fails, the environment
 * switch, the device-side hyper-parameters and parameter checks. Nothing
 * runs on a GPU: the fake records launches, and marks those a graph replays.
 *
 * Usage: test_train FAKE_LIBCUDA
 */
#include "fakecuda.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_train.h"
#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>

static fake_fixture fk;

#define LAYERS 2
#define TENSORS 2
static const size_t sizes[TENSORS] = {300, 40};

typedef struct fixture {
    pgrt_ctx *ctx;
    pgrt_stream *s;
    pgrt_buf *params[LAYERS][TENSORS], *grads[TENSORS], *scratch;
    pgrt_train_tensor tensors[LAYERS * TENSORS];
    int head_calls, layer_calls;
    uint32_t last_seq;
    bool sync_in_layer;     /* synchronise the stream in layer 0's callback */
    bool uncached_in_layer; /* launch a kernel nobody pre-warmed in layer 0's */
    bool fail_layer;        /* layer 1's callback fails outright */
    char log[8][256];
    int nlog;
} fixture;

static void log_line(void *user, const char *line)
{
    fixture *f = user;
    if (f->nlog < 8)
        snprintf(f->log[f->nlog++], sizeof f->log[0], "%s", line);
}

/* Each callback leaves one residual_add whose n names it: 7 for the head,
 * 100 + layer for a layer. */
static int marker(fixture *f, pgrt_stream *s, uint32_t n)
{
    pgk_knobs kn;
    const pgk_desc *d = pgk_find("residual_add");
    pgk_knobs_default(d, &kn);
    kn.v[0] = n;
    pgrt_arg a[4] = {pgrt_arg_buf(f->scratch), pgrt_arg_buf(f->scratch),
                     pgrt_arg_buf(f->scratch), pgrt_arg_u32(n)};
    return pgrt_launch(f->ctx, s, "residual_add", &kn, a, 4);
}

static int head(void *user, pgrt_stream *s, uint32_t seq)
{
    fixture *f = user;
    f->head_calls++;
    f->last_seq = seq;
    return marker(f, s, 7);
}

static int layer(void *user, pgrt_stream *s, size_t l, uint32_t seq)
{
    fixture *f = user;
    f->layer_calls++;
    f->last_seq = seq;
    int rc;
    if (l == 1 && f->fail_layer)
        return PGRT_EARGS;
    if (l == 0 && f->sync_in_layer && (rc = pgrt_stream_sync(s)))
        return rc;
    if (l == 0 && f->uncached_in_layer) {
        pgk_knobs kn;
        pgk_knobs_default(pgk_find("silu_forward"), &kn);
        kn.v[0] = 64;
        pgrt_arg a[3] = {pgrt_arg_buf(f->scratch), pgrt_arg_buf(f->scratch), pgrt_arg_u32(64)};
        if ((rc = pgrt_launch(f->ctx, s, "silu_forward", &kn, a, 3)))
            return rc;
    }
    return marker(f, s, 100 + (uint32_t)l);
}

static void fixture_open(fixture *f)
{
    memset(f, 0, sizeof *f);
    pgrt_ctx_params p = {fk.path, 0};
    int rc = pgrt_ctx_create(&f->ctx, &p);
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    REQUIRE_INT_EQ(pgrt_stream_create(f->ctx, &f->s), 0);
    REQUIRE_INT_EQ(pgrt_buf_alloc(f->ctx, PG_F32, 1024, &f->scratch), 0);
    for (int j = 0; j < TENSORS; j++) {
        REQUIRE_INT_EQ(pgrt_buf_alloc(f->ctx, PG_F32, sizes[j], &f->grads[j]), 0);
        for (int l = 0; l < LAYERS; l++) {
            REQUIRE_INT_EQ(pgrt_buf_alloc(f->ctx, PG_F32, sizes[j], &f->params[l][j]), 0);
            f->tensors[l * TENSORS + j] = (pgrt_train_tensor){f->params[l][j], f->grads[j]};
        }
    }
    /* The callbacks' kernel is pre-warmed, as a training loop would. */
    pgrt_warm w = {"residual_add", NULL};
    REQUIRE_INT_EQ(pgrt_prewarm(f->ctx, &w, 1), 0);
}

static void fixture_close(fixture *f)
{
    for (int j = 0; j < TENSORS; j++) {
        pgrt_buf_destroy(&f->grads[j]);
        for (int l = 0; l < LAYERS; l++)
            pgrt_buf_destroy(&f->params[l][j]);
    }
    pgrt_buf_destroy(&f->scratch);
    pgrt_stream_destroy(&f->s);
    pgrt_ctx_destroy(&f->ctx);
}

static pgrt_train_params params_for(fixture *f, pgrt_train_graph g)
{
    pgrt_train_params p = {
        .layers = LAYERS,
        .tensors_per_layer = TENSORS,
        .tensors = f->tensors,
        .max_norm = 1.0f,
        .lr = 1e-3f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.01f,
        .graph = g,
        .layer_backward = layer,
        .head = head,
        .user = f,
        .log = log_line,
    };
    return p;
}

static pgrt_train *make(fixture *f, pgrt_train_graph g)
{
    pgrt_train_params p = params_for(f, g);
    pgrt_train *t = NULL;
    int rc = pgrt_train_create(f->ctx, &p, &t);
    if (rc)
        fprintf(stderr, "pgrt_train_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    REQUIRE_INT_EQ(rc, 0);
    return t;
}

/* A step's launches: advance, head, then per layer (from the last) the
 * layer's marker, the multi-tensor clip (one squared sum over all the
 * layer's tensors, one scale, one apply) and TENSORS AdamW. */
#define STEP_LAUNCHES (2 + LAYERS * (1 + 3 + TENSORS))

/* Check the fake's launches [from, from + STEP_LAUNCHES): names, order,
 * whether a graph replayed them. */
static void check_step(fixture *f, pgrt_train *t, int from, int replayed)
{
    REQUIRE(fk.launch_count() >= from + STEP_LAUNCHES);
    int i = from;
    const fakecuda_launch *l = fk.launch_at(i++);
    REQUIRE_STR_EQ(l->name, "adamw_hyper_advance");
    REQUIRE_INT_EQ(l->replayed, replayed);
    REQUIRE_INT_EQ(l->params[0], pgrt_buf_ptr(pgrt_train_hyper_buf(t)));
    l = fk.launch_at(i++);
    REQUIRE_STR_EQ(l->name, "residual_add");
    REQUIRE_INT_EQ(l->params[3], 7);
    for (int layer_ = LAYERS - 1; layer_ >= 0; layer_--) {
        l = fk.launch_at(i++);
        REQUIRE_STR_EQ(l->name, "residual_add");
        REQUIRE_INT_EQ(l->params[3], 100 + layer_);
        l = fk.launch_at(i++);
        REQUIRE_STR_EQ(l->name, "squared_sum_reduce_multi");
        REQUIRE_INT_EQ(l->params[1], TENSORS);
        REQUIRE_INT_EQ(l->replayed, replayed);
        REQUIRE_STR_EQ(fk.launch_at(i++)->name, "clip_scale_reduce");
        l = fk.launch_at(i++);
        REQUIRE_STR_EQ(l->name, "gradient_clip_gpu_scale_multi");
        REQUIRE_INT_EQ(l->params[1], TENSORS);
        for (int j = 0; j < TENSORS; j++) {
            l = fk.launch_at(i++);
            REQUIRE_STR_EQ(l->name, "adamw_step_dev");
            REQUIRE_INT_EQ(l->replayed, replayed);
            REQUIRE_INT_EQ(l->params[0], pgrt_buf_ptr(f->params[layer_][j]));
            REQUIRE_INT_EQ(l->params[1], pgrt_buf_ptr(f->grads[j]));
            REQUIRE_INT_EQ(l->params[4], pgrt_buf_ptr(pgrt_train_hyper_buf(t)));
            REQUIRE_INT_EQ(l->params[5], sizes[j]);
        }
    }
}

static void test_eager(void)
{
    fixture f;
    fixture_open(&f);
    pgrt_train *t = make(&f, PGRT_TRAIN_GRAPH_OFF);
    REQUIRE(!pgrt_train_graphs_enabled(t));
    pgrt_train_stats st;
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.launches_per_step, 1 + LAYERS * (3 * TENSORS + 1));

    /* The hyper buffer starts at step 0. */
    float h[10];
    REQUIRE_INT_EQ(pgrt_buf_download(pgrt_train_hyper_buf(t), 0, h, 10), 0);
    REQUIRE(h[0] == 1e-3f && h[1] == 0.9f && h[2] == 0.999f && h[3] == 1e-8f && h[4] == 0.01f);
    REQUIRE(h[5] == 1.0f && h[6] == 1.0f && h[7] == 1.0f && h[8] == 1.0f && h[9] == 0.0f);

    fk.reset();
    for (int step = 0; step < 2; step++) {
        REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 32), 0);
        check_step(&f, t, step * STEP_LAUNCHES, 0);
    }
    REQUIRE_INT_EQ(fk.launch_count(), 2 * STEP_LAUNCHES);
    REQUIRE_INT_EQ(f.head_calls, 2);
    REQUIRE_INT_EQ(f.layer_calls, 2 * LAYERS);
    REQUIRE_INT_EQ(f.last_seq, 32);
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.steps, 2);
    REQUIRE_INT_EQ(st.eager_steps, 2);
    REQUIRE_INT_EQ(st.graph_steps + st.captures + st.capture_failures, 0);
    REQUIRE_INT_EQ(f.nlog, 0);

    /* The learning rate is device memory, written in stream order. */
    REQUIRE_INT_EQ(pgrt_train_set_lr(t, f.s, 0.25f), 0);
    REQUIRE_INT_EQ(pgrt_stream_sync(f.s), 0);
    REQUIRE_INT_EQ(pgrt_buf_download(pgrt_train_hyper_buf(t), 0, h, 1), 0);
    REQUIRE(h[0] == 0.25f);
    REQUIRE_INT_EQ(pgrt_train_set_lr(t, f.s, 1.0f / 0.0f), PGRT_EINVAL);

    /* Clip results per layer; a layer out of range. */
    float scale = 0, norm = -1;
    REQUIRE_INT_EQ(pgrt_train_layer_norm(t, f.s, 1, &scale, &norm), 0);
    REQUIRE_INT_EQ(pgrt_train_layer_norm(t, f.s, LAYERS, &scale, &norm), PGRT_ERANGE);

    /* A callback's error ends the step, named. */
    f.fail_layer = true;
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 32), PGRT_EARGS);
    REQUIRE_CONTAINS(pgrt_last_message(), "(backward of layer 1)");
    f.fail_layer = false;
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 0), PGRT_EINVAL);
    pgrt_train_destroy(&t);
    REQUIRE(t == NULL);
    pgrt_train_destroy(&t);

    /* Clipping off: no clip kernels at all. */
    pgrt_train_params p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.max_norm = 0.0f;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), 0);
    fk.reset();
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 8), 0);
    REQUIRE_INT_EQ(fk.launch_count(), 2 + LAYERS * (1 + TENSORS));
    REQUIRE_INT_EQ(pgrt_train_layer_norm(t, f.s, 0, &scale, &norm), PGRT_ESTATE);
    pgrt_train_destroy(&t);
    fixture_close(&f);
}

static void test_graph(void)
{
    fixture f;
    fixture_open(&f);
    pgrt_train *t = make(&f, PGRT_TRAIN_GRAPH_ON);
    REQUIRE(pgrt_train_graphs_enabled(t));
    pgrt_train_stats st;

    /* First step: captured, then launched: the fake records the replay. */
    fk.reset();
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 64), 0);
    REQUIRE_INT_EQ(fk.launch_count(), STEP_LAUNCHES);
    check_step(&f, t, 0, 1);
    REQUIRE_INT_EQ(f.layer_calls, LAYERS);
    REQUIRE_INT_EQ(f.nlog, 1);
    REQUIRE_CONTAINS(f.log[0], "backward graph captured: seq_len=64");

    /* Same length: replayed, the callbacks are not called again. */
    for (int i = 0; i < 3; i++)
        REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 64), 0);
    REQUIRE_INT_EQ(fk.launch_count(), 4 * STEP_LAUNCHES);
    check_step(&f, t, 3 * STEP_LAUNCHES, 1);
    REQUIRE_INT_EQ(f.layer_calls, LAYERS);
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.steps, 4);
    REQUIRE_INT_EQ(st.graph_steps, 4);
    REQUIRE_INT_EQ(st.captures, 1);
    REQUIRE_INT_EQ(st.graph_seq_len, 64);

    /* The lr copy is outside the graph: a replay reads the new value. */
    REQUIRE_INT_EQ(pgrt_train_set_lr(t, f.s, 0.5f), 0);
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 64), 0);
    REQUIRE_INT_EQ(f.layer_calls, LAYERS);

    /* Another length: captured again, at that length. */
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 48), 0);
    REQUIRE_INT_EQ(f.layer_calls, 2 * LAYERS);
    REQUIRE_INT_EQ(f.last_seq, 48);
    REQUIRE_INT_EQ(f.nlog, 3);
    REQUIRE_CONTAINS(f.log[1], "seq_len changed 64 -> 48");
    REQUIRE_CONTAINS(f.log[2], "captured: seq_len=48");
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.captures, 2);
    REQUIRE_INT_EQ(st.graph_seq_len, 48);
    REQUIRE_CONTAINS(st.last_event, "captured: seq_len=48");

    /* Invalidation drops the graph. */
    pgrt_train_invalidate(t);
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 48), 0);
    REQUIRE_INT_EQ(f.layer_calls, 3 * LAYERS);
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.captures, 3);

    /* The legacy default stream cannot capture: eager. */
    fk.reset();
    REQUIRE_INT_EQ(pgrt_train_backward(t, NULL, 48), 0);
    check_step(&f, t, 0, 0);
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.eager_steps, 1);
    pgrt_train_destroy(&t);
    fixture_close(&f);
}

/* A capture that fails runs the step eagerly, says why, and keeps that
 * length eager; another length captures again. */
static void test_fallback(void)
{
    fixture f;
    fixture_open(&f);
    pgrt_train *t = make(&f, PGRT_TRAIN_GRAPH_ON);
    pgrt_train_stats st;

    f.sync_in_layer = true;
    fk.reset();
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 16), 0);
    /* Only the eager run reached the driver's launch log. */
    REQUIRE_INT_EQ(fk.launch_count(), STEP_LAUNCHES);
    check_step(&f, t, 0, 0);
    REQUIRE_INT_EQ(f.nlog, 1);
    REQUIRE_CONTAINS(f.log[0], "backward graph capture failed at seq_len=16");
    REQUIRE_CONTAINS(f.log[0], "cuStreamSynchronize");
    REQUIRE_CONTAINS(f.log[0], "run eagerly");
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.capture_failures, 1);
    REQUIRE_INT_EQ(st.captures, 0);
    REQUIRE_INT_EQ(st.eager_steps, 1);
    bool capturing = true;
    REQUIRE_INT_EQ(pgrt_stream_is_capturing(f.s, &capturing), 0);
    REQUIRE(!capturing);

    /* The same length stays eager without trying again. */
    int calls = f.layer_calls;
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 16), 0);
    REQUIRE_INT_EQ(f.layer_calls, calls + LAYERS);
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.capture_failures, 1);
    REQUIRE_INT_EQ(st.eager_steps, 2);

    /* A kernel nobody pre-warmed: its load is refused during the capture,
     * the eager run loads it. */
    f.sync_in_layer = false;
    f.uncached_in_layer = true;
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 24), 0);
    REQUIRE_INT_EQ(f.nlog, 2);
    REQUIRE_CONTAINS(f.log[1], "capture failed at seq_len=24 (PGRT_ECAPTURE)");
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.capture_failures, 2);

    /* Now cached: the next length captures. */
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 32), 0);
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.captures, 1);
    REQUIRE_INT_EQ(st.graph_seq_len, 32);
    REQUIRE_INT_EQ(st.steps, 4);
    REQUIRE_INT_EQ(st.graph_steps, 1);
    pgrt_train_destroy(&t);
    fixture_close(&f);
}

static void test_env(void)
{
    fixture f;
    fixture_open(&f);
    pgrt_train *t;
    setenv("PTXGEN_CUDA_GRAPH", "1", 1);
    t = make(&f, PGRT_TRAIN_GRAPH_ENV);
    REQUIRE(pgrt_train_graphs_enabled(t));
    pgrt_train_destroy(&t);
    t = make(&f, PGRT_TRAIN_GRAPH_OFF);
    REQUIRE(!pgrt_train_graphs_enabled(t));
    pgrt_train_destroy(&t);
    setenv("PTXGEN_CUDA_GRAPH", "0", 1);
    t = make(&f, PGRT_TRAIN_GRAPH_ENV);
    REQUIRE(!pgrt_train_graphs_enabled(t));
    pgrt_train_destroy(&t);
    unsetenv("PTXGEN_CUDA_GRAPH");
    t = make(&f, PGRT_TRAIN_GRAPH_ENV);
    REQUIRE(!pgrt_train_graphs_enabled(t));
    pgrt_train_destroy(&t);
    t = make(&f, PGRT_TRAIN_GRAPH_ON);
    REQUIRE(pgrt_train_graphs_enabled(t));
    pgrt_train_destroy(&t);
    fixture_close(&f);
}

static void test_params(void)
{
    fixture f;
    fixture_open(&f);
    pgrt_train *t = NULL;
    pgrt_train_params p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    REQUIRE_INT_EQ(pgrt_train_create(NULL, &p, &t), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, NULL, &t), PGRT_EINVAL);

    p.layer_backward = NULL;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "layer_backward is NULL");
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.layers = 0;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.tensors_per_layer = PGRT_TRAIN_MAX_TENSORS + 1;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.max_norm = -1.0f;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "max_norm");
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.beta1 = 1.0f;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "beta1 1 must be in [0, 1)");
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.graph = (pgrt_train_graph)7;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);

    /* A gradient that does not match its parameter. */
    pgrt_train_tensor bad[LAYERS * TENSORS];
    memcpy(bad, f.tensors, sizeof bad);
    bad[3].grad = f.grads[0];
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.tensors = bad;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "layer 1 tensor 1: param is 40 x f32, grad 300 x f32");
    bad[3].grad = NULL;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "layer 1 tensor 1: grad is NULL");
    REQUIRE(t == NULL);

    REQUIRE_INT_EQ(pgrt_train_backward(NULL, f.s, 1), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_train_set_lr(NULL, f.s, 1), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_train_stats_get(NULL, NULL), PGRT_EINVAL);
    REQUIRE(pgrt_train_hyper_buf(NULL) == NULL);
    REQUIRE(!pgrt_train_graphs_enabled(NULL));
    pgrt_train_invalidate(NULL);
    fixture_close(&f);
}

/* The folded optimizer: every layer's own gradients, so that the default
 * (auto) picks it; its three launches after the backward, the table they
 * walk, the norm modes, graphs, and what it refuses. */
static void test_folded(void)
{
    fixture f;
    fixture_open(&f);
    pgrt_buf *own[LAYERS][TENSORS], *copy = NULL;
    pgrt_train_tensor tens[LAYERS * TENSORS];
    for (int l = 0; l < LAYERS; l++)
        for (int j = 0; j < TENSORS; j++) {
            REQUIRE_INT_EQ(pgrt_buf_alloc(f.ctx, PG_F32, sizes[j], &own[l][j]), 0);
            tens[l * TENSORS + j] = (pgrt_train_tensor){f.params[l][j], own[l][j], NULL};
        }
    REQUIRE_INT_EQ(pgrt_buf_alloc(f.ctx, PG_BF16, sizes[1], &copy), 0);
    tens[3].copy = copy;

    /* Shared gradients (the fixture's): auto keeps the per-tensor loop. */
    pgrt_train *t = make(&f, PGRT_TRAIN_GRAPH_OFF);
    REQUIRE(!pgrt_train_folded(t));
    uint32_t skipped = 7;
    REQUIRE_INT_EQ(pgrt_train_skipped(t, f.s, &skipped, NULL), PGRT_ESTATE);
    pgrt_train_destroy(&t);

    static const pgrt_train_norm modes[] = {PGRT_TRAIN_NORM_LAYER, PGRT_TRAIN_NORM_GLOBAL,
                                            PGRT_TRAIN_NORM_OFF};
    for (int mi = 0; mi < 3; mi++) {
        pgrt_train_params p = params_for(&f, mi == 1 ? PGRT_TRAIN_GRAPH_ON : PGRT_TRAIN_GRAPH_OFF);
        p.tensors = tens;
        p.norm = modes[mi];
        REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), 0);
        REQUIRE(pgrt_train_folded(t));
        pgrt_train_stats st;
        REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
        int own_launches = mi == 2 ? 2 : 3;
        REQUIRE_INT_EQ(st.launches_per_step, own_launches);
        fk.reset();
        for (int step = 0; step < 3; step++)
            REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 16), 0);
        int per = 1 + LAYERS + own_launches;
        REQUIRE_INT_EQ(fk.launch_count(), 3 * per);
        for (int step = 0; step < 3; step++) {
            int i = step * per;
            int replayed = mi == 1 ? 1 : 0; /* the capturing step runs as the graph too */
            REQUIRE_INT_EQ(fk.launch_at(i)->params[3], 7);
            for (int l = LAYERS - 1; l >= 0; l--)
                REQUIRE_INT_EQ(fk.launch_at(++i)->params[3], 100 + l);
            const fakecuda_launch *norm = NULL;
            if (mi != 2) {
                norm = fk.launch_at(++i);
                REQUIRE_STR_EQ(norm->name, "adamw_multi_norm");
                REQUIRE_INT_EQ(norm->params[1], LAYERS * TENSORS);
                REQUIRE_INT_EQ(norm->replayed, replayed);
            }
            const fakecuda_launch *fin = fk.launch_at(++i);
            REQUIRE_STR_EQ(fin->name, "adamw_multi_finalize");
            REQUIRE_INT_EQ(fin->params[2], mi == 0 ? LAYERS : mi == 1 ? 1 : 0);
            float max_norm, eps;
            uint32_t w = (uint32_t)fin->params[3];
            memcpy(&max_norm, &w, 4);
            w = (uint32_t)fin->params[4];
            memcpy(&eps, &w, 4);
            REQUIRE(max_norm == (mi == 2 ? 0.0f : 1.0f));
            REQUIRE(eps == (mi == 1 ? 1e-6f : 0.0f));
            REQUIRE_INT_EQ(fin->params[6], pgrt_buf_ptr(pgrt_train_hyper_buf(t)));
            const fakecuda_launch *up = fk.launch_at(++i);
            REQUIRE_STR_EQ(up->name, "adamw_multi_step");
            REQUIRE_INT_EQ(up->params[1], LAYERS * TENSORS);
            REQUIRE_INT_EQ(up->params[2], fin->params[5]);
            REQUIRE_INT_EQ(up->replayed, replayed);
            if (norm)
                REQUIRE_INT_EQ(norm->params[0], up->params[0]);

            /* The fake's device memory is host memory: read the table. */
            const pgk_optim_entry *e = (const pgk_optim_entry *)(uintptr_t)up->params[0];
            uint32_t nb = 0, ub = 0;
            for (int l = 0; l < LAYERS; l++)
                for (int j = 0; j < TENSORS; j++, e++) {
                    REQUIRE_INT_EQ(e->grad.ptr, pgrt_buf_ptr(own[l][j]));
                    REQUIRE_INT_EQ(e->param, pgrt_buf_ptr(f.params[l][j]));
                    REQUIRE_INT_EQ(e->grad.n, sizes[j]);
                    REQUIRE_INT_EQ(e->grad.first_block, nb);
                    REQUIRE_INT_EQ(e->first_block, ub);
                    REQUIRE_INT_EQ(e->group, mi == 0 ? (uint32_t)l : 0);
                    REQUIRE(e->m && e->v && e->m != e->v);
                    REQUIRE_INT_EQ(e->copy, l * TENSORS + j == 3 ? pgrt_buf_ptr(copy) : 0);
                    REQUIRE_INT_EQ(e->copy_type, l * TENSORS + j == 3 ? PGK_COPY_BF16 : 0);
                    nb += pgk_adamw_norm_blocks(sizes[j]);
                    ub += pgk_adamw_multi_blocks(sizes[j]);
                }
            if (norm)
                REQUIRE_INT_EQ(norm->grid[0], nb);
            REQUIRE_INT_EQ(up->grid[0], ub);
        }
        REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
        REQUIRE_INT_EQ(st.graph_steps, mi == 1 ? 3 : 0);
        REQUIRE_INT_EQ(pgrt_train_skipped(t, f.s, &skipped, NULL), 0);
        REQUIRE_INT_EQ(skipped, 0);
        float scale = 0, nrm = -1;
        if (mi == 2) {
            REQUIRE_INT_EQ(pgrt_train_layer_norm(t, f.s, 0, &scale, &nrm), PGRT_ESTATE);
        } else {
            /* The fake runs nothing: the state as created. */
            REQUIRE_INT_EQ(pgrt_train_layer_norm(t, f.s, 1, &scale, &nrm), 0);
            REQUIRE(scale == 1.0f && nrm == 0.0f);
        }
        pgrt_train_destroy(&t);
    }

    /* The per-tensor fallback on request, with the same tensors. */
    tens[3].copy = NULL;
    pgrt_train_params p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.tensors = tens;
    p.optimizer = PGRT_TRAIN_OPT_PER_TENSOR;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), 0);
    REQUIRE(!pgrt_train_folded(t));
    fk.reset();
    REQUIRE_INT_EQ(pgrt_train_backward(t, f.s, 16), 0);
    REQUIRE_STR_EQ(fk.launch_at(0)->name, "adamw_hyper_advance");
    REQUIRE_INT_EQ(fk.launch_count(), STEP_LAUNCHES);
    pgrt_train_destroy(&t);

    /* What it refuses, each named. */
    p.norm = PGRT_TRAIN_NORM_GLOBAL;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "global norm needs the folded optimizer");
    p.norm = PGRT_TRAIN_NORM_LAYER;
    tens[3].copy = copy;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "16-bit copies need the folded optimizer");
    p.optimizer = PGRT_TRAIN_OPT_FOLDED;
    tens[2].copy = f.scratch;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "layer 1 tensor 0: copy is 1024 x f32");
    tens[2].copy = NULL;
    p = params_for(&f, PGRT_TRAIN_GRAPH_OFF);
    p.optimizer = PGRT_TRAIN_OPT_FOLDED;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "two tensors share a gradient buffer");
    p.norm = (pgrt_train_norm)9;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "norm is 9");
    p.norm = PGRT_TRAIN_NORM_LAYER;
    p.optimizer = (pgrt_train_optimizer)5;
    REQUIRE_INT_EQ(pgrt_train_create(f.ctx, &p, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "optimizer is 5");
    REQUIRE(t == NULL);
    REQUIRE_INT_EQ(pgrt_train_skipped(NULL, f.s, &skipped, NULL), PGRT_EINVAL);
    REQUIRE(!pgrt_train_folded(NULL));

    pgrt_buf_destroy(&copy);
    for (int l = 0; l < LAYERS; l++)
        for (int j = 0; j < TENSORS; j++)
            pgrt_buf_destroy(&own[l][j]);
    fixture_close(&f);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA");
    test_eager();
    test_graph();
    test_fallback();
    test_env();
    test_params();
    test_folded();
    TEST_DONE();
}
