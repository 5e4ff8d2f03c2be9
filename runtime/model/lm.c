/* SPDX-License-Identifier: MIT */
/* The transformer of pgrt_lm.h: the forward, loss and backward of a step
 * in layer words, the object's life and the pgrt_train pipeline around it.
 * Sizes are lm_plan.c's, the upload lm_weights.c's, the kernels resolved
 * at create lm_launch.c's, the linear layers lm_linear.c's. */
#include "lm_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kernel_names[K_COUNT] = {
#define X_(id, name) name,
    LM_KERNELS(X_)
#undef X_
};

/* ---------------------------------------------------------------- layer ops */

/* The step's kernels other than the linear layers', each on its kernel
 * resolved at create (m->k): the dtype's variant, knobs and launch shape
 * fixed, so a call only gathers its operands. */

/* y = RMSNorm(x + r) * gamma, x + r kept at sum; without r (0), of x.
 * bf16: one kernel that also writes y's bf16 copy to m->xb, the operand
 * of the GEMMs that follow (the same bits as the add, the norm and the
 * cast in turn); f32: residual_add, rms_norm_forward. */
static int norm_fwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_devptr r, pgrt_devptr sum,
                    pgrt_buf *gamma, pgrt_devptr y)
{
    pgrt_devptr gp = pgrt_buf_ptr(gamma);
    if (m->lowp)
        return lm_run(m, s, &m->k.rms_fwd_add[r != 0],
                      ARGS(P(x), P(r ? r : x), P(r ? sum : x), P(gp), P(y), P(m->xb), U(m->T),
                           U(m->c.hidden), F(m->c.rms_norm_eps)));
    int rc = r ? lm_run(m, s, &m->k.add, ARGS(P(x), P(r), P(sum), U((uint64_t)m->T * m->c.hidden)))
               : 0;
    return rc ? rc
              : lm_run(m, s, &m->k.rms_fwd, ARGS(P(r ? sum : x), P(gp), P(y), U(m->T),
                                                 U(m->c.hidden), F(m->c.rms_norm_eps)));
}

/* dx = the RMSNorm backward of (x, gamma) at dy, + r where r is not 0.
 * bf16: one kernel that also writes dx's bf16 copy to m->dyb, the operand
 * of the dX GEMM that follows; f32: the backward, residual_add. */
static int norm_bwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_buf *gamma, pgrt_devptr dy,
                    pgrt_devptr r, pgrt_devptr dx)
{
    pgrt_devptr gp = pgrt_buf_ptr(gamma);
    if (m->lowp)
        return lm_run(m, s, &m->k.rms_bwd_add[r != 0],
                      ARGS(P(x), P(gp), P(dy), P(r ? r : x), P(dx), P(m->dyb), U(m->T),
                           U(m->c.hidden), F(m->c.rms_norm_eps)));
    int rc = lm_run(m, s, &m->k.rms_bwd, ARGS(P(x), P(gp), P(dy), P(dx), P(m->part), U(m->T),
                                              U(m->c.hidden), F(m->c.rms_norm_eps)));
    return rc || !r ? rc
                    : lm_run(m, s, &m->k.add,
                             ARGS(P(r), P(dx), P(dx), U((uint64_t)m->T * m->c.hidden)));
}

/* The token embedding into layer 0's input: in bf16 the rows are
 * gathered into xb and widened into the f32 residual stream. */
static int embed(pgrt_lm *m, pgrt_stream *s)
{
    uint32_t TH = (uint32_t)m->T * (uint32_t)m->c.hidden;
    if (m->lowp) {
        int rc = lm_run(m, s, &m->k.gather,
                        ARGS(P(pgrt_buf_ptr(m->embed.buf)), P(m->ids), P(m->xb), P(m->errw),
                             U(m->T), U(m->c.hidden), U(m->c.vocab)));
        return rc ? rc : lm_run(m, s, &m->k.widen_x, ARGS(P(m->xb), P(m->la[0].x), U(TH)));
    }
    pgrt_devptr emb;
    int rc = weight_f32(m, s, &m->embed, &emb);
    return rc ? rc
              : lm_run(m, s, &m->k.gather, ARGS(P(emb), P(m->ids), P(m->la[0].x), P(m->errw),
                                                U(m->T), U(m->c.hidden), U(m->c.vocab)));
}

