/* SPDX-License-Identifier: MIT */
/*
 * Start-up time: the training catalog pre-warmed in a new process. The
 * catalog is every kernel a training step of the runtime can launch on the
 * device's target (pgrt_lm's forward, loss and backward, pgrt_train's
 * optimizer in both forms with pgrt_clip, pgrt_prewarm_model's plan with
 * f16 weights, ptxgen-train's layer), each GEMM in every tile variant the
 * dispatch (pgk_pick) can choose; --catalog all takes every kernel of the
 * catalog instead, with every tile variant, tuning ones included, and
 * --catalog lm one configuration's step: pgrt_lm with the folded optimizer.
 *
 *   serial      one JIT thread, no disk cache
 *   parallel    the JIT pool, no disk cache
 *   cold        the JIT pool, an empty disk cache (the cubins are written)
 *   disk        a new process served from that cache
 *
 * each phase in a process of its own (this program run again), so that no
 * phase inherits loaded modules or a warm driver. The driver's own cache
 * is turned off (CUDA_CACHE_DISABLE=1) unless --driver-cache is given.
 * Times are of pgrt_prewarm alone; creating the context is shown apart.
 *
 *   bench_prewarm [--threads N] [--runs R] [--dir DIR] [--driver-cache]
 *                 [--catalog training|all|lm]
 *
 * Prints a table (with, for the median run, when the first JIT started and
 * the last ended: what the call spent before and after the JITs), every
 * run's time, the slowest modules of the serial and cold phases (the
 * cold run's critical path) and the goals (cold parallel <= 150 ms, from
 * disk <= 20 ms) with how each went; exits 77 without a device, 1 on a
 * failure, else 0 (missing a goal is reported, not a failure).
 */
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GOAL_COLD_MS 150.0
#define GOAL_DISK_MS 20.0
#define MAX_WARM 256

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The kernels a training step launches (the catalog of the goal), by the
 * code that launches them. */
static const char *const training[] = {
    /* pgrt_lm: forward, loss and backward (runtime/model/lm.c) */
    "gemm_forward", "gemm_forward_accumulate", "gemm_backward_a", "gemm_backward_a_accumulate",
    "gemm_backward_b", "rms_norm_forward", "batched_rms_norm_backward", "residual_add",
    "gradient_clip", "embedding_gather_f32", "rope_forward_f32", "rope_backward_f32",
    "swiglu_forward_f32", "swiglu_backward_f32", "bias_add_f32", "cross_entropy_fwd_bwd_f32",
    "attention_forward_f32", "attention_backward_dq_f32", "attention_backward_dkv_f32",
    "cast_bf16_to_f32",
    /* pgrt_train's optimizer, folded (these four: with pgrt_lm's above, the
     * "lm" catalog, one configuration's step) and per layer, and pgrt_clip */
    "adamw_hyper_advance", "adamw_multi_norm", "adamw_multi_finalize", "adamw_multi_step",
    "adamw_step_dev", "squared_sum_reduce", "squared_sum_reduce_multi", "clip_scale_reduce",
    "gradient_clip_gpu_scale", "gradient_clip_gpu_scale_multi",
    /* pgrt_prewarm_model's plan beyond those (the f16-weight path too) */
    "silu_backward", "batched_softmax_backward", "rms_norm_gamma_reduce", "cast_f32_to_f16",
    "gemm_f16_backward_a",
    /* ptxgen-train's layer (tools/train_model.c) */
    "transpose", "silu_forward", "batched_softmax_forward", "mse_loss",
};

#define LM_KERNELS 24 /* the first of training[]: pgrt_lm with the folded optimizer */

typedef enum which { CAT_TRAINING, CAT_ALL, CAT_LM } which;
static const char *const cat_names[] = {"training", "all", "lm"};

/* The variants pgk_pick chooses over shapes from 1 to 64K a side, as a
 * bit mask (the default alone for a kernel without a pick). */
static uint32_t picked_variants(const pgk_desc *d, int vi)
{
    static const uint32_t sides[] = {1, 8, 16, 63, 64, 65, 127, 128, 256, 512, 1536, 4096, 65535};
    const size_t ns = sizeof sides / sizeof sides[0];
    int im = pgk_knob_index(d, "m"), in = pgk_knob_index(d, "n"), ik = pgk_knob_index(d, "k");
    uint32_t mask = 0;
    for (size_t a = 0; a < ns; a++)
        for (size_t b = 0; b < ns; b++)
            for (size_t c = 0; c < ns; c++) {
                pgk_knobs kn;
                pgk_knobs_default(d, &kn);
                const int idx[3] = {im, in, ik};
                const uint32_t v[3] = {sides[a], sides[b], sides[c]};
                for (int i = 0; i < 3; i++)
                    if (idx[i] >= 0) {
                        const pgk_knob *k = &d->knobs[idx[i]];
                        kn.v[idx[i]] = v[i] < k->min ? k->min : v[i] > k->max ? k->max : v[i];
                    }
                pgk_pick(d, &kn);
                if (kn.v[vi] < 32)
                    mask |= 1u << kn.v[vi];
            }
    return mask;
}

