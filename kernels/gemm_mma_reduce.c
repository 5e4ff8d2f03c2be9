/* SPDX-License-Identifier: MIT */
/*
 * The helpers of the mma.sync family (gemm_mma.c): gemm_mma_reduce sums
 * the split-K partials of gemm_mma_* (and of gemm_f32_*) in a fixed
 * order; gemm_lp_simt (sm_70+) is one thread an output, for targets
 * without the tensor-core instructions, and its side of the family's
 * choice.
 */
#include "gemm_mma.h"

/* ---------------------------------------------------------------- gemm_mma_reduce */

/* out[i] (+)= Σ_z ws[z][i] (+ bias[i % cols]), z = 0, 1, .. in order, for
 * the n = P·Q elements of the output: the split-K partials, one thread an
 * element. */

static int build_reduce(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    pg_type ot = out_type_of(kn[RD_OUT]);
    pg_reg ws = pg_param_load(k, p[RP_WS]), c = pg_param_load(k, p[RP_C]);
    pg_reg bias = pg_param_load(k, p[RP_BIAS]);
    pg_reg nel = pg_param_load(k, p[RP_N]), cols = pg_param_load(k, p[RP_COLS]);
    pg_reg split = pg_param_load(k, p[RP_SPLIT]), flags = pg_param_load(k, p[RP_FLAGS]);
    pg_reg i = pg_global_tid_x(k);
    pg_label out = pg_label_new(k, "out");
    pg_bounds_guard(k, i, nel, out);
    pg_reg stride = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, stride, nel, pg_u32(4));
    pg_reg addr = pgk_elem_addr(k, ws, i, 4);
    pg_reg s = pg_reg_new(k, PG_F32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, s);
    pg_reg z = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, z, pg_u32(1));
    pg_label top = pg_label_new(k, "slice"), done = pg_label_new(k, "summed");
    pg_label_bind(k, top);
    pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, z, split);
    pg_bra_if(k, more, true, done);
    pg_add(k, PG_U64, addr, addr, stride);
    pg_reg x = pgk_ld_f32(k, addr);
    pg_add(k, PG_F32, s, s, x);
    pg_add(k, PG_U32, z, z, pg_u32(1));
    pg_bra(k, top);
    pg_label_bind(k, done);
    pg_reg col = pg_reg_new(k, PG_U32);
    pg_rem(k, PG_U32, col, i, cols);
    pg_reg hb = flag_set(k, flags, FLAG_BIAS);
    pg_reg bv = pg_reg_new(k, PG_F32);
    pg_mov(k, PG_F32, bv, pg_f32(0.0f));
    pg_reg baddr = pgk_elem_addr(k, bias, col, 4);
    pg_guard(k, hb, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, baddr, 0, bv);
    pg_add(k, PG_F32, s, s, bv);
    pg_reg ha = flag_set(k, flags, FLAG_ACCUMULATE);
    pg_reg ca = pgk_elem_addr(k, c, i, out_size(ot));
    pg_reg yes = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_EQ, PG_U32, yes, i, i);
    pg_reg v = pgk_gemm_finish_value(k, ot, s, ca, yes, ha);
    pgk_gemm_store_value(k, ot, ca, yes, v, true);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_reduce(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    if (kn[RD_N] == 0 || kn[RD_COLS] == 0 || kn[RD_SPLIT] < 1 || kn[RD_OUT] > OUT_BF16)
        return PG_ERANGE;
    return pgk_launch_1d(kn[RD_N], PGK_THREADS, out);
}

static const pgk_knob reduce_knobs[] = {
    [RD_N] = {"n", 32768, 1, UINT32_MAX, "elements of the output (P x Q)", false},
    [RD_COLS] = {"cols", 16, 1, MM_MAX_DIM, "columns of the output (Q): bias[i % cols]", false},
    [RD_SPLIT] = {"split", 8, 1, MMA_MAX_SPLIT, "partial sums to add", false},
    [RD_OUT] = {"out", OUT_F32, OUT_F32, OUT_BF16, "output type: 0 = f32, 1 = f16, 2 = bf16",
                true},
};

