/* SPDX-License-Identifier: MIT */
/*
 * ptxgen kernels: one descriptor per kernel (name, params, knobs, build,
 * launch) and the catalog of them.
 *
 * Knobs are the problem sizes a launch is computed from (n, m, k, ...) and,
 * for a few kernels, build choices (a variant). Params are what the kernel
 * takes at run time. Unless a knob says it is baked, the PTX does not
 * depend on it, so one module serves every shape.
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

#define PGK_MAX_KNOBS 12
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
    uint32_t def, min, max; /* inclusive range: every value in it builds and launches */
    const char *help;
    /* The value changes the PTX (a build choice such as a tile variant):
     * part of the module cache key (pgk_cache_key). Otherwise the knob
     * only sizes the launch. */
    bool baked;
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
    size_t nparams;      /* at most PGK_MAX_PARAMS */
    const pgk_knob *knobs;
    size_t nknobs;       /* at most PGK_MAX_KNOBS */
    pg_target min_target; /* lowest target it supports */
    /* Threads a block for a kernel of fixed 1-D blocks: pgk_emit() gives
     * the PTX that .maxntid, and the launch helpers launch that many. 0
     * when build and launch set the block shape themselves (2-D blocks, or
     * a size that depends on a baked knob). */
    uint32_t threads;
    /* Build the body. The params of the descriptor are already declared, in
     * order, as p[0..nparams). knobs[i] is the value of d->knobs[i], in
     * range (kernels name the indices with an enum). Return 0 or a pg
     * error (the kernel's sticky error is what counts). */
    int (*build)(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs);
    /* Launch configuration for the knobs; PG_ERANGE if they overflow it. */
    int (*launch)(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out);
    /* Optional: set the baked knobs to what the kernel prefers for the
     * sizes in knobs (the GEMMs' tile variant for the output's shape). */
    void (*pick)(const pgk_desc *d, uint32_t *knobs);
    /* Which member of a family this is, for build, launch and pick to read
     * (the GEMMs' layout, gemm_forward's form, the gather's element type):
     * one function serves the family, each descriptor names its member. 0
     * where the kernel has no family. */
    unsigned variant;
    /* The runtime compiles the PTX as a whole program (cuModuleLoadDataEx),
     * not through the driver's linker, which compiles a relocatable
     * object: there ptxas holds every thread to the registers the kernel
     * has at entry, and a warp-specialized kernel whose consumers raise
     * theirs with setmaxnreg spills (the sm_90a attention kernels). Such a
     * module has no cubin for the disk cache. */
    bool whole_program;
};

/* The catalog, in a fixed order (the --list order). */
PG_API size_t pgk_count(void);
PG_API const pgk_desc *pgk_at(size_t i);
/* NULL for an unknown name. */
PG_API const pgk_desc *pgk_find(const char *name);

/* Whether d is a descriptor the library can launch: a name, a launch
 * function (build may be NULL for a kernel whose PTX is made elsewhere and
 * loaded with pgrt_module_load; emitting one is refused), at most PGK_MAX_PARAMS params and
 * PGK_MAX_KNOBS knobs, each param and knob named, each knob's default
 * inside its range. On error returns PG_EINVAL and writes a one-line
 * message naming the problem. pgk_emit(), pgk_launch_for() and the
 * runtime's module load check all of it first; the knob functions below
 * check the name and the knob table (they use nothing else), so a custom
 * descriptor is refused, never trusted. */
PG_API int pgk_desc_check(const pgk_desc *d, char *err, size_t errlen);

/* Whether the kernel supports target t (false for an invalid d). */
PG_API bool pgk_supports(const pgk_desc *d, pg_target t);

/* Knob values, in the descriptor's order (PGK_MAX_KNOBS slots). */
typedef struct pgk_knobs {
    uint32_t v[PGK_MAX_KNOBS];
} pgk_knobs;
/* out = the defaults (unused slots 0). PG_EINVAL (out zeroed) for a
 * descriptor pgk_desc_check() refuses. */
PG_API int pgk_knobs_default(const pgk_desc *d, pgk_knobs *out);
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
/* Set kn's baked knobs to the kernel's choice for the sizes in kn (its
 * pick hook); kn is unchanged for a kernel without one. Pure. */
PG_API void pgk_pick(const pgk_desc *d, pgk_knobs *kn);

