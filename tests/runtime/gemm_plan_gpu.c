/* SPDX-License-Identifier: MIT */
/*
 * pgrt_gemm_plan on a GPU against a double-precision reference on the
 * rounded inputs (fresh random data every case):
 *
 *   lora    gemm_sm90's LoRA extension, C (+)= A·B + A2·B2 (+ bias), forward
 *           and dX, bf16 in, f32 and bf16 out, accumulate and bias on and
 *           off, k2 8, 16 and 48, a2 a 16-column slice of a [m, 48] matrix
 *           (lda2 48, as the model stores the q, k, v down projections), the
 *           model's shapes and a ragged one. Each case also runs the same
 *           spec with k2 = 0 (kind WGMMA: the chooser could take another
 *           family for it), which must match A·B alone, and its difference
 *           from the k2 run must be the reference's A2·B2: the extension
 *           adds that term and nothing else.
 *   thin    kind PGRT_GEMM_WGMMA on the LoRA rank shapes (16, 48 wide; the
 *           down projection x·Aᵀ, dA and dB), bf16 out.
 *   seed    kind PGRT_GEMM_SEED, f32, every layout, accumulate where the
 *           seed has it.
 *   chosen  kind PGRT_GEMM_CHOSEN, f32 and bf16 in, every layout (a long
 *           reduction on few tiles among the shapes), with a
 *           workspace of pgrt_gemm_plan_workspace() bytes (poisoned: split
 *           partials are written before they are read) and with none.
 *
 * Padding is NaN: the pitched rows' tails, a2's neighbours in its wide
 * matrix; C's row tails must be left as they were. Every case launches
 * its plan twice and compares the two results bit for bit. Tolerance:
 * 1e-5 of Σ|terms| (bias and the old C included) + 1e-6, plus the output
 * rounding for bf16 (2^-8 of the value on gemm_sm90; 2^-7, one unit in
 * the last place, on the other families as tests/kernels/gemm_thin.c has it).
 *
 * Exit 77 without a driver or a device; the lora and thin groups are
 * skipped, with the reason printed, unless the device's arch target is
 * sm_90a. PGRT_GPU_QUICK=1 or --quick: the 2048-row shapes mostly go.
 *
 * Usage: test_gemm_plan_gpu [--quick]
 */
#include "kernels/gemm_util.h"
#include "test.h"

typedef enum group { G_LORA, G_THIN, G_SEED, G_CHOSEN, G_COUNT } group;
static const char *const group_names[G_COUNT] = {"lora", "thin", "seed", "chosen"};
static const char *const layout_names[] = {"fwd", "dx", "dw"};

typedef struct pcase {
    group grp;
    pgk_gemm_layout layout;
    pgrt_gemm_kind kind;
    pg_type in, out;
    uint32_t m, n, k, k2;
    bool acc, bias;
    uint32_t pad; /* extra elements on every pitch (gemm_sm90 takes pitches) */
    int part;     /* >= 0: a2 is columns [16 part, 16 part + 16) of a [m, 48] matrix */
    bool ws;      /* chosen: launch with the plan's workspace */
} pcase;

/* ---------------------------------------------------------------- operands */

/* A stored matrix: rows x cols at pitch ld, (0, 0) at element off of an
 * allocation of count; v holds the values as f32 (the rounded inputs),
 * NaN everywhere outside the matrix. */
typedef struct opnd {
    uint32_t rows, cols, ld;
    size_t off, count;
    float *v;
    pgrt_buf *buf;
} opnd;

