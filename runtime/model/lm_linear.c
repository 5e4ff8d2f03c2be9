/* SPDX-License-Identifier: MIT */
/* The linear layers of pgrt_lm: every GEMM of the step as a prepared GEMM
 * (pgrt_gemm_plan), taken in step order; the LoRA pairs inside the base
 * GEMMs on sm_90a in bf16, on the thin kernels elsewhere. */
#include "lm_internal.h"

#include <stdlib.h>
#include <string.h>

/* The device address of a weight as f32: bf16 weights are widened into
 * the scratch first. */
int weight_f32(pgrt_lm *m, pgrt_stream *s, const dweight *w, pgrt_devptr *out)
{
    if (!w->bf16) {
        *out = pgrt_buf_ptr(w->buf);
        return 0;
    }
    pgrt_devptr dst = pgrt_buf_ptr(m->wscratch);
    *out = dst;
    return launch(m, s, K_WIDEN, KN({"n", (uint32_t)w->count}),
                  ARGS(P(pgrt_buf_ptr(w->buf)), P(dst), U(w->count)));
}

/* ---------------------------------------------------------------- GEMMs */

/* Every GEMM of the step is a prepared GEMM (pgrt_gemm_plan: chosen,
 * loaded and tensor-mapped once). The step runs its products in the same
 * order every time, so the dry run at create prepares them in that order
 * and each step takes them in turn: a launch is the driver call alone. */
typedef struct lm_product {
    pgrt_gemm_plan *plan;
    pgrt_devptr c; /* where it writes: a step that strays from create's order is caught */
    int bucket;
} lm_product;

/* A linear layer's product in its words (y = x·Wᵀ over T rows): x [T, in],
 * W [out, in]; forward a = x, b = W; dX a = dy, b = W; dW a = dy, b = x.
 * bf16 operands with an f32 result on the chosen family, f32 on the
 * seed's exact kernels. */
pgrt_gemm_spec lm_lin(const pgrt_lm *m, pgk_gemm_layout lay, pgrt_devptr a, pgrt_devptr b,
                      uint32_t in, uint32_t out, bool acc)
{
    return (pgrt_gemm_spec){.layout = lay, .kind = m->lowp ? PGRT_GEMM_CHOSEN : PGRT_GEMM_SEED,
                            .in_type = m->lowp ? PG_BF16 : PG_F32, .out_type = PG_F32,
                            .m = (uint32_t)m->T, .n = out, .k = in, .a = a, .b = b,
                            .accumulate = acc};
}

/* Run the step's next product, spec into c (+ bias), on s or (side, with
 * a side stream) on the side stream with its own workspace; while
 * warming, prepare it. */
static int gemm_run(pgrt_lm *m, pgrt_stream *s, const pgrt_gemm_spec *spec, pgrt_devptr c,
                    pgrt_devptr bias, int bucket, bool side)
{
    side = side && m->side;
    if (m->warming) {
        if (m->ngemm == m->gemm_cap) {
            size_t cap = m->gemm_cap ? 2 * m->gemm_cap : 256;
            lm_product *g = realloc(m->gemms, cap * sizeof *g);
            if (!g)
                return model_fail(PGRT_ENOMEM, "pgrt_lm: out of host memory");
            m->gemms = g;
            m->gemm_cap = cap;
        }
        pgrt_gemm_spec sp = *spec;
        sp.bias = bias != 0;
        lm_product *g = &m->gemms[m->ngemm];
        int rc = pgrt_gemm_plan_create(m->ctx, &sp, &g->plan);
        if (rc)
            return rc;
        m->ngemm++;
        g->c = c;
        g->bucket = bucket;
        uint64_t ws = pgrt_gemm_plan_workspace(g->plan), *need = side ? &m->ws_side_need : &m->ws_need;
        *need = ws > *need ? ws : *need;
        return 0;
    }
    if (m->gemm_next >= m->ngemm || m->gemms[m->gemm_next].c != c)
        return model_fail(PGRT_ESTATE, "pgrt_lm: GEMM %zu of the step is not the one prepared "
                          "at create", m->gemm_next);
    const lm_product *g = &m->gemms[m->gemm_next++];
    pgrt_devptr ws = pgrt_gemm_plan_workspace(g->plan) ? pgrt_buf_ptr(side ? m->ws_side : m->ws) : 0;
    s = side ? m->ls : s;
    m->launches++;
    if (!m->profile)
        return pgrt_gemm_plan_launch(g->plan, s, c, bias, ws);
    int rc;
    if ((rc = lm_prof_start(m, s)) || (rc = pgrt_gemm_plan_launch(g->plan, s, c, bias, ws)))
        return rc;
    return lm_prof_stop(m, s, pgrt_gemm_plan_choice(g->plan)->desc->name, g->bucket);
}

