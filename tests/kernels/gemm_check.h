/* SPDX-License-Identifier: MIT */
/*
 * What the GEMM tests (gemm_f32_tiled.c, gemm_mma.c, gemm_thin.c)
 * share: the flags, 16-bit element access, the operands' indexing in the
 * three layouts, the element-by-element check of an output against its
 * double-precision reference, and the device buffers of one check.
 */
#ifndef PTXGEN_GEMM_CHECK_H
#define PTXGEN_GEMM_CHECK_H

#include "gemm_util.h"
#include "test.h"

#define GEMM_GUARD 64u /* elements past C that no kernel may write */
#define FLAG_ACC 1u  /* C += A B: the kernels' accumulate flag */
#define FLAG_BIAS 2u /* + bias[q] */

static inline size_t esize(pg_type t) { return t == PG_F32 ? 4 : 2; }
static inline uint16_t to_h(pg_type t, float f)
{
    return t == PG_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
}
static inline float from_h(pg_type t, uint16_t h)
{
    return t == PG_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* Element i of an array of type t (f32, f16 or bf16), as a double. */
static inline double gemm_get(pg_type t, const void *src, size_t i)
{
    return t == PG_F32 ? ((const float *)src)[i] : from_h(t, ((const uint16_t *)src)[i]);
}

/* Where A(p, r) and B(q, r) of a layout stand in the operands as the
 * kernels take them (gemm_abi.h): forward X[m,k] W[n,k], backward_x
 * dY[m,n] W[n,k], backward_w dY[m,n] X[m,k]. */
static inline size_t gemm_a_index(pgk_gemm_layout l, uint32_t n, uint32_t k, uint32_t p,
                                  uint32_t r)
{
    return l == PGK_GEMM_FORWARD      ? (size_t)p * k + r
           : l == PGK_GEMM_BACKWARD_X ? (size_t)p * n + r
                                      : (size_t)r * n + p;
}
static inline size_t gemm_b_index(pgk_gemm_layout l, uint32_t k, uint32_t q, uint32_t r)
{
    return l == PGK_GEMM_FORWARD ? (size_t)q * k + r : (size_t)r * k + q;
}

/* An output to check: C[P, Q] = sum over R of A(p, r) B(q, r) (+ bias[q])
 * (+ old[p Q + q]), a and b of type it, old and C of type ot. tol gives an
 * element's tolerance from the exact sum and the sum of the terms'
 * magnitudes. */
typedef struct gemm_ref {
    pgk_gemm_layout layout;
    uint32_t n, k, P, Q, R;
    pg_type it, ot;
    const void *a, *b, *old;
    const float *bias;
    double (*tol)(const struct gemm_ref *g, double sum, double mag);
} gemm_ref;

/* C (P·Q values and GEMM_GUARD more, which must still be 0xff bytes)
 * against the double reference: every element of a small output, else
 * the four corners and 4096 random ones. Returns how many are wrong. */
static inline int gemm_check_out(const gemm_ref *g, const void *c, unsigned flags, rng *r,
                                 const char *what)
{
    size_t pq = (size_t)g->P * g->Q;
    size_t count = pq <= 65536 ? pq : 4096 + 4;
    int bad = 0;
    for (size_t s = 0; s < count; s++) {
        size_t i;
        if (count == pq)
            i = s;
        else if (s < 4)
            i = (s & 1 ? g->Q - 1 : 0) + (s & 2 ? (size_t)(g->P - 1) * g->Q : 0);
        else
            i = (size_t)(rng_next(r) % pq);
        uint32_t pp = (uint32_t)(i / g->Q), q = (uint32_t)(i % g->Q);
        double sum = 0, mag = 0;
        for (uint32_t rr = 0; rr < g->R; rr++) {
            double t = gemm_get(g->it, g->a, gemm_a_index(g->layout, g->n, g->k, pp, rr)) *
                       gemm_get(g->it, g->b, gemm_b_index(g->layout, g->k, q, rr));
            sum += t;
            mag += fabs(t);
        }
        if (flags & FLAG_BIAS) {
            sum += g->bias[q];
            mag += fabs(g->bias[q]);
        }
        if (flags & FLAG_ACC) {
            double o = gemm_get(g->ot, g->old, i);
            sum += o;
            mag += fabs(o);
        }
        double tol = g->tol(g, sum, mag);
        double got = gemm_get(g->ot, c, i);
        if (!(fabs(got - sum) <= tol)) {
            if (bad < 5)
                fprintf(stderr, "  %s: [%u,%u] got %.9g want %.9g (tol %.3g)\n", what, pp, q,
                        got, sum, tol);
            bad++;
        }
    }
    const uint8_t *guard = (const uint8_t *)c + pq * esize(g->ot);
    for (size_t i = 0; i < GEMM_GUARD * esize(g->ot); i++)
        if (guard[i] != 0xff) {
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

/* The tolerance of 16-bit inputs with f32 accumulation: 2^-14 of the
 * terms' magnitude, plus half an ulp of a 16-bit output. */
static inline double gemm_tol_16(const gemm_ref *g, double sum, double mag)
{
    double ulp = g->ot == PG_F32   ? 0
                 : g->ot == PG_F16 ? ldexp(fabs(sum), -10) + 1e-7
                                   : ldexp(fabs(sum), -7) + 1e-38;
    return ldexp(mag, -14) + ulp + 1e-30;
}

/* The device side of one GEMM check. A, B and C as allocated and as the
 * kernel sees them (va, vb, vc: views `offset` elements in, to check
 * pointers off 16-byte alignment); C keeps GEMM_GUARD elements past its
 * P·Q that no kernel may touch; the bias (Q f32), a workspace and C's
 * host copy (host_c, P·Q + GEMM_GUARD elements). */
typedef struct gemm_dev {
    pgrt_ctx *ctx;
    pgrt_buf *a, *b, *c, *bias, *ws;
    pgrt_buf *va, *vb, *vc;
    void *host_c;
} gemm_dev;

/* What gemm_dev_upload sends: A (na elements) and B (nb) of type it, the
 * P·Q = pq outputs of type ot, and Q bias values. */
typedef struct gemm_data {
    pg_type it, ot;
    const void *a, *b;
    size_t na, nb, pq;
    const float *bias;
    uint32_t Q;
} gemm_data;

/* Allocate and upload; the workspace holds ws_bytes (one f32 when 0). */
static inline void gemm_dev_upload(gemm_dev *d, const gemm_data *g, unsigned offset,
                                   uint64_t ws_bytes)
{
    GPU_CHECK(pgrt_buf_alloc(d->ctx, g->it, g->na + offset, &d->a));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, g->it, g->nb + offset, &d->b));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, g->ot, g->pq + GEMM_GUARD + offset, &d->c));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, g->Q, &d->bias));
    GPU_CHECK(pgrt_buf_alloc(d->ctx, PG_F32, ws_bytes ? ws_bytes / 4 : 1, &d->ws));
    GPU_CHECK(pgrt_buf_view(d->a, offset, g->na, &d->va));
    GPU_CHECK(pgrt_buf_view(d->b, offset, g->nb, &d->vb));
    GPU_CHECK(pgrt_buf_view(d->c, offset, g->pq + GEMM_GUARD, &d->vc));
    GPU_CHECK(pgrt_buf_upload(d->va, 0, g->a, g->na));
    GPU_CHECK(pgrt_buf_upload(d->vb, 0, g->b, g->nb));
    GPU_CHECK(pgrt_buf_upload(d->bias, 0, g->bias, g->Q));
    d->host_c = malloc((g->pq + GEMM_GUARD) * (pg_type_bits(g->ot) / 8));
    if (!d->host_c) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
}

