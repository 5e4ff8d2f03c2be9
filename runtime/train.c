/* SPDX-License-Identifier: MIT */
/*
 * The backward pipeline (pgrt_train.h): the seed's per-layer loop of
 * backward, fused clip and AdamW, run eagerly or captured once per sequence
 * length and replayed. Everything a step launches is decided at creation
 * (moments, clip states, launch configurations, loaded kernels), so a step
 * is launches on one stream and nothing else.
 */
#include "pgrt_train.h"
#include "rt_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct tensor_slot {
    pgrt_buf *param, *grad; /* borrowed */
    pgrt_buf *m, *v;        /* owned */
    uint32_t n;
    pgk_knobs kn;
    pgk_launch cfg;
    pgrt_kernel *k_adamw;
} tensor_slot;

struct pgrt_train {
    pgrt_ctx *ctx;
    size_t layers, per_layer;
    tensor_slot *slots; /* layers * per_layer */
    pgrt_clip **clips;  /* one a layer; NULL when clipping is off */
    pgrt_buf **grads;   /* per_layer scratch for pgrt_clip_run */
    float max_norm;

    pgrt_buf *hyper;
    float lr_host; /* the source of pgrt_train_set_lr's copy */
    pgrt_kernel *k_advance;
    pgk_launch cfg_advance;

    pgrt_train_layer_fn layer_backward;
    pgrt_train_head_fn head;
    void *user;
    pgrt_train_log_fn log;

    bool graphs;
    pgrt_graph *graph;
    uint32_t graph_seq;
    bool failed;        /* a capture failed at failed_seq: that length runs eagerly */
    uint32_t failed_seq;

    pgrt_train_stats stats;
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void say(pgrt_train *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->stats.last_event, sizeof t->stats.last_event, fmt, ap);
    va_end(ap);
    if (t->log)
        t->log(t->user, t->stats.last_event);
    else
        fprintf(stderr, "pgrt: %s\n", t->stats.last_event);
}

static bool graphs_from_env(void)
{
    const char *v = getenv("PTXGEN_CUDA_GRAPH");
    return v && strcmp(v, "1") == 0;
}

static int check_params(pgrt_ctx *ctx, const pgrt_train_params *p)
{
    if (p->layers == 0)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: layers is 0");
    if (p->tensors_per_layer == 0 || p->tensors_per_layer > PGRT_TRAIN_MAX_TENSORS)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: tensors_per_layer is %zu; 1 to %d",
                       p->tensors_per_layer, PGRT_TRAIN_MAX_TENSORS);
    if (p->layers > SIZE_MAX / p->tensors_per_layer)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: layers x tensors_per_layer overflows");
    if (!p->tensors)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: tensors is NULL");
    if (!p->layer_backward)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: layer_backward is NULL");
    if (!(p->max_norm >= 0.0f) || !isfinite(p->max_norm))
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: max_norm %g must be finite and >= 0",
                       (double)p->max_norm);
    if (!isfinite(p->lr) || !(p->beta1 >= 0.0f && p->beta1 < 1.0f) ||
        !(p->beta2 >= 0.0f && p->beta2 < 1.0f) || !(p->eps > 0.0f) || !isfinite(p->eps) ||
        !isfinite(p->weight_decay))
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: AdamW needs a finite lr and weight_decay, "
                       "beta1 and beta2 in [0, 1) and a finite eps > 0 (got lr %g, betas %g %g, "
                       "eps %g, weight_decay %g)", (double)p->lr, (double)p->beta1,
                       (double)p->beta2, (double)p->eps, (double)p->weight_decay);
    if ((unsigned)p->graph > PGRT_TRAIN_GRAPH_ON)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: graph is %d, not a pgrt_train_graph",
                       (int)p->graph);
    size_t n = p->layers * p->tensors_per_layer;
    for (size_t i = 0; i < n; i++) {
        const pgrt_train_tensor *tt = &p->tensors[i];
        size_t l = i / p->tensors_per_layer, j = i % p->tensors_per_layer;
        if (!tt->param || !tt->grad)
            return rt_fail(PGRT_EINVAL, "pgrt_train_create: layer %zu tensor %zu: %s is NULL", l,
                           j, !tt->param ? "param" : "grad");
        if (tt->param->ctx != ctx || tt->grad->ctx != ctx)
            return rt_fail(PGRT_EINVAL, "pgrt_train_create: layer %zu tensor %zu: a buffer of "
                           "another context", l, j);
        if (tt->param->type != PG_F32 || tt->grad->type != PG_F32 ||
            tt->param->count != tt->grad->count)
            return rt_fail(PGRT_EINVAL, "pgrt_train_create: layer %zu tensor %zu: param is %zu x "
                           "%s, grad %zu x %s; both must be f32 of one size", l, j,
                           tt->param->count, pg_type_name(tt->param->type), tt->grad->count,
                           pg_type_name(tt->grad->type));
        if (tt->param->count > UINT32_MAX)
            return rt_fail(PGRT_ERANGE, "pgrt_train_create: layer %zu tensor %zu has %zu "
                           "elements; the kernels count in u32", l, j, tt->param->count);
    }
    return 0;
}

