/* SPDX-License-Identifier: MIT */
/*
 * The LoRA kernels pgrt_lm runs (lora_proj, lora_grad, lora_up) on a GPU,
 * composed as pgrt_lm runs them, against a double-precision reference on
 * random data, over ragged T, in, out and r and several split counts, for
 * `parts` pairs stacked as one layer's q, k, v are, x and dy f32 or bf16:
 *
 *   xa  = s x A^T            proj(x, stacked A): part-major [parts][T, r]
 *   y  (+)= xa B^T           up(wt 0) from the last part, plain and
 *                            accumulating
 *   dB  = dy^T xa            grad(dy, last part of xa)
 *   dxa = s dy B             proj(wt 1)
 *   dA  = xa^T x             grad(x, all parts, trans): the stacked [R, in]
 *   dx (+)= xa A             up(wt 1, parts), plain and accumulating
 *
 * Each step reads the device's result of the step before, so a row checks
 * one kernel pair. Every step runs twice and must give the same bits, and
 * the tiled kernels leave their arrival counters at zero.
 *
 * Usage: test_lora [--small] [--seed N]; exit 77 without a GPU.
 * tests/bench/bench_lora times the sequence at the 1.5B shapes.
 */
#define REL_TOL 1e-5

#include "model_check.h"

/* Launch kernel twice on fresh poisoned outputs (out, and ws when given),
 * keeping both downloads of out (n floats) in got[2]. prep reloads an
 * accumulated output before each run. */
