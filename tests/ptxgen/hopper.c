/* SPDX-License-Identifier: MIT */
/* The Hopper builders against the exact lines they emit, their target
 * rules, the descriptor encoding, and the validator on warp-specialized
 * kernels (accepted) and real barrier divergence under them (refused). */
#include "util.h"

#include <stdlib.h>
#include <string.h>

static void texts(void)
{
    pg_kernel *k = mk("hop", PG_SM_90A);
    REQUIRE(k != NULL);
    if (!k)
        return;
    pg_param tm = pg_param_tensor_map(k, "tmap_a");
    pg_shared bars = pg_shared_static(k, PG_B64, 4, 8, "bars");
    pg_reg r1 = pg_reg_new(k, PG_U32), r2 = pg_reg_new(k, PG_U32), r3 = pg_reg_new(k, PG_U32);
    pg_reg r4 = pg_reg_new(k, PG_U32);
    pg_reg p1 = pg_reg_new(k, PG_PRED);

    pg_reg ta = pg_param_addr(k, tm);
    EXPECT_LINE(k, "cvta.param.u64 %rd1, tmap_a");
    pg_mbarrier_init(k, pg_shared_addr(bars), 8, pg_u32(1));
    EXPECT_LINE(k, "mbarrier.init.shared::cta.b64 [hop_bars1+8], 1");
    pg_mbarrier_init(k, r1, 0, r2);
    EXPECT_LINE(k, "mbarrier.init.shared::cta.b64 [%r1], %r2");
    pg_mbarrier_arrive(k, r1, 16);
    EXPECT_LINE(k, "mbarrier.arrive.shared::cta.b64 _, [%r1+16]");
    pg_mbarrier_arrive_expect_tx(k, r1, 0, pg_u32(49152));
    EXPECT_LINE(k, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 49152");
    pg_mbarrier_try_wait_parity(k, p1, r1, 8, r2);
    EXPECT_LINE(k, "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1+8], %r2");
    pg_fence_proxy_async(k);
    EXPECT_LINE(k, "fence.proxy.async.shared::cta");
    pg_fence_mbarrier_init(k);
    EXPECT_LINE(k, "fence.mbarrier_init.release.cluster");
    pg_val c2[2] = {r3, pg_s32(-64)};
    pg_cp_async_bulk_tensor(k, 2, r4, ta, c2, r1);
    EXPECT_LINE(k, "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                   "[%r4], [%rd1, {%r3, -64}], [%r1]");
    pg_val c3[3] = {r3, r2, pg_u32(5)};
    pg_cp_async_bulk_tensor(k, 3, r4, ta, c3, pg_shared_addr(bars));
    EXPECT_LINE(k, "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                   "[%r4], [%rd1, {%r3, %r2, 5}], [hop_bars1]");
    pg_val c5[5] = {pg_u32(64), r2, r3, pg_u32(0), r1};
    pg_cp_async_bulk_tensor(k, 4, r4, ta, c5, r1);
    EXPECT_LINE(k, "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                   "[%r4], [%rd1, {64, %r2, %r3, 0}], [%r1]");
    pg_cp_async_bulk_tensor(k, 5, r4, ta, c5, r1);
    EXPECT_LINE(k, "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes "
                   "[%r4], [%rd1, {64, %r2, %r3, 0, %r1}], [%r1]");
    pg_cp_async_bulk_commit(k);
    EXPECT_LINE(k, "cp.async.bulk.commit_group");
    pg_cp_async_bulk_wait(k, 0);
    EXPECT_LINE(k, "cp.async.bulk.wait_group 0");
    pg_setmaxnreg(k, false, 40);
    EXPECT_LINE(k, "setmaxnreg.dec.sync.aligned.u32 40");
    pg_setmaxnreg(k, true, 232);
    EXPECT_LINE(k, "setmaxnreg.inc.sync.aligned.u32 232");
    pg_reg v[4] = {r1, r2, r3, r4};
    pg_stmatrix(k, 4, true, r4, 32, v);
    EXPECT_LINE(k, "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r4+32], {%r1, %r2, %r3, %r4}");
    pg_stmatrix(k, 1, false, r4, 0, v);
    EXPECT_LINE(k, "stmatrix.sync.aligned.m8n8.x1.shared.b16 [%r4], {%r1}");
    pg_elect_sync(k, p1, pg_u32(0xffffffffu));
    EXPECT_LINE(k, "elect.sync _|%p1, 4294967295");
    pg_bar_sync_count(k, 1, 256);
    EXPECT_LINE(k, "bar.sync 1, 256");
    pg_bar_arrive(k, 2, 256);
    EXPECT_LINE(k, "bar.arrive 2, 256");
    pg_wgmma_fence(k);
    EXPECT_LINE(k, "wgmma.fence.sync.aligned");
    pg_wgmma_commit(k);
    EXPECT_LINE(k, "wgmma.commit_group.sync.aligned");
    pg_wgmma_wait(k, 1);
    EXPECT_LINE(k, "wgmma.wait_group.sync.aligned 1");

    /* the descriptor: register arithmetic, and the bits on the host */
    pg_reg da = pg_wgmma_desc(k, r4, 16, 1024, 0, PG_SWIZZLE_128B);
    EXPECT_LINE(k, "or.b64 %rd2, %rd2, 4611686293305360384");
    REQUIRE(pg_wgmma_desc_bits(0, 16, 1024, 0, PG_SWIZZLE_128B) ==
            ((UINT64_C(1) << 62) | (UINT64_C(64) << 32) | (UINT64_C(1) << 16)));
    REQUIRE(pg_wgmma_desc_bits(0x1f400, 0, 0, 0, PG_SWIZZLE_NONE) == 0x1f40);
    REQUIRE(pg_wgmma_desc_bits(0x40000, 0, 0, 0, PG_SWIZZLE_NONE) == 0); /* 14 bits of address */
    REQUIRE(pg_wgmma_desc_bits(0, 0, 0, 7, PG_SWIZZLE_32B) ==
            ((UINT64_C(3) << 62) | (UINT64_C(7) << 49)));
    REQUIRE(pg_wgmma_desc_bits(0, 0, 0, 0, PG_SWIZZLE_64B) == (UINT64_C(2) << 62));
    pg_reg db = pg_wgmma_desc(k, r4, 0, 512, 0, PG_SWIZZLE_64B);

    pg_reg d[8];
    for (int i = 0; i < 8; i++)
        d[i] = pg_reg_new(k, PG_F32);
    pg_wgmma w = {.n = 8, .ab = PG_BF16, .d = d, .a_desc = da, .b_desc = db,
                  .scale_d = p1, .scale_b = -1, .trans_b = true};
    pg_wgmma_mma_async(k, &w);
    EXPECT_LINE(k, "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, "
                   "%rd2, %rd3, %p1, 1, -1, 0, 1");
    w.n = 16;
    w.ab = PG_F16;
    w.scale_d = pg_u32(0);
    w.scale_b = 1;
    w.trans_a = true;
    w.trans_b = false;
    pg_wgmma_mma_async(k, &w);
    EXPECT_LINE(k, "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%f1, %f2, %f3, %f4, %f5, "
                   "%f6, %f7, %f8}, %rd2, %rd3, 0, 1, 1, 1, 0");
    /* A from registers: four b32 fragments, no trans-a */
    w.a_desc = pg_none();
    w.a = v;
    w.trans_a = false;
    w.n = 8;
    w.scale_d = pg_u32(1);
    w.scale_a = -1;
    pg_wgmma_mma_async(k, &w);
    EXPECT_LINE(k, "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f1, %f2, %f3, %f4}, "
                   "{%r1, %r2, %r3, %r4}, %rd3, 1, -1, 1, 0");

    pg_reg bd[4], ba[4], bb[2], bc[4];
    for (int i = 0; i < 4; i++) {
        bd[i] = d[i];
        bc[i] = d[4 + i];
        ba[i] = v[i];
    }
    bb[0] = r1;
    bb[1] = r2;
    pg_mma_m16n8k16_bf16_f32(k, bd, ba, bb, bc);
    EXPECT_LINE(k, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, "
                   "{%r1, %r2, %r3, %r4}, {%r1, %r2}, {%f5, %f6, %f7, %f8}");
    REQUIRE_INT_EQ(pg_kernel_isa(k), 80);
    pg_kernel_destroy(&k);
}

static void param_and_header(void)
{
    pg_kernel *k = mk("tm", PG_SM_90A);
    pg_param a = pg_param_tensor_map(k, "tmap");
    pg_param n = pg_param_add(k, PG_U32, "n");
    pg_kernel_set_maxntid(k, 384, 1, 1);
    pg_kernel_set_minnctapersm(k, 1);
    pg_reg ta = pg_param_addr(k, a);
    (void)ta;
    pg_reg nn = pg_param_load(k, n);
    (void)nn;
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE(ptx && strstr(ptx, "\t.param .align 64 .b8 tmap[128],\n\t.param .u32 n\n)\n"
                               ".maxntid 384, 1, 1\n.minnctapersm 1\n"));
    const char *name = NULL;
    pg_type t = PG_TYPE_COUNT;
    REQUIRE_INT_EQ(pg_kernel_param_info(k, 0, &name, &t), 0);
    REQUIRE_INT_EQ(t, PG_B8);
    pg_kernel_destroy(&k);

    k = mk("tm2", PG_SM_90A);
    a = pg_param_tensor_map(k, "tmap");
    pg_param_load(k, a);
    REQUIRE_INT_EQ(pg_kernel_error(k), PG_ETYPE);
    REQUIRE(strstr(pg_kernel_message(k), "is a tensor map") != NULL);
    pg_kernel_destroy(&k);
}

/* Each call on a target that lacks it: PG_ETARGET naming the target. */
static void target_rules(void)
{
    struct { pg_target t; int which; int want; const char *says; } cases[] = {
        {PG_SM_90, 0, PG_ETARGET, "needs sm_90a"},       /* wgmma.fence */
        {PG_SM_100A, 0, PG_ETARGET, "needs sm_90a"},     /* not on Blackwell */
        {PG_SM_90A, 0, 0, ""},
        {PG_SM_90, 1, PG_ETARGET, "arch-specific"},      /* setmaxnreg */
        {PG_SM_120, 1, PG_ETARGET, "arch-specific"},
        {PG_SM_100A, 1, 0, ""},
        {PG_SM_89, 2, PG_ETARGET, "sm_90 or newer"},     /* TMA */
        {PG_SM_90, 2, 0, ""},
        {PG_SM_89, 3, PG_ETARGET, "sm_90 or newer"},     /* try_wait.parity */
        {PG_SM_80, 4, 0, ""},                            /* mbarrier.init */
        {PG_SM_75, 4, PG_ETARGET, "sm_80 or newer"},
        {PG_SM_89, 5, PG_ETARGET, "sm_90 or newer"},     /* stmatrix */
        {PG_SM_89, 6, PG_ETARGET, "sm_90 or newer"},     /* elect */
        {PG_SM_75, 7, PG_ETARGET, "sm_80 or newer"},     /* bf16 mma */
        {PG_SM_80, 7, 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_kernel *k = mk("rule", cases[i].t);
        pg_reg r = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED), x = pg_reg_new(k, PG_U64);
        pg_reg f[4] = {pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32),
                       pg_reg_new(k, PG_F32)};
        pg_reg v[4] = {r, r, r, r};
        pg_val c[2] = {r, r};
        switch (cases[i].which) {
        case 0: pg_wgmma_fence(k); break;
        case 1: pg_setmaxnreg(k, true, 240); break;
        case 2: pg_cp_async_bulk_tensor(k, 2, r, x, c, r); break;
        case 3: pg_mbarrier_try_wait_parity(k, p, r, 0, pg_u32(0)); break;
        case 4: pg_mbarrier_init(k, r, 0, pg_u32(1)); break;
        case 5: pg_stmatrix(k, 4, false, r, 0, v); break;
        case 6: pg_elect_sync(k, p, pg_u32(~0u)); break;
        case 7: pg_mma_m16n8k16_bf16_f32(k, f, v, v, f); break;
        }
        REQUIRE_INT_EQ(pg_kernel_error(k), cases[i].want);
        REQUIRE(strstr(pg_kernel_message(k), cases[i].says) != NULL);
        if (cases[i].want)
            REQUIRE(strstr(pg_kernel_message(k), pg_target_name(cases[i].t)) != NULL);
        pg_kernel_destroy(&k);
    }
}

/* Operands out of range: one message each, the first error sticks. */
static void bad_operands(void)
{
    struct { int which; int want; const char *says; } cases[] = {
        {0, PG_ERANGE, "n = 12"},      {1, PG_ETYPE, "not .f32"},
        {2, PG_ERANGE, "setmaxnreg.inc 20"}, {3, PG_ERANGE, "multiple of 32"},
        {4, PG_ERANGE, "parity 2"},    {5, PG_ERANGE, "coordinate 3 does not fit s32"},
        {6, PG_ERANGE, "scale-d 2"},   {7, PG_ETYPE, "accumulator"},
        {8, PG_ERANGE, "wait_group 8"}, {9, PG_EINVAL, "no transpose"},
        {10, PG_EINVAL, "6d (2 to 5"}, {11, PG_EINVAL, "1d (2 to 5"},
        {12, PG_ERANGE, "bar.arrive 16, 256: barrier ids"},
        {13, PG_ERANGE, "bar.arrive 1, 1056: the thread count"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_kernel *k = mk("bad", PG_SM_90A);
        pg_reg r = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED), x = pg_reg_new(k, PG_U64);
        pg_reg f[8];
        for (int j = 0; j < 8; j++)
            f[j] = pg_reg_new(k, j == 3 && cases[i].which == 7 ? PG_U32 : PG_F32);
        pg_reg v[4] = {r, r, r, r};
        pg_val c[6] = {r, r, r, r, r, r};
        pg_wgmma w = {.n = 8, .ab = PG_BF16, .d = f, .a_desc = x, .b_desc = x, .scale_d = p};
        switch (cases[i].which) {
        case 0: w.n = 12; pg_wgmma_mma_async(k, &w); break;
        case 1: w.ab = PG_F32; pg_wgmma_mma_async(k, &w); break;
        case 2: pg_setmaxnreg(k, true, 20); break;
        case 3: pg_bar_sync_count(k, 1, 100); break;
        case 4: pg_mbarrier_try_wait_parity(k, p, r, 0, pg_u32(2)); break;
        case 5: c[3] = pg_u64(UINT64_C(1) << 33); pg_cp_async_bulk_tensor(k, 4, r, x, c, r); break;
        case 6: w.scale_d = pg_u32(2); pg_wgmma_mma_async(k, &w); break;
        case 7: pg_wgmma_mma_async(k, &w); break;
        case 8: pg_wgmma_wait(k, 8); break;
        case 9: w.a_desc = pg_none(); w.a = v; w.trans_a = true; pg_wgmma_mma_async(k, &w); break;
        case 10: pg_cp_async_bulk_tensor(k, 6, r, x, c, r); break;
        case 11: pg_cp_async_bulk_tensor(k, 1, r, x, c, r); break;
        case 12: pg_bar_arrive(k, 16, 256); break;
        case 13: pg_bar_arrive(k, 1, 1056); break;
        }
        REQUIRE_INT_EQ(pg_kernel_error(k), cases[i].want);
        if (!strstr(pg_kernel_message(k), cases[i].says))
            fprintf(stderr, "case %zu: message '%s'\n", i, pg_kernel_message(k));
        REQUIRE(strstr(pg_kernel_message(k), cases[i].says) != NULL);
        pg_kernel_destroy(&k);
    }
}

/* setmaxnreg.dec against the largest count a thread can have, as ptxas
 * holds it (C7406): the largest .inc, or with none the count at entry. */
static pg_kernel *maxnreg_kernel_for(pg_target t, uint32_t threads, uint32_t ctas)
{
    pg_kernel *k = mk("smr", t);
    if (k && threads)
        pg_kernel_set_maxntid(k, threads, 1, 1);
    if (k && ctas)
        pg_kernel_set_minnctapersm(k, ctas);
    return k;
}

static pg_kernel *maxnreg_kernel(uint32_t threads, uint32_t ctas)
{
    return maxnreg_kernel_for(PG_SM_90A, threads, ctas);
}

static void maxnreg_counts(void)
{
    static const struct { int form; const char *want; } bad[] = {
        {0, "smr: setmaxnreg.dec.sync.aligned.u32 96: more than the 72 registers of the "
            "kernel's largest setmaxnreg.inc; ptxas refuses a .dec above the registers a thread "
            "can have (C7406)"},
        {1, "smr: setmaxnreg.inc.sync.aligned.u32 72: the kernel's setmaxnreg.dec.sync.aligned."
            "u32 96 (instruction 0) asks for more, and with an .inc ptxas holds every .dec to "
            "the largest count an .inc asks for (C7406)"},
        {2, "smr: setmaxnreg.dec.sync.aligned.u32 176: more than the 168 registers a thread has "
            "at entry (.maxntid 384, 1, 1 and .minnctapersm 1); ptxas refuses a .dec above the "
            "registers a thread can have (C7406)"},
        {3, "smr: pg_kernel_set_minnctapersm: .maxntid 384, 1, 1 and .minnctapersm 1 leave a "
            "thread 168 registers at entry, fewer than setmaxnreg.dec.sync.aligned.u32 232 "
            "(instruction 0) asks for; ptxas refuses a .dec above the registers a thread can "
            "have (C7406)"},
        {4, "smr: pg_kernel_set_maxntid: .maxntid 96, 1, 1 and .minnctapersm 3 leave a thread "
            "168 registers at entry, fewer than setmaxnreg.dec.sync.aligned.u32 224 (instruction "
            "1) asks for; ptxas refuses a .dec above the registers a thread can have (C7406)"},
        {5, "smr: setmaxnreg.dec.sync.aligned.u32 40: more than the 32 registers a thread has at "
            "entry (.maxntid 100, 1, 1 and .minnctapersm 16); ptxas refuses a .dec above the "
            "registers a thread can have (C7406)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pg_kernel *k = NULL;
        switch (bad[i].form) {
        case 0:
            k = maxnreg_kernel(0, 0);
            pg_setmaxnreg(k, true, 72);
            pg_setmaxnreg(k, false, 96);
            break;
        case 1:
            k = maxnreg_kernel(0, 0);
            pg_setmaxnreg(k, false, 96);
            pg_setmaxnreg(k, true, 72);
            break;
        case 2:
            k = maxnreg_kernel(384, 1);
            pg_setmaxnreg(k, false, 176);
            break;
        case 3:
            k = maxnreg_kernel(0, 0);
            pg_setmaxnreg(k, false, 232);
            pg_kernel_set_maxntid(k, 384, 1, 1);
            pg_kernel_set_minnctapersm(k, 1);
            break;
        case 4:
            k = maxnreg_kernel(0, 3);
            pg_setmaxnreg(k, false, 96);
            pg_setmaxnreg(k, false, 224);
            pg_kernel_set_maxntid(k, 96, 1, 1);
            break;
        default:
            k = maxnreg_kernel(100, 16);
            pg_setmaxnreg(k, false, 40);
            break;
        }
        REQUIRE(k != NULL);
        REQUIRE_INT_EQ(pg_kernel_error(k), PG_ERANGE);
        REQUIRE_STR_EQ(pg_kernel_message(k), bad[i].want);
        pg_kernel_destroy(&k);
    }
    /* accepted: up to the entry count; below the largest .inc, before or
     * after it; any count where ptxas cannot tell (no .minnctapersm, or
     * more warps or blocks than an SM holds: it ignores .minnctapersm) */
    static const struct { uint32_t threads, ctas, inc, dec; } ok[] = {
        {384, 1, 0, 168}, {384, 1, 232, 40}, {384, 1, 240, 232}, {96, 3, 0, 168},
        {32, 5, 0, 256},  {1024, 2, 0, 32},  {0, 0, 0, 256},     {256, 0, 0, 256},
        {128, 17, 0, 256}, {32, 33, 0, 256}, {128, 1, 72, 72},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pg_kernel *k = maxnreg_kernel(ok[i].threads, ok[i].ctas);
        if (i % 2)
            pg_setmaxnreg(k, false, ok[i].dec);
        if (ok[i].inc)
            pg_setmaxnreg(k, true, ok[i].inc);
        if (i % 2 == 0)
            pg_setmaxnreg(k, false, ok[i].dec);
        if (pg_kernel_error(k))
            fprintf(stderr, "case %zu: %s\n", i, pg_kernel_message(k));
        REQUIRE_INT_EQ(pg_kernel_error(k), 0);
        pg_kernel_destroy(&k);
    }
}

/*
 * A warp-specialized skeleton: warpgroup 0 (tid.x >> 7 == 0) produces, one
 * elected thread of it issuing the copy; the others consume and meet at a
 * named barrier for 256 threads. `variant` breaks it:
 *   0: as described (accepted)
 *   1: the consumers' barrier is bar.sync 0 for the whole block (refused)
 *   2: the counted barrier sits under the elected thread's branch (refused)
 *   3: the consumers' branch is on tid.x & 7, inside a warp (refused)
 *   4: the warp index is computed as tid.x * 3 >> 7, not a warp index (refused)
 *   5: the consumers' setmaxnreg sits under tid.x < 200 (refused: .aligned)
 *   6: a wgmma.fence under the elected thread's guard (refused: .aligned)
 *   7: the pingpong of two consumer warpgroups: the second arrives at the
 *      first's named barrier, the first syncs there (accepted)
 *   8: a bar.arrive under the elected thread's branch (refused)
 */
static int specialized(int variant, char *msg, size_t n)
{
    pg_kernel *k = mk("ws", PG_SM_90A);
    pg_param tm = pg_param_tensor_map(k, "tmap");
    pg_shared tile = pg_shared_static(k, PG_B8, 4096, 128, "tile");
    pg_shared bar = pg_shared_static(k, PG_B64, 1, 8, "bar");
    pg_reg ta = pg_param_addr(k, tm);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg wg = variant == 4 ? pgv_shr(k, PG_U32, pgv_mul(k, PG_U32, tid, pg_u32(3)), pg_u32(7))
              : variant == 3 ? pgv_and(k, PG_U32, tid, pg_u32(7))
                             : pgv_shr(k, PG_U32, tid, pg_u32(7));
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, tid, pg_u32(0));
    pg_label inited = pg_label_new(k, "inited");
    pg_bra_if(k, first, true, inited);
    pg_mbarrier_init(k, pg_shared_addr(bar), 0, pg_u32(1));
    pg_fence_mbarrier_init(k);
    pg_label_bind(k, inited);
    pg_bar_sync(k, 0);

    pg_reg prod = pgv_setp(k, PG_CMP_EQ, PG_U32, wg, pg_u32(0));
    pg_label producer = pg_label_new(k, "producer"), done = pg_label_new(k, "done");
    pg_bra_if(k, prod, false, producer);
    /* consumers */
    if (variant == 5) {
        pg_label s5 = pg_label_new(k, "s5");
        pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, tid, pg_u32(200)), false, s5);
        pg_setmaxnreg(k, true, 232);
        pg_label_bind(k, s5);
    } else {
        pg_setmaxnreg(k, true, 232);
    }
    pg_wgmma_fence(k); /* under the warpgroup branch: fine */
    pg_mbarrier_wait_parity(k, pg_shared_addr(bar), 0, pg_u32(0));
    if (variant == 1)
        pg_bar_sync(k, 0);
    else if (variant != 2)
        pg_bar_sync_count(k, 1, 256);
    if (variant == 7) {
        pg_label own = pg_label_new(k, "own"), turned = pg_label_new(k, "turned");
        pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, wg, pg_u32(1)), false, own);
        pg_bar_arrive(k, 2, 256);
        pg_bra(k, turned);
        pg_label_bind(k, own);
        pg_bar_sync_count(k, 2, 256);
        pg_label_bind(k, turned);
    }
    pg_bra(k, done);
    /* producer */
    pg_label_bind(k, producer);
    pg_setmaxnreg(k, false, 40);
    pg_reg leader = pg_reg_new(k, PG_PRED);
    pg_elect_sync(k, leader, pg_u32(0xffffffffu));
    pg_label skip = pg_label_new(k, "skip");
    if (variant == 6) {
        pg_guard(k, leader, false);
        pg_wgmma_fence(k);
    }
    pg_bra_if(k, leader, true, skip);
    pg_mbarrier_arrive_expect_tx(k, pg_shared_addr(bar), 0, pg_u32(4096));
    pg_reg sa = pgv_mov(k, PG_U32, pg_shared_addr(tile));
    pg_val c[2] = {pg_u32(0), pg_u32(0)};
    pg_cp_async_bulk_tensor(k, 2, sa, ta, c, pg_shared_addr(bar));
    if (variant == 2)
        pg_bar_sync_count(k, 1, 256);
    if (variant == 8)
        pg_bar_arrive(k, 2, 256);
    pg_label_bind(k, skip);
    pg_label_bind(k, done);
    const char *ptx = NULL;
    int rc = emit(k, &ptx);
    snprintf(msg, n, "%s", pg_kernel_message(k));
    pg_kernel_destroy(&k);
    return rc;
}

