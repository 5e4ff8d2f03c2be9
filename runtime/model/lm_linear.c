/* SPDX-License-Identifier: MIT */
/* The linear layers of pgrt_lm: the GEMM dispatch (the f32 kernels, the
 * bf16 tensor-core family, gemm_sm90 with its tensor maps and split-K
 * workspace) and the LoRA products. Moved from lm.c as they were; the
 * knob-by-name launches (launch, launch_kn, KN) are lm_internal.h's. */
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

int model_gemm(pgrt_lm *m, pgrt_stream *s, lin_op op, bool acc, pgrt_devptr x,
               pgrt_devptr w, pgrt_devptr y, uint32_t rows, uint32_t in, uint32_t out)
{
    switch (op) {
    case LIN_Y: /* grad_A[M,K] = dC[M,N] B[K,N]^T with M rows, N in, K out */
        return launch(m, s, acc ? K_GEMM_NT_ACC : K_GEMM_NT,
                      KN({"m", rows}, {"n", in}, {"k", out}),
                      ARGS(P(x), P(w), P(y), U(rows), U(in), U(out)));
    case LIN_DX: /* C[M,N] = A[M,K] B[K,N] with M rows, N in, K out */
        return launch(m, s, acc ? K_GEMM_NN_ACC : K_GEMM_NN,
                      KN({"m", rows}, {"n", in}, {"k", out}),
                      ARGS(P(x), P(w), P(y), U(rows), U(in), U(out)));
    case LIN_DW: /* grad_B[K,N] = A[M,K]^T dC[M,N]: A = dy (x here), dC = the input (w) */
        return launch(m, s, K_GEMM_TN, KN({"m", rows}, {"n", in}, {"k", out}),
                      ARGS(P(x), P(w), P(y), U(rows), U(in), U(out)));
    }
    return PGRT_EINVAL;
}

static bool wg_is(const wg_maps *e, pgk_gemm_layout lay, pgrt_devptr a, pgrt_devptr b,
                  uint32_t rows, uint32_t in, uint32_t out)
{
    return e->layout == (uint32_t)lay && e->pa == a && e->pb == b && e->rows == rows &&
           e->in == in && e->out == out;
}

/* The maps of a gemm_sm90 product: the entry after the last one used
 * when it matches (the step runs its products in the same order every
 * time), else any that matches, else a new one encoded. */
static int wg_maps_get(pgrt_lm *m, pgk_gemm_layout lay, pgrt_devptr a, pgrt_devptr b,
                       uint32_t rows, uint32_t in, uint32_t out, uint32_t bn,
                       const wg_maps **found)
{
    size_t i = m->wg_next;
    if (i >= m->wg_n || !wg_is(&m->wg[i], lay, a, b, rows, in, out))
        for (i = 0; i < m->wg_n && !wg_is(&m->wg[i], lay, a, b, rows, in, out); i++)
            ;
    if (i == m->wg_n) {
        if (m->wg_n == m->wg_cap) {
            size_t cap = m->wg_cap ? 2 * m->wg_cap : 64;
            /* 64-byte aligned, as a tensor map must be */
            wg_maps *w = aligned_alloc(64, cap * sizeof *w);
            if (!w)
                return model_fail(PGRT_ENOMEM, "pgrt_lm: out of host memory");
            if (m->wg_n)
                memcpy(w, m->wg, m->wg_n * sizeof *w);
            free(m->wg);
            m->wg = w;
            m->wg_cap = cap;
        }
        wg_maps *e = &m->wg[i];
        memset(e, 0, sizeof *e);
        /* the layer's (M, N, K) = (rows, out, in); A's rows are K long
         * forward, N long otherwise; B's (W, or X for dW) K long */
        int rc = rt_gemm90_maps(m->ctx, (unsigned)lay, PG_BF16, a, b, rows, out, in,
                                lay == PGK_GEMM_FORWARD ? in : out, in, bn, &e->a, &e->b);
        if (rc)
            return rc;
        e->pa = a;
        e->pb = b;
        e->layout = (uint32_t)lay;
        e->rows = rows;
        e->in = in;
        e->out = out;
        m->wg_n++;
    }
    m->wg_next = i + 1;
    *found = &m->wg[i];
    return 0;
}

/* A product on gemm_sm90: c[P, Q] (+)= the layout's A·B over R (+ bias),
 * the accumulate and the bias baked into the kernel (its epilogue knob). */
