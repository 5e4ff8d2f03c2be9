/* SPDX-License-Identifier: MIT */
/* Every builder operation against the exact line it emits. */
#include "util.h"

/* Two halves into one register: the slow path's line (last_line), the
 * emitted module's (the cursor's), and the refusals. */
static void pack_forms(void)
{
    pg_kernel *k = mk("pack", PG_SM_80);
    REQUIRE(k != NULL);
    if (!k)
        return;
    pg_reg f1 = pg_reg_new(k, PG_F32), f2 = pg_reg_new(k, PG_F32);
    pg_reg h1 = pg_reg_new(k, PG_BF16), s1 = pg_reg_new(k, PG_U16);
    pg_reg r1 = pg_reg_new(k, PG_U32), d1 = pg_reg_new(k, PG_U64);
    pg_mov(k, PG_F32, f1, pg_f32(1.0f));
    pg_mov(k, PG_F32, f2, pg_f32(2.0f));
    pg_cvt(k, PG_BF16, PG_F32, PG_RND_RN, h1, f1);
    pg_mov(k, PG_U16, s1, pg_u32(3));
    pg_pack(k, PG_B32, r1, h1, s1);
    EXPECT_LINE(k, "mov.b32 %r1, {%h1, %rs1}");
    pg_reg w = pgv_pack(k, PG_B64, r1, pg_u32(5));
    EXPECT_LINE(k, "mov.b64 %rd2, {%r1, 5}");
    pg_cvt_pack(k, PG_BF16, r1, f1, f2);
    EXPECT_LINE(k, "cvt.rn.bf16x2.f32 %r1, %f2, %f1"); /* PTX writes the high half first */
    pg_reg c = pgv_cvt_pack(k, PG_F16, f1, pg_f32(0.5f));
    EXPECT_LINE(k, "cvt.rn.f16x2.f32 %r2, 0f3F000000, %f1");
    pg_mov(k, PG_B64, d1, w);
    pg_mov(k, PG_U32, r1, c);
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE(ptx && strstr(ptx, "\tmov.b32 %r1, {%h1, %rs1};\n"
                              "\tmov.b64 %rd2, {%r1, 5};\n"
                              "\tcvt.rn.bf16x2.f32 %r1, %f2, %f1;\n"
                              "\tcvt.rn.f16x2.f32 %r2, 0f3F000000, %f1;\n"));
    REQUIRE(ptx && strstr(ptx, ".version 7.0\n"));
    pg_kernel_destroy(&k);

    /* the refusals name the operation and the operand */
    static const struct { int form; pg_target t; const char *want; } bad[] = {
        {0, PG_SM_80, "pack_bad: mov (pack): the packed type is .b32 (two 16-bit halves) or .b64 "
                      "(two 32-bit halves), not .u16"},
        {1, PG_SM_80, "pack_bad: mov.b32: low half %f1 is .f32, not .b16"},
        {2, PG_SM_80, "pack_bad: cvt (pack): two f32 values pack as .bf16x2 or .f16x2, not .f32"},
        {3, PG_SM_75, "pack_bad: cvt.rn.bf16x2.f32 needs sm_80 or newer; the target is sm_75"},
        {4, PG_SM_80, "pack_bad: cvt.rn.bf16x2.f32: destination %rd1 is .u64, not .b32"},
        {5, PG_SM_80, "pack_bad: cvt.rn.bf16x2.f32: high half %r1 is .u32, not .f32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        k = mk("pack_bad", bad[i].t);
        REQUIRE(k != NULL);
        if (!k)
            return;
        pg_reg f = pg_reg_new(k, PG_F32), r = pg_reg_new(k, PG_U32), d = pg_reg_new(k, PG_U64);
        pg_reg h = pg_reg_new(k, PG_B16);
        switch (bad[i].form) {
        case 0: (void)pgv_pack(k, PG_U16, h, h); break;
        case 1: pg_pack(k, PG_B32, r, f, h); break;
        case 2: (void)pgv_cvt_pack(k, PG_F32, f, f); break;
        case 3: (void)pgv_cvt_pack(k, PG_BF16, f, f); break;
        case 4: pg_cvt_pack(k, PG_BF16, d, f, f); break;
        default: pg_cvt_pack(k, PG_BF16, r, f, r); break;
        }
        REQUIRE_INT_EQ(pg_kernel_error(k) != 0, 1);
        REQUIRE_STR_EQ(pg_kernel_message(k), bad[i].want);
        pg_kernel_destroy(&k);
    }
}

/* Operands whose class PTX fixes beyond the instruction type: a
 * membermask is a 32-bit integer, an mma.sync fragment and a two-half cvt's
 * destination a .b32 register of packed halves, an 8-bit vector's
 * registers of one width. ptxas refuses each refused form below; each
 * accepted one assembles (tests/ptxas: ptxas-matrix). */
static void operand_classes(void)
{
    static const struct { int form; pg_target t; const char *want; } bad[] = {
        {0, PG_SM_90, "cls: shfl.sync.bfly.b32: membermask %f1 is .f32, not a 32-bit integer "
                      "(.b32, .u32 or .s32)"},
        {1, PG_SM_90, "cls: vote.sync.ballot.b32: membermask %f1 is .f32, not a 32-bit integer "
                      "(.b32, .u32 or .s32)"},
        {2, PG_SM_90, "cls: vote.sync.any.pred: membermask %rd1 is .u64, not a 32-bit integer "
                      "(.b32, .u32 or .s32)"},
        {3, PG_SM_90, "cls: shfl.sync.idx.b32: membermask is a float immediate, not a 32-bit "
                      "integer (.b32, .u32 or .s32)"},
        {4, PG_SM_80, "cls: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: A fragment 0 %f1 "
                      "is .f32, not a .b32 register of two f16 (.b32, .u32 or .s32)"},
        {5, PG_SM_80, "cls: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: B fragment 1 "
                      "%f1 is .f32, not a .b32 register of two bf16 (.b32, .u32 or .s32)"},
        {6, PG_SM_80, "cls: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: A fragment 0 is "
                      "an immediate, not a .b32 register of two f16 (.b32, .u32 or .s32)"},
        {7, PG_SM_90, "cls: ld.global.v4.u8: element 1 %r1 is .u32 and element 0 %rs1 is .u16: "
                      "the registers of a vector are all of one width"},
        {8, PG_SM_90, "cls: st.shared.v2.s8: element 1 %rs1 is .u16 and element 0 %r1 is .u32: "
                      "the registers of a vector are all of one width"},
        {9, PG_SM_90, "cls: mov.b32: the destination must be a register"},
        {10, PG_SM_80, "cls: cvt.rn.bf16x2.f32: destination %f1 is .f32, not a .b32 register of "
                       "two bf16 (.b32, .u32 or .s32)"},
        {11, PG_SM_80, "cls: cvt.rn.f16x2.f32: the destination must be a register"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pg_kernel *k = mk("cls", bad[i].t);
        REQUIRE(k != NULL);
        if (!k)
            return;
        pg_reg f = pg_reg_new(k, PG_F32), r = pg_reg_new(k, PG_U32), rd = pg_reg_new(k, PG_U64);
        pg_reg h = pg_reg_new(k, PG_U16), p = pg_reg_new(k, PG_PRED);
        pg_reg ff[4] = {f, f, f, f}, rr[4] = {r, r, r, r}, v8[4] = {h, r, h, r};
        pg_val imm[4] = {pg_u32(1), pg_u32(1), pg_u32(1), pg_u32(1)};
        switch (bad[i].form) {
        case 0: pg_shfl(k, PG_SHFL_BFLY, r, pg_none(), r, pg_u32(1), pg_u32(31), f); break;
        case 1: pg_vote(k, PG_VOTE_BALLOT, r, p, false, f); break;
        case 2: pg_vote(k, PG_VOTE_ANY, p, p, true, rd); break;
        case 3: pg_shfl(k, PG_SHFL_IDX, r, pg_none(), r, pg_u32(1), pg_u32(31), pg_f32(1)); break;
        case 4: pg_mma_m16n8k16_f16_f32(k, ff, ff, rr, ff); break;
        case 5: {
            pg_reg b[2] = {r, f};
            pg_mma_m16n8k16_bf16_f32(k, ff, rr, b, ff);
            break;
        }
        case 6: pg_mma_m16n8k16_f16_f32(k, ff, imm, rr, ff); break;
        case 7: pg_ld_v(k, PG_SPACE_GLOBAL, PG_U8, 4, rd, 0, v8); break;
        case 8: {
            pg_val v[2] = {r, h};
            pg_st_v(k, PG_SPACE_SHARED, PG_S8, 2, r, 0, v);
            break;
        }
        case 9: pg_pack(k, PG_B32, pg_u32(3), h, h); break;
        case 10: pg_cvt_pack(k, PG_BF16, f, f, f); break;
        default: pg_cvt_pack(k, PG_F16, pg_u32(3), f, f); break;
        }
        REQUIRE_INT_EQ(pg_kernel_error(k) != 0, 1);
        REQUIRE_STR_EQ(pg_kernel_message(k), bad[i].want);
        pg_kernel_destroy(&k);
    }

    /* what stays accepted: any 32-bit integer register or an immediate as
     * the mask, u32/s32/b32 fragments, one width a vector */
    pg_kernel *k = mk("cls_ok", PG_SM_90);
    REQUIRE(k != NULL);
    if (!k)
        return;
    pg_param pp = pg_param_add(k, PG_U64, "p");
    pg_reg ptr = pg_param_load(k, pp);
    pg_reg u = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, ptr, 0);
    pg_reg sreg = pgv_ld(k, PG_SPACE_GLOBAL, PG_S32, ptr, 0);
    pg_reg b = pgv_ld(k, PG_SPACE_GLOBAL, PG_B32, ptr, 0);
    pg_reg f = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, ptr, 0);
    pg_reg p = pgv_setp(k, PG_CMP_EQ, PG_U32, u, pg_u32(0));
    pg_reg d = pg_reg_new(k, PG_F32);
    pg_shfl(k, PG_SHFL_BFLY, d, pg_none(), f, pg_u32(1), pg_u32(31), u);
    EXPECT_LINE(k, "shfl.sync.bfly.b32 %f2, %f1, 1, 31, %r1");
    pg_shfl(k, PG_SHFL_DOWN, d, pg_none(), f, pg_u32(1), pg_u32(31), sreg);
    pg_shfl(k, PG_SHFL_UP, d, pg_none(), f, pg_u32(1), pg_u32(31), pg_s32(-1));
    EXPECT_LINE(k, "shfl.sync.up.b32 %f2, %f1, 1, 31, 4294967295");
    pg_reg bal = pg_reg_new(k, PG_U32);
    pg_vote(k, PG_VOTE_BALLOT, bal, p, false, b);
    EXPECT_LINE(k, "vote.sync.ballot.b32 %r4, %p1, %r3");
    pg_reg acc[4] = {d, d, d, d}, fa[4] = {u, sreg, b, u}, fb[2] = {sreg, b};
    pg_mma_m16n8k16_bf16_f32(k, acc, fa, fb, acc);
    EXPECT_LINE(k, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f2, %f2, %f2, %f2}, "
                   "{%r1, %r2, %r3, %r1}, {%r2, %r3}, {%f2, %f2, %f2, %f2}");
    pg_reg w[4] = {u, sreg, b, bal};
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_U8, 4, ptr, 0, w);
    EXPECT_LINE(k, "ld.global.v4.u8 {%r1, %r2, %r3, %r4}, [%rd1]");
    pg_val sv[2] = {pg_u32(7), u};
    pg_st_v(k, PG_SPACE_GLOBAL, PG_S8, 2, ptr, 2, sv);
    EXPECT_LINE(k, "st.global.v2.s8 [%rd1+2], {7, %r1}");
    pg_cvt_pack(k, PG_F16, sreg, f, d);
    EXPECT_LINE(k, "cvt.rn.f16x2.f32 %r2, %f2, %f1");
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, ptr, 0, bal);
    pg_st_v(k, PG_SPACE_GLOBAL, PG_U8, 4, ptr, 4, w);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, ptr, 8, d);
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    pg_kernel_destroy(&k);
}

