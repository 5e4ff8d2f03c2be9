/* SPDX-License-Identifier: MIT */
/*
 * gemm_f16_backward_a: grad_A[M,K] = dC[M,N] · W[K,N]ᵀ, f16 in, f32
 * accumulate and out, on mma.sync tensor cores (sm_80 and up). Its
 * `variant` knob picks the form: 1 stages the tiles through registers
 * (first section), the others copy them with cp.async and read fragments
 * with ldmatrix (second section). Every output is the same mma sequence
 * over N in order, in every block: the results are deterministic.
 */
#include "gemm_tile.h"

/* ---------------------------------------------------------------- gemm_f16_backward_a: tensor cores */

/* Variant 1 of the f16 kernel, its first form.
 *
 * grad_A[M,K] = dC[M,N] · W[K,N]ᵀ with mma.sync.m16n8k16.row.col: the mma's
 * M is M, its N is K and its K is N. A (16×16, row-major) is a block of
 * dC rows, B (16×8, column-major) a block of W rows: both are read along
 * their memory rows, so no transpose is needed anywhere.
 *
 * Block tile 64 (M) × 128 (K) × 32 (N), 128 threads; warp w owns output
 * columns 32w..32w+31 of all 64 rows: 4×4 mma tiles of 16×8, 64 f32
 * accumulators a thread. Shared memory holds each tile as rows of 32
 * halves (64 bytes, no padding), two stages, filled by 16-byte vectors
 * staged in registers one tile ahead, as in the fp32 kernel.
 *
 * Fragments. The PTX layout gives lane (g = lane/4, t = lane%4) the A pairs
 * (row g | g+8, k = 2t, 2t+1 | 2t+8, 2t+9) and the B pairs (k = 2t, 2t+1 |
 * 2t+8, 2t+9, column g). Any permutation of k applied to both A and B
 * leaves the product unchanged, so k-step s of a 32-wide tile takes, for
 * lane t, the physical halves 8t+4s .. 8t+4s+3 in the order (2t, 2t+1,
 * 2t+8, 2t+9): one 16-byte shared load then holds a row's fragments for
 * both k-steps, and a quarter-warp's eight loads cover 128 contiguous
 * bytes (no bank conflicts). */

#define H_BM 64u
#define H_BN 128u
#define H_BK 32u
#define H_THREADS 128u
#define H_ROW (H_BK * 2u)                   /* bytes a tile row */
#define H_A_BYTES (H_BM * H_ROW)            /* 4096 */
#define H_STAGE ((H_BM + H_BN) * H_ROW)     /* 12288 */
#define H_A_SLOTS (H_BM * H_ROW / 16u / H_THREADS) /* 2 */
#define H_B_SLOTS (H_BN * H_ROW / 16u / H_THREADS) /* 4 */

typedef struct h_slot {
    pg_reg ptr;   /* u64 */
    pg_reg col;   /* u32: n of its first half */
    pg_reg inrow; /* pred */
    pg_reg vrow;  /* pred: inrow and 16-byte vectors allowed */
    pg_reg w[4];  /* b32: 8 halves */
    pg_reg wr;    /* u32: byte offset inside a stage */
} h_slot;

static void h_slot_init(pg_kernel *k, h_slot *s, pg_reg base, pg_reg ld, pg_reg ext, pg_reg row0,
                        pg_reg tid, unsigned j, pg_reg vec, unsigned stage_off)
{
    pg_reg c = pgv_add(k, PG_U32, tid, pg_u32(j * H_THREADS)); /* 16-byte chunk of the tile */
    pg_reg row = pgv_add(k, PG_U32, row0, pgv_shr(k, PG_U32, c, pg_u32(2)));
    s->col = pgv_shl(k, PG_B32, pgv_and(k, PG_B32, c, pg_u32(3)), pg_u32(3));
    s->inrow = pgv_setp(k, PG_CMP_LT, PG_U32, row, ext);
    s->vrow = pgv_and(k, PG_PRED, s->inrow, vec);
    s->ptr = pgk_elem_addr2(k, base, row, ld, s->col, 2);
    s->wr = pgv_shl(k, PG_B32, c, pg_u32(4)); /* row*64 + (c%4)*16 */
    if (stage_off)
        pg_add(k, PG_U32, s->wr, s->wr, pg_u32(stage_off));
    for (int e = 0; e < 4; e++)
        s->w[e] = pg_reg_new(k, PG_B32);
}

static void h_slot_load(pg_kernel *k, const h_slot *s, pg_reg n)
{
    pg_reg end = pgv_add(k, PG_U32, s->col, pg_u32(8));
    pg_reg full = pgv_setp(k, PG_CMP_LE, PG_U32, end, n);
    pg_and(k, PG_PRED, full, full, s->vrow);
    pg_guard(k, full, false);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_B32, 4, s->ptr, 0, s->w);
    pg_label done = pg_label_new(k, "loaded");
    pg_bra_if(k, full, false, done);
    pg_reg w[4];
    pgk_ld_u16x8_packed(k, s->ptr, s->col, n, s->inrow, s->w, w);
    pg_label_bind(k, done);
}

