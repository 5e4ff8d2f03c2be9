/* SPDX-License-Identifier: MIT */
/*
 * The forward kernels of a training step and its small helpers: what a
 * model needs besides the backward set (backward.c, gemm.c) to train end to
 * end on the GPU.
 *
 *   rms_norm_forward          y = x / r * gamma, r = sqrt(mean x^2 + eps), one block a row
 *   gemm_forward              C[M,N]  = A[M,K] * B[K,N]   (NN; weights stored [in, out])
 *   gemm_forward_accumulate   C[M,N] += A[M,K] * B[K,N]
 *   silu_forward              y = x * sigmoid(x)
 *   batched_softmax_forward   per row of any length, one warp a row
 *   transpose                 out[c, r] = in[r, c]
 *   mse_loss                  grad = 2 (pred - target) / n, per-block partial sums of squares
 *   adamw_hyper_advance       t += 1 and the bias corrections of step t, in device memory
 *
 * With weights stored [in, out] the forward projection is NN, dX = dY * W^T
 * is gemm_backward_a and dW = X^T * dY is gemm_backward_b.
 *
 * Same rules as the rest of the catalog: every dimension is a parameter
 * (one module serves every shape), float arithmetic is .rn with IEEE
 * div/sqrt/rcp, and every reduction runs in an order fixed by the shape
 * alone: the same input gives the same bits, run to run and launch to
 * launch (a graph replay included). No float atomics anywhere.
 */
#include "kernels.h"

#define FWD_THREADS 256u
/* batched_softmax_forward: one warp a row. */
/* gemm_forward: square tiles of GEMM_T, one output a thread. */
#define GEMM_T 16u
#define GEMM_MAX_DIM (1u << 24)
/* transpose: TILE x TILE through shared memory, TILE x TROWS threads. */
#define TILE 32u
#define TROWS 8u

/* log2(e) split in a float and its rest: exp(a) = 2^(a*hi) * 2^(a*lo). */

/* ---------------------------------------------------------------- helpers */

static pg_reg zero_f32(pg_kernel *k)
{
    pg_reg v = pg_reg_new(k, PG_F32);
    pg_mov(k, PG_F32, v, pg_f32(0.0f));
    return v;
}

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a + b - 1) / b); }

/* ---------------------------------------------------------------- rms_norm_forward */

/* One block a row. Pass 1: each thread sums x^2 over h = tid, tid + 256, ...
 * (an fma chain), then one fixed-order block reduction: the same order as
 * batched_rms_norm_backward's, so both see the same r. Pass 2 writes
 * y = (x * (1/r)) * gamma. Threads past the end of a short row add nothing
 * but still reach the barrier. */
