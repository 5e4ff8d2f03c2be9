/* SPDX-License-Identifier: MIT */
/*
 * rope_forward_{f32,bf16} / rope_backward_{f32,bf16}: rotary position
 * embedding in place on q [T, q_heads, head_dim] and k [T, kv_heads,
 * head_dim], Hugging Face's rotate-half convention: for i < D/2 the pair
 * (x[i], x[i + D/2]) turns by the angle pos * inv_freq[i], pos = t mod
 * seq_len (the token's index in its sequence).
 *
 * The angle is the reference's f32 value: inv_freq[i] = 1 / f32(theta ^
 * (f32(2i) / f32(D))) and angle = f32(pos) * inv_freq[i], each step rounded
 * to f32 as Hugging Face computes them. theta ^ e is evaluated in f64 and
 * rounded once (the correctly rounded powf, but for ties closer than about
 * 1e-15), and cos/sin of the f32 angle in f64 (a two-part reduction by
 * pi/2, then Taylor polynomials on [-pi/4, pi/4]) rounded to f32: an
 * ex2/lg2/sin.approx angle would be off by up to 1e-2 radians at position
 * 4096. The rotation itself is the reference's: rounded products, one
 * rounded sum, y1 = x1 c - x2 s, y2 = x2 c + x1 s; the backward, its
 * transpose, dx1 = dy1 c + dy2 s, dx2 = dy2 c - dy1 s.
 *
 * One block a token: each thread finds cos/sin for its i once and turns
 * that pair in every head of q and k.
 *
 * rope_forward_table_f32 / rope_backward_table_f32 take the position and
 * the inverse frequencies from device memory instead: pos = the s32
 * pos[t] (positions that restart at every packed document), inv_freq[i]
 * from an f32 table of D/2 (a scaled RoPE's, llama3 and the like, made on
 * the host). angle = f32(pos) * inv_freq[i] and everything after it are
 * the kernels above, instruction for instruction: with the table of
 * pgk_rope_inv_freq(theta, D) and pos[t] = t mod S they write the bits of
 * rope_forward_f32 / rope_backward_f32. Positions need |pos| < 2^20 (the
 * angle reduction's range, with inv_freq <= 1); each thread loads pos[t]
 * once and inv_freq[i] once a pair (ld.global.nc: neither is written).
 *
 * pgk_rope_inv_freq() is the host's copy of the table the kernels compute:
 * the same f64 operations in the same order (fma for the device's fma),
 * so its floats are the device's bit for bit.
 */
#include "model.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define ROPE_THREADS 128u

/* fdlibm's pi/2 in two parts: the first 33 bits, and the rest. k * PIO2_1
 * is exact for |k| < 2^20. */
#define PIO2_1 1.57079632673412561417e+00
#define PIO2_1T 6.07710050650619224932e-11
#define TWO_OVER_PI 6.36619772367581382433e-01
#define LN2_D 6.93147180559945286227e-01
#define LOG2E_D 1.44269504088896338700e+00

/* A new register of type t holding v's bits (mov.bN): the value forms make
 * a register of the instruction's type, and these moves change the type. */
static pg_reg bits_as(pg_kernel *k, pg_type t, pg_type bits, pg_val v)
{
    pg_reg r = pg_reg_new(k, t);
    pg_mov(k, bits, r, v);
    return r;
}

/* ln m = 2 atanh(s) = sum 2 s^(2i+1) / (2i+1): the series' coefficients
 * in z = s^2, for log2_f64 and its host copy. */
#define LOG_TERMS 11
static void atanh_coeffs(double *c)
{
    for (int i = 0; i < LOG_TERMS; i++)
        c[i] = 2.0 / (2 * i + 1);
}

/* 1 / i!, for exp2_f64 and its host copy. */
#define EXP_TERMS 15
static void exp_coeffs(double *c)
{
    double fact = 1.0;
    for (int i = 0; i < EXP_TERMS; i++) {
        if (i > 0)
            fact *= i;
        c[i] = 1.0 / fact;
    }
}

/* Horner: c[n-1] + z (c[n-2] + ... ) evaluated as c[0] + z (c[1] + z (...)). */
static pg_reg horner(pg_kernel *k, pg_reg z, const double *c, int n)
{
    pg_reg acc = pgv_mov(k, PG_F64, pg_f64(c[n - 1]));
    for (int i = n - 2; i >= 0; i--)
        pg_fma(k, PG_F64, acc, acc, z, pg_f64(c[i]));
    return acc;
}

/* log2(theta) in f64 for a positive normal f32: theta = m 2^E, m folded
 * into [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s), s = (m-1)/(m+1), |s| <
 * 0.172: eleven odd terms reach 1e-17. */