static void h_slot_store(pg_kernel *k, const h_slot *s, pg_reg stage)
{
    pg_reg a = pgv_add(k, PG_U32, stage, s->wr);
    pg_val v[4] = {s->w[0], s->w[1], s->w[2], s->w[3]};
    pg_st_v(k, PG_SPACE_SHARED, PG_B32, 4, a, 0, v);
}

/* What both forms start from: the params (grad_c, w, grad_a, m, n, k), the
 * shared tiles' address, and the thread's lane and warp. */
typedef struct f16_args {
    pg_reg dc, w, ga, m, n, kd, sbase, tid, lane, warp;
} f16_args;

static f16_args f16_begin(pg_kernel *k, const pg_param *p, pg_shared tiles)
{
    f16_args a;
    a.dc = pg_param_load(k, p[0]);
    a.w = pg_param_load(k, p[1]);
    a.ga = pg_param_load(k, p[2]);
    a.m = pg_param_load(k, p[3]);
    a.n = pg_param_load(k, p[4]);
    a.kd = pg_param_load(k, p[5]);
    a.sbase = pgv_mov(k, PG_U32, pg_shared_addr(tiles));
    a.tid = pg_sreg_read(k, PG_SREG_TID_X);
    a.lane = pgv_and(k, PG_B32, a.tid, pg_u32(31));
    a.warp = pgv_shr(k, PG_U32, a.tid, pg_u32(5));
    return a;
}

