/* SPDX-License-Identifier: MIT */
/*
 * The backward of attention_sm90_forward, for sm_90a on warpgroup MMA fed
 * by TMA: three kernels, run in this order on one layer's tensors.
 *
 *   attention_sm90_backward_prep   delta = rowsum(dO * O) (f32), dO's bf16
 *                                  copy, and the row statistics the two
 *                                  below read: stats[b, h, s] = {-LSE log2 e,
 *                                  delta}, f32 pairs [B, Hq, Sp, 2], Sp = S
 *                                  rounded up to 128 (rows past S: {-inf,
 *                                  0}, so they weigh nothing);
 *   attention_sm90_backward_dq     dQ = scale dS K, a block a 128-row query
 *                                  tile, streaming 64-key blocks of K and V;
 *   attention_sm90_backward_dkv    dV = P^T dO and dK = scale dS^T Q of one
 *                                  query head, a block a 128-key tile of
 *                                  it, streaming its 64-row query blocks:
 *                                  per query head [B, S, Hq, D];
 *   attention_sm90_backward_group  (GQA) dK and dV of each key/value head,
 *                                  the sum of its group's query heads'
 *                                  in head order.
 *
 * with, for query row i and key j (j <= i), s the raw score q_i . k_j:
 *   P(i, j)  = exp(scale s - LSE_i) = 2^(s c - LSE_i log2 e), c = scale log2 e
 *   dP(i, j) = dO_i . v_j,  dS(i, j) = P(i, j) (dP(i, j) - delta_i).
 *
 * dQ and dK/dV are separate kernels (dS is made twice, once in each), and
 * a GQA group's dK/dV are summed by a kernel of their own, so that every
 * sum has one writer and an order fixed by the shape: no atomics, the same
 * bits run to run. A block a query head (not a key/value head looping
 * over its group) gives a grid of Hq B S / 128 blocks, enough for short
 * sequences too. The fused FlashAttention-3 backward
 * makes dS once and adds dQ with float atomics; this one spends two more
 * GEMMs of the seven for determinism.
 *
 * The two GEMM kernels are one scheme with the operands' roles swapped. A
 * block holds a 128-row "resident" pair (X, Y) and streams 64-row pairs
 * (U, W):
 *
 *               X, Y    U, W        G1       G2        G3 (and G4)
 *   dq          Q, dO   K_j, V_j    Q K^T    dO V^T    dQ += dS K
 *   dkv         K, V    Q_i, dO_i   K Q^T    V dO^T    dV += P^T dO, dK += dS^T Q
 *
 * G1 and G2 read both operands from shared memory (K-major, m64n64k16);
 * G3 and G4 take P or dS from registers (rounded to bf16 straight from
 * the accumulators into wgmma's A fragments, as the forward's P) and U or
 * W N-major (wgmma's transpose). Block: 384 threads. Warpgroup 0 produces
 * (setmaxnreg.dec 24; one elected thread issues the TMA copies: the
 * resident pair once, then the stream into a ring of `stages` stages, a
 * "full" and an "empty" mbarrier each); warpgroups 1 and 2 consume
 * (setmaxnreg.inc 240), each owning 64 rows of the resident pair. A step:
 * G1 and G2 in one turn, the softmax terms in registers, G3 (G4) in the
 * next turn; the two consumer warpgroups take the turns in pingpong (named
 * barriers 1 and 2, as the forward), so that one's element work runs
 * while the other's GEMMs do.
 *
 * Causal: the dq block of query tile qt streams key blocks 0 .. 2 qt + 1
 * (those inside S); the dkv block of key tile kt streams query blocks
 * 2 kt .. ceil(S / 64) - 1 of each of its group's heads. The last two
 * (first two) blocks are masked on the diagonal; the dkv block streams
 * its own query head's blocks. Any length: TMA reads
 * zeros past S and D, the stats' padding rows weigh nothing, and rows past
 * S are not written.
 *
 * All tensors [B, S, H, D] with the batch a dimension of each map; Q, K, V
 * and dO bf16 through rank-4 tensor maps with boxes {64, 1, 64, 1} and a
 * 128-byte swizzle (runtime/attention_sm90.c encodes them; a 128-row tile
 * is two boxes); dQ [B, S, Hq, D] f32, the layout attention_mma_backward_dq
 * writes; dkv's dK and dV [B, S, Hq, D] f32 (a query head's share), which
 * _group sums into [B, S, Hkv, D], attention_mma_backward_dkv's layout
 * (with Hq = Hkv, dkv writes that layout itself).
 */
#include "attention_mma.h"

#include <math.h>

#define RES 128u            /* resident rows a block: two consumer warpgroups of 64 */
#define STR 64u             /* rows a stream block */
#define THREADS 384u
#define RING_BYTES (225u * 1024u)
#define MAX_STAGES 4u
#define MAX_SEQ (1u << 22)
#define PREP_WARPS 8u

/* ---------------------------------------------------------------- prep */

/* A warp a row: block (x, h, b), warp w of it row s = 8 x + w of head h
 * of sequence b, s < Sp; lanes along D. */
