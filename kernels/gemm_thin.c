/* SPDX-License-Identifier: MIT */
/*
 * gemm_thin: the GEMM layouts (gemm_mma.c: C[P,Q] = Σ_r A(p,r)·B(q,r))
 * when one of P, Q, R is thin (a LoRA adapter's rank, 1 to 64), for f16,
 * bf16 and f32 inputs, f32 arithmetic, f32, f16 or bf16 out, overwrite or
 * accumulate, optional f32 bias on C's columns. One launch, no workspace,
 * no atomics: every output is one fixed sequence of f32 operations.
 *
 * Such a product moves one large matrix once (the wide input, or the wide
 * output) and does about as many flops as bytes: it is bound by memory
 * latency and by the launch, not by the tensor cores. The forms:
 *
 *  outer (R thin): 64 x 128 output tiles of 256 threads, each thread a
 *    4 x 8 register tile; the A and B slabs of 16 r's go through shared
 *    memory as f32, the output is written once, 16 bytes at a time.
 *  narrow (Q thin, or P thin with the roles of A and B swapped): the wide
 *    operand G(i, r) (i over P, or Q) is read straight into registers and
 *    the thin one S(j, r) (j < J, the thin side) from L1. A block owns 4
 *    (or 8) rows i and all of R: its 64 r-lanes each sum a fixed set of
 *    r's into J x rows accumulators (slice-K), then add their partials in
 *    shared memory in lane order. With G r-major (rows of r) a lane takes
 *    16-byte vectors along r for each of its rows; with G transposed (rows
 *    of i) a lane takes its rows' run of i at one r a step. f32 with G
 *    r-major and S transposed (rows of j: backward_x's W) splits J too:
 *    a lane's whole run of j at each r would be an uncoalesced read, so
 *    JC/4 lanes share a group of r's, each taking four j's of S's rows
 *    (together the rows whole); a block is 256 threads on 8 rows i (128/JC
 *    above J = 16).
 *
 * J is baked (the knob j, rounded up to a power of two, 8 at least): the
 * accumulators are registers. The workspace parameter is the GEMM ABI
 * (gemm_abi.h) and is not read.
 */
#include "gemm_thin.h"

/* ---------------------------------------------------------------- narrow: loads */

/* out[0..n) = the n consecutive elements at addr, element e being index
 * idx + e of a line of lim, as f32: 16-byte (or smaller) vector loads when
 * all n are inside, `also` holds and `vec` (the addresses are aligned),
 * else one element at a time where idx + e < lim and `also`, zeros
 * elsewhere. n·size is 2, 4, 8 or a multiple of 16. */
static void ld_run(pg_kernel *k, pg_type it, pg_reg addr, unsigned n, pg_reg vec, pg_reg idx,
                   pg_reg lim, pg_reg also, pg_reg *out)
{
    unsigned es = pgk_thin_in_size(it), bytes = n * es;
    pg_label scalar = pg_label_new(k, "run_scalar"), done = pg_label_new(k, "run_done");
    pg_reg end = pgv_add(k, PG_U32, idx, pg_u32(n));
    pg_reg full = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, end, lim), also);
    pg_and(k, PG_PRED, full, full, vec);
    pg_bra_if(k, full, true, scalar);
    if (bytes == 2) {
        pg_reg h = pgv_ld(k, PG_SPACE_GLOBAL, PG_B16, addr, 0);
        pg_mov(k, PG_F32, out[0], pgk_h_to_f32(k, it, h));
    } else {
        unsigned words = bytes / 4, width = words >= 4 ? 4 : words;
        for (unsigned w0 = 0; w0 < words; w0 += width) {
            pg_reg w[4];
            for (unsigned i = 0; i < width; i++)
                w[i] = pg_reg_new(k, PG_B32);
            if (width == 1)
                pg_ld(k, PG_SPACE_GLOBAL, PG_B32, addr, w0 * 4, w[0]);
            else
                pg_ld_v(k, PG_SPACE_GLOBAL, PG_B32, width, addr, w0 * 4, w);
            for (unsigned i = 0; i < width; i++) {
                unsigned wi = w0 + i;
                if (it == PG_F32) {
                    pg_mov(k, PG_B32, out[wi], w[i]);
                } else {
                    pg_reg lo = pgk_thin_half_f32(k, it, w[i], false);
                    pg_mov(k, PG_F32, out[2 * wi], lo);
                    pg_reg hi = pgk_thin_half_f32(k, it, w[i], true);
                    pg_mov(k, PG_F32, out[2 * wi + 1], hi);
                }
            }
        }
    }
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    for (unsigned e = 0; e < n; e++) {
        pg_reg ie = pgv_add(k, PG_U32, idx, pg_u32(e));
        pg_reg in = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LT, PG_U32, ie, lim), also);
        pg_mov(k, PG_F32, out[e], pgk_thin_ld_one(k, it, addr, e * es, in));
    }
    pg_label_bind(k, done);
}

/* out[0..n) = the elements `stride` bytes apart (a u64 register) from
 * addr, each where ins[e], else 0. */
