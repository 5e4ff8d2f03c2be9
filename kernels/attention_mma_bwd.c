/* SPDX-License-Identifier: MIT */
/*
 * The backward kernels of the tensor-core attention (attention_mma.c has
 * the scheme, the shared tile helpers and the forward kernel): dQ with
 * delta = rowsum(dO * O), then dK and dV, and their descriptors.
 */
#include "attention_mma.h"

#include <math.h>

/* ---------------------------------------------------------------- backward: dQ and delta */

/* docs: the _docs kernel, doc_start its last param. */
static int build_dq(pg_kernel *k, const pg_param *p, unsigned dp, bool docs)
{
    pg_kernel_set_maxntid(k, 32 * FA_WARPS, 1, 1);
    pg_shared smem = pg_shared_dynamic(k, 128);
    pg_label done = pg_label_new(k, "exit");
    pg_reg Q = pg_param_load(k, p[0]), K = pg_param_load(k, p[1]), V = pg_param_load(k, p[2]);
    pg_reg O = pg_param_load(k, p[3]), dO = pg_param_load(k, p[4]), LSE = pg_param_load(k, p[5]);
    pg_reg dQ = pg_param_load(k, p[6]), DELTA = pg_param_load(k, p[7]);
    fa f;
    pgk_fa_init(k, &f, p, 8, dp, done);
    pg_reg DS = docs ? pg_param_load(k, p[PGK_ATT_DOC_START_GRAD]) : pg_none();
    pg_reg bases[] = {Q, K, V, dO};
    pgk_fa_vec(k, &f, bases, 4);
    const unsigned tile = FA_ROWS * f.rb;
    pg_reg sq = pgv_mov(k, PG_U32, pg_shared_addr(smem));
    pg_reg sdo = pgv_add(k, PG_U32, sq, pg_u32(tile));
    pg_reg sk = pgv_add(k, PG_U32, sq, pg_u32(2 * tile));
    pg_reg sv = pgv_add(k, PG_U32, sq, pg_u32(3 * tile));
    pg_reg sdel = pgv_add(k, PG_U32, sq, pg_u32(4 * tile));

    const fa_qblock blk = pgk_fa_query_block(k, &f);
    pg_reg qt = blk.qt, q0 = blk.q0, qrows = blk.qrows, h = blk.h, kvh = blk.kvh, b = blk.b;
    pg_reg qstride = blk.qstride, kstride = blk.kstride;
    pg_reg qp = pgk_fa_head_row(k, &f, Q, b, q0, f.hq, h),
           dop = pgk_fa_head_row(k, &f, dO, b, q0, f.hq, h);
    pgk_fa_stage(k, &f, sq, qp, qstride, qrows, FA_ROWS, 32 * FA_WARPS, f.tid);
    pgk_fa_stage(k, &f, sdo, dop, qstride, qrows, FA_ROWS, 32 * FA_WARPS, f.tid);
    pg_reg wrow = pgv_mul(k, PG_U32, f.warp, pg_u32(16));

    pg_comment(k, "delta = rowsum(dO * O) in f32, a warp reduction a row (lanes along D)");
    pg_reg op = pgk_fa_head_row(k, &f, O, b, q0, f.hq, h);
    pg_reg lanecol[FA_MAX_D / 32], lanein[FA_MAX_D / 32];
    for (unsigned i = 0; i < dp / 32; i++) {
        pg_reg c = pgv_add(k, PG_U32, f.lane, pg_u32(32 * i));
        lanein[i] = pgv_setp(k, PG_CMP_LT, PG_U32, c, f.dim);
        lanecol[i] = pgv_mul_wide(k, PG_U32, c, pg_u32(4));
    }
    pg_reg lane0 = pgv_setp(k, PG_CMP_EQ, PG_U32, f.lane, pg_u32(0));
    for (unsigned r = 0; r < 16; r++) {
        pg_reg lr = pgv_add(k, PG_U32, wrow, pg_u32(r));
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, lr, qrows);
        pg_reg roff = pgv_mul(k, PG_U64, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, lr), qstride);
        pg_reg sum = pgk_zero_f32(k);
        for (unsigned i = 0; i < dp / 32; i++) {
            pg_reg off = pgv_add(k, PG_U64, roff, lanecol[i]);
            pg_reg ok = pgv_and(k, PG_PRED, rin, lanein[i]);
            pg_reg a = pgk_zero_f32(k), c = pgk_zero_f32(k);
            pg_reg pa = pgv_add(k, PG_U64, op, off), pc = pgv_add(k, PG_U64, dop, off);
            pg_guard(k, ok, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, pa, 0, a);
            pg_guard(k, ok, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, pc, 0, c);
            pg_fma(k, PG_F32, sum, a, c, sum);
        }
        pg_reg delta = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, sum);
        pg_reg sat = pgv_mad(k, PG_U32, lr, pg_u32(4), sdel);
        pg_guard(k, lane0, false);
        pg_st(k, PG_SPACE_SHARED, PG_F32, sat, 0, delta);
        pg_reg row = pgv_add(k, PG_U32, q0, lr);
        pg_reg idx = pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, b, f.seq, row), f.hq, h);
        pg_reg at = pgk_elem_addr(k, DELTA, idx, 4);
        pg_guard(k, pgv_and(k, PG_PRED, lane0, rin), false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, at, 0, delta);
    }
    pg_bar_sync(k, 0);
    pg_comment(k, "the lane's rows g, g + 8: -LSE log2 e and delta");
    pg_reg nl[2], dl[2];
    for (unsigned hh = 0; hh < 2; hh++) {
        pg_reg lr = pgv_add(k, PG_U32, wrow, pgv_add(k, PG_U32, f.g, pg_u32(8 * hh)));
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, lr, qrows);
        pg_reg row = pgv_add(k, PG_U32, q0, lr);
        pg_reg idx = pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, b, f.seq, row), f.hq, h);
        pg_reg at = pgk_elem_addr(k, LSE, idx, 4);
        pg_reg lse = pgk_zero_f32(k);
        pg_guard(k, rin, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, at, 0, lse);
        nl[hh] = pgv_mul(k, PG_F32, lse, pg_f32(-LOG2E));
        dl[hh] = pgv_ld(k, PG_SPACE_SHARED, PG_F32, pgv_mad(k, PG_U32, lr, pg_u32(4), sdel), 0);
    }

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
    pg_reg sqw = pgv_mad(k, PG_U32, wrow, pg_u32(f.rb), sq);
    pg_reg sdow = pgv_mad(k, PG_U32, wrow, pg_u32(f.rb), sdo);
    pg_reg dq[FA_MAX_NT][4];
    pgk_fa_zero_acc(k, dq, dp / 8);
    pg_comment(k, docs ? "key tiles doc_start[q0] / 64 .. qt: P, dP = dO V^T, dS = P (dP - delta), "
                         "dQ += dS K"
                       : "key tiles 0 .. qt: P, dP = dO V^T, dS = P (dP - delta), dQ += dS K");
    pgk_loop L;
    pg_reg kt = pgk_fa_key_tiles(k, &f, &L, kt0, qt, sk, sv, kp, vp, kstride, kstep);

    pg_reg s[FA_KEYS / 8][4], dpv[FA_KEYS / 8][4];
    pgk_fa_scores(k, &f, s, sqw, sk, kt, qt, wrow, docs ? &dd : NULL);
    for (unsigned nt = 0; nt < FA_KEYS / 8; nt++)
        for (unsigned e = 0; e < 4; e++)
            pg_ex2(k, PG_F32, s[nt][e], pgv_fma(k, PG_F32, s[nt][e], f.c, nl[e / 2]));
    pgk_fa_zero_acc(k, dpv, FA_KEYS / 8);
    pgk_fa_mma_abt(k, &f, dpv, sdow, sv, FA_KEYS / 16);
    for (unsigned nt = 0; nt < FA_KEYS / 8; nt++)
        for (unsigned e = 0; e < 4; e++) {
            pg_sub(k, PG_F32, dpv[nt][e], dpv[nt][e], dl[e / 2]);
            pg_mul(k, PG_F32, s[nt][e], s[nt][e], dpv[nt][e]);
        }
    pgk_fa_mma_pb(k, &f, dq, s, FA_KEYS / 16, sk);
    pg_bar_sync(k, 0);
    pgk_loop_end(k, &L);

    pgk_fa_store_rows(k, &f, dq, f.scale, pgk_fa_head_row(k, &f, dQ, b, q0, f.hq, h), qstride, wrow,
                      qrows);
    return pgk_finish(k, done);
}

