/* SPDX-License-Identifier: MIT */
/*
 * What the attention tests (test_attention.c: the SIMT kernels,
 * test_attention_mma.c: the tensor-core ones) share: the tolerance
 * model_check.h compares with (cur_tol, set per case), the shape and its
 * [B, S, H, D] indexing, a double dot product, and output buffers that are
 * poisoned, launched into twice and downloaded each time.
 */
#ifndef PTXGEN_TESTS_ATTENTION_CHECK_H
#define PTXGEN_TESTS_ATTENTION_CHECK_H

static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

typedef struct shp {
    uint32_t b, s, hq, hkv, d;
    double qscale;
} shp;

static size_t qidx(const shp *x, uint32_t b, uint32_t s, uint32_t h)
{
    return (((size_t)b * x->s + s) * x->hq + h) * x->d;
}
static size_t kidx(const shp *x, uint32_t b, uint32_t s, uint32_t h)
{
    return (((size_t)b * x->s + s) * x->hkv + h) * x->d;
}

static double dot(const float *a, const float *b, uint32_t d)
{
    double s = 0;
    for (uint32_t e = 0; e < d; e++)
        s += (double)a[e] * b[e];
    return s;
}

/* Runs a kernel twice, poisoning `outs` first; downloads each into host
 * copies (act or f32) and returns whether both launches went. */
typedef struct outbuf {
    pgrt_buf *b;
    size_t n;
    bool bf16; /* act storage; false: f32 */
    float *host[2];
} outbuf;

static bool run_twice(const char *name, const pgk_knobs *kn, const pgrt_arg *args, size_t nargs,
                      outbuf *outs, int nouts)
{
    bool ok = true;
    for (int run = 0; run < 2; run++) {
        for (int o = 0; o < nouts; o++)
            act_poison(outs[o].b, outs[o].bf16);
        ok &= launch(name, kn, args, nargs);
        for (int o = 0; o < nouts; o++)
            act_download(outs[o].b, outs[o].host[run], outs[o].n, outs[o].bf16);
    }
    return ok;
}

static outbuf out_new(size_t n, bool bf16)
{
    outbuf o = {act_alloc(n, bf16), n, bf16, {xmalloc(n * 4), xmalloc(n * 4)}};
    return o;
}

static void out_free(outbuf *o)
{
    pgrt_buf_destroy(&o->b);
    free(o->host[0]), free(o->host[1]);
}

#endif
