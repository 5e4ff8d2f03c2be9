/* SPDX-License-Identifier: MIT */
/*
 * The 16-bit GEMM family on a GPU against a double-precision reference of
 * the same inputs (each value rounded to f16 or bf16 first), on fresh
 * random data (seeded; the seed is printed):
 *
 *  - gemm_mma_{forward,backward_x,backward_w} (sm_80+) in every tile, for
 *    f16 and bf16 in and f32, f16 and bf16 out, over ragged shapes (1, 15,
 *    17, odd, not a tile multiple): two tiles in every type, the others
 *    in two types a layout; overwrite and accumulate, with and
 *    without bias; operands at 16-byte aligned and unaligned addresses
 *    (the scalar copy and store paths);
 *  - split-K (the mma kernel with split > 1, then gemm_mma_reduce): the
 *    same checks, and two runs give the same bits;
 *  - gemm_lp_simt (the fallback) in every layout and type;
 *  - pgrt_gemm (the chooser) on the LoRA rank-16 shapes (gemm_thin now)
 *    and a q/o shape, with a workspace, twice (the same bits), and the f32
 *    layouts.
 *
 * Each output element must be within tol of the reference, tol = 2^-14 ·
 * Σ|terms| (the f32 accumulation, whatever its order) + one unit in the
 * last place of the output type at the reference's magnitude. Outputs are
 * poisoned first (all-ones bytes: NaN in every type): nothing may be left
 * unwritten, and a guard past the end must be left alone.
 *
 * PGRT_GPU_QUICK=1 (under compute-sanitizer): fewer tiles and shapes.
 */
#include "gemm_util.h"
#include "test.h"

#define GUARD 64u
#define FLAG_ACC 1u
#define FLAG_BIAS 2u

static bool quick;

/* ---------------------------------------------------------------- 16-bit values */

static uint16_t to_h(pg_type t, float f) { return t == PG_BF16 ? f32_to_bf16(f) : f32_to_f16(f); }
static float from_h(pg_type t, uint16_t h) { return t == PG_BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

static size_t esize(pg_type t) { return t == PG_F32 ? 4 : 2; }

/* ---------------------------------------------------------------- one problem */

typedef struct prob {
    pgk_gemm_layout layout;
    pg_type it, ot;
    uint32_t m, n, k, P, Q, R;
    size_t na, nb;
    uint16_t *a, *b;  /* the inputs' bits */
    float *af, *bf;   /* the same values */
    float *bias;      /* Q */
    void *old;        /* P·Q values of the output type: the accumulate start */
} prob;

static const char *const layout_name[] = {"forward", "backward_x", "backward_w"};
static const char *const mma_name[] = {"gemm_mma_forward", "gemm_mma_backward_x",
                                       "gemm_mma_backward_w"};

static void pqr(const prob *p, uint32_t *P, uint32_t *Q, uint32_t *R)
{
    *P = p->layout == PGK_GEMM_BACKWARD_W ? p->n : p->m;
    *Q = p->layout == PGK_GEMM_FORWARD ? p->n : p->k;
    *R = p->layout == PGK_GEMM_FORWARD ? p->k : p->layout == PGK_GEMM_BACKWARD_X ? p->n : p->m;
}

static void prob_init(prob *p, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                      uint32_t m, uint32_t n, uint32_t k)
{
    memset(p, 0, sizeof *p);
    p->layout = layout;
    p->it = it;
    p->ot = ot;
    p->m = m;
    p->n = n;
    p->k = k;
    pqr(p, &p->P, &p->Q, &p->R);
    p->na = layout == PGK_GEMM_FORWARD ? (size_t)m * k : (size_t)m * n;
    p->nb = layout == PGK_GEMM_BACKWARD_W ? (size_t)m * k : (size_t)n * k;
    p->a = malloc(p->na * 2);
    p->b = malloc(p->nb * 2);
    p->af = malloc(p->na * 4);
    p->bf = malloc(p->nb * 4);
    p->bias = malloc((size_t)p->Q * 4);
    p->old = malloc((size_t)p->P * p->Q * esize(ot));
    if (!p->a || !p->b || !p->af || !p->bf || !p->bias || !p->old) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < p->na; i++) {
        p->a[i] = to_h(it, rng_unit(r));
        p->af[i] = from_h(it, p->a[i]);
    }
    for (size_t i = 0; i < p->nb; i++) {
        p->b[i] = to_h(it, rng_unit(r));
        p->bf[i] = from_h(it, p->b[i]);
    }
    for (uint32_t i = 0; i < p->Q; i++)
        p->bias[i] = rng_unit(r);
    size_t pq = (size_t)p->P * p->Q;
    for (size_t i = 0; i < pq; i++) {
        float v = rng_unit(r) * 4.0f;
        if (ot == PG_F32)
            ((float *)p->old)[i] = v;
        else
            ((uint16_t *)p->old)[i] = to_h(ot, v);
    }
}

