/* SPDX-License-Identifier: MIT */
/*
 * Pre-warm for a model (contract C-PREWARM-001): every module a backward
 * step of a transformer of this shape launches, loaded before the caller
 * fills the GPU with weights and before any capture.
 *
 * The plan walks the launches of one layer's backward step, with the knob
 * values the step would use, checks each against its kernel's knob ranges
 * and launch limits (so a config that cannot run fails here, naming the
 * config fields, not in the middle of a step), and keeps one entry per
 * cache key. Dimensions are run-time parameters of every kernel, so the
 * keys hardly depend on the shape: a kernel is one module whatever the
 * sizes, and only the GEMMs, whose tile variant is baked, add one module a
 * variant the dispatch picks (pgk_pick).
 */
#include "rt_blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the JIT pool */

/* One module to load, and what came of it. */
typedef struct warm_job {
    const pgk_desc *d;
    const pgk_knobs *kn;
    char *ptx;         /* built in the first stage (NULL: the load builds it) */
    size_t ptx_bytes;
    double emit_ms;
    double start_ms, end_ms; /* its load, from the start of the pre-warm */
    rt_load_info info;
    int rc;
    int cuda;          /* pgrt_last_cuda_error of the failure */
    char *msg;         /* its message (malloc'd), NULL on success */
} warm_job;

/* A cubin the JIT made, waiting to be written to the disk cache. */
typedef struct warm_write {
    struct warm_write *next;
    rt_cubin_pending *p;
} warm_write;

typedef struct warm_pool {
    pgrt_ctx *ctx;
    warm_job *jobs;
    size_t *order;     /* the jobs in the order workers load them */
    size_t n;
    double t0;
    atomic_size_t next_emit, next_load;
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t sorted_cv;
    size_t emitted;
    bool sorted;
    warm_write *writes;
} warm_pool;

/* Longest JIT first, so that the last to finish is a short one; the PTX's
 * length is the estimate (a GEMM tile variant or the unrolled optimizer
 * step takes ten times a row kernel's JIT). Ties keep list order. */
typedef struct cost {
    size_t bytes, i;
} cost;

