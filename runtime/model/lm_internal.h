/* SPDX-License-Identifier: MIT */
/* Private to the pgrt_lm sources: lm.c (the step), lm_create.c (the
 * object's life and its pipeline), lm_state.c (what is read back, the
 * checkpoint state), lm_plan.c (sizes and the arena), lm_weights.c (the
 * upload), lm_launch.c (launches, the kernels resolved at create,
 * profiling) and lm_linear.c (the linear layers: GEMM dispatch, LoRA
 * products and the side stream). */
#ifndef PTXGEN_LM_INTERNAL_H
#define PTXGEN_LM_INTERNAL_H

#include "ptxgen/pgrt_lm.h"

#include "model_internal.h"
#include "ptxgen/pgrt_train.h"

#include <stdbool.h>
#include <stdint.h>

/* ---------------------------------------------------------------- kernels */

/* The catalog kernels of the step, by name (m->desc, looked up at create). */
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
    X(SWIGLU_FWD_B16, "swiglu_forward_bf16")                                   \
    X(SWIGLU_BWD_B16, "swiglu_backward_bf16")                                  \
    X(SCALE, "gradient_clip")                                                  \
    X(BIAS, "bias_add_f32")                                                    \
    X(CE, "cross_entropy_fwd_bwd_dscale_f32")                                  \
    X(CE_BF16, "cross_entropy_fwd_bwd_dscale_bf16")                            \
    X(ATT_FWD, "attention_forward_f32")                                        \
    X(ATT_DQ, "attention_backward_dq_f32")                                     \
    X(ATT_DKV, "attention_backward_dkv_f32")                                   \
    X(ATT_PREP, "attention_sm90_backward_prep")                                \
    X(ATT_GROUP, "attention_sm90_backward_group")                              \
    X(WIDEN, "cast_bf16_to_f32")                                               \
    X(NARROW, "cast_f32_to_bf16")                                              \
    X(LORA_PROJ, "lora_proj_f32")                                              \
    X(LORA_PROJ_BF16, "lora_proj_bf16")                                        \
    X(LORA_GRAD, "lora_grad_f32")                                              \
    X(LORA_GRAD_BF16, "lora_grad_bf16")                                        \
    X(LORA_UP, "lora_up_f32")                                                  \
    X(LORA_CAST, "cast_f32_to_bf16_scaled2")                                   \
    X(LORA_NARROW, "cast_f32_to_bf16")                                         \
    X(LR_SCHED, "lr_schedule")                                                 \
    X(DROPOUT, "dropout_f32")                                                  \
    X(DROPOUT_ADD, "dropout_add_f32")                                          \
    X(CTR_INC, "counter_inc_u32")

enum {
#define X_(id, name) K_##id,
    LM_KERNELS(X_)
#undef X_
        K_COUNT
};

/* A knob value by name, for lm_kn_of. */
typedef struct knv {
    const char *name;
    uint32_t v;
} knv;

/* One non-GEMM kernel of the step resolved at create (lm_kernels_resolve):
 * loaded, its knobs and launch shape fixed, its profile bucket known. A
 * kernel the dtype does not use stays zero (l.k NULL). */
typedef struct lm_kernel {
    rt_launch l;
    int bucket; /* PGRT_LM_TIME_* */
} lm_kernel;

/* The step's kernels other than the linear layers', in layer words (dav1d's
 * DSP context: chosen once, then called). Their knobs depend only on the
 * model's sizes, B, S, T and the head chunk's rows. */