static pg_reg log2_f64(pg_kernel *k, pg_reg theta)
{
    pg_reg u = bits_as(k, PG_U32, PG_B32, theta);
    pg_reg eb = pgv_shr(k, PG_U32, u, pg_u32(23));
    pg_reg e0 = pgv_sub(k, PG_S32, eb, pg_s32(127));
    pg_reg frac = pgv_and(k, PG_B32, u, pg_u32(0x007FFFFFu));
    pg_reg mbits = pgv_or(k, PG_B32, frac, pg_u32(0x3F800000u));
    pg_reg mf = bits_as(k, PG_F32, PG_B32, mbits);
    pg_reg m0 = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, mf);
    pg_reg big = pgv_setp(k, PG_CMP_GT, PG_F64, m0, pg_f64(1.4142135623730951));
    pg_reg half = pgv_mul(k, PG_F64, m0, pg_f64(0.5));
    pg_reg m = pgv_selp(k, PG_F64, half, m0, big);
    pg_reg e1 = pgv_add(k, PG_S32, e0, pg_s32(1));
    pg_reg e = pgv_selp(k, PG_S32, e1, e0, big);
    pg_reg num = pgv_sub(k, PG_F64, m, pg_f64(1.0));
    pg_reg den = pgv_add(k, PG_F64, m, pg_f64(1.0));
    pg_reg s = pgv_div(k, PG_F64, num, den);
    pg_reg z = pgv_mul(k, PG_F64, s, s);
    double c[LOG_TERMS];
    atanh_coeffs(c);
    pg_reg poly = horner(k, z, c, LOG_TERMS);
    pg_reg ln = pgv_mul(k, PG_F64, poly, s);
    pg_reg ed = pgv_cvt(k, PG_F64, PG_S32, PG_RND_RN, e);
    return pgv_fma(k, PG_F64, ln, pg_f64(LOG2E_D), ed);
}

/* 2^y in f64 for moderate y: y = n + f, |f| <= 1/2, 2^f = exp(f ln 2) by
 * Taylor (degree 14 reaches 1e-19), times 2^n built from its bits. */
static pg_reg exp2_f64(pg_kernel *k, pg_reg y)
{
    pg_reg n = pgv_cvt(k, PG_S32, PG_F64, PG_RND_RNI, y);
    pg_reg nd = pgv_cvt(k, PG_F64, PG_S32, PG_RND_RN, n);
    pg_reg f = pgv_sub(k, PG_F64, y, nd);
    pg_reg x = pgv_mul(k, PG_F64, f, pg_f64(LN2_D));
    double c[EXP_TERMS];
    exp_coeffs(c);
    pg_reg ex = horner(k, x, c, EXP_TERMS);
    pg_reg bexp = pgv_add(k, PG_S32, n, pg_s32(1023));
    pg_reg wide = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, bexp);
    pg_reg sbits = pgv_shl(k, PG_B64, wide, pg_u32(52));
    pg_reg scale = bits_as(k, PG_F64, PG_B64, sbits);
    return pgv_mul(k, PG_F64, ex, scale);
}

/* cos and sin of an f32 angle (|a| < 2^20), rounded to f32. */
static void sincos_f32(pg_kernel *k, pg_reg a, pg_reg *cos_out, pg_reg *sin_out)
{
    pg_reg x = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, a);
    pg_reg t = pgv_mul(k, PG_F64, x, pg_f64(TWO_OVER_PI));
    pg_reg q = pgv_cvt(k, PG_S32, PG_F64, PG_RND_RNI, t);
    pg_reg qd = pgv_cvt(k, PG_F64, PG_S32, PG_RND_RN, q);
    pg_reg nq = pgv_neg(k, PG_F64, qd);
    pg_reg r1 = pgv_fma(k, PG_F64, nq, pg_f64(PIO2_1), x);
    pg_reg r = pgv_fma(k, PG_F64, nq, pg_f64(PIO2_1T), r1);
    pg_reg z = pgv_mul(k, PG_F64, r, r);
    double sc[10], cc[10];
    double fact = 1.0;
    for (int i = 1; i <= 19; i++) {
        fact *= i;
        if (i % 2 == 1)
            sc[(i - 1) / 2] = ((i - 1) / 2 % 2 ? -1.0 : 1.0) / fact;
        else
            cc[i / 2] = (i / 2 % 2 ? -1.0 : 1.0) / fact;
    }
    cc[0] = 1.0;
    pg_reg sp = horner(k, z, sc, 10);
    pg_reg s = pgv_mul(k, PG_F64, sp, r);
    pg_reg c = horner(k, z, cc, 10);
    pg_reg s32 = pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, s);
    pg_reg c32 = pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, c);

    pg_comment(k, "quadrant q mod 4: (sin, cos) = (s, c), (c, -s), (-s, -c), (-c, s)");
    pg_reg bit = pgv_and(k, PG_B32, q, pg_u32(1));
    pg_reg swap = pgv_setp(k, PG_CMP_NE, PG_U32, bit, pg_u32(0));
    pg_reg sv = pgv_selp(k, PG_F32, c32, s32, swap);
    pg_reg cv = pgv_selp(k, PG_F32, s32, c32, swap);
    pg_reg q2 = pgv_and(k, PG_B32, q, pg_u32(2));
    pg_reg sneg = pgv_setp(k, PG_CMP_NE, PG_U32, q2, pg_u32(0));
    pg_reg q1 = pgv_add(k, PG_U32, q, pg_u32(1));
    pg_reg q1b = pgv_and(k, PG_B32, q1, pg_u32(2));
    pg_reg cneg = pgv_setp(k, PG_CMP_NE, PG_U32, q1b, pg_u32(0));
    pg_reg ns = pgv_neg(k, PG_F32, sv);
    pg_reg nc = pgv_neg(k, PG_F32, cv);
    *sin_out = pgv_selp(k, PG_F32, ns, sv, sneg);
    *cos_out = pgv_selp(k, PG_F32, nc, cv, cneg);
}

