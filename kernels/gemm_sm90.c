/* SPDX-License-Identifier: MIT */
/*
 * gemm_sm90: bf16 / f16 GEMM with f32 accumulation for sm_90a (H100, H200),
 * on warpgroup MMA fed by TMA.
 *
 * One problem, C[P,Q] (+)= Σ_r A(p,r)·B(q,r) (+ bias[q]), in the three
 * layouts of a training step (row-major storage throughout):
 *
 *   layout 0  forward  Y[M,N]  = X[M,K] · W[N,K]ᵀ   P=M Q=N R=K  A, B K-major
 *   layout 1  dX       dX[M,K] = dY[M,N] · W[N,K]   P=M Q=K R=N  A K-major, B N-major
 *   layout 2  dW       dW[N,K] = dY[M,N]ᵀ · X[M,K]  P=N Q=K R=M  A, B M-major
 *
 * The kernel reads A and B only through two tensor maps (TMA descriptors
 * of the row-major matrices as stored, 128-byte swizzle) and takes m = P,
 * n = Q, k = R. A K-major operand (r along its rows: A in layouts 0 and 1,
 * B in layout 0) is mapped with boxes of 64 columns (r) by 128 rows (A) or
 * BN rows (B); an M- or N-major one (p or q along its rows) with boxes of
 * 64 columns by 64 rows (r), several side by side, and multiplied with
 * wgmma's transpose flag: the data is never transposed in memory.
 * runtime/gemm_sm90.c encodes the maps (pgrt_gemm_sm90).
 *
 * Block: 384 threads, three warpgroups. Warpgroup 0 produces: it gives up
 * registers (setmaxnreg.dec), and one elected thread of its first warp
 * issues the TMA copies of each 64-deep k-block of A (128 x 64) and B
 * (BN x 64) into a ring of `stages` shared-memory stages, each with a
 * "full" mbarrier (armed with the stage's bytes, completed by the copies)
 * and an "empty" one (completed when all 256 consumer threads are done
 * with it). Warpgroups 1 and 2 consume: they take registers
 * (setmaxnreg.inc), and each multiplies its 64 rows of the 128 x BN block
 * tile with four m64nBNk16 wgmma a k-block, keeping one k-block's group in
 * flight (wait_group 1) before it frees the stage before. Out-of-range
 * rows, columns and k (ragged M, N, K) read as zero from TMA; the epilogue
 * writes f32, bf16 or f16 from the accumulators, bounds-checked, with
 * optional accumulate (C +=) and bias. The grid is persistent: block b
 * takes tiles b, b + gridDim.x, ... (P-tiles fastest, so the blocks in
 * flight share B tiles in L2).
 *
 * A second operand pair extends the reduction: C (+)= A·B + A2·B2, with A2
 * and B2 stored and mapped like A and B (the same layout, boxes and
 * swizzle) and their r running over k2 more. This is how a LoRA adapter
 * rides in its base product: forward, A2 = s·x·Aᵀ [M, r] and B2 = the
 * adapter's B [N, r]; dX, A2 = s·dY·B [M, r] and B2 = the adapter's A
 * [r, K]. The k2 part takes ceil(k2 / 64) more k-blocks, after A·B's, out
 * of the same ring; k2 = 0 reads neither map.
 *
 * Split-K (knob split > 1) for grids too short to fill the device: a
 * tile's k-blocks are cut into up to `split` slices, each a work unit of
 * its own. A slice stores its f32 accumulators to the workspace and
 * counts itself in on the tile's counter (u32, zero between launches);
 * the slice that arrives last sums all the slices' partials in slice
 * order, from the workspace, resets the counter and runs the epilogue.
 *
 * Each output element is one chain of f32 wgmma accumulations over r in
 * order (split: a fixed-order sum of such chains): no float atomics,
 * bitwise reproducible run to run.
 *
 * Shapes are parameters (one module a layout, dtype, epilogue and BN);
 * knob `sms` (the device's SM count) only caps the grid.
 */
#include "kernels.h"


#define GEMM90_MAX_DIM (1u << 24)
#define BM 128u
#define BK 64u
#define THREADS 384u
/* Shared memory the ring may take: the opt-in maximum of H100 and H200
 * (227 KiB) less 1 KiB to align the ring to the 1024-byte period of the
 * 128-byte swizzle and 1 KiB for the barriers. More stages in flight hide
 * more of TMA's latency: 4 at bn = 256, 5 at 192, 7 at 128, 8 at 64. */
#define RING_BYTES (225u * 1024u)

enum { KN_M, KN_N, KN_K, KN_SMS, KN_LAYOUT, KN_TYPES, KN_EPI, KN_BN, KN_SPLIT, KN_COUNT };
#define MAX_SPLIT 16u

static const pgk_knob knobs[KN_COUNT] = {
    [KN_M] = {"m", 2048, 1, GEMM90_MAX_DIM, "P: rows of C", false},
    [KN_N] = {"n", 1536, 1, GEMM90_MAX_DIM, "Q: columns of C", false},
    [KN_K] = {"k", 1536, 1, GEMM90_MAX_DIM, "R: the reduction", false},
    [KN_SMS] = {"sms", 132, 1, 1024, "multiprocessors: the persistent grid's cap", false},
    [KN_LAYOUT] = {"layout", 0, 0, 2, "0 forward X*W^T, 1 dX = dY*W, 2 dW = dY^T*X", true},
    [KN_TYPES] = {"types", 0, 0, 3,
                  "inputs -> output: 0 bf16->f32, 1 bf16->bf16, 2 f16->f32, 3 f16->f16", true},
    [KN_EPI] = {"epilogue", 0, 0, 3, "bit 0: accumulate (C +=), bit 1: add bias[n] (f32)", true},
    [KN_BN] = {"bn", 256, 64, 256, "block tile columns (64, 128, 192 or 256)", true},
    [KN_SPLIT] = {"split", 1, 1, MAX_SPLIT, "slices of the reduction a tile (workspace, counters)",
                  true},
};