static int build_prep(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    pg_kernel_set_maxntid(k, 32 * PREP_WARPS, 1, 1);
    pg_label done = pg_label_new(k, "exit");
    pg_reg O = pg_param_load(k, p[0]), dO = pg_param_load(k, p[1]);
    pg_reg LSE = pg_param_load(k, p[2]), dOb = pg_param_load(k, p[3]);
    pg_reg ST = pg_param_load(k, p[4]);
    pg_reg S = pg_param_load(k, p[6]);
    pg_reg hq = pg_param_load(k, p[7]), dim = pg_param_load(k, p[8]);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg wib = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg s = pgv_mad(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(PREP_WARPS), wib);
    pg_reg h = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg b = pg_sreg_read(k, PG_SREG_CTAID_Z);
    pg_reg sp = pgv_and(k, PG_B32, pgv_add(k, PG_U32, S, pg_u32(RES - 1)), pg_u32(~(RES - 1)));
    pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, s, sp), false, done);
    /* stats[(b Hq + h) Sp + s], 8 bytes each */
    pg_reg bh = pgv_mad(k, PG_U32, b, hq, h);
    pg_reg si = pgv_mad_wide(k, PG_U32, bh, sp, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, s));
    pg_reg sat = pgv_add(k, PG_U64, ST, pgv_shl(k, PG_B64, si, pg_u32(3)));
    pg_reg lane0 = pgv_setp(k, PG_CMP_EQ, PG_U32, lane, pg_u32(0));

    pg_label inside = pg_label_new(k, "inside");
    pg_bra_if(k, pgv_setp(k, PG_CMP_LT, PG_U32, s, S), false, inside);
    pg_comment(k, "a padding row: weighs nothing");
    pg_val pad[2];
    pad[0] = pgk_f32_const(k, -INFINITY);
    pad[1] = pgk_zero_f32(k);
    pg_guard(k, lane0, false);
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, sat, 0, pad);
    pg_bra(k, done);
    pg_label_bind(k, inside);

    /* token b S + s, element ((b S + s) Hq + h) D */
    pg_reg tok = pgv_mad_wide(k, PG_U32, b, S, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, s));
    pg_reg row = pgv_mul(k, PG_U64, tok, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, hq));
    pg_add(k, PG_U64, row, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, h));
    pg_reg e0 = pgv_mul(k, PG_U64, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, dim));
    pg_reg sum = pgk_zero_f32(k);
    for (unsigned i = 0; i < FA_MAX_D / 32; i++) {
        pg_reg c = pgv_add(k, PG_U32, lane, pg_u32(32 * i));
        pg_reg in = pgv_setp(k, PG_CMP_LT, PG_U32, c, dim);
        pg_reg e = pgv_add(k, PG_U64, e0, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, c));
        pg_reg oa = pgv_add(k, PG_U64, O, pgv_shl(k, PG_B64, e, pg_u32(2)));
        pg_reg ga = pgv_add(k, PG_U64, dO, pgv_shl(k, PG_B64, e, pg_u32(2)));
        pg_reg ba = pgv_add(k, PG_U64, dOb, pgv_shl(k, PG_B64, e, pg_u32(1)));
        pg_reg o = pgk_zero_f32(k), g = pgk_zero_f32(k);
        pg_guard(k, in, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, oa, 0, o);
        pg_guard(k, in, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, ga, 0, g);
        pg_fma(k, PG_F32, sum, o, g, sum);
        pg_reg gb = pgv_cvt(k, PG_BF16, PG_F32, PG_RND_RN, g);
        pg_guard(k, in, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_BF16, ba, 0, gb);
    }
    pg_reg delta = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, sum);
    pg_reg la = pgv_add(k, PG_U64, LSE, pgv_shl(k, PG_B64, row, pg_u32(2)));
    pg_reg lse = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, la, 0);
    pg_val st[2];
    st[0] = pgv_mul(k, PG_F32, lse, pg_f32(-LOG2E));
    st[1] = delta;
    pg_guard(k, lane0, false);
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, sat, 0, st);
    return pgk_finish(k, done);
}

/* grid (Sp / 8, q_heads, batch): a warp a row. */
static int launch_prep(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    if (kn[KN_BATCH] == 0 || kn[KN_SEQ] == 0 || kn[KN_HEADS] == 0 || kn[KN_SEQ] > MAX_SEQ ||
        kn[KN_BATCH] > 65535 || kn[KN_HEADS] > 65535)
        return PG_ERANGE;
    uint32_t sp = pgk_ceil_div(kn[KN_SEQ], RES) * RES;
    *out = (pgk_launch){{sp / PREP_WARPS, kn[KN_HEADS], kn[KN_BATCH]},
                        {32 * PREP_WARPS, 1, 1},
                        0,
                        {0, 0, 0}};
    return PG_OK;
}

/* ---------------------------------------------------------------- the GEMM kernels */

typedef struct bw {
    bool dkv;
    unsigned dp, halves, stages;
    uint32_t rbytes, sbytes; /* a resident tile (128 rows), a stream tile (64 rows) */
    /* a ring stage: U, W and (dkv) the 64 query rows' statistics, 512
     * bytes padded to the swizzle's 1024-byte period */
    uint32_t stage;
    /* mbarriers' byte offsets: 0 the resident pair; `stages` full, then empty */
    uint32_t full, empty;
} bw;

static bw bw_of(unsigned dp, bool dkv)
{
    bw c = {dkv, dp, dp / 64, 0, RES * dp * 2u, STR * dp * 2u, 0, 8, 0};
    c.stage = 2u * c.sbytes + (dkv ? 1024u : 0u);
    uint32_t st = (RING_BYTES - 2u * c.rbytes) / c.stage;
    c.stages = st > MAX_STAGES ? MAX_STAGES : st;
    c.empty = c.full + 8 * c.stages;
    return c;
}

