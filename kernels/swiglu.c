/* SPDX-License-Identifier: MIT */
/*
 * swiglu_forward_{f32,bf16}: h = silu(gate) * up, and swiglu_backward_{f32,
 * bf16}: dgate = dh * up * s * (1 + gate (1 - s)), dup = dh * silu(gate),
 * s = sigmoid(gate). Elementwise, 1-D. The sigmoid never overflows for any
 * gate (pgk_sigmoid). Every thread reads all its inputs before it writes,
 * so the outputs may alias the inputs they replace (h over gate or up;
 * dgate over gate, dup over up).
 *
 * swiglu_forward_f32_bf16 and swiglu_backward_f32_bf16 are the f32 kernels
 * that also write a bf16 copy of each output (rounded to nearest even, as
 * cast_f32_to_bf16): the bf16 model's GEMMs read the copies, its LoRA
 * products the f32 outputs, and the copy costs no second pass over them.
 */
#include "model.h"

static pg_reg elem(pg_kernel *k, pgk_dtype dt, pg_reg base, pg_reg i)
{
    return pgk_addr_add(k, base, i, pgk_dtype_size(dt));
}

/* Store v as bf16 at element i of base (the copy kernels' second output). */
static void st_copy(pg_kernel *k, pg_reg base, pg_reg i, pg_reg v)
{
    pgk_st_act(k, PGK_BF16, elem(k, PGK_BF16, base, i), v);
}

/* copy: the f32 kernel with a bf16 copy of the output (param 3; n is 4). */
static int build_fwd(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool copy)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    pg_reg gate = pg_param_load(k, p[0]);
    pg_reg up = pg_param_load(k, p[1]);
    pg_reg out = pg_param_load(k, p[2]);
    pg_reg out_b = copy ? pg_param_load(k, p[3]) : out;
    pg_reg n = pg_param_load(k, p[copy ? 4 : 3]);
    pg_label done = pg_label_new(k, "exit");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, done);
    pg_reg g = pgk_ld_act(k, dt, elem(k, dt, gate, i), false);
    pg_reg u = pgk_ld_act(k, dt, elem(k, dt, up, i), false);
    pg_reg s, oms;
    pgk_sigmoid(k, g, &s, &oms);
    pg_reg silu = pgv_mul(k, PG_F32, g, s);
    pg_reg h = pgv_mul(k, PG_F32, silu, u);
    pgk_st_act(k, dt, elem(k, dt, out, i), h);
    if (copy)
        st_copy(k, out_b, i, h);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* copy: the f32 kernel with bf16 copies of dgate and dup (params 5, 6;
 * n is 7). */
static int build_bwd(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool copy)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    pg_reg gate = pg_param_load(k, p[0]);
    pg_reg up = pg_param_load(k, p[1]);
    pg_reg dh = pg_param_load(k, p[2]);
    pg_reg dgate = pg_param_load(k, p[3]);
    pg_reg dup = pg_param_load(k, p[4]);
    pg_reg dgate_b = copy ? pg_param_load(k, p[5]) : dgate;
    pg_reg dup_b = copy ? pg_param_load(k, p[6]) : dup;
    pg_reg n = pg_param_load(k, p[copy ? 7 : 5]);
    pg_label done = pg_label_new(k, "exit");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, done);
    pg_reg g = pgk_ld_act(k, dt, elem(k, dt, gate, i), false);
    pg_reg u = pgk_ld_act(k, dt, elem(k, dt, up, i), false);
    pg_reg d = pgk_ld_act(k, dt, elem(k, dt, dh, i), false);
    pg_reg s, oms;
    pgk_sigmoid(k, g, &s, &oms);
    pg_comment(k, "dup = dh * g * s");
    pg_reg silu = pgv_mul(k, PG_F32, g, s);
    pg_reg du = pgv_mul(k, PG_F32, d, silu);
    pg_comment(k, "dgate = dh * u * s * (1 + g * (1 - s))");
    pg_reg t1 = pgv_fma(k, PG_F32, g, oms, pg_f32(1.0f));
    pg_reg t = pgv_mul(k, PG_F32, t1, s);
    pg_reg du2 = pgv_mul(k, PG_F32, d, u);
    pg_reg dg = pgv_mul(k, PG_F32, du2, t);
    pgk_st_act(k, dt, elem(k, dt, dgate, i), dg);
    pgk_st_act(k, dt, elem(k, dt, dup, i), du);
    if (copy) {
        st_copy(k, dgate_b, i, dg);
        st_copy(k, dup_b, i, du);
    }
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int fwd_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_fwd(k, p, PGK_F32, false);
}
static int fwd_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_fwd(k, p, PGK_BF16, false);
}
static int bwd_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_bwd(k, p, PGK_F32, false);
}
static int bwd_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_bwd(k, p, PGK_BF16, false);
}

