/* SPDX-License-Identifier: MIT */
/*
 * attention_sm90_forward: causal grouped-query attention, forward, for
 * sm_90a (H100, H200) on warpgroup MMA fed by TMA: the FlashAttention-3
 * scheme.
 *
 *   O = softmax(scale Q K^T, causal) V,  LSE = the row logsumexp (natural
 *   log) of the scaled scores, exactly as attention_mma_forward defines it
 *   (LSE = m scale + ln l, m the row's largest raw score, l the sum of
 *   2^(s c - m c), c = scale log2 e).
 *
 * Q is bf16 [B, S, Hq, D], K and V bf16 [B, S, Hkv, D], read only through
 * three tensor maps (rank 4, dims {D, H, S, B} innermost first, boxes of
 * {64, 1, 128, 1}, 128-byte swizzle: runtime/attention_sm90.c encodes them).
 * O is written f32 [B, S, Hq, D], the layout and type attention_mma_forward
 * writes and its backward reads, and, when o_bf16 is not 0, also as bf16
 * in the same layout (the operand of the o projection, which the model
 * otherwise makes with a cast); LSE f32 [B, S, Hq]. Query head h reads
 * key/value head h / (Hq / Hkv); row s sees keys 0..s.
 *
 * Block: 384 threads, one 128-row query tile of one head (grid (Hq, B,
 * ceil(S / 128)), the query tile qt = tiles - 1 - ctaid.z: every head's
 * longest tiles are dispatched first). Warpgroup 0 produces: it gives up
 * registers (setmaxnreg.dec 24) and one elected thread issues the TMA
 * copies, the Q tile once, then the 128-key blocks 0 .. qt of K and V into
 * two rings of `stages` stages with a "full" and an "empty" mbarrier each,
 * in the order the consumers use them (K0, K1, V0, K2, V1, ...). Key
 * blocks past the diagonal are never loaded. Warpgroups 1 and 2 consume
 * (setmaxnreg.inc 240), each owning 64 query rows:
 *
 *   S = Q K^T    wgmma m64n128k16, A = Q and B = K (K-major) from shared
 *                memory, into 64 f32 registers a thread;
 *   softmax      online, in registers, base 2 with log2 e folded into the
 *                scale (p = 2^(s c - m c)); a row's max and sum over its
 *                quad by two shuffles; the last (diagonal) block masked;
 *   O += P V     P rounded to bf16 straight from S's accumulators into
 *                wgmma's register-A fragments (no shared-memory round
 *                trip), B = V (N-major, wgmma's transpose), O in 64 (D
 *                128) or 32 (D 64) f32 registers a thread.
 *
 * Within a warpgroup the softmax of block j overlaps the GEMMs in flight:
 * a step issues S_j = Q K_j and O += P_{j-1} V_{j-1} together, waits for
 * S_j alone (wgmma.wait_group 1), runs the softmax of S_j while P V is
 * still on the tensor cores, and only then waits for it and turns S_j
 * into P_j. Between the two warpgroups the GEMMs take turns (pingpong):
 * warpgroup w issues its step's GEMMs after a bar.sync on named barrier
 * 1 + w and then hands the turn over with a bar.arrive on the other's, so
 * that one warpgroup's softmax runs while the other's GEMMs do. Each
 * barrier generation has 256 threads: the 128 that sync and the 128 that
 * arrive; warpgroup 1 opens with an arrive (warpgroup 0 goes first) and
 * warpgroup 0 closes with a sync that takes warpgroup 1's last arrive,
 * so no barrier is left half full at exit.
 *
 * Any sequence length: TMA reads zeros past S (and past D: a head_dim
 * below 64 or 128 is padded with zero columns, as the mma kernels pad
 * theirs), the diagonal block masks every key after its query (keys past
 * S among them), and rows past S are not written. Any batch: the maps
 * have a dimension for it, so a tile never reads into the next sequence.
 * Every sum has an order fixed by the shape, no atomics: the same bits run
 * to run.
 *
 * Knobs as attention_mma_forward's (batch, seq_len, q_heads, head_dim);
 * head_dim is baked and picks the tile width dp, 64 (1..64) or 128
 * (65..128); the maps need D a multiple of 8 (16-byte rows), which the
 * launcher checks. A launch whose q_heads is not a multiple of kv_heads,
 * or whose head_dim is 0 or passes dp, writes nothing.
 *
 * Resources (ptxas 13.0, -arch=sm_90a -v; nvdisasm for the per-role
 * figures): 168 registers a thread at entry (384 threads, one block an
 * SM: 65,536 / 384 rounded down to 8), no stack frame, no spills, 3 named
 * barriers (0, and the two turns). After setmaxnreg the consumers use
 * R0..R236 of their 240 at D 128 (O 64, S 64, P 32 registers a thread,
 * the rest statistics, descriptors, addresses) and R0..R204 at D 64; the
 * producer R0..R16 of its 24. 128 x 24 + 256 x 240 = 64,512 of the SM's
 * 65,536 registers. Dynamic shared memory: D 128: Q 32 KiB + 3 stages of
 * K and V (64 KiB a stage) + 1 KiB to align to the swizzle's 1024-byte
 * period = 225 KiB; D 64: 16 KiB + 4 stages of 32 KiB + 1 KiB = 145 KiB;
 * the 13 (17) mbarriers in static shared memory. The test
 * ptxas-sm90a-spills-attention holds both tiles to no spill.
 */