static int build_rms_fwd(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    pg_kernel_set_maxntid(k, FWD_THREADS, 1, 1);
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg gamma = pg_param_load(k, p[1]);
    pg_reg y = pg_param_load(k, p[2]);
    pg_reg rows = pg_param_load(k, p[3]);
    pg_reg hidden = pg_param_load(k, p[4]);
    pg_reg eps = pg_param_load(k, p[5]);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg row = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_label out = pg_label_new(k, "exit");
    pg_comment(k, "the whole block leaves together: the row is the block's");
    pg_bounds_guard(k, row, rows, out);
    pg_reg xa = pgk_row_addr(k, x, row, hidden);
    pg_reg ya = pgk_row_addr(k, y, row, hidden);

    pg_reg ss = zero_f32(k);
    pg_reg h = pg_reg_new(k, PG_U32);
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_reg a = pg_reg_new(k, PG_U64);
    pg_mov(k, PG_U32, h, tid);
    pg_label sum_top = pg_label_new(k, "sums");
    pg_label sum_done = pg_label_new(k, "reduce");
    pg_reg ps = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, sum_top);
    pg_setp(k, PG_CMP_GE, PG_U32, ps, h, hidden);
    pg_bra_if(k, ps, false, sum_done);
    pg_mul_wide(k, PG_U32, off, h, pg_u32(4));
    pg_add(k, PG_U64, a, xa, off);
    pg_reg xv = pgk_ld_f32(k, a);
    pg_fma(k, PG_F32, ss, xv, xv, ss);
    pg_add(k, PG_U32, h, h, ntid);
    pg_bra(k, sum_top);
    pg_label_bind(k, sum_done);

    pg_reg sum_sq = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, ss, scratch);

    pg_comment(k, "r = sqrt(sum_sq / hidden + eps)");
    pg_reg fh = pg_reg_new(k, PG_F32);
    pg_cvt(k, PG_F32, PG_U32, PG_RND_RN, fh, hidden);
    pg_reg ms = pg_reg_new(k, PG_F32);
    pg_div(k, PG_F32, ms, sum_sq, fh);
    pg_add(k, PG_F32, ms, ms, eps);
    pg_reg r = pg_reg_new(k, PG_F32);
    pg_sqrt(k, PG_F32, r, ms);
    pg_reg rinv = pg_reg_new(k, PG_F32);
    pg_rcp(k, PG_F32, rinv, r);

    pg_comment(k, "y = (x / r) * gamma");
    pg_mov(k, PG_U32, h, tid);
    pg_label wr_top = pg_label_new(k, "write");
    pg_reg pw = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, wr_top);
    pg_setp(k, PG_CMP_GE, PG_U32, pw, h, hidden);
    pg_bra_if(k, pw, false, out);
    pg_mul_wide(k, PG_U32, off, h, pg_u32(4));
    pg_add(k, PG_U64, a, xa, off);
    pg_reg wx = pgk_ld_f32(k, a);
    pg_add(k, PG_U64, a, gamma, off);
    pg_reg wg = pgk_ld_f32(k, a);
    pg_reg t = pg_reg_new(k, PG_F32);
    pg_mul(k, PG_F32, t, wx, rinv);
    pg_mul(k, PG_F32, t, t, wg);
    pg_add(k, PG_U64, a, ya, off);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, t);
    pg_add(k, PG_U32, h, h, ntid);
    pg_bra(k, wr_top);

    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param rms_params[] = {
    {"input", PG_U64, true},
    {"gamma", PG_U64, true},
    {"output", PG_U64, true},
    {"num_rows", PG_U32, false},
    {"hidden_dim", PG_U32, false},
    {"eps", PG_F32, false},
};

static const pgk_knob rms_knobs[] = {
    {"num_rows", 2048, 1, INT32_MAX, "number of rows (one block each)"},
    {"hidden_dim", 1536, 1, INT32_MAX, "elements a row"},
};

const pgk_desc pgk_desc_rms_norm_forward = {
    .name = "rms_norm_forward",
    .summary = "RMSNorm per row: output = input / sqrt(mean(input^2) + eps) * gamma",
    .params = rms_params,
    .nparams = 6,
    .knobs = rms_knobs,
    .nknobs = 2,
    .min_target = PG_SM_70,
    .build = build_rms_fwd,
    .launch = pgk_launch_rows,
};

/* ---------------------------------------------------------------- gemm_forward(_accumulate) */

/* The seed's tiled form for NN: block (16,16) owns a 16x16 tile of C;
 * 16-wide slices of A's rows and B's columns go through shared memory, and
 * each thread runs one fma chain over k = 0, 1, ..., K-1 in order (a term
 * past the edge is 0*0 and changes nothing), so every output has the same
 * bits run to run. The k-loop's trip count comes from the params: every
 * thread reaches its barriers. The accumulate form adds the chain to C once
 * at the end. */
