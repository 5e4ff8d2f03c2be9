/* SPDX-License-Identifier: MIT */
/*
 * Private to the GEMM kernels (gemm_f32*.c, gemm_mma*.c, gemm_thin*.c)
 * and the tensor-core attention: the pieces every GEMM form shares, from
 * element addresses to the mma.sync epilogue. Calls no GEMM family.
 */
#ifndef PTXGEN_GEMM_TILE_H
#define PTXGEN_GEMM_TILE_H

#include "kernels.h"

/* m, n and k are 1 .. 2^24: every u32 index computation of the GEMMs then
 * stays far from wrapping. */
#define GEMM_MAX_DIM (1u << 24)

/* The knobs of every GEMM, in this order: the sizes, then (for the
 * backward GEMMs) the baked tile variant. */
enum { GEMM_M, GEMM_N, GEMM_K, GEMM_VARIANT };

/* mma.m16n8k16 tiles a warp holds at most: 16-row (M) by 8-column (N). */
#define MMA_MAX_MT 4u
#define MMA_MAX_NT 8u

/* log2 of a power of two (the smallest s with 2^s >= x). */
static inline unsigned log2u(unsigned x)
{
    unsigned s = 0;
    while ((1u << s) < x)
        s++;
    return s;
}

/* ---- gemm_tile.c ---- */

/* The block's tile origin (p0, q0) of a bm x bn tiling of P x Q: blocks run
 * in groups of `group` P-tiles, Q-tiles within a group, so a group's blocks
 * share B's tiles in L2 (blockIdx.x). */
void pgk_gemm_block_tile(pg_kernel *k, unsigned bm, unsigned bn, unsigned group, pg_reg P,
                         pg_reg Q, pg_reg *p0, pg_reg *q0);

/* This split's part of a reduction of length R: blockIdx.z of gridDim.z,
 * in whole tiles of bk. `note` is the comment the PTX carries. */
typedef struct pgk_split {
    pg_reg z, nz;      /* the split and the splits */
    pg_reg rbeg, rend; /* r from, to */
    pg_reg ntiles;     /* tiles to run, at least 1 (an empty split runs one
                          zero-filled tile) */
} pgk_split;
pgk_split pgk_gemm_split(pg_kernel *k, unsigned bk, pg_reg R, const char *note);

/* The back edge of a loop that runs at least once: t += 1, then back to
 * `top` while t < n (u32). */
void pgk_loop_back(pg_kernel *k, pg_reg t, pg_val n, pg_label top);

/* base + (row*ld + col) * esize, in 64 bits: row*ld may pass 2^32. */
pg_reg pgk_elem_addr2(pg_kernel *k, pg_reg base, pg_val row, pg_val ld, pg_val col,
                      unsigned esize);

/* Whether rows of `ld` elements of `esize` bytes from `base` may be read in
 * vectors of `vec` elements: the base aligned to the vector, ld a multiple
 * of it. Uniform (params only). */
pg_reg pgk_vectors_ok(pg_kernel *k, pg_reg base, pg_reg ld, unsigned vec, unsigned esize);

/* ---- the f32 register-blocking tile mover ---- */

/* A register-blocked tiling: a bm × bn block tile of outputs, r-tiles of
 * bk, tm × tn outputs a thread. */
typedef struct pgk_rb_cfg {
    unsigned bm, bn, bk; /* block tile: P × Q outputs, r-tiles of bk */
    unsigned tm, tn;     /* outputs a thread: multiples of 4 */
} pgk_rb_cfg;

#define RB_MAX_SLOTS 4 /* float4s of one operand tile a thread moves */
#define RB_MAX_T 8     /* outputs a thread along p or q */

static inline unsigned pgk_rb_threads(const pgk_rb_cfg *c)
{
    return (c->bm / c->tm) * (c->bn / c->tn);
}

/* One float4 of a tile that one thread moves from global to shared memory. */
typedef struct pgk_rb_slot {
    pg_reg ptr;   /* u64: its address in the current r-tile */
    pg_reg ridx;  /* u32: r of its first element (r-contig) or of its row */
    pg_reg pidx;  /* u32: p of its row (r-contig) or of its first element */
    pg_reg inrow; /* pred (r-contig): the row is inside the matrix */
    pg_reg vrow;  /* pred: r-contig: inrow and vectors allowed;
                           else: all four columns inside and vectors allowed */
    pg_reg x[4];  /* the values, staged in registers */
    pg_reg wr;    /* u32: byte offset of its destination inside a stage */
} pgk_rb_slot;

/* One operand tile: bt (p or q) × bk (r), stored in shared memory as
 * [r][p] rows of `stride` floats so the product loop reads 4 consecutive
 * p as one vector. */
typedef struct pgk_rb_operand {
    bool contig_r;
    unsigned bt, bk, stride, nslots;
    pg_reg ext, R; /* extent along p/q, and R */
    pg_val step; /* u64 bytes from one r-tile to the next */
    pgk_rb_slot s[RB_MAX_SLOTS];
} pgk_rb_operand;

/* Set up the slots of one operand: X (p0 = the block's first p, bt = bm)
 * or Y (q0, bn), with base pointer, leading dimension, extent along p/q
 * and R (the end of the r range: loads past it read zeros); rbeg, a u32
 * multiple of bk or pg_none() for 0, is the first r-tile's start (a
 * split-K slice); stage_off is the operand's byte offset inside a stage. */
void pgk_rb_operand_init(pg_kernel *k, pgk_rb_operand *op, const pgk_rb_cfg *c, unsigned bt,
                         bool contig_r, pg_reg base, pg_reg ld, pg_reg ext, pg_reg R, pg_reg p0,
                         pg_reg rbeg, pg_reg tid, unsigned stage_off);