/* RoPE on q and k in place (forward), on dq and dk (backward). */
static int rope(pgrt_lm *m, pgrt_stream *s, const lm_kernel *k, pgrt_devptr q, pgrt_devptr kk)
{
    return lm_run(m, s, k, ARGS(P(q), P(kk), U(m->T), U(m->S), U(m->c.heads), U(m->c.kv_heads),
                                U(m->c.head_dim), F(m->c.rope_theta)));
}

/* Causal attention of layer a: att and the row statistics lse; in bf16
 * also att's copy in xb, the o projection's operand. */
static int att_fwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    int rc = lm_run(m, s, &m->k.att_fwd,
                    ARGS(P(a->q), P(a->k), P(a->v), P(a->att), P(a->lse), U(m->B), U(m->S),
                         U(m->c.heads), U(m->c.kv_heads), U(m->c.head_dim), F(sc)));
    uint32_t n = (uint32_t)m->T * (uint32_t)(m->c.heads * m->c.head_dim);
    return rc || !m->lowp ? rc : lm_run(m, s, &m->k.narrow_att, ARGS(P(a->att), P(m->xb), U(n)));
}

/* dq, then dk and dv, from datt. */
static int att_bwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    int rc = lm_run(m, s, &m->k.att_dq,
                    ARGS(P(a->q), P(a->k), P(a->v), P(a->att), P(m->datt), P(a->lse), P(m->dq),
                         P(m->delta), U(m->B), U(m->S), U(m->c.heads), U(m->c.kv_heads),
                         U(m->c.head_dim), F(sc)));
    return rc ? rc
              : lm_run(m, s, &m->k.att_dkv,
                       ARGS(P(a->q), P(a->k), P(a->v), P(m->datt), P(a->lse), P(m->delta),
                            P(m->dk), P(m->dv), U(m->B), U(m->S), U(m->c.heads),
                            U(m->c.kv_heads), U(m->c.head_dim), F(sc)));
}

/* act = silu(g) u; bf16: act's copy in xb for the down GEMM. */
static int swiglu_fwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    uint32_t n = (uint32_t)m->T * (uint32_t)m->c.intermediate;
    return m->lowp ? lm_run(m, s, &m->k.swiglu_fwd,
                            ARGS(P(a->g), P(a->u), P(a->act), P(m->xb), U(n)))
                   : lm_run(m, s, &m->k.swiglu_fwd, ARGS(P(a->g), P(a->u), P(a->act), U(n)));
}

/* dg, du from dact; bf16: their copies in xb and dyb. */
static int swiglu_bwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    uint32_t n = (uint32_t)m->T * (uint32_t)m->c.intermediate;
    return m->lowp ? lm_run(m, s, &m->k.swiglu_bwd,
                            ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), P(m->xb),
                                 P(m->dyb), U(n)))
                   : lm_run(m, s, &m->k.swiglu_bwd,
                            ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), U(n)));
}

/* The loss of `rows` rows from row r0 on and d(logits) in place; bf16:
 * then the logits' copy for the dX GEMM. */
static int ce(pgrt_lm *m, pgrt_stream *s, uint32_t rows, uint32_t r0)
{
    int last = rows != (uint32_t)m->chunk;
    float scale = 1.0f / (float)((uint64_t)m->B * (m->S - 1));
    uint32_t V = (uint32_t)m->c.vocab;
    int rc = lm_run(m, s, &m->k.ce[last],
                    ARGS(P(m->logits), P(m->labels + (uint64_t)r0 * 4u),
                         P(m->loss + (uint64_t)r0 * 4u), U(rows), U(V), F(scale)));
    return rc || !m->lowp ? rc
                          : lm_run(m, s, &m->k.narrow_logits[last],
                                   ARGS(P(m->logits), P(m->logits_b), U((uint64_t)rows * V)));
}

/* ---------------------------------------------------------------- forward and loss */

/* Layer l from its input norm's output h1 on (layer 0 also computes that
 * norm) through the residual add after the MLP and the norm that
 * follows it: the next layer's input norm, or the final one. */
