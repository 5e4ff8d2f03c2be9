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
 * gemm_mma_<layout> (sm_80+, this file): mma.sync.m16n8k16 fed by ldmatrix
 * from a cp.async pipeline; its epilogue is in gemm_mma_out.c.
 * gemm_mma_reduce (gemm_mma_reduce.c) sums split-K partials in a fixed
 * order. gemm_lp_simt (gemm_mma_reduce.c, sm_70+): one thread an output,
 * for targets without the tensor-core instructions. gemm_mma_f16.c has
 * the seed's gemm_f16_backward_a; gemm_mma_choose.c the family's choice
 * of kernel, tile and split for a shape.
 */
#include "gemm_mma.h"

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
    pg_reg s = cpr == 4 ? pgv_and(k, PG_B32, pgv_shr(k, PG_U32, row, pg_u32(1)), pg_u32(3))
                        : pgv_and(k, PG_B32, row, pg_u32(7));
    pg_reg x = pg_reg_new(k, PG_U32);
    pg_xor(k, PG_B32, x, c, s);
    return x;
}

/* max(a - b, 0) */
static pg_reg sub_sat(pg_kernel *k, pg_reg a, pg_reg b)
{
    pg_reg m = pg_reg_new(k, PG_U32), d = pg_reg_new(k, PG_U32);
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
    pg_reg c = pgv_and(k, PG_B32, tid, pg_u32(o->cpr - 1));
    pg_reg row0 = pgv_shr(k, PG_U32, tid, pg_u32(log2u(o->cpr)));
    o->jstep = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, o->jstep, ld, pg_u32(o->rstep * 2));
    if (trans) {
        o->col = pg_reg_new(k, PG_U32);
        pg_mad(k, PG_U32, o->col, c, pg_u32(8), p0);
        pg_reg rem = sub_sat(k, ext, o->col);
        pg_min(k, PG_U32, rem, rem, pg_u32(8));
        o->cin = pgv_setp(k, PG_CMP_NE, PG_U32, rem, pg_u32(0));
        o->cbytes = pgv_shl(k, PG_B32, rem, pg_u32(1));
        pg_reg st = pg_reg_new(k, PG_U64);
        pg_mul_wide(k, PG_U32, st, ld, pg_u32(bk * 2));
        o->step = st;
        o->ridx = pgv_add(k, PG_U32, rbeg, row0);
        o->ptr = pgk_elem_addr2(k, base, o->ridx, ld, o->col, 2);
    } else {
        o->col = pg_reg_new(k, PG_U32);
        pg_mad(k, PG_U32, o->col, c, pg_u32(8), rbeg);
        o->step = pg_u64(bk * 2);
        pg_reg p = pgv_add(k, PG_U32, p0, row0);
        o->left = sub_sat(k, ext, p);
        o->ptr = pgk_elem_addr2(k, base, p, ld, o->col, 2);
    }
    pg_reg pc = swizzle(k, row0, c, o->cpr);
    o->dst = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, o->dst, row0, pg_u32(o->rb), pg_u32(soff));
    pg_mad(k, PG_U32, o->dst, pc, pg_u32(16), o->dst);
}

/* Whether chunk j's row is inside: j·rstep < left. */
static pg_reg chunk_in(pg_kernel *k, const mma_operand *o, pg_reg left, unsigned j)
{
    return pgv_setp(k, PG_CMP_LT, PG_U32, pg_u32(j * o->rstep), left);
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
        colin = pgv_setp(k, PG_CMP_LT, PG_U32, o->col, rend);
        pg_reg rem = sub_sat(k, rend, o->col);
        pg_min(k, PG_U32, rem, rem, pg_u32(8));
        bytes = pgv_shl(k, PG_B32, rem, pg_u32(1));
    }
    pg_reg dst = pgv_add(k, PG_U32, stage, o->dst);
    pg_reg src = pg_reg_new(k, PG_U64);
    pg_mov(k, PG_U64, src, o->ptr);
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg ok = pgv_and(k, PG_PRED, chunk_in(k, o, left, j), o->trans ? o->cin : colin);
        pg_reg n = pg_reg_new(k, PG_U32), addr = pg_reg_new(k, PG_U64);
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
    pg_reg dst = pgv_add(k, PG_U32, stage, o->dst);
    pg_reg src = pg_reg_new(k, PG_U64);
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
    pg_reg ra = f->ta ? pg_none() : pgv_add(k, PG_U32, rstage, f->a_off[s]);
    for (unsigned mt = 0; mt < f->MT; mt++) {
        if (f->ta)
            pg_ldmatrix(k, 4, true, af[mt], pgv_add(k, PG_U32, rstage, f->a_off[mt]),
                        s * 16 * f->arb);
        else
            pg_ldmatrix(k, 4, false, af[mt], ra, mt * 16 * f->arb);
    }
    pg_reg rb = f->tb ? pg_none() : pgv_add(k, PG_U32, rstage, f->b_off[s]);
    for (unsigned pr = 0; pr < f->NT / 2; pr++) {
        pg_reg d[4] = {bf[2 * pr][0], bf[2 * pr][1], bf[2 * pr + 1][0], bf[2 * pr + 1][1]};
        if (f->tb)
            pg_ldmatrix(k, 4, true, d, pgv_add(k, PG_U32, rstage, f->b_off[pr]), s * 16 * f->brb);
        else
            pg_ldmatrix(k, 4, false, d, rb, pr * 16 * f->brb);
    }
}

