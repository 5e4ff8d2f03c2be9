/* SPDX-License-Identifier: MIT */
/*
 * Causal grouped-query attention on the tensor cores (sm_80+), the
 * FlashAttention-2 scheme with mma.sync.m16n8k16 bf16 operands and f32
 * accumulators; the same ABI as attention.c's f32 kernels:
 *
 *   attention_mma_forward       O and the row logsumexp LSE
 *   attention_mma_backward_dq   dQ, and delta = rowsum(dO * O)
 *   attention_mma_backward_dkv  dK, dV (run after _dq: it reads delta)
 *
 * Q, O, dO, dQ are f32 [B, S, Hq, D]; K, V, dK, dV f32 [B, S, Hkv, D];
 * LSE and delta f32 [B, S, Hq]. Query head h reads key/value head
 * h / (Hq / Hkv); row s sees keys 0..s. Inputs stay f32 so a model's
 * buffers serve both families: a tile is rounded to bf16 (nearest even)
 * as it is staged into shared memory, which is where the tensor cores
 * read it; softmax statistics, the accumulators, delta and every output
 * are f32.
 *
 * Tiles. Shared-memory tiles are rows of dp bf16 (dp = 64 or 128: head_dim
 * rounded up, the padding zero), 16-byte chunk c of row r at c ^ (r % 8),
 * so that the eight rows an ldmatrix reads fall in eight bank groups. A
 * warp owns 16 rows of its block's tile.
 *
 * forward (4 warps, 64 query rows a block, key tiles of 64): S = Q K^T in
 * registers, the online softmax in base 2 (p = 2^(s c - m c), c = scale
 * log2 e), P rounded to bf16 straight from the accumulators into the A
 * fragments of O += P V (V through ldmatrix.trans). Only the diagonal tile
 * is masked; keys past S lie above every valid row's diagonal.
 *
 * dq (4 warps, 64 query rows, key tiles of 64): delta from the f32 O and
 * dO, then for each key tile P = 2^(s c - LSE log2 e), dP = dO V^T,
 * dS = P (dP - delta), dQ += dS K; dQ = scale dQ at the end.
 *
 * dkv (8 warps: four groups of 2, 32 keys a block, query tiles of 32):
 * the (query head of the group, query tile) pairs from the diagonal on are
 * dealt to the four groups in turn; each group keeps its own dK, dV
 * (recomputing P^T = K Q^T, dP^T = V dO^T), and they meet in shared
 * memory at the end, ((g0 + g1) + g2) + g3. Four groups on 32 keys rather
 * than one on 64: a model's few kv heads give few key tiles, and the
 * groups make twice the blocks. The split depends on the shape alone.
 *
 * Every sum has one order fixed by the shape: no atomics, the same bits
 * run to run. A launch whose q_heads is not a multiple of kv_heads, or
 * whose head_dim is 0 or passes the variant's dp, writes nothing.
 *
 * Packed documents: attention_mma_forward_docs, _backward_dq_docs and
 * _backward_dkv_docs take one more param, last, doc_start (s32 [B, S], see
 * model.h): query i sees keys doc_start[i]..i. Scores before a row's
 * document start are -inf before the softmax, like those past the diagonal.
 * Skipped, as the causal kernels skip the tiles above the diagonal:
 *   forward, dq: the key tiles that end before doc_start[q0], the least of
 *     the query tile's (doc_start is non-decreasing): the loop starts at
 *     tile doc_start[q0] / 64. The document mask is applied to a key tile
 *     only when it begins before the doc_start of the tile's last row.
 *   dkv: the query tiles from the first whose first query's document starts
 *     after the key tile's last key (then so do all the later ones'): a
 *     binary search over doc_start[32 t] ends the block's pairs there. The
 *     mask is applied to a (key tile, query tile) pair only when the query
 *     tile's last row's document starts after the key tile's first key.
 * A forward row whose document starts past a key tile it is given sees
 * only -inf there: its running max stays -inf and the tile adds 0 (the
 * exponent is taken from 0 instead of -inf, which would give NaN). With
 * doc_start all zero nothing is skipped or masked and every value passes
 * the same instructions as in the base kernel: the bits are the base
 * kernel's. A document's outputs are those of the base kernel run on it
 * alone to within the base kernel's tolerance, not bit for bit: the tiles
 * fall differently.
 */
#include "attention_mma.h"

#include <math.h>

/* The padded head dim of a head_dim knob. */

/* Loads the shape params from p[first] and leaves through `out` when they
 * are unusable: Hkv = 0, Hq not a multiple of it, D = 0 or D > dp. */
