/* SPDX-License-Identifier: MIT */
/*
 * RMSNorm, forward and backward, one block a row, and the reduction of
 * gamma's gradient over rows:
 *
 *   rms_norm_forward            y = x / r * gamma, r = sqrt(mean x^2 + eps)
 *   batched_rms_norm_backward   dx, and partial[row, h] = dy x / r
 *   rms_norm_gamma_reduce       grad_gamma[h] = sum over rows of partial[row, h]
 *   rms_norm_forward_add_bf16   x = input (+ residual, kept), y as the forward, and
 *                               y's bf16 copy
 *   rms_norm_backward_add_bf16  dx as the backward (+ residual), and its bf16 copy
 *
 * The _add_bf16 pair is the bf16 model's: the residual add before a norm
 * (after one, backward) and the copy its GEMMs read ride along in the
 * norm's passes instead of a launch and a pass each. They compute exactly
 * what rms_norm_forward / batched_rms_norm_backward, residual_add and
 * cast_f32_to_bf16 would in turn (the same operations in the same order);
 * gamma is frozen there, so the backward writes no gamma partials.
 *
 * Row kernels take dimensions up to 2^31 - 1 (their knobs' range): the u32
 * indices and strides then never wrap. Every reduction runs in an order
 * fixed by the shape alone: the same input gives the same bits.
 */
#include "model.h"

/* rms_norm_gamma_reduce: a block owns GAMMA_COLS adjacent columns (one
 * 32-byte sector a row) and splits the rows over GAMMA_LANES threads a
 * column. */
#define GAMMA_COLS 8u
#define GAMMA_LANES (PGK_THREADS / GAMMA_COLS)

/* One block a row: the thread, the block size and the row (ctaid.x); the
 * whole block leaves together, to `out`, past the last row. */
typedef struct block_row {
    pg_reg tid, ntid, row;
} block_row;

static block_row block_row_begin(pg_kernel *k, pg_reg rows, pg_label out)
{
    block_row b;
    b.tid = pg_sreg_read(k, PG_SREG_TID_X);
    b.ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    b.row = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_comment(k, "the whole block leaves together: the row is the block's");
    pg_bounds_guard(k, b.row, rows, out);
    return b;
}

static const pgk_knob rms_knobs[] = {
    [PGK_ROWS] = {"rows", 2048, 1, INT32_MAX, "number of rows (one block each)", false},
    [PGK_WIDTH] = {"cols", 1536, 1, INT32_MAX, "elements a row", false},
};

enum { RMS_RESIDUAL = PGK_WIDTH + 1, RMS_F32_OUT };

static const pgk_knob rms_add_knobs[] = {
    [PGK_ROWS] = {"rows", 2048, 1, INT32_MAX, "number of rows (one block each)", false},
    [PGK_WIDTH] = {"cols", 1536, 1, INT32_MAX, "elements a row", false},
    [RMS_RESIDUAL] = {"residual", 1, 0, 1, "1: add the residual (0: the params are unused)",
                      true},
};

/* the forward's knobs: the above, and whether the f32 output is written */
static const pgk_knob rms_fwd_add_knobs[] = {
    [PGK_ROWS] = {"rows", 2048, 1, INT32_MAX, "number of rows (one block each)", false},
    [PGK_WIDTH] = {"cols", 1536, 1, INT32_MAX, "elements a row", false},
    [RMS_RESIDUAL] = {"residual", 1, 0, 1, "1: add the residual (0: the params are unused)",
                      true},
    [RMS_F32_OUT] = {"f32_output", 1, 0, 1,
                     "1: write output (f32) beside its bf16 copy; 0: the copy alone", true},
};

/* The address of bf16 element h of a row that starts at row_addr. */
static pg_reg bf16_at(pg_kernel *k, pg_reg row_addr, pg_reg h)
{
    return pgk_addr_add(k, row_addr, h, 2);
}

/* ---------------------------------------------------------------- rms_norm_forward */

/* One block a row. Pass 1: each thread sums x^2 over h = tid, tid + 256, ...
 * (an fma chain), then one fixed-order block reduction: the same order as
 * batched_rms_norm_backward's, so both see the same r. Pass 2 writes
 * y = (x * (1/r)) * gamma. Threads past the end of a short row add nothing
 * but still reach the barrier. */
