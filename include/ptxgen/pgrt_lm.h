/* SPDX-License-Identifier: MIT */
/*
 * pgrt_lm: LoRA fine-tuning of a decoder-only transformer (Qwen2, Qwen3,
 * LLaMA with Llama 3's rope scaling, Mistral: RMSNorm, rotate-half RoPE,
 * causal GQA attention, Qwen3's per-head q/k RMSNorm, SwiGLU, tied or
 * untied LM head) whose forward, loss and backward are all ptxgen
 * kernels.
 *
 * One training step (pgrt_lm_step) on a batch of B rows of S token ids:
 *
 *   loss = mean next-token cross-entropy over the B x (S - 1) positions
 *          (labels = the ids shifted by one, as Hugging Face with
 *          labels = input_ids);
 *   the base weights are frozen; y = x W^T (+ b) + s (x A^T) B^T, A [r, in]
 *          and B [out, r], r and s the pair's (pgrt_lora.r and .scale:
 *          alpha / r, rsLoRA alpha / sqrt(r), with the adapter's
 *          rank_pattern and alpha_pattern resolved; docs/model.md says
 *          which path pairs of differing ranks take) on the adapter's
 *          target modules;
 *   the LoRA gradients are clipped by their global L2 norm (max_norm;
 *          0: not clipped) and AdamW (decoupled weight decay, bias
 *          corrections) updates A and B.
 *
 * The whole step runs through pgrt_train (one "layer" whose tensor is the
 * concatenation of every LoRA matrix): forward and loss as its head
 * callback, the backward as its layer callback, then the global clip and
 * one AdamW launch. Every activation lives in one device arena sized at
 * create; a step allocates nothing, loads nothing and synchronises only at
 * its end (to read the loss), so with graphs on it is one CUDA graph.
 *
 * The LM head runs over chunks of rows: logits of a chunk, the fused
 * cross-entropy forward/backward in place, and the chunk's hidden-state
 * gradient, so B x S x vocab logits never exist at once.
 *
 * Precision: PGRT_LM_F32, everything f32 (no TF32); PGRT_LM_BF16, the base
 * weights are held in bf16 on the device (the GEMMs widen them to f32 as
 * they run), activations, statistics, LoRA parameters, gradients and the
 * optimizer state f32.
 *
 * Errors follow pgrt.h: 0 or a negative PGRT_E* code with a one-line
 * pgrt_last_message().
 */
#ifndef PTXGEN_PGRT_LM_H
#define PTXGEN_PGRT_LM_H

