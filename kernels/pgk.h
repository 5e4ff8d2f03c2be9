/* SPDX-License-Identifier: MIT */
/*
 * ptxgen kernels: one descriptor per kernel (name, params, knobs, build,
 * launch) and the catalog of them.
 *
 * Knobs are the problem sizes a launch is computed from (n, m, k, ...) and,
 * for a few kernels, build choices (a variant). Params are what the kernel
 * takes at run time. Unless a descriptor says it bakes a knob, the PTX does
 * not depend on the knobs, so one module serves every shape.
 *
 * Everything here is thread-safe: descriptors are immutable, pgk_emit()
 * builds into a private pg_kernel.
 */
#ifndef PTXGEN_PGK_H
#define PTXGEN_PGK_H

#include "ptxgen.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGK_MAX_KNOBS 8
#define PGK_MAX_PARAMS 16

typedef struct pgk_param {
    const char *name;
    pg_type type;       /* PG_U64 for device pointers */
    bool pointer;       /* a device buffer (type is PG_U64) */
    /* A CUtensorMap passed by value: `.param .align 64 .b8 name[128]`
     * (type is PG_B8). The runtime takes a pgrt_arg_tensor_map for it. */
    bool tensor_map;
} pgk_param;

typedef struct pgk_knob {
    const char *name;
    uint32_t def, min, max; /* inclusive range */
    const char *help;
} pgk_knob;

typedef struct pgk_launch {
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes; /* dynamic shared memory */
    /* Thread-block cluster dimensions (sm_90+, cuLaunchKernelEx); all 0: no
     * cluster, a plain launch. Each must divide the grid's. */
    uint32_t cluster[3];
} pgk_launch;

typedef struct pgk_desc pgk_desc;
struct pgk_desc {
    const char *name;    /* also the .entry name */
    const char *summary; /* one line */
    const pgk_param *params;
    size_t nparams;
    const pgk_knob *knobs;
    size_t nknobs;
    pg_target min_target; /* lowest target it supports */
    /* Comma-separated knobs whose value changes the PTX; NULL if none. */
    const char *baked;
    /* Build the body. The params of the descriptor are already declared, in
     * order, as p[0..nparams). Return 0 or a pg error (the kernel's sticky
     * error is what counts). */
    int (*build)(pg_kernel *k, const pg_param *p, const uint32_t *knobs);
    /* Launch configuration for the knobs; PG_ERANGE if they overflow it. */
    int (*launch)(const uint32_t *knobs, pgk_launch *out);
};

/* The catalog, in a fixed order (the --list order). */
PG_API size_t pgk_count(void);
PG_API const pgk_desc *pgk_at(size_t i);
/* NULL for an unknown name. */
PG_API const pgk_desc *pgk_find(const char *name);

/* Whether the kernel supports target t. */
PG_API bool pgk_supports(const pgk_desc *d, pg_target t);

/* Knob values, in the descriptor's order (PGK_MAX_KNOBS slots). */
typedef struct pgk_knobs {
    uint32_t v[PGK_MAX_KNOBS];
} pgk_knobs;
PG_API void pgk_knobs_default(const pgk_desc *d, pgk_knobs *out);
/* Index of knob `name`, or -1. */
PG_API int pgk_knob_index(const pgk_desc *d, const char *name);
/* Set knob `name` from decimal text `value` ("4096"; also 0x hex). Checks the
 * name, the syntax and the range. On error returns PG_ENOTFOUND, PG_EINVAL or
 * PG_ERANGE and writes a one-line message to err (if errlen > 0). */
PG_API int pgk_knob_set(const pgk_desc *d, pgk_knobs *kn, const char *name, const char *value,
                        char *err, size_t errlen);
/* Parse "NAME=VALUE" and set it, as pgk_knob_set. */
PG_API int pgk_knob_assign(const pgk_desc *d, pgk_knobs *kn, const char *assignment, char *err,
                           size_t errlen);

/* Build and emit the kernel for target t. On success *ptx is a malloc'd
 * (through the pg allocator) NUL-terminated string the caller frees with
 * pgk_free(); *len (if not NULL) its length. On error a one-line message is
 * written to err. PG_ETARGET for a target the kernel does not support,
 * PG_ERANGE for a knob value outside its range. */
PG_API int pgk_emit(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char **ptx, size_t *len,
                    char *err, size_t errlen);
PG_API void pgk_free(void *p);

/* The launch configuration for the knobs. PG_ERANGE for a knob value outside
 * its range or knobs whose launch the GPU cannot run. */
PG_API int pgk_launch_for(const pgk_desc *d, const pgk_knobs *kn, pgk_launch *out, char *err,
                          size_t errlen);

/* squared_sum_reduce's grid size for n elements: min(ceil(n/1024), 256), at
 * least 1. Part of the clip pipeline's API: partial buffers are sized by it. */
PG_API uint32_t pgk_squared_sum_num_blocks(uint32_t n);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGK_H */