static const pgk_param params[] = {
    {"tmap_a", PG_B8, .tensor_map = true},
    {"tmap_b", PG_B8, .tensor_map = true},
    {"c", PG_U64, true},
    {"bias", PG_U64, false}, /* f32[n] device address; 0 without bias */
    {"m", PG_U32, false},
    {"n", PG_U32, false},
    {"k", PG_U32, false},
    {"ldc", PG_U32, false}, /* elements between rows of C */
    {"tmap_a2", PG_B8, .tensor_map = true}, /* the extension pair: read when k2 > 0 */
    {"tmap_b2", PG_B8, .tensor_map = true},
    {"k2", PG_U32, false}, /* the extension's reduction length; 0: none */
    {"ws", PG_U64, false},       /* split > 1: f32 partials, pgk_gemm_sm90_workspace bytes */
    {"counters", PG_U64, false}, /* split > 1: a u32 a tile, zero between launches */
};

static uint32_t stage_bytes(uint32_t bn) { return (BM + bn) * BK * 2u; }
static uint32_t stages_for(uint32_t bn)
{
    uint32_t s = RING_BYTES / stage_bytes(bn);
    return s > 8 ? 8 : s;
}

/* ---------------------------------------------------------------- build */

typedef struct gemm90 {
    uint32_t layout, bn, stages, epi, split;
    pg_type ab, out;
    bool a_mn, b_mn;
} gemm90;

/* The next stage of the ring: s + 1, back to 0 after the last stage, and
 * then the mbarrier parity ph flips. */
static void ring_next(pg_kernel *k, pg_reg s, pg_reg ph, uint32_t stages)
{
    pg_add(k, PG_U32, s, s, pg_u32(1));
    pg_reg wrap = pgv_setp(k, PG_CMP_EQ, PG_U32, s, pg_u32(stages));
    pg_guard(k, wrap, false);
    pg_mov(k, PG_U32, s, pg_u32(0));
    pg_guard(k, wrap, false);
    pg_xor(k, PG_U32, ph, ph, pg_u32(1));
}

/* The work units: tile t = u % ntiles, slice u / ntiles, each slice kps
 * k-blocks of the nkt (the last may be short); units past the slices that
 * exist (nslices) are skipped. Without a split a unit is a tile. */
typedef struct units {
    pg_reg ntiles, nunits, kps, nslices;
} units;

typedef struct unit {
    pg_reg t, slice, k0, k1;
} unit;

static unit unit_of(pg_kernel *k, const gemm90 *g, const units *us, pg_reg u, pg_reg nkt)
{
    if (g->split == 1)
        return (unit){u, pg_none(), pg_u32(0), nkt};
    pg_reg sl = pgv_div(k, PG_U32, u, us->ntiles);
    pg_reg t = pgv_sub(k, PG_U32, u, pgv_mul(k, PG_U32, sl, us->ntiles));
    pg_reg k0 = pgv_mul(k, PG_U32, sl, us->kps);
    pg_reg k1 = pgv_min(k, PG_U32, pgv_add(k, PG_U32, k0, us->kps), nkt);
    return (unit){t, sl, k0, k1};
}

/* Jump to `next` for a unit past the slices that exist. */
static void skip_empty(pg_kernel *k, const gemm90 *g, const units *us, const unit *w,
                       pg_label next)
{
    if (g->split > 1)
        pg_bra_if(k, pgv_setp(k, PG_CMP_GE, PG_U32, w->slice, us->nslices), false, next);
}

/* The TMA copies of one k-block (r from r0) of A (128 rows from p0) and
 * B (bn from q0) into the stage at sa, completing barrier fb. */
static void load_stage(pg_kernel *k, const gemm90 *g, pg_reg ta, pg_reg tb, pg_reg sa, pg_reg r0,
                       pg_reg p0, pg_reg q0, pg_reg fb)
{
    pg_reg sbb = pgv_add(k, PG_U32, sa, pg_u32(BM * BK * 2));
    if (!g->a_mn) {
        pg_val c[2] = {r0, p0};
        pg_cp_async_bulk_tensor(k, 2, sa, ta, c, fb);
    } else {
        for (uint32_t j = 0; j < BM / 64; j++) {
            pg_val c[2] = {j ? pgv_add(k, PG_U32, p0, pg_u32(64 * j)) : p0, r0};
            pg_cp_async_bulk_tensor(k, 2, j ? pgv_add(k, PG_U32, sa, pg_u32(8192 * j)) : sa,
                                    ta, c, fb);
        }
    }
    if (!g->b_mn) {
        pg_val c[2] = {r0, q0};
        pg_cp_async_bulk_tensor(k, 2, sbb, tb, c, fb);
    } else {
        for (uint32_t j = 0; j < g->bn / 64; j++) {
            pg_val c[2] = {j ? pgv_add(k, PG_U32, q0, pg_u32(64 * j)) : q0, r0};
            pg_cp_async_bulk_tensor(k, 2, j ? pgv_add(k, PG_U32, sbb, pg_u32(8192 * j)) : sbb,
                                    tb, c, fb);
        }
    }
}

/* The producer: one thread issues every copy, the k-blocks of A·B
 * (kb < nk) and then those of the extension A2·B2 (up to nkt). */
