/* SPDX-License-Identifier: MIT */
/*
 * The GEMM backward kernels on a GPU against a double-precision CPU
 * reference, on fresh random data (seeded; the seed is printed):
 *
 *   gemm_backward_a, gemm_backward_a_accumulate, gemm_backward_b in each
 *   variant, and gemm_f16_backward_a (sm_80 and up), for M in {1, 17, 511,
 *   512} and N, K in {1, 15, 16, 17, 256, 1536, 8960}, all combinations.
 *
 * Checks, for every launch:
 *  - outputs poisoned first (a NaN pattern): no element left unwritten,
 *    and a guard of 64 elements past the end left alone;
 *  - relative Frobenius error against the double reference, <= 1e-5 for
 *    f32 and <= 1e-2 for f16 (against the reference of the f16-rounded
 *    inputs; reported against the f32 inputs too): ||C - ref|| / ||ref||
 *    where at least 256 elements are checked, and always ||C - ref|| /
 *    || |X|·|Y|ᵀ ||, the scale of the terms summed, which a single dot
 *    product that happens to cancel to near zero cannot blow up. Small
 *    problems are checked whole; large ones on >= 4096 random elements
 *    plus the first and last rows and columns (all four corners);
 *  - a second run gives the same bits;
 *  - the variants agree exactly (each computes every element as the same
 *    fma chain over r in order);
 *  - the accumulate kernel, started from known random values G, gives
 *    exactly fl(G + the plain kernel's output) for every element.
 *
 * PGRT_GPU_QUICK=1 (used under compute-sanitizer): a few small shapes that
 * still cross every tile edge.
 */
#include "gemm_util.h"
#include "test.h"

#define POISON 0x7fbadbadu /* a quiet NaN no kernel computes */
#define GUARD 64u
#define MAXVAR 8

static const uint32_t full_m[] = {1, 17, 511, 512};
static const uint32_t full_nk[] = {1, 15, 16, 17, 256, 1536, 8960};
static const uint32_t quick_m[] = {17, 130};
static const uint32_t quick_n[] = {15, 133, 136}; /* 136: whole 16-byte rows of f16 */
static const uint32_t quick_k[] = {1, 133};

/* ---------------------------------------------------------------- host data */

typedef struct hostdata {
    size_t mk_max, nk2_max;
    float *dc, *b, *a, *pre; /* dC[M,N], B[K,N] (also W), A[M,K], grad_A start values */
    float *dc16f, *b16f;     /* the f16-rounded values, as floats */
    uint16_t *dc16, *b16;
} hostdata;

typedef struct devdata {
    pgrt_buf *dc, *b, *a, *dc16, *b16, *out;
} devdata;

/* ---------------------------------------------------------------- references */

typedef enum kind { K_A, K_A_ACC, K_B, K_F16, K_COUNT } kind;
static const char *const kernel_name[K_COUNT] = {"gemm_backward_a", "gemm_backward_a_accumulate",
                                                 "gemm_backward_b", "gemm_f16_backward_a"};
static const char *const kind_label[K_COUNT] = {"A", "A+=", "B", "f16"};

/* The element (i, j) of the P×Q output as Σ_r X(i,r) Y(j,r), and the
 * scale Σ_r |X(i,r) Y(j,r)|. */
typedef struct refjob {
    kind kd;
    const hostdata *h;
    bool rounded; /* f16: the rounded inputs (else the f32 ones) */
    uint32_t m, n, k, P, Q;
    const uint32_t *idx; /* flat output indices */
    double *out, *scale;
} refjob;

