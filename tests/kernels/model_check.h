/* SPDX-License-Identifier: MIT */
/*
 * What the model-kernel GPU tests add to gpu_check.h: bf16 on the host
 * (round to nearest even, widening), activation buffers of either storage
 * type kept as 32-bit words (so both can be NaN-poisoned with fill32), the
 * fused kernels held to the unfused chain, and the cross-entropy reference.
 *
 * The including file defines REL_TOL before gpu_check.h; these tests hold
 * each row to tol_f32 or tol_bf16 by the storage type, so REL_TOL names
 * the variable the row's tolerance is put in.
 */
#ifndef PTXGEN_MODEL_CHECK_H
#define PTXGEN_MODEL_CHECK_H

#include "gpu_check.h"

/* A bf16 NaN in both halves of a word. */
#define POISON_BF16 0xFFC1FFC1u

/* float -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t bf16_of(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float f32_of_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Round every element to the nearest bf16, in place: the host keeps exactly
 * what the device is given. */
static inline void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = f32_of_bf16(bf16_of(x[i]));
}

static inline size_t act_words(size_t n, bool bf16) { return bf16 ? (n + 1) / 2 : n; }

/* A device buffer of n activations (f32 or bf16) as 32-bit words. */
static inline pgrt_buf *act_alloc(size_t n, bool bf16)
{
    return dev_alloc(PG_U32, act_words(n, bf16));
}

/* Upload x as f32 or bf16; for bf16, x is rounded in place first. */
static inline pgrt_buf *act_upload(float *x, size_t n, bool bf16)
{
    pgrt_buf *b = act_alloc(n, bf16);
    size_t w = act_words(n, bf16);
    uint32_t *words = xmalloc(w * 4);
    if (bf16) {
        round_bf16(x, n);
        memset(words, 0, w * 4);
        uint16_t *h = (uint16_t *)(void *)words;
        for (size_t i = 0; i < n; i++)
            h[i] = bf16_of(x[i]);
    } else {
        memcpy(words, x, n * 4);
    }
    int rc = pgrt_buf_upload(b, 0, words, w);
    if (rc)
        die_rt("pgrt_buf_upload", rc);
    free(words);
    return b;
}

/* Download n activations, widened to f32. */
static inline void act_download(const pgrt_buf *b, float *dst, size_t n, bool bf16)
{
    size_t w = act_words(n, bf16);
    uint32_t *words = xmalloc(w * 4);
    dev_download(b, words, w);
    if (bf16) {
        const uint16_t *h = (const uint16_t *)(const void *)words;
        for (size_t i = 0; i < n; i++)
            dst[i] = f32_of_bf16(h[i]);
    } else {
        memcpy(dst, words, n * 4);
    }
    free(words);
}

static inline void act_poison(pgrt_buf *b, bool bf16)
{
    int rc = pgrt_buf_fill32(b, bf16 ? POISON_BF16 : POISON);
    if (rc)
        die_rt("pgrt_buf_fill32", rc);
}

/* An s32 buffer. */
static inline pgrt_buf *s32_upload(const int32_t *x, size_t n)
{
    pgrt_buf *b = dev_alloc(PG_S32, n);
    int rc = pgrt_buf_upload(b, 0, x, n);
    if (rc)
        die_rt("pgrt_buf_upload", rc);
    return b;
}

static inline double *ref_alloc(size_t n) { return xmalloc(n * sizeof(double)); }

/* ---------------------------------------------------------------- fused against unfused */

/* The bf16 model's fused kernels (rmsnorm.c, swiglu.c) are held to the
 * unfused chain they replace, bit for bit, as well as to the reference. */

static inline size_t differ(const void *a, const void *b, size_t words)
{
    const uint32_t *x = a, *y = b;
    size_t n = 0;
    for (size_t i = 0; i < words; i++)
        n += x[i] != y[i];
    return n;
}

/* Download an f32 buffer, or a bf16 one widened, and its raw words. */
static inline float *get(const pgrt_buf *b, size_t n, bool bf16)
{
    float *x = xmalloc(n * 4);
    memset(x, 0, n * 4); /* written by the download; gcc -O3 cannot see it */
    act_download(b, x, n, bf16);
    return x;
}

