/* SPDX-License-Identifier: MIT */
/* The pieces the GEMM kernels share: element addresses, the vector test,
 * the f32 register-blocking tile mover, the packed 2-byte edge loads and
 * the mma.sync epilogue (gemm_tile.h). */
#include "gemm_tile.h"

void pgk_loop_back(pg_kernel *k, pg_reg t, pg_val n, pg_label top)
{
    pg_add(k, PG_U32, t, t, pg_u32(1));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, t, n);
    pg_bra_if(k, more, false, top);
}

pg_reg pgk_elem_addr2(pg_kernel *k, pg_reg base, pg_val row, pg_val ld, pg_val col,
                      unsigned esize)
{
    pg_reg off = pg_reg_new(k, PG_U64), c64 = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, off, row, ld);
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, c64, col);
    pg_add(k, PG_U64, off, off, c64);
    pg_shl(k, PG_B64, off, off, pg_u32(log2u(esize)));
    return pgv_add(k, PG_U64, base, off);
}

pg_reg pgk_vectors_ok(pg_kernel *k, pg_reg base, pg_reg ld, unsigned vec, unsigned esize)
{
    pg_reg lowbits = pgv_and(k, PG_B64, base, pg_u64(vec * esize - 1));
    pg_reg aligned = pgv_setp(k, PG_CMP_EQ, PG_U64, lowbits, pg_u64(0));
    pg_reg rem = pgv_and(k, PG_B32, ld, pg_u32(vec - 1));
    pg_reg whole = pgv_setp(k, PG_CMP_EQ, PG_U32, rem, pg_u32(0));
    return pgv_and(k, PG_PRED, aligned, whole);
}

/* ---- the register-blocking tile mover ---- */

/* p0: the block's first p (or q); stage_off: byte offset of this
 * operand's tile inside a stage. */
void pgk_rb_operand_init(pg_kernel *k, pgk_rb_operand *op, const pgk_rb_cfg *c, unsigned bt,
                         bool contig_r, pg_reg base, pg_reg ld, pg_reg ext, pg_reg R,
                         pg_reg p0, pg_reg rbeg, pg_reg tid, unsigned stage_off)
{
    unsigned threads = pgk_rb_threads(c);
    op->contig_r = contig_r;
    op->bt = bt;
    op->bk = c->bk;
    op->stride = bt + 4;
    op->nslots = bt * c->bk / 4 / threads;
    op->ext = ext;
    op->R = R;
    pg_reg vec = pgk_vectors_ok(k, base, ld, 4, 4);
    if (contig_r) {
        op->step = pg_u64(c->bk * 4);
    } else {
        pg_reg st = pgv_mul_wide(k, PG_U32, ld, pg_u32(c->bk * 4));
        op->step = st;
    }
    for (unsigned j = 0; j < op->nslots; j++) {
        pgk_rb_slot *s = &op->s[j];
        pg_reg f = pgv_add(k, PG_U32, tid, pg_u32(j * threads));
        pg_reg pl, rl; /* position inside the tile */
        if (contig_r) { /* memory rows of bk floats: bk/4 vectors a row */
            pl = pgv_shr(k, PG_U32, f, pg_u32(log2u(c->bk / 4)));
            rl = pgv_shl(k, PG_B32, pgv_and(k, PG_B32, f, pg_u32(c->bk / 4 - 1)), pg_u32(2));
            s->pidx = pgv_add(k, PG_U32, p0, pl);
            s->ridx = pg_reg_new(k, PG_U32); /* advances; rl does not */
            pg_mov(k, PG_U32, s->ridx, rl);
            if (rbeg.kind != PG_VAL_NONE)
                pg_add(k, PG_U32, s->ridx, s->ridx, rbeg);
            s->inrow = pgv_setp(k, PG_CMP_LT, PG_U32, s->pidx, ext);
            s->vrow = pgv_and(k, PG_PRED, s->inrow, vec);
            s->ptr = pgk_elem_addr2(k, base, s->pidx, ld, s->ridx, 4);
        } else { /* memory rows of bt floats: bt/4 vectors a row */
            rl = pgv_shr(k, PG_U32, f, pg_u32(log2u(bt / 4)));
            pl = pgv_shl(k, PG_B32, pgv_and(k, PG_B32, f, pg_u32(bt / 4 - 1)), pg_u32(2));
            s->pidx = pgv_add(k, PG_U32, p0, pl);
            s->ridx = pgv_mov(k, PG_U32, rl);
            if (rbeg.kind != PG_VAL_NONE)
                pg_add(k, PG_U32, s->ridx, s->ridx, rbeg);
            s->inrow = (pg_reg){0, 0, 0};
            pg_reg end = pgv_add(k, PG_U32, s->pidx, pg_u32(4));
            s->vrow = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, end, ext), vec);
            s->ptr = pgk_elem_addr2(k, base, s->ridx, ld, s->pidx, 4);
        }
        s->wr = pgv_mad(k, PG_U32, rl, pg_u32(op->stride), pl);
        pg_shl(k, PG_B32, s->wr, s->wr, pg_u32(2));
        if (stage_off)
            pg_add(k, PG_U32, s->wr, s->wr, pg_u32(stage_off));
        for (int e = 0; e < 4; e++)
            s->x[e] = pg_reg_new(k, PG_F32);
    }
}

