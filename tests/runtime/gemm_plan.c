/* SPDX-License-Identifier: MIT */
/*
 * pgrt_gemm_plan against the fake driver: every refusal of create and
 * launch (its code, a word of its message, nothing launched, *out NULL),
 * and what a LoRA plan on a 9.0 device (sm_90a) hands the driver: gemm_sm90
 * with its 13 parameters, the four tensor maps (a2's and b2's base, dims,
 * pitch and box), k2; encoded once at create and never again at launch;
 * destroy's NULLs.
 *
 * Usage: test_gemm_plan FAKE_LIBCUDA
 */
#include "fake_sm90.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>


/* create must fail with want and a message holding says, launch nothing
 * and leave *out NULL. */
static void refuse(pgrt_ctx *ctx, const pgrt_gemm_spec *g, int want, const char *says,
                   const char *what)
{
    fk.reset();
    pgrt_gemm_plan *p = (pgrt_gemm_plan *)&p; /* not NULL: create must clear it */
    int rc = pgrt_gemm_plan_create(ctx, g, &p);
    if (rc != want || !strstr(pgrt_last_message(), says))
        fprintf(stderr, "refusal \"%s\": %s: %s\n", what, pgrt_err_name(rc), pgrt_last_message());
    REQUIRE_INT_EQ(rc, want);
    REQUIRE_CONTAINS(pgrt_last_message(), says);
    REQUIRE(p == NULL);
    REQUIRE_INT_EQ(fk.launch_count(), 0);
    if (!rc)
        pgrt_gemm_plan_destroy(&p);
}

static pgrt_gemm_plan *make(pgrt_ctx *ctx, const pgrt_gemm_spec *g, const char *what)
{
    pgrt_gemm_plan *p = NULL;
    int rc = pgrt_gemm_plan_create(ctx, g, &p);
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", what, pgrt_err_name(rc), pgrt_last_message());
    REQUIRE_INT_EQ(rc, 0);
    REQUIRE(rc ? p == NULL : p != NULL);
    return p;
}

/* The operands of the refusals and launches: x [m, k] and w [n, k] bf16
 * at a pitch of 144, a2 a column slice of a [m, 48] matrix, b2 [n, 24]
 * (forward) or [16, 144] (dX). */
enum { M = 300, N = 200, K = 136, LD = 144, K2 = 16, LD2 = 48, LDB2 = 24 };

typedef struct operands {
    pgrt_buf *x, *w, *dy, *a2all, *b2f, *b2x, *y, *yb, *dx, *bias, *f32in;
} operands;

static operands operands_alloc(pgrt_ctx *ctx)
{
    return (operands){
        .x = buf(ctx, PG_BF16, (size_t)M * LD),
        .w = buf(ctx, PG_BF16, (size_t)N * LD),
        .dy = buf(ctx, PG_BF16, (size_t)M * N),
        .a2all = buf(ctx, PG_BF16, (size_t)M * LD2),
        .b2f = buf(ctx, PG_BF16, (size_t)N * LDB2),
        .b2x = buf(ctx, PG_BF16, (size_t)K2 * LD),
        .y = buf(ctx, PG_F32, (size_t)M * N),
        .yb = buf(ctx, PG_BF16, (size_t)M * N),
        .dx = buf(ctx, PG_F32, (size_t)M * K),
        .bias = buf(ctx, PG_F32, N),
        .f32in = buf(ctx, PG_F32, (size_t)M * LD),
    };
}

static void operands_free(operands *o)
{
    pgrt_buf **all[] = {&o->x, &o->w, &o->dy, &o->a2all, &o->b2f, &o->b2x,
                        &o->y, &o->yb, &o->dx, &o->bias, &o->f32in};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgrt_buf_destroy(all[i]);
}

/* The forward LoRA product of the model: y = x·Wᵀ + a2·b2ᵀ, a2 the
 * second 16-column part of a [m, 48] matrix. */