static void opnd_make(pgrt_ctx *ctx, rng *r, pg_type t, opnd *o, uint32_t rows, uint32_t cols,
                      uint32_t ld, size_t off, size_t count)
{
    *o = (opnd){rows, cols, ld, off, count, malloc(count * 4), NULL};
    for (size_t i = 0; i < count; i++)
        o->v[i] = NAN;
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t j = 0; j < cols; j++) {
            float f = rng_unit(r);
            o->v[off + (size_t)i * ld + j] = t == PG_F32 ? f : bf16_to_f32(f32_to_bf16(f));
        }
    GPU_CHECK(pgrt_buf_alloc(ctx, t, count, &o->buf));
    if (t == PG_F32) {
        GPU_CHECK(pgrt_buf_upload(o->buf, 0, o->v, count));
        return;
    }
    uint16_t *h = malloc(count * 2);
    for (size_t i = 0; i < count; i++)
        h[i] = f32_to_bf16(o->v[i]); /* NaN stays NaN */
    GPU_CHECK(pgrt_buf_upload(o->buf, 0, h, count));
    free(h);
}

/* A dense matrix of rows x cols at pitch ld (0: cols). */
static void opnd_dense(pgrt_ctx *ctx, rng *r, pg_type t, opnd *o, uint32_t rows, uint32_t cols,
                       uint32_t ld)
{
    ld = ld ? ld : cols;
    opnd_make(ctx, r, t, o, rows, cols, ld, 0, (size_t)rows * ld);
}

static pgrt_devptr opnd_ptr(const opnd *o)
{
    return pgrt_buf_ptr(o->buf) + o->off * pgrt_buf_bytes(o->buf) / pgrt_buf_count(o->buf);
}

static void opnd_free(opnd *o)
{
    free(o->v);
    pgrt_buf_destroy(&o->buf);
}

/* The operand as X(i, r) of a product over r, R-contiguous: o(i, r), or
 * o(r, i) when it is stored transposed (an M- or N-major operand). */
static float *gather(const opnd *o, bool trans, uint32_t outer, uint32_t R)
{
    float *d = malloc((size_t)outer * R * 4 + 4);
    for (uint32_t i = 0; i < outer; i++)
        for (uint32_t x = 0; x < R; x++)
            d[(size_t)i * R + x] = trans ? o->v[o->off + (size_t)x * o->ld + i]
                                         : o->v[o->off + (size_t)i * o->ld + x];
    return d;
}

static double outv(pg_type t, const void *c, size_t i)
{
    return t == PG_F32 ? ((const float *)c)[i] : bf16_to_f32(((const uint16_t *)c)[i]);
}

/* ---------------------------------------------------------------- the reference check */

typedef struct chk {
    const pcase *c;
    uint32_t P, Q, R, R2, ldc;
    size_t osz;
    double round; /* the output's rounding, relative */
    float *At, *Bt, *A2t, *B2t; /* gather()'s, freed by the caller */
    const float *bias;
    const void *c0, *c1, *cz; /* C before, after the plan, after its k2 = 0 twin (or NULL) */
    /* per row: failures, the worst error in tolerances, the first failure */
    int *bad;
    double *worst;
    uint32_t *fq;
    double *fgot, *fwant, *ftol;
    char *fwhat;
} chk;

static double tol_of(const chk *k, double s, double sa)
{
    return 1e-5 * sa + 1e-6 + fabs(s) * k->round;
}

static void note(const chk *k, uint32_t p, uint32_t q, double err, double tol, double got,
                 double want, char what)
{
    double ratio = err / tol;
    if (ratio > k->worst[p] || ratio != ratio)
        k->worst[p] = ratio != ratio ? INFINITY : ratio;
    if (err <= tol)
        return;
    if (k->bad[p]++ == 0) {
        k->fq[p] = q;
        k->fgot[p] = got;
        k->fwant[p] = want;
        k->ftol[p] = tol;
        k->fwhat[p] = what;
    }
}

