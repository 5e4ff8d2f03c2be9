/* SPDX-License-Identifier: MIT */
/*
 * lr_schedule on a GPU: for every step t = 0 .. total + 5 of constant,
 * linear and cosine schedules with warm-ups and floors (sampled past
 * 5,000 steps), hyper[PGK_HYPER_STEP] = t is uploaded, the kernel run,
 * and hyper[PGK_HYPER_LR] must be within 1e-6 of pgk_lr_schedule_ref
 * (double) relatively, bit for bit what pgk_lr_schedule (the kernel's
 * arithmetic on the host) gives, and the other nine floats of the hyper
 * buffer untouched. Then the same argument list is launched after the
 * schedule in device memory changes, as a replayed graph would see it.
 *
 * Usage: test_schedule [--small] [--seed N]; exit 77 without a GPU.
 */
#define REL_TOL 1e-6

#include "gpu_check.h"

static void sched_of(float *s, float base, float warm, float total, float floor_, int kind)
{
    s[PGK_SCHED_BASE_LR] = base;
    s[PGK_SCHED_WARMUP] = warm;
    s[PGK_SCHED_TOTAL] = total;
    s[PGK_SCHED_MIN_RATIO] = floor_;
    s[PGK_SCHED_KIND] = (float)kind;
}

static const char *kind_name(int kind)
{
    return kind == PGK_SCHED_LINEAR ? "linear" : kind == PGK_SCHED_COSINE ? "cosine" : "constant";
}

/* Run the schedule at every step (or every stride-th past the first and
 * before the last 100) into one row. */
static void test_schedule(pgrt_buf *bh, pgrt_buf *bs, const float *sched, uint32_t stride)
{
    uint32_t total = (uint32_t)sched[PGK_SCHED_TOTAL];
    row *r = add_row("lr_schedule", "%s W=%g T=%u min=%g base=%g",
                     kind_name((int)sched[PGK_SCHED_KIND]), (double)sched[PGK_SCHED_WARMUP],
                     total, (double)sched[PGK_SCHED_MIN_RATIO], (double)sched[PGK_SCHED_BASE_LR]);
    r->elem_tol = REL_TOL;
    int rc = pgrt_buf_upload(bs, 0, sched, PGK_SCHED_COUNT);
    if (rc)
        die_rt("pgrt_buf_upload", rc);
    size_t cap = (size_t)total + 6;
    float *got = xmalloc(cap * 4);
    double *ref = xmalloc(cap * sizeof *ref);
    size_t n = 0;
    pgk_knobs kn = knobs_of("lr_schedule", NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bh), pgrt_arg_buf(bs)};
    for (uint32_t t = 0; t <= total + 5; t++) {
        if (stride > 1 && t >= 100 && t + 100 < total && t % stride != 0)
            continue;
        float hyper[PGK_HYPER_COUNT];
        for (int i = 0; i < PGK_HYPER_COUNT; i++)
            hyper[i] = (float)(i + 1) * 0.125f; /* sentinels */
        hyper[PGK_HYPER_STEP] = (float)t;
        if ((rc = pgrt_buf_upload(bh, 0, hyper, PGK_HYPER_COUNT)))
            die_rt("pgrt_buf_upload", rc);
        if (!launch("lr_schedule", &kn, args, 2))
            r->bad++;
        float after[PGK_HYPER_COUNT];
        dev_download(bh, after, PGK_HYPER_COUNT);
        for (int i = 0; i < PGK_HYPER_COUNT; i++)
            if (i != PGK_HYPER_LR && f32_bits(after[i]) != f32_bits(hyper[i]))
                r->bad++; /* written where it must not be */
        float mirror = pgk_lr_schedule(sched, (float)t);
        if (f32_bits(after[PGK_HYPER_LR]) != f32_bits(mirror)) {
            if (r->bad < 3)
                fprintf(stderr, "  lr_schedule step %u: %.9g (0x%08X), pgk_lr_schedule %.9g\n",
                        t, (double)after[PGK_HYPER_LR], (unsigned)f32_bits(after[PGK_HYPER_LR]),
                        (double)mirror);
            r->bad++;
        }
        got[n] = after[PGK_HYPER_LR];
        ref[n] = pgk_lr_schedule_ref(sched, t);
        n++;
    }
    compare(r, got, ref, n);
    finish(r);
    free(got), free(ref);
}

