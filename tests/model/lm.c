/* SPDX-License-Identifier: MIT */
/*
 * pgrt_lm against the fake driver (kernels recorded, not run): a tiny
 * qwen2 (tied, q/k/v biases) and llama (untied, o bias) model in f32 and
 * bf16 is created and stepped. Two eager steps launch the same sequence,
 * the count matches launches_per_step, a graphed step replays the eager
 * sequence's kernels and shapes, and a profiled step buckets every
 * launch by kernel. An adapter with rank_pattern and alpha_pattern: its
 * pairs' own scales reach the kernels (the bf16 weight copies cast a
 * stretch of one scale at a time, the thin products), and patterns that
 * give every pair the defaults launch what no patterns launch. With
 * --trace FILE every launch of each case's first step is written out
 * (name, shape, parameters), to compare two builds. With FAKE_LIBNCCL, a
 * data-parallel pgrt_lm (params.comm) against the fake NCCL (fakenccl.h):
 * the gradient sums it issues (one a layer, on a stream of its own, in
 * place, covering every LoRA parameter once; one whole sum after the last
 * micro-batch with accumulation), the target count and loss totals summed
 * over the ranks, a graphed step, and what it refuses.
 *
 * Usage: test_lm FAKE_LIBCUDA [FAKE_LIBNCCL] [--trace FILE]
 */
#include "fakecuda.h"
#include "fakenccl.h"
#include "ptxgen/pgrt_comm.h"
#include "model_util.h"
#include "ptxgen/pgrt_lm.h"
#include "test.h"

#include <dlfcn.h>
#include <stdint.h>

static fake_fixture fk;
static FILE *trace;

enum { H = 64, I = 96, L = 2, NH = 4, NKV = 2, V = 80, B = 2, S = 8, R = 4 };

static float weight(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)(*s >> 40 & 0xffff) - 32768) / 65536.0f;
}

static void put(pgrt_st_out *t, size_t *n, char **names, float **data, const char *name,
                int rows, int cols, uint64_t *seed)
{
    size_t count = (size_t)rows * (cols ? cols : 1);
    float *f = malloc(count * sizeof *f);
    REQUIRE(f != NULL);
    for (size_t i = 0; i < count; i++)
        f[i] = weight(seed);
    names[*n] = strdup(name);
    t[*n] = (pgrt_st_out){.name = names[*n], .dtype = PGRT_ST_F32, .ndim = cols ? 2 : 1,
                          .shape = {rows, cols}, .data = f};
    data[(*n)++] = f;
}

static void write_model_n(const char *dir, bool llama, int layers)
{
    char name[128], p[4096];
    REQUIRE(write_hf_config(dir, llama, H, I, layers, NH, NKV, V) == 0);
    pgrt_st_out t[64];
    char *names[64];
    float *data[64];
    size_t n = 0;
    uint64_t seed = 1;
    const int hd = H / NH, dims[PGRT_LINEAR_COUNT][2] = {
                               {H, NH * hd}, {H, NKV * hd}, {H, NKV * hd}, {NH * hd, H},
                               {H, I},       {H, I},        {I, H}};
    put(t, &n, names, data, "model.embed_tokens.weight", V, H, &seed);
    put(t, &n, names, data, "model.norm.weight", H, 0, &seed);
    if (llama)
        put(t, &n, names, data, "lm_head.weight", V, H, &seed);
    for (int l = 0; l < layers; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        put(t, &n, names, data, name, H, 0, &seed);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        put(t, &n, names, data, name, H, 0, &seed);
        for (int k = 0; k < PGRT_LINEAR_COUNT; k++) {
            const char *blk = k <= PGRT_LINEAR_O ? "self_attn" : "mlp";
            const char *mn = pgrt_linear_name((pgrt_linear)k);
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, blk, mn);
            put(t, &n, names, data, name, dims[k][1], dims[k][0], &seed);
            if ((!llama && k <= PGRT_LINEAR_V) || (llama && k <= PGRT_LINEAR_O)) {
                snprintf(name, sizeof name, "model.layers.%d.%s.%s.bias", l, blk, mn);
                put(t, &n, names, data, name, dims[k][1], 0, &seed);
            }
        }
    }
    path_in(p, sizeof p, dir, "model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(p, t, n, NULL, NULL, 0), 0);
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }
}

static void write_model(const char *dir, bool llama) { write_model_n(dir, llama, L); }