/* The output params mma_store writes through. */
typedef struct mma_out {
    pg_reg c, bias, ws, flags, P, Q;
} mma_out;

/* What a k-tile loop reads: the stages, the operands' copies, where the
 * fragments come from, and the accumulators it adds into. */
typedef struct mma_loop {
    pg_type it;
    unsigned S, SB, KS, MT, NT; /* stages, bytes a stage, k-steps, mma tiles a warp */
    pg_reg sbase, wstage, rstage, rend, vec;
    const mma_operand *A, *B;
    const frag_src *fs;
    pg_label top;
    pg_reg (*acc)[MMA_MAX_NT][4];
} mma_loop;

/* One k-tile a turn, each k-step's fragments loaded just before its mma's. */
static void kloop_single(pg_kernel *k, const mma_loop *l)
{
    const unsigned S = l->S, SB = l->SB, KS = l->KS, MT = l->MT, NT = l->NT;
    const pg_reg sbase = l->sbase, wstage = l->wstage, rstage = l->rstage;
    const mma_operand *A = l->A, *B = l->B;
    pg_reg(*acc)[MMA_MAX_NT][4] = l->acc;
    pg_label_bind(k, l->top);
    pg_cp_async_wait(k, S - 2);
    pg_bar_sync(k, 0);
    pg_comment(k, "copy k-tile t+stages-1 into the stage k-tile t-1 used");
    mma_copy_tile(k, A, B, wstage, l->rend, l->vec);
    pg_comment(k, "the k-steps of mma tiles out of the stage of k-tile t");
    for (unsigned s = 0; s < KS; s++) {
        pg_reg af[MMA_MAX_MT][4], bf[MMA_MAX_NT][2];
        new_frags(k, MT, NT, af, bf);
        load_frags(k, l->fs, rstage, s, af, bf);
        for (unsigned mt = 0; mt < MT; mt++)
            for (unsigned nt = 0; nt < NT; nt++)
                pg_mma_m16n8k16_f32(k, l->it, acc[mt][nt], af[mt], bf[nt], acc[mt][nt]);
    }
    pgk_stage_next(k, wstage, sbase, SB, S * SB);
    pgk_stage_next(k, rstage, sbase, SB, S * SB);
}

/* Fragments double-buffered: k-step s+1's (the next k-tile's first,
 * after the barrier, at the last k-step) load while k-step s multiplies. */
static void kloop_double(pg_kernel *k, const mma_loop *l)
{
    const unsigned S = l->S, SB = l->SB, KS = l->KS, MT = l->MT, NT = l->NT;
    const pg_reg sbase = l->sbase, wstage = l->wstage, rstage = l->rstage;
    const mma_operand *A = l->A, *B = l->B;
    pg_reg(*acc)[MMA_MAX_NT][4] = l->acc;
    pg_reg af[2][MMA_MAX_MT][4], bf[2][MMA_MAX_NT][2];
    new_frags(k, MT, NT, af[0], bf[0]);
    new_frags(k, MT, NT, af[1], bf[1]);
    pg_cp_async_wait(k, S - 2);
    pg_bar_sync(k, 0);
    load_frags(k, l->fs, rstage, 0, af[0], bf[0]);
    pg_label_bind(k, l->top);
    pg_comment(k, "copy k-tile t+stages-1 into the stage k-tile t-1 used");
    mma_copy_tile(k, A, B, wstage, l->rend, l->vec);
    for (unsigned s = 0; s < KS; s++) {
        if (s == KS - 1) {
            pg_comment(k, "k-tile t+1 in shared memory; every warp done with k-tile t");
            pg_cp_async_wait(k, S - 2);
            pg_bar_sync(k, 0);
            pgk_stage_next(k, wstage, sbase, SB, S * SB);
            pgk_stage_next(k, rstage, sbase, SB, S * SB);
        }
        unsigned nx = (s + 1) % 2;
        load_frags(k, l->fs, rstage, (s + 1) % KS, af[nx], bf[nx]);
        for (unsigned mt = 0; mt < MT; mt++)
            for (unsigned nt = 0; nt < NT; nt++)
                pg_mma_m16n8k16_f32(k, l->it, acc[mt][nt], af[s % 2][mt], bf[s % 2][nt],
                                    acc[mt][nt]);
    }
}

