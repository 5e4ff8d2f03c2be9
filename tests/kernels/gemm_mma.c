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
#include "gemm_check.h"


static bool quick;

/* ---------------------------------------------------------------- 16-bit values */

/* ---------------------------------------------------------------- one problem */

typedef struct prob {
    pgk_gemm_layout layout;
    pg_type it, ot;
    uint32_t m, n, k, P, Q, R;
    size_t na, nb, pq; /* pq: P·Q outputs */
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
    p->pq = (size_t)p->P * p->Q;
    p->a = malloc(p->na * 2);
    p->b = malloc(p->nb * 2);
    p->af = malloc(p->na * 4);
    p->bf = malloc(p->nb * 4);
    p->bias = malloc((size_t)p->Q * 4);
    p->old = malloc(p->pq * esize(ot));
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
    size_t pq = p->pq;
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

/* p's double reference (gemm_check_out): the inputs' values, widened. */
static gemm_ref ref_of(const prob *p)
{
    return (gemm_ref){p->layout, p->n, p->k, p->P, p->Q, p->R, PG_F32, p->ot,
                      p->af,     p->bf, p->old, p->bias, gemm_tol_16};
}

/* ---------------------------------------------------------------- device side */

typedef gemm_dev dev;

/* Upload p; offset > 0 places every operand `offset` elements into its
 * buffer (no longer 16-byte aligned). */
static void dev_upload(dev *d, const prob *p, unsigned offset, uint64_t ws_bytes)
{
    gemm_data g = {p->it, p->ot, p->a, p->b, p->na, p->nb, p->pq, p->bias, p->Q};
    gemm_dev_upload(d, &g, offset, ws_bytes);
}

/* The mma kernel with this tile and split (then the reduce when split > 1),
 * or gemm_lp_simt when tile < 0: a gemm_launch_fn of a gemm_direct. */
static int launch_direct(gemm_dev *d, void *arg)
{
    const gemm_direct *a = arg;
    const prob *p = a->p;
    const char *name = a->tile < 0 ? "gemm_lp_simt" : mma_name[p->layout];
    const pgk_desc *desc = pgk_find(name);
    pgk_knobs kn = gemm_knobs(desc, p->m, p->n, p->k, -1);
    kn.v[pgk_knob_index(desc, "in")] = p->it == PG_BF16 ? 1 : 0;
    uint32_t out = p->ot == PG_F32 ? 0 : p->ot == PG_F16 ? 1 : 2;
    kn.v[pgk_knob_index(desc, "out")] = out;
    if (a->tile < 0) {
        kn.v[pgk_knob_index(desc, "layout")] = p->layout;
    } else {
        kn.v[pgk_knob_index(desc, "tile")] = (uint32_t)a->tile;
        kn.v[pgk_knob_index(desc, "split")] = a->split;
    }
    return gemm_launch_split(d, name, &kn, p->m, p->n, p->k, p->P, p->Q, a->split, out,
                             a->flags);
}

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
             tile < 0 ? "gemm_lp_simt" : mma_name[layout], pg_type_name(it), pg_type_name(ot), m,
             n, k, tile, split, flags & FLAG_ACC ? " acc" : "", flags & FLAG_BIAS ? " bias" : "",
             offset ? " unaligned" : "");
    gemm_run_direct(&d, ref_of(&p), &p, (int)tile, split, flags, r, launch_direct, what);
    gemm_dev_free(&d);
    prob_free(&p);
}

/* pgrt_gemm with a workspace, twice, the same bits, the operands off
 * 16-byte alignment when off; returns the kernel it chose ("" on failure). */
static const char *run_rt_at(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it,
                             pg_type ot, uint32_t m, uint32_t n, uint32_t k, unsigned flags,
                             unsigned off)
{
    prob p;
    prob_init(&p, r, layout, it, ot, m, n, k);
    uint64_t ws = pgrt_gemm_workspace_bytes(ctx, layout, it, ot, m, n, k);
    dev d = {.ctx = ctx};
    if (it == PG_F32) {
        /* the f32 kernels read f32 operands: widen the rounded values */
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, p.na, &d.a));
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, p.nb, &d.b));
        GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, p.pq + GEMM_GUARD, &d.c));
        GPU_CHECK(pgrt_buf_upload(d.a, 0, p.af, p.na));
        GPU_CHECK(pgrt_buf_upload(d.b, 0, p.bf, p.nb));
        GPU_CHECK(pgrt_buf_view(d.a, 0, p.na, &d.va));
        GPU_CHECK(pgrt_buf_view(d.b, 0, p.nb, &d.vb));
        GPU_CHECK(pgrt_buf_view(d.c, 0, p.pq + GEMM_GUARD, &d.vc));
        d.host_c = malloc((p.pq + GEMM_GUARD) * 4);
    } else {
        dev_upload(&d, &p, off, ws);
    }
    char what[256];
    snprintf(what, sizeof what, "pgrt_gemm %s %s->%s m=%u n=%u k=%u%s%s%s", layout_name[layout],
             pg_type_name(it), pg_type_name(ot), m, n, k, flags & FLAG_ACC ? " acc" : "",
             flags & FLAG_BIAS ? " bias" : "", off ? " unaligned" : "");
    gemm_ref g = ref_of(&p);
    gemm_rt t = {layout, m, n, k, flags, ws, what, {0}, 0};
    gemm_run_check(&d, &g, flags, r, 2, gemm_rt_launch, &t, what);
    gemm_dev_free(&d);
    prob_free(&p);
    return t.launches ? t.ch.desc->name : "";
}

static const char *run_rt(pgrt_ctx *ctx, rng *r, pgk_gemm_layout layout, pg_type it, pg_type ot,
                          uint32_t m, uint32_t n, uint32_t k, unsigned flags)
{
    return run_rt_at(ctx, r, layout, it, ot, m, n, k, flags, 0);
}

int main(void)
{
    quick = gpu_quick();
    pgrt_device_info info;
    pgrt_ctx *ctx = gemm_test_open(&info);
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
        for (unsigned l = 0; l < PGK_GEMM_LAYOUTS; l++)
            for (size_t s = 0; s < (quick ? 1u : 3u); s++)
                for (unsigned j = 0; j < (quick ? 1u : 3u); j++) {
                    shape3 sh = gemm_split_case(l, s);
                    run_case(ctx, &r, (pgk_gemm_layout)l, ins[(s + j) % 2], outs[(l + j) % 3],
                             sh.m, sh.n, sh.k, (int)((s * 3 + j) % PGK_GEMM_TILES),
                             gemm_split_count(j), (unsigned)(s + j + l) % 4, (unsigned)(j == 1));
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
            /* a side of 64 or less goes to gemm_thin (gemm_thin.c) */
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