static int build_f16_legacy(pg_kernel *k, const pg_param *p)
{
    pg_kernel_set_maxntid(k, H_THREADS, 1, 1);
    pg_shared tiles = pg_shared_static(k, PG_B32, 2 * H_STAGE / 4, 16, "tiles");
    f16_args in = f16_begin(k, p, tiles);
    pg_reg dc = in.dc, w = in.w, ga = in.ga, m = in.m, n = in.n, kd = in.kd, sbase = in.sbase;
    pg_reg tid = in.tid, lane = in.lane, warp = in.warp;
    pg_reg g = pgv_shr(k, PG_U32, lane, pg_u32(2));
    pg_reg t4 = pgv_and(k, PG_B32, lane, pg_u32(3));
    pg_reg m0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(H_BM));
    pg_reg k0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(H_BN));

    pg_reg veca = pgk_vectors_ok(k, dc, n, 8, 2);
    pg_reg vecb = pgk_vectors_ok(k, w, n, 8, 2);
    h_slot A[H_A_SLOTS], B[H_B_SLOTS];
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_init(k, &A[j], dc, n, m, m0, tid, j, veca, 0);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_init(k, &B[j], w, n, kd, k0, tid, j, vecb, H_A_BYTES);

    pg_reg acc[MMA_MAX_MT][MMA_MAX_NT][4];
    for (unsigned mt = 0; mt < 4; mt++)
        for (unsigned nt = 0; nt < 4; nt++)
            for (unsigned e = 0; e < 4; e++)
                acc[mt][nt][e] = pgk_zero_f32(k);
    pg_reg ntiles = pgv_add(k, PG_U32, n, pg_u32(H_BK - 1));
    pg_shr(k, PG_U32, ntiles, ntiles, pg_u32(5));

    pg_comment(k, "n-tile 0 into stage 0");
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_load(k, &A[j], n);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_load(k, &B[j], n);
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_store(k, &A[j], sbase);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_store(k, &B[j], sbase);
    pg_bar_sync(k, 0);

    /* fragment rows: A row g of each 16-row tile, B row (W row) 32w + g */
    pg_reg a_rd = pg_reg_new(k, PG_U32), b_rd = pg_reg_new(k, PG_U32);
    pg_reg t16 = pgv_shl(k, PG_B32, t4, pg_u32(4));
    pg_mad(k, PG_U32, a_rd, g, pg_u32(H_ROW), t16);
    pg_reg brow = pgv_mad(k, PG_U32, warp, pg_u32(32), g);
    pg_mad(k, PG_U32, b_rd, brow, pg_u32(H_ROW), t16);
    pg_add(k, PG_U32, b_rd, b_rd, pg_u32(H_A_BYTES));

    pg_reg cur = pg_reg_new(k, PG_U32), t = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, cur, pg_u32(0));
    pg_mov(k, PG_U32, t, pg_u32(0));
    pg_label top = pg_label_new(k, "tile");
    pg_label compute = pg_label_new(k, "compute");
    pg_label epilogue = pg_label_new(k, "epilogue");
    pg_label_bind(k, top);
    pg_reg t1 = pgv_add(k, PG_U32, t, pg_u32(1));
    pg_reg has_next = pgv_setp(k, PG_CMP_LT, PG_U32, t1, ntiles);
    pg_bra_if(k, has_next, true, compute);
    pg_comment(k, "prefetch n-tile t+1 into registers");
    for (unsigned j = 0; j < H_A_SLOTS; j++) {
        pg_add(k, PG_U64, A[j].ptr, A[j].ptr, pg_u64(H_BK * 2));
        pg_add(k, PG_U32, A[j].col, A[j].col, pg_u32(H_BK));
    }
    for (unsigned j = 0; j < H_B_SLOTS; j++) {
        pg_add(k, PG_U64, B[j].ptr, B[j].ptr, pg_u64(H_BK * 2));
        pg_add(k, PG_U32, B[j].col, B[j].col, pg_u32(H_BK));
    }
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_load(k, &A[j], n);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_load(k, &B[j], n);

    pg_label_bind(k, compute);
    pg_comment(k, "two k-steps of 4x4 mma tiles out of stage cur");
    pg_reg rs = pgv_add(k, PG_U32, sbase, cur);
    pg_reg ar = pgv_add(k, PG_U32, rs, a_rd), br = pgv_add(k, PG_U32, rs, b_rd);
    pg_reg bf[4][4];
    for (unsigned nt = 0; nt < 4; nt++) {
        for (unsigned e = 0; e < 4; e++)
            bf[nt][e] = pg_reg_new(k, PG_B32);
        pg_ld_v(k, PG_SPACE_SHARED, PG_B32, 4, br, nt * 8 * H_ROW, bf[nt]);
    }
    for (unsigned mt = 0; mt < 4; mt++) {
        pg_reg lo[4], hi[4];
        for (unsigned e = 0; e < 4; e++) {
            lo[e] = pg_reg_new(k, PG_B32);
            hi[e] = pg_reg_new(k, PG_B32);
        }
        pg_ld_v(k, PG_SPACE_SHARED, PG_B32, 4, ar, mt * 16 * H_ROW, lo);
        pg_ld_v(k, PG_SPACE_SHARED, PG_B32, 4, ar, (mt * 16 + 8) * H_ROW, hi);
        for (unsigned s = 0; s < 2; s++) {
            pg_reg a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
            for (unsigned nt = 0; nt < 4; nt++) {
                pg_reg b[2] = {bf[nt][2 * s], bf[nt][2 * s + 1]};
                pg_mma_m16n8k16_f16_f32(k, acc[mt][nt], a, b, acc[mt][nt]);
            }
        }
    }
    pg_bra_if(k, has_next, true, epilogue);
    pg_reg other = pgv_sub(k, PG_U32, pg_u32(H_STAGE), cur);
    pg_reg ws = pgv_add(k, PG_U32, sbase, other);
    for (unsigned j = 0; j < H_A_SLOTS; j++)
        h_slot_store(k, &A[j], ws);
    for (unsigned j = 0; j < H_B_SLOTS; j++)
        h_slot_store(k, &B[j], ws);
    pg_bar_sync(k, 0);
    pg_mov(k, PG_U32, cur, other);
    pg_mov(k, PG_U32, t, t1);
    pg_bra(k, top);

    pg_label_bind(k, epilogue);
    pg_comment(k, "d0,d1 at (row g, cols 2t, 2t+1), d2,d3 at row g+8, of each 16x8 tile");
    pgk_mma_store(k, &(pgk_mma_out){.c = ga, .rows = m, .cols = kd, .row0 = m0, .col0 = k0,
                                    .wcol = warp, .wn = 32, .g = g, .t4 = t4, .mt = 4, .nt = 4,
                                    .acc = acc});
    pg_ret(k);
    return pg_kernel_error(k);
}

/* ---------------------------------------------------------------- gemm_f16_backward_a: the cp.async pipeline */

