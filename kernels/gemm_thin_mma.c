/* SPDX-License-Identifier: MIT */
/*
 * gemm_thin's forms 3 and 4: the narrow products on mma.sync (16-bit
 * inputs, sm_80+). gemm_thin.c has the family's scheme and descriptor.
 */
#include "gemm_thin.h"

/* ---------------------------------------------------------------- narrow on the tensor cores */

/* Forms 3 and 4 (16-bit inputs, sm_80+): the narrow products on
 * mma.sync.m16n8k16. A block owns 16 rows i of G and all of R; its warps
 * take the k-steps (16 r's) w, w + W, ..: each lane loads its fragment
 * elements one by one (G(i, r) and S(j, r) at any layout and alignment:
 * zeros outside), packs pairs along r and multiplies into 16 x J f32
 * accumulators; then the warps' partials go to shared memory and each
 * output adds them in warp order. An r-major operand whose rows keep
 * 4-byte alignment (base and leading dimension), R even, loads each pair
 * r, r + 1 whole instead: the u32 is already the packed register, about
 * a third of the instructions (one uniform choice: the k-loop exists in
 * both versions, with the same fragments and mma's). Rows g, g+8 of a
 * fragment are i0 + g, i0 + g + 8; its k columns 2t, 2t+1, 2t+8, 2t+9
 * the r's of the k-step at those offsets; column n of n-tile nt is
 * j = jb + 8 nt + n. */

unsigned pgk_thin_tc_warps(unsigned jc) { return jc <= 16 ? 16 : jc == 32 ? 8 : 4; }
static unsigned tc_unroll(unsigned jc) { return jc <= 16 ? 4 : jc == 32 ? 2 : 1; }

/* The 16-bit element at addr + off (a u64 register, or pg_none() and the
 * immediate imm: r-major operands step r by 2 bytes) where `in`, else 0. */
static pg_reg ld_half(pg_kernel *k, pg_reg addr, pg_val off, int64_t imm, pg_reg in)
{
    pg_reg h = pgv_mov(k, PG_U16, pg_u32(0));
    pg_reg a = pg_is_reg(off) ? pgv_add(k, PG_U64, addr, off) : addr;
    pg_guard(k, in, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_U16, a, pg_is_reg(off) ? 0 : imm, h);
    return h;
}

/* The u32 of the pair r, r + 1 of an r-major operand at addr + imm
 * (4-byte aligned) where `in`, else 0: little-endian, its lo half is the
 * lower r, the fragment register as mma.sync takes it. */
static pg_reg ld_pair(pg_kernel *k, pg_reg addr, int64_t imm, pg_reg in)
{
    pg_reg w = pgv_mov(k, PG_B32, pg_u32(0));
    pg_guard(k, in, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_B32, addr, imm, w);
    return w;
}

/* The k-loop's state, read and advanced by either version of it. */
typedef struct tc_loop {
    pg_type it;
    unsigned NT, W, U;
    bool gv, sv; /* G, S: pairs along r load as one u32 (r-major, aligned, R even) */
    pg_reg R, ina, inb, jin[8];
    pg_val goff[4], soff[4];
    pg_reg sj8, gks, sks;
    pg_reg gpa, gpb, sp, r0, ks, nks;
    pg_reg (*acc)[4];
} tc_loop;

/* The loop over a warp's k-steps, U of them a pass. Both versions load
 * the same values into the same fragments and issue the same mma's: a
 * pair loaded whole (R even: r and r + 1 are both inside or both not) is
 * the packed pair of its elements. */
