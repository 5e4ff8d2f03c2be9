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
#include "gemm_util.h"
#include "test.h"

#define GUARD 64u
#define FLAG_ACC 1u
#define FLAG_BIAS 2u

static bool quick;

typedef struct prob {
    pgk_gemm_layout layout;
    uint32_t m, n, k, P, Q, R;
    size_t na, nb;
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
    size_t pq = (size_t)p->P * p->Q;
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

static double a_at(const prob *p, uint32_t pp, uint32_t r)
{
    switch (p->layout) {
    case PGK_GEMM_FORWARD: return p->a[(size_t)pp * p->k + r];
    case PGK_GEMM_BACKWARD_X: return p->a[(size_t)pp * p->n + r];
    default: return p->a[(size_t)r * p->n + pp];
    }
}

static double b_at(const prob *p, uint32_t q, uint32_t r)
{
    if (p->layout == PGK_GEMM_FORWARD)
        return p->b[(size_t)q * p->k + r];
    return p->b[(size_t)r * p->k + q];
}

/* Check c (P·Q values + the guard): every element of small outputs, else
 * 4096 random ones and the corners. */
static int check_out(const prob *p, const float *c, unsigned flags, rng *r, const char *what)
{
    size_t pq = (size_t)p->P * p->Q;
    size_t count = pq <= 65536 ? pq : 4096 + 4;
    int bad = 0;
    for (size_t s = 0; s < count; s++) {
        size_t i;
        if (count == pq)
            i = s;
        else if (s < 4)
            i = (s & 1 ? p->Q - 1 : 0) + (s & 2 ? (size_t)(p->P - 1) * p->Q : 0);
        else
            i = (size_t)(rng_next(r) % pq);
        uint32_t pp = (uint32_t)(i / p->Q), q = (uint32_t)(i % p->Q);
        double sum = 0, mag = 0;
        for (uint32_t rr = 0; rr < p->R; rr++) {
            double t = a_at(p, pp, rr) * b_at(p, q, rr);
            sum += t;
            mag += fabs(t);
        }
        if (flags & FLAG_BIAS) {
            sum += p->bias[q];
            mag += fabs(p->bias[q]);
        }
        if (flags & FLAG_ACC) {
            sum += p->old[i];
            mag += fabs(p->old[i]);
        }
        double tol = ldexp(mag, -24) * (p->R + 4) + 1e-30;
        double got = c[i], err = fabs(got - sum);
        if (!(err <= tol)) {
            if (bad < 5)
                fprintf(stderr, "  %s: [%u,%u] got %.9g want %.9g (tol %.3g)\n", what, pp, q,
                        got, sum, tol);
            bad++;
        }
    }
    const uint8_t *g = (const uint8_t *)(c + pq);
    for (size_t i = 0; i < GUARD * 4; i++)
        if (g[i] != 0xff) {
            if (bad < 5)
                fprintf(stderr, "  %s: guard byte %zu past the end written\n", what, i);
            bad++;
            break;
        }
    if (bad)
        TEST_FAIL_("%s: %d of %zu elements wrong", what, bad, count);
    test_checks_++;
    return bad;
}

/* ---------------------------------------------------------------- device side */

typedef struct dev {
    pgrt_ctx *ctx;
    pgrt_buf *a, *b, *c, *bias, *ws;
    pgrt_buf *va, *vb, *vc; /* the operands as launched (views when unaligned) */
    float *host_c;
} dev;

/* Upload p; offset > 0 places every operand `offset` floats into its
 * buffer (no longer 16-byte aligned). */
static void dev_upload(dev *d, const prob *p, unsigned offset, uint64_t ws_bytes)
{
    size_t pq = (size_t)p->P * p->Q;
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, p->na + offset, &d->a));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, p->nb + offset, &d->b));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, pq + GUARD + offset, &d->c));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, p->Q, &d->bias));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, ws_bytes ? ws_bytes / 4 : 1, &d->ws));
    GPU_CHECK(pgrt_buf_view(d->a, offset, p->na, &d->va));
    GPU_CHECK(pgrt_buf_view(d->b, offset, p->nb, &d->vb));
    GPU_CHECK(pgrt_buf_view(d->c, offset, pq + GUARD, &d->vc));
    GPU_CHECK(pgrt_buf_upload(d->va, 0, p->a, p->na));
    GPU_CHECK(pgrt_buf_upload(d->vb, 0, p->b, p->nb));
    GPU_CHECK(pgrt_buf_upload(d->bias, 0, p->bias, p->Q));
    d->host_c = malloc((pq + GUARD) * 4);
    if (!d->host_c) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
}