static void ref_body(size_t s, void *arg)
{
    const refjob *j = arg;
    uint32_t i = j->idx[s] / j->Q, c = j->idx[s] % j->Q;
    double acc = 0, abs_acc = 0;
    if (j->kd == K_B) { /* Σ_r A[r][i] dC[r][c] */
        for (uint32_t r = 0; r < j->m; r++) {
            double t = (double)j->h->a[(size_t)r * j->k + i] * (double)j->h->dc[(size_t)r * j->n + c];
            acc += t;
            abs_acc += fabs(t);
        }
    } else {
        const float *x = j->rounded ? j->h->dc16f : j->h->dc;
        const float *y = j->rounded ? j->h->b16f : j->h->b;
        const float *xr = x + (size_t)i * j->n, *yr = y + (size_t)c * j->n;
        for (uint32_t r = 0; r < j->n; r++) {
            double t = (double)xr[r] * (double)yr[r];
            acc += t;
            abs_acc += fabs(t);
        }
    }
    j->out[s] = acc;
    j->scale[s] = abs_acc;
}

/* The output elements checked against the reference: all of them for
 * small problems, else random ones plus the first and last rows and
 * columns. */
static uint32_t *sample_set(rng *r, uint32_t P, uint32_t Q, uint32_t R, size_t *count)
{
    size_t total = (size_t)P * Q;
    if (total * R <= ((size_t)1 << 22)) {
        uint32_t *all = malloc(total * sizeof *all);
        for (size_t i = 0; i < total; i++)
            all[i] = (uint32_t)i;
        *count = total;
        return all;
    }
    size_t cap = 4096 + 2 * (size_t)P + 2 * (size_t)Q, n = 0;
    uint32_t *s = malloc(cap * sizeof *s);
    for (uint32_t j = 0; j < Q; j++) {
        s[n++] = j;
        if (P > 1)
            s[n++] = (P - 1) * Q + j;
    }
    for (uint32_t i = 1; i + 1 < P; i++) {
        s[n++] = i * Q;
        if (Q > 1)
            s[n++] = i * Q + Q - 1;
    }
    for (int t = 0; t < 4096; t++)
        s[n++] = (uint32_t)(rng_next(r) % total);
    *count = n;
    return s;
}

/* Errors of an output against want = G + ref over the checked elements
 * (G: the accumulate kernel's start values, or none): rel = ||got - want||
 * / ||want||, and scaled = ||got - want|| / ||scale + |G|||. */
typedef struct errs {
    double rel, scaled;
} errs;

static errs frob(const float *got, const double *ref, const double *scale, const float *pre,
                 const uint32_t *idx, size_t n)
{
    double num = 0, den = 0, den_s = 0;
    for (size_t s = 0; s < n; s++) {
        double g = pre ? (double)pre[idx[s]] : 0.0;
        double want = ref[s] + g;
        double d = (double)got[idx[s]] - want;
        double sc = scale[s] + fabs(g);
        num += d * d;
        den += want * want;
        den_s += sc * sc;
    }
    errs e = {den > 0 ? sqrt(num / den) : sqrt(num), den_s > 0 ? sqrt(num / den_s) : sqrt(num)};
    return e;
}

/* The tolerance test described at the top; false (and a failure) when the
 * errors are too large. */
static bool errs_ok(errs e, size_t checked, double tol)
{
    return e.scaled <= tol && (checked < 256 || e.rel <= tol);
}

/* ---------------------------------------------------------------- runs */

typedef struct ctxs {
    pgrt_ctx *ctx;
    pgrt_stream *s;
    const hostdata *h;
    const devdata *d;
} ctxs;

/* Run kernel kd (variant v; -1 for none) once; the output comes back in
 * host[0 .. count + GUARD). For K_A_ACC the output starts as h->pre. */