/* The ldmatrix addresses of the warp's fragments, offsets in a stage:
 * a_off one a k-step (A r-major) or one a 16-row tile (transposed); b_off
 * one a k-step or one a pair of 8-column tiles. */
static void frag_offsets(pg_kernel *k, const mma_cfg *cfg, bool ta, bool tb, pg_reg lane,
                         pg_reg wpi, pg_reg wqi, const mma_operand *A, const mma_operand *B,
                         pg_reg *a_off, pg_reg *b_off)
{
    const unsigned WM = cfg->bm / cfg->wm, WN = cfg->bn / cfg->wn;
    const unsigned MT = WM / 16, NT = WN / 8, KS = cfg->bk / 16;
    const unsigned boff = cfg->bm * cfg->bk * 2;
    pg_comment(k, "ldmatrix row addresses: lane gives row lane%8 of matrix lane/8");
    pg_reg qd = pgv_shr(k, PG_U32, lane, pg_u32(3)), r8 = pgv_and(k, PG_B32, lane, pg_u32(7));
    pg_reg q0b = pgv_and(k, PG_B32, qd, pg_u32(1)), q1b = pgv_shr(k, PG_U32, qd, pg_u32(1));
    /* A: r-major: one address a k-step (the mt step is 16 rows: the swizzle
     * repeats); transposed: one a 16-row tile (the k-step is 16 rows). */
    if (!ta) {
        pg_reg row = pg_reg_new(k, PG_U32);
        pg_mad(k, PG_U32, row, wpi, pg_u32(WM), r8);
        pg_mad(k, PG_U32, row, q0b, pg_u32(8), row);
        for (unsigned s = 0; s < KS; s++) {
            pg_reg ch = pgv_add(k, PG_U32, q1b, pg_u32(2 * s));
            pg_reg pc = swizzle(k, row, ch, A->cpr);
            a_off[s] = pgv_shl(k, PG_B32, row, pg_u32(log2u(A->rb)));
            pg_mad(k, PG_U32, a_off[s], pc, pg_u32(16), a_off[s]);
        }
    } else {
        pg_reg row = pg_reg_new(k, PG_U32);
        pg_mad(k, PG_U32, row, q1b, pg_u32(8), r8);
        for (unsigned mt = 0; mt < MT; mt++) {
            pg_reg pp = pg_reg_new(k, PG_U32);
            pg_mad(k, PG_U32, pp, wpi, pg_u32(WM), pg_u32(mt * 16));
            pg_mad(k, PG_U32, pp, q0b, pg_u32(8), pp);
            pg_reg pc = swizzle(k, row, pgv_shr(k, PG_U32, pp, pg_u32(3)), A->cpr);
            a_off[mt] = pgv_mul(k, PG_U32, row, pg_u32(A->rb));
            pg_mad(k, PG_U32, a_off[mt], pc, pg_u32(16), a_off[mt]);
        }
    }
    if (!tb) {
        pg_reg row = pg_reg_new(k, PG_U32);
        pg_mad(k, PG_U32, row, wqi, pg_u32(WN), r8);
        pg_mad(k, PG_U32, row, q1b, pg_u32(8), row);
        for (unsigned s = 0; s < KS; s++) {
            pg_reg ch = pgv_add(k, PG_U32, q0b, pg_u32(2 * s));
            pg_reg pc = swizzle(k, row, ch, B->cpr);
            b_off[s] = pgv_shl(k, PG_B32, row, pg_u32(log2u(B->rb)));
            pg_mad(k, PG_U32, b_off[s], pc, pg_u32(16), b_off[s]);
            pg_add(k, PG_U32, b_off[s], b_off[s], pg_u32(boff));
        }
    } else {
        pg_reg row = pg_reg_new(k, PG_U32);
        pg_mad(k, PG_U32, row, q0b, pg_u32(8), r8);
        for (unsigned pr = 0; pr < NT / 2; pr++) {
            pg_reg q = pg_reg_new(k, PG_U32);
            pg_mad(k, PG_U32, q, wqi, pg_u32(WN), pg_u32(pr * 16));
            pg_mad(k, PG_U32, q, q1b, pg_u32(8), q);
            pg_reg pc = swizzle(k, row, pgv_shr(k, PG_U32, q, pg_u32(3)), B->cpr);
            b_off[pr] = pgv_mul(k, PG_U32, row, pg_u32(B->rb));
            pg_mad(k, PG_U32, b_off[pr], pc, pg_u32(16), b_off[pr]);
            pg_add(k, PG_U32, b_off[pr], b_off[pr], pg_u32(boff));
        }
    }
}

