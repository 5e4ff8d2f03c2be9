/* SPDX-License-Identifier: MIT */
/*
 * Bad input to ptxgen-dump, through dump_main() with in-memory streams: for
 * every case exit status 2, nothing on standard output, exactly one line on
 * standard error ("ptxgen-dump: ..." naming the problem), and no file or
 * directory written. tests/tools/dump_cli.sh checks the same contract on the
 * built binary; this file pins the exact messages.
 */
#include "dump_cli.h"
#include "ptxgen/pgk.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_ARGS 12

static char tmpdir[256];

typedef struct run_result {
    int status;
    char *out, *err;
    size_t out_len, err_len;
} run_result;

static run_result run(const char *const *args)
{
    /* dump_main takes argv as main does: writable copies. */
    static char prog[] = "ptxgen-dump";
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = prog;
    for (; args[argc - 1] && argc <= MAX_ARGS; argc++) {
        argv[argc] = strdup(args[argc - 1]);
        if (!argv[argc]) {
            perror("strdup");
            exit(1);
        }
    }
    argv[argc] = NULL;

    run_result r = {0};
    FILE *out = open_memstream(&r.out, &r.out_len);
    FILE *err = open_memstream(&r.err, &r.err_len);
    if (!out || !err) {
        perror("open_memstream");
        exit(1);
    }
    r.status = dump_main(argc, argv, out, err);
    fclose(out);
    fclose(err);
    for (int i = 1; i < argc; i++)
        free(argv[i]);
    return r;
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

/* An argument naming a path in the scratch directory. */
static const char *scratch(const char *name)
{
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    int n = snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
    if (n < 0 || (size_t)n >= sizeof paths[0]) {
        fprintf(stderr, "scratch path for %.40s... is too long\n", name);
        exit(1);
    }
    return p;
}

/* Entries in the scratch directory other than `keep`. */
static int scratch_entries(void)
{
    DIR *dir = opendir(tmpdir);
    if (!dir)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "keep.ptx"))
            n++;
    closedir(dir);
    return n;
}

typedef struct cli_case {
    const char *args[MAX_ARGS];
    const char *words; /* the one stderr line contains this */
} cli_case;

#define A(...) {__VA_ARGS__, NULL}

static void check_case(const char *const *args, const char *words)
{
    run_result r = run(args);
    char shown[512] = "";
    for (size_t i = 0, o = 0; args[i] && o < sizeof shown - 2; i++)
        o += (size_t)snprintf(shown + o, sizeof shown - o, "%s ", args[i]);
    if (r.status != DUMP_EXIT_USAGE || r.out_len != 0 || !r.err || !strstr(r.err, words))
        fprintf(stderr, "ptxgen-dump %s-> %d, stdout %zu bytes, stderr \"%s\"\n", shown,
                r.status, r.out_len, r.err ? r.err : "");
    REQUIRE_INT_EQ(r.status, DUMP_EXIT_USAGE);
    REQUIRE_INT_EQ(r.out_len, 0);
    REQUIRE(r.err != NULL);
    if (r.err) {
        /* One line: "ptxgen-dump: <problem>\n" and nothing else. */
        REQUIRE(strncmp(r.err, "ptxgen-dump: ", 13) == 0);
        REQUIRE(r.err_len > 0 && r.err[r.err_len - 1] == '\n');
        REQUIRE(strchr(r.err, '\n') == r.err + r.err_len - 1);
        REQUIRE(strlen(r.err) == r.err_len); /* no NUL inside */
        REQUIRE_CONTAINS(r.err, words);
    }
    run_free(&r);
    /* Nothing written: the scratch directory holds only what it held. */
    REQUIRE_INT_EQ(scratch_entries(), 0);
}

