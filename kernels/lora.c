/* SPDX-License-Identifier: MIT */
/*
 * The thin products of a LoRA pair (A [r, in], B [out, r], f32), where the
 * rank r (1..64, the baked knob `rank`) is one dimension and the general
 * GEMM tiles would leave most of the GPU idle:
 *
 *   lora_down_f32    ws[y][t, j] = sum over split y of k: x[t, k] w[j, k]
 *                    (xa = x A^T with w = A; dxa = dy B with w = B^T)
 *   lora_wgrad_f32   ws[y][n, j] = sum over split y of t: d[t, n] xa[t, j]
 *                    (dB = dy^T xa; dA^T = x^T dxa)
 *   lora_reduce_f32  out = scale * sum over y of ws[y] (in split order),
 *                    stored as is or transposed ([n, r] -> [r, n])
 *   lora_up_f32      y[t, n] (+)= scale * sum_j xa[t, j] w(n, j)
 *                    (y += xa B^T; dx += dxa A, and with knob part the
 *                    pairs sharing an input at once: xa part-major as
 *                    lora_tile.c stores it, w their stacked A)
 *
 * pgrt_lm runs lora_up with lora_tile.c's lora_proj and lora_grad, which
 * finish their sums in-kernel; lora_down, lora_wgrad and lora_reduce stay
 * as the plain composition that test_lora checks and times against them.
 *
 * Every sum over T or over in/out is split into fixed slices (the knob and
 * param `splits`), each slice summed by one warp or thread in index order
 * and the slices added by lora_reduce in order: no atomics, the same bits
 * every run. All operands are f32 rows; nothing here is padded, so any
 * T, in, out and r are accepted.
 */
#include "model.h"

/* Warps a block of lora_down; rows a warp there (register budget: rows x r
 * accumulators, at most 64). */
#define DOWN_WARPS 4u
#define WGRAD_THREADS 128u
#define WG_UNROLL 8u /* rows a turn of lora_wgrad */
#define UP_THREADS 256u
#define UP_ROWS 32u /* rows of y a lora_up block */
#define RANK_MAX 64u

static uint32_t down_rows(uint32_t r)
{
    uint32_t rw = RANK_MAX / r;
    return rw < 1 ? 1 : rw > 4 ? 4 : rw;
}

/* ---------------------------------------------------------------- lora_down */

enum { DN_ROWS, DN_K, DN_RANK, DN_SPLITS };

/* A warp owns rw rows; its lanes stride over k of the block's split, each
 * lane keeping rw x r sums; then a butterfly per sum and lane 0 stores. w
 * ([r, K], small) is read through L1, shared by the rows of a warp. */
