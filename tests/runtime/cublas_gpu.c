/* SPDX-License-Identifier: MIT */
/*
 * The GEMM backward dispatch on a GPU: both paths of pgrt_gemm_backward_a
 * (plain and accumulate) and pgrt_gemm_backward_b, cuBLAS (pedantic fp32)
 * and the PTX kernels, against a double-precision CPU reference on random
 * data (seeded; the seed is printed), for M in {1, 17, 511, 512} and N, K
 * in {1, 15, 16, 17, 256, 1536}, all combinations.
 *
 * Checks, for every GEMM:
 *  - the output is poisoned first (a NaN pattern; for accumulate it holds
 *    known start values): no NaN may be left anywhere in it;
 *  - relative Frobenius error ||C - ref|| / ||ref|| <= 1e-5 where at
 *    least 256 elements are checked, and always the error against the
 *    scale of the terms summed, ||C - ref|| / || |X|·|Y|ᵀ || <= 1e-5 (an
 *    output of a few elements can be a dot product that cancels to near
 *    zero, whose plain relative error says nothing about the GEMM); on
 *    the whole output for small problems, else on >= 4096 random elements
 *    plus the first and last rows and columns;
 *  - the path that ran is the one asked for.
 * And once: a cuBLAS GEMM ordered on a non-blocking stream between an
 * asynchronous poison and an asynchronous download (a GEMM on another
 * stream would race them), and, for information, whether the cuBLAS path
 * captures into a graph and replays.
 *
 * Without cuBLAS (or with PTXGEN_CUBLAS=0) the cuBLAS half is skipped with
 * a message and the PTX half still runs. Exit 77 without a driver or a
 * device. PGRT_GPU_QUICK=1 (under compute-sanitizer): small shapes only.
 */
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/ptxgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POISON 0x7fbadbadu
#define MAX_M 512u
#define MAX_NK 1536u
#define SAMPLES 4096u
#define TOL 1e-5

static const uint32_t full_m[] = {1, 17, 511, 512};
static const uint32_t full_nk[] = {1, 15, 16, 17, 256, 1536};
static const uint32_t quick_m[] = {1, 17};
static const uint32_t quick_nk[] = {1, 15, 16, 17, 70};

#define GPU_CHECK(call)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,  \
                    pgrt_err_name(rc_), pgrt_last_message());                  \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static uint64_t rng_s;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_unit(void) { return (float)((double)(rng_next() >> 40) / 8388608.0 - 1.0); }

typedef enum op { OP_A, OP_A_ACC, OP_B, OP_COUNT } op;
static const char *const op_name[OP_COUNT] = {"backward_a", "backward_a acc", "backward_b"};
enum { PATH_PTX, PATH_CUBLAS, PATH_COUNT };
static const char *const path_name[PATH_COUNT] = {"PTX", "cuBLAS"};

typedef struct host {
    float *dc, *b, *a, *pre, *out; /* dC[M,N], B[K,N], A[M,K], grad_A start, result */
} host;

typedef struct dev {
    pgrt_buf *dc, *b, *a, *out;
} dev;

typedef struct tally {
    double rel, scaled;     /* worst of each */
    uint32_t rel_at[3], scaled_at[3];
    int runs, rel_runs;     /* rel: the runs with >= MIN_REL elements */
} tally;

/* Errors of one GEMM. */
typedef struct errs {
    double rel, scaled, between;
    uint64_t cells;
    bool nan;
} errs;

#define MIN_REL 256u

static tally stats[OP_COUNT][PATH_COUNT];
static double worst_between[OP_COUNT]; /* cuBLAS against PTX */
static int failures;

/* The reference of output element (i, j), and in *scale the sum of the
 * magnitudes of its terms. */
static double ref_at(op o, const host *h, uint32_t n, uint32_t k, uint32_t m, uint32_t i,
                     uint32_t j, double *scale)
{
    double s = 0, a = 0;
    if (o == OP_B) { /* grad_B[i][j] = sum_r A[r][i] dC[r][j] */
        for (uint32_t r = 0; r < m; r++) {
            double t = (double)h->a[(size_t)r * k + i] * h->dc[(size_t)r * n + j];
            s += t;
            a += fabs(t);
        }
        *scale = a;
        return s;
    }
    for (uint32_t r = 0; r < n; r++) { /* grad_A[i][j] = sum_r dC[i][r] B[j][r] */
        double t = (double)h->dc[(size_t)i * n + r] * h->b[(size_t)j * n + r];
        s += t;
        a += fabs(t);
    }
    if (o == OP_A_ACC) {
        s += h->pre[(size_t)i * k + j];
        a += fabs(h->pre[(size_t)i * k + j]);
    }
    *scale = a;
    return s;
}

