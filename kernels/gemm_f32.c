/* SPDX-License-Identifier: MIT */
/*
 * The f32 GEMMs (DESIGN §3): the forward projection and the backward
 * pair. With C = A·B in the forward pass (A[M,K],
 * B[K,N], C[M,N], all row-major f32):
 *
 *   gemm_backward_a             grad_A[M,K]  = dC[M,N] · B[K,N]ᵀ
 *   gemm_backward_a_accumulate  grad_A[M,K] += dC[M,N] · B[K,N]ᵀ
 *   gemm_backward_b             grad_B[K,N]  = A[M,K]ᵀ · dC[M,N]
 *   gemm_forward(_accumulate)   C[M,N] (+)= A[M,K] · B[K,N]  (last section)
 *
 * (gemm_f16_backward_a, the tensor-core form, is in gemm_mma_f16.c.)
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
 * size the launch; the output's rows (m, or k for grad_B) go on grid y,
 * which stops at 65,535 blocks, so they stop at 65,535 tiles of 16. The
 * baked knob `variant` picks the tiling; pick_a/pick_b say which one the
 * runtime's dispatch uses for a shape (pgk_pick).
 */
#include "gemm_abi.h"

#include <string.h>

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
        pg_reg old = pgk_zero_f32(k);
        pg_guard(k, ok, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, off, old);
        pg_reg sum = pgv_add(k, PG_F32, old, v);
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
    pg_reg p0 = pgv_mul(k, PG_U32, by, pg_u32(SEED_T));
    pg_reg q0 = pgv_mul(k, PG_U32, bx, pg_u32(SEED_T));

    /* Each thread loads one element of each tile, coalesced along memory
     * rows, and stores it at [p or q][r] so that the product loop reads
     * xs[ty][kk] (a broadcast) and ys[tx][kk] (16 banks). */
    pg_reg ri = pg_reg_new(k, PG_U32), xp, yq, xptr, yptr, wr = pg_reg_new(k, PG_U32);
    pg_val xstep, ystep;
    if (io->contig_r) { /* element (row p/q = ty, r = tx) */
        pg_mov(k, PG_U32, ri, tx);
        xp = pgv_add(k, PG_U32, p0, ty);
        yq = pgv_add(k, PG_U32, q0, ty);
        xptr = pgk_elem_addr2(k, io->x, xp, io->ldx, tx, 4);
        yptr = pgk_elem_addr2(k, io->y, yq, io->ldy, tx, 4);
        xstep = ystep = pg_u64(SEED_T * 4);
        pg_mad(k, PG_U32, wr, ty, pg_u32(SEED_S), tx);
    } else { /* element (r = ty, p/q = tx) */
        pg_mov(k, PG_U32, ri, ty);
        xp = pgv_add(k, PG_U32, p0, tx);
        yq = pgv_add(k, PG_U32, q0, tx);
        xptr = pgk_elem_addr2(k, io->x, ty, io->ldx, xp, 4);
        yptr = pgk_elem_addr2(k, io->y, ty, io->ldy, yq, 4);
        pg_reg xst = pg_reg_new(k, PG_U64), yst = pg_reg_new(k, PG_U64);
        pg_mul_wide(k, PG_U32, xst, io->ldx, pg_u32(SEED_T * 4));
        pg_mul_wide(k, PG_U32, yst, io->ldy, pg_u32(SEED_T * 4));
        xstep = xst;
        ystep = yst;
        pg_mad(k, PG_U32, wr, tx, pg_u32(SEED_S), ty);
    }
    pg_shl(k, PG_B32, wr, wr, pg_u32(2));
    pg_reg xin = pgv_setp(k, PG_CMP_LT, PG_U32, xp, io->P);
    pg_reg yin = pgv_setp(k, PG_CMP_LT, PG_U32, yq, io->Q);
    pg_reg xs_base = pg_reg_new(k, PG_U32), ys_base = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, xs_base, pg_shared_addr(xs));
    pg_mov(k, PG_U32, ys_base, pg_shared_addr(ys));
    pg_reg xs_wr = pgv_add(k, PG_U32, xs_base, wr);
    pg_reg ys_wr = pgv_add(k, PG_U32, ys_base, wr);
    pg_reg xs_rd0 = pg_reg_new(k, PG_U32), ys_rd0 = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, xs_rd0, ty, pg_u32(SEED_S * 4), xs_base);
    pg_mad(k, PG_U32, ys_rd0, tx, pg_u32(SEED_S * 4), ys_base);

    pg_reg acc = pgk_zero_f32(k);
    pg_reg tiles = pgv_add(k, PG_U32, io->R, pg_u32(SEED_T - 1));
    pg_shr(k, PG_U32, tiles, tiles, pg_u32(4));
    pg_reg t = pgv_mov(k, PG_U32, pg_u32(0));

    pg_label tile_top = pg_label_new(k, "tile");
    pg_label inner_top = pg_label_new(k, "inner");
    pg_label_bind(k, tile_top);
    pg_comment(k, "stage one 16x16 tile of X and of Y (zero outside the matrices)");
    pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, ri, io->R);
    pg_reg xok = pgv_and(k, PG_PRED, xin, rin), yok = pgv_and(k, PG_PRED, yin, rin);
    pg_reg xv = pg_reg_new(k, PG_F32), yv = pg_reg_new(k, PG_F32);
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
    pg_reg i = pg_reg_new(k, PG_U32), xa = pg_reg_new(k, PG_U32), ya = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, i, pg_u32(0));
    pg_mov(k, PG_U32, xa, xs_rd0);
    pg_mov(k, PG_U32, ya, ys_rd0);
    pg_label_bind(k, inner_top);
    for (int e = 0; e < 4; e++) {
        pg_reg a = pg_reg_new(k, PG_F32), b = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, xa, e * 4, a);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, ya, e * 4, b);
        pg_fma(k, PG_F32, acc, a, b, acc);
    }
    pg_add(k, PG_U32, xa, xa, pg_u32(16));
    pg_add(k, PG_U32, ya, ya, pg_u32(16));
    pg_add(k, PG_U32, i, i, pg_u32(1));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, i, pg_u32(SEED_T / 4));
    pg_bra_if(k, more, false, inner_top);
    pg_bar_sync(k, 0);

    pg_add(k, PG_U64, xptr, xptr, xstep);
    pg_add(k, PG_U64, yptr, yptr, ystep);
    pg_add(k, PG_U32, ri, ri, pg_u32(SEED_T));
    pg_add(k, PG_U32, t, t, pg_u32(1));
    pg_reg again = pgv_setp(k, PG_CMP_LT, PG_U32, t, tiles);
    pg_bra_if(k, again, false, tile_top);

    pg_comment(k, "C[p0+ty][q0+tx]");
    pg_reg row = pgv_add(k, PG_U32, p0, ty), col = pgv_add(k, PG_U32, q0, tx);
    /* in order, as arguments they are not */
    pg_reg rok = pgv_setp(k, PG_CMP_LT, PG_U32, row, io->P);
    pg_reg ok = pgv_and(k, PG_PRED, rok, pgv_setp(k, PG_CMP_LT, PG_U32, col, io->Q));
    pg_reg ca = pgk_elem_addr2(k, io->c, row, io->Q, col, 4);
    store_out(k, io, ca, 0, ok, acc);
    pg_ret(k);
}

