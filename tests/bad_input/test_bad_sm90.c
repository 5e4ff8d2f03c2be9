/* SPDX-License-Identifier: MIT */
/*
 * Bad input to the sm_90 launch paths, against the fake driver: tensor
 * maps whose arguments break a rule of cuTensorMapEncodeTiled, tensor-map
 * launch arguments of the wrong kind, dynamic shared memory past the
 * device's opt-in maximum, clusters that do not tile the grid or exceed the
 * portable size, devices and drivers without these features, and "a" PTX
 * on another compute capability. Each case asserts the code, the words of
 * the message, and that nothing reached the driver (no map encoded, no
 * module loaded, no launch).
 *
 * Usage: test_bad_sm90 FAKE_LIBCUDA
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

#define EXPECT(call, code, words)                                              \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != (code))                                                     \
            fprintf(stderr, "%s: %s: %s\n", #call, pgrt_err_name(rc_),         \
                    pgrt_last_message());                                      \
        REQUIRE_INT_EQ(rc_, code);                                             \
        REQUIRE_CONTAINS(pgrt_last_message(), words);                          \
    } while (0)

/* A context on a fake device; env "NAME=VALUE" (or NULL) set while it is
 * made. */
static pgrt_ctx *open_with(int cc, const char *env)
{
    char v[16], name[64] = "";
    snprintf(v, sizeof v, "%d", cc);
    setenv("FAKECUDA_CC", v, 1);
    if (env) {
        const char *eq = strchr(env, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - env), env);
        setenv(name, eq + 1, 1);
    }
    pgrt_ctx_params p = {fk.path, 0};
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, &p);
    unsetenv("FAKECUDA_CC");
    if (env)
        unsetenv(name);
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    return ctx;
}

static pgrt_kernel *probe_kernel(pgrt_ctx *ctx, const char *target, const pgk_desc *d,
                                 pgrt_module **mod)
{
    char ptx[1024];
    probe_ptx(ptx, sizeof ptx, target, "7.8");
    pgrt_kernel *k = NULL;
    if (pgrt_module_load(ctx, ptx, mod) || pgrt_module_kernel(*mod, d, &k)) {
        fprintf(stderr, "probe: %s\n", pgrt_last_message());
        exit(1);
    }
    return k;
}