#include "attention_mma.h"

#include <math.h>

#define BM 128u             /* query rows a block: two consumer warpgroups of 64 */
#define BN 128u             /* keys a block */
#define THREADS 384u
#define HALF 16384u         /* a 64-column half of a 128-row tile: 128 rows of 128 bytes */
#define RING_BYTES (225u * 1024u) /* dynamic shared memory less the alignment slack */
#define MAX_STAGES 4u
#define BAR_TURN 1u         /* named barriers 1 and 2: consumer warpgroup 0's and 1's turn */
#define PRODUCER_REGS 24u
#define CONSUMER_REGS 240u
#define MAX_SEQ (1u << 22)  /* 32768 query tiles: grid z */

typedef struct fa3 {
    unsigned dp, halves, stages;
    uint32_t qbytes, kvbytes; /* the Q tile; one stage of K (or of V) */
    /* the mbarriers' byte offsets from the first: q, then stages each of
     * full K, full V, empty K, empty V */
    uint32_t full_k, full_v, empty_k, empty_v;
} fa3;

static unsigned stages_for(unsigned dp)
{
    uint32_t st = (RING_BYTES - BM * dp * 2u) / (2u * BN * dp * 2u);
    return st > MAX_STAGES ? MAX_STAGES : st;
}

static fa3 fa3_of(unsigned dp)
{
    fa3 c = {dp, dp / 64, stages_for(dp), BM * dp * 2u, BN * dp * 2u, 0, 0, 0, 0};
    c.full_k = 8;
    c.full_v = c.full_k + 8 * c.stages;
    c.empty_k = c.full_v + 8 * c.stages;
    c.empty_v = c.empty_k + 8 * c.stages;
    return c;
}

void pgk_fa3_ring_next(pg_kernel *k, pg_reg s, pg_reg ph, uint32_t stages)
{
    pg_add(k, PG_U32, s, s, pg_u32(1));
    pg_reg wrap = pgv_setp(k, PG_CMP_EQ, PG_U32, s, pg_u32(stages));
    pg_guard(k, wrap, false);
    pg_mov(k, PG_U32, s, pg_u32(0));
    pg_guard(k, wrap, false);
    pg_xor(k, PG_U32, ph, ph, pg_u32(1));
}

pg_reg pgk_fa3_stage_bar(pg_kernel *k, pg_reg bars, uint32_t off, pg_reg s)
{
    pg_reg b = pgv_add(k, PG_U32, bars, pg_u32(off));
    return pgv_mad(k, PG_U32, s, pg_u32(8), b);
}

/* The block's place: head h (kv head kvh), batch b, query tile qt (the
 * longest first), its first row q0, and the key blocks 0 .. qt (nkb). */
typedef struct fa3_pos {
    pg_reg h, kvh, b, qt, q0, nkb;
} fa3_pos;

static fa3_pos position(pg_kernel *k, pg_reg seq, pg_reg group)
{
    fa3_pos q;
    pg_comment(k, "block (h, b, z): query tile qt = tiles - 1 - z (every head's longest first)");
    q.h = pg_sreg_read(k, PG_SREG_CTAID_X);
    q.b = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg z = pg_sreg_read(k, PG_SREG_CTAID_Z);
    pg_reg tiles = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, seq, pg_u32(BM - 1)), pg_u32(7));
    q.qt = pgv_sub(k, PG_U32, pgv_sub(k, PG_U32, tiles, pg_u32(1)), z);
    q.q0 = pgv_shl(k, PG_B32, q.qt, pg_u32(7));
    q.nkb = pgv_add(k, PG_U32, q.qt, pg_u32(1));
    q.kvh = pgv_div(k, PG_U32, q.h, group);
    return q;
}

/* ---------------------------------------------------------------- producer */

void pgk_fa3_load_tile(pg_kernel *k, pg_reg map, pg_reg dst, pg_reg head, pg_reg row, pg_reg b,
                       pg_reg bar, unsigned halves, unsigned rows, unsigned box_rows)
{
    for (unsigned hh = 0; hh < halves; hh++)
        for (unsigned rc = 0; rc < rows / box_rows; rc++) {
            uint32_t off = hh * rows * 128u + rc * box_rows * 128u;
            pg_reg d = off ? pgv_add(k, PG_U32, dst, pg_u32(off)) : dst;
            pg_reg r = rc ? pgv_add(k, PG_U32, row, pg_u32(rc * box_rows)) : row;
            pg_val co[4];
            co[0] = pg_u32(64 * hh);
            co[1] = head;
            co[2] = r;
            co[3] = b;
            pg_cp_async_bulk_tensor(k, 4, d, map, co, bar);
        }
}