/* Global -> registers: one 16-byte load when the whole vector is inside
 * and aligned, else four guarded loads with zeros outside. */
static void rb_slot_load(pg_kernel *k, const pgk_rb_operand *op, const pgk_rb_slot *s)
{
    pg_reg full = pg_reg_new(k, PG_PRED);
    if (op->contig_r) {
        pg_reg end = pgv_add(k, PG_U32, s->ridx, pg_u32(4));
        pg_setp(k, PG_CMP_LE, PG_U32, full, end, op->R);
    } else {
        pg_setp(k, PG_CMP_LT, PG_U32, full, s->ridx, op->R);
    }
    pg_and(k, PG_PRED, full, full, s->vrow);
    pg_guard(k, full, false);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, s->ptr, 0, s->x);
    pg_label done = pg_label_new(k, "loaded");
    pg_bra_if(k, full, false, done);
    pg_reg rin = op->contig_r ? s->inrow : pgv_setp(k, PG_CMP_LT, PG_U32, s->ridx, op->R);
    for (int e = 0; e < 4; e++) {
        pg_mov(k, PG_F32, s->x[e], pg_f32(0.0f));
        pg_reg idx = pgv_add(k, PG_U32, op->contig_r ? s->ridx : s->pidx, pg_u32((uint32_t)e));
        pg_reg in = pgv_setp(k, PG_CMP_LT, PG_U32, idx, op->contig_r ? op->R : op->ext);
        pg_and(k, PG_PRED, in, in, rin);
        pg_guard(k, in, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, s->ptr, e * 4, s->x[e]);
    }
    pg_label_bind(k, done);
}

void pgk_rb_operand_load(pg_kernel *k, const pgk_rb_operand *op)
{
    for (unsigned j = 0; j < op->nslots; j++)
        rb_slot_load(k, op, &op->s[j]);
}

void pgk_rb_operand_advance(pg_kernel *k, const pgk_rb_operand *op)
{
    for (unsigned j = 0; j < op->nslots; j++) {
        pg_add(k, PG_U64, op->s[j].ptr, op->s[j].ptr, op->step);
        pg_add(k, PG_U32, op->s[j].ridx, op->s[j].ridx, pg_u32(op->bk));
    }
}

/* Registers -> the stage at `stage` (a u32 shared address). */
void pgk_rb_operand_store(pg_kernel *k, const pgk_rb_operand *op, pg_reg stage)
{
    for (unsigned j = 0; j < op->nslots; j++) {
        const pgk_rb_slot *s = &op->s[j];
        pg_reg a = pgv_add(k, PG_U32, stage, s->wr);
        if (op->contig_r) { /* transpose: 4 consecutive r of one p */
            for (unsigned e = 0; e < 4; e++)
                pg_st(k, PG_SPACE_SHARED, PG_F32, a, (int64_t)(e * op->stride * 4), s->x[e]);
        } else {
            pg_val v[4] = {s->x[0], s->x[1], s->x[2], s->x[3]};
            pg_st_v(k, PG_SPACE_SHARED, PG_F32, 4, a, 0, v);
        }
    }
}

