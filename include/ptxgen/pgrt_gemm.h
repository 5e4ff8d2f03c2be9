/* SPDX-License-Identifier: MIT */
/*
 * pgrt GEMM: a linear layer's three products (pgk_gemm_layout) on the
 * catalog's GEMM families, prepared once (pgrt_gemm_plan) or in one call
 * (pgrt_gemm); the seed's f32 backward GEMMs with optional cuBLAS; the
 * sm_90a wgmma GEMM on buffers. The conventions of pgrt.h hold here.
 */
#ifndef PTXGEN_PGRT_GEMM_H
#define PTXGEN_PGRT_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgk.h"
#include "pgrt_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- GEMM backward dispatch, cuBLAS */

/*
 * The backward GEMMs of a layer whose forward pass is C = A·B (A[M,K],
 * B[K,N], C[M,N], all row-major f32):
 *
 *   pgrt_gemm_backward_a   grad_A[M,K] = dC[M,N]·B[K,N]ᵀ   (accumulate: +=)
 *   pgrt_gemm_backward_b   grad_B[K,N] = A[M,K]ᵀ·dC[M,N]
 *
 * run by cuBLAS when the context has it and its switch is on, and by the
 * catalog's PTX kernels (gemm_backward_a, _a_accumulate, _b) otherwise.
 *
 * cuBLAS is optional and found at run time: dlopen of $PGRT_LIBCUBLAS
 * alone when that is set, else libcublas.so.13, .so.12, .so.11 and
 * libcublas.so. One handle a context, made on first need (the first GEMM,
 * pgrt_cublas_info_get or pgrt_prewarm_model) and destroyed with the
 * context, in CUBLAS_PEDANTIC_MATH: plain fp32, no TF32 (TF32 gave NaNs on
 * transposed backward GEMMs with gradients near 1e5). Each call binds the
 * handle to its stream (cublasSetStream_v2) under a lock, so the GEMM is
 * ordered on the stream given. A missing or unusable library is never an
 * error: the PTX kernels run, and pgrt_cublas_info_get() says why. A load
 * is tried once a context and refused (PGRT_ECAPTURE) while a stream of the
 * context is capturing: pre-warm first.
 *
 * The switch: on, unless $PTXGEN_CUBLAS is "0" when the context first
 * needs it; pgrt_ctx_set_cublas() sets it either way at any time (later
 * GEMMs follow it). Thread-safe.
 */
typedef enum pgrt_gemm_path {
    PGRT_GEMM_PTX = 1,    /* a catalog kernel */
    PGRT_GEMM_CUBLAS = 2, /* cublasSgemm_v2, pedantic fp32 */
} pgrt_gemm_path;

/* grad_A = dC·Bᵀ, or grad_A += dC·Bᵀ with accumulate, on stream s (NULL:
 * the legacy default stream). grad_c holds at least m*n, b k*n and grad_a
 * m*k f32 elements (views are fine); grad_a must not overlap the inputs;
 * m, n, k in [1, 2^24]. Asynchronous. *path (may be NULL) says which path
 * ran. Errors: PGRT_EINVAL, PGRT_ERANGE for the operands; a PTX launch's
 * codes; PGRT_ECUDA with the cuBLAS status name when cuBLAS fails;
 * PGRT_ECAPTURE for a load (module or cuBLAS) during capture. */
PGRT_API int pgrt_gemm_backward_a(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *grad_c,
                                  const pgrt_buf *b, pgrt_buf *grad_a, uint32_t m, uint32_t n,
                                  uint32_t k, bool accumulate, pgrt_gemm_path *path);
/* grad_B = Aᵀ·dC: a holds m*k, grad_c m*n, grad_b k*n elements; otherwise
 * as pgrt_gemm_backward_a. */
PGRT_API int pgrt_gemm_backward_b(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_buf *a,
                                  const pgrt_buf *grad_c, pgrt_buf *grad_b, uint32_t m,
                                  uint32_t n, uint32_t k, pgrt_gemm_path *path);