/* The catalog for target t: the training kernels, or every kernel (all),
 * each in its variants (every one with all). */
static size_t catalog(pg_target t, which cat, pgrt_warm *list, pgk_knobs *kn, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < pgk_count() && n < max; i++) {
        const pgk_desc *d = pgk_at(i);
        if (!pgk_supports(d, t))
            continue;
        bool all = cat == CAT_ALL, train = false;
        size_t nt = cat == CAT_LM ? LM_KERNELS : sizeof training / sizeof training[0];
        for (size_t j = 0; j < nt; j++)
            train |= strcmp(training[j], d->name) == 0;
        if (!all && !train)
            continue;
        int vi = pgk_knob_index(d, "variant");
        uint32_t lo = 0, hi = 0, mask = 1;
        if (vi >= 0) {
            lo = d->knobs[vi].min;
            hi = d->knobs[vi].max;
            mask = all ? ~0u : picked_variants(d, vi);
        }
        for (uint32_t v = lo; v <= hi && n < max; v++) {
            if (vi >= 0 && (v >= 32 || !(mask >> v & 1)))
                continue;
            pgk_knobs_default(d, &kn[n]);
            if (vi >= 0)
                kn[n].v[vi] = v;
            list[n].kernel = d->name;
            list[n].knobs = &kn[n];
            n++;
        }
    }
    return n;
}

static int by_jit(const void *a, const void *b)
{
    const pgrt_prewarm_module *x = a, *y = b;
    return (x->jit_ms < y->jit_ms) - (x->jit_ms > y->jit_ms);
}

/* One phase in this process: print "key=value ..." on stdout. */
static int phase(const char *name, int threads, which all)
{
    double t0 = now_ms();
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (pgrt_err_unavailable(rc)) {
        fprintf(stderr, "skip: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return 77;
    }
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return 1;
    }
    double ctx_ms = now_ms() - t0;
    int used = pgrt_ctx_set_jit_threads(ctx, strcmp(name, "serial") == 0 ? 1 : threads);
    static pgrt_warm list[MAX_WARM];
    static pgk_knobs kn[MAX_WARM];
    size_t n = catalog(pgrt_ctx_target(ctx), all, list, kn, MAX_WARM);
    static int rcs[MAX_WARM];
    static pgrt_prewarm_report rep;
    pgrt_cache_stats s0, s1;
    pgrt_cache_stats_get(ctx, &s0);
    t0 = now_ms();
    rc = pgrt_prewarm_list(ctx, list, n, rcs, &rep);
    double ms = now_ms() - t0;
    pgrt_cache_stats_get(ctx, &s1);
    /* A module that fails is named and left out; the others count. */
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        if (rcs[i]) {
            failed++;
            fprintf(stderr, "%s: %s failed: %s\n", name, list[i].kernel, pgrt_err_name(rcs[i]));
        }
    if (rc)
        fprintf(stderr, "%s: pgrt_prewarm: %s: %s\n", name, pgrt_err_name(rc),
                pgrt_last_message());
    if (failed == n) {
        pgrt_ctx_destroy(&ctx);
        return 1;
    }
    /* Where the call's time went: before the first JIT (building the PTX),
     * up to the end of the last, and after it (writes, joins, the report). */
    double first = 0, last = 0;
    for (size_t i = 0; i < rep.modules; i++) {
        if (rep.list[i].rc || !rep.list[i].loaded)
            continue;
        if (first == 0 || rep.list[i].start_ms < first)
            first = rep.list[i].start_ms;
        if (rep.list[i].end_ms > last)
            last = rep.list[i].end_ms;
    }
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    printf("phase=%s ms=%.3f ctx_ms=%.3f failed=%zu modules=%llu threads=%d jit_ms=%.3f emit_ms=%.3f "
           "load_ms=%.3f cubin_bytes=%llu disk_hits=%llu disk_misses=%llu disk_writes=%llu "
           "first_ms=%.3f last_ms=%.3f device=%s cc=%d.%d driver=%d\n",
           name, ms, ctx_ms, failed, (unsigned long long)(s1.misses - s0.misses), used,
           s1.jit_ms - s0.jit_ms, rep.emit_ms, s1.load_ms - s0.load_ms,
           (unsigned long long)(s1.cubin_bytes - s0.cubin_bytes),
           (unsigned long long)(s1.disk_hits - s0.disk_hits),
           (unsigned long long)(s1.disk_misses - s0.disk_misses),
           (unsigned long long)(s1.disk_writes - s0.disk_writes), first, last,
           info.target == PG_TARGET_COUNT
               ? "?" : pg_target_name(info.target), info.cc_major, info.cc_minor,
           info.driver_version);
    /* The ten longest JITs, and when each ran. */
    qsort(rep.list, rep.modules, sizeof rep.list[0], by_jit);
    for (size_t i = 0; i < rep.modules && i < 10; i++)
        printf("module %s jit_ms=%.1f ptx_bytes=%zu cubin_bytes=%zu start_ms=%.1f end_ms=%.1f\n",
               rep.list[i].key, rep.list[i].jit_ms, rep.list[i].ptx_bytes,
               rep.list[i].cubin_bytes, rep.list[i].start_ms, rep.list[i].end_ms);
    fflush(stdout);
    pgrt_ctx_destroy(&ctx);
    return 0;
}

