/* SPDX-License-Identifier: MIT */
/*
 * pgk_gemm_choose(): every layout, type pair and target gets a kernel that
 * supports the target, knobs that launch within the target's shared memory,
 * and a consistent split (a reduce kernel and a workspace exactly when it
 * splits); thin LoRA shapes (a side of 64 or less) get gemm_thin in the
 * form for the side where it wins (f32, R thin, below sm_80) and split-K
 * elsewhere; older targets get the fallback, f32 the
 * f32 kernels with their own size order; bad arguments are refused; the
 * choice is a pure function of its arguments; on sm_90a the large 16-bit
 * shapes go to gemm_sm90 and the thin, misfit or cross-typed ones stay on
 * the mma.sync family.
 */
#include "ptxgen/pgk.h"
#include "test.h"

#include <string.h>

static uint32_t smem_limit(pg_target t)
{
    unsigned sm = pg_target_sm(t);
    return sm == 80 || sm == 87 ? 163u * 1024 : sm == 90 || sm == 100 ? 227u * 1024 : 99u * 1024;
}

static void check_choice(pgk_gemm_layout l, pg_type it, pg_type ot, uint32_t m, uint32_t n,
                         uint32_t k, pg_target t, unsigned sms)
{
    pgk_gemm_choice ch;
    int rc = pgk_gemm_choose(l, it, ot, m, n, k, t, sms, &ch);
    uint32_t P0 = l == PGK_GEMM_BACKWARD_W ? n : m, Q0 = l == PGK_GEMM_FORWARD ? n : k;
    uint32_t R0 = l == PGK_GEMM_FORWARD ? k : l == PGK_GEMM_BACKWARD_X ? n : m;
    uint32_t side = P0 < Q0 ? P0 : Q0;
    side = R0 < side ? R0 : side;
    bool thin = side <= 64 && (uint64_t)P0 * Q0 * R0 <= (1ull << 28);
    if (pg_target_sm(t) < 80 && !thin && (m > 1048560 || n > 1048560)) {
        REQUIRE_INT_EQ(rc, PG_ERANGE); /* the fallback's limit */
        return;
    }
    REQUIRE_INT_EQ(rc, 0);
    if (rc)
        return;
    REQUIRE(ch.desc != NULL && pgk_supports(ch.desc, t));
    pgk_launch la;
    char err[256] = "";
    REQUIRE_INT_EQ(pgk_launch_for(ch.desc, &ch.knobs, &la, err, sizeof err), 0);
    REQUIRE(la.shared_bytes <= smem_limit(t));
    REQUIRE(ch.split >= 1);
    uint32_t P = l == PGK_GEMM_BACKWARD_W ? n : m, Q = l == PGK_GEMM_FORWARD ? n : k;
    if (ch.split > 1) {
        REQUIRE(ch.reduce != NULL);
        REQUIRE(ch.workspace_bytes == (uint64_t)P * Q * 4 * ch.split);
        REQUIRE_INT_EQ(ch.reduce_knobs.v[pgk_knob_index(ch.reduce, "n")], P * Q);
        REQUIRE_INT_EQ(ch.reduce_knobs.v[pgk_knob_index(ch.reduce, "split")], ch.split);
        REQUIRE_INT_EQ(pgk_launch_for(ch.reduce, &ch.reduce_knobs, &la, err, sizeof err), 0);
    } else {
        REQUIRE(ch.reduce == NULL && ch.workspace_bytes == 0);
    }
    pgk_gemm_layout dl;
    pg_type dit, dot;
    uint32_t dm, dn, dk;
    REQUIRE(pgk_gemm_describe(ch.desc, &ch.knobs, &dl, &dit, &dot, &dm, &dn, &dk));
    REQUIRE(dl == l && dit == it && dot == ot && dm == m && dn == n && dk == k);
    pgk_gemm_choice again;
    pgk_gemm_choose(l, it, ot, m, n, k, t, sms, &again);
    REQUIRE(memcmp(&ch, &again, sizeof ch) == 0);
}