static void validator(void)
{
    char msg[PG_MSG_MAX];
    REQUIRE_INT_EQ(specialized(0, msg, sizeof msg), 0);
    REQUIRE_STR_EQ(msg, "");
    for (int v = 1; v <= 4; v++) {
        REQUIRE_INT_EQ(specialized(v, msg, sizeof msg), PG_EDIVERGE);
        /* 3 and 4 split warps: the consumers' setmaxnreg is refused first */
        REQUIRE(strstr(msg, v <= 2 ? "barrier divergence" : "setmaxnreg") != NULL);
    }
    REQUIRE_INT_EQ(specialized(5, msg, sizeof msg), PG_EDIVERGE);
    REQUIRE(strstr(msg, "setmaxnreg.inc.sync.aligned.u32 232") && strstr(msg, ".aligned") &&
            strstr(msg, "branch") && strstr(msg, "%tid.x"));
    REQUIRE_INT_EQ(specialized(6, msg, sizeof msg), PG_EDIVERGE);
    REQUIRE(strstr(msg, "wgmma.fence") && strstr(msg, "guard") && strstr(msg, "per-lane"));
    specialized(1, msg, sizeof msg);
    REQUIRE(strstr(msg, "bar.sync 0") != NULL && strstr(msg, "%tid.x") != NULL);
    specialized(2, msg, sizeof msg);
    REQUIRE(strstr(msg, "bar.sync 1, 256") != NULL && strstr(msg, "warps it counts") != NULL);
    REQUIRE_INT_EQ(specialized(7, msg, sizeof msg), 0);
    REQUIRE_STR_EQ(msg, "");
    REQUIRE_INT_EQ(specialized(8, msg, sizeof msg), PG_EDIVERGE);
    REQUIRE(strstr(msg, "bar.arrive 2, 256") != NULL && strstr(msg, "warps it counts") != NULL);

    /* accumulators are defined by the wgmma that writes them and read by
     * one whose scale-d is not 0 */
    pg_kernel *k = mk("acc", PG_SM_90A);
    pg_reg x = pgv_mov(k, PG_U64, pg_u64(0));
    pg_reg d[4] = {pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32),
                   pg_reg_new(k, PG_F32)};
    pg_wgmma w = {.n = 8, .ab = PG_BF16, .d = d, .a_desc = x, .b_desc = x, .scale_d = pg_u32(0)};
    pg_wgmma_mma_async(k, &w);
    w.scale_d = pg_u32(1);
    pg_wgmma_mma_async(k, &w);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, x, 0, d[3]);
    const char *ptx = NULL;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    pg_kernel_destroy(&k);
    k = mk("acc2", PG_SM_90A);
    x = pgv_mov(k, PG_U64, pg_u64(0));
    for (int i = 0; i < 4; i++)
        d[i] = pg_reg_new(k, PG_F32);
    w.a_desc = w.b_desc = x;
    pg_wgmma_mma_async(k, &w); /* scale-d 1: reads d before any write */
    REQUIRE_INT_EQ(emit(k, &ptx), PG_EUNDEF);
    pg_kernel_destroy(&k);
}

