/* SPDX-License-Identifier: MIT */
/*
 * Softmax over rows of any length, forward and backward, one warp a row
 * (pgk_warp_row), eight rows a block; lane l takes elements l, l+32, ...
 * Every sum meets in the fixed butterfly of pg_warp_reduce, so every lane
 * holds the same bits and the same input gives the same output. No shared
 * memory, no barrier.
 *
 *   batched_softmax_forward    y = exp(x - max) / sum exp(x - max)
 *   batched_softmax_backward   dx = y * (dy - sum(y * dy))
 */
#include "kernels.h"

static const pgk_knob softmax_knobs[] = {
    [PGK_ROWS] = {"rows", 4096, 1, INT32_MAX, "number of rows", false},
    [PGK_WIDTH] = {"cols", 512, 1, INT32_MAX, "elements a row (any size)", false},
};

/* ---------------------------------------------------------------- batched_softmax_forward */

/* One warp a row, eight rows a block; lane l takes elements l, l+32, ... so
 * any row_size works. Pass 1: the row's max (lane maxima, then the
 * butterfly: max is exact, every lane the same bits). Pass 2: e = exp(x -
 * max) (x - max <= 0: no overflow), written to output and summed per lane
 * in element order, then the fixed butterfly. Pass 3: output = e / sum
 * (div.rn). A warp past the last row leaves as a whole; no shared memory,
 * no barrier. */
static int build_softmax_fwd(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                             const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg y = pg_param_load(k, p[1]);
    pg_reg rows = pg_param_load(k, p[2]);
    pg_reg width = pg_param_load(k, p[3]);

    pg_label out = pg_label_new(k, "exit");
    pg_reg lane;
    pg_reg row = pgk_warp_row(k, rows, out, &lane);

    pg_reg xa = pgk_row_addr(k, x, row, width);
    pg_reg ya = pgk_row_addr(k, y, row, width);
    pg_loop L;

    pg_comment(k, "pass 1: m = max over the row");
    pg_reg mx = pgv_mov(k, PG_F32, pg_f32(-__builtin_inff()));
    pg_reg j = pg_for_begin(k, &L, lane, width, pg_u32(32));
    pg_max(k, PG_F32, mx, mx, pgk_ld_f32_at(k, xa, pgk_f32_offset(k, j)));
    pg_for_end(k, &L);
    pg_reg m = pg_warp_reduce(k, PG_REDUCE_MAX, PG_F32, mx);

    pg_comment(k, "pass 2: e = exp(x - m) to output; s = sum e");
    pg_reg acc = pgk_zero_f32(k);
    j = pg_for_begin(k, &L, lane, width, pg_u32(32));
    pg_reg off = pgk_f32_offset(k, j);
    pg_reg e = pgk_exp_nonpos(k, pgv_sub(k, PG_F32, pgk_ld_f32_at(k, xa, off), m));
    pg_add(k, PG_F32, acc, acc, e);
    pgk_st_f32_at(k, ya, off, e);
    pg_for_end(k, &L);
    pg_reg sum = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, acc);

    pg_comment(k, "pass 3: output = e / s (each lane rereads what it wrote)");
    j = pg_for_begin(k, &L, lane, width, pg_u32(32));
    off = pgk_f32_offset(k, j);
    pgk_st_f32_at(k, ya, off, pgv_div(k, PG_F32, pgk_ld_f32_at(k, ya, off), sum));
    pg_for_end(k, &L);

    return pgk_finish(k, out);
}

static const pgk_param softmax_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
};