/* ---------------------------------------------------------------- variants 1-3: register blocking */


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
static const pgk_rb_cfg rb_cfgs[GEMM_VARIANTS] = {
    {0, 0, 0, 0, 0},
    {128, 64, 16, 8, 4},
    {128, 128, 8, 8, 8},
    {64, 64, 16, 4, 4},
};



static void build_regblock(pg_kernel *k, const gemm_io *io, const pgk_rb_cfg *c)
{
    const unsigned threads = pgk_rb_threads(c);
    const unsigned thx = c->bn / c->tn, thy = c->bm / c->tm;
    const unsigned sa = c->bm + 4, sb = c->bn + 4; /* padded rows, floats */
    const unsigned b_off = c->bk * sa * 4;        /* Y tile after X, bytes */
    const unsigned stage = c->bk * (sa + sb) * 4; /* bytes */
    pg_kernel_set_maxntid(k, threads, 1, 1);
    pg_shared tiles = pg_shared_static(k, PG_F32, 2 * stage / 4, 16, "tiles");
    pg_reg sbase = pgv_mov(k, PG_U32, pg_shared_addr(tiles));

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg tx = pgv_and(k, PG_B32, tid, pg_u32(thx - 1));
    pg_reg ty = pgv_shr(k, PG_U32, tid, pg_u32(log2u(thx)));
    pg_reg p0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(c->bm));
    pg_reg q0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(c->bn));

    pgk_rb_operand X, Y;
    pgk_rb_operand_init(k, &X, c, c->bm, io->contig_r, io->x, io->ldx, io->P, io->R, p0,
                        pg_none(), tid, 0);
    pgk_rb_operand_init(k, &Y, c, c->bn, io->contig_r, io->y, io->ldy, io->Q, io->R, q0,
                        pg_none(), tid, b_off);

    pg_reg acc[RB_MAX_T][RB_MAX_T];
    for (unsigned i = 0; i < c->tm; i++)
        for (unsigned j = 0; j < c->tn; j++)
            acc[i][j] = pgk_zero_f32(k);
    pg_reg ntiles = pgv_add(k, PG_U32, io->R, pg_u32(c->bk - 1));
    pg_shr(k, PG_U32, ntiles, ntiles, pg_u32(log2u(c->bk)));

    pg_comment(k, "r-tile 0 into stage 0");
    pgk_rb_operand_load(k, &X);
    pgk_rb_operand_load(k, &Y);
    pgk_rb_operand_store(k, &X, sbase);
    pgk_rb_operand_store(k, &Y, sbase);
    pg_bar_sync(k, 0);

    pg_reg cur = pg_reg_new(k, PG_U32), t = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, cur, pg_u32(0));
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_reg rd_x = pg_reg_new(k, PG_U32), rd_y = pg_reg_new(k, PG_U32); /* per-thread read offsets */
    pg_shl(k, PG_B32, rd_x, ty, pg_u32(4));
    pg_mad(k, PG_U32, rd_y, tx, pg_u32(16), pg_u32(b_off));

    pgk_rb_loop L = {.x = &X, .y = &Y, .sbase = sbase, .cur = cur, .t = t, .stage = stage};
    pgk_rb_loop_head(k, &L, ntiles);
    pg_comment(k, "multiply r-tile t out of stage cur");
    pg_reg rs = pgv_add(k, PG_U32, sbase, cur);
    pg_reg ax = pgv_add(k, PG_U32, rs, rd_x), ay = pgv_add(k, PG_U32, rs, rd_y);
    pg_reg a[RB_MAX_T], b[RB_MAX_T];
    for (unsigned i = 0; i < c->tm; i++)
        a[i] = pg_reg_new(k, PG_F32);
    for (unsigned j = 0; j < c->tn; j++)
        b[j] = pg_reg_new(k, PG_F32);
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
    pgk_rb_loop_tail(k, &L);
    pgk_rb_store(k, c, &(pgk_rb_out){io->c, io->P, io->Q, tx, ty, p0, q0, io->accumulate}, acc);
    pg_ret(k);
}

