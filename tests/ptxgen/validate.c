/* SPDX-License-Identifier: MIT */
/*
 * Barrier divergence. Each planted case puts a bar.sync where only some
 * threads of a block can reach it and must be rejected with a message that
 * names the barrier and the branch; each uniform case must be accepted.
 */
#include "ptxgen/pgk.h"
#include "util.h"

#include <stdlib.h>
#include <time.h>

typedef struct ctx {
    pg_kernel *k;
    pg_reg n;    /* a param: uniform */
    pg_reg data; /* a param pointer */
    pg_reg tid;  /* %tid.x: per thread */
    const char *name;
} ctx;

static ctx begin(const char *name)
{
    ctx c;
    c.k = mk(name, PG_SM_90);
    c.name = name;
    pg_param pd = pg_param_add(c.k, PG_U64, "data");
    pg_param pn = pg_param_add(c.k, PG_U32, "n");
    c.data = pg_param_load(c.k, pd);
    c.n = pg_param_load(c.k, pn);
    c.tid = pg_sreg_read(c.k, PG_SREG_TID_X);
    return c;
}

/* The ending most cases share: bar.sync 0 where a cmp b holds, skipped by
 * a branch elsewhere. Whether that branch can split a warp is the question
 * each case asks of the validator. */
static void barrier_if(pg_kernel *k, pg_cmp cmp, pg_val a, pg_val b)
{
    pg_reg p = pgv_setp(k, cmp, PG_U32, a, b);
    pg_label skip = pg_label_new(k, "skip");
    pg_bra_if(k, p, false, skip);
    pg_bar_sync(k, 0);
    pg_label_bind(k, skip);
}

/* A loop with a barrier in its body: bar.sync 0 and i += step while
 * i < n. p (the caller's, so it keeps its number) is the exit test;
 * whether that branch can split a warp is each case's question. */
static void barrier_loop(pg_kernel *k, pg_reg p, pg_reg i, pg_val n, pg_val step)
{
    pg_label top = pg_label_new(k, "top"), done = pg_label_new(k, "done");
    pg_label_bind(k, top);
    pg_setp(k, PG_CMP_GE, PG_U32, p, i, n);
    pg_bra_if(k, p, false, done);
    pg_bar_sync(k, 0);
    pg_add(k, PG_U32, i, i, step);
    pg_bra(k, top);
    pg_label_bind(k, done);
}

static void expect_diverge(ctx c, const char *branch, const char *cause)
{
    const char *ptx = (const char *)1;
    int rc = pg_kernel_emit(c.k, &ptx, NULL);
    REQUIRE_INT_EQ(rc, PG_EDIVERGE);
    REQUIRE(ptx == NULL);
    const char *m = pg_kernel_message(c.k);
    REQUIRE_CONTAINS(m, "barrier divergence");
    REQUIRE_CONTAINS(m, "bar.sync 0`");
    REQUIRE_CONTAINS(m, branch);
    REQUIRE_CONTAINS(m, cause);
    fprintf(stderr, "  rejected as expected: %s\n", m);
    pg_kernel_destroy(&c.k);
}

/* With --ptxas: where expect_ok writes each kernel it accepts, and the
 * ptxas that must assemble it. */
static const char *ptxas_path, *ptx_dir;

static void assemble(const char *name, const char *ptx)
{
    char path[4096], cmd[8400];
    snprintf(path, sizeof path, "%s/validate_%s.ptx", ptx_dir, name);
    FILE *f = fopen(path, "w");
    bool written = f && fputs(ptx, f) != EOF;
    if (f && fclose(f) != 0)
        written = false;
    REQUIRE(written);
    if (!written)
        return;
    snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 --warning-as-error -o /dev/null '%s'", ptxas_path,
             path);
    int rc = system(cmd);
    fprintf(stderr, "  %s: %s\n", cmd, rc == 0 ? "ok" : "FAILED");
    REQUIRE_INT_EQ(rc, 0);
}

static void expect_ok(ctx c)
{
    const char *ptx = NULL;
    int rc = pg_kernel_emit(c.k, &ptx, NULL);
    REQUIRE_INT_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "  unexpected: %s\n", pg_kernel_message(c.k));
    REQUIRE(ptx != NULL);
    if (ptx && ptxas_path)
        assemble(c.name, ptx);
    pg_kernel_destroy(&c.k);
}

/* Process CPU seconds: the scale cases check growth stays near-linear
 * (the quadratic validator took about a minute at this size), and CPU time
 * is steady on a loaded machine where wall time is not. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define SCALE_BRANCHES 64000u
#define SCALE_CPU_LIMIT_S 5.0

/* SCALE_BRANCHES straight-line `@p bra` over one add each, p from %tid.x,
 * a bar.sync after every 64 (each region joins first: uniform). With
 * `plant` < SCALE_BRANCHES, that branch skips a bar.sync as well. */
