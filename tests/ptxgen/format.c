/* SPDX-License-Identifier: MIT */
/* The text writer: pg_sb_fmt writes the conversions the emitter uses by
 * hand and must give exactly what printf gives; operands keep their exact
 * decimal and hex forms at the edges of their ranges. */
#include "util.h"

#include <limits.h>
#include <stdlib.h>

static void writer(void)
{
    /* every conversion the fast path writes, at the edges of its range */
    struct {
        const char *want;
        pg_sbuf b;
    } c[8];
    memset(c, 0, sizeof c);
    pg_sb_fmt(&c[0].b, "%u %u %d %d %d", 0u, UINT_MAX, 0, INT_MIN, INT_MAX);
    c[0].want = "0 4294967295 0 -2147483648 2147483647";
    pg_sb_fmt(&c[1].b, "%llu %llu %lld %lld", 0ull, (unsigned long long)UINT64_MAX,
              (long long)INT64_MIN, (long long)INT64_MAX);
    c[1].want = "0 18446744073709551615 -9223372036854775808 9223372036854775807";
    pg_sb_fmt(&c[2].b, "%s.%s%c%%|%s", "mul", "lo", '.', "");
    c[2].want = "mul.lo.%|";
    pg_sb_fmt(&c[3].b, "no conversions");
    c[3].want = "no conversions";
    /* conversions the fast path does not write go to vsnprintf whole, even
     * after a piece it has written */
    pg_sb_fmt(&c[4].b, "%s %08X %u", "x", 0xABCu, 7u);
    c[4].want = "x 00000ABC 7";
    pg_sb_fmt(&c[5].b, "%5s|%-3u|%ld", "ab", 4u, -5L);
    c[5].want = "   ab|4  |-5";
    pg_sb_fmt(&c[6].b, "%s%s", "", "");
    c[6].want = "";
    pg_sb_str(&c[7].b, "");
    c[7].want = "";
    for (unsigned i = 0; i < sizeof c / sizeof c[0]; i++) {
        REQUIRE(!c[i].b.oom);
        REQUIRE_STR_EQ(c[i].b.p, c[i].want);
        REQUIRE_INT_EQ(c[i].b.len, strlen(c[i].b.p));
        pg_mem_free(c[i].b.p);
    }

    /* pieces longer than the buffer, and many pieces: the buffer grows and
     * stays NUL-terminated */
    char big[10000];
    for (size_t i = 0; i < sizeof big - 1; i++)
        big[i] = (char)('a' + i % 26);
    big[sizeof big - 1] = '\0';
    pg_sbuf b = {0};
    pg_sb_str(&b, "<");
    pg_sb_fmt(&b, "%s|%llu", big, 12345ull);
    pg_sb_str(&b, big);
    REQUIRE(!b.oom);
    REQUIRE_INT_EQ(b.len, 1 + (sizeof big - 1) + 6 + (sizeof big - 1));
    REQUIRE_INT_EQ(strlen(b.p), b.len);
    REQUIRE(memcmp(b.p + 1 + (sizeof big - 1), "|12345", 6) == 0);
    pg_mem_free(b.p);

    pg_sbuf many = {0};
    char want[64];
    for (unsigned i = 0; i < 5000; i++)
        pg_sb_fmt(&many, "%u,", i * 2654435761u);
    REQUIRE(!many.oom);
    size_t off = 0;
    for (unsigned i = 0; i < 5000 && off < many.len; i++) {
        int n = snprintf(want, sizeof want, "%u,", i * 2654435761u);
        REQUIRE(strncmp(many.p + off, want, (size_t)n) == 0);
        off += (size_t)n;
    }
    REQUIRE_INT_EQ(off, many.len);
    pg_mem_free(many.p);
}

