/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model DIR: LoRA fine-tuning of a Hugging Face Qwen2/LLaMA
 * checkpoint (pgrt_lm.h), a thin command line over the model layer.
 *
 * Every input is read and checked (config, weights, adapter, tokens, the
 * device memory the run needs), every option in the type and range it is
 * used in, and every destination for writability, before the first
 * launch; a problem is one line on stderr and exit 2, with no output file
 * written. Outputs are written whole when the run ends, each on its own:
 * adapters and gradients as atomic pairs (pgrt_adapter_save), the log by
 * a rename.
 */
#include "train_hf.h"
#include "train_paths.h"

#include "pgrt_lm.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_USAGE 2
#define EXIT_FAIL 1

/* The ranges of the float options (docs/model.md). 0 is allowed for lr
 * (nothing moves: loss and gradients only), max-norm (no clipping) and
 * weight decay. Above: lr 1 and weight decay 1 (lr x wd <= 1 keeps the
 * decay from flipping a weight's sign); below: 1e-12, under which an AdamW
 * step is lost to f32 rounding of any weight above 1e-4 and which keeps
 * lr x wd >= 1e-24, a normal float. alpha: the LoRA scale alpha / rank
 * (rank 1 to 4096) is then between 2.4e-10 and 1e6. */
#define LR_MIN 1e-12
#define LR_MAX 1.0
#define MAX_NORM_MIN 1e-12
#define MAX_NORM_MAX 1e12
#define WD_MIN 1e-12
#define WD_MAX 1.0
#define ALPHA_MIN 1e-6
#define ALPHA_MAX 1e6

static const char usage[] =
    "usage: ptxgen-train --model DIR [--adapter DIR] --tokens FILE --batch B --seq S --steps N\n"
    "                    [--lr X] [--max-norm X] [--weight-decay X] [--dtype bf16|f32]\n"
    "                    [--mode eager|graph|both] [--save-adapter DIR] [--save-grads DIR]\n"
    "                    [--log-json FILE] [--seed N] [--rank R] [--alpha A]\n"
    "                    [--targets q,k,v,o,gate,up,down] [--head-chunk ROWS]\n"
    "                    [--profile]\n"
    "ranges: --lr and --weight-decay 0 or 1e-12 to 1; --max-norm 0 (no clipping) or 1e-12\n"
    "        to 1e12; --alpha 1e-6 to 1e6; --rank 1 to 4096; --batch 1 to 1000; --seq 2 to\n"
    "        16384; --steps 1 to 1e8\n"
    "outputs: checked writable before the first step; none may name another output or an\n"
    "        input (the model's files, the adapter's, the tokens), except --save-adapter\n"
    "        naming the --adapter directory: replaced in place, as one atomic pair\n";

