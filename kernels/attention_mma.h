/* SPDX-License-Identifier: MIT */
/*
 * The tile helpers the tensor-core attention kernels share
 * (attention_mma.c: the scheme, the helpers, the forward kernel and its
 * descriptor; attention_mma_bwd.c: dQ and dK/dV and their descriptors).
 */
#ifndef PTXGEN_KERNELS_ATTENTION_MMA_H
#define PTXGEN_KERNELS_ATTENTION_MMA_H

#include "gemm_tile.h"
#include "model.h"

#define FA_ROWS 64u     /* query rows a forward / dq block */
#define FA_KEYS 64u     /* keys a forward / dq tile */
#define FA_WARPS 4u     /* warps a forward / dq block */
#define DKV_WARPS 2u    /* warps a dkv group: 16 keys each */
#define DKV_GROUPS 4u   /* dkv groups a block */
#define DKV_KEYS (16u * DKV_WARPS) /* keys a dkv block */
#define DKV_QROWS 32u   /* query rows a dkv step (a multiple of DKV_KEYS) */
#define FA_MAX_D 128u
#define FA_MAX_KS (FA_MAX_D / 16u)
#define FA_MAX_NT (FA_MAX_D / 8u)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

typedef struct fa {
    unsigned dp, rb;              /* padded head dim; bytes a tile row */
    pg_reg batch, seq, hq, hkv, dim, scale, group;
    pg_reg c;                     /* scale log2 e */
    pg_reg tid, warp, lane, g, t4; /* g = lane / 4, t4 = lane % 4 */
    /* ldmatrix lane offsets inside a tile, k-step (or column pair) s:
     * offa: row lane%8 + 8 bit3, chunk 2s + bit4: A fragments, and B
     *       fragments through .trans (memory rows along k);
     * offb: row lane%8 + 8 bit4, chunk 2s + bit3: B fragments of an
     *       r-major operand (two 8-column tiles). */
    pg_reg offa[FA_MAX_KS], offb[FA_MAX_KS];
    pg_reg vec; /* uniform: 16-byte loads allowed (D % 4 == 0, bases aligned) */
} fa;

void pgk_fa_init(pg_kernel *k, fa *f, const pg_param *p, unsigned first, unsigned dp,
                 pg_label out);
void pgk_fa_vec(pg_kernel *k, fa *f, const pg_reg *bases, unsigned n);
pg_reg pgk_fa_head_row(pg_kernel *k, const fa *f, pg_reg base, pg_reg b, pg_val t, pg_reg heads,
                       pg_reg h);
pg_reg pgk_fa_token_stride(pg_kernel *k, const fa *f, pg_reg heads);
void pgk_fa_stage(pg_kernel *k, const fa *f, pg_reg dst, pg_reg src, pg_reg stride, pg_val nvalid,
                  unsigned rows, unsigned nthr, pg_reg tix);
void pgk_fa_zero_acc(pg_kernel *k, pg_reg (*acc)[4], unsigned n);
void pgk_fa_mma_abt(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_reg a, pg_reg b,
                    unsigned npairs);
void pgk_fa_mma_pb(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_reg (*p)[4], unsigned ksteps,
                   pg_reg b);
/* The quad (the 4 lanes sharing an accumulator row) reduction of v: a
 * butterfly over lane offsets 1 then 2, every lane the same bits. */
pg_reg pgk_fa_quad_reduce(pg_kernel *k, pg_reduce_op op, pg_reg v);
void pgk_fa_causal_mask(pg_kernel *k, const fa *f, pg_reg (*s)[4], unsigned ntiles, pg_val row0,
                        pg_val col0, bool transposed);
/* Masks (to -inf) the elements of the accumulator tiles s[nt] whose key
 * lies before its query's document: column col0 + 8 nt + 2 t4 + e before
 * ds[h], the doc_start of row g + 8 h; or, with `transposed` (rows are
 * keys row0 + g + 8 h, columns queries), the row before ds[2 nt + e], the
 * doc_start of the column. */
void pgk_fa_doc_mask(pg_kernel *k, const fa *f, pg_reg (*s)[4], unsigned ntiles, pg_val row0,
                     pg_val col0, const pg_reg *ds, bool transposed);
/* What the document-bounded forward and dq (_docs) know of their query
 * block: row, the address of doc_start[b S] (u64); kt0, the first key
 * tile any of the block's rows sees, doc_start[q0] / FA_KEYS (doc_start is
 * non-decreasing, so q0's is the block's least); last, the doc_start of the
 * block's last row inside S (its largest); ds[h], the doc_start of the
 * lane's rows g + 8 h of its warp (0 past S). */
typedef struct fa_docs {
    pg_reg row, kt0, last, ds[2];
} fa_docs;
/* S = Q K^T for the warp's 16 query rows (Q at sqw) against key tile kt
 * (at sk), masked on the diagonal tile (kt == qt) for the rows from wrow;
 * with docs (else NULL), also masked before each row's document start on
 * a tile that begins before docs->last. */
void pgk_fa_scores(pg_kernel *k, const fa *f, pg_reg (*s)[4], pg_reg sqw, pg_reg sk, pg_reg kt,
                   pg_reg qt, pg_reg wrow, const fa_docs *docs);
/* The query tile of block (x, h, b): qt = tiles - 1 - x (the longest
 * first), its first row q0 and the rows left from it (qrows), the head h,
 * its key/value head kvh, the batch b, and the bytes a token of q and of
 * k (qstride, kstride). */