static int build_gemm(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    gemm_io io;
    gemm_io_load(k, p, (gemm_form)d->variant, &io);
    uint32_t v = knobs[GEMM_VARIANT];
    if (v == 0)
        build_seed(k, &io);
    else
        build_regblock(k, &io, &rb_cfgs[v]);
    return pg_kernel_error(k);
}

/* Output P×Q (rows on grid y, columns on grid x), tiles by variant. Grid y
 * stops at 65,535 blocks: GEMM_MAX_ROWS keeps P inside it for every
 * variant (the seed's 16-row tiles are the smallest). */
#define GEMM_MAX_ROWS (65535u * SEED_T)

static int launch_pq(uint32_t P, uint32_t Q, uint32_t variant, pgk_launch *out)
{
    if (P == 0 || Q == 0 || P > GEMM_MAX_ROWS || Q > GEMM_MAX_DIM || variant >= GEMM_VARIANTS)
        return PG_ERANGE;
    if (variant == 0) {
        *out = (pgk_launch){{pgk_ceil_div(Q, SEED_T), pgk_ceil_div(P, SEED_T), 1},
                            {SEED_T, SEED_T, 1}, 0};
    } else {
        const pgk_rb_cfg *c = &rb_cfgs[variant];
        *out = (pgk_launch){{pgk_ceil_div(Q, c->bn), pgk_ceil_div(P, c->bm), 1},
                            {pgk_rb_threads(c), 1, 1}, 0};
    }
    return PG_OK;
}

