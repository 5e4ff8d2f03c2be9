/* SPDX-License-Identifier: MIT */
/*
 * The two reducing products of LoRA as register-tiled kernels that finish
 * their own split sums (no reduce launch), for up to 64 rank columns at
 * once: the pairs of a layer that share an input (q, k, v; gate, up) go
 * through in one pass over it.
 *
 *   lora_proj_{f32,bf16}  out(t, j) = scale * sum_k x[t, k] w(j, k)
 *                         (xa = s x A^T for all pairs of x at once, with
 *                         w = their stacked A [R, K]; dxa = s dy B with
 *                         w(j, k) = B[k, j], knob wt)
 *   lora_grad_{f32,bf16}  out(n, j) = scale * sum_t d[t, n] xa(t, j)
 *                         (dB = dy^T xa as [n, r]; the stacked dA = dxa^T x
 *                         as [R, n], knob trans)
 *
 * The suffix is the storage of the long operand (x or d); w, xa and the
 * results are f32. R (knob cols, at most 64) columns, cut into parts of
 * r (knob rank) columns: a result or an xa operand is stored part-major,
 * part p a [T, r] matrix at p * T * r (xa(t, j) at ((j / r) T + t) r +
 * j % r), so each part is the plain [T, r] of one pair; with R = r that
 * is a plain [T, R].
 *
 * A block owns 64 rows (t, or n) by all R columns (padded to R16, a
 * multiple of 16) and sums a slice (grid y, param `split`) of the
 * reduced dimension in chunks of 32: each chunk of both operands is
 * staged in shared memory as [32][64] and [32][R16], and a thread adds
 * the outer products of a 4 x 4 tile over its k-group's share of the
 * chunk (two 16-byte shared loads, 16 FMA a step). The k-groups are added
 * in group order, each slice's sums go to the workspace, and the last
 * block of a row tile to arrive (an integer counter, reset by it) adds
 * the slices in slice order, scales and stores: no float atomics, the
 * same bits every run whatever the arrival order.
 */
#include "model.h"

#include <string.h>

#define TILE_ROWS 64u       /* rows (t or n) a block */
#define KC 32u              /* the reduced dimension a chunk */
#define RANK_MAX 64u        /* R, all parts */
#define LEN_MAX 2147483640u /* k or n: 2^31 - 8, so that the 16-byte loads may take it */
#define SLOTS_MAX 12u       /* staging pieces a thread a chunk, either operand */

/* The block's shape for R columns. */
typedef struct shape {
    uint32_t R, R16;
    uint32_t tcn; /* thread columns: R16 / 4 */
    uint32_t ntg; /* threads of a k-group: 16 x tcn */
    uint32_t kg;  /* k-groups */
    uint32_t nt;  /* threads a block */
} shape;

static shape shape_of(uint32_t cols)
{
    shape s;
    s.R = cols;
    s.R16 = (s.R + 15u) & ~15u;
    s.tcn = s.R16 / 4u;
    s.ntg = 16u * s.tcn;
    s.kg = 256u / s.ntg ? 256u / s.ntg : 1u;
    s.nt = s.ntg * s.kg;
    return s;
}

/* ---------------------------------------------------------------- staging */

/* One piece of a chunk a thread moves from global to shared memory:
 * `width` elements (1, 4, or 8 for bf16), stored 16 bytes at a time
 * (stride 0) or one element every `stride` bytes (a transposed store). */
typedef struct slot {
    pg_reg ga;   /* u64 global address, advanced a chunk a turn */
    pg_reg sa;   /* u32 shared address */
    pg_reg ok;   /* pred: a piece of this thread inside the tile */
    pg_reg kpos; /* u32 its place along the reduced dimension in the chunk */
    pg_reg v[8];
} slot;

typedef struct stager {
    slot s[SLOTS_MAX];
    uint32_t n, width, stride;
    bool bf16;
    pg_val step; /* bytes ga moves a chunk */
} stager;

/* Slot i's piece index e = tid + i * nt, and whether e < pieces. */
static pg_reg piece_of(pg_kernel *k, pg_reg tid, uint32_t i, uint32_t nt, uint32_t pieces,
                       pg_reg *ok)
{
    pg_reg e = pgv_add(k, PG_U32, tid, pg_u32(i * nt));
    *ok = pgv_setp(k, PG_CMP_LO, PG_U32, e, pg_u32(pieces));
    return e;
}

/* Load the chunk at `kc` (pieces at or past kend, or outside the tile,
 * read as 0). */