static void producer(pg_kernel *k, const gemm90 *g, const pg_reg *maps, pg_reg ring, pg_reg full,
                     pg_reg empty, pg_reg tiles_p, const units *us, pg_reg nk, pg_reg nkt)
{
    pg_setmaxnreg(k, false, 40);
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg not_w0 = pgv_setp(k, PG_CMP_NE, PG_U32, warp, pg_u32(0));
    pg_guard(k, not_w0, false);
    pg_exit(k);
    pg_reg leader = pg_reg_new(k, PG_PRED);
    pg_elect_sync(k, leader, pg_u32(0xffffffffu));
    pg_guard(k, leader, true);
    pg_exit(k);

    uint32_t sb = stage_bytes(g->bn);
    pg_reg s = pgv_mov(k, PG_U32, pg_u32(0)), ph = pgv_mov(k, PG_U32, pg_u32(1));
    pg_loop tl, kl;
    pg_reg stride = pg_sreg_read(k, PG_SREG_NCTAID_X);
    pg_reg u = pg_for_begin(k, &tl, pg_sreg_read(k, PG_SREG_CTAID_X), us->nunits, stride);
    unit w = unit_of(k, g, us, u, nkt);
    pg_label next = pg_label_new(k, "prod_next");
    skip_empty(k, g, us, &w, next);
    pg_reg p0 = pgv_mul(k, PG_U32, pgv_rem(k, PG_U32, w.t, tiles_p), pg_u32(BM));
    pg_reg q0 = pgv_mul(k, PG_U32, pgv_div(k, PG_U32, w.t, tiles_p), pg_u32(g->bn));
    pg_reg kb = pg_for_begin(k, &kl, w.k0, w.k1, pg_u32(1));
    {
        pg_reg eb = pgv_mad(k, PG_U32, s, pg_u32(8), empty);
        pg_reg fb = pgv_mad(k, PG_U32, s, pg_u32(8), full);
        /* a fresh barrier counts as having completed the phase before its
         * first: the first pass over the ring does not wait */
        pg_mbarrier_wait_parity(k, eb, 0, ph);
        pg_mbarrier_arrive_expect_tx(k, fb, 0, pg_u32(sb));
        pg_reg sa = pgv_mad(k, PG_U32, s, pg_u32(sb), ring);
        pg_label ext = pg_label_new(k, "ext_block"), loaded = pg_label_new(k, "loaded");
        pg_bra_if(k, pgv_setp(k, PG_CMP_LT, PG_U32, kb, nk), true, ext);
        load_stage(k, g, maps[0], maps[1], sa, pgv_shl(k, PG_U32, kb, pg_u32(6)), p0, q0, fb);
        pg_bra(k, loaded);
        pg_label_bind(k, ext);
        load_stage(k, g, maps[2], maps[3], sa,
                   pgv_shl(k, PG_U32, pgv_sub(k, PG_U32, kb, nk), pg_u32(6)), p0, q0, fb);
        pg_label_bind(k, loaded);
        ring_next(k, s, ph, g->stages);
    }
    pg_for_end(k, &kl);
    pg_label_bind(k, next);
    pg_for_end(k, &tl);
    pg_exit(k);
}

/* Two horizontally adjacent outputs x0, x1 into C at addr+off (+esz): one
 * vector store where pv (both in range and the pair aligned), else one
 * scalar store each where p0 / p1. With accumulate the old values are
 * loaded the same way first. */
static void store_pair(pg_kernel *k, const gemm90 *g, pg_reg addr, int64_t off, pg_reg x0,
                       pg_reg x1, pg_reg pv, pg_reg p0, pg_reg p1)
{
    uint32_t esz = g->out == PG_F32 ? 4 : 2;
    pg_reg v[2] = {x0, x1};
    pg_reg p[2] = {p0, p1};
    if (g->epi & 1) {
        pg_type lt = g->out == PG_F32 ? PG_F32 : g->out;
        pg_reg old[2];
        for (int i = 0; i < 2; i++) {
            old[i] = pg_reg_new(k, lt);
            /* defined where the guards are off */
            pg_mov(k, lt == PG_F32 ? PG_F32 : PG_B16, old[i],
                   lt == PG_F32 ? pg_f32(0.0f) : pg_u32(0));
        }
        pg_guard(k, pv, false);
        pg_ld_v(k, PG_SPACE_GLOBAL, lt, 2, addr, off, old);
        for (int i = 0; i < 2; i++) {
            pg_guard(k, p[i], false);
            pg_ld(k, PG_SPACE_GLOBAL, lt, addr, off + (int64_t)(i * esz), old[i]);
            pg_reg o = lt == PG_F32 ? old[i] : pgv_cvt(k, PG_F32, lt, PG_RND_NONE, old[i]);
            v[i] = pgv_add(k, PG_F32, v[i], o);
        }
    }
    pg_val sv[2] = {v[0], v[1]};
    if (g->out != PG_F32)
        for (int i = 0; i < 2; i++)
            sv[i] = pgv_cvt(k, g->out, PG_F32, PG_RND_RN, v[i]);
    pg_guard(k, pv, false);
    pg_st_v(k, PG_SPACE_GLOBAL, g->out, 2, addr, off, sv);
    for (int i = 0; i < 2; i++) {
        pg_guard(k, p[i], false);
        pg_st(k, PG_SPACE_GLOBAL, g->out, addr, off + (int64_t)(i * esz), sv[i]);
    }
}

/* The epilogue of one consumer warpgroup: its 64 x BN accumulators to C.
 * Thread t of the warpgroup holds, for each 8-column block j, rows row0
 * and row0 + 8, columns col0 + 8j and col0 + 8j + 1 (the m64nNk16 f32
 * fragment). */
