/* SPDX-License-Identifier: MIT */
/* Every allocation ptxgen makes goes through here: the replaceable
 * allocator, and the per-kernel arena on top of it. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static pg_allocator allocator;

void pg_set_allocator(const pg_allocator *a)
{
    if (a && a->alloc && a->realloc && a->free)
        allocator = *a;
    else
        memset(&allocator, 0, sizeof allocator);
}

void *pg_mem_alloc(size_t size)
{
    return allocator.alloc ? allocator.alloc(size, allocator.user) : malloc(size);
}

void *pg_mem_realloc(void *p, size_t size)
{
    return allocator.realloc ? allocator.realloc(p, size, allocator.user) : realloc(p, size);
}

void pg_mem_free(void *p)
{
    if (allocator.free)
        allocator.free(p, allocator.user);
    else
        free(p);
}

void pg_free(void *p) { pg_mem_free(p); }

/* ---------------------------------------------------------------- arena */

struct arena_chunk {
    arena_chunk *next;
    size_t used, size;
    max_align_t data[];
};

#define ARENA_CHUNK (32u * 1024u)

void *arena_alloc(arena *a, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    arena_chunk *c = a->head;
    if (!c || c->size - c->used < size) {
        size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
        c = pg_mem_alloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->size = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    return p;
}

char *arena_strdup(arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = arena_alloc(a, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void arena_free_all(arena *a)
{
    arena_chunk *c = a->head;
    while (c) {
        arena_chunk *next = c->next;
        pg_mem_free(c);
        c = next;
    }
    a->head = NULL;
}