static int gemm_wg(pgrt_lm *m, pgrt_stream *s, const pgk_gemm_choice *ch, pgk_gemm_layout lay,
                   bool acc, pgrt_devptr a, pgrt_devptr b, pgrt_devptr bias, pgrt_devptr c,
                   uint32_t rows, uint32_t in, uint32_t out)
{
    pgk_knobs kn = ch->knobs;
    int ei = pgk_knob_index(ch->desc, "epilogue"), bi = pgk_knob_index(ch->desc, "bn");
    if (ei < 0 || bi < 0)
        return model_fail(PGRT_EKERNEL, "pgrt_lm: gemm_sm90 has no knob %s",
                          ei < 0 ? "epilogue" : "bn");
    kn.v[ei] = (acc ? 1u : 0u) | (bias ? 2u : 0u);
    const wg_maps *e = NULL;
    int rc = wg_maps_get(m, lay, a, b, rows, in, out, kn.v[bi], &e);
    if (rc)
        return rc;
    return launch_kn(m, s, K_LP_GEMM, ch->desc, &kn,
                     ARGS(pgrt_arg_tensor_map(&e->a), pgrt_arg_tensor_map(&e->b), P(c),
                          pgrt_arg_u64(bias), U(ch->m), U(ch->n), U(ch->k), U(ch->n)));
}

/* A base-weight product on the bf16 tensor-core family: a and b bf16, c
 * f32, in the layer's (M, N, K) = (rows, out, in), plus the f32 bias [out]
 * when bias is not 0 (forward only). On a compute capability 9.0 device
 * the choice for sm_90a, gemm_sm90, where it takes the shape and the
 * operands are 16-byte aligned (TMA); the mma.sync family otherwise. */
