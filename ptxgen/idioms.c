/* SPDX-License-Identifier: MIT */
/*
 * The idioms every kernel needs, written once: global thread id, bounds
 * guard, counted and grid-stride loops, fixed-order warp and block reductions.
 */
#include "internal.h"

#include <string.h>

pg_reg pg_global_tid_x(pg_kernel *k)
{
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg gid = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, gid, ctaid, ntid, tid);
    return gid;
}

void pg_bounds_guard(pg_kernel *k, pg_val idx, pg_val n, pg_label out)
{
    pg_reg p = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_GE, PG_U32, p, idx, n);
    pg_bra_if(k, p, false, out);
}

/* A u32 loop bound or step: a 32-bit integer register or an immediate that
 * fits. Checked at the begin call, so a bad step is not first noticed at
 * the end of the body. */
static bool u32_operand(pg_kernel *k, pg_val v, const char *who, const char *what)
{
    if (!k || k->err)
        return false;
    if (v.kind == PG_VAL_IMM_INT && v.bits <= UINT32_MAX)
        return true;
    if (v.kind == PG_VAL_REG) {
        pg_type t = pg_reg_type(k, v);
        if (t == PG_U32 || t == PG_S32 || t == PG_B32)
            return true;
    }
    pg_fail(k, PG_ETYPE, "%s: %s must be a 32-bit integer register or a u32 immediate", who,
            what);
    return false;
}

/* The skeleton both loops share; `i` is a register the loop owns. */
static pg_reg loop_open(pg_kernel *k, pg_loop *l, pg_reg i, pg_val n, pg_val step,
                        const char *top, const char *done)
{
    l->i = i;
    l->step = step;
    l->n = n;
    l->p = pg_reg_new(k, PG_PRED);
    l->top = pg_label_new(k, top);
    l->done = pg_label_new(k, done);
    pg_setp(k, PG_CMP_GE, PG_U32, l->p, l->i, n);
    pg_bra_if(k, l->p, false, l->done);
    pg_label_bind(k, l->top);
    return k->err ? pg_none() : l->i;
}

pg_reg pg_for_begin(pg_kernel *k, pg_loop *l, pg_val start, pg_val n, pg_val step)
{
    if (!k || k->err)
        return pg_none();
    if (!l) {
        pg_fail(k, PG_EINVAL, "pg_for_begin: NULL loop");
        return pg_none();
    }
    memset(l, 0, sizeof *l);
    if (!u32_operand(k, start, "pg_for_begin", "start") ||
        !u32_operand(k, n, "pg_for_begin", "n") || !u32_operand(k, step, "pg_for_begin", "step"))
        return pg_none();
    if (step.kind == PG_VAL_IMM_INT && step.bits == 0) {
        pg_fail(k, PG_EINVAL, "pg_for_begin: a step of 0 never ends");
        return pg_none();
    }
    /* A copy: the loop writes its index, never the caller's register. */
    pg_reg i = pgv_mov(k, PG_U32, start);
    return loop_open(k, l, i, n, step, "for_loop", "for_done");
}

pg_reg pg_grid_stride_begin(pg_kernel *k, pg_loop *l, pg_val n)
{
    if (!k || k->err)
        return pg_none();
    if (!l) {
        pg_fail(k, PG_EINVAL, "pg_grid_stride_begin: NULL loop");
        return pg_none();
    }
    memset(l, 0, sizeof *l);
    if (!u32_operand(k, n, "pg_grid_stride_begin", "n"))
        return pg_none();
    pg_reg i = pg_global_tid_x(k);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg nctaid = pg_sreg_read(k, PG_SREG_NCTAID_X);
    pg_reg step = pgv_mul(k, PG_U32, ntid, nctaid);
    return loop_open(k, l, i, n, step, "stride_loop", "stride_done");
}

/* Whether l is a loop opened in k and not yet closed: its top label is
 * bound, its exit label is not. */
static bool loop_is_open(const pg_kernel *k, const pg_loop *l)
{
    if (!l || !pg_label_ok(k, l->top) || !pg_label_ok(k, l->done))
        return false;
    return k->labels[l->top.id].bound_at >= 0 && k->labels[l->done.id].bound_at < 0 &&
           pg_reg_type(k, l->i) == PG_U32 && pg_reg_type(k, l->p) == PG_PRED;
}

static void loop_close(pg_kernel *k, pg_loop *l, const char *who, const char *begin)
{
    if (!k || k->err)
        return;
    if (!l) {
        pg_fail(k, PG_EINVAL, "%s: NULL loop", who);
        return;
    }
    if (!loop_is_open(k, l)) {
        pg_fail(k, PG_ESTATE, "%s: the loop is not open in this kernel (call %s first, and "
                "end each loop once)", who, begin);
        return;
    }
    /* Continue while n - i > step: the same test as i + step < n, but
     * i + step is never formed, so it cannot wrap for n near 2^32. */
    pg_reg rem = pgv_sub(k, PG_U32, l->n, l->i);
    pg_setp(k, PG_CMP_LE, PG_U32, l->p, rem, l->step);
    pg_bra_if(k, l->p, false, l->done);
    pg_add(k, PG_U32, l->i, l->i, l->step);
    pg_bra(k, l->top);
    pg_label_bind(k, l->done);
}