void pgk_fa_init(pg_kernel *k, fa *f, const pg_param *p, unsigned first, unsigned dp,
                 pg_label out)
{
    f->dp = dp;
    f->rb = dp * 2;
    f->batch = pg_param_load(k, p[first]);
    f->seq = pg_param_load(k, p[first + 1]);
    f->hq = pg_param_load(k, p[first + 2]);
    f->hkv = pg_param_load(k, p[first + 3]);
    f->dim = pg_param_load(k, p[first + 4]);
    f->scale = pg_param_load(k, p[first + 5]);
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, f->hkv, pg_u32(0)), false, out);
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, f->dim, pg_u32(0)), false, out);
    pg_bra_if(k, pgv_setp(k, PG_CMP_GT, PG_U32, f->dim, pg_u32(dp)), false, out);
    f->group = pgv_div(k, PG_U32, f->hq, f->hkv);
    pg_reg back = pgv_mul(k, PG_U32, f->group, f->hkv);
    pg_bra_if(k, pgv_setp(k, PG_CMP_NE, PG_U32, back, f->hq), false, out);
    f->c = pgv_mul(k, PG_F32, f->scale, pg_f32(LOG2E));

    f->tid = pg_sreg_read(k, PG_SREG_TID_X);
    f->lane = pgv_and(k, PG_B32, f->tid, pg_u32(31));
    f->warp = pgv_shr(k, PG_U32, f->tid, pg_u32(5));
    f->g = pgv_shr(k, PG_U32, f->lane, pg_u32(2));
    f->t4 = pgv_and(k, PG_B32, f->lane, pg_u32(3));
    pg_reg r8 = pgv_and(k, PG_B32, f->lane, pg_u32(7));
    pg_reg b3 = pgv_and(k, PG_B32, pgv_shr(k, PG_U32, f->lane, pg_u32(3)), pg_u32(1));
    pg_reg b4 = pgv_shr(k, PG_U32, f->lane, pg_u32(4));
    pg_comment(k, "ldmatrix rows are 8-aligned plus lane%8: the swizzle is chunk ^ lane%8");
    pg_reg rowa = pgv_mad(k, PG_U32, b3, pg_u32(8), r8);
    pg_reg rowb = pgv_mad(k, PG_U32, b4, pg_u32(8), r8);
    pg_reg xa = pgv_xor(k, PG_B32, b4, r8), xb = pgv_xor(k, PG_B32, b3, r8);
    pg_reg ra = pgv_mul(k, PG_U32, rowa, pg_u32(f->rb)),
           rbb = pgv_mul(k, PG_U32, rowb, pg_u32(f->rb));
    for (unsigned s = 0; s < dp / 16; s++) {
        pg_reg ca = pgv_xor(k, PG_B32, xa, pg_u32(2 * s));
        f->offa[s] = pgv_mad(k, PG_U32, ca, pg_u32(16), ra);
        pg_reg cb = pgv_xor(k, PG_B32, xb, pg_u32(2 * s));
        f->offb[s] = pgv_mad(k, PG_U32, cb, pg_u32(16), rbb);
    }
}

/* vec = D % 4 == 0 and every base 16-byte aligned. */
void pgk_fa_vec(pg_kernel *k, fa *f, const pg_reg *bases, unsigned n)
{
    pg_reg any = pgv_mov(k, PG_B64, bases[0]);
    for (unsigned i = 1; i < n; i++)
        pg_or(k, PG_B64, any, any, bases[i]);
    pg_reg lo = pgv_and(k, PG_B64, any, pg_u64(15));
    pg_reg al = pgv_setp(k, PG_CMP_EQ, PG_U64, lo, pg_u64(0));
    pg_reg d4 = pgv_and(k, PG_B32, f->dim, pg_u32(3));
    f->vec = pgv_and(k, PG_PRED, al, pgv_setp(k, PG_CMP_EQ, PG_U32, d4, pg_u32(0)));
}

/* The address of element (token t, head h, 0) of a [B, S, H, D] f32
 * tensor for batch b: ((b S + t) H + h) D floats from base. */
pg_reg pgk_fa_head_row(pg_kernel *k, const fa *f, pg_reg base, pg_reg b, pg_val t, pg_reg heads,
                       pg_reg h)
{
    pg_reg row = pgv_mad(k, PG_U32, b, f->seq, t);
    pg_mad(k, PG_U32, row, row, heads, h);
    return pgk_addr2(k, base, row, f->dim, pg_u32(0), 4);
}

/* Bytes from one token's row of a head to the next's: H D 4. */
pg_reg pgk_fa_token_stride(pg_kernel *k, const fa *f, pg_reg heads)
{
    return pgv_mul_wide(k, PG_U32, pgv_mul(k, PG_U32, heads, f->dim), pg_u32(4));
}

/* Stage `rows` token rows of one head into the tile at dst (u32 shared):
 * tile row i is the row at src + i stride (src u64, stride u64 bytes),
 * zero where i >= nvalid or past D. Thread tix of nthr moves chunks of 8
 * elements: two 16-byte loads (or eight 4-byte ones when !vec), one
 * 16-byte bf16 store. nthr / (dp / 8) is a multiple of 4: a thread's
 * chunks have one swizzle, or two alternating (a step of 4 rows flips bit
 * 2 of r % 8). */
