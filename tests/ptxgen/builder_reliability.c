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

/* Forms ptxas rejects are refused at the call, with a message. */
#define EXPECT_REFUSED(target, msg, ...)                                       \
    do {                                                                       \
        pg_kernel *k_ = mk("refuse", target);                                  \
        if (!k_)                                                               \
            break;                                                             \
        env_ e_ = env_make(k_);                                                \
        body_(k_, &e_, __VA_ARGS__);                                           \
        REQUIRE_CONTAINS(pg_kernel_message(k_), msg);                          \
        REQUIRE(pg_kernel_error(k_) != 0);                                     \
        pg_kernel_destroy(&k_);                                                \
    } while (0)
#define EXPECT_TAKEN(target, ...)                                              \
    do {                                                                       \
        pg_kernel *k_ = mk("take", target);                                    \
        if (!k_)                                                               \
            break;                                                             \
        env_ e_ = env_make(k_);                                                \
        body_(k_, &e_, __VA_ARGS__);                                           \
        REQUIRE_STR_EQ(pg_kernel_message(k_), "");                             \
        pg_kernel_destroy(&k_);                                                \
    } while (0)

typedef struct env_ {
    pg_reg u16, s16, u32, f16, bf16, f32, f64, g, s;
} env_;

static env_ env_make(pg_kernel *k)
{
    env_ e;
    e.u16 = pg_reg_new(k, PG_U16);
    e.s16 = pg_reg_new(k, PG_S16);
    e.u32 = pg_reg_new(k, PG_U32);
    e.f16 = pg_reg_new(k, PG_F16);
    e.bf16 = pg_reg_new(k, PG_BF16);
    e.f32 = pg_reg_new(k, PG_F32);
    e.f64 = pg_reg_new(k, PG_F64);
    e.g = pg_reg_new(k, PG_U64);
    e.s = pg_reg_new(k, PG_U32);
    return e;
}

enum { CVT, SETP, CP };
static void body_(pg_kernel *k, const env_ *e, int what, int a, int b, int c)
{
    const pg_reg *by_type[PG_TYPE_COUNT] = {0};
    by_type[PG_B8] = by_type[PG_U8] = by_type[PG_U16] = &e->u16;
    by_type[PG_S8] = by_type[PG_S16] = &e->s16;
    by_type[PG_U32] = &e->u32;
    by_type[PG_F16] = &e->f16;
    by_type[PG_BF16] = &e->bf16;
    by_type[PG_F32] = &e->f32;
    by_type[PG_F64] = &e->f64;
    switch (what) {
    case CVT: pgv_cvt(k, (pg_type)a, (pg_type)b, (pg_rnd)c, *by_type[b]); break;
    case SETP: pgv_setp(k, PG_CMP_LT, (pg_type)a, *by_type[a], *by_type[a]); break;
    case CP: pg_cp_async(k, e->s, 0, e->g, 0, (unsigned)a, b < 0 ? pg_none() : pg_u32((uint32_t)b)); break;
    }
}

static void ptxas_rules(void)
{
    /* cvt to or from .b8 */
    EXPECT_REFUSED(PG_SM_90, "cvt converts numbers; .b8 is a bit type", CVT, PG_B8, PG_U32, PG_RND_NONE);
    EXPECT_REFUSED(PG_SM_90, "cvt converts numbers; .b8 is a bit type", CVT, PG_F32, PG_B8, PG_RND_RN);
    EXPECT_TAKEN(PG_SM_90, CVT, PG_U8, PG_U32, PG_RND_NONE);
    /* cvt to bf16 from anything but f32 before sm_90 */
    static const pg_type from[] = {PG_F16, PG_F64, PG_U16, PG_S16, PG_U32};
    for (unsigned i = 0; i < sizeof from / sizeof from[0]; i++) {
        EXPECT_REFUSED(PG_SM_80, "needs sm_90", CVT, PG_BF16, from[i], PG_RND_RN);
        EXPECT_REFUSED(PG_SM_89, "needs sm_90", CVT, PG_BF16, from[i], PG_RND_RN);
        EXPECT_TAKEN(PG_SM_90, CVT, PG_BF16, from[i], PG_RND_RN);
    }
    EXPECT_TAKEN(PG_SM_80, CVT, PG_BF16, PG_F32, PG_RND_RN);
    /* bf16 <-> 8-bit integers: nowhere */
    EXPECT_REFUSED(PG_SM_120, "no conversion between bf16 and 8-bit integers", CVT, PG_BF16, PG_U8, PG_RND_RN);
    EXPECT_REFUSED(PG_SM_90, "no conversion between bf16 and 8-bit integers", CVT, PG_BF16, PG_S8, PG_RND_RN);
    EXPECT_REFUSED(PG_SM_90, "no conversion between bf16 and 8-bit integers", CVT, PG_U8, PG_BF16, PG_RND_RNI);
    EXPECT_REFUSED(PG_SM_100, "no conversion between bf16 and 8-bit integers", CVT, PG_S8, PG_BF16, PG_RND_RZI);
    /* setp.bf16 before sm_90 */
    EXPECT_REFUSED(PG_SM_80, "setp.bf16 needs sm_90", SETP, PG_BF16, 0, 0);
    EXPECT_REFUSED(PG_SM_89, "setp.bf16 needs sm_90", SETP, PG_BF16, 0, 0);
    EXPECT_TAKEN(PG_SM_90, SETP, PG_BF16, 0, 0);
    /* a cp.async source size above the copy size */
    EXPECT_REFUSED(PG_SM_80, "src-size 5 is larger than the 4-byte copy", CP, 4, 5, 0);
    EXPECT_REFUSED(PG_SM_80, "src-size 17 is larger than the 16-byte copy", CP, 16, 17, 0);
    EXPECT_TAKEN(PG_SM_80, CP, 16, 16, 0);
    EXPECT_TAKEN(PG_SM_80, CP, 8, 0, 0);
    EXPECT_TAKEN(PG_SM_80, CP, 8, -1, 0);
}

