/* SPDX-License-Identifier: MIT */
/*
 * The 16-bit GEMM family: f16 or bf16 in, f32 accumulate, f32, f16 or bf16
 * out, in the three layouts of a linear layer's training step
 * (pgk_gemm_layout):
 *
 *   forward      Y[M,N]  = X[M,K] · W[N,K]ᵀ   (+ bias[N])
 *   backward_x   dX[M,K] = dY[M,N] · W[N,K]
 *   backward_w   dW[N,K] = dY[M,N]ᵀ · X[M,K]
 *
 * each overwriting its output or adding to it, with an optional f32 bias
 * on the output's columns. Written as C[P,Q] = Σ_r A(p,r)·B(q,r): forward
 * P,Q,R = M,N,K; backward_x M,K,N; backward_w N,K,M. An operand whose
 * memory rows run along P (or Q) with r contiguous is "r-major"; one whose
 * memory rows run along r is "transposed": forward reads both r-major,
 * backward_x reads W transposed, backward_w reads both transposed.
 *
 * gemm_mma_<layout> (sm_80+): mma.sync.m16n8k16 fed by ldmatrix from a
 * cp.async pipeline (first section). gemm_mma_reduce sums split-K partials
 * in a fixed order. gemm_lp_simt (sm_70+): one thread an output, for
 * targets without the tensor-core instructions. pgk_gemm_choose() (at the
 * end) picks kernel, tile and split for a shape.
 */
#include "gemm_tile.h"

#include <math.h>
#include <string.h>

/* Value helpers this file was written with (gemm_tile.h had them before the
 * pgv_* forms); kept here so the merge leaves its PTX unchanged. */

static inline pg_reg new_u32(pg_kernel *k) { return pg_reg_new(k, PG_U32); }
static inline pg_reg new_u64(pg_kernel *k) { return pg_reg_new(k, PG_U64); }
static inline pg_reg new_f32(pg_kernel *k) { return pg_reg_new(k, PG_F32); }
static inline pg_reg new_pred(pg_kernel *k) { return pg_reg_new(k, PG_PRED); }

static inline pg_reg add_u32(pg_kernel *k, pg_val a, pg_val b)
{
    pg_reg d = new_u32(k);
    pg_add(k, PG_U32, d, a, b);
    return d;
}

static inline pg_reg mul_u32(pg_kernel *k, pg_val a, pg_val b)
{
    pg_reg d = new_u32(k);
    pg_mul(k, PG_U32, d, a, b);
    return d;
}

static inline pg_reg and_u32(pg_kernel *k, pg_val a, uint32_t mask)
{
    pg_reg d = new_u32(k);
    pg_and(k, PG_B32, d, a, pg_u32(mask));
    return d;
}

static inline pg_reg shr_u32(pg_kernel *k, pg_val a, uint32_t s)
{
    pg_reg d = new_u32(k);
    pg_shr(k, PG_U32, d, a, pg_u32(s));
    return d;
}

static inline pg_reg shl_u32(pg_kernel *k, pg_val a, uint32_t s)
{
    pg_reg d = new_u32(k);
    pg_shl(k, PG_B32, d, a, pg_u32(s));
    return d;
}

static inline pg_reg cmp_u32(pg_kernel *k, pg_cmp c, pg_val a, pg_val b)
{
    pg_reg p = new_pred(k);
    pg_setp(k, c, PG_U32, p, a, b);
    return p;
}

static inline pg_reg pred_and(pg_kernel *k, pg_reg a, pg_reg b)
{
    pg_reg p = new_pred(k);
    pg_and(k, PG_PRED, p, a, b);
    return p;
}

/* ---------------------------------------------------------------- shared pieces */

/* m, n and k of the mma kernels: 1 .. 2^21, so that even 64×64 tiles of
 * the largest output number at most 2^30 (a 1-D grid, u32 tile indices). */
#define MM_MAX_DIM (1u << 21)
/* gemm_lp_simt: P (m or n) on grid y, 16 rows a block. */
#define LP_MAX_PQ (65535u * 16u)

/* The knobs of the GEMMs of this file, in this order. */
enum { MM_M, MM_N, MM_K, MM_IN, MM_OUT, MM_TILE, MM_SPLIT };
/* The in knob: 0 f16, 1 bf16. The out knob: 0 f32, 1 f16, 2 bf16. */
enum { IN_F16, IN_BF16 };
enum { OUT_F32, OUT_F16, OUT_BF16 };
/* The flags parameter. */
#define FLAG_ACCUMULATE 1u
#define FLAG_BIAS 2u

static pg_type in_type_of(uint32_t v) { return v == IN_BF16 ? PG_BF16 : PG_F16; }

/* (P, Q, R) of the layout from the registers m, n, k. */
static void pqr(unsigned layout, pg_reg m, pg_reg n, pg_reg kd, pg_reg *P, pg_reg *Q, pg_reg *R)
{
    *P = layout == PGK_GEMM_BACKWARD_W ? n : m;
    *Q = layout == PGK_GEMM_FORWARD ? n : kd;
    *R = layout == PGK_GEMM_FORWARD ? kd : layout == PGK_GEMM_BACKWARD_X ? n : m;
}

static void pqr_host(unsigned layout, uint32_t m, uint32_t n, uint32_t k, uint32_t *P,
                     uint32_t *Q, uint32_t *R)
{
    *P = layout == PGK_GEMM_BACKWARD_W ? n : m;
    *Q = layout == PGK_GEMM_FORWARD ? n : k;
    *R = layout == PGK_GEMM_FORWARD ? k : layout == PGK_GEMM_BACKWARD_X ? n : m;
}

/* A 16-bit value (in a b16/u16 register) as f32: f16 by cvt, bf16 as the
 * top half of an f32 (exact, and free of cvt.f32.bf16's sm_90). */
static pg_reg h_to_f32(pg_kernel *k, pg_type t, pg_reg h)
{
    pg_reg f = new_f32(k);
    if (t == PG_F16) {
        pg_cvt(k, PG_F32, PG_F16, PG_RND_NONE, f, h);
    } else {
        pg_reg u = new_u32(k);
        pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, u, h);
        pg_shl(k, PG_B32, u, u, pg_u32(16));
        pg_mov(k, PG_B32, f, u);
    }
    return f;
}

/* f32 -> the 16-bit bits of type t, round to nearest even, in the low half
 * of a new u32. bf16 below sm_80 rounds with integer operations (NaN stays
 * a quiet NaN). */
static pg_reg f32_to_h(pg_kernel *k, pg_type t, pg_reg f, bool native)
{
    pg_reg u = new_u32(k);
    if (t == PG_F16 || native) {
        pg_reg h = pg_reg_new(k, PG_B16);
        pg_cvt(k, t, PG_F32, PG_RND_RN, h, f);
        pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, u, h);
        return u;
    }
    pg_reg x = new_u32(k);
    pg_mov(k, PG_B32, x, f);
    pg_reg lsb = and_u32(k, shr_u32(k, x, 16), 1);
    pg_reg r = add_u32(k, x, pg_u32(0x7fff));
    pg_add(k, PG_U32, r, r, lsb);
    pg_shr(k, PG_U32, u, r, pg_u32(16));
    pg_reg ax = and_u32(k, x, 0x7fffffffu);
    pg_reg nan = cmp_u32(k, PG_CMP_GT, ax, pg_u32(0x7f800000u));
    pg_reg q = shr_u32(k, x, 16);
    pg_or(k, PG_B32, q, q, pg_u32(0x40));
    pg_selp(k, PG_U32, u, q, u, nan);
    return u;
}

/* One output element's final value: v (+ bias) then (old +) when the
 * flags say so; old is read at addr in type ot under `ok`. */
static pg_reg finish_value(pg_kernel *k, pg_type ot, pg_reg v, pg_reg addr, pg_reg ok,
                           pg_reg do_acc)
{
    pg_reg rd = pred_and(k, ok, do_acc);
    pg_reg old;
    if (ot == PG_F32) {
        old = new_f32(k);
        pg_mov(k, PG_F32, old, pg_f32(0.0f));
        pg_guard(k, rd, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, old);
    } else {
        pg_reg h = pg_reg_new(k, PG_B16);
        pg_mov(k, PG_B16, h, pg_u32(0));
        pg_guard(k, rd, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_B16, addr, 0, h);
        old = h_to_f32(k, ot, h);
    }
    pg_reg s = new_f32(k);
    pg_add(k, PG_F32, s, old, v);
    return s;
}

/* Store an f32 value as type ot at addr under `ok`. */
static void store_value(pg_kernel *k, pg_type ot, pg_reg addr, pg_reg ok, pg_reg v, bool native)
{
    if (ot == PG_F32) {
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, v);
        return;
    }
    pg_reg u = f32_to_h(k, ot, v, native);
    pg_reg h = pg_reg_new(k, PG_U16);
    pg_cvt(k, PG_U16, PG_U32, PG_RND_NONE, h, u);
    pg_guard(k, ok, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_U16, addr, 0, h);
}

static unsigned out_size(pg_type ot) { return ot == PG_F32 ? 4 : 2; }

static pg_type out_type_of(uint32_t v)
{
    return v == OUT_F16 ? PG_F16 : v == OUT_BF16 ? PG_BF16 : PG_F32;
}

/* ---------------------------------------------------------------- gemm_mma_*: tensor cores */

