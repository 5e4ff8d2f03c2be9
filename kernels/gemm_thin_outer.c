/* SPDX-License-Identifier: MIT */
/*
 * gemm_thin's outer form (form 0: R, the reduction, is the thin side).
 * gemm_thin.c has the family's scheme and descriptor.
 */
#include "gemm_thin.h"

/* ---------------------------------------------------------------- outer: R thin */


/* One operand's slab copies: element tid + 256u (u < per) of the
 * ext_t x OUT_RC slab, the index that is contiguous in memory fastest.
 * Element u is element 0 moved by u·du along p (or r): one address, one
 * shared offset and one index pair a thread, the rest immediates. */
typedef struct slab {
    unsigned per;           /* elements a thread */
    bool trans;             /* memory rows run along r */
    unsigned du;            /* element u: p + u·du (r-major) or r + u·du (transposed) */
    unsigned sdu;           /* its shared offset: + u·sdu bytes */
    pg_reg ptr;             /* u64 address of element 0 at the current slab */
    pg_reg ustep;           /* u64 bytes from element u to u + 1 */
    pg_reg pidx, ridx;      /* element 0's p and r */
    pg_reg soff;            /* u32 shared address of element 0 */
    pg_val step;            /* bytes from one slab to the next */
} slab;

static void slab_init(pg_kernel *k, slab *s, bool trans, unsigned ext_t, unsigned stride,
                      pg_reg base, pg_reg ld, pg_reg p0, pg_reg tid, pg_reg sbase, pg_type it)
{
    s->trans = trans;
    s->per = ext_t * OUT_RC / OUT_THREADS;
    unsigned es = pgk_thin_in_size(it);
    pg_reg pl, rl;
    if (trans) {
        pl = pgv_and(k, PG_B32, tid, pg_u32(ext_t - 1));
        rl = pgv_shr(k, PG_U32, tid, pg_u32(log2u(ext_t)));
        s->du = OUT_THREADS / ext_t;
        s->sdu = s->du * stride * 4;
        s->step = pgv_mul_wide(k, PG_U32, ld, pg_u32(OUT_RC * es));
        s->ustep = pgv_mul_wide(k, PG_U32, ld, pg_u32(s->du * es));
    } else {
        rl = pgv_and(k, PG_B32, tid, pg_u32(OUT_RC - 1));
        pl = pgv_shr(k, PG_U32, tid, pg_u32(log2u(OUT_RC)));
        s->du = OUT_THREADS / OUT_RC;
        s->sdu = s->du * 4;
        s->step = pg_u64(OUT_RC * es);
        s->ustep = pgv_mul_wide(k, PG_U32, ld, pg_u32(s->du * es));
    }
    s->pidx = pgv_add(k, PG_U32, p0, pl);
    s->ridx = pgv_mov(k, PG_U32, rl);
    s->ptr = trans ? pgk_elem_addr2(k, base, rl, ld, s->pidx, es)
                   : pgk_elem_addr2(k, base, s->pidx, ld, rl, es);
    s->soff = pgv_mad(k, PG_U32, rl, pg_u32(stride), pl);
    pg_shl(k, PG_B32, s->soff, s->soff, pg_u32(2));
    pg_add(k, PG_U32, s->soff, s->soff, sbase);
}

/* Copy the slab's elements (zero outside the matrix) into shared memory as
 * f32, and step to the next slab. */
static void slab_copy(pg_kernel *k, slab *s, pg_reg ext, pg_reg R, pg_type it)
{
    pg_reg a = pgv_mov(k, PG_U64, s->ptr);
    pg_reg v[8];
    for (unsigned u = 0; u < s->per; u++) {
        pg_reg pu = s->trans ? s->pidx : pgv_add(k, PG_U32, s->pidx, pg_u32(u * s->du));
        pg_reg ru = s->trans ? pgv_add(k, PG_U32, s->ridx, pg_u32(u * s->du)) : s->ridx;
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, ru, R);
        pg_reg in = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LT, PG_U32, pu, ext), rin);
        v[u] = pgk_thin_ld_one(k, it, a, 0, in);
        if (u + 1 < s->per)
            pg_add(k, PG_U64, a, a, s->ustep);
    }
    for (unsigned u = 0; u < s->per; u++)
        pg_st(k, PG_SPACE_SHARED, PG_F32, s->soff, u * s->sdu, v[u]);
    pg_add(k, PG_U64, s->ptr, s->ptr, s->step);
    pg_add(k, PG_U32, s->ridx, s->ridx, pg_u32(OUT_RC));
}