static int build_down(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    uint32_t r = kn[DN_RANK], rw = down_rows(r);
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg w = pg_param_load(k, p[1]);
    pg_reg ws = pg_param_load(k, p[2]);
    pg_reg rows = pg_param_load(k, p[3]);
    pg_reg kd = pg_param_load(k, p[4]);
    pg_reg splits = pg_param_load(k, p[5]);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pgv_and(k, PG_U32, tid, pg_u32(31));
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg wrow = pgv_mul(k, PG_U32, warp, pg_u32(rw));
    pg_reg row0 = pgv_mad(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(DOWN_WARPS * rw), wrow);
    pg_reg k0, k1;
    pgk_split_range(k, kd, splits, 32, &k0, &k1);

    pg_reg acc[4 * RANK_MAX];
    pg_reg xrow[4];
    pg_reg rok[4];
    for (uint32_t i = 0; i < rw; i++) {
        pg_reg t = pgv_add(k, PG_U32, row0, pg_u32(i));
        rok[i] = pgv_setp(k, PG_CMP_LO, PG_U32, t, rows);
        /* a row past the end reads row 0's data and stores nothing */
        pg_reg tc = pgv_selp(k, PG_U32, t, pg_u32(0), rok[i]);
        xrow[i] = pgk_addr2(k, x, tc, kd, pg_u32(0), 4);
        for (uint32_t j = 0; j < r; j++)
            acc[i * r + j] = pgk_zero_f32(k);
    }
    /* two k a lane a turn (kk and kk + 32), all loads first; the second
     * past the split loads nothing and adds 0 x 0 */
    pgk_loop L;
    pg_reg kk = pgk_loop_begin(k, &L, pgv_add(k, PG_U32, k0, lane), k1, pg_u32(64));
    pg_reg k2 = pgv_add(k, PG_U32, kk, pg_u32(32));
    pg_reg ok2 = pgv_setp(k, PG_CMP_LO, PG_U32, k2, k1);
    pg_reg xv[2][4];
    for (uint32_t h = 0; h < 2; h++)
        for (uint32_t i = 0; i < rw; i++) {
            pg_reg xa = pgk_addr_add(k, xrow[i], h ? k2 : kk, 4);
            xv[h][i] = pgk_zero_f32(k);
            if (h)
                pg_guard(k, ok2, false);
            pg_ld_nc(k, PG_F32, xa, 0, xv[h][i]);
        }
    pg_reg wa = pgk_addr_add(k, w, kk, 4);
    pg_reg kstride = pgv_mul_wide(k, PG_U32, kd, pg_u32(4));
    for (uint32_t j = 0; j < r; j++) {
        pg_reg wv = pgv_ld_nc(k, PG_F32, wa, 0);
        pg_reg wv2 = pgk_zero_f32(k);
        pg_guard(k, ok2, false);
        pg_ld_nc(k, PG_F32, wa, 128, wv2);
        for (uint32_t i = 0; i < rw; i++) {
            pg_fma(k, PG_F32, acc[i * r + j], xv[0][i], wv, acc[i * r + j]);
            pg_fma(k, PG_F32, acc[i * r + j], xv[1][i], wv2, acc[i * r + j]);
        }
        if (j + 1 < r)
            pg_add(k, PG_U64, wa, wa, kstride);
    }
    pgk_loop_end(k, &L);

    pg_reg lane0 = pgv_setp(k, PG_CMP_EQ, PG_U32, lane, pg_u32(0));
    /* ws[y][t, j], rows x r a split */
    pg_reg y = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg slab = pgv_mul_wide(k, PG_U32, rows, pg_u32(r * 4u));
    pg_reg off = pgv_mul(k, PG_U64, slab, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, y));
    pg_reg wsy = pgv_add(k, PG_U64, ws, off);
    for (uint32_t i = 0; i < rw; i++) {
        pg_reg t = pgv_add(k, PG_U32, row0, pg_u32(i));
        pg_reg st = pgv_and(k, PG_PRED, rok[i], lane0);
        pg_reg dst = pgk_addr2(k, wsy, t, pg_u32(r), pg_u32(0), 4);
        for (uint32_t j = 0; j < r; j++) {
            pg_reg v = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, acc[i * r + j]);
            pg_guard(k, st, false);
            pg_st(k, PG_SPACE_GLOBAL, PG_F32, dst, (int64_t)j * 4, v);
        }
    }
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_down(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    if (kn[DN_RANK] < 1 || kn[DN_RANK] > RANK_MAX)
        return PG_ERANGE;
    uint32_t per = DOWN_WARPS * down_rows(kn[DN_RANK]);
    *out = (pgk_launch){{pgk_ceil_div(kn[DN_ROWS], per), kn[DN_SPLITS], 1},
                        {DOWN_WARPS * 32u, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param down_params[] = {
    {"x", PG_U64, true},     {"w", PG_U64, true},   {"ws", PG_U64, true},
    {"rows", PG_U32, false}, {"k", PG_U32, false},  {"splits", PG_U32, false},
};
static const pgk_knob down_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "rows of x (T)", false},
    {"k", 1536, 1, INT32_MAX, "the summed length: x's and w's row length", false},
    {"rank", 16, 1, RANK_MAX, "r: rows of w, columns of the result", true},
    {"splits", 1, 1, 65535, "slices of k, one partial result each (grid y)", false},
};

const pgk_desc pgk_desc_lora_down_f32 = {
    .name = "lora_down_f32",
    .summary = "LoRA x[T,k] w[r,k]^T partials over k splits into ws[splits][T,r] (f32)",
    PGK_PARAMS(down_params), PGK_KNOBS(down_knobs),
    .min_target = PG_SM_70, .build = build_down, .threads = DOWN_WARPS * 32u,
    .launch = launch_down,
};

/* ---------------------------------------------------------------- lora_wgrad */

enum { WG_ROWS, WG_N, WG_RANK, WG_SPLITS };

/* A thread owns column n and r sums over the rows of its block's split:
 * d loads coalesced along n, the xa row the same address for the warp
 * (one broadcast, 16 bytes at a time when r is a multiple of 4). */
static int build_wgrad(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    uint32_t r = kn[WG_RANK];
    bool v4 = r % 4 == 0;
    pg_reg dd = pg_param_load(k, p[0]);
    pg_reg xa = pg_param_load(k, p[1]);
    pg_reg ws = pg_param_load(k, p[2]);
    pg_reg rows = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);
    pg_reg splits = pg_param_load(k, p[5]);
    pg_reg col = pg_global_tid_x(k);
    pg_reg cok = pgv_setp(k, PG_CMP_LO, PG_U32, col, n);
    pg_label done = pg_label_new(k, "exit");
    pg_bra_if(k, cok, true, done);
    pg_reg t0, t1;
    pgk_split_range(k, rows, splits, 8, &t0, &t1);
    pg_reg acc[RANK_MAX];
    for (uint32_t j = 0; j < r; j++)
        acc[j] = pgk_zero_f32(k);
    /* WG_UNROLL rows a turn, their d loads issued together; a row past
     * the split adds 0 x (a row of the split) */
    pgk_loop L;
    pg_reg t = pgk_loop_begin(k, &L, t0, t1, pg_u32(WG_UNROLL));
    pg_reg dv[WG_UNROLL], xr[WG_UNROLL];
    for (uint32_t u = 0; u < WG_UNROLL; u++) {
        pg_reg tu = pgv_add(k, PG_U32, t, pg_u32(u));
        pg_reg ok = pgv_setp(k, PG_CMP_LO, PG_U32, tu, t1);
        pg_reg tc = pgv_selp(k, PG_U32, tu, t, ok);
        dv[u] = pgk_zero_f32(k);
        pg_reg da = pgk_addr2(k, dd, tc, n, col, 4);
        pg_guard(k, ok, false);
        pg_ld_nc(k, PG_F32, da, 0, dv[u]);
        xr[u] = pgk_addr2(k, xa, tc, pg_u32(r), pg_u32(0), 4);
    }
    for (uint32_t u = 0; u < WG_UNROLL; u++) {
        for (uint32_t j = 0; j < r;) {
            if (v4) {
                pg_reg q[4] = {pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32),
                               pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32)};
                pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, xr[u], (int64_t)j * 4, q);
                for (uint32_t v = 0; v < 4; v++, j++)
                    pg_fma(k, PG_F32, acc[j], dv[u], q[v], acc[j]);
            } else {
                pg_reg q = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, xr[u], (int64_t)j * 4);
                pg_fma(k, PG_F32, acc[j], dv[u], q, acc[j]);
                j++;
            }
        }
    }
    pgk_loop_end(k, &L);
    /* ws[y][n, j] */
    pg_reg y = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg slab = pgv_mul_wide(k, PG_U32, n, pg_u32(r * 4u));
    pg_reg wsy =
        pgv_add(k, PG_U64, ws, pgv_mul(k, PG_U64, slab, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, y)));
    pg_reg dst = pgk_addr2(k, wsy, col, pg_u32(r), pg_u32(0), 4);
    for (uint32_t j = 0; j < r; j++)
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, dst, (int64_t)j * 4, acc[j]);
    return pgk_finish(k, done);
}

