/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the runtime's PTX header and target parsing (pure functions,
 * no GPU). Any text either parses into a bounded, NUL-terminated target
 * name or is refused with a message; the pre-load checks never crash.
 */
#include "fuzz.h"

#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_kernel.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    pgrt_ptx_info info;
    char err[256] = "";
    /* both the explicit length and the NUL-terminated form */
    int rc = pgrt_ptx_parse(text, size, &info, err, sizeof err);
    if (rc == 0) {
        if (memchr(info.target, '\0', sizeof info.target) == NULL)
            abort();
        for (int t = 0; t < PG_TARGET_COUNT; t++) {
            char e2[256];
            (void)pgrt_ptx_check(&info, (pg_target)t, 12080, e2, sizeof e2);
            (void)pgrt_ptx_check(&info, (pg_target)t, 0, e2, sizeof e2);
        }
    } else if (err[0] == '\0') {
        abort();
    }
    (void)pgrt_ptx_parse(text, 0, &info, err, sizeof err);
    if (size >= 2) {
        pg_target t;
        (void)pgrt_target_for_cc((int)(int8_t)data[0], (int)(int8_t)data[1], &t);
    }
    free(text);
    return 0;
}
