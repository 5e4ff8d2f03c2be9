/* SPDX-License-Identifier: MIT */
/* The transformer of pgrt_lm.h: the forward, loss and backward of a step
 * in layer words, the object's life and the pgrt_train pipeline around it.
 * Sizes are lm_plan.c's, the upload lm_weights.c's, the kernels resolved
 * at create lm_launch.c's, the linear layers lm_linear.c's. */
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

/* ---------------------------------------------------------------- layer ops */

/* The step's kernels other than the linear layers', each on its kernel
 * resolved at create (m->k): the dtype's variant, knobs and launch shape
 * fixed, so a call only gathers its operands. */

/* y = RMSNorm(x + r) * gamma, x + r kept at sum; without r (0), of x.
 * bf16: one kernel that also writes y's bf16 copy to yb, the operand of
 * the GEMMs that follow (the same bits as the add, the norm and the cast
 * in turn); f32: residual_add, rms_norm_forward. */
static int norm_fwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_devptr r, pgrt_devptr sum,
                    pgrt_buf *gamma, lm_in y)
{
    pgrt_devptr gp = pgrt_buf_ptr(gamma);
    if (m->lowp) /* act16: y.x 0, the f32 output not written (knob f32_output) */
        return lm_run(m, s, &m->k.rms_fwd_add[r != 0],
                      ARGS(P(x), P(r ? r : x), P(r ? sum : x), P(gp), P(y.x ? y.x : m->part),
                           P(y.xb), U(m->T), U(m->c.hidden), F(m->c.rms_norm_eps)));
    int rc = r ? lm_run(m, s, &m->k.add, ARGS(P(x), P(r), P(sum), U((uint64_t)m->T * m->c.hidden)))
               : 0;
    return rc ? rc
              : lm_run(m, s, &m->k.rms_fwd, ARGS(P(r ? sum : x), P(gp), P(y.x), U(m->T),
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

/* RoPE on q and k in place (forward), on dq and dk (backward); from a
 * table (rope_table): at the positions in memory, with the inverse
 * frequencies made at create. */
static int rope(pgrt_lm *m, pgrt_stream *s, const lm_kernel *k, pgrt_devptr q, pgrt_devptr kk)
{
    if (m->rope_table)
        return lm_run(m, s, k, ARGS(P(q), P(kk), P(m->pos), P(pgrt_buf_ptr(m->inv_freq)),
                                    U(m->T), U(m->c.heads), U(m->c.kv_heads),
                                    U(m->c.head_dim)));
    return lm_run(m, s, k, ARGS(P(q), P(kk), U(m->T), U(m->S), U(m->c.heads), U(m->c.kv_heads),
                                U(m->c.head_dim), F(m->c.rope_theta)));
}

/* Qwen3: q and k from their projections' outputs (qpre, kpre) through an
 * RMSNorm over each head's head_dim values. */
static int qk_norm_fwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a, const layer_w *w)
{
    float eps = (float)m->c.rms_norm_eps;
    uint32_t T = (uint32_t)m->T, hd = (uint32_t)m->c.head_dim;
    int rc = lm_run(m, s, &m->k.qk_fwd[0],
                    ARGS(P(a->qpre), P(pgrt_buf_ptr(w->q_norm)), P(a->q),
                         U(T * (uint32_t)m->c.heads), U(hd), F(eps)));
    return rc ? rc
              : lm_run(m, s, &m->k.qk_fwd[1],
                       ARGS(P(a->kpre), P(pgrt_buf_ptr(w->k_norm)), P(a->k),
                            U(T * (uint32_t)m->c.kv_heads), U(hd), F(eps)));
}

/* The backward of one of them (i 0: q, 1: k) from d(normed) dy into dx;
 * the norm's partials go to dtmp (free here: wide enough for q). */
static int qk_norm_bwd(pgrt_lm *m, pgrt_stream *s, int i, pgrt_devptr x, pgrt_buf *gamma,
                       pgrt_devptr dy, pgrt_devptr dx)
{
    uint32_t rows = (uint32_t)m->T * (uint32_t)(i ? m->c.kv_heads : m->c.heads);
    return lm_run(m, s, &m->k.qk_bwd[i],
                  ARGS(P(x), P(pgrt_buf_ptr(gamma)), P(dy), P(dx), P(m->dtmp), U(rows),
                       U(m->c.head_dim), F(m->c.rms_norm_eps)));
}

/* Causal attention of layer a: att and the row statistics lse; in bf16
 * also att's copy in xb (act16: attb, kept for dA), the o projection's
 * operand. Packed: the kernels bounded by documents, whose last argument
 * is the document starts (the shared ones are built first, the starts
 * appended). */
static int att_fwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    pgrt_arg av[] = {P(a->q),      P(a->k),         P(a->v),           P(a->att),
                     P(a->lse),    U(m->B),         U(m->S),           U(m->c.heads),
                     U(m->c.kv_heads), U(m->c.head_dim), F(sc),        P(m->docs)};
    size_t na = sizeof av / sizeof av[0] - (m->packed ? 0 : 1);
    int rc = lm_run(m, s, &m->k.att_fwd, av, na);
    uint32_t n = (uint32_t)m->T * (uint32_t)(m->c.heads * m->c.head_dim);
    pgrt_devptr attb = m->act16 ? a->attb : m->xb; /* act16: kept for the backward's dA */
    return rc || !m->lowp ? rc : lm_run(m, s, &m->k.narrow_att, ARGS(P(a->att), P(attb), U(n)));
}

/* dq, then dk and dv, from datt. */
static int att_bwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    size_t drop = m->packed ? 0 : 1;
    pgrt_arg dq[] = {P(a->q),      P(a->k),         P(a->v),      P(a->att),
                     P(m->datt),   P(a->lse),       P(m->dq),     P(m->delta),
                     U(m->B),      U(m->S),         U(m->c.heads), U(m->c.kv_heads),
                     U(m->c.head_dim), F(sc),       P(m->docs)};
    pgrt_arg dkv[] = {P(a->q),     P(a->k),         P(a->v),      P(m->datt),
                      P(a->lse),   P(m->delta),     P(m->dk),     P(m->dv),
                      U(m->B),     U(m->S),         U(m->c.heads), U(m->c.kv_heads),
                      U(m->c.head_dim), F(sc),      P(m->docs)};
    int rc = lm_run(m, s, &m->k.att_dq, dq, sizeof dq / sizeof dq[0] - drop);
    return rc ? rc : lm_run(m, s, &m->k.att_dkv, dkv, sizeof dkv / sizeof dkv[0] - drop);
}

