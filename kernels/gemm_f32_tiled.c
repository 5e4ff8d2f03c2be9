/* SPDX-License-Identifier: MIT */
/*
 * The warp-tiled fp32 GEMM family (no TF32): gemm_f32_forward,
 * gemm_f32_backward_x, gemm_f32_backward_w, the three products of a linear
 * layer's training step (pgk_gemm_layout) with the params and flags of
 * the GEMM ABI (gemm_abi.h) and the split-K reduce of the mma.sync family
 * (gemm_mma_reduce):
 *
 *   forward      Y[M,N]  (+)= X[M,K] · W[N,K]ᵀ   (+ bias[N])
 *   backward_x   dX[M,K] (+)= dY[M,N] · W[N,K]   (+ bias[K])
 *   backward_w   dW[N,K] (+)= dY[M,N]ᵀ · X[M,K]  (+ bias[K])
 *
 * As there, C[P,Q] = Σ_r A(p,r)·B(q,r) with (P,Q,R) = (M,N,K), (M,K,N),
 * (N,K,M). Forward reads both operands with r contiguous, backward_x reads
 * W with q contiguous, backward_w reads both with p (q) contiguous.
 *
 * A block owns a bm × bn tile of C; its threads hold tm × tn outputs each
 * (4 × 4 quads), its warps a (tm·lp) × (tn·32/lp) warp tile, lp lanes
 * along P. Lane (lp_i, lq_i) of warp (wp_i, wq_i) holds rows
 * wp_i·WP + lp_i·4 + i·4·lp + e and columns wq_i·WQ + lq_i·4 + j·4·lq + e:
 * for one r, each of a warp's 16-byte shared loads reads lp (or 32/lp)
 * distinct vectors of one row of an operand tile, broadcast to the lanes
 * that share them: 64 or 128 contiguous bytes, one wavefront, no bank
 * conflict. 8 × 8 outputs from 4 such loads: 16 fma a load.
 *
 * The operand tiles sit in shared memory as [r][p] rows of bm + 4 (bn +
 * 4) floats, two stages of r-tiles of bk. The tile mover of gemm_tile.c
 * loads 16-byte vectors from global memory into registers (four guarded
 * floats at the edges and for unaligned operands) and stores them into the
 * other stage, transposing the r-contiguous operands (four 4-byte stores
 * that fall in 32 different banks). The next r-tile's loads are issued
 * before the current one's multiply; one barrier a tile. Within a tile the
 * fragments of step kk+1 are loaded before the fma of step kk.
 *
 * Split-K: block z of gridDim.z sums the r-tiles [z·per, (z+1)·per), per =
 * ceil(tiles / gridDim.z), and with gridDim.z > 1 writes its partial sums
 * to workspace[z][P][Q]; gemm_mma_reduce (out f32) adds them in z order,
 * then the bias and the old output. Every output is one fma chain over its
 * r in order (per slice): the same bits run to run.
 *
 * Blocks: a 1-D grid over the P×Q tiles in groups of 8 P-tiles, so that
 * the blocks resident at once share their operand tiles in L2.
 */
#include "gemm_abi.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- tiles */

/* The knobs, in this order. */
enum { FT_M, FT_N, FT_K, FT_TILE, FT_SPLIT };

typedef struct f32_cfg {
    unsigned bm, bn, bk; /* block tile P × Q, r-tiles of bk */
    unsigned tm, tn;     /* outputs a thread along P and Q: multiples of 4 */
    unsigned lp;         /* lanes of a warp along P (32 / lp along Q) */
    unsigned wp;         /* warps along P */
    unsigned occ;        /* .minnctapersm (blocks an SM holds), 0: no bound */
} f32_cfg;

#define F32_TILES 5
#define F32_GROUP 8u /* P-tiles a group of the block order */