/* fused: rms_norm_forward_add_bf16, whose params are (input, residual,
 * sum_output, gamma, output, output_bf16, rows, hidden, eps); with res,
 * x = input + residual is stored to sum_output in pass 1 and read back
 * from there (by the thread that wrote it) in pass 2. */
static int rms_fwd_body(pg_kernel *k, const pg_param *p, bool fused, bool res, bool f32_out)
{
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    unsigned f = fused ? 3 : 0; /* residual, sum_output, output_bf16 */
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg rsd = res ? pg_param_load(k, p[1]) : x;
    pg_reg xs = res ? pg_param_load(k, p[2]) : x;
    pg_reg gamma = pg_param_load(k, p[fused ? 3 : 1]);
    pg_reg y = pg_param_load(k, p[fused ? 4 : 2]);
    pg_reg yb = fused ? pg_param_load(k, p[5]) : y;
    pg_reg rows = pg_param_load(k, p[3 + f]);
    pg_reg hidden = pg_param_load(k, p[4 + f]);
    pg_reg eps = pg_param_load(k, p[5 + f]);

    pg_label out = pg_label_new(k, "exit");
    block_row b = block_row_begin(k, rows, out);
    pg_reg tid = b.tid, ntid = b.ntid, row = b.row;
    pg_reg xa = pgk_row_addr(k, x, row, hidden);
    pg_reg ya = pgk_row_addr(k, y, row, hidden);
    pg_reg ra = xa, sa = xa, yba = ya;
    if (res) {
        ra = pgk_row_addr(k, rsd, row, hidden);
        sa = pgk_row_addr(k, xs, row, hidden);
    }
    if (fused)
        yba = pgk_addr2(k, yb, row, hidden, pg_u32(0), 2);

    pg_comment(k, res ? "x = input + residual, kept; ss = sum x^2 over h = tid, tid + ntid, ..."
                      : "ss = sum x^2 over h = tid, tid + ntid, ...");
    pg_reg ss = pgk_zero_f32(k);
    pg_loop L;
    pg_reg h = pg_for_begin(k, &L, tid, hidden, ntid);
    pg_reg xv;
    if (res) {
        pg_reg o = pgk_f32_offset(k, h);
        xv = pgk_ld_f32_at(k, xa, o);
        pg_add(k, PG_F32, xv, xv, pgk_ld_f32_at(k, ra, o));
        pgk_st_f32_at(k, sa, o, xv);
    } else {
        xv = pgk_ld_f32_at(k, xa, pgk_f32_offset(k, h));
    }
    pg_fma(k, PG_F32, ss, xv, xv, ss);
    pg_for_end(k, &L);

    pg_reg sum_sq = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, ss, scratch);

    pg_comment(k, "r = sqrt(sum_sq / hidden + eps)");
    pg_reg fh = pgv_cvt(k, PG_F32, PG_U32, PG_RND_RN, hidden);
    pg_reg ms = pgv_div(k, PG_F32, sum_sq, fh);
    pg_add(k, PG_F32, ms, ms, eps);
    pg_reg r = pgv_sqrt(k, PG_F32, ms);
    pg_reg rinv = pgv_rcp(k, PG_F32, r);

    pg_comment(k, fused ? "y = (x / r) * gamma, and its bf16 copy" : "y = (x / r) * gamma");
    h = pg_for_begin(k, &L, tid, hidden, ntid);
    pg_reg off = pgk_f32_offset(k, h);
    pg_reg t = pgv_mul(k, PG_F32, pgk_ld_f32_at(k, res ? sa : xa, off), rinv);
    pg_mul(k, PG_F32, t, t, pgk_ld_f32_at(k, gamma, off));
    if (f32_out)
        pgk_st_f32_at(k, ya, off, t);
    if (fused)
        pgk_st_act(k, PGK_BF16, bf16_at(k, yba, h), t);
    pg_for_end(k, &L);

    return pgk_finish(k, out);
}

static int build_rms_fwd(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    return rms_fwd_body(k, p, false, false, true);
}