static void stage_load(pg_kernel *k, stager *st, pg_reg kc, pg_val kend)
{
    for (uint32_t i = 0; i < st->n; i++) {
        slot *s = &st->s[i];
        pg_reg kk = pgv_add(k, PG_U32, kc, s->kpos);
        pg_reg ok = pgv_and(k, PG_PRED, s->ok, pgv_setp(k, PG_CMP_LO, PG_U32, kk, kend));
        if (st->bf16 && st->width == 8) {
            pg_reg w[4];
            for (uint32_t j = 0; j < 4; j++)
                w[j] = pgv_mov(k, PG_U32, pg_u32(0));
            pg_guard(k, ok, false);
            pg_ld_v(k, PG_SPACE_GLOBAL, PG_U32, 4, s->ga, 0, w);
            /* element 2j is the low half: widened by moving it up */
            for (uint32_t j = 0; j < 4; j++) {
                pg_mov(k, PG_B32, s->v[2 * j], pgv_shl(k, PG_B32, w[j], pg_u32(16)));
                pg_mov(k, PG_B32, s->v[2 * j + 1], pgv_and(k, PG_B32, w[j], pg_u32(0xFFFF0000u)));
            }
        } else if (st->width == 4) {
            for (uint32_t j = 0; j < 4; j++)
                pg_mov(k, PG_F32, s->v[j], pg_f32(0.0f));
            pg_guard(k, ok, false);
            pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, s->ga, 0, s->v);
        } else if (st->bf16) {
            pg_reg h = pgv_mov(k, PG_U16, pg_u32(0));
            pg_guard(k, ok, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_U16, s->ga, 0, h);
            pg_reg w = pgv_cvt(k, PG_U32, PG_U16, PG_RND_NONE, h);
            pg_mov(k, PG_B32, s->v[0], pgv_shl(k, PG_B32, w, pg_u32(16)));
        } else {
            pg_mov(k, PG_F32, s->v[0], pg_f32(0.0f));
            pg_guard(k, ok, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, s->ga, 0, s->v[0]);
        }
        pg_add(k, PG_U64, s->ga, s->ga, st->step);
    }
}

static void stage_store(pg_kernel *k, const stager *st)
{
    for (uint32_t i = 0; i < st->n; i++) {
        const slot *s = &st->s[i];
        /* a thread without a piece in this slot stores nothing */
        if (st->stride == 0) {
            for (uint32_t q = 0; q < st->width; q += 4) {
                pg_guard(k, s->ok, false);
                pg_st_v(k, PG_SPACE_SHARED, PG_F32, 4, s->sa, (int64_t)q * 4, s->v + q);
            }
        } else {
            for (uint32_t j = 0; j < st->width; j++) {
                pg_guard(k, s->ok, false);
                pg_st(k, PG_SPACE_SHARED, PG_F32, s->sa, (int64_t)j * st->stride, s->v[j]);
            }
        }
    }
}

/* Size a stager of `pieces` pieces for nt threads; its slots' registers. */
static void stager_init(pg_kernel *k, stager *st, uint32_t pieces, uint32_t nt, uint32_t width,
                        bool bf16, uint32_t stride, pg_val step)
{
    st->n = (pieces + nt - 1) / nt;
    st->width = width;
    st->bf16 = bf16;
    st->stride = stride;
    st->step = step;
    if (st->n > SLOTS_MAX) {
        /* the knob ranges keep every shape below this */
        pg_comment(k, "staging: too many pieces a thread");
        st->n = SLOTS_MAX;
    }
    for (uint32_t i = 0; i < st->n; i++)
        for (uint32_t j = 0; j < width; j++)
            st->s[i].v[j] = pg_reg_new(k, PG_F32);
}

/* ---------------------------------------------------------------- the tile */

typedef struct tile {
    shape sh;
    pg_reg tid, tig, g, tr, tc;
    pg_shared s1, s2, red, flag;
    pg_reg acc[16];
} tile;

