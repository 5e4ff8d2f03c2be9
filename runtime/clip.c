/* SPDX-License-Identifier: MIT */
/*
 * The fused gradient-clip pipeline: everything that can be decided once
 * (partials layout, launch configurations, loaded kernels) is decided at
 * creation, so a step is 2N+1 launches on one stream and nothing else, and
 * a step captures into a graph.
 *
 * The multi-tensor path makes it 3 launches: the sum and the scale kernels
 * walk a device table of the buffers (pointer, size, first block). The
 * state keeps a few tables, one a set of buffer pointers, so that one state
 * serving layer after layer uploads each layer's table once. A graph that
 * captured the multi path reads its table when it is replayed, so a
 * captured table is never rewritten; it lives as long as the state.
 */
#include "rt_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A device table and the pointers it holds (nlive of them). */
typedef struct clip_table {
    pgrt_buf *buf;       /* 2 * nlive entries, as u32 words */
    uint64_t *ptrs;
    bool valid;          /* the device holds ptrs (the upload was issued) */
    bool captured;       /* a graph may read it: never rewritten */
} clip_table;

/* Tables a state keeps: a few layers' worth. When all are taken by graphs,
 * a new set of buffers runs the per-buffer launches. */
#define CLIP_MAX_TABLES 64

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

    /* The multi-tensor path. */
    bool multi;          /* wanted (pgrt_clip_set_multi) */
    bool multi_ok;       /* possible: the grids fit */
    uint32_t nlive;      /* non-empty buffers: the entries of each table */
    pgk_knobs kn_sq_multi, kn_apply_multi;
    pgk_launch cfg_sq_multi, cfg_apply_multi;
    pgrt_kernel *k_sq_multi, *k_apply_multi;
    /* Host image of a device table: the sum kernel's nlive entries, then
     * the scale kernel's (their first_block differ). */
    pgk_clip_entry *host_table;
    clip_table tables[CLIP_MAX_TABLES];
    size_t ntables;
    size_t last;         /* the table of the last multi run */
    size_t victim;       /* where the search for a table to reuse starts */
};

static size_t table_words(const pgrt_clip *c)
{
    return 2 * (size_t)c->nlive * sizeof(pgk_clip_entry) / sizeof(uint32_t);
}

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

/* The multi-tensor kernels, their launches and the table's host image.
 * Grids past the launch limit leave the multi path off (multi_ok false):
 * the per-buffer launches serve, which is no error. */
static int multi_create(pgrt_clip *c, const pgk_desc *d_sq, const pgk_desc *d_apply,
                        uint64_t total_apply)
{
    if (total_apply > INT32_MAX || c->total > INT32_MAX)
        return 0;
    int rc;
    int ib = pgk_knob_index(d_sq, "nbufs"), ib2 = pgk_knob_index(d_apply, "nbufs");
    if ((rc = knobs_with(d_sq, "total_blocks", c->total, &c->kn_sq_multi)) ||
        (rc = knobs_with(d_apply, "total_blocks", (uint32_t)total_apply, &c->kn_apply_multi)))
        return rc;
    if (ib < 0 || ib2 < 0)
        return rt_fail(PGRT_EKERNEL, "the clip pipeline's _multi kernels have no knob \"nbufs\"");
    c->kn_sq_multi.v[ib] = c->nlive;
    c->kn_apply_multi.v[ib2] = c->nlive;
    if ((rc = launch_for(d_sq, &c->kn_sq_multi, &c->cfg_sq_multi)) ||
        (rc = launch_for(d_apply, &c->kn_apply_multi, &c->cfg_apply_multi)) ||
        (rc = pgrt_kernel_get(c->ctx, d_sq, &c->kn_sq_multi, &c->k_sq_multi)) ||
        (rc = pgrt_kernel_get(c->ctx, d_apply, &c->kn_apply_multi, &c->k_apply_multi)))
        return rc;
    if (c->cfg_sq_multi.grid[0] != c->total || c->cfg_apply_multi.grid[0] != total_apply)
        return rt_fail(PGRT_EKERNEL, "the clip pipeline's _multi kernels launch %u and %u blocks "
                       "for tables of %u and %llu", c->cfg_sq_multi.grid[0],
                       c->cfg_apply_multi.grid[0], c->total, (unsigned long long)total_apply);
    c->host_table = calloc(2 * (size_t)c->nlive, sizeof *c->host_table);
    if (!c->host_table)
        return rt_fail(PGRT_ENOMEM, "pgrt_clip_create: out of memory");
    /* Sizes and first blocks never change; only the pointers do. */
    pgk_clip_entry *sq = c->host_table, *ap = c->host_table + c->nlive;
    uint32_t e = 0, first_sq = 0, first_ap = 0;
    for (size_t i = 0; i < c->n; i++) {
        const clip_slot *sl = &c->slots[i];
        if (sl->n == 0)
            continue;
        sq[e] = (pgk_clip_entry){0, sl->n, first_sq};
        ap[e] = (pgk_clip_entry){0, sl->n, first_ap};
        first_sq += sl->cfg_sq.grid[0];
        first_ap += sl->cfg_apply.grid[0];
        e++;
    }
    c->multi_ok = true;
    return 0;
}