static const f32_cfg f32_cfgs[F32_TILES] = {
    {128, 128, 16, 8, 8, 4, 4, 2}, /* 0: 256 threads, warps of 32 x 64, two blocks an SM */
    {128, 128, 8, 8, 8, 4, 4, 2},  /* 1: tile 0 with r-tiles of 8 */
    {128, 64, 8, 8, 8, 4, 4, 4},   /* 2: 128 threads */
    {64, 128, 8, 8, 8, 4, 2, 4},   /* 3: 128 threads */
    {64, 64, 16, 8, 4, 4, 2, 4},   /* 4: 128 threads of 8 x 4 */
};

static unsigned f32_threads(const f32_cfg *c) { return (c->bm / c->tm) * (c->bn / c->tn); }

/* The tile mover's limits (gemm_tile.h) and the warp tiling's shape. */
#define F32_CHECK(bm, bn, bk, tm, tn, lp, wp)                                                \
    _Static_assert((bm) == (wp) * (tm) * (lp) && (bn) % ((tn) * (32 / (lp))) == 0 &&          \
                       (bm) * (bk) / 4 % ((bm) / (tm) * ((bn) / (tn))) == 0 &&                \
                       (bn) * (bk) / 4 % ((bm) / (tm) * ((bn) / (tn))) == 0 &&                \
                       (bm) * (bk) / 4 / ((bm) / (tm) * ((bn) / (tn))) <= RB_MAX_SLOTS &&     \
                       (bn) * (bk) / 4 / ((bm) / (tm) * ((bn) / (tn))) <= RB_MAX_SLOTS &&     \
                       (tm) % 4 == 0 && (tn) % 4 == 0 && (tm) <= RB_MAX_T && (tn) <= RB_MAX_T, \
                   "f32 tile configuration")
F32_CHECK(128, 128, 16, 8, 8, 4, 4);
F32_CHECK(128, 128, 8, 8, 8, 4, 4);
F32_CHECK(128, 64, 8, 8, 8, 4, 4);
F32_CHECK(64, 128, 8, 8, 8, 4, 2);
F32_CHECK(64, 64, 16, 8, 4, 4, 2);

uint32_t pgk_gemm_f32_tile_rows(unsigned tile) { return tile < F32_TILES ? f32_cfgs[tile].bm : 0; }
uint32_t pgk_gemm_f32_tile_cols(unsigned tile) { return tile < F32_TILES ? f32_cfgs[tile].bn : 0; }

/* ---------------------------------------------------------------- the epilogue */

/* Where a thread's outputs go: C[P, Q] row-major; rows rowbase + i/4·rs +
 * i%4, columns colbase + j/4·cs + j%4. */
typedef struct f32_out {
    pg_reg c, P, Q, rowbase, colbase;
    unsigned rs, cs;
    pg_reg bias, do_acc, do_bias; /* unused when partial */
    bool partial;                 /* split-K partial sums: no bias, no accumulate */
} f32_out;

/* C = old + (acc + bias), old and bias 0 where the flags say so (the order
 * of the 16-bit family's epilogue); a 16-byte store where four columns are
 * inside and C allows vectors, guarded floats at the edges. */
