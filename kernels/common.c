/* SPDX-License-Identifier: MIT */
/* Pieces every kernel file uses: element and row addresses, the common
 * knob and launch of element-wise kernels, one warp a row. */
#include "kernels.h"

/* log2(e) split in two f32 (hi + lo exact to ~2^-48), and ln(2). */
#define LOG2E_HI 1.4426950216293335f
#define LOG2E_LO 1.925963033500011e-08f
#define LN2_F 0.6931471824645996f

const pgk_knob pgk_knob_n[1] = {
    {"n", 1u << 20, 1, UINT32_MAX, "number of elements", false},
};

pg_reg pgk_guarded_gid(pg_kernel *k, pg_val n, pg_label out)
{
    pg_reg gid = pg_global_tid_x(k);
    pg_bounds_guard(k, gid, n, out);
    return gid;
}

int pgk_finish(pg_kernel *k, pg_label out)
{
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

pg_reg pgk_zero_f32(pg_kernel *k)
{
    return pgv_mov(k, PG_F32, pg_f32(0.0f));
}

pg_reg pgk_bf16_to_f32(pg_kernel *k, pg_reg h)
{
    pg_reg f = pg_reg_new(k, PG_F32);
    pg_reg u = pg_reg_new(k, PG_U32);
    pg_cvt(k, PG_U32, PG_U16, PG_RND_NONE, u, h);
    pg_shl(k, PG_B32, u, u, pg_u32(16));
    pg_mov(k, PG_B32, f, u);
    return f;
}

pg_reg pgk_elem_addr(pg_kernel *k, pg_reg base, pg_val i, uint32_t size)
{
    return pgv_add(k, PG_U64, base, pgv_mul_wide(k, PG_U32, i, pg_u32(size)));
}

pg_reg pgk_row_addr(pg_kernel *k, pg_reg base, pg_val row, pg_val width)
{
    pg_reg off = pgv_mul_wide(k, PG_U32, row, width);
    pg_shl(k, PG_B64, off, off, pg_u32(2));
    return pgv_add(k, PG_U64, base, off);
}

pg_reg pgk_ld_f32(pg_kernel *k, pg_reg addr)
{
    return pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0);
}

pg_reg pgk_f32_offset(pg_kernel *k, pg_val i)
{
    return pgv_mul_wide(k, PG_U32, i, pg_u32(4));
}

pg_reg pgk_ld_f32_at(pg_kernel *k, pg_reg base, pg_reg off)
{
    return pgk_ld_f32(k, pgv_add(k, PG_U64, base, off));
}

void pgk_st_f32_at(pg_kernel *k, pg_reg base, pg_reg off, pg_val v)
{
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgv_add(k, PG_U64, base, off), 0, v);
}

int pgk_launch_1d(uint32_t n, uint32_t threads, pgk_launch *out)
{
    if (n == 0 || threads == 0)
        return PG_ERANGE;
    uint64_t blocks = ((uint64_t)n + threads - 1) / threads;
    if (blocks > INT32_MAX)
        return PG_ERANGE;
    *out = (pgk_launch){{(uint32_t)blocks, 1, 1}, {threads, 1, 1}, 0};
    return PG_OK;
}

int pgk_launch_elementwise(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    return pgk_launch_1d(knobs[PGK_N], d->threads, out);
}

static bool rows_ok(const uint32_t *knobs)
{
    return knobs[PGK_ROWS] != 0 && knobs[PGK_ROWS] <= INT32_MAX && knobs[PGK_WIDTH] != 0 &&
           knobs[PGK_WIDTH] <= INT32_MAX;
}

