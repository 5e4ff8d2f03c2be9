/* SPDX-License-Identifier: MIT */
/*
 * embedding_gather_f32 / _bf16 on a GPU: every output row must be its
 * table row bit for bit, an out-of-range id (negative, vocab, huge) must
 * give a zero row and set bit 0 of the error word without touching its
 * other bits, and a batch of good ids must leave the word as it was.
 * Outputs are NaN-poisoned before each launch; each launch runs twice and
 * must give the same bits. Fresh random data each run (the seed is printed).
 *
 * Usage: test_embedding [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

static void test_gather(bool bf16, uint32_t vocab, uint32_t hidden, uint32_t ntok, bool with_bad)
{
    const char *name = bf16 ? "embedding_gather_bf16" : "embedding_gather_f32";
    cur_tol = 0; /* a copy: exact */
    row *r = add_row(name, "V=%u H=%u T=%u%s", vocab, hidden, ntok, with_bad ? " +bad ids" : "");
    size_t tn = (size_t)vocab * hidden, on = (size_t)ntok * hidden;
    float *tab = fill_normal(tn, 1.0, 0.0);
    int32_t *ids = xmalloc(ntok * sizeof *ids);
    bool *bad = xmalloc(ntok);
    for (uint32_t t = 0; t < ntok; t++) {
        ids[t] = (int32_t)(next_u64() % vocab);
        bad[t] = false;
    }
    if (with_bad && ntok >= 4) {
        static const int32_t bads[] = {-1, 0, INT32_MIN, INT32_MAX};
        for (int j = 0; j < 4; j++) {
            uint32_t t = (uint32_t)(next_u64() % ntok);
            ids[t] = j == 1 ? (int32_t)vocab : bads[j];
            bad[t] = true;
        }
    }
    pgrt_buf *btab = act_upload(tab, tn, bf16); /* rounds tab for bf16 */
    pgrt_buf *bids = s32_upload(ids, ntok);
    pgrt_buf *bout = act_alloc(on, bf16);
    pgrt_buf *berr = dev_alloc(PG_U32, 1);
    float *out[2] = {xmalloc(on * 4), xmalloc(on * 4)};
    uint32_t errw[2] = {0, 0};
    pgk_knobs kn = knobs_of(name, "rows", ntok, "cols", hidden, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(btab),   pgrt_arg_buf(bids),     pgrt_arg_buf(bout),
                       pgrt_arg_buf(berr),   pgrt_arg_u32(ntok),     pgrt_arg_u32(hidden),
                       pgrt_arg_u32(vocab)};
    const uint32_t other_bits = 0x100u; /* must survive */
    for (int run = 0; run < 2; run++) {
        act_poison(bout, bf16);
        GPU_CHECK(pgrt_buf_upload(berr, 0, &other_bits, 1));
        if (!launch(name, &kn, args, 7))
            r->bad++;
        act_download(bout, out[run], on, bf16);
        dev_download(berr, &errw[run], 1);
    }
    double *ref = ref_alloc(on);
    for (uint32_t t = 0; t < ntok; t++)
        for (uint32_t h = 0; h < hidden; h++) {
            size_t o = (size_t)t * hidden + h;
            ref[o] = bad[t] ? 0.0 : tab[(size_t)ids[t] * hidden + h];
            float want = (float)ref[o];
            if (memcmp(&want, &out[0][o], 4) != 0)
                r->bad++;
        }
    bool any_bad = false;
    for (uint32_t t = 0; t < ntok; t++)
        any_bad |= bad[t];
    uint32_t want_err = other_bits | (any_bad ? 1u : 0u);
    for (int run = 0; run < 2; run++)
        if (errw[run] != want_err) {
            TEST_FAIL_("%s: error word 0x%x, expected 0x%x", name, errw[run], want_err);
            r->bad++;
        }
    compare(r, out[0], ref, on);
    same_bits(r, out[0], out[1], on * 4);
    finish(r);
    pgrt_buf_destroy(&btab);
    pgrt_buf_destroy(&bids);
    pgrt_buf_destroy(&bout);
    pgrt_buf_destroy(&berr);
    free(tab), free(ids), free(bad), free(ref), free(out[0]), free(out[1]);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_embedding");
    static const uint32_t vocabs[] = {1, 7, 1000, 50257};
    static const uint32_t hiddens[] = {1, 33, 257, 1536};
    static const uint32_t ntoks[] = {1, 5, 77, 1031};
    for (int bf = 0; bf < 2; bf++)
        for (int i = 0; i < 4; i++) {
            uint32_t v = vocabs[i], h = hiddens[i], t = ntoks[i];
            if (small && i == 3)
                v = 3001, t = 129;
            test_gather(bf, v, h, t, false);
            test_gather(bf, v, h, t, true);
        }
    print_table("embedding rows must be bit-exact copies; bad ids: zero rows and bit 0 set");
    TEST_DONE();
}
