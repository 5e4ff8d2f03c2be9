/* SPDX-License-Identifier: MIT */
/* pgrt_lm's sizes: the parameters' checks, the device memory a model
 * takes (lm_plan), the LoRA pairs' places in the parameter buffer and the
 * activation arena's layout. */
#include "lm_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t u64max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The sum of layer l's pairs' ranks: its saved xa is T of them. */
static uint64_t layer_ranks(const pgrt_adapter *ad, int l)
{
    uint64_t sum = 0;
    for (size_t i = 0; ad && i < ad->count; i++)
        if (ad->w[i].layer == l)
            sum += (uint64_t)ad->w[i].r;
    return sum;
}

void lm_plan_make(const pgrt_model_config *c, const pgrt_adapter *ad, int B, int S, bool bf16,
                  bool act16, bool fa3, int head_chunk, int recompute, lm_plan *p)
{
    memset(p, 0, sizeof *p);
    p->act16 = act16;
    p->fa3 = fa3;
    uint64_t T = (uint64_t)B * S, H = c->hidden, I = c->intermediate, V = c->vocab;
    uint64_t qd = (uint64_t)c->heads * c->head_dim, kvd = (uint64_t)c->kv_heads * c->head_dim;
    /* the pairs' ranks: their sum sizes the saved xa, the largest dxa */
    uint64_t rmax = 0;
    for (size_t i = 0; ad && i < ad->count; i++)
        rmax = u64max(rmax, (uint64_t)ad->w[i].r);
    bool drop = ad && ad->cfg.dropout > 0;
    /* a layer's input, then the rest of its activations (and its xa):
     * each kept layer has a set of its own, the recomputed ones share one */
    uint64_t set = T * (3 * H + 2 * qd + 2 * kvd + 3 * I + c->heads) +
                   (c->qk_norm ? T * (qd + kvd) : 0); /* Qwen3: q, k before their norms */
    if (act16) /* h1b, h2b and g, u, act: bf16, two to an f32 element; attb */
        set = set - T * (H + (3 * I) / 2) + T * qd / 2 + 64;
    if (fa3) /* q, k, v kept as their bf16 copies */
        set = set - T * (qd + 2 * kvd) + T * (qd + 2 * kvd) / 2 + 64;
    uint64_t kept = 0, shared_xa = 0;
    for (int l = 0; l < c->layers; l++) {
        uint64_t xa = T * layer_ranks(ad, l);
        if (l < recompute)
            shared_xa = u64max(shared_xa, xa);
        else
            kept += set + xa;
    }
    p->recompute = recompute;
    uint64_t layers = T * H * (uint64_t)c->layers + kept + (recompute ? set + shared_xa : 0);
    /* the layer inputs of L layers and the final one, then the scratch */
    uint64_t widest = u64max(u64max(H, I), u64max(qd, 2 * kvd));
    /* act16: dtmp, xb and dyb hold a [T, H] or a q, k, v at most (the MLP's
     * are bf16 buffers of their own), dg, du, dact are bf16 */
    uint64_t wide = act16 ? u64max(H, u64max(qd, 2 * kvd)) : widest;
    uint64_t mlpd = act16 ? 3 * ((T * I + 1) / 2 + 64) : T * 3 * I;
    /* ~256 MB of logits: 64 Mi in f32, 128 Mi in bf16 */
    int chunk = head_chunk > 0 ? head_chunk : (int)u64max(1, ((bf16 ? 128ull : 64ull) << 20) / V);
    /* whole 128-row tiles of the head's GEMMs (gemm_sm90's, the mma.sync
     * family's largest): 441 rows would leave a 57-row tile in each chunk */
    if (head_chunk <= 0 && chunk >= 128)
        chunk -= chunk % 128;
    if ((uint64_t)chunk > T)
        chunk = (int)T;
    p->chunk = chunk;
    p->arena = layers + 2 * T * H /* xf, hf */ +
               T * (5 * H + qd * 2 + kvd * 2 + wide) /* dx dxm dh part dtmp, dq datt, dk dv */ +
               mlpd /* dg du dact */
               + (act16 ? PGRT_LINEAR_COUNT : 1) * (3 * T * rmax + 64) /* dxa (three parts;
                                                      act16: one a lead module) */
               + (act16 ? T * (qd + 2 * kvd) / 2 + 192 : 0) /* dqb, dkb, dvb */ +
               T * c->heads /* delta */ +
               (fa3 ? T * qd / 2 + 64 /* dob; f32 q, k, v in dq's place */ +
                          (qd != kvd && I / 2 < qd ? 2 * T * qd : 0) /* dkh, dvh (else
                                                                        in dg, du) */ +
                          (uint64_t)B * c->heads * (((uint64_t)S + 127) / 128 * 128) * 2 + 64
                    : 0) +
               (bf16 ? 0 : (uint64_t)chunk * V) /* f32 logits */ + T /* loss */ +
               (drop ? T * widest : 0) /* xdrop */ +
               (bf16 ? T * wide /* xb, dyb: two bf16 halves */ + 64 + (uint64_t)chunk * V / 2 + 1
                     : 0);
    uint64_t wel = V * H * (c->tie_embeddings ? 1 : 2);
    for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
        int in, out;
        pgrt_linear_dims(c, (pgrt_linear)i, &in, &out);
        wel += (uint64_t)c->layers * in * out;
    }
    p->weights = wel * (bf16 ? 2 : 4) + (uint64_t)c->layers * (2 * H + qd + 2 * kvd + H) * 4 +
                 H * 4 + (c->qk_norm ? (uint64_t)c->layers * 2 * c->head_dim * 4 : 0);
    uint64_t lora = 0;
    if (ad)
        for (size_t i = 0; i < ad->count; i++)
            lora += (uint64_t)ad->w[i].r * (ad->w[i].in + ad->w[i].out);
    p->lora = lora;
}

