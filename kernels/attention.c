/* SPDX-License-Identifier: MIT */
/*
 * Causal grouped-query attention, forward and backward, f32 and bf16
 * storage (f32 arithmetic and softmax statistics in both):
 *
 *   attention_forward_{f32,bf16}       O = softmax(scale Q K^T + causal) V, and the
 *                                      row logsumexp LSE (f32) for the backward
 *   attention_backward_dq_{f32,bf16}   dQ, and delta = rowsum(dO * O) (f32) for ...
 *   attention_backward_dkv_{f32,bf16}  dK, dV, each summed over the query heads of
 *                                      its group in a fixed order (no atomics)
 *
 * Q, O, dO, dQ are [B, S, Hq, D]; K, V, dK, dV are [B, S, Hkv, D]; LSE and
 * delta are [B, S, Hq] (f32). Query head h reads key/value head h / (Hq /
 * Hkv), as Hugging Face's repeat_kv does. Row s sees keys 0..s.
 *
 * This is the simple fused form: one warp a query row for the forward and
 * dQ, eight warps a key row for dK/dV (see build_dkv), streaming over the
 * other side's rows one at a time with an online softmax (forward) or the
 * saved LSE (backward); each lane holds head elements lane, lane + 32, lane + 64,
 * lane + 96 (so D <= 128), and every dot product is one fixed-order warp
 * reduction: the same input gives the same bits. Nothing S x S is stored.
 * The backward recomputes P = exp(scale q.k - LSE) and uses
 * dS = P (dO.v - delta): dQ = scale sum_j dS K_j, dK = scale sum dS Q_i,
 * dV = sum P dO_i. Run attention_backward_dq first: it writes delta.
 *
 * A launch whose q_heads is not a multiple of kv_heads, or whose head_dim
 * passes 128, writes nothing.
 *
 * Packed documents: attention_forward_docs_f32, attention_backward_dq_docs_f32
 * and attention_backward_dkv_docs_f32 are the f32 kernels with one more
 * param, last, doc_start (s32 [B, S]: where the document holding each
 * position begins, see model.h). Query i sees keys doc_start[i]..i. The
 * forward and dQ start their key loop at doc_start[i] instead of 0 (the keys
 * before it are never read); dK/dV find the end e of key j's document (the
 * first i > j with doc_start[i] > j, a binary search) and take the pairs of
 * the queries j..e-1 only. Nothing is masked: the rows that are computed
 * are exactly the ones visible, in the order the base kernel takes them. So
 * with doc_start all zero the bits are the base kernel's, and a document's
 * outputs are bit for bit those of the base kernel run on that document
 * alone as a row of its own (S = its length).
 */
#include "model.h"

#include <math.h>

#define ATT_WARPS 8u
#define ATT_MAXE 4u /* elements a lane: D <= 32 * ATT_MAXE */
#define ATT_MAX_D (32u * ATT_MAXE)

typedef struct vec {
    pg_reg e[ATT_MAXE];
} vec;

typedef struct lanes {
    pg_reg lane;
    pg_reg valid[ATT_MAXE]; /* lane + 32 t < D */
    pg_reg off[ATT_MAXE];   /* (lane + 32 t) * size, u64 */
} lanes;

static lanes lanes_of(pg_kernel *k, pg_reg lane, pg_reg dim, unsigned size)
{
    lanes l;
    l.lane = lane;
    for (unsigned t = 0; t < ATT_MAXE; t++) {
        pg_reg idx = pgv_add(k, PG_U32, lane, pg_u32(32 * t));
        l.valid[t] = pgv_setp(k, PG_CMP_LT, PG_U32, idx, dim);
        l.off[t] = pgv_mul_wide(k, PG_U32, idx, pg_u32(size));
    }
    return l;
}

static vec vec_zero(pg_kernel *k)
{
    vec v;
    for (unsigned t = 0; t < ATT_MAXE; t++)
        v.e[t] = pgk_f32_const(k, 0.0f);
    return v;
}

