/* SPDX-License-Identifier: MIT */
/*
 * Element-wise and data-movement kernels of a training step:
 *
 *   cast_f32_to_f16   dst[i] = (f16) src[i]
 *   residual_add      out = a + b (out may alias a)
 *   transpose         out[c, r] = in[r, c], 32x32 tiles through shared memory
 *   mse_loss          grad = 2 (pred - target) / n, per-block partial sums of squares
 *
 * Every dimension is a parameter: one module serves every shape. Float
 * arithmetic is .rn, and mse_loss's reduction runs in an order fixed by n.
 */
#include "kernels.h"

/* transpose: TILE x TILE through shared memory, TILE x TROWS threads. */
#define TILE 32u
#define TROWS 8u
/* Row tiles go on grid y, which stops at 65,535 blocks. */
#define T_MAX_ROWS (65535u * TILE)
enum { T_ROWS, T_COLS };

/* ---------------------------------------------------------------- cast_f32_to_f16 */

static int build_cast_f16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg src = pg_param_load(k, p[0]);
    pg_reg dst = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);
    pg_reg x = pgk_ld_f32(k, pgk_elem_addr(k, src, gid, 4));
    pg_reg hv = pgv_cvt(k, PG_F16, PG_F32, PG_RND_RN, x);
    pg_st(k, PG_SPACE_GLOBAL, PG_F16, pgk_elem_addr(k, dst, gid, 2), 0, hv);
    return pgk_finish(k, out);
}

