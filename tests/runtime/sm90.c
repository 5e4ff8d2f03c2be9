/* SPDX-License-Identifier: MIT */
/*
 * The sm_90 launch paths against the fake driver (fakecuda.h): tensor maps
 * encoded through cuTensorMapEncodeTiled and passed by value, dynamic shared
 * memory past 48 KiB set once on the function, cluster launches through
 * cuLaunchKernelEx (and their graph capture), and arch-specific PTX
 * ("sm_90a") loading on its own compute capability only, and the target
 * override (PTXGEN_TARGET, pgrt_ctx_params.target) that builds for an older
 * family. The refusals are in tests/bad_input/test_bad_sm90.c.
 *
 * Usage: test_sm90 FAKE_LIBCUDA
 */
#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/ptxgen.h"
#include "sm90_probe.h"
#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>

static fake_fixture fk;

/* A context on a fake device of compute capability cc (major*10+minor). */
static int try_open(int cc, const char *target, pgrt_ctx **ctx)
{
    char v[16];
    snprintf(v, sizeof v, "%d", cc);
    setenv("FAKECUDA_CC", v, 1);
    pgrt_ctx_params p = {fk.path, 0, target};
    *ctx = NULL;
    int rc = pgrt_ctx_create(ctx, &p);
    unsetenv("FAKECUDA_CC");
    return rc;
}

static pgrt_ctx *open_cc(int cc)
{
    pgrt_ctx *ctx;
    int rc = try_open(cc, NULL, &ctx);
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    return ctx;
}

static pgrt_module *probe_module(pgrt_ctx *ctx, const char *target, const char *isa)
{
    char ptx[1024];
    probe_ptx(ptx, sizeof ptx, target, isa);
    pgrt_module *m = NULL;
    int rc = pgrt_module_load(ctx, ptx, &m);
    if (rc) {
        fprintf(stderr, "probe module (%s): %s: %s\n", target, pgrt_err_name(rc),
                pgrt_last_message());
        exit(1);
    }
    return m;
}

static const fakecuda_launch *last_launch(void) { return fk.launch_at(fk.launch_count() - 1); }

static uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void test_device(void)
{
    static const struct {
        int cc;
        pg_target target, arch;
    } cases[] = {
        {90, PG_SM_90, PG_SM_90A},    {89, PG_SM_89, PG_SM_89},
        {100, PG_SM_100, PG_SM_100A}, {103, PG_SM_100, PG_SM_100},
        {120, PG_SM_120, PG_SM_120A}, {121, PG_SM_121, PG_SM_121},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pgrt_ctx *ctx = open_cc(cases[i].cc);
        pgrt_device_info info;
        REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
        REQUIRE_INT_EQ(info.target, cases[i].target);
        REQUIRE_INT_EQ(info.arch_target, cases[i].arch);
        REQUIRE_INT_EQ(info.shared_optin_bytes, 232448);
        pgrt_ctx_destroy(&ctx);
    }
    setenv("FAKECUDA_SMEM_OPTIN", "101376", 1);
    pgrt_ctx *ctx = open_cc(86);
    unsetenv("FAKECUDA_SMEM_OPTIN");
    pgrt_device_info info;
    REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
    REQUIRE_INT_EQ(info.shared_optin_bytes, 101376);
    pgrt_ctx_destroy(&ctx);
}

/* sm_90a on 9.0, sm_100a on 10.0, sm_120a on 12.0 (direct load); the
 * other capabilities are refused in the bad-input catalogue. */
