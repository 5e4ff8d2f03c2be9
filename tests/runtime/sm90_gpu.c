/* SPDX-License-Identifier: MIT */
/*
 * The sm_90 launch paths on a real device (compute capability 9.0 or newer;
 * exit 77 without a driver, a device or below 9.0):
 *
 *  - TMA: a tensor map for a 48 x 72 bf16 matrix (rows 144 bytes apart)
 *    passed by value to a written-out PTX kernel that copies 32 x 64 boxes
 *    into shared memory with cp.async.bulk.tensor and an mbarrier, then to
 *    global memory. Every element of every box is checked, the
 *    out-of-bounds ones (the matrix is not a multiple of the box) as zero.
 *    On a 9.0 device the PTX is sm_90a, so the "a" target loads too.
 *  - Dynamic shared memory past 48 KiB, up to the device's opt-in maximum,
 *    in a kernel from the builder that fills its dynamic shared memory with
 *    a pattern and writes it back reversed; one byte more is refused.
 *  - The same kernel in clusters of 2 (cuLaunchKernelEx), eagerly and
 *    replayed from a graph.
 *
 * Usage: test_sm90_gpu
 */
#include "gpu_util.h"
#include "test.h"

/* ---------------------------------------------------------------- TMA */

#define TM_ROWS 48
#define TM_COLS 72
#define BOX_ROWS 32
#define BOX_COLS 64

/* One 32 x 64 bf16 box (4096 bytes) a block: thread 0 arms the mbarrier
 * with the byte count and issues the copy; all wait on phase 0, then copy
 * the box out as 1024 words at out + block * 4096. */
static const char tma_ptx_body[] =
    ".visible .entry tma_copy(\n"
    "\t.param .align 64 .b8 tma_copy_param_0[128],\n"
    "\t.param .u64 tma_copy_param_1\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<4>;\n"
    "\t.reg .b32 %r<20>;\n"
    "\t.reg .b64 %rd<10>;\n"
    "\t.shared .align 128 .b8 tile[4096];\n"
    "\t.shared .align 8 .b64 bar;\n"
    "\n"
    "\tmov.b64 %rd1, tma_copy_param_0;\n"
    "\tcvta.param.u64 %rd2, %rd1;\n"
    "\tld.param.u64 %rd3, [tma_copy_param_1];\n"
    "\tcvta.to.global.u64 %rd4, %rd3;\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\tmov.u32 %r2, bar;\n"
    "\tmov.u32 %r3, tile;\n"
    "\tsetp.ne.u32 %p1, %r1, 0;\n"
    "\t@%p1 bra ARMED;\n"
    "\tmbarrier.init.shared::cta.b64 [%r2], 1;\n"
    "\tfence.proxy.async.shared::cta;\n"
    "\tmbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 4096;\n"
    "\tmov.u32 %r4, %ctaid.x;\n"
    "\tshl.b32 %r5, %r4, 6;\n"
    "\tmov.u32 %r6, %ctaid.y;\n"
    "\tshl.b32 %r7, %r6, 5;\n"
    "\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
    "[%r3], [%rd2, {%r5, %r7}], [%r2];\n"
    "ARMED:\n"
    "\tbar.sync 0;\n"
    "WAIT:\n"
    "\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;\n"
    "\t@!%p2 bra WAIT;\n"
    "\tmov.u32 %r8, %ctaid.x;\n"
    "\tmov.u32 %r9, %ctaid.y;\n"
    "\tmov.u32 %r10, %nctaid.x;\n"
    "\tmad.lo.u32 %r11, %r9, %r10, %r8;\n"
    "\tmul.wide.u32 %rd5, %r11, 4096;\n"
    "\tadd.s64 %rd6, %rd4, %rd5;\n"
    "\tmov.u32 %r12, %r1;\n"
    "COPY:\n"
    "\tsetp.ge.u32 %p3, %r12, 1024;\n"
    "\t@%p3 bra DONE;\n"
    "\tshl.b32 %r13, %r12, 2;\n"
    "\tadd.u32 %r14, %r3, %r13;\n"
    "\tld.shared.u32 %r15, [%r14];\n"
    "\tmul.wide.u32 %rd7, %r12, 4;\n"
    "\tadd.s64 %rd8, %rd6, %rd7;\n"
    "\tst.global.u32 [%rd8], %r15;\n"
    "\tadd.u32 %r12, %r12, 128;\n"
    "\tbra COPY;\n"
    "DONE:\n"
    "\tret;\n"
    "}\n";

