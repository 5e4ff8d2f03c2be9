/* SPDX-License-Identifier: MIT */
/*
 * The backward pipeline (pgrt_train.h): the backward callbacks, then the
 * folded multi-tensor optimizer (three launches over one device table), or
 * the seed's per-layer loop of backward, fused clip and AdamW; run eagerly
 * or captured once per sequence length and replayed. Everything a step launches is decided at creation
 * (moments, clip states, launch configurations, loaded kernels), so a step
 * is launches on one stream and nothing else.
 */
#include "ptxgen/pgrt_train.h"
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

    /* The folded optimizer (folded true): one table of every tensor,
     * layer-major, the norm groups' first partials, the partial sums and
     * the state (skip flag, skip count, a coefficient and norm a group). */
    bool folded;
    uint32_t ngroups;     /* layers, 1 (global) or 0 (clipping off) */
    float norm_eps;       /* 0 per layer, 1e-6 global */
    pgrt_buf *table, *groups, *partials, *state;
    pgrt_kernel *k_norm, *k_finalize, *k_step;
    pgk_knobs kn_norm, kn_step;
    pgk_launch cfg_norm, cfg_finalize, cfg_step;

    pgrt_buf *hyper;
    float lr_host; /* the source of pgrt_train_set_lr's copy */
    pgrt_kernel *k_advance;
    pgk_launch cfg_advance;

    pgrt_train_layer_fn layer_backward;
    pgrt_train_head_fn head, after_update;
    pgrt_comm *shard_comm; /* ZeRO-1: the clip's partial sums summed over its ranks */
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
    RT_NONNULL("pgrt_train_create", p->tensors, "tensors");
    RT_NONNULL("pgrt_train_create", p->layer_backward, "layer_backward");
    /* Each hyper-parameter on its own, so the message names the one that
     * is wrong and its value. The comparisons are written so that NaN
     * fails them. */
    const struct {
        const char *name, *rule;
        float v;
        bool ok;
    } hyper[] = {
        {"max_norm", "finite and >= 0 (0: no clipping)", p->max_norm,
         p->max_norm >= 0.0f && isfinite(p->max_norm)},
        {"lr", "finite and >= 0", p->lr, p->lr >= 0.0f && isfinite(p->lr)},
        {"beta1", "in [0, 1)", p->beta1, p->beta1 >= 0.0f && p->beta1 < 1.0f},
        {"beta2", "in [0, 1)", p->beta2, p->beta2 >= 0.0f && p->beta2 < 1.0f},
        {"eps", "finite and > 0", p->eps, p->eps > 0.0f && isfinite(p->eps)},
        {"weight_decay", "finite and >= 0", p->weight_decay,
         p->weight_decay >= 0.0f && isfinite(p->weight_decay)},
    };
    for (size_t i = 0; i < sizeof hyper / sizeof hyper[0]; i++)
        if (!hyper[i].ok)
            return rt_fail(PGRT_EINVAL, "pgrt_train_create: %s %g must be %s", hyper[i].name,
                           (double)hyper[i].v, hyper[i].rule);
    if ((unsigned)p->graph > PGRT_TRAIN_GRAPH_ON)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: graph is %d, not a pgrt_train_graph",
                       (int)p->graph);
    if ((unsigned)p->norm > PGRT_TRAIN_NORM_OFF)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: norm is %d, not a pgrt_train_norm",
                       (int)p->norm);
    if ((unsigned)p->optimizer > PGRT_TRAIN_OPT_PER_TENSOR)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: optimizer is %d, not a "
                       "pgrt_train_optimizer", (int)p->optimizer);
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
        if (tt->copy && (tt->copy->ctx != ctx || tt->copy->count != tt->param->count ||
                         (tt->copy->type != PG_BF16 && tt->copy->type != PG_F16)))
            return rt_fail(PGRT_EINVAL, "pgrt_train_create: layer %zu tensor %zu: copy is %zu x "
                           "%s%s; it must be bf16 or f16 of param's %zu", l, j, tt->copy->count,
                           pg_type_name(tt->copy->type),
                           tt->copy->ctx != ctx ? " of another context" : "", tt->param->count);
    }
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Whether two tensors' gradient buffers overlap (a buffer shared between
 * layers, or views into one another). */
