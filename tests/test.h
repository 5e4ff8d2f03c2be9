/* SPDX-License-Identifier: MIT */
/*
 * A tiny test harness: one main per file, REQUIRE-style checks that print
 * both sides on failure and keep going, and a summary exit code.
 * Exit 77 means "skipped" (no GPU, no ptxas) to meson.
 */
#ifndef PTXGEN_TEST_H
#define PTXGEN_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TEST_SKIP 77

static int test_failures_;
static int test_checks_;

#define TEST_FAIL_(...)                                                        \
    do {                                                                       \
        test_failures_++;                                                      \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                  \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
    } while (0)

#define REQUIRE(cond)                                                          \
    do {                                                                       \
        test_checks_++;                                                        \
        if (!(cond))                                                           \
            TEST_FAIL_("%s", #cond);                                           \
    } while (0)

#define REQUIRE_INT_EQ(a, b)                                                   \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        test_checks_++;                                                        \
        if (a_ != b_)                                                          \
            TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);              \
    } while (0)

#define REQUIRE_STR_EQ(a, b)                                                   \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        test_checks_++;                                                        \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                 \
            TEST_FAIL_("%s == %s:\n  got:      \"%s\"\n  expected: \"%s\"",    \
                       #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");        \
    } while (0)

#define REQUIRE_CONTAINS(hay, needle)                                          \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        test_checks_++;                                                        \
        if (!h_ || !strstr(h_, n_))                                            \
            TEST_FAIL_("%s contains \"%s\":\n  in: \"%s\"", #hay, n_,          \
                       h_ ? h_ : "(null)");                                    \
    } while (0)

#define TEST_DONE()                                                            \
    do {                                                                       \
        fprintf(stderr, "%d checks, %d failures\n", test_checks_,              \
                test_failures_);                                               \
        return test_failures_ ? 1 : 0;                                         \
    } while (0)

#endif /* PTXGEN_TEST_H */
