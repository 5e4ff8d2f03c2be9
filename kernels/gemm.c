/* SPDX-License-Identifier: MIT */
/*
 * GEMM backward (DESIGN §3). With C = A·B in the forward pass (A[M,K],
 * B[K,N], C[M,N], all row-major f32):
 *
 *   gemm_backward_a             grad_A[M,K]  = dC[M,N] · B[K,N]ᵀ
 *   gemm_backward_a_accumulate  grad_A[M,K] += dC[M,N] · B[K,N]ᵀ
 *   gemm_backward_b             grad_B[K,N]  = A[M,K]ᵀ · dC[M,N]
 *   gemm_f16_backward_a         grad_A[M,K]  = dC · Wᵀ, f16 in, f32 out,
 *                               mma.sync tensor cores (sm_80 and up), fed
 *                               by cp.async and ldmatrix; its own `variant`
 *                               knob (below, before its code)
 *
 * All of them are one problem, C[p][q] (+)= Σ_r X(p,r)·Y(q,r) over a
 * P×Q output, read in one of two layouts:
 *
 *   "r-contiguous" (backward_a): X(p,r) = dC[p*N + r], Y(q,r) = B[q*N + r]
 *       (P = M, Q = K, R = N): the reduction index runs along rows;
 *   "p-contiguous" (backward_b): X(p,r) = A[r*K + p], Y(q,r) = dC[r*N + q]
 *       (P = K, Q = N, R = M): the output indices run along rows.
 *
 * Every output element is one fma chain over r = 0, 1, ..., R-1 in order,
 * in every variant (out-of-range terms are 0·0 and leave it unchanged): no
 * atomics, no split reduction, so results are bitwise identical run to run,
 * and the variants agree with each other to the bit.
 *
 * The fp32 kernels have four forms, chosen by the baked knob `variant`:
 *   0  the seed's: 16×16 tiles of X and Y in shared memory, one output a
 *      thread, the 16-step inner loop unrolled 4×; block (16,16).
 *   1  (default) register blocking: a 128×64 block tile, 256 threads of
 *      8×4 outputs, r-tiles of 16. A thread's outputs are 4×4 quads spread
 *      over the tile, so that a warp's shared loads for one r are one
 *      contiguous 256-byte row of Y and two broadcast vectors of X. The
 *      next r-tile is loaded into registers while the current one is
 *      multiplied out of the other of two shared-memory stages: one
 *      barrier a tile.
 *   2  the same with a 128×128 tile, 8×8 outputs a thread, r-tiles of 8:
 *      the fastest on large square problems.
 *   3  the same with a 64×64 tile, 4×4 outputs a thread, r-tiles of 16:
 *      more blocks, for outputs of a few hundred rows or columns.
 * Variant 1 is the best all-round on the backward GEMMs of a 1.5B model
 * at sequence length 512 (grad_A has only 512 rows); variant 0 is the
 * fastest when the output is tiny (a LoRA rank-16 side). Global loads are
 * 16-byte vectors where the row length is a multiple of 4 and the base
 * pointer 16-byte aligned, four guarded scalar loads (zero filled) at the
 * edges and otherwise; the same goes for the stores.
 *
 * Sizes are run-time parameters: one module serves every shape. Knobs m, n,
 * k (1 .. 2^24, which keeps every u32 index computation from wrapping) only
 * size the launch.
 */
#include "kernels.h"

#define GEMM_MAX_DIM (1u << 24)

/* ---------------------------------------------------------------- small helpers */

static pg_reg new_u32(pg_kernel *k) { return pg_reg_new(k, PG_U32); }
static pg_reg new_u64(pg_kernel *k) { return pg_reg_new(k, PG_U64); }
static pg_reg new_f32(pg_kernel *k) { return pg_reg_new(k, PG_F32); }
static pg_reg new_pred(pg_kernel *k) { return pg_reg_new(k, PG_PRED); }

static pg_reg add_u32(pg_kernel *k, pg_val a, pg_val b)
{
    pg_reg d = new_u32(k);
    pg_add(k, PG_U32, d, a, b);
    return d;
}

static pg_reg mul_u32(pg_kernel *k, pg_val a, pg_val b)
{
    pg_reg d = new_u32(k);
    pg_mul(k, PG_U32, d, a, b);
    return d;
}

static pg_reg and_u32(pg_kernel *k, pg_val a, uint32_t mask)
{
    pg_reg d = new_u32(k);
    pg_and(k, PG_B32, d, a, pg_u32(mask));
    return d;
}

static pg_reg shr_u32(pg_kernel *k, pg_val a, uint32_t s)
{
    pg_reg d = new_u32(k);
    pg_shr(k, PG_U32, d, a, pg_u32(s));
    return d;
}

static pg_reg shl_u32(pg_kernel *k, pg_val a, uint32_t s)
{
    pg_reg d = new_u32(k);
    pg_shl(k, PG_B32, d, a, pg_u32(s));
    return d;
}

static pg_reg cmp_u32(pg_kernel *k, pg_cmp c, pg_val a, pg_val b)
{
    pg_reg p = new_pred(k);
    pg_setp(k, c, PG_U32, p, a, b);
    return p;
}

static pg_reg pred_and(pg_kernel *k, pg_reg a, pg_reg b)
{
    pg_reg p = new_pred(k);
    pg_and(k, PG_PRED, p, a, b);
    return p;
}

static unsigned log2u(unsigned x)
{
    unsigned s = 0;
    while ((1u << s) < x)
        s++;
    return s;
}

/* base + (row*ld + col) * esize, in 64 bits: row*ld may pass 2^32. */
static pg_reg elem_addr2(pg_kernel *k, pg_reg base, pg_val row, pg_val ld, pg_val col,
                         unsigned esize)
{
    pg_reg off = new_u64(k), c64 = new_u64(k);
    pg_mul_wide(k, PG_U32, off, row, ld);
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, c64, col);
    pg_add(k, PG_U64, off, off, c64);
    pg_shl(k, PG_B64, off, off, pg_u32(log2u(esize)));
    pg_reg a = new_u64(k);
    pg_add(k, PG_U64, a, base, off);
    return a;
}

/* Whether rows of `ld` elements of `esize` bytes from `base` may be read in
 * vectors of `vec` elements: the base aligned to the vector, ld a multiple
 * of it. Uniform (params only). */
static pg_reg vectors_ok(pg_kernel *k, pg_reg base, pg_reg ld, unsigned vec, unsigned esize)
{
    pg_reg lowbits = new_u64(k);
    pg_and(k, PG_B64, lowbits, base, pg_u64(vec * esize - 1));
    pg_reg aligned = new_pred(k);
    pg_setp(k, PG_CMP_EQ, PG_U64, aligned, lowbits, pg_u64(0));
    pg_reg rem = and_u32(k, ld, vec - 1);
    pg_reg whole = cmp_u32(k, PG_CMP_EQ, rem, pg_u32(0));
    return pred_and(k, aligned, whole);
}

/* ---------------------------------------------------------------- the problem */

typedef enum gemm_form { FORM_A, FORM_A_ACC, FORM_B } gemm_form;

/* C[p][q] (+)= Σ_r X(p,r)·Y(q,r); C is P×Q row-major (ldc = Q). */
typedef struct gemm_io {
    pg_reg x, y, c; /* u64 base pointers */
    pg_reg P, Q, R; /* u32 extents */
    pg_reg ldx, ldy;
    bool contig_r;  /* X and Y rows run along r (backward_a); else along p/q */
    bool accumulate;
} gemm_io;

/* Params (buf0, buf1, out, m, n, k) as the problem above. */
static void gemm_io_load(pg_kernel *k, const pg_param *p, gemm_form f, gemm_io *io)
{
    pg_reg b0 = pg_param_load(k, p[0]);
    pg_reg b1 = pg_param_load(k, p[1]);
    pg_reg out = pg_param_load(k, p[2]);
    pg_reg m = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);
    pg_reg kd = pg_param_load(k, p[5]);
    io->x = b0;
    io->y = b1;
    io->c = out;
    io->accumulate = f == FORM_A_ACC;
    if (f == FORM_B) { /* X = A[M,K], Y = dC[M,N], out grad_B[K,N] */
        io->contig_r = false;
        io->P = kd;
        io->Q = n;
        io->R = m;
        io->ldx = kd;
        io->ldy = n;
    } else { /* X = dC[M,N], Y = B[K,N], out grad_A[M,K] */
        io->contig_r = true;
        io->P = m;
        io->Q = kd;
        io->R = n;
        io->ldx = n;
        io->ldy = n;
    }
}

/* Store (or add into) one f32 output element when `ok`. */
static void store_out(pg_kernel *k, const gemm_io *io, pg_reg addr, int64_t off, pg_reg ok,
                      pg_reg v)
{
    if (io->accumulate) {
        pg_reg old = new_f32(k);
        pg_mov(k, PG_F32, old, pg_f32(0.0f));
        pg_guard(k, ok, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, off, old);
        pg_reg sum = new_f32(k);
        pg_add(k, PG_F32, sum, old, v);
        v = sum;
    }
    pg_guard(k, ok, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, off, v);
}

/* ---------------------------------------------------------------- variant 0: the seed's 16×16 tiles */

#define SEED_T 16u
#define SEED_S 17u /* padded row: a column walk (stride 17 words) hits 16 banks */