typedef struct fa_qblock {
    pg_reg qt, q0, qrows, h, kvh, b, qstride, kstride;
} fa_qblock;
fa_qblock pgk_fa_query_block(pg_kernel *k, const fa *f);
/* Loads the fa_docs of query block q from the doc_start array DS. */
fa_docs pgk_fa_docs_of(pg_kernel *k, const fa *f, pg_reg DS, const fa_qblock *q);
/* Store the warp's 16 x dp f32 accumulators to rows row0 + g (+ 8) of a
 * head at base (element (token row0, head, 0)), `stride` bytes a token,
 * rows below nvalid, columns below D: a pair of columns in one store where
 * both are inside and the pair aligned, else each inside column alone. As
 * f32, scaled by mul unless none; or (_bf16) rounded to bf16. */
void pgk_fa_store_rows(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_val mul, pg_reg base,
                       pg_reg stride, pg_reg row0, pg_reg nvalid);
void pgk_fa_store_rows_bf16(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_reg base,
                            pg_reg stride, pg_reg row0, pg_reg nvalid);
/* Opens the loop L over the key tiles kt0 .. qt of a forward or dq block
 * (FA_KEYS keys, 32 FA_WARPS threads; kt0 is 0 but for the _docs kernels)
 * and stages tile kt's K and V rows (from kp, vp: tile kt0's) into sk, sv,
 * then moves kp and vp on a tile (kstep bytes) and waits for the block;
 * returns kt. */
pg_reg pgk_fa_key_tiles(pg_kernel *k, const fa *f, pgk_loop *L, pg_val kt0, pg_reg qt, pg_reg sk,
                        pg_reg sv, pg_reg kp, pg_reg vp, pg_reg kstride, pg_reg kstep);

/* The sm_90a kernels' shared pieces (attention_sm90.c; attention_sm90_bwd.c
 * uses them too): the next stage of a ring of `stages` mbarrier stages
 * (s + 1, back to 0 after the last, and then the parity ph flips); the
 * mbarrier of stage s of the array at byte offset off from bars; the
 * pingpong turns of consumer warpgroup cw (0 or 1) on named barriers 1
 * and 2: begin waits for the turn, end hands it to the other. */
void pgk_fa3_ring_next(pg_kernel *k, pg_reg s, pg_reg ph, uint32_t stages);
pg_reg pgk_fa3_stage_bar(pg_kernel *k, pg_reg bars, uint32_t off, pg_reg s);
void pgk_fa3_turn_begin(pg_kernel *k, pg_reg cw);
void pgk_fa3_turn_end(pg_kernel *k, pg_reg cw);
/* A block's roles: the producer warpgroup gives up registers
 * (setmaxnreg.dec 24) and keeps one elected thread of warp 0; a consumer
 * takes 240 and learns its warpgroup cw (0 or 1), its lane's g and t4 (in
 * f) and its warp's first row wrow (64 cw + 16 warp). The dynamic shared
 * memory's base rounded up to the 128-byte swizzle's 1024-byte period. */
void pgk_fa3_producer_start(pg_kernel *k);
void pgk_fa3_consumer_start(pg_kernel *k, pg_reg *cw, fa *f, pg_reg *wrow);
pg_reg pgk_fa3_smem_base(pg_kernel *k, pg_shared dyn);
/* A tile of `rows` rows of a bf16 [B, S, H, D] map by TMA, boxes of
 * box_rows rows and 64 columns: coordinates {64 hh, head, row + box, b}
 * into dst + hh rows 128 + box 128 bytes (`halves` 64-column halves, each
 * rows x 128 bytes, as the 128-byte swizzle lays them), completing bar. */
void pgk_fa3_load_tile(pg_kernel *k, pg_reg map, pg_reg dst, pg_reg head, pg_reg row, pg_reg b,
                       pg_reg bar, unsigned halves, unsigned rows, unsigned box_rows);
/* The block's checks: Hkv 0, D 0 or past the tile dp, Hq not a multiple
 * of Hkv branch to done (nothing written); returns the group Hq / Hkv. */
pg_reg pgk_fa3_group(pg_kernel *k, pg_reg hq, pg_reg hkv, pg_reg dim, unsigned dp, pg_label done);
/* Thread 0 initialises mbarrier 0 (one arrival) and, stage by stage, the
 * `kinds` mbarriers at off[j] + 8 stage with count[j] arrivals, then the
 * block syncs; warpgroup 0 branches to the label returned (the producer's
 * code), the consumers fall through. */
pg_label pgk_fa3_block_start(pg_kernel *k, pg_reg bars, const uint32_t *off,
                             const uint32_t *count, unsigned kinds, unsigned stages);

/* The knobs of the three kernels, in this order; head_dim picks the
 * padded width dp (64 for 1..64, 128 above). */
enum { KN_BATCH, KN_SEQ, KN_HEADS, KN_DIM, FA_NKNOBS };
static inline unsigned dp_of(uint32_t d) { return d <= 64 ? 64u : 128u; }
/* The knobs of the forward and dq kernels (a block a query tile). */
extern const pgk_knob pgk_fa_q_knobs[FA_NKNOBS];
/* The launch of the knobs: grid (seq / rows, heads, batch), threads a
 * block, shared bytes; PG_ERANGE for sizes the kernels cannot take. */
int pgk_fa_launch(const uint32_t *kn, uint32_t rows, uint32_t threads, uint32_t shared,
                  pgk_launch *out);

#endif