/* act = silu(g) u; bf16: act's copy in xb for the down GEMM (act16: all
 * three bf16). */
static int swiglu_fwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    uint32_t n = (uint32_t)m->T * (uint32_t)m->c.intermediate;
    if (m->act16)
        return lm_run(m, s, &m->k.swiglu_fwd, ARGS(P(a->g), P(a->u), P(a->act), U(n)));
    return m->lowp ? lm_run(m, s, &m->k.swiglu_fwd,
                            ARGS(P(a->g), P(a->u), P(a->act), P(m->xb), U(n)))
                   : lm_run(m, s, &m->k.swiglu_fwd, ARGS(P(a->g), P(a->u), P(a->act), U(n)));
}

/* dg, du from dact; bf16: their copies in xb and dyb (act16: all bf16). */
static int swiglu_bwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    uint32_t n = (uint32_t)m->T * (uint32_t)m->c.intermediate;
    if (m->act16)
        return lm_run(m, s, &m->k.swiglu_bwd,
                      ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), U(n)));
    return m->lowp ? lm_run(m, s, &m->k.swiglu_bwd,
                            ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), P(m->xb),
                                 P(m->dyb), U(n)))
                   : lm_run(m, s, &m->k.swiglu_bwd,
                            ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), U(n)));
}

/* The loss of `rows` rows from row r0 on and d(logits) in place, on the
 * logits the head GEMM wrote: bf16 in bf16 (as transformers' lm_head
 * under autocast gives them to its f32 loss), read and written by the dX
 * GEMM as they are. */
