/* SPDX-License-Identifier: MIT */
/* The catalog: every descriptor, in PGK_CATALOG order, and lookup by
 * position and name. The one file that names every kernel, so nothing in
 * kernels/ calls into it. */
#include "kernels.h"

#include <string.h>

#define PGK_ADDRESS(name) &pgk_desc_##name,
static const pgk_desc *const catalog[] = {PGK_CATALOG(PGK_ADDRESS)};
#undef PGK_ADDRESS

size_t pgk_count(void) { return sizeof catalog / sizeof catalog[0]; }

const pgk_desc *pgk_at(size_t i) { return i < pgk_count() ? catalog[i] : NULL; }

const pgk_desc *pgk_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < pgk_count(); i++)
        if (strcmp(catalog[i]->name, name) == 0)
            return catalog[i];
    return NULL;
}