static void test_encode(pgrt_ctx *ctx)
{
    pgrt_buf *b = NULL;
    if (pgrt_buf_alloc(ctx, PG_BF16, 64 * 128, &b))
        exit(1);
    pgrt_devptr base = pgrt_buf_ptr(b);
    int tm0 = fk.tmap_count();
    pgrt_tensor_map m;
    memset(&m, 0, sizeof m);
    const uint64_t dims[2] = {128, 64}, strides[1] = {256};
    const uint32_t box[2] = {64, 32};

#define ENC(dt, rank, base_, d, s, bx, sw) pgrt_tensor_map_encode(ctx, &m, dt, rank, base_, d, s, bx, sw)
    EXPECT(pgrt_tensor_map_encode(NULL, &m, PG_BF16, 2, base, dims, strides, box, 0), PGRT_EINVAL,
           "pgrt_tensor_map_encode: ctx is NULL");
    EXPECT(pgrt_tensor_map_encode(ctx, NULL, PG_BF16, 2, base, dims, strides, box, 0), PGRT_EINVAL,
           "pgrt_tensor_map_encode: out is NULL");
    EXPECT(ENC(PG_PRED, 2, base, dims, strides, box, 0), PGRT_EINVAL,
           "pgrt_tensor_map_encode: dtype pred has no tensor map data type");
    EXPECT(ENC((pg_type)99, 2, base, dims, strides, box, 0), PGRT_EINVAL,
           "dtype #(invalid) has no tensor map data type");
    EXPECT(ENC(PG_BF16, 1, base, dims, strides, box, 0), PGRT_EINVAL, "rank 1 is not 2..5");
    EXPECT(ENC(PG_BF16, 6, base, dims, strides, box, 0), PGRT_EINVAL, "rank 6 is not 2..5");
    EXPECT(ENC(PG_BF16, 2, base, NULL, strides, box, 0), PGRT_EINVAL, "dims is NULL");
    EXPECT(ENC(PG_BF16, 2, base, dims, NULL, box, 0), PGRT_EINVAL, "strides is NULL");
    EXPECT(ENC(PG_BF16, 2, base, dims, strides, NULL, 0), PGRT_EINVAL, "box is NULL");
    EXPECT(ENC(PG_BF16, 2, 0, dims, strides, box, 0), PGRT_EINVAL,
           "pgrt_tensor_map_encode: base is a null device pointer");
    EXPECT(ENC(PG_BF16, 2, base + 8, dims, strides, box, 0), PGRT_EINVAL,
           "is not 16-byte aligned");
    EXPECT(ENC(PG_BF16, 2, base, dims, strides, box, 16), PGRT_EINVAL,
           "swizzle 16 is not 0, 32, 64 or 128 (bytes of the span)");
    const uint64_t d0[2] = {128, 0}, dbig[2] = {(1ull << 32) + 1, 1};
    EXPECT(ENC(PG_BF16, 2, base, d0, strides, box, 0), PGRT_ERANGE, "dims[1] = 0 is not 1..2^32");
    EXPECT(ENC(PG_BF16, 2, base, dbig, strides, box, 0), PGRT_ERANGE,
           "dims[0] = 4294967297 is not 1..2^32");
    const uint64_t s100[1] = {100}, s40[1] = {1ull << 40}, s128[1] = {128};
    EXPECT(ENC(PG_BF16, 2, base, dims, s100, box, 0), PGRT_EINVAL,
           "strides[0] = 100 bytes is not a multiple of 16");
    EXPECT(ENC(PG_BF16, 2, base, dims, s40, box, 0), PGRT_ERANGE,
           "strides[0] = 1099511627776 bytes is not below 2^40");
    /* The row pitch in elements, not bytes. */
    EXPECT(pgrt_tensor_map_encode_2d(ctx, &m, PG_BF16, base, 64, 128, 128, 32, 64, 0), PGRT_EINVAL,
           "strides[0] = 128 bytes is less than the 256 bytes of dimension 0 inside it");
    EXPECT(ENC(PG_BF16, 2, base, dims, s128, box, 0), PGRT_EINVAL, "elements would overlap");
    /* The batch stride smaller than a matrix. */
    const uint64_t d3[3] = {128, 64, 2}, s3[2] = {256, 256 * 32};
    const uint32_t b3[3] = {64, 32, 1};
    EXPECT(pgrt_tensor_map_encode_3d(ctx, &m, PG_BF16, base, d3, s3, b3, 0), PGRT_EINVAL,
           "strides[1] = 8192 bytes is less than the 16384 bytes of dimension 1 inside it");
    const uint32_t b0[2] = {64, 0}, b257[2] = {64, 257}, b4[2] = {4, 32};
    EXPECT(ENC(PG_BF16, 2, base, dims, strides, b0, 0), PGRT_ERANGE, "box[1] = 0 is not 1..256");
    EXPECT(ENC(PG_BF16, 2, base, dims, strides, b257, 0), PGRT_ERANGE,
           "box[1] = 257 is not 1..256");
    EXPECT(ENC(PG_BF16, 2, base, dims, strides, b4, 0), PGRT_EINVAL,
           "the box's inner row, box[0] = 4 x 2 bytes = 8 bytes, is not a multiple of 16");
    EXPECT(ENC(PG_BF16, 2, base, dims, strides, box, 64), PGRT_EINVAL,
           "box[0] = 64 x 2 bytes = 128 bytes, exceeds the 64-byte swizzle span");
    const uint64_t s512[1] = {512};
    EXPECT(ENC(PG_F32, 2, base, dims, s512, box, 128), PGRT_EINVAL,
           "box[0] = 64 x 4 bytes = 256 bytes, exceeds the 128-byte swizzle span");
#undef ENC
    REQUIRE_INT_EQ(fk.tmap_count(), tm0);
    REQUIRE(m.encoded != PGRT_TENSOR_MAP_ENCODED);

    /* A device without tensor maps; a driver without the call. */
    pgrt_ctx *c89 = open_with(89, NULL);
    EXPECT(pgrt_tensor_map_encode_2d(c89, &m, PG_BF16, base, 64, 128, 256, 32, 64, 0),
           PGRT_ETARGET, "tensor maps need compute capability 9.0 or newer; this device is 8.9");
    pgrt_ctx_destroy(&c89);
    pgrt_ctx *c118 = open_with(90, "FAKECUDA_VERSION=11080");
    EXPECT(pgrt_tensor_map_encode_2d(c118, &m, PG_BF16, base, 64, 128, 256, 32, 64, 0),
           PGRT_EDRIVER, "the driver lacks cuTensorMapEncodeTiled (CUDA 12.0); this driver is "
           "CUDA 11.8");
    pgrt_ctx_destroy(&c118);
    REQUIRE_INT_EQ(fk.tmap_count(), tm0);
    pgrt_buf_destroy(&b);
}