/* Operands as the text writes them, at the edges of each type. */
static void operands(void)
{
    pg_kernel *k = mk("fmt", PG_SM_90);
    REQUIRE(k != NULL);
    if (!k)
        return;
    struct {
        pg_val v;
        pg_type t;
        const char *want;
    } c[] = {
        {pg_u32(0), PG_U32, "0"},
        {pg_s32(-1), PG_U32, "4294967295"},
        {pg_s32(-1), PG_U16, "65535"},
        {pg_s32(-1), PG_U8, "255"},
        {pg_s32(-1), PG_S32, "-1"},
        {pg_s32(-1), PG_PRED, "18446744073709551615"},
        {pg_s64(INT64_MIN), PG_S64, "-9223372036854775808"},
        {pg_u64(UINT64_MAX), PG_U64, "18446744073709551615"},
        {pg_u64(UINT64_MAX), PG_B64, "18446744073709551615"},
        {pg_f32(1.0f), PG_F32, "0f3F800000"},
        {pg_f32(-0.0f), PG_F32, "0f80000000"},
        {pg_f64(1.0), PG_F64, "0d3FF0000000000000"},
        {pg_f64(-2.5), PG_F64, "0dC004000000000000"},
        {pg_none(), PG_U32, "<none>"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        pg_val_format(k, c[i].v, c[i].t, buf, sizeof buf);
        REQUIRE_STR_EQ(buf, c[i].want);
    }
    pg_reg f = pg_reg_new(k, PG_F32), r = pg_reg_new(k, PG_U32);
    pg_val_format(k, f, PG_F32, buf, sizeof buf);
    REQUIRE_STR_EQ(buf, "%f1");
    pg_val_format(k, r, PG_U32, buf, sizeof buf);
    REQUIRE_STR_EQ(buf, "%r1");
    /* a short buffer truncates, never overruns */
    pg_val_format(k, pg_u64(UINT64_MAX), PG_U64, buf, 5);
    REQUIRE_STR_EQ(buf, "1844");

    /* in an instruction: negative address offsets and wide immediates */
    pg_reg a = pg_reg_new(k, PG_U64), d = pg_reg_new(k, PG_S64);
    pg_ld(k, PG_SPACE_GLOBAL, PG_S64, a, -8, d);
    EXPECT_LINE(k, "ld.global.s64 %rd2, [%rd1+-8]");
    pg_add(k, PG_S64, d, d, pg_s64(INT64_MIN));
    EXPECT_LINE(k, "add.s64 %rd2, %rd2, -9223372036854775808");
    pg_kernel_destroy(&k);
}

/* A fresh register of type t holding 0, so that reading it validates. */
static pg_reg zero(pg_kernel *k, pg_type t)
{
    pg_reg r = pg_reg_new(k, t);
    pg_mov(k, t, r, t == PG_F32 ? pg_f32(0.0f) : pg_u32(0));
    return r;
}

/* The emitter writes most lines through a cursor of its own; every line
 * must be what the long way (the message text) gives, guard and all. The
 * warp-wide lines (mma, ldmatrix, shfl) with each shape and operand kind. */
static void two_writers(void)
{
    pg_kernel *k = mk("two_writers", PG_SM_90);
    REQUIRE(k != NULL);
    if (!k)
        return;
    pg_reg d[4], a[4], b[2], c[4];
    for (unsigned i = 0; i < 4; i++) {
        d[i] = pg_reg_new(k, PG_F32);
        a[i] = zero(k, PG_B32);
        c[i] = zero(k, PG_F32);
    }
    b[0] = zero(k, PG_B32);
    b[1] = zero(k, PG_B32);
    pg_reg p = pg_reg_new(k, PG_PRED), addr = zero(k, PG_U32), x = zero(k, PG_B32);
    pg_setp(k, PG_CMP_LT, PG_U32, p, addr, pg_u32(7));
    pg_mma_m16n8k16_f32(k, PG_F16, d, a, b, c);
    pg_guard(k, p, true);
    pg_mma_m16n8k16_f32(k, PG_BF16, d, a, b, d);
    pg_ldmatrix(k, 1, false, a, addr, 0);
    pg_ldmatrix(k, 2, true, a, addr, -16);
    pg_guard(k, p, false);
    pg_ldmatrix(k, 4, false, a, addr, 4096);
    pg_shared s = pg_shared_static(k, PG_B32, 64, 16, "tile");
    pg_ldmatrix(k, 4, true, a, pg_shared_addr(s), 16);
    pg_shfl(k, PG_SHFL_BFLY, x, pg_none(), x, pg_u32(16), pg_u32(31), pg_u32(0xffffffffu));
    pg_shfl(k, PG_SHFL_IDX, x, p, x, a[1], pg_u32(31), pg_s32(-1));
    pg_guard(k, p, false);
    pg_shfl(k, PG_SHFL_UP, x, pg_none(), x, pg_u32(1), pg_u32(0), pg_u32(0xffffffffu));
    if (pg_kernel_error(k))
        TEST_FAIL_("%s", pg_kernel_message(k));
    const char *text = NULL;
    REQUIRE_INT_EQ(emit(k, &text), 0);
    for (uint32_t i = 0; text && i < k->nins; i++) {
        char line[1024], want[1100];
        pg_instr_text(k, &k->ins[i], line, sizeof line);
        snprintf(want, sizeof want, "\n\t%s;\n", line);
        if (!strstr(text, want))
            TEST_FAIL_("emitted text lacks `%s`", line);
        test_checks_++;
    }
    pg_kernel_destroy(&k);
}

/* pg_kernel_take_ptx hands over the same bytes pg_kernel_emit lends, and
 * the kernel writes them anew when asked again. */
static void take(void)
{
    pg_kernel *k = mk("take", PG_SM_80);
    REQUIRE(k != NULL);
    if (!k)
        return;
    pg_reg r = zero(k, PG_U32);
    pg_add(k, PG_U32, r, r, pg_u32(3));
    char *none = (char *)"x";
    REQUIRE_INT_EQ(pg_kernel_take_ptx(k, NULL, NULL), PG_EINVAL);
    REQUIRE_INT_EQ(pg_kernel_take_ptx(NULL, &none, NULL), PG_EINVAL);
    REQUIRE(none == NULL);
    const char *lent = NULL;
    size_t lent_len = 0, taken_len = 0, again_len = 0;
    REQUIRE_INT_EQ(pg_kernel_emit(k, &lent, &lent_len), 0);
    char *copy = lent ? strdup(lent) : NULL;
    char *taken = NULL;
    REQUIRE_INT_EQ(pg_kernel_take_ptx(k, &taken, &taken_len), 0);
    REQUIRE(taken != NULL && copy != NULL);
    if (taken && copy) {
        REQUIRE_STR_EQ(taken, copy);
        REQUIRE_INT_EQ(taken_len, lent_len);
    }
    const char *again = NULL;
    REQUIRE_INT_EQ(pg_kernel_emit(k, &again, &again_len), 0);
    REQUIRE(again != NULL && again != taken);
    if (again && copy)
        REQUIRE_STR_EQ(again, copy);
    REQUIRE_INT_EQ(again_len, lent_len);
    pg_kernel_destroy(&k);
    pg_free(taken); /* outlives its kernel */
    free(copy);
}

int main(void)
{
    writer();
    operands();
    two_writers();
    take();
    TEST_DONE();
}
