/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-dump: inspect any kernel of the catalog for any target.
 *
 * The command line is a contract (DESIGN §4): tests, the golden update and
 * benchmarks drive it. Every bad input gets exactly one line on stderr that
 * names the problem, nothing on stdout, and exit status 2, so scripts can
 * tell "you asked for something wrong" (including an output path that
 * cannot be created) from "the request was fine but failed" (status 1: a
 * write that failed, such as a full disk, or ptxgen's own error). Output
 * files appear whole or not at all.
 *
 * Arguments are parsed by hand rather than with getopt: getopt keeps global
 * state, which a fuzz target calling dump_main() in a loop cannot reset
 * portably.
 */
/* realpath() is XSI; the build asks for POSIX.1-2008 only. */
#define _XOPEN_SOURCE 700
#include "dump_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "ptxgen/pgk.h"
#include "safe_write.h"

#define PROG "ptxgen-dump"

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

static const char usage_text[] =
    "usage: " PROG " --list\n"
    "       " PROG " --targets\n"
    "       " PROG " KERNEL [--target T] [--set KNOB=VALUE]... [--info] [-o FILE]\n"
    "       " PROG " --all [--target T] --outdir DIR\n"
    "\n"
    "Print the PTX of a ptxgen kernel, or facts about it.\n"
    "\n"
    "  --list              kernel names, one a line, in catalog order\n"
    "  --targets           supported targets with their PTX ISA (\"sm_90 7.8\")\n"
    "  KERNEL              the kernel's PTX on standard output\n"
    "  --target T          target to emit for (default sm_90)\n"
    "  --set KNOB=VALUE    set a knob (decimal or 0x hex); repeated for other\n"
    "                      knobs, each knob at most once\n"
    "  --info              one JSON object: entry, ISA, params, knobs, launch\n"
    "  -o FILE             write to FILE instead of standard output (\"-\":\n"
    "                      standard output); FILE is replaced whole\n"
    "  --all               every kernel that supports the target, as\n"
    "                      DIR/KERNEL.ptx (DIR and its parents are created;\n"
    "                      a failed run leaves nothing behind)\n"
    "  --outdir DIR        directory for --all\n"
    "  -h, --help          this text\n"
    "\n"
    "Exit status: 0 success; 2 bad input, including an output path that cannot\n"
    "be created or opened; 1 a failure under a valid request: a write failed\n"
    "(disk full, I/O error) or ptxgen's own error. Each failure prints one line\n"
    "on stderr.\n";

/* ------------------------------------------------------------ diagnostics */

/* The one place diagnostics are printed: a single line, prefixed. */
PRINTF_LIKE(3, 4)
static int fail(FILE *err, int status, const char *fmt, ...)
{
    va_list ap;
    fputs(PROG ": ", err);
    va_start(ap, fmt);
    vfprintf(err, fmt, ap);
    va_end(ap);
    fputc('\n', err);
    fflush(err);
    return status;
}

/* User text quoted for a message; an argument may be arbitrarily long. */
typedef struct quoted {
    char s[128];
} quoted;

static quoted quote(const char *text)
{
    quoted q;
    q.s[0] = '\'';
    size_t o = 1 + pg_text_escape(q.s + 1, sizeof q.s - 2, text);
    q.s[o++] = '\'';
    q.s[o] = '\0';
    return q;
}

/* A library message as one safe line: it may echo a --set value. The text
 * lives until the next call on the same thread. */
static const char *one_line(const char *msg)
{
    static _Thread_local char buf[1024];
    pg_text_escape(buf, sizeof buf, msg);
    return buf;
}

/* ------------------------------------------------------------ text buffer */

/* A growable string for the JSON; sticky on allocation failure so the
 * building code stays linear. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom)
        return;
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_putu(sbuf *b, unsigned long long v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", v);
    sb_putn(b, tmp, (size_t)n);
}

/* A JSON string literal. Bytes >= 0x80 pass through: the catalog's text is
 * UTF-8, and re-encoding it would need a decoder for no gain. */
static void sb_json_str(sbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    sb_putn(b, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (c < 0x20) {
                char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                sb_putn(b, u, sizeof u);
            } else {
                sb_putn(b, (const char *)&c, 1);
            }
        }
    }
    sb_putn(b, "\"", 1);
}