/*
 * Every instruction of this file the target has, in one kernel that
 * ptxas must accept without a warning: wgmma at every n from 8 to 256 (A
 * from shared memory and from registers), setmaxnreg (sm_90a); TMA 2-D to
 * 5-D, mbarrier expect_tx / try_wait, the fences, elect, stmatrix, bulk
 * groups (sm_90); mbarrier init / arrive, bf16 mma.sync, bar.sync and
 * bar.arrive with a count (sm_80).
 */
static char *showcase(pg_target t)
{
    pg_kernel *k = mk("showcase", t);
    unsigned sm = pg_target_sm(t);
    pg_param tm = pg_param_tensor_map(k, "tmap");
    pg_param out = pg_param_add(k, PG_U64, "out");
    pg_kernel_set_maxntid(k, 384, 1, 1);
    pg_kernel_set_minnctapersm(k, 1);
    pg_shared tile = pg_shared_static(k, PG_B8, 32768, 128, "tile");
    pg_shared bar = pg_shared_static(k, PG_B64, 2, 8, "bar");
    pg_reg o = pg_param_load(k, out);
    pg_reg sa = pgv_mov(k, PG_U32, pg_shared_addr(tile));
    pg_reg ba = pgv_mov(k, PG_U32, pg_shared_addr(bar));
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_mbarrier_init(k, ba, 0, pg_u32(1));
    pg_mbarrier_init(k, ba, 8, tid);
    pg_bar_sync(k, 0);
    pg_reg f[128];
    for (int i = 0; i < 128; i++)
        f[i] = pgv_mov(k, PG_F32, pg_f32(0.0f));
    pg_reg r[4];
    for (int i = 0; i < 4; i++)
        r[i] = pgv_mov(k, PG_U32, tid);
    pg_mma_m16n8k16_bf16_f32(k, f, r, r, f + 4);
    pg_mbarrier_arrive(k, ba, 8);
    pg_reg wg = pgv_shr(k, PG_U32, tid, pg_u32(7));
    pg_reg side = pgv_setp(k, PG_CMP_EQ, PG_U32, wg, pg_u32(1));
    pg_label skip = pg_label_new(k, "skip");
    pg_label other = pg_label_new(k, "other");
    pg_bra_if(k, side, true, other);
    pg_bar_sync_count(k, 1, 128);
    pg_bar_sync_count(k, 2, 256);
    pg_bra(k, skip);
    pg_label_bind(k, other); /* warpgroup 2 hands warpgroup 1 its turn */
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, wg, pg_u32(0)), false, skip);
    pg_bar_arrive(k, 2, 256);
    pg_label_bind(k, skip);
    if (sm >= 90) {
        pg_reg ta = pg_param_addr(k, tm);
        pg_reg lead = pg_reg_new(k, PG_PRED);
        pg_elect_sync(k, lead, pg_u32(0xffffffffu));
        pg_fence_mbarrier_init(k);
        pg_fence_proxy_async(k);
        pg_guard(k, lead, false);
        pg_mbarrier_arrive_expect_tx(k, ba, 0, pg_u32(8192));
        pg_val c2[2] = {pg_u32(0), tid};
        pg_guard(k, lead, false);
        pg_cp_async_bulk_tensor(k, 2, sa, ta, c2, ba);
        pg_val c3[3] = {pg_u32(0), pg_u32(0), tid};
        pg_guard(k, lead, false);
        pg_cp_async_bulk_tensor(k, 3, sa, ta, c3, ba);
        pg_val c5[5] = {pg_u32(0), pg_u32(1), tid, pg_u32(2), tid};
        pg_guard(k, lead, false);
        pg_cp_async_bulk_tensor(k, 4, sa, ta, c5, ba);
        pg_guard(k, lead, false);
        pg_cp_async_bulk_tensor(k, 5, sa, ta, c5, ba);
        pg_mbarrier_wait_parity(k, ba, 0, pg_u32(0));
        pg_stmatrix(k, 4, true, sa, 0, r);
        pg_stmatrix(k, 2, false, sa, 16, r);
        pg_cp_async_bulk_commit(k);
        pg_cp_async_bulk_wait(k, 0);
    }
    if (t == PG_SM_90A) {
        pg_setmaxnreg(k, true, 232);
        pg_reg da = pg_wgmma_desc(k, sa, 16, 1024, 0, PG_SWIZZLE_128B);
        pg_reg db = pg_wgmma_desc(k, pg_shared_addr(tile), 8192, 1024, 0, PG_SWIZZLE_128B);
        pg_wgmma_fence(k);
        for (unsigned n = 8; n <= 256; n += 8) {
            pg_wgmma w = {.n = n, .ab = n % 16 ? PG_F16 : PG_BF16, .d = f, .a_desc = da,
                          .b_desc = db, .scale_d = pg_u32(n > 8), .trans_b = n % 24 == 0};
            pg_wgmma_mma_async(k, &w);
        }
        pg_wgmma w = {.n = 64, .ab = PG_BF16, .d = f, .a = r, .b_desc = db, .scale_d = side,
                      .scale_a = -1};
        pg_wgmma_mma_async(k, &w);
        pg_wgmma_commit(k);
        pg_wgmma_wait(k, 0);
    }
    for (int i = 0; i < 128; i++)
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, o, 4 * i, f[i]);
    const char *ptx = NULL;
    char *copy = NULL;
    if (emit(k, &ptx) == 0)
        copy = strdup(ptx);
    else
        fprintf(stderr, "showcase %s: %s\n", pg_target_name(t), pg_kernel_message(k));
    pg_kernel_destroy(&k);
    return copy;
}

