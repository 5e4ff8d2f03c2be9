/* SPDX-License-Identifier: MIT */
/* The runtime's checks that need no driver: error tables, PTX headers,
 * F-PTX-001 and the ISA/driver rule, compute capability to target, launch
 * arguments against descriptors, and NULL handling. */
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

static void test_errors(void)
{
    static const int codes[] = {
#define X_(name, val, msg) PGRT_##name,
        PGRT_ERRNO_MAP(X_)
#undef X_
    };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        REQUIRE(codes[i] < 0);
        REQUIRE(strcmp(pgrt_strerror(codes[i]), "unknown error") != 0);
        REQUIRE(strncmp(pgrt_err_name(codes[i]), "PGRT_E", 6) == 0);
        for (size_t j = 0; j < i; j++) {
            REQUIRE(codes[i] != codes[j]);
            REQUIRE(strcmp(pgrt_strerror(codes[i]), pgrt_strerror(codes[j])) != 0);
        }
    }
    REQUIRE_STR_EQ(pgrt_err_name(PGRT_ENODRIVER), "PGRT_ENODRIVER");
    REQUIRE_STR_EQ(pgrt_strerror(PGRT_OK), "success");
    REQUIRE_STR_EQ(pgrt_strerror(-999), "unknown error");
    REQUIRE_STR_EQ(pgrt_err_name(-999), "PGRT_UNKNOWN");
    REQUIRE(pgrt_err_unavailable(PGRT_ENODRIVER));
    REQUIRE(pgrt_err_unavailable(PGRT_ENODEVICE));
    REQUIRE(!pgrt_err_unavailable(PGRT_ECUDA));
    REQUIRE(!pgrt_err_unavailable(0));

    REQUIRE_STR_EQ(pgrt_cuda_error_name(0), "CUDA_SUCCESS");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(218), "CUDA_ERROR_INVALID_PTX");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(222), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(100), "CUDA_ERROR_NO_DEVICE");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(34), "CUDA_ERROR_STUB_LIBRARY");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(901), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(999), "CUDA_ERROR_UNKNOWN");
    REQUIRE_STR_EQ(pgrt_cuda_error_name(12345), "CUDA_ERROR_UNRECOGNIZED");
}

static const char *header_90 = "//\n// Generated\n//\n\n.version 7.8\n.target sm_90\n"
                               ".address_size 64\n\n.visible .entry k(\n)\n{\n\tret;\n}\n";

