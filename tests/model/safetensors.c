/* SPDX-License-Identifier: MIT */
/* safetensors: the canonical writer, the strict reader, sharded sets, and
 * the atomic write leaving nothing behind on failure. */
#include "model_util.h"
#include "pgrt_json.h"
#include "ptxgen/pgrt_model.h"
#include "test.h"

#include "safe_write.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* A file in memory: 8-byte size, header, then data_len bytes 0..n. */
static size_t make(uint8_t *buf, const char *header, size_t data_len)
{
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + h + i] = (uint8_t)i;
    return 8 + h + data_len;
}

#define BAD(header, data_len, code, want)                                      \
    do {                                                                       \
        static uint8_t buf_[4096];                                               \
        size_t len_ = make(buf_, (header), (data_len));                            \
        pgrt_st_file *f_ = NULL;                                               \
        REQUIRE_INT_EQ(pgrt_st_parse(buf_, len_, "m.st", &f_), (code));            \
        REQUIRE(f_ == NULL);                                                   \
        REQUIRE_CONTAINS(pgrt_last_message(), (want));                         \
    } while (0)

static void test_parse(void)
{
    uint8_t buf[4096];
    size_t n = make(buf,
                    "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[4,20]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                    "\"e\":{\"dtype\":\"I64\",\"shape\":[0,3],\"data_offsets\":[4,4]}}  ",
                    20);
    pgrt_st_file *f = NULL;
    REQUIRE_INT_EQ(pgrt_st_parse(buf, n, "m.st", &f), 0);
    REQUIRE_INT_EQ(pgrt_st_count(f), 3);
    const pgrt_st_tensor *t = pgrt_st_at(f, 0);
    REQUIRE_STR_EQ(t->name, "b"); /* name order */
    REQUIRE_INT_EQ(t->dtype, PGRT_ST_BF16);
    REQUIRE_INT_EQ(t->nbytes, 4);
    t = pgrt_st_find(f, "w");
    REQUIRE(t != NULL);
    if (t) {
        REQUIRE_INT_EQ(t->ndim, 2);
        REQUIRE_INT_EQ(t->count, 4);
        REQUIRE_INT_EQ(((const uint8_t *)t->data)[0], 4);
    }
    t = pgrt_st_find(f, "e");
    REQUIRE(t && t->count == 0 && t->nbytes == 0);
    REQUIRE(pgrt_st_find(f, "__metadata__") == NULL);
    REQUIRE_STR_EQ(pgrt_jval_string(pgrt_jval_member(pgrt_st_metadata(f), "format"), NULL), "pt");
    pgrt_st_close(&f);
    REQUIRE(f == NULL);

    /* every refusal, with its message */
    REQUIRE_INT_EQ(pgrt_st_parse(buf, 7, "m.st", &f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "m.st: 7 bytes, too short for the header size");
    uint8_t huge[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}; /* 100000001 */
    REQUIRE_INT_EQ(pgrt_st_parse(huge, sizeof huge, "m.st", &f), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "header size 100000001 over the limit");
    uint8_t beyond[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' '};
    REQUIRE_INT_EQ(pgrt_st_parse(beyond, 11, "m.st", &f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "header size 9 beyond the file (11 bytes)");
    BAD("[]", 0, PGRT_EINVAL, "m.st: header is not a JSON object");
    BAD("{\"a\":", 0, PGRT_EINVAL, "m.st: byte 5: unexpected end of text");
    BAD("{\"a\":1}", 0, PGRT_EINVAL, "tensor 'a': not an object");
    BAD("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PGRT_EINVAL,
        "tensor 'a': unknown dtype 'F33'");
    BAD("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PGRT_EINVAL,
        "tensor 'a': dtype: missing");
    BAD("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, PGRT_EINVAL,
        "tensor 'a': shape: missing");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, PGRT_EINVAL,
        "tensor 'a': shape[0]: not an integer >= 0");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, PGRT_EINVAL,
        "shape[0]");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
        PGRT_ERANGE, "9 dimensions, over the limit of 8");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
        4, PGRT_ERANGE, "element count overflows");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, PGRT_EINVAL,
        "data_offsets: expected [begin, end]");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, PGRT_EINVAL,
        "data_offsets end 0 before begin 4");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, PGRT_EINVAL,
        "data_offsets end 8 beyond the data (4 bytes)");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, PGRT_EINVAL,
        "4 bytes in data_offsets, but F32 x 2 elements take 8");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
        PGRT_EINVAL, "tensor 'a': unknown field 'x'");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, PGRT_EINVAL, "tensor 'b' overlaps the one before it");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
        12, PGRT_EINVAL, "gap of 4 bytes before tensor 'b'");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, PGRT_EINVAL,
        "gap of 4 bytes before tensor 'a'");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, PGRT_EINVAL,
        "2 bytes of data after the last tensor");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4, PGRT_EINVAL, "duplicate key \"a\"");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, PGRT_EINVAL, "__metadata__: 'k' is not a string");
    BAD("{\"__metadata__\":[]}", 0, PGRT_EINVAL, "__metadata__: not an object");
}

