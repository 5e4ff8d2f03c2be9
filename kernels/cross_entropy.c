/* SPDX-License-Identifier: MIT */
/*
 * cross_entropy_fwd_bwd_{f32,bf16}: the loss and its gradient for a chunk
 * of R rows of logits [R, V] at once, so an LM head can run over row chunks
 * and never hold all B x S x V logits:
 *
 *   loss[r]      = logsumexp(x[r, :]) - x[r, label[r]]               (f32)
 *   x[r, j]     <- (softmax(x[r, :])_j - [j == label[r]]) * scale    (in place)
 *
 * scale is the caller's 1 / (positions counted over the whole batch). A
 * label below zero (-100 and any other negative) is ignored: loss 0 and a
 * zero gradient row. A label >= V is an error the host should have caught:
 * its loss is NaN (so it shows) and its row gets softmax * scale.
 *
 * One block of CE_THREADS a row, three passes over it: the max, the sum of
 * exp(x - max) (pgk_exp_nonpos, the argument is never positive, so nothing
 * overflows for any logits) with and without the label's term, then the
 * write. The sum without the label gives a confident row (p near 1) its
 * label gradient p - 1 = -others/sum and its small loss ln(1 + others/e)
 * without the cancellation of 1 - p or the rounding of ln(sum) near 1. Statistics are f32 and each
 * reduction runs in an order fixed by V: the same input gives the same
 * bits. Indices are u32 below V <= 2^31 and addresses 64-bit.
 *
 * The bf16 kernels read rows of whole 16-byte groups (V a multiple of 8,
 * the logits 16-byte aligned: Qwen2's 151936, LLaMA's 32000) eight
 * elements a thread a turn, one 16-byte load (pass 3: and store) each,
 * and other rows element by element: a row of 2-byte loads left the
 * kernel latency-bound. The groups give each thread its own fixed order,
 * so the bits are fixed too (not those of the element path).
 *
 * cross_entropy_fwd_bwd_dscale_{f32,bf16} are the same kernels with scale
 * read from device memory: their last param is a pointer to one f32, which
 * every thread loads once (ld.global.nc, next to its label) when the kernel
 * runs. A CUDA graph bakes kernel arguments, and a trainer's normalisation
 * (1 / the labels counted in an optimizer step) changes every step. The
 * value multiplies exactly where the immediate does, so for the same scale
 * both forms write the same bits.
 */
#include "model.h"

#include <math.h>

#define CE_THREADS 512u
#define LN2_F 0.6931471824645996f

/* exp(x - mx) for x <= mx. */
static pg_reg exp_below(pg_kernel *k, pg_reg x, pg_reg mx)
{
    return pgk_exp_nonpos(k, pgv_sub(k, PG_F32, x, mx));
}

/* dscale: p[5] is a pointer to the f32 scale rather than the value. */
/* One block's row: the registers the passes share. */
typedef struct ce_row {
    pgk_dtype dt;
    unsigned size;      /* bytes an element of the logits */
    pg_shared scratch;  /* the block reductions' */
    pg_reg base, vocab; /* the row's logits */
    pg_reg tid, ntid;
    pg_reg label, scale;
    pg_reg vec;         /* bf16: the row in whole 16-byte groups (else none) */
} ce_row;

/* A pass over the row: elem() runs for each element, x its logit (f32)
 * and j its index; with addr (the element's address) it stores what it
 * computes itself, without (a vector group's element) it returns the
 * value to store. */
typedef struct ce_pass ce_pass;
struct ce_pass {
    pg_reg (*elem)(pg_kernel *k, const ce_row *c, ce_pass *ps, pg_reg x, pg_reg j, pg_reg addr);
    bool stores;
    pg_reg acc[2];              /* the pass's running values */
    pg_reg mx, inv, pm1, found; /* what the pass reads (and pass 3's found) */
};

