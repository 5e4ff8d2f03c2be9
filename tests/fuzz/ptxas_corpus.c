/* SPDX-License-Identifier: MIT */
/*
 * The ptxas check of the builder fuzz corpus: every corpus input that
 * emits PTX must be accepted by ptxas for its target.
 *
 *   ptxas_corpus PTXAS WORKDIR FILE...
 */
#include "fuzz.h"

#include "ptxgen/ptxgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>


int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ptxas_corpus PTXAS WORKDIR FILE...\n");
        return 2;
    }
    const char *ptxas = argv[1], *work = argv[2];
    int emitted = 0, failed = 0, refused = 0;
    for (int i = 3; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "cannot read %s\n", argv[i]);
            return 1;
        }
        static uint8_t buf[65536];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        char *ptx = NULL;
        const char *target = NULL;
        if (fuzz_builder_run(buf, n, &ptx, &target) != 0) {
            refused++;
            continue;
        }
        /* ptxas 13 no longer assembles sm_70 */
        if (strcmp(target, "sm_70") == 0) {
            free(ptx);
            continue;
        }
        char path[4096], cmd[8192];
        snprintf(path, sizeof path, "%s/corpus_%d.ptx", work, i);
        FILE *o = fopen(path, "w");
        if (!o || fputs(ptx, o) == EOF || fclose(o) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        free(ptx);
        emitted++;
        snprintf(cmd, sizeof cmd, "'%s' -arch=%s -o /dev/null '%s'", ptxas, target, path);
        int st = system(cmd);
        if (st != 0) {
            failed++;
            fprintf(stderr, "FAIL: ptxas refused the PTX of %s (%s), kept in %s\n", argv[i],
                    target, path);
        } else {
            remove(path);
        }
    }
    printf("%d corpus inputs: %d emitted PTX (%d refused by ptxas), %d stopped with an error\n",
           argc - 3, emitted, failed, refused);
    return failed ? 1 : 0;
}