static int launch_wgrad(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    *out = (pgk_launch){{pgk_ceil_div(kn[WG_N], WGRAD_THREADS), kn[WG_SPLITS], 1},
                        {WGRAD_THREADS, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param wgrad_params[] = {
    {"d", PG_U64, true},     {"xa", PG_U64, true},  {"ws", PG_U64, true},
    {"rows", PG_U32, false}, {"n", PG_U32, false},  {"splits", PG_U32, false},
};
static const pgk_knob wgrad_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "rows of d and xa (T), the summed length", false},
    {"n", 1536, 1, INT32_MAX, "columns of d", false},
    {"rank", 16, 1, RANK_MAX, "r: columns of xa", true},
    {"splits", 1, 1, 65535, "slices of the rows, one partial result each (grid y)", false},
};

const pgk_desc pgk_desc_lora_wgrad_f32 = {
    .name = "lora_wgrad_f32",
    .summary = "LoRA d[T,n]^T xa[T,r] partials over row splits into ws[splits][n,r] (f32)",
    PGK_PARAMS(wgrad_params), PGK_KNOBS(wgrad_knobs),
    .min_target = PG_SM_70, .build = build_wgrad, .threads = WGRAD_THREADS,
    .launch = launch_wgrad,
};

/* ---------------------------------------------------------------- lora_reduce */

enum { RD_N, RD_TRANS };
#define RD_UNROLL 8u

/* One thread an element o = i * r + j of [n, r]: the splits added in
 * order, times scale, to out[o] or (trans) out[j * n + i]. */
static int build_reduce(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    bool trans = kn[RD_TRANS] != 0;
    pg_reg ws = pg_param_load(k, p[0]);
    pg_reg out = pg_param_load(k, p[1]);
    pg_reg count = pg_param_load(k, p[2]);
    pg_reg rank = pg_param_load(k, p[3]);
    pg_reg splits = pg_param_load(k, p[4]);
    pg_reg scale = pg_param_load(k, p[5]);
    pg_label done = pg_label_new(k, "exit");
    pg_reg o = pgk_guarded_gid(k, count, done);
    pg_reg sum = pgk_zero_f32(k);
    pg_reg a = pgk_addr_add(k, ws, o, 4);
    pg_reg stride = pgv_mul_wide(k, PG_U32, count, pg_u32(4));
    /* RD_UNROLL splits a turn, loads first, then the adds in split order
     * (a split past the end adds 0) */
    pgk_loop L;
    pg_reg sy = pgk_loop_begin(k, &L, pg_u32(0), splits, pg_u32(RD_UNROLL));
    pg_reg v[RD_UNROLL];
    for (uint32_t u = 0; u < RD_UNROLL; u++) {
        pg_reg ok = pgv_setp(k, PG_CMP_LO, PG_U32, pgv_add(k, PG_U32, sy, pg_u32(u)), splits);
        v[u] = pgk_zero_f32(k);
        pg_guard(k, ok, false);
        pg_ld_nc(k, PG_F32, a, 0, v[u]);
        pg_add(k, PG_U64, a, a, stride);
    }
    for (uint32_t u = 0; u < RD_UNROLL; u++)
        pg_add(k, PG_F32, sum, sum, v[u]);
    pgk_loop_end(k, &L);
    pg_mul(k, PG_F32, sum, sum, scale);
    pg_reg dst;
    if (trans) {
        pg_reg i = pgv_div(k, PG_U32, o, rank);
        pg_reg j = pgv_sub(k, PG_U32, o, pgv_mul(k, PG_U32, i, rank));
        pg_reg ncols = pgv_div(k, PG_U32, count, rank);
        dst = pgk_addr2(k, out, j, ncols, i, 4);
    } else {
        dst = pgk_addr_add(k, out, o, 4);
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, dst, 0, sum);
    return pgk_finish(k, done);
}

static const pgk_param reduce_params[] = {
    {"ws", PG_U64, true},     {"out", PG_U64, true},    {"count", PG_U32, false},
    {"rank", PG_U32, false},  {"splits", PG_U32, false}, {"scale", PG_F32, false},
};
static const pgk_knob reduce_knobs[] = {
    {"n", 24576, 1, UINT32_MAX, "elements of the result (count)", false},
    {"trans", 0, 0, 1, "1: store [n, r] transposed as [r, n]", true},
};

const pgk_desc pgk_desc_lora_reduce_f32 = {
    .name = "lora_reduce_f32",
    .summary = "LoRA: out = scale * sum of ws[splits][n,r] in split order, or its transpose (f32)",
    PGK_PARAMS(reduce_params), PGK_KNOBS(reduce_knobs),
    .min_target = PG_SM_70, .build = build_reduce, .threads = PGK_THREADS,
    .launch = pgk_launch_elementwise,
};

/* ---------------------------------------------------------------- lora_up */

enum { UP_ROWS_K, UP_N, UP_RANK, UP_WT, UP_ACC, UP_PART };

/* A block: UP_THREADS columns x UP_ROWS rows of y. Each thread holds its
 * column's w(n, 0..r) in registers; the block's xa rows are staged in
 * shared memory (r rounded up to 4, zero-padded) and read as 16-byte
 * broadcasts. */
static int build_up(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    /* r columns of xa; part > 0: stored part-major in parts of that many
     * columns (lora_tile.c) */
    uint32_t r = kn[UP_RANK], r4 = (r + 3u) & ~3u, part = kn[UP_PART];
    bool wt = kn[UP_WT] != 0, acc = kn[UP_ACC] != 0;
    pg_reg xa = pg_param_load(k, p[0]);
    pg_reg w = pg_param_load(k, p[1]);
    pg_reg y = pg_param_load(k, p[2]);
    pg_reg rows = pg_param_load(k, p[3]);
    pg_reg n = pg_param_load(k, p[4]);
    pg_reg scale = pg_param_load(k, p[5]);
    pg_shared sx = pg_shared_static(k, PG_F32, UP_ROWS * r4, 16, "xa_tile");
    pg_reg sbase = pgv_mov(k, PG_U32, pg_shared_addr(sx));
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg col = pg_global_tid_x(k);
    pg_reg row0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(UP_ROWS));
    /* stage xa[row0 .. row0 + UP_ROWS, 0 .. r4) */
    for (uint32_t e0 = 0; e0 < UP_ROWS * r4; e0 += UP_THREADS) {
        pg_reg e = pgv_add(k, PG_U32, tid, pg_u32(e0));
        pg_reg in = pgv_setp(k, PG_CMP_LO, PG_U32, e, pg_u32(UP_ROWS * r4));
        pg_label skip = pg_label_new(k, "stage_skip");
        pg_bra_if(k, in, true, skip);
        pg_reg tr = pgv_div(k, PG_U32, e, pg_u32(r4));
        pg_reg j = pgv_sub(k, PG_U32, e, pgv_mul(k, PG_U32, tr, pg_u32(r4)));
        pg_reg t = pgv_add(k, PG_U32, row0, tr);
        pg_reg j_in = pgv_setp(k, PG_CMP_LO, PG_U32, j, pg_u32(r));
        pg_reg ok = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LO, PG_U32, t, rows), j_in);
        pg_reg v = pgk_zero_f32(k);
        pg_reg src;
        if (part == 0) {
            src = pgk_addr2(k, xa, t, pg_u32(r), j, 4);
        } else {
            pg_reg pi = pgv_div(k, PG_U32, j, pg_u32(part));
            pg_reg jr = pgv_sub(k, PG_U32, j, pgv_mul(k, PG_U32, pi, pg_u32(part)));
            src = pgk_addr2(k, xa, pgv_mad(k, PG_U32, pi, rows, t), pg_u32(part), jr, 4);
        }
        pg_guard(k, ok, false);
        pg_ld_nc(k, PG_F32, src, 0, v);
        pg_st(k, PG_SPACE_SHARED, PG_F32, pgv_mad(k, PG_U32, e, pg_u32(4), sbase), 0,
              v);
        pg_label_bind(k, skip);
    }
    pg_bar_sync(k, 0);
    pg_label done = pg_label_new(k, "exit");
    pg_bra_if(k, pgv_setp(k, PG_CMP_LO, PG_U32, col, n), true, done);
    pg_reg wv[RANK_MAX];
    pg_reg wa = wt ? pgk_addr_add(k, w, col, 4) : pgk_addr2(k, w, col, pg_u32(r), pg_u32(0), 4);
    pg_reg nstride = pgv_mul_wide(k, PG_U32, n, pg_u32(4));
    for (uint32_t j = 0; j < r; j++) {
        if (wt) {
            wv[j] = pgv_ld_nc(k, PG_F32, wa, 0);
            if (j + 1 < r)
                pg_add(k, PG_U64, wa, wa, nstride);
        } else {
            wv[j] = pgv_ld_nc(k, PG_F32, wa, (int64_t)j * 4);
        }
        pg_mul(k, PG_F32, wv[j], wv[j], scale);
    }
    pg_reg tend = pgv_min(k, PG_U32, pgv_sub(k, PG_U32, rows, row0), pg_u32(UP_ROWS));
    /* four rows a turn (UP_ROWS is a multiple of 4): their y loads issued
     * together; a row past the end is neither read nor written */
    pgk_loop L;
    pg_reg tr = pgk_loop_begin(k, &L, pg_u32(0), tend, pg_u32(4));
    pg_reg ya[4], sum[4], ok[4];
    for (uint32_t u = 0; u < 4; u++) {
        pg_reg tu = pgv_add(k, PG_U32, tr, pg_u32(u));
        ok[u] = pgv_setp(k, PG_CMP_LO, PG_U32, tu, tend);
        ya[u] = pgk_addr2(k, y, pgv_add(k, PG_U32, row0, tu), n, col, 4);
        sum[u] = pgk_zero_f32(k);
        if (acc) {
            pg_guard(k, ok[u], false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, ya[u], 0, sum[u]);
        }
    }
    pg_reg sa = pgv_mad(k, PG_U32, tr, pg_u32(r4 * 4u), sbase);
    for (uint32_t u = 0; u < 4; u++) {
        /* the r products in j order, then the one add into y */
        pg_reg dot = pgk_zero_f32(k);
        for (uint32_t j = 0; j < r4; j += 4) {
            pg_reg q[4] = {pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32),
                           pg_reg_new(k, PG_F32)};
            pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, sa, (int64_t)(u * r4 + j) * 4, q);
            for (uint32_t v = 0; v < 4 && j + v < r; v++)
                pg_fma(k, PG_F32, dot, q[v], wv[j + v], dot);
        }
        pg_add(k, PG_F32, sum[u], sum[u], dot);
        pg_guard(k, ok[u], false);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, ya[u], 0, sum[u]);
    }
    pgk_loop_end(k, &L);
    return pgk_finish(k, done);
}

