/* SPDX-License-Identifier: MIT */
/*
 * lr_schedule(hyper, sched): one thread writes the learning rate of the
 * coming optimizer step into the AdamW hyper buffer, so that a captured
 * training step replayed N times follows the schedule without a host
 * copy. It reads s = hyper[PGK_HYPER_STEP] (the steps completed so far:
 * the 0-based index of the step about to run) and the five f32 of
 * enum pgk_sched, [base_lr, warmup, total, min_ratio, kind], and writes
 * hyper[PGK_HYPER_LR] alone. Launch it before the step advances the
 * counter (adamw_hyper_advance, adamw_multi_finalize); a skipped step
 * leaves the counter, so the next one gets the same rate.
 *
 * Hugging Face transformers' schedules, with W = warmup, T = total,
 * m = min_ratio:
 *
 *   s < W:  lr = base * (s / W)                      (step 0 has lr 0)
 *   else:   d = max(1, T - W)
 *           p = clamp((s - W) / d, 0, 1),  q = clamp((T - s) / d, 0, 1)
 *           g = 1                                    constant
 *               q                                    linear (1 - p)
 *               0.5 (1 + cos(pi p))                  cosine
 *           lr = base * (m + (1 - m) * g)
 *
 * In f32, in this order: r = s / W, lr = base * r; d, s - W, T - s, p, q
 * (each one rounding; the differences are exact for integral counts
 * below 2^24); a = (1 - m) * g, f = m + a, lr = base * f. The linear
 * factor is q itself, Hugging Face's (T - s) / (T - W): 1 - p would lose
 * the digits of the last steps. The cosine factor is cos^2(pi p / 2) =
 * 1 - sin^2(pi p / 2) for p <= 1/2 and sin^2(pi q / 2) past it (1 + cos
 * cancels near the end, where the floor 0 makes every digit count): sin
 * of x = y pi/2, y = p or q in [0, 1/2], by its Taylor series to x^17 in
 * f64 (truncation below 1e-19), squared, and rounded to f32 once: the
 * factor is within 0.5 f32 ulp and 1e-15 of the exact one. The rounding
 * of p or q moves g by at most twice as much, relatively (y pi cot(y pi
 * / 2) <= 2). Counted so, lr is within 7 f32 roundings (4.2e-7) of
 * pgk_lr_schedule_ref (double), relatively; over every step of the
 * schedules tests/kernels/schedule_cpu.c sweeps (23M steps: warm-ups,
 * totals up to 1.6e7, floors 0 to 1) the largest error is 2.1e-7.
 * pgk_lr_schedule() is this arithmetic on the host, bit for bit (fma for
 * the device's fma, one rounding a statement). Past T the floor holds;
 * a kind other than 1 or 2 is constant. With g = 1, m + (1 - m) is 1
 * exactly for any m in [0, 1], so the constant schedule is base itself.
 */
#include "kernels.h"

#include <math.h>

#define PIO2 1.57079632679489661923
#define SIN_TERMS 9

/* sin x = x sum (-1)^i x^(2i) / (2i + 1)!: the coefficients in x^2. */
static void sin_coeffs(double *c)
{
    double fact = 1.0;
    for (int i = 0; i < SIN_TERMS; i++) {
        if (i > 0)
            fact *= (2.0 * i) * (2.0 * i + 1.0);
        c[i] = (i % 2 ? -1.0 : 1.0) / fact;
    }
}

/* The cosine factor for y = p or q in [0, 1/2] (first: y is p): 1 - sin^2
 * or sin^2 of y pi/2, in f64, rounded to f32. */
static pg_reg cosine_factor(pg_kernel *k, pg_reg y, pg_reg first)
{
    pg_reg yd = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, y);
    pg_reg x = pgv_mul(k, PG_F64, yd, pg_f64(PIO2));
    pg_reg z = pgv_mul(k, PG_F64, x, x);
    double c[SIN_TERMS];
    sin_coeffs(c);
    pg_reg poly = pgv_mov(k, PG_F64, pg_f64(c[SIN_TERMS - 1]));
    for (int i = SIN_TERMS - 2; i >= 0; i--)
        pg_fma(k, PG_F64, poly, poly, z, pg_f64(c[i]));
    pg_reg sn = pgv_mul(k, PG_F64, poly, x);
    pg_reg s2 = pgv_mul(k, PG_F64, sn, sn);
    pg_reg om = pgv_sub(k, PG_F64, pg_f64(1.0), s2);
    pg_reg g = pgv_selp(k, PG_F64, om, s2, first);
    return pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, g);
}