static void test_arch_specific(void)
{
    static const struct {
        int cc;
        const char *target, *isa;
    } ok[] = {{90, "sm_90a", "8.0"}, {100, "sm_100a", "8.6"}, {120, "sm_120a", "8.7"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pgrt_ctx *ctx = open_cc(ok[i].cc);
        pgrt_module *m = probe_module(ctx, ok[i].target, ok[i].isa);
        pgrt_kernel *k = NULL;
        REQUIRE_INT_EQ(pgrt_module_kernel(m, &smem_probe_desc, &k), 0);
        pgrt_module_destroy(&m);
        pgrt_ctx_destroy(&ctx);
    }

    /* The pure checks: an "a" target on its plain target's device. */
    pgrt_ptx_info a90 = {80, "sm_90a", 64};
    char err[256];
    REQUIRE_INT_EQ(pgrt_ptx_check(&a90, PG_SM_90, 12080, err, sizeof err), 0);
    pgrt_device_info dev;
    memset(&dev, 0, sizeof dev);
    dev.cc_major = 9;
    dev.cc_minor = 0;
    dev.target = PG_SM_90;
    dev.driver_version = 12080;
    REQUIRE_INT_EQ(pgrt_ptx_check_device(&a90, &dev, err, sizeof err), 0);
    /* Plain PTX is checked as before. */
    pgrt_ptx_info p90 = {78, "sm_90", 64};
    REQUIRE_INT_EQ(pgrt_ptx_check_device(&p90, &dev, err, sizeof err), 0);
}

/* The target override: an older family's PTX on a newer device, chosen
 * by the caller or $PTXGEN_TARGET; F-PTX-001 then holds against it. */
static void test_target_override(void)
{
    static const struct {
        int cc;
        const char *want;
        pg_target target; /* and arch_target: an override sets both */
        bool overridden;
    } ok[] = {
        {90, "sm_80", PG_SM_80, true},    {90, "sm_70", PG_SM_70, true},
        {90, "sm_89", PG_SM_89, true},    {90, "sm_90", PG_SM_90, true},
        {90, "sm_90a", PG_SM_90A, false}, {120, "sm_75", PG_SM_75, true},
        {86, "sm_86", PG_SM_86, false},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        for (int by_env = 0; by_env < 2; by_env++) {
            pgrt_ctx *ctx;
            if (by_env)
                setenv("PTXGEN_TARGET", ok[i].want, 1);
            int rc = try_open(ok[i].cc, by_env ? NULL : ok[i].want, &ctx);
            unsetenv("PTXGEN_TARGET");
            REQUIRE_INT_EQ(rc, 0);
            pgrt_device_info info;
            REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
            pg_target native;
            REQUIRE_INT_EQ(pgrt_target_for_cc(ok[i].cc / 10, ok[i].cc % 10, &native), 0);
            REQUIRE_INT_EQ(info.native_target, native);
            REQUIRE_INT_EQ(info.target_override, ok[i].overridden);
            if (ok[i].overridden) {
                REQUIRE_INT_EQ(info.target, ok[i].target);
                REQUIRE_INT_EQ(info.arch_target, ok[i].target);
                REQUIRE_INT_EQ(pgrt_ctx_target(ctx), ok[i].target);
            } else {
                REQUIRE_INT_EQ(info.arch_target, ok[i].target);
            }
            pgrt_ctx_destroy(&ctx);
        }
    }

    /* Under sm_80 on a 9.0 device: sm_80 PTX loads, the device's own
     * targets no longer do, and a catalog kernel is built for sm_80. */
    pgrt_ctx *ctx;
    REQUIRE_INT_EQ(try_open(90, "sm_80", &ctx), 0);
    pgrt_module *m = probe_module(ctx, "sm_80", "7.0");
    pgrt_module_destroy(&m);
    char ptx[1024];
    probe_ptx(ptx, sizeof ptx, "sm_90", "7.8");
    REQUIRE_INT_EQ(pgrt_module_load(ctx, ptx, &m), PGRT_ETARGET);
    REQUIRE_CONTAINS(pgrt_last_message(), "F-PTX-001 violated: PTX target sm_90 != device "
                                          "target sm_80");
    probe_ptx(ptx, sizeof ptx, "sm_90a", "8.0");
    REQUIRE_INT_EQ(pgrt_module_load(ctx, ptx, &m), PGRT_ETARGET);
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), 0);
    /* The wgmma GEMM needs sm_90a, which the override took away. */
    REQUIRE(pgrt_kernel_get(ctx, pgk_find("gemm_sm90"), NULL, &k) != 0);
    REQUIRE_CONTAINS(pgrt_last_message(), "sm_80");
    pgrt_ctx_destroy(&ctx);

    /* The caller's choice wins over the environment's; an empty variable
     * is no override. */
    setenv("PTXGEN_TARGET", "sm_80", 1);
    REQUIRE_INT_EQ(try_open(90, "sm_75", &ctx), 0);
    REQUIRE_INT_EQ(pgrt_ctx_target(ctx), PG_SM_75);
    pgrt_ctx_destroy(&ctx);
    setenv("PTXGEN_TARGET", "", 1);
    REQUIRE_INT_EQ(try_open(90, NULL, &ctx), 0);
    pgrt_device_info info;
    REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
    REQUIRE_INT_EQ(info.arch_target, PG_SM_90A);
    REQUIRE(!info.target_override);
    pgrt_ctx_destroy(&ctx);
    unsetenv("PTXGEN_TARGET");

    /* Refused, naming the value, where it came from and what would do. */
    static const struct {
        int cc;
        const char *want, *env, *msg;
    } bad[] = {
        {90, "sm_100", NULL, "pgrt_ctx_params.target=sm_100: device 0 (Fake GPU, compute "
                             "capability 9.0) cannot run sm_100 PTX; a target override must be "
                             "sm_90 or older, or sm_90a"},
        {89, NULL, "sm_90a", "PTXGEN_TARGET=sm_90a: device 0 (Fake GPU, compute capability 8.9) "
                             "cannot run sm_90a PTX; a target override must be sm_89 or older"},
        {80, NULL, "sm_86", "cannot run sm_86 PTX; a target override must be sm_80 or older"},
        {100, NULL, "sm_90a", "cannot run sm_90a PTX; a target override must be sm_100 or "
                              "older, or sm_100a"},
        {90, NULL, "sm80", "PTXGEN_TARGET=sm80 is not a ptxgen target (ptxgen-dump --targets "
                           "lists them)"},
        {90, "native", NULL, "pgrt_ctx_params.target=native is not a ptxgen target"},
        {90, NULL, "sm_8000000000000000000000000000000000000000",
         "PTXGEN_TARGET=sm_80000000000000000000000000000... is not a ptxgen target"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].env)
            setenv("PTXGEN_TARGET", bad[i].env, 1);
        REQUIRE_INT_EQ(try_open(bad[i].cc, bad[i].want, &ctx), PGRT_ETARGET);
        REQUIRE(ctx == NULL);
        REQUIRE_CONTAINS(pgrt_last_message(), bad[i].msg);
        unsetenv("PTXGEN_TARGET");
    }
}

