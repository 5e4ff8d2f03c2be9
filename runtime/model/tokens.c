/* SPDX-License-Identifier: MIT */
/* Token files: little-endian int32 ids, read through a mapping. */
#include "model_internal.h"

#include <stdlib.h>

struct pgrt_tokens {
    model_map map;
    size_t n;
};

static int32_t id_at(const pgrt_tokens *t, size_t i)
{
    const uint8_t *p = (const uint8_t *)t->map.data + 4 * i;
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int pgrt_tokens_open(const char *path, int64_t vocab, pgrt_tokens **out)
{
    RT_NONNULL(__func__, path, "path");
    RT_NONNULL(__func__, out, "out");
    if (vocab <= 0)
        return model_fail(PGRT_EINVAL, "pgrt_tokens_open: vocab %lld is not positive",
                          (long long)vocab);
    *out = NULL;
    pgrt_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return model_fail(PGRT_ENOMEM, "out of memory");
    int rc = model_map_open(path, &t->map);
    if (!rc && t->map.len == 0)
        rc = model_fail(PGRT_EINVAL, "%s: empty token file", path);
    if (!rc && t->map.len % 4)
        rc = model_fail(PGRT_EINVAL, "%s: %zu bytes, not a whole number of int32 ids", path,
                        t->map.len);
    if (!rc) {
        t->n = t->map.len / 4;
        for (size_t i = 0; i < t->n; i++) {
            int32_t id = id_at(t, i);
            if (id < 0 || id >= vocab) {
                rc = model_fail(PGRT_ERANGE, "%s: token id %ld at byte %zu is outside [0, %lld)",
                                path, (long)id, 4 * i, (long long)vocab);
                break;
            }
        }
    }
    if (rc) {
        pgrt_tokens_close(&t);
        return rc;
    }
    *out = t;
    return 0;
}

void pgrt_tokens_close(pgrt_tokens **t)
{
    if (!t || !*t)
        return;
    model_map_close(&(*t)->map);
    free(*t);
    *t = NULL;
}

size_t pgrt_tokens_count(const pgrt_tokens *t) { return t ? t->n : 0; }

/* (a * b) mod m without overflow */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
    uint64_t r = 0;
    a %= m;
    b %= m;
    while (b) {
        if (b & 1)
            r = r >= m - a ? r - (m - a) : r + a;
        a = a >= m - a ? a - (m - a) : a + a;
        b >>= 1;
    }
    return r;
}

void pgrt_tokens_batch(const pgrt_tokens *t, uint64_t step, size_t n, int32_t *out)
{
    if (!t || !t->n || !out)
        return;
    size_t at = (size_t)mulmod(step, n, t->n);
    for (size_t i = 0; i < n; i++) {
        out[i] = id_at(t, at);
        if (++at == t->n)
            at = 0;
    }
}