/* Variants 0, 2, 3 and 4 of the f16 kernel (variant 1 is the form above).
 *
 * Block tile BM (M) × BN (K), k-tiles of BK (32 or 64) halves of N, 8
 * warps of (BM/2) × (BN/4) outputs. Variant 0 (64×128, BK 64, 3 stages) is
 * the fastest on the 512-row grad_A of the 1.5B model: 96 blocks or more
 * for 132 SMs where 128-row tiles give 48; variant 2 (128×128, BK 32, 4
 * stages) on large square problems. A k-tile of both operands is copied from global
 * memory straight into shared memory by 16-byte cp.async, `stages` deep:
 * while the warps multiply k-tile t, the copies of t+1 .. t+stages-1 are in
 * flight. One bar.sync a k-tile: after it, every warp has finished with
 * k-tile t-1, so its stage takes the copy of t+stages-1.
 *
 * Shared memory: each stage is BM rows of dC then BN rows of W, 2·BK
 * bytes (BK/8 16-byte chunks) a row. Chunk c of row r lives at chunk
 * c ^ ((r/2) % 4) for 64-byte rows, c ^ (r % 8) for 128-byte rows: the
 * eight rows an ldmatrix matrix reads (and the eight chunks a quarter-warp
 * of copies writes) fall in eight different 16-byte bank groups, so
 * neither conflicts.
 *
 * Fragments: ldmatrix.x4 (no .trans: dC is row-major A, W[K,N] is W read
 * as the column-major B) gives exactly the mma.m16n8k16 register layout;
 * for A the four matrices are (rows 0-7 | 8-15) × (k 0-7 | 8-15) in the
 * order a0..a3, for B (columns 0-7, k 0-7 | 8-15), then columns 8-15:
 * the b0, b1 of two adjacent 8-column tiles.
 *
 * Edges: a copy reads min(8, N - col) halves of an in-range row and
 * zero-fills the rest (src_size), so the k-tiles past N and rows past M or
 * K contribute 0·0; an out-of-range copy reads 0 bytes from the matrix
 * base. 16-byte copies need both base pointers 16-byte aligned and N a
 * multiple of 8; otherwise (a uniform test at the top) each chunk is eight
 * guarded 2-byte loads stored to the same place, four a trip of a
 * two-trip loop. The copies of the prologue and of the loop are one stretch of
 * code (one copy site), entered stages-1 times before the first k-tile
 * and once a k-tile after. The reduction is the
 * same mma sequence over N in order for every block, so the results are
 * deterministic. */

#define F_WARPS_M 2u
#define F_WARPS_N 4u
#define F_THREADS (F_WARPS_M * F_WARPS_N * 32u)
#define F_MAX_CHUNKS 4u /* 16-byte chunks of one operand a thread copies a k-tile */

typedef struct f16_cfg {
    unsigned bm, bn, bk, stages; /* bk: halves of N a k-tile, 32 or 64 */
} f16_cfg;

#define F16_VARIANTS 5
#define F16_LEGACY 1u
static const f16_cfg f16_cfgs[F16_VARIANTS] = {
    {64, 128, 64, 3},
    {0, 0, 0, 0},
    {128, 128, 32, 4},
    {64, 128, 32, 4},
    {128, 128, 64, 3},
};

/* 16-byte chunks: bk/8 a row; each operand a whole number a thread. */
#define F16_CHECK(bm, bn, bk)                                                               \
    _Static_assert((bm) * (bk) / 8 % F_THREADS == 0 && (bn) * (bk) / 8 % F_THREADS == 0 &&  \
                       (bm) * (bk) / 8 / F_THREADS <= F_MAX_CHUNKS &&                       \
                       (bn) * (bk) / 8 / F_THREADS <= F_MAX_CHUNKS &&                       \
                       (bm) / F_WARPS_M % 16 == 0 && (bm) / F_WARPS_M / 16 <= MMA_MAX_MT &&   \
                       (bn) / F_WARPS_N % 16 == 0 && (bn) / F_WARPS_N / 8 <= MMA_MAX_NT &&    \
                       ((bk) == 32 || (bk) == 64),                                          \
                   "f16 pipeline configuration")
F16_CHECK(64, 128, 32);
F16_CHECK(128, 128, 32);
F16_CHECK(64, 128, 64);
F16_CHECK(128, 128, 64);

static uint32_t f16_stage_bytes(const f16_cfg *c) { return (c->bm + c->bn) * c->bk * 2; }

/* The chunks of one operand (BM rows of dC or BN rows of W) that a thread
 * copies: rows tid/4 + j·(threads/4), chunk tid%4 of each. */
typedef struct f_operand {
    unsigned nch, rowstep;        /* chunks a thread; bytes between them */
    unsigned soff;                /* bytes from the stage start to the operand */
    pg_reg base;                  /* u64: the matrix; the source of empty copies */
    pg_reg ptr[F_MAX_CHUNKS];     /* u64: the chunk in the next k-tile to copy */
    pg_reg rowin[F_MAX_CHUNKS];   /* pred: its row is inside the matrix */
} f_operand;

static void f_operand_init(pg_kernel *k, f_operand *o, unsigned rows, unsigned cpr,
                           unsigned soff, pg_reg base, pg_reg n, pg_reg ext, pg_reg row0,
                           pg_reg tid, pg_reg col)
{
    o->nch = rows * cpr / F_THREADS;
    o->rowstep = F_THREADS / cpr * cpr * 16;
    o->soff = soff;
    o->base = base;
    pg_reg r0 = pgv_add(k, PG_U32, row0, pgv_shr(k, PG_U32, tid, pg_u32(log2u(cpr))));
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg row = pgv_add(k, PG_U32, r0, pg_u32(j * (F_THREADS / cpr)));
        o->rowin[j] = pgv_setp(k, PG_CMP_LT, PG_U32, row, ext);
        o->ptr[j] = pgk_elem_addr2(k, base, row, n, col, 2);
    }
}

/* Issue the copies of one k-tile of an operand into the stage at `dst`
 * (the thread's swizzled chunk offset included). */