static int forward_layer(pgrt_lm *m, pgrt_stream *s, int l)
{
    layer_a *a = &m->la[l];
    const layer_w *w = &m->lw[l];
    bool last = l + 1 == m->c.layers;
    pgrt_devptr xnext = last ? m->xf : m->la[l + 1].x, hnext = last ? m->hf : m->la[l + 1].h1;
    pgrt_buf *gnext = last ? m->norm_final : m->lw[l + 1].norm_in;
    int rc;
    if ((l == 0 && (rc = norm_fwd(m, s, a->x, 0, 0, w->norm_in, a->h1))) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_Q, a->h1, a->q)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_K, a->h1, a->k)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_V, a->h1, a->v)) ||
        (rc = rope(m, s, &m->k.rope_fwd, a->q, a->k)) || (rc = att_fwd(m, s, a)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_O, a->att, m->dtmp)) ||
        (rc = norm_fwd(m, s, a->x, m->dtmp, a->xm, w->norm_post, a->h2)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_GATE, a->h2, a->g)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_UP, a->h2, a->u)) ||
        (rc = swiglu_fwd(m, s, a)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_DOWN, a->act, m->dtmp)))
        return rc;
    return norm_fwd(m, s, a->xm, m->dtmp, xnext, gnext, hnext);
}

/* The head: embedding, every layer, the final norm, then the LM head and
 * the cross-entropy over row chunks, leaving d(hf) in m->dh... */
static int head_cb(void *user, pgrt_stream *s, uint32_t seq_len)
{
    (void)seq_len;
    pgrt_lm *m = user;
    uint32_t H = (uint32_t)m->c.hidden, V = (uint32_t)m->c.vocab;
    int rc;
    m->gemm_next = 0; /* the step's first product */
    if (m->fused && (rc = lm_lora_weights(m, s)))
        return rc;
    if ((rc = embed(m, s)))
        return rc;
    for (int l = 0; l < m->c.layers; l++)
        if ((rc = forward_layer(m, s, l)))
            return rc;
    /* the last layer left the final norm's output in hf (and, bf16, its copy in xb) */
    const dweight *hwd = m->head.buf ? &m->head : &m->embed;
    pgrt_devptr hw = pgrt_buf_ptr(hwd->buf);
    if (!m->lowp && (rc = weight_f32(m, s, hwd, &hw)))
        return rc;
    for (int r0 = 0; r0 < m->T; r0 += m->chunk) {
        uint32_t rows = (uint32_t)(m->T - r0 < m->chunk ? m->T - r0 : m->chunk);
        pgrt_devptr hc = m->hf + (uint64_t)r0 * H * 4u, dc = m->dh + (uint64_t)r0 * H * 4u;
        pgrt_devptr hcb = m->xb + (uint64_t)r0 * H * 2u;
        pgrt_gemm_spec fwd = lm_lin(m, PGK_GEMM_FORWARD, m->lowp ? hcb : hc, hw, H, V, false);
        pgrt_gemm_spec dxs = lm_lin(m, PGK_GEMM_BACKWARD_X, m->lowp ? m->logits_b : m->logits,
                                    hw, H, V, false);
        fwd.m = dxs.m = rows;
        if ((rc = lm_gemm(m, s, &fwd, m->logits, 0, PGRT_LM_TIME_GEMM)) ||
            (rc = ce(m, s, rows, (uint32_t)r0)) ||
            (rc = lm_gemm(m, s, &dxs, dc, 0, PGRT_LM_TIME_GEMM)))
            return rc;
    }
    /* d(x_final) (bf16: and its copy in dyb, for the last layer's down GEMM) */
    return norm_bwd(m, s, m->xf, m->norm_final, m->dh, 0, m->dx);
}

/* ---------------------------------------------------------------- backward */