/* ------------------------------------------------------------ files */

/* Exit status for a failed file operation: the system failing under a valid
 * request (disk full, I/O error, no memory) is status 1; a path that cannot
 * be used as given (missing directory, a directory, no permission, a name
 * too long) is the caller's, status 2. */
static int io_status(int e)
{
    switch (e) {
    case ENOSPC:
    case EDQUOT:
    case EIO:
    case EFBIG:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EINTR:
    case EAGAIN:
        return DUMP_EXIT_FAIL;
    default:
        return DUMP_EXIT_USAGE;
    }
}

/* The temporary-file primitives (exclusive, no-follow, short random names,
 * 0666 less the umask) are shared with the runtime's model writers and
 * golden_check; see runtime/safe_write.h. */
#define TEMP_NAME_MAX PGRT_TEMP_NAME_MAX

/* data into a new temporary file of dirfd; its name in tmp. A file that
 * will replace an existing one gets that file's permission bits (mode, -1
 * for none). 0 or an errno; on failure no temporary is left. */
static int temp_write(int dirfd, char tmp[TEMP_NAME_MAX], const char *data, size_t len,
                      long mode)
{
    pgrt_span part = {data, len};
    return pgrt_temp_write(dirfd, tmp, &part, 1, mode, false);
}

/* The directory part of path ("." when none) in a new string, the last
 * component through *base. NULL when out of memory. */
static char *split_path(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (!dir)
        return NULL;
    memcpy(dir, !slash ? "." : path, n);
    dir[n] = '\0';
    return dir;
}

/* Write `len` bytes to `path`. A regular file (or a new one) is written to
 * a temporary beside it and renamed over it, so that a reader, or a golden
 * check run while `update-golden` rewrites, never sees half a file. A
 * symbolic link to a regular file is followed, as the shell's ">" would, and
 * the file it names is replaced the same way. Anything else (a device such
 * as /dev/null or /dev/full, a FIFO) is written in place. A replaced file
 * keeps its permission bits; a new one gets 0666 less the umask. On failure
 * returns an errno and leaves no temporary behind. */
static int write_file(const char *path, const char *data, size_t len)
{
    struct stat st;
    char *resolved = NULL;
    bool in_place = false;
    long mode = -1;
    if (!path[0])
        return ENOENT;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return errno ? errno : EIO;
    } else {
        if (S_ISLNK(st.st_mode)) {
            /* A dangling link gives ENOENT: nothing to replace. */
            if (stat(path, &st) != 0)
                return errno ? errno : EIO;
            if (S_ISREG(st.st_mode)) {
                resolved = realpath(path, NULL);
                if (!resolved)
                    return errno ? errno : EIO;
                path = resolved;
            }
        }
        if (S_ISDIR(st.st_mode)) {
            free(resolved);
            return EISDIR;
        }
        in_place = !S_ISREG(st.st_mode);
        mode = (long)(st.st_mode & 07777);
    }
    if (in_place) {
        int fd = open(path, O_WRONLY | O_TRUNC | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
            return errno ? errno : EIO;
        int e = pgrt_fd_write_all(fd, data, len);
        if (close(fd) != 0 && !e && errno != EINTR)
            e = errno ? errno : EIO;
        return e;
    }

    const char *base;
    char *dir = split_path(path, &base);
    if (!dir) {
        free(resolved);
        return ENOMEM;
    }
    int e = 0;
    if (!base[0])
        e = EISDIR; /* "dir/" names a directory, not a file in it */
    int dirfd = e ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!e && dirfd < 0)
        e = errno ? errno : EIO;
    if (!e) {
        char tmp[TEMP_NAME_MAX];
        e = temp_write(dirfd, tmp, data, len, mode);
        if (!e && renameat(dirfd, tmp, dirfd, base) != 0) {
            e = errno ? errno : EIO;
            unlinkat(dirfd, tmp, 0);
        }
    }
    if (dirfd >= 0)
        close(dirfd);
    free(dir);
    free(resolved);
    return e;
}

/* Standard output, checked: a full disk or a closed descriptor is found at
 * the flush, not when the process exits. */