int lm_gemm(pgrt_lm *m, pgrt_stream *s, const pgrt_gemm_spec *spec, pgrt_devptr c,
            pgrt_devptr bias, int bucket)
{
    return gemm_run(m, s, spec, c, bias, bucket, false);
}

/* ---------------------------------------------------------------- the side stream */

/* The side stream takes work in the order given; fork makes it wait for
 * what s has been given so far. */
static int side_fork(pgrt_lm *m, pgrt_stream *s)
{
    if (!m->side || m->warming)
        return 0;
    int rc = pgrt_event_record(m->ev_fork, s);
    return rc ? rc : pgrt_stream_wait_event(m->ls, m->ev_fork);
}

int lm_side_join(pgrt_lm *m, pgrt_stream *s)
{
    if (!m->side || m->warming)
        return 0;
    int rc = pgrt_event_record(m->ev_join, m->ls);
    return rc ? rc : pgrt_stream_wait_event(s, m->ev_join);
}

int lm_side_mark_o(pgrt_lm *m)
{
    return !m->side || m->warming ? 0 : pgrt_event_record(m->ev_o, m->ls);
}

int lm_side_wait_o(pgrt_lm *m, pgrt_stream *s)
{
    return !m->side || m->warming ? 0 : pgrt_stream_wait_event(s, m->ev_o);
}

int lm_gemm_skip(pgrt_lm *m, pgrt_devptr c)
{
    if (m->gemm_next >= m->ngemm || m->gemms[m->gemm_next].c != c)
        return model_fail(PGRT_ESTATE, "pgrt_lm: GEMM %zu of the step is not the one prepared "
                          "at create", m->gemm_next);
    m->gemm_next++;
    return 0;
}

/* A product of the base weights, or in f32 of any: the GEMM bucket. */
static int base_gemm(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, bool acc, pgrt_devptr a,
                     pgrt_devptr b, pgrt_devptr c, uint32_t in, uint32_t out, pgrt_devptr bias)
{
    pgrt_gemm_spec sp = lm_lin(m, lay, a, b, in, out, acc);
    return lm_gemm(m, s, &sp, c, bias, PGRT_LM_TIME_GEMM);
}

/* The f32 LoRA products of ranks past the thin kernels. */
static int lora_gemm(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, bool acc, pgrt_devptr a,
                     pgrt_devptr b, pgrt_devptr c, uint32_t in, uint32_t out)
{
    pgrt_gemm_spec sp = lm_lin(m, lay, a, b, in, out, acc);
    sp.kind = PGRT_GEMM_SEED;
    sp.in_type = PG_F32;
    return lm_gemm(m, s, &sp, c, 0, lm_bucket(m->lowp, K_LORA_GRAD));
}

/* dst (bf16) = src (f32), n elements. */
static int narrow(pgrt_lm *m, pgrt_stream *s, pgrt_devptr src, pgrt_devptr dst, uint64_t n)
{
    return launch(m, s, K_NARROW, KN({"n", (uint32_t)n}), ARGS(P(src), P(dst), U(n)));
}

static pgrt_devptr pofs(pgrt_buf *b, int64_t elems) { return pgrt_buf_ptr(b) + (uint64_t)elems * 4u; }

/* ---------------------------------------------------------------- LoRA products */

/* The LoRA products run on the thin kernels (kernels/lora_tile.c and
 * lora_up_f32; rank r one dimension), in f32 and bf16 alike. The sums
 * over T, in or out are cut into slices added in a fixed order inside the
 * kernel, so every step gives the same bits. In bf16 the long operand is
 * the bf16 copy the base GEMM reads (m->xb forward, m->dyb backward):
 * the values the reference's LoRA sees. Ranks past the kernels' register
 * budget keep the f32 GEMMs. */
#define LORA_TILE 64u /* rows of a lora_proj / lora_grad block */


/* Slices of a length-`len` sum over `tiles` row tiles: about two blocks
 * an SM, each slice at least two 32-long chunks, at most 64 slices. */
static uint32_t lora_splits(const pgrt_lm *m, uint32_t tiles, uint32_t len)
{
    uint32_t target = 2u * (m->sms ? m->sms : 108u);
    uint32_t sp = (target + tiles - 1) / tiles, most = (len + 63) / 64;
    sp = sp > most ? most : sp;
    sp = sp > 64 ? 64 : sp;
    return sp ? sp : 1;
}

/* The workspace of the slices' sums (shared with the bf16 GEMMs'
 * split-K: the stream orders them) and the arrival counters; while
 * warming, only their sizes are noted. */
