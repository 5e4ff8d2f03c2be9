/* SPDX-License-Identifier: MIT */
/*
 * lora_up_f32, the up product of a LoRA pair (A [r, in], B [out, r], f32),
 * where the rank r (1..64, the baked knob `rank`) is one dimension and the
 * general GEMM tiles would leave most of the GPU idle:
 *
 *   lora_up_f32      y[t, n] (+)= scale * sum_j xa[t, j] w(n, j)
 *                    (y += xa B^T; dx += dxa A, and with knob part the
 *                    pairs sharing an input at once: xa part-major as
 *                    lora_tile.c stores it, w their stacked A)
 *
 * pgrt_lm runs it with lora_tile.c's lora_proj and lora_grad, which make
 * xa and the weight gradients. Each output is one sum over j in order: the
 * same bits every run. All operands are f32 rows; nothing here is padded,
 * so any T, in, out and r are accepted.
 */
#include "model.h"

#define UP_THREADS 256u
#define UP_ROWS 32u /* rows of y a lora_up block */
#define RANK_MAX 64u

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