/* Block tile BM (P) × BN (Q), k-tiles of BK = 32 or 64 (R), WM × WN
 * warps, `stages` k-tiles in flight. While the warps multiply k-tile t,
 * cp.async copies of t+1 .. t+stages-1 are in flight; one bar.sync a
 * k-tile (after it every warp is done with t-1, whose stage takes the copy
 * of t+stages-1).
 *
 * Shared memory: a stage is the A tile then the B tile. An r-major tile is
 * BM (BN) rows of BK halves (64 or 128 bytes: 4 or 8 chunks of 16); a
 * transposed tile is BK rows of BM (BN) halves. Chunk c of row r lives at
 * chunk c ^ s(r), s(r) = (r/2) % 4 for 64-byte rows, r % 8 for longer
 * ones: the eight rows an ldmatrix matrix reads, and the eight chunks a
 * quarter-warp copies, fall in eight different 16-byte bank groups.
 *
 * Fragments: ldmatrix.x4 gives the mma.m16n8k16 registers; from an r-major
 * tile without .trans, from a transposed tile with .trans (the matrices'
 * memory rows then run along r). A's four matrices are (p 0-7 | 8-15) ×
 * (r 0-7 | 8-15) in the order a0..a3; B's are the b0, b1 of two adjacent
 * 8-column tiles.
 *
 * Edges: a copy reads only the bytes inside the matrix (src_size) and
 * zero-fills the rest, so rows past P or Q and r past R contribute 0·0; an
 * empty copy reads 0 bytes from the matrix base. 16-byte copies need
 * 16-byte aligned bases and leading dimensions that are multiples of 8;
 * otherwise (a uniform test) each chunk is eight guarded 2-byte loads.
 *
 * Split-K: block z of gridDim.z sums the k-tiles [z·per, (z+1)·per) with
 * per = ceil(tiles / gridDim.z) and, when gridDim.z > 1, writes its f32
 * partial sums to workspace[z][P][Q]; gemm_mma_reduce adds them in z order.
 * Every output is one fixed sequence of mma over its k-tiles in order: the
 * results are the same bits run to run.
 *
 * Blocks: a 1-D grid over the P×Q tiles, in groups of 8 P-tiles: the
 * blocks resident at once share few A and B tiles, which stay in L2.
 *
 * Tiles with `db` keep two sets of fragment registers: the ldmatrix of
 * k-step s+1 (at the last k-step, the next k-tile's first, after the
 * barrier) is issued before the mma of k-step s, which then hides its
 * latency. */

typedef struct mma_cfg {
    unsigned bm, bn;     /* block tile along P and Q */
    unsigned wm, wn;     /* warps along P and Q */
    unsigned bk;         /* k-tile: 32 or 64 */
    unsigned stages;
    bool db;             /* fragments double-buffered across k-steps */
} mma_cfg;

#define MMA_MAX_KS 4u /* k-steps of 16 a k-tile */
#define MMA_MAX_CH 8u /* 16-byte chunks of one operand a thread copies a k-tile */
#define MMA_GROUP 8u  /* P-tiles a group of the block order */

/* The tile configurations (the tile knob), pgk.h's PGK_GEMM_TILE_*. */
static const mma_cfg mma_cfgs[PGK_GEMM_TILES] = {
    [PGK_GEMM_TILE_128x128_W4] = {128, 128, 2, 2, 32, 4},
    [PGK_GEMM_TILE_128x128_W8] = {128, 128, 2, 4, 32, 4},
    [PGK_GEMM_TILE_128x256_W8] = {128, 256, 2, 4, 32, 3},
    [PGK_GEMM_TILE_256x128_W8] = {256, 128, 4, 2, 32, 3},
    [PGK_GEMM_TILE_128x64_W4] = {128, 64, 2, 2, 32, 4},
    [PGK_GEMM_TILE_64x128_W4] = {64, 128, 2, 2, 32, 4},
    [PGK_GEMM_TILE_64x64_W4] = {64, 64, 2, 2, 32, 4},
    [PGK_GEMM_TILE_128x256_W8_K64] = {128, 256, 2, 4, 64, 3},
    [PGK_GEMM_TILE_256x128_W8_K64] = {256, 128, 4, 2, 64, 3},
    [PGK_GEMM_TILE_128x128_W4_K64] = {128, 128, 2, 2, 64, 3},
    [PGK_GEMM_TILE_128x128_W4_K64_DB] = {128, 128, 2, 2, 64, 3, true},
    [PGK_GEMM_TILE_64x128_W4_K64_DB] = {64, 128, 2, 2, 64, 3, true},
    [PGK_GEMM_TILE_128x64_W4_K64_DB] = {128, 64, 2, 2, 64, 3, true},
    [PGK_GEMM_TILE_128x128_W4_DB] = {128, 128, 2, 2, 32, 4, true},
};

static unsigned cfg_threads(const mma_cfg *c) { return c->wm * c->wn * 32u; }
static uint32_t cfg_stage_bytes(const mma_cfg *c) { return (c->bm + c->bn) * c->bk * 2u; }

uint32_t pgk_gemm_tile_rows(unsigned tile) { return tile < PGK_GEMM_TILES ? mma_cfgs[tile].bm : 0; }
uint32_t pgk_gemm_tile_cols(unsigned tile) { return tile < PGK_GEMM_TILES ? mma_cfgs[tile].bn : 0; }

/* One operand's copies: the chunks a thread moves each k-tile, chunk j
 * being rows row0 + j·rstep of the tile. Only chunk 0 is kept in
 * registers; chunk j is at j·jstep bytes from it in the matrix and at
 * j·rstep·rb in the stage (rstep is a multiple of 8, so the swizzle is the
 * same for all): a handful of registers whatever the count. */
typedef struct mma_operand {
    bool trans;
    unsigned bk;                /* the k-tile */
    unsigned cpr, rb, nch;      /* chunks a tile row, bytes a tile row, chunks a thread */
    unsigned rstep;             /* tile rows from one of a thread's chunks to the next */
    pg_reg base;                /* u64: the matrix; the source of empty copies */
    pg_reg ext;                 /* u32: P or Q */
    pg_reg ptr;                 /* u64: chunk 0 in the next k-tile */
    pg_reg jstep;               /* u64: bytes from chunk j to j + 1 */
    pg_reg dst;                 /* u32: chunk 0's offset inside a stage */
    pg_reg left;                /* r-major: rows from chunk 0's to the end of the matrix */
    pg_reg ridx;                /* transposed: r of chunk 0's row, advancing */
    pg_reg col;                 /* r-major: r of the chunks, advancing; transposed: their p */
    pg_reg cbytes;              /* transposed: bytes of a chunk inside its row */
    pg_reg cin;                 /* transposed: cbytes > 0 */
    pg_val step;                /* bytes from one k-tile to the next */
} mma_operand;

/* The swizzled chunk of row `row`, chunk `c`, for rows of cpr chunks. */
static pg_reg swizzle(pg_kernel *k, pg_reg row, pg_reg c, unsigned cpr)
{
    pg_reg s = cpr == 4 ? and_u32(k, shr_u32(k, row, 1), 3) : and_u32(k, row, 7);
    pg_reg x = new_u32(k);
    pg_xor(k, PG_B32, x, c, s);
    return x;
}

/* max(a - b, 0) */
static pg_reg sub_sat(pg_kernel *k, pg_reg a, pg_reg b)
{
    pg_reg m = new_u32(k), d = new_u32(k);
    pg_max(k, PG_U32, m, a, b);
    pg_sub(k, PG_U32, d, m, b);
    return d;
}

/* bt: the tile's extent along P (or Q); p0 the block's first p; rbeg the
 * first r of this block's split; soff the tile's offset inside a stage. */
static void mma_operand_init(pg_kernel *k, mma_operand *o, bool trans, unsigned bt,
                             unsigned bk, unsigned threads, pg_reg base, pg_reg ld, pg_reg ext,
                             pg_reg p0, pg_reg rbeg, pg_reg tid, unsigned soff)
{
    o->trans = trans;
    o->bk = bk;
    o->base = base;
    o->ext = ext;
    o->cpr = trans ? bt / 8 : bk / 8;
    o->rb = o->cpr * 16;
    unsigned rows = trans ? bk : bt;
    o->nch = rows * o->cpr / threads;
    o->rstep = threads / o->cpr;
    /* every mma_cfgs entry has rstep % 8 == 0 and nch <= MMA_MAX_CH */
    pg_reg c = and_u32(k, tid, o->cpr - 1);
    pg_reg row0 = shr_u32(k, tid, log2u(o->cpr));
    o->jstep = new_u64(k);
    pg_mul_wide(k, PG_U32, o->jstep, ld, pg_u32(o->rstep * 2));
    if (trans) {
        o->col = new_u32(k);
        pg_mad(k, PG_U32, o->col, c, pg_u32(8), p0);
        pg_reg rem = sub_sat(k, ext, o->col);
        pg_min(k, PG_U32, rem, rem, pg_u32(8));
        o->cin = cmp_u32(k, PG_CMP_NE, rem, pg_u32(0));
        o->cbytes = shl_u32(k, rem, 1);
        pg_reg st = new_u64(k);
        pg_mul_wide(k, PG_U32, st, ld, pg_u32(bk * 2));
        o->step = st;
        o->ridx = add_u32(k, rbeg, row0);
        o->ptr = pgk_elem_addr2(k, base, o->ridx, ld, o->col, 2);
    } else {
        o->col = new_u32(k);
        pg_mad(k, PG_U32, o->col, c, pg_u32(8), rbeg);
        o->step = pg_u64(bk * 2);
        pg_reg p = add_u32(k, p0, row0);
        o->left = sub_sat(k, ext, p);
        o->ptr = pgk_elem_addr2(k, base, p, ld, o->col, 2);
    }
    pg_reg pc = swizzle(k, row0, c, o->cpr);
    o->dst = new_u32(k);
    pg_mad(k, PG_U32, o->dst, row0, pg_u32(o->rb), pg_u32(soff));
    pg_mad(k, PG_U32, o->dst, pc, pg_u32(16), o->dst);
}

/* Whether chunk j's row is inside: j·rstep < left. */
static pg_reg chunk_in(pg_kernel *k, const mma_operand *o, pg_reg left, unsigned j)
{
    return cmp_u32(k, PG_CMP_LT, pg_u32(j * o->rstep), left);
}

static void mma_operand_copy(pg_kernel *k, const mma_operand *o, pg_reg stage, pg_reg rend)
{
    pg_val bytes;
    pg_reg left, colin = pg_none();
    if (o->trans) {
        left = sub_sat(k, rend, o->ridx);
        bytes = o->cbytes;
    } else {
        left = o->left;
        colin = cmp_u32(k, PG_CMP_LT, o->col, rend);
        pg_reg rem = sub_sat(k, rend, o->col);
        pg_min(k, PG_U32, rem, rem, pg_u32(8));
        bytes = shl_u32(k, rem, 1);
    }
    pg_reg dst = add_u32(k, stage, o->dst);
    pg_reg src = new_u64(k);
    pg_mov(k, PG_U64, src, o->ptr);
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg ok = pred_and(k, chunk_in(k, o, left, j), o->trans ? o->cin : colin);
        pg_reg n = new_u32(k), addr = new_u64(k);
        pg_selp(k, PG_U32, n, bytes, pg_u32(0), ok);
        pg_selp(k, PG_U64, addr, src, o->base, ok);
        pg_cp_async(k, dst, j * o->rstep * o->rb, addr, 0, 16, n);
        if (j + 1 < o->nch)
            pg_add(k, PG_U64, src, src, o->jstep);
    }
}