static int lora_ws(pgrt_lm *m, uint32_t tiles, uint32_t sp, uint32_t cols, pgrt_devptr *ws,
                   pgrt_devptr *cnt)
{
    uint64_t bytes = (uint64_t)sp * tiles * LORA_TILE * ((cols + 15u) & ~15u) * 4u;
    *ws = *cnt = 0;
    if (m->warming) {
        if (bytes > m->ws_need)
            m->ws_need = bytes;
        if (tiles > m->lcnt_need)
            m->lcnt_need = tiles;
        return 0;
    }
    if (!m->ws || pgrt_buf_bytes(m->ws) < bytes || !m->lcnt || pgrt_buf_bytes(m->lcnt) < tiles * 4u)
        return model_fail(PGRT_ESTATE, "pgrt_lm: LoRA workspace smaller than at create");
    *ws = pgrt_buf_ptr(m->ws);
    *cnt = pgrt_buf_ptr(m->lcnt);
    return 0;
}

/* out = scale x[T, k] w^T for `parts` pairs of rank r at once (out
 * part-major): w their stacked A [parts r, k], or (wt) one B [k, r]. x
 * bf16 or f32. */
static int lora_proj(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, bool bf16, pgrt_devptr w,
                     pgrt_devptr out, uint32_t k, uint32_t r, uint32_t parts, bool wt,
                     float scale)
{
    int kid = bf16 ? K_LORA_PROJ_BF16 : K_LORA_PROJ;
    uint32_t tiles = ((uint32_t)m->T + LORA_TILE - 1) / LORA_TILE, sp = lora_splits(m, tiles, k);
    pgk_knobs kn;
    pgrt_devptr ws, cnt;
    int rc = kn_of(m->desc[kid],
                   KN({"rows", m->T}, {"k", k}, {"cols", parts * r}, {"rank", r},
                      {"wt", wt ? 1u : 0u}, {"split", sp}),
                   &kn);
    if (rc || (rc = lora_ws(m, tiles, sp, parts * r, &ws, &cnt)))
        return rc;
    return launch_kn(m, s, kid, m->desc[kid], &kn,
                     ARGS(P(x), P(w), P(out), P(ws), P(cnt), U(m->T), U(k), U(sp), F(scale)));
}

/* g = d[T, n]^T xa[T, R] for `parts` pairs of rank r: [n, r] (dB, one
 * pair) or, trans, [parts r, n] (their stacked dA). d bf16 or f32. */
static int lora_grad(pgrt_lm *m, pgrt_stream *s, pgrt_devptr d, bool bf16, pgrt_devptr xa,
                     pgrt_devptr g, uint32_t n, uint32_t r, uint32_t parts, bool trans)
{
    int kid = bf16 ? K_LORA_GRAD_BF16 : K_LORA_GRAD;
    uint32_t tiles = (n + LORA_TILE - 1) / LORA_TILE, sp = lora_splits(m, tiles, (uint32_t)m->T);
    pgk_knobs kn;
    pgrt_devptr ws, cnt;
    int rc = kn_of(m->desc[kid],
                   KN({"rows", m->T}, {"n", n}, {"cols", parts * r}, {"rank", r},
                      {"trans", trans ? 1u : 0u}, {"split", sp}),
                   &kn);
    if (rc || (rc = lora_ws(m, tiles, sp, parts * r, &ws, &cnt)))
        return rc;
    return launch_kn(m, s, kid, m->desc[kid], &kn,
                     ARGS(P(d), P(xa), P(g), P(ws), P(cnt), U(m->T), U(n), U(sp), F(1.0f)));
}

/* y[T, n] (+)= xa[T, R] w(n, R)^T, w = B [n, r] or (wt) the stacked A
 * [parts r, n] of `parts` pairs of rank r (xa part-major). */
static int lora_up(pgrt_lm *m, pgrt_stream *s, pgrt_devptr xa, pgrt_devptr w, pgrt_devptr y,
                   uint32_t n, bool wt, uint32_t r, uint32_t parts, bool acc)
{
    return launch(m, s, K_LORA_UP,
                  KN({"rows", m->T}, {"n", n}, {"rank", parts * r}, {"wt", wt ? 1u : 0u},
                     {"acc", acc ? 1u : 0u}, {"part", parts > 1 ? r : 0u}),
                  ARGS(P(xa), P(w), P(y), U(m->T), U(n), F(1.0f)));
}

/* ---------------------------------------------------------------- LoRA inside the base GEMMs */

