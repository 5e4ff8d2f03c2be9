/* SPDX-License-Identifier: MIT */
/* Misuse of the builder: every case gives a code and a message naming the
 * problem, the error is sticky, and nothing can be emitted after it. */
#include "util.h"

/* Run `body` on a fresh kernel for target t; expect error `code` and a
 * message containing `needle`. */
#define EXPECT_ERR(t, code, needle, ...)                                      \
    do {                                                                       \
        pg_kernel *k = mk("bad", t);                                           \
        pg_reg P = pg_reg_new(k, PG_PRED), R = pg_reg_new(k, PG_U32);          \
        pg_reg F = pg_reg_new(k, PG_F32), D = pg_reg_new(k, PG_U64);           \
        pg_reg G = pg_reg_new(k, PG_F64), H = pg_reg_new(k, PG_F16);           \
        (void)P, (void)R, (void)F, (void)D, (void)G, (void)H;                  \
        __VA_ARGS__;                                                           \
        const char *ptx_ = (const char *)1;                                    \
        int rc_ = pg_kernel_emit(k, &ptx_, NULL);                              \
        REQUIRE_INT_EQ(rc_, code);                                             \
        REQUIRE(ptx_ == NULL);                                                 \
        REQUIRE_CONTAINS(pg_kernel_message(k), needle);                        \
        pg_kernel_destroy(&k);                                                 \
    } while (0)