/* ---------------------------------------------------------------- GEMM, every layout and type */

/*
 * One GEMM of a linear layer, through pgk_gemm_choose() for this device:
 *
 *   PGK_GEMM_FORWARD     c = Y[M,N]  (+)= a = X[M,K]  · b = W[N,K]ᵀ  (+ bias[N])
 *   PGK_GEMM_BACKWARD_X  c = dX[M,K] (+)= a = dY[M,N] · b = W[N,K]   (+ bias[K])
 *   PGK_GEMM_BACKWARD_W  c = dW[N,K] (+)= a = dY[M,N]ᵀ · b = X[M,K]  (+ bias[K])
 *
 * Types come from the buffers: a and b both f16 or both bf16 with c f32,
 * f16 or bf16 (f32 accumulate; sm_80+ tensor cores: gemm_sm90's wgmma +
 * TMA for the large shapes on a compute capability 9.0 device, mma.sync
 * otherwise; a slow fallback on older devices); or a, b and c all f32
 * (SIMT, no TF32: the warp-tiled family for sides of 64 and up and for
 * any shape with a bias or a backward accumulate, the small-tile kernels
 * for thin shapes). A side of at most 64 (a LoRA rank) may run gemm_thin
 * instead: one launch, no workspace (see pgk_gemm_choose). bias (may be NULL) is f32, one value a column
 * of c. accumulate adds the product to c (read in its own type), else c is
 * overwritten and never read. workspace (may be NULL) is any buffer of at
 * least pgrt_gemm_workspace_bytes() bytes: without it, a shape the chooser
 * would split along the reduction runs unsplit instead. Either way the
 * result is the same bits every run (split-K partials are summed in a
 * fixed order). Asynchronous on s (NULL: legacy default stream). c must
 * not overlap a, b or bias, nor may the workspace (one that overlaps c is
 * not used). A graph may capture a shape (and, on gemm_sm90 and for
 * f32, its accumulate and bias) run once before. *used (may be NULL) gets the
 * choice that ran. Errors:
 * PGRT_EINVAL for the operands (types, contexts, overlap), PGRT_ERANGE for
 * sizes outside [1, 2^21] or buffers too small, a launch's codes.
 */
PGRT_API int pgrt_gemm(pgrt_ctx *ctx, pgrt_stream *s, pgk_gemm_layout layout, const pgrt_buf *a,
                       const pgrt_buf *b, pgrt_buf *c, const pgrt_buf *bias, uint32_t m,
                       uint32_t n, uint32_t k, bool accumulate, pgrt_buf *workspace,
                       pgk_gemm_choice *used);
/* The workspace pgrt_gemm wants for this GEMM on ctx's device (0: none). */
PGRT_API uint64_t pgrt_gemm_workspace_bytes(pgrt_ctx *ctx, pgk_gemm_layout layout,
                                            pg_type in_type, pg_type out_type, uint32_t m,
                                            uint32_t n, uint32_t k);

/* ---------------------------------------------------------------- prepared GEMMs */

/*
 * A prepared GEMM: one product of a linear layer, chosen, loaded and (on
 * gemm_sm90) tensor-mapped once, then launched on device addresses with
 * nothing but the driver call: no choice, no catalog or cache lookup, no
 * allocation, so a launch is as cheap as a kernel launch and safe inside a
 * graph capture. pgrt_gemm, pgrt_gemm_sm90, the seed's pgrt_gemm_backward_*
 * and the model (pgrt_lm) all run their GEMMs through it.
 *
 * The layouts and operands, in the layer's words (y = x·Wᵀ, m rows):
 *
 *   PGK_GEMM_FORWARD     c[m,n] (+)= a[m,k]·b[n,k]ᵀ   a = x,  b = W   (+ bias[n])
 *   PGK_GEMM_BACKWARD_X  c[m,k] (+)= a[m,n]·b[n,k]    a = dy, b = W
 *   PGK_GEMM_BACKWARD_W  c[n,k] (+)= a[m,n]ᵀ·b[m,k]   a = dy, b = x
 *
 * The LoRA term rides in the product (16-bit inputs on gemm_sm90): with k2
 * > 0, c also gets a2·b2 over k2 more, a2 and b2 stored the way the layout
 * stores a and b: forward a2 = s·x·Aᵀ [m, k2], b2 = B [n, k2]; dX a2 =
 * s·dy·B [m, k2], b2 = A [k2, k]. Not for dW.
 */