static int write_stream(FILE *out, FILE *err, const char *data, size_t len)
{
    errno = 0;
    if ((len && fwrite(data, 1, len, out) != len) || fflush(out) != 0 || ferror(out))
        return fail(err, DUMP_EXIT_FAIL, "cannot write to standard output: %s",
                    strerror(errno ? errno : EIO));
    return DUMP_EXIT_OK;
}

/* ------------------------------------------------------------ options */

typedef struct opts {
    bool help, list, targets, all, info;
    const char *kernel;
    const char *target;
    const char *output;
    const char *outdir;
    const char **sets; /* argv strings, in order */
    size_t nsets;
} opts;

/* Options that take a value: "--name VALUE", "--name=VALUE" or "-o FILE". */
enum { OPT_TARGET, OPT_SET, OPT_OUTPUT, OPT_OUTDIR };
static const struct {
    const char *name;
    int id;
} value_opts[] = {
    {"--target", OPT_TARGET},
    {"--set", OPT_SET},
    {"-o", OPT_OUTPUT},
    {"--outdir", OPT_OUTDIR},
};

static const struct {
    const char *name, *alias;
    size_t offset;
} flag_opts[] = {
    {"--help", "-h", offsetof(opts, help)},
    {"--list", NULL, offsetof(opts, list)},
    {"--targets", NULL, offsetof(opts, targets)},
    {"--all", NULL, offsetof(opts, all)},
    {"--info", NULL, offsetof(opts, info)},
};

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

static int set_value(opts *o, int id, const char *name, const char *value, FILE *err)
{
    if (id == OPT_SET) {
        o->sets[o->nsets++] = value;
        return DUMP_EXIT_OK;
    }
    const char **slot = id == OPT_TARGET ? &o->target
                        : id == OPT_OUTPUT ? &o->output
                                           : &o->outdir;
    if (*slot)
        return fail(err, DUMP_EXIT_USAGE, "option '%s' given more than once", name);
    *slot = value;
    return DUMP_EXIT_OK;
}

static int parse_args(int argc, char **argv, opts *o, FILE *err)
{
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!a)
            break;
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (o->kernel)
                return fail(err, DUMP_EXIT_USAGE,
                            "unexpected argument %s (one KERNEL at a time; see --help)",
                            quote(a).s);
            o->kernel = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_positional = true;
            continue;
        }

        bool done = false;
        for (size_t f = 0; f < COUNTOF(flag_opts) && !done; f++) {
            if (strcmp(a, flag_opts[f].name) == 0 ||
                (flag_opts[f].alias && strcmp(a, flag_opts[f].alias) == 0)) {
                *(bool *)((char *)o + flag_opts[f].offset) = true;
                done = true;
            }
        }
        for (size_t v = 0; v < COUNTOF(value_opts) && !done; v++) {
            const char *name = value_opts[v].name;
            size_t n = strlen(name);
            const char *value = NULL;
            if (strcmp(a, name) == 0) {
                if (i + 1 >= argc || !argv[i + 1])
                    return fail(err, DUMP_EXIT_USAGE, "option '%s' needs an argument", a);
                value = argv[++i];
            } else if (name[1] == '-' && strncmp(a, name, n) == 0 && a[n] == '=') {
                value = a + n + 1;
            } else {
                continue;
            }
            int rc = set_value(o, value_opts[v].id, name, value, err);
            if (rc)
                return rc;
            done = true;
        }
        if (!done)
            return fail(err, DUMP_EXIT_USAGE, "unknown option %s (see --help)", quote(a).s);
    }
    return DUMP_EXIT_OK;
}

/* Exactly one action, and only the options that mean something for it: a
 * silently ignored option would hide a typo in a benchmark script. */
