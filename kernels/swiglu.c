/* SPDX-License-Identifier: MIT */
/*
 * swiglu_forward_{f32,bf16}: h = silu(gate) * up, and swiglu_backward_{f32,
 * bf16}: dgate = dh * up * s * (1 + gate (1 - s)), dup = dh * silu(gate),
 * s = sigmoid(gate). Elementwise, 1-D. The sigmoid never overflows for any
 * gate (pgk_sigmoid). Every thread reads all its inputs before it writes,
 * so the outputs may alias the inputs they replace (h over gate or up;
 * dgate over gate, dup over up).
 *
 * The bf16 kernels take eight elements a thread: one 16-byte load of each
 * input and one 16-byte store of each output where the eight lie inside n
 * and every pointer is 16-byte aligned (always, for whole buffers);
 * element by element otherwise (the tail, a misaligned view), with the
 * same arithmetic, so the bits do not depend on the path.
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

/* The sigmoid of the bf16 kernels: pgk_sigmoid's, with the smaller of s
 * and 1 - s as z times the larger (z = exp(-|x|), the larger 1 / (1 + z))
 * rather than z / (1 + z): one rounding more in f32, far below the bf16
 * rounding of the result, and no division (which made the kernels
 * compute-bound). */
static void sigmoid_b16(pg_kernel *k, pg_reg x, pg_reg *s, pg_reg *oms)
{
    pg_reg z = pgk_exp_nonpos(k, pgv_neg(k, PG_F32, pgv_abs(k, PG_F32, x)));
    pg_reg big = pgv_rcp(k, PG_F32, pgv_add(k, PG_F32, z, pg_f32(1.0f)));
    pg_reg small = pgv_mul(k, PG_F32, z, big);
    pg_reg pos = pgv_setp(k, PG_CMP_GE, PG_F32, x, pg_f32(0.0f));
    *s = pgv_selp(k, PG_F32, big, small, pos);
    *oms = pgv_selp(k, PG_F32, small, big, pos);
}

static void sigmoid(pg_kernel *k, pg_reg x, pg_reg *s, pg_reg *oms, bool b16)
{
    if (b16)
        sigmoid_b16(k, x, s, oms);
    else
        pgk_sigmoid(k, x, s, oms);
}

/* h = silu(g) u (b16: the bf16 kernels' sigmoid). */
static void fwd_math(pg_kernel *k, const pg_reg *in, pg_reg *out, bool b16)
{
    pg_reg s, oms;
    sigmoid(k, in[0], &s, &oms, b16);
    pg_reg silu = pgv_mul(k, PG_F32, in[0], s);
    out[0] = pgv_mul(k, PG_F32, silu, in[1]);
}

/* in: g, u, dh; out: dgate, dup. */
static void bwd_math(pg_kernel *k, const pg_reg *in, pg_reg *out, bool b16)
{
    pg_reg g = in[0], u = in[1], d = in[2];
    pg_reg s, oms;
    sigmoid(k, g, &s, &oms, b16);
    pg_comment(k, "dup = dh * g * s");
    pg_reg silu = pgv_mul(k, PG_F32, g, s);
    out[1] = pgv_mul(k, PG_F32, d, silu);
    pg_comment(k, "dgate = dh * u * s * (1 + g * (1 - s))");
    pg_reg t1 = pgv_fma(k, PG_F32, g, oms, pg_f32(1.0f));
    pg_reg t = pgv_mul(k, PG_F32, t1, s);
    pg_reg du2 = pgv_mul(k, PG_F32, d, u);
    out[0] = pgv_mul(k, PG_F32, du2, t);
}

typedef void (*swiglu_math)(pg_kernel *k, const pg_reg *in, pg_reg *out, bool b16);

/* The f32 value of the bf16 in the low (hi false) or high half of w. */
static pg_reg bf16_half(pg_kernel *k, pg_reg w, bool hi)
{
    pg_reg b = hi ? pgv_and(k, PG_B32, w, pg_u32(0xffff0000u)) : pgv_shl(k, PG_B32, w, pg_u32(16));
    pg_reg f = pg_reg_new(k, PG_F32);
    pg_mov(k, PG_B32, f, b);
    return f;
}

/* A bf16 kernel over nin inputs and nout outputs (params in, then out,
 * then n), eight elements a thread (the file's comment). */