uint64_t lm_plan_bytes(const lm_plan *p, const pgrt_lm_params *q)
{
    /* the LoRA f32 arrays: params, gradients, AdamW's two moments, and the
     * kept gradients and the accumulation sum where asked for */
    uint64_t copies = 4 + (q->keep_grads ? 1 : 0) + (q->grad_accum > 1 ? 1 : 0);
    uint64_t lora = p->lora * 4 * copies;
    if (q->comm && q->shard_optimizer) {
        /* the moments of one slice only */
        uint64_t w = (uint64_t)pgrt_comm_world(q->comm);
        lora -= p->lora * 8 - (p->lora + w - 1) / w * 8;
    }
    return p->arena * 4 + p->weights + p->scratch * 4 + lora +
           (64ull << 20) /* kernels, clip state, ids */;
}

static bool zero_or_normal(float x) { return x == 0 || isnormal(x); }

int lm_check_params(const pgrt_lm_params *p)
{
    if (!p || !p->model || !p->adapter)
        return model_fail(PGRT_EINVAL, "pgrt_lm: params, model and adapter are required");
    const pgrt_model_config *c = pgrt_model_files_config(p->model);
    if (p->batch < 1 || p->seq < 2)
        return model_fail(PGRT_EINVAL, "pgrt_lm: batch %d must be >= 1 and seq %d >= 2", p->batch,
                          p->seq);
    uint64_t T = (uint64_t)p->batch * p->seq;
    if (p->seq > PGRT_LM_MAX_SEQ || p->batch > 1000)
        return model_fail(PGRT_ERANGE, "pgrt_lm: batch %d x seq %d: at most 1000 rows of %d",
                          p->batch, p->seq, PGRT_LM_MAX_SEQ);
    if (p->dtype == PGRT_LM_F32 && p->seq > 16384)
        return model_fail(PGRT_ERANGE, "pgrt_lm: seq %d: f32 takes at most 16384 tokens a row (its "
                          "attention, one warp a query row, is the exact reference); bf16 "
                          "takes %d", p->seq, PGRT_LM_MAX_SEQ);
    /* The kernels count elements in 32 bits (their byte offsets are 64-bit:
     * mul.wide): every activation, [T, the widest row], and the logits
     * chunk hold fewer than 2^32 elements. */
    uint64_t qd = (uint64_t)c->heads * c->head_dim, kvd = (uint64_t)c->kv_heads * c->head_dim;
    uint64_t widest = u64max(u64max((uint64_t)c->hidden, (uint64_t)c->intermediate),
                             u64max(qd, 2 * kvd));
    uint64_t limit = ((1ull << 32) - 1) / widest;
    if (T > limit)
        return model_fail(PGRT_ERANGE, "pgrt_lm: batch %d x seq %d = %llu tokens: a [tokens, "
                          "%llu] activation would hold 2^32 elements or more (the kernels count "
                          "in 32 bits); at most %llu tokens a step for this model",
                          p->batch, p->seq, (unsigned long long)T,
                          (unsigned long long)widest, (unsigned long long)limit);
    if (p->head_chunk > 0 && (uint64_t)p->head_chunk * c->vocab >= (1ull << 32))
        return model_fail(PGRT_ERANGE, "pgrt_lm: head_chunk %d x vocab %d logits hold 2^32 "
                          "elements or more; at most %llu rows", p->head_chunk, c->vocab,
                          (unsigned long long)(((1ull << 32) - 1) / (uint64_t)c->vocab));
    if (c->head_dim > 128)
        return model_fail(PGRT_EINVAL,
                          "pgrt_lm: head_dim %d: the attention kernels take at most 128",
                          c->head_dim);
    if (c->heads > 128 || c->kv_heads > 128)
        return model_fail(PGRT_EINVAL, "pgrt_lm: at most 128 attention heads");
    const pgrt_adapter *a = p->adapter;
    if (a->count != (size_t)c->layers * (size_t)__builtin_popcount(a->cfg.targets))
        return model_fail(PGRT_EINVAL, "pgrt_lm: the adapter does not match the model's layers");
    for (size_t i = 0; i < a->count; i++) {
        int in, out;
        pgrt_linear_dims(c, a->w[i].module, &in, &out);
        if (a->w[i].in != in || a->w[i].out != out || a->w[i].layer < 0 ||
            a->w[i].layer >= c->layers)
            return model_fail(PGRT_EINVAL, "pgrt_lm: adapter module %s of layer %d has shape "
                                           "[%d, %d], the model's is [%d, %d]",
                              pgrt_linear_name(a->w[i].module), a->w[i].layer, a->w[i].out,
                              a->w[i].in, out, in);
    }
    /* a subnormal lr trains with 0 on a device that flushes denormals */
    if (!zero_or_normal(p->lr) || !zero_or_normal(p->max_norm) ||
        !zero_or_normal(p->weight_decay) || !(p->lr >= 0) || !(p->max_norm >= 0))
        return model_fail(PGRT_EINVAL, "pgrt_lm: lr, max_norm and weight_decay must each be 0 "
                                       "or a normal float, lr and max_norm >= 0");
    float scale = (float)pgrt_adapter_scale(&a->cfg);
    if (!(scale > 0) || !isnormal(scale))
        return model_fail(PGRT_ERANGE,
                          "pgrt_lm: the LoRA scale lora_alpha / %s = %g / %d is not a normal "
                          "float",
                          a->cfg.rslora ? "sqrt(r)" : "r", a->cfg.alpha, a->cfg.r);
    /* each pair as its config gives it (rank_pattern, alpha_pattern): the
     * products take the pair's r and scale */
    model_lora_keys *keys = NULL;
    int rc = model_lora_keys_new(&a->cfg, "pgrt_lm: adapter: ", &keys);
    for (size_t i = 0; !rc && i < a->count; i++) {
        const pgrt_lora *w = &a->w[i];
        pgrt_lora_setting st;
        model_lora_keys_pair(keys, w->layer, w->module, &st);
        float ps = (float)w->scale;
        if (w->r != st.r || w->scale != st.scale || !(ps > 0) || !isnormal(ps))
            rc = model_fail(PGRT_EINVAL, "pgrt_lm: adapter module %s of layer %d: r %d and "
                            "scale %g, its config gives r %d and scale %g (a normal float)",
                            pgrt_linear_name(w->module), w->layer, w->r, w->scale, st.r,
                            st.scale);
    }
    model_lora_keys_free(&keys);
    if (rc)
        return rc;
    if ((unsigned)p->recompute > PGRT_LM_RECOMPUTE_AUTO)
        return model_fail(PGRT_EINVAL, "pgrt_lm: recompute %d is not a pgrt_lm_recompute",
                          (int)p->recompute);
    if (!(p->max_memory_gib >= 0) || !isfinite(p->max_memory_gib))
        return model_fail(PGRT_EINVAL, "pgrt_lm: max_memory_gib %g must be finite and >= 0 (0: "
                          "the device's free memory)", p->max_memory_gib);
    if (p->shard_optimizer && !p->comm)
        return model_fail(PGRT_EINVAL, "pgrt_lm: shard_optimizer needs a comm: it shards over "
                          "the ranks of a data-parallel run");
    if (p->grad_accum < 0 || p->grad_accum > 65536)
        return model_fail(PGRT_EINVAL, "pgrt_lm: grad_accum %d: 0 or 1 (every micro-batch "
                          "updates) to 65536", p->grad_accum);
    const pgrt_lm_schedule *sc = &p->schedule;
    if ((unsigned)sc->kind > PGRT_LM_SCHED_COSINE)
        return model_fail(PGRT_EINVAL, "pgrt_lm: schedule kind %d is not a pgrt_lm_sched_kind",
                          (int)sc->kind);
    if (!(sc->floor >= 0 && sc->floor <= 1))
        return model_fail(PGRT_EINVAL, "pgrt_lm: schedule floor %g must be in [0, 1]",
                          (double)sc->floor);
    if (sc->kind != PGRT_LM_SCHED_CONSTANT && sc->total_steps == 0)
        return model_fail(PGRT_EINVAL, "pgrt_lm: a %s schedule needs total_steps >= 1",
                          sc->kind == PGRT_LM_SCHED_LINEAR ? "linear" : "cosine");
    /* steps are counted in the optimizer's f32 word: exact to 2^24 */
    if (sc->total_steps > (1u << 24) || sc->warmup_steps > (1u << 24))
        return model_fail(PGRT_ERANGE, "pgrt_lm: schedule steps %u / %u: at most 2^24",
                          sc->warmup_steps, sc->total_steps);
    return 0;
}