/* The lane's elements of the row at base; 0 past D. */
static vec vec_load(pg_kernel *k, pgk_dtype dt, const lanes *l, pg_reg base)
{
    vec v;
    for (unsigned t = 0; t < ATT_MAXE; t++) {
        pg_reg a = pgv_add(k, PG_U64, base, l->off[t]);
        if (dt == PGK_F32) {
            /* zero, then a guarded load over it: the in-place forms */
            v.e[t] = pgv_mov(k, PG_F32, pg_f32(0.0f));
            pg_guard(k, l->valid[t], false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v.e[t]);
        } else {
            pg_reg h = pgv_mov(k, PG_U16, pg_u32(0));
            pg_guard(k, l->valid[t], false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_U16, a, 0, h);
            pg_reg w = pgv_cvt(k, PG_U32, PG_U16, PG_RND_NONE, h);
            pg_reg hi = pgv_shl(k, PG_B32, w, pg_u32(16));
            v.e[t] = pg_reg_new(k, PG_F32);
            pg_mov(k, PG_B32, v.e[t], hi);
        }
    }
    return v;
}

static void vec_store(pg_kernel *k, pgk_dtype dt, const lanes *l, pg_reg base, const vec *v)
{
    for (unsigned t = 0; t < ATT_MAXE; t++) {
        pg_reg a = pgv_add(k, PG_U64, base, l->off[t]);
        if (dt == PGK_F32) {
            pg_guard(k, l->valid[t], false);
            pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v->e[t]);
        } else {
            pg_reg h = pgv_cvt(k, PG_BF16, PG_F32, PG_RND_RN, v->e[t]);
            pg_guard(k, l->valid[t], false);
            pg_st(k, PG_SPACE_GLOBAL, PG_BF16, a, 0, h);
        }
    }
}

/* a . b over the row: the lane's fma chain, then a fixed-order warp sum. */
static pg_reg vec_dot(pg_kernel *k, const vec *a, const vec *b)
{
    pg_reg s = pgv_mul(k, PG_F32, a->e[0], b->e[0]);
    for (unsigned t = 1; t < ATT_MAXE; t++)
        pg_fma(k, PG_F32, s, a->e[t], b->e[t], s);
    return pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, s);
}

/* acc = acc * c + w * x, element by element (c may be pg_none: acc + w x). */
static void vec_axpy(pg_kernel *k, vec *acc, pg_val c, pg_reg w, const vec *x)
{
    for (unsigned t = 0; t < ATT_MAXE; t++) {
        if (c.kind != PG_VAL_NONE)
            pg_mul(k, PG_F32, acc->e[t], acc->e[t], c);
        pg_fma(k, PG_F32, acc->e[t], w, x->e[t], acc->e[t]);
    }
}

static void vec_scale(pg_kernel *k, vec *v, pg_val c)
{
    for (unsigned t = 0; t < ATT_MAXE; t++)
        pg_mul(k, PG_F32, v->e[t], v->e[t], c);
}

static pg_reg ld_shared_f32(pg_kernel *k, pg_reg addr, int64_t off)
{
    return pgv_ld(k, PG_SPACE_SHARED, PG_F32, addr, off);
}

typedef struct shape {
    pg_reg batch, seq, hq, hkv, dim, scale, group;
} shape;

/* Loads the shape params (starting at p[first]) and leaves through `out`
 * when they are unusable: Hkv = 0, Hq not a multiple of it, D > 128. */
static shape shape_load(pg_kernel *k, const pg_param *p, unsigned first, pg_label out)
{
    shape s;
    s.batch = pg_param_load(k, p[first]);
    s.seq = pg_param_load(k, p[first + 1]);
    s.hq = pg_param_load(k, p[first + 2]);
    s.hkv = pg_param_load(k, p[first + 3]);
    s.dim = pg_param_load(k, p[first + 4]);
    s.scale = pg_param_load(k, p[first + 5]);
    pg_reg no_kv = pgv_setp(k, PG_CMP_EQ, PG_U32, s.hkv, pg_u32(0));
    pg_bra_if(k, no_kv, false, out);
    pg_reg too_wide = pgv_setp(k, PG_CMP_GT, PG_U32, s.dim, pg_u32(ATT_MAX_D));
    pg_bra_if(k, too_wide, false, out);
    s.group = pgv_div(k, PG_U32, s.hq, s.hkv);
    pg_reg back = pgv_mul(k, PG_U32, s.group, s.hkv);
    pg_reg ragged = pgv_setp(k, PG_CMP_NE, PG_U32, back, s.hq);
    pg_bra_if(k, ragged, false, out);
    return s;
}

