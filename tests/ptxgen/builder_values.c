/* SPDX-License-Identifier: MIT */
/* The value forms (pgv_*) and the counted loops: each value form against the
 * line it records and the register it makes, the same bytes as the in-place
 * spelling, and the loops against their exact PTX. */
#include "util.h"

/* The text of a whole kernel's body between "{\n" and the closing "}". */
static const char *body(pg_kernel *k)
{
    const char *ptx = NULL;
    if (emit(k, &ptx) || !ptx)
        return pg_kernel_message(k);
    const char *b = strstr(ptx, "\n\n\t");
    return b ? b + 2 : ptx;
}

/* A value form returns a new register of type `t`, numbered next. */
#define EXPECT_VALUE(k, r, t, text)                                            \
    do {                                                                       \
        REQUIRE(pg_is_reg(r));                                                 \
        REQUIRE_INT_EQ(pg_reg_type(k, r), t);                                  \
        EXPECT_LINE(k, text);                                                  \
    } while (0)

static void value_forms(void)
{
    pg_kernel *k = mk("vals", PG_SM_90);
    REQUIRE(k != NULL);
    if (!k)
        return;
    pg_reg r1 = pg_reg_new(k, PG_U32), r2 = pg_reg_new(k, PG_U32), s1 = pg_reg_new(k, PG_S32);
    pg_reg f1 = pg_reg_new(k, PG_F32), f2 = pg_reg_new(k, PG_F32);
    pg_reg g1 = pg_reg_new(k, PG_F64);
    pg_reg a1 = pg_reg_new(k, PG_U64);
    pg_reg p1 = pg_reg_new(k, PG_PRED);
    pg_reg h1 = pg_reg_new(k, PG_F16);
    pg_reg v;

    v = pgv_mov(k, PG_U32, pg_u32(7));
    EXPECT_VALUE(k, v, PG_U32, "mov.u32 %r4, 7");
    v = pgv_add(k, PG_U32, r1, r2);
    EXPECT_VALUE(k, v, PG_U32, "add.u32 %r5, %r1, %r2");
    v = pgv_add(k, PG_F32, f1, pg_f32(1.0f));
    EXPECT_VALUE(k, v, PG_F32, "add.rn.f32 %f3, %f1, 0f3F800000");
    v = pgv_sub(k, PG_S32, s1, pg_s32(-1));
    EXPECT_VALUE(k, v, PG_S32, "sub.s32 %r6, %r3, -1");
    v = pgv_mul(k, PG_U32, r1, pg_u32(4));
    EXPECT_VALUE(k, v, PG_U32, "mul.lo.u32 %r7, %r1, 4");
    v = pgv_mul(k, PG_F32, f1, f2);
    EXPECT_VALUE(k, v, PG_F32, "mul.rn.f32 %f4, %f1, %f2");
    v = pgv_mul_hi(k, PG_U32, r1, r2);
    EXPECT_VALUE(k, v, PG_U32, "mul.hi.u32 %r8, %r1, %r2");
    v = pgv_mul_wide(k, PG_U32, r1, pg_u32(4));
    EXPECT_VALUE(k, v, PG_U64, "mul.wide.u32 %rd2, %r1, 4");
    v = pgv_mul_wide(k, PG_S32, s1, s1);
    EXPECT_VALUE(k, v, PG_S64, "mul.wide.s32 %rd3, %r3, %r3");
    v = pgv_mad(k, PG_U32, r1, r2, pg_u32(1));
    EXPECT_VALUE(k, v, PG_U32, "mad.lo.u32 %r9, %r1, %r2, 1");
    v = pgv_mad_hi(k, PG_S32, s1, s1, s1);
    EXPECT_VALUE(k, v, PG_S32, "mad.hi.s32 %r10, %r3, %r3, %r3");
    v = pgv_mad_wide(k, PG_U32, r1, r2, a1);
    EXPECT_VALUE(k, v, PG_U64, "mad.wide.u32 %rd4, %r1, %r2, %rd1");
    v = pgv_fma(k, PG_F32, f1, f2, pg_f32(0.5f));
    EXPECT_VALUE(k, v, PG_F32, "fma.rn.f32 %f5, %f1, %f2, 0f3F000000");
    v = pgv_div(k, PG_F32, f1, f2);
    EXPECT_VALUE(k, v, PG_F32, "div.rn.f32 %f6, %f1, %f2");
    v = pgv_div(k, PG_U32, r1, r2);
    EXPECT_VALUE(k, v, PG_U32, "div.u32 %r11, %r1, %r2");
    v = pgv_rem(k, PG_S32, s1, pg_s32(3));
    EXPECT_VALUE(k, v, PG_S32, "rem.s32 %r12, %r3, 3");
    v = pgv_rcp(k, PG_F32, f1);
    EXPECT_VALUE(k, v, PG_F32, "rcp.rn.f32 %f7, %f1");
    v = pgv_rcp(k, PG_F64, g1);
    EXPECT_VALUE(k, v, PG_F64, "rcp.rn.f64 %fd2, %fd1");
    v = pgv_sqrt(k, PG_F32, f1);
    EXPECT_VALUE(k, v, PG_F32, "sqrt.rn.f32 %f8, %f1");
    v = pgv_rsqrt(k, PG_F32, f1);
    EXPECT_VALUE(k, v, PG_F32, "rsqrt.approx.f32 %f9, %f1");
    v = pgv_ex2(k, PG_F32, f1);
    EXPECT_VALUE(k, v, PG_F32, "ex2.approx.f32 %f10, %f1");
    v = pgv_lg2(k, PG_F32, f1);
    EXPECT_VALUE(k, v, PG_F32, "lg2.approx.f32 %f11, %f1");
    v = pgv_min(k, PG_S32, s1, pg_s32(0));
    EXPECT_VALUE(k, v, PG_S32, "min.s32 %r13, %r3, 0");
    v = pgv_max(k, PG_F32, f1, f2);
    EXPECT_VALUE(k, v, PG_F32, "max.f32 %f12, %f1, %f2");
    v = pgv_abs(k, PG_F32, f1);
    EXPECT_VALUE(k, v, PG_F32, "abs.f32 %f13, %f1");
    v = pgv_neg(k, PG_S32, s1);
    EXPECT_VALUE(k, v, PG_S32, "neg.s32 %r14, %r3");
    v = pgv_and(k, PG_B32, r1, pg_u32(31));
    EXPECT_VALUE(k, v, PG_B32, "and.b32 %r15, %r1, 31");
    v = pgv_or(k, PG_U32, r1, r2);
    EXPECT_VALUE(k, v, PG_U32, "or.b32 %r16, %r1, %r2");
    v = pgv_xor(k, PG_PRED, p1, p1);
    EXPECT_VALUE(k, v, PG_PRED, "xor.pred %p2, %p1, %p1");
    v = pgv_not(k, PG_U32, r1);
    EXPECT_VALUE(k, v, PG_U32, "not.b32 %r17, %r1");
    v = pgv_shl(k, PG_U32, r1, pg_u32(2));
    EXPECT_VALUE(k, v, PG_U32, "shl.b32 %r18, %r1, 2");
    v = pgv_shr(k, PG_S32, s1, pg_u32(5));
    EXPECT_VALUE(k, v, PG_S32, "shr.s32 %r19, %r3, 5");
    v = pgv_setp(k, PG_CMP_LT, PG_U32, r1, r2);
    EXPECT_VALUE(k, v, PG_PRED, "setp.lt.u32 %p3, %r1, %r2");
    v = pgv_selp(k, PG_F32, f1, pg_f32(0.0f), v);
    EXPECT_VALUE(k, v, PG_F32, "selp.f32 %f14, %f1, 0f00000000, %p3");
    v = pgv_cvt(k, PG_F32, PG_U32, PG_RND_RN, r1);
    EXPECT_VALUE(k, v, PG_F32, "cvt.rn.f32.u32 %f15, %r1");
    v = pgv_cvt(k, PG_F32, PG_F16, PG_RND_NONE, h1);
    EXPECT_VALUE(k, v, PG_F32, "cvt.f32.f16 %f16, %h1");
    v = pgv_cvt(k, PG_U8, PG_U32, PG_RND_NONE, r1);
    EXPECT_VALUE(k, v, PG_U16, "cvt.u8.u32 %rs1, %r1");
    v = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, a1, 8);
    EXPECT_VALUE(k, v, PG_F32, "ld.global.f32 %f17, [%rd1+8]");
    v = pgv_ld(k, PG_SPACE_GLOBAL, PG_S8, a1, 1);
    EXPECT_VALUE(k, v, PG_S16, "ld.global.s8 %rs2, [%rd1+1]");
    v = pgv_ld(k, PG_SPACE_SHARED, PG_F16, r1, 0);
    EXPECT_VALUE(k, v, PG_F16, "ld.shared.b16 %h2, [%r1]");
    v = pgv_ld_nc(k, PG_U32, a1, 4);
    EXPECT_VALUE(k, v, PG_U32, "ld.global.nc.u32 %r20, [%rd1+4]");
    REQUIRE_INT_EQ(pg_kernel_error(k), 0);
    pg_kernel_destroy(&k);
}