static int find(const char *name, const pgk_desc **d)
{
    *d = pgk_find(name);
    if (!*d)
        return rt_fail(PGRT_ENOTFOUND, "backward pipeline: kernel \"%s\" is not in the catalog",
                       name);
    return 0;
}

int pgrt_train_create(pgrt_ctx *ctx, const pgrt_train_params *p, pgrt_train **out)
{
    if (!ctx || !p || !out)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: %s is NULL",
                       !ctx ? "ctx" : !p ? "params" : "out");
    *out = NULL;
    int rc = check_params(ctx, p);
    if (rc)
        return rc;
    const pgk_desc *d_adv, *d_adamw;
    if ((rc = find("adamw_hyper_advance", &d_adv)) || (rc = find("adamw_step_dev", &d_adamw)))
        return rc;

    size_t n = p->layers * p->tensors_per_layer;
    pgrt_train *t = calloc(1, sizeof *t);
    if (!t)
        return rt_fail(PGRT_ENOMEM, "pgrt_train_create: out of memory");
    t->ctx = ctx;
    t->layers = p->layers;
    t->per_layer = p->tensors_per_layer;
    t->max_norm = p->max_norm;
    t->layer_backward = p->layer_backward;
    t->head = p->head;
    t->user = p->user;
    t->log = p->log;
    t->lr_host = p->lr;
    t->graphs = p->graph == PGRT_TRAIN_GRAPH_ON ||
                (p->graph == PGRT_TRAIN_GRAPH_ENV && graphs_from_env());
    t->slots = calloc(n, sizeof *t->slots);
    t->grads = calloc(t->per_layer, sizeof *t->grads);
    if (p->max_norm > 0.0f)
        t->clips = calloc(t->layers, sizeof *t->clips);
    if (!t->slots || !t->grads || (p->max_norm > 0.0f && !t->clips)) {
        rc = rt_fail(PGRT_ENOMEM, "pgrt_train_create: out of memory");
        goto fail;
    }

    size_t launches = 1;
    for (size_t i = 0; i < n; i++) {
        tensor_slot *sl = &t->slots[i];
        sl->param = p->tensors[i].param;
        sl->grad = p->tensors[i].grad;
        sl->n = (uint32_t)sl->param->count;
        pgk_knobs_default(d_adamw, &sl->kn);
        int kn = pgk_knob_index(d_adamw, "n");
        if (kn < 0) {
            rc = rt_fail(PGRT_EKERNEL, "adamw_step_dev has no knob \"n\" to size it by");
            goto fail;
        }
        sl->kn.v[kn] = sl->n;
        char err[256] = "";
        if (pgk_launch_for(d_adamw, &sl->kn, &sl->cfg, err, sizeof err)) {
            rc = rt_fail(PGRT_ERANGE, "adamw_step_dev: %s", err);
            goto fail;
        }
        if ((rc = pgrt_kernel_get(ctx, d_adamw, &sl->kn, &sl->k_adamw)) ||
            (rc = pgrt_buf_alloc(ctx, PG_F32, sl->n, &sl->m)) ||
            (rc = pgrt_buf_alloc(ctx, PG_F32, sl->n, &sl->v)) || (rc = pgrt_buf_memset(sl->m, 0)) ||
            (rc = pgrt_buf_memset(sl->v, 0)))
            goto fail;
        launches++;
    }
    if (t->clips) {
        size_t sizes[PGRT_TRAIN_MAX_TENSORS];
        for (size_t l = 0; l < t->layers; l++) {
            for (size_t j = 0; j < t->per_layer; j++)
                sizes[j] = t->slots[l * t->per_layer + j].n;
            if ((rc = pgrt_clip_create(ctx, sizes, t->per_layer, &t->clips[l]))) {
                rt_msg_append(" (clip state of layer %zu)", l);
                goto fail;
            }
            launches += 2 * t->per_layer + 1;
        }
    }
    t->stats.launches_per_step = launches;

    char err[256] = "";
    if (pgk_launch_for(d_adv, NULL, &t->cfg_advance, err, sizeof err)) {
        rc = rt_fail(PGRT_EKERNEL, "adamw_hyper_advance: %s", err);
        goto fail;
    }
    const float h[PGK_HYPER_COUNT] = {
        [PGK_HYPER_LR] = p->lr,         [PGK_HYPER_BETA1] = p->beta1,
        [PGK_HYPER_BETA2] = p->beta2,   [PGK_HYPER_EPS] = p->eps,
        [PGK_HYPER_WD] = p->weight_decay, [PGK_HYPER_BC1] = 1.0f,
        [PGK_HYPER_BC2] = 1.0f,         [PGK_HYPER_BETA1_POW] = 1.0f,
        [PGK_HYPER_BETA2_POW] = 1.0f,   [PGK_HYPER_STEP] = 0.0f,
    };
    if ((rc = pgrt_kernel_get(ctx, d_adv, NULL, &t->k_advance)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, PGK_HYPER_COUNT, &t->hyper)) ||
        (rc = pgrt_buf_upload(t->hyper, 0, h, PGK_HYPER_COUNT)))
        goto fail;
    /* The memsets and uploads above ran on the legacy stream, which a
     * non-blocking stream does not wait for: finish them here. */
    if ((rc = pgrt_ctx_sync(ctx)))
        goto fail;
    *out = t;
    return 0;

