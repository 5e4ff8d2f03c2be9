/* SPDX-License-Identifier: MIT */
/*
 * GEMM throughput against cuBLAS in the same process, with CUDA events:
 * the median of timed batches after a warm-up, ours and cuBLAS taking turns
 * batch by batch, as TFLOP/s (2·M·N·K flops).
 *
 * Shapes: a linear layer's three products (pgk_gemm_layout: forward Y =
 * X·Wᵀ, dX = dY·W, dW = dYᵀ·X) at M = 2048 tokens for the Qwen2-1.5B
 * projections (N, K) = q/o (1536, 1536), k/v (256, 1536), gate/up (8960,
 * 1536), down (1536, 8960), LM head (151936, 1536); the LoRA rank-16
 * products (2048, 16, 1536) and (2048, 1536, 16); and 4096³, 8192³.
 *
 * Columns, for bf16 and f16 (f32 accumulate, output of the input's type;
 * cuBLAS: cublasGemmEx, compute 32F) and fp32 (cuBLAS: cublasSgemm_v2 with
 * pedantic math, no TF32): ours through pgrt_gemm (the chooser, with a
 * workspace) as TFLOP/s, cuBLAS's, and ours/cuBLAS. Then the geometric
 * means of the ratios over the large shapes (Qwen and square) and over the
 * LoRA shapes; the choice pgrt_gemm made for each shape (16-bit: on sm_90a
 * gemm_sm90 "sm90 bnW" for most, gemm_thin "thin <form> jJ" or the
 * mma.sync family "mma_<layout> tT sS" for the thin ones; fp32: "fp32
 * <kernel> tT sS" or gemm_thin); and the relative Frobenius
 * difference between our bf16 output and cuBLAS's.
 *
 * --quick: no LM head and no 8192³, fewer repetitions (under a minute).
 * --sweep: for bf16, every tile and split of the mma.sync kernels on each
 * shape (the data the chooser's table is fitted to).
 * --no-f32: skip the fp32 columns; --only-f32: only them.
 * --lora: only the LoRA shapes (the thin kernel's rows, in seconds), and
 * gemm_thin in each of its forms on them (bf16: 0-4, fp32: 0-2).
 * --sweep-f32: for fp32, every tile and split of the warp-tiled family
 * (gemm_f32_<layout>) on each shape (the data its chooser's table comes
 * from).
 *
 * A figure, not a test: it fails only when something does not run.
 */
#include "cublas_dl.h"
#include "kernels/gemm_util.h"

typedef struct shape {
    const char *name;
    uint32_t m, n, k;
    bool big;  /* not in --quick */
    bool lora; /* a thin shape: its own geometric mean */
} shape;