static int grads_shared(const pgrt_train_params *p, size_t n, bool *shared)
{
    uint64_t *r = malloc(2 * n * sizeof *r);
    if (!r)
        return rt_fail(PGRT_ENOMEM, "pgrt_train_create: out of memory");
    for (size_t i = 0; i < n; i++) {
        r[2 * i] = p->tensors[i].grad->ptr;
        r[2 * i + 1] = p->tensors[i].grad->ptr + p->tensors[i].grad->count * sizeof(float);
    }
    qsort(r, n, 2 * sizeof *r, cmp_range);
    *shared = false;
    for (size_t i = 1; i < n && !*shared; i++)
        *shared = r[2 * i] < r[2 * i - 1];
    free(r);
    return 0;
}

/* The optimizer the params ask for, the per-tensor one's limits checked. */
static int choose_optimizer(const pgrt_train_params *p, size_t n, bool *folded)
{
    bool shared = false;
    int rc = grads_shared(p, n, &shared);
    if (rc)
        return rc;
    bool copies = false;
    for (size_t i = 0; i < n; i++)
        copies |= p->tensors[i].copy != NULL;
    bool clip = p->max_norm > 0.0f && p->norm != PGRT_TRAIN_NORM_OFF;
    if (p->optimizer == PGRT_TRAIN_OPT_FOLDED && shared)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: the folded optimizer updates after the "
                       "whole backward, but two tensors share a gradient buffer");
    *folded = p->optimizer == PGRT_TRAIN_OPT_FOLDED ||
              (p->optimizer == PGRT_TRAIN_OPT_AUTO && !shared);
    if (*folded)
        return 0;
    if (p->shard_comm)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: a sharded optimizer (shard_comm) needs "
                       "the folded optimizer%s", shared ? " (two tensors share a gradient buffer)"
                       : "");
    if (clip && p->norm == PGRT_TRAIN_NORM_GLOBAL)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: the global norm needs the folded "
                       "optimizer%s", shared ? " (two tensors share a gradient buffer)" : "");
    if (copies)
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: 16-bit copies need the folded "
                       "optimizer%s", shared ? " (two tensors share a gradient buffer)" : "");
    return 0;
}