static int ce(pgrt_lm *m, pgrt_stream *s, uint32_t rows, uint32_t r0)
{
    int last = rows != (uint32_t)m->chunk;
    return lm_run(m, s, &m->k.ce[last],
                  ARGS(P(m->lowp ? m->logits_b : m->logits), P(m->labels + (uint64_t)r0 * 4u),
                       P(m->loss + (uint64_t)r0 * 4u), U(rows), U(m->c.vocab), P(m->scale)));
}

/* ---------------------------------------------------------------- forward and loss */

/* Layer l from its input norm's output h1 on (layer 0 also computes that
 * norm) through the residual add after the MLP and the norm that
 * follows it: the next layer's input norm, or the final one. */
static int forward_layer(pgrt_lm *m, pgrt_stream *s, int l, bool again)
{
    layer_a *a = &m->la[l];
    const layer_w *w = &m->lw[l];
    bool last = l + 1 == m->c.layers;
    pgrt_devptr xnext = last ? m->xf : m->la[l + 1].x;
    pgrt_buf *gnext = last ? m->norm_final : m->lw[l + 1].norm_in;
    /* the linear layers' inputs: act16 keeps the norms' bf16 copies only */
    lm_in h1 = m->act16 ? (lm_in){0, a->h1b} : (lm_in){a->h1, m->xb};
    lm_in h2 = m->act16 ? (lm_in){0, a->h2b} : (lm_in){a->h2, m->xb};
    lm_in att = {a->att, m->act16 ? a->attb : m->xb};
    lm_in act = m->act16 ? (lm_in){0, a->act} : (lm_in){a->act, m->xb};
    lm_in hnext = last ? (lm_in){m->act16 ? 0 : m->hf, m->xb}
                  : m->act16 ? (lm_in){0, m->la[l + 1].h1b} : (lm_in){m->la[l + 1].h1, m->xb};
    int rc;
    /* again (a recomputed layer, in the backward): h1 from the kept input
     * x, as layer 0 always makes it (the same bits as the add and norm of
     * the layer below: the norm reads the sum it stored), and no next
     * input (it is there already; its h1 would land on this layer's) */
    if (((l == 0 || again) && (rc = norm_fwd(m, s, a->x, 0, 0, w->norm_in, h1))) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_Q, h1, m->c.qk_norm ? a->qpre : a->q)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_K, h1, m->c.qk_norm ? a->kpre : a->k)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_V, h1, a->v)) ||
        (m->c.qk_norm && (rc = qk_norm_fwd(m, s, a, w))) ||
        (rc = rope(m, s, &m->k.rope_fwd, a->q, a->k)) || (rc = att_fwd(m, s, a)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_O, att, m->dtmp)) ||
        (rc = norm_fwd(m, s, a->x, m->dtmp, a->xm, w->norm_post, h2)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_GATE, h2, a->g)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_UP, h2, a->u)) ||
        (rc = swiglu_fwd(m, s, a)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_DOWN, act, m->dtmp)))
        return rc;
    return again ? 0 : norm_fwd(m, s, a->xm, m->dtmp, xnext, gnext, hnext);
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
    /* the learning rate of the optimizer step this micro-batch belongs to,
     * from the steps taken: on the device, so a replayed graph follows */
    /* a new dropout mask for every training micro-batch */
    if (m->drop && !m->evaluating && !m->warming &&
        (rc = launch(m, s, K_CTR_INC, NULL, 0, ARGS(P(pgrt_buf_ptr(m->dctr))))))
        return rc;
    if (m->sched && !m->evaluating && !m->warming &&
        (rc = lm_run(m, s, &m->k.lr_sched,
                     ARGS(P(pgrt_buf_ptr(pgrt_train_hyper_buf(m->train))),
                          P(pgrt_buf_ptr(m->sched))))))
        return rc;
    if (m->fused && (rc = lm_lora_weights(m, s)))
        return rc;
    if ((rc = embed(m, s)))
        return rc;
    for (int l = 0; l < m->c.layers; l++)
        if ((rc = forward_layer(m, s, l, false)))
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
        fwd.out_type = m->lowp ? PG_BF16 : PG_F32;
        if ((rc = lm_gemm(m, s, &fwd, m->lowp ? m->logits_b : m->logits, 0, PGRT_LM_TIME_GEMM)) ||
            (rc = ce(m, s, rows, (uint32_t)r0)))
            return rc;
        rc = m->evaluating ? lm_gemm_skip(m, dc) : lm_gemm(m, s, &dxs, dc, 0, PGRT_LM_TIME_GEMM);
        if (rc)
            return rc;
    }
    if (m->evaluating)
        return 0;
    /* d(x_final) (bf16: and its copy in dyb, for the last layer's down GEMM) */
    return norm_bwd(m, s, m->xf, m->norm_final, m->dh, 0, m->dx);
}