/* The module cache key of d built for t with kn: "NAME@TARGET" followed by
 * ",KNOB=VALUE" for each baked knob, in the descriptor's order. Two
 * (d, t, kn) with the same key emit the same PTX. Writes at most len bytes
 * (NUL included); returns the key's length, or PG_EINVAL for a refused
 * descriptor or a key that does not fit (buf then holds ""). */
PG_API int pgk_cache_key(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char *buf,
                         size_t len);

/* An emitted kernel: text malloc'd through the pg allocator (free it with
 * pgk_free()), its length, and the PTX ISA its .version line declares
 * (major * 10 + minor: an instruction may raise it above the target's
 * minimum). */
typedef struct pgk_ptx {
    char *text;
    size_t len;
    unsigned isa;
} pgk_ptx;

/* Build and emit the kernel for target t (kn NULL: the defaults). On error
 * *out is zeroed and a one-line message is written to err: PG_EINVAL for a
 * bad argument or descriptor, PG_ETARGET for a target the kernel does not
 * support, PG_ERANGE for a knob value outside its range. */
PG_API int pgk_emit_ptx(const pgk_desc *d, pg_target t, const pgk_knobs *kn, pgk_ptx *out,
                        char *err, size_t errlen);
/* The same, text only: *ptx (freed with pgk_free()) and *len (if not
 * NULL). */
PG_API int pgk_emit(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char **ptx, size_t *len,
                    char *err, size_t errlen);
PG_API void pgk_free(void *p);

/* The launch configuration for the knobs. PG_ERANGE for a knob value outside
 * its range or knobs whose launch the GPU cannot run. */
PG_API int pgk_launch_for(const pgk_desc *d, const pgk_knobs *kn, pgk_launch *out, char *err,
                          size_t errlen);

/* ---- layouts shared by kernels and their host callers ---- */

/* The AdamW hyper-parameter buffer in device memory, PGK_HYPER_COUNT f32:
 * adamw_step_dev reads the first PGK_HYPER_STEP_ARGS; adamw_hyper_advance
 * advances the step (the running powers beta^t, t and the bias
 * corrections 1 / (1 - beta^t)). */
enum pgk_hyper {
    PGK_HYPER_LR,
    PGK_HYPER_BETA1,
    PGK_HYPER_BETA2,
    PGK_HYPER_EPS,
    PGK_HYPER_WD,
    PGK_HYPER_BC1,
    PGK_HYPER_BC2,
    PGK_HYPER_BETA1_POW,
    PGK_HYPER_BETA2_POW,
    PGK_HYPER_STEP,
    PGK_HYPER_COUNT,
    PGK_HYPER_STEP_ARGS = PGK_HYPER_BETA1_POW, /* what adamw_step_dev reads */
};

/* One entry of the device table the multi-tensor clip kernels
 * (squared_sum_reduce_multi, gradient_clip_gpu_scale_multi) read:
 * first_block is the sum of the earlier entries' block counts. */
typedef struct pgk_clip_entry {
    uint64_t ptr; /* the buffer's device address */
    uint32_t n;   /* its elements */
    uint32_t first_block;
} pgk_clip_entry;
#ifndef __cplusplus
_Static_assert(sizeof(pgk_clip_entry) == 16, "the kernels read 16-byte table entries");
#endif

/* The device table of the multi-tensor AdamW (adamw_multi_norm,
 * adamw_multi_step): a pgk_clip_entry for the gradient, whose first_block
 * counts the norm pass's blocks (pgk_adamw_norm_blocks of each n), then the tensor's other buffers and
 * the update pass's first block (pgk_adamw_multi_blocks of each n). Both
 * passes walk one table; entries of a norm group (a layer, or all) are
 * consecutive, so that a group's partial sums are. */
typedef struct pgk_optim_entry {
    pgk_clip_entry grad;  /* f32 gradient, read only */
    uint64_t param, m, v; /* f32, n elements each, updated in place */
    uint64_t copy;        /* a 16-bit copy of param written with it, or 0 */
    uint32_t first_block; /* of the update pass */
    uint32_t group;       /* the norm group whose coefficient applies */
    uint32_t copy_type;   /* enum pgk_copy_type */
    uint32_t reserved;    /* 0 */
} pgk_optim_entry;
#ifndef __cplusplus
_Static_assert(sizeof(pgk_optim_entry) == 64, "the kernels read 64-byte table entries");
#endif

enum pgk_copy_type {
    PGK_COPY_NONE,
    PGK_COPY_BF16, /* round to nearest even; NaN stays NaN */
    PGK_COPY_F16,  /* cvt.rn.f16.f32 */
};