static void test_args(pgrt_ctx *ctx)
{
    pgrt_module *mod = NULL;
    pgrt_kernel *k = probe_kernel(ctx, "sm_90", &tma_probe_desc, &mod);
    pgrt_buf *out = NULL;
    if (pgrt_buf_alloc(ctx, PG_F32, 16, &out))
        exit(1);
    pgrt_tensor_map m, never;
    memset(&never, 0, sizeof never);
    if (pgrt_tensor_map_encode_2d(ctx, &m, PG_F32, pgrt_buf_ptr(out), 4, 4, 16, 4, 4, 0))
        exit(1);
    pgrt_tensor_map failed = m;
    const uint32_t bad_box[2] = {0, 1};
    const uint64_t dims[2] = {4, 4}, strides[1] = {16};
    REQUIRE(pgrt_tensor_map_encode(ctx, &failed, PG_F32, 2, pgrt_buf_ptr(out), dims, strides,
                                   bad_box, 0) != 0);
    pgk_knobs kn = probe_knobs_of(1, 0, 0, 0, 0);
    int n0 = fk.launch_count();
    pgrt_arg a[2] = {pgrt_arg_buf(out), pgrt_arg_buf(out)};
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, a, 2), PGRT_EARGS,
           "tma_probe argument 0 (tmap): expected a tensor map (pgrt_arg_tensor_map), got a "
           "device pointer");
    a[0] = pgrt_arg_u32(7);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, a, 2), PGRT_EARGS,
           "tma_probe argument 0 (tmap): expected a tensor map (pgrt_arg_tensor_map), got u32");
    a[0] = pgrt_arg_tensor_map(NULL);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, a, 2), PGRT_EARGS,
           "tma_probe argument 0 (tmap): null tensor map");
    a[0] = pgrt_arg_tensor_map(&never);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, a, 2), PGRT_EARGS,
           "tma_probe argument 0 (tmap): the tensor map was never encoded (pgrt_tensor_map_encode)");
    a[0] = pgrt_arg_tensor_map(&failed);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, a, 2), PGRT_EARGS, "the tensor map was never encoded");
    a[0] = pgrt_arg_tensor_map(&m);
    a[1] = pgrt_arg_tensor_map(&m);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, a, 2), PGRT_EARGS,
           "tma_probe argument 1 (out): expected a device pointer, got a tensor map");
    pgrt_module *mod2 = NULL;
    pgrt_kernel *ks = probe_kernel(ctx, "sm_90", &smem_probe_desc, &mod2);
    EXPECT(pgrt_kernel_launch(ks, NULL, &kn, a, 1), PGRT_EARGS,
           "smem_probe argument 0 (out): expected a device pointer, got a tensor map");
    /* The pure check says the same. */
    char err[256];
    REQUIRE_INT_EQ(pgrt_args_check(&smem_probe_desc, NULL, a, 1, err, sizeof err), PGRT_EARGS);
    REQUIRE_CONTAINS(err, "got a tensor map");
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    pgrt_module_destroy(&mod2);
    pgrt_module_destroy(&mod);
    pgrt_buf_destroy(&out);
}

/* smem_probe launched with kn on a device of its own (compute capability
 * cc, fake-driver steering env, built for target): it must fail with code
 * and words, launching nothing. With plain_too, a launch without a
 * cluster or big shared memory must then still go. */
static void launch_alone(int cc, const char *env, const char *target, pgk_knobs kn, int code,
                         const char *words, bool plain_too)
{
    pgrt_ctx *c = open_with(cc, env);
    pgrt_buf *o = NULL;
    if (pgrt_buf_alloc(c, PG_F32, 16, &o))
        exit(1);
    pgrt_arg a = pgrt_arg_buf(o);
    pgrt_module *mod = NULL;
    pgrt_kernel *k = probe_kernel(c, target, &smem_probe_desc, &mod);
    int n0 = fk.launch_count();
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), code, words);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    if (plain_too) {
        pgk_knobs plain = probe_knobs_of(8, 0, 0, 0, 0);
        REQUIRE_INT_EQ(pgrt_kernel_launch(k, NULL, &plain, &a, 1), 0);
        REQUIRE_INT_EQ(fk.launch_count(), n0 + 1);
    }
    pgrt_module_destroy(&mod);
    pgrt_buf_destroy(&o);
    pgrt_ctx_destroy(&c);
}