/* Write text to DIR/NAME and assemble it for arch (warnings as errors if
 * `werror`): the ptxas command's status. `quiet`: what ptxas says goes
 * nowhere. */
static int assemble(const char *ptxas, const char *dir, const char *name, const char *text,
                    const char *arch, bool werror, bool quiet)
{
    char path[4096], cmd[8400];
    snprintf(path, sizeof path, "%s/%s.ptx", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "'%s' -arch=%s%s -o /dev/null '%s'%s", ptxas, arch,
             werror ? " --warning-as-error" : "", path, quiet ? " >/dev/null 2>&1" : "");
    return system(cmd);
}

/* The setmaxnreg.dec counts the builder takes, against ptxas: for each
 * target that has setmaxnreg and each block shape, the largest .dec it
 * takes must assemble and (below 256) the next one must not. */
static int maxnreg_ptxas(const char *ptxas, const char *dir)
{
    /* the last three are more than any SM holds, the three before them
     * more than an sm_120a one: ptxas takes .minnctapersm as 1 and warns */
    static const uint32_t shape[][2] = {{384, 1},  {96, 3},   {32, 5},   {640, 1}, {1000, 1},
                                        {256, 2},  {32, 24},  {128, 12}, {128, 16}, {1024, 2},
                                        {100, 16}, {32, 32},  {128, 17}, {1024, 3}, {32, 33}};
    static const pg_target ts[] = {PG_SM_90A, PG_SM_100A, PG_SM_120A};
    int bad = 0;
    for (size_t j = 0; j < sizeof ts * sizeof shape / sizeof ts[0] / sizeof shape[0]; j++) {
        pg_target t = ts[j / (sizeof shape / sizeof shape[0])];
        size_t i = j % (sizeof shape / sizeof shape[0]);
        const char *arch = pg_target_name(t);
        uint32_t top = 0;
        char *text = NULL;
        for (uint32_t n = 256; n >= 24 && !top; n -= 8) {
            pg_kernel *k = maxnreg_kernel_for(t, shape[i][0], shape[i][1]);
            pg_setmaxnreg(k, false, n);
            const char *ptx = NULL;
            if (emit(k, &ptx) == 0) {
                top = n;
                text = strdup(ptx);
            }
            pg_kernel_destroy(&k);
        }
        char name[64], *at = text ? strstr(text, "setmaxnreg.dec.sync.aligned.u32 ") : NULL;
        if (!at) {
            fprintf(stderr, "%s, maxntid %u, minnctapersm %u: no setmaxnreg.dec taken\n", arch,
                    shape[i][0], shape[i][1]);
            free(text);
            bad++;
            continue;
        }
        snprintf(name, sizeof name, "maxnreg_%s_%u_%u", arch, shape[i][0], shape[i][1]);
        /* a block shape the SM cannot hold draws ptxas's warning */
        bool b120 = t == PG_SM_120A;
        bool holds = (shape[i][0] + 31) / 32 * shape[i][1] <= (b120 ? 48u : 64u) &&
                     shape[i][1] <= (b120 ? 24u : 32u);
        int took = assemble(ptxas, dir, name, text, arch, holds, false);
        int refused = 0;
        if (top < 256) { /* the same text asking for 8 more */
            const char *rest = at + strcspn(at, ";");
            size_t len = strlen(text) + 8;
            char *more = malloc(len);
            if (more) {
                snprintf(more, len, "%.*ssetmaxnreg.dec.sync.aligned.u32 %u%s",
                         (int)(at - text), text, top + 8, rest);
                strcat(name, "_more");
                refused = assemble(ptxas, dir, name, more, arch, holds, true) != 0;
                free(more);
            }
        }
        fprintf(stderr, "%s, maxntid %u, minnctapersm %u: the builder takes setmaxnreg.dec up to "
                "%u; ptxas %s it%s\n", arch, shape[i][0], shape[i][1], top,
                took ? "REFUSES" : "takes",
                top == 256 ? "" : refused == 1 ? " and refuses 8 more" : " but also takes 8 more");
        bad += took != 0 || (top < 256 && refused != 1);
        free(text);
    }
    return bad;
}