static void build_seed(pg_kernel *k, const gemm_io *io)
{
    pg_kernel_set_maxntid(k, SEED_T, SEED_T, 1);
    pg_shared xs = pg_shared_static(k, PG_F32, SEED_T * SEED_S, 4, "xs");
    pg_shared ys = pg_shared_static(k, PG_F32, SEED_T * SEED_S, 4, "ys");
    pg_reg tx = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ty = pg_sreg_read(k, PG_SREG_TID_Y);
    pg_reg bx = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg by = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg p0 = mul_u32(k, by, pg_u32(SEED_T));
    pg_reg q0 = mul_u32(k, bx, pg_u32(SEED_T));

    /* Each thread loads one element of each tile, coalesced along memory
     * rows, and stores it at [p or q][r] so that the product loop reads
     * xs[ty][kk] (a broadcast) and ys[tx][kk] (16 banks). */
    pg_reg ri = new_u32(k), xp, yq, xptr, yptr, wr = new_u32(k);
    pg_val xstep, ystep;
    if (io->contig_r) { /* element (row p/q = ty, r = tx) */
        pg_mov(k, PG_U32, ri, tx);
        xp = add_u32(k, p0, ty);
        yq = add_u32(k, q0, ty);
        xptr = elem_addr2(k, io->x, xp, io->ldx, tx, 4);
        yptr = elem_addr2(k, io->y, yq, io->ldy, tx, 4);
        xstep = ystep = pg_u64(SEED_T * 4);
        pg_mad(k, PG_U32, wr, ty, pg_u32(SEED_S), tx);
    } else { /* element (r = ty, p/q = tx) */
        pg_mov(k, PG_U32, ri, ty);
        xp = add_u32(k, p0, tx);
        yq = add_u32(k, q0, tx);
        xptr = elem_addr2(k, io->x, ty, io->ldx, xp, 4);
        yptr = elem_addr2(k, io->y, ty, io->ldy, yq, 4);
        pg_reg xst = new_u64(k), yst = new_u64(k);
        pg_mul_wide(k, PG_U32, xst, io->ldx, pg_u32(SEED_T * 4));
        pg_mul_wide(k, PG_U32, yst, io->ldy, pg_u32(SEED_T * 4));
        xstep = xst;
        ystep = yst;
        pg_mad(k, PG_U32, wr, tx, pg_u32(SEED_S), ty);
    }
    pg_shl(k, PG_B32, wr, wr, pg_u32(2));
    pg_reg xin = cmp_u32(k, PG_CMP_LT, xp, io->P);
    pg_reg yin = cmp_u32(k, PG_CMP_LT, yq, io->Q);
    pg_reg xs_base = new_u32(k), ys_base = new_u32(k);
    pg_mov(k, PG_U32, xs_base, pg_shared_addr(xs));
    pg_mov(k, PG_U32, ys_base, pg_shared_addr(ys));
    pg_reg xs_wr = add_u32(k, xs_base, wr);
    pg_reg ys_wr = add_u32(k, ys_base, wr);
    pg_reg xs_rd0 = new_u32(k), ys_rd0 = new_u32(k);
    pg_mad(k, PG_U32, xs_rd0, ty, pg_u32(SEED_S * 4), xs_base);
    pg_mad(k, PG_U32, ys_rd0, tx, pg_u32(SEED_S * 4), ys_base);

    pg_reg acc = new_f32(k);
    pg_mov(k, PG_F32, acc, pg_f32(0.0f));
    pg_reg tiles = add_u32(k, io->R, pg_u32(SEED_T - 1));
    pg_shr(k, PG_U32, tiles, tiles, pg_u32(4));
    pg_reg t = new_u32(k);
    pg_mov(k, PG_U32, t, pg_u32(0));

    pg_label tile_top = pg_label_new(k, "tile");
    pg_label inner_top = pg_label_new(k, "inner");
    pg_label_bind(k, tile_top);
    pg_comment(k, "stage one 16x16 tile of X and of Y (zero outside the matrices)");
    pg_reg rin = cmp_u32(k, PG_CMP_LT, ri, io->R);
    pg_reg xok = pred_and(k, xin, rin), yok = pred_and(k, yin, rin);
    pg_reg xv = new_f32(k), yv = new_f32(k);
    pg_mov(k, PG_F32, xv, pg_f32(0.0f));
    pg_mov(k, PG_F32, yv, pg_f32(0.0f));
    pg_guard(k, xok, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, xptr, 0, xv);
    pg_guard(k, yok, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, yptr, 0, yv);
    pg_st(k, PG_SPACE_SHARED, PG_F32, xs_wr, 0, xv);
    pg_st(k, PG_SPACE_SHARED, PG_F32, ys_wr, 0, yv);
    pg_bar_sync(k, 0);

    pg_comment(k, "acc += xs[ty][kk] * ys[tx][kk], kk = 0..15, four at a time");
    pg_reg i = new_u32(k), xa = new_u32(k), ya = new_u32(k);
    pg_mov(k, PG_U32, i, pg_u32(0));
    pg_mov(k, PG_U32, xa, xs_rd0);
    pg_mov(k, PG_U32, ya, ys_rd0);
    pg_label_bind(k, inner_top);
    for (int e = 0; e < 4; e++) {
        pg_reg a = new_f32(k), b = new_f32(k);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, xa, e * 4, a);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, ya, e * 4, b);
        pg_fma(k, PG_F32, acc, a, b, acc);
    }
    pg_add(k, PG_U32, xa, xa, pg_u32(16));
    pg_add(k, PG_U32, ya, ya, pg_u32(16));
    pg_add(k, PG_U32, i, i, pg_u32(1));
    pg_reg more = cmp_u32(k, PG_CMP_LT, i, pg_u32(SEED_T / 4));
    pg_bra_if(k, more, false, inner_top);
    pg_bar_sync(k, 0);

    pg_add(k, PG_U64, xptr, xptr, xstep);
    pg_add(k, PG_U64, yptr, yptr, ystep);
    pg_add(k, PG_U32, ri, ri, pg_u32(SEED_T));
    pg_add(k, PG_U32, t, t, pg_u32(1));
    pg_reg again = cmp_u32(k, PG_CMP_LT, t, tiles);
    pg_bra_if(k, again, false, tile_top);

    pg_comment(k, "C[p0+ty][q0+tx]");
    pg_reg row = add_u32(k, p0, ty), col = add_u32(k, q0, tx);
    pg_reg rok = cmp_u32(k, PG_CMP_LT, row, io->P); /* in order, as arguments they are not */
    pg_reg ok = pred_and(k, rok, cmp_u32(k, PG_CMP_LT, col, io->Q));
    pg_reg ca = elem_addr2(k, io->c, row, io->Q, col, 4);
    store_out(k, io, ca, 0, ok, acc);
    pg_ret(k);
}

/* ---------------------------------------------------------------- variants 1-3: register blocking */

typedef struct rb_cfg {
    unsigned bm, bn, bk; /* block tile: P × Q outputs, r-tiles of bk */
    unsigned tm, tn;     /* outputs a thread: multiples of 4 */
} rb_cfg;

#define RB_MAX_SLOTS 4 /* float4s of one operand tile a thread moves */
#define RB_MAX_T 8     /* outputs a thread along p or q */

/* Each operand tile must split into a whole number of float4s a thread, at
 * most RB_MAX_SLOTS; bk/4, bm/4 and bn/4 must be powers of two (the index
 * arithmetic shifts and masks). */
#define RB_THREADS(bm, bn, tm, tn) ((bm) / (tm) * ((bn) / (tn)))
#define RB_CHECK(bm, bn, bk, tm, tn)                                                    \
    _Static_assert((bm) * (bk) / 4 % RB_THREADS(bm, bn, tm, tn) == 0 &&                 \
                       (bn) * (bk) / 4 % RB_THREADS(bm, bn, tm, tn) == 0 &&             \
                       (bm) * (bk) / 4 / RB_THREADS(bm, bn, tm, tn) <= RB_MAX_SLOTS &&  \
                       (bn) * (bk) / 4 / RB_THREADS(bm, bn, tm, tn) <= RB_MAX_SLOTS &&  \
                       (tm) % 4 == 0 && (tn) % 4 == 0 && (tm) <= RB_MAX_T &&            \
                       (tn) <= RB_MAX_T,                                                \
                   "register-blocking configuration")
RB_CHECK(128, 64, 16, 8, 4);
RB_CHECK(128, 128, 8, 8, 8);
RB_CHECK(64, 64, 16, 4, 4);

#define GEMM_VARIANTS 4
static const rb_cfg rb_cfgs[GEMM_VARIANTS] = {
    {0, 0, 0, 0, 0},
    {128, 64, 16, 8, 4},
    {128, 128, 8, 8, 8},
    {64, 64, 16, 4, 4},
};

static unsigned rb_threads(const rb_cfg *c) { return (c->bm / c->tm) * (c->bn / c->tn); }

/* One float4 of a tile that one thread moves from global to shared memory. */
typedef struct rb_slot {
    pg_reg ptr;   /* u64: its address in the current r-tile */
    pg_reg ridx;  /* u32: r of its first element (r-contig) or of its row */
    pg_reg pidx;  /* u32: p of its row (r-contig) or of its first element */
    pg_reg inrow; /* pred (r-contig): the row is inside the matrix */
    pg_reg vrow;  /* pred: r-contig: inrow and vectors allowed;
                           else: all four columns inside and vectors allowed */
    pg_reg x[4];  /* the values, staged in registers */
    pg_reg wr;    /* u32: byte offset of its destination inside a stage */
} rb_slot;