static void ld_strided(pg_kernel *k, pg_type it, pg_reg addr, pg_reg stride, unsigned n,
                       const pg_reg *ins, pg_reg *out)
{
    pg_reg a = pgv_mov(k, PG_U64, addr);
    for (unsigned e = 0; e < n; e++) {
        pg_mov(k, PG_F32, out[e], pgk_thin_ld_one(k, it, a, 0, ins[e]));
        if (e + 1 < n)
            pg_add(k, PG_U64, a, a, stride);
    }
}

/* ---------------------------------------------------------------- narrow: Q or P thin */

/* The SIMT form of a narrow form (f32 inputs run forms 3 and 4 as 1 and 2). */
static unsigned thin_simt_form(unsigned form)
{
    return form == TH_FORM_MMA_Q ? TH_FORM_Q : form == TH_FORM_MMA_P ? TH_FORM_P : form;
}

#define NR_LANES 128u /* r-lanes a block */
#define NR_ROWS 128u  /* partial rows in shared memory: 2 x 64 lanes of a transposed G share one */
#define NR_UNROLL 4u  /* r's a step of a transposed G, their loads in flight together */
#define NR_SLOTS 64u /* accumulators a thread: rows x J */

/* Whether the wide operand G (the thin one S) is transposed: memory rows
 * along r. */
static bool g_trans(unsigned layout, unsigned form)
{
    bool ta = layout == PGK_GEMM_BACKWARD_W, tb = layout != PGK_GEMM_FORWARD;
    return form == TH_FORM_Q ? ta : tb;
}
static bool s_trans(unsigned layout, unsigned form)
{
    bool ta = layout == PGK_GEMM_BACKWARD_W, tb = layout != PGK_GEMM_FORWARD;
    return form == TH_FORM_Q ? tb : ta;
}

/* Whether the lanes split J (f32, G r-major, S transposed): a lane that
 * took S's whole run of J at each of its r's would read 16 bytes of every
 * 64 (or more) a load, its neighbours' runs lying JC·4 bytes apart, and
 * be bound by those uncoalesced reads. Lane (g, q) instead takes j's
 * 4q..4q+3 (one 16-byte vector of an S row; the JC/4 lanes of g read the
 * row whole) at the four r's of its G vectors, for NI rows. */
static bool thin_jsplit(unsigned layout, unsigned form, pg_type it)
{
    return it == PG_F32 && !g_trans(layout, form) && s_trans(layout, form);
}

/* Rows of G a thread: jc x rows accumulators, at most NR_SLOTS; two when
 * a vector of r's of G meets S's runs of j (eight of them live at once:
 * four rows would spill). Split over J: 4 x rows accumulators, the
 * block's rows x JC partials one a thread of the first 128. */
static unsigned thin_rows(unsigned jc, unsigned layout, unsigned form, pg_type it)
{
    if (thin_jsplit(layout, form, it))
        return jc <= 16 ? 8 : NR_LANES / jc;
    unsigned most = !g_trans(layout, form) && s_trans(layout, form) ? 2 : 4;
    return NR_SLOTS / jc < most ? NR_SLOTS / jc : most;
}

/* Lanes along i: 2 for a transposed G (its runs of i), else 1. */
static unsigned thin_li(unsigned layout, unsigned form) { return g_trans(layout, form) ? 2 : 1; }

/* Threads a block: the r-lanes times the lanes along i; split over J, 256
 * (JC/4 a group of r's). */
static unsigned thin_threads(unsigned layout, unsigned form, pg_type it)
{
    return thin_jsplit(layout, form, it) ? 2 * NR_LANES : NR_LANES * thin_li(layout, form);
}

/* What the steps of a narrow form share: its shape (build_narrow's
 * constants), the operands G and S, the thread's place, the current chunk
 * of j and the accumulators. The steps record in the order build_narrow
 * calls them. */
typedef struct narrow {
    pg_type it;
    unsigned es, JC, NI, LI, T, SL, NQ, NG, AJ, RS, PER;
    bool js, fq, st;
    pg_reg g, s, ldg, lds, I, J, R, Q;
    pg_reg tid, rl, ib, i0, rbase;
    pg_reg sjstep, svec, jb, sjb;
    pg_label top, end;
    pg_reg acc[8][64];
} narrow;

/* Split over J (thin_jsplit): lane (g, q) runs the vectors of r's of its
 * rows against the j's 4q.. of S's rows at those r's. */