int main(void)
{
    static const pg_target targets[] = {PG_SM_70, PG_SM_75, PG_SM_80, PG_SM_86, PG_SM_89,
                                        PG_SM_90, PG_SM_90A, PG_SM_120};
    static const pg_type ins[] = {PG_F16, PG_BF16};
    static const pg_type outs[] = {PG_F32, PG_F16, PG_BF16};
    static const uint32_t shapes[][3] = {{1, 1, 1},         {2048, 1536, 1536}, {2048, 16, 1536},
                                         {2048, 1536, 16},  {17, 33, 4095},     {4096, 4096, 4096},
                                         {2048, 151936, 1536}, {1u << 21, 1, 1}};
    for (size_t ti = 0; ti < sizeof targets / sizeof targets[0]; ti++)
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
            for (unsigned i = 0; i < 2; i++)
                for (unsigned o = 0; o < 3; o++)
                    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                        check_choice((pgk_gemm_layout)l, ins[i], outs[o], shapes[s][0],
                                     shapes[s][1], shapes[s][2], targets[ti], s % 2 ? 132 : 0);

    pgk_gemm_choice ch;
    /* below sm_80: the fallback, in the layout and types asked for */
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_BACKWARD_W, PG_BF16, PG_F16, 256, 128, 96, PG_SM_75,
                                   0, &ch), 0);
    REQUIRE_STR_EQ(ch.desc->name, "gemm_lp_simt");
    REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "layout")], PGK_GEMM_BACKWARD_W);
    /* sm_80 and up: the mma.sync family */
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_BACKWARD_X, PG_F16, PG_F32, 130, 100, 96, PG_SM_90A,
                                   0, &ch), 0);
    REQUIRE_STR_EQ(ch.desc->name, "gemm_mma_backward_x");
    /* a side of 64 or less (LoRA ranks): gemm_thin, one launch, in the
     * form for the thin side (0 outer: R; 1 narrow on Q; 2 narrow on P),
     * where it was measured to win: f32 inputs in every form, 16-bit ones
     * in the outer form, and every form below sm_80 (no tensor cores);
     * the narrow 16-bit shapes stay on mma.sync with split-K */
    static const struct {
        pgk_gemm_layout l;
        pg_type it, ot;
        uint32_t m, n, k;
        pg_target t;
        int form; /* -1: not gemm_thin (mma.sync, split); 3, 4: its mma.sync forms */
        uint32_t j;
    } thin[] = {
        {PGK_GEMM_FORWARD, PG_BF16, PG_BF16, 2048, 16, 1536, PG_SM_90, 3, 16},
        {PGK_GEMM_FORWARD, PG_BF16, PG_F32, 2048, 1536, 16, PG_SM_90A, 0, 16},
        {PGK_GEMM_BACKWARD_X, PG_F16, PG_F16, 2048, 16, 1536, PG_SM_90A, 0, 16},
        {PGK_GEMM_BACKWARD_X, PG_F16, PG_F32, 2048, 1536, 16, PG_SM_80, 3, 16},
        {PGK_GEMM_BACKWARD_W, PG_BF16, PG_F32, 2048, 16, 1536, PG_SM_80, 4, 16},
        {PGK_GEMM_BACKWARD_W, PG_BF16, PG_F32, 2048, 1536, 16, PG_SM_90, 3, 16},
        {PGK_GEMM_BACKWARD_W, PG_BF16, PG_F32, 2048, 1536, 16, PG_SM_75, 1, 16},
        {PGK_GEMM_BACKWARD_W, PG_F32, PG_F32, 2048, 1536, 16, PG_SM_70, 1, 16},
        {PGK_GEMM_BACKWARD_W, PG_F32, PG_F32, 2048, 16, 1536, PG_SM_90A, 2, 16},
        {PGK_GEMM_FORWARD, PG_F32, PG_F32, 2048, 64, 1536, PG_SM_120, 1, 64},
        {PGK_GEMM_FORWARD, PG_F32, PG_F32, 2048, 33, 1536, PG_SM_90A, 1, 64},
        {PGK_GEMM_BACKWARD_W, PG_F16, PG_BF16, 2048, 8, 1536, PG_SM_75, 2, 8},
        {PGK_GEMM_BACKWARD_X, PG_F32, PG_F32, 2048, 1536, 16, PG_SM_86, 1, 16},
        {PGK_GEMM_BACKWARD_X, PG_F32, PG_F32, 2048, 16, 1536, PG_SM_89, 0, 16},
    };
    for (size_t i = 0; i < sizeof thin / sizeof thin[0]; i++) {
        REQUIRE_INT_EQ(pgk_gemm_choose(thin[i].l, thin[i].it, thin[i].ot, thin[i].m, thin[i].n,
                                       thin[i].k, thin[i].t, 132, &ch), 0);
        if (thin[i].form < 0) {
            REQUIRE(strncmp(ch.desc->name, "gemm_mma_", 9) == 0 && ch.split > 1);
            continue;
        }
        REQUIRE_STR_EQ(ch.desc->name, "gemm_thin");
        REQUIRE(ch.split == 1 && ch.reduce == NULL && ch.workspace_bytes == 0);
        REQUIRE(ch.m == thin[i].m && ch.n == thin[i].n && ch.k == thin[i].k);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "layout")], thin[i].l);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "form")], thin[i].form);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "j")], thin[i].j);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "in")],
                       thin[i].it == PG_F32 ? 2 : thin[i].it == PG_BF16 ? 1 : 0);
    }
    /* a thin side with much work (rank 64 against a vocabulary): the
     * tensor cores, split-K */
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_BACKWARD_X, PG_BF16, PG_F32, 2048, 151936, 64,
                                   PG_SM_90, 132, &ch), 0);
    REQUIRE_STR_EQ(ch.desc->name, "gemm_mma_backward_x");
    /* sm_90a: gemm_sm90 for the large 16-bit shapes, its (m, n, k) the
     * kernel's (P, Q, R), the tile width in its knob bn, and a split along
     * R (slices of at least 32 k-blocks, the kernel's own sum: no reduce)
     * only where the tiles leave SMs idle */
    static const uint32_t wg[][3] = {{2048, 1536, 1536}, {2048, 256, 1536}, {2048, 8960, 1536},
                                     {2048, 1536, 8960}, {4096, 4096, 4096}, {128, 128, 128}};
    for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++)
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
            for (unsigned ty = 0; ty < 4; ty++) {
                pg_type it = ty & 2 ? PG_F16 : PG_BF16, ot = ty & 1 ? it : PG_F32;
                uint32_t m = wg[i][0], n = wg[i][1], k = wg[i][2];
                REQUIRE_INT_EQ(pgk_gemm_choose((pgk_gemm_layout)l, it, ot, m, n, k, PG_SM_90A,
                                               132, &ch), 0);
                REQUIRE_STR_EQ(ch.desc->name, "gemm_sm90");
                uint32_t P = l == PGK_GEMM_BACKWARD_W ? n : m, Q = l == PGK_GEMM_FORWARD ? n : k;
                uint32_t R = l == PGK_GEMM_FORWARD ? k : l == PGK_GEMM_BACKWARD_X ? n : m;
                uint32_t bn = pgk_gemm_sm90_bn(P, Q, 132);
                uint64_t tiles = (P + 127u) / 128u * ((Q + bn - 1) / bn);
                REQUIRE(ch.reduce == NULL && ch.split >= 1);
                REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "split")], ch.split);
                REQUIRE(ch.split == 1 || (tiles * 4 <= 132 && (R + 63) / 64 >= 64 &&
                                          tiles * ch.split <= 132 &&
                                          ch.split * 32 <= (R + 63) / 64));
                REQUIRE(ch.workspace_bytes == pgk_gemm_sm90_workspace(P, Q, bn, ch.split));
                REQUIRE(ch.m == P && ch.n == Q && ch.k == R);
                REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "layout")], l);
                REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "types")], ty);
                REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "epilogue")], 0);
                REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "sms")], 132);
                REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "bn")],
                               pgk_gemm_sm90_bn(P, Q, 132));
            }
    /* a grid short of the SMs over a long reduction (the LM head's dX on
     * a chunk of rows, R the vocabulary): split with its width chosen
     * with it, slices of at least 64 k-blocks, the split grid at most two
     * waves, more of the SMs busy than unsplit */
    static const uint32_t heads[] = {128, 384, 512, 768};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_BACKWARD_X, PG_BF16, PG_F32, heads[i], 151936,
                                       1536, PG_SM_90A, 132, &ch), 0);
        REQUIRE_STR_EQ(ch.desc->name, "gemm_sm90");
        uint32_t bn = ch.knobs.v[pgk_knob_index(ch.desc, "bn")], nk = (151936 + 63) / 64;
        uint64_t tiles = (heads[i] + 127u) / 128u * ((1536 + bn - 1) / bn);
        uint64_t tiles0 = (heads[i] + 127u) / 128u *
                          ((1536 + pgk_gemm_sm90_bn(heads[i], 1536, 132) - 1) /
                           pgk_gemm_sm90_bn(heads[i], 1536, 132));
        REQUIRE(ch.split > 1 && nk / ch.split >= 64 && tiles * ch.split <= 2 * 132 &&
                tiles * ch.split > tiles0);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "split")], ch.split);
        REQUIRE(ch.workspace_bytes == pgk_gemm_sm90_workspace(heads[i], 1536, bn,
                                                              ch.split));
    }
    /* ...and the mma.sync family for the rest: a side below 128 (above 64),
     * n or k off a multiple of 8, bf16 in with f16 out, and PG_SM_90 (no
     * tensor maps) */
    static const struct {
        pg_type it, ot;
        uint32_t m, n, k;
        pg_target t;
    } stay[] = {{PG_F16, PG_F16, 2048, 96, 1536, PG_SM_90A},
                {PG_BF16, PG_F32, 127, 1536, 1536, PG_SM_90A},
                {PG_BF16, PG_F32, 2048, 1532, 1536, PG_SM_90A},
                {PG_BF16, PG_F32, 2048, 1536, 1540, PG_SM_90A},
                {PG_BF16, PG_F16, 2048, 1536, 1536, PG_SM_90A},
                {PG_BF16, PG_F32, 2048, 1536, 1536, PG_SM_90}};
    for (size_t i = 0; i < sizeof stay / sizeof stay[0]; i++)
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
            REQUIRE_INT_EQ(pgk_gemm_choose((pgk_gemm_layout)l, stay[i].it, stay[i].ot, stay[i].m,
                                           stay[i].n, stay[i].k, stay[i].t, 132, &ch), 0);
            REQUIRE(strncmp(ch.desc->name, "gemm_mma_", 9) == 0);
        }
    /* gemm_sm90's widths: one wave of 128 x 192 tiles for q/o on 132 SMs;
     * k/v's 256 columns in 64-wide tiles (64 of them) rather than 16 wide
     * ones; always 64, 128, 192 or 256 */
    REQUIRE_INT_EQ(pgk_gemm_sm90_bn(2048, 1536, 132), 192);
    REQUIRE_INT_EQ(pgk_gemm_sm90_bn(2048, 256, 132), 64);
    REQUIRE_INT_EQ(pgk_gemm_sm90_bn(1, 1, 0), 64); /* one tile: the cheapest */
    for (uint32_t q = 1; q < 5000; q = q * 3 + 1) {
        uint32_t bn = pgk_gemm_sm90_bn(2048, q, 132);
        REQUIRE(bn >= 64 && bn <= 256 && bn % 64 == 0);
    }

    /* f32 with a side below 64: gemm_thin while the work is small; past
     * its bound (2^30 multiply-adds) the small-tile kernels, whose (m, n,
     * k) are the layer's (M, K, N) */
    static const char *const f32_names[] = {"gemm_backward_a", "gemm_forward", "gemm_backward_b"};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
        REQUIRE_INT_EQ(pgk_gemm_choose((pgk_gemm_layout)l, PG_F32, PG_F32, 100, 40, 300,
                                       PG_SM_90, 0, &ch), 0);
        REQUIRE_STR_EQ(ch.desc->name, "gemm_thin");
        REQUIRE_INT_EQ(pgk_gemm_choose((pgk_gemm_layout)l, PG_F32, PG_F32, 8192, 40, 8192,
                                       PG_SM_90, 0, &ch), 0);
        REQUIRE_STR_EQ(ch.desc->name, f32_names[l]);
        REQUIRE(ch.m == 8192 && ch.n == 8192 && ch.k == 40 && ch.split == 1);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "n")], 8192);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "k")], 40);
    }
    /* every side 64 or more: the warp-tiled family, the layer's (m, n, k);
     * k/v (N = 256) splits forward on 132 SMs, never below sm_80 (no
     * reduce there); --info's round trip */
    static const char *const t32[] = {"gemm_f32_forward", "gemm_f32_backward_x",
                                      "gemm_f32_backward_w"};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
        REQUIRE_INT_EQ(pgk_gemm_choose((pgk_gemm_layout)l, PG_F32, PG_F32, 2048, 256, 1536,
                                       PG_SM_90A, 132, &ch), 0);
        REQUIRE_STR_EQ(ch.desc->name, t32[l]);
        REQUIRE(ch.m == 2048 && ch.n == 256 && ch.k == 1536);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "tile")], ch.tile);
        REQUIRE_INT_EQ(ch.knobs.v[pgk_knob_index(ch.desc, "split")], ch.split);
        REQUIRE(pgk_gemm_f32_tile_rows(ch.tile) >= 64 && pgk_gemm_f32_tile_cols(ch.tile) >= 64);
        if (l == PGK_GEMM_FORWARD)
            REQUIRE(ch.split > 1);
        if (ch.split > 1)
            REQUIRE(ch.reduce == pgk_find("gemm_mma_reduce") &&
                    ch.workspace_bytes == (uint64_t)(l == PGK_GEMM_BACKWARD_W ? 256 : 2048) *
                                              (l == PGK_GEMM_FORWARD ? 256 : 1536) * 4 *
                                              ch.split);
        pgk_gemm_layout dl;
        pg_type it, ot;
        uint32_t dm, dn, dk;
        REQUIRE(pgk_gemm_describe(ch.desc, &ch.knobs, &dl, &it, &ot, &dm, &dn, &dk));
        REQUIRE(dl == l && it == PG_F32 && ot == PG_F32 && dm == 2048 && dn == 256 &&
                dk == 1536);
        REQUIRE_INT_EQ(pgk_gemm_choose((pgk_gemm_layout)l, PG_F32, PG_F32, 2048, 256, 1536,
                                       PG_SM_75, 0, &ch), 0);
        REQUIRE(ch.split == 1 && ch.reduce == NULL);
        /* any shape through pgk_gemm_f32_choose */
        REQUIRE_INT_EQ(pgk_gemm_f32_choose((pgk_gemm_layout)l, 1, 1, 1, PG_SM_80, 0, &ch), 0);
        REQUIRE_STR_EQ(ch.desc->name, t32[l]);
    }
    /* sm_90: the sweep's measured bests (q/o dX: 64x128 tiles unsplit;
     * k/v dW: 64x64 split 4; 4096^3 forward: 128x128 unsplit) */
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_BACKWARD_X, 2048, 1536, 1536, PG_SM_90A, 132,
                                       &ch), 0);
    REQUIRE(pgk_gemm_f32_tile_rows(ch.tile) == 64 && pgk_gemm_f32_tile_cols(ch.tile) == 128 &&
            ch.split == 1);
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_BACKWARD_W, 2048, 256, 1536, PG_SM_90A, 132,
                                       &ch), 0);
    REQUIRE(pgk_gemm_f32_tile_rows(ch.tile) == 64 && pgk_gemm_f32_tile_cols(ch.tile) == 64 &&
            ch.split == 4 && ch.workspace_bytes == 256u * 1536u * 4u * 4u);
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_FORWARD, 4096, 4096, 4096, PG_SM_90A, 132, &ch),
                   0);
    REQUIRE(pgk_gemm_f32_tile_rows(ch.tile) == 128 && pgk_gemm_f32_tile_cols(ch.tile) == 128 &&
            ch.split == 1 && ch.reduce == NULL);
    /* a split's partials stay within 1 GiB: the LM head's dW is never split */
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_BACKWARD_W, 2048, 151936, 1536, PG_SM_80, 108,
                                       &ch), 0);
    REQUIRE(ch.split == 1);
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_LAYOUTS, 1, 1, 1, PG_SM_80, 0, &ch), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_FORWARD, 0, 1, 1, PG_SM_80, 0, &ch), PG_ERANGE);
    REQUIRE_INT_EQ(pgk_gemm_f32_choose(PGK_GEMM_FORWARD, 1, 1, 1, PG_SM_80, 0, NULL), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_gemm_f32_tile_rows(99), 0);
    /* refused */
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_LAYOUTS, PG_F16, PG_F32, 1, 1, 1, PG_SM_90, 0, &ch),
                   PG_EINVAL);
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_FORWARD, PG_F16, PG_F32, 0, 1, 1, PG_SM_90, 0, &ch),
                   PG_ERANGE);
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_FORWARD, PG_F16, PG_F32, 1, (1u << 21) + 1, 1,
                                   PG_SM_90, 0, &ch), PG_ERANGE);
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_FORWARD, PG_F32, PG_BF16, 1, 1, 1, PG_SM_90, 0, &ch),
                   PG_EINVAL);
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_FORWARD, PG_U16, PG_F32, 1, 1, 1, PG_SM_90, 0, &ch),
                   PG_EINVAL);
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_FORWARD, PG_F16, PG_F32, 1, 1, 1,
                                   (pg_target)PG_TARGET_COUNT, 0, &ch), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_gemm_choose(PGK_GEMM_FORWARD, PG_F16, PG_F32, 1, 1, 1, PG_SM_90, 0, NULL),
                   PG_EINVAL);
    REQUIRE(!pgk_gemm_describe(pgk_find("silu_forward"), &ch.knobs, NULL, NULL, NULL, NULL, NULL,
                               NULL));
    TEST_DONE();
}