static void epilogue(pg_kernel *k, const gemm90 *g, const pg_reg *acc, pg_reg c, pg_reg bias,
                     pg_reg m, pg_reg n, pg_reg ldc, pg_reg row0, pg_reg col0, pg_reg inside)
{
    uint32_t esz = g->out == PG_F32 ? 4 : 2;
    pg_reg r1 = pgv_add(k, PG_U32, row0, pg_u32(8));
    pg_reg ok[2] = {pgv_setp(k, PG_CMP_LT, PG_U32, row0, m), pgv_setp(k, PG_CMP_LT, PG_U32, r1, m)};
    /* element offsets in 64 bits: row * ldc + col */
    pg_reg e0 = pgv_mad_wide(k, PG_U32, row0, ldc, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, col0));
    pg_reg a0 = pgv_add(k, PG_U64, c, pgv_shl(k, PG_U64, e0, pg_u32(esz == 4 ? 2 : 1)));
    pg_reg step = pgv_mul_wide(k, PG_U32, ldc, pg_u32(8 * esz));
    pg_reg a[2] = {a0, pgv_add(k, PG_U64, a0, step)};
    /* pairs are aligned for one vector access when ldc is even and c is
     * aligned to a pair (col0 is even) */
    pg_reg odd = pgv_and(k, PG_U32, ldc, pg_u32(1));
    pg_reg cmis = pgv_cvt(k, PG_U32, PG_U64, PG_RND_NONE, pgv_and(k, PG_B64, c, pg_u64(2 * esz - 1)));
    pg_reg vec_ok = pgv_setp(k, PG_CMP_EQ, PG_U32, pgv_or(k, PG_U32, odd, cmis), pg_u32(0));
    bool bias_on = g->epi & 2;
    pg_reg bptr = pg_none();
    if (bias_on)
        bptr = pgk_elem_addr(k, bias, col0, 4);
    /* the fast path reads bias pairs as one 8-byte load too */
    pg_reg fast_ok = vec_ok;
    if (bias_on) {
        pg_reg bmis = pgv_cvt(k, PG_U32, PG_U64, PG_RND_NONE, pgv_and(k, PG_B64, bias, pg_u64(7)));
        fast_ok = pgv_and(k, PG_PRED, vec_ok, pgv_setp(k, PG_CMP_EQ, PG_U32, bmis, pg_u32(0)));
    }

    /* The fast path: the tile inside C and the pairs aligned (every tile
     * of most shapes): vector accesses at fixed offsets, no predicates. */
    pg_label slow = pg_label_new(k, "epi_edge"), done = pg_label_new(k, "epi_done");
    pg_bra_if(k, pgv_and(k, PG_PRED, inside, fast_ok), true, slow);
    for (uint32_t j = 0; j < g->bn / 8; j++) {
        pg_reg v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
        if (bias_on) {
            pg_reg b[2] = {pg_reg_new(k, PG_F32), pg_reg_new(k, PG_F32)};
            pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 2, bptr, 32 * j, b);
            for (int i = 0; i < 4; i++)
                v[i] = pgv_add(k, PG_F32, v[i], b[i % 2]);
        }
        for (int r = 0; r < 2; r++) {
            int64_t o = (int64_t)(8 * j * esz);
            pg_reg x[2] = {v[2 * r], v[2 * r + 1]};
            pg_type lt = g->out;
            if (g->epi & 1) {
                pg_reg old[2] = {pg_reg_new(k, lt), pg_reg_new(k, lt)};
                pg_ld_v(k, PG_SPACE_GLOBAL, lt, 2, a[r], o, old);
                for (int i = 0; i < 2; i++)
                    x[i] = pgv_add(k, PG_F32, x[i], lt == PG_F32 ? old[i]
                                   : pgv_cvt(k, PG_F32, lt, PG_RND_NONE, old[i]));
            }
            if (lt != PG_F32) {
                /* the pair rounded and packed by one cvt, one 4-byte store */
                pg_st(k, PG_SPACE_GLOBAL, PG_B32, a[r], o, pgv_cvt_pack(k, lt, x[0], x[1]));
                continue;
            }
            pg_val sv[2] = {x[0], x[1]};
            pg_st_v(k, PG_SPACE_GLOBAL, lt, 2, a[r], o, sv);
        }
    }
    pg_bra(k, done);
    pg_label_bind(k, slow);
    for (uint32_t j = 0; j < g->bn / 8; j++) {
        pg_reg cj = pgv_add(k, PG_U32, col0, pg_u32(8 * j));
        pg_reg cin0 = pgv_setp(k, PG_CMP_LT, PG_U32, cj, n);
        pg_reg cin1 = pgv_setp(k, PG_CMP_LT, PG_U32, pgv_add(k, PG_U32, cj, pg_u32(1)), n);
        pg_reg pair = pgv_and(k, PG_PRED, cin1, vec_ok); /* cin1 implies cin0 */
        pg_reg s0 = pgv_and(k, PG_PRED, cin0, pgv_not(k, PG_PRED, pair));
        pg_reg s1 = pgv_and(k, PG_PRED, cin1, pgv_not(k, PG_PRED, pair));
        pg_reg v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
        if (bias_on) {
            pg_reg b0 = pgv_mov(k, PG_F32, pg_f32(0.0f)), b1 = pgv_mov(k, PG_F32, pg_f32(0.0f));
            pg_guard(k, cin0, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, bptr, 32 * j, b0);
            pg_guard(k, cin1, false);
            pg_ld(k, PG_SPACE_GLOBAL, PG_F32, bptr, 32 * j + 4, b1);
            for (int i = 0; i < 4; i++)
                v[i] = pgv_add(k, PG_F32, v[i], i % 2 ? b1 : b0);
        }
        int64_t o = (int64_t)(8 * j * esz);
        for (int r = 0; r < 2; r++) {
            pg_reg ok1 = pgv_and(k, PG_PRED, ok[r], s1);
            pg_reg ok0 = pgv_and(k, PG_PRED, ok[r], s0);
            store_pair(k, g, a[r], o, v[2 * r], v[2 * r + 1],
                       pgv_and(k, PG_PRED, ok[r], pair), ok0, ok1);
        }
    }
    pg_label_bind(k, done);
}

/* Split-K, after a slice's k-blocks: its partials to the workspace and
 * its count on the tile's counter; the slice that comes last (its CTA
 * jumps past `skip` otherwise) sums every slice's partials into acc, in
 * slice order. ct: the consumer thread, 0..255. */