#define FA_MAX_CH 8u
void pgk_fa_stage(pg_kernel *k, const fa *f, pg_reg dst, pg_reg src, pg_reg stride, pg_val nvalid,
                  unsigned rows, unsigned nthr, pg_reg tix)
{
    const unsigned cpr = f->dp / 8, rstep = nthr / cpr, nch = rows * cpr / nthr;
    pg_reg c = pgv_and(k, PG_B32, tix, pg_u32(cpr - 1));
    pg_reg r0 = pgv_shr(k, PG_U32, tix, pg_u32(log2u(cpr)));
    pg_reg col = pgv_shl(k, PG_B32, c, pg_u32(3));
    pg_reg sw = pgv_xor(k, PG_B32, c, pgv_and(k, PG_B32, r0, pg_u32(7)));
    pg_reg d0 = pgv_mad(k, PG_U32, r0, pg_u32(f->rb), dst);
    pg_mad(k, PG_U32, d0, sw, pg_u32(16), d0);
    /* a row step of 4 (dkv's 64 threads over 128-wide rows) alternates the swizzle */
    pg_reg d4 = pg_none();
    if (rstep % 8) {
        pg_reg sw4 = pgv_xor(k, PG_B32, sw, pg_u32(4));
        d4 = pgv_mad(k, PG_U32, pgv_add(k, PG_U32, r0, pg_u32(rstep)), pg_u32(f->rb), dst);
        pg_mad(k, PG_U32, d4, sw4, pg_u32(16), d4);
    }
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, off, r0);
    pg_reg s0 = pg_reg_new(k, PG_U64);
    pg_mul(k, PG_U64, s0, off, stride);
    pg_add(k, PG_U64, s0, s0, src);
    pg_reg colb = pgv_mul_wide(k, PG_U32, col, pg_u32(4));
    pg_add(k, PG_U64, s0, s0, colb);
    pg_reg jstep = pgv_mul(k, PG_U64, stride, pg_u64(rstep));
    pg_reg in0 = pgv_setp(k, PG_CMP_LT, PG_U32, col, f->dim);
    pg_reg col4 = pgv_add(k, PG_U32, col, pg_u32(4));
    pg_reg in1 = pgv_setp(k, PG_CMP_LT, PG_U32, col4, f->dim);
    pg_reg x[FA_MAX_CH][8], rin[FA_MAX_CH], sp[FA_MAX_CH];
    for (unsigned j = 0; j < nch; j++) {
        pg_reg row = pgv_add(k, PG_U32, r0, pg_u32(j * rstep));
        rin[j] = pgv_setp(k, PG_CMP_LT, PG_U32, row, nvalid);
        sp[j] = j ? pgv_add(k, PG_U64, sp[j - 1], jstep) : s0;
        for (unsigned e = 0; e < 8; e++)
            x[j][e] = pgk_zero_f32(k);
    }
    pg_label scalar = pg_label_new(k, "stage_scalar"), done = pg_label_new(k, "staged");
    pg_bra_if(k, f->vec, true, scalar);
    for (unsigned j = 0; j < nch; j++) {
        pg_guard(k, pgv_and(k, PG_PRED, rin[j], in0), false);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, sp[j], 0, x[j]);
        pg_guard(k, pgv_and(k, PG_PRED, rin[j], in1), false);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, sp[j], 16, x[j] + 4);
    }
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    /* a column's test is the same on every row: made once */
    pg_reg cin[8];
    for (unsigned e = 0; e < 8; e++)
        cin[e] = pgv_setp(k, PG_CMP_LT, PG_U32, pgv_add(k, PG_U32, col, pg_u32(e)), f->dim);
    for (unsigned j = 0; j < nch; j++)
        for (unsigned e = 0; e < 8; e++) {
            pg_guard(k, pgv_and(k, PG_PRED, rin[j], cin[e]), false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, sp[j], 4 * e, x[j][e]);
        }
    pg_label_bind(k, done);
    for (unsigned j = 0; j < nch; j++) {
        pg_val w[4];
        for (unsigned e = 0; e < 4; e++)
            w[e] = pgv_cvt_pack(k, PG_BF16, x[j][2 * e], x[j][2 * e + 1]);
        if (rstep % 8 && j % 2)
            pg_st_v(k, PG_SPACE_SHARED, PG_B32, 4, d4, (int64_t)((j - 1) * rstep * f->rb), w);
        else
            pg_st_v(k, PG_SPACE_SHARED, PG_B32, 4, d0, (int64_t)(j * rstep * f->rb), w);
    }
}

void pgk_fa_zero_acc(pg_kernel *k, pg_reg (*acc)[4], unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned e = 0; e < 4; e++)
            acc[i][e] = pgk_zero_f32(k);
}

/* acc[nt] (16 x 8 tiles, nt < 2 npairs) += A (16 x dp, rows at `a`, an
 * r-major tile address of this warp's rows) times B^T, B the r-major tile
 * at `b` (8-column tiles = its rows n0 ..): S = Q K^T and its kin. */
