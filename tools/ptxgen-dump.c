/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-dump: the process around dump_main(). Everything else lives in
 * dump_cli.c so that tests and fuzz targets can call it without exec.
 */
#include "dump_cli.h"

#include <errno.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rc = dump_main(argc, argv, stdout, stderr);
    /* dump_main flushes and checks what it writes; this catches anything
     * that slipped through, before exit() would flush it unchecked. */
    errno = 0;
    if (rc == DUMP_EXIT_OK && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, "ptxgen-dump: cannot write to standard output: %s\n",
                strerror(errno ? errno : EIO));
        rc = DUMP_EXIT_FAIL;
    }
    return rc;
}
