/* SPDX-License-Identifier: MIT */
/* The transformer of pgrt_lm.h: weights on the device, one activation
 * arena, the forward/loss/backward launch sequence and the pgrt_train
 * pipeline around it. */
#include "pgrt_lm.h"

#include "model_internal.h"
#include "pgrt_train.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- kernels */

#define LM_KERNELS(X)                                                          \
    X(GEMM_NN, "gemm_forward")                                                 \
    X(GEMM_NN_ACC, "gemm_forward_accumulate")                                  \
    X(GEMM_NT, "gemm_backward_a")                                              \
    X(GEMM_NT_ACC, "gemm_backward_a_accumulate")                               \
    X(GEMM_TN, "gemm_backward_b")                                              \
    X(RMS_FWD, "rms_norm_forward")                                             \
    X(RMS_BWD, "batched_rms_norm_backward")                                    \
    X(RMS_FWD_ADD, "rms_norm_forward_add_bf16")                                \
    X(RMS_BWD_ADD, "rms_norm_backward_add_bf16")                               \
    X(ADD, "residual_add")                                                     \
    X(GATHER, "embedding_gather_f32")                                          \
    X(GATHER_BF16, "embedding_gather_bf16")                                    \
    X(ROPE_FWD, "rope_forward_f32")                                            \
    X(ROPE_BWD, "rope_backward_f32")                                           \
    X(SWIGLU_FWD, "swiglu_forward_f32")                                        \
    X(SWIGLU_BWD, "swiglu_backward_f32")                                       \
    X(SWIGLU_FWD_BF16, "swiglu_forward_f32_bf16")                              \
    X(SWIGLU_BWD_BF16, "swiglu_backward_f32_bf16")                             \
    X(SCALE, "gradient_clip")                                                  \
    X(BIAS, "bias_add_f32")                                                    \
    X(CE, "cross_entropy_fwd_bwd_f32")                                         \
    X(ATT_FWD, "attention_forward_f32")                                        \
    X(ATT_DQ, "attention_backward_dq_f32")                                     \
    X(ATT_DKV, "attention_backward_dkv_f32")                                   \
    X(WIDEN, "cast_bf16_to_f32")                                               \
    X(NARROW, "cast_f32_to_bf16")                                              \
    X(LORA_PROJ, "lora_proj_f32")                                              \
    X(LORA_PROJ_BF16, "lora_proj_bf16")                                        \
    X(LORA_GRAD, "lora_grad_f32")                                              \
    X(LORA_GRAD_BF16, "lora_grad_bf16")                                        \
    X(LORA_UP, "lora_up_f32")                                                  \
    X(LORA_CAST, "cast_f32_to_bf16_scaled2")                                   \
    X(LORA_NARROW, "cast_f32_to_bf16")

enum {
#define X_(id, name) K_##id,
    LM_KERNELS(X_)
#undef X_
        K_COUNT,
    K_LP_GEMM = K_COUNT /* the bf16 family: bucket only */
};

static const char *const kernel_names[K_COUNT] = {
#define X_(id, name) name,
    LM_KERNELS(X_)
#undef X_
};

/* A knob value by name, for kn_of. */
typedef struct knv {
    const char *name;
    uint32_t v;
} knv;

/* ---------------------------------------------------------------- state */

/* One base weight on the device: f32, or bf16 (PG_U16 storage) widened
 * into the scratch buffer before a GEMM reads it. */
typedef struct dweight {
    pgrt_buf *buf;
    bool bf16;
    uint64_t count;
} dweight;

typedef struct layer_w {
    dweight lin[PGRT_LINEAR_COUNT];
    pgrt_buf *norm_in, *norm_post; /* f32 */
    pgrt_buf *bias[PGRT_LINEAR_COUNT]; /* f32 or NULL */
} layer_w;

/* Device addresses (arena offsets resolved) of one layer's saved
 * activations. */
typedef struct layer_a {
    pgrt_devptr x, h1, q, k, v, att, lse, xm, h2, g, u, act;
    pgrt_devptr xa[PGRT_LINEAR_COUNT]; /* (alpha/r) x A^T, [T, r] */
} layer_a;

/* A LoRA pair on the device: offsets (elements) into the parameter
 * buffer; -1 for a module without LoRA. The pairs of a layer that read
 * one input (q, k, v; gate, up) form a group: their A's lie one after
 * another (a [parts x r, in] matrix at the first one's a), their xa (and
 * dxa) part after part, so one pass over the input serves all of them. */
typedef struct lora_d {
    int64_t a, b;
    int lead;  /* the module of the group's first pair */
    int part;  /* this pair's place in the group */
    int parts; /* pairs in the group */
} lora_d;

struct pgrt_lm {
    pgrt_ctx *ctx;
    pgrt_hf_config c;
    int B, S, T, r;
    float lora_scale;
    unsigned targets;
    bool bf16;
    int chunk; /* head rows a chunk */
    bool profile;
    double prof_ms[PGRT_LM_TIME_COUNT];
    size_t prof_nk;
    pgrt_lm_kernel_time prof_k[PGRT_LM_PROFILE_KERNELS];

    const pgk_desc *desc[K_COUNT];
    bool warming; /* get kernels, launch nothing */
    size_t launches;

    dweight embed, head; /* head.buf NULL when tied */
    pgrt_buf *norm_final;
    layer_w *lw;
    pgrt_buf *wscratch; /* f32, the largest bf16 weight widened (unused: see lowp) */
    /* bf16: the base GEMMs run on the bf16 tensor-core family with bf16
     * copies of their activation operand (xb, dyb, logits_b) */
    bool lowp;
    pg_target target, arch_target; /* arch_target sm_90a: gemm_sm90 (wgmma + TMA) */
    unsigned sms;
    struct lm_gemm *gemms;         /* the step's GEMMs, in its order (gemm()) */
    size_t ngemm, gemm_cap, gemm_next;
    pgrt_devptr xb, dyb, logits_b;
    /* bf16 on sm_90a: LoRA inside the base GEMMs (linear_fwd_fused), on
     * bf16 copies of the LoRA weights: pbf holds A and B, then s A, s B */
    bool fused;
    pgrt_buf *pbf;
    pgrt_buf *ws;        /* split-K workspace */
    uint64_t ws_need;    /* the largest workspace a GEMM of the step wants */
    pgrt_buf *lcnt;      /* u32 arrival counters of the LoRA kernels, zero between launches */
    uint32_t lcnt_need;

    pgrt_buf *arena; /* f32 activations */
    layer_a *la;
    pgrt_devptr xf, hf, dx, dxm, dh, dq, dk, dv, datt, dg, du, dact, dxa, delta, part, dtmp, logits,
        loss;
    pgrt_buf *ints; /* ids, labels, error word */
    pgrt_devptr ids, labels, errw;
    pgrt_buf *lossview; /* the per-row losses, for the download */

    pgrt_buf *p, *g, *gkeep; /* LoRA params, gradients, kept gradients (f32) */
    size_t nlora;
    lora_d *lora; /* layers x PGRT_LINEAR_COUNT */
    pgrt_train *train;

    int32_t *hid, *hlab;
    float *hloss;
    uint64_t arena_bytes, weight_bytes, lora_bytes;
};

/* ---------------------------------------------------------------- launches */

static int kn_of(const pgk_desc *d, const knv *kv, size_t n, pgk_knobs *kn)
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

/* The time-split bucket of a kernel. In bf16 the f32 GEMMs are the LoRA
 * products only; the LoRA kernels count as GEMMs in f32, as those did. */