static void test_tensor_map(pgrt_ctx *ctx)
{
    pgrt_buf *a = NULL, *c = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_BF16, 64 * 128, &a), 0);
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F16, 4 * 32 * 64, &c), 0);
    pgrt_devptr base = pgrt_buf_ptr(a);
    int tm0 = fk.tmap_count();

    /* 64 rows x 128 bf16 columns, 256-byte rows, 32 x 64 tiles, 128-byte
     * swizzle: the row of a tile is the whole span. */
    pgrt_tensor_map m;
    memset(&m, 0xee, sizeof m);
    REQUIRE_INT_EQ(pgrt_tensor_map_encode_2d(ctx, &m, PG_BF16, base, 64, 128, 256, 32, 64, 128), 0);
    REQUIRE_INT_EQ(fk.tmap_count(), tm0 + 1);
    REQUIRE_INT_EQ(m.encoded, PGRT_TENSOR_MAP_ENCODED);
    REQUIRE_INT_EQ(m.rank, 2);
    REQUIRE_INT_EQ(m.dtype, PG_BF16);
    REQUIRE(m.base == base && m.dims[0] == 128 && m.dims[1] == 64 && m.dims[2] == 0);
    REQUIRE(m.box[0] == 64 && m.box[1] == 32 && m.swizzle == 128);
    /* What the driver was given, from the fake's layout. */
    const unsigned char *o = m.opaque;
    REQUIRE_INT_EQ(get32(o + 124), FAKECUDA_TMAP_MAGIC);
    REQUIRE(get64(o) == base);
    REQUIRE_INT_EQ(get32(o + 8), 9); /* CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 */
    REQUIRE_INT_EQ(get32(o + 12), 2);
    REQUIRE(get64(o + 16) == 128 && get64(o + 24) == 64);
    REQUIRE(get64(o + 56) == 256);
    REQUIRE(get32(o + 88) == 64 && get32(o + 92) == 32);
    REQUIRE_INT_EQ(get32(o + 108), 0); /* interleave none */
    REQUIRE_INT_EQ(get32(o + 112), 3); /* CU_TENSOR_MAP_SWIZZLE_128B */
    REQUIRE_INT_EQ(get32(o + 116), 3); /* L2 promotion 256 B */
    REQUIRE_INT_EQ(get32(o + 120), 0); /* out of bounds: zeros */

    /* A batch of 4 f16 matrices 32 x 64, no swizzle; a 64-byte swizzle on
     * a 32-element (64-byte) row. */
    pgrt_tensor_map m3;
    const uint64_t dims[3] = {64, 32, 4}, strides[2] = {128, 128 * 32};
    const uint32_t box[3] = {64, 16, 1};
    REQUIRE_INT_EQ(pgrt_tensor_map_encode_3d(ctx, &m3, PG_F16, pgrt_buf_ptr(c), dims, strides, box,
                                             0), 0);
    o = m3.opaque;
    REQUIRE_INT_EQ(get32(o + 8), 6); /* FLOAT16 */
    REQUIRE_INT_EQ(get32(o + 12), 3);
    REQUIRE(get64(o + 32) == 4 && get64(o + 64) == 4096 && get32(o + 96) == 1);
    REQUIRE_INT_EQ(get32(o + 112), 0);
    const uint32_t box64[3] = {32, 16, 1};
    REQUIRE_INT_EQ(pgrt_tensor_map_encode_3d(ctx, &m3, PG_F16, pgrt_buf_ptr(c), dims, strides,
                                             box64, 64), 0);
    REQUIRE_INT_EQ(get32(m3.opaque + 112), 2);

    /* Rank 5 f32, padded strides; a view 16 bytes in is aligned enough. */
    pgrt_tensor_map m5;
    const uint64_t d5[5] = {4, 2, 2, 2, 2}, s5[4] = {32, 64, 128, 256};
    const uint32_t b5[5] = {4, 2, 1, 1, 2};
    REQUIRE_INT_EQ(pgrt_tensor_map_encode(ctx, &m5, PG_F32, 5, base + 16, d5, s5, b5, 0), 0);
    REQUIRE_INT_EQ(get32(m5.opaque + 8), 7);
    REQUIRE(get64(m5.opaque) == base + 16 && get64(m5.opaque + 80) == 256);
    REQUIRE_INT_EQ(fk.tmap_count(), tm0 + 4);

    /* A heap map from aligned_alloc encodes; a pointer that is not 64-byte
     * aligned (plain malloc gives 16) is refused before it is touched. */
    pgrt_tensor_map *h = aligned_alloc(64, sizeof(pgrt_tensor_map));
    REQUIRE(h != NULL);
    REQUIRE_INT_EQ(pgrt_tensor_map_encode_2d(ctx, h, PG_BF16, base, 64, 128, 256, 32, 64, 128), 0);
    REQUIRE(memcmp(h->opaque, m.opaque, 128) == 0);
    free(h);
    unsigned char *raw = malloc(sizeof(pgrt_tensor_map) + 80);
    REQUIRE(raw != NULL);
    uintptr_t at = ((uintptr_t)raw + 63) / 64 * 64 + 16;
    int tm_before = fk.tmap_count();
    REQUIRE_INT_EQ(pgrt_tensor_map_encode_2d(ctx, (pgrt_tensor_map *)at, PG_BF16, base, 64, 128,
                                             256, 32, 64, 128),
                   PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "is not 64-byte aligned");
    REQUIRE_INT_EQ(fk.tmap_count(), tm_before);
    free(raw);

    /* By value at launch: the kernel sees the 128 bytes, in a graph too,
     * whatever happens to the caller's map afterwards. */
    pgrt_module *mod = probe_module(ctx, "sm_90", "7.8");
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_module_kernel(mod, &tma_probe_desc, &k), 0);
    pgrt_buf *out = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 16, &out), 0);
    pgrt_arg args[2] = {pgrt_arg_tensor_map(&m), pgrt_arg_buf(out)};
    pgk_knobs kn = probe_knobs_of(4, 0, 0, 0, 0);
    int n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, NULL, &kn, args, 2), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    const fakecuda_launch *l = last_launch();
    REQUIRE_STR_EQ(l->name, "tma_probe");
    REQUIRE_INT_EQ(l->nparams, 2);
    REQUIRE_INT_EQ(l->sizes[0], 128);
    REQUIRE_INT_EQ(l->sizes[1], 8);
    REQUIRE_INT_EQ(l->nbig, 1);
    REQUIRE_INT_EQ(l->big_index[0], 0);
    REQUIRE(memcmp(l->big[0], m.opaque, 128) == 0);
    REQUIRE(l->params[1] == pgrt_buf_ptr(out));
    REQUIRE_INT_EQ(l->ex, 0);

    pgrt_stream *s = NULL;
    pgrt_graph *g = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    pgrt_tensor_map temp = m;
    args[0] = pgrt_arg_tensor_map(&temp);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, s, &kn, args, 2), 0);
    /* The caller reuses its map before the graph runs. */
    REQUIRE_INT_EQ(pgrt_tensor_map_encode_3d(ctx, &temp, PG_F16, pgrt_buf_ptr(c), dims, strides,
                                             box, 0), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g), 0);
    n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_graph_launch(g, s), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    l = last_launch();
    REQUIRE_INT_EQ(l->replayed, 1);
    REQUIRE(memcmp(l->big[0], m.opaque, 128) == 0);
    REQUIRE(memcmp(l->big[0], temp.opaque, 128) != 0);
    pgrt_graph_destroy(&g);

    /* A tensor-map kernel in a cluster, captured. */
    pgk_knobs kc = probe_knobs_of(8, 0, 2, 1, 1);
    args[0] = pgrt_arg_tensor_map(&m);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, s, &kc, args, 2), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g), 0);
    REQUIRE_INT_EQ(pgrt_graph_launch(g, s), 0);
    l = last_launch();
    REQUIRE(l->replayed && l->ex == 1 && l->cluster[0] == 2 && l->cluster[1] == 1);
    REQUIRE(memcmp(l->big[0], m.opaque, 128) == 0);
    pgrt_graph_destroy(&g);
    pgrt_stream_destroy(&s);

    pgrt_buf_destroy(&out);
    pgrt_module_destroy(&mod);
    pgrt_buf_destroy(&a);
    pgrt_buf_destroy(&c);
}

