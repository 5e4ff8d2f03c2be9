/* SPDX-License-Identifier: MIT */
/* pgrt_lm's life: the params checked against the device and the memory
 * plan, the weights, arena, LoRA state and kernels made ready, the dry run
 * that prepares every GEMM of the step, the pgrt_train pipeline around the
 * step (lm.c's callbacks), and the teardown. */
#include "lm_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kernel_names[K_COUNT] = {
#define X_(id, name) name,
    LM_KERNELS(X_)
#undef X_
};

/* pgrt_train's after_update with a sharded optimizer: every rank's updated
 * slice of the parameters to every rank, in place. */
static int gather_shards(void *user, pgrt_stream *s, uint32_t seq_len)
{
    (void)seq_len;
    pgrt_lm *m = user;
    return pgrt_comm_all_gather(m->comm, s, m->p, (size_t)m->rank * m->piece, m->p, 0, m->piece);
}

/* ---------------------------------------------------------------- create */

/* Data parallel: the reduction stream, its two events, and each layer's
 * slice of the gradients (the pairs lie layer after layer: lm_plan.c). */
static int comm_setup(pgrt_lm *m, pgrt_comm *c, bool shard)
{
    int L = m->c.layers, rc;
    m->comm = c;
    m->rank = pgrt_comm_rank(c);
    m->world = pgrt_comm_world(c);
    if (m->rank < 0 || m->world < 1)
        return m->rank < 0 ? m->rank : m->world;
    if ((m->shard = shard)) {
        /* equal slices (NCCL's collectives take one count a rank), each
         * starting 256 bytes apart */
        size_t w = (size_t)m->world, n = m->nlora ? m->nlora : 1;
        m->piece = ((n + w - 1) / w + 63) / 64 * 64;
        if (m->piece > UINT32_MAX / w)
            return model_fail(PGRT_ERANGE, "pgrt_lm_create: %zu LoRA parameters over %d ranks: "
                              "a slice of at most 2^32 / world", m->nlora, m->world);
    }
    if (!(m->layer_off = malloc(sizeof *m->layer_off * ((size_t)L + 1))))
        return model_fail(PGRT_ENOMEM, "pgrt_lm_create: out of host memory");
    size_t end = m->nlora;
    m->layer_off[L] = end;
    for (int l = L; l-- > 0;) {
        size_t start = end;
        for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
            const lora_d *d = &m->lora[l * PGRT_LINEAR_COUNT + i];
            if (d->a >= 0 && (size_t)d->a < start)
                start = (size_t)d->a;
        }
        m->layer_off[l] = end = start;
    }
    if (shard) /* one reduction on the step's stream: no stream of its own */
        return 0;
    if ((rc = pgrt_stream_create(m->ctx, &m->cs)) || (rc = pgrt_event_create(m->ctx, &m->ready)) ||
        (rc = pgrt_event_create(m->ctx, &m->done)))
        return rc;
    return 0;
}

/* The memory plan: the fewest recomputed layers (none unless asked or
 * needed) whose bytes fit the free memory and, with AUTO and
 * max_memory_gib, keep the process within it; a plan that cannot fit is
 * refused with its numbers before anything is allocated. */
static int memory_plan(pgrt_ctx *ctx, const pgrt_device_info *di, const pgrt_lm_params *p,
                       lm_plan *pl)
{
    size_t free_b = 0, total_b = 0;
    int rc = pgrt_ctx_mem_info(ctx, &free_b, &total_b);
    if (rc)
        return rc;
    uint64_t budget = free_b ? free_b : 1, used = total_b - free_b;
    double cap = p->recompute == PGRT_LM_RECOMPUTE_AUTO ? p->max_memory_gib * 1073741824.0 : 0;
    if (cap > 0)
        budget = cap <= (double)used ? 1 : (uint64_t)fmin((double)budget, cap - (double)used);
    if (lm_plan_fit(p, lm_act16(p, di->arch_target), budget, pl))
        return 0;
    static const char *const how[] = {"no layer", "every layer", "every layer"};
    uint64_t need = lm_plan_bytes(pl, p);
    char bound[96] = "";
    if (cap > 0)
        snprintf(bound, sizeof bound, "; max_memory_gib %.2f less the %.2f GiB in use leaves "
                 "%.2f", p->max_memory_gib, used / 1073741824.0, budget / 1073741824.0);
    return model_fail(PGRT_ENOMEM, "batch %d x seq %d needs %.2f GiB of device memory with %s "
                      "recomputed (weights %.2f, activations %.2f); %.2f GiB are free%s",
                      p->batch, p->seq, need / 1073741824.0, how[p->recompute % 3],
                      pl->weights / 1073741824.0, pl->arena * 4 / 1073741824.0,
                      free_b / 1073741824.0, bound);
}