static void f32_epilogue(pg_kernel *k, const f32_cfg *c, const f32_out *o,
                         pg_reg (*acc)[RB_MAX_T])
{
    pg_reg cvec = pgk_vectors_ok(k, o->c, o->Q, 4, 4);
    pg_reg colfull[RB_MAX_T / 4], colin[RB_MAX_T / 4][4], coff[RB_MAX_T / 4];
    pg_reg bv[RB_MAX_T / 4][4];
    for (unsigned q = 0; q < c->tn / 4; q++) {
        pg_reg col = pgv_add(k, PG_U32, o->colbase, pg_u32(q * o->cs));
        pgk_col4_tests(k, col, o->Q, cvec, &colfull[q], colin[q], &coff[q]);
        if (o->partial)
            continue;
        pg_reg ba = pgv_add(k, PG_U64, o->bias, coff[q]);
        for (unsigned e = 0; e < 4; e++) {
            bv[q][e] = pgk_zero_f32(k);
            pg_reg ok = pgv_and(k, PG_PRED, colin[q][e], o->do_bias);
            pg_guard(k, ok, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, ba, e * 4, bv[q][e]);
        }
    }
    for (unsigned i = 0; i < c->tm; i++) {
        pg_reg row = pgv_add(k, PG_U32, o->rowbase, pg_u32(i / 4 * o->rs + i % 4));
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, row, o->P);
        pg_reg rowptr = pgk_elem_addr2(k, o->c, row, o->Q, pg_u32(0), 4);
        for (unsigned q = 0; q < c->tn / 4; q++) {
            pg_reg addr = pgv_add(k, PG_U64, rowptr, coff[q]);
            pg_reg full, ok[4], v[4];
            pgk_row4_preds(k, rin, colfull[q], colin[q], &full, ok);
            for (unsigned e = 0; e < 4; e++)
                v[e] = acc[i][q * 4 + e];
            if (!o->partial) {
                pg_reg old[4];
                for (unsigned e = 0; e < 4; e++)
                    old[e] = pgk_zero_f32(k);
                pg_reg fa = pgv_and(k, PG_PRED, full, o->do_acc);
                pg_guard(k, fa, false);
                pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, old);
                for (unsigned e = 0; e < 4; e++) {
                    pg_reg pa = pgv_and(k, PG_PRED, ok[e], o->do_acc);
                    pg_guard(k, pa, false);
                    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, e * 4, old[e]);
                }
                for (unsigned e = 0; e < 4; e++) {
                    pg_reg s = pgv_add(k, PG_F32, v[e], bv[q][e]);
                    v[e] = pgv_add(k, PG_F32, old[e], s);
                }
            }
            pgk_st_f32x4_edge(k, addr, v, full, ok);
        }
    }
}

/* ---------------------------------------------------------------- the kernel */

/* The fragments of r-step kk: a[0..tm) and b[0..tn) out of the stage at ax
 * (X) and ay (Y), quads qs and cs floats apart. */
static void load_frags(pg_kernel *k, const f32_cfg *c, pg_reg ax, pg_reg ay, unsigned kk,
                       unsigned sa, unsigned sb, unsigned rs, unsigned cs, pg_reg *a, pg_reg *b)
{
    for (unsigned q = 0; q < c->tm / 4; q++)
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, ax, (int64_t)(kk * sa + q * rs) * 4, &a[4 * q]);
    for (unsigned q = 0; q < c->tn / 4; q++)
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, ay, (int64_t)(kk * sb + q * cs) * 4, &b[4 * q]);
}

/* The output params f32_store writes through. */
typedef struct f32_params {
    pg_reg c, bias, ws, flags, P, Q;
} f32_params;

/* The thread's tile out: through the epilogue into C, or, split over K
 * (nz > 1), as partial sums into workspace[z][P][Q]. (p0 + prow, q0 + qcol)
 * is its first element. */