/* Bytes from one token's row of a [.., S, H, D] tensor to the next's. */
static pg_reg token_stride(pg_kernel *k, pg_reg heads, pg_reg dim, unsigned size)
{
    pg_reg hd = pgv_mul(k, PG_U32, heads, dim);
    return pgv_mul_wide(k, PG_U32, hd, pg_u32(size));
}

/* The query row a warp owns (w = (b S + s) Hq + h; warps past the last row
 * leave through `done`) and where its keys and values start: the first
 * key row of its sequence, ((bs - s) Hkv + kvh) D, and a token's stride.
 * `notes` puts those index formulas into the PTX as comments. */
typedef struct query_row {
    pg_reg w, lane, s;
    pg_reg ds; /* doc_start of the row (docs), else none */
    pg_reg ka, va, kstride;
    lanes l;
    vec q; /* the row's query, times the softmax scale */
} query_row;

static query_row query_row_of(pg_kernel *k, pgk_dtype dt, const shape *sh, pg_reg Q, pg_reg K,
                              pg_reg V, pg_reg DS, pg_label done, bool notes)
{
    unsigned size = pgk_dtype_size(dt);
    query_row r;
    pg_reg bsq = pgv_mul(k, PG_U32, sh->batch, sh->seq);
    pg_reg rows = pgv_mul(k, PG_U32, bsq, sh->hq);
    r.w = pgk_warp_row(k, rows, done, &r.lane);
    if (notes)
        pg_comment(k, "w = (b S + s) Hq + h");
    pg_reg h = pgv_rem(k, PG_U32, r.w, sh->hq);
    pg_reg bs = pgv_div(k, PG_U32, r.w, sh->hq);
    r.s = pgv_rem(k, PG_U32, bs, sh->seq);
    pg_reg kvh = pgv_div(k, PG_U32, h, sh->group);
    if (notes)
        pg_comment(k, "first key row of the sequence: ((bs - s) Hkv + kvh) D");
    pg_reg krow = pgv_sub(k, PG_U32, bs, r.s);
    r.ds = pg_none();
    if (pg_is_reg(DS)) {
        pg_comment(k, "docs: the keys start at the document's, doc_start[bs]");
        pg_reg at = pgk_elem_addr(k, DS, bs, 4);
        r.ds = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, at, 0);
        krow = pgv_add(k, PG_U32, krow, r.ds);
    }
    krow = pgv_mad(k, PG_U32, krow, sh->hkv, kvh);
    r.ka = pgk_addr2(k, K, krow, sh->dim, pg_u32(0), size);
    r.va = pgk_addr2(k, V, krow, sh->dim, pg_u32(0), size);
    r.kstride = token_stride(k, sh->hkv, sh->dim, size);
    r.l = lanes_of(k, r.lane, sh->dim, size);
    r.q = vec_load(k, dt, &r.l, pgk_addr2(k, Q, r.w, sh->dim, pg_u32(0), size));
    vec_scale(k, &r.q, sh->scale);
    return r;
}

/* The forward and dQ kernels run one warp a query row, ATT_WARPS warps a
 * block; the label is where a warp past the last row goes. */
static pg_label query_rows_begin(pg_kernel *k)
{
    pg_kernel_set_maxntid(k, 32 * ATT_WARPS, 1, 1);
    return pg_label_new(k, "exit");
}

/* ---------------------------------------------------------------- forward */