/* The multi-tensor optimizer's state in device memory, 32-bit words:
 * adamw_multi_finalize writes it, adamw_multi_step reads it, the host reads
 * it after a step. Group g's f32 coefficient and norm follow the header at
 * PGK_OPTIM_GROUPS + 2g and + 2g + 1. */
enum pgk_optim_state {
    PGK_OPTIM_SKIP,    /* u32: 1 when the last step was skipped (a non-finite norm) */
    PGK_OPTIM_SKIPPED, /* u32: steps skipped so far */
    PGK_OPTIM_GROUPS,
};

/* adamw_multi_step's blocks for a tensor of n elements: ceil(n / 4096). */
PG_API uint32_t pgk_adamw_multi_blocks(uint32_t n);
/* adamw_multi_norm's blocks for a tensor of n elements: min(ceil(n / 4096),
 * 256), at least 1 (squared_sum_reduce's body, four times its elements a
 * block: one float4 load of each of four chunks a thread fills a block). */
PG_API uint32_t pgk_adamw_norm_blocks(uint32_t n);

/* squared_sum_reduce's grid size for n elements: min(ceil(n/1024), 256), at
 * least 1. Part of the clip pipeline's API: partial buffers are sized by it. */
PG_API uint32_t pgk_squared_sum_num_blocks(uint32_t n);

/* The learning-rate schedule lr_schedule reads: PGK_SCHED_COUNT f32 in
 * device memory, every field a float (the step counts too; exact below
 * 2^24). */
enum pgk_sched {
    PGK_SCHED_BASE_LR,
    PGK_SCHED_WARMUP,    /* warm-up steps */
    PGK_SCHED_TOTAL,     /* total steps, warm-up included */
    PGK_SCHED_MIN_RATIO, /* the floor after warm-up, as a fraction of base_lr, in [0, 1] */
    PGK_SCHED_KIND,      /* enum pgk_sched_kind, as a float */
    PGK_SCHED_COUNT,
};

/* Hugging Face transformers' schedules (get_constant_schedule_with_warmup,
 * get_linear_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup):
 * the value of PGK_SCHED_KIND. Any other value is constant. */
enum pgk_sched_kind {
    PGK_SCHED_CONSTANT,
    PGK_SCHED_LINEAR,
    PGK_SCHED_COSINE,
};

/* The learning rate of optimizer step s (0-based: the steps completed
 * before it) in double, the reference lr_schedule is held to: with W, T,
 * m the warm-up, the total and the floor, base * s / W while s < W, else
 * base * (m + (1 - m) g) with d = max(1, T - W), p = (s - W) / d and q =
 * (T - s) / d clamped to [0, 1], g = 1 (constant), q (linear, which is
 * 1 - p) or 0.5 (1 + cos(pi p)) (cosine, evaluated as cos^2(pi p / 2) or
 * sin^2(pi q / 2) so that the end keeps its digits). Past T the floor
 * holds (Hugging Face's cosine would rise again). Pure, thread-safe. */
PG_API double pgk_lr_schedule_ref(const float sched[PGK_SCHED_COUNT], double s);
/* What lr_schedule writes for step s, computed on the host by the kernel's
 * own f32 operations (and f64 polynomial) in the kernel's order: the same
 * bits, for a trainer to log the rate it never reads back. Within 4.2e-7
 * of pgk_lr_schedule_ref, relatively (lr_schedule's header comment, in
 * kernels/schedule.c). Pure, thread-safe. */
PG_API float pgk_lr_schedule(const float sched[PGK_SCHED_COUNT], float s);

/* The inverse frequencies rope_forward_f32 computes on the device for
 * theta and an even head_dim D, bit for bit: out[i] = 1 / f32(theta ^
 * (f32(2i) / f32(D))) for i < D/2, the power evaluated in f64 (by the
 * kernel's operations, in its order) and rounded once, the quotient in
 * f32. The table of rope_forward_table_f32 that reproduces
 * rope_forward_f32; a scaled RoPE (llama3) starts from it. out holds D/2
 * floats. PG_EINVAL (out untouched) for a NULL out, an odd or zero D, or
 * a theta that is not a positive normal finite float. Thread-safe. */
PG_API int pgk_rope_inv_freq(float theta, uint32_t head_dim, float *out);


/* ---- GEMM: the layouts of a linear layer and the choice per shape ---- */