static void f32_store(pg_kernel *k, const f32_cfg *c, const f32_params *fp, const pgk_split *rr,
                      pg_reg p0, pg_reg q0, pg_reg prow, pg_reg qcol, pg_reg (*acc)[RB_MAX_T])
{
    const unsigned lq = 32 / c->lp, rs = 4 * c->lp, cs = 4 * lq;
    const pg_reg cp = fp->c, bias = fp->bias, ws = fp->ws, flags = fp->flags, P = fp->P, Q = fp->Q;
    const pg_reg z = rr->z, nz = rr->nz;
    pg_reg rowbase = pgv_add(k, PG_U32, p0, prow), colbase = pgv_add(k, PG_U32, q0, qcol);
    pg_label partial = pg_label_new(k, "partial");
    pg_reg split = pgv_setp(k, PG_CMP_GT, PG_U32, nz, pg_u32(1));
    pg_bra_if(k, split, false, partial);
    /* flag_set records: one call a statement, in this order */
    pg_reg do_acc = flag_set(k, flags, FLAG_ACCUMULATE);
    pg_reg do_bias = flag_set(k, flags, FLAG_BIAS);
    f32_out o = {.c = cp, .P = P, .Q = Q, .rowbase = rowbase, .colbase = colbase, .rs = rs,
                 .cs = cs, .bias = bias, .do_acc = do_acc, .do_bias = do_bias};
    f32_epilogue(k, c, &o, acc);
    pg_ret(k);
    pg_label_bind(k, partial);
    pg_comment(k, "split-K: partial sums into workspace[z][P][Q]");
    pg_reg pq = pgv_mul_wide(k, PG_U32, P, Q);
    pg_reg z64 = pg_reg_new(k, PG_U64);
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, z64, z);
    pg_reg zoff = pgv_mul(k, PG_U64, pq, z64);
    pg_shl(k, PG_B64, zoff, zoff, pg_u32(2));
    f32_out op = o;
    op.c = pgv_add(k, PG_U64, ws, zoff);
    op.partial = true;
    f32_epilogue(k, c, &op, acc);
    pg_ret(k);
}