static int check_combination(const opts *o, FILE *err)
{
    const char *modes[4];
    size_t n = 0;
    if (o->kernel)
        modes[n++] = "KERNEL";
    if (o->list)
        modes[n++] = "--list";
    if (o->targets)
        modes[n++] = "--targets";
    if (o->all)
        modes[n++] = "--all";
    if (n == 0)
        return fail(err, DUMP_EXIT_USAGE,
                    "nothing to do: give KERNEL, --list, --targets or --all (see --help)");
    if (n > 1)
        return fail(err, DUMP_EXIT_USAGE, "%s cannot be combined with %s", modes[0], modes[1]);

    const char *mode = modes[0];
    if (o->target && !o->kernel && !o->all)
        return fail(err, DUMP_EXIT_USAGE, "'--target' is not used with %s", mode);
    if (o->nsets && !o->kernel)
        return fail(err, DUMP_EXIT_USAGE, "'--set' needs a KERNEL, not %s", mode);
    if (o->info && !o->kernel)
        return fail(err, DUMP_EXIT_USAGE, "'--info' needs a KERNEL, not %s", mode);
    if (o->output && !o->kernel)
        return fail(err, DUMP_EXIT_USAGE, "'-o' needs a KERNEL (use --outdir with --all)");
    if (o->outdir && !o->all)
        return fail(err, DUMP_EXIT_USAGE, "'--outdir' is only used with --all");
    if (o->all && !o->outdir)
        return fail(err, DUMP_EXIT_USAGE, "'--all' needs '--outdir DIR'");
    return DUMP_EXIT_OK;
}

/* ------------------------------------------------------------ actions */

static void isa_text(unsigned isa, char *buf, size_t n)
{
    snprintf(buf, n, "%u.%u", isa / 10, isa % 10);
}

static int do_list(FILE *out, FILE *err)
{
    sbuf b = {0};
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        if (!d)
            continue;
        sb_puts(&b, d->name);
        sb_puts(&b, "\n");
    }
    int rc = b.oom ? fail(err, DUMP_EXIT_FAIL, "out of memory")
                   : write_stream(out, err, b.p ? b.p : "", b.len);
    free(b.p);
    return rc;
}

static int do_targets(FILE *out, FILE *err)
{
    sbuf b = {0};
    for (int t = 0; t < PG_TARGET_COUNT; t++) {
        char isa[16];
        isa_text(pg_target_min_isa((pg_target)t), isa, sizeof isa);
        sb_puts(&b, pg_target_name((pg_target)t));
        sb_puts(&b, " ");
        sb_puts(&b, isa);
        sb_puts(&b, "\n");
    }
    int rc = b.oom ? fail(err, DUMP_EXIT_FAIL, "out of memory")
                   : write_stream(out, err, b.p ? b.p : "", b.len);
    free(b.p);
    return rc;
}

static int parse_target(const char *name, pg_target *t, FILE *err)
{
    if (!name) {
        *t = PG_TARGET_DEFAULT;
        return DUMP_EXIT_OK;
    }
    if (pg_target_parse(name, t) != 0)
        return fail(err, DUMP_EXIT_USAGE, "unknown target %s (see --targets)", quote(name).s);
    return DUMP_EXIT_OK;
}

static int check_support(const pgk_desc *d, pg_target t, FILE *err)
{
    if (pgk_supports(d, t))
        return DUMP_EXIT_OK;
    return fail(err, DUMP_EXIT_USAGE, "kernel '%s' does not support %s (lowest target: %s)",
                d->name, pg_target_name(t), pg_target_name(d->min_target));
}

/* An emission error is ptxgen's bug, not the caller's (status 1, with the
 * builder's own message), unless it says the target or the knobs were
 * refused: those are input problems, status 2. */
static int emit(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char **ptx, size_t *len,
                unsigned *isa, FILE *err)
{
    char msg[512] = "";
    pgk_ptx px;
    int e = pgk_emit_ptx(d, t, kn, &px, msg, sizeof msg);
    *ptx = px.text;
    *len = px.len;
    *isa = px.isa;
    if (e == 0)
        return DUMP_EXIT_OK;
    return fail(err, e == PG_ETARGET || e == PG_ERANGE ? DUMP_EXIT_USAGE : DUMP_EXIT_FAIL,
                "cannot emit %s for %s: %s", d->name, pg_target_name(t),
                msg[0] ? one_line(msg) : pg_strerror(e));
}

/* For a GEMM the chooser can return: what pgk_gemm_choose() picks for the
 * sizes and types in the knobs on this target (the kernel may be another
 * one, and its tile and split other than the knobs'). */