static void test_write(const char *dir)
{
    char path[4096];
    path_in(path, sizeof path, dir, "w.safetensors");
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {0x3f80, 0x4000, 0xbf80};
    pgrt_st_out t[3] = {
        {.name = "zeta", .dtype = PGRT_ST_F32, .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "alpha\"q", .dtype = PGRT_ST_BF16, .ndim = 1, .shape = {3}, .data = h},
        {.name = "empty", .dtype = PGRT_ST_F16, .ndim = 2, .shape = {0, 4}, .data = NULL},
    };
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    REQUIRE_INT_EQ(pgrt_st_write(path, t, 3, mk, mv, 1), 0);
    /* the canonical bytes: sorted names, offsets in that order, padding */
    FILE *fp = fopen(path, "rb");
    uint8_t raw[512];
    size_t n = fp ? fread(raw, 1, sizeof raw, fp) : 0;
    if (fp)
        fclose(fp);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"alpha\\\"q\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                       "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[6,6]},"
                       "\"zeta\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[6,30]}}";
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | raw[i];
    REQUIRE_INT_EQ(hl % 8, 0);
    REQUIRE_INT_EQ(hl, (strlen(want) + 7) / 8 * 8);
    REQUIRE(memcmp(raw + 8, want, strlen(want)) == 0);
    for (size_t i = strlen(want); i < hl; i++)
        REQUIRE_INT_EQ(raw[8 + i], ' ');
    REQUIRE_INT_EQ(n, 8 + hl + 30);

    pgrt_st_file *f = NULL;
    REQUIRE_INT_EQ(pgrt_st_open(path, &f), 0);
    REQUIRE_INT_EQ(pgrt_st_count(f), 3);
    const pgrt_st_tensor *z = pgrt_st_find(f, "zeta");
    REQUIRE(z && z->nbytes == sizeof w && memcmp(z->data, w, sizeof w) == 0);
    const pgrt_st_tensor *a = pgrt_st_find(f, "alpha\"q");
    REQUIRE(a && a->dtype == PGRT_ST_BF16 && memcmp(a->data, h, sizeof h) == 0);
    pgrt_st_close(&f);

    /* failures leave the old file and no temporary behind */
    int before = dir_entries(dir);
    pgrt_st_out dup[2] = {t[0], t[0]};
    REQUIRE_INT_EQ(pgrt_st_write(path, dup, 2, NULL, NULL, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "tensor 'zeta' given twice");
    pgrt_st_out noname = t[0];
    noname.name = "";
    REQUIRE_INT_EQ(pgrt_st_write(path, &noname, 1, NULL, NULL, 0), PGRT_EINVAL);
    noname.name = "__metadata__";
    REQUIRE_INT_EQ(pgrt_st_write(path, &noname, 1, NULL, NULL, 0), PGRT_EINVAL);
    pgrt_st_out nodata = t[0];
    nodata.data = NULL;
    REQUIRE_INT_EQ(pgrt_st_write(path, &nodata, 1, NULL, NULL, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "no data");
    REQUIRE_INT_EQ(dir_entries(dir), before);
    REQUIRE_INT_EQ(pgrt_st_open(path, &f), 0);
    REQUIRE_INT_EQ(pgrt_st_count(f), 3);
    pgrt_st_close(&f);
    char missing[4096];
    path_in(missing, sizeof missing, dir, "no/such/dir.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(missing, t, 1, NULL, NULL, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "No such file");
    REQUIRE_INT_EQ(dir_entries(dir), before);
    /* a file cut short is refused when read */
    char cut[4096];
    path_in(cut, sizeof cut, dir, "cut.safetensors");
    REQUIRE_INT_EQ(write_bytes(cut, raw, n - 1), 0);
    REQUIRE_INT_EQ(pgrt_st_open(cut, &f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "cut.safetensors: tensor 'zeta': data_offsets end 30 "
                                          "beyond the data (29 bytes)");
    unlink(cut);
    REQUIRE_INT_EQ(pgrt_st_open(missing, &f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "No such file");
    unlink(path);

    /* atomic text writes */
    path_in(path, sizeof path, dir, "x.txt");
    REQUIRE_INT_EQ(pgrt_file_write_atomic(path, "one", 3), 0);
    REQUIRE_INT_EQ(pgrt_file_write_atomic(path, "three", 5), 0);
    struct stat st;
    REQUIRE(stat(path, &st) == 0 && st.st_size == 5);
    unlink(path);
}

static void write_one(const char *dir, const char *file, const char *name, float v)
{
    char p[4096];
    path_in(p, sizeof p, dir, file);
    float d[2] = {v, v};
    pgrt_st_out t = {.name = name, .dtype = PGRT_ST_F32, .ndim = 1, .shape = {2}, .data = d};
    if (pgrt_st_write(p, &t, 1, NULL, NULL, 0) != 0)
        fprintf(stderr, "write %s: %s\n", p, pgrt_last_message());
}

static void test_set(const char *dir)
{
    pgrt_st_set *s = NULL;
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "neither model.safetensors nor "
                                          "model.safetensors.index.json");
    write_one(dir, "model-00001-of-00002.safetensors", "b", 1);
    write_one(dir, "model-00002-of-00002.safetensors", "a", 2);
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":16},\"weight_map\":{"
               "\"b\":\"model-00001-of-00002.safetensors\","
               "\"a\":\"model-00002-of-00002.safetensors\"}}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), 0);
    REQUIRE_INT_EQ(pgrt_st_set_count(s), 2);
    REQUIRE_STR_EQ(pgrt_st_set_at(s, 0)->name, "a");
    const pgrt_st_tensor *t = pgrt_st_set_find(s, "b");
    REQUIRE(t && ((const float *)t->data)[0] == 1.0f);
    REQUIRE(pgrt_st_set_find(s, "c") == NULL);
    pgrt_st_set_close(&s);
    REQUIRE(s == NULL);

    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b\":\"model-00001-of-00002.safetensors\","
               "\"a\":\"model-00001-of-00002.safetensors\"}}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "weight_map puts 'a' in model-00001-of-00002.safetensors, which lacks it");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b\":\"model-00001-of-00002.safetensors\"}}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), 0); /* a shard no one names is not opened */
    pgrt_st_set_close(&s);
    write_one(dir, "model-00003-of-00003.safetensors", "a", 3);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b\":\"model-00001-of-00002.safetensors\","
               "\"a\":\"model-00002-of-00002.safetensors\","
               "\"c\":\"model-00003-of-00003.safetensors\"}}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "lacks it");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b\":\"../model-00001-of-00002.safetensors\"}}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "weight_map: 'b': not a file name in the directory");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":[]}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "weight_map: missing or not an object");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"model-00002-of-00002.safetensors\","
               "\"b\":\"missing.safetensors\"}}");
    REQUIRE_INT_EQ(pgrt_st_set_open(dir, &s), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "missing.safetensors: No such file");
    REQUIRE(s == NULL);
}

