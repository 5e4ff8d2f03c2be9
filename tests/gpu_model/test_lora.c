/* SPDX-License-Identifier: MIT */
/*
 * The LoRA kernels (lora_down, lora_wgrad, lora_reduce, lora_up) on a GPU,
 * composed as pgrt_lm runs them, against a double-precision reference on
 * random data, over ragged T, in, out and r and several split counts:
 *
 *   xa  = s x A^T            down(x, A) + reduce(scale s)
 *   y  (+)= xa B^T           up(wt 0), plain and accumulating
 *   B^T                      reduce(trans, one split): exact
 *   dB  = dy^T xa            wgrad(dy, xa) + reduce
 *   dxa = s dy B             down(dy, B^T) + reduce(scale s)
 *   dA  = dxa^T x            wgrad(x, dxa) + reduce(trans)
 *   dx (+)= dxa A            up(wt 1), plain and accumulating
 *
 * Each step reads the device's result of the step before, so a row checks
 * one kernel pair. Every step runs twice and must give the same bits.
 *
 * Usage: test_lora [--small] [--seed N] [--bench]; exit 77 without a GPU.
 * --bench times, instead, the LoRA products of 28 Qwen2-1.5B layers as
 * pgrt_lm launches them (T 2048, r 16, all seven modules).
 */
#define REL_TOL 1e-5

#include "model_check.h"

typedef struct shape {
    uint32_t T, in, out, r, splits;
} shape;

/* Launch kernel twice on fresh poisoned outputs (out, and ws when given),
 * keeping both downloads of out (n floats) in got[2]. prep reloads an
 * accumulated output before each run. */
typedef struct step {
    const char *kernel;
    pgk_knobs kn;
    pgrt_arg args[8];
    size_t nargs;
} step;

static bool run_steps(const step *st, size_t nst, pgrt_buf *ws, pgrt_buf *out, const float *init,
                      size_t n, float *got)
{
    if (ws)
        poison(ws);
    if (init) {
        int rc = pgrt_buf_upload(out, 0, init, n);
        if (rc)
            die_rt("pgrt_buf_upload", rc);
    } else {
        poison(out);
    }
    for (size_t i = 0; i < nst; i++)
        if (!launch(st[i].kernel, &st[i].kn, st[i].args, st[i].nargs))
            return false;
    dev_download(out, got, n);
    return true;
}

/* Run the steps twice into out, fold the first against ref into a new row
 * and the second's bits against the first. */