/* A tile of `rows` rows (128 or 64) at map coordinates (head, row, b):
 * per 64-column half (rows x 128 bytes), a box of 64 rows at a time,
 * completing bar. */
static void load_tile(pg_kernel *k, const bw *c, pg_reg map, pg_reg dst, pg_reg head, pg_reg row,
                      pg_reg b, pg_reg bar, unsigned rows)
{
    pgk_fa3_load_tile(k, map, dst, head, row, b, bar, c->halves, rows, STR);
}

/* The block's place: query head h (kv head kvh). dq: query tile t =
 * tiles - 1 - z (the longest first), streaming key blocks 0 .. n - 1. dkv:
 * key tile t = z (the longest first), streaming query blocks i0 .. i0 +
 * n - 1 of head h. r0 = 128 t. */
typedef struct bpos {
    pg_reg h, kvh, b, t, r0, i0, n;
} bpos;

static bpos position(pg_kernel *k, const bw *c, pg_reg seq, pg_reg group)
{
    bpos q;
    pg_reg x = pg_sreg_read(k, PG_SREG_CTAID_X);
    q.b = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg z = pg_sreg_read(k, PG_SREG_CTAID_Z);
    pg_reg blocks = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, seq, pg_u32(STR - 1)), pg_u32(6));
    if (c->dkv) {
        pg_comment(k, "block (h, b, z): key tile z, query blocks 2 z .. ceil(S / 64) - 1");
        q.h = x;
        q.kvh = pgv_div(k, PG_U32, x, group);
        q.t = z;
        q.i0 = pgv_shl(k, PG_B32, z, pg_u32(1));
        q.n = pgv_sub(k, PG_U32, blocks, q.i0);
    } else {
        pg_comment(k, "block (h, b, z): query tile tiles - 1 - z, key blocks up to its diagonal");
        pg_reg tiles = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, seq, pg_u32(RES - 1)), pg_u32(7));
        q.h = x;
        q.kvh = pgv_div(k, PG_U32, x, group);
        q.t = pgv_sub(k, PG_U32, pgv_sub(k, PG_U32, tiles, pg_u32(1)), z);
        q.i0 = pgv_mov(k, PG_U32, pg_u32(0));
        pg_reg diag = pgv_add(k, PG_U32, pgv_shl(k, PG_B32, q.t, pg_u32(1)), pg_u32(2));
        q.n = pgv_min(k, PG_U32, diag, blocks);
    }
    q.r0 = pgv_shl(k, PG_B32, q.t, pg_u32(7));
    return q;
}

/* maps: q, k, v, do (and dkv's stats). Resident: dq (Q, dO) at head h;
 * dkv (K, V) at kvh. */
static void producer(pg_kernel *k, const bw *c, const pg_reg *maps, pg_reg sx, pg_reg ring,
                     pg_reg bars, const bpos *q)
{
    pgk_fa3_producer_start(k);

    pg_comment(k, "the resident pair, once");
    pg_reg mx = maps[c->dkv ? 1 : 0], my = maps[c->dkv ? 2 : 3];
    pg_reg mu = maps[c->dkv ? 0 : 1], mw = maps[c->dkv ? 3 : 2];
    pg_reg rh = c->dkv ? q->kvh : q->h;
    pg_mbarrier_arrive_expect_tx(k, bars, 0, pg_u32(2 * c->rbytes));
    load_tile(k, c, mx, sx, rh, q->r0, q->b, bars, RES);
    load_tile(k, c, my, pgv_add(k, PG_U32, sx, pg_u32(c->rbytes)), rh, q->r0, q->b, bars, RES);

    pg_comment(k, "the stream: (U, W) pairs into the ring");
    pg_reg s = pgv_mov(k, PG_U32, pg_u32(0)), ph = pgv_mov(k, PG_U32, pg_u32(1));
    pg_reg head = c->dkv ? q->h : q->kvh;
    pgk_loop L;
    pg_reg i = pgk_loop_begin(k, &L, pg_u32(0), q->n, pg_u32(1));
    {
        pg_reg eb = pgk_fa3_stage_bar(k, bars, c->empty, s);
        pg_reg fb = pgk_fa3_stage_bar(k, bars, c->full, s);
        pg_mbarrier_wait_parity(k, eb, 0, ph);
        pg_mbarrier_arrive_expect_tx(k, fb, 0, pg_u32(2 * c->sbytes + (c->dkv ? 512u : 0u)));
        pg_reg du = pgv_mad(k, PG_U32, s, pg_u32(c->stage), ring);
        pg_reg row = pgv_shl(k, PG_B32, pgv_add(k, PG_U32, q->i0, i), pg_u32(6));
        load_tile(k, c, mu, du, head, row, q->b, fb, STR);
        load_tile(k, c, mw, pgv_add(k, PG_U32, du, pg_u32(c->sbytes)), head, row, q->b, fb, STR);
        if (c->dkv) { /* the block's 64 (-LSE log2 e, delta) pairs: f32 {128 row, h, b} */
            pg_val co[3];
            co[0] = pgv_shl(k, PG_B32, row, pg_u32(1));
            co[1] = head;
            co[2] = q->b;
            pg_cp_async_bulk_tensor(k, 3, pgv_add(k, PG_U32, du, pg_u32(2 * c->sbytes)), maps[4],
                                    co, fb);
        }
        pgk_fa3_ring_next(k, s, ph, c->stages);
    }
    pgk_loop_end(k, &L);
    pg_exit(k);
}