/* The same with guarded 2-byte loads, for operands not 16-byte aligned. */
static void mma_operand_copy_scalar(pg_kernel *k, const mma_operand *o, pg_reg stage,
                                    pg_reg rend)
{
    pg_reg left = o->trans ? sub_sat(k, rend, o->ridx) : o->left;
    pg_reg dst = add_u32(k, stage, o->dst);
    pg_reg src = new_u64(k);
    pg_mov(k, PG_U64, src, o->ptr);
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg r[4];
        pg_reg in = chunk_in(k, o, left, j);
        if (o->trans)
            pgk_ld_u16x8_packed(k, src, o->col, o->ext, in, NULL, r);
        else
            pgk_ld_u16x8_packed(k, src, o->col, rend, in, NULL, r);
        pg_val w[4] = {r[0], r[1], r[2], r[3]};
        pg_st_v(k, PG_SPACE_SHARED, PG_B32, 4, dst, j * o->rstep * o->rb, w);
        if (j + 1 < o->nch)
            pg_add(k, PG_U64, src, src, o->jstep);
    }
}

static void mma_operand_advance(pg_kernel *k, const mma_operand *o)
{
    pg_add(k, PG_U64, o->ptr, o->ptr, o->step);
    if (o->trans)
        pg_add(k, PG_U32, o->ridx, o->ridx, pg_u32(o->bk));
    else
        pg_add(k, PG_U32, o->col, o->col, pg_u32(o->bk));
}

/* Copy the next k-tile of both operands into `stage` and commit a group
 * (empty copies past the split's end still commit: the group count stays
 * uniform). */
static void mma_copy_tile(pg_kernel *k, const mma_operand *a, const mma_operand *b,
                          pg_reg stage, pg_reg rend, pg_reg vec)
{
    pg_label scalar = pg_label_new(k, "copy_scalar");
    pg_label done = pg_label_new(k, "copied");
    pg_bra_if(k, vec, true, scalar);
    mma_operand_copy(k, a, stage, rend);
    mma_operand_copy(k, b, stage, rend);
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    mma_operand_copy_scalar(k, a, stage, rend);
    mma_operand_copy_scalar(k, b, stage, rend);
    pg_label_bind(k, done);
    mma_operand_advance(k, a);
    mma_operand_advance(k, b);
    pg_cp_async_commit(k);
}

/* stage += bytes, wrapping to sbase at sbase + total. */
static void stage_next(pg_kernel *k, pg_reg stage, pg_reg sbase, uint32_t bytes, uint32_t total)
{
    pg_add(k, PG_U32, stage, stage, pg_u32(bytes));
    pg_reg end = add_u32(k, sbase, pg_u32(total));
    pg_reg wrap = cmp_u32(k, PG_CMP_EQ, stage, end);
    pg_selp(k, PG_U32, stage, sbase, stage, wrap);
}

/* Where the fragments of a k-step come from. */
typedef struct frag_src {
    bool ta, tb;           /* the operands are transposed */
    unsigned MT, NT;       /* mma tiles a warp */
    unsigned arb, brb;     /* bytes a tile row */
    const pg_reg *a_off;   /* per k-step (r-major) or per 16-row tile (transposed) */
    const pg_reg *b_off;   /* per k-step or per pair of 8-column tiles */
} frag_src;

static void new_frags(pg_kernel *k, unsigned MT, unsigned NT, pg_reg af[][4], pg_reg bf[][2])
{
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned e = 0; e < 4; e++)
            af[mt][e] = pg_reg_new(k, PG_B32);
    for (unsigned nt = 0; nt < NT; nt++)
        for (unsigned e = 0; e < 2; e++)
            bf[nt][e] = pg_reg_new(k, PG_B32);
}

/* ldmatrix the A and B fragments of k-step s out of the stage at rstage. */
static void load_frags(pg_kernel *k, const frag_src *f, pg_reg rstage, unsigned s,
                       pg_reg af[][4], pg_reg bf[][2])
{
    pg_reg ra = f->ta ? pg_none() : add_u32(k, rstage, f->a_off[s]);
    for (unsigned mt = 0; mt < f->MT; mt++) {
        if (f->ta)
            pg_ldmatrix(k, 4, true, af[mt], add_u32(k, rstage, f->a_off[mt]), s * 16 * f->arb);
        else
            pg_ldmatrix(k, 4, false, af[mt], ra, mt * 16 * f->arb);
    }
    pg_reg rb = f->tb ? pg_none() : add_u32(k, rstage, f->b_off[s]);
    for (unsigned pr = 0; pr < f->NT / 2; pr++) {
        pg_reg d[4] = {bf[2 * pr][0], bf[2 * pr][1], bf[2 * pr + 1][0], bf[2 * pr + 1][1]};
        if (f->tb)
            pg_ldmatrix(k, 4, true, d, add_u32(k, rstage, f->b_off[pr]), s * 16 * f->brb);
        else
            pg_ldmatrix(k, 4, false, d, rb, pr * 16 * f->brb);
    }
}

/* The epilogue's view of the output. */
typedef struct mma_epi {
    pg_type ot;
    pg_reg c, ldc, P;      /* base (u64), row length (Q), rows */
    pg_reg bias, do_acc, do_bias; /* f32 bias base; preds from the flags */
    bool partial;          /* f32 partial sums: no bias, no accumulate */
    bool native;           /* cvt to bf16 exists */
} mma_epi;

/* Store the accumulators: rows rowbase + mt*16 + half*8, columns
 * colbase + nt*8 + {0, 1}; a pair in one store where both columns are
 * inside and aligned, else element by element. */
static void mma_epilogue(pg_kernel *k, const mma_epi *e, pg_reg rowbase, pg_reg colbase,
                         unsigned MT, unsigned NT, pg_reg (*acc)[MMA_MAX_NT][4])
{
    unsigned es = out_size(e->ot);
    pg_reg cvec = pgk_vectors_ok(k, e->c, e->ldc, 2, es);
    pg_reg full[MMA_MAX_NT], cin[MMA_MAX_NT][2], coff[MMA_MAX_NT], bv[MMA_MAX_NT][2];
    for (unsigned nt = 0; nt < NT; nt++) {
        pg_reg col = add_u32(k, colbase, pg_u32(nt * 8));
        pg_reg end = add_u32(k, col, pg_u32(2));
        full[nt] = pred_and(k, cmp_u32(k, PG_CMP_LE, end, e->ldc), cvec);
        cin[nt][0] = cmp_u32(k, PG_CMP_LT, col, e->ldc);
        cin[nt][1] = cmp_u32(k, PG_CMP_LT, add_u32(k, col, pg_u32(1)), e->ldc);
        coff[nt] = new_u64(k);
        pg_mul_wide(k, PG_U32, coff[nt], col, pg_u32(es));
        if (!e->partial) {
            pg_reg ba = pgk_elem_addr2(k, e->bias, pg_u32(0), pg_u32(0), col, 4);
            for (unsigned h = 0; h < 2; h++) {
                bv[nt][h] = new_f32(k);
                pg_mov(k, PG_F32, bv[nt][h], pg_f32(0.0f));
                pg_reg ok = pred_and(k, cin[nt][h], e->do_bias);
                pg_guard(k, ok, false);
                pg_ld(k, PG_SPACE_GLOBAL, PG_F32, ba, h * 4, bv[nt][h]);
            }
        }
    }
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned half = 0; half < 2; half++) {
            pg_reg row = add_u32(k, rowbase, pg_u32(mt * 16 + half * 8));
            pg_reg rin = cmp_u32(k, PG_CMP_LT, row, e->P);
            pg_reg rowptr = pgk_elem_addr2(k, e->c, row, e->ldc, pg_u32(0), es);
            for (unsigned nt = 0; nt < NT; nt++) {
                pg_reg addr = new_u64(k);
                pg_add(k, PG_U64, addr, rowptr, coff[nt]);
                pg_reg v[2];
                for (unsigned h = 0; h < 2; h++) {
                    v[h] = acc[mt][nt][2 * half + h];
                    if (!e->partial) {
                        pg_reg a1 = new_u64(k);
                        pg_add(k, PG_U64, a1, addr, pg_u64(h * es));
                        pg_reg s = new_f32(k);
                        pg_add(k, PG_F32, s, v[h], bv[nt][h]);
                        v[h] = finish_value(k, e->ot, s, a1, pred_and(k, rin, cin[nt][h]),
                                            e->do_acc);
                    }
                }
                pg_reg f = pred_and(k, rin, full[nt]);
                pg_reg part = new_pred(k);
                pg_not(k, PG_PRED, part, f);
                pg_and(k, PG_PRED, part, part, rin);
                if (e->ot == PG_F32) {
                    pg_val pv[2] = {v[0], v[1]};
                    pg_guard(k, f, false);
                    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, addr, 0, pv);
                    for (unsigned h = 0; h < 2; h++) {
                        pg_reg ok = pred_and(k, part, cin[nt][h]);
                        pg_guard(k, ok, false);
                        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, h * 4, v[h]);
                    }
                } else {
                    pg_reg lo = f32_to_h(k, e->ot, v[0], e->native);
                    pg_reg hi = f32_to_h(k, e->ot, v[1], e->native);
                    pg_reg w = shl_u32(k, hi, 16);
                    pg_or(k, PG_B32, w, w, lo);
                    pg_guard(k, f, false);
                    pg_st(k, PG_SPACE_GLOBAL, PG_B32, addr, 0, w);
                    pg_reg hv[2] = {lo, hi};
                    for (unsigned h = 0; h < 2; h++) {
                        pg_reg ok = pred_and(k, part, cin[nt][h]);
                        pg_reg h16 = pg_reg_new(k, PG_U16);
                        pg_cvt(k, PG_U16, PG_U32, PG_RND_NONE, h16, hv[h]);
                        pg_guard(k, ok, false);
                        pg_st(k, PG_SPACE_GLOBAL, PG_U16, addr, h * 2, h16);
                    }
                }
            }
        }
}