static int bucket(bool lowp, int k)
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
    case K_LP_GEMM:
        return PGRT_LM_TIME_GEMM;
    case K_ATT_FWD:
    case K_ATT_DQ:
    case K_ATT_DKV:
        return PGRT_LM_TIME_ATTENTION;
    case K_CE:
        return PGRT_LM_TIME_CE;
    default:
        return PGRT_LM_TIME_REST;
    }
}

static double clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ms of one waited-for launch of kernel `name` to its bucket and to its
 * (name, bucket) entry. */
static void profile_add(pgrt_lm *m, const char *name, int kind, double ms)
{
    m->prof_ms[kind] += ms;
    size_t i = 0;
    while (i < m->prof_nk && !(m->prof_k[i].kind == kind &&
                                (m->prof_k[i].name == name || !strcmp(m->prof_k[i].name, name))))
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

static int launch_kn(pgrt_lm *m, pgrt_stream *s, int k, const pgk_desc *d, const pgk_knobs *knp,
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
    /* profiling (eager only): each launch waited for, its time to its bucket */
    double t0 = clock_ms();
    if (!(rc = pgrt_kernel_launch(h, s, &kn, a, na)) && !(rc = pgrt_stream_sync(s)))
        profile_add(m, d->name, bucket(m->lowp, k), clock_ms() - t0);
    return rc;
}

static int launch(pgrt_lm *m, pgrt_stream *s, int k, const knv *kv, size_t nkv, const pgrt_arg *a,
                  size_t na)
{
    pgk_knobs kn;
    int rc = kn_of(m->desc[k], kv, nkv, &kn);
    if (rc)
        return rc;
    return launch_kn(m, s, k, m->desc[k], &kn, a, na);
}

#define KN(...) ((const knv[]){__VA_ARGS__}), (sizeof((const knv[]){__VA_ARGS__}) / sizeof(knv))
#define ARGS(...)                                                              \
    ((const pgrt_arg[]){__VA_ARGS__}),                                         \
        (sizeof((const pgrt_arg[]){__VA_ARGS__}) / sizeof(pgrt_arg))
#define P(x) pgrt_arg_ptr(x)
#define U(x) pgrt_arg_u32((uint32_t)(x))
#define F(x) pgrt_arg_f32((float)(x))

/* The device address of a weight as f32: bf16 weights are widened into
 * the scratch first. */
static int weight_f32(pgrt_lm *m, pgrt_stream *s, const dweight *w, pgrt_devptr *out)
{
    if (!w->bf16) {
        *out = pgrt_buf_ptr(w->buf);
        return 0;
    }
    pgrt_devptr dst = pgrt_buf_ptr(m->wscratch);
    *out = dst;
    return launch(m, s, K_WIDEN, KN({"n", (uint32_t)w->count}),
                  ARGS(P(pgrt_buf_ptr(w->buf)), P(dst), U(w->count)));
}

/* ---------------------------------------------------------------- GEMMs */

/* Every GEMM of the step is a prepared GEMM (pgrt_gemm_plan: chosen,
 * loaded and tensor-mapped once). The step runs its products in the same
 * order every time, so the dry run at create prepares them in that order
 * and each step takes them in turn: a launch is the driver call alone. */
typedef struct lm_gemm {
    pgrt_gemm_plan *plan;
    pgrt_devptr c; /* where it writes: a step that strays from create's order is caught */
    int bucket;
} lm_gemm;

/* A linear layer's product in its words (y = x·Wᵀ over T rows): x [T, in],
 * W [out, in]; forward a = x, b = W; dX a = dy, b = W; dW a = dy, b = x.
 * bf16 operands with an f32 result on the chosen family, f32 on the
 * seed's exact kernels. */
static pgrt_gemm_spec lin(const pgrt_lm *m, pgk_gemm_layout lay, pgrt_devptr a, pgrt_devptr b,
                          uint32_t in, uint32_t out, bool acc)
{
    return (pgrt_gemm_spec){.layout = lay, .kind = m->lowp ? PGRT_GEMM_CHOSEN : PGRT_GEMM_SEED,
                            .in_type = m->lowp ? PG_BF16 : PG_F32, .out_type = PG_F32,
                            .m = (uint32_t)m->T, .n = out, .k = in, .a = a, .b = b,
                            .accumulate = acc};
}

/* Run the step's next product, spec into c (+ bias); while warming,
 * prepare it. */
static int gemm(pgrt_lm *m, pgrt_stream *s, const pgrt_gemm_spec *spec, pgrt_devptr c,
                pgrt_devptr bias, int bucket)
{
    if (m->warming) {
        if (m->ngemm == m->gemm_cap) {
            size_t cap = m->gemm_cap ? 2 * m->gemm_cap : 256;
            lm_gemm *g = realloc(m->gemms, cap * sizeof *g);
            if (!g)
                return model_fail(PGRT_ENOMEM, "pgrt_lm: out of host memory");
            m->gemms = g;
            m->gemm_cap = cap;
        }
        pgrt_gemm_spec sp = *spec;
        sp.bias = bias != 0;
        lm_gemm *g = &m->gemms[m->ngemm];
        int rc = pgrt_gemm_plan_create(m->ctx, &sp, &g->plan);
        if (rc)
            return rc;
        m->ngemm++;
        g->c = c;
        g->bucket = bucket;
        uint64_t ws = pgrt_gemm_plan_workspace(g->plan);
        m->ws_need = ws > m->ws_need ? ws : m->ws_need;
        return 0;
    }
    if (m->gemm_next >= m->ngemm || m->gemms[m->gemm_next].c != c)
        return model_fail(PGRT_ESTATE, "pgrt_lm: GEMM %zu of the step is not the one prepared "
                          "at create", m->gemm_next);
    const lm_gemm *g = &m->gemms[m->gemm_next++];
    pgrt_devptr ws = pgrt_gemm_plan_workspace(g->plan) ? pgrt_buf_ptr(m->ws) : 0;
    m->launches++;
    if (!m->profile)
        return pgrt_gemm_plan_launch(g->plan, s, c, bias, ws);
    double t0 = clock_ms();
    int rc = pgrt_gemm_plan_launch(g->plan, s, c, bias, ws);
    if (!rc && !(rc = pgrt_stream_sync(s)))
        profile_add(m, pgrt_gemm_plan_choice(g->plan)->desc->name, g->bucket, clock_ms() - t0);
    return rc;
}

/* A product of the base weights, or in f32 of any: the GEMM bucket. */
static int base_gemm(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, bool acc, pgrt_devptr a,
                     pgrt_devptr b, pgrt_devptr c, uint32_t in, uint32_t out, pgrt_devptr bias)
{
    pgrt_gemm_spec sp = lin(m, lay, a, b, in, out, acc);
    return gemm(m, s, &sp, c, bias, PGRT_LM_TIME_GEMM);
}

/* The f32 LoRA products of ranks past the thin kernels. */
static int lora_gemm(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, bool acc, pgrt_devptr a,
                     pgrt_devptr b, pgrt_devptr c, uint32_t in, uint32_t out)
{
    pgrt_gemm_spec sp = lin(m, lay, a, b, in, out, acc);
    sp.kind = PGRT_GEMM_SEED;
    sp.in_type = PG_F32;
    return gemm(m, s, &sp, c, 0, bucket(m->lowp, K_LORA_GRAD));
}

/* dst (bf16) = src (f32), n elements. */
static int narrow(pgrt_lm *m, pgrt_stream *s, pgrt_devptr src, pgrt_devptr dst, uint64_t n)
{
    return launch(m, s, K_NARROW, KN({"n", (uint32_t)n}), ARGS(P(src), P(dst), U(n)));
}

static pgrt_devptr pofs(pgrt_buf *b, int64_t elems) { return pgrt_buf_ptr(b) + (uint64_t)elems * 4u; }

/* ---------------------------------------------------------------- LoRA products */

/* The LoRA products run on the thin kernels (kernels/lora_tile.c and
 * lora_up_f32; rank r one dimension), in f32 and bf16 alike. The sums
 * over T, in or out are cut into slices added in a fixed order inside the
 * kernel, so every step gives the same bits. In bf16 the long operand is
 * the bf16 copy the base GEMM reads (m->xb forward, m->dyb backward):
 * the values the reference's LoRA sees. Ranks past the kernels' register
 * budget keep the f32 GEMMs. */
#define LORA_THIN_RANK 64
#define LORA_TILE 64u /* rows of a lora_proj / lora_grad block */

/* Which group a module's pair belongs to: the modules reading one input. */
static const int lora_group_of[PGRT_LINEAR_COUNT] = {0, 0, 0, 1, 2, 2, 3};

/* Slices of a length-`len` sum over `tiles` row tiles: about two blocks
 * an SM, each slice at least two 32-long chunks, at most 64 slices. */
static uint32_t lora_splits(const pgrt_lm *m, uint32_t tiles, uint32_t len)
{
    uint32_t target = 2u * (m->sms ? m->sms : 108u);
    uint32_t sp = (target + tiles - 1) / tiles, most = (len + 63) / 64;
    sp = sp > most ? most : sp;
    sp = sp > 64 ? 64 : sp;
    return sp ? sp : 1;
}

/* The workspace of the slices' sums (shared with the bf16 GEMMs'
 * split-K: the stream orders them) and the arrival counters; while
 * warming, only their sizes are noted. */
static int lora_ws(pgrt_lm *m, uint32_t tiles, uint32_t sp, uint32_t cols, pgrt_devptr *ws,
                   pgrt_devptr *cnt)
{
    uint64_t bytes = (uint64_t)sp * tiles * LORA_TILE * ((cols + 15u) & ~15u) * 4u;
    *ws = *cnt = 0;
    if (m->warming) {
        if (bytes > m->ws_need)
            m->ws_need = bytes;
        if (tiles > m->lcnt_need)
            m->lcnt_need = tiles;
        return 0;
    }
    if (!m->ws || pgrt_buf_bytes(m->ws) < bytes || !m->lcnt || pgrt_buf_bytes(m->lcnt) < tiles * 4u)
        return model_fail(PGRT_ESTATE, "pgrt_lm: LoRA workspace smaller than at create");
    *ws = pgrt_buf_ptr(m->ws);
    *cnt = pgrt_buf_ptr(m->lcnt);
    return 0;
}

/* out = scale x[T, k] w^T for `parts` pairs at once (out part-major):
 * w their stacked A [parts r, k], or (wt) one B [k, r]. x bf16 or f32. */
static int lora_proj(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, bool bf16, pgrt_devptr w,
                     pgrt_devptr out, uint32_t k, uint32_t parts, bool wt, float scale)
{
    int kid = bf16 ? K_LORA_PROJ_BF16 : K_LORA_PROJ;
    uint32_t tiles = ((uint32_t)m->T + LORA_TILE - 1) / LORA_TILE, sp = lora_splits(m, tiles, k);
    pgk_knobs kn;
    pgrt_devptr ws, cnt;
    int rc = kn_of(m->desc[kid],
                   KN({"rows", m->T}, {"k", k}, {"cols", parts * m->r}, {"rank", m->r},
                      {"wt", wt ? 1u : 0u}, {"splits", sp}),
                   &kn);
    if (rc || (rc = lora_ws(m, tiles, sp, parts * m->r, &ws, &cnt)))
        return rc;
    return launch_kn(m, s, kid, m->desc[kid], &kn,
                     ARGS(P(x), P(w), P(out), P(ws), P(cnt), U(m->T), U(k), U(sp), F(scale)));
}

/* g = d[T, n]^T xa[T, R] for `parts` pairs: [n, r] (dB, one pair) or,
 * trans, [parts r, n] (their stacked dA). d bf16 or f32. */
static int lora_grad(pgrt_lm *m, pgrt_stream *s, pgrt_devptr d, bool bf16, pgrt_devptr xa,
                     pgrt_devptr g, uint32_t n, uint32_t parts, bool trans)
{
    int kid = bf16 ? K_LORA_GRAD_BF16 : K_LORA_GRAD;
    uint32_t tiles = (n + LORA_TILE - 1) / LORA_TILE, sp = lora_splits(m, tiles, (uint32_t)m->T);
    pgk_knobs kn;
    pgrt_devptr ws, cnt;
    int rc = kn_of(m->desc[kid],
                   KN({"rows", m->T}, {"n", n}, {"cols", parts * m->r}, {"rank", m->r},
                      {"trans", trans ? 1u : 0u}, {"splits", sp}),
                   &kn);
    if (rc || (rc = lora_ws(m, tiles, sp, parts * m->r, &ws, &cnt)))
        return rc;
    return launch_kn(m, s, kid, m->desc[kid], &kn,
                     ARGS(P(d), P(xa), P(g), P(ws), P(cnt), U(m->T), U(n), U(sp), F(1.0f)));
}

/* y[T, n] (+)= xa[T, R] w(n, R)^T, w = B [n, r] or (wt) the stacked A
 * [parts r, n] of `parts` pairs (xa part-major). */
static int lora_up(pgrt_lm *m, pgrt_stream *s, pgrt_devptr xa, pgrt_devptr w, pgrt_devptr y,
                   uint32_t n, bool wt, uint32_t parts, bool acc)
{
    return launch(m, s, K_LORA_UP,
                  KN({"rows", m->T}, {"n", n}, {"rank", parts * m->r}, {"wt", wt ? 1u : 0u},
                     {"acc", acc ? 1u : 0u}, {"part", parts > 1 ? (uint32_t)m->r : 0u}),
                  ARGS(P(xa), P(w), P(y), U(m->T), U(n), F(1.0f)));
}

/* ---------------------------------------------------------------- LoRA inside the base GEMMs */

/* On sm_90a in bf16 (m->fused) a LoRA pair rides in its module's GEMMs
 * (gemm_sm90's second operand pair, kernels/gemm_sm90.c). With xa = s·x·Aᵀ
 * and dxa = s·dy·B in bf16, a group's pairs side by side ([T, parts·r]):
 *
 *   xa  = x·(sA_group)ᵀ           one GEMM a group: x read once for q, k, v
 *   y   = x·Wᵀ + xa·Bᵀ            one GEMM, its reduction in + r
 *   dxa = dy·(sB)ᵀ, dB = dyᵀ·xa   two thin GEMMs a pair
 *   dx  = Σ dy·W + dxa·A_group    the group's last dX GEMM takes the term:
 *                                 its reduction out + parts·r
 *   dA_group = dxaᵀ·x             one GEMM a group, x narrowed again
 *
 * bf16 on the tensor cores with f32 accumulation, f32 master weights, as
 * PEFT under autocast computes it. The master weights' bf16 copies (A and
 * B as they are, and times s) are made once a step (lora_weights). */

static pgrt_devptr pbf(const pgrt_lm *m, int64_t elems, bool scaled)
{
    return pgrt_buf_ptr(m->pbf) + ((scaled ? (uint64_t)m->nlora : 0) + (uint64_t)elems) * 2u;
}

/* A LoRA product on gemm_sm90, in the layer words of lin(). */
static int lora_wg(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, pg_type out_type,
                   pgrt_devptr a, pgrt_devptr b, uint32_t in, uint32_t out, uint32_t ldb,
                   uint32_t ldc, pgrt_devptr c)
{
    pgrt_gemm_spec sp = lin(m, lay, a, b, in, out, false);
    sp.kind = PGRT_GEMM_WGMMA;
    sp.out_type = out_type;
    sp.ldb = ldb;
    sp.ldc = ldc;
    return gemm(m, s, &sp, c, 0, PGRT_LM_TIME_LORA_GEMM);
}

/* pb = bf16(p), psb = bf16(s p): at the start of every step, after the
 * optimizer of the step before. */
static int lora_weights(pgrt_lm *m, pgrt_stream *s)
{
    uint32_t n = (uint32_t)m->nlora;
    return launch(m, s, K_LORA_CAST, KN({"n", n}),
                  ARGS(P(pgrt_buf_ptr(m->p)), P(pbf(m, 0, false)), P(pbf(m, 0, true)), U(n),
                       F(m->lora_scale)));
}

static int linear_fwd_fused(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr y)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    pgrt_devptr W = pgrt_buf_ptr(m->lw[l].lin[mod].buf);
    pgrt_devptr bias = m->lw[l].bias[mod] ? pgrt_buf_ptr(m->lw[l].bias[mod]) : 0;
    pgrt_gemm_spec sp = lin(m, PGK_GEMM_FORWARD, m->xb, W, (uint32_t)in, (uint32_t)out, false);
    if (ld->a >= 0) {
        const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
        uint32_t R = (uint32_t)(ld->parts * m->r);
        pgrt_devptr xa = m->la[l].xa[ld->lead];
        int rc = ld->part == 0 ? lora_wg(m, s, PGK_GEMM_FORWARD, PG_BF16, m->xb,
                                         pbf(m, lead->a, true), (uint32_t)in, R, 0, 0, xa)
                               : 0;
        if (rc)
            return rc;
        sp.kind = PGRT_GEMM_WGMMA;
        sp.a2 = xa + (uint64_t)ld->part * m->r * 2u;
        sp.lda2 = R;
        sp.b2 = pbf(m, ld->b, false);
        sp.k2 = (uint32_t)m->r;
    }
    return gemm(m, s, &sp, y, bias, PGRT_LM_TIME_GEMM);
}