/* The element loop of a pass: element by element with a thread's stride
 * of ntid; for bf16 rows in whole 16-byte groups (c->vec), eight elements
 * a thread a turn, one 16-byte load (and store), the stride 8 ntid. Each
 * thread's accumulation order is fixed by V, so the bits are too. */
static void ce_scan(pg_kernel *k, const ce_row *c, ce_pass *ps)
{
    bool vec = c->dt == PGK_BF16;
    pg_label scalar = {0, 0}, end = {0, 0};
    if (vec) {
        scalar = pg_label_new(k, "ce_scalar");
        end = pg_label_new(k, "ce_end");
        pg_bra_if(k, c->vec, true, scalar);
        pg_loop G;
        pg_reg groups = pgv_shr(k, PG_U32, c->vocab, pg_u32(3));
        pg_reg g = pg_for_begin(k, &G, c->tid, groups, c->ntid);
        pg_reg ga = pgk_addr_add(k, c->base, g, 16);
        pg_reg w[4];
        for (int q = 0; q < 4; q++)
            w[q] = pg_reg_new(k, PG_B32);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_B32, 4, ga, 0, w);
        pg_reg j0 = pgv_shl(k, PG_U32, g, pg_u32(3));
        pg_reg y[8];
        for (int e = 0; e < 8; e++) {
            pg_reg h = e % 2 ? pgv_and(k, PG_B32, w[e / 2], pg_u32(0xffff0000u))
                             : pgv_shl(k, PG_B32, w[e / 2], pg_u32(16));
            pg_reg x = pg_reg_new(k, PG_F32);
            pg_mov(k, PG_B32, x, h);
            pg_reg j = e ? pgv_add(k, PG_U32, j0, pg_u32((uint32_t)e)) : j0;
            y[e] = ps->elem(k, c, ps, x, j, pg_none());
        }
        if (ps->stores) {
            pg_val pk[4];
            for (int q = 0; q < 4; q++)
                pk[q] = pgv_cvt_pack(k, PG_BF16, y[2 * q], y[2 * q + 1]);
            pg_st_v(k, PG_SPACE_GLOBAL, PG_B32, 4, ga, 0, pk);
        }
        pg_for_end(k, &G);
        pg_bra(k, end);
        pg_label_bind(k, scalar);
    }
    pg_loop L;
    pg_reg j = pg_for_begin(k, &L, c->tid, c->vocab, c->ntid);
    pg_reg a = pgk_addr_add(k, c->base, j, c->size);
    ps->elem(k, c, ps, pgk_ld_act(k, c->dt, a, false), j, a);
    pg_for_end(k, &L);
    if (vec)
        pg_label_bind(k, end);
}

static pg_reg max_elem(pg_kernel *k, const ce_row *c, ce_pass *ps, pg_reg x, pg_reg j,
                       pg_reg addr)
{
    (void)c, (void)j, (void)addr;
    pg_max(k, PG_F32, ps->acc[0], ps->acc[0], x);
    return pg_none();
}

/* Pass 1: the row's max. */
static pg_reg ce_max(pg_kernel *k, const ce_row *c)
{
    pg_comment(k, "pass 1: the row's max");
    ce_pass ps = {.elem = max_elem, .acc = {pgk_f32_const(k, -INFINITY)}};
    ce_scan(k, c, &ps);
    return pg_block_reduce(k, PG_REDUCE_MAX, PG_F32, ps.acc[0], c->scratch);
}

static pg_reg sum_elem(pg_kernel *k, const ce_row *c, ce_pass *ps, pg_reg x, pg_reg j,
                       pg_reg addr)
{
    (void)addr;
    pg_reg e2 = exp_below(k, x, ps->mx);
    pg_add(k, PG_F32, ps->acc[0], ps->acc[0], e2);
    pg_reg hit2 = pgv_setp(k, PG_CMP_EQ, PG_U32, j, c->label);
    pg_reg e2x = pgv_selp(k, PG_F32, pg_f32(0.0f), e2, hit2);
    pg_add(k, PG_F32, ps->acc[1], ps->acc[1], e2x);
    return pg_none();
}