static void test_shared(pgrt_ctx *ctx)
{
    pgrt_buf *out = NULL;
    if (pgrt_buf_alloc(ctx, PG_F32, 16, &out))
        exit(1);
    pgrt_arg a = pgrt_arg_buf(out);
    pgrt_module *mod = NULL;
    pgrt_kernel *k = probe_kernel(ctx, "sm_90", &smem_probe_desc, &mod);
    int n0 = fk.launch_count(), s0 = fk.attr_count();
    pgk_knobs kn = probe_knobs_of(1, 232449, 0, 0, 0);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_ERANGE,
           "smem_probe asks for 232449 bytes of dynamic shared memory; the device allows at most "
           "232448 bytes a block (232448 opt-in maximum): nothing launched");
    kn = probe_knobs_of(2, 1u << 20, 2, 1, 1);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_ERANGE,
           "smem_probe asks for 1048576 bytes of dynamic shared memory");
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    REQUIRE_INT_EQ(fk.attr_count(), s0);
    pgrt_module_destroy(&mod);

    /* Static shared memory leaves less. */
    setenv("FAKECUDA_STATIC_SMEM", "16384", 1);
    k = probe_kernel(ctx, "sm_90", &smem_probe_desc, &mod);
    kn = probe_knobs_of(1, 216065, 0, 0, 0);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_ERANGE,
           "smem_probe asks for 216065 bytes of dynamic shared memory on top of its static shared "
           "memory; the device allows at most 216064 bytes a block (232448 opt-in maximum less "
           "the static bytes): nothing launched");
    unsetenv("FAKECUDA_STATIC_SMEM");
    pgrt_module_destroy(&mod);

    /* A smaller device. */
    launch_alone(86, "FAKECUDA_SMEM_OPTIN=101376", "sm_86", probe_knobs_of(1, 150000, 0, 0, 0),
                 PGRT_ERANGE,
                 "smem_probe asks for 150000 bytes of dynamic shared memory; the device allows "
                 "at most 101376 bytes a block",
                 false);
    /* A driver without cuFuncSetAttribute. */
    launch_alone(90, "FAKECUDA_HIDE=cuFuncSetAttribute", "sm_90",
                 probe_knobs_of(1, 100000, 0, 0, 0), PGRT_EDRIVER,
                 "smem_probe needs 100000 bytes of dynamic shared memory; the driver lacks "
                 "cuFuncSetAttribute (CUDA 9.0) to allow more than 49152",
                 false);
    REQUIRE_INT_EQ(fk.launch_count(), n0);
    pgrt_buf_destroy(&out);
}

static void test_cluster(pgrt_ctx *ctx)
{
    pgrt_buf *out = NULL;
    if (pgrt_buf_alloc(ctx, PG_F32, 16, &out))
        exit(1);
    pgrt_arg a = pgrt_arg_buf(out);
    pgrt_module *mod = NULL;
    pgrt_kernel *k = probe_kernel(ctx, "sm_90", &smem_probe_desc, &mod);
    int n0 = fk.launch_count();
    pgk_knobs kn = probe_knobs_of(6, 0, 4, 1, 1);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_EARGS,
           "smem_probe: cluster (4,1,1) does not divide grid (6,1,1)");
    kn = probe_knobs_of(8, 0, 2, 2, 1);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_EARGS,
           "smem_probe: cluster (2,2,1) does not divide grid (8,1,1)");
    kn = probe_knobs_of(16, 0, 16, 1, 1);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_EARGS,
           "smem_probe: cluster (16,1,1) holds 16 blocks; at most 8 (the portable cluster size)");
    kn = probe_knobs_of(8, 0, 2, 0, 1);
    EXPECT(pgrt_kernel_launch(k, NULL, &kn, &a, 1), PGRT_EARGS,
           "smem_probe: cluster (2,0,1) has a zero dimension (all three zero: no cluster)");
    pgrt_module_destroy(&mod);

    launch_alone(89, NULL, "sm_89", probe_knobs_of(8, 0, 2, 1, 1), PGRT_ETARGET,
                 "smem_probe: a cluster launch (2,1,1) needs compute capability 9.0 or newer; "
                 "this device is 8.9",
                 false);
    launch_alone(90, "FAKECUDA_HIDE=cuLaunchKernelEx", "sm_90", probe_knobs_of(8, 0, 2, 1, 1),
                 PGRT_EDRIVER,
                 "smem_probe: a cluster launch needs cuLaunchKernelEx (CUDA 11.8); this driver "
                 "is CUDA 12.8",
                 true);
    REQUIRE_INT_EQ(fk.launch_count(), n0 + 1); /* the plain launch on the last device */
    pgrt_buf_destroy(&out);
}

