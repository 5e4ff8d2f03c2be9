/* SPDX-License-Identifier: MIT */
/*
 * The fused gradient-clip pipeline (DESIGN §3): per buffer a squared-sum
 * into a slice of one partials buffer, one block turning all partials into
 * [scale, norm] on the device, then a scale of each buffer that reads the
 * scale from device memory. No value crosses to the host.
 */
#include "kernels.h"

#include <stddef.h>

#define SQSUM_MAX_BLOCKS 256u
#define SQSUM_PER_BLOCK 1024u

uint32_t pgk_squared_sum_num_blocks(uint32_t n)
{
    uint32_t b = (uint32_t)(((uint64_t)n + SQSUM_PER_BLOCK - 1) / SQSUM_PER_BLOCK);
    if (b > SQSUM_MAX_BLOCKS)
        b = SQSUM_MAX_BLOCKS;
    return b ? b : 1;
}

/* base + (i << shift) for a 64-bit index. */
static pg_reg addr64(pg_kernel *k, pg_reg base, pg_reg i, uint32_t shift)
{
    pg_reg a = pgv_shl(k, PG_U64, i, pg_u32(shift));
    pg_add(k, PG_U64, a, a, base);
    return a;
}

/* A predicate: `ptr` is 16-byte aligned (a uniform test: ptr is a param). */
static pg_reg aligned16(pg_kernel *k, pg_reg ptr)
{
    pg_reg low = pgv_and(k, PG_U64, ptr, pg_u64(15));
    return pgv_setp(k, PG_CMP_EQ, PG_U64, low, pg_u64(0));
}

/* The 64-bit grid-stride geometry every streaming kernel here uses. */
typedef struct stream_geom {
    pg_reg gid;    /* u32 global thread index */
    pg_reg gid64;  /* the same, u64 */
    pg_reg stride; /* u64 threads in the grid */
    pg_reg n64;    /* u64 element count */
} stream_geom;

static stream_geom geom(pg_kernel *k, pg_reg n)
{
    stream_geom g;
    g.gid = pg_global_tid_x(k);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg nctaid = pg_sreg_read(k, PG_SREG_NCTAID_X);
    g.gid64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, g.gid);
    g.stride = pgv_mul_wide(k, PG_U32, nctaid, ntid);
    g.n64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, n);
    return g;
}

/* ---------------------------------------------------------------- multi-tensor table */

/* The multi-tensor kernels take a device table of pgk_clip_entry {u64 ptr;
 * u32 n; u32 first_block} (pgk.h), first_block the prefix sum of the earlier entries'
 * block counts, and a grid of all those blocks. Each block finds its entry
 * and runs the single-buffer body as if it were block `local` of a grid of
 * `nblocks`: the same partition of the same buffer, so the same bits. */
/* Entries of pgk_clip_entry: the stride and where first_block lies. */
static pgk_table_entry find_entry(pg_kernel *k, pg_reg table, pg_reg nbufs)
{
    return pgk_table_find(k, table, nbufs, (uint32_t)sizeof(pgk_clip_entry),
                          offsetof(pgk_clip_entry, first_block));
}

/* geom() for block `local` of a grid of `nblocks`. */
static stream_geom geom_entry(pg_kernel *k, const pgk_table_entry *e)
{
    stream_geom g;
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    g.gid = pgv_mad(k, PG_U32, e->local, ntid, tid);
    g.gid64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, g.gid);
    g.stride = pgv_mul_wide(k, PG_U32, e->nblocks, ntid);
    g.n64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, e->n);
    return g;
}

static const pgk_param multi_sum_params[] = {
    {"table", PG_U64, true},
    {"nbufs", PG_U32, false},
    {"partials", PG_U64, true},
};

static const pgk_param multi_scale_params[] = {
    {"table", PG_U64, true},
    {"nbufs", PG_U32, false},
    {"scale_ptr", PG_U64, true},
};

/* ---------------------------------------------------------------- squared_sum_reduce */

/* Each block sums the squares of its grid-stride share, then reduces in a
 * fixed order; the same n and the same input alignment give the same bits.
 * The grid is capped at 256 blocks (DESIGN §3), so each thread must keep
 * many bytes in flight: with a 16-byte aligned input, four v4 loads (64
 * bytes) a thread an iteration; otherwise four scalar loads. Indices are
 * 64-bit so that nothing wraps for n near 2^32. */