void pgk_rb_loop_head(pg_kernel *k, pgk_rb_loop *L, pg_reg ntiles)
{
    L->top = pg_label_new(k, "tile");
    pg_label compute = pg_label_new(k, "compute");
    L->epilogue = pg_label_new(k, "epilogue");
    pg_label_bind(k, L->top);
    L->t1 = pgv_add(k, PG_U32, L->t, pg_u32(1));
    L->has_next = pgv_setp(k, PG_CMP_LT, PG_U32, L->t1, ntiles);
    pg_bra_if(k, L->has_next, true, compute);
    pg_comment(k, "prefetch r-tile t+1 into registers");
    pgk_rb_operand_advance(k, L->x);
    pgk_rb_operand_advance(k, L->y);
    pgk_rb_operand_load(k, L->x);
    pgk_rb_operand_load(k, L->y);
    pg_label_bind(k, compute);
}

void pgk_rb_loop_tail(pg_kernel *k, const pgk_rb_loop *L)
{
    pg_bra_if(k, L->has_next, true, L->epilogue);
    pg_comment(k, "registers into the other stage; one barrier a tile");
    pg_reg other = pgv_sub(k, PG_U32, pg_u32(L->stage), L->cur);
    pg_reg ws = pgv_add(k, PG_U32, L->sbase, other);
    pgk_rb_operand_store(k, L->x, ws);
    pgk_rb_operand_store(k, L->y, ws);
    pg_bar_sync(k, 0);
    pg_mov(k, PG_U32, L->cur, other);
    pg_mov(k, PG_U32, L->t, L->t1);
    pg_bra(k, L->top);
    pg_label_bind(k, L->epilogue);
}

void pgk_col4_tests(pg_kernel *k, pg_reg col, pg_reg Q, pg_reg cvec, pg_reg *full, pg_reg in[4],
                    pg_reg *off)
{
    pg_reg end = pgv_add(k, PG_U32, col, pg_u32(4));
    *full = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, end, Q), cvec);
    for (unsigned e = 0; e < 4; e++) {
        pg_reg ce = pgv_add(k, PG_U32, col, pg_u32(e));
        in[e] = pgv_setp(k, PG_CMP_LT, PG_U32, ce, Q);
    }
    *off = pgv_mul_wide(k, PG_U32, col, pg_u32(4));
}

void pgk_row4_preds(pg_kernel *k, pg_reg rin, pg_reg colfull, const pg_reg colin[4],
                    pg_reg *full, pg_reg ok[4])
{
    *full = pgv_and(k, PG_PRED, rin, colfull);
    pg_reg partial = pgv_not(k, PG_PRED, *full);
    pg_and(k, PG_PRED, partial, partial, rin);
    for (unsigned e = 0; e < 4; e++)
        ok[e] = pgv_and(k, PG_PRED, partial, colin[e]);
}

void pgk_st_f32x4_edge(pg_kernel *k, pg_reg addr, const pg_reg v[4], pg_reg full,
                       const pg_reg ok[4])
{
    pg_val sv[4] = {v[0], v[1], v[2], v[3]};
    pg_guard(k, full, false);
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, sv);
    for (unsigned e = 0; e < 4; e++) {
        pg_guard(k, ok[e], false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, e * 4, v[e]);
    }
}

void pgk_rb_store(pg_kernel *k, const pgk_rb_cfg *c, const pgk_rb_out *o,
                  pg_reg (*acc)[RB_MAX_T])
{
    const unsigned thx = c->bn / c->tn, thy = c->bm / c->tm;
    pg_comment(k, "C rows p0 + i*4*thy + 4ty + e, columns q0 + j*4*thx + 4tx + e");
    pg_reg cvec = pgk_vectors_ok(k, o->c, o->Q, 4, 4);
    pg_reg colbase = pgv_mad(k, PG_U32, o->tx, pg_u32(4), o->q0);
    pg_reg colfull[RB_MAX_T / 4], colin[RB_MAX_T / 4][4], coff[RB_MAX_T / 4];
    for (unsigned q = 0; q < c->tn / 4; q++) {
        pg_reg col = pgv_add(k, PG_U32, colbase, pg_u32(q * thx * 4));
        pgk_col4_tests(k, col, o->Q, cvec, &colfull[q], colin[q], &coff[q]);
    }
    pg_reg rowbase = pgv_mad(k, PG_U32, o->ty, pg_u32(4), o->p0);
    for (unsigned qi = 0; qi < c->tm / 4; qi++)
        for (unsigned e = 0; e < 4; e++) {
            unsigned i = qi * 4 + e;
            pg_reg row = pgv_add(k, PG_U32, rowbase, pg_u32(qi * thy * 4 + e));
            pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, row, o->P);
            pg_reg rowptr = pgk_elem_addr2(k, o->c, row, o->Q, pg_u32(0), 4);
            for (unsigned q = 0; q < c->tn / 4; q++) {
                pg_reg addr = pgv_add(k, PG_U64, rowptr, coff[q]);
                pg_reg full, ok[4], v[4];
                pgk_row4_preds(k, rin, colfull[q], colin[q], &full, ok);
                for (unsigned j = 0; j < 4; j++)
                    v[j] = acc[i][q * 4 + j];
                if (o->accumulate) {
                    pg_reg old[4];
                    for (unsigned j = 0; j < 4; j++)
                        old[j] = pgk_zero_f32(k);
                    pg_guard(k, full, false);
                    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, old);
                    for (unsigned j = 0; j < 4; j++) {
                        pg_guard(k, ok[j], false);
                        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, j * 4, old[j]);
                    }
                    for (unsigned j = 0; j < 4; j++)
                        v[j] = pgv_add(k, PG_F32, old[j], v[j]);
                }
                pgk_st_f32x4_edge(k, addr, v, full, ok);
            }
        }
}