/* One operand tile: bt (p or q) × bk (r), stored in shared memory as
 * [r][p] rows of `stride` floats so the product loop reads 4 consecutive
 * p as one vector. */
typedef struct rb_operand {
    bool contig_r;
    unsigned bt, bk, stride, nslots;
    pg_reg ext, R; /* extent along p/q, and R */
    pg_val step; /* u64 bytes from one r-tile to the next */
    rb_slot s[RB_MAX_SLOTS];
} rb_operand;

/* p0: the block's first p (or q); stage_off: byte offset of this
 * operand's tile inside a stage. */
static void rb_operand_init(pg_kernel *k, rb_operand *op, const rb_cfg *c, unsigned bt,
                            bool contig_r, pg_reg base, pg_reg ld, pg_reg ext, pg_reg R,
                            pg_reg p0, pg_reg tid, unsigned stage_off)
{
    unsigned threads = rb_threads(c);
    op->contig_r = contig_r;
    op->bt = bt;
    op->bk = c->bk;
    op->stride = bt + 4;
    op->nslots = bt * c->bk / 4 / threads;
    op->ext = ext;
    op->R = R;
    pg_reg vec = vectors_ok(k, base, ld, 4, 4);
    if (contig_r) {
        op->step = pg_u64(c->bk * 4);
    } else {
        pg_reg st = new_u64(k);
        pg_mul_wide(k, PG_U32, st, ld, pg_u32(c->bk * 4));
        op->step = st;
    }
    for (unsigned j = 0; j < op->nslots; j++) {
        rb_slot *s = &op->s[j];
        pg_reg f = add_u32(k, tid, pg_u32(j * threads));
        pg_reg pl, rl; /* position inside the tile */
        if (contig_r) { /* memory rows of bk floats: bk/4 vectors a row */
            pl = shr_u32(k, f, log2u(c->bk / 4));
            rl = shl_u32(k, and_u32(k, f, c->bk / 4 - 1), 2);
            s->pidx = add_u32(k, p0, pl);
            s->ridx = new_u32(k); /* advances; rl does not */
            pg_mov(k, PG_U32, s->ridx, rl);
            s->inrow = cmp_u32(k, PG_CMP_LT, s->pidx, ext);
            s->vrow = pred_and(k, s->inrow, vec);
            s->ptr = elem_addr2(k, base, s->pidx, ld, s->ridx, 4);
        } else { /* memory rows of bt floats: bt/4 vectors a row */
            rl = shr_u32(k, f, log2u(bt / 4));
            pl = shl_u32(k, and_u32(k, f, bt / 4 - 1), 2);
            s->pidx = add_u32(k, p0, pl);
            s->ridx = new_u32(k);
            pg_mov(k, PG_U32, s->ridx, rl);
            s->inrow = (pg_reg){0, 0, 0};
            pg_reg end = add_u32(k, s->pidx, pg_u32(4));
            s->vrow = pred_and(k, cmp_u32(k, PG_CMP_LE, end, ext), vec);
            s->ptr = elem_addr2(k, base, s->ridx, ld, s->pidx, 4);
        }
        s->wr = new_u32(k);
        pg_mad(k, PG_U32, s->wr, rl, pg_u32(op->stride), pl);
        pg_shl(k, PG_B32, s->wr, s->wr, pg_u32(2));
        if (stage_off)
            pg_add(k, PG_U32, s->wr, s->wr, pg_u32(stage_off));
        for (int e = 0; e < 4; e++)
            s->x[e] = new_f32(k);
    }
}

/* Global -> registers: one 16-byte load when the whole vector is inside
 * and aligned, else four guarded loads with zeros outside. */
static void rb_slot_load(pg_kernel *k, const rb_operand *op, const rb_slot *s)
{
    pg_reg full = new_pred(k);
    if (op->contig_r) {
        pg_reg end = add_u32(k, s->ridx, pg_u32(4));
        pg_setp(k, PG_CMP_LE, PG_U32, full, end, op->R);
    } else {
        pg_setp(k, PG_CMP_LT, PG_U32, full, s->ridx, op->R);
    }
    pg_and(k, PG_PRED, full, full, s->vrow);
    pg_guard(k, full, false);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, s->ptr, 0, s->x);
    pg_label done = pg_label_new(k, "loaded");
    pg_bra_if(k, full, false, done);
    pg_reg rin = op->contig_r ? s->inrow : cmp_u32(k, PG_CMP_LT, s->ridx, op->R);
    for (int e = 0; e < 4; e++) {
        pg_mov(k, PG_F32, s->x[e], pg_f32(0.0f));
        pg_reg idx = add_u32(k, op->contig_r ? s->ridx : s->pidx, pg_u32((uint32_t)e));
        pg_reg in = cmp_u32(k, PG_CMP_LT, idx, op->contig_r ? op->R : op->ext);
        pg_and(k, PG_PRED, in, in, rin);
        pg_guard(k, in, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, s->ptr, e * 4, s->x[e]);
    }
    pg_label_bind(k, done);
}

static void rb_operand_load(pg_kernel *k, const rb_operand *op)
{
    for (unsigned j = 0; j < op->nslots; j++)
        rb_slot_load(k, op, &op->s[j]);
}

static void rb_operand_advance(pg_kernel *k, const rb_operand *op)
{
    for (unsigned j = 0; j < op->nslots; j++) {
        pg_add(k, PG_U64, op->s[j].ptr, op->s[j].ptr, op->step);
        pg_add(k, PG_U32, op->s[j].ridx, op->s[j].ridx, pg_u32(op->bk));
    }
}

/* Registers -> the stage at `stage` (a u32 shared address). */
static void rb_operand_store(pg_kernel *k, const rb_operand *op, pg_reg stage)
{
    for (unsigned j = 0; j < op->nslots; j++) {
        const rb_slot *s = &op->s[j];
        pg_reg a = add_u32(k, stage, s->wr);
        if (op->contig_r) { /* transpose: 4 consecutive r of one p */
            for (unsigned e = 0; e < 4; e++)
                pg_st(k, PG_SPACE_SHARED, PG_F32, a, (int64_t)(e * op->stride * 4), s->x[e]);
        } else {
            pg_val v[4] = {s->x[0], s->x[1], s->x[2], s->x[3]};
            pg_st_v(k, PG_SPACE_SHARED, PG_F32, 4, a, 0, v);
        }
    }
}