static int fwd_copy(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_fwd(k, p, PGK_F32, true);
}
static int bwd_copy(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_bwd(k, p, PGK_F32, true);
}

static const pgk_param fwd_params[] = {
    {"gate", PG_U64, true},
    {"up", PG_U64, true},
    {"output", PG_U64, true},
    {"n", PG_U32, false},
};

static const pgk_param bwd_params[] = {
    {"gate", PG_U64, true},      {"up", PG_U64, true},       {"grad_output", PG_U64, true},
    {"grad_gate", PG_U64, true}, {"grad_up", PG_U64, true},  {"n", PG_U32, false},
};

const pgk_desc pgk_desc_swiglu_forward_f32 = {
    .name = "swiglu_forward_f32",
    .summary = "output = silu(gate) * up (f32)",
    .params = fwd_params, .nparams = 4, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_70, .build = fwd_f32, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};
const pgk_desc pgk_desc_swiglu_forward_bf16 = {
    .name = "swiglu_forward_bf16",
    .summary = "output = silu(gate) * up (bf16 storage, f32 arithmetic)",
    .params = fwd_params, .nparams = 4, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = fwd_bf16, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};
const pgk_desc pgk_desc_swiglu_backward_f32 = {
    .name = "swiglu_backward_f32",
    .summary = "grad_gate, grad_up of output = silu(gate) * up (f32)",
    .params = bwd_params, .nparams = 6, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_70, .build = bwd_f32, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};
const pgk_desc pgk_desc_swiglu_backward_bf16 = {
    .name = "swiglu_backward_bf16",
    .summary = "grad_gate, grad_up of output = silu(gate) * up (bf16 storage, f32 arithmetic)",
    .params = bwd_params, .nparams = 6, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = bwd_bf16, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};

static const pgk_param fwd_copy_params[] = {
    {"gate", PG_U64, true},        {"up", PG_U64, true}, {"output", PG_U64, true},
    {"output_bf16", PG_U64, true}, {"n", PG_U32, false},
};

static const pgk_param bwd_copy_params[] = {
    {"gate", PG_U64, true},           {"up", PG_U64, true},
    {"grad_output", PG_U64, true},    {"grad_gate", PG_U64, true},
    {"grad_up", PG_U64, true},        {"grad_gate_bf16", PG_U64, true},
    {"grad_up_bf16", PG_U64, true},   {"n", PG_U32, false},
};

const pgk_desc pgk_desc_swiglu_forward_f32_bf16 = {
    .name = "swiglu_forward_f32_bf16",
    .summary = "output = silu(gate) * up (f32) and its bf16 copy",
    .params = fwd_copy_params, .nparams = 5, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = fwd_copy, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};
const pgk_desc pgk_desc_swiglu_backward_f32_bf16 = {
    .name = "swiglu_backward_f32_bf16",
    .summary = "grad_gate, grad_up of output = silu(gate) * up (f32) and their bf16 copies",
    .params = bwd_copy_params, .nparams = 8, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = bwd_copy, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};
