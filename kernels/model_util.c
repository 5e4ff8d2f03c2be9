/* SPDX-License-Identifier: MIT */
/* Pieces the model kernels share: f32/bf16 loads and stores, 64-bit
 * element addresses, a strided loop, a sigmoid that never overflows, the
 * search for a document's end. */
#include "model.h"

unsigned pgk_dtype_size(pgk_dtype dt) { return dt == PGK_BF16 ? 2u : 4u; }

pg_target pgk_dtype_min_target(pgk_dtype dt) { return dt == PGK_BF16 ? PG_SM_80 : PG_SM_70; }

pg_reg pgk_ld_act(pg_kernel *k, pgk_dtype dt, pg_reg addr, bool nc)
{
    pg_type t = dt == PGK_F32 ? PG_F32 : PG_U16;
    pg_reg v = pg_reg_new(k, t);
    if (nc)
        pg_ld_nc(k, t, addr, 0, v);
    else
        pg_ld(k, PG_SPACE_GLOBAL, t, addr, 0, v);
    return dt == PGK_F32 ? v : pgk_bf16_to_f32(k, v);
}

void pgk_st_act(pg_kernel *k, pgk_dtype dt, pg_reg addr, pg_reg v)
{
    if (dt == PGK_F32) {
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, v);
        return;
    }
    pg_reg h = pg_reg_new(k, PG_BF16);
    pg_cvt(k, PG_BF16, PG_F32, PG_RND_RN, h, v);
    pg_st(k, PG_SPACE_GLOBAL, PG_BF16, addr, 0, h);
}

static uint32_t log2_size(unsigned size)
{
    uint32_t s = 0;
    while ((1u << s) < size)
        s++;
    return s;
}

pg_reg pgk_addr2(pg_kernel *k, pg_reg base, pg_val row, pg_val width, pg_val col, unsigned size)
{
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, off, row, width);
    if (pg_is_reg(col) || col.bits != 0) {
        pg_reg c = pg_reg_new(k, PG_U64);
        pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, c, col);
        pg_add(k, PG_U64, off, off, c);
    }
    pg_shl(k, PG_B64, off, off, pg_u32(log2_size(size)));
    pg_reg a = pg_reg_new(k, PG_U64);
    pg_add(k, PG_U64, a, base, off);
    return a;
}

pg_reg pgk_addr_add(pg_kernel *k, pg_reg a, pg_val b, unsigned size)
{
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, off, b, pg_u32(size));
    pg_reg r = pg_reg_new(k, PG_U64);
    pg_add(k, PG_U64, r, a, off);
    return r;
}

pg_reg pgk_f32_const(pg_kernel *k, float x)
{
    pg_reg v = pg_reg_new(k, PG_F32);
    pg_mov(k, PG_F32, v, pg_f32(x));
    return v;
}

pg_reg pgk_loop_begin(pg_kernel *k, pgk_loop *l, pg_val start, pg_val n, pg_val step)
{
    l->i = pg_reg_new(k, PG_U32);
    l->p = pg_reg_new(k, PG_PRED);
    l->n = n;
    l->step = step;
    l->top = pg_label_new(k, "loop");
    l->done = pg_label_new(k, "loop_done");
    pg_mov(k, PG_U32, l->i, start);
    pg_label_bind(k, l->top);
    pg_setp(k, PG_CMP_GE, PG_U32, l->p, l->i, n);
    pg_bra_if(k, l->p, false, l->done);
    return l->i;
}

void pgk_loop_end(pg_kernel *k, pgk_loop *l)
{
    pg_add(k, PG_U32, l->i, l->i, l->step);
    pg_bra(k, l->top);
    pg_label_bind(k, l->done);
}

pg_reg pgk_doc_search(pg_kernel *k, pg_reg row, pg_val lo, pg_val hi, unsigned shift, pg_val key)
{
    pg_reg l = pgv_mov(k, PG_U32, lo), h = pgv_mov(k, PG_U32, hi);
    pg_label top = pg_label_new(k, "doc_search"), done = pg_label_new(k, "doc_found");
    pg_label_bind(k, top);
    pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, l, h), false, done);
    pg_reg mid = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, l, h), pg_u32(1));
    pg_reg t = shift ? pgv_shl(k, PG_B32, mid, pg_u32(shift)) : mid;
    pg_reg at = pgk_addr_add(k, row, t, 4);
    pg_reg ds = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, at, 0);
    pg_reg after = pgv_setp(k, PG_CMP_GT, PG_U32, ds, key);
    pg_reg next = pgv_add(k, PG_U32, mid, pg_u32(1));
    pg_selp(k, PG_U32, h, mid, h, after);
    pg_selp(k, PG_U32, l, l, next, after);
    pg_bra(k, top);
    pg_label_bind(k, done);
    return l;
}

void pgk_sigmoid(pg_kernel *k, pg_reg x, pg_reg *s, pg_reg *one_minus_s)
{
    pg_reg a = pg_reg_new(k, PG_F32);
    pg_abs(k, PG_F32, a, x);
    pg_neg(k, PG_F32, a, a);
    pg_reg z = pgk_exp_nonpos(k, a);
    pg_reg den = pg_reg_new(k, PG_F32);
    pg_add(k, PG_F32, den, z, pg_f32(1.0f));
    pg_reg big = pg_reg_new(k, PG_F32);
    pg_rcp(k, PG_F32, big, den);
    pg_reg small = pg_reg_new(k, PG_F32);
    pg_div(k, PG_F32, small, z, den);
    pg_reg pos = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_GE, PG_F32, pos, x, pg_f32(0.0f));
    *s = pg_reg_new(k, PG_F32);
    pg_selp(k, PG_F32, *s, big, small, pos);
    *one_minus_s = pg_reg_new(k, PG_F32);
    pg_selp(k, PG_F32, *one_minus_s, small, big, pos);
}

void pgk_split_range(pg_kernel *k, pg_reg n, pg_reg splits, uint32_t align, pg_reg *lo, pg_reg *hi)
{
    pg_reg y = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg per = pgv_add(k, PG_U32, n, pgv_sub(k, PG_U32, splits, pg_u32(1)));
    pg_div(k, PG_U32, per, per, splits);
    pg_add(k, PG_U32, per, per, pg_u32(align - 1));
    pg_div(k, PG_U32, per, per, pg_u32(align));
    pg_mul(k, PG_U32, per, per, pg_u32(align));
    /* y * per may pass n (an empty split) but not 2^32: per <= n + align */
    pg_reg l = pgv_mul_wide(k, PG_U32, y, per);
    pg_reg h = pgv_add(k, PG_U64, l, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, per));
    pg_min(k, PG_U64, l, l, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, n));
    pg_min(k, PG_U64, h, h, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, n));
    *lo = pgv_cvt(k, PG_U32, PG_U64, PG_RND_NONE, l);
    *hi = pgv_cvt(k, PG_U32, PG_U64, PG_RND_NONE, h);
}
