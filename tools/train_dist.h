/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model over several GPUs: one process a GPU, data
 * parallel. This is the tool's side of it: which rank this process is
 * (torchrun's variables, or --dist-init), its GPU, the communicator, and
 * the check that every rank ended with the same adapter. The runtime does
 * the rest (pgrt_comm.h; pgrt_lm_params.comm sums the gradients).
 */
#ifndef PTXGEN_TRAIN_DIST_H
#define PTXGEN_TRAIN_DIST_H

#include "train_opts.h"

#include "ptxgen/pgrt_comm.h"
#include "ptxgen/pgrt_lm.h"

typedef struct train_dist {
    pgrt_dist d;     /* world 1: one process, nothing below is used */
    pgrt_comm *comm; /* world > 1, after train_dist_join */
} train_dist;

/* The run this process belongs to, from the environment and --dist-init;
 * sets o->world and o->dist_rank. 0, or TRAIN_EXIT_USAGE after one line. */
int train_dist_setup(train_opts *o, train_dist *td);

/* The device this rank trains on (LOCAL_RANK; 0 for one process). */
int train_dist_device(const train_dist *td);

/* World > 1: meet the other ranks (rank 0's id over --dist-init or
 * MASTER_ADDR:MASTER_PORT) and make the communicator on ctx's device,
 * both bounded by --dist-timeout. 0, or TRAIN_EXIT_FAIL after one line. */
int train_dist_join(train_dist *td, const train_opts *o, pgrt_ctx *ctx);

/* World > 1: whether every rank starts alike: the step (a resumed
 * checkpoint's), the run's steps, --batch, --seq, --grad-accum, --dtype
 * and the starting adapter (a 64-bit hash of its matrices). A rank that
 * resolved another checkpoint or was given other options would issue
 * other collectives. 0 when they agree (or world 1); TRAIN_EXIT_USAGE
 * naming what differs, TRAIN_EXIT_FAIL on an error, after one line. */
int train_dist_same_start(train_dist *td, pgrt_ctx *ctx, const train_opts *o, uint64_t step,
                          uint64_t total, const pgrt_adapter *start);

/* World > 1: whether every rank holds the same adapter, to the bit (the
 * hash, compared over the ranks). 0 when they do (or world 1),
 * TRAIN_EXIT_FAIL after one line when not or on an error. */
int train_dist_same_adapter(train_dist *td, pgrt_ctx *ctx, const pgrt_adapter *a);

/* Whether this process writes the run's outputs (the log, checkpoints,
 * adapters): rank 0 only. */
static inline bool train_dist_writes(const train_dist *td) { return td->d.rank == 0; }

void train_dist_close(train_dist *td);

#endif
