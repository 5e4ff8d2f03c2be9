/* SPDX-License-Identifier: MIT */
/*
 * pgrt_train: the backward pipeline of a training step, with CUDA graph
 * capture and replay.
 *
 * One call, pgrt_train_backward(), runs a training step's backward and
 * optimizer on a stream. With the folded optimizer (the default):
 *
 *     head(user)                           optional: the loss head's backward
 *     for layer = L-1 .. 0:
 *         layer_backward(user, layer)      the caller's backward kernels of the layer
 *     adamw_multi_norm                     squared sums of every gradient (not when
 *                                          clipping is off)
 *     (shard_comm: the sums' all-reduce)   every rank's shard's squares, summed
 *     adamw_multi_finalize                 a clip coefficient a layer (or one for all),
 *                                          step t += 1 unless a norm is not finite
 *     adamw_multi_step                     every tensor's params, m, v (and 16-bit copy)
 *                                          updated with g * coefficient
 *     after_update(user)                   optional: e.g. a sharded optimizer's gather
 *
 * three launches of the pipeline's own a step whatever the tensor count,
 * 32 bytes moved an f32 parameter (28 with clipping off), gradients never
 * written. A non-finite norm skips the whole update: parameters, moments
 * and the step counter stay as they were and a counter in device memory
 * (pgrt_train_skipped) counts the skip. The per-tensor optimizer (the
 * fallback, and what runs when layers share a gradient buffer) is the
 * seed's loop:
 *
 *     adamw_hyper_advance                  step t += 1, bias corrections, on the device
 *     head(user)                           optional: the loss head's backward
 *     for layer = L-1 .. 0:
 *         layer_backward(user, layer)      the caller's backward kernels of the layer
 *         fused clip of the layer's grads  squared sums, one scale, scale in place
 *         adamw_step_dev per tensor        params, m, v updated; hyper-parameters
 *                                          read from device memory
 *
 * The two agree to rounding: their norms sum the same squares over
 * different partitions.
 *
 * Everything in it is an asynchronous launch on one stream: no host
 * synchronisation, no allocation, no module load. So it captures into a
 * CUDA graph. With graphs on, the first call at a sequence length captures
 * the loop and launches the graph (the capturing step runs too), later
 * calls at the same length replay it, a call at another length drops the
 * graph and captures anew, and a capture that fails is logged with its
 * reason and the step runs eagerly (later calls at that length stay eager;
 * a new length tries again).
 *
 * Values that change from step to step live in device memory, never in the
 * graph: the step counter and the bias corrections are advanced by a kernel
 * that is itself part of the loop (so every replay is one optimizer step),
 * and the learning rate is a device float that pgrt_train_set_lr() writes
 * with an asynchronous copy ordered before the next step. The hyper buffer
 * holds ten f32: lr, beta1, beta2, eps, weight_decay, bias_correction1,
 * bias_correction2 (the seven adamw_step_dev reads), beta1^t, beta2^t, t.
 *
 * What a graph fixes: every launch's arguments as the capturing call made
 * them (buffer addresses, sizes, the clip's max_norm). The caller keeps the
 * buffers its callbacks use alive and in place, and calls
 * pgrt_train_invalidate() when anything but the sequence length changes
 * what the callbacks would launch (a new batch size, reallocated buffers).
 *
 * Callbacks: enqueue work on the stream they are given and return 0, or a
 * negative code. They run while the stream captures: no synchronisation, no
 * synchronous copies, no allocation, and only kernels already in the module
 * cache (pgrt_prewarm() them first; a cache miss during capture is refused
 * and makes the capture fail). After a failed capture the whole step is run
 * again eagerly, so a callback may run twice for one step: it must only
 * enqueue work. A callback error outside capture ends the step with that
 * error.
 *
 * Graphs: on when params.graph is PGRT_TRAIN_GRAPH_ON, off when it is
 * PGRT_TRAIN_GRAPH_OFF, and with PGRT_TRAIN_GRAPH_ENV (0, the default) on
 * exactly when the environment variable PTXGEN_CUDA_GRAPH is "1" at
 * pgrt_train_create().
 *
 * Errors, ownership and threads follow pgrt.h: 0 or a negative PGRT_E*
 * code with pgrt_last_message(); the pipeline owns the moments, the clip
 * states, the hyper buffer and the graph, and borrows the parameter and
 * gradient buffers (they must outlive it). A pipeline is used by one thread
 * at a time, with one stream at a time.
 */
#ifndef PTXGEN_PGRT_TRAIN_H
#define PTXGEN_PGRT_TRAIN_H