/* A consumer warpgroup. */
typedef struct bcons {
    fa f;                    /* g, t4, dim, dp for the shared tile helpers */
    pg_reg cw, wrow;         /* warpgroup 0 or 1; the warp's first row in the block */
    pg_reg dx, dy;           /* descriptors of X, Y: this warpgroup's 64 rows */
    pg_reg du, dw, dut, dwt; /* stage 0's U and W, K-major and N-major */
    pg_reg bars, c, scale;
    pg_reg s[32], dp[32];    /* G1's and G2's accumulators: then P and dS */
    pg_reg pf[16], sf[16];   /* P and dS as bf16 A fragments */
    pg_reg a1[64], a2[64];   /* dq: dQ (a1); dkv: dV (a1) and dK (a2) */
    pg_reg st, sph;          /* the stage and parity the next wait uses */
} bcons;

/* The u64 descriptor d moved on by `bytes` (16-byte units). */
static pg_reg desc_at(pg_kernel *k, pg_reg d, pg_reg stage_off)
{
    return pgv_add(k, PG_U64, d, stage_off);
}

/* G1 and G2: s = X U^T, dp = Y W^T, K-major both, m64n64 (not committed). */
static void gemm_scores(pg_kernel *k, const bw *c, bcons *w, pg_reg so)
{
    pg_reg du = desc_at(k, w->du, so), dw = desc_at(k, w->dw, so);
    pg_wgmma_fence(k);
    for (unsigned g = 0; g < 2; g++)
        for (unsigned kk = 0; kk < c->dp / 16; kk++) {
            /* a k16 step is 32 bytes along a 128-byte row; the next 64
             * columns are the next half: 16 KiB on in X and Y, 8 KiB in U, W */
            uint64_t ra = (uint64_t)(kk / 4) * (RES * 128u / 16) + (kk % 4) * 2u;
            uint64_t sa = (uint64_t)(kk / 4) * (STR * 128u / 16) + (kk % 4) * 2u;
            pg_reg a0 = g ? w->dy : w->dx, b0 = g ? dw : du;
            pg_reg a = kk ? pgv_add(k, PG_U64, a0, pg_u64(ra)) : a0;
            pg_reg b = kk ? pgv_add(k, PG_U64, b0, pg_u64(sa)) : b0;
            pg_wgmma m = {.n = STR, .ab = PG_BF16, .d = g ? w->dp : w->s, .a_desc = a,
                          .b_desc = b, .scale_d = pg_u32(kk ? 1 : 0)};
            pg_wgmma_mma_async(k, &m);
        }
}

/* acc += frag B, B the stream tile at descriptor bt N-major (a k16 step
 * is 16 rows of 128 bytes), n = dp (not committed). */
static void gemm_acc(pg_kernel *k, const bw *c, pg_reg *acc, pg_reg *frag, pg_reg bt)
{
    for (unsigned kk = 0; kk < STR / 16; kk++) {
        pg_reg b = kk ? pgv_add(k, PG_U64, bt, pg_u64(kk * (2048u / 16))) : bt;
        pg_wgmma m = {.n = c->dp, .ab = PG_BF16, .d = acc, .a = frag + 4 * kk,
                      .a_desc = pg_none(), .b_desc = b, .scale_d = pg_u32(1), .trans_b = true};
        pg_wgmma_mma_async(k, &m);
    }
}

/* P and dS from s and dp in place, the thread's row (dq) or column (dkv)
 * statistics nl = -LSE log2 e and delta: P = 2^(s c + nl), dS = P (dP -
 * delta); then their bf16 fragments. dkv reads the statistics of its 16
 * columns (query rows) from the stage's copy at shared address sat (its
 * first column pair's), four floats a column pair. */
static void terms(pg_kernel *k, bcons *w, const pg_reg *nl, const pg_reg *dl, pg_reg sat)
{
    for (unsigned nt = 0; nt < STR / 8; nt++) {
        pg_reg cn[2], cd[2];
        if (pg_is_reg(sat)) {
            pg_reg v[4];
            for (int e = 0; e < 4; e++)
                v[e] = pg_reg_new(k, PG_F32);
            pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, sat, (int64_t)nt * 64, v);
            cn[0] = v[0], cd[0] = v[1], cn[1] = v[2], cd[1] = v[3];
        }
        for (unsigned hh = 0; hh < 2; hh++)
            for (unsigned e = 0; e < 2; e++) {
                unsigned i = 4 * nt + 2 * hh + e;
                pg_reg n = pg_is_reg(sat) ? cn[e] : nl[hh], dd = pg_is_reg(sat) ? cd[e] : dl[hh];
                pg_ex2(k, PG_F32, w->s[i], pgv_fma(k, PG_F32, w->s[i], w->c, n));
                pg_sub(k, PG_F32, w->dp[i], w->dp[i], dd);
                pg_mul(k, PG_F32, w->dp[i], w->dp[i], w->s[i]);
            }
    }
    for (unsigned i = 0; i < 16; i++) {
        if (pg_is_reg(w->pf[0]))
            pg_cvt_pack(k, PG_BF16, w->pf[i], w->s[2 * i], w->s[2 * i + 1]);
        pg_cvt_pack(k, PG_BF16, w->sf[i], w->dp[2 * i], w->dp[2 * i + 1]);
    }
}

static void wait_full(pg_kernel *k, const bw *c, const bcons *w)
{
    pg_mbarrier_wait_parity(k, pgk_fa3_stage_bar(k, w->bars, c->full, w->st), 0, w->sph);
}

/* The outputs: acc (times mul unless none) f32 at rows r0 + wrow + .. of
 * head `head` of an [B, S, heads, D] tensor at base, rows below S. */