/* The model's settings from the params, the device and the plan. */
static void settings(pgrt_lm *m, const pgrt_lm_params *p, const pgrt_device_info *di,
                     const lm_plan *pl)
{
    const pgrt_model_config *c = pgrt_model_files_config(p->model);
    const pgrt_adapter *ad = p->adapter;
    m->c = *c;
    m->B = p->batch;
    m->S = p->seq;
    m->T = p->batch * p->seq;
    m->r = ad->cfg.r;
    m->lora_scale = (float)pgrt_adapter_scale(&ad->cfg);
    m->targets = ad->cfg.targets;
    m->bf16 = p->dtype == PGRT_LM_BF16;
    m->chunk = pl->chunk;
    m->recompute = pl->recompute;
    m->profile = p->profile && !p->graph;
    m->lowp = m->bf16;
    m->target = di->target;
    m->arch_target = di->arch_target;
    m->sms = di->sm_count > 0 ? (unsigned)di->sm_count : 0;
    m->packed = p->packed;
    m->rope_table = p->packed || c->rope.kind != PGRT_ROPE_DEFAULT;
    m->accum = p->grad_accum > 1 ? p->grad_accum : 1;
    m->graph = p->graph;
    if (ad->cfg.dropout > 0) {
        double pd = ad->cfg.dropout;
        m->drop = true;
        /* each rank its own masks; rank 0's are a single process's */
        m->drop_seed = p->dropout_seed ^ (p->comm ? (uint32_t)pgrt_comm_rank(p->comm) * 0x9e3779b9u : 0u);
        m->drop_keep_min = (uint32_t)fmin(4294967295.0, floor(pd * 4294967296.0 + 0.5));
        m->drop_scale = (float)(1.0 / (1.0 - pd));
    }
}

/* The catalog's descriptors of the step's kernels (m->desc): the SIMT set,
 * the tensor-core attention in bf16 where the target has it, and the
 * packed rows' variants. */