/* The errors of h->out (P×Q) over the checked elements, and against
 * `other` (may be NULL); a NaN anywhere makes them all INFINITY. */
static errs check(op o, const host *h, uint32_t m, uint32_t n, uint32_t k, const float *other)
{
    errs r = {INFINITY, INFINITY, INFINITY, 0, true};
    uint32_t P = o == OP_B ? k : m, Q = o == OP_B ? n : k;
    size_t total = (size_t)P * Q;
    for (size_t e = 0; e < total; e++)
        if (isnan(h->out[e]))
            return r;
    uint64_t R = o == OP_B ? m : n;
    bool whole = (uint64_t)total * R <= (1u << 22);
    double num = 0, den = 0, sden = 0, bnum = 0, bden = 0;
    uint64_t cells = whole ? total : SAMPLES + 2u * P + 2u * Q;
    for (uint64_t c = 0; c < cells; c++) {
        uint32_t i, j;
        if (whole) {
            i = (uint32_t)(c / Q);
            j = (uint32_t)(c % Q);
        } else if (c < SAMPLES) {
            i = (uint32_t)(rng_next() % P);
            j = (uint32_t)(rng_next() % Q);
        } else if (c < SAMPLES + 2u * P) { /* first and last columns */
            uint64_t t = c - SAMPLES;
            i = (uint32_t)(t / 2);
            j = t % 2 ? Q - 1 : 0;
        } else { /* first and last rows */
            uint64_t t = c - SAMPLES - 2u * P;
            i = t % 2 ? P - 1 : 0;
            j = (uint32_t)(t / 2);
        }
        double scale;
        double want = ref_at(o, h, n, k, m, i, j, &scale);
        double got = h->out[(size_t)i * Q + j];
        num += (got - want) * (got - want);
        den += want * want;
        sden += scale * scale;
        if (other) {
            double x = other[(size_t)i * Q + j];
            bnum += (got - x) * (got - x);
            bden += x * x;
        }
    }
    r.nan = false;
    r.cells = cells;
    r.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    r.scaled = sden > 0 ? sqrt(num / sden) : sqrt(num);
    r.between = !other ? 0.0 : bden > 0 ? sqrt(bnum / bden) : sqrt(bnum);
    return r;
}

static bool within(const errs *e) { return e->scaled <= TOL && (e->cells < MIN_REL || e->rel <= TOL); }

/* One GEMM on stream s by the path asked for; the result in h->out. */
static void run(pgrt_ctx *ctx, pgrt_stream *s, op o, int path, const host *h, const dev *d,
                uint32_t m, uint32_t n, uint32_t k)
{
    GPU_CHECK(pgrt_ctx_set_cublas(ctx, path == PATH_CUBLAS));
    size_t out_n = o == OP_B ? (size_t)k * n : (size_t)m * k;
    if (o == OP_A_ACC)
        GPU_CHECK(pgrt_buf_upload(d->out, 0, h->pre, out_n));
    else
        GPU_CHECK(pgrt_buf_fill32(d->out, POISON));
    pgrt_gemm_path ran = 0;
    if (o == OP_B)
        GPU_CHECK(pgrt_gemm_backward_b(ctx, s, d->a, d->dc, d->out, m, n, k, &ran));
    else
        GPU_CHECK(pgrt_gemm_backward_a(ctx, s, d->dc, d->b, d->out, m, n, k, o == OP_A_ACC, &ran));
    pgrt_gemm_path want = path == PATH_CUBLAS ? PGRT_GEMM_CUBLAS : PGRT_GEMM_PTX;
    if (ran != want) {
        fprintf(stderr, "FAIL: %s %ux%ux%u asked for %s, ran path %d\n", op_name[o], m, n, k,
                path_name[path], (int)ran);
        failures++;
    }
    GPU_CHECK(pgrt_stream_sync(s));
    GPU_CHECK(pgrt_buf_download(d->out, 0, h->out, out_n));
}

/* The data are prefixes of random pools: the rows of dC[M,N] with N
 * columns are the first M*N values, and so on. */