static int linear_bwd_fused(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
                            pgrt_devptr dyb, pgrt_devptr dx, bool acc)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
    pgrt_devptr W = pgrt_buf_ptr(m->lw[l].lin[mod].buf);
    pgrt_gemm_spec sp = lin(m, PGK_GEMM_BACKWARD_X, dyb, W, (uint32_t)in, (uint32_t)out, acc);
    uint32_t R = (uint32_t)(ld->parts * m->r), r = (uint32_t)m->r;
    bool last = ld->a >= 0 && ld->part + 1 == ld->parts;
    int rc;
    if (ld->a >= 0) {
        pgrt_devptr xa = m->la[l].xa[ld->lead] + (uint64_t)ld->part * r * 2u;
        if ((rc = lora_wg(m, s, PGK_GEMM_BACKWARD_X, PG_BF16, dyb, pbf(m, ld->b, true), r,
                          (uint32_t)out, 0, R, m->dxa + (uint64_t)ld->part * r * 2u)) ||
            (rc = lora_wg(m, s, PGK_GEMM_BACKWARD_W, PG_F32, dyb, xa, r, (uint32_t)out, R, 0,
                          pofs(m->g, ld->b))))
            return rc;
    }
    if (last) {
        sp.kind = PGRT_GEMM_WGMMA;
        sp.a2 = m->dxa;
        sp.lda2 = R;
        sp.b2 = pbf(m, lead->a, false);
        sp.k2 = R;
    }
    if ((rc = gemm(m, s, &sp, dx, 0, PGRT_LM_TIME_GEMM)) || !last)
        return rc;
    /* dA: x's bf16 copy into dtmp, free in the backward */
    uint64_t n = (uint64_t)m->T * in;
    if ((rc = launch(m, s, K_LORA_NARROW, KN({"n", (uint32_t)n}), ARGS(P(x), P(m->dtmp), U(n)))))
        return rc;
    return lora_wg(m, s, PGK_GEMM_BACKWARD_W, PG_F32, m->dxa, m->dtmp, (uint32_t)in, R, 0, 0,
                   pofs(m->g, lead->a));
}