/* The attribute calls since the last reset, on smem_probe. */
static int smem_sets(void)
{
    int n = 0;
    for (int i = 0; i < fk.attr_count(); i++)
        if (!strcmp(fk.attr_at(i)->name, "smem_probe") && fk.attr_at(i)->attr == 8)
            n++;
    return n;
}
static int last_smem_set(void) { return fk.attr_at(fk.attr_count() - 1)->value; }

static void launch_smem(pgrt_kernel *k, pgrt_buf *out, uint32_t bytes)
{
    pgk_knobs kn = probe_knobs_of(2, bytes, 0, 0, 0);
    pgrt_arg a = pgrt_arg_buf(out);
    int n0 = fk.launch_count();
    int rc = pgrt_kernel_launch(k, NULL, &kn, &a, 1);
    if (rc)
        fprintf(stderr, "smem %u: %s\n", bytes, pgrt_last_message());
    REQUIRE_INT_EQ(rc, 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    REQUIRE_INT_EQ(last_launch()->shared, bytes);
}

static void test_shared(pgrt_ctx *ctx)
{
    pgrt_buf *out = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 16, &out), 0);
    pgrt_module *mod = probe_module(ctx, "sm_90", "7.8");
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_module_kernel(mod, &smem_probe_desc, &k), 0);
    fk.reset();

    /* Within the default 48 KiB: no attribute. */
    launch_smem(k, out, 0);
    launch_smem(k, out, 40000);
    launch_smem(k, out, 48 * 1024);
    REQUIRE_INT_EQ(smem_sets(), 0);
    /* Past it: set once a size, raised when a launch needs more. */
    launch_smem(k, out, 100000);
    REQUIRE_INT_EQ(smem_sets(), 1);
    REQUIRE_INT_EQ(last_smem_set(), 100000);
    launch_smem(k, out, 100000);
    launch_smem(k, out, 64 * 1024);
    launch_smem(k, out, 1000);
    REQUIRE_INT_EQ(smem_sets(), 1);
    launch_smem(k, out, 200000);
    REQUIRE_INT_EQ(smem_sets(), 2);
    REQUIRE_INT_EQ(last_smem_set(), 200000);
    launch_smem(k, out, 232448); /* exactly the opt-in maximum */
    REQUIRE_INT_EQ(smem_sets(), 3);

    /* A captured launch within the cached size makes no driver call; the
     * replay keeps its shared bytes. */
    pgrt_stream *s = NULL;
    pgrt_graph *g = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    pgk_knobs kn = probe_knobs_of(2, 150000, 0, 0, 0);
    pgrt_arg a = pgrt_arg_buf(out);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, s, &kn, &a, 1), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g), 0);
    REQUIRE_INT_EQ(smem_sets(), 3);
    REQUIRE_INT_EQ(pgrt_graph_launch(g, s), 0);
    REQUIRE(last_launch()->replayed && last_launch()->shared == 150000);
    pgrt_graph_destroy(&g);
    pgrt_stream_destroy(&s);
    pgrt_module_destroy(&mod);

    /* Static shared memory counts: 16 KiB static leaves 32 KiB by default,
     * so 40000 dynamic bytes need the attribute (the fake, like the
     * driver, refuses the launch otherwise). */
    setenv("FAKECUDA_STATIC_SMEM", "16384", 1);
    mod = probe_module(ctx, "sm_90", "7.8");
    REQUIRE_INT_EQ(pgrt_module_kernel(mod, &smem_probe_desc, &k), 0);
    fk.reset();
    launch_smem(k, out, 32768);
    REQUIRE_INT_EQ(smem_sets(), 0);
    launch_smem(k, out, 40000);
    REQUIRE_INT_EQ(smem_sets(), 1);
    launch_smem(k, out, 232448 - 16384);
    REQUIRE_INT_EQ(smem_sets(), 2);
    unsetenv("FAKECUDA_STATIC_SMEM");
    pgrt_module_destroy(&mod);
    pgrt_buf_destroy(&out);
}