int gemm_lp(pgrt_lm *m, pgrt_stream *s, pgk_gemm_layout lay, bool acc, pgrt_devptr a,
            pgrt_devptr b, pgrt_devptr c, uint32_t rows, uint32_t in, uint32_t out,
            pgrt_devptr bias)
{
    pgk_gemm_choice ch;
    int rc = pgk_gemm_choose(lay, PG_BF16, PG_F32, rows, out, in, m->arch_target, m->sms, &ch);
    if (!rc && ch.desc == m->desc_wg) {
        if (((a | b) & 15u) == 0)
            return gemm_wg(m, s, &ch, lay, acc, a, b, bias, c, rows, in, out);
        rc = pgk_gemm_choose(lay, PG_BF16, PG_F32, rows, out, in, m->target, m->sms, &ch);
    }
    if (rc)
        return model_fail(PGRT_EINVAL, "pgrt_lm: no bf16 GEMM for %u x %u x %u", rows, out, in);
    if (ch.split > 1 && m->warming && ch.workspace_bytes > m->ws_need)
        m->ws_need = ch.workspace_bytes;
    if (ch.split > 1 && !m->warming && (!m->ws || pgrt_buf_bytes(m->ws) < ch.workspace_bytes))
        return model_fail(PGRT_ESTATE, "pgrt_lm: GEMM workspace smaller than at create");
    uint32_t flags = (acc ? 1u : 0u) | (bias ? 2u : 0u);
    pgrt_devptr ws = ch.split > 1 && m->ws ? pgrt_buf_ptr(m->ws) : c, bp = bias ? bias : c;
    if ((rc = launch_kn(m, s, K_LP_GEMM, ch.desc, &ch.knobs,
                        ARGS(P(a), P(b), P(c), P(bp), P(ws), U(rows), U(out), U(in), U(flags)))))
        return rc;
    if (ch.split <= 1)
        return 0;
    uint64_t cols = lay == PGK_GEMM_FORWARD ? out : in;
    uint64_t total = lay == PGK_GEMM_FORWARD    ? (uint64_t)rows * out
                     : lay == PGK_GEMM_BACKWARD_X ? (uint64_t)rows * in
                                                  : (uint64_t)out * in;
    return launch_kn(m, s, K_LP_GEMM, ch.reduce, &ch.reduce_knobs,
                     ARGS(P(ws), P(c), P(bp), U(total), U(cols), U(ch.split), U(flags)));
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

/* out = scale x[T, k] w^T for `parts` pairs at once (out part-major):
 * w their stacked A [parts r, k], or (wt) one B [k, r]. x bf16 or f32. */
static int lora_proj(pgrt_lm *m, pgrt_stream *s, pgrt_devptr x, bool bf16, pgrt_devptr w,
                     pgrt_devptr out, uint32_t k, uint32_t parts, bool wt, float scale)
{
    int kid = bf16 ? K_LORA_PROJ_BF16 : K_LORA_PROJ;
    uint32_t tiles = ((uint32_t)m->T + LORA_TILE - 1) / LORA_TILE, sp = lora_splits(m, tiles, k);
    pgk_knobs kn;
    pgrt_devptr ws, cnt;
    int rc = kn_of(m->desc[kid],
                   KN({"rows", m->T}, {"k", k}, {"cols", parts * m->r}, {"rank", m->r},
                      {"wt", wt ? 1u : 0u}, {"splits", sp}),
                   &kn);
    if (rc || (rc = lora_ws(m, tiles, sp, parts * m->r, &ws, &cnt)))
        return rc;
    return launch_kn(m, s, kid, m->desc[kid], &kn,
                     ARGS(P(x), P(w), P(out), P(ws), P(cnt), U(m->T), U(k), U(sp), F(scale)));
}

/* g = d[T, n]^T xa[T, R] for `parts` pairs: [n, r] (dB, one pair) or,
 * trans, [parts r, n] (their stacked dA). d bf16 or f32. */
static int lora_grad(pgrt_lm *m, pgrt_stream *s, pgrt_devptr d, bool bf16, pgrt_devptr xa,
                     pgrt_devptr g, uint32_t n, uint32_t parts, bool trans)
{
    int kid = bf16 ? K_LORA_GRAD_BF16 : K_LORA_GRAD;
    uint32_t tiles = (n + LORA_TILE - 1) / LORA_TILE, sp = lora_splits(m, tiles, (uint32_t)m->T);
    pgk_knobs kn;
    pgrt_devptr ws, cnt;
    int rc = kn_of(m->desc[kid],
                   KN({"rows", m->T}, {"n", n}, {"cols", parts * m->r}, {"rank", m->r},
                      {"trans", trans ? 1u : 0u}, {"splits", sp}),
                   &kn);
    if (rc || (rc = lora_ws(m, tiles, sp, parts * m->r, &ws, &cnt)))
        return rc;
    return launch_kn(m, s, kid, m->desc[kid], &kn,
                     ARGS(P(d), P(xa), P(g), P(ws), P(cnt), U(m->T), U(n), U(sp), F(1.0f)));
}

/* y[T, n] (+)= xa[T, R] w(n, R)^T, w = B [n, r] or (wt) the stacked A
 * [parts r, n] of `parts` pairs (xa part-major). */
static int lora_up(pgrt_lm *m, pgrt_stream *s, pgrt_devptr xa, pgrt_devptr w, pgrt_devptr y,
                   uint32_t n, bool wt, uint32_t parts, bool acc)
{
    return launch(m, s, K_LORA_UP,
                  KN({"rows", m->T}, {"n", n}, {"rank", parts * m->r}, {"wt", wt ? 1u : 0u},
                     {"acc", acc ? 1u : 0u}, {"part", parts > 1 ? (uint32_t)m->r : 0u}),
                  ARGS(P(xa), P(w), P(y), U(m->T), U(n), F(1.0f)));
}

/* y = x W^T (+ bias) (+ lora) for module mod of layer l; x [T, in] f32
 * and, in bf16, its copy m->xb that the caller made. The pairs of one
 * input are projected together at the group's first module: its callers
 * run a group's modules in order on one x (forward_layer). The LoRA term
 * comes first (y = xa B^T) and the base product adds into it, so y is
 * written once by each and read once, by the GEMM's epilogue. */
int linear_fwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
               pgrt_devptr y)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    bool thin = ld->a >= 0 && m->r <= LORA_THIN_RANK;
    /* xa = s x A^T (kept for the backward) */
    pgrt_devptr xa = m->la[l].xa[mod], w;
    int rc = 0;
    if (thin && ((ld->part == 0 &&
                  (rc = lora_proj(m, s, m->lowp ? m->xb : x, m->lowp, pofs(m->p, ld->a), xa,
                                  (uint32_t)in, (uint32_t)ld->parts, false, m->lora_scale))) ||
                 (rc = lora_up(m, s, xa, pofs(m->p, ld->b), y, (uint32_t)out, false, 1, false))))
        return rc;
    if (m->lowp) /* the bias in the GEMM's epilogue */
        rc = gemm_lp(m, s, PGK_GEMM_FORWARD, thin, m->xb, pgrt_buf_ptr(m->lw[l].lin[mod].buf), y,
                     m->T, in, out,
                     m->lw[l].bias[mod] ? pgrt_buf_ptr(m->lw[l].bias[mod]) : 0);
    else if (!(rc = weight_f32(m, s, &m->lw[l].lin[mod], &w)))
        rc = model_gemm(m, s, LIN_Y, thin, x, w, y, m->T, in, out);
    if (!rc && !m->lowp && m->lw[l].bias[mod])
        rc = launch(m, s, K_BIAS, KN({"rows", m->T}, {"cols", out}),
                    ARGS(P(y), P(pgrt_buf_ptr(m->lw[l].bias[mod])), U(m->T), U(out)));
    if (rc || ld->a < 0 || thin)
        return rc;
    /* ranks past the thin kernels: xa = s x A^T, y += xa B^T on the f32 GEMMs */
    uint32_t n = (uint32_t)m->T * m->r;
    if ((rc = model_gemm(m, s, LIN_Y, false, x, pofs(m->p, ld->a), xa, m->T, in, m->r)) ||
        (rc = launch(m, s, K_SCALE, KN({"n", n}), ARGS(P(xa), F(m->lora_scale), U(n)))))
        return rc;
    return model_gemm(m, s, LIN_Y, true, xa, pofs(m->p, ld->b), y, m->T, m->r, out);
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
    pgrt_devptr dxa = m->dxa + (uint64_t)ld->part * m->T * m->r * 4u;
    int rc;
    if ((rc = lora_grad(m, s, d, m->lowp, m->la[l].xa[mod], pofs(m->g, ld->b), (uint32_t)out, 1,
                        false)) ||
        (rc = lora_proj(m, s, d, m->lowp, pofs(m->p, ld->b), dxa, (uint32_t)out, 1, true,
                        m->lora_scale)))
        return rc;
    if (ld->part + 1 < ld->parts)
        return 0;
    const lora_d *lead = &m->lora[l * PGRT_LINEAR_COUNT + ld->lead];
    uint32_t parts = (uint32_t)ld->parts;
    if ((rc = lora_grad(m, s, x, false, m->dxa, pofs(m->g, lead->a), (uint32_t)in, parts, true)))
        return rc;
    return lora_up(m, s, m->dxa, pofs(m->p, lead->a), dx, (uint32_t)in, true, parts, acc);
}