bool lm_act16(const pgrt_lm_params *p, pg_target arch)
{
    const pgrt_model_config *c = pgrt_model_files_config(p->model);
    const pgrt_adapter *ad = p->adapter;
    int qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
    if (p->dtype != PGRT_LM_BF16 || arch != PG_SM_90A || ad->count == 0 ||
        ad->cfg.dropout > 0 || (c->hidden | c->intermediate | qd | kvd) % 8)
        return false;
    for (size_t i = 0; i < ad->count; i++)
        if (ad->w[i].r % 8)
            return false;
    return true;
}

bool lm_fa3(const pgrt_lm_params *p, bool act16)
{
    const pgrt_model_config *c = pgrt_model_files_config(p->model);
    const char *env = getenv("PGRT_LM_ATTENTION");
    return act16 && !p->packed && c->head_dim % 8 == 0 && c->head_dim <= 128 &&
           !(env && !strcmp(env, "mma"));
}

bool lm_plan_fit(const pgrt_lm_params *p, bool act16, uint64_t budget, lm_plan *pl)
{
    const pgrt_model_config *c = pgrt_model_files_config(p->model);
    int L = c->layers;
    int k = p->recompute == PGRT_LM_RECOMPUTE_LAYERS ? L : 0;
    int last = p->recompute == PGRT_LM_RECOMPUTE_AUTO ? L : k;
    /* one recomputed layer saves nothing: the recomputed layers share
     * one set of activations */
    for (;; k += k == 0 && last > 1 ? 2 : 1) {
        lm_plan_make(c, p->adapter, p->batch, p->seq, p->dtype == PGRT_LM_BF16, act16,
                     lm_fa3(p, act16), p->head_chunk, k, pl);
        if (!budget || lm_plan_bytes(pl, p) <= budget)
            return true;
        if (k == last)
            return false;
    }
}

