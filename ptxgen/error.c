/* SPDX-License-Identifier: MIT */
/* Error codes as words, from the one table in ptxgen.h; a kernel's sticky
 * error and its message (pg_fail), which every other file of ptxgen/ may
 * record, so it sits below them all; and text made safe for a message line. */
#include "internal.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *pg_strerror(int err)
{
    switch (err) {
    case PG_OK:
        return "success";
#define PG_X_(name, val, msg)                                                  \
    case PG_##name:                                                            \
        return msg;
        PG_ERRNO_MAP(PG_X_)
#undef PG_X_
    }
    return "unknown error";
}

const char *pg_err_name(int err)
{
    switch (err) {
    case PG_OK:
        return "PG_OK";
#define PG_X_(name, val, msg)                                                  \
    case PG_##name:                                                            \
        return "PG_" #name;
        PG_ERRNO_MAP(PG_X_)
#undef PG_X_
    }
    return "PG_UNKNOWN";
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 0)))
#endif
static int vfail(pg_kernel *k, int err, const char *fmt, va_list ap)
{
    if (!k || k->err)
        return k ? k->err : err;
    k->err = err;
    int n = snprintf(k->msg, sizeof k->msg, "%s: ", k->name ? k->name : "?");
    if (n < 0 || (size_t)n >= sizeof k->msg)
        n = 0;
    vsnprintf(k->msg + n, sizeof k->msg - (size_t)n, fmt, ap);
    return err;
}

int pg_fail(pg_kernel *k, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(k, err, fmt, ap);
    va_end(ap);
    return rc;
}

/* The public face of pg_fail, for kernel definitions outside the library:
 * a code that is not an error (0 or positive) is refused as PG_EINVAL, so
 * that a failed kernel always has an error to return. */
int pg_kernel_fail(pg_kernel *k, int err, const char *fmt, ...)
{
    if (err >= 0)
        err = PG_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(k, err, fmt ? fmt : "(no message)", ap);
    va_end(ap);
    return rc;
}

int pg_kernel_error(const pg_kernel *k) { return k ? k->err : PG_EINVAL; }
const char *pg_kernel_message(const pg_kernel *k) { return k ? k->msg : "no kernel"; }

size_t pg_text_escape(char *dst, size_t cap, const char *text)
{
    static const char hex[] = "0123456789abcdef";
    if (!dst || cap < 4) {
        if (dst && cap)
            dst[0] = '\0';
        return 0;
    }
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    const size_t room = cap - 4; /* keep "..." and the NUL */
    size_t o = 0;
    while (*s) {
        char piece[4];
        size_t n = 0, used = 1;
        unsigned char c = s[0];
        if (c == '\\' || c == '\n' || c == '\r' || c == '\t') {
            piece[n++] = '\\';
            piece[n++] = c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c >= 0x20 && c < 0x7f) {
            piece[n++] = (char)c;
        } else {
            /* A well-formed UTF-8 sequence that is not a C1 control (U+0080
             * to U+009F: CSI, OSC...) passes; anything else is escaped byte
             * by byte. */
            size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                         : c >= 0xe0 && c <= 0xef ? 3
                         : c >= 0xf0 && c <= 0xf4 ? 4
                                                  : 0;
            bool ok = len > 0;
            for (size_t k = 1; ok && k < len; k++)
                ok = (s[k] & 0xc0) == 0x80;
            if (ok && len == 2)
                ok = !(c == 0xc2 && s[1] < 0xa0);
            if (ok && len == 3)
                ok = !(c == 0xe0 && s[1] < 0xa0) && !(c == 0xed && s[1] >= 0xa0);
            if (ok && len == 4)
                ok = !(c == 0xf0 && s[1] < 0x90) && !(c == 0xf4 && s[1] >= 0x90);
            if (ok) {
                memcpy(piece, s, len);
                n = used = len;
            } else {
                piece[n++] = '\\';
                piece[n++] = 'x';
                piece[n++] = hex[c >> 4];
                piece[n++] = hex[c & 15];
            }
        }
        if (o + n > room) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(dst + o, piece, n);
        o += n;
        s += used;
    }
    dst[o] = '\0';
    return o;
}