int pgrt_clip_create(pgrt_ctx *ctx, const size_t *sizes, size_t nbufs, pgrt_clip **out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    if (nbufs > 0)
        RT_NONNULL(__func__, sizes, "sizes");
    *out = NULL;
    if (nbufs == 0)
        return rt_fail(PGRT_EINVAL, "pgrt_clip_create: no buffers");

    const pgk_desc *d_sq, *d_reduce, *d_apply, *d_sq_multi, *d_apply_multi;
    int rc;
    if ((rc = find("squared_sum_reduce", &d_sq)) || (rc = find("clip_scale_reduce", &d_reduce)) ||
        (rc = find("gradient_clip_gpu_scale", &d_apply)) ||
        (rc = find("squared_sum_reduce_multi", &d_sq_multi)) ||
        (rc = find("gradient_clip_gpu_scale_multi", &d_apply_multi)))
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
    c->multi = true; /* see pgrt_clip_set_multi */

    uint64_t total = 0, total_apply = 0;
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
        total_apply += s->cfg_apply.grid[0];
        c->nlive++;
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
    if ((rc = knobs_with(d_reduce, "n", c->total, &c->kn_reduce)) ||
        (rc = launch_for(d_reduce, &c->kn_reduce, &c->cfg_reduce)) ||
        (rc = pgrt_kernel_get(ctx, d_reduce, &c->kn_reduce, &c->k_reduce)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, c->total, &c->partials)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, 2, &c->result)))
        goto fail;
    if ((rc = multi_create(c, d_sq_multi, d_apply_multi, total_apply)))
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
    for (size_t i = 0; i < c->ntables; i++) {
        pgrt_buf_destroy(&c->tables[i].buf);
        free(c->tables[i].ptrs);
    }
    free(c->host_table);
    free(c->slots);
    free(c);
}

/* Whether s is capturing; an unanswered question counts as yes (the
 * per-buffer path is right either way). */