/* On sm_90a in bf16 (m->fused) a LoRA pair rides in its module's GEMMs
 * (gemm_sm90's second operand pair, kernels/gemm_sm90.c). With xa = s·x·Aᵀ
 * and dxa = s·dy·B in bf16, a group's pairs side by side ([T, parts·r]):
 *
 *   xa  = x·(sA_group)ᵀ           one GEMM a group: x read once for q, k, v
 *   y   = x·Wᵀ + xa·Bᵀ            one GEMM, its reduction in + r
 *   dxa = dy·(sB)ᵀ, dB = dyᵀ·xa   two thin GEMMs a pair
 *   dx  = Σ dy·W + dxa·A_group    the group's last dX GEMM takes the term:
 *                                 its reduction out + parts·r
 *   dA_group = dxaᵀ·x             one GEMM a group, on x's bf16 copy: kept
 *                                 from the forward (act16) or made again
 *
 * bf16 on the tensor cores with f32 accumulation, f32 master weights, as
 * PEFT under autocast computes it. The master weights' bf16 copies (A and
 * B as they are, and times s) are made once a step (lora_weights). */

static pgrt_devptr pbf(const pgrt_lm *m, int64_t elems, bool scaled)
{
    return pgrt_buf_ptr(m->pbf) + ((scaled ? (uint64_t)m->nlora : 0) + (uint64_t)elems) * 2u;
}

/* A LoRA product in the layer words of lm_lin(): on the chooser's family
 * when its operands are dense, on gemm_sm90 when one is pitched. */
static int lora_wg(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, pg_type out_type,
                   pgrt_devptr a, pgrt_devptr b, uint32_t in, uint32_t out, uint32_t ldb,
                   uint32_t ldc, pgrt_devptr c, bool side)
{
    pgrt_gemm_spec sp = lm_lin(m, lay, a, b, in, out, false);
    /* pitched operands: gemm_sm90, whose tensor maps take any pitch; a
     * group's xa and dA of 32 or more rank columns (out) over an input of
     * at most 4096 too: on an H200 (tests/bench/bench_lora_sm90.c) q, k,
     * v's xa ran 8.1 us against gemm_thin's 14.4, their dA 9.8 against
     * 24.8. The rest the chooser's: gemm_thin for 16 columns (o's dA 7.1
     * against 10.0), split mma.sync over down's 8960 */
    bool wide = out >= 32 && out <= 64 && in <= 4096;
    sp.kind = ldb || ldc || wide ? PGRT_GEMM_WGMMA : PGRT_GEMM_CHOSEN;
    sp.out_type = out_type;
    sp.ldb = ldb;
    sp.ldc = ldc;
    return gemm_run(m, s, &sp, c, 0, PGRT_LM_TIME_LORA_GEMM, side);
}

/* A group's dxa: with a side stream each run of pairs (its lead module)
 * has its own, so that a dA still running there never sees the next
 * group's. */
static pgrt_devptr dxa_of(const pgrt_lm *m, const lora_d *ld)
{
    return m->dxa + (m->side ? (uint64_t)ld->lead * m->dxa_stride : 0);
}

/* pb = bf16(p), psb = bf16(s p) over [at, at + n) of the parameters. */
static int lora_cast(pgrt_lm *m, pgrt_stream *s, int64_t at, int64_t n, float scale)
{
    return launch(m, s, K_LORA_CAST, KN({"n", (uint32_t)n}),
                  ARGS(P(pofs(m->p, at)), P(pbf(m, at, false)), P(pbf(m, at, true)),
                       U((uint32_t)n), F(scale)));
}

/* pb = bf16(p), psb = bf16(s p), s each pair's scale: at the start of
 * every step, after the optimizer of the step before. One launch a stretch
 * of the parameters of one scale, in lm_lora_layout's order (a group's A's,
 * then its B's): one launch in all where every pair has the same. */
int lm_lora_weights(pgrt_lm *m, pgrt_stream *s)
{
    int64_t at = 0, end = 0;
    float scale = 0;
    int rc = 0;
    for (int l = 0; l < m->c.layers && !rc; l++)
        for (int g0 = 0, g1; g0 < PGRT_LINEAR_COUNT && !rc; g0 = g1) {
            for (g1 = g0; g1 < PGRT_LINEAR_COUNT && lora_group_of[g1] == lora_group_of[g0]; g1++)
                ;
            for (int half = 0; half < 2 && !rc; half++)
                for (int i = g0; i < g1 && !rc; i++) {
                    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + i];
                    if (ld->a < 0)
                        continue;
                    int in, out;
                    pgrt_linear_dims(&m->c, (pgrt_linear)i, &in, &out);
                    int64_t o = half ? ld->b : ld->a, n = (int64_t)ld->r * (half ? out : in);
                    if (end > at && o == end && ld->scale == scale) {
                        end += n;
                        continue;
                    }
                    if (end > at)
                        rc = lora_cast(m, s, at, end - at, scale);
                    at = o;
                    end = o + n;
                    scale = ld->scale;
                }
        }
    return rc || end <= at ? rc : lora_cast(m, s, at, end - at, scale);
}