const pgk_desc pgk_desc_batched_softmax_forward = {
    .name = "batched_softmax_forward",
    .summary = "per row: output = exp(x - max) / sum exp(x - max); one warp a row, any row_size",
    PGK_PARAMS(softmax_params),
    PGK_KNOBS(softmax_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_softmax_fwd,
    .launch = pgk_launch_warp_rows,
};


/* ---------------------------------------------------------------- batched_softmax_backward */

/* One warp a row, eight rows a block. All 32 lanes stay in the warp until
 * the reduction: lane l takes elements l, l+32, ... of the row (a lane past
 * the end adds nothing), four accumulators keep four loads in flight, and
 * the lanes' sums meet in the fixed butterfly of pg_warp_reduce, so any
 * row_size works and every lane holds the same bits. A warp past the last
 * row leaves as a whole. No shared memory, no barrier. */
static int build_softmax_bwd(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                             const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg y = pg_param_load(k, p[0]);
    pg_reg dy = pg_param_load(k, p[1]);
    pg_reg dx = pg_param_load(k, p[2]);
    pg_reg rows = pg_param_load(k, p[3]);
    pg_reg width = pg_param_load(k, p[4]);

    pg_label out = pg_label_new(k, "exit");
    pg_reg lane;
    pg_reg row = pgk_warp_row(k, rows, out, &lane);

    pg_reg ya = pgk_row_addr(k, y, row, width);
    pg_reg dya = pgk_row_addr(k, dy, row, width);
    pg_reg dxa = pgk_row_addr(k, dx, row, width);

    pg_comment(k, "dot = sum y * dy: lane sums in element order, then the butterfly");
    pg_reg acc[4];
    for (int j = 0; j < 4; j++)
        acc[j] = pgk_zero_f32(k);
    pg_reg room = pgv_setp(k, PG_CMP_GT, PG_U32, width, pg_u32(96));
    pg_reg lim = pgv_sub(k, PG_U32, width, pg_u32(96));
    pg_selp(k, PG_U32, lim, lim, pg_u32(0), room);
    pg_reg j = pgv_mov(k, PG_U32, lane);
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_reg a = pg_reg_new(k, PG_U64);
    pg_reg b = pg_reg_new(k, PG_U64);

    pg_label main_top = pg_label_new(k, "dot4");
    pg_label tail_top = pg_label_new(k, "dot1");
    pg_label reduce = pg_label_new(k, "reduce");
    pg_reg pm = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, main_top);
    pg_setp(k, PG_CMP_GE, PG_U32, pm, j, lim);
    pg_bra_if(k, pm, false, tail_top);
    pg_mul_wide(k, PG_U32, off, j, pg_u32(4));
    pg_add(k, PG_U64, a, ya, off);
    pg_add(k, PG_U64, b, dya, off);
    pg_reg yv[4], gv[4];
    for (int u = 0; u < 4; u++) {
        yv[u] = pg_reg_new(k, PG_F32);
        gv[u] = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 128 * u, yv[u]);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, b, 128 * u, gv[u]);
    }
    for (int u = 0; u < 4; u++)
        pg_fma(k, PG_F32, acc[u], yv[u], gv[u], acc[u]);
    pg_add(k, PG_U32, j, j, pg_u32(128));
    pg_bra(k, main_top);

    pg_reg pt = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, tail_top);
    pg_setp(k, PG_CMP_GE, PG_U32, pt, j, width);
    pg_bra_if(k, pt, false, reduce);
    pg_mul_wide(k, PG_U32, off, j, pg_u32(4));
    pg_add(k, PG_U64, a, ya, off);
    pg_add(k, PG_U64, b, dya, off);
    pg_reg ty = pgk_ld_f32(k, a);
    pg_reg tg = pgk_ld_f32(k, b);
    pg_fma(k, PG_F32, acc[0], ty, tg, acc[0]);
    pg_add(k, PG_U32, j, j, pg_u32(32));
    pg_bra(k, tail_top);

    pg_label_bind(k, reduce);
    pg_add(k, PG_F32, acc[0], acc[0], acc[1]);
    pg_add(k, PG_F32, acc[2], acc[2], acc[3]);
    pg_add(k, PG_F32, acc[0], acc[0], acc[2]);
    pg_reg dot = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, acc[0]);

    pg_comment(k, "dx = y * (dy - dot)");
    pg_loop L;
    pg_reg jw = pg_for_begin(k, &L, lane, width, pg_u32(32));
    pg_reg woff = pgk_f32_offset(k, jw);
    pg_reg wy = pgk_ld_f32_at(k, ya, woff);
    pg_reg dxv = pgv_sub(k, PG_F32, pgk_ld_f32_at(k, dya, woff), dot);
    pg_mul(k, PG_F32, dxv, wy, dxv);
    pgk_st_f32_at(k, dxa, woff, dxv);
    pg_for_end(k, &L);

    return pgk_finish(k, out);
}

static const pgk_param softmax_bwd_params[] = {
    {"output", PG_U64, true},
    {"grad_output", PG_U64, true},
    {"grad_input", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
};

const pgk_desc pgk_desc_batched_softmax_backward = {
    .name = "batched_softmax_backward",
    .summary = "per row: grad_input = y * (dy - sum(y * dy)), y the softmax output; one warp a row",
    PGK_PARAMS(softmax_bwd_params),
    PGK_KNOBS(softmax_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_softmax_bwd,
    .launch = pgk_launch_warp_rows,
};