static void check(const char *name, const shape *s, const step *st, size_t nst, pgrt_buf *ws,
                  pgrt_buf *out, const float *init, const double *ref, size_t n, float *keep)
{
    row *r = add_row(name, "T=%u in=%u out=%u r=%u sp=%u", s->T, s->in, s->out, s->r, s->splits);
    float *got[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    for (int run = 0; run < 2; run++)
        if (!run_steps(st, nst, ws, out, init, n, got[run]))
            r->bad++;
    compare(r, got[0], ref, n);
    same_bits(r, got[0], got[1], n * 4);
    finish(r);
    if (keep)
        memcpy(keep, got[0], n * 4);
    free(got[0]), free(got[1]);
}

static pgk_knobs kn_down(uint32_t T, uint32_t K, uint32_t r, uint32_t sp)
{
    return knobs_of("lora_down_f32", "rows", T, "k", K, "rank", r, "splits", sp, NULL);
}
static pgk_knobs kn_wgrad(uint32_t T, uint32_t N, uint32_t r, uint32_t sp)
{
    return knobs_of("lora_wgrad_f32", "rows", T, "n", N, "rank", r, "splits", sp, NULL);
}
static pgk_knobs kn_reduce(uint32_t n, uint32_t trans)
{
    return knobs_of("lora_reduce_f32", "n", n, "trans", trans, NULL);
}
static pgk_knobs kn_up(uint32_t T, uint32_t N, uint32_t r, uint32_t wt, uint32_t acc)
{
    return knobs_of("lora_up_f32", "rows", T, "n", N, "rank", r, "wt", wt, "acc", acc, NULL);
}

#define P(b) pgrt_arg_buf(b)
#define U(x) pgrt_arg_u32((uint32_t)(x))
#define F(x) pgrt_arg_f32((float)(x))

static void test_shape(const shape *s)
{
    uint32_t T = s->T, in = s->in, out = s->out, r = s->r, sp = s->splits;
    float sc = 32.0f / (float)r; /* alpha / r with alpha 32 */
    size_t nx = (size_t)T * in, ny = (size_t)T * out, na = (size_t)r * in, nb = (size_t)out * r,
           nxa = (size_t)T * r;
    float *x = fill_normal(nx, 1.0, 0.1), *dy = fill_normal(ny, 1.0, -0.05);
    float *A = fill_normal(na, 0.05, 0.01), *B = fill_normal(nb, 0.05, -0.01);
    float *y0 = fill_normal(ny, 1.0, 0.2), *dx0 = fill_normal(nx, 1.0, -0.2);
    pgrt_buf *bx = dev_upload(x, nx), *bdy = dev_upload(dy, ny), *bA = dev_upload(A, na),
             *bB = dev_upload(B, nb);
    pgrt_buf *bxa = dev_alloc(PG_F32, nxa), *bdxa = dev_alloc(PG_F32, nxa);
    pgrt_buf *by = dev_alloc(PG_F32, ny), *bdx = dev_alloc(PG_F32, nx);
    pgrt_buf *bBt = dev_alloc(PG_F32, nb), *bdA = dev_alloc(PG_F32, na),
             *bdB = dev_alloc(PG_F32, nb);
    size_t wsn = (size_t)sp * (T > in ? T : in);
    wsn = (size_t)r * (wsn > (size_t)sp * out ? wsn : (size_t)sp * out);
    pgrt_buf *ws = dev_alloc(PG_F32, wsn);

    /* xa = s x A^T */
    float *xa = xmalloc(nxa * 4), *dxa = xmalloc(nxa * 4), *Bt = xmalloc(nb * 4);
    size_t nref = nx;
    const size_t sizes[] = {ny, na, nb, nxa};
    for (size_t i = 0; i < 4; i++)
        nref = sizes[i] > nref ? sizes[i] : nref;
    double *ref = xmalloc(nref * sizeof(double));
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t j = 0; j < r; j++) {
            double a = 0;
            for (uint32_t k = 0; k < in; k++)
                a += (double)x[(size_t)t * in + k] * A[(size_t)j * in + k];
            ref[(size_t)t * r + j] = sc * a;
        }
    step down_x[] = {
        {"lora_down_f32", kn_down(T, in, r, sp), {P(bx), P(bA), P(ws), U(T), U(in), U(sp)}, 6},
        {"lora_reduce_f32", kn_reduce((uint32_t)nxa, 0),
         {P(ws), P(bxa), U(nxa), U(r), U(sp), F(sc)}, 6},
    };
    check("lora_down+reduce xa", s, down_x, 2, ws, bxa, NULL, ref, nxa, xa);

    /* y (+)= xa B^T, from the device's xa */
    for (uint32_t acc = 0; acc < 2; acc++) {
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t o = 0; o < out; o++) {
                double a = acc ? y0[(size_t)t * out + o] : 0.0;
                double d = 0;
                for (uint32_t j = 0; j < r; j++)
                    d += (double)xa[(size_t)t * r + j] * B[(size_t)o * r + j];
                ref[(size_t)t * out + o] = a + d;
            }
        step up_y[] = {{"lora_up_f32", kn_up(T, out, r, 0, acc),
                        {P(bxa), P(bB), P(by), U(T), U(out), F(1.0f)}, 6}};
        check(acc ? "lora_up y+=xa B^T" : "lora_up y=xa B^T", s, up_y, 1, NULL, by,
              acc ? y0 : NULL, ref, ny, NULL);
    }

    /* B^T through reduce's transpose: exact */
    for (size_t i = 0; i < nb; i++)
        ref[(i % r) * out + i / r] = B[i];
    step tr[] = {{"lora_reduce_f32", kn_reduce((uint32_t)nb, 1),
                  {P(bB), P(bBt), U(nb), U(r), U(1), F(1.0f)}, 6}};
    check("lora_reduce B^T", s, tr, 1, NULL, bBt, NULL, ref, nb, Bt);
    for (size_t i = 0; i < nb; i++)
        if (Bt[(i % r) * out + i / r] != B[i]) {
            table[nrows - 1].bad++;
            table[nrows - 1].pass = false;
            TEST_FAIL_("lora_reduce B^T: element %zu not copied exactly", i);
            break;
        }

    /* dB = dy^T xa */
    for (uint32_t o = 0; o < out; o++)
        for (uint32_t j = 0; j < r; j++) {
            double a = 0;
            for (uint32_t t = 0; t < T; t++)
                a += (double)dy[(size_t)t * out + o] * xa[(size_t)t * r + j];
            ref[(size_t)o * r + j] = a;
        }
    step wg_b[] = {
        {"lora_wgrad_f32", kn_wgrad(T, out, r, sp), {P(bdy), P(bxa), P(ws), U(T), U(out), U(sp)},
         6},
        {"lora_reduce_f32", kn_reduce((uint32_t)nb, 0), {P(ws), P(bdB), U(nb), U(r), U(sp), F(1.0f)},
         6},
    };
    check("lora_wgrad+reduce dB", s, wg_b, 2, ws, bdB, NULL, ref, nb, NULL);

    /* dxa = s dy B, through B^T */
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t j = 0; j < r; j++) {
            double a = 0;
            for (uint32_t o = 0; o < out; o++)
                a += (double)dy[(size_t)t * out + o] * B[(size_t)o * r + j];
            ref[(size_t)t * r + j] = sc * a;
        }
    step down_dy[] = {
        {"lora_down_f32", kn_down(T, out, r, sp), {P(bdy), P(bBt), P(ws), U(T), U(out), U(sp)}, 6},
        {"lora_reduce_f32", kn_reduce((uint32_t)nxa, 0),
         {P(ws), P(bdxa), U(nxa), U(r), U(sp), F(sc)}, 6},
    };
    check("lora_down+reduce dxa", s, down_dy, 2, ws, bdxa, NULL, ref, nxa, dxa);

    /* dA = dxa^T x, stored [r, in] */
    for (uint32_t j = 0; j < r; j++)
        for (uint32_t k = 0; k < in; k++) {
            double a = 0;
            for (uint32_t t = 0; t < T; t++)
                a += (double)dxa[(size_t)t * r + j] * x[(size_t)t * in + k];
            ref[(size_t)j * in + k] = a;
        }
    step wg_a[] = {
        {"lora_wgrad_f32", kn_wgrad(T, in, r, sp), {P(bx), P(bdxa), P(ws), U(T), U(in), U(sp)}, 6},
        {"lora_reduce_f32", kn_reduce((uint32_t)na, 1), {P(ws), P(bdA), U(na), U(r), U(sp), F(1.0f)},
         6},
    };
    check("lora_wgrad+reduce dA", s, wg_a, 2, ws, bdA, NULL, ref, na, NULL);

    /* dx (+)= dxa A */
    for (uint32_t acc = 0; acc < 2; acc++) {
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t k = 0; k < in; k++) {
                double a = acc ? dx0[(size_t)t * in + k] : 0.0;
                double d = 0;
                for (uint32_t j = 0; j < r; j++)
                    d += (double)dxa[(size_t)t * r + j] * A[(size_t)j * in + k];
                ref[(size_t)t * in + k] = a + d;
            }
        step up_dx[] = {{"lora_up_f32", kn_up(T, in, r, 1, acc),
                         {P(bdxa), P(bA), P(bdx), U(T), U(in), F(1.0f)}, 6}};
        check(acc ? "lora_up dx+=dxa A" : "lora_up dx=dxa A", s, up_dx, 1, NULL, bdx,
              acc ? dx0 : NULL, ref, nx, NULL);
    }

    pgrt_buf *bufs[] = {bx, bdy, bA, bB, bxa, bdxa, by, bdx, bBt, bdA, bdB, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(x), free(dy), free(A), free(B), free(y0), free(dx0), free(xa), free(dxa), free(Bt);
    free(ref);
}