static int knobs_sized(const pgk_desc *d, uint64_t blocks, uint32_t nbufs, pgk_knobs *kn,
                       pgk_launch *cfg)
{
    int ib = pgk_knob_index(d, "total_blocks"), in = pgk_knob_index(d, "nbufs");
    if (ib < 0 || in < 0)
        return rt_fail(PGRT_EKERNEL, "%s has no knobs total_blocks and nbufs", d->name);
    if (blocks > d->knobs[ib].max)
        return rt_fail(PGRT_ERANGE, "pgrt_train_create: %s would launch %llu blocks; at most %u",
                       d->name, (unsigned long long)blocks, d->knobs[ib].max);
    pgk_knobs_default(d, kn);
    kn->v[ib] = (uint32_t)blocks;
    kn->v[in] = nbufs;
    char err[256] = "";
    if (pgk_launch_for(d, kn, cfg, err, sizeof err))
        return rt_fail(PGRT_ERANGE, "%s: %s", d->name, err);
    if (cfg->grid[0] != blocks)
        return rt_fail(PGRT_EKERNEL, "%s launches %u blocks for a table of %llu", d->name,
                       cfg->grid[0], (unsigned long long)blocks);
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

/* A sharded optimizer sums every rank's partials block by block, so every
 * rank's table must have the same shape: the same tensor count and block
 * counts (and so the same groups). Collective: every rank's create meets
 * here. */
static int shards_alike(pgrt_train *t, pgrt_comm *c, size_t n, uint64_t norm_blocks,
                        uint64_t step_blocks)
{
    double hi[3] = {(double)n, (double)norm_blocks, (double)step_blocks};
    double lo[3] = {hi[0], hi[1], hi[2]};
    pgrt_stream *s = NULL;
    int rc;
    if ((rc = pgrt_stream_create(t->ctx, &s)) ||
        (rc = pgrt_comm_all_reduce_host(c, s, hi, 3, PGRT_COMM_MAX)) ||
        (rc = pgrt_comm_all_reduce_host(c, s, lo, 3, PGRT_COMM_MIN))) {
        pgrt_stream_destroy(&s);
        rt_msg_append(" (pgrt_train_create: comparing the ranks' shards)");
        return rc;
    }
    pgrt_stream_destroy(&s);
    if (hi[0] != lo[0] || hi[1] != lo[1] || hi[2] != lo[2])
        return rt_fail(PGRT_EINVAL, "pgrt_train_create: the ranks' shards differ (%.0f to %.0f "
                       "tensors, %.0f to %.0f norm blocks): a sharded optimizer needs every "
                       "rank's tensors of the same element counts", lo[0], hi[0], lo[1], hi[1]);
    return 0;
}

/* The folded optimizer's table, groups, buffers and kernels. The moments
 * are the slots' (allocated already). */
static int folded_create(pgrt_train *t, const pgrt_train_params *p, size_t n)
{
    const pgk_desc *d_norm, *d_fin, *d_step;
    int rc;
    if ((rc = find("adamw_multi_norm", &d_norm)) || (rc = find("adamw_multi_finalize", &d_fin)) ||
        (rc = find("adamw_multi_step", &d_step)))
        return rc;
    bool clip = p->max_norm > 0.0f && p->norm != PGRT_TRAIN_NORM_OFF;
    bool global = p->norm == PGRT_TRAIN_NORM_GLOBAL;
    t->ngroups = !clip ? 0 : global ? 1 : (uint32_t)t->layers;
    t->norm_eps = global ? 1e-6f : 0.0f;
    if (t->layers > UINT32_MAX - 1 || n > INT32_MAX)
        return rt_fail(PGRT_ERANGE, "pgrt_train_create: %zu tensors are too many for one table",
                       n);
    pgk_optim_entry *e = calloc(n, sizeof *e);
    uint32_t *g = calloc(t->layers + 1, sizeof *g);
    if (!e || !g) {
        free(e);
        free(g);
        return rt_fail(PGRT_ENOMEM, "pgrt_train_create: out of memory");
    }
    uint64_t norm_blocks = 0, step_blocks = 0;
    for (size_t i = 0; i < n; i++) {
        const tensor_slot *sl = &t->slots[i];
        size_t l = i / t->per_layer;
        if (i % t->per_layer == 0 && !global)
            g[l] = (uint32_t)norm_blocks;
        pgrt_buf *copy = p->tensors[i].copy;
        e[i] = (pgk_optim_entry){
            .grad = {sl->grad->ptr, sl->n, (uint32_t)norm_blocks},
            .param = sl->param->ptr,
            .m = sl->m->ptr,
            .v = sl->v->ptr,
            .copy = copy ? copy->ptr : 0,
            .first_block = (uint32_t)step_blocks,
            .group = global || !clip ? 0 : (uint32_t)l,
            .copy_type = !copy ? PGK_COPY_NONE
                         : copy->type == PG_BF16 ? PGK_COPY_BF16 : PGK_COPY_F16,
        };
        norm_blocks += pgk_adamw_norm_blocks(sl->n);
        step_blocks += pgk_adamw_multi_blocks(sl->n);
        if (norm_blocks > INT32_MAX || step_blocks > INT32_MAX) {
            rc = rt_fail(PGRT_ERANGE, "pgrt_train_create: the tensors need more than 2^31 blocks "
                         "a pass");
            goto done;
        }
    }
    g[global ? 1 : t->layers] = (uint32_t)norm_blocks;
    size_t groups = t->ngroups ? t->ngroups : 1;
    size_t table_words = n * sizeof *e / sizeof(uint32_t);
    char err[256] = "";
    if ((rc = knobs_sized(d_norm, norm_blocks, (uint32_t)n, &t->kn_norm, &t->cfg_norm)) ||
        (rc = knobs_sized(d_step, step_blocks, (uint32_t)n, &t->kn_step, &t->cfg_step)))
        goto done;
    if (pgk_launch_for(d_fin, NULL, &t->cfg_finalize, err, sizeof err)) {
        rc = rt_fail(PGRT_EKERNEL, "adamw_multi_finalize: %s", err);
        goto done;
    }
    if ((rc = pgrt_kernel_get(t->ctx, d_norm, &t->kn_norm, &t->k_norm)) ||
        (rc = pgrt_kernel_get(t->ctx, d_fin, NULL, &t->k_finalize)) ||
        (rc = pgrt_kernel_get(t->ctx, d_step, &t->kn_step, &t->k_step)) ||
        (rc = pgrt_buf_alloc(t->ctx, PG_U32, table_words, &t->table)) ||
        (rc = pgrt_buf_upload(t->table, 0, e, table_words)) ||
        (rc = pgrt_buf_alloc(t->ctx, PG_U32, t->layers + 1, &t->groups)) ||
        (rc = pgrt_buf_upload(t->groups, 0, g, t->layers + 1)) ||
        (rc = pgrt_buf_alloc(t->ctx, PG_F32, norm_blocks, &t->partials)) ||
        (rc = pgrt_buf_alloc(t->ctx, PG_U32, PGK_OPTIM_GROUPS + 2 * groups, &t->state)) ||
        (rc = pgrt_buf_memset(t->state, 0)))
        goto done;
    /* Before any step every group reads "no clipping, zero norm". */
    for (size_t k = 0; k < groups && !rc; k++) {
        const float one = 1.0f;
        rc = pgrt_buf_upload(t->state, PGK_OPTIM_GROUPS + 2 * k, &one, 1);
    }
    t->folded = true;
    t->stats.launches_per_step = t->ngroups ? 3 : 2;
    if (p->shard_comm)
        rc = shards_alike(t, p->shard_comm, n, norm_blocks, step_blocks);
done:
    free(e);
    free(g);
    return rc;
}

int pgrt_train_create(pgrt_ctx *ctx, const pgrt_train_params *p, pgrt_train **out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, p, "params");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    int rc = check_params(ctx, p);
    if (rc)
        return rc;
    const pgk_desc *d_adv, *d_adamw;
    if ((rc = find("adamw_hyper_advance", &d_adv)) || (rc = find("adamw_step_dev", &d_adamw)))
        return rc;

    size_t n = p->layers * p->tensors_per_layer;
    bool folded = false;
    if ((rc = choose_optimizer(p, n, &folded)))
        return rc;
    pgrt_train *t = calloc(1, sizeof *t);
    if (!t)
        return rt_fail(PGRT_ENOMEM, "pgrt_train_create: out of memory");
    t->ctx = ctx;
    t->layers = p->layers;
    t->per_layer = p->tensors_per_layer;
    t->max_norm = p->norm == PGRT_TRAIN_NORM_OFF ? 0.0f : p->max_norm;
    t->layer_backward = p->layer_backward;
    t->head = p->head;
    t->after_update = p->after_update;
    t->shard_comm = p->shard_comm;
    t->user = p->user;
    t->log = p->log;
    t->lr_host = p->lr;
    t->graphs = p->graph == PGRT_TRAIN_GRAPH_ON ||
                (p->graph == PGRT_TRAIN_GRAPH_ENV && graphs_from_env());
    t->slots = calloc(n, sizeof *t->slots);
    t->grads = calloc(t->per_layer, sizeof *t->grads);
    bool clips = !folded && t->max_norm > 0.0f;
    if (clips)
        t->clips = calloc(t->layers, sizeof *t->clips);
    if (!t->slots || !t->grads || (clips && !t->clips)) {
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
    if (folded && (rc = folded_create(t, p, n)))
        goto fail;

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
    pgrt_buf_destroy(&t->table);
    pgrt_buf_destroy(&t->groups);
    pgrt_buf_destroy(&t->partials);
    pgrt_buf_destroy(&t->state);
    free(t->clips);
    free(t->grads);
    free(t->slots);
    free(t);
}

/* A callback returned rc. If a runtime call inside it failed (the thread's
 * message changed since `serial`), that message says why and gets the step's
 * context once; otherwise the message from before the call is unrelated, and
 * a new one names the callback and the code. A code that is not negative
 * breaks the callbacks' contract and is reported as PGRT_EINVAL. The context
 * is "(head backward)" or "(backward of layer N)", as for the pipeline's own
 * failures. */
#define AFTER_UPDATE (SIZE_MAX - 1) /* callback_failed: the after_update callback */

static int callback_failed(int rc, unsigned serial, size_t layer)
{
    char where[48] = "head backward";
    const char *fn = "head";
    if (layer == AFTER_UPDATE) {
        snprintf(where, sizeof where, "after the update");
        fn = "after_update";
    } else if (layer != SIZE_MAX) {
        snprintf(where, sizeof where, "backward of layer %zu", layer);
        fn = "layer_backward";
    }
    if (rc > 0)
        return rt_fail(PGRT_EINVAL, "pgrt_train_backward: the %s callback returned %d, not 0 or "
                       "a negative PGRT_E* code (%s)", fn, rc, where);
    if (rt_msg_serial() != serial) {
        rt_msg_append(" (%s)", where);
        return rc;
    }
    return rt_fail(rc, "pgrt_train_backward: the %s callback failed with %d (%s) and left no "
                   "message (%s)", fn, rc, pgrt_err_name(rc), where);
}

/* The folded step: every backward, then norm, finalize, update. */
static int enqueue_folded(pgrt_train *t, pgrt_stream *s, uint32_t seq_len)
{
    int rc;
    unsigned serial = rt_msg_serial();
    if (t->head && (rc = t->head(t->user, s, seq_len)))
        return callback_failed(rc, serial, SIZE_MAX);
    for (size_t l = t->layers; l-- > 0;) {
        serial = rt_msg_serial();
        if ((rc = t->layer_backward(t->user, s, l, seq_len)))
            return callback_failed(rc, serial, l);
    }
    uint32_t nt = (uint32_t)(t->layers * t->per_layer);
    pgrt_devptr partials = t->partials->ptr;
    if (t->ngroups) {
        pgrt_arg a[3] = {pgrt_arg_ptr(t->table->ptr), pgrt_arg_u32(nt), pgrt_arg_ptr(partials)};
        if ((rc = rt_kernel_launch_cfg(t->k_norm, s, &t->cfg_norm, &t->kn_norm, a, 3)))
            return rc;
        /* sharded: block b's squares over every rank's shard, the same
         * sums on every rank (so the same coefficient and skip) */
        if (t->shard_comm &&
            (rc = pgrt_comm_all_reduce(t->shard_comm, s, t->partials, 0,
                                       pgrt_buf_count(t->partials), PGRT_COMM_SUM))) {
            rt_msg_append(" (the clip's partial sums over the ranks)");
            return rc;
        }
    }
    pgrt_arg f[7] = {pgrt_arg_ptr(partials),       pgrt_arg_ptr(t->groups->ptr),
                     pgrt_arg_u32(t->ngroups),     pgrt_arg_f32(t->max_norm),
                     pgrt_arg_f32(t->norm_eps),    pgrt_arg_ptr(t->state->ptr),
                     pgrt_arg_ptr(t->hyper->ptr)};
    if ((rc = rt_kernel_launch_cfg(t->k_finalize, s, &t->cfg_finalize, NULL, f, 7)))
        return rc;
    pgrt_arg u[4] = {pgrt_arg_ptr(t->table->ptr), pgrt_arg_u32(nt), pgrt_arg_ptr(t->state->ptr),
                     pgrt_arg_ptr(t->hyper->ptr)};
    if ((rc = rt_kernel_launch_cfg(t->k_step, s, &t->cfg_step, &t->kn_step, u, 4)))
        return rc;
    serial = rt_msg_serial();
    if (t->after_update && (rc = t->after_update(t->user, s, seq_len)))
        return callback_failed(rc, serial, AFTER_UPDATE);
    return 0;
}

/* The loop itself: the launches of one step, in order. */
static int enqueue_step(pgrt_train *t, pgrt_stream *s, uint32_t seq_len)
{
    if (t->folded)
        return enqueue_folded(t, s, seq_len);
    pgrt_arg h = pgrt_arg_ptr(t->hyper->ptr);
    int rc = rt_kernel_launch_cfg(t->k_advance, s, &t->cfg_advance, NULL, &h, 1);
    if (rc)
        return rc;
    unsigned serial = rt_msg_serial();
    if (t->head && (rc = t->head(t->user, s, seq_len)))
        return callback_failed(rc, serial, SIZE_MAX);
    for (size_t l = t->layers; l-- > 0;) {
        tensor_slot *sl = &t->slots[l * t->per_layer];
        serial = rt_msg_serial();
        if ((rc = t->layer_backward(t->user, s, l, seq_len)))
            return callback_failed(rc, serial, l);
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
    serial = rt_msg_serial();
    if (t->after_update && (rc = t->after_update(t->user, s, seq_len)))
        return callback_failed(rc, serial, AFTER_UPDATE);
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
    if (t->folded || !t->clips)
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
    RT_NONNULL(__func__, t, "pipeline");
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
    /* the other ranks gone or stalled (a collective in the callbacks): an
     * eager rerun meets the same, on a communicator aborted by now */
    if (rc == PGRT_ECOMM || rc == PGRT_ETIMEOUT)
        return why[0] ? rt_fail(rc, "%s", why) : rc;
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
    RT_NONNULL(__func__, t, "pipeline");
    if (!(lr >= 0.0f) || !isfinite(lr))
        return rt_fail(PGRT_EINVAL, "pgrt_train_set_lr: lr %g must be finite and >= 0",
                       (double)lr);
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
    RT_NONNULL(__func__, t, "pipeline");
    if (layer >= t->layers)
        return rt_fail(PGRT_ERANGE, "pgrt_train_layer_norm: layer %zu of %zu", layer, t->layers);
    if (t->folded && t->ngroups) {
        float v[2];
        size_t g = t->ngroups == 1 ? 0 : layer;
        int rc = pgrt_buf_download_async(t->state, PGK_OPTIM_GROUPS + 2 * g, v, 2, s);
        if (rc || (rc = RT_CU(&t->ctx->drv, StreamSynchronize, (rt_stream_cu(s)))))
            return rc;
        if (scale)
            *scale = v[0];
        if (norm)
            *norm = v[1];
        return 0;
    }
    if (!t->clips)
        return rt_fail(PGRT_ESTATE, "pgrt_train_layer_norm: clipping is off (max_norm 0)");
    return pgrt_clip_result(t->clips[layer], s, scale, norm);
}

bool pgrt_train_folded(const pgrt_train *t) { return t && t->folded; }

int pgrt_train_skipped(pgrt_train *t, pgrt_stream *s, uint32_t *skipped, bool *last_skipped)
{
    RT_NONNULL(__func__, t, "pipeline");
    if (!t->folded)
        return rt_fail(PGRT_ESTATE, "pgrt_train_skipped: the per-tensor optimizer never skips");
    uint32_t v[2];
    int rc = pgrt_buf_download_async(t->state, 0, v, 2, s);
    if (rc || (rc = RT_CU(&t->ctx->drv, StreamSynchronize, (rt_stream_cu(s)))))
        return rc;
    if (skipped)
        *skipped = v[PGK_OPTIM_SKIPPED];
    if (last_skipped)
        *last_skipped = v[PGK_OPTIM_SKIP] != 0;
    return 0;
}

int pgrt_train_moments(pgrt_train *t, size_t i, pgrt_buf **m, pgrt_buf **v)
{
    RT_NONNULL(__func__, t, "pipeline");
    if (i >= t->layers * t->per_layer)
        return rt_fail(PGRT_EINVAL, "pgrt_train_moments: tensor %zu of %zu", i,
                       t->layers * t->per_layer);
    if (m)
        *m = t->slots[i].m;
    if (v)
        *v = t->slots[i].v;
    return 0;
}

pgrt_buf *pgrt_train_state_buf(pgrt_train *t) { return t && t->folded ? t->state : NULL; }

int pgrt_train_stats_get(const pgrt_train *t, pgrt_train_stats *out)
{
    RT_NONNULL(__func__, t, "pipeline");
    RT_NONNULL(__func__, out, "out");
    *out = t->stats;
    return 0;
}