static int build_gemm_fwd(pg_kernel *k, const pg_param *p, bool accumulate)
{
    pg_kernel_set_maxntid(k, GEMM_T, GEMM_T, 1);
    pg_shared as = pg_shared_static(k, PG_F32, GEMM_T * GEMM_T, 4, "a_tile");
    pg_shared bs = pg_shared_static(k, PG_F32, GEMM_T * GEMM_T, 4, "b_tile");
    pg_reg A = pg_param_load(k, p[0]);
    pg_reg B = pg_param_load(k, p[1]);
    pg_reg C = pg_param_load(k, p[2]);
    pg_reg M = pg_param_load(k, p[3]);
    pg_reg N = pg_param_load(k, p[4]);
    pg_reg K = pg_param_load(k, p[5]);

    pg_reg tx = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ty = pg_sreg_read(k, PG_SREG_TID_Y);
    pg_reg bx = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg by = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg row = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, row, by, pg_u32(GEMM_T), ty);
    pg_reg col = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, col, bx, pg_u32(GEMM_T), tx);
    pg_reg row_ok = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_LT, PG_U32, row_ok, row, M);
    pg_reg col_ok = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_LT, PG_U32, col_ok, col, N);

    pg_comment(k, "shared slots: a_tile[ty][tx] and b_tile[ty][tx] written, a_tile[ty][*] and "
                  "b_tile[*][tx] read");
    pg_reg a_base = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, a_base, pg_shared_addr(as));
    pg_reg b_base = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, b_base, pg_shared_addr(bs));
    pg_reg slot = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, slot, ty, pg_u32(GEMM_T), tx);
    pg_shl(k, PG_B32, slot, slot, pg_u32(2));
    pg_reg a_st = pg_reg_new(k, PG_U32);
    pg_add(k, PG_U32, a_st, a_base, slot);
    pg_reg b_st = pg_reg_new(k, PG_U32);
    pg_add(k, PG_U32, b_st, b_base, slot);
    pg_reg a_rd = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, a_rd, ty, pg_u32(GEMM_T * 4), a_base);
    pg_reg b_rd = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, b_rd, tx, pg_u32(4), b_base);

    pg_comment(k, "A row pointer &A[row*K] and B column pointer &B[col]");
    pg_reg a_row = pgk_row_addr(k, A, row, K);
    pg_reg b_col = pgk_elem_addr(k, B, col, 4);

    pg_reg acc = zero_f32(k);
    pg_reg t0 = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, t0, pg_u32(0));
    pg_reg ka = pg_reg_new(k, PG_U32);
    pg_reg kb = pg_reg_new(k, PG_U32);
    pg_reg pa = pg_reg_new(k, PG_PRED);
    pg_reg pb = pg_reg_new(k, PG_PRED);
    pg_reg pt = pg_reg_new(k, PG_PRED);
    pg_reg av = pg_reg_new(k, PG_F32);
    pg_reg bv = pg_reg_new(k, PG_F32);
    pg_reg addr = pg_reg_new(k, PG_U64);
    pg_label top = pg_label_new(k, "k_tile");
    pg_label done = pg_label_new(k, "store");
    pg_label_bind(k, top);
    pg_setp(k, PG_CMP_GE, PG_U32, pt, t0, K);
    pg_bra_if(k, pt, false, done);

    pg_comment(k, "a_tile[ty][tx] = A[row][t0+tx], b_tile[ty][tx] = B[t0+ty][col]; 0 past the edges");
    pg_add(k, PG_U32, ka, t0, tx);
    pg_setp(k, PG_CMP_LT, PG_U32, pa, ka, K);
    pg_and(k, PG_PRED, pa, pa, row_ok);
    pg_mov(k, PG_F32, av, pg_f32(0.0f));
    pg_reg aoff = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, aoff, ka, pg_u32(4));
    pg_add(k, PG_U64, addr, a_row, aoff);
    pg_guard(k, pa, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, av);
    pg_st(k, PG_SPACE_SHARED, PG_F32, a_st, 0, av);

    pg_add(k, PG_U32, kb, t0, ty);
    pg_setp(k, PG_CMP_LT, PG_U32, pb, kb, K);
    pg_and(k, PG_PRED, pb, pb, col_ok);
    pg_mov(k, PG_F32, bv, pg_f32(0.0f));
    pg_reg boff = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, boff, kb, N);
    pg_shl(k, PG_B64, boff, boff, pg_u32(2));
    pg_add(k, PG_U64, addr, b_col, boff);
    pg_guard(k, pb, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, bv);
    pg_st(k, PG_SPACE_SHARED, PG_F32, b_st, 0, bv);
    pg_bar_sync(k, 0);

    pg_comment(k, "acc = fma(a_tile[ty][kk], b_tile[kk][tx], acc), kk = 0..15 in order");
    for (uint32_t kk = 0; kk < GEMM_T; kk++) {
        pg_reg x = pg_reg_new(k, PG_F32);
        pg_reg w = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, a_rd, 4 * kk, x);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, b_rd, 4 * GEMM_T * kk, w);
        pg_fma(k, PG_F32, acc, x, w, acc);
    }
    pg_bar_sync(k, 0);
    pg_add(k, PG_U32, t0, t0, pg_u32(GEMM_T));
    pg_bra(k, top);

    pg_label_bind(k, done);
    pg_label out = pg_label_new(k, "exit");
    pg_reg ok = pg_reg_new(k, PG_PRED);
    pg_and(k, PG_PRED, ok, row_ok, col_ok);
    pg_bra_if(k, ok, true, out);
    pg_reg c_row = pgk_row_addr(k, C, row, N);
    pg_reg caddr = pgk_elem_addr(k, c_row, col, 4);
    if (accumulate) {
        pg_reg old = pgk_ld_f32(k, caddr);
        pg_add(k, PG_F32, acc, old, acc);
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, caddr, 0, acc);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_gemm_fwd_set(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    return build_gemm_fwd(k, p, false);
}