void pgk_fa_mma_abt(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_reg a, pg_reg b,
                    unsigned npairs)
{
    for (unsigned s = 0; s < f->dp / 16; s++) {
        pg_reg af[4], bf[4];
        for (unsigned e = 0; e < 4; e++)
            af[e] = pg_reg_new(k, PG_B32);
        pg_ldmatrix(k, 4, false, af, pgv_add(k, PG_U32, a, f->offa[s]), 0);
        pg_reg bb = pgv_add(k, PG_U32, b, f->offb[s]);
        for (unsigned pr = 0; pr < npairs; pr++) {
            for (unsigned e = 0; e < 4; e++)
                bf[e] = pg_reg_new(k, PG_B32);
            pg_ldmatrix(k, 4, false, bf, bb, (int64_t)(pr * 16 * f->rb));
            pg_mma_m16n8k16_bf16_f32(k, acc[2 * pr], af, bf, acc[2 * pr]);
            pg_mma_m16n8k16_bf16_f32(k, acc[2 * pr + 1], af, bf + 2, acc[2 * pr + 1]);
        }
    }
}

/* acc[nt] (nt < dp / 8) += P B, P (16 x 16 ksteps) given by the f32
 * accumulator tiles p[2 j], p[2 j + 1] of k-step j, rounded to bf16; B the
 * tile at b whose rows run along k (ldmatrix.trans). */
void pgk_fa_mma_pb(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_reg (*p)[4], unsigned ksteps,
                   pg_reg b)
{
    for (unsigned j = 0; j < ksteps; j++) {
        pg_reg af[4];
        for (unsigned q = 0; q < 4; q++) /* row g, then g + 8, of tile 2j, then of 2j + 1 */
            af[q] = pgv_cvt_pack(k, PG_BF16, p[2 * j + q / 2][2 * (q % 2)],
                                 p[2 * j + q / 2][2 * (q % 2) + 1]);
        for (unsigned pr = 0; pr < f->dp / 16; pr++) {
            pg_reg bf[4];
            for (unsigned e = 0; e < 4; e++)
                bf[e] = pg_reg_new(k, PG_B32);
            pg_ldmatrix(k, 4, true, bf, pgv_add(k, PG_U32, b, f->offa[pr]),
                        (int64_t)(j * 16 * f->rb));
            pg_mma_m16n8k16_bf16_f32(k, acc[2 * pr], af, bf, acc[2 * pr]);
            pg_mma_m16n8k16_bf16_f32(k, acc[2 * pr + 1], af, bf + 2, acc[2 * pr + 1]);
        }
    }
}

pg_reg pgk_fa_quad_reduce(pg_kernel *k, pg_reduce_op op, pg_reg v)
{
    pg_reg r = pgv_mov(k, PG_F32, v);
    for (unsigned o = 1; o <= 2; o <<= 1) {
        pg_reg t = pg_reg_new(k, PG_F32);
        pg_shfl(k, PG_SHFL_BFLY, t, pg_none(), r, pg_u32(o), pg_u32(31), pg_u32(0xffffffffu));
        if (op == PG_REDUCE_MAX)
            pg_max(k, PG_F32, r, r, t);
        else
            pg_add(k, PG_F32, r, r, t);
    }
    return r;
}

/* Masks (to -inf) the elements of the accumulator tiles s[nt] whose column
 * col0 + 8 nt + 2 t4 + e passes row row0 + g + 8 h (col > row: a key after
 * the query), or, with `transposed`, whose row passes its column. */
void pgk_fa_causal_mask(pg_kernel *k, const fa *f, pg_reg (*s)[4], unsigned ntiles, pg_val row0,
                        pg_val col0, bool transposed)
{
    pg_reg rbase = pgv_add(k, PG_U32, row0, f->g);
    pg_reg cbase = pgv_mad(k, PG_U32, f->t4, pg_u32(2), col0);
    for (unsigned h = 0; h < 2; h++) {
        pg_reg row = pgv_add(k, PG_U32, rbase, pg_u32(8 * h));
        for (unsigned nt = 0; nt < ntiles; nt++)
            for (unsigned e = 0; e < 2; e++) {
                pg_reg col = pgv_add(k, PG_U32, cbase, pg_u32(8 * nt + e));
                pg_reg m = transposed ? pgv_setp(k, PG_CMP_LT, PG_U32, col, row)
                                      : pgv_setp(k, PG_CMP_GT, PG_U32, col, row);
                pg_selp(k, PG_F32, s[nt][2 * h + e], pg_f32(-INFINITY), s[nt][2 * h + e], m);
            }
    }
}

void pgk_fa_doc_mask(pg_kernel *k, const fa *f, pg_reg (*s)[4], unsigned ntiles, pg_val row0,
                     pg_val col0, const pg_reg *ds, bool transposed)
{
    pg_reg rbase = transposed ? pgv_add(k, PG_U32, row0, f->g) : pg_none();
    pg_reg cbase = transposed ? pg_none() : pgv_mad(k, PG_U32, f->t4, pg_u32(2), col0);
    for (unsigned h = 0; h < 2; h++) {
        pg_reg row = transposed ? pgv_add(k, PG_U32, rbase, pg_u32(8 * h)) : pg_none();
        for (unsigned nt = 0; nt < ntiles; nt++)
            for (unsigned e = 0; e < 2; e++) {
                pg_reg m;
                if (transposed) {
                    m = pgv_setp(k, PG_CMP_LT, PG_U32, row, ds[2 * nt + e]);
                } else {
                    pg_reg col = pgv_add(k, PG_U32, cbase, pg_u32(8 * nt + e));
                    m = pgv_setp(k, PG_CMP_LT, PG_U32, col, ds[h]);
                }
                pg_selp(k, PG_F32, s[nt][2 * h + e], pg_f32(-INFINITY), s[nt][2 * h + e], m);
            }
    }
}

