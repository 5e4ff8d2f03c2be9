/* SPDX-License-Identifier: MIT */
/*
 * AdamW (DESIGN §3), one thread an element:
 *     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *     p -= lr (m bc1 / (sqrt(v bc2) + eps) + wd p),  bc = 1 / (1 - beta^t)
 * adamw_step takes the hyper-parameters as kernel arguments; adamw_step_dev
 * reads them from seven floats in device memory, [lr, beta1, beta2, eps,
 * weight_decay, bias_correction1, bias_correction2], so that a captured
 * graph replayed step after step sees the values of each step. Both emit the
 * same element body: same inputs, same bits.
 */
#include "kernels.h"

/* Update element gid of params, grads, m, v (buf[0..3]) with the
 * hyper-parameters h[PGK_HYPER_STEP_ARGS] (f32 registers, enum pgk_hyper). */
static void adamw_body(pg_kernel *k, const pg_reg *buf, const pg_reg *h, pg_reg gid)
{
    pg_reg off = pgv_mul_wide(k, PG_U32, gid, pg_u32(4));
    pg_reg addr[4], val[4];
    for (int i = 0; i < 4; i++) {
        addr[i] = pg_reg_new(k, PG_U64);
        pg_add(k, PG_U64, addr[i], buf[i], off);
        val[i] = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr[i], 0, val[i]);
    }
    pg_reg p = val[0], g = val[1], m = val[2], v = val[3];

    pg_comment(k, "m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2");
    pg_reg t = pgv_sub(k, PG_F32, pg_f32(1.0f), h[PGK_HYPER_BETA1]);
    pg_mul(k, PG_F32, t, t, g);
    pg_fma(k, PG_F32, m, h[PGK_HYPER_BETA1], m, t);
    pg_reg gg = pgv_mul(k, PG_F32, g, g);
    pg_sub(k, PG_F32, t, pg_f32(1.0f), h[PGK_HYPER_BETA2]);
    pg_mul(k, PG_F32, t, t, gg);
    pg_fma(k, PG_F32, v, h[PGK_HYPER_BETA2], v, t);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr[2], 0, m);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr[3], 0, v);

    pg_comment(k, "p -= lr (m bc1 / (sqrt(v bc2) + eps) + wd p)");
    pg_reg den = pgv_mul(k, PG_F32, v, h[PGK_HYPER_BC2]);
    pg_sqrt(k, PG_F32, den, den);
    pg_add(k, PG_F32, den, den, h[PGK_HYPER_EPS]);
    pg_reg upd = pgv_mul(k, PG_F32, m, h[PGK_HYPER_BC1]);
    pg_div(k, PG_F32, upd, upd, den);
    pg_fma(k, PG_F32, upd, h[PGK_HYPER_WD], p, upd);
    pg_reg nlr = pgv_neg(k, PG_F32, h[PGK_HYPER_LR]);
    pg_fma(k, PG_F32, p, nlr, upd, p);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr[0], 0, p);
}