static const cli_case cases[] = {
    /* unknown kernel, target, knob, option */
    {A("no_such_kernel"), "unknown kernel 'no_such_kernel' (see --list)"},
    {A("Gradient_clip"), "unknown kernel 'Gradient_clip'"},
    {A("gradient_clip", "--target", "sm_91"), "unknown target 'sm_91' (see --targets)"},
    {A("gradient_clip", "--target", "SM_90"), "unknown target 'SM_90'"},
    {A("gradient_clip", "--target="), "unknown target ''"},
    {A("--all", "--target", "sm_91", "--outdir", "@new"), "unknown target 'sm_91'"},
    {A("gradient_clip", "--set", "m=4"),
     "--set 'm=4': unknown knob 'm' for gradient_clip (knobs: n)"},
    {A("gradient_clip", "--frobnicate"), "unknown option '--frobnicate' (see --help)"},
    {A("gradient_clip", "-x"), "unknown option '-x'"},
    /* zero, negative, overflowing, non-numeric sizes */
    {A("gradient_clip", "--set", "n=0"), "knob n=0 is out of range [1, 4294967295]"},
    {A("gradient_clip", "--set", "n=-1"), "knob n: '-1' is not a non-negative integer"},
    {A("gradient_clip", "--set", "n=4294967296"), "knob n=4294967296 is out of range"},
    {A("gradient_clip", "--set", "n=0x1ffffffff"), "knob n=0x1ffffffff is out of range"},
    {A("gradient_clip", "--set", "n=123456789012345678901234567890"), "is out of range"},
    {A("gradient_clip", "--set", "n=lots"), "'lots' is not a non-negative integer"},
    {A("gradient_clip", "--set", "n=1.5e3"), "'1.5e3' is not a non-negative integer"},
    {A("gradient_clip", "--set", "n="), "knob n: '' is not a non-negative integer"},
    {A("gradient_clip", "--set", "n"), "--set 'n': 'n' is not KNOB=VALUE"},
    {A("gradient_clip", "--set", "=5"), "'=5' is not KNOB=VALUE"},
    {A("gemm_backward_a", "--set", "m=1048561"), "knob m=1048561 is out of range [1, 1048560]"},
    {A("gemm_backward_a", "--set", "k=16777217"), "knob k=16777217 is out of range [1, 16777216]"},
    {A("gemm_backward_a", "--set", "variant=4"), "knob variant=4 is out of range [0, 3]"},
    /* the largest dims a GEMM advertises launch; one more row is refused by name */
    {A("gemm_backward_a", "--info", "--set", "m=1048561"), "knob m=1048561 is out of range"},
    {A("transpose", "--set", "rows=2097121"), "knob rows=2097121 is out of range [1, 2097120]"},
    /* knobs each in range that do not fit together */
    {A("squared_sum_reduce_multi", "--set", "nbufs=300"),
     "squared_sum_reduce_multi: no launch for these knobs: squared_sum_reduce_multi: the knobs "
     "give a launch the GPU cannot run (value out of range)"},
    /* a kernel that does not support the target */
    {A("gemm_f16_backward_a", "--target", "sm_75"),
     "kernel 'gemm_f16_backward_a' does not support sm_75 (lowest target: sm_80)"},
    /* malformed command lines */
    {A(NULL), "nothing to do: give KERNEL, --list, --targets or --all (see --help)"},
    {A("gradient_clip", "--target"), "option '--target' needs an argument"},
    {A("gradient_clip", "--set"), "option '--set' needs an argument"},
    {A("gradient_clip", "-o"), "option '-o' needs an argument"},
    {A("gradient_clip", "squared_sum_reduce"), "unexpected argument 'squared_sum_reduce'"},
    {A("gradient_clip", "--list"), "KERNEL cannot be combined with --list"},
    {A("gradient_clip", "--target", "sm_90", "--target", "sm_80"),
     "option '--target' given more than once"},
    /* a knob given twice, as a target is: refused, not last-wins */
    {A("gradient_clip", "--set", "n=4", "--set", "n=5"),
     "--set 'n=5': knob 'n' given more than once"},
    {A("gradient_clip", "--set", "n=4", "--set=n=4"), "--set 'n=4': knob 'n' given more than once"},
    {A("gemm_backward_a", "--set", "m=64", "--set", "k=64", "--info", "--set", "m=0x40"),
     "--set 'm=0x40': knob 'm' given more than once"},
    {A("--all", "--target", "sm_90"), "'--all' needs '--outdir DIR'"},
    {A("--list", "--set", "n=1"), "'--set' needs a KERNEL, not --list"},
    {A("--targets", "--info"), "'--info' needs a KERNEL, not --targets"},
    {A("gradient_clip", "--outdir", "@new"), "'--outdir' is only used with --all"},
    /* unwritable outputs */
    {A("gradient_clip", "-o", "@missing/dir/out.ptx"), "cannot write '"},
    {A("--all", "--outdir", "@keep.ptx/sub"), "cannot create directory '"},
    /* bad input with an output named: nothing is written to it */
    {A("gradient_clip", "--set", "n=0", "-o", "@out.ptx"), "knob n=0 is out of range"},
    {A("no_such_kernel", "-o", "@out.ptx"), "unknown kernel 'no_such_kernel'"},
    {A("gemm_f16_backward_a", "--target", "sm_70", "--info", "-o", "@out.json"),
     "does not support sm_70"},
    /* control characters, bytes that are not UTF-8 and very long arguments
     * stay on one line, escaped so that nothing reaches the terminal raw */
    {A("bad\nname"), "unknown kernel 'bad\\nname'"},
    {A("gradient_clip", "--target", "sm_90\r\n"), "unknown target 'sm_90\\r\\n'"},
    {A("gradient_clip", "--set", "n=1\n2"), "--set 'n=1\\n2'"},
    {A("esc\x1b[2Jape"), "unknown kernel 'esc\\x1b[2Jape'"},
    {A("bad\xff\xfe"), "unknown kernel 'bad\\xff\\xfe'"},
    {A("c1\xc2\x9b" "1m"), "unknown kernel 'c1\\xc2\\x9b1m'"},
    {A("over\xc0\xaflong"), "unknown kernel 'over\\xc0\\xaflong'"},
    {A("back\\slash"), "unknown kernel 'back\\\\slash'"},
    {A("caf\xc3\xa9"), "unknown kernel 'caf\xc3\xa9'"},
    /* a library message that echoes the value is escaped too */
    {A("gradient_clip", "--set", "n=\x1b]0;x\x07"), "knob n: '\\x1b]0;x\\x07' is not"},
    /* output paths that cannot be used are bad input */
    {A("gradient_clip", "-o", "@"), "cannot write '"},
    {A("--all", "--outdir", "@a/b/"
       "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
       "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
       "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
       "/c"), "has a component of 264 bytes; the limit is 255"},
};