static int build_gemm_fwd_acc(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    return build_gemm_fwd(k, p, true);
}

/* knobs: m, n, k. Grid (ceil(N/16), ceil(M/16)), block (16,16). */
static int launch_gemm_fwd(const uint32_t *kn, pgk_launch *out)
{
    if (kn[0] == 0 || kn[1] == 0 || kn[2] == 0 || kn[0] > GEMM_MAX_DIM || kn[1] > GEMM_MAX_DIM ||
        kn[2] > GEMM_MAX_DIM)
        return PG_ERANGE;
    uint32_t gy = ceil_div(kn[0], GEMM_T);
    if (gy > 65535)
        return PG_ERANGE;
    *out = (pgk_launch){{ceil_div(kn[1], GEMM_T), gy, 1}, {GEMM_T, GEMM_T, 1}, 0};
    return PG_OK;
}

static const pgk_param gemm_params[] = {
    {"a", PG_U64, true}, {"b", PG_U64, true}, {"c", PG_U64, true},
    {"m", PG_U32, false}, {"n", PG_U32, false}, {"k", PG_U32, false},
};

static const pgk_knob gemm_knobs[] = {
    {"m", 512, 1, GEMM_MAX_DIM, "rows of A and C (tokens)"},
    {"n", 1536, 1, GEMM_MAX_DIM, "columns of B and C (layer outputs)"},
    {"k", 1536, 1, GEMM_MAX_DIM, "columns of A, rows of B (layer inputs)"},
};

const pgk_desc pgk_desc_gemm_forward = {
    .name = "gemm_forward",
    .summary = "C[M,N] = A[M,K] * B[K,N] (f32, NN, 16x16 tiles, deterministic)",
    .params = gemm_params,
    .nparams = 6,
    .knobs = gemm_knobs,
    .nknobs = 3,
    .min_target = PG_SM_70,
    .build = build_gemm_fwd_set,
    .launch = launch_gemm_fwd,
};

const pgk_desc pgk_desc_gemm_forward_accumulate = {
    .name = "gemm_forward_accumulate",
    .summary = "C[M,N] += A[M,K] * B[K,N] (f32, NN, 16x16 tiles, deterministic)",
    .params = gemm_params,
    .nparams = 6,
    .knobs = gemm_knobs,
    .nknobs = 3,
    .min_target = PG_SM_70,
    .build = build_gemm_fwd_acc,
    .launch = launch_gemm_fwd,
};

/* ---------------------------------------------------------------- silu_forward */

/* y = x * s, s = sigmoid(x). With z = exp(-|x|), s is 1/(1+z) for x >= 0
 * and z/(1+z) otherwise: no cancellation and no overflow for any x. */