/* ---------------------------------------------------------------- backward: dK and dV */

/* Where one pair's step works: the block's keys and the warp's rows of
 * them, the query tile, the group's staged tiles and stats in shared
 * memory, and (docs) the batch row's doc_start. */
typedef struct dkv_tile {
    pg_reg k0, wrow, q0;
    pg_reg skw, svw;       /* the warp's K and V rows */
    pg_reg sqg, sdog;      /* the group's Q and dO tiles */
    pg_reg slg, sdg;       /* the group's -LSE log2 e and delta */
    pg_reg dsrow;
    bool docs;
} dkv_tile;

/* Threads 0..31 of the group: the query tile's -LSE log2 e (-inf past S)
 * and delta (0 past S) into the group's stats in shared memory. */
static void dkv_stats(pg_kernel *k, const fa *f, pg_reg LSE, pg_reg DELTA, pg_reg b, pg_reg h,
                      pg_reg q0, pg_reg gtid, pg_reg slg, pg_reg sdg)
{
    pg_comment(k, "threads 0..31 of the group: -LSE log2 e (-inf past S) and delta (0)");
    pg_label past = pg_label_new(k, "stats_done");
    pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, gtid, pg_u32(DKV_QROWS)), false, past);
    pg_reg row = pgv_add(k, PG_U32, q0, gtid);
    pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, row, f->seq);
    pg_reg ri = pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, b, f->seq, row), f->hq, h);
    pg_reg lse = pgk_f32_const(k, INFINITY), del = pgk_zero_f32(k);
    pg_reg la = pgk_elem_addr(k, LSE, ri, 4), da = pgk_elem_addr(k, DELTA, ri, 4);
    pg_guard(k, rin, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, la, 0, lse);
    pg_guard(k, rin, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, da, 0, del);
    pg_reg so = pgv_shl(k, PG_B32, gtid, pg_u32(2));
    pg_reg nl = pgv_mul(k, PG_F32, lse, pg_f32(-LOG2E));
    pg_st(k, PG_SPACE_SHARED, PG_F32, pgv_add(k, PG_U32, slg, so), 0, nl);
    pg_st(k, PG_SPACE_SHARED, PG_F32, pgv_add(k, PG_U32, sdg, so), 0, del);
    pg_label_bind(k, past);
}