static inline void gemm_dev_free(gemm_dev *d)
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

/* Poison C and its guard, then, when accumulating, write the pq start
 * values `old`. */
static inline void gemm_dev_reset_c(gemm_dev *d, const void *old, size_t pq, bool accumulate)
{
    GPU_CHECK(pgrt_buf_memset(d->c, 0xff));
    if (accumulate)
        GPU_CHECK(pgrt_buf_upload(d->vc, 0, old, pq));
}

/* Wait for the stream's work, then C and its guard into host_c. */
static inline int gemm_dev_download(gemm_dev *d, size_t pq)
{
    int rc = pgrt_ctx_sync(d->ctx);
    if (rc) {
        fprintf(stderr, "sync: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return rc;
    }
    GPU_CHECK(pgrt_buf_download(d->vc, 0, d->host_c, pq + GEMM_GUARD));
    return 0;
}

/* pgrt_gemm on d's operands into C's first pq values (bias and
 * accumulate as flags say, d->ws when ws_bytes); its choice in *ch. */
static inline int gemm_dev_pgrt(gemm_dev *d, pgk_gemm_layout layout, uint32_t m, uint32_t n,
                                uint32_t k, unsigned flags, uint64_t ws_bytes, size_t pq,
                                pgk_gemm_choice *ch)
{
    pgrt_buf *c = NULL;
    GPU_CHECK(pgrt_buf_view(d->vc, 0, pq, &c));
    int rc = pgrt_gemm(d->ctx, NULL, layout, d->va, d->vb, c, flags & FLAG_BIAS ? d->bias : NULL,
                       m, n, k, flags & FLAG_ACC, ws_bytes ? d->ws : NULL, ch);
    pgrt_buf_destroy(&c);
    return rc;
}

/* The first run's output (bytes at c) kept in `first`; every later run
 * must give the same bits. */
static inline void gemm_same_bits(int run, void *first, const void *c, size_t bytes,
                                  const char *what)
{
    if (run == 0) {
        memcpy(first, c, bytes);
        return;
    }
    test_checks_++;
    if (memcmp(first, c, bytes) != 0)
        TEST_FAIL_("%s: a second run gives other bits", what);
}

/* A direct launch's configuration, for the tests' gemm_launch_fn: the
 * test's problem, a tile (< 0: the family's fallback kernel), split-K
 * slices and the flags. */
typedef struct gemm_direct {
    const void *p;
    int tile;
    uint32_t split;
    unsigned flags;
} gemm_direct;

/* The nine-parameter GEMM kernel `name` with knobs kn on d's operands;
 * when split > 1, then gemm_mma_reduce of its partials into C's P·Q
 * outputs of type code `out`. Says why on stderr when it fails. */
static inline int gemm_launch_split(gemm_dev *d, const char *name, const pgk_knobs *kn,
                                    uint32_t m, uint32_t n, uint32_t k, uint32_t P, uint32_t Q,
                                    uint32_t split, uint32_t out, unsigned flags)
{
    pgrt_arg args[9] = {pgrt_arg_buf(d->va),   pgrt_arg_buf(d->vb), pgrt_arg_buf(d->vc),
                        pgrt_arg_buf(d->bias), pgrt_arg_buf(d->ws), pgrt_arg_u32(m),
                        pgrt_arg_u32(n),       pgrt_arg_u32(k),     pgrt_arg_u32(flags)};
    int rc = pgrt_launch(d->ctx, NULL, name, kn, args, 9);
    if (rc == 0 && split > 1) {
        const pgk_desc *rd = pgk_find("gemm_mma_reduce");
        pgk_knobs rk;
        pgk_knobs_default(rd, &rk);
        rk.v[pgk_knob_index(rd, "n")] = P * Q;
        rk.v[pgk_knob_index(rd, "cols")] = Q;
        rk.v[pgk_knob_index(rd, "split")] = split;
        rk.v[pgk_knob_index(rd, "out")] = out;
        pgrt_arg ra[7] = {pgrt_arg_buf(d->ws), pgrt_arg_buf(d->vc), pgrt_arg_buf(d->bias),
                          pgrt_arg_u32(P * Q), pgrt_arg_u32(Q),     pgrt_arg_u32(split),
                          pgrt_arg_u32(flags)};
        rc = pgrt_launch(d->ctx, NULL, "gemm_mma_reduce", &rk, ra, 7);
    }
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", name, pgrt_err_name(rc), pgrt_last_message());
    return rc;
}

/* A launch of a check's kernel(s) into d: 0 when it went (it says why on
 * stderr otherwise). */
typedef int (*gemm_launch_fn)(gemm_dev *d, void *arg);

/* `runs` launches into a poisoned C (its accumulate start values written
 * again each time): the first run's output against the reference g, every
 * later one the same bits. */
static inline void gemm_run_check(gemm_dev *d, const gemm_ref *g, unsigned flags, rng *r,
                                  int runs, gemm_launch_fn launch, void *arg, const char *what)
{
    size_t pq = (size_t)g->P * g->Q, bytes = (pq + GEMM_GUARD) * esize(g->ot);
    void *first = malloc(bytes);
    if (!first) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (int run = 0; run < runs; run++) {
        gemm_dev_reset_c(d, g->old, pq, flags & FLAG_ACC);
        if (launch(d, arg) || gemm_dev_download(d, pq)) {
            TEST_FAIL_("%s: launch failed", what);
            break;
        }
        if (run == 0)
            gemm_check_out(g, d->host_c, flags, r, what);
        gemm_same_bits(run, first, d->host_c, bytes, what);
    }
    free(first);
}

/* gemm_run_check of a direct launch of p in (tile, split): twice when
 * split > 1 (split-K must give the same bits). */
static inline void gemm_run_direct(gemm_dev *d, gemm_ref g, const void *p, int tile,
                                   uint32_t split, unsigned flags, rng *r, gemm_launch_fn launch,
                                   const char *what)
{
    gemm_direct a = {p, tile, split, flags};
    gemm_run_check(d, &g, flags, r, split > 1 ? 2 : 1, launch, &a, what);
}

/* pgrt_gemm as a gemm_launch_fn: the shape, flags and workspace in; the
 * choice out (and on stderr, after `what`, at the first launch). */
typedef struct gemm_rt {
    pgk_gemm_layout layout;
    uint32_t m, n, k;
    unsigned flags;
    uint64_t ws_bytes;
    const char *what;
    pgk_gemm_choice ch;
    int launches;
} gemm_rt;

static inline int gemm_rt_launch(gemm_dev *d, void *arg)
{
    gemm_rt *t = arg;
    size_t pq = t->layout == PGK_GEMM_BACKWARD_W ? (size_t)t->n * t->k
                : t->layout == PGK_GEMM_FORWARD  ? (size_t)t->m * t->n
                                                 : (size_t)t->m * t->k;
    int rc = gemm_dev_pgrt(d, t->layout, t->m, t->n, t->k, t->flags, t->ws_bytes, pq, &t->ch);
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", t->what, pgrt_err_name(rc), pgrt_last_message());
    else if (t->launches++ == 0)
        fprintf(stderr, "%s: %s tile %u split %u\n", t->what, t->ch.desc->name, t->ch.tile,
                t->ch.split);
    return rc;
}

/* An (m, n, k) of the tests' shape tables. */
typedef struct shape3 {
    uint32_t m, n, k;
} shape3;

/* Split-K case s (0..2) of layout l: (P, Q, R) of 40x24x700, 130x70x333
 * and 9x200x1024 (a long reduction) as that layout's (m, n, k); its split
 * count j (0..2) is 2, 5 or 7. */
static inline shape3 gemm_split_case(unsigned l, size_t s)
{
    static const shape3 sk[] = {{40, 24, 700}, {130, 70, 333}, {9, 200, 1024}};
    shape3 sh = sk[s];
    if (l == PGK_GEMM_BACKWARD_X) /* R is N */
        return (shape3){sh.m, sh.k, sh.n};
    if (l == PGK_GEMM_BACKWARD_W) /* R is M */
        return (shape3){sh.k, sh.m, sh.n};
    return sh;
}
static inline uint32_t gemm_split_count(unsigned j) { return j == 0 ? 2 : j == 1 ? 5 : 7; }

/* A GEMM test's start: the context (the test exits 77 without a device)
 * and the device it is on. */
static inline pgrt_ctx *gemm_test_open(pgrt_device_info *info)
{
    pgrt_ctx *ctx = gpu_open();
    pgrt_ctx_device_info(ctx, info);
    return ctx;
}

#endif /* PTXGEN_GEMM_CHECK_H */