static void narrow_jsplit(pg_kernel *k, const narrow *nr)
{
    const pg_type it = nr->it;
    const unsigned es = nr->es, NI = nr->NI, NQ = nr->NQ, NG = nr->NG;
    const pg_label top = nr->top, end = nr->end;
    const pg_reg g = nr->g, ldg = nr->ldg, lds = nr->lds, I = nr->I, J = nr->J, R = nr->R,
                 tid = nr->tid, ib = nr->ib, sjstep = nr->sjstep, svec = nr->svec, jb = nr->jb,
                 sjb = nr->sjb;
    const pg_reg(*acc)[64] = nr->acc;
    pg_comment(k, "split over J: lane (g, q) takes the vector of r's 4g.. of its rows and "
                  "the j's 4q.. of S's rows at those r's");
    pg_reg q = pgv_and(k, PG_B32, tid, pg_u32(NQ - 1));
    pg_reg v = pgv_shr(k, PG_U32, tid, pg_u32(log2u(NQ)));
    pg_reg gvec = pgk_vectors_ok(k, g, ldg, 4, es);
    pg_reg nv = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, R, pg_u32(3)), pg_u32(2));
    pg_reg r0 = pgv_shl(k, PG_B32, v, pg_u32(2));
    pg_reg q4 = pgv_shl(k, PG_B32, q, pg_u32(2));
    pg_reg j0 = pgv_add(k, PG_U32, jb, q4);
    pg_reg gp[8], gin[8];
    for (unsigned i = 0; i < NI; i++) {
        pg_reg row = pgv_add(k, PG_U32, ib, pg_u32(i));
        gin[i] = pgv_setp(k, PG_CMP_LT, PG_U32, row, I);
        gp[i] = pgk_elem_addr2(k, g, row, ldg, r0, es);
    }
    pg_reg sp = pgk_elem_addr2(k, sjb, r0, lds, q4, es);
    pg_reg sstep = pgv_mul_wide(k, PG_U32, lds, pg_u32(NG * 4 * es));
    pg_reg go = pgv_setp(k, PG_CMP_LT, PG_U32, v, nv);
    pg_bra_if(k, go, true, end);
    pg_label_bind(k, top);
    pg_comment(k, "every load of the step first: they are in flight together");
    pg_reg gv[8][4], sv[4][4];
    for (unsigned i = 0; i < NI; i++) {
        for (unsigned e = 0; e < 4; e++)
            gv[i][e] = pg_reg_new(k, PG_F32);
        ld_run(k, it, gp[i], 4, gvec, r0, R, gin[i], gv[i]);
    }
    pg_reg sa = pgv_mov(k, PG_U64, sp);
    for (unsigned e = 0; e < 4; e++) {
        pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, pgv_add(k, PG_U32, r0, pg_u32(e)), R);
        for (unsigned x = 0; x < 4; x++)
            sv[e][x] = pg_reg_new(k, PG_F32);
        ld_run(k, it, sa, 4, svec, j0, J, rin, sv[e]);
        if (e + 1 < 4)
            pg_add(k, PG_U64, sa, sa, sjstep);
    }
    for (unsigned e = 0; e < 4; e++)
        for (unsigned i = 0; i < NI; i++)
            for (unsigned x = 0; x < 4; x++)
                pg_fma(k, PG_F32, acc[i][x], gv[i][e], sv[e][x], acc[i][x]);
    for (unsigned i = 0; i < NI; i++)
        pg_add(k, PG_U64, gp[i], gp[i], pg_u64(NG * 4 * es));
    pg_add(k, PG_U64, sp, sp, sstep);
    pg_add(k, PG_U32, r0, r0, pg_u32(NG * 4));
    pg_add(k, PG_U32, v, v, pg_u32(NG));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, v, nv);
    pg_bra_if(k, more, false, top);
}

/* G r-major: a vector of r's of each of the thread's rows a step, against
 * S's rows (r-major) or S's runs of J (transposed). */
static void narrow_g_rmajor(pg_kernel *k, const narrow *nr)
{
    const pg_type it = nr->it;
    const unsigned es = nr->es, JC = nr->JC, NI = nr->NI;
    const bool st = nr->st;
    const pg_label top = nr->top, end = nr->end;
    const pg_reg g = nr->g, ldg = nr->ldg, lds = nr->lds, I = nr->I, J = nr->J, R = nr->R,
                 rl = nr->rl, i0 = nr->i0, sjstep = nr->sjstep, svec = nr->svec, jb = nr->jb,
                 sjb = nr->sjb;
    const pg_reg(*acc)[64] = nr->acc;
    pg_comment(k, "G r-major: for each of the thread's rows a vector of r's a step");
    const unsigned VR = 16 / es;
    pg_reg gvec = pgk_vectors_ok(k, g, ldg, VR, es);
    pg_reg nv = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, R, pg_u32(VR - 1)), pg_u32(log2u(VR)));
    pg_reg v = pgv_mov(k, PG_U32, rl);
    pg_reg r0 = pgv_shl(k, PG_B32, v, pg_u32(log2u(VR)));
    pg_reg gp[4], gin[4];
    for (unsigned i = 0; i < NI; i++) {
        pg_reg row = pgv_add(k, PG_U32, i0, pg_u32(i));
        gin[i] = pgv_setp(k, PG_CMP_LT, PG_U32, row, I);
        gp[i] = pgk_elem_addr2(k, g, row, ldg, r0, es);
    }
    pg_reg sp = st ? pgk_elem_addr2(k, sjb, r0, lds, pg_u32(0), es)
                   : pgk_elem_addr2(k, sjb, pg_u32(0), lds, r0, es);
    pg_reg sstep = st ? pgv_mul_wide(k, PG_U32, lds, pg_u32(NR_LANES * VR * es))
                      : pgv_mov(k, PG_U64, pg_u64(NR_LANES * VR * es));
    pg_reg go = pgv_setp(k, PG_CMP_LT, PG_U32, v, nv);
    pg_bra_if(k, go, true, end);
    pg_label_bind(k, top);
    pg_reg gv[4][8];
    for (unsigned i = 0; i < NI; i++) {
        for (unsigned e = 0; e < VR; e++)
            gv[i][e] = pg_reg_new(k, PG_F32);
        ld_run(k, it, gp[i], VR, gvec, r0, R, gin[i], gv[i]);
    }
    /* S r-major: row j's vector of the same r's, a j a step; S
     * transposed: the run of J at each r, an r a step */
    const unsigned nstep = st ? VR : JC, nrun = st ? JC : VR;
    pg_reg sa = pgv_mov(k, PG_U64, sp);
    for (unsigned q = 0; q < nstep; q++) {
        pg_reg idx = pgv_add(k, PG_U32, st ? r0 : jb, pg_u32(q));
        pg_reg in = pgv_setp(k, PG_CMP_LT, PG_U32, idx, st ? R : J);
        pg_reg sv[64];
        for (unsigned x = 0; x < nrun; x++)
            sv[x] = pg_reg_new(k, PG_F32);
        ld_run(k, it, sa, nrun, svec, st ? jb : r0, st ? J : R, in, sv);
        for (unsigned i = 0; i < NI; i++)
            for (unsigned x = 0; x < nrun; x++) {
                unsigned j = st ? x : q, e = st ? q : x;
                pg_fma(k, PG_F32, acc[i][j], gv[i][e], sv[x], acc[i][j]);
            }
        if (q + 1 < nstep)
            pg_add(k, PG_U64, sa, sa, sjstep);
    }
    for (unsigned i = 0; i < NI; i++)
        pg_add(k, PG_U64, gp[i], gp[i], pg_u64(NR_LANES * VR * es));
    pg_add(k, PG_U64, sp, sp, sstep);
    pg_add(k, PG_U32, r0, r0, pg_u32(NR_LANES * VR));
    pg_add(k, PG_U32, v, v, pg_u32(NR_LANES));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, v, nv);
    pg_bra_if(k, more, false, top);
}