typedef enum pgrt_gemm_kind {
    PGRT_GEMM_CHOSEN = 0, /* pgk_gemm_choose's pick for the device */
    PGRT_GEMM_SEED = 1,   /* f32: the seed's kernels (pgk_gemm_seed_choice), the exact path */
    PGRT_GEMM_WGMMA = 2,  /* 16-bit: gemm_sm90 whatever the shape (a LoRA rank side too) */
} pgrt_gemm_kind;

typedef struct pgrt_gemm_spec {
    pgk_gemm_layout layout;
    pgrt_gemm_kind kind;
    pg_type in_type, out_type; /* a and b (and a2, b2); c */
    uint32_t m, n, k;          /* the layer's, as above; each in [1, 2^21] */
    pgrt_devptr a, b;          /* the operands the plan is bound to */
    uint32_t lda, ldb, ldc;    /* row pitches in elements; 0: dense (only gemm_sm90 takes others) */
    bool accumulate;           /* c += (read in its own type) */
    bool bias;                 /* + an f32 bias, one value a column of c, given at launch */
    pgrt_devptr a2, b2;        /* the LoRA extension, k2 > 0 */
    uint32_t k2, lda2, ldb2;
    uint32_t bn;    /* gemm_sm90's tile width; 0: chosen */
    uint32_t split; /* gemm_sm90's slices of the reduction, 1 to 16; 0: chosen */
    bool no_split;  /* never split the reduction: no workspace at launch */
} pgrt_gemm_spec;

typedef struct pgrt_gemm_plan pgrt_gemm_plan;

/* Prepare spec on ctx's device: choose, load (refused, PGRT_ECAPTURE,
 * while a stream of ctx captures and the kernel is not loaded yet) and
 * encode. On gemm_sm90, a, b, a2 and b2 must be 16-byte aligned with
 * pitches that are multiples of 8; a choice of gemm_sm90 whose operands
 * are not falls back to the mma.sync family. *out is the caller's, freed
 * by pgrt_gemm_plan_destroy. Errors: PGRT_EINVAL (NULLs, types, layout, an
 * extension the choice cannot take), PGRT_ERANGE (sizes, pitches), the
 * loads' and encodes' codes. Thread-safe. */
PGRT_API int pgrt_gemm_plan_create(pgrt_ctx *ctx, const pgrt_gemm_spec *spec,
                                   pgrt_gemm_plan **out);
/* Run the plan on s into c, with bias (spec.bias) and a workspace of
 * pgrt_gemm_plan_workspace() bytes. Without one (0), a product split on
 * the mma.sync family runs unsplit (the same bits); one split on gemm_sm90
 * is refused (PGRT_EINVAL: make it with no_split). Asynchronous. A split
 * gemm_sm90 plan counts its slices on counters of its own: its launches
 * must be ordered (one stream), as they share the workspace anyway. */
PGRT_API int pgrt_gemm_plan_launch(const pgrt_gemm_plan *p, pgrt_stream *s, pgrt_devptr c,
                                   pgrt_devptr bias, pgrt_devptr workspace);
/* The workspace a launch wants for its split-K (0: none). */
PGRT_API uint64_t pgrt_gemm_plan_workspace(const pgrt_gemm_plan *p);
/* The kernel, knobs and split the plan runs. */
PGRT_API const pgk_gemm_choice *pgrt_gemm_plan_choice(const pgrt_gemm_plan *p);
PGRT_API void pgrt_gemm_plan_destroy(pgrt_gemm_plan **p);