static void check_row(size_t pi, void *arg)
{
    const chk *k = arg;
    uint32_t p = (uint32_t)pi;
    const pcase *c = k->c;
    pg_type ot = c->out;
    for (uint32_t q = 0; q < k->ldc; q++) {
        size_t ci = (size_t)p * k->ldc + q;
        double got = outv(ot, k->c1, ci), old = outv(ot, k->c0, ci);
        if (q >= k->Q) {
            /* C's row tail: left alone, bit for bit */
            bool same = memcmp((const char *)k->c1 + ci * k->osz,
                               (const char *)k->c0 + ci * k->osz, k->osz) == 0;
            if (k->cz)
                same = same && memcmp((const char *)k->cz + ci * k->osz,
                                      (const char *)k->c0 + ci * k->osz, k->osz) == 0;
            note(k, p, q, same ? 0 : 1, 0.5, got, old, 'p');
            continue;
        }
        const float *a = k->At + (size_t)p * k->R, *b = k->Bt + (size_t)q * k->R;
        double sm = 0, sam = 0, se = 0, sae = 0;
        for (uint32_t x = 0; x < k->R; x++) {
            double t = (double)a[x] * b[x];
            sm += t;
            sam += fabs(t);
        }
        if (k->R2) {
            const float *a2 = k->A2t + (size_t)p * k->R2, *b2 = k->B2t + (size_t)q * k->R2;
            for (uint32_t x = 0; x < k->R2; x++) {
                double t = (double)a2[x] * b2[x];
                se += t;
                sae += fabs(t);
            }
        }
        double extra = 0, aextra = 0;
        if (c->bias) {
            extra += k->bias[q];
            aextra += fabs(k->bias[q]);
        }
        if (c->acc) {
            extra += old;
            aextra += fabs(old);
        }
        double s1 = sm + se + extra, t1 = tol_of(k, s1, sam + sae + aextra);
        note(k, p, q, fabs(got - s1), t1, got, s1, 'c');
        if (k->cz) {
            /* k2 = 0: A·B alone; and the k2 run less it: A2·B2 exactly */
            double gz = outv(ot, k->cz, ci), s0 = sm + extra, t0 = tol_of(k, s0, sam + aextra);
            note(k, p, q, fabs(gz - s0), t0, gz, s0, '0');
            note(k, p, q, fabs((got - gz) - se), t1 + t0, got - gz, se, 'x');
        }
    }
}

/* ---------------------------------------------------------------- one case */

typedef struct result {
    int bad;
    double worst;
    bool skipped;
} result;

static int launch_into(const pgrt_gemm_plan *p, pgrt_ctx *ctx, pgrt_buf *bc, const void *c0,
                       size_t nc, pgrt_devptr bias, pgrt_devptr ws, void *dst)
{
    GPU_CHECK(pgrt_buf_upload(bc, 0, c0, nc));
    int rc = pgrt_gemm_plan_launch(p, NULL, pgrt_buf_ptr(bc), bias, ws);
    if (rc)
        return rc;
    GPU_CHECK(pgrt_ctx_sync(ctx));
    GPU_CHECK(pgrt_buf_download(bc, 0, dst, nc));
    return 0;
}