fail:
    pgrt_train_destroy(&t);
    return rc;
}

void pgrt_train_destroy(pgrt_train **pt)
{
    if (!pt || !*pt)
        return;
    pgrt_train *t = *pt;
    *pt = NULL;
    pgrt_graph_destroy(&t->graph);
    if (t->clips)
        for (size_t l = 0; l < t->layers; l++)
            pgrt_clip_destroy(&t->clips[l]);
    if (t->slots)
        for (size_t i = 0; i < t->layers * t->per_layer; i++) {
            pgrt_buf_destroy(&t->slots[i].m);
            pgrt_buf_destroy(&t->slots[i].v);
        }
    pgrt_buf_destroy(&t->hyper);
    free(t->clips);
    free(t->grads);
    free(t->slots);
    free(t);
}

/* The loop itself: the launches of one step, in order. */
static int enqueue_step(pgrt_train *t, pgrt_stream *s, uint32_t seq_len)
{
    pgrt_arg h = pgrt_arg_ptr(t->hyper->ptr);
    int rc = rt_kernel_launch_cfg(t->k_advance, s, &t->cfg_advance, NULL, &h, 1);
    if (rc)
        return rc;
    if (t->head && (rc = t->head(t->user, s, seq_len))) {
        rt_msg_append(" (head backward)");
        return rc;
    }
    for (size_t l = t->layers; l-- > 0;) {
        tensor_slot *sl = &t->slots[l * t->per_layer];
        if ((rc = t->layer_backward(t->user, s, l, seq_len))) {
            rt_msg_append(" (backward of layer %zu)", l);
            return rc;
        }
        if (t->clips) {
            for (size_t j = 0; j < t->per_layer; j++)
                t->grads[j] = sl[j].grad;
            if ((rc = pgrt_clip_run(t->clips[l], s, t->grads, t->per_layer, t->max_norm))) {
                rt_msg_append(" (clip of layer %zu)", l);
                return rc;
            }
        }
        for (size_t j = 0; j < t->per_layer; j++) {
            pgrt_arg a[6] = {pgrt_arg_ptr(sl[j].param->ptr), pgrt_arg_ptr(sl[j].grad->ptr),
                             pgrt_arg_ptr(sl[j].m->ptr),     pgrt_arg_ptr(sl[j].v->ptr),
                             h,                              pgrt_arg_u32(sl[j].n)};
            if ((rc = rt_kernel_launch_cfg(sl[j].k_adamw, s, &sl[j].cfg, &sl[j].kn, a, 6))) {
                rt_msg_append(" (AdamW of layer %zu tensor %zu)", l, j);
                return rc;
            }
        }
    }
    return 0;
}