/* G transposed: the thread's run of i at NR_UNROLL r's a step. */
static void narrow_g_trans(pg_kernel *k, const narrow *nr)
{
    const pg_type it = nr->it;
    const unsigned es = nr->es, JC = nr->JC, NI = nr->NI;
    const bool st = nr->st;
    const pg_label top = nr->top, end = nr->end;
    const pg_reg g = nr->g, ldg = nr->ldg, lds = nr->lds, I = nr->I, J = nr->J, R = nr->R,
                 rl = nr->rl, i0 = nr->i0, sjstep = nr->sjstep, svec = nr->svec, jb = nr->jb,
                 sjb = nr->sjb;
    const pg_reg(*acc)[64] = nr->acc;
    pg_comment(k, "G transposed: the thread's run of i at one r a step");
    pg_reg gvec = pgk_vectors_ok(k, g, ldg, NI, es);
    pg_reg r = pgv_mov(k, PG_U32, rl);
    pg_reg gp = pgk_elem_addr2(k, g, r, ldg, i0, es);
    pg_reg gstep = pgv_mul_wide(k, PG_U32, ldg, pg_u32(NR_LANES * es));
    pg_reg sp = st ? pgk_elem_addr2(k, sjb, r, lds, pg_u32(0), es)
                   : pgk_elem_addr2(k, sjb, pg_u32(0), lds, r, es);
    pg_reg sstep = st ? pgv_mul_wide(k, PG_U32, lds, pg_u32(NR_LANES * es))
                      : pgv_mov(k, PG_U64, pg_u64(NR_LANES * es));
    pg_reg go = pgv_setp(k, PG_CMP_LT, PG_U32, r, R);
    pg_bra_if(k, go, true, end);
    pg_label_bind(k, top);
    pg_comment(k, "the G runs of NR_UNROLL r's first: their loads in flight together");
    pg_reg gv[NR_UNROLL][4], rin[NR_UNROLL], ga = pgv_mov(k, PG_U64, gp);
    for (unsigned u = 0; u < NR_UNROLL; u++) {
        pg_reg ru = pgv_add(k, PG_U32, r, pg_u32(u * NR_LANES));
        rin[u] = pgv_setp(k, PG_CMP_LT, PG_U32, ru, R);
        for (unsigned i = 0; i < NI; i++)
            gv[u][i] = pg_reg_new(k, PG_F32);
        ld_run(k, it, ga, NI, gvec, i0, I, rin[u], gv[u]);
        if (u + 1 < NR_UNROLL)
            pg_add(k, PG_U64, ga, ga, gstep);
    }
    pg_reg sa = pgv_mov(k, PG_U64, sp);
    for (unsigned u = 0; u < NR_UNROLL; u++) {
        pg_reg sv[64];
        for (unsigned j = 0; j < JC; j++)
            sv[j] = pg_reg_new(k, PG_F32);
        if (st) {
            ld_run(k, it, sa, JC, svec, jb, J, rin[u], sv);
        } else {
            pg_reg ins[64];
            for (unsigned j = 0; j < JC; j++)
                ins[j] = pgv_and(k, PG_PRED,
                                 pgv_setp(k, PG_CMP_LT, PG_U32,
                                          pgv_add(k, PG_U32, jb, pg_u32(j)), J),
                                 rin[u]);
            ld_strided(k, it, sa, sjstep, JC, ins, sv);
        }
        for (unsigned i = 0; i < NI; i++)
            for (unsigned j = 0; j < JC; j++)
                pg_fma(k, PG_F32, acc[i][j], gv[u][i], sv[j], acc[i][j]);
        if (u + 1 < NR_UNROLL)
            pg_add(k, PG_U64, sa, sa, sstep);
    }
    pg_add(k, PG_U64, gp, gp, pgv_shl(k, PG_B64, gstep, pg_u32(log2u(NR_UNROLL))));
    pg_add(k, PG_U64, sp, sp, pgv_shl(k, PG_B64, sstep, pg_u32(log2u(NR_UNROLL))));
    pg_add(k, PG_U32, r, r, pg_u32(NR_LANES * NR_UNROLL));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, r, R);
    pg_bra_if(k, more, false, top);
}

