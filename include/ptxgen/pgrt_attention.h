/* SPDX-License-Identifier: MIT */
/*
 * pgrt attention: causal grouped-query attention on wgmma + TMA for
 * sm_90a. The conventions of pgrt.h hold here.
 */
#ifndef PTXGEN_PGRT_ATTENTION_H
#define PTXGEN_PGRT_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgrt.h"
#include "pgrt_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- attention on sm_90a */

/*
 * Causal grouped-query attention, forward, on the catalog's
 * attention_sm90_forward (FlashAttention-3 on wgmma + TMA, sm_90a): O and
 * the row logsumexp LSE, as attention_mma_forward defines them, from bf16
 * Q, K and V. All device addresses (pgrt_buf_ptr of a buffer, or a place
 * in an arena):
 *
 *   q       bf16 [batch, seq_len, q_heads, head_dim], 16-byte aligned
 *   k, v    bf16 [batch, seq_len, kv_heads, head_dim], 16-byte aligned
 *   o       f32  [batch, seq_len, q_heads, head_dim]: what
 *           attention_mma_forward writes and the backward kernels read
 *   o_bf16  bf16 in o's layout, or 0: the same O rounded to bf16 (nearest
 *           even), the o projection's operand, written by the same launch
 *   lse     f32  [batch, seq_len, q_heads]
 *
 * Query head h reads key/value head h / (q_heads / kv_heads); row s sees
 * keys 0..s; scale multiplies the scores (1/sqrt(head_dim) for the usual
 * attention). Any seq_len from 1 to 2^22, batch 1..65535, q_heads
 * 1..65535 a multiple of kv_heads, head_dim a multiple of 8 up to 128
 * (64 and 128 are the tile widths; TMA reads 16-byte rows). The three
 * tensor maps are encoded on the host at each call and passed by value,
 * so a stream capture records the launch once the kernel is loaded (a
 * pre-warm of attention_sm90_forward with its head_dim knob, which picks
 * the module); the outputs are the same bits on every run.
 *
 * Errors: PGRT_ETARGET on a device that is not compute capability 9.0
 * (use attention_mma_forward there), PGRT_EINVAL (NULLs, a 0 or unaligned
 * address, heads), PGRT_ERANGE (sizes, head_dim), the encodes' and the
 * launch's codes. Asynchronous on s. Thread-safe as launches are.
 */
typedef struct pgrt_attention90 {
    pgrt_devptr q, k, v;
    pgrt_devptr o, o_bf16, lse;
    uint32_t batch, seq_len, q_heads, kv_heads, head_dim;
    float scale;
} pgrt_attention90;

PGRT_API int pgrt_attention_sm90_forward(pgrt_ctx *ctx, pgrt_stream *s,
                                         const pgrt_attention90 *a);
/* Whether pgrt_attention_sm90_forward takes these heads on ctx's device:
 * 0, or its error for them (PGRT_ETARGET, PGRT_EINVAL, PGRT_ERANGE) with
 * the message, so that a caller can fall back to attention_mma_forward
 * before it allocates anything. Thread-safe. */
PGRT_API int pgrt_attention_sm90_check(pgrt_ctx *ctx, uint32_t q_heads, uint32_t kv_heads,
                                       uint32_t head_dim);

/*
 * The backward of pgrt_attention_sm90_forward: dQ, dK and dV from dO, on
 * the catalog's attention_sm90_backward_prep (delta = rowsum(dO O), dO
 * in bf16, the rows' statistics), _dq (a block a 128-row query tile),
 * _dkv (a block a 128-key tile of one query head) and, with GQA, _group
 * (each key/value head's dK and dV, its query heads' summed in order),
 * launched in that order on s. Every sum has one writer
 * and an order fixed by the shape (no atomics): the same bits on every
 * run. Device addresses:
 *
 *   q, k, v      bf16, as the forward took them (16-byte aligned)
 *   o, lse       f32, what the forward wrote (o f32 [B, S, Hq, D])
 *   grad_o       f32 [B, S, Hq, D]
 *   grad_o_bf16  scratch, bf16 [B, S, Hq, D] (16-byte aligned): dO rounded
 *   stats        scratch, pgrt_attention_sm90_stats_bytes (16-byte aligned)
 *   grad_q       f32 [B, S, Hq, D]; grad_k, grad_v f32 [B, S, Hkv, D]
 *   grad_k_heads, grad_v_heads
 *                scratch, f32 [B, S, Hq, D] each, when q_heads > kv_heads
 *                (each query head's share); else unused (0 is taken)
 *
 * The shapes and errors are the forward's (PGRT_ETARGET off sm_90a).
 */
typedef struct pgrt_attention90_grad {
    pgrt_devptr q, k, v;
    pgrt_devptr o, grad_o, lse;
    pgrt_devptr grad_o_bf16, stats;
    pgrt_devptr grad_q, grad_k, grad_v;
    pgrt_devptr grad_k_heads, grad_v_heads;
    uint32_t batch, seq_len, q_heads, kv_heads, head_dim;
    float scale;
} pgrt_attention90_grad;

PGRT_API int pgrt_attention_sm90_backward(pgrt_ctx *ctx, pgrt_stream *s,
                                          const pgrt_attention90_grad *g);
/* The bytes of the backward's stats scratch: batch x q_heads x seq_len
 * rounded up to 128, 8 bytes each. */
PGRT_API uint64_t pgrt_attention_sm90_stats_bytes(uint32_t batch, uint32_t seq_len,
                                                  uint32_t q_heads);
/* The tensor map the sm_90a attention kernels read a bf16 [batch,
 * seq_len, heads, head_dim] tensor at base through: boxes of box_rows rows
 * (128: the forward's Q, K and V; 64: the backward's Q, K, V and dO), a
 * 128-byte swizzle; for a caller that launches the kernels itself (a
 * model capturing its step). Host work only. PGRT_EINVAL, PGRT_ERANGE. */
/* The map of the backward's stats scratch, as _dkv reads it: f32 {2 Sp,
 * q_heads, batch}, boxes of 128 (a 64-row block's pairs). */
PGRT_API int pgrt_attention_sm90_stats_map(pgrt_ctx *ctx, pgrt_tensor_map *map, pgrt_devptr stats,
                                           uint32_t batch, uint32_t seq_len, uint32_t q_heads);
PGRT_API int pgrt_attention_sm90_map(pgrt_ctx *ctx, pgrt_tensor_map *map, pgrt_devptr base,
                                     uint32_t batch, uint32_t seq_len, uint32_t heads,
                                     uint32_t head_dim, uint32_t box_rows);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_ATTENTION_H */
