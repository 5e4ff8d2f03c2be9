/* SPDX-License-Identifier: MIT */
/* Private to kernels/: the descriptors the catalog lists. */
#ifndef PTXGEN_KERNELS_H
#define PTXGEN_KERNELS_H

#include "ptxgen/pgk.h"

#include <stddef.h>

/* The catalog, in --list order: one line a kernel. X(name) stands for the
 * descriptor pgk_desc_<name>, defined in the kernel's file. */
#define PGK_CATALOG(X)                                                                     \
    X(squared_sum_reduce)                                                                  \
    X(clip_scale_reduce)                                                                   \
    X(gradient_clip_gpu_scale)                                                             \
    X(gradient_clip)                                                                       \
    X(silu_backward)                                                                       \
    X(batched_softmax_backward)                                                            \
    X(batched_rms_norm_backward)                                                           \
    X(rms_norm_gamma_reduce)                                                               \
    X(rms_norm_forward_add_bf16)                                                           \
    X(rms_norm_backward_add_bf16)                                                          \
    X(cast_f32_to_f16)                                                                     \
    X(residual_add)                                                                        \
    X(adamw_step)                                                                          \
    X(adamw_step_dev)                                                                      \
    X(gemm_backward_a)                                                                     \
    X(gemm_backward_a_accumulate)                                                          \
    X(gemm_backward_b)                                                                     \
    X(gemm_f16_backward_a)                                                                 \
    X(rms_norm_forward)                                                                    \
    X(gemm_forward)                                                                        \
    X(gemm_forward_accumulate)                                                             \
    X(silu_forward)                                                                        \
    X(batched_softmax_forward)                                                             \
    X(transpose)                                                                           \
    X(mse_loss)                                                                            \
    X(adamw_hyper_advance)                                                                 \
    X(squared_sum_reduce_multi)                                                            \
    X(gradient_clip_gpu_scale_multi)                                                       \
    X(embedding_gather_f32)                                                                \
    X(embedding_gather_bf16)                                                               \
    X(rope_forward_f32)                                                                    \
    X(rope_forward_bf16)                                                                   \
    X(rope_backward_f32)                                                                   \
    X(rope_backward_bf16)                                                                  \
    X(swiglu_forward_f32)                                                                  \
    X(swiglu_forward_bf16)                                                                 \
    X(swiglu_backward_f32)                                                                 \
    X(swiglu_backward_bf16)                                                                \
    X(swiglu_forward_f32_bf16)                                                             \
    X(swiglu_backward_f32_bf16)                                                            \
    X(bias_add_f32)                                                                        \
    X(bias_add_bf16)                                                                       \
    X(cast_f32_to_bf16)                                                                    \
    X(cast_f32_to_bf16_scaled2)                                                            \
    X(cast_bf16_to_f32)                                                                    \
    X(cross_entropy_fwd_bwd_f32)                                                           \
    X(cross_entropy_fwd_bwd_bf16)                                                          \
    X(attention_forward_f32)                                                               \
    X(attention_forward_bf16)                                                              \
    X(attention_backward_dq_f32)                                                           \
    X(attention_backward_dq_bf16)                                                          \
    X(attention_backward_dkv_f32)                                                          \
    X(attention_backward_dkv_bf16)                                                         \
    X(attention_mma_forward)                                                               \
    X(attention_mma_backward_dq)                                                           \
    X(attention_mma_backward_dkv)                                                          \
    X(attention_forward_docs_f32)                                                          \
    X(attention_backward_dq_docs_f32)                                                      \
    X(attention_backward_dkv_docs_f32)                                                     \
    X(attention_mma_forward_docs)                                                          \
    X(attention_mma_backward_dq_docs)                                                      \
    X(attention_mma_backward_dkv_docs)                                                     \
    X(adamw_multi_norm)                                                                    \
    X(adamw_multi_finalize)                                                                \
    X(adamw_multi_step)                                                                    \
    X(gemm_mma_forward)                                                                    \
    X(gemm_mma_backward_x)                                                                 \
    X(gemm_mma_backward_w)                                                                 \
    X(gemm_mma_reduce)                                                                     \
    X(gemm_lp_simt)                                                                        \
    X(gemm_thin)                                                                           \
    X(gemm_sm90)                                                                           \
    X(lora_up_f32)                                                                         \
    X(lora_proj_f32)                                                                       \
    X(lora_proj_bf16)                                                                      \
    X(lora_grad_f32)                                                                       \
    X(lora_grad_bf16)                                                                      \
    X(gemm_f32_forward)                                                                    \
    X(gemm_f32_backward_x)                                                                 \
    X(gemm_f32_backward_w)                                                                 \
    X(cross_entropy_fwd_bwd_dscale_f32)                                                    \
    X(cross_entropy_fwd_bwd_dscale_bf16)                                                   \
    X(rope_forward_table_f32)                                                              \
    X(rope_backward_table_f32)                                                             \
    X(lr_schedule)                                                                         \
    X(dropout_f32)                                                                         \
    X(dropout_add_f32)                                                                     \
    X(counter_inc_u32)                                                                     \
    X(attention_sm90_forward)                                                              \
    X(attention_sm90_backward_prep)                                                        \
    X(attention_sm90_backward_dq)                                                          \
    X(attention_sm90_backward_dkv)                                                         \
    X(attention_sm90_backward_group)

#define PGK_EXTERN(name) extern const pgk_desc pgk_desc_##name;
PGK_CATALOG(PGK_EXTERN)
#undef PGK_EXTERN

/* A static array and its length, for a descriptor's params and knobs. */
#define PGK_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PGK_PARAMS(a) .params = (a), .nparams = PGK_COUNT(a)
#define PGK_KNOBS(a) .knobs = (a), .nknobs = PGK_COUNT(a)

