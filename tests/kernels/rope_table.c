/* SPDX-License-Identifier: MIT */
/*
 * rope_forward_table_f32 / rope_backward_table_f32 on a GPU.
 *
 * Bitwise: with inv_freq = pgk_rope_inv_freq(theta, D) (the host's copy
 * of the device's table) and pos[t] = t mod S, each table kernel must
 * write exactly the bits of rope_forward_f32 / rope_backward_f32 with
 * theta and seq_len S, on the shapes of tests/kernels/rope.c.
 *
 * Against a double reference: packed sequences (positions that restart at
 * every document, documents of random lengths, up to 32767) with a llama3
 * scaled table (Hugging Face's _compute_llama3_parameters: factor 8, low
 * and high frequency factors 1 and 4, an original context of 8192),
 * computed here in f32 from the plain table. The reference takes the
 * angle as the kernel must, f32(pos) * inv_freq[i] rounded to f32, then
 * cos, sin and the rotation in double; f32 results within 1e-5
 * norm-wise.
 *
 * The kernels work in place: every launch runs on a fresh upload, twice,
 * and must give the same bits.
 *
 * Usage: test_rope_table [--small] [--seed N]; exit 77 without a GPU.
 */
#define REL_TOL 1e-5

#include "model_check.h"

static void reference(const float *x, double *y, uint32_t ntok, const int32_t *pos,
                      const float *inv, uint32_t heads, uint32_t dim, bool backward)
{
    uint32_t half = dim / 2;
    for (uint32_t t = 0; t < ntok; t++) {
        for (uint32_t i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv[i];
            double c = cos((double)ang), s = sin((double)ang);
            for (uint32_t h = 0; h < heads; h++) {
                size_t o = ((size_t)t * heads + h) * dim + i;
                double x1 = x[o], x2 = x[o + half];
                if (backward) {
                    y[o] = x1 * c + x2 * s;
                    y[o + half] = x2 * c - x1 * s;
                } else {
                    y[o] = x1 * c - x2 * s;
                    y[o + half] = x2 * c + x1 * s;
                }
            }
        }
    }
}

typedef struct rope_case {
    uint32_t ntok, hq, hkv, dim;
    const float *q, *k;
} rope_case;

/* Launch `kernel` on fresh uploads of q and k; out gets q then k. */
static bool run_rope(const char *kernel, const rope_case *c, const pgrt_arg *tail, size_t ntail,
                     float *out)
{
    size_t nq = (size_t)c->ntok * c->hq * c->dim, nk = (size_t)c->ntok * c->hkv * c->dim;
    pgrt_buf *bq = dev_upload(c->q, nq), *bk = dev_upload(c->k, nk);
    pgrt_arg args[8] = {pgrt_arg_buf(bq), pgrt_arg_buf(bk)};
    for (size_t i = 0; i < ntail; i++)
        args[2 + i] = tail[i];
    pgk_knobs kn = knobs_of(kernel, "rows", c->ntok, "head_dim", c->dim, NULL);
    bool ok = launch(kernel, &kn, args, 2 + ntail);
    dev_download(bq, out, nq);
    dev_download(bk, out + nq, nk);
    pgrt_buf_destroy(&bq);
    pgrt_buf_destroy(&bk);
    return ok;
}

static pgrt_arg table_args[6];

/* The table kernels' arguments after q and k. */
static const pgrt_arg *table_tail(pgrt_buf *bpos, pgrt_buf *binv, const rope_case *c)
{
    table_args[0] = pgrt_arg_buf(bpos);
    table_args[1] = pgrt_arg_buf(binv);
    table_args[2] = pgrt_arg_u32(c->ntok);
    table_args[3] = pgrt_arg_u32(c->hq);
    table_args[4] = pgrt_arg_u32(c->hkv);
    table_args[5] = pgrt_arg_u32(c->dim);
    return table_args;
}

/* The table kernel with pgk_rope_inv_freq and t mod S against the theta
 * kernel: the same bits. */
static void test_bitwise(bool backward, uint32_t batch, uint32_t seq, uint32_t hq, uint32_t hkv,
                         uint32_t dim, float theta)
{
    const char *name = backward ? "rope_backward_table_f32" : "rope_forward_table_f32";
    const char *plain = backward ? "rope_backward_f32" : "rope_forward_f32";
    rope_case c = {batch * seq, hq, hkv, dim, NULL, NULL};
    row *r = add_row(name, "B=%u S=%u Hq=%u Hkv=%u D=%u th=%g (bits)", batch, seq, hq, hkv, dim,
                     (double)theta);
    size_t nq = (size_t)c.ntok * hq * dim, nk = (size_t)c.ntok * hkv * dim;
    float *q = fill_normal(nq, 1.0, 0.0), *k = fill_normal(nk, 1.0, 0.0);
    c.q = q, c.k = k;
    int32_t *pos = xmalloc(c.ntok * sizeof *pos);
    for (uint32_t t = 0; t < c.ntok; t++)
        pos[t] = (int32_t)(t % seq);
    float *inv = xmalloc(dim / 2 * sizeof *inv);
    if (pgk_rope_inv_freq(theta, dim, inv) != PG_OK) {
        TEST_FAIL_("pgk_rope_inv_freq(%g, %u) failed", (double)theta, dim);
        r->bad++;
    }
    pgrt_buf *bpos = s32_upload(pos, c.ntok), *binv = dev_upload(inv, dim / 2);
    double *ref = ref_alloc(nq + nk);
    reference(q, ref, c.ntok, pos, inv, hq, dim, backward);
    reference(k, ref + nq, c.ntok, pos, inv, hkv, dim, backward);
    float *out[3] = {xmalloc((nq + nk) * 4), xmalloc((nq + nk) * 4), xmalloc((nq + nk) * 4)};
    for (int run = 0; run < 2; run++)
        if (!run_rope(name, &c, table_tail(bpos, binv, &c), 6, out[run]))
            r->bad++;
    pgrt_arg plain_tail[] = {pgrt_arg_u32(c.ntok), pgrt_arg_u32(seq), pgrt_arg_u32(hq),
                             pgrt_arg_u32(hkv),    pgrt_arg_u32(dim), pgrt_arg_f32(theta)};
    if (!run_rope(plain, &c, plain_tail, 6, out[2]))
        r->bad++;
    compare(r, out[0], ref, nq + nk);
    same_bits(r, out[0], out[1], (nq + nk) * 4);
    size_t differ = 0;
    for (size_t i = 0; i < nq + nk; i++)
        differ += f32_bits(out[0][i]) != f32_bits(out[2][i]);
    if (differ)
        fprintf(stderr, "  %s: %zu of %zu elements differ from %s's bits\n", name, differ,
                nq + nk, plain);
    r->bad += differ;
    finish(r);
    pgrt_buf_destroy(&bpos);
    pgrt_buf_destroy(&binv);
    free(q), free(k), free(pos), free(inv), free(ref);
    free(out[0]), free(out[1]), free(out[2]);
}