static void build_regblock(pg_kernel *k, const gemm_io *io, const rb_cfg *c)
{
    const unsigned threads = rb_threads(c);
    const unsigned thx = c->bn / c->tn, thy = c->bm / c->tm;
    const unsigned sa = c->bm + 4, sb = c->bn + 4; /* padded rows, floats */
    const unsigned b_off = c->bk * sa * 4;        /* Y tile after X, bytes */
    const unsigned stage = c->bk * (sa + sb) * 4; /* bytes */
    pg_kernel_set_maxntid(k, threads, 1, 1);
    pg_shared tiles = pg_shared_static(k, PG_F32, 2 * stage / 4, 16, "tiles");
    pg_reg sbase = new_u32(k);
    pg_mov(k, PG_U32, sbase, pg_shared_addr(tiles));

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg tx = and_u32(k, tid, thx - 1);
    pg_reg ty = shr_u32(k, tid, log2u(thx));
    pg_reg p0 = mul_u32(k, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(c->bm));
    pg_reg q0 = mul_u32(k, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(c->bn));

    rb_operand X, Y;
    rb_operand_init(k, &X, c, c->bm, io->contig_r, io->x, io->ldx, io->P, io->R, p0, tid, 0);
    rb_operand_init(k, &Y, c, c->bn, io->contig_r, io->y, io->ldy, io->Q, io->R, q0, tid, b_off);

    pg_reg acc[RB_MAX_T][RB_MAX_T];
    for (unsigned i = 0; i < c->tm; i++)
        for (unsigned j = 0; j < c->tn; j++) {
            acc[i][j] = new_f32(k);
            pg_mov(k, PG_F32, acc[i][j], pg_f32(0.0f));
        }
    pg_reg ntiles = add_u32(k, io->R, pg_u32(c->bk - 1));
    pg_shr(k, PG_U32, ntiles, ntiles, pg_u32(log2u(c->bk)));

    pg_comment(k, "r-tile 0 into stage 0");
    rb_operand_load(k, &X);
    rb_operand_load(k, &Y);
    rb_operand_store(k, &X, sbase);
    rb_operand_store(k, &Y, sbase);
    pg_bar_sync(k, 0);

    pg_reg cur = new_u32(k), t = new_u32(k);
    pg_mov(k, PG_U32, cur, pg_u32(0));
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_reg rd_x = new_u32(k), rd_y = new_u32(k); /* per-thread read offsets */
    pg_shl(k, PG_B32, rd_x, ty, pg_u32(4));
    pg_mad(k, PG_U32, rd_y, tx, pg_u32(16), pg_u32(b_off));

    pg_label top = pg_label_new(k, "tile");
    pg_label compute = pg_label_new(k, "compute");
    pg_label epilogue = pg_label_new(k, "epilogue");
    pg_label_bind(k, top);
    pg_reg t1 = add_u32(k, t, pg_u32(1));
    pg_reg has_next = cmp_u32(k, PG_CMP_LT, t1, ntiles);
    pg_bra_if(k, has_next, true, compute);
    pg_comment(k, "prefetch r-tile t+1 into registers");
    rb_operand_advance(k, &X);
    rb_operand_advance(k, &Y);
    rb_operand_load(k, &X);
    rb_operand_load(k, &Y);

    pg_label_bind(k, compute);
    pg_comment(k, "multiply r-tile t out of stage cur");
    pg_reg rs = add_u32(k, sbase, cur);
    pg_reg ax = add_u32(k, rs, rd_x), ay = add_u32(k, rs, rd_y);
    pg_reg a[RB_MAX_T], b[RB_MAX_T];
    for (unsigned i = 0; i < c->tm; i++)
        a[i] = new_f32(k);
    for (unsigned j = 0; j < c->tn; j++)
        b[j] = new_f32(k);
    for (unsigned kk = 0; kk < c->bk; kk++) {
        for (unsigned q = 0; q < c->tm / 4; q++)
            pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, ax, (int64_t)(kk * sa * 4 + q * thy * 16),
                    &a[4 * q]);
        for (unsigned q = 0; q < c->tn / 4; q++)
            pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, ay, (int64_t)(kk * sb * 4 + q * thx * 16),
                    &b[4 * q]);
        for (unsigned i = 0; i < c->tm; i++)
            for (unsigned j = 0; j < c->tn; j++)
                pg_fma(k, PG_F32, acc[i][j], a[i], b[j], acc[i][j]);
    }
    pg_bra_if(k, has_next, true, epilogue);
    pg_comment(k, "registers into the other stage; one barrier a tile");
    pg_reg other = new_u32(k);
    pg_sub(k, PG_U32, other, pg_u32(stage), cur);
    pg_reg ws = add_u32(k, sbase, other);
    rb_operand_store(k, &X, ws);
    rb_operand_store(k, &Y, ws);
    pg_bar_sync(k, 0);
    pg_mov(k, PG_U32, cur, other);
    pg_mov(k, PG_U32, t, t1);
    pg_bra(k, top);

    pg_label_bind(k, epilogue);
    pg_comment(k, "C rows p0 + i*4*thy + 4ty + e, columns q0 + j*4*thx + 4tx + e");
    pg_reg cvec = vectors_ok(k, io->c, io->Q, 4, 4);
    pg_reg colbase = new_u32(k);
    pg_mad(k, PG_U32, colbase, tx, pg_u32(4), q0);
    pg_reg colfull[RB_MAX_T / 4], colin[RB_MAX_T / 4][4], coff[RB_MAX_T / 4];
    for (unsigned q = 0; q < c->tn / 4; q++) {
        pg_reg col = add_u32(k, colbase, pg_u32(q * thx * 4));
        pg_reg end = add_u32(k, col, pg_u32(4));
        colfull[q] = pred_and(k, cmp_u32(k, PG_CMP_LE, end, io->Q), cvec);
        for (unsigned e = 0; e < 4; e++) {
            pg_reg ce = add_u32(k, col, pg_u32(e));
            colin[q][e] = cmp_u32(k, PG_CMP_LT, ce, io->Q);
        }
        coff[q] = new_u64(k);
        pg_mul_wide(k, PG_U32, coff[q], col, pg_u32(4));
    }
    pg_reg rowbase = new_u32(k);
    pg_mad(k, PG_U32, rowbase, ty, pg_u32(4), p0);
    for (unsigned qi = 0; qi < c->tm / 4; qi++)
        for (unsigned e = 0; e < 4; e++) {
            unsigned i = qi * 4 + e;
            pg_reg row = add_u32(k, rowbase, pg_u32(qi * thy * 4 + e));
            pg_reg rin = cmp_u32(k, PG_CMP_LT, row, io->P);
            pg_reg rowptr = elem_addr2(k, io->c, row, io->Q, pg_u32(0), 4);
            for (unsigned q = 0; q < c->tn / 4; q++) {
                pg_reg addr = new_u64(k);
                pg_add(k, PG_U64, addr, rowptr, coff[q]);
                pg_reg full = pred_and(k, rin, colfull[q]);
                pg_reg partial = new_pred(k);
                pg_not(k, PG_PRED, partial, full);
                pg_and(k, PG_PRED, partial, partial, rin);
                pg_reg ok[4], v[4];
                for (unsigned j = 0; j < 4; j++) {
                    ok[j] = pred_and(k, partial, colin[q][j]);
                    v[j] = acc[i][q * 4 + j];
                }
                if (io->accumulate) {
                    pg_reg old[4];
                    for (unsigned j = 0; j < 4; j++) {
                        old[j] = new_f32(k);
                        pg_mov(k, PG_F32, old[j], pg_f32(0.0f));
                    }
                    pg_guard(k, full, false);
                    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, old);
                    for (unsigned j = 0; j < 4; j++) {
                        pg_guard(k, ok[j], false);
                        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, j * 4, old[j]);
                    }
                    for (unsigned j = 0; j < 4; j++) {
                        pg_reg sum = new_f32(k);
                        pg_add(k, PG_F32, sum, old[j], v[j]);
                        v[j] = sum;
                    }
                }
                pg_val sv[4] = {v[0], v[1], v[2], v[3]};
                pg_guard(k, full, false);
                pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, sv);
                for (unsigned j = 0; j < 4; j++) {
                    pg_guard(k, ok[j], false);
                    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, j * 4, v[j]);
                }
            }
        }
    pg_ret(k);
}

static int build_gemm(pg_kernel *k, const pg_param *p, const uint32_t *knobs, gemm_form f)
{
    gemm_io io;
    gemm_io_load(k, p, f, &io);
    if (knobs[3] == 0)
        build_seed(k, &io);
    else
        build_regblock(k, &io, &rb_cfgs[knobs[3]]);
    return pg_kernel_error(k);
}

/* ---------------------------------------------------------------- gemm_f16_backward_a: tensor cores */

/* Variant 1 of the f16 kernel, its first form.
 *
 * grad_A[M,K] = dC[M,N] · W[K,N]ᵀ with mma.sync.m16n8k16.row.col: the mma's
 * M is M, its N is K and its K is N. A (16×16, row-major) is a block of
 * dC rows, B (16×8, column-major) a block of W rows: both are read along
 * their memory rows, so no transpose is needed anywhere.
 *
 * Block tile 64 (M) × 128 (K) × 32 (N), 128 threads; warp w owns output
 * columns 32w..32w+31 of all 64 rows: 4×4 mma tiles of 16×8, 64 f32
 * accumulators a thread. Shared memory holds each tile as rows of 32
 * halves (64 bytes, no padding), two stages, filled by 16-byte vectors
 * staged in registers one tile ahead, as in the fp32 kernel.
 *
 * Fragments. The PTX layout gives lane (g = lane/4, t = lane%4) the A pairs
 * (row g | g+8, k = 2t, 2t+1 | 2t+8, 2t+9) and the B pairs (k = 2t, 2t+1 |
 * 2t+8, 2t+9, column g). Any permutation of k applied to both A and B
 * leaves the product unchanged, so k-step s of a 32-wide tile takes, for
 * lane t, the physical halves 8t+4s .. 8t+4s+3 in the order (2t, 2t+1,
 * 2t+8, 2t+9): one 16-byte shared load then holds a row's fragments for
 * both k-steps, and a quarter-warp's eight loads cover 128 contiguous
 * bytes (no bank conflicts). */

#define H_BM 64u
#define H_BN 128u
#define H_BK 32u
#define H_THREADS 128u
#define H_ROW (H_BK * 2u)                   /* bytes a tile row */
#define H_A_BYTES (H_BM * H_ROW)            /* 4096 */
#define H_STAGE ((H_BM + H_BN) * H_ROW)     /* 12288 */
#define H_A_SLOTS (H_BM * H_ROW / 16u / H_THREADS) /* 2 */
#define H_B_SLOTS (H_BN * H_ROW / 16u / H_THREADS) /* 4 */

typedef struct h_slot {
    pg_reg ptr;   /* u64 */
    pg_reg col;   /* u32: n of its first half */
    pg_reg inrow; /* pred */
    pg_reg vrow;  /* pred: inrow and 16-byte vectors allowed */
    pg_reg w[4];  /* b32: 8 halves */
    pg_reg wr;    /* u32: byte offset inside a stage */
} h_slot;

static void h_slot_init(pg_kernel *k, h_slot *s, pg_reg base, pg_reg ld, pg_reg ext, pg_reg row0,
                        pg_reg tid, unsigned j, pg_reg vec, unsigned stage_off)
{
    pg_reg c = add_u32(k, tid, pg_u32(j * H_THREADS)); /* 16-byte chunk of the tile */
    pg_reg row = add_u32(k, row0, shr_u32(k, c, 2));
    s->col = shl_u32(k, and_u32(k, c, 3), 3);
    s->inrow = cmp_u32(k, PG_CMP_LT, row, ext);
    s->vrow = pred_and(k, s->inrow, vec);
    s->ptr = elem_addr2(k, base, row, ld, s->col, 2);
    s->wr = shl_u32(k, c, 4); /* row*64 + (c%4)*16 */
    if (stage_off)
        pg_add(k, PG_U32, s->wr, s->wr, pg_u32(stage_off));
    for (int e = 0; e < 4; e++)
        s->w[e] = pg_reg_new(k, PG_B32);
}

