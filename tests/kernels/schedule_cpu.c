/* SPDX-License-Identifier: MIT */
/*
 * The learning-rate schedule of lr_schedule on the host:
 * pgk_lr_schedule_ref (double) against Hugging Face transformers' lambdas
 * translated line for line from optimization.py and against values worked
 * out by hand; pgk_lr_schedule (the kernel's f32 arithmetic, bit for bit)
 * against the reference at every step of many schedules, held to the
 * bound lr_schedule's header comment states. The kernel itself is held to
 * both on a GPU by tests/kernels/schedule.c.
 */
#include "ptxgen/pgk.h"
#include "test.h"

#include <math.h>

#define PI_D 3.14159265358979323846
#define BOUND 4.2e-7 /* 7 f32 roundings: lr_schedule's header comment */

static void sched_of(float *s, float base, float warm, float total, float floor_, int kind)
{
    s[PGK_SCHED_BASE_LR] = base;
    s[PGK_SCHED_WARMUP] = warm;
    s[PGK_SCHED_TOTAL] = total;
    s[PGK_SCHED_MIN_RATIO] = floor_;
    s[PGK_SCHED_KIND] = (float)kind;
}

/* transformers/optimization.py: the lr_lambda of get_constant_schedule_with_warmup,
 * get_linear_schedule_with_warmup and get_cosine_with_min_lr_schedule_with_warmup
 * (num_cycles 0.5), times base_lr as LambdaLR applies it. */
static double hf_lr(const float *s, double step)
{
    double warm = s[PGK_SCHED_WARMUP], total = s[PGK_SCHED_TOTAL];
    double min_lr_rate = s[PGK_SCHED_MIN_RATIO];
    double lambda;
    if (step < warm) {
        lambda = step / fmax(1.0, warm);
    } else if (s[PGK_SCHED_KIND] == PGK_SCHED_LINEAR) {
        lambda = fmax(0.0, (total - step) / fmax(1.0, total - warm));
    } else if (s[PGK_SCHED_KIND] == PGK_SCHED_COSINE) {
        double progress = (step - warm) / fmax(1.0, total - warm);
        double factor = 0.5 * (1.0 + cos(PI_D * 0.5 * 2.0 * progress));
        factor = factor * (1 - min_lr_rate) + min_lr_rate;
        lambda = fmax(0.0, factor);
    } else {
        lambda = 1.0;
    }
    return s[PGK_SCHED_BASE_LR] * lambda;
}

static double rel(double got, double want)
{
    if (got == want)
        return 0.0;
    return fabs(got - want) / (want != 0 ? fabs(want) : 1.0);
}

#define REQUIRE_NEAR(got, want, tol)                                                       \
    do {                                                                                   \
        double g_ = (got), w_ = (want);                                                    \
        test_checks_++;                                                                    \
        if (!(fabs(g_ - w_) <= (tol)))                                                     \
            TEST_FAIL_("%s = %.17g, want %.17g (tol %g)", #got, g_, w_, (double)(tol));    \
    } while (0)

static void test_by_hand(void)
{
    float s[PGK_SCHED_COUNT];
    const double tol = 1e-18; /* lr ~ 1e-3: a few double ulps */
    sched_of(s, 1e-3f, 10, 1000, 0, PGK_SCHED_CONSTANT);
    const double b = (double)1e-3f;
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 0), 0.0, 0.0); /* Hugging Face: step 0 of a warm-up */
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 5), b / 2, tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 10), b, 0.0);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 5000), b, 0.0);

    sched_of(s, 1e-3f, 10, 110, 0, PGK_SCHED_LINEAR);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 10), b, 0.0);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 60), b / 2, tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 85), b / 4, tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 110), 0.0, 0.0);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 500), 0.0, 0.0);
    s[PGK_SCHED_MIN_RATIO] = 0.25f;
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 60), b * (0.25 + 0.75 * 0.5), tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 110), b * 0.25, tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 111), b * 0.25, tol); /* past the end: the floor */

    sched_of(s, 1e-3f, 0, 100, 0, PGK_SCHED_COSINE);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 0), b, 0.0);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 25), b * (0.5 + sqrt(2.0) / 4), tol); /* (1 + cos pi/4)/2 */
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 50), b / 2, tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 75), b * (0.5 - sqrt(2.0) / 4), tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 100), 0.0, 0.0);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 99), b * pow(sin(PI_D / 200), 2), 1e-21);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 150), 0.0, 0.0); /* held, not risen again */
    sched_of(s, 1e-3f, 0, 300, 0.1f, PGK_SCHED_COSINE);
    const double m = (double)0.1f;
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 100), b * (m + (1 - m) * 0.75), tol); /* (1 + cos pi/3)/2 */
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 200), b * (m + (1 - m) * 0.25), tol);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 300), b * m, tol);

    /* total <= warmup: Hugging Face's lambdas at and after the warm-up */
    sched_of(s, 1.0f, 10, 10, 0, PGK_SCHED_LINEAR);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 10), 0.0, 0.0);
    s[PGK_SCHED_KIND] = PGK_SCHED_COSINE;
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 10), 1.0, 0.0);
    REQUIRE_NEAR(pgk_lr_schedule_ref(s, 11), 0.0, 0.0);

    /* a kind that is none of the three: constant */
    const float odd[] = {3.0f, 0.5f, -1.0f, NAN};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        sched_of(s, 2e-4f, 4, 40, 0.5f, 0);
        s[PGK_SCHED_KIND] = odd[i];
        REQUIRE_NEAR(pgk_lr_schedule_ref(s, 30), (double)2e-4f, 0.0);
        REQUIRE(pgk_lr_schedule(s, 30) == 2e-4f);
    }
}