static int launch_up(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    uint32_t gy = pgk_ceil_div(kn[UP_ROWS_K], UP_ROWS);
    if (gy > 65535)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(kn[UP_N], UP_THREADS), gy, 1}, {UP_THREADS, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param up_params[] = {
    {"xa", PG_U64, true},    {"w", PG_U64, true},  {"y", PG_U64, true},
    {"rows", PG_U32, false}, {"n", PG_U32, false}, {"scale", PG_F32, false},
};
static const pgk_knob up_knobs[] = {
    {"rows", 2048, 1, 65535u * UP_ROWS, "rows of xa and y (T)", false},
    {"n", 1536, 1, INT32_MAX, "columns of y", false},
    {"rank", 16, 1, RANK_MAX, "r: columns of xa", true},
    {"wt", 0, 0, 1, "0: w is [n, r] (B); 1: w is [r, n] (A)", true},
    {"acc", 0, 0, 1, "1: add into y", true},
    {"part", 0, 0, RANK_MAX, "0: xa is [rows, r]; p: part-major in parts of p columns", true},
};

const pgk_desc pgk_desc_lora_up_f32 = {
    .name = "lora_up_f32",
    .summary = "LoRA rank-r update y[T,n] (+)= scale xa[T,r] w(n,r)^T, w as [n,r] or [r,n] (f32)",
    PGK_PARAMS(up_params), PGK_KNOBS(up_knobs),
    .min_target = PG_SM_70, .build = build_up, .threads = UP_THREADS, .launch = launch_up,
};