typedef struct lm_kernels {
    lm_kernel rms_fwd, rms_bwd, add;          /* f32 */
    lm_kernel rms_fwd_add[2], rms_bwd_add[2]; /* bf16; [1]: with a residual */
    lm_kernel gather, widen_x;                /* the embedding; widen_x: bf16, T x H */
    lm_kernel rope_fwd, rope_bwd;
    lm_kernel att_fwd, att_dq, att_dkv;
    lm_kernel att_prep, att_group;            /* fa3: the backward's first and last pass */
    lm_kernel narrow_att;                     /* bf16: att's copy, T x q heads x head_dim */
    lm_kernel narrow_dqkv;                    /* act16: dq, dk, dv's copies at once */
    lm_kernel swiglu_fwd, swiglu_bwd;         /* the dtype's */
    /* the head over row chunks: [0] a whole chunk, [1] the last, shorter one */
    lm_kernel ce[2];                          /* the chunk's, the last chunk's */
    lm_kernel gacc_add;                       /* grad_accum > 1: over the LoRA gradients */
    /* Qwen3: RMSNorm over each head of q ([0]) and of k ([1]) */
    lm_kernel qk_fwd[2], qk_bwd[2];
    lm_kernel lr_sched;                       /* a schedule: the step's learning rate */
} lm_kernels;

/* ---------------------------------------------------------------- state */

/* One base weight on the device: f32, or bf16 (PG_U16 storage). A bf16
 * weight is read by the bf16 tensor-core GEMMs as it is: bf16 is set
 * exactly when m->lowp is (see pgrt_lm). */
typedef struct dweight {
    pgrt_buf *buf;
    bool bf16;
    uint64_t count;
} dweight;

typedef struct layer_w {
    dweight lin[PGRT_LINEAR_COUNT];
    pgrt_buf *norm_in, *norm_post; /* f32 */
    pgrt_buf *q_norm, *k_norm;     /* Qwen3: per-head RMSNorm of q and k (f32, head_dim) */
    pgrt_buf *bias[PGRT_LINEAR_COUNT]; /* f32 or NULL */
} layer_w;

/* Device addresses (arena offsets resolved) of one layer's saved
 * activations. */
/* With act16 (lm_plan) h1 and h2 are kept as their bf16 copies h1b and
 * h2b only, att with its bf16 copy attb, and g, u, act are bf16. */
typedef struct layer_a {
    pgrt_devptr x, h1, q, k, v, att, lse, xm, h2, g, u, act;
    pgrt_devptr h1b, h2b, attb;
    /* fa3: q, k, v's bf16 copies, adjacent (q, k, v themselves are then
     * one shared scratch: nothing reads them after the copy) */
    pgrt_devptr qb, kb, vb;
    pgrt_devptr qpre, kpre; /* Qwen3: q and k before their norms */
    pgrt_devptr xa[PGRT_LINEAR_COUNT]; /* (alpha/r) x A^T, [T, r] */
    pgrt_devptr xa_base; /* where the layer's xa start */
} layer_a;

/* A LoRA pair on the device: offsets (elements) into the parameter
 * buffer; -1 for a module without LoRA. The pairs of a layer that read
 * one input (q, k, v; gate, up) form a group: their A's lie one after
 * another (a [parts x r, in] matrix at the first one's a), their xa (and
 * dxa) part after part, so one pass over the input serves all of them.
 * Only pairs of one rank and one scale stack: a run of such pairs in
 * module order is a group of its own (lm_lora_layout); an adapter without
 * rank_pattern or alpha_pattern has one run a group. */
typedef struct lora_d {
    int64_t a, b;
    int lead;    /* the module of the group's first pair */
    int part;    /* this pair's place in the group */
    int parts;   /* pairs in the group */
    int r;       /* the pair's rank (pgrt_lora.r) */
    float scale; /* the pair's scale (pgrt_lora.scale), as the kernels take it */
} lora_d;

/* Ranks up to this run the LoRA products on the thin kernels (lm_linear.c);
 * a group stacks its pairs while they fit in as many columns. */
#define LORA_THIN_RANK 64

/* Which group a module's pair belongs to: the modules reading one input. */
static const int lora_group_of[PGRT_LINEAR_COUNT] = {0, 0, 0, 1, 2, 2, 3};

