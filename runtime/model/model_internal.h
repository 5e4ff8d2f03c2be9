/* SPDX-License-Identifier: MIT */
/* Shared by the model-layer sources: file helpers and field readers. */
#ifndef PTXGEN_MODEL_INTERNAL_H
#define PTXGEN_MODEL_INTERNAL_H

#include "pgrt_json.h"
#include "ptxgen/pgrt_model.h"
#include "rt_internal.h"
#include "safe_write.h"

/* The model layer's rt_fail: the message is formatted, then escaped whole
 * with pg_text_escape, so that a tensor name, a config string or a path
 * echoed in it reaches a terminal as text, never as a control sequence.
 * Our own format strings hold no backslash or control character: escaping
 * leaves them as written. Every message of runtime/model/ that can echo
 * outside text goes through it; RT_NONNULL's, our words alone, need not. */
#define MODEL_MSG_MAX 4096
int model_fail(int code, const char *fmt, ...) RT_PRINTF(2, 3);

/* A read-only mapping of a whole file (len may be 0: data is then NULL). */
typedef struct model_map {
    void *data;
    size_t len;
} model_map;

int model_map_open(const char *path, model_map *m);
void model_map_close(model_map *m);
/* Read a small text file (<= max bytes) into a malloc'd buffer. */
int model_read_file(const char *path, size_t max, char **data, size_t *len);
/* dir + "/" + name into buf; PGRT_ERANGE if it does not fit. */
int model_path_join(char *buf, size_t len, const char *dir, const char *name);

/* Typed members of a JSON object with messages naming what/field (json.c). A
 * missing member is an error only for the *_req forms; the others leave
 * *out as it was and return 1 (absent or null). */
int model_int_req(const pgrt_jval *obj, const char *what, const char *field, int64_t min,
                  int64_t max, int64_t *out);
int model_int_opt(const pgrt_jval *obj, const char *what, const char *field, int64_t min,
                  int64_t max, int64_t *out);
int model_double_opt(const pgrt_jval *obj, const char *what, const char *field, double *out);
int model_bool_opt(const pgrt_jval *obj, const char *what, const char *field, bool *out);
/* A string member (NULL when absent or null); a non-string is refused. */
int model_string_opt(const pgrt_jval *obj, const char *what, const char *field,
                     const char **out);

/* Append text to a growable buffer (sticky failure in b->err). */
typedef struct model_buf {
    char *p;
    size_t len, cap;
    int err;
} model_buf;
void model_buf_put(model_buf *b, const char *s, size_t n);
void model_buf_printf(model_buf *b, const char *fmt, ...) RT_PRINTF(2, 3);
/* A JSON string literal, escaped. */
void model_buf_json_string(model_buf *b, const char *s);

/* A safetensors file in memory as pgrt_st_write lays it out: parts[0] the
 * size (in len8), parts[1] the header, then the tensors' data (borrowed
 * from the pgrt_st_out, which must outlive the image). `path` names it in
 * messages. The image must not move while parts are used. */
typedef struct model_st_image {
    pgrt_span *parts;
    size_t nparts;
    char *header;
    uint8_t len8[8];
} model_st_image;
int model_st_image_build(const char *path, const pgrt_st_out *tensors, size_t n,
                         const char *const *meta_keys, const char *const *meta_values,
                         size_t n_meta, model_st_image *img);
void model_st_image_free(model_st_image *img);

/* The files a set was read from: the index (if any), then the shards. */
size_t model_st_set_path_count(const pgrt_st_set *s);
const char *model_st_set_path(const pgrt_st_set *s, size_t i);

/* An adapter config's rank_pattern and alpha_pattern, checked as
 * pgrt_adapter_config_parse checks them (`what` heads the messages:
 * "adapter_config.json: ", "adapter: ") and compiled once, to resolve
 * many pairs (adapter.c). It copies what it needs of c: c may go. */
typedef struct model_lora_keys model_lora_keys;
int model_lora_keys_new(const pgrt_adapter_config *c, const char *what, model_lora_keys **out);
/* pgrt_adapter_pair with the keys compiled. */
void model_lora_keys_pair(const model_lora_keys *k, int layer, pgrt_linear m,
                          pgrt_lora_setting *out);
void model_lora_keys_free(model_lora_keys **k);

/* "self_attn" or "mlp": the block a linear module sits in. */
const char *model_linear_block(pgrt_linear m);

#endif