static int build_adamw(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg buf[4], h[PGK_HYPER_STEP_ARGS];
    for (int i = 0; i < 4; i++)
        buf[i] = pg_param_load(k, p[i]);
    for (int i = 0; i < PGK_HYPER_STEP_ARGS; i++)
        h[i] = pg_param_load(k, p[4 + i]);
    pg_reg n = pg_param_load(k, p[4 + PGK_HYPER_STEP_ARGS]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pg_global_tid_x(k);
    pg_bounds_guard(k, gid, n, out);
    adamw_body(k, buf, h, gid);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_adamw_dev(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                           const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg buf[4], h[PGK_HYPER_STEP_ARGS];
    for (int i = 0; i < 4; i++)
        buf[i] = pg_param_load(k, p[i]);
    pg_reg hyper = pg_param_load(k, p[4]);
    pg_reg n = pg_param_load(k, p[5]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pg_global_tid_x(k);
    pg_bounds_guard(k, gid, n, out);
    pg_comment(k, "hyper-parameters from device memory, read when the kernel runs");
    for (int i = 0; i < PGK_HYPER_STEP_ARGS; i++) {
        h[i] = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, hyper, 4 * i, h[i]);
    }
    adamw_body(k, buf, h, gid);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param adamw_params[] = {
    {"params", PG_U64, true},
    {"grads", PG_U64, true},
    {"m", PG_U64, true},
    {"v", PG_U64, true},
    {"lr", PG_F32, false},
    {"beta1", PG_F32, false},
    {"beta2", PG_F32, false},
    {"eps", PG_F32, false},
    {"weight_decay", PG_F32, false},
    {"bias_correction1", PG_F32, false},
    {"bias_correction2", PG_F32, false},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_adamw_step = {
    .name = "adamw_step",
    .summary = "AdamW update of params, m, v in place; hyper-parameters as arguments",
    PGK_PARAMS(adamw_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_adamw,
    .launch = pgk_launch_elementwise,
};

static const pgk_param adamw_dev_params[] = {
    {"params", PG_U64, true},
    {"grads", PG_U64, true},
    {"m", PG_U64, true},
    {"v", PG_U64, true},
    {"hyper_ptr", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_adamw_step_dev = {
    .name = "adamw_step_dev",
    .summary = "AdamW as adamw_step, hyper-parameters read from 7 f32 in device memory",
    PGK_PARAMS(adamw_dev_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_adamw_dev,
    .launch = pgk_launch_elementwise,
};

/* ---------------------------------------------------------------- adamw_hyper_advance */

/* The AdamW step counter kept on the device, so that a captured training
 * step replayed N times takes N optimizer steps. hyper holds the
 * PGK_HYPER_COUNT f32 of enum pgk_hyper (pgk.h): adamw_step_dev's seven,
 * then beta1^t, beta2^t and t.
 * One thread: p1 = beta1^(t-1) * beta1, p2 likewise, bc = 1 / (1 - p), t + 1.
 * The powers are running products in f32, the same a host can mirror. */
static int build_hyper_advance(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                               const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg h = pg_param_load(k, p[0]);
    pg_reg b1 = pg_reg_new(k, PG_F32);
    pg_reg b2 = pg_reg_new(k, PG_F32);
    pg_reg p1 = pg_reg_new(k, PG_F32);
    pg_reg p2 = pg_reg_new(k, PG_F32);
    pg_reg t = pg_reg_new(k, PG_F32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA1, b1);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA2, b2);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA1_POW, p1);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA2_POW, p2);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_STEP, t);
    pg_comment(k, "p = p * beta; bc = 1 / (1 - p); t = t + 1");
    pg_mul(k, PG_F32, p1, p1, b1);
    pg_mul(k, PG_F32, p2, p2, b2);
    pg_reg bc1 = pgv_sub(k, PG_F32, pg_f32(1.0f), p1);
    pg_div(k, PG_F32, bc1, pg_f32(1.0f), bc1);
    pg_reg bc2 = pgv_sub(k, PG_F32, pg_f32(1.0f), p2);
    pg_div(k, PG_F32, bc2, pg_f32(1.0f), bc2);
    pg_add(k, PG_F32, t, t, pg_f32(1.0f));
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BC1, bc1);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BC2, bc2);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA1_POW, p1);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA2_POW, p2);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_STEP, t);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param hyper_params[] = {
    {"hyper_ptr", PG_U64, true},
};

const pgk_desc pgk_desc_adamw_hyper_advance = {
    .name = "adamw_hyper_advance",
    .summary = "one AdamW step on the device: t += 1, bias corrections 1/(1 - beta^t) in "
               "hyper[5..6]",
    PGK_PARAMS(hyper_params),
    .min_target = PG_SM_70,
    .threads = 1,
    .build = build_hyper_advance,
    .launch = pgk_launch_single,
};
