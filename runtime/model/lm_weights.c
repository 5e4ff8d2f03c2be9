/* SPDX-License-Identifier: MIT */
/* pgrt_lm's weights to the device: f32, or bf16 for a bf16 model (norms
 * and biases stay f32), converted on the host in pieces. */
#include "lm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Round to nearest even; a NaN stays a (quiet) NaN. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Upload a tensor as f32 (bf16 false) or bf16: as it is where the dtype
 * matches, else in pieces through host staging buffers, widened
 * (pgrt_st_tensor_to_f32) and, for bf16, narrowed. */
static int upload_tensor(pgrt_ctx *ctx, const pgrt_st_tensor *t, bool bf16, pgrt_buf **out,
                         uint64_t *bytes)
{
    size_t n = (size_t)t->count;
    int rc = pgrt_buf_alloc(ctx, bf16 ? PG_U16 : PG_F32, n, out);
    if (rc)
        return rc;
    *bytes += n * (bf16 ? 2u : 4u);
    if (t->dtype == (bf16 ? PGRT_ST_BF16 : PGRT_ST_F32))
        return pgrt_buf_upload(*out, 0, t->data, n);
    size_t piece = (size_t)1 << 22;
    float *stage = malloc(piece * (bf16 ? 6 : 4));
    if (!stage)
        return model_fail(PGRT_ENOMEM, "pgrt_lm: out of host memory");
    uint16_t *half = (uint16_t *)(void *)(stage + piece);
    for (size_t o = 0; o < n && !rc; o += piece) {
        size_t k = n - o < piece ? n - o : piece;
        if ((rc = pgrt_st_tensor_to_f32(t, o, k, stage)))
            break;
        for (size_t i = 0; bf16 && i < k; i++)
            half[i] = f32_to_bf16(stage[i]);
        rc = pgrt_buf_upload(*out, o, bf16 ? (const void *)half : stage, k);
    }
    free(stage);
    return rc;
}

static int upload_named(pgrt_lm *m, const pgrt_model_files *mf, const char *name, bool bf16,
                        pgrt_buf **out)
{
    const pgrt_st_tensor *t = pgrt_model_tensor(mf, name);
    if (!t)
        return model_fail(PGRT_EINVAL, "pgrt_lm: the model has no tensor %s", name);
    return upload_tensor(m->ctx, t, bf16, out, &m->weight_bytes);
}

int lm_upload_weights(pgrt_lm *m, const pgrt_model_files *mf)
{
    char name[128];
    int rc;
    m->embed.bf16 = m->bf16;
    m->embed.count = (uint64_t)m->c.vocab * m->c.hidden;
    if ((rc = upload_named(m, mf, "model.embed_tokens.weight", m->bf16, &m->embed.buf)) ||
        (rc = upload_named(m, mf, "model.norm.weight", false, &m->norm_final)))
        return rc;
    if (!m->c.tie_embeddings) {
        m->head.bf16 = m->bf16;
        m->head.count = m->embed.count;
        if ((rc = upload_named(m, mf, "lm_head.weight", m->bf16, &m->head.buf)))
            return rc;
    }
    for (int l = 0; l < m->c.layers; l++) {
        layer_w *w = &m->lw[l];
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        if ((rc = upload_named(m, mf, name, false, &w->norm_in)))
            return rc;
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        if ((rc = upload_named(m, mf, name, false, &w->norm_post)))
            return rc;
        if (m->c.qk_norm) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.q_norm.weight", l);
            if ((rc = upload_named(m, mf, name, false, &w->q_norm)))
                return rc;
            snprintf(name, sizeof name, "model.layers.%d.self_attn.k_norm.weight", l);
            if ((rc = upload_named(m, mf, name, false, &w->k_norm)))
                return rc;
        }
        for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
            const char *blk = model_linear_block((pgrt_linear)i);
            const char *mn = pgrt_linear_name((pgrt_linear)i);
            int in, out;
            pgrt_linear_dims(&m->c, (pgrt_linear)i, &in, &out);
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, blk, mn);
            w->lin[i].bf16 = m->bf16;
            w->lin[i].count = (uint64_t)in * out;
            if ((rc = upload_named(m, mf, name, m->bf16, &w->lin[i].buf)))
                return rc;
            bool bias = (i <= PGRT_LINEAR_V && m->c.qkv_bias) || (i == PGRT_LINEAR_O && m->c.o_bias);
            if (bias) {
                snprintf(name, sizeof name, "model.layers.%d.%s.%s.bias", l, blk, mn);
                if ((rc = upload_named(m, mf, name, false, &w->bias[i])))
                    return rc;
            }
        }
    }
    return 0;
}