static int by_cost(const void *a, const void *b)
{
    const cost *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

static void sort_loads(warm_pool *p)
{
    cost *c = malloc(p->n * sizeof *c);
    if (!c)
        return; /* list order: slower, same work */
    for (size_t i = 0; i < p->n; i++)
        c[i] = (cost){p->jobs[i].ptx_bytes, i};
    qsort(c, p->n, sizeof *c, by_cost);
    for (size_t i = 0; i < p->n; i++)
        p->order[i] = c[i].i;
    free(c);
}

/* First stage: build every job's PTX (a fraction of a JIT's time), so
 * that the second can take the longest JITs first. A build that fails
 * leaves ptx NULL: the load builds it again and reports the error. */
static void warm_emit(warm_pool *p)
{
    for (;;) {
        size_t i = atomic_fetch_add(&p->next_emit, 1);
        if (i >= p->n)
            break;
        warm_job *j = &p->jobs[i];
        if (j->d) {
            pgk_knobs def;
            const pgk_knobs *kn = j->kn;
            if (!kn) {
                pgk_knobs_default(j->d, &def);
                kn = &def;
            }
            char err[64];
            double t0 = rt_now_ms();
            if (pgk_emit(j->d, rt_build_target(p->ctx, j->d), kn, &j->ptx, NULL, err, sizeof err) != 0)
                j->ptx = NULL;
            j->emit_ms = rt_now_ms() - t0;
            j->ptx_bytes = j->ptx ? strlen(j->ptx) : 0;
        }
        pthread_mutex_lock(&p->lock);
        if (++p->emitted == p->n) {
            sort_loads(p); /* the last build orders the loads */
            p->sorted = true;
            pthread_cond_broadcast(&p->sorted_cv);
        }
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_lock(&p->lock);
    while (!p->sorted)
        pthread_cond_wait(&p->sorted_cv, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* Write the queued cubins until none are left. */
static void warm_drain(warm_pool *p)
{
    for (;;) {
        pthread_mutex_lock(&p->lock);
        warm_write *w = p->writes;
        if (w)
            p->writes = w->next;
        pthread_mutex_unlock(&p->lock);
        if (!w)
            return;
        rt_cubin_write(p->ctx, w->p);
        free(w);
    }
}

/* Build, then load until no job is left, then write the cubins the JITs
 * left (of this thread and others still compiling): the disk writes run
 * while the last JITs do, not after them. The driver's context is per
 * thread: each worker makes the context's (primary) one current first. */
static void *warm_worker(void *arg)
{
    warm_pool *p = arg;
    int bound = rt_ctx_bind(p->ctx);
    warm_emit(p);
    for (;;) {
        size_t i = atomic_fetch_add(&p->next_load, 1);
        if (i >= p->n)
            break;
        warm_job *j = &p->jobs[p->order[i]];
        if (!j->d)
            continue; /* refused before the run, rc and msg set */
        pgrt_kernel *k;
        j->start_ms = rt_now_ms() - p->t0;
        j->info.ptx = j->ptx;
        j->info.defer = true;
        j->rc = bound ? bound : rt_kernel_load(p->ctx, j->d, j->kn, NULL, &k, &j->info);
        j->end_ms = rt_now_ms() - p->t0;
        if (j->info.loaded && j->ptx)
            j->info.emit_ms = j->emit_ms;
        if (j->info.pending) {
            warm_write *w = malloc(sizeof *w);
            if (w) {
                w->p = j->info.pending;
                pthread_mutex_lock(&p->lock);
                w->next = p->writes;
                p->writes = w;
                pthread_mutex_unlock(&p->lock);
            } else {
                rt_cubin_write(p->ctx, j->info.pending);
            }
            j->info.pending = NULL;
        }
        if (j->rc) {
            j->cuda = pgrt_last_cuda_error();
            const char *m = pgrt_last_message();
            size_t len = strlen(m) + 1;
            j->msg = malloc(len);
            if (j->msg)
                memcpy(j->msg, m, len);
        }
    }
    warm_drain(p);
    return NULL;
}

/* Load every job, on up to ctx->jit_threads threads (the caller's among
 * them); returns the threads used, or PGRT_ENOMEM before any load. Jobs
 * that fail leave rc and msg set. */
static int warm_run(pgrt_ctx *ctx, warm_job *jobs, size_t n)
{
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return rt_fail(PGRT_ENOMEM, "pre-warm: out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    warm_pool pool = {.ctx = ctx, .jobs = jobs, .order = order, .n = n, .t0 = rt_now_ms()};
    atomic_init(&pool.next_emit, 0);
    atomic_init(&pool.next_load, 0);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.sorted_cv, NULL);
    pool.sorted = n == 0;
    size_t want = (size_t)ctx->jit_threads < n ? (size_t)ctx->jit_threads : n;
    pthread_t tid[64];
    size_t started = 0;
    for (; want > 1 && started < want - 1 && started < 64; started++)
        if (pthread_create(&tid[started], NULL, warm_worker, &pool) != 0)
            break; /* fewer threads, same work */
    warm_worker(&pool);
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    warm_drain(&pool); /* nothing is left; a guard */
    pthread_cond_destroy(&pool.sorted_cv);
    pthread_mutex_destroy(&pool.lock);
    for (size_t i = 0; i < n; i++) {
        pgk_free(jobs[i].ptx);
        jobs[i].ptx = NULL;
        jobs[i].info.ptx = NULL;
    }
    free(order);
    return (int)started + 1;
}

/* The first failure in list order becomes this thread's message, with how
 * many others failed; returns its code (0 when none failed). */
static int warm_report(warm_job *jobs, size_t n)
{
    size_t first = n, failed = 0;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].rc) {
            failed++;
            if (first == n)
                first = i;
        }
    if (!failed)
        return 0;
    warm_job *j = &jobs[first];
    char more[96] = "";
    if (failed > 1)
        snprintf(more, sizeof more, " (and %zu more of the %zu modules failed)", failed - 1, n);
    rt_msg_set(j->cuda, j->msg ? j->msg : "out of memory for the message");
    if (more[0])
        rt_msg_append("%s", more);
    return j->rc;
}

static void warm_free(warm_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(jobs[i].msg);
    free(jobs);
}

/* The report's entry i from job i; key is the module's cache key. */
static void report_add(pgrt_prewarm_report *out, const warm_job *j, const char *key)
{
    const rt_load_info *li = &j->info;
    pgrt_prewarm_module *m = &out->list[out->modules++];
    snprintf(m->key, sizeof m->key, "%s", key);
    m->rc = j->rc;
    m->loaded = li->loaded && j->rc == 0;
    m->from_disk = li->from_disk;
    m->jit_ms = li->jit_ms;
    m->emit_ms = li->emit_ms;
    m->load_ms = li->load_ms;
    m->cubin_bytes = li->cubin_bytes;
    m->ptx_bytes = j->ptx_bytes;
    m->start_ms = j->start_ms;
    m->end_ms = j->end_ms;
    out->failed += j->rc != 0;
    out->loaded += m->loaded;
    out->hits += j->rc == 0 && !li->loaded;
    out->disk_hits += m->loaded && m->from_disk;
    out->jit_ms += m->jit_ms;
    out->emit_ms += m->emit_ms;
    out->load_ms += m->load_ms;
    out->cubin_bytes += m->loaded ? m->cubin_bytes : 0;
}

int pgrt_prewarm_list(pgrt_ctx *ctx, const pgrt_warm *list, size_t n, int *rcs,
                      pgrt_prewarm_report *out)
{
    double t0 = rt_now_ms();
    if (out)
        memset(out, 0, sizeof *out);
    RT_NONNULL("pgrt_prewarm", ctx, "ctx");
    if (n > 0)
        RT_NONNULL("pgrt_prewarm", list, "list");
    if (out && n > PGRT_PREWARM_MAX)
        return rt_fail(PGRT_EINVAL, "pgrt_prewarm_list: %zu entries; the report holds at most %d",
                       n, PGRT_PREWARM_MAX);
    if (n == 0)
        return 0;
    warm_job *jobs = calloc(n, sizeof *jobs);
    if (!jobs)
        return rt_fail(PGRT_ENOMEM, "pgrt_prewarm: out of memory");
    /* A bad entry is one module's failure like any other: the rest load. */
    for (size_t i = 0; i < n; i++) {
        warm_job *j = &jobs[i];
        j->d = list[i].kernel ? pgk_find(list[i].kernel) : NULL;
        j->kn = list[i].knobs;
        if (!j->d) {
            j->rc = list[i].kernel
                        ? rt_fail(PGRT_ENOTFOUND, "pgrt_prewarm: unknown kernel \"%s\"",
                                  list[i].kernel)
                        : rt_fail(PGRT_EINVAL, "pgrt_prewarm: entry %zu has no kernel name", i);
            j->msg = strdup(pgrt_last_message());
        }
    }
    int threads = warm_run(ctx, jobs, n);
    if (threads < 0) {
        warm_free(jobs, n);
        return threads;
    }
    if (rcs)
        for (size_t i = 0; i < n; i++)
            rcs[i] = jobs[i].rc;
    for (size_t i = 0; out && i < n; i++) {
        char key[PGRT_PREWARM_KEY_MAX] = "";
        if (jobs[i].d) {
            pgk_knobs kn;
            if (jobs[i].kn)
                kn = *jobs[i].kn;
            else
                pgk_knobs_default(jobs[i].d, &kn);
            if (pgk_cache_key(jobs[i].d, rt_build_target(ctx, jobs[i].d), &kn, key, sizeof key) < 0)
                snprintf(key, sizeof key, "%s", jobs[i].d->name);
        } else {
            snprintf(key, sizeof key, "%s", list[i].kernel ? list[i].kernel : "(none)");
        }
        report_add(out, &jobs[i], key);
    }
    if (out) {
        out->threads = threads;
        out->total_ms = rt_now_ms() - t0;
    }
    int rc = warm_report(jobs, n);
    warm_free(jobs, n);
    return rc;
}

int pgrt_prewarm_each(pgrt_ctx *ctx, const pgrt_warm *list, size_t n, int *rcs)
{
    return pgrt_prewarm_list(ctx, list, n, rcs, NULL);
}

int pgrt_prewarm(pgrt_ctx *ctx, const pgrt_warm *list, size_t n)
{
    return pgrt_prewarm_each(ctx, list, n, NULL);
}

/* ---------------------------------------------------------------- the model's plan */

/* One dimension of a launch and the config expression it comes from (for
 * messages). */
typedef struct dim {
    uint64_t v;
    const char *expr;
} dim;

typedef struct knob_value {
    const char *knob;
    dim value;
} knob_value;

typedef struct plan_entry {
    const pgk_desc *d;
    pgk_knobs kn;
    char key[PGRT_PREWARM_KEY_MAX];
} plan_entry;

typedef struct plan {
    pg_target target;
    plan_entry e[PGRT_PREWARM_MAX];
    size_t n;
    uint64_t clip_partials; /* sum of squared_sum_reduce blocks over the trainable tensors */
} plan;

/* One launch of the step: kernel `name` with these knob values. `what`
 * says where in the step it is. */
static int add(plan *p, const char *name, const char *what, const knob_value *kv, size_t nkv)
{
    const pgk_desc *d = pgk_find(name);
    if (!d)
        return rt_fail(PGRT_EKERNEL, "pgrt_prewarm_model: the catalog has no %s", name);
    if (!pgk_supports(d, p->target))
        return rt_fail(PGRT_ETARGET, "pgrt_prewarm_model: %s needs %s, which needs %s; the device "
                       "is %s", what, name, pg_target_name(d->min_target),
                       pg_target_name(p->target));
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    for (size_t i = 0; i < nkv; i++) {
        int ki = pgk_knob_index(d, kv[i].knob);
        if (ki < 0)
            return rt_fail(PGRT_EKERNEL, "pgrt_prewarm_model: %s has no knob %s", name,
                           kv[i].knob);
        const pgk_knob *k = &d->knobs[ki];
        uint64_t v = kv[i].value.v;
        if (v < k->min || v > k->max)
            return rt_fail(PGRT_ERANGE, "pgrt_prewarm_model: %s = %llu is outside [%u, %u], the "
                           "range of %s's %s (%s)", kv[i].value.expr, (unsigned long long)v,
                           k->min, k->max, name, k->name, what);
        kn.v[ki] = (uint32_t)v;
    }
    pgk_pick(d, &kn); /* the baked knobs the dispatch would choose (a GEMM's variant) */
    pgk_launch cfg;
    char err[256] = "";
    if (pgk_launch_for(d, &kn, &cfg, err, sizeof err) != 0)
        return rt_fail(PGRT_ERANGE, "pgrt_prewarm_model: %s: %s", what, err);
    char key[PGRT_PREWARM_KEY_MAX];
    if (pgk_cache_key(d, p->target, &kn, key, sizeof key) < 0)
        return rt_fail(PGRT_EKERNEL, "pgrt_prewarm_model: %s: the cache key does not fit", name);
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->e[i].key, key) == 0)
            return 0;
    if (p->n == PGRT_PREWARM_MAX)
        return rt_fail(PGRT_EKERNEL, "pgrt_prewarm_model: more than %d modules", PGRT_PREWARM_MAX);
    plan_entry *e = &p->e[p->n++];
    e->d = d;
    e->kn = kn;
    memcpy(e->key, key, sizeof key);
    return 0;
}