/* ---------------------------------------------------------------- --bench */

/* Slices as pgrt_lm picks them: about eight blocks an SM, at most 64. */
static uint32_t bench_splits(const char *kernel, pgk_knobs *kn, uint32_t len, uint32_t align,
                             uint32_t sms)
{
    const pgk_desc *d = pgk_find(kernel);
    pgk_launch lc;
    char err[128];
    kn->v[pgk_knob_index(d, "splits")] = 1;
    if (pgk_launch_for(d, kn, &lc, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", kernel, err);
        exit(1);
    }
    uint32_t sp = (8u * sms + lc.grid[0] - 1) / lc.grid[0], most = (len + align - 1) / align;
    sp = sp > most ? most : sp;
    sp = sp > 64 ? 64 : sp ? sp : 1;
    kn->v[pgk_knob_index(d, "splits")] = sp;
    return sp;
}

static void go(const char *kernel, const pgk_knobs *kn, const pgrt_arg *a, size_t n)
{
    int rc = pgrt_launch(check_ctx, NULL, kernel, kn, a, n);
    if (rc)
        die_rt(kernel, rc);
}

/* One layer's LoRA products of the Qwen2-1.5B step (T 2048, r 16, the
 * seven modules), forward and backward as pgrt_lm launches them. */
static void bench_layer(pgrt_buf *x, pgrt_buf *y, pgrt_buf *dy, pgrt_buf *dx, pgrt_buf *A,
                        pgrt_buf *B, pgrt_buf *xa, pgrt_buf *dxa, pgrt_buf *g, pgrt_buf *ws,
                        pgrt_buf *bt, uint32_t sms)
{
    static const uint32_t dims[7][2] = {{1536, 1536}, {1536, 256},  {1536, 256}, {1536, 1536},
                                        {1536, 8960}, {1536, 8960}, {8960, 1536}};
    const uint32_t T = 2048, r = 16;
    float sc = 2.0f;
    for (int m = 0; m < 7; m++) {
        uint32_t in = dims[m][0], out = dims[m][1], sp;
        pgk_knobs kn = kn_down(T, in, r, 1);
        sp = bench_splits("lora_down_f32", &kn, in, 32, sms);
        go("lora_down_f32", &kn, (pgrt_arg[]){P(x), P(A), P(ws), U(T), U(in), U(sp)}, 6);
        kn = kn_reduce(T * r, 0);
        go("lora_reduce_f32", &kn, (pgrt_arg[]){P(ws), P(xa), U(T * r), U(r), U(sp), F(sc)}, 6);
        kn = kn_up(T, out, r, 0, 1);
        go("lora_up_f32", &kn, (pgrt_arg[]){P(xa), P(B), P(y), U(T), U(out), F(1.0f)}, 6);
    }
    for (int m = 6; m >= 0; m--) {
        uint32_t in = dims[m][0], out = dims[m][1], sp;
        pgk_knobs kn = kn_wgrad(T, out, r, 1);
        sp = bench_splits("lora_wgrad_f32", &kn, T, 8, sms);
        go("lora_wgrad_f32", &kn, (pgrt_arg[]){P(dy), P(xa), P(ws), U(T), U(out), U(sp)}, 6);
        kn = kn_reduce(out * r, 0);
        go("lora_reduce_f32", &kn, (pgrt_arg[]){P(ws), P(g), U(out * r), U(r), U(sp), F(1.0f)}, 6);
        go("lora_reduce_f32", &kn, (pgrt_arg[]){P(B), P(bt), U(out * r), U(r), U(1), F(1.0f)}, 6);
        kn = kn_down(T, out, r, 1);
        sp = bench_splits("lora_down_f32", &kn, out, 32, sms);
        go("lora_down_f32", &kn, (pgrt_arg[]){P(dy), P(bt), P(ws), U(T), U(out), U(sp)}, 6);
        kn = kn_reduce(T * r, 0);
        go("lora_reduce_f32", &kn, (pgrt_arg[]){P(ws), P(dxa), U(T * r), U(r), U(sp), F(sc)}, 6);
        kn = kn_wgrad(T, in, r, 1);
        sp = bench_splits("lora_wgrad_f32", &kn, T, 8, sms);
        go("lora_wgrad_f32", &kn, (pgrt_arg[]){P(x), P(dxa), P(ws), U(T), U(in), U(sp)}, 6);
        kn = kn_reduce(in * r, 1);
        go("lora_reduce_f32", &kn, (pgrt_arg[]){P(ws), P(g), U(in * r), U(r), U(sp), F(1.0f)}, 6);
        kn = kn_up(T, in, r, 1, 1);
        go("lora_up_f32", &kn, (pgrt_arg[]){P(dxa), P(A), P(dx), U(T), U(in), F(1.0f)}, 6);
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void bench(void)
{
    pgrt_device_info info;
    pgrt_ctx_device_info(check_ctx, &info);
    uint32_t sms = info.sm_count > 0 ? (uint32_t)info.sm_count : 108;
    size_t big = (size_t)2048 * 8960, w = (size_t)16 * 8960;
    float *h = fill_normal(big, 1.0, 0.0);
    pgrt_buf *x = dev_upload(h, big), *y = dev_upload(h, big), *dy = dev_upload(h, big),
             *dx = dev_upload(h, big), *A = dev_upload(h, w), *B = dev_upload(h, w);
    pgrt_buf *xa = dev_upload(h, 2048 * 16), *dxa = dev_upload(h, 2048 * 16);
    pgrt_buf *g = dev_alloc(PG_F32, w), *bt = dev_alloc(PG_F32, w);
    pgrt_buf *ws = dev_alloc(PG_F32, (size_t)64 * 8960 * 16);
    bench_layer(x, y, dy, dx, A, B, xa, dxa, g, ws, bt, sms);
    GPU_CHECK(pgrt_ctx_sync(check_ctx));
    const int reps = 28;
    double t0 = now_ms();
    for (int i = 0; i < reps; i++)
        bench_layer(x, y, dy, dx, A, B, xa, dxa, g, ws, bt, sms);
    GPU_CHECK(pgrt_ctx_sync(check_ctx));
    double ms = now_ms() - t0;
    printf("bench: the LoRA products of 28 Qwen2-1.5B layers (T 2048, r 16, 7 modules, "
           "forward and backward): %.2f ms (%.3f ms a layer, %d SMs)\n",
           ms * 28 / reps, ms / reps, (int)sms);
    pgrt_buf *bufs[] = {x, y, dy, dx, A, B, xa, dxa, g, bt, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(h);
}

int main(int argc, char **argv)
{
    /* --bench: time the 1.5B step's LoRA products instead of checking */
    bool do_bench = argc > 1 && strcmp(argv[argc - 1], "--bench") == 0;
    if (do_bench)
        argc--;
    bool small = check_start(argc, argv, "test_lora");
    if (do_bench) {
        bench();
        return 0;
    }
    static const shape shapes[] = {
        {1, 1, 1, 1, 1},         {3, 15, 1537, 3, 2},     {17, 1537, 15, 17, 3},
        {5, 1536, 1, 64, 1},     {77, 1, 1536, 16, 4},    {130, 1537, 1536, 16, 5},
        {300, 1536, 256, 64, 7}, {1000, 15, 1537, 17, 9}, {2048, 1536, 1536, 16, 12},
        {513, 1537, 256, 3, 64},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        shape s = shapes[i];
        if (small && s.T > 130)
            s.T = 65;
        test_shape(&s);
    }
    print_table("each step from the device's result of the one before; f32, double reference; "
                "rel_l2 <= 1e-5, two runs bit-identical");
    TEST_DONE();
}