void pgk_fa_scores(pg_kernel *k, const fa *f, pg_reg (*s)[4], pg_reg sqw, pg_reg sk, pg_reg kt,
                   pg_reg qt, pg_reg wrow, const fa_docs *docs)
{
    pgk_fa_zero_acc(k, s, FA_KEYS / 8);
    pgk_fa_mma_abt(k, f, s, sqw, sk, FA_KEYS / 16);
    pg_label nomask = pg_label_new(k, "off_diagonal");
    pg_bra_if(k, pgv_setp(k, PG_CMP_LT, PG_U32, kt, qt), false, nomask);
    pgk_fa_causal_mask(k, f, s, FA_KEYS / 8, wrow, pg_u32(0), false);
    pg_label_bind(k, nomask);
    if (docs) {
        pg_comment(k, "docs: a tile from the block's last document start on has no key to mask");
        pg_label inside = pg_label_new(k, "inside_documents");
        pg_reg k0 = pgv_shl(k, PG_B32, kt, pg_u32(6));
        pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, k0, docs->last), false, inside);
        pgk_fa_doc_mask(k, f, s, FA_KEYS / 8, pg_none(), k0, docs->ds, false);
        pg_label_bind(k, inside);
    }
}

fa_qblock pgk_fa_query_block(pg_kernel *k, const fa *f)
{
    fa_qblock q;
    pg_comment(k, "block (x, h, b): query tile qt = tiles - 1 - x (the longest first)");
    pg_reg ntiles = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, f->seq, pg_u32(FA_ROWS - 1)), pg_u32(6));
    pg_reg cx = pg_sreg_read(k, PG_SREG_CTAID_X);
    q.qt = pgv_sub(k, PG_U32, pgv_sub(k, PG_U32, ntiles, pg_u32(1)), cx);
    q.h = pg_sreg_read(k, PG_SREG_CTAID_Y);
    q.b = pg_sreg_read(k, PG_SREG_CTAID_Z);
    q.q0 = pgv_shl(k, PG_B32, q.qt, pg_u32(6));
    q.kvh = pgv_div(k, PG_U32, q.h, f->group);
    q.qstride = pgk_fa_token_stride(k, f, f->hq);
    q.kstride = pgk_fa_token_stride(k, f, f->hkv);
    q.qrows = pgv_sub(k, PG_U32, f->seq, q.q0);
    return q;
}

fa_docs pgk_fa_docs_of(pg_kernel *k, const fa *f, pg_reg DS, const fa_qblock *q)
{
    fa_docs d;
    pg_comment(k, "docs: key tiles from doc_start[q0] / 64; the last row's and the lane's rows' "
                  "doc_start");
    pg_reg bs = pgv_mul(k, PG_U32, q->b, f->seq);
    d.row = pgk_elem_addr(k, DS, bs, 4);
    pg_reg first = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_addr_add(k, d.row, q->q0, 4), 0);
    d.kt0 = pgv_shr(k, PG_U32, first, pg_u32(6));
    pg_reg lastrow = pgv_add(k, PG_U32, q->q0, pg_u32(FA_ROWS - 1));
    pg_reg seq1 = pgv_sub(k, PG_U32, f->seq, pg_u32(1));
    pg_min(k, PG_U32, lastrow, lastrow, seq1);
    d.last = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_addr_add(k, d.row, lastrow, 4), 0);
    pg_reg rbase = pgv_mad(k, PG_U32, f->warp, pg_u32(16), q->q0);
    pg_add(k, PG_U32, rbase, rbase, f->g);
    for (unsigned h = 0; h < 2; h++) {
        pg_reg r = pgv_add(k, PG_U32, rbase, pg_u32(8 * h));
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, r, f->seq);
        pg_reg at = pgk_addr_add(k, d.row, r, 4);
        d.ds[h] = pgv_mov(k, PG_U32, pg_u32(0));
        pg_guard(k, rin, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_U32, at, 0, d.ds[h]);
    }
    return d;
}

/* Store the warp's 16 x dp f32 accumulators to rows row0 + g (+ 8) of a
 * head at base (element (token row0, head, 0)), `stride` bytes a token,
 * rows below nvalid, columns below D: as f32 (scaled by mul unless none)
 * or rounded to bf16. */
