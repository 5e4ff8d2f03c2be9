/* SPDX-License-Identifier: MIT */
/*
 * gemm_thin (a GEMM with a side of at most 64: LoRA ranks) on a GPU
 * against a double-precision reference of the same inputs, on fresh
 * random data (seeded; the seed is printed):
 *
 *  - every layout x input type (f16, bf16, f32) x form (outer: R thin;
 *    narrow on Q; narrow on P), the output type cycling over f32, f16 and
 *    bf16, over ragged sizes (1, 15, 17, odd) and thin sides of rank 8,
 *    16 and 64 (and 1, 15, 33); overwrite and accumulate, with and without
 *    bias; operands one element off 16-byte alignment (the scalar paths);
 *    each case run twice, the same bits;
 *  - the outer form on shapes whose thin side is P or Q (it takes any);
 *  - the narrow forms on mma.sync (3: Q thin, 4: P thin; sm_80+) on the
 *    same shapes, types and flags; and forward and backward_x with their
 *    operands aligned and one element off, the same bits (r-major ones
 *    load their fragments' pairs whole when aligned, else element-wise);
 *  - a thin side above the baked bound (chunks of it), every narrow form
 *    (f32 backward_x, whose lanes split J, at bounds 8, 16 and 32);
 *  - pgrt_gemm (the chooser) on the LoRA rank-16 shapes of every layout
 *    and type: gemm_thin where it wins (f32; R thin; below sm_80), the
 *    mma.sync family elsewhere, and right.
 *
 * Each output element must be within tol of the reference, tol = 2^-14 ·
 * Σ|terms| + one unit in the last place of the output type at the
 * reference's magnitude. Outputs are poisoned first (all-ones bytes: NaN
 * in every type): nothing may be left unwritten, and a guard past the end
 * must be left alone.
 *
 * PGRT_GPU_QUICK=1 (under compute-sanitizer): fewer shapes.
 */
#include "gemm_check.h"


enum { FORM_OUTER, FORM_Q, FORM_P, FORM_MMA_Q, FORM_MMA_P };

/* The bits of value f in type t at dst[i]. */
static void put(pg_type t, void *dst, size_t i, float f)
{
    if (t == PG_F32)
        ((float *)dst)[i] = f;
    else
        ((uint16_t *)dst)[i] = to_h(t, f);
}

typedef struct prob {
    pgk_gemm_layout layout;
    pg_type it, ot;
    uint32_t m, n, k, P, Q, R;
    size_t na, nb, pq;
    void *a, *b;     /* the inputs' bits */
    float *bias;     /* Q */
    void *old;       /* P·Q values of the output type: the accumulate start */
} prob;

static const char *const layout_name[] = {"forward", "backward_x", "backward_w"};

static void prob_init(prob *p, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                      uint32_t P, uint32_t Q, uint32_t R)
{
    memset(p, 0, sizeof *p);
    p->layout = layout;
    p->it = it;
    p->ot = ot;
    p->P = P;
    p->Q = Q;
    p->R = R;
    /* (m, n, k) of the layout from (P, Q, R) */
    p->m = layout == PGK_GEMM_BACKWARD_W ? R : P;
    p->n = layout == PGK_GEMM_FORWARD ? Q : layout == PGK_GEMM_BACKWARD_X ? R : P;
    p->k = layout == PGK_GEMM_FORWARD ? R : Q;
    p->na = layout == PGK_GEMM_FORWARD ? (size_t)p->m * p->k : (size_t)p->m * p->n;
    p->nb = layout == PGK_GEMM_BACKWARD_W ? (size_t)p->m * p->k : (size_t)p->n * p->k;
    p->pq = (size_t)P * Q;
    p->a = malloc(p->na * esize(it));
    p->b = malloc(p->nb * esize(it));
    p->bias = malloc((size_t)Q * 4);
    p->old = malloc(p->pq * esize(ot));
    if (!p->a || !p->b || !p->bias || !p->old) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < p->na; i++)
        put(it, p->a, i, rng_unit(r));
    for (size_t i = 0; i < p->nb; i++)
        put(it, p->b, i, rng_unit(r));
    for (uint32_t i = 0; i < Q; i++)
        p->bias[i] = rng_unit(r);
    for (size_t i = 0; i < p->pq; i++)
        put(ot, p->old, i, rng_unit(r) * 4.0f);
}

static void prob_free(prob *p)
{
    free(p->a);
    free(p->b);
    free(p->bias);
    free(p->old);
}

/* p's double reference (gemm_check_out). */
static gemm_ref ref_of(const prob *p)
{
    return (gemm_ref){p->layout, p->n, p->k, p->P, p->Q, p->R, p->it, p->ot,
                      p->a,      p->b, p->old, p->bias, gemm_tol_16};
}

