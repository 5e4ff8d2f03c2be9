/* SPDX-License-Identifier: MIT */
/*
 * What the model-kernel GPU tests add to gpu_check.h: bf16 on the host
 * (round to nearest even, widening), activation buffers of either storage
 * type kept as 32-bit words (so both can be NaN-poisoned with fill32), and
 * the table printout.
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

static inline void print_table(const char *notes)
{
    printf("\n%-28s %-34s %10s %10s %5s %7s %s\n", "kernel", "shape", "rel_l2", "max_rel", "bad",
           "repeat", "");
    for (size_t i = 0; i < nrows; i++) {
        const row *t = &table[i];
        printf("%-28s %-34s %10.2e %10.2e %5zu %7s %s\n", t->kernel, t->shape, t->rel, t->max_rel,
               t->bad, t->repeat ? "same" : "DIFF",
               t->skipped ? "skip (target)" : t->pass ? "ok" : "FAIL");
    }
    printf("rel_l2  = |out - ref| / |ref| (2-norms) against double\n"
           "max_rel = max |out_i - ref_i| / max(|ref_i|, 1e-6 max|ref|)\n"
           "bad     = elements left unwritten (NaN poison), non-finite, or wrong where exact\n"
           "%s\n",
           notes);
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