static void tile_init(pg_kernel *k, tile *t, shape sh)
{
    t->sh = sh;
    t->s1 = pg_shared_static(k, PG_F32, KC * TILE_ROWS, 16, "rows_tile");
    t->s2 = pg_shared_static(k, PG_F32, KC * sh.R16, 16, "rank_tile");
    t->red =
        pg_shared_static(k, PG_F32, sh.kg > 1 ? (sh.kg - 1) * 16u * sh.ntg : 4u, 16, "group_sums");
    t->flag = pg_shared_static(k, PG_U32, 1, 4, "last");
    t->tid = pg_sreg_read(k, PG_SREG_TID_X);
    t->tig = pgv_rem(k, PG_U32, t->tid, pg_u32(sh.ntg));
    t->g = pgv_div(k, PG_U32, t->tid, pg_u32(sh.ntg));
    t->tr = pgv_and(k, PG_U32, t->tig, pg_u32(15));
    t->tc = pgv_shr(k, PG_U32, t->tig, pg_u32(4));
    for (uint32_t i = 0; i < 16; i++)
        t->acc[i] = pgk_zero_f32(k);
    /* the rank tile's padding columns stay 0: staging writes j < R only */
    pg_reg sb = pgv_mov(k, PG_U32, pg_shared_addr(t->s2));
    for (uint32_t e0 = 0; e0 < KC * sh.R16; e0 += sh.nt) {
        pg_reg e = pgv_add(k, PG_U32, t->tid, pg_u32(e0));
        pg_reg ok = pgv_setp(k, PG_CMP_LO, PG_U32, e, pg_u32(KC * sh.R16));
        pg_reg a = pgv_mad(k, PG_U32, e, pg_u32(4), sb);
        pg_guard(k, ok, false);
        pg_st(k, PG_SPACE_SHARED, PG_F32, a, 0, pg_f32(0.0f));
    }
}

/* The chunk loop over [k0, k1): stage, then the thread's 4 x 4 outer
 * products over its group's KC / kg steps, in order. */
static void tile_loop(pg_kernel *k, tile *t, stager *a, stager *b, pg_reg k0, pg_reg k1)
{
    const shape *sh = &t->sh;
    uint32_t kpg = KC / sh->kg;
    pg_reg kstart = pgv_mul(k, PG_U32, t->g, pg_u32(kpg));
    /* one emitting call an argument list: the same PTX from every compiler */
    pg_reg s1 = pgv_mov(k, PG_U32, pg_shared_addr(t->s1));
    pg_reg s1b =
        pgv_mad(k, PG_U32,
                pgv_mad(k, PG_U32, kstart, pg_u32(TILE_ROWS), pgv_shl(k, PG_U32, t->tr, pg_u32(2))),
                pg_u32(4), s1);
    pg_reg s2 = pgv_mov(k, PG_U32, pg_shared_addr(t->s2));
    pg_reg s2b =
        pgv_mad(k, PG_U32,
                pgv_mad(k, PG_U32, kstart, pg_u32(sh->R16), pgv_shl(k, PG_U32, t->tc, pg_u32(2))),
                pg_u32(4), s2);
    stage_load(k, a, k0, k1);
    stage_load(k, b, k0, k1);
    pgk_loop L;
    pg_reg kc = pgk_loop_begin(k, &L, k0, k1, pg_u32(KC));
    pg_bar_sync(k, 0); /* the last turn's reads are done */
    stage_store(k, a);
    stage_store(k, b);
    pg_bar_sync(k, 0);
    /* the next chunk's loads in flight during this one's products */
    pg_reg kn = pgv_add(k, PG_U32, kc, pg_u32(KC));
    stage_load(k, a, kn, k1);
    stage_load(k, b, kn, k1);
    for (uint32_t u = 0; u < kpg; u++) {
        pg_reg x[4], w[4];
        for (uint32_t i = 0; i < 4; i++) {
            x[i] = pg_reg_new(k, PG_F32);
            w[i] = pg_reg_new(k, PG_F32);
        }
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, s1b, (int64_t)u * TILE_ROWS * 4, x);
        pg_ld_v(k, PG_SPACE_SHARED, PG_F32, 4, s2b, (int64_t)u * sh->R16 * 4, w);
        for (uint32_t i = 0; i < 4; i++)
            for (uint32_t j = 0; j < 4; j++)
                pg_fma(k, PG_F32, t->acc[i * 4 + j], x[i], w[j], t->acc[i * 4 + j]);
    }
    pgk_loop_end(k, &L);
}

/* How a finished element o = (row, j) of the tile is stored. */
typedef struct tile_out {
    pg_reg out, rows, scale;
    pg_reg row0;
    uint32_t rank;
    bool part_major; /* ((j / rank) rows + t) rank + j % rank; else trans */
    bool trans;      /* j * rows + n; else n * R + j */
} tile_out;

/* Add the k-groups, write the slice's sums, and let the last block of the
 * row tile add the slices in order and store. */