/* The element type of a linear layer's output: with act16 the MLP's
 * activations (gate, up forward) and d(act) (down backward) are bf16. */
static pg_type out_type(const pgrt_lm *m, pgrt_linear mod, bool backward)
{
    bool mlp = backward ? mod == PGRT_LINEAR_DOWN
                        : mod == PGRT_LINEAR_GATE || mod == PGRT_LINEAR_UP;
    return m->act16 && mlp ? PG_BF16 : PG_F32;
}

static int linear_fwd_fused(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr xb,
                            pgrt_devptr y)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    pgrt_devptr W = pgrt_buf_ptr(m->lw[l].lin[mod].buf);
    pgrt_devptr bias = m->lw[l].bias[mod] ? pgrt_buf_ptr(m->lw[l].bias[mod]) : 0;
    pgrt_gemm_spec sp = lm_lin(m, PGK_GEMM_FORWARD, xb, W, (uint32_t)in, (uint32_t)out, false);
    sp.out_type = out_type(m, mod, false);
    if (ld->a >= 0) {
        const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
        uint32_t r = (uint32_t)ld->r, R = (uint32_t)ld->parts * r;
        pgrt_devptr xa = m->la[l].xa[ld->lead];
        int rc = ld->part == 0 ? lora_wg(m, s, PGK_GEMM_FORWARD, PG_BF16, xb,
                                         pbf(m, lead->a, true), (uint32_t)in, R, 0, 0, xa, false)
                               : 0;
        if (rc)
            return rc;
        sp.kind = PGRT_GEMM_WGMMA;
        sp.a2 = xa + (uint64_t)ld->part * r * 2u;
        sp.lda2 = R;
        sp.b2 = pbf(m, ld->b, false);
        sp.k2 = r;
    }
    return lm_gemm(m, s, &sp, y, bias, PGRT_LM_TIME_GEMM);
}

static int linear_bwd_fused(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, lm_in x,
                            pgrt_devptr dyb, pgrt_devptr dx, bool acc)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
    pgrt_devptr W = pgrt_buf_ptr(m->lw[l].lin[mod].buf);
    pgrt_gemm_spec sp = lm_lin(m, PGK_GEMM_BACKWARD_X, dyb, W, (uint32_t)in, (uint32_t)out, acc);
    sp.out_type = out_type(m, mod, true);
    uint32_t r = (uint32_t)ld->r, R = (uint32_t)ld->parts * r;
    bool last = ld->a >= 0 && ld->part + 1 == ld->parts;
    pgrt_devptr dxa = dxa_of(m, ld);
    int rc;
    /* dxa on s (the dX GEMM reads it); dB on the side stream, nothing in
     * the step reads it */
    if (ld->a >= 0) {
        pgrt_devptr xa = m->la[l].xa[ld->lead] + (uint64_t)ld->part * r * 2u;
        if ((rc = lora_wg(m, s, PGK_GEMM_BACKWARD_X, PG_BF16, dyb, pbf(m, ld->b, true), r,
                          (uint32_t)out, 0, R, dxa + (uint64_t)ld->part * r * 2u, false)) ||
            (rc = side_fork(m, s)) ||
            (rc = lora_wg(m, s, PGK_GEMM_BACKWARD_W, PG_F32, dyb, xa, r, (uint32_t)out, R, 0,
                          pofs(m->g, ld->b), true)))
            return rc;
    }
    if (last) {
        sp.kind = PGRT_GEMM_WGMMA;
        sp.a2 = dxa;
        sp.lda2 = R;
        sp.b2 = pbf(m, lead->a, false);
        sp.k2 = R;
    }
    if ((rc = lm_gemm(m, s, &sp, dx, 0, PGRT_LM_TIME_GEMM)) || !last)
        return rc;
    /* dA: from x's bf16 copy, kept (act16: on the side stream, after
     * the group's dxa) or made into dtmp, free in the backward */
    uint64_t n = (uint64_t)m->T * in;
    pgrt_devptr xb = x.xb ? x.xb : m->dtmp;
    if (!x.xb &&
        (rc = launch(m, s, K_LORA_NARROW, KN({"n", (uint32_t)n}), ARGS(P(x.x), P(xb), U(n)))))
        return rc;
    return lora_wg(m, s, PGK_GEMM_BACKWARD_W, PG_F32, dxa, xb, (uint32_t)in, R, 0, 0,
                   pofs(m->g, lead->a), x.xb != 0);
}