static void prob_free(prob *p)
{
    free(p->a);
    free(p->b);
    free(p->af);
    free(p->bf);
    free(p->bias);
    free(p->old);
}

static double a_at(const prob *p, uint32_t pp, uint32_t r)
{
    switch (p->layout) {
    case PGK_GEMM_FORWARD: return p->af[(size_t)pp * p->k + r];
    case PGK_GEMM_BACKWARD_X: return p->af[(size_t)pp * p->n + r];
    default: return p->af[(size_t)r * p->n + pp];
    }
}

static double b_at(const prob *p, uint32_t q, uint32_t r)
{
    if (p->layout == PGK_GEMM_FORWARD)
        return p->bf[(size_t)q * p->k + r];
    return p->bf[(size_t)r * p->k + q];
}

static double old_at(const prob *p, size_t i)
{
    if (p->ot == PG_F32)
        return ((const float *)p->old)[i];
    return from_h(p->ot, ((const uint16_t *)p->old)[i]);
}

static double got_at(const prob *p, const void *c, size_t i)
{
    if (p->ot == PG_F32)
        return ((const float *)c)[i];
    return from_h(p->ot, ((const uint16_t *)c)[i]);
}

/* Check the output c (P·Q values + the guard) against the reference; every
 * element of small outputs, else `samples` random ones and the corners. */
static int check_out(const prob *p, const void *c, unsigned flags, rng *r, const char *what)
{
    size_t pq = (size_t)p->P * p->Q;
    size_t count = pq <= 65536 ? pq : 4096 + 4;
    int bad = 0;
    double worst = 0;
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
            sum += old_at(p, i);
            mag += fabs(old_at(p, i));
        }
        double ulp = p->ot == PG_F32 ? 0 : p->ot == PG_F16 ? ldexp(fabs(sum), -10) + 1e-7
                                                           : ldexp(fabs(sum), -7) + 1e-38;
        double tol = ldexp(mag, -14) + ulp + 1e-30;
        double got = got_at(p, c, i), err = fabs(got - sum);
        if (!(err <= tol)) {
            if (bad < 5)
                fprintf(stderr, "  %s: [%u,%u] got %.9g want %.9g (tol %.3g)\n", what, pp, q,
                        got, sum, tol);
            bad++;
        } else if (err / tol > worst) {
            worst = err / tol;
        }
    }
    const uint8_t *g = (const uint8_t *)c + pq * esize(p->ot);
    for (size_t i = 0; i < GUARD * esize(p->ot); i++)
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
    void *host_c;
} dev;

/* Upload p; offset > 0 places every operand `offset` elements into its
 * buffer (no longer 16-byte aligned). */
static void dev_upload(dev *d, const prob *p, unsigned offset, uint64_t ws_bytes)
{
    size_t pq = (size_t)p->P * p->Q;
    pg_type bt = p->it == PG_BF16 ? PG_BF16 : PG_F16;
    GPU_CHECK(pgrt_buf_alloc(d->ctx, bt, p->na + offset, &d->a));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, bt, p->nb + offset, &d->b));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, p->ot, pq + GUARD + offset, &d->c));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, p->Q, &d->bias));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, ws_bytes ? ws_bytes / 4 : 1, &d->ws));
    GPU_CHECK(pgrt_buf_view(d->a, offset, p->na, &d->va));
    GPU_CHECK(pgrt_buf_view(d->b, offset, p->nb, &d->vb));
    GPU_CHECK(pgrt_buf_view(d->c, offset, pq + GUARD, &d->vc));
    GPU_CHECK(pgrt_buf_upload(d->va, 0, p->a, p->na));
    GPU_CHECK(pgrt_buf_upload(d->vb, 0, p->b, p->nb));
    GPU_CHECK(pgrt_buf_upload(d->bias, 0, p->bias, p->Q));
    d->host_c = malloc((pq + GUARD) * esize(p->ot));
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