static void tile_finish(pg_kernel *k, tile *t, pg_reg ws, pg_reg cnt, pg_reg splits,
                        const tile_out *o, pg_label done)
{
    const shape *sh = &t->sh;
    uint32_t tsz = TILE_ROWS * sh->R16;
    pg_reg rb = pgv_mov(k, PG_U32, pg_shared_addr(t->red));
    if (sh->kg > 1) {
        pg_reg gt0 = pgv_setp(k, PG_CMP_NE, PG_U32, t->g, pg_u32(0));
        pg_reg mine =
            pgv_mad(k, PG_U32, pgv_sub(k, PG_U32, t->g, pg_u32(1)), pg_u32(16 * sh->ntg), t->tig);
        pg_reg ma = pgv_mad(k, PG_U32, mine, pg_u32(4), rb);
        for (uint32_t e = 0; e < 16; e++) {
            pg_guard(k, gt0, false);
            pg_st(k, PG_SPACE_SHARED, PG_F32, ma, (int64_t)e * sh->ntg * 4, t->acc[e]);
        }
        pg_bar_sync(k, 0);
        pg_reg oa = pgv_mad(k, PG_U32, t->tig, pg_u32(4), rb);
        for (uint32_t g = 1; g < sh->kg; g++)
            for (uint32_t e = 0; e < 16; e++) {
                pg_reg v = pgv_ld(k, PG_SPACE_SHARED, PG_F32, oa,
                                  (int64_t)((g - 1) * 16 + e) * sh->ntg * 4);
                pg_add(k, PG_F32, t->acc[e], t->acc[e], v);
            }
    }
    /* this slice's sums: ws[(y * tiles + x) * tsz + row * R16 + j] */
    pg_reg bx = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg nbx = pg_sreg_read(k, PG_SREG_NCTAID_X);
    pg_reg y = pg_sreg_read(k, PG_SREG_CTAID_Y);
    pg_reg tile_idx = pgv_mad(k, PG_U32, y, nbx, bx);
    pg_reg wst = pgk_addr_add(k, ws, pgv_mul(k, PG_U32, tile_idx, pg_u32(tsz)), 4);
    pg_reg g0 = pgv_setp(k, PG_CMP_EQ, PG_U32, t->g, pg_u32(0));
    pg_reg mine =
        pgv_mad(k, PG_U32, t->tr, pg_u32(4 * sh->R16), pgv_shl(k, PG_U32, t->tc, pg_u32(2)));
    pg_reg wa = pgk_addr_add(k, wst, mine, 4);
    for (uint32_t i = 0; i < 4; i++) {
        pg_guard(k, g0, false);
        pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, wa, (int64_t)i * sh->R16 * 4, t->acc + i * 4);
    }
    /* publish, count the slices of this row tile in; the last one adds */
    pg_fence(k, PG_SCOPE_GPU, false);
    pg_bar_sync(k, 0);
    pg_reg t0 = pgv_setp(k, PG_CMP_EQ, PG_U32, t->tid, pg_u32(0));
    pg_label skip = pg_label_new(k, "count_skip");
    pg_bra_if(k, t0, true, skip);
    pg_reg ca = pgk_addr_add(k, cnt, bx, 4);
    pg_reg old = pg_reg_new(k, PG_U32);
    /* the fences on both sides of the count: the block's sums (ordered
     * before by the barrier) are released with it, the other slices'
     * acquired before the barrier below lets the block read them */
    pg_fence(k, PG_SCOPE_GPU, false);
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_U32, old, ca, 0, pg_u32(1), pg_none());
    pg_fence(k, PG_SCOPE_GPU, false);
    pg_reg last = pgv_setp(k, PG_CMP_EQ, PG_U32, pgv_add(k, PG_U32, old, pg_u32(1)), splits);
    /* every slice is in: the counter is free for the next launch */
    pg_guard(k, last, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, ca, 0, pg_u32(0));
    pg_st(k, PG_SPACE_SHARED, PG_U32, pg_shared_addr(t->flag), 0,
          pgv_selp(k, PG_U32, pg_u32(1), pg_u32(0), last));
    pg_label_bind(k, skip);
    pg_bar_sync(k, 0);
    pg_reg f = pgv_ld(k, PG_SPACE_SHARED, PG_U32, pg_shared_addr(t->flag), 0);
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, f, pg_u32(0)), false, done);
    pg_fence(k, PG_SCOPE_GPU, false);

    /* the last block: element e of the tile, the slices in order */
    pg_reg base = pgk_addr_add(k, ws, pgv_mul(k, PG_U32, bx, pg_u32(tsz)), 4);
    pg_reg ystride = pgv_mul_wide(k, PG_U32, nbx, pg_u32(tsz * 4u));
    pgk_loop E;
    pg_reg e = pgk_loop_begin(k, &E, t->tid, pg_u32(tsz), pg_u32(sh->nt));
    pg_reg a = pgk_addr_add(k, base, e, 4);
    pg_reg sum = pgk_zero_f32(k);
    pgk_loop Y;
    pg_reg sy = pgk_loop_begin(k, &Y, pg_u32(0), splits, pg_u32(4));
    pg_reg v[4];
    for (uint32_t u = 0; u < 4; u++) {
        pg_reg ok = pgv_setp(k, PG_CMP_LO, PG_U32, pgv_add(k, PG_U32, sy, pg_u32(u)), splits);
        v[u] = pgk_zero_f32(k);
        pg_guard(k, ok, false);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v[u]);
        pg_add(k, PG_U64, a, a, ystride);
    }
    for (uint32_t u = 0; u < 4; u++)
        pg_add(k, PG_F32, sum, sum, v[u]);
    pgk_loop_end(k, &Y);
    pg_mul(k, PG_F32, sum, sum, o->scale);
    pg_reg lrow = pgv_div(k, PG_U32, e, pg_u32(sh->R16));
    pg_reg j = pgv_sub(k, PG_U32, e, pgv_mul(k, PG_U32, lrow, pg_u32(sh->R16)));
    pg_reg row = pgv_add(k, PG_U32, o->row0, lrow);
    pg_reg in_rows = pgv_setp(k, PG_CMP_LO, PG_U32, row, o->rows);
    pg_reg ok = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LO, PG_U32, j, pg_u32(sh->R)), in_rows);
    pg_reg dst;
    if (o->part_major) {
        pg_reg p = pgv_div(k, PG_U32, j, pg_u32(o->rank));
        pg_reg jr = pgv_sub(k, PG_U32, j, pgv_mul(k, PG_U32, p, pg_u32(o->rank)));
        pg_reg prow = pgv_mad(k, PG_U32, p, o->rows, row);
        dst = pgk_addr2(k, o->out, prow, pg_u32(o->rank), jr, 4);
    } else if (o->trans) {
        dst = pgk_addr2(k, o->out, j, o->rows, row, 4);
    } else {
        dst = pgk_addr2(k, o->out, row, pg_u32(sh->R), j, 4);
    }
    pg_guard(k, ok, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, dst, 0, sum);
    pgk_loop_end(k, &E);
}