/* a c - b s, or a c + b s when `plus`: rounded products, one rounded sum. */
static pg_reg cs_combine(pg_kernel *k, pg_reg a, pg_reg b, pg_reg c, pg_reg s, bool plus)
{
    pg_reg ac = pgv_mul(k, PG_F32, a, c);
    pg_reg bs = pgv_mul(k, PG_F32, b, s);
    return plus ? pgv_add(k, PG_F32, ac, bs) : pgv_sub(k, PG_F32, ac, bs);
}

/* Turn pair i of every head of one token's rows of x [heads, D]. */
static void rotate_heads(pg_kernel *k, pgk_dtype dt, bool backward, pg_reg x, pg_reg token,
                         pg_reg heads, pg_reg dim, pg_reg half, pg_reg i, pg_reg c, pg_reg s)
{
    unsigned size = pgk_dtype_size(dt);
    pg_reg rowlen = pgv_mul(k, PG_U32, heads, dim);
    pg_reg base = pgk_addr2(k, x, token, rowlen, i, size);
    pg_loop L;
    pg_for_begin(k, &L, pg_u32(0), heads, pg_u32(1));
    pg_reg a1 = pgv_mov(k, PG_U64, base);
    pg_reg a2 = pgk_addr_add(k, base, half, size);
    pg_reg x1 = pgk_ld_act(k, dt, a1, false);
    pg_reg x2 = pgk_ld_act(k, dt, a2, false);
    pg_reg y1 = cs_combine(k, x1, x2, c, s, backward);
    pg_reg y2 = cs_combine(k, x2, x1, c, s, !backward);
    pgk_st_act(k, dt, a1, y1);
    pgk_st_act(k, dt, a2, y2);
    pg_reg next = pgk_addr_add(k, base, dim, size);
    pg_mov(k, PG_U64, base, next);
    pg_for_end(k, &L);
}

/* table: the position from the s32 pos[token] and inv_freq[i] from an f32
 * table (params q, k, pos, inv_freq, num_tokens, q_heads, kv_heads,
 * head_dim); otherwise t mod seq_len and theta (q, k, num_tokens, seq_len,
 * q_heads, kv_heads, head_dim, theta). */