static int backward_layer(pgrt_lm *m, pgrt_stream *s, int l)
{
    layer_a *a = &m->la[l];
    const layer_w *w = &m->lw[l];
    int rc;
    /* m->dx holds d(x_{l+1}) = d(mlp out) */
    /* bf16: the kernel that wrote each dy left its copy in dyb (m->dx:
     * the norm after this layer; dg: xb, du: dyb from SwiGLU; dxm: the
     * norm below); dq, dk, dv are narrowed by linear_bwd. In f32, dyb and
     * xb are 0. */
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_DOWN, a->act, m->dx, m->dyb, m->dact, false)) ||
        (rc = swiglu_bwd(m, s, a)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_GATE, a->h2, m->dg, m->xb, m->dh, false)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_UP, a->h2, m->du, m->dyb, m->dh, true)) ||
        (rc = norm_bwd(m, s, a->xm, w->norm_post, m->dh, m->dx, m->dxm)))
        return rc;
    /* m->dxm = d(x_mid) = d(attention out) */
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_O, a->att, m->dxm, m->dyb, m->datt, false)) ||
        (rc = att_bwd(m, s, a)) || (rc = rope(m, s, &m->k.rope_bwd, m->dq, m->dk)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_Q, a->h1, m->dq, 0, m->dh, false)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_K, a->h1, m->dk, 0, m->dh, true)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_V, a->h1, m->dv, 0, m->dh, true)))
        return rc;
    return norm_bwd(m, s, a->x, w->norm_in, m->dh, m->dxm, m->dx);
}

static int backward_cb(void *user, pgrt_stream *s, size_t layer, uint32_t seq_len)
{
    (void)layer;
    (void)seq_len;
    pgrt_lm *m = user;
    int rc;
    for (int l = m->c.layers; l-- > 0;)
        if ((rc = backward_layer(m, s, l)))
            return rc;
    if (m->gkeep && !m->warming)
        return pgrt_buf_copy_async(m->gkeep, 0, m->g, 0, m->nlora, s);
    return 0;
}

/* ---------------------------------------------------------------- create */