/* ---- f16 and mma.sync ---- */

void pgk_ld_u16x8_packed(pg_kernel *k, pg_reg ptr, pg_reg col, pg_reg n, pg_reg row_ok,
                         const pg_reg *into, pg_reg w[4])
{
    /* the elements left in the row from col: 0 where the row is out or
     * col is past n, so one compare an element and no sum can wrap */
    pg_reg lim = pgv_selp(k, PG_U32, n, pg_u32(0), row_ok);
    pg_reg left = pgv_sub(k, PG_U32, pgv_max(k, PG_U32, lim, col), col);
    pg_reg h[8];
    for (unsigned e = 0; e < 8; e++) {
        h[e] = pgv_mov(k, PG_U16, pg_u32(0));
        pg_guard(k, pgv_setp(k, PG_CMP_GT, PG_U32, left, pg_u32(e)), false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_U16, ptr, e * 2, h[e]);
    }
    for (unsigned i = 0; i < 4; i++) {
        w[i] = into ? into[i] : pg_reg_new(k, PG_B32);
        pg_pack(k, PG_B32, w[i], h[2 * i], h[2 * i + 1]);
    }
}

void pgk_st_f32_pair(pg_kernel *k, pg_reg addr, const pg_val v[2], pg_reg full,
                     pg_reg partial, const pg_reg in[2])
{
    pg_guard(k, full, false);
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, addr, 0, v);
    for (unsigned e = 0; e < 2; e++) {
        pg_reg ok = pgv_and(k, PG_PRED, partial, in[e]);
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, e * 4, v[e]);
    }
}

void pgk_stage_next(pg_kernel *k, pg_reg stage, pg_reg sbase, uint32_t bytes, uint32_t total)
{
    pg_add(k, PG_U32, stage, stage, pg_u32(bytes));
    pg_reg end = pgv_add(k, PG_U32, sbase, pg_u32(total));
    pg_reg wrap = pgv_setp(k, PG_CMP_EQ, PG_U32, stage, end);
    pg_selp(k, PG_U32, stage, sbase, stage, wrap);
}

void pgk_mma_store(pg_kernel *k, const pgk_mma_out *o)
{
    pg_reg cvec = pgk_vectors_ok(k, o->c, o->cols, 2, 4);
    pg_reg colbase = pgv_mad(k, PG_U32, o->wcol, pg_u32(o->wn), o->col0);
    pg_reg t2 = pgv_shl(k, PG_B32, o->t4, pg_u32(1));
    pg_add(k, PG_U32, colbase, colbase, t2);
    pg_reg colfull[MMA_MAX_NT], colin[MMA_MAX_NT][2], coff[MMA_MAX_NT];
    for (unsigned nt = 0; nt < o->nt; nt++) {
        pg_reg col = pgv_add(k, PG_U32, colbase, pg_u32(nt * 8));
        pg_reg end = pgv_add(k, PG_U32, col, pg_u32(2));
        colfull[nt] = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, end, o->cols), cvec);
        colin[nt][0] = pgv_setp(k, PG_CMP_LT, PG_U32, col, o->cols);
        pg_reg c1 = pgv_add(k, PG_U32, col, pg_u32(1));
        colin[nt][1] = pgv_setp(k, PG_CMP_LT, PG_U32, c1, o->cols);
        coff[nt] = pgv_mul_wide(k, PG_U32, col, pg_u32(4));
    }
    pg_reg rowbase;
    if (o->wm) {
        rowbase = pgv_mad(k, PG_U32, o->wrow, pg_u32(o->wm), o->row0);
        pg_add(k, PG_U32, rowbase, rowbase, o->g);
    } else {
        rowbase = pgv_add(k, PG_U32, o->row0, o->g);
    }
    for (unsigned mt = 0; mt < o->mt; mt++)
        for (unsigned half = 0; half < 2; half++) {
            pg_reg row = pgv_add(k, PG_U32, rowbase, pg_u32(mt * 16 + half * 8));
            pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, row, o->rows);
            pg_reg rowptr = pgk_elem_addr2(k, o->c, row, o->cols, pg_u32(0), 4);
            for (unsigned nt = 0; nt < o->nt; nt++) {
                pg_reg addr = pgv_add(k, PG_U64, rowptr, coff[nt]);
                pg_reg full = pgv_and(k, PG_PRED, rin, colfull[nt]);
                pg_reg partial = pgv_not(k, PG_PRED, full);
                pg_and(k, PG_PRED, partial, partial, rin);
                pg_val v[2] = {o->acc[mt][nt][2 * half], o->acc[mt][nt][2 * half + 1]};
                pgk_st_f32_pair(k, addr, v, full, partial, colin[nt]);
            }
        }
}