static void tc_ksteps(pg_kernel *k, const tc_loop *L)
{
    static const unsigned roff[4] = {0, 1, 8, 9};
    const unsigned NT = L->NT, W = L->W, U = L->U;
    pg_label top = pg_label_new(k, "kstep");
    pg_label_bind(k, top);
    pg_reg ha[4][4], hb[4][4], hs[4][8][4], fa[4][4], fs[4][8][2];
    pg_reg ga = pgv_mov(k, PG_U64, L->gpa), gb = pgv_mov(k, PG_U64, L->gpb);
    pg_reg sa = pgv_mov(k, PG_U64, L->sp), ru = pgv_mov(k, PG_U32, L->r0);
    pg_comment(k, "every load of the step's k-steps first: they are in flight together");
    for (unsigned u = 0; u < U; u++) {
        for (unsigned e = 0; e < 4; e++) {
            bool odd = e & 1;
            if (odd && L->gv && L->sv)
                continue; /* loaded with r - 1 */
            pg_reg re = pgv_add(k, PG_U32, ru, pg_u32(roff[e]));
            pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, re, L->R);
            int64_t imm = 2 * roff[e];
            if (!L->gv) {
                ha[u][e] = ld_half(k, ga, L->goff[e], imm, pgv_and(k, PG_PRED, rin, L->ina));
                hb[u][e] = ld_half(k, gb, L->goff[e], imm, pgv_and(k, PG_PRED, rin, L->inb));
            } else if (!odd) {
                fa[u][e] = ld_pair(k, ga, imm, pgv_and(k, PG_PRED, rin, L->ina));
                fa[u][e + 1] = ld_pair(k, gb, imm, pgv_and(k, PG_PRED, rin, L->inb));
            }
            if (odd && L->sv)
                continue;
            pg_reg sn = pgv_mov(k, PG_U64, sa);
            for (unsigned nt = 0; nt < NT; nt++) {
                pg_reg in = pgv_and(k, PG_PRED, rin, L->jin[nt]);
                if (L->sv)
                    fs[u][nt][e / 2] = ld_pair(k, sn, imm, in);
                else
                    hs[u][nt][e] = ld_half(k, sn, L->soff[e], imm, in);
                if (nt + 1 < NT)
                    pg_add(k, PG_U64, sn, sn, L->sj8);
            }
        }
        if (u + 1 < U) {
            pg_add(k, PG_U64, ga, ga, L->gks);
            pg_add(k, PG_U64, gb, gb, L->gks);
            pg_add(k, PG_U64, sa, sa, L->sks);
            pg_add(k, PG_U32, ru, ru, pg_u32(16 * W));
        }
    }
    for (unsigned u = 0; u < U; u++) {
        /* fa: row a at r, row b at r, row a at r + 8, row b at r + 8 */
        pg_reg af[4];
        if (L->gv) {
            for (unsigned q = 0; q < 4; q++)
                af[q] = fa[u][q];
        } else {
            af[0] = pgv_pack(k, PG_B32, ha[u][0], ha[u][1]);
            af[1] = pgv_pack(k, PG_B32, hb[u][0], hb[u][1]);
            af[2] = pgv_pack(k, PG_B32, ha[u][2], ha[u][3]);
            af[3] = pgv_pack(k, PG_B32, hb[u][2], hb[u][3]);
        }
        for (unsigned nt = 0; nt < NT; nt++) {
            pg_reg bf[2];
            if (L->sv) {
                bf[0] = fs[u][nt][0];
                bf[1] = fs[u][nt][1];
            } else {
                bf[0] = pgv_pack(k, PG_B32, hs[u][nt][0], hs[u][nt][1]);
                bf[1] = pgv_pack(k, PG_B32, hs[u][nt][2], hs[u][nt][3]);
            }
            pg_mma_m16n8k16_f32(k, L->it, L->acc[nt], af, bf, L->acc[nt]);
        }
    }
    pg_reg gstep = pgv_mul(k, PG_U64, L->gks, pg_u64(U));
    pg_reg sstep = pgv_mul(k, PG_U64, L->sks, pg_u64(U));
    pg_add(k, PG_U64, L->gpa, L->gpa, gstep);
    pg_add(k, PG_U64, L->gpb, L->gpb, gstep);
    pg_add(k, PG_U64, L->sp, L->sp, sstep);
    pg_add(k, PG_U32, L->r0, L->r0, pg_u32(16 * W * U));
    pg_add(k, PG_U32, L->ks, L->ks, pg_u32(W * U));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, L->ks, L->nks);
    pg_bra_if(k, more, false, top);
}