static int build_rms_fwd_add(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                             const uint32_t *knobs)
{
    (void)d;
    return rms_fwd_body(k, p, true, knobs[RMS_RESIDUAL] != 0, knobs[RMS_F32_OUT] != 0);
}

static const pgk_param rms_params[] = {
    {"input", PG_U64, true},
    {"gamma", PG_U64, true},
    {"output", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
    {"eps", PG_F32, false},
};

const pgk_desc pgk_desc_rms_norm_forward = {
    .name = "rms_norm_forward",
    .summary = "RMSNorm per row: output = input / sqrt(mean(input^2) + eps) * gamma",
    PGK_PARAMS(rms_params),
    PGK_KNOBS(rms_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_rms_fwd,
    .launch = pgk_launch_rows,
};

static const pgk_param rms_add_params[] = {
    {"input", PG_U64, true},       {"residual", PG_U64, true},    {"sum_output", PG_U64, true},
    {"gamma", PG_U64, true},       {"output", PG_U64, true},      {"output_bf16", PG_U64, true},
    {"rows", PG_U32, false},   {"cols", PG_U32, false}, {"eps", PG_F32, false},
};

const pgk_desc pgk_desc_rms_norm_forward_add_bf16 = {
    .name = "rms_norm_forward_add_bf16",
    .summary = "sum_output = input + residual; output = RMSNorm(sum_output) * gamma (f32) and "
               "its bf16 copy",
    PGK_PARAMS(rms_add_params),
    PGK_KNOBS(rms_fwd_add_knobs),
    .min_target = PG_SM_80,
    .threads = PGK_THREADS,
    .build = build_rms_fwd_add,
    .launch = pgk_launch_rows,
};

/* ---------------------------------------------------------------- batched_rms_norm_backward */

/* One block a row, the arithmetic in f64 (the loads and stores are f32,
 * so memory traffic is that of an f32 kernel). The formula cancels: always
 * at hidden_dim = 1 (dx = g eps / r^3 while its two terms are about g / r
 * each), for any row nearly parallel to its gradient, and elementwise
 * wherever g_h is close to x_h u. In f32 that costs up to (x^2 / eps) ulp
 * (about 1e-2 at hidden_dim = 1, eps = 1e-5); in f64, with the products of
 * two f32 exact, every output is within about half an ulp of f32 of the
 * exact value.
 *
 * Pass 1: each thread sums x^2 and x g (g = gamma dy) over h = tid, tid +
 * 256, ... as f64 fma chains. The block sums are fixed-order: the 256 thread sums go to shared
 * memory; column c of 32 adds threads c, c+32, ..., c+224 in order; after a
 * second barrier every thread adds the 32 column sums in order (broadcast
 * reads), so every thread holds the same bits. pg_block_reduce reduces
 * 32-bit values only, hence the shared-memory form. Every thread reaches
 * both barriers: the only early exit is the block-uniform row check.
 *
 * Pass 2: dx = (g - x u) / r with u = mean(x g) / r^2, and
 * partial = dy x / r, in f64, each rounded to f32 once. */
/* x, g = gamma dy and (when dy is not NULL) dy of the element at byte
 * offset off, as f64. */
static void rms_load(pg_kernel *k, pg_reg off, pg_reg xa, pg_reg dya, pg_reg gamma,
                     pg_reg *x, pg_reg *dy, pg_reg *g)
{
    pg_reg xv = pgk_ld_f32_at(k, xa, off);
    pg_reg dyv = pgk_ld_f32_at(k, dya, off);
    pg_reg gv = pgk_ld_f32_at(k, gamma, off);
    *x = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, xv);
    pg_reg dyd = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, dyv);
    *g = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, gv);
    pg_mul(k, PG_F64, *g, *g, dyd); /* exact: two f32 factors */
    if (dy)
        *dy = dyd;
}

/* The block's two f64 sums (each thread's ss and sg) in a fixed order:
 * threads, then columns of 32, then the 32 columns; every thread gets
 * both in sum[0], sum[1]. tsums holds 2 x threads f64, csums 64. */
