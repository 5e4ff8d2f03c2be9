/* SPDX-License-Identifier: MIT */
/* pgrt_lm's state on the host: the adapter, gradients and statistics read
 * back, and the checkpoint state (optimizer moments, steps, the identity
 * of the run) saved and loaded. */
#include "lm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int download_into(pgrt_lm *m, pgrt_buf *src, pgrt_adapter *a)
{
    if (!src)
        return model_fail(PGRT_ESTATE, "pgrt_lm: gradients were not kept (keep_grads)");
    for (size_t i = 0; i < a->count; i++) {
        const lora_d *d = &m->lora[a->w[i].layer * PGRT_LINEAR_COUNT + a->w[i].module];
        /* pair by pair: each of the rank it has here */
        if (d->a < 0 || a->w[i].r != d->r)
            return model_fail(PGRT_EINVAL, "pgrt_lm: the adapter does not match the model's "
                              "LoRA (layer %d %s: r %d, here %d)", a->w[i].layer,
                              pgrt_linear_name(a->w[i].module), a->w[i].r, d->a < 0 ? 0 : d->r);
        int rc = pgrt_buf_download(src, (size_t)d->a, a->w[i].a, (size_t)d->r * a->w[i].in);
        if (!rc)
            rc = pgrt_buf_download(src, (size_t)d->b, a->w[i].b, (size_t)a->w[i].out * d->r);
        if (rc)
            return rc;
    }
    return 0;
}

int pgrt_lm_adapter_get(pgrt_lm *m, pgrt_adapter *a)
{
    RT_NONNULL(__func__, m, "lm");
    RT_NONNULL(__func__, a, "a");
    return download_into(m, m->p, a);
}

int pgrt_lm_grads_get(pgrt_lm *m, pgrt_adapter *a)
{
    RT_NONNULL(__func__, m, "lm");
    RT_NONNULL(__func__, a, "a");
    return download_into(m, m->gkeep, a);
}

int pgrt_lm_stats_get(const pgrt_lm *m, pgrt_lm_stats *out)
{
    RT_NONNULL(__func__, m, "lm");
    RT_NONNULL(__func__, out, "out");
    memset(out, 0, sizeof *out);
    pgrt_train_stats ts;
    int rc = pgrt_train_stats_get(m->train, &ts);
    if (rc)
        return rc;
    out->eager_steps = ts.eager_steps;
    out->graph_steps = ts.graph_steps;
    out->captures = ts.captures;
    out->capture_failures = ts.capture_failures;
    out->arena_bytes = m->arena_bytes;
    out->recompute_layers = m->recompute;
    out->weight_bytes = m->weight_bytes;
    out->lora_bytes = m->lora_bytes;
    out->launches_per_step = m->launches + ts.launches_per_step;
    for (int i = 0; i < PGRT_LM_TIME_COUNT; i++)
        out->time_ms[i] = m->prof_ms[i];
    out->kernel_count = m->prof_nk;
    memcpy(out->kernels, m->prof_k, m->prof_nk * sizeof *m->prof_k);
    return 0;
}

/* ---------------------------------------------------------------- optimizer state */

/* What an optimizer state file must agree on with the pgrt_lm loading it:
 * the metadata, as text. rank: r, or with pairs of other ranks
 * (rank_pattern) "r:" and a hash of every pair's rank (lm_lora_layout), so
 * that a state of other per-pair ranks is refused even where the total
 * matches. */
static void state_identity(const pgrt_lm *m, char keys[][16], char vals[][32], size_t *n)
{
    static const char *const names[] = {"format", "layers", "hidden", "vocab",
                                        "rank",   "targets", "dtype", "lora_params"};
    unsigned long long v[] = {0, (unsigned long long)m->c.layers, (unsigned long long)m->c.hidden,
                              (unsigned long long)m->c.vocab, (unsigned long long)m->r,
                              m->targets, m->bf16, (unsigned long long)m->nlora};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(keys[i], 16, "%s", names[i]);
        if (i == 0)
            snprintf(vals[i], 32, "ptxgen-lm-optimizer-1");
        else if (i == 6)
            snprintf(vals[i], 32, "%s", v[i] ? "bf16" : "f32");
        else if (i == 4 && m->rank_sig)
            snprintf(vals[i], 32, "%u:%016llx", (unsigned)m->r, (unsigned long long)m->rank_sig);
        else
            snprintf(vals[i], 32, "%llu", v[i]);
    }
    *n = sizeof names / sizeof names[0];
}