/* docs: -inf where the query's document begins after the key (none when
 * the tile's last query's begins by k0). */
static void dkv_doc_mask(pg_kernel *k, const fa *f, pg_reg (*s)[4], const dkv_tile *t)
{
    const unsigned NTQ = DKV_QROWS / 8;
    const pg_reg k0 = t->k0, wrow = t->wrow, q0 = t->q0, dsrow = t->dsrow;
    pg_label inside = pg_label_new(k, "inside_documents");
    pg_reg qlast = pgv_add(k, PG_U32, q0, pg_u32(DKV_QROWS - 1));
    pg_reg seq1 = pgv_sub(k, PG_U32, f->seq, pg_u32(1));
    pg_min(k, PG_U32, qlast, qlast, seq1);
    pg_reg dlast = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_addr_add(k, dsrow, qlast, 4), 0);
    pg_bra_if(k, pgv_setp(k, PG_CMP_LE, PG_U32, dlast, k0), false, inside);
    pg_reg cbase = pgv_mad(k, PG_U32, f->t4, pg_u32(2), q0);
    pg_reg dcol[DKV_QROWS / 4];
    for (unsigned c = 0; c < DKV_QROWS / 4; c++) {
        pg_reg col = pgv_add(k, PG_U32, cbase, pg_u32(8 * (c / 2) + c % 2));
        pg_reg cin = pgv_setp(k, PG_CMP_LT, PG_U32, col, f->seq);
        pg_reg at = pgk_addr_add(k, dsrow, col, 4);
        dcol[c] = pgv_mov(k, PG_U32, pg_u32(0));
        pg_guard(k, cin, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_U32, at, 0, dcol[c]);
    }
    pgk_fa_doc_mask(k, f, s, NTQ, pgv_add(k, PG_U32, k0, wrow), pg_none(), dcol, true);
    pg_label_bind(k, inside);
}

/* One (query tile, head) pair of the block's keys: S^T = K Q^T, the masks,
 * P^T; then dV += P^T dO and dK += dS^T Q, unscaled. */