/* The mma kernel with this tile and split (then the reduce when split > 1),
 * or gemm_lp_simt when tile < 0. */
static int launch_direct(dev *d, const prob *p, int tile, uint32_t split, unsigned flags)
{
    const char *name = tile < 0 ? "gemm_lp_simt" : mma_name[p->layout];
    const pgk_desc *desc = pgk_find(name);
    pgk_knobs kn;
    pgk_knobs_default(desc, &kn);
    kn.v[pgk_knob_index(desc, "m")] = p->m;
    kn.v[pgk_knob_index(desc, "n")] = p->n;
    kn.v[pgk_knob_index(desc, "k")] = p->k;
    kn.v[pgk_knob_index(desc, "in")] = p->it == PG_BF16 ? 1 : 0;
    kn.v[pgk_knob_index(desc, "out")] = p->ot == PG_F32 ? 0 : p->ot == PG_F16 ? 1 : 2;
    if (tile < 0) {
        kn.v[pgk_knob_index(desc, "layout")] = p->layout;
    } else {
        kn.v[pgk_knob_index(desc, "tile")] = (uint32_t)tile;
        kn.v[pgk_knob_index(desc, "split")] = split;
    }
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
        rk.v[pgk_knob_index(rd, "out")] = kn.v[pgk_knob_index(desc, "out")];
        pgrt_arg ra[7] = {pgrt_arg_buf(d->ws),    pgrt_arg_buf(d->vc),   pgrt_arg_buf(d->bias),
                          pgrt_arg_u32(p->P * p->Q), pgrt_arg_u32(p->Q),    pgrt_arg_u32(split),
                          pgrt_arg_u32(flags)};
        rc = pgrt_launch(d->ctx, NULL, "gemm_mma_reduce", &rk, ra, 7);
    }
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", name, pgrt_err_name(rc), pgrt_last_message());
    return rc;
}

static const char *tname(pg_type t) { return pg_type_name(t); }

/* One problem through one kernel configuration, checked; with split > 1
 * also run twice and compared bit for bit. */
