/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-dump: inspect any kernel of the catalog for any target.
 *
 * The command line is a contract (DESIGN §4): tests, the golden update and
 * benchmarks drive it. Every bad input gets exactly one line on stderr that
 * names the problem, nothing on stdout, and exit status 2, so scripts can
 * tell "you asked for something wrong" from "ptxgen is broken" (status 1).
 *
 * Arguments are parsed by hand rather than with getopt: getopt keeps global
 * state, which a fuzz target calling dump_main() in a loop cannot reset
 * portably.
 */
#include "dump_cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "pgk.h"

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
    "  --set KNOB=VALUE    set a knob (decimal or 0x hex); may be repeated\n"
    "  --info              one JSON object: entry, ISA, params, knobs, launch\n"
    "  -o FILE             write to FILE instead of standard output\n"
    "  --all               every kernel that supports the target, as\n"
    "                      DIR/KERNEL.ptx (DIR and its parents are created)\n"
    "  --outdir DIR        directory for --all\n"
    "  -h, --help          this text\n"
    "\n"
    "Exit status: 0 success, 2 bad input (one line on stderr), 1 internal error.\n";

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

/* User text quoted for a message: control characters would split or hide
 * the one diagnostic line, and an argument may be arbitrarily long. */
typedef struct quoted {
    char s[80];
} quoted;

static quoted quote(const char *text)
{
    quoted q;
    size_t o = 0, i = 0;
    const size_t keep = sizeof q.s - 6; /* room for "...", quotes, NUL */
    q.s[o++] = '\'';
    for (; text[i] && o < keep; i++) {
        unsigned char c = (unsigned char)text[i];
        q.s[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (text[i]) {
        memcpy(q.s + o, "...", 3);
        o += 3;
    }
    q.s[o++] = '\'';
    q.s[o] = '\0';
    return q;
}

/* A library message as one line: it is ours to print, so make sure. */
static const char *one_line(char *msg)
{
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return msg;
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

/* Write `len` bytes to `path`. A regular file (or a new one) is written to a
 * temporary name beside it and renamed, so a reader — or a golden check run
 * while `update-golden` is rewriting — never sees half a file. Anything else
 * (a device such as /dev/null, a FIFO, a symlink) is written in place.
 * On failure returns errno and leaves no temporary behind. */
static int write_file(const char *path, const char *data, size_t len)
{
    struct stat st;
    bool in_place = lstat(path, &st) == 0 && !S_ISREG(st.st_mode);
    char *tmp = NULL;
    const char *dst = path;
    int e = 0;

    if (!in_place) {
        size_t n = strlen(path) + 32;
        tmp = malloc(n);
        if (!tmp)
            return ENOMEM;
        snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
        dst = tmp;
    }

    FILE *f = fopen(dst, "wb");
    if (!f) {
        e = errno;
        free(tmp);
        return e ? e : EIO;
    }
    if (len && fwrite(data, 1, len, f) != len)
        e = errno ? errno : EIO;
    if (fflush(f) != 0 && !e)
        e = errno ? errno : EIO;
    if (ferror(f) && !e)
        e = EIO;
    if (fclose(f) != 0 && !e)
        e = errno ? errno : EIO;
    if (!e && tmp && rename(tmp, path) != 0)
        e = errno ? errno : EIO;
    if (e && tmp)
        remove(tmp);
    free(tmp);
    return e;
}

static int write_stream(FILE *out, FILE *err, const char *data, size_t len)
{
    if ((len && fwrite(data, 1, len, out) != len) || fflush(out) != 0)
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
    if (pgk_knob_index(ch.desc, "tile") >= 0) {
        sb_puts(b, ", \"tile_rows\": ");
        sb_putu(b, pgk_gemm_tile_rows(ch.tile));
        sb_puts(b, ", \"tile_cols\": ");
        sb_putu(b, pgk_gemm_tile_cols(ch.tile));
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
    for (size_t i = 0; i < o->nsets; i++) {
        char msg[256] = "";
        int e = pgk_knob_assign(d, &kn, o->sets[i], msg, sizeof msg);
        if (e == PG_ENOMEM)
            return fail(err, DUMP_EXIT_FAIL, "out of memory");
        if (e)
            return fail(err, DUMP_EXIT_USAGE, "--set %s: %s", quote(o->sets[i]).s,
                        msg[0] ? one_line(msg) : pg_strerror(e));
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

    if (o->output) {
        int we = write_file(o->output, text, text_len);
        rc = we ? fail(err, DUMP_EXIT_USAGE, "cannot write %s: %s", quote(o->output).s,
                       strerror(we))
                : DUMP_EXIT_OK;
    } else {
        rc = write_stream(out, err, text, text_len);
    }
    pgk_free(ptx);
    free(info.p);
    return rc;
}

/* mkdir -p: the directory and any missing parents. 0 or an errno; ENOTDIR
 * when something in the way is not a directory. */
static int make_dirs(const char *path)
{
    struct stat st;
    if (!path[0])
        return ENOENT;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    char *p = malloc(strlen(path) + 1);
    if (!p)
        return ENOMEM;
    strcpy(p, path);
    int e = 0;
    /* Each prefix ending before a '/', then the whole path. */
    for (char *s = p + 1;; s++) {
        bool end = *s == '\0';
        if (!end && *s != '/')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            e = errno;
        else if (stat(p, &st) != 0)
            e = errno;
        else if (!S_ISDIR(st.st_mode))
            e = ENOTDIR;
        *s = saved;
        if (e || end)
            break;
    }
    free(p);
    return e;
}

static int do_all(const opts *o, FILE *err)
{
    pg_target t;
    int rc = parse_target(o->target, &t, err);
    if (rc)
        return rc;

    int me = make_dirs(o->outdir);
    if (me)
        return fail(err, me == ENOMEM ? DUMP_EXIT_FAIL : DUMP_EXIT_USAGE,
                    "cannot create directory %s: %s", quote(o->outdir).s, strerror(me));

    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        if (!d || !pgk_supports(d, t))
            continue;
        pgk_knobs kn;
        pgk_knobs_default(d, &kn);
        char *ptx = NULL;
        size_t len = 0;
        unsigned isa = 0;
        rc = emit(d, t, &kn, &ptx, &len, &isa, err);
        if (rc)
            return rc;

        size_t n = strlen(o->outdir) + strlen(d->name) + 8;
        char *path = malloc(n);
        if (!path) {
            pgk_free(ptx);
            return fail(err, DUMP_EXIT_FAIL, "out of memory");
        }
        snprintf(path, n, "%s/%s.ptx", o->outdir, d->name);
        int we = write_file(path, ptx, len);
        if (we)
            rc = fail(err, DUMP_EXIT_USAGE, "cannot write %s: %s", quote(path).s, strerror(we));
        free(path);
        pgk_free(ptx);
        if (rc)
            return rc;
    }
    return DUMP_EXIT_OK;
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