static void split_reduce(pg_kernel *k, const gemm90 *g, const units *us, const unit *w,
                         pg_reg *acc, pg_reg ws, pg_reg counters, pg_reg ct, pg_reg flag,
                         pg_label skip)
{
    uint32_t nacc = g->bn / 2, tb = 256u * nacc * 4u; /* a unit's partials, bytes */
    /* [tile][slice][thread][nacc]: each thread's own, contiguous */
    pg_reg tile_slot = pgv_mul(k, PG_U32, w->t, pg_u32(g->split));
    pg_reg mine = pgv_mad_wide(k, PG_U32, ct, pg_u32(nacc * 4u), ws);
    pg_reg a0 = pgv_add(k, PG_U64, mine, pgv_mul_wide(k, PG_U32, tile_slot, pg_u32(tb)));
    pg_reg own = pgv_add(k, PG_U64, a0, pgv_mul_wide(k, PG_U32, w->slice, pg_u32(tb)));
    for (uint32_t i = 0; i < nacc; i += 4)
        pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, own, (int64_t)i * 4, acc + i);
    /* publish, count this slice in: the fences on both sides of the count
     * release the block's partials with it and acquire the others' */
    pg_fence(k, PG_SCOPE_GPU, false);
    pg_bar_sync_count(k, 1, 256);
    pg_label counted = pg_label_new(k, "split_counted");
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, ct, pg_u32(0)), true, counted);
    pg_reg ca = pgk_elem_addr(k, counters, w->t, 4);
    pg_reg old = pg_reg_new(k, PG_U32);
    pg_fence(k, PG_SCOPE_GPU, false);
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_U32, old, ca, 0, pg_u32(1), pg_none());
    pg_fence(k, PG_SCOPE_GPU, false);
    pg_reg last = pgv_setp(k, PG_CMP_EQ, PG_U32, pgv_add(k, PG_U32, old, pg_u32(1)), us->nslices);
    /* every slice is in: the counter is free for the next launch */
    pg_guard(k, last, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, ca, 0, pg_u32(0));
    pg_st(k, PG_SPACE_SHARED, PG_U32, flag, 0, pgv_selp(k, PG_U32, pg_u32(1), pg_u32(0), last));
    pg_label_bind(k, counted);
    pg_bar_sync_count(k, 1, 256);
    pg_reg f = pgv_ld(k, PG_SPACE_SHARED, PG_U32, flag, 0);
    /* the flag is read before the next unit's count can change it */
    pg_bar_sync_count(k, 1, 256);
    pg_bra_if(k, pgv_setp(k, PG_CMP_EQ, PG_U32, f, pg_u32(0)), false, skip);
    pg_fence(k, PG_SCOPE_GPU, false);
    /* the sum in slice order from the first slice's partials */
    for (uint32_t i = 0; i < nacc; i += 4)
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, a0, (int64_t)i * 4, acc + i);
    pg_loop sl;
    pg_reg j = pg_for_begin(k, &sl, pg_u32(1), us->nslices, pg_u32(1));
    pg_reg aj = pgv_add(k, PG_U64, a0, pgv_mul_wide(k, PG_U32, j, pg_u32(tb)));
    for (uint32_t i = 0; i < nacc; i += 4) {
        pg_reg v[4];
        for (int e = 0; e < 4; e++)
            v[e] = pg_reg_new(k, PG_F32);
        pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, aj, (int64_t)i * 4, v);
        for (int e = 0; e < 4; e++)
            pg_add(k, PG_F32, acc[i + e], acc[i + e], v[e]);
    }
    pg_for_end(k, &sl);
}

