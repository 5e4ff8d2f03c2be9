/* SPDX-License-Identifier: MIT */
/*
 * Bad input to the builder and the kernel catalog, through the public API
 * only: unknown kernels, targets and knobs; zero, negative, overflowing and
 * non-numeric knob values; sizes whose element or byte counts pass 2^32;
 * GEMM shapes whose products overflow; NULL for every pointer a public
 * function takes. Each case asserts the exact code, the key words of the
 * message, and that nothing was written (knobs, out-pointers untouched).
 *
 * The catalogue this file implements is the table in docs/testing.md,
 * "Bad-input catalogue".
 */
#include "ptxgen/pgk.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

static const pgk_desc *must_find(const char *name)
{
    const pgk_desc *d = pgk_find(name);
    if (!d) {
        fprintf(stderr, "kernel %s is not in the catalog\n", name);
        exit(1);
    }
    return d;
}

/* ---------------------------------------------------------------- unknown names */

static void test_unknown_names(void)
{
    static const char *const kernels[] = {"no_such_kernel", "", "Gradient_clip",
                                          "gradient_clip ", "gradient_clip\n", "gemm"};
    for (size_t i = 0; i < COUNTOF(kernels); i++)
        REQUIRE(pgk_find(kernels[i]) == NULL);
    REQUIRE(pgk_at(pgk_count()) == NULL);
    REQUIRE(pgk_at((size_t)-1) == NULL);

    /* Targets: exact, lower case, known. */
    static const char *const targets[] = {"sm_91", "SM_90", "sm90", "sm_90 ", "sm_9", "",
                                          "compute_90", "sm_90a\n", "sm_1000"};
    for (size_t i = 0; i < COUNTOF(targets); i++) {
        pg_target t = PG_SM_75;
        REQUIRE_INT_EQ(pg_target_parse(targets[i], &t), PG_ENOTFOUND);
        REQUIRE_INT_EQ(t, PG_SM_75);
    }
    REQUIRE(pg_target_name(PG_TARGET_COUNT) == NULL);
    REQUIRE(pg_target_name((pg_target)-1) == NULL);
    REQUIRE_INT_EQ(pg_target_sm(PG_TARGET_COUNT), 0);
    REQUIRE_INT_EQ(pg_isa_min_driver(0), 0);
    REQUIRE_INT_EQ(pg_isa_min_driver(999), 0);

    pg_type ty = PG_U8;
    REQUIRE_INT_EQ(pg_type_parse("float", &ty), PG_ENOTFOUND);
    REQUIRE_INT_EQ(pg_type_parse("F32", &ty), PG_ENOTFOUND);
    REQUIRE_INT_EQ(ty, PG_U8);
    REQUIRE(pg_type_name(PG_TYPE_COUNT) == NULL);

    /* A kernel that does not support a target refuses to emit for it. */
    const pgk_desc *f16 = must_find("gemm_f16_backward_a");
    char err[256] = "";
    char *ptx = (char *)1;
    size_t len = 99;
    REQUIRE(!pgk_supports(f16, PG_SM_75));
    REQUIRE_INT_EQ(pgk_emit(f16, PG_SM_75, NULL, &ptx, &len, err, sizeof err), PG_ETARGET);
    REQUIRE_STR_EQ(err, "gemm_f16_backward_a needs sm_80 or newer; sm_75 was asked for");
    REQUIRE(ptx == NULL);
    REQUIRE_INT_EQ(len, 0);
    REQUIRE_INT_EQ(pgk_emit(f16, PG_TARGET_COUNT, NULL, &ptx, NULL, err, sizeof err), PG_EINVAL);
    REQUIRE_CONTAINS(err, "invalid target");
    REQUIRE(!pgk_supports(f16, PG_TARGET_COUNT));
}

/* ---------------------------------------------------------------- knob values */

typedef struct knob_case {
    const char *kernel, *name, *value;
    int code;
    const char *words; /* the message contains this */
} knob_case;

