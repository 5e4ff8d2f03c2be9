/* SPDX-License-Identifier: MIT */
/*
 * The training step on a GPU: the synthetic model of tools/train_model.h
 * trained eagerly and with the backward loop as a CUDA graph.
 *
 *   reference        the GPU's loss trajectory against the double-precision
 *                    CPU model (tests/runtime/ref_model.c) from the same start
 *   F-GRAPH-BWD-001  eager and graphed losses agree step by step, to 1e-5
 *                    relative (bitwise equality is expected and reported),
 *                    across sequence-length changes
 *   F-GRAPH-BWD-002  captures succeed: one at the first step of each new
 *                    length, replays in between
 *   fallback         a capture forced to fail (a stream sync inside the
 *                    loop) is logged, the step runs eagerly with the same
 *                    result, and the next length captures again
 *   device hyper     the learning rate lives in device memory: a replay
 *                    after pgrt_train_set_lr(0) leaves the weights alone;
 *                    the step counter advances on the device
 *   F-GRAPH-BWD-003  graphed against eager step throughput at batch 4,
 *                    reported (timing never fails a test)
 *   and the loss falls.
 *
 * Usage: test_train_gpu [--small]   (--small or PGTEST_SMALL=1: skip the timing run)
 * Exit 77 when there is no driver or no device.
 */
#include "ref_model.h"
#include "test.h"
#include "train_model.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

#define REL_TOL 1e-5
#define MAX_STEPS 16

static pgrt_ctx *ctx;
static pgrt_stream *stream;
static char last_log[512];
static int nlog;

static void die_rt(const char *what, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", what, pgrt_err_name(rc), pgrt_last_message());
    exit(1);
}