static void consumer(pg_kernel *k, const gemm90 *g, pg_reg ring, pg_reg full, pg_reg empty,
                     pg_reg tiles_p, const units *us, pg_reg nkt, pg_reg c, pg_reg bias, pg_reg m,
                     pg_reg n, pg_reg ldc, pg_reg ws, pg_reg counters, pg_reg flag)
{
    pg_setmaxnreg(k, true, 232);
    uint32_t nacc = g->bn / 2;
    pg_reg acc[128];
    for (uint32_t i = 0; i < nacc; i++)
        acc[i] = pgv_mov(k, PG_F32, pg_f32(0.0f));
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg cw = pgv_sub(k, PG_U32, pgv_shr(k, PG_U32, tid, pg_u32(7)), pg_u32(1)); /* 0 or 1 */
    pg_reg lt = pgv_and(k, PG_U32, tid, pg_u32(127));
    pg_reg w = pgv_shr(k, PG_U32, lt, pg_u32(5));
    pg_reg lane = pgv_and(k, PG_U32, lt, pg_u32(31));
    /* this thread's first accumulator row and column within the tile */
    pg_reg quad = pgv_shr(k, PG_U32, lane, pg_u32(2));
    pg_reg wrow = pgv_add(k, PG_U32, pgv_shl(k, PG_U32, w, pg_u32(4)), quad);
    pg_reg trow = pgv_add(k, PG_U32, pgv_shl(k, PG_U32, cw, pg_u32(6)), wrow);
    pg_reg tcol = pgv_shl(k, PG_U32, pgv_and(k, PG_U32, lane, pg_u32(3)), pg_u32(1));

    /* Descriptors of stage 0; a stage adds its byte offset >> 4. K-major
     * tiles: 8-row groups 1024 bytes apart (SBO), a k16 step 32 bytes.
     * M/N-major: 64-wide column blocks 8192 bytes apart (LBO), 8-deep r
     * groups 1024 bytes apart (SBO), a k16 step 2048 bytes. */
    uint32_t sb = stage_bytes(g->bn);
    pg_reg a_tile = pgv_mad(k, PG_U32, cw, pg_u32(8192), ring); /* 64 rows, either layout */
    pg_reg b_tile = pgv_add(k, PG_U32, ring, pg_u32(BM * BK * 2));
    pg_reg da0 = pg_wgmma_desc(k, a_tile, g->a_mn ? 8192 : 16, 1024, 0, PG_SWIZZLE_128B);
    pg_reg db0 = pg_wgmma_desc(k, b_tile, g->b_mn ? 8192 : 16, 1024, 0, PG_SWIZZLE_128B);
    uint32_t a_step = g->a_mn ? 2048 / 16 : 32 / 16, b_step = g->b_mn ? 2048 / 16 : 32 / 16;

    pg_reg s = pgv_mov(k, PG_U32, pg_u32(0)), ph = pgv_mov(k, PG_U32, pg_u32(0));
    pg_reg prev = pgv_mov(k, PG_U32, pg_u32(0));
    pg_loop tl, kl;
    pg_reg stride = pg_sreg_read(k, PG_SREG_NCTAID_X);
    pg_reg u = pg_for_begin(k, &tl, pg_sreg_read(k, PG_SREG_CTAID_X), us->nunits, stride);
    unit wu = unit_of(k, g, us, u, nkt);
    pg_label next = pg_label_new(k, "cons_next");
    skip_empty(k, g, us, &wu, next);
    pg_reg t = wu.t;
    pg_reg kb = pg_for_begin(k, &kl, wu.k0, wu.k1, pg_u32(1));
    {
        pg_reg fb = pgv_mad(k, PG_U32, s, pg_u32(8), full);
        pg_mbarrier_wait_parity(k, fb, 0, ph);
        pg_reg so = pgv_mul_wide(k, PG_U32, s, pg_u32(sb / 16));
        pg_reg da = pgv_add(k, PG_U64, da0, so), db = pgv_add(k, PG_U64, db0, so);
        pg_reg more = pgv_setp(k, PG_CMP_NE, PG_U32, kb, wu.k0);
        pg_wgmma_fence(k);
        for (uint32_t kk = 0; kk < BK / 16; kk++) {
            pg_wgmma wg = {
                .n = g->bn, .ab = g->ab, .d = acc,
                .a_desc = kk ? pgv_add(k, PG_U64, da, pg_u64(kk * a_step)) : da,
                .b_desc = kk ? pgv_add(k, PG_U64, db, pg_u64(kk * b_step)) : db,
                .scale_d = kk ? pg_u32(1) : more,
                .trans_a = g->a_mn, .trans_b = g->b_mn,
            };
            pg_wgmma_mma_async(k, &wg);
        }
        pg_wgmma_commit(k);
        /* the k-block before this one is done: its stage can be refilled */
        pg_wgmma_wait(k, 1);
        pg_reg eb = pgv_mad(k, PG_U32, prev, pg_u32(8), empty);
        pg_guard(k, more, false);
        pg_mbarrier_arrive(k, eb, 0);
        pg_mov(k, PG_U32, prev, s);
        ring_next(k, s, ph, g->stages);
    }
    pg_for_end(k, &kl);
    pg_wgmma_wait(k, 0);
    pg_mbarrier_arrive(k, pgv_mad(k, PG_U32, prev, pg_u32(8), empty), 0);
    if (g->split > 1)
        split_reduce(k, g, us, &wu, acc, ws, counters, pgv_sub(k, PG_U32, tid, pg_u32(128)), flag,
                     next);

    pg_reg p_end = pgv_mad(k, PG_U32, pgv_rem(k, PG_U32, t, tiles_p), pg_u32(BM), pg_u32(BM));
    pg_reg q_end = pgv_mad(k, PG_U32, pgv_div(k, PG_U32, t, tiles_p), pg_u32(g->bn), pg_u32(g->bn));
    pg_reg row0 = pgv_add(k, PG_U32, pgv_sub(k, PG_U32, p_end, pg_u32(BM)), trow);
    pg_reg col0 = pgv_add(k, PG_U32, pgv_sub(k, PG_U32, q_end, pg_u32(g->bn)), tcol);
    /* a tile wholly inside C stores without a bound check */
    pg_reg q_in = pgv_setp(k, PG_CMP_LE, PG_U32, q_end, n);
    pg_reg inside = pgv_and(k, PG_PRED, pgv_setp(k, PG_CMP_LE, PG_U32, p_end, m), q_in);
    epilogue(k, g, acc, c, bias, m, n, ldc, row0, col0, inside);
    pg_label_bind(k, next);
    pg_for_end(k, &tl);
}

