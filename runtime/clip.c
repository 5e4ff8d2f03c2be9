/* SPDX-License-Identifier: MIT */
/*
 * The fused gradient-clip pipeline: everything that can be decided once
 * (partials layout, launch configurations, loaded kernels) is decided at
 * creation, so a step is 2N+1 launches on one stream and nothing else, and
 * a step captures into a graph.
 */
#include "rt_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct clip_slot {
    uint32_t n;          /* elements; 0 = skipped */
    uint32_t offset;     /* first partial of this buffer */
    pgk_knobs kn_sq, kn_apply;
    pgk_launch cfg_sq, cfg_apply;
    pgrt_kernel *k_sq, *k_apply;
} clip_slot;

struct pgrt_clip {
    pgrt_ctx *ctx;
    size_t n;
    clip_slot *slots;
    uint32_t total;      /* partial sums over all buffers */
    pgk_knobs kn_reduce;
    pgk_launch cfg_reduce;
    pgrt_kernel *k_reduce;
    pgrt_buf *partials;
    pgrt_buf *result;    /* [scale, norm] */
};

/* Knobs for one launch: the defaults with `name` set to value. */
static int knobs_with(const pgk_desc *d, const char *name, uint32_t value, pgk_knobs *kn)
{
    pgk_knobs_default(d, kn);
    int k = pgk_knob_index(d, name);
    if (k < 0 || k >= PGK_MAX_KNOBS)
        return rt_fail(PGRT_EKERNEL, "%s has no knob \"%s\" for the clip pipeline to size it by",
                       d->name, name);
    if (value < d->knobs[k].min || value > d->knobs[k].max)
        return rt_fail(PGRT_ERANGE, "%s: %s = %u is outside [%u, %u]", d->name, name, value,
                       d->knobs[k].min, d->knobs[k].max);
    kn->v[k] = value;
    return 0;
}

static int launch_for(const pgk_desc *d, const pgk_knobs *kn, pgk_launch *cfg)
{
    char err[256] = "";
    int rc = pgk_launch_for(d, kn, cfg, err, sizeof err);
    if (rc)
        return rt_fail(PGRT_ERANGE, "%s: %s", d->name, err[0] ? err : pg_strerror(rc));
    return 0;
}

static int find(const char *name, const pgk_desc **d)
{
    *d = pgk_find(name);
    if (!*d)
        return rt_fail(PGRT_ENOTFOUND, "clip pipeline: kernel \"%s\" is not in the catalog", name);
    return 0;
}

int pgrt_clip_create(pgrt_ctx *ctx, const size_t *sizes, size_t nbufs, pgrt_clip **out)
{
    if (!ctx || !out || (nbufs > 0 && !sizes))
        return rt_fail(PGRT_EINVAL, "pgrt_clip_create: %s is NULL",
                       !ctx ? "ctx" : !out ? "out" : "sizes");
    *out = NULL;
    if (nbufs == 0)
        return rt_fail(PGRT_EINVAL, "pgrt_clip_create: no buffers");

    const pgk_desc *d_sq, *d_reduce, *d_apply;
    int rc;
    if ((rc = find("squared_sum_reduce", &d_sq)) || (rc = find("clip_scale_reduce", &d_reduce)) ||
        (rc = find("gradient_clip_gpu_scale", &d_apply)))
        return rc;

    pgrt_clip *c = calloc(1, sizeof *c);
    clip_slot *slots = calloc(nbufs, sizeof *slots);
    if (!c || !slots) {
        free(c);
        free(slots);
        return rt_fail(PGRT_ENOMEM, "pgrt_clip_create: out of memory");
    }
    c->ctx = ctx;
    c->n = nbufs;
    c->slots = slots;

    uint64_t total = 0;
    for (size_t i = 0; i < nbufs; i++) {
        clip_slot *s = &slots[i];
        if (sizes[i] > UINT32_MAX) {
            rc = rt_fail(PGRT_ERANGE, "pgrt_clip_create: buffer %zu has %zu elements; the clip "
                         "kernels count in u32", i, sizes[i]);
            goto fail;
        }
        s->n = (uint32_t)sizes[i];
        s->offset = (uint32_t)total;
        if (s->n == 0)
            continue;
        if ((rc = knobs_with(d_sq, "n", s->n, &s->kn_sq)) ||
            (rc = launch_for(d_sq, &s->kn_sq, &s->cfg_sq)) ||
            (rc = knobs_with(d_apply, "n", s->n, &s->kn_apply)) ||
            (rc = launch_for(d_apply, &s->kn_apply, &s->cfg_apply)))
            goto fail;
        /* The partials slice is sized by the published block count; a
         * descriptor that launched more blocks would write past it. */
        uint32_t blocks = pgk_squared_sum_num_blocks(s->n);
        if (s->cfg_sq.grid[0] != blocks || s->cfg_sq.grid[1] != 1 || s->cfg_sq.grid[2] != 1) {
            rc = rt_fail(PGRT_EKERNEL, "squared_sum_reduce launches %u x %u x %u blocks for n = %u "
                         "but pgk_squared_sum_num_blocks says %u",
                         s->cfg_sq.grid[0], s->cfg_sq.grid[1], s->cfg_sq.grid[2], s->n, blocks);
            goto fail;
        }
        total += blocks;
        if (total > UINT32_MAX) {
            rc = rt_fail(PGRT_ERANGE, "pgrt_clip_create: more than 2^32 partial sums");
            goto fail;
        }
        /* Descriptors that bake nothing give one cached kernel for every
         * size; the lookup is per size in case one day they do. */
        if ((rc = pgrt_kernel_get(ctx, d_sq, &s->kn_sq, &s->k_sq)) ||
            (rc = pgrt_kernel_get(ctx, d_apply, &s->kn_apply, &s->k_apply)))
            goto fail;
    }
    if (total == 0) {
        rc = rt_fail(PGRT_EINVAL, "pgrt_clip_create: all %zu buffers are empty", nbufs);
        goto fail;
    }
    c->total = (uint32_t)total;
    if ((rc = knobs_with(d_reduce, "total_n", c->total, &c->kn_reduce)) ||
        (rc = launch_for(d_reduce, &c->kn_reduce, &c->cfg_reduce)) ||
        (rc = pgrt_kernel_get(ctx, d_reduce, &c->kn_reduce, &c->k_reduce)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, c->total, &c->partials)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, 2, &c->result)))
        goto fail;
    /* Before any run the result reads "no clipping, zero norm". */
    const float init[2] = {1.0f, 0.0f};
    if ((rc = pgrt_buf_upload(c->result, 0, init, 2)))
        goto fail;
    *out = c;
    return 0;