/* Text from a file or a path reaches a message escaped, as ptxgen-dump
 * writes it: a tensor name that would retitle the terminal (OSC 0 ... BEL)
 * or clear it comes out as printable text, backslashes doubled. */
static void test_escapes(const char *dir)
{
    BAD("{\"\\u001b]0;pwned\\u0007\":1}", 0, PGRT_EINVAL,
        "tensor '\\x1b]0;pwned\\x07': not an object");
    REQUIRE(printable_line(pgrt_last_message()));
    BAD("{\"a\\u009b2J\":{\"dtype\":\"F\\u001b[2J\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4, PGRT_EINVAL, "tensor 'a\\xc2\\x9b2J': unknown dtype 'F\\x1b[2J'");
    REQUIRE(printable_line(pgrt_last_message()));
    BAD("{\"back\\\\slash\\ttab\":1}", 0, PGRT_EINVAL, "tensor 'back\\\\slash\\ttab'");
    BAD("{\"caf\xc3\xa9\":1}", 0, PGRT_EINVAL, "tensor 'caf\xc3\xa9': not an object");
    /* a path: the message names it escaped */
    char path[4096];
    path_in(path, sizeof path, dir, "\x1b]0;pwned\x07\n.safetensors");
    pgrt_st_file *f = NULL;
    REQUIRE_INT_EQ(pgrt_st_open(path, &f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "/\\x1b]0;pwned\\x07\\n.safetensors: No such file");
    REQUIRE(printable_line(pgrt_last_message()));

    /* the escaper itself: invalid UTF-8 byte by byte, long text cut whole */
    char out[16], wide[32];
    REQUIRE_INT_EQ(pg_text_escape(wide, sizeof wide, "a\xff\xc0\xaf" "b"), 14);
    REQUIRE_STR_EQ(wide, "a\\xff\\xc0\\xafb");
    REQUIRE_INT_EQ(pg_text_escape(out, sizeof out, "0123456789abcdefgh"), 15);
    REQUIRE_STR_EQ(out, "0123456789ab...");
    REQUIRE_INT_EQ(pg_text_escape(out, sizeof out, "0123456789a\x1b"), 14);
    REQUIRE_STR_EQ(out, "0123456789a...");
    REQUIRE_INT_EQ(pg_text_escape(out, 3, "abc"), 0);
    REQUIRE_STR_EQ(out, "");
}

static bool same_bytes(const char *path, const char *want)
{
    char buf[64] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    return f && n == strlen(want) && memcmp(buf, want, n) == 0;
}

/* The atomic writer's temporary: any file name legal on its own works, a
 * link planted where an old scheme put its temporary is never written
 * through, modes follow the umask, and a failed write leaves nothing. */
static void test_safe_write(const char *dir)
{
    float w[4] = {1, 2, 3, 4};
    pgrt_st_out t = {.name = "w", .dtype = PGRT_ST_F32, .ndim = 1, .shape = {4}, .data = w};
    pgrt_st_file *f = NULL;

    /* a 255-byte name (NAME_MAX) round-trips; the old temporary added ~20 */
    char name[256], path[4096];
    memset(name, 'n', 255);
    memcpy(name + 255 - 12, ".safetensors", 12);
    name[255] = '\0';
    path_in(path, sizeof path, dir, name);
    REQUIRE_INT_EQ(pgrt_st_write(path, &t, 1, NULL, NULL, 0), 0);
    REQUIRE_INT_EQ(pgrt_st_open(path, &f), 0);
    const pgrt_st_tensor *r = pgrt_st_find(f, "w");
    REQUIRE(r && r->nbytes == sizeof w && memcmp(r->data, w, sizeof w) == 0);
    pgrt_st_close(&f);
    REQUIRE_INT_EQ(dir_entries(dir), 1);
    unlink(path);

    /* links at every predictable name: the old "<dir>/.<base>.tmp.<pid>.<k>",
     * "<path>.tmp" and "<path>.tmp<pid>"; none may be written through */
    char victim[4096], link[4200];
    path_in(victim, sizeof victim, dir, "victim");
    REQUIRE_INT_EQ(write_text(dir, "victim", "precious"), 0);
    path_in(path, sizeof path, dir, "m.safetensors");
    for (unsigned k = 0; k < 64; k++) {
        snprintf(link, sizeof link, "%s/.m.safetensors.tmp.%ld.%u", dir, (long)getpid(), k);
        REQUIRE(symlink(victim, link) == 0);
    }
    snprintf(link, sizeof link, "%s.tmp", path);
    REQUIRE(symlink(victim, link) == 0);
    snprintf(link, sizeof link, "%s.tmp%ld", path, (long)getpid());
    REQUIRE(symlink(victim, link) == 0);
    int planted = dir_entries(dir);
    REQUIRE_INT_EQ(pgrt_st_write(path, &t, 1, NULL, NULL, 0), 0);
    REQUIRE_INT_EQ(pgrt_file_write_atomic(path, "text", 4), 0);
    REQUIRE(same_bytes(victim, "precious"));
    REQUIRE(same_bytes(path, "text"));
    REQUIRE_INT_EQ(dir_entries(dir), planted + 1);
    /* a link at the target itself is replaced, not followed */
    snprintf(link, sizeof link, "%s/l.txt", dir);
    REQUIRE(symlink(victim, link) == 0);
    REQUIRE_INT_EQ(pgrt_file_write_atomic(link, "new", 3), 0);
    struct stat st;
    REQUIRE(lstat(link, &st) == 0 && S_ISREG(st.st_mode));
    REQUIRE(same_bytes(link, "new"));
    REQUIRE(same_bytes(victim, "precious"));
    unlink(link);
    unlink(path);

    /* the shared primitive: O_NOFOLLOW|O_EXCL and a short name */
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
    REQUIRE(dirfd >= 0);
    char tmp[PGRT_TEMP_NAME_MAX];
    int fd = pgrt_temp_create(dirfd, tmp);
    REQUIRE(fd >= 0);
    REQUIRE_INT_EQ(strlen(tmp), PGRT_TEMP_NAME_MAX - 1);
    close(fd);
    unlinkat(dirfd, tmp, 0);
    close(dirfd);

    /* modes: 0666 less the umask for a new file; a replaced one keeps its own */
    mode_t old = umask(027);
    path_in(path, sizeof path, dir, "mode.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(path, &t, 1, NULL, NULL, 0), 0);
    REQUIRE(stat(path, &st) == 0);
    REQUIRE_INT_EQ(st.st_mode & 07777, 0640);
    umask(0);
    unlink(path);
    REQUIRE_INT_EQ(pgrt_file_write_atomic(path, "x", 1), 0);
    REQUIRE(stat(path, &st) == 0);
    REQUIRE_INT_EQ(st.st_mode & 07777, 0666);
    REQUIRE(chmod(path, 0600) == 0);
    REQUIRE_INT_EQ(pgrt_st_write(path, &t, 1, NULL, NULL, 0), 0);
    REQUIRE(stat(path, &st) == 0);
    REQUIRE_INT_EQ(st.st_mode & 07777, 0600);
    umask(old);

    /* a write that fails part-way (file size limit) leaves the old file and
     * nothing else */
    int before = dir_entries(dir);
    static float big[1 << 14];
    pgrt_st_out b = {.name = "big", .dtype = PGRT_ST_F32, .ndim = 1, .shape = {1 << 14},
                     .data = big};
    struct rlimit lim, small = {4096, 4096};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &lim) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    small.rlim_max = lim.rlim_max;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    int rc = pgrt_st_write(path, &b, 1, NULL, NULL, 0);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    signal(SIGXFSZ, prev);
    REQUIRE_INT_EQ(rc, PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "File too large");
    REQUIRE_INT_EQ(dir_entries(dir), before);
    REQUIRE_INT_EQ(pgrt_st_open(path, &f), 0);
    REQUIRE(pgrt_st_find(f, "w") != NULL);
    pgrt_st_close(&f);
    unlink(path);
}

/* pgrt_st_tensor_to_f32: each 16-bit format widened bit for bit, a range
 * of the tensor, and the refusals. */
static void test_to_f32(void)
{
    /* bf16: 1.0, -2.0, +inf; f16: 1.0, -0.0, the smallest subnormal, -inf, NaN */
    const uint8_t bf[] = {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f};
    const uint8_t hf[] = {0x00, 0x3c, 0x00, 0x80, 0x01, 0x00, 0x00, 0xfc, 0x01, 0x7e};
    const uint8_t f4[] = {0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0xbf}; /* 3.0, -1.0 */
    pgrt_st_tensor t = {.name = "t", .dtype = PGRT_ST_BF16, .ndim = 1, .count = 3, .data = bf};
    float f[5];
    REQUIRE_INT_EQ(pgrt_st_tensor_to_f32(&t, 0, 3, f), 0);
    REQUIRE(f[0] == 1.0f && f[1] == -2.0f && isinf(f[2]) && f[2] > 0);
    t = (pgrt_st_tensor){.name = "t", .dtype = PGRT_ST_F16, .ndim = 1, .count = 5, .data = hf};
    REQUIRE_INT_EQ(pgrt_st_tensor_to_f32(&t, 0, 5, f), 0);
    REQUIRE(f[0] == 1.0f && f[1] == 0.0f && signbit(f[1]) && f[2] == ldexpf(1.0f, -24));
    REQUIRE(isinf(f[3]) && f[3] < 0 && isnan(f[4]));
    t = (pgrt_st_tensor){.name = "t", .dtype = PGRT_ST_F32, .ndim = 1, .count = 2, .data = f4};
    REQUIRE_INT_EQ(pgrt_st_tensor_to_f32(&t, 1, 1, f), 0);
    REQUIRE(f[0] == -1.0f);
    REQUIRE_INT_EQ(pgrt_st_tensor_to_f32(&t, 1, 2, f), PGRT_ERANGE);
    t.dtype = PGRT_ST_I32;
    REQUIRE_INT_EQ(pgrt_st_tensor_to_f32(&t, 0, 1, f), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "dtype I32 is not F32, BF16 or F16");
}

int main(void)
{
    char dir[4096], sdir[4096], wdir[4096];
    if (!scratch_dir(dir, sizeof dir) || !scratch_dir(sdir, sizeof sdir) ||
        !scratch_dir(wdir, sizeof wdir)) {
        fprintf(stderr, "no scratch directory\n");
        return 1;
    }
    test_parse();
    test_write(dir);
    test_set(sdir);
    test_safe_write(wdir);
    test_escapes(wdir);
    test_to_f32();
    REQUIRE_INT_EQ(pgrt_st_dtype_size(PGRT_ST_BF16), 2);
    REQUIRE_STR_EQ(pgrt_st_dtype_name(PGRT_ST_F8_E4M3), "F8_E4M3");
    remove_tree(dir);
    remove_tree(sdir);
    remove_tree(wdir);
    TEST_DONE();
}