static const knob_case knob_cases[] = {
    /* unknown knob */
    {"gradient_clip", "m", "4", PG_ENOTFOUND, "unknown knob 'm' for gradient_clip (knobs: n)"},
    {"gradient_clip", "N", "4", PG_ENOTFOUND, "unknown knob 'N' for gradient_clip"},
    {"gradient_clip", "", "4", PG_ENOTFOUND, "unknown knob '' for gradient_clip"},
    {"gemm_backward_a", "variants", "1", PG_ENOTFOUND, "(knobs: m, n, k, variant)"},
    /* zero */
    {"gradient_clip", "n", "0", PG_ERANGE, "knob n=0 is out of range [1, 4294967295]"},
    {"gemm_backward_a", "m", "0", PG_ERANGE, "knob m=0 is out of range [1, 1048560]"},
    {"batched_softmax_backward", "cols", "0x0", PG_ERANGE,
     "knob cols=0x0 is out of range [1, 2147483647]"},
    /* negative */
    {"gradient_clip", "n", "-1", PG_EINVAL, "knob n: '-1' is not a non-negative integer"},
    {"gradient_clip", "n", "-0", PG_EINVAL, "'-0' is not a non-negative integer"},
    {"gemm_backward_a", "k", "-16", PG_EINVAL, "'-16' is not a non-negative integer"},
    /* overflowing */
    {"gradient_clip", "n", "4294967296", PG_ERANGE, "knob n=4294967296 is out of range"},
    {"gradient_clip", "n", "0x100000000", PG_ERANGE, "knob n=0x100000000 is out of range"},
    {"gradient_clip", "n", "18446744073709551616", PG_ERANGE, "out of range [1, 4294967295]"},
    {"gradient_clip", "n", "99999999999999999999999999", PG_ERANGE, "out of range"},
    {"gemm_backward_a", "m", "1048561", PG_ERANGE, "knob m=1048561 is out of range [1, 1048560]"},
    {"gemm_backward_a", "k", "16777217", PG_ERANGE, "knob k=16777217 is out of range [1, 16777216]"},
    {"gemm_backward_a", "variant", "4", PG_ERANGE, "knob variant=4 is out of range [0, 3]"},
    {"batched_rms_norm_backward", "rows", "2147483648", PG_ERANGE,
     "out of range [1, 2147483647]"},
    /* non-numeric */
    {"gradient_clip", "n", "", PG_EINVAL, "knob n: '' is not a non-negative integer"},
    {"gradient_clip", "n", "abc", PG_EINVAL, "'abc' is not a non-negative integer"},
    {"gradient_clip", "n", "12abc", PG_EINVAL, "'12abc' is not a non-negative integer"},
    {"gradient_clip", "n", "1e3", PG_EINVAL, "'1e3' is not a non-negative integer"},
    {"gradient_clip", "n", "1.5", PG_EINVAL, "'1.5' is not a non-negative integer"},
    {"gradient_clip", "n", " 5", PG_EINVAL, "' 5' is not a non-negative integer"},
    {"gradient_clip", "n", "5 ", PG_EINVAL, "'5 ' is not a non-negative integer"},
    {"gradient_clip", "n", "+5", PG_EINVAL, "'+5' is not a non-negative integer"},
    {"gradient_clip", "n", "0x", PG_EINVAL, "'0x' is not a non-negative integer"},
    {"gradient_clip", "n", "0xg", PG_EINVAL, "'0xg' is not a non-negative integer"},
    {"gradient_clip", "n", "0b101", PG_EINVAL, "'0b101' is not a non-negative integer"},
};

static void test_knob_values(void)
{
    for (size_t i = 0; i < COUNTOF(knob_cases); i++) {
        const knob_case *c = &knob_cases[i];
        const pgk_desc *d = must_find(c->kernel);
        pgk_knobs kn, before;
        pgk_knobs_default(d, &kn);
        before = kn;
        char err[256] = "";
        int rc = pgk_knob_set(d, &kn, c->name, c->value, err, sizeof err);
        if (rc != c->code)
            fprintf(stderr, "case %zu: %s %s='%s'\n", i, c->kernel, c->name, c->value);
        REQUIRE_INT_EQ(rc, c->code);
        REQUIRE_CONTAINS(err, c->words);
        REQUIRE(strchr(err, '\n') == NULL);
        REQUIRE(memcmp(&kn, &before, sizeof kn) == 0);

        /* The same through "NAME=VALUE". */
        char assign[128];
        snprintf(assign, sizeof assign, "%s=%s", c->name, c->value);
        err[0] = '\0';
        rc = pgk_knob_assign(d, &kn, assign, err, sizeof err);
        if (c->name[0]) { /* "=4" is a malformed assignment, not an unknown knob */
            REQUIRE_INT_EQ(rc, c->code);
            REQUIRE_CONTAINS(err, c->words);
        }
        REQUIRE(memcmp(&kn, &before, sizeof kn) == 0);
    }

    /* Malformed assignments. */
    const pgk_desc *d = must_find("gradient_clip");
    pgk_knobs kn, before;
    pgk_knobs_default(d, &kn);
    before = kn;
    char err[256] = "";
    REQUIRE_INT_EQ(pgk_knob_assign(d, &kn, "n", err, sizeof err), PG_EINVAL);
    REQUIRE_STR_EQ(err, "'n' is not KNOB=VALUE");
    REQUIRE_INT_EQ(pgk_knob_assign(d, &kn, "=5", err, sizeof err), PG_EINVAL);
    REQUIRE_STR_EQ(err, "'=5' is not KNOB=VALUE");
    REQUIRE_INT_EQ(pgk_knob_assign(d, &kn, "", err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_knob_assign(d, &kn, "n==5", err, sizeof err), PG_EINVAL);
    REQUIRE_CONTAINS(err, "'=5' is not a non-negative integer");
    char longname[200];
    memset(longname, 'x', sizeof longname);
    memcpy(longname + 150, "=5", 3);
    REQUIRE_INT_EQ(pgk_knob_assign(d, &kn, longname, err, sizeof err), PG_ENOTFOUND);
    REQUIRE_CONTAINS(err, "is too long");
    REQUIRE(memcmp(&kn, &before, sizeof kn) == 0);

    /* A tiny error buffer truncates, it does not overflow; none at all is fine. */
    char tiny[8];
    memset(tiny, '#', sizeof tiny);
    REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "n", "0", tiny, 4), PG_ERANGE);
    REQUIRE_STR_EQ(tiny, "kno");
    REQUIRE(tiny[4] == '#');
    REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "n", "0", NULL, 0), PG_ERANGE);
    REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "n", "0", NULL, 64), PG_ERANGE);
}

/* ---------------------------------------------------------------- knob structs filled by hand */

/* pgk_knobs is a plain struct: a caller can put any value in it without
 * pgk_knob_set. Emission and launch sizing must refuse out-of-range values,
 * not index tables with them. */