/* Split over J: group g's partials to row g of shared memory. */
static void narrow_partials_jsplit(pg_kernel *k, const narrow *nr)
{
    const unsigned JC = nr->JC, NI = nr->NI, NQ = nr->NQ, RS = nr->RS;
    const pg_reg tid = nr->tid, rbase = nr->rbase;
    const pg_reg(*acc)[64] = nr->acc;
    pg_comment(k, "slice-K: group g's partials to row g (lane q's at columns i*JC + 4q..), "
                  "summed in group order");
    pg_reg grp = pgv_shr(k, PG_U32, tid, pg_u32(log2u(NQ)));
    pg_reg mine = pgv_mul(k, PG_U32, grp, pg_u32(RS * 4));
    pg_add(k, PG_U32, mine, mine, rbase);
    pg_reg q16 = pgv_shl(k, PG_B32, pgv_and(k, PG_B32, tid, pg_u32(NQ - 1)), pg_u32(4));
    pg_add(k, PG_U32, mine, mine, q16);
    for (unsigned i = 0; i < NI; i++) {
        pg_val w[4] = {acc[i][0], acc[i][1], acc[i][2], acc[i][3]};
        pg_st_v(k, PG_SPACE_SHARED, PG_F32, 4, mine, i * JC * 4, w);
    }
    pg_bar_sync(k, 0);
}

/* The partials to shared memory, a round of NR_ROWS threads at a time;
 * lanes r and r + 64 of a transposed G add theirs into one row. */
static void narrow_partials(pg_kernel *k, const narrow *nr)
{
    const unsigned JC = nr->JC, T = nr->T, SL = nr->SL, RS = nr->RS;
    const pg_reg tid = nr->tid, rbase = nr->rbase;
    const pg_reg(*acc)[64] = nr->acc;
    pg_comment(k, "slice-K: the partials to shared memory (lanes r and r + 64 of a transposed "
                  "G add theirs into one row), summed in lane order");
    pg_reg rowi = pgv_and(k, PG_B32, tid, pg_u32(NR_ROWS - 1));
    pg_reg mine = pgv_mul(k, PG_U32, rowi, pg_u32(RS * 4));
    pg_add(k, PG_U32, mine, mine, rbase);
    pg_reg round = pgv_shr(k, PG_U32, tid, pg_u32(log2u(NR_ROWS)));
    for (unsigned rd0 = 0; rd0 < T / NR_ROWS; rd0++) {
        pg_label not_mine = pg_label_new(k, "not_my_round");
        pg_reg me = pgv_setp(k, PG_CMP_EQ, PG_U32, round, pg_u32(rd0));
        pg_bra_if(k, me, true, not_mine);
        for (unsigned e = 0; e < SL; e += 4) {
            pg_val w[4];
            if (rd0 == 0) {
                for (unsigned x = 0; x < 4; x++)
                    w[x] = acc[(e + x) / JC][(e + x) % JC];
            } else {
                pg_reg old[4];
                for (unsigned x = 0; x < 4; x++)
                    old[x] = pg_reg_new(k, PG_F32);
                pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, mine, e * 4, old);
                for (unsigned x = 0; x < 4; x++)
                    w[x] = pgv_add(k, PG_F32, old[x], acc[(e + x) / JC][(e + x) % JC]);
            }
            pg_st_v(k, PG_SPACE_SHARED, PG_F32, 4, mine, e * 4, w);
        }
        pg_label_bind(k, not_mine);
        pg_bar_sync(k, 0);
    }
}