fail:
    pgrt_clip_destroy(&c);
    return rc;
}

void pgrt_clip_destroy(pgrt_clip **pc)
{
    if (!pc || !*pc)
        return;
    pgrt_clip *c = *pc;
    *pc = NULL;
    pgrt_buf_destroy(&c->partials);
    pgrt_buf_destroy(&c->result);
    free(c->slots);
    free(c);
}

int pgrt_clip_run(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads, size_t nbufs,
                  float max_norm)
{
    if (!c || !grads)
        return rt_fail(PGRT_EINVAL, "pgrt_clip_run: %s is NULL", !c ? "state" : "grads");
    if (nbufs != c->n)
        return rt_fail(PGRT_EINVAL, "pgrt_clip_run: %zu buffers for a state sized for %zu", nbufs,
                       c->n);
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return rt_fail(PGRT_EINVAL, "pgrt_clip_run: max_norm %g must be finite and > 0",
                       (double)max_norm);
    for (size_t i = 0; i < nbufs; i++) {
        const pgrt_buf *g = grads[i];
        /* An empty gradient has no buffer (one cannot allocate 0 elements). */
        if (!g && c->slots[i].n == 0)
            continue;
        if (!g)
            return rt_fail(PGRT_EINVAL, "pgrt_clip_run: grads[%zu] is NULL", i);
        if (g->type != PG_F32 || g->count != c->slots[i].n || g->ctx != c->ctx)
            return rt_fail(PGRT_EINVAL, "pgrt_clip_run: grads[%zu] is %zu x %s%s; the state "
                           "expects %u x f32", i, g->count, pg_type_name(g->type),
                           g->ctx != c->ctx ? " of another context" : "", c->slots[i].n);
    }

    int rc;
    pgrt_devptr partials = c->partials->ptr;
    for (size_t i = 0; i < nbufs; i++) {
        const clip_slot *sl = &c->slots[i];
        if (sl->n == 0)
            continue;
        pgrt_arg a[3] = {pgrt_arg_ptr(grads[i]->ptr),
                         pgrt_arg_ptr(partials + (pgrt_devptr)sl->offset * sizeof(float)),
                         pgrt_arg_u32(sl->n)};
        if ((rc = rt_kernel_launch_cfg(sl->k_sq, s, &sl->cfg_sq, &sl->kn_sq, a, 3))) {
            rt_msg_append(" (clip buffer %zu of %zu)", i, nbufs);
            return rc;
        }
    }
    pgrt_arg r[4] = {pgrt_arg_ptr(partials), pgrt_arg_u32(c->total), pgrt_arg_f32(max_norm),
                     pgrt_arg_ptr(c->result->ptr)};
    if ((rc = rt_kernel_launch_cfg(c->k_reduce, s, &c->cfg_reduce, &c->kn_reduce, r, 4)))
        return rc;
    for (size_t i = 0; i < nbufs; i++) {
        const clip_slot *sl = &c->slots[i];
        if (sl->n == 0)
            continue;
        pgrt_arg a[3] = {pgrt_arg_ptr(grads[i]->ptr), pgrt_arg_ptr(c->result->ptr),
                         pgrt_arg_u32(sl->n)};
        if ((rc = rt_kernel_launch_cfg(sl->k_apply, s, &sl->cfg_apply, &sl->kn_apply, a, 3))) {
            rt_msg_append(" (clip buffer %zu of %zu)", i, nbufs);
            return rc;
        }
    }
    return 0;
}

int pgrt_clip_result(pgrt_clip *c, pgrt_stream *s, float *scale, float *norm)
{
    if (!c)
        return rt_fail(PGRT_EINVAL, "pgrt_clip_result: state is NULL");
    float v[2];
    int rc = pgrt_buf_download_async(c->result, 0, v, 2, s);
    if (rc)
        return rc;
    if ((rc = RT_CU(&c->ctx->drv, StreamSynchronize, (rt_stream_cu(s)))))
        return rc;
    if (scale)
        *scale = v[0];
    if (norm)
        *norm = v[1];
    return 0;
}

pgrt_buf *pgrt_clip_result_buf(pgrt_clip *c) { return c ? c->result : NULL; }

uint32_t pgrt_clip_partials(const pgrt_clip *c) { return c ? c->total : 0; }