static void squared_sum_body(pg_kernel *k, pg_shared scratch, pg_reg input, pg_reg output,
                             stream_geom g)
{
    pg_reg acc[4];
    for (int j = 0; j < 4; j++)
        acc[j] = pgk_zero_f32(k);
    pg_reg i = pgv_mov(k, PG_U64, g.gid64);
    pg_reg three = pg_reg_new(k, PG_U64), four = pg_reg_new(k, PG_U64);
    pg_mul(k, PG_U64, three, g.stride, pg_u64(3));
    pg_shl(k, PG_U64, four, g.stride, pg_u32(2));
    pg_reg last = pg_reg_new(k, PG_U64);
    pg_reg pl = pg_reg_new(k, PG_PRED);

    pg_label scalar = pg_label_new(k, "scalar");
    pg_label vmain = pg_label_new(k, "vec_main");
    pg_label vtail = pg_label_new(k, "vec_tail");
    pg_label rest = pg_label_new(k, "vec_rest");
    pg_label smain = pg_label_new(k, "scalar_main");
    pg_label stail = pg_label_new(k, "scalar_tail");
    pg_label done = pg_label_new(k, "reduce");
    pg_bra_if(k, aligned16(k, input), true, scalar);

    pg_comment(k, "aligned: float4 chunks c < n/4, four chunks in flight while c + 3*stride < n/4");
    pg_reg n4 = pgv_shr(k, PG_U64, g.n64, pg_u32(2));
    pg_reg stride_v = pgv_shl(k, PG_U64, g.stride, pg_u32(4));
    pg_label_bind(k, vmain);
    pg_add(k, PG_U64, last, i, three);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, last, n4);
    pg_bra_if(k, pl, false, vtail);
    pg_reg va = addr64(k, input, i, 4);
    pg_reg x[4][4];
    for (int j = 0; j < 4; j++) {
        for (int c = 0; c < 4; c++)
            x[j][c] = pg_reg_new(k, PG_F32);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, va, 0, x[j]);
        if (j < 3)
            pg_add(k, PG_U64, va, va, stride_v);
    }
    for (int j = 0; j < 4; j++)
        for (int c = 0; c < 4; c++)
            pg_fma(k, PG_F32, acc[j], x[j][c], x[j][c], acc[j]);
    pg_add(k, PG_U64, i, i, four);
    pg_bra(k, vmain);

    pg_label_bind(k, vtail);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, i, n4);
    pg_bra_if(k, pl, false, rest);
    pg_reg ta = addr64(k, input, i, 4);
    pg_reg tx[4];
    for (int c = 0; c < 4; c++)
        tx[c] = pg_reg_new(k, PG_F32);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, ta, 0, tx);
    for (int c = 0; c < 4; c++)
        pg_fma(k, PG_F32, acc[0], tx[c], tx[c], acc[0]);
    pg_add(k, PG_U64, i, i, g.stride);
    pg_bra(k, vtail);

    pg_comment(k, "the last n % 4 elements: one each for the first threads");
    pg_label_bind(k, rest);
    pg_reg e = pgv_shl(k, PG_U64, n4, pg_u32(2));
    pg_add(k, PG_U64, e, e, g.gid64);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, e, g.n64);
    pg_bra_if(k, pl, false, done);
    pg_reg ra = addr64(k, input, e, 2);
    pg_reg rx = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, ra, 0);
    pg_fma(k, PG_F32, acc[1], rx, rx, acc[1]);
    pg_bra(k, done);

    pg_comment(k, "unaligned: scalar, four loads in flight while i + 3*stride < n");
    pg_label_bind(k, scalar);
    pg_reg stride_b = pgv_shl(k, PG_U64, g.stride, pg_u32(2));
    pg_label_bind(k, smain);
    pg_add(k, PG_U64, last, i, three);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, last, g.n64);
    pg_bra_if(k, pl, false, stail);
    pg_reg sa = addr64(k, input, i, 2);
    pg_reg sx[4];
    for (int j = 0; j < 4; j++) {
        sx[j] = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, sa, 0);
        if (j < 3)
            pg_add(k, PG_U64, sa, sa, stride_b);
    }
    for (int j = 0; j < 4; j++)
        pg_fma(k, PG_F32, acc[j], sx[j], sx[j], acc[j]);
    pg_add(k, PG_U64, i, i, four);
    pg_bra(k, smain);
    pg_label_bind(k, stail);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, i, g.n64);
    pg_bra_if(k, pl, false, done);
    pg_reg sta = addr64(k, input, i, 2);
    pg_reg stx = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, sta, 0);
    pg_fma(k, PG_F32, acc[0], stx, stx, acc[0]);
    pg_add(k, PG_U64, i, i, g.stride);
    pg_bra(k, stail);

    pg_label_bind(k, done);
    pg_add(k, PG_F32, acc[0], acc[0], acc[1]);
    pg_add(k, PG_F32, acc[2], acc[2], acc[3]);
    pg_add(k, PG_F32, acc[0], acc[0], acc[2]);
    pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, acc[0], scratch);

    pg_comment(k, "thread 0 writes output[blockIdx.x]");
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ctaid = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_reg not_first = pgv_setp(k, PG_CMP_NE, PG_U32, tid, pg_u32(0));
    pg_guard(k, not_first, false);
    pg_ret(k);
    pg_reg oa = pgk_elem_addr(k, output, ctaid, 4);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, oa, 0, sum);
    pg_ret(k);
}

