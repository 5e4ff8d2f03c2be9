/* SPDX-License-Identifier: MIT */
/* Defects found by hostile use of the builder, one test each: nothing the
 * builder accepts may come out cut, renamed into a clash, or borrowed from
 * another kernel. */
#include "util.h"

#include <stdlib.h>

/* A comment of any length keeps its line and the instruction after it. */
static void long_comment(void)
{
    static const size_t lens[] = {0, 1, 505, 506, 507, 511, 512, 513, 4096, 70000};
    for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        pg_kernel *k = mk("longc", PG_SM_90);
        if (!k)
            return;
        char *text = malloc(lens[i] + 1);
        char *want = malloc(lens[i] + 64);
        if (!text || !want) {
            free(text);
            free(want);
            pg_kernel_destroy(&k);
            return;
        }
        memset(text, 'c', lens[i]);
        text[lens[i]] = '\0';
        snprintf(want, lens[i] + 64, "\t// %s\n\tmov.u32 %%r1, 7;\n", text);
        pg_comment(k, text);
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_mov(k, PG_U32, r, pg_u32(7));
        const char *ptx = NULL;
        REQUIRE_INT_EQ(emit(k, &ptx), 0);
        REQUIRE_CONTAINS(ptx, want);
        free(text);
        free(want);
        pg_kernel_destroy(&k);
    }
}

/* Bytes outside printable ASCII are written as \xNN; line ends are refused. */
static void comment_bytes(void)
{
    pg_kernel *k = mk("bytes", PG_SM_90);
    if (!k)
        return;
    pg_comment(k, "tab\there \x01 caf\xc3\xa9 \x7f end");
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE_CONTAINS(ptx, "\t// tab\there \\x01 caf\\xC3\\xA9 \\x7F end\n");
    pg_kernel_destroy(&k);

    k = mk("bytes", PG_SM_90);
    pg_comment(k, "two\rlines");
    REQUIRE_INT_EQ(pg_kernel_error(k), PG_EINVAL);
    REQUIRE_CONTAINS(pg_kernel_message(k), "a comment is one line of text");
    pg_kernel_destroy(&k);
}

/* The longest names the builder accepts come out whole. */
static void long_names(void)
{
    char kname[65], hint[65], want[200];
    memset(kname, 'k', 64);
    kname[64] = '\0';
    memset(hint, 'h', 64);
    hint[64] = '\0';
    pg_kernel *k = mk(kname, PG_SM_90);
    if (!k)
        return;
    pg_shared s = pg_shared_static(k, PG_F32, 32, 4, hint);
    pg_reg r = pgv_mov(k, PG_U32, pg_shared_addr(s));
    pg_st(k, PG_SPACE_SHARED, PG_F32, pg_shared_addr(s), 4, pg_f32(1.0f));
    (void)r;
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    const char *name = k->shared[s.id].name;
    snprintf(want, sizeof want, "\tmov.u32 %%r1, %s;\n", name);
    REQUIRE_CONTAINS(ptx, want);
    snprintf(want, sizeof want, "\tst.shared.f32 [%s+4], 0f3F800000;\n", name);
    REQUIRE_CONTAINS(ptx, want);
    REQUIRE(strlen(name) > 128);
    pg_kernel_destroy(&k);
}

int main(void)
{
    long_comment();
    comment_bytes();
    long_names();
    TEST_DONE();
}