static void test_ptx_parse(void)
{
    pgrt_ptx_info info;
    char err[256];
    REQUIRE_INT_EQ(pgrt_ptx_parse(header_90, 0, &info, err, sizeof err), 0);
    REQUIRE_INT_EQ(info.isa, 78);
    REQUIRE_STR_EQ(info.target, "sm_90");
    REQUIRE_INT_EQ(info.addrsize, 64);

    /* Options after the target, CRLF, block comments, no address size. */
    REQUIRE_INT_EQ(pgrt_ptx_parse("/* a\n comment */\r\n  .version 8.7\r\n.target sm_120a, debug\r\n"
                                  ".entry k() { ret; }",
                                  0, &info, err, sizeof err),
                   0);
    REQUIRE_INT_EQ(info.isa, 87);
    REQUIRE_STR_EQ(info.target, "sm_120a");
    REQUIRE_INT_EQ(info.addrsize, 0);

    /* len bounds the text: the target is cut off. */
    REQUIRE_INT_EQ(pgrt_ptx_parse(header_90, 20, &info, err, sizeof err), PGRT_EPTX);

    REQUIRE_INT_EQ(pgrt_ptx_parse(".target sm_90\n", 0, &info, err, sizeof err), PGRT_EPTX);
    REQUIRE_CONTAINS(err, ".version");
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7.8\n.entry k() {}\n.target sm_90\n", 0, &info, err,
                                  sizeof err),
                   PGRT_EPTX);
    REQUIRE_CONTAINS(err, ".target");
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7\n.target sm_90\n", 0, &info, err, sizeof err),
                   PGRT_EPTX);
    REQUIRE_CONTAINS(err, "MAJOR.MINOR");
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7.10\n.target sm_90\n", 0, &info, err, sizeof err),
                   PGRT_EPTX);
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7.8x\n.target sm_90\n", 0, &info, err, sizeof err),
                   PGRT_EPTX);
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7.8\n.target \n", 0, &info, err, sizeof err),
                   PGRT_EPTX);
    REQUIRE_INT_EQ(pgrt_ptx_parse(".version 7.8\n.target sm_9000000000000000000000000\n", 0, &info,
                                  err, sizeof err),
                   PGRT_EPTX);
    REQUIRE_INT_EQ(pgrt_ptx_parse("", 0, &info, err, sizeof err), PGRT_EPTX);
    REQUIRE_INT_EQ(pgrt_ptx_parse(NULL, 0, &info, err, sizeof err), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_ptx_parse(header_90, 0, NULL, err, sizeof err), PGRT_EINVAL);
    /* errlen 0: no message, no write. */
    REQUIRE_INT_EQ(pgrt_ptx_parse("", 0, &info, NULL, 0), PGRT_EPTX);

    /* The builder's own output for every target it has. */
    const pgk_desc *d = pgk_find("gradient_clip");
    REQUIRE(d != NULL);
    for (int t = 0; d && t < PG_TARGET_COUNT; t++) {
        char *ptx = NULL;
        if (pgk_emit(d, (pg_target)t, NULL, &ptx, NULL, err, sizeof err) != 0) {
            TEST_FAIL_("emit %s: %s", pg_target_name((pg_target)t), err);
            continue;
        }
        REQUIRE_INT_EQ(pgrt_ptx_parse(ptx, 0, &info, err, sizeof err), 0);
        REQUIRE_STR_EQ(info.target, pg_target_name((pg_target)t));
        REQUIRE_INT_EQ(info.isa, pg_target_min_isa((pg_target)t));
        REQUIRE_INT_EQ(pgrt_ptx_check(&info, (pg_target)t,
                                      (int)pg_isa_min_driver(info.isa), err, sizeof err),
                       0);
        pgk_free(ptx);
    }
}