/* One 128-row tile (Q, or a block of K or V): a box a half. */
static void load_tile(pg_kernel *k, const fa3 *c, pg_reg map, pg_reg dst, pg_reg head, pg_reg row,
                      pg_reg b, pg_reg bar)
{
    pgk_fa3_load_tile(k, map, dst, head, row, b, bar, c->halves, BM, BM);
}

/* A ring of K or V stages as the producer fills it. */
typedef struct ring {
    pg_reg map, base, s, ph, row;
    uint32_t full, empty;
} ring;

/* The next key block into the ring: wait until its stage is free, arm the
 * stage's full barrier with its bytes and issue the copies. */
static void ring_load(pg_kernel *k, const fa3 *c, ring *r, pg_reg bars, pg_reg kvh, pg_reg b)
{
    pg_reg eb = pgk_fa3_stage_bar(k, bars, r->empty, r->s);
    pg_reg fb = pgk_fa3_stage_bar(k, bars, r->full, r->s);
    /* a fresh barrier counts as having completed the phase before its
     * first: the first pass over the ring does not wait */
    pg_mbarrier_wait_parity(k, eb, 0, r->ph);
    pg_mbarrier_arrive_expect_tx(k, fb, 0, pg_u32(c->kvbytes));
    pg_reg dst = pgv_mad(k, PG_U32, r->s, pg_u32(c->kvbytes), r->base);
    load_tile(k, c, r->map, dst, kvh, r->row, b, fb);
    pg_add(k, PG_U32, r->row, r->row, pg_u32(BN));
    pgk_fa3_ring_next(k, r->s, r->ph, c->stages);
}

void pgk_fa3_producer_start(pg_kernel *k)
{
    pg_setmaxnreg(k, false, PRODUCER_REGS);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_guard(k, pgv_setp(k, PG_CMP_NE, PG_U32, warp, pg_u32(0)), false);
    pg_exit(k);
    pg_reg leader = pg_reg_new(k, PG_PRED);
    pg_elect_sync(k, leader, pg_u32(0xffffffffu));
    pg_guard(k, leader, true);
    pg_exit(k);
}

static void producer(pg_kernel *k, const fa3 *c, const pg_reg *maps, pg_reg sq, pg_reg sk,
                     pg_reg sv, pg_reg bars, const fa3_pos *q)
{
    pgk_fa3_producer_start(k);

    pg_comment(k, "the Q tile, once");
    pg_mbarrier_arrive_expect_tx(k, bars, 0, pg_u32(c->qbytes));
    load_tile(k, c, maps[0], sq, q->h, q->q0, q->b, bars);
    ring kr = {maps[1], sk, pg_none(), pg_none(), pg_none(), c->full_k, c->empty_k};
    ring vr = {maps[2], sv, pg_none(), pg_none(), pg_none(), c->full_v, c->empty_v};
    ring *rs[2] = {&kr, &vr};
    for (int i = 0; i < 2; i++) {
        rs[i]->s = pgv_mov(k, PG_U32, pg_u32(0));
        rs[i]->ph = pgv_mov(k, PG_U32, pg_u32(1));
        rs[i]->row = pgv_mov(k, PG_U32, pg_u32(0));
    }
    pg_comment(k, "key blocks in the order the consumers take them: K0, then Kj and V(j-1), "
                  "then the last V");
    ring_load(k, c, &kr, bars, q->kvh, q->b);
    pgk_loop L;
    pgk_loop_begin(k, &L, pg_u32(1), q->nkb, pg_u32(1));
    ring_load(k, c, &kr, bars, q->kvh, q->b);
    ring_load(k, c, &vr, bars, q->kvh, q->b);
    pgk_loop_end(k, &L);
    ring_load(k, c, &vr, bars, q->kvh, q->b);
    pg_exit(k);
}

/* ---------------------------------------------------------------- consumers */

/* A consumer warpgroup's state: its place in the tile, the descriptors of
 * Q (its 64 rows), of K and of V stage 0, the accumulators and the
 * softmax statistics of its two rows a thread (g and g + 8 of its warp's
 * 16). */
typedef struct cons {
    fa f;                 /* g, t4, dim, dp: what the shared tile helpers read */
    pg_reg cw, wrow;      /* warpgroup 0 or 1; the warp's first row in the tile */
    pg_reg dq, dk, dv;    /* u64 descriptors */
    pg_reg bars, c, scale;
    pg_reg o[64], s[64], p[32];
    pg_reg m[2], l[2], corr[2];
    pg_reg ks, kph, vs, vph; /* the K and V stages and parities the next waits use */
} cons;

void pgk_fa3_turn_begin(pg_kernel *k, pg_reg cw)
{
    pg_label second = pg_label_new(k, "turn1"), go = pg_label_new(k, "turn_go");
    pg_bra_if(k, pgv_setp(k, PG_CMP_NE, PG_U32, cw, pg_u32(0)), false, second);
    pg_bar_sync_count(k, BAR_TURN, 256);
    pg_bra(k, go);
    pg_label_bind(k, second);
    pg_bar_sync_count(k, BAR_TURN + 1, 256);
    pg_label_bind(k, go);
}

