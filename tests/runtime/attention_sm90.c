/* SPDX-License-Identifier: MIT */
/*
 * pgrt_attention_sm90_forward against the fake driver: what reaches the
 * launch (the kernel, built for sm_90a on a 9.0 device; grid (Hq, B,
 * query tiles), block, shared bytes by head_dim; the three rank-4 tensor
 * maps' dims, strides, boxes and swizzle; the scalar arguments) and every
 * refusal (device, NULLs, alignment, heads, head_dim, sizes), each with
 * its message and nothing launched; pgrt_attention_sm90_check the same.
 * The backward: pgrt_attention_sm90_backward's launches in order (prep,
 * dq, dkv and, with GQA, the group sums; dkv's outputs the per-head
 * scratch then), their grids, the 64-row boxes of its maps and the stats
 * map, and its refusals. Every sm_90a attention module is compiled as a
 * whole program: through cuModuleLoadDataEx, never the linker
 * (pgk_desc.whole_program), while a kernel without the flag takes the
 * linker.
 *
 * Usage: test_attention_sm90 FAKE_LIBCUDA
 */
#include "fake_sm90.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* A recorded [B, S, H, D] bf16 map: dims {D, H, S, B}, boxes {64, 1, 128, 1}. */
static void check_map4(const unsigned char *m, uint64_t base, uint32_t B, uint32_t S, uint32_t H,
                       uint32_t D)
{
    REQUIRE_INT_EQ(u32_at(m, 124), FAKECUDA_TMAP_MAGIC);
    REQUIRE(u64_at(m, 0) == base);
    REQUIRE_INT_EQ(u32_at(m, 12), 4);
    REQUIRE(u64_at(m, 16) == D && u64_at(m, 24) == H && u64_at(m, 32) == S && u64_at(m, 40) == B);
    REQUIRE(u64_at(m, 56) == 2ull * D && u64_at(m, 64) == 2ull * H * D &&
            u64_at(m, 72) == 2ull * S * H * D);
    REQUIRE(u32_at(m, 88) == 64 && u32_at(m, 92) == 1 && u32_at(m, 96) == 128 &&
            u32_at(m, 100) == 1);
    REQUIRE_INT_EQ(u32_at(m, 112), 3); /* CU_TENSOR_MAP_SWIZZLE_128B */
}