static int run_eager(pgrt_train *t, pgrt_stream *s, uint32_t seq_len)
{
    int rc = enqueue_step(t, s, seq_len);
    if (rc)
        return rc;
    t->stats.steps++;
    t->stats.eager_steps++;
    return 0;
}

/* Give every layer's clip state its table of gradient pointers before a
 * capture, so that the graph records the multi-tensor launches (a capture
 * that met an unknown pointer set would record the per-buffer ones). */
static int prepare_clips(pgrt_train *t, pgrt_stream *s)
{
    if (!t->clips)
        return 0;
    for (size_t l = 0; l < t->layers; l++) {
        tensor_slot *sl = &t->slots[l * t->per_layer];
        for (size_t j = 0; j < t->per_layer; j++)
            t->grads[j] = sl[j].grad;
        int rc = pgrt_clip_prepare(t->clips[l], s, t->grads, t->per_layer);
        if (rc) {
            rt_msg_append(" (clip table of layer %zu)", l);
            return rc;
        }
    }
    return 0;
}

/* Capture the loop into t->graph. On failure the stream is out of capture
 * mode, nothing of the step has run, and why holds the reason. */
static int capture(pgrt_train *t, pgrt_stream *s, uint32_t seq_len, char *why, size_t whylen)
{
    int rc = prepare_clips(t, s);
    if (rc) {
        snprintf(why, whylen, "%s", pgrt_last_message());
        return rc;
    }
    rc = pgrt_capture_begin(s);
    if (rc) {
        snprintf(why, whylen, "%s", pgrt_last_message());
        return rc;
    }
    rc = enqueue_step(t, s, seq_len);
    if (rc) {
        snprintf(why, whylen, "%s", pgrt_last_message());
        (void)pgrt_capture_abort(s); /* the enqueue's error is the one reported */
        return rc;
    }
    rc = pgrt_capture_end(s, &t->graph);
    if (rc)
        snprintf(why, whylen, "%s", pgrt_last_message());
    return rc;
}