int pgrt_lm_create(pgrt_ctx *ctx, const pgrt_lm_params *p, pgrt_lm **out)
{
    if (!ctx || !out)
        return model_fail(PGRT_EINVAL, "pgrt_lm_create: NULL argument");
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
    const pgrt_hf_config *c = pgrt_model_hf_config(p->model);
    const pgrt_adapter *ad = p->adapter;
    lm_plan pl;
    lm_plan_make(c, ad, p->batch, p->seq, p->dtype == PGRT_LM_BF16, p->head_chunk, &pl);
    uint64_t need = lm_plan_bytes(&pl, p->keep_grads);
    size_t free_b = 0, total_b = 0;
    if ((rc = pgrt_ctx_mem_info(ctx, &free_b, &total_b)))
        return rc;
    if (need > free_b)
        return model_fail(PGRT_ENOMEM,
                          "batch %d x seq %d needs %.2f GiB of device memory; %.2f GiB are free",
                          p->batch, p->seq, need / 1073741824.0, free_b / 1073741824.0);

    pgrt_lm *m = calloc(1, sizeof *m);
    if (!m)
        return model_fail(PGRT_ENOMEM, "pgrt_lm_create: out of host memory");
    m->ctx = ctx;
    m->c = *c;
    m->B = p->batch;
    m->S = p->seq;
    m->T = p->batch * p->seq;
    m->r = ad->cfg.r;
    m->lora_scale = (float)(ad->cfg.alpha / ad->cfg.r);
    m->targets = ad->cfg.targets;
    m->bf16 = p->dtype == PGRT_LM_BF16;
    m->chunk = pl.chunk;
    m->profile = p->profile && !p->graph;
    m->lowp = m->bf16;
    m->target = di.target;
    m->arch_target = di.arch_target;
    m->sms = di.sm_count > 0 ? (unsigned)di.sm_count : 0;
    m->lw = calloc((size_t)c->layers, sizeof *m->lw);
    m->la = calloc((size_t)c->layers, sizeof *m->la);
    m->lora = malloc(sizeof *m->lora * (size_t)c->layers * PGRT_LINEAR_COUNT);
    m->hid = malloc(sizeof(int32_t) * (size_t)m->T * 2);
    m->hloss = malloc(sizeof(float) * (size_t)m->T);
    if (!m->lw || !m->la || !m->lora || !m->hid || !m->hloss) {
        pgrt_lm_destroy(&m);
        return model_fail(PGRT_ENOMEM, "pgrt_lm_create: out of host memory");
    }
    m->hlab = m->hid + m->T;
    for (int i = 0; i < K_COUNT; i++) {
        m->desc[i] = pgk_find(kernel_names[i]);
        if (!m->desc[i]) {
            pgrt_lm_destroy(&m);
            return model_fail(PGRT_ENOTFOUND, "pgrt_lm: kernel %s is not in the catalog",
                              kernel_names[i]);
        }
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
    lm_lora_layout(m, ad);
    m->fused = lm_fusable(m);

    if ((rc = lm_upload_weights(m, p->model)) || (rc = lm_arena_layout(m, &pl)))
        goto fail;
    if (pl.scratch && (rc = pgrt_buf_alloc(ctx, PG_F32, pl.scratch, &m->wscratch)))
        goto fail;
    if ((rc = pgrt_buf_view(m->arena, (size_t)((m->loss - pgrt_buf_ptr(m->arena)) / 4u),
                            (size_t)m->T, &m->lossview)))
        goto fail;
    if ((rc = pgrt_buf_alloc(ctx, PG_S32, (size_t)m->T * 2 + 64, &m->ints)))
        goto fail;
    m->ids = pgrt_buf_ptr(m->ints);
    m->labels = m->ids + (uint64_t)m->T * 4u;
    m->errw = m->labels + (uint64_t)m->T * 4u;
    if ((rc = pgrt_buf_memset(m->ints, 0)))
        goto fail;
    if ((rc = pgrt_buf_alloc(ctx, PG_F32, m->nlora ? m->nlora : 1, &m->p)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, m->nlora ? m->nlora : 1, &m->g)) ||
        (rc = pgrt_buf_memset(m->g, 0)))
        goto fail;
    if (p->keep_grads && ((rc = pgrt_buf_alloc(ctx, PG_F32, m->nlora ? m->nlora : 1, &m->gkeep)) ||
                          (rc = pgrt_buf_memset(m->gkeep, 0))))
        goto fail;
    m->lora_bytes = (uint64_t)m->nlora * 4 * (p->keep_grads ? 5 : 4);
    if (m->fused) {
        if ((rc = pgrt_buf_alloc(ctx, PG_U16, 2 * m->nlora, &m->pbf)))
            goto fail;
        m->lora_bytes += (uint64_t)m->nlora * 4;
    }
    for (size_t i = 0; i < ad->count; i++) {
        const lora_d *d = &m->lora[ad->w[i].layer * PGRT_LINEAR_COUNT + ad->w[i].module];
        if ((rc = pgrt_buf_upload(m->p, (size_t)d->a, ad->w[i].a, (size_t)m->r * ad->w[i].in)) ||
            (rc = pgrt_buf_upload(m->p, (size_t)d->b, ad->w[i].b, (size_t)ad->w[i].out * m->r)))
            goto fail;
    }
    /* every kernel of the step into the module cache: nothing loads during a
     * capture. The non-GEMM kernels are resolved for good (m->k); the dry
     * run loads the linear layers' and learns their workspace sizes. */
    if ((rc = lm_kernels_resolve(m)))
        goto fail;
    m->warming = true;
    if ((rc = head_cb(m, NULL, (uint32_t)m->S)) || (rc = backward_cb(m, NULL, 0, (uint32_t)m->S)))
        goto fail;
    m->warming = false;
    if (m->ws_need && (rc = pgrt_buf_alloc(ctx, PG_U8, (size_t)m->ws_need, &m->ws)))
        goto fail;
    if (m->lcnt_need && ((rc = pgrt_buf_alloc(ctx, PG_U32, m->lcnt_need, &m->lcnt)) ||
                         (rc = pgrt_buf_memset(m->lcnt, 0))))
        goto fail;

    pgrt_train_tensor tt = {m->p, m->g};
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
        .layer_backward = backward_cb,
        .head = head_cb,
        .user = m,
    };
    if ((rc = pgrt_train_create(ctx, &tp, &m->train)))
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
    pgrt_train_destroy(&m->train);
    pgrt_buf_destroy(&m->embed.buf);
    pgrt_buf_destroy(&m->head.buf);
    pgrt_buf_destroy(&m->norm_final);
    if (m->lw)
        for (int l = 0; l < m->c.layers; l++) {
            pgrt_buf_destroy(&m->lw[l].norm_in);
            pgrt_buf_destroy(&m->lw[l].norm_post);
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
    pgrt_buf_destroy(&m->lcnt);
    pgrt_buf_destroy(&m->lossview);
    pgrt_buf_destroy(&m->arena);
    pgrt_buf_destroy(&m->ints);
    pgrt_buf_destroy(&m->p);
    pgrt_buf_destroy(&m->g);
    pgrt_buf_destroy(&m->gkeep);
    free(m->lw);
    free(m->la);
    free(m->lora);
    free(m->hid);
    free(m->hloss);
    free(m);
    *lmp = NULL;
}

