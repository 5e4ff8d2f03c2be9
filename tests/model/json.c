/* SPDX-License-Identifier: MIT */
/* The strict JSON reader: the DOM it builds and every refusal. */
#include "pgrt_json.h"
#include "ptxgen/pgrt_model.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

static pgrt_json *parse(const char *s)
{
    pgrt_json *d = NULL;
    int rc = pgrt_json_parse(s, strlen(s), NULL, NULL, &d);
    if (rc)
        fprintf(stderr, "parse failed: %s\n", pgrt_last_message());
    return d;
}

/* Parse must fail with code and a message containing want. */
#define REFUSED(text, code, want)                                              \
    do {                                                                       \
        pgrt_json *d_ = NULL;                                                  \
        int rc_ = pgrt_json_parse((text), sizeof(text) - 1, NULL, "t.json", &d_); \
        REQUIRE_INT_EQ(rc_, (code));                                           \
        REQUIRE(d_ == NULL);                                                   \
        REQUIRE_CONTAINS(pgrt_last_message(), (want));                         \
    } while (0)

static void test_dom(void)
{
    pgrt_json *d = parse(" {\"b\": [1, -2.5e1, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"],"
                         "\"a\": {\"n\": 9007199254740993, \"z\": 0}, \"s\": \"\\\"\\\\/\"}\n");
    REQUIRE(d != NULL);
    if (!d)
        return;
    const pgrt_jval *r = pgrt_json_root(d);
    REQUIRE_INT_EQ(pgrt_jval_type(r), PGRT_JSON_OBJECT);
    REQUIRE_INT_EQ(pgrt_jval_count(r), 3);
    REQUIRE_STR_EQ(pgrt_jval_key_at(r, 0), "b"); /* document order kept */
    REQUIRE_STR_EQ(pgrt_jval_key_at(r, 2), "s");
    const pgrt_jval *b = pgrt_jval_member(r, "b");
    REQUIRE_INT_EQ(pgrt_jval_count(b), 6);
    REQUIRE_INT_EQ(pgrt_jval_offset(b), 7);
    int64_t i = 0;
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(b, 0), 0, 10, &i), 0);
    REQUIRE_INT_EQ(i, 1);
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(b, 0), 2, 10, &i), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(b, 1), -100, 100, &i), PGRT_EINVAL);
    double x = 0;
    REQUIRE_INT_EQ(pgrt_jval_double(pgrt_jval_item(b, 1), &x), 0);
    REQUIRE(x == -25.0);
    bool t = false;
    REQUIRE_INT_EQ(pgrt_jval_bool(pgrt_jval_item(b, 2), &t), 0);
    REQUIRE(t);
    REQUIRE_INT_EQ(pgrt_jval_bool(pgrt_jval_item(b, 3), &t), 0);
    REQUIRE(!t);
    REQUIRE(pgrt_jval_is_null(pgrt_jval_item(b, 4)));
    REQUIRE(!pgrt_jval_is_null(pgrt_jval_item(b, 6))); /* absent is not null */
    REQUIRE(pgrt_jval_item(b, 6) == NULL);
    size_t len = 0;
    REQUIRE_STR_EQ(pgrt_jval_string(pgrt_jval_item(b, 5), &len), "x\xc3\xa9\xf0\x9f\x98\x80\n");
    REQUIRE_INT_EQ(len, 8);
    REQUIRE(pgrt_jval_string(pgrt_jval_item(b, 0), NULL) == NULL);
    REQUIRE_STR_EQ(pgrt_jval_string(pgrt_jval_member(r, "s"), NULL), "\"\\/");
    const pgrt_jval *a = pgrt_jval_member(r, "a");
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_member(a, "n"), INT64_MIN, INT64_MAX, &i), 0);
    REQUIRE_INT_EQ(i, 9007199254740993LL); /* exact, not through a double */
    REQUIRE(pgrt_jval_member(a, "missing") == NULL);
    REQUIRE(pgrt_jval_member(b, "n") == NULL); /* not an object */
    pgrt_json_destroy(&d);
    REQUIRE(d == NULL);
    pgrt_json_destroy(&d);

    /* int64 edges */
    d = parse("[9223372036854775807, -9223372036854775808, 9223372036854775808, 1e2, 1E400]");
    REQUIRE(d == NULL); /* 1E400 overflows a double */
    d = parse("[9223372036854775807, -9223372036854775808, 9223372036854775808, 1e2, 0.0]");
    REQUIRE(d != NULL);
    r = pgrt_json_root(d);
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(r, 0), INT64_MIN, INT64_MAX, &i), 0);
    REQUIRE(i == INT64_MAX);
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(r, 1), INT64_MIN, INT64_MAX, &i), 0);
    REQUIRE(i == INT64_MIN);
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(r, 2), INT64_MIN, INT64_MAX, &i), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_jval_int64(pgrt_jval_item(r, 3), INT64_MIN, INT64_MAX, &i), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_jval_double(pgrt_jval_item(r, 3), &x), 0);
    REQUIRE(x == 100.0);
    REQUIRE_INT_EQ(pgrt_jval_count(r), 5);
    pgrt_json_destroy(&d);

    /* scalars at the root, empty containers, a big object (sorted lookup) */
    d = parse("\"only\"");
    REQUIRE_STR_EQ(pgrt_jval_string(pgrt_json_root(d), NULL), "only");
    pgrt_json_destroy(&d);
    d = parse("[{}, []]");
    REQUIRE_INT_EQ(pgrt_jval_count(pgrt_jval_item(pgrt_json_root(d), 0)), 0);
    REQUIRE_INT_EQ(pgrt_jval_type(pgrt_jval_item(pgrt_json_root(d), 1)), PGRT_JSON_ARRAY);
    pgrt_json_destroy(&d);
    char big[200000];
    size_t at = 0;
    big[at++] = '{';
    for (int k = 999; k >= 0; k--)
        at += (size_t)snprintf(big + at, sizeof big - at, "%s\"key%d\":%d", k == 999 ? "" : ",",
                               k, k);
    big[at++] = '}';
    big[at] = '\0';
    d = parse(big);
    REQUIRE(d != NULL);
    bool all = true;
    for (int k = 0; k < 1000; k++) {
        char key[16];
        snprintf(key, sizeof key, "key%d", k);
        if (pgrt_jval_int64(pgrt_jval_member(pgrt_json_root(d), key), 0, 1000, &i) != 0 ||
            i != k)
            all = false;
    }
    REQUIRE(all);
    pgrt_json_destroy(&d);
    /* a duplicate among many, far apart, found by the sort */
    snprintf(big + at - 1, sizeof big - (at - 1), ",\"key500\":1}");
    pgrt_json *dd = NULL;
    REQUIRE_INT_EQ(pgrt_json_parse(big, strlen(big), NULL, NULL, &dd), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "duplicate key \"key500\"");
    REQUIRE(dd == NULL);
}