static void test_raw_knobs(void)
{
    static const char *const gemms[] = {"gemm_backward_a", "gemm_backward_a_accumulate",
                                        "gemm_backward_b"};
    for (size_t i = 0; i < COUNTOF(gemms); i++) {
        const pgk_desc *d = must_find(gemms[i]);
        int vi = pgk_knob_index(d, "variant");
        REQUIRE(vi >= 0);
        if (vi < 0)
            continue;
        const uint32_t bad[] = {d->knobs[vi].max + 1, 99, UINT32_MAX};
        for (size_t j = 0; j < COUNTOF(bad); j++) {
            pgk_knobs kn;
            pgk_knobs_default(d, &kn);
            kn.v[vi] = bad[j];
            char err[256] = "";
            char *ptx = (char *)1;
            REQUIRE_INT_EQ(pgk_emit(d, PG_SM_90, &kn, &ptx, NULL, err, sizeof err), PG_ERANGE);
            REQUIRE(ptx == NULL);
            REQUIRE_CONTAINS(err, "variant");
            REQUIRE_CONTAINS(err, "out of range [0, 3]");
            pgk_launch l;
            REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &l, err, sizeof err), PG_ERANGE);
            REQUIRE_CONTAINS(err, "out of range [0, 3]");
        }
    }

    /* Zero sizes: every kernel refuses a launch with any size knob at 0. */
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        for (size_t k = 0; k < d->nknobs; k++) {
            if (d->knobs[k].min == 0)
                continue; /* a choice such as variant, not a size */
            pgk_knobs kn;
            pgk_knobs_default(d, &kn);
            kn.v[k] = 0;
            pgk_launch l;
            char err[256] = "";
            int rc = pgk_launch_for(d, &kn, &l, err, sizeof err);
            if (rc != PG_ERANGE)
                fprintf(stderr, "%s with %s = 0\n", d->name, d->knobs[k].name);
            REQUIRE_INT_EQ(rc, PG_ERANGE);
            REQUIRE_CONTAINS(err, d->name);
            char *ptx = (char *)1;
            pg_target t = pgk_supports(d, PG_SM_90) ? PG_SM_90 : d->min_target; /* "a" kernels */
            rc = pgk_emit(d, t, &kn, &ptx, NULL, err, sizeof err);
            REQUIRE_INT_EQ(rc, PG_ERANGE);
            REQUIRE(ptx == NULL);
        }
    }
}

/* ---------------------------------------------------------------- 32-bit overflow */

/* Element counts near 2^32 (f32 byte counts far past 2^32): the launch is
 * sized in 64-bit arithmetic, so the grid of n = 2^32 - 1 is never smaller
 * than the grid of a smaller n (a 32-bit "n + threads - 1" would wrap to a
 * handful of blocks), and the kernels address memory with 64-bit offsets. */
static void test_u32_sizes(void)
{
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        int ni = pgk_knob_index(d, "n");
        if (ni < 0 || d->knobs[ni].max != UINT32_MAX)
            continue;
        pgk_knobs kn;
        pgk_knobs_default(d, &kn);
        pgk_launch small, big;
        char err[256] = "";
        kn.v[ni] = 1u << 30; /* 4 GiB of f32 */
        REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &small, err, sizeof err), 0);
        kn.v[ni] = UINT32_MAX; /* 16 GiB of f32 */
        REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &big, err, sizeof err), 0);
        uint64_t threads = (uint64_t)big.grid[0] * big.grid[1] * big.grid[2] * big.block[0] *
                           big.block[1] * big.block[2];
        if (big.grid[0] < small.grid[0] || threads == 0)
            fprintf(stderr, "%s: n = 2^32-1 gives grid %u, n = 2^30 grid %u\n", d->name,
                    big.grid[0], small.grid[0]);
        REQUIRE(big.grid[0] >= small.grid[0]);
        REQUIRE(threads > 0);

        /* Byte offsets of element indices are formed in 64 bits. */
        char *ptx = NULL;
        REQUIRE_INT_EQ(pgk_emit(d, PG_SM_90, &kn, &ptx, NULL, err, sizeof err), 0);
        if (ptx && strstr(ptx, "ld.global") && !strstr(ptx, "mul.wide.u32") &&
            !strstr(ptx, "cvt.u64.u32"))
            fprintf(stderr, "%s: no 64-bit index arithmetic in its PTX\n", d->name);
        REQUIRE(!ptx || !strstr(ptx, "ld.global") || strstr(ptx, "mul.wide.u32") ||
                strstr(ptx, "cvt.u64.u32"));
        pgk_free(ptx);
    }
    /* The largest element-wise launch of the catalog: one thread an element
     * and 2^32 - 1 elements, blocks counted in 64 bits. */
    const pgk_desc *silu = must_find("silu_backward");
    pgk_knobs kn;
    pgk_knobs_default(silu, &kn);
    kn.v[0] = UINT32_MAX;
    pgk_launch l;
    char err[256];
    REQUIRE_INT_EQ(pgk_launch_for(silu, &kn, &l, err, sizeof err), 0);
    REQUIRE((uint64_t)l.grid[0] * l.block[0] >= UINT32_MAX);
}

