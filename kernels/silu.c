/* SPDX-License-Identifier: MIT */
/*
 * SiLU, forward and backward, one thread an element:
 *
 *   silu_forward    y  = x * s
 *   silu_backward   dx = dy * s * (1 + x (1 - s)),   s = sigmoid(x)
 *
 * Both take s from z = exp(-|x|): 1/(1+z) and z/(1+z) are s and 1 - s
 * (x >= 0) or the other way round, without cancellation and without
 * overflow for any x.
 */
#include "kernels.h"

/* s = sigmoid(x) and, when one_minus is not NULL, 1 - s. With z =
 * exp(-|x|) (never overflows: pgk_exp_nonpos), 1/(1+z) and z/(1+z) are s
 * and 1 - s for x >= 0 and the other way round otherwise. */
static pg_reg sigmoid(pg_kernel *k, pg_reg x, pg_reg *one_minus)
{
    pg_reg na = pgv_abs(k, PG_F32, x);
    pg_neg(k, PG_F32, na, na);
    pg_reg z = pgk_exp_nonpos(k, na);
    pg_reg q = pgv_add(k, PG_F32, z, pg_f32(1.0f));
    pg_reg ra = pgv_rcp(k, PG_F32, q);
    pg_reg rb = pgv_div(k, PG_F32, z, q);
    pg_reg pos = pgv_setp(k, PG_CMP_GE, PG_F32, x, pg_f32(0.0f));
    pg_reg s = pgv_selp(k, PG_F32, ra, rb, pos);
    if (one_minus)
        *one_minus = pgv_selp(k, PG_F32, rb, ra, pos);
    return s;
}

/* ---------------------------------------------------------------- silu_forward */

/* y = x * s, s = sigmoid(x). With z = exp(-|x|), s is 1/(1+z) for x >= 0
 * and z/(1+z) otherwise: no cancellation and no overflow for any x. */
static int build_silu_fwd(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg input = pg_param_load(k, p[0]);
    pg_reg output = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);

    pg_reg x = pgk_ld_f32(k, pgk_elem_addr(k, input, gid, 4));
    pg_comment(k, "z = exp(-|x|); s = x >= 0 ? 1/(1+z) : z/(1+z)");
    pg_reg y = pgv_mul(k, PG_F32, x, sigmoid(k, x, NULL));
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, output, gid, 4), 0, y);

    return pgk_finish(k, out);
}

static const pgk_param silu_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_silu_forward = {
    .name = "silu_forward",
    .summary = "output = input * sigmoid(input)",
    PGK_PARAMS(silu_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_silu_fwd,
    .launch = pgk_launch_elementwise,
};


/* ---------------------------------------------------------------- silu_backward */

/* dx = dy * s * (1 + x (1 - s)), s = sigmoid(x). With z = exp(-|x|):
 * 1/(1+z) and z/(1+z) are s and 1 - s (x >= 0) or the other way round, both
 * without cancellation and without overflow for any x. */
static int build_silu_bwd(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg input = pg_param_load(k, p[0]);
    pg_reg grad_out = pg_param_load(k, p[1]);
    pg_reg grad_in = pg_param_load(k, p[2]);
    pg_reg n = pg_param_load(k, p[3]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);

    pg_reg x = pgk_ld_f32(k, pgk_elem_addr(k, input, gid, 4));
    pg_reg dy = pgk_ld_f32(k, pgk_elem_addr(k, grad_out, gid, 4));
    pg_comment(k, "z = exp(-|x|); s and 1 - s are 1/(1+z) and z/(1+z)");
    pg_reg oms;
    pg_reg s = sigmoid(k, x, &oms);
    pg_comment(k, "dx = (dy * s) * (1 + x * (1 - s))");
    pg_reg t = pgv_fma(k, PG_F32, x, oms, pg_f32(1.0f));
    pg_reg dx = pgv_mul(k, PG_F32, dy, s);
    pg_mul(k, PG_F32, dx, dx, t);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, grad_in, gid, 4), 0, dx);

    return pgk_finish(k, out);
}

static const pgk_param silu_bwd_params[] = {
    {"input", PG_U64, true},
    {"grad_output", PG_U64, true},
    {"grad_input", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_silu_backward = {
    .name = "silu_backward",
    .summary = "grad_input = grad_output * s * (1 + x (1 - s)), s = sigmoid(input)",
    PGK_PARAMS(silu_bwd_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_silu_bwd,
    .launch = pgk_launch_elementwise,
};