void pgk_fa3_turn_end(pg_kernel *k, pg_reg cw)
{
    pg_label second = pg_label_new(k, "hand0"), go = pg_label_new(k, "handed");
    pg_bra_if(k, pgv_setp(k, PG_CMP_NE, PG_U32, cw, pg_u32(0)), false, second);
    pg_bar_arrive(k, BAR_TURN + 1, 256);
    pg_bra(k, go);
    pg_label_bind(k, second);
    pg_bar_arrive(k, BAR_TURN, 256);
    pg_label_bind(k, go);
}

/* Issue S = Q K^T on K stage ks (not committed). */
static void gemm_qk(pg_kernel *k, const fa3 *c, cons *w)
{
    pg_reg so = pgv_mul_wide(k, PG_U32, w->ks, pg_u32(c->kvbytes / 16));
    pg_reg db = pgv_add(k, PG_U64, w->dk, so);
    pg_wgmma_fence(k);
    for (unsigned kk = 0; kk < c->dp / 16; kk++) {
        /* a k16 step is 32 bytes along a 128-byte row; the next 64
         * columns are the next half, 16 KiB on */
        uint64_t step = (uint64_t)(kk / 4) * (HALF / 16) + (kk % 4) * 2u;
        pg_reg a = kk ? pgv_add(k, PG_U64, w->dq, pg_u64(step)) : w->dq;
        pg_reg b = kk ? pgv_add(k, PG_U64, db, pg_u64(step)) : db;
        pg_wgmma g = {.n = BN, .ab = PG_BF16, .d = w->s, .a_desc = a, .b_desc = b,
                      .scale_d = pg_u32(kk ? 1 : 0)};
        pg_wgmma_mma_async(k, &g);
    }
}

/* Issue O += P V on V stage vs (not committed): P from registers, V
 * N-major (a k16 step is 16 rows of 128 bytes; the halves, 16 KiB apart,
 * are the leading byte offset). */
static void gemm_pv(pg_kernel *k, const fa3 *c, cons *w)
{
    pg_reg so = pgv_mul_wide(k, PG_U32, w->vs, pg_u32(c->kvbytes / 16));
    pg_reg db = pgv_add(k, PG_U64, w->dv, so);
    pg_wgmma_fence(k);
    for (unsigned kk = 0; kk < BN / 16; kk++) {
        pg_reg b = kk ? pgv_add(k, PG_U64, db, pg_u64(kk * (2048u / 16))) : db;
        pg_wgmma g = {.n = c->dp, .ab = PG_BF16, .d = w->o, .a = w->p + 4 * kk,
                      .a_desc = pg_none(), .b_desc = b, .scale_d = pg_u32(1), .trans_b = true};
        pg_wgmma_mma_async(k, &g);
    }
}

/* Wait for a ring stage's full barrier. */
static void wait_full(pg_kernel *k, const cons *w, uint32_t off, pg_reg s, pg_reg ph)
{
    pg_mbarrier_wait_parity(k, pgk_fa3_stage_bar(k, w->bars, off, s), 0, ph);
}

/* This thread is done with a ring stage. */
static void release(pg_kernel *k, const cons *w, uint32_t off, pg_reg s)
{
    pg_mbarrier_arrive(k, pgk_fa3_stage_bar(k, w->bars, off, s), 0);
}

/* Key block kb of the diagonal (kb == qt): keys past their query to -inf. */
static void mask_diagonal(pg_kernel *k, cons *w, pg_reg kb, pg_reg qt)
{
    pg_label off = pg_label_new(k, "off_diagonal");
    pg_bra_if(k, pgv_setp(k, PG_CMP_LT, PG_U32, kb, qt), false, off);
    pgk_fa_causal_mask(k, &w->f, (pg_reg(*)[4])w->s, BN / 8, w->wrow, pg_u32(0), false);
    pg_label_bind(k, off);
}

/* The online softmax of S, as attention_mma_forward's but for the order
 * of the thread's sums: per row, the new max m', corr = 2^(m c - m' c),
 * S = 2^(S c - m' c) in place, l = l corr + the thread's sum. The
 * thread's 32 values of a row go round four partial maxima and sums
 * (value i to partial i % 4), combined as (0, 1) and (2, 3), then the two:
 * four short dependency chains instead of one of 32, in an order fixed by
 * the shape. O is rescaled by corr later, before the next P V. */