void pgk_gemm_block_tile(pg_kernel *k, unsigned bm, unsigned bn, unsigned group, pg_reg P,
                         pg_reg Q, pg_reg *p0, pg_reg *q0)
{
    pg_comment(k, "the block's tile: groups of 8 P-tiles, Q-tiles within a group");
    pg_reg np = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, P, pg_u32(bm - 1)), pg_u32(log2u(bm)));
    pg_reg nq = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, Q, pg_u32(bn - 1)), pg_u32(log2u(bn)));
    pg_reg bid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg per_group = pgv_mul(k, PG_U32, nq, pg_u32(group));
    pg_reg grp = pg_reg_new(k, PG_U32), inq = pg_reg_new(k, PG_U32);
    pg_div(k, PG_U32, grp, bid, per_group);
    pg_rem(k, PG_U32, inq, bid, per_group);
    pg_reg first = pgv_mul(k, PG_U32, grp, pg_u32(group));
    pg_reg gsize = pgv_sub(k, PG_U32, np, first);
    pg_min(k, PG_U32, gsize, gsize, pg_u32(group));
    pg_reg pt = pg_reg_new(k, PG_U32), qt = pg_reg_new(k, PG_U32);
    pg_rem(k, PG_U32, pt, inq, gsize);
    pg_add(k, PG_U32, pt, pt, first);
    pg_div(k, PG_U32, qt, inq, gsize);
    *p0 = pgv_shl(k, PG_B32, pt, pg_u32(log2u(bm)));
    *q0 = pgv_shl(k, PG_B32, qt, pg_u32(log2u(bn)));
}

pgk_split pgk_gemm_split(pg_kernel *k, unsigned bk, pg_reg R, const char *note)
{
    pgk_split r;
    pg_comment(k, note);
    pg_reg z = pg_sreg_read(k, PG_SREG_CTAID_Z), nz = pg_sreg_read(k, PG_SREG_NCTAID_Z);
    pg_reg tiles = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, R, pg_u32(bk - 1)), pg_u32(log2u(bk)));
    pg_reg per = pgv_add(k, PG_U32, tiles, nz);
    pg_sub(k, PG_U32, per, per, pg_u32(1));
    pg_div(k, PG_U32, per, per, nz);
    pg_reg t0 = pgv_mul(k, PG_U32, z, per);
    r.rbeg = pgv_shl(k, PG_B32, t0, pg_u32(log2u(bk)));
    pg_reg tend = pgv_add(k, PG_U32, t0, per);
    pg_min(k, PG_U32, tend, tend, tiles);
    pg_reg rend = pgv_shl(k, PG_B32, tend, pg_u32(log2u(bk)));
    pg_min(k, PG_U32, rend, rend, R);
    r.rend = rend;
    pg_reg ntiles = pg_reg_new(k, PG_U32);
    pg_max(k, PG_U32, ntiles, tend, t0);
    pg_sub(k, PG_U32, ntiles, ntiles, t0);
    pg_max(k, PG_U32, ntiles, ntiles, pg_u32(1));
    r.ntiles = ntiles;
    r.z = z;
    r.nz = nz;
    return r;
}