static int choose_kernels(pgrt_lm *m)
{
    for (int i = 0; i < K_COUNT; i++) {
        m->desc[i] = pgk_find(kernel_names[i]);
        if (!m->desc[i])
            return model_fail(PGRT_ENOTFOUND, "pgrt_lm: kernel %s is not in the catalog",
                              kernel_names[i]);
    }
    /* bf16 on sm_80+: attention on the tensor cores (attention_mma_*, the
     * same arguments and knobs; bf16 operands, f32 statistics and
     * outputs); f32 keeps the SIMT kernels and their 1e-5 reference */
    if (m->lowp) {
        static const char *const mma[3] = {"attention_mma_forward", "attention_mma_backward_dq",
                                           "attention_mma_backward_dkv"};
        const pgk_desc *d[3];
        bool all = true;
        for (int i = 0; i < 3; i++)
            all &= (d[i] = pgk_find(mma[i])) && pgk_supports(d[i], m->target);
        if (all) {
            m->desc[K_ATT_FWD] = d[0];
            m->desc[K_ATT_DQ] = d[1];
            m->desc[K_ATT_DKV] = d[2];
        }
    }
    /* with the plan's fa3 (sm_90a, act16, rows not packed): wgmma and TMA,
     * FlashAttention-3 shaped, on bf16 q, k, v (attention_sm90_*) */
    if (m->fa3) {
        static const char *const fa3[3] = {"attention_sm90_forward", "attention_sm90_backward_dq",
                                           "attention_sm90_backward_dkv"};
        const int slot[3] = {K_ATT_FWD, K_ATT_DQ, K_ATT_DKV};
        for (int i = 0; i < 3; i++)
            if (!(m->desc[slot[i]] = pgk_find(fa3[i])))
                return model_fail(PGRT_ENOTFOUND, "pgrt_lm: kernel %s is not in the catalog",
                                  fa3[i]);
    }
    /* packed rows: RoPE at the batch's positions, attention bounded by
     * documents (the same arguments with the document starts appended) */
    if (m->packed || m->rope_table) {
        bool mma = m->desc[K_ATT_FWD] != pgk_find(kernel_names[K_ATT_FWD]);
        static const char *const docs[2][3] = {
            {"attention_forward_docs_f32", "attention_backward_dq_docs_f32",
             "attention_backward_dkv_docs_f32"},
            {"attention_mma_forward_docs", "attention_mma_backward_dq_docs",
             "attention_mma_backward_dkv_docs"}};
        static const char *const tab[2] = {"rope_forward_table_f32", "rope_backward_table_f32"};
        const int slot[5] = {K_ATT_FWD, K_ATT_DQ, K_ATT_DKV, K_ROPE_FWD, K_ROPE_BWD};
        for (int i = m->packed ? 0 : 3; i < 5; i++) {
            const char *name = i < 3 ? docs[mma][i] : tab[i - 3];
            if (!(m->desc[slot[i]] = pgk_find(name)))
                return model_fail(PGRT_ENOTFOUND, "pgrt_lm: kernel %s is not in the catalog",
                                  name);
        }
    }
    return 0;
}

/* The step's own device inputs: the uploaded integers (ids, labels, the
 * loss scale, positions, document starts, the error word) and, for RoPE
 * from a table, the inverse frequencies (and without packing the
 * positions, uploaded once). */
static int device_inputs(pgrt_lm *m)
{
    pgrt_ctx *ctx = m->ctx;
    int rc;
    /* ids [T], labels [T], the loss scale, positions [T], document starts
     * [T], the error word: a micro-batch uploads the first 2T + 1 words,
     * 4T + 1 packed */
    if ((rc = pgrt_buf_alloc(ctx, PG_S32, (size_t)m->T * 4 + 1 + 64, &m->ints)))
        return rc;
    m->ids = pgrt_buf_ptr(m->ints);
    m->labels = m->ids + (uint64_t)m->T * 4u;
    m->scale = m->labels + (uint64_t)m->T * 4u;
    m->pos = m->scale + 4u;
    m->docs = m->pos + (uint64_t)m->T * 4u;
    m->errw = m->docs + (uint64_t)m->T * 4u;
    if ((rc = pgrt_buf_memset(m->ints, 0)))
        return rc;
    if (m->rope_table) {
        /* the default table as rope_forward_f32 forms it, then the
         * checkpoint's scaling (Llama 3) as transformers applies it; without
         * packing the positions are t mod S, uploaded once */
        uint32_t half = (uint32_t)m->c.head_dim / 2;
        float *f = malloc(sizeof *f * (half > (uint32_t)m->T ? half : (uint32_t)m->T));
        rc = f ? pgk_rope_inv_freq((float)m->c.rope_theta, (uint32_t)m->c.head_dim, f) : PGRT_ENOMEM;
        if (!rc)
            rc = pgrt_model_rope_scale(&m->c, f, (int)half);
        if (!rc && !(rc = pgrt_buf_alloc(ctx, PG_F32, half, &m->inv_freq)))
            rc = pgrt_buf_upload(m->inv_freq, 0, f, half);
        if (!rc && !m->packed) {
            int32_t *pos = (int32_t *)f;
            for (int t = 0; t < m->T; t++)
                pos[t] = t % m->S;
            rc = pgrt_buf_upload(m->ints, (size_t)m->T * 2 + 1, pos, (size_t)m->T);
        }
        free(f);
        if (rc) {
            if (rc == PGRT_ENOMEM)
                model_fail(rc, "pgrt_lm_create: out of host memory");
            return rc;
        }
    }
    return 0;
}