/* ---------------------------------------------------------------- backward */

static int backward_layer(pgrt_lm *m, pgrt_stream *s, int l)
{
    layer_a *a = &m->la[l];
    const layer_w *w = &m->lw[l];
    lm_in h1 = m->act16 ? (lm_in){0, a->h1b} : (lm_in){a->h1, 0};
    lm_in h2 = m->act16 ? (lm_in){0, a->h2b} : (lm_in){a->h2, 0};
    lm_in att = {a->att, m->act16 ? a->attb : 0};
    lm_in act = m->act16 ? (lm_in){0, a->act} : (lm_in){a->act, 0};
    /* act16: dg and du are bf16 themselves */
    pgrt_devptr dgb = m->act16 ? m->dg : m->xb, dub = m->act16 ? m->du : m->dyb;
    int rc;
    /* m->dx holds d(x_{l+1}) = d(mlp out) */
    /* bf16: the kernel that wrote each dy left its copy in dyb (m->dx:
     * the norm after this layer; dg: xb, du: dyb from SwiGLU; dxm: the
     * norm below); dq, dk, dv are narrowed by linear_bwd. In f32, dyb and
     * xb are 0. */
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_DOWN, act, m->dx, m->dyb, m->dact, false)) ||
        (rc = swiglu_bwd(m, s, a)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_GATE, h2, m->dg, dgb, m->dh, false)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_UP, h2, m->du, dub, m->dh, true)) ||
        /* the side stream's MLP products read dyb, which the norm writes */
        (rc = lm_side_join(m, s)) ||
        (rc = norm_bwd(m, s, a->xm, w->norm_post, m->dh, m->dx, m->dxm)))
        return rc;
    /* m->dxm = d(x_mid) = d(attention out) */
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_O, att, m->dxm, m->dyb, m->datt, false)) ||
        (rc = lm_side_mark_o(m)) ||
        (rc = att_bwd(m, s, a)) || (rc = rope(m, s, &m->k.rope_bwd, m->dq, m->dk)))
        return rc;
    /* act16: dq, dk and dv (adjacent) narrowed at once for the three
     * projections' backward; Qwen3: through the q and k norms first, each
     * into datt (free after the attention backward), used by its
     * projection's backward (and narrowed there) */
    bool qn = m->c.qk_norm, once = m->act16 && !qn;
    uint32_t nqkv = (uint32_t)m->T * (uint32_t)((m->c.heads + 2 * m->c.kv_heads) * m->c.head_dim);
    if (once && (rc = lm_run(m, s, &m->k.narrow_dqkv, ARGS(P(m->dq), P(m->dqb), U(nqkv)))))
        return rc;
    if ((qn && (rc = qk_norm_bwd(m, s, 0, a->qpre, w->q_norm, m->dq, m->datt))) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_Q, h1, qn ? m->datt : m->dq, once ? m->dqb : 0,
                         m->dh, false)) ||
        (qn && (rc = qk_norm_bwd(m, s, 1, a->kpre, w->k_norm, m->dk, m->datt))) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_K, h1, qn ? m->datt : m->dk, once ? m->dkb : 0,
                         m->dh, true)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_V, h1, m->dv, once ? m->dvb : 0, m->dh, true)))
        return rc;
    /* o's dB reads dyb; q, k, v's side products go on beside the next
     * layer (their inputs are written again after its first join) */
    return (rc = lm_side_wait_o(m, s)) ? rc : norm_bwd(m, s, a->x, w->norm_in, m->dh, m->dxm, m->dx);
}