/* The params of gemm_mma_* and gemm_lp_simt. */
enum { PA_A, PA_B, PA_C, PA_BIAS, PA_WS, PA_M, PA_N, PA_K, PA_FLAGS };

static int build_mma(pg_kernel *k, unsigned layout, const pg_param *p, const uint32_t *knobs)
{
    const mma_cfg *cfg = &mma_cfgs[knobs[MM_TILE]];
    const pg_type it = in_type_of(knobs[MM_IN]);
    const unsigned T = cfg_threads(cfg), S = cfg->stages, SB = cfg_stage_bytes(cfg);
    const unsigned WM = cfg->bm / cfg->wm, WN = cfg->bn / cfg->wn;
    const unsigned MT = WM / 16, NT = WN / 8;
    const bool ta = layout == PGK_GEMM_BACKWARD_W, tb = layout != PGK_GEMM_FORWARD;
    pg_kernel_set_maxntid(k, T, 1, 1);
    pg_shared smem = pg_shared_dynamic(k, 128);
    pg_reg a = pg_param_load(k, p[PA_A]), b = pg_param_load(k, p[PA_B]);
    pg_reg c = pg_param_load(k, p[PA_C]), bias = pg_param_load(k, p[PA_BIAS]);
    pg_reg ws = pg_param_load(k, p[PA_WS]);
    pg_reg m = pg_param_load(k, p[PA_M]), n = pg_param_load(k, p[PA_N]);
    pg_reg kd = pg_param_load(k, p[PA_K]), flags = pg_param_load(k, p[PA_FLAGS]);
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    /* leading dimensions: forward X, W rows of K; backward_x dY rows of N, W
     * rows of K; backward_w dY rows of N, X rows of K */
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n, ldb = kd;
    pg_reg sbase = new_u32(k);
    pg_mov(k, PG_U32, sbase, pg_shared_addr(smem));

    pg_comment(k, "the block's tile: groups of 8 P-tiles, Q-tiles within a group");
    pg_reg np = shr_u32(k, add_u32(k, P, pg_u32(cfg->bm - 1)), log2u(cfg->bm));
    pg_reg nq = shr_u32(k, add_u32(k, Q, pg_u32(cfg->bn - 1)), log2u(cfg->bn));
    pg_reg bid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg per_group = mul_u32(k, nq, pg_u32(MMA_GROUP));
    pg_reg group = new_u32(k), inq = new_u32(k);
    pg_div(k, PG_U32, group, bid, per_group);
    pg_rem(k, PG_U32, inq, bid, per_group);
    pg_reg first = mul_u32(k, group, pg_u32(MMA_GROUP));
    pg_reg gsize = new_u32(k);
    pg_sub(k, PG_U32, gsize, np, first);
    pg_min(k, PG_U32, gsize, gsize, pg_u32(MMA_GROUP));
    pg_reg pt = new_u32(k), qt = new_u32(k);
    pg_rem(k, PG_U32, pt, inq, gsize);
    pg_add(k, PG_U32, pt, pt, first);
    pg_div(k, PG_U32, qt, inq, gsize);
    pg_reg p0 = shl_u32(k, pt, log2u(cfg->bm)), q0 = shl_u32(k, qt, log2u(cfg->bn));

    pg_comment(k, "split-K: k-tiles [z*per, z*per + per) of ceil(R/bk)");
    pg_reg z = pg_sreg_read(k, PG_SREG_CTAID_Z), nz = pg_sreg_read(k, PG_SREG_NCTAID_Z);
    const unsigned BK = cfg->bk, KS = BK / 16;
    pg_reg tiles = shr_u32(k, add_u32(k, R, pg_u32(BK - 1)), log2u(BK));
    pg_reg per = new_u32(k);
    pg_add(k, PG_U32, per, tiles, nz);
    pg_sub(k, PG_U32, per, per, pg_u32(1));
    pg_div(k, PG_U32, per, per, nz);
    pg_reg t0 = mul_u32(k, z, per);
    pg_reg rbeg = shl_u32(k, t0, log2u(BK));
    pg_reg tend = add_u32(k, t0, per);
    pg_min(k, PG_U32, tend, tend, tiles);
    pg_reg rend = shl_u32(k, tend, log2u(BK));
    pg_min(k, PG_U32, rend, rend, R);
    pg_reg ntiles = new_u32(k);
    pg_max(k, PG_U32, ntiles, tend, t0); /* empty splits run one zero-filled k-tile */
    pg_sub(k, PG_U32, ntiles, ntiles, t0);
    pg_max(k, PG_U32, ntiles, ntiles, pg_u32(1));

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = and_u32(k, tid, 31);
    pg_reg warp = shr_u32(k, tid, 5);
    pg_reg wpi = and_u32(k, warp, cfg->wm - 1);
    pg_reg wqi = shr_u32(k, warp, log2u(cfg->wm));

    pg_comment(k, "16-byte copies need aligned bases and leading dimensions % 8 == 0 (uniform)");
    pg_reg veca = pgk_vectors_ok(k, a, lda, 8, 2);
    pg_reg vecb = pgk_vectors_ok(k, b, ldb, 8, 2);
    pg_reg vec = pred_and(k, veca, vecb);
    mma_operand A, B;
    mma_operand_init(k, &A, ta, cfg->bm, BK, T, a, lda, P, p0, rbeg, tid, 0);
    mma_operand_init(k, &B, tb, cfg->bn, BK, T, b, ldb, Q, q0, rbeg, tid, cfg->bm * BK * 2);
    const unsigned boff = cfg->bm * BK * 2;

    pg_comment(k, "ldmatrix row addresses: lane gives row lane%8 of matrix lane/8");
    pg_reg qd = shr_u32(k, lane, 3), r8 = and_u32(k, lane, 7);
    pg_reg q0b = and_u32(k, qd, 1), q1b = shr_u32(k, qd, 1);
    /* A: r-major: one address a k-step (the mt step is 16 rows: the swizzle
     * repeats); transposed: one a 16-row tile (the k-step is 16 rows). */
    pg_reg a_off[MMA_MAX_MT > MMA_MAX_KS ? MMA_MAX_MT : MMA_MAX_KS], b_off[MMA_MAX_NT];
    if (!ta) {
        pg_reg row = new_u32(k);
        pg_mad(k, PG_U32, row, wpi, pg_u32(WM), r8);
        pg_mad(k, PG_U32, row, q0b, pg_u32(8), row);
        for (unsigned s = 0; s < KS; s++) {
            pg_reg ch = add_u32(k, q1b, pg_u32(2 * s));
            pg_reg pc = swizzle(k, row, ch, A.cpr);
            a_off[s] = shl_u32(k, row, log2u(A.rb));
            pg_mad(k, PG_U32, a_off[s], pc, pg_u32(16), a_off[s]);
        }
    } else {
        pg_reg row = new_u32(k);
        pg_mad(k, PG_U32, row, q1b, pg_u32(8), r8);
        for (unsigned mt = 0; mt < MT; mt++) {
            pg_reg pp = new_u32(k);
            pg_mad(k, PG_U32, pp, wpi, pg_u32(WM), pg_u32(mt * 16));
            pg_mad(k, PG_U32, pp, q0b, pg_u32(8), pp);
            pg_reg pc = swizzle(k, row, shr_u32(k, pp, 3), A.cpr);
            a_off[mt] = mul_u32(k, row, pg_u32(A.rb));
            pg_mad(k, PG_U32, a_off[mt], pc, pg_u32(16), a_off[mt]);
        }
    }
    if (!tb) {
        pg_reg row = new_u32(k);
        pg_mad(k, PG_U32, row, wqi, pg_u32(WN), r8);
        pg_mad(k, PG_U32, row, q1b, pg_u32(8), row);
        for (unsigned s = 0; s < KS; s++) {
            pg_reg ch = add_u32(k, q0b, pg_u32(2 * s));
            pg_reg pc = swizzle(k, row, ch, B.cpr);
            b_off[s] = shl_u32(k, row, log2u(B.rb));
            pg_mad(k, PG_U32, b_off[s], pc, pg_u32(16), b_off[s]);
            pg_add(k, PG_U32, b_off[s], b_off[s], pg_u32(boff));
        }
    } else {
        pg_reg row = new_u32(k);
        pg_mad(k, PG_U32, row, q0b, pg_u32(8), r8);
        for (unsigned pr = 0; pr < NT / 2; pr++) {
            pg_reg q = new_u32(k);
            pg_mad(k, PG_U32, q, wqi, pg_u32(WN), pg_u32(pr * 16));
            pg_mad(k, PG_U32, q, q1b, pg_u32(8), q);
            pg_reg pc = swizzle(k, row, shr_u32(k, q, 3), B.cpr);
            b_off[pr] = mul_u32(k, row, pg_u32(B.rb));
            pg_mad(k, PG_U32, b_off[pr], pc, pg_u32(16), b_off[pr]);
            pg_add(k, PG_U32, b_off[pr], b_off[pr], pg_u32(boff));
        }
    }

    pg_reg acc[MMA_MAX_MT][MMA_MAX_NT][4];
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned nt = 0; nt < NT; nt++)
            for (unsigned e = 0; e < 4; e++) {
                acc[mt][nt][e] = new_f32(k);
                pg_mov(k, PG_F32, acc[mt][nt][e], pg_f32(0.0f));
            }

    pg_comment(k, "k-tiles 0 .. stages-2 into stages 0 .. stages-2");
    pg_reg wstage = new_u32(k), rstage = new_u32(k);
    pg_mov(k, PG_U32, wstage, sbase);
    for (unsigned s = 0; s + 1 < S; s++) {
        mma_copy_tile(k, &A, &B, wstage, rend, vec);
        pg_add(k, PG_U32, wstage, wstage, pg_u32(SB));
    }
    pg_mov(k, PG_U32, rstage, sbase);

    const frag_src fs = {.ta = ta, .tb = tb, .MT = MT, .NT = NT, .arb = A.rb, .brb = B.rb,
                         .a_off = a_off, .b_off = b_off};
    pg_reg t = new_u32(k);
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_label top = pg_label_new(k, "ktile");
    if (!cfg->db) {
        pg_label_bind(k, top);
        pg_cp_async_wait(k, S - 2);
        pg_bar_sync(k, 0);
        pg_comment(k, "copy k-tile t+stages-1 into the stage k-tile t-1 used");
        mma_copy_tile(k, &A, &B, wstage, rend, vec);
        pg_comment(k, "the k-steps of mma tiles out of the stage of k-tile t");
        for (unsigned s = 0; s < KS; s++) {
            pg_reg af[MMA_MAX_MT][4], bf[MMA_MAX_NT][2];
            new_frags(k, MT, NT, af, bf);
            load_frags(k, &fs, rstage, s, af, bf);
            for (unsigned mt = 0; mt < MT; mt++)
                for (unsigned nt = 0; nt < NT; nt++)
                    pg_mma_m16n8k16_f32(k, it, acc[mt][nt], af[mt], bf[nt], acc[mt][nt]);
        }
        stage_next(k, wstage, sbase, SB, S * SB);
        stage_next(k, rstage, sbase, SB, S * SB);
    } else {
        /* Fragments double-buffered: k-step s+1's (the next k-tile's first,
         * after the barrier, at the last k-step) load while k-step s
         * multiplies. */
        pg_reg af[2][MMA_MAX_MT][4], bf[2][MMA_MAX_NT][2];
        new_frags(k, MT, NT, af[0], bf[0]);
        new_frags(k, MT, NT, af[1], bf[1]);
        pg_cp_async_wait(k, S - 2);
        pg_bar_sync(k, 0);
        load_frags(k, &fs, rstage, 0, af[0], bf[0]);
        pg_label_bind(k, top);
        pg_comment(k, "copy k-tile t+stages-1 into the stage k-tile t-1 used");
        mma_copy_tile(k, &A, &B, wstage, rend, vec);
        for (unsigned s = 0; s < KS; s++) {
            if (s == KS - 1) {
                pg_comment(k, "k-tile t+1 in shared memory; every warp done with k-tile t");
                pg_cp_async_wait(k, S - 2);
                pg_bar_sync(k, 0);
                stage_next(k, wstage, sbase, SB, S * SB);
                stage_next(k, rstage, sbase, SB, S * SB);
            }
            unsigned nx = (s + 1) % 2;
            load_frags(k, &fs, rstage, (s + 1) % KS, af[nx], bf[nx]);
            for (unsigned mt = 0; mt < MT; mt++)
                for (unsigned nt = 0; nt < NT; nt++)
                    pg_mma_m16n8k16_f32(k, it, acc[mt][nt], af[s % 2][mt], bf[s % 2][nt],
                                        acc[mt][nt]);
        }
    }
    pg_add(k, PG_U32, t, t, pg_u32(1));
    pg_reg more = cmp_u32(k, PG_CMP_LT, t, ntiles);
    pg_bra_if(k, more, false, top);
    pg_cp_async_wait(k, 0);

    pg_comment(k, "d0,d1 at (row g, cols 2t, 2t+1), d2,d3 at row g+8, of each 16x8 tile");
    pg_reg g = shr_u32(k, lane, 2), t4 = and_u32(k, lane, 3);
    pg_reg rowbase = new_u32(k), colbase = new_u32(k);
    pg_mad(k, PG_U32, rowbase, wpi, pg_u32(WM), p0);
    pg_add(k, PG_U32, rowbase, rowbase, g);
    pg_mad(k, PG_U32, colbase, wqi, pg_u32(WN), q0);
    pg_mad(k, PG_U32, colbase, t4, pg_u32(2), colbase);
    pg_label partial = pg_label_new(k, "partial");
    pg_reg split = cmp_u32(k, PG_CMP_GT, nz, pg_u32(1));
    pg_bra_if(k, split, false, partial);
    pg_reg do_acc = cmp_u32(k, PG_CMP_NE, and_u32(k, flags, FLAG_ACCUMULATE), pg_u32(0));
    pg_reg do_bias = cmp_u32(k, PG_CMP_NE, and_u32(k, flags, FLAG_BIAS), pg_u32(0));
    mma_epi e = {.ot = out_type_of(knobs[MM_OUT]), .c = c, .ldc = Q, .P = P, .bias = bias,
                 .do_acc = do_acc, .do_bias = do_bias, .native = true};
    mma_epilogue(k, &e, rowbase, colbase, MT, NT, acc);
    pg_ret(k);
    pg_label_bind(k, partial);
    pg_comment(k, "split-K: f32 partial sums into workspace[z][P][Q]");
    pg_reg pq = new_u64(k), zoff = new_u64(k), z64 = new_u64(k);
    pg_mul_wide(k, PG_U32, pq, P, Q);
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, z64, z);
    pg_mul(k, PG_U64, zoff, pq, z64);
    pg_shl(k, PG_B64, zoff, zoff, pg_u32(2));
    pg_reg wz = new_u64(k);
    pg_add(k, PG_U64, wz, ws, zoff);
    mma_epi ep = {.ot = PG_F32, .c = wz, .ldc = Q, .P = P, .partial = true, .native = true};
    mma_epilogue(k, &ep, rowbase, colbase, MT, NT, acc);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_mma_f(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_mma(k, PGK_GEMM_FORWARD, p, kn);
}
static int build_mma_x(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_mma(k, PGK_GEMM_BACKWARD_X, p, kn);
}
static int build_mma_w(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_mma(k, PGK_GEMM_BACKWARD_W, p, kn);
}