typedef struct figures {
    double ms, ctx_ms, jit_ms, emit_ms, load_ms;
    double first_ms, last_ms; /* the first JIT's start, the last one's end */
    unsigned long long modules, failed, cubin_bytes, disk_hits, disk_misses, disk_writes;
    int threads;
    char target[16];
} figures;

static double field(const char *line, const char *key)
{
    char pat[40];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1.0;
}

/* Run a phase in a new process; parse its line. */
static int run_phase(const char *self, const char *name, int threads, which all, const char *dir,
                     figures *f, char *modules, size_t modules_len)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        close(fds[1]);
        bool cache = strcmp(name, "cold") == 0 || strcmp(name, "disk") == 0;
        setenv("PTXGEN_CACHE", cache ? "1" : "0", 1);
        setenv("PTXGEN_CACHE_DIR", dir, 1);
        char t[16];
        snprintf(t, sizeof t, "%d", threads);
        execl(self, self, "--phase", name, "--threads", t, "--catalog", cat_names[all],
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[1024] = " ";
    FILE *in = fdopen(fds[0], "r");
    if (!in || !fgets(line + 1, sizeof line - 1, in))
        line[1] = '\0';
    /* The module lines that follow, kept for the last run. */
    char ml[256];
    size_t used = 0;
    if (modules_len)
        modules[0] = '\0';
    while (in && fgets(ml, sizeof ml, in)) {
        size_t l = strlen(ml);
        if (used + l + 3 < modules_len) {
            memcpy(modules + used, "  ", 2);
            memcpy(modules + used + 2, ml, l + 1);
            used += l + 2;
        }
    }
    if (in)
        fclose(in);
    int status = 0;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (rc)
        return rc;
    f->ms = field(line, "ms");
    f->ctx_ms = field(line, "ctx_ms");
    f->jit_ms = field(line, "jit_ms");
    f->emit_ms = field(line, "emit_ms");
    f->load_ms = field(line, "load_ms");
    f->first_ms = field(line, "first_ms");
    f->last_ms = field(line, "last_ms");
    f->modules = (unsigned long long)field(line, "modules");
    f->failed = (unsigned long long)field(line, "failed");
    f->cubin_bytes = (unsigned long long)field(line, "cubin_bytes");
    f->disk_hits = (unsigned long long)field(line, "disk_hits");
    f->disk_misses = (unsigned long long)field(line, "disk_misses");
    f->disk_writes = (unsigned long long)field(line, "disk_writes");
    f->threads = (int)field(line, "threads");
    const char *dev = strstr(line, " device=");
    if (dev)
        sscanf(dev, " device=%15s", f->target);
    if (f->ms < 0)
        fprintf(stderr, "bench_prewarm: phase %s printed no figures\n", name);
    return f->ms < 0;
}