/* Sum layers [l0, l1)'s gradients over the ranks on the reduction stream,
 * once the step's stream has written them. */
static int reduce_slice(pgrt_lm *m, pgrt_stream *s, int l0, int l1)
{
    size_t off = m->layer_off[l0], n = m->layer_off[l1] - off;
    int rc;
    if (n == 0)
        return 0;
    if ((rc = pgrt_event_record(m->ready, s)) || (rc = pgrt_stream_wait_event(m->cs, m->ready)))
        return rc;
    return pgrt_comm_all_reduce(m->comm, m->cs, m->g, off, n, PGRT_COMM_SUM);
}

/* A sharded optimizer's reduction, once the whole backward is done: rank
 * r's slice of g summed over the ranks, in place (the rest of g is this
 * rank's own, unread); the kept gradients gathered whole. */
static int reduce_shard(pgrt_lm *m, pgrt_stream *s)
{
    size_t at = (size_t)m->rank * m->piece;
    int rc = pgrt_comm_reduce_scatter(m->comm, s, m->g, 0, m->g, at, m->piece, PGRT_COMM_SUM);
    if (!rc && m->gkeep)
        rc = pgrt_comm_all_gather(m->comm, s, m->g, at, m->gkeep, 0, m->piece);
    return rc;
}

static int backward_cb(void *user, pgrt_stream *s, size_t layer, uint32_t seq_len)
{
    (void)layer;
    (void)seq_len;
    pgrt_lm *m = user;
    int rc;
    /* data parallel: the updating micro-batch's gradients summed over the
     * ranks; without accumulation each layer's slice as soon as its
     * backward is done, overlapped with the layers still to go */
    bool reduce = m->comm && !m->micro && !m->warming && !m->evaluating;
    bool overlap = reduce && m->accum == 1 && !m->shard;
    /* a recomputed layer overwrites the shared activations, and a reduced
     * slice must hold its LoRA gradients: the side stream joins first */
    for (int l = m->c.layers; l-- > 0;)
        if ((l < m->recompute && ((rc = lm_side_join(m, s)) || (rc = forward_layer(m, s, l, true)))) ||
            (rc = backward_layer(m, s, l)) ||
            (overlap && ((rc = lm_side_join(m, s)) || (rc = reduce_slice(m, s, l, l + 1)))))
            return rc;
    if ((rc = lm_side_join(m, s)))
        return rc;
    /* gradient accumulation: a micro-batch that does not update adds its
     * gradients to gacc; the one that does adds gacc to its own (the
     * optimizer reads g) and leaves gacc zero for the next step */
    if (m->accum > 1) {
        pgrt_devptr g = pgrt_buf_ptr(m->g), acc = pgrt_buf_ptr(m->gacc);
        uint32_t n = (uint32_t)m->nlora;
        if (m->micro)
            rc = lm_run(m, s, &m->k.gacc_add, ARGS(P(acc), P(g), P(acc), U(n)));
        else if (!(rc = lm_run(m, s, &m->k.gacc_add, ARGS(P(g), P(acc), P(g), U(n)))) &&
                 !m->warming)
            rc = pgrt_buf_memset_async(m->gacc, 0, s);
        if (rc)
            return rc;
    }
    if (reduce && m->shard)
        return reduce_shard(m, s);
    if (reduce && ((!overlap && (rc = reduce_slice(m, s, 0, m->c.layers))) ||
                   (rc = pgrt_event_record(m->done, m->cs)) ||
                   (rc = pgrt_stream_wait_event(s, m->done))))
        return rc;
    if (m->gkeep && !m->warming)
        return pgrt_buf_copy_async(m->gkeep, 0, m->g, 0, m->nlora, s);
    return 0;
}

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
        .layer_backward = backward_cb,
        .head = head_cb,
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
    if ((rc = head_cb(m, NULL, (uint32_t)m->S)) || (rc = backward_cb(m, NULL, 0, (uint32_t)m->S)))
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