/* ---- common.c: pieces every kernel file uses ---- */

/* Threads a block of the 1-D and row kernels (their descriptors' .threads). */
#define PGK_THREADS 256u

/* The knob `n` (elements), 1 .. 2^32 - 1, at index PGK_N. */
enum { PGK_N };
extern const pgk_knob pgk_knob_n[1];
/* The knobs of the row kernels: rows, then the row length. */
enum { PGK_ROWS, PGK_WIDTH };

/* `threads` a block, ceil(n/threads) blocks. */
int pgk_launch_1d(uint32_t n, uint32_t threads, pgk_launch *out);
/* "1-D": d->threads a block, ceil(n/d->threads) blocks, n = knobs[PGK_N]. */
int pgk_launch_elementwise(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out);
/* One block of d->threads a row: knobs[PGK_ROWS] rows (the grid),
 * knobs[PGK_WIDTH] the row length; both 1 .. 2^31 - 1. */
int pgk_launch_rows(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out);
/* One warp a row (pgk_warp_row), d->threads / 32 rows a block. */
int pgk_launch_warp_rows(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out);
/* One thread. */
int pgk_launch_single(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out);
/* ceil(a / b) without wrapping. */
static inline uint32_t pgk_ceil_div(uint32_t a, uint32_t b)
{
    return (uint32_t)(((uint64_t)a + b - 1) / b);
}
/* The global thread index (ctaid.x * ntid.x + tid.x); threads with an
 * index >= n jump to `out`. */
pg_reg pgk_guarded_gid(pg_kernel *k, pg_val n, pg_label out);
/* Bind `out`, return from the kernel there, and give the kernel's sticky
 * error: the end of every build that has an exit label. */
int pgk_finish(pg_kernel *k, pg_label out);
/* A block's entry of a device table of buffers (pgk_clip_entry, or a
 * table whose entries begin with one): the multi-tensor kernels take such a
 * table and a grid of all its entries' blocks; first_block of an entry is
 * the sum of the earlier entries' block counts. */
typedef struct pgk_table_entry {
    pg_reg addr;    /* u64 the entry's address, for its other fields */
    pg_reg ptr;     /* u64 the buffer */
    pg_reg n;       /* u32 its elements */
    pg_reg local;   /* u32 this block's index within the buffer's blocks */
    pg_reg nblocks; /* u32 the buffer's block count */
} pgk_table_entry;
/* The entry of block %ctaid.x: the last e whose first block (the u32 at
 * byte first_off of entries stride bytes apart) is <= %ctaid.x, by binary
 * search. All of it is uniform over the block (loads from uniform
 * addresses), so a barrier may follow. */
pgk_table_entry pgk_table_find(pg_kernel *k, pg_reg table, pg_reg nbufs, uint32_t stride,
                               uint32_t first_off);
/* The knobs of a table kernel, total_blocks (the grid) and nbufs, and its
 * launch: d->threads a block, total_blocks blocks. */
enum { PGK_TABLE_BLOCKS, PGK_TABLE_NBUFS };
extern const pgk_knob pgk_knobs_table[2];
int pgk_launch_table(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out);
/* A new f32 register holding 0. */
pg_reg pgk_zero_f32(pg_kernel *k);
/* A new f32 register holding the bf16 value in the 16-bit register h: its
 * bits moved to the top half (exact, and free of cvt.f32.bf16's sm_90). */
pg_reg pgk_bf16_to_f32(pg_kernel *k, pg_reg h);
/* base + i * size (i a u32, widened). */
pg_reg pgk_elem_addr(pg_kernel *k, pg_reg base, pg_val i, uint32_t size);
/* &base[row * width] for f32 rows, computed in 64 bits. */
pg_reg pgk_row_addr(pg_kernel *k, pg_reg base, pg_val row, pg_val width);
/* exp(a) for a <= 0, to ex2.approx's ~2 ulp (the rounding of a*log2(e)
 * is carried by an fma); a below -1000 (and -inf) gives 0, NaN stays NaN. */
pg_reg pgk_exp_nonpos(pg_kernel *k, pg_reg a);
/* A new f32 register loaded from global memory at addr. */
pg_reg pgk_ld_f32(pg_kernel *k, pg_reg addr);
/* The byte offset of f32 element i (a u32), as a u64: i * 4, widened. */
pg_reg pgk_f32_offset(pg_kernel *k, pg_val i);
/* The f32 at base + off (off a u64 byte offset), into a new register. */
pg_reg pgk_ld_f32_at(pg_kernel *k, pg_reg base, pg_reg off);
/* Store the f32 v at base + off. */
void pgk_st_f32_at(pg_kernel *k, pg_reg base, pg_reg off, pg_val v);
/* One warp a row: returns the row (ctaid.x * warps-a-block + warp) and the
 * lane in *lane, and jumps to `out` when row >= rows (a whole warp). */
pg_reg pgk_warp_row(pg_kernel *k, pg_val rows, pg_label out, pg_reg *lane);

/* ---- gemm_sm90.c: its side of pgk_gemm_choose() and pgk_gemm_describe() ---- */

bool pgk_gemm_sm90_describe(const pgk_knobs *kn, pgk_gemm_layout *layout, pg_type *in_type,
                            pg_type *out_type, uint32_t *m, uint32_t *n, uint32_t *k);

/* ---- gemm_f32_tiled.c: its side of pgk_gemm_choose() and pgk_gemm_describe() ---- */

bool pgk_gemm_f32_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                           uint32_t *m, uint32_t *n, uint32_t *k);

#endif /* PTXGEN_KERNELS_H */