/* GEMM dims are each in [1, 2^24]; their products are not bounded by the
 * knobs. m*k (grad_A's element count) past 2^32 is addressed in 64 bits
 * (mul.wide); a grid that cannot be launched (more than 65535 row blocks) is
 * refused with PG_ERANGE. */
static void test_gemm_products(void)
{
    const pgk_desc *d = must_find("gemm_backward_a");
    const int mi = pgk_knob_index(d, "m"), ni = pgk_knob_index(d, "n"),
              ki = pgk_knob_index(d, "k"), vi = pgk_knob_index(d, "variant");
    REQUIRE(mi >= 0 && ni >= 0 && ki >= 0 && vi >= 0);
    if (mi < 0 || ni < 0 || ki < 0 || vi < 0)
        return;
    pgk_knobs kn;
    char err[256] = "";
    pgk_launch l;

    /* The output's rows go on grid y, which stops at 65535 blocks: m (the
     * rows of grad_A) is advertised up to 65535 tiles of 16, the seed's,
     * and every value in range launches with every variant. Before, m took
     * up to 2^24 and the launch failed past 65535 tiles. */
    pgk_knobs_default(d, &kn);
    REQUIRE_INT_EQ(d->knobs[mi].max, 65535u * 16u);
    REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "m", "16777216", err, sizeof err), PG_ERANGE);
    REQUIRE_STR_EQ(err, "knob m=16777216 is out of range [1, 1048560]");
    kn.v[mi] = 65535u * 16u;
    kn.v[ki] = 16777216;
    kn.v[ni] = 16777216;
    for (uint32_t v = 0; v < 4; v++) {
        kn.v[vi] = v;
        memset(&l, 0xab, sizeof l);
        REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &l, err, sizeof err), 0);
        REQUIRE(l.grid[1] <= 65535);
        REQUIRE(l.grid[1] == 65535 || v > 0);
        REQUIRE_INT_EQ(l.grid[2], 1);
    }
    /* A hand-filled value past the range is refused by name. */
    kn.v[mi] = 65535u * 16u + 1;
    REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &l, err, sizeof err), PG_ERANGE);
    REQUIRE_STR_EQ(err, "gemm_backward_a: knob m=1048561 is out of range [1, 1048560]");

    /* 65536 x 65536 = 2^32 outputs (16 GiB of f32, an H100 holds it): the
     * grid is exact, computed without wrapping. */
    kn.v[mi] = 65536;
    kn.v[ki] = 65536;
    kn.v[ni] = 16777216;
    kn.v[vi] = 1; /* 128 x 64 block tiles */
    REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 65536 / 64);
    REQUIRE_INT_EQ(l.grid[1], 65536 / 128);
    REQUIRE_INT_EQ(l.grid[2], 1);

    /* Row * leading dimension is a 64-bit product in every GEMM. */
    static const char *const all[] = {"gemm_backward_a", "gemm_backward_a_accumulate",
                                      "gemm_backward_b", "gemm_f16_backward_a", "gemm_forward"};
    for (size_t i = 0; i < COUNTOF(all); i++) {
        const pgk_desc *g = pgk_find(all[i]);
        if (!g)
            continue;
        char *ptx = NULL;
        REQUIRE_INT_EQ(pgk_emit(g, PG_SM_90, NULL, &ptx, NULL, err, sizeof err), 0);
        REQUIRE_CONTAINS(ptx, "mul.wide.u32");
        pgk_free(ptx);
    }
}

/* ---------------------------------------------------------------- NULL pointers */

/* One case: the call, its code (0 for a call that returns nothing or a
 * value that is checked inside), and the words its message must hold (NULL
 * where the function has no message). */
typedef struct null_case {
    const char *call;
    int (*run)(char *msg, size_t len);
    int code;
    const char *words;
} null_case;

/* Builder calls record their error in the kernel; fetch it. */
static int sticky(pg_kernel *k, char *msg, size_t len)
{
    int rc = pg_kernel_error(k);
    snprintf(msg, len, "%s", pg_kernel_message(k));
    const char *ptx = (const char *)1;
    if (pg_kernel_emit(k, &ptx, NULL) != rc || ptx != NULL)
        rc = 12345; /* an error must make emission impossible */
    pg_kernel_destroy(&k);
    return rc;
}

static pg_kernel *fresh(void)
{
    pg_kernel *k = NULL;
    if (pg_kernel_create(&k, "nulls", PG_SM_90) != 0)
        exit(1);
    return k;
}

#define CASE(fn) static int fn(char *msg, size_t len)