bool lm_qkv_merged(const pgrt_lm *m, int l)
{
    const lora_d *q = &m->lora[l * PGRT_LINEAR_COUNT + PGRT_LINEAR_Q];
    return m->act16 && !m->c.qk_norm && q->a >= 0 && q->lead == PGRT_LINEAR_Q && q->parts == 3;
}

/* q, k and v's backward at once where they are one run of pairs
 * (lm_qkv_merged), from dq, dk, dv's adjacent bf16 copies: each pair's
 * dxa, and its dB on the side stream; then dx = dq·Wq + dxa·A_group and
 * dx += dk·Wk + dv·Wv, the second pair of operands extending the
 * reduction (two GEMMs where the module-by-module way took three, two of
 * them reading and writing dx again); the group's dA on the side stream. */
int linear_bwd_qkv(pgrt_lm *m, pgrt_stream *s, int l, lm_in x, pgrt_devptr dx)
{
    const pgrt_devptr dyb[3] = {m->dqb, m->dkb, m->dvb};
    const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + PGRT_LINEAR_Q];
    uint32_t r = (uint32_t)lead->r, R = 3 * r;
    pgrt_devptr dxa = dxa_of(m, lead);
    int in, out[3], rc;
    for (int i = 0; i < 3; i++) {
        pgrt_linear mod = (pgrt_linear)(PGRT_LINEAR_Q + i);
        const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
        pgrt_linear_dims(&m->c, mod, &in, &out[i]);
        pgrt_devptr xa = m->la[l].xa[PGRT_LINEAR_Q] + (uint64_t)ld->part * r * 2u;
        if ((rc = lora_wg(m, s, PGK_GEMM_BACKWARD_X, PG_BF16, dyb[i], pbf(m, ld->b, true), r,
                          (uint32_t)out[i], 0, R, dxa + (uint64_t)ld->part * r * 2u, false)) ||
            (rc = side_fork(m, s)) ||
            (rc = lora_wg(m, s, PGK_GEMM_BACKWARD_W, PG_F32, dyb[i], xa, r, (uint32_t)out[i], R,
                          0, pofs(m->g, ld->b), true)))
            return rc;
    }
    const layer_w *w = &m->lw[l];
    pgrt_gemm_spec q = lm_lin(m, PGK_GEMM_BACKWARD_X, dyb[0],
                              pgrt_buf_ptr(w->lin[PGRT_LINEAR_Q].buf), (uint32_t)in,
                              (uint32_t)out[0], false);
    q.kind = PGRT_GEMM_WGMMA;
    q.a2 = dxa;
    q.lda2 = R;
    q.b2 = pbf(m, lead->a, false);
    q.k2 = R;
    pgrt_gemm_spec kv = lm_lin(m, PGK_GEMM_BACKWARD_X, dyb[1],
                               pgrt_buf_ptr(w->lin[PGRT_LINEAR_K].buf), (uint32_t)in,
                               (uint32_t)out[1], true);
    kv.kind = PGRT_GEMM_WGMMA;
    kv.a2 = dyb[2];
    kv.lda2 = (uint32_t)out[2];
    kv.b2 = pgrt_buf_ptr(w->lin[PGRT_LINEAR_V].buf);
    kv.k2 = (uint32_t)out[2];
    if ((rc = lm_gemm(m, s, &q, dx, 0, PGRT_LM_TIME_GEMM)) ||
        (rc = lm_gemm(m, s, &kv, dx, 0, PGRT_LM_TIME_GEMM)))
        return rc;
    return lora_wg(m, s, PGK_GEMM_BACKWARD_W, PG_F32, dxa, x.xb, (uint32_t)in, R, 0, 0,
                   pofs(m->g, lead->a), true);
}

/* x with LoRA dropout's mask for module mod of layer l into m->xdrop
 * (add: m->xdrop's values dropped and added into dst instead). An
 * evaluation keeps everything (scale 1): the same launches and products,
 * so the prepared GEMMs serve it too. */
static int dropout(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
                   pgrt_devptr dst, uint32_t in, bool add)
{
    uint32_t n = (uint32_t)m->T * in;
    uint32_t stream = (uint32_t)(l * PGRT_LINEAR_COUNT + (int)mod);
    bool all = m->evaluating;
    return launch(m, s, add ? K_DROPOUT_ADD : K_DROPOUT, KN({"n", n}),
                  ARGS(P(add ? m->xdrop : x), P(add ? dst : m->xdrop), U(n), U(m->drop_seed),
                       U(stream), P(pgrt_buf_ptr(m->dctr)), U(all ? 0 : m->drop_keep_min),
                       F(all ? 1.0f : m->drop_scale)));
}