/* The same arguments, a new schedule in the buffer: the kernel reads it. */
static void test_replay(pgrt_buf *bh, pgrt_buf *bs)
{
    row *r = add_row("lr_schedule", "schedule changed under the same args");
    pgk_knobs kn = knobs_of("lr_schedule", NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bh), pgrt_arg_buf(bs)};
    float s1[PGK_SCHED_COUNT], s2[PGK_SCHED_COUNT];
    sched_of(s1, 1e-3f, 10, 100, 0, PGK_SCHED_COSINE);
    sched_of(s2, 5e-4f, 0, 100, 0.2f, PGK_SCHED_LINEAR);
    const float *scheds[2] = {s1, s2};
    float got[2];
    double ref[2];
    for (int i = 0; i < 2; i++) {
        float hyper[PGK_HYPER_COUNT] = {0};
        hyper[PGK_HYPER_STEP] = 40.0f;
        int rc = pgrt_buf_upload(bs, 0, scheds[i], PGK_SCHED_COUNT);
        if (!rc)
            rc = pgrt_buf_upload(bh, 0, hyper, PGK_HYPER_COUNT);
        if (rc)
            die_rt("pgrt_buf_upload", rc);
        if (!launch("lr_schedule", &kn, args, 2))
            r->bad++;
        float after[PGK_HYPER_COUNT];
        dev_download(bh, after, PGK_HYPER_COUNT);
        got[i] = after[PGK_HYPER_LR];
        ref[i] = pgk_lr_schedule_ref(scheds[i], 40.0);
        if (f32_bits(got[i]) != f32_bits(pgk_lr_schedule(scheds[i], 40.0f)))
            r->bad++;
    }
    compare(r, got, ref, 2);
    finish(r);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_schedule");
    pgrt_buf *bh = dev_alloc(PG_F32, PGK_HYPER_COUNT), *bs = dev_alloc(PG_F32, PGK_SCHED_COUNT);
    struct {
        float base, warm, total, floor_;
    } cases[] = {
        {1e-3f, 10, 200, 0},      {2e-4f, 100, 1000, 0.1f}, {5e-5f, 0, 50, 0},
        {1e-3f, 1, 3, 0.5f},      {3e-4f, 5, 5, 0},         {1e-3f, 20, 10, 0.1f},
        {1.0f, 0, 4999, 0},       {1e-4f, 2000, 100000, 0.05f},
    };
    for (int kind = 0; kind < 3; kind++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            float s[PGK_SCHED_COUNT];
            sched_of(s, cases[i].base, cases[i].warm, cases[i].total, cases[i].floor_, kind);
            uint32_t stride = cases[i].total > 5000 ? (small ? 4999 : 97) : 1;
            if (small && cases[i].total > 1000)
                stride = stride > 1 ? stride : 13;
            test_schedule(bh, bs, s, stride);
        }
    test_replay(bh, bs);
    printf("\n%-14s %-44s %10s %10s %5s %s\n", "kernel", "schedule", "rel_l2", "max_rel", "bad",
           "");
    for (size_t i = 0; i < nrows; i++) {
        const row *t = &table[i];
        printf("%-14s %-44s %10.2e %10.2e %5zu %s\n", t->kernel, t->shape, t->rel, t->max_rel,
               t->bad, t->pass ? "ok" : "FAIL");
    }
    printf("rel_l2, max_rel against pgk_lr_schedule_ref (double) over the steps; both must be "
           "<= 1e-6\nbad = steps whose bits differ from pgk_lr_schedule's, or a hyper float "
           "other than lr changed\n");
    pgrt_buf_destroy(&bh);
    pgrt_buf_destroy(&bs);
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
