/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train: train the small synthetic model of train_model.h for N steps
 * on random data, eagerly, with the backward loop as a CUDA graph, or both,
 * printing the loss of every step and the step throughput, and checking the
 * graph contracts when both run:
 *
 *   F-GRAPH-BWD-001  eager and graphed losses agree step by step (1e-5 relative)
 *   F-GRAPH-BWD-002  the capture succeeds
 *   F-GRAPH-BWD-003  graphed step throughput against eager (the seed asks >= 1.10x
 *                    at batch 4; reported, timing is never pass/fail here)
 *   and the loss falls over the run.
 *
 * With --model DIR (or --config, --resume, or any option of that mode) it
 * fine-tunes a Hugging Face checkpoint instead (train_hf.h); --help leads
 * with that mode and ends with this one.
 *
 * Usage: ptxgen-train [--layers N] [--hidden N] [--seq N] [--batch N] [--rank N]
 *                     [--steps N] [--seed N] [--lr X] [--mode eager|graph|both]
 * --lr is 1e-12 to 1 (a normal float: smaller values flush the update to 0).
 * Exit: 0 when the run works (and, with both modes, -001, -002 and the
 * falling loss hold); 1 on a failure, no GPU included (one line says so);
 * 2 on a bad option (one line on stderr).
 */
#include "ptxgen/pgrt_model.h"
#include "train_hf.h"
#include "train_model.h"
#include "train_opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_USAGE 2
#define REL_TOL 1e-5

enum { MODE_EAGER = 1, MODE_GRAPH = 2, MODE_BOTH = 3 };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

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

/* A decimal integer in [lo, hi]. */
static int parse_u(const char *opt, const char *v, unsigned long long lo, unsigned long long hi,
                   unsigned long long *out)
{
    if (!v)
        return bad("%s needs a value", opt);
    const char *p = v;
    if (!*p)
        return bad("%s: '%s' is not a number", opt, v);
    for (; *p; p++)
        if (*p < '0' || *p > '9')
            return bad("%s: '%s' is not a non-negative integer", opt, v);
    errno = 0;
    unsigned long long x = strtoull(v, NULL, 10);
    if (errno == ERANGE || x < lo || x > hi) {
        return bad("%s %s is out of range (%llu to %llu)", opt, v, lo, hi);
    }
    *out = x;
    return 0;
}

typedef struct run_result {
    double *loss;
    double first_ms;   /* step 0: target, JIT-free warm-up and (graph) the capture */
    double steady_ms;  /* steps 1 .. N-1 together, to the last one's completion */
    pgrt_train_stats stats;
} run_result;

static void log_line(void *user, const char *line)
{
    (void)user;
    printf("  pgrt: %s\n", line);
    fflush(stdout);
}

static int fail_rt(const char *what, int rc)
{
    fprintf(stderr, "ptxgen-train: %s: %s: %s\n", what, pgrt_err_name(rc), train_last_message());
    return 1;
}

static int run(pgrt_ctx *ctx, pgrt_stream *s, const tmodel_config *c, bool graph, run_result *r)
{
    tmodel *m = NULL;
    int rc = tmodel_create(ctx, c, graph ? PGRT_TRAIN_GRAPH_ON : PGRT_TRAIN_GRAPH_OFF, log_line,
                           NULL, &m);
    if (rc)
        return fail_rt("creating the model", rc);
    pgrt_train_stats st;
    if (pgrt_train_stats_get(tmodel_pipeline(m), &st) == 0)
        printf("%s: %zu kernel launches a step, %zu of them the pipeline's own\n",
               graph ? "graph" : "eager", tmodel_launches_per_step(m), st.launches_per_step);
    double t0 = now_ms();
    rc = tmodel_step(m, s, c->seq, 0);
    if (!rc)
        rc = pgrt_stream_sync(s);
    double t1 = now_ms();
    for (uint32_t i = 1; i < c->steps && !rc; i++)
        rc = tmodel_step(m, s, c->seq, i);
    if (!rc)
        rc = pgrt_stream_sync(s);
    double t2 = now_ms();
    if (rc) {
        fail_rt(graph ? "graph step" : "eager step", rc);
        tmodel_destroy(&m);
        return 1;
    }
    r->first_ms = t1 - t0;
    r->steady_ms = t2 - t1;
    if ((rc = tmodel_losses(m, s, c->steps, r->loss)) ||
        (rc = pgrt_train_stats_get(tmodel_pipeline(m), &r->stats))) {
        fail_rt("reading the losses", rc);
        tmodel_destroy(&m);
        return 1;
    }
    tmodel_destroy(&m);
    return 0;
}