static void f_operand_copy(pg_kernel *k, const f_operand *o, pg_reg dst, pg_reg colin,
                           pg_reg nbytes)
{
    for (unsigned j = 0; j < o->nch; j++) {
        pg_reg ok = pgv_and(k, PG_PRED, o->rowin[j], colin);
        pg_reg src = pg_reg_new(k, PG_U32), addr = pg_reg_new(k, PG_U64);
        pg_selp(k, PG_U32, src, nbytes, pg_u32(0), ok);
        pg_selp(k, PG_U64, addr, o->ptr[j], o->base, ok);
        pg_cp_async(k, dst, o->soff + j * o->rowstep, addr, 0, 16, src);
    }
}

typedef struct f_copier {
    f_operand a, b;
    pg_reg col;  /* u32: N index of this thread's chunks in the next k-tile */
    pg_reg dsw;  /* u32: the thread's swizzled chunk offset inside an operand */
    pg_reg n, vec;
    unsigned bk;
} f_copier;

/* The chunks of one k-tile with 2-byte loads, for rows that are not
 * 16-byte aligned: halves 4e .. 4e+3 of every chunk a trip, two trips,
 * each chunk's four halves stored as one 8-byte word (a half out of
 * range as 0, like a zero-filled copy). The JIT's time follows the
 * kernel's length, and the eight halves of every chunk unrolled were
 * most of the kernel, for a path that aligned rows never take. */
#define F_SCALAR_HALVES 4u

static void f_copy_scalar(pg_kernel *k, const f_copier *c, pg_reg dst)
{
    pg_reg col = pgv_mov(k, PG_U32, c->col);
    pg_reg sd = pgv_mov(k, PG_U32, dst);
    pg_reg eb = pgv_mov(k, PG_U64, pg_u64(0)); /* bytes into the chunk */
    pg_reg trip = pgv_mov(k, PG_U32, pg_u32(0));
    pg_label top = pg_label_new(k, "copy_halves");
    pg_label_bind(k, top);
    pg_reg colin[F_SCALAR_HALVES];
    for (unsigned e = 0; e < F_SCALAR_HALVES; e++)
        colin[e] = pgv_setp(k, PG_CMP_LT, PG_U32, e ? pgv_add(k, PG_U32, col, pg_u32(e)) : col,
                            c->n);
    const f_operand *ops[2] = {&c->a, &c->b};
    for (unsigned i = 0; i < 2; i++)
        for (unsigned j = 0; j < ops[i]->nch; j++) {
            const f_operand *o = ops[i];
            pg_reg src = pgv_add(k, PG_U64, o->ptr[j], eb);
            pg_reg h[F_SCALAR_HALVES];
            for (unsigned e = 0; e < F_SCALAR_HALVES; e++) {
                h[e] = pgv_mov(k, PG_U16, pg_u32(0));
                pg_reg ok = pgv_and(k, PG_PRED, o->rowin[j], colin[e]);
                pg_guard(k, ok, false);
                pg_ld(k, PG_SPACE_GLOBAL, PG_U16, src, e * 2, h[e]);
            }
            pg_val w[F_SCALAR_HALVES / 2];
            for (unsigned e = 0; e < F_SCALAR_HALVES / 2; e++) {
                pg_reg lo = pgv_cvt(k, PG_U32, PG_U16, PG_RND_NONE, h[2 * e]);
                pg_reg hi = pgv_cvt(k, PG_U32, PG_U16, PG_RND_NONE, h[2 * e + 1]);
                pg_shl(k, PG_B32, hi, hi, pg_u32(16));
                w[e] = pgv_or(k, PG_B32, lo, hi);
            }
            pg_st_v(k, PG_SPACE_SHARED, PG_B32, F_SCALAR_HALVES / 2, sd,
                    o->soff + j * o->rowstep, w);
        }
    pg_add(k, PG_U32, col, col, pg_u32(F_SCALAR_HALVES));
    pg_add(k, PG_U32, sd, sd, pg_u32(F_SCALAR_HALVES * 2));
    pg_add(k, PG_U64, eb, eb, pg_u64(F_SCALAR_HALVES * 2));
    pgk_loop_back(k, trip, pg_u32(8 / F_SCALAR_HALVES), top);
}

/* Copy the next k-tile into the stage at `stage` and commit a group
 * (empty copies past N still commit, keeping the group count uniform). */