typedef gemm_dev dev;

/* Upload p; offset > 0 places every operand `offset` elements into its
 * buffer (no longer 16-byte aligned). */
static void dev_upload(dev *d, const prob *p, unsigned offset)
{
    gemm_data g = {p->it, p->ot, p->a, p->b, p->na, p->nb, p->pq, p->bias, p->Q};
    gemm_dev_upload(d, &g, offset, 0);
}

/* gemm_thin in `form` (< 0: the pick for the shape), the thin side's
 * bound j when j > 0 (a side above it runs in chunks of it). */
static int launch_thin(dev *d, const prob *p, int form, int j, unsigned flags)
{
    const pgk_desc *desc = pgk_find("gemm_thin");
    pgk_knobs kn = gemm_thin_knobs(p->layout, p->it, p->ot, p->m, p->n, p->k);
    if (form >= 0)
        kn.v[pgk_knob_index(desc, "form")] = (uint32_t)form;
    if (j > 0)
        kn.v[pgk_knob_index(desc, "j")] = (uint32_t)j;
    pgrt_arg args[9] = {pgrt_arg_buf(d->va),   pgrt_arg_buf(d->vb),   pgrt_arg_buf(d->vc),
                        pgrt_arg_buf(d->bias), pgrt_arg_buf(d->vc),   pgrt_arg_u32(p->m),
                        pgrt_arg_u32(p->n),    pgrt_arg_u32(p->k),    pgrt_arg_u32(flags)};
    int rc = pgrt_launch(d->ctx, NULL, "gemm_thin", &kn, args, 9);
    if (rc)
        fprintf(stderr, "gemm_thin: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    return rc;
}

/* launch_thin as a gemm_launch_fn */
typedef struct thin_launch {
    const prob *p;
    int form, j;
    unsigned flags;
} thin_launch;

static int thin_launch_fn(gemm_dev *d, void *arg)
{
    const thin_launch *a = arg;
    return launch_thin(d, a->p, a->form, a->j, a->flags);
}

/* One problem, checked, then run again: the same bits. */
static void run_case_j(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                       uint32_t P, uint32_t Q, uint32_t R, int form, int j, unsigned flags,
                       unsigned offset)
{
    prob p;
    prob_init(&p, r, layout, it, ot, P, Q, R);
    dev d = {.ctx = ctx};
    dev_upload(&d, &p, offset);
    char what[256];
    snprintf(what, sizeof what, "gemm_thin %s %s->%s P=%u Q=%u R=%u form %d j %d%s%s%s",
             layout_name[layout], pg_type_name(it), pg_type_name(ot), P, Q, R, form, j,
             flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "",
             offset ? " unaligned" : "");
    gemm_ref g = ref_of(&p);
    thin_launch a = {&p, form, j, flags};
    gemm_run_check(&d, &g, flags, r, 2, thin_launch_fn, &a, what);
    gemm_dev_free(&d);
    prob_free(&p);
}

static void run_case(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                     uint32_t P, uint32_t Q, uint32_t R, int form, unsigned flags,
                     unsigned offset)
{
    run_case_j(ctx, r, layout, it, ot, P, Q, R, form, -1, flags, offset);
}

/* pgrt_gemm: it must choose gemm_thin on the LoRA shapes (f32 inputs; R
 * the thin side; 16-bit narrow products on its mma.sync forms, or below
 * sm_80 its SIMT forms), with no workspace, and be right. */
static void run_rt(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                   uint32_t P, uint32_t Q, uint32_t R, unsigned flags)
{
    prob p;
    prob_init(&p, r, layout, it, ot, P, Q, R);
    dev d = {.ctx = ctx};
    dev_upload(&d, &p, 0);
    char what[256];
    snprintf(what, sizeof what, "pgrt_gemm %s %s->%s m=%u n=%u k=%u%s%s", layout_name[layout],
             pg_type_name(it), pg_type_name(ot), p.m, p.n, p.k, flags & FLAG_ACC ? " acc" : "",
             flags & FLAG_BIAS ? " bias" : "");
    if (pgrt_gemm_workspace_bytes(ctx, layout, it, ot, p.m, p.n, p.k) != 0)
        TEST_FAIL_("%s: a workspace asked for", what);
    gemm_ref g = ref_of(&p);
    gemm_rt t = {layout, p.m, p.n, p.k, flags, 0, what, {0}, 0};
    gemm_run_check(&d, &g, flags, r, 1, gemm_rt_launch, &t, what);
    test_checks_++;
    if (t.launches && strcmp(t.ch.desc->name, "gemm_thin") != 0)
        TEST_FAIL_("%s: chose %s, not gemm_thin", what, t.ch.desc->name);
    gemm_dev_free(&d);
    prob_free(&p);
}

/* One problem in an mma form twice, its operands 16-byte aligned and one
 * element off: r-major operands at 4-byte rows with R even load their
 * fragments' pairs whole, the unaligned ones element by element; the two
 * must give the same bits (same fragments, same mma's, same sums), and
 * be right. */
static void run_paths(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                      uint32_t P, uint32_t Q, uint32_t R, int form, unsigned flags)
{
    prob p;
    prob_init(&p, r, layout, it, ot, P, Q, R);
    char what[256];
    snprintf(what, sizeof what, "gemm_thin %s %s->%s P=%u Q=%u R=%u form %d%s%s, both paths",
             layout_name[layout], pg_type_name(it), pg_type_name(ot), P, Q, R, form,
             flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "");
    size_t bytes = (p.pq + GEMM_GUARD) * esize(ot);
    void *first = malloc(bytes);
    for (unsigned off = 0; off < 2 && first; off++) {
        dev d = {.ctx = ctx};
        dev_upload(&d, &p, off);
        gemm_dev_reset_c(&d, p.old, p.pq, flags & FLAG_ACC);
        if (launch_thin(&d, &p, form, -1, flags) || gemm_dev_download(&d, p.pq)) {
            TEST_FAIL_("%s: launch failed", what);
            gemm_dev_free(&d);
            break;
        }
        if (off == 0) {
            gemm_ref g = ref_of(&p);
            gemm_check_out(&g, d.host_c, flags, r, what);
            memcpy(first, d.host_c, bytes);
        } else {
            test_checks_++;
            if (memcmp(first, d.host_c, bytes) != 0)
                TEST_FAIL_("%s: the element-wise loads give other bits", what);
        }
        gemm_dev_free(&d);
    }
    free(first);
    prob_free(&p);
}

typedef struct pqr3 {
    uint32_t P, Q, R;
} pqr3;

int main(void)
{
    bool quick = gpu_quick();
    pgrt_device_info info;
    pgrt_ctx *ctx = gemm_test_open(&info);
    if (pg_target_sm(info.target) < 70) {
        fprintf(stderr, "skip: gemm_thin needs sm_70 (this is %s)\n",
                pg_target_name(info.target));
        pgrt_ctx_destroy(&ctx);
        return GPU_SKIP;
    }
    rng r = {test_seed("test_gemm_thin")};
    static const pg_type ins[] = {PG_F16, PG_BF16, PG_F32};
    static const pg_type outs[] = {PG_F32, PG_F16, PG_BF16};
    /* (P, Q, R) with the form's thin side: ranks 8, 16, 64, and ragged */
    static const pqr3 outer[] = {{130, 200, 16}, {1, 1, 1},     {67, 257, 8},
                                 {300, 129, 64}, {17, 15, 15},  {33, 64, 33}};
    static const pqr3 narrow_q[] = {{1000, 16, 700}, {33, 15, 97}, {257, 64, 129},
                                    {65, 1, 300},    {130, 8, 1537}, {15, 33, 67}};
    static const pqr3 narrow_p[] = {{16, 1000, 700}, {17, 130, 333}, {8, 67, 45},
                                    {64, 200, 100},  {1, 77, 1025},  {47, 3, 48}};
    const pqr3 *sets[3] = {outer, narrow_q, narrow_p};
    size_t nset = quick ? 3 : 6;
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        for (unsigned i = 0; i < 3; i++)
            for (unsigned f = 0; f < 3; f++)
                for (size_t s = 0; s < nset; s++) {
                    const pqr3 *x = &sets[f][s];
                    unsigned flags = (unsigned)(s + l + i) % 4;
                    unsigned off = (s + f + l) % 3 == 2 ? 1 : 0;
                    run_case(ctx, &r, (pgk_gemm_layout)l, ins[i], outs[(s + i + l) % 3], x->P,
                             x->Q, x->R, -1, flags, off);
                }
    fprintf(stderr, "forms: done\n");
    /* the outer form on narrow shapes: it takes any */
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        run_case(ctx, &r, (pgk_gemm_layout)l, ins[l], outs[(l + 1) % 3], 70, 16, 90, FORM_OUTER,
                 FLAG_ACC | FLAG_BIAS, l == 1);
    fprintf(stderr, "outer on narrow shapes: done\n");
    /* the narrow forms on mma.sync (sm_80+, 16-bit inputs; f32 inputs run
     * the SIMT forms) */
    if (pg_target_sm(info.target) >= 80)
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
            for (unsigned i = 0; i < 3; i++)
                for (unsigned f = 1; f < 3; f++)
                    for (size_t s = 0; s < nset; s++) {
                        const pqr3 *x = &sets[f][s];
                        /* the mma forms take Q (3) or P (4) as the thin side */
                        int form = x->Q <= x->P ? FORM_MMA_Q : FORM_MMA_P;
                        unsigned flags = (unsigned)(s + l + i + 1) % 4;
                        unsigned off = (s + f + l) % 3 == 1 ? 1 : 0;
                        run_case(ctx, &r, (pgk_gemm_layout)l, ins[i], outs[(s + i + l + 1) % 3],
                                 x->P, x->Q, x->R, form, flags, off);
                    }
    fprintf(stderr, "mma forms: done\n");
    /* the mma forms' two ways to load an r-major operand (forward: both;
     * backward_x: dY), the same bits: LoRA-like and ragged shapes, the
     * thin bounds 8 to 64, R even but not a multiple of 16, R = 2 */
    static const pqr3 paths[] = {{100, 16, 1536}, {37, 33, 250}, {130, 30, 98},
                                 {17, 8, 2},      {300, 64, 16}, {16, 16, 1534}};
    if (pg_target_sm(info.target) >= 80)
        for (unsigned l = 0; l < 2; l++)
            for (unsigned f = 0; f < 2; f++)
                for (size_t s = 0; s < (quick ? 2u : 6u); s++) {
                    const pqr3 *x = &paths[s];
                    pg_type it = ins[(s + l + f) % 2], ot = outs[(s + f) % 3];
                    unsigned flags = (unsigned)(s + l + 2 * f) % 4;
                    if (f == 0)
                        run_paths(ctx, &r, (pgk_gemm_layout)l, it, ot, x->P, x->Q, x->R,
                                  FORM_MMA_Q, flags);
                    else
                        run_paths(ctx, &r, (pgk_gemm_layout)l, it, ot, x->Q, x->P, x->R,
                                  FORM_MMA_P, flags);
                }
    fprintf(stderr, "mma forms, pairs whole and element-wise: done\n");
    /* a thin side above the baked bound j = 8: chunks of 8 (33 = 4 x 8 + 1) */
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++) {
        int mma = pg_target_sm(info.target) >= 80;
        run_case_j(ctx, &r, (pgk_gemm_layout)l, ins[l], outs[l], 150, 33, 260, FORM_Q, 8,
                   FLAG_ACC | FLAG_BIAS, 0);
        run_case_j(ctx, &r, (pgk_gemm_layout)l, ins[(l + 1) % 3], outs[(l + 2) % 3], 33, 150,
                   260, FORM_P, 8, FLAG_BIAS, 1);
        if (mma) {
            run_case_j(ctx, &r, (pgk_gemm_layout)l, ins[l % 2], outs[(l + 1) % 3], 150, 33, 260,
                       FORM_MMA_Q, 8, FLAG_ACC, l == 2);
            run_case_j(ctx, &r, (pgk_gemm_layout)l, ins[(l + 1) % 2], outs[l], 33, 150, 260,
                       FORM_MMA_P, 8, FLAG_ACC | FLAG_BIAS, 0);
        }
    }
    /* f32 backward_x splits J over lanes (S's rows of j): chunks of each
     * baked bound's lane split, ragged rows, r's and j's, one unaligned */
    static const int js_bounds[] = {8, 16, 32};
    for (unsigned b = 0; b < 3; b++)
        run_case_j(ctx, &r, PGK_GEMM_BACKWARD_X, PG_F32, outs[b], 150, 33, 261, FORM_Q,
                   js_bounds[b], b == 1 ? FLAG_ACC : FLAG_BIAS, b == 2);
    fprintf(stderr, "chunks of j: done\n");
    /* the chooser on the LoRA rank-16 shapes: (2048, 16, 1536), (2048, 1536, 16) */
    static const uint32_t lora[2][3] = {{2048, 16, 1536}, {2048, 1536, 16}};
    for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
        for (unsigned s = 0; s < 2; s++)
            for (unsigned i = 0; i < (quick ? 1u : 3u); i++) {
                uint32_t m = lora[s][0], n = lora[s][1], k = lora[s][2];
                uint32_t P = l == PGK_GEMM_BACKWARD_W ? n : m;
                uint32_t Q = l == PGK_GEMM_FORWARD ? n : k;
                uint32_t R = l == PGK_GEMM_FORWARD ? k : l == PGK_GEMM_BACKWARD_X ? n : m;
                pg_type it = ins[(i + s) % 3];
                /* the f32 GEMMs take no bias and accumulate only forward */
                unsigned flags = it == PG_F32 ? (l == PGK_GEMM_FORWARD ? FLAG_ACC : 0)
                                              : (l + s) % 2 ? FLAG_ACC : FLAG_BIAS;
                run_rt(ctx, &r, (pgk_gemm_layout)l, it, it, P, Q, R, flags);
            }
    fprintf(stderr, "pgrt_gemm: done\n");
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