/* y = x W^T (+ bias) (+ lora) for module mod of layer l; x [T, in] f32
 * and, in bf16, its copy m->xb that the caller made. The pairs of one
 * input are projected together at the group's first module: its callers
 * run a group's modules in order on one x (forward_layer). The LoRA term
 * comes first (y = xa B^T) and the base product adds into it, so y is
 * written once by each and read once, by the GEMM's epilogue. */
static int linear_fwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
                      pgrt_devptr y)
{
    if (m->fused)
        return linear_fwd_fused(m, s, l, mod, y);
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    bool thin = ld->a >= 0 && m->r <= LORA_THIN_RANK;
    /* xa = s x A^T (kept for the backward) */
    pgrt_devptr xa = m->la[l].xa[mod], w;
    int rc = 0;
    if (thin && ((ld->part == 0 &&
                  (rc = lora_proj(m, s, m->lowp ? m->xb : x, m->lowp, pofs(m->p, ld->a), xa,
                                  (uint32_t)in, (uint32_t)ld->parts, false, m->lora_scale))) ||
                 (rc = lora_up(m, s, xa, pofs(m->p, ld->b), y, (uint32_t)out, false, 1, false))))
        return rc;
    pgrt_devptr bias = m->lw[l].bias[mod] ? pgrt_buf_ptr(m->lw[l].bias[mod]) : 0;
    if (m->lowp) /* the bias in the GEMM's epilogue */
        rc = base_gemm(m, s, PGK_GEMM_FORWARD, thin, m->xb, pgrt_buf_ptr(m->lw[l].lin[mod].buf),
                       y, (uint32_t)in, (uint32_t)out, bias);
    else if (!(rc = weight_f32(m, s, &m->lw[l].lin[mod], &w)))
        rc = base_gemm(m, s, PGK_GEMM_FORWARD, thin, x, w, y, (uint32_t)in, (uint32_t)out, 0);
    if (!rc && !m->lowp && bias)
        rc = launch(m, s, K_BIAS, KN({"rows", m->T}, {"cols", out}),
                    ARGS(P(y), P(bias), U(m->T), U(out)));
    if (rc || ld->a < 0 || thin)
        return rc;
    /* ranks past the thin kernels: xa = s x A^T, y += xa B^T on the f32 GEMMs */
    uint32_t n = (uint32_t)m->T * m->r;
    if ((rc = lora_gemm(m, s, PGK_GEMM_FORWARD, false, x, pofs(m->p, ld->a), xa, (uint32_t)in,
                        (uint32_t)m->r)) ||
        (rc = launch(m, s, K_SCALE, KN({"n", n}), ARGS(P(xa), F(m->lora_scale), U(n)))))
        return rc;
    return lora_gemm(m, s, PGK_GEMM_FORWARD, true, xa, pofs(m->p, ld->b), y, (uint32_t)m->r,
                     (uint32_t)out);
}

/* The thin LoRA backward of module mod: dB = dy^T xa (xa holds the
 * scale) and dxa = s dy B, this pair's part; at the group's last pair the
 * stacked dA = dxa^T x and dx (+)= dxa A. d is dy, or its bf16 copy. */