/* A case's model (layers of them) written and opened, a fresh adapter of
 * rank R on every module, and ids (i * mul + add) mod V. */
typedef struct fixture {
    char dir[4096];
    pgrt_model_files *mf;
    pgrt_adapter *ad;
    int32_t ids[B * S];
} fixture;

static void fixture_open(fixture *f, bool llama, int layers, int mul, int add)
{
    REQUIRE(scratch_dir(f->dir, sizeof f->dir) != NULL);
    write_model_n(f->dir, llama, layers);
    f->mf = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(f->dir, &f->mf), 0);
    pgrt_adapter_config ac = {.r = R, .alpha = 2.0 * R, .targets = (1u << PGRT_LINEAR_COUNT) - 1};
    f->ad = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(pgrt_model_files_config(f->mf), &ac, 7, &f->ad), 0);
    for (int i = 0; i < B * S; i++)
        f->ids[i] = (i * mul + add) % V;
}

static void fixture_close(fixture *f)
{
    pgrt_adapter_destroy(&f->ad);
    pgrt_model_close(&f->mf);
    remove_tree(f->dir);
}

static bool same_launch(const fakecuda_launch *a, const fakecuda_launch *b, bool params)
{
    if (strcmp(a->name, b->name) || memcmp(a->grid, b->grid, sizeof a->grid) ||
        memcmp(a->block, b->block, sizeof a->block) || a->shared != b->shared ||
        a->nparams != b->nparams)
        return false;
    return !params || !memcmp(a->params, b->params, sizeof a->params);
}

static void trace_step(const char *what, int first, int n)
{
    if (!trace)
        return;
    fprintf(trace, "# %s: %d launches\n", what, n);
    for (int i = 0; i < n; i++) {
        const fakecuda_launch *l = fk.launch_at(first + i);
        fprintf(trace, "%s grid %u,%u,%u block %u,%u,%u shared %u:", l->name, l->grid[0],
                l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->shared);
        for (int j = 0; j < l->nparams; j++)
            fprintf(trace, " %llx", (unsigned long long)l->params[j]);
        fputc('\n', trace);
    }
}

/* The cases' params: B x S, AdamW, clipping at 1, head chunks of 7 rows. */
static pgrt_lm_params params_of(const pgrt_model_files *mf, const pgrt_adapter *ad, bool bf16)
{
    return (pgrt_lm_params){.model = mf, .adapter = ad, .batch = B, .seq = S,
                            .dtype = bf16 ? PGRT_LM_BF16 : PGRT_LM_F32, .lr = 1e-3f,
                            .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .max_norm = 1.0f,
                            .head_chunk = 7};
}

