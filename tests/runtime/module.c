/* SPDX-License-Identifier: MIT */
/*
 * The module cache under many threads: 16 threads ask one context for the
 * same and for different kernels at once, through pgrt_kernel_get,
 * pgrt_launch and pgrt_prewarm, all starting on the same key together.
 * Afterwards the counters must add up (hits + misses == requests, misses ==
 * distinct keys, no failures, one module a key) and every thread must have
 * got the same kernel handle for the same key. Built with
 * -Db_sanitize=thread this is the cache's race test.
 *
 * The driver: $PGRT_LIBCUDA when set; otherwise the system's libcuda.so.1
 * when it finds a device; otherwise the fake driver given as the argument
 * (tests/runtime/fakecuda.h), which makes every load take a while so that
 * misses overlap. Launches use the clip kernels with buffers of their own
 * on each thread, so the test is safe on a real GPU too.
 *
 * Usage: test_module [FAKE_LIBCUDA]
 */
#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/ptxgen.h"
#include "test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define THREADS 16
#define ROUNDS 120
#define MAX_KEYS 64
#define LAUNCH_N 4096 /* elements of each thread's buffers */

/* A cache key: a kernel and the value of the knob it bakes (if any). */
typedef struct key {
    const pgk_desc *d;
    pgk_knobs kn;
} key;

static key keys[MAX_KEYS];
static int nkeys;
static pgrt_ctx *ctx;
static pthread_barrier_t start;

/* The four clip kernels: what the launches use. */
static const char *const launchable[] = {"squared_sum_reduce", "clip_scale_reduce",
                                         "gradient_clip_gpu_scale", "gradient_clip"};

typedef struct worker {
    int id;
    uint64_t requests;  /* cache lookups made (one per get, launch, warm entry) */
    uint64_t launches;  /* launches that went through */
    int errors;
    char first_error[256];
    bool asked[MAX_KEYS];        /* the keys this thread looked up, by any call */
    pgrt_kernel *seen[MAX_KEYS]; /* the handle this thread got for each key */
} worker;

static worker workers[THREADS];

/* Deterministic per-thread choices (xorshift). */
static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void fail(worker *w, const char *what, int rc)
{
    if (w->errors++ == 0)
        snprintf(w->first_error, sizeof w->first_error, "%s: %s: %s", what, pgrt_err_name(rc),
                 pgrt_last_message());
}

static void note(worker *w, int key_index, pgrt_kernel *k)
{
    w->asked[key_index] = true;
    if (!w->seen[key_index])
        w->seen[key_index] = k;
    else if (w->seen[key_index] != k)
        fail(w, "a second handle for one key", PGRT_ESTATE);
}

/* Knobs for key i with its unbaked sizes varied: they must not split the
 * key. */
static pgk_knobs varied(int i, uint32_t r)
{
    pgk_knobs kn = keys[i].kn;
    const pgk_desc *d = keys[i].d;
    int n = pgk_knob_index(d, "n");
    if (n >= 0)
        kn.v[n] = 1 + r % 100000;
    return kn;
}

typedef struct thread_bufs {
    pgrt_buf *x, *partials, *result;
} thread_bufs;

static int key_of(const char *name);

static int launch_one(worker *w, pgrt_stream *s, const thread_bufs *b, uint32_t r)
{
    const char *name = launchable[r % 4];
    uint32_t n = 1 + (r >> 2) % LAUNCH_N;
    const pgk_desc *d = pgk_find(name);
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    pgrt_arg a[4];
    size_t na = 3;
    uint32_t blocks = pgk_squared_sum_num_blocks(n);
    if (!strcmp(name, "squared_sum_reduce")) {
        kn.v[0] = n;
        a[0] = pgrt_arg_buf(b->x), a[1] = pgrt_arg_buf(b->partials), a[2] = pgrt_arg_u32(n);
    } else if (!strcmp(name, "clip_scale_reduce")) {
        kn.v[0] = blocks;
        a[0] = pgrt_arg_buf(b->partials), a[1] = pgrt_arg_u32(blocks), a[2] = pgrt_arg_f32(1.0f);
        a[3] = pgrt_arg_buf(b->result);
        na = 4;
    } else if (!strcmp(name, "gradient_clip_gpu_scale")) {
        kn.v[0] = n;
        a[0] = pgrt_arg_buf(b->x), a[1] = pgrt_arg_buf(b->result), a[2] = pgrt_arg_u32(n);
    } else {
        kn.v[0] = n;
        a[0] = pgrt_arg_buf(b->x), a[1] = pgrt_arg_f32(1.0f), a[2] = pgrt_arg_u32(n);
    }
    int rc = pgrt_launch(ctx, s, name, &kn, a, na);
    w->requests++;
    int ki = key_of(name);
    if (ki >= 0)
        w->asked[ki] = true;
    if (rc)
        fail(w, name, rc);
    else
        w->launches++;
    return rc;
}

/* The knob d bakes, or -1 (none); -2 for more than one, which this test
 * cannot vary. */