static result run_case(pgrt_ctx *ctx, const pcase *c, rng *r)
{
    result res = {0, 0, false};
    pgk_gemm_layout L = c->layout;
    bool fwd = L == PGK_GEMM_FORWARD, dw = L == PGK_GEMM_BACKWARD_W;
    uint32_t m = c->m, n = c->n, k = c->k, k2 = c->k2, pad = c->pad;
    uint32_t P = dw ? n : m, Q = fwd ? n : k, R = fwd ? k : dw ? m : n;
    uint32_t acols = fwd ? k : n, brows = dw ? m : n, ldc = Q + pad;
    opnd a, b, a2 = {0}, b2 = {0};
    opnd_dense(ctx, r, c->in, &a, m, acols, pad ? acols + pad : 0);
    opnd_dense(ctx, r, c->in, &b, brows, k, pad ? k + pad : 0);
    uint32_t lda2 = 0, ldb2 = 0;
    if (k2) {
        if (c->part >= 0) {
            lda2 = 48;
            opnd_make(ctx, r, c->in, &a2, m, k2, 48, 16u * (uint32_t)c->part, (size_t)m * 48);
        } else {
            lda2 = pad ? k2 + pad : 0;
            opnd_dense(ctx, r, c->in, &a2, m, k2, lda2);
        }
        /* forward b2 = B [n, k2], dX b2 = A [k2, k] */
        uint32_t b2rows = fwd ? n : k2, b2cols = fwd ? k2 : k;
        ldb2 = pad ? b2cols + pad : 0;
        opnd_dense(ctx, r, c->in, &b2, b2rows, b2cols, ldb2);
    }
    float *bias = malloc((size_t)Q * 4);
    for (uint32_t i = 0; i < Q; i++)
        bias[i] = rng_unit(r);
    size_t nc = (size_t)P * ldc, osz = c->out == PG_F32 ? 4 : 2;
    void *c0 = malloc(nc * osz), *c1 = malloc(nc * osz), *c2 = malloc(nc * osz);
    void *cz = k2 ? malloc(nc * osz) : NULL;
    for (size_t i = 0; i < nc; i++) {
        float v = (i % ldc) < Q ? rng_unit(r) : 12345.0f; /* the tail must stay */
        if (osz == 4)
            ((float *)c0)[i] = v;
        else
            ((uint16_t *)c0)[i] = f32_to_bf16(v);
    }
    pgrt_buf *bc = NULL, *bb = NULL, *bws = NULL;
    GPU_CHECK(pgrt_buf_alloc(ctx, c->out, nc, &bc));
    if (c->bias) {
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, Q, &bb));
        GPU_CHECK(pgrt_buf_upload(bb, 0, bias, Q));
    }
    pgrt_devptr biasp = bb ? pgrt_buf_ptr(bb) : 0;

    pgrt_gemm_spec spec = {.layout = L, .kind = c->kind, .in_type = c->in, .out_type = c->out,
                           .m = m, .n = n, .k = k, .a = opnd_ptr(&a), .b = opnd_ptr(&b),
                           .lda = pad ? a.ld : 0, .ldb = pad ? b.ld : 0, .ldc = pad ? ldc : 0,
                           .accumulate = c->acc, .bias = c->bias,
                           .a2 = k2 ? opnd_ptr(&a2) : 0, .b2 = k2 ? opnd_ptr(&b2) : 0,
                           .k2 = k2, .lda2 = lda2, .ldb2 = ldb2};
    pgrt_gemm_plan *plan = NULL, *plan0 = NULL;
    const char *kname = "-";
    uint32_t split = 1;
    uint64_t wsb = 0;
    int rc = pgrt_gemm_plan_create(ctx, &spec, &plan);
    if (rc) {
        fprintf(stderr, "  pgrt_gemm_plan_create: %s: %s\n", pgrt_err_name(rc),
                pgrt_last_message());
        res.bad = 1;
        goto report;
    }
    kname = pgrt_gemm_plan_choice(plan)->desc->name;
    split = pgrt_gemm_plan_choice(plan)->split;
    if ((c->grp == G_LORA || c->grp == G_THIN) && strcmp(kname, "gemm_sm90") != 0) {
        fprintf(stderr, "  runs %s, not gemm_sm90\n", kname);
        res.bad++;
    }
    wsb = pgrt_gemm_plan_workspace(plan);
    /* a split gemm_sm90 (no reduce kernel) runs only with its workspace */
    if (wsb && (c->ws || !pgrt_gemm_plan_choice(plan)->reduce)) {
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, (size_t)(wsb + 3) / 4, &bws));
        GPU_CHECK(pgrt_buf_memset(bws, 0xff)); /* NaN: partials are written first */
    }
    pgrt_devptr wsp = bws ? pgrt_buf_ptr(bws) : 0;
    for (int run = 0; run < 2 && !rc; run++)
        rc = launch_into(plan, ctx, bc, c0, nc, biasp, wsp, run ? c2 : c1);
    if (!rc && k2) {
        pgrt_gemm_spec s0 = spec;
        s0.k2 = 0;
        s0.kind = PGRT_GEMM_WGMMA;
        s0.no_split = true; /* launched without a workspace */
        if (!(rc = pgrt_gemm_plan_create(ctx, &s0, &plan0)))
            rc = launch_into(plan0, ctx, bc, c0, nc, biasp, 0, cz);
    }
    if (rc) {
        fprintf(stderr, "  %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        res.bad = 1;
        goto report;
    }
    if (memcmp(c1, c2, nc * osz)) {
        fprintf(stderr, "  two launches differ\n");
        res.bad++;
    }

    /* the reference: A(p, r), B(q, r) (and A2, B2) as the layout reads them */
    uint32_t R2 = k2;
    chk ck = {.c = c, .P = P, .Q = Q, .R = R, .R2 = R2, .ldc = ldc, .osz = osz,
              .round = c->out == PG_F32 ? 0 : strcmp(kname, "gemm_sm90") == 0 ? 0x1p-8 : 0x1p-7,
              .At = gather(&a, dw, P, R), .Bt = gather(&b, !fwd, Q, R),
              .A2t = k2 ? gather(&a2, false, P, R2) : NULL,
              .B2t = k2 ? gather(&b2, !fwd, Q, R2) : NULL, .bias = bias, .c0 = c0, .c1 = c1,
              .cz = cz, .bad = calloc(P, sizeof(int)), .worst = calloc(P, sizeof(double)),
              .fq = calloc(P, 4), .fgot = calloc(P, 8), .fwant = calloc(P, 8),
              .ftol = calloc(P, 8), .fwhat = calloc(P, 1)};
    parallel_for(P, check_row, &ck);
    int shown = 0;
    for (uint32_t p = 0; p < P; p++) {
        if (ck.worst[p] > res.worst)
            res.worst = ck.worst[p];
        if (!ck.bad[p])
            continue;
        res.bad += ck.bad[p];
        if (shown++ < 8) {
            const char *what = ck.fwhat[p] == 'p'   ? "C's row tail written"
                               : ck.fwhat[p] == '0' ? "k2 = 0 twin"
                               : ck.fwhat[p] == 'x' ? "k2 run less its k2 = 0 twin vs A2*B2"
                                                    : "C";
            fprintf(stderr, "  (%u,%u) %s: got %.9g want %.9g (tol %.3g); %d bad in the row\n",
                    p, ck.fq[p], what, ck.fgot[p], ck.fwant[p], ck.ftol[p], ck.bad[p]);
        }
    }
    free(ck.At);
    free(ck.Bt);
    free(ck.A2t);
    free(ck.B2t);
    free(ck.bad);
    free(ck.worst);
    free(ck.fq);
    free(ck.fgot);
    free(ck.fwant);
    free(ck.ftol);
    free(ck.fwhat);

report:;
    char knobs[96];
    snprintf(knobs, sizeof knobs, "%s%s%s", c->acc ? " acc" : "", c->bias ? " bias" : "",
             c->grp == G_CHOSEN ? (c->ws ? " ws" : " ws=0") : "");
    char ext[64] = "";
    if (k2 && c->part >= 0)
        snprintf(ext, sizeof ext, " k2=%u a2=[:,%d:%d] of 48", k2, 16 * c->part,
                 16 * c->part + 16);
    else if (k2)
        snprintf(ext, sizeof ext, " k2=%u", k2);
    fprintf(stderr, "%-6s %-3s %s->%-4s m=%-4u n=%-4u k=%-4u%s%s pad=%u: %s split=%u ws=%llu: "
            "%s (worst %.2f of tol)\n",
            group_names[c->grp], layout_names[L], pg_type_name(c->in), pg_type_name(c->out), m,
            n, k, ext, knobs, pad, kname, split, (unsigned long long)wsb,
            res.bad ? "FAIL" : "ok", res.worst);
    pgrt_gemm_plan_destroy(&plan);
    pgrt_gemm_plan_destroy(&plan0);
    opnd_free(&a);
    opnd_free(&b);
    if (k2) {
        opnd_free(&a2);
        opnd_free(&b2);
    }
    pgrt_buf_destroy(&bc);
    pgrt_buf_destroy(&bb);
    pgrt_buf_destroy(&bws);
    free(bias);
    free(c0);
    free(c1);
    free(c2);
    free(cz);
    return res;
}