/* test_hopper --ptxas PTXAS DIR: assemble the showcase for sm_80, sm_90
 * and sm_90a, warnings as errors, and hold the builder's setmaxnreg.dec
 * limits to ptxas's. */
static int ptxas_check(const char *ptxas, const char *dir)
{
    static const pg_target ts[] = {PG_SM_80, PG_SM_90, PG_SM_90A};
    int bad = 0;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        char *ptx = showcase(ts[i]);
        char path[4096], cmd[8400];
        snprintf(path, sizeof path, "%s/showcase_%s.ptx", dir, pg_target_name(ts[i]));
        FILE *f = ptx ? fopen(path, "w") : NULL;
        if (!f || fputs(ptx, f) == EOF || fclose(f) != 0) {
            fprintf(stderr, "cannot emit or write %s\n", path);
            free(ptx);
            return 1;
        }
        snprintf(cmd, sizeof cmd, "'%s' -arch=%s --warning-as-error -o /dev/null '%s'", ptxas,
                 pg_target_name(ts[i]), path);
        int rc = system(cmd);
        fprintf(stderr, "%s: %s\n", cmd, rc == 0 ? "ok" : "FAILED");
        bad += rc != 0;
        free(ptx);
    }
    bad += maxnreg_ptxas(ptxas, dir);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--ptxas") == 0)
        return ptxas_check(argv[2], argv[3]);
    texts();
    param_and_header();
    target_rules();
    bad_operands();
    maxnreg_counts();
    validator();
    TEST_DONE();
}