int main(void)
{
    /* creation */
    pg_kernel *k0 = NULL;
    REQUIRE_INT_EQ(pg_kernel_create(NULL, "a", PG_SM_90), PG_EINVAL);
    REQUIRE_INT_EQ(pg_kernel_create(&k0, NULL, PG_SM_90), PG_EINVAL);
    REQUIRE_INT_EQ(pg_kernel_create(&k0, "1abc", PG_SM_90), PG_EINVAL);
    REQUIRE_INT_EQ(pg_kernel_create(&k0, "a-b", PG_SM_90), PG_EINVAL);
    REQUIRE_INT_EQ(pg_kernel_create(&k0, "ok", PG_TARGET_COUNT), PG_EINVAL);
    REQUIRE(k0 == NULL);
    pg_kernel_destroy(NULL);
    pg_kernel_destroy(&k0);
    REQUIRE_INT_EQ(pg_kernel_emit(NULL, NULL, NULL), PG_EINVAL);

    /* operand types */
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "add.f32: operand b %r1 is .u32", pg_add(k, PG_F32, F, F, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "destination %f1 is .f32", pg_add(k, PG_U32, F, R, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "integer immediate", pg_add(k, PG_F32, F, F, pg_u32(1)));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "does not fit .u16",
               pg_mov(k, PG_U16, pg_reg_new(k, PG_U16), pg_u32(70000)));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "mov.f64: operand a is an f32 immediate; use pg_f64()", pg_mov(k, PG_F64, G, pg_f32(1.0f)));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "has no .b32 form", pg_add(k, PG_B32, R, R, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "fma.rn has no .u32 form", pg_fma(k, PG_U32, R, R, R, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "not a register type", pg_reg_new(k, PG_U8));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "a 64-bit integer register",
               pg_ld(k, PG_SPACE_GLOBAL, PG_F32, R, 0, F));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "shared symbol addresses only shared",
               pg_ld(k, PG_SPACE_GLOBAL, PG_F32,
                     pg_shared_addr(pg_shared_static(k, PG_F32, 4, 4, "s")), 0, F));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "offset 2 is not a multiple",
               pg_ld(k, PG_SPACE_GLOBAL, PG_F32, D, 2, F));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "at most 128 bits",
               pg_ld_v(k, PG_SPACE_GLOBAL, PG_F64, 4, D, 0, &G));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "params load with pg_param_load",
               pg_ld(k, PG_SPACE_PARAM, PG_F32, D, 0, F));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "lo/ls/hi/hs are unsigned",
               pg_setp(k, PG_CMP_LO, PG_F32, P, F, F));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "NaN-aware comparisons are for floats",
               pg_setp(k, PG_CMP_NAN, PG_U32, P, R, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "selector must be a predicate",
               pg_selp(k, PG_U32, R, R, R, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "guard must be a predicate", pg_guard(k, R, false));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "atom.add has no .u16 form",
               pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_U16, pg_none(), D, 0, pg_u32(1),
                       pg_none()));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "atom.cas needs a destination",
               pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_CAS, PG_U32, pg_none(), D, 0, R, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "shfl.sync.b32: value %rd1 is .u64",
               pg_shfl(k, PG_SHFL_BFLY, R, pg_none(), D, pg_u32(1), pg_u32(31), pg_u32(0)));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "not a register of this kernel",
               pg_add(k, PG_U32, R, R, ((pg_val){PG_VAL_REG, 999, 0})));

    /* explicit rounding in cvt */
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "cvt.s32.f32 needs an integer rounding",
               pg_cvt(k, PG_S32, PG_F32, PG_RND_NONE, R, F));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "cvt.f32.u32 needs a float rounding",
               pg_cvt(k, PG_F32, PG_U32, PG_RND_RZI, F, R));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "cvt.f32.f64 needs a float rounding",
               pg_cvt(k, PG_F32, PG_F64, PG_RND_NONE, F, G));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "widening is exact",
               pg_cvt(k, PG_F64, PG_F32, PG_RND_RN, G, F));
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "integer to integer",
               pg_cvt(k, PG_U64, PG_U32, PG_RND_RN, D, R));

    /* the target */
    EXPECT_ERR(PG_SM_75, PG_ETARGET, "needs sm_80 or newer; the target is sm_75",
               pg_mma_m16n8k16_f16_f32(k, &F, &R, &R, &F));
    EXPECT_ERR(PG_SM_75, PG_ETARGET, "needs sm_80 or newer; the target is sm_75",
               pg_mma_m16n8k16_f32(k, PG_BF16, &F, &R, &R, &F));
    EXPECT_ERR(PG_SM_80, PG_ETYPE, "mma: inputs of type f32 (f16 or bf16)",
               pg_mma_m16n8k16_f32(k, PG_F32, &F, &R, &R, &F));
    EXPECT_ERR(PG_SM_80, PG_ETARGET, "bf16 add/sub/mul needs sm_90",
               pg_add(k, PG_BF16, pg_reg_new(k, PG_BF16), H, H));
    EXPECT_ERR(PG_SM_75, PG_ETARGET, "cvt to bf16 needs sm_80",
               pg_cvt(k, PG_BF16, PG_F32, PG_RND_RN, pg_reg_new(k, PG_BF16), F));

    EXPECT_ERR(PG_SM_75, PG_ETARGET, "cp.async needs sm_80 or newer",
               pg_cp_async(k, pg_shared_addr(pg_shared_static(k, PG_F32, 4, 16, "s")), 0, D, 0,
                           16, pg_none()));
    EXPECT_ERR(PG_SM_70, PG_ETARGET, "ldmatrix.sync.aligned.m8n8 needs sm_75",
               pg_ldmatrix(k, 1, false, &R, pg_shared_addr(pg_shared_static(k, PG_F32, 4, 16, "s")),
                           0));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "ldmatrix: .x3", pg_ldmatrix(k, 3, false, &R, R, 0));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "cp.async: 12 bytes", pg_cp_async(k, R, 0, D, 0, 12, pg_none()));
    EXPECT_ERR(PG_SM_90, PG_ERANGE, "at most 7 groups", pg_cp_async_wait(k, 8));

    /* labels */
    EXPECT_ERR(PG_SM_90, PG_ELABEL, "bound twice", {
        pg_label l = pg_label_new(k, "x");
        pg_label_bind(k, l);
        pg_label_bind(k, l);
    });
    EXPECT_ERR(PG_SM_90, PG_ELABEL, "never bound", pg_bra(k, pg_label_new(k, "nowhere")));
    EXPECT_ERR(PG_SM_90, PG_ELABEL, "not a label", pg_bra(k, (pg_label){42, 0}));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "label hint 'a b' is not a valid identifier", pg_label_new(k, "a b"));

    /* reads before writes */
    EXPECT_ERR(PG_SM_90, PG_EUNDEF, "register %r1 is read before any write", {
        pg_add(k, PG_U32, R, R, pg_u32(1));
    });
    EXPECT_ERR(PG_SM_90, PG_EUNDEF, "%f1 is read before any write reaches it", {
        /* written only on a path that cannot reach the read */
        pg_label skip = pg_label_new(k, "skip"), end = pg_label_new(k, "end");
        pg_mov(k, PG_U64, D, pg_u64(0));
        pg_bra(k, skip);
        pg_label_bind(k, end);
        pg_ret(k);
        pg_label_bind(k, skip);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, D, 0, F);
        pg_mov(k, PG_F32, F, pg_f32(0.0f));
        pg_bra(k, end);
    });
    {
        /* written on one path of two: accepted (may be defined) */
        pg_kernel *kk = mk("ok", PG_SM_90);
        pg_param pn = pg_param_add(kk, PG_U32, "n");
        pg_reg n = pg_param_load(kk, pn);
        pg_reg p = pg_reg_new(kk, PG_PRED), v = pg_reg_new(kk, PG_U32);
        pg_setp(kk, PG_CMP_EQ, PG_U32, p, n, pg_u32(0));
        pg_guard(kk, p, false);
        pg_mov(kk, PG_U32, v, pg_u32(1));
        pg_guard(kk, p, true);
        pg_mov(kk, PG_U32, v, pg_u32(2));
        pg_add(kk, PG_U32, v, v, n);
        const char *ptx;
        REQUIRE_INT_EQ(emit(kk, &ptx), 0);
        pg_kernel_destroy(&kk);
    }

    /* state */
    EXPECT_ERR(PG_SM_90, PG_ESTATE, "declare all params before the first instruction", {
        pg_mov(k, PG_U32, R, pg_u32(0));
        pg_param_add(k, PG_U32, "late");
    });
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "declared twice", {
        pg_param_add(k, PG_U32, "n");
        pg_param_add(k, PG_U32, "n");
    });
    EXPECT_ERR(PG_SM_90, PG_ETYPE, "cannot be .pred", pg_param_add(k, PG_PRED, "p"));
    EXPECT_ERR(PG_SM_90, PG_ESTATE, "guard is pending", pg_guard(k, P, false));
    EXPECT_ERR(PG_SM_90, PG_ESTATE, "already pending", {
        pg_guard(k, P, false);
        pg_guard(k, P, false);
    });
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "one line", pg_comment(k, "two\nlines"));
    EXPECT_ERR(PG_SM_90, PG_ERANGE, "barrier ids are 0..15", pg_bar_sync(k, 16));
    EXPECT_ERR(PG_SM_90, PG_ERANGE, "product <= 1024", pg_kernel_set_maxntid(k, 1024, 2, 1));
    EXPECT_ERR(PG_SM_90, PG_ERANGE, "1..48 KiB", pg_shared_static(k, PG_F32, 20000, 4, "big"));
    EXPECT_ERR(PG_SM_90, PG_ESTATE, "at most one dynamic", {
        pg_shared_dynamic(k, 16);
        pg_shared_dynamic(k, 16);
    });
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "not a power of two", pg_shared_dynamic(k, 3));

    /* a kernel definition's own error (pg_kernel_fail) */
    EXPECT_ERR(PG_SM_90, PG_ERANGE, "bad: tile 3 is too wide",
               pg_kernel_fail(k, PG_ERANGE, "tile %u is too wide", 3u));
    EXPECT_ERR(PG_SM_90, PG_EINVAL, "bad: not an error", pg_kernel_fail(k, 0, "not an error"));

    /* sticky: the first error wins, later calls do nothing */
    pg_kernel *k = mk("sticky", PG_SM_90);
    pg_reg r = pg_reg_new(k, PG_U32);
    pg_add(k, PG_F32, r, r, r);
    int first = pg_kernel_error(k);
    char msg[PG_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", pg_kernel_message(k));
    uint32_t nins = k->nins;
    pg_bar_sync(k, 99);
    pg_mov(k, PG_U32, r, pg_u32(1));
    REQUIRE_INT_EQ(pg_kernel_error(k), first);
    REQUIRE_STR_EQ(pg_kernel_message(k), msg);
    REQUIRE_INT_EQ(k->nins, nins);
    REQUIRE(pg_reg_new(k, PG_U32).kind == PG_VAL_NONE);
    pg_kernel_destroy(&k);

    /* pg_kernel_fail is sticky too */
    k = mk("fail", PG_SM_90);
    REQUIRE_INT_EQ(pg_kernel_fail(k, PG_ERANGE, "first"), PG_ERANGE);
    REQUIRE_INT_EQ(pg_kernel_fail(k, PG_ETYPE, "second"), PG_ERANGE);
    REQUIRE_STR_EQ(pg_kernel_message(k), "fail: first");
    pg_kernel_destroy(&k);
    REQUIRE_INT_EQ(pg_kernel_fail(NULL, PG_ERANGE, "no kernel"), PG_ERANGE);

    /* no instructions after emission */
    k = mk("done", PG_SM_90);
    const char *ptx;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    pg_ret(k);
    REQUIRE_INT_EQ(pg_kernel_error(k), PG_ESTATE);
    REQUIRE_CONTAINS(pg_kernel_message(k), "already emitted");
    pg_kernel_destroy(&k);

    /* error names and messages come from one table */
    REQUIRE_STR_EQ(pg_err_name(PG_EDIVERGE), "PG_EDIVERGE");
    REQUIRE_STR_EQ(pg_strerror(PG_EDIVERGE), "barrier divergence");
    REQUIRE_STR_EQ(pg_strerror(0), "success");
    REQUIRE_STR_EQ(pg_strerror(-999), "unknown error");
    REQUIRE_STR_EQ(pg_err_name(-999), "PG_UNKNOWN");
    TEST_DONE();
}