static int build_silu_fwd(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    pg_kernel_set_maxntid(k, FWD_THREADS, 1, 1);
    pg_reg input = pg_param_load(k, p[0]);
    pg_reg output = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pg_global_tid_x(k);
    pg_bounds_guard(k, gid, n, out);

    pg_reg x = pgk_ld_f32(k, pgk_elem_addr(k, input, gid, 4));
    pg_comment(k, "z = exp(-|x|); s = x >= 0 ? 1/(1+z) : z/(1+z)");
    pg_reg na = pg_reg_new(k, PG_F32);
    pg_abs(k, PG_F32, na, x);
    pg_neg(k, PG_F32, na, na);
    pg_reg z = pgk_exp_nonpos(k, na);
    pg_reg q = pg_reg_new(k, PG_F32);
    pg_add(k, PG_F32, q, z, pg_f32(1.0f));
    pg_reg ra = pg_reg_new(k, PG_F32);
    pg_rcp(k, PG_F32, ra, q);
    pg_reg rb = pg_reg_new(k, PG_F32);
    pg_div(k, PG_F32, rb, z, q);
    pg_reg pos = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_GE, PG_F32, pos, x, pg_f32(0.0f));
    pg_reg s = pg_reg_new(k, PG_F32);
    pg_selp(k, PG_F32, s, ra, rb, pos);
    pg_reg y = pg_reg_new(k, PG_F32);
    pg_mul(k, PG_F32, y, x, s);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, output, gid, 4), 0, y);

    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param silu_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_silu_forward = {
    .name = "silu_forward",
    .summary = "output = input * sigmoid(input)",
    .params = silu_params,
    .nparams = 3,
    .knobs = pgk_knob_n,
    .nknobs = 1,
    .min_target = PG_SM_70,
    .build = build_silu_fwd,
    .launch = pgk_launch_elementwise,
};

/* ---------------------------------------------------------------- batched_softmax_forward */

/* One warp a row, eight rows a block; lane l takes elements l, l+32, ... so
 * any row_size works. Pass 1: the row's max (lane maxima, then the
 * butterfly: max is exact, every lane the same bits). Pass 2: e = exp(x -
 * max) (x - max <= 0: no overflow), written to output and summed per lane
 * in element order, then the fixed butterfly. Pass 3: output = e / sum
 * (div.rn). A warp past the last row leaves as a whole; no shared memory,
 * no barrier. */