static int baked_knob(const pgk_desc *d)
{
    int bi = -1;
    for (size_t i = 0; i < d->nknobs; i++)
        if (d->knobs[i].baked)
            bi = bi == -1 ? (int)i : -2;
    return bi;
}

static int key_of(const char *name)
{
    for (int i = 0; i < nkeys; i++)
        if (!strcmp(keys[i].d->name, name) && baked_knob(keys[i].d) == -1)
            return i;
    return -1;
}

static void *work(void *arg)
{
    worker *w = arg;
    uint32_t seed = 0x9e3779b9u * (uint32_t)(w->id + 1);
    pgrt_stream *s = NULL;
    thread_bufs b = {NULL, NULL, NULL};
    int rc;
    if ((rc = pgrt_stream_create(ctx, &s)) || (rc = pgrt_buf_alloc(ctx, PG_F32, LAUNCH_N, &b.x)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, 256, &b.partials)) ||
        (rc = pgrt_buf_alloc(ctx, PG_F32, 2, &b.result)) || (rc = pgrt_buf_memset(b.x, 0)) ||
        (rc = pgrt_buf_memset(b.partials, 0)) || (rc = pgrt_buf_memset(b.result, 0)))
        fail(w, "setup", rc);

    /* Everyone misses on the same key at the same moment first. */
    pthread_barrier_wait(&start);
    pgrt_kernel *k = NULL;
    pgk_knobs kn0 = varied(0, next_rand(&seed));
    rc = pgrt_kernel_get(ctx, keys[0].d, &kn0, &k);
    w->requests++;
    if (rc)
        fail(w, "first get", rc);
    else
        note(w, 0, k);

    for (int round = 0; round < ROUNDS && !w->errors; round++) {
        uint32_t r = next_rand(&seed);
        switch ((r >> 28) % 3) {
        case 0: { /* one lookup */
            int i = (int)(r % (uint32_t)nkeys);
            pgk_knobs kn = varied(i, r >> 8);
            rc = pgrt_kernel_get(ctx, keys[i].d, &kn, &k);
            w->requests++;
            if (rc)
                fail(w, keys[i].d->name, rc);
            else
                note(w, i, k);
            break;
        }
        case 1: /* a launch by name: a lookup, checks, cuLaunchKernel */
            if (s && b.x && launch_one(w, s, &b, r >> 4) == 0) {
                /* ... and the handle it used is the cached one. */
                int i = key_of(launchable[(r >> 4) % 4]);
                if (i >= 0 && pgrt_kernel_get(ctx, keys[i].d, NULL, &k) == 0) {
                    w->requests++;
                    note(w, i, k);
                }
            }
            break;
        default: { /* a pre-warm list of three keys */
            pgrt_warm list[3];
            for (int j = 0; j < 3; j++) {
                int i = (int)((r >> (j * 6)) % (uint32_t)nkeys);
                list[j].kernel = keys[i].d->name;
                list[j].knobs = &keys[i].kn;
                w->asked[i] = true;
            }
            rc = pgrt_prewarm(ctx, list, 3);
            w->requests += 3;
            if (rc)
                fail(w, "pgrt_prewarm", rc);
            break;
        }
        }
    }
    if (s && (rc = pgrt_stream_sync(s)))
        fail(w, "pgrt_stream_sync", rc);
    pgrt_buf_destroy(&b.x);
    pgrt_buf_destroy(&b.partials);
    pgrt_buf_destroy(&b.result);
    pgrt_stream_destroy(&s);
    return NULL;
}

/* Every kernel the device's target supports; a kernel that bakes a knob
 * gives one key for each value the test uses. */
static void make_keys(pg_target t)
{
    for (size_t i = 0; i < pgk_count() && nkeys < MAX_KEYS; i++) {
        const pgk_desc *d = pgk_at(i);
        if (!pgk_supports(d, t))
            continue;
        int bi = baked_knob(d);
        if (bi == -2) {
            fprintf(stderr, "%s bakes several knobs, which this test cannot vary; skipped\n",
                    d->name);
            continue;
        }
        uint32_t lo = bi >= 0 ? d->knobs[bi].min : 0, hi = bi >= 0 ? d->knobs[bi].max : 0;
        if (hi - lo > 3)
            hi = lo + 3;
        for (uint32_t v = lo; v <= hi && nkeys < MAX_KEYS; v++) {
            keys[nkeys].d = d;
            pgk_knobs_default(d, &keys[nkeys].kn);
            if (bi >= 0)
                keys[nkeys].kn.v[bi] = v;
            nkeys++;
        }
    }
}

/* The driver: see the header comment. Returns the fake's handle (for its
 * counters) or NULL for a real driver. */