static int launch_a(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    if (kn[GEMM_N] == 0)
        return PG_ERANGE;
    return launch_pq(kn[GEMM_M], kn[GEMM_K], kn[GEMM_VARIANT], out);
}

static int launch_b(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    if (kn[GEMM_M] == 0)
        return PG_ERANGE;
    return launch_pq(kn[GEMM_K], kn[GEMM_N], kn[GEMM_VARIANT], out);
}

#define GEMM_DEFAULT_VARIANT 1u
/* Outputs with fewer rows or columns than this run the seed's 16×16 tiles
 * (variant 0): the register-blocked tiles would leave most of a 64- or
 * 128-wide tile empty and the grid a handful of blocks. */
#define GEMM_SMALL_SIDE 64u

static void pick_pq(uint32_t P, uint32_t Q, uint32_t *kn)
{
    kn[GEMM_VARIANT] = P < GEMM_SMALL_SIDE || Q < GEMM_SMALL_SIDE ? 0 : GEMM_DEFAULT_VARIANT;
}

static void pick_a(const pgk_desc *d, uint32_t *kn)
{
    (void)d;
    pick_pq(kn[GEMM_M], kn[GEMM_K], kn);
}

static void pick_b(const pgk_desc *d, uint32_t *kn)
{
    (void)d;
    pick_pq(kn[GEMM_K], kn[GEMM_N], kn);
}

#define VARIANT_KNOB                                                                       \
    [GEMM_VARIANT] = {"variant", GEMM_DEFAULT_VARIANT, 0, GEMM_VARIANTS - 1,               \
                      "0 = seed 16x16 tiles; register-blocked tiles 1 = 128x64, "           \
                      "2 = 128x128, 3 = 64x64",                                             \
                      true}

/* The output's rows (m for grad_A, k for grad_B) go on grid y. */
static const pgk_knob gemm_a_knobs[] = {
    [GEMM_M] = {"m", 512, 1, GEMM_MAX_ROWS, "rows of A and dC (tokens); at most 65535 tiles of 16",
                false},
    [GEMM_N] = {"n", 1536, 1, GEMM_MAX_DIM, "columns of B and dC (layer outputs)", false},
    [GEMM_K] = {"k", 1536, 1, GEMM_MAX_DIM, "columns of A, rows of B (layer inputs)", false},
    VARIANT_KNOB,
};

static const pgk_knob gemm_b_knobs[] = {
    [GEMM_M] = {"m", 512, 1, GEMM_MAX_DIM, "rows of A and dC (tokens)", false},
    [GEMM_N] = {"n", 1536, 1, GEMM_MAX_DIM, "columns of B and dC (layer outputs)", false},
    [GEMM_K] = {"k", 1536, 1, GEMM_MAX_ROWS,
                "columns of A, rows of B (layer inputs); at most 65535 tiles of 16", false},
    VARIANT_KNOB,
};

static const pgk_param gemm_a_params[] = {
    {"grad_c", PG_U64, true}, {"b", PG_U64, true}, {"grad_a", PG_U64, true},
    {"m", PG_U32, false},     {"n", PG_U32, false}, {"k", PG_U32, false},
};