static void store_rows(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_val mul, pg_reg base,
                       pg_reg stride, pg_reg row0, pg_reg nvalid, bool bf16)
{
    const unsigned esize = bf16 ? 2 : 4;
    pg_reg d2 = pgv_and(k, PG_B32, f->dim, pg_u32(1));
    /* a pair of columns in one store needs 2 x esize alignment */
    pg_reg low = pgv_and(k, PG_B64, base, pg_u64(2 * esize - 1));
    pg_reg aligned = pgv_setp(k, PG_CMP_EQ, PG_U64, low, pg_u64(0));
    pg_reg even = pgv_setp(k, PG_CMP_EQ, PG_U32, d2, pg_u32(0));
    pg_reg vec = pgv_and(k, PG_PRED, even, aligned);
    pg_reg colbase = pgv_shl(k, PG_B32, f->t4, pg_u32(1));
    /* A column's tests and offset are the same on both rows: made once.
     * The pair goes in one store where both columns are inside and
     * aligned, else each inside column on its own (cpart). */
    const unsigned ntiles = f->dp / 8;
    pg_reg cin[FA_MAX_NT][2], cfull[FA_MAX_NT], cpart[FA_MAX_NT][2], coff[FA_MAX_NT];
    for (unsigned nt = 0; nt < ntiles; nt++) {
        pg_reg col = pgv_add(k, PG_U32, colbase, pg_u32(8 * nt));
        cin[nt][0] = pgv_setp(k, PG_CMP_LT, PG_U32, col, f->dim);
        cin[nt][1] = pgv_setp(k, PG_CMP_LT, PG_U32, pgv_add(k, PG_U32, col, pg_u32(1)), f->dim);
        cfull[nt] = pgv_and(k, PG_PRED, cin[nt][1], vec);
        pg_reg single = pgv_not(k, PG_PRED, cfull[nt]);
        for (unsigned e = 0; e < 2; e++)
            cpart[nt][e] = pgv_and(k, PG_PRED, single, cin[nt][e]);
        coff[nt] = pgv_mul_wide(k, PG_U32, col, pg_u32(esize));
    }
    for (unsigned h = 0; h < 2; h++) {
        pg_reg r = pgv_add(k, PG_U32, row0, pgv_add(k, PG_U32, f->g, pg_u32(8 * h)));
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, r, nvalid);
        pg_reg r64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, r);
        pg_reg rowp = pgv_add(k, PG_U64, base, pgv_mul(k, PG_U64, r64, stride));
        for (unsigned nt = 0; nt < ntiles; nt++) {
            pg_reg addr = pgv_add(k, PG_U64, rowp, coff[nt]);
            if (bf16) {
                pg_reg lo = acc[nt][2 * h], hi = acc[nt][2 * h + 1];
                pg_reg pair = pgv_cvt_pack(k, PG_BF16, lo, hi);
                pg_guard(k, pgv_and(k, PG_PRED, rin, cfull[nt]), false);
                pg_st(k, PG_SPACE_GLOBAL, PG_B32, addr, 0, pair);
                for (unsigned e = 0; e < 2; e++) {
                    pg_reg x = pgv_cvt(k, PG_BF16, PG_F32, PG_RND_RN, e ? hi : lo);
                    pg_guard(k, pgv_and(k, PG_PRED, rin, cpart[nt][e]), false);
                    pg_st(k, PG_SPACE_GLOBAL, PG_BF16, addr, 2 * e, x);
                }
                continue;
            }
            pg_val v[2];
            for (unsigned e = 0; e < 2; e++) {
                pg_reg x = acc[nt][2 * h + e];
                v[e] = mul.kind == PG_VAL_NONE ? x : pgv_mul(k, PG_F32, x, mul);
            }
            pg_guard(k, pgv_and(k, PG_PRED, rin, cfull[nt]), false);
            pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, addr, 0, v);
            for (unsigned e = 0; e < 2; e++) {
                pg_guard(k, pgv_and(k, PG_PRED, rin, cpart[nt][e]), false);
                pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, e * 4, v[e]);
            }
        }
    }
}

void pgk_fa_store_rows(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_val mul, pg_reg base,
                       pg_reg stride, pg_reg row0, pg_reg nvalid)
{
    store_rows(k, f, acc, mul, base, stride, row0, nvalid, false);
}

void pgk_fa_store_rows_bf16(pg_kernel *k, const fa *f, pg_reg (*acc)[4], pg_reg base,
                            pg_reg stride, pg_reg row0, pg_reg nvalid)
{
    store_rows(k, f, acc, pg_none(), base, stride, row0, nvalid, true);
}

pg_reg pgk_fa_key_tiles(pg_kernel *k, const fa *f, pgk_loop *L, pg_val kt0, pg_reg qt, pg_reg sk,
                        pg_reg sv, pg_reg kp, pg_reg vp, pg_reg kstride, pg_reg kstep)
{
    pg_reg kt = pgk_loop_begin(k, L, kt0, pgv_add(k, PG_U32, qt, pg_u32(1)), pg_u32(1));
    pg_reg k0 = pgv_shl(k, PG_B32, kt, pg_u32(6));
    pg_reg krows = pgv_sub(k, PG_U32, f->seq, k0);
    pgk_fa_stage(k, f, sk, kp, kstride, krows, FA_KEYS, 32 * FA_WARPS, f->tid);
    pgk_fa_stage(k, f, sv, vp, kstride, krows, FA_KEYS, 32 * FA_WARPS, f->tid);
    pg_add(k, PG_U64, kp, kp, kstep);
    pg_add(k, PG_U64, vp, vp, kstep);
    pg_bar_sync(k, 0);
    return kt;
}

