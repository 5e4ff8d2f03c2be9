/* SPDX-License-Identifier: MIT */
/*
 * The warp-tiled fp32 GEMM family (gemm_f32_forward, _backward_x,
 * _backward_w) on a GPU against a double-precision reference, on fresh
 * random data (seeded; the seed is printed):
 *
 *  - every tile in every layout over ragged shapes (1, 15, 17, odd, not a
 *    tile multiple), overwrite and accumulate, with and without bias (all
 *    four for each layout and tile over the shapes), operands at 16-byte
 *    aligned and unaligned addresses (the scalar load and store paths);
 *  - split-K (split > 1, then gemm_mma_reduce): the same checks, and two
 *    runs give the same bits;
 *  - pgrt_gemm (the chooser) on shapes with every side 64 or more (this
 *    family), and on a thin shape with a bias or a backward accumulate
 *    (this family too, the small-tile kernels having no such epilogue),
 *    twice, the same bits.
 *
 * Each output element must be within (R + 4) · 2^-24 · Σ|terms| of the
 * reference (the worst case of an f32 chain of R fma, whatever the order;
 * a term missing or counted twice is far outside it where R is small, and
 * the random data keep the terms of one size). Outputs are poisoned first
 * (all-ones bytes, a NaN): nothing may be left unwritten, and a guard past
 * the end must be left alone.
 *
 * PGRT_GPU_QUICK=1 (under compute-sanitizer): fewer tiles and shapes.
 */
#include "gemm_check.h"


static bool quick;

typedef struct prob {
    pgk_gemm_layout layout;
    uint32_t m, n, k, P, Q, R;
    size_t na, nb, pq; /* pq: P·Q outputs */
    float *a, *b, *bias, *old; /* old: P·Q accumulate start values */
} prob;

static const char *const layout_name[] = {"forward", "backward_x", "backward_w"};
static const char *const f32_name[] = {"gemm_f32_forward", "gemm_f32_backward_x",
                                       "gemm_f32_backward_w"};

static void prob_init(prob *p, rng *r, pgk_gemm_layout layout, uint32_t m, uint32_t n,
                      uint32_t k)
{
    memset(p, 0, sizeof *p);
    p->layout = layout;
    p->m = m;
    p->n = n;
    p->k = k;
    p->P = layout == PGK_GEMM_BACKWARD_W ? n : m;
    p->Q = layout == PGK_GEMM_FORWARD ? n : k;
    p->R = layout == PGK_GEMM_FORWARD ? k : layout == PGK_GEMM_BACKWARD_X ? n : m;
    p->na = layout == PGK_GEMM_FORWARD ? (size_t)m * k : (size_t)m * n;
    p->nb = layout == PGK_GEMM_BACKWARD_W ? (size_t)m * k : (size_t)n * k;
    p->pq = (size_t)p->P * p->Q;
    size_t pq = p->pq;
    p->a = malloc(p->na * 4);
    p->b = malloc(p->nb * 4);
    p->bias = malloc((size_t)p->Q * 4);
    p->old = malloc(pq * 4);
    if (!p->a || !p->b || !p->bias || !p->old) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < p->na; i++)
        p->a[i] = rng_unit(r);
    for (size_t i = 0; i < p->nb; i++)
        p->b[i] = rng_unit(r);
    for (uint32_t i = 0; i < p->Q; i++)
        p->bias[i] = rng_unit(r);
    for (size_t i = 0; i < pq; i++)
        p->old[i] = rng_unit(r) * 4.0f;
}

static void prob_free(prob *p)
{
    free(p->a);
    free(p->b);
    free(p->bias);
    free(p->old);
}

/* An f32 chain of R fma in any order, against the double sum: R + 4
 * roundings of the terms' magnitude. */
static double tol_f32(const gemm_ref *g, double sum, double mag)
{
    (void)sum;
    return ldexp(mag, -24) * (g->R + 4) + 1e-30;
}