static void one_shape(pgrt_ctx *ctx, pgrt_stream *s, bool blas, host *h, const dev *d,
                      float *ptx_out, uint32_t m, uint32_t n, uint32_t k)
{
    for (int o = 0; o < OP_COUNT; o++) {
        size_t out_n = o == OP_B ? (size_t)k * n : (size_t)m * k;
        for (int path = 0; path < PATH_COUNT; path++) {
            if (path == PATH_CUBLAS && !blas)
                continue;
            run(ctx, s, (op)o, path, h, d, m, n, k);
            errs e = check((op)o, h, m, n, k, path == PATH_CUBLAS ? ptx_out : NULL);
            if (path == PATH_PTX)
                memcpy(ptx_out, h->out, out_n * sizeof *ptx_out);
            else if (!(e.between <= worst_between[o]))
                worst_between[o] = e.between;
            tally *st = &stats[o][path];
            const uint32_t at[3] = {m, n, k};
            if (!(e.scaled <= st->scaled) || st->runs == 0) {
                st->scaled = e.scaled;
                memcpy(st->scaled_at, at, sizeof at);
            }
            st->runs++;
            if (e.cells >= MIN_REL || e.nan) {
                if (!(e.rel <= st->rel) || st->rel_runs == 0) {
                    st->rel = e.rel;
                    memcpy(st->rel_at, at, sizeof at);
                }
                st->rel_runs++;
            }
            if (!within(&e)) {
                fprintf(stderr, "FAIL: %s %s m=%u n=%u k=%u: relative error %.3g (%llu elements), "
                        "against the terms' scale %.3g; tolerance %.0e%s\n",
                        path_name[path], op_name[o], m, n, k, e.rel,
                        (unsigned long long)e.cells, e.scaled, TOL,
                        e.nan ? " (NaN left in the output)" : "");
                failures++;
            }
        }
    }
}

/* A cuBLAS GEMM between an asynchronous poison and download on one
 * non-blocking stream. */
static void stream_order(pgrt_ctx *ctx, pgrt_stream *s, host *h, const dev *d)
{
    const uint32_t m = 512, n = 1536, k = 1536;
    GPU_CHECK(pgrt_ctx_set_cublas(ctx, true));
    GPU_CHECK(pgrt_buf_fill32_async(d->out, POISON, s));
    pgrt_gemm_path ran = 0;
    GPU_CHECK(pgrt_gemm_backward_a(ctx, s, d->dc, d->b, d->out, m, n, k, false, &ran));
    GPU_CHECK(pgrt_buf_download_async(d->out, 0, h->out, (size_t)m * k, s));
    GPU_CHECK(pgrt_stream_sync(s));
    errs e = check(OP_A, h, m, n, k, NULL);
    bool ok = within(&e) && ran == PGRT_GEMM_CUBLAS;
    printf("stream order: cuBLAS on a non-blocking stream between async fill and download: "
           "rel err %.3g %s\n", e.rel, ok ? "ok" : "FAIL");
    if (!ok)
        failures++;
}