/* ---------------------------------------------------------------- the cases */

#define MAX_CASES 160

static size_t lora_cases(pcase *cs, bool quick)
{
    size_t nc = 0;
    static const uint32_t k2s[] = {8, 16, 48};
    /* ragged: every type, epilogue and k2 */
    for (int l = 0; l < 2; l++)
        for (int ki = 0; ki < 3; ki++)
            for (int ob = 0; ob < 2; ob++)
                for (int acc = 0; acc < 2; acc++)
                    for (int bias = 0; bias < (l == 0 ? 2 : 1); bias++) {
                        size_t i = nc;
                        cs[nc++] = (pcase){G_LORA, (pgk_gemm_layout)l,
                                           i % 3 ? PGRT_GEMM_CHOSEN : PGRT_GEMM_WGMMA, PG_BF16,
                                           ob ? PG_BF16 : PG_F32, 300, 200, 136, k2s[ki],
                                           acc, bias, i % 2 ? 8 : 0, -1, false};
                    }
    /* a2 a slice of the model's [m, 48] (the q, k, v down projections) */
    for (int l = 0; l < 2; l++)
        for (int part = 0; part < 3; part++)
            cs[nc++] = (pcase){G_LORA, (pgk_gemm_layout)l, PGRT_GEMM_CHOSEN, PG_BF16,
                               part == 1 ? PG_BF16 : PG_F32, 300, 200, 136, 16, part == 1,
                               l == 0 && part == 2, part == 2 ? 8 : 0, part, false};
    /* the model's shapes: q/o (1536), v (256), the MLP (8960) */
    static const uint32_t shapes[][3] = {{2048, 1536, 1536}, {2048, 256, 1536}, {2048, 8960, 1536}};
    for (int l = 0; l < 2; l++)
        for (int s = 0; s < 3; s++) {
            if (quick && s != 1)
                continue;
            cs[nc++] = (pcase){G_LORA, (pgk_gemm_layout)l, PGRT_GEMM_CHOSEN, PG_BF16,
                               (s + l) % 2 ? PG_BF16 : PG_F32, shapes[s][0], shapes[s][1],
                               shapes[s][2], 16, s == 2, l == 0 && s != 1, s == 1 ? 8 : 0, s,
                               false};
        }
    return nc;
}