static int lora_bwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
                    pgrt_devptr d, pgrt_devptr dx, bool acc)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    pgrt_devptr dxa = m->dxa + (uint64_t)ld->part * m->T * m->r * 4u;
    int rc;
    if ((rc = lora_grad(m, s, d, m->lowp, m->la[l].xa[mod], pofs(m->g, ld->b), (uint32_t)out, 1,
                        false)) ||
        (rc = lora_proj(m, s, d, m->lowp, pofs(m->p, ld->b), dxa, (uint32_t)out, 1, true,
                        m->lora_scale)))
        return rc;
    if (ld->part + 1 < ld->parts)
        return 0;
    const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
    uint32_t parts = (uint32_t)ld->parts;
    if ((rc = lora_grad(m, s, x, false, m->dxa, pofs(m->g, lead->a), (uint32_t)in, parts, true)))
        return rc;
    return lora_up(m, s, m->dxa, pofs(m->p, lead->a), dx, (uint32_t)in, true, parts, acc);
}

/* Given dy [T, out] (and, in bf16, dyb: its bf16 copy where the kernel
 * that wrote dy made one, else 0): dx (+)= dy W (+ the LoRA path), and the
 * LoRA gradients of module mod of layer l. A group's dA and its dx term
 * wait for its last module: the callers run a group's modules in order on
 * one x and dx (backward_layer). A pair alone in its group whose dx is not
 * accumulated goes first (dx = dxa A) and the base product adds into it. */
static int linear_bwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
                      pgrt_devptr dy, pgrt_devptr dyb, pgrt_devptr dx, bool acc)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    bool thin = ld->a >= 0 && m->r <= LORA_THIN_RANK, first = thin && ld->parts == 1 && !acc;
    pgrt_devptr w;
    int rc = 0;
    if (m->lowp && !dyb) {
        if ((rc = narrow(m, s, dy, m->dyb, (uint64_t)m->T * out)))
            return rc;
        dyb = m->dyb;
    }
    if (m->fused)
        return linear_bwd_fused(m, s, l, mod, x, dyb, dx, acc);
    pgrt_devptr d = m->lowp ? dyb : dy;
    if (first && (rc = lora_bwd(m, s, l, mod, x, d, dx, false)))
        return rc;
    if (m->lowp)
        rc = base_gemm(m, s, PGK_GEMM_BACKWARD_X, acc || first, dyb,
                       pgrt_buf_ptr(m->lw[l].lin[mod].buf), dx, (uint32_t)in, (uint32_t)out, 0);
    else if (!(rc = weight_f32(m, s, &m->lw[l].lin[mod], &w)))
        rc = base_gemm(m, s, PGK_GEMM_BACKWARD_X, acc || first, dy, w, dx, (uint32_t)in,
                       (uint32_t)out, 0);
    if (rc || ld->a < 0 || first)
        return rc;
    if (thin)
        return lora_bwd(m, s, l, mod, x, d, dx, true);
    /* dB = dy^T (s xa); dxa = s dy B; dA = dxa^T x; dx += dxa A */
    uint32_t n = (uint32_t)m->T * m->r, r = (uint32_t)m->r;
    if ((rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_W, false, dy, m->la[l].xa[mod],
                        pofs(m->g, ld->b), r, (uint32_t)out)) ||
        (rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_X, false, dy, pofs(m->p, ld->b), m->dxa, r,
                        (uint32_t)out)) ||
        (rc = launch(m, s, K_SCALE, KN({"n", n}), ARGS(P(m->dxa), F(m->lora_scale), U(n)))) ||
        (rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_W, false, m->dxa, x, pofs(m->g, ld->a),
                        (uint32_t)in, r)))
        return rc;
    return lora_gemm(m, s, PGK_GEMM_BACKWARD_X, true, m->dxa, pofs(m->p, ld->a), dx,
                     (uint32_t)in, r);
}

static int rms_fwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_buf *gamma, pgrt_devptr y)
{
    uint32_t H = (uint32_t)m->c.hidden;
    return launch(m, s, K_RMS_FWD, KN({"num_rows", m->T}, {"hidden_dim", H}),
                  ARGS(P(x), P(pgrt_buf_ptr(gamma)), P(y), U(m->T), U(H), F(m->c.rms_norm_eps)));
}

static int rms_bwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_buf *gamma, pgrt_devptr dy,
                   pgrt_devptr dx)
{
    uint32_t H = (uint32_t)m->c.hidden;
    return launch(m, s, K_RMS_BWD, KN({"num_rows", m->T}, {"hidden_dim", H}),
                  ARGS(P(x), P(pgrt_buf_ptr(gamma)), P(dy), P(dx), P(m->part), U(m->T), U(H),
                       F(m->c.rms_norm_eps)));
}

static int add(pgrt_lm *m, pgrt_stream *s, pgrt_devptr a, pgrt_devptr b, pgrt_devptr out,
               uint64_t n)
{
    return launch(m, s, K_ADD, KN({"n", (uint32_t)n}), ARGS(P(a), P(b), P(out), U(n)));
}

/* y = RMSNorm(x + r) * gamma, x + r kept at sum; without r (0), of x.
 * bf16: one kernel that also writes y's bf16 copy to m->xb, the operand
 * of the GEMMs that follow (the same bits as the add, the norm and the
 * cast in turn); f32: residual_add, rms_norm_forward. */
static int norm_fwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_devptr r, pgrt_devptr sum,
                    pgrt_buf *gamma, pgrt_devptr y)
{
    uint32_t H = (uint32_t)m->c.hidden;
    if (m->lowp)
        return launch(m, s, K_RMS_FWD_ADD,
                      KN({"num_rows", m->T}, {"hidden_dim", H}, {"residual", r ? 1u : 0u}),
                      ARGS(P(x), P(r ? r : x), P(r ? sum : x), P(pgrt_buf_ptr(gamma)), P(y),
                           P(m->xb), U(m->T), U(H), F(m->c.rms_norm_eps)));
    int rc = r ? add(m, s, x, r, sum, (uint64_t)m->T * H) : 0;
    return rc ? rc : rms_fwd(m, s, r ? sum : x, gamma, y);
}

/* dx = the RMSNorm backward of (x, gamma) at dy, + r where r is not 0.
 * bf16: one kernel that also writes dx's bf16 copy to m->dyb, the operand
 * of the dX GEMM that follows; f32: the backward, residual_add. */
static int norm_bwd(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, pgrt_buf *gamma, pgrt_devptr dy,
                    pgrt_devptr r, pgrt_devptr dx)
{
    uint32_t H = (uint32_t)m->c.hidden;
    if (m->lowp)
        return launch(m, s, K_RMS_BWD_ADD,
                      KN({"num_rows", m->T}, {"hidden_dim", H}, {"residual", r ? 1u : 0u}),
                      ARGS(P(x), P(pgrt_buf_ptr(gamma)), P(dy), P(r ? r : x), P(dx), P(m->dyb),
                           U(m->T), U(H), F(m->c.rms_norm_eps)));
    int rc = rms_bwd(m, s, x, gamma, dy, dx);
    return rc || !r ? rc : add(m, s, r, dx, dx, (uint64_t)m->T * H);
}

static int att_knobs_fwd(pgrt_lm *m, pgrt_stream *s, int l)
{
    layer_a *a = &m->la[l];
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    return launch(m, s, K_ATT_FWD,
                  KN({"batch", m->B}, {"seq_len", m->S}, {"q_heads", m->c.heads},
                     {"head_dim", m->c.head_dim}),
                  ARGS(P(a->q), P(a->k), P(a->v), P(a->att), P(a->lse), U(m->B), U(m->S),
                       U(m->c.heads), U(m->c.kv_heads), U(m->c.head_dim), F(sc)));
}

/* ---------------------------------------------------------------- forward and loss */

/* Layer l from its input norm's output h1 on (layer 0 also computes that
 * norm) through the residual add after the MLP and the norm that
 * follows it: the next layer's input norm, or the final one. */