typedef struct opts {
    const char *model, *adapter, *tokens, *save_adapter, *save_grads, *log_json;
    long long batch, seq, steps, seed, rank, head_chunk;
    double lr, max_norm, weight_decay, alpha;
    pgrt_lm_dtype dtype;
    bool profile;
    int modes; /* 1 eager, 2 graph, 3 both */
    unsigned targets;
} opts;

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static int bad(const char *fmt, ...)
{
    /* the line echoes arguments: escaped whole, as the model layer's
     * messages are (pg_text_escape) */
    char raw[8192], safe[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    pg_text_escape(safe, sizeof safe, raw);
    fprintf(stderr, "ptxgen-train: %s\n", safe);
    return EXIT_USAGE;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int int_opt(const char *o, const char *v, long long lo, long long hi, long long *out)
{
    if (!v || !*v)
        return bad("%s needs a value", o);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno)
        return bad("%s: '%s' is not an integer", o, v);
    if (x < lo || x > hi)
        return bad("%s %s is out of range (%lld to %lld)", o, v, lo, hi);
    *out = x;
    return 0;
}

/* A value the run uses as a float (pgrt_lm_params, the LoRA scale): 0 where
 * zero is allowed, else within [lo, hi]. Both bounds are normal floats far
 * from the ends of the f32 range, so that a value in range is finite as a
 * float and neither it nor the products the step forms with it (lr x
 * weight decay, alpha / rank) flush to zero or go subnormal: --lr 1e-50
 * would silently train with 0, --lr 1e300 fail after the model is on the
 * device, --alpha 1e300 give an infinite scale. */
static int float_opt(const char *o, const char *v, bool zero_ok, double lo, double hi,
                     double *out)
{
    if (!v || !*v)
        return bad("%s needs a value", o);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* ERANGE with a finite x is an underflow: a value written non-zero that
     * rounds to 0 or a subnormal double, refused by the range below */
    bool tiny = errno == ERANGE && isfinite(x);
    if (*end || (errno && !tiny) || !isfinite(x))
        return bad("%s: '%s' is not a finite number", o, v);
    if (!(zero_ok && x == 0 && !tiny) && !(x >= lo && x <= hi)) {
        if (zero_ok)
            return bad("%s %s is out of range (0, or %g to %g)", o, v, lo, hi);
        return bad("%s %s is out of range (%g to %g)", o, v, lo, hi);
    }
    *out = x;
    return 0;
}

static int targets_opt(const char *v, unsigned *out)
{
    if (!v || !*v)
        return bad("--targets needs a value");
    static const char *const shortn[PGRT_LINEAR_COUNT] = {"q", "k", "v", "o", "gate", "up", "down"};
    unsigned t = 0;
    const char *p = v;
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
            const char *full = pgrt_linear_name((pgrt_linear)i);
            if ((strlen(shortn[i]) == n && !strncmp(p, shortn[i], n)) ||
                (strlen(full) == n && !strncmp(p, full, n)))
                found = i;
        }
        if (found < 0)
            return bad("--targets: '%.*s' is not one of q,k,v,o,gate,up,down", (int)n, p);
        t |= 1u << found;
        p += n;
        if (*p == ',')
            p++;
    }
    *out = t;
    return 0;
}

static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = o->seq = o->steps = -1;
    o->lr = 1e-3;
    o->max_norm = 1.0;
    o->weight_decay = 0.01;
    o->dtype = PGRT_LM_BF16;
    o->modes = 1;
    o->rank = 16;
    o->alpha = 32;
    o->targets = (1u << PGRT_LINEAR_COUNT) - 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
#define STR(name, field)                                                       \
    if (!strcmp(a, name)) {                                                    \
        if (!v)                                                                \
            return bad("%s needs a value", a);                                 \
        o->field = v;                                                          \
        i++;                                                                   \
        continue;                                                              \
    }
        STR("--model", model)
        STR("--adapter", adapter)
        STR("--tokens", tokens)
        STR("--save-adapter", save_adapter)
        STR("--save-grads", save_grads)
        STR("--log-json", log_json)