/* [lo, hi) of slice y (ctaid.y) of n, in multiples of KC. */
static void slice_of(pg_kernel *k, pg_reg n, pg_reg splits, pg_reg *lo, pg_reg *hi)
{
    pgk_split_range(k, n, splits, KC, lo, hi);
}

/* What both tile kernels open with: their nine params loaded in order (two
 * operands a and b, out, the split sums' workspace and counter, two sizes
 * n[0] and n[1], splits, scale), the tile, the first of the block's 64
 * rows of n[0] (proj) or n[1] (grad) in row0, the slice [lo, hi) of
 * n[along] that this split sums, and the tile's two shared addresses. */
typedef struct tile_args {
    pg_reg a, b, out, ws, cnt, n[2], splits, scale;
    pg_reg row0, lo, hi, s1, s2;
} tile_args;

static void tile_begin(pg_kernel *k, const pg_param *p, shape sh, unsigned along, tile *t,
                       tile_args *g)
{
    pg_kernel_set_maxntid(k, sh.nt, 1, 1);
    g->a = pg_param_load(k, p[0]);
    g->b = pg_param_load(k, p[1]);
    g->out = pg_param_load(k, p[2]);
    g->ws = pg_param_load(k, p[3]);
    g->cnt = pg_param_load(k, p[4]);
    g->n[0] = pg_param_load(k, p[5]);
    g->n[1] = pg_param_load(k, p[6]);
    g->splits = pg_param_load(k, p[7]);
    g->scale = pg_param_load(k, p[8]);
    tile_init(k, t, sh);
    g->row0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(TILE_ROWS));
    slice_of(k, g->n[along], g->splits, &g->lo, &g->hi);
    g->s1 = pgv_mov(k, PG_U32, pg_shared_addr(t->s1));
    g->s2 = pgv_mov(k, PG_U32, pg_shared_addr(t->s2));
}

/* ---------------------------------------------------------------- lora_proj */

enum { PJ_ROWS, PJ_K, PJ_COLS, PJ_RANK, PJ_WT, PJ_VEC, PJ_SPLITS };