static int tma_launch(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    (void)kn;
    out->grid[0] = (TM_COLS + BOX_COLS - 1) / BOX_COLS;
    out->grid[1] = (TM_ROWS + BOX_ROWS - 1) / BOX_ROWS;
    out->grid[2] = 1;
    out->block[0] = 128;
    out->block[1] = out->block[2] = 1;
    return 0;
}
static const pgk_param tma_params[] = {{"tmap", PG_B8, false, true}, {"out", PG_U64, true, false}};
static const pgk_desc tma_desc = {.name = "tma_copy", .summary = "TMA box copy",
                                  .params = tma_params, .nparams = 2, .min_target = PG_SM_90,
                                  .launch = tma_launch};

static uint16_t elem(uint32_t y, uint32_t x)
{
    return (uint16_t)(0x4000u | ((y * TM_COLS + x) & 0x3fffu)); /* distinct, never 0 */
}

static void test_tma(pgrt_ctx *ctx, const pgrt_device_info *info)
{
    /* The "a" target where the device has one, else its plain target;
     * each at its minimum ISA, and at least 8.0 (mbarrier complete_tx). */
    pg_target t = info->arch_target;
    unsigned isa = pg_target_min_isa(t) > 80 ? pg_target_min_isa(t) : 80;
    size_t cap = sizeof tma_ptx_body + 128;
    char *ptx = malloc(cap);
    snprintf(ptx, cap, ".version %u.%u\n.target %s\n.address_size 64\n\n%s", isa / 10, isa % 10,
             pg_target_name(t), tma_ptx_body);
    pgrt_module *mod = NULL;
    pgrt_kernel *k = NULL;
    GPU_CHECK(pgrt_module_load(ctx, ptx, &mod));
    GPU_CHECK(pgrt_module_kernel(mod, &tma_desc, &k));
    fprintf(stderr, "tma: %s PTX loaded\n", pg_target_name(t));

    uint16_t *a = malloc(TM_ROWS * TM_COLS * sizeof *a);
    for (uint32_t y = 0; y < TM_ROWS; y++)
        for (uint32_t x = 0; x < TM_COLS; x++)
            a[y * TM_COLS + x] = elem(y, x);
    pgrt_buf *ab = NULL, *ob = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_BF16, TM_ROWS * TM_COLS, &ab));
    GPU_CHECK(pgrt_buf_upload(ab, 0, a, TM_ROWS * TM_COLS));
    enum { GX = 2, GY = 2, WORDS = GX * GY * 1024 };
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_U32, WORDS, &ob));
    GPU_CHECK(pgrt_buf_fill32(ob, 0xdeadbeefu));

    pgrt_tensor_map m;
    GPU_CHECK(pgrt_tensor_map_encode_2d(ctx, &m, PG_BF16, pgrt_buf_ptr(ab), TM_ROWS, TM_COLS,
                                        TM_COLS * 2, BOX_ROWS, BOX_COLS, 0));
    pgrt_arg args[2] = {pgrt_arg_tensor_map(&m), pgrt_arg_buf(ob)};
    GPU_CHECK(pgrt_kernel_launch(k, NULL, NULL, args, 2));
    GPU_CHECK(pgrt_ctx_sync(ctx));

    uint32_t *o = malloc(WORDS * sizeof *o);
    GPU_CHECK(pgrt_buf_download(ob, 0, o, WORDS));
    int bad = 0;
    for (uint32_t by = 0; by < GY; by++)
        for (uint32_t bx = 0; bx < GX; bx++) {
            const uint16_t *box = (const uint16_t *)(const void *)(o + (by * GX + bx) * 1024);
            for (uint32_t r = 0; r < BOX_ROWS; r++)
                for (uint32_t c = 0; c < BOX_COLS; c++) {
                    uint32_t y = by * BOX_ROWS + r, x = bx * BOX_COLS + c;
                    uint16_t want = y < TM_ROWS && x < TM_COLS ? elem(y, x) : 0;
                    uint16_t got = box[r * BOX_COLS + c];
                    if (got != want && bad++ < 5)
                        fprintf(stderr, "tma: box (%u,%u) element (%u,%u): 0x%04x, want 0x%04x\n",
                                bx, by, r, c, got, want);
                }
        }
    REQUIRE_INT_EQ(bad, 0);
    fprintf(stderr, "tma: %d boxes of %dx%d bf16 checked, %d wrong\n", GX * GY, BOX_ROWS,
            BOX_COLS, bad);
    free(o);
    free(a);
    free(ptx);
    pgrt_buf_destroy(&ab);
    pgrt_buf_destroy(&ob);
    pgrt_module_destroy(&mod);
}

/* ---------------------------------------------------------------- dynamic shared memory, clusters */