/* The LoRA state: the accumulation sum, the schedule, the parameters,
 * gradients (and kept ones), the fused path's bf16 copies, and the
 * adapter's matrices uploaded. */
static int lora_state(pgrt_lm *m, const pgrt_lm_params *p)
{
    pgrt_ctx *ctx = m->ctx;
    const pgrt_adapter *ad = p->adapter;
    int rc;
    if (m->accum > 1 && ((rc = pgrt_buf_alloc(ctx, PG_F32, m->nlora ? m->nlora : 1, &m->gacc)) ||
                         (rc = pgrt_buf_memset(m->gacc, 0))))
        return rc;
    const pgrt_lm_schedule *sc = &p->schedule;
    if (sc->kind != PGRT_LM_SCHED_CONSTANT || sc->warmup_steps || sc->floor > 0) {
        m->sched_host[0] = p->lr;
        m->sched_host[1] = (float)sc->warmup_steps;
        m->sched_host[2] = (float)sc->total_steps;
        m->sched_host[3] = sc->floor;
        m->sched_host[4] = (float)sc->kind;
        if ((rc = pgrt_buf_alloc(ctx, PG_F32, 5, &m->sched)) ||
            (rc = pgrt_buf_upload(m->sched, 0, m->sched_host, 5)))
            return rc;
    }
    /* sharded: world slices, zero past nlora (a zero gradient keeps a
     * zero parameter zero) */
    size_t nl = m->shard ? (size_t)m->world * m->piece : m->nlora ? m->nlora : 1;
    if ((rc = pgrt_buf_alloc(ctx, PG_F32, nl, &m->p)) || (rc = pgrt_buf_memset(m->p, 0)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, nl, &m->g)) || (rc = pgrt_buf_memset(m->g, 0)))
        return rc;
    if (p->keep_grads && ((rc = pgrt_buf_alloc(ctx, PG_F32, nl, &m->gkeep)) ||
                          (rc = pgrt_buf_memset(m->gkeep, 0))))
        return rc;
    m->lora_bytes = (uint64_t)nl * 4 * (2 + (p->keep_grads ? 1 : 0)) +
                    (uint64_t)m->nlora * 4 * (m->gacc ? 1 : 0) +
                    (uint64_t)(m->shard ? m->piece : m->nlora) * 8;
    if (m->fused) {
        if ((rc = pgrt_buf_alloc(ctx, PG_U16, 2 * m->nlora, &m->pbf)))
            return rc;
        m->lora_bytes += (uint64_t)m->nlora * 4;
    }
    for (size_t i = 0; i < ad->count; i++) {
        const lora_d *d = &m->lora[ad->w[i].layer * PGRT_LINEAR_COUNT + ad->w[i].module];
        if ((rc = pgrt_buf_upload(m->p, (size_t)d->a, ad->w[i].a, (size_t)d->r * ad->w[i].in)) ||
            (rc = pgrt_buf_upload(m->p, (size_t)d->b, ad->w[i].b, (size_t)ad->w[i].out * d->r)))
            return rc;
    }
    return 0;
}

/* The optimizer pipeline over the LoRA vector (or, sharded, this rank's
 * slice of it), with the model's forward and backward as its callbacks. */
static int train_pipeline(pgrt_lm *m, const pgrt_lm_params *p)
{
    int rc;
    pgrt_train_tensor tt = {m->p, m->g};
    if (m->shard) {
        size_t at = (size_t)m->rank * m->piece;
        if ((rc = pgrt_buf_view(m->p, at, m->piece, &m->pshard)) ||
            (rc = pgrt_buf_view(m->g, at, m->piece, &m->gshard)))
            return rc;
        tt = (pgrt_train_tensor){m->pshard, m->gshard};
    }
    pgrt_train_params tp = {
        .layers = 1,
        .tensors_per_layer = 1,
        .tensors = &tt,
        /* clipping off still measures the norm: a bound no norm reaches */
        .max_norm = p->max_norm > 0 ? p->max_norm : FLT_MAX,
        .lr = p->lr,
        .beta1 = p->beta1,
        .beta2 = p->beta2,
        .eps = p->eps,
        .weight_decay = p->weight_decay,
        .graph = p->graph ? PGRT_TRAIN_GRAPH_ON : PGRT_TRAIN_GRAPH_OFF,
        .layer_backward = lm_backward_cb,
        .head = lm_head_cb,
        .user = m,
        .shard_comm = m->shard ? m->comm : NULL,
        .after_update = m->shard ? gather_shards : NULL,
    };
    return pgrt_train_create(m->ctx, &tp, &m->train);
}

