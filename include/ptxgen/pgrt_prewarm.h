/* SPDX-License-Identifier: MIT */
/*
 * pgrt pre-warm: load every module a model's backward step launches
 * before the first step and before any capture. The conventions of
 * pgrt.h hold here.
 */
#ifndef PTXGEN_PGRT_PREWARM_H
#define PTXGEN_PGRT_PREWARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgrt_kernel.h"
#include "pgrt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- pre-warm for a model */

/*
 * The step to plan for, beside the model's shape (pgrt_model_config:
 * hidden, intermediate, heads, kv_heads, head_dim; the rest is not read).
 * Rows of every GEMM are tokens a step: max_batch * max_seq_len. This was
 * the seed's one flat config (contract C-PREWARM-001); the model's half is
 * now the config every other model call takes, so a model opened from a
 * directory pre-warms with pgrt_model_files_config() as it is.
 */
typedef struct pgrt_prewarm_step {
    uint32_t max_seq_len;  /* the longest sequence a step */
    uint32_t max_batch;    /* sequences a step; 0 means 1 */
    uint32_t lora_rank;    /* r of the LoRA adapters on every projection; 0: none */
    bool full_fp32;        /* the base weights train too (f32), not only LoRA */
    bool f16_weights;      /* frozen weights kept in f16: input gradients through
                              them by gemm_f16_backward_a (sm_80 and up) */
} pgrt_prewarm_step;

#define PGRT_PREWARM_MAX 128
#define PGRT_PREWARM_KEY_MAX 96

typedef struct pgrt_prewarm_module {
    /* The cache key: "kernel@target", then each baked knob:
     * "gemm_backward_a@sm_90,variant=1". */
    char key[PGRT_PREWARM_KEY_MAX];
    bool loaded;    /* built and JIT-loaded by this call (false: already cached) */
    double jit_ms;  /* its JIT time in this call (0 when it was cached) */
    double emit_ms; /* building its PTX in this call */
    bool from_disk; /* loaded from the on-disk cubin cache, without a JIT */
    double load_ms; /* reading and loading its cubin */
    size_t cubin_bytes;
    int rc;         /* 0, or why it failed (the call returns the first) */
    size_t ptx_bytes; /* its PTX (the pool loads the longest first) */
    double start_ms, end_ms; /* its load, from the start of the pool's work */
} pgrt_prewarm_module;

typedef struct pgrt_prewarm_report {
    size_t modules;   /* entries of list: the distinct modules a step needs */
    size_t loaded;    /* of them, loaded by this call */
    size_t hits;      /* of them, in the cache already */
    double jit_ms;    /* JIT time of this call's loads */
    double emit_ms;   /* PTX building of this call's loads */
    double total_ms;  /* the whole call, cuBLAS included */
    bool cublas;      /* the GEMMs will go to cuBLAS */
    double cublas_ms; /* loading cuBLAS in this call (0 once loaded) */
    size_t failed;    /* modules that failed to build or load */
    size_t disk_hits; /* of the loaded, served by the on-disk cubin cache */
    double load_ms;   /* cubin reading and loading of this call's loads */
    size_t cubin_bytes; /* of this call's loads */
    int threads;      /* the threads the modules were loaded on */
    pgrt_prewarm_module list[PGRT_PREWARM_MAX];
} pgrt_prewarm_report;

/* Load every module a backward step of this model launches (the backward
 * kernels of norms, attention, MLP and projections, the GEMMs in the tile
 * variant the dispatch picks for each shape, the fused clip and AdamW) and
 * the cuBLAS handle when the switch is on, before the caller allocates
 * weights and before any capture. Kernels take their sizes as parameters,
 * so the list hardly depends on the shape: one module a kernel, plus one a
 * GEMM tile variant. The PTX GEMMs are loaded even when cuBLAS will run
 * the GEMMs, so that turning cuBLAS off never JIT-compiles mid-training.
 * A second call finds everything cached.
 *
 * model and step are checked first, with the knob values a step would
 * launch: PGRT_EINVAL for a NULL, a zero, negative or inconsistent field,
 * PGRT_ERANGE for sizes a kernel cannot take (max_seq_len * intermediate
 * past u32, say), and PGRT_ETARGET for f16_weights below sm_80; the
 * message names the fields.
 * The modules load concurrently, as in pgrt_prewarm, and a failing one
 * does not stop the others; the call returns the first failure in plan
 * order. out (may be NULL) is filled as far as the call got. The jit_ms,
 * emit_ms and load_ms of the report are sums over modules (thread time);
 * total_ms is the wall clock. */
PGRT_API int pgrt_prewarm_model(pgrt_ctx *ctx, const pgrt_model_config *model,
                                const pgrt_prewarm_step *step, pgrt_prewarm_report *out);
/* pgrt_prewarm_each (rc may be NULL) that also fills out (may be NULL) as
 * pgrt_prewarm_model does, one entry a list entry in list order; at most
 * PGRT_PREWARM_MAX entries (PGRT_EINVAL past that, before any load). */
PGRT_API int pgrt_prewarm_list(pgrt_ctx *ctx, const pgrt_warm *list, size_t n, int *rc,
                               pgrt_prewarm_report *out);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_PREWARM_H */