/* ---------------------------------------------------------------- step */

/* The batch into the upload (ids, labels, scale, and packed the positions
 * and document starts), checked; *count: its targets. */
static int stage(pgrt_lm *m, const pgrt_lm_batch *b, const char *fn, uint64_t *count)
{
    if (!b || !b->ids)
        return model_fail(PGRT_EINVAL, "%s: NULL batch or ids", fn);
    if (m->packed && (!b->pos || !b->doc_start))
        return model_fail(PGRT_EINVAL, "%s: a packed pgrt_lm needs the batch's pos and doc_start",
                          fn);
    int32_t *lab = m->hlab;
    uint64_t n = 0;
    for (int r = 0; r < m->B; r++)
        for (int t = 0; t < m->S; t++) {
            size_t i = (size_t)r * m->S + t;
            int32_t y = b->targets ? b->targets[i] : t + 1 < m->S ? b->ids[i + 1] : -100;
            if (y >= m->c.vocab)
                return model_fail(PGRT_EINVAL, "%s: target %d at row %d position %d is not below "
                                  "the vocabulary (%d)", fn, y, r, t, m->c.vocab);
            lab[i] = y < 0 ? -100 : y;
            n += y >= 0;
        }
    memcpy(m->hid, b->ids, sizeof(int32_t) * (size_t)m->T);
    if (m->packed) {
        int32_t *pos = m->hid + 2 * (size_t)m->T + 1, *doc = pos + m->T;
        for (int r = 0; r < m->B; r++)
            for (int t = 0; t < m->S; t++) {
                size_t i = (size_t)r * m->S + t;
                int32_t d = b->doc_start[i];
                if (b->pos[i] < 0 || d < 0 || d > t || (t > 0 && d != t && d != doc[i - 1]))
                    return model_fail(PGRT_EINVAL, "%s: row %d position %d: pos %d, doc_start %d "
                                      "(a position is >= 0; a document starts at or before the "
                                      "token, where the one before it started or at the token)",
                                      fn, r, t, b->pos[i], d);
                pos[i] = b->pos[i];
                doc[i] = d;
            }
    }
    *count = n;
    return 0;
}

/* Upload the staged batch with the loss scale 1 / scale_targets. */
static int upload(pgrt_lm *m, pgrt_stream *s, uint64_t scale_targets)
{
    float scale = 1.0f / (float)scale_targets;
    memcpy(&m->hid[2 * (size_t)m->T], &scale, sizeof scale);
    size_t words = (size_t)m->T * (m->packed ? 4 : 2) + 1;
    m->launches = 0;
    return pgrt_buf_upload_async(m->ints, 0, m->hid, words, s);
}

/* Wait for s: data parallel, bounded and watching the other ranks. */
static int lm_wait(pgrt_lm *m, pgrt_stream *s)
{
    return m->comm ? pgrt_comm_wait(m->comm, s, 0) : pgrt_stream_sync(s);
}

/* The loss summed over the batch (waits for s). */
static int loss_sum(pgrt_lm *m, pgrt_stream *s, double *sum)
{
    /* data parallel: the wait first, bounded; a copy into pageable memory
     * behind a collective whose peer is gone would block for ever */
    int rc = m->comm ? lm_wait(m, s) : 0;
    if (rc || (rc = pgrt_buf_download_async(m->lossview, 0, m->hloss, (size_t)m->T, s)) ||
        (rc = lm_wait(m, s)))
        return rc;
    double acc = 0;
    for (int i = 0; i < m->T; i++)
        acc += m->hloss[i];
    *sum = acc;
    return 0;
}