static const pgk_param gemm_b_params[] = {
    {"a", PG_U64, true}, {"grad_c", PG_U64, true}, {"grad_b", PG_U64, true},
    {"m", PG_U32, false}, {"n", PG_U32, false},     {"k", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_backward_a = {
    .name = "gemm_backward_a",
    .summary = "grad_A[M,K] = dC[M,N] * B[K,N]^T (f32, deterministic)",
    PGK_PARAMS(gemm_a_params),
    PGK_KNOBS(gemm_a_knobs),
    .min_target = PG_SM_70,
    .build = build_gemm,
    .launch = launch_a,
    .pick = pick_a,
    .variant = FORM_A,
};

const pgk_desc pgk_desc_gemm_backward_a_accumulate = {
    .name = "gemm_backward_a_accumulate",
    .summary = "grad_A[M,K] += dC[M,N] * B[K,N]^T (f32, deterministic)",
    PGK_PARAMS(gemm_a_params),
    PGK_KNOBS(gemm_a_knobs),
    .min_target = PG_SM_70,
    .build = build_gemm,
    .launch = launch_a,
    .pick = pick_a,
    .variant = FORM_A_ACC,
};

const pgk_desc pgk_desc_gemm_backward_b = {
    .name = "gemm_backward_b",
    .summary = "grad_B[K,N] = A[M,K]^T * dC[M,N] (f32, deterministic)",
    PGK_PARAMS(gemm_b_params),
    PGK_KNOBS(gemm_b_knobs),
    .min_target = PG_SM_70,
    .build = build_gemm,
    .launch = launch_b,
    .pick = pick_b,
    .variant = FORM_B,
};

/* ---------------------------------------------------------------- gemm_forward(_accumulate) */

#define GEMM_T 16u

/* The seed's tiled form for NN: block (16,16) owns a 16x16 tile of C;
 * 16-wide slices of A's rows and B's columns go through shared memory, and
 * each thread runs one fma chain over k = 0, 1, ..., K-1 in order (a term
 * past the edge is 0*0 and changes nothing), so every output has the same
 * bits run to run. The k-loop's trip count comes from the params: every
 * thread reaches its barriers. The accumulate form adds the chain to C once
 * at the end. */
static int build_gemm_fwd(pg_kernel *k, const pg_param *p, bool accumulate)
{
    pg_kernel_set_maxntid(k, GEMM_T, GEMM_T, 1);
    pg_shared as = pg_shared_static(k, PG_F32, GEMM_T * GEMM_T, 4, "a_tile");
    pg_shared bs = pg_shared_static(k, PG_F32, GEMM_T * GEMM_T, 4, "b_tile");
    pg_reg A = pg_param_load(k, p[0]);
    pg_reg B = pg_param_load(k, p[1]);
    pg_reg C = pg_param_load(k, p[2]);
    pg_reg M = pg_param_load(k, p[3]);
    pg_reg N = pg_param_load(k, p[4]);
    pg_reg K = pg_param_load(k, p[5]);

    pg_reg tx = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ty = pg_sreg_read(k, PG_SREG_TID_Y);
    pg_reg bx = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg by = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg row = pgv_mad(k, PG_U32, by, pg_u32(GEMM_T), ty);
    pg_reg col = pgv_mad(k, PG_U32, bx, pg_u32(GEMM_T), tx);
    pg_reg row_ok = pgv_setp(k, PG_CMP_LT, PG_U32, row, M);
    pg_reg col_ok = pgv_setp(k, PG_CMP_LT, PG_U32, col, N);

    pg_comment(k, "shared slots: a_tile[ty][tx] and b_tile[ty][tx] written, a_tile[ty][*] and "
                  "b_tile[*][tx] read");
    pg_reg a_base = pgv_mov(k, PG_U32, pg_shared_addr(as));
    pg_reg b_base = pgv_mov(k, PG_U32, pg_shared_addr(bs));
    pg_reg slot = pgv_mad(k, PG_U32, ty, pg_u32(GEMM_T), tx);
    pg_shl(k, PG_B32, slot, slot, pg_u32(2));
    pg_reg a_st = pgv_add(k, PG_U32, a_base, slot);
    pg_reg b_st = pgv_add(k, PG_U32, b_base, slot);
    pg_reg a_rd = pgv_mad(k, PG_U32, ty, pg_u32(GEMM_T * 4), a_base);
    pg_reg b_rd = pgv_mad(k, PG_U32, tx, pg_u32(4), b_base);

    pg_comment(k, "A row pointer &A[row*K] and B column pointer &B[col]");
    pg_reg a_row = pgk_row_addr(k, A, row, K);
    pg_reg b_col = pgk_elem_addr(k, B, col, 4);

    pg_reg acc = pgk_zero_f32(k);
    pg_reg t0 = pgv_mov(k, PG_U32, pg_u32(0));
    pg_reg ka = pg_reg_new(k, PG_U32);
    pg_reg kb = pg_reg_new(k, PG_U32);
    pg_reg pa = pg_reg_new(k, PG_PRED);
    pg_reg pb = pg_reg_new(k, PG_PRED);
    pg_reg pt = pg_reg_new(k, PG_PRED);
    pg_reg av = pg_reg_new(k, PG_F32);
    pg_reg bv = pg_reg_new(k, PG_F32);
    pg_reg addr = pg_reg_new(k, PG_U64);
    pg_label top = pg_label_new(k, "k_tile");
    pg_label done = pg_label_new(k, "store");
    pg_label_bind(k, top);
    pg_setp(k, PG_CMP_GE, PG_U32, pt, t0, K);
    pg_bra_if(k, pt, false, done);

    pg_comment(k, "a_tile[ty][tx] = A[row][t0+tx], b_tile[ty][tx] = B[t0+ty][col]; 0 past the edges");
    pg_add(k, PG_U32, ka, t0, tx);
    pg_setp(k, PG_CMP_LT, PG_U32, pa, ka, K);
    pg_and(k, PG_PRED, pa, pa, row_ok);
    pg_mov(k, PG_F32, av, pg_f32(0.0f));
    pg_reg aoff = pgv_mul_wide(k, PG_U32, ka, pg_u32(4));
    pg_add(k, PG_U64, addr, a_row, aoff);
    pg_guard(k, pa, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, av);
    pg_st(k, PG_SPACE_SHARED, PG_F32, a_st, 0, av);

    pg_add(k, PG_U32, kb, t0, ty);
    pg_setp(k, PG_CMP_LT, PG_U32, pb, kb, K);
    pg_and(k, PG_PRED, pb, pb, col_ok);
    pg_mov(k, PG_F32, bv, pg_f32(0.0f));
    pg_reg boff = pgv_mul_wide(k, PG_U32, kb, N);
    pg_shl(k, PG_B64, boff, boff, pg_u32(2));
    pg_add(k, PG_U64, addr, b_col, boff);
    pg_guard(k, pb, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, bv);
    pg_st(k, PG_SPACE_SHARED, PG_F32, b_st, 0, bv);
    pg_bar_sync(k, 0);

    pg_comment(k, "acc = fma(a_tile[ty][kk], b_tile[kk][tx], acc), kk = 0..15 in order");
    for (uint32_t kk = 0; kk < GEMM_T; kk++) {
        pg_reg x = pg_reg_new(k, PG_F32);
        pg_reg w = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, a_rd, 4 * kk, x);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, b_rd, 4 * GEMM_T * kk, w);
        pg_fma(k, PG_F32, acc, x, w, acc);
    }
    pg_bar_sync(k, 0);
    pg_add(k, PG_U32, t0, t0, pg_u32(GEMM_T));
    pg_bra(k, top);

    pg_label_bind(k, done);
    pg_label out = pg_label_new(k, "exit");
    pg_reg ok = pgv_and(k, PG_PRED, row_ok, col_ok);
    pg_bra_if(k, ok, true, out);
    pg_reg c_row = pgk_row_addr(k, C, row, N);
    pg_reg caddr = pgk_elem_addr(k, c_row, col, 4);
    if (accumulate) {
        pg_reg old = pgk_ld_f32(k, caddr);
        pg_add(k, PG_F32, acc, old, acc);
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, caddr, 0, acc);
    return pgk_finish(k, out);
}