#undef STR
        if (!strcmp(a, "--batch"))
            rc = int_opt(a, v, 1, 1000, &o->batch);
        else if (!strcmp(a, "--seq"))
            rc = int_opt(a, v, 2, 16384, &o->seq);
        else if (!strcmp(a, "--steps"))
            rc = int_opt(a, v, 1, 100000000, &o->steps);
        else if (!strcmp(a, "--seed"))
            rc = int_opt(a, v, 0, INT64_MAX, &o->seed);
        else if (!strcmp(a, "--rank"))
            rc = int_opt(a, v, 1, 4096, &o->rank);
        else if (!strcmp(a, "--head-chunk"))
            rc = int_opt(a, v, 1, 1 << 20, &o->head_chunk);
        else if (!strcmp(a, "--lr"))
            rc = float_opt(a, v, true, LR_MIN, LR_MAX, &o->lr);
        else if (!strcmp(a, "--max-norm"))
            rc = float_opt(a, v, true, MAX_NORM_MIN, MAX_NORM_MAX, &o->max_norm);
        else if (!strcmp(a, "--weight-decay"))
            rc = float_opt(a, v, true, WD_MIN, WD_MAX, &o->weight_decay);
        else if (!strcmp(a, "--alpha"))
            rc = float_opt(a, v, false, ALPHA_MIN, ALPHA_MAX, &o->alpha);
        else if (!strcmp(a, "--targets"))
            rc = targets_opt(v, &o->targets);
        else if (!strcmp(a, "--profile")) {
            o->profile = true;
            continue;
        } else if (!strcmp(a, "--dtype")) {
            if (v && !strcmp(v, "bf16"))
                o->dtype = PGRT_LM_BF16;
            else if (v && !strcmp(v, "f32"))
                o->dtype = PGRT_LM_F32;
            else
                return bad("--dtype takes bf16 or f32");
        } else if (!strcmp(a, "--mode")) {
            if (v && !strcmp(v, "eager"))
                o->modes = 1;
            else if (v && !strcmp(v, "graph"))
                o->modes = 2;
            else if (v && !strcmp(v, "both"))
                o->modes = 3;
            else
                return bad("--mode takes eager, graph or both");
        } else
            return bad("unknown option '%s' (--help lists them)", a);
        if (rc)
            return rc;
        i++;
    }
    if (!o->model || !o->tokens || o->batch < 0 || o->seq < 0 || o->steps < 0)
        return bad("--model, --tokens, --batch, --seq and --steps are required");
    return 0;
}

/* The per-step figures of one run. */
typedef struct run_log {
    double *loss, *ms;
    float *norm;
} run_log;

/* An adapter of the same shape as src, for gradients. */
static int clone_shape(const pgrt_hf_config *mc, const pgrt_adapter *src, pgrt_adapter **out)
{
    return pgrt_adapter_init(mc, &src->cfg, 0, out);
}

static int by_ms_desc(const void *a, const void *b)
{
    double x = ((const pgrt_lm_kernel_time *)a)->ms, y = ((const pgrt_lm_kernel_time *)b)->ms;
    return (x < y) - (x > y);
}

/* --profile's table: each kernel's time a step, the largest first. */
static void print_kernel_times(pgrt_lm_stats *st, double steps)
{
    static const char *const kinds[PGRT_LM_TIME_COUNT] = {"gemm", "attention", "ce", "rest",
                                                          "lora"};
    qsort(st->kernels, st->kernel_count, sizeof st->kernels[0], by_ms_desc);
    fprintf(stderr, "%-32s %-9s %9s %9s %10s\n", "kernel", "kind", "ms/step", "launches",
            "us/launch");
    for (size_t i = 0; i < st->kernel_count; i++) {
        const pgrt_lm_kernel_time *k = &st->kernels[i];
        fprintf(stderr, "%-32s %-9s %9.3f %9.0f %10.1f\n", k->name,
                (unsigned)k->kind < PGRT_LM_TIME_COUNT ? kinds[k->kind] : "?", k->ms / steps,
                (double)k->launches / steps, k->launches ? 1e3 * k->ms / (double)k->launches : 0.0);
    }
}