static int run_once(const ctxs *c, kind kd, int v, uint32_t m, uint32_t n, uint32_t k,
                    size_t count, float *host)
{
    pgrt_buf *view = NULL;
    GPU_CHECK(pgrt_buf_view(c->d->out, 0, count + GUARD, &view));
    /* On the kernel's stream: a plain (legacy-stream) copy from pageable
     * memory may still be in flight when a non-blocking stream runs. */
    GPU_CHECK(pgrt_buf_fill32_async(view, POISON, c->s));
    if (kd == K_A_ACC)
        GPU_CHECK(pgrt_buf_upload_async(view, 0, c->h->pre, count, c->s));
    const pgrt_buf *b0 = kd == K_B ? c->d->a : kd == K_F16 ? c->d->dc16 : c->d->dc;
    const pgrt_buf *b1 = kd == K_B ? c->d->dc : kd == K_F16 ? c->d->b16 : c->d->b;
    int rc = gemm_launch(c->ctx, c->s, kernel_name[kd], v, m, n, k, b0, b1, view);
    if (rc) {
        TEST_FAIL_("%s variant %d m=%u n=%u k=%u: launch: %s: %s", kernel_name[kd], v, m, n, k,
                   pgrt_err_name(rc), pgrt_last_message());
        pgrt_buf_destroy(&view);
        return rc;
    }
    rc = pgrt_stream_sync(c->s);
    if (rc) {
        fprintf(stderr, "%s variant %d m=%u n=%u k=%u: %s: %s\n", kernel_name[kd], v, m, n, k,
                pgrt_err_name(rc), pgrt_last_message());
        exit(1); /* a fault leaves the context unusable */
    }
    GPU_CHECK(pgrt_buf_download(view, 0, host, count + GUARD));
    pgrt_buf_destroy(&view);
    return 0;
}

static size_t count_poison(const float *v, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += f32_bits(v[i]) == POISON;
    return bad;
}

static size_t count_diff_bits(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += f32_bits(a[i]) != f32_bits(b[i]);
    return d;
}

static size_t count_diff_value(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += !(a[i] == b[i]);
    return d;
}

typedef struct worst {
    double rel[K_COUNT], scaled[K_COUNT];
    double f16_vs_f32;
} worst;

static void note(double *w, double e)
{
    if (e > *w)
        *w = e;
}

/* Run, check the writes, check determinism; returns the output. */
static bool run_checked(const ctxs *c, kind kd, int v, uint32_t m, uint32_t n, uint32_t k,
                        size_t count, float *out, float *again)
{
    if (run_once(c, kd, v, m, n, k, count, out))
        return false;
    size_t unwritten = count_poison(out, count);
    size_t guard = GUARD - count_poison(out + count, GUARD);
    if (unwritten || guard)
        TEST_FAIL_("%s variant %d m=%u n=%u k=%u: %zu of %zu elements unwritten, %zu of %u "
                   "guard elements written",
                   kernel_name[kd], v, m, n, k, unwritten, count, guard, GUARD);
    if (run_once(c, kd, v, m, n, k, count, again))
        return false;
    size_t diff = count_diff_bits(out, again, count);
    if (diff)
        TEST_FAIL_("%s variant %d m=%u n=%u k=%u: a second run differs in %zu elements",
                   kernel_name[kd], v, m, n, k, diff);
    return true;
}

/* Variants of a kernel: 0 .. the knob's maximum. */
static int kernel_variants(const char *name)
{
    const pgk_desc *d = pgk_find(name);
    int n = (int)d->knobs[pgk_knob_index(d, "variant")].max + 1;
    return n < MAXVAR ? n : MAXVAR;
}

/* Of the fp32 kernels. */
static int nvariants(void) { return kernel_variants("gemm_backward_a"); }

/* The f16 kernel's variant 1 groups N into mma k-steps in another order,
 * so it agrees with the others only to rounding. */
#define F16_REGROUPED 1