/* The warp's tiles out: through the epilogue (accumulate, bias, the output
 * type) into C, or, split over K (nz > 1), as f32 partial sums into
 * workspace[z][P][Q] for gemm_mma_reduce. */
static void mma_store(pg_kernel *k, const mma_cfg *cfg, pg_type ot, const mma_out *o, pg_reg lane,
                      pg_reg wpi, pg_reg wqi, pg_reg p0, pg_reg q0, const pgk_split *kr,
                      pg_reg (*acc)[MMA_MAX_NT][4])
{
    const unsigned WM = cfg->bm / cfg->wm, WN = cfg->bn / cfg->wn;
    const unsigned MT = WM / 16, NT = WN / 8;
    const pg_reg c = o->c, bias = o->bias, ws = o->ws, flags = o->flags, P = o->P, Q = o->Q;
    const pg_reg z = kr->z, nz = kr->nz;
    pg_comment(k, "d0,d1 at (row g, cols 2t, 2t+1), d2,d3 at row g+8, of each 16x8 tile");
    pg_reg g = pgv_shr(k, PG_U32, lane, pg_u32(2)), t4 = pgv_and(k, PG_B32, lane, pg_u32(3));
    pg_reg rowbase = pg_reg_new(k, PG_U32), colbase = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, rowbase, wpi, pg_u32(WM), p0);
    pg_add(k, PG_U32, rowbase, rowbase, g);
    pg_mad(k, PG_U32, colbase, wqi, pg_u32(WN), q0);
    pg_mad(k, PG_U32, colbase, t4, pg_u32(2), colbase);
    pg_label partial = pg_label_new(k, "partial");
    pg_reg split = pgv_setp(k, PG_CMP_GT, PG_U32, nz, pg_u32(1));
    pg_bra_if(k, split, false, partial);
    pg_reg do_acc = flag_set(k, flags, FLAG_ACCUMULATE);
    pg_reg do_bias = flag_set(k, flags, FLAG_BIAS);
    mma_epi e = {.ot = ot, .c = c, .ldc = Q, .P = P, .bias = bias,
                 .do_acc = do_acc, .do_bias = do_bias, .native = true};
    pgk_mma_epilogue(k, &e, rowbase, colbase, MT, NT, acc);
    pg_ret(k);
    pg_label_bind(k, partial);
    pg_comment(k, "split-K: f32 partial sums into workspace[z][P][Q]");
    pg_reg pq = pg_reg_new(k, PG_U64), zoff = pg_reg_new(k, PG_U64), z64 = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, pq, P, Q);
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, z64, z);
    pg_mul(k, PG_U64, zoff, pq, z64);
    pg_shl(k, PG_B64, zoff, zoff, pg_u32(2));
    pg_reg wz = pg_reg_new(k, PG_U64);
    pg_add(k, PG_U64, wz, ws, zoff);
    mma_epi ep = {.ot = PG_F32, .c = wz, .ldc = Q, .P = P, .partial = true, .native = true};
    pgk_mma_epilogue(k, &ep, rowbase, colbase, MT, NT, acc);
    pg_ret(k);
}