static const pgk_param reduce_params[] = {
    [RP_WS] = {"workspace", PG_U64, true}, [RP_C] = {"c", PG_U64, true},
    [RP_BIAS] = {"bias", PG_U64, true},    [RP_N] = {"n", PG_U32, false},
    [RP_COLS] = {"cols", PG_U32, false},   [RP_SPLIT] = {"split", PG_U32, false},
    [RP_FLAGS] = {"flags", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_mma_reduce = {
    .name = "gemm_mma_reduce",
    .summary = "C[P,Q] (+)= sum of split-K partials workspace[z][P][Q] in z order (+ bias[Q])",
    PGK_PARAMS(reduce_params),
    PGK_KNOBS(reduce_knobs),
    .min_target = PG_SM_80,
    .threads = PGK_THREADS,
    .build = build_reduce,
    .launch = launch_reduce,
};

/* ---------------------------------------------------------------- gemm_lp_simt: the fallback */

/* One thread an output, 16×16 blocks, the 16-bit inputs widened to f32 and
 * summed in r order by fma: correct on every target, slow. */

static int build_simt(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    unsigned layout = kn[LP_LAYOUT];
    pg_type it = in_type_of(kn[LP_IN]), ot = out_type_of(kn[LP_OUT]);
    bool native = pg_target_sm(pg_kernel_target(k)) >= 80;
    pg_kernel_set_maxntid(k, 16, 16, 1);
    pg_reg a = pg_param_load(k, p[PA_A]), b = pg_param_load(k, p[PA_B]);
    pg_reg c = pg_param_load(k, p[PA_C]), bias = pg_param_load(k, p[PA_BIAS]);
    pg_reg m = pg_param_load(k, p[PA_M]), n = pg_param_load(k, p[PA_N]);
    pg_reg kd = pg_param_load(k, p[PA_K]), flags = pg_param_load(k, p[PA_FLAGS]);
    pg_reg P, Q, R;
    pqr(layout, m, n, kd, &P, &Q, &R);
    pg_reg q = pg_reg_new(k, PG_U32), pp = pg_reg_new(k, PG_U32);
    pg_reg tx = pg_sreg_read(k, PG_SREG_TID_X);
    pg_mad(k, PG_U32, q, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(16), tx);
    pg_reg ty = pg_sreg_read(k, PG_SREG_TID_Y);
    pg_mad(k, PG_U32, pp, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(16), ty);
    pg_label out = pg_label_new(k, "out");
    pg_bounds_guard(k, q, Q, out);
    pg_bounds_guard(k, pp, P, out);
    /* A(p, r) and B(q, r): the address of r = 0 and the step to r + 1 */
    pg_reg lda = layout == PGK_GEMM_FORWARD ? kd : n;
    pg_reg pa, pb;
    pg_val sa, sb;
    if (layout == PGK_GEMM_BACKWARD_W) {
        pa = pgk_elem_addr2(k, a, pg_u32(0), pg_u32(0), pp, 2);
        pg_reg s = pg_reg_new(k, PG_U64);
        pg_mul_wide(k, PG_U32, s, lda, pg_u32(2));
        sa = s;
    } else {
        pa = pgk_elem_addr2(k, a, pp, lda, pg_u32(0), 2);
        sa = pg_u64(2);
    }
    if (layout == PGK_GEMM_FORWARD) {
        pb = pgk_elem_addr2(k, b, q, kd, pg_u32(0), 2);
        sb = pg_u64(2);
    } else {
        pb = pgk_elem_addr2(k, b, pg_u32(0), pg_u32(0), q, 2);
        pg_reg s = pg_reg_new(k, PG_U64);
        pg_mul_wide(k, PG_U32, s, kd, pg_u32(2));
        sb = s;
    }
    pg_reg s = pgk_zero_f32(k), r = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, r, pg_u32(0));
    pg_label top = pg_label_new(k, "r");
    pg_label_bind(k, top);
    pg_reg ha = pg_reg_new(k, PG_B16), hb = pg_reg_new(k, PG_B16);
    pg_ld(k, PG_SPACE_GLOBAL, PG_B16, pa, 0, ha);
    pg_ld(k, PG_SPACE_GLOBAL, PG_B16, pb, 0, hb);
    pg_reg fa = pgk_h_to_f32(k, it, ha), fb = pgk_h_to_f32(k, it, hb);
    pg_fma(k, PG_F32, s, fa, fb, s);
    pg_add(k, PG_U64, pa, pa, sa);
    pg_add(k, PG_U64, pb, pb, sb);
    pgk_loop_back(k, r, R, top);
    pg_reg hbias = flag_set(k, flags, FLAG_BIAS);
    pg_reg bv = pgk_zero_f32(k);
    pg_reg baddr = pgk_elem_addr(k, bias, q, 4);
    pg_guard(k, hbias, false);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, baddr, 0, bv);
    pg_add(k, PG_F32, s, s, bv);
    pg_reg hacc = flag_set(k, flags, FLAG_ACCUMULATE);
    pg_reg ca = pgk_elem_addr2(k, c, pp, Q, q, out_size(ot));
    pg_reg yes = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_EQ, PG_U32, yes, q, q);
    pg_reg v = pgk_gemm_finish_value(k, ot, s, ca, yes, hacc);
    pgk_gemm_store_value(k, ot, ca, yes, v, native);
    pg_label_bind(k, out);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_simt(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    uint32_t P, Q, R;
    if (kn[LP_LAYOUT] >= PGK_GEMM_LAYOUTS || kn[LP_IN] > IN_BF16 || kn[LP_OUT] > OUT_BF16)
        return PG_ERANGE;
    pqr_host(kn[LP_LAYOUT], kn[LP_M], kn[LP_N], kn[LP_K], &P, &Q, &R);
    uint32_t gy = pgk_ceil_div(P, 16);
    if (!P || !Q || !R || gy > 65535u)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_ceil_div(Q, 16), gy, 1}, {16, 16, 1}, 0, {0, 0, 0}};
    return PG_OK;
}