static void gemm_choice_json(sbuf *b, const pgk_desc *d, pg_target t, const pgk_knobs *kn)
{
    static const char *const layouts[PGK_GEMM_LAYOUTS] = {"forward", "backward_x",
                                                          "backward_w"};
    pgk_gemm_layout layout;
    pg_type it, ot;
    uint32_t m, n, k;
    pgk_gemm_choice ch;
    if (!pgk_gemm_describe(d, kn, &layout, &it, &ot, &m, &n, &k) ||
        pgk_gemm_choose(layout, it, ot, m, n, k, t, 0, &ch) != PG_OK)
        return;
    sb_puts(b, ", \"gemm_choice\": {\"layout\": ");
    sb_json_str(b, layouts[layout]);
    sb_puts(b, ", \"in\": ");
    sb_json_str(b, pg_type_name(it));
    sb_puts(b, ", \"out\": ");
    sb_json_str(b, pg_type_name(ot));
    sb_puts(b, ", \"m\": ");
    sb_putu(b, m);
    sb_puts(b, ", \"n\": ");
    sb_putu(b, n);
    sb_puts(b, ", \"k\": ");
    sb_putu(b, k);
    sb_puts(b, ", \"kernel\": ");
    sb_json_str(b, ch.desc->name);
    sb_puts(b, ", \"tile\": ");
    sb_putu(b, ch.tile);
    int bn = pgk_knob_index(ch.desc, "bn");
    if (pgk_knob_index(ch.desc, "tile") >= 0) {
        bool f32 = strncmp(ch.desc->name, "gemm_f32_", 9) == 0; /* the fp32 family's tiles */
        sb_puts(b, ", \"tile_rows\": ");
        sb_putu(b, f32 ? pgk_gemm_f32_tile_rows(ch.tile) : pgk_gemm_tile_rows(ch.tile));
        sb_puts(b, ", \"tile_cols\": ");
        sb_putu(b, f32 ? pgk_gemm_f32_tile_cols(ch.tile) : pgk_gemm_tile_cols(ch.tile));
    } else if (bn >= 0) { /* gemm_sm90: 128-row tiles, bn wide */
        sb_puts(b, ", \"tile_rows\": 128, \"tile_cols\": ");
        sb_putu(b, ch.knobs.v[bn]);
    }
    sb_puts(b, ", \"split\": ");
    sb_putu(b, ch.split);
    sb_puts(b, ", \"reduce\": ");
    if (ch.reduce)
        sb_json_str(b, ch.reduce->name);
    else
        sb_puts(b, "null");
    sb_puts(b, ", \"workspace_bytes\": ");
    sb_putu(b, ch.workspace_bytes);
    sb_puts(b, ", \"knobs\": {");
    for (size_t i = 0; i < ch.desc->nknobs && i < PGK_MAX_KNOBS; i++) {
        if (i)
            sb_puts(b, ", ");
        sb_json_str(b, ch.desc->knobs[i].name);
        sb_puts(b, ": ");
        sb_putu(b, ch.knobs.v[i]);
    }
    sb_puts(b, "}}");
}

/* isa: the PTX ISA the text declares (pgk_emit_ptx), which an instruction
 * may have raised above the target's minimum. */