/* Pass 2: the sum of exp(x - max), and the same without the label's
 * term (*others). */
static pg_reg ce_sums(pg_kernel *k, const ce_row *c, pg_reg mx, pg_reg *others)
{
    pg_comment(k, "pass 2: sum of exp(x - max) (>= 1: the max's own term), and the same "
                  "without the label's term");
    pg_reg s = pgk_f32_const(k, 0.0f);
    pg_reg sx = pgk_f32_const(k, 0.0f);
    ce_pass ps = {.elem = sum_elem, .acc = {s, sx}, .mx = mx};
    ce_scan(k, c, &ps);
    pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, s, c->scratch);
    *others = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, sx, c->scratch);
    return sum;
}

static pg_reg grad_elem(pg_kernel *k, const ce_row *c, ce_pass *ps, pg_reg x, pg_reg j,
                        pg_reg addr)
{
    pg_reg e3 = exp_below(k, x, ps->mx);
    pg_reg pr = pgv_mul(k, PG_F32, e3, ps->inv);
    pg_reg hit = pgv_setp(k, PG_CMP_EQ, PG_U32, j, c->label);
    pg_reg g = pgv_selp(k, PG_F32, ps->pm1, pr, hit);
    pg_reg gs = pgv_mul(k, PG_F32, g, c->scale);
    if (pg_is_reg(addr))
        pgk_st_act(k, c->dt, addr, gs);
    pg_selp(k, PG_F32, ps->acc[0], x, ps->acc[0], hit);
    pg_or(k, PG_PRED, ps->found, ps->found, hit);
    return gs;
}

/* Pass 3: the gradient in place, (exp(x - max) / sum - onehot) * scale,
 * the label's element pm1 * scale; the label's thread keeps its logit
 * (*xl) and knows it (*found). */
static void ce_grad(pg_kernel *k, const ce_row *c, pg_reg mx, pg_reg inv, pg_reg pm1,
                    pg_reg *xl, pg_reg *found)
{
    pg_comment(k, "pass 3: grad = (exp(x - max) / sum - onehot) * scale; the label's thread "
                  "keeps its logit");
    *xl = pgk_f32_const(k, 0.0f);
    *found = pgv_setp(k, PG_CMP_NE, PG_U32, c->tid, c->tid); /* false */
    ce_pass ps = {.elem = grad_elem, .stores = true, .acc = {*xl}, .mx = mx, .inv = inv,
                  .pm1 = pm1, .found = *found};
    ce_scan(k, c, &ps);
}

/* The loss -ln p = ln(1 + r), r = others / exp(xl - max). */
static pg_reg ce_loss(pg_kernel *k, pg_reg mx, pg_reg xl, pg_reg others, pg_reg lnsum)
{
    pg_comment(k, "loss = -ln p = ln(1 + r), r = others / exp(x - max): by atanh's series "
                  "while r <= 1 (a confident row's tiny loss keeps its digits), else "
                  "(max - x) + ln(sum)");
    pg_reg el = exp_below(k, xl, mx);
    pg_reg r = pgv_div(k, PG_F32, others, el);
    pg_reg den = pgv_add(k, PG_F32, r, pg_f32(2.0f));
    pg_reg t = pgv_div(k, PG_F32, r, den);
    pg_reg z = pgv_mul(k, PG_F32, t, t);
    pg_reg poly = pgk_f32_const(k, 2.0f / 17.0f);
    for (int n = 7; n >= 0; n--)
        pg_fma(k, PG_F32, poly, poly, z, pg_f32(2.0f / (float)(2 * n + 1)));
    pg_reg small = pgv_mul(k, PG_F32, poly, t);
    pg_reg gap = pgv_sub(k, PG_F32, mx, xl);
    pg_reg big = pgv_add(k, PG_F32, gap, lnsum);
    pg_reg use_small = pgv_setp(k, PG_CMP_LE, PG_F32, r, pg_f32(1.0f));
    return pgv_selp(k, PG_F32, small, big, use_small);
}