struct pgrt_lm {
    pgrt_ctx *ctx;
    pgrt_model_config c;
    int B, S, T, r; /* r: the adapter config's; each pair has its own (lora_d) */
    float lora_scale; /* the config's default scale; the products take the pair's */
    unsigned targets;
    int rmax;          /* the largest rank of a pair (lm_lora_layout) */
    uint64_t rank_sig; /* 0: every pair of rank r; else a hash of the pairs' ranks */
    /* bf16 and lowp are one flag (params.dtype == PGRT_LM_BF16) under two
     * names: bf16 for the weights' storage, lowp for the step's bf16
     * tensor-core GEMMs and bf16 activation copies (xb, dyb, logits_b). */
    bool bf16;
    int chunk; /* head rows a chunk */
    int recompute; /* layers 0 .. recompute-1 run their forward again in the backward */
    bool profile;
    pgrt_event *ev[2]; /* profile: around each launch */
    double prof_ms[PGRT_LM_TIME_COUNT];
    size_t prof_nk;
    pgrt_lm_kernel_time prof_k[PGRT_LM_PROFILE_KERNELS];

    const pgk_desc *desc[K_COUNT];
    lm_kernels k;  /* the non-GEMM kernels, resolved at create */
    bool warming;  /* get kernels, launch nothing (create's dry run) */
    size_t launches;

    dweight embed, head; /* head.buf NULL when tied */
    pgrt_buf *norm_final;
    layer_w *lw;
    pgrt_buf *wscratch; /* f32, the largest bf16 weight widened (unused: see lowp) */
    bool lowp;
    pg_target target, arch_target; /* arch_target sm_90a: gemm_sm90 (wgmma + TMA) */
    unsigned sms;
    struct lm_product *gemms;        /* the step's GEMMs, in its order (lm_gemm) */
    size_t ngemm, gemm_cap, gemm_next;
    pgrt_devptr xb, dyb, logits_b;
    /* bf16 on sm_90a: LoRA inside the base GEMMs (lm_linear.c), on bf16
     * copies of the LoRA weights: pbf holds A and B, then s A, s B */
    bool fused;
    bool act16; /* lm_plan's: bf16 MLP activations, bf16 kept norm outputs */
    /* lm_plan's: attention on wgmma (attention_sm90_*: bf16 q, k, v kept,
     * dO's bf16 copy and the row statistics in dob and att_stats) */
    bool fa3;
    pgrt_devptr dob, att_stats;
    pgrt_devptr dkh, dvh; /* fa3 with GQA: each query head's dK and dV */
    pgrt_buf *pbf;
    pgrt_buf *ws;        /* split-K workspace */
    uint64_t ws_need;    /* the largest workspace a GEMM of the step wants */
    /* act16, not profiling: the LoRA gradients' products (dB, dA), which
     * nothing in the step reads, run on a side stream beside the rest
     * (lm_side_*), with their own split-K workspace; dq, dk, dv's bf16
     * copies and each group's dxa then have buffers of their own */
    bool side;
    pgrt_stream *ls;
    pgrt_event *ev_fork, *ev_join, *ev_o;
    pgrt_buf *ws_side;
    uint64_t ws_side_need;
    pgrt_devptr dqb, dkb, dvb;
    uint64_t dxa_stride; /* bytes between the runs' dxa (dxa_of) */
    pgrt_buf *lcnt;      /* u32 arrival counters of the LoRA kernels, zero between launches */
    uint32_t lcnt_need;

    pgrt_buf *arena; /* f32 activations */
    layer_a *la;
    pgrt_devptr xf, hf, dx, dxm, dh, dq, dk, dv, datt, dg, du, dact, dxa, delta, part, dtmp, logits,
        loss;
    /* ids, labels, the loss scale (an f32's bits), positions and document
     * starts (packed), the error word: one upload a micro-batch */
    pgrt_buf *ints;
    pgrt_devptr ids, labels, scale, pos, docs, errw;
    bool packed;
    /* RoPE from a table at positions in memory: packed rows (the batch's
     * positions) or a scaled rope (Llama 3: positions t mod S, set once) */
    bool rope_table;
    pgrt_buf *inv_freq; /* rope_table: the inverse frequencies, head_dim / 2 */