static int build_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    const unsigned layout = d->variant;
    const f32_cfg *c = &f32_cfgs[knobs[FT_TILE]];
    const pgk_rb_cfg rb = {c->bm, c->bn, c->bk, c->tm, c->tn};
    const unsigned lq = 32 / c->lp, WP = c->tm * c->lp, WQ = c->tn * lq;
    const unsigned T = f32_threads(c), rs = 4 * c->lp, cs = 4 * lq;
    const unsigned sa = c->bm + 4, sb = c->bn + 4; /* padded rows, floats */
    const unsigned b_off = c->bk * sa * 4;        /* B's tile after A's, bytes */
    const unsigned stage = c->bk * (sa + sb) * 4; /* bytes */
    pg_kernel_set_maxntid(k, T, 1, 1);
    if (c->occ)
        pg_kernel_set_minnctapersm(k, c->occ);
    pg_shared smem = pg_shared_static(k, PG_F32, 2 * stage / 4, 16, "tiles");
    pg_reg a = pg_param_load(k, p[PA_A]), b = pg_param_load(k, p[PA_B]);
    pg_reg cp = pg_param_load(k, p[PA_C]), bias = pg_param_load(k, p[PA_BIAS]);
    pg_reg ws = pg_param_load(k, p[PA_WS]);
    pg_reg m = pg_param_load(k, p[PA_M]), n = pg_param_load(k, p[PA_N]);
    pg_reg kd = pg_param_load(k, p[PA_K]), flags = pg_param_load(k, p[PA_FLAGS]);
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    /* leading dimensions: forward X, W rows of K; backward_x dY rows of N, W
     * rows of K; backward_w dY rows of N, X rows of K */
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n, ldb = kd;
    pg_reg sbase = pgv_mov(k, PG_U32, pg_shared_addr(smem));

    pg_reg p0, q0;
    pgk_gemm_block_tile(k, c->bm, c->bn, F32_GROUP, P, Q, &p0, &q0);

    const pgk_split rr =
        pgk_gemm_split(k, c->bk, R, "split-K: r-tiles [z*per, z*per + per) of ceil(R/bk)");
    pg_reg rbeg = rr.rbeg, rend = rr.rend, ntiles = rr.ntiles;

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg lpi = pgv_shr(k, PG_U32, lane, pg_u32(log2u(lq)));
    pg_reg lqi = pgv_and(k, PG_B32, lane, pg_u32(lq - 1));
    pg_reg wpi = pgv_and(k, PG_B32, warp, pg_u32(c->wp - 1));
    pg_reg wqi = pgv_shr(k, PG_U32, warp, pg_u32(log2u(c->wp)));
    pg_reg prow = pgv_mul(k, PG_U32, wpi, pg_u32(WP)); /* the thread's first p in the tile */
    pg_mad(k, PG_U32, prow, lpi, pg_u32(4), prow);
    pg_reg qcol = pgv_mul(k, PG_U32, wqi, pg_u32(WQ));
    pg_mad(k, PG_U32, qcol, lqi, pg_u32(4), qcol);

    pgk_rb_operand A, B;
    pgk_rb_operand_init(k, &A, &rb, c->bm, layout != PGK_GEMM_BACKWARD_W, a, lda, P, rend, p0,
                        rbeg, tid, 0);
    pgk_rb_operand_init(k, &B, &rb, c->bn, layout == PGK_GEMM_FORWARD, b, ldb, Q, rend, q0,
                        rbeg, tid, b_off);

    pg_reg acc[RB_MAX_T][RB_MAX_T];
    for (unsigned i = 0; i < c->tm; i++)
        for (unsigned j = 0; j < c->tn; j++)
            acc[i][j] = pgk_zero_f32(k);

    pg_comment(k, "r-tile 0 into stage 0");
    pgk_rb_operand_load(k, &A);
    pgk_rb_operand_load(k, &B);
    pgk_rb_operand_store(k, &A, sbase);
    pgk_rb_operand_store(k, &B, sbase);
    pg_bar_sync(k, 0);

    pg_reg cur = pgv_mov(k, PG_U32, pg_u32(0)), t = pgv_mov(k, PG_U32, pg_u32(0));
    pg_reg rd_a = pgv_shl(k, PG_B32, prow, pg_u32(2));
    pg_reg rd_b = pgv_shl(k, PG_B32, qcol, pg_u32(2));
    pg_add(k, PG_U32, rd_b, rd_b, pg_u32(b_off));

    pgk_rb_loop L = {.x = &A, .y = &B, .sbase = sbase, .cur = cur, .t = t, .stage = stage};
    pgk_rb_loop_head(k, &L, ntiles);
    pg_comment(k, "multiply r-tile t out of stage cur; step kk+1's fragments load first");
    pg_reg st = pgv_add(k, PG_U32, sbase, cur);
    pg_reg ax = pgv_add(k, PG_U32, st, rd_a), ay = pgv_add(k, PG_U32, st, rd_b);
    pg_reg fa[2][RB_MAX_T], fb[2][RB_MAX_T];
    for (unsigned s = 0; s < 2; s++) {
        for (unsigned i = 0; i < c->tm; i++)
            fa[s][i] = pg_reg_new(k, PG_F32);
        for (unsigned j = 0; j < c->tn; j++)
            fb[s][j] = pg_reg_new(k, PG_F32);
    }
    load_frags(k, c, ax, ay, 0, sa, sb, rs, cs, fa[0], fb[0]);
    for (unsigned kk = 0; kk < c->bk; kk++) {
        unsigned s = kk % 2;
        if (kk + 1 < c->bk)
            load_frags(k, c, ax, ay, kk + 1, sa, sb, rs, cs, fa[s ^ 1], fb[s ^ 1]);
        for (unsigned i = 0; i < c->tm; i++)
            for (unsigned j = 0; j < c->tn; j++)
                pg_fma(k, PG_F32, acc[i][j], fa[s][i], fb[s][j], acc[i][j]);
    }
    pgk_rb_loop_tail(k, &L);
    const f32_params fp = {.c = cp, .bias = bias, .ws = ws, .flags = flags, .P = P, .Q = Q};
    f32_store(k, c, &fp, &rr, p0, q0, prow, qcol, acc);
    return pg_kernel_error(k);
}