static int build_vec8(pg_kernel *k, const pg_param *p, int nin, int nout, swiglu_math math)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    int np = nin + nout;
    pg_reg ptr[5], addr[5];
    for (int j = 0; j < np; j++)
        ptr[j] = pg_param_load(k, p[j]);
    pg_reg n = pg_param_load(k, p[np]);
    pg_label done = pg_label_new(k, "exit"), scalar = pg_label_new(k, "scalar");
    pg_reg i = pg_global_tid_x(k);
    /* ceil(n / 8) groups, without wrapping */
    pg_reg whole = pgv_shr(k, PG_U32, n, pg_u32(3));
    pg_reg part = pgv_setp(k, PG_CMP_NE, PG_U32, pgv_and(k, PG_U32, n, pg_u32(7)), pg_u32(0));
    pg_reg groups = pgv_add(k, PG_U32, whole, pgv_selp(k, PG_U32, pg_u32(1), pg_u32(0), part));
    pg_bounds_guard(k, i, groups, done);
    pg_reg e0 = pgv_mul_wide(k, PG_U32, i, pg_u32(8));
    pg_reg off = pgv_shl(k, PG_U64, e0, pg_u32(1));
    pg_reg bits = pg_reg_new(k, PG_B64);
    pg_mov(k, PG_B64, bits, pg_u64(0));
    for (int j = 0; j < np; j++) {
        addr[j] = pgv_add(k, PG_U64, ptr[j], off);
        pg_or(k, PG_B64, bits, bits, pgv_and(k, PG_B64, ptr[j], pg_u64(15)));
    }
    /* one builder call an argument at most: C leaves their order open */
    pg_reg inside = pgv_setp(k, PG_CMP_LT, PG_U32, i, whole);
    pg_reg ok = pgv_and(k, PG_PRED, inside, pgv_setp(k, PG_CMP_EQ, PG_U64, bits, pg_u64(0)));
    pg_bra_if(k, ok, true, scalar);
    pg_reg w[3][4], x[3][8], y[2][8];
    for (int j = 0; j < nin; j++) {
        for (int q = 0; q < 4; q++)
            w[j][q] = pg_reg_new(k, PG_B32);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_B32, 4, addr[j], 0, w[j]);
        for (int e = 0; e < 8; e++)
            x[j][e] = bf16_half(k, w[j][e / 2], e % 2);
    }
    for (int e = 0; e < 8; e++) {
        pg_reg in[3], out[2];
        for (int j = 0; j < nin; j++)
            in[j] = x[j][e];
        math(k, in, out, true);
        for (int o = 0; o < nout; o++)
            y[o][e] = out[o];
    }
    for (int o = 0; o < nout; o++) {
        pg_val pk[4];
        for (int q = 0; q < 4; q++)
            pk[q] = pgv_cvt_pack(k, PG_BF16, y[o][2 * q], y[o][2 * q + 1]);
        pg_st_v(k, PG_SPACE_GLOBAL, PG_B32, 4, addr[nin + o], 0, pk);
    }
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    pg_reg n64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, n);
    for (uint32_t e = 0; e < 8; e++) {
        pg_label skip = pg_label_new(k, "tail");
        pg_reg ei = pgv_add(k, PG_U64, e0, pg_u64(e));
        pg_bra_if(k, pgv_setp(k, PG_CMP_LT, PG_U64, ei, n64), true, skip);
        pg_reg in[3], out[2];
        for (int j = 0; j < nin; j++)
            in[j] = pgk_ld_act(k, PGK_BF16, pgv_add(k, PG_U64, addr[j], pg_u64(2 * e)), false);
        math(k, in, out, true);
        for (int o = 0; o < nout; o++)
            pgk_st_act(k, PGK_BF16, pgv_add(k, PG_U64, addr[nin + o], pg_u64(2 * e)), out[o]);
        pg_label_bind(k, skip);
    }
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* The bf16 kernels' grid: a thread for every eight elements. */
static int launch_vec8(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    uint32_t n = knobs[PGK_N];
    return pgk_launch_1d(n / 8 + (n % 8 != 0), d->threads, out);
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
    pg_reg in[2] = {pgk_ld_act(k, dt, elem(k, dt, gate, i), false),
                    pgk_ld_act(k, dt, elem(k, dt, up, i), false)};
    pg_reg h;
    fwd_math(k, in, &h, false);
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
    pg_reg in[3] = {pgk_ld_act(k, dt, elem(k, dt, gate, i), false),
                    pgk_ld_act(k, dt, elem(k, dt, up, i), false),
                    pgk_ld_act(k, dt, elem(k, dt, dh, i), false)};
    pg_reg out[2];
    bwd_math(k, in, out, false);
    pg_reg dg = out[0], du = out[1];
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
    return build_vec8(k, p, 2, 1, fwd_math);
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
    return build_vec8(k, p, 3, 2, bwd_math);
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
    .min_target = PG_SM_80, .build = fwd_bf16, .threads = PGK_THREADS, .launch = launch_vec8,
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
    .min_target = PG_SM_80, .build = bwd_bf16, .threads = PGK_THREADS, .launch = launch_vec8,
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
