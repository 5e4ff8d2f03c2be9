/* SPDX-License-Identifier: MIT */
/*
 * bias_add_{f32,bf16}: x[r, c] += bias[c] in place over rows x cols (the
 * q/k/v biases of Qwen2 after their projections), bias stored like x. One
 * block a row. There is no bias gradient kernel: the base model's biases
 * are frozen in LoRA fine-tuning, and their gradient would be a column sum
 * (rms_norm_gamma_reduce's pattern).
 */
#include "model.h"

static int build_bias(pg_kernel *k, const pg_param *p, pgk_dtype dt)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    unsigned size = pgk_dtype_size(dt);
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg bias = pg_param_load(k, p[1]);
    pg_reg rows = pg_param_load(k, p[2]);
    pg_reg cols = pg_param_load(k, p[3]);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg row = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_label done = pg_label_new(k, "exit");
    pg_bounds_guard(k, row, rows, done);
    pg_reg xrow = pgk_addr2(k, x, row, cols, pg_u32(0), size);
    pgk_loop L;
    pg_reg c = pgk_loop_begin(k, &L, tid, cols, ntid);
    pg_reg xa = pgk_addr_add(k, xrow, c, size);
    pg_reg v = pgk_ld_act(k, dt, xa, false);
    pg_reg b = pgk_ld_act(k, dt, pgk_addr_add(k, bias, c, size), true);
    pg_add(k, PG_F32, v, v, b);
    pgk_st_act(k, dt, xa, v);
    pgk_loop_end(k, &L);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int bias_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_bias(k, p, PGK_F32);
}
static int bias_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_bias(k, p, PGK_BF16);
}

static const pgk_param bias_params[] = {
    {"x", PG_U64, true},
    {"bias", PG_U64, true},
    {"rows", PG_U32, false},
    {"cols", PG_U32, false},
};

static const pgk_knob bias_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "rows of x (one block each)"},
    {"cols", 1536, 1, INT32_MAX, "elements a row, and of bias"},
};

const pgk_desc pgk_desc_bias_add_f32 = {
    .name = "bias_add_f32",
    .summary = "x[r, c] += bias[c] in place (f32)",
    .params = bias_params, .nparams = 4, .knobs = bias_knobs, .nknobs = 2,
    .min_target = PG_SM_70, .build = bias_f32, .threads = PGK_THREADS, .launch = pgk_launch_rows,
};
const pgk_desc pgk_desc_bias_add_bf16 = {
    .name = "bias_add_bf16",
    .summary = "x[r, c] += bias[c] in place (bf16 storage, f32 sum rounded once)",
    .params = bias_params, .nparams = 4, .knobs = bias_knobs, .nknobs = 2,
    .min_target = PG_SM_80, .build = bias_bf16, .threads = PGK_THREADS, .launch = pgk_launch_rows,
};
