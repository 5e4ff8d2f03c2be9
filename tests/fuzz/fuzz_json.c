/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the strict JSON reader. Any bytes either parse into a DOM
 * whose every string is NUL-terminated valid UTF-8 of the stated length and
 * whose member lookups agree with document order, or are refused with a
 * message; never a crash, a leak or a read out of bounds.
 */
#include "fuzz.h"

#include "pgrt_json.h"
#include "ptxgen/pgrt_model.h"

#include <stdlib.h>
#include <string.h>

static void check_string(const char *s, size_t len)
{
    if (!s || strlen(s) != len)
        abort();
}

static void walk(const pgrt_jval *v, int depth)
{
    if (depth > 64)
        abort();
    size_t len;
    int64_t i;
    double d;
    bool b;
    switch (pgrt_jval_type(v)) {
    case PGRT_JSON_STRING: {
        const char *s = pgrt_jval_string(v, &len);
        check_string(s, len);
        break;
    }
    case PGRT_JSON_NUMBER:
        if (pgrt_jval_double(v, &d) != 0)
            abort();
        (void)pgrt_jval_int64(v, INT64_MIN, INT64_MAX, &i);
        break;
    case PGRT_JSON_BOOL:
        if (pgrt_jval_bool(v, &b) != 0)
            abort();
        break;
    case PGRT_JSON_ARRAY:
        for (size_t k = 0; k < pgrt_jval_count(v); k++)
            walk(pgrt_jval_item(v, k), depth + 1);
        if (pgrt_jval_item(v, pgrt_jval_count(v)) != NULL)
            abort();
        break;
    case PGRT_JSON_OBJECT:
        for (size_t k = 0; k < pgrt_jval_count(v); k++) {
            const char *key = pgrt_jval_key_at(v, k);
            check_string(key, strlen(key));
            /* keys are unique, so the lookup finds this very value */
            if (pgrt_jval_member(v, key) != pgrt_jval_value_at(v, k))
                abort();
            walk(pgrt_jval_value_at(v, k), depth + 1);
        }
        break;
    case PGRT_JSON_NULL:
        if (!pgrt_jval_is_null(v))
            abort();
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pgrt_json *doc = NULL;
    pgrt_json_limits lim = {.max_depth = 16, .max_string = 256, .max_number = 40};
    int rc = pgrt_json_parse((const char *)data, size, &lim, "fuzz", &doc);
    if (rc == 0) {
        if (!doc)
            abort();
        walk(pgrt_json_root(doc), 0);
        pgrt_json_destroy(&doc);
    } else if (doc || pgrt_last_message()[0] == '\0') {
        abort();
    }
    /* the defaults too */
    rc = pgrt_json_parse((const char *)data, size, NULL, NULL, &doc);
    if (rc == 0)
        walk(pgrt_json_root(doc), 0);
    pgrt_json_destroy(&doc);
    return 0;
}