/* docs: doc_start is the last param, and the keys run doc_start[s]..s. */
static int build_fwd(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool docs)
{
    pg_label done = query_rows_begin(k);
    pg_reg Q = pg_param_load(k, p[0]);
    pg_reg K = pg_param_load(k, p[1]);
    pg_reg V = pg_param_load(k, p[2]);
    pg_reg O = pg_param_load(k, p[3]);
    pg_reg LSE = pg_param_load(k, p[4]);
    shape sh = shape_load(k, p, 5, done);
    pg_reg DS = docs ? pg_param_load(k, p[PGK_ATT_DOC_START_FWD]) : pg_none();
    unsigned size = pgk_dtype_size(dt);

    query_row r = query_row_of(k, dt, &sh, Q, K, V, DS, done, true);
    pg_reg w = r.w, lane = r.lane, s = r.s, ka = r.ka, va = r.va, kstride = r.kstride;
    lanes l = r.l;
    vec q = r.q;
    vec acc = vec_zero(k);
    pg_reg m = pgk_f32_const(k, -INFINITY);
    pg_reg sum = pgk_f32_const(k, 0.0f);
    pg_reg nkeys = pgv_add(k, PG_U32, s, pg_u32(1));

    pg_comment(k, docs ? "online softmax over keys doc_start..s" : "online softmax over keys 0..s");
    pg_loop L;
    pg_for_begin(k, &L, docs ? r.ds : pg_u32(0), nkeys, pg_u32(1));
    vec kv = vec_load(k, dt, &l, ka);
    pg_reg sc = vec_dot(k, &q, &kv);
    pg_reg mn = pgv_max(k, PG_F32, m, sc);
    pg_reg corr = pgk_exp_nonpos(k, pgv_sub(k, PG_F32, m, mn));
    pg_reg pr = pgk_exp_nonpos(k, pgv_sub(k, PG_F32, sc, mn));
    pg_fma(k, PG_F32, sum, sum, corr, pr);
    vec vv = vec_load(k, dt, &l, va);
    vec_axpy(k, &acc, corr, pr, &vv);
    pg_mov(k, PG_F32, m, mn);
    pg_add(k, PG_U64, ka, ka, kstride);
    pg_add(k, PG_U64, va, va, kstride);
    pg_for_end(k, &L);

    pg_reg inv = pgv_rcp(k, PG_F32, sum);
    vec_scale(k, &acc, inv);
    pg_reg oa = pgk_addr2(k, O, w, sh.dim, pg_u32(0), size);
    vec_store(k, dt, &l, oa, &acc);
    pg_comment(k, "lse = m + ln(sum)");
    pg_reg log2sum = pgv_lg2(k, PG_F32, sum);
    pg_reg lse = pgv_fma(k, PG_F32, log2sum, pg_f32(0.6931471824645996f), m);
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, lane, pg_u32(0));
    /* the address first: a guard covers the one instruction after it */
    pg_reg lse_at = pgk_elem_addr(k, LSE, w, 4);
    pg_guard(k, first, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, lse_at, 0, lse);

    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* ---------------------------------------------------------------- backward: dQ and delta */

static int build_dq(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool docs)
{
    pg_label done = query_rows_begin(k);
    pg_reg Q = pg_param_load(k, p[0]);
    pg_reg K = pg_param_load(k, p[1]);
    pg_reg V = pg_param_load(k, p[2]);
    pg_reg O = pg_param_load(k, p[3]);
    pg_reg dO = pg_param_load(k, p[4]);
    pg_reg LSE = pg_param_load(k, p[5]);
    pg_reg dQ = pg_param_load(k, p[6]);
    pg_reg DELTA = pg_param_load(k, p[7]);
    shape sh = shape_load(k, p, 8, done);
    pg_reg DS = docs ? pg_param_load(k, p[PGK_ATT_DOC_START_GRAD]) : pg_none();
    unsigned size = pgk_dtype_size(dt);

    query_row r = query_row_of(k, dt, &sh, Q, K, V, DS, done, false);
    pg_reg w = r.w, lane = r.lane, s = r.s, ka = r.ka, va = r.va, kstride = r.kstride;
    lanes l = r.l;
    vec q = r.q;
    vec go = vec_load(k, dt, &l, pgk_addr2(k, dO, w, sh.dim, pg_u32(0), size));
    vec o = vec_load(k, dt, &l, pgk_addr2(k, O, w, sh.dim, pg_u32(0), size));
    pg_reg delta = vec_dot(k, &go, &o);
    pg_reg lse = pgk_ld_f32(k, pgk_elem_addr(k, LSE, w, 4));
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, lane, pg_u32(0));
    /* the address first: a guard covers the one instruction after it */
    pg_reg delta_at = pgk_elem_addr(k, DELTA, w, 4);
    pg_guard(k, first, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, delta_at, 0, delta);

    vec acc = vec_zero(k);
    pg_reg nkeys = pgv_add(k, PG_U32, s, pg_u32(1));
    pg_comment(k, "dq = scale sum_j P_j (dO.v_j - delta) k_j");
    pg_loop L;
    pg_for_begin(k, &L, docs ? r.ds : pg_u32(0), nkeys, pg_u32(1));
    vec kv = vec_load(k, dt, &l, ka);
    pg_reg sc = vec_dot(k, &q, &kv);
    pg_reg pr = pgk_exp_nonpos(k, pgv_sub(k, PG_F32, sc, lse));
    vec vv = vec_load(k, dt, &l, va);
    pg_reg dp = vec_dot(k, &go, &vv);
    pg_reg dpd = pgv_sub(k, PG_F32, dp, delta);
    pg_reg ds = pgv_mul(k, PG_F32, dpd, pr);
    vec_axpy(k, &acc, pg_none(), ds, &kv);
    pg_add(k, PG_U64, ka, ka, kstride);
    pg_add(k, PG_U64, va, va, kstride);
    pg_for_end(k, &L);

    vec_scale(k, &acc, sh.scale);
    vec_store(k, dt, &l, pgk_addr2(k, dQ, w, sh.dim, pg_u32(0), size), &acc);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* ---------------------------------------------------------------- backward: dK and dV */