static pgrt_gemm_spec lora_fwd(const operands *o)
{
    return (pgrt_gemm_spec){.layout = PGK_GEMM_FORWARD, .kind = PGRT_GEMM_CHOSEN,
                            .in_type = PG_BF16, .out_type = PG_F32, .m = M, .n = N, .k = K,
                            .a = pgrt_buf_ptr(o->x), .b = pgrt_buf_ptr(o->w), .lda = LD,
                            .ldb = LD, .a2 = pgrt_buf_ptr(o->a2all) + 1 * K2 * 2,
                            .b2 = pgrt_buf_ptr(o->b2f), .k2 = K2, .lda2 = LD2, .ldb2 = LDB2};
}

static void refusals(void)
{
    pgrt_ctx *ctx = open_cc(90);
    operands o = operands_alloc(ctx);
    const pgrt_gemm_spec base = lora_fwd(&o);
    pgrt_gemm_spec g;
    pgrt_gemm_plan *p = NULL;

    fk.reset();
    REQUIRE_INT_EQ(pgrt_gemm_plan_create(NULL, &base, &p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "ctx is NULL");
    REQUIRE_INT_EQ(pgrt_gemm_plan_create(ctx, NULL, &p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "spec is NULL");
    REQUIRE_INT_EQ(pgrt_gemm_plan_create(ctx, &base, NULL), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "out is NULL");
    REQUIRE(p == NULL);
    REQUIRE_INT_EQ(fk.launch_count(), 0);

#define REFUSE(edit, want, says)                                                                   \
    do {                                                                                           \
        g = base;                                                                                  \
        edit;                                                                                      \
        refuse(ctx, &g, want, says, #edit);                                                        \
    } while (0)
    REFUSE(g.layout = (pgk_gemm_layout)3, PGRT_EINVAL, "layout 3");
    REFUSE(g.kind = (pgrt_gemm_kind)7, PGRT_EINVAL, "kind 7");
    REFUSE(g.m = 0, PGRT_ERANGE, "m=0");
    REFUSE(g.n = 0, PGRT_ERANGE, "n=0");
    REFUSE(g.k = 0, PGRT_ERANGE, "k=0");
    REFUSE(g.m = (1u << 21) + 1, PGRT_ERANGE, "2^21");
    REFUSE(g.n = (1u << 21) + 1, PGRT_ERANGE, "2^21");
    REFUSE(g.k2 = (1u << 21) + 1, PGRT_ERANGE, "2^21");
    /* gemm_sm90 by kind goes to 2^24, and no further */
    REFUSE((g.kind = PGRT_GEMM_WGMMA, g.k = (1u << 24) + 1), PGRT_ERANGE, "2^24");
    REFUSE(g.a = 0, PGRT_EINVAL, "operand a is 0");
    REFUSE(g.b = 0, PGRT_EINVAL, "operand b is 0");
    REFUSE((g.in_type = PG_F32, g.out_type = PG_BF16, g.k2 = 0), PGRT_EINVAL, "f32 inputs");
    REFUSE(g.in_type = PG_U32, PGRT_EINVAL, "inputs of u32");
    REFUSE(g.out_type = PG_F16, PGRT_EINVAL, "gemm_sm90 writes");
    /* dW: a = dy [m, n] */
    REFUSE((g.layout = PGK_GEMM_BACKWARD_W, g.a = pgrt_buf_ptr(o.dy), g.lda = 0), PGRT_EINVAL,
           "LoRA extension");
    REFUSE((g.in_type = PG_F32, g.a = pgrt_buf_ptr(o.f32in)), PGRT_EINVAL, "16-bit inputs");
    REFUSE(g.a2 = 0, PGRT_EINVAL, "operand a2 0");
    REFUSE(g.b2 = 0, PGRT_EINVAL, "operand b2 0");
    REFUSE(g.lda = K - 8, PGRT_ERANGE, "below its row length");
    REFUSE(g.ldb = K - 1, PGRT_ERANGE, "below its row length");
    REFUSE(g.ldc = N - 1, PGRT_ERANGE, "below its row length");
    REFUSE(g.lda2 = K2 - 8, PGRT_ERANGE, "a2's or b2's pitch");
    REFUSE(g.ldb2 = K2 - 1, PGRT_ERANGE, "a2's or b2's pitch");
    /* dX: b2 is [k2, k], its rows k long */
    REFUSE((g.layout = PGK_GEMM_BACKWARD_X, g.a = pgrt_buf_ptr(o.dy), g.lda = 0,
            g.b2 = pgrt_buf_ptr(o.b2x), g.ldb2 = K - 8),
           PGRT_ERANGE, "a2's or b2's pitch");
    REFUSE(g.bn = 100, PGRT_ERANGE, "bn=100");
    REFUSE(g.bn = 320, PGRT_ERANGE, "bn=320");
    REFUSE(g.split = 17, PGRT_ERANGE, "split=17");
    REFUSE((g.kind = PGRT_GEMM_SEED, g.k2 = 0), PGRT_EINVAL, "f32");
    REFUSE((g.kind = PGRT_GEMM_WGMMA, g.in_type = PG_F32, g.k2 = 0), PGRT_EINVAL, "bf16 or f16");
    /* a2 only 2-byte aligned: TMA cannot read it, the mma.sync family
     * takes no extension */
    REFUSE(g.a2 += 2, PGRT_EINVAL, "needs gemm_sm90");
    REFUSE(g.lda2 = LD2 + 1, PGRT_EINVAL, "needs gemm_sm90");
    /* the seed's f32 kernels: no accumulating dW, no bias, dense only */
    pgrt_gemm_spec seed = {.layout = PGK_GEMM_BACKWARD_W, .kind = PGRT_GEMM_SEED,
                           .in_type = PG_F32, .out_type = PG_F32, .m = 64, .n = 32, .k = 48,
                           .a = pgrt_buf_ptr(o.f32in), .b = pgrt_buf_ptr(o.f32in),
                           .accumulate = true};
    refuse(ctx, &seed, PGRT_EINVAL, "accumulating", "seed accumulating dW");
    seed.layout = PGK_GEMM_FORWARD;
    seed.accumulate = false;
    seed.bias = true;
    refuse(ctx, &seed, PGRT_EINVAL, "no bias", "seed with a bias");
    seed.bias = false;
    seed.lda = 64;
    refuse(ctx, &seed, PGRT_EINVAL, "dense", "seed with a pitch");
    seed.lda = 48; /* the row length itself: dense */
    p = make(ctx, &seed, "seed with lda = k");
    pgrt_gemm_plan_destroy(&p);
#undef REFUSE

    /* launches: c 0, a bias the plan was not made for, none where it was */
    g = base;
    p = make(ctx, &g, "lora forward");
    g.bias = true;
    pgrt_gemm_plan *pb = make(ctx, &g, "lora forward with bias");
    fk.reset();
    REQUIRE_INT_EQ(pgrt_gemm_plan_launch(NULL, NULL, pgrt_buf_ptr(o.y), 0, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "plan is NULL");
    REQUIRE_INT_EQ(pgrt_gemm_plan_launch(p, NULL, 0, 0, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "c is 0");
    REQUIRE_INT_EQ(pgrt_gemm_plan_launch(p, NULL, pgrt_buf_ptr(o.y), pgrt_buf_ptr(o.bias), 0),
                   PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "without a bias");
    REQUIRE_INT_EQ(pgrt_gemm_plan_launch(pb, NULL, pgrt_buf_ptr(o.y), 0, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "with a bias");
    REQUIRE_INT_EQ(fk.launch_count(), 0);
    pgrt_gemm_plan_destroy(&p);
    pgrt_gemm_plan_destroy(&pb);
    operands_free(&o);
    pgrt_ctx_destroy(&ctx);

    /* no sm_90a: a LoRA product has no kernel */
    ctx = open_cc(89);
    o = operands_alloc(ctx);
    g = lora_fwd(&o);
    refuse(ctx, &g, PGRT_EINVAL, "needs gemm_sm90", "lora on 8.9");
    operands_free(&o);
    pgrt_ctx_destroy(&ctx);
}

/* One launch of p into c (with bias), recorded: the launch, or NULL. */
static const fakecuda_launch *launch_once(const pgrt_gemm_plan *p, pgrt_devptr c,
                                          pgrt_devptr bias)
{
    int before = fk.launch_count();
    int rc = pgrt_gemm_plan_launch(p, NULL, c, bias, 0);
    if (rc)
        fprintf(stderr, "launch: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    REQUIRE_INT_EQ(rc, 0);
    REQUIRE_INT_EQ(fk.launch_count(), before + 1);
    return fk.launch_count() == before + 1 ? fk.launch_at(before) : NULL;
}

static void lora_launches(void)
{
    pgrt_ctx *ctx = open_cc(90);
    operands o = operands_alloc(ctx);

    /* forward: a2 [m, 16] at column 16 of [m, 48], b2 [n, 16] at a pitch
     * of 24, bn 128 (the box rows of a K-major b and b2) */
    pgrt_gemm_spec g = lora_fwd(&o);
    /* a split asked for: gemm_sm90 takes it, with its workspace */
    g.split = 3;
    pgrt_gemm_plan *ps = make(ctx, &g, "lora forward, split 3");
    if (ps) {
        REQUIRE_INT_EQ(pgrt_gemm_plan_choice(ps)->split, 3);
        REQUIRE_INT_EQ(pgrt_gemm_plan_choice(ps)->knobs.v[pgk_knob_index(
                           pgrt_gemm_plan_choice(ps)->desc, "split")], 3);
        REQUIRE(pgrt_gemm_plan_workspace(ps) > 0);
    }
    pgrt_gemm_plan_destroy(&ps);
    g.split = 0;
    g.bn = 128;
    g.bias = true;
    fk.reset();
    pgrt_gemm_plan *p = make(ctx, &g, "lora forward");
    REQUIRE_INT_EQ(fk.tmap_count(), 4);
    REQUIRE_INT_EQ(fk.launch_count(), 0);
    if (p) {
        REQUIRE_STR_EQ(pgrt_gemm_plan_choice(p)->desc->name, "gemm_sm90");
        REQUIRE(pgrt_gemm_plan_workspace(p) == 0);
        fk.reset();
        const fakecuda_launch *l = launch_once(p, pgrt_buf_ptr(o.y), pgrt_buf_ptr(o.bias));
        fakecuda_launch first;
        memset(&first, 0, sizeof first);
        if (l) {
            first = *l;
            REQUIRE_STR_EQ(l->name, "gemm_sm90");
            REQUIRE_INT_EQ(l->block[0], 384);
            REQUIRE_INT_EQ(l->nparams, 13);
            REQUIRE_INT_EQ(l->nbig, 4);
            for (int i = 0; i < 4; i++)
                REQUIRE_INT_EQ(l->big_index[i], i < 2 ? i : i + 6);
            REQUIRE(l->params[2] == pgrt_buf_ptr(o.y));
            REQUIRE(l->params[3] == pgrt_buf_ptr(o.bias));
            REQUIRE(l->params[4] == M && l->params[5] == N && l->params[6] == K);
            REQUIRE(l->params[7] == N);
            REQUIRE(l->params[10] == K2);
            check_map(l->big[0], pgrt_buf_ptr(o.x), M, K, LD * 2, 128);
            check_map(l->big[1], pgrt_buf_ptr(o.w), N, K, LD * 2, 128);
            check_map(l->big[2], pgrt_buf_ptr(o.a2all) + K2 * 2, M, K2, LD2 * 2, 128);
            check_map(l->big[3], pgrt_buf_ptr(o.b2f), N, K2, LDB2 * 2, 128);
        }
        /* the second launch encodes nothing and passes the same bytes */
        const fakecuda_launch *l2 = launch_once(p, pgrt_buf_ptr(o.y), pgrt_buf_ptr(o.bias));
        REQUIRE_INT_EQ(fk.tmap_count(), 0);
        if (l && l2) {
            REQUIRE_INT_EQ(l2->nparams, first.nparams);
            REQUIRE(memcmp(l2->params, first.params, sizeof first.params) == 0);
            REQUIRE(memcmp(l2->big, first.big, sizeof first.big) == 0);
            REQUIRE(memcmp(l2->grid, first.grid, sizeof first.grid) == 0);
            REQUIRE_INT_EQ(l2->shared, first.shared);
        }
    }
    pgrt_gemm_plan_destroy(&p);
    REQUIRE(p == NULL);
    pgrt_gemm_plan_destroy(&p);
    pgrt_gemm_plan_destroy(NULL);

    /* dX: a = dy [m, n], b = W [n, k] at a pitch of 144; a2 [m, 16] at
     * column 32 of [m, 48], b2 = A [16, k] at a pitch of 144 (N-major:
     * 64-row boxes) */
    g = (pgrt_gemm_spec){.layout = PGK_GEMM_BACKWARD_X, .kind = PGRT_GEMM_CHOSEN,
                         .in_type = PG_BF16, .out_type = PG_F32, .m = M, .n = N, .k = K,
                         .a = pgrt_buf_ptr(o.dy), .b = pgrt_buf_ptr(o.w), .ldb = LD,
                         .accumulate = true, .a2 = pgrt_buf_ptr(o.a2all) + 2 * K2 * 2,
                         .b2 = pgrt_buf_ptr(o.b2x), .k2 = K2, .lda2 = LD2, .ldb2 = LD};
    fk.reset();
    p = make(ctx, &g, "lora dX");
    REQUIRE_INT_EQ(fk.tmap_count(), 4);
    if (p) {
        fk.reset();
        const fakecuda_launch *l = launch_once(p, pgrt_buf_ptr(o.dx), 0);
        if (l) {
            REQUIRE_STR_EQ(l->name, "gemm_sm90");
            REQUIRE_INT_EQ(l->nparams, 13);
            REQUIRE_INT_EQ(l->nbig, 4);
            REQUIRE(l->params[2] == pgrt_buf_ptr(o.dx));
            REQUIRE(l->params[3] == 0);
            REQUIRE(l->params[4] == M && l->params[5] == K && l->params[6] == N);
            REQUIRE(l->params[7] == K);
            REQUIRE(l->params[10] == K2);
            check_map(l->big[0], pgrt_buf_ptr(o.dy), M, N, N * 2, 128);
            check_map(l->big[1], pgrt_buf_ptr(o.w), N, K, LD * 2, 64);
            check_map(l->big[2], pgrt_buf_ptr(o.a2all) + 2 * K2 * 2, M, K2, LD2 * 2, 128);
            check_map(l->big[3], pgrt_buf_ptr(o.b2x), K2, K, LD * 2, 64);
        }
        launch_once(p, pgrt_buf_ptr(o.dx), 0);
        REQUIRE_INT_EQ(fk.tmap_count(), 0);
    }
    pgrt_gemm_plan_destroy(&p);

    /* k2 = 0 encodes a's and b's maps only and passes copies of them */
    g = lora_fwd(&o);
    g.k2 = 0;
    g.kind = PGRT_GEMM_WGMMA;
    fk.reset();
    p = make(ctx, &g, "wgmma without extension");
    REQUIRE_INT_EQ(fk.tmap_count(), 2);
    if (p) {
        const fakecuda_launch *l = launch_once(p, pgrt_buf_ptr(o.yb) /* any c */, 0);
        if (l && l->nbig == 4) {
            REQUIRE(l->params[10] == 0);
            REQUIRE(memcmp(l->big[2], l->big[0], 128) == 0);
            REQUIRE(memcmp(l->big[3], l->big[1], 128) == 0);
        }
    }
    pgrt_gemm_plan_destroy(&p);

    /* bf16 out (the input type) with the extension */
    g = lora_fwd(&o);
    g.out_type = PG_BF16;
    p = make(ctx, &g, "lora forward bf16 out");
    if (p)
        REQUIRE_STR_EQ(pgrt_gemm_plan_choice(p)->desc->name, "gemm_sm90");
    pgrt_gemm_plan_destroy(&p);

    /* the getters take NULL */
    REQUIRE(pgrt_gemm_plan_choice(NULL) == NULL);
    REQUIRE(pgrt_gemm_plan_workspace(NULL) == 0);
    operands_free(&o);
    pgrt_ctx_destroy(&ctx);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_GLOBAL, "FAKE_LIBCUDA");
    refusals();
    lora_launches();
    TEST_DONE();
}