/* "@name" arguments are paths in the scratch directory. */
static void resolve(const char *const *in, const char **out)
{
    size_t i = 0;
    for (; in[i] && i < MAX_ARGS - 1; i++)
        out[i] = in[i][0] == '@' ? scratch(in[i] + 1) : in[i];
    out[i] = NULL;
}

static void test_cases(void)
{
    /* An existing file: in the way of --outdir, and an -o target that bad
     * input must leave as it was. */
    /* A copy: scratch() reuses its buffers. */
    char keep[512];
    snprintf(keep, sizeof keep, "%s", scratch("keep.ptx"));
    static const char before[] = "previous contents\n";
    FILE *f = fopen(keep, "wb");
    REQUIRE(f != NULL);
    if (!f)
        return;
    fputs(before, f);
    fclose(f);

    for (size_t i = 0; i < COUNTOF(cases); i++) {
        const char *args[MAX_ARGS];
        resolve(cases[i].args, args);
        check_case(args, cases[i].words);
    }

    const char *bad[] = {"gradient_clip", "--set", "n=-3", "-o", keep, NULL};
    check_case(bad, "'-3' is not a non-negative integer");
    const char *bad_target[] = {"gradient_clip", "--target", "sm_42", "-o", keep, NULL};
    check_case(bad_target, "unknown target 'sm_42'");
    char got[64] = "";
    f = fopen(keep, "rb");
    REQUIRE(f != NULL);
    if (f) {
        size_t n = fread(got, 1, sizeof got - 1, f);
        got[n] = '\0';
        fclose(f);
    }
    REQUIRE_STR_EQ(got, before);

    /* A very long argument is cut in the message, which stays one line. */
    char longname[4096];
    memset(longname, 'k', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    const char *lng[] = {longname, NULL};
    run_result r = run(lng);
    REQUIRE_INT_EQ(r.status, DUMP_EXIT_USAGE);
    REQUIRE(r.err_len < 200);
    REQUIRE_CONTAINS(r.err, "...' (see --list)");
    run_free(&r);

    remove(keep);
}

/* Safe writes: exclusive temporaries, whole files or nothing, and exit
 * status 1 (not 2) for a write that fails under a valid request. */
static void test_writes(void)
{
    /* A failed --all writes nothing: a directory is in the way of the last
     * kernel's file, and no other file or temporary may appear. */
    const pgk_desc *last = NULL;
    for (size_t i = 0; i < pgk_count(); i++)
        if (pgk_supports(pgk_at(i), PG_SM_90))
            last = pgk_at(i);
    REQUIRE(last != NULL);
    char in_way[300];
    snprintf(in_way, sizeof in_way, "%s/%s.ptx", tmpdir, last->name);
    REQUIRE_INT_EQ(mkdir(in_way, 0777), 0);
    const char *all[] = {"--all", "--outdir", tmpdir, NULL};
    run_result r = run(all);
    REQUIRE_INT_EQ(r.status, DUMP_EXIT_USAGE);
    REQUIRE_CONTAINS(r.err, ".ptx: Is a directory");
    run_free(&r);
    REQUIRE_INT_EQ(scratch_entries(), 1);
    REQUIRE_INT_EQ(rmdir(in_way), 0);

    /* The longest legal name works; one byte more is refused cleanly. */
    char name[300];
    memset(name, 'n', 251);
    memcpy(name + 251, ".ptx", 5);
    const char *longest[] = {"gradient_clip", "-o", scratch(name), NULL};
    r = run(longest);
    REQUIRE_INT_EQ(r.status, 0);
    REQUIRE_INT_EQ(r.err_len, 0);
    run_free(&r);
    REQUIRE_INT_EQ(scratch_entries(), 1);
    REQUIRE_INT_EQ(remove(scratch(name)), 0);
    memset(name, 'n', 252);
    memcpy(name + 252, ".ptx", 5);
    const char *too_long[] = {"gradient_clip", "-o", scratch(name), NULL};
    r = run(too_long);
    REQUIRE_INT_EQ(r.status, DUMP_EXIT_USAGE);
    REQUIRE_CONTAINS(r.err, "File name too long");
    run_free(&r);
    REQUIRE_INT_EQ(scratch_entries(), 0);

    /* "-o -" is standard output. */
    const char *dash[] = {"gradient_clip", "-o", "-", NULL};
    r = run(dash);
    REQUIRE_INT_EQ(r.status, 0);
    REQUIRE_CONTAINS(r.out, ".entry gradient_clip(");
    run_free(&r);
    REQUIRE(access("-", F_OK) != 0);

    /* A full disk is an I/O failure, status 1, for -o and for stdout. */
    FILE *full = fopen("/dev/full", "w");
    if (!full) {
        fprintf(stderr, "note: no /dev/full; its checks skipped\n");
        return;
    }
    const char *to_full[] = {"gradient_clip", "-o", "/dev/full", NULL};
    r = run(to_full);
    REQUIRE_INT_EQ(r.status, DUMP_EXIT_FAIL);
    REQUIRE_STR_EQ(r.err, "ptxgen-dump: cannot write '/dev/full': No space left on device\n");
    run_free(&r);
    char *err_text = NULL;
    size_t err_len = 0;
    FILE *err = open_memstream(&err_text, &err_len);
    REQUIRE(err != NULL);
    if (err) {
        static char prog[] = "ptxgen-dump", kernel[] = "gradient_clip";
        char *argv[] = {prog, kernel, NULL};
        REQUIRE_INT_EQ(dump_main(2, argv, full, err), DUMP_EXIT_FAIL);
        fclose(err);
        REQUIRE_STR_EQ(err_text,
                       "ptxgen-dump: cannot write to standard output: No space left on device\n");
        free(err_text);
    }
    fclose(full);
}

/* The same calls with good input succeed, so the failures above are the
 * input's doing and not a broken harness. */
static void test_good_input(void)
{
    const char *args[] = {"gradient_clip", "--set", "n=1000", NULL};
    run_result r = run(args);
    REQUIRE_INT_EQ(r.status, 0);
    REQUIRE(r.out_len > 0 && r.err_len == 0);
    REQUIRE_CONTAINS(r.out, ".entry gradient_clip(");
    run_free(&r);
    const char *big[] = {"gemm_backward_a", "--info", "--set", "m=65536", "--set", "k=65536",
                         NULL};
    r = run(big);
    REQUIRE_INT_EQ(r.status, 0);
    REQUIRE_CONTAINS(r.out, "\"grid\": [1024, 512, 1]");
    run_free(&r);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ptxgen-bad-cli-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_good_input();
    test_cases();
    test_writes();
    REQUIRE_INT_EQ(scratch_entries(), 0);
    if (rmdir(tmpdir) != 0)
        fprintf(stderr, "rmdir %s: %s\n", tmpdir, strerror(errno));
    TEST_DONE();
}