/* ---------------------------------------------------------------- step */

int pgrt_lm_step(pgrt_lm *m, pgrt_stream *s, const int32_t *ids, double *loss, float *grad_norm)
{
    if (!m || !ids)
        return model_fail(PGRT_EINVAL, "pgrt_lm_step: NULL argument");
    for (int b = 0; b < m->B; b++)
        for (int t = 0; t < m->S; t++) {
            int i = b * m->S + t;
            m->hid[i] = ids[i];
            m->hlab[i] = t + 1 < m->S ? ids[i + 1] : -100;
        }
    /* ids and labels are adjacent: one copy */
    int rc = pgrt_buf_upload_async(m->ints, 0, m->hid, (size_t)m->T * 2, s);
    if (rc)
        return rc;
    m->launches = 0;
    if ((rc = pgrt_train_backward(m->train, s, (uint32_t)m->S)))
        return rc;
    rc = pgrt_buf_download_async(m->lossview, 0, m->hloss, (size_t)m->T, s);
    if (rc || (rc = pgrt_stream_sync(s)))
        return rc;
    double sum = 0;
    for (int i = 0; i < m->T; i++)
        sum += m->hloss[i];
    if (loss)
        *loss = sum / ((double)m->B * (m->S - 1));
    if (grad_norm) {
        float scale;
        if ((rc = pgrt_train_layer_norm(m->train, s, 0, &scale, grad_norm)))
            return rc;
    }
    return 0;
}

static int download_into(pgrt_lm *m, pgrt_buf *src, pgrt_adapter *a)
{
    if (!src)
        return model_fail(PGRT_ESTATE, "pgrt_lm: gradients were not kept (keep_grads)");
    for (size_t i = 0; i < a->count; i++) {
        const lora_d *d = &m->lora[a->w[i].layer * PGRT_LINEAR_COUNT + a->w[i].module];
        if (d->a < 0 || a->cfg.r != m->r)
            return model_fail(PGRT_EINVAL, "pgrt_lm: the adapter does not match the model's LoRA");
        int rc = pgrt_buf_download(src, (size_t)d->a, a->w[i].a, (size_t)m->r * a->w[i].in);
        if (!rc)
            rc = pgrt_buf_download(src, (size_t)d->b, a->w[i].b, (size_t)a->w[i].out * m->r);
        if (rc)
            return rc;
    }
    return 0;
}

int pgrt_lm_adapter_get(pgrt_lm *m, pgrt_adapter *a)
{
    if (!m || !a)
        return model_fail(PGRT_EINVAL, "pgrt_lm_adapter_get: NULL argument");
    return download_into(m, m->p, a);
}

int pgrt_lm_grads_get(pgrt_lm *m, pgrt_adapter *a)
{
    if (!m || !a)
        return model_fail(PGRT_EINVAL, "pgrt_lm_grads_get: NULL argument");
    return download_into(m, m->gkeep, a);
}

int pgrt_lm_stats_get(const pgrt_lm *m, pgrt_lm_stats *out)
{
    if (!m || !out)
        return model_fail(PGRT_EINVAL, "pgrt_lm_stats_get: NULL argument");
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
    out->weight_bytes = m->weight_bytes;
    out->lora_bytes = m->lora_bytes;
    out->launches_per_step = m->launches + ts.launches_per_step;
    for (int i = 0; i < PGRT_LM_TIME_COUNT; i++)
        out->time_ms[i] = m->prof_ms[i];
    out->kernel_count = m->prof_nk;
    memcpy(out->kernels, m->prof_k, m->prof_nk * sizeof *m->prof_k);
    return 0;
}