static pgrt_lm *make(pgrt_ctx *ctx, const pgrt_model_files *mf, const pgrt_adapter *ad,
                     bool bf16, bool graph, bool profile)
{
    pgrt_lm_params p = params_of(mf, ad, bf16);
    p.graph = graph;
    p.profile = profile;
    pgrt_lm *lm = NULL;
    int rc = pgrt_lm_create(ctx, &p, &lm);
    if (rc)
        fprintf(stderr, "pgrt_lm_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    REQUIRE_INT_EQ(rc, 0);
    return lm;
}

/* The n launches since the last fk.reset, copied (the caller frees them). */
static fakecuda_launch *launches_copy(int n)
{
    fakecuda_launch *l = malloc((size_t)(n > 0 ? n : 1) * sizeof *l);
    REQUIRE(l != NULL);
    for (int i = 0; l && i < n; i++)
        l[i] = *fk.launch_at(i);
    return l;
}

/* The same model graphed: one capture, and its second step replays the n
 * eager launches (kernels, grids and blocks; the buffers are its own). */
static void check_replay(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_model_files *mf,
                         const pgrt_adapter *ad, bool bf16, const int32_t *ids,
                         const fakecuda_launch *eager, int n)
{
    pgrt_lm *lm = make(ctx, mf, ad, bf16, true, false);
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    fk.reset();
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    pgrt_lm_stats st;
    REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
    REQUIRE_INT_EQ(st.captures, 1);
    REQUIRE_INT_EQ(fk.launch_count(), n);
    for (int i = 0; eager && i < n && i < fk.launch_count(); i++)
        REQUIRE(fk.launch_at(i)->replayed && same_launch(fk.launch_at(i), &eager[i], false));
    pgrt_lm_destroy(&lm);
}

static void run_case(pgrt_ctx *ctx, pgrt_stream *s, bool llama, bool bf16)
{
    char what[64];
    snprintf(what, sizeof what, "%s %s", llama ? "llama" : "qwen2", bf16 ? "bf16" : "f32");
    fixture fx;
    fixture_open(&fx, llama, L, 7, 3);
    const pgrt_model_files *mf = fx.mf;
    const pgrt_adapter *ad = fx.ad;
    const int32_t *ids = fx.ids;

    /* eager: two steps, one sequence */
    pgrt_lm *lm = make(ctx, mf, ad, bf16, false, false);
    fk.reset();
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    int n = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    REQUIRE_INT_EQ(fk.launch_count(), 2 * n);
    for (int i = 0; i < n; i++)
        REQUIRE(same_launch(fk.launch_at(i), fk.launch_at(n + i), true));
    pgrt_lm_stats st;
    REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
    REQUIRE_INT_EQ((int)st.launches_per_step, n);
    REQUIRE_INT_EQ(st.eager_steps, 2);
    trace_step(what, 0, n);
    fprintf(stderr, "%s: %d launches a step\n", what, n);
    fakecuda_launch *eager = launches_copy(n);
    pgrt_lm_destroy(&lm);

    /* graphed: the second step replays the eager sequence */
    check_replay(ctx, s, mf, ad, bf16, ids, eager, n);

    /* profiled: every model launch in one kernel's entry of its kind */
    lm = make(ctx, mf, ad, bf16, false, true);
    fk.reset();
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    REQUIRE_INT_EQ(fk.launch_count(), n);
    REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
    REQUIRE(st.kernel_count > 0 && st.kernel_count < PGRT_LM_PROFILE_KERNELS);
    uint64_t model_launches = 0;
    bool att = false, ce = false;
    for (size_t k = 0; k < st.kernel_count; k++) {
        const pgrt_lm_kernel_time *kt = &st.kernels[k];
        model_launches += kt->launches;
        for (size_t j = 0; j < k; j++)
            REQUIRE(strcmp(st.kernels[j].name, kt->name) || st.kernels[j].kind != kt->kind);
        if (strstr(kt->name, "attention")) {
            att = true;
            REQUIRE_INT_EQ(kt->kind, PGRT_LM_TIME_ATTENTION);
        }
        if (strstr(kt->name, "cross_entropy")) {
            ce = true;
            REQUIRE_INT_EQ(kt->kind, PGRT_LM_TIME_CE);
        }
        if (strstr(kt->name, "rms_norm") || strstr(kt->name, "rope") ||
            strstr(kt->name, "swiglu") || strstr(kt->name, "embedding"))
            REQUIRE_INT_EQ(kt->kind, PGRT_LM_TIME_REST);
        if (trace)
            fprintf(trace, "# profile %s: %s kind %d launches %llu\n", what, kt->name, kt->kind,
                    (unsigned long long)kt->launches);
    }
    REQUIRE(att && ce);
    REQUIRE(model_launches > 0 && model_launches < (uint64_t)n);
    pgrt_lm_destroy(&lm);

    free(eager);
    fixture_close(&fx);
}

/* Attention forward launches of the last step (fk.reset before it). */
static int att_forwards(void)
{
    int n = 0;
    for (int i = 0; i < fk.launch_count(); i++)
        n += !strncmp(fk.launch_at(i)->name, "attention", 9) && strstr(fk.launch_at(i)->name, "forward");
    return n;
}

/* Activation recompute: the recomputed layers run their forward again in
 * the backward (one attention forward more each) from a smaller arena;
 * AUTO takes the fewest that fit max_memory_gib; a plan that cannot fit
 * is refused with its numbers before anything is allocated. */
static void recompute_case(pgrt_ctx *ctx, pgrt_stream *s, bool bf16)
{
    enum { LR = 4 }; /* layers: room for some recomputed, some kept */
    fixture fx;
    fixture_open(&fx, false, LR, 7, 3);
    const pgrt_model_files *mf = fx.mf;
    const pgrt_adapter *ad = fx.ad;
    const int32_t *ids = fx.ids;

    pgrt_lm_params p = params_of(mf, ad, bf16);
    uint64_t none = 0, all = 0, bytes = 0;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &none), 0);
    p.recompute = PGRT_LM_RECOMPUTE_LAYERS;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &all), 0);
    REQUIRE(all < none);
    p.recompute = PGRT_LM_RECOMPUTE_AUTO;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), 0); /* no bound: nothing recomputed */
    REQUIRE_INT_EQ((long long)bytes, (long long)none);
    p.max_memory_gib = (double)all / 1073741824.0;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), 0);
    REQUIRE_INT_EQ((long long)bytes, (long long)all);

    int fwd[3] = {0}, recomputed[3] = {0};
    uint64_t arena[3] = {0};
    size_t fb = 0, tb = 0;
    for (int k = 0; k < 3; k++) {
        p.recompute = k == 0 ? PGRT_LM_RECOMPUTE_NONE : k == 1 ? PGRT_LM_RECOMPUTE_LAYERS
                                                             : PGRT_LM_RECOMPUTE_AUTO;
        /* AUTO: room for a plan between the two, so some layers only */
        REQUIRE_INT_EQ(pgrt_ctx_mem_info(ctx, &fb, &tb), 0);
        p.max_memory_gib = k == 2 ? ((double)(tb - fb) + (double)(none + all) / 2) / 1073741824.0
                                  : 0;
        pgrt_lm *lm = NULL;
        REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), 0);
        fk.reset();
        REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
        fwd[k] = att_forwards();
        pgrt_lm_stats st;
        REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
        recomputed[k] = st.recompute_layers;
        arena[k] = st.arena_bytes;
        pgrt_lm_destroy(&lm);
    }
    REQUIRE_INT_EQ(recomputed[0], 0);
    REQUIRE_INT_EQ(recomputed[1], LR);
    REQUIRE(recomputed[2] > 1 && recomputed[2] < LR); /* one alone would save nothing */
    REQUIRE_INT_EQ(fwd[0], LR);
    REQUIRE_INT_EQ(fwd[1], 2 * LR);
    REQUIRE_INT_EQ(fwd[2], LR + recomputed[2]);
    REQUIRE(arena[1] < arena[2] && arena[2] < arena[0]);

    /* nothing fits: refused with the numbers */
    p.max_memory_gib = 1e-3;
    pgrt_lm *lm = NULL;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), PGRT_ENOMEM);
    REQUIRE_CONTAINS(pgrt_last_message(), "with every layer recomputed");
    REQUIRE_CONTAINS(pgrt_last_message(), "max_memory_gib 0.00");
    REQUIRE(lm == NULL);
    p.recompute = (pgrt_lm_recompute)7;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "recompute 7");
    p.recompute = PGRT_LM_RECOMPUTE_AUTO;
    p.max_memory_gib = -1;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), PGRT_EINVAL);

    /* long rows: bf16 to PGRT_LM_MAX_SEQ, f32 to 16384, and every
     * activation under 2^32 elements (here [tokens, I = 96]) */
    p = params_of(mf, ad, bf16);
    p.batch = 1;
    p.seq = PGRT_LM_MAX_SEQ + 1;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "at most 1000 rows of 131072");
    p.seq = 16385;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), bf16 ? 0 : PGRT_ERANGE);
    if (!bf16)
        REQUIRE_CONTAINS(pgrt_last_message(), "f32 takes at most 16384 tokens a row");
    p.seq = PGRT_LM_MAX_SEQ;
    p.batch = 1000;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), bf16 ? "at most 44739242 tokens a step for this model"
                                               : "f32 takes at most 16384");
    p.batch = 1;
    p.seq = S;
    p.head_chunk = 60000000; /* x V = 80: 4.8e9 logits */
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "logits hold 2^32 elements or more");
    fprintf(stderr, "recompute %s: %d attention forwards a step kept, %d recomputed, %d with %d "
            "of %d layers; arena %llu, %llu, %llu bytes\n", bf16 ? "bf16" : "f32", fwd[0], fwd[1],
            fwd[2], recomputed[2], LR, (unsigned long long)arena[0], (unsigned long long)arena[1],
            (unsigned long long)arena[2]);
    fixture_close(&fx);
}