static size_t thin_cases(pcase *cs, bool quick)
{
    /* x·Aᵀ (n = rank), dA = (dy·B)ᵀ·x (P = rank), dB = dyᵀ·(x·Aᵀ) (Q = rank) */
    static const struct {
        pgk_gemm_layout l;
        uint32_t m, n, k, pad;
    } sh[] = {
        {PGK_GEMM_FORWARD, 2048, 16, 1536, 0},    {PGK_GEMM_FORWARD, 2048, 48, 1536, 8},
        {PGK_GEMM_FORWARD, 300, 16, 136, 8},      {PGK_GEMM_BACKWARD_W, 2048, 16, 1536, 0},
        {PGK_GEMM_BACKWARD_W, 2048, 1536, 16, 0}, {PGK_GEMM_BACKWARD_W, 2048, 256, 48, 8},
        {PGK_GEMM_BACKWARD_W, 300, 200, 16, 8},
    };
    size_t nc = 0;
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        if (quick && sh[i].m > 300 && i % 3)
            continue;
        cs[nc++] = (pcase){G_THIN, sh[i].l, PGRT_GEMM_WGMMA, PG_BF16, PG_BF16, sh[i].m, sh[i].n,
                           sh[i].k, 0, i % 2 == 1, false, sh[i].pad, -1, false};
    }
    return nc;
}