static int launch_f32(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    uint32_t P, Q, R;
    pqr_host(d->variant, kn[FT_M], kn[FT_N], kn[FT_K], &P, &Q, &R);
    uint32_t tile = kn[FT_TILE], split = kn[FT_SPLIT];
    if (!P || !Q || !R || tile >= F32_TILES || split < 1 || split > MMA_MAX_SPLIT)
        return PG_ERANGE;
    const f32_cfg *c = &f32_cfgs[tile];
    uint64_t blocks = (uint64_t)pgk_ceil_div(P, c->bm) * pgk_ceil_div(Q, c->bn);
    if (blocks > 0x7fffffffu)
        return PG_ERANGE;
    *out = (pgk_launch){{(uint32_t)blocks, 1, split}, {f32_threads(c), 1, 1}, 0, {0, 0, 0}};
    return PG_OK;
}

/* ---------------------------------------------------------------- the choice per shape */

/* A cost model to rank (tile, split) for a shape. A tile runs at thr (of
 * an SM's fma rate) when an SM holds 512 of its threads or more, at
 * thr·sqrt(threads / 512) with fewer (too few warps to hide the shared
 * and global latencies); an SM holds at most occ blocks. Blocks run in
 * waves of sms · min(occ, blocks an SM gets); a slice of the split does
 * its share of the r-tiles. Split-K adds the partials' traffic (written,
 * then read by gemm_mma_reduce, which writes the output) and a launch.
 * Times are in SM cycles: an SM does 256 f32 flops a cycle, the GPU moves
 * F32_HBM bytes a cycle. thr was read off bench_gemm --sweep-f32 on an
 * H200 (4096^3, where every tile runs many waves); the constants make the
 * model's picks reach 0.98 of the best measured (tile, split) on average
 * over the benchmark's shapes, 0.91 at worst. Near those shapes, on
 * sm_90, measured_f32 below gives the measured best itself. */
typedef struct f32_model {
    double thr;
    unsigned occ;
} f32_model;

static const f32_model f32_models[F32_TILES] = {
    {0.700, 2}, {0.665, 2}, {0.630, 4}, {0.616, 4}, {0.602, 4},
};

#define F32_HBM 1000.0    /* bytes a cycle (partials: written, read back, stalls) */
#define F32_LAUNCH 5000.0 /* cycles: the reduce's launch and tail */

static double f32_cost(unsigned tile, uint32_t P, uint32_t Q, uint32_t R, uint32_t split,
                       unsigned sms)
{
    const f32_cfg *c = &f32_cfgs[tile];
    const f32_model *md = &f32_models[tile];
    double blocks = (double)pgk_ceil_div(P, c->bm) * pgk_ceil_div(Q, c->bn) * split;
    double bps = ceil(blocks / sms);
    if (bps > md->occ)
        bps = md->occ;
    double waves = ceil(blocks / (sms * bps));
    double rtiles = ceil((double)pgk_ceil_div(R, c->bk) / split);
    double fill = bps * f32_threads(c) / 512.0;
    double rate = md->thr * (fill < 1.0 ? sqrt(fill) : 1.0);
    double wave = 2.0 * c->bm * c->bn * c->bk * rtiles * bps / (256.0 * rate);
    double t = waves * wave;
    if (split > 1)
        t += F32_LAUNCH + (double)P * Q * 4.0 * (2.0 * split + 1.0) / F32_HBM;
    return t;
}

/* Measured bests (tile, split) of bench_gemm --sweep-f32 on an H200 at
 * the benchmark's shapes, used on sm_90 within a factor 1.5 of one in
 * each of P, Q, R (the layout's). */
static const pgk_gemm_measured measured_f32[] = {
    /* Qwen2-1.5B at 2048 tokens: q/o, k/v, gate/up, down (P, Q, R) */
    {0, 0, 4, 2048, 1536, 1536},  {1, 3, 1, 2048, 1536, 1536}, {2, 2, 3, 1536, 1536, 2048},
    {0, 0, 4, 2048, 256, 1536},   {1, 3, 1, 2048, 1536, 256},  {2, 4, 4, 256, 1536, 2048},
    {0, 0, 1, 2048, 8960, 1536},  {1, 0, 4, 2048, 1536, 8960}, {2, 0, 2, 8960, 1536, 2048},
    {0, 0, 4, 2048, 1536, 8960},  {1, 0, 2, 2048, 8960, 1536}, {2, 0, 2, 1536, 8960, 2048},
    /* 4096^3 */
    {0, 0, 1, 4096, 4096, 4096},  {1, 0, 1, 4096, 4096, 4096}, {2, 0, 1, 4096, 4096, 4096},
};