static void test_ptx_check(void)
{
    pgrt_ptx_info info;
    char err[256];
    REQUIRE_INT_EQ(pgrt_ptx_parse(header_90, 0, &info, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgrt_ptx_check(&info, PG_SM_90, 12080, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgrt_ptx_check(&info, PG_SM_90, 11080, err, sizeof err), 0);

    /* F-PTX-001: the target must be the device's, exactly. */
    REQUIRE_INT_EQ(pgrt_ptx_check(&info, PG_SM_80, 12080, err, sizeof err), PGRT_ETARGET);
    REQUIRE_CONTAINS(err, "F-PTX-001");
    REQUIRE_CONTAINS(err, "sm_90");
    REQUIRE_CONTAINS(err, "sm_80");
    REQUIRE_INT_EQ(pgrt_ptx_check(&info, PG_SM_90A, 12080, err, sizeof err), PGRT_ETARGET);

    /* An ISA newer than the driver: the message names the driver needed. */
    REQUIRE_INT_EQ(pgrt_ptx_check(&info, PG_SM_90, 11070, err, sizeof err), PGRT_EISA);
    REQUIRE_CONTAINS(err, "PTX ISA 7.8 needs a CUDA 11.8 driver");
    REQUIRE_CONTAINS(err, "CUDA 11.7");
    pgrt_ptx_info i120 = {87, "sm_120", 64};
    REQUIRE_INT_EQ(pgrt_ptx_check(&i120, PG_SM_120, 12040, err, sizeof err), PGRT_EISA);
    REQUIRE_CONTAINS(err, "PTX ISA 8.7 needs a CUDA 12.8 driver or newer");
    REQUIRE_CONTAINS(err, "12040");
    REQUIRE_INT_EQ(pgrt_ptx_check(&i120, PG_SM_120, 12080, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgrt_ptx_check(&i120, PG_SM_120, 13000, err, sizeof err), 0);

    /* An ISA nobody knows, and one below the target's minimum. */
    pgrt_ptx_info future = {99, "sm_90", 64};
    REQUIRE_INT_EQ(pgrt_ptx_check(&future, PG_SM_90, 13000, err, sizeof err), PGRT_EISA);
    REQUIRE_CONTAINS(err, "9.9");
    pgrt_ptx_info old = {70, "sm_90", 64};
    REQUIRE_INT_EQ(pgrt_ptx_check(&old, PG_SM_90, 13000, err, sizeof err), PGRT_EISA);
    REQUIRE_CONTAINS(err, "minimum 7.8");

    REQUIRE_INT_EQ(pgrt_ptx_check(NULL, PG_SM_90, 12080, err, sizeof err), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_ptx_check(&info, PG_TARGET_COUNT, 12080, err, sizeof err), PGRT_EINVAL);
}

static void test_target_for_cc(void)
{
    pg_target t = PG_TARGET_COUNT;
    REQUIRE_INT_EQ(pgrt_target_for_cc(9, 0, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_90); /* never sm_90a */
    REQUIRE_INT_EQ(pgrt_target_for_cc(8, 0, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_80);
    REQUIRE_INT_EQ(pgrt_target_for_cc(8, 9, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_89);
    REQUIRE_INT_EQ(pgrt_target_for_cc(10, 0, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_100);
    REQUIRE_INT_EQ(pgrt_target_for_cc(12, 0, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_120);
    REQUIRE_INT_EQ(pgrt_target_for_cc(12, 1, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_121);
    /* Unlisted minors take the family's highest lower target. */
    REQUIRE_INT_EQ(pgrt_target_for_cc(8, 8, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_87);
    REQUIRE_INT_EQ(pgrt_target_for_cc(10, 3, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_100);
    REQUIRE_INT_EQ(pgrt_target_for_cc(7, 2, &t), 0);
    REQUIRE_INT_EQ(t, PG_SM_70);
    REQUIRE_INT_EQ(pgrt_target_for_cc(6, 1, &t), PGRT_ETARGET);
    REQUIRE_INT_EQ(pgrt_target_for_cc(11, 0, &t), PGRT_ETARGET);
    REQUIRE_INT_EQ(pgrt_target_for_cc(9, 0, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_target_for_cc(-1, 0, &t), PGRT_EINVAL);
}

/* A descriptor made up for the checks: one of each kind of parameter. */
static const pgk_param mix_params[] = {
    {"x", PG_U64, true},
    {"n", PG_U32, false},
    {"alpha", PG_F32, false},
    {"seed", PG_U64, false},
};
static const pgk_knob mix_knobs[] = {{"n", 4096, 1, 1u << 30, "elements", false}};
static int mix_launch(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    *out = (pgk_launch){{(knobs[0] + 255) / 256, 1, 1}, {256, 1, 1}, 0};
    return 0;
}
static const pgk_desc mix = {
    .name = "mix",
    .summary = "test descriptor",
    .params = mix_params,
    .nparams = 4,
    .knobs = mix_knobs,
    .nknobs = 1,
    .min_target = PG_SM_70,
    .launch = mix_launch,
};

static void test_args(void)
{
    char err[256];
    pgk_knobs kn;
    pgk_knobs_default(&mix, &kn);
    pgrt_arg ok[4] = {pgrt_arg_ptr(0x1000), pgrt_arg_u32(4096), pgrt_arg_f32(0.5f),
                      pgrt_arg_u64(7)};
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, ok, 4, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, NULL, ok, 4, err, sizeof err), 0);

    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, ok, 3, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix takes 4 arguments (x, n, alpha, seed), got 3");

    pgrt_arg a[4];
    memcpy(a, ok, sizeof a);
    a[0] = pgrt_arg_u32(5);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix argument 0 (x): expected a device pointer, got u32");

    memcpy(a, ok, sizeof a);
    a[0] = pgrt_arg_ptr(0);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix argument 0 (x): null device pointer");

    memcpy(a, ok, sizeof a);
    a[2] = pgrt_arg_ptr(0x2000);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix argument 2 (alpha): expected a f32 value, got a device pointer");

    memcpy(a, ok, sizeof a);
    a[2] = pgrt_arg_f64(0.5);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix argument 2 (alpha): expected f32, got f64");

    memcpy(a, ok, sizeof a);
    a[1] = pgrt_arg_s32(4096);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix argument 1 (n): expected u32, got s32");

    /* A u64 value parameter does not take a pointer, and vice versa. */
    memcpy(a, ok, sizeof a);
    a[3] = pgrt_arg_ptr(0x3000);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_CONTAINS(err, "argument 3 (seed)");

    /* The size the grid was computed for must be the size the kernel gets. */
    memcpy(a, ok, sizeof a);
    a[1] = pgrt_arg_u32(5000);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, &kn, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_STR_EQ(err, "mix argument 1 (n) = 5000, but the launch is sized for knob n = 4096");
    REQUIRE_INT_EQ(pgrt_args_check(&mix, NULL, a, 4, err, sizeof err), 0);

    a[0].type = 99;
    a[0].pointer = false;
    REQUIRE_INT_EQ(pgrt_args_check(&mix, NULL, a, 4, err, sizeof err), PGRT_EARGS);
    REQUIRE_CONTAINS(err, "type #99");

    REQUIRE_INT_EQ(pgrt_args_check(NULL, NULL, ok, 4, err, sizeof err), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_args_check(&mix, NULL, NULL, 4, err, sizeof err), PGRT_EINVAL);

    /* The catalog's clip kernels, as the pipeline calls them. */
    const pgk_desc *sq = pgk_find("squared_sum_reduce");
    const pgk_desc *cs = pgk_find("clip_scale_reduce");
    const pgk_desc *gs = pgk_find("gradient_clip_gpu_scale");
    const pgk_desc *gc = pgk_find("gradient_clip");
    REQUIRE(sq && cs && gs && gc);
    if (sq && cs && gs && gc) {
        pgrt_arg s3[3] = {pgrt_arg_ptr(0x1000), pgrt_arg_ptr(0x2000), pgrt_arg_u32(1u << 20)};
        REQUIRE_INT_EQ(pgrt_args_check(sq, NULL, s3, 3, err, sizeof err), 0);
        pgrt_arg c4[4] = {pgrt_arg_ptr(0x1000), pgrt_arg_u32(12), pgrt_arg_f32(1.0f),
                          pgrt_arg_ptr(0x2000)};
        REQUIRE_INT_EQ(pgrt_args_check(cs, NULL, c4, 4, err, sizeof err), 0);
        /* clip_scale_reduce's max_norm is f32; a u32 there is refused. */
        c4[2] = pgrt_arg_u32(1);
        REQUIRE_INT_EQ(pgrt_args_check(cs, NULL, c4, 4, err, sizeof err), PGRT_EARGS);
        REQUIRE_CONTAINS(err, "max_norm");
        pgrt_arg g3[3] = {pgrt_arg_ptr(0x1000), pgrt_arg_ptr(0x2000), pgrt_arg_u32(7)};
        REQUIRE_INT_EQ(pgrt_args_check(gs, NULL, g3, 3, err, sizeof err), 0);
        /* gradient_clip takes the scale by value, not through a pointer. */
        REQUIRE_INT_EQ(pgrt_args_check(gc, NULL, g3, 3, err, sizeof err), PGRT_EARGS);
        REQUIRE_CONTAINS(err, "scale");
    }
}

/* Every entry point taking a handle refuses NULL with a message naming
 * itself, and destroy functions accept NULL. */
static void test_nulls(void)
{
    REQUIRE_INT_EQ(pgrt_ctx_create(NULL, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_ctx_create");
    pgrt_ctx *ctx = (pgrt_ctx *)&ctx; /* must be overwritten */
    pgrt_ctx_params p = {"/nonexistent/libcuda.so.1", -1};
    REQUIRE_INT_EQ(pgrt_ctx_create(&ctx, &p), PGRT_EINVAL);
    REQUIRE(ctx == NULL);
    REQUIRE_INT_EQ(pgrt_ctx_device_info(NULL, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_ctx_mem_info(NULL, NULL, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_ctx_sync(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_ctx_target(NULL), PG_TARGET_COUNT);

    pgrt_buf *b = NULL;
    REQUIRE_INT_EQ(pgrt_buf_alloc(NULL, PG_F32, 4, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_buf_alloc");
    REQUIRE_INT_EQ(pgrt_buf_view(NULL, 0, 1, &b), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_upload(NULL, 0, "", 1), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_download(NULL, 0, &b, 1), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_copy(NULL, 0, NULL, 0, 1), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_upload_async(NULL, 0, "", 1, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_download_async(NULL, 0, &b, 1, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_copy_async(NULL, 0, NULL, 0, 1, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_memset(NULL, 0), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_memset_async(NULL, 0, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_fill32(NULL, 0), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_fill32_async(NULL, 0, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_buf_ptr(NULL), 0);
    REQUIRE_INT_EQ(pgrt_buf_count(NULL), 0);
    REQUIRE_INT_EQ(pgrt_buf_bytes(NULL), 0);
    REQUIRE_INT_EQ(pgrt_buf_type(NULL), PG_TYPE_COUNT);
    REQUIRE(!pgrt_arg_buf(NULL).v.u64);

    pgrt_stream *s = NULL;
    pgrt_event *e = NULL;
    bool cap;
    float ms;
    REQUIRE_INT_EQ(pgrt_stream_create(NULL, &s), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_stream_sync(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_stream_is_capturing(NULL, &cap), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_event_create(NULL, &e), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_event_record(NULL, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_event_sync(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_event_elapsed_ms(NULL, NULL, &ms), PGRT_EINVAL);

    pgrt_kernel *k = NULL;
    pgrt_module *m = NULL;
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(pgrt_kernel_get(NULL, &mix, NULL, &k), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_kernel_launch(NULL, NULL, NULL, NULL, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_kernel_launch");
    REQUIRE_INT_EQ(pgrt_launch(NULL, NULL, "gradient_clip", NULL, NULL, 0), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_prewarm(NULL, NULL, 0), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(NULL, &st), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_module_load(NULL, header_90, &m), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_module_kernel(NULL, &mix, &k), PGRT_EINVAL);
    REQUIRE(pgrt_kernel_desc(NULL) == NULL);

    pgrt_graph *g = NULL;
    REQUIRE_INT_EQ(pgrt_capture_begin(NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "legacy default stream");
    REQUIRE_INT_EQ(pgrt_capture_end(NULL, &g), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_capture_abort(NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_graph_launch(NULL, NULL), PGRT_EINVAL);

    pgrt_clip *c = NULL;
    size_t sizes[1] = {4};
    REQUIRE_INT_EQ(pgrt_clip_create(NULL, sizes, 1, &c), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_clip_run(NULL, NULL, NULL, 0, 1.0f), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_clip_result(NULL, NULL, NULL, NULL), PGRT_EINVAL);
    REQUIRE(pgrt_clip_result_buf(NULL) == NULL);
    REQUIRE_INT_EQ(pgrt_clip_partials(NULL), 0);

    /* Destroying nothing is fine. */
    pgrt_ctx_destroy(NULL);
    ctx = NULL;
    pgrt_ctx_destroy(&ctx);
    pgrt_buf_destroy(NULL);
    pgrt_buf_destroy(&b);
    pgrt_stream_destroy(&s);
    pgrt_event_destroy(&e);
    pgrt_module_destroy(&m);
    pgrt_graph_destroy(&g);
    pgrt_clip_destroy(&c);
}

int main(void)
{
    test_errors();
    test_ptx_parse();
    test_ptx_check();
    test_target_for_cc();
    test_args();
    test_nulls();
    TEST_DONE();
}
