/* SPDX-License-Identifier: MIT */
/*
 * A small synthetic model trained end to end on the GPU with the catalog's
 * kernels and the backward pipeline (pgrt_train.h); shared by ptxgen-train
 * and the gpu tests. Private to the project: not installed.
 *
 * Activations are row-major [M, H] with M = batch * seq tokens (token t of
 * sequence b is row b*seq + t). L residual blocks, each
 *
 *     n = RMSNorm(x; gamma)                          gamma [H], trainable
 *     h = n W + (n A) B                              W [H,H] frozen; LoRA A [H,R], B [R,H]
 *     p = transpose(softmax_seq(SiLU(transpose(h))))  softmax over the sequence
 *     x = x + p
 *
 * then out = x W_out (frozen, [H,H]) and an MSE loss against a target. The
 * softmax runs over the sequence: h is transposed to [H, M], whose rows
 * hold the batch's sequences one after the other, so a row softmax of
 * length seq over H*batch rows is a softmax over each sequence, feature by
 * feature. Weights are stored [in, out]: the projections are gemm_forward
 * (NN), dX = dY W^T is gemm_backward_a and dW = X^T dY gemm_backward_b.
 *
 * The data are random and fixed by the seed. The target is what a teacher
 * makes of the input: the same model with other trainable values (B != 0,
 * gamma != 1), so the student (B = 0, gamma = 1) can drive the loss down.
 * The backward is the pipeline's per-layer loop (clip of each layer's
 * three gradients, AdamW on gamma, A, B), eager or graphed.
 */
#ifndef PTXGEN_TRAIN_MODEL_H
#define PTXGEN_TRAIN_MODEL_H

#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_train.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tmodel_config {
    uint32_t layers, hidden, seq, batch, rank;
    uint32_t max_seq; /* the longest seq a step may use (buffers are sized for it); >= seq */
    uint32_t steps;   /* the most steps whose losses are kept */
    uint64_t seed;
    float lr, beta1, beta2, eps, weight_decay, max_norm;
    float rms_eps;
} tmodel_config;

/* The defaults of ptxgen-train: 28 layers, hidden 128, seq 64, batch 4,
 * rank 16, 20 steps, AdamW lr 1e-2 (0.9, 0.999, 1e-8, wd 0), per-layer clip
 * to a norm of 1e-3 (the early steps of the default run clip). */
void tmodel_config_default(tmodel_config *c);
/* A one-line reason when the configuration cannot be built (dimensions out
 * of the kernels' ranges, zero sizes), else NULL. */
const char *tmodel_config_check(const tmodel_config *c);

/* The host values a model starts from, all drawn from the seed (so a CPU
 * reference can start from the same numbers). Arrays are f32, row-major,
 * per layer one after another. */
typedef struct tmodel_init {
    size_t m_max;      /* batch * max_seq */
    float *x0;         /* [m_max, H] input */
    float *w;          /* [L][H, H] frozen projections */
    float *a;          /* [L][H, R] LoRA A (student and teacher) */
    float *b;          /* [L][R, H] student LoRA B (zeros) */
    float *gamma;      /* [L][H] student gamma (ones) */
    float *teacher_b;  /* [L][R, H] */
    float *teacher_gamma; /* [L][H] */
    float *w_out;      /* [H, H] frozen output projection */
} tmodel_init;

/* 0, or -1 when out of host memory. */
int tmodel_init_make(const tmodel_config *c, tmodel_init *out);
void tmodel_init_free(tmodel_init *init);

typedef struct tmodel tmodel;

/* Allocate and fill the device state and create the pipeline (graph mode
 * `graph`). Every kernel a step uses is loaded here (pre-warm), so a step
 * loads nothing. log: where the pipeline's capture lines go (NULL: stderr). */
int tmodel_create(pgrt_ctx *ctx, const tmodel_config *c, pgrt_train_graph graph,
                  pgrt_train_log_fn log, void *log_user, tmodel **out);
void tmodel_destroy(tmodel **m);

/* One training step at sequence length seq (<= max_seq), enqueued on s:
 * the forward (eager launches), the loss into the slot of `step`
 * (< config.steps), then pgrt_train_backward. When seq differs from the
 * last target's, the teacher's forward first makes the target for it. No
 * host synchronisation. */
int tmodel_step(tmodel *m, pgrt_stream *s, uint32_t seq, uint32_t step);

/* Wait for s and read the losses of steps [0, n) (each the sum of its
 * partials in index order, in double, over M*H). */
int tmodel_losses(tmodel *m, pgrt_stream *s, uint32_t n, double *loss);

/* Wait for s and copy the trainable parameters out: [L][H + H*R + R*H]
 * (gamma, A, B of each layer). */
int tmodel_params(tmodel *m, pgrt_stream *s, float *dst, size_t count);
size_t tmodel_param_count(const tmodel *m);

pgrt_train *tmodel_pipeline(tmodel *m);
/* Kernel launches one step makes: forward, backward callbacks, pipeline. */
size_t tmodel_launches_per_step(const tmodel *m);

/* Test hook: when on, layer 0's backward synchronises the stream, which a
 * capturing stream refuses: the capture fails and the pipeline falls back. */
void tmodel_set_sync_in_backward(tmodel *m, bool on);

#endif /* PTXGEN_TRAIN_MODEL_H */