/* For information: does the cuBLAS path capture into a graph? */
static void capture_info(pgrt_ctx *ctx, pgrt_stream *s, host *h, const dev *d)
{
    const uint32_t m = 17, n = 256, k = 15;
    GPU_CHECK(pgrt_ctx_set_cublas(ctx, true));
    GPU_CHECK(pgrt_buf_fill32(d->out, POISON));
    pgrt_graph *g = NULL;
    int rc = pgrt_capture_begin(s);
    if (rc == 0) {
        rc = pgrt_gemm_backward_a(ctx, s, d->dc, d->b, d->out, m, n, k, false, NULL);
        if (rc) {
            char why[512];
            snprintf(why, sizeof why, "%s", pgrt_last_message());
            (void)pgrt_capture_abort(s);
            printf("graph capture of cuBLAS: the GEMM failed: %s: %s\n", pgrt_err_name(rc), why);
            return;
        }
        rc = pgrt_capture_end(s, &g);
    }
    if (rc) {
        printf("graph capture of cuBLAS: not captured: %s: %s\n", pgrt_err_name(rc),
               pgrt_last_message());
        return;
    }
    GPU_CHECK(pgrt_graph_launch(g, s));
    GPU_CHECK(pgrt_stream_sync(s));
    GPU_CHECK(pgrt_buf_download(d->out, 0, h->out, (size_t)m * k));
    errs e = check(OP_A, h, m, n, k, NULL);
    printf("graph capture of cuBLAS: captured and replayed, rel err %.3g\n", e.rel);
    if (!within(&e)) {
        fprintf(stderr, "FAIL: the replayed cuBLAS graph is wrong\n");
        failures++;
    }
    pgrt_graph_destroy(&g);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (pgrt_err_unavailable(rc)) {
        fprintf(stderr, "skip: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return 77; /* skipped */
    }
    GPU_CHECK(rc);
    pgrt_device_info info;
    GPU_CHECK(pgrt_ctx_device_info(ctx, &info));
    printf("device: %s, compute capability %d.%d, driver %d.%d\n", info.name, info.cc_major,
           info.cc_minor, info.driver_version / 1000, (info.driver_version % 1000) / 10);

    pgrt_cublas_info bi;
    GPU_CHECK(pgrt_cublas_info_get(ctx, &bi));
    bool blas = bi.in_use;
    if (blas)
        printf("cuBLAS: %s, version %d, loaded in %.1f ms, pedantic fp32\n", bi.library,
               bi.version, bi.load_ms);
    else
        printf("cuBLAS half skipped: %s\n", bi.reason);

    const char *env = getenv("PGRT_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    printf("seed=%llu (set PGRT_TEST_SEED to replay)\n", (unsigned long long)seed);
    rng_s = seed;
    bool quick = getenv("PGRT_GPU_QUICK") && strcmp(getenv("PGRT_GPU_QUICK"), "0") != 0;

    size_t big = (size_t)MAX_NK * MAX_NK;
    host h = {malloc(big * 4), malloc(big * 4), malloc(big * 4), malloc(big * 4),
              malloc(big * 4)};
    float *ptx_out = malloc(big * 4);
    if (!h.dc || !h.b || !h.a || !h.pre || !h.out || !ptx_out) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < big; i++) {
        h.dc[i] = rng_unit();
        h.b[i] = rng_unit();
        h.a[i] = rng_unit();
        h.pre[i] = rng_unit();
    }
    dev d = {NULL, NULL, NULL, NULL};
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, big, &d.dc));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, big, &d.b));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, big, &d.a));
    GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, big, &d.out));
    GPU_CHECK(pgrt_buf_upload(d.dc, 0, h.dc, big));
    GPU_CHECK(pgrt_buf_upload(d.b, 0, h.b, big));
    GPU_CHECK(pgrt_buf_upload(d.a, 0, h.a, big));
    pgrt_stream *s = NULL;
    GPU_CHECK(pgrt_stream_create(ctx, &s));

    const uint32_t *ms = quick ? quick_m : full_m, *nks = quick ? quick_nk : full_nk;
    size_t nm = quick ? sizeof quick_m / 4 : sizeof full_m / 4;
    size_t nnk = quick ? sizeof quick_nk / 4 : sizeof full_nk / 4;
    int shapes = 0;
    for (size_t i = 0; i < nm; i++)
        for (size_t j = 0; j < nnk; j++)
            for (size_t l = 0; l < nnk; l++, shapes++)
                one_shape(ctx, s, blas, &h, &d, ptx_out, ms[i], nks[j], nks[l]);

    if (blas && !quick) {
        stream_order(ctx, s, &h, &d);
        capture_info(ctx, s, &h, &d);
    }
    GPU_CHECK(pgrt_cublas_info_get(ctx, &bi));
    printf("GEMMs dispatched: %llu cuBLAS, %llu PTX\n", (unsigned long long)bi.cublas_gemms,
           (unsigned long long)bi.ptx_gemms);

    printf("\n%d shapes%s; Frobenius error against double, worst: relative (outputs of >= %u "
           "elements), and against the terms' scale (all); tolerance %.0e\n",
           shapes, quick ? " (quick)" : "", MIN_REL, TOL);
    printf("%-16s %-7s %5s %10s %-15s %10s %-15s %s\n", "op", "path", "runs", "relative",
           "at m,n,k", "scaled", "at m,n,k", "cuBLAS vs PTX");
    for (int o = 0; o < OP_COUNT; o++)
        for (int p = 0; p < PATH_COUNT; p++) {
            const tally *st = &stats[o][p];
            if (!st->runs) {
                printf("%-16s %-7s %5s %11s\n", op_name[o], path_name[p], "-", "skipped");
                continue;
            }
            char at1[32], at2[32];
            snprintf(at1, sizeof at1, "%u,%u,%u", st->rel_at[0], st->rel_at[1], st->rel_at[2]);
            snprintf(at2, sizeof at2, "%u,%u,%u", st->scaled_at[0], st->scaled_at[1],
                     st->scaled_at[2]);
            printf("%-16s %-7s %5d %10.3g %-15s %10.3g %-15s", op_name[o], path_name[p], st->runs,
                   st->rel, at1, st->scaled, at2);
            if (p == PATH_CUBLAS)
                printf(" %.3g", worst_between[o]);
            printf("\n");
        }
    printf("%s\n", failures ? "FAILED" : "all within tolerance");

    pgrt_stream_destroy(&s);
    pgrt_buf_destroy(&d.dc);
    pgrt_buf_destroy(&d.b);
    pgrt_buf_destroy(&d.a);
    pgrt_buf_destroy(&d.out);
    pgrt_ctx_destroy(&ctx);
    free(h.dc);
    free(h.b);
    free(h.a);
    free(h.pre);
    free(h.out);
    free(ptx_out);
    return failures ? 1 : 0;
}