static int forward_layer(pgrt_lm *m, pgrt_stream *s, int l)
{
    layer_a *a = &m->la[l];
    bool last = l + 1 == m->c.layers;
    pgrt_devptr xnext = last ? m->xf : m->la[l + 1].x, hnext = last ? m->hf : m->la[l + 1].h1;
    pgrt_buf *gnext = last ? m->norm_final : m->lw[l + 1].norm_in;
    int rc;
    uint64_t Tqd = (uint64_t)m->T * m->c.heads * m->c.head_dim;
    if ((l == 0 && (rc = norm_fwd(m, s, a->x, 0, 0, m->lw[l].norm_in, a->h1))) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_Q, a->h1, a->q)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_K, a->h1, a->k)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_V, a->h1, a->v)))
        return rc;
    if ((rc = launch(m, s, K_ROPE_FWD, KN({"num_tokens", m->T}, {"head_dim", m->c.head_dim}),
                     ARGS(P(a->q), P(a->k), U(m->T), U(m->S), U(m->c.heads), U(m->c.kv_heads),
                          U(m->c.head_dim), F(m->c.rope_theta)))))
        return rc;
    if ((rc = att_knobs_fwd(m, s, l)) ||
        (m->lowp && (rc = narrow(m, s, a->att, m->xb, Tqd))) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_O, a->att, m->dtmp)) ||
        (rc = norm_fwd(m, s, a->x, m->dtmp, a->xm, m->lw[l].norm_post, a->h2)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_GATE, a->h2, a->g)) ||
        (rc = linear_fwd(m, s, l, PGRT_LINEAR_UP, a->h2, a->u)))
        return rc;
    uint64_t TI = (uint64_t)m->T * m->c.intermediate;
    /* bf16: act's copy for the down GEMM from the same kernel */
    if ((rc = m->lowp ? launch(m, s, K_SWIGLU_FWD_BF16, KN({"n", (uint32_t)TI}),
                               ARGS(P(a->g), P(a->u), P(a->act), P(m->xb), U(TI)))
                      : launch(m, s, K_SWIGLU_FWD, KN({"n", (uint32_t)TI}),
                               ARGS(P(a->g), P(a->u), P(a->act), U(TI)))) ||
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
    if (m->fused && (rc = lora_weights(m, s)))
        return rc;
    if (m->lowp) {
        /* bf16 rows, widened in place into the f32 residual stream's first slot */
        if ((rc = launch(m, s, K_GATHER_BF16, KN({"num_tokens", m->T}, {"hidden_dim", H}),
                         ARGS(P(pgrt_buf_ptr(m->embed.buf)), P(m->ids), P(m->xb), P(m->errw),
                              U(m->T), U(H), U(V)))) ||
            (rc = launch(m, s, K_WIDEN, KN({"n", (uint32_t)((uint64_t)m->T * H)}),
                         ARGS(P(m->xb), P(m->la[0].x), U((uint64_t)m->T * H)))))
            return rc;
    } else {
        pgrt_devptr emb;
        if ((rc = weight_f32(m, s, &m->embed, &emb)) ||
            (rc = launch(m, s, K_GATHER, KN({"num_tokens", m->T}, {"hidden_dim", H}),
                         ARGS(P(emb), P(m->ids), P(m->la[0].x), P(m->errw), U(m->T), U(H),
                              U(V)))))
            return rc;
    }
    for (int l = 0; l < m->c.layers; l++)
        if ((rc = forward_layer(m, s, l)))
            return rc;
    /* the last layer left the final norm's output in hf (and, bf16, its copy in xb) */
    const dweight *hwd = m->head.buf ? &m->head : &m->embed;
    pgrt_devptr hw = pgrt_buf_ptr(hwd->buf);
    /* f32: the layers' weights went through the widening scratch since */
    if (!m->lowp && (rc = weight_f32(m, s, hwd, &hw)))
        return rc;
    float scale = 1.0f / (float)((uint64_t)m->B * (m->S - 1));
    for (int r0 = 0; r0 < m->T; r0 += m->chunk) {
        uint32_t rows = (uint32_t)(m->T - r0 < m->chunk ? m->T - r0 : m->chunk);
        pgrt_devptr hc = m->hf + (uint64_t)r0 * H * 4u, dc = m->dh + (uint64_t)r0 * H * 4u;
        pgrt_devptr hcb = m->xb + (uint64_t)r0 * H * 2u;
        pgrt_gemm_spec fwd = lin(m, PGK_GEMM_FORWARD, m->lowp ? hcb : hc, hw, H, V, false);
        pgrt_gemm_spec dxs = lin(m, PGK_GEMM_BACKWARD_X, m->lowp ? m->logits_b : m->logits, hw, H,
                                 V, false);
        fwd.m = dxs.m = rows;
        if ((rc = gemm(m, s, &fwd, m->logits, 0, PGRT_LM_TIME_GEMM)) ||
            (rc = launch(m, s, K_CE, KN({"rows", rows}, {"vocab", V}),
                         ARGS(P(m->logits), P(m->labels + (uint64_t)r0 * 4u),
                              P(m->loss + (uint64_t)r0 * 4u), U(rows), U(V), F(scale)))))
            return rc;
        if ((m->lowp && (rc = narrow(m, s, m->logits, m->logits_b, (uint64_t)rows * V))) ||
            (rc = gemm(m, s, &dxs, dc, 0, PGRT_LM_TIME_GEMM)))
            return rc;
    }
    /* d(x_final) (bf16: and its copy in dyb, for the last layer's down GEMM) */
    return norm_bwd(m, s, m->xf, m->norm_final, m->dh, 0, m->dx);
}

/* ---------------------------------------------------------------- backward */

static int backward_layer(pgrt_lm *m, pgrt_stream *s, int l)
{
    layer_a *a = &m->la[l];
    uint64_t TI = (uint64_t)m->T * m->c.intermediate;
    int rc;
    /* m->dx holds d(x_{l+1}) = d(mlp out) */
    /* bf16: the kernel that wrote each dy left its copy in dyb (m->dx:
     * the norm after this layer; dg: xb, du: dyb from SwiGLU; dxm: the
     * norm below); dq, dk, dv are narrowed by linear_bwd. In f32, dyb and
     * xb are 0. */
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_DOWN, a->act, m->dx, m->dyb, m->dact, false)))
        return rc;
    if ((rc = m->lowp ? launch(m, s, K_SWIGLU_BWD_BF16, KN({"n", (uint32_t)TI}),
                               ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), P(m->xb),
                                    P(m->dyb), U(TI)))
                      : launch(m, s, K_SWIGLU_BWD, KN({"n", (uint32_t)TI}),
                               ARGS(P(a->g), P(a->u), P(m->dact), P(m->dg), P(m->du), U(TI)))))
        return rc;
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_GATE, a->h2, m->dg, m->xb, m->dh, false)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_UP, a->h2, m->du, m->dyb, m->dh, true)) ||
        (rc = norm_bwd(m, s, a->xm, m->lw[l].norm_post, m->dh, m->dx, m->dxm)))
        return rc;
    /* m->dxm = d(x_mid) = d(attention out) */
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_O, a->att, m->dxm, m->dyb, m->datt, false)))
        return rc;
    float sc = 1.0f / sqrtf((float)m->c.head_dim);
    if ((rc = launch(m, s, K_ATT_DQ,
                     KN({"batch", m->B}, {"seq_len", m->S}, {"q_heads", m->c.heads},
                        {"head_dim", m->c.head_dim}),
                     ARGS(P(a->q), P(a->k), P(a->v), P(a->att), P(m->datt), P(a->lse), P(m->dq),
                          P(m->delta), U(m->B), U(m->S), U(m->c.heads), U(m->c.kv_heads),
                          U(m->c.head_dim), F(sc)))) ||
        (rc = launch(m, s, K_ATT_DKV,
                     KN({"batch", m->B}, {"seq_len", m->S}, {"kv_heads", m->c.kv_heads},
                        {"head_dim", m->c.head_dim}),
                     ARGS(P(a->q), P(a->k), P(a->v), P(m->datt), P(a->lse), P(m->delta),
                          P(m->dk), P(m->dv), U(m->B), U(m->S), U(m->c.heads),
                          U(m->c.kv_heads), U(m->c.head_dim), F(sc)))) ||
        (rc = launch(m, s, K_ROPE_BWD, KN({"num_tokens", m->T}, {"head_dim", m->c.head_dim}),
                     ARGS(P(m->dq), P(m->dk), U(m->T), U(m->S), U(m->c.heads),
                          U(m->c.kv_heads), U(m->c.head_dim), F(m->c.rope_theta)))))
        return rc;
    if ((rc = linear_bwd(m, s, l, PGRT_LINEAR_Q, a->h1, m->dq, 0, m->dh, false)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_K, a->h1, m->dk, 0, m->dh, true)) ||
        (rc = linear_bwd(m, s, l, PGRT_LINEAR_V, a->h1, m->dv, 0, m->dh, true)))
        return rc;
    return norm_bwd(m, s, a->x, m->lw[l].norm_in, m->dh, m->dxm, m->dx);
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