static int build(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    gemm90 g = {
        .layout = kn[KN_LAYOUT], .bn = kn[KN_BN], .epi = kn[KN_EPI],
        .ab = kn[KN_TYPES] >= 2 ? PG_F16 : PG_BF16,
        .out = kn[KN_TYPES] == 1 ? PG_BF16 : kn[KN_TYPES] == 3 ? PG_F16 : PG_F32,
        .a_mn = kn[KN_LAYOUT] == 2, .b_mn = kn[KN_LAYOUT] != 0, .split = kn[KN_SPLIT],
    };
    if (g.bn % 64)
        return pg_kernel_fail(k, PG_ERANGE, "gemm_sm90: bn=%u is not a multiple of 64", g.bn);
    g.stages = stages_for(g.bn);
    pg_kernel_set_minnctapersm(k, 1); /* .maxntid: the descriptor's .threads */

    pg_shared dyn = pg_shared_dynamic(k, 128);
    pg_shared bars = pg_shared_static(k, PG_B64, 2 * g.stages, 8, "bars");
    pg_reg maps[4]; /* in turn: the order of an initializer's calls is open */
    static const int map_param[4] = {0, 1, 8, 9};
    for (int i = 0; i < 4; i++)
        maps[i] = pg_param_addr(k, p[map_param[i]]);
    pg_reg c = pg_param_load(k, p[2]), bias = pg_param_load(k, p[3]);
    pg_reg m = pg_param_load(k, p[4]), n = pg_param_load(k, p[5]);
    pg_reg kk = pg_param_load(k, p[6]), ldc = pg_param_load(k, p[7]);
    pg_reg k2 = pg_param_load(k, p[10]);
    pg_reg ws = pg_param_load(k, p[11]), counters = pg_param_load(k, p[12]);

    /* the ring, aligned up to the swizzle's 1024-byte period */
    pg_reg ring = pgv_mov(k, PG_U32, pg_shared_addr(dyn));
    pg_add(k, PG_U32, ring, ring, pg_u32(1023));
    pg_and(k, PG_U32, ring, ring, pg_u32(~1023u));
    pg_reg full = pgv_mov(k, PG_U32, pg_shared_addr(bars));
    pg_reg empty = pgv_add(k, PG_U32, full, pg_u32(8 * g.stages));

    pg_reg tiles_p = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, m, pg_u32(BM - 1)), pg_u32(7));
    pg_reg tiles_q = pgv_div(k, PG_U32, pgv_add(k, PG_U32, n, pg_u32(g.bn - 1)), pg_u32(g.bn));
    units us = {.ntiles = pgv_mul(k, PG_U32, tiles_p, tiles_q)};
    pg_reg nk = pgv_shr(k, PG_U32, pgv_add(k, PG_U32, kk, pg_u32(BK - 1)), pg_u32(6));
    pg_reg nkt = pgv_add(k, PG_U32, nk, pgv_shr(k, PG_U32, pgv_add(k, PG_U32, k2, pg_u32(BK - 1)),
                                                pg_u32(6)));
    us.nunits = us.ntiles;
    pg_reg flag = pg_none();
    if (g.split > 1) {
        /* slices of ceil(nkt / split) k-blocks; the units of a slice past
         * the last one that has any are skipped */
        us.kps = pgv_div(k, PG_U32, pgv_add(k, PG_U32, nkt, pg_u32(g.split - 1)), pg_u32(g.split));
        pg_reg kps1 = pgv_sub(k, PG_U32, us.kps, pg_u32(1));
        us.nslices = pgv_div(k, PG_U32, pgv_add(k, PG_U32, nkt, kps1), us.kps);
        us.nunits = pgv_mul(k, PG_U32, us.ntiles, pg_u32(g.split));
        flag = pgv_mov(k, PG_U32, pg_shared_addr(pg_shared_static(k, PG_U32, 1, 4, "last")));
    }

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, tid, pg_u32(0));
    pg_label inited = pg_label_new(k, "inited");
    pg_bra_if(k, first, true, inited);
    for (uint32_t i = 0; i < g.stages; i++) {
        pg_mbarrier_init(k, full, 8 * i, pg_u32(1));
        pg_mbarrier_init(k, empty, 8 * i, pg_u32(256));
    }
    pg_fence_mbarrier_init(k);
    pg_fence_proxy_async(k);
    pg_label_bind(k, inited);
    pg_bar_sync(k, 0);

    pg_reg wg = pgv_shr(k, PG_U32, tid, pg_u32(7));
    pg_reg is_prod = pgv_setp(k, PG_CMP_EQ, PG_U32, wg, pg_u32(0));
    pg_label prod = pg_label_new(k, "producer");
    pg_bra_if(k, is_prod, false, prod);
    consumer(k, &g, ring, full, empty, tiles_p, &us, nkt, c, bias, m, n, ldc, ws, counters, flag);
    pg_exit(k);
    pg_label_bind(k, prod);
    producer(k, &g, maps, ring, full, empty, tiles_p, &us, nk, nkt);
    return pg_kernel_error(k);
}

/* ---------------------------------------------------------------- launch */

static int launch(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    uint32_t bn = kn[KN_BN];
    if (bn % 64)
        return PG_ERANGE;
    uint64_t tiles = (uint64_t)((kn[KN_M] + BM - 1) / BM) * ((kn[KN_N] + bn - 1) / bn);
    uint64_t work = tiles * kn[KN_SPLIT];
    uint64_t grid = work < kn[KN_SMS] ? work : kn[KN_SMS];
    *out = (pgk_launch){{(uint32_t)grid, 1, 1}, {d->threads, 1, 1},
                        stages_for(bn) * stage_bytes(bn) + 1024, {0, 0, 0}};
    return PG_OK;
}

const pgk_desc pgk_desc_gemm_sm90 = {
    .name = "gemm_sm90",
    .summary = "C[P,Q] (+)= A*B (+ A2*B2) (+ bias), bf16/f16 in, f32 accumulate, wgmma + TMA "
               "(sm_90a)",
    PGK_PARAMS(params),
    PGK_KNOBS(knobs),
    .min_target = PG_SM_90A,
    .threads = THREADS,
    .build = build,
    .launch = launch,
};

/* ---------------------------------------------------------------- choice */

uint64_t pgk_gemm_sm90_workspace(uint32_t P, uint32_t Q, uint32_t bn, uint32_t split)
{
    if (!bn || split <= 1)
        return 0;
    uint64_t tiles = ((uint64_t)P + BM - 1) / BM * (((uint64_t)Q + bn - 1) / bn);
    return tiles * split * BM * bn * 4u;
}

uint32_t pgk_gemm_sm90_bn(uint32_t rows, uint32_t cols, uint32_t sm_count)
{
    /* Widths in the order ties go, and what a tile of each costs: on an
     * H200 a tile's time grows with its width from 128 up, and a 64-wide
     * tile (thin wgmma, the A tile loaded for half the work) takes as long
     * as a 90-wide one would. */
    static const uint32_t choice[] = {256, 192, 128, 64}, cost_of[] = {256, 192, 128, 90};
    if (sm_count == 0)
        sm_count = 1;
    uint64_t tp = ((uint64_t)rows + BM - 1) / BM, best_cost = UINT64_MAX;
    uint32_t best = 256;
    for (size_t i = 0; i < PGK_COUNT(choice); i++) {
        /* a persistent grid: the busiest block runs ceil(tiles / SMs) tiles */
        uint64_t tiles = tp * (((uint64_t)cols + choice[i] - 1) / choice[i]);
        uint64_t cost = (tiles + sm_count - 1) / sm_count * cost_of[i];
        if (cost < best_cost) {
            best_cost = cost;
            best = choice[i];
        }
    }
    return best;
}