/* p's double reference (gemm_check_out). */
static gemm_ref ref_of(const prob *p)
{
    return (gemm_ref){p->layout, p->n, p->k, p->P, p->Q, p->R, PG_F32, PG_F32,
                      p->a,      p->b, p->old, p->bias, tol_f32};
}

/* ---------------------------------------------------------------- device side */

typedef gemm_dev dev;

/* Upload p; offset > 0 places every operand `offset` floats into its
 * buffer (no longer 16-byte aligned). */
static void dev_upload(dev *d, const prob *p, unsigned offset, uint64_t ws_bytes)
{
    gemm_data g = {PG_F32, PG_F32, p->a, p->b, p->na, p->nb, p->pq, p->bias, p->Q};
    gemm_dev_upload(d, &g, offset, ws_bytes);
}

/* The kernel with this tile and split (then gemm_mma_reduce when split > 1),
 * a gemm_launch_fn of a gemm_direct. */
static int launch_direct(gemm_dev *d, void *arg)
{
    const gemm_direct *a = arg;
    const prob *p = a->p;
    const char *name = f32_name[p->layout];
    const pgk_desc *desc = pgk_find(name);
    pgk_knobs kn = gemm_knobs(desc, p->m, p->n, p->k, -1);
    kn.v[pgk_knob_index(desc, "tile")] = (uint32_t)a->tile;
    kn.v[pgk_knob_index(desc, "split")] = a->split;
    return gemm_launch_split(d, name, &kn, p->m, p->n, p->k, p->P, p->Q, a->split, 0, a->flags);
}

/* One problem through one configuration, checked; with split > 1 also run
 * twice and compared bit for bit. */
static void run_case(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, uint32_t m, uint32_t n,
                     uint32_t k, uint32_t tile, uint32_t split, unsigned flags, unsigned offset)
{
    prob p;
    prob_init(&p, r, layout, m, n, k);
    dev d = {.ctx = ctx};
    dev_upload(&d, &p, offset, (uint64_t)p.P * p.Q * 4 * split);
    char what[256];
    snprintf(what, sizeof what, "%s m=%u n=%u k=%u tile=%u split=%u%s%s%s", f32_name[layout], m,
             n, k, tile, split, flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "",
             offset ? " unaligned" : "");
    gemm_run_direct(&d, ref_of(&p), &p, (int)tile, split, flags, r, launch_direct, what);
    gemm_dev_free(&d);
    prob_free(&p);
}

/* pgrt_gemm with a workspace, twice, the same bits; returns the kernel it
 * chose ("" on failure). */
static const char *run_rt(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, uint32_t m, uint32_t n,
                          uint32_t k, unsigned flags)
{
    prob p;
    prob_init(&p, r, layout, m, n, k);
    uint64_t ws = pgrt_gemm_workspace_bytes(ctx, layout, PG_F32, PG_F32, m, n, k);
    dev d = {.ctx = ctx};
    dev_upload(&d, &p, 0, ws);
    char what[256];
    snprintf(what, sizeof what, "pgrt_gemm %s f32 m=%u n=%u k=%u%s%s", layout_name[layout], m, n,
             k, flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "");
    gemm_ref g = ref_of(&p);
    gemm_rt t = {layout, m, n, k, flags, ws, what, {0}, 0};
    gemm_run_check(&d, &g, flags, r, 2, gemm_rt_launch, &t, what);
    gemm_dev_free(&d);
    prob_free(&p);
    return t.launches ? t.ch.desc->name : "";
}