int pgrt_lm_create(pgrt_ctx *ctx, const pgrt_lm_params *p, pgrt_lm **out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    int rc = lm_check_params(p);
    if (rc)
        return rc;
    pgrt_device_info di;
    if ((rc = pgrt_ctx_device_info(ctx, &di)))
        return rc;
    if (p->dtype == PGRT_LM_BF16 && pg_target_sm(di.target) < 80)
        return rt_fail(PGRT_ETARGET, "pgrt_lm_create: bf16 needs target sm_80 or newer (bf16 "
                       "conversions and tensor cores); this context builds for %s%s: use f32",
                       pg_target_name(di.target), di.target_override ? " (a target override)" : "");
    lm_plan pl;
    if ((rc = memory_plan(ctx, &di, p, &pl)))
        return rc;

    pgrt_lm *m = calloc(1, sizeof *m);
    if (!m)
        return model_fail(PGRT_ENOMEM, "pgrt_lm_create: out of host memory");
    m->ctx = ctx;
    settings(m, p, &di, &pl);
    int L = m->c.layers;
    m->lw = calloc((size_t)L, sizeof *m->lw);
    m->la = calloc((size_t)L, sizeof *m->la);
    m->lora = malloc(sizeof *m->lora * (size_t)L * PGRT_LINEAR_COUNT);
    m->hid = malloc(sizeof(int32_t) * ((size_t)m->T * 4 + 1));
    m->hloss = malloc(sizeof(float) * (size_t)m->T);
    if (!m->lw || !m->la || !m->lora || !m->hid || !m->hloss) {
        rc = model_fail(PGRT_ENOMEM, "pgrt_lm_create: out of host memory");
        goto fail;
    }
    m->hlab = m->hid + m->T;
    m->fa3 = pl.fa3;
    if ((rc = choose_kernels(m)))
        goto fail;
    lm_lora_layout(m, p->adapter);
    m->fused = lm_fusable(m);
    m->act16 = pl.act16;
    if (m->act16 && !m->fused) {
        rc = model_fail(PGRT_ESTATE, "pgrt_lm_create: bf16 MLP activations planned for a model "
                        "whose LoRA is not inside the base GEMMs");
        goto fail;
    }
    if (p->comm && (rc = comm_setup(m, p->comm, p->shard_optimizer)))
        goto fail;
    if (m->accum > 1 && m->nlora > UINT32_MAX) {
        rc = model_fail(PGRT_ERANGE, "pgrt_lm: grad_accum: %zu LoRA parameters, at most 2^32 - 1",
                        m->nlora);
        goto fail;
    }
    if ((rc = lm_upload_weights(m, p->model)) || (rc = lm_arena_layout(m, &pl)))
        goto fail;
    if (m->drop && ((rc = pgrt_buf_alloc(ctx, PG_U32, 1, &m->dctr)) ||
                    (rc = pgrt_buf_memset(m->dctr, 0))))
        goto fail;
    if (pl.scratch && (rc = pgrt_buf_alloc(ctx, PG_F32, pl.scratch, &m->wscratch)))
        goto fail;
    if ((rc = pgrt_buf_view(m->arena, (size_t)((m->loss - pgrt_buf_ptr(m->arena)) / 4u),
                            (size_t)m->T, &m->lossview)))
        goto fail;
    if ((rc = device_inputs(m)) || (rc = lora_state(m, p)))
        goto fail;
    /* every kernel of the step into the module cache: nothing loads during a
     * capture. The non-GEMM kernels are resolved for good (m->k); the dry
     * run loads the linear layers' and learns their workspace sizes. */
    if ((rc = lm_kernels_resolve(m)))
        goto fail;
    m->side = m->act16 && !m->profile;
    if (m->side && ((rc = pgrt_stream_create(ctx, &m->ls)) ||
                    (rc = pgrt_event_create(ctx, &m->ev_fork)) ||
                    (rc = pgrt_event_create(ctx, &m->ev_join)) ||
                    (rc = pgrt_event_create(ctx, &m->ev_o))))
        goto fail;
    m->warming = true;
    if ((rc = lm_head_cb(m, NULL, (uint32_t)m->S)) || (rc = lm_backward_cb(m, NULL, 0, (uint32_t)m->S)))
        goto fail;
    m->warming = false;
    if (m->ws_need && (rc = pgrt_buf_alloc(ctx, PG_U8, (size_t)m->ws_need, &m->ws)))
        goto fail;
    if (m->ws_side_need &&
        (rc = pgrt_buf_alloc(ctx, PG_U8, (size_t)m->ws_side_need, &m->ws_side)))
        goto fail;
    if (m->lcnt_need && ((rc = pgrt_buf_alloc(ctx, PG_U32, m->lcnt_need, &m->lcnt)) ||
                         (rc = pgrt_buf_memset(m->lcnt, 0))))
        goto fail;

    if ((rc = train_pipeline(m, p)))
        goto fail;
    *out = m;
    return 0;
fail:
    pgrt_lm_destroy(&m);
    return rc;
}