static void test_shape(const ctxs *c, rng *r, uint32_t m, uint32_t n, uint32_t k, bool f16,
                       float *buf[], worst *w)
{
    const hostdata *h = c->h;
    char line[512];
    int len = snprintf(line, sizeof line, "m=%-4u n=%-5u k=%-5u", m, n, k);

    for (kind kd = K_A; kd < K_COUNT; kd++) {
        if (kd == K_A_ACC)
            continue; /* with K_A, below */
        if (kd == K_F16 && !f16)
            continue;
        uint32_t P = kd == K_B ? k : m, Q = kd == K_B ? n : k, R = kd == K_B ? m : n;
        size_t count = (size_t)P * Q, ns = 0;
        uint32_t *idx = sample_set(r, P, Q, R, &ns);
        double *ref = malloc(ns * sizeof *ref), *scale = malloc(ns * sizeof *scale);
        refjob job = {kd, h, kd == K_F16, m, n, k, P, Q, idx, ref, scale};
        parallel_for(ns, ref_body, &job);

        int nv = kd == K_F16 ? kernel_variants("gemm_f16_backward_a") : nvariants();
        double e = 0;
        for (int v = 0; v < nv; v++) {
            float *out = v == 0 ? buf[0] : buf[1], *again = buf[2];
            if (!run_checked(c, kd, v, m, n, k, count, out, again))
                continue;
            errs ev = frob(out, ref, scale, NULL, idx, ns);
            e = ev.rel > e ? ev.rel : e;
            note(&w->rel[kd], ev.rel);
            note(&w->scaled[kd], ev.scaled);
            double tol = kd == K_F16 ? 1e-2 : 1e-5;
            if (!errs_ok(ev, ns, tol))
                TEST_FAIL_("%s variant %d m=%u n=%u k=%u: relative error %.3g, against the "
                           "scale of the terms %.3g (%zu elements checked; tolerance %g)",
                           kernel_name[kd], v, m, n, k, ev.rel, ev.scaled, ns, tol);
            if (v > 0 && !(kd == K_F16 && v == F16_REGROUPED)) {
                size_t diff = count_diff_value(out, buf[0], count);
                if (diff)
                    TEST_FAIL_("%s m=%u n=%u k=%u: variant %d differs from variant 0 in %zu "
                               "elements",
                               kernel_name[kd], m, n, k, v, diff);
            }
            if (kd == K_A) { /* the accumulating form, from the same variant */
                float *acc = buf[3];
                if (!run_checked(c, K_A_ACC, v, m, n, k, count, acc, again))
                    continue;
                size_t bad = 0;
                for (size_t i = 0; i < count; i++)
                    bad += f32_bits(acc[i]) != f32_bits(h->pre[i] + out[i]);
                if (bad)
                    TEST_FAIL_("gemm_backward_a_accumulate variant %d m=%u n=%u k=%u: %zu "
                               "elements are not G + gemm_backward_a",
                               v, m, n, k, bad);
                errs ea = frob(acc, ref, scale, h->pre, idx, ns);
                note(&w->rel[K_A_ACC], ea.rel);
                note(&w->scaled[K_A_ACC], ea.scaled);
                if (!errs_ok(ea, ns, 1e-5))
                    TEST_FAIL_("gemm_backward_a_accumulate variant %d m=%u n=%u k=%u: relative "
                               "error %.3g, against the scale of the terms %.3g (%zu elements "
                               "checked; tolerance 1e-5)",
                               v, m, n, k, ea.rel, ea.scaled, ns);
            }
        }
        len += snprintf(line + len, sizeof line - (size_t)len, "  %s %.2e", kind_label[kd], e);
        if (kd == K_F16) { /* against the unrounded inputs: the cost of f16 */
            job.rounded = false;
            parallel_for(ns, ref_body, &job);
            double e32 = frob(buf[0], ref, scale, NULL, idx, ns).rel;
            note(&w->f16_vs_f32, e32);
            len += snprintf(line + len, sizeof line - (size_t)len, " (vs f32 inputs %.2e)", e32);
        }
        free(idx);
        free(ref);
        free(scale);
    }
    fprintf(stderr, "%s\n", line);
}

/* ---------------------------------------------------------------- without a GPU */