int pgrt_lm_bytes(const pgrt_lm_params *p, uint64_t *bytes)
{
    int rc = lm_check_params(p);
    if (rc)
        return rc;
    lm_plan pl;
    uint64_t budget = p->recompute == PGRT_LM_RECOMPUTE_AUTO && p->max_memory_gib > 0
                      ? (uint64_t)(p->max_memory_gib * 1073741824.0) : 0;
    lm_plan_fit(p, false, budget, &pl); /* the device is not known: f32 MLP activations */
    *bytes = lm_plan_bytes(&pl, p);
    return 0;
}

/* The LoRA layout: layer by layer, group by group (lora_d), the group's
 * A's one after another, then its B's. A group's pairs split into runs of
 * one rank and one scale (module order); a run stacks its pairs while they
 * fit the thin kernels' LORA_THIN_RANK columns. Without rank_pattern and
 * alpha_pattern a group is one run: the layout of a single rank. */
void lm_lora_layout(pgrt_lm *m, const pgrt_adapter *ad)
{
    for (size_t i = 0; i < (size_t)m->c.layers * PGRT_LINEAR_COUNT; i++)
        m->lora[i] = (lora_d){-1, -1, 0, 0, 1, 0, 0};
    /* FNV-1a over (layer, module, r) of each pair: the state file's rank */
    uint64_t sig = 0xcbf29ce484222325ull;
    bool mixed = false;
    m->rmax = 0;
    for (size_t i = 0; i < ad->count; i++) {
        const pgrt_lora *w = &ad->w[i];
        lora_d *d = &m->lora[w->layer * PGRT_LINEAR_COUNT + w->module];
        d->a = 0;
        d->r = w->r;
        d->scale = (float)w->scale;
        m->rmax = w->r > m->rmax ? w->r : m->rmax;
        mixed |= w->r != m->r;
        const uint32_t words[3] = {(uint32_t)w->layer, (uint32_t)w->module, (uint32_t)w->r};
        for (int k = 0; k < 3; k++)
            for (int byte = 0; byte < 4; byte++)
                sig = (sig ^ ((words[k] >> (8 * byte)) & 0xffu)) * 0x100000001b3ull;
    }
    m->rank_sig = mixed ? (sig ? sig : 1) : 0;
    int64_t off = 0;
    for (int l = 0; l < m->c.layers; l++)
        for (int g0 = 0, g1; g0 < PGRT_LINEAR_COUNT; g0 = g1) {
            lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT];
            int in, nout;
            for (g1 = g0; g1 < PGRT_LINEAR_COUNT && lora_group_of[g1] == lora_group_of[g0]; g1++)
                ;
            for (int i = g0, j; i < g1; i = j) {
                if (ld[i].a < 0) {
                    j = i + 1;
                    continue;
                }
                /* the run from i: pairs of i's rank and scale, up to j */
                int n = 0;
                for (j = i; j < g1; j++) {
                    if (ld[j].a < 0)
                        continue;
                    if (ld[j].r != ld[i].r || ld[j].scale != ld[i].scale)
                        break;
                    n++;
                }
                bool stack = n * ld[i].r <= LORA_THIN_RANK;
                for (int k = i, part = 0; k < j; k++) {
                    if (ld[k].a < 0)
                        continue;
                    pgrt_linear_dims(&m->c, (pgrt_linear)k, &in, &nout);
                    ld[k].a = off;
                    ld[k].lead = stack ? i : k;
                    ld[k].part = stack ? part++ : 0;
                    ld[k].parts = stack ? n : 1;
                    off += (int64_t)ld[k].r * in;
                }
            }
            for (int i = g0; i < g1; i++)
                if (ld[i].a >= 0) {
                    pgrt_linear_dims(&m->c, (pgrt_linear)i, &in, &nout);
                    ld[i].b = off;
                    off += (int64_t)nout * ld[i].r;
                }
        }
    m->nlora = (size_t)off;
}