static dim mul(dim a, dim b, char *buf, size_t len)
{
    snprintf(buf, len, "%s * %s", a.expr, b.expr);
    return (dim){a.v * b.v, buf};
}

typedef enum gemm_op { OP_A, OP_A_ACC, OP_B, OP_F16_A, OP_FORWARD } gemm_op;

/* A GEMM of the step, forward C[m,n] = A[m,k]·B[k,n] in the names of
 * DESIGN §3 (add() picks the variant the dispatch would). */
static int add_gemm(plan *p, gemm_op op, dim m, dim n, dim k, const char *what)
{
    static const char *const names[] = {"gemm_backward_a", "gemm_backward_a_accumulate",
                                        "gemm_backward_b", "gemm_f16_backward_a",
                                        "gemm_forward"};
    knob_value kv[3] = {{"m", m}, {"n", n}, {"k", k}};
    return add(p, names[op], what, kv, 3);
}

static int add_n(plan *p, const char *name, dim n, const char *what)
{
    knob_value kv[1] = {{"n", n}};
    return add(p, name, what, kv, 1);
}

/* A trainable tensor of n elements: its gradient's share of the fused
 * clip and its AdamW step. */
static int add_trainable(plan *p, dim n, const char *what)
{
    int rc;
    if ((rc = add_n(p, "squared_sum_reduce", n, what)) ||
        (rc = add_n(p, "gradient_clip_gpu_scale", n, what)) ||
        (rc = add_n(p, "adamw_step_dev", n, what)))
        return rc;
    p->clip_partials += pgk_squared_sum_num_blocks((uint32_t)n.v);
    return 0;
}