/* Each slot's sum over the partials, plus bias, to C. */
static void narrow_store(pg_kernel *k, const narrow *nr, const thin_out *o0)
{
    thin_out o = *o0;
    const unsigned JC = nr->JC, NI = nr->NI, LI = nr->LI, SL = nr->SL, RS = nr->RS, PER = nr->PER;
    const bool fq = nr->fq;
    const pg_reg I = nr->I, J = nr->J, Q = nr->Q, tid = nr->tid, ib = nr->ib, rbase = nr->rbase,
                 jb = nr->jb;
    pg_label skip = pg_label_new(k, "no_slot");
    pg_reg slot = pgv_setp(k, PG_CMP_LT, PG_U32, tid, pg_u32(LI * SL));
    pg_bra_if(k, slot, true, skip);
    pg_reg sl = pgv_and(k, PG_B32, tid, pg_u32(SL - 1)); /* the slot: row i, column j */
    pg_reg sli = pgv_shr(k, PG_U32, tid, pg_u32(log2u(SL)));
    pg_reg rd = pgv_mad(k, PG_U32, sli, pg_u32(RS), sl);
    pg_shl(k, PG_B32, rd, rd, pg_u32(2));
    pg_add(k, PG_U32, rd, rd, rbase);
    pg_reg sum = pgv_ld(k, PG_SPACE_SHARED, PG_F32, rd, 0);
    for (unsigned u = 1; u < PER; u++) {
        pg_reg x = pgv_ld(k, PG_SPACE_SHARED, PG_F32, rd, (int64_t)u * LI * RS * 4);
        pg_add(k, PG_F32, sum, sum, x);
    }
    pg_reg i = pgv_mad(k, PG_U32, sli, pg_u32(NI), ib);
    pg_add(k, PG_U32, i, i, pgv_shr(k, PG_U32, sl, pg_u32(log2u(JC))));
    pg_reg j = pgv_add(k, PG_U32, pgv_and(k, PG_B32, sl, pg_u32(JC - 1)), jb);
    pg_reg jin = pgv_setp(k, PG_CMP_LT, PG_U32, j, J);
    pg_reg ok = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LT, PG_U32, i, I), jin);
    /* C[p][q]: form Q (i, j) = (p, q); form P (i, j) = (q, p) */
    pg_reg row = fq ? i : j, colr = fq ? j : i;
    pg_reg bv = pgk_thin_bias_at(k, &o, colr, Q);
    pg_add(k, PG_F32, sum, sum, bv);
    pg_reg addr = pgk_elem_addr2(k, o.c, row, Q, colr, out_size(o.ot));
    pg_reg v = pgk_gemm_finish_value(k, o.ot, sum, addr, ok, o.do_acc);
    pgk_gemm_store_value(k, o.ot, addr, ok, v, o.native);
    pg_label_bind(k, skip);
}

static void build_narrow(pg_kernel *k, unsigned layout, unsigned form, unsigned jc, pg_type it,
                         const thin_out *o, pg_reg a, pg_reg b, pg_reg m, pg_reg n, pg_reg kd)
{
    narrow nr = {.it = it, .js = thin_jsplit(layout, form, it)};
    const bool js = nr.js;
    const unsigned JC = nr.JC = pgk_thin_jc(jc), NI = nr.NI = thin_rows(JC, layout, form, it);
    const unsigned LI = nr.LI = thin_li(layout, form);
    const unsigned T = nr.T = thin_threads(layout, form, it), SL = nr.SL = NI * JC;
    const unsigned es = nr.es = pgk_thin_in_size(it);
    pg_kernel_set_maxntid(k, T, 1, 1);
    pg_kernel_set_minnctapersm(k, 512 / T); /* 128 registers: 16 warps an SM */
    /* split over J: JC/4 lanes a group of r's, one row of partials a group,
     * rows padded so that a quarter-warp's 16-byte stores miss each other */
    const unsigned NQ = nr.NQ = JC / 4, NG = nr.NG = T / NQ;
    const unsigned AJ = nr.AJ = js ? 4 : JC; /* accumulators a row */
    const unsigned RS = nr.RS = js ? SL + (NQ < 8 ? 4 * NQ : 4) : SL + 4; /* partials row stride */
    nr.PER = js ? NG : NR_ROWS / LI; /* rows a slot sums */
    const bool ta = layout == PGK_GEMM_BACKWARD_W, tb = layout != PGK_GEMM_FORWARD;
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    nr.Q = Q;
    nr.R = R;
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n, ldb = kd;
    /* G(i, r), S(j, r): form Q G = A, S = B; form P G = B, S = A */
    const bool fq = nr.fq = form == TH_FORM_Q;
    nr.g = fq ? a : b;
    nr.s = fq ? b : a;
    nr.ldg = fq ? lda : ldb;
    nr.lds = fq ? ldb : lda;
    const bool gt = fq ? ta : tb, st = nr.st = fq ? tb : ta;
    nr.I = fq ? P : Q;
    nr.J = fq ? Q : P;
    pg_shared red = pg_shared_static(k, PG_F32, (js ? NG : NR_ROWS) * RS, 16, "partials");
    nr.rbase = pgv_mov(k, PG_U32, pg_shared_addr(red));

    nr.tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg li = pgv_and(k, PG_B32, nr.tid, pg_u32(LI - 1));
    nr.rl = pgv_shr(k, PG_U32, nr.tid, pg_u32(log2u(LI)));
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    nr.ib = pgv_mul(k, PG_U32, ctaid, pg_u32(LI * NI));
    nr.i0 = pgv_mad(k, PG_U32, li, pg_u32(NI), nr.ib);

    /* S(j, ·) rows: j·lds·es bytes apart (r-major S) */
    nr.sjstep = pgv_mul_wide(k, PG_U32, nr.lds, pg_u32(es));
    nr.svec = pgk_vectors_ok(k, nr.s, nr.lds, st ? (16 / es < JC ? 16 / es : JC) : 16 / es, es);
    nr.top = pg_label_new(k, "rstep");
    nr.end = pg_label_new(k, "rdone");

    pg_comment(k, "the thin side in chunks of j (one for J up to the baked bound)");
    nr.jb = pgv_mov(k, PG_U32, pg_u32(0));
    nr.sjb = pgv_mov(k, PG_U64, nr.s); /* S at j = jb */
    pg_reg sjchunk = st ? pgv_mov(k, PG_U64, pg_u64(JC * es))
                        : pgv_mul_wide(k, PG_U32, nr.lds, pg_u32(JC * es));
    pg_label chunk = pg_label_new(k, "jchunk");
    pg_label_bind(k, chunk);
    for (unsigned i = 0; i < NI; i++)
        for (unsigned j = 0; j < AJ; j++)
            nr.acc[i][j] = pgk_zero_f32(k);

    if (js)
        narrow_jsplit(k, &nr);
    else if (!gt)
        narrow_g_rmajor(k, &nr);
    else
        narrow_g_trans(k, &nr);
    pg_label_bind(k, nr.end);

    if (js)
        narrow_partials_jsplit(k, &nr);
    else
        narrow_partials(k, &nr);
    narrow_store(k, &nr, o);
    pg_label done = pgk_thin_chunk_end(k, nr.jb, JC, nr.J);
    pg_add(k, PG_U64, nr.sjb, nr.sjb, sjchunk);
    pg_bra(k, chunk);
    pg_label_bind(k, done);
}