static double steps_per_s(const tmodel_config *c, const run_result *r)
{
    if (c->steps < 2)
        return 1e3 / r->first_ms;
    return (c->steps - 1) * 1e3 / r->steady_ms;
}

static void print_timing(const char *name, const tmodel_config *c, const run_result *r)
{
    double sps = steps_per_s(c, r);
    printf("%s: first step %.2f ms; steady %.3f ms/step, %.1f steps/s (%u steps)\n", name,
           r->first_ms, 1e3 / sps, sps, c->steps > 1 ? c->steps - 1 : 1);
}

/* The demo's options into c and *mode. 0, or the exit status after one
 * line. */
static int parse_demo(int argc, char **argv, tmodel_config *c, int *mode)
{
    tmodel_config_default(c);
    *mode = MODE_BOTH;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long x = 0;
        int rc;
        if (strcmp(a, "--mode") == 0) {
            if (!v)
                return bad("%s needs a value", a);
            if (strcmp(v, "eager") == 0)
                *mode = MODE_EAGER;
            else if (strcmp(v, "graph") == 0)
                *mode = MODE_GRAPH;
            else if (strcmp(v, "both") == 0)
                *mode = MODE_BOTH;
            else
                return bad("--mode: '%s' is not eager, graph or both", v);
            i++;
            continue;
        }
        if (strcmp(a, "--lr") == 0) {
            if (!v)
                return bad("%s needs a value", a);
            char *end;
            errno = 0;
            double lr = strtod(v, &end);
            /* c->lr is a float: the bound keeps it a normal one (1e-50
             * passed "> 0" and trained with 0) */
            if (end == v || *end || (errno && errno != ERANGE) || !(lr >= 1e-12 && lr <= 1))
                return bad("--lr: '%s' is not a learning rate in [1e-12, 1]", v);
            c->lr = (float)lr;
            i++;
            continue;
        }
        struct { const char *name; unsigned long long lo, hi; } opts[] = {
            {"--layers", 1, 4096}, {"--hidden", 1, 8192}, {"--seq", 1, 65536},
            {"--batch", 1, 65536}, {"--rank", 1, 8192},   {"--steps", 1, 1000000},
            {"--seed", 0, UINT64_MAX},
        };
        size_t o = 0;
        while (o < sizeof opts / sizeof opts[0] && strcmp(a, opts[o].name) != 0)
            o++;
        if (o == sizeof opts / sizeof opts[0])
            return bad("unknown option '%s' (see --help)", a);
        if ((rc = parse_u(a, v, opts[o].lo, opts[o].hi, &x)))
            return rc;
        i++;
        switch (o) {
        case 0: c->layers = (uint32_t)x; break;
        case 1: c->hidden = (uint32_t)x; break;
        case 2: c->seq = (uint32_t)x; break;
        case 3: c->batch = (uint32_t)x; break;
        case 4: c->rank = (uint32_t)x; break;
        case 5: c->steps = (uint32_t)x; break;
        default: c->seed = x; break;
        }
    }
    c->max_seq = c->seq;
    const char *why = tmodel_config_check(c);
    if (why) {
        fprintf(stderr, "ptxgen-train: %s\n", why);
        return EXIT_USAGE;
    }
    return 0;
}

/* The losses of each mode step by step, the timings, and the verdicts
 * (the loss falls; with both modes, the seed's graph checks). 0, or 1
 * when a verdict fails. */