/* Whether a split of s slices is worth its partials: 4 r-tiles of 8 a
 * slice at least, partials within 1 GiB. */
static bool split_ok(uint32_t P, uint32_t Q, uint32_t R, uint32_t s)
{
    return s == 1 || ((uint64_t)pgk_ceil_div(R, 8) >= 4u * s &&
                      (uint64_t)P * Q * 4u * s <= (1ull << 30));
}

static const pgk_desc *const f32_descs[PGK_GEMM_LAYOUTS] = {
    &pgk_desc_gemm_f32_forward, &pgk_desc_gemm_f32_backward_x, &pgk_desc_gemm_f32_backward_w};

int pgk_gemm_f32_choose(pgk_gemm_layout layout, uint32_t m, uint32_t n, uint32_t k,
                        pg_target target, unsigned sms, pgk_gemm_choice *out)
{
    int rc = pgk_gemm_choice_init(layout, m, n, k, target, out);
    if (rc)
        return rc;
    uint32_t P, Q, R;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    if (!sms)
        sms = 132;
    static const uint32_t splits[] = {1, 2, 3, 4, 6, 8, 12, 16};
    double best = 0;
    uint32_t bt = 0, bs = 1;
    bool can_split = pg_target_sm(target) >= 80;
    for (unsigned t = 0; t < F32_TILES; t++)
        for (unsigned i = 0; i < sizeof splits / sizeof splits[0]; i++) {
            if (!split_ok(P, Q, R, splits[i]) || (splits[i] > 1 && !can_split))
                break;
            double cost = f32_cost(t, P, Q, R, splits[i], sms);
            if (best == 0 || cost < best * 0.999) {
                best = cost;
                bt = t;
                bs = splits[i];
            }
        }
    const pgk_gemm_measured *me =
        pg_target_sm(target) == 90
            ? pgk_gemm_nearest(measured_f32, sizeof measured_f32 / sizeof measured_f32[0], layout,
                               P, Q, R)
            : NULL;
    if (me && split_ok(P, Q, R, me->split)) {
        bt = me->tile;
        bs = me->split;
    }
    if (!can_split)
        bs = 1; /* gemm_mma_reduce is sm_80 and up */
    out->desc = f32_descs[layout];
    rc = pgk_knobs_default(out->desc, &out->knobs);
    if (rc)
        return rc;
    out->knobs.v[FT_M] = out->m = m;
    out->knobs.v[FT_N] = out->n = n;
    out->knobs.v[FT_K] = out->k = k;
    out->knobs.v[FT_TILE] = out->tile = bt;
    out->knobs.v[FT_SPLIT] = out->split = bs;
    if (bs > 1) {
        out->reduce = &pgk_desc_gemm_mma_reduce;
        pgk_knobs_default(out->reduce, &out->reduce_knobs);
        out->reduce_knobs.v[RD_N] = P * Q; /* at most 2^28: split_ok's bound */
        out->reduce_knobs.v[RD_COLS] = Q;
        out->reduce_knobs.v[RD_SPLIT] = bs;
        out->reduce_knobs.v[RD_OUT] = OUT_F32;
        out->workspace_bytes = (uint64_t)P * Q * 4u * bs;
    }
    return PG_OK;
}

bool pgk_gemm_f32_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                           uint32_t *m, uint32_t *n, uint32_t *k)
{
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        if (d == f32_descs[l]) {
            *layout = (pgk_gemm_layout)l;
            *m = kn->v[FT_M];
            *n = kn->v[FT_N];
            *k = kn->v[FT_K];
            return true;
        }
    return false;
}