static void dev_free(dev *d)
{
    pgrt_buf_destroy(&d->va);
    pgrt_buf_destroy(&d->vb);
    pgrt_buf_destroy(&d->vc);
    pgrt_buf_destroy(&d->a);
    pgrt_buf_destroy(&d->b);
    pgrt_buf_destroy(&d->c);
    pgrt_buf_destroy(&d->bias);
    pgrt_buf_destroy(&d->ws);
    free(d->host_c);
    d->host_c = NULL;
}

/* Poison c (and its guard), then set the accumulate start values. */
static void dev_reset_c(dev *d, const prob *p, unsigned flags)
{
    GPU_CHECK(pgrt_buf_memset(d->c, 0xff));
    if (flags & FLAG_ACC)
        GPU_CHECK(pgrt_buf_upload(d->vc, 0, p->old, (size_t)p->P * p->Q));
}

static int dev_download(dev *d, const prob *p)
{
    int rc = pgrt_ctx_sync(d->ctx);
    if (rc) {
        fprintf(stderr, "sync: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return rc;
    }
    GPU_CHECK(pgrt_buf_download(d->vc, 0, d->host_c, (size_t)p->P * p->Q + GUARD));
    return 0;
}

/* The kernel with this tile and split (then gemm_mma_reduce when split > 1). */
static int launch_direct(dev *d, const prob *p, uint32_t tile, uint32_t split, unsigned flags)
{
    const char *name = f32_name[p->layout];
    const pgk_desc *desc = pgk_find(name);
    pgk_knobs kn;
    pgk_knobs_default(desc, &kn);
    kn.v[pgk_knob_index(desc, "m")] = p->m;
    kn.v[pgk_knob_index(desc, "n")] = p->n;
    kn.v[pgk_knob_index(desc, "k")] = p->k;
    kn.v[pgk_knob_index(desc, "tile")] = tile;
    kn.v[pgk_knob_index(desc, "split")] = split;
    pgrt_arg args[9] = {pgrt_arg_buf(d->va), pgrt_arg_buf(d->vb), pgrt_arg_buf(d->vc),
                        pgrt_arg_buf(d->bias), pgrt_arg_buf(d->ws), pgrt_arg_u32(p->m),
                        pgrt_arg_u32(p->n), pgrt_arg_u32(p->k), pgrt_arg_u32(flags)};
    int rc = pgrt_launch(d->ctx, NULL, name, &kn, args, 9);
    if (rc == 0 && split > 1) {
        const pgk_desc *rd = pgk_find("gemm_mma_reduce");
        pgk_knobs rk;
        pgk_knobs_default(rd, &rk);
        rk.v[pgk_knob_index(rd, "n")] = p->P * p->Q;
        rk.v[pgk_knob_index(rd, "cols")] = p->Q;
        rk.v[pgk_knob_index(rd, "split")] = split;
        rk.v[pgk_knob_index(rd, "out")] = 0;
        pgrt_arg ra[7] = {pgrt_arg_buf(d->ws),       pgrt_arg_buf(d->vc), pgrt_arg_buf(d->bias),
                          pgrt_arg_u32(p->P * p->Q), pgrt_arg_u32(p->Q),  pgrt_arg_u32(split),
                          pgrt_arg_u32(flags)};
        rc = pgrt_launch(d->ctx, NULL, "gemm_mma_reduce", &rk, ra, 7);
    }
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", name, pgrt_err_name(rc), pgrt_last_message());
    return rc;
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
    dev_reset_c(&d, &p, flags);
    if (launch_direct(&d, &p, tile, split, flags) || dev_download(&d, &p)) {
        TEST_FAIL_("%s: launch failed", what);
    } else {
        check_out(&p, d.host_c, flags, r, what);
        if (split > 1) {
            size_t bytes = ((size_t)p.P * p.Q + GUARD) * 4;
            void *first = malloc(bytes);
            memcpy(first, d.host_c, bytes);
            dev_reset_c(&d, &p, flags);
            if (launch_direct(&d, &p, tile, split, flags) || dev_download(&d, &p))
                TEST_FAIL_("%s: second launch failed", what);
            else if (memcmp(first, d.host_c, bytes) != 0)
                TEST_FAIL_("%s: a second run gives other bits", what);
            test_checks_++;
            free(first);
        }
    }
    dev_free(&d);
    prob_free(&p);
}

/* pgrt_gemm with a workspace, twice, the same bits; returns the kernel it
 * chose ("" on failure). */
static const char *run_rt(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, uint32_t m, uint32_t n,
                          uint32_t k, unsigned flags)
{
    const char *chosen = "";
    prob p;
    prob_init(&p, r, layout, m, n, k);
    uint64_t ws = pgrt_gemm_workspace_bytes(ctx, layout, PG_F32, PG_F32, m, n, k);
    dev d = {.ctx = ctx};
    dev_upload(&d, &p, 0, ws);
    char what[256];
    snprintf(what, sizeof what, "pgrt_gemm %s f32 m=%u n=%u k=%u%s%s", layout_name[layout], m, n,
             k, flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "");
    size_t bytes = ((size_t)p.P * p.Q + GUARD) * 4;
    void *first = malloc(bytes);
    for (int run = 0; run < 2; run++) {
        dev_reset_c(&d, &p, flags);
        pgk_gemm_choice ch;
        pgrt_buf *c = NULL;
        GPU_CHECK(pgrt_buf_view(d.vc, 0, (size_t)p.P * p.Q, &c));
        int rc = pgrt_gemm(ctx, NULL, layout, d.va, d.vb, c, flags & FLAG_BIAS ? d.bias : NULL,
                           m, n, k, flags & FLAG_ACC, ws ? d.ws : NULL, &ch);
        pgrt_buf_destroy(&c);
        if (rc || dev_download(&d, &p)) {
            TEST_FAIL_("%s: %s: %s", what, pgrt_err_name(rc), pgrt_last_message());
            break;
        }
        if (run == 0) {
            fprintf(stderr, "%s: %s tile %u split %u\n", what, ch.desc->name, ch.tile, ch.split);
            chosen = ch.desc->name;
            check_out(&p, d.host_c, flags, r, what);
            memcpy(first, d.host_c, bytes);
        } else {
            test_checks_++;
            if (memcmp(first, d.host_c, bytes) != 0)
                TEST_FAIL_("%s: a second run gives other bits", what);
        }
    }
    free(first);
    dev_free(&d);
    prob_free(&p);
    return chosen;
}

typedef struct shape3 {
    uint32_t m, n, k;
} shape3;

int main(void)
{
    quick = gpu_quick();
    pgrt_ctx *ctx = gpu_open();
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    rng r = {test_seed("test_gemm_f32")};
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
    /* split-K, with every flag, aligned and not */
    static const shape3 sk[] = {{40, 24, 700}, {130, 70, 333}, {9, 200, 1024}};
    static const uint32_t splits[] = {2, 5, 7};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        for (size_t s = 0; s < (quick ? 1u : 3u); s++)
            for (unsigned j = 0; j < (quick ? 1u : 3u); j++) {
                shape3 sh = sk[s];
                if (l == PGK_GEMM_BACKWARD_X) /* R is N */
                    sh = (shape3){sk[s].m, sk[s].k, sk[s].n};
                else if (l == PGK_GEMM_BACKWARD_W) /* R is M */
                    sh = (shape3){sk[s].k, sk[s].m, sk[s].n};
                run_case(ctx, &r, (pgk_gemm_layout)l, sh.m, sh.n, sh.k,
                         (uint32_t)((s * 3 + j) % ntiles), splits[j], (unsigned)(s + j + l) % 4,
                         (unsigned)(j == 1));
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