static void info_json(sbuf *b, const pgk_desc *d, pg_target t, unsigned ptx_isa,
                      const pgk_knobs *kn, const pgk_launch *l)
{
    char isa[16];
    isa_text(ptx_isa, isa, sizeof isa);

    sb_puts(b, "{\"kernel\": ");
    sb_json_str(b, d->name);
    sb_puts(b, ", \"summary\": ");
    sb_json_str(b, d->summary ? d->summary : "");
    sb_puts(b, ", \"entry\": ");
    sb_json_str(b, d->name);
    sb_puts(b, ", \"target\": ");
    sb_json_str(b, pg_target_name(t));
    sb_puts(b, ", \"ptx_isa\": ");
    sb_json_str(b, isa);

    sb_puts(b, ", \"params\": [");
    for (size_t i = 0; i < d->nparams; i++) {
        const char *type = pg_type_name(d->params[i].type);
        sb_puts(b, i ? ", {\"name\": " : "{\"name\": ");
        sb_json_str(b, d->params[i].name);
        sb_puts(b, ", \"type\": ");
        sb_json_str(b, type ? type : "?");
        sb_puts(b, d->params[i].pointer ? ", \"pointer\": true}" : ", \"pointer\": false}");
    }

    sb_puts(b, "], \"knobs\": {");
    for (size_t i = 0; i < d->nknobs && i < PGK_MAX_KNOBS; i++) {
        if (i)
            sb_puts(b, ", ");
        sb_json_str(b, d->knobs[i].name);
        sb_puts(b, ": ");
        sb_putu(b, kn->v[i]);
    }

    sb_puts(b, "}, \"baked\": [");
    bool first = true;
    for (size_t i = 0; i < d->nknobs && i < PGK_MAX_KNOBS; i++) {
        if (!d->knobs[i].baked)
            continue;
        if (!first)
            sb_puts(b, ", ");
        sb_json_str(b, d->knobs[i].name);
        first = false;
    }

    sb_puts(b, "], \"launch\": {\"grid\": [");
    for (int i = 0; i < 3; i++) {
        if (i)
            sb_puts(b, ", ");
        sb_putu(b, l->grid[i]);
    }
    sb_puts(b, "], \"block\": [");
    for (int i = 0; i < 3; i++) {
        if (i)
            sb_puts(b, ", ");
        sb_putu(b, l->block[i]);
    }
    sb_puts(b, "], \"shared_bytes\": ");
    sb_putu(b, l->shared_bytes);
    sb_puts(b, "}");
    gemm_choice_json(b, d, t, kn);
    sb_puts(b, "}\n");
}

static int do_kernel(const opts *o, FILE *out, FILE *err)
{
    const pgk_desc *d = pgk_find(o->kernel);
    if (!d)
        return fail(err, DUMP_EXIT_USAGE, "unknown kernel %s (see --list)", quote(o->kernel).s);

    pg_target t;
    int rc = parse_target(o->target, &t, err);
    if (rc)
        return rc;

    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    /* A knob given twice is refused, as a repeated --target is: a script
     * whose later --set silently won would run with a value it did not
     * mean. */
    bool given[PGK_MAX_KNOBS] = {false};
    for (size_t i = 0; i < o->nsets; i++) {
        char msg[256] = "";
        int e = pgk_knob_assign(d, &kn, o->sets[i], msg, sizeof msg);
        if (e == PG_ENOMEM)
            return fail(err, DUMP_EXIT_FAIL, "out of memory");
        if (e)
            return fail(err, DUMP_EXIT_USAGE, "--set %s: %s", quote(o->sets[i]).s,
                        msg[0] ? one_line(msg) : pg_strerror(e));
        /* Assigned, so "NAME=" names a knob of d, NAME shorter than 64. */
        char name[64];
        size_t n = (size_t)(strchr(o->sets[i], '=') - o->sets[i]);
        memcpy(name, o->sets[i], n);
        name[n] = '\0';
        int k = pgk_knob_index(d, name);
        if (k >= 0 && given[k])
            return fail(err, DUMP_EXIT_USAGE, "--set %s: knob '%s' given more than once",
                        quote(o->sets[i]).s, d->knobs[k].name);
        if (k >= 0)
            given[k] = true;
    }

    rc = check_support(d, t, err);
    if (rc)
        return rc;

    /* The launch is computed in both modes so that a knob combination that
     * overflows it is refused the same way whether or not --info is given. */
    pgk_launch l;
    char msg[256] = "";
    int e = pgk_launch_for(d, &kn, &l, msg, sizeof msg);
    if (e)
        return fail(err, e == PG_ERANGE || e == PG_EINVAL ? DUMP_EXIT_USAGE : DUMP_EXIT_FAIL,
                    "%s: no launch for these knobs: %s", d->name,
                    msg[0] ? one_line(msg) : pg_strerror(e));

    char *ptx = NULL;
    size_t len = 0;
    unsigned isa = 0;
    rc = emit(d, t, &kn, &ptx, &len, &isa, err);
    if (rc)
        return rc;

    sbuf info = {0};
    const char *text = ptx;
    size_t text_len = len;
    if (o->info) {
        info_json(&info, d, t, isa, &kn, &l);
        if (info.oom) {
            pgk_free(ptx);
            free(info.p);
            return fail(err, DUMP_EXIT_FAIL, "out of memory");
        }
        text = info.p;
        text_len = info.len;
    }

    if (o->output && strcmp(o->output, "-") != 0) {
        int we = write_file(o->output, text, text_len);
        rc = we ? fail(err, io_status(we), "cannot write %s: %s", quote(o->output).s,
                       strerror(we))
                : DUMP_EXIT_OK;
    } else {
        rc = write_stream(out, err, text, text_len);
    }
    pgk_free(ptx);
    free(info.p);
    return rc;
}