/* The largest split: partial sums of 64 slices at most. */
#define MMA_MAX_SPLIT 64u

static int launch_mma(unsigned layout, const uint32_t *kn, pgk_launch *out)
{
    uint32_t P, Q, R;
    pqr_host(layout, kn[MM_M], kn[MM_N], kn[MM_K], &P, &Q, &R);
    uint32_t tile = kn[MM_TILE], split = kn[MM_SPLIT];
    if (!P || !Q || !R || tile >= PGK_GEMM_TILES || split < 1 || split > MMA_MAX_SPLIT ||
        kn[MM_IN] > IN_BF16 || kn[MM_OUT] > OUT_BF16)
        return PG_ERANGE;
    const mma_cfg *c = &mma_cfgs[tile];
    uint64_t blocks = (uint64_t)pgk_ceil_div(P, c->bm) * pgk_ceil_div(Q, c->bn);
    if (blocks > 0x7fffffffu)
        return PG_ERANGE;
    *out = (pgk_launch){{(uint32_t)blocks, 1, split}, {cfg_threads(c), 1, 1},
                        c->stages * cfg_stage_bytes(c), {0, 0, 0}};
    return PG_OK;
}

static int launch_mma_f(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    return launch_mma(PGK_GEMM_FORWARD, kn, out);
}
static int launch_mma_x(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    return launch_mma(PGK_GEMM_BACKWARD_X, kn, out);
}
static int launch_mma_w(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    return launch_mma(PGK_GEMM_BACKWARD_W, kn, out);
}

/* The tile pgk_gemm_choose() picks for the sizes (on sm_80: the pick hook
 * knows no target). Only the tile: a split needs a workspace and the
 * reduce, which a plain launch of the knobs does not have. */
static void pick_mma(unsigned layout, const pgk_desc *d, uint32_t *kn)
{
    pgk_gemm_choice ch;
    if (pgk_gemm_choose((pgk_gemm_layout)layout, in_type_of(kn[MM_IN]),
                        out_type_of(kn[MM_OUT]), kn[MM_M], kn[MM_N], kn[MM_K], PG_SM_80, 0,
                        &ch) == PG_OK &&
        ch.desc == d)
        kn[MM_TILE] = ch.tile;
}
static void pick_mma_f(const pgk_desc *d, uint32_t *kn) { pick_mma(PGK_GEMM_FORWARD, d, kn); }
static void pick_mma_x(const pgk_desc *d, uint32_t *kn) { pick_mma(PGK_GEMM_BACKWARD_X, d, kn); }
static void pick_mma_w(const pgk_desc *d, uint32_t *kn) { pick_mma(PGK_GEMM_BACKWARD_W, d, kn); }

#define MM_KNOBS(mhelp, nhelp, khelp)                                                        \
    {                                                                                        \
        [MM_M] = {"m", 2048, 1, MM_MAX_DIM, mhelp, false},                                    \
        [MM_N] = {"n", 1536, 1, MM_MAX_DIM, nhelp, false},                                    \
        [MM_K] = {"k", 1536, 1, MM_MAX_DIM, khelp, false},                                    \
        [MM_IN] = {"in", IN_BF16, IN_F16, IN_BF16, "input type: 0 = f16, 1 = bf16", true},     \
        [MM_OUT] = {"out", OUT_F32, OUT_F32, OUT_BF16,                                        \
                    "output type: 0 = f32, 1 = f16, 2 = bf16", true},                         \
        [MM_TILE] = {"tile", PGK_GEMM_TILE_128x128_W4, 0, PGK_GEMM_TILES - 1,                 \
                     "block tile (P x Q, warps, k-tile): 0 = 128x128 4 32; 1 = 128x128 8 32; " \
                     "2 = 128x256 8 32; 3 = 256x128 8 32; 4 = 128x64 4 32; 5 = 64x128 4 32; " \
                     "6 = 64x64 4 32; 7 = 128x256 8 64; 8 = 256x128 8 64; 9 = 128x128 4 64; " \
                     "10, 11, 12, 13 = 128x128 4 64, 64x128 4 64, 128x64 4 64, 128x128 4 32 " \
                     "with fragments double-buffered",                                        \
                     true},                                                                   \
        [MM_SPLIT] = {"split", 1, 1, MMA_MAX_SPLIT,                                           \
                      "split-K slices (> 1: f32 partials in the workspace, then "             \
                      "gemm_mma_reduce)",                                                    \
                      false},                                                                 \
    }

static const pgk_knob mma_f_knobs[] = MM_KNOBS("rows of X and Y (tokens)",
                                               "rows of W, columns of Y (outputs)",
                                               "columns of X and W (inputs)");