enum { K_BLOCKS, K_WORDS, K_CLUSTER, K_N };
static const pgk_knob pat_knobs[K_N] = {
    {"blocks", 8, 1, 1024, "grid.x"},
    {"nwords", 1024, 1, 1u << 20, "32-bit words of dynamic shared memory"},
    {"cluster", 0, 0, 8, "cluster.x (0: none)"},
};
static const pgk_param pat_params[] = {{"out", PG_U64, true}, {"nwords", PG_U32, false}};

/* Each block: smem[i] = i * 2654435761 + ctaid.x for i < nwords, a
 * barrier, out[ctaid.x * nwords + i] = smem[nwords - 1 - i]. */
static int pat_build(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    pg_shared smem = pg_shared_dynamic(k, 16);
    pg_reg out = pg_param_load(k, p[0]);
    pg_reg nw = pg_param_load(k, p[1]);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg cta = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg base = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, base, pg_shared_addr(smem));
    pg_reg i = pg_reg_new(k, PG_U32), v = pg_reg_new(k, PG_U32), a = pg_reg_new(k, PG_U32);
    pg_reg done = pg_reg_new(k, PG_PRED);

    pg_label fill = pg_label_new(k, "fill"), filled = pg_label_new(k, "filled");
    pg_mov(k, PG_U32, i, tid);
    pg_label_bind(k, fill);
    pg_setp(k, PG_CMP_GE, PG_U32, done, i, nw);
    pg_bra_if(k, done, false, filled);
    pg_mad(k, PG_U32, v, i, pg_u32(2654435761u), cta);
    pg_mad(k, PG_U32, a, i, pg_u32(4), base);
    pg_st(k, PG_SPACE_SHARED, PG_U32, a, 0, v);
    pg_add(k, PG_U32, i, i, ntid);
    pg_bra(k, fill);
    pg_label_bind(k, filled);
    pg_bar_sync(k, 0);

    pg_label copy = pg_label_new(k, "copy"), copied = pg_label_new(k, "copied");
    pg_reg j = pg_reg_new(k, PG_U32), idx = pg_reg_new(k, PG_U32);
    pg_reg off = pg_reg_new(k, PG_U64), g = pg_reg_new(k, PG_U64);
    pg_mov(k, PG_U32, i, tid);
    pg_label_bind(k, copy);
    pg_setp(k, PG_CMP_GE, PG_U32, done, i, nw);
    pg_bra_if(k, done, false, copied);
    pg_sub(k, PG_U32, j, nw, i);
    pg_mad(k, PG_U32, a, j, pg_u32(4), base);
    pg_ld(k, PG_SPACE_SHARED, PG_U32, a, -4, v);
    pg_mad(k, PG_U32, idx, cta, nw, i);
    pg_mul_wide(k, PG_U32, off, idx, pg_u32(4));
    pg_add(k, PG_U64, g, out, off);
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, g, 0, v);
    pg_add(k, PG_U32, i, i, ntid);
    pg_bra(k, copy);
    pg_label_bind(k, copied);
    pg_ret(k);
    return 0;
}

static int pat_launch(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    out->grid[0] = kn[K_BLOCKS];
    out->grid[1] = out->grid[2] = 1;
    out->block[0] = 256;
    out->block[1] = out->block[2] = 1;
    out->shared_bytes = kn[K_WORDS] * 4;
    out->cluster[0] = kn[K_CLUSTER];
    out->cluster[1] = out->cluster[2] = kn[K_CLUSTER] ? 1 : 0;
    return 0;
}

static const pgk_desc pat_desc = {.name = "smem_pattern",
                                  .summary = "dynamic shared memory pattern",
                                  .params = pat_params, .nparams = 2, .knobs = pat_knobs,
                                  .nknobs = K_N, .min_target = PG_SM_90, .build = pat_build,
                                  .launch = pat_launch};

static int check_pattern(pgrt_buf *ob, uint32_t blocks, uint32_t nw, const char *what)
{
    size_t n = (size_t)blocks * nw;
    uint32_t *o = malloc(n * sizeof *o);
    GPU_CHECK(pgrt_buf_download(ob, 0, o, n));
    int bad = 0;
    for (uint32_t b = 0; b < blocks; b++)
        for (uint32_t i = 0; i < nw; i++) {
            uint32_t want = (nw - 1 - i) * 2654435761u + b, got = o[(size_t)b * nw + i];
            if (got != want && bad++ < 5)
                fprintf(stderr, "%s: block %u word %u: 0x%08x, want 0x%08x\n", what, b, i, got,
                        want);
        }
    fprintf(stderr, "%s: %u blocks x %u bytes of dynamic shared memory, %d wrong\n", what, blocks,
            nw * 4, bad);
    free(o);
    return bad;
}