/* The directories make_dirs created, deepest last, so that a failed --all
 * can take them away again. */
typedef struct made_dirs {
    char *path; /* a copy of --outdir */
    size_t *ends; /* prefix lengths */
    size_t n;
} made_dirs;

static void unmake_dirs(made_dirs *m)
{
    for (size_t i = m->n; i-- > 0;) {
        char saved = m->path[m->ends[i]];
        m->path[m->ends[i]] = '\0';
        rmdir(m->path); /* only if still empty */
        m->path[m->ends[i]] = saved;
    }
    m->n = 0;
}

/* mkdir -p: the directory and any missing parents, each recorded in m. 0 or
 * an errno; ENOTDIR when something in the way is not a directory. On
 * failure the directories it made are gone again. */
static int make_dirs(const char *path, made_dirs *m)
{
    struct stat st;
    memset(m, 0, sizeof *m);
    if (!path[0])
        return ENOENT;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    size_t len = strlen(path), parts = 1;
    for (size_t i = 0; i < len; i++)
        parts += path[i] == '/';
    m->path = malloc(len + 1);
    m->ends = malloc(parts * sizeof *m->ends);
    if (!m->path || !m->ends)
        return ENOMEM;
    memcpy(m->path, path, len + 1);
    char *p = m->path;
    int e = 0;
    /* Each prefix ending before a '/', then the whole path. */
    for (char *s = p + 1;; s++) {
        bool end = *s == '\0';
        if (!end && *s != '/')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0777) == 0)
            m->ends[m->n++] = (size_t)(s - p);
        else if (errno != EEXIST)
            e = errno;
        if (!e && stat(p, &st) != 0)
            e = errno;
        else if (!e && !S_ISDIR(st.st_mode))
            e = ENOTDIR;
        *s = saved;
        if (e || end)
            break;
    }
    if (e)
        unmake_dirs(m);
    return e;
}

static void made_dirs_free(made_dirs *m)
{
    free(m->path);
    free(m->ends);
    memset(m, 0, sizeof *m);
}

/* An --outdir that cannot hold our files is refused before anything is
 * created: otherwise mkdir -p would make every directory up to the first
 * component the system refuses, and leave them. */
static int check_outdir(const char *dir, FILE *err)
{
    size_t len = strlen(dir), longest = 0;
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        if (d && strlen(d->name) > longest)
            longest = strlen(d->name);
    }
    if (len + 1 + longest + 4 >= PATH_MAX)
        return fail(err, DUMP_EXIT_USAGE,
                    "--outdir %s is too long: %zu bytes, and with a file name in it the path must "
                    "stay under %d bytes", quote(dir).s, len, PATH_MAX);
    for (const char *p = dir; *p;) {
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX)
            return fail(err, DUMP_EXIT_USAGE,
                        "--outdir %s has a component of %zu bytes; the limit is %d",
                        quote(dir).s, n, NAME_MAX);
        p += n;
        p += strspn(p, "/");
    }
    return DUMP_EXIT_OK;
}

/* One file of --all, emitted before anything is written. */
typedef struct all_file {
    const pgk_desc *d;
    char *ptx;
    size_t len;
    char tmp[TEMP_NAME_MAX];
    long mode; /* of the file it replaces; -1 for a new one */
    bool written;
} all_file;

/* Every file is emitted first, then written to a temporary of its own in
 * the directory, and only when all are written are they renamed into
 * place: a failure while emitting, creating the directory or writing
 * leaves neither a partial set of files nor a temporary, nor a directory
 * that this run created. Only a rename within one directory, after the
 * check for directories in the way, could fail part-way. */