static void store(pg_kernel *k, bcons *w, pg_reg *acc, pg_val mul, pg_reg base, pg_reg b,
                  pg_reg r0, pg_reg head, pg_reg heads, pg_reg seq)
{
    pg_reg tok = pgv_mul_wide(k, PG_U32, b, seq);
    pg_add(k, PG_U64, tok, tok, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, r0));
    pg_reg h64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, heads);
    pg_reg row = pgv_mul(k, PG_U64, tok, h64);
    pg_add(k, PG_U64, row, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, head));
    pg_reg elem = pgv_mul(k, PG_U64, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, w->f.dim));
    pg_reg at = pgv_add(k, PG_U64, base, pgv_shl(k, PG_B64, elem, pg_u32(2)));
    pg_reg stride = pgv_shl(k, PG_B64, pgv_mul_wide(k, PG_U32, heads, w->f.dim), pg_u32(2));
    pg_reg nrows = pgv_sub(k, PG_U32, seq, r0);
    pgk_fa_store_rows(k, &w->f, (pg_reg(*)[4])acc, mul, at, stride, w->wrow, nrows);
}

typedef struct bout {
    pg_reg o1, o2;         /* dq: dQ; dkv: dK, dV */
    pg_reg ST, seq, hq, hkv, group;
} bout;

static void consumer(pg_kernel *k, const bw *c, bcons *w, pg_reg sx, pg_reg ring, const bpos *q,
                     const bout *io)
{
    pgk_fa3_consumer_start(k, &w->cw, &w->f, &w->wrow);

    pg_comment(k, "descriptors: X and Y's 64 rows of this warpgroup; U and W of stage 0");
    pg_reg xa = pgv_mad(k, PG_U32, w->cw, pg_u32(STR * 128), sx);
    pg_reg ya = pgv_add(k, PG_U32, xa, pg_u32(c->rbytes));
    pg_reg wa = pgv_add(k, PG_U32, ring, pg_u32(c->sbytes));
    w->dx = pg_wgmma_desc(k, xa, 16, 1024, 0, PG_SWIZZLE_128B);
    w->dy = pg_wgmma_desc(k, ya, 16, 1024, 0, PG_SWIZZLE_128B);
    w->du = pg_wgmma_desc(k, ring, 16, 1024, 0, PG_SWIZZLE_128B);
    w->dw = pg_wgmma_desc(k, wa, 16, 1024, 0, PG_SWIZZLE_128B);
    w->dut = pg_wgmma_desc(k, ring, STR * 128, 1024, 0, PG_SWIZZLE_128B);
    w->dwt = pg_wgmma_desc(k, wa, STR * 128, 1024, 0, PG_SWIZZLE_128B);

    for (unsigned i = 0; i < 32; i++) {
        w->s[i] = pg_reg_new(k, PG_F32);
        w->dp[i] = pg_reg_new(k, PG_F32);
    }
    for (unsigned i = 0; i < 16; i++) {
        w->pf[i] = c->dkv ? pg_reg_new(k, PG_B32) : pg_none();
        w->sf[i] = pg_reg_new(k, PG_B32);
    }
    for (unsigned i = 0; i < c->dp / 2; i++) {
        w->a1[i] = pgk_zero_f32(k);
        w->a2[i] = c->dkv ? pgk_zero_f32(k) : pg_none();
    }
    w->st = pgv_mov(k, PG_U32, pg_u32(0));
    w->sph = pgv_mov(k, PG_U32, pg_u32(0));
    pg_reg row0 = pgv_add(k, PG_U32, q->r0, w->wrow); /* the warp's first resident row */

    /* dq: the thread's two rows' statistics, once */
    pg_reg nl[2] = {pg_none(), pg_none()}, dl[2] = {pg_none(), pg_none()};
    pg_reg sp = pgv_and(k, PG_B32, pgv_add(k, PG_U32, io->seq, pg_u32(RES - 1)),
                        pg_u32(~(RES - 1)));
    if (!c->dkv) {
        pg_reg bh = pgv_mad(k, PG_U32, q->b, io->hq, q->h);
        pg_reg r = pgv_add(k, PG_U32, row0, w->f.g);
        for (unsigned hh = 0; hh < 2; hh++) {
            pg_reg rr = pgv_add(k, PG_U32, r, pg_u32(8 * hh));
            pg_reg r64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, rr);
            pg_reg si = pgv_mad_wide(k, PG_U32, bh, sp, r64);
            pg_reg at = pgv_add(k, PG_U64, io->ST, pgv_shl(k, PG_B64, si, pg_u32(3)));
            nl[hh] = pg_reg_new(k, PG_F32);
            dl[hh] = pg_reg_new(k, PG_F32);
            pg_reg v[2] = {nl[hh], dl[hh]};
            pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 2, at, 0, v);
        }
    }

    pg_comment(k, "pingpong: warpgroup 1 hands warpgroup 0 the first turn");
    pg_label first = pg_label_new(k, "wg0_first");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, w->cw, pg_u32(0)), false, first);
    pg_bar_arrive(k, 1, 256);
    pg_label_bind(k, first);
    pg_mbarrier_wait_parity(k, w->bars, 0, pg_u32(0));

    /* dkv: the stage's statistics, from column pair 2 t4 on (16 bytes) */
    pg_reg cbase = c->dkv ? pgv_mad(k, PG_U32, w->f.t4, pg_u32(16),
                                    pgv_add(k, PG_U32, ring, pg_u32(2 * c->sbytes)))
                          : pg_none();
    pgk_loop L;
    pg_reg j = pgk_loop_begin(k, &L, pg_u32(0), q->n, pg_u32(1));
    {
        pg_reg blk = pgv_add(k, PG_U32, q->i0, j);
        pg_reg so = pgv_mul_wide(k, PG_U32, w->st, pg_u32(c->stage / 16));
        wait_full(k, c, w);
        pgk_fa3_turn_begin(k, w->cw);
        gemm_scores(k, c, w, so);
        pg_wgmma_commit(k);
        pgk_fa3_turn_end(k, w->cw);
        pg_wgmma_wait(k, 0);

        pg_comment(k, "the diagonal blocks: keys past their query to -inf");
        pg_reg b0 = pgv_shl(k, PG_B32, blk, pg_u32(6)); /* the stream block's first row */
        pg_label off = pg_label_new(k, "off_diagonal");
        pg_reg last = pgv_add(k, PG_U32, b0, pg_u32(STR));
        if (c->dkv) /* query block b0 .. b0 + 63 has a query before a key of the tile */
            pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, b0, pgv_add(k, PG_U32, q->r0, pg_u32(RES))),
                      false, off);
        else /* key block past no query of the tile's first */
            pg_bra_if(k, pgv_setp(k, PG_CMP_LE, PG_U32, last, pgv_add(k, PG_U32, q->r0, pg_u32(1))),
                      false, off);
        pgk_fa_causal_mask(k, &w->f, (pg_reg(*)[4])w->s, STR / 8, row0, b0, c->dkv);
        pg_label_bind(k, off);

        pg_reg sat = c->dkv ? pgv_mad(k, PG_U32, w->st, pg_u32(c->stage), cbase) : pg_none();
        terms(k, w, nl, dl, sat);

        pgk_fa3_turn_begin(k, w->cw);
        pg_wgmma_fence(k);
        if (c->dkv) {
            gemm_acc(k, c, w->a1, w->pf, desc_at(k, w->dwt, so));
            gemm_acc(k, c, w->a2, w->sf, desc_at(k, w->dut, so));
        } else {
            gemm_acc(k, c, w->a1, w->sf, desc_at(k, w->dut, so));
        }
        pg_wgmma_commit(k);
        pgk_fa3_turn_end(k, w->cw);
        pg_wgmma_wait(k, 0);
        pg_mbarrier_arrive(k, pgk_fa3_stage_bar(k, w->bars, c->empty, w->st), 0);
        pgk_fa3_ring_next(k, w->st, w->sph, c->stages);
    }
    pgk_loop_end(k, &L);

    pg_comment(k, "warpgroup 0 takes warpgroup 1's last hand-over: no barrier left half full");
    pg_label done = pg_label_new(k, "wg1_done");
    pg_bra_if(k, pgv_setp(k, PG_CMP_NE, PG_U32, w->cw, pg_u32(0)), false, done);
    pg_bar_sync_count(k, 1, 256);
    pg_label_bind(k, done);

    if (c->dkv) {
        store(k, w, w->a2, w->scale, io->o1, q->b, q->r0, q->h, io->hq, io->seq);
        store(k, w, w->a1, pg_none(), io->o2, q->b, q->r0, q->h, io->hq, io->seq);
    } else {
        store(k, w, w->a1, w->scale, io->o1, q->b, q->r0, q->h, io->hq, io->seq);
    }
}