static const pgk_param cast_params[] = {
    {"src", PG_U64, true},
    {"dst", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_cast_f32_to_f16 = {
    .name = "cast_f32_to_f16",
    .summary = "dst[i] = (f16) src[i], round to nearest even (dst holds 16-bit halves)",
    PGK_PARAMS(cast_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_cast_f16,
    .launch = pgk_launch_elementwise,
};

/* ---------------------------------------------------------------- residual_add */

/* out[i] = a[i] + b[i]. Each element is read before it is written by the
 * same thread, so out may alias a (or b). */
static int build_residual_add(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                              const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg a = pg_param_load(k, p[0]);
    pg_reg b = pg_param_load(k, p[1]);
    pg_reg o = pg_param_load(k, p[2]);
    pg_reg n = pg_param_load(k, p[3]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);
    pg_reg off = pgv_mul_wide(k, PG_U32, gid, pg_u32(4));
    pg_reg addr = pgv_add(k, PG_U64, a, off);
    pg_reg av = pgk_ld_f32(k, addr);
    pg_add(k, PG_U64, addr, b, off);
    pg_reg bv = pgk_ld_f32(k, addr);
    pg_reg s = pgv_add(k, PG_F32, av, bv);
    pg_add(k, PG_U64, addr, o, off);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, s);
    return pgk_finish(k, out);
}

static const pgk_param residual_params[] = {
    {"a", PG_U64, true},
    {"b", PG_U64, true},
    {"out", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_residual_add = {
    .name = "residual_add",
    .summary = "out = a + b elementwise; out may alias a",
    PGK_PARAMS(residual_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_residual_add,
    .launch = pgk_launch_elementwise,
};


/* ---------------------------------------------------------------- transpose */

/* A 32x32 tile through shared memory (rows padded to 33 floats: the column
 * reads hit 32 different banks), block (32, 8): each thread moves four
 * elements in and four out, coalesced both ways. Elements past the edges
 * are neither read nor written; the barrier is reached by every thread. */
static int build_transpose(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                           const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_kernel_set_maxntid(k, TILE, TROWS, 1);
    pg_shared tile = pg_shared_static(k, PG_F32, TILE * (TILE + 1), 4, "tile");
    pg_reg in = pg_param_load(k, p[0]);
    pg_reg outp = pg_param_load(k, p[1]);
    pg_reg rows = pg_param_load(k, p[2]);
    pg_reg cols = pg_param_load(k, p[3]);

    pg_reg tx = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ty = pg_sreg_read(k, PG_SREG_TID_Y);
    pg_reg bx = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg by = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg base = pgv_mov(k, PG_U32, pg_shared_addr(tile));

    pg_comment(k, "in: tile[ty + 8i][tx] = in[by*32 + ty + 8i][bx*32 + tx]");
    pg_reg c_in = pgv_mad(k, PG_U32, bx, pg_u32(TILE), tx);
    pg_reg c_ok = pgv_setp(k, PG_CMP_LT, PG_U32, c_in, cols);
    pg_reg r0 = pgv_mad(k, PG_U32, by, pg_u32(TILE), ty);
    pg_reg s_in = pgv_mad(k, PG_U32, ty, pg_u32(TILE + 1), tx);
    pg_mad(k, PG_U32, s_in, s_in, pg_u32(4), base);
    for (uint32_t i = 0; i < TILE / TROWS; i++) {
        pg_reg r = pgv_add(k, PG_U32, r0, pg_u32(TROWS * i));
        pg_reg ok = pgv_setp(k, PG_CMP_LT, PG_U32, r, rows);
        pg_and(k, PG_PRED, ok, ok, c_ok);
        pg_reg a = pgk_elem_addr(k, pgk_row_addr(k, in, r, cols), c_in, 4);
        pg_reg v = pgk_zero_f32(k);
        pg_guard(k, ok, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v);
        pg_st(k, PG_SPACE_SHARED, PG_F32, s_in, (int64_t)(4 * TROWS * (TILE + 1) * i), v);
    }
    pg_bar_sync(k, 0);

    pg_comment(k, "out: out[bx*32 + ty + 8i][by*32 + tx] = tile[tx][ty + 8i]");
    pg_reg r_out = pgv_mad(k, PG_U32, by, pg_u32(TILE), tx);
    pg_reg r_ok = pgv_setp(k, PG_CMP_LT, PG_U32, r_out, rows);
    pg_reg c0 = pgv_mad(k, PG_U32, bx, pg_u32(TILE), ty);
    pg_reg s_out = pgv_mad(k, PG_U32, tx, pg_u32(TILE + 1), ty);
    pg_mad(k, PG_U32, s_out, s_out, pg_u32(4), base);
    for (uint32_t i = 0; i < TILE / TROWS; i++) {
        pg_reg c = pgv_add(k, PG_U32, c0, pg_u32(TROWS * i));
        pg_reg ok = pgv_setp(k, PG_CMP_LT, PG_U32, c, cols);
        pg_and(k, PG_PRED, ok, ok, r_ok);
        pg_reg v = pgv_ld(k, PG_SPACE_SHARED, PG_F32, s_out, (int64_t)(4 * TROWS * i));
        pg_reg a = pgk_elem_addr(k, pgk_row_addr(k, outp, c, rows), r_out, 4);
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v);
    }
    pg_ret(k);
    return pg_kernel_error(k);
}

/* Grid (ceil(cols/32), ceil(rows/32)), block (32, 8). */
static int launch_transpose(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    uint32_t rows = kn[T_ROWS], cols = kn[T_COLS];
    if (rows == 0 || cols == 0 || rows > T_MAX_ROWS || cols > INT32_MAX)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(cols, TILE), pgk_ceil_div(rows, TILE), 1}, {TILE, TROWS, 1},
                        0};
    return PG_OK;
}

static const pgk_param transpose_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
};

static const pgk_knob transpose_knobs[] = {
    [T_ROWS] = {"rows", 2048, 1, T_MAX_ROWS,
                "rows of the input (columns of the output); at most 65535 tiles of 32", false},
    [T_COLS] = {"cols", 1536, 1, INT32_MAX, "columns of the input (rows of the output)", false},
};

const pgk_desc pgk_desc_transpose = {
    .name = "transpose",
    .summary = "output[cols, rows] = input[rows, cols]^T (f32, 32x32 shared-memory tiles)",
    PGK_PARAMS(transpose_params),
    PGK_KNOBS(transpose_knobs),
    .min_target = PG_SM_70,
    .build = build_transpose,
    .launch = launch_transpose,
};

/* ---------------------------------------------------------------- mse_loss */

/* loss = sum (pred - target)^2 / n, grad = 2 (pred - target) / n. The grid
 * is squared_sum_reduce's (pgk_squared_sum_num_blocks(n) blocks of 256),
 * each block writes the sum of d^2 over its grid-stride share to
 * partials[blockIdx.x] after a fixed-order block reduction; the caller adds
 * the partials (in index order) and divides by n. Same n, same bits. */
static int build_mse(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_reg pred = pg_param_load(k, p[0]);
    pg_reg target = pg_param_load(k, p[1]);
    pg_reg grad = pg_param_load(k, p[2]);
    pg_reg partials = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);

    pg_comment(k, "scale = 2 / n");
    pg_reg fn = pgv_cvt(k, PG_F32, PG_U32, PG_RND_RN, n);
    pg_reg scale = pgv_div(k, PG_F32, pg_f32(2.0f), fn);

    pg_reg acc = pgk_zero_f32(k);
    pg_loop l;
    pg_reg i = pg_grid_stride_begin(k, &l, n);
    pg_reg off = pgv_mul_wide(k, PG_U32, i, pg_u32(4));
    pg_reg a = pgv_add(k, PG_U64, pred, off);
    pg_reg pv = pgk_ld_f32(k, a);
    pg_add(k, PG_U64, a, target, off);
    pg_reg tv = pgk_ld_f32(k, a);
    pg_reg diff = pgv_sub(k, PG_F32, pv, tv);
    pg_fma(k, PG_F32, acc, diff, diff, acc);
    pg_reg g = pgv_mul(k, PG_F32, diff, scale);
    pg_add(k, PG_U64, a, grad, off);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, g);
    pg_grid_stride_end(k, &l);

    pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, acc, scratch);
    pg_comment(k, "thread 0 writes partials[blockIdx.x]");
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg not_first = pgv_setp(k, PG_CMP_NE, PG_U32, tid, pg_u32(0));
    pg_guard(k, not_first, false);
    pg_ret(k);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, partials, ctaid, 4), 0, sum);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_mse(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    if (knobs[PGK_N] == 0)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_squared_sum_num_blocks(knobs[PGK_N]), 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param mse_params[] = {
    {"pred", PG_U64, true},
    {"target", PG_U64, true},
    {"grad", PG_U64, true},
    {"partials", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_mse_loss = {
    .name = "mse_loss",
    .summary = "grad = 2 (pred - target) / n; partials[b] = sum (pred - target)^2 over block b's "
               "share (pgk_squared_sum_num_blocks(n) blocks)",
    PGK_PARAMS(mse_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_mse,
    .launch = launch_mse,
};