static void scale_branches(ctx c, uint32_t plant)
{
    pg_kernel *k = c.k;
    pg_reg acc = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, acc, pg_u32(0));
    for (uint32_t i = 0; i < SCALE_BRANCHES; i++) {
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_label skip = pg_label_new(k, "skip");
        pg_setp(k, PG_CMP_LT, PG_U32, p, c.tid, pg_u32(i));
        pg_bra_if(k, p, false, skip);
        pg_add(k, PG_U32, acc, acc, pg_u32(1));
        if (i == plant)
            pg_bar_sync(k, 0);
        pg_label_bind(k, skip);
        if (i % 64 == 63)
            pg_bar_sync(k, 1);
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, acc);
}

/* `n` uniform branches, each over one block: a backward search from a read
 * below them gives up and leaves the read to the data-flow. */
static void uniform_branches(ctx c, uint32_t n)
{
    pg_kernel *k = c.k;
    pg_reg p = pg_reg_new(k, PG_PRED), t = pg_reg_new(k, PG_U32);
    pg_setp(k, PG_CMP_EQ, PG_U32, p, c.n, pg_u32(7));
    for (uint32_t i = 0; i < n; i++) {
        pg_label skip = pg_label_new(k, "u");
        pg_bra_if(k, p, false, skip);
        pg_mov(k, PG_U32, t, pg_u32(i));
        pg_label_bind(k, skip);
    }
}

/* Refused for a counted barrier under a split inside a warp: the message
 * names the barrier and what the branch depends on. */
static void expect_counted_diverge(ctx c, const char *bar, const char *branch)
{
    const char *ptx = NULL;
    REQUIRE_INT_EQ(pg_kernel_emit(c.k, &ptx, NULL), PG_EDIVERGE);
    const char *m = pg_kernel_message(c.k);
    REQUIRE_CONTAINS(m, "barrier divergence");
    REQUIRE_CONTAINS(m, bar);
    REQUIRE_CONTAINS(m, "warps it counts");
    REQUIRE_CONTAINS(m, branch);
    fprintf(stderr, "  rejected as expected: %s\n", m);
    pg_kernel_destroy(&c.k);
}

/* SCALE_BRANCHES `@p bra` on p from the warp index (%tid.x >> 5), each
 * over an add and a counted bar.sync 1, 64: a split between warps, which
 * the counted barrier allows. With `plant` < SCALE_BRANCHES, that branch's
 * p comes from %tid.x itself, splitting warps. */
static void scale_warp_branches(ctx c, uint32_t plant)
{
    pg_kernel *k = c.k;
    pg_reg acc = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, acc, pg_u32(0));
    pg_reg warp = pgv_shr(k, PG_U32, c.tid, pg_u32(5));
    for (uint32_t i = 0; i < SCALE_BRANCHES; i++) {
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_label skip = pg_label_new(k, "skip");
        pg_setp(k, PG_CMP_LT, PG_U32, p, i == plant ? c.tid : warp, pg_u32(i));
        pg_bra_if(k, p, false, skip);
        pg_add(k, PG_U32, acc, acc, pg_u32(1));
        pg_bar_sync_count(k, 1, 64);
        pg_label_bind(k, skip);
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, acc);
}

static void expect_undef(ctx c, const char *reg)
{
    const char *ptx = NULL;
    int rc = pg_kernel_emit(c.k, &ptx, NULL);
    REQUIRE_INT_EQ(rc, PG_EUNDEF);
    const char *m = pg_kernel_message(c.k);
    REQUIRE_CONTAINS(m, "is read before any write reaches it");
    REQUIRE_CONTAINS(m, reg);
    fprintf(stderr, "  rejected as expected: %s\n", m);
    pg_kernel_destroy(&c.k);
}

/* A write that no path from the entry reaches defines nothing: each read
 * below is refused whichever way check_defined settles it (the backward
 * search, the data-flow, the ancestor walk, a loop's back edge). Reads in
 * such code are not checked, and a write on one path of two still counts. */