typedef struct step {
    const char *kernel;
    pgk_knobs kn;
    pgrt_arg args[10];
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
static void check_as(const char *name, const char *label, const step *st, size_t nst, pgrt_buf *ws,
                     pgrt_buf *out, const float *init, const double *ref, size_t n, float *keep)
{
    row *r = add_row(name, "%s", label);
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

static pgk_knobs kn_up(uint32_t T, uint32_t N, uint32_t r, uint32_t wt, uint32_t acc)
{
    return knobs_of("lora_up_f32", "rows", T, "n", N, "rank", r, "wt", wt, "acc", acc, NULL);
}
static pgk_knobs kn_upp(uint32_t T, uint32_t N, uint32_t r, uint32_t acc, uint32_t parts)
{
    return knobs_of("lora_up_f32", "rows", T, "n", N, "rank", r * parts, "wt", 1, "acc", acc,
                    "part", parts > 1 ? r : 0, NULL);
}
/* lora_proj / lora_grad: len is k or n, the long operand's row length */
static pgk_knobs kn_tile(const char *kernel, uint32_t T, uint32_t len, uint32_t r, uint32_t parts,
                         uint32_t flag, uint32_t sp)
{
    bool proj = strncmp(kernel, "lora_proj", 9) == 0, bf16 = strstr(kernel, "bf16") != NULL;
    uint32_t vec = len % (bf16 ? 8u : 4u) == 0;
    return knobs_of(kernel, "rows", T, proj ? "k" : "n", len, "cols", r * parts, "rank", r,
                    proj ? "wt" : "trans", flag, "vec", vec, "split", sp, NULL);
}

#define P(b) pgrt_arg_buf(b)
#define U(x) pgrt_arg_u32((uint32_t)(x))
#define F(x) pgrt_arg_f32((float)(x))

/* ref[m N + n] = old[m N + n] (when old) + scale * sum over k of
 * a[m am + k ak] b[n bn + k bk], in double, k in order: every product of
 * a LoRA pair, by its strides. */
static void ref_product(double *ref, uint32_t M, uint32_t N, uint32_t K, const float *a,
                        size_t am, size_t ak, const float *b, size_t bn, size_t bk,
                        double scale, const float *old)
{
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            double d = 0;
            for (uint32_t k = 0; k < K; k++)
                d += (double)a[m * am + k * ak] * b[n * bn + k * bk];
            size_t i = (size_t)m * N + n;
            ref[i] = old ? old[i] + scale * d : scale * d;
        }
}

typedef struct tshape {
    uint32_t T, in, out, r, parts, splits;
    bool bf16; /* x and dy stored bf16 */
} tshape;

static void test_tiled(const tshape *s)
{
    uint32_t T = s->T, in = s->in, out = s->out, r = s->r, P = s->parts, R = r * P, sp = s->splits;
    bool bf = s->bf16;
    float sc = 32.0f / (float)r;
    const char *proj = bf ? "lora_proj_bf16" : "lora_proj_f32";
    const char *grad = bf ? "lora_grad_bf16" : "lora_grad_f32";
    char label[96];
    snprintf(label, sizeof label, "T=%u in=%u out=%u r=%ux%u sp=%u %s", T, in, out, r, P, sp,
             bf ? "bf16" : "f32");
    size_t nx = (size_t)T * in, ny = (size_t)T * out, na = (size_t)R * in, nb = (size_t)out * r,
           nxa = (size_t)T * R, npart = (size_t)T * r;
    float *x = fill_normal(nx, 1.0, 0.1), *dy = fill_normal(ny, 1.0, -0.05);
    float *A = fill_normal(na, 0.05, 0.01), *B = fill_normal(nb, 0.05, -0.01);
    float *y0 = fill_normal(ny, 1.0, 0.2), *dx0 = fill_normal(nx, 1.0, -0.2);
    /* x and dy rounded to bf16 in place when stored so: the reference sees what the device does */
    pgrt_buf *bx = act_upload(x, nx, bf), *bdy = act_upload(dy, ny, bf);
    pgrt_buf *bA = dev_upload(A, na), *bB = dev_upload(B, nb);
    pgrt_buf *bxa = dev_alloc(PG_F32, nxa), *bdxa = dev_alloc(PG_F32, npart);
    pgrt_buf *by = dev_alloc(PG_F32, ny), *bdx = dev_alloc(PG_F32, nx);
    pgrt_buf *bdA = dev_alloc(PG_F32, na), *bdB = dev_alloc(PG_F32, nb);
    uint32_t longest = T > in ? T : in;
    longest = longest > out ? longest : out;
    uint32_t tiles = (longest + 63) / 64;
    pgrt_buf *ws = dev_alloc(PG_F32, (size_t)sp * tiles * 64 * ((R + 15) & ~15u));
    pgrt_buf *cnt = dev_alloc(PG_U32, tiles);
    GPU_CHECK(pgrt_buf_memset(cnt, 0));
    size_t nref = nx;
    const size_t sizes[] = {ny, na, nb, nxa};
    for (size_t i = 0; i < 4; i++)
        nref = sizes[i] > nref ? sizes[i] : nref;
    double *ref = xmalloc(nref * sizeof(double));
    float *xa = xmalloc(nxa * 4);
    /* the last part of xa: a plain [T, r] */
    pgrt_devptr last = pgrt_buf_ptr(bxa) + (uint64_t)(P - 1) * npart * 4u;

    for (uint32_t t = 0; t < T; t++)
        for (uint32_t j = 0; j < R; j++) {
            double a = 0;
            for (uint32_t k = 0; k < in; k++)
                a += (double)x[(size_t)t * in + k] * A[(size_t)j * in + k];
            ref[((size_t)(j / r) * T + t) * r + j % r] = sc * a;
        }
    step st_xa[] = {{proj, kn_tile(proj, T, in, r, P, 0, sp),
                     {P(bx), P(bA), P(bxa), P(ws), P(cnt), U(T), U(in), U(sp), F(sc)}, 9}};
    check_as("lora_proj xa (parts)", label, st_xa, 1, ws, bxa, NULL, ref, nxa, xa);
    const float *xl = xa + (size_t)(P - 1) * npart;

    for (uint32_t acc = 0; acc < 2; acc++) {
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t o = 0; o < out; o++) {
                double d = 0;
                for (uint32_t j = 0; j < r; j++)
                    d += (double)xl[(size_t)t * r + j] * B[(size_t)o * r + j];
                ref[(size_t)t * out + o] = (acc ? y0[(size_t)t * out + o] : 0.0) + d;
            }
        step st_y[] = {{"lora_up_f32", kn_up(T, out, r, 0, acc),
                        {pgrt_arg_ptr(last), P(bB), P(by), U(T), U(out), F(1.0f)}, 6}};
        check_as(acc ? "lora_up y+=xa B^T (part)" : "lora_up y=xa B^T (part)", label, st_y, 1,
                 NULL, by, acc ? y0 : NULL, ref, ny, NULL);
    }

    for (uint32_t o = 0; o < out; o++)
        for (uint32_t j = 0; j < r; j++) {
            double a = 0;
            for (uint32_t t = 0; t < T; t++)
                a += (double)dy[(size_t)t * out + o] * xl[(size_t)t * r + j];
            ref[(size_t)o * r + j] = a;
        }
    step st_db[] = {{grad, kn_tile(grad, T, out, r, 1, 0, sp),
                     {P(bdy), pgrt_arg_ptr(last), P(bdB), P(ws), P(cnt), U(T), U(out), U(sp),
                      F(1.0f)},
                     9}};
    check_as("lora_grad dB", label, st_db, 1, ws, bdB, NULL, ref, nb, NULL);

    ref_product(ref, T, r, out, dy, out, 1, B, 1, r, sc, NULL);
    step st_dxa[] = {{proj, kn_tile(proj, T, out, r, 1, 1, sp),
                      {P(bdy), P(bB), P(bdxa), P(ws), P(cnt), U(T), U(out), U(sp), F(sc)}, 9}};
    check_as("lora_proj dxa (wt)", label, st_dxa, 1, ws, bdxa, NULL, ref, npart, NULL);

    /* the stacked dA, with xa standing in for dxa: [R, in] */
    for (uint32_t j = 0; j < R; j++)
        for (uint32_t k = 0; k < in; k++) {
            double a = 0;
            for (uint32_t t = 0; t < T; t++)
                a += (double)xa[((size_t)(j / r) * T + t) * r + j % r] * x[(size_t)t * in + k];
            ref[(size_t)j * in + k] = a;
        }
    step st_da[] = {{grad, kn_tile(grad, T, in, r, P, 1, sp),
                     {P(bx), P(bxa), P(bdA), P(ws), P(cnt), U(T), U(in), U(sp), F(1.0f)}, 9}};
    check_as("lora_grad dA (parts, trans)", label, st_da, 1, ws, bdA, NULL, ref, na, NULL);

    for (uint32_t acc = 0; acc < 2; acc++) {
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t k = 0; k < in; k++) {
                double d = 0;
                for (uint32_t j = 0; j < R; j++)
                    d += (double)xa[((size_t)(j / r) * T + t) * r + j % r] *
                         A[(size_t)j * in + k];
                ref[(size_t)t * in + k] = (acc ? dx0[(size_t)t * in + k] : 0.0) + d;
            }
        step st_dx[] = {{"lora_up_f32", kn_upp(T, in, r, acc, P),
                         {P(bxa), P(bA), P(bdx), U(T), U(in), F(1.0f)}, 6}};
        check_as(acc ? "lora_up dx+=xa A (parts)" : "lora_up dx=xa A (parts)", label, st_dx, 1,
                 NULL, bdx, acc ? dx0 : NULL, ref, nx, NULL);
    }

    /* every launch above left the arrival counters as it found them */
    uint32_t *c = xmalloc(tiles * 4u);
    dev_download(cnt, c, tiles);
    row *rc = add_row("lora_tile counters", "%s", label);
    for (uint32_t i = 0; i < tiles; i++)
        if (c[i] != 0) {
            rc->bad++;
            printf("lora_tile counters: counter %u is %u after the launches, not 0\n", i, c[i]);
            break;
        }
    rc->repeat = true;
    finish(rc);
    free(c);

    pgrt_buf *bufs[] = {bx, bdy, bA, bB, bxa, bdxa, by, bdx, bdA, bdB, ws, cnt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        pgrt_buf_destroy(&bufs[i]);
    free(x), free(dy), free(A), free(B), free(y0), free(dx0), free(xa), free(ref);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_lora");
    /* T, in, out, r, parts, splits, bf16: ragged and aligned rows (the
     * 16-byte path), 1 to 64 slices, empty slices, stacked pairs */
    static const tshape tshapes[] = {
        {1, 1, 1, 1, 1, 1, false},          {3, 15, 1537, 3, 2, 2, false},
        {17, 1537, 15, 17, 3, 3, true},     {77, 8, 1536, 16, 3, 4, true},
        {130, 1537, 1536, 16, 2, 5, false}, {300, 1536, 256, 64, 1, 7, true},
        {1000, 24, 1544, 16, 4, 9, true},   {2048, 1536, 1536, 16, 3, 12, true},
        {513, 1537, 256, 3, 1, 64, false},  {2048, 1536, 256, 16, 2, 1, false},
        {64, 200, 40, 5, 5, 40, true},      {5, 1536, 1, 64, 1, 1, false},
        {77, 1, 1536, 16, 1, 4, false},     {1000, 15, 1537, 17, 1, 9, false},
    };
    for (size_t i = 0; i < sizeof tshapes / sizeof tshapes[0]; i++) {
        tshape s = tshapes[i];
        if (small && s.T > 130)
            s.T = 65;
        test_tiled(&s);
    }
    print_table("each step from the device's result of the one before; f32 sums of f32 or bf16 "
                "data, double reference; rel_l2 <= 1e-5, two runs bit-identical");
    TEST_DONE();
}