int main(void)
{
    quick = gpu_quick();
    pgrt_device_info info;
    pgrt_ctx *ctx = gemm_test_open(&info);
    rng r = {test_seed("test_gemm_f32_tiled")};
    static const shape3 ragged[] = {{1, 1, 1},      {15, 17, 33},  {17, 15, 16},
                                    {33, 130, 47},  {130, 67, 260}, {257, 136, 64},
                                    {200, 129, 300}, {64, 64, 64}};
    static const shape3 ragged_q[] = {{1, 1, 1}, {17, 15, 33}, {130, 67, 97}};
    const shape3 *shapes = quick ? ragged_q : ragged;
    size_t nshapes = quick ? 3 : sizeof ragged / sizeof ragged[0];
    const pgk_desc *fd = pgk_find(f32_name[0]);
    REQUIRE(fd != NULL);
    if (!fd)
        TEST_DONE();
    uint32_t ntiles = fd->knobs[pgk_knob_index(fd, "tile")].max + 1;

    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        for (uint32_t tile = 0; tile < ntiles; tile++) {
            if (quick && tile != 0 && tile != ntiles - 1)
                continue;
            for (size_t s = 0; s < nshapes; s++) {
                /* the flags cycle over the shapes: all four for each tile */
                unsigned flags = (unsigned)((s + tile + l) % 4);
                unsigned off = (s + l + tile) % 3 == 2 ? 1 : 0;
                run_case(ctx, &r, (pgk_gemm_layout)l, shapes[s].m, shapes[s].n, shapes[s].k,
                         tile, 1, flags, off);
            }
        }
    fprintf(stderr, "tiles: done\n");
    /* split-K, with every flag, aligned and not; its reduction kernel is
     * sm_80 and up (the chooser splits nothing below) */
    bool can_split = pgk_supports(pgk_find("gemm_mma_reduce"), pgrt_ctx_target(ctx));
    if (!can_split)
        fprintf(stderr, "split-K: skipped, gemm_mma_reduce needs sm_80 (target %s)\n",
                pg_target_name(pgrt_ctx_target(ctx)));
    for (unsigned l = 0; can_split && l < PGK_GEMM_LAYOUTS; l++)
        for (size_t s = 0; s < (quick ? 1u : 3u); s++)
            for (unsigned j = 0; j < (quick ? 1u : 3u); j++) {
                shape3 sh = gemm_split_case(l, s);
                run_case(ctx, &r, (pgk_gemm_layout)l, sh.m, sh.n, sh.k,
                         (uint32_t)((s * 3 + j) % ntiles), gemm_split_count(j),
                         (unsigned)(s + j + l) % 4, (unsigned)(j == 1));
            }
    fprintf(stderr, "split-K: done\n");
    /* the chooser: sides of 64 and up run this family, with every flag;
     * a thin shape with a bias or a backward accumulate runs it too */
    static const shape3 rt[] = {{256, 320, 192}, {2048, 256, 1536}, {96, 1000, 72}};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
        for (unsigned f = 0; f < 4; f++) {
            const shape3 *sh = &rt[quick ? 0 : (l + f) % 3];
            const char *got = run_rt(ctx, &r, (pgk_gemm_layout)l, sh->m, sh->n, sh->k, f);
            if (strcmp(got, f32_name[l]) != 0)
                TEST_FAIL_("%s %u x %u x %u: ran %s, not %s", layout_name[l], sh->m, sh->n,
                           sh->k, got, f32_name[l]);
            test_checks_++;
        }
        /* a small thin shape runs gemm_thin, with every flag */
        unsigned thin_flags = l == PGK_GEMM_FORWARD ? FLAG_BIAS : FLAG_ACC;
        const char *got = run_rt(ctx, &r, (pgk_gemm_layout)l, 67, 45, 133, thin_flags);
        if (strcmp(got, "gemm_thin") != 0)
            TEST_FAIL_("thin %s with %s: ran %s, not gemm_thin", layout_name[l],
                       thin_flags == FLAG_BIAS ? "bias" : "accumulate", got);
        test_checks_++;
        if (quick)
            continue;
        /* past gemm_thin's bound (2^30 multiply-adds) a thin side goes to
         * the small-tile kernels, except with a bias or a backward
         * accumulate, which they lack: then this family */
        got = run_rt(ctx, &r, (pgk_gemm_layout)l, 2048, 40, 16384, thin_flags);
        if (strcmp(got, f32_name[l]) != 0)
            TEST_FAIL_("large thin %s with %s: ran %s, not %s", layout_name[l],
                       thin_flags == FLAG_BIAS ? "bias" : "accumulate", got, f32_name[l]);
        test_checks_++;
    }
    fprintf(stderr, "pgrt_gemm: done\n");
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