static void block_sums2(pg_kernel *k, uint32_t threads, pg_reg tid, pg_reg ntid, pg_shared tsums,
                        pg_shared csums, pg_reg ss, pg_reg sg, pg_reg sum[2])
{
    pg_comment(k, "block sums in a fixed order: threads, then columns of 32, then 32 columns");
    pg_reg tbase = pgv_mov(k, PG_U32, pg_shared_addr(tsums));
    pg_reg slot = pgv_mad(k, PG_U32, tid, pg_u32(8), tbase);
    pg_st(k, PG_SPACE_SHARED, PG_F64, slot, 0, ss);
    pg_st(k, PG_SPACE_SHARED, PG_F64, slot, 8 * threads, sg);
    pg_bar_sync(k, 0);
    pg_reg c = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg csl = pgv_mad(k, PG_U32, c, pg_u32(8), tbase);
    pg_reg col[2];
    for (int s = 0; s < 2; s++)
        col[s] = pgv_mov(k, PG_F64, pg_f64(0.0));
    pg_reg have = pg_reg_new(k, PG_PRED);
    pg_reg idx = pg_reg_new(k, PG_U32);
    for (uint32_t i = 0; i < threads / 32; i++) {
        /* a block smaller than 256 threads has no sums past ntid */
        pg_add(k, PG_U32, idx, c, pg_u32(32 * i));
        pg_setp(k, PG_CMP_LT, PG_U32, have, idx, ntid);
        for (int s = 0; s < 2; s++) {
            pg_reg v = pgv_mov(k, PG_F64, pg_f64(0.0));
            pg_guard(k, have, false);
            pg_ld(k, PG_SPACE_SHARED, PG_F64, csl, 8 * (32 * i + threads * s), v);
            pg_add(k, PG_F64, col[s], col[s], v);
        }
    }
    pg_reg first32 = pgv_setp(k, PG_CMP_LT, PG_U32, tid, pg_u32(32));
    pg_reg cbase = pgv_mov(k, PG_U32, pg_shared_addr(csums));
    pg_reg cslot = pgv_mad(k, PG_U32, c, pg_u32(8), cbase);
    for (int s = 0; s < 2; s++) {
        pg_guard(k, first32, false);
        pg_st(k, PG_SPACE_SHARED, PG_F64, cslot, 8 * 32 * s, col[s]);
    }
    pg_bar_sync(k, 0);
    for (int s = 0; s < 2; s++)
        sum[s] = pgv_ld(k, PG_SPACE_SHARED, PG_F64, cbase, 8 * 32 * s);
    for (uint32_t l = 1; l < 32; l++) {
        for (int s = 0; s < 2; s++) {
            pg_reg v = pgv_ld(k, PG_SPACE_SHARED, PG_F64, cbase, 8 * (32 * s + l));
            pg_add(k, PG_F64, sum[s], sum[s], v);
        }
    }

}

/* fused: rms_norm_backward_add_bf16, whose params are (input, gamma,
 * grad_output, residual, grad_input, grad_input_bf16, rows, hidden, eps):
 * dx rounded to f32, plus the residual with res, stored with its bf16
 * copy; no partials. */