static int do_all(const opts *o, FILE *err)
{
    pg_target t;
    int rc = parse_target(o->target, &t, err);
    if (rc)
        return rc;
    if ((rc = check_outdir(o->outdir, err)))
        return rc;

    all_file *files = calloc(pgk_count() ? pgk_count() : 1, sizeof *files);
    if (!files)
        return fail(err, DUMP_EXIT_FAIL, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < pgk_count() && !rc; i++) {
        const pgk_desc *d = pgk_at(i);
        if (!d || !pgk_supports(d, t))
            continue;
        all_file *f = &files[n++];
        f->d = d;
        if (strlen(d->name) + 4 > NAME_MAX) {
            rc = fail(err, DUMP_EXIT_FAIL, "kernel name '%s' is too long for a file name",
                      d->name);
            break;
        }
        pgk_knobs kn;
        pgk_knobs_default(d, &kn);
        unsigned isa = 0;
        rc = emit(d, t, &kn, &f->ptx, &f->len, &isa, err);
    }

    made_dirs made = {0};
    int dirfd = -1;
    if (!rc) {
        int me = make_dirs(o->outdir, &made);
        if (me)
            rc = fail(err, io_status(me), "cannot create directory %s: %s", quote(o->outdir).s,
                      strerror(me));
    }
    if (!rc && (dirfd = open(o->outdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = fail(err, io_status(errno), "cannot open directory %s: %s", quote(o->outdir).s,
                  strerror(errno));

    /* A directory in the way of a file is found before anything is written. */
    char name[NAME_MAX + 1];
    for (size_t i = 0; i < n && !rc; i++) {
        struct stat st;
        snprintf(name, sizeof name, "%s.ptx", files[i].d->name);
        files[i].mode = -1;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            rc = fail(err, DUMP_EXIT_USAGE, "cannot write %s/%s: %s", quote(o->outdir).s, name,
                      strerror(EISDIR));
        else if (S_ISREG(st.st_mode))
            files[i].mode = (long)(st.st_mode & 07777);
    }
    for (size_t i = 0; i < n && !rc; i++) {
        int we = temp_write(dirfd, files[i].tmp, files[i].ptx, files[i].len, files[i].mode);
        if (we)
            rc = fail(err, io_status(we), "cannot write in %s: %s", quote(o->outdir).s,
                      strerror(we));
        files[i].written = we == 0;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        snprintf(name, sizeof name, "%s.ptx", files[i].d->name);
        if (renameat(dirfd, files[i].tmp, dirfd, name) != 0)
            rc = fail(err, io_status(errno), "cannot write %s/%s: %s", quote(o->outdir).s, name,
                      strerror(errno));
        else
            files[i].written = false;
    }

    for (size_t i = 0; i < n; i++) {
        if (files[i].written)
            unlinkat(dirfd, files[i].tmp, 0);
        pgk_free(files[i].ptx);
    }
    if (dirfd >= 0)
        close(dirfd);
    if (rc)
        unmake_dirs(&made);
    made_dirs_free(&made);
    free(files);
    return rc;
}

int dump_main(int argc, char **argv, FILE *out, FILE *err)
{
    opts o;
    memset(&o, 0, sizeof o);
    /* Every argument could be a --set value; argc bounds the count. */
    o.sets = calloc(argc > 0 ? (size_t)argc : 1, sizeof *o.sets);
    if (!o.sets)
        return fail(err, DUMP_EXIT_FAIL, "out of memory");

    int rc = parse_args(argc, argv, &o, err);
    if (rc == DUMP_EXIT_OK && o.help)
        rc = write_stream(out, err, usage_text, sizeof usage_text - 1);
    else if (rc == DUMP_EXIT_OK && (rc = check_combination(&o, err)) == DUMP_EXIT_OK) {
        if (o.list)
            rc = do_list(out, err);
        else if (o.targets)
            rc = do_targets(out, err);
        else if (o.all)
            rc = do_all(&o, err);
        else
            rc = do_kernel(&o, out, err);
    }
    free(o.sets);
    return rc;
}
