/* SPDX-License-Identifier: MIT */
/*
 * What several files of the gemm_thin family call (gemm_thin.h): element
 * loads as f32, the run and bias tests, the output's vector stores and the
 * end of a chunk of J. Calls none of gemm_thin.c, gemm_thin_outer.c,
 * gemm_thin_mma.c.
 */
#include "gemm_thin.h"

/* ---------------------------------------------------------------- elements */

unsigned pgk_thin_in_size(pg_type it) { return it == PG_F32 ? 4 : 2; }

pg_reg pgk_thin_half_f32(pg_kernel *k, pg_type it, pg_reg w, bool hi)
{
    if (it == PG_BF16) { /* the top half of an f32, made in the f32 register */
        pg_reg f = pg_reg_new(k, PG_F32);
        if (hi)
            pg_and(k, PG_B32, f, w, pg_u32(0xffff0000u));
        else
            pg_shl(k, PG_B32, f, w, pg_u32(16));
        return f;
    }
    pg_reg h = pg_reg_new(k, PG_U16);
    pg_cvt(k, PG_U16, PG_U32, PG_RND_NONE, h, hi ? pgv_shr(k, PG_U32, w, pg_u32(16)) : w);
    return pgk_h_to_f32(k, PG_F16, pgv_mov(k, PG_B16, h));
}

/* The element at addr + off as f32 where `in`, else 0 (a new register). */
pg_reg pgk_thin_ld_one(pg_kernel *k, pg_type it, pg_reg addr, int64_t off, pg_reg in)
{
    if (it == PG_F32) {
        pg_reg f = pgk_zero_f32(k);
        pg_guard(k, in, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, off, f);
        return f;
    }
    pg_reg h = pgv_mov(k, PG_B16, pg_u32(0));
    pg_guard(k, in, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_B16, addr, off, h);
    return pgk_h_to_f32(k, it, h);
}

/* Whether idx + e < n, for e = 0 .. count-1 (into ins), and all of them
 * with `also` (returned). */
pg_reg pgk_thin_run_inside(pg_kernel *k, pg_reg idx, pg_reg n, unsigned count, pg_reg also,
                           pg_reg *ins)
{
    for (unsigned e = 0; e < count; e++) {
        pg_reg ie = pgv_add(k, PG_U32, idx, pg_u32(e));
        ins[e] = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LT, PG_U32, ie, n), also);
    }
    pg_reg end = pgv_add(k, PG_U32, idx, pg_u32(count));
    return pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, end, n), also);
}

/* ---------------------------------------------------------------- the output */

/* Four consecutive outputs at addr from v[] (f32, bias already added):
 * one vector store (after one vector load when accumulating) where
 * `full`, else element by element where ins[e]. */
void pgk_thin_store_run4(pg_kernel *k, const thin_out *o, pg_reg addr, pg_reg *v, pg_reg full,
                         const pg_reg *ins)
{
    pg_label scalar = pg_label_new(k, "st_scalar"), done = pg_label_new(k, "st_done");
    pg_bra_if(k, full, true, scalar);
    if (o->ot == PG_F32) {
        pg_reg old[4];
        for (unsigned e = 0; e < 4; e++)
            old[e] = pgv_mov(k, PG_F32, pg_f32(0.0f));
        pg_guard(k, o->do_acc, false);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, old);
        pg_val s[4];
        for (unsigned e = 0; e < 4; e++)
            s[e] = pgv_add(k, PG_F32, old[e], v[e]);
        pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, addr, 0, s);
    } else {
        pg_reg w[2];
        for (unsigned i = 0; i < 2; i++)
            w[i] = pgv_mov(k, PG_B32, pg_u32(0));
        pg_guard(k, o->do_acc, false);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_B32, 2, addr, 0, w);
        pg_val packed[2];
        for (unsigned i = 0; i < 2; i++) {
            pg_reg h[2];
            for (unsigned e = 0; e < 2; e++) {
                pg_reg old = pgk_thin_half_f32(k, o->ot, w[i], e == 1);
                pg_reg s = pgv_add(k, PG_F32, old, v[2 * i + e]);
                h[e] = pgk_f32_to_h(k, o->ot, s, o->native);
            }
            pg_reg p = pgv_shl(k, PG_B32, h[1], pg_u32(16));
            pg_or(k, PG_B32, p, p, h[0]);
            packed[i] = p;
        }
        pg_st_v(k, PG_SPACE_GLOBAL, PG_B32, 2, addr, 0, packed);
    }
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    unsigned es = out_size(o->ot);
    for (unsigned e = 0; e < 4; e++) {
        pg_reg a = pgv_add(k, PG_U64, addr, pg_u64(e * es));
        pg_reg s = pgk_gemm_finish_value(k, o->ot, v[e], a, ins[e], o->do_acc);
        pgk_gemm_store_value(k, o->ot, a, ins[e], s, o->native);
    }
    pg_label_bind(k, done);
}

pg_label pgk_thin_chunk_end(pg_kernel *k, pg_reg jb, unsigned JC, pg_reg J)
{
    pg_add(k, PG_U32, jb, jb, pg_u32(JC));
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, jb, J);
    pg_label done = pg_label_new(k, "jdone");
    pg_bra_if(k, more, true, done);
    pg_comment(k, "the next chunk: every thread done with the partials first");
    pg_bar_sync(k, 0);
    return done;
}

/* bias[col] where the flags ask for it and col < ncols, else 0. */
pg_reg pgk_thin_bias_at(pg_kernel *k, const thin_out *o, pg_reg col, pg_reg ncols)
{
    pg_reg b = pgk_zero_f32(k);
    pg_reg ok = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LT, PG_U32, col, ncols), o->do_bias);
    pg_reg a = pgk_elem_addr(k, o->bias, col, 4);
    pg_guard(k, ok, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0, b);
    return b;
}

/* J rounded up to a power of two, 8 at least, 64 at most. */
unsigned pgk_thin_jc(uint32_t j)
{
    unsigned jc = 8;
    while (jc < j && jc < 64)
        jc *= 2;
    return jc;
}
