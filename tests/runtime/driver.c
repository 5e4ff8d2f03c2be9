/* SPDX-License-Identifier: MIT */
/*
 * The driver loader on machines without a GPU: no library at all, and the
 * fake driver (fakecuda.h) playing a machine without a device, the toolkit's
 * stub, an old driver and a driver without cuGetProcAddress.
 *
 * Usage: test_driver FAKE_LIBCUDA FAKE_LIBCUDA_WITHOUT_GETPROCADDRESS
 */
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_kernel.h"
#include "test.h"

#include <stdlib.h>

static const char *fake, *fake_old;

static int create(pgrt_ctx **ctx, const char *lib, int device)
{
    pgrt_ctx_params p = {lib, device};
    return pgrt_ctx_create(ctx, &p);
}

static void test_no_driver(void)
{
    /* The library named by the environment does not exist. */
    setenv("PGRT_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    REQUIRE_INT_EQ(rc, PGRT_ENODRIVER);
    REQUIRE(ctx == NULL);
    REQUIRE(pgrt_err_unavailable(rc));
    REQUIRE_CONTAINS(pgrt_last_message(), "no CUDA driver");
    REQUIRE_CONTAINS(pgrt_last_message(), "dlopen(\"/nonexistent/libcuda.so.1\")");
    REQUIRE_INT_EQ(pgrt_last_cuda_error(), 0);

    /* An explicit library wins over the environment. */
    REQUIRE_INT_EQ(create(&ctx, "/nonexistent/other.so", 0), PGRT_ENODRIVER);
    REQUIRE_CONTAINS(pgrt_last_message(), "/nonexistent/other.so");
    unsetenv("PGRT_LIBCUDA");

    /* A library that is no driver at all. */
    REQUIRE_INT_EQ(create(&ctx, "libm.so.6", 0), PGRT_ENODRIVER);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuDriverGetVersion");
}

static void test_fake_failures(void)
{
    pgrt_ctx *ctx = NULL;

    setenv("FAKECUDA", "nodevice", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), PGRT_ENODEVICE);
    REQUIRE(ctx == NULL);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuInit: CUDA_ERROR_NO_DEVICE");
    REQUIRE_INT_EQ(pgrt_last_cuda_error(), 100);

    setenv("FAKECUDA", "zero", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), PGRT_ENODEVICE);
    REQUIRE_CONTAINS(pgrt_last_message(), "0 devices");

    setenv("FAKECUDA", "stub", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), PGRT_ENODRIVER);
    REQUIRE_CONTAINS(pgrt_last_message(), "CUDA_ERROR_STUB_LIBRARY");
    REQUIRE_CONTAINS(pgrt_last_message(), "stub");
    unsetenv("FAKECUDA");

    REQUIRE_INT_EQ(create(&ctx, fake, 1), PGRT_ENODEVICE);
    REQUIRE_CONTAINS(pgrt_last_message(), "no CUDA device 1");

    /* A 12.8 library lacking an entry point that every driver since 4.0
     * (or 2.0) has is not a whole driver: "too old" would be wrong advice.
     * The message names the entry point and the library. */
    setenv("FAKECUDA_HIDE", "cuLaunchKernel", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), PGRT_ENODRIVER);
    REQUIRE_CONTAINS(pgrt_last_message(), "lacks the entry point cuLaunchKernel, which every "
                                          "driver since CUDA 4.0 provides (this one says it is "
                                          "version 12.8)");
    REQUIRE_CONTAINS(pgrt_last_message(), fake);
    REQUIRE(strstr(pgrt_last_message(), "too old") == NULL);
    setenv("FAKECUDA_HIDE", "cuInit", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), PGRT_ENODRIVER);
    REQUIRE_CONTAINS(pgrt_last_message(), "lacks the entry point cuInit, which every driver "
                                          "since CUDA 2.0 provides");
    REQUIRE_CONTAINS(pgrt_last_message(), fake);
    REQUIRE(strstr(pgrt_last_message(), "too old") == NULL);
    unsetenv("FAKECUDA_HIDE");

    /* A 10.0 driver predates cuDevicePrimaryCtxRelease_v2. */
    setenv("FAKECUDA_VERSION", "10000", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), PGRT_EDRIVER);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuDevicePrimaryCtxRelease (from CUDA 11.0)");
    REQUIRE_CONTAINS(pgrt_last_message(), "driver version 10.0");
    unsetenv("FAKECUDA_VERSION");
}

