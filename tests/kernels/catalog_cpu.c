/* SPDX-License-Identifier: MIT */
/* The catalog: lookup, knobs (parsing and ranges), launch configurations. */
#include "ptxgen/pgk.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <string.h>

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
    /* a knob that is not baked (not in the module cache key) must not
     * change the PTX: at its min and max the text is the default's */
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        pg_target t = pgk_supports(d, PG_SM_90) ? PG_SM_90 : d->min_target;
        char *base = NULL, err[256];
        REQUIRE_INT_EQ(pgk_emit(d, t, NULL, &base, NULL, err, sizeof err), 0);
        for (size_t j = 0; j < d->nknobs; j++) {
            if (d->knobs[j].baked)
                continue;
            const uint32_t vals[2] = {d->knobs[j].min, d->knobs[j].max};
            for (int v = 0; v < 2; v++) {
                pgk_knobs kn;
                pgk_knobs_default(d, &kn);
                kn.v[j] = vals[v];
                char *ptx = NULL;
                if (pgk_emit(d, t, &kn, &ptx, NULL, err, sizeof err) != 0)
                    continue; /* a value the launch refuses with the others at default */
                if (strcmp(ptx, base) != 0)
                    TEST_FAIL_("%s: knob %s = %u changes the PTX but is not baked", d->name,
                               d->knobs[j].name, vals[v]);
                pgk_free(ptx);
            }
        }
        pgk_free(base);
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

    /* an "a" kernel (wgmma) runs on its own target alone: not the plain
     * sm_90, not a newer "a" target, whose wgmma differs */
    const pgk_desc *g90 = pgk_find("gemm_sm90");
    REQUIRE(g90 != NULL);
    REQUIRE(pgk_supports(g90, PG_SM_90A));
    REQUIRE(!pgk_supports(g90, PG_SM_90));
    REQUIRE(!pgk_supports(g90, PG_SM_100A));
    REQUIRE(!pgk_supports(g90, PG_SM_120A));
    REQUIRE(pgk_supports(sq, PG_SM_90A) && pgk_supports(sq, PG_SM_100));
    REQUIRE_INT_EQ(pgk_emit(g90, PG_SM_100A, NULL, &ptx, NULL, err, sizeof err), PG_ETARGET);
    REQUIRE(ptx == NULL);
    REQUIRE_STR_EQ(err, "gemm_sm90 runs on sm_90a only; sm_100a was asked for");

    /* determinism: same kernel twice, same bytes */
    char *a = NULL, *b = NULL;
    REQUIRE_INT_EQ(pgk_emit(sq, PG_SM_100A, NULL, &a, NULL, err, sizeof err), 0);
    REQUIRE_INT_EQ(pgk_emit(sq, PG_SM_100A, NULL, &b, NULL, err, sizeof err), 0);
    REQUIRE_STR_EQ(a, b);
    pgk_free(a);
    pgk_free(b);

    /* pgk_emit_ptx: the text and the ISA its .version line declares */
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        if (!pgk_supports(d, PG_SM_90))
            continue;
        pgk_ptx px;
        REQUIRE_INT_EQ(pgk_emit_ptx(d, PG_SM_90, NULL, &px, err, sizeof err), 0);
        REQUIRE(px.text != NULL && strlen(px.text) == px.len);
        char ver[32];
        snprintf(ver, sizeof ver, "\n.version %u.%u\n", px.isa / 10, px.isa % 10);
        REQUIRE_CONTAINS(px.text, ver);
        REQUIRE(px.isa >= pg_target_min_isa(PG_SM_90));
        pgk_free(px.text);
    }

    /* the cache key names the kernel, the target and each baked knob */
    char key[128];
    const pgk_desc *ga = pgk_find("gemm_backward_a");
    pgk_knobs_default(ga, &kn);
    REQUIRE_INT_EQ(pgk_cache_key(ga, PG_SM_90, &kn, key, sizeof key),
                   (int)strlen("gemm_backward_a@sm_90,variant=1"));
    REQUIRE_STR_EQ(key, "gemm_backward_a@sm_90,variant=1");
    pgk_knobs_default(sq, &kn);
    REQUIRE_INT_EQ(pgk_cache_key(sq, PG_SM_80, &kn, key, sizeof key), 24);
    REQUIRE_STR_EQ(key, "squared_sum_reduce@sm_80");
    REQUIRE_INT_EQ(pgk_cache_key(ga, PG_SM_90, &kn, key, 8), PG_EINVAL);
    REQUIRE_STR_EQ(key, "");
    REQUIRE_INT_EQ(pgk_cache_key(NULL, PG_SM_90, &kn, key, sizeof key), PG_EINVAL);

    /* the GEMM variant the dispatch uses: the seed's tiles for a small side
     * of the output (grad_A is m x k, grad_B is k x n), else the default */
    const pgk_desc *gb = pgk_find("gemm_backward_b");
    const int vi = pgk_knob_index(ga, "variant");
    struct { const pgk_desc *d; uint32_t m, n, k, want; } picks[] = {
        {ga, 512, 1536, 1536, 1}, {ga, 16, 1536, 1536, 0}, {ga, 512, 4, 16, 0},
        {ga, 512, 16, 1536, 1},   {gb, 16, 1536, 1536, 1}, {gb, 512, 16, 1536, 0},
        {gb, 512, 1536, 63, 0},   {gb, 512, 1536, 64, 1},
    };
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) {
        pgk_knobs_default(picks[i].d, &kn);
        kn.v[pgk_knob_index(picks[i].d, "m")] = picks[i].m;
        kn.v[pgk_knob_index(picks[i].d, "n")] = picks[i].n;
        kn.v[pgk_knob_index(picks[i].d, "k")] = picks[i].k;
        kn.v[vi] = 3;
        pgk_pick(picks[i].d, &kn);
        REQUIRE_INT_EQ(kn.v[vi], picks[i].want);
    }
    pgk_knobs_default(sq, &kn);
    pgk_knobs before = kn;
    pgk_pick(sq, &kn); /* no hook: unchanged */
    REQUIRE(memcmp(&kn, &before, sizeof kn) == 0);

    /* the block size lives on the descriptor: .maxntid and the launch agree */
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        if (!d->threads)
            continue;
        REQUIRE_INT_EQ(pgk_launch_for(d, NULL, &l, err, sizeof err), 0);
        REQUIRE_INT_EQ(l.block[0] * l.block[1] * l.block[2], d->threads);
        char *text = NULL;
        pg_target t = pgk_supports(d, PG_SM_90) ? PG_SM_90 : d->min_target; /* "a" kernels */
        REQUIRE_INT_EQ(pgk_emit(d, t, NULL, &text, NULL, err, sizeof err), 0);
        char want[64];
        snprintf(want, sizeof want, ".maxntid %u, 1, 1", d->threads);
        REQUIRE_CONTAINS(text, want);
        pgk_free(text);
    }
    TEST_DONE();
}