static int run(pgrt_ctx *ctx, const opts *o, const pgrt_model_files *mf, const pgrt_adapter *ad,
               const pgrt_tokens *tok, bool graph, run_log *lg, pgrt_adapter *final,
               pgrt_adapter *grads, int *exit_code)
{
    pgrt_lm_params p = {
        .model = mf,
        .adapter = ad,
        .batch = (int)o->batch,
        .seq = (int)o->seq,
        .dtype = o->dtype,
        .lr = (float)o->lr,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = (float)o->weight_decay,
        .max_norm = (float)o->max_norm,
        .graph = graph,
        .keep_grads = grads != NULL,
        .head_chunk = (int)o->head_chunk,
        .profile = o->profile,
    };
    pgrt_lm *lm = NULL;
    pgrt_stream *s = NULL;
    int rc = pgrt_lm_create(ctx, &p, &lm);
    if (rc) {
        *exit_code = rc == PGRT_ENOMEM || rc == PGRT_ERANGE || rc == PGRT_EINVAL ? EXIT_USAGE
                                                                                  : EXIT_FAIL;
        return rc;
    }
    *exit_code = EXIT_FAIL;
    size_t fb = 0, tb = 0;
    if (!pgrt_ctx_mem_info(ctx, &fb, &tb))
        fprintf(stderr, "device memory in use after create: %.2f GiB of %.2f GiB (a step "
                        "allocates nothing)\n",
                (tb - fb) / 1073741824.0, tb / 1073741824.0);
    size_t n = (size_t)o->batch * (size_t)o->seq;
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) {
        pgrt_lm_destroy(&lm);
        return PGRT_ENOMEM;
    }
    if ((rc = pgrt_stream_create(ctx, &s)))
        goto out;
    for (long long i = 0; i < o->steps; i++) {
        pgrt_tokens_batch(tok, (uint64_t)i, n, ids);
        double t0 = now_ms(), loss = 0;
        float norm = 0;
        if ((rc = pgrt_lm_step(lm, s, ids, &loss, &norm)))
            goto out;
        double ms = now_ms() - t0;
        lg->loss[i] = loss;
        lg->norm[i] = norm;
        lg->ms[i] = ms;
        if (i == 0 && grads && (rc = pgrt_lm_grads_get(lm, grads)))
            goto out;
        if (!isfinite(loss)) {
            rc = PGRT_EINVAL;
            fprintf(stderr, "ptxgen-train: step %lld: the loss is %g\n", i + 1, loss);
            goto out;
        }
        fprintf(stderr, "%s step %lld/%lld  loss %.6f  grad_norm %.4g  %.1f ms  %.0f tokens/s\n",
                graph ? "graph" : "eager", i + 1, o->steps, loss, (double)norm, ms,
                (double)n / ms * 1e3);
    }
    if (final && (rc = pgrt_lm_adapter_get(lm, final)))
        goto out;
    pgrt_lm_stats st;
    if (!pgrt_lm_stats_get(lm, &st))
        fprintf(stderr,
                "%s: %llu eager and %llu graphed steps, %llu captures (%llu failed); arena %.2f "
                "GiB, weights %.2f GiB, LoRA state %.1f MiB\n",
                graph ? "graph" : "eager", (unsigned long long)st.eager_steps,
                (unsigned long long)st.graph_steps, (unsigned long long)st.captures,
                (unsigned long long)st.capture_failures, st.arena_bytes / 1073741824.0,
                st.weight_bytes / 1073741824.0, st.lora_bytes / 1048576.0);
    if (o->profile && !graph) {
        double *t = st.time_ms, all = t[0] + t[1] + t[2] + t[3] + t[4];
        double ns = (double)o->steps;
        fprintf(stderr,
                "time split over %lld steps (GPU time of each launch): GEMMs %.1f ms (%.0f%%; "
                "of them f32 LoRA products %.1f ms), attention %.1f ms (%.0f%%), cross-entropy "
                "%.1f ms (%.0f%%), rest %.1f ms (%.0f%%) a step\n",
                o->steps, (t[0] + t[4]) / ns, 100 * (t[0] + t[4]) / all, t[4] / ns, t[1] / ns,
                100 * t[1] / all, t[2] / ns, 100 * t[2] / all, t[3] / ns, 100 * t[3] / all);
        print_kernel_times(&st, ns);
    }
    *exit_code = 0;
out:
    if (s)
        pgrt_stream_sync(s);
    pgrt_stream_destroy(&s);
    pgrt_lm_destroy(&lm);
    free(ids);
    return rc;
}

const char *train_last_message(void)
{
    static _Thread_local char buf[8192];
    const char *m = pgrt_last_message();
    pg_text_escape(buf, sizeof buf, m);
    /* escaped already when escaping would only double its backslashes */
    const char *a = m, *b = buf;
    while (*a && *b) {
        if (*a == '\\' && b[0] == '\\' && b[1] == '\\')
            b++;
        else if (*a != *b)
            break;
        a++;
        b++;
    }
    return !*a && !*b ? m : buf;
}

/* A failed library call on an output: its message names the path
 * (escaped by the model layer), this line the option. */