static float param_f32(const fakecuda_launch *l, int i)
{
    uint32_t u = (uint32_t)l->params[i];
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A step's launches: eager, twice the same; the count it reports. */
static int stable_step(pgrt_lm *lm, pgrt_stream *s, const int32_t *ids)
{
    fk.reset();
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    int n = fk.launch_count();
    REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), 0);
    REQUIRE_INT_EQ(fk.launch_count(), 2 * n);
    for (int i = 0; i < n && i + n < fk.launch_count(); i++)
        REQUIRE(same_launch(fk.launch_at(i), fk.launch_at(n + i), true));
    pgrt_lm_stats st;
    REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
    REQUIRE_INT_EQ((int)st.launches_per_step, n);
    return n;
}

/* qwen2, r 8 and lora_alpha 16 (scale 2) but for k_proj r 4 (scale 4; in
 * bf16 on the thin kernels beside the fused pairs), down_proj r 72 (in f32
 * past the thin kernels: the GEMM path), v_proj alpha 32 (scale 4) and
 * layer 1's up_proj alpha 4 (scale 0.5). */
static void pattern_case(pgrt_ctx *ctx, pgrt_stream *s, bool bf16)
{
    char dir[4096], what[64];
    snprintf(what, sizeof what, "qwen2 %s, patterns", bf16 ? "bf16" : "f32");
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    write_model(dir, false);
    pgrt_model_files *mf = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(dir, &mf), 0);
    const pgrt_model_config *mc = pgrt_model_files_config(mf);
    pgrt_adapter_config ac = {.r = 8, .alpha = 16, .targets = (1u << PGRT_LINEAR_COUNT) - 1};
    pgrt_adapter_config plain = ac, same = ac;
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, false, "k_proj", 4), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, false, "down_proj", 72), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, true, "v_proj", 32), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&ac, true, "model.layers.1.mlp.up_proj", 4), 0);
    /* patterns that give every pair what it would have anyway */
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&same, false, "q_proj", 8), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&same, true, "layers.1.self_attn.o_proj", 16), 0);
    pgrt_adapter *ad = NULL, *pd = NULL, *sd = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(mc, &ac, 7, &ad), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(mc, &plain, 7, &pd), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(mc, &same, 7, &sd), 0);
    if (!ad || !pd || !sd)
        goto out;
    int32_t ids[B * S];
    for (int i = 0; i < B * S; i++)
        ids[i] = (i * 5 + 1) % V;

    pgrt_lm *lm = make(ctx, mf, ad, bf16, false, false);
    int n = stable_step(lm, s, ids);
    trace_step(what, 0, n);
    fprintf(stderr, "%s: %d launches a step\n", what, n);
    /* the bf16 copies of the LoRA weights (fused pairs read them): one
     * launch a stretch of one scale, in the layout's order (a group's A's,
     * then its B's), tiling the parameters */
    const float s72 = (float)(16.0 / 72);
    const float casts[] = {2, 4, 2, 4, 2, s72, 2, 4, 2, 4, 2, 0.5f, 2, 0.5f, s72};
    int nc = 0;
    uint64_t next = 0, total = 0, want_total = 0;
    for (size_t i = 0; i < ad->count; i++)
        want_total += (uint64_t)ad->w[i].r * (uint64_t)(ad->w[i].in + ad->w[i].out);
    float proj[64];
    int np = 0;
    for (int i = 0; i < n; i++) {
        const fakecuda_launch *l = fk.launch_at(i);
        if (!strcmp(l->name, "cast_f32_to_bf16_scaled2")) {
            REQUIRE(nc == 0 || l->params[0] == next);
            if (nc < (int)(sizeof casts / sizeof casts[0]))
                REQUIRE(param_f32(l, 4) == casts[nc]);
            next = l->params[0] + 4 * l->params[3];
            total += l->params[3];
            nc++;
        }
        if (!strncmp(l->name, "lora_proj_", 10) && np < 64)
            proj[np++] = param_f32(l, 8);
    }
    int n2 = 0, n4 = 0, nh = 0;
    for (int i = 0; i < np; i++) {
        n2 += proj[i] == 2;
        n4 += proj[i] == 4;
        nh += proj[i] == 0.5f;
    }
    if (bf16) {
        REQUIRE_INT_EQ(nc, (int)(sizeof casts / sizeof casts[0]));
        REQUIRE(total == want_total);
        /* k_proj alone on the thin kernels: forward and backward, two layers */
        REQUIRE_INT_EQ(np, 4);
        REQUIRE_INT_EQ(n4, 4);
    } else {
        REQUIRE_INT_EQ(nc, 0);
        /* q | k | v (three runs), o, gate+up stacked in layer 0 but not in
         * layer 1: 11 forward projections; one a pair backward but down's */
        REQUIRE_INT_EQ(np, 23);
        REQUIRE(n2 == 13 && n4 == 8 && nh == 2);
    }
    fakecuda_launch *eager = launches_copy(n);
    pgrt_lm_destroy(&lm);

    /* graphed: the second step replays the eager sequence */
    check_replay(ctx, s, mf, ad, bf16, ids, eager, n);
    free(eager);

    /* patterns that change nothing: the launches of none */
    lm = make(ctx, mf, pd, bf16, false, false);
    int np0 = stable_step(lm, s, ids);
    eager = launches_copy(np0);
    pgrt_lm_destroy(&lm);
    lm = make(ctx, mf, sd, bf16, false, false);
    REQUIRE_INT_EQ(stable_step(lm, s, ids), np0);
    for (int i = 0; eager && i < np0 && i < fk.launch_count(); i++)
        REQUIRE(same_launch(fk.launch_at(i), &eager[i], false));
    REQUIRE(np0 != n);
    pgrt_lm_destroy(&lm);
    free(eager);
