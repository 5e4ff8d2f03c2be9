/* SPDX-License-Identifier: MIT */
/*
 * What the gemm_thin family's files share: gemm_thin.c (the scheme, the
 * narrow SIMT forms, the descriptor and the family's choice),
 * gemm_thin_outer.c (form 0), gemm_thin_mma.c (forms 3 and 4) and
 * gemm_thin_common.c (the element and output helpers they all call).
 */
#ifndef PTXGEN_KERNELS_GEMM_THIN_H
#define PTXGEN_KERNELS_GEMM_THIN_H

#include "gemm_abi.h"

/* Form 0's block: an output tile of OUT_TP x OUT_TQ, slabs of OUT_RC r's. */
#define OUT_TP 64u  /* output rows (P) a block */
#define OUT_TQ 128u /* output columns (Q) a block */
#define OUT_RC 16u  /* r's a shared-memory slab */
#define OUT_THREADS 256u
#define OUT_AS (OUT_TP + 1u) /* slab row strides (f32): A is read a scalar at a time */
#define OUT_BS (OUT_TQ + 4u) /* B four at a time, 16-byte aligned */

/* Where and how a form writes C. */
typedef struct thin_out {
    pg_type ot;
    bool native;           /* cvt to bf16 exists */
    pg_reg c;              /* u64 base; rows of Q */
    pg_reg do_acc, do_bias;
    pg_reg bias;           /* u64 f32 bias base (on C's columns) */
} thin_out;

/* ---- gemm_thin_common.c ---- */

/* J rounded up to a power of two, 8 at least, 64 at most. */
unsigned pgk_thin_jc(uint32_t j);

/* Bytes an input element of type it. */
unsigned pgk_thin_in_size(pg_type it);

/* The f32 value of the 16-bit element of type it in the low or high half
 * of w. */
pg_reg pgk_thin_half_f32(pg_kernel *k, pg_type it, pg_reg w, bool hi);

/* The element at addr + off as f32 where `in`, else 0 (a new register). */
pg_reg pgk_thin_ld_one(pg_kernel *k, pg_type it, pg_reg addr, int64_t off, pg_reg in);

/* Whether the count elements from idx lie below n (and `also`). */
pg_reg pgk_thin_run_inside(pg_kernel *k, pg_reg idx, pg_reg n, unsigned count, pg_reg also,
                           pg_reg *ins);

/* Four consecutive outputs at addr from v[] (f32, bias already added):
 * one vector store (after one vector load when accumulating) where
 * `full`, else element by element where ins[e]. */
void pgk_thin_store_run4(pg_kernel *k, const thin_out *o, pg_reg addr, pg_reg *v, pg_reg full,
                         const pg_reg *ins);

/* The end of a chunk of JC columns of J: jb steps on; after the last
 * chunk to the returned label (the caller binds it after its branch back
 * to the next chunk); else one barrier, so that every thread is done with
 * this chunk's partials first. */
pg_label pgk_thin_chunk_end(pg_kernel *k, pg_reg jb, unsigned JC, pg_reg J);

/* bias[col] where the flags ask for it and col < ncols, else 0. */
pg_reg pgk_thin_bias_at(pg_kernel *k, const thin_out *o, pg_reg col, pg_reg ncols);

/* ---- gemm_thin_outer.c, gemm_thin_mma.c: the forms gemm_thin.c builds ---- */

/* Form 0, outer (R thin). */
void pgk_thin_build_outer(pg_kernel *k, unsigned layout, pg_type it, const thin_out *o0,
                          pg_reg a, pg_reg b, pg_reg m, pg_reg n, pg_reg kd);

/* Warps a block of forms 3 and 4 for the bound jc. */
unsigned pgk_thin_tc_warps(unsigned jc);

/* Forms 3 (fq: Q thin) and 4 (P thin): the narrow products on mma.sync. */
void pgk_thin_build_mma(pg_kernel *k, unsigned layout, bool fq, unsigned jc, pg_type it,
                        const thin_out *o0, pg_reg a, pg_reg b, pg_reg m, pg_reg n,
                        pg_reg kd);

#endif