static int report(const tmodel_config *cfg, int mode, const run_result *pre,
                  const run_result *prg)
{
    const tmodel_config c = *cfg;
    const run_result re = *pre, rg = *prg;
    int status = 0;
    printf("\n%5s", "step");
    if (mode & MODE_EAGER)
        printf("  %14s", "loss eager");
    if (mode & MODE_GRAPH)
        printf("  %14s", "loss graph");
    if (mode == MODE_BOTH)
        printf("  %10s", "rel diff");
    printf("\n");
    double max_rel = 0;
    bool bitwise = true;
    for (uint32_t i = 0; i < c.steps; i++) {
        printf("%5u", i);
        if (mode & MODE_EAGER)
            printf("  %14.8e", re.loss[i]);
        if (mode & MODE_GRAPH)
            printf("  %14.8e", rg.loss[i]);
        if (mode == MODE_BOTH) {
            double d = fabs(re.loss[i] - rg.loss[i]) / fmax(fabs(re.loss[i]), 1e-30);
            if (!(d <= max_rel))
                max_rel = isnan(d) ? INFINITY : fmax(max_rel, d);
            bitwise = bitwise && re.loss[i] == rg.loss[i];
            printf("  %10.3e", d);
        }
        printf("\n");
    }
    printf("\n");
    if (mode & MODE_EAGER)
        print_timing("eager", &c, &re);
    if (mode & MODE_GRAPH) {
        print_timing("graph", &c, &rg);
        printf("graph: %llu captures (%.2f ms), %llu capture failures, %llu graphed steps, %llu "
               "eager steps\n",
               (unsigned long long)rg.stats.captures, rg.stats.capture_ms,
               (unsigned long long)rg.stats.capture_failures,
               (unsigned long long)rg.stats.graph_steps, (unsigned long long)rg.stats.eager_steps);
    }

    const run_result *any = (mode & MODE_GRAPH) ? &rg : &re;
    double l0 = any->loss[0], ln = any->loss[c.steps - 1];
    bool fell = c.steps < 2 || (isfinite(ln) && ln < l0);
    printf("loss: %.6e -> %.6e (%s)\n", l0, ln, fell ? "falls" : "does NOT fall");
    if (!fell)
        status = 1;
    if (mode == MODE_BOTH) {
        bool ok1 = max_rel <= REL_TOL, ok2 = rg.stats.captures >= 1 && !rg.stats.capture_failures;
        double ratio = steps_per_s(&c, &rg) / steps_per_s(&c, &re);
        printf("F-GRAPH-BWD-001 eager vs graph losses: max rel diff %.3e, bitwise %s: %s\n",
               max_rel, bitwise ? "equal" : "different", ok1 ? "PASS" : "FAIL");
        printf("F-GRAPH-BWD-002 capture: %llu captured, %llu failed: %s\n",
               (unsigned long long)rg.stats.captures,
               (unsigned long long)rg.stats.capture_failures, ok2 ? "PASS" : "FAIL");
        printf("F-GRAPH-BWD-003 throughput graph/eager at batch %u: %.2fx (seed asks >= 1.10x: "
               "%s)\n", c.batch, ratio, ratio >= 1.10 ? "met" : "not met");
        if (!ok1 || !ok2)
            status = 1;
    }
    return status;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            train_opts_help(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            train_opts_version(stdout);
            return 0;
        }
    }
    if (!train_opts_is_demo(argc, argv))
        return train_hf_main(argc, argv);
    tmodel_config c;
    int mode = MODE_BOTH;
    int rc = parse_demo(argc, argv, &c, &mode);
    if (rc)
        return rc;

    pgrt_ctx *ctx = NULL;
    rc = pgrt_ctx_create(&ctx, NULL);
    if (rc) {
        if (pgrt_err_unavailable(rc))
            fprintf(stderr, "ptxgen-train: no GPU: %s\n", train_last_message());
        else
            fprintf(stderr, "ptxgen-train: %s: %s\n", pgrt_err_name(rc), train_last_message());
        return 1;
    }
    pgrt_device_info dev;
    pgrt_ctx_device_info(ctx, &dev);
    printf("ptxgen-train: %s (%s, driver %d.%d); %u layers, hidden %u, seq %u, batch %u, "
           "rank %u, %u steps, seed %llu, lr %g\n",
           dev.name, pg_target_name(dev.target), dev.driver_version / 1000,
           (dev.driver_version % 1000) / 10, c.layers, c.hidden, c.seq, c.batch, c.rank, c.steps,
           (unsigned long long)c.seed, (double)c.lr);
    fflush(stdout);

    pgrt_stream *s = NULL;
    run_result re = {0}, rg = {0};
    re.loss = calloc(c.steps, sizeof *re.loss);
    rg.loss = calloc(c.steps, sizeof *rg.loss);
    int status = 0;
    if (!re.loss || !rg.loss) {
        fprintf(stderr, "ptxgen-train: out of host memory\n");
        status = 1;
        goto out;
    }
    if ((rc = pgrt_stream_create(ctx, &s))) {
        status = fail_rt("creating a stream", rc);
        goto out;
    }
    if ((mode & MODE_EAGER) && (status = run(ctx, s, &c, false, &re)))
        goto out;
    if ((mode & MODE_GRAPH) && (status = run(ctx, s, &c, true, &rg)))
        goto out;

    status = report(&c, mode, &re, &rg);
out:
    fflush(stdout);
    free(re.loss);
    free(rg.loss);
    pgrt_stream_destroy(&s);
    pgrt_ctx_destroy(&ctx);
    return status;
}