CASE(create_out) { (void)msg, (void)len; return pg_kernel_create(NULL, "k", PG_SM_90); }
CASE(create_name)
{
    (void)msg, (void)len;
    pg_kernel *k = (pg_kernel *)1;
    int rc = pg_kernel_create(&k, NULL, PG_SM_90);
    return k == NULL ? rc : 12345;
}
CASE(destroy_null)
{
    (void)msg, (void)len;
    pg_kernel *k = NULL;
    pg_kernel_destroy(NULL);
    pg_kernel_destroy(&k);
    return 0;
}
CASE(emit_kernel) { (void)msg, (void)len; const char *p; return pg_kernel_emit(NULL, &p, NULL); }
CASE(emit_out)
{
    pg_kernel *k = fresh();
    pg_ret(k);
    int rc = pg_kernel_emit(k, NULL, NULL);
    snprintf(msg, len, "%s", pg_kernel_message(k));
    pg_kernel_destroy(&k);
    return rc;
}
CASE(getters)
{
    snprintf(msg, len, "%s", pg_kernel_message(NULL));
    const char *name = "x";
    pg_type t = PG_U8;
    if (pg_kernel_target(NULL) != PG_TARGET_COUNT || pg_kernel_isa(NULL) != 0 ||
        pg_kernel_param_count(NULL) != 0 || pg_kernel_static_shared_bytes(NULL) != 0 ||
        pg_reg_type(NULL, pg_u32(0)) != PG_TYPE_COUNT ||
        pg_kernel_param_info(NULL, 0, &name, &t) != PG_EINVAL || name[0] != 'x' || t != PG_U8)
        return 12345;
    return pg_kernel_error(NULL);
}
CASE(param_info_outs)
{
    pg_kernel *k = fresh();
    pg_param_add(k, PG_U32, "n");
    int rc = pg_kernel_param_info(k, 0, NULL, NULL);
    if (rc == 0)
        rc = pg_kernel_param_info(k, 1, NULL, NULL);
    pg_kernel_destroy(&k);
    snprintf(msg, len, "(no message)");
    return rc;
}
CASE(builder_null_kernel)
{
    /* Every recording call with no kernel does nothing and returns "none". */
    pg_reg r = pg_reg_new(NULL, PG_U32);
    pg_param p = pg_param_add(NULL, PG_U32, "n");
    pg_label l = pg_label_new(NULL, "l");
    pg_shared s = pg_shared_static(NULL, PG_F32, 32, 4, "s");
    pg_loop loop;
    memset(&loop, 0, sizeof loop);
    pg_reg i = pg_grid_stride_begin(NULL, &loop, pg_u32(4));
    pg_grid_stride_end(NULL, &loop);
    pg_grid_stride_end(NULL, NULL);
    pg_reg w = pg_warp_reduce(NULL, PG_REDUCE_SUM, PG_F32, r);
    pg_reg b = pg_block_reduce(NULL, PG_REDUCE_SUM, PG_F32, r, s);
    pg_add(NULL, PG_U32, r, r, r);
    pg_ld_v(NULL, PG_SPACE_GLOBAL, PG_F32, 4, r, 0, NULL);
    pg_st_v(NULL, PG_SPACE_GLOBAL, PG_F32, 4, r, 0, NULL);
    pg_mma_m16n8k16_f16_f32(NULL, NULL, NULL, NULL, NULL);
    pg_ldmatrix(NULL, 4, false, NULL, r, 0);
    pg_comment(NULL, NULL);
    pg_label_bind(NULL, l);
    pg_bra(NULL, l);
    pg_guard(NULL, r, false);
    pg_ret(NULL);
    pg_kernel_set_maxntid(NULL, 1, 1, 1);
    (void)msg, (void)len;
    return r.kind == PG_VAL_NONE && p.id == 0 && l.id == 0 && s.id == 0 &&
                   i.kind == PG_VAL_NONE && w.kind == PG_VAL_NONE && b.kind == PG_VAL_NONE &&
                   pg_param_load(NULL, p).kind == PG_VAL_NONE &&
                   pg_sreg_read(NULL, PG_SREG_TID_X).kind == PG_VAL_NONE &&
                   pg_global_tid_x(NULL).kind == PG_VAL_NONE
               ? 0
               : 12345;
}
CASE(param_add_name)
{
    pg_kernel *k = fresh();
    pg_param_add(k, PG_U32, NULL);
    return sticky(k, msg, len);
}
CASE(comment_text)
{
    pg_kernel *k = fresh();
    pg_comment(k, NULL);
    return sticky(k, msg, len);
}
CASE(ld_v_dst)
{
    pg_kernel *k = fresh();
    pg_reg a = pg_param_load(k, pg_param_add(k, PG_U64, "a"));
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, a, 0, NULL);
    return sticky(k, msg, len);
}
CASE(st_v_src)
{
    pg_kernel *k = fresh();
    pg_reg a = pg_param_load(k, pg_param_add(k, PG_U64, "a"));
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 2, a, 0, NULL);
    return sticky(k, msg, len);
}
CASE(mma_operands)
{
    pg_kernel *k = fresh();
    pg_mma_m16n8k16_f16_f32(k, NULL, NULL, NULL, NULL);
    return sticky(k, msg, len);
}
CASE(ldmatrix_dst)
{
    pg_kernel *k = fresh();
    pg_shared sh = pg_shared_static(k, PG_B32, 256, 16, "tile");
    pg_ldmatrix(k, 4, false, NULL, pg_shared_addr(sh), 0);
    return sticky(k, msg, len);
}
CASE(grid_stride_loop)
{
    pg_kernel *k = fresh();
    pg_grid_stride_begin(k, NULL, pg_u32(4));
    return sticky(k, msg, len);
}
CASE(grid_stride_end)
{
    pg_kernel *k = fresh();
    pg_grid_stride_end(k, NULL);
    return sticky(k, msg, len);
}
CASE(target_parse)
{
    (void)msg, (void)len;
    pg_target t = PG_SM_75;
    int a = pg_target_parse(NULL, &t), b = pg_target_parse("sm_90", NULL);
    return a == b && t == PG_SM_75 ? a : 12345;
}
CASE(type_parse)
{
    (void)msg, (void)len;
    pg_type t = PG_U8;
    int a = pg_type_parse(NULL, &t), b = pg_type_parse("f32", NULL);
    return a == b && t == PG_U8 ? a : 12345;
}
CASE(set_allocator)
{
    /* NULL restores libc: a kernel can still be built. */
    (void)msg, (void)len;
    pg_set_allocator(NULL);
    pg_kernel *k = fresh();
    pg_ret(k);
    const char *ptx;
    int rc = pg_kernel_emit(k, &ptx, NULL);
    pg_kernel_destroy(&k);
    return rc;
}
CASE(catalog_lookups)
{
    (void)msg, (void)len;
    pgk_knobs kn;
    memset(&kn, 0x5a, sizeof kn);
    pgk_knobs_default(NULL, &kn); /* no descriptor: all zero */
    pgk_knobs_default(pgk_at(0), NULL);
    for (size_t i = 0; i < PGK_MAX_KNOBS; i++)
        if (kn.v[i] != 0)
            return 12345;
    return pgk_find(NULL) == NULL && !pgk_supports(NULL, PG_SM_90) &&
                   pgk_knob_index(NULL, "n") == -1 && pgk_knob_index(pgk_at(0), NULL) == -1
               ? 0
               : 12345;
}
CASE(knob_set_desc)
{
    pgk_knobs kn;
    return pgk_knob_set(NULL, &kn, "n", "1", msg, len);
}
CASE(knob_set_knobs) { return pgk_knob_set(pgk_find("gradient_clip"), NULL, "n", "1", msg, len); }
CASE(knob_set_name)
{
    pgk_knobs kn;
    return pgk_knob_set(pgk_find("gradient_clip"), &kn, NULL, "1", msg, len);
}
CASE(knob_set_value)
{
    pgk_knobs kn;
    return pgk_knob_set(pgk_find("gradient_clip"), &kn, "n", NULL, msg, len);
}
CASE(knob_assign_text)
{
    pgk_knobs kn;
    return pgk_knob_assign(pgk_find("gradient_clip"), &kn, NULL, msg, len);
}
CASE(knob_assign_desc)
{
    pgk_knobs kn;
    return pgk_knob_assign(NULL, &kn, "n=1", msg, len);
}
CASE(emit_desc)
{
    char *ptx = (char *)1;
    size_t n = 7;
    int rc = pgk_emit(NULL, PG_SM_90, NULL, &ptx, &n, msg, len);
    return ptx == NULL && n == 0 ? rc : 12345;
}
CASE(emit_ptx_out) { return pgk_emit(pgk_find("gradient_clip"), PG_SM_90, NULL, NULL, NULL, msg, len); }
CASE(emit_no_errbuf)
{
    (void)msg, (void)len;
    char *ptx = NULL;
    return pgk_emit(NULL, PG_SM_90, NULL, &ptx, NULL, NULL, 100);
}
CASE(free_null)
{
    (void)msg, (void)len;
    pgk_free(NULL);
    return 0;
}
CASE(launch_for_desc)
{
    pgk_launch l;
    return pgk_launch_for(NULL, NULL, &l, msg, len);
}
CASE(launch_for_out) { return pgk_launch_for(pgk_find("gradient_clip"), NULL, NULL, msg, len); }