static pgrt_devptr take(pgrt_devptr base, uint64_t *off, uint64_t elems)
{
    pgrt_devptr p = base + *off * 4u;
    *off += (elems + 63u) & ~(uint64_t)63u; /* 256-byte aligned */
    return p;
}

/* q, k and v of T rows (widths qd, kvd, kvd), one after another in one
 * take, `bytes` an element (4: f32, 2: bf16): one cast or one launch
 * covers all three, and each part stays 16-byte aligned (widths are
 * multiples of 8 where this is used). */
static void take_qkv(pgrt_devptr base, uint64_t *off, uint64_t T, uint64_t qd, uint64_t kvd,
                     unsigned bytes, pgrt_devptr *q, pgrt_devptr *k, pgrt_devptr *v)
{
    *q = take(base, off, (T * (qd + 2 * kvd) * bytes + 3) / 4);
    *k = *q + T * qd * bytes;
    *v = *k + T * kvd * bytes;
}

/* Layer l's xa from base on, a group's part after part (lora_d), each
 * group 256-byte aligned; a NULL: only the size. The elements it spans. */
static uint64_t layer_xa(pgrt_lm *m, int l, layer_a *a, pgrt_devptr base)
{
    uint64_t T = (uint64_t)m->T, off = 0;
    pgrt_devptr grp = 0;
    for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
        const lora_d *d = &m->lora[l * PGRT_LINEAR_COUNT + i];
        if (d->a >= 0 && d->part == 0)
            grp = take(base, &off, (uint64_t)d->parts * T * d->r);
        if (a)
            a->xa[i] = d->a >= 0 ? grp + (uint64_t)d->part * T * d->r * 4u : 0;
    }
    return off;
}