static void output_failed(const char *opt)
{
    fprintf(stderr, "ptxgen-train: %s: %s\n", opt, train_last_message());
}

/* No output may replace another output or an input. The one exception is
 * --save-adapter naming the --adapter directory: continuing a fine-tune in
 * place is common, the adapter is read whole before the run, and
 * pgrt_adapter_save replaces the pair atomically (with the config
 * unchanged, by one rename of the weights), so the old adapter is there
 * until the new one is. */
static int check_aliases(const opts *o, const pgrt_model_files *mf)
{
    size_t nm = pgrt_model_file_count(mf);
    const char **mfiles = calloc(nm ? nm : 1, sizeof *mfiles);
    if (!mfiles)
        return bad("out of host memory");
    for (size_t i = 0; i < nm; i++)
        mfiles[i] = pgrt_model_file_path(mf, i);
    char af[2][4200];
    const char *afiles[2] = {af[0], af[1]};
    if (o->adapter) {
        snprintf(af[0], sizeof af[0], "%s/adapter_config.json", o->adapter);
        snprintf(af[1], sizeof af[1], "%s/adapter_model.safetensors", o->adapter);
    }
    static const char *const written[] = {"adapter_model.safetensors", "adapter_config.json"};
    const train_path outs[] = {
        {"--save-adapter", o->save_adapter, written, 2, 1},
        {"--save-grads", o->save_grads, written, 2, 1},
        {"--log-json", o->log_json, NULL, 0, 0},
    };
    const train_path ins[] = {
        {"--model", o->model, mfiles, nm, 1},
        {"--adapter", o->adapter, afiles, 2, 1},
        {"--tokens", o->tokens, NULL, 0, 0},
    };
    char msg[16384];
    int clash = train_paths_clash(outs, 3, ins, 3, "--save-adapter", "--adapter", msg,
                                  sizeof msg);
    free(mfiles);
    return clash ? bad("%s", msg) : 0;
}

/* Every destination can be written, checked before the first launch: a
 * typo in an output path must not cost the run. pgrt_adapter_save_check
 * and pgrt_file_write_check make and remove a temporary where the output
 * will go, so permissions and read-only mounts show too. */
static int check_outputs(const opts *o)
{
    if (o->save_adapter && pgrt_adapter_save_check(o->save_adapter)) {
        output_failed("--save-adapter");
        return EXIT_USAGE;
    }
    if (o->save_grads && pgrt_adapter_save_check(o->save_grads)) {
        output_failed("--save-grads");
        return EXIT_USAGE;
    }
    if (o->log_json && pgrt_file_write_check(o->log_json)) {
        output_failed("--log-json");
        return EXIT_USAGE;
    }
    return 0;
}

static int write_log(const char *path, const opts *o, const run_log *lg)
{
    size_t cap = (size_t)o->steps * 160 + 64, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fprintf(stderr, "ptxgen-train: --log-json: out of host memory for the log\n");
        return PGRT_ENOMEM;
    }
    double tokens = (double)o->batch * (double)o->seq;
    for (long long i = 0; i < o->steps; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "{\"step\": %lld, \"loss\": %.9g, \"grad_norm\": %.9g, \"ms\": "
                                "%.4f, \"tokens_per_s\": %.1f}\n",
                                i + 1, lg->loss[i], (double)lg->norm[i], lg->ms[i],
                                tokens / lg->ms[i] * 1e3);
    int rc = pgrt_file_write_atomic(path, buf, len);
    free(buf);
    return rc;
}