static int build_squared_sum(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                             const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_reg input = pg_param_load(k, p[0]);
    pg_reg output = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    squared_sum_body(k, scratch, input, output, geom(k, n));
    return pg_kernel_error(k);
}

/* squared_sum_reduce over a table whose entries are `entry_size` bytes
 * with first_block at `first_block_at`. The partial of block b of entry e
 * goes to partials[first_block(e) + b], which is partials[%ctaid.x]: the
 * body's own store. */
static int build_sum_over_table(pg_kernel *k, const pg_param *p, uint32_t entry_size,
                                uint32_t first_block_at)
{
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_reg table = pg_param_load(k, p[0]);
    pg_reg nbufs = pg_param_load(k, p[1]);
    pg_reg partials = pg_param_load(k, p[2]);
    pgk_table_entry e = pgk_table_find(k, table, nbufs, entry_size, first_block_at);
    squared_sum_body(k, scratch, e.ptr, partials, geom_entry(k, &e));
    return pg_kernel_error(k);
}

static int build_squared_sum_multi(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                                   const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    return build_sum_over_table(k, p, (uint32_t)sizeof(pgk_clip_entry),
                                offsetof(pgk_clip_entry, first_block));
}

static int launch_squared_sum(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    if (knobs[PGK_N] == 0)
        return PG_ERANGE;
    *out = (pgk_launch){{pgk_squared_sum_num_blocks(knobs[PGK_N]), 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param squared_sum_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_squared_sum_reduce = {
    .name = "squared_sum_reduce",
    .summary = "per-block sums of squares: output[b] = sum of x^2 over block b's share",
    PGK_PARAMS(squared_sum_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_squared_sum,
    .launch = launch_squared_sum,
};

const pgk_desc pgk_desc_squared_sum_reduce_multi = {
    .name = "squared_sum_reduce_multi",
    .summary = "squared_sum_reduce over a table of buffers in one launch, partials bit-identical",
    PGK_PARAMS(multi_sum_params),
    PGK_KNOBS(pgk_knobs_table),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_squared_sum_multi,
    .launch = pgk_launch_table,
};

/* squared_sum_reduce_multi over the optimizer's table (pgk_optim_entry):
 * the gradients' partials, at each entry's grad.first_block. */
static int build_adamw_multi_norm(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                                  const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    return build_sum_over_table(k, p, (uint32_t)sizeof(pgk_optim_entry),
                                offsetof(pgk_optim_entry, grad.first_block));
}

const pgk_desc pgk_desc_adamw_multi_norm = {
    .name = "adamw_multi_norm",
    .summary = "squared_sum_reduce_multi over the gradients of a multi-tensor AdamW table",
    PGK_PARAMS(multi_sum_params),
    PGK_KNOBS(pgk_knobs_table),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_adamw_multi_norm,
    .launch = pgk_launch_table,
};

/* ---------------------------------------------------------------- clip_scale_reduce */

/* One block: thread t sums partials t, t+256, ... in order, then a
 * fixed-order block reduction; bitwise identical run to run. A non-finite
 * norm is written as is to output[1] and leaves the scale at 1 (the
 * gradients are not touched; the caller sees the norm and decides). */
static int build_clip_scale(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                            const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_reg partials = pg_param_load(k, p[0]);
    pg_reg total = pg_param_load(k, p[1]);
    pg_reg max_norm = pg_param_load(k, p[2]);
    pg_reg output = pg_param_load(k, p[3]);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg i = pgv_mov(k, PG_U32, tid);
    pg_reg acc = pgk_zero_f32(k);
    pg_label top = pg_label_new(k, "sum");
    pg_label done = pg_label_new(k, "reduce");
    pg_reg pe = pg_reg_new(k, PG_PRED);
    pg_label_bind(k, top);
    pg_setp(k, PG_CMP_GE, PG_U32, pe, i, total);
    pg_bra_if(k, pe, false, done);
    pg_reg a = pgk_elem_addr(k, partials, i, 4);
    pg_reg x = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0);
    pg_add(k, PG_F32, acc, acc, x);
    pg_add(k, PG_U32, i, i, ntid);
    pg_bra(k, top);
    pg_label_bind(k, done);

    pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, acc, scratch);

    pg_comment(k, "thread 0: norm = sqrt(sum), scale = min(1, max_norm / norm)");
    pg_reg not_first = pgv_setp(k, PG_CMP_NE, PG_U32, tid, pg_u32(0));
    pg_guard(k, not_first, false);
    pg_ret(k);
    pg_reg norm = pgv_sqrt(k, PG_F32, sum);
    pg_reg raw = pgv_div(k, PG_F32, max_norm, norm); /* norm 0 gives +inf: scale 1 */
    pg_reg scale = pgv_min(k, PG_F32, raw, pg_f32(1.0f));
    pg_reg finite = pg_reg_new(k, PG_PRED);
    pg_reg mag = pgv_abs(k, PG_F32, norm);
    pg_setp(k, PG_CMP_LT, PG_F32, finite, mag, pg_f32(__builtin_inff()));
    pg_selp(k, PG_F32, scale, scale, pg_f32(1.0f), finite);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, output, 0, scale);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, output, 4, norm);
    pg_ret(k);
    return pg_kernel_error(k);
}