static void run_case(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                     uint32_t m, uint32_t n, uint32_t k, int tile, uint32_t split,
                     unsigned flags, unsigned offset)
{
    prob p;
    prob_init(&p, r, layout, it, ot, m, n, k);
    dev d = {.ctx = ctx};
    dev_upload(&d, &p, offset, (uint64_t)p.P * p.Q * 4 * split);
    char what[256];
    snprintf(what, sizeof what, "%s %s->%s m=%u n=%u k=%u tile=%d split=%u%s%s%s",
             tile < 0 ? "gemm_lp_simt" : mma_name[layout], tname(it), tname(ot), m, n, k, tile,
             split, flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "",
             offset ? " unaligned" : "");
    dev_reset_c(&d, &p, flags);
    if (launch_direct(&d, &p, tile, split, flags) || dev_download(&d, &p)) {
        TEST_FAIL_("%s: launch failed", what);
    } else {
        check_out(&p, d.host_c, flags, r, what);
        if (split > 1) {
            size_t bytes = ((size_t)p.P * p.Q + GUARD) * esize(ot);
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

/* pgrt_gemm with a workspace, twice, the same bits, the operands off
 * 16-byte alignment when off; returns the kernel it chose ("" on failure). */
static const char *run_rt_at(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it,
                             pg_type ot, uint32_t m, uint32_t n, uint32_t k, unsigned flags,
                             unsigned off)
{
    const char *chosen = "";
    prob p;
    prob_init(&p, r, layout, it, ot, m, n, k);
    uint64_t ws = pgrt_gemm_workspace_bytes(ctx, layout, it, ot, m, n, k);
    dev d = {.ctx = ctx};
    if (it == PG_F32) {
        /* the f32 kernels read f32 operands: widen the rounded values */
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, p.na, &d.a));
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, p.nb, &d.b));
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, (size_t)p.P * p.Q + GUARD, &d.c));
        GPU_CHECK(pgrt_buf_upload(d.a, 0, p.af, p.na));
        GPU_CHECK(pgrt_buf_upload(d.b, 0, p.bf, p.nb));
        GPU_CHECK(pgrt_buf_view(d.a, 0, p.na, &d.va));
        GPU_CHECK(pgrt_buf_view(d.b, 0, p.nb, &d.vb));
        GPU_CHECK(pgrt_buf_view(d.c, 0, (size_t)p.P * p.Q + GUARD, &d.vc));
        d.host_c = malloc(((size_t)p.P * p.Q + GUARD) * 4);
    } else {
        dev_upload(&d, &p, off, ws);
    }
    char what[256];
    snprintf(what, sizeof what, "pgrt_gemm %s %s->%s m=%u n=%u k=%u%s%s", layout_name[layout],
             tname(it), tname(ot), m, n, k, flags & FLAG_ACC ? " acc" : "",
             flags & FLAG_BIAS ? " bias" : "");
    size_t bytes = ((size_t)p.P * p.Q + GUARD) * esize(ot);
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
            fprintf(stderr, "%s%s: %s tile %u split %u\n", what, off ? " unaligned" : "",
                    ch.desc->name, ch.tile, ch.split);
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