static const pgk_knob simt_knobs[] = {
    [LP_M] = {"m", 512, 1, LP_MAX_PQ, "M of the layout (tokens)", false},
    [LP_N] = {"n", 256, 1, LP_MAX_PQ, "N of the layout (outputs)", false},
    [LP_K] = {"k", 256, 1, MM_MAX_DIM, "K of the layout (inputs)", false},
    [LP_LAYOUT] = {"layout", PGK_GEMM_FORWARD, 0, PGK_GEMM_LAYOUTS - 1,
                   "0 = forward Y = X W^T, 1 = backward_x dX = dY W, 2 = backward_w dW = dY^T X",
                   true},
    [LP_IN] = {"in", IN_BF16, IN_F16, IN_BF16, "input type: 0 = f16, 1 = bf16", true},
    [LP_OUT] = {"out", OUT_F32, OUT_F32, OUT_BF16, "output type: 0 = f32, 1 = f16, 2 = bf16",
                true},
};

static const pgk_param simt_params[] = {
    [PA_A] = {"a", PG_U64, true},      [PA_B] = {"b", PG_U64, true},
    [PA_C] = {"c", PG_U64, true},      [PA_BIAS] = {"bias", PG_U64, true},
    [PA_WS] = {"workspace", PG_U64, true}, [PA_M] = {"m", PG_U32, false},
    [PA_N] = {"n", PG_U32, false},     [PA_K] = {"k", PG_U32, false},
    [PA_FLAGS] = {"flags", PG_U32, false},
};

const pgk_desc pgk_desc_gemm_lp_simt = {
    .name = "gemm_lp_simt",
    .summary = "the 16-bit GEMM layouts one thread an output (targets without mma.sync)",
    PGK_PARAMS(simt_params),
    PGK_KNOBS(simt_knobs),
    .min_target = PG_SM_70,
    .build = build_simt,
    .launch = launch_simt,
};

int pgk_gemm_lp_simt_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type,
                            pgk_gemm_choice *out)
{
    out->desc = &pgk_desc_gemm_lp_simt;
    int rc = pgk_knobs_default(out->desc, &out->knobs);
    if (rc)
        return rc;
    out->knobs.v[LP_M] = out->m;
    out->knobs.v[LP_N] = out->n;
    out->knobs.v[LP_K] = out->k;
    out->knobs.v[LP_LAYOUT] = layout;
    out->knobs.v[LP_IN] = in_type == PG_BF16 ? IN_BF16 : IN_F16;
    out->knobs.v[LP_OUT] = out_knob(out_type);
    if (out->m > LP_MAX_PQ || out->n > LP_MAX_PQ)
        return PG_ERANGE; /* the fallback's rows of blocks */
    return PG_OK;
}

bool pgk_gemm_lp_simt_describe(const pgk_desc *d, const pgk_knobs *kn, pgk_gemm_layout *layout,
                               pg_type *in_type, pg_type *out_type, uint32_t *m, uint32_t *n,
                               uint32_t *k)
{
    if (d != &pgk_desc_gemm_lp_simt)
        return false;
    const uint32_t *v = kn->v;
    *layout = (pgk_gemm_layout)(v[LP_LAYOUT] < PGK_GEMM_LAYOUTS ? v[LP_LAYOUT] : 0);
    *in_type = in_type_of(v[LP_IN]);
    *out_type = out_type_of(v[LP_OUT]);
    *m = v[LP_M];
    *n = v[LP_N];
    *k = v[LP_K];
    return true;
}