/* params: tmap_q, tmap_k, tmap_v, tmap_do, then dq: stats, grad_q; dkv:
 * tmap_stats, grad_k, grad_v; then batch, seq_len, q_heads, kv_heads,
 * head_dim, scale */
static int build_bwd(pg_kernel *k, const pg_param *p, const uint32_t *kn, bool dkv)
{
    const bw c = bw_of(dp_of(kn[KN_DIM]), dkv);
    pg_kernel_set_minnctapersm(k, 1);
    pg_shared dyn = pg_shared_dynamic(k, 128);
    pg_shared bar_arr = pg_shared_static(k, PG_B64, 1 + 2 * c.stages, 8, "bars");
    pg_label done = pg_label_new(k, "exit");
    pg_reg maps[5];
    for (int i = 0; i < (dkv ? 5 : 4); i++)
        maps[i] = pg_param_addr(k, p[i]);
    unsigned n = dkv ? 7 : 6;
    bout io;
    io.ST = dkv ? pg_none() : pg_param_load(k, p[4]);
    io.o1 = pg_param_load(k, p[5]);
    io.o2 = dkv ? pg_param_load(k, p[6]) : pg_none();
    io.seq = pg_param_load(k, p[n + 1]);
    io.hq = pg_param_load(k, p[n + 2]);
    io.hkv = pg_param_load(k, p[n + 3]);
    pg_reg dim = pg_param_load(k, p[n + 4]), scale = pg_param_load(k, p[n + 5]);

    io.group = pgk_fa3_group(k, io.hq, io.hkv, dim, c.dp, done);
    const bpos q = position(k, &c, io.seq, io.group);

    pg_reg sx = pgk_fa3_smem_base(k, dyn);
    pg_reg ring = pgv_add(k, PG_U32, sx, pg_u32(2 * c.rbytes));
    pg_reg bars = pgv_mov(k, PG_U32, pg_shared_addr(bar_arr));

    /* each stage: full (one arrival and the bytes), empty (256 threads) */
    const uint32_t off[2] = {c.full, c.empty}, cnt[2] = {1, 256};
    pg_label prod = pgk_fa3_block_start(k, bars, off, cnt, 2, c.stages);
    bcons w = {.f = {.dp = c.dp, .rb = 2 * c.dp, .dim = dim}, .bars = bars, .scale = scale};
    w.c = pgv_mul(k, PG_F32, scale, pg_f32(LOG2E));
    consumer(k, &c, &w, sx, ring, &q, &io);
    pg_exit(k);
    pg_label_bind(k, prod);
    producer(k, &c, maps, sx, ring, bars, &q);
    return pgk_finish(k, done);
}