/* The seed's flat shape of a model's step, which the plan reads. */
typedef struct seed_shape {
    uint32_t hidden, q_dim, kv_hidden, max_seq_len, lora_rank, intermediate, num_heads,
        max_batch;
    bool full_fp32, f16_weights;
} seed_shape;

static int check_config(const pgrt_model_config *m, const pgrt_prewarm_step *st, seed_shape *c)
{
    static const char fn[] = "pgrt_prewarm_model";
    RT_NONNULL(fn, m, "model");
    RT_NONNULL(fn, st, "step");
    const struct {
        const char *name;
        int v;
    } need[] = {{"hidden", m->hidden},     {"intermediate", m->intermediate},
                {"heads", m->heads},       {"kv_heads", m->kv_heads},
                {"head_dim", m->head_dim}};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i].v <= 0)
            return rt_fail(PGRT_EINVAL, "%s: model->%s is %d", fn, need[i].name, need[i].v);
    if (st->max_seq_len == 0)
        return rt_fail(PGRT_EINVAL, "%s: step->max_seq_len is 0", fn);
    if (st->lora_rank == 0 && !st->full_fp32)
        return rt_fail(PGRT_EINVAL, "%s: nothing trains: step->lora_rank is 0 and "
                       "step->full_fp32 is false", fn);
    if (m->heads % m->kv_heads)
        return rt_fail(PGRT_EINVAL, "%s: model->heads (%d) is not a multiple of model->kv_heads "
                       "(%d)", fn, m->heads, m->kv_heads);
    uint64_t q_dim = (uint64_t)m->heads * (uint64_t)m->head_dim;
    if (q_dim > UINT32_MAX)
        return rt_fail(PGRT_ERANGE, "%s: model->heads * model->head_dim (%llu) is past u32", fn,
                       (unsigned long long)q_dim);
    *c = (seed_shape){.hidden = (uint32_t)m->hidden, .q_dim = (uint32_t)q_dim,
                      .kv_hidden = (uint32_t)m->kv_heads * (uint32_t)m->head_dim,
                      .max_seq_len = st->max_seq_len, .lora_rank = st->lora_rank,
                      .intermediate = (uint32_t)m->intermediate, .num_heads = (uint32_t)m->heads,
                      .max_batch = st->max_batch, .full_fp32 = st->full_fp32,
                      .f16_weights = st->f16_weights};
    return 0;
}

