/* SPDX-License-Identifier: MIT */
/* pgrt_lm's launches: the kernels of the step resolved once at create
 * (lm_kernels_resolve), their launch (lm_run), the knob-by-name launch the
 * linear layers still use (lm_launch_kn), and the profile's buckets. */
#include "lm_internal.h"


int lm_kn_of(const pgk_desc *d, const knv *kv, size_t n, pgk_knobs *kn)
{
    pgk_knobs_default(d, kn);
    for (size_t i = 0; i < n; i++) {
        int j = pgk_knob_index(d, kv[i].name);
        if (j < 0)
            return model_fail(PGRT_EINVAL, "pgrt_lm: kernel %s has no knob %s", d->name,
                              kv[i].name);
        kn->v[j] = kv[i].v;
    }
    pgk_pick(d, kn);
    return 0;
}

/* ---------------------------------------------------------------- profile */

/* The time-split bucket of a kernel. In bf16 the f32 GEMMs are the LoRA
 * products only; the LoRA kernels count as GEMMs in f32, as those did. */
int lm_bucket(bool lowp, int k)
{
    switch (k) {
    case K_GEMM_NN:
    case K_GEMM_NN_ACC:
    case K_GEMM_NT:
    case K_GEMM_NT_ACC:
    case K_GEMM_TN:
    case K_LORA_PROJ:
    case K_LORA_PROJ_BF16:
    case K_LORA_GRAD:
    case K_LORA_GRAD_BF16:
    case K_LORA_UP:
    case K_LORA_CAST:
    case K_LORA_NARROW:
        return lowp ? PGRT_LM_TIME_LORA_GEMM : PGRT_LM_TIME_GEMM;
    case K_WIDEN:
        return PGRT_LM_TIME_GEMM;
    case K_ATT_FWD:
    case K_ATT_DQ:
    case K_ATT_DKV:
    case K_ATT_PREP:
    case K_ATT_GROUP:
        return PGRT_LM_TIME_ATTENTION;
    case K_CE:
    case K_CE_BF16:
        return PGRT_LM_TIME_CE;
    default:
        return PGRT_LM_TIME_REST;
    }
}

/* ms of one waited-for launch of kernel `name` to its bucket and to its
 * (name, bucket) entry. A name is its descriptor's: one pointer a kernel. */
void lm_profile_add(pgrt_lm *m, const char *name, int kind, double ms)
{
    m->prof_ms[kind] += ms;
    size_t i = 0;
    while (i < m->prof_nk && !(m->prof_k[i].kind == kind && m->prof_k[i].name == name))
        i++;
    if (i == m->prof_nk) {
        if (i == PGRT_LM_PROFILE_KERNELS) {
            i--; /* the last entry sums the rest */
            m->prof_k[i].name = "(others)";
        } else {
            m->prof_k[i] = (pgrt_lm_kernel_time){.name = name, .kind = kind};
            m->prof_nk++;
        }
    }
    m->prof_k[i].ms += ms;
    m->prof_k[i].launches++;
}

/* A profiled launch's GPU time: events on both sides, the second waited
 * for (the events are made at the first use). */
int lm_prof_start(pgrt_lm *m, pgrt_stream *s)
{
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        if (!m->ev[i])
            rc = pgrt_event_create(m->ctx, &m->ev[i]);
    return rc ? rc : pgrt_event_record(m->ev[0], s);
}

int lm_prof_stop(pgrt_lm *m, pgrt_stream *s, const char *name, int bucket)
{
    float ms = 0;
    int rc = pgrt_event_record(m->ev[1], s);
    if (!rc && !(rc = pgrt_event_sync(m->ev[1])) &&
        !(rc = pgrt_event_elapsed_ms(m->ev[0], m->ev[1], &ms)))
        lm_profile_add(m, name, bucket, ms);
    return rc;
}

/* ---------------------------------------------------------------- launches */

int lm_launch_kn(pgrt_lm *m, pgrt_stream *s, int k, const pgk_desc *d, const pgk_knobs *knp,
                 const pgrt_arg *a, size_t na)
{
    pgk_knobs kn = *knp;
    pgrt_kernel *h = NULL;
    int rc = pgrt_kernel_get(m->ctx, d, &kn, &h);
    if (rc)
        return rc;
    if (m->warming)
        return 0;
    m->launches++;
    if (!m->profile)
        return pgrt_kernel_launch(h, s, &kn, a, na);
    /* profiling (eager only): each launch between two events, waited for */
    if ((rc = lm_prof_start(m, s)) || (rc = pgrt_kernel_launch(h, s, &kn, a, na)))
        return rc;
    return lm_prof_stop(m, s, d->name, lm_bucket(m->lowp, k));
}

int lm_run(pgrt_lm *m, pgrt_stream *s, const lm_kernel *k, const pgrt_arg *a, size_t na)
{
    if (m->warming)
        return 0;
    m->launches++;
    if (!m->profile)
        return rt_launch_run(&k->l, s, a, na);
    int rc;
    if ((rc = lm_prof_start(m, s)) || (rc = rt_launch_run(&k->l, s, a, na)))
        return rc;
    return lm_prof_stop(m, s, k->l.k->desc->name, k->bucket);
}

/* ---------------------------------------------------------------- resolved at create */

static int resolve(pgrt_lm *m, lm_kernel *out, int k, const knv *kv, size_t n)
{
    pgk_knobs kn;
    int rc = lm_kn_of(m->desc[k], kv, n, &kn);
    if (rc || (rc = rt_launch_resolve(m->ctx, m->desc[k], &kn, &out->l)))
        return rc;
    out->bucket = lm_bucket(m->lowp, k);
    return 0;
}