static int build_dq(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_bwd(k, p, kn, false);
}

static int build_dkv(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_bwd(k, p, kn, true);
}

static uint32_t shared_bytes(unsigned dp, bool dkv)
{
    const bw c = bw_of(dp, dkv);
    return 2 * c.rbytes + c.stages * c.stage + 1024;
}

/* dq: grid (q_heads, batch, query tiles); dkv: (q_heads, batch, key tiles). */
static int launch_bwd(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    if (kn[KN_BATCH] == 0 || kn[KN_SEQ] == 0 || kn[KN_HEADS] == 0 || kn[KN_DIM] == 0 ||
        kn[KN_DIM] > FA_MAX_D || kn[KN_BATCH] > 65535 || kn[KN_HEADS] > 65535 ||
        kn[KN_SEQ] > MAX_SEQ)
        return PG_ERANGE;
    *out = (pgk_launch){{kn[KN_HEADS], kn[KN_BATCH], pgk_ceil_div(kn[KN_SEQ], RES)},
                        {d->threads, 1, 1},
                        shared_bytes(dp_of(kn[KN_DIM]), d->build == build_dkv),
                        {0, 0, 0}};
    return PG_OK;
}

/* ---------------------------------------------------------------- group */

/* dk[t, j, :] = sum over g of dk_heads[t, j G + g, :] in order g = 0 ..
 * G - 1, and so dv: four elements a thread of [tokens, Hkv D]. */
static int build_group(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    pg_label done = pg_label_new(k, "exit");
    pg_reg src[2] = {pg_param_load(k, p[0]), pg_param_load(k, p[1])};
    pg_reg dst[2] = {pg_param_load(k, p[2]), pg_param_load(k, p[3])};
    pg_reg n = pg_param_load(k, p[4]), width = pg_param_load(k, p[5]);
    pg_reg group = pg_param_load(k, p[6]), dim = pg_param_load(k, p[7]);
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, pgv_shr(k, PG_U32, n, pg_u32(2)), done);
    pg_comment(k, "element e = 4 i of [tokens, Hkv D]: token t, head j, column c");
    pg_reg e = pgv_shl(k, PG_B32, i, pg_u32(2));
    pg_reg t = pgv_div(k, PG_U32, e, width);
    pg_reg rem = pgv_rem(k, PG_U32, e, width);
    pg_reg j = pgv_div(k, PG_U32, rem, dim);
    pg_reg col = pgv_rem(k, PG_U32, rem, dim);
    /* source element (t G Hkv + j G) D + c, in 64 bits */
    pg_reg row = pgv_mul_wide(k, PG_U32, t, pgv_mul(k, PG_U32, group, width));
    pg_reg jg = pgv_mad(k, PG_U32, pgv_mul(k, PG_U32, j, group), dim, col);
    pg_add(k, PG_U64, row, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, jg));
    pg_reg step = pgv_mul_wide(k, PG_U32, dim, pg_u32(4));
    pg_reg out = pgv_mul_wide(k, PG_U32, e, pg_u32(4));
    for (int o = 0; o < 2; o++) {
        pg_reg at = pgv_add(k, PG_U64, src[o], pgv_shl(k, PG_B64, row, pg_u32(2)));
        pg_reg acc[4], v[4];
        for (int x = 0; x < 4; x++) {
            acc[x] = pgk_zero_f32(k);
            v[x] = pg_reg_new(k, PG_F32);
        }
        pgk_loop L;
        pgk_loop_begin(k, &L, pg_u32(0), group, pg_u32(1));
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, at, 0, v);
        for (int x = 0; x < 4; x++)
            pg_add(k, PG_F32, acc[x], acc[x], v[x]);
        pg_add(k, PG_U64, at, at, step);
        pgk_loop_end(k, &L);
        pg_val st[4] = {acc[0], acc[1], acc[2], acc[3]};
        pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, pgv_add(k, PG_U64, dst[o], out), 0, st);
    }
    return pgk_finish(k, done);
}

/* a thread for every four elements of an output */
static int launch_group(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    if (kn[0] % 4)
        return PG_ERANGE;
    return pgk_launch_1d(kn[0] / 4, d->threads, out);
}

static const pgk_knob group_knobs[1] = {
    {"n", 4096, 4, 0xFFFFFFFCu, "elements of one output, tokens x Hkv x D (a multiple of 4)",
     false},
};

static const pgk_param group_params[] = {
    {"grad_k_heads", PG_U64, true}, /* f32 [tokens, Hq, D] */
    {"grad_v_heads", PG_U64, true},
    {"grad_k", PG_U64, true},       /* f32 [tokens, Hkv, D] */
    {"grad_v", PG_U64, true},
    {"n", PG_U32, false},           /* tokens x Hkv x D */
    {"kv_width", PG_U32, false},    /* Hkv x D */
    {"group", PG_U32, false},       /* Hq / Hkv */
    {"head_dim", PG_U32, false},    /* a multiple of 4 */
};