static int build_lr_schedule(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                             const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg hyper = pg_param_load(k, p[0]);
    pg_reg sched = pg_param_load(k, p[1]);
    pg_reg v[PGK_SCHED_COUNT];
    for (int i = 0; i < PGK_SCHED_COUNT; i++)
        v[i] = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, sched, 4 * i);
    pg_reg base = v[PGK_SCHED_BASE_LR], warm = v[PGK_SCHED_WARMUP], total = v[PGK_SCHED_TOTAL];
    pg_reg floor_ = v[PGK_SCHED_MIN_RATIO], kind = v[PGK_SCHED_KIND];
    pg_reg s = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, hyper, 4 * PGK_HYPER_STEP);

    pg_comment(k, "warm-up: base * (s / W)");
    pg_reg r = pgv_div(k, PG_F32, s, warm);
    pg_reg lr_warm = pgv_mul(k, PG_F32, base, r);

    pg_comment(k, "d = max(1, T - W); p = clamp((s - W) / d), q = clamp((T - s) / d)");
    pg_reg dd = pgv_sub(k, PG_F32, total, warm);
    pg_max(k, PG_F32, dd, dd, pg_f32(1.0f));
    pg_reg pp = pgv_sub(k, PG_F32, s, warm);
    pg_div(k, PG_F32, pp, pp, dd);
    pg_max(k, PG_F32, pp, pp, pg_f32(0.0f));
    pg_min(k, PG_F32, pp, pp, pg_f32(1.0f));
    pg_reg q = pgv_sub(k, PG_F32, total, s);
    pg_div(k, PG_F32, q, q, dd);
    pg_max(k, PG_F32, q, q, pg_f32(0.0f));
    pg_min(k, PG_F32, q, q, pg_f32(1.0f));

    pg_comment(k, "cosine: 1 - sin^2(pi p / 2) for p <= 1/2, else sin^2(pi q / 2)");
    pg_reg first = pgv_setp(k, PG_CMP_LE, PG_F32, pp, pg_f32(0.5f));
    pg_reg y = pgv_selp(k, PG_F32, pp, q, first);
    pg_reg gcos = cosine_factor(k, y, first);

    pg_comment(k, "g by kind (1 linear, 2 cosine, else constant); lr = base * (m + (1 - m) g)");
    pg_reg g = pgv_mov(k, PG_F32, pg_f32(1.0f));
    pg_reg is = pgv_setp(k, PG_CMP_EQ, PG_F32, kind, pg_f32((float)PGK_SCHED_LINEAR));
    pg_selp(k, PG_F32, g, q, g, is);
    pg_setp(k, PG_CMP_EQ, PG_F32, is, kind, pg_f32((float)PGK_SCHED_COSINE));
    pg_selp(k, PG_F32, g, gcos, g, is);
    pg_reg a = pgv_sub(k, PG_F32, pg_f32(1.0f), floor_);
    pg_mul(k, PG_F32, a, a, g);
    pg_reg f = pgv_add(k, PG_F32, floor_, a);
    pg_reg lr = pgv_mul(k, PG_F32, base, f);

    pg_reg in_warm = pgv_setp(k, PG_CMP_LT, PG_F32, s, warm);
    pg_selp(k, PG_F32, lr, lr_warm, lr, in_warm);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, hyper, 4 * PGK_HYPER_LR, lr);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param lr_schedule_params[] = {
    {"hyper", PG_U64, true},
    {"sched", PG_U64, true},
};

const pgk_desc pgk_desc_lr_schedule = {
    .name = "lr_schedule",
    .summary = "one thread: hyper[0] = the learning rate of step hyper[9] by a warm-up and "
               "constant, linear or cosine schedule (Hugging Face's)",
    PGK_PARAMS(lr_schedule_params),
    .min_target = PG_SM_70,
    .threads = 1,
    .build = build_lr_schedule,
    .launch = pgk_launch_single,
};

/* ---------------------------------------------------------------- host */

static float clamp01(float x)
{
    x = fmaxf(x, 0.0f);
    return fminf(x, 1.0f);
}

float pgk_lr_schedule(const float sched[PGK_SCHED_COUNT], float s)
{
    float base = sched[PGK_SCHED_BASE_LR], warm = sched[PGK_SCHED_WARMUP];
    float total = sched[PGK_SCHED_TOTAL], m = sched[PGK_SCHED_MIN_RATIO];
    float kind = sched[PGK_SCHED_KIND];
    if (s < warm) {
        float r = s / warm;
        return base * r;
    }
    float d = fmaxf(total - warm, 1.0f);
    float p = s - warm;
    p = clamp01(p / d);
    float q = total - s;
    q = clamp01(q / d);
    float g = 1.0f;
    if (kind == (float)PGK_SCHED_LINEAR) {
        g = q;
    } else if (kind == (float)PGK_SCHED_COSINE) {
        bool first = p <= 0.5f;
        double x = (double)(first ? p : q) * PIO2;
        double z = x * x;
        double c[SIN_TERMS];
        sin_coeffs(c);
        double poly = c[SIN_TERMS - 1];
        for (int i = SIN_TERMS - 2; i >= 0; i--)
            poly = fma(poly, z, c[i]);
        double sn = poly * x;
        double s2 = sn * sn;
        g = (float)(first ? 1.0 - s2 : s2);
    }
    float a = 1.0f - m;
    a = a * g;
    float f = m + a;
    return base * f;
}

double pgk_lr_schedule_ref(const float sched[PGK_SCHED_COUNT], double s)
{
    double base = sched[PGK_SCHED_BASE_LR], warm = sched[PGK_SCHED_WARMUP];
    double total = sched[PGK_SCHED_TOTAL], m = sched[PGK_SCHED_MIN_RATIO];
    float kind = sched[PGK_SCHED_KIND];
    if (s < warm)
        return base * (s / warm);
    double d = fmax(1.0, total - warm);
    double p = fmin(fmax((s - warm) / d, 0.0), 1.0);
    double q = fmin(fmax((total - s) / d, 0.0), 1.0);
    double g = 1.0;
    if (kind == (float)PGK_SCHED_LINEAR) {
        g = q;
    } else if (kind == (float)PGK_SCHED_COSINE) {
        double c = p <= 0.5 ? cos(PIO2 * p) : sin(PIO2 * q);
        g = c * c;
    }
    return base * (m + (1.0 - m) * g);
}
