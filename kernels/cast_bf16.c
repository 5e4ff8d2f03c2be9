/* SPDX-License-Identifier: MIT */
/*
 * cast_f32_to_bf16 (round to nearest even; NaN stays NaN, overflow gives
 * inf, subnormals kept) and cast_bf16_to_f32 (exact). Elementwise, 1-D.
 *
 * cast_f32_to_bf16_scaled2: the two bf16 copies of f32 master weights a
 * LoRA step multiplies on the tensor cores, dst = bf16(src) and dst_s =
 * bf16(scale * src) (the product rounded once, as f32 multiply then the
 * cast would), in one pass.
 */
#include "model.h"

static int build_cast(pg_kernel *k, const pg_param *p, pgk_dtype from, pgk_dtype to)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    pg_reg src = pg_param_load(k, p[0]);
    pg_reg dst = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label done = pg_label_new(k, "exit");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, done);
    pg_reg v = pgk_ld_act(k, from, pgk_addr_add(k, src, i, pgk_dtype_size(from)), true);
    pgk_st_act(k, to, pgk_addr_add(k, dst, i, pgk_dtype_size(to)), v);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_scaled2(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    pg_reg src = pg_param_load(k, p[0]);
    pg_reg dst = pg_param_load(k, p[1]);
    pg_reg dst_s = pg_param_load(k, p[2]);
    pg_reg n = pg_param_load(k, p[3]);
    pg_reg scale = pg_param_load(k, p[4]);
    pg_label done = pg_label_new(k, "exit");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, done);
    pg_reg v = pgk_ld_act(k, PGK_F32, pgk_addr_add(k, src, i, 4), true);
    pgk_st_act(k, PGK_BF16, pgk_addr_add(k, dst, i, 2), v);
    pgk_st_act(k, PGK_BF16, pgk_addr_add(k, dst_s, i, 2), pgv_mul(k, PG_F32, v, scale));
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int to_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_cast(k, p, PGK_F32, PGK_BF16);
}
static int to_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_cast(k, p, PGK_BF16, PGK_F32);
}

static const pgk_param cast_params[] = {
    {"src", PG_U64, true},
    {"dst", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_cast_f32_to_bf16 = {
    .name = "cast_f32_to_bf16",
    .summary = "dst (bf16) = src (f32), round to nearest even",
    .params = cast_params, .nparams = 3, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = to_bf16, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};
const pgk_desc pgk_desc_cast_bf16_to_f32 = {
    .name = "cast_bf16_to_f32",
    .summary = "dst (f32) = src (bf16), exact",
    .params = cast_params, .nparams = 3, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_70, .build = to_f32, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};

static const pgk_param scaled2_params[] = {
    {"src", PG_U64, true}, {"dst", PG_U64, true}, {"dst_s", PG_U64, true},
    {"n", PG_U32, false},  {"scale", PG_F32, false},
};

const pgk_desc pgk_desc_cast_f32_to_bf16_scaled2 = {
    .name = "cast_f32_to_bf16_scaled2",
    .summary = "dst = bf16(src), dst_s = bf16(scale * src): LoRA weights for the tensor cores",
    .params = scaled2_params, .nparams = 5, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = build_scaled2, .threads = PGK_THREADS,
    .launch = pgk_launch_elementwise,
};