static const null_case null_cases[] = {
    {"pg_kernel_create(out=NULL)", create_out, PG_EINVAL, NULL},
    {"pg_kernel_create(name=NULL)", create_name, PG_EINVAL, NULL},
    {"pg_kernel_destroy(NULL), (&NULL)", destroy_null, 0, NULL},
    {"pg_kernel_emit(k=NULL)", emit_kernel, PG_EINVAL, NULL},
    {"pg_kernel_emit(ptx=NULL)", emit_out, PG_EINVAL, NULL},
    {"pg_kernel_error/message/target/isa/param_*(NULL)", getters, PG_EINVAL, "no kernel"},
    {"pg_kernel_param_info(name=NULL, type=NULL)", param_info_outs, PG_ERANGE, NULL},
    {"every recording call with k=NULL", builder_null_kernel, 0, NULL},
    {"pg_param_add(name=NULL)", param_add_name, PG_EINVAL, "'(null)' is not a valid identifier"},
    {"pg_comment(text=NULL)", comment_text, PG_EINVAL, "pg_comment: a comment is one line"},
    {"pg_ld_v(d=NULL)", ld_v_dst, PG_EINVAL, "ld: no destination registers"},
    {"pg_st_v(v=NULL)", st_v_src, PG_EINVAL, "st: no values"},
    {"pg_mma_m16n8k16_f16_f32(NULL arrays)", mma_operands, PG_EINVAL, "mma: NULL operand array"},
    {"pg_ldmatrix(d=NULL)", ldmatrix_dst, PG_EINVAL, "ldmatrix: no destination registers"},
    {"pg_grid_stride_begin(loop=NULL)", grid_stride_loop, PG_EINVAL, "NULL loop"},
    {"pg_grid_stride_end(loop=NULL)", grid_stride_end, PG_EINVAL, "NULL loop"},
    {"pg_target_parse(NULL, ...), (..., NULL)", target_parse, PG_EINVAL, NULL},
    {"pg_type_parse(NULL, ...), (..., NULL)", type_parse, PG_EINVAL, NULL},
    {"pg_set_allocator(NULL)", set_allocator, 0, NULL},
    {"pgk_find/supports/knob_index/knobs_default(NULL)", catalog_lookups, 0, NULL},
    {"pgk_knob_set(d=NULL)", knob_set_desc, PG_EINVAL, "pgk_knob_set: NULL argument"},
    {"pgk_knob_set(kn=NULL)", knob_set_knobs, PG_EINVAL, "pgk_knob_set: NULL argument"},
    {"pgk_knob_set(name=NULL)", knob_set_name, PG_EINVAL, "pgk_knob_set: NULL argument"},
    {"pgk_knob_set(value=NULL)", knob_set_value, PG_EINVAL, "pgk_knob_set: NULL argument"},
    {"pgk_knob_assign(assignment=NULL)", knob_assign_text, PG_EINVAL, "NULL argument"},
    {"pgk_knob_assign(d=NULL)", knob_assign_desc, PG_EINVAL, "NULL argument"},
    {"pgk_emit(d=NULL)", emit_desc, PG_EINVAL, "pgk_emit: NULL argument"},
    {"pgk_emit(ptx=NULL)", emit_ptx_out, PG_EINVAL, "pgk_emit: NULL argument"},
    {"pgk_emit(err=NULL, errlen=100)", emit_no_errbuf, PG_EINVAL, NULL},
    {"pgk_free(NULL)", free_null, 0, NULL},
    {"pgk_launch_for(d=NULL)", launch_for_desc, PG_EINVAL, "pgk_launch_for: NULL argument"},
    {"pgk_launch_for(out=NULL)", launch_for_out, PG_EINVAL, "pgk_launch_for: NULL argument"},
};