static int build_gemm_fwd_set(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                              const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    return build_gemm_fwd(k, p, false);
}

static int build_gemm_fwd_acc(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                              const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    return build_gemm_fwd(k, p, true);
}

/* Grid (ceil(N/16), ceil(M/16)), block (16,16); M's tiles on grid y. */
static int launch_gemm_fwd(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    uint32_t m = kn[GEMM_M], n = kn[GEMM_N], kd = kn[GEMM_K];
    if (m == 0 || n == 0 || kd == 0 || m > 65535u * GEMM_T || n > GEMM_MAX_DIM ||
        kd > GEMM_MAX_DIM)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(n, GEMM_T), pgk_ceil_div(m, GEMM_T), 1}, {GEMM_T, GEMM_T, 1},
                        0};
    return PG_OK;
}

static const pgk_param gemm_fwd_params[] = {
    {"a", PG_U64, true}, {"b", PG_U64, true}, {"c", PG_U64, true},
    {"m", PG_U32, false}, {"n", PG_U32, false}, {"k", PG_U32, false},
};

static const pgk_knob gemm_fwd_knobs[] = {
    [GEMM_M] = {"m", 512, 1, 65535u * GEMM_T, "rows of A and C (tokens); at most 65535 tiles of 16",
                false},
    [GEMM_N] = {"n", 1536, 1, GEMM_MAX_DIM, "columns of B and C (layer outputs)", false},
    [GEMM_K] = {"k", 1536, 1, GEMM_MAX_DIM, "columns of A, rows of B (layer inputs)", false},
};

