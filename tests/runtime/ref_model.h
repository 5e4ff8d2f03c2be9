/* SPDX-License-Identifier: MIT */
/*
 * The model of tools/train_model.h in double precision on the CPU: the
 * reference the gpu test holds the GPU training loop to. Same starting
 * values (tmodel_init_make), same loop: teacher target, forward, MSE,
 * backward, per-layer clip, AdamW with the step's bias corrections.
 */
#ifndef PTXGEN_REF_MODEL_H
#define PTXGEN_REF_MODEL_H

#include "train_model.h"

typedef struct ref_model ref_model;

/* NULL when out of host memory. */
ref_model *ref_model_create(const tmodel_config *c);
void ref_model_destroy(ref_model *r);
/* One training step at seq; returns the step's loss (before the update). */
double ref_model_step(ref_model *r, uint32_t seq);
/* The trainable parameters, laid out as tmodel_params(). */
const double *ref_model_params(const ref_model *r);

#endif /* PTXGEN_REF_MODEL_H */