/* Turn the cuBLAS path on or off for the GEMMs of ctx that follow. Turning
 * it on loads nothing yet and is no error when cuBLAS is missing: see
 * pgrt_cublas_info_get. */
PGRT_API int pgrt_ctx_set_cublas(pgrt_ctx *ctx, bool enabled);

typedef struct pgrt_cublas_info {
    bool enabled;       /* the switch */
    bool available;     /* the library is loaded and the handle made */
    bool in_use;        /* enabled && available: GEMMs go to cuBLAS */
    int version;        /* cublasGetVersion: 130000 for 13.0.0; 0 when not loaded */
    char library[256];  /* the name it was opened by; "" when not loaded */
    char reason[512];   /* why it is not in use ("" when it is) */
    double load_ms;     /* dlopen and handle creation */
    uint64_t cublas_gemms, ptx_gemms; /* GEMMs dispatched so far, by path */
} pgrt_cublas_info;

/* The cuBLAS state of ctx, loading the library first when the switch is on
 * and no load was tried yet (PGRT_ECAPTURE during a capture). 0 whether or
 * not cuBLAS is there. */
PGRT_API int pgrt_cublas_info_get(pgrt_ctx *ctx, pgrt_cublas_info *out);

/* ---------------------------------------------------------------- bf16/f16 GEMM on sm_90a */

/*
 * The three GEMMs of a linear layer's training step, bf16 or f16 in, f32
 * accumulate, on the catalog's gemm_sm90 (wgmma + TMA, persistent,
 * warp-specialized). All matrices row-major; m, n, k are the layer's:
 *
 *   PGK_GEMM_FORWARD     c = Y[m,n]  = a·bᵀ,  a = X[m,k],  b = W[n,k]
 *   PGK_GEMM_BACKWARD_X  c = dX[m,k] = a·b,   a = dY[m,n], b = W[n,k]
 *   PGK_GEMM_BACKWARD_W  c = dW[n,k] = aᵀ·b,  a = dY[m,n], b = X[m,k]
 *
 * a and b hold bf16 (or both f16); c f32, or the inputs' type. bias (may
 * be NULL) is f32 with one value a column of c, added to every row.
 * accumulate: c += the product (+ bias) instead of c =. lda, ldb, ldc are
 * the elements between rows of each buffer (0: the row length); lda and
 * ldb must be multiples of 8 (TMA reads rows at 16-byte pitches), the
 * bases 16-byte aligned. bn picks the block tile's columns (64, 128, 192,
 * 256; 0: the one that best fills the device's SMs). Any m, n, k from 1 to
 * 2^24: ragged edges read zeros and are not written.
 *
 * The device must load sm_90a (compute capability 9.0): PGRT_ETARGET
 * elsewhere. Asynchronous on s; captures into a graph once the kernel is
 * loaded (the tensor maps are encoded on the host at each call and passed
 * by value; a prepared GEMM, pgrt_gemm_plan, encodes them once). Results are bitwise reproducible run to run. Errors:
 * PGRT_EINVAL (NULLs, types, contexts, an output overlapping an input),
 * PGRT_ERANGE (sizes, pitches), the encode's and the launch's codes.
 */
typedef struct pgrt_gemm90 {
    pgk_gemm_layout layout;
    const pgrt_buf *a, *b;
    pgrt_buf *c;
    const pgrt_buf *bias; /* NULL: none */
    uint32_t m, n, k;
    uint32_t lda, ldb, ldc; /* 0: dense */
    bool accumulate;
    uint32_t bn; /* 0: chosen */
} pgrt_gemm90;

PGRT_API int pgrt_gemm_sm90(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_gemm90 *g);
/* The bn pgrt_gemm_sm90 picks for an output of rows x cols on sm_count
 * SMs: the least ceil(tiles / sm_count) times the time of a 128 x bn tile
 * (measured on an H200: bn, except 90 for bn = 64); ties go to the wider.
 * Pure. */
PGRT_API uint32_t pgrt_gemm_sm90_bn(uint32_t rows, uint32_t cols, uint32_t sm_count);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_GEMM_H */