static void test_arch_specific(void)
{
    static const struct {
        int cc;
        const char *target, *isa, *words;
        int code;
    } cases[] = {
        {89, "sm_90a", "8.0",
         "F-PTX-001 violated: PTX target sm_90a loads only on a compute capability 9.0 device; "
         "this device is 8.9 (target sm_89)", PGRT_ETARGET},
        {100, "sm_90a", "8.0",
         "F-PTX-001 violated: PTX target sm_90a loads only on a compute capability 9.0 device; "
         "this device is 10.0 (target sm_100)", PGRT_ETARGET},
        {103, "sm_100a", "8.6",
         "F-PTX-001 violated: PTX target sm_100a loads only on a compute capability 10.0 device; "
         "this device is 10.3 (target sm_100)", PGRT_ETARGET},
        {121, "sm_120a", "8.7",
         "PTX target sm_120a loads only on a compute capability 12.0 device; this device is "
         "12.1 (target sm_121)", PGRT_ETARGET},
        {90, "sm_90a", "7.8", "PTX ISA 7.8 is below sm_90a's minimum 8.0", PGRT_EISA},
    };
    int loads0 = fk.loads();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pgrt_ctx *ctx = open_with(cases[i].cc, NULL);
        char ptx[1024];
        probe_ptx(ptx, sizeof ptx, cases[i].target, cases[i].isa);
        pgrt_module *m = (pgrt_module *)1;
        EXPECT(pgrt_module_load(ctx, ptx, &m), cases[i].code, cases[i].words);
        REQUIRE(m == NULL);
        pgrt_ctx_destroy(&ctx);
    }
    REQUIRE_INT_EQ(fk.loads(), loads0);

    /* The pure checks, by target alone and with the device. */
    pgrt_ptx_info a90 = {80, "sm_90a", 64};
    char err[256];
    REQUIRE_INT_EQ(pgrt_ptx_check(&a90, PG_SM_89, 12080, err, sizeof err), PGRT_ETARGET);
    REQUIRE_CONTAINS(err, "F-PTX-001 violated: PTX target sm_90a != device target sm_89 (sm_90a "
                          "loads only on a compute capability 9.0 device)");
    REQUIRE_INT_EQ(pgrt_ptx_check(&a90, PG_SM_100, 12080, err, sizeof err), PGRT_ETARGET);
    REQUIRE_CONTAINS(err, "sm_90a != device target sm_100");
    REQUIRE_INT_EQ(pgrt_ptx_check(&a90, PG_SM_90A, 12080, err, sizeof err), 0);
    pgrt_ptx_info a100 = {86, "sm_100a", 64};
    REQUIRE_INT_EQ(pgrt_ptx_check(&a100, PG_SM_90, 12080, err, sizeof err), PGRT_ETARGET);
    REQUIRE_INT_EQ(pgrt_ptx_check_device(NULL, NULL, err, sizeof err), PGRT_EINVAL);
    REQUIRE_CONTAINS(err, "pgrt_ptx_check_device: info is NULL");
    pgrt_device_info dev;
    memset(&dev, 0, sizeof dev);
    dev.cc_major = 10;
    dev.cc_minor = 3;
    dev.target = PG_SM_100;
    dev.driver_version = 12080;
    REQUIRE_INT_EQ(pgrt_ptx_check_device(&a100, &dev, err, sizeof err), PGRT_ETARGET);
    REQUIRE_CONTAINS(err, "this device is 10.3 (target sm_100)");
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL, "FAKE_LIBCUDA");

    pgrt_ctx *ctx = open_with(90, NULL);
    test_encode(ctx);
    test_args(ctx);
    test_shared(ctx);
    test_cluster(ctx);
    test_arch_specific();
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