#include "pgrt_comm.h"
#include "pgrt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest sequence a row takes; batch x seq is bounded by the model
 * too (every [tokens, width] activation under 2^32 elements: 479349
 * tokens for Qwen2-1.5B's 8960-wide MLP). */
#define PGRT_LM_MAX_SEQ 131072

typedef enum pgrt_lm_dtype {
    PGRT_LM_BF16,
    PGRT_LM_F32,
} pgrt_lm_dtype;

/* Activation recompute: which layers keep only their input through the
 * forward and run their forward again, one at a time, just before their
 * backward (the rest keep every activation). The first k layers are the
 * recomputed ones: the backward reaches them last. */
typedef enum pgrt_lm_recompute {
    PGRT_LM_RECOMPUTE_NONE = 0, /* every layer's activations kept */
    PGRT_LM_RECOMPUTE_LAYERS,   /* every layer recomputed: the least memory */
    /* the fewest layers recomputed that make the plan fit: within
     * max_memory_gib where that is set, and within the device's free
     * memory */
    PGRT_LM_RECOMPUTE_AUTO,
} pgrt_lm_recompute;

typedef enum pgrt_lm_sched_kind {
    PGRT_LM_SCHED_CONSTANT = 0,
    PGRT_LM_SCHED_LINEAR,
    PGRT_LM_SCHED_COSINE,
} pgrt_lm_sched_kind;

/* The learning rate of optimizer step s (0-based, s = the steps the
 * optimizer has taken), as Hugging Face transformers' schedules give it:
 * lr * s / warmup_steps while s < warmup_steps, then lr * (floor + (1 -
 * floor) * g(p)) with p = (s - warmup) / max(1, total - warmup) clamped to
 * [0, 1] and g = 1 (constant), 1 - p (linear), (1 + cos(pi p)) / 2
 * (cosine). A kernel writes it into the optimizer's hyper buffer at the
 * start of every step, so a graphed step follows it too. A step skipped
 * for a non-finite gradient does not advance s. */
typedef struct pgrt_lm_schedule {
    pgrt_lm_sched_kind kind;
    uint32_t warmup_steps, total_steps;
    float floor; /* min_lr / lr, 0 to 1 */
} pgrt_lm_schedule;

typedef struct pgrt_lm_params {
    const pgrt_model_files *model; /* weights are copied to the device at create */
    const pgrt_adapter *adapter;   /* the initial LoRA matrices (copied) */
    int batch, seq;                /* >= 1 and >= 2 */
    pgrt_lm_dtype dtype;
    float lr, beta1, beta2, eps, weight_decay;
    float max_norm; /* 0: no clipping */
    bool graph;     /* capture the step as a CUDA graph */
    /* Keep a copy of the gradients before clipping (pgrt_lm_grads). */
    bool keep_grads;
    /* Rows of the LM head's logits chunk; 0: chosen from the vocabulary. */
    int head_chunk;
    /* Time the kernels by kind (pgrt_lm_stats.time_ms): the GPU time of
     * every launch, between two events, each waited for (so steps are
     * slower, but a kernel's time is its own, not the launch's). Eager
     * steps only. */
    bool profile;
    /* Added after the fields above; zero keeps the earlier behaviour. */
    /* Micro-batches an optimizer step: pgrt_lm_train calls 1 .. N-1 of a
     * step add their gradients up, call N adds its own and updates (0 or
     * 1: every call updates). */
    int grad_accum;
    /* Batches carry position ids and document starts (pgrt_lm_batch.pos,
     * .doc_start): packed rows of several documents, RoPE restarting at
     * each and no attention across a boundary. Off: every row is one
     * document at positions 0 .. seq-1. */
    bool packed;
    /* The learning rate by optimizer step, computed on the device
     * (pgrt_lm_schedule); all zero: lr for every step. */
    pgrt_lm_schedule schedule;
    /* The adapter's lora_dropout p > 0: each pair's input is dropped by a
     * mask drawn from (dropout_seed, the training micro-batches so far,
     * the layer and module, the element's index), kept elements scaled by
     * 1 / (1 - p) (kernels/dropout.c has the hash: a reference makes the
     * same masks); evaluations keep everything. These pairs take the f32
     * GEMM path (no fused or thin LoRA kernels). */
    uint32_t dropout_seed;
    /* Data parallel over comm's ranks (pgrt_comm.h), one pgrt_lm a rank,
     * each on its own batch: the updating micro-batch's LoRA gradients are
     * summed over the ranks, layer by layer on a stream of their own while
     * the backward goes on (within the step's graph), before the clip, so
     * every rank clips, skips and updates alike and the adapters stay
     * identical to the bit. A batch's loss is scaled by 1 / step_targets,
     * which must count every rank's targets (0: this micro-batch's, summed
     * over the ranks); results (loss_sum, targets) are every rank's
     * together. pgrt_lm_train and pgrt_lm_eval are collective: every rank
     * makes the same calls in the same order (state saves and loads and
     * adapter reads are not; each rank may make its own). Waits are
     * bounded by the
     * communicator's timeout. With lora_dropout, rank r draws its masks from
     * dropout_seed mixed with r (rank 0's are a single process's). NULL:
     * one process. */
    pgrt_comm *comm;
    /* With comm: shard the optimizer state (ZeRO-1). The step's gradients
     * are reduce-scattered once the backward is done (not layer by layer),
     * each rank clips with the norm of the whole (pgrt_train's shard_comm)
     * and updates its 1/world of the LoRA parameters, holding AdamW's
     * moments of that slice only, and the updated slices are all-gathered
     * (all within the step's graph). The adapters stay identical on every
     * rank; the state file is the unsharded one, so a run saved with it
     * resumes without it and back. pgrt_lm_state_save is then collective
     * (every rank calls it; the moments are gathered; a NULL path writes
     * nothing). It saves 8 bytes a LoRA parameter times (world - 1) / world
     * of device memory. */
    bool shard_optimizer;
    /* Activation recompute (above); NONE: everything kept. A recomputed
     * layer gives the bits a kept one does. */
    pgrt_lm_recompute recompute;
    /* With PGRT_LM_RECOMPUTE_AUTO, a bound on the device memory in use
     * once pgrt_lm_create returns (the whole process's, as
     * pgrt_ctx_mem_info counts it), GiB; 0: the device's free memory. */
    double max_memory_gib;
} pgrt_lm_params;

typedef struct pgrt_lm pgrt_lm;

/* Device bytes pgrt_lm_create would allocate for these params (weights,
 * arena, LoRA state), without touching the device. PGRT_LM_RECOMPUTE_AUTO
 * counts the fewest recomputed layers whose bytes fit max_memory_gib (none
 * when it is 0: the device's free memory is not known here). The device
 * is not known either: this is the figure of a device other than sm_90a,
 * an upper bound. In bf16 on sm_90a, with every LoRA rank a multiple of 8
 * and no LoRA dropout, the MLP's activations are bf16 and take less. */
PGRT_API int pgrt_lm_bytes(const pgrt_lm_params *p, uint64_t *bytes);

/* Check the params against the model and adapter, check that the device
 * has the memory (PGRT_ENOMEM naming batch x seq and the bytes, before
 * anything is allocated), upload the weights and load every kernel the
 * step uses. */
PGRT_API int pgrt_lm_create(pgrt_ctx *ctx, const pgrt_lm_params *p, pgrt_lm **out);
PGRT_API void pgrt_lm_destroy(pgrt_lm **lm);

/* One training step on ids (batch x seq ids, each in [0, vocab): the
 * caller checks) on stream s; waits for it. loss: the mean cross-entropy
 * before the update; grad_norm: the global L2 norm of the LoRA gradients
 * before clipping. Either may be NULL. pgrt_lm_train with targets NULL;
 * with grad_accum > 1 or packed use that. */
PGRT_API int pgrt_lm_step(pgrt_lm *lm, pgrt_stream *s, const int32_t *ids, double *loss,
                          float *grad_norm);

/* A batch of batch x seq tokens for pgrt_lm_train and pgrt_lm_eval (the
 * arrays need only live for the call). */
typedef struct pgrt_lm_batch {
    const int32_t *ids; /* each in [0, vocab): the caller checks */
    /* The id each position is trained to predict, -100 (any negative) for
     * none: transformers' labels shifted left by one. NULL: the next id in
     * the row, nothing after the row's last position. */
    const int32_t *targets;
    /* params.packed only (required then): the RoPE position of each token,
     * and the index in its row where its document begins (0 <= doc_start[i]
     * <= i within the row; key j is visible to query i iff doc_start[i] <=
     * j <= i). */
    const int32_t *pos, *doc_start;
    /* The targets (>= 0) of the whole optimizer step, every micro-batch of
     * it together: the loss gradient is scaled by 1 / step_targets, so the
     * accumulated gradient is that of the mean loss over the step. 0: this
     * batch's own count (right whenever grad_accum is 1). */
    uint64_t step_targets;
} pgrt_lm_batch;

/* What a pgrt_lm_train or pgrt_lm_eval call measured. */
typedef struct pgrt_lm_result {
    double loss_sum;  /* the cross-entropy summed over this batch's targets */
    uint64_t targets; /* this batch's targets; loss = loss_sum / targets */
    bool updated;     /* the call ended an optimizer step */
    bool skipped;     /* ... whose gradient norm was not finite: nothing moved */
    float grad_norm;  /* updated: the global L2 norm before clipping */
    float lr;         /* updated: the learning rate that step used */
} pgrt_lm_result;

/* One micro-batch on stream s, waited for: forward, loss and backward;
 * with grad_accum N, every N-th call since create (or the last load of
 * optimizer state) also clips and updates (r->updated). A batch with no
 * targets is refused (PGRT_EINVAL), except with a comm, where one rank's
 * share of a step may hold none (the step as a whole must). r may be
 * NULL. With a comm, s may not be NULL. */
PGRT_API int pgrt_lm_train(pgrt_lm *lm, pgrt_stream *s, const pgrt_lm_batch *b,
                           pgrt_lm_result *r);

/* The forward and loss of one batch, no gradient and no update (a
 * validation loss); refused between the micro-batches of a step. Eager.
 * r->updated is false. */
PGRT_API int pgrt_lm_eval(pgrt_lm *lm, pgrt_stream *s, const pgrt_lm_batch *b,
                          pgrt_lm_result *r);

/* The micro-batches of the current optimizer step already run (0 .. N-1):
 * 0 at a step boundary, where state may be saved. */
PGRT_API int pgrt_lm_pending(const pgrt_lm *lm);

/* The base learning rate (params.lr; the schedule scales it) from the
 * next step on, ordered on s. */
PGRT_API int pgrt_lm_set_lr(pgrt_lm *lm, pgrt_stream *s, float lr);

/* Optimizer steps taken so far (skipped ones not counted). Waits for s. */
PGRT_API int pgrt_lm_steps(pgrt_lm *lm, pgrt_stream *s, uint64_t *steps);

/* The optimizer state (AdamW's moments, its step count and hyper-
 * parameters, the skip counter) to a safetensors file, atomically; and
 * back, into an lm of the same model, targets, ranks (every pair's) and
 * dtype (checked: a mismatch is PGRT_EINVAL naming it). Together with the adapter
 * (pgrt_lm_adapter_get, pgrt_adapter_save; loaded at create) they resume
 * a run exactly: the next steps give the bits an uninterrupted run would.
 * Only at a step boundary (pgrt_lm_pending 0), else PGRT_ESTATE. */
PGRT_API int pgrt_lm_state_save(pgrt_lm *lm, pgrt_stream *s, const char *path);
PGRT_API int pgrt_lm_state_load(pgrt_lm *lm, pgrt_stream *s, const char *path);

/* The current LoRA matrices, into a (an adapter of the same model and
 * targets, each pair of the rank it has here, else PGRT_EINVAL naming the
 * first that is not: its A and B arrays are overwritten). */
PGRT_API int pgrt_lm_adapter_get(pgrt_lm *lm, pgrt_adapter *a);
/* The gradients of the last step before clipping (keep_grads), into the
 * A and B arrays of a (as pgrt_lm_adapter_get's). */
PGRT_API int pgrt_lm_grads_get(pgrt_lm *lm, pgrt_adapter *a);

enum {
    PGRT_LM_TIME_GEMM,      /* GEMMs (and the widening of bf16 weights) */
    PGRT_LM_TIME_ATTENTION, /* attention forward and backward */
    PGRT_LM_TIME_CE,        /* the fused cross-entropy (the head's GEMMs count as GEMMs) */
    PGRT_LM_TIME_REST,      /* norms, RoPE, SwiGLU, adds, LoRA scales, gather, bias */
    PGRT_LM_TIME_LORA_GEMM, /* bf16 only: the f32 LoRA products (in f32 they count as GEMMs) */
    PGRT_LM_TIME_COUNT
};

/* With params.profile: the time of one catalog kernel, summed over the
 * steps. name is the kernel's catalog name (static: valid as long as the
 * library is loaded); kind its PGRT_LM_TIME_* bucket. */
typedef struct pgrt_lm_kernel_time {
    const char *name;
    int kind;
    double ms;
    uint64_t launches;
} pgrt_lm_kernel_time;

/* The most kernels the per-kernel profile tells apart; more are summed
 * into the last entry, named "(others)". */
#define PGRT_LM_PROFILE_KERNELS 48

typedef struct pgrt_lm_stats {
    uint64_t eager_steps, graph_steps, captures, capture_failures;
    uint64_t arena_bytes, weight_bytes, lora_bytes;
    size_t launches_per_step; /* of the last step */
    int recompute_layers;     /* layers whose forward runs again in the backward */
    /* With params.profile: milliseconds by kind, summed over the steps
     * (the optimizer and clip launches of pgrt_train are not in them). */
    double time_ms[PGRT_LM_TIME_COUNT];
    /* With params.profile: the same time by kernel (and kind), in the
     * order of first launch; kernel_count entries. */
    size_t kernel_count;
    pgrt_lm_kernel_time kernels[PGRT_LM_PROFILE_KERNELS];
} pgrt_lm_stats;
PGRT_API int pgrt_lm_stats_get(const pgrt_lm *lm, pgrt_lm_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_LM_H */