static void softmax(pg_kernel *k, cons *w)
{
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_reg v[BN / 4]; /* the row's values: column 8 nt + 2 t4 + e */
        for (unsigned nt = 0; nt < BN / 8; nt++)
            for (unsigned e = 0; e < 2; e++)
                v[2 * nt + e] = w->s[4 * nt + 2 * hh + e];
        pg_reg part[4];
        for (unsigned i = 0; i < 4; i++)
            part[i] = pgv_mov(k, PG_F32, v[i]);
        for (unsigned i = 4; i < BN / 4; i++)
            pg_max(k, PG_F32, part[i % 4], part[i % 4], v[i]);
        pg_reg m01 = pgv_max(k, PG_F32, part[0], part[1]);
        pg_reg m23 = pgv_max(k, PG_F32, part[2], part[3]);
        pg_reg mx = pgk_fa_quad_reduce(k, PG_REDUCE_MAX, pgv_max(k, PG_F32, m01, m23));
        pg_reg mn = pgv_max(k, PG_F32, w->m[hh], mx);
        pg_reg mc = pgv_mul(k, PG_F32, mn, w->c);
        pg_reg old = pgv_mul(k, PG_F32, w->m[hh], w->c);
        pg_ex2(k, PG_F32, w->corr[hh], pgv_sub(k, PG_F32, old, mc));
        pg_reg nmc = pgv_neg(k, PG_F32, mc);
        for (unsigned i = 0; i < BN / 4; i++) {
            pg_ex2(k, PG_F32, v[i], pgv_fma(k, PG_F32, v[i], w->c, nmc));
            if (i < 4)
                part[i] = pgv_mov(k, PG_F32, v[i]);
            else
                pg_add(k, PG_F32, part[i % 4], part[i % 4], v[i]);
        }
        pg_reg s01 = pgv_add(k, PG_F32, part[0], part[1]);
        pg_reg s23 = pgv_add(k, PG_F32, part[2], part[3]);
        pg_reg sum = pgv_add(k, PG_F32, s01, s23);
        pg_fma(k, PG_F32, w->l[hh], w->l[hh], w->corr[hh], sum);
        pg_mov(k, PG_F32, w->m[hh], mn);
    }
}

/* O *= corr, row by row. */
static void rescale(pg_kernel *k, const fa3 *c, cons *w)
{
    for (unsigned nt = 0; nt < c->dp / 8; nt++)
        for (unsigned e = 0; e < 4; e++)
            pg_mul(k, PG_F32, w->o[4 * nt + e], w->o[4 * nt + e], w->corr[e / 2]);
}

/* P = S rounded to bf16, in wgmma's A fragments: k-step kk's four
 * registers are S's 16 columns 16 kk .. as rows g, g + 8, then columns
 * + 8 (accumulators 8 kk .. 8 kk + 7 in pairs). */
static void to_p(pg_kernel *k, cons *w)
{
    for (unsigned i = 0; i < 32; i++)
        pg_cvt_pack(k, PG_BF16, w->p[i], w->s[2 * i], w->s[2 * i + 1]);
}

/* The outputs: O = acc / l (f32, and bf16 where obf is not 0) and
 * LSE = m scale + ln l, rows below S. */
static void epilogue(pg_kernel *k, const fa3 *c, cons *w, const fa3_pos *q, pg_reg O, pg_reg OB,
                     pg_reg LSE, pg_reg seq, pg_reg hq)
{
    (void)c;
    pg_comment(k, "O = acc / l; LSE = m scale + ln l");
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_mov(k, PG_F32, w->l[hh], pgk_fa_quad_reduce(k, PG_REDUCE_SUM, w->l[hh]));
        pg_reg inv = pgv_rcp(k, PG_F32, w->l[hh]);
        for (unsigned nt = 0; nt < w->f.dp / 8; nt++)
            for (unsigned e = 0; e < 2; e++)
                pg_mul(k, PG_F32, w->o[4 * nt + 2 * hh + e], w->o[4 * nt + 2 * hh + e], inv);
    }
    /* token (b S + q0), head h: ((b S + q0) Hq + h) D elements, in 64 bits */
    pg_reg tok = pgv_mul_wide(k, PG_U32, q->b, seq);
    pg_add(k, PG_U64, tok, tok, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, q->q0));
    pg_reg hq64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, hq);
    pg_reg row = pgv_mul(k, PG_U64, tok, hq64);
    pg_add(k, PG_U64, row, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, q->h));
    pg_reg elem = pgv_mul(k, PG_U64, row, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, w->f.dim));
    pg_reg hd = pgv_mul_wide(k, PG_U32, hq, w->f.dim);
    pg_reg qrows = pgv_sub(k, PG_U32, seq, q->q0);
    pg_reg obase = pgv_add(k, PG_U64, O, pgv_shl(k, PG_B64, elem, pg_u32(2)));
    pg_reg ostride = pgv_shl(k, PG_B64, hd, pg_u32(2));
    pg_reg(*acc)[4] = (pg_reg(*)[4])w->o;
    pgk_fa_store_rows(k, &w->f, acc, pg_none(), obase, ostride, w->wrow, qrows);
    pg_label nob = pg_label_new(k, "no_bf16");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U64, OB, pg_u64(0)), false, nob);
    pg_reg bbase = pgv_add(k, PG_U64, OB, pgv_shl(k, PG_B64, elem, pg_u32(1)));
    pg_reg bstride = pgv_shl(k, PG_B64, hd, pg_u32(1));
    pgk_fa_store_rows_bf16(k, &w->f, acc, bbase, bstride, w->wrow, qrows);
    pg_label_bind(k, nob);

    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, w->f.t4, pg_u32(0));
    pg_reg rowq = pgv_add(k, PG_U32, q->q0, w->wrow);
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_reg r = pgv_add(k, PG_U32, rowq, pgv_add(k, PG_U32, w->f.g, pg_u32(8 * hh)));
        pg_reg in = pgv_setp(k, PG_CMP_LT, PG_U32, r, seq);
        pg_reg ok = pgv_and(k, PG_PRED, first, in);
        pg_reg lse = pgv_mul(k, PG_F32, pgv_lg2(k, PG_F32, w->l[hh]), pg_f32(LN2));
        pg_fma(k, PG_F32, lse, w->m[hh], w->scale, lse);
        /* ((b S + r) Hq + h), 64 bits */
        pg_reg t = pgv_mul_wide(k, PG_U32, q->b, seq);
        pg_add(k, PG_U64, t, t, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, r));
        pg_reg idx = pgv_mul(k, PG_U64, t, hq64);
        pg_add(k, PG_U64, idx, idx, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, q->h));
        pg_reg at = pgv_add(k, PG_U64, LSE, pgv_shl(k, PG_B64, idx, pg_u32(2)));
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, at, 0, lse);
    }
}