static void f_copy_tile(pg_kernel *k, f_copier *c, pg_reg stage)
{
    pg_reg dst = pgv_add(k, PG_U32, stage, c->dsw);
    pg_label scalar = pg_label_new(k, "copy_scalar");
    pg_label done = pg_label_new(k, "copied");
    pg_bra_if(k, c->vec, true, scalar);
    pg_reg colin = pgv_setp(k, PG_CMP_LT, PG_U32, c->col, c->n);
    pg_reg rem = pgv_sub(k, PG_U32, c->n, c->col);
    pg_min(k, PG_U32, rem, rem, pg_u32(8));
    pg_reg nbytes = pgv_shl(k, PG_B32, rem, pg_u32(1));
    f_operand_copy(k, &c->a, dst, colin, nbytes);
    f_operand_copy(k, &c->b, dst, colin, nbytes);
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    f_copy_scalar(k, c, dst);
    pg_label_bind(k, done);
    for (unsigned j = 0; j < c->a.nch; j++)
        pg_add(k, PG_U64, c->a.ptr[j], c->a.ptr[j], pg_u64(c->bk * 2));
    for (unsigned j = 0; j < c->b.nch; j++)
        pg_add(k, PG_U64, c->b.ptr[j], c->b.ptr[j], pg_u64(c->bk * 2));
    pg_add(k, PG_U32, c->col, c->col, pg_u32(c->bk));
    pg_cp_async_commit(k);
}

/* The ldmatrix addresses of the warp's fragments, one a k-step: offsets
 * in a stage, B's after A's tile; the swizzle as the copies store it. */
static void pipe_frag_offsets(pg_kernel *k, const f16_cfg *cfg, pg_reg lane, pg_reg wmi,
                              pg_reg wni, pg_reg *a_off, pg_reg *b_off)
{
    const unsigned WM = cfg->bm / F_WARPS_M, WN = cfg->bn / F_WARPS_N;
    const unsigned ROW = cfg->bk * 2, CPR = cfg->bk / 8, SH = log2u(8 / CPR), KS = cfg->bk / 16;
    pg_comment(k, "ldmatrix row addresses: lane gives row lane%8 of matrix lane/8");
    pg_reg q = pgv_shr(k, PG_U32, lane, pg_u32(3)), r = pgv_and(k, PG_B32, lane, pg_u32(7));
    pg_reg lsw = pgv_and(k, PG_B32, pgv_shr(k, PG_U32, r, pg_u32(SH)), pg_u32(CPR - 1));
    pg_reg q0 = pgv_and(k, PG_B32, q, pg_u32(1)), q1 = pgv_shr(k, PG_U32, q, pg_u32(1));
    pg_reg arow = pg_reg_new(k, PG_U32), brow = pg_reg_new(k, PG_U32);
    pg_mad(k, PG_U32, arow, wmi, pg_u32(WM), r);
    pg_mad(k, PG_U32, arow, q0, pg_u32(8), arow);
    pg_mad(k, PG_U32, brow, wni, pg_u32(WN), r);
    pg_mad(k, PG_U32, brow, q1, pg_u32(8), brow);
    for (unsigned s = 0; s < KS; s++) {
        pg_reg ach = pgv_add(k, PG_U32, q1, pg_u32(2 * s));
        pg_reg bch = pgv_add(k, PG_U32, q0, pg_u32(2 * s));
        pg_xor(k, PG_B32, ach, ach, lsw);
        pg_xor(k, PG_B32, bch, bch, lsw);
        a_off[s] = pgv_shl(k, PG_B32, arow, pg_u32(log2u(ROW)));
        pg_mad(k, PG_U32, a_off[s], ach, pg_u32(16), a_off[s]);
        b_off[s] = pgv_shl(k, PG_B32, brow, pg_u32(log2u(ROW)));
        pg_mad(k, PG_U32, b_off[s], bch, pg_u32(16), b_off[s]);
        pg_add(k, PG_U32, b_off[s], b_off[s], pg_u32(cfg->bm * ROW));
    }
}

/* The k-steps of mma tiles out of the stage at rstage. */
static void pipe_ksteps(pg_kernel *k, const f16_cfg *cfg, pg_reg rstage, const pg_reg *a_off,
                        const pg_reg *b_off, pg_reg (*acc)[MMA_MAX_NT][4])
{
    const unsigned WM = cfg->bm / F_WARPS_M, WN = cfg->bn / F_WARPS_N;
    const unsigned MT = WM / 16, NT = WN / 8, ROW = cfg->bk * 2, KS = cfg->bk / 16;
    for (unsigned s = 0; s < KS; s++) {
        pg_reg ra = pgv_add(k, PG_U32, rstage, a_off[s]), rb = pgv_add(k, PG_U32, rstage, b_off[s]);
        pg_reg af[MMA_MAX_MT][4], bf[MMA_MAX_NT][2];
        for (unsigned mt = 0; mt < MT; mt++) {
            for (unsigned e = 0; e < 4; e++)
                af[mt][e] = pg_reg_new(k, PG_B32);
            pg_ldmatrix(k, 4, false, af[mt], ra, mt * 16 * ROW);
        }
        for (unsigned np = 0; np < NT / 2; np++) {
            pg_reg d[4];
            for (unsigned e = 0; e < 4; e++)
                d[e] = pg_reg_new(k, PG_B32);
            pg_ldmatrix(k, 4, false, d, rb, np * 16 * ROW);
            bf[2 * np][0] = d[0];
            bf[2 * np][1] = d[1];
            bf[2 * np + 1][0] = d[2];
            bf[2 * np + 1][1] = d[3];
        }
        for (unsigned mt = 0; mt < MT; mt++)
            for (unsigned nt = 0; nt < NT; nt++)
                pg_mma_m16n8k16_f16_f32(k, acc[mt][nt], af[mt], bf[nt], acc[mt][nt]);
    }
}