enum { TOTAL_N };

static int launch_clip_scale(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    if (knobs[TOTAL_N] == 0)
        return PG_ERANGE;
    *out = (pgk_launch){{1, 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param clip_scale_params[] = {
    {"partials", PG_U64, true},
    {"n", PG_U32, false},
    {"max_norm", PG_F32, false},
    {"output", PG_U64, true},
};

static const pgk_knob total_knob[] = {
    [TOTAL_N] = {"n", 1, 1, UINT32_MAX, "number of partial sums", false},
};

const pgk_desc pgk_desc_clip_scale_reduce = {
    .name = "clip_scale_reduce",
    .summary = "one block: output[0] = min(1, max_norm/sqrt(sum partials)), output[1] = norm",
    PGK_PARAMS(clip_scale_params),
    PGK_KNOBS(total_knob),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_clip_scale,
    .launch = launch_clip_scale,
};

/* ---------------------------------------------------------------- gradient_clip(_gpu_scale) */

/* grads[i] *= scale for i < n over a capped grid: float4 chunks when grads
 * is 16-byte aligned (then the last n % 4 one by one), scalars otherwise. */
static void scale_all_geom(pg_kernel *k, pg_reg grads, pg_reg scale, pg_label out, stream_geom g)
{
    pg_reg i = pgv_mov(k, PG_U64, g.gid64);
    pg_reg pl = pg_reg_new(k, PG_PRED);
    pg_label scalar = pg_label_new(k, "scalar");
    pg_label vloop = pg_label_new(k, "vec");
    pg_label rest = pg_label_new(k, "vec_rest");
    pg_label sloop = pg_label_new(k, "scalar_loop");
    pg_bra_if(k, aligned16(k, grads), true, scalar);

    pg_reg n4 = pgv_shr(k, PG_U64, g.n64, pg_u32(2));
    pg_label_bind(k, vloop);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, i, n4);
    pg_bra_if(k, pl, false, rest);
    pg_reg va = addr64(k, grads, i, 4);
    pg_reg v[4];
    for (int c = 0; c < 4; c++)
        v[c] = pg_reg_new(k, PG_F32);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, va, 0, v);
    for (int c = 0; c < 4; c++)
        pg_mul(k, PG_F32, v[c], v[c], scale);
    pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, va, 0, v);
    pg_add(k, PG_U64, i, i, g.stride);
    pg_bra(k, vloop);

    pg_label_bind(k, rest);
    pg_shl(k, PG_U64, i, n4, pg_u32(2));
    pg_add(k, PG_U64, i, i, g.gid64);

    pg_label_bind(k, scalar);
    pg_label_bind(k, sloop);
    pg_setp(k, PG_CMP_GE, PG_U64, pl, i, g.n64);
    pg_bra_if(k, pl, false, out);
    pg_reg a = addr64(k, grads, i, 2);
    pg_reg x = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0);
    pg_mul(k, PG_F32, x, x, scale);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a, 0, x);
    pg_add(k, PG_U64, i, i, g.stride);
    pg_bra(k, sloop);
}