void pgk_thin_build_outer(pg_kernel *k, unsigned layout, pg_type it, const thin_out *o0,
                          pg_reg a, pg_reg b, pg_reg m, pg_reg n, pg_reg kd)
{
    thin_out o = *o0;
    pg_kernel_set_maxntid(k, OUT_THREADS, 1, 1);
    pg_kernel_set_minnctapersm(k, 3); /* 85 registers: three blocks an SM */
    const bool ta = layout == PGK_GEMM_BACKWARD_W, tb = layout != PGK_GEMM_FORWARD;
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n, ldb = kd;
    pg_shared as = pg_shared_static(k, PG_F32, OUT_RC * OUT_AS, 16, "slab_a");
    pg_shared bs = pg_shared_static(k, PG_F32, OUT_RC * OUT_BS, 16, "slab_b");
    pg_reg abase = pgv_mov(k, PG_U32, pg_shared_addr(as));
    pg_reg bbase = pgv_mov(k, PG_U32, pg_shared_addr(bs));

    pg_comment(k, "the block's 64 x 128 tile; the thread's rows 4ty.., columns 4tx.. and 64+4tx..");
    pg_reg nq = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, Q, pg_u32(OUT_TQ - 1)),
                        pg_u32(log2u(OUT_TQ)));
    pg_reg bid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg p0 = pgv_mul(k, PG_U32, pgv_div(k, PG_U32, bid, nq), pg_u32(OUT_TP));
    pg_reg q0 = pgv_mul(k, PG_U32, pgv_rem(k, PG_U32, bid, nq), pg_u32(OUT_TQ));
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg tx = pgv_and(k, PG_B32, tid, pg_u32(15)), ty = pgv_shr(k, PG_U32, tid, pg_u32(4));

    slab sa, sb;
    slab_init(k, &sa, ta, OUT_TP, OUT_AS, a, lda, p0, tid, abase, it);
    slab_init(k, &sb, tb, OUT_TQ, OUT_BS, b, ldb, q0, tid, bbase, it);
    pg_reg ard = pgv_shl(k, PG_B32, pgv_shl(k, PG_B32, ty, pg_u32(2)), pg_u32(2));
    pg_add(k, PG_U32, ard, ard, abase);
    pg_reg brd = pgv_shl(k, PG_B32, pgv_shl(k, PG_B32, tx, pg_u32(2)), pg_u32(2));
    pg_add(k, PG_U32, brd, brd, bbase);

    pg_reg acc[4][8];
    for (unsigned i = 0; i < 4; i++)
        for (unsigned j = 0; j < 8; j++)
            acc[i][j] = pgk_zero_f32(k);
    pg_reg rb = pgv_mov(k, PG_U32, pg_u32(0));
    pg_label top = pg_label_new(k, "slab");
    pg_label_bind(k, top);
    slab_copy(k, &sa, P, R, it);
    slab_copy(k, &sb, Q, R, it);
    pg_bar_sync(k, 0);
    for (unsigned r = 0; r < OUT_RC; r++) {
        pg_reg av[4], bv[8];
        for (unsigned i = 0; i < 4; i++)
            av[i] = pgv_ld(k, PG_SPACE_SHARED, PG_F32, ard, (r * OUT_AS + i) * 4);
        for (unsigned j = 0; j < 8; j++)
            bv[j] = pg_reg_new(k, PG_F32);
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, brd, r * OUT_BS * 4, bv);
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, brd, (r * OUT_BS + 64) * 4, bv + 4);
        for (unsigned i = 0; i < 4; i++)
            for (unsigned j = 0; j < 8; j++)
                pg_fma(k, PG_F32, acc[i][j], av[i], bv[j], acc[i][j]);
    }
    pg_bar_sync(k, 0);
    pg_add(k, PG_U32, rb, rb, pg_u32(OUT_RC));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, rb, R);
    pg_bra_if(k, more, false, top);

    pg_comment(k, "the output: per row two runs of four columns, bias then accumulate");
    unsigned es = out_size(o.ot);
    pg_reg cvec = pgk_vectors_ok(k, o.c, Q, 4, es);
    pg_reg col[2], bv[2][4], cins[2][4], cfull[2];
    pg_reg yes = pgv_setp(k, PG_CMP_EQ, PG_U32, tid, tid);
    for (unsigned h = 0; h < 2; h++) {
        col[h] = pgv_mad(k, PG_U32, tx, pg_u32(4), q0);
        pg_add(k, PG_U32, col[h], col[h], pg_u32(h * 64));
        cfull[h] = pgk_thin_run_inside(k, col[h], Q, 4, yes, cins[h]);
        pg_and(k, PG_PRED, cfull[h], cfull[h], cvec);
        for (unsigned e = 0; e < 4; e++)
            bv[h][e] = pgk_thin_bias_at(k, &o, pgv_add(k, PG_U32, col[h], pg_u32(e)), Q);
    }
    pg_reg row0 = pgv_mad(k, PG_U32, ty, pg_u32(4), p0);
    for (unsigned i = 0; i < 4; i++) {
        pg_reg row = pgv_add(k, PG_U32, row0, pg_u32(i));
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, row, P);
        for (unsigned h = 0; h < 2; h++) {
            pg_reg addr = pgk_elem_addr2(k, o.c, row, Q, col[h], es);
            pg_reg ins[4], v[4];
            for (unsigned e = 0; e < 4; e++) {
                ins[e] = pgv_and(k, PG_PRED, cins[h][e], rin);
                v[e] = pgv_add(k, PG_F32, acc[i][h * 4 + e], bv[h][e]);
            }
            pg_reg full = pgv_and(k, PG_PRED, cfull[h], rin);
            pgk_thin_store_run4(k, &o, addr, v, full, ins);
        }
    }
}