/* An ignored row (label < 0): loss 0 and a zero gradient. */
static void ce_ignored(pg_kernel *k, const ce_row *c, pg_reg lossa, pg_reg first)
{
    pg_reg zero = pgk_f32_const(k, 0.0f);
    pg_guard(k, first, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, lossa, 0, zero);
    pg_loop Z;
    pg_reg jz = pg_for_begin(k, &Z, c->tid, c->vocab, c->ntid);
    pgk_st_act(k, c->dt, pgk_addr_add(k, c->base, jz, c->size), zero);
    pg_for_end(k, &Z);
}

static int build_ce(pg_kernel *k, const pg_param *p, pgk_dtype dt, bool dscale)
{
    pg_kernel_set_maxntid(k, CE_THREADS, 1, 1);
    ce_row c = {.dt = dt, .size = pgk_dtype_size(dt)};
    c.scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_parts");
    pg_reg logits = pg_param_load(k, p[0]);
    pg_reg labels = pg_param_load(k, p[1]);
    pg_reg loss = pg_param_load(k, p[2]);
    pg_reg rows = pg_param_load(k, p[3]);
    c.vocab = pg_param_load(k, p[4]);
    c.scale = pg_param_load(k, p[5]);

    c.tid = pg_sreg_read(k, PG_SREG_TID_X);
    c.ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg row = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_label done = pg_label_new(k, "exit");
    pg_label ignored = pg_label_new(k, "ignored");
    pg_comment(k, "the whole block leaves together: the row and its label are the block's");
    pg_bounds_guard(k, row, rows, done);
    c.label = pgv_ld_nc(k, PG_S32, pgk_elem_addr(k, labels, row, 4), 0);
    if (dscale)
        c.scale = pgv_ld_nc(k, PG_F32, c.scale, 0);
    pg_reg lossa = pgk_elem_addr(k, loss, row, 4);
    c.base = pgk_addr2(k, logits, row, c.vocab, pg_u32(0), c.size);
    if (dt == PGK_BF16) {
        pg_comment(k, "whole 16-byte groups: cols a multiple of 8 and the logits aligned");
        pg_reg odd = pgv_cvt(k, PG_U32, PG_U64, PG_RND_NONE, pgv_and(k, PG_B64, logits, pg_u64(15)));
        pg_reg ragged = pgv_or(k, PG_U32, pgv_and(k, PG_U32, c.vocab, pg_u32(7)), odd);
        c.vec = pgv_setp(k, PG_CMP_EQ, PG_U32, ragged, pg_u32(0));
    }
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, c.tid, pg_u32(0));
    pg_reg ign = pgv_setp(k, PG_CMP_LT, PG_S32, c.label, pg_s32(0));
    pg_bra_if(k, ign, false, ignored);

    pg_reg mx = ce_max(k, &c);
    pg_reg others;
    pg_reg sum = ce_sums(k, &c, mx, &others);
    pg_reg inv = pgv_rcp(k, PG_F32, sum);
    pg_reg log2sum = pgv_lg2(k, PG_F32, sum);
    pg_reg lnsum = pgv_mul(k, PG_F32, log2sum, pg_f32(LN2_F));
    pg_comment(k, "the label's p - 1 = -(others / sum): no cancellation when p is near 1");
    pg_reg p_others = pgv_mul(k, PG_F32, others, inv);
    pg_reg pm1 = pgv_neg(k, PG_F32, p_others);

    pg_comment(k, "a label past the row: loss NaN (no element matches it below)");
    pg_reg over = pgv_setp(k, PG_CMP_HS, PG_U32, c.label, c.vocab);
    pg_reg both = pgv_and(k, PG_PRED, over, first);
    pg_reg nan = pgk_f32_const(k, NAN);
    pg_guard(k, both, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, lossa, 0, nan);

    pg_reg xl, found;
    ce_grad(k, &c, mx, inv, pm1, &xl, &found);
    pg_reg l = ce_loss(k, mx, xl, others, lnsum);
    pg_guard(k, found, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, lossa, 0, l);
    pg_bra(k, done);

    pg_label_bind(k, ignored);
    ce_ignored(k, &c, lossa, first);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* The family's members, each descriptor's variant: bit 0 bf16 storage,
 * bit 1 the scale from device memory. */