static void test_nulls(void)
{
    for (size_t i = 0; i < COUNTOF(null_cases); i++) {
        const null_case *c = &null_cases[i];
        char msg[512] = "";
        int rc = c->run(msg, sizeof msg);
        if (rc != c->code)
            fprintf(stderr, "%s: got %s (%d), message \"%s\"\n", c->call, pg_err_name(rc), rc, msg);
        REQUIRE_INT_EQ(rc, c->code);
        if (c->words)
            REQUIRE_CONTAINS(msg, c->words);
    }
}

/* Every value a knob advertises launches: each knob at its max with the
 * others at their defaults, and all of them at their max at once. The
 * one combination of in-range values a launch refuses is documented in the
 * knob's help: a multi-tensor table cannot have more entries (nbufs) than
 * blocks. */
static void test_advertised_ranges(void)
{
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        pgk_knobs all;
        pgk_knobs_default(d, &all);
        for (size_t k = 0; k < d->nknobs; k++) {
            all.v[k] = d->knobs[k].max;
            if (!strcmp(d->knobs[k].name, "nbufs"))
                continue;
            pgk_knobs kn;
            pgk_knobs_default(d, &kn);
            kn.v[k] = d->knobs[k].max;
            pgk_launch l;
            char err[256] = "";
            int rc = pgk_launch_for(d, &kn, &l, err, sizeof err);
            if (rc)
                fprintf(stderr, "%s with %s = %u: %s\n", d->name, d->knobs[k].name,
                        d->knobs[k].max, err);
            REQUIRE_INT_EQ(rc, 0);
            REQUIRE(l.grid[1] <= 65535 && l.grid[2] <= 65535 && l.grid[0] <= INT32_MAX);
        }
        pgk_launch l;
        char err[256] = "";
        int rc = pgk_launch_for(d, &all, &l, err, sizeof err);
        if (rc)
            fprintf(stderr, "%s with every knob at its max: %s\n", d->name, err);
        REQUIRE_INT_EQ(rc, 0);
    }
}

/* Descriptors made by a caller are checked, never trusted: too many knobs
 * (pgk_knobs holds PGK_MAX_KNOBS), too many params, missing functions. */
static int fake_build(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d, (void)p, (void)kn;
    pg_ret(k);
    return pg_kernel_error(k);
}

static int fake_launch(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d, (void)kn;
    *out = (pgk_launch){{1, 1, 1}, {1, 1, 1}, 0};
    return 0;
}