/* The reference against Hugging Face's own lambdas at every step up to the
 * end (past it Hugging Face's cosine rises again; the floor holds here). */
static void test_against_hf(void)
{
    const float warms[] = {0, 1, 7, 100};
    const float totals[] = {1, 8, 100, 1000, 12345};
    const float floors[] = {0, 0.1f, 0.5f};
    double worst = 0;
    for (int kind = 0; kind < 3; kind++)
        for (size_t w = 0; w < sizeof warms / sizeof warms[0]; w++)
            for (size_t t = 0; t < sizeof totals / sizeof totals[0]; t++)
                for (size_t f = 0; f < sizeof floors / sizeof floors[0]; f++) {
                    if (kind != PGK_SCHED_COSINE && floors[f] != 0)
                        continue; /* Hugging Face's floor is the cosine's */
                    float s[PGK_SCHED_COUNT];
                    sched_of(s, 1.0f, warms[w], totals[t], floors[f], kind);
                    double end = fmax(totals[t], warms[w]);
                    for (double step = 0; step <= end; step++) {
                        double e = fabs(pgk_lr_schedule_ref(s, step) - hf_lr(s, step));
                        worst = fmax(worst, e);
                        if (e > 1e-12)
                            TEST_FAIL_("kind %d W %g T %g floor %g step %g: ref %.17g, HF %.17g",
                                       kind, (double)warms[w], (double)totals[t],
                                       (double)floors[f], step, pgk_lr_schedule_ref(s, step),
                                       hf_lr(s, step));
                    }
                    test_checks_++;
                }
    fprintf(stderr, "reference vs Hugging Face's lambdas: largest difference %.3g (base 1)\n",
            worst);
}

/* The kernel's arithmetic against the reference at every step 0 .. T + 5
 * (sampled past 70,000 steps). */
static void test_f32_bound(void)
{
    const float bases[] = {1e-3f, 7e-5f, 1.0f};
    const float warms[] = {0, 1, 10, 500};
    const float totals[] = {1, 10, 100, 1000, 4999, 65536, 1000000, 16000000};
    const float floors[] = {0, 0.1f, 0.3f, 0.5f, 0.97f, 1};
    double worst[3] = {0, 0, 0};
    long count = 0;
    for (int kind = 0; kind < 3; kind++)
        for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++)
            for (size_t w = 0; w < sizeof warms / sizeof warms[0]; w++)
                for (size_t t = 0; t < sizeof totals / sizeof totals[0]; t++)
                    for (size_t f = 0; f < sizeof floors / sizeof floors[0]; f++) {
                        float s[PGK_SCHED_COUNT];
                        sched_of(s, bases[b], warms[w], totals[t], floors[f], kind);
                        double last = (double)totals[t] + 5;
                        double stride = last > 70000 ? 997 : 1;
                        for (double step = 0; step <= last; step += stride) {
                            for (int near = 0; near < (stride > 1 ? 2 : 1); near++) {
                                /* the first and last hundred steps too, when sampled */
                                double st = near ? last - fmod(step, 100) : step;
                                float got = pgk_lr_schedule(s, (float)st);
                                double want = pgk_lr_schedule_ref(s, st);
                                double e = rel(got, want);
                                worst[kind] = fmax(worst[kind], e);
                                count++;
                                if (e > BOUND)
                                    TEST_FAIL_("kind %d base %g W %g T %g floor %g step %g: "
                                               "%.9g, reference %.17g (rel %.3g)",
                                               kind, (double)bases[b], (double)warms[w],
                                               (double)totals[t], (double)floors[f], st,
                                               (double)got, want, e);
                                if (kind == PGK_SCHED_CONSTANT && st >= warms[w] &&
                                    got != bases[b])
                                    TEST_FAIL_("constant, floor %g: %.9g is not base %.9g",
                                               (double)floors[f], (double)got,
                                               (double)bases[b]);
                                if (st == 0 && warms[w] > 0 && got != 0.0f)
                                    TEST_FAIL_("step 0 of a warm-up: %.9g", (double)got);
                            }
                        }
                        test_checks_++;
                    }
    fprintf(stderr,
            "pgk_lr_schedule vs reference over %ld steps: largest relative error constant "
            "%.3g, linear %.3g, cosine %.3g (bound %.2g)\n",
            count, worst[0], worst[1], worst[2], BOUND);
}

int main(void)
{
    test_by_hand();
    test_against_hf();
    test_f32_bound();
    TEST_DONE();
}