static int rms_bwd_body(pg_kernel *k, const pgk_desc *d, const pg_param *p, bool fused, bool res)
{
    const uint32_t threads = d->threads;
    /* thread sums: [t] = x^2, [256 + t] = x g; column sums: [c], [32 + c] */
    pg_shared tsums = pg_shared_static(k, PG_F64, 2 * threads, 8, "thread_sums");
    pg_shared csums = pg_shared_static(k, PG_F64, 64, 8, "column_sums");
    unsigned f = fused ? 1 : 0;
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg gamma = pg_param_load(k, p[1]);
    pg_reg dy = pg_param_load(k, p[2]);
    pg_reg rsd = res ? pg_param_load(k, p[3]) : x;
    pg_reg dx = pg_param_load(k, p[3 + f]);
    /* the partials (unfused), the bf16 copy (fused) */
    pg_reg part = pg_param_load(k, p[4 + f]);
    pg_reg rows = pg_param_load(k, p[5 + f]);
    pg_reg hidden = pg_param_load(k, p[6 + f]);
    pg_reg eps = pg_param_load(k, p[7 + f]);

    pg_label out = pg_label_new(k, "exit");
    block_row b = block_row_begin(k, rows, out);
    pg_reg tid = b.tid, ntid = b.ntid, row = b.row;
    pg_reg xa = pgk_row_addr(k, x, row, hidden);
    pg_reg dya = pgk_row_addr(k, dy, row, hidden);
    pg_reg dxa = pgk_row_addr(k, dx, row, hidden);
    pg_reg pa = fused ? pgk_addr2(k, part, row, hidden, pg_u32(0), 2)
                      : pgk_row_addr(k, part, row, hidden);
    pg_reg ra = res ? pgk_row_addr(k, rsd, row, hidden) : xa;

    pg_reg ss = pg_reg_new(k, PG_F64);
    pg_reg sg = pg_reg_new(k, PG_F64);
    pg_mov(k, PG_F64, ss, pg_f64(0.0));
    pg_mov(k, PG_F64, sg, pg_f64(0.0));
    pg_loop L;
    pg_reg h = pg_for_begin(k, &L, tid, hidden, ntid);
    pg_reg xd, gd;
    rms_load(k, pgk_f32_offset(k, h), xa, dya, gamma, &xd, NULL, &gd);
    pg_fma(k, PG_F64, ss, xd, xd, ss);
    pg_fma(k, PG_F64, sg, xd, gd, sg);
    pg_for_end(k, &L);

    pg_reg sum[2];
    block_sums2(k, threads, tid, ntid, tsums, csums, ss, sg, sum);

    pg_comment(k, "r = sqrt(sum x^2 / hidden + eps); u = (sum x g / hidden) / r^2, in f64");
    pg_reg fh = pgv_cvt(k, PG_F64, PG_U32, PG_RND_RN, hidden);
    pg_reg epsd = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, eps);
    pg_reg ms = pgv_div(k, PG_F64, sum[0], fh);
    pg_add(k, PG_F64, ms, ms, epsd);
    pg_reg r = pgv_sqrt(k, PG_F64, ms);
    pg_reg rinv = pgv_rcp(k, PG_F64, r);
    pg_reg nu = pgv_div(k, PG_F64, sum[1], fh);
    pg_mul(k, PG_F64, nu, nu, rinv);
    pg_mul(k, PG_F64, nu, nu, rinv);
    pg_neg(k, PG_F64, nu, nu);

    if (fused) {
        pg_comment(k, res ? "dx = (g - x u) / r rounded to f32, + residual; and its bf16 copy"
                          : "dx = (g - x u) / r rounded to f32, and its bf16 copy");
        h = pg_for_begin(k, &L, tid, hidden, ntid);
        pg_reg off = pgk_f32_offset(k, h);
        pg_reg wx, wg;
        rms_load(k, off, xa, dya, gamma, &wx, NULL, &wg);
        pg_reg t = pgv_fma(k, PG_F64, wx, nu, wg);
        pg_mul(k, PG_F64, t, t, rinv);
        pg_reg v = pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, t);
        if (res)
            pg_add(k, PG_F32, v, v, pgk_ld_f32_at(k, ra, off));
        pgk_st_f32_at(k, dxa, off, v);
        pgk_st_act(k, PGK_BF16, bf16_at(k, pa, h), v);
        pg_for_end(k, &L);
        return pgk_finish(k, out);
    }
    pg_comment(k, "dx = (g - x u) / r; partial = (dy x) / r; each rounded to f32 once");
    h = pg_for_begin(k, &L, tid, hidden, ntid);
    pg_reg off = pgk_f32_offset(k, h);
    pg_reg wx, wdy, wg;
    rms_load(k, off, xa, dya, gamma, &wx, &wdy, &wg);
    pg_reg t = pgv_fma(k, PG_F64, wx, nu, wg);
    pg_mul(k, PG_F64, t, t, rinv);
    pgk_st_f32_at(k, dxa, off, pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, t));
    pg_reg pt = pgv_mul(k, PG_F64, wdy, wx);
    pg_mul(k, PG_F64, pt, pt, rinv);
    pgk_st_f32_at(k, pa, off, pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, pt));
    pg_for_end(k, &L);

    return pgk_finish(k, out);
}