static int build_softmax_fwd(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    pg_kernel_set_maxntid(k, FWD_THREADS, 1, 1);
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg y = pg_param_load(k, p[1]);
    pg_reg rows = pg_param_load(k, p[2]);
    pg_reg width = pg_param_load(k, p[3]);

    pg_label out = pg_label_new(k, "exit");
    pg_reg lane;
    pg_reg row = pgk_warp_row(k, rows, out, &lane);

    pg_reg xa = pgk_row_addr(k, x, row, width);
    pg_reg ya = pgk_row_addr(k, y, row, width);
    pg_reg j = pg_reg_new(k, PG_U32);
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_reg a = pg_reg_new(k, PG_U64);

    pg_comment(k, "pass 1: m = max over the row");
    pg_reg mx = pg_reg_new(k, PG_F32);
    pg_mov(k, PG_F32, mx, pg_f32(-__builtin_inff()));
    pg_mov(k, PG_U32, j, lane);
    pg_label max_top = pg_label_new(k, "max");
    pg_label max_done = pg_label_new(k, "max_reduce");
    pg_reg p1 = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, max_top);
    pg_setp(k, PG_CMP_GE, PG_U32, p1, j, width);
    pg_bra_if(k, p1, false, max_done);
    pg_mul_wide(k, PG_U32, off, j, pg_u32(4));
    pg_add(k, PG_U64, a, xa, off);
    pg_reg v1 = pgk_ld_f32(k, a);
    pg_max(k, PG_F32, mx, mx, v1);
    pg_add(k, PG_U32, j, j, pg_u32(32));
    pg_bra(k, max_top);
    pg_label_bind(k, max_done);
    pg_reg m = pg_warp_reduce(k, PG_REDUCE_MAX, PG_F32, mx);

    pg_comment(k, "pass 2: e = exp(x - m) to output; s = sum e");
    pg_reg acc = zero_f32(k);
    pg_mov(k, PG_U32, j, lane);
    pg_label exp_top = pg_label_new(k, "exp");
    pg_label exp_done = pg_label_new(k, "sum_reduce");
    pg_reg p2 = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, exp_top);
    pg_setp(k, PG_CMP_GE, PG_U32, p2, j, width);
    pg_bra_if(k, p2, false, exp_done);
    pg_mul_wide(k, PG_U32, off, j, pg_u32(4));
    pg_add(k, PG_U64, a, xa, off);
    pg_reg v2 = pgk_ld_f32(k, a);
    pg_reg d = pg_reg_new(k, PG_F32);
    pg_sub(k, PG_F32, d, v2, m);
    pg_reg e = pgk_exp_nonpos(k, d);
    pg_add(k, PG_F32, acc, acc, e);
    pg_add(k, PG_U64, a, ya, off);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, e);
    pg_add(k, PG_U32, j, j, pg_u32(32));
    pg_bra(k, exp_top);
    pg_label_bind(k, exp_done);
    pg_reg sum = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, acc);

    pg_comment(k, "pass 3: output = e / s (each lane rereads what it wrote)");
    pg_mov(k, PG_U32, j, lane);
    pg_label div_top = pg_label_new(k, "normalize");
    pg_reg p3 = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, div_top);
    pg_setp(k, PG_CMP_GE, PG_U32, p3, j, width);
    pg_bra_if(k, p3, false, out);
    pg_mul_wide(k, PG_U32, off, j, pg_u32(4));
    pg_add(k, PG_U64, a, ya, off);
    pg_reg v3 = pgk_ld_f32(k, a);
    pg_div(k, PG_F32, v3, v3, sum);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v3);
    pg_add(k, PG_U32, j, j, pg_u32(32));
    pg_bra(k, div_top);

    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param softmax_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"total_rows", PG_U32, false},
    {"row_size", PG_U32, false},
};

static const pgk_knob softmax_knobs[] = {
    {"total_rows", 4096, 1, INT32_MAX, "number of rows"},
    {"row_size", 512, 1, INT32_MAX, "elements a row (any size)"},
};

const pgk_desc pgk_desc_batched_softmax_forward = {
    .name = "batched_softmax_forward",
    .summary = "per row: output = exp(x - max) / sum exp(x - max); one warp a row, any row_size",
    .params = softmax_params,
    .nparams = 4,
    .knobs = softmax_knobs,
    .nknobs = 2,
    .min_target = PG_SM_70,
    .build = build_softmax_fwd,
    .launch = pgk_launch_warp_rows,
};

/* ---------------------------------------------------------------- transpose */

/* A 32x32 tile through shared memory (rows padded to 33 floats: the column
 * reads hit 32 different banks), block (32, 8): each thread moves four
 * elements in and four out, coalesced both ways. Elements past the edges
 * are neither read nor written; the barrier is reached by every thread. */