#include "pgrt.h"
#include "pgrt_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pgrt_train pgrt_train;

/* One trainable tensor of a layer: f32 parameters updated in place and the
 * gradient the layer's backward writes (clipped in place, then read by
 * AdamW), both of the same element count. The buffers are borrowed. Layers
 * may share a gradient buffer: each layer's is consumed before the next
 * layer's backward runs. */
typedef struct pgrt_train_tensor {
    pgrt_buf *param;
    pgrt_buf *grad;
    /* Optional: a bf16 or f16 buffer of param's count that every update
     * writes (param rounded to nearest even), for a model that computes in
     * 16 bits from f32 master weights. Folded optimizer only. */
    pgrt_buf *copy;
} pgrt_train_tensor;

typedef enum pgrt_train_graph {
    PGRT_TRAIN_GRAPH_ENV = 0, /* on iff PTXGEN_CUDA_GRAPH=1 */
    PGRT_TRAIN_GRAPH_OFF,
    PGRT_TRAIN_GRAPH_ON,
} pgrt_train_graph;

/* Which gradients a clip coefficient is computed over. */
typedef enum pgrt_train_norm {
    /* Each layer's gradients by their own L2 norm, min(1, max_norm / norm)
     * (the seed's clip; the default). */
    PGRT_TRAIN_NORM_LAYER = 0,
    /* All gradients by their joint L2 norm with the coefficient of
     * torch.nn.utils.clip_grad_norm_, min(1, max_norm / (norm + 1e-6)).
     * Folded optimizer only. */
    PGRT_TRAIN_NORM_GLOBAL,
    /* No clipping (as max_norm 0). */
    PGRT_TRAIN_NORM_OFF,
} pgrt_train_norm;

typedef enum pgrt_train_optimizer {
    /* Folded, unless two tensors share (overlap in) a gradient buffer: then
     * per-tensor, whose per-layer loop consumes a layer's gradients before
     * the next layer's backward. */
    PGRT_TRAIN_OPT_AUTO = 0,
    PGRT_TRAIN_OPT_FOLDED,     /* the multi-tensor optimizer after the whole backward */
    PGRT_TRAIN_OPT_PER_TENSOR, /* the seed's per-layer loop (no global norm, no copies) */
} pgrt_train_optimizer;

/* Enqueue the backward kernels of one layer (layer_backward) or of the loss
 * head (head) on stream s, for sequence length seq_len. */
typedef int (*pgrt_train_layer_fn)(void *user, pgrt_stream *s, size_t layer, uint32_t seq_len);
typedef int (*pgrt_train_head_fn)(void *user, pgrt_stream *s, uint32_t seq_len);
/* One log line, no newline at the end. */
typedef void (*pgrt_train_log_fn)(void *user, const char *line);

#define PGRT_TRAIN_MAX_TENSORS 16

typedef struct pgrt_train_params {
    size_t layers;            /* >= 1 */
    size_t tensors_per_layer; /* 1 .. PGRT_TRAIN_MAX_TENSORS */
    /* layers * tensors_per_layer entries, layer-major: layer l's tensors are
     * tensors[l * tensors_per_layer ...]. Copied. */
    const pgrt_train_tensor *tensors;
    /* Per-layer clip of the gradients' global L2 norm to max_norm (finite,
     * > 0); 0 turns clipping off. */
    float max_norm;
    /* AdamW. lr may be changed later with pgrt_train_set_lr(). */
    float lr, beta1, beta2, eps, weight_decay;
    pgrt_train_graph graph;
    pgrt_train_layer_fn layer_backward; /* required */
    pgrt_train_head_fn head;            /* may be NULL */
    void *user;                         /* passed to the callbacks and to log */
    /* Capture, replay decisions and fallbacks: NULL writes them to stderr
     * prefixed "pgrt: ". */
    pgrt_train_log_fn log;
    /* Added after the fields above; zero keeps the earlier behaviour's
     * numbers (per-layer clipping). */
    pgrt_train_norm norm;
    pgrt_train_optimizer optimizer;
    /* Sharded optimizer state (ZeRO-1) over shard_comm's ranks
     * (pgrt_comm.h). Each rank passes its own shard of the trainable
     * tensors, every rank's of the same element counts (checked at create,
     * which is then collective), and its callbacks leave that shard's
     * gradients summed over the ranks (pgrt_comm_reduce_scatter). The
     * pipeline sums the clip's squared sums over the ranks before the
     * coefficient, so every rank clips, skips and updates alike; each rank
     * updates its shard and holds the moments of its shard only. Folded
     * optimizer only. NULL: the tensors are the whole. */
    pgrt_comm *shard_comm;
    /* Enqueued after the optimizer update, inside the step (and its
     * graph); may be NULL. With shard_comm: where every rank's updated
     * shard is gathered to all (pgrt_comm_all_gather). */
    pgrt_train_head_fn after_update;
} pgrt_train_params;

