/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model: one training run on the device. Optimizer steps of
 * --grad-accum micro-batches from a train_source, evaluations, checkpoints,
 * the progress line and the log, and a stop at the next step boundary on
 * SIGINT or SIGTERM.
 */
#ifndef PTXGEN_TRAIN_LOOP_H
#define PTXGEN_TRAIN_LOOP_H

#include "train_ckpt.h"
#include "train_opts.h"
#include "train_progress.h"
#include "train_source.h"

#include "ptxgen/pgrt_lm.h"

typedef struct train_run_in {
    const train_opts *o;
    pgrt_ctx *ctx;
    const pgrt_model_files *mf;
    const pgrt_adapter *start; /* the adapter at create (a resumed run: the checkpoint's) */
    train_source *src;         /* at the run's position */
    train_source *eval;        /* NULL: no evaluation */
    const char *eval_start;    /* eval's position text at its start */
    uint64_t total;            /* the run's optimizer steps */
    const train_state *resume; /* NULL: a fresh run; else where the checkpoint left it */
    const char *resume_dir;    /* the checkpoint (its optimizer state) */
    const char *run_config;    /* run_config.json's text, for checkpoints */
    train_log *log;            /* NULL: no log from this run */
    bool graph;
    bool keep_grads; /* the first step's gradients into out->grads */
    /* several GPUs (o->world > 1): every rank's step takes o->world x
     * --batch rows of the source and trains on its own --batch of them
     * (rows rank x batch ..), the gradients summed over comm; only rank 0
     * logs, prints progress and writes checkpoints. NULL: one process. */
    pgrt_comm *comm;
} train_run_in;

typedef struct train_run_out {
    double *loss;       /* the losses of this session's steps (caller's, total - first) */
    uint64_t steps;     /* steps this session took */
    double steady_ms;   /* the steps after the session's first, together */
    pgrt_adapter *final; /* the trained adapter (caller's, of the start's shape) */
    pgrt_adapter *grads; /* keep_grads: the first step's gradients (caller's) */
    int signal;          /* the signal that stopped the run early, else 0 */
} train_run_out;

/* The run; returns the exit status (0, 1 on a failure, 2 when the device
 * refuses the configuration: too little memory, 128 + the signal after
 * an interrupted run's checkpoint). */
int train_run(const train_run_in *in, train_run_out *out);

/* SIGINT and SIGTERM set a flag that the loop reads at each step
 * boundary; a second one exits at once (128 + signal), writing nothing. */
void train_signals_install(void);


#endif