static void unreachable_writes(void)
{
    /* bra L; mov r, 1; L: st [p], r */
    {
        ctx c = begin("unreachable_write");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_label over = pg_label_new(k, "over");
        pg_bra(k, over);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_label_bind(k, over);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        expect_undef(c, "register %r3 is read before any write reaches it, at instruction 6 "
                        "(`st.global.u32 [%rd1], %r3`)");
    }
    /* the same read 200 branches below: past the backward search, to the
     * data-flow */
    {
        ctx c = begin("unreachable_write_far");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_label over = pg_label_new(k, "over");
        pg_bra(k, over);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_label_bind(k, over);
        uniform_branches(c, 200);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        expect_undef(c, "register %r3 is read");
    }
    /* 70 such registers read in one block: the ancestor walk */
    {
        ctx c = begin("unreachable_writes_many");
        pg_kernel *k = c.k;
        pg_reg v[70];
        for (int i = 0; i < 70; i++)
            v[i] = pg_reg_new(k, PG_U32);
        pg_label over = pg_label_new(k, "over");
        pg_bra(k, over);
        for (int i = 0; i < 70; i++)
            pg_mov(k, PG_U32, v[i], pg_u32((uint32_t)i));
        pg_label_bind(k, over);
        uniform_branches(c, 200);
        for (int i = 0; i < 70; i++)
            pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 4 * i, v[i]);
        expect_undef(c, "register %r3 is read");
    }
    /* dead code after the loop's exit that writes the register and jumps
     * back into the loop */
    {
        ctx c = begin("dead_back_edge");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32), q = pg_reg_new(k, PG_PRED);
        pg_label top = pg_label_new(k, "top");
        pg_setp(k, PG_CMP_EQ, PG_U32, q, c.n, pg_u32(0));
        pg_label_bind(k, top);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        pg_bra_if(k, q, false, top);
        pg_ret(k);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_bra(k, top);
        expect_undef(c, "register %r3 is read");
    }
    /* ---- unchanged: accepted ---- */
    /* a read in unreachable code is not checked */
    {
        ctx c = begin("unreachable_read");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_label over = pg_label_new(k, "over");
        pg_bra(k, over);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        pg_label_bind(k, over);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, c.n);
        expect_ok(c);
    }
    /* if (c) r = 1; st r: a write on one path of two ("may be defined") */
    {
        ctx c = begin("one_arm_write");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED);
        pg_label skip = pg_label_new(k, "skip");
        pg_setp(k, PG_CMP_EQ, PG_U32, p, c.n, pg_u32(0));
        pg_bra_if(k, p, false, skip);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_label_bind(k, skip);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        expect_ok(c);
    }
    /* a reachable write counts beside an unreachable one */
    {
        ctx c = begin("reachable_and_dead_write");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_label over = pg_label_new(k, "over");
        pg_mov(k, PG_U32, v, pg_u32(2));
        pg_bra(k, over);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_label_bind(k, over);
        uniform_branches(c, 200);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        expect_ok(c);
    }
}

/* Uniformity follows the writes that reach a read, not every write of its
 * register: a register that held %tid.x and is then overwritten with a
 * uniform value is uniform where only that value reaches. Where the
 * per-thread value still reaches on some path (one arm of a branch, a
 * guarded overwrite, round a loop's back edge), it is not. */