static int build_f16_pipe(pg_kernel *k, const pg_param *p, const f16_cfg *cfg)
{
    const unsigned S = cfg->stages, SB = f16_stage_bytes(cfg);
    const unsigned WM = cfg->bm / F_WARPS_M, WN = cfg->bn / F_WARPS_N;
    const unsigned MT = WM / 16, NT = WN / 8;
    /* row bytes; 16-byte chunks a row; the swizzle: chunk ^ ((row >> sh) & (cpr - 1)) */
    const unsigned ROW = cfg->bk * 2, CPR = cfg->bk / 8, SH = log2u(8 / CPR);
    pg_kernel_set_maxntid(k, F_THREADS, 1, 1);
    f16_args in = f16_begin(k, p, pg_shared_dynamic(k, 128));
    pg_reg dc = in.dc, w = in.w, ga = in.ga, m = in.m, n = in.n, kd = in.kd, sbase = in.sbase;
    pg_reg tid = in.tid, lane = in.lane, warp = in.warp;
    pg_reg wmi = pgv_and(k, PG_B32, warp, pg_u32(F_WARPS_M - 1));
    pg_reg wni = pgv_shr(k, PG_U32, warp, pg_u32(log2u(F_WARPS_M)));
    pg_reg m0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_Y), pg_u32(cfg->bm));
    pg_reg k0 = pgv_mul(k, PG_U32, pg_sreg_read(k, PG_SREG_CTAID_X), pg_u32(cfg->bn));

    pg_comment(k, "16-byte copies need aligned bases and N % 8 == 0 (uniform)");
    f_copier c;
    c.n = n;
    pg_reg veca = pgk_vectors_ok(k, dc, n, 8, 2); /* in order: argument order is unspecified */
    pg_reg vecb = pgk_vectors_ok(k, w, n, 8, 2);
    c.vec = pgv_and(k, PG_PRED, veca, vecb);
    c.bk = cfg->bk;
    pg_reg cc = pgv_and(k, PG_B32, tid, pg_u32(CPR - 1));
    c.col = pgv_shl(k, PG_B32, cc, pg_u32(3));
    f_operand_init(k, &c.a, cfg->bm, CPR, 0, dc, n, m, m0, tid, c.col);
    f_operand_init(k, &c.b, cfg->bn, CPR, cfg->bm * ROW, w, n, kd, k0, tid, c.col);
    /* row tid/cpr (a thread's rows agree mod 8), chunk cc ^ the row's swizzle */
    pg_reg crow = pgv_shr(k, PG_U32, tid, pg_u32(log2u(CPR)));
    pg_reg sw = pgv_and(k, PG_B32, pgv_shr(k, PG_U32, crow, pg_u32(SH)), pg_u32(CPR - 1));
    pg_reg pc = pgv_xor(k, PG_B32, cc, sw);
    c.dsw = pgv_shl(k, PG_B32, crow, pg_u32(log2u(ROW)));
    pg_mad(k, PG_U32, c.dsw, pc, pg_u32(16), c.dsw);

    pg_reg a_off[4], b_off[4];
    pipe_frag_offsets(k, cfg, lane, wmi, wni, a_off, b_off);

    pg_reg acc[MMA_MAX_MT][MMA_MAX_NT][4];
    for (unsigned mt = 0; mt < MT; mt++)
        for (unsigned nt = 0; nt < NT; nt++)
            for (unsigned e = 0; e < 4; e++)
                acc[mt][nt][e] = pgk_zero_f32(k);
    pg_reg ntiles = pgv_add(k, PG_U32, n, pg_u32(cfg->bk - 1));
    pg_shr(k, PG_U32, ntiles, ntiles, pg_u32(log2u(cfg->bk)));

    /* One copy site for the prologue's k-tiles 0 .. stages-2 and the
     * loop's: each copy is a long stretch of code, and the JIT's time
     * follows the kernel's length. `pro` counts the prologue's copies
     * left; it is uniform, as every branch around the bar.sync is. */
    pg_comment(k, "k-tiles 0 .. stages-2 into stages 0 .. stages-2, then one a k-tile");
    pg_reg wstage = pgv_mov(k, PG_U32, sbase), rstage = pgv_mov(k, PG_U32, sbase);
    pg_reg t = pgv_mov(k, PG_U32, pg_u32(0));
    pg_reg pro = pgv_mov(k, PG_U32, pg_u32(S - 1));
    pg_label copy = pg_label_new(k, "copy");
    pg_label top = pg_label_new(k, "ktile");
    pg_label mma = pg_label_new(k, "mma");
    pg_label_bind(k, copy);
    f_copy_tile(k, &c, wstage);
    pg_reg in_loop = pgv_setp(k, PG_CMP_EQ, PG_U32, pro, pg_u32(0));
    pg_bra_if(k, in_loop, false, mma);
    pg_add(k, PG_U32, wstage, wstage, pg_u32(SB));
    pg_sub(k, PG_U32, pro, pro, pg_u32(1));
    pg_reg more = pgv_setp(k, PG_CMP_NE, PG_U32, pro, pg_u32(0));
    pg_bra_if(k, more, false, copy);
    pg_label_bind(k, top);
    pg_cp_async_wait(k, S - 2);
    pg_bar_sync(k, 0);
    pg_comment(k, "to the copy of k-tile t+stages-1 into the stage k-tile t-1 used");
    pg_bra(k, copy);
    pg_label_bind(k, mma);
    pg_comment(k, "the k-steps of mma tiles out of the stage of k-tile t");
    pipe_ksteps(k, cfg, rstage, a_off, b_off, acc);
    pgk_stage_next(k, wstage, sbase, SB, S * SB);
    pgk_stage_next(k, rstage, sbase, SB, S * SB);
    pgk_loop_back(k, t, ntiles, top);
    pg_cp_async_wait(k, 0);

    pg_comment(k, "d0,d1 at (row g, cols 2t, 2t+1), d2,d3 at row g+8, of each 16x8 tile");
    pg_reg g = pgv_shr(k, PG_U32, lane, pg_u32(2)), t4 = pgv_and(k, PG_B32, lane, pg_u32(3));
    pgk_mma_store(k, &(pgk_mma_out){.c = ga, .rows = m, .cols = kd, .row0 = m0, .col0 = k0,
                                    .wrow = wmi, .wcol = wni, .wm = WM, .wn = WN, .g = g,
                                    .t4 = t4, .mt = MT, .nt = NT, .acc = acc});
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_f16_a(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    uint32_t v = knobs[GEMM_VARIANT];
    if (v == F16_LEGACY)
        return build_f16_legacy(k, p);
    return build_f16_pipe(k, p, &f16_cfgs[v]);
}