/* Data parallel: a batch's loss sum and targets, every rank's together. */
static int comm_totals(pgrt_lm *m, pgrt_stream *s, double *sum, uint64_t *n)
{
    if (!m->comm)
        return 0;
    double v[2] = {*sum, (double)*n};
    int rc = pgrt_comm_all_reduce_host(m->comm, s, v, 2, PGRT_COMM_SUM);
    if (rc)
        return rc;
    *sum = v[0];
    *n = (uint64_t)v[1];
    return 0;
}

static int micro_callbacks(pgrt_lm *m, pgrt_stream *s)
{
    int rc = head_cb(m, s, (uint32_t)m->S);
    return rc ? rc : backward_cb(m, s, 0, (uint32_t)m->S);
}

/* A micro-batch that does not update: the forward, loss and backward with
 * its gradients added to gacc, as a graph of its own when graphs are on
 * (captured at the first such call; a capture that fails runs eagerly from
 * then on, as pgrt_train's do). */
static int run_micro(pgrt_lm *m, pgrt_stream *s)
{
    m->micro = true;
    int rc;
    if (m->graph && s && !m->micro_graph && !m->micro_failed) {
        if (!(rc = pgrt_capture_begin(s))) {
            int cb = micro_callbacks(m, s);
            rc = pgrt_capture_end(s, &m->micro_graph);
            rc = cb ? cb : rc;
        }
        if (rc) {
            pgrt_graph_destroy(&m->micro_graph);
            m->micro_failed = true;
            fprintf(stderr, "pgrt: micro-batch graph capture failed (%s): %s; micro-batches "
                    "run eagerly\n", pgrt_err_name(rc), pgrt_last_message());
        }
    }
    size_t launches = m->launches;
    rc = m->micro_graph ? pgrt_graph_launch(m->micro_graph, s) : micro_callbacks(m, s);
    if (m->micro_graph)
        m->launches = launches;
    m->micro = false;
    return rc;
}

int pgrt_lm_train(pgrt_lm *m, pgrt_stream *s, const pgrt_lm_batch *b, pgrt_lm_result *r)
{
    if (!m)
        return model_fail(PGRT_EINVAL, "pgrt_lm_train: NULL pgrt_lm");
    if (m->comm && !s)
        return model_fail(PGRT_EINVAL, "pgrt_lm_train: a data-parallel pgrt_lm needs a stream");
    uint64_t n = 0;
    int rc = stage(m, b, "pgrt_lm_train", &n);
    if (rc)
        return rc;
    uint64_t st = b->step_targets;
    if (!st && m->comm) {
        /* this micro-batch's targets over every rank */
        double all = (double)n;
        if ((rc = pgrt_comm_all_reduce_host(m->comm, s, &all, 1, PGRT_COMM_SUM)))
            return rc;
        st = (uint64_t)all;
    } else if (!st) {
        st = n;
    }
    if ((n == 0 && !m->comm) || st == 0 || st < n)
        return model_fail(PGRT_EINVAL, "pgrt_lm_train: the batch has %llu targets and the step "
                          "%llu: a batch needs one%s, a step at least the batch's",
                          (unsigned long long)n, (unsigned long long)st,
                          m->comm ? " on some rank" : "");
    if ((rc = upload(m, s, st)))
        return rc;
    bool last = m->pending + 1 == m->accum;
    rc = last ? pgrt_train_backward(m->train, s, (uint32_t)m->S) : run_micro(m, s);
    double sum = 0;
    if (rc || (rc = loss_sum(m, s, &sum)) || (rc = comm_totals(m, s, &sum, &n)))
        return rc;
    m->pending = last ? 0 : m->pending + 1;
    if (!r)
        return 0;
    *r = (pgrt_lm_result){.loss_sum = sum, .targets = n, .updated = last};
    if (last) {
        float scale, hyper0;
        uint32_t skipped;
        if ((rc = pgrt_train_layer_norm(m->train, s, 0, &scale, &r->grad_norm)) ||
            (rc = pgrt_train_skipped(m->train, s, &skipped, &r->skipped)) ||
            (rc = pgrt_buf_download(pgrt_train_hyper_buf(m->train), 0, &hyper0, 1)))
            return rc;
        r->lr = hyper0;
    }
    return 0;
}

