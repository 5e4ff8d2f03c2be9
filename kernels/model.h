/* SPDX-License-Identifier: MIT */
/*
 * Private to kernels/: pieces the model kernels (embedding, RoPE, SwiGLU,
 * bias, casts, cross-entropy, attention) share. Activations are stored as
 * f32 or bf16 (the kernel's name says which: _f32 / _bf16); arithmetic and
 * statistics are f32 either way, and a bf16 result is rounded once, to
 * nearest even, when it is stored.
 */
#ifndef PTXGEN_KERNELS_MODEL_H
#define PTXGEN_KERNELS_MODEL_H

#include "kernels.h"

typedef enum pgk_dtype { PGK_F32, PGK_BF16 } pgk_dtype;

/* Bytes an element: 4 or 2. */
unsigned pgk_dtype_size(pgk_dtype dt);
/* The lowest target of a kernel storing dt: cvt.rn.bf16.f32 needs sm_80. */
pg_target pgk_dtype_min_target(pgk_dtype dt);
/* A new f32 register from the element at addr. bf16 is widened by moving
 * its bits to the top half (exact, and available before sm_90's
 * cvt.f32.bf16). nc: through the read-only path (data no thread of the
 * kernel writes). */
pg_reg pgk_ld_act(pg_kernel *k, pgk_dtype dt, pg_reg addr, bool nc);
/* Store the f32 value v at addr as dt (bf16: round to nearest even). */
void pgk_st_act(pg_kernel *k, pgk_dtype dt, pg_reg addr, pg_reg v);
/* base + (row * width + col) * size, all in 64 bits: row * width may pass
 * 2^32. */
pg_reg pgk_addr2(pg_kernel *k, pg_reg base, pg_val row, pg_val width, pg_val col, unsigned size);
/* A new u64 register: a + b * size (b a u32, widened). */
pg_reg pgk_addr_add(pg_kernel *k, pg_reg a, pg_val b, unsigned size);
/* A new f32 register holding x. */
pg_reg pgk_f32_const(pg_kernel *k, float x);

/* The attention ABI, one definition for the SIMT kernels (attention.c) and
 * the tensor-core ones (attention_mma.c): forward q, k, v, o, lse; dQ adds
 * grad_o, grad_q and delta, dK/dV grad_k and grad_v; each ends with the
 * shape (batch, seq_len, q_heads, kv_heads, head_dim, scale). */
enum { PGK_ATT_FWD_NPARAMS = 11, PGK_ATT_GRAD_NPARAMS = 14 };
extern const pgk_param pgk_attention_fwd_params[PGK_ATT_FWD_NPARAMS];
extern const pgk_param pgk_attention_dq_params[PGK_ATT_GRAD_NPARAMS];
extern const pgk_param pgk_attention_dkv_params[PGK_ATT_GRAD_NPARAMS];
/* The document-bounded kernels (_docs) take the same params and one more,
 * last: doc_start, an s32 [B, S] array, doc_start[b S + i] the position in
 * row b where the document holding position i begins (0 <= it <= i,
 * non-decreasing along a row). Key j is visible to query i of the same row
 * iff doc_start[i] <= j <= i. */
enum { PGK_ATT_DOC_START_FWD = PGK_ATT_FWD_NPARAMS, PGK_ATT_DOC_START_GRAD = PGK_ATT_GRAD_NPARAMS };
extern const pgk_param pgk_attention_fwd_docs_params[PGK_ATT_FWD_NPARAMS + 1];
extern const pgk_param pgk_attention_dq_docs_params[PGK_ATT_GRAD_NPARAMS + 1];
extern const pgk_param pgk_attention_dkv_docs_params[PGK_ATT_GRAD_NPARAMS + 1];

/* The first t in [lo, hi) whose document starts after `key`:
 * doc_start[t << shift] > key, for the row whose doc_start entries begin at
 * `row` (u64); hi when there is none. A binary search (doc_start is
 * non-decreasing, so the test is false and then true along t), every
 * thread alike: uniform loads and branches. lo <= hi and hi << shift must
 * stay below 2^32. With shift 0 and key j it gives the end of j's document
 * in [j + 1, hi); with shift 5 the first 32-row tile none of whose queries
 * sees key `key` or one before it. */
pg_reg pgk_doc_search(pg_kernel *k, pg_reg row, pg_val lo, pg_val hi, unsigned shift, pg_val key);

/* A loop i = start, start + step, ... while i < n (u32; n + step must not
 * pass 2^32, which every knob range here keeps):
 *     pgk_loop L; pg_reg i = pgk_loop_begin(k, &L, start, n, step);
 *     ... body ...
 *     pgk_loop_end(k, &L);
 */
typedef struct pgk_loop {
    pg_reg i, p;
    pg_val n, step;
    pg_label top, done;
} pgk_loop;
pg_reg pgk_loop_begin(pg_kernel *k, pgk_loop *l, pg_val start, pg_val n, pg_val step);
void pgk_loop_end(pg_kernel *k, pgk_loop *l);

/* [lo, hi) of slice ctaid.y of n items cut into `split` slices of
 * ceil(ceil(n / splits) / align) * align (the last ones short or empty):
 * u32 registers. The LoRA kernels' fixed slices of a sum. */
void pgk_split_range(pg_kernel *k, pg_reg n, pg_reg splits, uint32_t align, pg_reg *lo,
                     pg_reg *hi);

/* sigmoid(x) and x * sigmoid(x) without overflow for any x: with
 * z = exp(-|x|), 1/(1+z) and z/(1+z) are s and 1 - s (x >= 0) or the other
 * way round. */
void pgk_sigmoid(pg_kernel *k, pg_reg x, pg_reg *s, pg_reg *one_minus_s);

#endif /* PTXGEN_KERNELS_MODEL_H */
