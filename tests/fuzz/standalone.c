/* SPDX-License-Identifier: MIT */
/*
 * A seeded driver for the fuzz targets when libFuzzer is not linked (gcc,
 * CI): replays every file given, then runs N inputs made by mutating them
 * (or random bytes when none), with a fixed seed, so a CI failure
 * reproduces exactly.
 *
 *   fuzz_X --runs N --seed S [FILE|DIR]...
 */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

static blob *seeds;
static size_t nseeds, capseeds;

static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t *p = malloc(65536);
    size_t n = p ? fread(p, 1, 65536, f) : 0;
    fclose(f);
    if (!p)
        return -1;
    if (nseeds == capseeds) {
        capseeds = capseeds ? capseeds * 2 : 64;
        blob *ns = realloc(seeds, capseeds * sizeof *seeds);
        if (!ns) {
            free(p);
            return -1;
        }
        seeds = ns;
    }
    seeds[nseeds++] = (blob){p, n};
    return 0;
}

static int add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz: cannot read '%s'\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return add_file(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    /* sorted, so the order (and the seeded mutations) never depend on the
     * file system */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn)
                break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        add_file(full);
        free(names[i]);
    }
    free(names);
    return 0;
}

int main(int argc, char **argv)
{
    long runs = 1000;
    rng = 0x9E3779B97F4A7C15ull;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            rng = strtoull(argv[++i], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
        else if (add_path(argv[i]) != 0)
            return 2;
    }
    for (size_t i = 0; i < nseeds; i++)
        LLVMFuzzerTestOneInput(seeds[i].p, seeds[i].n);
    uint8_t buf[1024];
    for (long r = 0; r < runs; r++) {
        size_t n;
        if (nseeds && (rnd() & 3)) {
            const blob *b = &seeds[rnd() % nseeds];
            n = b->n < sizeof buf ? b->n : sizeof buf;
            memcpy(buf, b->p, n);
            for (int m = (int)(rnd() % 8) + 1; m > 0 && n; m--) {
                switch (rnd() % 3) {
                case 0: buf[rnd() % n] = (uint8_t)rnd(); break;
                case 1: buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8)); break;
                default: if (n < sizeof buf) buf[n++] = (uint8_t)rnd(); break;
                }
            }
        } else {
            n = rnd() % 512;
            for (size_t i = 0; i < n; i++)
                buf[i] = (uint8_t)rnd();
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz: %zu corpus inputs and %ld generated inputs ran clean\n", nseeds, runs);
    for (size_t i = 0; i < nseeds; i++)
        free(seeds[i].p);
    free(seeds);
    return 0;
}