/* Names: the PTX grammar and reserved words, and generated symbols that
 * cannot clash. */
static void names(void)
{
    static const char *const bad[] = {"_", "WARP_SZ", "", "9a", "a b", "a$b", "%r1", "a-b"};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pg_kernel *k = NULL;
        REQUIRE_INT_EQ(pg_kernel_create(&k, bad[i], PG_SM_90), PG_EINVAL);
        REQUIRE(k == NULL);
        k = mk("names", PG_SM_90);
        pg_param_add(k, PG_U32, bad[i]);
        REQUIRE_INT_EQ(pg_kernel_error(k), PG_EINVAL);
        REQUIRE_CONTAINS(pg_kernel_message(k), "is not a valid identifier");
        pg_kernel_destroy(&k);
        k = mk("names", PG_SM_90);
        pg_label_new(k, bad[i]);
        REQUIRE_CONTAINS(pg_kernel_message(k), "label hint");
        pg_kernel_destroy(&k);
        k = mk("names", PG_SM_90);
        pg_shared_static(k, PG_F32, 4, 4, bad[i]);
        REQUIRE_CONTAINS(pg_kernel_message(k), "shared hint");
        pg_kernel_destroy(&k);
    }
    pg_kernel *k = mk("names", PG_SM_90);
    pg_param_add(k, PG_U32, "WARP_SZ");
    REQUIRE_CONTAINS(pg_kernel_message(k), "'WARP_SZ' is not a valid identifier: it is reserved by PTX");
    pg_kernel_destroy(&k);

    /* A control character in a bad name is escaped in the message. */
    k = mk("names", PG_SM_90);
    pg_param_add(k, PG_U32, "a\x1b[2J");
    REQUIRE_CONTAINS(pg_kernel_message(k), "'a\\x1B[2J'");
    pg_kernel_destroy(&k);

    /* Hint "s1" on symbol 1 and hint "s" on symbol 11 were both k_s11. */
    k = mk("k", PG_SM_90);
    pg_shared first = pg_shared_static(k, PG_F32, 4, 4, "s1");
    pg_shared last = first;
    for (int i = 2; i <= 11; i++)
        last = pg_shared_static(k, PG_F32, 4, 4, "s");
    REQUIRE_STR_EQ(k->shared[first.id].name, "k_s1_1");
    REQUIRE_STR_EQ(k->shared[last.id].name, "k_s11");
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE_CONTAINS(ptx, ".shared .align 4 .f32 k_s1_1[4];\n");
    REQUIRE_CONTAINS(ptx, ".shared .align 4 .f32 k_s11[4];\n");
    pg_kernel_destroy(&k);

    /* A param cannot take a name of the kernel's symbols, made before or after. */
    k = mk("k", PG_SM_90);
    pg_param_add(k, PG_U64, "k_smem1");
    REQUIRE_INT_EQ(pg_kernel_error(k), PG_EINVAL);
    REQUIRE_CONTAINS(pg_kernel_message(k), "names beginning with 'k_' are kept");
    pg_kernel_destroy(&k);
    k = mk("k", PG_SM_90);
    pg_param_add(k, PG_U64, "kk_smem1");
    pg_param_add(k, PG_U64, "k");
    REQUIRE_INT_EQ(pg_kernel_error(k), 0);
    pg_kernel_destroy(&k);
}

/* A handle from another kernel, with an id that is in range here, is
 * refused. */