int pgrt_train_backward(pgrt_train *t, pgrt_stream *s, uint32_t seq_len)
{
    if (!t)
        return rt_fail(PGRT_EINVAL, "pgrt_train_backward: pipeline is NULL");
    if (seq_len == 0)
        return rt_fail(PGRT_EINVAL, "pgrt_train_backward: seq_len is 0");
    if (s && s->ctx != t->ctx)
        return rt_fail(PGRT_EINVAL, "pgrt_train_backward: stream of another context");
    if (!t->graphs || !s)
        return run_eager(t, s, seq_len);

    int rc;
    if (t->graph && t->graph_seq == seq_len) {
        if ((rc = pgrt_graph_launch(t->graph, s)))
            return rc;
        t->stats.steps++;
        t->stats.graph_steps++;
        return 0;
    }
    if (t->graph) {
        say(t, "backward graph: seq_len changed %u -> %u, capturing again", t->graph_seq, seq_len);
        pgrt_graph_destroy(&t->graph);
        t->graph_seq = 0;
        t->stats.graph_seq_len = 0;
    }
    if (t->failed && t->failed_seq == seq_len)
        return run_eager(t, s, seq_len);

    char why[512] = "";
    double t0 = rt_now_ms();
    rc = capture(t, s, seq_len, why, sizeof why);
    double ms = rt_now_ms() - t0;
    t->stats.capture_ms += ms;
    if (rc == 0) {
        /* The capturing step runs too: as the graph it just recorded. */
        rc = pgrt_graph_launch(t->graph, s);
        if (rc) {
            snprintf(why, sizeof why, "first launch of the graph: %s", pgrt_last_message());
            pgrt_graph_destroy(&t->graph);
        }
    }
    if (rc) {
        t->stats.capture_failures++;
        t->failed = true;
        t->failed_seq = seq_len;
        say(t, "backward graph capture failed at seq_len=%u (%s): %s; steps at this length run "
            "eagerly", seq_len, pgrt_err_name(rc), why);
        return run_eager(t, s, seq_len);
    }
    t->graph_seq = seq_len;
    t->failed = false;
    t->stats.captures++;
    t->stats.graph_seq_len = seq_len;
    t->stats.steps++;
    t->stats.graph_steps++;
    say(t, "backward graph captured: seq_len=%u, %zu layers, %zu pipeline launches, %.2f ms",
        seq_len, t->layers, t->stats.launches_per_step, ms);
    return 0;
}

int pgrt_train_set_lr(pgrt_train *t, pgrt_stream *s, float lr)
{
    if (!t)
        return rt_fail(PGRT_EINVAL, "pgrt_train_set_lr: pipeline is NULL");
    if (!isfinite(lr))
        return rt_fail(PGRT_EINVAL, "pgrt_train_set_lr: lr %g is not finite", (double)lr);
    /* A copy from pageable memory is staged before the call returns, so the
     * slot may change again at the next call; it lives as long as the
     * pipeline all the same. */
    t->lr_host = lr;
    return pgrt_buf_upload_async(t->hyper, PGK_HYPER_LR, &t->lr_host, 1, s);
}

void pgrt_train_invalidate(pgrt_train *t)
{
    if (!t)
        return;
    pgrt_graph_destroy(&t->graph);
    t->graph_seq = 0;
    t->stats.graph_seq_len = 0;
    t->failed = false;
}

bool pgrt_train_graphs_enabled(const pgrt_train *t) { return t && t->graphs; }

pgrt_buf *pgrt_train_hyper_buf(pgrt_train *t) { return t ? t->hyper : NULL; }

int pgrt_train_layer_norm(pgrt_train *t, pgrt_stream *s, size_t layer, float *scale, float *norm)
{
    if (!t)
        return rt_fail(PGRT_EINVAL, "pgrt_train_layer_norm: pipeline is NULL");
    if (layer >= t->layers)
        return rt_fail(PGRT_ERANGE, "pgrt_train_layer_norm: layer %zu of %zu", layer, t->layers);
    if (!t->clips)
        return rt_fail(PGRT_ESTATE, "pgrt_train_layer_norm: clipping is off (max_norm 0)");
    return pgrt_clip_result(t->clips[layer], s, scale, norm);
}

int pgrt_train_stats_get(const pgrt_train *t, pgrt_train_stats *out)
{
    if (!t || !out)
        return rt_fail(PGRT_EINVAL, "pgrt_train_stats_get: %s is NULL", !t ? "pipeline" : "out");
    *out = t->stats;
    return 0;
}