out:
    pgrt_adapter_destroy(&ad);
    pgrt_adapter_destroy(&pd);
    pgrt_adapter_destroy(&sd);
    pgrt_model_close(&mf);
    remove_tree(dir);
}

static fakenccl_reset_fn fn_reset;
static fakenccl_count_fn fn_count;
static fakenccl_call_at_fn fn_at;

/* The calls named `name` of datatype `type` (-1: any) since the reset. */
static int calls_of(const char *name, int type, const fakenccl_call **out, int cap)
{
    int n = 0;
    for (int i = 0; i < fn_count(); i++)
        if (!strcmp(fn_at(i)->name, name) && (type < 0 || fn_at(i)->datatype == type) && n < cap)
            out[n++] = fn_at(i);
    return n;
}

/* A sharded optimizer (ZeRO-1) as rank 0 of the fake's 2: one
 * reduce-scatter of the gradients in place, the clip's partial sums summed,
 * one all-gather of the parameters in place, all on the step's stream;
 * the state file is the unsharded one, both ways. */
static void shard_case(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_model_files *mf,
                       const pgrt_adapter *ad, pgrt_comm *c, bool bf16, size_t nlora,
                       const int32_t *ids, const char *dir)
{
    pgrt_lm_params p = params_of(mf, ad, bf16);
    p.shard_optimizer = true;
    pgrt_lm *lm = NULL;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "shard_optimizer needs a comm");
    p.comm = c;
    fn_reset();
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), 0);
    /* create compares the ranks' shards: a max and a min of three counts */
    const fakenccl_call *k[8];
    REQUIRE_INT_EQ(calls_of("ncclAllReduce", 8, k, 8), 2);
    REQUIRE_INT_EQ((int)k[0]->count, 3);
    REQUIRE(k[0]->op != k[1]->op);

    pgrt_lm_batch b = {.ids = ids};
    pgrt_lm_result r;
    fn_reset();
    REQUIRE_INT_EQ(pgrt_lm_train(lm, s, &b, &r), 0);
    REQUIRE(r.updated);
    const fakenccl_call *rs[4], *ag[4], *ar[4];
    REQUIRE_INT_EQ(calls_of("ncclReduceScatter", -1, rs, 4), 1);
    REQUIRE_INT_EQ(calls_of("ncclAllGather", -1, ag, 4), 1);
    REQUIRE_INT_EQ(calls_of("ncclAllReduce", 7, ar, 4), 1); /* the partial sums only */
    size_t piece = rs[0]->count;
    REQUIRE(piece % 64 == 0 && 2 * piece >= nlora && 2 * (piece - 64) < nlora);
    REQUIRE_INT_EQ(rs[0]->datatype, 7);
    REQUIRE_INT_EQ(rs[0]->op, 0);
    REQUIRE(rs[0]->recv == rs[0]->send); /* rank 0's slice: in place */
    REQUIRE_INT_EQ(ag[0]->datatype, 7);
    REQUIRE_INT_EQ((long long)ag[0]->count, (long long)piece);
    REQUIRE(ag[0]->send == ag[0]->recv);
    REQUIRE(ag[0]->stream == rs[0]->stream && ar[0]->stream == rs[0]->stream);
    REQUIRE(ar[0]->count >= 1 && ar[0]->count < piece);
    /* in order: the gradients, the clip's sums, the parameters */
    REQUIRE(rs[0] < ar[0] && ar[0] < ag[0]);

    /* the state: gathered by every rank (a NULL path writes nothing), the
     * file the unsharded run's */
    char path[4200];
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    fn_reset();
    REQUIRE_INT_EQ(pgrt_lm_state_save(lm, s, NULL), 0);
    REQUIRE_INT_EQ(calls_of("ncclAllGather", 7, ag, 4), 2);
    REQUIRE_INT_EQ((long long)ag[0]->count, (long long)piece);
    REQUIRE_INT_EQ(pgrt_lm_state_save(lm, s, path), 0);
    pgrt_lm_params q = params_of(mf, ad, bf16);
    q.comm = c;
    pgrt_lm *whole = NULL;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &q, &whole), 0);
    REQUIRE_INT_EQ(pgrt_lm_state_load(whole, s, path), 0);
    REQUIRE_INT_EQ(pgrt_lm_state_save(whole, s, NULL), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_lm_state_save(whole, s, path), 0);
    REQUIRE_INT_EQ(pgrt_lm_state_load(lm, s, path), 0);
    pgrt_lm_destroy(&whole);
    remove(path);
    pgrt_lm_destroy(&lm);

    /* graphed and accumulating: the capture takes the collectives in */
    p.graph = true;
    p.grad_accum = 2;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), 0);
    fn_reset();
    for (int i = 0; i < 6; i++)
        REQUIRE_INT_EQ(pgrt_lm_train(lm, s, &b, NULL), 0);
    REQUIRE_INT_EQ(calls_of("ncclReduceScatter", -1, rs, 4), 1); /* replays are the graph's */
    pgrt_lm_stats st;
    REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
    REQUIRE_INT_EQ(st.captures, 1);
    REQUIRE_INT_EQ(st.capture_failures, 0);
    pgrt_lm_destroy(&lm);
    fprintf(stderr, "sharded optimizer %s: slices of %zu of %zu parameters, one reduce-scatter "
            "and one all-gather a step, the state file unsharded\n", bf16 ? "bf16" : "f32", piece,
            nlora);
}