/* The three products of a linear layer Y = X·Wᵀ (X[M,K], W[N,K], Y[M,N],
 * all row-major):
 *   forward      Y[M,N]  = X[M,K] · W[N,K]ᵀ   (+ bias[N])
 *   backward_x   dX[M,K] = dY[M,N] · W[N,K]
 *   backward_w   dW[N,K] = dY[M,N]ᵀ · X[M,K]
 * (M, N, K) always name the forward's sizes. */
typedef enum pgk_gemm_layout {
    PGK_GEMM_FORWARD,
    PGK_GEMM_BACKWARD_X,
    PGK_GEMM_BACKWARD_W,
    PGK_GEMM_LAYOUTS
} pgk_gemm_layout;

/* The block tiles of the mma.sync kernels (their `tile` knob): rows (P) x
 * columns (Q) of the output, warps (and the k-tile where it is not 32). */
enum {
    PGK_GEMM_TILE_128x128_W4,
    PGK_GEMM_TILE_128x128_W8,
    PGK_GEMM_TILE_128x256_W8,
    PGK_GEMM_TILE_256x128_W8,
    PGK_GEMM_TILE_128x64_W4,
    PGK_GEMM_TILE_64x128_W4,
    PGK_GEMM_TILE_64x64_W4,
    PGK_GEMM_TILE_128x256_W8_K64, /* k-tiles of 64 (the others: 32) */
    PGK_GEMM_TILE_256x128_W8_K64,
    PGK_GEMM_TILE_128x128_W4_K64,
    /* fragments double-buffered across k-steps (ldmatrix of the next
     * k-step while the current one multiplies) */
    PGK_GEMM_TILE_128x128_W4_K64_DB,
    PGK_GEMM_TILE_64x128_W4_K64_DB,
    PGK_GEMM_TILE_128x64_W4_K64_DB,
    PGK_GEMM_TILE_128x128_W4_DB,
    PGK_GEMM_TILES
};
/* A tile's rows and columns; 0 for an unknown tile. */
PG_API uint32_t pgk_gemm_tile_rows(unsigned tile);
PG_API uint32_t pgk_gemm_tile_cols(unsigned tile);
/* The same for the tiles of the fp32 family (gemm_f32_<layout>'s tile knob). */
PG_API uint32_t pgk_gemm_f32_tile_rows(unsigned tile);
PG_API uint32_t pgk_gemm_f32_tile_cols(unsigned tile);

/* What to run for one GEMM. */
typedef struct pgk_gemm_choice {
    const pgk_desc *desc;   /* the GEMM kernel */
    pgk_knobs knobs;        /* its knobs, sizes, types, tile and split set */
    uint32_t tile;          /* PGK_GEMM_TILE_* (0 for kernels without tiles) */
    uint32_t split;         /* split-K slices; 1: none */
    /* split > 1: gemm_mma_reduce and its knobs, which sum split f32
     * partials of the output from a workspace of workspace_bytes. */
    const pgk_desc *reduce;
    pgk_knobs reduce_knobs;
    uint64_t workspace_bytes;
    /* The kernel's knobs m, n, k in terms of (M, N, K): the f32 kernels
     * take the layer's sizes as (m, n, k) = (M, K, N). */
    uint32_t m, n, k;
} pgk_gemm_choice;

/* Choose the kernel, tile and split for one GEMM of the layout: in_type
 * PG_F16 or PG_BF16 with out_type PG_F32, PG_F16 or PG_BF16, or PG_F32 for
 * both (the f32 kernels: gemm_backward_a, gemm_forward, gemm_backward_b).
 * The 16-bit inputs go, on PG_SM_90A (a compute capability 9.0 device's
 * arch target), to gemm_sm90 (wgmma + TMA, 1.5-2x the mma.sync family on
 * an H200) when none of m, n, k is below PGK_GEMM_SM90_MIN_DIM, n and k
 * are multiples of 8 (TMA's 16-byte row pitch) and out_type is f32 or the
 * input type: then tile is 0, split 1, the knob bn the tile width
 * (pgk_gemm_sm90_bn), the knob epilogue 0 (the caller sets accumulate and
 * bias) and (m, n, k) the kernel's (P, Q, R). Everything else on sm_80 and
 * up (PG_SM_90 included: what a caller that wants no tensor maps passes)
 * gets the mma.sync family, split-K for thin shapes; below sm_80
 * gemm_lp_simt. A side of at most 64 (a LoRA rank, with at most 2^28
 * multiply-adds, 2^30 for f32) goes to gemm_thin (one launch, no
 * workspace, tile 0 and split 1, the knobs form and j set) where that was
 * measured to win: f32 inputs, 16-bit inputs whose reduction is the thin
 * side, and every thin shape below sm_80. sm_count 0 means a typical count
 * for the target. The
 * mma.sync tiles and splits come from a cost model whose constants were
 * fitted to measurements (gemm_mma.c). Pure and thread-safe. PG_EINVAL for a bad argument, PG_ERANGE for sizes
 * outside [1, 2^21] (below sm_80, m and n at most 1048560). */