/* Given dy [T, out] (and, in bf16, dyb: its bf16 copy where the kernel
 * that wrote dy made one, else 0): dx (+)= dy W (+ the LoRA path), and the
 * LoRA gradients of module mod of layer l. A group's dA and its dx term
 * wait for its last module: the callers run a group's modules in order on
 * one x and dx (backward_layer). A pair alone in its group whose dx is not
 * accumulated goes first (dx = dxa A) and the base product adds into it. */
int linear_bwd(pgrt_lm *m, pgrt_stream *s, int l, pgrt_linear mod, pgrt_devptr x,
               pgrt_devptr dy, pgrt_devptr dyb, pgrt_devptr dx, bool acc)
{
    int in, out;
    pgrt_linear_dims(&m->c, mod, &in, &out);
    lora_d *ld = &m->lora[l * PGRT_LINEAR_COUNT + mod];
    bool thin = ld->a >= 0 && m->r <= LORA_THIN_RANK, first = thin && ld->parts == 1 && !acc;
    pgrt_devptr w;
    int rc = 0;
    if (m->lowp && !dyb) {
        if ((rc = narrow(m, s, dy, m->dyb, (uint64_t)m->T * out)))
            return rc;
        dyb = m->dyb;
    }
    pgrt_devptr d = m->lowp ? dyb : dy;
    if (first && (rc = lora_bwd(m, s, l, mod, x, d, dx, false)))
        return rc;
    if (m->lowp)
        rc = gemm_lp(m, s, PGK_GEMM_BACKWARD_X, acc || first, dyb,
                     pgrt_buf_ptr(m->lw[l].lin[mod].buf), dx, m->T, in, out, 0);
    else if (!(rc = weight_f32(m, s, &m->lw[l].lin[mod], &w)))
        rc = model_gemm(m, s, LIN_DX, acc || first, dy, w, dx, m->T, in, out);
    if (rc || ld->a < 0 || first)
        return rc;
    if (thin)
        return lora_bwd(m, s, l, mod, x, d, dx, true);
    /* dB = dy^T (s xa); dxa = s dy B; dA = dxa^T x; dx += dxa A */
    uint32_t n = (uint32_t)m->T * m->r;
    if ((rc = model_gemm(m, s, LIN_DW, false, dy, m->la[l].xa[mod], pofs(m->g, ld->b), m->T,
                         m->r, out)) ||
        (rc = model_gemm(m, s, LIN_DX, false, dy, pofs(m->p, ld->b), m->dxa, m->T, m->r, out)) ||
        (rc = launch(m, s, K_SCALE, KN({"n", n}), ARGS(P(m->dxa), F(m->lora_scale), U(n)))) ||
        (rc = model_gemm(m, s, LIN_DW, false, m->dxa, x, pofs(m->g, ld->a), m->T, in, m->r)))
        return rc;
    return model_gemm(m, s, LIN_DX, true, m->dxa, pofs(m->p, ld->a), dx, m->T, in, m->r);
}