int main(void)
{
    pack_forms();
    operand_classes();
    pg_kernel *k = mk("ops", PG_SM_90);
    REQUIRE(k != NULL);
    if (!k)
        TEST_DONE();
    pg_reg p1 = pg_reg_new(k, PG_PRED), p2 = pg_reg_new(k, PG_PRED);
    pg_reg r1 = pg_reg_new(k, PG_U32), r2 = pg_reg_new(k, PG_U32), r3 = pg_reg_new(k, PG_S32);
    pg_reg d1 = pg_reg_new(k, PG_U64), d2 = pg_reg_new(k, PG_S64);
    pg_reg f1 = pg_reg_new(k, PG_F32), f2 = pg_reg_new(k, PG_F32), f3 = pg_reg_new(k, PG_F32);
    pg_reg g1 = pg_reg_new(k, PG_F64), g2 = pg_reg_new(k, PG_F64);
    pg_reg h1 = pg_reg_new(k, PG_F16), h2 = pg_reg_new(k, PG_BF16);
    pg_reg s1 = pg_reg_new(k, PG_U16);

    /* register naming: one prefix and counter a class */
    EXPECT_LINE(k, "<error 0: >");
    pg_mov(k, PG_U32, r1, pg_u32(7));
    EXPECT_LINE(k, "mov.u32 %r1, 7");
    pg_mov(k, PG_F32, f1, pg_f32(1.0f));
    EXPECT_LINE(k, "mov.f32 %f1, 0f3F800000");
    pg_mov(k, PG_F32, f1, pg_f32(-0.0f));
    EXPECT_LINE(k, "mov.f32 %f1, 0f80000000");
    pg_mov(k, PG_F32, f1, pg_f32(1e-7f));
    EXPECT_LINE(k, "mov.f32 %f1, 0f33D6BF95");
    pg_mov(k, PG_F64, g1, pg_f64(0.1));
    EXPECT_LINE(k, "mov.f64 %fd1, 0d3FB999999999999A");
    pg_mov(k, PG_S32, r3, pg_s32(-5));
    EXPECT_LINE(k, "mov.s32 %r3, -5");
    pg_mov(k, PG_U64, d1, pg_u64(UINT64_MAX));
    EXPECT_LINE(k, "mov.u64 %rd1, 18446744073709551615");
    pg_mov(k, PG_PRED, p1, p2);
    EXPECT_LINE(k, "mov.pred %p1, %p2");
    pg_mov(k, PG_F16, h1, h1);
    EXPECT_LINE(k, "mov.b16 %h1, %h1");
    pg_mov(k, PG_U16, s1, pg_u32(3));
    EXPECT_LINE(k, "mov.u16 %rs1, 3");

    pg_add(k, PG_U32, r1, r1, r2);
    EXPECT_LINE(k, "add.u32 %r1, %r1, %r2");
    pg_add(k, PG_F32, f3, f1, f2);
    EXPECT_LINE(k, "add.rn.f32 %f3, %f1, %f2");
    pg_add(k, PG_F64, g1, g1, g2);
    EXPECT_LINE(k, "add.rn.f64 %fd1, %fd1, %fd2");
    pg_add(k, PG_F16, h1, h1, h1);
    EXPECT_LINE(k, "add.rn.f16 %h1, %h1, %h1");
    pg_add(k, PG_BF16, h2, h2, h2);
    EXPECT_LINE(k, "add.rn.bf16 %h2, %h2, %h2");
    pg_sub(k, PG_S32, r3, r3, pg_s32(-1));
    EXPECT_LINE(k, "sub.s32 %r3, %r3, -1");
    pg_sub(k, PG_F32, f1, f1, f2);
    EXPECT_LINE(k, "sub.rn.f32 %f1, %f1, %f2");
    pg_mul(k, PG_U32, r1, r1, pg_u32(4));
    EXPECT_LINE(k, "mul.lo.u32 %r1, %r1, 4");
    pg_mul(k, PG_F32, f1, f1, f2);
    EXPECT_LINE(k, "mul.rn.f32 %f1, %f1, %f2");
    pg_mul_hi(k, PG_U32, r1, r1, r2);
    EXPECT_LINE(k, "mul.hi.u32 %r1, %r1, %r2");
    pg_mul_wide(k, PG_U32, d1, r1, pg_u32(4));
    EXPECT_LINE(k, "mul.wide.u32 %rd1, %r1, 4");
    pg_mul_wide(k, PG_S32, d2, r3, r3);
    EXPECT_LINE(k, "mul.wide.s32 %rd2, %r3, %r3");
    pg_mad(k, PG_U32, r1, r1, r2, pg_u32(1));
    EXPECT_LINE(k, "mad.lo.u32 %r1, %r1, %r2, 1");
    pg_mad_hi(k, PG_S32, r3, r3, r3, r3);
    EXPECT_LINE(k, "mad.hi.s32 %r3, %r3, %r3, %r3");
    pg_mad_wide(k, PG_U32, d1, r1, r2, d1);
    EXPECT_LINE(k, "mad.wide.u32 %rd1, %r1, %r2, %rd1");
    pg_fma(k, PG_F32, f1, f1, f2, f3);
    EXPECT_LINE(k, "fma.rn.f32 %f1, %f1, %f2, %f3");
    pg_fma(k, PG_F64, g1, g1, g2, pg_f64(1.0));
    EXPECT_LINE(k, "fma.rn.f64 %fd1, %fd1, %fd2, 0d3FF0000000000000");
    pg_div(k, PG_F32, f1, f1, f2);
    EXPECT_LINE(k, "div.rn.f32 %f1, %f1, %f2");
    pg_div(k, PG_U32, r1, r1, r2);
    EXPECT_LINE(k, "div.u32 %r1, %r1, %r2");
    pg_rem(k, PG_S32, r3, r3, pg_s32(3));
    EXPECT_LINE(k, "rem.s32 %r3, %r3, 3");
    pg_rcp(k, PG_F32, f1, f2);
    EXPECT_LINE(k, "rcp.rn.f32 %f1, %f2");
    pg_sqrt(k, PG_F64, g1, g2);
    EXPECT_LINE(k, "sqrt.rn.f64 %fd1, %fd2");
    pg_rsqrt(k, PG_F32, f1, f2);
    EXPECT_LINE(k, "rsqrt.approx.f32 %f1, %f2");
    pg_ex2(k, PG_F32, f1, f2);
    EXPECT_LINE(k, "ex2.approx.f32 %f1, %f2");
    pg_lg2(k, PG_F32, f1, f2);
    EXPECT_LINE(k, "lg2.approx.f32 %f1, %f2");
    pg_min(k, PG_F32, f1, f1, pg_f32(1.0f));
    EXPECT_LINE(k, "min.f32 %f1, %f1, 0f3F800000");
    pg_max(k, PG_S32, r3, r3, pg_s32(0));
    EXPECT_LINE(k, "max.s32 %r3, %r3, 0");
    pg_abs(k, PG_F32, f1, f1);
    EXPECT_LINE(k, "abs.f32 %f1, %f1");
    pg_neg(k, PG_S32, r3, r3);
    EXPECT_LINE(k, "neg.s32 %r3, %r3");
    pg_and(k, PG_U32, r1, r1, pg_u32(31));
    EXPECT_LINE(k, "and.b32 %r1, %r1, 31");
    pg_or(k, PG_PRED, p1, p1, p2);
    EXPECT_LINE(k, "or.pred %p1, %p1, %p2");
    pg_xor(k, PG_B64, d1, d1, d1);
    EXPECT_LINE(k, "xor.b64 %rd1, %rd1, %rd1");
    pg_not(k, PG_PRED, p1, p2);
    EXPECT_LINE(k, "not.pred %p1, %p2");
    pg_shl(k, PG_U32, r1, r1, pg_u32(2));
    EXPECT_LINE(k, "shl.b32 %r1, %r1, 2");
    pg_shr(k, PG_U32, r1, r1, pg_u32(5));
    EXPECT_LINE(k, "shr.u32 %r1, %r1, 5");
    pg_shr(k, PG_S32, r3, r3, r1);
    EXPECT_LINE(k, "shr.s32 %r3, %r3, %r1");
    pg_shr(k, PG_B64, d1, d1, pg_u32(1));
    EXPECT_LINE(k, "shr.b64 %rd1, %rd1, 1");

    /* comparisons */
    static const char *const cmp[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    for (int c = PG_CMP_EQ; c <= PG_CMP_GE; c++) {
        char want[64];
        pg_setp(k, (pg_cmp)c, PG_S32, p1, r3, pg_s32(0));
        snprintf(want, sizeof want, "setp.%s.s32 %%p1, %%r3, 0", cmp[c]);
        EXPECT_LINE(k, want);
    }
    static const char *const ucmp[] = {"lo", "ls", "hi", "hs"};
    for (int c = PG_CMP_LO; c <= PG_CMP_HS; c++) {
        char want[64];
        pg_setp(k, (pg_cmp)c, PG_U32, p1, r1, r2);
        snprintf(want, sizeof want, "setp.%s.u32 %%p1, %%r1, %%r2", ucmp[c - PG_CMP_LO]);
        EXPECT_LINE(k, want);
    }
    static const char *const fcmp[] = {"equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"};
    for (int c = PG_CMP_EQU; c <= PG_CMP_NAN; c++) {
        char want[64];
        pg_setp(k, (pg_cmp)c, PG_F32, p2, f1, f2);
        snprintf(want, sizeof want, "setp.%s.f32 %%p2, %%f1, %%f2", fcmp[c - PG_CMP_EQU]);
        EXPECT_LINE(k, want);
    }
    pg_selp(k, PG_F32, f1, f2, pg_f32(0.5f), p1);
    EXPECT_LINE(k, "selp.f32 %f1, %f2, 0f3F000000, %p1");

    /* conversions with explicit rounding */
    pg_cvt(k, PG_F32, PG_U32, PG_RND_RN, f1, r1);
    EXPECT_LINE(k, "cvt.rn.f32.u32 %f1, %r1");
    pg_cvt(k, PG_S32, PG_F32, PG_RND_RZI, r3, f1);
    EXPECT_LINE(k, "cvt.rzi.s32.f32 %r3, %f1");
    pg_cvt(k, PG_F64, PG_F32, PG_RND_NONE, g1, f1);
    EXPECT_LINE(k, "cvt.f64.f32 %fd1, %f1");
    pg_cvt(k, PG_F32, PG_F64, PG_RND_RN, f1, g1);
    EXPECT_LINE(k, "cvt.rn.f32.f64 %f1, %fd1");
    pg_cvt(k, PG_F32, PG_F32, PG_RND_RMI, f1, f1);
    EXPECT_LINE(k, "cvt.rmi.f32.f32 %f1, %f1");
    pg_cvt(k, PG_U64, PG_U32, PG_RND_NONE, d1, r1);
    EXPECT_LINE(k, "cvt.u64.u32 %rd1, %r1");
    pg_cvt(k, PG_F16, PG_F32, PG_RND_RN, h1, f1);
    EXPECT_LINE(k, "cvt.rn.f16.f32 %h1, %f1");
    pg_cvt(k, PG_F32, PG_F16, PG_RND_NONE, f1, h1);
    EXPECT_LINE(k, "cvt.f32.f16 %f1, %h1");
    pg_cvt(k, PG_BF16, PG_F32, PG_RND_RN, h2, f1);
    EXPECT_LINE(k, "cvt.rn.bf16.f32 %h2, %f1");
    pg_cvt(k, PG_U8, PG_U32, PG_RND_NONE, s1, r1);
    EXPECT_LINE(k, "cvt.u8.u32 %rs1, %r1");

    /* memory */
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, d1, 0, f1);
    EXPECT_LINE(k, "ld.global.f32 %f1, [%rd1]");
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, d1, 16, f1);
    EXPECT_LINE(k, "ld.global.f32 %f1, [%rd1+16]");
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, d1, -4, f1);
    EXPECT_LINE(k, "ld.global.f32 %f1, [%rd1+-4]");
    pg_ld_nc(k, PG_F32, d1, 8, f2);
    EXPECT_LINE(k, "ld.global.nc.f32 %f2, [%rd1+8]");
    pg_ld(k, PG_SPACE_GLOBAL, PG_U8, d1, 3, r1);
    EXPECT_LINE(k, "ld.global.u8 %r1, [%rd1+3]");
    pg_ld(k, PG_SPACE_GLOBAL, PG_F16, d1, 2, h1);
    EXPECT_LINE(k, "ld.global.b16 %h1, [%rd1+2]");
    pg_reg v4[4] = {f1, f2, f3, f1};
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, d1, 32, v4);
    EXPECT_LINE(k, "ld.global.v4.f32 {%f1, %f2, %f3, %f1}, [%rd1+32]");
    pg_val sv[2] = {f1, pg_f32(2.0f)};
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, d1, 8, sv);
    EXPECT_LINE(k, "st.global.v2.f32 [%rd1+8], {%f1, 0f40000000}");
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, d1, 0, r1);
    EXPECT_LINE(k, "st.global.u32 [%rd1], %r1");
    pg_shared sm = pg_shared_static(k, PG_F32, 64, 16, "tile");
    pg_shared dyn = pg_shared_dynamic(k, 16);
    pg_ld(k, PG_SPACE_SHARED, PG_F32, pg_shared_addr(sm), 12, f1);
    EXPECT_LINE(k, "ld.shared.f32 %f1, [ops_tile1+12]");
    pg_st(k, PG_SPACE_SHARED, PG_F32, r1, 0, f1);
    EXPECT_LINE(k, "st.shared.f32 [%r1], %f1");
    pg_mov(k, PG_U32, r2, pg_shared_addr(dyn));
    EXPECT_LINE(k, "mov.u32 %r2, ops_dsmem2");
    REQUIRE_INT_EQ(pg_kernel_static_shared_bytes(k), 256);

    /* atomics */
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_F32, f1, d1, 0, f2, pg_none());
    EXPECT_LINE(k, "atom.global.add.f32 %f1, [%rd1], %f2");
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_U32, pg_none(), d1, 4, pg_u32(1), pg_none());
    EXPECT_LINE(k, "red.global.add.u32 [%rd1+4], 1");
    pg_atom(k, PG_SPACE_SHARED, PG_ATOM_CAS, PG_U32, r1, r2, 0, r1, pg_u32(0));
    EXPECT_LINE(k, "atom.shared.cas.b32 %r1, [%r2], %r1, 0");
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_EXCH, PG_U64, d1, d1, 0, d1, pg_none());
    EXPECT_LINE(k, "atom.global.exch.b64 %rd1, [%rd1], %rd1");
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_MIN, PG_S32, r3, d1, 0, r3, pg_none());
    EXPECT_LINE(k, "atom.global.min.s32 %r3, [%rd1], %r3");
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_MAX, PG_U32, r1, d1, 0, r1, pg_none());
    EXPECT_LINE(k, "atom.global.max.u32 %r1, [%rd1], %r1");

    /* warp */
    pg_shfl(k, PG_SHFL_DOWN, f1, pg_none(), f2, pg_u32(16), pg_u32(31), pg_u32(0xffffffffu));
    EXPECT_LINE(k, "shfl.sync.down.b32 %f1, %f2, 16, 31, 4294967295");
    pg_shfl(k, PG_SHFL_UP, r1, p1, r2, pg_u32(1), pg_u32(0), pg_u32(0xffffffffu));
    EXPECT_LINE(k, "shfl.sync.up.b32 %r1|%p1, %r2, 1, 0, 4294967295");
    pg_shfl(k, PG_SHFL_BFLY, r1, pg_none(), r1, pg_u32(8), pg_u32(31), r2);
    EXPECT_LINE(k, "shfl.sync.bfly.b32 %r1, %r1, 8, 31, %r2");
    pg_shfl(k, PG_SHFL_IDX, r1, pg_none(), r1, r2, pg_u32(31), pg_u32(0xffffffffu));
    EXPECT_LINE(k, "shfl.sync.idx.b32 %r1, %r1, %r2, 31, 4294967295");
    pg_vote(k, PG_VOTE_ALL, p1, p2, false, pg_u32(0xffffffffu));
    EXPECT_LINE(k, "vote.sync.all.pred %p1, %p2, 4294967295");
    pg_vote(k, PG_VOTE_ANY, p1, p2, true, pg_u32(0xffffffffu));
    EXPECT_LINE(k, "vote.sync.any.pred %p1, !%p2, 4294967295");
    pg_vote(k, PG_VOTE_UNI, p1, p2, false, r1);
    EXPECT_LINE(k, "vote.sync.uni.pred %p1, %p2, %r1");
    pg_vote(k, PG_VOTE_BALLOT, r1, p2, false, pg_u32(0xffffffffu));
    EXPECT_LINE(k, "vote.sync.ballot.b32 %r1, %p2, 4294967295");

    /* special registers */
    static const char *const sregs[] = {
        "%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x",
        "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid"};
    for (int s = 0; s < PG_SREG_COUNT; s++) {
        pg_reg r = pg_sreg_read(k, (pg_sreg)s);
        char want[64], name[16];
        pg_val_format(k, r, PG_U32, name, sizeof name);
        snprintf(want, sizeof want, "mov.u32 %s, %s", name, sregs[s]);
        EXPECT_LINE(k, want);
    }

    /* control */
    pg_bar_sync(k, 0);
    EXPECT_LINE(k, "bar.sync 0");
    pg_bar_sync(k, 3);
    EXPECT_LINE(k, "bar.sync 3");
    pg_bar_warp_sync(k, 0xffffffffu);
    EXPECT_LINE(k, "bar.warp.sync 4294967295");
    pg_membar(k, PG_SCOPE_CTA);
    EXPECT_LINE(k, "membar.cta");
    pg_membar(k, PG_SCOPE_GPU);
    EXPECT_LINE(k, "membar.gl");
    pg_membar(k, PG_SCOPE_SYS);
    EXPECT_LINE(k, "membar.sys");
    pg_fence(k, PG_SCOPE_GPU, false);
    EXPECT_LINE(k, "fence.acq_rel.gpu");
    pg_fence(k, PG_SCOPE_CTA, true);
    EXPECT_LINE(k, "fence.sc.cta");
    pg_comment(k, "hello");
    EXPECT_LINE(k, "// hello");
    pg_label l = pg_label_new(k, "top");
    pg_label_bind(k, l);
    EXPECT_LINE(k, "$L1_top:");
    pg_bra(k, l);
    EXPECT_LINE(k, "bra.uni $L1_top");
    pg_bra_if(k, p1, true, l);
    EXPECT_LINE(k, "@!%p1 bra $L1_top");
    pg_guard(k, p2, false);
    pg_add(k, PG_U32, r1, r1, pg_u32(1));
    EXPECT_LINE(k, "@%p2 add.u32 %r1, %r1, 1");
    pg_exit(k);
    EXPECT_LINE(k, "exit");
    pg_ret(k);
    EXPECT_LINE(k, "ret");
    REQUIRE_INT_EQ(pg_kernel_error(k), 0);
    pg_kernel_destroy(&k);
    REQUIRE(k == NULL);

    /* tensor cores on sm_80 */
    k = mk("mma", PG_SM_80);
    pg_reg d[4], a[4], b[2], c[4];
    for (int i = 0; i < 4; i++) {
        d[i] = pg_reg_new(k, PG_F32);
        c[i] = pg_reg_new(k, PG_F32);
        a[i] = pg_reg_new(k, PG_B32);
    }
    b[0] = pg_reg_new(k, PG_B32);
    b[1] = pg_reg_new(k, PG_B32);
    pg_mma_m16n8k16_f16_f32(k, d, a, b, c);
    EXPECT_LINE(k, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f3, %f5, %f7}, "
                   "{%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f2, %f4, %f6, %f8}");
    REQUIRE_INT_EQ(pg_kernel_isa(k), 70);
    pg_mma_m16n8k16_f32(k, PG_BF16, d, a, b, c);
    EXPECT_LINE(k, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f3, %f5, %f7}, "
                   "{%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f2, %f4, %f6, %f8}");
    pg_mma_m16n8k16_f32(k, PG_F16, d, a, b, c);
    EXPECT_LINE(k, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f3, %f5, %f7}, "
                   "{%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f2, %f4, %f6, %f8}");
    REQUIRE_INT_EQ(pg_kernel_isa(k), 70);

    /* tensor-core fragment loads and asynchronous copies */
    pg_reg g = pg_reg_new(k, PG_U64), sa = pg_reg_new(k, PG_U32);
    pg_shared tile = pg_shared_static(k, PG_B32, 256, 16, "tile");
    pg_ldmatrix(k, 4, false, a, sa, 0);
    EXPECT_LINE(k, "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r7]");
    pg_ldmatrix(k, 2, true, b, pg_shared_addr(tile), 32);
    EXPECT_LINE(k, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r5, %r6}, [mma_tile1+32]");
    pg_ldmatrix(k, 1, false, a, sa, 16);
    EXPECT_LINE(k, "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%r7+16]");
    pg_cp_async(k, sa, 16, g, 32, 16, pg_none());
    EXPECT_LINE(k, "cp.async.cg.shared.global [%r7+16], [%rd1+32], 16");
    pg_cp_async(k, pg_shared_addr(tile), 0, g, 0, 4, pg_u32(2));
    EXPECT_LINE(k, "cp.async.ca.shared.global [mma_tile1], [%rd1], 4, 2");
    pg_cp_async(k, sa, 0, g, 0, 8, a[0]);
    EXPECT_LINE(k, "cp.async.ca.shared.global [%r7], [%rd1], 8, %r1");
    pg_cp_async_commit(k);
    EXPECT_LINE(k, "cp.async.commit_group");
    pg_cp_async_wait(k, 1);
    EXPECT_LINE(k, "cp.async.wait_group 1");
    REQUIRE_INT_EQ(pg_kernel_error(k), 0);
    pg_kernel_destroy(&k);

    /* a whole small kernel, byte for byte */
    k = mk("axpy", PG_SM_80);
    pg_param px = pg_param_add(k, PG_U64, "x");
    pg_param pa = pg_param_add(k, PG_F32, "alpha");
    pg_param pn = pg_param_add(k, PG_U32, "n");
    pg_kernel_set_maxntid(k, 256, 1, 1);
    pg_reg x = pg_param_load(k, px);
    pg_reg alpha = pg_param_load(k, pa);
    pg_reg n = pg_param_load(k, pn);
    pg_label out = pg_label_new(k, "exit");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, out);
    pg_reg off = pg_reg_new(k, PG_U64);
    pg_mul_wide(k, PG_U32, off, i, pg_u32(4));
    pg_reg addr = pg_reg_new(k, PG_U64);
    pg_add(k, PG_U64, addr, x, off);
    pg_reg v = pg_reg_new(k, PG_F32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, v);
    pg_mul(k, PG_F32, v, v, alpha);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr, 0, v);
    pg_label_bind(k, out);
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE_STR_EQ(ptx,
        "//\n// Generated by ptxgen. Do not edit.\n//\n\n"
        ".version 7.0\n.target sm_80\n.address_size 64\n\n"
        ".visible .entry axpy(\n\t.param .u64 x,\n\t.param .f32 alpha,\n\t.param .u32 n\n)\n"
        ".maxntid 256, 1, 1\n{\n"
        "\t.reg .pred %p<2>;\n\t.reg .b32 %r<6>;\n\t.reg .f32 %f<3>;\n\t.reg .b64 %rd<4>;\n\n"
        "\tld.param.u64 %rd1, [x];\n\tld.param.f32 %f1, [alpha];\n\tld.param.u32 %r1, [n];\n"
        "\tmov.u32 %r2, %tid.x;\n\tmov.u32 %r3, %ntid.x;\n\tmov.u32 %r4, %ctaid.x;\n"
        "\tmad.lo.u32 %r5, %r4, %r3, %r2;\n\tsetp.ge.u32 %p1, %r5, %r1;\n\t@%p1 bra $L1_exit;\n"
        "\tmul.wide.u32 %rd2, %r5, 4;\n\tadd.u64 %rd3, %rd1, %rd2;\n"
        "\tld.global.f32 %f2, [%rd3];\n\tmul.rn.f32 %f2, %f2, %f1;\n\tst.global.f32 [%rd3], %f2;\n"
        "$L1_exit:\n\tret;\n}\n");
    /* emitting again gives the same pointer and bytes */
    const char *again = NULL;
    REQUIRE_INT_EQ(emit(k, &again), 0);
    REQUIRE(again == ptx);
    pg_kernel_destroy(&k);
    TEST_DONE();
}