/* The state's tensors in the file: the LoRA parameters (the f32 masters,
 * so a resume is exact whatever the adapter file's dtype), AdamW's moments,
 * the hyper buffer and the optimizer's u32 words. */
enum { ST_PARAMS, ST_M, ST_V, ST_HYPER, ST_WORDS, ST_DCTR, ST_COUNT };
static const char *const state_names[ST_COUNT] = {"lora_params", "exp_avg",         "exp_avg_sq",
                                                  "hyper",       "optimizer_words", "dropout_counter"};

static int state_bufs(pgrt_lm *m, pgrt_buf *bufs[ST_COUNT])
{
    bufs[ST_PARAMS] = m->p;
    int rc = pgrt_train_moments(m->train, 0, &bufs[ST_M], &bufs[ST_V]);
    bufs[ST_HYPER] = pgrt_train_hyper_buf(m->train);
    bufs[ST_WORDS] = pgrt_train_state_buf(m->train);
    bufs[ST_DCTR] = m->dctr;
    return rc;
}

/* Elements of state tensor i in the file: a sharded optimizer's arrays
 * count as the unsharded ones (so the file is the same either way). */
static size_t state_count(const pgrt_lm *m, int i, pgrt_buf *b)
{
    if (m->shard && i <= ST_V)
        return m->nlora ? m->nlora : 1;
    return b ? pgrt_buf_count(b) : 0;
}

/* A sharded optimizer's moments, every rank's slice, into full (world x
 * piece each, allocated here): collective. */
static int gather_moments(pgrt_lm *m, pgrt_stream *s, pgrt_buf *bufs[ST_COUNT],
                          pgrt_buf *full[2])
{
    size_t n = (size_t)m->world * m->piece;
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++)
        if (!(rc = pgrt_buf_alloc(m->ctx, PG_F32, n, &full[k])))
            rc = pgrt_comm_all_gather(m->comm, s, bufs[ST_M + k], 0, full[k], 0, m->piece);
    if (rc || (rc = lm_wait(m, s)))
        return rc;
    bufs[ST_M] = full[0];
    bufs[ST_V] = full[1];
    return 0;
}

static int state_check(pgrt_lm *m, const char *fn, const char *path)
{
    RT_NONNULL(fn, m, "lm");
    /* a sharded save without a path still gathers: every rank takes part */
    if (!(m->shard && strcmp(fn, "pgrt_lm_state_save") == 0))
        RT_NONNULL(fn, path, "path");
    if (m->pending)
        return model_fail(PGRT_ESTATE, "%s: %d of the step's %d micro-batches have run; the "
                          "state is whole at a step boundary", fn, m->pending, m->accum);
    return 0;
}

int pgrt_lm_state_save(pgrt_lm *m, pgrt_stream *s, const char *path)
{
    int rc = state_check(m, "pgrt_lm_state_save", path);
    pgrt_buf *bufs[ST_COUNT], *full[2] = {0};
    if (rc || (rc = state_bufs(m, bufs)) ||
        (m->shard && (rc = gather_moments(m, s, bufs, full))) || (rc = lm_wait(m, s)) || !path) {
        pgrt_buf_destroy(&full[0]);
        pgrt_buf_destroy(&full[1]);
        return rc;
    }
    void *host[ST_COUNT] = {0};
    pgrt_st_out out[ST_COUNT];
    size_t nout = 0;
    for (int i = 0; i < ST_COUNT && !rc; i++) {
        if (!bufs[i])
            continue;
        size_t n = state_count(m, i, bufs[i]);
        if (!(host[i] = malloc(n * 4)))
            rc = model_fail(PGRT_ENOMEM, "pgrt_lm_state_save: out of host memory");
        else if (!(rc = pgrt_buf_download(bufs[i], 0, host[i], n)))
            out[nout++] = (pgrt_st_out){state_names[i], i >= ST_WORDS ? PGRT_ST_U32 : PGRT_ST_F32,
                                        1, {(int64_t)n}, host[i]};
    }
    char keys[8][16], vals[8][32];
    const char *kp[8], *vp[8];
    size_t nm;
    state_identity(m, keys, vals, &nm);
    for (size_t i = 0; i < nm; i++) {
        kp[i] = keys[i];
        vp[i] = vals[i];
    }
    if (!rc)
        rc = pgrt_st_write(path, out, nout, kp, vp, nm);
    for (int i = 0; i < ST_COUNT; i++)
        free(host[i]);
    pgrt_buf_destroy(&full[0]);
    pgrt_buf_destroy(&full[1]);
    return rc;
}