int lm_arena_layout(pgrt_lm *m, const lm_plan *pl)
{
    uint64_t T = (uint64_t)m->T, H = m->c.hidden, I = m->c.intermediate, V = m->c.vocab;
    uint64_t qd = (uint64_t)m->c.heads * m->c.head_dim, kvd = (uint64_t)m->c.kv_heads * m->c.head_dim;
    uint64_t elems = pl->arena + 64u * (40u + 20u * (uint64_t)m->c.layers);
    int rc = pgrt_buf_alloc(m->ctx, PG_F32, elems, &m->arena);
    if (rc)
        return rc;
    m->arena_bytes = elems * 4;
    pgrt_devptr base = pgrt_buf_ptr(m->arena);
    uint64_t off = 0;
    /* every layer's input; the recomputed layers' shared set first */
    for (int l = 0; l < m->c.layers; l++)
        m->la[l].x = take(base, &off, T * H);
    for (int l = 0; l < m->c.layers; l++) {
        layer_a *a = &m->la[l];
        if (l > 0 && l < pl->recompute) {
            pgrt_devptr x = a->x;
            *a = m->la[0];
            a->x = x;
            layer_xa(m, l, a, m->la[0].xa_base);
            continue;
        }
        if (m->act16)
            a->h1b = take(base, &off, (T * H + 1) / 2);
        else
            a->h1 = take(base, &off, T * H);
        if (m->fa3) { /* bf16, adjacent: one narrowing cast */
            take_qkv(base, &off, T, qd, kvd, 2, &a->qb, &a->kb, &a->vb);
        } else {
            a->q = take(base, &off, T * qd);
            a->k = take(base, &off, T * kvd);
            a->v = take(base, &off, T * kvd);
        }
        a->att = take(base, &off, T * qd);
        if (m->act16)
            a->attb = take(base, &off, (T * qd + 1) / 2);
        a->lse = take(base, &off, T * m->c.heads);
        a->xm = take(base, &off, T * H);
        /* act16: bf16, two to an f32 element */
        uint64_t mlp = m->act16 ? (T * I + 1) / 2 : T * I;
        if (m->act16)
            a->h2b = take(base, &off, (T * H + 1) / 2);
        else
            a->h2 = take(base, &off, T * H);
        a->g = take(base, &off, mlp);
        a->u = take(base, &off, mlp);
        a->act = take(base, &off, mlp);
        if (m->c.qk_norm) {
            a->qpre = take(base, &off, T * qd);
            a->kpre = take(base, &off, T * kvd);
        }
        /* the shared set's xa: room for the widest recomputed layer's */
        uint64_t xa = 0;
        for (int j = l; j < (l < pl->recompute ? pl->recompute : l + 1); j++) {
            uint64_t n = layer_xa(m, j, NULL, 0);
            xa = n > xa ? n : xa;
        }
        a->xa_base = take(base, &off, xa);
        layer_xa(m, l, a, a->xa_base);
    }
    uint64_t widest = u64max(u64max(H, I), u64max(qd, 2 * kvd));
    uint64_t wide = m->act16 ? u64max(H, u64max(qd, 2 * kvd)) : widest; /* lm_plan_make */
    m->xf = take(base, &off, T * H);
    m->hf = take(base, &off, T * H);
    m->dx = take(base, &off, T * H);
    m->dxm = take(base, &off, T * H);
    m->dh = take(base, &off, T * H);
    m->part = take(base, &off, T * H);
    m->dtmp = take(base, &off, T * wide);
    /* act16: dq, dk, dv one after another, and so their bf16 copies, for
     * one narrowing cast (every width a multiple of 8: each part stays
     * 32-byte aligned) */
    m->datt = take(base, &off, T * qd);
    if (m->act16) {
        take_qkv(base, &off, T, qd, kvd, 4, &m->dq, &m->dk, &m->dv);
    } else {
        m->dq = take(base, &off, T * qd);
        m->dk = take(base, &off, T * kvd);
        m->dv = take(base, &off, T * kvd);
    }
    if (m->act16) { /* bf16: two to an f32 element */
        m->dg = take(base, &off, (T * I + 1) / 2);
        m->du = take(base, &off, (T * I + 1) / 2);
        m->dact = take(base, &off, (T * I + 1) / 2);
    } else {
        m->dg = take(base, &off, T * I);
        m->du = take(base, &off, T * I);
        m->dact = take(base, &off, T * H > T * I ? T * H : T * I);
    }
    /* a group's, part after part; act16: one for each lead module (the
     * side stream's dA reads its own) */
    uint64_t dxa = 3 * T * (m->rmax ? m->rmax : 1);
    m->dxa = take(base, &off, dxa);
    m->dxa_stride = ((dxa + 63u) & ~(uint64_t)63u) * 4u;
    if (m->act16) {
        for (int i = 1; i < PGRT_LINEAR_COUNT; i++)
            take(base, &off, dxa);
        take_qkv(base, &off, T, qd, kvd, 2, &m->dqb, &m->dkb, &m->dvb);
    }
    m->delta = take(base, &off, T * m->c.heads);
    if (m->fa3) {
        /* f32 q, k, v: one scratch for every layer, in dq, dk, dv's place
         * (the forward's are narrowed before anything reads dq; a
         * recomputed layer's forward runs after the layer above's
         * backward has narrowed its dq, dk, dv) */
        pgrt_devptr q = m->dq;
        for (int l = 0; l < m->c.layers; l++) {
            m->la[l].q = q;
            m->la[l].k = q + T * qd * 4;
            m->la[l].v = m->la[l].k + T * kvd * 4;
        }
        m->dob = take(base, &off, (T * qd + 1) / 2);
        uint64_t sp = ((uint64_t)m->S + 127) / 128 * 128;
        m->att_stats = take(base, &off, (uint64_t)m->B * m->c.heads * sp * 2);
        /* each query head's dK, dV: in dg and du, dead in the attention
         * backward (the side stream joined before the norm above it), when
         * they are wide enough */
        if (qd != kvd && I / 2 >= qd) {
            m->dkh = m->dg;
            m->dvh = m->du;
        } else if (qd != kvd) {
            m->dkh = take(base, &off, T * qd);
            m->dvh = take(base, &off, T * qd);
        }
    }
    if (!m->lowp)
        m->logits = take(base, &off, (uint64_t)m->chunk * V);
    m->loss = take(base, &off, T);
    if (m->drop)
        m->xdrop = take(base, &off, T * widest);
    if (m->lowp) {
        m->xb = take(base, &off, (T * wide + 1) / 2);
        m->dyb = take(base, &off, (T * wide + 1) / 2);
        m->logits_b = take(base, &off, ((uint64_t)m->chunk * V + 1) / 2);
    }
    if (off > elems)
        return model_fail(PGRT_EINVAL, "pgrt_lm: arena plan too small (%llu > %llu elements)",
                          (unsigned long long)off, (unsigned long long)elems);
    return 0;
}