static void scale_all(pg_kernel *k, pg_reg grads, pg_reg n, pg_reg scale, pg_label out)
{
    scale_all_geom(k, grads, scale, out, geom(k, n));
}

/* The scale from device memory; nothing more when |scale - 1| < 1e-7. */
static pg_reg load_scale_or_leave(pg_kernel *k, pg_reg scale_ptr, pg_label out)
{
    pg_reg scale = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, scale_ptr, 0);
    pg_comment(k, "|scale - 1| < 1e-7: nothing to clip, write nothing");
    pg_reg dev = pgv_sub(k, PG_F32, scale, pg_f32(1.0f));
    pg_abs(k, PG_F32, dev, dev);
    pg_reg keep = pgv_setp(k, PG_CMP_LT, PG_F32, dev, pg_f32(1e-7f));
    pg_bra_if(k, keep, false, out);
    return scale;
}

static int build_clip_gpu_scale(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                                const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg grads = pg_param_load(k, p[0]);
    pg_reg scale_ptr = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg scale = load_scale_or_leave(k, scale_ptr, out);
    scale_all(k, grads, n, scale, out);
    return pgk_finish(k, out);
}

/* The scale is tested before the table is searched: a no-op clip reads
 * one float a thread, as the per-buffer kernel does. */
static int build_clip_gpu_scale_multi(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                                      const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg table = pg_param_load(k, p[0]);
    pg_reg nbufs = pg_param_load(k, p[1]);
    pg_reg scale_ptr = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg scale = load_scale_or_leave(k, scale_ptr, out);
    pgk_table_entry e = find_entry(k, table, nbufs);
    scale_all_geom(k, e.ptr, scale, out, geom_entry(k, &e));
    return pgk_finish(k, out);
}

static int build_clip(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg grads = pg_param_load(k, p[0]);
    pg_reg scale = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    scale_all(k, grads, n, scale, out);
    return pgk_finish(k, out);
}

/* One float4 a thread, at most SCALE_MAX_BLOCKS blocks (then grid-stride):
 * a no-op clip costs a few thousand scale reads, not one a 256 elements. */
#define SCALE_MAX_BLOCKS 4096u

static int launch_scale_capped(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    if (knobs[PGK_N] == 0)
        return PG_ERANGE;
    uint64_t blocks = ((uint64_t)knobs[PGK_N] + 4u * d->threads - 1) / (4u * d->threads);
    if (blocks > SCALE_MAX_BLOCKS)
        blocks = SCALE_MAX_BLOCKS;
    *out = (pgk_launch){{(uint32_t)blocks, 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param clip_gpu_scale_params[] = {
    {"grads", PG_U64, true},
    {"scale_ptr", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_gradient_clip_gpu_scale = {
    .name = "gradient_clip_gpu_scale",
    .summary = "grads *= scale_ptr[0], in place; no write when |scale - 1| < 1e-7",
    PGK_PARAMS(clip_gpu_scale_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_clip_gpu_scale,
    .launch = launch_scale_capped,
};

const pgk_desc pgk_desc_gradient_clip_gpu_scale_multi = {
    .name = "gradient_clip_gpu_scale_multi",
    .summary = "gradient_clip_gpu_scale over a table of buffers in one launch",
    PGK_PARAMS(multi_scale_params),
    PGK_KNOBS(pgk_knobs_table),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_clip_gpu_scale_multi,
    .launch = pgk_launch_table,
};

static const pgk_param clip_params[] = {
    {"grads", PG_U64, true},
    {"scale", PG_F32, false},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_gradient_clip = {
    .name = "gradient_clip",
    .summary = "grads *= scale (a host value), in place",
    PGK_PARAMS(clip_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_clip,
    .launch = launch_scale_capped,
};