/* ---------------------------------------------------------------- forward */

/* docs: the _docs kernel, doc_start its last param. */
static int build_fwd(pg_kernel *k, const pg_param *p, unsigned dp, bool docs)
{
    pg_kernel_set_maxntid(k, 32 * FA_WARPS, 1, 1);
    pg_shared smem = pg_shared_dynamic(k, 128);
    pg_label done = pg_label_new(k, "exit");
    pg_reg Q = pg_param_load(k, p[0]), K = pg_param_load(k, p[1]), V = pg_param_load(k, p[2]);
    pg_reg O = pg_param_load(k, p[3]), LSE = pg_param_load(k, p[4]);
    fa f;
    pgk_fa_init(k, &f, p, 5, dp, done);
    pg_reg DS = docs ? pg_param_load(k, p[PGK_ATT_DOC_START_FWD]) : pg_none();
    pg_reg bases[] = {Q, K, V};
    pgk_fa_vec(k, &f, bases, 3);
    const unsigned tile = FA_ROWS * f.rb;
    pg_reg sq = pgv_mov(k, PG_U32, pg_shared_addr(smem));
    pg_reg sk = pgv_add(k, PG_U32, sq, pg_u32(tile)), sv = pgv_add(k, PG_U32, sq, pg_u32(2 * tile));

    const fa_qblock blk = pgk_fa_query_block(k, &f);
    pg_reg qt = blk.qt, q0 = blk.q0, qrows = blk.qrows, h = blk.h, kvh = blk.kvh, b = blk.b;
    pg_reg qstride = blk.qstride, kstride = blk.kstride;
    pgk_fa_stage(k, &f, sq, pgk_fa_head_row(k, &f, Q, b, q0, f.hq, h), qstride, qrows, FA_ROWS,
                 32 * FA_WARPS, f.tid);
    fa_docs dd;
    pg_val kt0 = pg_u32(0), kfirst = pg_u32(0);
    if (docs) {
        dd = pgk_fa_docs_of(k, &f, DS, &blk);
        kt0 = dd.kt0;
        kfirst = pgv_shl(k, PG_B32, dd.kt0, pg_u32(6));
    }
    pg_reg kp = pgk_fa_head_row(k, &f, K, b, kfirst, f.hkv, kvh);
    pg_reg vp = pgk_fa_head_row(k, &f, V, b, kfirst, f.hkv, kvh);
    pg_reg kstep = pgv_mul(k, PG_U64, kstride, pg_u64(FA_KEYS));
    pg_reg wrow = pgv_mul(k, PG_U32, f.warp, pg_u32(16));
    pg_reg sqw = pgv_mad(k, PG_U32, wrow, pg_u32(f.rb), sq);

    pg_reg o[FA_MAX_NT][4], m[2], l[2];
    pgk_fa_zero_acc(k, o, dp / 8);
    for (unsigned i = 0; i < 2; i++) {
        m[i] = pgk_f32_const(k, -INFINITY);
        l[i] = pgk_zero_f32(k);
    }
    pg_comment(k, docs ? "key tiles doc_start[q0] / 64 .. qt" : "key tiles 0 .. qt");
    pgk_loop L;
    pg_reg kt = pgk_fa_key_tiles(k, &f, &L, kt0, qt, sk, sv, kp, vp, kstride, kstep);

    pg_reg s[FA_KEYS / 8][4];
    pgk_fa_scores(k, &f, s, sqw, sk, kt, qt, wrow, docs ? &dd : NULL);

    pg_comment(k, "online softmax, base 2: p = 2^(s c - m c)");
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_reg mx = pgv_mov(k, PG_F32, s[0][2 * hh]);
        for (unsigned nt = 0; nt < FA_KEYS / 8; nt++)
            for (unsigned e = 0; e < 2; e++)
                if (nt || e)
                    pg_max(k, PG_F32, mx, mx, s[nt][2 * hh + e]);
        mx = pgk_fa_quad_reduce(k, PG_REDUCE_MAX, mx);
        pg_reg mn = pgv_max(k, PG_F32, m[hh], mx);
        pg_reg mc = pgv_mul(k, PG_F32, mn, f.c);
        if (docs) {
            /* a row with no key yet (its document starts past this tile):
             * m stays -inf, and p and the correction 2^-inf = 0, not NaN */
            pg_reg none = pgv_setp(k, PG_CMP_EQ, PG_F32, mn, pg_f32(-INFINITY));
            pg_selp(k, PG_F32, mc, pg_f32(0.0f), mc, none);
        }
        pg_reg corr = pgv_ex2(k, PG_F32, pgv_sub(k, PG_F32, pgv_mul(k, PG_F32, m[hh], f.c), mc));
        pg_reg nmc = pgv_neg(k, PG_F32, mc);
        pg_reg sum = pgk_zero_f32(k);
        for (unsigned nt = 0; nt < FA_KEYS / 8; nt++)
            for (unsigned e = 0; e < 2; e++) {
                pg_reg x = s[nt][2 * hh + e];
                pg_ex2(k, PG_F32, x, pgv_fma(k, PG_F32, x, f.c, nmc));
                pg_add(k, PG_F32, sum, sum, x);
            }
        pg_fma(k, PG_F32, l[hh], l[hh], corr, sum);
        for (unsigned nt = 0; nt < dp / 8; nt++)
            for (unsigned e = 0; e < 2; e++)
                pg_mul(k, PG_F32, o[nt][2 * hh + e], o[nt][2 * hh + e], corr);
        pg_mov(k, PG_F32, m[hh], mn);
    }
    pgk_fa_mma_pb(k, &f, o, s, FA_KEYS / 16, sv);
    pg_bar_sync(k, 0);
    pgk_loop_end(k, &L);

    pg_comment(k, "O = acc / l; LSE = m scale + ln l");
    pg_reg inv[2];
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_mov(k, PG_F32, l[hh], pgk_fa_quad_reduce(k, PG_REDUCE_SUM, l[hh]));
        inv[hh] = pgv_rcp(k, PG_F32, l[hh]);
        for (unsigned nt = 0; nt < dp / 8; nt++)
            for (unsigned e = 0; e < 2; e++)
                pg_mul(k, PG_F32, o[nt][2 * hh + e], o[nt][2 * hh + e], inv[hh]);
    }
    pg_reg rowq = pgv_add(k, PG_U32, q0, wrow);
    pgk_fa_store_rows(k, &f, o, pg_none(), pgk_fa_head_row(k, &f, O, b, q0, f.hq, h), qstride, wrow,
                      qrows);
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, f.t4, pg_u32(0));
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_reg r = pgv_add(k, PG_U32, rowq, pgv_add(k, PG_U32, f.g, pg_u32(8 * hh)));
        pg_reg ok = pgv_and(k, PG_PRED, first, pgv_setp(k, PG_CMP_LT, PG_U32, r, f.seq));
        pg_reg lse = pgv_mul(k, PG_F32, pgv_lg2(k, PG_F32, l[hh]), pg_f32(LN2));
        pg_fma(k, PG_F32, lse, m[hh], f.scale, lse);
        pg_reg idx = pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, b, f.seq, r), f.hq, h);
        pg_reg at = pgk_elem_addr(k, LSE, idx, 4);
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, at, 0, lse);
    }
    return pgk_finish(k, done);
}