PG_API int pgk_gemm_choose(pgk_gemm_layout layout, pg_type in_type, pg_type out_type,
                           uint32_t m, uint32_t n, uint32_t k, pg_target target,
                           unsigned sm_count, pgk_gemm_choice *out);

/* The warp-tiled fp32 family (gemm_f32_forward, _backward_x, _backward_w:
 * every layout, accumulate and bias, split-K) for the layer sizes m, n, k
 * on target with sm_count SMs (0: 132), whatever the shape: what
 * pgk_gemm_choose() returns for f32 when no side is below 64, and what
 * pgrt_gemm runs for a thinner f32 shape that asks for a bias, or for
 * accumulate outside the forward layout. out->m, n, k are m, n, k; split >
 * 1 only on sm_80 and up. Pure and thread-safe. PG_EINVAL for a bad
 * layout, PG_ERANGE for sizes outside [1, 2^21]. */
PG_API int pgk_gemm_f32_choose(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                               pg_target target, unsigned sm_count, pgk_gemm_choice *out);

/* The seed's f32 kernels for one product of a linear layer (m, n, k the
 * layer's, as pgk_gemm_choose takes them): gemm_backward_a for the
 * forward, gemm_forward for dX, gemm_backward_b for dW, their
 * _accumulate forms with accumulate (none for dW: PG_EINVAL). 16 x 16
 * tiles, one chain of fma per output element in order: the exact f32
 * reference path. out->m, n, k are the kernel's (M, K, N). Pure. */
PG_API int pgk_gemm_seed_choice(pgk_gemm_layout layout, bool accumulate, uint32_t m, uint32_t n,
                                uint32_t k, pgk_gemm_choice *out);

/* gemm_sm90 stays off shapes with a side below this: a LoRA adapter's rank
 * side (8 to 64) leaves most SMs idle on an unsplit 128-row tile, where the
 * mma.sync family splits the reduction. */
#define PGK_GEMM_SM90_MIN_DIM 128u
/* gemm_sm90's tile width for an output of rows x cols on sm_count SMs:
 * the least ceil(tiles / sm_count) times the time of a 128 x bn tile
 * (measured on an H200: bn, except 90 for bn = 64); ties go to the wider.
 * Pure. */
PG_API uint32_t pgk_gemm_sm90_bn(uint32_t rows, uint32_t cols, uint32_t sm_count);

/* gemm_sm90 for C[P,Q] (+)= A·B over R in the layout (the kernel's P, Q,
 * R: forward (M, N, K), dX (M, K, N), dW (N, K, M)) on sms SMs, whatever
 * the shape: knobs (epilogue 0: the caller's accumulate and bias), bn by
 * pgk_gemm_sm90_bn, no split; out->m, n, k are P, Q, R. What
 * pgk_gemm_choose() returns for the large 16-bit shapes on PG_SM_90A, and
 * what a LoRA product asks for by name of family. A grid of at most a
 * quarter of the SMs over at least 32 k-blocks is split along R (knob
 * split, out->split, out->workspace_bytes;
 * out->reduce stays NULL: the kernel sums the slices itself). Pure. */
PG_API int pgk_gemm_sm90_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type,
                                uint32_t P, uint32_t Q, uint32_t R, unsigned sms,
                                pgk_gemm_choice *out);

/* gemm_sm90's split-K workspace for an output of P x Q in tiles of 128 x
 * bn cut into `split` slices: f32 partials, tiles x split x 128 x bn x 4
 * bytes (0 for split 1). Its counters are one u32 a tile, zero at launch
 * (the kernel leaves them zero). Pure. */
PG_API uint64_t pgk_gemm_sm90_workspace(uint32_t P, uint32_t Q, uint32_t bn, uint32_t split);

/* Whether d is one of the GEMMs pgk_gemm_choose() can return, and then
 * its layout and types from its knobs (for --info). */
PG_API bool pgk_gemm_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                              pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                              uint32_t *k);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGK_H */