/* Check the params, allocate and zero the AdamW moments, size one clip state
 * per layer, upload the hyper-parameters, and load the pipeline's own
 * kernels (adamw_hyper_advance, adamw_step_dev, the clip kernels), so that
 * nothing is loaded during a capture. On success *out owns the pipeline.
 * PGRT_EINVAL for bad params (the message names the field). */
PGRT_API int pgrt_train_create(pgrt_ctx *ctx, const pgrt_train_params *params, pgrt_train **out);
/* Free everything the pipeline owns. The stream it last ran on must be
 * idle (pgrt_stream_sync) or the work must no longer matter. */
PGRT_API void pgrt_train_destroy(pgrt_train **t);

/* One backward pass with clipping and optimizer steps, enqueued on s (a
 * stream from pgrt_stream_create: the legacy default stream cannot be
 * captured, so with it every step runs eagerly). Returns without waiting
 * for the GPU. seq_len > 0 keys the graph. */
PGRT_API int pgrt_train_backward(pgrt_train *t, pgrt_stream *s, uint32_t seq_len);

/* Set the learning rate for the steps enqueued on s after this call: an
 * asynchronous copy into the hyper buffer, ordered on s (never part of a
 * graph: a replay reads whatever the buffer holds when it runs). */
PGRT_API int pgrt_train_set_lr(pgrt_train *t, pgrt_stream *s, float lr);

/* Drop the captured graph; the next graphed step captures again. */
PGRT_API void pgrt_train_invalidate(pgrt_train *t);

/* Whether this pipeline uses graphs (params.graph and the environment). */
PGRT_API bool pgrt_train_graphs_enabled(const pgrt_train *t);

/* The device buffer of the ten hyper-parameter floats, owned by the
 * pipeline (read-only to the caller). */
PGRT_API pgrt_buf *pgrt_train_hyper_buf(pgrt_train *t);

/* Layer l's clip result of the last step, [scale, norm]: waits for s.
 * With the global norm every layer reads the one coefficient and norm. */
PGRT_API int pgrt_train_layer_norm(pgrt_train *t, pgrt_stream *s, size_t layer, float *scale,
                                   float *norm);

/* Whether the pipeline runs the folded optimizer. */
PGRT_API bool pgrt_train_folded(const pgrt_train *t);

/* The folded optimizer's skip counter: steps skipped so far for a
 * non-finite gradient norm, and whether the last step was one. Waits for
 * s. The counter lives in device memory, so graph replays count too.
 * PGRT_ESTATE for the per-tensor optimizer (it never skips). */
PGRT_API int pgrt_train_skipped(pgrt_train *t, pgrt_stream *s, uint32_t *skipped,
                                bool *last_skipped);

/* The optimizer state, borrowed for a checkpoint (download it to save,
 * upload into it to restore; the buffers belong to the pipeline and live
 * as long as it). tensor i (layer-major, as params.tensors): its AdamW
 * moments m and v, f32 of the param's count. The hyper buffer is
 * pgrt_train_hyper_buf. state: the folded optimizer's u32 words (skip
 * flag, skip count, a clip coefficient and norm a group); NULL for the
 * per-tensor optimizer. Only while no step is in flight on another
 * stream. PGRT_EINVAL for i out of range. */
PGRT_API int pgrt_train_moments(pgrt_train *t, size_t i, pgrt_buf **m, pgrt_buf **v);
PGRT_API pgrt_buf *pgrt_train_state_buf(pgrt_train *t);

typedef struct pgrt_train_stats {
    uint64_t steps;            /* pgrt_train_backward calls that succeeded */
    uint64_t eager_steps;      /* of them, run launch by launch */
    uint64_t graph_steps;      /* of them, run as a graph (the capturing step included) */
    uint64_t captures;         /* graphs captured and instantiated */
    uint64_t capture_failures; /* captures that failed (those steps ran eagerly) */
    uint32_t graph_seq_len;    /* the sequence length of the graph held; 0 when none */
    size_t launches_per_step;  /* kernels of the pipeline's own a step (not the callbacks') */
    double capture_ms;         /* host time spent capturing and instantiating, all captures */
    char last_event[256];      /* the last capture, recapture or fallback line logged */
} pgrt_train_stats;

PGRT_API int pgrt_train_stats_get(const pgrt_train *t, pgrt_train_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_TRAIN_H */
