/* SPDX-License-Identifier: MIT */
/*
 * pgk_rope_inv_freq, the host's copy of the inverse frequencies
 * rope_forward_f32 computes: values worked out by hand, then Hugging
 * Face's f32 arithmetic with the C library's pow (1 / f32(pow(theta,
 * f32(2i) / f32(D)))) for the common thetas and head sizes, which it must
 * match bit for bit wherever pow's double is not within 1e-14 of an f32
 * rounding tie (where a last-bit difference between two pows is
 * legitimate; such entries are counted, and none is expected). Bad
 * arguments are refused and leave the table alone. That the device
 * computes the same floats is tests/kernels/rope_table.c's check.
 */
#include "ptxgen/pgk.h"
#include "test.h"

#include <float.h>
#include <math.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#define REQUIRE_BITS(got, want)                                                            \
    do {                                                                                   \
        float g_ = (got), w_ = (want);                                                     \
        test_checks_++;                                                                    \
        if (bits(g_) != bits(w_))                                                          \
            TEST_FAIL_("%s = %.9g (0x%08X), want %.9g (0x%08X)", #got, (double)g_,        \
                       (unsigned)bits(g_), (double)w_, (unsigned)bits(w_));                \
    } while (0)

static void test_by_hand(void)
{
    float t[8];
    REQUIRE_INT_EQ(pgk_rope_inv_freq(10000.0f, 8, t), PG_OK);
    /* 10000^(0, 1/4, 1/2, 3/4) = 1, 10, 100, 1000: exact powers, one
     * correctly rounded quotient each */
    REQUIRE_BITS(t[0], 1.0f);
    REQUIRE_BITS(t[1], 0.1f);
    REQUIRE_BITS(t[2], 0.01f);
    REQUIRE_BITS(t[3], 0.001f);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(4.0f, 4, t), PG_OK);
    REQUIRE_BITS(t[0], 1.0f);
    REQUIRE_BITS(t[1], 0.5f);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(2.0f, 4, t), PG_OK);
    float root2 = (float)1.4142135623730951; /* 2^(1/2) rounded once */
    REQUIRE_BITS(t[1], 1.0f / root2);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(1e6f, 2, t), PG_OK);
    REQUIRE_BITS(t[0], 1.0f);
    /* theta 1: every frequency 1 */
    REQUIRE_INT_EQ(pgk_rope_inv_freq(1.0f, 8, t), PG_OK);
    for (int i = 0; i < 4; i++)
        REQUIRE_BITS(t[i], 1.0f);
    /* D = 6: f32(2/6) and f32(4/6) are not 1/3 and 2/3; the power is of
     * the rounded exponent, as Hugging Face's float arithmetic has it */
    REQUIRE_INT_EQ(pgk_rope_inv_freq(8.0f, 6, t), PG_OK);
    float e1 = 2.0f / 6.0f, e2 = 4.0f / 6.0f;
    REQUIRE_BITS(t[1], 1.0f / (float)exp2(3.0 * (double)e1));
    REQUIRE_BITS(t[2], 1.0f / (float)exp2(3.0 * (double)e2));
}

/* Whether the double x lies within rel of the midpoint between two
 * adjacent floats (where rounding it to f32 is a coin toss between two
 * accurate pows). */
static bool near_tie(double x, double relt)
{
    float f = (float)x;
    float up = nextafterf(f, INFINITY), dn = nextafterf(f, 0.0f);
    double m1 = ((double)f + (double)up) / 2, m2 = ((double)f + (double)dn) / 2;
    return fabs(x - m1) <= relt * x || fabs(x - m2) <= relt * x;
}

static void test_against_pow(void)
{
    const float thetas[] = {10000.0f, 500000.0f, 1e6f, 1234.5f, 2.0f, 100.0f, 5e7f, 0.5f};
    const uint32_t dims[] = {2, 8, 32, 64, 80, 96, 128, 160, 256, 1024};
    size_t entries = 0, ties = 0;
    float t[512];
    for (size_t a = 0; a < sizeof thetas / sizeof thetas[0]; a++)
        for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++) {
            uint32_t dim = dims[b];
            REQUIRE_INT_EQ(pgk_rope_inv_freq(thetas[a], dim, t), PG_OK);
            for (uint32_t i = 0; i < dim / 2; i++) {
                float e = (float)(2 * i) / (float)dim;
                double pw = pow((double)thetas[a], (double)e);
                float want = 1.0f / (float)pw;
                entries++;
                if (bits(t[i]) == bits(want))
                    continue;
                if (near_tie(pw, 1e-14)) {
                    ties++;
                    continue;
                }
                TEST_FAIL_("theta %g D %u i %u: %.9g (0x%08X), pow gives %.9g (0x%08X)",
                           (double)thetas[a], dim, i, (double)t[i], (unsigned)bits(t[i]),
                           (double)want, (unsigned)bits(want));
            }
            test_checks_++;
        }
    fprintf(stderr, "%zu entries against pow: %zu within 1e-14 of an f32 tie\n", entries, ties);
}

static void test_refused(void)
{
    float t[4] = {7.0f, 7.0f, 7.0f, 7.0f};
    REQUIRE_INT_EQ(pgk_rope_inv_freq(10000.0f, 8, NULL), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(10000.0f, 0, t), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(10000.0f, 7, t), PG_EINVAL);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(10000.0f, 1, t), PG_EINVAL);
    const float bad[] = {0.0f, -0.0f, -10000.0f, INFINITY, -INFINITY, NAN, FLT_MIN / 2};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        REQUIRE_INT_EQ(pgk_rope_inv_freq(bad[i], 8, t), PG_EINVAL);
    for (int i = 0; i < 4; i++)
        REQUIRE_BITS(t[i], 7.0f);
    /* the extremes of a positive normal float are taken */
    REQUIRE_INT_EQ(pgk_rope_inv_freq(FLT_MIN, 4, t), PG_OK);
    REQUIRE_INT_EQ(pgk_rope_inv_freq(FLT_MAX, 4, t), PG_OK);
    REQUIRE(isfinite(t[1]) && t[1] > 0);
}

int main(void)
{
    test_by_hand();
    test_against_pow();
    test_refused();
    TEST_DONE();
}