    /* gradient accumulation: gacc holds the sum of the step's earlier
     * micro-batches' gradients (zero at a step boundary); a micro-batch
     * that does not end a step runs as its own graph (graph on) */
    int accum, pending;
    bool micro;      /* the callbacks run a micro-batch that does not update */
    bool evaluating; /* the head runs the forward and loss only */
    bool graph;
    pgrt_buf *gacc;
    pgrt_graph *micro_graph;
    bool micro_failed;
    /* a learning-rate schedule: base lr, warmup, total, floor, kind (f32) */
    pgrt_buf *sched;
    float sched_host[5];
    /* LoRA dropout (the adapter's lora_dropout > 0): the pairs take the
     * f32 GEMM path with x dropped into xdrop by a counter-based mask
     * (kernels/dropout.c) that the backward makes again; dctr counts the
     * training micro-batches on the device */
    bool drop;
    uint32_t drop_seed, drop_keep_min;
    float drop_scale;
    pgrt_buf *dctr;
    pgrt_devptr xdrop;
    pgrt_buf *lossview; /* the per-row losses, for the download */

    pgrt_buf *p, *g, *gkeep; /* LoRA params, gradients, kept gradients (f32) */
    size_t nlora;
    lora_d *lora; /* layers x PGRT_LINEAR_COUNT */
    pgrt_train *train;

    int32_t *hid, *hlab; /* the upload: ids, labels, scale, [pos, docs] */
    float *hloss;
    uint64_t arena_bytes, weight_bytes, lora_bytes;

    /* Data parallel (params.comm): the updating micro-batch's gradients are
     * summed over the ranks on cs, a layer's slice of g as soon as its
     * backward is done (ready: recorded on the step's stream after it),
     * joined back before the clip (done); layer_off[l] .. layer_off[l + 1]
     * is layer l's slice (layers + 1 entries). */
    pgrt_comm *comm;
    pgrt_stream *cs;
    pgrt_event *ready, *done;
    size_t *layer_off;
    /* Sharded optimizer (params.shard_optimizer): p and g hold world x
     * piece elements (zero beyond nlora); rank r updates elements r x piece
     * .. + piece, through the views pshard and gshard. */
    bool shard;
    int rank, world;
    size_t piece;
    pgrt_buf *pshard, *gshard;
};

/* ---------------------------------------------------------------- sizes (lm_plan.c) */

typedef struct lm_plan {
    int recompute;    /* the first `recompute` layers keep their input only */
    uint64_t arena;   /* f32 elements */
    uint64_t weights; /* bytes */
    uint64_t scratch; /* f32 elements of the widened-weight scratch (0: see lowp) */
    uint64_t lora;    /* f32 elements of the LoRA matrices */
    int chunk;
    /* bf16 on sm_90a with every pair inside the base GEMMs (lm_act16): the
     * MLP's activations and gradients (g, u, act, dg, du, dact) in bf16,
     * as transformers keeps them under autocast, the norms' outputs kept
     * as their bf16 copies only (h1b, h2b), the attention's with its copy */
    bool act16;
    /* act16, rows not packed, head_dim a multiple of 8: attention on the
     * sm_90a kernels (attention_sm90_*), q, k and v kept in bf16 */
    bool fa3;
} lm_plan;

int lm_check_params(const pgrt_lm_params *p);
void lm_plan_make(const pgrt_model_config *c, const pgrt_adapter *ad, int B, int S, bool bf16,
                  bool act16, bool fa3, int head_chunk, int recompute, lm_plan *p);
/* Whether p takes the sm_90a attention once act16 holds: rows not packed,
 * a head_dim the tensor maps read (a multiple of 8), and the environment's
 * PGRT_LM_ATTENTION not "mma" (the older kernels, for comparison). */