void pgrt_lm_destroy(pgrt_lm **lmp)
{
    if (!lmp || !*lmp)
        return;
    pgrt_lm *m = *lmp;
    /* data parallel: the gradient sums done before their buffer goes (a
     * communicator that failed was aborted, which ends them) */
    if (m->cs)
        pgrt_stream_sync(m->cs);
    if (m->ls) /* and the side stream's products */
        pgrt_stream_sync(m->ls);
    pgrt_train_destroy(&m->train);
    pgrt_buf_destroy(&m->embed.buf);
    pgrt_buf_destroy(&m->head.buf);
    pgrt_buf_destroy(&m->norm_final);
    if (m->lw)
        for (int l = 0; l < m->c.layers; l++) {
            pgrt_buf_destroy(&m->lw[l].norm_in);
            pgrt_buf_destroy(&m->lw[l].norm_post);
            pgrt_buf_destroy(&m->lw[l].q_norm);
            pgrt_buf_destroy(&m->lw[l].k_norm);
            for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
                pgrt_buf_destroy(&m->lw[l].lin[i].buf);
                pgrt_buf_destroy(&m->lw[l].bias[i]);
            }
        }
    pgrt_buf_destroy(&m->wscratch);
    lm_gemms_destroy(m);
    pgrt_buf_destroy(&m->pbf);
    pgrt_event_destroy(&m->ev[0]);
    pgrt_event_destroy(&m->ev[1]);
    pgrt_buf_destroy(&m->ws);
    pgrt_buf_destroy(&m->ws_side);
    pgrt_stream_destroy(&m->ls);
    pgrt_event_destroy(&m->ev_fork);
    pgrt_event_destroy(&m->ev_join);
    pgrt_event_destroy(&m->ev_o);
    pgrt_buf_destroy(&m->lcnt);
    pgrt_buf_destroy(&m->lossview);
    pgrt_buf_destroy(&m->arena);
    pgrt_buf_destroy(&m->ints);
    pgrt_buf_destroy(&m->inv_freq);
    pgrt_buf_destroy(&m->gacc);
    pgrt_buf_destroy(&m->sched);
    pgrt_buf_destroy(&m->dctr);
    pgrt_graph_destroy(&m->micro_graph);
    pgrt_buf_destroy(&m->pshard);
    pgrt_buf_destroy(&m->gshard);
    pgrt_buf_destroy(&m->p);
    pgrt_buf_destroy(&m->g);
    pgrt_buf_destroy(&m->gkeep);
    pgrt_event_destroy(&m->ready);
    pgrt_event_destroy(&m->done);
    pgrt_stream_destroy(&m->cs);
    free(m->layer_off);
    free(m->lw);
    free(m->la);
    free(m->lora);
    free(m->hid);
    free(m->hloss);
    free(m);
    *lmp = NULL;
}