/* ---------------------------------------------------------------- sizes */

typedef struct plan {
    uint64_t arena;   /* f32 elements */
    uint64_t weights; /* bytes */
    uint64_t scratch; /* f32 elements of the widened-weight scratch */
    uint64_t lora;    /* f32 elements of the LoRA matrices */
    int chunk;
} plan;

static uint64_t u64max(uint64_t a, uint64_t b) { return a > b ? a : b; }

static void make_plan(const pgrt_hf_config *c, const pgrt_adapter *ad, int B, int S, bool bf16,
                      int head_chunk, plan *p)
{
    memset(p, 0, sizeof *p);
    uint64_t T = (uint64_t)B * S, H = c->hidden, I = c->intermediate, V = c->vocab;
    uint64_t qd = (uint64_t)c->heads * c->head_dim, kvd = (uint64_t)c->kv_heads * c->head_dim;
    uint64_t r = ad ? (uint64_t)ad->cfg.r : 0;
    unsigned ntarget = 0;
    for (int i = 0; i < PGRT_LINEAR_COUNT; i++)
        ntarget += ad && (ad->cfg.targets >> i) & 1u;
    uint64_t per_layer = T * (4 * H + 2 * qd + 2 * kvd + 3 * I + c->heads) + T * r * ntarget;
    /* the layer inputs of L layers and the final one, then the scratch */
    uint64_t widest = u64max(u64max(H, I), u64max(qd, 2 * kvd));
    int chunk = head_chunk > 0 ? head_chunk : (int)u64max(1, (64ull << 20) / V); /* ~256 MB */
    /* whole 128-row tiles of the head's GEMMs (gemm_sm90's, the mma.sync
     * family's largest): 441 rows would leave a 57-row tile in each chunk */
    if (head_chunk <= 0 && chunk >= 128)
        chunk -= chunk % 128;
    if ((uint64_t)chunk > T)
        chunk = (int)T;
    p->chunk = chunk;
    p->arena = per_layer * c->layers + 2 * T * H /* xf, hf */ +
               T * (5 * H + qd * 2 + kvd * 2 + 3 * I + widest) /* dx dxm dh part dtmp, dq datt,
                                                                 dk dv, dg du dact */
               + 3 * T * r + T * c->heads /* dxa (three parts), delta */ +
               (uint64_t)chunk * V + T /* loss */ +
               (bf16 ? T * widest /* xb, dyb: two bf16 halves */ + (uint64_t)chunk * V / 2 + 1
                     : 0);
    uint64_t wel = V * H * (c->tie_embeddings ? 1 : 2), maxw = V * H;
    for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
        int in, out;
        pgrt_linear_dims(c, (pgrt_linear)i, &in, &out);
        wel += (uint64_t)c->layers * in * out;
    }
    p->weights = wel * (bf16 ? 2 : 4) + (uint64_t)c->layers * (2 * H + qd + 2 * kvd + H) * 4 +
                 H * 4;
    (void)maxw; /* bf16 runs the tensor-core GEMMs: no widened weights */
    p->scratch = 0;
    uint64_t lora = 0;
    if (ad)
        for (size_t i = 0; i < ad->count; i++)
            lora += (uint64_t)ad->cfg.r * (ad->w[i].in + ad->w[i].out);
    p->lora = lora;
}

static uint64_t plan_bytes(const plan *p, bool keep)
{
    return p->arena * 4 + p->weights + p->scratch * 4 + p->lora * 4 * (4 + (keep ? 1 : 0)) +
           (64ull << 20) /* kernels, clip state, ids */;
}

static bool zero_or_normal(float x) { return x == 0 || isnormal(x); }

static int check_params(const pgrt_lm_params *p)
{
    if (!p || !p->model || !p->adapter)
        return model_fail(PGRT_EINVAL, "pgrt_lm: params, model and adapter are required");
    const pgrt_hf_config *c = pgrt_model_hf_config(p->model);
    if (p->batch < 1 || p->seq < 2)
        return model_fail(PGRT_EINVAL, "pgrt_lm: batch %d must be >= 1 and seq %d >= 2", p->batch,
                          p->seq);
    uint64_t T = (uint64_t)p->batch * p->seq;
    if (p->seq > 16384 || p->batch > 1000)
        return model_fail(PGRT_ERANGE, "pgrt_lm: batch %d x seq %d: at most 1000 rows of 16384",
                          p->batch, p->seq);
    uint64_t widest = u64max((uint64_t)c->intermediate, (uint64_t)c->vocab);
    if (T * widest >= (1ull << 32) || T * c->heads * c->head_dim >= (1ull << 32))
        return model_fail(PGRT_ERANGE,
                          "pgrt_lm: batch x seq = %llu tokens is too many for 32-bit element "
                          "counts",
                          (unsigned long long)T);
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
    float scale = a->cfg.r > 0 ? (float)(a->cfg.alpha / a->cfg.r) : 0.0f;
    if (!(scale > 0) || !isnormal(scale))
        return model_fail(PGRT_ERANGE,
                          "pgrt_lm: the LoRA scale lora_alpha / r = %g / %d is not a normal "
                          "float",
                          a->cfg.alpha, a->cfg.r);
    return 0;
}

int pgrt_lm_bytes(const pgrt_lm_params *p, uint64_t *bytes)
{
    int rc = check_params(p);
    if (rc)
        return rc;
    plan pl;
    make_plan(pgrt_model_hf_config(p->model), p->adapter, p->batch, p->seq,
              p->dtype == PGRT_LM_BF16, p->head_chunk, &pl);
    *bytes = plan_bytes(&pl, p->keep_grads);
    return 0;
}

/* ---------------------------------------------------------------- weights */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, mant = h & 1023u;
    float f;
    if (e == 0)
        f = ldexpf((float)mant, -24);
    else if (e == 31)
        f = mant ? NAN : INFINITY;
    else
        f = ldexpf((float)(mant | 1024u), (int)e - 25);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Element i of a tensor as f32. */