static const shape shapes[] = {
    {"q/o", 2048, 1536, 1536, false, false},
    {"k/v", 2048, 256, 1536, false, false},
    {"gate/up", 2048, 8960, 1536, false, false},
    {"down", 2048, 1536, 8960, false, false},
    {"lm_head", 2048, 151936, 1536, true, false},
    {"lora_a r16", 2048, 16, 1536, false, true},
    {"lora_b r16", 2048, 1536, 16, false, true},
    {"4096^3", 4096, 4096, 4096, false, false},
    {"8192^3", 8192, 8192, 8192, true, false},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static const char *const lname[] = {"fwd", "dX", "dW"};

static bool quick, lora_only;

/* Whether the run leaves shape s out. */
static bool skipped(const shape *s) { return (quick && s->big) || (lora_only && !s->lora); }

enum { T_F32, T_F16, T_BF16, T_COUNT }; /* cublas_dl_layer's type codes */

typedef struct bench {
    pgrt_ctx *ctx;
    pgrt_event *e0, *e1;
    cublas_dl *cb;
    pgrt_buf *a[T_COUNT], *b[T_COUNT], *c[T_COUNT], *ref, *ws;
    int reps;
} bench;

static pg_type ptype(int t) { return t == T_F32 ? PG_F32 : t == T_F16 ? PG_F16 : PG_BF16; }

/* Element counts of a, b and the output. */
static void sizes(const shape *s, unsigned layout, size_t *na, size_t *nb, size_t *nc)
{
    size_t m = s->m, n = s->n, k = s->k;
    *na = layout == PGK_GEMM_FORWARD ? m * k : m * n;
    *nb = layout == PGK_GEMM_BACKWARD_W ? m * k : n * k;
    *nc = layout == PGK_GEMM_FORWARD ? m * n : layout == PGK_GEMM_BACKWARD_X ? m * k : n * k;
}

/* What one timed call runs. */
typedef struct job {
    const shape *s;
    unsigned layout;
    int type;
    int who; /* 0 ours (pgrt_gemm), 1 cuBLAS, 2 a direct mma launch, 3 gemm_thin,
                4 a direct gemm_f32_<layout> launch */
    uint32_t tile, split; /* who 3: tile is gemm_thin's form */
    pgrt_buf *out;
    pgrt_buf *va, *vb, *vc; /* views of the operands' sizes, made once */
    pgk_gemm_choice used;
} job;

static int run_job(bench *B, job *j)
{
    const shape *s = j->s;
    size_t na, nb, nc;
    sizes(s, j->layout, &na, &nb, &nc);
    char err[256];
    int rc;
    if (j->who == 1) {
        rc = cublas_dl_layer(B->cb, (int)j->layout, j->type, j->type, pgrt_buf_ptr(B->a[j->type]),
                             pgrt_buf_ptr(B->b[j->type]), pgrt_buf_ptr(j->out), (int)s->m,
                             (int)s->n, (int)s->k, err, sizeof err);
        if (rc)
            fprintf(stderr, "cuBLAS: %s\n", err);
        return rc;
    }
    pgrt_buf *va = j->va, *vb = j->vb, *vc = j->vc;
    if (j->who == 3) {
        const pgk_desc *d = pgk_find("gemm_thin");
        pgk_knobs kn = gemm_thin_knobs((pgk_gemm_layout)j->layout, ptype(j->type),
                                       ptype(j->type), s->m, s->n, s->k);
        kn.v[pgk_knob_index(d, "form")] = j->tile;
        pgrt_arg args[9] = {pgrt_arg_buf(va),    pgrt_arg_buf(vb),    pgrt_arg_buf(vc),
                            pgrt_arg_buf(vc),    pgrt_arg_buf(vc),    pgrt_arg_u32(s->m),
                            pgrt_arg_u32(s->n),  pgrt_arg_u32(s->k),  pgrt_arg_u32(0)};
        rc = pgrt_launch(B->ctx, NULL, "gemm_thin", &kn, args, 9);
    } else if (j->who == 0) {
        rc = pgrt_gemm(B->ctx, NULL, (pgk_gemm_layout)j->layout, va, vb, vc, NULL, s->m, s->n,
                       s->k, false, B->ws, &j->used);
    } else {
        static const char *const mma_names[] = {"gemm_mma_forward", "gemm_mma_backward_x",
                                                "gemm_mma_backward_w"};
        static const char *const f32_names[] = {"gemm_f32_forward", "gemm_f32_backward_x",
                                                "gemm_f32_backward_w"};
        const char *const *names = j->who == 4 ? f32_names : mma_names;
        const pgk_desc *d = pgk_find(names[j->layout]);
        pgk_knobs kn;
        pgk_knobs_default(d, &kn);
        kn.v[pgk_knob_index(d, "m")] = s->m;
        kn.v[pgk_knob_index(d, "n")] = s->n;
        kn.v[pgk_knob_index(d, "k")] = s->k;
        if (j->who == 2) {
            kn.v[pgk_knob_index(d, "in")] = j->type == T_BF16 ? 1 : 0;
            kn.v[pgk_knob_index(d, "out")] = j->type == T_BF16 ? 2 : 1;
        }
        kn.v[pgk_knob_index(d, "tile")] = j->tile;
        kn.v[pgk_knob_index(d, "split")] = j->split;
        pgrt_arg args[9] = {pgrt_arg_buf(va),    pgrt_arg_buf(vb),    pgrt_arg_buf(vc),
                            pgrt_arg_buf(vc),    pgrt_arg_buf(B->ws), pgrt_arg_u32(s->m),
                            pgrt_arg_u32(s->n),  pgrt_arg_u32(s->k),  pgrt_arg_u32(0)};
        rc = pgrt_launch(B->ctx, NULL, names[j->layout], &kn, args, 9);
        if (rc == 0 && j->split > 1) {
            uint32_t P = j->layout == PGK_GEMM_BACKWARD_W ? s->n : s->m;
            uint32_t Q = j->layout == PGK_GEMM_FORWARD ? s->n : s->k;
            const pgk_desc *rd = pgk_find("gemm_mma_reduce");
            pgk_knobs rk;
            pgk_knobs_default(rd, &rk);
            rk.v[pgk_knob_index(rd, "n")] = P * Q;
            rk.v[pgk_knob_index(rd, "cols")] = Q;
            rk.v[pgk_knob_index(rd, "split")] = j->split;
            rk.v[pgk_knob_index(rd, "out")] =
                j->who == 4 ? 0 : kn.v[pgk_knob_index(d, "out")];
            pgrt_arg ra[7] = {pgrt_arg_buf(B->ws), pgrt_arg_buf(vc),     pgrt_arg_buf(vc),
                              pgrt_arg_u32(P * Q),  pgrt_arg_u32(Q),      pgrt_arg_u32(j->split),
                              pgrt_arg_u32(0)};
            rc = pgrt_launch(B->ctx, NULL, "gemm_mma_reduce", &rk, ra, 7);
        }
    }
    if (rc)
        fprintf(stderr, "%s %s: %s: %s\n", s->name, lname[j->layout], pgrt_err_name(rc),
                pgrt_last_message());
    return rc;
}

/* gemm_thin's forms (its knob "form") as the choice column names them. */
static const char *form_name(uint32_t form)
{
    static const char *const names[] = {"outer", "narrow-q", "narrow-p", "mma-q", "mma-p"};
    return form < sizeof names / sizeof names[0] ? names[form] : "?";
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of one call; < 0 when it does not run. The views
 * are made outside the timing: a launch's host cost is what counts. */
static double time_job_(bench *B, job *j, job *j2, double *t2);

static void views(bench *B, job *j)
{
    size_t na, nb, nc;
    sizes(j->s, j->layout, &na, &nb, &nc);
    GPU_CHECK(pgrt_buf_view(B->a[j->type], 0, na, &j->va));
    GPU_CHECK(pgrt_buf_view(B->b[j->type], 0, nb, &j->vb));
    GPU_CHECK(pgrt_buf_view(j->out, 0, nc, &j->vc));
}

static void views_free(job *j)
{
    pgrt_buf_destroy(&j->va);
    pgrt_buf_destroy(&j->vb);
    pgrt_buf_destroy(&j->vc);
}

static double time_job(bench *B, job *j)
{
    views(B, j);
    double t = time_job_(B, j, NULL, NULL);
    views_free(j);
    return t;
}

/* Ours and cuBLAS on one shape, their timed batches taking turns, so
 * that a change of clocks (the card slows after the tensor-core columns)
 * falls on both alike. */
static void time_pair(bench *B, job *ours, job *cub, double *to, double *tc)
{
    views(B, ours);
    views(B, cub);
    *to = time_job_(B, ours, cub, tc);
    views_free(ours);
    views_free(cub);
}

/* Runs a batch and how many runs make one of ~2 ms (launch gaps then do
 * not count), after two warm-up runs; 0 on failure. */
static int batch_of(bench *B, job *j)
{
    for (int i = 0; i < 2; i++)
        if (run_job(B, j))
            return 0;
    GPU_CHECK(pgrt_event_record(B->e0, NULL));
    if (run_job(B, j))
        return 0;
    GPU_CHECK(pgrt_event_record(B->e1, NULL));
    GPU_CHECK(pgrt_event_sync(B->e1));
    float one = 0;
    GPU_CHECK(pgrt_event_elapsed_ms(B->e0, B->e1, &one));
    int batch = one > 0 ? (int)(2.0f / one) + 1 : 50;
    return batch < 1 ? 1 : batch > 200 ? 200 : batch;
}

/* ms a run over one timed batch; negative on failure. */
static float time_batch(bench *B, job *j, int batch)
{
    float t = 0;
    GPU_CHECK(pgrt_event_record(B->e0, NULL));
    for (int i = 0; i < batch; i++)
        if (run_job(B, j))
            return -1;
    GPU_CHECK(pgrt_event_record(B->e1, NULL));
    GPU_CHECK(pgrt_event_sync(B->e1));
    GPU_CHECK(pgrt_event_elapsed_ms(B->e0, B->e1, &t));
    return t / (float)batch;
}

static double median(float *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_float);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* The median ms of j (and, with j2, of j2 in alternate batches into *t2). */
static double time_job_(bench *B, job *j, job *j2, double *t2)
{
    int batch = batch_of(B, j), batch2 = j2 ? batch_of(B, j2) : 1;
    if (t2)
        *t2 = -1;
    if (!batch)
        return -1;
    float t[64], u[64];
    int reps = B->reps < 64 ? B->reps : 64;
    bool second = j2 && batch2;
    for (int r = 0; r < reps; r++) {
        if ((t[r] = time_batch(B, j, batch)) < 0)
            return -1;
        if (second && (u[r] = time_batch(B, j2, batch2)) < 0)
            second = false;
    }
    if (second)
        *t2 = median(u, reps);
    return median(t, reps);
}

static double tflops(const shape *s, double ms)
{
    return ms > 0 ? 2.0 * s->m * s->n * (double)s->k / (ms * 1e-3) / 1e12 : 0;
}

/* Relative Frobenius difference of two outputs of type t (n elements). */
static double diff(pgrt_ctx *ctx, pgrt_buf *x, pgrt_buf *y, int t, size_t n)
{
    size_t es = t == T_F32 ? 4 : 2;
    uint8_t *hx = malloc(n * es), *hy = malloc(n * es);
    double num = 0, den = 0;
    if (!hx || !hy || pgrt_ctx_sync(ctx) || pgrt_buf_download(x, 0, hx, n) ||
        pgrt_buf_download(y, 0, hy, n)) {
        free(hx);
        free(hy);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        double u, v;
        if (t == T_F32) {
            u = ((float *)hx)[i];
            v = ((float *)hy)[i];
        } else {
            uint16_t a16, b16;
            memcpy(&a16, hx + 2 * i, 2);
            memcpy(&b16, hy + 2 * i, 2);
            u = t == T_F16 ? f16_to_f32(a16) : bf16_to_f32(a16);
            v = t == T_F16 ? f16_to_f32(b16) : bf16_to_f32(b16);
        }
        num += (u - v) * (u - v);
        den += v * v;
    }
    free(hx);
    free(hy);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One line of a sweep: TFLOP/s of every tile x split of the family `who`
 * (2: gemm_mma_*, 4: gemm_f32_*) on shape s in layout l, the chooser's
 * pick (ch) starred, the best last. A split runs only where each slice
 * keeps 4 r-tiles of `grain` and its partials fit the workspace (and, for
 * the mma family, P·Q stays within 2^24). */
static void sweep_row(bench *B, const shape *s, unsigned l, const char *tag, int type, int who,
                      uint32_t ntiles, const uint32_t *splits, unsigned nsplits, uint32_t grain,
                      const pgk_gemm_choice *ch)
{
    uint32_t P = l == PGK_GEMM_BACKWARD_W ? s->n : s->m;
    uint32_t Q = l == PGK_GEMM_FORWARD ? s->n : s->k;
    uint32_t R = l == PGK_GEMM_FORWARD ? s->k : l == PGK_GEMM_BACKWARD_X ? s->n : s->m;
    printf("%s %s %s P=%u Q=%u R=%u:", tag, s->name, lname[l], P, Q, R);
    double best = 0;
    uint32_t bt = 0, bs = 0;
    for (uint32_t tile = 0; tile < ntiles; tile++)
        for (unsigned si = 0; si < nsplits; si++) {
            uint32_t sp = splits[si];
            if (sp > 1 && ((R + grain - 1) / grain < 4 * sp ||
                           (uint64_t)P * Q * 4 * sp > pgrt_buf_count(B->ws)))
                continue;
            if (sp > 1 && who == 2 && (uint64_t)P * Q > (1u << 24))
                continue;
            job j = {.s = s, .layout = l, .type = type, .who = who, .tile = tile, .split = sp,
                     .out = B->c[type]};
            double tf = tflops(s, time_job(B, &j));
            printf(" t%us%u=%.1f%s", tile, sp, tf, tile == ch->tile && sp == ch->split ? "*" : "");
            if (tf > best) {
                best = tf;
                bt = tile;
                bs = sp;
            }
        }
    printf(" | best t%us%u %.1f\n", bt, bs, best);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bool sweep = false, sweep32 = false, f32 = true, only32 = false;
    quick = gpu_quick();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--sweep") == 0)
            sweep = true;
        else if (strcmp(argv[i], "--no-f32") == 0)
            f32 = false;
        else if (strcmp(argv[i], "--lora") == 0)
            lora_only = true;
        else if (strcmp(argv[i], "--only-f32") == 0)
            only32 = true;
        else if (strcmp(argv[i], "--sweep-f32") == 0)
            sweep32 = true;
        else {
            fprintf(stderr, "usage: bench_gemm [--quick] [--lora] [--sweep] [--sweep-f32] "
                    "[--no-f32 | --only-f32]\n");
            return 2;
        }
    }
    bench B = {0};
    B.ctx = gpu_open();
    B.reps = quick ? 5 : 11;
    pgrt_device_info info;
    pgrt_ctx_device_info(B.ctx, &info);
    if (pg_target_sm(info.target) < 80) {
        fprintf(stderr, "skip: the 16-bit GEMMs need sm_80 (this is %s)\n",
                pg_target_name(info.target));
        return GPU_SKIP;
    }
    GPU_CHECK(pgrt_event_create(B.ctx, &B.e0));
    GPU_CHECK(pgrt_event_create(B.ctx, &B.e1));
    char err[256];
    if (cublas_dl_open(&B.cb, err, sizeof err)) {
        fprintf(stderr, "note: %s: no cuBLAS columns\n", err);
        B.cb = NULL;
    }

    size_t amax = 0, bmax = 0, cmax = 0, amax32 = 0, bmax32 = 0, cmax32 = 0;
    uint64_t wsmax = 1 << 20;
    for (size_t i = 0; i < NSHAPES; i++) {
        if (skipped(&shapes[i]))
            continue;
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
            size_t na, nb, nc;
            sizes(&shapes[i], l, &na, &nb, &nc);
            amax = na > amax ? na : amax;
            bmax = nb > bmax ? nb : bmax;
            cmax = nc > cmax ? nc : cmax;
            if (f32 && !(quick && shapes[i].m * (uint64_t)shapes[i].n > (1u << 26))) {
                amax32 = na > amax32 ? na : amax32;
                bmax32 = nb > bmax32 ? nb : bmax32;
                cmax32 = nc > cmax32 ? nc : cmax32;
            }
            for (int t = T_F32; t <= T_BF16; t++) {
                if (t == T_F32 ? !f32 : only32)
                    continue;
                uint64_t w = pgrt_gemm_workspace_bytes(B.ctx, (pgk_gemm_layout)l, ptype(t),
                                                       ptype(t), shapes[i].m, shapes[i].n,
                                                       shapes[i].k);
                wsmax = w > wsmax ? w : wsmax;
            }
        }
    }
    if (sweep || sweep32)
        wsmax = wsmax > (256u << 20) ? wsmax : (256u << 20);
    size_t big = amax > bmax ? amax : bmax;
    float *h = malloc(big * sizeof *h);
    uint16_t *h16 = malloc(big * sizeof *h16);
    if (!h || !h16) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    rng r = {12345};
    for (size_t i = 0; i < big; i++)
        h[i] = rng_unit(&r);
    for (int t = 0; t < T_COUNT; t++) {
        size_t na = t == T_F32 ? amax32 : amax, nb = t == T_F32 ? bmax32 : bmax;
        size_t nc = t == T_F32 ? cmax32 : cmax;
        if (t == T_F32 ? !f32 : only32)
            continue;
        GPU_CHECK(pgrt_buf_alloc(B.ctx, ptype(t), na, &B.a[t]));
        GPU_CHECK(pgrt_buf_alloc(B.ctx, ptype(t), nb, &B.b[t]));
        GPU_CHECK(pgrt_buf_alloc(B.ctx, ptype(t), nc, &B.c[t]));
        if (t == T_F32) {
            GPU_CHECK(pgrt_buf_upload(B.a[t], 0, h, na));
            GPU_CHECK(pgrt_buf_upload(B.b[t], 0, h + (big - nb), nb));
        } else {
            for (size_t i = 0; i < big; i++)
                h16[i] = t == T_F16 ? f32_to_f16(h[i]) : f32_to_bf16(h[i]);
            GPU_CHECK(pgrt_buf_upload(B.a[t], 0, h16, na));
            GPU_CHECK(pgrt_buf_upload(B.b[t], 0, h16 + (big - nb), nb));
        }
    }
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_U8, wsmax, &B.ws));
    GPU_CHECK(pgrt_buf_alloc(B.ctx, PG_BF16, cmax, &B.ref));
    free(h);
    free(h16);

    printf("GEMM on %s (%s, %d SMs), TFLOP/s, median of %d timed batches (ours and cuBLAS "
           "taking turns)\n",
           info.name, pg_target_name(info.arch_target), info.sm_count, B.reps);
    if (B.cb)
        printf("cuBLAS: %s (version %d); bf16/f16: cublasGemmEx, compute 32F, output of the "
               "input type; fp32: cublasSgemm_v2, CUBLAS_PEDANTIC_MATH\n",
               cublas_dl_name(B.cb), cublas_dl_version(B.cb));
    printf("\n%-11s %-3s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s | %-22s %9s\n", "shape (M,N,K)",
           "", "bf16", "cuBLAS", "ratio", "f16", "cuBLAS", "ratio", "fp32", "cuBLAS", "ratio",
           "choice (bf16; fp32)", "|bf16-cuB|");
    double lg[T_COUNT][2] = {{0}}, lo[T_COUNT][2];
    int cnt[T_COUNT][2] = {{0}};
    for (int t = 0; t < T_COUNT; t++)
        lo[t][0] = lo[t][1] = 1e9;
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        if (skipped(s))
            continue;
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
            char label[40];
            snprintf(label, sizeof label, "%s", s->name);
            printf("%-11s %-3s |", label, lname[l]);
            char choice[128] = "-";
            double dif = -1;
            pgk_gemm_choice t32_used = {0};
            for (int t = T_BF16; t >= T_F32; t--) {
                bool skip32 = t == T_F32 && (!f32 || (quick && s->m * (uint64_t)s->n > (1u << 26)));
                if (skip32 || (t != T_F32 && only32)) {
                    printf(" %8s %8s %6s |", "-", "-", "-");
                    continue;
                }
                job ours = {.s = s, .layout = l, .type = t, .who = 0, .out = B.c[t]};
                job cub = {.s = s, .layout = l, .type = t, .who = 1,
                           .out = t == T_BF16 ? B.ref : B.c[t]};
                double to, tc = -1;
                if (B.cb)
                    time_pair(&B, &ours, &cub, &to, &tc);
                else
                    to = time_job(&B, &ours);
                if (t == T_F32)
                    t32_used = ours.used;
                printf(" %8.2f %8.2f", tflops(s, to), tflops(s, tc));
                if (to > 0 && tc > 0) {
                    double ratio = tc / to;
                    printf(" %6.2f |", ratio);
                    int g = s->lora ? 1 : 0;
                    lg[t][g] += log(ratio);
                    lo[t][g] = ratio < lo[t][g] ? ratio : lo[t][g];
                    cnt[t][g]++;
                } else {
                    printf(" %6s |", "-");
                }
                if (t == T_BF16 && to > 0) {
                    const pgk_desc *ud = ours.used.desc;
                    int bn = ud ? pgk_knob_index(ud, "bn") : -1;
                    int fo = ud ? pgk_knob_index(ud, "form") : -1;
                    if (bn >= 0) /* gemm_sm90: 128 x bn tiles, no split */
                        snprintf(choice, sizeof choice, "sm90 bn%u", ours.used.knobs.v[bn]);
                    else if (fo >= 0) /* gemm_thin: its form, the thin side's bound */
                        snprintf(choice, sizeof choice, "thin %s j%u",
                                 form_name(ours.used.knobs.v[fo]),
                                 ours.used.knobs.v[pgk_knob_index(ud, "j")]);
                    else
                        snprintf(choice, sizeof choice, "%s t%u s%u",
                                 ud ? ud->name + 5 : "?", ours.used.tile, ours.used.split);
                    if (tc > 0) {
                        size_t na, nb, nc;
                        sizes(s, l, &na, &nb, &nc);
                        dif = diff(B.ctx, B.c[T_BF16], B.ref, T_BF16, nc);
                    }
                }
            }
            if (t32_used.desc) {
                size_t at = strcmp(choice, "-") ? strlen(choice) : 0;
                snprintf(choice + at, sizeof choice - at, "%sfp32 %s t%u s%u", at ? "; " : "",
                         t32_used.desc->name + 5, t32_used.tile, t32_used.split);
            }
            printf(" %-22s %9.1e\n", choice, dif);
            fflush(stdout);
        }
    }
    printf("\ngeometric mean of ours/cuBLAS (lowest):\n");
    static const char *const tn[] = {"fp32", "f16", "bf16"};
    for (int t = T_BF16; t >= T_F32; t--)
        printf("  %-5s large shapes %5.2f (%4.2f, %d)   LoRA r16 %5.2f (%4.2f, %d)\n", tn[t],
               cnt[t][0] ? exp(lg[t][0] / cnt[t][0]) : 0, cnt[t][0] ? lo[t][0] : 0, cnt[t][0],
               cnt[t][1] ? exp(lg[t][1] / cnt[t][1]) : 0, cnt[t][1] ? lo[t][1] : 0, cnt[t][1]);

    if (lora_only) {
        printf("\ngemm_thin in each form (0 outer, 1 narrow on Q, 2 narrow on P, 3 and 4 the "
               "same on mma.sync), TFLOP/s\n");
        static const char *const tn2[] = {"fp32", "f16", "bf16"};
        for (size_t i = 0; i < NSHAPES; i++) {
            const shape *s = &shapes[i];
            if (skipped(s))
                continue;
            for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
                for (int t = T_BF16; t >= T_F32; t -= 2) {
                    if (t == T_F32 && !f32)
                        continue;
                    printf("FORMS %-10s %-3s %-4s:", s->name, lname[l], tn2[t]);
                    for (uint32_t f = 0; f < (t == T_F32 ? 3u : 5u); f++) {
                        job j = {.s = s, .layout = l, .type = t, .who = 3, .tile = f,
                                 .out = B.c[t]};
                        printf(" f%u=%.2f", f, tflops(s, time_job(&B, &j)));
                    }
                    printf("\n");
                    fflush(stdout);
                }
        }
    }

    if (sweep) {
        printf("\nsweep (bf16 in and out): TFLOP/s of each tile x split; * the chooser's pick\n");
        for (size_t i = 0; i < NSHAPES; i++) {
            const shape *s = &shapes[i];
            if (skipped(s))
                continue;
            for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
                pgk_gemm_choice ch;
                pgk_gemm_choose((pgk_gemm_layout)l, PG_BF16, PG_BF16, s->m, s->n, s->k,
                                info.target, (unsigned)info.sm_count, &ch);
                static const uint32_t splits[] = {1, 2, 4, 8, 16};
                sweep_row(&B, s, l, "SWEEP", T_BF16, 2, PGK_GEMM_TILES, splits, 5, 32, &ch);
            }
        }
    }

    if (sweep32 && f32) {
        printf("\nsweep (fp32): TFLOP/s of each gemm_f32_<layout> tile x split; * the "
               "chooser's pick\n");
        for (size_t i = 0; i < NSHAPES; i++) {
            const shape *s = &shapes[i];
            if ((quick && s->big) || s->lora ||
                (quick && s->m * (uint64_t)s->n > (1u << 26)))
                continue;
            for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
                pgk_gemm_choice ch;
                pgk_gemm_f32_choose((pgk_gemm_layout)l, s->m, s->n, s->k, info.arch_target,
                                    (unsigned)info.sm_count, &ch);
                static const uint32_t splits[] = {1, 2, 3, 4, 6, 8};
                const pgk_desc *fd = pgk_find("gemm_f32_forward");
                uint32_t ntiles = fd->knobs[pgk_knob_index(fd, "tile")].max + 1;
                sweep_row(&B, s, l, "SWEEP32", T_F32, 4, ntiles, splits, 6, 8, &ch);
            }
        }
    }

    for (int t = 0; t < T_COUNT; t++) {
        pgrt_buf_destroy(&B.a[t]);
        pgrt_buf_destroy(&B.b[t]);
        pgrt_buf_destroy(&B.c[t]);
    }
    pgrt_buf_destroy(&B.ref);
    pgrt_buf_destroy(&B.ws);
    pgrt_event_destroy(&B.e0);
    pgrt_event_destroy(&B.e1);
    cublas_dl_close(&B.cb);
    pgrt_ctx_destroy(&B.ctx);
    return 0;
}