void pgk_fa3_consumer_start(pg_kernel *k, pg_reg *cw, fa *f, pg_reg *wrow)
{
    pg_setmaxnreg(k, true, CONSUMER_REGS);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    *cw = pgv_sub(k, PG_U32, pgv_shr(k, PG_U32, tid, pg_u32(7)), pg_u32(1));
    pg_reg lt = pgv_and(k, PG_B32, tid, pg_u32(127));
    pg_reg warp = pgv_shr(k, PG_U32, lt, pg_u32(5));
    pg_reg lane = pgv_and(k, PG_B32, lt, pg_u32(31));
    f->g = pgv_shr(k, PG_U32, lane, pg_u32(2));
    f->t4 = pgv_and(k, PG_B32, lane, pg_u32(3));
    pg_reg wg0 = pgv_shl(k, PG_B32, *cw, pg_u32(6));
    *wrow = pgv_mad(k, PG_U32, warp, pg_u32(16), wg0);
}

pg_reg pgk_fa3_group(pg_kernel *k, pg_reg hq, pg_reg hkv, pg_reg dim, unsigned dp, pg_label done)
{
    pg_comment(k, "unusable shapes write nothing: Hkv 0, Hq not a multiple of it, D 0 or past dp");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, hkv, pg_u32(0)), false, done);
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, dim, pg_u32(0)), false, done);
    pg_bra_if(k, pgv_setp(k, PG_CMP_GT, PG_U32, dim, pg_u32(dp)), false, done);
    pg_reg group = pgv_div(k, PG_U32, hq, hkv);
    pg_reg back = pgv_mul(k, PG_U32, group, hkv);
    pg_bra_if(k, pgv_setp(k, PG_CMP_NE, PG_U32, back, hq), false, done);
    return group;
}

pg_label pgk_fa3_block_start(pg_kernel *k, pg_reg bars, const uint32_t *off,
                             const uint32_t *count, unsigned kinds, unsigned stages)
{
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_label inited = pg_label_new(k, "inited");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, tid, pg_u32(0)), true, inited);
    pg_mbarrier_init(k, bars, 0, pg_u32(1));
    for (uint32_t i = 0; i < stages; i++)
        for (unsigned j = 0; j < kinds; j++)
            pg_mbarrier_init(k, bars, off[j] + 8 * i, pg_u32(count[j]));
    pg_fence_mbarrier_init(k);
    pg_fence_proxy_async(k);
    pg_label_bind(k, inited);
    pg_bar_sync(k, 0);

    pg_reg wg = pgv_shr(k, PG_U32, tid, pg_u32(7));
    pg_label prod = pg_label_new(k, "producer");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, wg, pg_u32(0)), false, prod);
    return prod;
}

pg_reg pgk_fa3_smem_base(pg_kernel *k, pg_shared dyn)
{
    pg_reg s = pgv_mov(k, PG_U32, pg_shared_addr(dyn));
    pg_add(k, PG_U32, s, s, pg_u32(1023));
    pg_and(k, PG_B32, s, s, pg_u32(~1023u));
    return s;
}