static void foreign_handles(void)
{
    pg_kernel *a = mk("a", PG_SM_90);
    if (!a)
        return;
    pg_param pa = pg_param_add(a, PG_U32, "n");
    pg_reg ra = pg_reg_new(a, PG_U32);
    pg_label la = pg_label_new(a, "x");
    pg_shared sa = pg_shared_static(a, PG_F32, 32, 4, "buf");
    for (int what = 0; what < 6; what++) {
        pg_kernel *b = mk("b", PG_SM_90);
        if (!b)
            break;
        /* b has the same ids in range */
        pg_param_add(b, PG_U32, "n");
        pg_reg rb = pg_reg_new(b, PG_U32);
        pg_label lb = pg_label_new(b, "x");
        pg_shared_static(b, PG_F32, 32, 4, "buf");
        REQUIRE_INT_EQ(rb.id, ra.id);
        REQUIRE_INT_EQ(lb.id, la.id);
        const char *msg = "";
        switch (what) {
        case 0: pg_add(b, PG_U32, rb, rb, ra); msg = "operand b is not a register of this kernel"; break;
        case 1: pg_mov(b, PG_U32, ra, rb); msg = "destination is not a register of this kernel"; break;
        case 2: pg_bra(b, la); msg = "not a label of this kernel"; break;
        case 3: pg_param_load(b, pa); msg = "not a param of this kernel"; break;
        case 4: pg_st(b, PG_SPACE_SHARED, PG_F32, pg_shared_addr(sa), 0, pg_f32(0)); msg = "not a shared symbol of this kernel"; break;
        case 5: pgv_mov(b, PG_U32, pg_shared_addr(sa)); msg = "not a shared symbol of this kernel"; break;
        }
        REQUIRE_INT_EQ(pg_kernel_error(b), what == 2 ? PG_ELABEL : PG_EINVAL);
        REQUIRE_CONTAINS(pg_kernel_message(b), msg);
        REQUIRE_INT_EQ(pg_reg_type(b, ra), PG_TYPE_COUNT);
        REQUIRE_INT_EQ(pg_reg_type(a, ra), PG_U32);
        pg_kernel_destroy(&b);
    }
    /* the owner still takes them */
    pg_mov(a, PG_U32, ra, pg_param_load(a, pa));
    pg_st(a, PG_SPACE_SHARED, PG_U32, pg_shared_addr(sa), 0, ra);
    pg_label_bind(a, la);
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(a, &ptx), 0);
    pg_kernel_destroy(&a);
}

/* Messages that pointed the wrong way, and a misuse after emission. */
static void message_nits(void)
{
    /* an f16 immediate: pg_f32() is refused too, so it is not suggested */
    pg_kernel *k = mk("nits", PG_SM_90);
    pg_reg h = pg_reg_new(k, PG_F16);
    pg_add(k, PG_F16, h, h, pg_u32(1));
    REQUIRE_CONTAINS(pg_kernel_message(k), "16-bit float immediates are not supported");
    REQUIRE(strstr(pg_kernel_message(k), "pg_f32") == NULL);
    pg_kernel_destroy(&k);
    k = mk("nits", PG_SM_90);
    pg_reg b = pg_reg_new(k, PG_BF16);
    pg_mov(k, PG_BF16, b, pg_f32(1.0f));
    REQUIRE_CONTAINS(pg_kernel_message(k), "16-bit float immediates are not supported");
    pg_kernel_destroy(&k);
    /* an integer immediate for f64 suggests the f64 form only */
    k = mk("nits", PG_SM_90);
    pg_reg d = pg_reg_new(k, PG_F64);
    pg_add(k, PG_F64, d, d, pg_u32(1));
    REQUIRE_CONTAINS(pg_kernel_message(k), "write float immediates with pg_f64()");
    pg_kernel_destroy(&k);

    /* pg_grid_stride_end without a begin names the misuse */
    k = mk("nits", PG_SM_90);
    pg_loop L;
    memset(&L, 0, sizeof L);
    pg_grid_stride_end(k, &L);
    REQUIRE_CONTAINS(pg_kernel_message(k), "pg_grid_stride_end: the loop is not open");
    REQUIRE(strstr(pg_kernel_message(k), "sub:") == NULL);
    pg_kernel_destroy(&k);

    /* a misuse after a successful emission does not take the text back */
    k = mk("nits", PG_SM_90);
    pg_reg r = pgv_mov(k, PG_U32, pg_u32(1));
    const char *first = NULL, *again = NULL;
    size_t n1 = 0, n2 = 0;
    REQUIRE_INT_EQ(pg_kernel_emit(k, &first, &n1), 0);
    pg_add(k, PG_U32, r, r, r);
    REQUIRE_INT_EQ(pg_kernel_error(k), PG_ESTATE);
    REQUIRE_CONTAINS(pg_kernel_message(k), "already emitted");
    REQUIRE_INT_EQ(pg_kernel_emit(k, &again, &n2), 0);
    REQUIRE(first != NULL && again == first && n1 == n2);
    pg_kernel_destroy(&k);
}

int main(void)
{
    message_nits();
    foreign_handles();
    names();
    ptxas_rules();
    long_comment();
    comment_bytes();
    long_names();
    TEST_DONE();
}
