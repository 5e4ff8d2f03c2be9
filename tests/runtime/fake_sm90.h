/* SPDX-License-Identifier: MIT */
/*
 * The fake driver's sm_90a fixture shared by the gemm_sm90 tests of this
 * folder (gemm_sm90.c, gemm_plan.c): a context of a given
 * compute capability, buffers, and the check of a recorded tensor map.
 * main() sets `fake` and the fk_* entry points from the library.
 */
#ifndef PTXGEN_TESTS_FAKE_SM90_H
#define PTXGEN_TESTS_FAKE_SM90_H

#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_attention.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "ptxgen/pgrt_train.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static fake_fixture fk;

static inline pgrt_ctx *open_cc(int cc)
{
    char v[16];
    snprintf(v, sizeof v, "%d", cc);
    setenv("FAKECUDA_CC", v, 1);
    pgrt_ctx_params p = {fk.path, 0};
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, &p);
    unsetenv("FAKECUDA_CC");
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    return ctx;
}

static inline pgrt_buf *buf(pgrt_ctx *ctx, pg_type t, size_t n)
{
    pgrt_buf *b = NULL;
    if (pgrt_buf_alloc(ctx, t, n, &b)) {
        fprintf(stderr, "pgrt_buf_alloc: %s\n", pgrt_last_message());
        exit(1);
    }
    return b;
}

static inline uint64_t u64_at(const unsigned char *p, int off)
{
    uint64_t v;
    memcpy(&v, p + off, 8);
    return v;
}
static inline uint32_t u32_at(const unsigned char *p, int off)
{
    uint32_t v;
    memcpy(&v, p + off, 4);
    return v;
}

/* A recorded map: rows x cols (dims {cols, rows}), pitch bytes, box
 * box_rows x 64, 128-byte swizzle. */
static inline void check_map(const unsigned char *m, uint64_t base, uint64_t rows, uint64_t cols,
                      uint64_t pitch, uint32_t box_rows)
{
    REQUIRE_INT_EQ(u32_at(m, 124), FAKECUDA_TMAP_MAGIC);
    REQUIRE(u64_at(m, 0) == base);
    REQUIRE_INT_EQ(u32_at(m, 12), 2);
    REQUIRE(u64_at(m, 16) == cols && u64_at(m, 24) == rows);
    REQUIRE(u64_at(m, 56) == pitch);
    REQUIRE_INT_EQ(u32_at(m, 88), 64);
    REQUIRE_INT_EQ(u32_at(m, 92), box_rows);
    REQUIRE_INT_EQ(u32_at(m, 112), 3); /* CU_TENSOR_MAP_SWIZZLE_128B */
}

#endif /* PTXGEN_TESTS_FAKE_SM90_H */