static void h_slot_load(pg_kernel *k, const h_slot *s, pg_reg n)
{
    pg_reg end = add_u32(k, s->col, pg_u32(8));
    pg_reg full = cmp_u32(k, PG_CMP_LE, end, n);
    pg_and(k, PG_PRED, full, full, s->vrow);
    pg_guard(k, full, false);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_B32, 4, s->ptr, 0, s->w);
    pg_label done = pg_label_new(k, "loaded");
    pg_bra_if(k, full, false, done);
    pg_reg h[8];
    for (unsigned e = 0; e < 8; e++) {
        h[e] = pg_reg_new(k, PG_U16);
        pg_mov(k, PG_U16, h[e], pg_u32(0));
        pg_reg idx = add_u32(k, s->col, pg_u32(e));
        pg_reg in = cmp_u32(k, PG_CMP_LT, idx, n);
        pg_and(k, PG_PRED, in, in, s->inrow);
        pg_guard(k, in, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_U16, s->ptr, e * 2, h[e]);
    }
    for (unsigned i = 0; i < 4; i++) {
        pg_reg lo = new_u32(k), hi = new_u32(k);
        pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, lo, h[2 * i]);
        pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, hi, h[2 * i + 1]);
        pg_shl(k, PG_B32, hi, hi, pg_u32(16));
        pg_or(k, PG_B32, s->w[i], lo, hi);
    }
    pg_label_bind(k, done);
}

static void h_slot_store(pg_kernel *k, const h_slot *s, pg_reg stage)
{
    pg_reg a = add_u32(k, stage, s->wr);
    pg_val v[4] = {s->w[0], s->w[1], s->w[2], s->w[3]};
    pg_st_v(k, PG_SPACE_SHARED, PG_B32, 4, a, 0, v);
}

static int build_f16_legacy(pg_kernel *k, const pg_param *p)
{
    pg_kernel_set_maxntid(k, H_THREADS, 1, 1);
    pg_shared tiles = pg_shared_static(k, PG_B32, 2 * H_STAGE / 4, 16, "tiles");
    pg_reg dc = pg_param_load(k, p[0]);
    pg_reg w = pg_param_load(k, p[1]);
    pg_reg ga = pg_param_load(k, p[2]);
    pg_reg m = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);
    pg_reg kd = pg_param_load(k, p[5]);
    pg_reg sbase = new_u32(k);
    pg_mov(k, PG_U32, sbase, pg_shared_addr(tiles));

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = and_u32(k, tid, 31);
    pg_reg warp = shr_u32(k, tid, 5);
    pg_reg g = shr_u32(k, lane, 2);
    pg_reg t4 = and_u32(k, lane, 3);
    pg_reg m0 = mul_u32(k, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(H_BM));
    pg_reg k0 = mul_u32(k, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(H_BN));

    pg_reg veca = vectors_ok(k, dc, n, 8, 2);
    pg_reg vecb = vectors_ok(k, w, n, 8, 2);
    h_slot A[H_A_SLOTS], B[H_B_SLOTS];
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_init(k, &A[j], dc, n, m, m0, tid, j, veca, 0);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_init(k, &B[j], w, n, kd, k0, tid, j, vecb, H_A_BYTES);

    pg_reg acc[4][4][4];
    for (unsigned mt = 0; mt < 4; mt++)
        for (unsigned nt = 0; nt < 4; nt++)
            for (unsigned e = 0; e < 4; e++) {
                acc[mt][nt][e] = new_f32(k);
                pg_mov(k, PG_F32, acc[mt][nt][e], pg_f32(0.0f));
            }
    pg_reg ntiles = add_u32(k, n, pg_u32(H_BK - 1));
    pg_shr(k, PG_U32, ntiles, ntiles, pg_u32(5));

    pg_comment(k, "n-tile 0 into stage 0");
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_load(k, &A[j], n);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_load(k, &B[j], n);
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_store(k, &A[j], sbase);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_store(k, &B[j], sbase);
    pg_bar_sync(k, 0);

    /* fragment rows: A row g of each 16-row tile, B row (W row) 32w + g */
    pg_reg a_rd = new_u32(k), b_rd = new_u32(k), t16 = shl_u32(k, t4, 4);
    pg_mad(k, PG_U32, a_rd, g, pg_u32(H_ROW), t16);
    pg_reg brow = new_u32(k);
    pg_mad(k, PG_U32, brow, warp, pg_u32(32), g);
    pg_mad(k, PG_U32, b_rd, brow, pg_u32(H_ROW), t16);
    pg_add(k, PG_U32, b_rd, b_rd, pg_u32(H_A_BYTES));

    pg_reg cur = new_u32(k), t = new_u32(k);
    pg_mov(k, PG_U32, cur, pg_u32(0));
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_label top = pg_label_new(k, "tile");
    pg_label compute = pg_label_new(k, "compute");
    pg_label epilogue = pg_label_new(k, "epilogue");
    pg_label_bind(k, top);
    pg_reg t1 = add_u32(k, t, pg_u32(1));
    pg_reg has_next = cmp_u32(k, PG_CMP_LT, t1, ntiles);
    pg_bra_if(k, has_next, true, compute);
    pg_comment(k, "prefetch n-tile t+1 into registers");
    for (unsigned j = 0; j < H_A_SLOTS; j++) {
        pg_add(k, PG_U64, A[j].ptr, A[j].ptr, pg_u64(H_BK * 2));
        pg_add(k, PG_U32, A[j].col, A[j].col, pg_u32(H_BK));
    }
    for (unsigned j = 0; j < H_B_SLOTS; j++) {
        pg_add(k, PG_U64, B[j].ptr, B[j].ptr, pg_u64(H_BK * 2));
        pg_add(k, PG_U32, B[j].col, B[j].col, pg_u32(H_BK));
    }
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_load(k, &A[j], n);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_load(k, &B[j], n);

    pg_label_bind(k, compute);
    pg_comment(k, "two k-steps of 4x4 mma tiles out of stage cur");
    pg_reg rs = add_u32(k, sbase, cur);
    pg_reg ar = add_u32(k, rs, a_rd), br = add_u32(k, rs, b_rd);
    pg_reg bf[4][4];
    for (unsigned nt = 0; nt < 4; nt++) {
        for (unsigned e = 0; e < 4; e++)
            bf[nt][e] = pg_reg_new(k, PG_B32);
        pg_ld_v(k, PG_SPACE_SHARED, PG_B32, 4, br, nt * 8 * H_ROW, bf[nt]);
    }
    for (unsigned mt = 0; mt < 4; mt++) {
        pg_reg lo[4], hi[4];
        for (unsigned e = 0; e < 4; e++) {
            lo[e] = pg_reg_new(k, PG_B32);
            hi[e] = pg_reg_new(k, PG_B32);
        }
        pg_ld_v(k, PG_SPACE_SHARED, PG_B32, 4, ar, mt * 16 * H_ROW, lo);
        pg_ld_v(k, PG_SPACE_SHARED, PG_B32, 4, ar, (mt * 16 + 8) * H_ROW, hi);
        for (unsigned s = 0; s < 2; s++) {
            pg_reg a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
            for (unsigned nt = 0; nt < 4; nt++) {
                pg_reg b[2] = {bf[nt][2 * s], bf[nt][2 * s + 1]};
                pg_mma_m16n8k16_f16_f32(k, acc[mt][nt], a, b, acc[mt][nt]);
            }
        }
    }
    pg_bra_if(k, has_next, true, epilogue);
    pg_reg other = new_u32(k);
    pg_sub(k, PG_U32, other, pg_u32(H_STAGE), cur);
    pg_reg ws = add_u32(k, sbase, other);
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_store(k, &A[j], ws);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_store(k, &B[j], ws);
    pg_bar_sync(k, 0);
    pg_mov(k, PG_U32, cur, other);
    pg_mov(k, PG_U32, t, t1);
    pg_bra(k, top);

    pg_label_bind(k, epilogue);
    pg_comment(k, "d0,d1 at (row g, cols 2t, 2t+1), d2,d3 at row g+8, of each 16x8 tile");
    pg_reg cvec = vectors_ok(k, ga, kd, 2, 4);
    pg_reg colbase = new_u32(k);
    pg_mad(k, PG_U32, colbase, warp, pg_u32(32), k0);
    pg_reg t2 = shl_u32(k, t4, 1);
    pg_add(k, PG_U32, colbase, colbase, t2);
    pg_reg colfull[4], colin[4][2], coff[4];
    for (unsigned nt = 0; nt < 4; nt++) {
        pg_reg col = add_u32(k, colbase, pg_u32(nt * 8));
        pg_reg end = add_u32(k, col, pg_u32(2));
        colfull[nt] = pred_and(k, cmp_u32(k, PG_CMP_LE, end, kd), cvec);
        colin[nt][0] = cmp_u32(k, PG_CMP_LT, col, kd);
        pg_reg c1 = add_u32(k, col, pg_u32(1));
        colin[nt][1] = cmp_u32(k, PG_CMP_LT, c1, kd);
        coff[nt] = new_u64(k);
        pg_mul_wide(k, PG_U32, coff[nt], col, pg_u32(4));
    }
    pg_reg rowbase = add_u32(k, m0, g);
    for (unsigned mt = 0; mt < 4; mt++)
        for (unsigned half = 0; half < 2; half++) {
            pg_reg row = add_u32(k, rowbase, pg_u32(mt * 16 + half * 8));
            pg_reg rin = cmp_u32(k, PG_CMP_LT, row, m);
            pg_reg rowptr = elem_addr2(k, ga, row, kd, pg_u32(0), 4);
            for (unsigned nt = 0; nt < 4; nt++) {
                pg_reg addr = new_u64(k);
                pg_add(k, PG_U64, addr, rowptr, coff[nt]);
                pg_reg full = pred_and(k, rin, colfull[nt]);
                pg_reg partial = new_pred(k);
                pg_not(k, PG_PRED, partial, full);
                pg_and(k, PG_PRED, partial, partial, rin);
                pg_val v[2] = {acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]};
                pg_guard(k, full, false);
                pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, addr, 0, v);
                for (unsigned e = 0; e < 2; e++) {
                    pg_reg ok = pred_and(k, partial, colin[nt][e]);
                    pg_guard(k, ok, false);
                    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, e * 4, v[e]);
                }
            }
        }
    pg_ret(k);
    return pg_kernel_error(k);
}