static int build_mma(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    unsigned layout = d->variant;
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
    pg_reg sbase = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, sbase, pg_shared_addr(smem));

    pg_reg p0, q0;
    pgk_gemm_block_tile(k, cfg->bm, cfg->bn, MMA_GROUP, P, Q, &p0, &q0);

    const unsigned BK = cfg->bk, KS = BK / 16;
    const pgk_split kr =
        pgk_gemm_split(k, BK, R, "split-K: k-tiles [z*per, z*per + per) of ceil(R/bk)");
    pg_reg rbeg = kr.rbeg, rend = kr.rend, ntiles = kr.ntiles;

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg wpi = pgv_and(k, PG_B32, warp, pg_u32(cfg->wm - 1));
    pg_reg wqi = pgv_shr(k, PG_U32, warp, pg_u32(log2u(cfg->wm)));

    pg_comment(k, "16-byte copies need aligned bases and leading dimensions % 8 == 0 (uniform)");
    pg_reg veca = pgk_vectors_ok(k, a, lda, 8, 2);
    pg_reg vecb = pgk_vectors_ok(k, b, ldb, 8, 2);
    pg_reg vec = pgv_and(k, PG_PRED, veca, vecb);
    mma_operand A, B;
    mma_operand_init(k, &A, ta, cfg->bm, BK, T, a, lda, P, p0, rbeg, tid, 0);
    mma_operand_init(k, &B, tb, cfg->bn, BK, T, b, ldb, Q, q0, rbeg, tid, cfg->bm * BK * 2);

    pg_reg a_off[MMA_MAX_MT > MMA_MAX_KS ? MMA_MAX_MT : MMA_MAX_KS], b_off[MMA_MAX_NT];
    frag_offsets(k, cfg, ta, tb, lane, wpi, wqi, &A, &B, a_off, b_off);

    pg_reg acc[MMA_MAX_MT][MMA_MAX_NT][4];
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned nt = 0; nt < NT; nt++)
            for (unsigned e = 0; e < 4; e++) {
                acc[mt][nt][e] = pg_reg_new(k, PG_F32);
                pg_mov(k, PG_F32, acc[mt][nt][e], pg_f32(0.0f));
            }

    pg_comment(k, "k-tiles 0 .. stages-2 into stages 0 .. stages-2");
    pg_reg wstage = pg_reg_new(k, PG_U32), rstage = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, wstage, sbase);
    for (unsigned s = 0; s + 1 < S; s++) {
        mma_copy_tile(k, &A, &B, wstage, rend, vec);
        pg_add(k, PG_U32, wstage, wstage, pg_u32(SB));
    }
    pg_mov(k, PG_U32, rstage, sbase);

    const frag_src fs = {.ta = ta, .tb = tb, .MT = MT, .NT = NT, .arb = A.rb, .brb = B.rb,
                         .a_off = a_off, .b_off = b_off};
    pg_reg t = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_label top = pg_label_new(k, "ktile");
    const mma_loop ml = {.it = it, .S = S, .SB = SB, .KS = KS, .MT = MT, .NT = NT,
                         .sbase = sbase, .wstage = wstage, .rstage = rstage, .rend = rend,
                         .vec = vec, .A = &A, .B = &B, .fs = &fs, .top = top, .acc = acc};
    if (!cfg->db)
        kloop_single(k, &ml);
    else
        kloop_double(k, &ml);
    pgk_loop_back(k, t, ntiles, top);
    pg_cp_async_wait(k, 0);

    const mma_out mo = {.c = c, .bias = bias, .ws = ws, .flags = flags, .P = P, .Q = Q};
    mma_store(k, cfg, out_type_of(knobs[MM_OUT]), &mo, lane, wpi, wqi, p0, q0, &kr, acc);
    return pg_kernel_error(k);
}