/* ---------------------------------------------------------------- the descriptor */

static pg_type thin_in_type(uint32_t v) { return v == TH_IN_F32 ? PG_F32 : in_type_of(v); }

static int build_thin(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    unsigned layout = kn[TH_LAYOUT], form = kn[TH_FORM];
    pg_type it = thin_in_type(kn[TH_IN]);
    pg_reg a = pg_param_load(k, p[PA_A]), b = pg_param_load(k, p[PA_B]);
    pg_reg c = pg_param_load(k, p[PA_C]), bias = pg_param_load(k, p[PA_BIAS]);
    pg_reg m = pg_param_load(k, p[PA_M]), n = pg_param_load(k, p[PA_N]);
    pg_reg kd = pg_param_load(k, p[PA_K]), flags = pg_param_load(k, p[PA_FLAGS]);
    thin_out o = {.ot = out_type_of(kn[TH_OUT]),
                  .native = pg_target_sm(pg_kernel_target(k)) >= 80,
                  .c = c,
                  .do_acc = flag_set(k, flags, FLAG_ACCUMULATE),
                  .do_bias = flag_set(k, flags, FLAG_BIAS),
                  .bias = bias};
    if (form == TH_FORM_OUTER)
        pgk_thin_build_outer(k, layout, it, &o, a, b, m, n, kd);
    else if (form >= TH_FORM_MMA_Q && it != PG_F32)
        pgk_thin_build_mma(k, layout, form == TH_FORM_MMA_Q, kn[TH_J], it, &o, a, b, m, n, kd);
    else /* f32 inputs take the mma forms as their SIMT ones */
        build_narrow(k, layout, thin_simt_form(form), kn[TH_J], it, &o, a, b, m, n, kd);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_thin(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    unsigned layout = kn[TH_LAYOUT], form = kn[TH_FORM];
    if (layout >= PGK_GEMM_LAYOUTS || form > TH_FORM_MMA_P || kn[TH_IN] > TH_IN_F32 ||
        kn[TH_OUT] > OUT_BF16)
        return PG_ERANGE;
    uint32_t P, Q, R;
    pqr_host(layout, kn[TH_M], kn[TH_N], kn[TH_K], &P, &Q, &R);
    if (!P || !Q || !R)
        return PG_ERANGE;
    if (form == TH_FORM_OUTER) {
        uint64_t blocks = (uint64_t)pgk_ceil_div(P, OUT_TP) * pgk_ceil_div(Q, OUT_TQ);
        if (blocks > 0x7fffffffu)
            return PG_ERANGE;
        *out = (pgk_launch){{(uint32_t)blocks, 1, 1}, {OUT_THREADS, 1, 1}, 0, {0, 0, 0}};
        return PG_OK;
    }
    unsigned jc = pgk_thin_jc(kn[TH_J]);
    if (form >= TH_FORM_MMA_Q && kn[TH_IN] != TH_IN_F32) {
        uint32_t I = form == TH_FORM_MMA_Q ? P : Q;
        *out = (pgk_launch){
            {pgk_ceil_div(I, 16), 1, 1}, {32 * pgk_thin_tc_warps(jc), 1, 1}, 0, {0, 0, 0}};
        return PG_OK;
    }
    form = thin_simt_form(form);
    uint32_t I = form == TH_FORM_Q ? P : Q;
    unsigned li = thin_li(layout, form);
    pg_type it = thin_in_type(kn[TH_IN]);
    *out = (pgk_launch){{pgk_ceil_div(I, li * thin_rows(jc, layout, form, it)), 1, 1},
                        {thin_threads(layout, form, it), 1, 1}, 0, {0, 0, 0}};
    return PG_OK;
}

/* The form and j for the sizes: narrow on the thinner of P and Q when it
 * is at most 64 and R is not thinner; else outer. */
void pgk_gemm_thin_form(unsigned layout, uint32_t m, uint32_t n, uint32_t k, uint32_t *form,
                        uint32_t *j)
{
    uint32_t P, Q, R;
    pqr_host(layout, m, n, k, &P, &Q, &R);
    uint32_t t = P < Q ? P : Q;
    if (t <= 64 && t < R) {
        *form = Q <= P ? TH_FORM_Q : TH_FORM_P;
        *j = pgk_thin_jc(t);
    } else {
        *form = TH_FORM_OUTER;
        *j = 16;
    }
}

bool pgk_gemm_thin_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t m,
                          uint32_t n, uint32_t k, pg_target target, pgk_gemm_choice *out)
{
    if (!pgk_gemm_thin_shape(layout, in_type, m, n, k, target) ||
        pgk_gemm_choice_init(layout, m, n, k, target, out) != PG_OK)
        return false;
    uint32_t form, j;
    pgk_gemm_thin_form(layout, m, n, k, &form, &j);
    if (in_type != PG_F32 && form != TH_FORM_OUTER && pg_target_sm(target) >= 80)
        form = form == TH_FORM_Q ? TH_FORM_MMA_Q : TH_FORM_MMA_P; /* on the tensor cores */
    out->desc = &pgk_desc_gemm_thin;
    out->tile = 0;
    out->split = 1;
    out->m = m;
    out->n = n;
    out->k = k;
    pgk_knobs_default(out->desc, &out->knobs);
    out->knobs.v[TH_M] = m;
    out->knobs.v[TH_N] = n;
    out->knobs.v[TH_K] = k;
    out->knobs.v[TH_LAYOUT] = layout;
    out->knobs.v[TH_IN] = in_type == PG_F32 ? TH_IN_F32 : in_type == PG_BF16 ? IN_BF16 : IN_F16;
    out->knobs.v[TH_OUT] = out_knob(out_type);
    out->knobs.v[TH_FORM] = form;
    out->knobs.v[TH_J] = j;
    return true;
}