static int build_rms_bwd(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    return rms_bwd_body(k, d, p, false, false);
}

static int build_rms_bwd_add(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                             const uint32_t *knobs)
{
    return rms_bwd_body(k, d, p, true, knobs[RMS_RESIDUAL] != 0);
}

static const pgk_param rms_bwd_params[] = {
    {"input", PG_U64, true},
    {"gamma", PG_U64, true},
    {"grad_output", PG_U64, true},
    {"grad_input", PG_U64, true},
    {"grad_gamma_partial", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
    {"eps", PG_F32, false},
};

const pgk_desc pgk_desc_batched_rms_norm_backward = {
    .name = "batched_rms_norm_backward",
    .summary = "RMSNorm backward per row: grad_input and grad_gamma_partial[row, h] = dy x / r",
    PGK_PARAMS(rms_bwd_params),
    PGK_KNOBS(rms_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_rms_bwd,
    .launch = pgk_launch_rows,
};

static const pgk_param rms_bwd_add_params[] = {
    {"input", PG_U64, true},          {"gamma", PG_U64, true},
    {"grad_output", PG_U64, true},    {"residual", PG_U64, true},
    {"grad_input", PG_U64, true},     {"grad_input_bf16", PG_U64, true},
    {"rows", PG_U32, false},      {"cols", PG_U32, false},
    {"eps", PG_F32, false},
};

const pgk_desc pgk_desc_rms_norm_backward_add_bf16 = {
    .name = "rms_norm_backward_add_bf16",
    .summary = "RMSNorm backward per row: grad_input = dx (+ residual) (f32) and its bf16 copy; "
               "no gamma gradient",
    PGK_PARAMS(rms_bwd_add_params),
    PGK_KNOBS(rms_add_knobs),
    .min_target = PG_SM_80,
    .threads = PGK_THREADS,
    .build = build_rms_bwd_add,
    .launch = pgk_launch_rows,
};

/* ---------------------------------------------------------------- rms_norm_gamma_reduce */

/* grad_gamma[h] = sum over rows of partial[row, h]. A block owns 8 adjacent
 * columns; thread (lane l, column c) sums rows l, l+32, l+64, ... into four
 * accumulators (row l + 128 i + 32 u goes to accumulator u), combined as
 * (a0 + a1) + (a2 + a3); the 32 lane sums of a column are then added in
 * lane order from shared memory. The order depends on num_rows alone: the
 * result is bitwise the same run to run. Threads of a column past the end
 * sum no rows but still reach the barrier. */
static int build_gamma_reduce(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                              const uint32_t *knobs)
{
    (void)knobs;
    pg_shared lanes = pg_shared_static(k, PG_F32, d->threads, 4, "lane_sums");
    pg_reg part = pg_param_load(k, p[0]);
    pg_reg grad = pg_param_load(k, p[1]);
    pg_reg rows = pg_param_load(k, p[2]);
    pg_reg hidden = pg_param_load(k, p[3]);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg c = pgv_and(k, PG_B32, tid, pg_u32(GAMMA_COLS - 1));
    pg_reg lane = pgv_shr(k, PG_U32, tid, pg_u32(3));
    pg_reg col = pgv_mad(k, PG_U32, ctaid, pg_u32(GAMMA_COLS), c);
    pg_comment(k, "a column past the end sums no rows");
    pg_reg have = pgv_setp(k, PG_CMP_LT, PG_U32, col, hidden);
    pg_reg nrows = pgv_selp(k, PG_U32, rows, pg_u32(0), have);

    pg_reg acc[4];
    for (int j = 0; j < 4; j++)
        acc[j] = pgk_zero_f32(k);
    pg_reg room = pgv_setp(k, PG_CMP_GT, PG_U32, nrows, pg_u32(3 * GAMMA_LANES));
    pg_reg lim = pgv_sub(k, PG_U32, nrows, pg_u32(3 * GAMMA_LANES));
    pg_selp(k, PG_U32, lim, lim, pg_u32(0), room);
    pg_reg step = pgv_mul_wide(k, PG_U32, hidden, pg_u32(4 * GAMMA_LANES));
    pg_reg a = pgk_row_addr(k, part, lane, hidden);
    pg_reg coff = pgv_mul_wide(k, PG_U32, col, pg_u32(4));
    pg_add(k, PG_U64, a, a, coff);
    pg_reg r = pgv_mov(k, PG_U32, lane);

    pg_label main_top = pg_label_new(k, "rows4");
    pg_label tail_top = pg_label_new(k, "rows1");
    pg_label combine = pg_label_new(k, "combine");
    pg_reg pm = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, main_top);
    pg_setp(k, PG_CMP_GE, PG_U32, pm, r, lim);
    pg_bra_if(k, pm, false, tail_top);
    pg_reg v[4];
    for (int u = 0; u < 4; u++) {
        v[u] = pgk_ld_f32(k, a);
        pg_add(k, PG_U64, a, a, step);
    }
    for (int u = 0; u < 4; u++)
        pg_add(k, PG_F32, acc[u], acc[u], v[u]);
    pg_add(k, PG_U32, r, r, pg_u32(4 * GAMMA_LANES));
    pg_bra(k, main_top);

    pg_reg pt = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, tail_top);
    pg_setp(k, PG_CMP_GE, PG_U32, pt, r, nrows);
    pg_bra_if(k, pt, false, combine);
    pg_reg tv = pgk_ld_f32(k, a);
    pg_add(k, PG_F32, acc[0], acc[0], tv);
    pg_add(k, PG_U64, a, a, step);
    pg_add(k, PG_U32, r, r, pg_u32(GAMMA_LANES));
    pg_bra(k, tail_top);

    pg_label_bind(k, combine);
    pg_add(k, PG_F32, acc[0], acc[0], acc[1]);
    pg_add(k, PG_F32, acc[2], acc[2], acc[3]);
    pg_add(k, PG_F32, acc[0], acc[0], acc[2]);
    pg_reg base = pgv_mov(k, PG_U32, pg_shared_addr(lanes));
    pg_reg slot = pgv_mad(k, PG_U32, tid, pg_u32(4), base);
    pg_st(k, PG_SPACE_SHARED, PG_F32, slot, 0, acc[0]);
    pg_bar_sync(k, 0);

    pg_comment(k, "lane 0 of each column adds the 32 lane sums in lane order");
    pg_label out = pg_label_new(k, "exit");
    pg_reg not_lane0 = pgv_setp(k, PG_CMP_GE, PG_U32, tid, pg_u32(GAMMA_COLS));
    pg_bra_if(k, not_lane0, false, out);
    pg_bra_if(k, have, true, out);
    pg_reg sum = pgv_ld(k, PG_SPACE_SHARED, PG_F32, slot, 0);
    for (uint32_t l = 1; l < GAMMA_LANES; l++) {
        pg_reg lv = pgv_ld(k, PG_SPACE_SHARED, PG_F32, slot, 4 * GAMMA_COLS * l);
        pg_add(k, PG_F32, sum, sum, lv);
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, grad, col, 4), 0, sum);
    return pgk_finish(k, out);
}

static int launch_gamma_reduce(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    if (knobs[PGK_ROWS] == 0 || knobs[PGK_ROWS] > INT32_MAX || knobs[PGK_WIDTH] == 0 ||
        knobs[PGK_WIDTH] > INT32_MAX)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(knobs[PGK_WIDTH], GAMMA_COLS), 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param gamma_params[] = {
    {"partial", PG_U64, true},
    {"grad_gamma", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
};

static const pgk_knob gamma_knobs[] = {
    [PGK_ROWS] = {"rows", 2048, 1, INT32_MAX, "rows of partials to sum", false},
    [PGK_WIDTH] = {"cols", 1536, 1, INT32_MAX, "columns (gamma's length)", false},
};

const pgk_desc pgk_desc_rms_norm_gamma_reduce = {
    .name = "rms_norm_gamma_reduce",
    .summary = "grad_gamma[h] = sum over rows of partial[row, h], in a fixed order",
    PGK_PARAMS(gamma_params),
    PGK_KNOBS(gamma_knobs),
    .min_target = PG_SM_70,
    .threads = GAMMA_COLS * GAMMA_LANES,
    .build = build_gamma_reduce,
    .launch = launch_gamma_reduce,
};