static int launch_mma(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    uint32_t P, Q, R;
    pqr_host(d->variant, kn[MM_M], kn[MM_N], kn[MM_K], &P, &Q, &R);
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

/* The tile the family's choice makes for the sizes (on sm_80: the pick
 * hook knows no target), as pgk_gemm_choose() would; a shape it gives to
 * gemm_thin keeps its tile. Only the tile: a split needs a workspace and
 * the reduce, which a plain launch of the knobs does not have. */
static void pick_mma(const pgk_desc *d, uint32_t *kn)
{
    pgk_gemm_layout layout = (pgk_gemm_layout)d->variant;
    pg_type in = in_type_of(kn[MM_IN]), out = out_type_of(kn[MM_OUT]);
    pgk_gemm_choice ch;
    if (!pgk_gemm_thin_shape(layout, in, kn[MM_M], kn[MM_N], kn[MM_K], PG_SM_80) &&
        pgk_gemm_mma_choice(layout, in, out, kn[MM_M], kn[MM_N], kn[MM_K], PG_SM_80, 0, &ch) ==
            PG_OK &&
        ch.desc == d)
        kn[MM_TILE] = ch.tile;
}

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

const pgk_desc pgk_desc_gemm_mma_forward = {
    .name = "gemm_mma_forward",
    .summary = "Y[M,N] (+)= X[M,K] * W[N,K]^T (+ bias[N]), f16/bf16 in, f32 accumulate "
               "(mma.sync, cp.async)",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(mma_f_knobs),
    .min_target = PG_SM_80,
    .build = build_mma,
    .launch = launch_mma,
    .pick = pick_mma,
    .variant = PGK_GEMM_FORWARD,
};

const pgk_desc pgk_desc_gemm_mma_backward_x = {
    .name = "gemm_mma_backward_x",
    .summary = "dX[M,K] (+)= dY[M,N] * W[N,K] (+ bias[K]), f16/bf16 in, f32 accumulate "
               "(mma.sync, cp.async)",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(mma_x_knobs),
    .min_target = PG_SM_80,
    .build = build_mma,
    .launch = launch_mma,
    .pick = pick_mma,
    .variant = PGK_GEMM_BACKWARD_X,
};

const pgk_desc pgk_desc_gemm_mma_backward_w = {
    .name = "gemm_mma_backward_w",
    .summary = "dW[N,K] (+)= dY[M,N]^T * X[M,K] (+ bias[K]), f16/bf16 in, f32 accumulate "
               "(mma.sync, cp.async)",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(mma_w_knobs),
    .min_target = PG_SM_80,
    .build = build_mma,
    .launch = launch_mma,
    .pick = pick_mma,
    .variant = PGK_GEMM_BACKWARD_W,
};

static const pgk_desc *const mma_descs[PGK_GEMM_LAYOUTS] = {
    &pgk_desc_gemm_mma_forward, &pgk_desc_gemm_mma_backward_x, &pgk_desc_gemm_mma_backward_w};

/* ---------------------------------------------------------------- the family's choice */

int pgk_gemm_mma_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                        uint32_t n, uint32_t k, pg_target target, unsigned sms,
                        pgk_gemm_choice *out)
{
    int rc = pgk_gemm_choice_init(layout, m, n, k, target, out);
    if (rc)
        return rc;
    if ((in_type != PG_F16 && in_type != PG_BF16) ||
        (out_type != PG_F32 && out_type != PG_F16 && out_type != PG_BF16))
        return PG_EINVAL;
    out->split = 1;
    out->m = m;
    out->n = n;
    out->k = k;
    if (pg_target_sm(target) < 80)
        return pgk_gemm_lp_simt_choice(layout, in_type, out_type, out);
    out->desc = mma_descs[layout];
    rc = pgk_knobs_default(out->desc, &out->knobs);
    if (rc)
        return rc;
    uint32_t P, Q, R, bt, bs;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    pgk_gemm_mma_best(layout, P, Q, R, target, sms ? sms : pgk_gemm_default_sms(target),
                      out_size(out_type), &bt, &bs);
    uint32_t *v = out->knobs.v;
    v[MM_M] = m;
    v[MM_N] = n;
    v[MM_K] = k;
    v[MM_IN] = in_type == PG_BF16 ? IN_BF16 : IN_F16;
    v[MM_OUT] = out_knob(out_type);
    v[MM_TILE] = out->tile = bt;
    v[MM_SPLIT] = out->split = bs;
    if (bs > 1) {
        out->reduce = &pgk_desc_gemm_mma_reduce;
        pgk_knobs_default(out->reduce, &out->reduce_knobs);
        out->reduce_knobs.v[RD_N] = P * Q; /* at most 2^28: the cost model's bound */
        out->reduce_knobs.v[RD_COLS] = Q;
        out->reduce_knobs.v[RD_SPLIT] = bs;
        out->reduce_knobs.v[RD_OUT] = out_knob(out_type);
        out->workspace_bytes = (uint64_t)P * Q * 4u * bs;
    }
    return PG_OK;
}

bool pgk_gemm_mma_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                           pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                           uint32_t *k)
{
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        if (d == mma_descs[l]) {
            const uint32_t *v = kn->v;
            *layout = (pgk_gemm_layout)l;
            *in_type = in_type_of(v[MM_IN]);
            *out_type = out_type_of(v[MM_OUT]);
            *m = v[MM_M];
            *n = v[MM_N];
            *k = v[MM_K];
            return true;
        }
    return pgk_gemm_lp_simt_describe(d, kn, layout, in_type, out_type, m, n, k);
}
