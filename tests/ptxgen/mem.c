/* SPDX-License-Identifier: MIT */
/*
 * Allocation failure: make the N-th allocation fail, for every N through a
 * whole kernel build and emission, and check the builder returns an error
 * (never crashes, never emits). Leaks show under the sanitizer build.
 */
#include "ptxgen/pgk.h"
#include "util.h"

#include <stdlib.h>

static long countdown; /* allocations left before one fails; <0: never */
static long live_blocks;

static void *fail_alloc(size_t n, void *u)
{
    (void)u;
    if (countdown == 0)
        return NULL;
    if (countdown > 0)
        countdown--;
    void *p = malloc(n);
    if (p)
        live_blocks++;
    return p;
}

static void *fail_realloc(void *p, size_t n, void *u)
{
    (void)u;
    if (countdown == 0)
        return NULL;
    if (countdown > 0)
        countdown--;
    void *q = realloc(p, n);
    if (q && !p)
        live_blocks++;
    return q;
}

static void counting_free(void *p, void *u)
{
    (void)u;
    if (p)
        live_blocks--;
    free(p);
}

int main(void)
{
    pg_allocator a = {fail_alloc, fail_realloc, counting_free, NULL};
    pg_set_allocator(&a);
    for (size_t ki = 0; ki < pgk_count(); ki++) {
        const pgk_desc *d = pgk_at(ki);
        long n = 0;
        for (;; n++) {
            countdown = n;
            live_blocks = 0;
            char *ptx = NULL, err[256] = "";
            /* an "a" kernel builds for its own target only */
            pg_target t = pgk_supports(d, PG_SM_90) ? PG_SM_90 : d->min_target;
            int rc = pgk_emit(d, t, NULL, &ptx, NULL, err, sizeof err);
            if (rc == 0) {
                REQUIRE(ptx != NULL);
                pgk_free(ptx);
                REQUIRE_INT_EQ(live_blocks, 0);
                break;
            }
            REQUIRE(ptx == NULL);
            REQUIRE(rc == PG_ENOMEM);
            REQUIRE(err[0] != '\0');
            REQUIRE_INT_EQ(live_blocks, 0);
            if (n > 100000) {
                TEST_FAIL_("%s never succeeded", d->name);
                break;
            }
        }
        fprintf(stderr, "  %s: failed cleanly at each of its first %ld allocations\n", d->name, n);
        REQUIRE(n > 0);
    }
    pg_set_allocator(NULL);
    TEST_DONE();
}
