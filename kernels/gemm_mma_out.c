/* SPDX-License-Identifier: MIT */
/*
 * The output path of the 16-bit GEMMs: 16-bit <-> f32 conversions, one
 * element's finish (bias, accumulate) and store (gemm_abi.h: used by the
 * mma.sync and thin families), and the mma.sync epilogue of gemm_mma_*
 * that writes outputs or split-K partials.
 */
#include "gemm_mma.h"

/* A 16-bit value (in a b16/u16 register) as f32: f16 by cvt, bf16 as the
 * top half of an f32 (exact, and free of cvt.f32.bf16's sm_90). */
pg_reg pgk_h_to_f32(pg_kernel *k, pg_type t, pg_reg h)
{
    if (t != PG_F16)
        return pgk_bf16_to_f32(k, h);
    pg_reg f = pg_reg_new(k, PG_F32);
    pg_cvt(k, PG_F32, PG_F16, PG_RND_NONE, f, h);
    return f;
}

/* f32 -> the 16-bit bits of type t, round to nearest even, in the low half
 * of a new u32. bf16 below sm_80 rounds with integer operations (NaN stays
 * a quiet NaN). */
pg_reg pgk_f32_to_h(pg_kernel *k, pg_type t, pg_reg f, bool native)
{
    pg_reg u = pg_reg_new(k, PG_U32);
    if (t == PG_F16 || native) {
        pg_reg h = pg_reg_new(k, PG_B16);
        pg_cvt(k, t, PG_F32, PG_RND_RN, h, f);
        pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, u, h);
        return u;
    }
    pg_reg x = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_B32, x, f);
    pg_reg lsb = pgv_and(k, PG_B32, pgv_shr(k, PG_U32, x, pg_u32(16)), pg_u32(1));
    pg_reg r = pgv_add(k, PG_U32, x, pg_u32(0x7fff));
    pg_add(k, PG_U32, r, r, lsb);
    pg_shr(k, PG_U32, u, r, pg_u32(16));
    pg_reg ax = pgv_and(k, PG_B32, x, pg_u32(0x7fffffffu));
    pg_reg nan = pgv_setp(k, PG_CMP_GT, PG_U32, ax, pg_u32(0x7f800000u));
    pg_reg q = pgv_shr(k, PG_U32, x, pg_u32(16));
    pg_or(k, PG_B32, q, q, pg_u32(0x40));
    pg_selp(k, PG_U32, u, q, u, nan);
    return u;
}

/* v plus the old value at addr + off (type ot) where rd, else v. */
static pg_reg add_old(pg_kernel *k, pg_type ot, pg_reg v, pg_reg addr, int64_t off, pg_reg rd)
{
    pg_reg old;
    if (ot == PG_F32) {
        old = pg_reg_new(k, PG_F32);
        pg_mov(k, PG_F32, old, pg_f32(0.0f));
        pg_guard(k, rd, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, off, old);
    } else {
        pg_reg h = pg_reg_new(k, PG_B16);
        pg_mov(k, PG_B16, h, pg_u32(0));
        pg_guard(k, rd, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_B16, addr, off, h);
        old = pgk_h_to_f32(k, ot, h);
    }
    pg_reg s = pg_reg_new(k, PG_F32);
    pg_add(k, PG_F32, s, old, v);
    return s;
}

/* One output element's final value: v (+ bias) then (old +) when the
 * flags say so; old is read at addr in type ot under `ok`. */
pg_reg pgk_gemm_finish_value(pg_kernel *k, pg_type ot, pg_reg v, pg_reg addr, pg_reg ok,
                             pg_reg do_acc)
{
    pg_reg rd = pgv_and(k, PG_PRED, ok, do_acc);
    return add_old(k, ot, v, addr, 0, rd);
}

/* Store an f32 value as type ot at addr under `ok`. */
void pgk_gemm_store_value(pg_kernel *k, pg_type ot, pg_reg addr, pg_reg ok, pg_reg v,
                          bool native)
{
    if (ot == PG_F32) {
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, v);
        return;
    }
    pg_reg u = pgk_f32_to_h(k, ot, v, native);
    pg_reg h = pg_reg_new(k, PG_U16);
    pg_cvt(k, PG_U16, PG_U32, PG_RND_NONE, h, u);
    pg_guard(k, ok, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_U16, addr, 0, h);
}

/* Store the accumulators: rows rowbase + mt*16 + half*8, columns
 * colbase + nt*8 + {0, 1}; a pair in one store where both columns are
 * inside and aligned, else element by element. What a column's tests
 * decide (inside, inside but not the pair's store, read for accumulation)
 * is made once a column, so that a row adds only its own test to each. */