static int cmp_fig(const void *a, const void *b)
{
    double x = ((const figures *)a)->ms, y = ((const figures *)b)->ms;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = 0, runs = 3;
    const char *dir = NULL, *phase_name = NULL;
    bool driver_cache = false;
    which all = CAT_TRAINING;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--phase") && i + 1 < argc)
            phase_name = argv[++i];
        else if (!strcmp(argv[i], "--driver-cache"))
            driver_cache = true;
        else if (!strcmp(argv[i], "--catalog") && i + 1 < argc && !strcmp(argv[i + 1], "all"))
            all = CAT_ALL, i++;
        else if (!strcmp(argv[i], "--catalog") && i + 1 < argc && !strcmp(argv[i + 1], "lm"))
            all = CAT_LM, i++;
        else if (!strcmp(argv[i], "--catalog") && i + 1 < argc &&
                 !strcmp(argv[i + 1], "training"))
            all = CAT_TRAINING, i++;
        else {
            fprintf(stderr, "usage: bench_prewarm [--threads N] [--runs R] [--dir DIR] "
                            "[--driver-cache] [--catalog training|all|lm]\n");
            return 2;
        }
    }
    if (threads < 0 || runs < 1 || runs > 100) {
        fprintf(stderr, "bench_prewarm: --threads must be >= 0 and --runs 1..100\n");
        return 2;
    }
    if (phase_name)
        return phase(phase_name, threads, all);

    if (!driver_cache)
        setenv("CUDA_CACHE_DISABLE", "1", 1);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        fprintf(stderr, "bench_prewarm: readlink /proc/self/exe: %s\n", strerror(errno));
        return 1;
    }
    self[sl] = '\0';
    char tmpl[] = "/tmp/ptxgen-bench-cache-XXXXXX";
    bool own_dir = !dir;
    if (own_dir && !(dir = mkdtemp(tmpl))) {
        fprintf(stderr, "bench_prewarm: mkdtemp: %s\n", strerror(errno));
        return 1;
    }

    /* Each phase R times, the median kept; "cold" empties the directory
     * before each of its runs, "disk" runs after the last of them. */
    static const char *const names[] = {"serial", "parallel", "cold", "disk"};
    figures med[4];
    static char slow[4][4096];
    static char each[4][1024]; /* every run's time, in run order */
    int rc = 0;
    for (int p = 0; p < 4 && rc == 0; p++) {
        figures f[100];
        for (int r = 0; r < runs && rc == 0; r++) {
            memset(&f[r], 0, sizeof f[r]);
            if (p == 2) {
                char cmd[4200];
                snprintf(cmd, sizeof cmd, "rm -f '%s'/*.cubin", dir);
                if (system(cmd) != 0)
                    fprintf(stderr, "bench_prewarm: could not empty %s\n", dir);
            }
            rc = run_phase(self, names[p], threads, all, dir, &f[r], slow[p], sizeof slow[p]);
            size_t used = strlen(each[p]);
            if (rc == 0 && used + 64 < sizeof each[p])
                snprintf(each[p] + used, sizeof each[p] - used, " %.1f (%.1f-%.1f)", f[r].ms,
                         f[r].first_ms, f[r].last_ms);
        }
        if (rc == 0) {
            qsort(f, (size_t)runs, sizeof f[0], cmp_fig);
            med[p] = f[runs / 2];
        }
    }
    if (own_dir) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_prewarm: could not remove %s\n", dir);
    }
    if (rc == 77) {
        fprintf(stderr, "bench_prewarm: no CUDA device; skipped\n");
        return 77;
    }
    if (rc)
        return 1;

    printf("pre-warm of the %s catalog, target %s, CUDA_CACHE_DISABLE=%s, median of %d\n",
           cat_names[all], med[0].target, getenv("CUDA_CACHE_DISABLE") ? getenv("CUDA_CACHE_DISABLE") : "(unset)",
           runs);
    printf("%-9s %8s %7s %8s %6s %10s %9s %9s %9s %11s %9s %8s %8s %8s\n", "phase", "ms",
           "threads", "modules", "failed", "JIT ms", "emit ms", "load ms", "ctx ms",
           "cubin bytes", "disk hit", "written", "1st JIT", "last end");
    for (int p = 0; p < 4; p++)
        printf("%-9s %8.1f %7d %8llu %6llu %10.1f %9.1f %9.1f %9.1f %11llu %9llu %8llu %8.1f "
               "%8.1f\n",
               names[p], med[p].ms, med[p].threads, med[p].modules, med[p].failed, med[p].jit_ms,
               med[p].emit_ms, med[p].load_ms, med[p].ctx_ms, med[p].cubin_bytes,
               med[p].disk_hits, med[p].disk_writes, med[p].first_ms, med[p].last_ms);
    printf("every run, ms (the first JIT's start - the last one's end, from the pool's start):\n");
    for (int p = 0; p < 4; p++)
        printf("  %-9s%s\n", names[p], each[p]);
    for (int p = 0; p < 3; p += 2)
        printf("the slowest JITs of the %s phase (its last run; start and end from the pool's "
               "start):\n%s", names[p], slow[p]);
    printf("goal: cold parallel (cache written) %.1f ms <= %.0f ms: %s (serial %.1f ms, "
           "parallel without the cache %.1f ms)\n",
           med[2].ms, GOAL_COLD_MS, med[2].ms <= GOAL_COLD_MS ? "met" : "MISSED", med[0].ms,
           med[1].ms);
    printf("goal: a new process from the disk cache %.1f ms <= %.0f ms: %s (%llu of %llu "
           "modules from disk)\n",
           med[3].ms, GOAL_DISK_MS, med[3].ms <= GOAL_DISK_MS ? "met" : "MISSED",
           med[3].disk_hits, med[3].modules);
    if (med[3].disk_hits + med[3].failed < med[3].modules) {
        fprintf(stderr, "bench_prewarm: the disk phase JIT-compiled %llu modules\n",
                med[3].modules - med[3].failed - med[3].disk_hits);
        return 1;
    }
    return 0;
}