static void comm_case(pgrt_ctx *ctx, pgrt_stream *s, bool bf16)
{
    fixture fx;
    fixture_open(&fx, false, L, 5, 1);
    const pgrt_model_files *mf = fx.mf;
    const pgrt_adapter *ad = fx.ad;
    const int32_t *ids = fx.ids;
    const char *dir = fx.dir;
    size_t nlora = 0;
    for (size_t i = 0; i < ad->count; i++)
        nlora += (size_t)ad->w[i].r * (size_t)(ad->w[i].in + ad->w[i].out);
    const uint64_t own = (uint64_t)B * (S - 1);

    /* rank 0 of 2: the fake's other rank holds the same data */
    pgrt_comm_params cp = {.rank = 0, .world = 2, .timeout_s = 5};
    REQUIRE_INT_EQ(pgrt_comm_id_new(ctx, &cp.id), 0);
    pgrt_comm *c = NULL;
    REQUIRE_INT_EQ(pgrt_comm_create(ctx, &cp, &c), 0);

    for (int accum = 1; accum <= 2; accum++) {
        pgrt_lm_params p = params_of(mf, ad, bf16);
        p.grad_accum = accum;
        p.comm = c;
        pgrt_lm *lm = NULL;
        REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), 0);
        REQUIRE_INT_EQ(pgrt_lm_step(lm, s, ids, NULL, NULL), PGRT_ESTATE);
        pgrt_lm_batch b = {.ids = ids};
        REQUIRE_INT_EQ(pgrt_lm_train(lm, NULL, &b, NULL), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "needs a stream");
        pgrt_lm_result r;
        fn_reset();
        for (int m = 0; m < accum; m++)
            REQUIRE_INT_EQ(pgrt_lm_train(lm, s, &b, &r), 0);
        REQUIRE(r.updated);
        /* each micro-batch: its target count summed over the ranks, then
         * its loss sum and targets */
        const fakenccl_call *host[8];
        int nh = 0;
        for (int i = 0; i < fn_count(); i++)
            if (!strcmp(fn_at(i)->name, "ncclAllReduce") && fn_at(i)->datatype == 8 && nh < 8)
                host[nh++] = fn_at(i);
        REQUIRE_INT_EQ(nh, 2 * accum);
        REQUIRE_INT_EQ((int)host[0]->count, 1);
        REQUIRE_INT_EQ((int)host[1]->count, 2);
        REQUIRE_INT_EQ((int)r.targets, (int)(2 * own));
        /* the gradients: f32 sums, in place, on one stream that is not the
         * step's, together every LoRA parameter once */
        const fakenccl_call *g[64];
        int ng = 0;
        for (int i = 0; i < fn_count(); i++)
            if (!strcmp(fn_at(i)->name, "ncclAllReduce") && fn_at(i)->datatype == 7 && ng < 64)
                g[ng++] = fn_at(i);
        REQUIRE_INT_EQ(ng, accum == 1 ? L : 1);
        size_t total = 0;
        for (int i = 0; i < ng; i++) {
            REQUIRE(g[i]->send == g[i]->recv);
            REQUIRE_INT_EQ(g[i]->op, 0);
            REQUIRE(g[i]->stream == g[0]->stream);
            total += g[i]->count;
            /* the last layer first, each slice ending where the one after
             * it (the layer above) begins */
            if (i > 0)
                REQUIRE((const char *)g[i]->send + g[i]->count * 4 == (const char *)g[i - 1]->send);
        }
        REQUIRE_INT_EQ((long long)total, (long long)nlora);
        pgrt_lm_destroy(&lm);
    }

    /* graphed: the capture takes the second stream's sums in */
    pgrt_lm_params p = params_of(mf, ad, bf16);
    p.graph = true;
    p.comm = c;
    pgrt_lm *lm = NULL;
    REQUIRE_INT_EQ(pgrt_lm_create(ctx, &p, &lm), 0);
    pgrt_lm_batch b = {.ids = ids, .step_targets = 2 * own};
    for (int i = 0; i < 3; i++)
        REQUIRE_INT_EQ(pgrt_lm_train(lm, s, &b, NULL), 0);
    pgrt_lm_stats st;
    REQUIRE_INT_EQ(pgrt_lm_stats_get(lm, &st), 0);
    REQUIRE_INT_EQ(st.captures, 1);
    REQUIRE_INT_EQ(st.capture_failures, 0);
    pgrt_lm_destroy(&lm);
    fprintf(stderr, "data parallel %s: %d gradient sums a step, the count and loss summed\n",
            bf16 ? "bf16" : "f32", L);
    shard_case(ctx, s, mf, ad, c, bf16, nlora, ids, dir);

    pgrt_comm_destroy(&c);
    fixture_close(&fx);
}