static void dkv_step(pg_kernel *k, const fa *f, const dkv_tile *t, pg_reg (*dk)[4],
                     pg_reg (*dv)[4])
{
    const pg_reg k0 = t->k0, wrow = t->wrow, q0 = t->q0, skw = t->skw, svw = t->svw;
    const pg_reg sqg = t->sqg, sdog = t->sdog, slg = t->slg, sdg = t->sdg;
    pg_comment(k, "S^T = K Q^T (16 keys x 32 queries a warp), P^T = 2^(s c - LSE log2 e)");
    const unsigned NTQ = DKV_QROWS / 8;
    pg_reg s[DKV_QROWS / 8][4], dpt[DKV_QROWS / 8][4];
    pgk_fa_zero_acc(k, s, NTQ);
    pgk_fa_mma_abt(k, f, s, skw, sqg, NTQ / 2);
    pg_label nomask = pg_label_new(k, "below_diagonal");
    pg_reg kend = pgv_add(k, PG_U32, k0, pg_u32(DKV_KEYS));
    pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, q0, kend), false, nomask);
    pgk_fa_causal_mask(k, f, s, NTQ, pgv_add(k, PG_U32, k0, wrow), q0, true);
    pg_label_bind(k, nomask);
    if (t->docs) {
        pg_comment(k, "docs: -inf where the query's document begins after the key (none "
                      "when the tile's last begins by k0)");
        dkv_doc_mask(k, f, s, t);
    }
    pg_reg cl[DKV_QROWS / 8][2], cd[DKV_QROWS / 8][2];
    pg_reg t8 = pgv_shl(k, PG_B32, f->t4, pg_u32(3));
    pg_reg la = pgv_add(k, PG_U32, slg, t8), da = pgv_add(k, PG_U32, sdg, t8);
    for (unsigned nt = 0; nt < NTQ; nt++) {
        for (unsigned e = 0; e < 2; e++) {
            cl[nt][e] = pg_reg_new(k, PG_F32);
            cd[nt][e] = pg_reg_new(k, PG_F32);
        }
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 2, la, nt * 32, cl[nt]);
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 2, da, nt * 32, cd[nt]);
    }
    for (unsigned nt = 0; nt < NTQ; nt++)
        for (unsigned e = 0; e < 4; e++)
            pg_ex2(k, PG_F32, s[nt][e], pgv_fma(k, PG_F32, s[nt][e], f->c, cl[nt][e % 2]));
    pg_comment(k, "dV += P^T dO; dP^T = V dO^T; dS^T = P^T (dP^T - delta); dK += dS^T Q");
    pgk_fa_mma_pb(k, f, dv, s, NTQ / 2, sdog);
    pgk_fa_zero_acc(k, dpt, NTQ);
    pgk_fa_mma_abt(k, f, dpt, svw, sdog, NTQ / 2);
    for (unsigned nt = 0; nt < NTQ; nt++)
        for (unsigned e = 0; e < 4; e++) {
            pg_sub(k, PG_F32, dpt[nt][e], dpt[nt][e], cd[nt][e % 2]);
            pg_mul(k, PG_F32, s[nt][e], s[nt][e], dpt[nt][e]);
        }
    pgk_fa_mma_pb(k, f, dk, s, NTQ / 2, sqg);
}

/* Groups 1 .. DKV_GROUPS-1 in turn add their dK, dV into group 0's through
 * shared memory (the group order fixes the sum's bits). Returns the
 * predicate of group 0, which stores them. */