int lm_kernels_resolve(pgrt_lm *m)
{
    lm_kernels *k = &m->k;
    uint32_t T = (uint32_t)m->T, H = (uint32_t)m->c.hidden, V = (uint32_t)m->c.vocab;
    uint32_t hd = (uint32_t)m->c.head_dim, TH = T * H, TI = T * (uint32_t)m->c.intermediate;
    uint32_t rows[2] = {(uint32_t)m->chunk, T % (uint32_t)m->chunk};
    int rc;
    for (uint32_t r = 0; r < 2 && m->lowp; r++)
        if ((rc = resolve(m, &k->rms_fwd_add[r], K_RMS_FWD_ADD,
                          KN({"rows", T}, {"cols", H}, {"residual", r},
                             {"f32_output", m->act16 ? 0u : 1u}))) ||
            (rc = resolve(m, &k->rms_bwd_add[r], K_RMS_BWD_ADD,
                          KN({"rows", T}, {"cols", H}, {"residual", r}))))
            return rc;
    if (!m->lowp &&
        ((rc = resolve(m, &k->rms_fwd, K_RMS_FWD, KN({"rows", T}, {"cols", H}))) ||
         (rc = resolve(m, &k->rms_bwd, K_RMS_BWD, KN({"rows", T}, {"cols", H}))) ||
         (rc = resolve(m, &k->add, K_ADD, KN({"n", TH})))))
        return rc;
    if ((rc = resolve(m, &k->gather, m->lowp ? K_GATHER_BF16 : K_GATHER,
                      KN({"rows", T}, {"cols", H}))) ||
        (m->lowp && (rc = resolve(m, &k->widen_x, K_WIDEN, KN({"n", TH})))) ||
        (rc = resolve(m, &k->rope_fwd, K_ROPE_FWD, KN({"rows", T}, {"head_dim", hd}))) ||
        (rc = resolve(m, &k->rope_bwd, K_ROPE_BWD, KN({"rows", T}, {"head_dim", hd}))) ||
        (rc = resolve(m, &k->att_fwd, K_ATT_FWD,
                      KN({"batch", m->B}, {"seq_len", m->S}, {"q_heads", m->c.heads},
                         {"head_dim", hd}))) ||
        (rc = resolve(m, &k->att_dq, K_ATT_DQ,
                      KN({"batch", m->B}, {"seq_len", m->S}, {"q_heads", m->c.heads},
                         {"head_dim", hd}))) ||
        (rc = resolve(m, &k->att_dkv, K_ATT_DKV,
                      KN({"batch", m->B}, {"seq_len", m->S},
                         {m->fa3 ? "q_heads" : "kv_heads", m->fa3 ? m->c.heads : m->c.kv_heads},
                         {"head_dim", hd}))) ||
        (m->fa3 && m->c.heads != m->c.kv_heads &&
         (rc = resolve(m, &k->att_group, K_ATT_GROUP,
                       KN({"n", T * (uint32_t)m->c.kv_heads * hd})))) ||
        (m->fa3 && (rc = resolve(m, &k->att_prep, K_ATT_PREP,
                                 KN({"batch", m->B}, {"seq_len", m->S},
                                    {"q_heads", m->c.heads}, {"head_dim", hd})))) ||
        (m->act16 && (rc = resolve(m, &k->narrow_dqkv, K_NARROW,
                                   KN({"n", T * (uint32_t)(m->c.heads + 2 * m->c.kv_heads) * hd})))) ||
        (m->lowp && (rc = resolve(m, &k->narrow_att, K_NARROW,
                                  KN({"n", T * (uint32_t)m->c.heads * hd})))) ||
        (rc = resolve(m, &k->swiglu_fwd,
                      m->act16 ? K_SWIGLU_FWD_B16 : m->lowp ? K_SWIGLU_FWD_BF16 : K_SWIGLU_FWD,
                      KN({"n", TI}))) ||
        (rc = resolve(m, &k->swiglu_bwd,
                      m->act16 ? K_SWIGLU_BWD_B16 : m->lowp ? K_SWIGLU_BWD_BF16 : K_SWIGLU_BWD,
                      KN({"n", TI}))))
        return rc;
    if (m->accum > 1 && (rc = resolve(m, &k->gacc_add, K_ADD, KN({"n", (uint32_t)m->nlora}))))
        return rc;
    for (int i = 0; i < 2 && m->c.qk_norm; i++) {
        uint32_t nr = T * (uint32_t)(i ? m->c.kv_heads : m->c.heads);
        if ((rc = resolve(m, &k->qk_fwd[i], K_RMS_FWD, KN({"rows", nr}, {"cols", hd}))) ||
            (rc = resolve(m, &k->qk_bwd[i], K_RMS_BWD, KN({"rows", nr}, {"cols", hd}))))
            return rc;
    }
    if (m->sched && (rc = resolve(m, &k->lr_sched, K_LR_SCHED, NULL, 0)))
        return rc;
    /* the last chunk's kernels only where it is shorter */
    for (int i = 0; i < 2 && rows[i]; i++)
        if ((rc = resolve(m, &k->ce[i], m->lowp ? K_CE_BF16 : K_CE,
                          KN({"rows", rows[i]}, {"cols", V}))))
            return rc;
    return 0;
}