static void run_pattern(pgrt_ctx *ctx, pgrt_stream *s, pgrt_buf *ob, uint32_t blocks,
                        uint32_t nw, uint32_t cluster, const char *what)
{
    pgk_knobs kn;
    pgk_knobs_default(&pat_desc, &kn);
    kn.v[K_BLOCKS] = blocks;
    kn.v[K_WORDS] = nw;
    kn.v[K_CLUSTER] = cluster;
    pgrt_kernel *k = NULL;
    GPU_CHECK(pgrt_kernel_get(ctx, &pat_desc, &kn, &k));
    GPU_CHECK(pgrt_buf_fill32_async(ob, 0xdeadbeefu, s));
    pgrt_arg args[2] = {pgrt_arg_buf(ob), pgrt_arg_u32(nw)};
    GPU_CHECK(pgrt_kernel_launch(k, s, &kn, args, 2));
    GPU_CHECK(pgrt_stream_sync(s));
    REQUIRE_INT_EQ(check_pattern(ob, blocks, nw, what), 0);
}

static void test_shared_cluster(pgrt_ctx *ctx, const pgrt_device_info *info)
{
    uint32_t max_words = (uint32_t)info->shared_optin_bytes / 4;
    fprintf(stderr, "opt-in shared memory: %d bytes a block\n", info->shared_optin_bytes);
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    pgrt_buf *ob = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_U32, (size_t)8 * max_words, &ob));

    run_pattern(ctx, s, ob, 8, 4096, 0, "16 KiB");
    run_pattern(ctx, s, ob, 8, 25000, 0, "100000 B");
    run_pattern(ctx, s, ob, 4, max_words, 0, "opt-in maximum");
    run_pattern(ctx, s, ob, 8, 25000, 2, "cluster of 2, 100000 B");
    run_pattern(ctx, s, ob, 8, 1024, 4, "cluster of 4");

    /* One word past the maximum: refused, nothing runs. */
    pgk_knobs kn;
    pgk_knobs_default(&pat_desc, &kn);
    kn.v[K_BLOCKS] = 1;
    kn.v[K_WORDS] = max_words + 1;
    pgrt_kernel *k = NULL;
    GPU_CHECK(pgrt_kernel_get(ctx, &pat_desc, &kn, &k));
    pgrt_arg args[2] = {pgrt_arg_buf(ob), pgrt_arg_u32(max_words + 1)};
    REQUIRE_INT_EQ(pgrt_kernel_launch(k, s, &kn, args, 2), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "smem_pattern asks for");
    fprintf(stderr, "past the maximum: %s\n", pgrt_last_message());

    /* A cluster launch with 100000 bytes, captured and replayed twice. */
    kn.v[K_BLOCKS] = 8;
    kn.v[K_WORDS] = 25000;
    kn.v[K_CLUSTER] = 2;
    GPU_CHECK(pgrt_kernel_get(ctx, &pat_desc, &kn, &k));
    args[1] = pgrt_arg_u32(25000);
    pgrt_graph *g = NULL;
    GPU_CHECK(pgrt_capture_begin(s));
    GPU_CHECK(pgrt_kernel_launch(k, s, &kn, args, 2));
    GPU_CHECK(pgrt_capture_end(s, &g));
    for (int r = 0; r < 2; r++) {
        GPU_CHECK(pgrt_buf_fill32_async(ob, 0xdeadbeefu, s));
        GPU_CHECK(pgrt_graph_launch(g, s));
        GPU_CHECK(pgrt_stream_sync(s));
        REQUIRE_INT_EQ(check_pattern(ob, 8, 25000, "graph, cluster of 2"), 0);
    }
    pgrt_graph_destroy(&g);
    pgrt_buf_destroy(&ob);
    pgrt_stream_destroy(&s);
}

int main(void)
{
    pgrt_ctx *ctx = gpu_open();
    pgrt_device_info info;
    GPU_CHECK(pgrt_ctx_device_info(ctx, &info));
    /* The target, not only the card: under a target override (sm_80 on an
     * H100) the PTX cannot use what the card has. */
    if (info.cc_major < 9 || pg_target_sm(info.target) < 90) {
        fprintf(stderr, "skip: compute capability %d.%d, target %s: no tensor maps or clusters\n",
                info.cc_major, info.cc_minor, pg_target_name(info.target));
        pgrt_ctx_destroy(&ctx);
        return GPU_SKIP;
    }
    test_tma(ctx, &info);
    test_shared_cluster(ctx, &info);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