int train_hf_main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    pgrt_model_files *mf = NULL;
    pgrt_adapter *ad = NULL, *final = NULL, *grads = NULL;
    pgrt_tokens *tok = NULL;
    pgrt_ctx *ctx = NULL;
    int code = EXIT_USAGE;
    run_log logs[2] = {{0}};

    if ((rc = pgrt_model_open(o.model, &mf)))
        goto fail;
    const pgrt_hf_config *mc = pgrt_model_hf_config(mf);
    if (o.adapter) {
        if ((rc = pgrt_adapter_load(o.adapter, mc, &ad)))
            goto fail;
    } else {
        pgrt_adapter_config ac = {.r = (int)o.rank, .alpha = o.alpha, .targets = o.targets};
        if ((rc = pgrt_adapter_init(mc, &ac, (uint64_t)o.seed, &ad)))
            goto fail;
    }
    if ((rc = pgrt_tokens_open(o.tokens, mc->vocab, &tok)))
        goto fail;
    if ((code = check_aliases(&o, mf)) || (code = check_outputs(&o)))
        goto fail;
    code = EXIT_USAGE;
    if ((rc = clone_shape(mc, ad, &final)) || (o.save_grads && (rc = clone_shape(mc, ad, &grads))))
        goto fail;
    for (int i = 0; i < 2; i++) {
        logs[i].loss = calloc((size_t)o.steps, sizeof(double));
        logs[i].ms = calloc((size_t)o.steps, sizeof(double));
        logs[i].norm = calloc((size_t)o.steps, sizeof(float));
        if (!logs[i].loss || !logs[i].ms || !logs[i].norm) {
            rc = PGRT_ENOMEM;
            code = EXIT_FAIL;
            goto fail;
        }
    }
    if ((rc = pgrt_ctx_create(&ctx, NULL))) {
        code = EXIT_FAIL;
        goto fail;
    }
    int last = 0, verdict = 0;
    for (int m = 0; m < 2; m++) {
        if (!(o.modes & (1 << m)))
            continue;
        if ((rc = run(ctx, &o, mf, ad, tok, m == 1, &logs[m], final, grads, &code)))
            goto fail;
        last = m;
    }
    if (o.modes == 3) {
        double worst = 0;
        for (long long i = 0; i < o.steps; i++) {
            double e = fabs(logs[1].loss[i] - logs[0].loss[i]) / fmax(fabs(logs[0].loss[i]), 1e-30);
            worst = fmax(worst, e);
        }
        fprintf(stderr, "eager and graphed losses: worst relative difference %.3g%s\n", worst,
                worst <= 1e-5 ? "" : " (more than 1e-5)");
        verdict = worst <= 1e-5 ? 0 : EXIT_FAIL;
    }
    double tot = 0;
    for (long long i = o.steps > 1 ? 1 : 0; i < o.steps; i++)
        tot += logs[last].ms[i];
    long long counted = o.steps > 1 ? o.steps - 1 : 1;
    fprintf(stderr, "%.2f ms/step, %.0f tokens/s (steps after the first)\n", tot / counted,
            (double)o.batch * o.seq * counted / tot * 1e3);
    /* Each output on its own, the trained adapter first: one that fails
     * (a full disk) is reported and leaves the others written, each whole
     * (pgrt_adapter_save writes its pair atomically, the log is replaced
     * by a rename). */
    code = verdict;
    if (o.save_adapter && pgrt_adapter_save(final, o.save_adapter)) {
        output_failed("--save-adapter");
        code = EXIT_FAIL;
    }
    if (o.save_grads && pgrt_adapter_save(grads, o.save_grads)) {
        output_failed("--save-grads");
        code = EXIT_FAIL;
    }
    if (o.log_json && (rc = write_log(o.log_json, &o, &logs[last]))) {
        if (rc != PGRT_ENOMEM)
            output_failed("--log-json");
        rc = 0;
        code = EXIT_FAIL;
    }
fail:
    if (rc)
        fprintf(stderr, "ptxgen-train: %s\n", pgrt_last_message()[0] ? train_last_message()
                                                                       : pgrt_strerror(rc));
    for (int i = 0; i < 2; i++) {
        free(logs[i].loss);
        free(logs[i].ms);
        free(logs[i].norm);
    }
    pgrt_ctx_destroy(&ctx);
    pgrt_tokens_close(&tok);
    pgrt_adapter_destroy(&grads);
    pgrt_adapter_destroy(&final);
    pgrt_adapter_destroy(&ad);
    pgrt_model_close(&mf);
    return code;
}