bool pgk_gemm_thin_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                            pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                            uint32_t *k)
{
    if (d != &pgk_desc_gemm_thin)
        return false;
    const uint32_t *v = kn->v;
    *layout = (pgk_gemm_layout)(v[TH_LAYOUT] < PGK_GEMM_LAYOUTS ? v[TH_LAYOUT] : 0);
    *in_type = thin_in_type(v[TH_IN]);
    *out_type = out_type_of(v[TH_OUT]);
    *m = v[TH_M];
    *n = v[TH_N];
    *k = v[TH_K];
    return true;
}

static void pick_thin(const pgk_desc *d, uint32_t *kn)
{
    (void)d;
    if (kn[TH_LAYOUT] < PGK_GEMM_LAYOUTS)
        pgk_gemm_thin_form(kn[TH_LAYOUT], kn[TH_M], kn[TH_N], kn[TH_K], &kn[TH_FORM], &kn[TH_J]);
}

static const pgk_knob thin_knobs[] = {
    [TH_M] = {"m", 2048, 1, MM_MAX_DIM, "M of the layout (tokens)", false},
    [TH_N] = {"n", 16, 1, MM_MAX_DIM, "N of the layout (outputs)", false},
    [TH_K] = {"k", 1536, 1, MM_MAX_DIM, "K of the layout (inputs)", false},
    [TH_LAYOUT] = {"layout", PGK_GEMM_FORWARD, 0, PGK_GEMM_LAYOUTS - 1,
                   "0 = forward Y = X W^T, 1 = backward_x dX = dY W, 2 = backward_w dW = dY^T X",
                   true},
    [TH_IN] = {"in", IN_BF16, IN_F16, TH_IN_F32, "input type: 0 = f16, 1 = bf16, 2 = f32", true},
    [TH_OUT] = {"out", OUT_BF16, OUT_F32, OUT_BF16, "output type: 0 = f32, 1 = f16, 2 = bf16",
                true},
    [TH_FORM] = {"form", TH_FORM_Q, TH_FORM_OUTER, TH_FORM_MMA_P,
                 "0 = outer (R thin), 1 = narrow on Q (Q thin), 2 = narrow on P (P thin), "
                 "3 and 4 = 1 and 2 on mma.sync (16-bit inputs, sm_80+; f32 inputs run 1, 2)",
                 true},
    [TH_J] = {"j", 16, 1, 64,
              "narrow: the thin side's bound (rounded up to a power of two, 8 at least)", true},
};


const pgk_desc pgk_desc_gemm_thin = {
    .name = "gemm_thin",
    .summary = "the GEMM layouts with a side of at most 64 (LoRA ranks): f16/bf16/f32 in, f32 "
               "FMA, one launch, slice-K summed in a fixed order",
    PGK_PARAMS(pgk_gemm_params),
    PGK_KNOBS(thin_knobs),
    .min_target = PG_SM_70,
    .build = build_thin,
    .launch = launch_thin,
    .pick = pick_thin,
};