/* ---------------------------------------------------------------- descriptors */

int pgk_fa_launch(const uint32_t *kn, uint32_t rows, uint32_t threads, uint32_t shared,
                  pgk_launch *out)
{
    if (kn[KN_BATCH] == 0 || kn[KN_SEQ] == 0 || kn[KN_HEADS] == 0 || kn[KN_DIM] == 0 ||
        kn[KN_DIM] > FA_MAX_D || kn[KN_BATCH] > 65535 || kn[KN_HEADS] > 65535)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(kn[KN_SEQ], rows), kn[KN_HEADS], kn[KN_BATCH]},
                        {threads, 1, 1},
                        shared,
                        {0, 0, 0}};
    return PG_OK;
}

static int launch_fwd(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    unsigned rb = 2 * dp_of(kn[KN_DIM]);
    return pgk_fa_launch(kn, FA_ROWS, 32 * FA_WARPS, 3 * FA_ROWS * rb, out);
}

static int fwd_b(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_fwd(k, p, dp_of(kn[KN_DIM]), false);
}
static int fwd_docs_b(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_fwd(k, p, dp_of(kn[KN_DIM]), true);
}

/* head_dim is baked: it picks the padded width (64 for 1..64, 128 above). */
const pgk_knob pgk_fa_q_knobs[FA_NKNOBS] = {
    {"batch", 4, 1, 1000, "sequences", false},
    {"seq_len", 512, 1, 131072, "tokens a sequence", false},
    {"q_heads", 12, 1, 128, "query heads (a block a 64-row query tile and head)", false},
    {"head_dim", 128, 1, FA_MAX_D, "elements a head (tiles padded to 64 or 128)", true},
};

const pgk_desc pgk_desc_attention_mma_forward = {
    .name = "attention_mma_forward",
    .summary = "causal GQA attention O and row logsumexp on mma.sync (f32 in/out, bf16 operands)",
    PGK_PARAMS(pgk_attention_fwd_params),
    PGK_KNOBS(pgk_fa_q_knobs),
    .min_target = PG_SM_80,
    .build = fwd_b,
    .launch = launch_fwd,
};
const pgk_desc pgk_desc_attention_mma_forward_docs = {
    .name = "attention_mma_forward_docs",
    .summary = "document-bounded causal GQA attention O and row logsumexp on mma.sync (f32 in/out)",
    PGK_PARAMS(pgk_attention_fwd_docs_params),
    PGK_KNOBS(pgk_fa_q_knobs),
    .min_target = PG_SM_80,
    .build = fwd_docs_b,
    .launch = launch_fwd,
};