static int build_rope(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool backward, bool table)
{
    pg_kernel_set_maxntid(k, ROPE_THREADS, 1, 1);
    pg_reg q = pg_param_load(k, p[0]);
    pg_reg kk = pg_param_load(k, p[1]);
    pg_reg ntok, hq, hkv, dim;
    pg_reg seq = pg_none(), theta = pg_none(), posp = pg_none(), freqp = pg_none();
    if (table) {
        posp = pg_param_load(k, p[2]);
        freqp = pg_param_load(k, p[3]);
        ntok = pg_param_load(k, p[4]);
        hq = pg_param_load(k, p[5]);
        hkv = pg_param_load(k, p[6]);
        dim = pg_param_load(k, p[7]);
    } else {
        ntok = pg_param_load(k, p[2]);
        seq = pg_param_load(k, p[3]);
        hq = pg_param_load(k, p[4]);
        hkv = pg_param_load(k, p[5]);
        dim = pg_param_load(k, p[6]);
        theta = pg_param_load(k, p[7]);
    }

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg token = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_label done = pg_label_new(k, "exit");
    pg_bounds_guard(k, token, ntok, done);
    pg_reg posf;
    if (table) {
        pg_reg pos = pgv_ld_nc(k, PG_S32, pgk_elem_addr(k, posp, token, 4), 0);
        posf = pgv_cvt(k, PG_F32, PG_S32, PG_RND_RN, pos);
    } else {
        pg_reg pos = pgv_rem(k, PG_U32, token, seq);
        posf = pgv_cvt(k, PG_F32, PG_U32, PG_RND_RN, pos);
    }
    pg_reg half = pgv_shr(k, PG_U32, dim, pg_u32(1));
    pg_reg dimf = pg_none(), lt = pg_none();
    if (!table) {
        dimf = pgv_cvt(k, PG_F32, PG_U32, PG_RND_RN, dim);
        lt = log2_f64(k, theta);
    }

    pg_loop L;
    pg_reg i = pg_for_begin(k, &L, tid, half, ntid);
    pg_reg inv;
    if (table) {
        pg_comment(k, "angle = f32(pos) * inv_freq[i]");
        inv = pgv_ld_nc(k, PG_F32, pgk_elem_addr(k, freqp, i, 4), 0);
    } else {
        pg_comment(k, "inv_freq = 1 / f32(theta ^ (f32(2i) / f32(D))); angle = f32(pos) * "
                      "inv_freq");
        pg_reg two_i = pgv_shl(k, PG_B32, i, pg_u32(1));
        pg_reg two_if = pgv_cvt(k, PG_F32, PG_U32, PG_RND_RN, two_i);
        pg_reg ef = pgv_div(k, PG_F32, two_if, dimf);
        pg_reg ed = pgv_cvt(k, PG_F64, PG_F32, PG_RND_NONE, ef);
        pg_reg y = pgv_mul(k, PG_F64, ed, lt);
        pg_reg pw = exp2_f64(k, y);
        pg_reg pwf = pgv_cvt(k, PG_F32, PG_F64, PG_RND_RN, pw);
        inv = pgv_div(k, PG_F32, pg_f32(1.0f), pwf);
    }
    pg_reg ang = pgv_mul(k, PG_F32, posf, inv);
    pg_reg c, s;
    sincos_f32(k, ang, &c, &s);
    rotate_heads(k, dt, backward, q, token, hq, dim, half, i, c, s);
    rotate_heads(k, dt, backward, kk, token, hkv, dim, half, i, c, s);
    pg_for_end(k, &L);

    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

enum { ROPE_TOKENS, ROPE_DIM };

static int launch_rope(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    if (knobs[ROPE_TOKENS] == 0 || knobs[ROPE_TOKENS] > INT32_MAX || knobs[ROPE_DIM] < 2 ||
        knobs[ROPE_DIM] % 2 != 0)
        return PG_ERANGE;
    *out = (pgk_launch){{knobs[ROPE_TOKENS], 1, 1}, {ROPE_THREADS, 1, 1}, 0};
    return PG_OK;
}

#define ROPE_BUILD(fn, dt, bwd, table)                                                     \
    static int fn(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs) \
    {                                                                                        \
        (void)d, (void)knobs;                                                                \
        return build_rope(k, p, dt, bwd, table);                                             \
    }
ROPE_BUILD(build_rope_fwd_f32, PGK_F32, false, false)
ROPE_BUILD(build_rope_fwd_bf16, PGK_BF16, false, false)
ROPE_BUILD(build_rope_bwd_f32, PGK_F32, true, false)
ROPE_BUILD(build_rope_bwd_bf16, PGK_BF16, true, false)
ROPE_BUILD(build_rope_table_fwd_f32, PGK_F32, false, true)
ROPE_BUILD(build_rope_table_bwd_f32, PGK_F32, true, true)

static const pgk_param rope_params[] = {
    {"q", PG_U64, true},           {"k", PG_U64, true},          {"rows", PG_U32, false},
    {"seq_len", PG_U32, false},    {"q_heads", PG_U32, false},   {"kv_heads", PG_U32, false},
    {"head_dim", PG_U32, false},   {"theta", PG_F32, false},
};

static const pgk_param rope_table_params[] = {
    {"q", PG_U64, true},           {"k", PG_U64, true},          {"pos", PG_U64, true},
    {"inv_freq", PG_U64, true},    {"rows", PG_U32, false}, {"q_heads", PG_U32, false},
    {"kv_heads", PG_U32, false},   {"head_dim", PG_U32, false},
};

static const pgk_knob rope_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "tokens, batch x seq_len (one block each)"},
    {"head_dim", 128, 2, 65536, "elements a head (even)"},
};