bool lm_fa3(const pgrt_lm_params *p, bool act16);
/* Whether p on a device of arch target `arch` runs with act16: bf16,
 * sm_90a, no LoRA dropout, and every pair inside the base GEMMs (a rank
 * and every width a multiple of 8). The condition of lm_fusable() with
 * every pair fused. */
bool lm_act16(const pgrt_lm_params *p, pg_target arch);
/* The plan of p's recompute mode whose bytes fit `budget` (AUTO: the
 * fewest recomputed layers; 0 bytes: no bound); false when even the
 * plan asked for, or every layer recomputed for AUTO, does not fit (*pl is
 * then the smallest plan tried). */
bool lm_plan_fit(const pgrt_lm_params *p, bool act16, uint64_t budget, lm_plan *pl);
uint64_t lm_plan_bytes(const lm_plan *p, const pgrt_lm_params *q);
/* m->lora and m->nlora from the adapter: layer by layer, group by group. */
void lm_lora_layout(pgrt_lm *m, const pgrt_adapter *ad);
/* m->arena and every activation address in it. */
int lm_arena_layout(pgrt_lm *m, const lm_plan *pl);

/* ---------------------------------------------------------------- weights (lm_weights.c) */

int lm_upload_weights(pgrt_lm *m, const pgrt_model_files *mf);

/* ---------------------------------------------------------------- launches (lm_launch.c) */

/* kn: the descriptor's defaults with kv set by name, then picked. */
int lm_kn_of(const pgk_desc *d, const knv *kv, size_t n, pgk_knobs *kn);
/* Launch kernel d (m->desc[k] or a GEMM choice; k its bucket) with knobs
 * kn: the kernel is looked up each time. While warming, only looked up. */
int lm_launch_kn(pgrt_lm *m, pgrt_stream *s, int k, const pgk_desc *d, const pgk_knobs *kn,
                 const pgrt_arg *a, size_t na);
/* A kernel resolved at create, launched (counted, profiled); nothing
 * while warming. */
int lm_run(pgrt_lm *m, pgrt_stream *s, const lm_kernel *k, const pgrt_arg *a, size_t na);
/* m->k for the model's sizes and dtype (after m->desc). */
int lm_kernels_resolve(pgrt_lm *m);
/* The profile: a kernel's bucket, a clock, one waited-for launch's time. */
int lm_bucket(bool lowp, int k);
void lm_profile_add(pgrt_lm *m, const char *name, int kind, double ms);
int lm_prof_start(pgrt_lm *m, pgrt_stream *s);
int lm_prof_stop(pgrt_lm *m, pgrt_stream *s, const char *name, int bucket);

/* The lookup-per-launch helpers of the linear layers (lm_linear.c). */
static inline int kn_of(const pgk_desc *d, const knv *kv, size_t n, pgk_knobs *kn)
{
    return lm_kn_of(d, kv, n, kn);
}
static inline int launch_kn(pgrt_lm *m, pgrt_stream *s, int k, const pgk_desc *d,
                            const pgk_knobs *kn, const pgrt_arg *a, size_t na)
{
    return lm_launch_kn(m, s, k, d, kn, a, na);
}
static inline int launch(pgrt_lm *m, pgrt_stream *s, int k, const knv *kv, size_t nkv,
                         const pgrt_arg *a, size_t na)
{
    pgk_knobs kn;
    int rc = lm_kn_of(m->desc[k], kv, nkv, &kn);
    return rc ? rc : lm_launch_kn(m, s, k, m->desc[k], &kn, a, na);
}

#define KN(...) ((const knv[]){__VA_ARGS__}), (sizeof((const knv[]){__VA_ARGS__}) / sizeof(knv))
#define ARGS(...)                                                              \
    ((const pgrt_arg[]){__VA_ARGS__}),                                         \
        (sizeof((const pgrt_arg[]){__VA_ARGS__}) / sizeof(pgrt_arg))