static bool stream_capturing(pgrt_clip *c, pgrt_stream *s)
{
    if (s && s->capturing)
        return true;
    if (!s || !c->ctx->drv.StreamIsCapturing)
        return false;
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (c->ctx->drv.StreamIsCapturing(s->cu, &status) != CUDA_SUCCESS)
        return true;
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

static bool table_holds(const pgrt_clip *c, const clip_table *t, pgrt_buf *const *grads)
{
    if (!t->valid)
        return false;
    for (size_t i = 0, e = 0; i < c->n; i++)
        if (c->slots[i].n && t->ptrs[e++] != (uint64_t)grads[i]->ptr)
            return false;
    return true;
}

/* A table to (re)write for new buffers: a fresh one while there is room,
 * else one no graph has captured. NULL when there is none (or the
 * allocation failed: the per-buffer launches serve all the same). */
static clip_table *table_for_write(pgrt_clip *c)
{
    if (c->ntables < CLIP_MAX_TABLES) {
        clip_table *t = &c->tables[c->ntables];
        t->ptrs = calloc(c->nlive, sizeof *t->ptrs);
        if (!t->ptrs || pgrt_buf_alloc(c->ctx, PG_U32, table_words(c), &t->buf)) {
            free(t->ptrs);
            t->ptrs = NULL;
            return NULL;
        }
        c->ntables++;
        return t;
    }
    for (size_t k = 0; k < c->ntables; k++) {
        clip_table *t = &c->tables[(c->victim + k) % c->ntables];
        if (!t->captured) {
            c->victim = (c->victim + k + 1) % c->ntables;
            return t;
        }
    }
    return NULL;
}

/* Decide the path of one run and find its table: the multi path when it is
 * wanted and a table holds these buffers, or one can be written for them
 * (outside capture: an upload on s, ordered after earlier runs that read
 * it). Otherwise the per-buffer launches, which is no error. */
static int multi_prepare(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads,
                         clip_table **use)
{
    *use = NULL;
    if (!c->multi || !c->multi_ok)
        return 0;
    clip_table *hit = NULL;
    if (c->last < c->ntables && table_holds(c, &c->tables[c->last], grads))
        hit = &c->tables[c->last];
    for (size_t k = 0; k < c->ntables && !hit; k++)
        if (table_holds(c, &c->tables[k], grads))
            hit = &c->tables[k];
    bool capturing = stream_capturing(c, s);
    if (!hit) {
        if (capturing || !(hit = table_for_write(c)))
            return 0;
        for (size_t i = 0, e = 0; i < c->n; i++) {
            if (c->slots[i].n == 0)
                continue;
            uint64_t p = grads[i]->ptr;
            c->host_table[e].ptr = p;
            c->host_table[c->nlive + e].ptr = p;
            hit->ptrs[e++] = p;
        }
        hit->valid = false;
        int rc = pgrt_buf_upload_async(hit->buf, 0, c->host_table, table_words(c), s);
        if (rc)
            return rc;
        hit->valid = true;
    }
    if (capturing)
        hit->captured = true;
    c->last = (size_t)(hit - c->tables);
    *use = hit;
    return 0;
}

int pgrt_clip_set_multi(pgrt_clip *c, bool multi)
{
    RT_NONNULL(__func__, c, "state");
    c->multi = multi;
    return 0;
}

bool pgrt_clip_multi(const pgrt_clip *c) { return c && c->multi && c->multi_ok; }

/* The buffers of a run: as many as the state has, of its sizes. */
static int check_grads(const char *fn, const pgrt_clip *c, pgrt_buf *const *grads, size_t nbufs)
{
    RT_NONNULL(fn, c, "state");
    RT_NONNULL(fn, grads, "grads");
    if (nbufs != c->n)
        return rt_fail(PGRT_EINVAL, "%s: %zu buffers for a state sized for %zu", fn, nbufs, c->n);
    for (size_t i = 0; i < nbufs; i++) {
        const pgrt_buf *g = grads[i];
        /* An empty gradient has no buffer (one cannot allocate 0 elements). */
        if (!g && c->slots[i].n == 0)
            continue;
        if (!g)
            return rt_fail(PGRT_EINVAL, "%s: grads[%zu] is NULL", fn, i);
        if (g->type != PG_F32 || g->count != c->slots[i].n || g->ctx != c->ctx)
            return rt_fail(PGRT_EINVAL, "%s: grads[%zu] is %zu x %s%s; the state "
                           "expects %u x f32", fn, i, g->count, pg_type_name(g->type),
                           g->ctx != c->ctx ? " of another context" : "", c->slots[i].n);
    }
    return 0;
}

int pgrt_clip_prepare(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads, size_t nbufs)
{
    int rc = check_grads("pgrt_clip_prepare", c, grads, nbufs);
    if (rc)
        return rc;
    if (stream_capturing(c, s))
        return rt_fail(PGRT_ECAPTURE, "pgrt_clip_prepare: the stream is capturing; prepare "
                       "before pgrt_capture_begin");
    clip_table *table = NULL;
    return multi_prepare(c, s, grads, &table);
}

int pgrt_clip_run(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads, size_t nbufs,
                  float max_norm)
{
    int rc = check_grads("pgrt_clip_run", c, grads, nbufs);
    if (rc)
        return rc;
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return rt_fail(PGRT_EINVAL, "pgrt_clip_run: max_norm %g must be finite and > 0",
                       (double)max_norm);

    clip_table *table = NULL;
    rc = multi_prepare(c, s, grads, &table);
    if (rc)
        return rc;
    bool use_multi = table != NULL;
    pgrt_devptr partials = c->partials->ptr;
    if (use_multi) {
        pgrt_arg a[3] = {pgrt_arg_ptr(table->buf->ptr), pgrt_arg_u32(c->nlive),
                         pgrt_arg_ptr(partials)};
        if ((rc = rt_kernel_launch_cfg(c->k_sq_multi, s, &c->cfg_sq_multi, &c->kn_sq_multi, a, 3)))
            return rc;
    }
    for (size_t i = 0; i < nbufs && !use_multi; i++) {
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
    if (use_multi) {
        pgrt_devptr ap = table->buf->ptr + (pgrt_devptr)c->nlive * sizeof(pgk_clip_entry);
        pgrt_arg a[3] = {pgrt_arg_ptr(ap), pgrt_arg_u32(c->nlive), pgrt_arg_ptr(c->result->ptr)};
        return rt_kernel_launch_cfg(c->k_apply_multi, s, &c->cfg_apply_multi, &c->kn_apply_multi,
                                    a, 3);
    }
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
    RT_NONNULL(__func__, c, "state");
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