/* ---------------------------------------------------------------- gemm_f16_backward_a: the cp.async pipeline */

/* Variants 0, 2, 3 and 4 of the f16 kernel (variant 1 is the form above).
 *
 * Block tile BM (M) × BN (K), k-tiles of BK (32 or 64) halves of N, 8
 * warps of (BM/2) × (BN/4) outputs. Variant 0 (64×128, BK 64, 3 stages) is
 * the fastest on the 512-row grad_A of the 1.5B model: 96 blocks or more
 * for 132 SMs where 128-row tiles give 48; variant 2 (128×128, BK 32, 4
 * stages) on large square problems. A k-tile of both operands is copied from global
 * memory straight into shared memory by 16-byte cp.async, `stages` deep:
 * while the warps multiply k-tile t, the copies of t+1 .. t+stages-1 are in
 * flight. One bar.sync a k-tile: after it, every warp has finished with
 * k-tile t-1, so its stage takes the copy of t+stages-1.
 *
 * Shared memory: each stage is BM rows of dC then BN rows of W, 2·BK
 * bytes (BK/8 16-byte chunks) a row. Chunk c of row r lives at chunk
 * c ^ ((r/2) % 4) for 64-byte rows, c ^ (r % 8) for 128-byte rows: the
 * eight rows an ldmatrix matrix reads (and the eight chunks a quarter-warp
 * of copies writes) fall in eight different 16-byte bank groups, so
 * neither conflicts.
 *
 * Fragments: ldmatrix.x4 (no .trans: dC is row-major A, W[K,N] is W read
 * as the column-major B) gives exactly the mma.m16n8k16 register layout;
 * for A the four matrices are (rows 0-7 | 8-15) × (k 0-7 | 8-15) in the
 * order a0..a3, for B (columns 0-7, k 0-7 | 8-15), then columns 8-15:
 * the b0, b1 of two adjacent 8-column tiles.
 *
 * Edges: a copy reads min(8, N - col) halves of an in-range row and
 * zero-fills the rest (src_size), so the k-tiles past N and rows past M or
 * K contribute 0·0; an out-of-range copy reads 0 bytes from the matrix
 * base. 16-byte copies need both base pointers 16-byte aligned and N a
 * multiple of 8; otherwise (a uniform test at the top) each chunk is eight
 * guarded 2-byte loads stored to the same place. The reduction is the
 * same mma sequence over N in order for every block, so the results are
 * deterministic. */

#define F_WARPS_M 2u
#define F_WARPS_N 4u
#define F_THREADS (F_WARPS_M * F_WARPS_N * 32u)
#define F_MAX_CHUNKS 4u /* 16-byte chunks of one operand a thread copies a k-tile */
#define F_MAX_MT 4u     /* 16-row mma tiles a warp */
#define F_MAX_NT 8u     /* 8-column mma tiles a warp */

typedef struct f16_cfg {
    unsigned bm, bn, bk, stages; /* bk: halves of N a k-tile, 32 or 64 */
} f16_cfg;

#define F16_VARIANTS 5
#define F16_LEGACY 1u
static const f16_cfg f16_cfgs[F16_VARIANTS] = {
    {64, 128, 64, 3},
    {0, 0, 0, 0},
    {128, 128, 32, 4},
    {64, 128, 32, 4},
    {128, 128, 64, 3},
};

/* 16-byte chunks: bk/8 a row; each operand a whole number a thread. */
#define F16_CHECK(bm, bn, bk)                                                               \
    _Static_assert((bm) * (bk) / 8 % F_THREADS == 0 && (bn) * (bk) / 8 % F_THREADS == 0 &&  \
                       (bm) * (bk) / 8 / F_THREADS <= F_MAX_CHUNKS &&                       \
                       (bn) * (bk) / 8 / F_THREADS <= F_MAX_CHUNKS &&                       \
                       (bm) / F_WARPS_M % 16 == 0 && (bm) / F_WARPS_M / 16 <= F_MAX_MT &&   \
                       (bn) / F_WARPS_N % 16 == 0 && (bn) / F_WARPS_N / 8 <= F_MAX_NT &&    \
                       ((bk) == 32 || (bk) == 64),                                          \
                   "f16 pipeline configuration")
F16_CHECK(64, 128, 32);
F16_CHECK(128, 128, 32);
F16_CHECK(64, 128, 64);
F16_CHECK(128, 128, 64);

static uint32_t f16_stage_bytes(const f16_cfg *c) { return (c->bm + c->bn) * c->bk * 2; }

/* The chunks of one operand (BM rows of dC or BN rows of W) that a thread
 * copies: rows tid/4 + j·(threads/4), chunk tid%4 of each. */
typedef struct f_operand {
    unsigned nch, rowstep;        /* chunks a thread; bytes between them */
    unsigned soff;                /* bytes from the stage start to the operand */
    pg_reg base;                  /* u64: the matrix; the source of empty copies */
    pg_reg ptr[F_MAX_CHUNKS];     /* u64: the chunk in the next k-tile to copy */
    pg_reg rowin[F_MAX_CHUNKS];   /* pred: its row is inside the matrix */
} f_operand;

static void f_operand_init(pg_kernel *k, f_operand *o, unsigned rows, unsigned cpr,
                           unsigned soff, pg_reg base, pg_reg n, pg_reg ext, pg_reg row0,
                           pg_reg tid, pg_reg col)
{
    o->nch = rows * cpr / F_THREADS;
    o->rowstep = F_THREADS / cpr * cpr * 16;
    o->soff = soff;
    o->base = base;
    pg_reg r0 = add_u32(k, row0, shr_u32(k, tid, log2u(cpr)));
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg row = add_u32(k, r0, pg_u32(j * (F_THREADS / cpr)));
        o->rowin[j] = cmp_u32(k, PG_CMP_LT, row, ext);
        o->ptr[j] = elem_addr2(k, base, row, n, col, 2);
    }
}

/* Issue the copies of one k-tile of an operand into the stage at `dst`
 * (the thread's swizzled chunk offset included). */
static void f_operand_copy(pg_kernel *k, const f_operand *o, pg_reg dst, pg_reg colin,
                           pg_reg nbytes)
{
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg ok = pred_and(k, o->rowin[j], colin);
        pg_reg src = new_u32(k), addr = new_u64(k);
        pg_selp(k, PG_U32, src, nbytes, pg_u32(0), ok);
        pg_selp(k, PG_U64, addr, o->ptr[j], o->base, ok);
        pg_cp_async(k, dst, o->soff + j * o->rowstep, addr, 0, 16, src);
    }
}

/* The same with 2-byte loads, for rows that are not 16-byte aligned. */
static void f_operand_copy_scalar(pg_kernel *k, const f_operand *o, pg_reg dst, pg_reg col,
                                  pg_reg n)
{
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg h[8];
        for (unsigned e = 0; e < 8; e++) {
            h[e] = pg_reg_new(k, PG_U16);
            pg_mov(k, PG_U16, h[e], pg_u32(0));
            pg_reg idx = add_u32(k, col, pg_u32(e));
            pg_reg in = pred_and(k, cmp_u32(k, PG_CMP_LT, idx, n), o->rowin[j]);
            pg_guard(k, in, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_U16, o->ptr[j], e * 2, h[e]);
        }
        pg_val w[4];
        for (unsigned i = 0; i < 4; i++) {
            pg_reg lo = new_u32(k), hi = new_u32(k), v = pg_reg_new(k, PG_B32);
            pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, lo, h[2 * i]);
            pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, hi, h[2 * i + 1]);
            pg_shl(k, PG_B32, hi, hi, pg_u32(16));
            pg_or(k, PG_B32, v, lo, hi);
            w[i] = v;
        }
        pg_st_v(k, PG_SPACE_SHARED, PG_B32, 4, dst, o->soff + j * o->rowstep, w);
    }
}

typedef struct f_copier {
    f_operand a, b;
    pg_reg col;  /* u32: N index of this thread's chunks in the next k-tile */
    pg_reg dsw;  /* u32: the thread's swizzled chunk offset inside an operand */
    pg_reg n, vec;
    unsigned bk;
} f_copier;

/* Copy the next k-tile into the stage at `stage` and commit a group
 * (empty copies past N still commit, keeping the group count uniform). */