static void test_descriptors(void)
{
    REQUIRE_INT_EQ(nvariants(), 4);
    const pgk_desc *f16 = pgk_find("gemm_f16_backward_a");
    REQUIRE(f16 != NULL);
    char *ptx = NULL, err[256] = "";
    REQUIRE_INT_EQ(pgk_emit(f16, PG_SM_75, NULL, &ptx, NULL, err, sizeof err), PG_ETARGET);
    REQUIRE_STR_EQ(err, "gemm_f16_backward_a needs sm_80 or newer; sm_75 was asked for");
    REQUIRE(ptx == NULL);
    REQUIRE(f16->knobs[pgk_knob_index(f16, "variant")].baked);
    REQUIRE_INT_EQ(kernel_variants("gemm_f16_backward_a"), 5);
    for (int v = 0; v < 5; v++) {
        pgk_knobs kn = gemm_knobs(f16, 511, 17, 8960, v);
        REQUIRE_INT_EQ(pgk_emit(f16, PG_SM_80, &kn, &ptx, NULL, err, sizeof err), 0);
        pgk_free(ptx);
        ptx = NULL;
        pgk_launch l;
        REQUIRE_INT_EQ(pgk_launch_for(f16, &kn, &l, err, sizeof err), 0);
        static const uint32_t bm[] = {64, 64, 128, 64, 128}, bn[] = {128, 128, 128, 128, 128};
        REQUIRE_INT_EQ(l.grid[0], (8960 + bn[v] - 1) / bn[v]);
        REQUIRE_INT_EQ(l.grid[1], (511 + bm[v] - 1) / bm[v]);
    }
    const char *fp32[] = {"gemm_backward_a", "gemm_backward_a_accumulate", "gemm_backward_b"};
    for (int i = 0; i < 3; i++) {
        const pgk_desc *d = pgk_find(fp32[i]);
        REQUIRE(d != NULL);
        REQUIRE(d->knobs[pgk_knob_index(d, "variant")].baked);
        for (int v = 0; v < nvariants(); v++) {
            pgk_knobs kn = gemm_knobs(d, 511, 17, 8960, v);
            REQUIRE_INT_EQ(pgk_emit(d, PG_SM_70, &kn, &ptx, NULL, err, sizeof err), 0);
            pgk_free(ptx);
            pgk_launch l;
            REQUIRE_INT_EQ(pgk_launch_for(d, &kn, &l, err, sizeof err), 0);
            uint32_t P = i == 2 ? 8960 : 511, Q = i == 2 ? 17 : 8960;
            static const uint32_t bm[] = {16, 128, 128, 64}, bn[] = {16, 64, 128, 64};
            REQUIRE_INT_EQ(l.grid[0], (Q + bn[v] - 1) / bn[v]);
            REQUIRE_INT_EQ(l.grid[1], (P + bm[v] - 1) / bm[v]);
            REQUIRE_INT_EQ(l.block[0] * l.block[1], 256);
        }
        char e2[256];
        pgk_knobs kn = gemm_knobs(d, 1, 1, 1, 0);
        REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "variant", "4", e2, sizeof e2), PG_ERANGE);
        REQUIRE_INT_EQ(pgk_knob_set(d, &kn, "m", "16777217", e2, sizeof e2), PG_ERANGE);
    }
}

/* ---------------------------------------------------------------- main */

