/* SPDX-License-Identifier: MIT */
/*
 * What the tests against the fakes share past fakecuda.h's fixture:
 * binding the other fakes' recording functions (fakenccl.h, fakecublas.h)
 * and opening a context on the fake driver. Any failure here is the
 * test's set-up, not a check: it prints and exits 1.
 */
#ifndef PTXGEN_FAKE_UTIL_H
#define PTXGEN_FAKE_UTIL_H

#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_attention.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "ptxgen/pgrt_train.h"
#include "ptxgen/ptxgen.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void *fake_sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "fake library lacks %s\n", name);
        exit(1);
    }
    return p;
}

/* var = the function `name` of lib (object pointer to function pointer
 * through memcpy, as ISO C allows). */
#define FAKE_BIND(lib, var, name)                                              \
    do {                                                                       \
        void *p_ = fake_sym(lib, name);                                        \
        memcpy(&(var), &p_, sizeof(var));                                      \
    } while (0)

/* A context on the fake driver at path `fake`. */
static inline pgrt_ctx *fake_open_ctx(const char *fake)
{
    pgrt_ctx_params p = {fake, 0};
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, &p);
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    return ctx;
}

#endif /* PTXGEN_FAKE_UTIL_H */