/* Hugging Face's _compute_llama3_parameters on the plain table, in f32. */
static void llama3_scale(float *inv, uint32_t half)
{
    const float factor = 8.0f, low = 1.0f, high = 4.0f, old_ctx = 8192.0f;
    const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (uint32_t i = 0; i < half; i++) {
        float wavelen = 2.0f * 3.14159265f / inv[i];
        float scaled = wavelen > low_wavelen ? inv[i] / factor : inv[i];
        float smooth = (old_ctx / wavelen - low) / (high - low);
        float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
        bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        inv[i] = medium ? smoothed : scaled;
    }
}

/* Packed documents and a scaled table against the double reference. */
static void test_packed(bool backward, uint32_t ntok, uint32_t hq, uint32_t hkv, uint32_t dim,
                        float theta, uint32_t max_doc)
{
    const char *name = backward ? "rope_backward_table_f32" : "rope_forward_table_f32";
    rope_case c = {ntok, hq, hkv, dim, NULL, NULL};
    row *r = add_row(name, "packed T=%u Hq=%u Hkv=%u D=%u doc<=%u", ntok, hq, hkv, dim, max_doc);
    size_t nq = (size_t)ntok * hq * dim, nk = (size_t)ntok * hkv * dim;
    float *q = fill_normal(nq, 1.0, 0.0), *k = fill_normal(nk, 1.0, 0.0);
    c.q = q, c.k = k;
    int32_t *pos = xmalloc(ntok * sizeof *pos);
    uint32_t left = 0;
    int32_t p = 0;
    for (uint32_t t = 0; t < ntok; t++) {
        if (left == 0) { /* a new document */
            left = 1 + (uint32_t)(next_u64() % max_doc);
            p = 0;
        }
        pos[t] = p++;
        left--;
    }
    float *inv = xmalloc(dim / 2 * sizeof *inv);
    if (pgk_rope_inv_freq(theta, dim, inv) != PG_OK)
        r->bad++;
    llama3_scale(inv, dim / 2);
    pgrt_buf *bpos = s32_upload(pos, ntok), *binv = dev_upload(inv, dim / 2);
    double *ref = ref_alloc(nq + nk);
    reference(q, ref, ntok, pos, inv, hq, dim, backward);
    reference(k, ref + nq, ntok, pos, inv, hkv, dim, backward);
    float *out[2] = {xmalloc((nq + nk) * 4), xmalloc((nq + nk) * 4)};
    for (int run = 0; run < 2; run++)
        if (!run_rope(name, &c, table_tail(bpos, binv, &c), 6, out[run]))
            r->bad++;
    compare(r, out[0], ref, nq + nk);
    same_bits(r, out[0], out[1], (nq + nk) * 4);
    finish(r);
    pgrt_buf_destroy(&bpos);
    pgrt_buf_destroy(&binv);
    free(q), free(k), free(pos), free(inv), free(ref), free(out[0]), free(out[1]);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_rope_table");
    struct {
        uint32_t b, s, hq, hkv, d;
        float theta;
    } shapes[] = {
        {1, 1, 1, 1, 2, 10000.0f},  {3, 7, 3, 1, 8, 10000.0f},  {2, 129, 12, 2, 128, 1e6f},
        {1, 4096, 2, 1, 64, 10000.0f}, {2, 33, 14, 2, 64, 1e6f}, {1, 4096, 4, 2, 128, 5e5f},
    };
    for (int bwd = 0; bwd < 2; bwd++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            uint32_t s = shapes[i].s;
            if (small && s > 512)
                s = 515;
            test_bitwise(bwd, shapes[i].b, s, shapes[i].hq, shapes[i].hkv, shapes[i].d,
                         shapes[i].theta);
        }
    for (int bwd = 0; bwd < 2; bwd++) {
        test_packed(bwd, 3, 2, 1, 8, 10000.0f, 2);
        test_packed(bwd, small ? 1000 : 8192, 4, 2, 128, 5e5f, 700);
        test_packed(bwd, small ? 1000 : 40000, 2, 1, 64, 5e5f, 32767);
    }
    print_table("rel_l2 <= 1e-5; on the (bits) rows, bad counts the elements whose bits differ "
                "from rope_forward_f32 / rope_backward_f32 (pgk_rope_inv_freq's table, pos = t "
                "mod S)");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