/* One block a key row (b, j, kv head): the G (S - j) (head, query) pairs
 * the row's gradient sums over, flattened head-major, are dealt to the
 * block's warps round-robin (warp w takes w, w + 8, ...); each warp keeps
 * its own partial dK, dV; the eight partials then meet in shared memory and
 * are added in warp order. The split depends on the shape alone, so the
 * sum's order, and its bits, are fixed; a key row gets eight warps instead
 * of one, which matters because there are only B S Hkv key rows. */
static int build_dkv(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool docs)
{
    pg_kernel_set_maxntid(k, 32 * ATT_WARPS, 1, 1);
    unsigned size = pgk_dtype_size(dt);
    pg_shared part = pg_shared_static(k, PG_F32, 2 * ATT_WARPS * ATT_MAX_D, 16, "partials");
    pg_label done = pg_label_new(k, "exit");
    pg_reg Q = pg_param_load(k, p[0]);
    pg_reg K = pg_param_load(k, p[1]);
    pg_reg V = pg_param_load(k, p[2]);
    pg_reg dO = pg_param_load(k, p[3]);
    pg_reg LSE = pg_param_load(k, p[4]);
    pg_reg DELTA = pg_param_load(k, p[5]);
    pg_reg dK = pg_param_load(k, p[6]);
    pg_reg dV = pg_param_load(k, p[7]);
    shape sh = shape_load(k, p, 8, done);
    pg_reg DS = docs ? pg_param_load(k, p[PGK_ATT_DOC_START_GRAD]) : pg_none();

    pg_reg bsq = pgv_mul(k, PG_U32, sh.batch, sh.seq);
    pg_reg rows = pgv_mul(k, PG_U32, bsq, sh.hkv);
    pg_reg w = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_comment(k, "the whole block leaves together: the key row is the block's");
    pg_bounds_guard(k, w, rows, done);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg lane = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_comment(k, "w = (b S + j) Hkv + kvh");
    pg_reg kvh = pgv_rem(k, PG_U32, w, sh.hkv);
    pg_reg bj = pgv_div(k, PG_U32, w, sh.hkv);
    pg_reg j = pgv_rem(k, PG_U32, bj, sh.seq);

    lanes l = lanes_of(k, lane, sh.dim, size);
    vec kv = vec_load(k, dt, &l, pgk_addr2(k, K, w, sh.dim, pg_u32(0), size));
    vec_scale(k, &kv, sh.scale);
    vec vv = vec_load(k, dt, &l, pgk_addr2(k, V, w, sh.dim, pg_u32(0), size));
    vec dk = vec_zero(k), dv = vec_zero(k);
    pg_reg nq;
    if (docs) {
        pg_comment(k, "docs: the queries j .. e - 1, e the end of key j's document");
        pg_reg row = pgk_elem_addr(k, DS, pgv_sub(k, PG_U32, bj, j), 4);
        pg_reg lo = pgv_add(k, PG_U32, j, pg_u32(1));
        pg_reg e = pgk_doc_search(k, row, lo, sh.seq, 0, j);
        nq = pgv_sub(k, PG_U32, e, j);
    } else {
        nq = pgv_sub(k, PG_U32, sh.seq, j);
    }
    pg_reg npairs = pgv_mul(k, PG_U32, nq, sh.group);
    pg_reg h0 = pgv_mul(k, PG_U32, kvh, sh.group);

    pg_comment(k, "pairs idx = g (S - j) + (i - j), this warp's in order");
    pg_loop L;
    pg_reg idx = pg_for_begin(k, &L, warp, npairs, pg_u32(ATT_WARPS));
    pg_reg g = pgv_div(k, PG_U32, idx, nq);
    pg_reg di = pgv_rem(k, PG_U32, idx, nq);
    pg_comment(k, "query row (b S + i) Hq + h0 + g, i = j + di");
    pg_reg bi = pgv_add(k, PG_U32, bj, di);
    pg_reg hg = pgv_add(k, PG_U32, h0, g);
    pg_reg qrow = pgv_mad(k, PG_U32, bi, sh.hq, hg);
    vec q = vec_load(k, dt, &l, pgk_addr2(k, Q, qrow, sh.dim, pg_u32(0), size));
    vec go = vec_load(k, dt, &l, pgk_addr2(k, dO, qrow, sh.dim, pg_u32(0), size));
    pg_reg lse = pgk_ld_f32(k, pgk_elem_addr(k, LSE, qrow, 4));
    pg_reg delta = pgk_ld_f32(k, pgk_elem_addr(k, DELTA, qrow, 4));
    pg_reg sc = vec_dot(k, &q, &kv);
    pg_reg pr = pgk_exp_nonpos(k, pgv_sub(k, PG_F32, sc, lse));
    pg_reg dp = vec_dot(k, &go, &vv);
    pg_reg dpd = pgv_sub(k, PG_F32, dp, delta);
    pg_reg ds = pgv_mul(k, PG_F32, dpd, pr);
    vec_axpy(k, &dv, pg_none(), pr, &go);
    vec_axpy(k, &dk, pg_none(), ds, &q);
    pg_for_end(k, &L);

    pg_comment(k, "partials[0 or 1][warp][lane + 32 t]: dK's, then dV's");
    pg_reg sbase = pgv_mov(k, PG_U32, pg_shared_addr(part));
    pg_reg widx = pgv_mad(k, PG_U32, warp, pg_u32(ATT_MAX_D), lane);
    pg_reg slot = pgv_mad(k, PG_U32, widx, pg_u32(4), sbase);
    for (unsigned t = 0; t < ATT_MAXE; t++) {
        pg_st(k, PG_SPACE_SHARED, PG_F32, slot, 4 * 32 * t, dk.e[t]);
        pg_st(k, PG_SPACE_SHARED, PG_F32, slot, 4 * (ATT_WARPS * ATT_MAX_D + 32 * t), dv.e[t]);
    }
    pg_bar_sync(k, 0);

    pg_comment(k, "thread t sums element t % 128 of dK (t < 128) or dV over the warps in order");
    pg_reg which = pgv_shr(k, PG_U32, tid, pg_u32(7));
    pg_reg e = pgv_and(k, PG_B32, tid, pg_u32(ATT_MAX_D - 1));
    pg_reg sidx = pgv_mad(k, PG_U32, which, pg_u32(ATT_WARPS * ATT_MAX_D), e);
    pg_reg src = pgv_mad(k, PG_U32, sidx, pg_u32(4), sbase);
    pg_reg tot = ld_shared_f32(k, src, 0);
    for (unsigned wi = 1; wi < ATT_WARPS; wi++) {
        pg_reg x = ld_shared_f32(k, src, 4 * ATT_MAX_D * wi);
        pg_add(k, PG_F32, tot, tot, x);
    }
    pg_reg is_dk = pgv_setp(k, PG_CMP_EQ, PG_U32, which, pg_u32(0));
    pg_reg scaled = pgv_mul(k, PG_F32, tot, sh.scale);
    pg_reg res = pgv_selp(k, PG_F32, scaled, tot, is_dk);
    pg_reg outp = pgv_selp(k, PG_U64, dK, dV, is_dk);
    pg_reg in_row = pgv_setp(k, PG_CMP_LT, PG_U32, e, sh.dim);
    pg_label skip = pg_label_new(k, "past_head_dim");
    pg_bra_if(k, in_row, true, skip);
    pgk_st_act(k, dt, pgk_addr2(k, outp, w, sh.dim, e, size), res);
    pg_label_bind(k, skip);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* The knobs of both tables below: heads are the query heads of a query-row
 * kernel and the key/value heads of a key-row one. */
enum { ATT_BATCH, ATT_SEQ, ATT_HEADS, ATT_DIM };

/* The key rows' launch: one block of 8 warps a key row. */
static int launch_dkv(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    uint64_t rows = (uint64_t)knobs[ATT_BATCH] * knobs[ATT_SEQ] * knobs[ATT_HEADS];
    if (rows == 0 || rows > INT32_MAX || knobs[ATT_DIM] == 0 || knobs[ATT_DIM] > ATT_MAX_D)
        return PG_ERANGE;
    *out = (pgk_launch){{(uint32_t)rows, 1, 1}, {32 * ATT_WARPS, 1, 1}, 0};
    return PG_OK;
}

/* ---------------------------------------------------------------- descriptors */

/* One warp a query row; knobs: batch, seq_len, q_heads, head_dim. */
static int launch_att(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    uint64_t rows = (uint64_t)knobs[ATT_BATCH] * knobs[ATT_SEQ] * knobs[ATT_HEADS];
    uint64_t blocks = (rows + ATT_WARPS - 1) / ATT_WARPS;
    if (rows == 0 || rows > INT32_MAX || knobs[ATT_DIM] == 0 || knobs[ATT_DIM] > ATT_MAX_D)
        return PG_ERANGE;
    *out = (pgk_launch){{(uint32_t)blocks, 1, 1}, {32 * ATT_WARPS, 1, 1}, 0};
    return PG_OK;
}

#define ATT_BUILD(fn, body, dt, docs)                                          \
    static int fn(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)     \
    {                                                                          \
        (void)d, (void)knobs;                                                           \
        return body(k, p, dt, docs);                                           \
    }
ATT_BUILD(fwd_f32, build_fwd, PGK_F32, false)
ATT_BUILD(fwd_bf16, build_fwd, PGK_BF16, false)
ATT_BUILD(dq_f32, build_dq, PGK_F32, false)
ATT_BUILD(dq_bf16, build_dq, PGK_BF16, false)
ATT_BUILD(dkv_f32, build_dkv, PGK_F32, false)
ATT_BUILD(dkv_bf16, build_dkv, PGK_BF16, false)
ATT_BUILD(fwd_docs_f32, build_fwd, PGK_F32, true)
ATT_BUILD(dq_docs_f32, build_dq, PGK_F32, true)
ATT_BUILD(dkv_docs_f32, build_dkv, PGK_F32, true)

#define SHAPE_PARAMS                                                                       \
    {"batch", PG_U32, false}, {"seq_len", PG_U32, false}, {"q_heads", PG_U32, false},         \
        {"kv_heads", PG_U32, false}, {"head_dim", PG_U32, false}, {"scale", PG_F32, false}

#define FWD_PARAMS                                                                         \
    {"q", PG_U64, true}, {"k", PG_U64, true}, {"v", PG_U64, true}, {"o", PG_U64, true},       \
        {"lse", PG_U64, true}, SHAPE_PARAMS
#define DQ_PARAMS                                                                          \
    {"q", PG_U64, true}, {"k", PG_U64, true}, {"v", PG_U64, true}, {"o", PG_U64, true},       \
        {"grad_o", PG_U64, true}, {"lse", PG_U64, true}, {"grad_q", PG_U64, true},             \
        {"delta", PG_U64, true}, SHAPE_PARAMS
#define DKV_PARAMS                                                                         \
    {"q", PG_U64, true}, {"k", PG_U64, true}, {"v", PG_U64, true},                            \
        {"grad_o", PG_U64, true}, {"lse", PG_U64, true}, {"delta", PG_U64, true},              \
        {"grad_k", PG_U64, true}, {"grad_v", PG_U64, true}, SHAPE_PARAMS
#define DOC_START {"doc_start", PG_U64, true}

const pgk_param pgk_attention_fwd_params[PGK_ATT_FWD_NPARAMS] = {FWD_PARAMS};
const pgk_param pgk_attention_dq_params[PGK_ATT_GRAD_NPARAMS] = {DQ_PARAMS};
const pgk_param pgk_attention_dkv_params[PGK_ATT_GRAD_NPARAMS] = {DKV_PARAMS};
const pgk_param pgk_attention_fwd_docs_params[PGK_ATT_FWD_NPARAMS + 1] = {FWD_PARAMS, DOC_START};
const pgk_param pgk_attention_dq_docs_params[PGK_ATT_GRAD_NPARAMS + 1] = {DQ_PARAMS, DOC_START};
const pgk_param pgk_attention_dkv_docs_params[PGK_ATT_GRAD_NPARAMS + 1] = {DKV_PARAMS, DOC_START};

static const pgk_knob q_knobs[] = {
    {"batch", 4, 1, 1000, "sequences"},
    {"seq_len", 512, 1, 16384, "tokens a sequence"},
    {"q_heads", 12, 1, 128, "query heads (one warp a query row and head)"},
    {"head_dim", 128, 1, ATT_MAX_D, "elements a head, at most 128"},
};
static const pgk_knob kv_knobs[] = {
    {"batch", 4, 1, 1000, "sequences"},
    {"seq_len", 512, 1, 16384, "tokens a sequence"},
    {"kv_heads", 2, 1, 128, "key/value heads (one block a key row and head)"},
    {"head_dim", 128, 1, ATT_MAX_D, "elements a head, at most 128"},
};

#define ATT_DESC(var, nm, what, prm, kn, fn, tgt, lfn)                         \
    const pgk_desc var = {                                                     \
        .name = nm, .summary = what, PGK_PARAMS(prm),                          \
        .knobs = kn, .nknobs = 4, .min_target = tgt, .build = fn,             \
        .launch = lfn,                                                         \
    };
ATT_DESC(pgk_desc_attention_forward_f32, "attention_forward_f32",
         "causal GQA attention O and row logsumexp, one warp a query row (f32)",
         pgk_attention_fwd_params, q_knobs, fwd_f32, PG_SM_70, launch_att)
ATT_DESC(pgk_desc_attention_forward_bf16, "attention_forward_bf16",
         "causal GQA attention O and row logsumexp, one warp a query row (bf16)",
         pgk_attention_fwd_params, q_knobs, fwd_bf16, PG_SM_80, launch_att)
ATT_DESC(pgk_desc_attention_backward_dq_f32, "attention_backward_dq_f32",
         "causal GQA attention dQ and delta = rowsum(dO * O) (f32)", pgk_attention_dq_params,
         q_knobs, dq_f32, PG_SM_70, launch_att)
ATT_DESC(pgk_desc_attention_backward_dq_bf16, "attention_backward_dq_bf16",
         "causal GQA attention dQ and delta = rowsum(dO * O) (bf16)", pgk_attention_dq_params,
         q_knobs, dq_bf16, PG_SM_80, launch_att)
ATT_DESC(pgk_desc_attention_backward_dkv_f32, "attention_backward_dkv_f32",
         "causal GQA attention dK, dV summed over each group's heads in order (f32)",
         pgk_attention_dkv_params, kv_knobs, dkv_f32, PG_SM_70, launch_dkv)
ATT_DESC(pgk_desc_attention_backward_dkv_bf16, "attention_backward_dkv_bf16",
         "causal GQA attention dK, dV summed over each group's heads in order (bf16)",
         pgk_attention_dkv_params, kv_knobs, dkv_bf16, PG_SM_80, launch_dkv)
ATT_DESC(pgk_desc_attention_forward_docs_f32, "attention_forward_docs_f32",
         "document-bounded causal GQA attention O and row logsumexp, one warp a query row (f32)",
         pgk_attention_fwd_docs_params, q_knobs, fwd_docs_f32, PG_SM_70, launch_att)
ATT_DESC(pgk_desc_attention_backward_dq_docs_f32, "attention_backward_dq_docs_f32",
         "document-bounded causal GQA attention dQ and delta = rowsum(dO * O) (f32)",
         pgk_attention_dq_docs_params, q_knobs, dq_docs_f32, PG_SM_70, launch_att)
ATT_DESC(pgk_desc_attention_backward_dkv_docs_f32, "attention_backward_dkv_docs_f32",
         "document-bounded causal GQA attention dK, dV summed over each group's heads in order "
         "(f32)",
         pgk_attention_dkv_docs_params, kv_knobs, dkv_docs_f32, PG_SM_70, launch_dkv)