/* What tc_store_slot reads of the chunk: its shape, the partials, the
 * block's first i, the chunk's first j, and the bounds. */
typedef struct tc_chunk {
    unsigned NT, W, SLOT;
    pg_reg rbase, i0, jb, I, J, Q;
    bool fq;
} tc_chunk;

/* Output slot sl of the chunk: its sum over the warps' partials (in warp
 * order), plus bias, to C. Slot sl is lane sl / (4 NT)'s element
 * e = nt 4 + q. */
static void tc_store_slot(pg_kernel *k, const thin_out *o, const tc_chunk *c, pg_reg sl)
{
    const unsigned NT = c->NT, W = c->W, SLOT = c->SLOT;
    const pg_reg rbase = c->rbase, i0 = c->i0, jb = c->jb, I = c->I, J = c->J, Q = c->Q;
    const bool fq = c->fq;
    pg_reg sln = pgv_shr(k, PG_U32, sl, pg_u32(log2u(NT * 4)));
    pg_reg e = pgv_and(k, PG_B32, sl, pg_u32(NT * 4 - 1));
    pg_reg rd = pgv_mad(k, PG_U32, sln, pg_u32(SLOT), e);
    pg_shl(k, PG_B32, rd, rd, pg_u32(2));
    pg_add(k, PG_U32, rd, rd, rbase);
    pg_reg sum = pgv_ld(k, PG_SPACE_SHARED, PG_F32, rd, 0);
    for (unsigned u = 1; u < W; u++)
        pg_add(k, PG_F32, sum, sum,
               pgv_ld(k, PG_SPACE_SHARED, PG_F32, rd, (int64_t)u * 32 * SLOT * 4));
    pg_reg q = pgv_and(k, PG_B32, e, pg_u32(3)), nt = pgv_shr(k, PG_U32, e, pg_u32(2));
    pg_reg row = pgv_shr(k, PG_U32, sln, pg_u32(2));
    pg_mad(k, PG_U32, row, pgv_shr(k, PG_U32, q, pg_u32(1)), pg_u32(8), row);
    pg_reg i = pgv_add(k, PG_U32, i0, row);
    pg_reg col = pgv_shl(k, PG_B32, pgv_and(k, PG_B32, sln, pg_u32(3)), pg_u32(1));
    pg_add(k, PG_U32, col, col, pgv_and(k, PG_B32, q, pg_u32(1)));
    pg_mad(k, PG_U32, col, nt, pg_u32(8), col);
    pg_reg j = pgv_add(k, PG_U32, jb, col);
    pg_reg jok = pgv_setp(k, PG_CMP_LT, PG_U32, j, J);
    pg_reg ok = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LT, PG_U32, i, I), jok);
    pg_reg orow = fq ? i : j, ocol = fq ? j : i;
    pg_add(k, PG_F32, sum, sum, pgk_thin_bias_at(k, o, ocol, Q));
    pg_reg addr = pgk_elem_addr2(k, o->c, orow, Q, ocol, out_size(o->ot));
    pg_reg v = pgk_gemm_finish_value(k, o->ot, sum, addr, ok, o->do_acc);
    pgk_gemm_store_value(k, o->ot, addr, ok, v, o->native);
}

/* The warp's k-steps, on to kdone. With an r-major operand they are
 * written twice: with its r pairs loaded whole (4-byte rows, R even, picked
 * at run time) and element by element. */
static void tc_kloop(pg_kernel *k, tc_loop *L, bool gt, bool st, pg_reg g, pg_reg ldg, pg_reg s,
                     pg_reg lds, pg_label kdone)
{
    const pg_reg ks = L->ks, nks = L->nks, R = L->R;
    pg_reg go = pgv_setp(k, PG_CMP_LT, PG_U32, ks, nks);
    pg_bra_if(k, go, true, kdone);
    if (!gt || !st) {
        pg_comment(k, "r-major operands at 4-byte rows, R even: their pairs load whole");
        pg_reg fast = pgv_setp(k, PG_CMP_EQ, PG_U32, pgv_and(k, PG_B32, R, pg_u32(1)), pg_u32(0));
        if (!gt)
            fast = pgv_and(k, PG_PRED, fast, pgk_vectors_ok(k, g, ldg, 2, 2));
        if (!st)
            fast = pgv_and(k, PG_PRED, fast, pgk_vectors_ok(k, s, lds, 2, 2));
        pg_label slow = pg_label_new(k, "kslow");
        pg_bra_if(k, fast, true, slow);
        L->gv = !gt;
        L->sv = !st;
        tc_ksteps(k, L);
        pg_bra(k, kdone);
        pg_label_bind(k, slow);
        L->gv = L->sv = false;
    }
    tc_ksteps(k, L);
}