static int build_transpose(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
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
    pg_reg base = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, base, pg_shared_addr(tile));

    pg_comment(k, "in: tile[ty + 8i][tx] = in[by*32 + ty + 8i][bx*32 + tx]");
    pg_reg c_in = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, c_in, bx, pg_u32(TILE), tx);
    pg_reg c_ok = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_LT, PG_U32, c_ok, c_in, cols);
    pg_reg r0 = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, r0, by, pg_u32(TILE), ty);
    pg_reg s_in = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, s_in, ty, pg_u32(TILE + 1), tx);
    pg_mad(k, PG_U32, s_in, s_in, pg_u32(4), base);
    for (uint32_t i = 0; i < TILE / TROWS; i++) {
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_add(k, PG_U32, r, r0, pg_u32(TROWS * i));
        pg_reg ok = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_LT, PG_U32, ok, r, rows);
        pg_and(k, PG_PRED, ok, ok, c_ok);
        pg_reg a = pgk_elem_addr(k, pgk_row_addr(k, in, r, cols), c_in, 4);
        pg_reg v = zero_f32(k);
        pg_guard(k, ok, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v);
        pg_st(k, PG_SPACE_SHARED, PG_F32, s_in, (int64_t)(4 * TROWS * (TILE + 1) * i), v);
    }
    pg_bar_sync(k, 0);

    pg_comment(k, "out: out[bx*32 + ty + 8i][by*32 + tx] = tile[tx][ty + 8i]");
    pg_reg r_out = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, r_out, by, pg_u32(TILE), tx);
    pg_reg r_ok = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_LT, PG_U32, r_ok, r_out, rows);
    pg_reg c0 = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, c0, bx, pg_u32(TILE), ty);
    pg_reg s_out = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, s_out, tx, pg_u32(TILE + 1), ty);
    pg_mad(k, PG_U32, s_out, s_out, pg_u32(4), base);
    for (uint32_t i = 0; i < TILE / TROWS; i++) {
        pg_reg c = pg_reg_new(k, PG_U32);
        pg_add(k, PG_U32, c, c0, pg_u32(TROWS * i));
        pg_reg ok = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_LT, PG_U32, ok, c, cols);
        pg_and(k, PG_PRED, ok, ok, r_ok);
        pg_reg v = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_SHARED, PG_F32, s_out, (int64_t)(4 * TROWS * i), v);
        pg_reg a = pgk_elem_addr(k, pgk_row_addr(k, outp, c, rows), r_out, 4);
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v);
    }
    pg_ret(k);
    return pg_kernel_error(k);
}

/* knobs: rows, cols. Grid (ceil(cols/32), ceil(rows/32)), block (32, 8). */
static int launch_transpose(const uint32_t *kn, pgk_launch *out)
{
    if (kn[0] == 0 || kn[1] == 0 || kn[0] > INT32_MAX || kn[1] > INT32_MAX)
        return PG_ERANGE;
    uint32_t gy = ceil_div(kn[0], TILE);
    if (gy > 65535)
        return PG_ERANGE;
    *out = (pgk_launch){{ceil_div(kn[1], TILE), gy, 1}, {TILE, TROWS, 1}, 0};
    return PG_OK;
}

static const pgk_param transpose_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
};

static const pgk_knob transpose_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "rows of the input (columns of the output)"},
    {"cols", 1536, 1, INT32_MAX, "columns of the input (rows of the output)"},
};

const pgk_desc pgk_desc_transpose = {
    .name = "transpose",
    .summary = "output[cols, rows] = input[rows, cols]^T (f32, 32x32 shared-memory tiles)",
    .params = transpose_params,
    .nparams = 4,
    .knobs = transpose_knobs,
    .nknobs = 2,
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
static int build_mse(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    pg_kernel_set_maxntid(k, FWD_THREADS, 1, 1);
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_reg pred = pg_param_load(k, p[0]);
    pg_reg target = pg_param_load(k, p[1]);
    pg_reg grad = pg_param_load(k, p[2]);
    pg_reg partials = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);

    pg_comment(k, "scale = 2 / n");
    pg_reg fn = pg_reg_new(k, PG_F32);
    pg_cvt(k, PG_F32, PG_U32, PG_RND_RN, fn, n);
    pg_reg scale = pg_reg_new(k, PG_F32);
    pg_div(k, PG_F32, scale, pg_f32(2.0f), fn);

    pg_reg acc = zero_f32(k);
    pg_loop l;
    pg_reg i = pg_grid_stride_begin(k, &l, n);
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, off, i, pg_u32(4));
    pg_reg a = pg_reg_new(k, PG_U64);
    pg_add(k, PG_U64, a, pred, off);
    pg_reg pv = pgk_ld_f32(k, a);
    pg_add(k, PG_U64, a, target, off);
    pg_reg tv = pgk_ld_f32(k, a);
    pg_reg d = pg_reg_new(k, PG_F32);
    pg_sub(k, PG_F32, d, pv, tv);
    pg_fma(k, PG_F32, acc, d, d, acc);
    pg_reg g = pg_reg_new(k, PG_F32);
    pg_mul(k, PG_F32, g, d, scale);
    pg_add(k, PG_U64, a, grad, off);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, g);
    pg_grid_stride_end(k, &l);

    pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, acc, scratch);
    pg_comment(k, "thread 0 writes partials[blockIdx.x]");
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg not_first = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_NE, PG_U32, not_first, tid, pg_u32(0));
    pg_guard(k, not_first, false);
    pg_ret(k);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, partials, ctaid, 4), 0, sum);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_mse(const uint32_t *knobs, pgk_launch *out)
{
    if (knobs[0] == 0)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_squared_sum_num_blocks(knobs[0]), 1, 1}, {FWD_THREADS, 1, 1}, 0};
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
    .params = mse_params,
    .nparams = 5,
    .knobs = pgk_knob_n,
    .nknobs = 1,
    .min_target = PG_SM_70,
    .build = build_mse,
    .launch = launch_mse,
};