static pg_reg dkv_reduce(pg_kernel *k, unsigned dp, pg_reg gi, pg_reg gtid, pg_reg sk,
                         pg_reg (*dk)[4], pg_reg (*dv)[4])
{
    const unsigned GT = 32 * DKV_WARPS;
    pg_comment(k, "groups 1, 2, 3 in turn hand their dK, dV to group 0 through shared memory");
    const unsigned nacc = dp / 8 * 4;
    pg_reg slot = pgv_mad(k, PG_U32, gtid, pg_u32(4), sk);
    pg_reg lead = pgv_setp(k, PG_CMP_EQ, PG_U32, gi, pg_u32(0));
    for (unsigned src = 1; src < DKV_GROUPS; src++) {
        pg_bar_sync(k, 0);
        pg_reg mine = pgv_setp(k, PG_CMP_EQ, PG_U32, gi, pg_u32(src));
        for (unsigned i = 0; i < 2 * nacc; i++) {
            pg_reg x = i < nacc ? dk[i / 4][i % 4] : dv[(i - nacc) / 4][i % 4];
            pg_guard(k, mine, false);
            pg_st(k, PG_SPACE_SHARED, PG_F32, slot, (int64_t)i * GT * 4, x);
        }
        pg_bar_sync(k, 0);
        pg_label skip = pg_label_new(k, "not_lead");
        pg_bra_if(k, lead, true, skip);
        for (unsigned i = 0; i < 2 * nacc; i++) {
            pg_reg x = i < nacc ? dk[i / 4][i % 4] : dv[(i - nacc) / 4][i % 4];
            pg_reg y = pgv_ld(k, PG_SPACE_SHARED, PG_F32, slot, (int64_t)i * GT * 4);
            pg_add(k, PG_F32, x, x, y);
        }
        pg_label_bind(k, skip);
    }
    return lead;
}

/* docs: the _docs kernel, doc_start its last param: the query tiles end
 * at the first whose queries all begin their documents after the block's
 * last key, and a tile with a query whose document begins after the
 * block's first key is masked by doc_start. */