/* A reduction this long (k-blocks) makes a slice's partials cheap next to
 * its work: the LM head's dX, R = the vocabulary. */
#define LONG_NK 256u

/* A grid short of the SMs over a long reduction: the width and split
 * whose busiest block does the least, counting a tile's cost by its width
 * as pgk_gemm_sm90_bn does, a slice 1/split of it, each slice 2% more for
 * its partials' round trip, and slices of at least 64 k-blocks. At the
 * LM head's dX (P 384, Q 1536, R 151936) on 132 SMs: 256 wide in 7
 * slices, against 64 wide unsplit (72 tiles, 55% of the SMs). */
static void long_split(uint32_t P, uint32_t Q, uint64_t nk, uint32_t sms, uint32_t *bn,
                       uint64_t *split)
{
    static const uint32_t choice[] = {256, 192, 128, 64}, cost_of[] = {256, 192, 128, 90};
    uint64_t tp = ((uint64_t)P + BM - 1) / BM;
    double best = 1e300;
    for (size_t i = 0; i < PGK_COUNT(choice); i++) {
        uint64_t tiles = tp * (((uint64_t)Q + choice[i] - 1) / choice[i]);
        for (uint64_t s = 1; s <= MAX_SPLIT && (s == 1 || nk / s >= 64); s++) {
            uint64_t waves = (tiles * s + sms - 1) / sms;
            double cost = (double)waves * cost_of[i] / (double)s * (1.0 + 0.02 * (double)(s - 1));
            if (cost < best) {
                best = cost;
                *bn = choice[i];
                *split = s;
            }
        }
    }
}

int pgk_gemm_sm90_choice(pgk_gemm_layout layout, pg_type in_type, pg_type out_type, uint32_t P,
                         uint32_t Q, uint32_t R, unsigned sms, pgk_gemm_choice *out)
{
    const pgk_desc *d = &pgk_desc_gemm_sm90;
    out->desc = d;
    int rc = pgk_knobs_default(d, &out->knobs);
    if (rc)
        return rc;
    if (sms > knobs[KN_SMS].max)
        sms = knobs[KN_SMS].max;
    uint32_t *v = out->knobs.v;
    v[KN_M] = P;
    v[KN_N] = Q;
    v[KN_K] = R;
    v[KN_SMS] = sms ? sms : 1;
    v[KN_LAYOUT] = (uint32_t)layout;
    v[KN_TYPES] = (in_type == PG_F16 ? 2u : 0u) + (out_type == PG_F32 ? 0u : 1u);
    v[KN_EPI] = 0; /* the caller's accumulate and bias */
    v[KN_BN] = pgk_gemm_sm90_bn(P, Q, v[KN_SMS]);
    /* a grid a quarter of the SMs or less over a long reduction (64
     * k-blocks and up: a LoRA product's rank side against 8960): slices of
     * at least 32 k-blocks, as many as fill the SMs once. On an H200
     * (bench_lora_sm90) a slice costs about 1.5 us of its own: dB = dyᵀ·xa
     * at 1536 x 16 over 2048 ran 9.4 us unsplit against 18.6 in 8 slices
     * of 4 k-blocks, dxa at 2048 x 16 over 8960 21.0 us in 4 slices
     * against 32.7 unsplit and 24.8 in 8; and a split of the k/v
     * projections' 64 tiles over 24 k-blocks 103 TFLOP/s against 182
     * unsplit. */
    uint64_t tiles = ((uint64_t)P + BM - 1) / BM * (((uint64_t)Q + v[KN_BN] - 1) / v[KN_BN]);
    uint64_t nk = ((uint64_t)R + BK - 1) / BK, split = 1;
    if (tiles < v[KN_SMS] && nk >= LONG_NK)
        long_split(P, Q, nk, v[KN_SMS], &v[KN_BN], &split);
    else if (tiles * 4 <= v[KN_SMS] && nk >= 64) {
        split = v[KN_SMS] / tiles;
        split = split < nk / 32 ? split : nk / 32;
        split = split < MAX_SPLIT ? split : MAX_SPLIT;
        split = split > 1 ? split : 1;
    }
    v[KN_SPLIT] = (uint32_t)split;
    out->workspace_bytes = split > 1 ? pgk_gemm_sm90_workspace(P, Q, v[KN_BN], (uint32_t)split) : 0;
    out->tile = 0;
    out->split = (uint32_t)split;
    out->m = P;
    out->n = Q;
    out->k = R;
    return PG_OK;
}

bool pgk_gemm_sm90_describe(const pgk_knobs *kn, pgk_gemm_layout *layout, pg_type *in_type,
                            pg_type *out_type, uint32_t *m, uint32_t *n, uint32_t *k)
{
    const uint32_t *v = kn->v, P = v[KN_M], Q = v[KN_N], R = v[KN_K];
    unsigned l = v[KN_LAYOUT] < PGK_GEMM_LAYOUTS ? v[KN_LAYOUT] : 0;
    *layout = (pgk_gemm_layout)l;
    *in_type = v[KN_TYPES] & 2u ? PG_F16 : PG_BF16;
    *out_type = v[KN_TYPES] & 1u ? *in_type : PG_F32;
    /* forward (P, Q, R) = (M, N, K); dX (M, K, N); dW (N, K, M) */
    *m = l == PGK_GEMM_BACKWARD_W ? R : P;
    *n = l == PGK_GEMM_FORWARD ? Q : l == PGK_GEMM_BACKWARD_X ? R : P;
    *k = l == PGK_GEMM_FORWARD ? R : Q;
    return true;
}