#define P(x) pgrt_arg_ptr(x)
#define U(x) pgrt_arg_u32((uint32_t)(x))
#define F(x) pgrt_arg_f32((float)(x))

/* ---------------------------------------------------------------- linear layers (lm_linear.c) */

/* A product of a linear layer in its words (y = x·Wᵀ over T rows; x [T,
 * in], W [out, in]): forward a = x, b = W; dX a = dy, b = W; dW a = dy,
 * b = x. bf16 operands with an f32 result on the chosen family, f32 on
 * the seed's exact kernels. */
pgrt_gemm_spec lm_lin(const pgrt_lm *m, pgk_gemm_layout lay, pgrt_devptr a, pgrt_devptr b,
                      uint32_t in, uint32_t out, bool acc);
/* The step's next GEMM, spec into c (+ bias), timed to `bucket` when
 * profiling; while warming (create's dry run) it is prepared instead:
 * every GEMM of the step is a pgrt_gemm_plan made once, in step order. */
int lm_gemm(pgrt_lm *m, pgrt_stream *s, const pgrt_gemm_spec *spec, pgrt_devptr c,
            pgrt_devptr bias, int bucket);
/* The step's next GEMM passed over (an evaluation needs no gradient). */
int lm_gemm_skip(pgrt_lm *m, pgrt_devptr c);
void lm_gemms_destroy(pgrt_lm *m);
/* The LoRA weights' bf16 copies for the fused path: at each step's start. */
int lm_lora_weights(pgrt_lm *m, pgrt_stream *s);
/* Whether the LoRA pairs ride in gemm_sm90 (m->fused): bf16 on sm_90a,
 * every width a multiple of 8 and a pair whose rank is one (TMA's 16-byte
 * pitches). In a fused pgrt_lm a pair of another rank takes the path it
 * would take unfused (lm_pair_fused). */
bool lm_fusable(const pgrt_lm *m);
/* Does this pair (a >= 0) ride in the base GEMMs? */
static inline bool lm_pair_fused(const pgrt_lm *m, const lora_d *ld)
{
    return m->fused && ld->r % 8 == 0;
}

int weight_f32(pgrt_lm *m, pgrt_stream *s, const dweight *w, pgrt_devptr *out);
/* A linear layer's input: x f32 (0 where only the copy is kept: act16)
 * and, in bf16, its bf16 copy xb. */
typedef struct lm_in {
    pgrt_devptr x, xb;
} lm_in;
int linear_fwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, lm_in x, pgrt_devptr y);
/* ---------------------------------------------------------------- the step (lm.c) */

/* pgrt_train's callbacks of the step (user: the pgrt_lm): the head (the
 * micro-batch's forward, loss and the head's backward) and the layers'
 * backward; lm_create.c's dry run calls them while warming. */
int lm_head_cb(void *user, pgrt_stream *s, uint32_t seq_len);
int lm_backward_cb(void *user, pgrt_stream *s, size_t layer, uint32_t seq_len);
/* Wait for s: data parallel, bounded and watching the other ranks. */
int lm_wait(pgrt_lm *m, pgrt_stream *s);

/* The side stream (m->side): join makes s wait for every product given
 * to it so far; mark_o notes the o projection's (lm_side_wait_o waits for
 * those alone). No-ops without a side stream or while warming. */
int lm_side_join(pgrt_lm *m, pgrt_stream *s);
int lm_side_mark_o(pgrt_lm *m);
int lm_side_wait_o(pgrt_lm *m, pgrt_stream *s);
int linear_bwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, lm_in x, pgrt_devptr dy,
               pgrt_devptr dyb, pgrt_devptr dx, bool acc);
/* Whether layer l's q, k, v backward runs at once (act16, no q/k norms,
 * the three one run of pairs), and that backward into dx (not added). */
bool lm_qkv_merged(const pgrt_lm *m, int l);
int linear_bwd_qkv(pgrt_lm *m, pgrt_stream *s, int l, lm_in x, pgrt_devptr dx);

#endif
