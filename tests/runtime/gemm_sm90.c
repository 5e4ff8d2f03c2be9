/* SPDX-License-Identifier: MIT */
/*
 * pgrt_gemm_sm90 against the fake driver: what reaches the launch for each
 * layout (the kernel, built for sm_90a on a 9.0 device; grid, block, shared
 * bytes; the two tensor maps' dims, strides, boxes and swizzle; the scalar
 * arguments) and every refusal (device, NULLs, types, sizes, pitches,
 * overlap, bn), each with its message.
 *
 * Usage: test_gemm_sm90 FAKE_LIBCUDA
 */
#include "fake_sm90.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static void launches(void)
{
    pgrt_ctx *ctx = open_cc(90);
    uint32_t m = 300, n = 200, k = 100;
    pgrt_buf *x = buf(ctx, PG_BF16, (size_t)m * 104), *w = buf(ctx, PG_BF16, (size_t)n * 104);
    pgrt_buf *dy = buf(ctx, PG_BF16, (size_t)m * n);
    pgrt_buf *y = buf(ctx, PG_F32, (size_t)m * n), *dx = buf(ctx, PG_BF16, (size_t)m * k);
    pgrt_buf *dw = buf(ctx, PG_F32, (size_t)n * k), *bias = buf(ctx, PG_F32, n);

    struct {
        pgrt_gemm90 g;
        uint32_t P, Q, R, a_box, b_box;
        uint64_t a_rows, a_cols, a_pitch, b_rows, b_cols;
    } cases[] = {
        {{PGK_GEMM_FORWARD, x, w, y, bias, m, n, k, 104, 104, 0, true, 0}, 300, 200, 100, 128, 64,
         300, 100, 208, 200, 100},
        {{PGK_GEMM_BACKWARD_X, dy, w, dx, NULL, m, n, k, 0, 104, 0, false, 128}, 300, 100, 200, 128, 64,
         300, 200, 400, 200, 100},
        {{PGK_GEMM_BACKWARD_W, dy, x, dw, NULL, m, n, k, 0, 104, 0, true, 0}, 200, 100, 300, 64, 64,
         300, 200, 400, 300, 100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fk.reset();
        int rc = pgrt_gemm_sm90(ctx, NULL, &cases[i].g);
        if (rc)
            fprintf(stderr, "case %zu: %s\n", i, pgrt_last_message());
        REQUIRE_INT_EQ(rc, 0);
        REQUIRE_INT_EQ(fk.launch_count(), 1);
        if (fk.launch_count() != 1)
            continue;
        const fakecuda_launch *l = fk.launch_at(0);
        REQUIRE_STR_EQ(l->name, "gemm_sm90");
        REQUIRE_INT_EQ(l->block[0], 384);
        uint32_t P = cases[i].P, Q = cases[i].Q;
        uint32_t bn = cases[i].g.bn ? cases[i].g.bn : pgrt_gemm_sm90_bn(P, Q, 4);
        uint32_t tiles = (P + 127) / 128 * ((Q + bn - 1) / bn);
        REQUIRE_INT_EQ(l->grid[0], tiles < 4 ? tiles : 4); /* the fake has 4 SMs */
        uint32_t stage = (128 + bn) * 128, stages = 230400 / stage > 8 ? 8 : 230400 / stage;
        REQUIRE_INT_EQ(l->shared, stages * stage + 1024);
        /* the LoRA extension's two maps (copies of a's and b's: k2 = 0
         * reads neither) and k2 */
        REQUIRE_INT_EQ(l->nparams, 13);
        REQUIRE_INT_EQ(l->nbig, 4);
        /* k2, and no split: no workspace, no counters */
        REQUIRE(l->params[10] == 0 && l->params[11] == 0 && l->params[12] == 0);
        check_map(l->big[0], pgrt_buf_ptr(cases[i].g.a), cases[i].a_rows, cases[i].a_cols,
                  cases[i].a_pitch, cases[i].a_box);
        uint32_t b_box = cases[i].g.layout == PGK_GEMM_FORWARD ? bn : 64;
        uint64_t b_pitch = (cases[i].g.ldb ? cases[i].g.ldb : cases[i].b_cols) * 2;
        check_map(l->big[1], pgrt_buf_ptr(cases[i].g.b), cases[i].b_rows, cases[i].b_cols,
                  b_pitch, b_box);
        REQUIRE(l->params[2] == pgrt_buf_ptr(cases[i].g.c));
        REQUIRE(l->params[3] == (cases[i].g.bias ? pgrt_buf_ptr(bias) : 0));
        REQUIRE(l->params[4] == P && l->params[5] == Q && l->params[6] == cases[i].R);
        REQUIRE(l->params[7] == Q);
    }

    /* refusals: code and a word of the message */
    struct {
        pgrt_gemm90 g;
        int want;
        const char *says;
    } bad[] = {
        {{PGK_GEMM_FORWARD, NULL, w, y, NULL, m, n, k, 104, 104, 0, false, 0}, PGRT_EINVAL, "a is NULL"},
        {{PGK_GEMM_FORWARD, x, w, y, NULL, 0, n, k, 104, 104, 0, false, 0}, PGRT_ERANGE, "m=0"},
        {{PGK_GEMM_FORWARD, x, w, y, NULL, m, n, k, 0, 104, 0, false, 0}, PGRT_EINVAL, "multiple of 16"},
        {{PGK_GEMM_FORWARD, x, w, y, NULL, m, n, k, 90, 104, 0, false, 0}, PGRT_ERANGE, "row pitch 90"},
        {{PGK_GEMM_FORWARD, x, y, y, NULL, m, n, k, 104, 104, 0, false, 0}, PGRT_EINVAL, "not bf16"},
        {{PGK_GEMM_FORWARD, x, w, dw, NULL, m, n, 100, 104, 104, 0, false, 0}, PGRT_ERANGE, "c holds"},
        {{PGK_GEMM_BACKWARD_X, dy, w, y, NULL, m, n, k, 0, 104, 0, false, 0}, PGRT_EINVAL, "overlaps"},
        {{PGK_GEMM_BACKWARD_X, dy, w, dx, NULL, m, n, k, 0, 104, 0, false, 100}, PGRT_ERANGE, "bn=100"},
        {{(pgk_gemm_layout)3, dy, w, dx, NULL, m, n, k, 0, 104, 0, false, 0}, PGRT_EINVAL, "layout 3"},
        {{PGK_GEMM_FORWARD, x, w, y, x, m, n, k, 104, 104, 0, false, 0}, PGRT_EINVAL, "bias holds bf16"},
    };
    /* a y that aliases the inputs: take a view of dy for the DX output */
    pgrt_buf *alias = NULL;
    REQUIRE_INT_EQ(pgrt_buf_view(dy, 0, (size_t)m * k, &alias), 0);
    bad[6].g.c = alias; /* bf16, m*k, overlapping a = dy */
    pgrt_buf *f16out = buf(ctx, PG_F16, (size_t)m * n);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fk.reset();
        int rc = pgrt_gemm_sm90(ctx, NULL, &bad[i].g);
        if (rc != bad[i].want || !strstr(pgrt_last_message(), bad[i].says))
            fprintf(stderr, "refusal %zu: %s: %s\n", i, pgrt_err_name(rc), pgrt_last_message());
        REQUIRE_INT_EQ(rc, bad[i].want);
        REQUIRE(strstr(pgrt_last_message(), bad[i].says) != NULL);
        REQUIRE_INT_EQ(fk.launch_count(), 0);
    }
    pgrt_gemm90 mixed = {PGK_GEMM_FORWARD, x, w, f16out, NULL, m, n, k, 104, 104, 0, false, 0};
    REQUIRE_INT_EQ(pgrt_gemm_sm90(ctx, NULL, &mixed), PGRT_EINVAL);
    REQUIRE(strstr(pgrt_last_message(), "f32 or bf16") != NULL);
    REQUIRE_INT_EQ(pgrt_gemm_sm90(ctx, NULL, NULL), PGRT_EINVAL);

    pgrt_buf *all[] = {x, w, dy, y, dx, dw, bias, alias, f16out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgrt_buf_destroy(&all[i]);
    pgrt_ctx_destroy(&ctx);

    /* not a 9.0 device: no sm_90a */
    static const int ccs[] = {89, 100};
    for (size_t i = 0; i < 2; i++) {
        ctx = open_cc(ccs[i]);
        pgrt_buf *a = buf(ctx, PG_BF16, 64), *b = buf(ctx, PG_BF16, 64), *c = buf(ctx, PG_F32, 64);
        pgrt_gemm90 g = {PGK_GEMM_FORWARD, a, b, c, NULL, 8, 8, 8, 0, 0, 0, false, 0};
        REQUIRE_INT_EQ(pgrt_gemm_sm90(ctx, NULL, &g), PGRT_ETARGET);
        REQUIRE(strstr(pgrt_last_message(), "sm_90a") != NULL);
        pgrt_buf_destroy(&a);
        pgrt_buf_destroy(&b);
        pgrt_buf_destroy(&c);
        pgrt_ctx_destroy(&ctx);
    }
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_GLOBAL, "FAKE_LIBCUDA");
    launches();
    TEST_DONE();
}