static void test_refusals(void)
{
    REFUSED("{\"a\":1,\"a\":2}", PGRT_EINVAL, "t.json: byte 11: duplicate key \"a\"");
    REFUSED("{\"a\":1} x", PGRT_EINVAL, "byte 8: text after the JSON value");
    REFUSED("", PGRT_EINVAL, "byte 0: unexpected end of text");
    REFUSED("   ", PGRT_EINVAL, "unexpected end of text");
    REFUSED("[1,]", PGRT_EINVAL, "byte 3: unexpected character");
    REFUSED("{\"a\":1,}", PGRT_EINVAL, "expected a key string");
    REFUSED("{'a':1}", PGRT_EINVAL, "expected a key string");
    REFUSED("{\"a\" 1}", PGRT_EINVAL, "expected ':'");
    REFUSED("[1 2]", PGRT_EINVAL, "expected ',' or ']'");
    REFUSED("{\"a\":1", PGRT_EINVAL, "unterminated object");
    REFUSED("[1", PGRT_EINVAL, "unterminated array");
    REFUSED("\"abc", PGRT_EINVAL, "byte 0: unterminated string");
    REFUSED("\"a\tb\"", PGRT_EINVAL, "byte 2: control character in a string");
    REFUSED("\"\\x\"", PGRT_EINVAL, "bad escape");
    REFUSED("\"\\u12\"", PGRT_EINVAL, "bad unicode escape");
    REFUSED("\"\\ud800\"", PGRT_EINVAL, "lone high surrogate");
    REFUSED("\"\\udc00\"", PGRT_EINVAL, "lone low surrogate");
    REFUSED("\"\\u0000\"", PGRT_EINVAL, "\\u0000 in a string");
    REFUSED("\"\xc0\x80\"", PGRT_EINVAL, "byte 1: invalid UTF-8");   /* overlong NUL */
    REFUSED("\"\xe0\x80\xaf\"", PGRT_EINVAL, "invalid UTF-8");       /* overlong */
    REFUSED("\"\xed\xa0\x80\"", PGRT_EINVAL, "invalid UTF-8");       /* surrogate */
    REFUSED("\"\xf4\x90\x80\x80\"", PGRT_EINVAL, "invalid UTF-8");   /* > U+10FFFF */
    REFUSED("\"\xf5\x80\x80\x80\"", PGRT_EINVAL, "invalid UTF-8");
    REFUSED("\"\xe2\x82\"", PGRT_EINVAL, "invalid UTF-8");           /* truncated */
    REFUSED("\xef\xbb\xbf{}", PGRT_EINVAL, "byte 0: unexpected character"); /* BOM */
    REFUSED("01", PGRT_EINVAL, "leading zero");
    REFUSED("-", PGRT_EINVAL, "bad number");
    REFUSED("1.", PGRT_EINVAL, "bad number");
    REFUSED("1e", PGRT_EINVAL, "bad number");
    REFUSED("+1", PGRT_EINVAL, "unexpected character");
    REFUSED("NaN", PGRT_EINVAL, "unexpected character");
    REFUSED("tru", PGRT_EINVAL, "unexpected character");
    REFUSED("1e400", PGRT_ERANGE, "number out of the range of a double");
    REFUSED("1111111111111111111111111111111111111111111111111111111111111111111111",
            PGRT_ERANGE, "number literal longer than the limit");

    /* limits */
    char deep[200];
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = '\0';
    pgrt_json *d = NULL;
    REQUIRE_INT_EQ(pgrt_json_parse(deep, 130, NULL, NULL, &d), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "byte 64: nesting deeper than the limit");
    REQUIRE_INT_EQ(pgrt_json_parse(deep + 1, 128, NULL, NULL, &d), 0); /* 64 is fine */
    pgrt_json_destroy(&d);
    pgrt_json_limits lim = {.max_depth = 2, .max_string = 4, .max_size = 32};
    REQUIRE_INT_EQ(pgrt_json_parse("[[1]]", 5, &lim, NULL, &d), 0);
    pgrt_json_destroy(&d);
    REQUIRE_INT_EQ(pgrt_json_parse("[[[1]]]", 7, &lim, NULL, &d), PGRT_ERANGE);
    REQUIRE_INT_EQ(pgrt_json_parse("\"abcd\"", 6, &lim, NULL, &d), 0);
    pgrt_json_destroy(&d);
    REQUIRE_INT_EQ(pgrt_json_parse("\"abcde\"", 7, &lim, NULL, &d), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "string longer than the limit");
    REQUIRE_INT_EQ(pgrt_json_parse("{\"abcde\":1}", 11, &lim, NULL, &d), PGRT_ERANGE);
    const char *wide = "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]";
    REQUIRE_INT_EQ(pgrt_json_parse(wide, strlen(wide), &lim, "w", &d), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "w: 37 bytes of JSON, over the limit of 32");
    /* an explicit length: a NUL inside is just a bad character */
    REQUIRE_INT_EQ(pgrt_json_parse("[1]\0", 4, NULL, NULL, &d), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_json_parse(NULL, 0, NULL, NULL, &d), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_json_parse("1", 1, NULL, NULL, NULL), PGRT_EINVAL);
}

int main(void)
{
    test_dom();
    test_refusals();
    TEST_DONE();
}