static void test_old_driver(void)
{
    /* 11.2: a context, but sm_90's PTX ISA 7.8 needs 11.8, and graphs go
     * through the 11.0 cuGraphInstantiate. */
    setenv("FAKECUDA_VERSION", "11020", 1);
    pgrt_ctx *ctx = NULL;
    REQUIRE_INT_EQ(create(&ctx, fake, 0), 0);
    if (!ctx)
        return;
    pgrt_device_info info;
    REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
    REQUIRE_INT_EQ(info.driver_version, 11020);
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), PGRT_EISA);
    REQUIRE_CONTAINS(pgrt_last_message(), "gradient_clip (sm_90): PTX ISA 7.8 needs a CUDA 11.8 "
                                          "driver or newer; this driver is CUDA 11.2");
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    REQUIRE_INT_EQ(pgrt_capture_begin(s), 0);
    pgrt_graph *g = NULL;
    REQUIRE_INT_EQ(pgrt_capture_end(s, &g), 0);
    REQUIRE(g != NULL);
    REQUIRE_INT_EQ(pgrt_graph_launch(g, s), 0);
    pgrt_graph_destroy(&g);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    unsetenv("FAKECUDA_VERSION");

    /* A driver without graph capture: the context works, capture says why
     * it cannot. */
    setenv("FAKECUDA_HIDE", "cuStreamBeginCapture", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), 0);
    if (ctx) {
        REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
        REQUIRE_INT_EQ(pgrt_capture_begin(s), PGRT_EDRIVER);
        REQUIRE_CONTAINS(pgrt_last_message(), "cuStreamBeginCapture (from CUDA 10.1)");
        pgrt_stream_destroy(&s);
        pgrt_ctx_destroy(&ctx);
    }
    unsetenv("FAKECUDA_HIDE");

    /* An unknown CUresult is named by the driver's cuGetErrorName. */
    setenv("FAKECUDA", "weird", 1);
    REQUIRE_INT_EQ(create(&ctx, fake, 0), 0);
    if (ctx) {
        REQUIRE_INT_EQ(pgrt_ctx_sync(ctx), PGRT_ECUDA);
        REQUIRE_STR_EQ(pgrt_last_message(), "cuCtxSynchronize: CUDA_ERROR_FAKE_NEW_CODE");
        REQUIRE_INT_EQ(pgrt_last_cuda_error(), 4242);
        pgrt_ctx_destroy(&ctx);
    }
    unsetenv("FAKECUDA");
}

/* A driver from before cuGetProcAddress: everything through dlsym of the
 * exported (_v2) names. */
static void test_dlsym_fallback(void)
{
    pgrt_ctx *ctx = NULL;
    REQUIRE_INT_EQ(create(&ctx, fake_old, 0), 0);
    if (!ctx) {
        fprintf(stderr, "%s\n", pgrt_last_message());
        return;
    }
    pgrt_device_info info;
    REQUIRE_INT_EQ(pgrt_ctx_device_info(ctx, &info), 0);
    REQUIRE_STR_EQ(info.name, "Fake GPU");
    pgrt_buf *b = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(ctx, PG_U32, 8, &b), 0);
    uint32_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
    REQUIRE_INT_EQ(pgrt_buf_upload(b, 0, in, 8), 0);
    REQUIRE_INT_EQ(pgrt_buf_download(b, 0, out, 8), 0);
    REQUIRE(memcmp(in, out, sizeof in) == 0);
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, pgk_find("gradient_clip"), NULL, &k), 0);
    pgrt_buf_destroy(&b);
    pgrt_ctx_destroy(&ctx);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FAKE_LIBCUDA FAKE_LIBCUDA_OLD\n", argv[0]);
        return 2;
    }
    fake = argv[1];
    fake_old = argv[2];
    unsetenv("FAKECUDA");
    unsetenv("FAKECUDA_VERSION");
    unsetenv("FAKECUDA_HIDE");
    unsetenv("FAKECUDA_CC");
    test_no_driver();
    test_fake_failures();
    test_old_driver();
    test_dlsym_fallback();
    TEST_DONE();
}