static int build_proj(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn,
                      bool bf16)
{
    (void)d;
    uint32_t r = kn[PJ_RANK];
    bool wt = kn[PJ_WT] != 0, vec = kn[PJ_VEC] != 0;
    shape sh = shape_of(kn[PJ_COLS]);
    tile t;
    tile_args g;
    tile_begin(k, p, sh, 1, &t, &g); /* split along K */
    pg_reg x = g.a, w = g.b, out = g.out, ws = g.ws, cnt = g.cnt, rows = g.n[0], kd = g.n[1];
    pg_reg splits = g.splits, scale = g.scale, row0 = g.row0, k0 = g.lo, k1 = g.hi;
    unsigned esz = bf16 ? 2u : 4u;
    pg_reg s1 = g.s1, s2 = g.s2;

    /* x [rows, K]: a piece is `width` k of one row, stored down the k
     * column of the transposed tile [KC][64]; a warp's pieces are 32
     * rows, so the stores hit 32 banks */
    stager a, b;
    uint32_t xw = vec ? 16u / esz : 1u;
    stager_init(k, &a, TILE_ROWS * KC / xw, sh.nt, xw, bf16, TILE_ROWS * 4u, pg_u32(KC * esz));
    for (uint32_t i = 0; i < a.n; i++) {
        slot *s = &a.s[i];
        pg_reg e = piece_of(k, t.tid, i, sh.nt, TILE_ROWS * KC / xw, &s->ok);
        pg_reg lr = pgv_and(k, PG_U32, e, pg_u32(TILE_ROWS - 1));
        s->kpos = pgv_mul(k, PG_U32, pgv_shr(k, PG_U32, e, pg_u32(6)), pg_u32(xw));
        pg_reg row = pgv_add(k, PG_U32, row0, lr);
        pg_and(k, PG_PRED, s->ok, s->ok, pgv_setp(k, PG_CMP_LO, PG_U32, row, rows));
        s->ga = pgk_addr2(k, x, row, kd, pgv_add(k, PG_U32, k0, s->kpos), esz);
        s->sa =
            pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, s->kpos, pg_u32(TILE_ROWS), lr), pg_u32(4), s1);
    }
    if (!wt) {
        /* w [R, K] (the stacked A): pieces along k of one row j, stored
         * down the tile's column j */
        uint32_t ww = vec ? 4u : 1u, np = sh.R * KC / ww;
        stager_init(k, &b, np, sh.nt, ww, false, sh.R16 * 4u, pg_u32(KC * 4u));
        for (uint32_t i = 0; i < b.n; i++) {
            slot *s = &b.s[i];
            pg_reg e = piece_of(k, t.tid, i, sh.nt, np, &s->ok);
            pg_reg q = pgv_div(k, PG_U32, e, pg_u32(sh.R));
            pg_reg j = pgv_sub(k, PG_U32, e, pgv_mul(k, PG_U32, q, pg_u32(sh.R)));
            s->kpos = pgv_mul(k, PG_U32, q, pg_u32(ww));
            s->ga = pgk_addr2(k, w, j, kd, pgv_add(k, PG_U32, k0, s->kpos), 4);
            s->sa =
                pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, s->kpos, pg_u32(sh.R16), j), pg_u32(4), s2);
        }
    } else {
        /* w [K, R] (B): rows of R along k, 16 bytes at a time when R % 4 == 0 */
        uint32_t ww = sh.R % 4 == 0 ? 4u : 1u, per = sh.R / ww, np = KC * per;
        stager_init(k, &b, np, sh.nt, ww, false, ww == 4 ? 0u : 4u, pg_u32(KC * sh.R * 4u));
        for (uint32_t i = 0; i < b.n; i++) {
            slot *s = &b.s[i];
            pg_reg e = piece_of(k, t.tid, i, sh.nt, np, &s->ok);
            s->kpos = pgv_div(k, PG_U32, e, pg_u32(per));
            pg_reg j =
                pgv_mul(k, PG_U32, pgv_sub(k, PG_U32, e, pgv_mul(k, PG_U32, s->kpos, pg_u32(per))),
                        pg_u32(ww));
            s->ga = pgk_addr2(k, w, pgv_add(k, PG_U32, k0, s->kpos), pg_u32(sh.R), j, 4);
            s->sa =
                pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, s->kpos, pg_u32(sh.R16), j), pg_u32(4), s2);
        }
    }
    tile_loop(k, &t, &a, &b, k0, k1);
    tile_out o = {out, rows, scale, row0, r, true, false};
    pg_label done = pg_label_new(k, "exit");
    tile_finish(k, &t, ws, cnt, splits, &o, done);
    return pgk_finish(k, done);
}

static int build_proj_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    return build_proj(k, d, p, kn, false);
}

static int build_proj_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    return build_proj(k, d, p, kn, true);
}

static unsigned vec_elems(const pgk_desc *d) { return strstr(d->name, "bf16") ? 8u : 4u; }

/* The one in-range combination refused: vec 1 with a k (n) not a
 * multiple of 16 bytes, which pgk_pick never makes. */