void pgk_mma_epilogue(pg_kernel *k, const mma_epi *e, pg_reg rowbase, pg_reg colbase,
                      unsigned MT, unsigned NT, pg_reg (*acc)[MMA_MAX_NT][4])
{
    unsigned es = out_size(e->ot);
    pg_reg cvec = pgk_vectors_ok(k, e->c, e->ldc, 2, es);
    pg_reg full[MMA_MAX_NT], cin[MMA_MAX_NT][2], coff[MMA_MAX_NT], bv[MMA_MAX_NT][2];
    pg_reg cpart[MMA_MAX_NT][2], cacc[MMA_MAX_NT][2];
    for (unsigned nt = 0; nt < NT; nt++) {
        pg_reg col = pgv_add(k, PG_U32, colbase, pg_u32(nt * 8));
        pg_reg end = pgv_add(k, PG_U32, col, pg_u32(2));
        full[nt] = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, end, e->ldc), cvec);
        cin[nt][0] = pgv_setp(k, PG_CMP_LT, PG_U32, col, e->ldc);
        cin[nt][1] = pgv_setp(k, PG_CMP_LT, PG_U32, pgv_add(k, PG_U32, col, pg_u32(1)), e->ldc);
        pg_reg single = pgv_not(k, PG_PRED, full[nt]);
        for (unsigned h = 0; h < 2; h++) {
            cpart[nt][h] = pgv_and(k, PG_PRED, single, cin[nt][h]);
            cacc[nt][h] = e->partial ? pg_none() : pgv_and(k, PG_PRED, cin[nt][h], e->do_acc);
        }
        coff[nt] = pg_reg_new(k, PG_U64);
        pg_mul_wide(k, PG_U32, coff[nt], col, pg_u32(es));
        if (!e->partial) {
            pg_reg ba = pgk_elem_addr2(k, e->bias, pg_u32(0), pg_u32(0), col, 4);
            for (unsigned h = 0; h < 2; h++) {
                bv[nt][h] = pg_reg_new(k, PG_F32);
                pg_mov(k, PG_F32, bv[nt][h], pg_f32(0.0f));
                pg_reg ok = pgv_and(k, PG_PRED, cin[nt][h], e->do_bias);
                pg_guard(k, ok, false);
                pg_ld(k, PG_SPACE_GLOBAL, PG_F32, ba, h * 4, bv[nt][h]);
            }
        }
    }
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned half = 0; half < 2; half++) {
            pg_reg row = pgv_add(k, PG_U32, rowbase, pg_u32(mt * 16 + half * 8));
            pg_reg rin = pgv_setp(k, PG_CMP_LT, PG_U32, row, e->P);
            pg_reg rowptr = pgk_elem_addr2(k, e->c, row, e->ldc, pg_u32(0), es);
            for (unsigned nt = 0; nt < NT; nt++) {
                pg_reg addr = pg_reg_new(k, PG_U64);
                pg_add(k, PG_U64, addr, rowptr, coff[nt]);
                pg_reg v[2];
                for (unsigned h = 0; h < 2; h++) {
                    v[h] = acc[mt][nt][2 * half + h];
                    if (!e->partial) {
                        pg_reg s = pg_reg_new(k, PG_F32);
                        pg_add(k, PG_F32, s, v[h], bv[nt][h]);
                        pg_reg rd = pgv_and(k, PG_PRED, rin, cacc[nt][h]);
                        v[h] = add_old(k, e->ot, s, addr, (int64_t)(h * es), rd);
                    }
                }
                pg_reg f = pgv_and(k, PG_PRED, rin, full[nt]);
                if (e->ot == PG_F32) {
                    pg_guard(k, f, false);
                    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, addr, 0, (pg_val[2]){v[0], v[1]});
                    for (unsigned h = 0; h < 2; h++) {
                        pg_guard(k, pgv_and(k, PG_PRED, rin, cpart[nt][h]), false);
                        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, h * 4, v[h]);
                    }
                } else {
                    pg_reg lo = pgk_f32_to_h(k, e->ot, v[0], e->native);
                    pg_reg hi = pgk_f32_to_h(k, e->ot, v[1], e->native);
                    pg_reg w = pgv_shl(k, PG_B32, hi, pg_u32(16));
                    pg_or(k, PG_B32, w, w, lo);
                    pg_guard(k, f, false);
                    pg_st(k, PG_SPACE_GLOBAL, PG_B32, addr, 0, w);
                    pg_reg hv[2] = {lo, hi};
                    for (unsigned h = 0; h < 2; h++) {
                        pg_reg ok = pgv_and(k, PG_PRED, rin, cpart[nt][h]);
                        pg_reg h16 = pg_reg_new(k, PG_U16);
                        pg_cvt(k, PG_U16, PG_U32, PG_RND_NONE, h16, hv[h]);
                        pg_guard(k, ok, false);
                        pg_st(k, PG_SPACE_GLOBAL, PG_U16, addr, h * 2, h16);
                    }
                }
            }
        }
}
