/* SPDX-License-Identifier: MIT */
/*
 * A module loaded from the on-disk cubin cache computes exactly what a
 * freshly JIT-compiled one does. Each kernel runs on the same inputs in
 * three fresh contexts: PTX JIT-compiled with the cache off, PTX
 * JIT-compiled through the linker and written to an empty cache
 * directory, and the cubin read back from that directory (all hits, no
 * JIT). Every buffer the kernel can touch is compared bit for bit. A
 * kernel whose output differs between two runs of the same module (an
 * atomic reduction, say) is reported and not compared.
 *
 * Exits 77 without a driver or a device.
 */
#include "gpu_util.h"
#include "test.h"

#include <unistd.h>

#define BUF_FLOATS (1u << 18)
#define MAX_PTRS 8

typedef struct kcase {
    const char *kernel;
    const char *knobs; /* "name=value,..." */
} kcase;

static const kcase cases[] = {
    {"silu_forward", "n=4099"},
    {"silu_backward", "n=4099"},
    {"residual_add", "n=4099"},
    {"squared_sum_reduce", "n=40000"},
    {"batched_softmax_forward", "rows=48,cols=200"},
    {"batched_softmax_backward", "rows=48,cols=200"},
    {"rms_norm_forward", "rows=24,cols=320"},
    {"batched_rms_norm_backward", "rows=24,cols=320"},
    {"gemm_forward", "m=64,n=96,k=80"},
    {"gemm_backward_a", "m=64,n=96,k=80"},
    {"gemm_backward_b", "m=64,n=96,k=80"},
};
#define NCASES (sizeof cases / sizeof cases[0])

typedef struct result {
    float *out[MAX_PTRS]; /* every pointer buffer after the launch */
    int nptrs;
} result;

static void knobs_of(const kcase *c, const pgk_desc *d, pgk_knobs *kn)
{
    pgk_knobs_default(d, kn);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", c->knobs);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        kn->v[pgk_knob_index(d, tok)] = (uint32_t)strtoul(eq + 1, NULL, 10);
    }
}

/* Launch case c on fresh inputs (the same every time: seeded by the case)
 * and keep every buffer. */
static void run_case(pgrt_ctx *ctx, size_t ci, result *res)
{
    const kcase *c = &cases[ci];
    const pgk_desc *d = pgk_find(c->kernel);
    pgk_knobs kn;
    knobs_of(c, d, &kn);
    pgrt_arg args[16];
    pgrt_buf *bufs[MAX_PTRS] = {0};
    float *host = malloc(BUF_FLOATS * sizeof *host);
    int nb = 0;
    for (size_t i = 0; i < d->nparams; i++) {
        const pgk_param *p = &d->params[i];
        if (p->pointer) {
            rng r = {0x5eed0000u + ci * 16 + i};
            for (uint32_t j = 0; j < BUF_FLOATS; j++)
                host[j] = rng_unit(&r);
            GPU_CHECK(pgrt_buf_alloc(ctx, PG_F32, BUF_FLOATS, &bufs[nb]));
            GPU_CHECK(pgrt_buf_upload(bufs[nb], 0, host, BUF_FLOATS));
            args[i] = pgrt_arg_buf(bufs[nb++]);
        } else if (pgk_knob_index(d, p->name) >= 0) {
            args[i] = pgrt_arg_u32(kn.v[pgk_knob_index(d, p->name)]);
        } else {
            args[i] = pgrt_arg_f32(strcmp(p->name, "eps") == 0 ? 1e-5f : 0.5f);
        }
    }
    GPU_CHECK(pgrt_launch(ctx, NULL, c->kernel, &kn, args, d->nparams));
    GPU_CHECK(pgrt_ctx_sync(ctx));
    res->nptrs = nb;
    for (int b = 0; b < nb; b++) {
        res->out[b] = malloc(BUF_FLOATS * sizeof(float));
        GPU_CHECK(pgrt_buf_download(bufs[b], 0, res->out[b], BUF_FLOATS));
        pgrt_buf_destroy(&bufs[b]);
    }
    free(host);
}

static void free_result(result *r)
{
    for (int b = 0; b < r->nptrs; b++)
        free(r->out[b]);
    r->nptrs = 0;
}

static bool same(const result *a, const result *b)
{
    if (a->nptrs != b->nptrs)
        return false;
    for (int i = 0; i < a->nptrs; i++)
        if (memcmp(a->out[i], b->out[i], BUF_FLOATS * sizeof(float)) != 0)
            return false;
    return true;
}

/* Every case in a fresh context made under the current environment. */
static void run_all(result *res, pgrt_cache_stats *st)
{
    pgrt_ctx *ctx = gpu_open();
    for (size_t i = 0; i < NCASES; i++)
        run_case(ctx, i, &res[i]);
    GPU_CHECK(pgrt_cache_stats_get(ctx, st));
    pgrt_ctx_destroy(&ctx);
}

int main(void)
{
    char dir[] = "/tmp/ptxgen-gpu-cubin-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    static result fresh[NCASES], again[NCASES], linked[NCASES], disk[NCASES];
    pgrt_cache_stats st;

    setenv("PTXGEN_CACHE", "0", 1);
    run_all(fresh, &st);
    run_all(again, &st);
    REQUIRE_INT_EQ(st.disk_misses + st.disk_hits, 0);

    setenv("PTXGEN_CACHE", "1", 1);
    setenv("PTXGEN_CACHE_DIR", dir, 1);
    run_all(linked, &st);
    fprintf(stderr, "linked: %llu disk misses, %llu writes, %llu cubin bytes, JIT %.1f ms\n",
            (unsigned long long)st.disk_misses, (unsigned long long)st.disk_writes,
            (unsigned long long)st.cubin_bytes, st.jit_ms);
    REQUIRE_INT_EQ(st.disk_misses, NCASES);
    REQUIRE_INT_EQ(st.disk_writes, NCASES);
    run_all(disk, &st);
    fprintf(stderr, "from disk: %llu hits, load %.2f ms, JIT %.1f ms\n",
            (unsigned long long)st.disk_hits, st.load_ms, st.jit_ms);
    REQUIRE_INT_EQ(st.disk_hits, NCASES);
    REQUIRE_INT_EQ(st.disk_misses, 0);
    REQUIRE(st.jit_ms == 0.0);

    size_t compared = 0;
    for (size_t i = 0; i < NCASES; i++) {
        if (!same(&fresh[i], &again[i])) {
            fprintf(stderr, "%s: two runs of one module differ; not compared\n",
                    cases[i].kernel);
        } else {
            compared++;
            if (!same(&fresh[i], &linked[i]))
                fprintf(stderr, "%s: the linker's cubin computes other bits\n", cases[i].kernel);
            if (!same(&fresh[i], &disk[i]))
                fprintf(stderr, "%s: the cached cubin computes other bits\n", cases[i].kernel);
            REQUIRE(same(&fresh[i], &linked[i]));
            REQUIRE(same(&fresh[i], &disk[i]));
        }
        free_result(&fresh[i]);
        free_result(&again[i]);
        free_result(&linked[i]);
        free_result(&disk[i]);
    }
    fprintf(stderr, "%zu of %zu kernels compared bit for bit\n", compared, NCASES);
    REQUIRE(compared >= NCASES / 2);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    TEST_DONE();
}