/* Every launch of one layer's backward step (all layers launch the same),
 * and the optimizer's. */
static int make_plan(const pgrt_model_config *model, const pgrt_prewarm_step *step,
                     pg_target target, plan *p)
{
    seed_shape shape = {0};
    int rc = check_config(model, step, &shape);
    if (rc)
        return rc;
    const seed_shape *c = &shape;
    memset(p, 0, sizeof *p);
    p->target = target;
    bool batched = c->max_batch > 1;
    const dim seq = {c->max_seq_len, "max_seq_len"};
    const dim S = {(uint64_t)(batched ? c->max_batch : 1) * c->max_seq_len,
                   batched ? "max_batch * max_seq_len" : "max_seq_len"};
    const dim H = {c->hidden, "hidden"}, qd = {c->q_dim, "heads * head_dim"};
    const dim kv = {c->kv_hidden, "kv_heads * head_dim"}, I = {c->intermediate, "intermediate"};
    const dim r = {c->lora_rank, "lora_rank"};
    const dim hd = {c->q_dim / c->num_heads, "head_dim"};
    char b1[96], b2[96], b3[96], b4[128];

    /* The row kernels, in step order. */
    if ((rc = add(p, "adamw_hyper_advance", "the optimizer's step counter", NULL, 0)) ||
        (rc = add(p, "adamw_multi_norm", "the folded optimizer's norm pass", NULL, 0)) ||
        (rc = add(p, "adamw_multi_finalize", "the folded optimizer's clip and step", NULL, 0)) ||
        (rc = add(p, "adamw_multi_step", "the folded optimizer's update", NULL, 0)))
        return rc;
    {
        knob_value kvs[2] = {{"rows", S}, {"cols", H}};
        if ((rc = add(p, "batched_rms_norm_backward", "RMSNorm backward", kvs, 2)) ||
            (rc = add(p, "rms_norm_gamma_reduce", "RMSNorm gamma gradient", kvs, 2)))
            return rc;
    }
    if ((rc = add_n(p, "silu_backward", mul(S, I, b1, sizeof b1), "the MLP's SiLU backward")) ||
        (rc = add_n(p, "residual_add", mul(S, H, b2, sizeof b2), "the residual gradient")))
        return rc;
    {
        const dim rows = batched ? mul((dim){c->max_batch, "max_batch"}, (dim){c->num_heads,
                                       "heads"}, b3, sizeof b3)
                                 : (dim){c->num_heads, "heads"};
        knob_value kvs[2] = {{"rows", mul(rows, seq, b4, sizeof b4)}, {"cols", seq}};
        if ((rc = add(p, "batched_softmax_backward", "attention softmax backward", kvs, 2)))
            return rc;
    }

    /* Attention inside one head of one sequence: P = softmax(Q·Kᵀ), O = P·V. */
    if ((rc = add_gemm(p, OP_A, seq, hd, seq, "attention dP = dO * V^T")) ||
        (rc = add_gemm(p, OP_B, seq, hd, seq, "attention dV = P^T * dO")) ||
        (rc = add_gemm(p, OP_FORWARD, seq, hd, seq, "attention dQ = dS * K")) ||
        (rc = add_gemm(p, OP_B, seq, hd, seq, "attention dK = dS^T * Q")))
        return rc;

    /* The projections y = x·W (W in×out); q, k and v share x, gate and up
     * too, so the later ones add into the input gradient. */
    const struct {
        const char *name;
        dim in, out;
        bool adds;
    } proj[] = {
        {"q", H, qd, false},   {"k", H, kv, true},  {"v", H, kv, true},    {"o", qd, H, false},
        {"gate", H, I, false}, {"up", H, I, true}, {"down", I, H, false},
    };
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++) {
        const dim in = proj[i].in, out = proj[i].out;
        char what[96];
        snprintf(what, sizeof what, "the %s projection's input gradient", proj[i].name);
        if (c->f16_weights) {
            /* dC cast to f16, then the tensor-core GEMM into a fresh
             * buffer (added with residual_add where it accumulates). */
            if ((rc = add_n(p, "cast_f32_to_f16", mul(S, out, b1, sizeof b1), what)) ||
                (rc = add_gemm(p, OP_F16_A, S, out, in, what)))
                return rc;
        } else if ((rc = add_gemm(p, proj[i].adds ? OP_A_ACC : OP_A, S, out, in, what))) {
            return rc;
        }
        if (c->full_fp32) {
            snprintf(what, sizeof what, "the %s projection's weight gradient", proj[i].name);
            if ((rc = add_gemm(p, OP_B, S, out, in, what)) ||
                (rc = add_trainable(p, mul(in, out, b1, sizeof b1), what)))
                return rc;
        }
        if (c->lora_rank) {
            /* u = x·A (A in×r), y += u·B (B r×out). */
            snprintf(what, sizeof what, "the %s projection's LoRA", proj[i].name);
            if ((rc = add_gemm(p, OP_B, S, out, r, what)) ||      /* grad B = uᵀ·dy */
                (rc = add_gemm(p, OP_A, S, out, r, what)) ||      /* du = dy·Bᵀ */
                (rc = add_gemm(p, OP_B, S, r, in, what)) ||       /* grad A = xᵀ·du */
                (rc = add_gemm(p, OP_A_ACC, S, r, in, what)) ||   /* dx += du·Aᵀ */
                (rc = add_trainable(p, mul(in, r, b1, sizeof b1), what)) ||
                (rc = add_trainable(p, mul(r, out, b2, sizeof b2), what)))
                return rc;
        }
    }
    if (c->full_fp32 && (rc = add_trainable(p, H, "the RMSNorm gammas")))
        return rc;
    knob_value total[1] = {{"n", {p->clip_partials, "the clip's partial sums"}}};
    return add(p, "clip_scale_reduce", "the fused clip", total, 1);
}