static void log_line(void *user, const char *line)
{
    (void)user;
    printf("  pgrt: %s\n", line);
    snprintf(last_log, sizeof last_log, "%s", line);
    nlog++;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static tmodel_config small_config(void)
{
    tmodel_config c;
    tmodel_config_default(&c);
    c.layers = 4;
    c.hidden = 64;
    c.seq = 16;
    c.max_seq = 16;
    c.batch = 2;
    c.rank = 16;
    c.steps = MAX_STEPS;
    c.seed = 7;
    return c;
}

typedef struct run_out {
    double loss[MAX_STEPS];
    pgrt_train_stats stats;
    double ms; /* steps after the first, to completion */
} run_out;

/* Train for n steps at seq[i]; sync_until: steps before it run with the
 * sync-in-backward hook on (a forced capture failure). */
static void run(const tmodel_config *c, bool graph, const uint32_t *seq, uint32_t n,
                uint32_t sync_until, run_out *o)
{
    tmodel *m = NULL;
    int rc = tmodel_create(ctx, c, graph ? PGRT_TRAIN_GRAPH_ON : PGRT_TRAIN_GRAPH_OFF, log_line,
                           NULL, &m);
    if (rc)
        die_rt("tmodel_create", rc);
    double t1 = 0;
    for (uint32_t i = 0; i < n; i++) {
        tmodel_set_sync_in_backward(m, i < sync_until);
        if ((rc = tmodel_step(m, stream, seq[i], i)))
            die_rt(graph ? "graphed step" : "eager step", rc);
        if (i == 0) {
            if ((rc = pgrt_stream_sync(stream)))
                die_rt("pgrt_stream_sync", rc);
            t1 = now_ms();
        }
    }
    if ((rc = tmodel_losses(m, stream, n, o->loss)))
        die_rt("tmodel_losses", rc);
    o->ms = now_ms() - t1;
    if ((rc = pgrt_train_stats_get(tmodel_pipeline(m), &o->stats)))
        die_rt("pgrt_train_stats_get", rc);
    tmodel_destroy(&m);
}

/* Max relative difference of two loss trajectories; *bitwise whether they
 * are equal to the bit. */
static double max_rel(const double *a, const double *b, uint32_t n, bool *bitwise)
{
    double worst = 0;
    *bitwise = true;
    for (uint32_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(fabs(a[i]), 1e-300);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
        *bitwise = *bitwise && a[i] == b[i];
    }
    return worst;
}

static void print_losses(const char *title, const double *a, const double *b, uint32_t n,
                         const uint32_t *seq)
{
    printf("%s\n%5s %5s %16s %16s %10s\n", title, "step", "seq", "eager", "graph", "rel diff");
    for (uint32_t i = 0; i < n; i++)
        printf("%5u %5u %16.9e %16.9e %10.2e\n", i, seq[i], a[i], b[i],
               fabs(a[i] - b[i]) / fmax(fabs(a[i]), 1e-300));
}

/* ---------------------------------------------------------------- the tests */

static void test_reference(void)
{
    tmodel_config c = small_config();
    const uint32_t n = 6;
    uint32_t seq[MAX_STEPS];
    for (uint32_t i = 0; i < n; i++)
        seq[i] = i < 4 ? 16 : 8;
    run_out e;
    run(&c, false, seq, n, 0, &e);
    ref_model *r = ref_model_create(&c);
    if (!r) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    printf("GPU (eager) against the CPU double reference\n%5s %5s %16s %16s %10s\n", "step",
           "seq", "gpu", "cpu", "rel diff");
    for (uint32_t i = 0; i < n; i++) {
        double want = ref_model_step(r, seq[i]);
        double d = fabs(e.loss[i] - want) / want;
        printf("%5u %5u %16.9e %16.9e %10.2e\n", i, seq[i], e.loss[i], want, d);
        /* The first loss is the forward alone; later ones carry the
         * updates of f32 against f64 gradients. */
        double tol = i == 0 ? 1e-5 : 2e-4;
        if (!(d <= tol))
            TEST_FAIL_("step %u: GPU loss %.9e, CPU %.9e: rel diff %.2e > %.0e", i, e.loss[i],
                       want, d, tol);
        test_checks_++;
    }
    ref_model_destroy(r);
}

static void test_graph_vs_eager(void)
{
    tmodel_config c = small_config();
    const uint32_t seq[] = {16, 16, 16, 8, 8, 8, 16, 16, 12, 12};
    const uint32_t n = sizeof seq / sizeof seq[0];
    run_out e, g;
    nlog = 0;
    run(&c, false, seq, n, 0, &e);
    REQUIRE_INT_EQ(nlog, 0);
    run(&c, true, seq, n, 0, &g);
    print_losses("eager against graph, the length changing", e.loss, g.loss, n, seq);
    bool bitwise;
    double d = max_rel(e.loss, g.loss, n, &bitwise);
    printf("F-GRAPH-BWD-001: max rel diff %.3e, bitwise %s\n", d, bitwise ? "equal" : "different");
    REQUIRE(d <= REL_TOL);
    /* F-GRAPH-BWD-002: a capture at each new length (16, 8, 16, 12). */
    REQUIRE_INT_EQ(g.stats.captures, 4);
    REQUIRE_INT_EQ(g.stats.capture_failures, 0);
    REQUIRE_INT_EQ(g.stats.graph_steps, n);
    REQUIRE_INT_EQ(g.stats.eager_steps, 0);
    REQUIRE_INT_EQ(g.stats.graph_seq_len, 12);
    REQUIRE_INT_EQ(e.stats.eager_steps, n);
    REQUIRE(g.loss[2] < g.loss[0]);
    REQUIRE(g.loss[n - 1] < g.loss[n - 2]);
}

static void test_fallback(void)
{
    tmodel_config c = small_config();
    const uint32_t seq[] = {16, 16, 16, 8, 8};
    const uint32_t n = sizeof seq / sizeof seq[0];
    run_out e, g;
    run(&c, false, seq, n, 0, &e);
    nlog = 0;
    last_log[0] = '\0';
    /* The first three steps synchronise inside the loop: the capture at 16
     * fails and 16 stays eager; 8 captures. */
    run(&c, true, seq, n, 3, &g);
    print_losses("eager against a forced capture failure", e.loss, g.loss, n, seq);
    REQUIRE_INT_EQ(g.stats.capture_failures, 1);
    REQUIRE_INT_EQ(g.stats.eager_steps, 3);
    REQUIRE_INT_EQ(g.stats.captures, 1);
    REQUIRE_INT_EQ(g.stats.graph_steps, 2);
    REQUIRE_INT_EQ(nlog, 2);
    bool bitwise;
    double d = max_rel(e.loss, g.loss, n, &bitwise);
    REQUIRE(d <= REL_TOL);
    REQUIRE(bitwise);
}

static void test_device_hyper(void)
{
    tmodel_config c = small_config();
    tmodel *m = NULL;
    int rc = tmodel_create(ctx, &c, PGRT_TRAIN_GRAPH_ON, log_line, NULL, &m);
    if (rc)
        die_rt("tmodel_create", rc);
    size_t np = tmodel_param_count(m);
    float *before = malloc(np * sizeof *before), *after = malloc(np * sizeof *after);
    if (!before || !after) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    pgrt_train *t = tmodel_pipeline(m);
    REQUIRE_INT_EQ(tmodel_step(m, stream, 16, 0), 0);
    REQUIRE_INT_EQ(tmodel_step(m, stream, 16, 1), 0);
    REQUIRE_INT_EQ(tmodel_params(m, stream, before, np), 0);
    /* lr 0: the replayed step reads it from device memory and moves nothing. */
    REQUIRE_INT_EQ(pgrt_train_set_lr(t, stream, 0.0f), 0);
    REQUIRE_INT_EQ(tmodel_step(m, stream, 16, 2), 0);
    REQUIRE_INT_EQ(tmodel_params(m, stream, after, np), 0);
    REQUIRE(memcmp(before, after, np * sizeof *before) == 0);
    /* And back: the next replay moves them again. */
    REQUIRE_INT_EQ(pgrt_train_set_lr(t, stream, c.lr), 0);
    REQUIRE_INT_EQ(tmodel_step(m, stream, 16, 3), 0);
    REQUIRE_INT_EQ(tmodel_params(m, stream, after, np), 0);
    REQUIRE(memcmp(before, after, np * sizeof *before) != 0);
    pgrt_train_stats st;
    REQUIRE_INT_EQ(pgrt_train_stats_get(t, &st), 0);
    REQUIRE_INT_EQ(st.captures, 1);
    REQUIRE_INT_EQ(st.graph_steps, 4);
    /* Four replays, four optimizer steps on the device. */
    float h[10];
    REQUIRE_INT_EQ(pgrt_buf_download(pgrt_train_hyper_buf(t), 0, h, 10), 0);
    REQUIRE(h[9] == 4.0f);
    REQUIRE(h[0] == c.lr);
    volatile float p1 = 1.0f;
    for (int i = 0; i < 4; i++)
        p1 = p1 * c.beta1;
    volatile float q1 = 1.0f - p1;
    REQUIRE(h[7] == p1);
    REQUIRE(h[5] == 1.0f / q1);
    free(before);
    free(after);
    tmodel_destroy(&m);
}

static void test_throughput(void)
{
    tmodel_config c;
    tmodel_config_default(&c); /* 28 layers, hidden 128, seq 64, batch 4 */
    c.steps = 12;
    uint32_t seq[MAX_STEPS];
    for (uint32_t i = 0; i < c.steps; i++)
        seq[i] = c.seq;
    run_out e, g;
    run(&c, false, seq, c.steps, 0, &e);
    run(&c, true, seq, c.steps, 0, &g);
    bool bitwise;
    double d = max_rel(e.loss, g.loss, c.steps, &bitwise);
    double se = (c.steps - 1) * 1e3 / e.ms, sg = (c.steps - 1) * 1e3 / g.ms;
    printf("batch %u, %u layers, hidden %u, seq %u: eager %.1f steps/s, graph %.1f steps/s\n",
           c.batch, c.layers, c.hidden, c.seq, se, sg);
    printf("F-GRAPH-BWD-001 (default model): max rel diff %.3e, bitwise %s\n", d,
           bitwise ? "equal" : "different");
    printf("F-GRAPH-BWD-003: graph/eager %.2fx (seed asks >= 1.10x; reported, not checked)\n",
           sg / se);
    printf("loss %.6e -> %.6e\n", g.loss[0], g.loss[c.steps - 1]);
    REQUIRE(d <= REL_TOL);
    REQUIRE_INT_EQ(g.stats.captures, 1);
    REQUIRE_INT_EQ(g.stats.capture_failures, 0);
    REQUIRE(g.loss[c.steps - 1] < 0.5 * g.loss[0]);
}

int main(int argc, char **argv)
{
    const char *e = getenv("PGTEST_SMALL");
    bool small = e && strcmp(e, "1") == 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0)
            small = true;
        else {
            fprintf(stderr, "usage: %s [--small]\n", argv[0]);
            return 2;
        }
    }
    unsetenv("PTXGEN_CUDA_GRAPH");
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (rc) {
        if (pgrt_err_unavailable(rc)) {
            printf("SKIP: %s\n", pgrt_last_message());
            return TEST_SKIP;
        }
        die_rt("pgrt_ctx_create", rc);
    }
    pgrt_device_info dev;
    pgrt_ctx_device_info(ctx, &dev);
    printf("device: %s (%s)\n", dev.name, pg_target_name(dev.target));
    if ((rc = pgrt_stream_create(ctx, &stream)))
        die_rt("pgrt_stream_create", rc);

    test_reference();
    test_graph_vs_eager();
    test_fallback();
    test_device_hyper();
    if (!small)
        test_throughput();

    pgrt_stream_destroy(&stream);
    pgrt_ctx_destroy(&ctx);
    TEST_DONE();
}