enum { CE_BF16 = 1, CE_DSCALE = 2 };

static int ce_build(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)kn;
    pgk_dtype dt = d->variant & CE_BF16 ? PGK_BF16 : PGK_F32;
    return build_ce(k, p, dt, (d->variant & CE_DSCALE) != 0);
}

enum { CE_ROWS, CE_VOCAB };

static int launch_ce(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)d;
    if (knobs[CE_ROWS] == 0 || knobs[CE_ROWS] > INT32_MAX || knobs[CE_VOCAB] == 0 ||
        knobs[CE_VOCAB] > (1u << 31))
        return PG_ERANGE;
    *out = (pgk_launch){{knobs[CE_ROWS], 1, 1}, {CE_THREADS, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param ce_params[] = {
    {"logits", PG_U64, true}, {"labels", PG_U64, true}, {"loss", PG_U64, true},
    {"rows", PG_U32, false},  {"cols", PG_U32, false}, {"scale", PG_F32, false},
};

static const pgk_param ce_dscale_params[] = {
    {"logits", PG_U64, true}, {"labels", PG_U64, true}, {"loss", PG_U64, true},
    {"rows", PG_U32, false},  {"cols", PG_U32, false}, {"scale", PG_U64, true},
};

static const pgk_knob ce_knobs[] = {
    {"rows", 512, 1, INT32_MAX, "rows of the chunk (one block each)"},
    {"cols", 151936, 1, 1u << 31, "logits a row"},
};

const pgk_desc pgk_desc_cross_entropy_fwd_bwd_f32 = {
    .name = "cross_entropy_fwd_bwd_f32",
    .summary = "per-row loss and, in place, (softmax - onehot) * scale for a chunk of f32 logits",
    .params = ce_params, .nparams = 6, .knobs = ce_knobs, .nknobs = 2,
    .min_target = PG_SM_70, .build = ce_build, .launch = launch_ce,
};
const pgk_desc pgk_desc_cross_entropy_fwd_bwd_bf16 = {
    .name = "cross_entropy_fwd_bwd_bf16",
    .summary = "per-row loss and, in place, (softmax - onehot) * scale for a chunk of bf16 logits",
    .params = ce_params, .nparams = 6, .knobs = ce_knobs, .nknobs = 2,
    .min_target = PG_SM_80, .build = ce_build, .launch = launch_ce, .variant = CE_BF16,
};
const pgk_desc pgk_desc_cross_entropy_fwd_bwd_dscale_f32 = {
    .name = "cross_entropy_fwd_bwd_dscale_f32",
    .summary = "cross_entropy_fwd_bwd_f32 with scale read from one f32 in device memory",
    PGK_PARAMS(ce_dscale_params), PGK_KNOBS(ce_knobs),
    .min_target = PG_SM_70, .build = ce_build, .launch = launch_ce, .variant = CE_DSCALE,
};
const pgk_desc pgk_desc_cross_entropy_fwd_bwd_dscale_bf16 = {
    .name = "cross_entropy_fwd_bwd_dscale_bf16",
    .summary = "cross_entropy_fwd_bwd_bf16 with scale read from one f32 in device memory",
    PGK_PARAMS(ce_dscale_params), PGK_KNOBS(ce_knobs),
    .min_target = PG_SM_80, .build = ce_build, .launch = launch_ce,
    .variant = CE_DSCALE | CE_BF16,
};