static const char *run_rt(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                          uint32_t m, uint32_t n, uint32_t k, unsigned flags)
{
    return run_rt_at(ctx, r, layout, it, ot, m, n, k, flags, 0);
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
    rng r = {test_seed("test_gemm_mma")};
    bool mma = pg_target_sm(info.target) >= 80;
    static const pg_type ins[] = {PG_F16, PG_BF16};
    static const pg_type outs[] = {PG_F32, PG_F16, PG_BF16};
    static const shape3 ragged[] = {{1, 1, 1},     {15, 17, 33},   {17, 15, 16},
                                    {33, 130, 47}, {130, 67, 260}, {257, 136, 64}};
    static const shape3 ragged_q[] = {{1, 1, 1}, {17, 15, 33}, {130, 67, 97}};
    const shape3 *shapes = quick ? ragged_q : ragged;
    size_t nshapes = quick ? 3 : sizeof ragged / sizeof ragged[0];

    if (mma) {
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
            for (unsigned i = 0; i < 2; i++)
                for (unsigned o = 0; o < 3; o++)
                    for (int tile = 0; tile < PGK_GEMM_TILES; tile++) {
                        /* every type for two tiles; two of the six types,
                         * a different pair for each layout, for the others
                         * (each module is a JIT: this keeps the count near
                         * a hundred) */
                        unsigned ty = i * 3 + o, pick = ((unsigned)tile + l) % 6;
                        if (tile != PGK_GEMM_TILE_128x128_W4 && tile != PGK_GEMM_TILE_64x64_W4 &&
                            ty != pick && ty != (pick + 3) % 6)
                            continue;
                        if (quick && tile != PGK_GEMM_TILE_128x128_W4 &&
                            tile != PGK_GEMM_TILE_64x64_W4 &&
                            tile != PGK_GEMM_TILE_128x128_W4_K64_DB)
                            continue;
                        for (size_t s = 0; s < nshapes; s++) {
                            /* half the shapes for each tile and type (all of
                             * them over the types) */
                            if (!quick && (tile == PGK_GEMM_TILE_128x128_W4 ||
                                           tile == PGK_GEMM_TILE_64x64_W4) &&
                                (s + l + i + o) % 2)
                                continue;
                            /* the flags and the alignment cycle over the shapes */
                            unsigned flags = (unsigned)((s + (unsigned)tile + o) % 4);
                            unsigned off = (s + l + (unsigned)tile) % 3 == 2 ? 1 : 0;
                            run_case(ctx, &r, (pgk_gemm_layout)l, ins[i], outs[o], shapes[s].m,
                                     shapes[s].n, shapes[s].k, tile, 1, flags, off);
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
                    run_case(ctx, &r, (pgk_gemm_layout)l, ins[(s + j) % 2], outs[(l + j) % 3],
                             sh.m, sh.n, sh.k, (int)((s * 3 + j) % PGK_GEMM_TILES), splits[j],
                             (unsigned)(s + j + l) % 4, (unsigned)(j == 1));
                }
        fprintf(stderr, "split-K: done\n");
    }
    /* the fallback, every layout and type */
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        for (unsigned i = 0; i < 2; i++)
            for (unsigned o = 0; o < 3; o++)
                run_case(ctx, &r, (pgk_gemm_layout)l, ins[i], outs[o], 33, 17, 45, -1, 1,
                         (l + i + o) % 4, 0);
    fprintf(stderr, "gemm_lp_simt: done\n");
    /* the chooser: LoRA rank 16 both ways, a q/o projection, f32 */
    static const shape3 rt[] = {{2048, 16, 1536}, {2048, 1536, 16}, {512, 1536, 1536}};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        for (size_t s = 0; s < (quick ? 2u : 3u); s++)
            run_rt(ctx, &r, (pgk_gemm_layout)l, s == 1 ? PG_F16 : PG_BF16,
                   s == 2 ? PG_BF16 : PG_F32, rt[s].m, rt[s].n, rt[s].k,
                   l == PGK_GEMM_FORWARD ? FLAG_BIAS | (s == 0 ? FLAG_ACC : 0) : FLAG_ACC);
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        run_rt(ctx, &r, (pgk_gemm_layout)l, PG_F32, PG_F32, 67, 45, 133,
               l == PGK_GEMM_FORWARD ? FLAG_ACC : 0);
    if (info.arch_target == PG_SM_90A) {
        /* the routing on sm_90a: sides of 128 and up with n, k multiples
         * of 8 run gemm_sm90, every epilogue (a plan each) and the output
         * types it has; a thin side, an output of the other 16-bit type
         * or operands off 16-byte alignment the mma.sync family */
        static const shape3 wg[] = {{300, 136, 264}, {1000, 520, 136}};
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
            for (unsigned f = 0; f < 4; f++) {
                const shape3 *sh = &wg[(l + f) % 2];
                pg_type it = f % 2 ? PG_F16 : PG_BF16, ot = f < 2 ? PG_F32 : it;
                const char *got = run_rt(ctx, &r, (pgk_gemm_layout)l, it, ot, sh->m, sh->n,
                                         sh->k, f);
                if (strcmp(got, "gemm_sm90") != 0)
                    TEST_FAIL_("sm_90a %s %u x %u x %u: ran %s, not gemm_sm90",
                               layout_name[l], sh->m, sh->n, sh->k, got);
                test_checks_++;
            }
        static const char *const mma_names[] = {"gemm_mma_forward", "gemm_mma_backward_x",
                                                "gemm_mma_backward_w"};
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
            /* a side of 64 or less goes to gemm_thin (test_gemm_thin) */
            const char *thin = run_rt(ctx, &r, (pgk_gemm_layout)l, PG_BF16, PG_F32, 512, 96,
                                      1536, FLAG_ACC);
            const char *cross = run_rt(ctx, &r, (pgk_gemm_layout)l, PG_BF16, PG_F16, 256, 256,
                                       256, 0);
            const char *odd = run_rt_at(ctx, &r, (pgk_gemm_layout)l, PG_BF16, PG_F32, 256, 256,
                                        256, FLAG_BIAS, 1);
            if (strcmp(thin, mma_names[l]) || strcmp(cross, mma_names[l]) ||
                strcmp(odd, mma_names[l]))
                TEST_FAIL_("sm_90a %s: thin %s, bf16->f16 %s, unaligned %s: not %s",
                           layout_name[l], thin, cross, odd, mma_names[l]);
            test_checks_ += 3;
        }
        fprintf(stderr, "sm_90a routing: done\n");
    }
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