/* The bf16 outputs of the fused kernels, widened, against the unfused
 * chain's (widened the same way): equal floats are equal bits. */
static inline void row_checks(row *r, const float *f32, const float *f32_ref_bits, const float *b16,
                       const float *b16_ref_bits, const double *ref, size_t n, bool copy_row)
{
    r->bad += differ(f32, f32_ref_bits, n) + differ(b16, b16_ref_bits, n);
    compare(r, copy_row ? b16 : f32, ref, n);
}

static inline void cast_into(pgrt_buf *src, pgrt_buf *dst, uint32_t n)
{
    pgk_knobs kc = knobs_of("cast_f32_to_bf16", "n", n, NULL);
    pgrt_arg ca[] = {pgrt_arg_buf(src), pgrt_arg_buf(dst), pgrt_arg_u32(n)};
    launch("cast_f32_to_bf16", &kc, ca, 3);
}

static inline void residual_into(pgrt_buf *a, pgrt_buf *b, pgrt_buf *out, size_t n)
{
    pgk_knobs kn = knobs_of("residual_add", "n", (uint32_t)n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(a), pgrt_arg_buf(b), pgrt_arg_buf(out),
                       pgrt_arg_u32((uint32_t)n)};
    launch("residual_add", &kn, args, 4);
}

/* A fused kernel with one f32 output y and its bf16 copy yb: launched
 * twice (y, yb and `also`, when not NULL, poisoned first), then each
 * output against the unfused chain's (y2, yb2: the same bits) and the
 * reference, rows r (f32) and rb (the copy), and the second run's bits
 * against the first's. */
static inline void fused_pair(const char *name, const pgk_knobs *kn, const pgrt_arg *args,
                       size_t nargs, pgrt_buf *y, pgrt_buf *yb, pgrt_buf *also,
                       const pgrt_buf *y2, const pgrt_buf *yb2, const double *ref, size_t n,
                       row *r, row *rb)
{
    float *out[2], *outb[2];
    for (int run = 0; run < 2; run++) {
        if (also)
            act_poison(also, false);
        act_poison(y, false);
        act_poison(yb, true);
        if (!launch(name, kn, args, nargs))
            r->bad++;
        out[run] = get(y, n, false);
        outb[run] = get(yb, n, true);
    }
    float *o2 = get(y2, n, false), *ob2 = get(yb2, n, true);
    row_checks(r, out[0], o2, outb[0], ob2, ref, n, false);
    row_checks(rb, out[0], o2, outb[0], ob2, ref, n, true);
    same_bits(r, out[0], out[1], n * 4);
    same_bits(rb, outb[0], outb[1], n * 4);
    free(o2), free(ob2);
    for (int i = 0; i < 2; i++)
        free(out[i]), free(outb[i]);
}

/* f32 outputs within 1e-5, the bf16 copies within 5e-3; *tol is the
 * variable REL_TOL names. */
static inline void finish_pair(row *r, row *rb, double *tol)
{
    *tol = 1e-5;
    finish(r);
    *tol = 5e-3;
    finish(rb);
}

/* The cross-entropy kernels' double reference over rows x vocab logits x:
 * per-row loss (0 for a negative label; for bad_row, whose label is past
 * the vocabulary, logsumexp alone) and (softmax - onehot) * scale. */
static inline void ce_reference(const float *x, const int32_t *lab, uint32_t rows,
                                uint32_t vocab, uint32_t bad_row, float scale, double *rloss,
                                double *rgrad)
{
    for (uint32_t r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * vocab;
        double *g = rgrad + (size_t)r * vocab;
        if (lab[r] < 0) {
            rloss[r] = 0;
            memset(g, 0, vocab * sizeof *g);
            continue;
        }
        double m = -INFINITY, s = 0;
        for (uint32_t j = 0; j < vocab; j++)
            m = fmax(m, xr[j]);
        for (uint32_t j = 0; j < vocab; j++)
            s += exp(xr[j] - m);
        rloss[r] = log(s) + m - (r == bad_row ? 0 : xr[lab[r]]);
        for (uint32_t j = 0; j < vocab; j++)
            g[j] = (exp(xr[j] - m) / s - ((int32_t)j == lab[r])) * scale;
    }
}

#endif /* PTXGEN_MODEL_CHECK_H */
