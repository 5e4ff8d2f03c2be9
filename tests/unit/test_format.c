/* SPDX-License-Identifier: MIT */
/* The text writer: pg_sb_fmt writes the conversions the emitter uses by
 * hand and must give exactly what printf gives; operands keep their exact
 * decimal and hex forms at the edges of their ranges. */
#include "util.h"

#include <limits.h>

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

int main(void)
{
    writer();
    operands();
    TEST_DONE();
}