/* Global -> registers, the current r-tile (zeros outside the matrix). */
void pgk_rb_operand_load(pg_kernel *k, const pgk_rb_operand *op);
/* Move the slots on to the next r-tile. */
void pgk_rb_operand_advance(pg_kernel *k, const pgk_rb_operand *op);
/* Registers -> the stage at `stage` (a u32 shared address). */
void pgk_rb_operand_store(pg_kernel *k, const pgk_rb_operand *op, pg_reg stage);

/* The r-tile loop of the register-blocked GEMMs, around the caller's
 * multiply of tile t out of the stage at sbase + cur (two stages of
 * `stage` bytes; cur and t u32 registers, both 0 on entry):
 *   pgk_rb_loop_head: where a tile t + 1 exists, x and y step on to it
 *     and load it into their registers (the loads overlap the multiply);
 *   pgk_rb_loop_tail: after the last tile, on to L->epilogue (bound
 *     there); else the loaded registers go into the other stage, one
 *     barrier, and round again with t + 1. */
typedef struct pgk_rb_loop {
    const pgk_rb_operand *x, *y;
    pg_reg sbase, cur, t, t1, has_next;
    unsigned stage;
    pg_label top, epilogue;
} pgk_rb_loop;
void pgk_rb_loop_head(pg_kernel *k, pgk_rb_loop *L, pg_reg ntiles);
void pgk_rb_loop_tail(pg_kernel *k, const pgk_rb_loop *L);

/* Where a register-blocked tile's outputs go: C[P, Q] row-major; the
 * thread (tx, ty) of the block whose tile starts at row p0, column q0;
 * accumulate adds to C instead of writing it. */
typedef struct pgk_rb_out {
    pg_reg c, P, Q, tx, ty, p0, q0;
    bool accumulate;
} pgk_rb_out;
/* A float4 store's column group at col: *full (all four columns below Q
 * and vectors allowed, cvec), in[e] (col + e < Q) and *off (col * 4
 * bytes). Then one row's predicates at that group: *full (the row inside,
 * rin, and the group's full) and ok[e] (row and column e inside, the
 * float4 not stored). pgk_st_f32x4_edge stores v at addr: the float4
 * where full, else each element where ok[e]. */
void pgk_col4_tests(pg_kernel *k, pg_reg col, pg_reg Q, pg_reg cvec, pg_reg *full, pg_reg in[4],
                    pg_reg *off);
void pgk_row4_preds(pg_kernel *k, pg_reg rin, pg_reg colfull, const pg_reg colin[4],
                    pg_reg *full, pg_reg ok[4]);
void pgk_st_f32x4_edge(pg_kernel *k, pg_reg addr, const pg_reg v[4], pg_reg full,
                       const pg_reg ok[4]);
/* Store the thread's tm x tn accumulators acc[i][j]: rows p0 + i*4*thy +
 * 4ty + e, columns q0 + j*4*thx + 4tx + e; a float4 where four columns are
 * inside and C allows vectors, guarded floats at the edges. */
void pgk_rb_store(pg_kernel *k, const pgk_rb_cfg *c, const pgk_rb_out *o,
                  pg_reg (*acc)[RB_MAX_T]);

/* ---- f16 and mma.sync ---- */

/* Eight 2-byte loads from ptr (halves col .. col+7 of a row), each guarded
 * by col + e < n and row_ok and zero outside, packed two a b32 (low half
 * first) into w[0..3]: into the registers `into` when not NULL, else into
 * new ones. The edge path of 16-byte copies. */
void pgk_ld_u16x8_packed(pg_kernel *k, pg_reg ptr, pg_reg col, pg_reg n, pg_reg row_ok,
                         const pg_reg *into, pg_reg w[4]);

/* Where a block's mma.m16n8k16 f32 accumulators go: C[rows, cols]
 * row-major. The warp owns rows row0 + wrow*wm .. (wm = 0: the block's
 * first rows, one warp along M) and columns col0 + wcol*wn .., in mt × nt
 * tiles of 16×8; lane (g, t4) = (lane/4, lane%4) holds d0,d1 at (row g,
 * cols 2t4, 2t4+1) and d2,d3 at row g+8 of each tile. */
typedef struct pgk_mma_out {
    pg_reg c, rows, cols;  /* u64 base; u32 extents (cols is the row length) */
    pg_reg row0, col0;     /* u32: the block's first row and column */
    pg_reg wrow, wcol;     /* u32: the warp's index along rows and columns */
    unsigned wm, wn;       /* rows and columns a warp */
    pg_reg g, t4;          /* u32: lane / 4, lane % 4 */
    unsigned mt, nt;       /* tiles a warp */
    pg_reg (*acc)[MMA_MAX_NT][4];
} pgk_mma_out;

/* Two f32 at addr: one 8-byte store under `full`; under `partial`, each
 * v[e] alone where in[e]. The edge of an mma.sync tile's f32 output. */
void pgk_st_f32_pair(pg_kernel *k, pg_reg addr, const pg_val v[2], pg_reg full,
                     pg_reg partial, const pg_reg in[2]);

/* A cp.async ring of shared-memory stages: stage += bytes, back to sbase
 * at sbase + total. */
void pgk_stage_next(pg_kernel *k, pg_reg stage, pg_reg sbase, uint32_t bytes, uint32_t total);

/* Store the accumulators: a float2 where both columns are inside and the
 * output allows 8-byte vectors, else one guarded float at a time. */
void pgk_mma_store(pg_kernel *k, const pgk_mma_out *o);

#endif /* PTXGEN_GEMM_TILE_H */