/* y = x W^T (+ bias) (+ lora) for module mod of layer l; x.x [T, in] f32
 * and, in bf16, its copy x.xb that the caller made (act16: x.xb alone,
 * and gate and up write y in bf16). The pairs of one
 * input are projected together at the group's first module: its callers
 * run a group's modules in order on one x (forward_layer). The LoRA term
 * comes first (y = xa B^T) and the base product adds into it, so y is
 * written once by each and read once, by the GEMM's epilogue. */
int linear_fwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, lm_in xin, pgrt_devptr y)
{
    lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    if (m->fused && (ld->a < 0 || lm_pair_fused(m, ld)))
        return linear_fwd_fused(m, s, l, mod, xin.xb, y);
    pgrt_devptr x = xin.x;
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    uint32_t r = (uint32_t)ld->r;
    bool thin = ld->a >= 0 && ld->r <= LORA_THIN_RANK && !m->drop;
    /* xa = s x A^T (kept for the backward) */
    pgrt_devptr xa = m->la[l].xa[mod], w;
    int rc = 0;
    if (thin && ((ld->part == 0 &&
                  (rc = lora_proj(m, s, m->lowp ? xin.xb : x, m->lowp, pofs(m->p, ld->a), xa,
                                  (uint32_t)in, r, (uint32_t)ld->parts, false, ld->scale))) ||
                 (rc = lora_up(m, s, xa, pofs(m->p, ld->b), y, (uint32_t)out, false, r, 1, false))))
        return rc;
    pgrt_devptr bias = m->lw[l].bias[mod] ? pgrt_buf_ptr(m->lw[l].bias[mod]) : 0;
    if (m->lowp) /* the bias in the GEMM's epilogue */
        rc = base_gemm(m, s, PGK_GEMM_FORWARD, thin, xin.xb, pgrt_buf_ptr(m->lw[l].lin[mod].buf),
                       y, (uint32_t)in, (uint32_t)out, bias);
    else if (!(rc = weight_f32(m, s, &m->lw[l].lin[mod], &w)))
        rc = base_gemm(m, s, PGK_GEMM_FORWARD, thin, x, w, y, (uint32_t)in, (uint32_t)out, 0);
    if (!rc && !m->lowp && bias)
        rc = launch(m, s, K_BIAS, KN({"rows", m->T}, {"cols", out}),
                    ARGS(P(y), P(bias), U(m->T), U(out)));
    if (rc || ld->a < 0 || thin)
        return rc;
    /* ranks past the thin kernels, and dropout: xa = s drop(x) A^T, y +=
     * xa B^T on the f32 GEMMs */
    uint32_t n = (uint32_t)m->T * r;
    if (m->drop && (rc = dropout(m, s, l, mod, x, 0, (uint32_t)in, false)))
        return rc;
    if ((rc = lora_gemm(m, s, PGK_GEMM_FORWARD, false, m->drop ? m->xdrop : x,
                        pofs(m->p, ld->a), xa, (uint32_t)in, r)) ||
        (rc = launch(m, s, K_SCALE, KN({"n", n}), ARGS(P(xa), F(ld->scale), U(n)))))
        return rc;
    return lora_gemm(m, s, PGK_GEMM_FORWARD, true, xa, pofs(m->p, ld->b), y, r, (uint32_t)out);
}

/* The thin LoRA backward of module mod: dB = dy^T xa (xa holds the
 * scale) and dxa = s dy B, this pair's part; at the group's last pair the
 * stacked dA = dxa^T x and dx (+)= dxa A. d is dy, or its bf16 copy. */
static int lora_bwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
                    pgrt_devptr d, pgrt_devptr dx, bool acc)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    const lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    uint32_t r = (uint32_t)ld->r;
    pgrt_devptr dxa = m->dxa + (uint64_t)ld->part * m->T * r * 4u;
    int rc;
    if ((rc = lora_grad(m, s, d, m->lowp, m->la[l].xa[mod], pofs(m->g, ld->b), (uint32_t)out, r,
                        1, false)) ||
        (rc = lora_proj(m, s, d, m->lowp, pofs(m->p, ld->b), dxa, (uint32_t)out, r, 1, true,
                        ld->scale)))
        return rc;
    if (ld->part + 1 < ld->parts)
        return 0;
    const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
    uint32_t parts = (uint32_t)ld->parts;
    if ((rc = lora_grad(m, s, x, false, m->dxa, pofs(m->g, lead->a), (uint32_t)in, r, parts,
                        true)))
        return rc;
    return lora_up(m, s, m->dxa, pofs(m->p, lead->a), dx, (uint32_t)in, true, r, parts, acc);
}

/* Given dy [T, out] (and, in bf16, dyb: its bf16 copy where the kernel
 * that wrote dy made one, else 0) and the layer's input (xin.xb: its kept
 * bf16 copy, or 0): dx (+)= dy W (+ the LoRA path), and the
 * LoRA gradients of module mod of layer l. A group's dA and its dx term
 * wait for its last module: the callers run a group's modules in order on
 * one x and dx (backward_layer). A pair alone in its group whose dx is not
 * accumulated goes first (dx = dxa A) and the base product adds into it. */