/* Load the plan's modules on the pool and fill the report. */
static int warm_plan(pgrt_ctx *ctx, const plan *p, pgrt_prewarm_report *out)
{
    warm_job *jobs = calloc(p->n ? p->n : 1, sizeof *jobs);
    if (!jobs)
        return rt_fail(PGRT_ENOMEM, "pgrt_prewarm_model: out of memory");
    for (size_t i = 0; i < p->n; i++) {
        jobs[i].d = p->e[i].d;
        jobs[i].kn = &p->e[i].kn;
    }
    int threads = warm_run(ctx, jobs, p->n);
    if (threads < 0) {
        warm_free(jobs, p->n);
        return threads;
    }
    for (size_t i = 0; out && i < p->n; i++)
        report_add(out, &jobs[i], p->e[i].key);
    if (out)
        out->threads = threads;
    int rc = warm_report(jobs, p->n);
    warm_free(jobs, p->n);
    return rc;
}

int pgrt_prewarm_model(pgrt_ctx *ctx, const pgrt_model_config *model,
                       const pgrt_prewarm_step *step, pgrt_prewarm_report *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    RT_NONNULL(__func__, ctx, "ctx");
    double t0 = rt_now_ms();
    plan *p = malloc(sizeof *p);
    if (!p)
        return rt_fail(PGRT_ENOMEM, "pgrt_prewarm_model: out of memory");
    int rc = make_plan(model, step, ctx->info.target, p);

    /* cuBLAS first: its handle takes device memory too. */
    bool use = false;
    if (rc == 0) {
        double c0 = rt_now_ms();
        rc = rt_blas_ready(ctx, NULL, &use);
        if (out) {
            out->cublas = use;
            out->cublas_ms = rt_now_ms() - c0;
        }
    }
    if (rc == 0)
        rc = warm_plan(ctx, p, out);
    free(p);
    if (out)
        out->total_ms = rt_now_ms() - t0;
    return rc;
}