/* The tile the choice makes for the sizes on sm_90 (the pick hook knows
 * no target); only the tile: a split needs a workspace and the reduce. */
static void pick_f32(const pgk_desc *d, uint32_t *kn)
{
    pgk_gemm_choice ch;
    if (pgk_gemm_f32_choose((pgk_gemm_layout)d->variant, kn[FT_M], kn[FT_N], kn[FT_K], PG_SM_90, 0,
                            &ch) == PG_OK)
        kn[FT_TILE] = ch.tile;
}
/* ---------------------------------------------------------------- descriptors */

#define FT_KNOBS(mhelp, nhelp, khelp)                                                         \
    {                                                                                         \
        [FT_M] = {"m", 2048, 1, MM_MAX_DIM, mhelp, false},                                     \
        [FT_N] = {"n", 1536, 1, MM_MAX_DIM, nhelp, false},                                     \
        [FT_K] = {"k", 1536, 1, MM_MAX_DIM, khelp, false},                                     \
        [FT_TILE] = {"tile", 0, 0, F32_TILES - 1,                                              \
                     "block tile (P x Q, r-tile, threads, warp tile): 0 = 128x128 16 256 "     \
                     "32x64; 1 = 128x128 8 256 32x64; 2 = 128x64 8 128 32x64; 3 = 64x128 8 "   \
                     "128 32x64; 4 = 64x64 16 128 32x32",                                      \
                     true},                                                                    \
        [FT_SPLIT] = {"split", 1, 1, MMA_MAX_SPLIT,                                            \
                      "split-K slices (> 1: f32 partials in the workspace, then "              \
                      "gemm_mma_reduce)",                                                     \
                      false},                                                                  \
    }

static const pgk_knob fwd_knobs[] = FT_KNOBS("rows of X and Y (tokens)",
                                             "rows of W, columns of Y (outputs)",
                                             "columns of X and W (inputs)");
static const pgk_knob bx_knobs[] = FT_KNOBS("rows of dY and dX (tokens)",
                                            "columns of dY, rows of W (outputs)",
                                            "columns of W and dX (inputs)");
static const pgk_knob bw_knobs[] = FT_KNOBS("rows of dY and X (tokens)",
                                            "columns of dY, rows of dW (outputs)",
                                            "columns of X and dW (inputs)");


const pgk_desc pgk_desc_gemm_f32_forward = {
    .name = "gemm_f32_forward",
    .summary = "Y[M,N] (+)= X[M,K] * W[N,K]^T (+ bias[N]), f32 (SIMT, warp-tiled, split-K)",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(fwd_knobs),
    .min_target = PG_SM_70,
    .build = build_f32,
    .launch = launch_f32,
    .pick = pick_f32,
    .variant = PGK_GEMM_FORWARD,
};

const pgk_desc pgk_desc_gemm_f32_backward_x = {
    .name = "gemm_f32_backward_x",
    .summary = "dX[M,K] (+)= dY[M,N] * W[N,K] (+ bias[K]), f32 (SIMT, warp-tiled, split-K)",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(bx_knobs),
    .min_target = PG_SM_70,
    .build = build_f32,
    .launch = launch_f32,
    .pick = pick_f32,
    .variant = PGK_GEMM_BACKWARD_X,
};

const pgk_desc pgk_desc_gemm_f32_backward_w = {
    .name = "gemm_f32_backward_w",
    .summary = "dW[N,K] (+)= dY[M,N]^T * X[M,K] (+ bias[K]), f32 (SIMT, warp-tiled, split-K)",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(bw_knobs),
    .min_target = PG_SM_70,
    .build = build_f32,
    .launch = launch_f32,
    .pick = pick_f32,
    .variant = PGK_GEMM_BACKWARD_W,
};