static void f_copy_tile(pg_kernel *k, f_copier *c, pg_reg stage)
{
    pg_reg dst = add_u32(k, stage, c->dsw);
    pg_label scalar = pg_label_new(k, "copy_scalar");
    pg_label done = pg_label_new(k, "copied");
    pg_bra_if(k, c->vec, true, scalar);
    pg_reg colin = cmp_u32(k, PG_CMP_LT, c->col, c->n);
    pg_reg rem = new_u32(k);
    pg_sub(k, PG_U32, rem, c->n, c->col);
    pg_min(k, PG_U32, rem, rem, pg_u32(8));
    pg_reg nbytes = shl_u32(k, rem, 1);
    f_operand_copy(k, &c->a, dst, colin, nbytes);
    f_operand_copy(k, &c->b, dst, colin, nbytes);
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    f_operand_copy_scalar(k, &c->a, dst, c->col, c->n);
    f_operand_copy_scalar(k, &c->b, dst, c->col, c->n);
    pg_label_bind(k, done);
    for (unsigned j = 0; j < c->a.nch; j++)
        pg_add(k, PG_U64, c->a.ptr[j], c->a.ptr[j], pg_u64(c->bk * 2));
    for (unsigned j = 0; j < c->b.nch; j++)
        pg_add(k, PG_U64, c->b.ptr[j], c->b.ptr[j], pg_u64(c->bk * 2));
    pg_add(k, PG_U32, c->col, c->col, pg_u32(c->bk));
    pg_cp_async_commit(k);
}

/* stage += bytes, wrapping to sbase at `end`. */
static void f_stage_next(pg_kernel *k, pg_reg stage, pg_reg sbase, uint32_t bytes, uint32_t total)
{
    pg_add(k, PG_U32, stage, stage, pg_u32(bytes));
    pg_reg end = add_u32(k, sbase, pg_u32(total));
    pg_reg wrap = cmp_u32(k, PG_CMP_EQ, stage, end);
    pg_selp(k, PG_U32, stage, sbase, stage, wrap);
}

static int build_f16_pipe(pg_kernel *k, const pg_param *p, const f16_cfg *cfg)
{
    const unsigned S = cfg->stages, SB = f16_stage_bytes(cfg);
    const unsigned WM = cfg->bm / F_WARPS_M, WN = cfg->bn / F_WARPS_N;
    const unsigned MT = WM / 16, NT = WN / 8;
    /* row bytes; 16-byte chunks a row; the swizzle: chunk ^ ((row >> sh) & (cpr - 1)) */
    const unsigned ROW = cfg->bk * 2, CPR = cfg->bk / 8, SH = log2u(8 / CPR), KS = cfg->bk / 16;
    pg_kernel_set_maxntid(k, F_THREADS, 1, 1);
    pg_shared smem = pg_shared_dynamic(k, 128);
    pg_reg dc = pg_param_load(k, p[0]);
    pg_reg w = pg_param_load(k, p[1]);
    pg_reg ga = pg_param_load(k, p[2]);
    pg_reg m = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);
    pg_reg kd = pg_param_load(k, p[5]);
    pg_reg sbase = new_u32(k);
    pg_mov(k, PG_U32, sbase, pg_shared_addr(smem));

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = and_u32(k, tid, 31);
    pg_reg warp = shr_u32(k, tid, 5);
    pg_reg wmi = and_u32(k, warp, F_WARPS_M - 1);
    pg_reg wni = shr_u32(k, warp, log2u(F_WARPS_M));
    pg_reg m0 = mul_u32(k, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(cfg->bm));
    pg_reg k0 = mul_u32(k, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(cfg->bn));

    pg_comment(k, "16-byte copies need aligned bases and N % 8 == 0 (uniform)");
    f_copier c;
    c.n = n;
    pg_reg veca = vectors_ok(k, dc, n, 8, 2); /* in order: argument order is unspecified */
    pg_reg vecb = vectors_ok(k, w, n, 8, 2);
    c.vec = pred_and(k, veca, vecb);
    c.bk = cfg->bk;
    pg_reg cc = and_u32(k, tid, CPR - 1);
    c.col = shl_u32(k, cc, 3);
    f_operand_init(k, &c.a, cfg->bm, CPR, 0, dc, n, m, m0, tid, c.col);
    f_operand_init(k, &c.b, cfg->bn, CPR, cfg->bm * ROW, w, n, kd, k0, tid, c.col);
    /* row tid/cpr (a thread's rows agree mod 8), chunk cc ^ the row's swizzle */
    pg_reg crow = shr_u32(k, tid, log2u(CPR));
    pg_reg sw = and_u32(k, shr_u32(k, crow, SH), CPR - 1);
    pg_reg pc = new_u32(k);
    pg_xor(k, PG_B32, pc, cc, sw);
    c.dsw = shl_u32(k, crow, log2u(ROW));
    pg_mad(k, PG_U32, c.dsw, pc, pg_u32(16), c.dsw);

    pg_comment(k, "ldmatrix row addresses: lane gives row lane%8 of matrix lane/8");
    pg_reg q = shr_u32(k, lane, 3), r = and_u32(k, lane, 7);
    pg_reg lsw = and_u32(k, shr_u32(k, r, SH), CPR - 1);
    pg_reg q0 = and_u32(k, q, 1), q1 = shr_u32(k, q, 1);
    pg_reg arow = new_u32(k), brow = new_u32(k);
    pg_mad(k, PG_U32, arow, wmi, pg_u32(WM), r);
    pg_mad(k, PG_U32, arow, q0, pg_u32(8), arow);
    pg_mad(k, PG_U32, brow, wni, pg_u32(WN), r);
    pg_mad(k, PG_U32, brow, q1, pg_u32(8), brow);
    pg_reg a_off[4], b_off[4];
    for (unsigned s = 0; s < KS; s++) {
        pg_reg ach = add_u32(k, q1, pg_u32(2 * s)), bch = add_u32(k, q0, pg_u32(2 * s));
        pg_xor(k, PG_B32, ach, ach, lsw);
        pg_xor(k, PG_B32, bch, bch, lsw);
        a_off[s] = shl_u32(k, arow, log2u(ROW));
        pg_mad(k, PG_U32, a_off[s], ach, pg_u32(16), a_off[s]);
        b_off[s] = shl_u32(k, brow, log2u(ROW));
        pg_mad(k, PG_U32, b_off[s], bch, pg_u32(16), b_off[s]);
        pg_add(k, PG_U32, b_off[s], b_off[s], pg_u32(cfg->bm * ROW));
    }

    pg_reg acc[F_MAX_MT][F_MAX_NT][4];
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned nt = 0; nt < NT; nt++)
            for (unsigned e = 0; e < 4; e++) {
                acc[mt][nt][e] = new_f32(k);
                pg_mov(k, PG_F32, acc[mt][nt][e], pg_f32(0.0f));
            }
    pg_reg ntiles = add_u32(k, n, pg_u32(cfg->bk - 1));
    pg_shr(k, PG_U32, ntiles, ntiles, pg_u32(log2u(cfg->bk)));

    pg_comment(k, "k-tiles 0 .. stages-2 into stages 0 .. stages-2");
    pg_reg wstage = new_u32(k), rstage = new_u32(k);
    pg_mov(k, PG_U32, wstage, sbase);
    for (unsigned s = 0; s + 1 < S; s++) {
        f_copy_tile(k, &c, wstage);
        pg_add(k, PG_U32, wstage, wstage, pg_u32(SB));
    }
    pg_mov(k, PG_U32, rstage, sbase);

    pg_reg t = new_u32(k);
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_label top = pg_label_new(k, "ktile");
    pg_label_bind(k, top);
    pg_cp_async_wait(k, S - 2);
    pg_bar_sync(k, 0);
    pg_comment(k, "copy k-tile t+stages-1 into the stage k-tile t-1 used");
    f_copy_tile(k, &c, wstage);
    pg_comment(k, "the k-steps of mma tiles out of the stage of k-tile t");
    for (unsigned s = 0; s < KS; s++) {
        pg_reg ra = add_u32(k, rstage, a_off[s]), rb = add_u32(k, rstage, b_off[s]);
        pg_reg af[F_MAX_MT][4], bf[F_MAX_NT][2];
        for (unsigned mt = 0; mt < MT; mt++) {
            for (unsigned e = 0; e < 4; e++)
                af[mt][e] = pg_reg_new(k, PG_B32);
            pg_ldmatrix(k, 4, false, af[mt], ra, mt * 16 * ROW);
        }
        for (unsigned np = 0; np < NT / 2; np++) {
            pg_reg d[4];
            for (unsigned e = 0; e < 4; e++)
                d[e] = pg_reg_new(k, PG_B32);
            pg_ldmatrix(k, 4, false, d, rb, np * 16 * ROW);
            bf[2 * np][0] = d[0];
            bf[2 * np][1] = d[1];
            bf[2 * np + 1][0] = d[2];
            bf[2 * np + 1][1] = d[3];
        }
        for (unsigned mt = 0; mt < MT; mt++)
            for (unsigned nt = 0; nt < NT; nt++)
                pg_mma_m16n8k16_f16_f32(k, acc[mt][nt], af[mt], bf[nt], acc[mt][nt]);
    }
    f_stage_next(k, wstage, sbase, SB, S * SB);
    f_stage_next(k, rstage, sbase, SB, S * SB);
    pg_add(k, PG_U32, t, t, pg_u32(1));
    pg_reg more = cmp_u32(k, PG_CMP_LT, t, ntiles);
    pg_bra_if(k, more, false, top);
    pg_cp_async_wait(k, 0);

    pg_comment(k, "d0,d1 at (row g, cols 2t, 2t+1), d2,d3 at row g+8, of each 16x8 tile");
    pg_reg g = shr_u32(k, lane, 2), t4 = and_u32(k, lane, 3);
    pg_reg cvec = vectors_ok(k, ga, kd, 2, 4);
    pg_reg colbase = new_u32(k);
    pg_mad(k, PG_U32, colbase, wni, pg_u32(WN), k0);
    pg_reg t2 = shl_u32(k, t4, 1);
    pg_add(k, PG_U32, colbase, colbase, t2);
    pg_reg colfull[F_MAX_NT], colin[F_MAX_NT][2], coff[F_MAX_NT];
    for (unsigned nt = 0; nt < NT; nt++) {
        pg_reg col = add_u32(k, colbase, pg_u32(nt * 8));
        pg_reg end = add_u32(k, col, pg_u32(2));
        colfull[nt] = pred_and(k, cmp_u32(k, PG_CMP_LE, end, kd), cvec);
        colin[nt][0] = cmp_u32(k, PG_CMP_LT, col, kd);
        pg_reg c1 = add_u32(k, col, pg_u32(1));
        colin[nt][1] = cmp_u32(k, PG_CMP_LT, c1, kd);
        coff[nt] = new_u64(k);
        pg_mul_wide(k, PG_U32, coff[nt], col, pg_u32(4));
    }
    pg_reg rowbase = new_u32(k);
    pg_mad(k, PG_U32, rowbase, wmi, pg_u32(WM), m0);
    pg_add(k, PG_U32, rowbase, rowbase, g);
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned half = 0; half < 2; half++) {
            pg_reg row = add_u32(k, rowbase, pg_u32(mt * 16 + half * 8));
            pg_reg rin = cmp_u32(k, PG_CMP_LT, row, m);
            pg_reg rowptr = elem_addr2(k, ga, row, kd, pg_u32(0), 4);
            for (unsigned nt = 0; nt < NT; nt++) {
                pg_reg addr = new_u64(k);
                pg_add(k, PG_U64, addr, rowptr, coff[nt]);
                pg_reg full = pred_and(k, rin, colfull[nt]);
                pg_reg partial = new_pred(k);
                pg_not(k, PG_PRED, partial, full);
                pg_and(k, PG_PRED, partial, partial, rin);
                pg_val v[2] = {acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]};
                pg_guard(k, full, false);
                pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, addr, 0, v);
                for (unsigned e = 0; e < 2; e++) {
                    pg_reg ok = pred_and(k, partial, colin[nt][e]);
                    pg_guard(k, ok, false);
                    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, e * 4, v[e]);
                }
            }
        }
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_f16_a(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    if (knobs[3] == F16_LEGACY)
        return build_f16_legacy(k, p);
    return build_f16_pipe(k, p, &f16_cfgs[knobs[3]]);
}