static void launches(void)
{
    pgrt_ctx *ctx = open_cc(90);
    pgrt_buf *q = buf(ctx, PG_BF16, 1 << 20), *kv = buf(ctx, PG_BF16, 1 << 20);
    pgrt_buf *o = buf(ctx, PG_F32, 1 << 20), *lse = buf(ctx, PG_F32, 1 << 16);
    pgrt_devptr pq = pgrt_buf_ptr(q), pk = pgrt_buf_ptr(kv), pv = pk + 65536;
    pgrt_devptr po = pgrt_buf_ptr(o), pl = pgrt_buf_ptr(lse);

    struct {
        uint32_t b, s, hq, hkv, d;
        bool bf16;
        uint32_t shared;
    } cases[] = {
        {2, 200, 12, 2, 128, false, 32768 + 3 * 65536 + 1024},
        {1, 1, 6, 1, 64, true, 16384 + 4 * 32768 + 1024},
        {3, 4096, 4, 4, 80, false, 32768 + 3 * 65536 + 1024},
        {1, 129, 2, 1, 8, true, 16384 + 4 * 32768 + 1024},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fk.reset();
        pgrt_attention90 a = {pq, pk, pv, po, cases[i].bf16 ? pq + 4096 : 0, pl,
                              cases[i].b, cases[i].s, cases[i].hq, cases[i].hkv, cases[i].d,
                              0.125f};
        int rc = pgrt_attention_sm90_forward(ctx, NULL, &a);
        if (rc)
            fprintf(stderr, "case %zu: %s\n", i, pgrt_last_message());
        REQUIRE_INT_EQ(rc, 0);
        REQUIRE_INT_EQ(fk.launch_count(), 1);
        if (fk.launch_count() != 1)
            continue;
        const fakecuda_launch *l = fk.launch_at(0);
        REQUIRE_STR_EQ(l->name, "attention_sm90_forward");
        REQUIRE_INT_EQ(l->block[0], 384);
        REQUIRE(l->grid[0] == cases[i].hq && l->grid[1] == cases[i].b &&
                l->grid[2] == (cases[i].s + 127) / 128);
        REQUIRE_INT_EQ(l->shared, cases[i].shared);
        REQUIRE_INT_EQ(l->nparams, 12);
        REQUIRE_INT_EQ(l->nbig, 3);
        check_map4(l->big[0], pq, cases[i].b, cases[i].s, cases[i].hq, cases[i].d);
        check_map4(l->big[1], pk, cases[i].b, cases[i].s, cases[i].hkv, cases[i].d);
        check_map4(l->big[2], pv, cases[i].b, cases[i].s, cases[i].hkv, cases[i].d);
        REQUIRE(l->params[3] == po && l->params[4] == (cases[i].bf16 ? pq + 4096 : 0) &&
                l->params[5] == pl);
        REQUIRE(l->params[6] == cases[i].b && l->params[7] == cases[i].s &&
                l->params[8] == cases[i].hq && l->params[9] == cases[i].hkv &&
                l->params[10] == cases[i].d);
        float sc;
        uint32_t bits = (uint32_t)l->params[11];
        memcpy(&sc, &bits, 4);
        REQUIRE(sc == 0.125f);
    }

    /* refusals: code and words of the message, nothing launched */
    struct {
        pgrt_attention90 a;
        int want;
        const char *says;
    } bad[] = {
        {{0, pk, pv, po, 0, pl, 1, 64, 4, 2, 64, 1}, PGRT_EINVAL, "q is 0"},
        {{pq, pk, pv, po, 0, 0, 1, 64, 4, 2, 64, 1}, PGRT_EINVAL, "lse is 0"},
        {{pq, pk + 8, pv, po, 0, pl, 1, 64, 4, 2, 64, 1}, PGRT_EINVAL, "k (0x"},
        {{pq, pk, pv, po, 0, pl, 1, 64, 6, 4, 64, 1}, PGRT_EINVAL, "multiple of kv_heads"},
        {{pq, pk, pv, po, 0, pl, 1, 64, 4, 0, 64, 1}, PGRT_EINVAL, "kv_heads=0"},
        {{pq, pk, pv, po, 0, pl, 1, 64, 4, 2, 60, 1}, PGRT_ERANGE, "head_dim=60"},
        {{pq, pk, pv, po, 0, pl, 1, 64, 4, 2, 136, 1}, PGRT_ERANGE, "attention_mma_forward"},
        {{pq, pk, pv, po, 0, pl, 0, 64, 4, 2, 64, 1}, PGRT_ERANGE, "batch=0"},
        {{pq, pk, pv, po, 0, pl, 1, 0, 4, 2, 64, 1}, PGRT_ERANGE, "seq_len=0"},
        {{pq, pk, pv, po, 0, pl, 1, (1u << 22) + 1, 4, 2, 64, 1}, PGRT_ERANGE, "seq_len 1..4194304"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fk.reset();
        int rc = pgrt_attention_sm90_forward(ctx, NULL, &bad[i].a);
        if (rc != bad[i].want || !strstr(pgrt_last_message(), bad[i].says))
            fprintf(stderr, "refusal %zu: %s: %s\n", i, pgrt_err_name(rc), pgrt_last_message());
        REQUIRE_INT_EQ(rc, bad[i].want);
        REQUIRE(strstr(pgrt_last_message(), bad[i].says) != NULL);
        REQUIRE_INT_EQ(fk.launch_count(), 0);
    }
    REQUIRE_INT_EQ(pgrt_attention_sm90_forward(ctx, NULL, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_attention_sm90_check(ctx, 12, 2, 128), 0);
    REQUIRE_INT_EQ(pgrt_attention_sm90_check(ctx, 12, 2, 30), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_attention_sm90_check(ctx, 12, 5, 64), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_attention_sm90_check(NULL, 12, 2, 64), PGRT_EINVAL);

    pgrt_buf *all[] = {q, kv, o, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgrt_buf_destroy(&all[i]);
    pgrt_ctx_destroy(&ctx);

    /* not a 9.0 device: no sm_90a */
    static const int ccs[] = {89, 100};
    for (size_t i = 0; i < 2; i++) {
        ctx = open_cc(ccs[i]);
        pgrt_buf *b = buf(ctx, PG_F32, 1024);
        pgrt_devptr p = pgrt_buf_ptr(b);
        pgrt_attention90 a = {p, p, p, p, 0, p, 1, 16, 2, 1, 64, 1};
        fk.reset();
        REQUIRE_INT_EQ(pgrt_attention_sm90_forward(ctx, NULL, &a), PGRT_ETARGET);
        REQUIRE(strstr(pgrt_last_message(), "sm_90a") != NULL);
        REQUIRE_INT_EQ(pgrt_attention_sm90_check(ctx, 2, 1, 64), PGRT_ETARGET);
        REQUIRE_INT_EQ(fk.launch_count(), 0);
        pgrt_buf_destroy(&b);
        pgrt_ctx_destroy(&ctx);
    }
}

static void backward(void)
{
    setenv("PTXGEN_CACHE", "0", 1); /* every module JIT-compiled: the counts below */
    pgrt_ctx *ctx = open_cc(90);
    pgrt_buf *a = buf(ctx, PG_F32, 1 << 22);
    pgrt_devptr p = pgrt_buf_ptr(a);
    const uint32_t B = 2, S = 200, D = 128;
    for (int gqa = 0; gqa < 2; gqa++) {
        uint32_t hq = 12, hkv = gqa ? 2 : 12;
        pgrt_attention90_grad g = {p,         p + 4096,   p + 8192,   p + 12288, p + 16384,
                                   p + 20480, p + 24576,  p + 28672,  p + 32768, p + 36864,
                                   p + 40960, gqa ? p + 45056 : 0, gqa ? p + 49152 : 0,
                                   B,         S,          hq,         hkv,       D,
                                   0.125f};
        fk.reset();
        int loads = fk.ex_loads(), links = fk.links();
        int rc = pgrt_attention_sm90_backward(ctx, NULL, &g);
        if (rc)
            fprintf(stderr, "backward gqa %d: %s\n", gqa, pgrt_last_message());
        REQUIRE_INT_EQ(rc, 0);
        REQUIRE_INT_EQ(fk.launch_count(), gqa ? 4 : 3);
        static const char *const names[4] = {"attention_sm90_backward_prep",
                                             "attention_sm90_backward_dq",
                                             "attention_sm90_backward_dkv",
                                             "attention_sm90_backward_group"};
        for (int i = 0; i < fk.launch_count() && i < 4; i++)
            REQUIRE(!strcmp(fk.launch_at(i)->name, names[i]));
        /* prep: a warp a row of the padded S; dq and dkv: a block a
         * 128-row tile of a query head */
        const fakecuda_launch *l = fk.launch_at(0);
        REQUIRE(l->grid[0] == 256 / 8 && l->grid[1] == hq && l->grid[2] == B);
        for (int i = 1; i < 3; i++) {
            l = fk.launch_at(i);
            REQUIRE(l->grid[0] == hq && l->grid[1] == B && l->grid[2] == 2);
            REQUIRE_INT_EQ(l->block[0], 384);
        }
        /* dq's four maps and dkv's five: boxes of 64 rows, the stats' of 128 f32 */
        l = fk.launch_at(2);
        REQUIRE(l->nbig >= 5);
        for (int m = 0; m < 4 && m < l->nbig; m++) {
            REQUIRE_INT_EQ(u32_at(l->big[m], 124), FAKECUDA_TMAP_MAGIC);
            REQUIRE_INT_EQ(u32_at(l->big[m], 96), 64);
            REQUIRE_INT_EQ(u32_at(l->big[m], 112), 3);
        }
        if (l->nbig >= 5) {
            REQUIRE(u64_at(l->big[4], 0) == p + 28672);
            REQUIRE_INT_EQ(u32_at(l->big[4], 12), 3);
            REQUIRE(u64_at(l->big[4], 16) == 2 * 256 && u64_at(l->big[4], 24) == hq &&
                    u64_at(l->big[4], 32) == B);
            REQUIRE_INT_EQ(u32_at(l->big[4], 88), 128);
            REQUIRE_INT_EQ(u32_at(l->big[4], 112), 0);
        }
        /* dkv writes the per-head scratch with GQA, grad_k and grad_v without */
        REQUIRE(l->params[l->nparams - 8] == (gqa ? p + 45056 : p + 36864));
        if (gqa) {
            l = fk.launch_at(3);
            REQUIRE(l->params[0] == p + 45056 && l->params[2] == p + 36864);
            REQUIRE(l->params[4] == (uint64_t)B * S * hkv * D);
        }
        /* the sm_90a modules are whole programs: no linker JIT for them */
        if (!gqa) {
            REQUIRE(fk.ex_loads() - loads >= 2);
            REQUIRE_INT_EQ(fk.links() - links, 1); /* prep, which keeps the linker */
        }
        if (gqa) { /* refusals: a missing scratch, a NULL */
            g.grad_v_heads = 0;
            fk.reset();
            REQUIRE_INT_EQ(pgrt_attention_sm90_backward(ctx, NULL, &g), PGRT_EINVAL);
            REQUIRE(strstr(pgrt_last_message(), "grad_k_heads") != NULL);
            g.grad_v_heads = p + 49152;
            g.stats = 0;
            REQUIRE_INT_EQ(pgrt_attention_sm90_backward(ctx, NULL, &g), PGRT_EINVAL);
            REQUIRE(strstr(pgrt_last_message(), "stats is 0") != NULL);
            g.stats = p + 28672 + 8;
            REQUIRE_INT_EQ(pgrt_attention_sm90_backward(ctx, NULL, &g), PGRT_EINVAL);
            REQUIRE(strstr(pgrt_last_message(), "aligned") != NULL);
            REQUIRE_INT_EQ(fk.launch_count(), 0);
        }
    }
    REQUIRE(pgrt_attention_sm90_stats_bytes(2, 200, 12) == 2ull * 12 * 256 * 8);
    REQUIRE_INT_EQ(pgrt_attention_sm90_backward(ctx, NULL, NULL), PGRT_EINVAL);
    pgrt_buf_destroy(&a);
    pgrt_ctx_destroy(&ctx);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_GLOBAL, "FAKE_LIBCUDA");
    launches();
    backward();
    TEST_DONE();
}
