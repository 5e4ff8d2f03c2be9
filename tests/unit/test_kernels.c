/* SPDX-License-Identifier: MIT */
/* The catalog: lookup, knobs (parsing and ranges), launch configurations. */
#include "pgk.h"
#include "util.h"

int main(void)
{
    REQUIRE(pgk_count() >= 4);
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        REQUIRE(pgk_find(d->name) == d);
        REQUIRE(d->nparams <= PGK_MAX_PARAMS && d->nknobs <= PGK_MAX_KNOBS);
        /* the emitted entry declares exactly the descriptor's params */
        char *ptx = NULL, err[256];
        pg_target t = pgk_supports(d, PG_SM_90) ? PG_SM_90 : d->min_target; /* "a" kernels */
        REQUIRE_INT_EQ(pgk_emit(d, t, NULL, &ptx, NULL, err, sizeof err), 0);
        char want[128];
        snprintf(want, sizeof want, ".visible .entry %s(", d->name);
        REQUIRE_CONTAINS(ptx, want);
        for (size_t p = 0; p < d->nparams; p++) {
            if (d->params[p].tensor_map)
                snprintf(want, sizeof want, "\t.param .align 64 .b8 %s[128]", d->params[p].name);
            else
                snprintf(want, sizeof want, "\t.param .%s %s", pg_type_name(d->params[p].type),
                         d->params[p].name);
            REQUIRE_CONTAINS(ptx, want);
            REQUIRE(!d->params[p].pointer || d->params[p].type == PG_U64);
        }
        pgk_free(ptx);
    }
    REQUIRE(pgk_find("nope") == NULL);
    REQUIRE(pgk_find(NULL) == NULL);
    REQUIRE(pgk_at(9999) == NULL);

    const pgk_desc *sq = pgk_find("squared_sum_reduce");
    REQUIRE(sq != NULL);
    pgk_knobs kn;
    pgk_knobs_default(sq, &kn);
    char err[256];
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=1000000", err, sizeof err), 0);
    pgk_launch l;
    REQUIRE_INT_EQ(pgk_launch_for(sq, &kn, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 256);
    REQUIRE_INT_EQ(l.block[0], 256);
    REQUIRE_INT_EQ(pgk_knob_set(sq, &kn, "n", "0x400", err, sizeof err), 0);
    REQUIRE_INT_EQ(kn.v[0], 1024);
    REQUIRE_INT_EQ(pgk_launch_for(sq, &kn, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 1);
    REQUIRE_INT_EQ(pgk_squared_sum_num_blocks(1), 1);
    REQUIRE_INT_EQ(pgk_squared_sum_num_blocks(1024), 1);
    REQUIRE_INT_EQ(pgk_squared_sum_num_blocks(1025), 2);
    REQUIRE_INT_EQ(pgk_squared_sum_num_blocks(256 * 1024), 256);
    REQUIRE_INT_EQ(pgk_squared_sum_num_blocks(UINT32_MAX), 256);

    /* bad knobs: code and message, value untouched */
    kn.v[0] = 77;
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "m=4", err, sizeof err), PG_ENOTFOUND);
    REQUIRE_CONTAINS(err, "unknown knob 'm' for squared_sum_reduce (knobs: n)");
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=12x", err, sizeof err), PG_EINVAL);
    REQUIRE_CONTAINS(err, "'12x' is not a non-negative integer");
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=-1", err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=", err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=0", err, sizeof err), PG_ERANGE);
    REQUIRE_CONTAINS(err, "out of range [1, 4294967295]");
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=4294967296", err, sizeof err), PG_ERANGE);
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n=99999999999999999999999", err, sizeof err),
                   PG_ERANGE);
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "n", err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, "=5", err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_knob_assign(sq, &kn, NULL, err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(kn.v[0], 77);

    /* the clip scales: one float4 a thread, ceil(n/1024) blocks of 256,
     * at most 4096 blocks (grid-stride beyond) */
    const pgk_desc *gc = pgk_find("gradient_clip_gpu_scale");
    pgk_knobs_default(gc, &kn);
    kn.v[0] = 257;
    REQUIRE_INT_EQ(pgk_launch_for(gc, &kn, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 1);
    kn.v[0] = 1025;
    REQUIRE_INT_EQ(pgk_launch_for(gc, &kn, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 2);
    kn.v[0] = UINT32_MAX;
    REQUIRE_INT_EQ(pgk_launch_for(gc, &kn, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 4096);
    REQUIRE_INT_EQ(l.block[0], 256);
    kn.v[0] = 0;
    REQUIRE_INT_EQ(pgk_launch_for(gc, &kn, &l, err, sizeof err), PG_ERANGE);
    REQUIRE(pgk_launch_for(NULL, &kn, &l, err, sizeof err) == PG_EINVAL);

    const pgk_desc *cs = pgk_find("clip_scale_reduce");
    REQUIRE_INT_EQ(pgk_launch_for(cs, NULL, &l, err, sizeof err), 0);
    REQUIRE_INT_EQ(l.grid[0], 1);
    REQUIRE_INT_EQ(l.block[0], 256);

    /* the multi-tensor forms: a grid of total_blocks, block 256; every
     * entry has at least one block */
    const char *multi[2] = {"squared_sum_reduce_multi", "gradient_clip_gpu_scale_multi"};
    for (int m = 0; m < 2; m++) {
        const pgk_desc *md = pgk_find(multi[m]);
        REQUIRE(md != NULL);
        if (!md)
            continue;
        REQUIRE_INT_EQ(pgk_knob_index(md, "total_blocks"), 0);
        REQUIRE_INT_EQ(pgk_knob_index(md, "nbufs"), 1);
        pgk_knobs_default(md, &kn);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "total_blocks=55296", err, sizeof err), 0);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "nbufs=216", err, sizeof err), 0);
        REQUIRE_INT_EQ(pgk_launch_for(md, &kn, &l, err, sizeof err), 0);
        REQUIRE_INT_EQ(l.grid[0], 55296);
        REQUIRE_INT_EQ(l.grid[1], 1);
        REQUIRE_INT_EQ(l.block[0], 256);
        REQUIRE_INT_EQ(l.shared_bytes, 0);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "total_blocks=2147483647", err, sizeof err), 0);
        REQUIRE_INT_EQ(pgk_launch_for(md, &kn, &l, err, sizeof err), 0);
        REQUIRE_INT_EQ(l.grid[0], 2147483647u);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "total_blocks=2147483648", err, sizeof err),
                       PG_ERANGE);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "total_blocks=100", err, sizeof err), 0);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "nbufs=101", err, sizeof err), 0);
        REQUIRE_INT_EQ(pgk_launch_for(md, &kn, &l, err, sizeof err), PG_ERANGE);
        REQUIRE_INT_EQ(pgk_knob_assign(md, &kn, "nbufs=0", err, sizeof err), PG_ERANGE);
    }

    /* null and bad arguments to emit */
    char *ptx = (char *)1;
    REQUIRE_INT_EQ(pgk_emit(NULL, PG_SM_90, NULL, &ptx, NULL, err, sizeof err), PG_EINVAL);
    REQUIRE(ptx == NULL);
    REQUIRE_INT_EQ(pgk_emit(sq, PG_TARGET_COUNT, NULL, &ptx, NULL, err, sizeof err), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_emit(sq, PG_SM_90, NULL, NULL, NULL, err, sizeof err), PG_EINVAL);

    /* determinism: same kernel twice, same bytes */
    char *a = NULL, *b = NULL;
    REQUIRE_INT_EQ(pgk_emit(sq, PG_SM_100A, NULL, &a, NULL, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgk_emit(sq, PG_SM_100A, NULL, &b, NULL, err, sizeof err), 0);
    REQUIRE_STR_EQ(a, b);
    pgk_free(a);
    pgk_free(b);
    TEST_DONE();
}