static int launch_tiles(const pgk_desc *d, const uint32_t *kn, uint32_t n, uint32_t vec_len,
                        pgk_launch *out)
{
    if (kn[PJ_VEC] && vec_len % vec_elems(d) != 0)
        return PG_ERANGE;
    *out = (pgk_launch){
        {pgk_ceil_div(n, TILE_ROWS), kn[PJ_SPLITS], 1}, {shape_of(kn[PJ_COLS]).nt, 1, 1}, 0};
    return PG_OK;
}

static int launch_proj(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    return launch_tiles(d, kn, kn[PJ_ROWS], kn[PJ_K], out);
}

/* 16-byte loads of the long operand where its rows allow them. */
static void pick_vec(const pgk_desc *d, uint32_t *kn)
{
    uint32_t len = kn[PJ_K]; /* k, or n (GR_N, the same slot): the long operand's row length */
    kn[PJ_VEC] = len % vec_elems(d) == 0;
}

static const pgk_param proj_params[] = {
    {"x", PG_U64, true},  {"w", PG_U64, true},       {"out", PG_U64, true},
    {"ws", PG_U64, true}, {"cnt", PG_U64, true},     {"rows", PG_U32, false},
    {"k", PG_U32, false}, {"split", PG_U32, false}, {"scale", PG_F32, false},
};
static const pgk_knob proj_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "rows of x (T)", false},
    {"k", 1536, 1, LEN_MAX, "the summed length: x's row length", false},
    {"cols", 16, 1, RANK_MAX, "R: columns of out, rows of w (the pairs' ranks stacked)", true},
    {"rank", 16, 1, RANK_MAX, "r: columns of a part of out (part-major)", true},
    {"wt", 0, 0, 1, "0: w is [R, k] (stacked A's); 1: w is [k, R] (B)", true},
    {"vec", 1, 0, 1, "16-byte loads of x: needs k a multiple of 16 bytes (picked from k)", true},
    {"split", 1, 1, 65535, "slices of k (grid y)", false},
};

const pgk_desc pgk_desc_lora_proj_f32 = {
    .name = "lora_proj_f32",
    .summary = "LoRA out[T,R] = scale x[T,k] w^T over k slices, finished in order in-kernel",
    PGK_PARAMS(proj_params), PGK_KNOBS(proj_knobs),
    .min_target = PG_SM_70, .build = build_proj_f32, .launch = launch_proj, .pick = pick_vec,
};

const pgk_desc pgk_desc_lora_proj_bf16 = {
    .name = "lora_proj_bf16",
    .summary = "LoRA out[T,R] = scale x[T,k] w^T, x bf16, over k slices, finished in-kernel",
    PGK_PARAMS(proj_params), PGK_KNOBS(proj_knobs),
    .min_target = PG_SM_70, .build = build_proj_bf16, .launch = launch_proj, .pick = pick_vec,
};

/* ---------------------------------------------------------------- lora_grad */

enum { GR_ROWS, GR_N, GR_COLS, GR_RANK, GR_TRANS, GR_VEC, GR_SPLITS };
_Static_assert((int)GR_N == (int)PJ_K && (int)GR_VEC == (int)PJ_VEC,
               "pick_vec serves both knob tables");