int main(void)
{
    test_descriptors();
    if (test_failures_)
        TEST_DONE();

    pgrt_ctx *ctx = gpu_open();
    bool quick = gpu_quick();
    uint64_t seed = test_seed("test_gemm_f32");
    rng r = {seed};
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));
    bool f16 = pg_target_sm(pgrt_ctx_target(ctx)) >= 80;
    if (!f16)
        fprintf(stderr, "note: the device is older than sm_80: gemm_f16_backward_a not tested\n");

    const uint32_t *ms = quick ? quick_m : full_m, *ns = quick ? quick_n : full_nk;
    const uint32_t *ks = quick ? quick_k : full_nk;
    size_t nm = quick ? 2 : 4, nn = quick ? 3 : 7, nk = quick ? 2 : 7;
    uint32_t mmax = 0, nkmax = 0;
    for (size_t i = 0; i < nm; i++)
        mmax = ms[i] > mmax ? ms[i] : mmax;
    for (size_t i = 0; i < nn; i++)
        nkmax = ns[i] > nkmax ? ns[i] : nkmax;
    for (size_t i = 0; i < nk; i++)
        nkmax = ks[i] > nkmax ? ks[i] : nkmax;

    hostdata h = {0};
    h.mk_max = (size_t)mmax * nkmax;
    h.nk2_max = (size_t)nkmax * nkmax;
    h.dc = malloc(h.mk_max * sizeof(float));
    h.a = malloc(h.mk_max * sizeof(float));
    h.pre = malloc(h.mk_max * sizeof(float));
    h.b = malloc(h.nk2_max * sizeof(float));
    h.dc16 = malloc(h.mk_max * sizeof(uint16_t));
    h.b16 = malloc(h.nk2_max * sizeof(uint16_t));
    h.dc16f = malloc(h.mk_max * sizeof(float));
    h.b16f = malloc(h.nk2_max * sizeof(float));
    size_t outmax = h.nk2_max > h.mk_max ? h.nk2_max : h.mk_max;
    float *buf[4];
    for (int i = 0; i < 4; i++)
        buf[i] = malloc((outmax + GUARD) * sizeof(float));
    if (!h.dc || !h.a || !h.pre || !h.b || !h.dc16 || !h.b16 || !h.dc16f || !h.b16f || !buf[0] ||
        !buf[1] || !buf[2] || !buf[3]) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    /* Magnitudes of gradients and weights; the matrices of each shape are
     * prefixes of these arrays. */
    for (size_t i = 0; i < h.mk_max; i++) {
        h.dc[i] = rng_unit(&r) * 0.01f;
        h.a[i] = rng_unit(&r);
        h.pre[i] = rng_unit(&r) * 0.1f;
        h.dc16[i] = f32_to_f16(h.dc[i]);
        h.dc16f[i] = f16_to_f32(h.dc16[i]);
    }
    for (size_t i = 0; i < h.nk2_max; i++) {
        h.b[i] = rng_unit(&r) * 0.05f;
        h.b16[i] = f32_to_f16(h.b[i]);
        h.b16f[i] = f16_to_f32(h.b16[i]);
    }

    devdata d = {0};
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, h.mk_max, &d.dc));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, h.mk_max, &d.a));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, h.nk2_max, &d.b));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_U16, h.mk_max, &d.dc16));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_U16, h.nk2_max, &d.b16));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, outmax + GUARD, &d.out));
    GPU_CHECK(pgrt_buf_upload(d.dc, 0, h.dc, h.mk_max));
    GPU_CHECK(pgrt_buf_upload(d.a, 0, h.a, h.mk_max));
    GPU_CHECK(pgrt_buf_upload(d.b, 0, h.b, h.nk2_max));
    GPU_CHECK(pgrt_buf_upload(d.dc16, 0, h.dc16, h.mk_max));
    GPU_CHECK(pgrt_buf_upload(d.b16, 0, h.b16, h.nk2_max));

    ctxs c = {ctx, s, &h, &d};
    worst w = {{0}, {0}, 0};
    for (size_t i = 0; i < nm; i++)
        for (size_t j = 0; j < nn; j++)
            for (size_t l = 0; l < nk; l++)
                test_shape(&c, &r, ms[i], ns[j], ks[l], f16, buf, &w);

    fprintf(stderr, "worst relative Frobenius error: A %.2e, A+= %.2e, B %.2e", w.rel[K_A],
            w.rel[K_A_ACC], w.rel[K_B]);
    if (f16)
        fprintf(stderr, ", f16 %.2e (vs the f32 inputs %.2e)", w.rel[K_F16], w.f16_vs_f32);
    fprintf(stderr, "\nworst error against the scale of the terms: A %.2e, A+= %.2e, B %.2e",
            w.scaled[K_A], w.scaled[K_A_ACC], w.scaled[K_B]);
    if (f16)
        fprintf(stderr, ", f16 %.2e", w.scaled[K_F16]);
    fprintf(stderr, "\n");

    pgrt_buf_destroy(&d.dc);
    pgrt_buf_destroy(&d.a);
    pgrt_buf_destroy(&d.b);
    pgrt_buf_destroy(&d.dc16);
    pgrt_buf_destroy(&d.b16);
    pgrt_buf_destroy(&d.out);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    for (int i = 0; i < 4; i++)
        free(buf[i]);
    free(h.dc);
    free(h.a);
    free(h.pre);
    free(h.b);
    free(h.dc16);
    free(h.b16);
    free(h.dc16f);
    free(h.b16f);
    TEST_DONE();
}
