/* SPDX-License-Identifier: MIT */
/*
 * What the model readers share: files mapped and read whole, paths joined,
 * a growable text buffer with JSON string escaping, and model_fail, the
 * escaping rt_fail. Below the JSON reader and every format of runtime/model/.
 */
#include "model_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int model_map_open(const char *path, model_map *m)
{
    m->data = NULL;
    m->len = 0;
    /* O_NONBLOCK: a FIFO given as a model file must not hang the open */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return model_fail(PGRT_EINVAL, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return model_fail(PGRT_EINVAL, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return model_fail(PGRT_ERANGE, "%s: too large to map", path);
    }
    m->len = (size_t)st.st_size;
    if (m->len) {
        void *p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            m->len = 0;
            return model_fail(PGRT_EINVAL, "%s: mmap: %s", path, strerror(e));
        }
        m->data = p;
    }
    close(fd);
    return 0;
}

void model_map_close(model_map *m)
{
    if (m->data)
        munmap(m->data, m->len);
    m->data = NULL;
    m->len = 0;
}

int model_read_file(const char *path, size_t max, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    model_map m;
    int rc = model_map_open(path, &m);
    if (rc)
        return rc;
    if (m.len > max) {
        model_map_close(&m);
        return model_fail(PGRT_ERANGE, "%s: %zu bytes, over the limit of %zu", path, m.len, max);
    }
    char *p = malloc(m.len + 1);
    if (!p) {
        model_map_close(&m);
        return model_fail(PGRT_ENOMEM, "out of memory");
    }
    if (m.len)
        memcpy(p, m.data, m.len);
    p[m.len] = '\0';
    *len = m.len;
    *data = p;
    model_map_close(&m);
    return 0;
}

int model_path_join(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len)
        return model_fail(PGRT_ERANGE, "path too long: %s/%s", dir, name);
    return 0;
}

void model_buf_put(model_buf *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->err = PGRT_ENOMEM;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void model_buf_printf(model_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->err = b->err ? b->err : PGRT_ERANGE;
        return;
    }
    model_buf_put(b, tmp, (size_t)n);
}

void model_buf_json_string(model_buf *b, const char *s)
{
    model_buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            model_buf_put(b, e, 2);
        } else if (*p < 0x20) {
            model_buf_printf(b, "\\u%04x", *p);
        } else {
            model_buf_put(b, (const char *)p, 1);
        }
    }
    model_buf_put(b, "\"", 1);
}

int model_fail(int code, const char *fmt, ...)
{
    char raw[MODEL_MSG_MAX], safe[MODEL_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    pg_text_escape(safe, sizeof safe, raw);
    return rt_fail(code, "%s", safe);
}