static int build_grad(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn,
                      bool bf16)
{
    (void)d;
    uint32_t r = kn[GR_RANK];
    bool trans = kn[GR_TRANS] != 0, vec = kn[GR_VEC] != 0;
    shape sh = shape_of(kn[GR_COLS]);
    tile t;
    tile_args g;
    tile_begin(k, p, sh, 0, &t, &g); /* split along the rows */
    pg_reg dd = g.a, xa = g.b, out = g.out, ws = g.ws, cnt = g.cnt, rows = g.n[0], n = g.n[1];
    pg_reg splits = g.splits, scale = g.scale, n0 = g.row0, t0 = g.lo, t1 = g.hi;
    unsigned esz = bf16 ? 2u : 4u;
    pg_reg s1 = g.s1, s2 = g.s2;

    /* d [T, N]: a piece is `width` columns of one row t, stored as is */
    stager a, b;
    uint32_t dw = vec ? 16u / esz : 1u, per = TILE_ROWS / dw;
    stager_init(k, &a, KC * per, sh.nt, dw, bf16, dw == 1 ? 4u : 0u,
                pgv_mul_wide(k, PG_U32, n, pg_u32(KC * esz)));
    for (uint32_t i = 0; i < a.n; i++) {
        slot *s = &a.s[i];
        pg_reg e = piece_of(k, t.tid, i, sh.nt, KC * per, &s->ok);
        s->kpos = pgv_div(k, PG_U32, e, pg_u32(per));
        pg_reg c = pgv_mul(
            k, PG_U32, pgv_sub(k, PG_U32, e, pgv_mul(k, PG_U32, s->kpos, pg_u32(per))), pg_u32(dw));
        pg_reg col = pgv_add(k, PG_U32, n0, c);
        pg_and(k, PG_PRED, s->ok, s->ok, pgv_setp(k, PG_CMP_LO, PG_U32, col, n));
        s->ga = pgk_addr2(k, dd, pgv_add(k, PG_U32, t0, s->kpos), n, col, esz);
        s->sa =
            pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, s->kpos, pg_u32(TILE_ROWS), c), pg_u32(4), s1);
    }
    /* xa, part-major: 16 bytes at a time when r and R are multiples of 4
     * (a piece never crosses a part then) */
    uint32_t xw = r % 4 == 0 && sh.R % 4 == 0 ? 4u : 1u, xper = sh.R / xw;
    stager_init(k, &b, KC * xper, sh.nt, xw, false, xw == 4 ? 0u : 4u, pg_u32(KC * r * 4u));
    for (uint32_t i = 0; i < b.n; i++) {
        slot *s = &b.s[i];
        pg_reg e = piece_of(k, t.tid, i, sh.nt, KC * xper, &s->ok);
        s->kpos = pgv_div(k, PG_U32, e, pg_u32(xper));
        pg_reg j =
            pgv_mul(k, PG_U32, pgv_sub(k, PG_U32, e, pgv_mul(k, PG_U32, s->kpos, pg_u32(xper))),
                    pg_u32(xw));
        pg_reg part = pgv_div(k, PG_U32, j, pg_u32(r));
        pg_reg jr = pgv_sub(k, PG_U32, j, pgv_mul(k, PG_U32, part, pg_u32(r)));
        pg_reg prow = pgv_mad(k, PG_U32, part, rows, pgv_add(k, PG_U32, t0, s->kpos));
        s->ga = pgk_addr2(k, xa, prow, pg_u32(r), jr, 4);
        s->sa = pgv_mad(k, PG_U32, pgv_mad(k, PG_U32, s->kpos, pg_u32(sh.R16), j), pg_u32(4), s2);
    }
    tile_loop(k, &t, &a, &b, t0, t1);
    tile_out o = {out, n, scale, n0, r, false, trans};
    pg_label done = pg_label_new(k, "exit");
    tile_finish(k, &t, ws, cnt, splits, &o, done);
    return pgk_finish(k, done);
}

static int build_grad_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    return build_grad(k, d, p, kn, false);
}

static int build_grad_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    return build_grad(k, d, p, kn, true);
}

static int launch_grad(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    return launch_tiles(d, kn, kn[GR_N], kn[GR_N], out);
}

static const pgk_param grad_params[] = {
    {"d", PG_U64, true},  {"xa", PG_U64, true},      {"out", PG_U64, true},
    {"ws", PG_U64, true}, {"cnt", PG_U64, true},     {"rows", PG_U32, false},
    {"n", PG_U32, false}, {"split", PG_U32, false}, {"scale", PG_F32, false},
};
static const pgk_knob grad_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "rows of d and xa (T), the summed length", false},
    {"n", 1536, 1, LEN_MAX, "columns of d", false},
    {"cols", 16, 1, RANK_MAX, "R: columns of xa and of the result (the pairs' ranks stacked)",
     true},
    {"rank", 16, 1, RANK_MAX, "r: columns of a part of xa (part-major)", true},
    {"trans", 0, 0, 1, "0: out is [n, R] (dB); 1: out is [R, n] (the stacked dA)", true},
    {"vec", 1, 0, 1, "16-byte loads of d: needs n a multiple of 16 bytes (picked from n)", true},
    {"split", 1, 1, 65535, "slices of the rows (grid y)", false},
};

const pgk_desc pgk_desc_lora_grad_f32 = {
    .name = "lora_grad_f32",
    .summary = "LoRA out[n,R] = scale d[T,n]^T xa[T,R] over T slices, finished in order in-kernel",
    PGK_PARAMS(grad_params), PGK_KNOBS(grad_knobs),
    .min_target = PG_SM_70, .build = build_grad_f32, .launch = launch_grad, .pick = pick_vec,
};

const pgk_desc pgk_desc_lora_grad_bf16 = {
    .name = "lora_grad_bf16",
    .summary = "LoRA out[n,R] = scale d[T,n]^T xa[T,R], d bf16, over T slices, finished in-kernel",
    PGK_PARAMS(grad_params), PGK_KNOBS(grad_knobs),
    .min_target = PG_SM_70, .build = build_grad_bf16, .launch = launch_grad, .pick = pick_vec,
};