static float tensor_at(const pgrt_st_tensor *t, size_t i)
{
    const unsigned char *d = t->data;
    if (t->dtype == PGRT_ST_F32) {
        float f;
        memcpy(&f, d + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, d + 2 * i, 2);
    return t->dtype == PGRT_ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* Upload a tensor as f32 (bf16 false) or bf16, in pieces through a host
 * staging buffer. */
static int upload_tensor(pgrt_ctx *ctx, const pgrt_st_tensor *t, bool bf16, pgrt_buf **out,
                         uint64_t *bytes)
{
    size_t n = (size_t)t->count;
    int rc = pgrt_buf_alloc(ctx, bf16 ? PG_U16 : PG_F32, n, out);
    if (rc)
        return rc;
    *bytes += n * (bf16 ? 2u : 4u);
    if (!bf16 && t->dtype == PGRT_ST_F32)
        return pgrt_buf_upload(*out, 0, t->data, n);
    if (bf16 && t->dtype == PGRT_ST_BF16)
        return pgrt_buf_upload(*out, 0, t->data, n);
    size_t piece = (size_t)1 << 22;
    void *stage = malloc(piece * 4);
    if (!stage)
        return model_fail(PGRT_ENOMEM, "pgrt_lm: out of host memory");
    for (size_t o = 0; o < n && !rc; o += piece) {
        size_t k = n - o < piece ? n - o : piece;
        for (size_t i = 0; i < k; i++) {
            float f = tensor_at(t, o + i);
            if (bf16)
                ((uint16_t *)stage)[i] = f32_to_bf16(f);
            else
                ((float *)stage)[i] = f;
        }
        rc = pgrt_buf_upload(*out, o, stage, k);
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

static int upload_weights(pgrt_lm *m, const pgrt_model_files *mf)
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

/* ---------------------------------------------------------------- create */

static pgrt_devptr take(pgrt_devptr base, uint64_t *off, uint64_t elems)
{
    pgrt_devptr p = base + *off * 4u;
    *off += (elems + 63u) & ~(uint64_t)63u; /* 256-byte aligned */
    return p;
}

static int layout(pgrt_lm *m, const plan *pl)
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
    for (int l = 0; l < m->c.layers; l++) {
        layer_a *a = &m->la[l];
        a->x = take(base, &off, T * H);
        a->h1 = take(base, &off, T * H);
        a->q = take(base, &off, T * qd);
        a->k = take(base, &off, T * kvd);
        a->v = take(base, &off, T * kvd);
        a->att = take(base, &off, T * qd);
        a->lse = take(base, &off, T * m->c.heads);
        a->xm = take(base, &off, T * H);
        a->h2 = take(base, &off, T * H);
        a->g = take(base, &off, T * I);
        a->u = take(base, &off, T * I);
        a->act = take(base, &off, T * I);
        /* a group's xa part after part (lora_d) */
        pgrt_devptr grp = 0;
        for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
            const lora_d *d = &m->lora[l * PGRT_LINEAR_COUNT + i];
            if (d->a >= 0 && d->part == 0)
                grp = take(base, &off, (uint64_t)d->parts * T * m->r);
            a->xa[i] = d->a >= 0 ? grp + (uint64_t)d->part * T * m->r * 4u : 0;
        }
    }
    uint64_t widest = u64max(u64max(H, I), u64max(qd, 2 * kvd));
    m->xf = take(base, &off, T * H);
    m->hf = take(base, &off, T * H);
    m->dx = take(base, &off, T * H);
    m->dxm = take(base, &off, T * H);
    m->dh = take(base, &off, T * H);
    m->part = take(base, &off, T * H);
    m->dtmp = take(base, &off, T * widest);
    m->dq = take(base, &off, T * qd);
    m->datt = take(base, &off, T * qd);
    m->dk = take(base, &off, T * kvd);
    m->dv = take(base, &off, T * kvd);
    m->dg = take(base, &off, T * I);
    m->du = take(base, &off, T * I);
    m->dact = take(base, &off, T * H > T * I ? T * H : T * I);
    m->dxa = take(base, &off, 3 * T * (m->r ? m->r : 1)); /* a group's, part after part */
    m->delta = take(base, &off, T * m->c.heads);
    m->logits = take(base, &off, (uint64_t)m->chunk * V);
    m->loss = take(base, &off, T);
    if (m->lowp) {
        m->xb = take(base, &off, (T * widest + 1) / 2);
        m->dyb = take(base, &off, (T * widest + 1) / 2);
        m->logits_b = take(base, &off, ((uint64_t)m->chunk * V + 1) / 2);
    }
    if (off > elems)
        return model_fail(PGRT_EINVAL, "pgrt_lm: arena plan too small (%llu > %llu elements)",
                          (unsigned long long)off, (unsigned long long)elems);
    return 0;
}

int pgrt_lm_create(pgrt_ctx *ctx, const pgrt_lm_params *p, pgrt_lm **out)
{
    if (!ctx || !out)
        return model_fail(PGRT_EINVAL, "pgrt_lm_create: NULL argument");
    *out = NULL;
    int rc = check_params(p);
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
    plan pl;
    make_plan(c, ad, p->batch, p->seq, p->dtype == PGRT_LM_BF16, p->head_chunk, &pl);
    uint64_t need = plan_bytes(&pl, p->keep_grads);
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
    /* LoRA layout: layer by layer, group by group (lora_d), the group's
     * A's one after another, then its B's; a group stacks its pairs while
     * they fit the thin kernels' 64 columns */
    for (size_t i = 0; i < (size_t)c->layers * PGRT_LINEAR_COUNT; i++)
        m->lora[i] = (lora_d){-1, -1, 0, 0, 1};
    for (size_t i = 0; i < ad->count; i++)
        m->lora[ad->w[i].layer * PGRT_LINEAR_COUNT + ad->w[i].module].a = 0;
    int64_t off = 0;
    for (int l = 0; l < c->layers; l++)
        for (int g0 = 0, g1; g0 < PGRT_LINEAR_COUNT; g0 = g1) {
            lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT];
            int n = 0, lead = -1, part = 0, in, nout;
            for (g1 = g0; g1 < PGRT_LINEAR_COUNT && lora_group_of[g1] == lora_group_of[g0]; g1++)
                n += ld[g1].a >= 0;
            bool stack = n * m->r <= LORA_THIN_RANK;
            for (int i = g0; i < g1; i++) {
                if (ld[i].a < 0)
                    continue;
                if (!stack || lead < 0)
                    lead = i, part = 0;
                pgrt_linear_dims(c, (pgrt_linear)i, &in, &nout);
                ld[i] = (lora_d){off, -1, lead, part++, stack ? n : 1};
                off += (int64_t)m->r * in;
            }
            for (int i = g0; i < g1; i++)
                if (ld[i].a >= 0) {
                    pgrt_linear_dims(c, (pgrt_linear)i, &in, &nout);
                    ld[i].b = off;
                    off += (int64_t)nout * m->r;
                }
        }
    m->nlora = (size_t)off;
    /* LoRA inside gemm_sm90: its operands 16-byte aligned at 16-byte
     * pitches (r and every width a multiple of 8) */
    int qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
    m->fused = m->lowp && m->arch_target == PG_SM_90A && m->nlora && m->r % 8 == 0 &&
               (c->hidden | c->intermediate | qd | kvd) % 8 == 0;

    if ((rc = upload_weights(m, p->model)) || (rc = layout(m, &pl)))
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
    /* every kernel of the step into the module cache: nothing loads during a capture */
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
    for (size_t i = 0; i < m->ngemm; i++)
        pgrt_gemm_plan_destroy(&m->gemms[i].plan);
    free(m->gemms);
    pgrt_buf_destroy(&m->pbf);
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
