/* SPDX-License-Identifier: MIT */
/* Helpers shared by the unit tests: look at the text of recorded
 * instructions through the library's own formatter. */
#ifndef PTXGEN_TEST_UTIL_H
#define PTXGEN_TEST_UTIL_H

#include "../../ptxgen/internal.h"
#include "test.h"

/* Text of the last recorded instruction ("add.rn.f32 %f3, %f1, %f2"). */
static inline const char *last_line(pg_kernel *k)
{
    static char buf[1024];
    if (k->err || k->nins == 0) {
        snprintf(buf, sizeof buf, "<error %d: %s>", k->err, k->msg);
        return buf;
    }
    pg_instr_text(k, &k->ins[k->nins - 1], buf, sizeof buf);
    return buf;
}

#define EXPECT_LINE(k, text) REQUIRE_STR_EQ(last_line(k), text)

/* A fresh kernel with `name` for target t. */
static inline pg_kernel *mk(const char *name, pg_target t)
{
    pg_kernel *k = NULL;
    int rc = pg_kernel_create(&k, name, t);
    if (rc) {
        fprintf(stderr, "pg_kernel_create: %s\n", pg_strerror(rc));
        return NULL;
    }
    return k;
}

/* Emit; returns the error code and leaves the text in *ptx. */
static inline int emit(pg_kernel *k, const char **ptx)
{
    size_t n;
    return pg_kernel_emit(k, ptx, &n);
}

#endif