static void test_cluster(pgrt_ctx *ctx)
{
    pgrt_buf *out = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_F32, 16, &out), 0);
    pgrt_module *mod = probe_module(ctx, "sm_90", "7.8");
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_module_kernel(mod, &smem_probe_desc, &k), 0);
    pgrt_arg a = pgrt_arg_buf(out);

    static const uint32_t shapes[][4] = {
        {8, 2, 1, 1}, {8, 8, 1, 1}, {6, 3, 1, 1}, {16, 1, 1, 1}, {8, 0, 0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        pgk_knobs kn = probe_knobs_of(shapes[i][0], 0, shapes[i][1], shapes[i][2], shapes[i][3]);
        REQUIRE_INT_EQ(pgrt_kernel_launch(k, NULL, &kn, &a, 1), 0);
        const fakecuda_launch *l = last_launch();
        bool cluster = shapes[i][1] != 0;
        REQUIRE_INT_EQ(l->ex, cluster);
        REQUIRE_INT_EQ(l->grid[0], shapes[i][0]);
        for (int d = 0; d < 3; d++)
            REQUIRE_INT_EQ(l->cluster[d], shapes[i][1 + d]);
    }

    /* A cluster with more than 48 KiB of dynamic shared memory. */
    fk.reset();
    pgk_knobs kn = probe_knobs_of(4, 120000, 2, 1, 1);
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, NULL, &kn, &a, 1), 0);
    REQUIRE(last_launch()->ex == 1 && last_launch()->shared == 120000);
    REQUIRE_INT_EQ(smem_sets(), 1);

    /* Captured: the graph keeps the attribute; a plain launch captured
     * beside it stays plain. */
    pgrt_stream *s = NULL;
    pgrt_graph *g = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    pgk_knobs plain = probe_knobs_of(4, 0, 0, 0, 0);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, s, &kn, &a, 1), 0);
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, s, &plain, &a, 1), 0);
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g), 0);
    int n0 = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_graph_launch(g, s), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 2);
    const fakecuda_launch *l1 = fk.launch_at(n0), *l2 = fk.launch_at(n0 + 1);
    REQUIRE(l1->replayed && l1->ex == 1 && l1->cluster[0] == 2 && l1->shared == 120000);
    REQUIRE(l2->replayed && l2->ex == 0 && l2->cluster[0] == 0);
    pgrt_graph_destroy(&g);
    pgrt_stream_destroy(&s);
    pgrt_module_destroy(&mod);
    pgrt_buf_destroy(&out);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA");
    fk.reset();

    test_device();
    test_arch_specific();
    test_target_override();
    pgrt_ctx *ctx = open_cc(90);
    test_tensor_map(ctx);
    test_shared(ctx);
    test_cluster(ctx);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