int linear_bwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, lm_in xin, pgrt_devptr dy,
               pgrt_devptr dyb, pgrt_devptr dx, bool acc)
{
    pgrt_devptr x = xin.x;
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    bool thin = ld->a >= 0 && ld->r <= LORA_THIN_RANK && !m->drop;
    bool first = thin && ld->parts == 1 && !acc;
    pgrt_devptr w;
    int rc = 0;
    if (m->lowp && !dyb) {
        /* with a side stream q, k and v keep theirs for dB there */
        pgrt_devptr to = !m->side                ? m->dyb
                         : mod == PGRT_LINEAR_Q ? m->dqb
                         : mod == PGRT_LINEAR_K ? m->dkb
                         : mod == PGRT_LINEAR_V ? m->dvb
                                                : m->dyb;
        if ((rc = narrow(m, s, dy, to, (uint64_t)m->T * out)))
            return rc;
        dyb = to;
    }
    if (m->fused && (ld->a < 0 || lm_pair_fused(m, ld)))
        return linear_bwd_fused(m, s, l, mod, xin, dyb, dx, acc);
    pgrt_devptr d = m->lowp ? dyb : dy;
    if (first && (rc = lora_bwd(m, s, l, mod, x, d, dx, false)))
        return rc;
    if (m->lowp)
        rc = base_gemm(m, s, PGK_GEMM_BACKWARD_X, acc || first, dyb,
                       pgrt_buf_ptr(m->lw[l].lin[mod].buf), dx, (uint32_t)in, (uint32_t)out, 0);
    else if (!(rc = weight_f32(m, s, &m->lw[l].lin[mod], &w)))
        rc = base_gemm(m, s, PGK_GEMM_BACKWARD_X, acc || first, dy, w, dx, (uint32_t)in,
                       (uint32_t)out, 0);
    if (rc || ld->a < 0 || first)
        return rc;
    if (thin)
        return lora_bwd(m, s, l, mod, x, d, dx, true);
    /* dB = dy^T (s xa); dxa = s dy B; dA = dxa^T x; dx += dxa A */
    uint32_t r = (uint32_t)ld->r, n = (uint32_t)m->T * r;
    if ((rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_W, false, dy, m->la[l].xa[mod],
                        pofs(m->g, ld->b), r, (uint32_t)out)) ||
        (rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_X, false, dy, pofs(m->p, ld->b), m->dxa, r,
                        (uint32_t)out)) ||
        (rc = launch(m, s, K_SCALE, KN({"n", n}), ARGS(P(m->dxa), F(ld->scale), U(n)))))
        return rc;
    if (m->drop) {
        /* dA = dxa^T drop(x), the forward's mask made again; dx +=
         * drop(dxa A), through xdrop */
        if ((rc = dropout(m, s, l, mod, x, 0, (uint32_t)in, false)) ||
            (rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_W, false, m->dxa, m->xdrop,
                            pofs(m->g, ld->a), (uint32_t)in, r)) ||
            (rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_X, false, m->dxa, pofs(m->p, ld->a),
                            m->xdrop, (uint32_t)in, r)))
            return rc;
        return dropout(m, s, l, mod, 0, dx, (uint32_t)in, true);
    }
    if ((rc = lora_gemm(m, s, PGK_GEMM_BACKWARD_W, false, m->dxa, x, pofs(m->g, ld->a),
                        (uint32_t)in, r)))
        return rc;
    return lora_gemm(m, s, PGK_GEMM_BACKWARD_X, true, m->dxa, pofs(m->p, ld->a), dx,
                     (uint32_t)in, r);
}

void lm_gemms_destroy(pgrt_lm *m)
{
    for (size_t i = 0; i < m->ngemm; i++)
        pgrt_gemm_plan_destroy(&m->gemms[i].plan);
    free(m->gemms);
    m->gemms = NULL;
    m->ngemm = m->gemm_cap = 0;
}

bool lm_fusable(const pgrt_lm *m)
{
    const pgrt_model_config *c = &m->c;
    int qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
    bool any = false; /* a pair whose rank the tensor maps take */
    for (size_t i = 0; i < (size_t)c->layers * PGRT_LINEAR_COUNT; i++)
        any |= m->lora[i].a >= 0 && m->lora[i].r % 8 == 0;
    return m->lowp && !m->drop && m->arch_target == PG_SM_90A && m->nlora && any &&
           (c->hidden | c->intermediate | qd | kvd) % 8 == 0;
}