int pgrt_lm_eval(pgrt_lm *m, pgrt_stream *s, const pgrt_lm_batch *b, pgrt_lm_result *r)
{
    if (!m)
        return model_fail(PGRT_EINVAL, "pgrt_lm_eval: NULL pgrt_lm");
    if (m->comm && !s)
        return model_fail(PGRT_EINVAL, "pgrt_lm_eval: a data-parallel pgrt_lm needs a stream");
    if (m->pending)
        return model_fail(PGRT_ESTATE, "pgrt_lm_eval: %d of the step's %d micro-batches have run; "
                          "evaluate between optimizer steps", m->pending, m->accum);
    uint64_t n = 0;
    int rc = stage(m, b, "pgrt_lm_eval", &n);
    if (rc || (rc = upload(m, s, n ? n : 1)))
        return rc;
    m->evaluating = true;
    rc = head_cb(m, s, (uint32_t)m->S);
    m->evaluating = false;
    double sum = 0;
    if (rc || (rc = loss_sum(m, s, &sum)) || (rc = comm_totals(m, s, &sum, &n)))
        return rc;
    if (r)
        *r = (pgrt_lm_result){.loss_sum = sum, .targets = n};
    return 0;
}

int pgrt_lm_step(pgrt_lm *m, pgrt_stream *s, const int32_t *ids, double *loss, float *grad_norm)
{
    RT_NONNULL(__func__, m, "lm");
    RT_NONNULL(__func__, ids, "ids");
    if (m->packed || m->accum > 1 || m->comm)
        return model_fail(PGRT_ESTATE, "pgrt_lm_step: a packed, accumulating or data-parallel "
                          "pgrt_lm takes pgrt_lm_train");
    pgrt_lm_batch b = {.ids = ids};
    uint64_t n = 0;
    int rc = stage(m, &b, "pgrt_lm_step", &n);
    if (rc || (rc = upload(m, s, n)) || (rc = pgrt_train_backward(m->train, s, (uint32_t)m->S)))
        return rc;
    double sum = 0;
    if ((rc = loss_sum(m, s, &sum)))
        return rc;
    if (loss)
        *loss = sum / (double)n;
    if (grad_norm) {
        float scale;
        if ((rc = pgrt_train_layer_norm(m->train, s, 0, &scale, grad_norm)))
            return rc;
    }
    return 0;
}

int pgrt_lm_pending(const pgrt_lm *m) { return m ? m->pending : 0; }

int pgrt_lm_set_lr(pgrt_lm *m, pgrt_stream *s, float lr)
{
    if (!m)
        return model_fail(PGRT_EINVAL, "pgrt_lm_set_lr: NULL pgrt_lm");
    if (!(lr == 0 || (isnormal(lr) && lr > 0)))
        return model_fail(PGRT_EINVAL, "pgrt_lm_set_lr: lr %g must be 0 or a positive normal "
                          "float", (double)lr);
    if (!m->sched)
        return pgrt_train_set_lr(m->train, s, lr);
    /* the schedule's base: the copy reads sched_host when it runs */
    m->sched_host[0] = lr;
    return pgrt_buf_upload_async(m->sched, 0, m->sched_host, 1, s);
}

int pgrt_lm_steps(pgrt_lm *m, pgrt_stream *s, uint64_t *steps)
{
    RT_NONNULL(__func__, m, "lm");
    RT_NONNULL(__func__, steps, "steps");
    float h[10];
    int rc = pgrt_stream_sync(s);
    if (rc || (rc = pgrt_buf_download(pgrt_train_hyper_buf(m->train), 0, h, 10)))
        return rc;
    *steps = (uint64_t)h[9];
    return 0;
}

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