static void test_custom_descriptors(void)
{
    static const pgk_knob knobs[PGK_MAX_KNOBS + 1] = {
        {"k0", 1, 0, 9, "", false}, {"k1", 1, 0, 9, "", false}, {"k2", 1, 0, 9, "", false},
        {"k3", 1, 0, 9, "", false}, {"k4", 1, 0, 9, "", false}, {"k5", 1, 0, 9, "", false},
        {"k6", 1, 0, 9, "", false}, {"k7", 1, 0, 9, "", false}, {"k8", 1, 0, 9, "", false},
        {"k9", 1, 0, 9, "", false}, {"k10", 1, 0, 9, "", false}, {"k11", 1, 0, 9, "", false},
        {"k12", 1, 0, 9, "", false},
    };
    static const pgk_param params[PGK_MAX_PARAMS + 1] = {
        {"p0", PG_U32, false},  {"p1", PG_U32, false},  {"p2", PG_U32, false},
        {"p3", PG_U32, false},  {"p4", PG_U32, false},  {"p5", PG_U32, false},
        {"p6", PG_U32, false},  {"p7", PG_U32, false},  {"p8", PG_U32, false},
        {"p9", PG_U32, false},  {"p10", PG_U32, false}, {"p11", PG_U32, false},
        {"p12", PG_U32, false}, {"p13", PG_U32, false}, {"p14", PG_U32, false},
        {"p15", PG_U32, false}, {"p16", PG_U32, false},
    };
    const pgk_desc good = {
        .name = "custom",
        .summary = "a caller's kernel",
        .params = params,
        .nparams = PGK_MAX_PARAMS,
        .knobs = knobs,
        .nknobs = PGK_MAX_KNOBS,
        .min_target = PG_SM_70,
        .build = fake_build,
        .launch = fake_launch,
    };
    char err[256] = "";
    pgk_ptx px;
    pgk_launch l;
    pgk_knobs kn;
    /* The limits themselves are fine. */
    REQUIRE_INT_EQ(pgk_desc_check(&good, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgk_knobs_default(&good, &kn), 0);
    REQUIRE_INT_EQ(pgk_emit_ptx(&good, PG_SM_90, &kn, &px, err, sizeof err), 0);
    REQUIRE_CONTAINS(px.text, "p15");
    pgk_free(px.text);
    REQUIRE_INT_EQ(pgk_launch_for(&good, &kn, &l, err, sizeof err), 0);

    struct {
        pgk_desc d;
        const char *words;
    } bad[] = {
        {good, "custom has 13 knobs; at most 12 are supported"},
        {good, "custom has 17 params; at most 16 are supported"},
        {good, "custom has no launch function"},
        {good, "custom has nparams > 0 but params is NULL"},
        {good, "custom has nknobs > 0 but knobs is NULL"},
        {good, "kernel descriptor has no name"},
    };
    bad[0].d.nknobs = PGK_MAX_KNOBS + 1;
    bad[1].d.nparams = PGK_MAX_PARAMS + 1;
    bad[2].d.launch = NULL;
    bad[3].d.params = NULL;
    bad[4].d.knobs = NULL;
    bad[5].d.name = NULL;
    for (size_t i = 0; i < COUNTOF(bad); i++) {
        const pgk_desc *d = &bad[i].d;
        err[0] = '\0';
        REQUIRE_INT_EQ(pgk_desc_check(d, err, sizeof err), PG_EINVAL);
        REQUIRE_CONTAINS(err, bad[i].words);
        err[0] = '\0';
        memset(&px, 0xab, sizeof px);
        REQUIRE_INT_EQ(pgk_emit_ptx(d, PG_SM_90, NULL, &px, err, sizeof err), PG_EINVAL);
        REQUIRE_CONTAINS(err, bad[i].words);
        REQUIRE(px.text == NULL && px.len == 0);
        char *ptx = (char *)1;
        REQUIRE_INT_EQ(pgk_emit(d, PG_SM_90, NULL, &ptx, NULL, err, sizeof err), PG_EINVAL);
        REQUIRE(ptx == NULL);
        err[0] = '\0';
        REQUIRE_INT_EQ(pgk_launch_for(d, NULL, &l, err, sizeof err), PG_EINVAL);
        REQUIRE_CONTAINS(err, bad[i].words);
    }
    /* No build function: a descriptor of PTX made elsewhere. It launches
     * (pgrt_module_load + the descriptor), but cannot be emitted. */
    {
        pgk_desc nobuild = good;
        nobuild.build = NULL;
        REQUIRE_INT_EQ(pgk_desc_check(&nobuild, err, sizeof err), 0);
        REQUIRE_INT_EQ(pgk_launch_for(&nobuild, NULL, &l, err, sizeof err), 0);
        err[0] = '\0';
        memset(&px, 0xab, sizeof px);
        REQUIRE_INT_EQ(pgk_emit_ptx(&nobuild, PG_SM_90, NULL, &px, err, sizeof err), PG_EINVAL);
        REQUIRE_CONTAINS(err, "custom has no build function");
        REQUIRE(px.text == NULL && px.len == 0);
    }
    /* The knob functions use the name and the knob table only: those are
     * refused there (pgk_knobs would overflow), the rest still works. */
    for (size_t i = 0; i < COUNTOF(bad); i++) {
        const pgk_desc *d = &bad[i].d;
        bool table = i == 0 || i == 4 || i == 5;
        memset(&kn, 0xab, sizeof kn);
        REQUIRE_INT_EQ(pgk_knobs_default(d, &kn), table ? PG_EINVAL : 0);
        REQUIRE_INT_EQ(kn.v[PGK_MAX_KNOBS - 1], table ? 0 : 1);
        err[0] = '\0';
        REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "k0", "2", err, sizeof err), table ? PG_EINVAL : 0);
        if (table)
            REQUIRE_CONTAINS(err, bad[i].words);
        REQUIRE_INT_EQ(pgk_knob_index(d, "k0"), table ? -1 : 0);
        REQUIRE(pgk_supports(d, PG_SM_90) == !table);
        char key[64];
        REQUIRE_INT_EQ(pgk_cache_key(d, PG_SM_90, &kn, key, sizeof key) < 0, table);
    }
    /* A default outside its own range. */
    pgk_knob off[1] = {{"n", 0, 1, 9, "", false}};
    pgk_desc d = good;
    d.knobs = off;
    d.nknobs = 1;
    REQUIRE_INT_EQ(pgk_knobs_default(&d, &kn), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_desc_check(&d, err, sizeof err), PG_EINVAL);
    REQUIRE_CONTAINS(err, "custom: knob n has default 0 outside its range [1, 9]");
}

int main(void)
{
    test_unknown_names();
    test_knob_values();
    test_raw_knobs();
    test_u32_sizes();
    test_gemm_products();
    test_advertised_ranges();
    test_custom_descriptors();
    test_nulls();
    TEST_DONE();
}