#define ROPE_DESC(var, nm, fn, dt, what)                                       \
    const pgk_desc var = {                                                     \
        .name = nm,                                                            \
        .summary = what,                                                       \
        .params = rope_params,                                                 \
        .nparams = 8,                                                          \
        .knobs = rope_knobs,                                                   \
        .nknobs = 2,                                                           \
        .min_target = dt == PGK_BF16 ? PG_SM_80 : PG_SM_70,                    \
        .build = fn,                                                           \
        .launch = launch_rope,                                                 \
    };
ROPE_DESC(pgk_desc_rope_forward_f32, "rope_forward_f32", build_rope_fwd_f32, PGK_F32,
          "rotary embedding of q and k in place, rotate-half, f32 angles as Hugging Face (f32)")
ROPE_DESC(pgk_desc_rope_forward_bf16, "rope_forward_bf16", build_rope_fwd_bf16, PGK_BF16,
          "rotary embedding of q and k in place, rotate-half, f32 angles as Hugging Face (bf16)")
ROPE_DESC(pgk_desc_rope_backward_f32, "rope_backward_f32", build_rope_bwd_f32, PGK_F32,
          "the transpose of rope_forward on dq and dk in place (f32)")
ROPE_DESC(pgk_desc_rope_backward_bf16, "rope_backward_bf16", build_rope_bwd_bf16, PGK_BF16,
          "the transpose of rope_forward on dq and dk in place (bf16)")

const pgk_desc pgk_desc_rope_forward_table_f32 = {
    .name = "rope_forward_table_f32",
    .summary = "rope_forward_f32 with positions from an s32 array and inv_freq from an f32 table "
               "(packed sequences, scaled RoPE)",
    PGK_PARAMS(rope_table_params),
    PGK_KNOBS(rope_knobs),
    .min_target = PG_SM_70,
    .build = build_rope_table_fwd_f32,
    .launch = launch_rope,
};
const pgk_desc pgk_desc_rope_backward_table_f32 = {
    .name = "rope_backward_table_f32",
    .summary = "the transpose of rope_forward_table_f32 on dq and dk in place",
    PGK_PARAMS(rope_table_params),
    PGK_KNOBS(rope_knobs),
    .min_target = PG_SM_70,
    .build = build_rope_table_bwd_f32,
    .launch = launch_rope,
};

/* ---------------------------------------------------------------- the host's table */

/* log2_f64, operation for operation: each statement one rounding, as the
 * device's instruction. */
static double host_log2(float theta)
{
    uint32_t u;
    memcpy(&u, &theta, 4);
    int32_t e = (int32_t)(u >> 23) - 127;
    u = (u & 0x007FFFFFu) | 0x3F800000u;
    float mf;
    memcpy(&mf, &u, 4);
    double m = mf;
    if (m > 1.4142135623730951) {
        m = m * 0.5;
        e = e + 1;
    }
    double num = m - 1.0;
    double den = m + 1.0;
    double s = num / den;
    double z = s * s;
    double c[LOG_TERMS];
    atanh_coeffs(c);
    double poly = c[LOG_TERMS - 1];
    for (int i = LOG_TERMS - 2; i >= 0; i--)
        poly = fma(poly, z, c[i]);
    double ln = poly * s;
    return fma(ln, LOG2E_D, (double)e);
}

/* exp2_f64, likewise. */
static double host_exp2(double y)
{
    int32_t n = (int32_t)lrint(y); /* cvt.rni: to nearest, ties to even */
    double f = y - (double)n;
    double x = f * LN2_D;
    double c[EXP_TERMS];
    exp_coeffs(c);
    double ex = c[EXP_TERMS - 1];
    for (int i = EXP_TERMS - 2; i >= 0; i--)
        ex = fma(ex, x, c[i]);
    uint64_t wide = (uint64_t)(uint32_t)(n + 1023) << 52;
    double scale;
    memcpy(&scale, &wide, 8);
    return ex * scale;
}

int pgk_rope_inv_freq(float theta, uint32_t head_dim, float *out)
{
    if (!out || head_dim < 2 || head_dim % 2 != 0 || !(theta >= FLT_MIN && theta <= FLT_MAX))
        return PG_EINVAL;
    double lt = host_log2(theta);
    float dimf = (float)head_dim;
    for (uint32_t i = 0; i < head_dim / 2; i++) {
        float ef = (float)(2 * i);
        ef = ef / dimf;
        double y = (double)ef * lt;
        float pwf = (float)host_exp2(y);
        out[i] = 1.0f / pwf;
    }
    return PG_OK;
}