#define KNOBS(heads, help)                                                                    \
    {                                                                                         \
        [KN_BATCH] = {"batch", 4, 1, 65535, "sequences (grid y)", false},                     \
        [KN_SEQ] = {"seq_len", 2048, 1, MAX_SEQ, "tokens a sequence (128-row tiles, grid z)", \
                    false},                                                                   \
        [KN_HEADS] = {heads, 12, 1, 65535, help, false},                                      \
        [KN_DIM] = {"head_dim", 128, 1, FA_MAX_D,                                             \
                    "elements a head: tiles 64 (1..64) or 128 wide; the tensor maps need a "  \
                    "multiple of 8",                                                          \
                    true},                                                                    \
    }

static const pgk_knob prep_knobs[FA_NKNOBS] = {
    [KN_BATCH] = {"batch", 4, 1, 65535, "sequences", false},
    [KN_SEQ] = {"seq_len", 2048, 1, MAX_SEQ, "tokens a sequence", false},
    [KN_HEADS] = {"q_heads", 12, 1, 65535, "query heads", false},
    [KN_DIM] = {"head_dim", 128, 1, FA_MAX_D, "elements a head (a lane each 32)", false},
};
static const pgk_knob dq_knobs[FA_NKNOBS] = KNOBS("q_heads", "query heads (grid x)");
static const pgk_knob dkv_knobs[FA_NKNOBS] = KNOBS("q_heads", "query heads (grid x)");

static const pgk_param prep_params[] = {
    {"o", PG_U64, true},      /* f32 [B, S, Hq, D] */
    {"grad_o", PG_U64, true}, /* f32 [B, S, Hq, D] */
    {"lse", PG_U64, true},    /* f32 [B, S, Hq] */
    {"grad_o_bf16", PG_U64, true}, /* bf16 [B, S, Hq, D] */
    {"stats", PG_U64, true},  /* f32 [B, Hq, Sp, 2] */
    {"batch", PG_U32, false},
    {"seq_len", PG_U32, false},
    {"q_heads", PG_U32, false},
    {"head_dim", PG_U32, false},
};

/* The GEMM kernels' parameters: the four bf16 maps, then their own, then
 * the shape */
#define BWD_MAPS                                                                 \
    {"tmap_q", PG_B8, .tensor_map = true},  /* bf16 [B, S, Hq, D] */            \
        {"tmap_k", PG_B8, .tensor_map = true},  /* bf16 [B, S, Hkv, D] */        \
        {"tmap_v", PG_B8, .tensor_map = true},  /* bf16 [B, S, Hkv, D] */        \
        {"tmap_do", PG_B8, .tensor_map = true} /* bf16 [B, S, Hq, D] */
#define BWD_SHAPE                                                                \
    {"batch", PG_U32, false}, {"seq_len", PG_U32, false}, {"q_heads", PG_U32, false}, \
        {"kv_heads", PG_U32, false}, {"head_dim", PG_U32, false}, {"scale", PG_F32, false}

static const pgk_param dq_params[] = {
    BWD_MAPS,
    {"stats", PG_U64, true},  /* f32 [B, Hq, Sp, 2] */
    {"grad_q", PG_U64, true}, /* f32 [B, S, Hq, D] */
    BWD_SHAPE,
};

static const pgk_param dkv_params[] = {
    BWD_MAPS,
    {"tmap_stats", PG_B8, .tensor_map = true}, /* f32 [B, Hq, 2 Sp], boxes {128, 1, 1} */
    {"grad_k", PG_U64, true},                  /* f32 [B, S, Hq, D]: each query head's share */
    {"grad_v", PG_U64, true},                  /* f32 [B, S, Hq, D] */
    BWD_SHAPE,
};

const pgk_desc pgk_desc_attention_sm90_backward_prep = {
    .name = "attention_sm90_backward_prep",
    .summary = "attention backward's first pass: delta = rowsum(dO O), dO in bf16, the rows' "
               "statistics for the sm_90a dq and dkv kernels",
    PGK_PARAMS(prep_params),
    PGK_KNOBS(prep_knobs),
    .min_target = PG_SM_80,
    .threads = 32 * PREP_WARPS,
    .build = build_prep,
    .launch = launch_prep,
};

const pgk_desc pgk_desc_attention_sm90_backward_dq = {
    .name = "attention_sm90_backward_dq",
    .summary = "causal GQA attention dQ, bf16 Q K V dO by TMA, wgmma, pingpong (sm_90a)",
    PGK_PARAMS(dq_params),
    PGK_KNOBS(dq_knobs),
    .min_target = PG_SM_90A,
    .threads = THREADS,
    .build = build_dq,
    .launch = launch_bwd,
    .whole_program = true,
};

const pgk_desc pgk_desc_attention_sm90_backward_dkv = {
    .name = "attention_sm90_backward_dkv",
    .summary = "causal GQA attention dK and dV over each head group, bf16 Q K V dO by TMA, "
               "wgmma, pingpong (sm_90a)",
    PGK_PARAMS(dkv_params),
    PGK_KNOBS(dkv_knobs),
    .min_target = PG_SM_90A,
    .threads = THREADS,
    .build = build_dkv,
    .launch = launch_bwd,
    .whole_program = true,
};

const pgk_desc pgk_desc_attention_sm90_backward_group = {
    .name = "attention_sm90_backward_group",
    .summary = "GQA: each key/value head's dK and dV, the sum of its query heads' in head order",
    PGK_PARAMS(group_params),
    PGK_KNOBS(group_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_group,
    .launch = launch_group,
};