static int build_dkv(pg_kernel *k, const pg_param *p, unsigned dp, bool docs)
{
    const unsigned T = 32 * DKV_WARPS * DKV_GROUPS, GT = 32 * DKV_WARPS;
    pg_kernel_set_maxntid(k, T, 1, 1);
    pg_shared smem = pg_shared_dynamic(k, 128);
    pg_label done = pg_label_new(k, "exit");
    pg_reg Q = pg_param_load(k, p[0]), K = pg_param_load(k, p[1]), V = pg_param_load(k, p[2]);
    pg_reg dO = pg_param_load(k, p[3]), LSE = pg_param_load(k, p[4]);
    pg_reg DELTA = pg_param_load(k, p[5]), dK = pg_param_load(k, p[6]);
    pg_reg dV = pg_param_load(k, p[7]);
    fa f;
    pgk_fa_init(k, &f, p, 8, dp, done);
    pg_reg DS = docs ? pg_param_load(k, p[PGK_ATT_DOC_START_GRAD]) : pg_none();
    pg_reg bases[] = {Q, K, V, dO};
    pgk_fa_vec(k, &f, bases, 4);
    const unsigned ktile = DKV_KEYS * f.rb, qtile = DKV_QROWS * f.rb;
    const unsigned gbytes = 2 * qtile, stats = 2 * ktile + DKV_GROUPS * gbytes;
    pg_reg sk = pgv_mov(k, PG_U32, pg_shared_addr(smem));
    pg_reg sv = pgv_add(k, PG_U32, sk, pg_u32(ktile));

    pg_comment(k, "block (kt, kvh, b): keys k0 = 32 kt ..; group gi = warp / 2");
    pg_reg kt = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg kvh = pg_sreg_read(k, PG_SREG_CTAID_Y), b = pg_sreg_read(k, PG_SREG_CTAID_Z);
    pg_reg k0 = pgv_mul(k, PG_U32, kt, pg_u32(DKV_KEYS));
    pg_reg krows = pgv_sub(k, PG_U32, f.seq, k0);
    pg_reg gi = pgv_shr(k, PG_U32, f.warp, pg_u32(log2u(DKV_WARPS)));
    pg_reg gtid = pgv_and(k, PG_B32, f.tid, pg_u32(GT - 1));
    pg_reg wrow = pgv_mul(k, PG_U32, pgv_and(k, PG_B32, f.warp, pg_u32(DKV_WARPS - 1)),
                          pg_u32(16));
    pg_reg qstride = pgk_fa_token_stride(k, &f, f.hq), kstride = pgk_fa_token_stride(k, &f, f.hkv);
    pg_reg kp = pgk_fa_head_row(k, &f, K, b, k0, f.hkv, kvh),
           vp = pgk_fa_head_row(k, &f, V, b, k0, f.hkv, kvh);
    pgk_fa_stage(k, &f, sk, kp, kstride, krows, DKV_KEYS, T, f.tid);
    pgk_fa_stage(k, &f, sv, vp, kstride, krows, DKV_KEYS, T, f.tid);
    pg_reg sqg = pgv_mad(k, PG_U32, gi, pg_u32(gbytes), pgv_add(k, PG_U32, sk, pg_u32(2 * ktile)));
    pg_reg sdog = pgv_add(k, PG_U32, sqg, pg_u32(qtile));
    pg_reg slg = pgv_mad(k, PG_U32, gi, pg_u32(2 * DKV_QROWS * 4),
                         pgv_add(k, PG_U32, sk, pg_u32(stats)));
    pg_reg sdg = pgv_add(k, PG_U32, slg, pg_u32(DKV_QROWS * 4));
    pg_reg skw = pgv_mad(k, PG_U32, wrow, pg_u32(f.rb), sk);
    pg_reg svw = pgv_mad(k, PG_U32, wrow, pg_u32(f.rb), sv);

    pg_comment(k, "pairs idx = g nqs + (qs - qs0), query tiles of 32 from the diagonal; "
                  "group gi takes idx = 4 it + gi");
    pg_reg nqs = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, f.seq, pg_u32(DKV_QROWS - 1)),
                         pg_u32(log2u(DKV_QROWS)));
    pg_reg qs0 = pgv_shr(k, PG_U32, k0, pg_u32(log2u(DKV_QROWS)));
    pg_reg dsrow = pg_none();
    if (docs) {
        pg_comment(k, "docs: the query tiles end at the first whose doc_start[q0] passes the "
                      "block's last key");
        dsrow = pgk_elem_addr(k, DS, pgv_mul(k, PG_U32, b, f.seq), 4);
        pg_reg lo = pgv_add(k, PG_U32, qs0, pg_u32(1));
        pg_reg klast = pgv_add(k, PG_U32, k0, pg_u32(DKV_KEYS - 1));
        pg_reg qe = pgk_doc_search(k, dsrow, lo, nqs, log2u(DKV_QROWS), klast);
        pg_mov(k, PG_U32, nqs, qe);
    }
    pg_sub(k, PG_U32, nqs, nqs, qs0);
    pg_reg pairs = pgv_mul(k, PG_U32, nqs, f.group);
    pg_reg iters = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, pairs, pg_u32(DKV_GROUPS - 1)),
                           pg_u32(log2u(DKV_GROUPS)));
    pg_reg h0 = pgv_mul(k, PG_U32, kvh, f.group);

    pg_reg dk[FA_MAX_NT][4], dv[FA_MAX_NT][4];
    pgk_fa_zero_acc(k, dk, dp / 8);
    pgk_fa_zero_acc(k, dv, dp / 8);
    pgk_loop L;
    pg_reg it = pgk_loop_begin(k, &L, pg_u32(0), iters, pg_u32(1));
    pg_reg idx = pgv_mad(k, PG_U32, it, pg_u32(DKV_GROUPS), gi);
    pg_reg idle = pgv_setp(k, PG_CMP_GE, PG_U32, idx, pairs);
    pg_reg hg = pgv_div(k, PG_U32, idx, nqs);
    pg_reg qs = pgv_add(k, PG_U32, qs0, pgv_rem(k, PG_U32, idx, nqs));
    pg_reg h = pgv_add(k, PG_U32, h0, hg);
    pg_reg q0 = pgv_shl(k, PG_B32, qs, pg_u32(log2u(DKV_QROWS)));
    pg_bar_sync(k, 0);
    pg_label skip1 = pg_label_new(k, "idle_stage"), skip2 = pg_label_new(k, "idle_step");
    pg_bra_if(k, idle, false, skip1);
    pg_reg qrows = pgv_sub(k, PG_U32, f.seq, q0);
    pgk_fa_stage(k, &f, sqg, pgk_fa_head_row(k, &f, Q, b, q0, f.hq, h), qstride, qrows, DKV_QROWS,
                 GT, gtid);
    pgk_fa_stage(k, &f, sdog, pgk_fa_head_row(k, &f, dO, b, q0, f.hq, h), qstride, qrows, DKV_QROWS,
                 GT, gtid);
    dkv_stats(k, &f, LSE, DELTA, b, h, q0, gtid, slg, sdg);
    pg_label_bind(k, skip1);
    pg_bar_sync(k, 0);
    pg_bra_if(k, idle, false, skip2);

    const dkv_tile tile = {.k0 = k0, .wrow = wrow, .q0 = q0, .skw = skw, .svw = svw, .sqg = sqg,
                           .sdog = sdog, .slg = slg, .sdg = sdg, .dsrow = dsrow, .docs = docs};
    dkv_step(k, &f, &tile, dk, dv);
    pg_label_bind(k, skip2);
    pgk_loop_end(k, &L);

    pg_reg lead = dkv_reduce(k, dp, gi, gtid, sk, dk, dv);
    pg_bra_if(k, lead, true, done);
    pgk_fa_store_rows(k, &f, dk, f.scale, pgk_fa_head_row(k, &f, dK, b, k0, f.hkv, kvh), kstride,
                      wrow, krows);
    pgk_fa_store_rows(k, &f, dv, pg_none(), pgk_fa_head_row(k, &f, dV, b, k0, f.hkv, kvh), kstride,
                      wrow, krows);
    return pgk_finish(k, done);
}