void pgk_thin_build_mma(pg_kernel *k, unsigned layout, bool fq, unsigned jc, pg_type it,
                        const thin_out *o0, pg_reg a, pg_reg b, pg_reg m, pg_reg n,
                        pg_reg kd)
{
    thin_out o = *o0;
    const unsigned JC = pgk_thin_jc(jc), NT = JC / 8, W = pgk_thin_tc_warps(JC), U = tc_unroll(JC);
    const unsigned T = 32 * W, SLOT = NT * 4 + 1; /* partials a lane, padded */
    pg_kernel_set_maxntid(k, T, 1, 1);
    const bool ta = layout == PGK_GEMM_BACKWARD_W, tb = layout != PGK_GEMM_FORWARD;
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n, ldb = kd;
    pg_reg g = fq ? a : b, s = fq ? b : a, ldg = fq ? lda : ldb, lds = fq ? ldb : lda;
    bool gt = fq ? ta : tb, st = fq ? tb : ta;
    pg_reg I = fq ? P : Q, J = fq ? Q : P;
    pg_shared red = pg_shared_static(k, PG_F32, W * 32 * SLOT, 16, "partials");
    pg_reg rbase = pgv_mov(k, PG_U32, pg_shared_addr(red));

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pgv_and(k, PG_B32, tid, pg_u32(31)), w = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg gq = pgv_shr(k, PG_U32, lane, pg_u32(2)), t4 = pgv_and(k, PG_B32, lane, pg_u32(3));
    pg_reg i0 = pgv_shl(k, PG_B32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(4));
    pg_reg ia = pgv_add(k, PG_U32, i0, gq), ib = pgv_add(k, PG_U32, ia, pg_u32(8));
    pg_reg ina = pgv_setp(k, PG_CMP_LT, PG_U32, ia, I);
    pg_reg inb = pgv_setp(k, PG_CMP_LT, PG_U32, ib, I);
    pg_reg t2 = pgv_shl(k, PG_B32, t4, pg_u32(1));

    pg_comment(k, "bytes from r to r + 1 (and + 8, + 9) in G and S");
    pg_reg grs = gt ? pgv_mul_wide(k, PG_U32, ldg, pg_u32(2)) : pgv_mov(k, PG_U64, pg_u64(2));
    pg_reg srs = st ? pgv_mul_wide(k, PG_U32, lds, pg_u32(2)) : pgv_mov(k, PG_U64, pg_u64(2));
    pg_val goff[4], soff[4];
    static const unsigned roff[4] = {0, 1, 8, 9};
    for (unsigned e = 0; e < 4; e++) {
        goff[e] = gt ? pgv_mul(k, PG_U64, grs, pg_u64(roff[e])) : pg_none();
        soff[e] = st ? pgv_mul(k, PG_U64, srs, pg_u64(roff[e])) : pg_none();
    }
    /* S(j + 8, r): 8 j's further */
    pg_reg sj8 = st ? pgv_mov(k, PG_U64, pg_u64(16)) : pgv_mul_wide(k, PG_U32, lds, pg_u32(16));
    pg_reg nks = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, R, pg_u32(15)), pg_u32(4));

    pg_comment(k, "the thin side in chunks of j (one for J up to the baked bound)");
    pg_reg jb = pgv_mov(k, PG_U32, pg_u32(0));
    pg_label chunk = pg_label_new(k, "jchunk"), kdone = pg_label_new(k, "kdone");
    pg_label_bind(k, chunk);
    pg_reg acc[8][4];
    for (unsigned nt = 0; nt < NT; nt++)
        for (unsigned q = 0; q < 4; q++)
            acc[nt][q] = pgk_zero_f32(k);
    pg_reg jin[8];
    for (unsigned nt = 0; nt < NT; nt++) {
        pg_reg j = pgv_add(k, PG_U32, pgv_add(k, PG_U32, jb, gq), pg_u32(8 * nt));
        jin[nt] = pgv_setp(k, PG_CMP_LT, PG_U32, j, J);
    }
    pg_comment(k, "k-step ks = w: r = 16 ks + 2t (+ 1, 8, 9)");
    pg_reg ks = pgv_mov(k, PG_U32, w);
    pg_reg r0 = pgv_shl(k, PG_B32, ks, pg_u32(4));
    pg_add(k, PG_U32, r0, r0, t2);
    pg_reg gpa = gt ? pgk_elem_addr2(k, g, r0, ldg, ia, 2) : pgk_elem_addr2(k, g, ia, ldg, r0, 2);
    pg_reg gpb = gt ? pgk_elem_addr2(k, g, r0, ldg, ib, 2) : pgk_elem_addr2(k, g, ib, ldg, r0, 2);
    pg_reg jr = pgv_add(k, PG_U32, jb, gq);
    pg_reg sp = st ? pgk_elem_addr2(k, s, r0, lds, jr, 2) : pgk_elem_addr2(k, s, jr, lds, r0, 2);
    pg_reg gks = pgv_mul(k, PG_U64, grs, pg_u64(16 * W)); /* a warp's next k-step */
    pg_reg sks = pgv_mul(k, PG_U64, srs, pg_u64(16 * W));
    tc_loop L = {.it = it, .NT = NT, .W = W, .U = U, .R = R, .ina = ina, .inb = inb,
                 .sj8 = sj8, .gks = gks, .sks = sks, .gpa = gpa, .gpb = gpb, .sp = sp,
                 .r0 = r0, .ks = ks, .nks = nks, .acc = acc};
    for (unsigned nt = 0; nt < NT; nt++)
        L.jin[nt] = jin[nt];
    for (unsigned e = 0; e < 4; e++) {
        L.goff[e] = goff[e];
        L.soff[e] = soff[e];
    }
    tc_kloop(k, &L, gt, st, g, ldg, s, lds, kdone);
    pg_label_bind(k, kdone);

    pg_comment(k, "the warps' partials to shared memory, each output summed in warp order");
    pg_reg mine = pgv_mul(k, PG_U32, tid, pg_u32(SLOT * 4));
    pg_add(k, PG_U32, mine, mine, rbase);
    for (unsigned nt = 0; nt < NT; nt++)
        for (unsigned q = 0; q < 4; q++)
            pg_st(k, PG_SPACE_SHARED, PG_F32, mine, (nt * 4 + q) * 4, acc[nt][q]);
    pg_bar_sync(k, 0);
    pg_reg sl = pgv_mov(k, PG_U32, tid);
    pg_label stop = pg_label_new(k, "slot"), sdone = pg_label_new(k, "slots_done");
    pg_reg any = pgv_setp(k, PG_CMP_LT, PG_U32, sl, pg_u32(32 * NT * 4));
    pg_bra_if(k, any, true, sdone);
    pg_label_bind(k, stop);
    const tc_chunk tcc = {.NT = NT, .W = W, .SLOT = SLOT, .rbase = rbase, .i0 = i0, .jb = jb,
                          .I = I, .J = J, .Q = Q, .fq = fq};
    tc_store_slot(k, &o, &tcc, sl);
    pg_add(k, PG_U32, sl, sl, pg_u32(T));
    pg_reg again = pgv_setp(k, PG_CMP_LT, PG_U32, sl, pg_u32(32 * NT * 4));
    pg_bra_if(k, again, false, stop);
    pg_label_bind(k, sdone);
    pg_label done = pgk_thin_chunk_end(k, jb, JC, J);
    pg_bra(k, chunk);
    pg_label_bind(k, done);
}