static void consumer(pg_kernel *k, const fa3 *c, cons *w, pg_reg sq, pg_reg sk, pg_reg sv,
                     const fa3_pos *q, pg_reg O, pg_reg OB, pg_reg LSE, pg_reg seq, pg_reg hq)
{
    pgk_fa3_consumer_start(k, &w->cw, &w->f, &w->wrow);

    pg_comment(k, "descriptors: Q's 64 rows of this warpgroup, K and V stage 0 (128B swizzle)");
    pg_reg qa = pgv_mad(k, PG_U32, w->cw, pg_u32(64 * 128), sq);
    w->dq = pg_wgmma_desc(k, qa, 16, 1024, 0, PG_SWIZZLE_128B);
    w->dk = pg_wgmma_desc(k, sk, 16, 1024, 0, PG_SWIZZLE_128B);
    w->dv = pg_wgmma_desc(k, sv, HALF, 1024, 0, PG_SWIZZLE_128B);

    for (unsigned i = 0; i < c->dp / 2; i++)
        w->o[i] = pgk_zero_f32(k);
    for (unsigned i = 0; i < BN / 2; i++)
        w->s[i] = pg_reg_new(k, PG_F32);
    for (unsigned i = 0; i < 32; i++)
        w->p[i] = pg_reg_new(k, PG_B32);
    for (unsigned i = 0; i < 2; i++) {
        w->m[i] = pgk_f32_const(k, -INFINITY);
        w->l[i] = pgk_zero_f32(k);
        w->corr[i] = pg_reg_new(k, PG_F32);
    }
    w->ks = pgv_mov(k, PG_U32, pg_u32(0));
    w->kph = pgv_mov(k, PG_U32, pg_u32(0));
    w->vs = pgv_mov(k, PG_U32, pg_u32(0));
    w->vph = pgv_mov(k, PG_U32, pg_u32(0));

    pg_comment(k, "pingpong: warpgroup 1 hands warpgroup 0 the first turn");
    pg_label first = pg_label_new(k, "wg0_first");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, w->cw, pg_u32(0)), false, first);
    pg_bar_arrive(k, BAR_TURN, 256);
    pg_label_bind(k, first);
    pg_mbarrier_wait_parity(k, w->bars, 0, pg_u32(0));

    pg_comment(k, "key block 0: S = Q K0^T, softmax, P");
    wait_full(k, w, c->full_k, w->ks, w->kph);
    pgk_fa3_turn_begin(k, w->cw);
    gemm_qk(k, c, w);
    pg_wgmma_commit(k);
    pgk_fa3_turn_end(k, w->cw);
    pg_wgmma_wait(k, 0);
    release(k, w, c->empty_k, w->ks);
    pgk_fa3_ring_next(k, w->ks, w->kph, c->stages);
    mask_diagonal(k, w, pg_u32(0), q->qt);
    softmax(k, w);
    to_p(k, w);

    pg_comment(k, "key blocks 1 .. qt: S_j = Q K_j^T and O += P_(j-1) V_(j-1) in one turn, "
                  "the softmax of S_j while P V runs");
    pgk_loop L;
    pg_reg kb = pgk_loop_begin(k, &L, pg_u32(1), q->nkb, pg_u32(1));
    {
        wait_full(k, w, c->full_k, w->ks, w->kph);
        pgk_fa3_turn_begin(k, w->cw);
        gemm_qk(k, c, w);
        pg_wgmma_commit(k);
        rescale(k, c, w);
        wait_full(k, w, c->full_v, w->vs, w->vph);
        gemm_pv(k, c, w);
        pg_wgmma_commit(k);
        pgk_fa3_turn_end(k, w->cw);
        pg_wgmma_wait(k, 1);
        release(k, w, c->empty_k, w->ks);
        pgk_fa3_ring_next(k, w->ks, w->kph, c->stages);
        mask_diagonal(k, w, kb, q->qt);
        softmax(k, w);
        pg_wgmma_wait(k, 0);
        release(k, w, c->empty_v, w->vs);
        pgk_fa3_ring_next(k, w->vs, w->vph, c->stages);
        to_p(k, w);
    }
    pgk_loop_end(k, &L);

    pg_comment(k, "the last P V");
    rescale(k, c, w);
    wait_full(k, w, c->full_v, w->vs, w->vph);
    gemm_pv(k, c, w);
    pg_wgmma_commit(k);
    pg_wgmma_wait(k, 0);
    release(k, w, c->empty_v, w->vs);
    pg_comment(k, "warpgroup 0 takes warpgroup 1's last hand-over: no barrier left half full");
    pg_label last = pg_label_new(k, "wg1_done");
    pg_bra_if(k, pgv_setp(k, PG_CMP_NE, PG_U32, w->cw, pg_u32(0)), false, last);
    pg_bar_sync_count(k, BAR_TURN, 256);
    pg_label_bind(k, last);
    epilogue(k, c, w, q, O, OB, LSE, seq, hq);
}

/* ---------------------------------------------------------------- build */

