/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the ptxgen-dump argument and knob parser. The input is split
 * at NUL bytes into argv. Options that write files (-o, --outdir, --all)
 * are dropped so a run touches nothing; output goes to /dev/null. Every
 * run must end with status 0, 1 or 2, and a status 2 must come with
 * exactly one line on stderr; a run that succeeds (and is no --help) set
 * no knob twice: a repeated knob is refused like a repeated --target.
 */
#include "fuzz.h"

#include "../../tools/dump_cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether argv, read as dump_main reads it, sets some knob twice (the same
 * NAME before '=' in two --set values) without asking for --help, which
 * ignores everything else. */
static bool knob_repeated(int argc, char **argv)
{
    const char *sets[64];
    int nsets = 0;
    bool help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            break;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            help = true;
        else if (!strcmp(a, "--set") && i + 1 < argc)
            sets[nsets++] = argv[++i];
        else if (!strncmp(a, "--set=", 6))
            sets[nsets++] = a + 6;
        else if ((!strcmp(a, "--target") || !strcmp(a, "-o") || !strcmp(a, "--outdir")) &&
                 i + 1 < argc)
            i++;
    }
    for (int i = 0; i < nsets && !help; i++)
        for (int j = 0; j < i; j++) {
            size_t n = strcspn(sets[i], "=");
            if (strcspn(sets[j], "=") == n && !strncmp(sets[i], sets[j], n))
                return true;
        }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    char *argv[64];
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    int argc = 0;
    argv[argc++] = (char *)"ptxgen-dump";
    for (size_t i = 0; i <= size && argc < 63;) {
        char *a = buf + i;
        size_t n = strlen(a);
        if (strcmp(a, "-o") && strcmp(a, "--outdir") && strcmp(a, "--all") &&
            strncmp(a, "-o", 2) && strncmp(a, "--outdir=", 9))
            argv[argc++] = a;
        i += n + 1;
    }
    argv[argc] = NULL;
    FILE *out = fopen("/dev/null", "w");
    char *errtext = NULL;
    size_t errlen = 0;
    FILE *err = open_memstream(&errtext, &errlen);
    if (!out || !err)
        abort();
    int rc = dump_main(argc, argv, out, err);
    fclose(out);
    fclose(err);
    if (rc != 0 && rc != 1 && rc != 2)
        abort();
    if (rc == 0 && knob_repeated(argc, argv))
        abort();
    if (rc == 2) {
        /* one line, naming the problem */
        char *nl = strchr(errtext, '\n');
        if (!nl || nl[1] != '\0' || nl == errtext)
            abort();
    }
    free(errtext);
    free(buf);
    return 0;
}