/* ---------------------------------------------------------------- descriptors */

static int launch_dq(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    unsigned rb = 2 * dp_of(kn[KN_DIM]);
    return pgk_fa_launch(kn, FA_ROWS, 32 * FA_WARPS, 4 * FA_ROWS * rb + FA_ROWS * 4, out);
}

static int launch_dkv(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    unsigned rb = 2 * dp_of(kn[KN_DIM]);
    uint32_t bytes = 2 * DKV_KEYS * rb + DKV_GROUPS * (2 * DKV_QROWS * rb + 2 * DKV_QROWS * 4);
    return pgk_fa_launch(kn, DKV_KEYS, 32 * DKV_WARPS * DKV_GROUPS, bytes, out);
}

static int dq_b(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_dq(k, p, dp_of(kn[KN_DIM]), false);
}
static int dkv_b(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_dkv(k, p, dp_of(kn[KN_DIM]), false);
}
static int dq_docs_b(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_dq(k, p, dp_of(kn[KN_DIM]), true);
}
static int dkv_docs_b(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    return build_dkv(k, p, dp_of(kn[KN_DIM]), true);
}

/* A block a 32-key tile and key/value head. */
static const pgk_knob kv_knobs[] = {
    {"batch", 4, 1, 1000, "sequences", false},
    {"seq_len", 512, 1, 131072, "tokens a sequence", false},
    {"kv_heads", 2, 1, 128, "key/value heads (a block a 32-key tile and head)", false},
    {"head_dim", 128, 1, FA_MAX_D, "elements a head (tiles padded to 64 or 128)", true},
};

const pgk_desc pgk_desc_attention_mma_backward_dq = {
    .name = "attention_mma_backward_dq",
    .summary = "causal GQA attention dQ and delta = rowsum(dO * O) on mma.sync (f32 in/out)",
    PGK_PARAMS(pgk_attention_dq_params),
    PGK_KNOBS(pgk_fa_q_knobs),
    .min_target = PG_SM_80,
    .build = dq_b,
    .launch = launch_dq,
};
const pgk_desc pgk_desc_attention_mma_backward_dkv = {
    .name = "attention_mma_backward_dkv",
    .summary = "causal GQA attention dK, dV on mma.sync, each group's heads in a fixed order",
    PGK_PARAMS(pgk_attention_dkv_params),
    PGK_KNOBS(kv_knobs),
    .min_target = PG_SM_80,
    .build = dkv_b,
    .launch = launch_dkv,
};
const pgk_desc pgk_desc_attention_mma_backward_dq_docs = {
    .name = "attention_mma_backward_dq_docs",
    .summary = "document-bounded causal GQA attention dQ and delta = rowsum(dO * O) on mma.sync",
    PGK_PARAMS(pgk_attention_dq_docs_params),
    PGK_KNOBS(pgk_fa_q_knobs),
    .min_target = PG_SM_80,
    .build = dq_docs_b,
    .launch = launch_dq,
};
const pgk_desc pgk_desc_attention_mma_backward_dkv_docs = {
    .name = "attention_mma_backward_dkv_docs",
    .summary = "document-bounded causal GQA attention dK, dV on mma.sync, heads in a fixed order",
    PGK_PARAMS(pgk_attention_dkv_docs_params),
    PGK_KNOBS(kv_knobs),
    .min_target = PG_SM_80,
    .build = dkv_docs_b,
    .launch = launch_dkv,
};