int pgrt_lm_state_load(pgrt_lm *m, pgrt_stream *s, const char *path)
{
    int rc = state_check(m, "pgrt_lm_state_load", path);
    pgrt_buf *bufs[ST_COUNT];
    if (rc || (rc = state_bufs(m, bufs)))
        return rc;
    pgrt_st_file *f = NULL;
    if ((rc = pgrt_st_open(path, &f)))
        return rc;
    char keys[8][16], vals[8][32];
    size_t nm;
    state_identity(m, keys, vals, &nm);
    for (size_t i = 0; i < nm && !rc; i++) {
        const char *got = pgrt_st_metadata_get(f, keys[i]);
        if (!got || strcmp(got, vals[i]) != 0)
            rc = model_fail(PGRT_EINVAL, "pgrt_lm_state_load: %s: %s is %s, this run's is %s",
                            path, keys[i], got ? got : "missing", vals[i]);
    }
    for (int i = 0; i < ST_COUNT && !rc; i++) {
        const pgrt_st_tensor *t = pgrt_st_find(f, state_names[i]);
        size_t n = state_count(m, i, bufs[i]);
        pgrt_st_dtype want = i >= ST_WORDS ? PGRT_ST_U32 : PGRT_ST_F32;
        if (!bufs[i] && !t)
            continue;
        if (!t || !bufs[i] || t->dtype != want || t->count != (int64_t)n)
            rc = model_fail(PGRT_EINVAL, "pgrt_lm_state_load: %s: tensor %s %s", path,
                            state_names[i], !t ? "is missing" : !bufs[i] ? "is not this "
                            "optimizer's" : "has another dtype or size");
    }
    /* everything checked: now the device (ordered after the work on s) */
    if (!rc)
        rc = pgrt_stream_sync(s);
    for (int i = 0; i < ST_COUNT && !rc; i++) {
        const pgrt_st_tensor *t = bufs[i] ? pgrt_st_find(f, state_names[i]) : NULL;
        if (!t)
            continue;
        void *h = malloc(t->nbytes ? t->nbytes : 1);
        if (!h) {
            rc = model_fail(PGRT_ENOMEM, "pgrt_lm_state_load: out of host memory");
            break;
        }
        memcpy(h, t->data, t->nbytes); /* unaligned in the file */
        size_t at = 0, n = (size_t)t->count;
        if (m->shard && (i == ST_M || i == ST_V)) {
            /* this rank's slice; past the end, zero */
            at = (size_t)m->rank * m->piece;
            n = at < n ? (n - at < m->piece ? n - at : m->piece) : 0;
            rc = pgrt_buf_memset(bufs[i], 0);
        }
        if (!rc && n)
            rc = pgrt_buf_upload(bufs[i], 0, (const float *)h + at, n);
        free(h);
    }
    pgrt_st_close(&f);
    if (!rc && m->gacc)
        rc = pgrt_buf_memset(m->gacc, 0);
    if (!rc && m->sched) {
        /* the base lr is the run's: the schedule's first word, kept */
        rc = pgrt_buf_upload(m->sched, 0, m->sched_host, 5);
    }
    return rc;
}