static void reaching_writes(void)
{
    /* r = %tid.x; st r; r = 0: the barrier's loop counts with r */
    {
        ctx c = begin("tid_reused_counter");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED);
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_mov(k, PG_U32, r, pg_u32(0));
        barrier_loop(k, p, r, c.n, pg_u32(1));
        expect_ok(c);
    }
    /* r = %tid.x; st r; r = 0 in one block, a uniform branch on r and a
     * barrier below */
    {
        ctx c = begin("tid_reused_const");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_mov(k, PG_U32, r, pg_u32(0));
        barrier_if(k, PG_CMP_EQ, r, c.n);
        expect_ok(c);
    }
    /* the overwrite on a uniform branch's arm, then written again on both
     * arms of another: neither arm carries %tid.x to the branch on r */
    {
        ctx c = begin("tid_overwritten_both_arms");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_reg u = pgv_setp(k, PG_CMP_LT, PG_U32, c.n, pg_u32(9));
        pg_label other = pg_label_new(k, "other"), join = pg_label_new(k, "join");
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_bra_if(k, u, false, other);
        pg_mov(k, PG_U32, r, pg_u32(1));
        pg_bra(k, join);
        pg_label_bind(k, other);
        pg_mov(k, PG_U32, r, c.n);
        pg_label_bind(k, join);
        barrier_if(k, PG_CMP_EQ, r, pg_u32(1));
        expect_ok(c);
    }
    /* %tid.x written at a loop's top and overwritten below it: what goes
     * round the back edge is uniform */
    {
        ctx c = begin("tid_killed_in_loop");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED);
        pg_reg q = pgv_setp(k, PG_CMP_LT, PG_U32, c.n, pg_u32(8));
        pg_label top = pg_label_new(k, "top"), skip = pg_label_new(k, "skip");
        pg_label_bind(k, top);
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_bra_if(k, q, false, skip);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 4, r);
        pg_label_bind(k, skip);
        pg_mov(k, PG_U32, r, c.n);
        pg_setp(k, PG_CMP_EQ, PG_U32, p, r, pg_u32(3));
        pg_label s2 = pg_label_new(k, "s2");
        pg_bra_if(k, p, false, s2);
        pg_bar_sync(k, 0);
        pg_label_bind(k, s2);
        pg_bra_if(k, q, false, top);
        expect_ok(c);
    }
    /* a warp index taken from a register while it holds %tid.x, the
     * register reused after: the index differs between warps only */
    {
        ctx c = begin("warp_index_reused");
        pg_kernel *k = c.k;
        pg_reg x = pg_reg_new(k, PG_U32);
        pg_label skip = pg_label_new(k, "skip");
        pg_mov(k, PG_U32, x, c.tid);
        pg_reg w = pgv_shr(k, PG_U32, x, pg_u32(5));
        pg_mov(k, PG_U32, x, pg_u32(7));
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, x);
        pg_reg p = pgv_setp(k, PG_CMP_EQ, PG_U32, w, pg_u32(0));
        pg_bra_if(k, p, false, skip);
        pg_bar_sync_count(k, 1, 64);
        pg_label_bind(k, skip);
        expect_ok(c);
    }
    /* ---- still refused ---- */
    /* the overwrite on one arm of a uniform branch only: the other arm
     * carries %tid.x to the branch on r */
    {
        ctx c = begin("tid_one_arm");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_reg u = pgv_setp(k, PG_CMP_LT, PG_U32, c.n, pg_u32(9));
        pg_label join = pg_label_new(k, "join");
        pg_mov(k, PG_U32, r, c.tid);
        pg_bra_if(k, u, false, join);
        pg_mov(k, PG_U32, r, pg_u32(0));
        pg_label_bind(k, join);
        barrier_if(k, PG_CMP_EQ, r, pg_u32(1));
        expect_diverge(c, "`@%p2 bra $L2_skip`", "depends on %tid.x");
    }
    /* a guarded overwrite may leave %tid.x in place */
    {
        ctx c = begin("tid_guarded_overwrite");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_reg u = pgv_setp(k, PG_CMP_LT, PG_U32, c.n, pg_u32(9));
        pg_mov(k, PG_U32, r, c.tid);
        pg_guard(k, u, false);
        pg_mov(k, PG_U32, r, pg_u32(0));
        barrier_if(k, PG_CMP_EQ, r, pg_u32(1));
        expect_diverge(c, "`@%p2 bra $L1_skip`", "depends on %tid.x");
    }
    /* %tid.x written below the barrier reaches the loop's top round the
     * back edge on the path that skips the overwrite */
    {
        ctx c = begin("tid_round_back_edge");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32);
        pg_reg q = pgv_setp(k, PG_CMP_LT, PG_U32, c.n, pg_u32(8));
        pg_reg u = pgv_setp(k, PG_CMP_GT, PG_U32, c.n, pg_u32(2));
        pg_label top = pg_label_new(k, "top");
        pg_label keep = pg_label_new(k, "keep");
        pg_mov(k, PG_U32, r, pg_u32(0));
        pg_label_bind(k, top);
        barrier_if(k, PG_CMP_EQ, r, pg_u32(3));
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_bra_if(k, u, false, keep);
        pg_mov(k, PG_U32, r, pg_u32(5));
        pg_label_bind(k, keep);
        pg_bra_if(k, q, false, top);
        expect_diverge(c, "`@%p3 bra $L2_skip`", "depends on %tid.x");
    }
    /* the loop counter of tid_reused_counter, bumped by %tid.x */
    {
        ctx c = begin("counter_per_thread");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED);
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_mov(k, PG_U32, r, pg_u32(0));
        barrier_loop(k, p, r, c.n, c.tid);
        expect_diverge(c, "`@%p1 bra $L2_done`", "depends on %tid.x");
    }
    /* tid_reused_const's barrier is fine, a later one under a branch on
     * %tid.x itself is not: the message names the later one and its
     * branch, not the first (whose branch only the per-register answer
     * took for per-thread) */
    {
        ctx c = begin("tid_reused_then_split");
        pg_kernel *k = c.k;
        pg_reg r = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED);
        pg_label skip = pg_label_new(k, "skip"), out = pg_label_new(k, "out");
        pg_mov(k, PG_U32, r, c.tid);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, r);
        pg_mov(k, PG_U32, r, pg_u32(0));
        pg_setp(k, PG_CMP_EQ, PG_U32, p, r, c.n);
        pg_bra_if(k, p, false, skip);
        pg_bar_sync(k, 0);
        pg_label_bind(k, skip);
        pg_reg q = pgv_setp(k, PG_CMP_LT, PG_U32, c.tid, pg_u32(64));
        pg_bra_if(k, q, false, out);
        pg_bar_sync(k, 1);
        pg_label_bind(k, out);
        const char *ptx = NULL;
        REQUIRE_INT_EQ(pg_kernel_emit(k, &ptx, NULL), PG_EDIVERGE);
        const char *m = pg_kernel_message(k);
        REQUIRE_CONTAINS(m, "instruction 12 (`bar.sync 1`) is reached by only some threads");
        REQUIRE_CONTAINS(m, "the branch at instruction 11 (`@%p2 bra $L2_out`) depends on %tid.x");
        fprintf(stderr, "  rejected as expected: %s\n", m);
        pg_kernel_destroy(&c.k);
    }
    /* the warp index of %tid.x + 1 differs within a warp */
    {
        ctx c = begin("warp_index_of_other");
        pg_kernel *k = c.k;
        pg_reg x = pg_reg_new(k, PG_U32);
        pg_label skip = pg_label_new(k, "skip");
        pg_mov(k, PG_U32, x, c.tid);
        pg_add(k, PG_U32, x, x, pg_u32(1));
        pg_reg w = pgv_shr(k, PG_U32, x, pg_u32(5));
        pg_reg p = pgv_setp(k, PG_CMP_EQ, PG_U32, w, pg_u32(0));
        pg_bra_if(k, p, false, skip);
        pg_bar_sync_count(k, 1, 64);
        pg_label_bind(k, skip);
        expect_counted_diverge(c, "bar.sync 1, 64`", "depends on %tid.x");
    }
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--ptxas") == 0) {
        /* test_validate --ptxas PTXAS DIR: the small cases only, every
         * kernel they accept assembled by ptxas, warnings as errors */
        ptxas_path = argv[2];
        ptx_dir = argv[3];
        unreachable_writes();
        reaching_writes();
        TEST_DONE();
    }
    /* 1. early return before a barrier */
    {
        ctx c = begin("early_return");
        pg_kernel *k = c.k;
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_GE, PG_U32, p, c.tid, c.n);
        pg_guard(k, p, false);
        pg_ret(k);
        pg_bar_sync(k, 0);
        expect_diverge(c, "early exit", "`@%p1 ret`) depends on %tid.x");
    }
    /* 1b. the same through a branch to the end */
    {
        ctx c = begin("early_branch");
        pg_kernel *k = c.k;
        pg_label out = pg_label_new(k, "out");
        pg_bounds_guard(k, c.tid, c.n, out);
        pg_bar_sync(k, 0);
        pg_label_bind(k, out);
        expect_diverge(c, "`@%p1 bra $L1_out`", "depends on %tid.x");
    }
    /* 2. barrier inside a tid-dependent if */
    {
        ctx c = begin("if_tid");
        pg_kernel *k = c.k;
        pg_reg lane = pg_sreg_read(k, PG_SREG_LANEID);
        barrier_if(k, PG_CMP_NE, lane, pg_u32(0));
        pg_bar_sync(k, 1); /* after the join: fine, but the first one is not */
        expect_diverge(c, "branch at instruction", "depends on %laneid");
    }
    /* 3. a loop whose trip count is per-thread */
    {
        ctx c = begin("loop_tid");
        pg_kernel *k = c.k;
        pg_reg i = pg_reg_new(k, PG_U32);
        pg_mov(k, PG_U32, i, pg_u32(0));
        pg_reg p = pg_reg_new(k, PG_PRED);
        barrier_loop(k, p, i, c.tid, pg_u32(1));
        expect_diverge(c, "`@%p1 bra $L2_done`", "%tid.x");
    }
    /* 3b. a value that turns per-thread only at the loop's bottom, read by
     * a branch near its top: seen on a second pass over the loop */
    {
        ctx c = begin("loop_late");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_reg q = pg_reg_new(k, PG_PRED);
        pg_mov(k, PG_U32, v, pg_u32(0));
        pg_label top = pg_label_new(k, "top");
        pg_label_bind(k, top);
        barrier_if(k, PG_CMP_NE, v, pg_u32(0));
        pg_mov(k, PG_U32, v, c.tid);
        pg_setp(k, PG_CMP_LT, PG_U32, q, c.n, pg_u32(8));
        pg_bra_if(k, q, false, top);
        expect_diverge(c, "`@%p2 bra $L2_skip`", "%tid.x");
    }
    /* 4. per-thread loaded data decides the branch */
    {
        ctx c = begin("loaded");
        pg_kernel *k = c.k;
        pg_reg off = pg_reg_new(k, PG_U64), a = pg_reg_new(k, PG_U64);
        pg_mul_wide(k, PG_U32, off, c.tid, pg_u32(4));
        pg_add(k, PG_U64, a, c.data, off);
        pg_reg v = pg_reg_new(k, PG_F32);
        pg_ld(k, PG_SPACE_GLOBAL, PG_F32, a, 0, v);
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_GT, PG_F32, p, v, pg_f32(0.0f));
        pg_label skip = pg_label_new(k, "skip");
        pg_bra_if(k, p, true, skip);
        pg_bar_sync(k, 0);
        pg_label_bind(k, skip);
        expect_diverge(c, "`@!%p1 bra $L1_skip`", "data loaded from a per-thread address");
    }
    /* 5. a value assigned under a divergent branch decides a later one */
    {
        ctx c = begin("control_dep");
        pg_kernel *k = c.k;
        pg_reg flag = pg_reg_new(k, PG_U32);
        pg_mov(k, PG_U32, flag, pg_u32(0));
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_EQ, PG_U32, p, c.tid, pg_u32(0));
        pg_label join = pg_label_new(k, "join");
        pg_bra_if(k, p, true, join);
        pg_mov(k, PG_U32, flag, pg_u32(1));
        pg_label_bind(k, join);
        pg_reg q = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_EQ, PG_U32, q, flag, pg_u32(1));
        pg_label skip = pg_label_new(k, "skip");
        pg_bra_if(k, q, false, skip);
        pg_bar_sync(k, 0);
        pg_label_bind(k, skip);
        expect_diverge(c, "`@%p2 bra $L2_skip`", "assigned under the divergent branch");
    }
    /* 6. a barrier guarded by a per-thread predicate */
    {
        ctx c = begin("guarded");
        pg_kernel *k = c.k;
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_LT, PG_U32, p, c.tid, pg_u32(32));
        pg_guard(k, p, false);
        pg_bar_sync(k, 0);
        expect_diverge(c, "guarded by %p1", "%tid.x");
    }
    /* 7. a barrier inside a grid-stride loop */
    {
        ctx c = begin("stride");
        pg_kernel *k = c.k;
        pg_loop l;
        (void)pg_grid_stride_begin(k, &l, c.n);
        pg_bar_sync(k, 0);
        pg_grid_stride_end(k, &l);
        expect_diverge(c, "bra $L2_stride_done", "%tid.x");
    }
    /* 8. atomics and shuffles are per-thread too */
    {
        ctx c = begin("atomic");
        pg_kernel *k = c.k;
        pg_reg old = pg_reg_new(k, PG_U32);
        pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_U32, old, c.data, 0, pg_u32(1), pg_none());
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_EQ, PG_U32, p, old, pg_u32(0));
        pg_guard(k, p, false);
        pg_exit(k);
        pg_bar_sync(k, 0);
        expect_diverge(c, "`@%p1 exit`", "atomic");
    }

    /* ---- uniform cases: accepted ---- */
    /* a loop over a param-derived count with a barrier inside */
    {
        ctx c = begin("loop_param");
        pg_kernel *k = c.k;
        pg_reg i = pg_reg_new(k, PG_U32), cnt = pg_reg_new(k, PG_U32);
        pg_mov(k, PG_U32, i, pg_u32(0));
        pg_shr(k, PG_U32, cnt, c.n, pg_u32(4));
        pg_reg p = pg_reg_new(k, PG_PRED);
        barrier_loop(k, p, i, cnt, pg_u32(1));
        expect_ok(c);
    }
    /* a uniform early exit (n == 0), then a barrier */
    {
        ctx c = begin("uniform_exit");
        pg_kernel *k = c.k;
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_EQ, PG_U32, p, c.n, pg_u32(0));
        pg_guard(k, p, false);
        pg_ret(k);
        pg_bar_sync(k, 0);
        expect_ok(c);
    }
    /* a tid-dependent if/else that joins before the barrier */
    {
        ctx c = begin("join");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_LT, PG_U32, p, c.tid, pg_u32(16));
        pg_label other = pg_label_new(k, "else"), join = pg_label_new(k, "join");
        pg_bra_if(k, p, true, other);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_bra(k, join);
        pg_label_bind(k, other);
        pg_mov(k, PG_U32, v, pg_u32(2));
        pg_label_bind(k, join);
        pg_bar_sync(k, 0);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        expect_ok(c);
    }
    /* grid-stride accumulation, then a block reduction (two barriers) */
    {
        ctx c = begin("reduce");
        pg_kernel *k = c.k;
        pg_shared s = pg_shared_static(k, PG_F32, 32, 4, "scratch");
        pg_reg acc = pg_reg_new(k, PG_F32);
        pg_mov(k, PG_F32, acc, pg_f32(0.0f));
        pg_loop l;
        pg_reg i = pg_grid_stride_begin(k, &l, c.n);
        pg_reg f = pg_reg_new(k, PG_F32);
        pg_cvt(k, PG_F32, PG_U32, PG_RND_RN, f, i);
        pg_add(k, PG_F32, acc, acc, f);
        pg_grid_stride_end(k, &l);
        pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, acc, s);
        pg_reg m = pg_block_reduce(k, PG_REDUCE_MAX, PG_F32, sum, s);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, c.data, 0, m);
        expect_ok(c);
    }
    /* a guarded barrier on a uniform predicate */
    {
        ctx c = begin("uniform_guard");
        pg_kernel *k = c.k;
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_GT, PG_U32, p, c.n, pg_u32(64));
        pg_guard(k, p, false);
        pg_bar_sync(k, 0);
        expect_ok(c);
    }
    /* a load from a uniform address is uniform */
    {
        ctx c = begin("uniform_load");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32);
        pg_ld(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_setp(k, PG_CMP_EQ, PG_U32, p, v, pg_u32(0));
        pg_label skip = pg_label_new(k, "skip");
        pg_bra_if(k, p, false, skip);
        pg_bar_sync(k, 0);
        pg_label_bind(k, skip);
        expect_ok(c);
    }
    /* ---- scale: near-linear, the same verdicts ---- */
    /* 64,000 predicated branches with a barrier after every 64: accepted */
    {
        ctx c = begin("scale_ok");
        scale_branches(c, SCALE_BRANCHES);
        double t0 = cpu_s();
        expect_ok(c);
        double dt = cpu_s() - t0;
        fprintf(stderr, "  64k branches + barriers: %.3f s CPU\n", dt);
        REQUIRE(dt < SCALE_CPU_LIMIT_S);
    }
    /* the same with one barrier inside branch 40,000's region: rejected,
     * naming that barrier and that branch */
    {
        ctx c = begin("scale_diverge");
        scale_branches(c, 40000);
        double t0 = cpu_s();
        expect_diverge(c, "`@%p40001 bra $L40001_skip`", "depends on %tid.x");
        REQUIRE(cpu_s() - t0 < SCALE_CPU_LIMIT_S);
    }
    /* 20,000 nested tid-dependent ifs joining before one barrier: accepted
     * (each region lies in the one around it and is not walked again) */
    {
        ctx c = begin("scale_nested");
        pg_kernel *k = c.k;
        enum { DEPTH = 20000 };
        static pg_label lab[DEPTH];
        pg_reg acc = pg_reg_new(k, PG_U32);
        pg_mov(k, PG_U32, acc, pg_u32(0));
        for (uint32_t i = 0; i < DEPTH; i++) {
            pg_reg p = pg_reg_new(k, PG_PRED);
            lab[i] = pg_label_new(k, "in");
            pg_setp(k, PG_CMP_LT, PG_U32, p, c.tid, pg_u32(i));
            pg_bra_if(k, p, false, lab[i]);
            pg_add(k, PG_U32, acc, acc, pg_u32(1));
        }
        for (uint32_t i = DEPTH; i-- > 0;) {
            pg_label_bind(k, lab[i]);
            pg_add(k, PG_U32, acc, acc, pg_u32(2));
        }
        pg_bar_sync(k, 0);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, acc);
        double t0 = cpu_s();
        expect_ok(c);
        REQUIRE(cpu_s() - t0 < SCALE_CPU_LIMIT_S);
    }
    /* many registers: 100,000 blocks each writing a fresh register that the
     * next one reads, plus one read that no write reaches at the very end */
    {
        ctx c = begin("scale_regs");
        pg_kernel *k = c.k;
        pg_reg prev = c.tid, stray = pg_reg_new(k, PG_U32);
        for (uint32_t i = 0; i < 100000; i++) {
            pg_reg r = pg_reg_new(k, PG_U32);
            pg_label next = pg_label_new(k, "n");
            pg_add(k, PG_U32, r, prev, pg_u32(i));
            pg_bra(k, next);
            pg_label_bind(k, next);
            prev = r;
        }
        pg_add(k, PG_U32, prev, prev, stray);
        double t0 = cpu_s();
        expect_undef(c, "register %r3 is read");
        REQUIRE(cpu_s() - t0 < SCALE_CPU_LIMIT_S);
    }
    /* reads that neither the dominator tree nor a short search settle: a
     * value written on one arm 200 branches above the read is accepted ... */
    {
        ctx c = begin("far_write");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32), p = pg_reg_new(k, PG_PRED);
        pg_label skip = pg_label_new(k, "skip");
        pg_setp(k, PG_CMP_LT, PG_U32, p, c.n, pg_u32(3));
        pg_bra_if(k, p, false, skip);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_label_bind(k, skip);
        uniform_branches(c, 200);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        expect_ok(c);
    }
    /* ... so is one read 200 branches into a loop and written at its
     * bottom ... */
    {
        ctx c = begin("loop_carried");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32), q = pg_reg_new(k, PG_PRED);
        pg_label top = pg_label_new(k, "top"), out = pg_label_new(k, "out");
        pg_label_bind(k, top);
        uniform_branches(c, 200);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        pg_setp(k, PG_CMP_EQ, PG_U32, q, c.n, pg_u32(0));
        pg_bra_if(k, q, false, out);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_bra(k, top);
        pg_label_bind(k, out);
        expect_ok(c);
    }
    /* two levels at scale: warp-level regions around counted barriers are
     * accepted, and one lane-level branch among them is found */
    {
        ctx c = begin("scale_warp");
        scale_warp_branches(c, SCALE_BRANCHES);
        double t0 = cpu_s();
        expect_ok(c);
        REQUIRE(cpu_s() - t0 < SCALE_CPU_LIMIT_S);
    }
    {
        ctx c = begin("scale_warp_diverge");
        scale_warp_branches(c, 50000);
        double t0 = cpu_s();
        expect_counted_diverge(c, "bar.sync 1, 64`", "depends on %tid.x");
        REQUIRE(cpu_s() - t0 < SCALE_CPU_LIMIT_S);
    }
    /* a region walked at warp level first is walked again at lane level:
     * the loop's warp-level branch (an earlier block) is reached before its
     * back edge, whose branch splits warps; the counted barrier under the
     * inner branch runs a different number of times in the lanes of a warp */
    {
        ctx c = begin("level_rises");
        pg_kernel *k = c.k;
        pg_reg warp = pgv_shr(k, PG_U32, c.tid, pg_u32(5));
        pg_reg lane = pgv_and(k, PG_B32, c.tid, pg_u32(31));
        pg_reg w0 = pgv_setp(k, PG_CMP_EQ, PG_U32, warp, pg_u32(0));
        pg_reg i = pgv_mov(k, PG_U32, pg_u32(0));
        pg_label top = pg_label_new(k, "top"), skip = pg_label_new(k, "skip");
        pg_label_bind(k, top);
        pg_bra_if(k, w0, false, skip);
        pg_bar_sync_count(k, 1, 64);
        pg_label_bind(k, skip);
        pg_add(k, PG_U32, i, i, pg_u32(1));
        pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, i, lane);
        pg_bra_if(k, more, true, top);
        expect_counted_diverge(c, "bar.sync 1, 64`", "bra $L1_top`) depends on %tid.x");
    }
    /* the same loop with a warp-uniform trip count is accepted */
    {
        ctx c = begin("level_stays");
        pg_kernel *k = c.k;
        pg_reg warp = pgv_shr(k, PG_U32, c.tid, pg_u32(5));
        pg_reg w0 = pgv_setp(k, PG_CMP_EQ, PG_U32, warp, pg_u32(0));
        pg_reg i = pgv_mov(k, PG_U32, pg_u32(0));
        pg_label top = pg_label_new(k, "top"), skip = pg_label_new(k, "skip");
        pg_label_bind(k, top);
        pg_bra_if(k, w0, false, skip);
        pg_bar_sync_count(k, 1, 64);
        pg_label_bind(k, skip);
        pg_add(k, PG_U32, i, i, pg_u32(1));
        pg_reg more = pgv_setp(k, PG_CMP_LT, PG_U32, i, warp);
        pg_bra_if(k, more, true, top);
        expect_ok(c);
    }
    /* 20,000 nested warp-level ifs, a counted barrier in the innermost:
     * accepted; with a lane-level if outermost, refused (every region
     * inside it rises to lane level, each still walked once) */
    for (int lane_outer = 0; lane_outer < 2; lane_outer++) {
        ctx c = begin(lane_outer ? "nested_lane" : "nested_warp");
        pg_kernel *k = c.k;
        enum { DEPTH = 20000 };
        static pg_label lab[DEPTH];
        pg_reg warp = pgv_shr(k, PG_U32, c.tid, pg_u32(5));
        for (uint32_t i = 0; i < DEPTH; i++) {
            pg_reg p = pg_reg_new(k, PG_PRED);
            lab[i] = pg_label_new(k, "in");
            pg_setp(k, PG_CMP_LT, PG_U32, p, lane_outer && i == 0 ? c.tid : warp, pg_u32(i));
            pg_bra_if(k, p, false, lab[i]);
        }
        pg_bar_sync_count(k, 2, 128);
        for (uint32_t i = DEPTH; i-- > 0;)
            pg_label_bind(k, lab[i]);
        double t0 = cpu_s();
        if (lane_outer)
            expect_counted_diverge(c, "bar.sync 2, 128`", "depends on %tid.x");
        else
            expect_ok(c);
        REQUIRE(cpu_s() - t0 < SCALE_CPU_LIMIT_S);
    }
    /* ... but without the loop no write reaches it */
    {
        ctx c = begin("no_loop");
        pg_kernel *k = c.k;
        pg_reg v = pg_reg_new(k, PG_U32), q = pg_reg_new(k, PG_PRED);
        pg_label out = pg_label_new(k, "out");
        uniform_branches(c, 200);
        pg_st(k, PG_SPACE_GLOBAL, PG_U32, c.data, 0, v);
        pg_setp(k, PG_CMP_EQ, PG_U32, q, c.n, pg_u32(0));
        pg_bra_if(k, q, false, out);
        pg_mov(k, PG_U32, v, pg_u32(1));
        pg_label_bind(k, out);
        expect_undef(c, "register %r3 is read");
    }
    unreachable_writes();
    reaching_writes();
    /* every catalog kernel passes validation on every target it supports */
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        for (int t = 0; t < PG_TARGET_COUNT; t++) {
            if (!pgk_supports(d, (pg_target)t))
                continue;
            char *ptx = NULL, err[512] = "";
            int rc = pgk_emit(d, (pg_target)t, NULL, &ptx, NULL, err, sizeof err);
            REQUIRE_INT_EQ(rc, 0);
            if (rc)
                fprintf(stderr, "  %s: %s\n", d->name, err);
            pgk_free(ptx);
        }
    }
    TEST_DONE();
}