/* ---------------------------------------------------------------- descriptors */

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a + b - 1) / b); }

/* Output P×Q (rows on grid y, columns on grid x), tiles by variant. */
static int launch_pq(uint32_t P, uint32_t Q, uint32_t variant, pgk_launch *out)
{
    if (P == 0 || Q == 0 || variant >= GEMM_VARIANTS)
        return PG_ERANGE;
    uint32_t bm = variant ? rb_cfgs[variant].bm : SEED_T;
    uint32_t bn = variant ? rb_cfgs[variant].bn : SEED_T;
    uint32_t gy = ceil_div(P, bm);
    if (gy > 65535)
        return PG_ERANGE;
    if (variant == 0)
        *out = (pgk_launch){{ceil_div(Q, bn), gy, 1}, {SEED_T, SEED_T, 1}, 0};
    else
        *out = (pgk_launch){{ceil_div(Q, bn), gy, 1}, {rb_threads(&rb_cfgs[variant]), 1, 1}, 0};
    return PG_OK;
}

/* knobs: m, n, k, variant */
static int launch_a(const uint32_t *kn, pgk_launch *out)
{
    if (kn[1] == 0)
        return PG_ERANGE;
    return launch_pq(kn[0], kn[2], kn[3], out);
}

static int launch_b(const uint32_t *kn, pgk_launch *out)
{
    if (kn[0] == 0)
        return PG_ERANGE;
    return launch_pq(kn[2], kn[1], kn[3], out);
}

static int launch_f16_a(const uint32_t *kn, pgk_launch *out)
{
    if (kn[0] == 0 || kn[1] == 0 || kn[2] == 0 || kn[3] >= F16_VARIANTS)
        return PG_ERANGE;
    if (kn[3] == F16_LEGACY) {
        uint32_t gy = ceil_div(kn[0], H_BM);
        if (gy > 65535)
            return PG_ERANGE;
        *out = (pgk_launch){{ceil_div(kn[2], H_BN), gy, 1}, {H_THREADS, 1, 1}, 0};
        return PG_OK;
    }
    const f16_cfg *c = &f16_cfgs[kn[3]];
    uint32_t gy = ceil_div(kn[0], c->bm);
    if (gy > 65535)
        return PG_ERANGE;
    *out = (pgk_launch){{ceil_div(kn[2], c->bn), gy, 1},
                        {F_THREADS, 1, 1},
                        c->stages * f16_stage_bytes(c)};
    return PG_OK;
}

static int build_a(pg_kernel *k, const pg_param *p, const uint32_t *kn)
{
    return build_gemm(k, p, kn, FORM_A);
}
static int build_a_acc(pg_kernel *k, const pg_param *p, const uint32_t *kn)
{
    return build_gemm(k, p, kn, FORM_A_ACC);
}
static int build_b(pg_kernel *k, const pg_param *p, const uint32_t *kn)
{
    return build_gemm(k, p, kn, FORM_B);
}

static const pgk_knob gemm_knobs[] = {
    {"m", 512, 1, GEMM_MAX_DIM, "rows of A and dC (tokens)"},
    {"n", 1536, 1, GEMM_MAX_DIM, "columns of B and dC (layer outputs)"},
    {"k", 1536, 1, GEMM_MAX_DIM, "columns of A, rows of B (layer inputs)"},
    {"variant", 1, 0, GEMM_VARIANTS - 1,
     "0 = seed 16x16 tiles; register-blocked tiles 1 = 128x64, 2 = 128x128, 3 = 64x64"},
};

static const pgk_knob gemm_f16_knobs[] = {
    {"m", 512, 1, GEMM_MAX_DIM, "rows of dC (tokens)"},
    {"n", 1536, 1, GEMM_MAX_DIM, "columns of W and dC (layer outputs)"},
    {"k", 1536, 1, GEMM_MAX_DIM, "rows of W (layer inputs)"},
    {"variant", 0, 0, F16_VARIANTS - 1,
     "(M x K tile, k-tile, cp.async stages) 0 = 64x128, 64, 3; 1 = 64x128 register-staged, "
     "no cp.async or ldmatrix; 2 = 128x128, 32, 4; 3 = 64x128, 32, 4; 4 = 128x128, 64, 3"},
};

static const pgk_param gemm_a_params[] = {
    {"grad_c", PG_U64, true}, {"b", PG_U64, true}, {"grad_a", PG_U64, true},
    {"m", PG_U32, false},     {"n", PG_U32, false}, {"k", PG_U32, false},
};

static const pgk_param gemm_b_params[] = {
    {"a", PG_U64, true}, {"grad_c", PG_U64, true}, {"grad_b", PG_U64, true},
    {"m", PG_U32, false}, {"n", PG_U32, false},     {"k", PG_U32, false},
};

static const pgk_param gemm_f16_params[] = {
    {"grad_c", PG_U64, true}, {"w", PG_U64, true}, {"grad_a", PG_U64, true},
    {"m", PG_U32, false},     {"n", PG_U32, false}, {"k", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_backward_a = {
    .name = "gemm_backward_a",
    .summary = "grad_A[M,K] = dC[M,N] * B[K,N]^T (f32, deterministic)",
    .params = gemm_a_params,
    .nparams = 6,
    .knobs = gemm_knobs,
    .nknobs = 4,
    .min_target = PG_SM_70,
    .baked = "variant",
    .build = build_a,
    .launch = launch_a,
};

const pgk_desc pgk_desc_gemm_backward_a_accumulate = {
    .name = "gemm_backward_a_accumulate",
    .summary = "grad_A[M,K] += dC[M,N] * B[K,N]^T (f32, deterministic)",
    .params = gemm_a_params,
    .nparams = 6,
    .knobs = gemm_knobs,
    .nknobs = 4,
    .min_target = PG_SM_70,
    .baked = "variant",
    .build = build_a_acc,
    .launch = launch_a,
};

const pgk_desc pgk_desc_gemm_backward_b = {
    .name = "gemm_backward_b",
    .summary = "grad_B[K,N] = A[M,K]^T * dC[M,N] (f32, deterministic)",
    .params = gemm_b_params,
    .nparams = 6,
    .knobs = gemm_knobs,
    .nknobs = 4,
    .min_target = PG_SM_70,
    .baked = "variant",
    .build = build_b,
    .launch = launch_b,
};

const pgk_desc pgk_desc_gemm_f16_backward_a = {
    .name = "gemm_f16_backward_a",
    .summary = "grad_A[M,K] = dC[M,N] * W[K,N]^T, f16 in, f32 accumulate and out (mma.sync)",
    .params = gemm_f16_params,
    .nparams = 6,
    .knobs = gemm_f16_knobs,
    .nknobs = 4,
    .min_target = PG_SM_80,
    .baked = "variant",
    .build = build_f16_a,
    .launch = launch_f16_a,
};