int main(int argc, char **argv)
{
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_LOCAL,
                      "FAKE_LIBCUDA [FAKE_LIBNCCL] [--trace FILE]");
    const char *nccl = argc >= 3 && strcmp(argv[2], "--trace") ? argv[2] : NULL;
    int at = nccl ? 3 : 2;
    if (argc >= at + 2 && !strcmp(argv[at], "--trace") && !(trace = fopen(argv[at + 1], "w"))) {
        perror(argv[at + 1]);
        return 1;
    }
    pgrt_ctx *ctx = NULL;
    pgrt_ctx_params cp = {fk.path, 0};
    int rc = pgrt_ctx_create(&ctx, &cp);
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return 1;
    }
    pgrt_stream *s = NULL;
    REQUIRE_INT_EQ(pgrt_stream_create(ctx, &s), 0);
    for (int llama = 0; llama < 2; llama++)
        for (int bf16 = 0; bf16 < 2; bf16++)
            run_case(ctx, s, llama, bf16);
    for (int bf16 = 0; bf16 < 2; bf16++)
        pattern_case(ctx, s, bf16);
    for (int bf16 = 0; bf16 < 2; bf16++)
        recompute_case(ctx, s, bf16);
    if (nccl) {
        void *h = dlopen(nccl, RTLD_NOW | RTLD_LOCAL);
        REQUIRE(h != NULL);
        *(void **)&fn_reset = dlsym(h, "fakenccl_reset");
        *(void **)&fn_count = dlsym(h, "fakenccl_call_count");
        *(void **)&fn_at = dlsym(h, "fakenccl_call_at");
        REQUIRE(fn_reset && fn_count && fn_at);
        setenv("PGRT_LIBNCCL", nccl, 1);
        unsetenv("FAKENCCL");
        for (int bf16 = 0; bf16 < 2; bf16++)
            comm_case(ctx, s, bf16);
    }
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    if (trace)
        fclose(trace);
    TEST_DONE();
}