static void *open_driver(const char *fake, int *skip)
{
    *skip = 0;
    const char *env = getenv("PGRT_LIBCUDA");
    if (env && *env) {
        int rc = pgrt_ctx_create(&ctx, NULL);
        if (rc) {
            fprintf(stderr, "PGRT_LIBCUDA=%s: %s: %s\n", env, pgrt_err_name(rc),
                    pgrt_last_message());
            *skip = pgrt_err_unavailable(rc);
            return NULL;
        }
        /* It may be the fake itself. */
        void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (lib && !dlsym(lib, "fakecuda_loads")) {
            dlclose(lib);
            lib = NULL;
        }
        return lib;
    }
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (rc == 0) {
        fprintf(stderr, "using the system's CUDA driver\n");
        return NULL;
    }
    if (!fake) {
        fprintf(stderr, "no CUDA device (%s) and no fake driver given: skipped\n",
                pgrt_last_message());
        *skip = 1;
        return NULL;
    }
    fprintf(stderr, "no CUDA device (%s): using the fake driver\n", pgrt_err_name(rc));
    /* Loads that take 2 ms let misses of many threads overlap. Set before
     * any thread runs: the fake reads it with getenv. */
    setenv("FAKECUDA_JIT_US", "2000", 1);
    pgrt_ctx_params p = {fake, 0};
    rc = pgrt_ctx_create(&ctx, &p);
    if (rc) {
        fprintf(stderr, "the fake driver: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        return NULL;
    }
    return dlopen(fake, RTLD_NOW | RTLD_LOCAL);
}

int main(int argc, char **argv)
{
    int skip = 0;
    void *fk = open_driver(argc > 1 ? argv[1] : NULL, &skip);
    if (!ctx)
        return skip ? TEST_SKIP : 1;
    fakecuda_count_fn fk_loads = NULL, fk_launches = NULL;
    if (fk) {
        void *p = dlsym(fk, "fakecuda_loads");
        memcpy(&fk_loads, &p, sizeof p);
        p = dlsym(fk, "fakecuda_launch_count");
        memcpy(&fk_launches, &p, sizeof p);
    }
    int loads0 = fk_loads ? fk_loads() : 0, launches0 = fk_launches ? fk_launches() : 0;

    make_keys(pgrt_ctx_target(ctx));
    REQUIRE(nkeys > 4);
    /* The first key every thread asks for is one the launches use too. */
    int first = key_of("gradient_clip");
    REQUIRE(first >= 0);
    if (first > 0) {
        key t = keys[0];
        keys[0] = keys[first];
        keys[first] = t;
    }

    pgrt_cache_stats st0, st;
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st0), 0);
    REQUIRE_INT_EQ(pthread_barrier_init(&start, NULL, THREADS), 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i].id = i;
        REQUIRE_INT_EQ(pthread_create(&th[i], NULL, work, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);

    uint64_t requests = 0, launches = 0;
    for (int i = 0; i < THREADS; i++) {
        if (workers[i].errors)
            fprintf(stderr, "thread %d: %d errors, the first: %s\n", i, workers[i].errors,
                    workers[i].first_error);
        REQUIRE_INT_EQ(workers[i].errors, 0);
        requests += workers[i].requests;
        launches += workers[i].launches;
    }
    REQUIRE(launches > 0);

    /* One handle a key across all threads, and each key its own handle. */
    pgrt_kernel *handle[MAX_KEYS] = {NULL};
    uint64_t distinct = 0;
    int mismatches = 0, shared = 0;
    for (int k = 0; k < nkeys; k++) {
        bool asked = false;
        for (int i = 0; i < THREADS; i++) {
            pgrt_kernel *h = workers[i].seen[k];
            asked = asked || workers[i].asked[k];
            if (h && !handle[k])
                handle[k] = h;
            if (h && h != handle[k]) {
                fprintf(stderr, "key %d (%s): threads got different kernels\n", k,
                        keys[k].d->name);
                mismatches++;
            }
        }
        distinct += asked;
        if (handle[k]) {
            REQUIRE(pgrt_kernel_desc(handle[k]) == keys[k].d);
            for (int j = 0; j < k; j++)
                shared += handle[j] == handle[k];
        }
    }
    REQUIRE_INT_EQ(mismatches, 0);
    REQUIRE_INT_EQ(shared, 0);

    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    uint64_t hits = st.hits - st0.hits, misses = st.misses - st0.misses;
    fprintf(stderr, "%d threads, %llu of %d keys asked for, %llu requests: %llu hits, %llu "
            "misses, %llu launches\n", THREADS, (unsigned long long)distinct, nkeys,
            (unsigned long long)requests, (unsigned long long)hits, (unsigned long long)misses,
            (unsigned long long)launches);
    REQUIRE_INT_EQ(hits + misses, requests);
    REQUIRE_INT_EQ(st.failures - st0.failures, 0);
    /* Each key asked for was loaded exactly once, whoever asked first. */
    REQUIRE_INT_EQ(misses, distinct);
    REQUIRE_INT_EQ(st.modules - st0.modules, distinct);
    if (fk_loads) {
        REQUIRE_INT_EQ((uint64_t)(fk_loads() - loads0), misses);
        REQUIRE_INT_EQ((uint64_t)(fk_launches() - launches0), launches);
    }
    pgrt_ctx_destroy(&ctx);
    if (fk)
        dlclose(fk);
    TEST_DONE();
}
