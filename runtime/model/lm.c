/* SPDX-License-Identifier: MIT */
/* The transformer of pgrt_lm.h: the forward, loss and backward of a step
 * in layer words, and the calls that run steps (train, eval, step). The
 * object's life and its pgrt_train pipeline are lm_create.c's, the
 * checkpoint state and the getters lm_state.c's, sizes lm_plan.c's, the
 * upload lm_weights.c's, the kernels resolved at create lm_launch.c's,
 * the linear layers lm_linear.c's. */
#include "lm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
/* fa3: q, k, v narrowed at once into their kept bf16 copies, the
 * forward through their tensor maps, O's bf16 copy (attb) by the same
 * launch. */
static int att_fwd_sm90(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    uint32_t B = (uint32_t)m->B, S = (uint32_t)m->S, hq = (uint32_t)m->c.heads;
    uint32_t hkv = (uint32_t)m->c.kv_heads, hd = (uint32_t)m->c.head_dim;
    uint32_t n = (uint32_t)m->T * (hq + 2 * hkv) * hd;
    _Alignas(64) pgrt_tensor_map map[3];
    int rc;
    if ((rc = lm_run(m, s, &m->k.narrow_dqkv, ARGS(P(a->q), P(a->qb), U(n)))) ||
        (rc = pgrt_attention_sm90_map(m->ctx, &map[0], a->qb, B, S, hq, hd, 128)) ||
        (rc = pgrt_attention_sm90_map(m->ctx, &map[1], a->kb, B, S, hkv, hd, 128)) ||
        (rc = pgrt_attention_sm90_map(m->ctx, &map[2], a->vb, B, S, hkv, hd, 128)))
        return rc;
    return lm_run(m, s, &m->k.att_fwd,
                  ARGS(pgrt_arg_tensor_map(&map[0]), pgrt_arg_tensor_map(&map[1]),
                       pgrt_arg_tensor_map(&map[2]), P(a->att), pgrt_arg_u64(a->attb), P(a->lse),
                       U(B), U(S), U(hq), U(hkv), U(hd), F(sc)));
}

/* fa3's backward: delta, dO's bf16 copy and the row statistics, then dq,
 * then dk and dv, through the tensor maps of the kept copies. */
static int att_bwd_sm90(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    uint32_t B = (uint32_t)m->B, S = (uint32_t)m->S, hq = (uint32_t)m->c.heads;
    uint32_t hkv = (uint32_t)m->c.kv_heads, hd = (uint32_t)m->c.head_dim;
    _Alignas(64) pgrt_tensor_map map[5];
    const pgrt_devptr base[4] = {a->qb, a->kb, a->vb, m->dob};
    const uint32_t heads[4] = {hq, hkv, hkv, hq};
    int rc = lm_run(m, s, &m->k.att_prep,
                    ARGS(P(a->att), P(m->datt), P(a->lse), P(m->dob), P(m->att_stats), U(B), U(S),
                         U(hq), U(hd)));
    for (int i = 0; i < 4 && !rc; i++)
        rc = pgrt_attention_sm90_map(m->ctx, &map[i], base[i], B, S, heads[i], hd, 64);
    if (!rc)
        rc = pgrt_attention_sm90_stats_map(m->ctx, &map[4], m->att_stats, B, S, hq);
    if (rc || (rc = lm_run(m, s, &m->k.att_dq,
                           ARGS(pgrt_arg_tensor_map(&map[0]), pgrt_arg_tensor_map(&map[1]),
                                pgrt_arg_tensor_map(&map[2]), pgrt_arg_tensor_map(&map[3]),
                                P(m->att_stats), P(m->dq), U(B), U(S), U(hq), U(hkv), U(hd),
                                F(sc)))))
        return rc;
    bool gqa = hq != hkv; /* dkv writes each query head's share; group sums them */
    if ((rc = lm_run(m, s, &m->k.att_dkv,
                     ARGS(pgrt_arg_tensor_map(&map[0]), pgrt_arg_tensor_map(&map[1]),
                          pgrt_arg_tensor_map(&map[2]), pgrt_arg_tensor_map(&map[3]),
                          pgrt_arg_tensor_map(&map[4]), P(gqa ? m->dkh : m->dk),
                          P(gqa ? m->dvh : m->dv), U(B), U(S), U(hq), U(hkv), U(hd), F(sc)))) ||
        !gqa)
        return rc;
    uint32_t n = (uint32_t)m->T * hkv * hd;
    return lm_run(m, s, &m->k.att_group,
                  ARGS(P(m->dkh), P(m->dvh), P(m->dk), P(m->dv), U(n), U(hkv * hd), U(hq / hkv),
                       U(hd)));
}

static int att_fwd(pgrt_lm *m, pgrt_stream *s, const layer_a *a)
{
    if (m->fa3)
        return att_fwd_sm90(m, s, a);
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
    if (m->fa3)
        return att_bwd_sm90(m, s, a);
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
int lm_head_cb(void *user, pgrt_stream *s, uint32_t seq_len)
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
    if (lm_qkv_merged(m, l)) {
        if ((rc = linear_bwd_qkv(m, s, l, h1, m->dh)))
            return rc;
    } else if ((qn && (rc = qk_norm_bwd(m, s, 0, a->qpre, w->q_norm, m->dq, m->datt))) ||
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

int lm_backward_cb(void *user, pgrt_stream *s, size_t layer, uint32_t seq_len)
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
int lm_wait(pgrt_lm *m, pgrt_stream *s)
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
    int rc = lm_head_cb(m, s, (uint32_t)m->S);
    return rc ? rc : lm_backward_cb(m, s, 0, (uint32_t)m->S);
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
    rc = lm_head_cb(m, s, (uint32_t)m->S);
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