static const pgk_knob mma_x_knobs[] = MM_KNOBS("rows of dY and dX (tokens)",
                                               "columns of dY, rows of W (outputs)",
                                               "columns of W and dX (inputs)");
static const pgk_knob mma_w_knobs[] = MM_KNOBS("rows of dY and X (tokens)",
                                               "columns of dY, rows of dW (outputs)",
                                               "columns of X and dW (inputs)");

static const pgk_param mma_params[] = {
    [PA_A] = {"a", PG_U64, true},      [PA_B] = {"b", PG_U64, true},
    [PA_C] = {"c", PG_U64, true},      [PA_BIAS] = {"bias", PG_U64, true},
    [PA_WS] = {"workspace", PG_U64, true}, [PA_M] = {"m", PG_U32, false},
    [PA_N] = {"n", PG_U32, false},     [PA_K] = {"k", PG_U32, false},
    [PA_FLAGS] = {"flags", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_mma_forward = {
    .name = "gemm_mma_forward",
    .summary = "Y[M,N] (+)= X[M,K] * W[N,K]^T (+ bias[N]), f16/bf16 in, f32 accumulate "
               "(mma.sync, cp.async)",
    PGK_PARAMS(mma_params),
    PGK_KNOBS(mma_f_knobs),
    .min_target = PG_SM_80,
    .build = build_mma_f,
    .launch = launch_mma_f,
    .pick = pick_mma_f,
};

const pgk_desc pgk_desc_gemm_mma_backward_x = {
    .name = "gemm_mma_backward_x",
    .summary = "dX[M,K] (+)= dY[M,N] * W[N,K] (+ bias[K]), f16/bf16 in, f32 accumulate "
               "(mma.sync, cp.async)",
    PGK_PARAMS(mma_params),
    PGK_KNOBS(mma_x_knobs),
    .min_target = PG_SM_80,
    .build = build_mma_x,
    .launch = launch_mma_x,
    .pick = pick_mma_x,
};

const pgk_desc pgk_desc_gemm_mma_backward_w = {
    .name = "gemm_mma_backward_w",
    .summary = "dW[N,K] (+)= dY[M,N]^T * X[M,K] (+ bias[K]), f16/bf16 in, f32 accumulate "
               "(mma.sync, cp.async)",
    PGK_PARAMS(mma_params),
    PGK_KNOBS(mma_w_knobs),
    .min_target = PG_SM_80,
    .build = build_mma_w,
    .launch = launch_mma_w,
    .pick = pick_mma_w,
};

/* ---------------------------------------------------------------- gemm_mma_reduce */

/* out[i] (+)= Σ_z ws[z][i] (+ bias[i % cols]), z = 0, 1, .. in order, for
 * the n = P·Q elements of the output: the split-K partials, one thread an
 * element. */
enum { RD_N, RD_COLS, RD_SPLIT, RD_OUT };
enum { RP_WS, RP_C, RP_BIAS, RP_N, RP_COLS, RP_SPLIT, RP_FLAGS };

static int build_reduce(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    pg_type ot = out_type_of(kn[RD_OUT]);
    pg_reg ws = pg_param_load(k, p[RP_WS]), c = pg_param_load(k, p[RP_C]);
    pg_reg bias = pg_param_load(k, p[RP_BIAS]);
    pg_reg nel = pg_param_load(k, p[RP_N]), cols = pg_param_load(k, p[RP_COLS]);
    pg_reg split = pg_param_load(k, p[RP_SPLIT]), flags = pg_param_load(k, p[RP_FLAGS]);
    pg_reg i = pg_global_tid_x(k);
    pg_label out = pg_label_new(k, "out");
    pg_bounds_guard(k, i, nel, out);
    pg_reg stride = new_u64(k);
    pg_mul_wide(k, PG_U32, stride, nel, pg_u32(4));
    pg_reg addr = pgk_elem_addr(k, ws, i, 4);
    pg_reg s = new_f32(k);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, s);
    pg_reg z = new_u32(k);
    pg_mov(k, PG_U32, z, pg_u32(1));
    pg_label top = pg_label_new(k, "slice"), done = pg_label_new(k, "summed");
    pg_label_bind(k, top);
    pg_reg more = cmp_u32(k, PG_CMP_LT, z, split);
    pg_bra_if(k, more, true, done);
    pg_add(k, PG_U64, addr, addr, stride);
    pg_reg x = pgk_ld_f32(k, addr);
    pg_add(k, PG_F32, s, s, x);
    pg_add(k, PG_U32, z, z, pg_u32(1));
    pg_bra(k, top);
    pg_label_bind(k, done);
    pg_reg col = new_u32(k);
    pg_rem(k, PG_U32, col, i, cols);
    pg_reg hb = cmp_u32(k, PG_CMP_NE, and_u32(k, flags, FLAG_BIAS), pg_u32(0));
    pg_reg bv = new_f32(k);
    pg_mov(k, PG_F32, bv, pg_f32(0.0f));
    pg_reg baddr = pgk_elem_addr(k, bias, col, 4);
    pg_guard(k, hb, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, baddr, 0, bv);
    pg_add(k, PG_F32, s, s, bv);
    pg_reg ha = cmp_u32(k, PG_CMP_NE, and_u32(k, flags, FLAG_ACCUMULATE), pg_u32(0));
    pg_reg ca = pgk_elem_addr(k, c, i, out_size(ot));
    pg_reg yes = new_pred(k);
    pg_setp(k, PG_CMP_EQ, PG_U32, yes, i, i);
    pg_reg v = finish_value(k, ot, s, ca, yes, ha);
    store_value(k, ot, ca, yes, v, true);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_reduce(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    if (kn[RD_N] == 0 || kn[RD_COLS] == 0 || kn[RD_SPLIT] < 1 || kn[RD_OUT] > OUT_BF16)
        return PG_ERANGE;
    return pgk_launch_1d(kn[RD_N], PGK_THREADS, out);
}

static const pgk_knob reduce_knobs[] = {
    [RD_N] = {"n", 32768, 1, UINT32_MAX, "elements of the output (P x Q)", false},
    [RD_COLS] = {"cols", 16, 1, MM_MAX_DIM, "columns of the output (Q): bias[i % cols]", false},
    [RD_SPLIT] = {"split", 8, 1, MMA_MAX_SPLIT, "partial sums to add", false},
    [RD_OUT] = {"out", OUT_F32, OUT_F32, OUT_BF16, "output type: 0 = f32, 1 = f16, 2 = bf16",
                true},
};

static const pgk_param reduce_params[] = {
    [RP_WS] = {"workspace", PG_U64, true}, [RP_C] = {"c", PG_U64, true},
    [RP_BIAS] = {"bias", PG_U64, true},    [RP_N] = {"n", PG_U32, false},
    [RP_COLS] = {"cols", PG_U32, false},   [RP_SPLIT] = {"split", PG_U32, false},
    [RP_FLAGS] = {"flags", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_mma_reduce = {
    .name = "gemm_mma_reduce",
    .summary = "C[P,Q] (+)= sum of split-K partials workspace[z][P][Q] in z order (+ bias[Q])",
    PGK_PARAMS(reduce_params),
    PGK_KNOBS(reduce_knobs),
    .min_target = PG_SM_80,
    .threads = PGK_THREADS,
    .build = build_reduce,
    .launch = launch_reduce,
};

/* ---------------------------------------------------------------- gemm_lp_simt: the fallback */

/* One thread an output, 16×16 blocks, the 16-bit inputs widened to f32 and
 * summed in r order by fma: correct on every target, slow. */
enum { LP_M, LP_N, LP_K, LP_LAYOUT, LP_IN, LP_OUT };

static int build_simt(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    unsigned layout = kn[LP_LAYOUT];
    pg_type it = in_type_of(kn[LP_IN]), ot = out_type_of(kn[LP_OUT]);
    bool native = pg_target_sm(pg_kernel_target(k)) >= 80;
    pg_kernel_set_maxntid(k, 16, 16, 1);
    pg_reg a = pg_param_load(k, p[PA_A]), b = pg_param_load(k, p[PA_B]);
    pg_reg c = pg_param_load(k, p[PA_C]), bias = pg_param_load(k, p[PA_BIAS]);
    pg_reg m = pg_param_load(k, p[PA_M]), n = pg_param_load(k, p[PA_N]);
    pg_reg kd = pg_param_load(k, p[PA_K]), flags = pg_param_load(k, p[PA_FLAGS]);
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    pg_reg q = new_u32(k), pp = new_u32(k);
    pg_mad(k, PG_U32, q, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(16),
           pg_sreg_read(k, PG_SREG_TID_X));
    pg_mad(k, PG_U32, pp, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(16),
           pg_sreg_read(k, PG_SREG_TID_Y));
    pg_label out = pg_label_new(k, "out");
    pg_bounds_guard(k, q, Q, out);
    pg_bounds_guard(k, pp, P, out);
    /* A(p, r) and B(q, r): the address of r = 0 and the step to r + 1 */
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n;
    pg_reg pa, pb;
    pg_val sa, sb;
    if (layout == PGK_GEMM_BACKWARD_W) {
        pa = pgk_elem_addr2(k, a, pg_u32(0), pg_u32(0), pp, 2);
        pg_reg s = new_u64(k);
        pg_mul_wide(k, PG_U32, s, lda, pg_u32(2));
        sa = s;
    } else {
        pa = pgk_elem_addr2(k, a, pp, lda, pg_u32(0), 2);
        sa = pg_u64(2);
    }
    if (layout == PGK_GEMM_FORWARD) {
        pb = pgk_elem_addr2(k, b, q, kd, pg_u32(0), 2);
        sb = pg_u64(2);
    } else {
        pb = pgk_elem_addr2(k, b, pg_u32(0), pg_u32(0), q, 2);
        pg_reg s = new_u64(k);
        pg_mul_wide(k, PG_U32, s, kd, pg_u32(2));
        sb = s;
    }
    pg_reg s = pgk_zero_f32(k), r = new_u32(k);
    pg_mov(k, PG_U32, r, pg_u32(0));
    pg_label top = pg_label_new(k, "r");
    pg_label_bind(k, top);
    pg_reg ha = pg_reg_new(k, PG_B16), hb = pg_reg_new(k, PG_B16);
    pg_ld(k, PG_SPACE_GLOBAL, PG_B16, pa, 0, ha);
    pg_ld(k, PG_SPACE_GLOBAL, PG_B16, pb, 0, hb);
    pg_reg fa = h_to_f32(k, it, ha), fb = h_to_f32(k, it, hb);
    pg_fma(k, PG_F32, s, fa, fb, s);
    pg_add(k, PG_U64, pa, pa, sa);
    pg_add(k, PG_U64, pb, pb, sb);
    pg_add(k, PG_U32, r, r, pg_u32(1));
    pg_reg more = cmp_u32(k, PG_CMP_LT, r, R);
    pg_bra_if(k, more, false, top);
    pg_reg hbias = cmp_u32(k, PG_CMP_NE, and_u32(k, flags, FLAG_BIAS), pg_u32(0));
    pg_reg bv = pgk_zero_f32(k);
    pg_reg baddr = pgk_elem_addr(k, bias, q, 4);
    pg_guard(k, hbias, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, baddr, 0, bv);
    pg_add(k, PG_F32, s, s, bv);
    pg_reg hacc = cmp_u32(k, PG_CMP_NE, and_u32(k, flags, FLAG_ACCUMULATE), pg_u32(0));
    pg_reg ca = pgk_elem_addr2(k, c, pp, Q, q, out_size(ot));
    pg_reg yes = new_pred(k);
    pg_setp(k, PG_CMP_EQ, PG_U32, yes, q, q);
    pg_reg v = finish_value(k, ot, s, ca, yes, hacc);
    store_value(k, ot, ca, yes, v, native);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_simt(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    uint32_t P, Q, R;
    if (kn[LP_LAYOUT] >= PGK_GEMM_LAYOUTS || kn[LP_IN] > IN_BF16 || kn[LP_OUT] > OUT_BF16)
        return PG_ERANGE;
    pqr_host(kn[LP_LAYOUT], kn[LP_M], kn[LP_N], kn[LP_K], &P, &Q, &R);
    uint32_t gy = pgk_ceil_div(P, 16);
    if (!P || !Q || !R || gy > 65535u)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(Q, 16), gy, 1}, {16, 16, 1}, 0, {0, 0, 0}};
    return PG_OK;
}

static const pgk_knob simt_knobs[] = {
    [LP_M] = {"m", 512, 1, LP_MAX_PQ, "M of the layout (tokens)", false},
    [LP_N] = {"n", 256, 1, LP_MAX_PQ, "N of the layout (outputs)", false},
    [LP_K] = {"k", 256, 1, MM_MAX_DIM, "K of the layout (inputs)", false},
    [LP_LAYOUT] = {"layout", PGK_GEMM_FORWARD, 0, PGK_GEMM_LAYOUTS - 1,
                   "0 = forward Y = X W^T, 1 = backward_x dX = dY W, 2 = backward_w dW = dY^T X",
                   true},
    [LP_IN] = {"in", IN_BF16, IN_F16, IN_BF16, "input type: 0 = f16, 1 = bf16", true},
    [LP_OUT] = {"out", OUT_F32, OUT_F32, OUT_BF16, "output type: 0 = f32, 1 = f16, 2 = bf16",
                true},
};

static const pgk_param simt_params[] = {
    [PA_A] = {"a", PG_U64, true},      [PA_B] = {"b", PG_U64, true},
    [PA_C] = {"c", PG_U64, true},      [PA_BIAS] = {"bias", PG_U64, true},
    [PA_WS] = {"workspace", PG_U64, true}, [PA_M] = {"m", PG_U32, false},
    [PA_N] = {"n", PG_U32, false},     [PA_K] = {"k", PG_U32, false},
    [PA_FLAGS] = {"flags", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_lp_simt = {
    .name = "gemm_lp_simt",
    .summary = "the 16-bit GEMM layouts one thread an output (targets without mma.sync)",
    PGK_PARAMS(simt_params),
    PGK_KNOBS(simt_knobs),
    .min_target = PG_SM_70,
    .build = build_simt,
    .launch = launch_simt,
};

/* ---------------------------------------------------------------- the choice per shape */

/* A cost model of the mma.sync kernels, to rank the candidates (tile,
 * split) of one shape. A tile's SM rate is thr (relative) with occ blocks
 * resident; with b < occ blocks on an SM it gets b/occ of it. A block does
 * its k-tiles plus COST_FIXED_KTILES of prologue and epilogue; blocks run
 * in waves of sm_count·min(occ, blocks per SM), a partial wave costing a
 * whole one. A wave also moves its operand tiles (mostly L2 hits) and
 * writes its outputs (HBM): it takes the longer of the two. Split-K adds
 * the partials' traffic and a launch of gemm_mma_reduce.
 *
 * Where the numbers come from: occ is each tile's register and shared
 * memory limit on sm_90 (ptxas -v). thr and the COST_ constants were
 * fitted (a random search maximizing the geometric mean of picked / best
 * throughput) to `bench_gemm --sweep` on an H200: every tile and split of
 * the benchmark's 27 shapes and layouts, bf16 in and out. The model's
 * picks reach 0.97 of the best measured configuration on average, 0.87
 * at worst; near those shapes on sm_90, measured_best below gives the
 * measured best itself. Other GPUs use the same model, less the tiles
 * whose shared memory they lack. */
typedef struct tile_model {
    double thr;   /* SM throughput with occ blocks resident, relative */
    unsigned occ; /* blocks an SM holds at once */
} tile_model;

static const tile_model tile_models[PGK_GEMM_TILES] = {
    [PGK_GEMM_TILE_128x128_W4] = {0.688, 2},
    [PGK_GEMM_TILE_128x128_W8] = {0.465, 2},
    [PGK_GEMM_TILE_128x256_W8] = {0.373, 1},
    [PGK_GEMM_TILE_256x128_W8] = {0.553, 1},
    [PGK_GEMM_TILE_128x64_W4] = {0.362, 3},
    [PGK_GEMM_TILE_64x128_W4] = {0.699, 3},
    [PGK_GEMM_TILE_64x64_W4] = {1.160, 6},
    [PGK_GEMM_TILE_128x256_W8_K64] = {0.300, 1},
    [PGK_GEMM_TILE_256x128_W8_K64] = {0.635, 1},
    [PGK_GEMM_TILE_128x128_W4_K64] = {0.371, 2},
    [PGK_GEMM_TILE_128x128_W4_K64_DB] = {0.882, 2},
    [PGK_GEMM_TILE_64x128_W4_K64_DB] = {0.430, 3},
    [PGK_GEMM_TILE_128x64_W4_K64_DB] = {0.378, 3},
    [PGK_GEMM_TILE_128x128_W4_DB] = {0.627, 2},
};

/* Fitted with the rates above (the occupancies are the register and
 * shared-memory limits on sm_90, not fitted). */
#define COST_HBM_BYTE 2.537
#define COST_L2_BYTE 0.351
#define COST_LAUNCH 2.115e7
#define COST_FIXED_KTILES 0.0

/* The measured best (tile, split) of each shape and layout of bench_gemm
 * --sweep on an H200 (bf16 in and out), used on sm_90 devices for shapes
 * within a factor 1.5 of one of them in each of P, Q and R; the model
 * above covers the rest. */
typedef struct measured {
    uint8_t layout, tile, split;
    uint32_t P, Q, R;
} measured;

static const measured measured_best[] = {
    /* Qwen2-1.5B at 2048 tokens: q/o, k/v, gate/up, down, LM head */
    {0, 5, 1, 2048, 1536, 1536},  {1, 5, 1, 2048, 1536, 1536},  {2, 11, 1, 1536, 1536, 2048},
    {0, 11, 2, 2048, 256, 1536},  {1, 6, 1, 2048, 1536, 256},   {2, 11, 2, 256, 1536, 2048},
    {0, 10, 1, 2048, 8960, 1536}, {1, 13, 2, 2048, 1536, 8960}, {2, 10, 1, 8960, 1536, 2048},
    {0, 10, 2, 2048, 1536, 8960}, {1, 10, 1, 2048, 8960, 1536}, {2, 10, 1, 1536, 8960, 2048},
    {0, 9, 1, 2048, 151936, 1536}, {1, 0, 4, 2048, 1536, 151936},
    {2, 10, 1, 151936, 1536, 2048},
    /* LoRA rank 16: (2048, 16, 1536) and (2048, 1536, 16) */
    {0, 6, 4, 2048, 16, 1536},    {1, 6, 1, 2048, 1536, 16},    {2, 6, 4, 16, 1536, 2048},
    {0, 6, 1, 2048, 1536, 16},    {1, 6, 4, 2048, 16, 1536},    {2, 6, 8, 1536, 16, 2048},
    /* 4096^3, 8192^3 */
    {0, 9, 1, 4096, 4096, 4096},  {1, 9, 1, 4096, 4096, 4096},  {2, 9, 1, 4096, 4096, 4096},
    {0, 9, 1, 8192, 8192, 8192},  {1, 9, 1, 8192, 8192, 8192},  {2, 9, 1, 8192, 8192, 8192},
};

/* |log2(a / b)| */
static double log_ratio(uint32_t a, uint32_t b) { return fabs(log2((double)a / b)); }

/* The nearest measured shape of the layout within a factor 1.5 in each
 * size, or NULL. */
static const measured *nearest_measured(unsigned layout, uint32_t P, uint32_t Q, uint32_t R)
{
    const measured *best = NULL;
    double bd = 0;
    for (size_t i = 0; i < sizeof measured_best / sizeof measured_best[0]; i++) {
        const measured *e = &measured_best[i];
        double dp = log_ratio(P, e->P), dq = log_ratio(Q, e->Q), dr = log_ratio(R, e->R);
        const double lim = 0.585; /* log2(1.5) */
        if (e->layout != layout || dp > lim || dq > lim || dr > lim)
            continue;
        if (!best || dp + dq + dr < bd) {
            best = e;
            bd = dp + dq + dr;
        }
    }
    return best;
}

static double mma_cost(const mma_cfg *c, const tile_model *tm, uint32_t P, uint32_t Q,
                       uint32_t R, uint32_t split, unsigned sms, unsigned out_bytes)
{
    double blocks = (double)pgk_ceil_div(P, c->bm) * pgk_ceil_div(Q, c->bn) * split;
    double bps = ceil(blocks / sms);
    if (bps > tm->occ)
        bps = tm->occ;
    double waves = ceil(blocks / (sms * bps));
    double ktiles = ceil((double)pgk_ceil_div(R, c->bk) / split) + COST_FIXED_KTILES;
    double flops = (double)c->bm * c->bn * c->bk * 2.0 * ktiles;
    double compute = flops * tm->occ / tm->thr; /* one block at its share of the SM */
    double in_bytes = (double)(c->bm + c->bn) * c->bk * 2.0 * ktiles;
    double out_b = (double)c->bm * c->bn * (split > 1 ? 4.0 : out_bytes);
    double mem = (in_bytes * COST_L2_BYTE + out_b * COST_HBM_BYTE) * sms * bps;
    double t = waves * (compute > mem ? compute : mem);
    if (split > 1)
        t += COST_LAUNCH + (double)P * Q * (4.0 * split + out_bytes) * COST_HBM_BYTE;
    return t;
}

static unsigned default_sms(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 ? 108 : sm == 86 ? 84 : sm == 87 ? 16 : sm == 89 ? 128 : sm == 90 ? 132
           : sm >= 120 ? 84 : 132;
}

/* Shared memory a block may opt in to on the target's devices: sm_80 and
 * sm_87 (A100, Orin) 163 KiB, sm_90 and sm_100 227 KiB, the others
 * (sm_86, sm_89, sm_120: GeForce-class) 99 KiB. */
static uint32_t smem_limit(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 || sm == 87 ? 163u * 1024 : sm == 90 || sm == 100 ? 227u * 1024 : 99u * 1024;
}

static int out_knob(pg_type t) { return t == PG_F32 ? OUT_F32 : t == PG_F16 ? OUT_F16 : OUT_BF16; }

int pgk_gemm_choose(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                    uint32_t n, uint32_t k, pg_target target, unsigned sm_count,
                    pgk_gemm_choice *out)
{
    if (!out)
        return PG_EINVAL;
    memset(out, 0, sizeof *out);
    if ((unsigned)layout >= PGK_GEMM_LAYOUTS || !pg_target_name(target))
        return PG_EINVAL;
    if (!m || !n || !k || m > MM_MAX_DIM || n > MM_MAX_DIM || k > MM_MAX_DIM)
        return PG_ERANGE;
    bool f32 = in_type == PG_F32;
    if (f32 ? out_type != PG_F32
            : (in_type != PG_F16 && in_type != PG_BF16) ||
                  (out_type != PG_F32 && out_type != PG_F16 && out_type != PG_BF16))
        return PG_EINVAL;
    out->split = 1;
    out->m = m;
    out->n = n;
    out->k = k;
    if (f32) {
        /* the f32 kernels' own (m, n, k): forward is grad_A = dC·Bᵀ with
         * B = W, backward_x is C = A·B with B = W, backward_w is
         * grad_B = Aᵀ·dC with A = dY: all three (M, K, N) */
        static const pgk_desc *const f32_desc[PGK_GEMM_LAYOUTS] = {
            &pgk_desc_gemm_backward_a, &pgk_desc_gemm_forward, &pgk_desc_gemm_backward_b};
        out->desc = f32_desc[layout];
        out->n = k;
        out->k = n;
    } else if (pg_target_sm(target) < 80) {
        out->desc = &pgk_desc_gemm_lp_simt;
    } else if (target == PG_SM_90A && (out_type == PG_F32 || out_type == in_type) &&
               m >= PGK_GEMM_SM90_MIN_DIM && n >= PGK_GEMM_SM90_MIN_DIM &&
               k >= PGK_GEMM_SM90_MIN_DIM && n % 8 == 0 && k % 8 == 0) {
        /* wgmma + TMA: on an H200 at M = 2048 it ran q/o 475 TFLOP/s
         * forward against mma.sync's 271, k/v 193 against 131, gate/up
         * 567 against 359, down 717 against 371 (docs/runtime.md); the
         * thin shapes it would leave idle stay below. */
        uint32_t P, Q, R;
        pqr_host(layout, m, n, k, &P, &Q, &R);
        return pgk_gemm_sm90_choice(layout, in_type, out_type, P, Q, R,
                                    sm_count ? sm_count : default_sms(target), out);
    } else {
        static const pgk_desc *const mma_desc[PGK_GEMM_LAYOUTS] = {
            &pgk_desc_gemm_mma_forward, &pgk_desc_gemm_mma_backward_x,
            &pgk_desc_gemm_mma_backward_w};
        out->desc = mma_desc[layout];
    }
    int rc = pgk_knobs_default(out->desc, &out->knobs);
    if (rc)
        return rc;
    if (out->desc == &pgk_desc_gemm_lp_simt) {
        out->knobs.v[LP_M] = m;
        out->knobs.v[LP_N] = n;
        out->knobs.v[LP_K] = k;
        out->knobs.v[LP_LAYOUT] = layout;
        out->knobs.v[LP_IN] = in_type == PG_BF16 ? IN_BF16 : IN_F16;
        out->knobs.v[LP_OUT] = (uint32_t)out_knob(out_type);
        if (m > LP_MAX_PQ || n > LP_MAX_PQ)
            return PG_ERANGE; /* the fallback's rows of blocks */
        return PG_OK;
    }
    if (f32) {
        out->knobs.v[GEMM_M] = out->m;
        out->knobs.v[GEMM_N] = out->n;
        out->knobs.v[GEMM_K] = out->k;
        if (out->knobs.v[GEMM_M] > out->desc->knobs[GEMM_M].max ||
            out->knobs.v[GEMM_K] > out->desc->knobs[GEMM_K].max)
            return PG_ERANGE;
        pgk_pick(out->desc, &out->knobs);
        return PG_OK;
    }
    uint32_t P, Q, R;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    unsigned sms = sm_count ? sm_count : default_sms(target);
    unsigned ob = out_type == PG_F32 ? 4 : 2;
    double best = 0;
    uint32_t bt = 0, bs = 1;
    static const uint32_t splits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    for (unsigned t = 0; t < PGK_GEMM_TILES; t++) {
        const mma_cfg *c = &mma_cfgs[t];
        if (pgk_ceil_div(P, c->bm) * (uint64_t)pgk_ceil_div(Q, c->bn) > 0x7fffffffu ||
            c->stages * cfg_stage_bytes(c) > smem_limit(target))
            continue;
        for (unsigned i = 0; i < sizeof splits / sizeof splits[0]; i++) {
            uint32_t s = splits[i];
            /* a slice of 4 k-tiles at least; partials within 1 GiB */
            if (s > 1 && ((uint64_t)pgk_ceil_div(R, 32) < 4u * s ||
                          (uint64_t)P * Q * 4u * s > (1ull << 30)))
                break;
            double cost = mma_cost(c, &tile_models[t], P, Q, R, s, sms, ob);
            if (best == 0 || cost < best * 0.999) {
                best = cost;
                bt = t;
                bs = s;
            }
        }
    }
    const measured *me = pg_target_sm(target) == 90 ? nearest_measured(layout, P, Q, R) : NULL;
    if (me && (me->split == 1 || ((uint64_t)pgk_ceil_div(R, 32) >= 4u * me->split &&
                                  (uint64_t)P * Q * 4u * me->split <= (1ull << 30)))) {
        bt = me->tile;
        bs = me->split;
    }
    out->tile = bt;
    out->split = bs;
    out->knobs.v[MM_M] = m;
    out->knobs.v[MM_N] = n;
    out->knobs.v[MM_K] = k;
    out->knobs.v[MM_IN] = in_type == PG_BF16 ? IN_BF16 : IN_F16;
    out->knobs.v[MM_OUT] = (uint32_t)out_knob(out_type);
    out->knobs.v[MM_TILE] = bt;
    out->knobs.v[MM_SPLIT] = bs;
    if (bs > 1) {
        out->reduce = &pgk_desc_gemm_mma_reduce;
        pgk_knobs_default(out->reduce, &out->reduce_knobs);
        out->reduce_knobs.v[RD_N] = P * Q; /* at most 2^28: the workspace bound above */
        out->reduce_knobs.v[RD_COLS] = Q;
        out->reduce_knobs.v[RD_SPLIT] = bs;
        out->reduce_knobs.v[RD_OUT] = (uint32_t)out_knob(out_type);
        out->workspace_bytes = (uint64_t)P * Q * 4u * bs;
    }
    return PG_OK;
}

bool pgk_gemm_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                       pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                       uint32_t *k)
{
    if (!d || !kn)
        return false;
    const uint32_t *v = kn->v;
    if (d == &pgk_desc_gemm_mma_forward || d == &pgk_desc_gemm_mma_backward_x ||
        d == &pgk_desc_gemm_mma_backward_w || d == &pgk_desc_gemm_lp_simt) {
        bool simt = d == &pgk_desc_gemm_lp_simt;
        *layout = simt ? (pgk_gemm_layout)(v[LP_LAYOUT] < PGK_GEMM_LAYOUTS ? v[LP_LAYOUT] : 0)
                  : d == &pgk_desc_gemm_mma_forward  ? PGK_GEMM_FORWARD
                  : d == &pgk_desc_gemm_mma_backward_x ? PGK_GEMM_BACKWARD_X
                                                       : PGK_GEMM_BACKWARD_W;
        *in_type = in_type_of(v[simt ? LP_IN : MM_IN]);
        *out_type = out_type_of(v[simt ? LP_OUT : MM_OUT]);
        *m = v[MM_M];
        *n = v[MM_N];
        *k = v[MM_K];
        return true;
    }
    if (d == &pgk_desc_gemm_sm90)
        return pgk_gemm_sm90_describe(kn, layout, in_type, out_type, m, n, k);
    static const pgk_desc *const f32_desc[PGK_GEMM_LAYOUTS] = {
        &pgk_desc_gemm_backward_a, &pgk_desc_gemm_forward, &pgk_desc_gemm_backward_b};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        if (d == f32_desc[l]) {
            *layout = (pgk_gemm_layout)l;
            *in_type = *out_type = PG_F32;
            *m = v[GEMM_M];
            *n = v[GEMM_K];
            *k = v[GEMM_N];
            return true;
        }
    return false;
}