static size_t seed_cases(pcase *cs, bool quick)
{
    static const uint32_t shapes[][3] = {{300, 200, 136}, {33, 17, 65}, {2048, 256, 1536}};
    size_t nc = 0;
    for (int s = 0; s < 3; s++) {
        if (quick && s == 2)
            continue;
        for (int l = 0; l < 3; l++)
            for (int acc = 0; acc < (l == 2 ? 1 : 2); acc++)
                cs[nc++] = (pcase){G_SEED, (pgk_gemm_layout)l, PGRT_GEMM_SEED, PG_F32, PG_F32,
                                   shapes[s][0], shapes[s][1], shapes[s][2], 0, acc, false, 0,
                                   -1, false};
    }
    return nc;
}

static size_t chosen_cases(pcase *cs, bool quick)
{
    /* ragged, a LoRA rank side (the thin, split-K shapes), a v projection,
     * and a long reduction on few tiles (its dX: gemm_sm90's width and
     * split chosen together, as for the LM head's) */
    static const uint32_t shapes[][3] = {
        {300, 200, 136}, {2048, 16, 1536}, {2048, 256, 1536}, {130, 17000, 200}};
    size_t nc = 0;
    for (int bf = 0; bf < 2; bf++)
        for (int s = 0; s < 4; s++) {
            if (quick && s == 2)
                continue;
            for (int l = 0; l < 3; l++)
                for (int ws = 0; ws < 2; ws++) {
                    size_t i = nc;
                    pg_type in = bf ? PG_BF16 : PG_F32, out = bf && (s + l) % 2 ? PG_BF16 : PG_F32;
                    cs[nc++] = (pcase){G_CHOSEN, (pgk_gemm_layout)l, PGRT_GEMM_CHOSEN, in, out,
                                       shapes[s][0], shapes[s][1], shapes[s][2], 0,
                                       (i / 2) % 2 == 0, l == 0 && i % 3 != 0, 0, -1, ws == 1};
                }
        }
    return nc;
}

int main(int argc, char **argv)
{
    bool quick = gpu_quick() || (argc > 1 && strcmp(argv[1], "--quick") == 0);
    pgrt_ctx *ctx = gpu_open();
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    bool wg = info.arch_target == PG_SM_90A;
    rng r = {test_seed("test_gemm_plan_gpu")};

    static pcase cs[MAX_CASES];
    size_t nc = 0;
    nc += lora_cases(cs + nc, quick);
    nc += thin_cases(cs + nc, quick);
    nc += seed_cases(cs + nc, quick);
    nc += chosen_cases(cs + nc, quick);

    struct {
        int cases, failed, skipped;
        double worst;
    } sum[G_COUNT] = {{0}};
    if (!wg)
        fprintf(stderr, "skip: the lora and thin groups: gemm_sm90 needs a compute capability "
                        "9.0 device (sm_90a); this one's arch target is %s\n",
                pg_target_name(info.arch_target));
    for (size_t i = 0; i < nc; i++) {
        group g = cs[i].grp;
        sum[g].cases++;
        if (!wg && (g == G_LORA || g == G_THIN)) {
            sum[g].skipped++;
            continue;
        }
        result res = run_case(ctx, &cs[i], &r);
        sum[g].failed += res.bad != 0;
        if (res.worst > sum[g].worst)
            sum[g].worst = res.worst;
    }

    int failed = 0;
    fprintf(stderr, "\n%-8s %6s %6s %7s %12s\n", "group", "cases", "failed", "skipped",
            "worst/tol");
    for (int g = 0; g < G_COUNT; g++) {
        fprintf(stderr, "%-8s %6d %6d %7d %12.3f\n", group_names[g], sum[g].cases,
                sum[g].failed, sum[g].skipped, sum[g].worst);
        failed += sum[g].failed;
    }
    REQUIRE_INT_EQ(failed, 0);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