/* A bad type is reported against the operation, and no register escapes. */
static void value_errors(void)
{
    struct {
        const char *msg;
    } cases[] = {
        {"add has no .u8 form"},
        {"mul.wide has no .f32 form"},
        {"ex2.approx has no .f64 form"},
        {"ld: predicates cannot be loaded or stored"},
        {"cvt: invalid type or rounding"},
        {"setp: .b32 compares only eq/ne"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_kernel *k = mk("verr", PG_SM_90);
        if (!k)
            return;
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_reg a = pg_reg_new(k, PG_U64);
        pg_reg f = pg_reg_new(k, PG_F32);
        pg_reg v = pg_none();
        switch (i) {
        case 0: v = pgv_add(k, PG_U8, r, r); break;
        case 1: v = pgv_mul_wide(k, PG_F32, f, f); break;
        case 2: v = pgv_ex2(k, PG_F64, f); break;
        case 3: v = pgv_ld(k, PG_SPACE_GLOBAL, PG_PRED, a, 0); break;
        case 4: v = pgv_cvt(k, PG_PRED, PG_U32, PG_RND_NONE, r); break;
        case 5: v = pgv_setp(k, PG_CMP_LT, PG_B32, r, r); break;
        }
        REQUIRE(!pg_is_reg(v));
        REQUIRE(pg_kernel_error(k) != 0);
        REQUIRE_CONTAINS(pg_kernel_message(k), cases[i].msg);
        pg_kernel_destroy(&k);
    }
}

/* pgv_* and pg_reg_new + pg_* give the same bytes. */
static void same_bytes(void)
{
    pg_kernel *a = mk("same", PG_SM_80), *b = mk("same", PG_SM_80);
    if (!a || !b)
        return;
    pg_param pa = pg_param_add(a, PG_U64, "x"), pb = pg_param_add(b, PG_U64, "x");
    pg_reg xa = pg_param_load(a, pa), xb = pg_param_load(b, pb);

    pg_reg ta = pgv_ld(a, PG_SPACE_GLOBAL, PG_F32, xa, 0);
    pg_reg qa = pgv_add(a, PG_F32, ta, pg_f32(1.0f));
    pg_reg ra = pgv_rcp(a, PG_F32, qa);
    pg_reg pa2 = pgv_setp(a, PG_CMP_GE, PG_F32, ta, pg_f32(0.0f));
    pg_reg sa = pgv_selp(a, PG_F32, ra, qa, pa2);
    pg_st(a, PG_SPACE_GLOBAL, PG_F32, xa, 0, sa);

    pg_reg tb = pg_reg_new(b, PG_F32);
    pg_ld(b, PG_SPACE_GLOBAL, PG_F32, xb, 0, tb);
    pg_reg qb = pg_reg_new(b, PG_F32);
    pg_add(b, PG_F32, qb, tb, pg_f32(1.0f));
    pg_reg rb = pg_reg_new(b, PG_F32);
    pg_rcp(b, PG_F32, rb, qb);
    pg_reg pb2 = pg_reg_new(b, PG_PRED);
    pg_setp(b, PG_CMP_GE, PG_F32, pb2, tb, pg_f32(0.0f));
    pg_reg sb = pg_reg_new(b, PG_F32);
    pg_selp(b, PG_F32, sb, rb, qb, pb2);
    pg_st(b, PG_SPACE_GLOBAL, PG_F32, xb, 0, sb);

    const char *ta_ = NULL, *tb_ = NULL;
    REQUIRE_INT_EQ(emit(a, &ta_), 0);
    REQUIRE_INT_EQ(emit(b, &tb_), 0);
    REQUIRE_STR_EQ(ta_, tb_);
    pg_kernel_destroy(&a);
    pg_kernel_destroy(&b);
}

static void for_loop(void)
{
    pg_kernel *k = mk("loop", PG_SM_90);
    if (!k)
        return;
    pg_param pn = pg_param_add(k, PG_U32, "n");
    pg_reg n = pg_param_load(k, pn);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_loop L;
    pg_reg i = pg_for_begin(k, &L, tid, n, pg_u32(32));
    REQUIRE(pg_is_reg(i));
    REQUIRE_INT_EQ(pg_reg_type(k, i), PG_U32);
    pg_comment(k, "body");
    pg_for_end(k, &L);
    REQUIRE_STR_EQ(body(k),
                   "\tld.param.u32 %r1, [n];\n"
                   "\tmov.u32 %r2, %tid.x;\n"
                   "\tmov.u32 %r3, %r2;\n"
                   "\tsetp.ge.u32 %p1, %r3, %r1;\n"
                   "\t@%p1 bra $L2_for_done;\n"
                   "$L1_for_loop:\n"
                   "\t// body\n"
                   "\tsub.u32 %r4, %r1, %r3;\n"
                   "\tsetp.le.u32 %p1, %r4, 32;\n"
                   "\t@%p1 bra $L2_for_done;\n"
                   "\tadd.u32 %r3, %r3, 32;\n"
                   "\tbra.uni $L1_for_loop;\n"
                   "$L2_for_done:\n"
                   "\tret;\n"
                   "}\n");
    pg_kernel_destroy(&k);

    /* Immediates for all three, a register step. */
    k = mk("loop2", PG_SM_90);
    if (!k)
        return;
    pg_reg st = pgv_mov(k, PG_U32, pg_u32(3));
    i = pg_for_begin(k, &L, pg_u32(0), pg_u32(100), st);
    pg_for_end(k, &L);
    REQUIRE_STR_EQ(body(k),
                   "\tmov.u32 %r1, 3;\n"
                   "\tmov.u32 %r2, 0;\n"
                   "\tsetp.ge.u32 %p1, %r2, 100;\n"
                   "\t@%p1 bra $L2_for_done;\n"
                   "$L1_for_loop:\n"
                   "\tsub.u32 %r3, 100, %r2;\n"
                   "\tsetp.le.u32 %p1, %r3, %r1;\n"
                   "\t@%p1 bra $L2_for_done;\n"
                   "\tadd.u32 %r2, %r2, %r1;\n"
                   "\tbra.uni $L1_for_loop;\n"
                   "$L2_for_done:\n"
                   "\tret;\n"
                   "}\n");
    pg_kernel_destroy(&k);
}

/* The grid-stride loop is pg_for with start = gid, step = ntid * nctaid. */
static void grid_stride(void)
{
    pg_kernel *k = mk("gs", PG_SM_90);
    if (!k)
        return;
    pg_loop L;
    pg_reg i = pg_grid_stride_begin(k, &L, pg_u32(1000));
    REQUIRE(pg_is_reg(i));
    pg_grid_stride_end(k, &L);
    REQUIRE_STR_EQ(body(k),
                   "\tmov.u32 %r1, %tid.x;\n"
                   "\tmov.u32 %r2, %ntid.x;\n"
                   "\tmov.u32 %r3, %ctaid.x;\n"
                   "\tmad.lo.u32 %r4, %r3, %r2, %r1;\n"
                   "\tmov.u32 %r5, %ntid.x;\n"
                   "\tmov.u32 %r6, %nctaid.x;\n"
                   "\tmul.lo.u32 %r7, %r5, %r6;\n"
                   "\tsetp.ge.u32 %p1, %r4, 1000;\n"
                   "\t@%p1 bra $L2_stride_done;\n"
                   "$L1_stride_loop:\n"
                   "\tsub.u32 %r8, 1000, %r4;\n"
                   "\tsetp.le.u32 %p1, %r8, %r7;\n"
                   "\t@%p1 bra $L2_stride_done;\n"
                   "\tadd.u32 %r4, %r4, %r7;\n"
                   "\tbra.uni $L1_stride_loop;\n"
                   "$L2_stride_done:\n"
                   "\tret;\n"
                   "}\n");
    pg_kernel_destroy(&k);
}

static void loop_errors(void)
{
    pg_loop L;
    pg_kernel *k = mk("le", PG_SM_90);
    if (!k)
        return;
    pg_for_begin(k, &L, pg_u32(0), pg_u32(10), pg_u32(0));
    REQUIRE_CONTAINS(pg_kernel_message(k), "pg_for_begin: a step of 0 never ends");
    pg_kernel_destroy(&k);

    k = mk("le", PG_SM_90);
    pg_reg f = pg_reg_new(k, PG_F32);
    pg_for_begin(k, &L, pg_u32(0), f, pg_u32(1));
    REQUIRE_CONTAINS(pg_kernel_message(k), "pg_for_begin: n must be a 32-bit integer register");
    pg_kernel_destroy(&k);

    /* An end without a begin names the misuse. */
    k = mk("le", PG_SM_90);
    memset(&L, 0, sizeof L);
    pg_grid_stride_end(k, &L);
    REQUIRE_INT_EQ(pg_kernel_error(k), PG_ESTATE);
    REQUIRE_CONTAINS(pg_kernel_message(k), "pg_grid_stride_end: the loop is not open");
    REQUIRE_CONTAINS(pg_kernel_message(k), "pg_grid_stride_begin first");
    pg_kernel_destroy(&k);

    /* Ending a loop twice. */
    k = mk("le", PG_SM_90);
    pg_for_begin(k, &L, pg_u32(0), pg_u32(10), pg_u32(1));
    pg_for_end(k, &L);
    REQUIRE_INT_EQ(pg_kernel_error(k), 0);
    pg_for_end(k, &L);
    REQUIRE_CONTAINS(pg_kernel_message(k), "pg_for_end: the loop is not open");
    pg_kernel_destroy(&k);

    /* Nested loops close in order. */
    k = mk("nest", PG_SM_90);
    pg_loop O, I;
    pg_reg a = pg_for_begin(k, &O, pg_u32(0), pg_u32(4), pg_u32(1));
    pg_for_begin(k, &I, a, pg_u32(8), pg_u32(2));
    pg_for_end(k, &I);
    pg_for_end(k, &O);
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    pg_kernel_destroy(&k);
}

int main(void)
{
    value_forms();
    value_errors();
    same_bytes();
    for_loop();
    grid_stride();
    loop_errors();
    TEST_DONE();
}