/* Grid (ceil(K / tile columns), ceil(M / tile rows)); M's tiles on grid y,
 * which stops at 65,535 blocks: F16_MAX_ROWS keeps M inside it for every
 * variant (64 rows are the smallest tile). */
#define F16_MAX_ROWS (65535u * 64u)

static int launch_f16_a(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    uint32_t m = kn[GEMM_M], n = kn[GEMM_N], kd = kn[GEMM_K], v = kn[GEMM_VARIANT];
    if (m == 0 || n == 0 || kd == 0 || m > F16_MAX_ROWS || v >= F16_VARIANTS)
        return PG_ERANGE;
    if (v == F16_LEGACY) {
        *out = (pgk_launch){{pgk_ceil_div(kd, H_BN), pgk_ceil_div(m, H_BM), 1},
                            {H_THREADS, 1, 1}, 0};
        return PG_OK;
    }
    const f16_cfg *c = &f16_cfgs[v];
    *out = (pgk_launch){{pgk_ceil_div(kd, c->bn), pgk_ceil_div(m, c->bm), 1},
                        {F_THREADS, 1, 1},
                        c->stages * f16_stage_bytes(c)};
    return PG_OK;
}

static const pgk_knob gemm_f16_knobs[] = {
    [GEMM_M] = {"m", 512, 1, F16_MAX_ROWS, "rows of dC (tokens); at most 65535 tiles of 64", false},
    [GEMM_N] = {"n", 1536, 1, GEMM_MAX_DIM, "columns of W and dC (layer outputs)", false},
    [GEMM_K] = {"k", 1536, 1, GEMM_MAX_DIM, "rows of W (layer inputs)", false},
    [GEMM_VARIANT] = {"variant", 0, 0, F16_VARIANTS - 1,
                      "(M x K tile, k-tile, cp.async stages) 0 = 64x128, 64, 3; 1 = 64x128 "
                      "register-staged, no cp.async or ldmatrix; 2 = 128x128, 32, 4; "
                      "3 = 64x128, 32, 4; 4 = 128x128, 64, 3",
                      true},
};


static const pgk_param gemm_f16_params[] = {
    {"grad_c", PG_U64, true}, {"w", PG_U64, true}, {"grad_a", PG_U64, true},
    {"m", PG_U32, false},     {"n", PG_U32, false}, {"k", PG_U32, false},
};


const pgk_desc pgk_desc_gemm_f16_backward_a = {
    .name = "gemm_f16_backward_a",
    .summary = "grad_A[M,K] = dC[M,N] * W[K,N]^T, f16 in, f32 accumulate and out (mma.sync)",
    PGK_PARAMS(gemm_f16_params),
    PGK_KNOBS(gemm_f16_knobs),
    .min_target = PG_SM_80,
    .build = build_f16_a,
    .launch = launch_f16_a,
};