const pgk_desc pgk_desc_gemm_forward = {
    .name = "gemm_forward",
    .summary = "C[M,N] = A[M,K] * B[K,N] (f32, NN, 16x16 tiles, deterministic)",
    PGK_PARAMS(gemm_fwd_params),
    PGK_KNOBS(gemm_fwd_knobs),
    .min_target = PG_SM_70,
    .build = build_gemm_fwd_set,
    .launch = launch_gemm_fwd,
};

const pgk_desc pgk_desc_gemm_forward_accumulate = {
    .name = "gemm_forward_accumulate",
    .summary = "C[M,N] += A[M,K] * B[K,N] (f32, NN, 16x16 tiles, deterministic)",
    PGK_PARAMS(gemm_fwd_params),
    PGK_KNOBS(gemm_fwd_knobs),
    .min_target = PG_SM_70,
    .build = build_gemm_fwd_acc,
    .launch = launch_gemm_fwd,
};

/* ---------------------------------------------------------------- their side of the chooser */

/* Each layout as one of these kernels, all three in their own (M, K, N):
 * forward is grad_A = dC·Bᵀ with B = W, backward_x is C = A·B with B = W,
 * backward_w is grad_B = Aᵀ·dC with A = dY. */
static const pgk_desc *const seed_desc[PGK_GEMM_LAYOUTS] = {
    &pgk_desc_gemm_backward_a, &pgk_desc_gemm_forward, &pgk_desc_gemm_backward_b};
/* ...and their accumulating forms (none for dW) */
static const pgk_desc *const seed_acc_desc[PGK_GEMM_LAYOUTS] = {
    &pgk_desc_gemm_backward_a_accumulate, &pgk_desc_gemm_forward_accumulate, NULL};

/* d for the layer's (m, n, k): the kernel's own (M, K, N), picked. */
static int seed_fill(const pgk_desc *d, uint32_t m, uint32_t n, uint32_t k, pgk_gemm_choice *out)
{
    out->desc = d;
    out->split = 1;
    out->m = m;
    out->n = k;
    out->k = n;
    int rc = pgk_knobs_default(out->desc, &out->knobs);
    if (rc)
        return rc;
    out->knobs.v[GEMM_M] = out->m;
    out->knobs.v[GEMM_N] = out->n;
    out->knobs.v[GEMM_K] = out->k;
    if (out->knobs.v[GEMM_M] > out->desc->knobs[GEMM_M].max ||
        out->knobs.v[GEMM_N] > out->desc->knobs[GEMM_N].max ||
        out->knobs.v[GEMM_K] > out->desc->knobs[GEMM_K].max)
        return PG_ERANGE;
    pgk_pick(out->desc, &out->knobs);
    return PG_OK;
}

int pgk_gemm_f32_seed_choice(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                             pg_target target, pgk_gemm_choice *out)
{
    int rc = pgk_gemm_choice_init(layout, m, n, k, target, out);
    return rc ? rc : seed_fill(seed_desc[layout], m, n, k, out);
}

int pgk_gemm_seed_choice(pgk_gemm_layout layout, bool accumulate, uint32_t m, uint32_t n,
                         uint32_t k, pgk_gemm_choice *out)
{
    if (!out || (unsigned)layout >= PGK_GEMM_LAYOUTS)
        return PG_EINVAL;
    memset(out, 0, sizeof *out);
    const pgk_desc *d = accumulate ? seed_acc_desc[layout] : seed_desc[layout];
    if (!d)
        return PG_EINVAL; /* the seed has no accumulating dW */
    if (!m || !n || !k)
        return PG_ERANGE;
    return seed_fill(d, m, n, k, out);
}

bool pgk_gemm_f32_seed_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                                uint32_t *m, uint32_t *n, uint32_t *k)
{
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        if (d == seed_desc[l]) {
            *layout = (pgk_gemm_layout)l;
            *m = kn->v[GEMM_M];
            *n = kn->v[GEMM_K];
            *k = kn->v[GEMM_N];
            return true;
        }
    return false;
}