static int build(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    const fa3 c = fa3_of(dp_of(kn[KN_DIM]));
    pg_kernel_set_minnctapersm(k, 1); /* .maxntid: the descriptor's .threads */
    pg_shared dyn = pg_shared_dynamic(k, 128);
    pg_shared bar_arr = pg_shared_static(k, PG_B64, 1 + 4 * c.stages, 8, "bars");
    pg_label done = pg_label_new(k, "exit");
    pg_reg maps[3]; /* in turn: the order of an initializer's calls is open */
    for (int i = 0; i < 3; i++)
        maps[i] = pg_param_addr(k, p[i]);
    pg_reg O = pg_param_load(k, p[3]), OB = pg_param_load(k, p[4]), LSE = pg_param_load(k, p[5]);
    pg_reg seq = pg_param_load(k, p[7]);
    pg_reg hq = pg_param_load(k, p[8]), hkv = pg_param_load(k, p[9]);
    pg_reg dim = pg_param_load(k, p[10]), scale = pg_param_load(k, p[11]);

    pg_reg group = pgk_fa3_group(k, hq, hkv, dim, c.dp, done);
    const fa3_pos q = position(k, seq, group);

    /* the tiles, aligned up to the swizzle's 1024-byte period: Q, the K
     * ring, the V ring */
    pg_reg sq = pgk_fa3_smem_base(k, dyn);
    pg_reg sk = pgv_add(k, PG_U32, sq, pg_u32(c.qbytes));
    pg_reg sv = pgv_add(k, PG_U32, sk, pg_u32(c.stages * c.kvbytes));
    pg_reg bars = pgv_mov(k, PG_U32, pg_shared_addr(bar_arr));

    /* each stage: full K, full V (one arrival and the bytes), empty K,
     * empty V (both consumers' 256 threads) */
    const uint32_t off[4] = {c.full_k, c.full_v, c.empty_k, c.empty_v}, cnt[4] = {1, 1, 256, 256};
    pg_label prod = pgk_fa3_block_start(k, bars, off, cnt, 4, c.stages);
    cons w = {.f = {.dp = c.dp, .rb = 2 * c.dp, .dim = dim}, .bars = bars, .scale = scale};
    w.c = pgv_mul(k, PG_F32, scale, pg_f32(LOG2E));
    consumer(k, &c, &w, sq, sk, sv, &q, O, OB, LSE, seq, hq);
    pg_exit(k);
    pg_label_bind(k, prod);
    producer(k, &c, maps, sq, sk, sv, bars, &q);
    return pgk_finish(k, done);
}

/* ---------------------------------------------------------------- launch */

static uint32_t shared_bytes(unsigned dp)
{
    const fa3 c = fa3_of(dp);
    return c.qbytes + 2 * c.stages * c.kvbytes + 1024;
}

static int launch(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    if (kn[KN_BATCH] == 0 || kn[KN_SEQ] == 0 || kn[KN_HEADS] == 0 || kn[KN_DIM] == 0 ||
        kn[KN_DIM] > FA_MAX_D || kn[KN_BATCH] > 65535 || kn[KN_HEADS] > 65535 ||
        kn[KN_SEQ] > MAX_SEQ)
        return PG_ERANGE;
    *out = (pgk_launch){{kn[KN_HEADS], kn[KN_BATCH], pgk_ceil_div(kn[KN_SEQ], BM)},
                        {d->threads, 1, 1},
                        shared_bytes(dp_of(kn[KN_DIM])),
                        {0, 0, 0}};
    return PG_OK;
}

static const pgk_knob knobs[FA_NKNOBS] = {
    [KN_BATCH] = {"batch", 4, 1, 65535, "sequences (grid y)", false},
    [KN_SEQ] = {"seq_len", 2048, 1, MAX_SEQ, "tokens a sequence (128-row query tiles, grid z)",
                false},
    [KN_HEADS] = {"q_heads", 12, 1, 65535, "query heads (grid x)", false},
    [KN_DIM] = {"head_dim", 128, 1, FA_MAX_D,
                "elements a head: tiles 64 (1..64) or 128 wide; the tensor maps need a "
                "multiple of 8",
                true},
};

static const pgk_param params[] = {
    {"tmap_q", PG_B8, .tensor_map = true}, /* bf16 [B, S, Hq, D] */
    {"tmap_k", PG_B8, .tensor_map = true}, /* bf16 [B, S, Hkv, D] */
    {"tmap_v", PG_B8, .tensor_map = true}, /* bf16 [B, S, Hkv, D] */
    {"o", PG_U64, true},                   /* f32 [B, S, Hq, D] */
    {"o_bf16", PG_U64, false},             /* bf16 [B, S, Hq, D], or 0: none */
    {"lse", PG_U64, true},                 /* f32 [B, S, Hq] */
    {"batch", PG_U32, false},
    {"seq_len", PG_U32, false},
    {"q_heads", PG_U32, false},
    {"kv_heads", PG_U32, false},
    {"head_dim", PG_U32, false},
    {"scale", PG_F32, false},
};

const pgk_desc pgk_desc_attention_sm90_forward = {
    .name = "attention_sm90_forward",
    .summary = "causal GQA attention O and row logsumexp, bf16 Q K V by TMA, wgmma, "
               "FlashAttention-3 pingpong (sm_90a)",
    PGK_PARAMS(params),
    PGK_KNOBS(knobs),
    .min_target = PG_SM_90A,
    .threads = THREADS,
    .build = build,
    .launch = launch,
    .whole_program = true,
};