/* ---------------------------------------------------------------- adamw_hyper_advance */

/* The AdamW step counter kept on the device, so that a captured training
 * step replayed N times takes N optimizer steps. hyper holds ten f32:
 *   [0..6] lr, beta1, beta2, eps, weight_decay, bias_correction1,
 *          bias_correction2 (adamw_step_dev's seven),
 *   [7..9] beta1^t, beta2^t, t.
 * One thread: p1 = beta1^(t-1) * beta1, p2 likewise, bc = 1 / (1 - p), t + 1.
 * The powers are running products in f32, the same a host can mirror. */
static int build_hyper_advance(pg_kernel *k, const pg_param *p, const uint32_t *knobs)
{
    (void)knobs;
    pg_kernel_set_maxntid(k, 1, 1, 1);
    pg_reg h = pg_param_load(k, p[0]);
    pg_reg b1 = pg_reg_new(k, PG_F32);
    pg_reg b2 = pg_reg_new(k, PG_F32);
    pg_reg p1 = pg_reg_new(k, PG_F32);
    pg_reg p2 = pg_reg_new(k, PG_F32);
    pg_reg t = pg_reg_new(k, PG_F32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 1, b1);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 2, b2);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 7, p1);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 8, p2);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 9, t);
    pg_comment(k, "p = p * beta; bc = 1 / (1 - p); t = t + 1");
    pg_mul(k, PG_F32, p1, p1, b1);
    pg_mul(k, PG_F32, p2, p2, b2);
    pg_reg bc1 = pg_reg_new(k, PG_F32);
    pg_sub(k, PG_F32, bc1, pg_f32(1.0f), p1);
    pg_div(k, PG_F32, bc1, pg_f32(1.0f), bc1);
    pg_reg bc2 = pg_reg_new(k, PG_F32);
    pg_sub(k, PG_F32, bc2, pg_f32(1.0f), p2);
    pg_div(k, PG_F32, bc2, pg_f32(1.0f), bc2);
    pg_add(k, PG_F32, t, t, pg_f32(1.0f));
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 5, bc1);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 6, bc2);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 7, p1);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 8, p2);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * 9, t);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_single(const uint32_t *knobs, pgk_launch *out)
{
    (void)knobs;
    *out = (pgk_launch){{1, 1, 1}, {1, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param hyper_params[] = {
    {"hyper_ptr", PG_U64, true},
};

const pgk_desc pgk_desc_adamw_hyper_advance = {
    .name = "adamw_hyper_advance",
    .summary = "one AdamW step on the device: t += 1, bias corrections 1/(1 - beta^t) in hyper[5..6]",
    .params = hyper_params,
    .nparams = 1,
    .knobs = NULL,
    .nknobs = 0,
    .min_target = PG_SM_70,
    .build = build_hyper_advance,
    .launch = launch_single,
};