int pgk_launch_rows(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    if (!rows_ok(knobs) || d->threads == 0)
        return PG_ERANGE;
    *out = (pgk_launch){{knobs[PGK_ROWS], 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

int pgk_launch_warp_rows(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    uint32_t rows_a_block = d->threads / 32u;
    if (!rows_ok(knobs) || rows_a_block == 0)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(knobs[PGK_ROWS], rows_a_block), 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

int pgk_launch_single(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    (void)knobs;
    *out = (pgk_launch){{1, 1, 1}, {1, 1, 1}, 0};
    return PG_OK;
}

pg_reg pgk_warp_row(pg_kernel *k, pg_val rows, pg_label out, pg_reg *lane)
{
    pg_comment(k, "row = ctaid.x * (ntid.x / 32) + warp; total_rows * 32 may pass 2^32");
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    *lane = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg wpb = pgv_shr(k, PG_U32, ntid, pg_u32(5));
    pg_reg row = pgv_mad(k, PG_U32, ctaid, wpb, warp);
    pg_bounds_guard(k, row, rows, out);
    return row;
}

/* exp(a) for a <= 0 (NaN stays NaN), in [0, 1]. ex2.approx alone would turn
 * the rounding of a*log2(e) into a relative error of up to |a| ulp; the
 * product is split into a rounded part and its exact rest (an fma), and the
 * rest is applied as 2^lo = 1 + lo*ln2, leaving ex2's own ~2 ulp. Nothing
 * overflows; large |a| underflows through the subnormals to 0. a below -1000
 * (-inf included, whose rest would be inf - inf) is taken as -1000, whose
 * exp is 0 all the same; a NaN fails the test and stays. */
pg_reg pgk_exp_nonpos(pg_kernel *k, pg_reg a_in)
{
    pg_reg low = pgv_setp(k, PG_CMP_LT, PG_F32, a_in, pg_f32(-1000.0f));
    pg_reg a = pgv_selp(k, PG_F32, pg_f32(-1000.0f), a_in, low);
    pg_reg hi = pgv_mul(k, PG_F32, a, pg_f32(LOG2E_HI));
    pg_reg nhi = pgv_neg(k, PG_F32, hi);
    pg_reg lo = pgv_fma(k, PG_F32, a, pg_f32(LOG2E_HI), nhi);
    pg_fma(k, PG_F32, lo, a, pg_f32(LOG2E_LO), lo);
    pg_reg z = pgv_ex2(k, PG_F32, hi);
    pg_reg c = pgv_mul(k, PG_F32, lo, pg_f32(LN2_F));
    pg_fma(k, PG_F32, z, z, c, z);
    return z;
}

/* The ptr and n of every table kind sit where pgk_clip_entry has them (a
 * pgk_optim_entry begins with one). */
pgk_table_entry pgk_table_find(pg_kernel *k, pg_reg table, pg_reg nbufs, uint32_t stride,
                               uint32_t first_off)
{
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg nctaid = pg_sreg_read(k, PG_SREG_NCTAID_X);
    pg_reg lo = pg_reg_new(k, PG_U32), hi = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, lo, pg_u32(0));
    pg_mov(k, PG_U32, hi, nbufs);
    pg_reg span = pg_reg_new(k, PG_U32), mid = pg_reg_new(k, PG_U32);
    pg_reg fb = pg_reg_new(k, PG_U32);
    pg_reg p = pg_reg_new(k, PG_PRED);
    pg_label top = pg_label_new(k, "find_entry");
    pg_label found = pg_label_new(k, "entry");
    pg_label last = pg_label_new(k, "last_entry");

    pg_comment(k, "binary search: the last entry whose first_block <= ctaid.x");
    pg_label_bind(k, top);
    pg_sub(k, PG_U32, span, hi, lo);
    pg_setp(k, PG_CMP_LE, PG_U32, p, span, pg_u32(1));
    pg_bra_if(k, p, false, found);
    pg_shr(k, PG_U32, span, span, pg_u32(1));
    pg_add(k, PG_U32, mid, lo, span);
    pg_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_elem_addr(k, table, mid, stride), first_off, fb);
    pg_setp(k, PG_CMP_LE, PG_U32, p, fb, ctaid);
    pg_selp(k, PG_U32, lo, mid, lo, p);
    pg_selp(k, PG_U32, hi, hi, mid, p);
    pg_bra(k, top);

    pg_label_bind(k, found);
    pgk_table_entry e;
    pg_reg ea = pgk_elem_addr(k, table, lo, stride);
    e.addr = ea;
    e.ptr = pgv_ld(k, PG_SPACE_GLOBAL, PG_U64, ea, offsetof(pgk_clip_entry, ptr));
    e.n = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, ea, offsetof(pgk_clip_entry, n));
    pg_ld(k, PG_SPACE_GLOBAL, PG_U32, ea, first_off, fb);
    e.local = pgv_sub(k, PG_U32, ctaid, fb);
    pg_comment(k, "the entry's blocks end where the next entry's begin (the grid, for the last)");
    pg_reg end = pgv_mov(k, PG_U32, nctaid);
    pg_reg next = pgv_add(k, PG_U32, lo, pg_u32(1));
    pg_setp(k, PG_CMP_GE, PG_U32, p, next, nbufs);
    pg_bra_if(k, p, false, last);
    pg_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_elem_addr(k, table, next, stride), first_off, end);
    pg_label_bind(k, last);
    e.nblocks = pgv_sub(k, PG_U32, end, fb);
    return e;
}

int pgk_launch_table(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    uint32_t blocks = knobs[PGK_TABLE_BLOCKS], nbufs = knobs[PGK_TABLE_NBUFS];
    if (blocks == 0 || blocks > INT32_MAX || nbufs == 0 || nbufs > blocks)
        return PG_ERANGE;
    *out = (pgk_launch){{blocks, 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

const pgk_knob pgk_knobs_table[2] = {
    [PGK_TABLE_BLOCKS] = {"total_blocks", 256, 1, INT32_MAX, "blocks of all entries (the grid)",
                          false},
    [PGK_TABLE_NBUFS] = {"nbufs", 1, 1, INT32_MAX, "table entries (at most total_blocks)", false},
};