void pg_for_end(pg_kernel *k, pg_loop *l) { loop_close(k, l, "pg_for_end", "pg_for_begin"); }

void pg_grid_stride_end(pg_kernel *k, pg_loop *l)
{
    loop_close(k, l, "pg_grid_stride_end", "pg_grid_stride_begin");
}

static bool reduce_type_ok(pg_kernel *k, pg_reduce_op op, pg_type t, const char *who)
{
    if (k && !k->err && ((t != PG_F32 && t != PG_U32 && t != PG_S32) || (unsigned)op > PG_REDUCE_MIN)) {
        pg_fail(k, PG_ETYPE, "%s: reduces f32, u32 or s32 by sum, max or min", who);
        return false;
    }
    return k && !k->err;
}

static void combine(pg_kernel *k, pg_reduce_op op, pg_type t, pg_reg d, pg_val a, pg_val b)
{
    switch (op) {
    case PG_REDUCE_SUM: pg_add(k, t, d, a, b); break;
    case PG_REDUCE_MAX: pg_max(k, t, d, a, b); break;
    case PG_REDUCE_MIN: pg_min(k, t, d, a, b); break;
    }
}

static pg_val identity(pg_reduce_op op, pg_type t)
{
    if (t == PG_F32) {
        static const float inf = __builtin_inff();
        return op == PG_REDUCE_SUM ? pg_f32(0.0f) : pg_f32(op == PG_REDUCE_MAX ? -inf : inf);
    }
    if (op == PG_REDUCE_SUM)
        return pg_u32(0);
    if (t == PG_U32)
        return pg_u32(op == PG_REDUCE_MAX ? 0u : UINT32_MAX);
    return pg_s32(op == PG_REDUCE_MAX ? INT32_MIN : INT32_MAX);
}

pg_reg pg_warp_reduce(pg_kernel *k, pg_reduce_op op, pg_type t, pg_reg v)
{
    if (!reduce_type_ok(k, op, t, "pg_warp_reduce"))
        return pg_none();
    pg_reg acc = pg_reg_new(k, t);
    pg_reg other = pg_reg_new(k, t);
    pg_mov(k, t, acc, v);
    for (uint32_t off = 16; off >= 1; off /= 2) {
        pg_shfl(k, PG_SHFL_BFLY, other, pg_none(), acc, pg_u32(off), pg_u32(31), pg_u32(0xffffffffu));
        combine(k, op, t, acc, acc, other);
    }
    return acc;
}

pg_reg pg_block_reduce(pg_kernel *k, pg_reduce_op op, pg_type t, pg_reg v, pg_shared scratch)
{
    if (!reduce_type_ok(k, op, t, "pg_block_reduce"))
        return pg_none();
    if (!pg_shared_ok(k, pg_shared_addr(scratch)) || k->shared[scratch.id].dynamic ||
        k->shared[scratch.id].count < 32 || pg_type_bits((pg_type)k->shared[scratch.id].type) != 32) {
        pg_fail(k, PG_EINVAL, "pg_block_reduce: scratch must be a static shared array of at "
                "least 32 32-bit elements");
        return pg_none();
    }
    pg_comment(k, "block reduction: warps, then the warp partials in lane order");
    pg_reg part = pg_warp_reduce(k, op, t, v);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pg_reg_new(k, PG_U32);
    pg_and(k, PG_B32, lane, tid, pg_u32(31));
    pg_reg warp = pg_reg_new(k, PG_U32);
    pg_shr(k, PG_U32, warp, tid, pg_u32(5));
    pg_reg base = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, base, pg_shared_addr(scratch));

    pg_reg slot = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, slot, warp, pg_u32(4), base);
    pg_reg first = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_EQ, PG_U32, first, lane, pg_u32(0));
    pg_guard(k, first, false);
    pg_st(k, PG_SPACE_SHARED, t, slot, 0, part);
    pg_bar_sync(k, 0);

    /* Every warp reduces the partials the same way, so every thread gets
     * the same bits without a second barrier-and-broadcast. */
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg nwarps = pg_reg_new(k, PG_U32);
    pg_add(k, PG_U32, nwarps, ntid, pg_u32(31));
    pg_shr(k, PG_U32, nwarps, nwarps, pg_u32(5));
    pg_reg x = pg_reg_new(k, t);
    pg_mov(k, t, x, identity(op, t));
    pg_reg have = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_LT, PG_U32, have, lane, nwarps);
    pg_reg src = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, src, lane, pg_u32(4), base);
    pg_guard(k, have, false);
    pg_ld(k, PG_SPACE_SHARED, t, src, 0, x);
    pg_reg total = pg_warp_reduce(k, op, t, x);
    /* The scratch may be reused after this. */
    pg_bar_sync(k, 0);
    return total;
}
